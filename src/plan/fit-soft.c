/* Soft-slice fitting and the mode choice of the unified pool (fit-soft.h;
 * docs/scheduler-fit.md §9, §10). The node score reuses fit.h's formula
 * (fit_node_score() in fit-score.h) with memory in MiB where the MIG fit
 * counts memory units, so the two scores read alike. No allocation: per-call
 * state lives on the stack, bounded by MK_FIT_MAX_NODE_GPUS. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <strings.h>

#include "base/error.h"
#include "base/macro.h"
#include "plan/fit-score.h"
#include "plan/fit-soft.h"

/* One shared GPU as the fit reads it. */
struct soft_state {
        uint64_t mem_used;              /* MiB held by slices (each capped at the GPU's memory) */
        unsigned cores_used;            /* percent, capped at 100 */
        unsigned split;
};

static unsigned soft_split(const struct mk_fit_shared_gpu *g) {
        return g->split ? g->split : MK_FIT_SOFT_DEFAULT_SPLIT;
}

/* The memory a request asks for on a GPU of `memory_mib`. */
static uint64_t soft_need(const struct mk_fit_request *req, uint64_t memory_mib) {
        if (req->mem_mib > 0)
                return req->mem_mib;
        unsigned pct = req->mem_percent == 0 ? 100 : req->mem_percent;
        return (memory_mib * pct + 99) / 100; /* memory_mib <= 2^24: no overflow */
}

static int soft_read(const struct mk_fit_shared_gpu *g, struct soft_state *s) {
        if (g->memory_mib == 0 || g->memory_mib > MK_FIT_SOFT_MAX_GPU_MIB || g->split > MK_FIT_SOFT_MAX_SLICES ||
            g->n_used > MK_FIT_SOFT_MAX_SLICES || (g->n_used > 0 && !g->used))
                return -EINVAL;
        *s = (struct soft_state) {.split = soft_split(g)};
        for (size_t i = 0; i < g->n_used; i++) {
                s->mem_used += MIN(g->used[i].memory_mib, g->memory_mib);
                s->cores_used += MIN(g->used[i].cores, 100u);
        }
        s->mem_used = MIN(s->mem_used, g->memory_mib);
        s->cores_used = MIN(s->cores_used, 100u);
        return 0;
}

/* HAMi's rules for one more slice of `need` MiB and `cores` percent. */
static bool soft_room(const struct mk_fit_shared_gpu *g, const struct soft_state *s, uint64_t need, unsigned cores) {
        if (g->n_used >= s->split || need > g->memory_mib - s->mem_used)
                return false;
        if (cores > 100 - s->cores_used)
                return false;
        if (cores >= 100 && g->n_used > 0)
                return false;
        return !(cores == 0 && s->cores_used >= 100);
}

/* Free memory a later slice could still use: none without a sharer slot or
 * with every core booked. */
static uint64_t soft_usable(uint64_t free, size_t n_used, unsigned split, unsigned cores_used) {
        return n_used >= split || cores_used >= 100 ? 0 : free;
}

/* The soft capacity value of `free` MiB on a GPU of `memory` MiB with
 * `slots` more slices possible (docs/scheduler-fit.md §9): for each size
 * memory / d, d = 1, 2, 4, 8 (a whole GPU, a half, a quarter, an eighth: the
 * memory classes of 7g, 3g/4g, 2g/1g.20gb and 1g), how much of it slices of
 * that size could still take, at most `slots` of them. A slice loses
 * Cs(before) - Cs(after): the tightest hole that holds it loses least, an
 * empty GPU most (buddy allocation on memory); the node score's `keep`
 * counts it, so nodes are compared by what the slice destroys. */
static uint64_t soft_capacity(uint64_t free, uint64_t memory, unsigned slots) {
        uint64_t c = 0;
        for (unsigned d = 1; d <= 8; d *= 2) {
                uint64_t size = memory / d;
                if (size > 0)
                        c += size * MIN(free / size, (uint64_t) slots);
        }
        return c;
}

/* The sharer slots a GPU offers: none with every core booked. */
static unsigned soft_slots(size_t n_used, unsigned split, unsigned cores_used) {
        return cores_used >= 100 || n_used >= split ? 0 : split - (unsigned) n_used;
}

