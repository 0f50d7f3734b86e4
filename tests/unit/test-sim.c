/* The NVML simulator's behaviour, through the library itself: dlopen() of
 * $MIGKIT_NVML_LIB and calls by dlsym(), with the types of nvml-abi.h, as any
 * NVML client does. Each test runs on its own throw-away state file. Skipped
 * when MIGKIT_NVML_LIB is not set.
 *
 * Covered: init and reference counting, identities, MIG mode (Ampere pending
 * until reset, Hopper at once, reboot), profiles and placements, GPU and
 * compute instance creation with its errors, MIG device handles, processes,
 * Xid events across processes, fault injection (environment and state file),
 * crash_after, concurrent creators, corrupted state files. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvml/nvml-abi.h"
#include "../../sim/mksim.h"
#include "base/error.h"
#include "base/host.h"
#include "pci/pci.h"

/* ---- the library, by dlsym ---- */

static void *lib;

#define X(name, ret, args) static ret(*p_##name) args;
MK_NVML_FUNCTIONS(X)
#undef X

#define MKSIM_FUNCTIONS(Y)                \
        Y(mksim_state_path)               \
        Y(mksim_last_error)               \
        Y(mksim_create_machine)           \
        Y(mksim_describe)                 \
        Y(mksim_process_add)              \
        Y(mksim_process_remove)           \
        Y(mksim_xid)                      \
        Y(mksim_fault_set)                \
        Y(mksim_fault_crash_after)        \
        Y(mksim_fault_clear)              \
        Y(mksim_reset_gpu)                \
        Y(mksim_reboot)                   \
        Y(mksim_gpu_set_lost)             \
        Y(mksim_host_root)

#define Y(name) static typeof(name) *p_##name;
MKSIM_FUNCTIONS(Y)
#undef Y

static char tmpdir[512];

static int load(void **state) {
        const char *path = getenv("MIGKIT_NVML_LIB");
        const char *base = getenv("MIGKIT_TEST_TMP");

        if (!path)
                return 0; /* every test skips */
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
                fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
                return -1;
        }
#define X(name, ret, args)                                                    \
        p_##name = (ret(*) args) dlsym(lib, #name);                           \
        if (!p_##name) {                                                      \
                fprintf(stderr, "%s lacks %s\n", path, #name);                \
                return -1;                                                    \
        }
        MK_NVML_FUNCTIONS(X)
#undef X
#define Y(name)                                                               \
        p_##name = (typeof(name) *) dlsym(lib, #name);                        \
        if (!p_##name) {                                                      \
                fprintf(stderr, "%s lacks %s\n", path, #name);                \
                return -1;                                                    \
        }
        MKSIM_FUNCTIONS(Y)
#undef Y
        if (base && *base) {
                mkdir(base, 0755);
                snprintf(tmpdir, sizeof(tmpdir), "%s/test-sim-XXXXXX", base);
        } else
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-sim-XXXXXX");
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return -1;
        }
        return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static int unload(void **state) {
        if (*tmpdir)
                nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (lib)
                dlclose(lib);
        return 0;
}

/* A fresh state file for `machine`, and no faults from the environment. */
static const char *use_machine(const char *machine) {
        static char path[700];
        static unsigned serial;

        if (!lib)
                skip();
        /* A test that failed half-way may have left the library initialised. */
        while (p_nvmlShutdown() == NVML_SUCCESS)
                ;
        snprintf(path, sizeof(path), "%s/state-%u.json", tmpdir, serial++);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
        unsetenv("MIGKIT_SIM_FAULTS");
        unsetenv("MIGKIT_SIM_OP_LATENCY_MS");
        return path;
}

/* ---- assertions that name NVML return codes ---- */

static void check_ret(nvmlReturn_t got, nvmlReturn_t want, const char *call, const char *file, int line) {
        if (got != want) {
                print_error("%s:%d: %s returned %d (%s), expected %d (%s)\n", file, line, call, got,
                            p_nvmlErrorString(got), want, p_nvmlErrorString(want));
                fail();
        }
}
#define EXPECT(want, call) check_ret((call), (want), #call, __FILE__, __LINE__)
#define OK(call) EXPECT(NVML_SUCCESS, call)

static nvmlDevice_t gpu(unsigned i) {
        nvmlDevice_t d = NULL;
        OK(p_nvmlDeviceGetHandleByIndex_v2(i, &d));
        return d;
}

/* Enables MIG on GPU i: at once on Hopper+, by a reset on Ampere. */
static void enable_mig(unsigned i) {
        nvmlReturn_t act = NVML_ERROR_UNKNOWN;
        unsigned cur, pend;

        OK(p_nvmlDeviceSetMigMode(gpu(i), NVML_DEVICE_MIG_ENABLE, &act));
        if (act == NVML_ERROR_RESET_REQUIRED)
                assert_int_equal(p_mksim_reset_gpu(i), 0);
        OK(p_nvmlDeviceGetMigMode(gpu(i), &cur, &pend));
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 1);
}

static nvmlGpuInstance_t create_gi(unsigned g, unsigned profile_id, unsigned start, unsigned size) {
        nvmlGpuInstancePlacement_t pl = { .start = start, .size = size };
        nvmlGpuInstance_t gi = NULL;
        OK(p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(g), profile_id, &pl, &gi));
        assert_non_null(gi);
        return gi;
}

static nvmlGpuInstanceInfo_t gi_info(nvmlGpuInstance_t gi) {
        nvmlGpuInstanceInfo_t info;
        OK(p_nvmlGpuInstanceGetInfo(gi, &info));
        return info;
}

/* ---- tests ---- */

static void test_init_refcount(void **state) {
        unsigned n;
        char buf[80];

        use_machine("dgx-a100");
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlDeviceGetCount_v2(&n));
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlSystemGetDriverVersion(buf, sizeof(buf)));
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlShutdown());
        OK(p_nvmlInit_v2());
        OK(p_nvmlInitWithFlags(0));
        OK(p_nvmlDeviceGetCount_v2(&n));
        assert_int_equal(n, 8);
        OK(p_nvmlShutdown());
        OK(p_nvmlDeviceGetCount_v2(&n)); /* still one reference */
        OK(p_nvmlShutdown());
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlDeviceGetCount_v2(&n));
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlShutdown());

        assert_string_equal(p_nvmlErrorString(NVML_SUCCESS), "Success");
        assert_string_equal(p_nvmlErrorString(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
        assert_string_equal(p_nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported");
        assert_string_equal(p_nvmlErrorString(NVML_ERROR_IN_USE), "In use by another client");
        assert_string_equal(p_nvmlErrorString(NVML_ERROR_INSUFFICIENT_RESOURCES), "Insufficient Resources");
        assert_string_equal(p_nvmlErrorString((nvmlReturn_t) 4242), "Unknown Error");
}

static void test_system_and_identity(void **state) {
        char buf[96], uuid0[96], small[8];
        int cuda;
        unsigned n, idx, minor;
        nvmlPciInfo_t pci;
        nvmlMemory_t mem;
        nvmlDevice_t d;

        use_machine("dgx-a100");
        OK(p_nvmlInit_v2());
        OK(p_nvmlSystemGetDriverVersion(buf, sizeof(buf)));
        assert_string_equal(buf, "550.54.15");
        EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, p_nvmlSystemGetDriverVersion(small, sizeof(small)));
        OK(p_nvmlSystemGetNVMLVersion(buf, sizeof(buf)));
        assert_string_equal(buf, "12.550.54.15");
        OK(p_nvmlSystemGetCudaDriverVersion(&cuda));
        assert_int_equal(cuda, 12040);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetCount_v2(NULL));
        OK(p_nvmlDeviceGetCount_v2(&n));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetHandleByIndex_v2(n, &d));

        static const char *const bus[] = { "00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0",
                                           "00000000:4E:00.0", "00000000:87:00.0", "00000000:90:00.0",
                                           "00000000:B7:00.0", "00000000:BD:00.0" };
        for (unsigned i = 0; i < n; i++) {
                OK(p_nvmlDeviceGetPciInfo_v3(gpu(i), &pci));
                assert_string_equal(pci.busId, bus[i]);
                assert_string_equal(pci.busIdLegacy, bus[i] + 4);
                assert_int_equal(pci.pciDeviceId, 0x20B010DE);
                OK(p_nvmlDeviceGetIndex(gpu(i), &idx));
                assert_int_equal(idx, i);
                OK(p_nvmlDeviceGetMinorNumber(gpu(i), &minor));
                assert_int_equal(minor, i);
                OK(p_nvmlDeviceGetHandleByPciBusId_v2(bus[i], &d));
                assert_ptr_equal(d, gpu(i));
                OK(p_nvmlDeviceGetHandleByPciBusId_v2(bus[i] + 4, &d)); /* legacy form */
                assert_ptr_equal(d, gpu(i));
        }
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlDeviceGetHandleByPciBusId_v2("00000000:08:00.0", &d));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetHandleByPciBusId_v2("nonsense", &d));

        OK(p_nvmlDeviceGetName(gpu(0), buf, sizeof(buf)));
        assert_string_equal(buf, "NVIDIA A100-SXM4-40GB");
        EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, p_nvmlDeviceGetName(gpu(0), small, sizeof(small)));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetName(gpu(0), NULL, 64));
        OK(p_nvmlDeviceGetUUID(gpu(0), uuid0, sizeof(uuid0)));
        assert_int_equal(strlen(uuid0), 40);
        assert_memory_equal(uuid0, "GPU-", 4);
        OK(p_nvmlDeviceGetUUID(gpu(1), buf, sizeof(buf)));
        assert_string_not_equal(buf, uuid0);
        OK(p_nvmlDeviceGetHandleByUUID(uuid0, &d));
        assert_ptr_equal(d, gpu(0));
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d));
        OK(p_nvmlDeviceGetMemoryInfo(gpu(0), &mem));
        assert_int_equal(mem.total, 40960ULL << 20);
        assert_int_equal(mem.free + mem.used, mem.total);

        /* A pointer the library never issued. */
        struct { int x; } fake;
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetName((nvmlDevice_t) (void *) &fake, buf, sizeof(buf)));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetName(NULL, buf, sizeof(buf)));
        OK(p_nvmlShutdown());

        /* UUIDs are a function of (machine, index): the same in another state file. */
        use_machine("dgx-a100");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetUUID(gpu(0), buf, sizeof(buf)));
        assert_string_equal(buf, uuid0);
        OK(p_nvmlShutdown());
        use_machine("dgx-h100");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetUUID(gpu(0), buf, sizeof(buf)));
        assert_string_not_equal(buf, uuid0);
        OK(p_nvmlShutdown());
}

