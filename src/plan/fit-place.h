/* Placing one request on one node (internal to plan/fit*.c): which GPUs,
 * and on each which room, with the node's sums after it for the score.
 * mk_fit_node() (fit.c) checks the request and the node's CPU/memory, calls
 * fit_place() and scores; mk_fit_node_cache_update() (fit.h) is here too,
 * since the cache holds what placing needs.
 *
 * Kinds of room. The request gets one room on each of `gpus` distinct GPUs;
 * the kinds of room are a table (fit-place.c, `kinds[]`): today one, a MIG
 * instance at a placement (the smallest adequate profile, the placement by
 * fit_pick_offer()). A second kind (issue 13: a soft slice of a whole GPU,
 * with a memory cap, cores and a number of sharers) is a second entry: its
 * own `best` over the GPU's sharing state, giving a fit_cand that
 * fit_cand_compare() orders against a MIG one, and its own `after` that adds
 * the GPU's state after it to the node's sums; `fit_needs.kinds` says which
 * kinds a request accepts (a pod without a mode: both). The node-cache path
 * (fit_cached) stays MIG-only; a request accepting another kind is placed
 * from the GPU descriptions. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "plan/fit-score.h"
#include "plan/fit.h"

enum fit_kind {
        FIT_KIND_MIG,                   /* a MIG GPU instance at one of its profile's placements */
        _FIT_KIND_MAX,
};

#define FIT_KIND_BIT(k) (UINT32_C(1) << (k))

/* What one request needs of a GPU, from mk_fit_request. */
struct fit_needs {
        uint32_t kinds;                 /* FIT_KIND_BIT()s the request accepts */
        bool whole;                     /* the whole GPU (a profile covering every unit) */
        uint64_t mem_mib;               /* when not whole; 0: from mem_percent */
        unsigned mem_percent;
        unsigned cores;                 /* floor on the core share, percent; 0: none */
        const char *variant;            /* NULL or "": attribute-free profiles only */
};

/* The request's GPUs, best first, in cands[0..req->gpus), and the node's
 * sums after the allocation. Uses node->cache when it is usable for this
 * node, else reads the GPUs; both give the same answer. 0; -ENOSPC when
 * fewer than req->gpus GPUs have room (reason in `e`); -EINVAL for a
 * malformed GPU. */
int fit_place(const struct mk_fit_node *node, const struct mk_fit_request *req, const struct fit_needs *n,
              enum mk_fit_policy gpu_policy, struct fit_cand cands[static MK_FIT_MAX_NODE_GPUS], struct fit_sums *ret,
              struct mk_error *e) _nonnull_(1, 2, 3, 5, 6);
