/* Dynamic MIG scheduling, migkit vs HAMi, on one trace per mix and load: a
 * cluster of N nodes x 8 GPUs (A100-80GB, then H100-80GB), pods arriving as a
 * Poisson process with exponential lifetimes and memory requests (and
 * gpucores floors) from a stated mix, one GPU each. Mixes, all run and all
 * reported (docs/scheduler-fit.md §8): issue 7's; small-model inference;
 * 30 GB and 60 GB requests; gpucores floors. Policies side by side on the
 * same trace:
 *
 *   hami-legacy   HAMi <= v2.9 knownMigGeometries first-fit templates
 *                 (HAMi release-v2.9), templates of the chart's
 *                 A100-80GB entry: 1g x7; 2g x3 + 1g; 3g x2; 7g x1
 *   hami-v2.10    smallest allowlisted profile, first free position, 1g/3g
 *                 from the highest start (HAMi v2.10.0, dynamic MIG, PR
 *                 #2378), chart allowlist (no 1g.20gb);
 *                 gpucores ignored for sizing, as HAMi does (counted)
 *   whole-gpu     one whole GPU per pod
 *   migkit        plan/fit.h, every profile the GPU reports (1g.20gb too),
 *                 with capacity tables and one mk_fit_node_cache per node
 *                 refreshed on every change (--no-cache: without)
 *   migkit-hami-profiles   plan/fit.h restricted to HAMi's allowlist
 *
 * HAMi policies use HAMi's defaults: node policy binpack and GPU policy
 * spread, scores before the pod's own allocation (HAMi v2.10.0,
 * pkg/device/nvidia/device.go and pkg/scheduler/score.go); the "-binpack"
 * rows give them GPU binpack too. A rejected pod is dropped (no queue).
 * Printed per mix: pods accepted/rejected after a warm-up, the ratio to HAMi
 * v2.10, GPUs in use, fragmentation and idle units averaged over time and
 * over 8 windows of time, per-class rejections; the smallest cluster on
 * which each policy rejects nothing, against an offline lower bound; a
 * summary. Then the decision time of the migkit fit for one pod over 1,000
 * nodes x 8 GPUs, with the node caches and without.
 *
 * The unified pool (issue 13; section "pools", A100-80GB, docs/scheduler-fit.md
 * §8): the same traces on every mix plus 'small' (1-4 GB) and 'isolation'
 * (vgpu-mode mig and gpucores 100 pods), pools side by side: MIG only
 * (migkit), soft slices only (plan/fit-soft, every GPU shared, split 10),
 * unified (every node mixed, GPUs 0-3 MIG and 4-7 shared at first, idle GPUs
 * switch, mk_fit_choose_mode for pods without a mode), unified-half (half the
 * nodes mig, half hami-core, no switch), and HAMi v2.10 with every node mig,
 * every node hami-core, and half/half (HAMi's Fit rules, GPU spread, node
 * binpack scored before the pod). Printed: pods accepted (and those that got
 * their gpucores), pods on MIG, GPUs in use, GPU memory committed (profile
 * memory or slice cap, time average), GPUs needed against a bound valid for
 * every pool; then the unified pool's decision time over 1,000 x 8 GPUs.
 *
 * Profiles: from the NVML simulator (MIGKIT_NVML_LIB, set by bench/run,
 * machines a100-80gb and h100-80gb) when available, else the built-in tables
 * (MIG user guide, supported profiles; k8s-test-infra profiles/mig); when
 * both, they are compared.
 *
 * Usage: bench-sched [--nodes N] [--pods N] [--seed N] [--loads a,b,c] [--timing-nodes N] [--no-tables]
 *                    [--no-cache] [--sections accept,needed,time,pools]
 *                    [--mixes issue,inference,large,cores,small,isolation] [--quick] */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/macro.h"
#include "base/parse.h"
#include "mig/gpu.h"
#include "mig/profile.h"
#include "nvml/nvml.h"
#include "plan/fit-soft.h"
#include "plan/fit.h"

#define GPUS_PER_NODE 8
#define UNITS 8
#define MAX_INST 8
#define SPLIT MK_FIT_SOFT_DEFAULT_SPLIT /* sharers of a shared GPU (HAMi's deviceSplitCount default) */

static bool use_caches = true;  /* mk_fit_node_cache per node; --no-cache */

/* --- profile tables ------------------------------------------------------------- */

struct row {
        const char *name;
        unsigned id, slices, units, max_count;
        uint64_t memory_mib;
        unsigned sms;
        unsigned starts;
};

/* Same numbers as sim/lib/catalog.c (MIG user guide, supported profiles; k8s-test-infra profiles/mig). */
static const struct row a100_rows[] = {
        {"1g.10gb", 19, 1, 1, 7, 9728, 14, 0x7f},     {"1g.10gb+me", 20, 1, 1, 1, 9728, 14, 0x7f},
        {"1g.20gb", 15, 1, 2, 4, 19968, 14, 0x55},    {"2g.20gb", 14, 2, 2, 3, 19968, 28, 0x15},
        {"3g.40gb", 9, 3, 4, 2, 40192, 42, 0x11},     {"4g.40gb", 5, 4, 4, 1, 40192, 56, 0x01},
        {"7g.80gb", 0, 7, 8, 1, 80384, 98, 0x01},
};
static const struct row h100_rows[] = {
        {"1g.10gb", 19, 1, 1, 7, 9984, 16, 0x7f},     {"1g.10gb+me", 20, 1, 1, 1, 9984, 16, 0x7f},
        {"1g.20gb", 15, 1, 2, 4, 20096, 26, 0x55},    {"2g.20gb", 14, 2, 2, 3, 20096, 32, 0x15},
        {"3g.40gb", 9, 3, 4, 2, 40448, 60, 0x11},     {"4g.40gb", 5, 4, 4, 1, 40448, 64, 0x01},
        {"7g.80gb", 0, 7, 8, 1, 81152, 132, 0x01},
};

/* HAMi's allowlist for the 80 GB class (profiles mapped by slice prefix, so no 1g.20gb). */
static const char *const hami_allow[] = {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"};

struct model {
        const char *key, *title;
        uint64_t memory_mib;
        struct mk_gi_profile all[16];
        struct mk_placement pl[16][8];
        size_t n_all;
        struct mk_gi_profile hami[8];    /* HAMi's allowlist, copies */
        size_t n_hami;
        struct mk_fit_tables *all_tables, *hami_tables;  /* NULL with --no-tables */
        const char *source;
};

static void model_from_rows(struct model *m, const struct row *rows, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct mk_gi_profile *p = &m->all[i];
                *p = (struct mk_gi_profile) {
                        .id = rows[i].id, .slices = rows[i].slices, .max_count = rows[i].max_count,
                        .memory_mib = rows[i].memory_mib, .multiprocessors = rows[i].sms, .named = true,
                };
                snprintf(p->name, sizeof p->name, "%s", rows[i].name);
                if (mk_profile_name_parse(rows[i].name, &p->pname, NULL) < 0)
                        abort();
                for (unsigned s = 0; s < UNITS; s++)
                        if (rows[i].starts & (1u << s))
                                m->pl[i][p->n_placements++] = (struct mk_placement) {s, rows[i].units};
                p->placements = m->pl[i];
        }
        m->n_all = n;
}

/* Reads the first GPU of a simulated machine; 0, or negative when the
 * simulator is not there. Compares with the built-in table. */
static int model_from_sim(struct model *m, const char *machine, const char *dir, const struct row *rows, size_t n) {
        if (!getenv("MIGKIT_NVML_LIB"))
                return -ENOENT;
        char state[4096];
        snprintf(state, sizeof state, "%s/%s.json", dir, machine);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
        setenv("MIGKIT_SIM_STATE", state, 1);
        struct mk_error e = {};
        struct mk_nvml *nv = NULL;
        struct mk_snapshot *s = NULL;
        if (mk_nvml_open(NULL, &nv, &e) < 0 || mk_nvml_snapshot(nv, &s, &e) < 0 || s->n_gpus < 1) {
                fprintf(stderr, "simulator: %s, using the built-in tables\n", e.msg);
                mk_nvml_close(nv);
                mk_snapshot_free(s);
                return -EIO;
        }
        mk_nvml_close(nv);
        const struct mk_gpu *g = &s->gpus[0];
        size_t k = 0, mismatches = 0;
        for (size_t i = 0; i < g->n_profiles && k < ELEMENTSOF(m->all); i++) {
                const struct mk_gi_profile *sp = &g->profiles[i];
                if (sp->n_placements > 8)
                        continue;
                struct mk_gi_profile *p = &m->all[k];
                *p = *sp;
                p->ci_profiles = NULL;
                p->n_ci_profiles = 0;
                memcpy(m->pl[k], sp->placements, sp->n_placements * sizeof sp->placements[0]);
                p->placements = m->pl[k];
                /* The built-in row of the same name must agree. */
                bool found = false;
                for (size_t r = 0; r < n; r++) {
                        if (!streq(rows[r].name, p->name))
                                continue;
                        found = true;
                        unsigned starts = 0;
                        for (size_t q = 0; q < p->n_placements; q++)
                                starts |= 1u << p->placements[q].start;
                        if (rows[r].id != p->id || rows[r].slices != p->slices || rows[r].memory_mib != p->memory_mib ||
                            rows[r].sms != p->multiprocessors || rows[r].starts != starts ||
                            rows[r].max_count != p->max_count) {
                                fprintf(stderr, "simulator's %s differs from the built-in table\n", p->name);
                                mismatches++;
                        }
                }
                if (!found)
                        mismatches++;
                k++;
        }
        m->n_all = k;
        m->memory_mib = g->memory_total_bytes >> 20;
        m->source = mismatches ? "simulator (DIFFERS from the built-in table)" : "simulator (matches the built-in table)";
        /* Profiles point into m; the snapshot can go. */
        mk_snapshot_free(s);
        unlink(state);
        return 0;
}

static void model_init(struct model *m, const char *key, const char *title, const struct row *rows, size_t n,
                       uint64_t memory_mib, const char *dir) {
        memset(m, 0, sizeof *m);
        m->key = key;
        m->title = title;
        m->memory_mib = memory_mib;
        m->source = "built-in tables (MIG user guide, supported profiles; k8s-test-infra profiles/mig)";
        if (model_from_sim(m, key, dir, rows, n) < 0) {
                model_from_rows(m, rows, n);
                m->memory_mib = memory_mib;
        }
        for (size_t i = 0; i < m->n_all; i++)
                for (size_t a = 0; a < ELEMENTSOF(hami_allow); a++)
                        if (streq(m->all[i].name, hami_allow[a]))
                                m->hami[m->n_hami++] = m->all[i];
}

static void model_tables(struct model *m) {
        struct mk_fit_gpu g = {.profiles = m->all, .n_profiles = m->n_all, .memory_units = UNITS, .slices = 7};
        int r = mk_fit_tables_new(&g, &m->all_tables);
        g.profiles = m->hami;
        g.n_profiles = m->n_hami;
        if (r >= 0)
                r = mk_fit_tables_new(&g, &m->hami_tables);
        if (r < 0) {
                fprintf(stderr, "bench-sched: capacity tables: %s\n", strerror(-r));
                exit(1);
        }
}

