/* The extender's node cache (nodecache.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/macro.h"
#include "kube/object.h"
#include "sched/inventory.h"
#include "sched/nodecache.h"
#include "sched/request.h"

/* What a bound pod takes from its node's CPU and memory. */
struct pod_usage {
        char node[MK_K8S_NAME_MAX];
        uint64_t cpu_milli, memory_bytes;
};

bool mk_sched_pod_expired(const struct mk_sched_pod *p, int64_t now) {
        return p->pending && now > 0 && p->pending_since > 0 &&
               now - p->pending_since > (p->pending_ttl_s > 0 ? p->pending_ttl_s : MK_SCHED_PENDING_TTL_S);
}

/* --- the fit's view of a node --- */

static bool same_gpu_kind(const struct mk_inv_gpu *a, const struct mk_inv_gpu *b) {
        if (a->n_profiles != b->n_profiles || a->memory_units != b->memory_units || a->slices != b->slices ||
            a->memory_mib != b->memory_mib || a->multiprocessors != b->multiprocessors)
                return false;
        for (size_t i = 0; i < a->n_profiles; i++) {
                const struct mk_gi_profile *p = &a->profiles[i], *q = &b->profiles[i];
                if (!streq(p->name, q->name) || p->id != q->id || p->slices != q->slices ||
                    p->memory_mib != q->memory_mib || p->max_count != q->max_count ||
                    p->multiprocessors != q->multiprocessors || p->n_placements != q->n_placements ||
                    memcmp(p->placements, q->placements, p->n_placements * sizeof(*p->placements)) != 0)
                        return false;
        }
        return true;
}

/* The first GPU of the node with the same description as GPU g: GPUs of
 * one kind share one profile array and one set of tables, which lets the
 * fit keep a compact per-node cache (plan/fit.h). */
static size_t gpu_rep(const struct mk_inventory *inv, size_t g) {
        for (size_t k = 0; k < g; k++)
                if (same_gpu_kind(&inv->gpus[k], &inv->gpus[g]))
                        return k;
        return g;
}

/* gpu_rep() of every GPU (the comparison of profile arrays is not free:
 * done once per inventory, not per fit). NULL when out of memory. */
static uint16_t *reps_new(const struct mk_inventory *inv) {
        uint16_t *r = calloc(inv->n_gpus + 1, sizeof(*r));
        for (size_t g = 0; r && g < inv->n_gpus; g++)
                r[g] = (uint16_t) gpu_rep(inv, g);
        return r;
}

static void kind_free(struct mk_sched_kind *k) {
        mk_fit_tables_free(k->tables);
        for (size_t i = 0; i < k->desc.n_profiles; i++)
                free(k->desc.profiles[i].placements);
        free(k->desc.profiles);
        free(k);
}

static void kind_unref(struct mk_sched_kind *k) {
        if (!k || --k->refs > 0)
                return;
        struct mk_sched_cache *c = k->owner;
        c->kinds[k->slot] = c->kinds[--c->n_kinds];
        c->kinds[k->slot]->slot = k->slot;
        kind_free(k);
}

/* Drops a node's kinds (an array per GPU of `n_gpus`). */
static struct mk_sched_kind **kinds_unref(struct mk_sched_kind **kinds, size_t n_gpus) {
        for (size_t g = 0; kinds && g < n_gpus; g++)
                kind_unref(kinds[g]);
        free(kinds);
        return NULL;
}

/* A new kind like GPU `ig`: its profiles copied (no CI profiles), its
 * tables built for the copy. NULL when out of memory. */
