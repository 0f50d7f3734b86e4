/* The device plugin's resources (resources.h; k8s-device-plugin v0.20.0 internal/rm,
 * k8s-device-plugin v0.20.0 api/config/v1, iktos/k8s-gpu-sharing-plugin). */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "gfd/labels-host.h"
#include "plugin/resources.h"

#define PREFIX "nvidia.com/"

static const char *const list_strategy_names[] = {"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"};

const char *mk_dp_list_strategy_to_string(enum mk_dp_list_strategy s) {
        for (unsigned i = 0; i < ELEMENTSOF(list_strategy_names); i++)
                if ((unsigned) s == 1u << i)
                        return list_strategy_names[i];
        return NULL;
}

int mk_dp_list_strategy_from_string(const char *s) {
        for (unsigned i = 0; s && i < ELEMENTSOF(list_strategy_names); i++)
                if (streq(s, list_strategy_names[i]))
                        return (int) (1u << i);
        return -EINVAL;
}

int mk_dp_list_strategies_parse(const char *s, unsigned *ret, struct mk_error *e) {
        if (!s)
                return mk_error_set(e, -EINVAL, "device list strategy: empty list");
        unsigned bits = 0;
        const char *p = s;
        for (;;) {
                size_t n = strcspn(p, ",");
                const char *b = p, *end = p + n;
                while (b < end && isblank((unsigned char) *b))
                        b++;
                while (end > b && isblank((unsigned char) end[-1]))
                        end--;
                int bit = -EINVAL;
                for (unsigned i = 0; i < ELEMENTSOF(list_strategy_names); i++)
                        if ((size_t) (end - b) == strlen(list_strategy_names[i]) &&
                            strneq(b, list_strategy_names[i], (size_t) (end - b)))
                                bit = (int) (1u << i);
                if (bit < 0)
                        return mk_error_set(e, -EINVAL,
                                            "unknown device list strategy '%.*s' (want envvar, volume-mounts, "
                                            "cdi-annotations or cdi-cri)",
                                            (int) MIN((size_t) (end - b), 64u), b);
                bits |= (unsigned) bit;
                if (!p[n])
                        break;
                p += n + 1;
        }
        *ret = bits;
        return 0;
}

static const char *const id_strategy_table[_MK_DP_ID_MAX] = {
        [MK_DP_ID_UUID] = "uuid",
        [MK_DP_ID_INDEX] = "index",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_dp_id_strategy, enum mk_dp_id_strategy, id_strategy_table, _MK_DP_ID_MAX, _MK_DP_ID_INVALID);

void mk_dp_options_init(struct mk_dp_options *o) {
        *o = (struct mk_dp_options) {
                .mig_strategy = MK_MIG_STRATEGY_NONE,
                .list_strategies = MK_DP_LIST_ENVVAR,
                .id_strategy = MK_DP_ID_UUID,
                .driver_root = "/",
                .cdi_annotation_prefix = "cdi.k8s.io/",
                .cdi_kind = "k8s.device-plugin.nvidia.com/gpu",
        };
}

/* ---- /proc/driver/nvidia-caps/mig-minors ---- */

struct cap_minor {
        unsigned gpu_minor, gi, ci; /* ci UINT32_MAX: the GI's access cap */
        unsigned cap;
};

struct cap_table {
        struct cap_minor *items;
        size_t n;
};

/* "<prefix><u32>" at *p up to the next '/' or end; advances *p past it. */
static int take_number(const char **p, const char *end, const char *prefix, unsigned *ret) {
        size_t pl = strlen(prefix);
        if ((size_t) (end - *p) < pl || !strneq(*p, prefix, pl))
                return -EINVAL;
        const char *b = *p + pl, *q = b;
        while (q < end && *q != '/')
                q++;
        char num[16];
        if (q == b || (size_t) (q - b) >= sizeof(num))
                return -EINVAL;
        memcpy(num, b, (size_t) (q - b));
        num[q - b] = 0;
        uint32_t v;
        if (mk_parse_u32(num, &v) < 0)
                return -EINVAL;
        *ret = v;
        *p = q;
        return 0;
}