static void test_mig_mode_ampere(void **state) {
        nvmlReturn_t act;
        unsigned cur, pend;
        nvmlGpuInstance_t gi;

        use_machine("a100-40gb");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 0);
        assert_int_equal(pend, 0);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceSetMigMode(gpu(0), 2, &act));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceSetMigMode(gpu(0), 1, NULL));

        OK(p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_ENABLE, &act));
        assert_int_equal(act, NVML_ERROR_RESET_REQUIRED);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 0);
        assert_int_equal(pend, 1);
        /* Still disabled: no instances yet. */
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceCreateGpuInstance(gpu(0), 19, &gi));

        /* A reset refuses while a process runs, then applies the mode. */
        unsigned pid = 0;
        assert_int_equal(p_mksim_process_add(0, MKSIM_ID_NONE, MKSIM_ID_NONE, 0, 100, &pid), 0);
        assert_int_equal(pid, 100000);
        assert_int_equal(p_mksim_reset_gpu(0), -EBUSY);
        assert_int_equal(p_mksim_process_remove(pid), 0);
        assert_int_equal(p_mksim_reset_gpu(0), 0);
        assert_int_equal(p_mksim_reset_gpu(7), -ENODEV);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 1);

        /* Setting the current mode again needs no reset. */
        OK(p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_ENABLE, &act));
        assert_int_equal(act, NVML_SUCCESS);

        /* Disabling while GPU instances exist: IN_USE, nothing changes. */
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 19, &gi));
        EXPECT(NVML_ERROR_IN_USE, p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_DISABLE, &act));
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(pend, 1);

        /* A reset destroys the instances; the reboot keeps Ampere's mode. */
        assert_int_equal(p_mksim_reset_gpu(0), 0);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlGpuInstanceGetInfo(gi, &(nvmlGpuInstanceInfo_t) { 0 }));
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 19, &gi));
        assert_int_equal(p_mksim_reboot(), 0);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 1);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlGpuInstanceDestroy(gi));
        OK(p_nvmlShutdown());
}

static void test_mig_mode_hopper(void **state) {
        nvmlReturn_t act;
        unsigned cur, pend, pid;

        use_machine("h100-80gb,a100-40gb");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_ENABLE, &act));
        assert_int_equal(act, NVML_SUCCESS);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 1);

        /* Not idle: the change stays pending and activation says IN_USE. */
        assert_int_equal(p_mksim_process_add(0, MKSIM_ID_NONE, MKSIM_ID_NONE, 4242, 10, &pid), 0);
        assert_int_equal(pid, 4242);
        assert_int_equal(p_mksim_process_add(0, MKSIM_ID_NONE, MKSIM_ID_NONE, 4242, 10, &pid), -EEXIST);
        OK(p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_DISABLE, &act));
        assert_int_equal(act, NVML_ERROR_IN_USE);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 0);
        OK(p_nvmlDeviceSetMigMode(gpu(0), NVML_DEVICE_MIG_ENABLE, &act));
        assert_int_equal(act, NVML_SUCCESS);

        /* A reboot: Hopper comes back disabled, Ampere keeps its mode. */
        enable_mig(1);
        assert_int_equal(p_mksim_reboot(), 0);
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(cur, 0);
        assert_int_equal(pend, 0);
        OK(p_nvmlDeviceGetMigMode(gpu(1), &cur, &pend));
        assert_int_equal(cur, 1);
        unsigned count = 5;
        OK(p_nvmlDeviceGetComputeRunningProcesses_v3(gpu(0), &count, NULL));
        assert_int_equal(count, 0); /* processes end with the reboot */
        OK(p_nvmlShutdown());
}

static void test_non_mig_gpu(void **state) {
        unsigned cur, pend, count;
        nvmlGpuInstanceProfileInfo_t info;
        nvmlReturn_t act;
        char name[96];

        use_machine("t4");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetName(gpu(0), name, sizeof(name)));
        assert_string_equal(name, "Tesla T4");
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceSetMigMode(gpu(0), 1, &act));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), 0, &info));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), 19, NULL, &count));
        OK(p_nvmlDeviceGetMaxMigDeviceCount(gpu(0), &count));
        assert_int_equal(count, 0);
        OK(p_nvmlShutdown());
}

/* nvmlDeviceGetBrand: data-center parts are NVML_BRAND_NVIDIA (14 in nvmlBrandType_t). */
static void test_brand(void **state) {
        nvmlBrandType_t b = NVML_BRAND_UNKNOWN;

        use_machine("dgx-a100");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetBrand(gpu(0), &b));
        assert_int_equal(b, 14);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetBrand(gpu(0), NULL));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetBrand((nvmlDevice_t) &b, &b));
        OK(p_nvmlShutdown());
}

static char *slurp(const char *root, const char *rel) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        FILE *f = fopen(path, "r");
        if (!f)
                fail_msg("cannot open %s", path);
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        return buf;
}

/* The host tree: what our pci/ enumerates and the plugin reads for MIG device specs. */
static void test_host_tree(void **state) {
        const char *st = use_machine("mixed-a100");
        char *root = NULL;
        assert_int_equal(p_mksim_host_root(&root), 0);
        char want[800];
        snprintf(want, sizeof(want), "%s.host", st);
        assert_string_equal(root, want);

        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:07:00.0/class"), "0x030200\n");
        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:07:00.0/vendor"), "0x10de\n");
        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:07:00.0/device"), "0x20b0\n");
        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:87:00.0/device"), "0x20b2\n"); /* GPU 4: 80GB */
        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:07:00.0/numa_node"), "0\n");
        assert_string_equal(slurp(root, "sys/bus/pci/devices/0000:bd:00.0/numa_node"), "1\n");
        /* The driver's numbering: config 1, monitor 2, then 9 minors per GI, 15 GIs per GPU. */
        const char *minors = slurp(root, "proc/driver/nvidia-caps/mig-minors");
        assert_non_null(strstr(minors, "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"));
        assert_non_null(strstr(minors, "\ngpu0/gi1/access 12\n"));
        assert_non_null(strstr(minors, "\ngpu7/gi14/ci7/access 1082\n"));
        assert_null(strstr(minors, "gpu8/"));

        struct mk_host h = {0};
        char sys[900], proc[900];
        snprintf(sys, sizeof(sys), "%s/sys", root);
        snprintf(proc, sizeof(proc), "%s/proc", root);
        h.sysfs_root = sys;
        h.proc_root = proc;
        h.dev_root = (char *) "/dev";
        struct mk_pci_gpu *g = NULL;
        size_t n = 0;
        struct mk_error e = {0};
        if (mk_pci_enumerate(&h, &g, &n, &e) < 0)
                fail_msg("%s", e.msg);
        assert_int_equal(n, 8);
        assert_string_equal(g[0].address, "0000:07:00.0");
        assert_int_equal(g[0].vendor, 0x10de);
        assert_int_equal(g[0].device, 0x20b0);
        assert_int_equal(g[0].class_code, 0x030200);
        assert_true(g[0].has_reset);
        assert_true(mk_pci_driver_loaded(&h));
        mk_pci_gpus_free(g, n);
        free(root);
}

