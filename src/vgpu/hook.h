/* libmigkit-vgpu.so's interposer, the files of src/vgpu/hook-*.c: what they
 * share. Nothing here is exported: the library's exported symbols are the
 * hooks (EXPORT) and dlsym, nothing else (C_VISIBILITY_PRESET hidden).
 *
 * How a program reaches our hooks (hook-resolve.c):
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
 * track.c (mmap'ed tables).
 *
 * Layers: the files, each calling only the ones above it (no circle; `nm -u`
 * of an object names no function or variable of a file below it; checked by
 * `scripts/check-layering --objects` with sim/cuda/check-layers.py):
 *   hook-state.c    the process's state (limits, region, slot, the compute
 *                   share's counters), logging, fork and exit
 *   hook-devmap.c   which device is which: CUDA_VISIBLE_DEVICES, UUIDs,
 *                   NVML device -> CUDA index, the devices' facts at cuInit
 *   hook-resolve.c  start-up (vgpu_init), the real entry points, the dlsym
 *                   and cuGetProcAddress interposition
 *   hook-charge.c   charging: the cap's check, tracking, the pools' charges
 *   hook-context.c  contexts: measured, charged (the primary one on first
 *                   use: vgpu_charge), their hooks
 *   hook-graph.c    CUDA graphs' memory: the graph pool's reserve charged,
 *                   launches past the cap refused (graph.h)
 *   hook-memory.c   allocation, free, stream-ordered pools, memory views
 *   hook-vmm.c      virtual memory management (cuMemCreate ... cuMemUnmap)
 *   hook-nvml.c     NVML's memory views and process lists
 *   hook-watcher.c  the utilisation watcher (measured share corrects the
 *                   estimates)
 *   hook-launch.c   compute share at launches, cuInit
 * The hook table is not a list in one file: each file puts its entries in
 * the section "vgpu_hooks" (VGPU_HOOK_TABLE), which hook-resolve.c walks,
 * so the look-up needs no file above it. */
#pragma once

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "vgpu/config.h"
#include "vgpu/cuda-abi.h"
#include "vgpu/region.h"
#include "vgpu/share.h"
#include "vgpu/track.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

/* ---- the functions we hook, by file: name, return type, parameters, arguments ---- */

#define VGPU_RESOLVE_HOOKS(X)                                                                                 \
        X(cuGetProcAddress, CUresult, (const char *symbol, void **pfn, int ver, cuuint64_t flags),           \
          (symbol, pfn, ver, flags))                                                                         \
        X(cuGetProcAddress_v2, CUresult,                                                                     \
          (const char *symbol, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st),    \
          (symbol, pfn, ver, flags, st))

#define VGPU_MEMORY_HOOKS(X)                                                                                  \
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
        X(cuMemGetInfo_v2, CUresult, (size_t *free, size_t *total), (free, total))                           \
        X(cuDeviceTotalMem_v2, CUresult, (size_t *bytes, CUdevice dev), (bytes, dev))

#define VGPU_VMM_HOOKS(X)                                                                                     \
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
          (h, os, type))

#define VGPU_CONTEXT_HOOKS(X)                                                                                 \
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
        X(cuCtxDestroy_v2, CUresult, (CUcontext ctx), (ctx))

#define VGPU_LAUNCH_HOOKS(X)                                                                                  \
        X(cuInit, CUresult, (unsigned int flags), (flags))                                                   \
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

/* Every CUDA driver function we hook (docs/vgpu.md). */
#define VGPU_CUDA_HOOKS(X)                                                                                    \
        VGPU_RESOLVE_HOOKS(X) VGPU_MEMORY_HOOKS(X) VGPU_VMM_HOOKS(X) VGPU_CONTEXT_HOOKS(X) VGPU_LAUNCH_HOOKS(X)

