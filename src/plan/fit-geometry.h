/* Geometry of one GPU for plan/fit (internal to plan/fit*.c): memory units
 * as bit masks, what a fit needs of each allowed profile, the capacity value
 * C of a free mask (docs/scheduler-fit.md §3), the ideal capacity of a count
 * of free units, capacity tables, and one GPU's state in one call. No policy
 * here: which placement or GPU wins is plan/fit-score.h.
 *
 * Everything is bit masks over memory units: a GPU's used units, each
 * placement's units. The capacity value of a GPU's free space is
 *
 *     C(F) = sum over allowed attribute-free profiles p of  size(p) * M_p(F)
 *            + FIT_USABLE_UNIT_WEIGHT * |U(F)|
 *
 * where M_p(F) is how many instances of p could still be created on their
 * own in the free units F (disjoint free placements, capped by the free
 * compute slices and p's remaining instance count) and U(F) the free units
 * that some free placement of such a profile (M_p > 0) covers: a placement
 * that leaves a free unit no instance can use any more (a 1g at unit 6 of
 * an 8-unit GPU strands unit 7, which only 1g.20gb@6 and 7g reach) loses it
 * for certain, where the profile terms only weigh what might be asked.
 *
 * Speed: C is looked up in mk_fit_tables when the caller built them (C for
 * every free mask and free slice count of an 8-unit GPU, 4.6 KiB), else
 * computed with popcounts; the inline helpers below run in the innermost
 * loops of a fit. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "mig/gpu.h"
#include "plan/fit.h"

#define FIT_TAB_UNITS 8u        /* tables cover GPUs of up to 8 memory units */
#define FIT_TAB_SLICES 8u       /* ... and 8 compute slices */
#define FIT_IDEAL_MAX 8u        /* per-call cache of the ideal capacity, n and fs <= 8 */
/* The weight of a usable free unit in C: enough that a 1g on an empty
 * A100-80GB goes to unit 5 rather than 6 (profile terms lost 17 and 15; at 6
 * it also strands unit 7), small enough that the profile terms still lead
 * between GPUs (docs/scheduler-fit.md §3 and §8: 8 made the `issue` mix need
 * more GPUs). */
#define FIT_USABLE_UNIT_WEIGHT 4u

/* --- masks ---------------------------------------------------------------------- */

/* Without -mpopcnt the builtin is a library call; this is not. */
static inline unsigned fit_popcount32(uint32_t x) {
        x = x - ((x >> 1) & UINT32_C(0x55555555));
        x = (x & UINT32_C(0x33333333)) + ((x >> 2) & UINT32_C(0x33333333));
        x = (x + (x >> 4)) & UINT32_C(0x0F0F0F0F);
        return (x * UINT32_C(0x01010101)) >> 24;
}

/* mk_placement_mask(), inlined; 0 for a placement outside 32 units. */
static inline uint32_t fit_pmask(struct mk_placement p) {
        if (p.size == 0 || p.size > 32 || p.start > 32 - p.size)
                return 0;
        return (uint32_t) ((((uint64_t) 1 << p.size) - 1) << p.start);
}

/* Runs of `size` free units: bit u set when units u..u+size-1 are all free. */
static inline uint32_t fit_free_runs(uint32_t free, unsigned size) {
        uint32_t run = free;
        for (unsigned k = 1; k < size; k++)
                run &= free >> k;
        return run;
}

/* The low `units` bits. */
static inline uint32_t fit_units_mask(unsigned units) {
        return units >= 32 ? UINT32_MAX : ((UINT32_C(1) << units) - 1);
}

/* --- profiles ------------------------------------------------------------------- */

/* What a fit needs of one profile. */
struct fit_pinfo {
        uint32_t starts;                /* bit s: a placement starts at unit s */
        unsigned size;                  /* units of each placement */
        bool base;                      /* attribute-free: counted in the capacity value */
        bool disjoint;                  /* placements pairwise disjoint: M_p by popcount */
        bool limited;                   /* max_count below the placement count: instances must be counted */
};

/* Fills pis[0..g->n_profiles) and the largest slice and SM counts; -EINVAL
 * for a placement outside the GPU or placements of different sizes. */
