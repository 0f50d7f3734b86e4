/* MIG fitting for dynamic scheduling (fit.h; formulas in docs/scheduler-fit.md).
 *
 * Everything is bit masks over memory units: a GPU's used units, each
 * placement's units. The capacity value of a GPU's free space is
 *
 *     C(F) = sum over allowed attribute-free profiles p of  size(p) * M_p(F)
 *
 * where M_p(F) is how many instances of p could still be created on their
 * own in the free units F (greedy disjoint free placements, capped by the free
 * compute slices and p's remaining instance count). A placement's loss is
 * C(before) - C(after): the free capacity it destroys for every profile
 * size. The smallest adequate profile is placed where the loss is smallest,
 * which keeps large aligned blocks whole (buddy-allocator behaviour: a 1g on
 * an empty GPU goes to unit 6, whose block no 2g can use). Equal losses go
 * to the higher start, next to what is already there (and away from unit 0,
 * where the 4g and the 7g start).
 *
 * No allocation: per-call state lives on the stack, bounded by the caps in
 * fit.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "plan/fit.h"

/* Node score weights (docs/scheduler-fit.md §4). */
#define W_UTIL 0.45
#define W_KEEP 0.35
#define W_FRAG 0.20
#define W_RES 0.15   /* taken from the GPU utilisation weight when CPU/memory are known */

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

/* Per-GPU working state of one call. */
struct gpu_state {
        uint32_t all;                   /* mask of the GPU's units */
        uint32_t used;                  /* units held by instances */
        unsigned slices;                /* compute slices of the GPU */
        unsigned free_slices;
        unsigned sms;                   /* SMs of the whole GPU */
        unsigned counts[MK_FIT_MAX_PROFILES];   /* used instances per allowed profile */
        unsigned cap;                   /* C(free) now */
};

static uint32_t units_mask(unsigned units) {
        return units >= 32 ? UINT32_MAX : ((UINT32_C(1) << units) - 1);
}

static unsigned profile_units(const struct mk_gi_profile *p) {
        return p->n_placements > 0 ? p->placements[0].size : 0;
}

static bool profile_is_base(const struct mk_gi_profile *p) {
        return p->named && p->pname.n_attrs == 0;
}

/* Whether profile name `n` carries exactly the attribute suffix `v`
 * ("+me", "+me.all", "-me", "+a,b"); NULL or "" asks for none. */
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

/* Reads one GPU into `s`; -EINVAL when it cannot be trusted enough to use. */
static int gpu_prepare(const struct mk_fit_gpu *g, struct gpu_state *s) {
        if (g->memory_units == 0 || g->memory_units > MK_FIT_MAX_UNITS || g->n_profiles > MK_FIT_MAX_PROFILES ||
            g->n_used > MK_FIT_MAX_INSTANCES || (g->n_profiles > 0 && !g->profiles) || (g->n_used > 0 && !g->used))
                return -EINVAL;

        s->all = units_mask(g->memory_units);
        s->used = 0;
        unsigned max_slices = 0, max_sms = 0, used_slices = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (p->n_placements > 64 || (p->n_placements > 0 && !p->placements))
                        return -EINVAL;
                for (size_t i = 0; i < p->n_placements; i++) {
                        uint32_t m = mk_placement_mask(p->placements[i]);
                        if (m == 0 || (m & ~s->all) || p->placements[i].size != p->placements[0].size)
                                return -EINVAL;
                }
                max_slices = MAX(max_slices, p->slices);
                max_sms = MAX(max_sms, p->multiprocessors);
                s->counts[j] = 0;
        }
        for (size_t i = 0; i < g->n_used; i++) {
                const struct mk_fit_instance *u = &g->used[i];
                uint32_t m = mk_placement_mask(u->placement);
                if (m == 0 || (m & ~s->all))
                        return -EINVAL;
                s->used |= m;
                used_slices += u->slices;
                for (size_t j = 0; j < g->n_profiles; j++)
                        if (g->profiles[j].id == u->profile_id)
                                s->counts[j]++;
        }
        s->slices = g->slices > 0 ? g->slices : max_slices;
        s->free_slices = used_slices >= s->slices ? 0 : s->slices - used_slices;
        s->sms = g->multiprocessors > 0 ? g->multiprocessors : max_sms;
        return 0;
}

