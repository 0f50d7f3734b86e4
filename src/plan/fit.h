/* MIG fitting for dynamic scheduling: given the state of a node's GPUs (the
 * profiles allowed on each, with their placements, and the instances that
 * exist or are reserved), which profile, placement and GPUs a pod's request
 * gets, and how good the node is for it. Fragmentation-aware: among the
 * feasible placements it takes the one that destroys the least of the free
 * space larger requests could still use (docs/scheduler-fit.md gives the
 * formulas). Pure: no I/O, no NVML, no allocation, no globals; safe to call
 * from many threads at once on shared inputs. Decisions take microseconds.
 *
 * Units: placements in memory units (mk_gi_profile.placements, 8 or 4 per
 * GPU), memory in MiB, cores in percent of the whole GPU's SMs.
 *
 * This header is the module's API; the implementation is split by concern
 * (fit.c placing a request on a node, fit-geometry.c one GPU, fit-score.c
 * the policy; their headers are internal to plan/), docs/scheduler-fit.md
 * says which does what. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "mig/layout.h"

#define MK_FIT_MAX_UNITS 32u         /* memory units of one GPU (placement masks are 32-bit) */
#define MK_FIT_MAX_NODE_GPUS 64u     /* GPUs of one node */
#define MK_FIT_MAX_REQUEST_GPUS 16u  /* GPUs of one request (HAMi's per-container device cap) */
#define MK_FIT_MAX_PROFILES 64u      /* allowed profiles of one GPU */
#define MK_FIT_MAX_INSTANCES 64u     /* existing + reserved instances of one GPU */

enum mk_fit_policy {
        MK_FIT_BINPACK,                 /* fill used nodes / GPUs first */
        MK_FIT_SPREAD,                  /* prefer empty nodes / GPUs */
        _MK_FIT_POLICY_MAX,
        _MK_FIT_POLICY_INVALID = -EINVAL,
};
/* "binpack", "spread" (HAMi's annotation values; from_string is case-insensitive). */
const char *mk_fit_policy_to_string(enum mk_fit_policy p);
enum mk_fit_policy mk_fit_policy_from_string(const char *s);

/* An instance that exists or is reserved on a GPU. Its profile need not be
 * among the allowed ones (config changes do not free space). */
struct mk_fit_instance {
        unsigned profile_id;            /* driver GI profile id (mk_gi_profile.id); counts against max_count */
        unsigned slices;                /* compute slices it holds */
        struct mk_placement placement;  /* memory units */
};

/* One GPU as the node inventory describes it. Borrowed pointers; nothing is
 * copied or kept. */
struct mk_fit_gpu {
        const struct mk_gi_profile *profiles;  /* the profiles ALLOWED here (config filtered), with placements */
        size_t n_profiles;
        unsigned memory_units;          /* placement units of the GPU: 8, or 4 on A30-class parts */
        unsigned slices;                /* compute slices of the GPU (7 or 4); 0: the largest allowed profile's */
        uint64_t memory_mib;            /* whole-GPU memory, the base of a memory percentage */
        unsigned multiprocessors;       /* SMs of the full-GPU profile, the base of cores percent;
                                         * 0: the largest allowed profile's */
        const struct mk_fit_instance *used;    /* existing + reserved instances */
        size_t n_used;
        bool unavailable;               /* never chosen: unhealthy, cordoned, excluded by type/UUID,
                                         * MIG disabled, or in use as a whole GPU */
        const struct mk_fit_tables *tables;    /* optional accelerator from mk_fit_tables_new() for these
                                                * profiles; NULL (or tables for other profiles): computed
                                                * per call, same answers, slower */
        bool switchable;                /* an idle shared GPU that may turn MIG (plan/fit-soft.h): taken after
                                         * GPUs offering the same profile that need no switch;
                                         * mk_fit_choose_mode() ranks a switch below other placements */
};

