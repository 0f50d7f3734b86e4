/* Plans for one GPU (plan.h). Each step is pure:
 *  1. resolve every desired name on this GPU (mk_plan_resolve);
 *  2. group compute instances into GPU instances as upstream does
 *     (mig-parted v0.15.0, cmd/nvidia-mig-parted/apply and pkg/mig: larger
 *     G, then larger C first; a CI smaller than its GI shares a GI of its profile that still has a free CI placement);
 *  3. check what fits (per-profile limits, compute slices, memory units) and
 *     search exact GI placements (the MIG user guide's tables) that keep the
 *     most existing CIs, then GIs; among those, the first met, each GI
 *     trying its placements in the scheduler's fit order (gi_order());
 *  4. list what goes, each CI before its GI.
 * The search is exhaustive but tiny: at most one GI per memory unit (8 on
 * today's GPUs), identical GIs take placements in increasing order, and a
 * branch that cannot beat the best assignment found is cut. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "plan/fit-geometry.h"
#include "plan/fit-score.h"
#include "plan/fit.h"
#include "plan/plan.h"

/* Placements are handled as 32-bit masks (mk_placement_mask): far above
 * today's 8 memory units and 8 compute slices per GPU. */
#define PLAN_MAX_UNITS 32u

/* A safety net for GPUs unlike any known one; today's worst case visits a
 * few hundred nodes (tests/unit/test-plan.c measures it). */
#define PLAN_MAX_NODES (UINT64_C(1) << 22)

/* NVML_DEVICE_ARCH_AMPERE and NVML_DEVICE_ARCH_UNKNOWN (nvml/nvml-abi.h);
 * plan/ does not depend on nvml/. */
#define ARCH_AMPERE 7u
#define ARCH_UNKNOWN 0xffffffffu

/* Search score: kept CIs first, then kept GIs (fewer than SCORE_CI). */
#define SCORE_CI ((long) PLAN_MAX_UNITS + 1)

#define REASON_MAX 256

/* One desired compute instance. */
struct item {
        const struct mk_gi_profile *gp;
        const struct mk_ci_profile *cp;
        size_t gp_idx, cp_idx;
        struct mk_profile_name name;
};

/* One target GPU instance while planning. */
struct tgi {
        const struct mk_gi_profile *gp;
        size_t gp_idx;
        size_t n_cis;
        const struct mk_ci_profile *cps[PLAN_MAX_UNITS];
        size_t cp_idx[PLAN_MAX_UNITS];
        uint32_t occupied; /* compute slices taken while grouping */
};

/* What the capacity value C of plan/fit (docs/scheduler-fit.md §3) needs
 * of this GPU: every profile it has, no instance counted. */
struct plan_fit {
        struct mk_fit_gpu g;
        struct fit_profset ps;
};

struct planner {
        const struct mk_gpu *g;
        const struct plan_fit *fit; /* the capacity value of free units (plan/fit), or NULL */
        const struct mk_gi *gis; /* existing GIs that may be kept; none when planning from scratch */
        size_t n_gis;
        unsigned slices, units;
        uint64_t nodes;
        bool gave_up;
};

/* A grouping of the desired CIs into GIs and its best placement. */
struct candidate {
        struct tgi *t;
        size_t n_t;
        size_t *best; /* placement index (into the GI profile's list) per target */
        long score;   /* -1 while infeasible */
        int error;    /* negative errno when infeasible */
        char why[REASON_MAX];
};

/* --- resolution ------------------------------------------------------------ */

int mk_plan_resolve(const struct mk_gpu *g, const struct mk_profile_name *name, const struct mk_gi_profile **ret_gi,
                    const struct mk_ci_profile **ret_ci) {
        for (size_t i = 0; i < g->n_profiles; i++) {
                const struct mk_gi_profile *gp = &g->profiles[i];
                for (size_t j = 0; j < gp->n_ci_profiles; j++) {
                        struct mk_profile_name n;
                        /* The CI profile with C == G carries the GI's own name. */
                        if (mk_profile_name_parse(gp->ci_profiles[j].name, &n, NULL) < 0)
                                continue;
                        if (!mk_profile_name_equal(&n, name))
                                continue;
                        if (ret_gi)
                                *ret_gi = gp;
                        if (ret_ci)
                                *ret_ci = &gp->ci_profiles[j];
                        return 0;
                }
        }
        return -ENOENT;
}

/* Names in a listing: G ascending, then memory, then attributes, then the
 * full GI before its smaller CIs ("1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb,
 * 1c.2g.10gb, ..."). */
static int listing_compare(const void *a, const void *b) {
        const struct mk_profile_name *x = a, *y = b;
        if (x->g != y->g)
                return x->g < y->g ? -1 : 1;
        if (x->gb != y->gb)
                return x->gb < y->gb ? -1 : 1;
        struct mk_profile_name xa = *x, ya = *y;
        xa.c = xa.g = xa.gb = ya.c = ya.g = ya.gb = 0;
        int r = mk_profile_name_compare(&xa, &ya);
        if (r != 0)
                return r;
        if (x->c != y->c)
                return x->c > y->c ? -1 : 1;
        return 0;
}