static void test_profiles_and_placements(void **state) {
        nvmlGpuInstanceProfileInfo_t info;
        nvmlGpuInstanceProfileInfo_v2_t v2;
        nvmlGpuInstanceProfileInfo_v3_t v3;
        nvmlGpuInstancePlacement_t pl[8];
        unsigned count;

        use_machine("a100-40gb");
        OK(p_nvmlInit_v2());
        /* Works with MIG disabled (NVML v550+). */
        OK(p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), NVML_GPU_INSTANCE_PROFILE_3_SLICE, &info));
        assert_int_equal(info.id, 9);
        assert_int_equal(info.sliceCount, 3);
        assert_int_equal(info.instanceCount, 2);
        assert_int_equal(info.memorySizeMB, 19968);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT,
               p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), NVML_GPU_INSTANCE_PROFILE_COUNT, &info));
        EXPECT(NVML_ERROR_NOT_SUPPORTED,
               p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, &info));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), 0, NULL));

        v2 = (nvmlGpuInstanceProfileInfo_v2_t) { .version = nvmlGpuInstanceProfileInfo_v2 };
        OK(p_nvmlDeviceGetGpuInstanceProfileInfoV(gpu(0), NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, &v2));
        assert_string_equal(v2.name, "MIG 1g.5gb+me");
        assert_int_equal(v2.id, 20);
        assert_int_equal(v2.version, nvmlGpuInstanceProfileInfo_v2);
        v3 = (nvmlGpuInstanceProfileInfo_v3_t) { .version = nvmlGpuInstanceProfileInfo_v3 };
        OK(p_nvmlDeviceGetGpuInstanceProfileInfoV(gpu(0), NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
                                                  (nvmlGpuInstanceProfileInfo_v2_t *) (void *) &v3));
        assert_string_equal(v3.name, "MIG 1g.10gb");
        assert_int_equal(v3.memorySizeMB, 9856);
        assert_int_equal(v3.id, 15);
        v2.version = 7;
        EXPECT(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, p_nvmlDeviceGetGpuInstanceProfileInfoV(gpu(0), 0, &v2));

        /* Placements by driver id: count query, short buffer, the list. */
        OK(p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), 15, NULL, &count));
        assert_int_equal(count, 4);
        count = 2;
        EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), 15, pl, &count));
        assert_int_equal(count, 4);
        count = 8;
        OK(p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), 15, pl, &count));
        assert_int_equal(count, 4);
        for (unsigned i = 0; i < 4; i++) {
                assert_int_equal(pl[i].start, 2 * i);
                assert_int_equal(pl[i].size, 2);
        }
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), 99, NULL, &count));
        /* Listing or capacity needs MIG enabled. */
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetGpuInstanceRemainingCapacity(gpu(0), 19, &count));
        OK(p_nvmlShutdown());

        /* The A30: 4 units, its own ids. */
        use_machine("a30-24gb");
        OK(p_nvmlInit_v2());
        v2 = (nvmlGpuInstanceProfileInfo_v2_t) { .version = nvmlGpuInstanceProfileInfo_v2 };
        OK(p_nvmlDeviceGetGpuInstanceProfileInfoV(gpu(0), NVML_GPU_INSTANCE_PROFILE_2_SLICE, &v2));
        assert_string_equal(v2.name, "MIG 2g.12gb");
        count = 8;
        OK(p_nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu(0), v2.id, pl, &count));
        assert_int_equal(count, 2);
        assert_int_equal(pl[1].start, 2);
        EXPECT(NVML_ERROR_NOT_SUPPORTED,
               p_nvmlDeviceGetGpuInstanceProfileInfo(gpu(0), NVML_GPU_INSTANCE_PROFILE_7_SLICE, &info));
        OK(p_nvmlShutdown());
}

/* Every catalog model names its profiles as the MIG user guide does (the
 * names follow from memory sizes, several of them chosen UNVERIFIED). */
static void test_profile_names_all_models(void **state) {
        static const struct {
                const char *model;
                const char *names[NVML_GPU_INSTANCE_PROFILE_COUNT]; /* by enum, NULL: absent */
        } t[] = {
                { "a30-24gb", { [0] = "1g.6gb", [1] = "2g.12gb", [3] = "4g.24gb", [7] = "1g.6gb+me",
                                [8] = "2g.12gb+me" } },
                { "a100-40gb", { [0] = "1g.5gb", [1] = "2g.10gb", [2] = "3g.20gb", [3] = "4g.20gb",
                                 [4] = "7g.40gb", [7] = "1g.5gb+me", [9] = "1g.10gb" } },
                { "a100-80gb", { [0] = "1g.10gb", [1] = "2g.20gb", [2] = "3g.40gb", [3] = "4g.40gb",
                                 [4] = "7g.80gb", [7] = "1g.10gb+me", [9] = "1g.20gb" } },
                { "h100-80gb", { [0] = "1g.10gb", [1] = "2g.20gb", [2] = "3g.40gb", [3] = "4g.40gb",
                                 [4] = "7g.80gb", [7] = "1g.10gb+me", [9] = "1g.20gb" } },
                { "h100-nvl", { [0] = "1g.12gb", [1] = "2g.24gb", [2] = "3g.47gb", [3] = "4g.47gb",
                                [4] = "7g.94gb", [7] = "1g.12gb+me", [9] = "1g.24gb" } },
                { "h200-141gb", { [0] = "1g.18gb", [1] = "2g.35gb", [2] = "3g.71gb", [3] = "4g.71gb",
                                  [4] = "7g.141gb", [7] = "1g.18gb+me", [9] = "1g.35gb" } },
                { "gh200-144gb", { [0] = "1g.18gb", [1] = "2g.36gb", [2] = "3g.72gb", [3] = "4g.72gb",
                                   [4] = "7g.144gb", [7] = "1g.18gb+me", [9] = "1g.36gb" } },
                { "b200", { [0] = "1g.23gb", [1] = "2g.45gb", [2] = "3g.90gb", [3] = "4g.90gb", [4] = "7g.180gb",
                            [7] = "1g.23gb+me", [9] = "1g.45gb" } },
        };
        char want[64];

        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
                use_machine(t[i].model);
                OK(p_nvmlInit_v2());
                for (unsigned e = 0; e < NVML_GPU_INSTANCE_PROFILE_COUNT; e++) {
                        nvmlGpuInstanceProfileInfo_v2_t v2 = { .version = nvmlGpuInstanceProfileInfo_v2 };
                        nvmlReturn_t r = p_nvmlDeviceGetGpuInstanceProfileInfoV(gpu(0), e, &v2);
                        if (!t[i].names[e]) {
                                EXPECT(NVML_ERROR_NOT_SUPPORTED, r);
                                continue;
                        }
                        OK(r);
                        snprintf(want, sizeof(want), "MIG %s", t[i].names[e]);
                        if (strcmp(v2.name, want) != 0) {
                                print_error("%s enum %u: '%s', expected '%s'\n", t[i].model, e, v2.name, want);
                                fail();
                        }
                }
                OK(p_nvmlShutdown());
        }
}

