/* The fit policy's names (fit.h); the policy itself is inline in
 * fit-score.h. */
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
