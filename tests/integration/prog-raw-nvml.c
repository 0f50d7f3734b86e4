/* prog-raw-nvml: a third-party NVML client, written the way a program built
 * against NVIDIA's nvml.h would be, but without that header: the types and
 * prototypes it needs are declared below from the NVML API reference (CUDA
 * 12.x nvml.h), and the library is loaded with dlopen() by its real exported
 * symbol names. It includes nothing from migkit (src/) or the simulator
 * (sim/), so it checks the simulator's ABI, not our own header.
 *
 * Library: $MIGKIT_NVML_LIB, else "libnvidia-ml.so.1" (the real soname).
 *
 * Subcommands (GPU is an index; ids are decimal):
 *   list                               one line per GPU
 *   profiles GPU [--ci]                GI profiles (enum 0..17) and placements;
 *                                      --ci adds CI profiles per GI profile,
 *                                      from an existing GI of that profile or a
 *                                      temporary one (MIG must be enabled)
 *   create GPU PROFILE_ID START [SIZE] GI with placement (SIZE defaults to the
 *                                      profile's placement size)
 *   create-auto GPU PROFILE_ID         GI, placement chosen by the driver
 *   create-ci GPU GI_ID CI_PROFILE_ID  CI in a GI
 *   destroy GPU GI_ID                  destroys the GI only (not its CIs)
 *   destroy-ci GPU GI_ID CI_ID
 *   gis GPU                            existing GIs
 *   cis GPU GI_ID                      existing CIs of a GI
 *   capacity GPU PROFILE_ID            remaining GI capacity of a profile
 *   set-mig GPU 0|1
 *   mig-devices GPU                    MIG device handles by index
 *   roundtrip GPU                      enable MIG if needed, GI+CI, find the MIG
 *                                      device, destroy both, print OK
 *
 * Exit status: 0 success, 1 library/setup failure, 2 usage, 3 an NVML call
 * failed ("error: NVML_ERROR_<NAME> (<code>) in <function>: <string>" on stderr).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- NVML declarations (from the NVML API reference) ------------------- */

typedef enum nvmlReturn_enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_ALREADY_INITIALIZED = 5,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_INSUFFICIENT_POWER = 8,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_IRQ_ISSUE = 11,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_CORRUPTED_INFOROM = 14,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_RESET_REQUIRED = 16,
        NVML_ERROR_OPERATING_SYSTEM = 17,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_MEMORY = 20,
        NVML_ERROR_NO_DATA = 21,
        NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
        NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
        NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_DEPRECATED = 26,
        NVML_ERROR_NOT_READY = 27,
        NVML_ERROR_GPU_NOT_FOUND = 28,
        NVML_ERROR_INVALID_STATE = 29,
        NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12      /* enums 0x0 .. 0x11 */
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9   /* 0x0 .. 0x8 (7_SLICE_NVL) */
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0

typedef struct nvmlPciInfo_st {
        char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
        unsigned int domain;
        unsigned int bus;
        unsigned int device;
        unsigned int pciDeviceId;
        unsigned int pciSubSystemId;
        char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlGpuInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
        unsigned int version;
        unsigned int id;
        unsigned int isP2pSupported;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int copyEngineCount;
        unsigned int decoderCount;
        unsigned int encoderCount;
        unsigned int jpegCount;
        unsigned int ofaCount;
        unsigned long long memorySizeMB;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;

/* nvml.h: #define NVML_STRUCT_VERSION(data, ver) (sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U)) */
#define nvmlGpuInstanceProfileInfo_v2 \
        ((unsigned int) (sizeof(nvmlGpuInstanceProfileInfo_v2_t) | (2u << 24U)))

typedef struct nvmlGpuInstanceInfo_st {
        nvmlDevice_t device;
        unsigned int id;
        unsigned int profileId;
        nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
        unsigned int version;
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

#define nvmlComputeInstanceProfileInfo_v2 \
        ((unsigned int) (sizeof(nvmlComputeInstanceProfileInfo_v2_t) | (2u << 24U)))

typedef struct nvmlComputeInstanceInfo_st {
        nvmlDevice_t device;
        nvmlGpuInstance_t gpuInstance;
        unsigned int id;
        unsigned int profileId;
        nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* Sizes on LP64, as the real library lays them out. */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152, "nvmlGpuInstanceProfileInfo_v2_t");
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "GI profile info v2 version");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136, "nvmlComputeInstanceProfileInfo_v2_t");
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "CI profile info v2 version");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "nvmlGpuInstanceInfo_t");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "nvmlComputeInstanceInfo_t");