/* One line "gpu<m>/gi<g>/access <N>" or "gpu<m>/gi<g>/ci<c>/access <N>";
 * -EINVAL for any other line (config, monitor, garbage: skipped). */
static int parse_cap_line(const char *b, const char *end, struct cap_minor *ret) {
        const char *sp = memchr(b, ' ', (size_t) (end - b));
        if (!sp)
                return -EINVAL;
        struct cap_minor c = {.ci = UINT32_MAX};
        const char *p = b;
        if (take_number(&p, sp, "gpu", &c.gpu_minor) < 0 || p == sp || *p++ != '/' ||
            take_number(&p, sp, "gi", &c.gi) < 0 || p == sp || *p++ != '/')
                return -EINVAL;
        if (take_number(&p, sp, "ci", &c.ci) == 0) {
                if (p == sp || *p++ != '/')
                        return -EINVAL;
        }
        if ((size_t) (sp - p) != strlen("access") || !strneq(p, "access", 6))
                return -EINVAL;
        char num[16];
        const char *v = sp + 1;
        if (end - v <= 0 || (size_t) (end - v) >= sizeof(num) || memchr(v, 0, (size_t) (end - v)))
                return -EINVAL;
        memcpy(num, v, (size_t) (end - v));
        num[end - v] = 0;
        uint32_t cap;
        if (mk_parse_u32(num, &cap) < 0 || cap > INT32_MAX)
                return -EINVAL;
        c.cap = cap;
        *ret = c;
        return 0;
}

/* Reads the table; a missing or unreadable file gives an empty table (Allocate
 * with device specs then names the device that lacks its caps). -ENOMEM only. */
static int cap_table_load(const struct mk_host *h, struct cap_table *ret) {
        *ret = (struct cap_table) {0};
        if (!h)
                return 0;
        _cleanup_free_ char *path = NULL, *data = NULL;
        size_t len = 0;
        int r = mk_host_path(h, MK_HOST_PROC, "driver/nvidia-caps/mig-minors", &path);
        if (r < 0)
                return r == -ENOMEM ? r : 0;
        struct mk_error e = {0};
        r = mk_read_file(path, MK_MAX_MIG_MINORS_BYTES, &data, &len, &e);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                log_debug_area("plugin", "No MIG capability minors from '%s' (%s), ignoring", path, e.msg);
                return 0;
        }
        struct cap_minor *items = NULL;
        size_t n = 0, alloc = 0;
        for (const char *p = data, *end = data + len; p < end;) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                const char *le = nl ? nl : end;
                struct cap_minor c;
                if (parse_cap_line(p, le, &c) == 0) {
                        if (n == alloc) {
                                alloc = alloc ? alloc * 2 : 64;
                                struct cap_minor *m = realloc(items, alloc * sizeof(*items));
                                if (!m) {
                                        free(items);
                                        return -ENOMEM;
                                }
                                items = m;
                        }
                        items[n++] = c;
                }
                p = le + 1;
        }
        *ret = (struct cap_table) {.items = items, .n = n};
        return 0;
}

static int cap_lookup(const struct cap_table *t, unsigned minor, unsigned gi, unsigned ci) {
        for (size_t i = 0; i < t->n; i++)
                if (t->items[i].gpu_minor == minor && t->items[i].gi == gi && t->items[i].ci == ci)
                        return (int) t->items[i].cap;
        return -1;
}

/* ---- NUMA node from sysfs (k8s-device-plugin v0.20.0 internal/rm) ---- */

static int numa_node_of(const struct mk_host *h, const char *nvml_bus_id) {
        _cleanup_free_ char *v = NULL;
        int node;
        if (!h || !*nvml_bus_id || mk_pci_attr_by_bus_id(h, nvml_bus_id, "numa_node", &v) < 0 ||
            mk_parse_int(v, &node) < 0 || node < 0)
                return -1;
        return node;
}

