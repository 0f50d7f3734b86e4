/* MIG fitting for dynamic scheduling (fit.h; formulas in docs/scheduler-fit.md):
 * placing one request on one node. For each available GPU the best room it
 * offers the request, the request's GPUs in the policy's order, the node's
 * sums after the allocation and its score; from the GPU descriptions
 * (fit_place_read) or from a node cache (fit_place_cached, kept by the
 * caller with mk_fit_node_cache_update), which gives fit_place_read()'s
 * answers exactly (integer sums, the same rules). No allocation: per-call
 * state lives on the stack, bounded by the caps in fit.h.
 *
 * The rest of the module, by concern:
 *   fit-geometry.c  one GPU: masks, the capacity value C, capacity tables,
 *                   free placements, fragmentation, validation
 *   fit-score.c     the policy, written once (fit-score.h): the placement
 *                   tie-break, the GPU order, the node score, policy names
 *
 * Kinds of room. The request gets one room on each of `gpus` distinct GPUs;
 * today one kind, a MIG instance at a placement (the smallest adequate
 * profile, the placement by fit_pick_offer()): mig_best() finds it on one
 * GPU, mig_after() adds the GPU after it to the node's sums. A second kind
 * (the unified pool's soft slice of a whole GPU, with a memory cap, cores
 * and a number of sharers) plugs in beside them in fit_place_read(): its
 * own best room over the GPU's sharing state, giving a fit_cand that
 * fit_cand_compare() orders against a MIG one (the better of the two per
 * GPU), its own "after", a field of fit_needs saying which kinds a request
 * accepts (a pod without a mode: both), and a tag in fit_cand saying which
 * "after" applies. The node-cache path stays MIG-only; a request accepting
 * another kind is placed from the GPU descriptions. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/macro.h"
#include "plan/fit-geometry.h"
#include "plan/fit-score.h"
#include "plan/fit.h"

/* What one request needs of a GPU, from mk_fit_request. */
struct fit_needs {
        bool whole;                     /* the whole GPU (a profile covering every unit) */
        uint64_t mem_mib;               /* when not whole; 0: from mem_percent */
        unsigned mem_percent;
        unsigned cores;                 /* floor on the core share, percent; 0: none */
        const char *variant;            /* NULL or "": attribute-free profiles only */
};

/* --- which profiles ------------------------------------------------------------------ */

/* The memory a request asks for on a GPU of `memory_mib` (0 when whole). */
static uint64_t needs_mib(const struct fit_needs *n, uint64_t memory_mib) {
        if (n->whole || n->mem_mib > 0)
                return n->mem_mib;
        return (memory_mib * n->mem_percent + 99) / 100; /* caller checked the range */
}

/* Whether profile `p` (pi: its fit information), which has placements, is
 * adequate for the request on a GPU of `units` memory units, `sms` SMs and
 * `slices` compute slices: variant, memory (or every unit when whole),
 * cores. */
static inline bool profile_adequate(const struct mk_gi_profile *p, const struct fit_pinfo *pi, unsigned units,
                                    uint64_t need, const struct fit_needs *n, unsigned sms, unsigned slices) {
        if (n->variant && *n->variant ? !fit_variant_matches(p, n->variant) : !pi->base)
                return false;
        if (n->whole ? pi->size != units : need == 0 || p->memory_mib < need)
                return false;
        return n->cores == 0 || fit_profile_cores(sms, slices, p) >= n->cores;
}

/* Inserts profile j into order[0..*n), kept smallest first
 * (fit_profile_rank_compare) and stable: equal ranks in index order. */
static void rank_insert(const struct mk_gi_profile *profiles, uint8_t *order, size_t *n, size_t j) {
        size_t k = (*n)++;
        while (k > 0 && fit_profile_rank_compare(&profiles[order[k - 1]], &profiles[j]) > 0) {
                order[k] = order[k - 1];
                k--;
        }
        order[k] = (uint8_t) j;
}

/* Fills ps->order with the profiles adequate for the request on GPU `g`,
 * smallest first, and notes for which GPU values they hold. */
static void adequate_compute(const struct mk_fit_gpu *g, const struct fit_gpu_state *s, const struct fit_needs *n) {
        struct fit_profset *ps = s->ps;
        uint64_t need = needs_mib(n, g->memory_mib);
        ps->n_order = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (p->n_placements == 0 ||
                    !profile_adequate(p, &ps->pi[j], g->memory_units, need, n, s->sms, s->slices))
                        continue;
                rank_insert(g->profiles, ps->order, &ps->n_order, j);
        }
        ps->adq_known = true;
        ps->adq_mem_mib = g->memory_mib;
        ps->adq_sms = s->sms;
        ps->adq_slices = s->slices;
}

/* The profiles adequate for the request on GPU `g`, smallest first, in
 * ps->order; computed once per call for GPUs with the same profile set,
 * memory, SMs and slices. */
static inline void adequate_profiles(const struct mk_fit_gpu *g, const struct fit_gpu_state *s,
                                     const struct fit_needs *n) {
        const struct fit_profset *ps = s->ps;
        if (!ps->adq_known || ps->adq_mem_mib != g->memory_mib || ps->adq_sms != s->sms ||
            ps->adq_slices != s->slices)
                adequate_compute(g, s, n);
}