/* The symbols, as exported by libnvidia-ml.so.1. */
static struct {
        nvmlReturn_t (*Init)(void);
        nvmlReturn_t (*Shutdown)(void);
        const char *(*ErrorString)(nvmlReturn_t);
        nvmlReturn_t (*DeviceGetCount)(unsigned int *);
        nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t *);
        nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char *, unsigned int);
        nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
        nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t *);
        nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int *, unsigned int *);
        nvmlReturn_t (*DeviceSetMigMode)(nvmlDevice_t, unsigned int, nvmlReturn_t *);
        nvmlReturn_t (*DeviceGetGpuInstanceProfileInfoV)(nvmlDevice_t, unsigned int,
                                                         nvmlGpuInstanceProfileInfo_v2_t *);
        nvmlReturn_t (*DeviceGetGpuInstancePossiblePlacements)(nvmlDevice_t, unsigned int,
                                                               nvmlGpuInstancePlacement_t *, unsigned int *);
        nvmlReturn_t (*DeviceGetGpuInstanceRemainingCapacity)(nvmlDevice_t, unsigned int, unsigned int *);
        nvmlReturn_t (*DeviceCreateGpuInstance)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *);
        nvmlReturn_t (*DeviceCreateGpuInstanceWithPlacement)(nvmlDevice_t, unsigned int,
                                                             const nvmlGpuInstancePlacement_t *,
                                                             nvmlGpuInstance_t *);
        nvmlReturn_t (*DeviceGetGpuInstances)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *, unsigned int *);
        nvmlReturn_t (*DeviceGetGpuInstanceById)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *);
        nvmlReturn_t (*GpuInstanceGetInfo)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *);
        nvmlReturn_t (*GpuInstanceDestroy)(nvmlGpuInstance_t);
        nvmlReturn_t (*GpuInstanceGetComputeInstanceProfileInfoV)(nvmlGpuInstance_t, unsigned int, unsigned int,
                                                                  nvmlComputeInstanceProfileInfo_v2_t *);
        nvmlReturn_t (*GpuInstanceGetComputeInstancePossiblePlacements)(nvmlGpuInstance_t, unsigned int,
                                                                        nvmlComputeInstancePlacement_t *,
                                                                        unsigned int *);
        nvmlReturn_t (*GpuInstanceCreateComputeInstance)(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *);
        nvmlReturn_t (*GpuInstanceGetComputeInstances)(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *,
                                                       unsigned int *);
        nvmlReturn_t (*GpuInstanceGetComputeInstanceById)(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *);
        nvmlReturn_t (*ComputeInstanceGetInfo)(nvmlComputeInstance_t, nvmlComputeInstanceInfo_t *);
        nvmlReturn_t (*ComputeInstanceDestroy)(nvmlComputeInstance_t);
        nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned int *);
        nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
        nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t, unsigned int *);
        nvmlReturn_t (*DeviceGetComputeInstanceId)(nvmlDevice_t, unsigned int *);
} nvml;