/* ---- building ---- */

/* A device before sharing. */
struct cand {
        struct mk_dp_device d;
        char resource[64];      /* by the MIG strategy */
        const struct mk_shared_resource *share;
        unsigned share_index;
};

struct cands {
        struct cand *items;
        size_t n, alloc;
};

static void cands_done(struct cands *c) {
        free(c->items);
        *c = (struct cands) {0};
}

static struct cand *cands_add(struct cands *c) {
        if (c->n == c->alloc) {
                size_t alloc = c->alloc ? c->alloc * 2 : 16;
                struct cand *m = realloc(c->items, alloc * sizeof(*m));
                if (!m)
                        return NULL;
                c->items = m;
                c->alloc = alloc;
        }
        struct cand *x = &c->items[c->n++];
        *x = (struct cand) {0};
        return x;
}

static int add_gpu(struct cands *c, const struct mk_snapshot *s, size_t i, int numa, struct mk_error *e) {
        const struct mk_gpu *g = &s->gpus[i];
        if (!*g->uuid)
                return mk_error_set(e, -EINVAL, "GPU %u: NVML reported no UUID", g->index);
        struct cand *x = cands_add(c);
        if (!x)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        struct mk_dp_device *d = &x->d;
        snprintf(d->base_id, sizeof(d->base_id), "%s", g->uuid);
        snprintf(d->gpu_uuid, sizeof(d->gpu_uuid), "%s", g->uuid);
        snprintf(d->index, sizeof(d->index), "%u", g->index);
        d->gpu = (unsigned) i;
        d->minor = g->minor;
        d->gi_cap = d->ci_cap = -1;
        d->numa_node = numa;
        d->healthy = true;
        d->memory_bytes = g->memory_total_bytes;
        snprintf(x->resource, sizeof(x->resource), PREFIX "gpu");
        return 0;
}

static unsigned mig_device_count(const struct mk_gpu *g) {
        unsigned n = 0;
        for (size_t j = 0; j < g->n_gis; j++)
                n += (unsigned) g->gis[j].n_cis;
        return n;
}

/* The MIG devices of GPU i, named "nvidia.com/mig-<GI profile>" ('+' -> '.')
 * or, with `as_gpu`, "nvidia.com/gpu". */
static int add_mig(struct cands *c, const struct mk_snapshot *s, size_t i, int numa, const struct cap_table *caps,
                   bool as_gpu, struct mk_error *e) {
        const struct mk_gpu *g = &s->gpus[i];
        for (size_t j = 0; j < g->n_gis; j++) {
                const struct mk_gi *gi = &g->gis[j];
                const struct mk_gi_profile *gp = mk_gpu_profile_by_id(g, gi->profile_id);
                for (size_t k = 0; k < gi->n_cis; k++) {
                        const struct mk_ci *ci = &gi->cis[k];
                        if (!*ci->uuid)
                                return mk_error_set(e, -EINVAL, "GPU %u: MIG device GI %u CI %u has no UUID",
                                                    g->index, gi->id, ci->id);
                        if (!gp)
                                return mk_error_set(e, -EINVAL,
                                                    "GPU %u: MIG device '%s' has GPU instance profile %u, which the "
                                                    "GPU does not list",
                                                    g->index, ci->uuid, gi->profile_id);
                        /* Mixed: the GPU instance profile names the resource, so a
                         * 1c.3g.20gb device is nvidia.com/mig-3g.20gb, as every
                         * upstream plugin version registers it. */
                        const char *rname = ci->slices != gp->slices && gp->named ? gp->name : ci->name;
                        struct cand *x = cands_add(c);
                        if (!x)
                                return mk_error_set(e, -ENOMEM, "Out of memory");
                        struct mk_dp_device *d = &x->d;
                        snprintf(d->base_id, sizeof(d->base_id), "%s", ci->uuid);
                        snprintf(d->mig_uuid, sizeof(d->mig_uuid), "%s", ci->uuid);
                        snprintf(d->gpu_uuid, sizeof(d->gpu_uuid), "%s", g->uuid);
                        snprintf(d->index, sizeof(d->index), "%u:%u", g->index, ci->mig_index);
                        d->gpu = (unsigned) i;
                        d->minor = g->minor;
                        d->mig = true;
                        d->gi_id = gi->id;
                        d->ci_id = ci->id;
                        d->gi_cap = cap_lookup(caps, g->minor, gi->id, UINT32_MAX);
                        d->ci_cap = cap_lookup(caps, g->minor, gi->id, ci->id);
                        d->numa_node = numa;
                        d->healthy = true;
                        d->memory_bytes = gp->memory_mib << 20;
                        if (as_gpu) {
                                snprintf(x->resource, sizeof(x->resource), PREFIX "gpu");
                                continue;
                        }
                        int w = snprintf(x->resource, sizeof(x->resource), PREFIX "mig-%s", rname);
                        if (w < 0 || (size_t) w > MK_MAX_RESOURCE_NAME)
                                return mk_error_set(e, -EINVAL, "GPU %u: MIG profile '%s' gives a resource name "
                                                    "longer than %u characters",
                                                    g->index, rname, MK_MAX_RESOURCE_NAME);
                        for (char *p = x->resource; *p; p++)
                                if (*p == '+')
                                        *p = '.';
                }
        }
        return 0;
}

