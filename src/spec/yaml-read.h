/* Reading a config file: the frame every parser of spec/ shares (parse, then
 * walk the root) and the typed readers of field values. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "spec/yaml-error.h"
#include "spec/yaml-load.h"
#include "spec/yaml-map.h"
#include "spec/yaml-scalar.h"

/* The frame every config parser shares. walk() gets a context for `file`
 * and the first document's root (NULL for an empty stream); its result is
 * returned. */
typedef int (*mk_yaml_walk_fn)(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata);
/* Parses `len` bytes named `file` (NULL: "<input>"; -E2BIG over
 * max_bytes; NULL data is an empty document), then walk(). */
int mk_yaml_parse_walk(const char *data, size_t len, const char *file, size_t max_bytes, mk_yaml_walk_fn walk,
                       void *userdata, struct mk_error *e);
/* Reads `path` (at most max_bytes; "-" reads stdin, named "<stdin>" in
 * messages), then as mk_yaml_parse_walk(). Read errors as mk_read_file(). */
int mk_yaml_load_walk(const char *path, size_t max_bytes, mk_yaml_walk_fn walk, void *userdata, struct mk_error *e);

/* Defines `static int name(...)`, the mk_yaml_walk_fn of a parser whose
 * result is one `type` with a `file` member: `type` calloc()ed, its file
 * set to the context's, `top(c, root, obj)` fills it; on success it goes
 * to the `type **` userdata, on failure `freep` frees it. */
#define MK_YAML_DEFINE_WALK(name, type, freep, top)                                                     \
        static int name(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata) {       \
                _cleanup_(freep) type *x = calloc(1, sizeof(*x));                                      \
                if (!x || !(x->file = strdup(c->file)))                                                \
                        return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");                  \
                int r = top(c, root, x);                                                               \
                if (r < 0)                                                                             \
                        return r;                                                                      \
                *(type **) userdata = TAKE_PTR(x);                                                     \
                return 0;                                                                              \
        }

/* A string scalar (plain or quoted, but a string: `123` or `yes` is not),
 * without NUL bytes, copied to *ret; else "<what> must be a string, not <type>". */
int mk_yaml_get_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret);
/* A list or null (how go-yaml fills a Go slice): the number of items in
 * *ret (0 for null); anything else is the Go tools' error for the same
 * file, "json: cannot unmarshal <type> into Go value of type <go_type>". */
int mk_yaml_get_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, size_t *ret);
/* A mapping or null (how go-yaml fills a Go map or struct): its pairs in
 * *ret (none for null); 1 for a mapping, 0 for null; anything else is
 * "json: cannot unmarshal <type> into Go value of type <go_type>". */
int mk_yaml_get_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, struct mk_yaml_map *ret);
/* A `version` value: a string equal to `want`, else "unsupported version 'x' (want v1)". */
int mk_yaml_check_version(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *want);
/* A YAML boolean (YAML 1.1 forms), else "must be true or false, not <type>". */
int mk_yaml_get_bool(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool *ret);