static void test_gpu_instances(void **state) {
        nvmlGpuInstance_t gi, g3, list[8];
        nvmlGpuInstancePlacement_t pl;
        unsigned count;

        use_machine("a100-40gb");
        OK(p_nvmlInit_v2());
        enable_mig(0);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 19, NULL, &gi));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceCreateGpuInstance(gpu(0), 99, &gi));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceCreateGpuInstance(gpu(0), 19, NULL));
        pl = (nvmlGpuInstancePlacement_t) { .start = 2, .size = 4 }; /* 3g only at 0 and 4 */
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 9, &pl, &gi));
        pl = (nvmlGpuInstancePlacement_t) { .start = 0, .size = 3 }; /* wrong size */
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 9, &pl, &gi));

        g3 = create_gi(0, 9, 0, 4);
        nvmlGpuInstanceInfo_t info = gi_info(g3);
        assert_ptr_equal(info.device, gpu(0));
        assert_int_equal(info.profileId, 9);
        assert_int_equal(info.placement.start, 0);
        assert_int_equal(info.placement.size, 4);
        assert_int_equal(info.id, 1); /* the memory-slice tree node of 0:4 */

        /* Overlap, then the compute-slice limit: 3g + 4g would be 7 slices,
         * but the 4g's only placement overlaps. */
        pl = (nvmlGpuInstancePlacement_t) { .start = 2, .size = 2 };
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 14, &pl, &gi));
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlDeviceCreateGpuInstance(gpu(0), 5, &gi));
        OK(p_nvmlDeviceGetGpuInstanceRemainingCapacity(gpu(0), 19, &count));
        assert_int_equal(count, 3); /* 1g at 4, 5, 6: four slices left, but unit 7 takes no 1g */
        OK(p_nvmlDeviceGetGpuInstanceRemainingCapacity(gpu(0), 14, &count));
        assert_int_equal(count, 1); /* 2g starts at 0, 2, 4: only 4 is free */
        OK(p_nvmlDeviceGetGpuInstanceRemainingCapacity(gpu(0), 9, &count));
        assert_int_equal(count, 1);

        /* The driver places the second 3g at 4. */
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 9, &gi));
        assert_int_equal(gi_info(gi).placement.start, 4);
        assert_int_equal(gi_info(gi).id, 2);
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlDeviceCreateGpuInstance(gpu(0), 9, &gi));
        OK(p_nvmlDeviceGetGpuInstanceRemainingCapacity(gpu(0), 19, &count));
        assert_int_equal(count, 0); /* 6 slices used, no unit free */

        /* Lists: *count is output only, the array holds instanceCount. */
        count = 0;
        OK(p_nvmlDeviceGetGpuInstances(gpu(0), 9, list, &count));
        assert_int_equal(count, 2);
        assert_ptr_equal(list[0], g3);
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetGpuInstances(gpu(0), 9, NULL, &count));
        OK(p_nvmlDeviceGetGpuInstances(gpu(0), 19, list, &count));
        assert_int_equal(count, 0);
        OK(p_nvmlDeviceGetGpuInstanceById(gpu(0), 2, &gi));
        assert_int_equal(gi_info(gi).placement.start, 4);
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlDeviceGetGpuInstanceById(gpu(0), 3, &gi));

        /* Destroyed: the handle goes stale; a new GI at the same place gets the same handle. */
        OK(p_nvmlGpuInstanceDestroy(g3));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlGpuInstanceDestroy(g3));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlGpuInstanceGetInfo(g3, &info));
        nvmlGpuInstance_t again = create_gi(0, 9, 0, 4);
        assert_ptr_equal(again, g3);
        OK(p_nvmlGpuInstanceDestroy(again));

        /* The +me GI: one per GPU. 1g.5gb+me is id 20. */
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 20, &gi));
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlDeviceCreateGpuInstance(gpu(0), 20, &gi));
        OK(p_nvmlShutdown());
}

static void test_compute_instances(void **state) {
        nvmlComputeInstanceProfileInfo_t info;
        nvmlComputeInstanceProfileInfo_v2_t v2;
        nvmlComputeInstancePlacement_t pl[8];
        nvmlComputeInstance_t ci, c1, list[8];
        nvmlComputeInstanceInfo_t cinfo;
        unsigned count, pid;

        use_machine("h100-80gb");
        OK(p_nvmlInit_v2());
        enable_mig(0);
        nvmlGpuInstance_t g4 = create_gi(0, 5, 0, 4); /* 4g.40gb */
        unsigned gid = gi_info(g4).id;

        EXPECT(NVML_ERROR_INVALID_ARGUMENT,
               p_nvmlGpuInstanceGetComputeInstanceProfileInfo(g4, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 1, &info));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT,
               p_nvmlGpuInstanceGetComputeInstanceProfileInfo(g4, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0, &info));
        EXPECT(NVML_ERROR_NOT_SUPPORTED,
               p_nvmlGpuInstanceGetComputeInstanceProfileInfo(g4, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0, &info));
        EXPECT(NVML_ERROR_NOT_SUPPORTED,
               p_nvmlGpuInstanceGetComputeInstanceProfileInfo(g4, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1, 0,
                                                              &info));
        OK(p_nvmlGpuInstanceGetComputeInstanceProfileInfo(g4, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 0, &info));
        assert_int_equal(info.id, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE);
        assert_int_equal(info.sliceCount, 2);
        assert_int_equal(info.instanceCount, 2);
        assert_int_equal(info.multiprocessorCount, 32);
        v2 = (nvmlComputeInstanceProfileInfo_v2_t) { .version = nvmlComputeInstanceProfileInfo_v2 };
        OK(p_nvmlGpuInstanceGetComputeInstanceProfileInfoV(g4, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0, &v2));
        assert_string_equal(v2.name, "MIG 1c.4g.40gb");

        OK(p_nvmlGpuInstanceGetComputeInstancePossiblePlacements(g4, 1, NULL, &count));
        assert_int_equal(count, 2);
        count = 8;
        OK(p_nvmlGpuInstanceGetComputeInstancePossiblePlacements(g4, 1, pl, &count));
        assert_int_equal(pl[1].start, 2);

        /* 2c at 2, then 1c goes to the lowest free start, 0; 2c at 0 overlaps. */
        nvmlComputeInstancePlacement_t p = { .start = 2, .size = 2 };
        OK(p_nvmlGpuInstanceCreateComputeInstanceWithPlacement(g4, 1, &p, &ci));
        OK(p_nvmlGpuInstanceCreateComputeInstance(g4, 0, &c1));
        OK(p_nvmlComputeInstanceGetInfo_v2(c1, &cinfo));
        assert_int_equal(cinfo.id, 1);
        assert_int_equal(cinfo.placement.start, 0);
        assert_ptr_equal(cinfo.gpuInstance, g4);
        assert_ptr_equal(cinfo.device, gpu(0));
        assert_int_equal(cinfo.profileId, 0);
        p = (nvmlComputeInstancePlacement_t) { .start = 0, .size = 2 };
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlGpuInstanceCreateComputeInstanceWithPlacement(g4, 1, &p, &ci));
        p = (nvmlComputeInstancePlacement_t) { .start = 1, .size = 2 };
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlGpuInstanceCreateComputeInstanceWithPlacement(g4, 1, &p, &ci));
        OK(p_nvmlGpuInstanceGetComputeInstanceRemainingCapacity(g4, 0, &count));
        assert_int_equal(count, 1);
        OK(p_nvmlGpuInstanceGetComputeInstanceRemainingCapacity(g4, 1, &count));
        assert_int_equal(count, 0);
        count = 0;
        OK(p_nvmlGpuInstanceGetComputeInstances(g4, 0, list, &count));
        assert_int_equal(count, 1);
        assert_ptr_equal(list[0], c1);
        OK(p_nvmlGpuInstanceGetComputeInstanceById(g4, 0, &ci));
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlGpuInstanceGetComputeInstanceById(g4, 5, &ci));

        /* Busy instances refuse destruction. */
        EXPECT(NVML_ERROR_IN_USE, p_nvmlGpuInstanceDestroy(g4));
        assert_int_equal(p_mksim_process_add(0, gid, 1, 0, 512, &pid), 0);
        assert_int_equal(p_mksim_process_add(0, gid, 7, 0, 512, &pid), -ENOENT);
        EXPECT(NVML_ERROR_IN_USE, p_nvmlComputeInstanceDestroy(c1));
        OK(p_nvmlComputeInstanceDestroy(ci)); /* the other one is idle */
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlComputeInstanceDestroy(ci));
        assert_int_equal(p_mksim_process_remove(pid), 0);
        assert_int_equal(p_mksim_process_remove(pid), -ENOENT);
        OK(p_nvmlComputeInstanceDestroy(c1));
        OK(p_nvmlGpuInstanceDestroy(g4));
        OK(p_nvmlShutdown());
}

