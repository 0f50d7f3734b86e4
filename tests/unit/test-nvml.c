/* nvml/: the loader and the snapshot, against the simulator library
 * (MIGKIT_NVML_LIB) on throw-away state files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/macro.h"
#include "nvml/nvml.h"

static char state_dir[] = "/tmp/migkit-test-nvml-XXXXXX";

static void use_machine(const char *machine) {
        char path[256];
        static unsigned serial;
        snprintf(path, sizeof(path), "%s/state-%u.json", state_dir, serial++);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
}

static const char *sim_lib(void) {
        const char *p = getenv("MIGKIT_NVML_LIB");
        if (!p)
                skip();
        return p;
}

static void test_errno_mapping(void **state) {
        static const struct {
                nvmlReturn_t r;
                int err;
                const char *name;
        } t[] = {
                {NVML_SUCCESS, 0, "NVML_SUCCESS"},
                {NVML_ERROR_INVALID_ARGUMENT, -EINVAL, "NVML_ERROR_INVALID_ARGUMENT"},
                {NVML_ERROR_NOT_SUPPORTED, -EOPNOTSUPP, "NVML_ERROR_NOT_SUPPORTED"},
                {NVML_ERROR_IN_USE, -EBUSY, "NVML_ERROR_IN_USE"},
                {NVML_ERROR_INSUFFICIENT_RESOURCES, -ENOSPC, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
                {NVML_ERROR_NOT_FOUND, -ENOENT, "NVML_ERROR_NOT_FOUND"},
                {NVML_ERROR_NO_PERMISSION, -EPERM, "NVML_ERROR_NO_PERMISSION"},
                {NVML_ERROR_RESET_REQUIRED, -ERESTART, "NVML_ERROR_RESET_REQUIRED"},
                {NVML_ERROR_UNKNOWN, -EIO, "NVML_ERROR_UNKNOWN"},
                {(nvmlReturn_t) 12345, -EIO, "NVML_ERROR_UNKNOWN"},
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                assert_int_equal(mk_nvml_errno(t[i].r), t[i].err);
                assert_string_equal(mk_nvml_return_name(t[i].r), t[i].name);
        }
}

static void test_missing_library(void **state) {
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open("/nonexistent/libnvidia-ml.so.1", &n, &e), -ELIBACC);
        assert_null(n);
        assert_non_null(strstr(e.msg, "Cannot load the NVML library '/nonexistent/libnvidia-ml.so.1'"));
        assert_null(strchr(e.msg, '\n'));
}

static void test_not_a_library(void **state) {
        char path[256];
        snprintf(path, sizeof(path), "%s/not-a-lib.so", state_dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("this is text\n", f);
        fclose(f);
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(path, &n, &e), -ELIBACC);
        assert_null(n);
}

static void test_missing_required_symbol_named(void **state) {
        const char *broken = getenv("MIGKIT_TEST_BROKEN_NVML");
        if (!broken)
                skip();
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(broken, &n, &e), -ELIBBAD);
        assert_null(n);
        /* The first required symbol in table order after the three it has. */
        assert_non_null(strstr(e.msg, "lacks the required symbol 'nvmlSystemGetDriverVersion'"));
}

