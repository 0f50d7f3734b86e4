/* GetPreferredAllocation (preferred.h; k8s-device-plugin v0.20.0 internal/plugin/server.go; iktos/k8s-gpu-sharing-plugin). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "plugin/preferred.h"

/* Whole-GPU search: exact while the combinations to visit stay under this
 * many search nodes (16 GPUs choose 8 is 39,203 nodes, about 1 ms), greedy
 * growth from every seed with local swaps beyond (64 GPUs: 3-30 ms).
 * tests/unit/test-plugin-preferred prints the timings. */
#define EXACT_NODE_BUDGET 200000u

/* ---- scoring of whole-GPU sets ---- */

struct score {
        uint64_t nvlinks;       /* NVLinks summed over the set's pairs */
        uint64_t pcie;          /* closeness summed over pairs: 60 - level (upstream's 60 internal .. 10 system) */
};

static int score_cmp(struct score a, struct score b) {
        if (a.nvlinks != b.nvlinks)
                return a.nvlinks > b.nvlinks ? 1 : -1;
        if (a.pcie != b.pcie)
                return a.pcie > b.pcie ? 1 : -1;
        return 0;
}

struct topo {
        const struct mk_snapshot *s;
        size_t n_gpus;
};

static struct score pair_score(const struct topo *t, unsigned a, unsigned b) {
        struct score sc = {0};
        if (!t->s || a >= t->n_gpus || b >= t->n_gpus || a == b)
                return sc;
        if (t->s->nvlinks)
                sc.nvlinks = t->s->nvlinks[(size_t) a * t->n_gpus + b];
        if (t->s->pcie_level) {
                unsigned lvl = t->s->pcie_level[(size_t) a * t->n_gpus + b];
                sc.pcie = lvl >= 60 ? 0 : 60 - lvl;
        }
        return sc;
}

static void score_add(struct score *a, struct score b) {
        a->nvlinks += b.nvlinks;
        a->pcie += b.pcie;
}

/* Gain of adding GPU x to the set `set` (n GPUs). */
static struct score gain(const struct topo *t, unsigned x, const unsigned *set, size_t n) {
        struct score g = {0};
        for (size_t i = 0; i < n; i++)
                score_add(&g, pair_score(t, x, set[i]));
        return g;
}

struct search {
        const struct topo *t;
        const unsigned *cand;   /* GPU positions, ascending */
        size_t n_cand;
        unsigned *set;          /* must GPUs, then the chosen */
        size_t n_must, k;       /* choose k */
        size_t *pick;           /* current choice, positions in cand */
        size_t *best;
        struct score best_score;
        bool have_best;
};

static void dfs(struct search *x, size_t depth, size_t start, struct score sc) {
        if (depth == x->k) {
                if (!x->have_best || score_cmp(sc, x->best_score) > 0) {
                        x->have_best = true;
                        x->best_score = sc;
                        memcpy(x->best, x->pick, x->k * sizeof(*x->pick));
                }
                return;
        }
        for (size_t i = start; i + (x->k - depth) <= x->n_cand; i++) {
                unsigned g = x->cand[i];
                struct score nsc = sc;
                score_add(&nsc, gain(x->t, g, x->set, x->n_must + depth));
                x->pick[depth] = i;
                x->set[x->n_must + depth] = g;
                dfs(x, depth + 1, i + 1, nsc);
        }
}

/* Search nodes of the exact DFS: sum of C(n, j) for j <= k, capped. */
static uint64_t exact_nodes(size_t n, size_t k) {
        uint64_t total = 0, c = 1;
        for (size_t j = 0; j <= k; j++) {
                total += c;
                if (total > EXACT_NODE_BUDGET)
                        return UINT64_MAX;
                c = c * (n - j) / (j + 1);
        }
        return total;
}

static struct score set_score(const struct topo *t, const unsigned *set, size_t n) {
        struct score sc = {0};
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        score_add(&sc, pair_score(t, set[i], set[j]));
        return sc;
}

static int cmp_size(const void *a, const void *b) {
        size_t x = *(const size_t *) a, y = *(const size_t *) b;
        return x < y ? -1 : x > y;
}