static struct mk_sched_kind *kind_new(const struct mk_inv_gpu *ig) {
        struct mk_sched_kind *k = calloc(1, sizeof(*k));
        struct mk_gi_profile *pr = calloc(ig->n_profiles + 1, sizeof(*pr));
        if (!k || !pr) {
                free(k);
                free(pr);
                return NULL;
        }
        k->desc = (struct mk_inv_gpu) {
                .memory_mib = ig->memory_mib,
                .memory_units = ig->memory_units,
                .slices = ig->slices,
                .multiprocessors = ig->multiprocessors,
                .profiles = pr,
        };
        for (size_t i = 0; i < ig->n_profiles; i++, k->desc.n_profiles++) {
                pr[i] = ig->profiles[i];
                pr[i].ci_profiles = NULL;
                pr[i].n_ci_profiles = 0;
                pr[i].placements = calloc(ig->profiles[i].n_placements + 1, sizeof(*pr[i].placements));
                if (!pr[i].placements) {
                        kind_free(k);
                        return NULL;
                }
                memcpy(pr[i].placements, ig->profiles[i].placements,
                       ig->profiles[i].n_placements * sizeof(*pr[i].placements));
        }
        struct mk_fit_gpu fg = {
                .profiles = pr,
                .n_profiles = k->desc.n_profiles,
                .memory_units = ig->memory_units,
                .slices = ig->slices,
                .memory_mib = ig->memory_mib,
                .multiprocessors = ig->multiprocessors,
        };
        if (mk_fit_tables_new(&fg, &k->tables) < 0)
                k->tables = NULL;
        return k;
}

/* The kinds of inv's GPUs (at each kind's first GPU, reps[]), taken from
 * the cache's or added to them, a reference held for each (under the write
 * lock). NULL when out of memory (the node's own profiles are used then,
 * without tables). */
static struct mk_sched_kind **kinds_get(struct mk_sched_cache *c, const struct mk_inventory *inv,
                                        const uint16_t *reps) {
        struct mk_sched_kind **kinds = calloc(inv->n_gpus + 1, sizeof(*kinds));
        for (size_t g = 0; kinds && reps && g < inv->n_gpus; g++) {
                if (reps[g] != g)
                        continue;
                const struct mk_inv_gpu *ig = &inv->gpus[g];
                struct mk_sched_kind *k = NULL;
                for (size_t i = 0; i < c->n_kinds && !k; i++)
                        if (same_gpu_kind(&c->kinds[i]->desc, ig))
                                k = c->kinds[i];
                if (!k) {
                        if (c->n_kinds == c->alloc_kinds) {
                                size_t a = c->alloc_kinds ? 2 * c->alloc_kinds : 8;
                                struct mk_sched_kind **v = realloc(c->kinds, a * sizeof(*v));
                                if (!v)
                                        continue;
                                c->kinds = v;
                                c->alloc_kinds = a;
                        }
                        if (!(k = kind_new(ig)))
                                continue;
                        k->owner = c;
                        k->slot = c->n_kinds;
                        c->kinds[c->n_kinds++] = k;
                }
                k->refs++;
                kinds[g] = k;
        }
        return kinds;
}

int mk_sched_add_used(struct mk_fit_gpu *fg, struct mk_fit_instance *arr, unsigned profile_id, unsigned slices,
                      struct mk_placement p) {
        for (size_t i = 0; i < fg->n_used; i++)
                if (arr[i].placement.start == p.start && arr[i].placement.size == p.size)
                        return 0;
        if (fg->n_used >= MK_FIT_MAX_INSTANCES)
                return -E2BIG;
        arr[fg->n_used++] = (struct mk_fit_instance) {.profile_id = profile_id, .slices = slices, .placement = p};
        return 0;
}

enum mk_claim_mode mk_sched_gpu_mode(const struct mk_inv_gpu *ig, struct mk_sched_pod *const *claims, size_t n_claims,
                                     const char *skip_uid, int64_t now, bool *ret_switchable) {
        unsigned m = 0;
        for (size_t c = 0; ig->switchable && c < n_claims; c++) {
                const struct mk_sched_pod *p = claims[c];
                if (!p->claim.active || (skip_uid && streq(p->claim.uid, skip_uid)) || mk_sched_pod_expired(p, now))
                        continue;
                for (size_t d = 0; d < p->claim.n_devices; d++)
                        if (streq(p->claim.devices[d].gpu, ig->uuid))
                                m |= p->claim.devices[d].mode == MK_CLAIM_SOFT ? 2u : 1u;
        }
        *ret_switchable = ig->switchable && m == 0;
        return m == 1u ? MK_CLAIM_MIG : m == 2u ? MK_CLAIM_SOFT : ig->mode;
}

