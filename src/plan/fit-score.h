/* The fit policy, written once (internal to plan/fit*.c): which placement
 * of a profile wins on one GPU, which profile is smaller, in which order
 * GPUs are taken, and the node score (docs/scheduler-fit.md §3, §4). Every
 * path of the fit (capacity tables, per-call computation, node caches)
 * decides through these, so they cannot drift apart.
 *
 * The placement rule: the smallest adequate profile is placed where the
 * loss (C before - C after, plan/fit-geometry.h) is smallest, which keeps
 * large aligned blocks whole (buddy-allocator behaviour: a 1g on an empty
 * GPU goes to unit 6, whose block no 2g can use). Equal losses go to the
 * higher start, next to what is already there (and away from unit 0, where
 * the 4g and the 7g start). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "mig/gpu.h"
#include "plan/fit.h"

/* --- one GPU: the placement ------------------------------------------------------ */

/* The best placement offered so far on one GPU (fit_pick_offer). */
struct fit_pick {
        bool found;
        size_t profile;                 /* index into the GPU's profiles */
        unsigned start;                 /* of the placement, in memory units */
        unsigned loss;                  /* fit_loss() */
};

#define FIT_PICK_NONE ((struct fit_pick) {.found = false})

/* A placement's loss: the capacity value it destroys, C(before) - C(after)
 * (0 should C not drop). */
static inline unsigned fit_loss(unsigned before, unsigned after) {
        return before > after ? before - after : 0;
}

/* THE tie-break of placements: whether a placement losing `loss` at `start`
 * beats one losing `best_loss` at `best_start`: less lost capacity, then
 * the higher start. */
static inline bool fit_spot_better(unsigned loss, unsigned start, unsigned best_loss, unsigned best_start) {
        return loss < best_loss || (loss == best_loss && start > best_start);
}

/* Offers a placement (profiles of equal rank only, fit_profile_rank_compare)
 * to the pick; it keeps the better one. */
static inline void fit_pick_offer(struct fit_pick *b, size_t profile, unsigned start, unsigned loss) {
        if (!b->found || fit_spot_better(loss, start, b->loss, b->start))
                *b = (struct fit_pick) {.found = true, .profile = profile, .start = start, .loss = loss};
}

/* Smaller first: memory, then compute slices. Negative when `a` is smaller. */
static inline int fit_profile_rank_compare(const struct mk_gi_profile *a, const struct mk_gi_profile *b) {
        if (a->memory_mib != b->memory_mib)
                return a->memory_mib < b->memory_mib ? -1 : 1;
        return a->slices < b->slices ? -1 : a->slices > b->slices;
}

/* --- the node: which GPUs ---------------------------------------------------------- */

/* What a request can get on one GPU: its best placement there and what the
 * GPU order reads of it. */
struct fit_cand {
        unsigned gpu;
        size_t profile;                 /* index into that GPU's profiles */
        unsigned start;                 /* of the placement, in memory units */
        uint64_t memory_mib;            /* of the profile: smaller first */
        unsigned slices;                /* of the profile: fewer first */
        unsigned loss;                  /* C(before) - C(after) */
        unsigned used_units;            /* before */
        bool switchable;                /* the GPU is mk_fit_gpu.switchable (an idle shared GPU) */
};

/* The order GPUs are taken in: the candidate's profile size (memory, then
 * slices), then GPUs that need no mode switch (not `switchable`), then
 * (spread) fewest used units, then the loss, then (binpack) most used
 * units, then the GPU index. Negative when `a` goes first. */
static inline int fit_cand_compare(const struct fit_cand *a, const struct fit_cand *b, enum mk_fit_policy gpu_policy) {
        if (a->memory_mib != b->memory_mib)
                return a->memory_mib < b->memory_mib ? -1 : 1;
        if (a->slices != b->slices)
                return a->slices < b->slices ? -1 : 1;
        if (a->switchable != b->switchable)
                return a->switchable ? 1 : -1;
        if (gpu_policy == MK_FIT_SPREAD && a->used_units != b->used_units)
                return a->used_units < b->used_units ? -1 : 1;
        if (a->loss != b->loss)
                return a->loss < b->loss ? -1 : 1;
        if (gpu_policy == MK_FIT_BINPACK && a->used_units != b->used_units)
                return a->used_units > b->used_units ? -1 : 1;
        return a->gpu < b->gpu ? -1 : a->gpu > b->gpu;
}

/* Puts the best `k` of the `n` elements of array `arr` first, in order: a
 * partial selection sort (n is at most a node's GPUs), for any candidate
 * type; `cmp(a, b, policy)` < 0 when *a is better than *b. */
