/* MIG fitting for dynamic scheduling (fit.h; formulas in docs/scheduler-fit.md).
 *
 * Everything is bit masks over memory units: a GPU's used units, each
 * placement's units. The capacity value of a GPU's free space is
 *
 *     C(F) = sum over allowed attribute-free profiles p of  size(p) * M_p(F)
 *
 * where M_p(F) is how many instances of p could still be created on their
 * own in the free units F (disjoint free placements, capped by the free
 * compute slices and p's remaining instance count). A placement's loss is
 * C(before) - C(after): the free capacity it destroys for every profile
 * size. The smallest adequate profile is placed where the loss is smallest,
 * which keeps large aligned blocks whole (buddy-allocator behaviour: a 1g on
 * an empty GPU goes to unit 6, whose block no 2g can use). Equal losses go
 * to the higher start, next to what is already there (and away from unit 0,
 * where the 4g and the 7g start).
 *
 * Speed: C is looked up in mk_fit_tables when the caller built them
 * (C for every free mask and free slice count of an 8-unit GPU, 4.6 KiB),
 * else computed with popcounts. With a node cache (mk_fit_node_cache_update,
 * kept by the caller) nothing per GPU is recomputed: fit_cached() works from
 * the cached masks, sums and per-profile winners and gives fit_read()'s
 * answers exactly (integer sums, same comparisons). No allocation in
 * mk_fit_node: per-call state lives on the stack, bounded by the caps in
 * fit.h. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "plan/fit.h"

/* Node score weights (docs/scheduler-fit.md §4): the rest of 1 goes to
 * "keep", the share of an empty GPU's capacity the pod does not destroy.
 * With CPU/memory known, half the utilisation weight goes to them. */
#define W_UTIL_BINPACK 0.15
#define W_UTIL_SPREAD 0.60
#define W_FRAG 0.05

#define TAB_UNITS 8u            /* tables cover GPUs of up to 8 memory units */
#define TAB_SLICES 8u           /* ... and 8 compute slices */
#define IDEAL_MAX 8u            /* per-call cache of the ideal capacity, n and fs <= 8 */

/* What a fit needs of one profile. */
struct pinfo {
        uint32_t starts;                /* bit s: a placement starts at unit s */
        unsigned size;                  /* units of each placement */
        bool base;                      /* attribute-free: counted in the capacity value */
        bool disjoint;                  /* placements pairwise disjoint: M_p by popcount */
        bool limited;                   /* max_count below the placement count: instances must be counted */
};

struct mk_fit_tables {
        const struct mk_gi_profile *profiles;
        size_t n_profiles;
        unsigned memory_units;
        unsigned slices;                /* mk_fit_gpu.slices as given (0: the largest profile's) */
        uint16_t cap[1u << TAB_UNITS][TAB_SLICES + 1];  /* C(free mask, free slices) */
        unsigned max_slices, max_sms;
        struct pinfo pi[MK_FIT_MAX_PROFILES];
        /* Per profile, free mask and free slices: 1 + the start of the free
         * placement losing least (ties: higher start), 0 when none. */
        uint8_t best[];
};

static size_t best_index(size_t j, uint32_t free, unsigned free_slices) {
        return (j * (1u << TAB_UNITS) + (free & 0xffu)) * (TAB_SLICES + 1) + free_slices;
}

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

/* Without -mpopcnt the builtin is a library call; this is not. */
static inline unsigned popcount32(uint32_t x) {
        x = x - ((x >> 1) & UINT32_C(0x55555555));
        x = (x & UINT32_C(0x33333333)) + ((x >> 2) & UINT32_C(0x33333333));
        x = (x + (x >> 4)) & UINT32_C(0x0F0F0F0F);
        return (x * UINT32_C(0x01010101)) >> 24;
}

/* mk_placement_mask(), inlined: it runs in the innermost loops. */
static inline uint32_t pmask(struct mk_placement p) {
        if (p.size == 0 || p.size > 32 || p.start > 32 - p.size)
                return 0;
        return (uint32_t) ((((uint64_t) 1 << p.size) - 1) << p.start);
}

/* Runs of `size` free units: bit u set when units u..u+size-1 are all free. */
static inline uint32_t free_runs(uint32_t free, unsigned size) {
        uint32_t run = free;
        for (unsigned k = 1; k < size; k++)
                run &= free >> k;
        return run;
}

static uint32_t units_mask(unsigned units) {
        return units >= 32 ? UINT32_MAX : ((UINT32_C(1) << units) - 1);
}

static unsigned profile_units(const struct mk_gi_profile *p) {
        return p->n_placements > 0 ? p->placements[0].size : 0;
}

static bool profile_is_base(const struct mk_gi_profile *p) {
        return p->named && p->pname.n_attrs == 0;
}

/* Whether profile `p` carries exactly the attribute suffix `v` ("+me",
 * "+me.all", "-me", "+a,b"); NULL or "" asks for none. */
static bool variant_matches(const struct mk_gi_profile *p, const char *v) {
        if (!p->named)
                return false;
        const struct mk_profile_name *n = &p->pname;
        if (!v || !*v)
                return n->n_attrs == 0;
        if (n->n_attrs == 0 || *v != (n->negative ? '-' : '+'))
                return false;
        v++;
        for (unsigned i = 0; i < n->n_attrs && i < MK_PROFILE_ATTRS_MAX; i++) {
                if (i > 0) {
                        if (*v != ',')
                                return false;
                        v++;
                }
                size_t l = strnlen(n->attrs[i], MK_PROFILE_ATTR_MAX);
                if (strncasecmp(v, n->attrs[i], l) != 0)
                        return false;
                v += l;
        }
        return *v == 0;
}

/* --- per-call state -------------------------------------------------------------- */

/* What a call needs of one profile array, computed once per distinct array
 * (a node's GPUs usually share one). */
struct profset {
        const struct mk_gi_profile *profiles;
        size_t n;
        unsigned units, slices_given;
        const struct mk_fit_tables *tables_given;
        int valid;                      /* 0, or -EINVAL: a placement outside the GPU or sizes differ */
        unsigned max_slices, max_sms;
        const struct mk_fit_tables *tab;        /* usable tables, or NULL */
        /* Profiles adequate for the request, for GPUs with these values. */
        bool adq_known;
        uint64_t adq_mem_mib;
        unsigned adq_sms, adq_slices;
        uint64_t adequate;
        uint8_t order[MK_FIT_MAX_PROFILES];     /* adequate profiles, smallest first */
        size_t n_order;