struct soft_cand {
        unsigned gpu;
        uint64_t left;                  /* free MiB after the slice */
        uint64_t need;                  /* the slice's MiB */
        size_t n_used;                  /* slices before */
        unsigned cores_used, split;
        bool switchable;
};

/* The GPU order: non-switchable first; binpack: least left (best fit), most
 * sharers; spread: most left, fewest sharers; then the index. */
static int soft_cand_compare(const struct soft_cand *a, const struct soft_cand *b, enum mk_fit_policy p) {
        if (a->switchable != b->switchable)
                return a->switchable ? 1 : -1;
        if (a->left != b->left)
                return (p == MK_FIT_BINPACK) == (a->left < b->left) ? -1 : 1;
        if (a->n_used != b->n_used)
                return (p == MK_FIT_BINPACK) == (a->n_used > b->n_used) ? -1 : 1;
        return a->gpu < b->gpu ? -1 : a->gpu > b->gpu;
}

static int soft_no_room(const struct mk_fit_soft_node *node, const struct mk_fit_request *req, size_t n_cands,
                        struct mk_error *e) {
        char what[64];
        if (req->mem_mib > 0)
                (void) snprintf(what, sizeof what, "%" PRIu64 " MiB", req->mem_mib);
        else if (req->mem_percent > 0 && req->mem_percent < 100)
                (void) snprintf(what, sizeof what, "%u%% of their memory", req->mem_percent);
        else
                (void) snprintf(what, sizeof what, "all their memory");
        return mk_error_set(e, -ENOSPC, "%zu of %zu shared GPUs have %s and %u%% cores free and a sharer slot, %u needed",
                            n_cands, node->n_gpus, what, req->cores_percent, req->gpus);
}

int mk_fit_soft_node(const struct mk_fit_soft_node *node, const struct mk_fit_request *req,
                     enum mk_fit_policy node_policy, enum mk_fit_policy gpu_policy, struct mk_fit_soft_result *ret,
                     struct mk_error *e) {
        int r = fit_request_check(req, node_policy, gpu_policy, e);
        if (r < 0)
                return r;
        if (node->n_gpus > MK_FIT_MAX_NODE_GPUS || (node->n_gpus > 0 && !node->gpus))
                return mk_error_set(e, -EINVAL, "node with %zu shared GPUs, more than %u", node->n_gpus,
                                    MK_FIT_MAX_NODE_GPUS);
        if (req->variant && *req->variant)
                return mk_error_set(e, -ENOSPC, "variant %s needs a MIG instance, not a shared GPU", req->variant);
        double res_util = 0;
        if (node->resources) {
                r = fit_resources_fit(node->resources, req, &res_util, e);
                if (r < 0)
                        return r;
        }

        /* One pass: the candidates, and the node's sums before the slices
         * (in MiB where fit.h counts units: used memory, usable free memory
         * as C against free memory as the ideal); the chosen GPUs are then
         * corrected. */
        struct soft_cand cands[MK_FIT_MAX_NODE_GPUS];
        size_t n_cands = 0;
        unsigned cores = MIN(req->cores_percent, 100u);
        struct fit_sums sm = {};
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_shared_gpu *g = &node->gpus[gi];
                if (g->unavailable)
                        continue;
                struct soft_state st;
                if (soft_read(g, &st) < 0)
                        return mk_error_set(e, -EINVAL, "shared GPU %zu: malformed description", gi);
                uint64_t free = g->memory_mib - st.mem_used;
                sm.total_units += (unsigned) g->memory_mib;
                sm.used_units += (unsigned) st.mem_used;
                sm.ideal_sum += (unsigned) free;
                sm.cap_sum += (unsigned) soft_usable(free, g->n_used, st.split, st.cores_used);
                uint64_t need = soft_need(req, g->memory_mib);
                if (!soft_room(g, &st, need, cores))
                        continue;
                cands[n_cands++] = (struct soft_cand) {
                        .gpu = (unsigned) gi,
                        .left = free - need,
                        .need = need,
                        .n_used = g->n_used,
                        .cores_used = st.cores_used,
                        .split = st.split,
                        .switchable = g->switchable && g->n_used == 0,
                };
        }
        if (n_cands < req->gpus)
                return soft_no_room(node, req, n_cands, e);
        FIT_SELECT_BEST(cands, n_cands, req->gpus, soft_cand_compare, gpu_policy);

        /* The chosen GPUs after their slices. What a slice destroys: its
         * loss of soft capacity against an empty GPU's (soft_capacity;
         * computed for the chosen GPUs only, the GPU order is best fit). */
        for (size_t k = 0; k < req->gpus; k++) {
                const struct soft_cand *c = &cands[k];
                uint64_t memory = node->gpus[c->gpu].memory_mib;
                uint64_t free = c->left + c->need;
                unsigned slots = soft_slots(c->n_used, c->split, c->cores_used);
                unsigned slots_after = soft_slots(c->n_used + 1, c->split, c->cores_used + cores);
                uint64_t before = soft_capacity(free, memory, slots);
                uint64_t after = soft_capacity(c->left, memory, slots_after);
                sm.cap_sum -= (unsigned) soft_usable(free, c->n_used, c->split, c->cores_used);
                sm.cap_sum += (unsigned) soft_usable(c->left, c->n_used + 1, c->split, c->cores_used + cores);
                sm.ideal_sum -= (unsigned) c->need;
                sm.used_units += (unsigned) c->need;
                sm.loss += (unsigned) (before > after ? before - after : 0);
                sm.empty_cap += (unsigned) soft_capacity(memory, memory, c->split);
        }
        double score, frag;
        fit_node_score(&sm, node_policy, FIT_W_UTIL_BINPACK_SOFT, node->resources != NULL, res_util, &score, &frag);
        for (size_t k = 0; k < req->gpus; k++)
                ret->choices[k] = (struct mk_fit_soft_choice) {
                        .gpu = cands[k].gpu,
                        .memory_mib = cands[k].need,
                        .cores = cores,
                        .switched = cands[k].switchable,
                };
        ret->n_choices = req->gpus;
        ret->score = score;
        ret->fragmentation = frag;
        return 0;
}

