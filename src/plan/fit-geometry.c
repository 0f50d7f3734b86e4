/* Geometry of one GPU for plan/fit (fit-geometry.h): profile information,
 * the capacity value C and its tables, one GPU's state in a call, and the
 * public per-GPU helpers of fit.h (free placements, fragmentation,
 * validation). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "plan/fit-geometry.h"
#include "plan/fit-score.h"

static unsigned profile_units(const struct mk_gi_profile *p) {
        return p->n_placements > 0 ? p->placements[0].size : 0;
}

static bool profile_is_base(const struct mk_gi_profile *p) {
        return p->named && p->pname.n_attrs == 0;
}

/* Whether profile `p` carries exactly the attribute suffix `v` ("+me",
 * "+me.all", "-me", "+a,b"); NULL or "" asks for none. */
bool fit_variant_matches(const struct mk_gi_profile *p, const char *v) {
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

int fit_pinfo_fill(const struct mk_fit_gpu *g, struct fit_pinfo *pis, unsigned *ret_max_slices, unsigned *ret_max_sms) {
        uint32_t all = fit_units_mask(g->memory_units);
        unsigned max_slices = 0, max_sms = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                struct fit_pinfo *pi = &pis[j];
                *pi = (struct fit_pinfo) {};
                if (p->n_placements > 64 || (p->n_placements > 0 && !p->placements))
                        return -EINVAL;
                pi->size = profile_units(p);
                pi->base = profile_is_base(p);
                pi->disjoint = true;
                pi->limited = p->max_count > 0 && p->max_count < p->n_placements;
                uint32_t acc = 0;
                for (size_t i = 0; i < p->n_placements; i++) {
                        uint32_t m = fit_pmask(p->placements[i]);
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

static void profset_init(struct fit_profset *ps, const struct mk_fit_gpu *g) {
        ps->profiles = g->profiles;
        ps->n = g->n_profiles;
        ps->units = g->memory_units;
        ps->slices_given = g->slices;
        ps->tables_given = g->tables;
        ps->adq_known = false;
        ps->profiles_only = false;
        ps->tab = fit_tables_match(g->tables, g) ? g->tables : NULL;
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
        ps->valid = fit_pinfo_fill(g, ps->own, &ps->max_slices, &ps->max_sms);
}

static struct fit_profset *profset_get(struct fit_profcache *pc, const struct mk_fit_gpu *g) {
        for (size_t i = 0; i < pc->n; i++) {
                struct fit_profset *ps = &pc->sets[i];
                if (ps->profiles == g->profiles && ps->n == g->n_profiles && ps->units == g->memory_units &&
                    ps->slices_given == g->slices && ps->tables_given == g->tables)
                        return ps;
        }
        struct fit_profset *ps = &pc->sets[pc->n < FIT_PROFSET_CACHE ? pc->n++ : (pc->next++ % FIT_PROFSET_CACHE)];
        profset_init(ps, g);
        return ps;
}

/* Reads one GPU into `s`; -EINVAL when it cannot be trusted enough to use. */
int fit_gpu_prepare(struct fit_profcache *pc, const struct mk_fit_gpu *g, struct fit_gpu_state *s) {
        if (g->memory_units == 0 || g->memory_units > MK_FIT_MAX_UNITS || g->n_profiles > MK_FIT_MAX_PROFILES ||
            g->n_used > MK_FIT_MAX_INSTANCES || (g->n_profiles > 0 && !g->profiles) || (g->n_used > 0 && !g->used))
                return -EINVAL;
        s->ps = profset_get(pc, g);
        if (s->ps->valid < 0)
                return s->ps->valid;
        s->all = fit_units_mask(g->memory_units);
        s->have_counts = false;
        s->have_cap = s->have_ideal = false;
        unsigned used_slices = 0, units = g->memory_units;
        uint32_t used = 0;
        for (size_t i = 0; i < g->n_used; i++) {
                struct mk_placement pl = g->used[i].placement;
                if (pl.size == 0 || pl.size > units || pl.start > units - pl.size)
                        return -EINVAL;
                used |= fit_units_mask(pl.size) << pl.start;
                used_slices += MIN(g->used[i].slices, MK_FIT_MAX_UNITS);
        }
        s->used = used;
        s->slices = g->slices > 0 ? g->slices : s->ps->max_slices;
        s->free_slices = used_slices >= s->slices ? 0 : s->slices - used_slices;
        s->sms = g->multiprocessors > 0 ? g->multiprocessors : s->ps->max_sms;
        return 0;
}

static void gpu_counts(const struct mk_fit_gpu *g, struct fit_gpu_state *s) {
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
bool fit_limit_reached(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, size_t j) {
        return (s->have_counts ? s->counts[j] : count_of(g, g->profiles[j].id)) >= g->profiles[j].max_count;
}

/* M_p: instances of p that still fit in `free`, alone. */
static unsigned profile_room(const struct mk_gi_profile *p, const struct fit_pinfo *pi, unsigned count, uint32_t free,
                             unsigned free_slices) {
        unsigned m = 0;
        if (pi->disjoint) {
                m = fit_popcount32(fit_free_runs(free, pi->size) & pi->starts);
        } else {
                uint32_t taken = 0;
                for (size_t i = 0; i < p->n_placements; i++) {
                        uint32_t pm = fit_pmask(p->placements[i]);
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

/* C(free) computed (fit-geometry.h): the profiles' terms plus the usable
 * units' term; `counts` NULL means none used. */
unsigned fit_capacity_compute(const struct mk_fit_gpu *g, const struct fit_profset *ps, const unsigned *counts,
                                 size_t extra, uint32_t free, unsigned free_slices) {
        unsigned c = 0;
        uint32_t usable = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct fit_pinfo *pi = &ps->pi[j];
                if (!pi->base)
                        continue;
                unsigned count = (counts ? counts[j] : 0) + (j == extra);
                unsigned m = profile_room(&g->profiles[j], pi, count, free, free_slices);
                c += pi->size * m;
                /* The units its free placements cover stay usable. */
                uint32_t st = m > 0 ? fit_free_runs(free, pi->size) & pi->starts : 0;
                for (unsigned k = 0; st && k < pi->size; k++)
                        usable |= st << k;
        }
        return ps->profiles_only ? c : c + FIT_USABLE_UNIT_WEIGHT * fit_popcount32(usable);
}

/* C(free) with the instance counts of the GPU's used list (+1 for `extra`). */
unsigned fit_capacity_slow(const struct mk_fit_gpu *g, struct fit_gpu_state *s, uint32_t free, unsigned free_slices,
                           size_t extra) {
        gpu_counts(g, s);
        return fit_capacity_compute(g, s->ps, s->counts, extra, free, free_slices);
}

/* C of n free units from unit 0, counts not considered, cached per profile set. */
unsigned fit_ideal_slow(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, unsigned n, unsigned free_slices) {
        struct fit_profset *ps = s->ps;
        bool cacheable = n <= FIT_IDEAL_MAX && free_slices <= FIT_IDEAL_MAX;
        if (cacheable && (ps->ideal_known[n] & (1u << free_slices)))
                return ps->ideal[n][free_slices];
        unsigned c = fit_capacity_compute(g, ps, NULL, SIZE_MAX, fit_units_mask(n), free_slices);
        if (cacheable && c <= UINT16_MAX) {
                ps->ideal[n][free_slices] = (uint16_t) c;
                ps->ideal_known[n] |= (uint16_t) (1u << free_slices);
        }
        return c;
}


/* C(free) and the ideal (at least C) of a GPU as it is. */
void fit_gpu_now(const struct mk_fit_gpu *g, struct fit_gpu_state *s, unsigned *ret_cap, unsigned *ret_ideal) {
        uint32_t free = s->all & ~s->used;
        if (!s->have_cap) {
                s->cap = fit_capacity(g, s, free, s->free_slices, SIZE_MAX);
                s->have_cap = true;
        }
        if (!s->have_ideal) {
                s->ideal = MAX(s->cap, fit_ideal_capacity(g, s, fit_popcount32(free), s->free_slices));
                s->have_ideal = true;
        }
        *ret_cap = s->cap;
        *ret_ideal = s->ideal;
}


/* Starts of the free placements of profile j (bit s: the placement at s). */
uint32_t fit_free_starts(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, size_t j) {
        const struct mk_gi_profile *p = &g->profiles[j];
        if (p->slices > s->free_slices)
                return 0;
        const struct fit_pinfo *pi = &s->ps->pi[j];
        /* A limit of at least the placement count binds only on instances
         * outside the profile's own placements, which NVML cannot create. */
        if (pi->limited && fit_limit_reached(g, s, j))
                return 0;
        return fit_free_runs(s->all & ~s->used, pi->size) & pi->starts;
}


static uint64_t free_placements(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, size_t j) {
        const struct mk_gi_profile *p = &g->profiles[j];
        uint32_t fs = fit_free_starts(g, s, j);
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
                m |= fit_pmask(g->used[i].placement);
        return m;
}

uint64_t mk_fit_free_placements(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) {
        struct fit_profcache pc;
        struct fit_gpu_state s;
        pc.n = pc.next = 0;
        if (g->unavailable || fit_gpu_prepare(&pc, g, &s) < 0)
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
        struct fit_profcache pc;
        struct fit_gpu_state s;
        pc.n = pc.next = 0;
        if (g->unavailable || fit_gpu_prepare(&pc, g, &s) < 0)
                return 0;
        unsigned cap, ideal;
        fit_frag_parts(g, &s, s.all & ~s.used, s.free_slices, SIZE_MAX, &cap, &ideal);
        return ideal == 0 ? 0 : 1.0 - (double) cap / ideal;
}

unsigned mk_fit_profile_cores(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) {
        unsigned max_slices = 0, max_sms = 0;
        for (size_t j = 0; j < g->n_profiles && g->profiles; j++) {
                max_slices = MAX(max_slices, g->profiles[j].slices);
                max_sms = MAX(max_sms, g->profiles[j].multiprocessors);
        }
        return fit_profile_cores(g->multiprocessors > 0 ? g->multiprocessors : max_sms,
                                 g->slices > 0 ? g->slices : max_slices, p);
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

        uint32_t all = fit_units_mask(g->memory_units);
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
                        uint32_t m = fit_pmask(q);
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
                uint32_t m = fit_pmask(q);
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
        size_t n_best = g->n_profiles <= MK_FIT_MAX_PROFILES ? fit_best_index(g->n_profiles, 0, 0) : 0;
        _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = calloc(1, sizeof *t + n_best);
        if (!t)
                return -ENOMEM;
        t->profiles = g->profiles;
        t->n_profiles = g->n_profiles;
        t->memory_units = g->memory_units;
        t->slices = g->slices;
        int r = fit_pinfo_fill(&empty, t->pi, &t->max_slices, &t->max_sms);
        if (r < 0)
                return r;
        unsigned slices = g->slices > 0 ? g->slices : t->max_slices;
        if (g->memory_units > FIT_TAB_UNITS || slices > FIT_TAB_SLICES)
                return -EOPNOTSUPP;
        /* A lookup ignores instance counts: exact only while a profile's
         * limit can never bind before its placements run out. */
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (t->pi[j].base && (!t->pi[j].disjoint || (p->max_count > 0 && p->max_count < p->n_placements)))
                        return -EOPNOTSUPP;
        }
        struct fit_profset ps = {.pi = t->pi};
        uint32_t all = fit_units_mask(g->memory_units);
        for (uint32_t f = 0; f <= all; f++)
                for (unsigned fs = 0; fs <= FIT_TAB_SLICES; fs++) {
                        unsigned c = fit_capacity_compute(&empty, &ps, NULL, SIZE_MAX, f, MIN(fs, slices));
                        if (c > UINT16_MAX)
                                return -EOPNOTSUPP;
                        t->cap[f][fs] = (uint16_t) c;
                }
        /* The winning placement per profile, free mask and free slices, by
         * the one rule of fit-score.h. */
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                uint32_t size_mask = fit_units_mask(t->pi[j].size);
                for (uint32_t f = 0; f <= all; f++)
                        for (unsigned fs = 0; fs <= FIT_TAB_SLICES; fs++) {
                                struct fit_pick best = FIT_PICK_NONE;
                                uint32_t starts = p->slices <= fs ? fit_free_runs(f, t->pi[j].size) & t->pi[j].starts : 0;
                                for (; starts; starts &= starts - 1) {
                                        unsigned start = (unsigned) __builtin_ctz(starts);
                                        unsigned before = t->cap[f][fs];
                                        unsigned after = t->cap[f & ~(size_mask << start)][fs - p->slices];
                                        fit_pick_offer(&best, j, start, fit_loss(before, after));
                                }
                                t->best[fit_best_index(j, f, fs)] = best.found ? (uint8_t) (best.start + 1) : 0;
                        }
        }
        *ret = TAKE_PTR(t);
        return 0;
}

struct mk_fit_tables *mk_fit_tables_free(struct mk_fit_tables *t) {
        free(t);
        return NULL;
}