        /* C of n free units from unit 0 with fs free slices, counts not considered. */
        uint16_t ideal[IDEAL_MAX + 1][IDEAL_MAX + 1];
        uint16_t ideal_known[IDEAL_MAX + 1];    /* bit fs of row n */
        const struct pinfo *pi;         /* the tables' or own */
        struct pinfo own[MK_FIT_MAX_PROFILES];
};

#define PROFSET_CACHE 4

struct profcache {
        struct profset sets[PROFSET_CACHE];
        size_t n, next;
};

static bool tables_match(const struct mk_fit_tables *t, const struct mk_fit_gpu *g) {
        return t && t->profiles == g->profiles && t->n_profiles == g->n_profiles &&
               t->memory_units == g->memory_units && t->slices == g->slices;
}

static int pinfo_fill(const struct mk_fit_gpu *g, struct pinfo *pis, unsigned *ret_max_slices, unsigned *ret_max_sms) {
        uint32_t all = units_mask(g->memory_units);
        unsigned max_slices = 0, max_sms = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                struct pinfo *pi = &pis[j];
                *pi = (struct pinfo) {};
                if (p->n_placements > 64 || (p->n_placements > 0 && !p->placements))
                        return -EINVAL;
                pi->size = profile_units(p);
                pi->base = profile_is_base(p);
                pi->disjoint = true;
                pi->limited = p->max_count > 0 && p->max_count < p->n_placements;
                uint32_t acc = 0;
                for (size_t i = 0; i < p->n_placements; i++) {
                        uint32_t m = pmask(p->placements[i]);
                        if (m == 0 || (m & ~all) || p->placements[i].size != pi->size)
                                return -EINVAL;
                        if (m & acc)
                                pi->disjoint = false;
                        acc |= m;
                        pi->starts |= UINT32_C(1) << p->placements[i].start;
                }
                max_slices = MAX(max_slices, p->slices);
                max_sms = MAX(max_sms, p->multiprocessors);
        }
        *ret_max_slices = max_slices;
        *ret_max_sms = max_sms;
        return 0;
}

static void profset_init(struct profset *ps, const struct mk_fit_gpu *g) {
        ps->profiles = g->profiles;
        ps->n = g->n_profiles;
        ps->units = g->memory_units;
        ps->slices_given = g->slices;
        ps->tables_given = g->tables;
        ps->adq_known = false;
        ps->tab = tables_match(g->tables, g) ? g->tables : NULL;
        memset(ps->ideal_known, 0, sizeof ps->ideal_known);
        if (ps->tab) {
                /* Checked when the tables were built. */
                ps->valid = 0;
                ps->pi = ps->tab->pi;
                ps->max_slices = ps->tab->max_slices;
                ps->max_sms = ps->tab->max_sms;
                return;
        }
        ps->pi = ps->own;
        ps->valid = pinfo_fill(g, ps->own, &ps->max_slices, &ps->max_sms);
}

static struct profset *profset_get(struct profcache *pc, const struct mk_fit_gpu *g) {
        for (size_t i = 0; i < pc->n; i++) {
                struct profset *ps = &pc->sets[i];
                if (ps->profiles == g->profiles && ps->n == g->n_profiles && ps->units == g->memory_units &&
                    ps->slices_given == g->slices && ps->tables_given == g->tables)
                        return ps;
        }
        struct profset *ps = &pc->sets[pc->n < PROFSET_CACHE ? pc->n++ : (pc->next++ % PROFSET_CACHE)];
        profset_init(ps, g);
        return ps;
}

/* One GPU in one call. */
struct gpu_state {
        struct profset *ps;
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
static int gpu_prepare(struct profcache *pc, const struct mk_fit_gpu *g, struct gpu_state *s) {
        if (g->memory_units == 0 || g->memory_units > MK_FIT_MAX_UNITS || g->n_profiles > MK_FIT_MAX_PROFILES ||
            g->n_used > MK_FIT_MAX_INSTANCES || (g->n_profiles > 0 && !g->profiles) || (g->n_used > 0 && !g->used))
                return -EINVAL;
        s->ps = profset_get(pc, g);
        if (s->ps->valid < 0)
                return s->ps->valid;
        s->all = units_mask(g->memory_units);
        s->have_counts = false;
        s->have_cap = s->have_ideal = false;
        unsigned used_slices = 0, units = g->memory_units;
        uint32_t used = 0;
        for (size_t i = 0; i < g->n_used; i++) {
                struct mk_placement pl = g->used[i].placement;
                if (pl.size == 0 || pl.size > units || pl.start > units - pl.size)
                        return -EINVAL;
                used |= units_mask(pl.size) << pl.start;
                used_slices += MIN(g->used[i].slices, MK_FIT_MAX_UNITS);
        }
        s->used = used;
        s->slices = g->slices > 0 ? g->slices : s->ps->max_slices;
        s->free_slices = used_slices >= s->slices ? 0 : s->slices - used_slices;
        s->sms = g->multiprocessors > 0 ? g->multiprocessors : s->ps->max_sms;
        return 0;
}

static void gpu_counts(const struct mk_fit_gpu *g, struct gpu_state *s) {
        if (s->have_counts)
                return;
        memset(s->counts, 0, g->n_profiles * sizeof s->counts[0]);
        for (size_t i = 0; i < g->n_used; i++)
                for (size_t j = 0; j < g->n_profiles; j++)
                        if (g->profiles[j].id == g->used[i].profile_id)
                                s->counts[j]++;
        s->have_counts = true;
}

static unsigned count_of(const struct mk_fit_gpu *g, unsigned id) {
        unsigned c = 0;
        for (size_t i = 0; i < g->n_used; i++)
                c += g->used[i].profile_id == id;
        return c;
}

/* Whether profile j (a limited one) has max_count instances already. */
static bool limit_reached(const struct mk_fit_gpu *g, const struct gpu_state *s, size_t j) {
        return (s->have_counts ? s->counts[j] : count_of(g, g->profiles[j].id)) >= g->profiles[j].max_count;
}

/* M_p: instances of p that still fit in `free`, alone. */
static unsigned profile_room(const struct mk_gi_profile *p, const struct pinfo *pi, unsigned count, uint32_t free,
                             unsigned free_slices) {
        unsigned m = 0;
        if (pi->disjoint) {
                m = popcount32(free_runs(free, pi->size) & pi->starts);
        } else {
                uint32_t taken = 0;
                for (size_t i = 0; i < p->n_placements; i++) {
                        uint32_t pm = pmask(p->placements[i]);
                        if ((pm & ~free) == 0 && (pm & taken) == 0) {
                                m++;
                                taken |= pm;
                        }
                }
        }
        if (m == 0)
                return 0;
        if (p->slices > 0 && m * p->slices > free_slices)
                m = free_slices / p->slices;
        if (p->max_count > 0)
                m = MIN(m, p->max_count > count ? p->max_count - count : 0);
        return m;
}

/* C(free) computed; `counts` NULL means none used. */
static unsigned capacity_compute(const struct mk_fit_gpu *g, const struct profset *ps, const unsigned *counts,
                                 size_t extra, uint32_t free, unsigned free_slices) {
        unsigned c = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct pinfo *pi = &ps->pi[j];
                if (!pi->base)
                        continue;
                unsigned count = (counts ? counts[j] : 0) + (j == extra);
                c += pi->size * profile_room(&g->profiles[j], pi, count, free, free_slices);
        }
        return c;
}

