/* The extender's decision memo: node decisions remembered per request
 * shape (what a decision reads of a pod: its containers' GPU requests, CPU
 * and memory, annotations), so that prioritize after filter, and pods of
 * one shape (replicas), cost a lookup per node.
 *
 *   - Shapes are interned to ids that are never reused (mk_sched_shapes),
 *     so a node's memo cannot match a shape that was dropped.
 *   - Each node keeps MK_SCHED_MEMO_SLOTS answers (struct mk_sched_memo,
 *     round robin). The node cache empties it (mk_sched_memo_forget) under
 *     its write lock whenever anything a decision reads changes; readers
 *     fill it one at a time (a reader that finds it busy just decides).
 *
 *   - Each memo has a generation (`gen`), new from a process-wide counter
 *     whenever it is emptied, so a (node entry, generation) pair names one
 *     state of one node, even across a node deleted and another allocated
 *     at its address.
 *   - For a pod of several GPU containers, a filter's verdicts are kept for
 *     the prioritize of the same pod that follows it (mk_sched_handoff):
 *     kube-scheduler sends both for every pod, and a node whose generation
 *     did not change in between is answered from there. Unlike the node
 *     memo, a new request shape cannot defeat it, and the filter writes
 *     nothing into the nodes' lines. (Pods of one GPU container keep the
 *     node memo: their shapes are few and recur, and replicas hit it.)
 *
 * Only a decision that depends on nothing but the node's kept state and the
 * request may be remembered: the caller checks that (decide.c). */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "base/hashmap.h"
#include "base/macro.h"

struct mk_pod_request;

#define MK_SCHED_MEMO_SLOTS 4u          /* shapes remembered per node (round robin) */
#define MK_SCHED_MEMO_MAX_SHAPES 4096u  /* distinct shapes interned before the table starts over */
#define MK_SCHED_SHAPE_MAX 8192u        /* bytes of a shape's text; longer ones are not remembered */
#define MK_SCHED_UID_MAX 64u            /* a pod uid kept with a filter's verdicts; longer ones are not */

/* One node's memo. Compact and first in the node entry: a filter over
 * 1,000s of nodes reads this line of each; the reasons, larger, only for
 * failed nodes. Zeroed is empty. */
struct mk_sched_memo {
        uint64_t shape[MK_SCHED_MEMO_SLOTS];    /* shape ids; 0: empty slot */
        int r[MK_SCHED_MEMO_SLOTS];             /* the decision: 0 feasible, <0 not */
        int8_t priority[MK_SCHED_MEMO_SLOTS];
        bool has_reason[MK_SCHED_MEMO_SLOTS];   /* a failure's reason was kept (prioritize keeps none) */
        uint8_t next;
        atomic_flag busy;
        uint64_t gen;                           /* new whenever the memo is emptied (never 0 after) */
        char (*reason)[MK_ERROR_MSG_MAX];       /* MK_SCHED_MEMO_SLOTS, allocated on the first failure kept */
};

/* Empties the memo (the caller holds the node's write lock). */
void mk_sched_memo_forget(struct mk_sched_memo *m) _nonnull_(1);
/* Frees the reasons and empties the memo. */
void mk_sched_memo_done(struct mk_sched_memo *m) _nonnull_(1);

/* The remembered decision for `shape`: true with *r, *priority and, when
 * `size` > 0 and it failed, its reason. A failure remembered without a
 * reason (by a prioritize) is a miss when a reason is asked for. false too
 * when another thread holds the memo. */
static inline bool mk_sched_memo_get(struct mk_sched_memo *m, uint64_t shape, int *r, int *priority, char *reason,
                                     size_t size) _nonnull_(1, 3, 4);
/* Remembers a decision (`reason`: NULL when none was asked for). A
 * failure's reason is kept only when the shape already has a slot (its
 * second decision here): a first one is kept without it. Skipped when
 * another thread holds the memo. */