/* Single strategy: one MIG device type on the node (k8s-device-plugin v0.20.0 internal/rm). */
static bool mig_same_type(const struct mk_gpu *ga, const struct mk_ci *a, const struct mk_gpu *gb,
                          const struct mk_ci *b, const struct mk_gi *gia, const struct mk_gi *gib) {
        const struct mk_gi_profile *pa = mk_gpu_profile_by_id(ga, gia->profile_id);
        const struct mk_gi_profile *pb = mk_gpu_profile_by_id(gb, gib->profile_id);
        if (!pa || !pb)
                return pa == pb && streq(a->name, b->name);
        return streq(a->name, b->name) && a->slices == b->slices && pa->slices == pb->slices &&
               pa->memory_mib == pb->memory_mib && pa->multiprocessors == pb->multiprocessors &&
               pa->copy_engines == pb->copy_engines && pa->decoders == pb->decoders &&
               pa->encoders == pb->encoders && pa->jpegs == pb->jpegs && pa->ofas == pb->ofas;
}

static int check_single(const struct mk_snapshot *s, struct mk_error *e) {
        const struct mk_gpu *first_g = NULL;
        const struct mk_gi *first_gi = NULL;
        const struct mk_ci *first = NULL;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                if (g->mig_current != MK_MIG_ENABLED)
                        return mk_error_set(e, -EINVAL,
                                            "GPU %u: MIG is disabled while other GPUs have it enabled; with the "
                                            "single strategy all devices on the node must be configured with the "
                                            "same migEnabled value",
                                            g->index);
                if (mig_device_count(g) == 0)
                        return mk_error_set(e, -EINVAL,
                                            "GPU %u has no MIG devices configured (the single strategy needs at "
                                            "least one on every MIG-enabled GPU)",
                                            g->index);
                for (size_t j = 0; j < g->n_gis; j++)
                        for (size_t k = 0; k < g->gis[j].n_cis; k++) {
                                const struct mk_ci *ci = &g->gis[j].cis[k];
                                if (!first) {
                                        first_g = g;
                                        first_gi = &g->gis[j];
                                        first = ci;
                                } else if (!mig_same_type(first_g, first, g, ci, first_gi, &g->gis[j]))
                                        return mk_error_set(e, -EINVAL,
                                                            "more than one MIG device type present on node: '%s' "
                                                            "on GPU %u and '%s' on GPU %u (the single strategy "
                                                            "needs one)",
                                                            first->name, first_g->index, ci->name, g->index);
                        }
        }
        return 0;
}