/* --- the MIG room on one GPU ---------------------------------------------------------- */

/* With capacity tables: profile j's winning placement on the free mask and
 * slices (hostable there), and its loss from C(before) = `cap`. */
static inline struct fit_pick tab_pick(const struct mk_fit_tables *tab, size_t j, const struct mk_gi_profile *p,
                                       uint32_t free, unsigned free_slices, unsigned cap) {
        unsigned start = tab->best[fit_best_index(j, free, free_slices)] - 1u;
        uint32_t m = fit_units_mask(tab->pi[j].size) << start;
        unsigned after = tab->cap[free & ~m][free_slices - p->slices];
        return (struct fit_pick) {.found = true, .profile = j, .start = start, .loss = fit_loss(cap, after)};
}

static struct fit_cand mig_cand(unsigned gi, const struct mk_gi_profile *p, const struct fit_pick *b,
                                unsigned used_units, bool switchable) {
        return (struct fit_cand) {
                .gpu = gi,
                .profile = b->profile,
                .start = b->start,
                .memory_mib = p->memory_mib,
                .slices = p->slices,
                .loss = b->loss,
                .used_units = used_units,
                .switchable = switchable,
        };
}

/* The MIG room on GPU `gi`: the smallest adequate profile with a free
 * placement, at the placement fit_pick_offer() keeps; false when the
 * request has no free placement there. Computes s->cap on the way. */
static inline __attribute__((always_inline)) bool mig_best(const struct mk_fit_gpu *g, struct fit_gpu_state *s,
                                                           unsigned gi, const struct fit_needs *n,
                                                           struct fit_cand *ret) {
        adequate_profiles(g, s, n);
        const struct fit_profset *ps = s->ps;
        const struct mk_fit_tables *tab = ps->tab;
        uint32_t free = s->all & ~s->used;
        struct fit_pick best = FIT_PICK_NONE;
        /* With tables: each profile's winning placement is looked up. */
        for (size_t k = 0; tab && k < ps->n_order; k++) {
                size_t j = ps->order[k];
                const struct mk_gi_profile *p = &g->profiles[j];
                if (best.found && fit_profile_rank_compare(p, &g->profiles[best.profile]) > 0)
                        break;
                if (p->slices > s->free_slices || (ps->pi[j].limited && fit_limit_reached(g, s, j)))
                        continue;
                if (tab->best[fit_best_index(j, free, s->free_slices)] == 0)
                        continue;
                unsigned cap = tab->cap[free][s->free_slices];
                struct fit_pick t = tab_pick(tab, j, p, free, s->free_slices, cap);
                s->cap = cap;
                s->have_cap = true;
                fit_pick_offer(&best, j, t.start, t.loss);
        }
        /* Without: every free placement is valued. */
        for (size_t k = 0; !tab && k < ps->n_order; k++) {
                size_t j = ps->order[k];
                const struct mk_gi_profile *p = &g->profiles[j];
                if (best.found && fit_profile_rank_compare(p, &g->profiles[best.profile]) > 0)
                        break;
                uint32_t fs = fit_free_starts(g, s, j);
                if (!fs)
                        continue;
                if (!s->have_cap) {
                        s->cap = fit_capacity(g, s, free, s->free_slices, SIZE_MAX);
                        s->have_cap = true;
                }
                uint32_t size_mask = fit_units_mask(ps->pi[j].size);
                for (; fs; fs &= fs - 1) {
                        unsigned start = (unsigned) __builtin_ctz(fs);
                        unsigned after =
                                fit_capacity(g, s, free & ~(size_mask << start), s->free_slices - p->slices, j);
                        fit_pick_offer(&best, j, start, fit_loss(s->cap, after));
                }
        }
        if (!best.found)
                return false;
        *ret = mig_cand(gi, &g->profiles[best.profile], &best, fit_popcount32(s->used), g->switchable);
        return true;
}

/* Adds the GPU after the MIG room `c` to the sums: C, ideal, used units,
 * the loss and the empty GPU's capacity. */
static void mig_after(const struct mk_fit_gpu *g, struct fit_gpu_state *s, const struct fit_cand *c,
                      struct fit_sums *sm) {
        const struct mk_gi_profile *p = &g->profiles[c->profile];
        uint32_t m = fit_units_mask(s->ps->pi[c->profile].size) << c->start;
        unsigned cap, ideal;
        fit_frag_parts(g, s, s->all & ~(s->used | m), s->free_slices - p->slices, c->profile, &cap, &ideal);
        sm->cap_sum += cap;
        sm->ideal_sum += ideal;
        sm->used_units += fit_popcount32(s->used | m);
        sm->loss += c->loss;
        sm->empty_cap += fit_ideal_capacity(g, s, g->memory_units, s->slices);
}

/* A message written by hand: no_room() runs for every node a filter finds
 * full, where vsnprintf cost more than the fit itself. `over` once it
 * would not fit (the caller then formats it with mk_error_set, which cuts
 * it as it always did). */