int mk_fit_shared_gpu_validate(const struct mk_fit_shared_gpu *g, struct mk_error *e) {
        if (g->memory_mib == 0 || g->memory_mib > MK_FIT_SOFT_MAX_GPU_MIB)
                return mk_error_set(e, -EINVAL, "memory %" PRIu64 " MiB out of range 1..%" PRIu64, g->memory_mib,
                                    MK_FIT_SOFT_MAX_GPU_MIB);
        if (g->split > MK_FIT_SOFT_MAX_SLICES)
                return mk_error_set(e, -EINVAL, "split %u over %u", g->split, MK_FIT_SOFT_MAX_SLICES);
        if (g->n_used > soft_split(g))
                return mk_error_set(e, -EINVAL, "%zu slices on a GPU split %u ways", g->n_used, soft_split(g));
        if (g->n_used > 0 && !g->used)
                return mk_error_set(e, -EINVAL, "slices missing");
        if (g->switchable && g->n_used > 0)
                return mk_error_set(e, -EINVAL, "a switchable GPU holds %zu slices (must be idle)", g->n_used);
        uint64_t mem = 0;
        unsigned cores = 0;
        for (size_t i = 0; i < g->n_used; i++) {
                const struct mk_fit_soft_slice *s = &g->used[i];
                if (s->memory_mib == 0 || s->memory_mib > g->memory_mib)
                        return mk_error_set(e, -EINVAL, "slice %zu: memory %" PRIu64 " MiB out of range 1..%" PRIu64,
                                            i, s->memory_mib, g->memory_mib);
                if (s->cores > 100)
                        return mk_error_set(e, -EINVAL, "slice %zu: cores %u%% over 100", i, s->cores);
                mem += s->memory_mib;
                cores += s->cores;
        }
        if (mem > g->memory_mib)
                return mk_error_set(e, -EINVAL, "slices hold %" PRIu64 " MiB of %" PRIu64, mem, g->memory_mib);
        if (cores > 100)
                return mk_error_set(e, -EINVAL, "slices hold %u%% cores, over 100", cores);
        return 0;
}

/* --- the mode choice -------------------------------------------------------------- */

static const char *const mode_table[_MK_FIT_MODE_MAX] = {
        [MK_FIT_MODE_MIG] = "mig",
        [MK_FIT_MODE_SOFT] = "hami-core",
};

