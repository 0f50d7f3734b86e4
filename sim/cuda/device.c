/* CUDA driver simulator: initialisation, devices, contexts, error names. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <strings.h>

#include "cuda/internal.h"
#include "lib/mig.h"
#include "lib/state.h"

pthread_mutex_t cu_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* recursive: destroy paths synchronise */
bool cu_initialized;
struct cu_dev cu_devs[CUSIM_MAX_DEVICES];
int cu_ndevs;
struct sim_live *cu_live;
uint64_t cu_self;
int cu_trace;
uint64_t cu_wave_ns, cu_queue_ahead_ns;
static CUresult init_result = CUDA_SUCCESS;
static bool forked_after_init;
static unsigned long long next_ctx_id = 1;

static __thread struct cu_ctx *ctx_stack[CUSIM_CTX_STACK];
static __thread int ctx_depth;

void cu_log(const char *fmt, ...) {
        va_list ap;

        if (!cu_trace)
                return;
        va_start(ap, fmt);
        fputs("cuda-sim: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

uint64_t cu_env_u64(const char *name, uint64_t def) {
        const char *e = getenv(name);
        uint64_t v;

        if (!e || !*e || sim_parse_u64(e, false, &v) < 0)
                return def;
        return v;
}

/* Figures the catalogue does not hold (public spec sheets, boost clocks). */
static const struct {
        const char *key;
        unsigned sms;
        int clock_mhz, mem_clock_mhz, bus_width, l2_mib;
} model_extra[] = {
        { "a30-24gb", 56, 1440, 1215, 3072, 24 },   { "a100-40gb", 108, 1410, 1215, 5120, 40 },
        { "a100-80gb", 108, 1410, 1593, 5120, 40 }, { "h100-80gb", 132, 1980, 2619, 5120, 50 },
        { "h100-nvl", 132, 1785, 2619, 6144, 50 },  { "h200-141gb", 132, 1980, 3201, 6144, 50 },
        { "gh200-144gb", 132, 1980, 2619, 6144, 60 }, { "b200", 148, 1965, 4000, 8192, 126 },
        { "t4", 40, 1590, 5001, 256, 4 },
};

static void parse_uuid(const char *s, CUuuid *ret) {
        unsigned n = 0;
        int hi = -1;

        memset(ret, 0, sizeof(*ret));
        const char *p = strchr(s, '-'); /* after "GPU" / "MIG" */
        for (p = p ? p + 1 : s; *p && n < 16; p++) {
                int v;
                if (*p >= '0' && *p <= '9')
                        v = *p - '0';
                else if (*p >= 'a' && *p <= 'f')
                        v = *p - 'a' + 10;
                else if (*p >= 'A' && *p <= 'F')
                        v = *p - 'A' + 10;
                else
                        continue;
                if (hi < 0)
                        hi = v;
                else {
                        ret->bytes[n++] = (char) (hi << 4 | v);
                        hi = -1;
                }
        }
}

static void fill_dev(struct cu_dev *d, struct sim_gpu *g, unsigned index, struct sim_gi *gi, struct sim_ci *ci) {
        const struct sim_model *m = g->model;

        memset(d, 0, sizeof(*d));
        d->gpu = index;
        d->model = m;
        d->bus = g->bus;
        parse_uuid(g->uuid, &d->gpu_uuid);
        d->sms = 0;
        d->clock_khz = 1410000;
        d->mem_clock_khz = 1215000;
        d->bus_width = 5120;
        d->l2_bytes = 40 << 20;
        for (size_t i = 0; i < ELEMENTSOF(model_extra); i++)
                if (streq(model_extra[i].key, m->key)) {
                        d->sms = model_extra[i].sms;
                        d->clock_khz = model_extra[i].clock_mhz * 1000;
                        d->mem_clock_khz = model_extra[i].mem_clock_mhz * 1000;
                        d->bus_width = model_extra[i].bus_width;
                        d->l2_bytes = model_extra[i].l2_mib << 20;
                }
        if (d->sms == 0)
                d->sms = 108;
        if (gi && ci) {
                const struct sim_gi_profile *p = sim_gi_profile_by_enum(m, gi->profile);
                char profile[64];
                d->mig = true;
                d->gi = gi->id;
                d->ci = ci->id;
                d->total_bytes = (p ? p->memory_mib : m->memory_mib) * 1024ULL * 1024ULL;
                d->sms = p && p->slices ? p->sms * ci->size / p->slices : d->sms;
                if (p)
                        sim_profile_name(m, p, ci->size, profile, sizeof(profile));
                else
                        snprintf(profile, sizeof(profile), "?");
                snprintf(d->name, sizeof(d->name), "%s MIG %s", m->name, profile);
                parse_uuid(ci->uuid, &d->uuid);
                if (p && m->memory_units)
                        d->l2_bytes = (int) ((uint64_t) d->l2_bytes * p->units / m->memory_units);
        } else {
                d->gi = d->ci = SIM_ID_NONE;
                d->total_bytes = m->memory_mib * 1024ULL * 1024ULL;
                snprintf(d->name, sizeof(d->name), "%s", m->name);
                d->uuid = d->gpu_uuid;
        }
}

/* The devices CUDA enumerates without CUDA_VISIBLE_DEVICES: each GPU not in
 * MIG mode, and the MIG devices of each GPU in MIG mode, in GPU index order. */
struct candidate {
        unsigned gpu;
        struct sim_gi *gi;
        struct sim_ci *ci;
};

static size_t default_devices(struct sim_state *st, struct candidate *out, size_t max) {
        size_t n = 0;

        for (unsigned i = 0; i < st->n_gpus && n < max; i++) {
                struct sim_gpu *g = &st->gpus[i];
                if (g->lost)
                        continue;
                if (g->mig_current) {
                        unsigned k = sim_mig_device_count(g);
                        for (unsigned j = 0; j < k && n < max; j++) {
                                struct sim_gi *gi;
                                struct sim_ci *ci;
                                if (sim_mig_device_at(g, j, &gi, &ci))
                                        out[n++] = (struct candidate) { i, gi, ci };
                        }
                } else
                        out[n++] = (struct candidate) { i, NULL, NULL };
        }
        return n;
}

static bool uuid_prefix(const char *uuid, const char *token) {
        size_t n = strlen(token);
        return n >= 5 && strncasecmp(uuid, token, n) == 0;
}

/* One CUDA_VISIBLE_DEVICES token; false when it names nothing (the list stops there). */
static bool resolve_token(struct sim_state *st, const char *tok, const struct candidate *all, size_t n_all,
                          struct candidate *ret) {
        uint32_t idx;

        if (sim_parse_u32(tok, &idx) == 0) {
                if (idx >= n_all)
                        return false;
                *ret = all[idx];
                return true;
        }
        for (unsigned i = 0; i < st->n_gpus; i++) {
                struct sim_gpu *g = &st->gpus[i];
                if (g->lost)
                        continue;
                if (uuid_prefix(g->uuid, tok)) {
                        if (!g->mig_current) {
                                *ret = (struct candidate) { i, NULL, NULL };
                                return true;
                        }
                        if (sim_mig_device_count(g) > 0 && sim_mig_device_at(g, 0, &ret->gi, &ret->ci)) {
                                ret->gpu = i;
                                return true;
                        }
                        return false;
                }
                for (unsigned a = 0; a < g->n_gis; a++)
                        for (unsigned b = 0; b < g->gis[a].n_cis; b++) {
                                struct sim_ci *ci = &g->gis[a].cis[b];
                                char legacy[128];
                                snprintf(legacy, sizeof(legacy), "MIG-%s/%u/%u", g->uuid, g->gis[a].id, ci->id);
                                if (uuid_prefix(ci->uuid, tok) || strcasecmp(legacy, tok) == 0) {
                                        *ret = (struct candidate) { i, &g->gis[a], ci };
                                        return g->mig_current != 0;
                                }
                        }
        }
        return false;
}

static CUresult enumerate(void) {
        _cleanup_free_ char *path = sim_default_state_path();
        struct sim_session ss;
        struct candidate all[CUSIM_MAX_DEVICES], pick[CUSIM_MAX_DEVICES];
        size_t n_all, n_pick = 0;

        if (!path)
                return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_session_begin(&ss, path, false, true) < 0) {
                fprintf(stderr, "cuda-sim: %s\n", sim_error_get());
                return CUDA_ERROR_NO_DEVICE;
        }
        n_all = default_devices(ss.state, all, CUSIM_MAX_DEVICES);
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        if (!cvd) {
                memcpy(pick, all, n_all * sizeof(all[0]));
                n_pick = n_all;
        } else {
                _cleanup_free_ char *copy = strdup(cvd);
                char *save = NULL;
                if (!copy) {
                        sim_session_end(&ss);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                for (char *tok = strtok_r(copy, ",", &save); tok && n_pick < CUSIM_MAX_DEVICES;
                     tok = strtok_r(NULL, ",", &save)) {
                        while (*tok == ' ')
                                tok++;
                        size_t len = strlen(tok);
                        while (len > 0 && tok[len - 1] == ' ')
                                tok[--len] = 0;
                        struct candidate c;
                        if (!resolve_token(ss.state, tok, all, n_all, &c))
                                break;
                        bool dup = false;
                        for (size_t k = 0; k < n_pick; k++)
                                dup |= pick[k].gpu == c.gpu && pick[k].ci == c.ci && pick[k].gi == c.gi;
                        if (dup)
                                break;
                        pick[n_pick++] = c;
                }
        }
        for (size_t i = 0; i < n_pick; i++) {
                struct sim_gpu *g = &ss.state->gpus[pick[i].gpu];
                struct cu_dev *d = &cu_devs[i];
                fill_dev(d, g, pick[i].gpu, pick[i].gi, pick[i].ci);
                d->static_bytes = sim_used_mib(g, d->mig ? d->gi : SIM_ID_NONE) * 1024ULL * 1024ULL;
                d->mem = sim_live_device(cu_live, sim_live_mem_key(d->gpu, d->gi));
                d->comp = sim_live_device(cu_live, sim_live_key(d->gpu, d->gi, d->ci));
                d->primary_flags = 0;
        }
        cu_ndevs = (int) n_pick;
        sim_session_end(&ss);
        for (int i = 0; i < cu_ndevs; i++)
                if (!cu_devs[i].mem || !cu_devs[i].comp) {
                        fprintf(stderr, "cuda-sim: live region full\n");
                        return CUDA_ERROR_UNKNOWN;
                }
        return CUDA_SUCCESS;
}

static void release_slots(void) {
        if (forked_after_init || !cu_live)
                return;
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].slot)
                        sim_live_release(cu_live, cu_devs[i].slot, cu_self);
}

