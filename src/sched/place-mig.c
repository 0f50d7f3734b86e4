/* MIG placement of a pod on one node (place-mig.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "claim/claim.h"
#include "sched/inventory.h"
#include "sched/nodecache.h"
#include "sched/place-mig.h"
#include "sched/request.h"

struct mk_fit_request mk_sched_fit_request(const struct mk_pod_request *req, const struct mk_pod_request_container *rc) {
        return (struct mk_fit_request) {
                .gpus = rc->gpus,
                .mem_mib = rc->mem_mib,
                .mem_percent = rc->mem_percent,
                .cores_percent = rc->cores_percent,
                .variant = req->variant,
                .cpu_milli = req->cpu_milli,
                .memory_bytes = req->memory_bytes,
        };
}

/* Whether the request can be fitted on the node's kept view: a plain
 * state, and a GPU-type filter that every GPU of the node passes, or none. */
static bool fast_path_ok(const struct mk_sched_place *p) {
        return p->node && p->node->inv == p->inv && p->node->fit_valid && p->plain && !p->claim &&
               p->types != MK_SCHED_TYPES_SOME;
}

/* Container k's fit on `fn`, and the node's score so far into *score:
 * the last container's fit score or, on the mode choice's tier scale, the
 * first's (it ranks the node, as the mode choice does). <0 with its
 * reason (size 0: none formatted). */
static int fit_container(const struct mk_fit_node *fn, const struct mk_sched_place *p, size_t k,
                         struct mk_fit_result *res, double *score, char *reason, size_t size) {
        const struct mk_pod_request_container *rc = &p->req->containers[k];
        struct mk_fit_request fr = mk_sched_fit_request(p->req, rc);
        fr.memo = p->fit_memo && k < MK_SCHED_FIT_MEMOS ? &p->fit_memo[k] : NULL;
        struct mk_error e; /* only code and msg are read: not the whole 1 KiB zeroed per node */
        e.code = 0;
        e.msg[0] = 0;
        int r = mk_fit_node(fn, &fr, p->req->fit_node_policy, p->req->fit_gpu_policy, res,
                            size > 0 ? &e : NULL); /* prioritize: no reasons */
        if (r < 0) {
                if (size > 0)
                        mk_sched_fit_reason(p->req, rc->index, &e, reason, size);
                return r;
        }
        if (!p->tiered)
                *score = res->score;
        else if (k == 0)
                *score = mk_fit_mig_tier_score(fn, &fr, res);
        return 0;
}

static struct mk_sched_scratch *scratch_get(struct mk_sched_scratch **scp, char *reason, size_t size) {
        if (!*scp && !(*scp = malloc(sizeof(**scp))))
                snprintf(reason, size, "out of memory");
        return *scp;
}

/* Adds choices to the scratch's GPUs (copies of the node's), each GPU's
 * used instances copied when first touched (bit g of *copied). */
static void take_copied(struct mk_sched_scratch *sc, const struct mk_fit_choice *ch, size_t n, uint64_t *copied) {
        for (size_t i = 0; i < n; i++) {
                unsigned g = ch[i].gpu;
                if (!(*copied & (UINT64_C(1) << g))) {
                        memcpy(sc->used[g], sc->gpus[g].used, sc->gpus[g].n_used * sizeof(sc->used[g][0]));
                        sc->gpus[g].used = sc->used[g];
                        *copied |= UINT64_C(1) << g;
                }
                (void) mk_sched_add_used(&sc->gpus[g], sc->used[g], ch[i].profile->id, ch[i].profile->slices,
                                         ch[i].placement);
        }
}

/* The fast path: the containers one after another on the kept view (or,
 * when no GPU passes the type filter, on the node's GPUs all unavailable,
 * as the slow path sees them), the first with the kept node cache. Each
 * later one is fitted on a cache derived from the choices taken so far
 * over the kept GPU descriptions, which are neither copied nor read
 * (mk_fit_node_cache_derive_taken): a two-container pod reads little more
 * of a node than a one-container pod. Where that cannot be derived (no
 * kept cache, a choice it cannot follow), the GPUs are copied into the
 * scratch with every instance taken so far and read from then on. */
