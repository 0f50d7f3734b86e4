/* Device plugin / GFD v1 config file (plugin-config.h; k8s-device-plugin v0.20.0 api/config/v1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "spec/plugin-config.h"
#include "spec/yaml.h"

static const char *const mig_strategy_table[_MK_MIG_STRATEGY_MAX] = {
        [MK_MIG_STRATEGY_NONE] = "none",
        [MK_MIG_STRATEGY_SINGLE] = "single",
        [MK_MIG_STRATEGY_MIXED] = "mixed",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_mig_strategy, enum mk_mig_strategy, mig_strategy_table, _MK_MIG_STRATEGY_MAX, _MK_MIG_STRATEGY_INVALID);

static const char *const sharing_table[_MK_SHARING_MAX] = {
        [MK_SHARING_NONE] = "none",
        [MK_SHARING_TIME_SLICING] = "time-slicing",
        [MK_SHARING_MPS] = "mps",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_sharing_strategy, enum mk_sharing_strategy, sharing_table, _MK_SHARING_MAX, _MK_SHARING_INVALID);

static void resource_done(struct mk_shared_resource *r) {
        free(r->name);
        free(r->rename);
        strv_free(r->devices);
        *r = (struct mk_shared_resource) {0};
}

static void resources_free(struct mk_shared_resource *l, size_t n) {
        for (size_t i = 0; l && i < n; i++)
                resource_done(&l[i]);
        free(l);
}

struct mk_plugin_config *mk_plugin_config_free(struct mk_plugin_config *c) {
        if (!c)
                return NULL;
        free(c->file);
        resources_free(c->resources, c->n_resources);
        free(c);
        return NULL;
}

const struct mk_shared_resource *mk_plugin_config_find(const struct mk_plugin_config *c, const char *name) {
        for (size_t i = 0; c && i < c->n_resources; i++)
                if (streq(c->resources[i].name, name))
                        return &c->resources[i];
        return NULL;
}

/* One sharing block (timeSlicing or mps) as parsed. */
struct sharing_block {
        bool present;
        bool rename_by_default;
        bool has_fail_requests;
        bool fail_requests;
        struct mk_shared_resource *resources;
        size_t n_resources;
        const struct mk_yaml_node *list; /* the resources list, while parsing */
};

static void sharing_block_done(struct sharing_block *b) {
        resources_free(b->resources, b->n_resources);
        *b = (struct sharing_block) {0};
}

/* Kubernetes' DNS-1123 subdomain: lower-case alphanumerics, '-' and '.',
 * starting and ending alphanumeric. */
static bool dns_subdomain_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 253)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
                if (!alnum && ((i == 0 || i == n - 1) || (ch != '-' && ch != '.')))
                        return false;
        }
        return true;
}

/* A resource name as upstream's ResourceName: "nvidia.com/" added when
 * missing, at most MK_MAX_RESOURCE_NAME bytes, DNS subdomain after the '/'.
 * 0 with the full name in *ret, -ENOMEM, -E2BIG when too long, or -EINVAL
 * with *ret_why set. */
static int resource_name_full(const char *s, char **ret, const char **ret_why) {
        static const char prefix[] = "nvidia.com/";
        const char *base = strneq(s, prefix, strlen(prefix)) ? s + strlen(prefix) : s;
        if (strchr(base, '/')) {
                *ret_why = "only the 'nvidia.com/' prefix is allowed";
                return -EINVAL;
        }
        if (!dns_subdomain_valid(base)) {
                *ret_why = "want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit";
                return -EINVAL;
        }
        if (strlen(prefix) + strlen(base) > MK_MAX_RESOURCE_NAME)
                return -E2BIG; /* callers name the full name */
        char *full = NULL;
        if (asprintf(&full, "%s%s", prefix, base) < 0)
                return -ENOMEM;
        *ret = full;
        return 0;
}

