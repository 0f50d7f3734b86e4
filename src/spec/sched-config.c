/* The scheduler's device config (sched-config.h; HAMi v2.10.0 charts/hami device config; HAMi release-v2.9 knownMigGeometries; HAMi v2.10.0 dynamic MIG, PR #2378). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "spec/sched-config.h"
#include "spec/yaml.h"

static const char *const mode_table[_MK_SCHED_MODE_MAX] = {
        [MK_SCHED_MODE_MIG] = "mig",
        [MK_SCHED_MODE_HAMI_CORE] = "hami-core",
        [MK_SCHED_MODE_DISABLED] = "disabled",
        [MK_SCHED_MODE_MIXED] = "mixed",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_sched_mode, enum mk_sched_mode, mode_table, _MK_SCHED_MODE_MAX, _MK_SCHED_MODE_INVALID);

static const char *const switch_table[_MK_SCHED_SWITCH_MAX] = {
        [MK_SCHED_SWITCH_NEVER] = "never",
        [MK_SCHED_SWITCH_IDLE] = "idle",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_sched_mode_switch, enum mk_sched_mode_switch, switch_table, _MK_SCHED_SWITCH_MAX,
                              _MK_SCHED_SWITCH_INVALID);

static void model_done(struct mk_sched_model *m) {
        strv_free(m->models);
        free(m->profiles);
        *m = (struct mk_sched_model) {0};
}

struct mk_sched_config *mk_sched_config_free(struct mk_sched_config *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_models; i++)
                model_done(&c->models[i]);
        free(c->models);
        for (size_t i = 0; i < c->n_nodes; i++) {
                free(c->nodes[i].name);
                free(c->nodes[i].gpus);
        }
        free(c->nodes);
        free(c->file);
        free(c->resource_count);
        free(c->resource_memory);
        free(c->resource_memory_percentage);
        free(c->resource_cores);
        free(c);
        return NULL;
}

static int get_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret) {
        char *v = NULL;
        int r = mk_yaml_get_str(c, n, what, &v);
        if (r < 0)
                return r;
        if (n->len == 0 || n->len > MK_MAX_SCHED_NAME) {
                free(v);
                return n->len == 0 ? mk_yaml_error(c, n, "%s must not be empty", what)
                                   : mk_yaml_error(c, n, "%s is longer than %u characters", what, MK_MAX_SCHED_NAME);
        }
        *ret = v;
        return 0;
}

static int get_seq(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, size_t max) {
        if (n->kind != MK_YAML_SEQUENCE)
                return mk_yaml_error(c, n, "%s must be a list", what);
        if (n->n_items > max)
                return mk_yaml_error_code(c, -E2BIG, n, "%s has more than %zu entries", what, max);
        return 0;
}

static int get_models(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_model *m) {
        int r = get_seq(c, n, "models", MK_MAX_SCHED_PROFILES);
        if (r < 0)
                return r;
        if (n->n_items == 0)
                return mk_yaml_error(c, n, "models must not be empty");
        _cleanup_strv_free_ char **l = calloc(n->n_items + 1, sizeof(char *));
        if (!l)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < n->n_items; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                r = get_str(c, n->items[i], "a model", &l[i]);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        strv_free(m->models);
        m->models = TAKE_PTR(l);
        m->n_models = n->n_items;
        return 0;
}

/* Adds a profile name (a GI profile: C == G), ignoring duplicates. */
static int add_profile(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_model *m) {
        _cleanup_free_ char *s = NULL;
        int r = get_str(c, n, "a profile", &s);
        if (r < 0)
                return r;
        struct mk_profile_name p;
        struct mk_error pe = {0};
        if (mk_profile_name_parse(s, &p, &pe) < 0)
                return mk_yaml_error(c, n, "%s", pe.msg);
        if (p.c != p.g)
                return mk_yaml_error(c, n,
                                     "'%s' is a compute-instance profile; name the GPU instance profile "
                                     "(e.g. '%ug.%ugb')",
                                     s, p.g, p.gb);
        for (size_t i = 0; i < m->n_profiles; i++)
                if (mk_profile_name_equal(&m->profiles[i], &p))
                        return 0;
        if (m->n_profiles >= MK_MAX_SCHED_PROFILES)
                return mk_yaml_error_code(c, -E2BIG, n, "more than %u profiles", MK_MAX_SCHED_PROFILES);
        struct mk_profile_name *np = realloc(m->profiles, (m->n_profiles + 1) * sizeof(*np));
        if (!np)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        m->profiles = np;
        m->profiles[m->n_profiles++] = p;
        return 0;
}