#define FIT_SELECT_BEST(arr, n, k, cmp, policy)                                       \
        do {                                                                           \
                for (size_t k_ = 0; k_ < (size_t) (k) && k_ < (size_t) (n); k_++) {    \
                        size_t b_ = k_;                                                \
                        for (size_t i_ = k_ + 1; i_ < (size_t) (n); i_++)              \
                                if (cmp(&(arr)[i_], &(arr)[b_], (policy)) < 0)         \
                                        b_ = i_;                                       \
                        typeof((arr)[0]) t_ = (arr)[k_];                               \
                        (arr)[k_] = (arr)[b_];                                         \
                        (arr)[b_] = t_;                                                \
                }                                                                      \
        } while (0)

/* Puts the best `gpus` of the n_cands candidates first, in order. */
static inline void fit_cands_select(struct fit_cand *cands, size_t n_cands, unsigned gpus,
                                    enum mk_fit_policy gpu_policy) {
        FIT_SELECT_BEST(cands, n_cands, gpus, fit_cand_compare, gpu_policy);
}

/* --- the node: its score ------------------------------------------------------------ */

/* The node after an allocation, in integers (so every path gives the same
 * doubles): units, C and ideal sums over available GPUs, the chosen
 * placements' losses and their GPUs' empty capacity. */
struct fit_sums {
        unsigned total_units, used_units, cap_sum, ideal_sum, loss, empty_cap;
};

static inline double fit_clamp01(double x) {
        return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* Node score weights (docs/scheduler-fit.md §4, §9): the rest of 1 goes to
 * "keep", the share of an empty GPU's capacity the pod does not destroy.
 * The MIG fit's binpack has no utilisation term: a fuller node is no reason
 * to destroy more capacity there (with 0.15 the `issue` mix needed a node
 * more, §8); keep and fragmentation decide, exact ties are the scheduler's.
 * The soft fit keeps 0.15 (§9: without it the `large` and `isolation` pools
 * lost). With CPU/memory known, binpack gives them FIT_W_RES_BINPACK (from
 * the utilisation weight as far as it goes, then from keep) and spread half
 * its utilisation weight. */
#define FIT_W_UTIL_BINPACK 0.0
#define FIT_W_UTIL_BINPACK_SOFT 0.15
#define FIT_W_RES_BINPACK 0.075
#define FIT_W_UTIL_SPREAD 0.60
#define FIT_W_FRAG 0.05

/* The node's score in [0, 100] and its fragmentation in [0, 1] after the
 * allocation, binpack weighing utilisation `w_util_binpack`. `res_util` is
 * the pod's and the node's CPU/memory utilisation in [0, 1], used when
 * `have_res`. */
static inline void fit_node_score(const struct fit_sums *sm, enum mk_fit_policy node_policy, double w_util_binpack,
                                  bool have_res, double res_util, double *ret_score, double *ret_fragmentation) {
        double util = sm->total_units > 0 ? (double) sm->used_units / sm->total_units : 0;
        double frag = sm->ideal_sum > 0 ? 1.0 - (double) sm->cap_sum / sm->ideal_sum : 0;
        double keep = sm->empty_cap > 0 ? 1.0 - (double) sm->loss / sm->empty_cap : 1;
        double w_util = node_policy == MK_FIT_BINPACK ? w_util_binpack : FIT_W_UTIL_SPREAD, w_res = 0;
        if (have_res) {
                w_res = node_policy == MK_FIT_BINPACK ? FIT_W_RES_BINPACK : w_util / 2;
                w_util = w_util > w_res ? w_util - w_res : 0;
        }
        double w_keep = 1.0 - w_util - w_res - FIT_W_FRAG;
        double score;
        if (node_policy == MK_FIT_BINPACK)
                score = w_keep * keep + w_util * util + FIT_W_FRAG * (1 - frag) + w_res * res_util;
        else
                score = w_keep * keep + w_util * (1 - util) + FIT_W_FRAG * (1 - frag) + w_res * (1 - res_util);
        *ret_score = 100.0 * fit_clamp01(score);
        *ret_fragmentation = fit_clamp01(frag);
}

/* --- the request and the node's CPU/memory (every kind of room) -------------------- */

/* Checks what every fit checks of a request and the policies: 1..16 GPUs,
 * percentages up to 100, valid policies. 0 or -EINVAL (reason in `e`). */
int fit_request_check(const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                      enum mk_fit_policy gpu_policy, struct mk_error *e) _nonnull_(1);

/* CPU and memory: -ENOSPC when the pod's requests do not fit what the node
 * has left (reason in `e`); else 0 and the node's utilisation after the
 * pod, in [0, 1]. */
int fit_resources_fit(const struct mk_fit_node_resources *r, const struct mk_fit_request *req, double *ret_util,
                      struct mk_error *e) _nonnull_(1, 2, 3);