static int get_resource_name(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret) {
        _cleanup_free_ char *s = NULL;
        int r = mk_yaml_get_str(c, n, what, &s);
        if (r < 0)
                return r;
        const char *why = NULL;
        r = resource_name_full(s, ret, &why);
        if (r == -ENOMEM)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        if (r == -E2BIG)
                return mk_yaml_error(c, n, "resource name 'nvidia.com/%s' longer than %u characters",
                                     strneq(s, "nvidia.com/", 11) ? s + 11 : s, MK_MAX_RESOURCE_NAME);
        if (r < 0)
                return mk_yaml_error(c, n, "invalid resource name '%s': %s", s, why);
        return 0;
}

/* A replicas count: an integer >= 2 (1 would be no sharing; upstream rejects it). */
static int get_replicas(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, unsigned *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_INT)
                return mk_yaml_error(c, n, "replicas must be an integer, not %s", mk_yaml_type_json(v.type));
        if (v.is_unsigned || v.i < 2)
                return mk_yaml_error(c, n, "replicas must be at least 2");
        if (v.i > (int64_t) MK_MAX_SHARING_REPLICAS)
                return mk_yaml_error(c, n, "replicas must be at most %u", MK_MAX_SHARING_REPLICAS);
        *ret = (unsigned) v.i;
        return 0;
}

static bool all_digits(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++)
                if (*s < '0' || *s > '9')
                        return false;
        return true;
}

/* A device reference: GPU index "0", MIG index "0:1", "GPU-<uuid>",
 * "MIG-<uuid>" or the legacy "MIG-GPU-<uuid>/<gi>/<ci>". */
static bool device_ref_valid(const char *s) {
        if (all_digits(s))
                return strlen(s) <= 10;
        const char *colon = strchr(s, ':');
        if (colon) {
                _cleanup_free_ char *a = strndup(s, (size_t) (colon - s));
                return a && all_digits(a) && all_digits(colon + 1) && strlen(a) <= 10 && strlen(colon + 1) <= 10;
        }
        if (strneq(s, "GPU-", 4) || strneq(s, "MIG-", 4)) {
                if (!s[4] || strlen(s) > 128)
                        return false;
                for (const char *p = s; *p; p++)
                        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-/", *p))
                                return false;
                return true;
        }
        return false;
}

static int get_devices(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_shared_resource *res) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type == MK_YAML_STR) {
                if (!streq(n->value, "all"))
                        return mk_yaml_error(c, n, "devices must be \"all\", a count or a list, not '%s'", n->value);
                res->devices_all = true;
                return 0;
        }
        if (v.type == MK_YAML_INT) {
                if (v.is_unsigned || v.i < 1 || v.i > (int64_t) MK_MAX_SHARED_DEVICES)
                        return mk_yaml_error(c, n, "a devices count must be between 1 and %u", MK_MAX_SHARED_DEVICES);
                res->devices_all = false;
                res->devices_count = (unsigned) v.i;
                return 0;
        }
        if (v.type != MK_YAML_SEQ)
                return mk_yaml_error(c, n, "devices must be \"all\", a count or a list, not %s",
                                     mk_yaml_type_json(v.type));
        if (n->n_items == 0)
                return mk_yaml_error(c, n, "devices must not be an empty list");
        if (n->n_items > MK_MAX_SHARED_DEVICES)
                return mk_yaml_error(c, n, "too many devices (at most %u)", MK_MAX_SHARED_DEVICES);
        _cleanup_strv_free_ char **l = calloc(n->n_items + 1, sizeof(char *));
        if (!l)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                struct mk_yaml_scalar iv;
                r = mk_yaml_resolve(c, it, &iv);
                if (r < 0)
                        return r;
                if (iv.type == MK_YAML_INT) {
                        if (iv.is_unsigned || iv.i < 0 || iv.i > (int64_t) UINT32_MAX)
                                return mk_yaml_error(c, it, "invalid GPU index");
                        if (asprintf(&l[i], "%lld", (long long) iv.i) < 0) {
                                l[i] = NULL;
                                return mk_yaml_error_code(c, -ENOMEM, it, "out of memory");
                        }
                } else {
                        r = mk_yaml_get_str(c, it, "a device", &l[i]);
                        if (r < 0)
                                return r;
                        if (!device_ref_valid(l[i]))
                                return mk_yaml_error(c, it,
                                                     "invalid device '%s' (want a GPU index, \"GPU:MIG\" index, "
                                                     "GPU-<uuid> or MIG-<uuid>)",
                                                     l[i]);
                }
                for (size_t k = 0; k < i; k++)
                        if (streq(l[k], l[i]))
                                return mk_yaml_error(c, it, "device '%s' is listed twice", l[i]);
                mk_yaml_path_pop(c, old);
        }
        res->devices_all = false;
        res->n_devices = n->n_items;
        res->devices = TAKE_PTR(l);
        return 0;
}

