/* libmigkit-vgpu.so: allocation and free, stream-ordered pools, the memory
 * views of CUDA (hook.h lists the interposer's files and their order; the
 * pools' charges are hook-charge.c's). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/graph.h"
#include "vgpu/hook.h"

/* ---- allocation hooks ---- */

static CUresult alloc_ptr(CUdeviceptr *dptr, uint64_t size, CUresult res, unsigned dev, int s) {
        if (res != CUDA_SUCCESS) {
                vgpu_uncharge(s, dev, size);
                return res;
        }
        return vgpu_record(VGPU_TRACK_PTR, *dptr, size, dev, s, vgpu_undo_free);
}

/* The pointer allocations: charge size on the current device, make the real
 * call, record the result (or uncharge on failure). Without limits, or off a
 * device we account, the real call alone. */
#define ALLOC_TRACKED(call)                                                                                  \
        do {                                                                                                 \
                unsigned dev_;                                                                               \
                int s_;                                                                                      \
                if (!vgpu_on || !dptr || vgpu_current_device(&dev_) < 0 || dev_ >= VGPU_MAX_DEVICES)               \
                        return call;                                                                         \
                CUresult r_ = vgpu_charge(dev_, size, &s_);                                                       \
                if (r_ != CUDA_SUCCESS)                                                                      \
                        return r_;                                                                           \
                return alloc_ptr(dptr, size, call, dev_, s_);                                                \
        } while (0)

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
        vgpu_init();
        REAL(cuMemAlloc_v2);
        ALLOC_TRACKED(real(dptr, size));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
        vgpu_init();
        REAL(cuMemAllocManaged);
        ALLOC_TRACKED(real(dptr, size, flags));
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
        vgpu_init();
        REAL(cuMemAllocPitch_v2);
        unsigned dev;
        int s;
        if (!vgpu_on || !dptr || !pitch || vgpu_current_device(&dev) < 0 || dev >= VGPU_MAX_DEVICES)
                return real(dptr, pitch, width, height, elem);
        uint64_t want;
        if (__builtin_mul_overflow((uint64_t) width, (uint64_t) height, &want))
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = vgpu_charge(dev, want, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = real(dptr, pitch, width, height, elem);
        if (r != CUDA_SUCCESS) {
                vgpu_uncharge(s, dev, want);
                return r;
        }
        /* The driver pads rows: charge what it really took. */
        uint64_t got;
        if (__builtin_mul_overflow((uint64_t) *pitch, (uint64_t) height, &got))
                got = want;
        if (got > want && vgpu_region_charge(vgpu_reg, s, dev, got - want, vgpu_pid_alive) < 0) {
                vgpu_undo_free(*dptr);
                vgpu_uncharge(s, dev, want);
                vgpu_log_oom(dev, got);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (got < want)
                vgpu_uncharge(s, dev, want - got);
        return vgpu_record(VGPU_TRACK_PTR, *dptr, got, dev, s, vgpu_undo_free);
}

/* ---- stream-ordered pools (their charges: hook-charge.c) ---- */

/* A pool allocation: charge size first (announce-then-check), then the
 * pool's charge is settled against its reservation. */
struct async_args {
        void *real;
        CUdeviceptr *dptr;
        size_t size;
        CUmemoryPool pool;
        CUstream st;
};

/* A stream-ordered allocation through `call`. One captured in a stream is a
 * graph's node, charged at the graph's launches (hook-graph.c), not here. */
static CUresult pool_alloc(struct async_args *arg, CUresult (*call)(void *)) {
        CUdeviceptr *dptr = arg->dptr;
        uint64_t size = arg->size;
        CUmemoryPool p = arg->pool;
        unsigned dev;
        int s;
        if (!vgpu_on || !dptr || vgpu_graph_capturing(arg->st) || vgpu_current_device(&dev) < 0 ||
            dev >= VGPU_MAX_DEVICES)
                return call(arg);
        if (!p && (!real_cuDeviceGetMemPool || real_cuDeviceGetMemPool(&p, (CUdevice) dev) != CUDA_SUCCESS))
                p = NULL;
        CUresult r = vgpu_charge(dev, size, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = call(arg);
        if (r != CUDA_SUCCESS) {
                vgpu_uncharge(s, dev, size);
                return r;
        }
        struct vgpu_pool_use *e = vgpu_pool_added(p, dev, size);
        if (vgpu_track_put_aux(VGPU_TRACK_PTR, *dptr, size, dev, e ? (uint64_t) (uintptr_t) p : 0) < 0) {
                vgpu_undo_free(*dptr);
                vgpu_pool_add_undo(e, s, dev, size);
                vgpu_log(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more", VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

static CUresult call_alloc_async(void *a) {
        struct async_args *x = a;
        return ((cuMemAllocAsync_fn) x->real)(x->dptr, x->size, x->st);
}

static CUresult call_alloc_from_pool(void *a) {
        struct async_args *x = a;
        return ((cuMemAllocFromPoolAsync_fn) x->real)(x->dptr, x->size, x->pool, x->st);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream st) {
        vgpu_init();
        REAL(cuMemAllocAsync);
        struct async_args a = { (void *) real, dptr, size, NULL, st };
        return pool_alloc(&a, call_alloc_async);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream st) {
        vgpu_init();
        REAL(cuMemAllocAsync_ptsz);
        struct async_args a = { (void *) real, dptr, size, NULL, st };
        return pool_alloc(&a, call_alloc_async);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool p, CUstream st) {
        vgpu_init();
        REAL(cuMemAllocFromPoolAsync);
        struct async_args a = { (void *) real, dptr, size, p, st };
        return pool_alloc(&a, call_alloc_from_pool);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool p, CUstream st) {
        vgpu_init();
        REAL(cuMemAllocFromPoolAsync_ptsz);
        struct async_args a = { (void *) real, dptr, size, p, st };
        return pool_alloc(&a, call_alloc_from_pool);
}

/* A stream-ordered free: the pointer's bytes leave the pool's live ones; the
 * pool's charge follows its reservation. */
static CUresult pool_free(CUdeviceptr dptr, CUresult (*call)(CUdeviceptr, CUstream), CUstream st) {
        uint64_t size, aux;
        unsigned dev;
        int s = vgpu_my_slot();
        if (!vgpu_on || s < 0 || vgpu_track_take_aux(VGPU_TRACK_PTR, dptr, &size, &dev, &aux) < 0)
                return call(dptr, st);
        CUresult r = call(dptr, st);
        if (r != CUDA_SUCCESS) {
                if (vgpu_track_put_aux(VGPU_TRACK_PTR, dptr, size, dev, aux) < 0 && !aux)
                        vgpu_uncharge(s, dev, size);
                return r;
        }
        if (!aux) {
                vgpu_uncharge(s, dev, size);
                return r;
        }
        vgpu_pool_freed((CUmemoryPool) (uintptr_t) aux, dev, size);
        return r;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
        vgpu_init();
        REAL(cuMemPoolTrimTo);
        CUresult r = real(p, keep);
        if (r == CUDA_SUCCESS && vgpu_on)
                vgpu_pool_settle(p);
        return r;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) {
        vgpu_init();
        REAL(cuMemPoolDestroy);
        CUresult r = real(p);
        int s = vgpu_my_slot();
        if (r == CUDA_SUCCESS && vgpu_on)
                vgpu_pool_forget(p, s);
        return r;
}

/* Takes the allocation out of the table before the real free (the address
 * cannot be handed out again until then) and puts it back if the free fails. */
#define FREE_TRACKED(kind, key, call)                                                                         \
        do {                                                                                                 \
                uint64_t size_;                                                                              \
                unsigned dev_;                                                                               \
                int s_ = vgpu_my_slot();                                                              \
                if (!vgpu_on || s_ < 0 || vgpu_track_take(kind, (key), &size_, &dev_) < 0)                     \
                        return call;                                                                         \
                CUresult r_ = call;                                                                          \
                if (r_ == CUDA_SUCCESS)                                                                      \
                        vgpu_uncharge(s_, dev_, size_);                                                           \
                else if (vgpu_track_put(kind, (key), size_, dev_) < 0)                                       \
                        vgpu_uncharge(s_, dev_, size_);                                                           \
                return r_;                                                                                   \
        } while (0)

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
        vgpu_init();
        REAL(cuMemFree_v2);
        FREE_TRACKED(VGPU_TRACK_PTR, dptr, real(dptr));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream st) {
        vgpu_init();
        REAL(cuMemFreeAsync);
        return pool_free(dptr, real, st);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream st) {
        vgpu_init();
        REAL(cuMemFreeAsync_ptsz);
        return pool_free(dptr, real, st);
}

/* ---- memory views ---- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
        vgpu_init();
        REAL(cuMemGetInfo_v2);
        CUresult r = real(free_b, total_b);
        unsigned dev;
        if (r != CUDA_SUCCESS || !vgpu_on || !free_b || !total_b || vgpu_current_device(&dev) < 0 ||
            dev >= VGPU_MAX_DEVICES || vgpu_reg->mem_limit[dev] == VGPU_UNLIMITED)
                return r;
        if (!atomic_load_explicit(&vgpu_primary_seen[dev], memory_order_acquire))
                (void) vgpu_primary_first_use(dev);
        vgpu_pools_settle_all();
        uint64_t total = vgpu_capped_total(dev, *total_b), used = vgpu_region_used_live(vgpu_reg, dev, vgpu_pid_alive);
        uint64_t free_cap = used < total ? total - used : 0;
        *total_b = total;
        *free_b = free_cap < *free_b ? free_cap : *free_b;
        return r;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
        vgpu_init();
        REAL(cuDeviceTotalMem_v2);
        CUresult r = real(bytes, dev);
        if (r == CUDA_SUCCESS && vgpu_on && bytes && dev >= 0 && dev < VGPU_MAX_DEVICES &&
            vgpu_reg->mem_limit[dev] != VGPU_UNLIMITED)
                *bytes = vgpu_capped_total((unsigned) dev, *bytes);
        return r;
}

VGPU_HOOK_TABLE(memory, VGPU_MEMORY_HOOKS(VGPU_HOOK_ENTRY));
