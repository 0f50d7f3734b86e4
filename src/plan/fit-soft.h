/* Soft-slice fitting and the mode choice of the unified GPU pool
 * (docs/scheduler-fit.md §9, §10). A soft slice is a share of a whole GPU
 * in hami-core mode: a memory cap (MiB), a compute share (percent of the
 * SMs, enforced by libmigkit-vgpu.so) and one of the GPU's sharer slots
 * (HAMi's deviceSplitCount). The rules on one GPU are HAMi v2.10's (HAMi
 * v2.10.0, pkg/device/nvidia/device.go `Fit`): memory left, cores left
 * (their sum on a GPU never above 100), a free sharer slot, `cores` 100 only
 * on a GPU nobody uses, and no slice without a core limit on a GPU whose
 * cores are all booked.
 *
 * Same conventions as fit.h, whose request (struct mk_fit_request), node
 * CPU/memory (struct mk_fit_node_resources) and policies it takes: pure, no
 * I/O, no allocation, no globals, borrowed inputs, results in caller
 * structs, the reason of a failure in a struct mk_error. Thread-safe on
 * shared inputs; microseconds per node.
 *
 * A node whose GPUs are in different modes (a `mixed` node, or an idle GPU
 * that may change mode) is described as two arrays: its MIG GPUs as a
 * struct mk_fit_node (fit.h) and its shared GPUs as a struct
 * mk_fit_soft_node. An IDLE GPU (no instance, no soft slice, no
 * reservation) whose node allows mode changes is listed in BOTH arrays,
 * with `switchable` set in the array of the mode it is not in now: whichever
 * mode the pod gets, that copy is the one used, and a fit prefers GPUs that
 * need no switch. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "plan/fit.h"

#define MK_FIT_SOFT_MAX_SLICES 64u            /* soft slices held on one GPU; also the largest split */
#define MK_FIT_SOFT_DEFAULT_SPLIT 10u         /* HAMi's deviceSplitCount default */
#define MK_FIT_SOFT_MAX_GPU_MIB (UINT64_C(1) << 24)  /* 16 TiB: bounds the node sums */

/* A soft slice held (running or reserved) on a shared GPU. */
struct mk_fit_soft_slice {
        uint64_t memory_mib;            /* its memory cap */
        unsigned cores;                 /* its SM share in percent, 0..100; 0: no compute limit */
};

/* One whole GPU in hami-core mode (or an idle one that may switch to it). */
struct mk_fit_shared_gpu {
        uint64_t memory_mib;            /* whole-GPU memory, the base of a percentage; 1..MK_FIT_SOFT_MAX_GPU_MIB */
        unsigned split;                 /* max sharers, 1..MK_FIT_SOFT_MAX_SLICES; 0: MK_FIT_SOFT_DEFAULT_SPLIT */
        const struct mk_fit_soft_slice *used;  /* the slices held here */
        size_t n_used;                  /* <= MK_FIT_SOFT_MAX_SLICES */
        bool unavailable;               /* never chosen: unhealthy, excluded by type/UUID, cordoned */
        bool switchable;                /* idle GPU now in MIG mode that may turn shared (n_used must be 0):
                                         * taken after every shared GPU that needs no switch */
};

struct mk_fit_soft_node {
        const struct mk_fit_shared_gpu *gpus;
        size_t n_gpus;                  /* <= MK_FIT_MAX_NODE_GPUS */
        const struct mk_fit_node_resources *resources;  /* NULL: CPU and memory not considered */
};

/* One slice the request gets. */
struct mk_fit_soft_choice {
        unsigned gpu;                   /* index into mk_fit_soft_node.gpus */
        uint64_t memory_mib;            /* the cap to reserve (the request's MiB, or its share of this GPU) */
        unsigned cores;                 /* the SM share to reserve, percent (0: none) */
        bool switched;                  /* the GPU was `switchable`: it turns shared */
};

struct mk_fit_soft_result {
        struct mk_fit_soft_choice choices[MK_FIT_MAX_REQUEST_GPUS];
        size_t n_choices;               /* == request gpus */
        double score;                   /* node score in [0, 100], fit.h's formula and scale, INCLUDING this
                                         * request (docs/scheduler-fit.md §9) */
        double fragmentation;           /* share of the free memory of the shared GPUs that no slice can use
                                         * (no sharer slot or no cores left there), after the allocation */
};

/* Fits one container on a node's shared GPUs: `req->gpus` distinct GPUs,
 * each with memory (`mem_mib`, or `mem_percent` of that GPU, no memory or
 * 100 %: the whole GPU's) and `cores_percent` free and a free sharer slot.
 * GPU order: non-switchable first; binpack: the least free memory left after
 * the slice (best fit), then the most sharers; spread: the most free memory
 * first, then the fewest sharers; then the index. `variant` (+me, ...) is
 * MIG only: such a request does not fit here. For a pod with several
 * containers, call once per container with the earlier slices added to the
 * GPUs' `used`. 0 and *ret; -ENOSPC with the reason in `e` (e.g. "0 of 4
 * shared GPUs have 8000 MiB and 30% cores free and a sharer slot, 1
 * needed"); -EINVAL for a malformed request or node. *ret is written only
 * on success. */