static int get_profiles(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_model *m) {
        int r = get_seq(c, n, "profiles", MK_MAX_SCHED_PROFILES);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n->n_items; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                r = add_profile(c, n->items[i], m);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

/* An integer in [min, max] (into *ret when not NULL). */
static int get_count(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, unsigned min,
                     unsigned max, unsigned *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_INT)
                return mk_yaml_error(c, n, "%s must be an integer, not %s", what, mk_yaml_type_json(v.type));
        if (v.is_unsigned || v.i < (int64_t) min || v.i > (int64_t) max)
                return mk_yaml_error(c, n, "%s must be between %u and %u", what, min, max);
        if (ret)
                *ret = (unsigned) v.i;
        return 0;
}

struct geometry_entry {
        struct mk_sched_model *m;
        bool have_name;
};

static int geometry_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct geometry_entry *g = userdata;
        if (streq(p->name, "name")) {
                g->have_name = true;
                return add_profile(c, p->value, g->m);
        }
        if (streq(p->name, "memory"))
                return get_count(c, p->value, "memory", 0, 1u << 24, NULL);
        if (streq(p->name, "count"))
                return get_count(c, p->value, "count", 0, 64, NULL);
        return get_count(c, p->value, "core", 0, 100, NULL);
}

/* One template of allowedGeometries: [{name, memory, count, core}]. */
static int get_geometry(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_model *m) {
        static const char *const known[] = {"name", "memory", "count", "core", NULL};
        int r = get_seq(c, n, "a geometry", MK_MAX_SCHED_PROFILES);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n->n_items; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                struct geometry_entry g = {.m = m};
                r = mk_yaml_walk_known(c, n->items[i], "a geometry entry", known, true, geometry_field, &g);
                if (r < 0)
                        return r;
                if (!g.have_name)
                        return mk_yaml_error(c, n->items[i], "a geometry entry needs a name");
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

/* A Volcano geometry group's field: its name (checked, unused) or its templates. */
static int group_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        if (streq(p->name, "group")) {
                _cleanup_free_ char *g = NULL;
                return get_str(c, p->value, "group", &g);
        }
        return get_geometry(c, p->value, userdata);
}

/* allowedGeometries: HAMi's list of templates, or Volcano's named groups
 * [{group, geometries: [...]}]. The allowed profiles are every name used. */
static int get_geometries(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_model *m) {
        static const char *const group_known[] = {"group", "geometries", NULL};
        int r = get_seq(c, n, "allowedGeometries", MK_MAX_SCHED_PROFILES);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *t = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                r = t->kind == MK_YAML_MAPPING
                            ? mk_yaml_walk_known(c, t, "a geometry group", group_known, true, group_field, m)
                            : get_geometry(c, t, m);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

struct model_entry {
        struct mk_sched_model *m;
        bool have_profiles;
};

static int model_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct model_entry *me = userdata;
        if (streq(p->name, "models"))
                return get_models(c, p->value, me->m);
        me->have_profiles = true;
        if (streq(p->name, "profiles"))
                return get_profiles(c, p->value, me->m);
        return get_geometries(c, p->value, me->m);
}