static const struct mk_gi_profile *model_profile(const struct model *m, const char *name) {
        for (size_t i = 0; i < m->n_all; i++)
                if (streq(m->all[i].name, name))
                        return &m->all[i];
        return NULL;
}

/* --- the trace ------------------------------------------------------------------ */

struct pod_class {
        const char *name;
        double share;
        uint64_t mem_mib;       /* 0: the whole GPU */
        unsigned cores;         /* nvidia.com/gpucores floor, % (0: none) */
        unsigned mode;          /* MODE_ANY: no nvidia.com/vgpu-mode; MODE_MIG: vgpu-mode mig */
};
#define MODE_ANY 0u
#define MODE_MIG 1u

#define MAX_CLASSES 6

/* Memory mixes that MIG users run, stated up front and all reported (none
 * tuned to a result). Requests are a little under the profile sizes, as a
 * user asking "10 GB" gets 1g.10gb. */
struct mix {
        const char *key, *title;
        struct pod_class cls[MAX_CLASSES];
        size_t n;
        bool pools_only;        /* run in the pools section only (modes, sizes below a MIG profile) */
};
static const struct mix mixes[] = {
        {"issue", "issue 7's mix: 40% 10 GB, 30% 20 GB, 20% 40 GB, 10% 80 GB (the whole GPU)",
         {{"10GB", 0.40, 9 * 1024, 0, MODE_ANY}, {"20GB", 0.30, 19 * 1024, 0, MODE_ANY},
          {"40GB", 0.20, 39 * 1024, 0, MODE_ANY}, {"80GB", 0.10, 0, 0, MODE_ANY}},
         4, false},
        {"inference", "small-model inference: 50% 5 GB, 30% 10 GB, 20% 20 GB",
         {{"5GB", 0.50, 4608, 0, MODE_ANY}, {"10GB", 0.30, 9 * 1024, 0, MODE_ANY},
          {"20GB", 0.20, 19 * 1024, 0, MODE_ANY}},
         3, false},
        {"large", "30 GB and 60 GB requests: 30% 10 GB, 20% 20 GB, 30% 30 GB, 20% 60 GB",
         {{"10GB", 0.30, 9 * 1024, 0, MODE_ANY}, {"20GB", 0.20, 19 * 1024, 0, MODE_ANY},
          {"30GB", 0.30, 29 * 1024, 0, MODE_ANY}, {"60GB", 0.20, 59 * 1024, 0, MODE_ANY}},
         4, false},
        {"cores", "gpucores floors: 30% 10 GB, 20% 10 GB + 25% cores, 20% 20 GB, 10% 20 GB + 40% cores, 20% 40 GB",
         {{"10GB", 0.30, 9 * 1024, 0, MODE_ANY}, {"10GB+25%", 0.20, 9 * 1024, 25, MODE_ANY},
          {"20GB", 0.20, 19 * 1024, 0, MODE_ANY}, {"20GB+40%", 0.10, 19 * 1024, 40, MODE_ANY},
          {"40GB", 0.20, 39 * 1024, 0, MODE_ANY}},
         5, false},
        {"small", "many small inference pods: 40% 1 GB, 30% 2 GB, 30% 4 GB",
         {{"1GB", 0.40, 1024, 0, MODE_ANY}, {"2GB", 0.30, 2048, 0, MODE_ANY},
          {"4GB", 0.30, 4096, 0, MODE_ANY}},
         3, true},
        {"isolation", "isolation-requiring pods: 30% 10 GB vgpu-mode mig, 20% 20 GB vgpu-mode mig, 10% 8 GB + 100% "
                      "cores, 40% 4 GB (no mode)",
         {{"10GB-mig", 0.30, 9 * 1024, 0, MODE_MIG}, {"20GB-mig", 0.20, 19 * 1024, 0, MODE_MIG},
          {"8GB+100%", 0.10, 8 * 1024, 100, MODE_ANY}, {"4GB", 0.40, 4096, 0, MODE_ANY}},
         4, true},
};
static const struct mix *mix = &mixes[0];       /* the mix being run */
#define N_CLASSES (mix->n)
#define classes (mix->cls)

static unsigned cores_of(const struct model *m, const struct mk_gi_profile *p);

/* The smallest attribute-free profile a class needs on `m` (memory, then
 * slices; cores floor included): what the lower bound and the load count. */
static const struct mk_gi_profile *class_profile(const struct model *m, const struct pod_class *c) {
        const struct mk_gi_profile *best = NULL;
        for (size_t i = 0; i < m->n_all; i++) {
                const struct mk_gi_profile *p = &m->all[i];
                if (strchr(p->name, '+') || p->n_placements == 0)
                        continue;
                if (c->mem_mib ? p->memory_mib < c->mem_mib : p->placements[0].size != UNITS)
                        continue;
                if (cores_of(m, p) < c->cores)
                        continue;
                if (!best || p->memory_mib < best->memory_mib ||
                    (p->memory_mib == best->memory_mib && p->slices < best->slices))
                        best = p;
        }
        if (!best)
                abort();
        return best;
}

struct pod {
        double arrive, leave;
        unsigned cls;
};

struct event {
        double t;
        uint32_t pod;
        bool arrival;
};

static uint64_t rng_next(uint64_t *s) {
        /* splitmix64 */
        uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
        z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
        return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) {
        return ((double) (rng_next(s) >> 11) + 0.5) / (double) (UINT64_C(1) << 53);
}

static int event_cmp(const void *a, const void *b) {
        const struct event *x = a, *y = b;
        if (x->t != y->t)
                return x->t < y->t ? -1 : 1;
        /* departures first at equal times */
        if (x->arrival != y->arrival)
                return x->arrival ? 1 : -1;
        return x->pod < y->pod ? -1 : x->pod > y->pod;
}

struct trace {
        struct pod *pods;
        size_t n_pods;
        struct event *ev;
        size_t n_ev;
};

/* Arrival rate 1; mean lifetime chosen so the offered demand in memory units
 * is `load` x the cluster's units. */
static void trace_make(const struct model *m, struct trace *t, size_t n_pods, double load, size_t cluster_gpus,
                       uint64_t seed) {
        double mean_units = 0;
        for (size_t c = 0; c < N_CLASSES; c++)
                mean_units += classes[c].share * class_profile(m, &classes[c])->placements[0].size;
        double lifetime = load * (double) (cluster_gpus * UNITS) / mean_units;
        t->pods = calloc(n_pods, sizeof *t->pods);
        t->ev = calloc(2 * n_pods, sizeof *t->ev);
        if (!t->pods || !t->ev)
                abort();
        t->n_pods = n_pods;
        uint64_t s = seed;
        double now = 0;
        for (size_t i = 0; i < n_pods; i++) {
                now += -log(rng_unit(&s));
                double u = rng_unit(&s), acc = 0;
                unsigned cls = N_CLASSES - 1;
                for (unsigned c = 0; c < N_CLASSES; c++) {
                        acc += classes[c].share;
                        if (u < acc) {
                                cls = c;
                                break;
                        }
                }
                t->pods[i] = (struct pod) {.arrive = now, .leave = now - lifetime * log(rng_unit(&s)), .cls = cls};
                t->ev[2 * i] = (struct event) {.t = now, .pod = (uint32_t) i, .arrival = true};
                t->ev[2 * i + 1] = (struct event) {.t = t->pods[i].leave, .pod = (uint32_t) i, .arrival = false};
        }
        t->n_ev = 2 * n_pods;
        qsort(t->ev, t->n_ev, sizeof *t->ev, event_cmp);
}

static void trace_done(struct trace *t) {
        free(t->pods);
        free(t->ev);
}

/* Offline lower bound on GPUs, at the busiest moment, every pod accepted:
 *   LB(t) = max( ceil(U/8), ceil(S/7), W + ceil(F/2) )
 * U: memory units of each pod's smallest profile (class_profile: 1g.10gb 1,
 * 1g.20gb 2, 3g.40gb 4, whole 8); S: compute slices of the same (1, 1, 3,
 * 7); W: pods needing a whole GPU; F: pods needing 4 units (two per GPU at
 * most). */
static unsigned trace_lower_bound(const struct model *m, const struct trace *t, unsigned *ret_peak_pods) {
        unsigned u[MAX_CLASSES], s[MAX_CLASSES];
        for (size_t c = 0; c < N_CLASSES; c++) {
                const struct mk_gi_profile *p = class_profile(m, &classes[c]);
                u[c] = p->placements[0].size;
                s[c] = p->slices;
        }
        long U = 0, S = 0, W = 0, F = 0, n = 0;
        unsigned best = 0, peak = 0;
        for (size_t i = 0; i < t->n_ev; i++) {
                const struct pod *p = &t->pods[t->ev[i].pod];
                long d = t->ev[i].arrival ? 1 : -1;
                U += d * u[p->cls];
                S += d * s[p->cls];
                W += d * (u[p->cls] == UNITS);
                F += d * (u[p->cls] == UNITS / 2);
                n += d;
                unsigned lb = (unsigned) MAX(MAX((U + 7) / 8, (S + 6) / 7), W + (F + 1) / 2);
                best = MAX(best, lb);
                peak = MAX(peak, (unsigned) n);
        }
        *ret_peak_pods = peak;
        return best;
}

/* --- cluster state ---------------------------------------------------------------- */

enum policy {
        P_HAMI_LEGACY,
        P_HAMI_LEGACY_BINPACK,
        P_HAMI_V210,
        P_HAMI_V210_BINPACK,
        P_WHOLE,
        P_MIGKIT,
        P_MIGKIT_HAMI_PROFILES,
        P_SOFT,                 /* unified pool issue: soft slices only (every GPU shared) */
        P_UNIFIED,              /* mixed nodes (GPUs 0-3 MIG, 4-7 shared), idle GPUs switch, mk_fit_choose_mode */
        P_UNIFIED_HALF,         /* half the nodes MIG, half shared, no switch, mk_fit_choose_mode */
        P_HAMI_SOFT,            /* HAMi v2.10, every node hami-core */
        P_HAMI_HALF,            /* HAMi v2.10, half the nodes mig, half hami-core */
        _P_MAX,
};

static const char *const policy_names[_P_MAX] = {
        [P_HAMI_LEGACY] = "hami-legacy",
        [P_HAMI_LEGACY_BINPACK] = "hami-legacy-binpack",
        [P_HAMI_V210] = "hami-v2.10",
        [P_HAMI_V210_BINPACK] = "hami-v2.10-binpack",
        [P_WHOLE] = "whole-gpu",
        [P_MIGKIT] = "migkit",
        [P_MIGKIT_HAMI_PROFILES] = "migkit-hami-profiles",
        [P_SOFT] = "soft",
        [P_UNIFIED] = "unified",
        [P_UNIFIED_HALF] = "unified-half",
        [P_HAMI_SOFT] = "hami-v2.10-soft",
        [P_HAMI_HALF] = "hami-v2.10-half",
};

/* A legacy template: slots in flattened order. */
struct slot {
        const char *profile;
        uint64_t config_mib;    /* the template's `memory` value */
        unsigned start;
};
struct tmpl {
        struct slot slots[MAX_INST];
        unsigned n;
};
/* The chart's A100-80GB geometries (same shape as its A100-40GB example;
 * HAMi release-v2.9, knownMigGeometries), used for H100-80GB too (same
 * profile names). Slot placements are where mig-parted's creation puts them. */