static void test_mig_devices(void **state) {
        unsigned count, v, pid;
        nvmlDevice_t m0, m1, parent, d;
        nvmlComputeInstance_t ci, ci2;
        nvmlDeviceAttributes_t attr;
        nvmlMemory_t mem;
        nvmlProcessInfo_t procs[4];
        char name[96], uuid[96], uuid2[96];

        use_machine("a100-40gb");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetMaxMigDeviceCount(gpu(0), &count));
        assert_int_equal(count, 0); /* "zero if MIG is not ... enabled" */
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(0), 0, &m0));
        enable_mig(0);
        OK(p_nvmlDeviceGetMaxMigDeviceCount(gpu(0), &count));
        assert_int_equal(count, 7);

        /* 7g.40gb (GI id 0) with a 4c (CI 0, at 0) and a 3c (CI 1, at 4). */
        nvmlGpuInstance_t g7 = create_gi(0, 0, 0, 8);
        OK(p_nvmlGpuInstanceCreateComputeInstance(g7, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, &ci));
        OK(p_nvmlGpuInstanceCreateComputeInstance(g7, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci2));
        nvmlComputeInstanceInfo_t cinfo;
        OK(p_nvmlComputeInstanceGetInfo_v2(ci2, &cinfo));
        assert_int_equal(cinfo.placement.start, 4);
        assert_int_equal(cinfo.placement.size, 3);
        OK(p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(0), 0, &m0));
        OK(p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(0), 1, &m1));
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(0), 2, &d));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(0), 7, &d));

        OK(p_nvmlDeviceIsMigDeviceHandle(m0, &v));
        assert_int_equal(v, 1);
        OK(p_nvmlDeviceIsMigDeviceHandle(gpu(0), &v));
        assert_int_equal(v, 0);
        OK(p_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m1, &parent));
        assert_ptr_equal(parent, gpu(0));
        OK(p_nvmlDeviceGetGpuInstanceId(m1, &v));
        assert_int_equal(v, 0);
        OK(p_nvmlDeviceGetComputeInstanceId(m1, &v));
        assert_int_equal(v, 1);
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetGpuInstanceId(gpu(0), &v));
        OK(p_nvmlDeviceGetIndex(m1, &v));
        assert_int_equal(v, 1);
        OK(p_nvmlDeviceGetName(m0, name, sizeof(name)));
        assert_string_equal(name, "NVIDIA A100-SXM4-40GB MIG 4c.7g.40gb");
        OK(p_nvmlDeviceGetName(m1, name, sizeof(name)));
        assert_string_equal(name, "NVIDIA A100-SXM4-40GB MIG 3c.7g.40gb");
        OK(p_nvmlDeviceGetAttributes_v2(m1, &attr));
        assert_int_equal(attr.multiprocessorCount, 42);
        assert_int_equal(attr.gpuInstanceSliceCount, 7);
        assert_int_equal(attr.computeInstanceSliceCount, 3);
        assert_int_equal(attr.memorySizeMB, 40192);
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetAttributes_v2(gpu(0), &attr));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetPciInfo_v3(m0, &(nvmlPciInfo_t) { 0 }));

        /* MIG UUIDs: found by nvmlDeviceGetHandleByUUID, new on re-creation. */
        OK(p_nvmlDeviceGetUUID(m0, uuid, sizeof(uuid)));
        assert_memory_equal(uuid, "MIG-", 4);
        assert_int_equal(strlen(uuid), 40);
        OK(p_nvmlDeviceGetHandleByUUID(uuid, &d));
        assert_ptr_equal(d, m0);

        /* Processes: the GPU sees all, a MIG device its own; count queries. */
        assert_int_equal(p_mksim_process_add(0, 0, 1, 0, 1024, &pid), 0);
        assert_int_equal(p_mksim_process_add(0, MKSIM_ID_NONE, MKSIM_ID_NONE, 0, 10, &pid), 0);
        count = 0;
        EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, p_nvmlDeviceGetComputeRunningProcesses_v3(gpu(0), &count, NULL));
        assert_int_equal(count, 2);
        count = 4;
        OK(p_nvmlDeviceGetComputeRunningProcesses_v3(m1, &count, procs));
        assert_int_equal(count, 1);
        assert_int_equal(procs[0].usedGpuMemory, 1024ULL << 20);
        assert_int_equal(procs[0].gpuInstanceId, 0);
        assert_int_equal(procs[0].computeInstanceId, 1);
        count = 4;
        OK(p_nvmlDeviceGetComputeRunningProcesses_v3(m0, &count, procs));
        assert_int_equal(count, 0);
        OK(p_nvmlDeviceGetMemoryInfo(m0, &mem));
        assert_int_equal(mem.total, 40192ULL << 20);
        assert_int_equal(mem.used, 1024ULL << 20); /* the GI's memory is shared by its CIs */
        assert_int_equal(p_mksim_process_remove(100000), 0);
        assert_int_equal(p_mksim_process_remove(100001), 0);

        OK(p_nvmlComputeInstanceDestroy(ci));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetUUID(m0, uuid2, sizeof(uuid2))); /* stale */
        OK(p_nvmlGpuInstanceCreateComputeInstance(g7, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, &ci));
        OK(p_nvmlDeviceGetUUID(m0, uuid2, sizeof(uuid2)));
        assert_string_not_equal(uuid, uuid2);
        EXPECT(NVML_ERROR_NOT_FOUND, p_nvmlDeviceGetHandleByUUID(uuid, &d));
        OK(p_nvmlShutdown());
}

static long long ms_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_events(void **state) {
        nvmlEventSet_t set;
        nvmlEventData_t data;
        unsigned long long types;

        use_machine("dgx-a100");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetSupportedEventTypes(gpu(0), &types));
        assert_true(types & nvmlEventTypeXidCriticalError);
        OK(p_nvmlEventSetCreate(&set));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceRegisterEvents(gpu(0), nvmlEventTypePState, set));
        /* An Xid raised before registration is not delivered. */
        assert_int_equal(p_mksim_xid(1, MKSIM_ID_NONE, MKSIM_ID_NONE, 31), 0);
        OK(p_nvmlDeviceRegisterEvents(gpu(1), nvmlEventTypeXidCriticalError, set));
        long long t0 = ms_now();
        EXPECT(NVML_ERROR_TIMEOUT, p_nvmlEventSetWait_v2(set, &data, 100));
        assert_true(ms_now() - t0 >= 90);

        /* Events on other GPUs are not delivered; ours is, once. */
        assert_int_equal(p_mksim_xid(2, MKSIM_ID_NONE, MKSIM_ID_NONE, 48), 0);
        assert_int_equal(p_mksim_xid(1, MKSIM_ID_NONE, MKSIM_ID_NONE, 79), 0);
        OK(p_nvmlEventSetWait_v2(set, &data, 0));
        assert_ptr_equal(data.device, gpu(1));
        assert_int_equal(data.eventType, nvmlEventTypeXidCriticalError);
        assert_int_equal(data.eventData, 79);
        assert_int_equal(data.gpuInstanceId, 0xFFFFFFFFu);
        EXPECT(NVML_ERROR_TIMEOUT, p_nvmlEventSetWait_v2(set, &data, 0));

        /* From another process while we wait; attributed to a MIG device. */
        enable_mig(1);
        nvmlGpuInstance_t gi = create_gi(1, 19, 0, 1);
        nvmlComputeInstance_t ci;
        OK(p_nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci));
        unsigned gid = gi_info(gi).id;
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                struct timespec ts = { .tv_sec = 0, .tv_nsec = 150 * 1000000L };
                nanosleep(&ts, NULL);
                _exit(p_mksim_xid(1, gid, 0, 94) == 0 ? 0 : 1);
        }
        OK(p_nvmlEventSetWait_v2(set, &data, 5000));
        assert_int_equal(data.eventData, 94);
        assert_int_equal(data.gpuInstanceId, gid);
        assert_int_equal(data.computeInstanceId, 0);
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* A MIG device handle does not take registrations. */
        nvmlDevice_t mig;
        OK(p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(1), 0, &mig));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceRegisterEvents(mig, nvmlEventTypeXidCriticalError, set));
        OK(p_nvmlEventSetFree(set));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlEventSetFree(set));
        OK(p_nvmlShutdown());
}

/* The interconnect queries with the return codes nvml.h documents: link
 * 0..NVML_NVLINK_MAX_LINKS-1, INVALID_ARGUMENT for a bad link or NULL,
 * NOT_SUPPORTED for a link the part lacks and for MIG handles. */
