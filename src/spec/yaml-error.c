/* Errors at a node's position with the field path of a walk. See yaml-error.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "spec/yaml-error.h"
#include "spec/yaml-load.h"

_printf_(4, 0) static int verror(struct mk_yaml_ctx *c, int code, const struct mk_yaml_node *n, const char *fmt,
                                 va_list ap) {
        char msg[MK_ERROR_MSG_MAX];
        int k = vsnprintf(msg, sizeof(msg), fmt, ap);
        if (k >= (int) sizeof(msg))
                memcpy(msg + sizeof(msg) - 4, "...", 4);
        else if (k < 0)
                snprintf(msg, sizeof(msg), "(unformattable message)");
        if (!c->e)
                return code;
        mk_error_set_at(c->e, code, c->file, n ? n->line : 0, n ? n->column : 0, "%s", msg);
        snprintf(c->e->field, sizeof(c->e->field), "%s", c->path);
        return code;
}

int mk_yaml_error(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = verror(c, -EINVAL, n, fmt, ap);
        va_end(ap);
        return r;
}

int mk_yaml_error_code(struct mk_yaml_ctx *c, int code, const struct mk_yaml_node *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = verror(c, code, n, fmt, ap);
        va_end(ap);
        return r;
}

static size_t path_append(struct mk_yaml_ctx *c, const char *s) {
        size_t old = c->path_len, room = sizeof(c->path) - c->path_len, n = strlen(s);
        if (n < room) {
                memcpy(c->path + c->path_len, s, n + 1);
                c->path_len += n;
        } else {
                /* Cut, and mark the cut; the path only serves messages. */
                memcpy(c->path + c->path_len, s, room - 1);
                c->path_len = sizeof(c->path) - 1;
                c->path[c->path_len] = 0;
                memcpy(c->path + sizeof(c->path) - 4, "...", 4);
        }
        return old;
}

size_t mk_yaml_path_push_key(struct mk_yaml_ctx *c, const char *key) {
        size_t old = c->path_len;
        if (c->path_len > 0)
                path_append(c, ".");
        path_append(c, key);
        return old;
}

size_t mk_yaml_path_push_index(struct mk_yaml_ctx *c, size_t index) {
        char buf[32];
        snprintf(buf, sizeof(buf), "[%zu]", index);
        return path_append(c, buf);
}

void mk_yaml_path_pop(struct mk_yaml_ctx *c, size_t len) {
        if (len < sizeof(c->path)) {
                c->path_len = len;
                c->path[len] = 0;
        }
}