static const struct tmpl legacy_templates[] = {
        {{{"1g.10gb", 10240, 0}, {"1g.10gb", 10240, 1}, {"1g.10gb", 10240, 2}, {"1g.10gb", 10240, 3},
          {"1g.10gb", 10240, 4}, {"1g.10gb", 10240, 5}, {"1g.10gb", 10240, 6}}, 7},
        {{{"2g.20gb", 20480, 0}, {"2g.20gb", 20480, 2}, {"2g.20gb", 20480, 4}, {"1g.10gb", 10240, 6}}, 4},
        {{{"3g.40gb", 40960, 0}, {"3g.40gb", 40960, 4}}, 2},
        {{{"7g.80gb", 81920, 0}}, 1},
};

struct sgpu {
        struct mk_fit_instance used[MAX_INST];
        uint32_t pod[MAX_INST];
        unsigned n_used;
        uint64_t mem_used;      /* charged MiB (HAMi's Usedmem) */
        unsigned cores_used;    /* charged % (HAMi's Usedcores) */
        int tmpl;               /* legacy: template in use, -1 none */
        unsigned slot_busy;     /* legacy: mask of slots in use */
        struct mk_fit_soft_slice slices[SPLIT];  /* shared GPU: soft slices */
        uint32_t spod[SPLIT];
        unsigned n_slices;
        bool soft;              /* in hami-core mode (else MIG) */
};

struct cluster {
        const struct model *m;
        enum policy policy;
        size_t n_nodes, n_gpus;
        struct sgpu *g;
        struct mk_fit_gpu *fit;  /* views of g for plan/fit (allowed profiles per policy) */
        struct mk_fit_gpu *meas; /* views with every profile, to measure fragmentation alike */
        struct mk_fit_node_cache *cache; /* per node, for fit's views (NULL: --no-cache) */
        int32_t *where;          /* pod -> GPU, -1 rejected */
        const struct mk_gi_profile *last;  /* the profile of the last instance added */
        unsigned long short_cores;      /* pods given a profile below their gpucores floor (HAMi) */
        uint8_t *slot;           /* pod -> index (instance or legacy slot) */
        struct mk_fit_shared_gpu *sh;   /* views of g for plan/fit-soft (unavailable when in MIG mode) */
        bool switching;          /* idle GPUs may change mode (P_UNIFIED) */
        uint32_t *pod_mib;       /* pod -> GPU memory committed to it */
        uint64_t committed;      /* MiB committed to running pods (profile memory or slice cap) */
};

/* A GPU's mode or use changed: which fit sees it, and whether it is an
 * idle GPU that may switch (listed in both, `switchable` in the other mode's). */
static void gpu_views(struct cluster *c, size_t gi) {
        const struct sgpu *g = &c->g[gi];
        bool sw = c->switching && g->n_used == 0 && g->n_slices == 0;
        c->fit[gi].unavailable = g->soft && !sw;
        c->fit[gi].switchable = g->soft && sw;
        c->sh[gi].unavailable = !g->soft && !sw;
        c->sh[gi].switchable = !g->soft && sw;
        c->sh[gi].n_used = g->n_slices;
}

/* A GPU changed: its node's cache too (what a scheduler does on an
 * inventory or reservation change). */
static void cache_refresh(struct cluster *c, size_t gi) {
        if (!c->cache)
                return;
        size_t n = gi / GPUS_PER_NODE;
        struct mk_fit_node node = {.gpus = c->fit + n * GPUS_PER_NODE, .n_gpus = GPUS_PER_NODE};
        int r = mk_fit_node_cache_update(&node, &c->cache[n]);
        if (r < 0 && r != -EOPNOTSUPP)
                abort();
}

static void cluster_init(struct cluster *c, const struct model *m, enum policy p, size_t n_nodes, size_t n_pods) {
        *c = (struct cluster) {.m = m, .policy = p, .n_nodes = n_nodes, .n_gpus = n_nodes * GPUS_PER_NODE};
        c->g = calloc(c->n_gpus, sizeof *c->g);
        c->fit = calloc(c->n_gpus, sizeof *c->fit);
        c->meas = calloc(c->n_gpus, sizeof *c->meas);
        c->where = malloc(n_pods * sizeof *c->where);
        c->slot = calloc(n_pods, 1);
        c->cache = use_caches ? calloc(c->n_nodes, sizeof *c->cache) : NULL;
        c->sh = calloc(c->n_gpus, sizeof *c->sh);
        c->pod_mib = calloc(n_pods, sizeof *c->pod_mib);
        c->switching = p == P_UNIFIED;
        if (!c->g || !c->fit || !c->meas || !c->where || !c->slot || (use_caches && !c->cache) || !c->sh ||
            !c->pod_mib)
                abort();
        bool hami_set = p == P_MIGKIT_HAMI_PROFILES;
        for (size_t i = 0; i < c->n_gpus; i++) {
                c->g[i].tmpl = -1;
                c->fit[i] = (struct mk_fit_gpu) {
                        .profiles = hami_set ? m->hami : m->all,
                        .n_profiles = hami_set ? m->n_hami : m->n_all,
                        .memory_units = UNITS,
                        .slices = 7,
                        .memory_mib = m->memory_mib,
                        .used = c->g[i].used,
                        .tables = hami_set ? m->hami_tables : m->all_tables,
                };
                c->meas[i] = c->fit[i];
                c->meas[i].profiles = m->all;
                c->meas[i].n_profiles = m->n_all;
                c->meas[i].tables = m->all_tables;
                size_t node = i / GPUS_PER_NODE, k = i % GPUS_PER_NODE;
                c->g[i].soft = p == P_SOFT || p == P_HAMI_SOFT ||
                               ((p == P_UNIFIED_HALF || p == P_HAMI_HALF) && node % 2 == 1) ||
                               (p == P_UNIFIED && k >= GPUS_PER_NODE / 2);
                c->sh[i] = (struct mk_fit_shared_gpu) {.memory_mib = m->memory_mib, .split = SPLIT,
                                                       .used = c->g[i].slices};
                gpu_views(c, i);
        }
        for (size_t i = 0; i < c->n_gpus; i += GPUS_PER_NODE)
                cache_refresh(c, i);
        for (size_t i = 0; i < n_pods; i++)
                c->where[i] = -1;
}

static void cluster_done(struct cluster *c) {
        free(c->cache);
        free(c->g);
        free(c->fit);
        free(c->meas);
        free(c->where);
        free(c->slot);
        free(c->sh);
        free(c->pod_mib);
}

static unsigned cores_of(const struct model *m, const struct mk_gi_profile *p) {
        unsigned max = 0;
        for (size_t i = 0; i < m->n_all; i++)
                max = MAX(max, m->all[i].multiprocessors);
        return max ? (p->multiprocessors * 100 + max - 1) / max : 0;
}

static void gpu_add(struct cluster *c, size_t gi, uint32_t pod, const struct mk_gi_profile *p, struct mk_placement pl,
                    uint64_t charged_mib) {
        struct sgpu *g = &c->g[gi];
        if (g->n_used >= MAX_INST)
                abort();
        g->used[g->n_used] = (struct mk_fit_instance) {.profile_id = p->id, .slices = p->slices, .placement = pl};
        g->pod[g->n_used] = pod;
        g->n_used++;
        g->mem_used += charged_mib;
        g->cores_used += cores_of(c->m, p);
        c->fit[gi].n_used = c->meas[gi].n_used = g->n_used;
        c->where[pod] = (int32_t) gi;
        c->last = p;
        c->pod_mib[pod] = (uint32_t) charged_mib;
        c->committed += charged_mib;
        gpu_views(c, gi);
        cache_refresh(c, gi);
}

/* A soft slice on a shared GPU (an idle MIG GPU switches). */
static void soft_add(struct cluster *c, size_t gi, uint32_t pod, uint64_t mib, unsigned cores) {
        struct sgpu *g = &c->g[gi];
        if (g->n_slices >= SPLIT || g->n_used)
                abort();
        g->soft = true;
        g->slices[g->n_slices] = (struct mk_fit_soft_slice) {mib, cores};
        g->spod[g->n_slices++] = pod;
        g->mem_used += mib;
        g->cores_used += cores;
        c->where[pod] = (int32_t) gi;
        c->pod_mib[pod] = (uint32_t) mib;
        c->committed += mib;
        gpu_views(c, gi);
        cache_refresh(c, gi);
}

/* Removes the pod's soft slice; false when it holds none on `gi`. */
static bool soft_remove(struct cluster *c, size_t gi, uint32_t pod) {
        struct sgpu *g = &c->g[gi];
        for (unsigned i = 0; i < g->n_slices; i++)
                if (g->spod[i] == pod) {
                        g->mem_used -= g->slices[i].memory_mib;
                        g->cores_used -= g->slices[i].cores;
                        g->slices[i] = g->slices[g->n_slices - 1];
                        g->spod[i] = g->spod[g->n_slices - 1];
                        g->n_slices--;
                        c->committed -= c->pod_mib[pod];
                        gpu_views(c, gi);
                        cache_refresh(c, gi);
                        return true;
                }
        return false;
}

static void gpu_remove(struct cluster *c, size_t gi, uint32_t pod, uint64_t charged_mib, unsigned cores) {
        struct sgpu *g = &c->g[gi];
        for (unsigned i = 0; i < g->n_used; i++)
                if (g->pod[i] == pod) {
                        g->used[i] = g->used[g->n_used - 1];
                        g->pod[i] = g->pod[g->n_used - 1];
                        g->n_used--;
                        break;
                }
        g->mem_used -= charged_mib;
        g->cores_used -= cores;
        c->fit[gi].n_used = c->meas[gi].n_used = g->n_used;
        c->committed -= c->pod_mib[pod];
        gpu_views(c, gi);
        cache_refresh(c, gi);
}

/* HAMi's device score, before the pod; the pod's own share is the same for
 * every device (HAMi v2.10.0, pkg/device/nvidia/device.go and
 * pkg/scheduler/score.go). */
static double hami_slots(const struct sgpu *g) {
        return g->soft ? (double) g->n_slices / SPLIT : (double) g->n_used / 7;
}

static double hami_gpu_score(const struct cluster *c, size_t gi) {
        const struct sgpu *g = &c->g[gi];
        return hami_slots(g) + g->cores_used / 100.0 + (double) g->mem_used / c->m->memory_mib;
}

/* HAMi's node score, before the pod (HAMi v2.10.0, pkg/scheduler/score.go). */
static double hami_node_score(const struct cluster *c, size_t node) {
        double used = 0, cores = 0, mem = 0;
        for (size_t k = 0; k < GPUS_PER_NODE; k++) {
                const struct sgpu *g = &c->g[node * GPUS_PER_NODE + k];
                used += hami_slots(g);
                cores += g->cores_used;
                mem += (double) g->mem_used;
        }
        return used / GPUS_PER_NODE + cores / (100.0 * GPUS_PER_NODE) +
               mem / ((double) c->m->memory_mib * GPUS_PER_NODE);
}

