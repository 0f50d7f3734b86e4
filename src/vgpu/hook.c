/* libmigkit-vgpu.so: the CUDA driver entry points that allocate, free,
 * report memory and launch work, interposed as programs reach them:
 *
 * 1. direct linking: we export the versioned names (cuMemAlloc_v2, ...),
 *    so a preloaded copy wins symbol resolution; the real entry comes from
 *    RTLD_NEXT (or the loaded libcuda.so.1);
 * 2. dlopen + dlsym: we export dlsym. A look-up whose answer from the real
 *    dlsym is the real driver's entry of a function we hook returns our
 *    hook; everything else (RTLD_NEXT, other libraries' symbols, unknown
 *    names) goes on to glibc's dlsym by a tail jump, so glibc still sees
 *    the caller's return address (RTLD_NEXT stays relative to the caller);
 * 3. cuGetProcAddress(_v2): the driver answers first; an answer that is
 *    the real entry of a hooked function is replaced by our hook. The
 *    driver keeps deciding which version a (name, cudaVersion, flags)
 *    means, so new names and versions pass through untouched.
 *
 * The hooks take no lock across processes and allocate nothing from libc:
 * accounting is region.c (atomics on a shared mapping), bookkeeping is
 * track.c (mmap'ed tables). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/config.h"
#include "vgpu/cuda-abi.h"
#include "vgpu/region.h"
#include "vgpu/share.h"
#include "vgpu/track.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

/* ---- process state ---- */

static struct vgpu_config cfg;
static struct vgpu_region *region;
static _Atomic int my_slot = -1;
static pid_t my_pid;
static bool active;             /* limits configured and control not disabled */
static bool any_sm_limit;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static __thread int in_init __attribute__((tls_model("initial-exec")));     /* dlsym calls made while we initialise go straight through */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_share_est share_est[VGPU_MAX_DEVICES]; /* the watcher's */
static _Atomic double share_factor[VGPU_MAX_DEVICES];     /* its result, read by launches */
static _Atomic uint64_t share_base[VGPU_MAX_DEVICES];     /* base estimates launched, ns */
static _Atomic uint64_t share_charged[VGPU_MAX_DEVICES];  /* what the bucket was charged, ns */
static _Atomic bool share_calibrated[VGPU_MAX_DEVICES];   /* a first measurement came */
static _Atomic bool share_used[VGPU_MAX_DEVICES];         /* this process launched on it: the watcher looks */
/* CUDA device i's UUID as this process's driver gives it (post_cuinit): the
 * watcher measures this process on the device it really runs on, whatever
 * the region recorded (a region can outlive a run with other visible devices). */
static char own_uuid[VGPU_MAX_DEVICES][VGPU_UUID_LEN];
static _Atomic bool own_uuid_set[VGPU_MAX_DEVICES];
static uint64_t full_threads[VGPU_MAX_DEVICES];
static _Atomic bool watcher_started;
/* The watcher calls NVML until exit() begins: an atexit handler stops and
 * joins it before the libraries' destructors run (_dl_fini is the first
 * exit handler registered, so it runs last); NVML's own destructor must not
 * find it inside a call. Its sleep is a wait on watch_cond, so the stop
 * wakes it at once. */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cond;
static bool watch_stop, watch_running;
static pthread_t watch_thread;

static void watch_cond_init(void) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&watch_cond, &ca);
        pthread_condattr_destroy(&ca);
}

/* ---- logging: a stack buffer and write(2), nothing allocated ---- */

__attribute__((format(printf, 3, 0)))
static void vlogv(int level, char tag, const char *fmt, va_list ap) {
        if (level > cfg.log_level)
                return;
        char buf[1024];
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        int n = snprintf(buf, sizeof(buf), "%c%02d%02d %02d:%02d:%02d.%06ld %d migkit-vgpu] ", tag, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, (int) getpid());
        if (n > 0 && (size_t) n < sizeof(buf))
                n += vsnprintf(buf + n, sizeof(buf) - (size_t) n, fmt, ap);
        if (n < 0)
                return;
        if ((size_t) n >= sizeof(buf) - 1)
                n = sizeof(buf) - 2;
        buf[n++] = '\n';
        ssize_t w = write(STDERR_FILENO, buf, (size_t) n);
        (void) w;
}

__attribute__((format(printf, 2, 3)))
static void vlog(int level, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlogv(level, level <= VGPU_LOG_ERROR ? 'E' : level <= VGPU_LOG_WARNING ? 'W' : 'I', fmt, ap);
        va_end(ap);
}

/* Information shown at the default level (the limits read at start). */
__attribute__((format(printf, 1, 2)))
static void vlog_notice(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlogv(VGPU_LOG_WARNING, 'I', fmt, ap);
        va_end(ap);
}

/* ---- the real entry points ---- */

typedef void *(*dlsym_fn)(void *, const char *);
HIDDEN dlsym_fn vgpu_real_dlsym;

/* Every function we hook: name, return type, parameters, arguments. */
#define VGPU_CUDA_HOOKS(X)                                                                                    \
        X(cuInit, CUresult, (unsigned int flags), (flags))                                                   \
        X(cuGetProcAddress, CUresult, (const char *symbol, void **pfn, int ver, cuuint64_t flags),           \
          (symbol, pfn, ver, flags))                                                                         \
        X(cuGetProcAddress_v2, CUresult,                                                                     \
          (const char *symbol, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st),    \
          (symbol, pfn, ver, flags, st))                                                                     \
        X(cuMemAlloc_v2, CUresult, (CUdeviceptr * dptr, size_t size), (dptr, size))                          \
        X(cuMemAllocPitch_v2, CUresult,                                                                      \
          (CUdeviceptr * dptr, size_t *pitch, size_t width, size_t height, unsigned int elem),               \
          (dptr, pitch, width, height, elem))                                                                \
        X(cuMemAllocManaged, CUresult, (CUdeviceptr * dptr, size_t size, unsigned int flags),                \
          (dptr, size, flags))                                                                               \
        X(cuMemFree_v2, CUresult, (CUdeviceptr dptr), (dptr))                                                \
        X(cuMemAllocAsync, CUresult, (CUdeviceptr * dptr, size_t size, CUstream s), (dptr, size, s))         \
        X(cuMemAllocAsync_ptsz, CUresult, (CUdeviceptr * dptr, size_t size, CUstream s), (dptr, size, s))    \
        X(cuMemAllocFromPoolAsync, CUresult, (CUdeviceptr * dptr, size_t size, CUmemoryPool p, CUstream s),  \
          (dptr, size, p, s))                                                                                \
        X(cuMemAllocFromPoolAsync_ptsz, CUresult,                                                            \
          (CUdeviceptr * dptr, size_t size, CUmemoryPool p, CUstream s), (dptr, size, p, s))                 \
        X(cuMemFreeAsync, CUresult, (CUdeviceptr dptr, CUstream s), (dptr, s))                               \
        X(cuMemPoolTrimTo, CUresult, (CUmemoryPool p, size_t keep), (p, keep))                               \
        X(cuMemPoolDestroy, CUresult, (CUmemoryPool p), (p))                                                 \
        X(cuMemFreeAsync_ptsz, CUresult, (CUdeviceptr dptr, CUstream s), (dptr, s))                          \
        X(cuMemCreate, CUresult,                                                                             \
          (CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp *prop,                   \
           unsigned long long flags),                                                                        \
          (h, size, prop, flags))                                                                            \
        X(cuMemRelease, CUresult, (CUmemGenericAllocationHandle h), (h))                                     \
        X(cuMemMap, CUresult,                                                                                \
          (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long fl), \
          (ptr, size, offset, h, fl))                                                                        \
        X(cuMemUnmap, CUresult, (CUdeviceptr ptr, size_t size), (ptr, size))                                 \
        X(cuMemRetainAllocationHandle, CUresult, (CUmemGenericAllocationHandle * h, void *addr), (h, addr))  \
        X(cuMemImportFromShareableHandle, CUresult, (CUmemGenericAllocationHandle * h, void *os, int type),  \
          (h, os, type))                                                                                     \
        X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext * pctx, CUdevice dev), (pctx, dev))                 \
        X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev), (dev))                                     \
        X(cuDevicePrimaryCtxRelease, CUresult, (CUdevice dev), (dev))                                        \
        X(cuDevicePrimaryCtxReset_v2, CUresult, (CUdevice dev), (dev))                                       \
        X(cuDevicePrimaryCtxReset, CUresult, (CUdevice dev), (dev))                                          \
        X(cuCtxCreate_v2, CUresult, (CUcontext * pctx, unsigned int fl, CUdevice dev), (pctx, fl, dev))      \
        X(cuCtxCreate_v3, CUresult, (CUcontext * pctx, void *aff, int naff, unsigned int fl, CUdevice dev),  \
          (pctx, aff, naff, fl, dev))                                                                        \
        X(cuCtxCreate_v4, CUresult, (CUcontext * pctx, void *params, unsigned int fl, CUdevice dev),         \
          (pctx, params, fl, dev))                                                                           \
        X(cuCtxDestroy_v2, CUresult, (CUcontext ctx), (ctx))                                                 \
        X(cuMemGetInfo_v2, CUresult, (size_t *free, size_t *total), (free, total))                           \
        X(cuDeviceTotalMem_v2, CUresult, (size_t *bytes, CUdevice dev), (bytes, dev))                        \
        X(cuLaunchKernel, CUresult, LAUNCH_PARAMS, LAUNCH_ARGS)                                              \
        X(cuLaunchKernel_ptsz, CUresult, LAUNCH_PARAMS, LAUNCH_ARGS)                                         \
        X(cuLaunchKernelEx, CUresult, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra), \
          (config, f, params, extra))                                                                        \
        X(cuLaunchKernelEx_ptsz, CUresult,                                                                   \
          (const CUlaunchConfig *config, CUfunction f, void **params, void **extra), (config, f, params, extra)) \
        X(cuLaunchCooperativeKernel, CUresult, COOP_PARAMS, COOP_ARGS)                                       \
        X(cuLaunchCooperativeKernel_ptsz, CUresult, COOP_PARAMS, COOP_ARGS)                                  \
        X(cuGraphLaunch, CUresult, (CUgraphExec g, CUstream s), (g, s))                                      \
        X(cuGraphLaunch_ptsz, CUresult, (CUgraphExec g, CUstream s), (g, s))

#define LAUNCH_PARAMS                                                                                         \
        (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,  \
         unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
#define LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra)
#define COOP_PARAMS                                                                                           \
        (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,  \
         unsigned int bz, unsigned int shmem, CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params)

#define VGPU_NVML_HOOKS(X)                                                                                    \
        X(nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t d, vgpu_nvmlMemory_t * m), (d, m))            \
        X(nvmlDeviceGetMemoryInfo_v2, nvmlReturn_t, (nvmlDevice_t d, vgpu_nvmlMemory_v2_t * m), (d, m))      \
        X(nvmlDeviceGetComputeRunningProcesses, nvmlReturn_t,                                                \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v1_t *p), (d, n, p))                         \
        X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlReturn_t,                                             \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v2_t *p), (d, n, p))                         \
        X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                                             \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v2_t *p), (d, n, p))                         \
        X(nvmlDeviceGetGraphicsRunningProcesses, nvmlReturn_t,                                               \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v1_t *p), (d, n, p))                         \
        X(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlReturn_t,                                            \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v2_t *p), (d, n, p))                         \
        X(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlReturn_t,                                            \
          (nvmlDevice_t d, unsigned int *n, vgpu_nvmlProcessInfo_v2_t *p), (d, n, p))

