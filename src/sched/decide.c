/* The extender's decisions (decide.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/macro.h"
#include "claim/claim.h"
#include "kube/object.h"
#include "sched/decide.h"
#include "sched/inventory.h"
#include "sched/memo.h"
#include "sched/nodecache.h"
#include "sched/place-mig.h"
#include "sched/place-soft.h"
#include "sched/request.h"
#include "spec/sched-config.h"

void mk_sched_decisions_done(struct mk_sched_decisions *d) {
        if (!d)
                return;
        free(d->cands);
        free(d->v);
        mk_buf_done(&d->reasons);
        *d = (struct mk_sched_decisions) {0};
}

const char *mk_sched_verdict_reason(const struct mk_sched_decisions *d, size_t i) {
        return d->v[i].reason < d->reasons.len ? d->reasons.data + d->v[i].reason : "out of memory";
}

static int64_t now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec;
}

/* The extender's priority of a node score (0..100): MaxExtenderPriority is 10. */
static int score_priority(double score) {
        long pri = (long) (score / 10.0 + 0.5);
        return (int) MAX(0, MIN(10, pri));
}

/* One priority scale per pod (docs/scheduler.md "Unified pool"): a pod
 * that names no vgpu-mode, where some node is shared or mixed, is ranked by
 * the mode choice's tier score on every node, its MIG placements on mig
 * nodes included; a pod that names its mode by that mode's fit score. */
static bool tiered(const struct mk_sched_config *cfg, const struct mk_pod_request *req) {
        return cfg->pool && req->allow_mig && req->allow_soft;
}

/* The seam between nodes and kinds of placement: which placement decides
 * pods on node `name`, from its operating mode and the pod's vgpu-mode. A
 * mig node: MIG placement (a pod that allows MIG). A hami-core or mixed
 * node: the unified pool's (place-soft.h), which fits soft slices, MIG or
 * chooses. NULL with the reason (-ENOSPC) when the node offers the pod
 * nothing. `for_bind`: bind trusts the node filter chose and skips the
 * disabled check (as it always has). */
static mk_sched_place_fn place_for(const struct mk_sched_config *cfg, const char *name,
                                   const struct mk_pod_request *req, bool for_bind, char *reason, size_t size) {
        enum mk_sched_mode mode = !cfg->n_nodes ? MK_SCHED_MODE_MIG : mk_sched_config_node_mode(cfg, name);
        switch (mode) {
        case MK_SCHED_MODE_HAMI_CORE:
        case MK_SCHED_MODE_MIXED:
                return mk_sched_place_pool;
        case MK_SCHED_MODE_MIG:
                break;
        default:
                if (!for_bind) {
                        snprintf(reason, size, "node is in operating mode '%s'", mk_sched_mode_to_string(mode));
                        return NULL;
                }
        }
        if (req->allow_mig)
                return mk_sched_place_mig;
        snprintf(reason, size, "hami-core: node is in operating mode mig (no shared GPU)");
        return NULL;
}

/* Whether the node's inventory lists a reserved instance or a soft slice of pod `uid`. */
static bool node_lists_pod(const struct mk_sched_node *n, const char *uid) {
        for (size_t g = 0; g < n->inv->n_gpus; g++)
                for (size_t i = 0; i < n->inv->gpus[g].n_instances; i++)
                        if (n->inv->gpus[g].instances[i].state == MK_INV_RESERVED &&
                            streq(n->inv->gpus[g].instances[i].uid, uid))
                                return true;
        for (size_t g = 0; g < n->inv->n_gpus; g++)
                for (size_t i = 0; i < n->inv->gpus[g].n_soft; i++)
                        if (streq(n->inv->gpus[g].soft[i].uid, uid))
                                return true;
        return false;
}

/* Whether the node's decisions depend only on its kept state and the
 * request: no pending reservation on the node expired at `now` (the kept
 * view holds them all; once one expires the node is not plain, so what was
 * remembered before stops answering), and none of the pod's own, in the
 * cache (`own_node`: the node its reservation is linked to) or in the
 * inventory (left out of its fit). Only then may a decision be remembered,
 * or fitted on the kept view. */
static inline __attribute__((always_inline)) bool node_state_plain(const struct mk_sched_node *n, const char *uid,
                                                                   const struct mk_sched_node *own_node, int64_t now) {
        if ((n->n_pending > 0 && now > n->pending_until) || n == own_node)
                return false;
        return !n->inv_reserved || !uid || !n->inv || !node_lists_pod(n, uid);
}

/* A MIG node's reason for a pod that allowed soft slices too: says so,
 * so that a pod fitting nowhere reads why for both modes. */
static void name_both_modes(char *reason, size_t size) {
        mk_sched_reason_join(reason, size, "MIG: ", reason, 400,
                             "; hami-core: node is in operating mode mig (no shared GPU)");
}