static void test_snapshot_a100(void **state) {
        const char *lib = sim_lib();
        use_machine("a100-40gb");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        assert_int_equal(s->n_gpus, 1);
        const struct mk_gpu *g = &s->gpus[0];
        assert_string_equal(g->name, "NVIDIA A100-SXM4-40GB");
        assert_int_equal(g->pci_device_id, 0x20B010DE);
        assert_true(g->mig_capable);
        assert_int_equal(g->memory_total_bytes, 40960ull << 20);
        assert_int_equal(g->memory_units, 8);
        assert_int_equal(strncmp(g->uuid, "GPU-", 4), 0);

        /* Every profile of the MIG user guide tables, named by the rounding rule. */
        static const struct {
                const char *name;
                unsigned id, slices, max, n_pl, first, size;
                uint64_t mem;
        } want[] = {
                {"1g.5gb", 19, 1, 7, 7, 0, 1, 4864},     {"2g.10gb", 14, 2, 3, 3, 0, 2, 9856},
                {"3g.20gb", 9, 3, 2, 2, 0, 4, 19968},    {"4g.20gb", 5, 4, 1, 1, 0, 4, 19968},
                {"7g.40gb", 0, 7, 1, 1, 0, 8, 40192},    {"1g.5gb+me", 20, 1, 1, 7, 0, 1, 4864},
                {"1g.10gb", 15, 1, 4, 4, 0, 2, 9856},
        };
        assert_int_equal(g->n_profiles, ELEMENTSOF(want));
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const struct mk_gi_profile *p = NULL;
                for (size_t k = 0; k < g->n_profiles; k++)
                        if (streq(g->profiles[k].name, want[i].name))
                                p = &g->profiles[k];
                assert_non_null(p);
                assert_int_equal(p->id, want[i].id);
                assert_int_equal(p->slices, want[i].slices);
                assert_int_equal(p->max_count, want[i].max);
                assert_int_equal(p->memory_mib, want[i].mem);
                assert_int_equal(p->n_placements, want[i].n_pl);
                assert_int_equal(p->placements[0].start, want[i].first);
                assert_int_equal(p->placements[0].size, want[i].size);
                assert_true(p->n_ci_profiles >= 1);
        }
        /* 3g offers 1c, 2c and 3c (derived while no GI exists). */
        const struct mk_gi_profile *p3 = mk_gpu_profile_by_id(g, 9);
        assert_non_null(p3);
        assert_int_equal(p3->n_ci_profiles, 3);
        assert_string_equal(p3->ci_profiles[0].name, "1c.3g.20gb");
        assert_string_equal(p3->ci_profiles[2].name, "3g.20gb");
        assert_false(p3->ci_profiles[0].queried);
}

static void test_snapshot_non_mig_gpu(void **state) {
        const char *lib = sim_lib();
        use_machine("t4");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        assert_int_equal(s->n_gpus, 1);
        assert_false(s->gpus[0].mig_capable);
        assert_int_equal(s->gpus[0].mig_current, MK_MIG_UNSUPPORTED);
        assert_int_equal(s->gpus[0].n_profiles, 0);
}

static void test_snapshot_dgx_h100_names(void **state) {
        const char *lib = sim_lib();
        use_machine("dgx-h100");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        assert_int_equal(s->n_gpus, 8);
        static const char *const names[] = {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me",
                                            "1g.20gb"};
        for (size_t i = 0; i < s->n_gpus; i++) {
                assert_int_equal(s->gpus[i].index, i);
                for (size_t k = 0; k < ELEMENTSOF(names); k++) {
                        bool found = false;
                        for (size_t j = 0; j < s->gpus[i].n_profiles; j++)
                                found = found || streq(s->gpus[i].profiles[j].name, names[k]);
                        if (!found)
                                fail_msg("GPU %zu lacks profile %s", i, names[k]);
                }
                /* UUIDs differ between GPUs */
                if (i > 0)
                        assert_string_not_equal(s->gpus[i].uuid, s->gpus[i - 1].uuid);
        }
}

/* ---- interconnect ---- */

/* Opens `machine` and snapshots it; both freed by the caller. */
static struct mk_snapshot *snapshot_of(const char *machine, struct mk_nvml **ret_n) {
        const char *lib = sim_lib();
        use_machine(machine);
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        if (mk_nvml_open(lib, &n, &e) < 0)
                fail_msg("open %s: %s", machine, e.msg);
        struct mk_snapshot *s = NULL;
        if (mk_nvml_snapshot(n, &s, &e) < 0)
                fail_msg("snapshot %s: %s", machine, e.msg);
        *ret_n = n;
        return s;
}

/* Compares a whole matrix, printing the first difference. */
static void check_matrix(const char *what, const unsigned *got, const unsigned *want, size_t g) {
        assert_non_null(got);
        for (size_t i = 0; i < g; i++)
                for (size_t j = 0; j < g; j++)
                        if (got[i * g + j] != want[i * g + j])
                                fail_msg("%s[%zu][%zu] = %u, expected %u", what, i, j, got[i * g + j],
                                         want[i * g + j]);
}