static const struct {
        const char *symbol;
        size_t offset;
} nvml_symbols[] = {
#define SYM(field, name) { name, offsetof(__typeof__(nvml), field) }
        SYM(Init, "nvmlInit_v2"),
        SYM(Shutdown, "nvmlShutdown"),
        SYM(ErrorString, "nvmlErrorString"),
        SYM(DeviceGetCount, "nvmlDeviceGetCount_v2"),
        SYM(DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2"),
        SYM(DeviceGetName, "nvmlDeviceGetName"),
        SYM(DeviceGetUUID, "nvmlDeviceGetUUID"),
        SYM(DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3"),
        SYM(DeviceGetMigMode, "nvmlDeviceGetMigMode"),
        SYM(DeviceSetMigMode, "nvmlDeviceSetMigMode"),
        SYM(DeviceGetGpuInstanceProfileInfoV, "nvmlDeviceGetGpuInstanceProfileInfoV"),
        SYM(DeviceGetGpuInstancePossiblePlacements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2"),
        SYM(DeviceGetGpuInstanceRemainingCapacity, "nvmlDeviceGetGpuInstanceRemainingCapacity"),
        SYM(DeviceCreateGpuInstance, "nvmlDeviceCreateGpuInstance"),
        SYM(DeviceCreateGpuInstanceWithPlacement, "nvmlDeviceCreateGpuInstanceWithPlacement"),
        SYM(DeviceGetGpuInstances, "nvmlDeviceGetGpuInstances"),
        SYM(DeviceGetGpuInstanceById, "nvmlDeviceGetGpuInstanceById"),
        SYM(GpuInstanceGetInfo, "nvmlGpuInstanceGetInfo"),
        SYM(GpuInstanceDestroy, "nvmlGpuInstanceDestroy"),
        SYM(GpuInstanceGetComputeInstanceProfileInfoV, "nvmlGpuInstanceGetComputeInstanceProfileInfoV"),
        SYM(GpuInstanceGetComputeInstancePossiblePlacements, "nvmlGpuInstanceGetComputeInstancePossiblePlacements"),
        SYM(GpuInstanceCreateComputeInstance, "nvmlGpuInstanceCreateComputeInstance"),
        SYM(GpuInstanceGetComputeInstances, "nvmlGpuInstanceGetComputeInstances"),
        SYM(GpuInstanceGetComputeInstanceById, "nvmlGpuInstanceGetComputeInstanceById"),
        SYM(ComputeInstanceGetInfo, "nvmlComputeInstanceGetInfo_v2"),
        SYM(ComputeInstanceDestroy, "nvmlComputeInstanceDestroy"),
        SYM(DeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount"),
        SYM(DeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex"),
        SYM(DeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId"),
        SYM(DeviceGetComputeInstanceId, "nvmlDeviceGetComputeInstanceId"),
#undef SYM
};

/* ---- helpers ------------------------------------------------------------ */

#define EXIT_SETUP 1
#define EXIT_USAGE 2
#define EXIT_NVML 3

/* Upper bounds this client accepts from the library (nvml.h gives none; the
 * largest real GPUs have 7 placements per profile and 7 CIs per GI). */
#define MAX_PLACEMENTS 64
#define MAX_INSTANCES 64

static const char *const return_names[] = {
        [NVML_SUCCESS] = "NVML_SUCCESS",
        [NVML_ERROR_UNINITIALIZED] = "NVML_ERROR_UNINITIALIZED",
        [NVML_ERROR_INVALID_ARGUMENT] = "NVML_ERROR_INVALID_ARGUMENT",
        [NVML_ERROR_NOT_SUPPORTED] = "NVML_ERROR_NOT_SUPPORTED",
        [NVML_ERROR_NO_PERMISSION] = "NVML_ERROR_NO_PERMISSION",
        [NVML_ERROR_ALREADY_INITIALIZED] = "NVML_ERROR_ALREADY_INITIALIZED",
        [NVML_ERROR_NOT_FOUND] = "NVML_ERROR_NOT_FOUND",
        [NVML_ERROR_INSUFFICIENT_SIZE] = "NVML_ERROR_INSUFFICIENT_SIZE",
        [NVML_ERROR_INSUFFICIENT_POWER] = "NVML_ERROR_INSUFFICIENT_POWER",
        [NVML_ERROR_DRIVER_NOT_LOADED] = "NVML_ERROR_DRIVER_NOT_LOADED",
        [NVML_ERROR_TIMEOUT] = "NVML_ERROR_TIMEOUT",
        [NVML_ERROR_IRQ_ISSUE] = "NVML_ERROR_IRQ_ISSUE",
        [NVML_ERROR_LIBRARY_NOT_FOUND] = "NVML_ERROR_LIBRARY_NOT_FOUND",
        [NVML_ERROR_FUNCTION_NOT_FOUND] = "NVML_ERROR_FUNCTION_NOT_FOUND",
        [NVML_ERROR_CORRUPTED_INFOROM] = "NVML_ERROR_CORRUPTED_INFOROM",
        [NVML_ERROR_GPU_IS_LOST] = "NVML_ERROR_GPU_IS_LOST",
        [NVML_ERROR_RESET_REQUIRED] = "NVML_ERROR_RESET_REQUIRED",
        [NVML_ERROR_OPERATING_SYSTEM] = "NVML_ERROR_OPERATING_SYSTEM",
        [NVML_ERROR_LIB_RM_VERSION_MISMATCH] = "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        [NVML_ERROR_IN_USE] = "NVML_ERROR_IN_USE",
        [NVML_ERROR_MEMORY] = "NVML_ERROR_MEMORY",
        [NVML_ERROR_NO_DATA] = "NVML_ERROR_NO_DATA",
        [NVML_ERROR_VGPU_ECC_NOT_SUPPORTED] = "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        [NVML_ERROR_INSUFFICIENT_RESOURCES] = "NVML_ERROR_INSUFFICIENT_RESOURCES",
        [NVML_ERROR_FREQ_NOT_SUPPORTED] = "NVML_ERROR_FREQ_NOT_SUPPORTED",
        [NVML_ERROR_ARGUMENT_VERSION_MISMATCH] = "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        [NVML_ERROR_DEPRECATED] = "NVML_ERROR_DEPRECATED",
        [NVML_ERROR_NOT_READY] = "NVML_ERROR_NOT_READY",
        [NVML_ERROR_GPU_NOT_FOUND] = "NVML_ERROR_GPU_NOT_FOUND",
        [NVML_ERROR_INVALID_STATE] = "NVML_ERROR_INVALID_STATE",
};

static const char *return_name(nvmlReturn_t r) {
        if ((unsigned) r < sizeof(return_names) / sizeof(return_names[0]) && return_names[r])
                return return_names[r];
        if (r == NVML_ERROR_UNKNOWN)
                return "NVML_ERROR_UNKNOWN";
        return "NVML_ERROR_?";
}

/* Prints the failure of an NVML call; returns EXIT_NVML for `return fail(...)`. */
static int fail(const char *function, nvmlReturn_t r) {
        const char *s = nvml.ErrorString ? nvml.ErrorString(r) : NULL;
        fprintf(stderr, "error: %s (%d) in %s: %s\n", return_name(r), (int) r, function, s ? s : "?");
        return EXIT_NVML;
}

#define CALL(fn, ...)                                           \
        do {                                                    \
                nvmlReturn_t _r = nvml.fn(__VA_ARGS__);         \
                if (_r != NVML_SUCCESS)                         \
                        return fail("nvml" #fn, _r);            \
        } while (0)

static int usage(void) {
        fputs("usage: prog-raw-nvml list | profiles GPU [--ci] | create GPU PROFILE_ID START [SIZE] |\n"
              "       create-auto GPU PROFILE_ID | create-ci GPU GI_ID CI_PROFILE_ID | destroy GPU GI_ID |\n"
              "       destroy-ci GPU GI_ID CI_ID | gis GPU | cis GPU GI_ID | capacity GPU PROFILE_ID |\n"
              "       set-mig GPU 0|1 | mig-devices GPU | roundtrip GPU\n",
              stderr);
        return EXIT_USAGE;
}

/* Decimal unsigned int, the whole string, no sign, no overflow. */
static int parse_uint(const char *s, unsigned *ret) {
        char *end = NULL;
        unsigned long v;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno != 0 || !end || *end != '\0' || v > UINT_MAX)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

static int arg_uint(const char *what, const char *s, unsigned *ret) {
        if (parse_uint(s, ret) < 0) {
                fprintf(stderr, "error: invalid %s '%s'\n", what, s ? s : "");
                return -EINVAL;
        }
        return 0;
}

static int load_library(void **ret_handle) {
        const char *path = getenv("MIGKIT_NVML_LIB");
        void *h;

        if (!path || !*path)
                path = "libnvidia-ml.so.1";
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                fprintf(stderr, "error: cannot load '%s': %s\n", path, dlerror());
                return -ENOENT;
        }
        for (size_t i = 0; i < sizeof(nvml_symbols) / sizeof(nvml_symbols[0]); i++) {
                void *f = dlsym(h, nvml_symbols[i].symbol);
                if (!f) {
                        fprintf(stderr, "error: '%s' does not export %s\n", path, nvml_symbols[i].symbol);
                        dlclose(h);
                        return -ENOENT;
                }
                /* POSIX: a function pointer may be stored through a void *. */
                memcpy((char *) &nvml + nvml_symbols[i].offset, &f, sizeof(f));
        }
        *ret_handle = h;
        return 0;
}

static int device(unsigned index, nvmlDevice_t *ret) {
        CALL(DeviceGetHandleByIndex, index, ret);
        return 0;
}

static int gi_by_id(nvmlDevice_t dev, unsigned id, nvmlGpuInstance_t *ret) {
        CALL(DeviceGetGpuInstanceById, dev, id, ret);
        return 0;
}

static void print_placements(const nvmlGpuInstancePlacement_t *p, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                printf("%s%u:%u", i ? "," : "", p[i].start, p[i].size);
        if (n == 0)
                fputs("-", stdout);
}

/* Profile info v2 of GI enum `e`; NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT
 * mean "no such profile on this GPU". */
static nvmlReturn_t gi_profile(nvmlDevice_t dev, unsigned e, nvmlGpuInstanceProfileInfo_v2_t *info) {
        memset(info, 0, sizeof(*info));
        info->version = nvmlGpuInstanceProfileInfo_v2;
        return nvml.DeviceGetGpuInstanceProfileInfoV(dev, e, info);
}

static nvmlReturn_t ci_profile(nvmlGpuInstance_t gi, unsigned e, nvmlComputeInstanceProfileInfo_v2_t *info) {
        memset(info, 0, sizeof(*info));
        info->version = nvmlComputeInstanceProfileInfo_v2;
        return nvml.GpuInstanceGetComputeInstanceProfileInfoV(gi, e, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                               info);
}

static int gi_placements(nvmlDevice_t dev, unsigned profile_id, nvmlGpuInstancePlacement_t *p, unsigned *n) {
        unsigned count = 0;

        /* Size query first (NULL buffer), as nvml.h documents. */
        CALL(DeviceGetGpuInstancePossiblePlacements, dev, profile_id, NULL, &count);
        if (count > MAX_PLACEMENTS) {
                fprintf(stderr, "error: %u placements for profile %u, more than %d\n", count, profile_id,
                        MAX_PLACEMENTS);
                return EXIT_NVML;
        }
        *n = count;
        if (count == 0)
                return 0;
        CALL(DeviceGetGpuInstancePossiblePlacements, dev, profile_id, p, n);
        return 0;
}

/* ---- subcommands -------------------------------------------------------- */

static int cmd_list(void) {
        unsigned n;

        CALL(DeviceGetCount, &n);
        for (unsigned i = 0; i < n; i++) {
                nvmlDevice_t dev;
                char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
                nvmlPciInfo_t pci;
                unsigned cur, pend;
                nvmlReturn_t r;

                CALL(DeviceGetHandleByIndex, i, &dev);
                CALL(DeviceGetName, dev, name, sizeof(name));
                CALL(DeviceGetUUID, dev, uuid, sizeof(uuid));
                memset(&pci, 0, sizeof(pci));
                CALL(DeviceGetPciInfo, dev, &pci);
                r = nvml.DeviceGetMigMode(dev, &cur, &pend);
                printf("gpu %u name='%s' uuid=%s pci_device_id=0x%08X bus_id=%s", i, name, uuid, pci.pciDeviceId,
                       pci.busId);
                if (r == NVML_SUCCESS)
                        printf(" mig=%u/%u\n", cur, pend);
                else if (r == NVML_ERROR_NOT_SUPPORTED)
                        printf(" mig=unsupported\n");
                else
                        return fail("nvmlDeviceGetMigMode", r);
        }
        return 0;
}

/* Finds or creates a GI of `profile_id`; *created tells whether to destroy it. */
static int any_gi_of_profile(nvmlDevice_t dev, unsigned profile_id, nvmlGpuInstance_t *ret, int *created) {
        nvmlGpuInstance_t gis[MAX_INSTANCES];
        unsigned n = MAX_INSTANCES;
        nvmlReturn_t r;

        r = nvml.DeviceGetGpuInstances(dev, profile_id, gis, &n);
        if (r == NVML_SUCCESS && n > 0) {
                *ret = gis[0];
                *created = 0;
                return 0;
        }
        r = nvml.DeviceCreateGpuInstance(dev, profile_id, ret);
        if (r != NVML_SUCCESS) {
                printf("  ci-profiles unavailable: %s (%d)\n", return_name(r), (int) r);
                return 1;
        }
        *created = 1;
        return 0;
}

static int print_ci_profiles(nvmlDevice_t dev, unsigned gi_enum, unsigned profile_id) {
        nvmlGpuInstance_t gi;
        int created = 0, k;

        k = any_gi_of_profile(dev, profile_id, &gi, &created);
        if (k != 0)
                return k == 1 ? 0 : k;
        for (unsigned e = 0; e < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; e++) {
                nvmlComputeInstanceProfileInfo_v2_t ci;
                nvmlComputeInstancePlacement_t p[MAX_PLACEMENTS];
                unsigned n = 0;
                nvmlReturn_t r = ci_profile(gi, e, &ci);

                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS) {
                        k = fail("nvmlGpuInstanceGetComputeInstanceProfileInfoV", r);
                        goto out;
                }
                r = nvml.GpuInstanceGetComputeInstancePossiblePlacements(gi, ci.id, NULL, &n);
                if (r == NVML_SUCCESS && n <= MAX_PLACEMENTS && n > 0)
                        r = nvml.GpuInstanceGetComputeInstancePossiblePlacements(gi, ci.id, p, &n);
                printf("  ci gi_enum=%u enum=%u id=%u slices=%u count=%u sm=%u ce=%u dec=%u enc=%u jpeg=%u ofa=%u "
                       "name='%s' placements=",
                       gi_enum, e, ci.id, ci.sliceCount, ci.instanceCount, ci.multiprocessorCount,
                       ci.sharedCopyEngineCount, ci.sharedDecoderCount, ci.sharedEncoderCount, ci.sharedJpegCount,
                       ci.sharedOfaCount, ci.name);
                if (r != NVML_SUCCESS || n > MAX_PLACEMENTS) {
                        printf("%s\n", return_name(r));
                        continue;
                }
                for (unsigned i = 0; i < n; i++)
                        printf("%s%u:%u", i ? "," : "", p[i].start, p[i].size);
                puts(n ? "" : "-");
        }
        k = 0;
out:
        if (created) {
                nvmlReturn_t r = nvml.GpuInstanceDestroy(gi);
                if (r != NVML_SUCCESS && k == 0)
                        k = fail("nvmlGpuInstanceDestroy", r);
        }
        return k;
}

static int cmd_profiles(unsigned index, int with_ci) {
        nvmlDevice_t dev;
        int k;

        if ((k = device(index, &dev)))
                return k;
        for (unsigned e = 0; e < NVML_GPU_INSTANCE_PROFILE_COUNT; e++) {
                nvmlGpuInstanceProfileInfo_v2_t info;
                nvmlGpuInstancePlacement_t p[MAX_PLACEMENTS];
                unsigned n = 0;
                nvmlReturn_t r = gi_profile(dev, e, &info);

                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return fail("nvmlDeviceGetGpuInstanceProfileInfoV", r);
                if ((k = gi_placements(dev, info.id, p, &n)))
                        return k;
                printf("gi enum=%u id=%u slices=%u count=%u mem=%llu sm=%u ce=%u dec=%u enc=%u jpeg=%u ofa=%u p2p=%u "
                       "name='%s' placements=",
                       e, info.id, info.sliceCount, info.instanceCount, info.memorySizeMB, info.multiprocessorCount,
                       info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount,
                       info.isP2pSupported, info.name);
                print_placements(p, n);
                putchar('\n');
                if (with_ci && (k = print_ci_profiles(dev, e, info.id)))
                        return k;
        }
        return 0;
}

static int print_gi(nvmlGpuInstance_t gi) {
        nvmlGpuInstanceInfo_t info;

        memset(&info, 0, sizeof(info));
        CALL(GpuInstanceGetInfo, gi, &info);
        printf("gi id=%u profile=%u placement=%u:%u\n", info.id, info.profileId, info.placement.start,
               info.placement.size);
        return 0;
}

static int print_ci(nvmlComputeInstance_t ci) {
        nvmlComputeInstanceInfo_t info;
        nvmlGpuInstanceInfo_t gi;

        memset(&info, 0, sizeof(info));
        memset(&gi, 0, sizeof(gi));
        CALL(ComputeInstanceGetInfo, ci, &info);
        CALL(GpuInstanceGetInfo, info.gpuInstance, &gi);
        printf("ci id=%u gi=%u profile=%u placement=%u:%u\n", info.id, gi.id, info.profileId, info.placement.start,
               info.placement.size);
        return 0;
}

static int cmd_create(unsigned index, unsigned profile_id, unsigned start, const char *size_arg) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        nvmlGpuInstancePlacement_t placement = { .start = start };
        int k;

        if ((k = device(index, &dev)))
                return k;
        if (size_arg) {
                if (arg_uint("SIZE", size_arg, &placement.size) < 0)
                        return EXIT_USAGE;
        } else {
                /* The profile's placement size: every possible placement of a
                 * profile has the same size. The start is not checked here:
                 * the library must refuse a bad one. */
                nvmlGpuInstancePlacement_t p[MAX_PLACEMENTS];
                unsigned n = 0;

                if ((k = gi_placements(dev, profile_id, p, &n)))
                        return k;
                if (n == 0) {
                        fprintf(stderr, "error: profile %u has no placements, give SIZE\n", profile_id);
                        return EXIT_USAGE;
                }
                placement.size = p[0].size;
        }
        CALL(DeviceCreateGpuInstanceWithPlacement, dev, profile_id, &placement, &gi);
        return print_gi(gi);
}

static int cmd_create_auto(unsigned index, unsigned profile_id) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        int k;

        if ((k = device(index, &dev)))
                return k;
        CALL(DeviceCreateGpuInstance, dev, profile_id, &gi);
        return print_gi(gi);
}

static int cmd_create_ci(unsigned index, unsigned gi_id, unsigned ci_profile_id) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        nvmlComputeInstance_t ci;
        int k;

        if ((k = device(index, &dev)) || (k = gi_by_id(dev, gi_id, &gi)))
                return k;
        CALL(GpuInstanceCreateComputeInstance, gi, ci_profile_id, &ci);
        return print_ci(ci);
}

static int cmd_destroy(unsigned index, unsigned gi_id) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        int k;

        if ((k = device(index, &dev)) || (k = gi_by_id(dev, gi_id, &gi)))
                return k;
        CALL(GpuInstanceDestroy, gi);
        printf("destroyed gi %u\n", gi_id);
        return 0;
}

static int cmd_destroy_ci(unsigned index, unsigned gi_id, unsigned ci_id) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        nvmlComputeInstance_t ci;
        int k;

        if ((k = device(index, &dev)) || (k = gi_by_id(dev, gi_id, &gi)))
                return k;
        CALL(GpuInstanceGetComputeInstanceById, gi, ci_id, &ci);
        CALL(ComputeInstanceDestroy, ci);
        printf("destroyed ci %u in gi %u\n", ci_id, gi_id);
        return 0;
}