struct fit_msg {
        char *buf;
        size_t len, size;
        bool over;
};

static void msg_put(struct fit_msg *m, const char *s, size_t n) {
        if (m->over || n >= m->size - m->len) {
                m->over = true;
                return;
        }
        memcpy(m->buf + m->len, s, n);
        m->len += n;
}

static void msg_puts(struct fit_msg *m, const char *s) {
        msg_put(m, s, strlen(s));
}

static void msg_put_u64(struct fit_msg *m, uint64_t v) {
        char d[24];
        size_t k = sizeof(d);
        do
                d[--k] = (char) ('0' + v % 10);
        while ((v /= 10) > 0);
        msg_put(m, d + k, sizeof(d) - k);
}

/* The reason's text after "<n> of <m>" (the request's part, the same on
 * every node): " GPUs have a free MIG placement for <what>, <k> needed". */
static void no_room_tail(struct fit_msg *m, const struct mk_fit_request *req, const struct fit_needs *n) {
        msg_puts(m, " GPUs have a free MIG placement for ");
        if (n->whole)
                msg_puts(m, "a whole GPU");
        else if (req->mem_mib > 0) {
                msg_put_u64(m, req->mem_mib);
                msg_puts(m, " MiB");
        } else {
                msg_put_u64(m, req->mem_percent);
                msg_puts(m, "% of GPU memory");
        }
        if (req->cores_percent)
                msg_puts(m, " with cores");
        if (req->variant && *req->variant) {
                msg_puts(m, " variant ");
                msg_puts(m, req->variant);
        }
        msg_puts(m, ", ");
        msg_put_u64(m, req->gpus);
        msg_puts(m, " needed");
}

/* Whether memo `mo` was made for a request with these needs (its key's
 * request part; the GPU kind's is adequate_memo()'s). */
static bool memo_for_needs(const struct mk_fit_memo *mo, const struct fit_needs *n) {
        return mo && mo->known && mo->whole == n->whole && mo->mem_mib == n->mem_mib &&
               mo->mem_percent == n->mem_percent && mo->cores == n->cores && mo->variant == n->variant;
}

/* The request's memo when it was made for this request (the tail it keeps
 * is the request's alone), else NULL. */
static struct mk_fit_memo *tail_memo(const struct mk_fit_request *req, const struct fit_needs *n) {
        return memo_for_needs(req->memo, n) ? req->memo : NULL;
}

/* -ENOSPC: n_cands GPUs have room, fewer than asked. The reason is
 * written for each failed node of a filter (100s per request): the
 * request's part is kept in its memo, and only the message is set. */
static int no_room(const struct mk_fit_node *node, const struct mk_fit_request *req, const struct fit_needs *n,
                   size_t n_cands, struct mk_error *e) {
        if (!e) /* no reason wanted (a prioritize) */
                return -ENOSPC;
        char text[MK_ERROR_MSG_MAX];
        struct fit_msg m = {.buf = text, .size = sizeof(text)};
        msg_put_u64(&m, n_cands);
        msg_puts(&m, " of ");
        msg_put_u64(&m, node->n_gpus);
        struct mk_fit_memo *mo = tail_memo(req, n);
        if (mo && mo->tail_len > 0 && mo->tail_gpus == req->gpus)
                msg_put(&m, mo->tail, mo->tail_len);
        else {
                size_t at = m.len;
                no_room_tail(&m, req, n);
                if (mo && !m.over && m.len - at < sizeof(mo->tail)) {
                        memcpy(mo->tail, text + at, m.len - at);
                        mo->tail_len = (uint8_t) (m.len - at);
                        mo->tail_gpus = req->gpus;
                }
        }
        if (m.over) { /* a long variant: cut as mk_error_set() cuts */
                bool variant = req->variant && *req->variant;
                char what[96];
                if (n->whole)
                        (void) snprintf(what, sizeof what, "a whole GPU");
                else if (req->mem_mib > 0)
                        (void) snprintf(what, sizeof what, "%" PRIu64 " MiB", req->mem_mib);
                else
                        (void) snprintf(what, sizeof what, "%u%% of GPU memory", req->mem_percent);
                return mk_error_set(e, -ENOSPC, "%zu of %zu GPUs have a free MIG placement for %s%s%s%s, %u needed",
                                    n_cands, node->n_gpus, what, req->cores_percent ? " with cores" : "",
                                    variant ? " variant " : "", variant ? req->variant : "", req->gpus);
        }
        /* As mk_error_set() leaves it, without clearing 1 KiB per node. */
        e->code = -ENOSPC;
        e->file[0] = 0;
        e->line = e->column = 0;
        e->field[0] = 0;
        memcpy(e->msg, text, m.len);
        e->msg[m.len] = 0;
        return -ENOSPC;
}

/* --- the node ----------------------------------------------------------------------------- */