/* C(free). `extra` is the index of a profile that holds one more instance
 * than the GPU's used list says (SIZE_MAX: none). With tables, counts never
 * bind (mk_fit_tables_new checks it), so the lookup is exact. */
static unsigned capacity_slow(const struct mk_fit_gpu *g, struct gpu_state *s, uint32_t free, unsigned free_slices,
                              size_t extra) {
        gpu_counts(g, s);
        return capacity_compute(g, s->ps, s->counts, extra, free, free_slices);
}

static inline unsigned capacity(const struct mk_fit_gpu *g, struct gpu_state *s, uint32_t free, unsigned free_slices,
                                size_t extra) {
        if (s->ps->tab && free_slices <= TAB_SLICES)
                return s->ps->tab->cap[free & 0xffu][free_slices];
        return capacity_slow(g, s, free, free_slices, extra);
}

/* C of n free units from unit 0, counts not considered. */
static unsigned ideal_slow(const struct mk_fit_gpu *g, const struct gpu_state *s, unsigned n, unsigned free_slices) {
        struct profset *ps = s->ps;
        bool cacheable = n <= IDEAL_MAX && free_slices <= IDEAL_MAX;
        if (cacheable && (ps->ideal_known[n] & (1u << free_slices)))
                return ps->ideal[n][free_slices];
        unsigned c = capacity_compute(g, ps, NULL, SIZE_MAX, units_mask(n), free_slices);
        if (cacheable && c <= UINT16_MAX) {
                ps->ideal[n][free_slices] = (uint16_t) c;
                ps->ideal_known[n] |= (uint16_t) (1u << free_slices);
        }
        return c;
}

static inline unsigned ideal_capacity(const struct mk_fit_gpu *g, const struct gpu_state *s, unsigned n,
                                      unsigned free_slices) {
        if (s->ps->tab && free_slices <= TAB_SLICES && n <= TAB_UNITS)
                return s->ps->tab->cap[(1u << n) - 1][free_slices];
        return ideal_slow(g, s, n, free_slices);
}

/* Fragmentation parts of a free mask: C(free) and the ideal, at least C. */
static void frag_parts(const struct mk_fit_gpu *g, struct gpu_state *s, uint32_t free, unsigned free_slices,
                       size_t extra, unsigned *ret_cap, unsigned *ret_ideal) {
        unsigned cap = capacity(g, s, free, free_slices, extra);
        unsigned ideal = ideal_capacity(g, s, popcount32(free & s->all), free_slices);
        *ret_cap = cap;
        *ret_ideal = MAX(ideal, cap);
}

/* C(free) and the ideal (at least C) of a GPU as it is. */
static void gpu_now(const struct mk_fit_gpu *g, struct gpu_state *s, unsigned *ret_cap, unsigned *ret_ideal) {
        uint32_t free = s->all & ~s->used;
        if (!s->have_cap) {
                s->cap = capacity(g, s, free, s->free_slices, SIZE_MAX);
                s->have_cap = true;
        }
        if (!s->have_ideal) {
                s->ideal = MAX(s->cap, ideal_capacity(g, s, popcount32(free), s->free_slices));
                s->have_ideal = true;
        }
        *ret_cap = s->cap;
        *ret_ideal = s->ideal;
}

static unsigned profile_cores(const struct gpu_state *s, const struct mk_gi_profile *p) {
        if (s->sms > 0 && p->multiprocessors > 0)
                return (unsigned) (((uint64_t) p->multiprocessors * 100 + s->sms - 1) / s->sms);
        if (s->slices > 0)
                return (p->slices * 100 + s->slices - 1) / s->slices;
        return 0;
}

/* Starts of the free placements of profile j (bit s: the placement at s). */
static uint32_t free_starts(const struct mk_fit_gpu *g, const struct gpu_state *s, size_t j) {
        const struct mk_gi_profile *p = &g->profiles[j];
        if (p->slices > s->free_slices)
                return 0;
        const struct pinfo *pi = &s->ps->pi[j];
        /* A limit of at least the placement count binds only on instances
         * outside the profile's own placements, which NVML cannot create. */
        if (pi->limited && limit_reached(g, s, j))
                return 0;
        return free_runs(s->all & ~s->used, pi->size) & pi->starts;
}

static size_t placement_index(const struct mk_gi_profile *p, unsigned start) {
        for (size_t i = 0; i < p->n_placements; i++)
                if (p->placements[i].start == start)
                        return i;
        return 0; /* not reached: starts come from the placements */
}

static uint64_t free_placements(const struct mk_fit_gpu *g, const struct gpu_state *s, size_t j) {
        const struct mk_gi_profile *p = &g->profiles[j];
        uint32_t fs = free_starts(g, s, j);
        uint64_t r = 0;
        for (size_t i = 0; i < p->n_placements && i < 64; i++)
                if (fs & (UINT32_C(1) << p->placements[i].start))
                        r |= UINT64_C(1) << i;
        return r;
}

/* --- public helpers ------------------------------------------------------------------ */

uint32_t mk_fit_used_mask(const struct mk_fit_gpu *g) {
        uint32_t m = 0;
        if (g->n_used > 0 && !g->used)
                return 0;
        for (size_t i = 0; i < g->n_used; i++)
                m |= pmask(g->used[i].placement);
        return m;
}

uint64_t mk_fit_free_placements(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) {
        struct profcache pc;
        struct gpu_state s;
        pc.n = pc.next = 0;
        if (g->unavailable || gpu_prepare(&pc, g, &s) < 0)
                return 0;
        /* `p` may be a copy rather than a pointer into g->profiles: match by id. */
        for (size_t j = 0; j < g->n_profiles; j++)
                if (&g->profiles[j] == p)
                        return free_placements(g, &s, j);
        for (size_t j = 0; j < g->n_profiles; j++)
                if (g->profiles[j].id == p->id)
                        return free_placements(g, &s, j);
        return 0;
}