static int cmd_gis(unsigned index) {
        nvmlDevice_t dev;
        int k;

        if ((k = device(index, &dev)))
                return k;
        for (unsigned e = 0; e < NVML_GPU_INSTANCE_PROFILE_COUNT; e++) {
                nvmlGpuInstanceProfileInfo_v2_t info;
                nvmlGpuInstance_t gis[MAX_INSTANCES];
                unsigned n = MAX_INSTANCES;
                nvmlReturn_t r = gi_profile(dev, e, &info);

                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return fail("nvmlDeviceGetGpuInstanceProfileInfoV", r);
                CALL(DeviceGetGpuInstances, dev, info.id, gis, &n);
                for (unsigned i = 0; i < n && i < MAX_INSTANCES; i++)
                        if ((k = print_gi(gis[i])))
                                return k;
        }
        return 0;
}

static int cmd_cis(unsigned index, unsigned gi_id) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        int k;

        if ((k = device(index, &dev)) || (k = gi_by_id(dev, gi_id, &gi)))
                return k;
        for (unsigned e = 0; e < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; e++) {
                nvmlComputeInstanceProfileInfo_v2_t info;
                nvmlComputeInstance_t cis[MAX_INSTANCES];
                unsigned n = MAX_INSTANCES;
                nvmlReturn_t r = ci_profile(gi, e, &info);

                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return fail("nvmlGpuInstanceGetComputeInstanceProfileInfoV", r);
                CALL(GpuInstanceGetComputeInstances, gi, info.id, cis, &n);
                for (unsigned i = 0; i < n && i < MAX_INSTANCES; i++)
                        if ((k = print_ci(cis[i])))
                                return k;
        }
        return 0;
}

