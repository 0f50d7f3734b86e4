/* libmigkit-vgpu.so: charging, the cap's check before an allocation, what
 * is tracked after it, and the stream-ordered pools' charges (hook.h lists
 * the interposer's files and their order). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/hook.h"

void vgpu_log_oom(unsigned dev, uint64_t size) {
        uint64_t cap = vgpu_reg->mem_limit[dev], used = vgpu_region_used(vgpu_reg, dev);
        vgpu_log(VGPU_LOG_WARNING,
                 "out of memory: allocation of %llu bytes on device %u refused, the container's cap is %llu bytes "
                 "(%llu MiB, CUDA_DEVICE_MEMORY_LIMIT_%u) and %llu bytes are in use",
                 (unsigned long long) size, dev, (unsigned long long) cap, (unsigned long long) (cap >> 20), dev,
                 (unsigned long long) used);
}

CUresult vgpu_charge_raw(unsigned dev, uint64_t size, int *ret_slot) {
        int s = vgpu_slot();
        if (s < 0)
                return CUDA_ERROR_OUT_OF_MEMORY;
        /* Before refusing: pools may have given memory back at a synchronisation. */
        if (vgpu_region_charge(vgpu_reg, s, dev, size, vgpu_pid_alive) < 0 &&
            (!vgpu_pools_settle_all() || vgpu_region_charge(vgpu_reg, s, dev, size, vgpu_pid_alive) < 0)) {
                vgpu_log_oom(dev, size);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *ret_slot = s;
        return CUDA_SUCCESS;
}

CUresult vgpu_record(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev, int s, vgpu_undo_fn undo) {
        if (vgpu_track_put(kind, key, size, dev) < 0) {
                undo(key);
                vgpu_uncharge(s, dev, size);
                vgpu_log(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more",
                         VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

CUresult vgpu_undo_free(uint64_t key) {
        cuMemFree_v2_fn f = atomic_load(&real_cuMemFree_v2);
        return f ? f((CUdeviceptr) key) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult vgpu_undo_release(uint64_t key) {
        cuMemRelease_fn f = atomic_load(&real_cuMemRelease);
        return f ? f((CUmemGenericAllocationHandle) key) : CUDA_ERROR_NOT_INITIALIZED;
}

uint64_t vgpu_capped_total(unsigned dev, uint64_t real_total) {
        uint64_t cap = vgpu_reg->mem_limit[dev];
        return cap < real_total ? cap : real_total;
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
 * may be above (never over the cap). The hooks are hook-memory.c's. */

#define POOLS 64
struct vgpu_pool_use {
        CUmemoryPool pool;      /* NULL: free entry */
        unsigned dev;
        uint64_t live, charged;
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_pool_use pools[POOLS];
static _Atomic unsigned n_pools;       /* entries ever used: the views settle them */

/* Under pool_lock: the entry of pool p (creating it on dev), or NULL when full. */
static struct vgpu_pool_use *pool_entry(CUmemoryPool p, unsigned dev, bool create) {
        struct vgpu_pool_use *free_e = NULL;
        for (unsigned i = 0; i < POOLS; i++) {
                if (pools[i].pool == p)
                        return &pools[i];
                if (!pools[i].pool && !free_e)
                        free_e = &pools[i];
        }
        if (!create || !free_e)
                return NULL;
        *free_e = (struct vgpu_pool_use) { .pool = p, .dev = dev };
        unsigned used = (unsigned) (free_e - pools) + 1, cur = atomic_load(&n_pools);
        while (cur < used && !atomic_compare_exchange_weak(&n_pools, &cur, used))
                ;
        return free_e;
}

/* Under pool_lock: the pool's charge brought to max(live, reserved). */
static void pool_settle(struct vgpu_pool_use *e) {
        cuuint64_t res = 0;
        int s = atomic_load(&vgpu_own_slot);
        if (s < 0)
                return;
        if (!real_cuMemPoolGetAttribute ||
            real_cuMemPoolGetAttribute(e->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS)
                res = 0;
        uint64_t target = res > e->live ? res : e->live;
        if (e->charged > target) {
                vgpu_uncharge(s, e->dev, e->charged - target);
                e->charged = target;
        } else if (target > e->charged) {
                if (vgpu_region_charge(vgpu_reg, s, e->dev, target - e->charged, vgpu_pid_alive) == 0)
                        e->charged = target;
                else
                        vgpu_log(VGPU_LOG_WARNING, "pool on device %u reserves %llu bytes past the cap (%llu charged)",
                                 e->dev, (unsigned long long) target, (unsigned long long) e->charged);
        }
}

bool vgpu_pools_settle_all(void) {
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

struct vgpu_pool_use *vgpu_pool_added(CUmemoryPool p, unsigned dev, uint64_t size) {
        pthread_mutex_lock(&pool_lock);
        struct vgpu_pool_use *e = p ? pool_entry(p, dev, true) : NULL;
        if (e) {
                e->live += size;
                e->charged += size;
                pool_settle(e);
        }
        pthread_mutex_unlock(&pool_lock);
        return e;
}

void vgpu_pool_add_undo(struct vgpu_pool_use *e, int s, unsigned dev, uint64_t size) {
        pthread_mutex_lock(&pool_lock);
        if (e) {
                e->live -= size;
                pool_settle(e);
        } else
                vgpu_uncharge(s, dev, size);
        pthread_mutex_unlock(&pool_lock);
}

void vgpu_pool_freed(CUmemoryPool p, unsigned dev, uint64_t size) {
        pthread_mutex_lock(&pool_lock);
        struct vgpu_pool_use *e = pool_entry(p, dev, false);
        if (e) {
                e->live = e->live >= size ? e->live - size : 0;
                pool_settle(e);
        }
        pthread_mutex_unlock(&pool_lock);
}

void vgpu_pool_settle(CUmemoryPool p) {
        pthread_mutex_lock(&pool_lock);
        struct vgpu_pool_use *e = pool_entry(p, 0, false);
        if (e)
                pool_settle(e);
        pthread_mutex_unlock(&pool_lock);
}

void vgpu_pool_forget(CUmemoryPool p, int s) {
        pthread_mutex_lock(&pool_lock);
        struct vgpu_pool_use *e = pool_entry(p, 0, false);
        if (e) {
                if (s >= 0)
                        vgpu_uncharge(s, e->dev, e->charged);
                *e = (struct vgpu_pool_use) { 0 };
        }
        pthread_mutex_unlock(&pool_lock);
}
