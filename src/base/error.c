#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

static void copy_trunc(char *dst, size_t size, const char *src) {
        size_t n = strlen(src);
        if (n >= size)
                n = size - 1;
        memcpy(dst, src, n);
        dst[n] = 0;
}

/* Ends a message cut at `size` with "..." (n: what snprintf wanted to write). */
static void mark_cut(char *msg, size_t size, int n) {
        if (n >= (int) size)
                memcpy(msg + size - 4, "...", 4);
}

/* Clears `e` and sets its code and message; the setters add a location. */
_printf_(3, 0) static void vset(struct mk_error *e, int code, const char *fmt, va_list ap) {
        if (!e)
                return;
        mk_error_clear(e);
        e->code = code;
        int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        mark_cut(e->msg, sizeof(e->msg), n);
        if (n < 0)
                copy_trunc(e->msg, sizeof(e->msg), "(unformattable message)");
}

int mk_error_set(struct mk_error *e, int code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vset(e, code, fmt, ap);
        va_end(ap);
        return code;
}

int mk_error_set_at(struct mk_error *e, int code, const char *file, unsigned line, unsigned column,
                    const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vset(e, code, fmt, ap);
        va_end(ap);
        if (e) {
                copy_trunc(e->file, sizeof(e->file), file ? file : "");
                e->line = line;
                e->column = column;
        }
        return code;
}

int mk_error_set_field(struct mk_error *e, int code, const char *field, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vset(e, code, fmt, ap);
        va_end(ap);
        if (e)
                copy_trunc(e->field, sizeof(e->field), field ? field : "");
        return code;
}

void mk_error_prefix(struct mk_error *e, const char *fmt, ...) {
        if (!e)
                return;
        char prefix[MK_ERROR_MSG_MAX], old[MK_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        copy_trunc(old, sizeof(old), e->msg);
        mark_cut(e->msg, sizeof(e->msg), snprintf(e->msg, sizeof(e->msg), "%s: %s", prefix, old));
}

int mk_error_ensure(struct mk_error *e, int code, const char *fmt, ...) {
        if (!e || code >= 0 || e->code != 0)
                return code;
        char what[MK_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return mk_error_set(e, code, "%s: %s", what, strerror(-code));
}

void mk_error_clear(struct mk_error *e) {
        if (e)
                memset(e, 0, sizeof(*e));
}

const char *mk_error_format(const struct mk_error *e, char *buf, size_t size) {
        if (!buf || size == 0)
                return buf;
        if (!e) {
                buf[0] = 0;
                return buf;
        }
        const char *msg = e->msg[0] ? e->msg : strerror(e->code < 0 ? -e->code : e->code);
        if (e->file[0] && e->line > 0)
                snprintf(buf, size, "%s:%u:%u: %s", e->file, e->line, e->column, msg);
        else if (e->file[0])
                snprintf(buf, size, "%s: %s", e->file, msg);
        else if (e->field[0])
                snprintf(buf, size, "%s: %s", e->field, msg);
        else
                snprintf(buf, size, "%s", msg);
        return buf;
}