static int resource_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_shared_resource *res = userdata;
        if (streq(p->name, "name"))
                return get_resource_name(c, p->value, "name", &res->name);
        if (streq(p->name, "rename"))
                return get_resource_name(c, p->value, "rename", &res->rename);
        if (streq(p->name, "devices"))
                return get_devices(c, p->value, res);
        return get_replicas(c, p->value, &res->replicas);
}

static int parse_resource(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_shared_resource *res) {
        static const char *const known[] = {"name", "rename", "devices", "replicas", NULL};
        res->devices_all = true;
        int r = mk_yaml_walk_known(c, n, "a shared resource", known, false, resource_field, res);
        if (r < 0)
                return r;
        if (!res->name)
                return mk_yaml_error(c, n, "missing required field 'name'");
        if (res->replicas == 0)
                return mk_yaml_error(c, n, "missing required field 'replicas'");
        return 0;
}

static int sharing_block_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct sharing_block *b = userdata;
        if (streq(p->name, "renameByDefault"))
                return mk_yaml_get_bool(c, p->value, &b->rename_by_default);
        if (streq(p->name, "failRequestsGreaterThanOne")) {
                b->has_fail_requests = true;
                return mk_yaml_get_bool(c, p->value, &b->fail_requests);
        }
        struct mk_yaml_scalar sv;
        int r = mk_yaml_resolve(c, p->value, &sv);
        if (r < 0)
                return r;
        if (sv.type != MK_YAML_SEQ)
                return mk_yaml_error(c, p->value, "resources must be a list, not %s", mk_yaml_type_json(sv.type));
        if (p->value->n_items > MK_MAX_SHARED_RESOURCES)
                return mk_yaml_error(c, p->value, "too many resources (at most %u)", MK_MAX_SHARED_RESOURCES);
        b->list = p->value;
        return 0;
}

static int parse_sharing_block(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct sharing_block *b) {
        static const char *const known[] = {"renameByDefault", "failRequestsGreaterThanOne", "resources", NULL};
        int r = mk_yaml_walk_known(c, n, "a sharing block", known, false, sharing_block_field, b);
        if (r < 0)
                return r;
        b->present = true;
        const struct mk_yaml_node *list = b->list;
        if (!list)
                return mk_yaml_error(c, n, "missing required field 'resources'");
        b->resources = calloc(list->n_items ? list->n_items : 1, sizeof(*b->resources));
        if (!b->resources)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        size_t old = mk_yaml_path_push_key(c, "resources");
        for (size_t i = 0; i < list->n_items; i++) {
                size_t old2 = mk_yaml_path_push_index(c, i);
                b->n_resources = i + 1; /* freed by the caller from here on */
                r = parse_resource(c, list->items[i], &b->resources[i]);
                if (r < 0)
                        return r;
                if (b->rename_by_default && !b->resources[i].rename &&
                    asprintf(&b->resources[i].rename, "%s.shared", b->resources[i].name) < 0) {
                        b->resources[i].rename = NULL;
                        return mk_yaml_error_code(c, -ENOMEM, list->items[i], "out of memory");
                }
                if (b->resources[i].rename && strlen(b->resources[i].rename) > MK_MAX_RESOURCE_NAME)
                        return mk_yaml_error(c, list->items[i], "resource name '%s' longer than %u characters",
                                             b->resources[i].rename, MK_MAX_RESOURCE_NAME);
                mk_yaml_path_pop(c, old2);
        }
        mk_yaml_path_pop(c, old);
        return 0;
}