/* Does reference `ref` (config `devices` entry) name candidate x? GPU index,
 * MIG index, GPU or MIG UUID, legacy MIG-GPU-<uuid>/<gi>/<ci>; a GPU's index
 * or UUID also names its MIG devices. */
static bool ref_matches(const char *ref, const struct mk_dp_device *d) {
        if (streq(ref, d->index) || streq(ref, d->base_id))
                return true;
        if (!d->mig)
                return false;
        const char *colon = strchr(d->index, ':');
        if (colon && strlen(ref) == (size_t) (colon - d->index) && strneq(ref, d->index, (size_t) (colon - d->index)))
                return true;
        if (streq(ref, d->gpu_uuid))
                return true;
        char legacy[MK_UUID_MAX + 48];
        snprintf(legacy, sizeof(legacy), "MIG-%s/%u/%u", d->gpu_uuid, d->gi_id, d->ci_id);
        return streq(ref, legacy);
}

static const char *sharing_path(const struct mk_plugin_config *cfg) {
        if (cfg->file && streq(cfg->file, "--resource-config"))
                return "--resource-config";
        return cfg->sharing == MK_SHARING_MPS ? "sharing.mps.resources" : "sharing.timeSlicing.resources";
}

static int claim(struct cand *x, const struct mk_plugin_config *cfg, size_t ei, struct mk_error *e) {
        if (x->share)
                return mk_error_set(e, -EINVAL,
                                    "%s[%zu]: device '%s' (index %s) is already taken by entry %u; each device may "
                                    "be shared by one entry only",
                                    sharing_path(cfg), ei, x->d.base_id, x->d.index, x->share_index);
        x->share = &cfg->resources[ei];
        x->share_index = (unsigned) ei;
        return 0;
}

static int apply_sharing(struct cands *c, const struct mk_plugin_config *cfg, struct mk_error *e) {
        for (size_t ei = 0; cfg && ei < cfg->n_resources; ei++) {
                const struct mk_shared_resource *sr = &cfg->resources[ei];
                if (sr->devices_all) {
                        for (size_t i = 0; i < c->n; i++)
                                if (streq(c->items[i].resource, sr->name) && !c->items[i].share) {
                                        c->items[i].share = sr;
                                        c->items[i].share_index = (unsigned) ei;
                                }
                } else if (sr->devices_count) {
                        unsigned left = sr->devices_count;
                        for (size_t i = 0; i < c->n && left; i++)
                                if (streq(c->items[i].resource, sr->name) && !c->items[i].share) {
                                        c->items[i].share = sr;
                                        c->items[i].share_index = (unsigned) ei;
                                        left--;
                                }
                } else {
                        bool any = false;
                        for (size_t i = 0; i < c->n && !any; i++)
                                any = streq(c->items[i].resource, sr->name);
                        if (!any)
                                continue; /* resource absent from this node: the entry is for other nodes */
                        for (size_t k = 0; k < sr->n_devices; k++) {
                                bool found = false;
                                for (size_t i = 0; i < c->n; i++) {
                                        struct cand *x = &c->items[i];
                                        if (!streq(x->resource, sr->name) || !ref_matches(sr->devices[k], &x->d))
                                                continue;
                                        found = true;
                                        if (x->share == sr)
                                                continue; /* named twice, e.g. by GPU and by MIG index */
                                        int r = claim(x, cfg, ei, e);
                                        if (r < 0)
                                                return r;
                                }
                                if (!found)
                                        return mk_error_set(e, -EINVAL,
                                                            "%s[%zu].devices[%zu]: '%s' names no device of '%s' on "
                                                            "this node",
                                                            sharing_path(cfg), ei, k, sr->devices[k], sr->name);
                        }
                }
        }
        return 0;
}

static void resource_done(struct mk_dp_resource *r) {
        free(r->devices);
        free(r->by_id);
        *r = (struct mk_dp_resource) {0};
}

