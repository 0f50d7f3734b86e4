/* libmigkit-vgpu.so: contexts (hook.h lists the interposer's files and
 * their order).
 *
 * A context holds device memory of the driver's (HAMi-core charges it too).
 * Its size is what NVML's used memory of the device grew by across the
 * creation; the region keeps the smallest size measured per device (a
 * measurement that another process's allocation inflated is not kept) and
 * supplies it when a measurement fails. The primary context is charged
 * while this process retains it; a created context until it is destroyed. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/hook.h"

HIDDEN _Atomic bool vgpu_primary_seen[VGPU_MAX_DEVICES];
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[VGPU_MAX_DEVICES];
static uint64_t primary_charged[VGPU_MAX_DEVICES];
static bool primary_implicit[VGPU_MAX_DEVICES]; /* charged on first use, not by a retain */
static nvmlDeviceGetHandleByUUID_fn ctx_by_uuid;
static bool ctx_nvml_tried;
#define CTX_MAX_BYTES (4ull << 30)      /* a larger "context" was another process's allocation */

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
                        vgpu_adopt_nvml(lib, vgpu_real_dlsym);
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
        if (!(vgpu_cuda_uuid(dev, "GPU-", uuid, sizeof(uuid)) && ctx_by_uuid(uuid, &h) == NVML_SUCCESS) &&
            !(vgpu_cuda_uuid(dev, "MIG-", uuid, sizeof(uuid)) && ctx_by_uuid(uuid, &h) == NVML_SUCCESS))
                return;
        if (mem && mem(h, &m) == NVML_SUCCESS) {
                r->dev_ok = true;
                r->dev = m.used;
        }
        static vgpu_nvmlProcessInfo_v2_t list[CTX_PROCS];  /* under ctx_lock */
        unsigned n = CTX_PROCS;
        nvmlReturn_t pr = procs ? procs(h, &n, list) : NVML_ERROR_FUNCTION_NOT_FOUND;
        vgpu_log(VGPU_LOG_DEBUG, "NVML process list of device %u: %d, %u entries", dev, (int) pr, n);
        if (pr == NVML_SUCCESS) {
                r->proc_ok = true;
                for (unsigned i = 0; i < n && i < CTX_PROCS; i++)
                        if (list[i].pid == (unsigned) vgpu_pid) {
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
        vgpu_log(VGPU_LOG_DEBUG, "context on device %u: this process %llu -> %llu bytes (%s), device %llu -> %llu (%s)", dev,
                  (unsigned long long) b->proc, (unsigned long long) a->proc, a->proc_found ? "listed" : a->proc_ok ? "not listed" : "no list",
                  (unsigned long long) b->dev, (unsigned long long) a->dev, a->dev_ok && b->dev_ok ? "read" : "unread");
        if (!(b->proc_ok && a->proc_found)) {
                static bool said;
                uint64_t cached = atomic_load(&vgpu_reg->ctx_size[dev]);
                if (!said && cached == 0 && a->proc_ok && b->proc_ok)
                        vgpu_log(VGPU_LOG_INFO, "NVML does not list this process under its pid %d: contexts are not "
                                            "charged until a process of the container that it lists measured one",
                                  (int) vgpu_pid);
                said = true;
                return cached;
        }
        uint64_t m = a->proc > b->proc ? a->proc - b->proc : 0;
        if (b->dev_ok && a->dev_ok && (a->dev <= b->dev || a->dev - b->dev < m))
                m = a->dev > b->dev ? a->dev - b->dev : 0;
        if (m > CTX_MAX_BYTES)
                m = 0;
        atomic_store(&vgpu_reg->ctx_size[dev], m);
        return m;
}

/* Charges a context of size bytes on dev. CUDA_ERROR_OUT_OF_MEMORY past the cap. */
static CUresult ctx_charge(unsigned dev, uint64_t size) {
        int s;
        if (size == 0)
                return CUDA_SUCCESS;
        CUresult r = vgpu_charge_raw(dev, size, &s);
        if (r == CUDA_SUCCESS)
                vgpu_region_ctx_add(vgpu_reg, s, dev, (int64_t) size);
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
CUresult vgpu_primary_first_use(unsigned dev) {
        cuDevicePrimaryCtxGetState_fn state = real_cuDevicePrimaryCtxGetState;
        unsigned flags;
        int on = 0;
        CUresult r = CUDA_SUCCESS;
        pthread_mutex_lock(&ctx_lock);
        if (primary_charged[dev] > 0 || primary_implicit[dev])
                atomic_store_explicit(&vgpu_primary_seen[dev], true, memory_order_release);
        else if (state && state((CUdevice) dev, &flags, &on) == CUDA_SUCCESS && on) {
                static struct ctx_reading before, after; /* under ctx_lock */
                int s = vgpu_slot();
                before = (struct ctx_reading) { .proc_ok = true, .proc_found = true };
                if (s >= 0)
                        before.proc = atomic_load(&vgpu_reg->slots[s].dev[dev].used);
                nvml_read(dev, &after);
                uint64_t size = ctx_size(dev, &before, &after);
                r = ctx_charge(dev, size);
                if (r == CUDA_SUCCESS) {
                        vgpu_log(VGPU_LOG_DEBUG, "primary context of device %u in use without a retain: %llu bytes charged",
                                  dev, (unsigned long long) size);
                        primary_charged[dev] = size;
                        primary_implicit[dev] = true;
                        atomic_store_explicit(&vgpu_primary_seen[dev], true, memory_order_release);
                }
        }
        pthread_mutex_unlock(&ctx_lock);
        return r;
}

static void ctx_uncharge(unsigned dev, uint64_t size) {
        int s = vgpu_my_slot();
        if (size == 0 || s < 0)
                return;
        vgpu_uncharge(s, dev, size);
        vgpu_region_ctx_add(vgpu_reg, s, dev, -(int64_t) size);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
        vgpu_init();
        REAL(cuDevicePrimaryCtxRetain);
        if (!vgpu_on || dev < 0 || dev >= VGPU_MAX_DEVICES)
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
        if (!vgpu_on || dev < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        pthread_mutex_lock(&ctx_lock);
        /* A context charged on first use stays: the runtime still holds it. */
        if (primary_refs[dev] > 0 && --primary_refs[dev] == 0 && !primary_implicit[dev]) {
                ctx_uncharge((unsigned) dev, primary_charged[dev]);
                primary_charged[dev] = 0;
                atomic_store(&vgpu_primary_seen[dev], false);
        }
        pthread_mutex_unlock(&ctx_lock);
}

/* The context is gone; a later retain charges it again. */
static void primary_reset(CUdevice dev) {
        if (!vgpu_on || dev < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        pthread_mutex_lock(&ctx_lock);
        ctx_uncharge((unsigned) dev, primary_charged[dev]);
        primary_charged[dev] = 0;
        primary_implicit[dev] = false;
        atomic_store(&vgpu_primary_seen[dev], false);
        pthread_mutex_unlock(&ctx_lock);
}

/* The pre-11 names (cuGetProcAddress hands them out for old versions) too. */
#define PRIMARY_HOOK(name, after)                                                                            \
        EXPORT CUresult name(CUdevice dev) {                                                                 \
                vgpu_init();                                                                                      \
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
                if (!vgpu_on || dev < 0 || dev >= VGPU_MAX_DEVICES || !pctx)                                  \
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
        vgpu_init();
        REAL(cuCtxCreate_v2);
        CTX_CREATE(real(pctx, fl, dev));
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *aff, int naff, unsigned int fl, CUdevice dev) {
        vgpu_init();
        REAL(cuCtxCreate_v3);
        CTX_CREATE(real(pctx, aff, naff, fl, dev));
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int fl, CUdevice dev) {
        vgpu_init();
        REAL(cuCtxCreate_v4);
        CTX_CREATE(real(pctx, params, fl, dev));
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
        vgpu_init();
        REAL(cuCtxDestroy_v2);
        uint64_t size;
        unsigned dev;
        if (!vgpu_on || vgpu_track_take(VGPU_TRACK_CTX, (uint64_t) (uintptr_t) ctx, &size, &dev) < 0)
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

VGPU_HOOK_TABLE(context, VGPU_CONTEXT_HOOKS(VGPU_HOOK_ENTRY));
