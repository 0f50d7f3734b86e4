/* Human detail for a failure. Functions return -errno; when the caller passes a
 * struct mk_error *, they also fill in a message and, for parsers, where the
 * fault is: file:line:column or a field path. NULL means "no detail wanted". */
#pragma once

#include <stddef.h>

#include "base/macro.h"

#define MK_ERROR_MSG_MAX 512
#define MK_ERROR_LOC_MAX 256

struct mk_error {
        int code;                       /* negative errno, 0 when unset */
        char file[MK_ERROR_LOC_MAX];    /* input file, "" when none */
        unsigned line, column;          /* 1-based; 0 when unknown */
        char field[MK_ERROR_LOC_MAX];   /* field path ("mig-configs.a[0].devices"), "" when none */
        char msg[MK_ERROR_MSG_MAX];
};

/* Each setter returns `code` (a negative errno) so callers can write
 * `return mk_error_set(e, -EINVAL, "...")`. A NULL `e` is allowed. Setting an
 * error that is already set replaces it. Messages are truncated at
 * MK_ERROR_MSG_MAX with a trailing "...". */
int mk_error_set(struct mk_error *e, int code, const char *fmt, ...) _printf_(3, 4);
int mk_error_set_at(struct mk_error *e, int code, const char *file, unsigned line, unsigned column,
                    const char *fmt, ...) _printf_(6, 7);
int mk_error_set_field(struct mk_error *e, int code, const char *field, const char *fmt, ...)
        _printf_(4, 5);

/* Prefixes the existing message with "<prefix>: " (for callers adding context). */
void mk_error_prefix(struct mk_error *e, const char *fmt, ...) _printf_(2, 3);

/* For a public entry point whose inner code may fail without detail (a bare
 * -ENOMEM): when `code` is negative and `e` holds no error yet, sets
 * "<fmt>: <strerror(-code)>". Returns `code` either way, so callers write
 * `return mk_error_ensure(e, r, "Failed to load '%s'", path)`. */
int mk_error_ensure(struct mk_error *e, int code, const char *fmt, ...) _printf_(3, 4);

void mk_error_clear(struct mk_error *e);

/* Formats "file:line:column: msg", "field: msg" or "msg" into buf (always
 * NUL-terminated) and returns buf. For an unset error, strerror(-code). */
const char *mk_error_format(const struct mk_error *e, char *buf, size_t size);
