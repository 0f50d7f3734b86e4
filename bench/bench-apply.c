/* Reconfiguration cost, migkit vs upstream's strategy, on simulated 8-GPU
 * machines: for every ordered pair (A, B) of a set of named layouts, apply A
 * on a fresh machine, then apply B with migkit and count instances destroyed
 * and created, mutating NVML calls and GPU resets. Next to them, the same
 * counts for mig-parted's strategy (mig-parted v0.15.0 cmd/nvidia-mig-parted/apply and pkg/mig: a mode change on
 * any GPU wipes every matched MIG-enabled GPU and sets the mode on all of
 * them, resets every GPU; a changed GPU is cleared and rebuilt), computed from
 * the same live state, and the lower bound: MIG devices (compute instances)
 * that must change whatever the placement.
 *
 * Then the wall time of 8-GPU reconfigurations when every mutating NVML call
 * and every reset takes a set time (the simulator's MIGKIT_SIM_OP_LATENCY_MS,
 * 200 ms unless --latency-ms says otherwise): the GPUs one after another
 * (--sequential, as mig-parted), in parallel (one thread per GPU), and each
 * GPU alone, against the slowest of which the parallel time is compared. The
 * last row repeats the mixed one with a pre-apply-config hook (`true`),
 * which keeps the barrier between the mode and the layout step.
 *
 * Usage: bench-apply [--latency-ms MS] [--sections pairs,time] [MACHINE...]
 *        (default: both sections on dgx-a100 and dgx-h100)
 * Needs MIGKIT_NVML_LIB (the simulator) and MIGKIT_NVIDIA_SMI (its nvidia-smi). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "engine/engine.h"
#include "nvml/nvml.h"
#include "spec/config.h"

/* Layouts written with A100-40GB names; H100 names are substituted. */
static const char *const layouts_yaml =
        "version: v1\n"
        "mig-configs:\n"
        "  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
        "  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n"
        "  all-1g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.5gb: 7}\n"
        "  all-1g-double:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 4}\n"
        "  all-2g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {2g.10gb: 3}\n"
        "  all-3g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {3g.20gb: 2}\n"
        "  all-7g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {7g.40gb: 1}\n"
        "  all-balanced:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n"
        "  four-three:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {4g.20gb: 1, 3g.20gb: 1}\n"
        "  small-heavy:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.5gb: 3, 2g.10gb: 2}\n"
        "  shared-3g:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {1c.3g.20gb: 1, 2c.3g.20gb: 1, 4g.20gb: 1}\n"
        "  half-half:\n    - devices: [0, 1, 2, 3]\n      mig-enabled: true\n      mig-devices: {3g.20gb: 2}\n"
        "    - devices: [4, 5, 6, 7]\n      mig-enabled: true\n      mig-devices: {1g.5gb: 7}\n"
        "  half-disabled:\n    - devices: [0, 1, 2, 3]\n      mig-enabled: true\n"
        "      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n"
        "    - devices: [4, 5, 6, 7]\n      mig-enabled: false\n"
        "  per-gpu:\n"
        "    - devices: [0]\n      mig-enabled: true\n      mig-devices: {7g.40gb: 1}\n"
        "    - devices: [1]\n      mig-enabled: true\n      mig-devices: {3g.20gb: 2}\n"
        "    - devices: [2]\n      mig-enabled: true\n      mig-devices: {1g.5gb: 7}\n"
        "    - devices: [3]\n      mig-enabled: true\n      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n"
        "    - devices: [4, 5, 6, 7]\n      mig-enabled: true\n      mig-devices: {2g.10gb: 3}\n";

static const char *const names[] = {"all-disabled", "all-enabled", "all-1g",       "all-1g-double", "all-2g",
                                    "all-3g",       "all-7g",      "all-balanced", "four-three",    "small-heavy",
                                    "shared-3g",    "half-half",   "half-disabled", "per-gpu"};