int fit_pinfo_fill(const struct mk_fit_gpu *g, struct fit_pinfo *pis, unsigned *ret_max_slices,
                   unsigned *ret_max_sms) _nonnull_(1, 2, 3, 4);

/* Whether profile `p` carries exactly the attribute suffix `v` ("+me",
 * "+me.all", "-me", "+a,b"); NULL or "" asks for none. */
bool fit_variant_matches(const struct mk_gi_profile *p, const char *v) _nonnull_(1);

/* The index of the placement of `p` starting at `start` (a start taken from
 * the profile's placements); 0 when none does. */
static inline size_t fit_placement_index(const struct mk_gi_profile *p, unsigned start) {
        for (size_t i = 0; i < p->n_placements; i++)
                if (p->placements[i].start == start)
                        return i;
        return 0; /* not reached: starts come from the placements */
}

/* --- capacity tables ------------------------------------------------------------ */

struct mk_fit_tables {
        const struct mk_gi_profile *profiles;
        size_t n_profiles;
        unsigned memory_units;
        unsigned slices;                /* mk_fit_gpu.slices as given (0: the largest profile's) */
        uint16_t cap[1u << FIT_TAB_UNITS][FIT_TAB_SLICES + 1];  /* C(free mask, free slices) */
        unsigned max_slices, max_sms;
        struct fit_pinfo pi[MK_FIT_MAX_PROFILES];
        /* Per profile, free mask and free slices: 1 + the start of the free
         * placement that fit_spot_better() picks, 0 when none. */
        uint8_t best[];
};

static inline size_t fit_best_index(size_t j, uint32_t free, unsigned free_slices) {
        return (j * (1u << FIT_TAB_UNITS) + (free & 0xffu)) * (FIT_TAB_SLICES + 1) + free_slices;
}

/* Whether tables `t` were built for `g`'s profile array and counts. */
static inline bool fit_tables_match(const struct mk_fit_tables *t, const struct mk_fit_gpu *g) {
        return t && t->profiles == g->profiles && t->n_profiles == g->n_profiles &&
               t->memory_units == g->memory_units && t->slices == g->slices;
}

/* --- one call's state ------------------------------------------------------------- */

/* What a call needs of one profile array, computed once per distinct array
 * (a node's GPUs usually share one). */
struct fit_profset {
        const struct mk_gi_profile *profiles;
        size_t n;
        unsigned units, slices_given;
        const struct mk_fit_tables *tables_given;
        int valid;                      /* 0, or -EINVAL: a placement outside the GPU or sizes differ */
        unsigned max_slices, max_sms;
        const struct mk_fit_tables *tab;        /* usable tables, or NULL */
        /* The request's adequate profiles for GPUs with these values, kept
         * here by plan/fit.c (the request is the same for the call). */
        bool adq_known;
        uint64_t adq_mem_mib;
        unsigned adq_sms, adq_slices;
        uint8_t order[MK_FIT_MAX_PROFILES];     /* adequate profiles, smallest first */
        size_t n_order;

        /* C of n free units from unit 0 with fs free slices, counts not considered. */
        uint16_t ideal[FIT_IDEAL_MAX + 1][FIT_IDEAL_MAX + 1];
        uint16_t ideal_known[FIT_IDEAL_MAX + 1];        /* bit fs of row n */
        bool profiles_only;             /* C without the usable units' term (the engine's planner) */
        const struct fit_pinfo *pi;     /* the tables' or own */
        struct fit_pinfo own[MK_FIT_MAX_PROFILES];
};

#define FIT_PROFSET_CACHE 4

/* The profile sets of one call. Start with fit_profcache_init(). */
struct fit_profcache {
        struct fit_profset sets[FIT_PROFSET_CACHE];
        size_t n, next;
};

static inline void fit_profcache_init(struct fit_profcache *pc) {
        pc->n = pc->next = 0;
}