static int fit_fast(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score, char *reason,
                    size_t size) {
        const struct mk_sched_node *n = p->node;
        const struct mk_pod_request *req = p->req;
        size_t ng = n->fit_ng;
        struct mk_fit_gpu none[MK_FIT_MAX_NODE_GPUS];
        struct mk_fit_node fn = {.gpus = n->fit_gpus,
                                 .n_gpus = ng,
                                 .cache = &n->fit_cache,
                                 .resources = n->res.cpu_allocatable_milli ? &n->res : NULL};
        if (p->types == MK_SCHED_TYPES_NONE) {
                for (size_t g = 0; g < ng; g++)
                        none[g] = (struct mk_fit_gpu) {.unavailable = true};
                fn.gpus = none;
                fn.cache = NULL;
        }
        struct mk_sched_scratch *sc = NULL;
        bool derived = fn.cache != NULL; /* later containers on derived caches, nothing copied */
        struct mk_fit_choice taken[MK_MAX_CLAIM_DEVICES];
        size_t n_taken = 0;
        uint64_t copied = 0;
        double score = 0;
        for (size_t k = 0; k < req->n_containers; k++) {
                struct mk_fit_result res;
                int r = fit_container(&fn, p, k, &res, &score, reason, size);
                if (r < 0)
                        return r;
                if (k + 1 == req->n_containers)
                        break;
                if (!sc && !(sc = scratch_get(scp, reason, size)))
                        return -ENOMEM;
                if (derived && n_taken + res.n_choices <= ELEMENTSOF(taken)) {
                        memcpy(taken + n_taken, res.choices, res.n_choices * sizeof(res.choices[0]));
                        n_taken += res.n_choices;
                        if (mk_fit_node_cache_derive_taken(&fn, fn.cache, &res, taken, n_taken, &sc->cache) >= 0) {
                                fn.cache = &sc->cache;
                                continue;
                        }
                        n_taken -= res.n_choices; /* res is added below */
                }
                if (fn.gpus != sc->gpus) { /* the GPUs copied, with what was taken so far */
                        memcpy(sc->gpus, fn.gpus, ng * sizeof(sc->gpus[0]));
                        fn.gpus = sc->gpus;
                        copied = 0;
                        take_copied(sc, taken, n_taken, &copied);
                        derived = false;
                }
                take_copied(sc, res.choices, res.n_choices, &copied);
                fn.cache = NULL; /* the fit reads the copied GPUs from now on: slower, same answer */
        }
        *ret_score = score;
        return 0;
}

int mk_sched_fill_mig(struct mk_sched_scratch *sc, const struct mk_sched_place *p, char *reason, size_t size) {
        const struct mk_inventory *inv = p->inv;
        const struct mk_sched_node *n = p->node;
        bool own = !n || n->inv != inv; /* a Node object's inventory: no kept tables or reservations */
        if (inv->n_gpus > MK_FIT_MAX_NODE_GPUS) {
                snprintf(reason, size, "node has more than %u GPUs", MK_FIT_MAX_NODE_GPUS);
                return -E2BIG;
        }
        int r = mk_sched_fill_gpus(sc->gpus, &sc->used[0][0], inv, own ? NULL : n->kinds, own ? NULL : n->reps,
                                   n ? n->claims : NULL, n ? n->n_claims : 0, p->req, p->uid, p->now);
        if (r < 0)
                snprintf(reason, size, "a GPU has more than %u instances", MK_FIT_MAX_INSTANCES);
        return r;
}