int mk_sched_fill_gpus(struct mk_fit_gpu *gpus, struct mk_fit_instance *used, const struct mk_inventory *inv,
                       struct mk_sched_kind *const *kinds, const uint16_t *reps, struct mk_sched_pod *const *claims,
                       size_t n_claims, const struct mk_pod_request *req, const char *skip_uid, int64_t now) {
        int r = 0;
        for (size_t g = 0; g < inv->n_gpus && r >= 0; g++) {
                const struct mk_inv_gpu *ig = &inv->gpus[g];
                size_t rep = reps ? reps[g] : gpu_rep(inv, g);
                const struct mk_sched_kind *k = kinds ? kinds[rep] : NULL;
                struct mk_fit_instance *u = used + g * MK_FIT_MAX_INSTANCES;
                bool sw;
                enum mk_claim_mode mode = mk_sched_gpu_mode(ig, claims, n_claims, skip_uid, now, &sw);
                gpus[g] = (struct mk_fit_gpu) {
                        .profiles = k ? k->desc.profiles : inv->gpus[rep].profiles,
                        .n_profiles = ig->n_profiles,
                        .memory_units = ig->memory_units,
                        .slices = ig->slices,
                        .memory_mib = ig->memory_mib,
                        .multiprocessors = ig->multiprocessors,
                        .used = u,
                        .tables = k ? k->tables : NULL,
                        .unavailable = !(sw || (mode == MK_CLAIM_MIG && (ig->mig_enabled || ig->switchable))) ||
                                       (req && !mk_pod_request_gpu_type_ok(req, ig->model)),
                        .switchable = sw && ig->mode != MK_CLAIM_MIG,
                };
                for (size_t i = 0; i < ig->n_instances && r >= 0; i++) {
                        const struct mk_inv_instance *in = &ig->instances[i];
                        if (skip_uid && streq(in->uid, skip_uid) && in->state == MK_INV_RESERVED)
                                continue;
                        r = mk_sched_add_used(&gpus[g], u, in->profile_id, in->slices, in->placement);
                }
                for (size_t c = 0; c < n_claims && r >= 0; c++) {
                        const struct mk_sched_pod *p = claims[c];
                        if (!p->claim.active || (skip_uid && streq(p->claim.uid, skip_uid)) ||
                            mk_sched_pod_expired(p, now))
                                continue;
                        for (size_t d = 0; d < p->claim.n_devices && r >= 0; d++)
                                if (p->claim.devices[d].mode == MK_CLAIM_MIG &&
                                    streq(p->claim.devices[d].gpu, ig->uuid))
                                        r = mk_sched_add_used(&gpus[g], u, p->claim.devices[d].profile_id,
                                                              p->claim.devices[d].slices,
                                                              p->claim.devices[d].placement);
                }
        }
        return r;
}

/* --- node entries --- */

static void node_free(void *p) {
        struct mk_sched_node *n = p;
        if (!n)
                return;
        n->kinds = kinds_unref(n->kinds, n->inv ? n->inv->n_gpus : 0);
        free(n->reps);
        mk_inventory_free(n->inv);
        free(n->fit_gpus); /* with fit_used */
        mk_sched_memo_done(&n->memo);
        free(n->claims);
        free(n->alloc_error);
        free(n->name);
        free(n);
}

/* Called with the write lock held whenever the node's inventory or its
 * reservations change: the kept view and the memo follow. */