double mk_fit_gpu_fragmentation(const struct mk_fit_gpu *g) {
        struct profcache pc;
        struct gpu_state s;
        pc.n = pc.next = 0;
        if (g->unavailable || gpu_prepare(&pc, g, &s) < 0)
                return 0;
        unsigned cap, ideal;
        frag_parts(g, &s, s.all & ~s.used, s.free_slices, SIZE_MAX, &cap, &ideal);
        return ideal == 0 ? 0 : 1.0 - (double) cap / ideal;
}

unsigned mk_fit_profile_cores(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) {
        unsigned max_slices = 0, max_sms = 0;
        for (size_t j = 0; j < g->n_profiles && g->profiles; j++) {
                max_slices = MAX(max_slices, g->profiles[j].slices);
                max_sms = MAX(max_sms, g->profiles[j].multiprocessors);
        }
        struct gpu_state s = {
                .slices = g->slices > 0 ? g->slices : max_slices,
                .sms = g->multiprocessors > 0 ? g->multiprocessors : max_sms,
        };
        return profile_cores(&s, p);
}

int mk_fit_gpu_validate(const struct mk_fit_gpu *g, struct mk_error *e) {
        if (g->memory_units == 0 || g->memory_units > MK_FIT_MAX_UNITS)
                return mk_error_set(e, -EINVAL, "memory units %u out of range 1..%u", g->memory_units,
                                    MK_FIT_MAX_UNITS);
        if (g->n_profiles > MK_FIT_MAX_PROFILES)
                return mk_error_set(e, -EINVAL, "%zu profiles, more than %u", g->n_profiles, MK_FIT_MAX_PROFILES);
        if (g->n_used > MK_FIT_MAX_INSTANCES)
                return mk_error_set(e, -EINVAL, "%zu instances, more than %u", g->n_used, MK_FIT_MAX_INSTANCES);
        if ((g->n_profiles > 0 && !g->profiles) || (g->n_used > 0 && !g->used))
                return mk_error_set(e, -EINVAL, "missing profile or instance array");
        if (g->slices > MK_FIT_MAX_UNITS)
                return mk_error_set(e, -EINVAL, "compute slices %u out of range 0..%u", g->slices, MK_FIT_MAX_UNITS);

        uint32_t all = units_mask(g->memory_units);
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                const char *name = p->named ? p->name : "(unnamed)";
                if (p->n_placements > 64)
                        return mk_error_set(e, -EINVAL, "profile '%s' (id %u): %zu placements, more than 64", name,
                                            p->id, p->n_placements);
                if (p->n_placements > 0 && !p->placements)
                        return mk_error_set(e, -EINVAL, "profile '%s' (id %u): missing placements", name, p->id);
                if (g->slices > 0 && p->slices > g->slices)
                        return mk_error_set(e, -EINVAL, "profile '%s' (id %u): %u compute slices on a GPU of %u",
                                            name, p->id, p->slices, g->slices);
                for (size_t i = 0; i < p->n_placements; i++) {
                        struct mk_placement q = p->placements[i];
                        uint32_t m = pmask(q);
                        if (m == 0 || (m & ~all))
                                return mk_error_set(e, -EINVAL,
                                                    "profile '%s' (id %u): placement %u:%u outside the GPU's %u memory units",
                                                    name, p->id, q.start, q.size, g->memory_units);
                        if (q.size != p->placements[0].size)
                                return mk_error_set(e, -EINVAL,
                                                    "profile '%s' (id %u): placements of different sizes (%u and %u)",
                                                    name, p->id, p->placements[0].size, q.size);
                }
                for (size_t k = 0; k < j; k++)
                        if (g->profiles[k].id == p->id)
                                return mk_error_set(e, -EINVAL, "profile id %u listed twice", p->id);
        }

        uint32_t seen = 0;
        unsigned slices = 0;
        for (size_t i = 0; i < g->n_used; i++) {
                struct mk_placement q = g->used[i].placement;
                uint32_t m = pmask(q);
                if (m == 0 || (m & ~all))
                        return mk_error_set(e, -EINVAL, "instance %zu: placement %u:%u outside the GPU's %u memory units",
                                            i, q.start, q.size, g->memory_units);
                if (m & seen)
                        return mk_error_set(e, -EINVAL, "instance %zu: placement %u:%u overlaps another instance", i,
                                            q.start, q.size);
                seen |= m;
                if (g->used[i].slices > MK_FIT_MAX_UNITS)
                        return mk_error_set(e, -EINVAL, "instance %zu: %u compute slices", i, g->used[i].slices);
                slices += g->used[i].slices;
        }
        if (g->slices > 0 && slices > g->slices)
                return mk_error_set(e, -EINVAL, "instances hold %u compute slices of %u", slices, g->slices);
        return 0;
}

int mk_fit_tables_new(const struct mk_fit_gpu *g, struct mk_fit_tables **ret) {
        struct mk_fit_gpu empty = *g;
        empty.used = NULL;
        empty.n_used = 0;
        empty.tables = NULL;
        if (mk_fit_gpu_validate(&empty, NULL) < 0)
                return -EINVAL;
        size_t n_best = g->n_profiles <= MK_FIT_MAX_PROFILES ? best_index(g->n_profiles, 0, 0) : 0;
        struct mk_fit_tables *t = calloc(1, sizeof *t + n_best);
        if (!t)
                return -ENOMEM;
        t->profiles = g->profiles;
        t->n_profiles = g->n_profiles;
        t->memory_units = g->memory_units;
        t->slices = g->slices;
        int r = pinfo_fill(&empty, t->pi, &t->max_slices, &t->max_sms);
        unsigned slices = g->slices > 0 ? g->slices : t->max_slices;
        if (r >= 0 && (g->memory_units > TAB_UNITS || slices > TAB_SLICES))
                r = -EOPNOTSUPP;
        /* A lookup ignores instance counts: exact only while a profile's
         * limit can never bind before its placements run out. */
        for (size_t j = 0; r >= 0 && j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (t->pi[j].base && (!t->pi[j].disjoint || (p->max_count > 0 && p->max_count < p->n_placements)))
                        r = -EOPNOTSUPP;
        }
        if (r < 0) {
                free(t);
                return r;
        }
        struct profset ps = {.pi = t->pi};
        uint32_t all = units_mask(g->memory_units);
        for (uint32_t f = 0; f <= all; f++)
                for (unsigned fs = 0; fs <= TAB_SLICES; fs++) {
                        unsigned c = capacity_compute(&empty, &ps, NULL, SIZE_MAX, f, MIN(fs, slices));
                        if (c > UINT16_MAX) {
                                free(t);
                                return -EOPNOTSUPP;
                        }
                        t->cap[f][fs] = (uint16_t) c;
                }
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                uint32_t size_mask = units_mask(t->pi[j].size);
                for (uint32_t f = 0; f <= all; f++)
                        for (unsigned fs = 0; fs <= TAB_SLICES; fs++) {
                                uint8_t b = 0;
                                unsigned best_loss = 0;
                                uint32_t starts = p->slices <= fs ? free_runs(f, t->pi[j].size) & t->pi[j].starts : 0;
                                for (; starts; starts &= starts - 1) {
                                        unsigned start = (unsigned) __builtin_ctz(starts);
                                        unsigned before = t->cap[f][fs], after = t->cap[f & ~(size_mask << start)][fs - p->slices];
                                        unsigned loss = before > after ? before - after : 0;
                                        if (b == 0 || loss < best_loss || (loss == best_loss && start + 1 > b)) {
                                                b = (uint8_t) (start + 1);
                                                best_loss = loss;
                                        }
                                }
                                t->best[best_index(j, f, fs)] = b;
                        }
        }
        *ret = t;
        return 0;
}