/* v2.10 on one GPU: smallest adequate allowlisted profile, first free placement. */
static bool v210_gpu(const struct cluster *c, size_t gi, uint64_t mem_mib, const struct mk_gi_profile **ret_p,
                     struct mk_placement *ret_pl) {
        const struct model *m = c->m;
        /* allowlist sorted by memory, then slices (HAMi's order) */
        const struct mk_gi_profile *order[8];
        size_t n = 0;
        for (size_t i = 0; i < m->n_hami; i++) {
                size_t k = n++;
                while (k > 0 && (order[k - 1]->memory_mib > m->hami[i].memory_mib ||
                                 (order[k - 1]->memory_mib == m->hami[i].memory_mib &&
                                  order[k - 1]->slices > m->hami[i].slices))) {
                        order[k] = order[k - 1];
                        k--;
                }
                order[k] = &m->hami[i];
        }
        const struct sgpu *g = &c->g[gi];
        if (g->n_used >= 7)
                return false;
        uint32_t used = 0;
        for (unsigned i = 0; i < g->n_used; i++)
                used |= mk_placement_mask(g->used[i].placement);
        for (size_t k = 0; k < n; k++) {
                const struct mk_gi_profile *p = order[k];
                bool whole = mem_mib == 0;
                if (whole ? p->placements[0].size != UNITS : p->memory_mib < mem_mib)
                        continue;
                bool high_first = p->slices == 1 || p->slices == 3;
                for (size_t q = 0; q < p->n_placements; q++) {
                        struct mk_placement pl = p->placements[high_first ? p->n_placements - 1 - q : q];
                        if ((mk_placement_mask(pl) & used) == 0) {
                                *ret_p = p;
                                *ret_pl = pl;
                                return true;
                        }
                }
        }
        return false;
}

/* Legacy on one GPU: template first fit, locked while a slot is in use. */
static bool legacy_gpu(const struct cluster *c, size_t gi, uint64_t mem_mib, int *ret_tmpl, unsigned *ret_slot) {
        const struct sgpu *g = &c->g[gi];
        uint64_t need = mem_mib ? mem_mib : c->m->memory_mib;
        if (g->slot_busy == 0) {
                for (size_t t = 0; t < ELEMENTSOF(legacy_templates); t++)
                        for (unsigned s = 0; s < legacy_templates[t].n; s++)
                                if (legacy_templates[t].slots[s].config_mib >= need) {
                                        *ret_tmpl = (int) t;
                                        *ret_slot = s;
                                        return true;
                                }
                return false;
        }
        const struct tmpl *t = &legacy_templates[g->tmpl];
        for (unsigned s = 0; s < t->n; s++)
                if (!(g->slot_busy & (1u << s)) && t->slots[s].config_mib >= need) {
                        *ret_tmpl = g->tmpl;
                        *ret_slot = s;
                        return true;
                }
        return false;
}

/* GPUs of a node in HAMi's order: spread = lowest score first, binpack = highest. */
static void hami_gpu_order(const struct cluster *c, size_t node, bool binpack, size_t order[GPUS_PER_NODE]) {
        double sc[GPUS_PER_NODE];
        for (size_t k = 0; k < GPUS_PER_NODE; k++) {
                sc[k] = hami_gpu_score(c, node * GPUS_PER_NODE + k);
                size_t j = k;
                while (j > 0 && (binpack ? sc[order[j - 1]] < sc[k] : sc[order[j - 1]] > sc[k])) {
                        order[j] = order[j - 1];
                        j--;
                }
                order[j] = k;
        }
}

static bool place_hami(struct cluster *c, uint32_t pod, uint64_t mem_mib, bool legacy, bool gpu_binpack) {
        size_t best_node = SIZE_MAX, best_gpu = 0;
        double best_score = -1;
        int best_tmpl = -1;
        unsigned best_slot = 0;
        const struct mk_gi_profile *best_p = NULL;
        struct mk_placement best_pl = {};
        for (size_t n = 0; n < c->n_nodes; n++) {
                size_t order[GPUS_PER_NODE];
                hami_gpu_order(c, n, gpu_binpack, order);
                for (size_t k = 0; k < GPUS_PER_NODE; k++) {
                        size_t gi = n * GPUS_PER_NODE + order[k];
                        int t = -1;
                        unsigned s = 0;
                        const struct mk_gi_profile *p = NULL;
                        struct mk_placement pl = {};
                        bool ok = legacy ? legacy_gpu(c, gi, mem_mib, &t, &s) : v210_gpu(c, gi, mem_mib, &p, &pl);
                        if (!ok)
                                continue;
                        double score = hami_node_score(c, n);
                        if (score > best_score) {
                                best_score = score;
                                best_node = n;
                                best_gpu = gi;
                                if (legacy) {
                                        best_tmpl = t;
                                        best_slot = s;
                                } else {
                                        best_p = p;
                                        best_pl = pl;
                                }
                        }
                        break;
                }
        }
        if (best_node == SIZE_MAX)
                return false;
        if (legacy) {
                const struct slot *sl = &legacy_templates[best_tmpl].slots[best_slot];
                const struct mk_gi_profile *p = model_profile(c->m, sl->profile);
                c->g[best_gpu].tmpl = best_tmpl;
                c->g[best_gpu].slot_busy |= 1u << best_slot;
                gpu_add(c, best_gpu, pod, p, (struct mk_placement) {sl->start, p->placements[0].size}, sl->config_mib);
                c->slot[pod] = (uint8_t) best_slot;
        } else
                gpu_add(c, best_gpu, pod, best_p, best_pl, best_p->memory_mib);
        return true;
}

static bool place_whole(struct cluster *c, uint32_t pod) {
        const struct mk_gi_profile *p7 = model_profile(c->m, "7g.80gb");
        size_t best = SIZE_MAX;
        unsigned best_used = 0;
        for (size_t n = 0; n < c->n_nodes; n++) {
                unsigned used = 0;
                size_t free_gpu = SIZE_MAX;
                for (size_t k = 0; k < GPUS_PER_NODE; k++) {
                        size_t gi = n * GPUS_PER_NODE + k;
                        if (c->g[gi].n_used)
                                used++;
                        else if (free_gpu == SIZE_MAX)
                                free_gpu = gi;
                }
                if (free_gpu != SIZE_MAX && (best == SIZE_MAX || used > best_used)) {
                        best = free_gpu;
                        best_used = used;
                }
        }
        if (best == SIZE_MAX)
                return false;
        gpu_add(c, best, pod, p7, p7->placements[0], c->m->memory_mib);
        return true;
}

/* Scans every node with mk_fit_node; the highest score wins (kube-scheduler
 * with the extender as the only GPU-aware priority). */
static int migkit_best(struct cluster *c, const struct mk_fit_request *rq, size_t *ret_node, struct mk_fit_result *ret) {
        size_t best = SIZE_MAX;
        struct mk_fit_result br = {}, r;
        for (size_t n = 0; n < c->n_nodes; n++) {
                struct mk_fit_node node = {.gpus = c->fit + n * GPUS_PER_NODE, .n_gpus = GPUS_PER_NODE,
                                           .cache = c->cache ? &c->cache[n] : NULL};
                if (mk_fit_node(&node, rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r, NULL) < 0)
                        continue;
                if (best == SIZE_MAX || r.score > br.score) {
                        best = n;
                        br = r;
                }
        }
        if (best == SIZE_MAX)
                return -ENOSPC;
        *ret_node = best;
        *ret = br;
        return 0;
}

static bool place_migkit(struct cluster *c, uint32_t pod, uint64_t mem_mib, unsigned cores) {
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = mem_mib, .mem_percent = mem_mib ? 0 : 100,
                                    .cores_percent = cores};
        size_t node;
        struct mk_fit_result r;
        if (migkit_best(c, &rq, &node, &r) < 0)
                return false;
        const struct mk_fit_choice *ch = &r.choices[0];
        gpu_add(c, node * GPUS_PER_NODE + ch->gpu, pod, ch->profile, ch->placement, ch->profile->memory_mib);
        return true;
}

/* The request of a pod of class `cls`: no memory means the whole GPU. */
static struct mk_fit_request class_request(unsigned cls) {
        return (struct mk_fit_request) {.gpus = 1, .mem_mib = classes[cls].mem_mib,
                                        .mem_percent = classes[cls].mem_mib ? 0 : 100,
                                        .cores_percent = classes[cls].cores};
}

/* The migkit pools: every node's MIG views and shared views; a pod with
 * vgpu-mode mig gets mk_fit_node, one without a mode mk_fit_choose_mode
 * (soft pool: mk_fit_soft_node); the highest score wins. */
static int pool_best(const struct cluster *c, const struct mk_fit_request *rq, bool mig_only, size_t *ret_node,
                     struct mk_fit_mode_result *ret) {
        size_t best = SIZE_MAX;
        double best_score = -1;
        struct mk_fit_mode_result r;
        for (size_t n = 0; n < c->n_nodes; n++) {
                struct mk_fit_node mn = {.gpus = c->fit + n * GPUS_PER_NODE, .n_gpus = GPUS_PER_NODE,
                                         .cache = c->cache ? &c->cache[n] : NULL};
                struct mk_fit_soft_node sn = {.gpus = c->sh + n * GPUS_PER_NODE, .n_gpus = GPUS_PER_NODE};
                int q;
                if (c->policy == P_SOFT) {
                        q = mk_fit_soft_node(&sn, rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r.soft, NULL);
                        r.mode = MK_FIT_MODE_SOFT;
                        r.score = r.soft.score;
                } else if (mig_only) {
                        q = mk_fit_node(&mn, rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r.mig, NULL);
                        r.mode = MK_FIT_MODE_MIG;
                        r.score = r.mig.score;
                } else
                        q = mk_fit_choose_mode(&mn, &sn, rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r, NULL);
                if (q == 0 && r.score > best_score) {
                        best = n;
                        best_score = r.score;
                        *ret = r;
                }
        }
        if (best == SIZE_MAX)
                return -ENOSPC;
        *ret_node = best;
        return 0;
}

static bool place_pool(struct cluster *c, uint32_t pod, unsigned cls) {
        struct mk_fit_request rq = class_request(cls);
        bool mig_only = classes[cls].mode == MODE_MIG;
        if (c->policy == P_SOFT && mig_only)
                return false;
        size_t best;
        struct mk_fit_mode_result br;
        if (pool_best(c, &rq, mig_only, &best, &br) < 0)
                return false;
        if (br.mode == MK_FIT_MODE_MIG) {
                const struct mk_fit_choice *ch = &br.mig.choices[0];
                size_t gi = best * GPUS_PER_NODE + ch->gpu;
                c->g[gi].soft = false; /* an idle shared GPU turns MIG */
                gpu_add(c, gi, pod, ch->profile, ch->placement, ch->profile->memory_mib);
        } else {
                const struct mk_fit_soft_choice *ch = &br.soft.choices[0];
                soft_add(c, best * GPUS_PER_NODE + ch->gpu, pod, ch->memory_mib, ch->cores);
        }
        return true;
}

/* HAMi v2.10 with per-node modes (mig or hami-core): on each node the GPUs
 * in HAMi's order (spread), the first that fits (MIG: v210_gpu; hami-core:
 * HAMi's Fit rules, which plan/fit-soft applies alike); the node with the
 * highest score before the pod wins. vgpu-mode mig pods skip hami-core nodes. */