/* What a request holds while its nodes are decided. */
struct request {
        const struct mk_sched_config *cfg;
        const struct mk_sched_pod_ask *ask;
        uint64_t shape;                         /* 0: no memo, no handoff */
        uint64_t memo_shape;                    /* the node memo's key: 0 for pods of several GPU containers */
        /* A prioritize: the verdicts its filter kept (mk_sched_handoff), and
         * where the last node was found in them. */
        const struct mk_sched_handoff_verdict *hv;
        size_t hn, hcur;
        const struct mk_sched_node *own_node;
        int64_t now;
        struct mk_sched_scratch *scratch;       /* the slow path's, allocated when first needed */
        unsigned long hits;
        /* The pod's GPU-type filter on the GPU models met so far (borrowed
         * from node entries, under the read lock). */
        const char *models[8];
        bool model_ok[8];
        size_t n_models;
        struct mk_fit_memo fit_memo[MK_SCHED_FIT_MEMOS];      /* per container: kept between nodes */
};

/* How the pod's GPU-type filter meets node n's GPUs: from the one model
 * they share (looked up once per request and model), else not known. */
static bool has_type_filter(const struct mk_pod_request *req) {
        return req->use_types[0] || req->nouse_types[0];
}

static enum mk_sched_types node_types(struct request *rq, const struct mk_sched_node *n) {
        const struct mk_pod_request *req = rq->ask->req;
        if (!has_type_filter(req))
                return MK_SCHED_TYPES_ALL;
        if (!n || !n->model)
                return MK_SCHED_TYPES_SOME;
        for (size_t i = 0; i < rq->n_models; i++)
                if (streq(rq->models[i], n->model))
                        return rq->model_ok[i] ? MK_SCHED_TYPES_ALL : MK_SCHED_TYPES_NONE;
        bool ok = mk_pod_request_gpu_type_ok(req, n->model);
        if (rq->n_models < ELEMENTSOF(rq->models)) {
                rq->models[rq->n_models] = n->model;
                rq->model_ok[rq->n_models++] = ok;
        }
        return ok ? MK_SCHED_TYPES_ALL : MK_SCHED_TYPES_NONE;
}

/* Decides one candidate: 0 feasible with *priority, else <0 with reason.
 * *ret_plain: whether the decision depends only on the node's kept state
 * and the request (then it may be kept). */
static int eval_node(struct request *rq, const struct mk_sched_cand *c, struct mk_sched_node *n, int *priority,
                     char *reason, size_t size, bool *ret_plain) {
        mk_sched_place_fn place = place_for(rq->cfg, c->name, rq->ask->req, false, reason, size);
        if (!place)
                return -ENOSPC;
        struct mk_inventory *own = NULL;
        const struct mk_inventory *inv = n ? n->inv : NULL;
        if (c->object) {
                mk_inventory_from_node(c->object, &own, reason, size);
                inv = own;
                if (!inv)
                        return -ENOSPC;
        } else if (!n) {
                snprintf(reason, size, "node is not in migkit's cache (not seen by its Node informer)");
                return -ENOENT;
        } else if (!inv) {
                snprintf(reason, size, "%s", n->reason);
                return -ENOSPC;
        }
        if (n && n->alloc_error) { /* CPU and memory cannot be judged: not called feasible */
                snprintf(reason, size, "%s", n->alloc_error);
                mk_inventory_free(own);
                return -EINVAL;
        }
        bool plain = !own && !rq->ask->exact && node_state_plain(n, rq->ask->uid, rq->own_node, rq->now);
        *ret_plain = plain;
        int r;
        if (plain && rq->memo_shape && mk_sched_memo_get(&n->memo, rq->memo_shape, &r, priority, reason, size)) {
                rq->hits++;
                return r;
        }
        struct mk_sched_place p = {
                .node = n,
                .inv = inv,
                .req = rq->ask->req,
                .uid = rq->ask->uid,
                .now = rq->now,
                .plain = plain,
                .tiered = tiered(rq->cfg, rq->ask->req),
                .types = own ? MK_SCHED_TYPES_SOME : node_types(rq, n),
                .fit_memo = rq->fit_memo,
        };
        double score = 0;
        r = place(&rq->scratch, &p, &score, reason, size);
        if (r == -ENOSPC && place == mk_sched_place_mig && rq->ask->req->allow_soft && size > 0)
                name_both_modes(reason, size);
        mk_inventory_free(own);
        *priority = r >= 0 ? score_priority(score) : 0;
        if (plain && rq->memo_shape && r != -ENOMEM)
                mk_sched_memo_put(&n->memo, rq->memo_shape, r, *priority, size > 0 ? reason : NULL);
        return r;
}

