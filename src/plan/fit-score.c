/* The fit policy (fit-score.h): policy names, the GPU order, the node score. */
#include <stddef.h>
#include <strings.h>

#include "plan/fit-score.h"

/* Node score weights (docs/scheduler-fit.md §4): the rest of 1 goes to
 * "keep", the share of an empty GPU's capacity the pod does not destroy.
 * With CPU/memory known, half the utilisation weight goes to them. */
#define W_UTIL_BINPACK 0.15
#define W_UTIL_SPREAD 0.60
#define W_FRAG 0.05

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

void fit_node_score(const struct fit_sums *sm, enum mk_fit_policy node_policy, bool have_res, double res_util,
                    double *ret_score, double *ret_fragmentation) {
        double util = sm->total_units > 0 ? (double) sm->used_units / sm->total_units : 0;
        double frag = sm->ideal_sum > 0 ? 1.0 - (double) sm->cap_sum / sm->ideal_sum : 0;
        double keep = sm->empty_cap > 0 ? 1.0 - (double) sm->loss / sm->empty_cap : 1;
        double w_util = node_policy == MK_FIT_BINPACK ? W_UTIL_BINPACK : W_UTIL_SPREAD, w_res = 0;
        double w_keep = 1.0 - w_util - W_FRAG;
        if (have_res) {
                w_res = w_util / 2;
                w_util -= w_res;
        }
        double score;
        if (node_policy == MK_FIT_BINPACK)
                score = w_keep * keep + w_util * util + W_FRAG * (1 - frag) + w_res * res_util;
        else
                score = w_keep * keep + w_util * (1 - util) + W_FRAG * (1 - frag) + w_res * (1 - res_util);
        *ret_score = 100.0 * fit_clamp01(score);
        *ret_fragmentation = fit_clamp01(frag);
}