struct mk_fit_tables *mk_fit_tables_free(struct mk_fit_tables *t) {
        free(t);
        return NULL;
}

/* --- the fit ---------------------------------------------------------------------------- */

/* The best instance of the request on one GPU. */
struct cand {
        unsigned gpu;
        size_t profile;                 /* index into that GPU's profiles */
        unsigned start;                 /* of the placement, in memory units */
        uint64_t memory_mib;            /* of the profile: smaller first */
        unsigned slices;                /* of the profile: fewer first */
        unsigned loss;                  /* C(before) - C(after) */
        unsigned used_units;            /* before */
};

/* Negative when `a` goes before `b`. */
static int cand_compare(const struct cand *a, const struct cand *b, enum mk_fit_policy gpu_policy) {
        if (a->memory_mib != b->memory_mib)
                return a->memory_mib < b->memory_mib ? -1 : 1;
        if (a->slices != b->slices)
                return a->slices < b->slices ? -1 : 1;
        if (gpu_policy == MK_FIT_SPREAD && a->used_units != b->used_units)
                return a->used_units < b->used_units ? -1 : 1;
        if (a->loss != b->loss)
                return a->loss < b->loss ? -1 : 1;
        if (gpu_policy == MK_FIT_BINPACK && a->used_units != b->used_units)
                return a->used_units > b->used_units ? -1 : 1;
        return a->gpu < b->gpu ? -1 : a->gpu > b->gpu;
}

struct needs {
        bool whole;
        uint64_t mem_mib;               /* when not whole; 0: from mem_percent */
        unsigned mem_percent;
        unsigned cores;
        const char *variant;
};

/* Smaller first: memory, then compute slices. */
static int profile_rank_compare(const struct mk_gi_profile *a, const struct mk_gi_profile *b) {
        if (a->memory_mib != b->memory_mib)
                return a->memory_mib < b->memory_mib ? -1 : 1;
        return a->slices < b->slices ? -1 : a->slices > b->slices;
}

/* The profiles adequate for the request on GPU `g`, smallest first, in
 * ps->order; cached in the profile set for GPUs with the same memory, SMs
 * and slices. */
static void adequate_profiles(const struct mk_fit_gpu *g, const struct gpu_state *s, const struct needs *n) {
        struct profset *ps = s->ps;
        if (ps->adq_known && ps->adq_mem_mib == g->memory_mib && ps->adq_sms == s->sms && ps->adq_slices == s->slices)
                return;
        uint64_t need = n->mem_mib;
        if (!n->whole && need == 0)
                need = (g->memory_mib * n->mem_percent + 99) / 100; /* caller checked the range */
        ps->n_order = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (p->n_placements == 0 || !variant_matches(p, n->variant))
                        continue;
                if (n->whole ? ps->pi[j].size != g->memory_units : need == 0 || p->memory_mib < need)
                        continue;
                if (n->cores > 0 && profile_cores(s, p) < n->cores)
                        continue;
                size_t k = ps->n_order++;
                while (k > 0 && profile_rank_compare(&g->profiles[ps->order[k - 1]], p) > 0) {
                        ps->order[k] = ps->order[k - 1];
                        k--;
                }
                ps->order[k] = (uint8_t) j;
        }
        ps->adq_known = true;
        ps->adq_mem_mib = g->memory_mib;
        ps->adq_sms = s->sms;
        ps->adq_slices = s->slices;
}

/* The best candidate on GPU `gi`: the smallest adequate profile with a free
 * placement, at the placement losing least (ties: higher start); false
 * when the request has no free placement there. Computes s->cap on the way. */
static bool gpu_best(const struct mk_fit_gpu *g, struct gpu_state *s, unsigned gi, const struct needs *n,
                     struct cand *ret) {
        adequate_profiles(g, s, n);
        const struct profset *ps = s->ps;
        uint32_t free = s->all & ~s->used;
        size_t best_j = SIZE_MAX;
        unsigned best_loss = 0, best_start = 0;
        for (size_t k = 0; ps->tab && k < ps->n_order; k++) {
                size_t j = ps->order[k];
                const struct mk_gi_profile *p = &g->profiles[j];
                if (best_j != SIZE_MAX && profile_rank_compare(p, &g->profiles[best_j]) > 0)
                        break;
                if (p->slices > s->free_slices || (ps->pi[j].limited && limit_reached(g, s, j)))
                        continue;
                uint8_t b = ps->tab->best[best_index(j, free, s->free_slices)];
                if (b == 0)
                        continue;
                unsigned start = b - 1u;
                uint32_t m = units_mask(ps->pi[j].size) << start;
                unsigned before = ps->tab->cap[free][s->free_slices];
                unsigned after = ps->tab->cap[free & ~m][s->free_slices - p->slices];
                unsigned loss = before > after ? before - after : 0;
                s->cap = before;
                s->have_cap = true;
                if (best_j == SIZE_MAX || loss < best_loss || (loss == best_loss && start > best_start)) {
                        best_j = j;
                        best_loss = loss;
                        best_start = start;
                }
        }
        for (size_t k = 0; !ps->tab && k < ps->n_order; k++) {
                size_t j = ps->order[k];
                const struct mk_gi_profile *p = &g->profiles[j];
                if (best_j != SIZE_MAX && profile_rank_compare(p, &g->profiles[best_j]) > 0)
                        break;
                uint32_t fs = free_starts(g, s, j);
                if (!fs)
                        continue;
                if (!s->have_cap) {
                        s->cap = capacity(g, s, free, s->free_slices, SIZE_MAX);
                        s->have_cap = true;
                }
                uint32_t size_mask = units_mask(ps->pi[j].size);
                for (; fs; fs &= fs - 1) {
                        unsigned start = (unsigned) __builtin_ctz(fs);
                        unsigned after = capacity(g, s, free & ~(size_mask << start), s->free_slices - p->slices, j);
                        unsigned loss = s->cap > after ? s->cap - after : 0;
                        if (best_j == SIZE_MAX || loss < best_loss || (loss == best_loss && start > best_start)) {
                                best_j = j;
                                best_loss = loss;
                                best_start = start;
                        }
                }
        }
        if (best_j == SIZE_MAX)
                return false;
        const struct mk_gi_profile *p = &g->profiles[best_j];
        *ret = (struct cand) {
                .gpu = gi,
                .profile = best_j,
                .start = best_start,
                .memory_mib = p->memory_mib,
                .slices = p->slices,
                .loss = best_loss,
                .used_units = popcount32(s->used),
        };
        return true;
}

