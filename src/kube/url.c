/* Request URLs: the path a caller gives, checked, and the query
 * parameters we add (percent-encoded). */
#include <errno.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "kube/internal.h"

int kube_check_path(const char *path, struct mk_error *e) {
        if (path[0] != '/')
                return mk_error_set(e, -EINVAL, "request path '%s' does not start with '/'", path);
        for (const char *p = path; *p; p++)
                if ((unsigned char) *p <= ' ' || (unsigned char) *p >= 0x7f || *p == '#')
                        return mk_error_set(e, -EINVAL, "request path holds a blank, '#' or a non-ASCII byte");
        return 0;
}

/* Appends "&name=value" (or "?..." for the first parameter), value
 * percent-encoded except RFC 3986's unreserved characters. */
int kube_add_param(struct mk_buf *b, const char *name, const char *value) {
        static const char hex[] = "0123456789ABCDEF";
        int r = mk_buf_printf(b, "%c%s=", strchr(mk_buf_str(b), '?') ? '&' : '?', name);
        for (const unsigned char *p = (const unsigned char *) value; r >= 0 && *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("-._~", *p))
                        r = mk_buf_putc(b, (char) *p);
                else {
                        char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
                        r = mk_buf_append(b, esc, 3);
                }
        }
        return r;
}

/* Appends the label and field selectors that are set (NULL or "": none). */
int kube_add_selectors(struct mk_buf *b, const char *label_selector, const char *field_selector) {
        int r = 0;
        if (label_selector && *label_selector)
                r = kube_add_param(b, "labelSelector", label_selector);
        if (r >= 0 && field_selector && *field_selector)
                r = kube_add_param(b, "fieldSelector", field_selector);
        return r;
}