/* A prioritize's node from its filter's verdicts: true with *r and
 * *priority when the filter decided it, its generation is unchanged and it
 * is still plain. They are in the filter's order, which kube-scheduler
 * keeps (it sends the feasible ones): looked for a few ahead of the last
 * one found. */
static bool handoff_get(struct request *rq, const struct mk_sched_node *n, int *r, int *priority) {
        for (size_t j = rq->hcur; j < rq->hn && j < rq->hcur + MK_SCHED_HANDOFF_AHEAD; j++) {
                if (rq->hv[j].node != n)
                        continue;
                rq->hcur = j + 1;
                if (rq->hv[j].gen != n->memo.gen || !node_state_plain(n, rq->ask->uid, rq->own_node, rq->now))
                        return false;
                *r = rq->hv[j].r;
                *priority = rq->hv[j].priority;
                return true;
        }
        return false;
}

/* A filter over 1,000s of nodes waits on memory more than it computes:
 * each node's entry and kept fit state (in the entry: cache header, GPUs'
 * states, winners) are lines no other node shares. They are asked for a
 * few nodes ahead, all from the entry's address (no pointer to wait for),
 * so the loads overlap instead of stalling one after another: the entry's
 * fields, the cache's header and the states of up to PREFETCH_GPUS GPUs
 * as one run of lines, and the winners of the request's GPU policy for
 * the first 16 profiles (the smallest: what most containers ask for).
 * Hints only. */
#define PREFETCH_GPUS 8
static inline void prefetch_node(const struct mk_sched_node *n, enum mk_fit_policy gp) {
        if (!n)
                return;
        const char *end = (const char *) &n->fit_cache.gpu[PREFETCH_GPUS];
        for (const char *l = (const char *) n; l < end; l += 64)
                __builtin_prefetch(l);
        __builtin_prefetch(&n->fit_cache.win[gp][0]);
        __builtin_prefetch(&n->fit_cache.win[gp][8]);
}

int mk_sched_decide(const struct mk_sched_config *cfg, struct mk_sched_cache *c, struct mk_sched_shapes *shapes,
                    const struct mk_sched_pod_ask *ask, bool with_reasons, struct mk_sched_decisions *d, char *err,
                    size_t size) {
        const struct mk_pod_request *req = ask->req;
        mk_buf_init(&d->reasons, (size_t) MK_MAX_EXTENDER_NODES * (MK_ERROR_MSG_MAX + 1));
        if (with_reasons && mk_buf_reserve(&d->reasons, d->n * 96) < 0) { /* most reasons are shorter */
                snprintf(err, size, "out of memory");
                return -ENOMEM;
        }
        d->feasible = 0;
        d->memo_hits = 0;
        _cleanup_free_ struct mk_sched_node **ents = calloc(d->n + 1, sizeof(*ents));
        if (!(d->v = calloc(d->n + 1, sizeof(*d->v))) || !ents) {
                snprintf(err, size, "out of memory");
                return -ENOMEM;
        }
        struct request rq = {
                .cfg = cfg,
                .ask = ask,
                .shape = d->by_name && shapes ? mk_sched_shape_id(shapes, req) : 0,
                .now = now_s(),
        };
        /* The node memo for pods of one GPU container: their shapes are few
         * and recur. Those of several come in many more (the product of
         * their containers' sizes), evict each other from a node's slots
         * and made a filter slower with the memo than without; their
         * prioritize takes the filter's verdicts instead (memo.h). A
         * prioritize keeps no reasons: only a filter's verdicts are kept. */
        rq.memo_shape = req->n_containers <= 1 ? rq.shape : 0;
        bool handoff = rq.shape && !rq.memo_shape && ask->uid && *ask->uid && !ask->exact;
        _cleanup_free_ struct mk_sched_handoff_verdict *hv = NULL, *keep = NULL;
        size_t n_keep = 0;
        if (handoff && !with_reasons)
                rq.hv = hv = mk_sched_handoff_take(&shapes->handoff, ask->uid, rq.shape, rq.now, &rq.hn);
        else if (handoff)
                keep = malloc(d->n * sizeof(*keep)); /* NULL: nothing kept */
        bool types = has_type_filter(req);
        pthread_rwlock_rdlock(&c->lock);
        const struct mk_sched_pod *mine = ask->uid ? mk_sched_cache_pod(c, ask->uid) : NULL;
        rq.own_node = mine ? mk_sched_cache_node(c, mine->claim.node) : NULL;
        if (d->by_name)
                mk_sched_cache_resolve(c, d->cands, d->n, ents);
        else
                for (size_t i = 0; i < d->n; i++)
                        ents[i] = mk_sched_cache_node(c, d->cands[i].name);
        for (size_t i = 0; i < d->n; i++) {
                if (i + 8 < d->n)
                        prefetch_node(ents[i + 8], req->fit_gpu_policy);
                if (types && i + 4 < d->n && ents[i + 4] && ents[i + 4]->model)
                        __builtin_prefetch(ents[i + 4]->model); /* for the GPU-type filter */
                char reason[MK_ERROR_MSG_MAX];
                size_t rsize = with_reasons ? sizeof(reason) : 0; /* prioritize: no reasons written */
                int priority = 0;
                int q;
                reason[0] = 0;
                if (!req->allow_mig && !req->allow_soft) {
                        snprintf(reason, sizeof(reason), "pod asks %s '%s'; migkit offers mig and hami-core",
                                 MK_ANN_VGPU_MODE, mk_kube_annotation(ask->pod, MK_ANN_VGPU_MODE));
                        q = -ENOSPC;
                } else if (d->cands[i].len >= MK_K8S_NAME_MAX) {
                        snprintf(reason, sizeof(reason), "node name longer than %u characters (not a Kubernetes name)",
                                 MK_K8S_NAME_MAX - 1);
                        q = -EINVAL;
                } else if (req->n_containers == 0)
                        q = 0;
                else if (rq.hv && ents[i] && !d->cands[i].object && handoff_get(&rq, ents[i], &q, &priority))
                        rq.hits++;
                else {
                        bool plain = false;
                        q = eval_node(&rq, &d->cands[i], ents[i], &priority, reason, rsize, &plain);
                        if (keep && plain && q != -ENOMEM)
                                keep[n_keep++] = (struct mk_sched_handoff_verdict) {
                                        .node = ents[i], .gen = ents[i]->memo.gen, .r = q, .priority = priority};
                }
                struct mk_sched_verdict *v = &d->v[i];
                v->r = q;
                if (q >= 0) {
                        v->priority = priority;
                        d->feasible++;
                } else if (with_reasons) {
                        v->reason = d->reasons.len;
                        if (mk_buf_append(&d->reasons, reason, strlen(reason) + 1) < 0)
                                v->reason = SIZE_MAX;
                }
        }
        pthread_rwlock_unlock(&c->lock);
        if (keep)
                mk_sched_handoff_put(&shapes->handoff, ask->uid, rq.shape, rq.now, TAKE_PTR(keep), n_keep);
        d->memo_hits = rq.hits;
        free(rq.scratch);
        return 0;
}