/* A list of model entries; `geometries` selects HAMi's legacy form. */
static int get_model_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool geometries,
                          struct mk_sched_config *cfg) {
        static const char *const known_profiles[] = {"models", "profiles", NULL};
        static const char *const known_geometries[] = {"models", "allowedGeometries", NULL};
        const char *what = geometries ? "knownMigGeometries" : "allowedProfiles";
        int r = get_seq(c, n, what, MK_MAX_SCHED_MODELS);
        if (r < 0)
                return r;
        if (cfg->n_models + n->n_items > MK_MAX_SCHED_MODELS)
                return mk_yaml_error_code(c, -E2BIG, n, "more than %u model entries in all", MK_MAX_SCHED_MODELS);
        struct mk_sched_model *nm = realloc(cfg->models, (cfg->n_models + n->n_items + 1) * sizeof(*nm));
        if (!nm)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        cfg->models = nm;
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                struct mk_sched_model *m = &cfg->models[cfg->n_models];
                *m = (struct mk_sched_model) {.line = it->line};
                cfg->n_models++; /* owned by cfg from here, freed with it on failure */
                struct model_entry me = {.m = m};
                r = mk_yaml_walk_known(c, it, "a model entry", geometries ? known_geometries : known_profiles, true,
                                       model_field, &me);
                if (r < 0)
                        return r;
                if (!m->models)
                        return mk_yaml_error(c, it, "a model entry needs 'models'");
                if (!me.have_profiles)
                        return mk_yaml_error(c, it, "a model entry needs '%s'",
                                             geometries ? "allowedGeometries" : "profiles");
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

/* deviceSplitCount / devicesplitcount: 1..MK_MAX_SCHED_SPLIT. */
static int get_split(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, unsigned *ret) {
        return get_count(c, n, what, 1, MK_MAX_SCHED_SPLIT, ret);
}

/* An operating mode name into *ret (`per_gpu`: not mixed); `allowed` lists them for the message. */
static int get_mode(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, const char *allowed,
                    bool per_gpu, enum mk_sched_mode *ret) {
        _cleanup_free_ char *s = NULL;
        int r = get_str(c, n, what, &s);
        if (r < 0)
                return r;
        enum mk_sched_mode m = mk_sched_mode_from_string(s);
        if ((int) m < 0 || (per_gpu && m == MK_SCHED_MODE_MIXED))
                return mk_yaml_error(c, n, "unknown %s '%s' (%s)", what, s, allowed);
        *ret = m;
        return 0;
}

static int gpu_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_sched_gpu_config *g = userdata;
        if (streq(p->name, "index"))
                return get_count(c, p->value, "index", 0, MK_MAX_SCHED_NODE_GPUS - 1, &g->index);
        return get_mode(c, p->value, "mode", "mig, hami-core or disabled", true, &g->mode);
}

/* gpus: [{index, mode}] of a mixed node; an index at most once. */
static int get_gpus(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_node_config *nc) {
        static const char *const known[] = {"index", "mode", NULL};
        int r = get_seq(c, n, "gpus", MK_MAX_SCHED_NODE_GPUS);
        if (r < 0)
                return r;
        free(nc->gpus);
        nc->n_gpus = 0;
        nc->gpus = calloc(n->n_items + 1, sizeof(*nc->gpus));
        if (!nc->gpus)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                struct mk_sched_gpu_config g = {.index = UINT32_MAX, .mode = _MK_SCHED_MODE_INVALID};
                r = mk_yaml_walk_known(c, it, "a gpus entry", known, true, gpu_field, &g);
                if (r < 0)
                        return r;
                if (g.index == UINT32_MAX || (int) g.mode < 0)
                        return mk_yaml_error(c, it, "a gpus entry needs an index and a mode");
                for (size_t k = 0; k < nc->n_gpus; k++)
                        if (nc->gpus[k].index == g.index)
                                return mk_yaml_error(c, it, "GPU %u is listed twice", g.index);
                nc->gpus[nc->n_gpus++] = g;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

/* A mapping whose keys are not all ours (HAMi's): "<what> must be a
 * mapping" for anything else, then field() on each pair. */
static int walk_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, mk_yaml_field_fn field,
                    void *userdata) {
        if (n->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, n, "%s must be a mapping", what);
        _cleanup_yaml_map_done_ struct mk_yaml_map mm = {0};
        int r = mk_yaml_map_load(c, n, &mm);
        return r < 0 ? r : mk_yaml_map_each(c, &mm, field, userdata);
}

struct node_entry {
        struct mk_sched_node_config *nc;
        bool only_mixed; /* gpus or modeswitch, for the message */
};

static int node_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct node_entry *ne = userdata;
        struct mk_sched_node_config *nc = ne->nc;
        const char *key = p->name;
        const struct mk_yaml_node *v = p->value;
        if (streq(key, "name"))
                return get_str(c, v, "name", &nc->name);
        if (streq(key, "operatingmode"))
                return get_mode(c, v, "operatingmode", "mig, hami-core, mixed or disabled", false, &nc->mode);
        if (streq(key, "devicesplitcount"))
                return get_split(c, v, key, &nc->split);
        if (streq(key, "modeswitch")) {
                ne->only_mixed = true;
                _cleanup_free_ char *s = NULL;
                int r = get_str(c, v, key, &s);
                if (r >= 0 && (int) (nc->mode_switch = mk_sched_mode_switch_from_string(s)) < 0)
                        r = mk_yaml_error(c, v, "unknown modeswitch '%s' (never or idle)", s);
                return r;
        }
        if (streq(key, "gpus")) {
                ne->only_mixed = true;
                return get_gpus(c, v, nc);
        }
        return 0;
}