/* Driver functions we call but do not hook. */
typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
typedef CUresult (*cuDevicePrimaryCtxGetState_fn)(CUdevice, unsigned int *, int *);
static cuDevicePrimaryCtxGetState_fn real_cuDevicePrimaryCtxGetState;
typedef CUresult (*cuDeviceGetCount_fn)(int *);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *, int);
typedef CUresult (*cuDeviceGetUuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*cuDeviceGetAttribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuDeviceGetMemPool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolGetAttribute_fn)(CUmemoryPool, int, void *);
static cuDeviceGetMemPool_fn real_cuDeviceGetMemPool;
static cuMemPoolGetAttribute_fn real_cuMemPoolGetAttribute;
static cuCtxGetDevice_fn real_cuCtxGetDevice;
static cuDeviceGetCount_fn real_cuDeviceGetCount;
static cuDeviceGet_fn real_cuDeviceGet;
static cuDeviceGetUuid_fn real_cuDeviceGetUuid;
static cuDeviceGetAttribute_fn real_cuDeviceGetAttribute;

typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetIndex_fn)(nvmlDevice_t, unsigned int *);
static _Atomic(nvmlDeviceGetUUID_fn) real_nvmlDeviceGetUUID;
static _Atomic(nvmlDeviceGetIndex_fn) real_nvmlDeviceGetIndex;

#define DECLARE_REAL(name, ret, params, args)                                                                \
        typedef ret(*name##_fn) params;                                                                      \
        static _Atomic(name##_fn) real_##name;                                                               \
        EXPORT ret name params;
VGPU_CUDA_HOOKS(DECLARE_REAL)
VGPU_NVML_HOOKS(DECLARE_REAL)

struct hook {
        const char *name;
        void *fn;                /* ours */
        _Atomic(void *) *real;   /* the real entry, once known */
        bool nvml;
};

#define HOOK_ENTRY(name, ret, params, args) { #name, (void *) name, (_Atomic(void *) *) &real_##name, false },
#define HOOK_ENTRY_NVML(name, ret, params, args) { #name, (void *) name, (_Atomic(void *) *) &real_##name, true },
static const struct hook hooks[] = { VGPU_CUDA_HOOKS(HOOK_ENTRY) VGPU_NVML_HOOKS(HOOK_ENTRY_NVML) };

static const struct hook *hook_by_name(const char *name) {
        if (!name || (name[0] != 'c' && name[0] != 'n'))
                return NULL;
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++)
                if (strcmp(hooks[i].name, name) == 0)
                        return &hooks[i];
        return NULL;
}

static const struct hook *hook_by_real(void *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++)
                if (atomic_load(hooks[i].real) == p)
                        return &hooks[i];
        return NULL;
}

/* A libnvidia-ml handle seen: the real entries of every NVML function we
 * hook or call, where none is known yet (the library may call its own
 * exported functions, and so reach our hooks, before a program looked
 * them up). */
static void adopt_nvml(void *lib, void *(*look)(void *, const char *));

static void resolve_real_dlsym(void) {
        static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0" };
        if (vgpu_real_dlsym)
                return;
        for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && !vgpu_real_dlsym; i++)
                vgpu_real_dlsym = (dlsym_fn) dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

/* The next definition after us, else the one in an already loaded lib. */
static void *find_real(void *lib, const char *name) {
        void *p = vgpu_real_dlsym(RTLD_NEXT, name);
        if (!p && lib)
                p = vgpu_real_dlsym(lib, name);
        return p;
}

static const char *env_get(const char *name, void *userdata) {
        return secure_getenv(name);
}

static void env_warn(const char *msg, void *userdata) {
        vlog(VGPU_LOG_ERROR, "%s", msg);
}

static void adopt_nvml(void *lib, void *(*look)(void *, const char *)) {
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
                if (!hooks[i].nvml)
                        continue;
                void *p = look(lib, hooks[i].name), *expect = NULL;
                if (p && p != hooks[i].fn)
                        atomic_compare_exchange_strong(hooks[i].real, &expect, p);
        }
        nvmlDeviceGetUUID_fn u = NULL;
        nvmlDeviceGetIndex_fn ix = NULL;
        atomic_compare_exchange_strong(&real_nvmlDeviceGetUUID, &u, (nvmlDeviceGetUUID_fn) look(lib, "nvmlDeviceGetUUID"));
        atomic_compare_exchange_strong(&real_nvmlDeviceGetIndex, &ix,
                                       (nvmlDeviceGetIndex_fn) look(lib, "nvmlDeviceGetIndex"));
}

static void atfork_child(void) {
        vgpu_track_atfork_child();
        /* The child charges into a slot of its own, claimed on first use. */
        atomic_store(&my_slot, -1);
        my_pid = getpid();
        pthread_mutex_init(&slot_lock, NULL);
        /* The parent's watcher did not come along; the child starts its own. */
        pthread_mutex_init(&watch_lock, NULL);
        watch_cond_init();
        watch_running = watch_stop = false;
        atomic_store(&watcher_started, false);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                atomic_store(&share_base[d], 0);
                atomic_store(&share_charged[d], 0);
                atomic_store(&share_calibrated[d], false);
                atomic_store(&share_used[d], false);
        }
}

/* The driver functions we call but do not hook, looked up in lib by look
 * (find_real at start-up, the real dlsym on a library dlopen'ed later). */
static void resolve_cuda_helpers(void *(*look)(void *lib, const char *name), void *lib) {
        real_cuCtxGetDevice = (cuCtxGetDevice_fn) look(lib, "cuCtxGetDevice");
        real_cuDevicePrimaryCtxGetState = (cuDevicePrimaryCtxGetState_fn) look(lib, "cuDevicePrimaryCtxGetState");
        real_cuDeviceGetCount = (cuDeviceGetCount_fn) look(lib, "cuDeviceGetCount");
        real_cuDeviceGet = (cuDeviceGet_fn) look(lib, "cuDeviceGet");
        real_cuDeviceGetUuid = (cuDeviceGetUuid_fn) look(lib, "cuDeviceGetUuid_v2");
        if (!real_cuDeviceGetUuid)
                real_cuDeviceGetUuid = (cuDeviceGetUuid_fn) look(lib, "cuDeviceGetUuid");
        real_cuDeviceGetAttribute = (cuDeviceGetAttribute_fn) look(lib, "cuDeviceGetAttribute");
        real_cuDeviceGetMemPool = (cuDeviceGetMemPool_fn) look(lib, "cuDeviceGetMemPool");
        real_cuMemPoolGetAttribute = (cuMemPoolGetAttribute_fn) look(lib, "cuMemPoolGetAttribute");
}

static void cvd_load(void);

/* One line at start: each capped device's cap as read, the text it was read
 * from (HAMi-core's reading can surprise: "1.5g" is 1 GiB), SM limits. */
static void log_limits(void) {
        char line[1200];
        size_t n = 0;
#define ADD(...)                                                                                             \
        do {                                                                                                 \
                int w_ = snprintf(line + n, sizeof(line) - n, __VA_ARGS__);                                  \
                if (w_ > 0)                                                                                  \
                        n += (size_t) w_ < sizeof(line) - n ? (size_t) w_ : sizeof(line) - n - 1;             \
        } while (0)
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (cfg.mem_from[d] == VGPU_FROM_ALL) {
                        uint64_t v = cfg.mem_limit[d];
                        if (v == VGPU_UNLIMITED)
                                ADD("no cap on the other devices (CUDA_DEVICE_MEMORY_LIMIT='%s')", cfg.mem_text_all);
                        else
                                ADD("the other devices %llu bytes (%llu MiB) from CUDA_DEVICE_MEMORY_LIMIT='%s'",
                                    (unsigned long long) v, (unsigned long long) (v >> 20), cfg.mem_text_all);
                        break;
                }
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (cfg.mem_from[d] == VGPU_FROM_DEVICE)
                        ADD("%sdevice %u %llu bytes (%llu MiB) from CUDA_DEVICE_MEMORY_LIMIT_%u='%s'", n ? ", " : "", d,
                            (unsigned long long) cfg.mem_limit[d], (unsigned long long) (cfg.mem_limit[d] >> 20), d,
                            cfg.mem_text[d]);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (cfg.sm_limit[d] < 100)
                        ADD("%sdevice %u compute %u%%", n ? ", " : "", d, cfg.sm_limit[d]);
#undef ADD
        vlog_notice("limits read: %s", n ? line : "none");
}

static void do_init(void) {
        in_init++;
        resolve_real_dlsym();
        my_pid = getpid();
        vgpu_config_load(&cfg, env_get, NULL, env_warn);
        cvd_load();
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                share_est[d].factor = 1.0;
                atomic_store(&share_factor[d], 1.0);
                if (cfg.mem_limit[d] != VGPU_UNLIMITED || cfg.sm_limit[d] < 100)
                        active = true;
                if (cfg.sm_limit[d] < 100)
                        any_sm_limit = true;
        }
        if (cfg.disabled)
                active = false;

        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
                void *p = find_real(hooks[i].nvml ? nvml : cuda, hooks[i].name);
                if (p && p != hooks[i].fn)
                        atomic_store(hooks[i].real, p);
        }
        resolve_cuda_helpers(find_real, cuda);
        atomic_store(&real_nvmlDeviceGetUUID, (nvmlDeviceGetUUID_fn) find_real(nvml, "nvmlDeviceGetUUID"));
        atomic_store(&real_nvmlDeviceGetIndex, (nvmlDeviceGetIndex_fn) find_real(nvml, "nvmlDeviceGetIndex"));
        if (cuda)
                dlclose(cuda);  /* drops the reference NOLOAD took; the library stays */
        if (nvml)
                dlclose(nvml);

        if (active) {
                char err[256];
                int r = vgpu_region_open(cfg.region_path, &cfg, &region, err, sizeof(err));
                if (r < 0) {
                        vlog(VGPU_LOG_ERROR,
                             "region file '%s' %s; refusing to share it: limits hold per process only. "
                             "Remove the file when no process of the container runs.",
                             cfg.region_path, err);
                        if (vgpu_region_new_private(&cfg, &region) < 0)
                                region = NULL;
                } else {
                        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                                if (region->mem_limit[d] != cfg.mem_limit[d] || region->sm_limit[d] != cfg.sm_limit[d]) {
                                        vlog(VGPU_LOG_INFO,
                                             "device %u: the region's limits (%llu bytes, %u%%) differ from this "
                                             "process's environment; the region's apply",
                                             d, (unsigned long long) region->mem_limit[d], region->sm_limit[d]);
                                        break;
                                }
                }
                if (!region)
                        active = false;
                pthread_atfork(vgpu_track_atfork_prepare, vgpu_track_atfork_parent, atfork_child);
                log_limits();
        }
        in_init--;
}

