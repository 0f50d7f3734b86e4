/* MIG fitting for dynamic scheduling (fit.h; formulas in docs/scheduler-fit.md).
 *
 * The fit is split by concern:
 *   fit.c           this: the request and the node's CPU/memory checked, the
 *                   placement asked for, the node scored
 *   fit-geometry.c  one GPU: masks, the capacity value C, capacity tables,
 *                   free placements, fragmentation, validation
 *   fit-place.c     one request on one node: adequate profiles, the room on
 *                   each GPU (a table of kinds: MIG placements today), the
 *                   GPUs chosen, the node's sums after; node caches
 *   fit-score.c     the policy, written once: the placement tie-break, the
 *                   GPU order, the node score, policy names */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>

#include "base/macro.h"
#include "plan/fit-geometry.h"
#include "plan/fit-place.h"
#include "plan/fit-score.h"
#include "plan/fit.h"

/* CPU and memory: -ENOSPC when the pod's requests do not fit what the node
 * has left; else the node's utilisation after the pod, in [0, 1]. */
static int resources_fit(const struct mk_fit_node_resources *r, const struct mk_fit_request *req, double *ret_util,
                         struct mk_error *e) {
        uint64_t cpu_free =
                r->cpu_requested_milli > r->cpu_allocatable_milli ? 0 : r->cpu_allocatable_milli - r->cpu_requested_milli;
        uint64_t mem_free = r->memory_requested_bytes > r->memory_allocatable_bytes
                                    ? 0
                                    : r->memory_allocatable_bytes - r->memory_requested_bytes;
        if (req->cpu_milli > cpu_free)
                return mk_error_set(e, -ENOSPC, "Insufficient cpu: %" PRIu64 "m requested, %" PRIu64 "m free",
                                    req->cpu_milli, cpu_free);
        if (req->memory_bytes > mem_free)
                return mk_error_set(e, -ENOSPC, "Insufficient memory: %" PRIu64 " bytes requested, %" PRIu64 " free",
                                    req->memory_bytes, mem_free);
        double cu = r->cpu_allocatable_milli > 0
                            ? (double) (r->cpu_requested_milli + req->cpu_milli) / r->cpu_allocatable_milli
                            : 0;
        double mu = r->memory_allocatable_bytes > 0
                            ? (double) (r->memory_requested_bytes + req->memory_bytes) / r->memory_allocatable_bytes
                            : 0;
        *ret_util = fit_clamp01((cu + mu) / 2);
        return 0;
}

int mk_fit_node(const struct mk_fit_node *node, const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                enum mk_fit_policy gpu_policy, struct mk_fit_result *ret, struct mk_error *e) {
        if (req->gpus == 0 || req->gpus > MK_FIT_MAX_REQUEST_GPUS)
                return mk_error_set(e, -EINVAL, "request for %u GPUs, must be 1..%u", req->gpus,
                                    MK_FIT_MAX_REQUEST_GPUS);
        if (req->mem_percent > 100 || req->cores_percent > 100)
                return mk_error_set(e, -EINVAL, "request percentage over 100 (memory %u%%, cores %u%%)",
                                    req->mem_percent, req->cores_percent);
        if (node_policy < 0 || node_policy >= _MK_FIT_POLICY_MAX || gpu_policy < 0 || gpu_policy >= _MK_FIT_POLICY_MAX)
                return mk_error_set(e, -EINVAL, "invalid policy");
        if (node->n_gpus > MK_FIT_MAX_NODE_GPUS || (node->n_gpus > 0 && !node->gpus))
                return mk_error_set(e, -EINVAL, "node with %zu GPUs, more than %u", node->n_gpus,
                                    MK_FIT_MAX_NODE_GPUS);

        /* CPU and memory first: cheap, and a node without room needs no GPU work. */
        double res_util = 0;
        if (node->resources) {
                int r = resources_fit(node->resources, req, &res_util, e);
                if (r < 0)
                        return r;
        }

        struct fit_needs n = {
                .kinds = FIT_KIND_BIT(FIT_KIND_MIG),
                .whole = req->mem_mib == 0 && (req->mem_percent == 0 || req->mem_percent == 100),
                .mem_mib = req->mem_mib,
                .mem_percent = req->mem_percent,
                .cores = req->cores_percent,
                .variant = req->variant,
        };
        struct fit_cand cands[MK_FIT_MAX_NODE_GPUS];
        struct fit_sums sm = {};
        int q = fit_place(node, req, &n, gpu_policy, cands, &sm, e);
        if (q < 0)
                return q;

        double score, frag;
        fit_node_score(&sm, node_policy, node->resources != NULL, res_util, &score, &frag);
        for (size_t k = 0; k < req->gpus; k++) {
                const struct mk_gi_profile *p = &node->gpus[cands[k].gpu].profiles[cands[k].profile];
                ret->choices[k] = (struct mk_fit_choice) {
                        .gpu = cands[k].gpu,
                        .profile = p,
                        .placement = p->placements[fit_placement_index(p, cands[k].start)],
                };
        }
        ret->n_choices = req->gpus;
        ret->score = score;
        ret->fragmentation = frag;
        return 0;
}