static void atfork_child(void) {
        /* As the real driver: a child of a process that initialised CUDA cannot use it. */
        if (cu_initialized)
                forked_after_init = true;
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&cu_lock, &a);
        pthread_mutexattr_destroy(&a);
}

CU_EXPORT CUresult cuInit(unsigned int Flags) {
        static bool once;

        if (Flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        if (forked_after_init) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_NOT_INITIALIZED;
        }
        if (!once) {
                once = true;
                cu_trace = getenv("MIGKIT_SIM_CUDA_TRACE") && *getenv("MIGKIT_SIM_CUDA_TRACE") != '0';
                cu_wave_ns = cu_env_u64("MIGKIT_SIM_KERNEL_NS", 10000);
                cu_queue_ahead_ns = cu_env_u64("MIGKIT_SIM_QUEUE_AHEAD_MS", 50) * 1000000ULL;
                _cleanup_free_ char *path = sim_default_state_path();
                cu_self = sim_live_self();
                if (!path)
                        init_result = CUDA_ERROR_OUT_OF_MEMORY;
                else if (sim_live_open(path, &cu_live) < 0) {
                        fprintf(stderr, "cuda-sim: %s\n", sim_error_get());
                        init_result = CUDA_ERROR_NO_DEVICE;
                } else
                        init_result = enumerate();
                if (init_result == CUDA_SUCCESS) {
                        cu_initialized = true;
                        atexit(release_slots);
                        pthread_atfork(NULL, NULL, atfork_child);
                }
        }
        CUresult r = init_result;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CUresult cu_check_init(void) {
        if (forked_after_init)
                return CUDA_ERROR_NOT_INITIALIZED;
        return cu_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

#define CHECK_INIT()                               \
        do {                                       \
                CUresult _r = cu_check_init();     \
                if (_r != CUDA_SUCCESS)            \
                        return _r;                 \
        } while (0)

CU_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
        if (!driverVersion)
                return CUDA_ERROR_INVALID_VALUE;
        *driverVersion = (int) cu_env_u64("MIGKIT_SIM_CUDA_VERSION", CUSIM_DRIVER_VERSION);
        return CUDA_SUCCESS;
}

CUresult cu_dev_get(CUdevice d, struct cu_dev **ret) {
        CHECK_INIT();
        if (d < 0 || d >= cu_ndevs)
                return CUDA_ERROR_INVALID_DEVICE;
        *ret = &cu_devs[d];
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetCount(int *count) {
        CHECK_INIT();
        if (!count)
                return CUDA_ERROR_INVALID_VALUE;
        *count = cu_ndevs;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
        CHECK_INIT();
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        if (ordinal < 0 || ordinal >= cu_ndevs)
                return CUDA_ERROR_INVALID_DEVICE;
        *device = ordinal;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!name || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(name, (size_t) len, "%s", d->name);
        return CUDA_SUCCESS;
}

static CUresult dev_uuid(CUuuid *uuid, CUdevice dev, bool gpu) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!uuid)
                return CUDA_ERROR_INVALID_VALUE;
        *uuid = gpu ? d->gpu_uuid : d->uuid;
        return CUDA_SUCCESS;
}