/* Every profile name the GPU offers, comma-separated; "..." when cut. */
static void list_names(const struct mk_gpu *g, char *buf, size_t size) {
        size_t total = 0, n = 0, off = 0;

        buf[0] = 0;
        for (size_t i = 0; i < g->n_profiles; i++)
                total += g->profiles[i].n_ci_profiles;
        if (total == 0)
                return;
        _cleanup_free_ struct mk_profile_name *names = calloc(total, sizeof(*names));
        if (!names)
                return;
        for (size_t i = 0; i < g->n_profiles; i++)
                for (size_t j = 0; j < g->profiles[i].n_ci_profiles; j++) {
                        struct mk_profile_name nm;
                        if (mk_profile_name_parse(g->profiles[i].ci_profiles[j].name, &nm, NULL) < 0)
                                continue;
                        bool dup = false;
                        for (size_t k = 0; k < n && !dup; k++)
                                dup = mk_profile_name_equal(&names[k], &nm);
                        if (!dup)
                                names[n++] = nm;
                }
        qsort(names, n, sizeof(*names), listing_compare);
        for (size_t k = 0; k < n; k++) {
                char s[MK_PROFILE_NAME_MAX];
                if (mk_profile_name_format(&names[k], s, sizeof(s)) < 0)
                        continue;
                int w = snprintf(buf + off, size - off, "%s%s", off > 0 ? ", " : "", s);
                if (w < 0 || (size_t) w >= size - off) {
                        /* Cut at the last complete name. */
                        if (size >= 4) {
                                size_t at = MIN(off, size - 4);
                                memcpy(buf + at, "...", 4);
                        }
                        return;
                }
                off += (size_t) w;
        }
}

/* --- geometry ---------------------------------------------------------------- */

/* Memory units a GI of this profile covers (all its placements share a size). */
static unsigned gi_units(const struct mk_gi_profile *gp) {
        for (size_t i = 0; i < gp->n_placements; i++)
                if (mk_placement_mask(gp->placements[i]) != 0)
                        return gp->placements[i].size;
        return 0;
}

/* Valid placements of `cp` inside a GI of `g_slices` compute slices: the list
 * NVML gave, else the rule behind the MIG user guide's CI placement tables
 * (start aligned to C rounded up to a power of two, and inside the GI). */
static size_t ci_placements(const struct mk_ci_profile *cp, unsigned g_slices,
                            struct mk_placement out[static PLAN_MAX_UNITS]) {
        size_t n = 0;

        if (cp->n_placements > 0) {
                for (size_t i = 0; i < cp->n_placements && n < PLAN_MAX_UNITS; i++)
                        if (mk_placement_mask(cp->placements[i]) != 0)
                                out[n++] = cp->placements[i];
                return n;
        }
        unsigned c = cp->slices, align = 1;
        if (c == 0 || c > g_slices || g_slices > PLAN_MAX_UNITS)
                return 0;
        while (align < c)
                align <<= 1;
        for (unsigned s = 0; s + c <= g_slices; s += align)
                out[n++] = (struct mk_placement){s, c};
        return n;
}

/* An existing CI is an instance of `cp`: same driver profile id when the
 * profile was queried, else (a derived profile) the same size. */
static bool ci_matches(const struct mk_ci *ci, const struct mk_ci_profile *cp) {
        if (cp->id != UINT32_MAX)
                return ci->profile_id == cp->id;
        return ci->slices == cp->slices;
}

static uint32_t ci_mask(const struct mk_ci *ci) {
        struct mk_placement p = ci->placement;
        if (p.size == 0)
                p.size = ci->slices;
        return mk_placement_mask(p);
}

static bool placement_equal(struct mk_placement a, struct mk_placement b) {
        return a.start == b.start && a.size == b.size;
}

/* --- compute instances inside one GI ----------------------------------------- */

struct ci_search {
        const struct tgi *t;
        const struct mk_gi *e; /* existing GI whose CIs may be kept, or NULL */
        size_t np[PLAN_MAX_UNITS];
        struct mk_placement pl[PLAN_MAX_UNITS][PLAN_MAX_UNITS];
        size_t cur[PLAN_MAX_UNITS], best[PLAN_MAX_UNITS];
        long kept_best, kept_max;
        uint64_t *nodes;
};

/* Target CI i takes option o: an existing CI of e (o < e->n_cis) or a new
 * placement. Identical CIs (adjacent, same profile) take increasing options,
 * so each set of choices is visited once. */
static void ci_dfs(struct ci_search *s, size_t i, uint32_t used, long kept) {
        size_t n = s->t->n_cis, n_e = s->e ? s->e->n_cis : 0;

        (*s->nodes)++;
        if (s->kept_best == s->kept_max)
                return; /* nothing can beat it */
        if (i == n) {
                if (kept > s->kept_best) {
                        s->kept_best = kept;
                        memcpy(s->best, s->cur, n * sizeof(s->cur[0]));
                }
                return;
        }
        if (s->kept_best >= 0 && kept + (long) (n - i) <= s->kept_best)
                return;

        size_t first = i > 0 && s->t->cps[i] == s->t->cps[i - 1] ? s->cur[i - 1] + 1 : 0;
        for (size_t o = first; o < n_e + s->np[i]; o++) {
                uint32_t m;
                if (o < n_e) {
                        if (!ci_matches(&s->e->cis[o], s->t->cps[i]))
                                continue;
                        m = ci_mask(&s->e->cis[o]);
                } else
                        m = mk_placement_mask(s->pl[i][o - n_e]);
                if (m == 0 || (m & used))
                        continue;
                s->cur[i] = o;
                ci_dfs(s, i + 1, used | m, kept + (o < n_e));
        }
}

/* Places the CIs of `t` in a GI of its profile, keeping as many CIs of the
 * existing GI `e` (NULL: none) as possible; the first best in option order.
 * Returns the number kept, -ENOSPC when they cannot be placed, -ENOMEM.
 * ret_pl / ret_kept (index into e->cis, SIZE_MAX for a new CI) may be NULL. */