/* The two sharing blocks as parsed, before one of them is chosen. */
struct sharing {
        struct sharing_block time_slicing, mps;
};

static void sharing_done(struct sharing *s) {
        sharing_block_done(&s->time_slicing);
        sharing_block_done(&s->mps);
}

static int sharing_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct sharing *s = userdata;
        return parse_sharing_block(c, p->value, streq(p->name, "mps") ? &s->mps : &s->time_slicing);
}

static int parse_sharing(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_plugin_config *cfg) {
        static const char *const known[] = {"timeSlicing", "mps", NULL};
        _cleanup_(sharing_done) struct sharing s = {0};
        int r = mk_yaml_walk_known(c, n, "sharing", known, false, sharing_field, &s);
        if (r < 0)
                return r;
        /* Upstream (k8s-device-plugin v0.20.0 api/config/v1): a present mps block supplies the list; the strategy
         * is mps / time-slicing when that list shares anything. */
        struct sharing_block *active = s.mps.present ? &s.mps : &s.time_slicing;
        cfg->sharing = active->n_resources == 0 ? MK_SHARING_NONE
                       : s.mps.present          ? MK_SHARING_MPS
                                                : MK_SHARING_TIME_SLICING;
        cfg->rename_by_default = active->rename_by_default;
        cfg->fail_requests_greater_than_one = active->has_fail_requests ? active->fail_requests : s.mps.present;
        cfg->resources = TAKE_PTR(active->resources);
        cfg->n_resources = active->n_resources;
        active->n_resources = 0;
        return 0;
}

static int flag_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        static const char *const plugin_known[] = {"passDeviceSpecs",     "deviceListStrategy", "deviceIDStrategy",
                                                   "cdiAnnotationPrefix", "nvidiaCTKPath",      "containerDriverRoot",
                                                   "sharedDevicesAllocationPolicy", NULL};
        static const char *const gfd_known[] = {"oneshot", "noTimestamp", "sleepInterval", "outputFile",
                                                "machineTypeFile", NULL};
        struct mk_plugin_config *cfg = userdata;
        if (streq(p->name, "plugin") || streq(p->name, "gfd")) {
                _cleanup_yaml_map_done_ struct mk_yaml_map sub = {0};
                return mk_yaml_map_load_known(c, p->value, p->name, streq(p->name, "plugin") ? plugin_known : gfd_known,
                                              false, &sub);
        }
        if (!streq(p->name, "migStrategy"))
                return 0;
        _cleanup_free_ char *s = NULL;
        int r = mk_yaml_get_str(c, p->value, "migStrategy", &s);
        if (r < 0)
                return r;
        enum mk_mig_strategy st = mk_mig_strategy_from_string(s);
        if (st < 0)
                return mk_yaml_error(c, p->value, "unknown MIG strategy '%s' (none, single or mixed)", s);
        cfg->mig_strategy = st;
        cfg->has_mig_strategy = true;
        return 0;
}

static int parse_flags(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_plugin_config *cfg) {
        /* Upstream's keys (k8s-device-plugin v0.20.0 cmd/nvidia-device-plugin/main.go, api/config/v1); only migStrategy matters here. */
        static const char *const known[] = {"migStrategy",     "failOnInitError",   "nvidiaDriverRoot",
                                            "nvidiaDevRoot",   "mpsRoot",           "gdrcopyEnabled",
                                            "gdsEnabled",      "mofedEnabled",      "useNodeFeatureAPI",
                                            "deviceDiscoveryStrategy", "plugin",    "gfd",
                                            NULL};
        return mk_yaml_walk_known(c, n, "flags", known, false, flag_field, cfg);
}

