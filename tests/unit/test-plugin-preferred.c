/* Unit tests for plugin/preferred: GetPreferredAllocation as data. Nodes
 * with hand-built interconnect matrices (an 8-GPU NVSwitch box, a 4-GPU box
 * with NVLink pairs (0,1) and (2,3)), shared replicas (least-shared-first)
 * and MIG devices (fewest parents); the chosen devices as indices. Also
 * prints, bench-style, the time of 16- and 64-GPU searches (no assertion on
 * time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "nvml/nvml.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

enum topo_kind { TOPO_NONE, TOPO_NVSWITCH8, TOPO_PAIRS4, TOPO_TRAYS16 };

/* PCIe levels (nvmlGpuTopologyLevel_t). */
#define L_SINGLE 10
#define L_HOSTBRIDGE 30
#define L_NODE 40
#define L_SYSTEM 50

/* 8 GPUs behind NVSwitch (12 links each way to every peer as NVML counts
 * them), PCIe: pairs (0,1) (2,3) (4,5) (6,7) under one switch, 0-3 on NUMA
 * node 0, 4-7 on node 1. */
static void topo_nvswitch8(struct mk_snapshot *s) {
        assert_int_equal(snap_topology(s, NULL, L_SYSTEM), 0);
        size_t n = s->n_gpus;
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++) {
                        if (i == j)
                                continue;
                        s->nvlinks[i * n + j] = 12;
                        s->pcie_level[i * n + j] = i / 2 == j / 2 ? L_SINGLE : i / 4 == j / 4 ? L_NODE : L_SYSTEM;
                }
}

/* 16 GPUs in two NVSwitch trays of 8 (links only within a tray), PCIe as above. */
static void topo_trays16(struct mk_snapshot *s) {
        topo_nvswitch8(s);
        size_t n = s->n_gpus;
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++)
                        if (i / 8 != j / 8)
                                s->nvlinks[i * n + j] = 0;
}

static void topo_apply(struct mk_snapshot *s, enum topo_kind k) {
        static const struct snap_link pairs[] = {{0, 1, 4}, {2, 3, 4}, {-1, -1, 0}};
        switch (k) {
        case TOPO_NONE:
                break;
        case TOPO_NVSWITCH8:
                topo_nvswitch8(s);
                break;
        case TOPO_PAIRS4:
                assert_int_equal(snap_topology(s, pairs, L_HOSTBRIDGE), 0);
                break;
        case TOPO_TRAYS16:
                topo_trays16(s);
                break;
        }
}

/* Resolves blank-separated indices ("0", "0:1", "0::2") to ids of r. */
static size_t resolve(const struct mk_dp_resource *r, const char *list, char ids[][MK_DP_ID_MAX], size_t max) {
        if (!list)
                return 0;
        _cleanup_free_ char *copy = strdup(list);
        assert_non_null(copy);
        size_t n = 0;
        char *save = NULL;
        for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                assert_true(n < max);
                if (streq(w, "*")) { /* every device */
                        for (size_t i = 0; i < r->n_devices; i++) {
                                assert_true(n < max);
                                snprintf(ids[n++], MK_DP_ID_MAX, "%s", r->devices[i].id);
                        }
                        continue;
                }
                if (strneq(w, "GPU-", 4)) {
                        snprintf(ids[n++], MK_DP_ID_MAX, "%s", w);
                        continue;
                }
                char *rep = strstr(w, "::");
                unsigned replica = 0;
                if (rep) {
                        *rep = 0;
                        replica = (unsigned) strtoul(rep + 2, NULL, 10);
                }
                bool found = false;
                for (size_t i = 0; i < r->n_devices && !found; i++)
                        if (streq(r->devices[i].index, w) && r->devices[i].replica == replica) {
                                snprintf(ids[n++], MK_DP_ID_MAX, "%s", r->devices[i].id);
                                found = true;
                        }
                if (!found)
                        fail_msg("no device '%s' in '%s'", w, r->name);
        }
        return n;
}

/* The chosen ids as indices, in the returned order. */
static char *dump(const struct mk_dp_resource *r, char **ids) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        for (size_t i = 0; ids[i]; i++) {
                const struct mk_dp_device *d = mk_dp_resource_find_device(r, ids[i]);
                assert_non_null(d);
                if (streq(d->id, d->base_id))
                        assert_int_equal(mk_buf_printf(&b, "%s%s", i ? " " : "", d->index), 0);
                else
                        assert_int_equal(mk_buf_printf(&b, "%s%s::%u", i ? " " : "", d->index, d->replica), 0);
        }
        return mk_buf_take(&b);
}