/* nodeconfig: [{name, operatingmode, devicesplitcount, modeswitch, gpus}];
 * HAMi's other per-node keys are accepted and ignored (they configure its
 * device plugin). */
static int get_nodes(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_sched_config *cfg) {
        int r = get_seq(c, n, "nodeconfig", MK_MAX_SCHED_NODES);
        if (r < 0)
                return r;
        cfg->nodes = calloc(n->n_items + 1, sizeof(*cfg->nodes));
        if (!cfg->nodes)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                struct mk_sched_node_config *nc = &cfg->nodes[cfg->n_nodes++];
                nc->mode = MK_SCHED_MODE_HAMI_CORE; /* HAMi's default mode, without operatingmode */
                struct node_entry ne = {.nc = nc};
                r = walk_map(c, it, "a nodeconfig entry", node_field, &ne);
                if (r < 0)
                        return r;
                if (!nc->name)
                        return mk_yaml_error(c, it, "a nodeconfig entry needs a name");
                if (ne.only_mixed && nc->mode != MK_SCHED_MODE_MIXED)
                        return mk_yaml_error(c, it, "gpus and modeswitch are for operatingmode mixed, not %s",
                                             mk_sched_mode_to_string(nc->mode));
                cfg->pool |= nc->mode == MK_SCHED_MODE_HAMI_CORE || nc->mode == MK_SCHED_MODE_MIXED;
                for (size_t k = 0; k + 1 < cfg->n_nodes; k++)
                        if (streq(cfg->nodes[k].name, nc->name))
                                return mk_yaml_error(c, it, "node '%s' is listed twice", nc->name);
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int set_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **field) {
        char *s = NULL;
        int r = get_str(c, n, what, &s);
        if (r < 0)
                return r;
        free(*field);
        *field = s;
        return 0;
}

/* HAMi's `nvidia:` block: the keys we use; its many others are ignored. */
static int nvidia_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_sched_config *cfg = userdata;
        const char *key = p->name;
        const struct mk_yaml_node *v = p->value;
        if (streq(key, "knownMigGeometries"))
                return get_model_list(c, v, true, cfg);
        if (streq(key, "migProfileAllowlist"))
                return get_model_list(c, v, false, cfg);
        if (streq(key, "resourceCountName"))
                return set_str(c, v, key, &cfg->resource_count);
        if (streq(key, "resourceMemoryName"))
                return set_str(c, v, key, &cfg->resource_memory);
        if (streq(key, "resourceMemoryPercentageName"))
                return set_str(c, v, key, &cfg->resource_memory_percentage);
        if (streq(key, "resourceCoreName"))
                return set_str(c, v, key, &cfg->resource_cores);
        if (streq(key, "deviceSplitCount"))
                return get_split(c, v, key, &cfg->split);
        return 0;
}

struct top {
        struct mk_sched_config *cfg;
        bool ours; /* our form (it has `version`): strict */
};

static int top_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct top *t = userdata;
        const char *k = p->name;
        const struct mk_yaml_node *v = p->value;
        if (streq(k, "version"))
                return mk_yaml_check_version(c, v, "v1");
        if (streq(k, "allowedProfiles"))
                return get_model_list(c, v, false, t->cfg);
        if (streq(k, "nodeconfig"))
                return get_nodes(c, v, t->cfg);
        if (t->ours && streq(k, "deviceSplitCount"))
                return get_split(c, v, k, &t->cfg->split);
        if (streq(k, "nvidia") || streq(k, "resourceNames"))
                return walk_map(c, v, "nvidia", nvidia_field, t->cfg);
        return 0; /* HAMi form: other vendors' blocks are accepted and ignored. */
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_sched_config *cfg) {
        static const char *const known[] = {"version",       "allowedProfiles",  "nodeconfig",
                                            "resourceNames", "deviceSplitCount", NULL};
        if (root->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, root, "the document must be a mapping");
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load(c, root, &m);
        if (r < 0)
                return r;
        struct top t = {.cfg = cfg, .ours = mk_yaml_map_find(&m, "version") != NULL};
        if (t.ours)
                return mk_yaml_walk_known(c, root, "the document", known, true, top_field, &t);
        return mk_yaml_map_each(c, &m, top_field, &t);
}

static int default_str(char **field, const char *def) {
        if (*field)
                return 0;
        *field = strdup(def);
        return *field ? 0 : -ENOMEM;
}

