/* Growable byte buffer with a mandatory cap (curl's dynbuf). Every buffer
 * fed from outside the process has a named cap; going over it is an error
 * (-E2BIG), never a silent truncation (STYLE.md habit 11). Whole-file reads
 * bounded by a cap are in base/fileio.h. */
#pragma once

#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>

#include "base/macro.h"

struct mk_error;

struct mk_buf {
        char *data;     /* NULL until the first append; then always NUL-terminated */
        size_t len;     /* bytes of content, not counting the NUL */
        size_t alloc;   /* bytes allocated for data */
        size_t cap;     /* most bytes of content ever held */
};

/* Empties *b and sets its cap (content bytes, not counting the NUL). The cap
 * is mandatory; with cap 0 every non-empty append fails with -E2BIG. */
void mk_buf_init(struct mk_buf *b, size_t cap) _nonnull_(1);

/* Makes room for n more bytes at once (a writer that knows about how much
 * it will append saves the doublings). -E2BIG past the cap (then nothing
 * is reserved), -ENOMEM. */
int mk_buf_reserve(struct mk_buf *b, size_t n) _nonnull_(1) _wur_;

/* Appends n bytes. -E2BIG when len + n would exceed the cap, -ENOMEM; on
 * failure nothing is appended. data may hold NUL bytes. */
int mk_buf_append(struct mk_buf *b, const void *data, size_t n) _nonnull_(1) _wur_;
int mk_buf_puts(struct mk_buf *b, const char *s) _nonnull_(1, 2) _wur_;
int mk_buf_putc(struct mk_buf *b, char c) _nonnull_(1) _wur_;

/* Appends formatted text; -E2BIG over the cap, -ENOMEM, -EOVERFLOW when the
 * text cannot be formatted. On failure nothing is appended. */
int mk_buf_printf(struct mk_buf *b, const char *fmt, ...) _printf_(2, 3) _nonnull_(1, 2) _wur_;
int mk_buf_vprintf(struct mk_buf *b, const char *fmt, va_list ap) _printf_(2, 0) _nonnull_(1, 2) _wur_;

/* The content as a string, "" while nothing was appended. Owned by b. */
const char *mk_buf_str(const struct mk_buf *b) _nonnull_(1);

/* Drops the content but keeps the allocation and the cap. */
void mk_buf_reset(struct mk_buf *b) _nonnull_(1);

/* Hands the content on as a malloc'd NUL-terminated string ("" when empty)
 * and empties b (the cap stays). NULL only when allocating "" fails. */
char *mk_buf_take(struct mk_buf *b) _nonnull_(1) _wur_;

/* Frees the content; b stays usable with the same cap. Accepts NULL. */
void mk_buf_done(struct mk_buf *b);
#define _cleanup_buf_done_ _cleanup_(mk_buf_done)
