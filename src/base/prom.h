/* Prometheus text exposition: label values as every metrics writer prints
 * them (the vGPU monitor's, the scheduler's). What a label holds may come
 * from a file a container wrote or an object of the cluster: it is printed
 * as valid UTF-8 (each byte that does not start a well-formed sequence
 * becomes U+FFFD) with the format's escapes (\\, \", \n), so no value can
 * make a scraper reject the whole page or add a line of its own. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/macro.h"

struct mk_buf;

/* Appends `v`, escaped and made valid UTF-8, without quotes. 0 or the
 * mk_buf error (-E2BIG over its cap, -ENOMEM). */
int mk_prom_label_value(struct mk_buf *b, const char *v) _nonnull_(1, 2) _wur_;

/* Appends `key="value"`, after a ',' unless `first`. */
int mk_prom_label(struct mk_buf *b, const char *key, const char *v, bool first) _nonnull_(1, 2, 3) _wur_;

/* The length of the well-formed UTF-8 sequence at s (1..4 bytes, RFC 3629:
 * no overlongs, no surrogates, nothing past U+10FFFF), 0 when s does not
 * start one (a NUL ends s). */
size_t mk_utf8_sequence_len(const char *s) _nonnull_(1);

/* Appends s with each byte that starts no well-formed sequence replaced by
 * U+FFFD (for JSON, which takes only valid UTF-8). 0 or the mk_buf error. */
int mk_utf8_append_valid(struct mk_buf *b, const char *s) _nonnull_(1, 2) _wur_;

/* True when s is well-formed UTF-8 throughout. */
bool mk_utf8_valid(const char *s) _nonnull_(1);