/* The fit from the GPU descriptions. */
static int fit_place_read(const struct mk_fit_node *node, const struct mk_fit_request *req, const struct fit_needs *n,
                   enum mk_fit_policy gpu_policy, struct fit_cand cands[static MK_FIT_MAX_NODE_GPUS],
                   struct fit_sums *ret, struct mk_error *e) {
        struct fit_profcache pc;
        fit_profcache_init(&pc);
        struct fit_gpu_state st[MK_FIT_MAX_NODE_GPUS];
        size_t n_cands = 0;
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct fit_gpu_state *s = &st[gi];
                if (g->unavailable)
                        continue;
                if (fit_gpu_prepare(&pc, g, s) < 0)
                        return mk_error_set(e, -EINVAL, "GPU %zu: malformed description", gi);
                if (!n->whole && n->mem_mib == 0 && g->memory_mib > UINT64_MAX / 100)
                        return mk_error_set(e, -EINVAL, "GPU %zu: memory out of range", gi);
                if (mig_best(g, s, (unsigned) gi, n, &cands[n_cands]))
                        n_cands++;
        }
        if (n_cands < req->gpus)
                return no_room(node, req, n, n_cands, e);
        fit_cands_select(cands, n_cands, req->gpus, gpu_policy);

        /* The node after the allocation: utilisation, fragmentation, and the
         * share of an empty GPU's capacity the allocation destroys. */
        struct fit_sums sm = {};
        uint64_t chosen = 0;
        for (size_t k = 0; k < req->gpus; k++) {
                const struct fit_cand *c = &cands[k];
                chosen |= UINT64_C(1) << c->gpu;
                mig_after(&node->gpus[c->gpu], &st[c->gpu], c, &sm);
        }
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct fit_gpu_state *s = &st[gi];
                if (g->unavailable)
                        continue;
                sm.total_units += g->memory_units;
                if (chosen & (UINT64_C(1) << gi))
                        continue;
                uint32_t free = s->all & ~s->used;
                unsigned cap = s->have_cap ? s->cap : fit_capacity(g, s, free, s->free_slices, SIZE_MAX);
                sm.cap_sum += cap;
                sm.ideal_sum += MAX(cap, fit_ideal_capacity(g, s, fit_popcount32(free), s->free_slices));
                sm.used_units += fit_popcount32(s->used);
        }
        *ret = sm;
        return 0;
}

/* A one-GPU request whose smallest adequate profile j (hosted somewhere)
 * has a rank of its own: every GPU that can host j takes it, and no other
 * GPU comes before them. Among the GPUs that did not change since the
 * cache with winners (c itself, or the one c derives from) was made, the
 * winner is that cache's (or, when it sits on a changed GPU, its runner-up,
 * the best of the others); it meets the changed GPUs' own rooms. Into
 * *ret, *ret_n 0 or 1; false when both sit on changed GPUs (or c has no
 * cache with winners): the caller scans the GPUs. */
static bool cached_winner(const struct mk_fit_node *node, const struct mk_fit_node_cache *c, size_t j,
                          enum mk_fit_policy gpu_policy, struct fit_cand *ret, size_t *ret_n) {
        const struct mk_fit_node_cache *bc = c->has_best ? c : c->base;
        uint64_t changed = c->has_best ? 0 : c->changed;
        if (!bc || !bc->has_best || !(bc->hostable & (UINT64_C(1) << j)))
                return false;
        const struct mk_fit_gpu *g0 = &c->desc;
        const struct mk_fit_tables *tab = g0->tables;
        const struct mk_gi_profile *p = &g0->profiles[j];
        uint32_t all = fit_units_mask(g0->memory_units);
        const struct mk_fit_node_cache_winners *w = &bc->win[gpu_policy][j];
        const struct mk_fit_node_cache_best *nb = &w->best;
        if (nb->gpu == UINT8_MAX || (changed & (UINT64_C(1) << nb->gpu)))
                nb = &w->second;
        if (nb->gpu != UINT8_MAX && (changed & (UINT64_C(1) << nb->gpu)))
                return false;
        size_t n = 0;
        if (nb->gpu != UINT8_MAX) {
                struct fit_pick b = {.found = true, .profile = j, .start = nb->start, .loss = nb->loss};
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[nb->gpu];
                *ret = mig_cand(nb->gpu, p, &b, cg->used_units, cg->switchable);
                n = 1;
        }
        for (uint64_t m = changed; m; m &= m - 1) {
                size_t gi = (size_t) __builtin_ctzll(m);
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                if (gi >= node->n_gpus || !(cg->hostable & (UINT64_C(1) << j)))
                        continue;
                struct fit_pick t = tab_pick(tab, j, p, all & ~cg->used, cg->free_slices, cg->cap);
                struct fit_cand cd = mig_cand((unsigned) gi, p, &t, cg->used_units, cg->switchable);
                if (n == 0 || fit_cand_compare(&cd, ret, gpu_policy) < 0)
                        *ret = cd;
                n = 1;
        }
        *ret_n = n;
        return true;
}

/* The profiles adequate for the request on the node's kind of GPU, in
 * c->rank's order (a function of the profile array): from `memo` when it
 * was computed for this request and kind, else computed (into `memo`, or
 * `own`, the call's, when there is none). */