static void test_topology_raw(void **state) {
        nvmlEnableState_t st;
        nvmlIntNvLinkDeviceType_t type;
        nvmlPciInfo_t pci;
        nvmlGpuTopologyLevel_t lv;

        use_machine("dgx-a100");
        OK(p_nvmlInit_v2());
        for (unsigned l = 0; l < 12; l++) {
                OK(p_nvmlDeviceGetNvLinkState(gpu(0), l, &st));
                assert_int_equal(st, NVML_FEATURE_ENABLED);
                OK(p_nvmlDeviceGetNvLinkRemoteDeviceType(gpu(0), l, &type));
                assert_int_equal(type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
                OK(p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(0), l, &pci));
                /* 6 switches, 2 links each; the switch, not a GPU, is the far end. */
                assert_int_equal(pci.bus, 0xC4 + l / 2);
                assert_int_equal(pci.pciDeviceId, 0x1AF110DE);
        }
        OK(p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(3), 11, &pci));
        assert_string_equal(pci.busId, "00000000:C9:00.0");
        assert_string_equal(pci.busIdLegacy, "0000:C9:00.0");
        for (unsigned l = 12; l < NVML_NVLINK_MAX_LINKS; l++) {
                EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkState(gpu(0), l, &st));
                EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(0), l, &pci));
        }
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetNvLinkState(gpu(0), NVML_NVLINK_MAX_LINKS, &st));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetNvLinkState(gpu(0), 0, NULL));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetNvLinkRemoteDeviceType(gpu(0), 0, NULL));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(0), 0, NULL));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT,
               p_nvmlDeviceGetNvLinkState((nvmlDevice_t) &st, 0, &st)); /* not a handle */

        static const nvmlGpuTopologyLevel_t row0[8] = {
                NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_MULTIPLE, NVML_TOPOLOGY_NODE,   NVML_TOPOLOGY_NODE,
                NVML_TOPOLOGY_SYSTEM,   NVML_TOPOLOGY_SYSTEM,   NVML_TOPOLOGY_SYSTEM, NVML_TOPOLOGY_SYSTEM,
        };
        for (unsigned j = 0; j < 8; j++) {
                OK(p_nvmlDeviceGetTopologyCommonAncestor(gpu(0), gpu(j), &lv));
                assert_int_equal(lv, row0[j]);
                OK(p_nvmlDeviceGetTopologyCommonAncestor(gpu(j), gpu(0), &lv));
                assert_int_equal(lv, row0[j]);
        }
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetTopologyCommonAncestor(gpu(0), gpu(1), NULL));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, p_nvmlDeviceGetTopologyCommonAncestor(gpu(0), NULL, &lv));

        /* MIG device handles: NOT_SUPPORTED. */
        enable_mig(2);
        nvmlGpuInstance_t gi = create_gi(2, 19, 0, 1);
        nvmlComputeInstance_t ci;
        OK(p_nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci));
        nvmlDevice_t mig;
        OK(p_nvmlDeviceGetMigDeviceHandleByIndex(gpu(2), 0, &mig));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkState(mig, 0, &st));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetTopologyCommonAncestor(mig, gpu(0), &lv));
        OK(p_nvmlShutdown());

        /* Bridged H100 NVL pairs: GPU to GPU, bus ids of the peer. */
        use_machine("h100-nvl-pairs");
        OK(p_nvmlInit_v2());
        nvmlPciInfo_t peer;
        OK(p_nvmlDeviceGetPciInfo_v3(gpu(3), &peer));
        for (unsigned l = 0; l < 12; l++) {
                OK(p_nvmlDeviceGetNvLinkRemoteDeviceType(gpu(2), l, &type));
                assert_int_equal(type, NVML_NVLINK_DEVICE_TYPE_GPU);
                OK(p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(2), l, &pci));
                assert_string_equal(pci.busId, peer.busId);
                assert_int_equal(pci.pciDeviceId, 0x232110DE);
        }
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkState(gpu(2), 12, &st));
        OK(p_nvmlDeviceGetTopologyCommonAncestor(gpu(2), gpu(3), &lv));
        assert_int_equal(lv, NVML_TOPOLOGY_SINGLE);
        OK(p_nvmlShutdown());

        /* An unbridged card: links present, inactive; remote queries NOT_SUPPORTED. */
        use_machine("h100-nvl");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetNvLinkState(gpu(0), 0, &st));
        assert_int_equal(st, NVML_FEATURE_DISABLED);
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkRemoteDeviceType(gpu(0), 0, &type));
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkRemotePciInfo_v2(gpu(0), 0, &pci));
        OK(p_nvmlShutdown());

        /* No NvLink at all (T4). */
        use_machine("t4");
        OK(p_nvmlInit_v2());
        EXPECT(NVML_ERROR_NOT_SUPPORTED, p_nvmlDeviceGetNvLinkState(gpu(0), 0, &st));
        OK(p_nvmlDeviceGetTopologyCommonAncestor(gpu(0), gpu(0), &lv));
        assert_int_equal(lv, NVML_TOPOLOGY_INTERNAL);
        OK(p_nvmlShutdown());

        /* The other switch systems: 18 links, all to switches. */
        static const char *const sw18[] = {"dgx-h100", "hgx-h200", "dgx-b200"};
        for (size_t k = 0; k < sizeof(sw18) / sizeof(sw18[0]); k++) {
                use_machine(sw18[k]);
                OK(p_nvmlInit_v2());
                for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
                        OK(p_nvmlDeviceGetNvLinkState(gpu(7), l, &st));
                        assert_int_equal(st, NVML_FEATURE_ENABLED);
                        OK(p_nvmlDeviceGetNvLinkRemoteDeviceType(gpu(7), l, &type));
                        assert_int_equal(type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
                }
                OK(p_nvmlShutdown());
        }
}

/* A GPU fallen off the bus: NVML_ERROR_GPU_IS_LOST from every call on it,
 * the event wait included; other GPUs unaffected; a reboot brings it back. */
static void test_lost_gpu(void **state) {
        nvmlDevice_t d1 = NULL, mig = NULL;
        nvmlMemory_t mem;
        nvmlEventSet_t set;
        nvmlEventData_t data;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

        use_machine("dgx-h100");
        OK(p_nvmlInit_v2());
        d1 = gpu(1);
        enable_mig(1);
        nvmlGpuInstance_t gi = create_gi(1, 19, 0, 1);
        nvmlComputeInstance_t ci;
        OK(p_nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci));
        OK(p_nvmlDeviceGetMigDeviceHandleByIndex(d1, 0, &mig));
        OK(p_nvmlDeviceGetUUID(d1, uuid, sizeof(uuid)));
        OK(p_nvmlEventSetCreate(&set));
        OK(p_nvmlDeviceRegisterEvents(d1, nvmlEventTypeXidCriticalError, set));

        assert_int_equal(p_mksim_gpu_set_lost(1, 1), 0);
        assert_int_equal(p_mksim_gpu_set_lost(8, 1), -ENODEV);
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceGetHandleByIndex_v2(1, &d1));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceGetHandleByUUID(uuid, &d1));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceGetHandleByPciBusId_v2("00000000:0F:00.0", &d1));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceGetMemoryInfo(d1, &mem));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceGetMemoryInfo(mig, &mem));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlGpuInstanceGetInfo(gi, &(nvmlGpuInstanceInfo_t) { 0 }));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlEventSetWait_v2(set, &data, 0));
        EXPECT(NVML_ERROR_GPU_IS_LOST, p_nvmlDeviceRegisterEvents(d1, nvmlEventTypeXidCriticalError, set));
        OK(p_nvmlDeviceGetMemoryInfo(gpu(0), &mem));
        unsigned count;
        OK(p_nvmlDeviceGetCount_v2(&count));
        assert_int_equal(count, 8);

        /* Back: the same handles answer again, the set waits normally. */
        assert_int_equal(p_mksim_gpu_set_lost(1, 0), 0);
        OK(p_nvmlDeviceGetMemoryInfo(d1, &mem));
        EXPECT(NVML_ERROR_TIMEOUT, p_nvmlEventSetWait_v2(set, &data, 0));

        /* Lost again, then a reboot: every GPU answers. */
        assert_int_equal(p_mksim_gpu_set_lost(1, 1), 0);
        assert_int_equal(p_mksim_reboot(), 0);
        OK(p_nvmlDeviceGetMemoryInfo(d1, &mem));
        OK(p_nvmlEventSetFree(set));
        OK(p_nvmlShutdown());
}

static void test_faults_from_environment(void **state) {
        nvmlGpuInstance_t gi;
        unsigned n;

        use_machine("h100-80gb");
        setenv("MIGKIT_SIM_FAULTS",
               "nvmlDeviceCreateGpuInstanceWithPlacement:2:INSUFFICIENT_RESOURCES,nvmlDeviceGetCount_v2:1:19", 1);
        OK(p_nvmlInit_v2());
        EXPECT(NVML_ERROR_IN_USE, p_nvmlDeviceGetCount_v2(&n));
        OK(p_nvmlDeviceGetCount_v2(&n));
        enable_mig(0);
        nvmlGpuInstancePlacement_t pl = { .start = 0, .size = 1 };
        OK(p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 19, &pl, &gi));
        pl.start = 1;
        EXPECT(NVML_ERROR_INSUFFICIENT_RESOURCES, p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 19, &pl, &gi));
        /* The failed call did nothing, and the fault is spent. */
        nvmlGpuInstance_t list[7];
        OK(p_nvmlDeviceGetGpuInstances(gpu(0), 19, list, &n));
        assert_int_equal(n, 1);
        OK(p_nvmlDeviceCreateGpuInstanceWithPlacement(gpu(0), 19, &pl, &gi));
        OK(p_nvmlShutdown());
        unsetenv("MIGKIT_SIM_FAULTS");

        /* A malformed fault list fails nvmlInit. */
        use_machine("h100-80gb");
        setenv("MIGKIT_SIM_FAULTS", "nvmlNoSuchFunction:1:IN_USE", 1);
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());
        unsetenv("MIGKIT_SIM_FAULTS");
}