struct mk_dp_resources *mk_dp_resources_free(struct mk_dp_resources *rs) {
        if (!rs)
                return NULL;
        for (size_t i = 0; i < rs->n; i++)
                resource_done(&rs->r[i]);
        free(rs->r);
        free(rs->warning);
        free(rs);
        return NULL;
}

static int cmp_by_id(const void *a, const void *b, void *arg) {
        const struct mk_dp_device *d = arg;
        return strcmp(d[*(const size_t *) a].id, d[*(const size_t *) b].id);
}

static unsigned replicas_of(const struct cand *x) {
        if (!x->share)
                return 0;
        if (x->share->replicas_auto) {
                uint64_t n = (x->d.memory_bytes >> 20) / 1000;
                return (unsigned) MAX(1u, MIN(n, (uint64_t) MK_MAX_SHARING_REPLICAS));
        }
        return x->share->replicas;
}

static bool is_shared(const struct cand *x) {
        return x->share && (x->share->replicas_auto || x->share->replicas > 1);
}

static const char *target_of(const struct cand *x) {
        if (x->share && x->share->rename)
                return x->share->rename;
        return x->share ? x->share->name : x->resource;
}

/* Fills one resource from the candidates going to `name`. */
static int fill_resource(struct mk_dp_resource *res, const char *name, const struct cands *c,
                         const struct mk_plugin_config *cfg, struct mk_error *e) {
        snprintf(res->name, sizeof(res->name), "%s", name);
        const char *base = strneq(name, PREFIX, strlen(PREFIX)) ? name + strlen(PREFIX) : name;
        snprintf(res->endpoint, sizeof(res->endpoint), "nvidia-%s.sock", base);
        size_t n = 0;
        for (size_t i = 0; i < c->n; i++)
                if (streq(target_of(&c->items[i]), name)) {
                        unsigned k = is_shared(&c->items[i]) ? replicas_of(&c->items[i]) : 1;
                        n += k;
                        if (n > MK_DP_MAX_DEVICES)
                                return mk_error_set(e, -E2BIG, "resource '%s': more than %u devices with replicas",
                                                    name, MK_DP_MAX_DEVICES);
                }
        res->devices = calloc(n, sizeof(*res->devices));
        res->by_id = calloc(n, sizeof(*res->by_id));
        if (!res->devices || !res->by_id)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t k = 0;
        for (size_t i = 0; i < c->n; i++) {
                const struct cand *x = &c->items[i];
                if (!streq(target_of(x), name))
                        continue;
                bool shared = is_shared(x);
                unsigned reps = shared ? replicas_of(x) : 1;
                if (shared) {
                        res->shared = true;
                        res->replicas = MAX(res->replicas, reps);
                }
                for (unsigned j = 0; j < reps; j++) {
                        struct mk_dp_device *d = &res->devices[k++];
                        *d = x->d;
                        d->replica = j;
                        int w = shared ? snprintf(d->id, sizeof(d->id), "%s::%u", d->base_id, j)
                                       : snprintf(d->id, sizeof(d->id), "%s", d->base_id);
                        if (w < 0 || (size_t) w >= sizeof(d->id))
                                return mk_error_set(e, -EINVAL, "device id '%s' too long", d->base_id);
                }
        }
        res->n_devices = n;
        res->fail_requests_greater_than_one = res->shared && cfg && cfg->fail_requests_greater_than_one;
        for (size_t i = 0; i < n; i++)
                res->by_id[i] = i;
        qsort_r(res->by_id, n, sizeof(*res->by_id), cmp_by_id, res->devices);
        for (size_t i = 1; i < n; i++)
                if (streq(res->devices[res->by_id[i]].id, res->devices[res->by_id[i - 1]].id))
                        return mk_error_set(e, -EINVAL, "resource '%s': device id '%s' appears twice (NVML "
                                            "reported one UUID for two devices)",
                                            name, res->devices[res->by_id[i]].id);
        return 0;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

int mk_dp_resources_build(const struct mk_snapshot *s, const struct mk_dp_options *o, struct mk_dp_resources **ret,
                          struct mk_error *e) {
        const struct mk_plugin_config *cfg = o->config;
        if (o->mig_strategy < 0 || o->mig_strategy >= _MK_MIG_STRATEGY_MAX)
                return mk_error_set(e, -EINVAL, "invalid MIG strategy %d", (int) o->mig_strategy);
        bool any_mig = false;
        for (size_t i = 0; i < s->n_gpus; i++)
                any_mig = any_mig || s->gpus[i].mig_current == MK_MIG_ENABLED;
        if (cfg && cfg->sharing == MK_SHARING_MPS && o->mig_strategy == MK_MIG_STRATEGY_MIXED)
                return mk_error_set(e, -EINVAL, "MPS sharing is not supported with the mixed MIG strategy");
        if (cfg && cfg->sharing == MK_SHARING_MPS && o->mig_strategy != MK_MIG_STRATEGY_NONE && any_mig)
                return mk_error_set(e, -EINVAL, "MPS sharing is not supported with MIG devices");

        _cleanup_(cands_done) struct cands c = {0};
        _cleanup_buf_done_ struct mk_buf empty; /* MIG-enabled GPUs without MIG devices: "0, 3" */
        mk_buf_init(&empty, 4096);
        struct cap_table caps = {0};
        int r = cap_table_load(o->host, &caps);
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        enum mk_mig_strategy strat = o->mig_strategy;
        if (strat == MK_MIG_STRATEGY_SINGLE && !any_mig)
                strat = MK_MIG_STRATEGY_NONE;
        if (strat == MK_MIG_STRATEGY_SINGLE) {
                r = check_single(s, e);
                if (r < 0)
                        goto out;
        }
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                int numa = numa_node_of(o->host, g->bus_id);
                if (strat == MK_MIG_STRATEGY_NONE || g->mig_current != MK_MIG_ENABLED)
                        r = add_gpu(&c, s, i, numa, e);
                else {
                        if (mig_device_count(g) == 0 &&
                            mk_buf_printf(&empty, "%s%u", empty.len ? ", " : "", g->index) < 0)
                                log_debug_area("plugin", "GPU %u has MIG enabled but no MIG devices", g->index);
                        r = add_mig(&c, s, i, numa, &caps, strat == MK_MIG_STRATEGY_SINGLE, e);
                }
        }
        if (r >= 0)
                r = apply_sharing(&c, cfg, e);
out:
        free(caps.items);
        if (r < 0)
                return r;

        /* The distinct target names, sorted. */
        _cleanup_free_ const char **names = calloc(c.n ? c.n : 1, sizeof(*names));
        if (!names)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t nn = 0;
        for (size_t i = 0; i < c.n; i++)
                names[nn++] = target_of(&c.items[i]);
        qsort(names, nn, sizeof(*names), cmp_str);
        size_t nu = 0;
        for (size_t i = 0; i < nn; i++)
                if (nu == 0 || !streq(names[nu - 1], names[i]))
                        names[nu++] = names[i];

        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = calloc(1, sizeof(*rs));
        if (!rs || !(rs->r = calloc(nu ? nu : 1, sizeof(*rs->r))))
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < nu; i++) {
                rs->n = i + 1;
                r = fill_resource(&rs->r[i], names[i], &c, cfg, e);
                if (r < 0)
                        return r;
        }
        /* Upstream's plugin calls this an invalid configuration; the GPUs are
         * then neither full GPUs nor MIG devices, so nothing of them is
         * advertised. One line naming them all. */
        if (empty.len &&
            asprintf(&rs->warning,
                     "Invalid configuration for mig-strategy=mixed: GPU %s %s MIG enabled but no MIG devices; "
                     "%s not advertised (create MIG devices, or disable MIG)",
                     mk_buf_str(&empty), strchr(mk_buf_str(&empty), ',') ? "have" : "has",
                     strchr(mk_buf_str(&empty), ',') ? "they are" : "it is") < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        *ret = TAKE_PTR(rs);
        return 0;
}