const char *mk_fit_mode_to_string(enum mk_fit_mode m) {
        if (m < 0 || m >= _MK_FIT_MODE_MAX)
                return NULL;
        return mode_table[m];
}

enum mk_fit_mode mk_fit_mode_from_string(const char *s) {
        if (!s)
                return _MK_FIT_MODE_INVALID;
        for (int i = 0; i < _MK_FIT_MODE_MAX; i++)
                if (strcasecmp(s, mode_table[i]) == 0)
                        return (enum mk_fit_mode) i;
        return _MK_FIT_MODE_INVALID;
}

static const char *const tier_why[_MK_FIT_TIER_MAX] = {
        [MK_FIT_TIER_MIG_CUT_EXACT] = "a MIG profile that fits the request closely is free on an already "
                                      "partitioned GPU",
        [MK_FIT_TIER_SOFT_SHARED] = "an already shared GPU has room: no MIG space and no whole GPU used",
        [MK_FIT_TIER_SOFT_NEW] = "no shared GPU has room: an empty shared GPU (sharing accepts more than a MIG "
                                 "cut with waste)",
        [MK_FIT_TIER_SOFT_SWITCH] = "no shared GPU has room and none is empty; an idle GPU turns shared",
        [MK_FIT_TIER_MIG_CUT] = "no GPU can be shared; an already partitioned GPU has a free MIG placement",
        [MK_FIT_TIER_MIG_NEW_EXACT] = "no GPU can be shared and no partitioned GPU has room; a MIG profile fits "
                                      "the request closely",
        [MK_FIT_TIER_MIG_SWITCH_EXACT] = "no GPU has room in its mode; an idle shared GPU turns MIG",
        [MK_FIT_TIER_MIG_NEW] = "only an empty MIG GPU has room",
        [MK_FIT_TIER_MIG_SWITCH] = "only an idle shared GPU turned MIG has room",
};

bool mk_fit_mig_exact(const struct mk_fit_gpu *g, const struct mk_gi_profile *p, uint64_t need_mib, unsigned cores) {
        if (g->memory_mib == 0)
                return need_mib == 0;
        /* Shares in per mille; memory_mib of real GPUs is far below 2^54. */
        uint64_t want = need_mib == 0 ? 1000 : MIN(need_mib * 1000 / g->memory_mib, UINT64_C(1000));
        want = MAX(want, (uint64_t) MIN(cores, 100u) * 10);
        /* A profile always holds its compute share (its slices are gone
         * for other instances, asked for or not). */
        uint64_t have = MAX(p->memory_mib * 1000 / g->memory_mib, (uint64_t) mk_fit_profile_cores(g, p) * 10);
        return have * 8 <= want * 9;
}

static enum mk_fit_tier mig_tier(const struct mk_fit_node *node, const struct mk_fit_request *req,
                                 const struct mk_fit_result *r) {
        bool exact = true, cut = true, switched = false;
        for (size_t k = 0; k < r->n_choices; k++) {
                const struct mk_fit_gpu *g = &node->gpus[r->choices[k].gpu];
                bool whole = req->mem_mib == 0 && (req->mem_percent == 0 || req->mem_percent == 100);
                uint64_t need = whole ? 0 : soft_need(req, g->memory_mib);
                exact &= mk_fit_mig_exact(g, r->choices[k].profile, need, req->cores_percent);
                cut &= g->n_used > 0;
                switched |= g->switchable && g->n_used == 0;
        }
        if (cut)
                return exact ? MK_FIT_TIER_MIG_CUT_EXACT : MK_FIT_TIER_MIG_CUT;
        if (switched)
                return exact ? MK_FIT_TIER_MIG_SWITCH_EXACT : MK_FIT_TIER_MIG_SWITCH;
        return exact ? MK_FIT_TIER_MIG_NEW_EXACT : MK_FIT_TIER_MIG_NEW;
}

static enum mk_fit_tier soft_tier(const struct mk_fit_soft_node *node, const struct mk_fit_soft_result *r) {
        bool shared = true, switched = false;
        for (size_t k = 0; k < r->n_choices; k++) {
                shared &= node->gpus[r->choices[k].gpu].n_used > 0;
                switched |= r->choices[k].switched;
        }
        return shared ? MK_FIT_TIER_SOFT_SHARED : switched ? MK_FIT_TIER_SOFT_SWITCH : MK_FIT_TIER_SOFT_NEW;
}