static bool place_hami_pool(struct cluster *c, uint32_t pod, unsigned cls) {
        struct mk_fit_request rq = class_request(cls);
        size_t best_gpu = SIZE_MAX;
        double best_score = -1;
        const struct mk_gi_profile *best_p = NULL;
        struct mk_placement best_pl = {};
        for (size_t n = 0; n < c->n_nodes; n++) {
                bool soft = c->g[n * GPUS_PER_NODE].soft;
                if (soft && classes[cls].mode == MODE_MIG)
                        continue;
                size_t order[GPUS_PER_NODE];
                hami_gpu_order(c, n, false, order);
                for (size_t k = 0; k < GPUS_PER_NODE; k++) {
                        size_t gi = n * GPUS_PER_NODE + order[k];
                        const struct mk_gi_profile *p = NULL;
                        struct mk_placement pl = {};
                        bool ok;
                        if (soft) {
                                struct mk_fit_soft_node one = {.gpus = &c->sh[gi], .n_gpus = 1};
                                struct mk_fit_soft_result r;
                                ok = mk_fit_soft_node(&one, &rq, MK_FIT_BINPACK, MK_FIT_SPREAD, &r, NULL) == 0;
                        } else
                                ok = v210_gpu(c, gi, rq.mem_mib, &p, &pl);
                        if (!ok)
                                continue;
                        double score = hami_node_score(c, n);
                        if (score > best_score) {
                                best_score = score;
                                best_gpu = gi;
                                best_p = p;
                                best_pl = pl;
                        }
                        break;
                }
        }
        if (best_gpu == SIZE_MAX)
                return false;
        if (best_p)
                gpu_add(c, best_gpu, pod, best_p, best_pl, best_p->memory_mib);
        else
                soft_add(c, best_gpu, pod, rq.mem_mib ? rq.mem_mib : c->m->memory_mib, rq.cores_percent);
        return true;
}

/* HAMi sizes by memory only (gpucores is ignored for the profile: HAMi
 * v2.10.0, dynamic MIG, PR #2378): such pods are placed, and counted when
 * their profile has fewer cores than asked. */
static bool place(struct cluster *c, uint32_t pod, unsigned cls) {
        uint64_t mem = classes[cls].mem_mib;
        unsigned cores = classes[cls].cores;
        bool ok;
        c->last = NULL;
        switch (c->policy) {
        case P_HAMI_LEGACY:
                ok = place_hami(c, pod, mem, true, false);
                break;
        case P_HAMI_LEGACY_BINPACK:
                ok = place_hami(c, pod, mem, true, true);
                break;
        case P_HAMI_V210:
                ok = place_hami(c, pod, mem, false, false);
                break;
        case P_HAMI_V210_BINPACK:
                ok = place_hami(c, pod, mem, false, true);
                break;
        case P_WHOLE:
                ok = place_whole(c, pod);
                break;
        case P_SOFT:
        case P_UNIFIED:
        case P_UNIFIED_HALF:
                ok = place_pool(c, pod, cls);
                break;
        case P_HAMI_SOFT:
        case P_HAMI_HALF:
                ok = place_hami_pool(c, pod, cls);
                break;
        default:
                ok = place_migkit(c, pod, mem, cores);
                break;
        }
        if (ok && cores > 0 && c->last && cores_of(c->m, c->last) < cores)
                c->short_cores++;
        return ok;
}

static void release(struct cluster *c, uint32_t pod) {
        int32_t gi = c->where[pod];
        if (gi < 0)
                return;
        if (soft_remove(c, (size_t) gi, pod)) {
                c->where[pod] = -1;
                return;
        }
        struct sgpu *g = &c->g[gi];
        for (unsigned i = 0; i < g->n_used; i++)
                if (g->pod[i] == pod) {
                        unsigned cores = 0;
                        uint64_t mem = 0;
                        for (size_t k = 0; k < c->m->n_all; k++)
                                if (c->m->all[k].id == g->used[i].profile_id) {
                                        cores = cores_of(c->m, &c->m->all[k]);
                                        mem = c->m->all[k].memory_mib;
                                }
                        if (c->policy == P_HAMI_LEGACY || c->policy == P_HAMI_LEGACY_BINPACK) {
                                mem = legacy_templates[g->tmpl].slots[c->slot[pod]].config_mib;
                                g->slot_busy &= ~(1u << c->slot[pod]);
                        } else if (c->policy == P_WHOLE)
                                mem = c->m->memory_mib;
                        gpu_remove(c, (size_t) gi, pod, mem, cores);
                        break;
                }
        c->where[pod] = -1;
}

/* --- one run ------------------------------------------------------------------------ */

#define N_WINDOWS 8

struct stats {
        unsigned long accepted, rejected, short_cores, on_mig;
        unsigned long rej_cls[MAX_CLASSES], arr_cls[MAX_CLASSES];
        double gpus_in_use_sum, frag_sum, stranded_sum, committed_sum;
        unsigned long samples;
        /* fragmentation over time: the measured arrivals in N_WINDOWS equal windows */
        double frag_win[N_WINDOWS], stranded_win[N_WINDOWS];
        unsigned long samples_win[N_WINDOWS];
        double seconds;
};

#define SAMPLE_EVERY 50

