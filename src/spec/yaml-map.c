/* A mapping's effective pairs (merge keys, duplicate keys), and strict
 * mappings with known fields. See yaml-map.h. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "base/parse.h"
#include "spec/yaml-load.h"
#include "spec/yaml-map.h"
#include "spec/yaml-scalar.h"

static bool is_merge_key(const struct mk_yaml_node *k) {
        if (k->kind != MK_YAML_SCALAR || !streq(k->value, "<<"))
                return false;
        return k->plain || (k->tag && streq(k->tag, MK_YAML_TAG_PREFIX "merge"));
}

struct pair_vec {
        struct mk_yaml_pair *v;
        size_t n, cap;
        size_t n_explicit;
};

static void pair_vec_done(struct pair_vec *p) {
        for (size_t i = 0; i < p->n; i++)
                free(p->v[i].name);
        free(p->v);
        *p = (struct pair_vec){0};
}

static int pair_vec_push(struct pair_vec *p, const struct mk_yaml_node *k, const struct mk_yaml_node *v, char *name) {
        if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 16;
                struct mk_yaml_pair *a = reallocarray(p->v, cap, sizeof(*a));
                if (!a)
                        return -ENOMEM;
                p->v = a;
                p->cap = cap;
        }
        p->v[p->n++] = (struct mk_yaml_pair){.key = k, .value = v, .name = name};
        return 0;
}

static int index_by_name(const void *a, const void *b, void *userdata) {
        const struct mk_yaml_pair *v = userdata;
        size_t x = *(const size_t *) a, y = *(const size_t *) b;
        int r = strcmp(v[x].name, v[y].name);
        if (r != 0)
                return r;
        return x < y ? -1 : x > y;
}

/* Keeps the first pair of each name (explicit pairs come first, then merged
 * ones in precedence order); two explicit pairs of one name are an error at
 * the later one. Sorting keeps this O(n log n) for large mappings. */
static int dedup(struct mk_yaml_ctx *c, struct pair_vec *p) {
        if (p->n < 2)
                return 0;
        _cleanup_free_ size_t *idx = reallocarray(NULL, p->n, sizeof(size_t));
        if (!idx)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; i < p->n; i++)
                idx[i] = i;
        qsort_r(idx, p->n, sizeof(size_t), index_by_name, p->v);

        size_t dup = SIZE_MAX;
        for (size_t i = 1; i < p->n; i++)
                if (streq(p->v[idx[i]].name, p->v[idx[i - 1]].name) && idx[i] < p->n_explicit &&
                    idx[i - 1] < p->n_explicit && (i < 2 || !streq(p->v[idx[i]].name, p->v[idx[i - 2]].name)))
                        dup = MIN(dup, idx[i]);
        if (dup != SIZE_MAX) {
                size_t old = mk_yaml_path_push_key(c, p->v[dup].name);
                int r = mk_yaml_error(c, p->v[dup].key, "duplicate key: %s", p->v[dup].name);
                mk_yaml_path_pop(c, old);
                return r;
        }

        /* Mark the losers, then compact in the original order. */
        size_t keep = 0;
        bool *drop = calloc(p->n, sizeof(bool));
        if (!drop)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        for (size_t i = 1; i < p->n; i++)
                if (streq(p->v[idx[i]].name, p->v[idx[i - 1]].name))
                        drop[idx[i]] = true;
        for (size_t i = 0; i < p->n; i++) {
                if (drop[i]) {
                        free(p->v[i].name);
                        continue;
                }
                p->v[keep++] = p->v[i];
        }
        free(drop);
        p->n = keep;
        return 0;
}

static int map_collect(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, unsigned merge_depth,
                       struct pair_vec *out);

static int merge_source(struct mk_yaml_ctx *c, const struct mk_yaml_node *src, unsigned merge_depth,
                        struct pair_vec *out) {
        if (src->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, src, "map merge requires map or sequence of maps as the value");
        if (merge_depth >= MK_YAML_MAX_MERGE_DEPTH)
                return mk_yaml_error(c, src, "YAML merge keys nested deeper than %u levels", MK_YAML_MAX_MERGE_DEPTH);

        _cleanup_(pair_vec_done) struct pair_vec sub = {0};
        int r = map_collect(c, src, merge_depth + 1, &sub);
        if (r < 0)
                return r;
        for (size_t i = 0; i < sub.n; i++) {
                if (out->n >= MK_YAML_MAX_KEYS)
                        return mk_yaml_error(c, src, "mapping with more than %u keys", MK_YAML_MAX_KEYS);
                r = pair_vec_push(out, sub.v[i].key, sub.v[i].value, sub.v[i].name);
                if (r < 0)
                        return mk_yaml_error_code(c, r, src, "out of memory");
                sub.v[i].name = NULL;
        }
        return 0;
}