const struct mk_dp_resource *mk_dp_resources_find(const struct mk_dp_resources *rs, const char *name) {
        for (size_t i = 0; rs && name && i < rs->n; i++)
                if (streq(rs->r[i].name, name))
                        return &rs->r[i];
        return NULL;
}

const struct mk_dp_device *mk_dp_resource_find_device(const struct mk_dp_resource *r, const char *id) {
        if (!r || !id)
                return NULL;
        if (!r->by_id) {
                for (size_t i = 0; i < r->n_devices; i++)
                        if (streq(r->devices[i].id, id))
                                return &r->devices[i];
                return NULL;
        }
        size_t lo = 0, hi = r->n_devices;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(r->devices[r->by_id[mid]].id, id);
                if (c == 0)
                        return &r->devices[r->by_id[mid]];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

int mk_dp_resource_find_devices(const struct mk_dp_resource *r, const char *const *ids, size_t n, const char *what,
                                const struct mk_dp_device **devs, struct mk_error *e) {
        _cleanup_free_ bool *seen = calloc(r->n_devices ? r->n_devices : 1, sizeof(*seen));
        if (!seen)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n; i++) {
                const struct mk_dp_device *d = ids && ids[i] ? mk_dp_resource_find_device(r, ids[i]) : NULL;
                if (!d)
                        return mk_error_set(e, -EINVAL, "%s for '%s': unknown device: '%.*s'", what, r->name, 128,
                                            ids && ids[i] ? ids[i] : "(null)");
                size_t p = (size_t) (d - r->devices);
                if (seen[p])
                        return mk_error_set(e, -EINVAL, "%s for '%s': device '%s' is listed twice", what, r->name,
                                            d->id);
                seen[p] = true;
                if (devs)
                        devs[i] = d;
        }
        return 0;
}