/* The first version gives the GPU's UUID on MIG devices too. */
CU_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
        return dev_uuid(uuid, dev, true);
}

CU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
        return dev_uuid(uuid, dev, false);
}

CU_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev) {
        (void) luid;
        (void) deviceNodeMask;
        (void) dev;
        return CUDA_ERROR_NOT_SUPPORTED; /* Windows only */
}

CU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!bytes)
                return CUDA_ERROR_INVALID_VALUE;
        *bytes = d->total_bytes;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!major || !minor)
                return CUDA_ERROR_INVALID_VALUE;
        *major = d->model->cc_major;
        *minor = d->model->cc_minor;
        return CUDA_SUCCESS;
}

static int attribute(const struct cu_dev *d, CUdevice_attribute a, bool *ok) {
        int major = d->model->cc_major;
        *ok = true;
        switch ((int) a) {
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
        case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
        case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
        case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return d->clock_khz;
        case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
        case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return (int) d->sms;
        case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
        case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
        case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: return 16384;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: return 16384;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
        case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
        case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
        case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
        case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int) d->bus;
        case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
        case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return d->mem_clock_khz;
        case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return d->bus_width;
        case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return d->l2_bytes;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return major >= 9 || major == 8 ? 2048 : 1024;
        case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
        case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return major;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return d->model->cc_minor;
        case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return major >= 9 ? 233472 : 167936;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
        case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
        case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
        case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
        case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
        case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
        case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return major >= 9 ? 232448 : 166912;
        case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
        case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return major >= 9 ? 32 : 32;
        case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return d->l2_bytes / 4 * 3;
        case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
        case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return major >= 9;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
        case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return major >= 9 ? 4 : 1;
        case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: return major >= 9;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 1;
        case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return 0;
        case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
        case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: return (int) d->model->pci_device_id;
        case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: return (int) d->model->pci_subsystem_id;
        default:
                if (a > 0 && a < CU_DEVICE_ATTRIBUTE_MAX)
                        return 0; /* known attribute the simulator does not model: 0 (unsupported) */
                *ok = false;
                return 0;
        }
}