/* Tier first (better tiers score higher), then the fit's own score. */
static double tier_score(enum mk_fit_tier t, double score) {
        return ((double) (_MK_FIT_TIER_MAX - 1 - t) * 100.0 + score) / _MK_FIT_TIER_MAX;
}

double mk_fit_mig_tier_score(const struct mk_fit_node *node, const struct mk_fit_request *req,
                             const struct mk_fit_result *r) {
        return tier_score(mig_tier(node, req, r), r->score);
}

/* Both fits, MIG first: the soft fit is skipped when the MIG placement is
 * of the best tier (nothing can beat it). Errors only when asked (formatting
 * a reason per rejected node would cost more than the fits). */
static void choose_fits(const struct mk_fit_node *mig, const struct mk_fit_soft_node *soft,
                        const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                        enum mk_fit_policy gpu_policy, struct mk_fit_mode_result *ret, int *ret_rm,
                        enum mk_fit_tier *ret_tm, struct mk_error *em, int *ret_rs, enum mk_fit_tier *ret_ts,
                        struct mk_error *es) {
        *ret_tm = *ret_ts = _MK_FIT_TIER_MAX;
        if (mig && mig->n_gpus > 0)
                *ret_rm = mk_fit_node(mig, req, node_policy, gpu_policy, &ret->mig, em);
        else
                *ret_rm = mk_error_set(em, -ENOSPC, "no MIG GPU");
        if (*ret_rm == 0)
                *ret_tm = mig_tier(mig, req, &ret->mig);
        if (mk_fit_needs_isolation(req))
                *ret_rs = mk_error_set(es, -ENOSPC, "%u%% cores asks for isolation, never a shared GPU",
                                       req->cores_percent);
        else if (*ret_tm == MK_FIT_TIER_MIG_CUT_EXACT)
                *ret_rs = -ENOSPC; /* not needed */
        else if (soft && soft->n_gpus > 0)
                *ret_rs = mk_fit_soft_node(soft, req, node_policy, gpu_policy, &ret->soft, es);
        else
                *ret_rs = mk_error_set(es, -ENOSPC, "no shared GPU");
        if (*ret_rs == 0)
                *ret_ts = soft_tier(soft, &ret->soft);
}

int mk_fit_choose_mode(const struct mk_fit_node *mig, const struct mk_fit_soft_node *soft,
                       const struct mk_fit_request *req, enum mk_fit_policy node_policy,
                       enum mk_fit_policy gpu_policy, struct mk_fit_mode_result *ret, struct mk_error *e) {
        int r = fit_request_check(req, node_policy, gpu_policy, e);
        if (r < 0)
                return r;
        /* The fits write straight into *ret (no copies on the hot path). */
        int rm, rs;
        enum mk_fit_tier tm, ts;
        choose_fits(mig, soft, req, node_policy, gpu_policy, ret, &rm, &tm, NULL, &rs, &ts, NULL);
        if ((rm < 0 && rs < 0) || rm == -EINVAL || rs == -EINVAL) {
                if (!e)
                        return rm == -EINVAL || rs == -EINVAL ? -EINVAL : -ENOSPC;
                struct mk_error em = {}, es = {};
                choose_fits(mig, soft, req, node_policy, gpu_policy, ret, &rm, &tm, &em, &rs, &ts, &es);
                if (rm == -EINVAL)
                        return mk_error_set(e, rm, "MIG: %s", em.msg);
                if (rs == -EINVAL)
                        return mk_error_set(e, rs, "hami-core: %s", es.msg);
                return mk_error_set(e, -ENOSPC, "MIG: %s; hami-core: %s", em.msg, es.msg);
        }
        if (tm <= ts) {
                ret->mode = MK_FIT_MODE_MIG;
                ret->tier = tm;
                ret->score = tier_score(tm, ret->mig.score);
        } else {
                ret->mode = MK_FIT_MODE_SOFT;
                ret->tier = ts;
                ret->score = tier_score(ts, ret->soft.score);
        }
        ret->why = mk_fit_needs_isolation(req) ? "the request asks for isolation (gpucores 100): MIG only"
                                               : tier_why[ret->tier];
        return 0;
}