int mk_fit_soft_node(const struct mk_fit_soft_node *node, const struct mk_fit_request *req,
                     enum mk_fit_policy node_policy, enum mk_fit_policy gpu_policy, struct mk_fit_soft_result *ret,
                     struct mk_error *e) _nonnull_(1, 2, 5);

/* Checks a shared GPU description once, when the inventory is read. 0 or
 * -EINVAL with the reason in `e`. */
int mk_fit_shared_gpu_validate(const struct mk_fit_shared_gpu *g, struct mk_error *e) _nonnull_(1);

/* --- the mode choice ---------------------------------------------------------------- */

enum mk_fit_mode {
        MK_FIT_MODE_MIG,                /* a MIG instance */
        MK_FIT_MODE_SOFT,               /* a soft slice of a shared GPU */
        _MK_FIT_MODE_MAX,
        _MK_FIT_MODE_INVALID = -EINVAL,
};
/* "mig", "hami-core" (nvidia.com/vgpu-mode values). */
const char *mk_fit_mode_to_string(enum mk_fit_mode m);
enum mk_fit_mode mk_fit_mode_from_string(const char *s);

/* Whether a request needs isolation and so never gets a soft slice when it
 * names no mode: `cores_percent` 100 (a whole GPU's compute). A pod with
 * nvidia.com/vgpu-mode: mig is not fitted through mk_fit_choose_mode() at
 * all (call mk_fit_node()). */
static inline bool mk_fit_needs_isolation(const struct mk_fit_request *req) {
        return req->cores_percent >= 100;
}

/* What a placement costs the pool, best first (docs/scheduler-fit.md §10):
 * the mode choice and the node score of a pod without a mode rank by it. */
enum mk_fit_tier {
        MK_FIT_TIER_MIG_CUT_EXACT,      /* MIG on already-cut GPUs, a profile with little waste */
        MK_FIT_TIER_SOFT_SHARED,        /* soft slices on already-shared GPUs */
        MK_FIT_TIER_SOFT_NEW,           /* takes an empty shared GPU */
        MK_FIT_TIER_SOFT_SWITCH,        /* turns an idle MIG GPU shared */
        MK_FIT_TIER_MIG_CUT,            /* MIG on already-cut GPUs, more waste */
        MK_FIT_TIER_MIG_NEW_EXACT,      /* cuts an empty MIG GPU, little waste */
        MK_FIT_TIER_MIG_SWITCH_EXACT,   /* turns an idle shared GPU MIG, little waste */
        MK_FIT_TIER_MIG_NEW,            /* cuts an empty MIG GPU, more waste */
        MK_FIT_TIER_MIG_SWITCH,         /* turns an idle shared GPU MIG, more waste */
        _MK_FIT_TIER_MAX,
};

/* Whether MIG profile `p` on GPU `g` serves a request for `need_mib` (0:
 * the whole GPU) and `cores` percent "with little waste": the profile's
 * share of the GPU is at most 25 % above the request's (a share is the
 * larger of the memory and core shares; core shares count only when the
 * request has a `cores` floor). */
bool mk_fit_mig_exact(const struct mk_fit_gpu *g, const struct mk_gi_profile *p, uint64_t need_mib, unsigned cores)
        _nonnull_(1, 2);

/* The mode choice's score (below) of MIG placement `r` of `req` on `node`
 * (as fitted: node not changed since): tier first, then r->score. Nodes
 * that offer only MIG rank a pod without a mode on the same scale as nodes
 * where it has the choice. */
double mk_fit_mig_tier_score(const struct mk_fit_node *node, const struct mk_fit_request *req,
                             const struct mk_fit_result *r) _nonnull_(1, 2, 3);

struct mk_fit_mode_result {
        enum mk_fit_mode mode;
        enum mk_fit_tier tier;
        struct mk_fit_result mig;       /* valid when mode is MK_FIT_MODE_MIG */
        struct mk_fit_soft_result soft; /* valid when mode is MK_FIT_MODE_SOFT */
        double score;                   /* [0, 100]: tier first, then the chosen fit's score; rank nodes by it
                                         * for this pod (every node scored the same way) */
        const char *why;                /* static text for the VGPUModeChosen Event */
};

/* The mode and placement of a container whose pod names no vgpu-mode, on
 * one node: both fits, then the better tier (ties: MIG, whose isolation is
 * stronger). An isolation request (mk_fit_needs_isolation) is fitted on the
 * MIG GPUs only. `mig` and `soft` may be NULL (the node has no GPU of that
 * mode). 0 and *ret (`mig` or `soft` of it per `mode`; the other one is
 * scratch); -ENOSPC when neither mode fits, the reason naming both
 * ("MIG: ...; hami-core: ..."); -EINVAL for a malformed request or node;
 * on failure *ret may have been used as scratch. */
int mk_fit_choose_mode(const struct mk_fit_node *mig, const struct mk_fit_soft_node *soft,
                       const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                       enum mk_fit_policy gpu_policy, struct mk_fit_mode_result *ret, struct mk_error *e)
        _nonnull_(3, 6);