static void node_refit(struct mk_sched_node *n) {
        mk_sched_memo_forget(&n->memo);
        n->fit_valid = false;
        n->inv_reserved = false;
        n->n_pending = 0;
        n->pending_until = INT64_MAX;
        for (size_t i = 0; i < n->n_claims; i++) {
                const struct mk_sched_pod *p = n->claims[i];
                n->n_pending += p->pending;
                if (p->pending && p->pending_since > 0) /* mk_sched_pod_expired() after this */
                        n->pending_until = MIN(n->pending_until, p->pending_since + MK_SCHED_PENDING_TTL_S);
        }
        n->model = n->inv && n->inv->n_gpus > 0 ? n->inv->gpus[0].model : NULL;
        for (size_t g = 0; n->inv && g < n->inv->n_gpus; g++) {
                if (n->model && !streq(n->inv->gpus[g].model, n->model))
                        n->model = NULL;
                n->inv_reserved |= n->inv->gpus[g].n_soft > 0;
                for (size_t i = 0; i < n->inv->gpus[g].n_instances; i++)
                        n->inv_reserved |= n->inv->gpus[g].instances[i].state == MK_INV_RESERVED;
        }
        if (!n->inv || n->inv->n_gpus == 0 || n->inv->n_gpus > MK_FIT_MAX_NODE_GPUS)
                return;
        size_t ng = n->inv->n_gpus;
        if (!n->fit_gpus || n->fit_n_gpus < ng) {
                /* Sized to the node's GPUs: with room for 64, each node's
                 * view took 70 KiB, and a filter's walk over 1,000 nodes
                 * met every node's GPUs on pages of their own. The GPU
                 * descriptions and their instances (read only when a fit
                 * cannot use the cache, which is in the entry) in one block. */
                free(n->fit_gpus);
                n->fit_gpus = NULL;
                n->fit_used = NULL;
                n->fit_n_gpus = 0;
                size_t ai = _Alignof(struct mk_fit_instance);
                size_t used_at = (ng * sizeof(struct mk_fit_gpu) + ai - 1) / ai * ai;
                char *block = calloc(1, used_at + ng * MK_FIT_MAX_INSTANCES * sizeof(struct mk_fit_instance));
                if (!block)
                        return;
                n->fit_gpus = (struct mk_fit_gpu *) block;
                n->fit_used = (struct mk_fit_instance *) (block + used_at);
                n->fit_n_gpus = ng;
        }
        if (mk_sched_fill_gpus(n->fit_gpus, n->fit_used, n->inv, n->kinds, n->reps, n->claims, n->n_claims, NULL,
                               NULL, 0) < 0)
                return;
        struct mk_fit_node fn = {.gpus = n->fit_gpus, .n_gpus = ng};
        (void) mk_fit_node_cache_update(&fn, &n->fit_cache); /* an unusable cache only makes fits slower */
        n->fit_ng = ng;
        n->fit_valid = true;
}

static struct mk_sched_node *node_get_or_add(struct mk_sched_cache *c, const char *name) {
        struct mk_sched_node *n = mk_hashmap_get(&c->nodes, name);
        if (n)
                return n;
        /* Aligned: the kept cache in it starts a line (nodecache.h). */
        size_t size = (sizeof(*n) + 63) / 64 * 64;
        n = aligned_alloc(64, size);
        if (n)
                memset(n, 0, size);
        if (!n || !(n->name = strdup(name)) || mk_hashmap_put(&c->nodes, name, n) < 0) {
                node_free(n);
                return NULL;
        }
        c->nodes_gen++;
        mk_sched_memo_forget(&n->memo); /* a generation of its own */
        snprintf(n->reason, sizeof(n->reason), "node has no %s annotation (is 'migkit scheduler node' running there?)",
                 MK_ANN_INVENTORY);
        return n;
}

static void node_unlink_claim(struct mk_sched_cache *c, struct mk_sched_pod *p) {
        struct mk_sched_node *n = mk_hashmap_get(&c->nodes, p->claim.node);
        for (size_t i = 0; n && i < n->n_claims; i++)
                if (n->claims[i] == p) {
                        n->claims[i] = n->claims[--n->n_claims];
                        node_refit(n);
                        return;
                }
}