CU_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
        struct cu_dev *d;
        bool ok;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        int v = attribute(d, attrib, &ok);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        *pi = v;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!prop)
                return CUDA_ERROR_INVALID_VALUE;
        *prop = (CUdevprop) {
                .maxThreadsPerBlock = 1024, .maxThreadsDim = { 1024, 1024, 64 },
                .maxGridSize = { 2147483647, 65535, 65535 }, .sharedMemPerBlock = 49152,
                .totalConstantMemory = 65536, .SIMDWidth = 32, .memPitch = 2147483647,
                .regsPerBlock = 65536, .clockRate = d->clock_khz, .textureAlign = 512,
        };
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pciBusId || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(pciBusId, (size_t) len, "%08X:%02X:%02X.0", 0u, d->bus, 0u);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
        unsigned long part[4];
        unsigned bus;
        const char *p;
        char *end;
        CHECK_INIT();
        if (!dev || !pciBusId)
                return CUDA_ERROR_INVALID_VALUE;
        /* domain:bus:device.function, each hexadecimal */
        p = pciBusId;
        for (int k = 0; k < 4; k++) {
                errno = 0;
                part[k] = strtoul(p, &end, 16);
                if (errno || end == p || *end != (k < 2 ? ':' : k == 2 ? '.' : '\0'))
                        return CUDA_ERROR_INVALID_VALUE;
                p = end + (k < 3);
        }
        bus = (unsigned) part[1];
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].bus == bus) {
                        *dev = i;
                        return CUDA_SUCCESS;
                }
        return CUDA_ERROR_INVALID_DEVICE;
}