static inline void init(void) {
        pthread_once(&init_once, do_init);
}

__attribute__((destructor)) static void vgpu_fini(void) {
        int s = atomic_load(&my_slot);
        if (region && s >= 0 && my_pid == getpid())
                vgpu_region_release(region, s);
}

/* ---- the dlsym hook ---- */

/* Called by the dlsym trampoline: our hook for (handle, name), or NULL to
 * let glibc's dlsym answer. */
HIDDEN void *vgpu_dlsym_pick(void *handle, const char *name);
HIDDEN void *vgpu_dlsym_pick(void *handle, const char *name) {
        resolve_real_dlsym();
        if (in_init || handle == RTLD_NEXT)
                return NULL;
        const struct hook *h = hook_by_name(name);
        if (!h)
                return NULL;
        init();
        void *p = vgpu_real_dlsym(handle, name);
        if (!p || p == h->fn)
                return NULL;
        void *expect = NULL;
        /* First sight of the library (dlopen'ed by path, say): adopt it. */
        if (atomic_compare_exchange_strong(h->real, &expect, p) || expect == p) {
                if (h->nvml) {
                        adopt_nvml(handle, vgpu_real_dlsym);
                } else if (!real_cuCtxGetDevice) {
                        resolve_cuda_helpers(vgpu_real_dlsym, handle);
                }
                return h->fn;
        }
        return NULL;  /* another library's function of that name */
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  endbr64\n"
        "  push %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  push %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  sub $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call vgpu_dlsym_pick\n"
        "  add $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  pop %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  pop %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  test %rax, %rax\n"
        "  jz 1f\n"
        "  ret\n"
        "1:\n"
        "  jmp *vgpu_real_dlsym(%rip)\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,%function\n"
        "dlsym:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl vgpu_dlsym_pick\n"
        "  mov x2, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  cbz x2, 1f\n"
        "  mov x0, x2\n"
        "  ret\n"
        "1:\n"
        "  adrp x16, vgpu_real_dlsym\n"
        "  ldr x16, [x16, #:lo12:vgpu_real_dlsym]\n"
        "  br x16\n"
        ".size dlsym, .-dlsym\n");
#else
/* No tail-jump trampoline for this architecture: RTLD_NEXT look-ups are
 * answered relative to this library, not the caller. */
EXPORT void *dlsym(void *handle, const char *name) {
        void *p = vgpu_dlsym_pick(handle, name);
        return p ? p : vgpu_real_dlsym(handle, name);
}
#endif

/* ---- accounting helpers ---- */

static int current_device(unsigned *ret) {
        CUdevice d;
        if (!real_cuCtxGetDevice || real_cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0)
                return -ENODEV;
        *ret = (unsigned) d;
        return 0;
}

static int slot(void) {
        int s = atomic_load(&my_slot);
        if (s >= 0)
                return s;
        pthread_mutex_lock(&slot_lock);
        s = atomic_load(&my_slot);
        if (s < 0) {
                s = vgpu_region_claim(region, my_pid, vgpu_proc_start_time(my_pid), vgpu_pid_alive);
                if (s < 0)
                        vlog(VGPU_LOG_ERROR, "all %d process slots of region '%s' are held by live processes",
                             VGPU_MAX_SLOTS, cfg.region_path);
                else
                        atomic_store(&my_slot, s);
        }
        pthread_mutex_unlock(&slot_lock);
        return s;
}

static void log_oom(unsigned dev, uint64_t size) {
        uint64_t cap = region->mem_limit[dev], used = vgpu_region_used(region, dev);
        vlog(VGPU_LOG_WARNING,
             "out of memory: allocation of %llu bytes on device %u refused, the container's cap is %llu bytes "
             "(%llu MiB, CUDA_DEVICE_MEMORY_LIMIT_%u) and %llu bytes are in use",
             (unsigned long long) size, dev, (unsigned long long) cap, (unsigned long long) (cap >> 20), dev,
             (unsigned long long) used);
}

/* Charges size on dev before the real allocation. 0 or CUDA_ERROR_OUT_OF_MEMORY. */
static bool pools_settle_all(void);

static CUresult primary_first_use(unsigned dev);
static _Atomic bool primary_seen[VGPU_MAX_DEVICES];