static void test_faults_in_state_across_processes(void **state) {
        nvmlGpuInstance_t gi;
        nvmlReturn_t act;
        unsigned cur, pend;

        use_machine("a100-40gb");
        assert_int_equal(p_mksim_fault_set("nvmlDeviceSetMigMode", 2, NVML_ERROR_NO_PERMISSION), 0);
        assert_int_equal(p_mksim_fault_set("nvmlNotAFunction", 1, NVML_ERROR_IN_USE), -EINVAL);
        assert_int_equal(p_mksim_fault_set("nvmlDeviceSetMigMode", 0, NVML_ERROR_IN_USE), -EINVAL);
        /* Call 1 in a child process, call 2 here: the count is machine-wide. */
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                nvmlDevice_t d;
                int ok = p_nvmlInit_v2() == NVML_SUCCESS && p_nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS &&
                         p_nvmlDeviceSetMigMode(d, 0, &act) == NVML_SUCCESS;
                _exit(ok ? 0 : 1);
        }
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        OK(p_nvmlInit_v2());
        EXPECT(NVML_ERROR_NO_PERMISSION, p_nvmlDeviceSetMigMode(gpu(0), 1, &act));
        OK(p_nvmlDeviceGetMigMode(gpu(0), &cur, &pend));
        assert_int_equal(pend, 0); /* the failed call did nothing */
        OK(p_nvmlDeviceSetMigMode(gpu(0), 1, &act));

        /* fault clear disarms. */
        assert_int_equal(p_mksim_fault_set("nvmlDeviceCreateGpuInstance", 1, NVML_ERROR_UNKNOWN), 0);
        assert_int_equal(p_mksim_fault_clear(), 0);
        assert_int_equal(p_mksim_reset_gpu(0), 0);
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 19, &gi));
        OK(p_nvmlShutdown());
}

static void test_crash_after(void **state) {
        nvmlGpuInstance_t list[8];
        unsigned n;

        use_machine("h100-80gb");
        assert_int_equal(p_mksim_fault_crash_after(3), 0);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                /* Set mode (1), create (2), create (3) -> dies after saving. */
                nvmlDevice_t d;
                nvmlGpuInstance_t gi;
                nvmlReturn_t act;
                if (p_nvmlInit_v2() || p_nvmlDeviceGetHandleByIndex_v2(0, &d) || p_nvmlDeviceSetMigMode(d, 1, &act))
                        _exit(1);
                for (int i = 0; i < 5; i++)
                        if (p_nvmlDeviceCreateGpuInstance(d, 19, &gi))
                                _exit(2);
                _exit(0);
        }
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 137);

        /* The state holds exactly what was saved, and crash_after is spent. */
        OK(p_nvmlInit_v2());
        n = 0;
        OK(p_nvmlDeviceGetGpuInstances(gpu(0), 19, list, &n));
        assert_int_equal(n, 2);
        nvmlGpuInstance_t gi;
        OK(p_nvmlDeviceCreateGpuInstance(gpu(0), 19, &gi));
        OK(p_nvmlShutdown());
}

static void test_concurrent_creators(void **state) {
        enum { CHILDREN = 4 };
        nvmlGpuInstance_t list[8];
        pid_t kids[CHILDREN];
        int made = 0;
        unsigned n;

        use_machine("a100-40gb");
        OK(p_nvmlInit_v2());
        enable_mig(0);
        OK(p_nvmlShutdown());
        for (int k = 0; k < CHILDREN; k++) {
                kids[k] = fork();
                assert_true(kids[k] >= 0);
                if (kids[k] == 0) {
                        nvmlDevice_t d;
                        nvmlGpuInstance_t gi;
                        int mine = 0;
                        if (p_nvmlInit_v2() || p_nvmlDeviceGetHandleByIndex_v2(0, &d))
                                _exit(100);
                        for (;;) {
                                nvmlReturn_t r = p_nvmlDeviceCreateGpuInstance(d, 19, &gi);
                                if (r == NVML_ERROR_INSUFFICIENT_RESOURCES)
                                        break;
                                if (r != NVML_SUCCESS)
                                        _exit(101);
                                mine++;
                        }
                        _exit(mine);
                }
        }
        for (int k = 0; k < CHILDREN; k++) {
                int status;
                assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
                assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 7);
                made += WEXITSTATUS(status);
        }
        assert_int_equal(made, 7);
        OK(p_nvmlInit_v2());
        n = 0;
        OK(p_nvmlDeviceGetGpuInstances(gpu(0), 19, list, &n));
        assert_int_equal(n, 7);
        OK(p_nvmlShutdown());
}

/* MIGKIT_SIM_OP_LATENCY_MS: each mutating call lasts that long, without
 * holding the state lock, so four threads creating a GPU instance on four
 * GPUs at once take about one latency, not four; a bad value fails nvmlInit. */
struct latency_job {
        unsigned gpu;
        nvmlReturn_t r;
        long long ms;
};

static void *latency_create(void *userdata) {
        struct latency_job *j = userdata;
        nvmlGpuInstancePlacement_t pl = { .start = 0, .size = 1 };
        nvmlDevice_t d = NULL;
        nvmlGpuInstance_t gi = NULL;
        long long t = ms_now();
        j->r = p_nvmlDeviceGetHandleByIndex_v2(j->gpu, &d);
        if (j->r == NVML_SUCCESS)
                j->r = p_nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, &pl, &gi);
        j->ms = ms_now() - t;
        return NULL;
}

static void test_op_latency_threads(void **state) {
        enum { GPUS = 4, LATENCY_MS = 300 };
        struct latency_job jobs[GPUS];
        pthread_t threads[GPUS];

        use_machine("h100-80gb*4");
        OK(p_nvmlInit_v2());
        for (unsigned i = 0; i < GPUS; i++)
                enable_mig(i);
        OK(p_nvmlShutdown());
        setenv("MIGKIT_SIM_OP_LATENCY_MS", "300", 1);
        OK(p_nvmlInit_v2());
        long long t = ms_now();
        for (unsigned i = 0; i < GPUS; i++) {
                jobs[i] = (struct latency_job) { .gpu = i };
                assert_int_equal(pthread_create(&threads[i], NULL, latency_create, &jobs[i]), 0);
        }
        for (unsigned i = 0; i < GPUS; i++)
                assert_int_equal(pthread_join(threads[i], NULL), 0);
        t = ms_now() - t;
        for (unsigned i = 0; i < GPUS; i++) {
                EXPECT(NVML_SUCCESS, jobs[i].r);
                assert_true(jobs[i].ms >= LATENCY_MS);
        }
        if (t >= 3 * LATENCY_MS)
                fail_msg("4 creates on 4 GPUs from 4 threads took %lld ms, %d ms each", t, LATENCY_MS);
        /* A read is not an operation. */
        unsigned n = 0;
        t = ms_now();
        OK(p_nvmlDeviceGetCount_v2(&n));
        assert_true(ms_now() - t < LATENCY_MS);
        OK(p_nvmlShutdown());

        use_machine("h100-80gb");
        setenv("MIGKIT_SIM_OP_LATENCY_MS", "soon", 1);
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());
        unsetenv("MIGKIT_SIM_OP_LATENCY_MS");
}

static void test_bad_state_and_machine(void **state) {
        const char *path = use_machine("dgx-a100");
        unsigned n;

        /* Garbage, then valid JSON with an impossible layout. */
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("{ this is not json", f);
        fclose(f);
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());
        EXPECT(NVML_ERROR_UNINITIALIZED, p_nvmlDeviceGetCount_v2(&n));
        char *desc = NULL;
        assert_int_equal(p_mksim_describe(&desc), -EBADMSG);
        assert_non_null(strstr(p_mksim_last_error(), path));

        assert_int_equal(p_mksim_create_machine("a100-40gb", 0), -EEXIST);
        assert_int_equal(p_mksim_create_machine("a100-40gb", MKSIM_CREATE_FORCE), 0);
        OK(p_nvmlInit_v2());
        OK(p_nvmlShutdown());
        assert_int_equal(p_mksim_describe(&desc), 0);
        char *p = strstr(desc, "\"gpu_instances\": []");
        assert_non_null(p);
        free(desc);

        f = fopen(path, "w");
        assert_non_null(f);
        fputs("{\"format\":1,\"machine\":\"x\",\"serial\":0,\"event_seq\":0,\"next_pid\":100000,\"crash_after\":0,"
              "\"faults\":[],\"events\":[],\"gpus\":[{\"model\":\"a100-40gb\","
              "\"uuid\":\"GPU-00000000-0000-0000-0000-000000000000\",\"bus_id\":\"00000000:07:00.0\","
              "\"mig_current\":1,\"mig_pending\":1,\"gpu_instances\":["
              "{\"id\":1,\"profile\":2,\"start\":0,\"size\":4,\"serial\":1,\"compute_instances\":[]},"
              "{\"id\":1,\"profile\":3,\"start\":0,\"size\":4,\"serial\":2,\"compute_instances\":[]}],"
              "\"processes\":[]}]}",
              f);
        fclose(f);
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());

        /* Unknown machines. */
        use_machine("dgx-z9000");
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());
        use_machine("a100-40gb*2,nosuchgpu");
        EXPECT(NVML_ERROR_UNKNOWN, p_nvmlInit_v2());
        use_machine("a100-40gb*2,h100-80gb,t4");
        OK(p_nvmlInit_v2());
        OK(p_nvmlDeviceGetCount_v2(&n));
        assert_int_equal(n, 4);
        OK(p_nvmlShutdown());
}