CU_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
        struct cu_dev *a, *b;
        CUresult r = cu_dev_get(dev, &a);
        if (r == CUDA_SUCCESS)
                r = cu_dev_get(peerDev, &b);
        if (r != CUDA_SUCCESS)
                return r;
        if (!canAccessPeer)
                return CUDA_ERROR_INVALID_VALUE;
        *canAccessPeer = dev != peerDev && !a->mig && !b->mig;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
        int can;
        CUresult r = cuDeviceCanAccessPeer(&can, src, dst);
        if (r != CUDA_SUCCESS)
                return r;
        if (!value)
                return CUDA_ERROR_INVALID_VALUE;
        *value = attrib == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : can;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
                                                      unsigned numChannels, CUdevice dev) {
        struct cu_dev *d;
        (void) format;
        (void) numChannels;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!maxWidthInElements)
                return CUDA_ERROR_INVALID_VALUE;
        *maxWidthInElements = 1u << 27;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        (void) type;
        *pi = 0; /* no execution affinity type is supported */
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type) {
        (void) device;
        (void) resource;
        (void) type;
        return CUDA_ERROR_NOT_SUPPORTED;
}

CU_EXPORT CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                             CUflushGPUDirectRDMAWritesScope scope) {
        (void) target;
        (void) scope;
        return CUDA_SUCCESS;
}

/* ---- this process's slot in the live region ---- */

struct sim_live_slot *cu_slot(struct cu_dev *d) {
        if (!d->slot) {
                d->slot = sim_live_claim(cu_live, cu_self, d->gpu, d->gi, d->ci);
                if (!d->slot)
                        cu_log("no free slot in the live region: this process is not accounted");
        }
        return d->slot;
}