static int top_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_plugin_config *cfg = userdata;
        if (streq(p->name, "version"))
                return mk_yaml_check_version(c, p->value, "v1");
        if (streq(p->name, "flags"))
                return parse_flags(c, p->value, cfg);
        if (streq(p->name, "sharing"))
                return parse_sharing(c, p->value, cfg);
        return 0; /* resources (ignored upstream too) and imex: accepted, unused here. */
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_plugin_config *cfg) {
        static const char *const known[] = {"version", "flags", "resources", "sharing", "imex", NULL};
        if (!root)
                return 0; /* an empty file is an empty v1 config */
        return mk_yaml_walk_known(c, root, "the document", known, false, top_field, cfg);
}

/* The document into a new mk_plugin_config (mk_yaml_parse_walk's walk). */
MK_YAML_DEFINE_WALK(walk, struct mk_plugin_config, mk_plugin_config_freep, parse_top)

int mk_plugin_config_parse(const char *data, size_t len, const char *file, struct mk_plugin_config **ret,
                           struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_PLUGIN_CONFIG_BYTES, walk, ret, e);
}

int mk_plugin_config_load(const char *path, struct mk_plugin_config **ret, struct mk_error *e) {
        return mk_yaml_load_walk(path, MK_MAX_PLUGIN_CONFIG_BYTES, walk, ret, e);
}

/* Trims blanks at both ends of [*b, *e). */
static void trim(const char **b, const char **e) {
        while (*b < *e && (**b == ' ' || **b == '\t'))
                (*b)++;
        while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
                (*e)--;
}

static void parts_freep(char *(*v)[3]) {
        for (size_t i = 0; i < 3; i++)
                free((*v)[i]);
}

/* One "<name>:<rename>:<replicas>" entry, already trimmed, into res. */
static int parse_rc_entry(const char *b, const char *end, unsigned no, struct mk_shared_resource *res,
                          struct mk_error *e) {
        const char *parts[3][2];
        unsigned n = 0;
        const char *p = b;
        for (;;) {
                const char *c = memchr(p, ':', (size_t) (end - p));
                if (n == 3)
                        return mk_error_set_field(e, -EINVAL, "--resource-config",
                                                  "entry %u '%.*s': want <name>:<rename>:<replicas>, found more "
                                                  "than 3 ':'-separated parts",
                                                  no, (int) (end - b), b);
                parts[n][0] = p;
                parts[n][1] = c ? c : end;
                trim(&parts[n][0], &parts[n][1]);
                n++;
                if (!c)
                        break;
                p = c + 1;
        }
        if (n != 3)
                return mk_error_set_field(e, -EINVAL, "--resource-config",
                                          "entry %u '%.*s': want <name>:<rename>:<replicas>, found %u part%s", no,
                                          (int) (end - b), b, n, n == 1 ? "" : "s");
        static const char *const what[3] = {"name", "rename", "replicas"};
        _cleanup_(parts_freep) char *v[3] = {NULL, NULL, NULL};
        for (unsigned i = 0; i < 3; i++) {
                if (parts[i][1] == parts[i][0])
                        return mk_error_set_field(e, -EINVAL, "--resource-config", "entry %u '%.*s': empty %s", no,
                                                  (int) (end - b), b, what[i]);
                v[i] = strndup(parts[i][0], (size_t) (parts[i][1] - parts[i][0]));
                if (!v[i])
                        return mk_error_set(e, -ENOMEM, "out of memory");
                if (strlen(v[i]) != (size_t) (parts[i][1] - parts[i][0]))
                        return mk_error_set_field(e, -EINVAL, "--resource-config", "entry %u: NUL byte in %s", no,
                                                  what[i]);
        }
        _cleanup_free_ char *name = NULL, *rename = NULL;
        for (unsigned i = 0; i < 2; i++) {
                const char *why = NULL;
                int r = resource_name_full(v[i], i == 0 ? &name : &rename, &why);
                if (r == -ENOMEM)
                        return mk_error_set(e, r, "out of memory");
                if (r == -E2BIG)
                        return mk_error_set_field(e, -EINVAL, "--resource-config",
                                                  "entry %u: %s '%s' longer than %u characters with the "
                                                  "'nvidia.com/' prefix",
                                                  no, what[i], v[i], MK_MAX_RESOURCE_NAME);
                if (r < 0)
                        return mk_error_set_field(e, r, "--resource-config", "entry %u: invalid %s '%s': %s", no,
                                                  what[i], v[i], why);
        }
        int replicas = 0;
        if (mk_parse_int(v[2], &replicas) < 0 || (replicas < 1 && replicas != -1) ||
            replicas > (int) MK_MAX_SHARING_REPLICAS)
                return mk_error_set_field(e, -EINVAL, "--resource-config",
                                          "entry %u: replicas '%s' is not -1 (auto) or an integer from 1 to %u", no,
                                          v[2], MK_MAX_SHARING_REPLICAS);
        *res = (struct mk_shared_resource) {
                .name = TAKE_PTR(name),
                .devices_all = true,
                .replicas = replicas > 0 ? (unsigned) replicas : 0,
                .replicas_auto = replicas == -1,
        };
        if (!streq(res->name, rename))
                res->rename = TAKE_PTR(rename);
        return 0;
}