static long place_cis(struct planner *p, const struct tgi *t, const struct mk_gi *e, struct mk_placement *ret_pl,
                      size_t *ret_kept) {
        _cleanup_free_ struct ci_search *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->t = t;
        s->e = e;
        s->nodes = &p->nodes;
        s->kept_best = -1;
        s->kept_max = (long) MIN(t->n_cis, e ? e->n_cis : 0);
        for (size_t i = 0; i < t->n_cis; i++)
                s->np[i] = ci_placements(t->cps[i], t->gp->slices, s->pl[i]);
        ci_dfs(s, 0, 0, 0);
        if (s->kept_best < 0)
                return -ENOSPC;

        size_t n_e = e ? e->n_cis : 0;
        for (size_t i = 0; i < t->n_cis; i++) {
                size_t o = s->best[i];
                if (ret_pl)
                        ret_pl[i] = o < n_e ? e->cis[o].placement : s->pl[i][o - n_e];
                if (ret_pl && o < n_e && ret_pl[i].size == 0)
                        ret_pl[i].size = e->cis[o].slices;
                if (ret_kept)
                        ret_kept[i] = o < n_e ? o : SIZE_MAX;
        }
        return s->kept_best;
}

/* --- grouping ------------------------------------------------------------------ */

static int item_compare(const void *a, const void *b) {
        const struct item *x = a, *y = b;
        if (x->gp->slices != y->gp->slices)
                return x->gp->slices > y->gp->slices ? -1 : 1;
        if (x->cp->slices != y->cp->slices)
                return x->cp->slices > y->cp->slices ? -1 : 1;
        int r = mk_profile_name_compare(&x->name, &y->name);
        if (r != 0)
                return r;
        if (x->gp_idx != y->gp_idx)
                return x->gp_idx < y->gp_idx ? -1 : 1;
        return x->cp_idx < y->cp_idx ? -1 : x->cp_idx > y->cp_idx;
}

/* Canonical order of targets: larger GIs first (the search places them
 * first), identical GIs adjacent. */
static int tgi_compare(const void *a, const void *b) {
        const struct tgi *x = a, *y = b;
        unsigned ux = gi_units(x->gp), uy = gi_units(y->gp);
        if (ux != uy)
                return ux > uy ? -1 : 1;
        if (x->gp->slices != y->gp->slices)
                return x->gp->slices > y->gp->slices ? -1 : 1;
        if (x->gp_idx != y->gp_idx)
                return x->gp_idx < y->gp_idx ? -1 : 1;
        if (x->n_cis != y->n_cis)
                return x->n_cis > y->n_cis ? -1 : 1;
        for (size_t i = 0; i < x->n_cis; i++)
                if (x->cp_idx[i] != y->cp_idx[i])
                        return x->cp_idx[i] < y->cp_idx[i] ? -1 : 1;
        return 0;
}

static void tgi_sort_cis(struct tgi *t) {
        /* Insertion sort, larger C first then profile order: identical CIs adjacent. */
        for (size_t i = 1; i < t->n_cis; i++)
                for (size_t j = i; j > 0; j--) {
                        const struct mk_ci_profile *a = t->cps[j - 1], *b = t->cps[j];
                        bool swap = a->slices < b->slices ||
                                    (a->slices == b->slices && t->cp_idx[j - 1] > t->cp_idx[j]);
                        if (!swap)
                                break;
                        const struct mk_ci_profile *tc = t->cps[j];
                        size_t ti = t->cp_idx[j];
                        t->cps[j] = t->cps[j - 1];
                        t->cp_idx[j] = t->cp_idx[j - 1];
                        t->cps[j - 1] = tc;
                        t->cp_idx[j - 1] = ti;
                }
}

static void tgi_add(struct tgi *t, const struct item *it, uint32_t mask) {
        t->cps[t->n_cis] = it->cp;
        t->cp_idx[t->n_cis] = it->cp_idx;
        t->n_cis++;
        t->occupied |= mask;
}

/* First free CI placement of `it` in `t`, 0 when none. */
static uint32_t free_ci_slot(const struct tgi *t, const struct item *it) {
        struct mk_placement pl[PLAN_MAX_UNITS];
        size_t n = ci_placements(it->cp, it->gp->slices, pl);
        if (t->n_cis >= PLAN_MAX_UNITS)
                return 0;
        for (size_t k = 0; k < n; k++) {
                uint32_t m = mk_placement_mask(pl[k]);
                if (m != 0 && !(m & t->occupied))
                        return m;
        }
        return 0;
}

/* Groups the (sorted) items into target GIs. A CI with C == G gets its own
 * GI; a smaller one joins the first GI of its profile (in creation order)
 * that has a free CI placement, else opens one. With `seed`, the CIs of each
 * existing GI that the layout wants are grouped as they are first, so that
 * a GPU already laid out differently (e.g. two 2g GIs with one 1c each) is
 * not regrouped. */
static int group(struct planner *p, const struct item *items, size_t n_items, bool seed, struct candidate *c) {
        _cleanup_free_ bool *used = calloc(n_items ? n_items : 1, sizeof(*used));
        struct tgi *t = calloc(n_items ? n_items : 1, sizeof(*t));
        size_t n_t = 0;

        if (!used || !t) {
                free(t);
                return -ENOMEM;
        }

        /* Each seeded GI takes at least one item: at most n_items of them. */
        for (size_t e = 0; seed && e < p->n_gis && n_t < n_items; e++) {
                const struct mk_gi *gi = &p->gis[e];
                struct tgi *x = &t[n_t];
                for (size_t k = 0; k < gi->n_cis; k++) {
                        uint32_t m = ci_mask(&gi->cis[k]);
                        if (m == 0 || (m & x->occupied) || x->n_cis >= PLAN_MAX_UNITS)
                                continue;
                        for (size_t j = 0; j < n_items; j++) {
                                if (used[j] || items[j].gp->id != gi->profile_id ||
                                    !ci_matches(&gi->cis[k], items[j].cp))
                                        continue;
                                used[j] = true;
                                x->gp = items[j].gp;
                                x->gp_idx = items[j].gp_idx;
                                tgi_add(x, &items[j], m);
                                break;
                        }
                }
                if (x->n_cis > 0)
                        n_t++;
                else
                        *x = (struct tgi){0};
        }

        for (size_t j = 0; j < n_items; j++) {
                const struct item *it = &items[j];
                if (used[j])
                        continue;
                bool placed = false;
                if (it->cp->slices < it->gp->slices)
                        for (size_t k = 0; k < n_t && !placed; k++) {
                                if (t[k].gp != it->gp)
                                        continue;
                                uint32_t m = free_ci_slot(&t[k], it);
                                if (m != 0) {
                                        tgi_add(&t[k], it, m);
                                        placed = true;
                                }
                        }
                if (placed)
                        continue;
                struct tgi *x = &t[n_t];
                *x = (struct tgi){.gp = it->gp, .gp_idx = it->gp_idx};
                uint32_t m = free_ci_slot(x, it);
                if (m == 0) {
                        char s[MK_PROFILE_NAME_MAX];
                        if (mk_profile_name_format(&it->name, s, sizeof(s)) < 0)
                                s[0] = 0;
                        snprintf(c->why, sizeof(c->why), "%s has no valid placement inside a %s GPU instance", s,
                                 it->gp->name);
                        free(t);
                        return -ENOSPC;
                }
                tgi_add(x, it, m);
                n_t++;
        }

        for (size_t k = 0; k < n_t; k++)
                tgi_sort_cis(&t[k]);
        if (n_t > 1)
                qsort(t, n_t, sizeof(*t), tgi_compare);
        c->t = t;
        c->n_t = n_t;
        return 0;
}