uint64_t cu_dev_used(struct cu_dev *d) {
        return sim_live_used(cu_live, d->gpu, d->gi, false) + d->static_bytes;
}

static void refresh_static(struct cu_dev *d) {
        _cleanup_free_ char *path = sim_default_state_path();
        struct sim_session ss;

        if (!path || sim_session_begin(&ss, path, false, true) < 0)
                return;
        if (d->gpu < ss.state->n_gpus)
                d->static_bytes = sim_used_mib(&ss.state->gpus[d->gpu], d->mig ? d->gi : SIM_ID_NONE) * 1024ULL *
                                  1024ULL;
        sim_session_end(&ss);
}

static bool try_charge(struct cu_dev *d, uint64_t bytes) {
        uint64_t cap = d->total_bytes > d->static_bytes ? d->total_bytes - d->static_bytes : 0;
        uint64_t used = atomic_load(&d->mem->used_bytes);
        for (;;) {
                if (used > cap || bytes > cap - used)
                        return false;
                if (atomic_compare_exchange_weak(&d->mem->used_bytes, &used, used + bytes))
                        return true;
        }
}

CUresult cu_charge(struct cu_dev *d, uint64_t bytes) {
        struct sim_live_slot *s = cu_slot(d);

        if (bytes == 0)
                return CUDA_SUCCESS;
        if (!try_charge(d, bytes)) {
                /* Slow path: reap dead processes' charges, re-read NVML-level processes. */
                (void) sim_live_used(cu_live, d->gpu, d->gi, false);
                refresh_static(d);
                if (!try_charge(d, bytes))
                        return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (s)
                atomic_fetch_add(&s->used_bytes, bytes);
        return CUDA_SUCCESS;
}

void cu_uncharge(struct cu_dev *d, uint64_t bytes) {
        if (bytes == 0)
                return;
        if (d->slot)
                atomic_fetch_sub(&d->slot->used_bytes, bytes);
        atomic_fetch_sub(&d->mem->used_bytes, bytes);
}

/* ---- contexts ---- */

struct cu_ctx *cu_current(void) {
        return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

bool cu_ctx_valid(struct cu_ctx *ctx) {
        return ctx && ctx->magic == MAGIC_CTX;
}

CUresult cu_ctx_or_current(struct cu_ctx *ctx, struct cu_ctx **ret) {
        CHECK_INIT();
        if (!ctx)
                ctx = cu_current();
        if (!cu_ctx_valid(ctx))
                return CUDA_ERROR_INVALID_CONTEXT;
        *ret = ctx;
        return CUDA_SUCCESS;
}

extern void cu_ctx_free_resources(struct cu_ctx *ctx); /* memory.c */
extern struct cu_stream *cu_stream_new(struct cu_ctx *ctx, unsigned flags, int prio); /* exec.c */
extern void cu_ctx_free_streams(struct cu_ctx *ctx);                                   /* exec.c */

static uint64_t ctx_overhead(void) {
        return cu_env_u64("MIGKIT_SIM_CUDA_CTX_MIB", 0) * 1024ULL * 1024ULL;
}

/* A context exists on the device once active: it holds its overhead there and
 * the process shows up in NVML. Primary contexts are objects from their first
 * mention (the runtime asks for them on every device) and become active when
 * retained or made current. */
static CUresult ctx_activate(struct cu_ctx *c) {
        struct cu_dev *d = &cu_devs[c->dev];
        if (c->active)
                return CUDA_SUCCESS;
        cu_slot(d);
        if (cu_charge(d, ctx_overhead()) != CUDA_SUCCESS)
                return CUDA_ERROR_OUT_OF_MEMORY;
        c->active = true;
        return CUDA_SUCCESS;
}

static void ctx_deactivate(struct cu_ctx *c) {
        if (!c->active)
                return;
        cu_ctx_sync(c);
        cu_ctx_free_resources(c);
        cu_uncharge(&cu_devs[c->dev], ctx_overhead());
        c->active = false;
}

static CUresult ctx_new(int dev, unsigned flags, bool primary, struct cu_ctx **ret) {
        struct cu_ctx *c = calloc(1, sizeof(*c));

        if (!c)
                return CUDA_ERROR_OUT_OF_MEMORY;
        c->magic = MAGIC_CTX;
        c->dev = dev;
        c->flags = flags;
        c->primary = primary;
        c->id = next_ctx_id++;
        c->limits[CU_LIMIT_STACK_SIZE] = 1024;
        c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
        c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
        c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
        c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
        c->null_stream = cu_stream_new(c, 0, 0);
        if (!c->null_stream) {
                free(c);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (!primary) {
                CUresult r = ctx_activate(c);
                if (r != CUDA_SUCCESS) {
                        cu_ctx_free_streams(c);
                        free(c);
                        return r;
                }
        }
        *ret = c;
        return CUDA_SUCCESS;
}

static void ctx_free(struct cu_ctx *c) {
        ctx_deactivate(c);
        cu_ctx_free_streams(c);
        /* Drop it from this thread's stack (others keep a dangling handle, as with the real driver). */
        for (int i = 0; i < ctx_depth; i++)
                if (ctx_stack[i] == c)
                        ctx_stack[i] = NULL;
        c->magic = 0;
        free(c);
}

/* The primary context object of a device, created inactive on first use. */
static CUresult primary_get(int dev, struct cu_ctx **ret) {
        struct cu_dev *d = &cu_devs[dev];
        CUresult r = CUDA_SUCCESS;
        pthread_mutex_lock(&cu_lock);
        if (!d->primary)
                r = ctx_new(dev, d->primary_flags, true, &d->primary);
        if (r == CUDA_SUCCESS)
                *ret = d->primary;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CUresult cu_primary_get(CUdevice dev, CUcontext *pctx) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        r = primary_get(dev, &c);
        if (r == CUDA_SUCCESS)
                *pctx = (CUcontext) c;
        return r;
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        r = ctx_new(dev, flags, false, &c);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS)
                return r;
        if (ctx_depth >= CUSIM_CTX_STACK) {
                pthread_mutex_lock(&cu_lock);
                ctx_free(c);
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ctx_stack[ctx_depth++] = c;
        *pctx = (CUcontext) c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev) {
        (void) paramsArray;
        if (numParams < 0)
                return CUDA_ERROR_INVALID_VALUE;
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                  CUdevice dev) {
        (void) ctxCreateParams;
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (!cu_ctx_valid(c) || c->primary)
                return CUDA_ERROR_INVALID_CONTEXT;
        pthread_mutex_lock(&cu_lock);
        ctx_free(c);
        pthread_mutex_unlock(&cu_lock);
        /* Pop it if it was current. */
        while (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == NULL)
                ctx_depth--;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
        CHECK_INIT();
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        *pctx = (CUcontext) cu_current();
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (c && !cu_ctx_valid(c))
                return CUDA_ERROR_INVALID_CONTEXT;
        if (c) {
                pthread_mutex_lock(&cu_lock);
                CUresult r = ctx_activate(c);
                pthread_mutex_unlock(&cu_lock);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        if (ctx_depth == 0) {
                if (c)
                        ctx_stack[ctx_depth++] = c;
        } else
                ctx_stack[ctx_depth - 1] = c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (!cu_ctx_valid(c))
                return CUDA_ERROR_INVALID_CONTEXT;
        if (ctx_depth >= CUSIM_CTX_STACK)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        CUresult r = ctx_activate(c);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS)
                return r;
        ctx_stack[ctx_depth++] = c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
        CHECK_INIT();
        if (ctx_depth == 0)
                return CUDA_ERROR_INVALID_CONTEXT;
        struct cu_ctx *c = ctx_stack[--ctx_depth];
        if (pctx)
                *pctx = (CUcontext) c;
        return CUDA_SUCCESS;
}

/* ctx NULL: the current context. The versions share static bodies, not calls
 * through the exported symbols, which an interposer may have taken. */
static CUresult ctx_get_device(CUdevice *device, CUcontext ctx) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        *device = c->dev;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
        return ctx_get_device(device, NULL);
}

CU_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
        return ctx_get_device(device, ctx);
}

CU_EXPORT CUresult cuCtxGetFlags(unsigned int *flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!flags)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = c->flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        c->flags = flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!ctxId)
                return CUDA_ERROR_INVALID_VALUE;
        *ctxId = c->id;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!version)
                return CUDA_ERROR_INVALID_VALUE;
        *version = 3020;
        return CUDA_SUCCESS;
}

