/* Checked parsing of numbers, booleans and durations from strings that come
 * from outside (flags, environment, config files, sysfs). Rules for all:
 * the whole string is consumed; no leading or trailing blanks; unsigned
 * parsers take no sign ("-1" and "+1" are -EINVAL); signed parsers take an
 * optional leading '-' but no '+'; out of range is -ERANGE; empty, NULL or
 * garbage is -EINVAL. *ret is written only on success. Never use atoi,
 * sscanf or an unchecked strtol instead (STYLE.md habit 12). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"

/* Decimal. Leading zeros are allowed ("007" is 7). */
int mk_parse_u32(const char *s, uint32_t *ret) _nonnull_(2) _wur_;
int mk_parse_u64(const char *s, uint64_t *ret) _nonnull_(2) _wur_;
int mk_parse_int(const char *s, int *ret) _nonnull_(2) _wur_;
int mk_parse_long(const char *s, long *ret) _nonnull_(2) _wur_;

/* base 2..36: digits of that base only, no prefix ("0x10" in base 16 is
 * -EINVAL). base 0 detects the base as Go's strconv.ParseUint(s, 0, ...):
 * "0x"/"0X" hex, "0b"/"0B" binary, "0o"/"0O" or a leading "0" octal, else
 * decimal; a prefix needs at least one digit after it. Go's '_' digit
 * separators are not accepted. Used for mig-parted device filters
 * ("0x20B010DE"). Other bases: -EINVAL. */
int mk_parse_u32_base(const char *s, unsigned base, uint32_t *ret) _nonnull_(3) _wur_;
int mk_parse_u64_base(const char *s, unsigned base, uint64_t *ret) _nonnull_(3) _wur_;

/* true/false, yes/no, on/off, 1/0, y/n, t/f; case-insensitive. */
int mk_parse_bool(const char *s, bool *ret) _nonnull_(2) _wur_;

/* A duration as a sequence of <decimal><unit> terms, unit one of "h", "m",
 * "s", "ms" ("2m", "30s", "500ms", "1m30s"), or a bare "0". Fractions and
 * units below a millisecond are -EINVAL; over UINT64_MAX ms is -ERANGE. */
int mk_parse_duration_ms(const char *s, uint64_t *ret) _nonnull_(2) _wur_;

/* For "did you mean": the candidate (of n, NULL entries skipped) closest to
 * `word` by edit distance (insertions, deletions, substitutions; case
 * ignored), if it is close enough to be a typo: at most 2 edits and fewer than
 * half of the longer word. NULL when none is. Words longer than 63 bytes match
 * nothing. */
const char *mk_closest_word(const char *word, const char *const *candidates, size_t n);