/* "4g.20gb:1, 3g.20gb:1": the GIs of a grouping, for messages. */
static void gi_summary(const struct candidate *c, char *buf, size_t size) {
        size_t off = 0;
        buf[0] = 0;
        for (size_t k = 0; k < c->n_t;) {
                size_t n = 1;
                while (k + n < c->n_t && c->t[k + n].gp == c->t[k].gp)
                        n++;
                int w = snprintf(buf + off, size - off, "%s%s:%zu", off > 0 ? ", " : "", c->t[k].gp->name, n);
                if (w < 0 || (size_t) w >= size - off)
                        return; /* cut; the message says enough already */
                off += (size_t) w;
                k += n;
        }
}

/* --- GI placement search --------------------------------------------------------- */

struct gi_search {
        struct planner *p;
        const struct tgi *t;
        size_t n_t, np_max;
        uint32_t *mask; /* [k * np_max + j]: placement j of target k, 0 when unusable */
        long *gain;     /* [k * np_max + j]: score of what that placement keeps */
        long *ub;       /* [k]: most that targets k.. can still gain */
        unsigned *need; /* [k]: memory units targets k.. need */
        bool *same;     /* [k]: target k is identical to k - 1 */
        unsigned *slices_before; /* [k]: compute slices of targets 0..k-1 */
        size_t *cur, *best;
        long score_best;
};

#define GI_ORDER_MAX 64u /* placements of one profile that gi_order() sorts */

/* The placements target k tries, in order, given the units `used` by
 * targets 0..k-1: what keeps more first (gain), then the fit's rule for a
 * new instance (plan/fit-score.h: the least capacity value C of the free
 * units lost, then the higher start), so that among layouts keeping as
 * much, the search meets first the one that keeps the largest aligned
 * blocks free (docs/engine.md). Returns how many, 0 when the GPU's
 * profiles cannot be valued (index order then). */
static size_t gi_order(const struct gi_search *s, size_t k, uint32_t used, uint8_t order[static GI_ORDER_MAX]) {
        const struct plan_fit *f = s->p->fit;
        const struct mk_gi_profile *gp = s->t[k].gp;
        if (!f || gp->n_placements > GI_ORDER_MAX)
                return 0;
        uint32_t free = fit_units_mask(s->p->units) & ~used;
        unsigned fs = s->p->slices - s->slices_before[k];
        unsigned before = fit_capacity_compute(&f->g, &f->ps, NULL, SIZE_MAX, free, fs), loss[GI_ORDER_MAX];
        size_t n = 0;
        for (size_t j = 0; j < gp->n_placements; j++) {
                uint32_t m = s->mask[k * s->np_max + j];
                if (m == 0 || (m & used))
                        continue;
                unsigned after = fit_capacity_compute(&f->g, &f->ps, NULL, SIZE_MAX, free & ~m, fs - gp->slices);
                loss[j] = fit_loss(before, after);
                long gj = s->gain[k * s->np_max + j];
                size_t i = n++;
                for (; i > 0; i--) {
                        size_t o = order[i - 1];
                        long go = s->gain[k * s->np_max + o];
                        bool first = gj > go || (gj == go && fit_spot_better(loss[j], gp->placements[j].start, loss[o],
                                                                             gp->placements[o].start));
                        if (!first)
                                break;
                        order[i] = order[i - 1];
                }
                order[i] = (uint8_t) j;
        }
        return n;
}

static void gi_dfs(struct gi_search *s, size_t k, uint32_t used, unsigned free_units, long score) {
        if (s->p->nodes >= PLAN_MAX_NODES) {
                s->p->gave_up = true;
                return;
        }
        s->p->nodes++;
        if (k == s->n_t) {
                if (score > s->score_best) {
                        s->score_best = score;
                        memcpy(s->best, s->cur, s->n_t * sizeof(s->cur[0]));
                }
                return;
        }
        if (s->score_best >= 0 && score + s->ub[k] <= s->score_best)
                return;
        if (s->need[k] > free_units)
                return;

        /* Identical targets take increasing placement indices: each set is
         * visited once, whatever order the placements are tried in. */
        size_t first = s->same[k] ? s->cur[k - 1] + 1 : 0;
        uint8_t order[GI_ORDER_MAX];
        size_t n_order = gi_order(s, k, used, order);
        size_t n = n_order > 0 ? n_order : s->t[k].gp->n_placements;
        for (size_t i = 0; i < n; i++) {
                size_t j = n_order > 0 ? order[i] : i;
                uint32_t m = s->mask[k * s->np_max + j];
                unsigned size = (unsigned) __builtin_popcount(m);
                if (j < first || m == 0 || (m & used) || size > free_units)
                        continue;
                s->cur[k] = j;
                gi_dfs(s, k + 1, used | m, free_units - size,
                       score + s->gain[k * s->np_max + j]);
        }
}