static double clamp01(double x) {
        return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* The node after an allocation, in integers (so both paths give the same
 * doubles): units, C and ideal sums over available GPUs, the chosen
 * placements' losses and their GPUs' empty capacity. */
struct sums {
        unsigned total_units, used_units, cap_sum, ideal_sum, loss, empty_cap;
};

static int no_room(const struct mk_fit_node *node, const struct mk_fit_request *req, const struct needs *n,
                   size_t n_cands, struct mk_error *e) {
        char what[96];
        if (n->whole)
                (void) snprintf(what, sizeof what, "a whole GPU");
        else if (req->mem_mib > 0)
                (void) snprintf(what, sizeof what, "%" PRIu64 " MiB", req->mem_mib);
        else
                (void) snprintf(what, sizeof what, "%u%% of GPU memory", req->mem_percent);
        return mk_error_set(e, -ENOSPC, "%zu of %zu GPUs have a free MIG placement for %s%s%s%s, %u needed", n_cands,
                            node->n_gpus, what, req->cores_percent ? " with cores" : "",
                            req->variant && *req->variant ? " variant " : "",
                            req->variant && *req->variant ? req->variant : "", req->gpus);
}

/* Puts the request's GPUs, the first `gpus` candidates in order, first. */
static inline void cands_select(struct cand *cands, size_t n_cands, unsigned gpus, enum mk_fit_policy gpu_policy) {
        for (size_t k = 0; k < gpus; k++) {
                size_t bi = k;
                for (size_t i = k + 1; i < n_cands; i++)
                        if (cand_compare(&cands[i], &cands[bi], gpu_policy) < 0)
                                bi = i;
                struct cand t = cands[k];
                cands[k] = cands[bi];
                cands[bi] = t;
        }
}

/* The fit from the GPU descriptions. */
static int fit_read(const struct mk_fit_node *node, const struct mk_fit_request *req, const struct needs *n,
                    enum mk_fit_policy gpu_policy, struct cand *cands, struct sums *ret, struct mk_error *e) {
        struct profcache pc;
        pc.n = pc.next = 0;
        struct gpu_state st[MK_FIT_MAX_NODE_GPUS];
        size_t n_cands = 0;
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct gpu_state *s = &st[gi];
                if (g->unavailable)
                        continue;
                if (gpu_prepare(&pc, g, s) < 0)
                        return mk_error_set(e, -EINVAL, "GPU %zu: malformed description", gi);
                if (!n->whole && n->mem_mib == 0 && g->memory_mib > UINT64_MAX / 100)
                        return mk_error_set(e, -EINVAL, "GPU %zu: memory out of range", gi);
                if (gpu_best(g, s, (unsigned) gi, n, &cands[n_cands]))
                        n_cands++;
        }
        if (n_cands < req->gpus)
                return no_room(node, req, n, n_cands, e);
        cands_select(cands, n_cands, req->gpus, gpu_policy);

        /* The node after the allocation: utilisation, fragmentation, and the
         * share of an empty GPU's capacity the allocation destroys. */
        struct sums sm = {};
        uint64_t chosen = 0;
        for (size_t k = 0; k < req->gpus; k++) {
                const struct cand *c = &cands[k];
                const struct mk_fit_gpu *g = &node->gpus[c->gpu];
                const struct mk_gi_profile *p = &g->profiles[c->profile];
                struct gpu_state *s = &st[c->gpu];
                chosen |= UINT64_C(1) << c->gpu;
                uint32_t m = units_mask(s->ps->pi[c->profile].size) << c->start;
                unsigned cap, ideal;
                frag_parts(g, s, s->all & ~(s->used | m), s->free_slices - p->slices, c->profile, &cap, &ideal);
                sm.cap_sum += cap;
                sm.ideal_sum += ideal;
                sm.used_units += popcount32(s->used | m);
                sm.loss += c->loss;
                sm.empty_cap += ideal_capacity(g, s, g->memory_units, s->slices);
        }
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct gpu_state *s = &st[gi];
                if (g->unavailable)
                        continue;
                sm.total_units += g->memory_units;
                if (chosen & (UINT64_C(1) << gi))
                        continue;
                uint32_t free = s->all & ~s->used;
                unsigned cap = s->have_cap ? s->cap : capacity(g, s, free, s->free_slices, SIZE_MAX);
                sm.cap_sum += cap;
                sm.ideal_sum += MAX(cap, ideal_capacity(g, s, popcount32(free), s->free_slices));
                sm.used_units += popcount32(s->used);
        }
        *ret = sm;
        return 0;
}

/* The fit from the node cache: the same choices and sums as fit_read()
 * (one GPU description, tables), from the cached per-GPU state. */
