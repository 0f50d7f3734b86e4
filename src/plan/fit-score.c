/* The fit policy's names (fit.h), the request check and the CPU/memory
 * accounting every kind of room shares; the policy itself is inline in
 * fit-score.h. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <strings.h>

#include "plan/fit-score.h"

static const char *const policy_table[_MK_FIT_POLICY_MAX] = {
        [MK_FIT_BINPACK] = "binpack",
        [MK_FIT_SPREAD] = "spread",
};

const char *mk_fit_policy_to_string(enum mk_fit_policy p) {
        if (p < 0 || p >= _MK_FIT_POLICY_MAX)
                return NULL;
        return policy_table[p];
}

enum mk_fit_policy mk_fit_policy_from_string(const char *s) {
        if (!s)
                return _MK_FIT_POLICY_INVALID;
        for (int i = 0; i < _MK_FIT_POLICY_MAX; i++)
                if (strcasecmp(s, policy_table[i]) == 0)
                        return (enum mk_fit_policy) i;
        return _MK_FIT_POLICY_INVALID;
}

int fit_request_check(const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                      enum mk_fit_policy gpu_policy, struct mk_error *e) {
        if (req->gpus == 0 || req->gpus > MK_FIT_MAX_REQUEST_GPUS)
                return mk_error_set(e, -EINVAL, "request for %u GPUs, must be 1..%u", req->gpus,
                                    MK_FIT_MAX_REQUEST_GPUS);
        if (req->mem_percent > 100 || req->cores_percent > 100)
                return mk_error_set(e, -EINVAL, "request percentage over 100 (memory %u%%, cores %u%%)",
                                    req->mem_percent, req->cores_percent);
        if (node_policy < 0 || node_policy >= _MK_FIT_POLICY_MAX || gpu_policy < 0 || gpu_policy >= _MK_FIT_POLICY_MAX)
                return mk_error_set(e, -EINVAL, "invalid policy");
        return 0;
}

int fit_resources_fit(const struct mk_fit_node_resources *r, const struct mk_fit_request *req, double *ret_util,
                      struct mk_error *e) {
        uint64_t cpu_free = r->cpu_requested_milli > r->cpu_allocatable_milli
                                    ? 0
                                    : r->cpu_allocatable_milli - r->cpu_requested_milli;
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