static void run(const struct model *m, enum policy p, const struct trace *t, size_t n_nodes, size_t warmup,
                struct stats *st) {
        struct cluster c;
        cluster_init(&c, m, p, n_nodes, t->n_pods);
        *st = (struct stats) {};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        unsigned long arrivals = 0;
        for (size_t i = 0; i < t->n_ev; i++) {
                const struct event *e = &t->ev[i];
                if (!e->arrival) {
                        release(&c, e->pod);
                        continue;
                }
                unsigned cls = t->pods[e->pod].cls;
                unsigned long short_before = c.short_cores;
                bool ok = place(&c, e->pod, cls);
                if (e->pod < warmup)
                        continue;
                st->short_cores += c.short_cores - short_before;
                arrivals++;
                st->arr_cls[cls]++;
                st->on_mig += ok && c.last;
                if (ok)
                        st->accepted++;
                else {
                        st->rejected++;
                        st->rej_cls[cls]++;
                }
                if (arrivals % SAMPLE_EVERY == 0) {
                        unsigned in_use = 0;
                        double frag = 0;
                        unsigned stranded = 0;
                        for (size_t gi = 0; gi < c.n_gpus; gi++) {
                                if (!c.g[gi].n_used && !c.g[gi].n_slices)
                                        continue;
                                in_use++;
                                frag += mk_fit_gpu_fragmentation(&c.meas[gi]);
                                stranded += UNITS - (unsigned) __builtin_popcount(mk_fit_used_mask(&c.meas[gi]));
                        }
                        st->gpus_in_use_sum += in_use;
                        st->frag_sum += in_use ? frag / in_use : 0;
                        st->stranded_sum += stranded;
                        st->committed_sum += (double) c.committed;
                        st->samples++;
                        size_t w = (size_t) ((arrivals - 1) * N_WINDOWS / (t->n_pods - warmup));
                        if (w < N_WINDOWS) {
                                st->frag_win[w] += in_use ? frag / in_use : 0;
                                st->stranded_win[w] += stranded;
                                st->samples_win[w]++;
                        }
                }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        st->seconds = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
        cluster_done(&c);
}

/* Rejects nothing from the first pod on. */
static bool run_all_fit(const struct model *m, enum policy p, const struct trace *t, size_t n_nodes) {
        struct cluster c;
        cluster_init(&c, m, p, n_nodes, t->n_pods);
        bool ok = true;
        for (size_t i = 0; i < t->n_ev && ok; i++) {
                const struct event *e = &t->ev[i];
                if (!e->arrival)
                        release(&c, e->pod);
                else
                        ok = place(&c, e->pod, t->pods[e->pod].cls);
        }
        cluster_done(&c);
        return ok;
}

static const enum policy shown[] = {P_HAMI_LEGACY, P_HAMI_LEGACY_BINPACK, P_HAMI_V210, P_HAMI_V210_BINPACK,
                                    P_WHOLE,       P_MIGKIT,              P_MIGKIT_HAMI_PROFILES};

/* What a mix's summary lines need of one model. */
struct summary {
        double loads[8], vs_v210[8], vs_v210_honoured[8];
        unsigned long short_v210[8], accepted_v210[8];
        size_t n_loads;
        unsigned bound, migkit_gpus, v210_gpus;
};

static void acceptance(const struct model *m, size_t n_nodes, size_t n_pods, double load, uint64_t seed,
                       struct summary *sum) {
        struct trace t;
        trace_make(m, &t, n_pods, load, n_nodes * GPUS_PER_NODE, seed);
        size_t warmup = n_pods / 5;
        unsigned peak;
        unsigned lb = trace_lower_bound(m, &t, &peak);
        bool cores = false;
        for (size_t k = 0; k < N_CLASSES; k++)
                cores |= classes[k].cores > 0;
        printf("\n%s, %zu nodes x %d GPUs, offered load %.2f of the cluster's memory units, %zu pods (first %zu warm-up), "
               "peak %u pods at once, lower bound at peak %u GPUs\n",
               m->title, n_nodes, GPUS_PER_NODE, load, n_pods, warmup, peak, lb);
        printf("  %-22s %9s %9s %7s %9s %10s %7s %9s%s   rejected by class (", "policy", "accepted", "rejected", "acc%",
               "vs v2.10", "GPUs used", "frag", "idle-units", cores ? " short-cores" : "");
        for (size_t k = 0; k < N_CLASSES; k++)
                printf("%s%s", k ? "/" : "", classes[k].name);
        printf(")\n");
        struct stats st[_P_MAX];
        for (size_t i = 0; i < ELEMENTSOF(shown); i++)
                run(m, shown[i], &t, n_nodes, warmup, &st[shown[i]]);
        double base = (double) st[P_HAMI_V210].accepted;
        for (size_t i = 0; i < ELEMENTSOF(shown); i++) {
                const struct stats *s = &st[shown[i]];
                double n = s->samples ? (double) s->samples : 1;
                printf("  %-22s %9lu %9lu %6.1f%% %+8.1f%% %10.1f %7.3f %9.1f", policy_names[shown[i]], s->accepted,
                       s->rejected, 100.0 * s->accepted / (double) (s->accepted + s->rejected),
                       base > 0 ? 100.0 * ((double) s->accepted / base - 1) : 0, s->gpus_in_use_sum / n, s->frag_sum / n,
                       s->stranded_sum / n);
                if (cores)
                        printf(" %11lu", s->short_cores);
                printf("   ");
                for (size_t k = 0; k < N_CLASSES; k++)
                        printf("%s%lu", k ? "/" : "", s->rej_cls[k]);
                printf("   (%.1f s)\n", s->seconds);
        }
        if (cores)
                printf("  short-cores: pods placed on a profile with fewer cores than their gpucores floor (HAMi sizes "
                       "MIG by memory only)\n");
        printf("  fragmentation over time (mean over busy GPUs; idle units on busy GPUs), %d equal windows of the "
               "measured arrivals:\n",
               N_WINDOWS);
        static const enum policy over_time[] = {P_HAMI_V210, P_MIGKIT};
        for (size_t i = 0; i < ELEMENTSOF(over_time); i++) {
                const struct stats *s = &st[over_time[i]];
                printf("    %-20s", policy_names[over_time[i]]);
                for (size_t w = 0; w < N_WINDOWS; w++) {
                        double n = s->samples_win[w] ? (double) s->samples_win[w] : 1;
                        printf(" %.3f;%-4.0f", s->frag_win[w] / n, s->stranded_win[w] / n);
                }
                printf("\n");
        }
        if (sum && sum->n_loads < ELEMENTSOF(sum->loads)) {
                sum->loads[sum->n_loads] = load;
                sum->vs_v210[sum->n_loads] = base > 0 ? 100.0 * ((double) st[P_MIGKIT].accepted / base - 1) : 0;
                sum->short_v210[sum->n_loads] = st[P_HAMI_V210].short_cores;
                sum->accepted_v210[sum->n_loads] = st[P_HAMI_V210].accepted;
                double honoured = (double) (st[P_HAMI_V210].accepted - st[P_HAMI_V210].short_cores);
                sum->vs_v210_honoured[sum->n_loads] =
                        honoured > 0 ? 100.0 * ((double) st[P_MIGKIT].accepted / honoured - 1) : 0;
                sum->n_loads++;
        }
        trace_done(&t);
}

/* The smallest cluster (in nodes, at least `lo`) on which policy `p`
 * rejects nothing of the trace: doubling from `hi`, then binary search. */
static size_t nodes_needed(const struct model *m, enum policy p, const struct trace *t, size_t lo, size_t hi) {
        lo = MAX(lo, (size_t) 1);
        hi = MAX(hi, lo);
        while (!run_all_fit(m, p, t, hi))
                hi *= 2;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (run_all_fit(m, p, t, mid))
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return lo;
}

/* The smallest cluster (in nodes) on which each policy rejects nothing of
 * one trace, against the offline lower bound. */
static void gpus_needed(const struct model *m, size_t ref_nodes, size_t n_pods, double load, uint64_t seed,
                        struct summary *sum) {
        struct trace t;
        trace_make(m, &t, n_pods, load, ref_nodes * GPUS_PER_NODE, seed);
        unsigned peak;
        unsigned lb = trace_lower_bound(m, &t, &peak);
        printf("\n%s: GPUs needed to accept every pod of a %zu-pod trace (load %.2f of %zu nodes); lower bound %u GPUs "
               "(%u nodes), peak %u pods at once\n",
               m->title, n_pods, load, ref_nodes, lb, (lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE, peak);
        static const enum policy needed_shown[] = {P_HAMI_LEGACY, P_HAMI_V210, P_HAMI_V210_BINPACK, P_WHOLE,
                                                   P_MIGKIT, P_MIGKIT_HAMI_PROFILES};
        for (size_t i = 0; i < ELEMENTSOF(needed_shown); i++) {
                size_t lo = nodes_needed(m, needed_shown[i], &t, (lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE,
                                         (peak + GPUS_PER_NODE - 1) / GPUS_PER_NODE);
                printf("  %-22s %5zu nodes = %5zu GPUs   %.3f x the bound (node-rounded bound %u GPUs: %.3f x)\n",
                       policy_names[needed_shown[i]], lo, lo * GPUS_PER_NODE, (double) (lo * GPUS_PER_NODE) / lb,
                       ((lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE) * GPUS_PER_NODE,
                       (double) lo / ((lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE));
                if (sum && needed_shown[i] == P_MIGKIT)
                        sum->migkit_gpus = (unsigned) (lo * GPUS_PER_NODE);
                if (sum && needed_shown[i] == P_HAMI_V210)
                        sum->v210_gpus = (unsigned) (lo * GPUS_PER_NODE);
        }
        if (sum)
                sum->bound = lb;
        trace_done(&t);
}

/* --- the unified pool (issue 13) ------------------------------------------------------ */

static const enum policy pools[] = {P_MIGKIT, P_SOFT, P_UNIFIED, P_UNIFIED_HALF, P_HAMI_V210, P_HAMI_SOFT, P_HAMI_HALF};
static const char *const pool_titles[_P_MAX] = {
        [P_MIGKIT] = "MIG only (migkit fit, every node mig)",
        [P_SOFT] = "soft slices only (every node hami-core)",
        [P_UNIFIED] = "unified: mixed nodes, idle GPUs switch",
        [P_UNIFIED_HALF] = "unified: half mig, half hami-core nodes",
        [P_HAMI_V210] = "HAMi v2.10, every node mig",
        [P_HAMI_SOFT] = "HAMi v2.10, every node hami-core",
        [P_HAMI_HALF] = "HAMi v2.10, half mig, half hami-core",
};

/* Offline lower bound on GPUs for any pool, at the busiest moment, every pod
 * accepted: the sum of each pod's least share of a GPU in per mille, in
 * either mode: vgpu-mode mig: its smallest profile's units / 8 or slices / 7;
 * 100 % cores: the whole GPU; otherwise the larger of memory / GPU memory,
 * cores / 100 and one sharer slot (1 / split; a MIG instance takes at least
 * 1 / 8). */
static unsigned trace_pool_bound(const struct model *m, const struct trace *t) {
        uint64_t f[MAX_CLASSES];
        for (size_t k = 0; k < N_CLASSES; k++) {
                const struct pod_class *pc = &classes[k];
                const struct mk_gi_profile *p = class_profile(m, pc);
                if (pc->mode == MODE_MIG)
                        f[k] = MAX((uint64_t) p->placements[0].size * 1000 / UNITS, (uint64_t) p->slices * 1000 / 7);
                else if (pc->cores >= 100 || pc->mem_mib == 0)
                        f[k] = 1000;
                else
                        f[k] = MAX(MAX((pc->mem_mib * 1000 + m->memory_mib - 1) / m->memory_mib,
                                       (uint64_t) pc->cores * 10),
                                   (uint64_t) (1000 / SPLIT));
        }
        uint64_t sum = 0, best = 0;
        for (size_t i = 0; i < t->n_ev; i++) {
                const struct pod *p = &t->pods[t->ev[i].pod];
                if (t->ev[i].arrival)
                        sum += f[p->cls];
                else
                        sum -= f[p->cls];
                best = MAX(best, sum);
        }
        return (unsigned) ((best + 999) / 1000);
}

#define MAX_SEEDS 8

struct pool_sum {
        double loads[8];
        unsigned long accepted[8][_P_MAX];
        size_t n_loads;
        unsigned bound, needed[_P_MAX];
};

static void pools_acceptance(const struct model *m, size_t n_nodes, size_t n_pods, double load, uint64_t seed,
                             struct pool_sum *sum) {
        struct trace t;
        trace_make(m, &t, n_pods, load, n_nodes * GPUS_PER_NODE, seed);
        size_t warmup = n_pods / 5;
        printf("\n%s, %zu nodes x %d GPUs, offered load %.2f (MIG units), %zu pods (first %zu warm-up), pool bound at "
               "peak %u GPUs\n",
               m->title, n_nodes, GPUS_PER_NODE, load, n_pods, warmup, trace_pool_bound(m, &t));
        printf("  %-56s %9s %9s %7s %11s %9s %10s %14s %11s   rejected by class (", "pool", "accepted", "rejected",
               "acc%", "vs unified", "on MIG", "GPUs used", "committed GiB", "short-cores");
        for (size_t k = 0; k < N_CLASSES; k++)
                printf("%s%s", k ? "/" : "", classes[k].name);
        printf(")\n");
        printf("  (vs unified: pods that got their request, short-cores not counted)\n");
        struct stats st[_P_MAX];
        for (size_t i = 0; i < ELEMENTSOF(pools); i++)
                run(m, pools[i], &t, n_nodes, warmup, &st[pools[i]]);
        /* Compared on the pods that got what they asked for (HAMi places
         * gpucores pods on MIG profiles with fewer cores: short-cores). */
        double base = (double) (st[P_UNIFIED].accepted - st[P_UNIFIED].short_cores);
        for (size_t i = 0; i < ELEMENTSOF(pools); i++) {
                const struct stats *x = &st[pools[i]];
                double n = x->samples ? (double) x->samples : 1;
                printf("  %-15s %-40s %9lu %9lu %6.1f%% %+10.1f%% %9lu %10.1f %14.0f %11lu   ", policy_names[pools[i]],
                       pool_titles[pools[i]], x->accepted, x->rejected,
                       100.0 * x->accepted / (double) (x->accepted + x->rejected),
                       base > 0 ? 100.0 * ((double) (x->accepted - x->short_cores) / base - 1) : 0, x->on_mig,
                       x->gpus_in_use_sum / n, x->committed_sum / n / 1024, x->short_cores);
                for (size_t k = 0; k < N_CLASSES; k++)
                        printf("%s%lu", k ? "/" : "", x->rej_cls[k]);
                printf("   (%.1f s)\n", x->seconds);
                if (sum && sum->n_loads < ELEMENTSOF(sum->loads))
                        sum->accepted[sum->n_loads][pools[i]] = x->accepted - x->short_cores;
        }
        if (sum && sum->n_loads < ELEMENTSOF(sum->loads))
                sum->loads[sum->n_loads++] = load;
        trace_done(&t);
}

/* The smallest cluster (in nodes) on which each pool rejects nothing. */
static void pools_needed(const struct model *m, size_t ref_nodes, size_t n_pods, double load, uint64_t seed,
                         struct pool_sum *sum) {
        struct trace t;
        trace_make(m, &t, n_pods, load, ref_nodes * GPUS_PER_NODE, seed);
        unsigned peak;
        (void) trace_lower_bound(m, &t, &peak);
        unsigned lb = trace_pool_bound(m, &t);
        printf("\n%s: GPUs needed to accept every pod of a %zu-pod trace (load %.2f of %zu nodes); pool bound %u GPUs, "
               "peak %u pods at once\n",
               m->title, n_pods, load, ref_nodes, lb, peak);
        for (size_t i = 0; i < ELEMENTSOF(pools); i++) {
                enum policy p = pools[i];
                bool possible = true;
                for (size_t k = 0; k < N_CLASSES; k++)
                        possible &= !(classes[k].mode == MODE_MIG && (p == P_SOFT || p == P_HAMI_SOFT));
                if (!possible) {
                        printf("  %-15s never (vgpu-mode mig pods and no MIG GPU)\n", policy_names[p]);
                        sum->needed[p] = 0;
                        continue;
                }
                size_t lo = nodes_needed(m, p, &t, (lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE,
                                         2 * ((lb + GPUS_PER_NODE - 1) / GPUS_PER_NODE));
                printf("  %-15s %5zu nodes = %5zu GPUs   %.3f x the bound\n", policy_names[p], lo, lo * GPUS_PER_NODE,
                       (double) (lo * GPUS_PER_NODE) / lb);
                sum->needed[p] = (unsigned) (lo * GPUS_PER_NODE);
        }
        sum->bound = lb;
        trace_done(&t);
}

/* One mix's pools summary: unified against each other pool per load, and
 * the GPUs each pool needs. */
static void pools_summary(const struct pool_sum *ps, const char *key, uint64_t seed) {
        printf("\n  pools summary, mix '%s', seed %" PRIu64 " (A100-80GB): pods that got their request, unified vs", key,
               seed);
        for (size_t i = 0; i < ELEMENTSOF(pools); i++)
                if (pools[i] != P_UNIFIED)
                        printf(" %s%s", policy_names[pools[i]], i + 1 < ELEMENTSOF(pools) ? "," : "");
        printf("\n");
        for (size_t l = 0; l < ps->n_loads; l++) {
                printf("    load %.1f: unified %lu;", ps->loads[l], ps->accepted[l][P_UNIFIED]);
                bool best = true;
                for (size_t i = 0; i < ELEMENTSOF(pools); i++) {
                        enum policy p = pools[i];
                        if (p == P_UNIFIED)
                                continue;
                        double o = (double) ps->accepted[l][p];
                        best &= ps->accepted[l][P_UNIFIED] > ps->accepted[l][p];
                        printf(" %+.1f%%", o > 0 ? 100.0 * ((double) ps->accepted[l][P_UNIFIED] / o - 1) : 0);
                }
                printf("   %s\n", best ? "(more than every other pool)" : "(NOT more than every other pool)");
        }
        printf("    GPUs needed (bound %u):", ps->bound);
        for (size_t i = 0; i < ELEMENTSOF(pools); i++) {
                if (ps->needed[pools[i]])
                        printf(" %s %u (%.3f x)", policy_names[pools[i]], ps->needed[pools[i]],
                               (double) ps->needed[pools[i]] / ps->bound);
                else
                        printf(" %s never", policy_names[pools[i]]);
                printf("%s", i + 1 < ELEMENTSOF(pools) ? "," : "\n");
        }
}

/* Over several seeds (--seeds): per mix and load, unified minus the best
 * other pool on each seed, and the worst of them (a rule change is checked
 * on every seed, not tuned to one). */
static void pools_seeds_summary(const struct pool_sum psum[][ELEMENTSOF(mixes)], size_t k, const uint64_t *seeds,
                                size_t n_seeds) {
        const struct pool_sum *ps = &psum[0][k];
        const char *key = mixes[k].key;
        printf("\n  pools over %zu seeds, mix '%s': unified minus the best other pool (which), per seed\n", n_seeds,
               key);
        for (size_t l = 0; l < ps->n_loads; l++) {
                long worst = LONG_MAX;
                printf("    load %.1f:", ps->loads[l]);
                for (size_t s = 0; s < n_seeds; s++) {
                        const unsigned long *acc = psum[s][k].accepted[l];
                        unsigned long u = acc[P_UNIFIED], best = 0;
                        enum policy bp = P_UNIFIED;
                        for (size_t i = 0; i < ELEMENTSOF(pools); i++)
                                if (pools[i] != P_UNIFIED && (bp == P_UNIFIED || acc[pools[i]] > best)) {
                                        best = acc[pools[i]];
                                        bp = pools[i];
                                }
                        long d = (long) u - (long) best;
                        worst = MIN(worst, d);
                        printf(" seed %" PRIu64 " %+ld (%s)%s", seeds[s], d, policy_names[bp], s + 1 < n_seeds ? "," : "");
                }
                printf("; worst %+ld%s\n", worst, worst > 0 ? "" : "   (NOT more than every other pool on every seed)");
        }
}

static int dbl_cmp(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

/* Decision time: one pod scanned over every node, states filled by the fit
 * itself (each GPU filled to a random level with pods from the mix). */
static void decision_time(const struct model *m, size_t n_nodes, size_t n_decisions, uint64_t seed) {
        struct cluster c;
        cluster_init(&c, m, P_MIGKIT, n_nodes, 1);
        uint64_t s = seed;
        unsigned long units = 0, gpus_used = 0;
        for (size_t gi = 0; gi < c.n_gpus; gi++) {
                double target = rng_unit(&s) * 1.2 - 0.1; /* about 8% empty, 8% full */
                for (int tries = 0; tries < 16; tries++) {
                        unsigned used = (unsigned) __builtin_popcount(mk_fit_used_mask(&c.fit[gi]));
                        if (used >= target * UNITS)
                                break;
                        double u = rng_unit(&s), acc = 0;
                        unsigned cls = N_CLASSES - 1;
                        for (unsigned k = 0; k < N_CLASSES; k++)
                                if (u < (acc += classes[k].share)) {
                                        cls = k;
                                        break;
                                }
                        struct mk_fit_request rq = {.gpus = 1, .mem_mib = classes[cls].mem_mib,
                                                    .mem_percent = classes[cls].mem_mib ? 0 : 100};
                        struct mk_fit_node one = {.gpus = &c.fit[gi], .n_gpus = 1};
                        struct mk_fit_result r;
                        if (mk_fit_node(&one, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r, NULL) == 0) {
                                struct sgpu *g = &c.g[gi];
                                g->used[g->n_used++] = (struct mk_fit_instance) {
                                        .profile_id = r.choices[0].profile->id,
                                        .slices = r.choices[0].profile->slices,
                                        .placement = r.choices[0].placement,
                                };
                                c.fit[gi].n_used = g->n_used;
                                cache_refresh(&c, gi);
                        }
                }
                unsigned used = (unsigned) __builtin_popcount(mk_fit_used_mask(&c.fit[gi]));
                units += used;
                gpus_used += used > 0;
        }
        double *t = malloc(n_decisions * sizeof *t), *cpu = malloc(n_decisions * sizeof *cpu);
        if (!t || !cpu)
                abort();
        printf("\n%s: decision time of plan/fit for one pod over %zu nodes x %d GPUs (%lu GPUs in use, %.0f%% of units "
               "used; %zu pods from the mix), one thread, capacity tables %s:\n",
               m->title, n_nodes, GPUS_PER_NODE, gpus_used, 100.0 * units / (double) (c.n_gpus * UNITS), n_decisions,
               m->all_tables ? "yes" : "no");
        /* The same pods on the same states, with each node's cache, then without. */
        struct mk_fit_node_cache *caches = c.cache;
        uint64_t seed_pods = s;
        for (int pass = 0; pass < 2; pass++) {
                if (pass == 1 && !caches)
                        break;
                c.cache = pass == 0 ? caches : NULL;
                s = seed_pods;
                unsigned long fits = 0;
                for (size_t i = 0; i < n_decisions; i++) {
                        unsigned cls = (unsigned) (rng_next(&s) % 10);
                        cls = cls < 4 ? 0 : cls < 7 ? 1 : cls < 9 ? 2 : 3;
                        struct mk_fit_request rq = {.gpus = 1, .mem_mib = classes[cls].mem_mib,
                                                    .mem_percent = classes[cls].mem_mib ? 0 : 100};
                        size_t node;
                        struct mk_fit_result r;
                        struct timespec a, b, ca, cb;
                        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
                        clock_gettime(CLOCK_MONOTONIC, &a);
                        int q = migkit_best(&c, &rq, &node, &r);
                        clock_gettime(CLOCK_MONOTONIC, &b);
                        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
                        fits += q == 0;
                        t[i] = (double) (b.tv_sec - a.tv_sec) * 1e6 + (double) (b.tv_nsec - a.tv_nsec) / 1e3;
                        cpu[i] = (double) (cb.tv_sec - ca.tv_sec) * 1e6 + (double) (cb.tv_nsec - ca.tv_nsec) / 1e3;
                }
                qsort(t, n_decisions, sizeof *t, dbl_cmp);
                qsort(cpu, n_decisions, sizeof *cpu, dbl_cmp);
                printf("  %-24s wall median %4.0f us, p99 %4.0f us, max %5.0f us; CPU time median %4.0f us, p99 %4.0f us"
                       " (%lu fit)\n",
                       c.cache ? "node caches:" : "no caches (GPUs read):", t[n_decisions / 2],
                       t[(size_t) ((double) n_decisions * 0.99)], t[n_decisions - 1], cpu[n_decisions / 2],
                       cpu[(size_t) ((double) n_decisions * 0.99)], fits);
        }
        c.cache = caches;
        free(t);
        free(cpu);
        cluster_done(&c);
}

/* Decision time of the unified pool: one pod without a mode scanned over
 * every node with mk_fit_choose_mode (both fits per node), states filled by
 * the fits themselves: each GPU in its initial mode (GPUs 0-3 MIG with
 * node caches, 4-7 shared) filled to a random level with 1-80 GB pods;
 * about 8 % of GPUs are idle and so listed in both modes. */
static void decision_time_unified(const struct model *m, size_t n_nodes, size_t n_decisions, uint64_t seed) {
        static const uint64_t sizes[] = {1024, 2048, 4096, 9 * 1024, 19 * 1024, 39 * 1024, 0};
        struct cluster c;
        size_t n_gpus = n_nodes * GPUS_PER_NODE;
        cluster_init(&c, m, P_UNIFIED, n_nodes, n_gpus * (MAX_INST + SPLIT));
        uint64_t s = seed;
        uint32_t pod = 0;
        unsigned long idle = 0;
        for (size_t gi = 0; gi < n_gpus; gi++) {
                double target = rng_unit(&s) * 1.2 - 0.1;
                for (int tries = 0; tries < 16; tries++) {
                        struct sgpu *g = &c.g[gi];
                        if ((double) g->mem_used >= target * (double) m->memory_mib)
                                break;
                        uint64_t mib = sizes[rng_next(&s) % ELEMENTSOF(sizes)];
                        struct mk_fit_request rq = {.gpus = 1, .mem_mib = mib, .mem_percent = mib ? 0 : 100};
                        if (g->soft) {
                                struct mk_fit_soft_node one = {.gpus = &c.sh[gi], .n_gpus = 1};
                                struct mk_fit_soft_result r;
                                if (mk_fit_soft_node(&one, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r, NULL) == 0)
                                        soft_add(&c, gi, pod++, r.choices[0].memory_mib, 0);
                        } else {
                                struct mk_fit_node one = {.gpus = &c.fit[gi], .n_gpus = 1};
                                struct mk_fit_result r;
                                if (mk_fit_node(&one, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r, NULL) == 0)
                                        gpu_add(&c, gi, pod++, r.choices[0].profile, r.choices[0].placement,
                                                r.choices[0].profile->memory_mib);
                        }
                }
                idle += c.g[gi].n_used == 0 && c.g[gi].n_slices == 0;
        }
        double *cpu = malloc(n_decisions * sizeof *cpu);
        if (!cpu)
                abort();
        printf("\n%s: decision time of the unified pool for one pod over %zu nodes x %d GPUs (%.0f%% of GPU memory "
               "committed, %lu idle GPUs listed in both modes), %zu pods of 1-80 GB, one thread, CPU time:\n",
               m->title, n_nodes, GPUS_PER_NODE, 100.0 * (double) c.committed / ((double) n_gpus * m->memory_mib),
               idle, n_decisions);
        /* The same pods three ways: no mode (both fits per node), then each fit alone. */
        static const struct {
                const char *what;
                enum policy p;
                bool mig_only;
        } ways[] = {{"no mode: mk_fit_choose_mode", P_UNIFIED, false},
                    {"hami-core: mk_fit_soft_node", P_SOFT, false},
                    {"mig: mk_fit_node (node caches)", P_UNIFIED, true}};
        uint64_t seed_pods = s;
        for (size_t w = 0; w < ELEMENTSOF(ways); w++) {
                c.policy = ways[w].p;
                s = seed_pods;
                unsigned long fits = 0, soft = 0;
                for (size_t i = 0; i < n_decisions; i++) {
                        uint64_t mib = sizes[rng_next(&s) % ELEMENTSOF(sizes)];
                        struct mk_fit_request rq = {.gpus = 1, .mem_mib = mib, .mem_percent = mib ? 0 : 100};
                        size_t node;
                        struct mk_fit_mode_result r;
                        struct timespec ca, cb;
                        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
                        int q = pool_best(&c, &rq, ways[w].mig_only, &node, &r);
                        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
                        fits += q == 0;
                        soft += q == 0 && r.mode == MK_FIT_MODE_SOFT;
                        cpu[i] = (double) (cb.tv_sec - ca.tv_sec) * 1e6 + (double) (cb.tv_nsec - ca.tv_nsec) / 1e3;
                }
                qsort(cpu, n_decisions, sizeof *cpu, dbl_cmp);
                printf("  %-32s median %4.0f us, p99 %4.0f us, max %5.0f us (%lu fit, %lu soft)\n", ways[w].what,
                       cpu[n_decisions / 2], cpu[(size_t) ((double) n_decisions * 0.99)], cpu[n_decisions - 1], fits,
                       soft);
        }
        c.policy = P_UNIFIED;
        free(cpu);
        cluster_done(&c);
}

static int parse_size(const char *s, size_t *ret) {
        uint64_t v;
        int r = mk_parse_u64(s, &v);
        if (r < 0 || v == 0 || v > 1000000)
                return -EINVAL;
        *ret = (size_t) v;
        return 0;
}

int main(int argc, char **argv) {
        size_t n_nodes = 50, n_pods = 12000, timing_nodes = 1000, n_decisions = 2000;
        uint64_t seed = 42, seeds[MAX_SEEDS] = {42};
        size_t n_seeds = 1;
        bool tables = true, do_acc = true, do_needed = true, do_time = true, do_pools = true, loads_given = false;
        const char *mix_filter = NULL;
        double loads[8] = {0.8, 1.0, 1.2};
        size_t n_loads = 3;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                int r = 0;
                if (streq(a, "--no-tables")) {
                        tables = false;
                        continue;
                }
                if (streq(a, "--no-cache")) {
                        use_caches = false;
                        continue;
                }
                if (streq(a, "--quick")) {
                        n_nodes = 16;
                        n_pods = 3000;
                        timing_nodes = 200;
                        n_decisions = 200;
                        continue;
                }
                if (!v) {
                        fprintf(stderr, "usage: bench-sched [--nodes N] [--pods N] [--seed N] [--seeds a,b] [--loads a,b] "
                                        "[--timing-nodes N] [--no-tables] [--no-cache] "
                                        "[--sections accept,needed,time,pools] "
                                        "[--mixes issue,inference,large,cores,small,isolation] [--quick]\n");
                        return 2;
                }
                i++;
                if (streq(a, "--nodes"))
                        r = parse_size(v, &n_nodes);
                else if (streq(a, "--pods"))
                        r = parse_size(v, &n_pods);
                else if (streq(a, "--timing-nodes"))
                        r = parse_size(v, &timing_nodes);
                else if (streq(a, "--mixes"))
                        mix_filter = v;
                else if (streq(a, "--sections")) {
                        do_acc = strstr(v, "accept") != NULL;
                        do_needed = strstr(v, "needed") != NULL;
                        do_time = strstr(v, "time") != NULL;
                        do_pools = strstr(v, "pools") != NULL;
                } else if (streq(a, "--seed")) {
                        r = mk_parse_u64(v, &seed);
                        seeds[0] = seed;
                        n_seeds = 1;
                } else if (streq(a, "--seeds")) {
                        /* the pools section on each; the other sections on the first */
                        n_seeds = 0;
                        for (const char *p = v; *p && r >= 0;) {
                                const char *comma = strchr(p, ',');
                                char one[24];
                                size_t len = comma ? (size_t) (comma - p) : strlen(p);
                                if (n_seeds >= MAX_SEEDS || len == 0 || len >= sizeof one)
                                        r = -EINVAL;
                                else {
                                        memcpy(one, p, len);
                                        one[len] = 0;
                                        r = mk_parse_u64(one, &seeds[n_seeds++]);
                                }
                                p = comma ? comma + 1 : p + len;
                        }
                        if (n_seeds == 0)
                                r = -EINVAL;
                        seed = seeds[0];
                }
                else if (streq(a, "--loads")) {
                        n_loads = 0;
                        loads_given = true;
                        for (const char *p = v; *p && n_loads < ELEMENTSOF(loads);) {
                                char *end;
                                double d = strtod(p, &end);
                                if (end == p || d <= 0 || d > 10) {
                                        r = -EINVAL;
                                        break;
                                }
                                loads[n_loads++] = d;
                                p = *end == ',' ? end + 1 : end;
                                if (*end && *end != ',') {
                                        r = -EINVAL;
                                        break;
                                }
                        }
                } else
                        r = -EINVAL;
                if (r < 0) {
                        fprintf(stderr, "bench-sched: bad option %s '%s'\n", a, v);
                        return 2;
                }
        }
        if (timing_nodes > 100000 || n_nodes > 100000)
                return 2;

        char dir[] = "/tmp/bench-sched.XXXXXX";
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        static struct model models[2];
        model_init(&models[0], "a100-80gb", "A100-SXM4-80GB", a100_rows, ELEMENTSOF(a100_rows), 81920, dir);
        model_init(&models[1], "h100-80gb", "H100 80GB HBM3", h100_rows, ELEMENTSOF(h100_rows), 81559, dir);
        rmdir(dir);
        if (tables) {
                model_tables(&models[0]);
                model_tables(&models[1]);
        }

        printf("bench-sched: seed %" PRIu64 ", pods one GPU each; Poisson arrivals (rate 1), exponential lifetimes; "
               "rejected pods are dropped\n",
               seed);
        for (size_t i = 0; i < 2; i++)
                printf("  %s profiles: %s\n", models[i].title, models[i].source);
        printf("  plan/fit capacity tables: %s; node caches: %s\n", tables ? "yes (mk_fit_tables_new)" : "no (--no-tables)",
               use_caches ? "yes (mk_fit_node_cache_update)" : "no (--no-cache)");

        for (size_t k = 0; k < ELEMENTSOF(mixes); k++) {
                mix = &mixes[k];
                if (mix_filter && !strstr(mix_filter, mix->key))
                        continue;
                if (!do_acc && !do_needed)
                        break;
                if (mix->pools_only)
                        continue;
                printf("\n=== mix '%s': %s\n", mix->key, mix->title);
                printf("  requests:");
                for (size_t c = 0; c < N_CLASSES; c++) {
                        printf(" %s", classes[c].name);
                        if (classes[c].mem_mib)
                                printf(" = %" PRIu64 " MiB", classes[c].mem_mib);
                        else
                                printf(" = the whole GPU");
                        if (classes[c].cores)
                                printf(" + %u%% cores", classes[c].cores);
                        printf(" (%s)%s", class_profile(&models[0], &classes[c])->name, c + 1 < N_CLASSES ? "," : "\n");
                }
                struct summary sum[2] = {};
                for (size_t i = 0; i < 2; i++) {
                        for (size_t l = 0; do_acc && l < n_loads; l++)
                                acceptance(&models[i], n_nodes, n_pods, loads[l], seed + l, &sum[i]);
                        if (do_needed)
                                gpus_needed(&models[i], n_nodes, n_pods, 1.0, seed + 100, &sum[i]);
                }
                printf("\n  summary, mix '%s':\n", mix->key);
                for (size_t i = 0; i < 2; i++) {
                        if (do_acc) {
                                printf("    %-16s migkit vs HAMi v2.10 accepted:", models[i].key);
                                for (size_t l = 0; l < sum[i].n_loads; l++)
                                        printf(" load %.1f %+.1f%%%s", sum[i].loads[l], sum[i].vs_v210[l],
                                               l + 1 < sum[i].n_loads ? "," : "");
                                printf("\n");
                                bool cores = false;
                                for (size_t c = 0; c < N_CLASSES; c++)
                                        cores |= classes[c].cores > 0;
                                for (size_t l = 0; cores && l < sum[i].n_loads; l++)
                                        printf("    %-16s   load %.1f: HAMi v2.10 gave %lu of its %lu pods fewer cores than "
                                               "asked; migkit vs HAMi's pods that got their cores %+.1f%%\n",
                                               "", sum[i].loads[l], sum[i].short_v210[l], sum[i].accepted_v210[l],
                                               sum[i].vs_v210_honoured[l]);
                        }
                        if (do_needed)
                                printf("    %-16s GPUs needed vs bound: migkit %u (%.3f x), HAMi v2.10 %u (%.3f x), bound "
                                       "%u\n",
                                       models[i].key, sum[i].migkit_gpus, (double) sum[i].migkit_gpus / sum[i].bound,
                                       sum[i].v210_gpus, (double) sum[i].v210_gpus / sum[i].bound, sum[i].bound);
                }
        }
        /* The unified pool: every mix, A100-80GB (H100-80GB's profiles are the same shape). */
        static const double pool_loads_default[] = {1.2, 1.5};
        const double *pool_loads = loads_given ? loads : pool_loads_default;
        size_t n_pool_loads = loads_given ? n_loads : ELEMENTSOF(pool_loads_default);
        static struct pool_sum psum[MAX_SEEDS][ELEMENTSOF(mixes)];
        bool pool_ran[ELEMENTSOF(mixes)] = {};
        for (size_t s = 0; do_pools && s < n_seeds; s++)
                for (size_t k = 0; k < ELEMENTSOF(mixes); k++) {
                        mix = &mixes[k];
                        if (mix_filter && !strstr(mix_filter, mix->key))
                                continue;
                        printf("\n=== pools, mix '%s', seed %" PRIu64 ": %s\n", mix->key, seeds[s], mix->title);
                        for (size_t l = 0; l < n_pool_loads; l++)
                                pools_acceptance(&models[0], n_nodes, n_pods, pool_loads[l], seeds[s] + l, &psum[s][k]);
                        pools_needed(&models[0], n_nodes, n_pods, 1.0, seeds[s] + 100, &psum[s][k]);
                        pool_ran[k] = true;
                }
        for (size_t s = 0; do_pools && s < n_seeds; s++)
                for (size_t k = 0; k < ELEMENTSOF(mixes); k++)
                        if (pool_ran[k])
                                pools_summary(&psum[s][k], mixes[k].key, seeds[s]);
        for (size_t k = 0; do_pools && n_seeds > 1 && k < ELEMENTSOF(mixes); k++)
                if (pool_ran[k])
                        pools_seeds_summary(psum, k, seeds, n_seeds);
        mix = &mixes[0];
        for (size_t i = 0; do_time && i < 2; i++)
                decision_time(&models[i], timing_nodes, n_decisions, seed + 200);
        for (size_t i = 0; do_time && i < 2; i++)
                decision_time_unified(&models[i], timing_nodes, n_decisions, seed + 300);
        for (size_t i = 0; i < 2; i++) {
                mk_fit_tables_free(models[i].all_tables);
                mk_fit_tables_free(models[i].hami_tables);
        }
        return 0;
}