static int fit_cached(const struct mk_fit_node *node, const struct mk_fit_node_cache *c,
                      const struct mk_fit_request *req, const struct needs *n, enum mk_fit_policy gpu_policy,
                      struct cand *cands, struct sums *ret, struct mk_error *e) {
        const struct mk_fit_gpu *g0 = &node->gpus[c->first];
        const struct mk_fit_tables *tab = g0->tables;
        const struct mk_gi_profile *profiles = g0->profiles;
        if (!n->whole && n->mem_mib == 0 && g0->memory_mib > UINT64_MAX / 100)
                return mk_error_set(e, -EINVAL, "GPU %zu: memory out of range", c->first);

        /* The adequate profiles, smallest first (adequate_profiles()'s order). */
        struct gpu_state s0 = {
                .slices = g0->slices > 0 ? g0->slices : tab->max_slices,
                .sms = g0->multiprocessors > 0 ? g0->multiprocessors : tab->max_sms,
        };
        uint64_t need = n->mem_mib;
        if (!n->whole && need == 0)
                need = (g0->memory_mib * n->mem_percent + 99) / 100;
        uint8_t order[MK_FIT_MAX_PROFILES];
        size_t n_order = 0;
        uint64_t adequate = 0;
        for (size_t k = 0; k < g0->n_profiles; k++) {
                size_t j = c->rank[k];
                const struct mk_gi_profile *p = &profiles[j];
                if (!(c->hostable & (UINT64_C(1) << j)) ||
                    !(n->variant && *n->variant ? variant_matches(p, n->variant) : tab->pi[j].base))
                        continue;
                if (n->whole ? tab->pi[j].size != g0->memory_units : need == 0 || p->memory_mib < need)
                        continue;
                if (n->cores > 0 && profile_cores(&s0, p) < n->cores)
                        continue;
                order[n_order++] = (uint8_t) j;
                adequate |= UINT64_C(1) << j;
        }

        uint32_t all = units_mask(g0->memory_units);
        size_t n_cands = 0;
        if (req->gpus == 1 && n_order > 0 &&
            (n_order == 1 || profile_rank_compare(&profiles[order[1]], &profiles[order[0]]) != 0)) {
                /* Every GPU that can host the smallest adequate profile takes
                 * it, and no other GPU comes before them: the winner among
                 * them was found when the cache was made. */
                size_t j = order[0];
                const struct mk_fit_node_cache_best *nb = &c->best[gpu_policy][j];
                cands[0] = (struct cand) {
                        .gpu = nb->gpu,
                        .profile = j,
                        .start = nb->start,
                        .memory_mib = profiles[j].memory_mib,
                        .slices = profiles[j].slices,
                        .loss = nb->loss,
                        .used_units = c->gpu[nb->gpu].used_units,
                };
                n_cands = 1;
                adequate = 0; /* skip the scan */
        }
        for (size_t gi = 0; adequate && gi < node->n_gpus; gi++) {
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                uint64_t avail = cg->hostable & adequate;
                if (!avail)
                        continue;
                uint32_t free = all & ~cg->used;
                size_t best_j = SIZE_MAX;
                unsigned best_loss = 0, best_start = 0;
                for (size_t k = 0; k < n_order; k++) {
                        size_t j = order[k];
                        if (!(avail & (UINT64_C(1) << j)))
                                continue;
                        const struct mk_gi_profile *p = &profiles[j];
                        if (best_j != SIZE_MAX && profile_rank_compare(p, &profiles[best_j]) > 0)
                                break;
                        unsigned start = tab->best[best_index(j, free, cg->free_slices)] - 1u;
                        uint32_t m = units_mask(tab->pi[j].size) << start;
                        unsigned after = tab->cap[free & ~m][cg->free_slices - p->slices];
                        unsigned loss = cg->cap > after ? cg->cap - after : 0;
                        if (best_j == SIZE_MAX || loss < best_loss || (loss == best_loss && start > best_start)) {
                                best_j = j;
                                best_loss = loss;
                                best_start = start;
                        }
                }
                const struct mk_gi_profile *p = &profiles[best_j];
                cands[n_cands++] = (struct cand) {
                        .gpu = (unsigned) gi,
                        .profile = best_j,
                        .start = best_start,
                        .memory_mib = p->memory_mib,
                        .slices = p->slices,
                        .loss = best_loss,
                        .used_units = cg->used_units,
                };
        }
        if (n_cands < req->gpus)
                return no_room(node, req, n, n_cands, e);
        cands_select(cands, n_cands, req->gpus, gpu_policy);

        struct sums sm = {
                .total_units = c->total_units,
                .used_units = c->used_units,
                .cap_sum = c->cap_sum,
                .ideal_sum = c->ideal_sum,
        };
        for (size_t k = 0; k < req->gpus; k++) {
                const struct cand *cd = &cands[k];
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[cd->gpu];
                const struct mk_gi_profile *p = &profiles[cd->profile];
                uint32_t used = cg->used | (units_mask(tab->pi[cd->profile].size) << cd->start);
                uint32_t free = all & ~used;
                unsigned fs = cg->free_slices - p->slices;
                unsigned cap = tab->cap[free][fs];
                unsigned ideal = MAX(cap, (unsigned) tab->cap[units_mask(popcount32(free))][fs]);
                sm.cap_sum = sm.cap_sum - cg->cap + cap;
                sm.ideal_sum = sm.ideal_sum - cg->ideal + ideal;
                sm.used_units = sm.used_units - cg->used_units + popcount32(used);
                sm.loss += cd->loss;
                sm.empty_cap += c->empty_cap;
        }
        *ret = sm;
        return 0;
}