void mk_sched_memo_put(struct mk_sched_memo *m, uint64_t shape, int r, int priority, const char *reason)
        _nonnull_(1);

#define MK_SCHED_HANDOFF_SLOTS 16u      /* filters whose verdicts wait for their prioritize */
#define MK_SCHED_HANDOFF_TTL_S 30       /* a prioritize later than this decides again */
#define MK_SCHED_HANDOFF_AHEAD 64u      /* verdicts looked ahead for a node (kube-scheduler keeps the order) */

/* One node of a filter. */
struct mk_sched_handoff_verdict {
        const void *node;               /* the node entry */
        uint64_t gen;                   /* its memo's generation when decided */
        int r;                          /* 0 feasible, <0 not */
        int priority;
};

/* A filter's verdicts on its plain nodes, for the prioritize of the same
 * pod and shape. */
struct mk_sched_handoff_slot {
        uint64_t shape;                 /* 0: empty */
        int64_t time;
        char uid[MK_SCHED_UID_MAX];
        struct mk_sched_handoff_verdict *v;     /* in the filter's node order */
        size_t n;
};

struct mk_sched_handoff {
        pthread_mutex_t lock;
        struct mk_sched_handoff_slot slot[MK_SCHED_HANDOFF_SLOTS];
        unsigned next;
};

/* Interned request shapes, and the filters' verdicts kept for their
 * prioritize: what the decisions remember across requests. */
struct mk_sched_shapes {
        pthread_mutex_t lock;
        struct mk_hashmap ids;          /* canonical shape text -> uint64_t id */
        uint64_t next;
        struct mk_sched_handoff handoff;
};

/* Keeps a filter's verdicts `v` (n of them, taken: freed here or later)
 * for pod `uid` of `shape`, in place of the oldest slot. */
void mk_sched_handoff_put(struct mk_sched_handoff *h, const char *uid, uint64_t shape, int64_t now,
                          struct mk_sched_handoff_verdict *v, size_t n) _nonnull_(1, 2);
/* Takes out the verdicts kept for pod `uid` of `shape` no older than
 * MK_SCHED_HANDOFF_TTL_S: the caller frees them. NULL when none. */
struct mk_sched_handoff_verdict *mk_sched_handoff_take(struct mk_sched_handoff *h, const char *uid, uint64_t shape,
                                                       int64_t now, size_t *ret_n) _nonnull_(1, 2, 5);

int mk_sched_shapes_init(struct mk_sched_shapes *s) _nonnull_(1) _wur_;
void mk_sched_shapes_done(struct mk_sched_shapes *s) _nonnull_(1);

/* The id of the request's shape: everything of the pod that a decision on
 * a plain node reads. 0 when it cannot be remembered (a shape too long,
 * out of memory). Thread-safe. */
uint64_t mk_sched_shape_id(struct mk_sched_shapes *s, const struct mk_pod_request *req) _nonnull_(1, 2);

/* Inline: it runs once per node of every request (1,000s), on the hot path. */
static inline bool mk_sched_memo_get(struct mk_sched_memo *m, uint64_t shape, int *r, int *priority, char *reason,
                                     size_t size) {
        bool hit = false;
        if (atomic_flag_test_and_set(&m->busy))
                return false;
        for (size_t i = 0; i < MK_SCHED_MEMO_SLOTS; i++) {
                if (m->shape[i] != shape)
                        continue;
                if (m->r[i] < 0 && size > 0 && !m->has_reason[i])
                        break; /* decided by a prioritize: decide again for the reason */
                *r = m->r[i];
                *priority = m->priority[i];
                if (*r < 0 && size > 0) {
                        size_t len = strnlen(m->reason[i], MIN(size, sizeof(m->reason[i])) - 1);
                        memcpy(reason, m->reason[i], len);
                        reason[len] = 0;
                }
                hit = true;
                break;
        }
        atomic_flag_clear(&m->busy);
        return hit;
}