static const struct mk_fit_memo *adequate_memo(const struct mk_fit_gpu *g0, const struct mk_fit_tables *tab,
                                               const struct mk_fit_node_cache *c, const struct fit_needs *n,
                                               struct mk_fit_memo *memo, struct mk_fit_memo *own) {
        unsigned slices = g0->slices > 0 ? g0->slices : tab->max_slices;
        unsigned sms = g0->multiprocessors > 0 ? g0->multiprocessors : tab->max_sms;
        if (memo_for_needs(memo, n) && memo->profiles == g0->profiles && memo->n_profiles == g0->n_profiles &&
            memo->tables == tab && memo->memory_units == g0->memory_units && memo->memory_mib == g0->memory_mib &&
            memo->sms == sms && memo->slices == slices)
                return memo;
        struct mk_fit_memo *mo = memo ? memo : own;
        *mo = (struct mk_fit_memo) {
                .known = true,
                .whole = n->whole,
                .profiles = g0->profiles,
                .tables = tab,
                .variant = n->variant,
                .n_profiles = g0->n_profiles,
                .memory_mib = g0->memory_mib,
                .mem_mib = n->mem_mib,
                .memory_units = g0->memory_units,
                .sms = sms,
                .slices = slices,
                .mem_percent = n->mem_percent,
                .cores = n->cores,
        };
        uint64_t need = needs_mib(n, g0->memory_mib);
        for (size_t k = 0; k < g0->n_profiles; k++) {
                size_t j = c->rank[k];
                if (profile_adequate(&g0->profiles[j], &tab->pi[j], g0->memory_units, need, n, sms, slices))
                        mo->order[mo->n_order++] = (uint8_t) j;
        }
        return mo;
}

/* The fit from the node cache: the same choices and sums as fit_place_read()
 * (one GPU description, tables, MIG rooms only), from the cached per-GPU
 * state. */
static int fit_place_cached(const struct mk_fit_node *node, const struct mk_fit_node_cache *c,
                     const struct mk_fit_request *req, const struct fit_needs *n, enum mk_fit_policy gpu_policy,
                     struct fit_cand cands[static MK_FIT_MAX_NODE_GPUS], struct fit_sums *ret, struct mk_error *e) {
        const struct mk_fit_gpu *g0 = &c->desc;
        const struct mk_fit_tables *tab = g0->tables;
        const struct mk_gi_profile *profiles = g0->profiles;
        if (!n->whole && n->mem_mib == 0 && g0->memory_mib > UINT64_MAX / 100)
                return mk_error_set(e, -EINVAL, "GPU %zu: memory out of range", c->first);

        /* The adequate profiles hosted somewhere, smallest first (adequate_profiles()'s order):
         * the adequate ones from the request's memo, those hosted here kept. */
        struct mk_fit_memo own;
        const struct mk_fit_memo *mo = adequate_memo(g0, tab, c, n, req->memo, &own);
        uint8_t order[MK_FIT_MAX_PROFILES];
        size_t n_order = 0;
        uint64_t adequate = 0;
        for (size_t k = 0; k < mo->n_order; k++) {
                size_t j = mo->order[k];
                if (!(c->hostable & (UINT64_C(1) << j)))
                        continue;
                order[n_order++] = (uint8_t) j;
                adequate |= UINT64_C(1) << j;
        }

        uint32_t all = fit_units_mask(g0->memory_units);
        size_t n_cands = 0;
        if (req->gpus == 1 && n_order > 0 &&
            (n_order == 1 || fit_profile_rank_compare(&profiles[order[1]], &profiles[order[0]]) != 0) &&
            cached_winner(node, c, order[0], gpu_policy, &cands[0], &n_cands))
                adequate = 0; /* skip the scan */
        for (size_t gi = 0; adequate && gi < node->n_gpus; gi++) {
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                uint64_t avail = cg->hostable & adequate;
                if (!avail)
                        continue;
                uint32_t free = all & ~cg->used;
                struct fit_pick best = FIT_PICK_NONE;
                for (size_t k = 0; k < n_order; k++) {
                        size_t j = order[k];
                        if (!(avail & (UINT64_C(1) << j)))
                                continue;
                        const struct mk_gi_profile *p = &profiles[j];
                        if (best.found && fit_profile_rank_compare(p, &profiles[best.profile]) > 0)
                                break;
                        struct fit_pick t = tab_pick(tab, j, p, free, cg->free_slices, cg->cap);
                        fit_pick_offer(&best, j, t.start, t.loss);
                }
                cands[n_cands++] =
                        mig_cand((unsigned) gi, &profiles[best.profile], &best, cg->used_units, cg->switchable);
        }
        if (n_cands < req->gpus)
                return no_room(node, req, n, n_cands, e);
        fit_cands_select(cands, n_cands, req->gpus, gpu_policy);

        struct fit_sums sm = {
                .total_units = c->total_units,
                .used_units = c->used_units,
                .cap_sum = c->cap_sum,
                .ideal_sum = c->ideal_sum,
        };
        for (size_t k = 0; k < req->gpus; k++) {
                const struct fit_cand *cd = &cands[k];
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[cd->gpu];
                const struct mk_gi_profile *p = &profiles[cd->profile];
                uint32_t used = cg->used | (fit_units_mask(tab->pi[cd->profile].size) << cd->start);
                uint32_t free = all & ~used;
                unsigned fs = cg->free_slices - p->slices;
                unsigned cap = tab->cap[free][fs];
                unsigned ideal = MAX(cap, (unsigned) tab->cap[fit_units_mask(fit_popcount32(free))][fs]);
                sm.cap_sum = sm.cap_sum - cg->cap + cap;
                sm.ideal_sum = sm.ideal_sum - cg->ideal + ideal;
                sm.used_units = sm.used_units - cg->used_units + fit_popcount32(used);
                sm.loss += cd->loss;
                sm.empty_cap += c->empty_cap;
        }
        *ret = sm;
        return 0;
}

