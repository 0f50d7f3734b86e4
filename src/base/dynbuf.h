/* Growable byte buffer with a mandatory cap (curl's dynbuf), and whole-file
 * reads bounded by a cap. Every buffer fed from outside the process has a
 * named cap; going over it is an error (-E2BIG), never a silent truncation
 * (STYLE.md habit 11). */
#pragma once

#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>

#include "base/macro.h"

struct mk_error;

/* Largest sysfs attribute we read: one page, as the kernel's sysfs show()
 * callbacks fill at most PAGE_SIZE (Documentation/filesystems/sysfs.rst). */
#define MK_MAX_SYSFS_BYTES 4096

struct mk_buf {
        char *data;     /* NULL until the first append; then always NUL-terminated */
        size_t len;     /* bytes of content, not counting the NUL */
        size_t alloc;   /* bytes allocated for data */
        size_t cap;     /* most bytes of content ever held */
};

/* Empties *b and sets its cap (content bytes, not counting the NUL). The cap
 * is mandatory; with cap 0 every non-empty append fails with -E2BIG. */
void mk_buf_init(struct mk_buf *b, size_t cap) _nonnull_(1);

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

/* Reads the whole of `path` ("-" reads stdin) into a malloc'd buffer, with a
 * NUL after the last byte (the content may hold NUL bytes too). Errors:
 * -E2BIG "'path' is larger than N bytes" when over cap; the open/read errno
 * with the path in the message. ret_* are written only on success;
 * ret_len may be NULL. */
int mk_read_file(const char *path, size_t cap, char **ret_data, size_t *ret_len, struct mk_error *e)
        _nonnull_(1, 3) _wur_;

/* Reads a sysfs attribute (at most MK_MAX_SYSFS_BYTES) and strips trailing
 * newlines and blanks. Returns a malloc'd string in *ret_value; errors as
 * mk_read_file(). */
int mk_read_sysfs_attr(const char *path, char **ret_value, struct mk_error *e) _nonnull_(1, 2) _wur_;