static int map_collect(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, unsigned merge_depth,
                       struct pair_vec *out) {
        int r;

        struct mk_yaml_scalar t;
        r = mk_yaml_resolve(c, n, &t); /* checks the tag */
        if (r < 0)
                return r;
        if (n->n_items / 2 > MK_YAML_MAX_KEYS)
                return mk_yaml_error(c, n, "mapping with more than %u keys", MK_YAML_MAX_KEYS);

        bool has_merge = false;
        for (size_t i = 0; i + 1 < n->n_items; i += 2) {
                const struct mk_yaml_node *k = n->items[i], *v = n->items[i + 1];
                if (is_merge_key(k)) {
                        has_merge = true;
                        continue;
                }
                char *name;
                r = mk_yaml_to_string(c, k, true, &name);
                if (r < 0)
                        return r;
                r = pair_vec_push(out, k, v, name);
                if (r < 0) {
                        free(name);
                        return mk_yaml_error_code(c, r, k, "out of memory");
                }
        }
        out->n_explicit = out->n;

        if (has_merge)
                for (size_t i = 0; i + 1 < n->n_items; i += 2) {
                        const struct mk_yaml_node *k = n->items[i], *v = n->items[i + 1];
                        if (!is_merge_key(k))
                                continue;
                        if (v->kind == MK_YAML_SEQUENCE) {
                                for (size_t j = 0; j < v->n_items; j++) {
                                        r = merge_source(c, v->items[j], merge_depth, out);
                                        if (r < 0)
                                                return r;
                                }
                        } else {
                                r = merge_source(c, v, merge_depth, out);
                                if (r < 0)
                                        return r;
                        }
                }

        return dedup(c, out);
}

int mk_yaml_map_load(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_map *ret) {
        struct pair_vec p = {0};

        if (n->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, n, "expected a mapping");
        int r = map_collect(c, n, 0, &p);
        if (r < 0) {
                pair_vec_done(&p);
                return r;
        }
        *ret = (struct mk_yaml_map){.pairs = p.v, .n = p.n};
        return 0;
}

void mk_yaml_map_done(struct mk_yaml_map *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++)
                free(m->pairs[i].name);
        free(m->pairs);
        *m = (struct mk_yaml_map){0};
}

const struct mk_yaml_pair *mk_yaml_map_find(const struct mk_yaml_map *m, const char *name) {
        for (size_t i = 0; i < m->n; i++)
                if (streq(m->pairs[i].name, name))
                        return &m->pairs[i];
        return NULL;
}

int mk_yaml_map_load_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                           const char *const *known, bool list_known, struct mk_yaml_map *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_MAP)
                return mk_yaml_error(c, n, "%s must be a mapping, not %s", what, mk_yaml_type_json(v.type));
        r = mk_yaml_map_load(c, n, ret);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ret->n; i++) {
                bool ok = false;
                for (const char *const *k = known; *k && !ok; k++)
                        ok = streq(*k, ret->pairs[i].name);
                if (!ok) {
                        size_t old = mk_yaml_path_push_key(c, ret->pairs[i].name);
                        char list[256] = "";
                        size_t used = 0;
                        for (const char *const *k = known; *k; k++) {
                                int m = snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", *k);
                                if (m < 0 || (size_t) m >= sizeof(list) - used)
                                        break;
                                used += (size_t) m;
                        }
                        size_t n_known = 0;
                        while (known[n_known])
                                n_known++;
                        const char *near = mk_closest_word(ret->pairs[i].name, known, n_known);
                        if (near)
                                r = mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s' (did you mean '%s'?%s%s)",
                                                  ret->pairs[i].name, near, list_known ? " known: " : "",
                                                  list_known ? list : "");
                        else
                                r = list_known ? mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s' (known: %s)",
                                                               ret->pairs[i].name, list)
                                               : mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s'",
                                                               ret->pairs[i].name);
                        mk_yaml_path_pop(c, old);
                        mk_yaml_map_done(ret);
                        return r;
                }
        }
        return 0;
}

int mk_yaml_map_each(struct mk_yaml_ctx *c, const struct mk_yaml_map *m, mk_yaml_field_fn field, void *userdata) {
        for (size_t i = 0; i < m->n; i++) {
                size_t old = mk_yaml_path_push_key(c, m->pairs[i].name);
                int r = field(c, &m->pairs[i], userdata);
                mk_yaml_path_pop(c, old);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mk_yaml_walk_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                       const char *const *known, bool list_known, mk_yaml_field_fn field, void *userdata) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, n, what, known, list_known, &m);
        if (r < 0)
                return r;
        return mk_yaml_map_each(c, &m, field, userdata);
}