/* --- the node cache ------------------------------------------------------------------------ */

/* One available GPU's cached state, from its state in a call (s->ps->tab set). */
static void cache_gpu_fill(const struct mk_fit_gpu *g, struct fit_gpu_state *s, struct mk_fit_node_cache_gpu *cg) {
        const struct mk_fit_tables *tab = s->ps->tab;
        uint32_t free = s->all & ~s->used;
        unsigned cap, ideal;
        fit_gpu_now(g, s, &cap, &ideal);
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (p->slices > s->free_slices || (s->ps->pi[j].limited && fit_limit_reached(g, s, j)))
                        continue;
                if (tab->best[fit_best_index(j, free, s->free_slices)] != 0)
                        cg->hostable |= UINT64_C(1) << j;
        }
        cg->used = s->used;
        cg->cap = (uint16_t) cap;
        cg->ideal = (uint16_t) ideal;
        cg->free_slices = (uint8_t) s->free_slices;
        cg->used_units = (uint8_t) fit_popcount32(s->used);
        cg->available = true;
        cg->switchable = g->switchable;
}

/* A winner as the cache keeps it (gpu UINT8_MAX: none). */
static struct mk_fit_node_cache_best cache_best(const struct fit_cand *cd) {
        return (struct mk_fit_node_cache_best) {
                .gpu = cd->gpu == UINT_MAX ? UINT8_MAX : (uint8_t) cd->gpu,
                .start = (uint8_t) cd->start,
                .loss = (uint16_t) cd->loss,
        };
}

/* The node's sums and hostable union over the cached GPUs. */
static void cache_sums(const struct mk_fit_node *node, struct mk_fit_node_cache *c) {
        uint64_t hostable = 0;
        unsigned total_units = 0, used_units = 0, cap_sum = 0, ideal_sum = 0;
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                if (!cg->available)
                        continue;
                hostable |= cg->hostable;
                total_units += node->gpus[gi].memory_units;
                used_units += cg->used_units;
                cap_sum += cg->cap;
                ideal_sum += cg->ideal;
        }
        c->hostable = hostable;
        c->total_units = total_units;
        c->used_units = used_units;
        c->cap_sum = cap_sum;
        c->ideal_sum = ideal_sum;
}

/* What every derived cache takes from `from` (ret != from: the per-GPU
 * states to change), and the cache with winners it derives from. Marks
 * *ret unusable; false when `from` cannot be derived from. */
static bool derive_begin(const struct mk_fit_node *node, const struct mk_fit_node_cache *from, uint64_t changed,
                         struct mk_fit_node_cache *ret) {
        bool ok = from->usable && from->n_gpus == node->n_gpus && node->gpus;
        if (ret != from) {
                ret->first = from->first;
                ret->desc = from->desc;
                ret->empty_cap = from->empty_cap;
                memcpy(ret->rank, from->rank, sizeof(ret->rank));
                memcpy(ret->gpu, from->gpu, MIN(node->n_gpus, (size_t) MK_FIT_MAX_NODE_GPUS) * sizeof(ret->gpu[0]));
        }
        /* The cache with winners this one derives from, and what changed since. */
        const struct mk_fit_node_cache *base = from->has_best ? (ret != from ? from : NULL) : from->base;
        uint64_t since = (from->has_best ? 0 : from->changed) | changed;
        ret->usable = false;
        ret->has_best = false;
        ret->base = base;
        ret->changed = since;
        ret->gpus = node->gpus;
        ret->n_gpus = node->n_gpus;
        return ok;
}

/* Instances of profile id `id` on GPU gi: its description's, and those of
 * `extra` (choices not in the description) on it. */
static unsigned count_profile(const struct mk_fit_gpu *g, size_t gi, unsigned id, const struct mk_fit_choice *extra,
                              size_t n_extra) {
        unsigned count = 0;
        for (size_t i = 0; i < g->n_used; i++)
                count += g->used[i].profile_id == id;
        for (size_t i = 0; i < n_extra; i++)
                count += extra[i].gpu == gi && extra[i].profile->id == id;
        return count;
}

/* GPU gi's cached state `cg` after an instance of profile j at unit
 * `start` was taken, from its state before: what cache_gpu_fill()
 * computes, without reading the instances. `g` is the description every
 * available GPU of a usable cache shares: node->gpus[gi] is read only to
 * count a limited profile's instances, its description's and `extra`'s on
 * it, when j is limited to more than one (another profile's count is
 * unchanged, and one limited to one is full). false when the choice does
 * not fit the state (the caller gives up: the pod is fitted on a copy of
 * the GPUs). */