/* Precomputed capacity values for one allowed-profile array on one kind of
 * GPU (mk_fit_gpu's profiles, memory_units, slices; `used` is ignored), so
 * that a fit looks them up instead of computing them: build one per GPU
 * model and allowed set when the inventory is read, share it between GPUs
 * and threads (read-only). The profiles must stay valid and unchanged while
 * the tables are used. Returns 0, -EOPNOTSUPP for GPUs the tables do not
 * cover (over 8 memory units or slices, placements that overlap within a
 * profile, instance limits below the placement count: fits are then computed
 * per call), -EINVAL for a malformed description, -ENOMEM. */
struct mk_fit_tables;
int mk_fit_tables_new(const struct mk_fit_gpu *g, struct mk_fit_tables **ret) _nonnull_(1, 2) _wur_;
struct mk_fit_tables *mk_fit_tables_free(struct mk_fit_tables *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_fit_tables *, mk_fit_tables_free);

/* Node-level resources, as kube-scheduler counts them. */
struct mk_fit_node_resources {
        uint64_t cpu_allocatable_milli, cpu_requested_milli;   /* requested: by the pods already there */
        uint64_t memory_allocatable_bytes, memory_requested_bytes;
};

struct mk_fit_node_cache;

struct mk_fit_node {
        const struct mk_fit_gpu *gpus;
        size_t n_gpus;                  /* <= MK_FIT_MAX_NODE_GPUS */
        const struct mk_fit_node_resources *resources;  /* NULL: CPU and memory not considered */
        const struct mk_fit_node_cache *cache;  /* optional: this node's derived state, kept by the caller
                                                 * (mk_fit_node_cache_update); NULL, unusable or computed for
                                                 * another `gpus` array: the GPUs are read per call, same
                                                 * answers, slower */
};

/* Derived state of one node that a caller keeps beside its GPU array, so
 * that a fit reads one compact record instead of every GPU's instances and
 * recomputes nothing: per GPU the used units, free compute slices, capacity
 * value and ideal (docs/scheduler-fit.md §3, §5) and the profiles that still
 * have a free placement, plus the node's sums. A node whose available GPUs
 * all share one profile array, matching capacity tables and the same units,
 * slices, SMs and memory (one GPU model) can use it; it rejects a request no
 * GPU can host in O(1) and scores without touching the other GPUs. Refresh
 * it with mk_fit_node_cache_update() whenever anything in the node's GPU
 * descriptions changes (an instance added or removed, availability). The
 * fields are private to plan/fit. A cache computed for another GPU array
 * or count is ignored; one left stale after an in-place change of the same
 * array is the caller's bug (the fit then answers for the old state). */
struct mk_fit_node_cache_gpu {
        uint64_t hostable;              /* bit j: profile j has a free placement (slices, limit included) */
        uint32_t used;                  /* units held by instances */
        uint16_t cap, ideal;            /* C(free) and max(C, C(ideal)) */
        uint8_t free_slices, used_units;
        bool available, switchable;
};
struct mk_fit_node_cache_best {
        uint8_t gpu, start;             /* the GPU a one-GPU request of this profile gets, and where */
        uint16_t loss;
};
struct mk_fit_node_cache {
        const struct mk_fit_gpu *gpus;  /* the array it was computed for */
        size_t n_gpus;
        bool usable;                    /* false: fits read the GPUs */
        bool has_best;                  /* win[] is kept (false in a derived cache) */
        /* A derived cache: the cache with win[] it comes from (NULL: none)
         * and the GPUs changed since (bit g). A GPU outside `changed` offers
         * what it offered there, so base's winner (or runner-up) on such a
         * GPU still beats every unchanged GPU: a fit compares it with the
         * changed GPUs only instead of scanning them all. */
        const struct mk_fit_node_cache *base;
        uint64_t changed;
        size_t first;                   /* the first available GPU, whose description all share */
        struct mk_fit_gpu desc;         /* that description (its instances left out): a fit reads it
                                         * here, beside the node's sums, and no GPU description */
        uint64_t hostable;              /* union over the GPUs */
        unsigned total_units, used_units, cap_sum, ideal_sum;  /* over available GPUs */
        unsigned empty_cap;             /* C of an empty GPU */
        uint8_t rank[MK_FIT_MAX_PROFILES];      /* profile indices, smallest first (memory, slices, index) */
        /* The GPUs' states right after the header: a fit reads both, and
         * in a 64-byte aligned cache of 8 GPUs they fill 6 lines in a row
         * (after the winners, 1 KiB away, the states took 3 lines of their
         * own). */
        struct mk_fit_node_cache_gpu gpu[MK_FIT_MAX_NODE_GPUS];
        /* Per GPU policy and profile hosted here: the winner, and the
         * runner-up (the best on another GPU; gpu UINT8_MAX: none) beside
         * it, on the same line. */
        struct mk_fit_node_cache_winners {
                struct mk_fit_node_cache_best best, second;
        } win[_MK_FIT_POLICY_MAX][MK_FIT_MAX_PROFILES];
};

