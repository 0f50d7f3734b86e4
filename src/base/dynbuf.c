#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"

#define MK_BUF_MIN_ALLOC 64

void mk_buf_init(struct mk_buf *b, size_t cap) {
        *b = (struct mk_buf) { .cap = cap };
}

/* Makes room for `extra` more content bytes plus the NUL. The caller has
 * checked the cap, so len + extra <= cap. */
static int buf_reserve(struct mk_buf *b, size_t extra) {
        size_t need = b->len + extra + 1;
        if (need <= b->alloc)
                return 0;
        size_t a = b->alloc ? b->alloc : MK_BUF_MIN_ALLOC;
        while (a < need)
                a = a > SIZE_MAX / 2 ? need : a * 2;
        /* Never allocate far past the cap. cap + 1 cannot overflow here as
         * need <= cap + 1 already fitted in a size_t. */
        if (b->cap < SIZE_MAX && a > b->cap + 1)
                a = b->cap + 1;
        char *p = realloc(b->data, a);
        if (!p)
                return -ENOMEM;
        if (!b->data)
                p[0] = 0;
        b->data = p;
        b->alloc = a;
        return 0;
}

int mk_buf_reserve(struct mk_buf *b, size_t n) {
        if (n > b->cap - b->len)
                return -E2BIG;
        return buf_reserve(b, n);
}

int mk_buf_append(struct mk_buf *b, const void *data, size_t n) {
        if (n > b->cap - b->len) /* len <= cap always */
                return -E2BIG;
        int r = buf_reserve(b, n);
        if (r < 0)
                return r;
        if (n > 0)
                memcpy(b->data + b->len, data, n);
        b->len += n;
        b->data[b->len] = 0;
        return 0;
}

int mk_buf_puts(struct mk_buf *b, const char *s) {
        return mk_buf_append(b, s, strlen(s));
}

int mk_buf_putc(struct mk_buf *b, char c) {
        return mk_buf_append(b, &c, 1);
}

int mk_buf_vprintf(struct mk_buf *b, const char *fmt, va_list ap) {
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0)
                return -EOVERFLOW;
        if ((size_t) n > b->cap - b->len)
                return -E2BIG;
        int r = buf_reserve(b, (size_t) n);
        if (r < 0)
                return r;
        int m = vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
        if (m != n) {
                /* An argument changed between the two passes (%m and a
                 * clobbered errno, say): leave the buffer as it was. */
                b->data[b->len] = 0;
                return -EOVERFLOW;
        }
        b->len += (size_t) n;
        return 0;
}

int mk_buf_printf(struct mk_buf *b, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = mk_buf_vprintf(b, fmt, ap);
        va_end(ap);
        return r;
}

const char *mk_buf_str(const struct mk_buf *b) {
        return b->data ? b->data : "";
}

void mk_buf_reset(struct mk_buf *b) {
        b->len = 0;
        if (b->data)
                b->data[0] = 0;
}

char *mk_buf_take(struct mk_buf *b) {
        char *p = b->data;
        if (!p) {
                p = strdup("");
                if (!p)
                        return NULL;
        }
        *b = (struct mk_buf) { .cap = b->cap };
        return p;
}

void mk_buf_done(struct mk_buf *b) {
        if (!b)
                return;
        free(b->data);
        *b = (struct mk_buf) { .cap = b->cap };
}
