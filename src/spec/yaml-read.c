/* The frame every config parser shares (parse, then walk) and the typed
 * readers of field values. See yaml-read.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/macro.h"
#include "spec/yaml-read.h"

int mk_yaml_parse_walk(const char *data, size_t len, const char *file, size_t max_bytes, mk_yaml_walk_fn walk,
                       void *userdata, struct mk_error *e) {
        struct mk_yaml_ctx c = {.file = file ? file : "<input>", .e = e};
        _cleanup_(mk_yaml_doc_freep) struct mk_yaml_doc *doc = NULL;
        int r = mk_yaml_parse_capped(data, len, c.file, max_bytes, &doc, e);
        if (r < 0)
                return r;
        return walk(&c, doc->root, userdata);
}

int mk_yaml_load_walk(const char *path, size_t max_bytes, mk_yaml_walk_fn walk, void *userdata, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = mk_read_file(path, max_bytes, &data, &len, e);
        if (r < 0)
                return r;
        return mk_yaml_parse_walk(data, len, streq(path, "-") ? "<stdin>" : path, max_bytes, walk, userdata, e);
}

int mk_yaml_get_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_STR)
                return mk_yaml_error(c, n, "%s must be a string, not %s", what, mk_yaml_type_json(v.type));
        if (strlen(n->value) != n->len)
                return mk_yaml_error(c, n, "%s contains a NUL byte", what);
        char *s = strdup(n->value);
        if (!s)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        *ret = s;
        return 0;
}

int mk_yaml_get_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, size_t *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_SEQ && v.type != MK_YAML_NULL)
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type %s",
                                     mk_yaml_type_json(v.type), go_type);
        *ret = v.type == MK_YAML_SEQ ? n->n_items : 0;
        return 0;
}

int mk_yaml_get_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, struct mk_yaml_map *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type == MK_YAML_NULL) {
                *ret = (struct mk_yaml_map) {0};
                return 0;
        }
        if (v.type != MK_YAML_MAP)
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type %s",
                                     mk_yaml_type_json(v.type), go_type);
        r = mk_yaml_map_load(c, n, ret);
        return r < 0 ? r : 1;
}

int mk_yaml_check_version(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *want) {
        _cleanup_free_ char *ver = NULL;
        int r = mk_yaml_get_str(c, n, "version", &ver);
        if (r < 0)
                return r;
        if (!streq(ver, want))
                return mk_yaml_error(c, n, "unsupported version '%s' (want %s)", ver, want);
        return 0;
}

int mk_yaml_get_bool(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_BOOL) {
                if (n->kind == MK_YAML_SCALAR && n->value)
                        return mk_yaml_error(c, n, "must be true or false, not %s '%.40s%s'", mk_yaml_type_json(v.type),
                                             n->value, n->len > 40 ? "..." : "");
                return mk_yaml_error(c, n, "must be true or false, not %s", mk_yaml_type_json(v.type));
        }
        *ret = v.b;
        return 0;
}
