/* Plans: from one GPU's live layout (a mig/ snapshot) and the desired entry,
 * the operations that reach it while changing as little as possible.
 * Pure: no I/O; every decision here is tested as data. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "mig/gpu.h"
#include "mig/layout.h"

/* A compute instance of the target. */
struct mk_plan_ci {
        const struct mk_ci_profile *profile;   /* points into the GPU's profile */
        struct mk_placement placement;         /* in compute slices of its GI */
        bool kept;                             /* exists already: untouched */
        unsigned existing_id;                  /* CI id when kept */
        char uuid[MK_UUID_MAX];                /* MIG device UUID when kept */
};

/* A GPU instance of the target. */
struct mk_plan_gi {
        const struct mk_gi_profile *profile;   /* points into the GPU's profile */
        struct mk_placement placement;         /* in memory units */
        bool kept;                             /* exists already at this placement */
        unsigned existing_id;                  /* GI id when kept */
        struct mk_plan_ci *cis;
        size_t n_cis;
};

/* Something that exists and goes. */
struct mk_plan_destroy {
        bool is_ci;                            /* a compute instance, else a GPU instance */
        unsigned gi_id, ci_id;
        unsigned gi_profile_id;
        struct mk_placement placement;         /* of the GI (memory units) or CI (slices) */
        char name[MK_PROFILE_NAME_MAX];
        char uuid[MK_UUID_MAX];                /* CI only: the MIG device UUID */
};

struct mk_gpu_plan {
        unsigned gpu_index;
        bool mig_enabled;                      /* desired mode */
        bool mode_change;                      /* current (or pending) mode differs from desired */
        bool reset_needed;                     /* the mode change needs a GPU reset (Ampere; pending) */
        bool layout_change;                    /* something is destroyed or created */
        struct mk_plan_gi *target;             /* the whole target, kept and new, by placement */
        size_t n_target;
        struct mk_plan_destroy *destroy;       /* in a safe order: CIs before their GI */
        size_t n_destroy;
        size_t n_kept_gis, n_kept_cis, n_new_gis, n_new_cis;
        size_t search_nodes;                   /* placement-search nodes visited (diagnostics, tests) */
};

/* Plans GPU `g` towards (mig_enabled, desired). Validates first: every name
 * must resolve on this GPU (canonically) and the whole layout must fit
 * (slices, memory units, valid placements, per-profile limits); otherwise
 * -EINVAL / -ENOSPC with a message naming the GPU, the profiles and why.
 * Prefers the placement that keeps most existing instances. Desired
 * disabled: everything on the GPU is destroyed. A GPU that already matches
 * gets a plan with nothing to do (layout_change and mode_change false).
 * A non-MIG-capable GPU: disabled is a no-op; enabled is -EOPNOTSUPP. */
int mk_plan_gpu(const struct mk_gpu *g, bool mig_enabled, const struct mk_layout *desired, struct mk_gpu_plan *ret,
                struct mk_error *e);
void mk_gpu_plan_done(struct mk_gpu_plan *p);

/* Resolves a profile name on a GPU: the GI profile and CI profile whose
 * canonical names equal it. -ENOENT when the GPU has no such profile. */
int mk_plan_resolve(const struct mk_gpu *g, const struct mk_profile_name *name, const struct mk_gi_profile **ret_gi,
                    const struct mk_ci_profile **ret_ci);