/* The document (NULL: empty), then the defaults. */
static int parse_config(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_sched_config *cfg) {
        int r = root ? parse_top(c, root, cfg) : 0;
        if (r < 0)
                return r;
        if (cfg->split == 0)
                cfg->split = MK_SCHED_DEFAULT_SPLIT;
        if (default_str(&cfg->resource_count, "nvidia.com/gpu") < 0 ||
            default_str(&cfg->resource_memory, "nvidia.com/gpumem") < 0 ||
            default_str(&cfg->resource_memory_percentage, "nvidia.com/gpumem-percentage") < 0 ||
            default_str(&cfg->resource_cores, "nvidia.com/gpucores") < 0)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        return 0;
}

/* The document into a new mk_sched_config (mk_yaml_parse_walk's walk). */
MK_YAML_DEFINE_WALK(walk, struct mk_sched_config, mk_sched_config_freep, parse_config)

int mk_sched_config_parse(const char *data, size_t len, const char *file, struct mk_sched_config **ret,
                          struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_SCHED_CONFIG_BYTES, walk, ret, e);
}

int mk_sched_config_load(const char *path, struct mk_sched_config **ret, struct mk_error *e) {
        if (!path)
                return mk_sched_config_parse("", 0, "<default>", ret, e);
        return mk_yaml_load_walk(path, MK_MAX_SCHED_CONFIG_BYTES, walk, ret, e);
}

static bool contains_ci(const char *hay, const char *needle) {
        size_t n = strlen(needle), h = strlen(hay);
        for (size_t i = 0; n <= h && i <= h - n; i++)
                if (strncasecmp(hay + i, needle, n) == 0)
                        return true;
        return false;
}

const struct mk_sched_model *mk_sched_config_match(const struct mk_sched_config *c, const char *gpu_name) {
        for (size_t i = 0; i < c->n_models; i++)
                for (size_t k = 0; k < c->models[i].n_models; k++)
                        if (contains_ci(gpu_name, c->models[i].models[k]))
                                return &c->models[i];
        return NULL;
}

bool mk_sched_config_allows(const struct mk_sched_config *c, const char *gpu_name, const struct mk_profile_name *p) {
        if (c->n_models == 0)
                return true;
        const struct mk_sched_model *m = mk_sched_config_match(c, gpu_name);
        for (size_t i = 0; m && i < m->n_profiles; i++)
                if (mk_profile_name_equal(&m->profiles[i], p))
                        return true;
        return false;
}

const struct mk_sched_node_config *mk_sched_config_node(const struct mk_sched_config *c, const char *node) {
        for (size_t i = 0; i < c->n_nodes; i++)
                if (streq(c->nodes[i].name, node))
                        return &c->nodes[i];
        return NULL;
}

enum mk_sched_mode mk_sched_config_node_mode(const struct mk_sched_config *c, const char *node) {
        const struct mk_sched_node_config *nc = mk_sched_config_node(c, node);
        return nc ? nc->mode : MK_SCHED_MODE_MIG;
}

static const struct mk_sched_gpu_config *gpu_entry(const struct mk_sched_node_config *nc, unsigned index) {
        for (size_t i = 0; nc && i < nc->n_gpus; i++)
                if (nc->gpus[i].index == index)
                        return &nc->gpus[i];
        return NULL;
}

enum mk_sched_mode mk_sched_config_gpu_mode(const struct mk_sched_config *c, const char *node, unsigned index,
                                            bool mig_enabled) {
        const struct mk_sched_node_config *nc = mk_sched_config_node(c, node);
        if (!nc)
                return MK_SCHED_MODE_MIG;
        if (nc->mode != MK_SCHED_MODE_MIXED)
                return nc->mode;
        const struct mk_sched_gpu_config *g = gpu_entry(nc, index);
        if (g)
                return g->mode;
        return mig_enabled ? MK_SCHED_MODE_MIG : MK_SCHED_MODE_HAMI_CORE;
}

unsigned mk_sched_config_split(const struct mk_sched_config *c, const char *node) {
        const struct mk_sched_node_config *nc = mk_sched_config_node(c, node);
        if (nc && nc->split)
                return nc->split;
        return c->split ? c->split : MK_SCHED_DEFAULT_SPLIT;
}

bool mk_sched_config_may_switch(const struct mk_sched_config *c, const char *node, unsigned index) {
        const struct mk_sched_node_config *nc = mk_sched_config_node(c, node);
        return nc && nc->mode == MK_SCHED_MODE_MIXED && nc->mode_switch == MK_SCHED_SWITCH_IDLE &&
               !gpu_entry(nc, index);
}