static int node_link_claim(struct mk_sched_cache *c, struct mk_sched_pod *p) {
        struct mk_sched_node *n = node_get_or_add(c, p->claim.node);
        if (!n)
                return -ENOMEM;
        if (n->n_claims == n->alloc_claims) {
                size_t na = n->alloc_claims ? n->alloc_claims * 2 : 8;
                struct mk_sched_pod **a = realloc(n->claims, na * sizeof(*a));
                if (!a)
                        return -ENOMEM;
                n->claims = a;
                n->alloc_claims = na;
        }
        n->claims[n->n_claims++] = p;
        node_refit(n);
        return 0;
}

static void pod_drop(struct mk_sched_cache *c, const char *uid) {
        struct mk_sched_pod *p = mk_hashmap_remove(&c->pods, uid);
        if (p) {
                node_unlink_claim(c, p);
                free(p);
        }
}

int mk_sched_cache_set_claim(struct mk_sched_cache *c, const struct mk_claim *claim, bool pending, int64_t now) {
        pod_drop(c, claim->uid);
        struct mk_sched_pod *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->claim = *claim;
        p->pending = pending;
        p->pending_since = now;
        if (mk_hashmap_put(&c->pods, claim->uid, p) < 0) {
                free(p);
                return -ENOMEM;
        }
        if (node_link_claim(c, p) < 0) {
                mk_hashmap_remove(&c->pods, claim->uid);
                free(p);
                return -ENOMEM;
        }
        return 0;
}

void mk_sched_cache_drop_pending(struct mk_sched_cache *c, const char *uid) {
        pthread_rwlock_wrlock(&c->lock);
        struct mk_sched_pod *p = mk_hashmap_get(&c->pods, uid);
        if (p && p->pending)
                pod_drop(c, uid);
        pthread_rwlock_unlock(&c->lock);
}

struct sweep {
        int64_t now;
        char (*uids)[MK_K8S_UID_MAX];
        size_t n, alloc;
};

static int sweep_add(struct sweep *sw, const char *uid) {
        if (sw->n == sw->alloc) {
                size_t na = sw->alloc ? sw->alloc * 2 : 16;
                void *a = realloc(sw->uids, na * sizeof(*sw->uids));
                if (!a)
                        return -ENOMEM;
                sw->uids = a;
                sw->alloc = na;
        }
        snprintf(sw->uids[sw->n++], sizeof(*sw->uids), "%s", uid);
        return 0;
}

static int collect_expired(const char *uid, void *value, void *userdata) {
        struct sweep *sw = userdata;
        return mk_sched_pod_expired(value, sw->now) ? sweep_add(sw, uid) : 0;
}

static int collect_gone(const char *uid, void *value, void *userdata) {
        struct sweep *sw = userdata;
        return sw->now - *(const int64_t *) value > MK_SCHED_GONE_S ? sweep_add(sw, uid) : 0;
}

size_t mk_sched_cache_sweep(struct mk_sched_cache *c, int64_t now) {
        struct sweep sw = {.now = now};
        pthread_rwlock_wrlock(&c->lock);
        if (now - c->swept_at >= MK_SCHED_SWEEP_S) {
                c->swept_at = now;
                (void) mk_hashmap_foreach(&c->pods, collect_expired, &sw); /* -ENOMEM: what was collected */
                for (size_t i = 0; i < sw.n; i++)
                        pod_drop(c, sw.uids[i]);
                size_t dropped = sw.n;
                sw.n = 0;
                (void) mk_hashmap_foreach(&c->gone, collect_gone, &sw);
                for (size_t i = 0; i < sw.n; i++)
                        free(mk_hashmap_remove(&c->gone, sw.uids[i]));
                sw.n = dropped;
        }
        pthread_rwlock_unlock(&c->lock);
        free(sw.uids);
        return sw.n;
}

int mk_sched_cache_note_claim(struct mk_sched_cache *c, const struct mk_claim *claim, int64_t ttl_s) {
        int r = 0;
        pthread_rwlock_wrlock(&c->lock);
        if (!mk_hashmap_get(&c->pods, claim->uid) && !mk_hashmap_get(&c->gone, claim->uid) &&
            (r = mk_sched_cache_set_claim(c, claim, true, claim->time)) >= 0) {
                struct mk_sched_pod *p = mk_hashmap_get(&c->pods, claim->uid);
                p->pending_ttl_s = ttl_s;
                r = 1;
        }
        pthread_rwlock_unlock(&c->lock);
        return r;
}