/* The existing GI of profile gp at placement pl, or NULL. */
static const struct mk_gi *existing_at(const struct planner *p, const struct mk_gi_profile *gp,
                                       struct mk_placement pl) {
        for (size_t e = 0; e < p->n_gis; e++)
                if (p->gis[e].profile_id == gp->id && placement_equal(p->gis[e].placement, pl))
                        return &p->gis[e];
        return NULL;
}

/* The quick refusals, most specific reasons first: a profile over its
 * instance limit, too many compute slices or memory units, a profile with no
 * placement, compute instances that do not fit their GPU instance. 0, or
 * -ENOSPC with c->why, -ENOMEM. */
static int check_fits(struct planner *p, struct candidate *c) {
        const struct mk_gpu *g = p->g;
        uint64_t slices = 0, units = 0;

        for (size_t i = 0; i < g->n_profiles; i++) {
                size_t n = 0;
                for (size_t k = 0; k < c->n_t; k++)
                        n += c->t[k].gp == &g->profiles[i];
                /* max_count 0: NVML did not say; no limit to check. */
                if (g->profiles[i].max_count > 0 && n > g->profiles[i].max_count) {
                        snprintf(c->why, sizeof(c->why), "%s: %zu exceeds the GPU's limit of %u",
                                 g->profiles[i].name, n, g->profiles[i].max_count);
                        return -ENOSPC;
                }
        }
        for (size_t k = 0; k < c->n_t; k++) {
                slices += c->t[k].gp->slices;
                units += gi_units(c->t[k].gp);
        }
        if (slices > p->slices) {
                snprintf(c->why, sizeof(c->why), "needs %" PRIu64 " compute slices, the GPU has %u", slices,
                         p->slices);
                return -ENOSPC;
        }
        if (units > p->units) {
                snprintf(c->why, sizeof(c->why), "needs %" PRIu64 " memory units, the GPU has %u", units, p->units);
                return -ENOSPC;
        }
        for (size_t k = 0; k < c->n_t; k++) {
                if (gi_units(c->t[k].gp) == 0) {
                        snprintf(c->why, sizeof(c->why), "%s has no valid placement on this GPU", c->t[k].gp->name);
                        return -ENOSPC;
                }
                long q = place_cis(p, &c->t[k], NULL, NULL, NULL);
                if (q == -ENOMEM)
                        return -ENOMEM;
                if (q < 0) {
                        snprintf(c->why, sizeof(c->why), "its compute instances do not fit in one %s GPU instance",
                                 c->t[k].gp->name);
                        return -ENOSPC;
                }
        }
        return 0;
}

static void gi_search_done(struct gi_search *s) {
        free(s->mask);
        free(s->gain);
        free(s->ub);
        free(s->need);
        free(s->same);
        free(s->slices_before);
        free(s->cur);
}

/* The search's tables: per target and placement its mask and what keeping
 * the existing GI there gains, the bounds for pruning, the units still
 * needed. c->best is allocated too. 0 or -ENOMEM. */
static int gi_search_init(struct planner *p, struct candidate *c, struct gi_search *s) {
        for (size_t k = 0; k < c->n_t; k++)
                s->np_max = MAX(s->np_max, c->t[k].gp->n_placements);
        size_t cells = c->n_t * MAX(s->np_max, (size_t) 1);
        s->mask = calloc(cells, sizeof(*s->mask));
        s->gain = calloc(cells, sizeof(*s->gain));
        s->ub = calloc(c->n_t + 1, sizeof(*s->ub));
        s->need = calloc(c->n_t + 1, sizeof(*s->need));
        s->same = calloc(c->n_t + 1, sizeof(*s->same));
        s->slices_before = calloc(c->n_t + 1, sizeof(*s->slices_before));
        s->cur = calloc(c->n_t + 1, sizeof(*s->cur));
        c->best = calloc(c->n_t + 1, sizeof(*c->best));
        if (!s->mask || !s->gain || !s->ub || !s->need || !s->same || !s->slices_before || !s->cur || !c->best)
                return -ENOMEM;
        s->best = c->best;

        for (size_t k = 0; k < c->n_t; k++) {
                const struct mk_gi_profile *gp = c->t[k].gp;
                long top = 0;
                s->same[k] = k > 0 && tgi_compare(&c->t[k - 1], &c->t[k]) == 0;
                for (size_t j = 0; j < gp->n_placements; j++) {
                        size_t cell = k * s->np_max + j;
                        s->mask[cell] = mk_placement_mask(gp->placements[j]);
                        const struct mk_gi *e = existing_at(p, gp, gp->placements[j]);
                        if (s->mask[cell] == 0 || !e)
                                continue;
                        if (s->same[k]) {
                                /* Identical targets gain the same: reuse the previous row. */
                                s->gain[cell] = s->gain[cell - s->np_max];
                        } else {
                                long kept = place_cis(p, &c->t[k], e, NULL, NULL);
                                if (kept == -ENOMEM)
                                        return -ENOMEM;
                                /* The GI is kept even when none of its CIs can be. */
                                s->gain[cell] = (kept > 0 ? kept : 0) * SCORE_CI + 1;
                        }
                        top = MAX(top, s->gain[cell]);
                }
                s->ub[k] = top;
        }
        for (size_t k = 0; k < c->n_t; k++)
                s->slices_before[k + 1] = s->slices_before[k] + c->t[k].gp->slices;
        for (size_t k = c->n_t; k-- > 0;) {
                s->ub[k] += s->ub[k + 1];
                s->need[k] = s->need[k + 1] + gi_units(c->t[k].gp);
        }
        return 0;
}