static void test_topology_nvswitch(void **state) {
        static const struct {
                const char *machine;
                unsigned links, pair_level;
        } t[] = {
                {"dgx-a100", 12, 20}, {"dgx-h100", 18, 10}, {"hgx-h200", 18, 10}, {"dgx-b200", 18, 10},
        };
        for (size_t k = 0; k < ELEMENTSOF(t); k++) {
                struct mk_nvml *n;
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snapshot_of(t[k].machine, &n);
                assert_int_equal(s->n_gpus, 8);
                unsigned links[64], level[64];
                for (size_t i = 0; i < 8; i++)
                        for (size_t j = 0; j < 8; j++) {
                                /* Every pair through the switches; PCIe: pairs, sockets of 4. */
                                links[i * 8 + j] = i == j ? 0 : t[k].links;
                                level[i * 8 + j] = i == j            ? 0
                                                   : i / 2 == j / 2 ? t[k].pair_level
                                                   : i / 4 == j / 4 ? 40
                                                                    : 50;
                        }
                check_matrix(t[k].machine, s->nvlinks, links, 8);
                check_matrix(t[k].machine, s->pcie_level, level, 8);
                mk_nvml_close(n);
        }
}

static void test_topology_bridge_pairs(void **state) {
        struct mk_nvml *n;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snapshot_of("h100-nvl-pairs", &n);
        assert_int_equal(s->n_gpus, 4);
        assert_string_equal(s->gpus[0].name, "NVIDIA H100 NVL");
        static const unsigned links[16] = {
                0, 12, 0, 0, /**/ 12, 0, 0, 0, /**/ 0, 0, 0, 12, /**/ 0, 0, 12, 0,
        };
        static const unsigned level[16] = {
                0, 10, 40, 40, /**/ 10, 0, 40, 40, /**/ 40, 40, 0, 10, /**/ 40, 40, 10, 0,
        };
        check_matrix("nvlinks", s->nvlinks, links, 4);
        check_matrix("pcie_level", s->pcie_level, level, 4);
        mk_nvml_close(n);

        /* An odd card out has no partner; other SXM parts in a custom list
         * have their links inactive. */
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *c = snapshot_of("h100-nvl*3,a100-40gb*2", &n);
        static const unsigned links5[25] = {
                0, 12, 0, 0, 0, /**/ 12, 0, 0, 0, 0, /**/ 0, 0, 0, 0, 0, /**/ 0, 0, 0, 0, 0, /**/ 0, 0, 0, 0, 0,
        };
        check_matrix("nvlinks", c->nvlinks, links5, 5);
        mk_nvml_close(n);
}

static void test_topology_single_gpu(void **state) {
        static const char *const machines[] = {"a100-40gb", "t4", "h100-nvl"};
        for (size_t k = 0; k < ELEMENTSOF(machines); k++) {
                struct mk_nvml *n;
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snapshot_of(machines[k], &n);
                assert_int_equal(s->n_gpus, 1);
                static const unsigned zero[1] = {0};
                check_matrix(machines[k], s->nvlinks, zero, 1);
                check_matrix(machines[k], s->pcie_level, zero, 1);
                mk_nvml_close(n);
        }
}

/* ---- events and the liveness check ---- */

static void *sim_control(const char *name) {
        void *dl = dlopen(sim_lib(), RTLD_NOW | RTLD_LOCAL); /* the library mk_nvml_open loaded */
        assert_non_null(dl);
        void *f = dlsym(dl, name);
        assert_non_null(f);
        dlclose(dl);
        return f;
}