struct mk_sched_node *mk_sched_cache_node(struct mk_sched_cache *c, const char *name) {
        return mk_hashmap_get(&c->nodes, name);
}

struct mk_sched_pod *mk_sched_cache_pod(struct mk_sched_cache *c, const char *uid) {
        return mk_hashmap_get(&c->pods, uid);
}

/* --- lifetime --- */

int mk_sched_cache_init(struct mk_sched_cache *c) {
        *c = (struct mk_sched_cache) {0};
        if (pthread_rwlock_init(&c->lock, NULL) != 0)
                return -ENOMEM;
        if (pthread_mutex_init(&c->names_lock, NULL) != 0) {
                pthread_rwlock_destroy(&c->lock);
                return -ENOMEM;
        }
        mk_buf_init(&c->names, (size_t) MK_MAX_EXTENDER_NODES * MK_K8S_NAME_MAX);
        return 0;
}

void mk_sched_cache_done(struct mk_sched_cache *c) {
        mk_hashmap_clear(&c->nodes, node_free); /* releases every kind */
        free(c->kinds);
        mk_hashmap_clear(&c->pods, free);
        mk_hashmap_clear(&c->usage, free);
        mk_hashmap_clear(&c->gone, free);
        mk_buf_done(&c->names);
        free(c->names_nodes);
        pthread_mutex_destroy(&c->names_lock);
        pthread_rwlock_destroy(&c->lock);
}

void mk_sched_cache_counts(struct mk_sched_cache *c, size_t *ret_nodes, size_t *ret_claims) {
        pthread_rwlock_rdlock(&c->lock);
        *ret_nodes = c->nodes.n;
        *ret_claims = c->pods.n;
        pthread_rwlock_unlock(&c->lock);
}

/* --- informer events --- */

/* status.allocatable[key] in milli-units into *ret (0 when absent:
 * unknown, not checked). A value there that is not a string or not a valid
 * quantity (junk, negative, out of range) is -EINVAL with `why` naming the
 * field: the node cannot be judged, so it is refused rather than called
 * feasible. */
static int allocatable(const json_t *alloc, const char *key, uint64_t *ret, char *why, size_t size) {
        const json_t *v = json_object_get(alloc, key);
        *ret = 0;
        if (!v)
                return 0;
        if (!json_is_string(v)) {
                snprintf(why, size, "status.allocatable.%s is not a quantity string", key);
                return -EINVAL;
        }
        const char *s = json_string_value(v);
        int r = mk_quantity_parse_milli(s, ret);
        if (r < 0)
                snprintf(why, size, "status.allocatable.%s '%.64s'%s is %s", key, s, strlen(s) > 64 ? "..." : "",
                         r == -ERANGE ? "out of range" : s[0] == '-' ? "negative" : "not a Kubernetes quantity");
        return r < 0 ? -EINVAL : 0;
}