static char *h100_names(const char *in) {
        static const char *const map[][2] = {{"1g.5gb", "1g.10gb"}, {"1g.10gb", "1g.20gb"}, {"2g.10gb", "2g.20gb"},
                                             {"3g.20gb", "3g.40gb"}, {"4g.20gb", "4g.40gb"}, {"7g.40gb", "7g.80gb"}};
        size_t len = strlen(in);
        char *out = malloc(len * 2 + 1);
        size_t k = 0;
        for (size_t i = 0; i < len;) {
                bool done = false;
                for (size_t m = 0; m < ELEMENTSOF(map) && !done; m++) {
                        size_t n = strlen(map[m][0]);
                        /* whole profile token: followed by ':' or ',' or '}' */
                        if (strncmp(in + i, map[m][0], n) == 0 && strchr(":,}", in[i + n]) && (i == 0 || !isdigit((unsigned char) in[i - 1]))) {
                                memcpy(out + k, map[m][1], strlen(map[m][1]));
                                k += strlen(map[m][1]);
                                i += n;
                                done = true;
                        }
                }
                if (!done)
                        out[k++] = in[i++];
        }
        out[k] = 0;
        return out;
}

struct counts {
        unsigned long destroyed, created, mutations, resets;
};

/* mig-parted's strategy, from the live state before applying B. */
static void upstream_counts(const struct mk_snapshot *s, const struct mk_desired *d, const struct mk_gpu_plan *p,
                            struct counts *c) {
        bool mode_fail = false;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (d[i].matched && (s->gpus[i].mig_current == MK_MIG_ENABLED) != d[i].enabled)
                        mode_fail = true;
        bool pending = false;
        for (size_t i = 0; i < s->n_gpus; i++) {
                if (!d[i].matched)
                        continue;
                const struct mk_gpu *g = &s->gpus[i];
                size_t have_cis = 0;
                for (size_t k = 0; k < g->n_gis; k++)
                        have_cis += g->gis[k].n_cis;
                size_t want_gis = 0, want_cis = 0;
                for (size_t k = 0; k < p[i].n_target; k++) {
                        want_gis++;
                        want_cis += p[i].target[k].n_cis;
                }
                bool wiped = false;
                if (mode_fail) {
                        if (g->mig_current == MK_MIG_ENABLED && g->n_gis > 0) {
                                c->destroyed += have_cis;
                                c->mutations += have_cis + g->n_gis;
                                wiped = true;
                        }
                        c->mutations++; /* SetMigMode on every matched GPU */
                        if ((g->mig_current == MK_MIG_ENABLED) != d[i].enabled && g->architecture != 9 &&
                            g->architecture != 10)
                                pending = true;
                }
                if (!d[i].enabled)
                        continue;
                bool equal = !wiped && !p[i].layout_change;
                if (wiped && want_cis == 0)
                        equal = true;
                if (equal)
                        continue;
                if (!wiped) {
                        c->destroyed += have_cis;
                        c->mutations += have_cis + g->n_gis;
                }
                c->created += want_cis;
                c->mutations += want_cis + want_gis;
        }
        if (pending)
                c->resets += s->n_gpus; /* nvidia-smi -r on every GPU */
}

/* MIG devices that must go and come whatever the placement. */
static void lower_bound(const struct mk_snapshot *s, const struct mk_desired *d, unsigned long *lb) {
        for (size_t i = 0; i < s->n_gpus; i++) {
                if (!d[i].matched)
                        continue;
                struct mk_layout have = {0};
                if (s->gpus[i].mig_current == MK_MIG_ENABLED && mk_gpu_current_layout(&s->gpus[i], &have) < 0)
                        continue;
                const struct mk_layout *want = &d[i].layout;
                for (size_t k = 0; k < have.n_items; k++) {
                        unsigned w = 0;
                        for (size_t j = 0; d[i].enabled && j < want->n_items; j++)
                                if (mk_profile_name_equal(&want->items[j].name, &have.items[k].name))
                                        w = want->items[j].count;
                        if (have.items[k].count > w)
                                *lb += have.items[k].count - w;
                }
                for (size_t j = 0; d[i].enabled && j < want->n_items; j++) {
                        unsigned h = 0;
                        for (size_t k = 0; k < have.n_items; k++)
                                if (mk_profile_name_equal(&want->items[j].name, &have.items[k].name))
                                        h = have.items[k].count;
                        if (want->items[j].count > h)
                                *lb += want->items[j].count - h;
                }
                mk_layout_done(&have);
        }
}

static int apply(const struct mk_config *c, const char *name, struct mk_apply_report *rep) {
        struct mk_engine_opts o = {.selected_config = name};
        struct mk_error e = {0};
        int r = mk_engine_apply(c, NULL, &o, rep, &e);
        if (r < 0) {
                char buf[1024];
                fprintf(stderr, "apply %s: %s\n", name, mk_error_format(&e, buf, sizeof(buf)));
        }
        return r;
}