static int cmd_capacity(unsigned index, unsigned profile_id) {
        nvmlDevice_t dev;
        unsigned count;
        int k;

        if ((k = device(index, &dev)))
                return k;
        CALL(DeviceGetGpuInstanceRemainingCapacity, dev, profile_id, &count);
        printf("capacity profile=%u count=%u\n", profile_id, count);
        return 0;
}

static int cmd_set_mig(unsigned index, unsigned mode) {
        nvmlDevice_t dev;
        nvmlReturn_t activation = NVML_SUCCESS;
        unsigned cur, pend;
        int k;

        if ((k = device(index, &dev)))
                return k;
        CALL(DeviceSetMigMode, dev, mode, &activation);
        CALL(DeviceGetMigMode, dev, &cur, &pend);
        printf("mig set=%u activation=%s (%d) current=%u pending=%u\n", mode, return_name(activation),
               (int) activation, cur, pend);
        return 0;
}

static int cmd_mig_devices(unsigned index) {
        nvmlDevice_t dev;
        unsigned max;
        int k;

        if ((k = device(index, &dev)))
                return k;
        CALL(DeviceGetMaxMigDeviceCount, dev, &max);
        for (unsigned i = 0; i < max; i++) {
                nvmlDevice_t mig;
                char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
                unsigned gi, ci;
                nvmlReturn_t r = nvml.DeviceGetMigDeviceHandleByIndex(dev, i, &mig);

                /* Slots can be empty (nvml.h: NOT_FOUND for an index without a device). */
                if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return fail("nvmlDeviceGetMigDeviceHandleByIndex", r);
                CALL(DeviceGetUUID, mig, uuid, sizeof(uuid));
                CALL(DeviceGetName, mig, name, sizeof(name));
                CALL(DeviceGetGpuInstanceId, mig, &gi);
                CALL(DeviceGetComputeInstanceId, mig, &ci);
                printf("mig index=%u uuid=%s gi=%u ci=%u name='%s'\n", i, uuid, gi, ci, name);
        }
        return 0;
}

