/* MIG placement: fitting a pod on one node as MIG instances created for it
 * (plan/fit's geometry search over the node's GPUs, with the instances
 * that exist and those other pods reserved). One kind of placement behind
 * decide.h's seam; the unified pool's placement (place-soft.h: soft
 * slices and the mode choice) sits beside it with the same signature
 * (mk_sched_place_fn) and shares its scratch and helpers below.
 *
 * Two paths, proven equal by tests/unit/test-sched-fast.c on random pods
 * and nodes: the fast one fits straight on the node cache's kept view and
 * its node cache (a plain node state, and a GPU-type filter that every GPU
 * of the node passes, or none), container by container, a later container
 * on a copy of only the GPUs the earlier ones took with a node cache
 * derived from the kept one (mk_fit_node_cache_derive); the slow one
 * rebuilds the view for this pod into a scratch (its own reservation left
 * out, expired pending ones dropped, unwanted GPU types unavailable) and
 * fits container by container without a node cache. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "plan/fit-soft.h"
#include "plan/fit.h"

struct mk_claim;
struct mk_inventory;
struct mk_pod_request;
struct mk_pod_request_container;
struct mk_sched_node;

/* The slow path's view of one node, rebuilt per fit (large: allocated once
 * per request, when first needed): its MIG GPUs and, for the unified pool
 * (place-soft.h), its shared GPUs. */
struct mk_sched_scratch {
        struct mk_fit_gpu gpus[MK_FIT_MAX_NODE_GPUS];
        struct mk_fit_instance used[MK_FIT_MAX_NODE_GPUS][MK_FIT_MAX_INSTANCES];
        struct mk_fit_shared_gpu soft_gpus[MK_FIT_MAX_NODE_GPUS];
        struct mk_fit_soft_slice soft_used[MK_FIT_MAX_NODE_GPUS][MK_FIT_SOFT_MAX_SLICES];
        unsigned soft_inv[MK_FIT_MAX_NODE_GPUS]; /* the inventory GPU of each shared GPU */
        struct mk_fit_node_cache cache; /* the fast path's, for a pod's later containers */
};

/* How a pod's GPU-type filter (nvidia.com/use-gputype, nouse-gputype)
 * meets a node's GPUs. */
enum mk_sched_types {
        MK_SCHED_TYPES_SOME,            /* some pass, or not known: the view is rebuilt */
        MK_SCHED_TYPES_ALL,             /* every GPU passes (or the pod has no filter) */
        MK_SCHED_TYPES_NONE,            /* none passes */
};

/* What a placement is asked. */
struct mk_sched_place {
        const struct mk_sched_node *node;       /* the cache's entry; NULL for a Node object outside it */
        const struct mk_inventory *inv;         /* node->inv, or the Node object's own */
        const struct mk_pod_request *req;       /* n_containers > 0 */
        const char *uid;                        /* the pod's: its own reservation is left out (may be NULL) */
        int64_t now;                            /* expires pending reservations (0: none expire) */
        bool plain;                             /* the node's kept view is this pod's, but for GPU types
                                                 * (decide.c's node_state_plain) */
        bool tiered;                            /* score on the mode choice's tier scale (mk_fit_mig_tier_score) */
        enum mk_sched_types types;              /* the pod's GPU-type filter on this node */
        struct mk_claim *claim;                 /* reserve: receives the devices chosen; NULL otherwise */
        struct mk_fit_memo *fit_memo;           /* optional: MK_SCHED_FIT_MEMOS, the request's, one per
                                                 * container (mk_fit_request.memo), kept between nodes */
};

#define MK_SCHED_FIT_MEMOS 4u   /* containers of a request with a fit memo (later ones: none) */

/* A kind of placement: 0 with the node's score (0..100) in *ret_score, or
 * -ENOSPC (does not fit) / another error, with the reason in `reason`
 * (size 0: no reason wanted). `scp` holds the request's scratch. */
typedef int (*mk_sched_place_fn)(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                                 char *reason, size_t size);

int mk_sched_place_mig(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                       char *reason, size_t size) _nonnull_(1, 2, 3);

/* Shared by the placements: one container's fit request. */
struct mk_fit_request mk_sched_fit_request(const struct mk_pod_request *req,
                                           const struct mk_pod_request_container *rc) _nonnull_(1, 2);
/* The MIG view of p's node for this pod into sc->gpus/used (its own
 * reservation left out, expired pending ones dropped, unwanted GPU types
 * and shared GPUs unavailable). <0 with the reason. */
int mk_sched_fill_mig(struct mk_sched_scratch *sc, const struct mk_sched_place *p, char *reason, size_t size)
        _nonnull_(1, 2);
/* Takes container `container`'s MIG fit: its instances into the view and,
 * with `claim`, its devices at claim->devices[*n_dev...] (*n_dev counts
 * them all; the claim holds at most MK_MAX_CLAIM_DEVICES). */
void mk_sched_take_mig(struct mk_sched_scratch *sc, const struct mk_inventory *inv, const struct mk_fit_result *res,
                       unsigned container, struct mk_claim *claim, size_t *n_dev) _nonnull_(1, 2, 3, 6);
/* snprintf(out, size, "%s%.*s%s", a, max_b, b, c) without vsnprintf (a
 * filter writes a reason for every node that fails): the same text, cut
 * at size - 1. `b` may be `out` itself; `a` and `c` may not overlap it. */
void mk_sched_reason_join(char *out, size_t size, const char *a, const char *b, size_t max_b, const char *c)
        _nonnull_(3, 4, 6);
/* The reason of a failed fit of one container of the pod. */
void mk_sched_fit_reason(const struct mk_pod_request *req, unsigned container, const struct mk_error *e, char *reason,
                         size_t size) _nonnull_(1, 3);