unsigned mk_dp_resources_set_health(struct mk_dp_resources *rs, unsigned gpu, unsigned gi_id, unsigned ci_id,
                                    bool healthy) {
        unsigned changed = 0;
        for (size_t i = 0; rs && i < rs->n; i++)
                for (size_t j = 0; j < rs->r[i].n_devices; j++) {
                        struct mk_dp_device *d = &rs->r[i].devices[j];
                        if (d->gpu != gpu)
                                continue;
                        /* A whole GPU holds every GI: any event of the GPU reaches it. */
                        if (d->mig && gi_id != UINT32_MAX && d->gi_id != gi_id)
                                continue;
                        if (d->mig && gi_id != UINT32_MAX && ci_id != UINT32_MAX && d->ci_id != ci_id)
                                continue;
                        if (d->healthy != healthy) {
                                d->healthy = healthy;
                                changed++;
                        }
                }
        return changed;
}

int mk_dp_all_devices(const struct mk_snapshot *s, const struct mk_host *h, struct mk_dp_device **ret, size_t *ret_n,
                      struct mk_error *e) {
        _cleanup_(cands_done) struct cands c = {0};
        struct cap_table caps = {0};
        int r = cap_table_load(h, &caps);
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++) {
                r = add_gpu(&c, s, i, -1, e);
                if (r >= 0 && s->gpus[i].mig_current == MK_MIG_ENABLED)
                        r = add_mig(&c, s, i, -1, &caps, true, e);
        }
        free(caps.items);
        if (r < 0)
                return r;
        struct mk_dp_device *devs = calloc(c.n ? c.n : 1, sizeof(*devs));
        if (!devs)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < c.n; i++) {
                devs[i] = c.items[i].d;
                snprintf(devs[i].id, sizeof(devs[i].id), "%s", devs[i].base_id);
        }
        *ret = devs;
        *ret_n = c.n;
        return 0;
}