static int find_mig_device(nvmlDevice_t dev, unsigned gi_id, unsigned ci_id, char *uuid, size_t size) {
        unsigned max;

        CALL(DeviceGetMaxMigDeviceCount, dev, &max);
        for (unsigned i = 0; i < max; i++) {
                nvmlDevice_t mig;
                unsigned gi, ci;

                if (nvml.DeviceGetMigDeviceHandleByIndex(dev, i, &mig) != NVML_SUCCESS)
                        continue;
                CALL(DeviceGetGpuInstanceId, mig, &gi);
                CALL(DeviceGetComputeInstanceId, mig, &ci);
                if (gi == gi_id && ci == ci_id) {
                        CALL(DeviceGetUUID, mig, uuid, (unsigned) size);
                        return 0;
                }
        }
        fprintf(stderr, "error: no MIG device for GI %u CI %u\n", gi_id, ci_id);
        return EXIT_NVML;
}

static int cmd_roundtrip(unsigned index) {
        nvmlDevice_t dev;
        nvmlGpuInstance_t gi;
        nvmlComputeInstance_t ci;
        nvmlGpuInstanceInfo_t gi_info;
        nvmlComputeInstanceInfo_t ci_info;
        nvmlGpuInstanceProfileInfo_v2_t gp;
        nvmlComputeInstanceProfileInfo_v2_t cp;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        unsigned cur, pend, ci_enum;
        nvmlReturn_t r;
        int k;

        if ((k = device(index, &dev)))
                return k;
        CALL(DeviceGetMigMode, dev, &cur, &pend);
        if (cur != NVML_DEVICE_MIG_ENABLE) {
                nvmlReturn_t activation = NVML_SUCCESS;

                CALL(DeviceSetMigMode, dev, NVML_DEVICE_MIG_ENABLE, &activation);
                CALL(DeviceGetMigMode, dev, &cur, &pend);
                if (cur != NVML_DEVICE_MIG_ENABLE) {
                        fprintf(stderr, "error: MIG mode pending (activation %s), a GPU reset is needed\n",
                                return_name(activation));
                        return EXIT_NVML;
                }
        }
        /* The smallest standard profile: 1 slice (enum 0). */
        r = gi_profile(dev, 0, &gp);
        if (r != NVML_SUCCESS)
                return fail("nvmlDeviceGetGpuInstanceProfileInfoV", r);
        CALL(DeviceCreateGpuInstance, dev, gp.id, &gi);
        memset(&gi_info, 0, sizeof(gi_info));
        CALL(GpuInstanceGetInfo, gi, &gi_info);
        /* The CI profile that spans the whole GI. */
        for (ci_enum = 0; ci_enum < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ci_enum++)
                if (ci_profile(gi, ci_enum, &cp) == NVML_SUCCESS && cp.sliceCount == gp.sliceCount)
                        break;
        if (ci_enum == NVML_COMPUTE_INSTANCE_PROFILE_COUNT) {
                fprintf(stderr, "error: no CI profile of %u slices in GI %u\n", gp.sliceCount, gi_info.id);
                return EXIT_NVML;
        }
        CALL(GpuInstanceCreateComputeInstance, gi, cp.id, &ci);
        memset(&ci_info, 0, sizeof(ci_info));
        CALL(ComputeInstanceGetInfo, ci, &ci_info);
        if ((k = find_mig_device(dev, gi_info.id, ci_info.id, uuid, sizeof(uuid))))
                return k;
        if (strncmp(uuid, "MIG-", 4) != 0) {
                fprintf(stderr, "error: MIG device UUID '%s' does not start with MIG-\n", uuid);
                return EXIT_NVML;
        }
        printf("roundtrip gi=%u ci=%u placement=%u:%u uuid=%s\n", gi_info.id, ci_info.id, gi_info.placement.start,
               gi_info.placement.size, uuid);
        CALL(ComputeInstanceDestroy, ci);
        CALL(GpuInstanceDestroy, gi);
        puts("OK");
        return 0;
}

