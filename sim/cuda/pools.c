/* CUDA driver simulator: stream-ordered allocation and memory pools. */
#include "cuda/internal.h"

/* ---- stream-ordered allocation and pools ---- */

static struct cu_pool *pool_new(int dev) {
        struct cu_pool *p = calloc(1, sizeof(*p));
        if (p) {
                p->magic = MAGIC_POOL;
                p->dev = dev;
        }
        return p;
}

static struct cu_pool *device_pool(int dev) {
        struct cu_dev *d = &cu_devs[dev];
        pthread_mutex_lock(&cu_lock);
        if (!d->default_pool)
                d->default_pool = pool_new(dev);
        struct cu_pool *p = d->current_pool ? d->current_pool : d->default_pool;
        pthread_mutex_unlock(&cu_lock);
        return p;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, struct cu_pool *pool, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture) { /* an allocation node of the graph: memory at its launches */
                struct cu_node *n;
                if (!dptr)
                        return CUDA_ERROR_INVALID_VALUE;
                r = cu_gmem_alloc_node(s->capture, pool ? pool->dev : c->dev, bytesize, &n);
                if (r == CUDA_SUCCESS)
                        *dptr = n->dst;
                return r;
        }
        if (!pool)
                pool = device_pool(c->dev);
        if (!pool)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return cu_mem_alloc(dptr, bytesize, ALLOC_DEVICE, pool);
}

CU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
        return alloc_async(dptr, bytesize, NULL, hStream);
}

CU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL)
                return CUDA_ERROR_INVALID_VALUE;
        return alloc_async(dptr, bytesize, p, hStream);
}

CU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture) { /* a free node: only of a graph allocation */
                struct cu_node *n;
                return cu_gmem_free_node(s->capture, dptr, &n);
        }
        return cu_mem_free(dptr, true);
}

CU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!pool || !poolProps || poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            poolProps->location.id < 0 || poolProps->location.id >= cu_ndevs)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_pool *p = pool_new(poolProps->location.id);
        if (!p)
                return CUDA_ERROR_OUT_OF_MEMORY;
        *pool = (CUmemoryPool) p;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        cu_arena_free_pool(p);
        cu_pool_trim(p, 0);
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].current_pool == p)
                        cu_devs[i].current_pool = NULL;
        pthread_mutex_unlock(&cu_lock);
        p->magic = 0;
        free(p);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        cu_pool_trim(p, minBytesToKeep);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL || !value)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        CUresult r = CUDA_SUCCESS;
        switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *(cuuint64_t *) value; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: /* only resets (to the current value) */
                r = *(cuuint64_t *) value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
                if (r == CUDA_SUCCESS)
                        p->reserved_high = p->reserved;
                break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
                r = *(cuuint64_t *) value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
                if (r == CUDA_SUCCESS)
                        p->high = p->used;
                break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: r = CUDA_ERROR_INVALID_VALUE; break; /* read only */
        default: break; /* reuse policies: accepted */
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL || !value)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *) value = p->release_threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *) value = p->reserved; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *) value = p->used; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *) value = p->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *) value = p->high; break;
        default: *(int *) value = 1; break;
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
        (void) map;
        (void) count;
        struct cu_pool *p = (struct cu_pool *) pool;
        return p && p->magic == MAGIC_POOL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location) {
        (void) location;
        struct cu_pool *p = (struct cu_pool *) memPool;
        if (!p || p->magic != MAGIC_POOL || !flags)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pool_out)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        if (!d->default_pool)
                d->default_pool = pool_new(dev);
        *pool_out = (CUmemoryPool) d->default_pool;
        pthread_mutex_unlock(&cu_lock);
        return *pool_out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CU_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pool)
                return CUDA_ERROR_INVALID_VALUE;
        if (d->current_pool) {
                *pool = (CUmemoryPool) d->current_pool;
                return CUDA_SUCCESS;
        }
        return cuDeviceGetDefaultMemPool(pool, dev);
}

CU_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
        struct cu_dev *d;
        struct cu_pool *p = (struct cu_pool *) pool;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!p || p->magic != MAGIC_POOL || p->dev != dev)
                return CUDA_ERROR_INVALID_VALUE;
        d->current_pool = p;
        return CUDA_SUCCESS;
}