#define LAUNCH_PARAMS                                                                                         \
        (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,  \
         unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
#define LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra)
#define COOP_PARAMS                                                                                           \
        (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,  \
         unsigned int bz, unsigned int shmem, CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params)

/* Every NVML function we hook (hook-nvml.c). */
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

/* Each hook's real entry (real_<name>, defined in hook-state.c) and our export. */
#define VGPU_DECLARE_REAL(name, ret, params, args)                                                           \
        typedef ret(*name##_fn) params;                                                                      \
        extern HIDDEN _Atomic(name##_fn) real_##name;                                                        \
        EXPORT ret name params;
VGPU_CUDA_HOOKS(VGPU_DECLARE_REAL)
VGPU_NVML_HOOKS(VGPU_DECLARE_REAL)

/* ---- the hook table ---- */

/* One hooked function. 32 bytes, aligned to 32: the entries of every file
 * lie in one section with no gap between them. */
struct vgpu_hook {
        const char *name;
        void *fn;                /* ours */
        _Atomic(void *) *real;   /* the real entry, once known */
        bool nvml;
} __attribute__((aligned(32)));

#define VGPU_HOOK_ENTRY(name, ret, params, args) { #name, (void *) name, (_Atomic(void *) *) &real_##name, false },
#define VGPU_HOOK_ENTRY_NVML(name, ret, params, args) { #name, (void *) name, (_Atomic(void *) *) &real_##name, true },
/* A file's entries in the table: VGPU_HOOK_TABLE(memory, VGPU_MEMORY_HOOKS(VGPU_HOOK_ENTRY)). */
#define VGPU_HOOK_TABLE(file, ...)                                                                           \
        static const struct vgpu_hook vgpu_hooks_##file[]                                                    \
                __attribute__((used, section("vgpu_hooks"))) = { __VA_ARGS__ }

/* The real entry of a hook, or CUDA_ERROR_NOT_INITIALIZED. */
#define REAL(name)                                                                                           \
        name##_fn real = atomic_load(&real_##name);                                                          \
        if (!real)                                                                                           \
                return CUDA_ERROR_NOT_INITIALIZED

/* ---- hook-state.c: the process's state ---- */

extern HIDDEN struct vgpu_config vgpu_cfg;
extern HIDDEN struct vgpu_region *vgpu_reg;
extern HIDDEN _Atomic int vgpu_own_slot;        /* -1 until claimed (vgpu_slot) */
extern HIDDEN pid_t vgpu_pid;
extern HIDDEN bool vgpu_on;                     /* limits configured and control not disabled */
extern HIDDEN bool vgpu_any_sm_limit;
extern HIDDEN pthread_once_t vgpu_init_once;

/* The compute share: the watcher's estimates and what launches charged. */
extern HIDDEN struct vgpu_share_est vgpu_share_estimate[VGPU_MAX_DEVICES];  /* the watcher's */
extern HIDDEN _Atomic double vgpu_share_factor[VGPU_MAX_DEVICES];    /* its result, read by launches */
extern HIDDEN _Atomic uint64_t vgpu_share_base[VGPU_MAX_DEVICES];    /* base estimates launched, ns */
extern HIDDEN _Atomic uint64_t vgpu_share_charged[VGPU_MAX_DEVICES]; /* what the bucket was charged, ns */
extern HIDDEN _Atomic bool vgpu_share_calibrated[VGPU_MAX_DEVICES];  /* a first measurement came */
extern HIDDEN _Atomic bool vgpu_share_used[VGPU_MAX_DEVICES];        /* this process launched on it: the watcher looks */

/* The watcher thread's control (hook-watcher.c), here so that a fork
 * resets it. */
extern HIDDEN _Atomic bool vgpu_watcher_started;
extern HIDDEN pthread_mutex_t vgpu_watch_lock;
extern HIDDEN pthread_cond_t vgpu_watch_cond;
extern HIDDEN bool vgpu_watch_stop, vgpu_watch_running;
extern HIDDEN pthread_t vgpu_watch_thread;
HIDDEN void vgpu_watch_cond_init(void);

/* Driver and NVML functions we call but do not hook (hook-resolve.c finds them). */
typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
typedef CUresult (*cuDevicePrimaryCtxGetState_fn)(CUdevice, unsigned int *, int *);
typedef CUresult (*cuDeviceGetCount_fn)(int *);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *, int);
typedef CUresult (*cuDeviceGetUuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*cuDeviceGetAttribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuDeviceGetMemPool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolGetAttribute_fn)(CUmemoryPool, int, void *);
typedef CUresult (*cuDeviceGetGraphMemAttribute_fn)(CUdevice, int, void *);
typedef CUresult (*cuGraphGetNodes_fn)(CUgraph, CUgraphNode *, size_t *);
typedef CUresult (*cuGraphNodeGetType_fn)(CUgraphNode, int *);
typedef CUresult (*cuGraphMemAllocNodeGetParams_fn)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*cuGraphChildGraphNodeGetGraph_fn)(CUgraphNode, CUgraph *);
typedef CUresult (*cuStreamIsCapturing_fn)(CUstream, int *);
extern HIDDEN cuCtxGetDevice_fn real_cuCtxGetDevice;
extern HIDDEN cuDevicePrimaryCtxGetState_fn real_cuDevicePrimaryCtxGetState;
extern HIDDEN cuDeviceGetCount_fn real_cuDeviceGetCount;
extern HIDDEN cuDeviceGet_fn real_cuDeviceGet;
extern HIDDEN cuDeviceGetUuid_fn real_cuDeviceGetUuid;
extern HIDDEN cuDeviceGetAttribute_fn real_cuDeviceGetAttribute;
extern HIDDEN cuDeviceGetMemPool_fn real_cuDeviceGetMemPool;
extern HIDDEN cuMemPoolGetAttribute_fn real_cuMemPoolGetAttribute;
/* Those hook-graph.c reads its graphs with. */
extern HIDDEN cuDeviceGetGraphMemAttribute_fn real_cuDeviceGetGraphMemAttribute;
extern HIDDEN cuGraphGetNodes_fn real_cuGraphGetNodes;
extern HIDDEN cuGraphNodeGetType_fn real_cuGraphNodeGetType;
extern HIDDEN cuGraphMemAllocNodeGetParams_fn real_cuGraphMemAllocNodeGetParams;
extern HIDDEN cuGraphChildGraphNodeGetGraph_fn real_cuGraphChildGraphNodeGetGraph;
extern HIDDEN cuStreamIsCapturing_fn real_cuStreamIsCapturing;

typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetIndex_fn)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*nvmlInit_fn)(void);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByUUID_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_fn)(unsigned int, nvmlDevice_t *);
extern HIDDEN _Atomic(nvmlDeviceGetUUID_fn) real_nvmlDeviceGetUUID;
extern HIDDEN _Atomic(nvmlDeviceGetIndex_fn) real_nvmlDeviceGetIndex;