/* M_p: instances of p that still fit in `free`, alone. */
static unsigned profile_room(const struct mk_gi_profile *p, unsigned count, uint32_t free, unsigned free_slices) {
        unsigned m = 0;
        uint32_t taken = 0;
        for (size_t i = 0; i < p->n_placements; i++) {
                uint32_t pm = mk_placement_mask(p->placements[i]);
                if ((pm & ~free) == 0 && (pm & taken) == 0) {
                        m++;
                        taken |= pm;
                }
        }
        if (p->slices > 0)
                m = MIN(m, free_slices / p->slices);
        if (p->max_count > 0)
                m = MIN(m, p->max_count > count ? p->max_count - count : 0);
        return m;
}

/* C(free): see the top of this file. `extra` is the index of a profile that
 * holds one more instance than s->counts says (SIZE_MAX: none). */
static unsigned capacity(const struct mk_fit_gpu *g, const struct gpu_state *s, uint32_t free, unsigned free_slices,
                         size_t extra) {
        unsigned c = 0;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                if (!profile_is_base(p))
                        continue;
                c += profile_units(p) * profile_room(p, s->counts[j] + (j == extra), free, free_slices);
        }
        return c;
}

/* Fragmentation of a free mask: 1 - C(free) / C(the same number of free
 * units, contiguous from unit 0). */
static void frag_parts(const struct mk_fit_gpu *g, const struct gpu_state *s, uint32_t free, unsigned free_slices,
                       size_t extra, unsigned *ret_cap, unsigned *ret_ideal) {
        unsigned n = (unsigned) __builtin_popcount(free & s->all);
        unsigned cap = capacity(g, s, free, free_slices, extra);
        unsigned ideal = capacity(g, s, units_mask(n), free_slices, extra);
        *ret_cap = cap;
        *ret_ideal = MAX(ideal, cap);
}

static unsigned profile_cores(const struct gpu_state *s, const struct mk_gi_profile *p) {
        if (s->sms > 0 && p->multiprocessors > 0)
                return (unsigned) (((uint64_t) p->multiprocessors * 100 + s->sms - 1) / s->sms);
        if (s->slices > 0)
                return (p->slices * 100 + s->slices - 1) / s->slices;
        return 0;
}

uint32_t mk_fit_used_mask(const struct mk_fit_gpu *g) {
        uint32_t m = 0;
        if (g->n_used > 0 && !g->used)
                return 0;
        for (size_t i = 0; i < g->n_used; i++)
                m |= mk_placement_mask(g->used[i].placement);
        return m;
}

static uint64_t free_placements(const struct mk_fit_gpu *g, const struct gpu_state *s, size_t j) {
        const struct mk_gi_profile *p = &g->profiles[j];
        uint64_t r = 0;
        if (p->slices > s->free_slices || (p->max_count > 0 && s->counts[j] >= p->max_count))
                return 0;
        for (size_t i = 0; i < p->n_placements && i < 64; i++)
                if ((mk_placement_mask(p->placements[i]) & s->used) == 0)
                        r |= UINT64_C(1) << i;
        return r;
}