/* Greedy growth from every seed, then pairwise swaps while they gain. */
static int greedy(struct search *x) {
        size_t n = x->n_cand, k = x->k;
        _cleanup_free_ bool *in = calloc(n, sizeof(*in));
        _cleanup_free_ size_t *cur = calloc(k, sizeof(*cur));
        if (!in || !cur)
                return -ENOMEM;
        for (size_t seed = 0; seed < n; seed++) {
                memset(in, 0, n * sizeof(*in));
                size_t m = 0;
                cur[m] = seed;
                in[seed] = true;
                x->set[x->n_must + m++] = x->cand[seed];
                while (m < k) {
                        size_t bi = SIZE_MAX;
                        struct score bs = {0};
                        for (size_t i = 0; i < n; i++) {
                                if (in[i])
                                        continue;
                                struct score g = gain(x->t, x->cand[i], x->set, x->n_must + m);
                                if (bi == SIZE_MAX || score_cmp(g, bs) > 0) {
                                        bi = i;
                                        bs = g;
                                }
                        }
                        cur[m] = bi;
                        in[bi] = true;
                        x->set[x->n_must + m++] = x->cand[bi];
                }
                /* Swaps: replace one chosen GPU by an unchosen one while the set
                 * gains; the change is computed from the two GPUs' pairs only. */
                struct score sc = set_score(x->t, x->set, x->n_must + k);
                size_t total = x->n_must + k;
                for (unsigned round = 0; round < 8; round++) {
                        bool improved = false;
                        for (size_t a = 0; a < k; a++) {
                                unsigned old = x->set[x->n_must + a];
                                struct score lose = gain(x->t, old, x->set, total);
                                for (size_t i = 0; i < n; i++) {
                                        if (in[i])
                                                continue;
                                        struct score win = gain(x->t, x->cand[i], x->set, total);
                                        struct score self = pair_score(x->t, x->cand[i], old);
                                        int64_t dn = (int64_t) win.nvlinks - (int64_t) self.nvlinks -
                                                     (int64_t) lose.nvlinks;
                                        int64_t dp = (int64_t) win.pcie - (int64_t) self.pcie - (int64_t) lose.pcie;
                                        if (dn < 0 || (dn == 0 && dp <= 0))
                                                continue;
                                        in[cur[a]] = false;
                                        in[i] = true;
                                        cur[a] = i;
                                        x->set[x->n_must + a] = x->cand[i];
                                        sc.nvlinks = (uint64_t) ((int64_t) sc.nvlinks + dn);
                                        sc.pcie = (uint64_t) ((int64_t) sc.pcie + dp);
                                        old = x->cand[i];
                                        lose = gain(x->t, old, x->set, total);
                                        improved = true;
                                }
                        }
                        if (!improved)
                                break;
                }
                /* Ties go to the lowest positions: compare sorted choices. */
                qsort(cur, k, sizeof(*cur), cmp_size);
                int c = x->have_best ? score_cmp(sc, x->best_score) : 1;
                if (c == 0)
                        for (size_t i = 0; i < k && c == 0; i++)
                                c = cur[i] < x->best[i] ? 1 : cur[i] > x->best[i] ? -1 : 0;
                if (c > 0) {
                        x->have_best = true;
                        x->best_score = sc;
                        memcpy(x->best, cur, k * sizeof(*cur));
                }
        }
        return 0;
}

/* ---- helpers ---- */

static int cmp_dev_id(const void *a, const void *b) {
        const struct mk_dp_device *x = *(const struct mk_dp_device *const *) a;
        const struct mk_dp_device *y = *(const struct mk_dp_device *const *) b;
        return strcmp(x->id, y->id);
}

/* By base id, then replica number (so "::2" comes before "::10"). */
static int cmp_dev_base(const void *a, const void *b) {
        const struct mk_dp_device *x = *(const struct mk_dp_device *const *) a;
        const struct mk_dp_device *y = *(const struct mk_dp_device *const *) b;
        int c = strcmp(x->base_id, y->base_id);
        if (c)
                return c;
        return x->replica < y->replica ? -1 : x->replica > y->replica;
}

/* By parent GPU, then position in the resource. */
static int cmp_dev_gpu(const void *a, const void *b) {
        const struct mk_dp_device *x = *(const struct mk_dp_device *const *) a;
        const struct mk_dp_device *y = *(const struct mk_dp_device *const *) b;
        if (x->gpu != y->gpu)
                return x->gpu < y->gpu ? -1 : 1;
        return x < y ? -1 : x > y;
}