/* Computes the node's derived state into *c (node->cache is not read). 0;
 * -EOPNOTSUPP when the node cannot use one (mixed GPU descriptions, no
 * matching tables, no available GPU) and -EINVAL for a GPU the fit would
 * reject: *c is then marked unusable and fits read the GPUs as without a
 * cache (and report the same errors). */
int mk_fit_node_cache_update(const struct mk_fit_node *node, struct mk_fit_node_cache *c) _nonnull_(1, 2);

/* The cache of `node` with the instances of `taken` added (every choice
 * taken for a pod so far, `res`'s the last), derived from `from`, the
 * cache of node->gpus, which stay as they are (nothing is added to the
 * descriptions): a fit with it answers for the node with those instances
 * while reading only the profiles and tables of node->gpus. Only the GPUs
 * of `res` change; no GPU is read again. The per-profile winners are not
 * recomputed: a one-GPU fit takes the winner (or runner-up) of the first
 * cache on a GPU that did not change and compares it with the changed
 * GPUs, and scans the GPUs' cached states only when both sit on changed
 * GPUs. For a pod's later containers: far cheaper than
 * mk_fit_node_cache_update() on a copy, the same answers. A choice that
 * does not fit the cached state, or `from` unusable: -EOPNOTSUPP (*ret
 * unusable; the caller fits on a copy with the instances added instead). */
struct mk_fit_result;
struct mk_fit_choice;
int mk_fit_node_cache_derive_taken(const struct mk_fit_node *node, const struct mk_fit_node_cache *from,
                                   const struct mk_fit_result *res, const struct mk_fit_choice *taken,
                                   size_t n_taken, struct mk_fit_node_cache *ret) _nonnull_(1, 2, 3, 6);

/* What a fit derives from the request alone for one kind of GPU (its
 * profile array, tables, units, memory, SMs, slices): the profiles
 * adequate for the request, smallest first. A caller fitting one request
 * on many nodes keeps one per request (mk_fit_request.memo) so that each
 * node's fit looks them up instead of testing every profile; the key
 * holds the request's values too, so a memo used with another request or
 * GPU kind is recomputed, never wrong. Zeroed is empty; the fields are
 * private to plan/fit. */
struct mk_fit_memo {
        bool known;
        bool whole;
        const struct mk_gi_profile *profiles;
        const struct mk_fit_tables *tables;
        const char *variant;
        size_t n_profiles;
        uint64_t memory_mib, mem_mib;
        unsigned memory_units, sms, slices, mem_percent, cores;
        uint8_t n_order;
        uint8_t order[MK_FIT_MAX_PROFILES];     /* adequate profile indices, smallest first */
        /* The request's part of a no-room reason, for tail_gpus GPUs asked
         * (tail_len 0: none kept). */
        uint8_t tail_len;
        unsigned tail_gpus;
        char tail[200];
};

/* What one container asks for: `gpus` distinct GPUs, one MIG instance on
 * each, each with at least the memory and cores asked. */