/* ---- the live region under polling ---- */

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_primary_retain_fn)(void **, int);

/* nvml.h's per-process utilisation sample (not in the product's NVML ABI list). */
typedef struct {
        unsigned int pid;
        unsigned long long timeStamp;
        unsigned int smUtil, memUtil, encUtil, decUtil;
} proc_util_t;

/* A child that is a CUDA process of the CUDA driver simulator (libcuda.so.1
 * beside the NVML library) with a primary context on GPUs 0..gpus-1, so one
 * live slot on each; it says so on `ready` and lives until `hold` closes. */
static void cuda_child(const char *libcuda, unsigned gpus, int ready, int hold) {
        char c = 'f';
        void *cu = dlopen(libcuda, RTLD_NOW | RTLD_LOCAL);
        cu_init_fn init = cu ? (cu_init_fn) dlsym(cu, "cuInit") : NULL;
        cu_device_get_fn get = cu ? (cu_device_get_fn) dlsym(cu, "cuDeviceGet") : NULL;
        cu_primary_retain_fn retain = cu ? (cu_primary_retain_fn) dlsym(cu, "cuDevicePrimaryCtxRetain") : NULL;
        if (init && get && retain && init(0) == 0) {
                c = 'x';
                for (unsigned g = 0; g < gpus; g++) {
                        int d;
                        void *ctx;
                        if (get(&d, (int) g) != 0 || retain(&ctx, d) != 0)
                                c = 'f';
                }
        }
        if (write(ready, &c, 1) != 1)
                _exit(1);
        while (read(hold, &c, 1) > 0)
                ;
        _exit(0);
}

/* Rss of this process's mapping of the live region, KiB. */
static unsigned long live_rss_kib(void) {
        char line[512], first[128];
        unsigned long sum = 0, kib;
        bool in_live = false;
        FILE *f = fopen("/proc/self/smaps", "re");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "%127s", first) != 1)
                        continue;
                if (first[strlen(first) - 1] != ':') { /* a mapping: "start-end perms offset dev inode path" */
                        line[strcspn(line, "\n")] = 0;
                        size_t n = strlen(line);
                        in_live = n > 5 && strcmp(line + n - 5, ".live") == 0;
                } else if (in_live && sscanf(line, "Rss: %lu kB", &kib) == 1)
                        sum += kib;
        }
        fclose(f);
        return sum;
}

/* A poller of per-process utilisation (libmigkit-vgpu's watcher, DCGM-style
 * readers) pays no page fault per call for the live region's 1024 slots
 * (each call used to drop the whole 33 MB mapping, so the next one faulted a
 * page per slot in again: 5-120 ms a call under load), and the region still
 * leaves little in its RSS however many processes it reads about. */
static void test_live_region_polling(void **state) {
        enum { PROCS = 16, GPUS = 8, CALLS = 50 };
        char libcuda[600];
        const char *nvml = getenv("MIGKIT_NVML_LIB");
        pid_t pids[PROCS];
        int ready[2], hold[2];

        use_machine("dgx-a100");
        snprintf(libcuda, sizeof(libcuda), "%s", nvml ? nvml : "");
        char *slash = strrchr(libcuda, '/');
        if (!slash || (size_t) (slash - libcuda) + sizeof("/libcuda.so.1") > sizeof(libcuda))
                skip();
        snprintf(slash, sizeof(libcuda) - (size_t) (slash - libcuda), "/libcuda.so.1");
        if (access(libcuda, R_OK) != 0)
                skip(); /* built without the CUDA driver simulator */
        typedef nvmlReturn_t (*proc_util_fn)(nvmlDevice_t, proc_util_t *, unsigned *, unsigned long long);
        proc_util_fn proc_util = (proc_util_fn) dlsym(lib, "nvmlDeviceGetProcessUtilization");
        assert_non_null(proc_util);
        setenv("MIGKIT_SIM_UTIL_WINDOW_MS", "2000", 1);
        OK(p_nvmlInit_v2());

        assert_int_equal(pipe(ready), 0);
        assert_int_equal(pipe(hold), 0);
        for (unsigned i = 0; i < PROCS; i++) {
                pids[i] = fork();
                assert_true(pids[i] >= 0);
                if (pids[i] == 0) {
                        close(ready[0]);
                        close(hold[1]);
                        cuda_child(libcuda, GPUS, ready[1], hold[0]);
                }
        }
        close(ready[1]);
        close(hold[0]);
        unsigned ok = 0;
        char c;
        for (unsigned i = 0; i < PROCS && read(ready[0], &c, 1) == 1; i++)
                ok += c == 'x';
        close(ready[0]);

        nvmlDevice_t devs[GPUS];
        unsigned n = 0;
        for (unsigned g = 0; g < GPUS; g++) {
                nvmlProcessInfo_t infos[PROCS + 4];
                OK(p_nvmlDeviceGetHandleByIndex_v2(g, &devs[g]));
                n = PROCS + 4;
                OK(p_nvmlDeviceGetComputeRunningProcesses_v3(devs[g], &n, infos));
                if (n != PROCS)
                        break;
        }

        /* One GPU, as libmigkit-vgpu's watcher polls the GPU it runs on. */
        proc_util_t samples[PROCS + 4];
        unsigned ns = PROCS + 4;
        nvmlReturn_t r = proc_util(devs[0], samples, &ns, 0);
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        for (unsigned i = 0; r == NVML_SUCCESS && i < CALLS; i++) {
                ns = PROCS + 4;
                r = proc_util(devs[0], samples, &ns, 0);
        }
        getrusage(RUSAGE_SELF, &r1);
        long faults = r1.ru_minflt - r0.ru_minflt;

        /* Every GPU in turn, twice, as a reader of the whole machine: 128 slots. */
        unsigned long rss_max = 0;
        for (unsigned i = 0; r == NVML_SUCCESS && i < 2 * GPUS; i++) {
                ns = PROCS + 4;
                r = proc_util(devs[i % GPUS], samples, &ns, 0);
                unsigned long rss = live_rss_kib();
                rss_max = rss > rss_max ? rss : rss_max;
        }

        close(hold[1]);
        for (unsigned i = 0; i < PROCS; i++)
                waitpid(pids[i], NULL, 0);
        unsetenv("MIGKIT_SIM_UTIL_WINDOW_MS");
        OK(p_nvmlShutdown());
        print_message("%ld page faults in %d calls; the live region's RSS at most %lu KiB\n", faults, CALLS, rss_max);
        assert_int_equal(ok, PROCS);
        assert_int_equal(n, PROCS);
        EXPECT(NVML_SUCCESS, r);
        assert_int_equal(ns, PROCS);
        /* 0-3 in all here; under ASan its allocator's fresh pages add about 2 a call.
         * Dropping the whole region after each call cost about 500 a call. */
        if (faults >= 10 * CALLS)
                fail_msg("%d calls of nvmlDeviceGetProcessUtilization on a GPU with %d CUDA processes took %ld page "
                         "faults",
                         CALLS, PROCS, faults);
        /* The rings of the 128 slots, all mapped, are over 4 MiB; the 16 the
         * library keeps, with the pages the kernel maps around each fault, at
         * most about 2 MiB (1.6-1.8 MiB measured). */
        if (rss_max > 3072)
                fail_msg("reading the utilisation of %d CUDA processes on each of %d GPUs left up to %lu KiB of the "
                         "live region in the caller's RSS",
                         PROCS, GPUS, rss_max);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_init_refcount),
                cmocka_unit_test(test_system_and_identity),
                cmocka_unit_test(test_mig_mode_ampere),
                cmocka_unit_test(test_mig_mode_hopper),
                cmocka_unit_test(test_non_mig_gpu),
                cmocka_unit_test(test_brand),
                cmocka_unit_test(test_host_tree),
                cmocka_unit_test(test_profiles_and_placements),
                cmocka_unit_test(test_profile_names_all_models),
                cmocka_unit_test(test_gpu_instances),
                cmocka_unit_test(test_compute_instances),
                cmocka_unit_test(test_mig_devices),
                cmocka_unit_test(test_events),
                cmocka_unit_test(test_topology_raw),
                cmocka_unit_test(test_lost_gpu),
                cmocka_unit_test(test_faults_from_environment),
                cmocka_unit_test(test_faults_in_state_across_processes),
                cmocka_unit_test(test_crash_after),
                cmocka_unit_test(test_concurrent_creators),
                cmocka_unit_test(test_op_latency_threads),
                cmocka_unit_test(test_bad_state_and_machine),
                cmocka_unit_test(test_live_region_polling),
        };
        return cmocka_run_group_tests_name("sim", tests, load, unload);
}