static void test_events_and_check(void **state) {
        int (*sim_xid)(unsigned, unsigned, unsigned, unsigned long long) = sim_control("mksim_xid");
        int (*sim_lost)(unsigned, int) = sim_control("mksim_gpu_set_lost");
        struct mk_nvml *n;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snapshot_of("dgx-h100", &n);
        struct mk_error e = {0};

        /* A MIG device on GPU 1 (Hopper: the mode applies at once). */
        bool pending = true;
        unsigned gi, ci;
        assert_int_equal(mk_nvml_set_mig_mode(n, 1, true, &pending, &e), 0);
        assert_false(pending);
        assert_int_equal(mk_nvml_create_gi(n, 1, 19, (struct mk_placement){0, 1}, &gi, &e), 0);
        assert_int_equal(mk_nvml_create_ci(n, 1, gi, 0, (struct mk_placement){0, 1}, &ci, &e), 0);

        struct mk_nvml_events *ev = NULL;
        assert_int_equal(mk_nvml_events_open(n, s, &ev, &e), 0);
        for (size_t i = 0; i < s->n_gpus; i++)
                assert_int_equal(mk_nvml_events_gpu_status(ev, i), 0);
        struct mk_nvml_event got;
        assert_int_equal(mk_nvml_events_wait(ev, 0, &got, &e), 0);

        assert_int_equal(sim_xid(3, UINT32_MAX, UINT32_MAX, 79), 0);
        assert_int_equal(sim_xid(1, gi, ci, 94), 0);
        assert_int_equal(mk_nvml_events_wait(ev, 5000, &got, &e), 1);
        assert_int_equal(got.gpu, 3);
        assert_int_equal(got.type, nvmlEventTypeXidCriticalError);
        assert_int_equal(got.xid, 79);
        assert_int_equal(got.gi_id, UINT32_MAX);
        assert_int_equal(got.ci_id, UINT32_MAX);
        assert_int_equal(mk_nvml_events_wait(ev, 5000, &got, &e), 1);
        assert_int_equal(got.gpu, 1);
        assert_int_equal(got.xid, 94);
        assert_int_equal(got.gi_id, gi);
        assert_int_equal(got.ci_id, ci);

        assert_int_equal(mk_nvml_device_check(n, 1, UINT32_MAX, UINT32_MAX, &e), 0);
        assert_int_equal(mk_nvml_device_check(n, 1, gi, ci, &e), 0);
        assert_int_equal(mk_nvml_device_check(n, 1, gi, ci + 1, &e), -ENOENT);
        assert_int_equal(mk_nvml_device_check(n, 2, gi, ci, &e), -EOPNOTSUPP); /* no MIG there */

        /* A lost GPU: the check says so, the wait fails, a new set skips it. */
        assert_int_equal(sim_lost(5, 1), 0);
        assert_int_equal(mk_nvml_device_check(n, 5, UINT32_MAX, UINT32_MAX, &e), -ENXIO);
        assert_non_null(strstr(e.msg, "NVML_ERROR_GPU_IS_LOST"));
        assert_int_equal(mk_nvml_events_wait(ev, 100, &got, &e), -ENXIO);
        ev = mk_nvml_events_close(ev);
        assert_int_equal(mk_nvml_events_open(n, s, &ev, &e), 0);
        assert_int_equal(mk_nvml_events_gpu_status(ev, 5), -ENXIO);
        assert_int_equal(mk_nvml_events_gpu_status(ev, 4), 0);
        assert_int_equal(mk_nvml_events_wait(ev, 0, &got, &e), 0);
        assert_int_equal(sim_lost(5, 0), 0);
        assert_int_equal(mk_nvml_device_check(n, 5, UINT32_MAX, UINT32_MAX, &e), 0);
        assert_null(mk_nvml_events_close(ev));
        mk_nvml_close(n);
}

static int setup(void **state) {
        return mkdtemp(state_dir) ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static int teardown(void **state) {
        return nftw(state_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_errno_mapping),
                cmocka_unit_test(test_missing_library),
                cmocka_unit_test(test_not_a_library),
                cmocka_unit_test(test_missing_required_symbol_named),
                cmocka_unit_test(test_snapshot_a100),
                cmocka_unit_test(test_snapshot_non_mig_gpu),
                cmocka_unit_test(test_snapshot_dgx_h100_names),
                cmocka_unit_test(test_topology_nvswitch),
                cmocka_unit_test(test_topology_bridge_pairs),
                cmocka_unit_test(test_topology_single_gpu),
                cmocka_unit_test(test_events_and_check),
        };
        return cmocka_run_group_tests_name("nvml", tests, setup, teardown);
}