/* iktos/k8s-gpu-sharing-plugin: least shared physical device first. */
static int pick_shared(const struct mk_dp_device **cand, size_t n, const struct mk_dp_device **must, size_t n_must,
                       size_t needed, const struct mk_dp_device **out, struct mk_error *e) {
        qsort(cand, n, sizeof(*cand), cmp_dev_base);
        struct group {
                size_t first, left;
                bool used;
        };
        _cleanup_free_ struct group *g = calloc(n ? n : 1, sizeof(*g));
        if (!g)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t ng = 0;
        for (size_t i = 0; i < n; i++) {
                if (ng == 0 || !streq(cand[g[ng - 1].first]->base_id, cand[i]->base_id))
                        g[ng++] = (struct group) {.first = i};
                g[ng - 1].left++;
        }
        for (size_t m = 0; m < n_must; m++)
                for (size_t j = 0; j < ng; j++)
                        if (streq(cand[g[j].first]->base_id, must[m]->base_id))
                                g[j].used = true;
        for (size_t k = 0; k < needed; k++) {
                size_t best = SIZE_MAX;
                for (int pass = 0; pass < 2 && best == SIZE_MAX; pass++)
                        for (size_t j = 0; j < ng; j++)
                                if (g[j].left && g[j].used == (pass == 1) &&
                                    (best == SIZE_MAX || g[j].left > g[best].left))
                                        best = j;
                if (best == SIZE_MAX)
                        return mk_error_set(e, -EINVAL, "no devices left to allocate");
                out[k] = cand[g[best].first++];
                g[best].left--;
                g[best].used = true;
        }
        return 0;
}

/* MIG devices: on the fewest parents, parents of must_include devices first. */
static int pick_packed(const struct mk_dp_device **cand, size_t n, const struct mk_dp_device **must, size_t n_must,
                       size_t needed, const struct mk_dp_device **out, struct mk_error *e) {
        qsort(cand, n, sizeof(*cand), cmp_dev_gpu);
        struct group {
                size_t first, left;
                bool must, done;
        };
        _cleanup_free_ struct group *g = calloc(n ? n : 1, sizeof(*g));
        if (!g)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t ng = 0;
        for (size_t i = 0; i < n; i++) {
                if (ng == 0 || cand[g[ng - 1].first]->gpu != cand[i]->gpu)
                        g[ng++] = (struct group) {.first = i};
                g[ng - 1].left++;
        }
        for (size_t m = 0; m < n_must; m++)
                for (size_t j = 0; j < ng; j++)
                        if (cand[g[j].first]->gpu == must[m]->gpu)
                                g[j].must = true;
        size_t k = 0;
        while (k < needed) {
                size_t rem = needed - k, best = SIZE_MAX;
                /* Parents already in use first (largest first); else the smallest
                 * parent that completes the request; else the largest. */
                for (size_t j = 0; j < ng; j++)
                        if (!g[j].done && g[j].must && (best == SIZE_MAX || g[j].left > g[best].left))
                                best = j;
                if (best == SIZE_MAX)
                        for (size_t j = 0; j < ng; j++)
                                if (!g[j].done && g[j].left >= rem && (best == SIZE_MAX || g[j].left < g[best].left))
                                        best = j;
                if (best == SIZE_MAX)
                        for (size_t j = 0; j < ng; j++)
                                if (!g[j].done && (best == SIZE_MAX || g[j].left > g[best].left))
                                        best = j;
                if (best == SIZE_MAX)
                        return mk_error_set(e, -EINVAL, "no devices left to allocate");
                g[best].done = true;
                for (size_t i = 0; i < g[best].left && k < needed; i++)
                        out[k++] = cand[g[best].first + i];
        }
        return 0;
}

static int pick_aligned(const struct mk_snapshot *s, const struct mk_dp_device **cand, size_t n,
                        const struct mk_dp_device **must, size_t n_must, size_t needed,
                        const struct mk_dp_device **out, struct mk_error *e) {
        qsort(cand, n, sizeof(*cand), cmp_dev_gpu);
        struct topo t = {.s = s, .n_gpus = s ? s->n_gpus : 0};
        _cleanup_free_ unsigned *gpus = calloc(n ? n : 1, sizeof(*gpus));
        _cleanup_free_ unsigned *set = calloc(n_must + needed + 1, sizeof(*set));
        _cleanup_free_ size_t *pick = calloc(needed + 1, sizeof(*pick));
        _cleanup_free_ size_t *best = calloc(needed + 1, sizeof(*best));
        if (!gpus || !set || !pick || !best)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n; i++)
                gpus[i] = cand[i]->gpu;
        for (size_t i = 0; i < n_must; i++)
                set[i] = must[i]->gpu;
        struct search x = {
                .t = &t, .cand = gpus, .n_cand = n, .set = set, .n_must = n_must, .k = needed, .pick = pick, .best = best,
        };
        if (needed == n)
                for (size_t i = 0; i < n; i++)
                        best[i] = i;
        else if (exact_nodes(n, needed) != UINT64_MAX)
                dfs(&x, 0, 0, (struct score) {0});
        else if (greedy(&x) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < needed; i++)
                out[i] = cand[best[i]];
        return 0;
}