int mk_plugin_config_parse_resource_config(const char *s, struct mk_plugin_config **ret, struct mk_error *e) {
        size_t len = strnlen(s, MK_MAX_RESOURCE_CONFIG_BYTES + 1);
        if (len > MK_MAX_RESOURCE_CONFIG_BYTES)
                return mk_error_set_field(e, -E2BIG, "--resource-config", "longer than %u bytes",
                                          MK_MAX_RESOURCE_CONFIG_BYTES);
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = calloc(1, sizeof(*cfg));
        if (!cfg || !(cfg->file = strdup("--resource-config")))
                return mk_error_set(e, -ENOMEM, "out of memory");
        cfg->sharing = MK_SHARING_NONE;
        const char *p = s, *end = s + len;
        unsigned no = 0;
        while (p <= end) {
                const char *c = memchr(p, ',', (size_t) (end - p));
                const char *b = p, *eb = c ? c : end;
                p = eb + 1;
                no++;
                trim(&b, &eb);
                if (b == eb) {
                        if (!c)
                                break;
                        continue;
                }
                if (cfg->n_resources >= MK_MAX_SHARED_RESOURCES)
                        return mk_error_set_field(e, -E2BIG, "--resource-config", "more than %u entries",
                                                  MK_MAX_SHARED_RESOURCES);
                struct mk_shared_resource *l =
                        realloc(cfg->resources, (cfg->n_resources + 1) * sizeof(*cfg->resources));
                if (!l)
                        return mk_error_set(e, -ENOMEM, "out of memory");
                cfg->resources = l;
                struct mk_shared_resource res = {0};
                int r = parse_rc_entry(b, eb, no, &res, e);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < cfg->n_resources; i++)
                        if (streq(cfg->resources[i].name, res.name)) {
                                mk_error_set_field(e, -EINVAL, "--resource-config",
                                                   "entry %u: resource '%s' listed twice", no, res.name);
                                resource_done(&res);
                                return -EINVAL;
                        }
                cfg->resources[cfg->n_resources++] = res;
                if (res.replicas_auto || res.replicas > 1)
                        cfg->sharing = MK_SHARING_TIME_SLICING;
                if (!c)
                        break;
        }
        *ret = TAKE_PTR(cfg);
        return 0;
}