uint64_t mk_fit_free_placements(const struct mk_fit_gpu *g, const struct mk_gi_profile *p) {
        struct gpu_state s;
        if (g->unavailable || gpu_prepare(g, &s) < 0)
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
        struct gpu_state s;
        if (g->unavailable || gpu_prepare(g, &s) < 0)
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
                        uint32_t m = mk_placement_mask(q);
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
                uint32_t m = mk_placement_mask(q);
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

/* The best instance of the request on one GPU. */
struct cand {
        unsigned gpu;
        size_t profile;                 /* index into that GPU's profiles */
        size_t placement;               /* index into the profile's placements */
        uint64_t memory_mib;            /* of the profile: smaller first */
        unsigned slices;                /* of the profile: fewer first */
        unsigned loss;                  /* C(before) - C(after) */
        unsigned used_units;            /* before */
        unsigned cap_before;
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
        uint64_t mem_mib;               /* 0 with whole */
        bool whole;
        unsigned cores;
        const char *variant;
};

static bool profile_adequate(const struct mk_fit_gpu *g, const struct gpu_state *s, const struct mk_gi_profile *p,
                             const struct needs *n) {
        if (p->n_placements == 0 || !variant_matches(p, n->variant))
                return false;
        if (n->whole) {
                if (profile_units(p) != g->memory_units)
                        return false;
        } else {
                uint64_t need = n->mem_mib;
                if (need == 0)
                        return false;
                if (p->memory_mib < need)
                        return false;
        }
        return n->cores == 0 || profile_cores(s, p) >= n->cores;
}

/* The best candidate on GPU `gi`; false when the request has no free
 * placement there. */
static bool gpu_best(const struct mk_fit_gpu *g, const struct gpu_state *s, unsigned gi, const struct needs *n,
                     enum mk_fit_policy gpu_policy, struct cand *ret) {
        struct cand best = {};
        bool found = false;
        uint32_t free = s->all & ~s->used;
        for (size_t j = 0; j < g->n_profiles; j++) {
                const struct mk_gi_profile *p = &g->profiles[j];
                /* Only profiles at least as good as the best so far by size. */
                if (found && (p->memory_mib > best.memory_mib ||
                              (p->memory_mib == best.memory_mib && p->slices > best.slices)))
                        continue;
                if (!profile_adequate(g, s, p, n))
                        continue;
                uint64_t fp = free_placements(g, s, j);
                for (size_t i = 0; fp && i < p->n_placements && i < 64; i++) {
                        if (!(fp & (UINT64_C(1) << i)))
                                continue;
                        uint32_t m = mk_placement_mask(p->placements[i]);
                        unsigned after = capacity(g, s, free & ~m, s->free_slices - p->slices, j);
                        struct cand c = {
                                .gpu = gi,
                                .profile = j,
                                .placement = i,
                                .memory_mib = p->memory_mib,
                                .slices = p->slices,
                                .loss = s->cap > after ? s->cap - after : 0,
                                .used_units = (unsigned) __builtin_popcount(s->used),
                                .cap_before = s->cap,
                        };
                        if (!found || cand_compare(&c, &best, gpu_policy) < 0 ||
                            (cand_compare(&c, &best, gpu_policy) == 0 &&
                             p->placements[i].start > g->profiles[best.profile].placements[best.placement].start)) {
                                best = c;
                                found = true;
                        }
                }
        }
        if (found)
                *ret = best;
        return found;
}

static double clamp01(double x) {
        return x < 0 ? 0 : x > 1 ? 1 : x;
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
                if (r->cpu_requested_milli > r->cpu_allocatable_milli ||
                    req->cpu_milli > r->cpu_allocatable_milli - r->cpu_requested_milli)
                        return mk_error_set(e, -ENOSPC, "Insufficient cpu: %" PRIu64 "m requested, %" PRIu64 "m free",
                                            req->cpu_milli,
                                            r->cpu_requested_milli > r->cpu_allocatable_milli
                                                    ? 0
                                                    : r->cpu_allocatable_milli - r->cpu_requested_milli);
                if (r->memory_requested_bytes > r->memory_allocatable_bytes ||
                    req->memory_bytes > r->memory_allocatable_bytes - r->memory_requested_bytes)
                        return mk_error_set(e, -ENOSPC, "Insufficient memory: %" PRIu64 " bytes requested", req->memory_bytes);
                double cu = r->cpu_allocatable_milli > 0
                                    ? (double) (r->cpu_requested_milli + req->cpu_milli) / r->cpu_allocatable_milli
                                    : 0;
                double mu = r->memory_allocatable_bytes > 0 ? (double) (r->memory_requested_bytes + req->memory_bytes) /
                                                                      r->memory_allocatable_bytes
                                                            : 0;
                res_util = clamp01((cu + mu) / 2);
        }

        struct gpu_state st[MK_FIT_MAX_NODE_GPUS];
        struct cand cands[MK_FIT_MAX_NODE_GPUS];
        size_t n_cands = 0;
        unsigned total_units = 0, used_units = 0, cap_sum = 0, ideal_sum = 0;
        bool whole = req->mem_mib == 0 && (req->mem_percent == 0 || req->mem_percent == 100);

        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_gpu *g = &node->gpus[gi];
                struct gpu_state *s = &st[gi];
                if (g->unavailable)
                        continue;
                if (gpu_prepare(g, s) < 0)
                        return mk_error_set(e, -EINVAL, "GPU %zu: malformed description", gi);
                unsigned ideal;
                frag_parts(g, s, s->all & ~s->used, s->free_slices, SIZE_MAX, &s->cap, &ideal);
                total_units += g->memory_units;
                used_units += (unsigned) __builtin_popcount(s->used);
                cap_sum += s->cap;
                ideal_sum += ideal;

                struct needs n = {
                        .whole = whole,
                        .cores = req->cores_percent,
                        .variant = req->variant,
                };
                if (!whole) {
                        n.mem_mib = req->mem_mib;
                        if (n.mem_mib == 0) {
                                if (g->memory_mib > UINT64_MAX / 100)
                                        return mk_error_set(e, -EINVAL, "GPU %zu: memory out of range", gi);
                                n.mem_mib = (g->memory_mib * req->mem_percent + 99) / 100;
                        }
                }
                if (gpu_best(g, s, (unsigned) gi, &n, gpu_policy, &cands[n_cands]))
                        n_cands++;
        }

        if (n_cands < req->gpus) {
                char what[96];
                if (whole)
                        (void) snprintf(what, sizeof what, "a whole GPU");
                else if (req->mem_mib > 0)
                        (void) snprintf(what, sizeof what, "%" PRIu64 " MiB", req->mem_mib);
                else
                        (void) snprintf(what, sizeof what, "%u%% of GPU memory", req->mem_percent);
                return mk_error_set(e, -ENOSPC,
                                    "%zu of %zu GPUs have a free MIG placement for %s%s%s%s, %u needed", n_cands,
                                    node->n_gpus, what, req->cores_percent ? " with cores" : "",
                                    req->variant && *req->variant ? " variant " : "",
                                    req->variant && *req->variant ? req->variant : "", req->gpus);
        }

        /* The request's GPUs: the first `gpus` candidates in order. */
        for (size_t k = 0; k < req->gpus; k++) {
                size_t bi = k;
                for (size_t i = k + 1; i < n_cands; i++)
                        if (cand_compare(&cands[i], &cands[bi], gpu_policy) < 0)
                                bi = i;
                struct cand t = cands[k];
                cands[k] = cands[bi];
                cands[bi] = t;
        }

        struct mk_fit_result res = { .n_choices = req->gpus };
        unsigned loss = 0, keep_base = 0;
        for (size_t k = 0; k < req->gpus; k++) {
                const struct cand *c = &cands[k];
                const struct mk_fit_gpu *g = &node->gpus[c->gpu];
                const struct mk_gi_profile *p = &g->profiles[c->profile];
                struct gpu_state *s = &st[c->gpu];
                res.choices[k] = (struct mk_fit_choice) {
                        .gpu = c->gpu,
                        .profile = p,
                        .placement = p->placements[c->placement],
                };
                /* The node's state after: replace this GPU's share of the sums. */
                unsigned cap_old, ideal_old, cap_new, ideal_new;
                frag_parts(g, s, s->all & ~s->used, s->free_slices, SIZE_MAX, &cap_old, &ideal_old);
                uint32_t m = mk_placement_mask(p->placements[c->placement]);
                frag_parts(g, s, s->all & ~(s->used | m), s->free_slices - p->slices, c->profile, &cap_new,
                           &ideal_new);
                cap_sum = cap_sum - cap_old + cap_new;
                ideal_sum = ideal_sum - ideal_old + ideal_new;
                used_units += (unsigned) __builtin_popcount(m);
                loss += c->loss;
                keep_base += c->cap_before;
        }

        double util = total_units > 0 ? (double) used_units / total_units : 0;
        double frag = ideal_sum > 0 ? 1.0 - (double) cap_sum / ideal_sum : 0;
        double keep = keep_base > 0 ? 1.0 - (double) loss / keep_base : 1;
        double w_util = W_UTIL, w_res = 0;
        if (r) {
                w_util -= W_RES;
                w_res = W_RES;
        }
        double score;
        if (node_policy == MK_FIT_BINPACK)
                score = w_util * util + W_KEEP * keep + W_FRAG * (1 - frag) + w_res * res_util;
        else
                score = w_util * (1 - util) + W_KEEP * keep + W_FRAG * (1 - frag) + w_res * (1 - res_util);
        res.score = 100.0 * clamp01(score / (W_UTIL + W_KEEP + W_FRAG));
        res.fragmentation = clamp01(frag);
        *ret = res;
        return 0;
}