int mk_sched_cache_node_event(struct mk_sched_cache *c, enum mk_kube_event_type type, const json_t *node) {
        const char *name = mk_kube_meta(node, "name");
        if (!name)
                return 0;
        const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
        uint64_t cpu = 0, mem = 0;
        char why[192] = "";
        bool bad = type != MK_KUBE_EVENT_DELETED &&
                   (allocatable(alloc, "cpu", &cpu, why, sizeof(why)) < 0 ||
                    allocatable(alloc, "memory", &mem, why, sizeof(why)) < 0);
        int said = 0; /* 1: a new allocatable error to log, -1: it went away */
        struct mk_inventory *inv = NULL;
        uint16_t *reps = NULL;
        char reason[MK_ERROR_MSG_MAX];
        if (type != MK_KUBE_EVENT_DELETED)
                mk_inventory_from_node(node, &inv, reason, sizeof(reason));
        if (inv)
                reps = reps_new(inv);
        pthread_rwlock_wrlock(&c->lock);
        struct mk_sched_kind **kinds = inv && type != MK_KUBE_EVENT_DELETED ? kinds_get(c, inv, reps) : NULL;
        int r = 0;
        if (type == MK_KUBE_EVENT_DELETED) {
                struct mk_sched_node *n = mk_hashmap_get(&c->nodes, name);
                if (n && n->n_claims == 0) {
                        node_free(mk_hashmap_remove(&c->nodes, name));
                        c->nodes_gen++;
                } else if (n) {
                        n->kinds = kinds_unref(n->kinds, n->inv ? n->inv->n_gpus : 0);
                        free(n->reps);
                        n->reps = NULL;
                        n->inv = mk_inventory_free(n->inv);
                        node_refit(n);
                        snprintf(n->reason, sizeof(n->reason), "node was deleted");
                }
        } else {
                struct mk_sched_node *n = node_get_or_add(c, name);
                if (!n)
                        r = -ENOMEM;
                else {
                        kinds_unref(n->kinds, n->inv ? n->inv->n_gpus : 0);
                        free(n->reps);
                        mk_inventory_free(n->inv);
                        n->kinds = TAKE_PTR(kinds);
                        n->reps = TAKE_PTR(reps);
                        n->inv = TAKE_PTR(inv);
                        n->res.cpu_allocatable_milli = bad ? 0 : cpu;
                        n->res.memory_allocatable_bytes = bad ? 0 : mem / 1000;
                        if (!n->inv)
                                snprintf(n->reason, sizeof(n->reason), "%s", reason);
                        if (bad != !!n->alloc_error || (bad && !streq(n->alloc_error, why))) {
                                said = bad ? 1 : -1;
                                free(n->alloc_error);
                                n->alloc_error = bad ? strdup(why) : NULL;
                                if (bad && !n->alloc_error)
                                        r = -ENOMEM;
                        }
                        node_refit(n);
                }
        }
        kinds_unref(kinds, inv ? inv->n_gpus : 0); /* under the lock: the cache's kinds change */
        pthread_rwlock_unlock(&c->lock);
        free(reps);
        mk_inventory_free(inv);
        if (r < 0)
                log_debug_area("sched", "Node '%s': out of memory", name);
        else if (said > 0)
                log_warning("Node '%s': %s; refusing pods there until it is fixed", name, why);
        else if (said < 0)
                log_info("Node '%s': status.allocatable CPU and memory are valid again", name);
        return r;
}

/* Replaces the pod's CPU and memory usage (NULL: none). Takes `use`. */
static void usage_set(struct mk_sched_cache *c, const char *uid, struct pod_usage *use) {
        struct pod_usage *old = mk_hashmap_remove(&c->usage, uid);
        if (old) {
                struct mk_sched_node *n = mk_hashmap_get(&c->nodes, old->node);
                if (n) {
                        mk_sched_memo_forget(&n->memo);
                        n->res.cpu_requested_milli -= MIN(n->res.cpu_requested_milli, old->cpu_milli);
                        n->res.memory_requested_bytes -= MIN(n->res.memory_requested_bytes, old->memory_bytes);
                }
                free(old);
        }
        if (!use)
                return;
        struct mk_sched_node *n = node_get_or_add(c, use->node);
        if (!n || mk_hashmap_put(&c->usage, uid, use) < 0) {
                free(use);
                return;
        }
        mk_sched_memo_forget(&n->memo);
        n->res.cpu_requested_milli += use->cpu_milli;
        n->res.memory_requested_bytes += use->memory_bytes;
}

/* A deleted pod's uid, so that a bind ledger read later does not count its
 * reservation again (write lock held). Out of memory or past
 * MK_SCHED_GONE_MAX: not remembered, and a ledger entry holds its capacity
 * until the entry's TTL, as before. */