/* Charges size bytes on dev, nothing else (a context's own charge). */
static CUresult charge_raw(unsigned dev, uint64_t size, int *ret_slot) {
        int s = slot();
        if (s < 0)
                return CUDA_ERROR_OUT_OF_MEMORY;
        /* Before refusing: pools may have given memory back at a synchronisation. */
        if (vgpu_region_charge(region, s, dev, size, vgpu_pid_alive) < 0 &&
            (!pools_settle_all() || vgpu_region_charge(region, s, dev, size, vgpu_pid_alive) < 0)) {
                log_oom(dev, size);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *ret_slot = s;
        return CUDA_SUCCESS;
}

/* Charges an allocation: first the device's primary context when this
 * process uses it uncharged (the CUDA runtime gets it through a private
 * export table, never through cuDevicePrimaryCtxRetain), then size. */
static CUresult charge(unsigned dev, uint64_t size, int *ret_slot) {
        if (!atomic_load_explicit(&primary_seen[dev], memory_order_acquire)) {
                CUresult r = primary_first_use(dev);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        return charge_raw(dev, size, ret_slot);
}

static void uncharge(int s, unsigned dev, uint64_t size) {
        if (vgpu_region_uncharge(region, s, dev, size) < 0)
                vlog(VGPU_LOG_ERROR, "accounting: uncharging %llu bytes on device %u went below zero (clamped)",
                     (unsigned long long) size, dev);
}

/* The allocation finished: remember it, or undo it when we cannot. */
typedef CUresult (*undo_fn)(uint64_t key);
static CUresult record(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev, int s, undo_fn undo) {
        if (vgpu_track_put(kind, key, size, dev) < 0) {
                undo(key);
                uncharge(s, dev, size);
                vlog(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more", VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

static CUresult undo_free(uint64_t key) {
        cuMemFree_v2_fn f = atomic_load(&real_cuMemFree_v2);
        return f ? f((CUdeviceptr) key) : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult undo_release(uint64_t key) {
        cuMemRelease_fn f = atomic_load(&real_cuMemRelease);
        return f ? f((CUmemGenericAllocationHandle) key) : CUDA_ERROR_NOT_INITIALIZED;
}

#define REAL(name)                                                                                           \
        name##_fn real = atomic_load(&real_##name);                                                          \
        if (!real)                                                                                           \
                return CUDA_ERROR_NOT_INITIALIZED

/* ---- allocation hooks ---- */

static CUresult alloc_ptr(CUdeviceptr *dptr, uint64_t size, CUresult res, unsigned dev, int s) {
        if (res != CUDA_SUCCESS) {
                uncharge(s, dev, size);
                return res;
        }
        return record(VGPU_TRACK_PTR, *dptr, size, dev, s, undo_free);
}

/* The pointer allocations: charge size on the current device, make the real
 * call, record the result (or uncharge on failure). Without limits, or off a
 * device we account, the real call alone. */
#define ALLOC_TRACKED(call)                                                                                  \
        do {                                                                                                 \
                unsigned dev_;                                                                               \
                int s_;                                                                                      \
                if (!active || !dptr || current_device(&dev_) < 0 || dev_ >= VGPU_MAX_DEVICES)               \
                        return call;                                                                         \
                CUresult r_ = charge(dev_, size, &s_);                                                       \
                if (r_ != CUDA_SUCCESS)                                                                      \
                        return r_;                                                                           \
                return alloc_ptr(dptr, size, call, dev_, s_);                                                \
        } while (0)

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
        init();
        REAL(cuMemAlloc_v2);
        ALLOC_TRACKED(real(dptr, size));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
        init();
        REAL(cuMemAllocManaged);
        ALLOC_TRACKED(real(dptr, size, flags));
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
        init();
        REAL(cuMemAllocPitch_v2);
        unsigned dev;
        int s;
        if (!active || !dptr || !pitch || current_device(&dev) < 0 || dev >= VGPU_MAX_DEVICES)
                return real(dptr, pitch, width, height, elem);
        uint64_t want;
        if (__builtin_mul_overflow((uint64_t) width, (uint64_t) height, &want))
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = charge(dev, want, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = real(dptr, pitch, width, height, elem);
        if (r != CUDA_SUCCESS) {
                uncharge(s, dev, want);
                return r;
        }
        /* The driver pads rows: charge what it really took. */
        uint64_t got;
        if (__builtin_mul_overflow((uint64_t) *pitch, (uint64_t) height, &got))
                got = want;
        if (got > want && vgpu_region_charge(region, s, dev, got - want, vgpu_pid_alive) < 0) {
                undo_free(*dptr);
                uncharge(s, dev, want);
                log_oom(dev, got);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (got < want)
                uncharge(s, dev, want - got);
        return record(VGPU_TRACK_PTR, *dptr, got, dev, s, undo_free);
}

/* ---- stream-ordered pools ----
 *
 * A pool keeps memory reserved past the frees (its release threshold) and
 * gives it back at synchronisations and cuMemPoolTrimTo: the device holds
 * what the pool reserves. A pool's charge is max(its live allocations, its
 * reservation as the driver says, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
 * settled at its allocations, frees and trims, in the memory views and
 * before an allocation is refused (a synchronisation may have released
 * memory since). A reservation only grows at an allocation, so the charge
 * is never below it; between a synchronisation and the next settling it
 * may be above (never over the cap). */

#define POOLS 64
struct pool_use {
        CUmemoryPool pool;      /* NULL: free entry */
        unsigned dev;
        uint64_t live, charged;
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_use pools[POOLS];
static _Atomic unsigned n_pools;       /* entries ever used: the views settle them */

/* Under pool_lock: the entry of pool p (creating it on dev), or NULL when full. */
static struct pool_use *pool_entry(CUmemoryPool p, unsigned dev, bool create) {
        struct pool_use *free_e = NULL;
        for (unsigned i = 0; i < POOLS; i++) {
                if (pools[i].pool == p)
                        return &pools[i];
                if (!pools[i].pool && !free_e)
                        free_e = &pools[i];
        }
        if (!create || !free_e)
                return NULL;
        *free_e = (struct pool_use) { .pool = p, .dev = dev };
        unsigned used = (unsigned) (free_e - pools) + 1, cur = atomic_load(&n_pools);
        while (cur < used && !atomic_compare_exchange_weak(&n_pools, &cur, used))
                ;
        return free_e;
}

/* Under pool_lock: the pool's charge brought to max(live, reserved). */
static void pool_settle(struct pool_use *e) {
        cuuint64_t res = 0;
        int s = atomic_load(&my_slot);
        if (s < 0)
                return;
        if (!real_cuMemPoolGetAttribute ||
            real_cuMemPoolGetAttribute(e->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS)
                res = 0;
        uint64_t target = res > e->live ? res : e->live;
        if (e->charged > target) {
                uncharge(s, e->dev, e->charged - target);
                e->charged = target;
        } else if (target > e->charged) {
                if (vgpu_region_charge(region, s, e->dev, target - e->charged, vgpu_pid_alive) == 0)
                        e->charged = target;
                else
                        vlog(VGPU_LOG_WARNING, "pool on device %u reserves %llu bytes past the cap (%llu charged)",
                             e->dev, (unsigned long long) target, (unsigned long long) e->charged);
        }
}

/* Settles every pool of this process (before a refusal, in the views);
 * true when a charge went down. */
static bool pools_settle_all(void) {
        unsigned n = atomic_load(&n_pools);
        bool less = false;
        if (n == 0)
                return false;
        pthread_mutex_lock(&pool_lock);
        for (unsigned i = 0; i < n && i < POOLS; i++)
                if (pools[i].pool) {
                        uint64_t before = pools[i].charged;
                        pool_settle(&pools[i]);
                        less |= pools[i].charged < before;
                }
        pthread_mutex_unlock(&pool_lock);
        return less;
}

/* A pool allocation: charge size first (announce-then-check), then the
 * pool's charge is settled against its reservation. */
static CUresult pool_alloc(CUdeviceptr *dptr, uint64_t size, CUmemoryPool p, CUresult (*call)(void *), void *arg) {
        unsigned dev;
        int s;
        if (!active || !dptr || current_device(&dev) < 0 || dev >= VGPU_MAX_DEVICES)
                return call(arg);
        if (!p && (!real_cuDeviceGetMemPool || real_cuDeviceGetMemPool(&p, (CUdevice) dev) != CUDA_SUCCESS))
                p = NULL;
        CUresult r = charge(dev, size, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = call(arg);
        if (r != CUDA_SUCCESS) {
                uncharge(s, dev, size);
                return r;
        }
        pthread_mutex_lock(&pool_lock);
        struct pool_use *e = p ? pool_entry(p, dev, true) : NULL;
        if (e) {
                e->live += size;
                e->charged += size;
                pool_settle(e);
        }
        pthread_mutex_unlock(&pool_lock);
        if (vgpu_track_put_aux(VGPU_TRACK_PTR, *dptr, size, dev, e ? (uint64_t) (uintptr_t) p : 0) < 0) {
                undo_free(*dptr);
                pthread_mutex_lock(&pool_lock);
                if (e) {
                        e->live -= size;
                        pool_settle(e);
                } else
                        uncharge(s, dev, size);
                pthread_mutex_unlock(&pool_lock);
                vlog(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more", VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

struct async_args {
        void *real;
        CUdeviceptr *dptr;
        size_t size;
        CUmemoryPool pool;
        CUstream st;
};

static CUresult call_alloc_async(void *a) {
        struct async_args *x = a;
        return ((cuMemAllocAsync_fn) x->real)(x->dptr, x->size, x->st);
}

static CUresult call_alloc_from_pool(void *a) {
        struct async_args *x = a;
        return ((cuMemAllocFromPoolAsync_fn) x->real)(x->dptr, x->size, x->pool, x->st);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream st) {
        init();
        REAL(cuMemAllocAsync);
        struct async_args a = { (void *) real, dptr, size, NULL, st };
        return pool_alloc(dptr, size, NULL, call_alloc_async, &a);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream st) {
        init();
        REAL(cuMemAllocAsync_ptsz);
        struct async_args a = { (void *) real, dptr, size, NULL, st };
        return pool_alloc(dptr, size, NULL, call_alloc_async, &a);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool p, CUstream st) {
        init();
        REAL(cuMemAllocFromPoolAsync);
        struct async_args a = { (void *) real, dptr, size, p, st };
        return pool_alloc(dptr, size, p, call_alloc_from_pool, &a);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool p, CUstream st) {
        init();
        REAL(cuMemAllocFromPoolAsync_ptsz);
        struct async_args a = { (void *) real, dptr, size, p, st };
        return pool_alloc(dptr, size, p, call_alloc_from_pool, &a);
}

/* A stream-ordered free: the pointer's bytes leave the pool's live ones; the
 * pool's charge follows its reservation. */
static CUresult pool_free(CUdeviceptr dptr, CUresult (*call)(CUdeviceptr, CUstream), CUstream st) {
        uint64_t size, aux;
        unsigned dev;
        int s = atomic_load(&my_slot);
        if (!active || s < 0 || vgpu_track_take_aux(VGPU_TRACK_PTR, dptr, &size, &dev, &aux) < 0)
                return call(dptr, st);
        CUresult r = call(dptr, st);
        if (r != CUDA_SUCCESS) {
                if (vgpu_track_put_aux(VGPU_TRACK_PTR, dptr, size, dev, aux) < 0 && !aux)
                        uncharge(s, dev, size);
                return r;
        }
        if (!aux) {
                uncharge(s, dev, size);
                return r;
        }
        pthread_mutex_lock(&pool_lock);
        struct pool_use *e = pool_entry((CUmemoryPool) (uintptr_t) aux, dev, false);
        if (e) {
                e->live = e->live >= size ? e->live - size : 0;
                pool_settle(e);
        }
        pthread_mutex_unlock(&pool_lock);
        return r;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
        init();
        REAL(cuMemPoolTrimTo);
        CUresult r = real(p, keep);
        if (r == CUDA_SUCCESS && active) {
                pthread_mutex_lock(&pool_lock);
                struct pool_use *e = pool_entry(p, 0, false);
                if (e)
                        pool_settle(e);
                pthread_mutex_unlock(&pool_lock);
        }
        return r;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) {
        init();
        REAL(cuMemPoolDestroy);
        CUresult r = real(p);
        int s = atomic_load(&my_slot);
        if (r == CUDA_SUCCESS && active) {
                pthread_mutex_lock(&pool_lock);
                struct pool_use *e = pool_entry(p, 0, false);
                if (e) {
                        if (s >= 0)
                                uncharge(s, e->dev, e->charged);
                        *e = (struct pool_use) { 0 };
                }
                pthread_mutex_unlock(&pool_lock);
        }
        return r;
}

/* Takes the allocation out of the table before the real free (the address
 * cannot be handed out again until then) and puts it back if the free fails. */
#define FREE_TRACKED(kind, key, call)                                                                         \
        do {                                                                                                 \
                uint64_t size_;                                                                              \
                unsigned dev_;                                                                               \
                int s_ = atomic_load(&my_slot);                                                              \
                if (!active || s_ < 0 || vgpu_track_take(kind, (key), &size_, &dev_) < 0)                     \
                        return call;                                                                         \
                CUresult r_ = call;                                                                          \
                if (r_ == CUDA_SUCCESS)                                                                      \
                        uncharge(s_, dev_, size_);                                                           \
                else if (vgpu_track_put(kind, (key), size_, dev_) < 0)                                       \
                        uncharge(s_, dev_, size_);                                                           \
                return r_;                                                                                   \
        } while (0)

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
        init();
        REAL(cuMemFree_v2);
        FREE_TRACKED(VGPU_TRACK_PTR, dptr, real(dptr));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream st) {
        init();
        REAL(cuMemFreeAsync);
        return pool_free(dptr, real, st);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream st) {
        init();
        REAL(cuMemFreeAsync_ptsz);
        return pool_free(dptr, real, st);
}

/* ---- virtual memory management ----
 *
 * A physical allocation (cuMemCreate) lives until its last reference is
 * released and its last mapping unmapped, in any order: the handle's entry
 * counts references (create, retain, import of a handle this process holds)
 * and mappings, and its charge goes when both are 0. A mapping's entry
 * (address -> bytes, handle) lets cuMemUnmap find the handles of a range. */

#define VMM_STEP (2ull << 20)           /* the smallest granularity: a range's mappings start on it */
#define VMM_MAX_STEPS (1u << 20)        /* an unmap walks at most this many steps (2 TiB) */

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
        init();
        REAL(cuMemCreate);
        int s;
        /* Host and host NUMA locations are host memory: not charged. */
        if (!active || !h || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
            prop->location.id >= VGPU_MAX_DEVICES)
                return real(h, size, prop, flags);
        unsigned dev = (unsigned) prop->location.id;
        CUresult r = charge(dev, size, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = real(h, size, prop, flags);
        if (r != CUDA_SUCCESS) {
                uncharge(s, dev, size);
                return r;
        }
        if (vgpu_track_put_aux(VGPU_TRACK_HANDLE, *h, size, dev, 1) < 0) {
                undo_release(*h);
                uncharge(s, dev, size);
                vlog(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more", VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

/* A handle's counts moved; uncharge when the physical allocation is gone. */
static void handle_adjust(CUmemGenericAllocationHandle h, int refs, int maps) {
        uint64_t size;
        unsigned dev;
        int s = atomic_load(&my_slot);
        if (vgpu_track_handle_adjust(h, refs, maps, &size, &dev) == 1 && s >= 0 && size > 0)
                uncharge(s, dev, size);
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
        init();
        REAL(cuMemRelease);
        if (!active)
                return real(h);
        /* The reference goes first: once the driver freed it, the same handle
         * value may come back from another thread's cuMemCreate. */
        uint64_t size = 0;
        unsigned dev = 0;
        int t = vgpu_track_handle_adjust(h, -1, 0, &size, &dev);
        CUresult r = real(h);
        if (r != CUDA_SUCCESS) {
                if (t == 1)
                        (void) vgpu_track_put_aux(VGPU_TRACK_HANDLE, h, size, dev, 1);
                else if (t == 0)
                        (void) vgpu_track_handle_adjust(h, 1, 0, &size, &dev);
                return r;
        }
        int s = atomic_load(&my_slot);
        if (t == 1 && s >= 0 && size > 0)
                uncharge(s, dev, size);
        return r;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
        init();
        REAL(cuMemRetainAllocationHandle);
        CUresult r = real(h, addr);
        if (r == CUDA_SUCCESS && active && h)
                handle_adjust(*h, 1, 0);
        return r;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
        init();
        REAL(cuMemImportFromShareableHandle);
        CUresult r = real(h, os, type);
        if (r != CUDA_SUCCESS || !active || !h)
                return r;
        uint64_t size;
        unsigned dev;
        /* A handle this process holds already: one more reference. */
        if (vgpu_track_handle_adjust(*h, 1, 0, &size, &dev) == 0)
                return r;
        /* Another process's allocation: its creator is charged for it (once
         * for the container); tracked uncharged so release and unmap balance. */
        (void) vgpu_track_put_aux(VGPU_TRACK_HANDLE, *h, 0, 0, 1);
        return r;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long fl) {
        init();
        REAL(cuMemMap);
        CUresult r = real(ptr, size, offset, h, fl);
        uint64_t hs;
        unsigned hd;
        if (r != CUDA_SUCCESS || !active || vgpu_track_handle_adjust(h, 0, 1, &hs, &hd) != 0)
                return r;
        if (vgpu_track_put_aux(VGPU_TRACK_MAP, ptr, size, 0, h) < 0) {
                /* Cannot remember the mapping: the handle then lives until its
                 * release (the mapping is not counted). */
                handle_adjust(h, 0, -1);
                vlog(VGPU_LOG_ERROR, "cannot track more than %u mappings; a mapping is not counted",
                     VGPU_TRACK_MAX_ENTRIES);
        }
        return r;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
        init();
        REAL(cuMemUnmap);
        CUresult r = real(ptr, size);
        if (r != CUDA_SUCCESS || !active)
                return r;
        /* The mappings the range held, from its start: each mapping's end is
         * the next one's start, or the next granule. */
        uint64_t p = ptr, end = ptr + size < ptr ? UINT64_MAX : ptr + size;
        for (unsigned steps = 0; p < end && steps < VMM_MAX_STEPS; steps++) {
                uint64_t msize, h;
                unsigned d;
                if (vgpu_track_take_aux(VGPU_TRACK_MAP, p, &msize, &d, &h) == 0) {
                        handle_adjust(h, 0, -1);
                        p += msize ? msize : VMM_STEP;
                } else
                        p += VMM_STEP;
        }
        return r;
}

/* ---- contexts ----
 *
 * A context holds device memory of the driver's (HAMi-core charges it too).
 * Its size is what NVML's used memory of the device grew by across the
 * creation; the region keeps the smallest size measured per device (a
 * measurement that another process's allocation inflated is not kept) and
 * supplies it when a measurement fails. The primary context is charged
 * while this process retains it; a created context until it is destroyed. */

typedef nvmlReturn_t (*nvmlInit_fn)(void);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByUUID_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_fn)(unsigned int, nvmlDevice_t *);
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[VGPU_MAX_DEVICES];
static uint64_t primary_charged[VGPU_MAX_DEVICES];
static bool primary_implicit[VGPU_MAX_DEVICES]; /* charged on first use, not by a retain */
static nvmlDeviceGetHandleByUUID_fn ctx_by_uuid;
static bool ctx_nvml_tried;
#define CTX_MAX_BYTES (4ull << 30)      /* a larger "context" was another process's allocation */

/* "GPU-xxxxxxxx-xxxx-..." of CUDA device dev (prefix as given). */
static bool cuda_uuid(unsigned dev, const char *prefix, char *out, size_t n) {
        CUdevice d;
        CUuuid u;
        if (!real_cuDeviceGet || !real_cuDeviceGetUuid || real_cuDeviceGet(&d, (int) dev) != CUDA_SUCCESS ||
            real_cuDeviceGetUuid(&u, d) != CUDA_SUCCESS)
                return false;
        const unsigned char *b = (const unsigned char *) u.bytes;
        snprintf(out, n, "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        return true;
}

/* What NVML says of CUDA device dev: this process's bytes there (proc_ok;
 * absent from the list is 0) and the device's used bytes (dev_ok). */
struct ctx_reading {
        bool proc_ok, proc_found, dev_ok;
        uint64_t proc, dev;
};

#define CTX_PROCS 256
static void nvml_read(unsigned dev, struct ctx_reading *r) {
        *r = (struct ctx_reading) { 0 };
        if (!ctx_nvml_tried) {
                ctx_nvml_tried = true;
                void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
                nvmlInit_fn ini = lib ? (nvmlInit_fn) vgpu_real_dlsym(lib, "nvmlInit_v2") : NULL;
                if (ini && ini() == NVML_SUCCESS) {
                        ctx_by_uuid = (nvmlDeviceGetHandleByUUID_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetHandleByUUID");
                        adopt_nvml(lib, vgpu_real_dlsym);
                }
        }
        nvmlDeviceGetMemoryInfo_fn mem = atomic_load(&real_nvmlDeviceGetMemoryInfo);
        /* _v3 first: an NVML whose _v2 calls its own exported _v3 would reach
         * our hook, and the container's list, through it. */
        nvmlDeviceGetComputeRunningProcesses_v3_fn procs = atomic_load(&real_nvmlDeviceGetComputeRunningProcesses_v3);
        if (!procs)
                procs = atomic_load(&real_nvmlDeviceGetComputeRunningProcesses_v2);
        char uuid[VGPU_UUID_LEN + 8];
        nvmlDevice_t h;
        vgpu_nvmlMemory_t m;
        if (!ctx_by_uuid)
                return;
        if (!(cuda_uuid(dev, "GPU-", uuid, sizeof(uuid)) && ctx_by_uuid(uuid, &h) == NVML_SUCCESS) &&
            !(cuda_uuid(dev, "MIG-", uuid, sizeof(uuid)) && ctx_by_uuid(uuid, &h) == NVML_SUCCESS))
                return;
        if (mem && mem(h, &m) == NVML_SUCCESS) {
                r->dev_ok = true;
                r->dev = m.used;
        }
        static vgpu_nvmlProcessInfo_v2_t list[CTX_PROCS];  /* under ctx_lock */
        unsigned n = CTX_PROCS;
        nvmlReturn_t pr = procs ? procs(h, &n, list) : NVML_ERROR_FUNCTION_NOT_FOUND;
        vlog(VGPU_LOG_DEBUG, "NVML process list of device %u: %d, %u entries", dev, (int) pr, n);
        if (pr == NVML_SUCCESS) {
                r->proc_ok = true;
                for (unsigned i = 0; i < n && i < CTX_PROCS; i++)
                        if (list[i].pid == (unsigned) my_pid) {
                                r->proc += list[i].usedGpuMemory;
                                r->proc_found = true;
                        }
        }
}

/* The bytes to charge for a context created on dev between two readings.
 * NVML lists this process under its pid once the context exists: its bytes
 * grew by the context (exact; never taken above what the device grew by,
 * so that a driver's stale entry is not charged), and the region keeps the
 * figure per device. A process NVML does not list under its pid (a pid
 * namespace: NVML's pids are the host's) takes the figure a listed process
 * of the container measured, else charges nothing: the device's used bytes
 * move with every other process on the GPU, and a guess from them gives
 * false out-of-memory errors (HAMi-core's host-pid discovery has the same
 * limit and turns its SM limit off). */
static uint64_t ctx_size(unsigned dev, const struct ctx_reading *b, const struct ctx_reading *a) {
        vlog(VGPU_LOG_DEBUG, "context on device %u: this process %llu -> %llu bytes (%s), device %llu -> %llu (%s)", dev,
             (unsigned long long) b->proc, (unsigned long long) a->proc, a->proc_found ? "listed" : a->proc_ok ? "not listed" : "no list",
             (unsigned long long) b->dev, (unsigned long long) a->dev, a->dev_ok && b->dev_ok ? "read" : "unread");
        if (!(b->proc_ok && a->proc_found)) {
                static bool said;
                uint64_t cached = atomic_load(&region->ctx_size[dev]);
                if (!said && cached == 0 && a->proc_ok && b->proc_ok)
                        vlog(VGPU_LOG_INFO, "NVML does not list this process under its pid %d: contexts are not "
                                            "charged until a process of the container that it lists measured one",
                             (int) my_pid);
                said = true;
                return cached;
        }
        uint64_t m = a->proc > b->proc ? a->proc - b->proc : 0;
        if (b->dev_ok && a->dev_ok && (a->dev <= b->dev || a->dev - b->dev < m))
                m = a->dev > b->dev ? a->dev - b->dev : 0;
        if (m > CTX_MAX_BYTES)
                m = 0;
        atomic_store(&region->ctx_size[dev], m);
        return m;
}

/* Charges a context of size bytes on dev. CUDA_ERROR_OUT_OF_MEMORY past the cap. */
static CUresult ctx_charge(unsigned dev, uint64_t size) {
        int s;
        if (size == 0)
                return CUDA_SUCCESS;
        CUresult r = charge_raw(dev, size, &s);
        if (r == CUDA_SUCCESS)
                vgpu_region_ctx_add(region, s, dev, (int64_t) size);
        return r;
}

/* The primary context of dev is in use (the driver says it is active) and
 * no retain of ours charged it: the CUDA runtime, and every library with a
 * static runtime, retains it through the CUDART export table. It is charged
 * here, once, on the process's first allocation or memory query on dev; its
 * size is what NVML lists for this process there beyond what the process
 * already charged on dev (its allocations, its created contexts), else the
 * size a process of the container measured. It stays charged until a reset
 * or the process's end: the runtime holds the context that long.
 * CUDA_ERROR_OUT_OF_MEMORY when the context does not fit under the cap (the
 * next use tries again). */
static CUresult primary_first_use(unsigned dev) {
        cuDevicePrimaryCtxGetState_fn state = real_cuDevicePrimaryCtxGetState;
        unsigned flags;
        int on = 0;
        CUresult r = CUDA_SUCCESS;
        pthread_mutex_lock(&ctx_lock);
        if (primary_charged[dev] > 0 || primary_implicit[dev])
                atomic_store_explicit(&primary_seen[dev], true, memory_order_release);
        else if (state && state((CUdevice) dev, &flags, &on) == CUDA_SUCCESS && on) {
                static struct ctx_reading before, after; /* under ctx_lock */
                int s = slot();
                before = (struct ctx_reading) { .proc_ok = true, .proc_found = true };
                if (s >= 0)
                        before.proc = atomic_load(&region->slots[s].dev[dev].used);
                nvml_read(dev, &after);
                uint64_t size = ctx_size(dev, &before, &after);
                r = ctx_charge(dev, size);
                if (r == CUDA_SUCCESS) {
                        vlog(VGPU_LOG_DEBUG, "primary context of device %u in use without a retain: %llu bytes charged",
                             dev, (unsigned long long) size);
                        primary_charged[dev] = size;
                        primary_implicit[dev] = true;
                        atomic_store_explicit(&primary_seen[dev], true, memory_order_release);
                }
        }
        pthread_mutex_unlock(&ctx_lock);
        return r;
}

static void ctx_uncharge(unsigned dev, uint64_t size) {
        int s = atomic_load(&my_slot);
        if (size == 0 || s < 0)
                return;
        uncharge(s, dev, size);
        vgpu_region_ctx_add(region, s, dev, -(int64_t) size);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
        init();
        REAL(cuDevicePrimaryCtxRetain);
        if (!active || dev < 0 || dev >= VGPU_MAX_DEVICES)
                return real(pctx, dev);
        unsigned d = (unsigned) dev;
        static struct ctx_reading before, after;  /* under ctx_lock */
        pthread_mutex_lock(&ctx_lock);
        bool first = !primary_implicit[d] && (primary_refs[d] == 0 || primary_charged[d] == 0);
        if (first)
                nvml_read(d, &before);
        CUresult r = real(pctx, dev);
        if (r == CUDA_SUCCESS) {
                primary_refs[d]++;
                if (first) {
                        nvml_read(d, &after);
                        uint64_t size = ctx_size(d, &before, &after);
                        if (ctx_charge(d, size) != CUDA_SUCCESS) {
                                cuDevicePrimaryCtxRelease_v2_fn rel = atomic_load(&real_cuDevicePrimaryCtxRelease_v2);
                                if (rel)
                                        rel(dev);
                                primary_refs[d]--;
                                r = CUDA_ERROR_OUT_OF_MEMORY;
                        } else
                                primary_charged[d] = size;
                }
        }
        pthread_mutex_unlock(&ctx_lock);
        return r;
}

static void primary_released(CUdevice dev) {
        if (!active || dev < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        pthread_mutex_lock(&ctx_lock);
        /* A context charged on first use stays: the runtime still holds it. */
        if (primary_refs[dev] > 0 && --primary_refs[dev] == 0 && !primary_implicit[dev]) {
                ctx_uncharge((unsigned) dev, primary_charged[dev]);
                primary_charged[dev] = 0;
                atomic_store(&primary_seen[dev], false);
        }
        pthread_mutex_unlock(&ctx_lock);
}

/* The context is gone; a later retain charges it again. */
static void primary_reset(CUdevice dev) {
        if (!active || dev < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        pthread_mutex_lock(&ctx_lock);
        ctx_uncharge((unsigned) dev, primary_charged[dev]);
        primary_charged[dev] = 0;
        primary_implicit[dev] = false;
        atomic_store(&primary_seen[dev], false);
        pthread_mutex_unlock(&ctx_lock);
}

/* The pre-11 names (cuGetProcAddress hands them out for old versions) too. */
#define PRIMARY_HOOK(name, after)                                                                            \
        EXPORT CUresult name(CUdevice dev) {                                                                 \
                init();                                                                                      \
                REAL(name);                                                                                  \
                CUresult r = real(dev);                                                                      \
                if (r == CUDA_SUCCESS)                                                                       \
                        after(dev);                                                                          \
                return r;                                                                                    \
        }
PRIMARY_HOOK(cuDevicePrimaryCtxRelease_v2, primary_released)
PRIMARY_HOOK(cuDevicePrimaryCtxRelease, primary_released)
PRIMARY_HOOK(cuDevicePrimaryCtxReset_v2, primary_reset)
PRIMARY_HOOK(cuDevicePrimaryCtxReset, primary_reset)

/* A context creation: measure around call, charge, remember. */
#define CTX_CREATE(call)                                                                                     \
        do {                                                                                                 \
                if (!active || dev < 0 || dev >= VGPU_MAX_DEVICES || !pctx)                                  \
                        return call;                                                                         \
                unsigned d_ = (unsigned) dev;                                                                \
                static struct ctx_reading before_, after_; /* under ctx_lock */                              \
                pthread_mutex_lock(&ctx_lock);                                                               \
                nvml_read(d_, &before_);                                                                     \
                CUresult r_ = call;                                                                          \
                if (r_ == CUDA_SUCCESS) {                                                                    \
                        nvml_read(d_, &after_);                                                              \
                        uint64_t size_ = ctx_size(d_, &before_, &after_);                                    \
                        if (ctx_charge(d_, size_) != CUDA_SUCCESS) {                                         \
                                ctx_destroy_real(*pctx);                                                     \
                                r_ = CUDA_ERROR_OUT_OF_MEMORY;                                               \
                        } else if (vgpu_track_put(VGPU_TRACK_CTX, (uint64_t) (uintptr_t) *pctx, size_, d_) < 0) { \
                                ctx_uncharge(d_, size_);                                                     \
                                ctx_destroy_real(*pctx);                                                     \
                                r_ = CUDA_ERROR_OUT_OF_MEMORY;                                               \
                        }                                                                                    \
                }                                                                                            \
                pthread_mutex_unlock(&ctx_lock);                                                             \
                return r_;                                                                                   \
        } while (0)

static void ctx_destroy_real(CUcontext c) {
        cuCtxDestroy_v2_fn f = atomic_load(&real_cuCtxDestroy_v2);
        if (f)
                f(c);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int fl, CUdevice dev) {
        init();
        REAL(cuCtxCreate_v2);
        CTX_CREATE(real(pctx, fl, dev));
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *aff, int naff, unsigned int fl, CUdevice dev) {
        init();
        REAL(cuCtxCreate_v3);
        CTX_CREATE(real(pctx, aff, naff, fl, dev));
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int fl, CUdevice dev) {
        init();
        REAL(cuCtxCreate_v4);
        CTX_CREATE(real(pctx, params, fl, dev));
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
        init();
        REAL(cuCtxDestroy_v2);
        uint64_t size;
        unsigned dev;
        if (!active || vgpu_track_take(VGPU_TRACK_CTX, (uint64_t) (uintptr_t) ctx, &size, &dev) < 0)
                return real(ctx);
        CUresult r = real(ctx);
        pthread_mutex_lock(&ctx_lock);
        if (r == CUDA_SUCCESS)
                ctx_uncharge(dev, size);
        else
                (void) vgpu_track_put(VGPU_TRACK_CTX, (uint64_t) (uintptr_t) ctx, size, dev);
        pthread_mutex_unlock(&ctx_lock);
        return r;
}

/* ---- memory views ---- */

static uint64_t capped_total(unsigned dev, uint64_t real_total) {
        uint64_t cap = region->mem_limit[dev];
        return cap < real_total ? cap : real_total;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
        init();
        REAL(cuMemGetInfo_v2);
        CUresult r = real(free_b, total_b);
        unsigned dev;
        if (r != CUDA_SUCCESS || !active || !free_b || !total_b || current_device(&dev) < 0 ||
            dev >= VGPU_MAX_DEVICES || region->mem_limit[dev] == VGPU_UNLIMITED)
                return r;
        if (!atomic_load_explicit(&primary_seen[dev], memory_order_acquire))
                (void) primary_first_use(dev);
        pools_settle_all();
        uint64_t total = capped_total(dev, *total_b), used = vgpu_region_used_live(region, dev, vgpu_pid_alive);
        uint64_t free_cap = used < total ? total - used : 0;
        *total_b = total;
        *free_b = free_cap < *free_b ? free_cap : *free_b;
        return r;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
        init();
        REAL(cuDeviceTotalMem_v2);
        CUresult r = real(bytes, dev);
        if (r == CUDA_SUCCESS && active && bytes && dev >= 0 && dev < VGPU_MAX_DEVICES &&
            region->mem_limit[dev] != VGPU_UNLIMITED)
                *bytes = capped_total((unsigned) dev, *bytes);
        return r;
}

/* ---- which NVML device is which CUDA device ----
 *
 * The caps are per CUDA device (CUDA's index in the container). An NVML
 * device is CUDA device i when its UUID is the one a CUDA process of the
 * container recorded for i (compared on the 16 bytes: NVML says "MIG-..."
 * of a MIG device whose CUDA UUID we print as "GPU-..."). Before any CUDA
 * process recorded them, CUDA_VISIBLE_DEVICES says it (indices, UUIDs or
 * their unique prefixes, MIG UUIDs; the list stops at the first entry that
 * names nothing, as CUDA's). Only without CUDA_VISIBLE_DEVICES is NVML's
 * index taken for CUDA's (all devices visible, in PCI order). */

#define CVD_MAX VGPU_MAX_DEVICES
static struct {
        bool set;                       /* CUDA_VISIBLE_DEVICES was in the environment */
        unsigned n;
        int index[CVD_MAX];             /* NVML index, or -1: by UUID prefix */
        char hex[CVD_MAX][33];          /* the UUID prefix's hex digits */
} cvd;

/* The hex digits of a UUID after its "GPU-"/"MIG-" prefix (dashes dropped),
 * at most 32; the count, 0 when the text is not one. */
static size_t uuid_hex(const char *u, char out[33]) {
        size_t n = 0;
        if (strncmp(u, "GPU-", 4) != 0 && strncmp(u, "MIG-", 4) != 0)
                return 0;
        for (u += 4; *u && *u != ',' && n < 32; u++) {
                char c = *u;
                if (c == '-')
                        continue;
                if (c >= 'A' && c <= 'F')
                        c = (char) (c - 'A' + 'a');
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return 0;
                out[n++] = c;
        }
        out[n] = 0;
        return n;
}

static void cvd_load(void) {
        const char *v = secure_getenv("CUDA_VISIBLE_DEVICES");
        cvd.set = v != NULL;
        cvd.n = 0;
        for (const char *p = v; p && *p && cvd.n < CVD_MAX;) {
                while (*p == ' ')
                        p++;
                const char *e = strchr(p, ',');
                size_t len = e ? (size_t) (e - p) : strlen(p);
                unsigned i = cvd.n;
                if (len > 0 && p[0] >= '0' && p[0] <= '9') {
                        int x = vgpu_parse_int(p);
                        size_t k = 0;
                        while (k < len && p[k] >= '0' && p[k] <= '9')
                                k++;
                        if (k != len && p[k] != ' ')
                                break;
                        cvd.index[i] = x;
                } else if (uuid_hex(p, cvd.hex[i]) > 0) {
                        cvd.index[i] = -1;
                } else
                        break;  /* CUDA ignores the rest of the list */
                cvd.n++;
                p = e ? e + 1 : p + len;
        }
}

/* CUDA's index of an NVML device, or -ENODEV when the container's CUDA
 * processes do not see it. */
static int nvml_dev_index(nvmlDevice_t d) {
        nvmlDeviceGetUUID_fn u = atomic_load(&real_nvmlDeviceGetUUID);
        char uuid[96], hex[33];
        size_t nh = 0;
        if (u && u(d, uuid, sizeof(uuid)) == NVML_SUCCESS)
                nh = uuid_hex(uuid, hex);
        if (nh == 32) {
                for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++) {
                        char rh[33];
                        if (atomic_load(&region->uuid_set[i]) == 2 && uuid_hex(region->uuid[i], rh) == 32 &&
                            strcmp(rh, hex) == 0)
                                return (int) i;
                }
        }
        /* Recorded by a CUDA process, and not among them: not the container's. */
        if (atomic_load(&region->uuid_set[0]) == 2)
                return -ENODEV;
        nvmlDeviceGetIndex_fn ix = atomic_load(&real_nvmlDeviceGetIndex);
        unsigned idx;
        bool have_idx = ix && ix(d, &idx) == NVML_SUCCESS;
        if (cvd.set) {
                for (unsigned i = 0; i < cvd.n; i++) {
                        if (cvd.index[i] >= 0 ? have_idx && (unsigned) cvd.index[i] == idx
                                              : nh == 32 && strncmp(hex, cvd.hex[i], strlen(cvd.hex[i])) == 0)
                                return (int) i;
                }
                return -ENODEV;
        }
        if (have_idx && idx < VGPU_MAX_DEVICES)
                return (int) idx;
        return -ENODEV;
}

static void nvml_view(nvmlDevice_t d, unsigned long long *total, unsigned long long *used,
                      unsigned long long *free_b) {
        int i = nvml_dev_index(d);
        if (i < 0 || region->mem_limit[i] == VGPU_UNLIMITED)
                return;
        uint64_t t = capped_total((unsigned) i, *total), u = vgpu_region_used_live(region, (unsigned) i, vgpu_pid_alive);
        uint64_t f = u < t ? t - u : 0;
        *total = t;
        *used = u < t ? u : t;
        *free_b = f < *free_b ? f : *free_b;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, vgpu_nvmlMemory_t *m) {
        init();
        nvmlDeviceGetMemoryInfo_fn real = atomic_load(&real_nvmlDeviceGetMemoryInfo);
        if (!real)
                return NVML_ERROR_FUNCTION_NOT_FOUND;
        nvmlReturn_t r = real(d, m);
        if (r == NVML_SUCCESS && active && m)
                nvml_view(d, &m->total, &m->used, &m->free);
        return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, vgpu_nvmlMemory_v2_t *m) {
        init();
        nvmlDeviceGetMemoryInfo_v2_fn real = atomic_load(&real_nvmlDeviceGetMemoryInfo_v2);
        if (!real)
                return NVML_ERROR_FUNCTION_NOT_FOUND;
        nvmlReturn_t r = real(d, m);
        if (r == NVML_SUCCESS && active && m) {
                nvml_view(d, &m->total, &m->used, &m->free);
                if (m->reserved > m->total - m->used - m->free)
                        m->reserved = m->total - m->used - m->free;
        }
        return r;
}

/* ---- process lists ----
 *
 * On a device of the container, the compute processes NVML lists are the
 * container's own: the live processes of the region holding memory there
 * (their charge, contexts included), under the pids the container sees.
 * The graphics list keeps only NVML's entries of those pids, with their
 * charge. Other devices, and everything without limits, are NVML's. */

#define PROC_MAX 256    /* the real list read for the graphics filter */

/* The region's live processes with bytes on dev: (pid, bytes) into out,
 * up to cap; the number there are. */
static unsigned region_procs(unsigned dev, vgpu_nvmlProcessInfo_v2_t *out, unsigned cap) {
        unsigned n = 0, hwm = atomic_load(&region->slot_hwm);
        vgpu_region_reclaim(region, vgpu_pid_alive);
        for (unsigned i = 0; i < hwm && i < VGPU_MAX_SLOTS; i++) {
                uint64_t o = atomic_load(&region->slots[i].owner);
                uint64_t used = vgpu_region_slot_used(region, (int) i, dev);
                if (!o || VGPU_OWNER_STATE(o) != VGPU_OWNER_LIVE || used == 0)
                        continue;
                if (n < cap)
                        out[n] = (vgpu_nvmlProcessInfo_v2_t) { .pid = (unsigned) VGPU_OWNER_PID(o),
                                                               .usedGpuMemory = used,
                                                               .gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_U32,
                                                               .computeInstanceId = NVML_VALUE_NOT_AVAILABLE_U32 };
                n++;
        }
        return n;
}

/* The answer in NVML's terms: n entries of list into infos (v1 or v2 layout). */
static nvmlReturn_t procs_answer(const vgpu_nvmlProcessInfo_v2_t *list, unsigned n, unsigned *count, void *infos,
                                 bool v1) {
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (*count < n) {
                *count = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (n > 0 && !infos)
                return NVML_ERROR_INVALID_ARGUMENT;
        for (unsigned i = 0; i < n; i++) {
                if (v1)
                        ((vgpu_nvmlProcessInfo_v1_t *) infos)[i] =
                                (vgpu_nvmlProcessInfo_v1_t) { .pid = list[i].pid, .usedGpuMemory = list[i].usedGpuMemory };
                else
                        ((vgpu_nvmlProcessInfo_v2_t *) infos)[i] = list[i];
        }
        *count = n;
        return NVML_SUCCESS;
}

/* The lists' buffers: process-wide under procs_lock, not per thread (a
 * preloaded library's thread-local storage is taken in every thread of
 * every process). */
/* Recursive: an NVML whose graphics list calls its own exported compute list
 * would reach compute_procs inside the graphics hook. */
static pthread_mutex_t procs_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static vgpu_nvmlProcessInfo_v2_t procs_mine[VGPU_MAX_SLOTS], procs_keep[PROC_MAX];

static nvmlReturn_t compute_procs(nvmlDevice_t d, unsigned *count, void *infos, bool v1) {
        int i = nvml_dev_index(d);
        pthread_mutex_lock(&procs_lock);
        unsigned n = region_procs((unsigned) i, procs_mine, VGPU_MAX_SLOTS);
        nvmlReturn_t r = procs_answer(procs_mine, n < VGPU_MAX_SLOTS ? n : VGPU_MAX_SLOTS, count, infos, v1);
        pthread_mutex_unlock(&procs_lock);
        return r;
}

#define COMPUTE_PROCS(name, type, v1)                                                                        \
        EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *n, type *p) {                                 \
                init();                                                                                      \
                name##_fn real = atomic_load(&real_##name);                                                  \
                if (!real)                                                                                   \
                        return NVML_ERROR_FUNCTION_NOT_FOUND;                                                \
                if (!active || nvml_dev_index(d) < 0)                                                        \
                        return real(d, n, p);                                                                \
                return compute_procs(d, n, p, v1);                                                           \
        }
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses, vgpu_nvmlProcessInfo_v1_t, true)
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, vgpu_nvmlProcessInfo_v2_t, false)
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, vgpu_nvmlProcessInfo_v2_t, false)

/* NVML's graphics list, kept to the container's processes. */
#define GRAPHICS_PROCS(name, type, v1)                                                                       \
        EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *n, type *p) {                                 \
                init();                                                                                      \
                name##_fn real = atomic_load(&real_##name);                                                  \
                if (!real)                                                                                   \
                        return NVML_ERROR_FUNCTION_NOT_FOUND;                                                \
                int dev = active ? nvml_dev_index(d) : -1;                                                   \
                if (dev < 0)                                                                                 \
                        return real(d, n, p);                                                                \
                static type all[PROC_MAX]; /* under procs_lock */                                            \
                unsigned na = PROC_MAX, k = 0;                                                               \
                pthread_mutex_lock(&procs_lock);                                                             \
                nvmlReturn_t r = real(d, &na, all);                                                          \
                if (r == NVML_SUCCESS) {                                                                     \
                        unsigned nm = region_procs((unsigned) dev, procs_mine, VGPU_MAX_SLOTS);              \
                        for (unsigned i = 0; i < na && i < PROC_MAX; i++)                                    \
                                for (unsigned j = 0; j < nm && j < VGPU_MAX_SLOTS; j++)                      \
                                        if (procs_mine[j].pid == all[i].pid) {                               \
                                                procs_keep[k++] = procs_mine[j];                             \
                                                break;                                                       \
                                        }                                                                    \
                        r = procs_answer(procs_keep, k, n, p, v1);                                           \
                }                                                                                            \
                pthread_mutex_unlock(&procs_lock);                                                           \
                return r;                                                                                    \
        }
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses, vgpu_nvmlProcessInfo_v1_t, true)
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, vgpu_nvmlProcessInfo_v2_t, false)
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, vgpu_nvmlProcessInfo_v2_t, false)

/* ---- compute share ---- */

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void watcher_start(void);

static bool share_applies(unsigned dev, uint64_t now) {
        unsigned pct = region->sm_limit[dev];
        if (pct >= 100 || pct == 0)
                return false;
        switch (region->policy) {
        case VGPU_POLICY_DISABLE:
                return false;
        case VGPU_POLICY_FORCE:
                return true;
        default:
                /* A lone container bursts; the watcher says when others run. */
                return now < atomic_load(&region->share[dev].others_until_ns);
        }
}

/* Admits one launch: blocks until its turn. blocks == 0: a graph. */
static void admit(uint64_t blocks, uint64_t threads) {
        unsigned dev;
        if (current_device(&dev) < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        if (!atomic_load(&watcher_started))
                watcher_start();
        if (!atomic_load_explicit(&share_used[dev], memory_order_relaxed))
                atomic_store(&share_used[dev], true);
        uint64_t now = now_ns();
        if (!share_applies(dev, now))
                return;
        uint64_t base = blocks ? vgpu_share_kernel_cost(blocks, threads, full_threads[dev]) : VGPU_SHARE_GRAPH_COST_NS;
        uint64_t cost = (uint64_t) ((double) base * atomic_load_explicit(&share_factor[dev], memory_order_relaxed));
        if (!atomic_load_explicit(&share_calibrated[dev], memory_order_relaxed) && cost < VGPU_SHARE_FIRST_COST_NS)
                cost = VGPU_SHARE_FIRST_COST_NS;
        atomic_fetch_add(&share_base[dev], base);
        atomic_fetch_add(&share_charged[dev], cost);
        uint64_t wait = vgpu_share_admit(&region->share[dev], region->sm_limit[dev], cost, now);
        int s = slot();
        if (s >= 0)
                atomic_fetch_add(&region->slots[s].launches, 1);
        if (wait == 0)
                return;
        struct timespec ts = { (time_t) (wait / 1000000000ull), (long) (wait % 1000000000ull) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        if (s >= 0)
                atomic_fetch_add(&region->slots[s].throttled_ns, wait);
}

/* A launch hook: admit (when a compute share is set and `when` holds), then
 * the real launch. The admit arguments are (blocks, threads); (0, 0) is a graph. */
#define LAUNCH_HOOK(name, params, args, when, ...)                                                          \
        EXPORT CUresult name params {                                                                        \
                init();                                                                                      \
                REAL(name);                                                                                  \
                if (active && any_sm_limit && (when))                                                        \
                        admit(__VA_ARGS__);                                                                  \
                return real args;                                                                            \
        }
#define GRID(gx, gy, gz, bx, by, bz) (uint64_t) (gx) * (gy) * (gz), (uint64_t) (bx) * (by) * (bz)
#define EX_PARAMS (const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
#define EX_ARGS (c, f, params, extra)
#define EX_GRID GRID(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ)

LAUNCH_HOOK(cuLaunchKernel, LAUNCH_PARAMS, LAUNCH_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchKernel_ptsz, LAUNCH_PARAMS, LAUNCH_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchKernelEx, EX_PARAMS, EX_ARGS, c != NULL, EX_GRID)
LAUNCH_HOOK(cuLaunchKernelEx_ptsz, EX_PARAMS, EX_ARGS, c != NULL, EX_GRID)
LAUNCH_HOOK(cuLaunchCooperativeKernel, COOP_PARAMS, COOP_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, COOP_PARAMS, COOP_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuGraphLaunch, (CUgraphExec g, CUstream st), (g, st), true, 0, 0)
LAUNCH_HOOK(cuGraphLaunch_ptsz, (CUgraphExec g, CUstream st), (g, st), true, 0, 0)

/* ---- init and symbol look-up ---- */

static void post_cuinit(void) {
        int n = 0;
        if (!active)
                return;
        /* Hold a slot from the start: the watchers of the container's other
         * processes tell its own pids from other GPU users by the slots. */
        (void) slot();
        if (!real_cuDeviceGetCount || real_cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return;
        for (int i = 0; i < n && i < VGPU_MAX_DEVICES; i++) {
                CUdevice d;
                CUuuid u;
                int sms = 0, tpm = 0;
                if (!real_cuDeviceGet || real_cuDeviceGet(&d, i) != CUDA_SUCCESS)
                        continue;
                if (real_cuDeviceGetAttribute &&
                    real_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) == CUDA_SUCCESS &&
                    real_cuDeviceGetAttribute(&tpm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d) ==
                            CUDA_SUCCESS &&
                    sms > 0 && tpm > 0)
                        full_threads[i] = (uint64_t) sms * (uint64_t) tpm;
                if (real_cuDeviceGetUuid && real_cuDeviceGetUuid(&u, d) == CUDA_SUCCESS) {
                        char s[VGPU_UUID_LEN];
                        const unsigned char *b = (const unsigned char *) u.bytes;
                        snprintf(s, sizeof(s),
                                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                                 b[15]);
                        memcpy(own_uuid[i], s, sizeof(own_uuid[i]));
                        atomic_store(&own_uuid_set[i], true);
                        vgpu_region_set_uuid(region, (unsigned) i, s);
                        if (atomic_load(&region->uuid_set[i]) == 2 &&
                            strncmp(region->uuid[i], s, VGPU_UUID_LEN) != 0)
                                vlog(VGPU_LOG_WARNING, "the region records CUDA device %d as %.*s, this process's "
                                     "driver says %s: the container's processes disagree on CUDA_VISIBLE_DEVICES",
                                     i, VGPU_UUID_LEN, region->uuid[i], s);
                }
        }
}

EXPORT CUresult cuInit(unsigned int flags) {
        init();
        REAL(cuInit);
        CUresult r = real(flags);
        if (r == CUDA_SUCCESS) {
                static pthread_once_t once = PTHREAD_ONCE_INIT;
                pthread_once(&once, post_cuinit);
                if (active && any_sm_limit)
                        watcher_start();
        }
        return r;
}

static void *swap_for_hook(void *p) {
        const struct hook *h = hook_by_real(p);
        return h ? h->fn : p;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
        init();
        REAL(cuGetProcAddress);
        CUresult r = real(symbol, pfn, ver, flags);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = swap_for_hook(*pfn);
        return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *st) {
        init();
        REAL(cuGetProcAddress_v2);
        CUresult r = real(symbol, pfn, ver, flags, st);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = swap_for_hook(*pfn);
        return r;
}

/* ---- the watcher: measured utilisation corrects the estimates ---- */

typedef nvmlReturn_t (*nvmlDeviceGetProcessUtilization_fn)(nvmlDevice_t, vgpu_nvmlProcessUtilizationSample_t *,
                                                            unsigned int *, unsigned long long);

#define WATCH_SAMPLES 256
#define OTHERS_HOLD_NS 500000000ull   /* another user seen: limit for the next 0.5 s */
#define RECLAIM_EVERY 10              /* watcher periods between dead-slot sweeps */

static bool pid_in_region(unsigned pid) {
        unsigned hwm = atomic_load(&region->slot_hwm);
        for (unsigned i = 0; i < hwm && i < VGPU_MAX_SLOTS; i++) {
                uint64_t o = atomic_load(&region->slots[i].owner);
                if (o && VGPU_OWNER_STATE(o) == VGPU_OWNER_LIVE && (unsigned) VGPU_OWNER_PID(o) == pid)
                        return true;
        }
        return false;
}

/* Sleeps ms; true when the process is exiting (watcher_stop). */
static bool watcher_sleep(unsigned ms) {
        uint64_t t = now_ns() + (uint64_t) ms * 1000000ull; /* watch_cond waits on CLOCK_MONOTONIC */
        struct timespec until = { (time_t) (t / 1000000000ull), (long) (t % 1000000000ull) };
        pthread_mutex_lock(&watch_lock);
        while (!watch_stop && pthread_cond_timedwait(&watch_cond, &watch_lock, &until) == 0)
                ;
        bool stop = watch_stop;
        pthread_mutex_unlock(&watch_lock);
        return stop;
}

/* atexit: stop the watcher and wait until it is out of NVML. */
static void watcher_stop(void) {
        pthread_mutex_lock(&watch_lock);
        bool join = watch_running && !pthread_equal(watch_thread, pthread_self());
        watch_stop = true;
        pthread_cond_broadcast(&watch_cond);
        pthread_mutex_unlock(&watch_lock);
        if (join)
                (void) pthread_join(watch_thread, NULL);
        watch_running = false;
}

static void *watcher(void *arg) {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (lib)
                adopt_nvml(lib, vgpu_real_dlsym);
        nvmlInit_fn ini = lib ? (nvmlInit_fn) vgpu_real_dlsym(lib, "nvmlInit_v2") : NULL;
        nvmlDeviceGetHandleByUUID_fn by_uuid =
                lib ? (nvmlDeviceGetHandleByUUID_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetHandleByUUID") : NULL;
        nvmlDeviceGetHandleByIndex_fn by_index =
                lib ? (nvmlDeviceGetHandleByIndex_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        nvmlDeviceGetProcessUtilization_fn util =
                lib ? (nvmlDeviceGetProcessUtilization_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetProcessUtilization")
                    : NULL;
        bool nvml_ok = ini && util && (by_uuid || by_index) && ini() == NVML_SUCCESS;
        if (!nvml_ok)
                vlog(VGPU_LOG_INFO, "no NVML process utilisation: compute share runs on estimates only, "
                                    "and the default policy limits at all times");
        static vgpu_nvmlProcessUtilizationSample_t samples[WATCH_SAMPLES];
        unsigned long long last_seen[VGPU_MAX_DEVICES] = { 0 };
        uint64_t last_admitted[VGPU_MAX_DEVICES] = { 0 }, last_t[VGPU_MAX_DEVICES] = { 0 };
        uint64_t last_charged[VGPU_MAX_DEVICES] = { 0 };
        unsigned corrections[VGPU_MAX_DEVICES] = { 0 };
        bool calibrating = true;
        for (unsigned tick = 0;; tick++) {
                /* Until a device's first estimates are corrected, look 5x as often:
                 * a kernel the first estimate gets wrong runs unchecked meanwhile. */
                if (watcher_sleep(calibrating ? VGPU_SHARE_CALIBRATE_MS : VGPU_SHARE_PERIOD_MS))
                        break;
                calibrating = false;
                uint64_t now = now_ns();
                if (tick % RECLAIM_EVERY == 0)
                        vgpu_region_reclaim(region, vgpu_pid_alive);
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                        if (region->sm_limit[d] >= 100 || region->sm_limit[d] == 0)
                                continue;
                        /* Only the devices this process launches on: each
                         * process of the container watches its own, and an
                         * NVML query per idle device per period is not free. */
                        if (!atomic_load(&share_used[d]))
                                continue;
                        nvmlDevice_t h = NULL;
                        bool have = false;
                        /* Our driver's UUID first: the region's may be a
                         * previous run's (another CUDA_VISIBLE_DEVICES). */
                        if (nvml_ok && atomic_load(&own_uuid_set[d]) && by_uuid)
                                have = by_uuid(own_uuid[d], &h) == NVML_SUCCESS;
                        if (nvml_ok && !have && atomic_load(&region->uuid_set[d]) == 2 && by_uuid)
                                have = by_uuid(region->uuid[d], &h) == NVML_SUCCESS;
                        /* Not recorded yet: CUDA_VISIBLE_DEVICES's index, or
                         * NVML's own when it is not set. */
                        if (nvml_ok && !have && by_index && !cvd.set)
                                have = by_index(d, &h) == NVML_SUCCESS;
                        else if (nvml_ok && !have && by_index && d < cvd.n && cvd.index[d] >= 0)
                                have = by_index((unsigned) cvd.index[d], &h) == NVML_SUCCESS;
                        if (!have) {
                                atomic_store(&region->share[d].others_until_ns, UINT64_MAX);
                                continue;
                        }
                        unsigned n = WATCH_SAMPLES;
                        nvmlReturn_t r = util(h, samples, &n, last_seen[d]);
                        if (r != NVML_SUCCESS) {
                                if (r == 6 /* NVML_ERROR_NOT_FOUND */ || n == 0)
                                        n = 0;  /* no samples since last_seen: idle */
                                else {
                                        atomic_store(&region->share[d].others_until_ns, UINT64_MAX);
                                        continue;
                                }
                        }
                        unsigned mine = 0, mine_n = 0;
                        bool others = false;
                        for (unsigned i = 0; i < n && i < WATCH_SAMPLES; i++) {
                                if (samples[i].timeStamp > last_seen[d])
                                        last_seen[d] = samples[i].timeStamp;
                                if (samples[i].pid == (unsigned) my_pid) {
                                        mine += samples[i].smUtil;
                                        mine_n++;
                                } else if (samples[i].smUtil > 0 && !pid_in_region(samples[i].pid))
                                        others = true;
                        }
                        if (others)
                                atomic_store(&region->share[d].others_until_ns, now + OTHERS_HOLD_NS);
                        /* Reconcile: the bucket pays for the GPU time NVML measured,
                         * not for the estimate, so a first estimate that was wrong
                         * (a long kernel taken for a short one) is paid back. */
                        uint64_t window = last_t[d] ? now - last_t[d] : 0;
                        uint64_t measured = mine_n ? (uint64_t) ((double) window * mine / mine_n / 100.0) : 0;
                        uint64_t charged = atomic_load(&share_charged[d]);
                        if (last_t[d] && mine_n > 0) {
                                int64_t adjust = (int64_t) measured - (int64_t) (charged - last_charged[d]);
                                atomic_fetch_sub(&region->share[d].tokens, adjust);
                                last_charged[d] = charged;
                        } else if (!last_t[d])
                                /* The first look has no window to measure: what was
                                 * charged before it stays charged (estimates), and is
                                 * not refunded by the next window's reconciliation. */
                                last_charged[d] = charged;
                        uint64_t adm = atomic_load(&share_base[d]);
                        if (last_t[d] && (adm > last_admitted[d] || mine_n > 0)) {
                                vgpu_share_observe(&share_est[d], window, adm - last_admitted[d], measured);
                                atomic_store_explicit(&share_factor[d], share_est[d].factor, memory_order_relaxed);
                                vlog(VGPU_LOG_DEBUG, "share: device %u window %llu us, launched %llu us estimated, "
                                     "measured %llu us (%u%%), factor %.3g", d, (unsigned long long) (window / 1000),
                                     (unsigned long long) ((adm - last_admitted[d]) / 1000),
                                     (unsigned long long) (measured / 1000), mine_n ? mine / mine_n : 0,
                                     share_est[d].factor);
                                corrections[d]++;
                                if (adm > last_admitted[d] && mine_n > 0)
                                        atomic_store(&share_calibrated[d], true);
                        }
                        if (adm > 0 && corrections[d] < 5)
                                calibrating = true;
                        last_admitted[d] = adm;
                        last_t[d] = now;
                }
        }
        return arg;
}

static void watcher_start(void) {
        bool expect = false;
        if (!atomic_compare_exchange_strong(&watcher_started, &expect, true))
                return;
        static bool at_exit;    /* registered once; a forked child inherits it */
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        pthread_mutex_lock(&watch_lock);
        if (!at_exit) {
                watch_cond_init();
                at_exit = atexit(watcher_stop) == 0;
        }
        watch_stop = false;
        watch_running = at_exit && pthread_create(&watch_thread, &a, watcher, NULL) == 0;
        pthread_mutex_unlock(&watch_lock);
        if (!watch_running) {
                vlog(VGPU_LOG_ERROR, "cannot start the utilisation watcher: compute share on estimates only");
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                        atomic_store(&region->share[d].others_until_ns, UINT64_MAX);
        }
        pthread_attr_destroy(&a);
}