typedef void *(*dlsym_fn)(void *, const char *);
extern HIDDEN dlsym_fn vgpu_real_dlsym;      /* hook-resolve.c */

/* Logging: a stack buffer and write(2), nothing allocated. */
__attribute__((format(printf, 2, 3))) HIDDEN void vgpu_log(int level, const char *fmt, ...);
/* Information shown at the default level (the limits read at start). */
__attribute__((format(printf, 1, 2))) HIDDEN void vgpu_log_notice(const char *fmt, ...);

static inline bool vgpu_active(void) {
        return vgpu_on;
}

static inline int vgpu_my_slot(void) {
        return atomic_load(&vgpu_own_slot);
}

/* This process's slot in the region, claimed on first use; -1 when all are taken. */
HIDDEN int vgpu_slot_claim(void);
static inline int vgpu_slot(void) {
        int s = atomic_load(&vgpu_own_slot);
        return s >= 0 ? s : vgpu_slot_claim();
}

/* The calling thread's current CUDA device; -ENODEV without one. */
HIDDEN int vgpu_current_device(unsigned *ret);
HIDDEN void vgpu_uncharge(int s, unsigned dev, uint64_t size);
HIDDEN uint64_t vgpu_now_ns(void);
/* pthread_atfork's child handler: the child starts afresh. */
HIDDEN void vgpu_atfork_child(void);

/* ---- hook-devmap.c: which device is which ---- */

#define VGPU_CVD_MAX VGPU_MAX_DEVICES
/* CUDA_VISIBLE_DEVICES as read at start. */
struct vgpu_cvd {
        bool set;                       /* CUDA_VISIBLE_DEVICES was in the environment */
        unsigned n;
        int index[VGPU_CVD_MAX];        /* NVML index, or -1: by UUID prefix */
        char hex[VGPU_CVD_MAX][33];     /* the UUID prefix's hex digits */
};
extern HIDDEN struct vgpu_cvd vgpu_cvd;
/* CUDA device i's UUID as this process's driver gives it (vgpu_devices_record):
 * the watcher measures this process on the device it really runs on. */