/* Checks that the grouping fits and finds its best placement. Returns 0 with
 * c->best and c->score set, -ENOSPC with c->why, -ERANGE when the search
 * gave up, -ENOMEM. */
static int search(struct planner *p, struct candidate *c) {
        _cleanup_(gi_search_done) struct gi_search s = {.p = p, .t = c->t, .n_t = c->n_t, .score_best = -1};
        int r = check_fits(p, c);
        if (r < 0)
                return r;
        r = gi_search_init(p, c, &s);
        if (r < 0)
                return r;

        gi_dfs(&s, 0, 0, p->units, 0);
        if (s.score_best >= 0) {
                c->score = s.score_best;
                return 0;
        }
        if (p->gave_up) {
                snprintf(c->why, sizeof(c->why), "the placement search gave up after %" PRIu64 " steps", p->nodes);
                return -ERANGE;
        }
        char sum[REASON_MAX / 2];
        gi_summary(c, sum, sizeof(sum));
        snprintf(c->why, sizeof(c->why), "no non-overlapping placement exists for the GPU instances %s", sum);
        return -ENOSPC;
}

/* --- the plan ------------------------------------------------------------------------ */

void mk_gpu_plan_done(struct mk_gpu_plan *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n_target; i++)
                free(p->target[i].cis);
        free(p->target);
        free(p->destroy);
        *p = (struct mk_gpu_plan){0};
}

static void candidate_done(struct candidate *c) {
        free(c->t);
        free(c->best);
        *c = (struct candidate){0};
}

static int plan_gi_compare(const void *a, const void *b) {
        const struct mk_plan_gi *x = a, *y = b;
        if (x->placement.start != y->placement.start)
                return x->placement.start < y->placement.start ? -1 : 1;
        return 0;
}

static int plan_ci_compare(const void *a, const void *b) {
        const struct mk_plan_ci *x = a, *y = b;
        if (x->placement.start != y->placement.start)
                return x->placement.start < y->placement.start ? -1 : 1;
        return 0;
}

static void copy_str(char *dst, size_t size, const char *src) {
        size_t n = strnlen(src, size - 1);
        memcpy(dst, src, n);
        dst[n] = 0;
}

/* Builds the target of `plan` from the chosen candidate, marking what it keeps
 * in keep_gi[] / keep_ci[] (flat, existing GIs' CIs in order from ci_base[e]). */
static int build_target(struct planner *p, const struct candidate *c, struct mk_gpu_plan *plan, bool *keep_gi,
                        bool *keep_ci, const size_t *ci_base) {
        plan->target = calloc(c->n_t ? c->n_t : 1, sizeof(*plan->target));
        if (!plan->target)
                return -ENOMEM;
        for (size_t k = 0; k < c->n_t; k++) {
                const struct tgi *t = &c->t[k];
                struct mk_plan_gi *x = &plan->target[plan->n_target++];
                struct mk_placement pl[PLAN_MAX_UNITS];
                size_t kept[PLAN_MAX_UNITS];

                x->profile = t->gp;
                x->placement = t->gp->placements[c->best[k]];
                const struct mk_gi *e = existing_at(p, t->gp, x->placement);
                long q = place_cis(p, t, e, pl, kept);
                if (q < 0)
                        return q == -ENOMEM ? -ENOMEM : -EINVAL; /* found before: cannot fail */
                if (e) {
                        size_t ei = (size_t) (e - p->gis);
                        x->kept = true;
                        x->existing_id = e->id;
                        keep_gi[ei] = true;
                        plan->n_kept_gis++;
                } else
                        plan->n_new_gis++;

                x->cis = calloc(t->n_cis ? t->n_cis : 1, sizeof(*x->cis));
                if (!x->cis)
                        return -ENOMEM;
                x->n_cis = t->n_cis;
                for (size_t i = 0; i < t->n_cis; i++) {
                        struct mk_plan_ci *ci = &x->cis[i];
                        ci->profile = t->cps[i];
                        ci->placement = pl[i];
                        if (e && kept[i] != SIZE_MAX) {
                                const struct mk_ci *old = &e->cis[kept[i]];
                                ci->kept = true;
                                ci->existing_id = old->id;
                                copy_str(ci->uuid, sizeof(ci->uuid), old->uuid);
                                keep_ci[ci_base[e - p->gis] + kept[i]] = true;
                                plan->n_kept_cis++;
                        } else
                                plan->n_new_cis++;
                }
                if (x->n_cis > 1)
                        qsort(x->cis, x->n_cis, sizeof(*x->cis), plan_ci_compare);
        }
        if (plan->n_target > 1)
                qsort(plan->target, plan->n_target, sizeof(*plan->target), plan_gi_compare);
        return 0;
}

static int build_destroy(const struct planner *p, struct mk_gpu_plan *plan, const bool *keep_gi, const bool *keep_ci,
                         const size_t *ci_base) {
        size_t n = 0;
        for (size_t e = 0; e < p->n_gis; e++)
                n += p->gis[e].n_cis + 1;
        plan->destroy = calloc(n ? n : 1, sizeof(*plan->destroy));
        if (!plan->destroy)
                return -ENOMEM;

        for (size_t e = 0; e < p->n_gis; e++) {
                const struct mk_gi *gi = &p->gis[e];
                const struct mk_gi_profile *gp = mk_gpu_profile_by_id(p->g, gi->profile_id);
                for (size_t k = 0; k < gi->n_cis; k++) {
                        if (keep_gi[e] && keep_ci[ci_base[e] + k])
                                continue;
                        const struct mk_ci *ci = &gi->cis[k];
                        struct mk_plan_destroy *d = &plan->destroy[plan->n_destroy++];
                        *d = (struct mk_plan_destroy){.is_ci = true,
                                                      .gi_id = gi->id,
                                                      .ci_id = ci->id,
                                                      .gi_profile_id = gi->profile_id,
                                                      .placement = ci->placement};
                        copy_str(d->name, sizeof(d->name), ci->name[0] ? ci->name : "unknown");
                        copy_str(d->uuid, sizeof(d->uuid), ci->uuid);
                }
                if (keep_gi[e])
                        continue;
                struct mk_plan_destroy *d = &plan->destroy[plan->n_destroy++];
                *d = (struct mk_plan_destroy){.is_ci = false,
                                              .gi_id = gi->id,
                                              .ci_id = UINT32_MAX,
                                              .gi_profile_id = gi->profile_id,
                                              .placement = gi->placement};
                if (gp)
                        copy_str(d->name, sizeof(d->name), gp->name);
                else
                        snprintf(d->name, sizeof(d->name), "unknown profile %u", gi->profile_id);
        }
        return 0;
}

