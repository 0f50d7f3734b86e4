/* The extender's node cache: what informers told it about Nodes (their
 * inventories, CPU and memory) and pods (reservations, and what bound pods
 * take), kept so that a decision reads memory only. Per node it also keeps
 * the fit's view with every active reservation applied (fit_gpus...),
 * updated under the write lock when anything in it changes, so that most
 * decisions fit straight on it (place-mig.h), and the node's decision memo
 * (memo.h), emptied on each such change.
 *
 * Threads: one read-write lock (`lock`). Events and reservations take the
 * write side for microseconds; decisions hold the read side across a
 * request and read node entries directly (the structs are public to the
 * scheduler's own files for that). No lock spans an apiserver call. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/hashmap.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/kube.h"
#include "plan/fit.h"
#include "sched/inventory.h"
#include "sched/memo.h"

struct mk_inventory;
struct mk_inv_gpu;
struct mk_pod_request;
struct mk_sched_cand;

#define MK_SCHED_PENDING_TTL_S 120             /* an unobserved in-memory reservation is dropped after this */
#define MK_SCHED_SWEEP_S 10                    /* expired pending reservations are looked for this often */
#define MK_SCHED_GONE_S 60                     /* a deleted pod is remembered this long (> a ledger entry's life) */
#define MK_SCHED_GONE_MAX 65536                /* ... and at most this many (more: not remembered) */

/* A pod's reservation in the cache. */
struct mk_sched_pod {
        struct mk_claim claim;
        bool pending;                   /* made by a bind, not yet observed on the pod */
        int64_t pending_since;
        int64_t pending_ttl_s;          /* dropped this long after pending_since (0: MK_SCHED_PENDING_TTL_S) */
};

/* Whether a pending reservation is older than its TTL (pending_ttl_s, else
 * MK_SCHED_PENDING_TTL_S) at `now` (0: never). */
bool mk_sched_pod_expired(const struct mk_sched_pod *p, int64_t now) _nonnull_(1);

struct mk_sched_node {
        struct mk_sched_memo memo;      /* first: the line a filter reads of every node */
        bool fit_valid;                 /* fit_gpus/fit_used/fit_cache are current */
        bool inv_reserved;              /* inv lists instances in state reserved or soft slices (they name
                                         * their pod) */
        unsigned n_pending;             /* claims made by our bind, not yet observed */
        int64_t pending_until;          /* none of them expired up to this time (INT64_MAX: none expires) */
        const char *model;              /* the model all of inv's GPUs share (in inv), NULL when they differ */
        struct mk_inventory *inv;       /* NULL when absent or malformed */
        char *name;
        struct mk_sched_kind **kinds;   /* per GPU of inv, at its kind's first GPU (entries may be NULL):
                                         * the shared profile array and fit tables (refs held) */
        uint16_t *reps;                 /* per GPU of inv: the first GPU of its kind (NULL: per call) */
        char *alloc_error;              /* status.allocatable CPU or memory present but not a quantity,
                                         * naming the field: the node is refused (NULL: fine or absent) */
        struct mk_sched_pod **claims;   /* reservations on this node (borrowed from the pod map) */
        size_t n_claims, alloc_claims;
        /* The fit's view of the node with every active reservation. */
        struct mk_fit_gpu *fit_gpus;            /* fit_n_gpus; one block with fit_used */
        struct mk_fit_instance *fit_used;       /* fit_n_gpus * MK_FIT_MAX_INSTANCES */
        size_t fit_n_gpus;              /* room in fit_gpus */
        size_t fit_ng;                  /* GPUs of the kept view (inv's, kept here: a filter reads no
                                         * inventory) */
        /* CPU and memory: the Node's allocatable, and the requests of the
         * active pods bound there (all pods, not only ours). */
        struct mk_fit_node_resources res;
        /* The kept cache inside the entry (which is 64-byte aligned): its
         * header and GPUs' states follow the fields above on lines in a
         * row, so a filter asks for all of a node's lines from the entry's
         * address, with no pointer to wait for. */
        _Alignas(64) struct mk_fit_node_cache fit_cache;
        char reason[MK_ERROR_MSG_MAX];  /* why inv is NULL; last: a filter reads the fields above of every
                                         * node, and they share fewer cache lines without it between */
};

/* One kind of GPU (allowed profiles, units, slices, memory, SMs) with its
 * fit tables, shared by every GPU of that kind on every node: one copy of
 * the tables (about 48 KiB for an A100) for the cluster instead of one per
 * node, so a filter over 1,000s of nodes reads the same tables, and a fit
 * memo (mk_fit_memo) made on one node holds for the next. Held and
 * released under the cache's write lock; freed with its last node. */
struct mk_sched_cache;
struct mk_sched_kind {
        unsigned refs;
        struct mk_sched_cache *owner;
        size_t slot;                    /* its index in owner->kinds */
        struct mk_inv_gpu desc;         /* the kind's description; profiles (and placements) owned */
        struct mk_fit_tables *tables;   /* NULL: the fit computes per call */
};