extern HIDDEN char vgpu_own_uuid[VGPU_MAX_DEVICES][VGPU_UUID_LEN];
extern HIDDEN _Atomic bool vgpu_own_uuid_set[VGPU_MAX_DEVICES];
extern HIDDEN uint64_t vgpu_full_threads[VGPU_MAX_DEVICES];

HIDDEN void vgpu_cvd_load(void);
/* "GPU-xxxxxxxx-xxxx-..." of CUDA device dev (prefix as given). */
HIDDEN bool vgpu_cuda_uuid(unsigned dev, const char *prefix, char *out, size_t n);
/* CUDA's index of an NVML device, or -ENODEV when the container's CUDA
 * processes do not see it. */
HIDDEN int vgpu_nvml_dev_index(nvmlDevice_t d);
/* After cuInit: this process's slot, each device's size and UUID. */
HIDDEN void vgpu_devices_record(void);

/* ---- hook-resolve.c: start-up and the real entry points ---- */

HIDDEN void vgpu_do_init(void);
static inline void vgpu_init(void) {
        pthread_once(&vgpu_init_once, vgpu_do_init);
}
/* A libnvidia-ml handle seen: the real entries of every NVML function we
 * hook or call, where none is known yet. */
HIDDEN void vgpu_adopt_nvml(void *lib, void *(*look)(void *, const char *));

/* ---- hook-charge.c: charging ---- */

HIDDEN void vgpu_log_oom(unsigned dev, uint64_t size);
/* Charges size bytes on dev, nothing else (a context's own charge). */
HIDDEN CUresult vgpu_charge_raw(unsigned dev, uint64_t size, int *ret_slot);
/* The allocation finished: remember it, or undo it when we cannot. */
typedef CUresult (*vgpu_undo_fn)(uint64_t key);
HIDDEN CUresult vgpu_record(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev, int s,
                            vgpu_undo_fn undo);
HIDDEN CUresult vgpu_undo_free(uint64_t key);
HIDDEN CUresult vgpu_undo_release(uint64_t key);
/* The cap of dev or the real total, the smaller. */
HIDDEN uint64_t vgpu_capped_total(unsigned dev, uint64_t real_total);

/* The pools' charges (hook-memory.c's pool hooks move them). */
struct vgpu_pool_use;
/* Settles every pool of this process (before a refusal, in the views);
 * true when a charge went down. */
HIDDEN bool vgpu_pools_settle_all(void);
/* size bytes allocated from p on dev, already charged: the pool's entry
 * (created), its charge settled; NULL when p is NULL or the table is full. */
HIDDEN struct vgpu_pool_use *vgpu_pool_added(CUmemoryPool p, unsigned dev, uint64_t size);
/* vgpu_pool_added undone: e's bytes go (e NULL: size uncharged from slot s). */
HIDDEN void vgpu_pool_add_undo(struct vgpu_pool_use *e, int s, unsigned dev, uint64_t size);
/* size bytes of p on dev freed. */
HIDDEN void vgpu_pool_freed(CUmemoryPool p, unsigned dev, uint64_t size);
/* p's charge brought to its reservation (after a trim). */
HIDDEN void vgpu_pool_settle(CUmemoryPool p);
/* p is destroyed: its charge goes (from slot s when s >= 0). */
HIDDEN void vgpu_pool_forget(CUmemoryPool p, int s);

/* ---- hook-context.c: contexts ---- */

extern HIDDEN _Atomic bool vgpu_primary_seen[VGPU_MAX_DEVICES];
/* The primary context of dev in use and uncharged: charge it now. */
HIDDEN CUresult vgpu_primary_first_use(unsigned dev);

/* Charges an allocation: first the device's primary context when this
 * process uses it uncharged (the CUDA runtime gets it through a private
 * export table, never through cuDevicePrimaryCtxRetain), then size. */
static inline CUresult vgpu_charge(unsigned dev, uint64_t size, int *ret_slot) {
        if (!atomic_load_explicit(&vgpu_primary_seen[dev], memory_order_acquire)) {
                CUresult r = vgpu_primary_first_use(dev);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        return vgpu_charge_raw(dev, size, ret_slot);
}

/* ---- hook-watcher.c: the utilisation watcher ---- */

/* Starts the watcher once per process (again in a forked child). */
HIDDEN void vgpu_watcher_start(void);