int mk_fit_node_cache_update(const struct mk_fit_node *node, struct mk_fit_node_cache *c) {
        c->usable = false;
        c->gpus = node->gpus;
        c->n_gpus = node->n_gpus;
        if (node->n_gpus > MK_FIT_MAX_NODE_GPUS || (node->n_gpus > 0 && !node->gpus))
                return -EINVAL;
        const struct mk_fit_gpu *g0 = NULL;
        struct profcache pc;
        pc.n = pc.next = 0;
        uint64_t hostable = 0;
        unsigned total_units = 0, used_units = 0, cap_sum = 0, ideal_sum = 0;
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                *cg = (struct mk_fit_node_cache_gpu) {};
                if (g->unavailable)
                        continue;
                struct gpu_state s;
                if (gpu_prepare(&pc, g, &s) < 0)
                        return -EINVAL;
                if (!g0) {
                        g0 = g;
                        c->first = gi;
                        if (!s.ps->tab)
                                return -EOPNOTSUPP;
                } else if (g->profiles != g0->profiles || g->n_profiles != g0->n_profiles ||
                           g->tables != g0->tables || g->memory_units != g0->memory_units ||
                           g->slices != g0->slices || g->multiprocessors != g0->multiprocessors ||
                           g->memory_mib != g0->memory_mib)
                        return -EOPNOTSUPP;
                const struct mk_fit_tables *tab = s.ps->tab;
                uint32_t free = s.all & ~s.used;
                unsigned cap, ideal;
                gpu_now(g, &s, &cap, &ideal);
                for (size_t j = 0; j < g->n_profiles; j++) {
                        const struct mk_gi_profile *p = &g->profiles[j];
                        if (p->slices > s.free_slices || (s.ps->pi[j].limited && limit_reached(g, &s, j)))
                                continue;
                        if (tab->best[best_index(j, free, s.free_slices)] != 0)
                                cg->hostable |= UINT64_C(1) << j;
                }
                cg->used = s.used;
                cg->cap = (uint16_t) cap;
                cg->ideal = (uint16_t) ideal;
                cg->free_slices = (uint8_t) s.free_slices;
                cg->used_units = (uint8_t) popcount32(s.used);
                cg->available = true;
                hostable |= cg->hostable;
                total_units += g->memory_units;
                used_units += popcount32(s.used);
                cap_sum += cap;
                ideal_sum += ideal;
        }
        if (!g0)
                return -EOPNOTSUPP;
        /* Smallest first, stable: adequate_profiles()'s insertion order. */
        size_t n = 0;
        for (size_t j = 0; j < g0->n_profiles; j++) {
                size_t k = n++;
                while (k > 0 && profile_rank_compare(&g0->profiles[c->rank[k - 1]], &g0->profiles[j]) > 0) {
                        c->rank[k] = c->rank[k - 1];
                        k--;
                }
                c->rank[k] = (uint8_t) j;
        }
        /* Per profile and GPU policy, the GPU a one-GPU request of that
         * profile gets when it is the smallest adequate one (fit_cached()). */
        const struct mk_fit_tables *tab = g0->tables;
        uint32_t all = units_mask(g0->memory_units);
        for (size_t j = 0; j < g0->n_profiles; j++) {
                if (!(hostable & (UINT64_C(1) << j)))
                        continue;
                const struct mk_gi_profile *p = &g0->profiles[j];
                for (int pol = 0; pol < _MK_FIT_POLICY_MAX; pol++) {
                        struct cand best = {.gpu = UINT_MAX};
                        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                                if (!(cg->hostable & (UINT64_C(1) << j)))
                                        continue;
                                uint32_t free = all & ~cg->used;
                                unsigned start = tab->best[best_index(j, free, cg->free_slices)] - 1u;
                                uint32_t m = units_mask(tab->pi[j].size) << start;
                                unsigned after = tab->cap[free & ~m][cg->free_slices - p->slices];
                                struct cand cd = {
                                        .gpu = (unsigned) gi,
                                        .profile = j,
                                        .start = start,
                                        .memory_mib = p->memory_mib,
                                        .slices = p->slices,
                                        .loss = cg->cap > after ? cg->cap - after : 0,
                                        .used_units = cg->used_units,
                                };
                                if (best.gpu == UINT_MAX || cand_compare(&cd, &best, (enum mk_fit_policy) pol) < 0)
                                        best = cd;
                        }
                        c->best[pol][j] = (struct mk_fit_node_cache_best) {
                                .gpu = (uint8_t) best.gpu,
                                .start = (uint8_t) best.start,
                                .loss = (uint16_t) best.loss,
                        };
                }
        }
        c->hostable = hostable;
        c->total_units = total_units;
        c->used_units = used_units;
        c->cap_sum = cap_sum;
        c->ideal_sum = ideal_sum;
        c->empty_cap = g0->tables->cap[units_mask(g0->memory_units)][g0->slices > 0 ? g0->slices : g0->tables->max_slices];
        c->usable = true;
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
        const struct mk_fit_node_resources *r = node->resources;
        if (r) {
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
                        return mk_error_set(e, -ENOSPC,
                                            "Insufficient memory: %" PRIu64 " bytes requested, %" PRIu64 " free",
                                            req->memory_bytes, mem_free);
                double cu = r->cpu_allocatable_milli > 0
                                    ? (double) (r->cpu_requested_milli + req->cpu_milli) / r->cpu_allocatable_milli
                                    : 0;
                double mu = r->memory_allocatable_bytes > 0 ? (double) (r->memory_requested_bytes + req->memory_bytes) /
                                                                      r->memory_allocatable_bytes
                                                            : 0;
                res_util = clamp01((cu + mu) / 2);
        }

        struct needs n = {
                .whole = req->mem_mib == 0 && (req->mem_percent == 0 || req->mem_percent == 100),
                .mem_mib = req->mem_mib,
                .mem_percent = req->mem_percent,
                .cores = req->cores_percent,
                .variant = req->variant,
        };
        struct cand cands[MK_FIT_MAX_NODE_GPUS];
        struct sums sm = {};
        const struct mk_fit_node_cache *c = node->cache;
        int q;
        if (c && c->usable && c->gpus == node->gpus && c->n_gpus == node->n_gpus)
                q = fit_cached(node, c, req, &n, gpu_policy, cands, &sm, e);
        else
                q = fit_read(node, req, &n, gpu_policy, cands, &sm, e);
        if (q < 0)
                return q;

        double util = sm.total_units > 0 ? (double) sm.used_units / sm.total_units : 0;
        double frag = sm.ideal_sum > 0 ? 1.0 - (double) sm.cap_sum / sm.ideal_sum : 0;
        double keep = sm.empty_cap > 0 ? 1.0 - (double) sm.loss / sm.empty_cap : 1;
        double w_util = node_policy == MK_FIT_BINPACK ? W_UTIL_BINPACK : W_UTIL_SPREAD, w_res = 0;
        double w_keep = 1.0 - w_util - W_FRAG;
        if (r) {
                w_res = w_util / 2;
                w_util -= w_res;
        }
        double score;
        if (node_policy == MK_FIT_BINPACK)
                score = w_keep * keep + w_util * util + W_FRAG * (1 - frag) + w_res * res_util;
        else
                score = w_keep * keep + w_util * (1 - util) + W_FRAG * (1 - frag) + w_res * (1 - res_util);
        for (size_t k = 0; k < req->gpus; k++) {
                const struct mk_gi_profile *p = &node->gpus[cands[k].gpu].profiles[cands[k].profile];
                ret->choices[k] = (struct mk_fit_choice) {
                        .gpu = cands[k].gpu,
                        .profile = p,
                        .placement = p->placements[placement_index(p, cands[k].start)],
                };
        }
        ret->n_choices = req->gpus;
        ret->score = 100.0 * clamp01(score);
        ret->fragmentation = clamp01(frag);
        return 0;
}