int mk_dp_preferred(const struct mk_snapshot *s, const struct mk_dp_resource *r, const char *const *available,
                    size_t n_available, const char *const *must_include, size_t n_must, unsigned size,
                    char ***ret_ids, struct mk_error *e) {
        if (size == 0)
                return mk_error_set(e, -EINVAL, "preferred allocation for '%s': allocation size 0", r->name);
        if (n_available > MK_DP_MAX_DEVICES || n_must > MK_DP_MAX_DEVICES)
                return mk_error_set(e, -EINVAL, "preferred allocation for '%s': more than %u ids", r->name,
                                    MK_DP_MAX_DEVICES);
        _cleanup_free_ bool *taken = calloc(r->n_devices ? r->n_devices : 1, sizeof(*taken)); /* in available */
        _cleanup_free_ bool *is_must = calloc(r->n_devices ? r->n_devices : 1, sizeof(*is_must));
        _cleanup_free_ const struct mk_dp_device **cand = calloc(n_available + n_must + 1, sizeof(*cand));
        _cleanup_free_ const struct mk_dp_device **must = calloc(n_must + 1, sizeof(*must));
        _cleanup_free_ const struct mk_dp_device **avail = calloc(n_available + 1, sizeof(*avail));
        if (!taken || !is_must || !cand || !must || !avail)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        /* Each list names a device once (a repeat: -EINVAL); must_include
         * ids are in available too, as the kubelet sends them. */
        int q = mk_dp_resource_find_devices(r, must_include, n_must, "preferred allocation", must, e);
        if (q < 0)
                return q;
        q = mk_dp_resource_find_devices(r, available, n_available, "preferred allocation", avail, e);
        if (q < 0)
                return q;
        size_t nm = n_must, nc = 0;
        for (size_t i = 0; i < n_must; i++) {
                size_t p = (size_t) (must[i] - r->devices);
                is_must[p] = taken[p] = true;
        }
        if (nm > size)
                return mk_error_set(e, -EINVAL,
                                    "preferred allocation for '%s': %zu devices must be included, more than the %u "
                                    "requested",
                                    r->name, nm, size);
        bool shared = false, all_whole = true;
        for (size_t i = 0; i < n_available; i++) {
                const struct mk_dp_device *d = avail[i];
                size_t p = (size_t) (d - r->devices);
                if (taken[p])
                        continue;
                taken[p] = true;
                cand[nc++] = d;
        }
        for (size_t i = 0; i < nc; i++) {
                shared = shared || !streq(cand[i]->id, cand[i]->base_id);
                all_whole = all_whole && !cand[i]->mig;
        }
        for (size_t i = 0; i < nm; i++) {
                shared = shared || !streq(must[i]->id, must[i]->base_id);
                all_whole = all_whole && !must[i]->mig;
        }
        size_t needed = size - nm;
        if (nc < needed)
                return mk_error_set(e, -EINVAL,
                                    "preferred allocation for '%s': not enough available devices to satisfy "
                                    "allocation (%zu for %u)",
                                    r->name, nc + nm, size);
        _cleanup_free_ const struct mk_dp_device **out = calloc(size, sizeof(*out));
        if (!out)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        memcpy(out, must, nm * sizeof(*must));
        if (needed > 0) {
                if (shared)
                        q = pick_shared(cand, nc, must, nm, needed, out + nm, e);
                else if (all_whole)
                        q = pick_aligned(s, cand, nc, must, nm, needed, out + nm, e);
                else
                        q = pick_packed(cand, nc, must, nm, needed, out + nm, e);
        }
        if (q < 0)
                return q;
        qsort(out, size, sizeof(*out), cmp_dev_id);
        char **ids = calloc((size_t) size + 1, sizeof(*ids));
        if (!ids)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < size; i++)
                if (!(ids[i] = strdup(out[i]->id))) {
                        strv_free(ids);
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                }
        *ret_ids = ids;
        return 0;
}