static void remember_gone(struct mk_sched_cache *c, const char *uid) {
        if (c->gone.n >= MK_SCHED_GONE_MAX || mk_hashmap_get(&c->gone, uid))
                return;
        int64_t *t = malloc(sizeof(*t));
        if (!t)
                return;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        *t = ts.tv_sec;
        if (mk_hashmap_put(&c->gone, uid, t) < 0)
                free(t);
}

int mk_sched_cache_pod_event(struct mk_sched_cache *c, enum mk_kube_event_type type, const json_t *pod) {
        _cleanup_free_ struct mk_claim *claim = calloc(1, sizeof(*claim));
        if (!claim)
                return -ENOMEM;
        struct mk_error e = {0};
        int has = mk_claim_from_pod(pod, claim, &e);
        if (has < 0) {
                char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
                log_debug_area("sched", "Pod ignored: %s", mk_error_format(&e, buf, sizeof(buf)));
                return 0;
        }
        const char *bound = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        struct pod_usage *use = NULL;
        if (type != MK_KUBE_EVENT_DELETED && claim->active && bound && strlen(bound) < MK_K8S_NAME_MAX &&
            (use = calloc(1, sizeof(*use)))) {
                snprintf(use->node, sizeof(use->node), "%s", bound);
                mk_pod_resource_requests(pod, &use->cpu_milli, &use->memory_bytes);
        }
        int r = 0;
        pthread_rwlock_wrlock(&c->lock);
        usage_set(c, claim->uid, TAKE_PTR(use));
        struct mk_sched_pod *old = mk_hashmap_get(&c->pods, claim->uid);
        if (type == MK_KUBE_EVENT_DELETED && (has > 0 || old))
                remember_gone(c, claim->uid);
        if (type == MK_KUBE_EVENT_DELETED || (has > 0 && !claim->active))
                pod_drop(c, claim->uid);
        else if (has > 0)
                r = mk_sched_cache_set_claim(c, claim, false, 0);
        else if (old && !old->pending)
                pod_drop(c, claim->uid); /* the annotation was removed */
        /* else: a pending reservation not visible yet stays */
        pthread_rwlock_unlock(&c->lock);
        return r;
}

/* --- resolving a request's node names --- */

void mk_sched_cache_resolve(struct mk_sched_cache *c, const struct mk_sched_cand *cands, size_t n,
                            struct mk_sched_node **ret) {
        bool locked = pthread_mutex_trylock(&c->names_lock) == 0;
        if (locked && c->names_gen == c->nodes_gen && c->names_n == n && c->names.data) {
                const char *p = c->names.data, *end = c->names.data + c->names.len;
                size_t i = 0;
                for (; i < n; i++) {
                        const struct mk_sched_cand *cd = &cands[i];
                        if ((size_t) (end - p) <= cd->len || memcmp(p, cd->name, cd->len + 1) != 0)
                                break;
                        p += cd->len + 1;
                }
                if (i == n) {
                        memcpy(ret, c->names_nodes, n * sizeof(*ret));
                        pthread_mutex_unlock(&c->names_lock);
                        return;
                }
        }
        for (size_t i = 0; i < n; i++)
                ret[i] = mk_hashmap_get(&c->nodes, cands[i].name);
        if (!locked)
                return;
        /* Kept only when all of it fits: a partial copy must not match. */
        c->names_n = 0;
        c->names.len = 0;
        if (c->names.data)
                c->names.data[0] = 0;
        if (n > c->names_alloc) {
                struct mk_sched_node **a = realloc(c->names_nodes, n * sizeof(*a));
                if (!a) {
                        pthread_mutex_unlock(&c->names_lock);
                        return;
                }
                c->names_nodes = a;
                c->names_alloc = n;
        }
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = mk_buf_append(&c->names, cands[i].name, cands[i].len + 1);
        if (r >= 0 && n > 0) {
                memcpy(c->names_nodes, ret, n * sizeof(*ret));
                c->names_n = n;
                c->names_gen = c->nodes_gen;
        } else
                c->names.len = 0;
        pthread_mutex_unlock(&c->names_lock);
}
