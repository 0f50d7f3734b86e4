/* The extender's entry points, kept apart from HTTP and the apiserver so
 * they are tested as data: filter, prioritize and the reservation step of
 * bind, each reading the request (wire.h), deciding over the node cache
 * (decide.h, nodecache.h, memo.h) and writing the answer (wire.h), with
 * the counters /metrics shows. The cache is fed by informers through
 * mk_sched_node_event / mk_sched_pod_event.
 *
 * Threads: every function may be called from several threads at once (a
 * read-write lock guards the cache; decisions hold the read side, events and
 * reservations the write side for microseconds). No lock spans an apiserver
 * call. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/kube.h"
#include "sched/request.h"
#include "sched/wire.h"

struct mk_sched_config;
struct mk_sched;

struct mk_sched_stats {
        atomic_ulong filter, prioritize, bind, bind_ok, bind_conflicts, bind_errors, errors;
        atomic_ulong filter_ns_total, filter_nodes_total, feasible_total;
        atomic_ulong memo_hits;         /* node decisions answered from a node's memo */
        atomic_ulong bad_nodes, bad_pods; /* object versions the informers skipped as malformed */
};

/* The cache. `cfg` is borrowed and must outlive it. */
int mk_sched_new(const struct mk_sched_config *cfg, struct mk_sched **ret) _nonnull_(1, 2) _wur_;
struct mk_sched *mk_sched_free(struct mk_sched *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_sched *, mk_sched_free);

struct mk_sched_stats *mk_sched_stats(struct mk_sched *s) _nonnull_(1);
/* Nodes and pods with reservations in the cache (the expired pending ones
 * swept first, mk_sched_cache_sweep). */
void mk_sched_counts(struct mk_sched *s, size_t *ret_nodes, size_t *ret_claims) _nonnull_(1, 2, 3);

/* Informer callbacks (mk_kube_informer_fn compatible through a thin
 * wrapper): a Node or Pod was added, modified or deleted. A Node with a
 * malformed inventory is kept with the error as its filter reason. */
int mk_sched_node_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *node) _nonnull_(1, 3);
int mk_sched_pod_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *pod) _nonnull_(1, 3);

/* POST /filter and /prioritize: `args` is the decoded ExtenderArgs. Always
 * returns a response object (ExtenderFilterResult / HostPriorityList); a
 * malformed request gives a result with Error set (filter) or an empty list. */
json_t *mk_sched_filter(struct mk_sched *s, const json_t *args) _nonnull_(1);
json_t *mk_sched_prioritize(struct mk_sched *s, const json_t *args) _nonnull_(1);
/* The same answers as compact JSON text (malloc'd), written without
 * building a json_t (what the HTTP server sends); NULL only when out of
 * memory. */
char *mk_sched_filter_text(struct mk_sched *s, const json_t *args) _nonnull_(1);
char *mk_sched_prioritize_text(struct mk_sched *s, const json_t *args) _nonnull_(1);
/* What the HTTP server does with a request body of `len` bytes (at most
 * `cap`): filter (else prioritize) as text into *ret (NULL only when out
 * of memory). A plain NodeNames list (names of printable ASCII) is read by
 * a bounded scan instead of jansson, which reads the rest; the answer is
 * the same as mk_json_load + mk_sched_*_text. <0 with `e` (mk_json_load's
 * error) when the body is not valid JSON or too large. */
int mk_sched_body_text(struct mk_sched *s, bool filter, const char *body, size_t len, size_t cap, char **ret,
                       struct mk_error *e) _nonnull_(1, 6) _wur_;

/* Node decisions are remembered per request shape (what a decision reads of
 * a pod: its containers' GPU requests, CPU and memory, annotations) until
 * the node's state changes, so that prioritize after filter, and pods of
 * one shape, cost a lookup per node. On by default; off: every decision is
 * computed (the tests compare both). */
void mk_sched_set_memo(struct mk_sched *s, bool on) _nonnull_(1);
/* On: every node is decided on a view of its GPUs rebuilt for the pod,
 * container by container, without node caches or the memo (the slow,
 * obviously exact path that the fast ones must equal: tests and bench).
 * Off by default. */
void mk_sched_set_exact(struct mk_sched *s, bool on) _nonnull_(1);

/* The bind's decision: fits `pod` on `node` against the current cache
 * (other pods' reservations, pending ones included) and records the result
 * as an in-memory pending reservation, so a concurrent bind to the same
 * node cannot get the same placement. `*ret` is the claim to write on the
 * pod. A pod already holding a reservation on `node` gets it back
 * unchanged (a retried bind). -ENOSPC with the reason when it no longer
 * fits, -ENOENT for an unknown node. */
int mk_sched_reserve(struct mk_sched *s, const json_t *pod, const char *node, int64_t now, struct mk_claim *ret,
                     struct mk_error *e) _nonnull_(1, 2, 3, 5) _wur_;
/* Takes the reservations of a Node's bind ledger (ledger.h; those of
 * other replicas) into the cache as pending ones, except `skip_uid`'s (the
 * pod being bound), and drops the expired pending ones. */
void mk_sched_note_ledger(struct mk_sched *s, const json_t *ledger, const char *skip_uid, int64_t now)
        _nonnull_(1, 2, 3);
/* Drops the pending reservation of pod `uid` (a failed bind). */
void mk_sched_unreserve(struct mk_sched *s, const char *uid) _nonnull_(1, 2);