/* Resolves and flattens the layout: one item per instance, in upstream's
 * order. Checks the bounds that keep the flat list small first. */
static int flatten(struct planner *p, const struct mk_layout *desired, const char *lay, struct item **ret,
                   size_t *ret_n, struct mk_error *e) {
        const struct mk_gpu *g = p->g;
        uint64_t need = 0, n_items = 0;
        _cleanup_free_ uint64_t *full = calloc(g->n_profiles ? g->n_profiles : 1, sizeof(*full));
        _cleanup_free_ bool *partial = calloc(g->n_profiles ? g->n_profiles : 1, sizeof(*partial));
        if (!full || !partial)
                return mk_error_set(e, -ENOMEM, "Out of memory");

        for (size_t i = 0; i < desired->n_items; i++) {
                const struct mk_layout_item *li = &desired->items[i];
                const struct mk_gi_profile *gp;
                const struct mk_ci_profile *cp;
                if (li->count == 0)
                        continue;
                if (mk_plan_resolve(g, &li->name, &gp, &cp) < 0) {
                        char s[MK_PROFILE_NAME_MAX], has[MK_ERROR_MSG_MAX];
                        if (mk_profile_name_format(&li->name, s, sizeof(s)) < 0)
                                copy_str(s, sizeof(s), "?");
                        list_names(g, has, sizeof(has));
                        return mk_error_set(e, -EINVAL,
                                            "GPU %u (%s): profile '%s' does not exist on this GPU (it has: %s)",
                                            g->index, g->name, s, has[0] ? has : "no profiles");
                }
                size_t gi_idx = (size_t) (gp - g->profiles);
                /* A CI covers at least one slice: bounds the flat list by the GPU's slices. */
                need += (uint64_t) li->count * MAX(cp->slices, 1u);
                n_items += li->count;
                if (cp->slices >= gp->slices)
                        full[gi_idx] += li->count;
                else
                        partial[gi_idx] = true;
        }
        for (size_t i = 0; i < g->n_profiles; i++) {
                uint64_t at_least = full[i] + partial[i];
                if (g->profiles[i].max_count > 0 && at_least > g->profiles[i].max_count)
                        return mk_error_set(e, -ENOSPC,
                                            "GPU %u (%s): layout '%s' does not fit: %s: %" PRIu64
                                            " exceeds the GPU's limit of %u",
                                            g->index, g->name, lay, g->profiles[i].name, at_least,
                                            g->profiles[i].max_count);
        }
        if (need > p->slices)
                return mk_error_set(e, -ENOSPC,
                                    "GPU %u (%s): layout '%s' does not fit: needs %" PRIu64
                                    " compute slices, the GPU has %u",
                                    g->index, g->name, lay, need, p->slices);

        struct item *items = calloc(n_items ? n_items : 1, sizeof(*items));
        if (!items)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t n = 0;
        for (size_t i = 0; i < desired->n_items; i++) {
                const struct mk_layout_item *li = &desired->items[i];
                const struct mk_gi_profile *gp;
                const struct mk_ci_profile *cp;
                if (li->count == 0 || mk_plan_resolve(g, &li->name, &gp, &cp) < 0)
                        continue;
                for (unsigned k = 0; k < li->count; k++)
                        items[n++] = (struct item){.gp = gp,
                                                   .cp = cp,
                                                   .gp_idx = (size_t) (gp - g->profiles),
                                                   .cp_idx = (size_t) (cp - gp->ci_profiles),
                                                   .name = li->name};
        }
        if (n > 1)
                qsort(items, n, sizeof(*items), item_compare);
        *ret = items;
        *ret_n = n;
        return 0;
}

/* The candidate that wins: the higher score, then fewer GIs, then the first. */
static bool better(const struct candidate *a, const struct candidate *b) {
        if (a->score < 0)
                return false;
        if (!b || b->score < 0)
                return true;
        if (a->score != b->score)
                return a->score > b->score;
        return a->n_t < b->n_t;
}

static int plan_layout(struct planner *p, const struct mk_layout *desired, struct mk_gpu_plan *plan, bool *keep_gi,
                       bool *keep_ci, const size_t *ci_base, struct mk_error *e) {
        const struct mk_gpu *g = p->g;
        char lay[256];
        _cleanup_free_ struct item *items = NULL;
        size_t n_items = 0;
        /* [0]: the plain grouping; [1]: seeded with the existing GIs. */
        struct candidate cand[2] = {{.score = -1}, {.score = -1}};
        const struct candidate *win = NULL;
        int r;

        if (mk_layout_format(desired, lay, sizeof(lay)) < 0)
                copy_str(lay, sizeof(lay), "(too long to print)");

        r = flatten(p, desired, lay, &items, &n_items, e);
        if (r < 0)
                return r;

        size_t n_cand = p->n_gis > 0 ? 2 : 1;
        for (size_t i = 0; i < n_cand; i++) {
                r = group(p, items, n_items, i == 1, &cand[i]);
                if (r == 0)
                        r = search(p, &cand[i]);
                if (r == -ENOMEM)
                        goto out;
                cand[i].error = r;
                if (r < 0)
                        cand[i].score = -1;
                if (better(&cand[i], win))
                        win = &cand[i];
        }
        if (!win) {
                r = mk_error_set(e, cand[0].error, "GPU %u (%s): layout '%s' does not fit: %s", g->index, g->name,
                                 lay, cand[0].why);
                goto out;
        }
        r = build_target(p, win, plan, keep_gi, keep_ci, ci_base);
        if (r < 0)
                r = mk_error_set(e, r, "GPU %u (%s): failed to build the plan", g->index, g->name);

out:
        if (r == -ENOMEM && (!e || e->code == 0))
                r = mk_error_set(e, -ENOMEM, "Out of memory");
        candidate_done(&cand[0]);
        candidate_done(&cand[1]);
        return r;
}