static bool derive_gpu_take(const struct mk_fit_node *node, const struct mk_fit_gpu *g, size_t gi,
                            const struct mk_fit_tables *tab, size_t j, unsigned start,
                            const struct mk_fit_choice *extra, size_t n_extra, struct mk_fit_node_cache_gpu *cg) {
        if (!cg->available || j >= g->n_profiles || g->tables != tab || !fit_tables_match(tab, g))
                return false;
        const struct mk_gi_profile *p = &g->profiles[j];
        if (start + tab->pi[j].size > g->memory_units || p->slices > cg->free_slices)
                return false;
        uint32_t m = fit_units_mask(tab->pi[j].size) << start;
        uint32_t all = fit_units_mask(g->memory_units);
        if (cg->used & m)
                return false;
        uint32_t used = cg->used | m, free = all & ~used;
        unsigned fs = cg->free_slices - p->slices;
        if (fs > FIT_TAB_SLICES)
                return false;
        unsigned cap = tab->cap[free][fs];
        unsigned ideal = MAX(cap, (unsigned) tab->cap[fit_units_mask(fit_popcount32(free))][fs]);
        /* A profile hostable now was hostable before: fewer free units and
         * slices, more instances (of j only: a limited j is counted). */
        uint64_t hostable = 0;
        bool j_full = false;
        if (tab->pi[j].limited && cg->hostable & (UINT64_C(1) << j)) {
                const struct mk_fit_gpu *own = &node->gpus[gi];
                if (p->max_count > 1 && own->n_used > MK_FIT_MAX_INSTANCES)
                        return false;
                j_full = p->max_count <= 1 || count_profile(own, gi, p->id, extra, n_extra) >= p->max_count;
        }
        for (uint64_t h = cg->hostable; h; h &= h - 1) {
                size_t k = (size_t) __builtin_ctzll(h);
                const struct mk_gi_profile *q = &g->profiles[k];
                if (q->slices > fs || tab->best[fit_best_index(k, free, fs)] == 0 || (k == j && j_full))
                        continue;
                hostable |= UINT64_C(1) << k;
        }
        cg->hostable = hostable;
        cg->used = used;
        cg->cap = (uint16_t) cap;
        cg->ideal = (uint16_t) ideal;
        cg->free_slices = (uint8_t) fs;
        cg->used_units = (uint8_t) fit_popcount32(used);
        return true;
}

int mk_fit_node_cache_derive_taken(const struct mk_fit_node *node, const struct mk_fit_node_cache *from,
                                   const struct mk_fit_result *res, const struct mk_fit_choice *taken,
                                   size_t n_taken, struct mk_fit_node_cache *ret) {
        uint64_t changed = 0;
        for (size_t i = 0; i < res->n_choices; i++)
                if (res->choices[i].gpu < MK_FIT_MAX_NODE_GPUS)
                        changed |= UINT64_C(1) << res->choices[i].gpu;
        unsigned used_units = from->used_units, cap_sum = from->cap_sum, ideal_sum = from->ideal_sum,
                 total_units = from->total_units;
        if (!derive_begin(node, from, changed, ret))
                return -EOPNOTSUPP;
        /* Every available GPU of a usable cache shares the first's
         * description, which the cache keeps: no GPU's is read. */
        const struct mk_fit_gpu *g0 = &from->desc;
        const struct mk_fit_tables *tab = g0->tables;
        for (size_t i = 0; i < res->n_choices; i++) {
                const struct mk_fit_choice *ch = &res->choices[i];
                size_t gi = ch->gpu;
                if (gi >= node->n_gpus || ch->profile < g0->profiles)
                        return -EOPNOTSUPP;
                struct mk_fit_node_cache_gpu *cg = &ret->gpu[gi];
                struct mk_fit_node_cache_gpu was = *cg;
                if (!derive_gpu_take(node, g0, gi, tab, (size_t) (ch->profile - g0->profiles), ch->placement.start,
                                     taken, n_taken, cg))
                        return -EOPNOTSUPP;
                used_units = used_units - was.used_units + cg->used_units;
                cap_sum = cap_sum - was.cap + cg->cap;
                ideal_sum = ideal_sum - was.ideal + cg->ideal;
        }
        uint64_t hostable = 0;
        for (size_t gi = 0; gi < node->n_gpus; gi++)
                if (ret->gpu[gi].available)
                        hostable |= ret->gpu[gi].hostable;
        ret->hostable = hostable;
        ret->total_units = total_units;
        ret->used_units = used_units;
        ret->cap_sum = cap_sum;
        ret->ideal_sum = ideal_sum;
        ret->usable = true;
        return 0;
}

