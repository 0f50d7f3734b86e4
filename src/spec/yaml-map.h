/* Mappings of a YAML tree: their effective pairs (merge keys expanded,
 * duplicate keys refused), lookups, and strict mappings whose fields must be
 * known. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/macro.h"
#include "spec/yaml-error.h"

struct mk_yaml_node;

#define MK_YAML_MAX_KEYS 65536u   /* keys in one mapping, merge keys included */
#define MK_YAML_MAX_MERGE_DEPTH 16u

struct mk_yaml_pair {
        const struct mk_yaml_node *key, *value;
        char *name;             /* the key as a string (mk_yaml_to_string, key mode) */
};

struct mk_yaml_map {
        struct mk_yaml_pair *pairs;     /* in file order; merged keys after explicit ones */
        size_t n;
};

/* The effective pairs of a mapping: YAML merge keys (`<<: *anchor`, or a list
 * of them) expanded, explicit keys winning over merged ones and earlier merge
 * sources over later ones. Two explicit keys equal as strings are an error
 * "duplicate key: <k>" at the second one (stricter than go-yaml v2, where the
 * last one silently wins). `n` must be a mapping. */
int mk_yaml_map_load(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_map *ret);
void mk_yaml_map_done(struct mk_yaml_map *m);
/* The pair named `name` in `m`, or NULL. */
const struct mk_yaml_pair *mk_yaml_map_find(const struct mk_yaml_map *m, const char *name);
#define _cleanup_yaml_map_done_ _cleanup_(mk_yaml_map_done)

/* Loads mapping `n` (named `what` in the error when it is something else)
 * and refuses any key outside the NULL-terminated `known` list with
 * "unknown field '<k>'", followed by " (known: a, b)" when list_known. On
 * failure `ret` is left empty. For the strict formats (service.yaml, the
 * plugin config). */
int mk_yaml_map_load_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                           const char *const *known, bool list_known, struct mk_yaml_map *ret);

/* A field of a mapping, for mk_yaml_map_each(): `p` is the pair, its key
 * already on the path. */
typedef int (*mk_yaml_field_fn)(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata);
/* Calls field() on each pair of `m` in order with its key pushed on the
 * path; returns the first error. */
int mk_yaml_map_each(struct mk_yaml_ctx *c, const struct mk_yaml_map *m, mk_yaml_field_fn field, void *userdata);
/* mk_yaml_map_load_known() of `n`, then mk_yaml_map_each(): a strict
 * mapping, field by field. */
int mk_yaml_walk_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                       const char *const *known, bool list_known, mk_yaml_field_fn field, void *userdata);
