/* The extender's decisions: for one pod, every candidate node feasible or
 * not (with why) and its priority; and bind's reservation on one node.
 * Reads the node cache (nodecache.h) under its read lock, answers plain
 * nodes from their memo (memo.h), and asks the node's kind of placement
 * whether and how well the pod fits.
 *
 * The seam for kinds of placement: place_for() in decide.c maps a node
 * (its operating mode, from the scheduler config) and a pod to a
 * mk_sched_place_fn. Today one kind, MIG instances (place-mig.h); soft
 * slices (issue 13: HAMi-core nodes, pods that ask nvidia.com/vgpu-mode
 * other than mig) add a place-soft.c and an entry there, and reserve
 * records what that kind chose in the claim. Pure decisions: no I/O, no
 * apiserver. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"

struct mk_claim;
struct mk_pod_request;
struct mk_sched_cache;
struct mk_sched_cand;
struct mk_sched_config;
struct mk_sched_shapes;

/* One node's decision. */
struct mk_sched_verdict {
        int r;                          /* 0: feasible; <0 not (-ENOSPC does not fit, -ENOENT unknown node...) */
        int priority;                   /* 0..10 (kube-scheduler's MaxExtenderPriority) */
        size_t reason;                  /* failed: offset of its reason in decisions.reasons */
};

/* One request's decisions, before they are written out (wire.h). */
struct mk_sched_decisions {
        struct mk_sched_cand *cands;    /* owned */
        size_t n;
        bool by_name;                   /* NodeNames (else Nodes.items) */
        struct mk_sched_verdict *v;     /* n of them */
        struct mk_buf reasons;          /* NUL-separated, with reasons only */
        size_t feasible;
        unsigned long memo_hits;        /* decisions answered from a node's memo */
};

void mk_sched_decisions_done(struct mk_sched_decisions *d);
/* The reason node i failed ("out of memory" when it could not be kept). */
const char *mk_sched_verdict_reason(const struct mk_sched_decisions *d, size_t i) _nonnull_(1);

/* The pod being decided. */
struct mk_sched_pod_ask {
        const struct mk_pod_request *req;
        const char *uid;                /* its metadata.uid (may be NULL): its own reservation is left out */
        const json_t *pod;              /* the Pod object (for messages) */
        bool exact;                     /* every node fitted on a view rebuilt for the pod, no memo: the
                                         * reference the fast paths are tested against */
};

/* Decides every candidate of `d` (d->cands, d->n, d->by_name set by the
 * caller; the rest is filled). `shapes` NULL: memo off. `with_reasons`:
 * keep the failed nodes' reasons (filter; prioritize keeps none). 0, or
 * -ENOMEM with `err`. */
int mk_sched_decide(const struct mk_sched_config *cfg, struct mk_sched_cache *c, struct mk_sched_shapes *shapes,
                    const struct mk_sched_pod_ask *ask, bool with_reasons, struct mk_sched_decisions *d, char *err,
                    size_t size) _nonnull_(1, 2, 4, 6, 7);

/* Bind's decision: fits the pod on `node` against the cache (other pods'
 * reservations, pending ones included) and records the result as a
 * pending reservation at `now`, so a concurrent bind to the same node
 * cannot get the same placement. `claim` holds the pod's identity on
 * entry; it becomes the reservation (node, time, active, devices). -ENOSPC with the reason when it no
 * longer fits, -ENOENT for an unknown node. Takes the write lock. */
int mk_sched_decide_reserve(const struct mk_sched_config *cfg, struct mk_sched_cache *c,
                            const struct mk_sched_pod_ask *ask, const char *node, int64_t now, struct mk_claim *claim,
                            struct mk_error *e) _nonnull_(1, 2, 3, 4, 6);