/* ---- main ----------------------------------------------------------------- */

static int run(int argc, char **argv) {
        const char *cmd = argv[1];
        unsigned a = 0, b = 0, c = 0;

#define NEED(n)                                 \
        do {                                    \
                if (argc < (n) + 2)             \
                        return usage();         \
        } while (0)
#define UINT(what, i, var)                                      \
        do {                                                    \
                if (arg_uint(what, argv[i], &(var)) < 0)        \
                        return EXIT_USAGE;                      \
        } while (0)

        if (strcmp(cmd, "list") == 0)
                return cmd_list();
        NEED(1);
        UINT("GPU", 2, a);
        if (strcmp(cmd, "profiles") == 0) {
                int with_ci = argc > 3 && strcmp(argv[3], "--ci") == 0;
                if (argc > 3 + with_ci)
                        return usage();
                return cmd_profiles(a, with_ci);
        }
        if (strcmp(cmd, "gis") == 0)
                return cmd_gis(a);
        if (strcmp(cmd, "mig-devices") == 0)
                return cmd_mig_devices(a);
        if (strcmp(cmd, "roundtrip") == 0)
                return cmd_roundtrip(a);
        NEED(2);
        if (strcmp(cmd, "set-mig") == 0) {
                UINT("mode", 3, b);
                if (b > 1)
                        return usage();
                return cmd_set_mig(a, b);
        }
        UINT("id", 3, b);
        if (strcmp(cmd, "create-auto") == 0)
                return cmd_create_auto(a, b);
        if (strcmp(cmd, "destroy") == 0)
                return cmd_destroy(a, b);
        if (strcmp(cmd, "cis") == 0)
                return cmd_cis(a, b);
        if (strcmp(cmd, "capacity") == 0)
                return cmd_capacity(a, b);
        NEED(3);
        UINT("id", 4, c);
        if (strcmp(cmd, "create") == 0)
                return cmd_create(a, b, c, argc > 5 ? argv[5] : NULL);
        if (strcmp(cmd, "create-ci") == 0)
                return cmd_create_ci(a, b, c);
        if (strcmp(cmd, "destroy-ci") == 0)
                return cmd_destroy_ci(a, b, c);
        return usage();
#undef NEED
#undef UINT
}

int main(int argc, char **argv) {
        void *lib = NULL;
        nvmlReturn_t r;
        int k;

        if (argc < 2)
                return usage();
        /* The library stays loaded until exit (no dlclose()): nothing is
         * gained, and a leak checker would then report whatever the library
         * keeps after nvmlShutdown() as lost. */
        if (load_library(&lib) < 0)
                return EXIT_SETUP;
        r = nvml.Init();
        if (r != NVML_SUCCESS) {
                fail("nvmlInit_v2", r);
                return EXIT_SETUP;
        }
        k = run(argc, argv);
        fflush(stdout);
        r = nvml.Shutdown();
        if (r != NVML_SUCCESS && k == 0)
                k = fail("nvmlShutdown", r);
        return k;
}