int mk_fit_node_cache_update(const struct mk_fit_node *node, struct mk_fit_node_cache *c) {
        c->usable = false;
        c->has_best = false;
        c->base = NULL;
        c->changed = 0;
        c->gpus = node->gpus;
        c->n_gpus = node->n_gpus;
        if (node->n_gpus > MK_FIT_MAX_NODE_GPUS || (node->n_gpus > 0 && !node->gpus))
                return -EINVAL;
        const struct mk_fit_gpu *g0 = NULL;
        struct fit_profcache pc;
        fit_profcache_init(&pc);
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                *cg = (struct mk_fit_node_cache_gpu) {};
                if (g->unavailable)
                        continue;
                struct fit_gpu_state s;
                if (fit_gpu_prepare(&pc, g, &s) < 0)
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
                cache_gpu_fill(g, &s, cg);
        }
        if (!g0)
                return -EOPNOTSUPP;
        c->desc = *g0;
        c->desc.used = NULL;
        c->desc.n_used = 0;
        cache_sums(node, c);
        uint64_t hostable = c->hostable;
        /* Smallest first, stable: adequate_profiles()'s insertion order. */
        size_t n = 0;
        for (size_t j = 0; j < g0->n_profiles; j++)
                rank_insert(g0->profiles, c->rank, &n, j);
        /* Per profile and GPU policy, the GPU a one-GPU request of that
         * profile gets when it is the smallest adequate one (fit_place_cached()). */
        const struct mk_fit_tables *tab = g0->tables;
        uint32_t all = fit_units_mask(g0->memory_units);
        for (size_t j = 0; j < g0->n_profiles; j++) {
                if (!(hostable & (UINT64_C(1) << j)))
                        continue;
                const struct mk_gi_profile *p = &g0->profiles[j];
                for (int pol = 0; pol < _MK_FIT_POLICY_MAX; pol++) {
                        struct fit_cand best = {.gpu = UINT_MAX}, second = {.gpu = UINT_MAX};
                        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                                const struct mk_fit_node_cache_gpu *cg = &c->gpu[gi];
                                if (!(cg->hostable & (UINT64_C(1) << j)))
                                        continue;
                                struct fit_pick t = tab_pick(tab, j, p, all & ~cg->used, cg->free_slices, cg->cap);
                                struct fit_cand cd = mig_cand((unsigned) gi, p, &t, cg->used_units, cg->switchable);
                                if (best.gpu == UINT_MAX || fit_cand_compare(&cd, &best, (enum mk_fit_policy) pol) < 0) {
                                        second = best;
                                        best = cd;
                                } else if (second.gpu == UINT_MAX ||
                                           fit_cand_compare(&cd, &second, (enum mk_fit_policy) pol) < 0)
                                        second = cd;
                        }
                        c->win[pol][j].best = cache_best(&best);
                        c->win[pol][j].second = cache_best(&second);
                }
        }
        c->empty_cap = tab->cap[all][g0->slices > 0 ? g0->slices : tab->max_slices];
        c->has_best = true;
        c->usable = true;
        return 0;
}

/* --- the entry ---------------------------------------------------------------------------- */

int mk_fit_node(const struct mk_fit_node *node, const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                enum mk_fit_policy gpu_policy, struct mk_fit_result *ret, struct mk_error *e) {
        int r = fit_request_check(req, node_policy, gpu_policy, e);
        if (r < 0)
                return r;
        if (node->n_gpus > MK_FIT_MAX_NODE_GPUS || (node->n_gpus > 0 && !node->gpus))
                return mk_error_set(e, -EINVAL, "node with %zu GPUs, more than %u", node->n_gpus,
                                    MK_FIT_MAX_NODE_GPUS);

        /* CPU and memory first: cheap, and a node without room needs no GPU work. */
        double res_util = 0;
        if (node->resources) {
                r = fit_resources_fit(node->resources, req, &res_util, e);
                if (r < 0)
                        return r;
        }

        struct fit_needs n = {
                .whole = req->mem_mib == 0 && (req->mem_percent == 0 || req->mem_percent == 100),
                .mem_mib = req->mem_mib,
                .mem_percent = req->mem_percent,
                .cores = req->cores_percent,
                .variant = req->variant,
        };
        struct fit_cand cands[MK_FIT_MAX_NODE_GPUS];
        struct fit_sums sm = {};
        /* The request's GPUs, best first, and the node's sums after the
         * allocation: from the node cache when it is usable for this node
         * (fit_place_cached), else from the GPU descriptions
         * (fit_place_read); both give the same answer. */
        const struct mk_fit_node_cache *c = node->cache;
        bool cached = c && c->usable && c->gpus == node->gpus && c->n_gpus == node->n_gpus;
        int q = cached ? fit_place_cached(node, c, req, &n, gpu_policy, cands, &sm, e)
                       : fit_place_read(node, req, &n, gpu_policy, cands, &sm, e);
        if (q < 0)
                return q;

        double score, frag;
        fit_node_score(&sm, node_policy, FIT_W_UTIL_BINPACK, node->resources != NULL, res_util, &score, &frag);
        for (size_t k = 0; k < req->gpus; k++) {
                /* A usable cache's GPUs share its description's profiles. */
                const struct mk_gi_profile *p =
                        &(cached ? c->desc.profiles : node->gpus[cands[k].gpu].profiles)[cands[k].profile];
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
