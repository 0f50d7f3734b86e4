/* Prometheus label values (prom.h). */
#include <stdint.h>

#include "base/dynbuf.h"
#include "base/prom.h"

size_t mk_utf8_sequence_len(const char *s) {
        const unsigned char *p = (const unsigned char *) s;
        unsigned char c = p[0];
        if (c == 0)
                return 0;
        if (c < 0x80)
                return 1;
        size_t n;
        uint32_t min, cp;
        if (c >= 0xc2 && c <= 0xdf) {
                n = 2, min = 0x80, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
                n = 3, min = 0x800, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4, min = 0x10000, cp = c & 0x07;
        } else
                return 0;       /* a continuation byte, 0xc0/0xc1, 0xf5.. */
        for (size_t i = 1; i < n; i++) {
                if ((p[i] & 0xc0) != 0x80)
                        return 0; /* cut short (a NUL included) */
                cp = cp << 6 | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

bool mk_utf8_valid(const char *s) {
        while (*s) {
                size_t n = mk_utf8_sequence_len(s);
                if (n == 0)
                        return false;
                s += n;
        }
        return true;
}

int mk_utf8_append_valid(struct mk_buf *b, const char *s) {
        int r = 0;
        for (const char *p = s; r >= 0 && *p;) {
                size_t n = mk_utf8_sequence_len(p);
                r = n ? mk_buf_append(b, p, n) : mk_buf_puts(b, "\xef\xbf\xbd");
                p += n ? n : 1;
        }
        return r;
}

int mk_prom_label_value(struct mk_buf *b, const char *v) {
        int r = 0;
        for (const char *p = v; r >= 0 && *p;) {
                size_t n = mk_utf8_sequence_len(p);
                if (n == 0) {
                        r = mk_buf_puts(b, "\xef\xbf\xbd"); /* U+FFFD for the byte */
                        p++;
                } else if (n > 1) {
                        r = mk_buf_append(b, p, n);
                        p += n;
                } else {
                        r = *p == '\\' ? mk_buf_puts(b, "\\\\")
                            : *p == '"' ? mk_buf_puts(b, "\\\"")
                            : *p == '\n' ? mk_buf_puts(b, "\\n")
                                         : mk_buf_putc(b, *p);
                        p++;
                }
        }
        return r;
}

int mk_prom_label(struct mk_buf *b, const char *key, const char *v, bool first) {
        int r = mk_buf_printf(b, "%s%s=\"", first ? "" : ",", key);
        if (r >= 0)
                r = mk_prom_label_value(b, v);
        return r < 0 ? r : mk_buf_putc(b, '"');
}