struct mk_sched_cache {
        pthread_rwlock_t lock;
        struct mk_sched_kind **kinds;   /* every kind a node's GPU has (under the write lock) */
        size_t n_kinds, alloc_kinds;
        struct mk_hashmap nodes;        /* name -> mk_sched_node */
        struct mk_hashmap pods;         /* uid -> mk_sched_pod (pods with a reservation only) */
        struct mk_hashmap usage;        /* uid -> what a bound pod takes of its node's CPU and memory */
        struct mk_hashmap gone;         /* uid -> int64_t *: when a pod with a reservation was seen
                                         * deleted (CLOCK_REALTIME s); another replica's bind ledger
                                         * (mk_sched_cache_note_claim) cannot bring its reservation back */
        int64_t swept_at;               /* the last mk_sched_cache_sweep that looked */
        /* The node entries of the last NodeNames list resolved
         * (mk_sched_cache_resolve), in its order: kube-scheduler sends the
         * same list again and again, and a request with that list then
         * skips a hash lookup per node. Valid while nodes_gen is unchanged;
         * guarded by names_lock, taken with trylock (a reader that finds it
         * busy looks the names up). */
        uint64_t nodes_gen;             /* bumped under the write lock when a node entry is added or freed */
        pthread_mutex_t names_lock;
        uint64_t names_gen;
        struct mk_buf names;            /* the names, each with its NUL */
        struct mk_sched_node **names_nodes;
        size_t names_n, names_alloc;
};

int mk_sched_cache_init(struct mk_sched_cache *c) _nonnull_(1) _wur_;
void mk_sched_cache_done(struct mk_sched_cache *c) _nonnull_(1);

/* Informer events (take the write lock). A Node with a malformed inventory
 * is kept with the error as its reason. A Node whose status.allocatable
 * cpu or memory is there but not a valid quantity (junk, negative, out of
 * range) is kept with alloc_error set (the filter and bind refuse it); a
 * warning is logged when that error appears or changes, once, not per
 * request. -ENOMEM. */
int mk_sched_cache_node_event(struct mk_sched_cache *c, enum mk_kube_event_type type, const json_t *node)
        _nonnull_(1, 3);
int mk_sched_cache_pod_event(struct mk_sched_cache *c, enum mk_kube_event_type type, const json_t *pod)
        _nonnull_(1, 3);

/* With the write lock held: records `claim` as the pod's reservation
 * (pending: made by our bind at `now`), replacing what it had. */
int mk_sched_cache_set_claim(struct mk_sched_cache *c, const struct mk_claim *claim, bool pending, int64_t now)
        _nonnull_(1, 2) _wur_;
/* Drops the pod's reservation when it is a pending one (takes the write
 * lock). */
void mk_sched_cache_drop_pending(struct mk_sched_cache *c, const char *uid) _nonnull_(1, 2);
/* Records `claim` as a pending reservation made by another replica (read
 * from a Node's bind ledger, ledger.h) unless the cache has one for that
 * pod already; it is dropped `ttl_s` after claim->time unless the pod
 * informer delivers it first (takes the write lock). 1 recorded, 0 not,
 * -ENOMEM. */
/* Drops the pending reservations expired at `now` (a bind whose pod was
 * deleted before the informer saw its reservation, a ledger entry whose
 * bind failed), at most once per MK_SCHED_SWEEP_S (takes the write lock).
 * Returns how many it dropped. */
size_t mk_sched_cache_sweep(struct mk_sched_cache *c, int64_t now) _nonnull_(1);
int mk_sched_cache_note_claim(struct mk_sched_cache *c, const struct mk_claim *claim, int64_t ttl_s)
        _nonnull_(1, 2) _wur_;

/* With a lock held: the node entry of `name` / the reservation of pod
 * `uid`, NULL when absent. Borrowed until the lock is released. */
struct mk_sched_node *mk_sched_cache_node(struct mk_sched_cache *c, const char *name) _nonnull_(1, 2);
struct mk_sched_pod *mk_sched_cache_pod(struct mk_sched_cache *c, const char *uid) _nonnull_(1, 2);

/* With the read lock held: the entry of each candidate (NULL: not in the
 * cache) into ret[0..n): copied from the last list resolved when the names
 * and the node entries are the same, else looked up (and kept for the next
 * request when names_lock is free). */
void mk_sched_cache_resolve(struct mk_sched_cache *c, const struct mk_sched_cand *cands, size_t n,
                            struct mk_sched_node **ret) _nonnull_(1);

/* Nodes and pods with reservations (takes the read lock). */
void mk_sched_cache_counts(struct mk_sched_cache *c, size_t *ret_nodes, size_t *ret_claims) _nonnull_(1, 2, 3);

/* How the extender uses GPU `ig` (the unified pool's idle mode switch): a
 * `switchable` GPU that active, unexpired reservations (but `skip_uid`'s)
 * hold in one mode has that mode (a switch reserved, not made yet); else
 * its inventory mode. *ret_switchable: switchable and nothing reserved on
 * it, so either mode may take it. */
enum mk_claim_mode mk_sched_gpu_mode(const struct mk_inv_gpu *ig, struct mk_sched_pod *const *claims, size_t n_claims,
                                     const char *skip_uid, int64_t now, bool *ret_switchable) _nonnull_(1, 6);

/* The fit's view of a node from its inventory and active reservations into
 * gpus[g] / used[g * MK_FIT_MAX_INSTANCES], leaving out `skip_uid`'s own
 * and those pending reservations expired at `now`; `req` (may be NULL)
 * marks GPUs of an unwanted type unavailable. `kinds`, `reps` may be NULL.
 * -E2BIG when a GPU has more than MK_FIT_MAX_INSTANCES instances. */
int mk_sched_fill_gpus(struct mk_fit_gpu *gpus, struct mk_fit_instance *used, const struct mk_inventory *inv,
                       struct mk_sched_kind *const *kinds, const uint16_t *reps, struct mk_sched_pod *const *claims,
                       size_t n_claims, const struct mk_pod_request *req, const char *skip_uid, int64_t now)
        _nonnull_(1, 2, 3);
/* Adds an instance to gpu `fg` (used array `arr`) unless one is there at
 * the same placement. -E2BIG when full. */
int mk_sched_add_used(struct mk_fit_gpu *fg, struct mk_fit_instance *arr, unsigned profile_id, unsigned slices,
                      struct mk_placement p) _nonnull_(1, 2);
