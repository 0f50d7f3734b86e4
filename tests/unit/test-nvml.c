/* nvml/: the loader and the snapshot, against the simulator library
 * (MIGKIT_NVML_LIB) on throw-away state files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

        /* Every profile of mig-profiles.md §4.2, named by the rounding rule. */
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
        };
        return cmocka_run_group_tests_name("nvml", tests, setup, teardown);
}