struct pcase {
        const char *name;
        struct snap_gpu gpus[17];
        enum topo_kind topo;
        enum mk_mig_strategy strategy;
        const char *config;
        const char *resource;
        const char *available, *must;
        unsigned size;
        const char *want;       /* indices, or "error: <substring>" */
};

#define GPU {"a100", OFF, NULL}
#define FOUR {GPU, GPU, GPU, GPU, {0}}
#define EIGHT {GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, {0}}
#define SIXTEEN {GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, GPU, {0}}
#define REPLICAS4 "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n"
#define REPLICAS12 "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 12}\n"
#define MIGS {{"a100", MIG, "1g.5gb*3"}, {"a100", MIG, "1g.5gb*7"}, {"a100", MIG, "1g.5gb*2"}, {0}}

static const struct pcase cases[] = {
        /* 8-GPU NVSwitch box: NVLink ties everywhere, PCIe decides. */
        {"nvswitch8: a pair under one PCIe switch", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", NULL, 2,
         "0 1"},
        {"nvswitch8: four on one NUMA node", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", NULL, 4,
         "0 1 2 3"},
        {"nvswitch8: three: a switch pair plus its node", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", NULL,
         3, "0 1 2"},
        {"nvswitch8: 0 and 3 taken", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "1 2 4 5 6 7", NULL, 2, "4 5"},
        {"nvswitch8: 0 and 3 taken, four", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "1 2 4 5 6 7", NULL, 4,
         "4 5 6 7"},
        {"nvswitch8: must include 6", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", "6", 2, "6 7"},
        {"nvswitch8: must include 1 and 6", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", "1 6", 3, "0 1 6"},
        {"nvswitch8: all eight", EIGHT, TOPO_NVSWITCH8, 0, NULL, "nvidia.com/gpu", "*", NULL, 8, "0 1 2 3 4 5 6 7"},
        /* 4-GPU box, NVLink pairs (0,1) (2,3), PCIe all host bridge. */
        {"pairs4: two", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "*", NULL, 2, "0 1"},
        {"pairs4: 0 taken", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "1 2 3", NULL, 2, "2 3"},
        {"pairs4: must include 3", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "*", "3", 2, "2 3"},
        {"pairs4: must include 1 and 2 (no better choice)", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "*", "1 2",
         2, "1 2"},
        {"pairs4: three", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "1 2 3", NULL, 3, "1 2 3"},
        {"pairs4: must outside available counts as available", FOUR, TOPO_PAIRS4, 0, NULL, "nvidia.com/gpu", "0 2",
         "3", 2, "2 3"},
        /* No interconnect known: lowest indices. */
        {"no matrices", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "3 1 2", NULL, 2, "1 2"},
        /* 16 GPUs in two trays. */
        {"trays16: eight, tray 0 busy in part", SIXTEEN, TOPO_TRAYS16, 0, NULL, "nvidia.com/gpu",
         "0 1 2 8 9 10 11 12 13 14 15", NULL, 8, "8 9 10 11 12 13 14 15"},
        {"trays16: four with must 3", SIXTEEN, TOPO_TRAYS16, 0, NULL, "nvidia.com/gpu", "*", "3", 4, "0 1 2 3"},
        /* Shared replicas: least shared first (iktos/k8s-gpu-sharing-plugin). */
        {"replicas: spread over devices", FOUR, TOPO_PAIRS4, 0, REPLICAS4, "nvidia.com/gpu", "*", NULL, 2,
         "0::0 1::0"},
        {"replicas: least shared first", FOUR, TOPO_PAIRS4, 0, REPLICAS4, "nvidia.com/gpu",
         "0::2 0::3 1::1 1::2 1::3 2::3", NULL, 3, "0::2 1::1 2::3"},
        {"replicas: all devices used, then the one with most left", FOUR, TOPO_NONE, 0, REPLICAS4, "nvidia.com/gpu",
         "0::0 0::1 1::1 1::2 1::3", NULL, 4, "0::0 0::1 1::1 1::2"},
        {"replicas: must include marks its device used", FOUR, TOPO_NONE, 0, REPLICAS4, "nvidia.com/gpu", "*", "0::3",
         2, "0::3 1::0"},
        {"replicas: numeric replica order", {GPU, {0}}, TOPO_NONE, 0, REPLICAS12, "nvidia.com/gpu", "0::10 0::2 0::11",
         NULL, 1, "0::2"},
        {"replicas: not enough", FOUR, TOPO_NONE, 0, REPLICAS4, "nvidia.com/gpu", "0::0 1::0", NULL, 3,
         "error: not enough available devices to satisfy allocation (2 for 3)"},
        /* MIG devices: fewest parents. */
        {"mig: best fit", MIGS, TOPO_NONE, MK_MIG_STRATEGY_MIXED, NULL, "nvidia.com/mig-1g.5gb", "*", NULL, 2,
         "2:0 2:1"},
        {"mig: three on GPU 0", MIGS, TOPO_NONE, MK_MIG_STRATEGY_MIXED, NULL, "nvidia.com/mig-1g.5gb", "*", NULL, 3,
         "0:0 0:1 0:2"},
        {"mig: seven on GPU 1", MIGS, TOPO_NONE, MK_MIG_STRATEGY_MIXED, NULL, "nvidia.com/mig-1g.5gb", "*", NULL, 7,
         "1:0 1:1 1:2 1:3 1:4 1:5 1:6"},
        {"mig: eight on two parents", MIGS, TOPO_NONE, MK_MIG_STRATEGY_MIXED, NULL, "nvidia.com/mig-1g.5gb", "*",
         NULL, 8, "1:0 1:1 1:2 1:3 1:4 1:5 1:6 2:0"},
        {"mig: must include stays with its parent", MIGS, TOPO_NONE, MK_MIG_STRATEGY_MIXED, NULL,
         "nvidia.com/mig-1g.5gb", "*", "1:4", 2, "1:0 1:4"},
        /* Errors. */
        {"size 0", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "*", NULL, 0, "error: allocation size 0"},
        {"too few", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "0 1", NULL, 3,
         "error: not enough available devices to satisfy allocation (2 for 3)"},
        {"must more than size", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "*", "0 1 2", 2,
         "error: 3 devices must be included, more than the 2 requested"},
        {"unknown id", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "0 GPU-nope", NULL, 1,
         "error: unknown device: 'GPU-nope'"},
        {"an available id listed twice", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "0 1 2 1", NULL, 1,
         "error: preferred allocation for 'nvidia.com/gpu': device 'GPU-00000001-0000-0000-0000-000000000000' is "
         "listed twice"},
        {"a must-include id listed twice", FOUR, TOPO_NONE, 0, NULL, "nvidia.com/gpu", "*", "2 2", 2,
         "error: device 'GPU-00000002-0000-0000-0000-000000000000' is listed twice"},
};

static void run_case(const struct pcase *t) {
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(t->gpus);
        assert_non_null(s);
        topo_apply(s, t->topo);
        struct mk_error e = {0};
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = NULL;
        if (t->config)
                assert_int_equal(mk_plugin_config_parse(t->config, strlen(t->config), "c.yaml", &cfg, &e), 0);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = t->strategy;
        o.config = cfg;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        if (mk_dp_resources_build(s, &o, &rs, &e) < 0)
                fail_msg("case '%s': %s", t->name, e.msg);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, t->resource);
        if (!r)
                fail_msg("case '%s': no resource '%s'", t->name, t->resource);
        static char avail[256][MK_DP_ID_MAX], must[16][MK_DP_ID_MAX];
        const char *ap[256], *mp[16];
        size_t na = resolve(r, t->available, avail, 256), nm = resolve(r, t->must, must, 16);
        for (size_t i = 0; i < na; i++)
                ap[i] = avail[i];
        for (size_t i = 0; i < nm; i++)
                mp[i] = must[i];
        char **got = NULL;
        int q = mk_dp_preferred(s, r, ap, na, mp, nm, t->size, &got, &e);
        if (strneq(t->want, "error: ", 7)) {
                if (q >= 0) {
                        strv_free(got);
                        fail_msg("case '%s': chose, want %s", t->name, t->want);
                }
                assert_int_equal(q, -EINVAL);
                assert_null(got);
                if (!strstr(e.msg, t->want + 7))
                        fail_msg("case '%s':\n got: %s\nwant: %s", t->name, e.msg, t->want + 7);
                return;
        }
        if (q < 0)
                fail_msg("case '%s': %s", t->name, e.msg);
        _cleanup_strv_free_ char **ids = got;
        size_t n = 0;
        while (ids[n])
                n++;
        assert_int_equal(n, t->size);
        for (size_t i = 1; i < n; i++)
                assert_true(strcmp(ids[i - 1], ids[i]) < 0); /* ascending, distinct */
        _cleanup_free_ char *d = dump(r, ids);
        if (!streq(d, t->want))
                fail_msg("case '%s':\n got: %s\nwant: %s", t->name, d, t->want);
}

static void test_cases(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                run_case(&cases[i]);
}

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

/* Bench-style timing print of whole-GPU searches; checks only the sizes and
 * that tray-local sets win when they fit. */
static void time_node(size_t n_gpus, const char *label) {
        struct snap_gpu gpus[65];
        assert_true(n_gpus < ELEMENTSOF(gpus));
        for (size_t i = 0; i < n_gpus; i++)
                gpus[i] = (struct snap_gpu) GPU;
        gpus[n_gpus] = (struct snap_gpu) {0};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        topo_trays16(s); /* trays of 8 */
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *r = &rs->r[0];
        const char **ap = calloc(r->n_devices, sizeof(*ap));
        assert_non_null(ap);
        for (size_t i = 0; i < r->n_devices; i++)
                ap[i] = r->devices[i].id;
        printf("# preferred allocation, %s (%zu GPUs, NVSwitch trays of 8)\n", label, n_gpus);
        for (unsigned size = 1; size <= n_gpus; size *= 2) {
                unsigned reps = n_gpus <= 16 ? 20 : 3;
                double t0 = now_us();
                for (unsigned k = 0; k < reps; k++) {
                        char **ids = NULL;
                        assert_int_equal(mk_dp_preferred(s, r, ap, r->n_devices, NULL, 0, size, &ids, &e), 0);
                        size_t n = 0;
                        while (ids[n])
                                n++;
                        assert_int_equal(n, size);
                        if (size <= 8) { /* one tray */
                                const struct mk_dp_device *a = mk_dp_resource_find_device(r, ids[0]);
                                const struct mk_dp_device *b = mk_dp_resource_find_device(r, ids[n - 1]);
                                assert_int_equal(a->gpu / 8, b->gpu / 8);
                        }
                        strv_free(ids);
                }
                printf("#   size %2u: %10.1f us per call\n", size, (now_us() - t0) / reps);
        }
        free(ap);
}

static void test_timing(void **state) {
        time_node(8, "8 GPUs");
        time_node(16, "16 GPUs");
        time_node(64, "64 GPUs (greedy beyond the exact-search budget)");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
        return remove(path);
}

/* The simulator's h100-nvl-pairs (NVLink bridges (0,1) and (2,3)) as nvml/ reads it. */
static void test_simulator_pairs(void **state) {
        const char *lib = getenv("MIGKIT_NVML_LIB");
        if (!lib)
                skip();
        char dir[] = "/tmp/migkit-test-plugin-preferred-XXXXXX", path[128];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/state.json", dir);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", "h100-nvl-pairs", 1);
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        if (mk_nvml_open(lib, &n, &e) < 0)
                fail_msg("%s", e.msg);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        mk_nvml_close(n);
        assert_non_null(s->nvlinks);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/gpu");
        static const struct {
                const char *available, *must;
                unsigned size;
                const char *want;
        } t[] = {
                {"0 1 2 3", NULL, 2, "0 1"},
                {"1 2 3", NULL, 2, "2 3"},
                {"0 1 2 3", "3", 2, "2 3"},
                {"0 1 2 3", "1 2", 3, "0 1 2"},
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                char avail[8][MK_DP_ID_MAX], must[8][MK_DP_ID_MAX];
                const char *ap[8], *mp[8];
                size_t na = resolve(r, t[i].available, avail, 8), nm = resolve(r, t[i].must, must, 8);
                for (size_t k = 0; k < na; k++)
                        ap[k] = avail[k];
                for (size_t k = 0; k < nm; k++)
                        mp[k] = must[k];
                _cleanup_strv_free_ char **ids = NULL;
                assert_int_equal(mk_dp_preferred(s, r, ap, na, mp, nm, t[i].size, &ids, &e), 0);
                /* Sim UUIDs do not sort by index: compare the sorted indices. */
                unsigned idx[8];
                size_t k = 0;
                for (; ids[k]; k++)
                        idx[k] = mk_dp_resource_find_device(r, ids[k])->gpu;
                for (size_t a = 0; a < k; a++)
                        for (size_t b = a + 1; b < k; b++)
                                if (idx[b] < idx[a]) {
                                        unsigned x = idx[a];
                                        idx[a] = idx[b];
                                        idx[b] = x;
                                }
                char got[64] = "";
                for (size_t a = 0; a < k; a++)
                        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%u", a ? " " : "", idx[a]);
                if (!streq(got, t[i].want))
                        fail_msg("case %zu: got '%s', want '%s'", i, got, t[i].want);
        }
        assert_int_equal(nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_timing),
                cmocka_unit_test(test_simulator_pairs),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