struct mk_fit_request {
        unsigned gpus;                  /* 1..MK_FIT_MAX_REQUEST_GPUS */
        uint64_t mem_mib;               /* per GPU; 0: use mem_percent */
        unsigned mem_percent;           /* of the GPU's memory_mib, 1..100, used when mem_mib is 0; 100, or
                                         * 0 with mem_mib 0: the whole GPU (a profile covering every unit) */
        unsigned cores_percent;         /* 0..100: floor on the profile's core share, ceil(SMs * 100 /
                                         * multiprocessors) (HAMi's `core`); 0: no floor */
        const char *variant;            /* NULL or "": only profiles without attributes; else exactly this
                                         * attribute suffix: "+me", "+me.all", "+gfx", "-me" */
        uint64_t cpu_milli;             /* the pod's CPU and memory requests (whole pod), checked and scored */
        uint64_t memory_bytes;          /* against mk_fit_node.resources when that is set */
        struct mk_fit_memo *memo;       /* optional: kept by the caller between the fits of this request on
                                         * several nodes (written by the fit); NULL: derived per call */
};

/* One instance the request gets. */
struct mk_fit_choice {
        unsigned gpu;                           /* index into mk_fit_node.gpus */
        const struct mk_gi_profile *profile;    /* points into that GPU's profiles */
        struct mk_placement placement;          /* memory units; one of the profile's placements */
};

struct mk_fit_result {
        struct mk_fit_choice choices[MK_FIT_MAX_REQUEST_GPUS];
        size_t n_choices;               /* == request gpus */
        double score;                   /* node score in [0, 100], higher is better for the node policy; it
                                         * INCLUDES this request's allocation */
        double fragmentation;           /* the node's fragmentation after the allocation, [0, 1] */
};

/* Fits one request on one node. Each of `req->gpus` distinct available GPUs
 * gets one instance: on each GPU, the smallest allowed profile (by memory,
 * then compute slices) meeting memory, cores and variant that has a free
 * placement there, at the placement losing the least free capacity. GPUs
 * are taken in order of that profile's size, then (spread) fewest used units
 * first, then the loss, then (binpack) most used units first, then index.
 * The node score follows `node_policy` (docs/scheduler-fit.md §4). For a pod
 * with several containers, call once per container with the earlier choices
 * added to the GPUs' `used`.
 * Returns 0 and fills *ret; -ENOSPC when the request does not fit (the reason
 * in `e`, naming the request); -EINVAL for a malformed request or node
 * (request out of range, unit counts or placements out of range, caps
 * exceeded). *ret is written only on success. */
int mk_fit_node(const struct mk_fit_node *node, const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                enum mk_fit_policy gpu_policy, struct mk_fit_result *ret, struct mk_error *e) _nonnull_(1, 2, 5);

/* Checks a GPU description once, when the inventory is read: unit and slice
 * counts, every placement inside the GPU, no two used instances overlapping,
 * caps. 0 or -EINVAL with the reason in `e` (mk_fit_node stays safe on bad
 * input, but only rejects it with a terse message). */
int mk_fit_gpu_validate(const struct mk_fit_gpu *g, struct mk_error *e) _nonnull_(1);

/* The memory units held by `g`'s used instances, as a bit mask. */
uint32_t mk_fit_used_mask(const struct mk_fit_gpu *g) _nonnull_(1);

/* The free placements of profile `p` on `g`: bit i set when the placement
 * p->placements[i] overlaps no used instance and the GPU still has the
 * compute slices and the per-profile instance count (max_count) for it.
 * 0 when none (or when `g` is unavailable). */
uint64_t mk_fit_free_placements(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) _nonnull_(1, 2);

/* Fragmentation of a GPU in [0, 1]: the share of its free capacity that the
 * allowed profiles can no longer use because free units are split, 1 -
 * C(free) / C_ideal(free units), where C is the capacity value of
 * docs/scheduler-fit.md. 0 for an empty, a full or an unavailable GPU. */
double mk_fit_gpu_fragmentation(const struct mk_fit_gpu *g) _nonnull_(1);

/* The profile's core share as `cores_percent` compares it, ceil(SMs * 100 / GPU SMs). */
unsigned mk_fit_profile_cores(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) _nonnull_(1, 2);