void mk_sched_take_mig(struct mk_sched_scratch *sc, const struct mk_inventory *inv, const struct mk_fit_result *res,
                       unsigned container, struct mk_claim *claim, size_t *n_dev) {
        for (size_t i = 0; i < res->n_choices; i++) {
                const struct mk_fit_choice *ch = &res->choices[i];
                (void) mk_sched_add_used(&sc->gpus[ch->gpu], sc->used[ch->gpu], ch->profile->id, ch->profile->slices,
                                         ch->placement);
                if (claim && *n_dev < MK_MAX_CLAIM_DEVICES) {
                        struct mk_claim_device *d = &claim->devices[*n_dev];
                        *d = (struct mk_claim_device) {
                                .container = container,
                                .profile_id = ch->profile->id,
                                .slices = ch->profile->slices,
                                .placement = ch->placement,
                        };
                        snprintf(d->gpu, sizeof(d->gpu), "%s", inv->gpus[ch->gpu].uuid);
                        snprintf(d->profile, sizeof(d->profile), "%s", ch->profile->name);
                }
                (*n_dev)++;
        }
}

void mk_sched_reason_join(char *out, size_t size, const char *a, const char *b, size_t max_b, const char *c) {
        if (size == 0)
                return;
        size_t room = size - 1, la = strlen(a), lb = strnlen(b, max_b), lc = strlen(c);
        size_t na = MIN(la, room), nb = MIN(lb, room - na), nc = MIN(lc, room - na - nb);
        memmove(out + na, b, nb); /* first: b may be out */
        memcpy(out, a, na);
        memcpy(out + na + nb, c, nc);
        out[na + nb + nc] = 0;
}

void mk_sched_fit_reason(const struct mk_pod_request *req, unsigned container, const struct mk_error *e, char *reason,
                         size_t size) {
        if (req->n_containers > 1) {
                char prefix[32] = "container ", d[12];
                size_t k = sizeof(d), len = strlen(prefix);
                do
                        d[--k] = (char) ('0' + container % 10);
                while ((container /= 10) > 0);
                memcpy(prefix + len, d + k, sizeof(d) - k);
                memcpy(prefix + len + sizeof(d) - k, ": ", 3);
                mk_sched_reason_join(reason, size, prefix, e->msg, 400, "");
        } else
                mk_sched_reason_join(reason, size, "", e->msg[0] ? e->msg : "does not fit", SIZE_MAX, "");
}

/* The slow path: the view rebuilt for this pod, container by container;
 * with a claim, its devices. */
static int fit_slow(struct mk_sched_scratch *sc, const struct mk_sched_place *p, double *ret_score, char *reason,
                    size_t size) {
        const struct mk_inventory *inv = p->inv;
        const struct mk_sched_node *n = p->node;
        const struct mk_pod_request *req = p->req;
        int r = mk_sched_fill_mig(sc, p, reason, size);
        if (r < 0)
                return r;
        const struct mk_fit_node_resources *node_res = n && n->res.cpu_allocatable_milli ? &n->res : NULL;
        struct mk_fit_node fn = {.gpus = sc->gpus, .n_gpus = inv->n_gpus, .resources = node_res};
        struct mk_claim *claim = p->claim;
        double score = 0;
        size_t n_dev = 0;
        for (size_t k = 0; k < req->n_containers; k++) {
                const struct mk_pod_request_container *rc = &req->containers[k];
                struct mk_fit_result res;
                r = fit_container(&fn, p, k, &res, &score, reason, size);
                if (r < 0)
                        return r;
                mk_sched_take_mig(sc, inv, &res, rc->index, claim, &n_dev);
        }
        if (claim)
                claim->n_devices = MIN(n_dev, (size_t) MK_MAX_CLAIM_DEVICES);
        *ret_score = score;
        return 0;
}

int mk_sched_place_mig(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                       char *reason, size_t size) {
        if (fast_path_ok(p))
                return fit_fast(scp, p, ret_score, reason, size);
        if (!scratch_get(scp, reason, size))
                return -ENOMEM;
        return fit_slow(*scp, p, ret_score, reason, size);
}