int mk_sched_decide_reserve(const struct mk_sched_config *cfg, struct mk_sched_cache *c,
                            const struct mk_sched_pod_ask *ask, const char *node, int64_t now, struct mk_claim *claim,
                            struct mk_error *e) {
        const struct mk_pod_request *req = ask->req;
        char reason[MK_ERROR_MSG_MAX];
        struct mk_sched_scratch *sc = NULL;
        if (strlen(node) >= sizeof(claim->node))
                return mk_error_set(e, -EINVAL, "node name too long");
        claim->n_devices = 0;
        claim->mode_why = NULL;
        claim->time = now;
        claim->active = true;
        claim->allocated = false;
        snprintf(claim->node, sizeof(claim->node), "%s", node);
        double score;
        int r = 0;
        pthread_rwlock_wrlock(&c->lock);
        struct mk_sched_node *n = mk_sched_cache_node(c, node);
        mk_sched_place_fn place = NULL;
        if (!req->allow_mig && !req->allow_soft)
                r = mk_error_set(e, -ENOSPC, "pod asks %s other than mig and hami-core", MK_ANN_VGPU_MODE);
        else if (!n)
                r = mk_error_set(e, -ENOENT, "node '%s' is not in migkit's cache", node);
        else if (!n->inv)
                r = mk_error_set(e, -ENOSPC, "node '%s': %s", node, n->reason);
        else if (n->alloc_error)
                r = mk_error_set(e, -EINVAL, "node '%s': %s", node, n->alloc_error);
        else if (req->n_containers == 0)
                r = 0;
        else if (!(place = place_for(cfg, node, req, true, reason, sizeof(reason))))
                r = mk_error_set(e, -ENOSPC, "node '%s': %s", node, reason);
        else {
                struct mk_sched_place p = {
                        .node = n,
                        .inv = n->inv,
                        .req = req,
                        .uid = claim->uid,
                        .now = now,
                        .claim = claim,
                        .tiered = tiered(cfg, req),
                };
                if ((r = place(&sc, &p, &score, reason, sizeof(reason))) < 0)
                        r = mk_error_set(e, r, "node '%s': %s", node, reason);
        }
        if (r >= 0 && claim->n_devices > 0)
                r = mk_sched_cache_set_claim(c, claim, true, now);
        pthread_rwlock_unlock(&c->lock);
        free(sc);
        return r;
}
