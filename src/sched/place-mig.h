/* MIG placement: fitting a pod on one node as MIG instances created for it
 * (plan/fit's geometry search over the node's GPUs, with the instances
 * that exist and those other pods reserved). One kind of placement behind
 * decide.h's seam; a soft slice placement (issue 13) sits beside it with
 * the same signature (mk_sched_place_fn).
 *
 * Two paths, proven equal by tests/unit/test-sched.c: the fast one fits
 * straight on the node cache's kept view (one container, no GPU-type
 * filter, a plain node state); the slow one rebuilds the view for this pod
 * into a scratch (its own reservation left out, expired pending ones
 * dropped, unwanted GPU types unavailable) and fits container by
 * container. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "plan/fit.h"

struct mk_claim;
struct mk_inventory;
struct mk_pod_request;
struct mk_sched_node;

/* The slow path's view of one node, rebuilt per fit (large: allocated once
 * per request, when first needed). */
struct mk_sched_scratch {
        struct mk_fit_gpu gpus[MK_FIT_MAX_NODE_GPUS];
        struct mk_fit_instance used[MK_FIT_MAX_NODE_GPUS][MK_FIT_MAX_INSTANCES];
};

/* What a placement is asked. */
struct mk_sched_place {
        const struct mk_sched_node *node;       /* the cache's entry; NULL for a Node object outside it */
        const struct mk_inventory *inv;         /* node->inv, or the Node object's own */
        const struct mk_pod_request *req;       /* n_containers > 0 */
        const char *uid;                        /* the pod's: its own reservation is left out (may be NULL) */
        int64_t now;                            /* expires pending reservations (0: none expire) */
        bool plain;                             /* the node's kept view is this pod's (mk_sched_node_plain) */
        struct mk_claim *claim;                 /* reserve: receives the devices chosen; NULL otherwise */
};

/* A kind of placement: 0 with the node's score (0..100) in *ret_score, or
 * -ENOSPC (does not fit) / another error, with the reason in `reason`
 * (size 0: no reason wanted). `scp` holds the request's scratch. */
typedef int (*mk_sched_place_fn)(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                                 char *reason, size_t size);

int mk_sched_place_mig(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                       char *reason, size_t size) _nonnull_(1, 2, 3);