/* The capacity value of the GPU's free units, for gi_order(); NULL when
 * the profiles cannot be valued (too many, placements outside the GPU) or
 * out of memory: placements are then tried in index order. */
static struct plan_fit *plan_fit_new(const struct planner *p) {
        const struct mk_gpu *g = p->g;
        if (g->n_profiles > MK_FIT_MAX_PROFILES || p->units > MK_FIT_MAX_UNITS)
                return NULL;
        struct plan_fit *f = calloc(1, sizeof(*f));
        if (!f)
                return NULL;
        f->g = (struct mk_fit_gpu) {
                .profiles = g->profiles,
                .n_profiles = g->n_profiles,
                .memory_units = p->units,
                .slices = p->slices,
        };
        f->ps.pi = f->ps.own;
        /* The profile terms only: a layout is built whole, no unit is left
         * for later requests to strand (docs/engine.md). */
        f->ps.profiles_only = true;
        if (fit_pinfo_fill(&f->g, f->ps.own, &f->ps.max_slices, &f->ps.max_sms) < 0) {
                free(f);
                return NULL;
        }
        return f;
}

static bool arch_needs_reset(unsigned arch) {
        /* Ampere keeps the mode in its InfoROM and switches on reset only
         * (MIG user guide, MIG mode per generation); assume the same when
         * NVML does not say. */
        return arch == ARCH_AMPERE || arch == ARCH_UNKNOWN;
}

int mk_plan_gpu(const struct mk_gpu *g, bool mig_enabled, const struct mk_layout *desired, struct mk_gpu_plan *ret,
                struct mk_error *e) {
        struct mk_gpu_plan plan = {.gpu_index = g->index, .mig_enabled = mig_enabled};
        struct planner p = {.g = g};
        _cleanup_free_ struct plan_fit *fit = NULL;
        _cleanup_free_ bool *keep_gi = NULL, *keep_ci = NULL;
        _cleanup_free_ size_t *ci_base = NULL;
        int r;

        if (!g->mig_capable || g->mig_current == MK_MIG_UNSUPPORTED) {
                if (mig_enabled)
                        return mk_error_set(e, -EOPNOTSUPP, "GPU %u (%s) is not MIG-capable", g->index, g->name);
                *ret = plan;
                return 0;
        }

        enum mk_mig_mode want = mig_enabled ? MK_MIG_ENABLED : MK_MIG_DISABLED;
        /* A pending mode other than the desired one is cancelled too (a set
         * without a reset), or the next reset would switch the GPU. */
        plan.mode_change = g->mig_current != want || g->mig_pending != want;
        if (g->mig_current != want)
                plan.reset_needed = g->mig_pending == want || arch_needs_reset(g->architecture);

        /* Instances exist only while MIG is on; from MIG off, plan from scratch. */
        if (g->mig_current == MK_MIG_ENABLED) {
                p.gis = g->gis;
                p.n_gis = g->n_gis;
        }

        for (size_t i = 0; i < g->n_profiles; i++) {
                p.slices = MAX(p.slices, g->profiles[i].slices);
                for (size_t j = 0; j < g->profiles[i].n_placements; j++) {
                        struct mk_placement pl = g->profiles[i].placements[j];
                        p.units = MAX(p.units, pl.start + pl.size);
                }
        }
        if (g->memory_units > 0)
                p.units = g->memory_units;

        keep_gi = calloc(p.n_gis + 1, sizeof(*keep_gi));
        ci_base = calloc(p.n_gis + 1, sizeof(*ci_base));
        if (!keep_gi || !ci_base)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < p.n_gis; i++)
                ci_base[i + 1] = ci_base[i] + p.gis[i].n_cis;
        keep_ci = calloc(ci_base[p.n_gis] + 1, sizeof(*keep_ci));
        if (!keep_ci)
                return mk_error_set(e, -ENOMEM, "Out of memory");

        if (mig_enabled) {
                if (p.units > PLAN_MAX_UNITS || p.slices > PLAN_MAX_UNITS)
                        return mk_error_set(e, -EOPNOTSUPP,
                                            "GPU %u (%s): %u memory units and %u compute slices; the planner handles "
                                            "at most %u",
                                            g->index, g->name, p.units, p.slices, PLAN_MAX_UNITS);
                fit = plan_fit_new(&p);
                p.fit = fit;
                r = plan_layout(&p, desired, &plan, keep_gi, keep_ci, ci_base, e);
                if (r < 0)
                        goto fail;
        }

        r = build_destroy(&p, &plan, keep_gi, keep_ci, ci_base);
        if (r < 0) {
                r = mk_error_set(e, r, "Out of memory");
                goto fail;
        }
        plan.layout_change = plan.n_destroy > 0 || plan.n_new_gis > 0 || plan.n_new_cis > 0;
        plan.search_nodes = (size_t) p.nodes;
        *ret = plan;
        return 0;

fail:
        mk_gpu_plan_done(&plan);
        return r;
}