/* ---- wall time with a latency per operation ---- */

/* A reconfiguration: per GPU a layout before and after ("off": MIG disabled). */
struct scenario {
        const char *what;
        const char *from[8], *to[8];
        bool hook;                    /* with a pre-apply-config hook */
};

#define PER_GPU_FROM                                                                                          \
        {"{7g.40gb: 1}", "{3g.20gb: 2}", "{1g.5gb: 7}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{2g.10gb: 3}", \
         "{2g.10gb: 3}", "off", "{4g.20gb: 1, 3g.20gb: 1}"}
#define PER_GPU_TO                                                                                            \
        {"{1g.5gb: 7}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{3g.20gb: 2}", "{7g.40gb: 1}", "off", "off",  \
         "{2g.10gb: 3}", "{4g.20gb: 1, 3g.20gb: 1}"}

static const struct scenario scenarios[] = {
        {"MIG off -> all-balanced (node bring-up)",
         {"off", "off", "off", "off", "off", "off", "off", "off"},
         {"{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}"},
         false},
        {"all-balanced -> all-1g (layouts only)",
         {"{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
          "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}"},
         {"{1g.5gb: 7}", "{1g.5gb: 7}", "{1g.5gb: 7}", "{1g.5gb: 7}", "{1g.5gb: 7}", "{1g.5gb: 7}", "{1g.5gb: 7}",
          "{1g.5gb: 7}"},
         false},
        {"per-GPU layouts -> others, 3 mode changes", PER_GPU_FROM, PER_GPU_TO, false},
        {"the same, with a pre-apply-config hook", PER_GPU_FROM, PER_GPU_TO, true},
};

static void yaml_entry(char *buf, size_t size, size_t *k, unsigned gpu, const char *layout) {
        int n = streq(layout, "off")
                        ? snprintf(buf + *k, size - *k, "    - {devices: [%u], mig-enabled: false}\n", gpu)
                        : snprintf(buf + *k, size - *k, "    - {devices: [%u], mig-enabled: true, mig-devices: %s}\n",
                                   gpu, layout);
        if (n > 0)
                *k += (size_t) n;
}

/* Configs "from", "to" and "to-0" ... "to-7" (GPU k alone). */
static int scenario_config(const struct scenario *sc, bool h100, struct mk_config **ret) {
        char yaml[8192];
        size_t k = (size_t) snprintf(yaml, sizeof(yaml), "version: v1\nmig-configs:\n  from:\n");
        for (unsigned g = 0; g < 8; g++)
                yaml_entry(yaml, sizeof(yaml), &k, g, sc->from[g]);
        k += (size_t) snprintf(yaml + k, sizeof(yaml) - k, "  to:\n");
        for (unsigned g = 0; g < 8; g++)
                yaml_entry(yaml, sizeof(yaml), &k, g, sc->to[g]);
        for (unsigned g = 0; g < 8; g++) {
                k += (size_t) snprintf(yaml + k, sizeof(yaml) - k, "  to-%u:\n", g);
                yaml_entry(yaml, sizeof(yaml), &k, g, sc->to[g]);
        }
        if (k >= sizeof(yaml))
                return -E2BIG;
        _cleanup_free_ char *text = h100 ? h100_names(yaml) : strdup(yaml);
        struct mk_error e = {0};
        if (!text)
                return -ENOMEM;
        if (mk_config_parse(text, strlen(text), "bench-scenario.yaml", ret, &e) < 0) {
                char buf[1024];
                fprintf(stderr, "%s\n", mk_error_format(&e, buf, sizeof(buf)));
                return -EINVAL;
        }
        return 0;
}