static CUresult ctx_synchronize(CUcontext ctx) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        return cu_ctx_sync(c);
}

CU_EXPORT CUresult cuCtxSynchronize(void) {
        return ctx_synchronize(NULL);
}

CU_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
        return ctx_synchronize(ctx);
}

CU_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pvalue || (unsigned) limit >= ELEMENTSOF(c->limits))
                return CUDA_ERROR_INVALID_VALUE;
        *pvalue = c->limits[limit];
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if ((unsigned) limit >= ELEMENTSOF(c->limits))
                return CUDA_ERROR_UNSUPPORTED_LIMIT;
        c->limits[limit] = value;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pconfig)
                return CUDA_ERROR_INVALID_VALUE;
        *pconfig = c->cache_config;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        c->cache_config = config;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
        CHECK_INIT();
        if (leastPriority)
                *leastPriority = 0;
        if (greatestPriority)
                *greatestPriority = -5;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxResetPersistingL2Cache(void) {
        CHECK_INIT();
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
                return CUDA_ERROR_INVALID_VALUE;
        pExecAffinity->type = type;
        pExecAffinity->param.smCount.val = cu_devs[c->dev].sms;
        return CUDA_SUCCESS;
}

/* Primary contexts. */

CU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        r = primary_get(dev, &c);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        r = ctx_activate(c);
        if (r == CUDA_SUCCESS) {
                d->primary_refs++;
                *pctx = (CUcontext) c;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        if (!d->primary || d->primary_refs <= 0) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_INVALID_CONTEXT;
        }
        if (--d->primary_refs == 0)
                ctx_deactivate(d->primary);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        if (d->primary) {
                ctx_deactivate(d->primary);
                d->primary_refs = 0;
        }
        d->primary_flags = 0;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        d->primary_flags = flags;
        if (d->primary)
                d->primary->flags = flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!flags || !active)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = d->primary_flags;
        *active = d->primary && d->primary->active;
        return CUDA_SUCCESS;
}

/* ---- error names ---- */

static const struct {
        CUresult code;
        const char *name, *text;
} errors[] = {
#define E(c, t) { c, #c, t }
        E(CUDA_SUCCESS, "no error"),
        E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
        E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
        E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
        E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
        E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
        E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
        E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA driver is too old for this call"),
        E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
        E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
        E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
        E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
        E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
        E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
        E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
        E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
        E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
        E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
        E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
        E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
        E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
        E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
        E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
        E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
        E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
        E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
        E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
        E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
        E(CUDA_ERROR_NOT_READY, "device not ready"),
        E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
        E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
        E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
        E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
        E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
        E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
        E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
        E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
        E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
        E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
        E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
        E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
        E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
        E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
        E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
        E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
        E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
        E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream"),
        E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
        E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
        E(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded"),
        E(CUDA_ERROR_UNKNOWN, "unknown error"),
#undef E
};

CU_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].code == error) {
                        *pStr = errors[i].name;
                        return CUDA_SUCCESS;
                }
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].code == error) {
                        *pStr = errors[i].text;
                        return CUDA_SUCCESS;
                }
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
}