/* One GPU in one call. */
struct fit_gpu_state {
        struct fit_profset *ps;
        uint32_t all;                   /* mask of the GPU's units */
        uint32_t used;                  /* units held by instances */
        unsigned slices;                /* compute slices of the GPU */
        unsigned free_slices;
        unsigned sms;                   /* SMs of the whole GPU */
        unsigned cap;                   /* C(free) now, when have_cap */
        unsigned ideal;                 /* max(C, ideal C of the free units), when have_ideal */
        bool have_cap;
        bool have_ideal;
        bool have_counts;
        unsigned counts[MK_FIT_MAX_PROFILES];   /* used instances per allowed profile, when have_counts */
};

/* Reads one GPU into `s`; -EINVAL when it cannot be trusted enough to use. */
int fit_gpu_prepare(struct fit_profcache *pc, const struct mk_fit_gpu *g, struct fit_gpu_state *s) _nonnull_(1, 2, 3);

/* Whether profile j (a limited one) has max_count instances already. */
bool fit_limit_reached(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, size_t j) _nonnull_(1, 2);

/* C(free) computed; `counts` NULL means none used, `extra` the index of a
 * profile holding one more instance than `counts` says (SIZE_MAX: none). */
unsigned fit_capacity_compute(const struct mk_fit_gpu *g, const struct fit_profset *ps, const unsigned *counts,
                              size_t extra, uint32_t free, unsigned free_slices) _nonnull_(1, 2);

unsigned fit_capacity_slow(const struct mk_fit_gpu *g, struct fit_gpu_state *s, uint32_t free, unsigned free_slices,
                           size_t extra) _nonnull_(1, 2);
unsigned fit_ideal_slow(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, unsigned n,
                        unsigned free_slices) _nonnull_(1, 2);

/* C(free). `extra` is the index of a profile that holds one more instance
 * than the GPU's used list says (SIZE_MAX: none). With tables, counts never
 * bind (mk_fit_tables_new checks it), so the lookup is exact. */
static inline unsigned fit_capacity(const struct mk_fit_gpu *g, struct fit_gpu_state *s, uint32_t free,
                                    unsigned free_slices, size_t extra) {
        if (s->ps->tab && free_slices <= FIT_TAB_SLICES)
                return s->ps->tab->cap[free & 0xffu][free_slices];
        return fit_capacity_slow(g, s, free, free_slices, extra);
}

/* C of n free units from unit 0, counts not considered. */
static inline unsigned fit_ideal_capacity(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, unsigned n,
                                          unsigned free_slices) {
        if (s->ps->tab && free_slices <= FIT_TAB_SLICES && n <= FIT_TAB_UNITS)
                return s->ps->tab->cap[(1u << n) - 1][free_slices];
        return fit_ideal_slow(g, s, n, free_slices);
}

/* Fragmentation parts of a free mask: C(free) and the ideal, at least C. */
static inline void fit_frag_parts(const struct mk_fit_gpu *g, struct fit_gpu_state *s, uint32_t free,
                                  unsigned free_slices, size_t extra, unsigned *ret_cap, unsigned *ret_ideal) {
        unsigned cap = fit_capacity(g, s, free, free_slices, extra);
        unsigned ideal = fit_ideal_capacity(g, s, fit_popcount32(free & s->all), free_slices);
        *ret_cap = cap;
        *ret_ideal = MAX(ideal, cap);
}

/* C(free) and the ideal (at least C) of a GPU as it is. */
void fit_gpu_now(const struct mk_fit_gpu *g, struct fit_gpu_state *s, unsigned *ret_cap,
                 unsigned *ret_ideal) _nonnull_(1, 2, 3, 4);

/* The profile's core share as `cores_percent` compares it, on a GPU of
 * `sms` SMs and `slices` compute slices: ceil(SMs * 100 / GPU SMs), by
 * slices when SMs are unknown. */
static inline unsigned fit_profile_cores(unsigned sms, unsigned slices, const struct mk_gi_profile *p) {
        if (sms > 0 && p->multiprocessors > 0)
                return (unsigned) (((uint64_t) p->multiprocessors * 100 + sms - 1) / sms);
        if (slices > 0)
                return (p->slices * 100 + slices - 1) / slices;
        return 0;
}

/* Starts of the free placements of profile j (bit s: the placement at s),
 * slices and instance limit included. */
uint32_t fit_free_starts(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, size_t j) _nonnull_(1, 2);