static double now_s(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* From a fresh machine: `from` at full speed, then `name` with the latency;
 * its wall time in seconds, or < 0. */
static double timed_apply(const struct mk_config *c, const struct mk_hooks *h, const char *state, const char *name,
                          bool sequential, const char *latency) {
        unlink(state);
        unsetenv("MIGKIT_SIM_OP_LATENCY_MS");
        struct mk_apply_report r = {0};
        if (apply(c, "from", &r) < 0)
                return -1;
        mk_apply_report_done(&r);
        setenv("MIGKIT_SIM_OP_LATENCY_MS", latency, 1);
        struct mk_engine_opts o = {.selected_config = name, .sequential = sequential};
        struct mk_error e = {0};
        double t = now_s();
        int q = mk_engine_apply(c, h, &o, &r, &e);
        t = now_s() - t;
        unsetenv("MIGKIT_SIM_OP_LATENCY_MS");
        mk_apply_report_done(&r);
        if (q < 0) {
                char buf[1024];
                fprintf(stderr, "apply %s: %s\n", name, mk_error_format(&e, buf, sizeof(buf)));
                return -1;
        }
        return t;
}

static int bench_time(const char *machine, const char *dir, unsigned latency_ms) {
        char state[4096], latency[16];
        snprintf(state, sizeof(state), "%s/%s.json", dir, machine);
        snprintf(latency, sizeof(latency), "%u", latency_ms);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
        setenv("MIGKIT_SIM_STATE", state, 1);
        printf("%s: wall time of a reconfiguration, %u ms per mutating NVML call and per reset\n", machine,
               latency_ms);
        printf("  %-44s %10s %10s %12s %8s\n", "", "sequential", "parallel", "slowest GPU", "ratio");
        /* A pre-apply-config hook that does nothing: what counts is that it is there. */
        static const char hooks_yaml[] = "version: v1\nhooks:\n  pre-apply-config:\n"
                                         "    - {command: /bin/sh, args: [-c, 'true']}\n";
        _cleanup_(mk_hooks_freep) struct mk_hooks *hooks = NULL;
        struct mk_error he = {0};
        if (mk_hooks_parse(hooks_yaml, strlen(hooks_yaml), "bench-hooks.yaml", &hooks, &he) < 0) {
                fprintf(stderr, "%s\n", he.msg);
                return -EINVAL;
        }
        for (size_t i = 0; i < ELEMENTSOF(scenarios); i++) {
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                int r = scenario_config(&scenarios[i], strstr(machine, "h100") != NULL, &c);
                if (r < 0)
                        return r;
                const struct mk_hooks *h = scenarios[i].hook ? hooks : NULL;
                double seq = timed_apply(c, h, state, "to", true, latency);
                double par = timed_apply(c, h, state, "to", false, latency);
                double slowest = 0;
                unsigned slowest_gpu = 0;
                for (unsigned g = 0; g < 8 && seq >= 0 && par >= 0; g++) {
                        char name[16];
                        snprintf(name, sizeof(name), "to-%u", g);
                        double t = timed_apply(c, h, state, name, false, latency);
                        if (t < 0)
                                return -EIO;
                        if (t > slowest) {
                                slowest = t;
                                slowest_gpu = g;
                        }
                }
                if (seq < 0 || par < 0)
                        return -EIO;
                printf("  %-44s %9.2fs %9.2fs %5.2fs GPU %u %7.2fx\n", scenarios[i].what, seq, par, slowest,
                       slowest_gpu, par / slowest);
        }
        unlink(state);
        return 0;
}

static int bench_machine(const char *machine, const char *dir) {
        bool h100 = strstr(machine, "h100") != NULL;
        _cleanup_free_ char *yaml = h100 ? h100_names(layouts_yaml) : strdup(layouts_yaml);
        struct mk_error e = {0};
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        if (mk_config_parse(yaml, strlen(yaml), "bench-layouts.yaml", &c, &e) < 0) {
                char buf[1024];
                fprintf(stderr, "%s\n", mk_error_format(&e, buf, sizeof(buf)));
                return -EINVAL;
        }
        char state[4096];
        snprintf(state, sizeof(state), "%s/%s.json", dir, machine);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
        setenv("MIGKIT_SIM_STATE", state, 1);

        struct counts mk = {0}, up = {0};
        unsigned long lb_total = 0, pairs = 0, at_bound = 0;
        size_t n = ELEMENTSOF(names);
        for (size_t a = 0; a < n; a++)
                for (size_t b = 0; b < n; b++) {
                        if (a == b)
                                continue;
                        unlink(state);
                        struct mk_apply_report ra = {0}, rb = {0};
                        if (apply(c, names[a], &ra) < 0)
                                return -EIO;
                        mk_apply_report_done(&ra);

                        /* Upstream's and the bound's counts from the same state. */
                        _cleanup_nvml_ struct mk_nvml *nv = NULL;
                        struct mk_snapshot *s = NULL;
                        const struct mk_named_config *nc;
                        struct mk_desired *d = NULL;
                        struct mk_gpu_plan *p = NULL;
                        if (mk_nvml_open(NULL, &nv, &e) < 0 || mk_nvml_snapshot(nv, &s, &e) < 0 ||
                            mk_config_select(c, names[b], &nc, &e) < 0 || mk_engine_desired(s, c, nc, &d, &e) < 0 ||
                            mk_engine_plan_all(s, d, false, &p, &e) < 0) {
                                char buf[1024];
                                fprintf(stderr, "%s\n", mk_error_format(&e, buf, sizeof(buf)));
                                return -EIO;
                        }
                        nv = mk_nvml_close(nv);
                        upstream_counts(s, d, p, &up);
                        unsigned long lb = 0;
                        lower_bound(s, d, &lb);
                        mk_gpu_plans_free(p, s->n_gpus);
                        mk_desired_free(d, s->n_gpus);
                        mk_snapshot_free(s);

                        if (apply(c, names[b], &rb) < 0)
                                return -EIO;
                        mk.destroyed += rb.destroyed_cis;
                        mk.created += rb.created_cis;
                        mk.mutations += rb.mutations;
                        mk.resets += rb.resets;
                        lb_total += lb;
                        pairs++;
                        if (rb.destroyed_cis + rb.created_cis == lb)
                                at_bound++;
                        mk_apply_report_done(&rb);
                }
        printf("%s: %zu layouts, %lu ordered pairs\n", machine, n, pairs);
        printf("  %-28s %10s %10s %8s\n", "", "migkit", "upstream", "ratio");
        const struct {
                const char *what;
                unsigned long m, u;
        } rows[] = {{"MIG devices destroyed", mk.destroyed, up.destroyed},
                    {"MIG devices created", mk.created, up.created},
                    {"mutating NVML calls", mk.mutations, up.mutations},
                    {"GPU resets", mk.resets, up.resets}};
        for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                printf("  %-28s %10lu %10lu %8.3f\n", rows[i].what, rows[i].m, rows[i].u,
                       rows[i].u ? (double) rows[i].m / (double) rows[i].u : 0.0);
        printf("  lower bound (MIG devices that must change): %lu; migkit changed %lu; at the bound in %lu of %lu "
               "pairs\n",
               lb_total, mk.destroyed + mk.created, at_bound, pairs);
        return 0;
}

int main(int argc, char **argv) {
        mk_log_set_level(MK_LOG_ERROR);
        if (!secure_getenv("MIGKIT_NVML_LIB") || !secure_getenv("MIGKIT_NVIDIA_SMI")) {
                fprintf(stderr, "bench-apply: set MIGKIT_NVML_LIB and MIGKIT_NVIDIA_SMI (see bench/run)\n");
                return 2;
        }
        unsigned latency_ms = 200;
        bool pairs = true, timing = true;
        int first = 1;
        for (; first < argc && argv[first][0] == '-'; first++) {
                if (streq(argv[first], "--latency-ms") && first + 1 < argc &&
                    mk_parse_u32(argv[first + 1], &latency_ms) >= 0 && latency_ms <= 60000)
                        first++;
                else if (streq(argv[first], "--sections") && first + 1 < argc) {
                        const char *v = argv[++first];
                        pairs = strstr(v, "pairs") != NULL;
                        timing = strstr(v, "time") != NULL;
                } else {
                        fprintf(stderr, "usage: bench-apply [--latency-ms MS] [--sections pairs,time] [MACHINE...]\n");
                        return 2;
                }
        }
        char dir[] = "/tmp/migkit-bench-XXXXXX";
        if (!mkdtemp(dir))
                return 1;
        const char *const defaults[] = {"dgx-a100", "dgx-h100"};
        size_t n = first < argc ? (size_t) (argc - first) : ELEMENTSOF(defaults);
        int r = 0;
        for (size_t i = 0; i < n && r >= 0 && pairs; i++)
                r = bench_machine(first < argc ? argv[first + i] : defaults[i], dir);
        for (size_t i = 0; i < n && r >= 0 && timing; i++)
                r = bench_time(first < argc ? argv[first + i] : defaults[i], dir, latency_ms);
        char p[4200];
        snprintf(p, sizeof(p), "%s/dgx-a100.json", dir);
        unlink(p);
        snprintf(p, sizeof(p), "%s/dgx-h100.json", dir);
        unlink(p);
        rmdir(dir);
        return r < 0 ? 1 : 0;
}
