/* CUDA driver simulator: device, managed and host allocations, memory info,
 * pointer attributes (arena.c holds the address range and allocation table). */
#include <sys/mman.h>

#include "cuda/internal.h"

static CUresult current(struct cu_ctx **ret) {
        return cu_ctx_or_current(NULL, ret);
}

CUresult cu_mem_alloc(CUdeviceptr *dptr, size_t bytes, enum cu_alloc_kind kind, struct cu_pool *pool) {
        struct cu_ctx *c;
        struct cu_alloc *a;
        CUresult r = current(&c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!dptr || bytes == 0)
                return CUDA_ERROR_INVALID_VALUE;
        int dev = pool ? pool->dev : c->dev;
        pthread_mutex_lock(&cu_lock);
        r = pool ? cu_pool_take(pool, bytes) : CUDA_SUCCESS; /* a pool charges what it reserves */
        if (r == CUDA_SUCCESS)
                r = cu_arena_alloc(bytes, 512, kind, dev, pool ? 0 : bytes, c, &a);
        if (r == CUDA_SUCCESS) {
                a->pool = pool;
                *dptr = a->base;
        } else if (pool) {
                pool->used -= bytes;
                cu_pool_trim(pool, pool->release_threshold);
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
        return cu_mem_alloc(dptr, bytesize, ALLOC_DEVICE, NULL);
}

CU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes) {
        if (!pPitch || WidthInBytes == 0 || Height == 0 ||
            (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
                return CUDA_ERROR_INVALID_VALUE;
        size_t pitch = cu_round_up(WidthInBytes, 512);
        if (Height > SIZE_MAX / pitch)
                return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = cu_mem_alloc(dptr, pitch * Height, ALLOC_DEVICE, NULL);
        if (r == CUDA_SUCCESS)
                *pPitch = pitch;
        return r;
}

CU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
        if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
                return CUDA_ERROR_INVALID_VALUE;
        return cu_mem_alloc(dptr, bytesize, ALLOC_MANAGED, NULL);
}

CUresult cu_mem_free(CUdeviceptr dptr, bool async) {
        struct cu_ctx *c;
        CUresult r = current(&c);
        (void) async;
        if (r != CUDA_SUCCESS)
                return r;
        if (dptr == 0)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(dptr);
        if (!a || a->base != dptr || (a->kind != ALLOC_DEVICE && a->kind != ALLOC_MANAGED) || a->ipc) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (a->graph) { /* a graph allocation a launch left in use goes back to its graph pool */
                r = cu_gmem_release(a, true);
                pthread_mutex_unlock(&cu_lock);
                return r;
        }
        cu_arena_free(a);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
        struct cu_ctx *c;
        /* cudaFree waits for the device, as the real driver does for a free. */
        if (current(&c) == CUDA_SUCCESS)
                cu_ctx_sync(c);
        return cu_mem_free(dptr, false);
}

CU_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
        struct cu_ctx *c;
        CUresult r = current(&c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!free_bytes || !total)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_dev *d = &cu_devs[c->dev];
        uint64_t used = cu_dev_used(d);
        *total = d->total_bytes;
        *free_bytes = used >= d->total_bytes ? 0 : d->total_bytes - used;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(dptr);
        if (a) {
                if (pbase)
                        *pbase = a->base;
                if (psize)
                        *psize = a->size;
        }
        pthread_mutex_unlock(&cu_lock);
        return a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- host memory ---- */

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags) {
        struct cu_alloc *a;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!pp || bytesize == 0)
                return CUDA_ERROR_INVALID_VALUE;
        void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
        a = calloc(1, sizeof(*a));
        if (!a) {
                munmap(p, bytesize);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *a = (struct cu_alloc) { .base = (uintptr_t) p, .size = bytesize, .kind = ALLOC_HOST, .dev = -1,
                                 .ctx = cu_current(), .flags = flags };
        pthread_mutex_lock(&cu_lock);
        bool ok = cu_table_add(a);
        pthread_mutex_unlock(&cu_lock);
        if (!ok) {
                munmap(p, bytesize);
                free(a);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *pp = p;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
        return host_alloc(pp, bytesize, 0);
}

CU_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
        return host_alloc(pp, bytesize, Flags);
}

/* Takes the host allocation or registration of kind `kind` that starts at p
 * out of the table (NULL when there is none). */
static struct cu_alloc *host_take(void *p, enum cu_alloc_kind kind) {
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find((uintptr_t) p);
        if (a && a->base == (uintptr_t) p && a->kind == kind)
                cu_table_remove(a);
        else
                a = NULL;
        pthread_mutex_unlock(&cu_lock);
        return a;
}

CU_EXPORT CUresult cuMemFreeHost(void *p) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        struct cu_alloc *a = host_take(p, ALLOC_HOST);
        if (!a)
                return CUDA_ERROR_INVALID_VALUE;
        munmap((void *) a->base, a->size);
        free(a);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!pdptr || Flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find((uintptr_t) p);
        bool ok = a && (a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED);
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        *pdptr = (CUdeviceptr) p;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find((uintptr_t) p);
        bool ok = a && (a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED);
        if (ok && pFlags)
                *pFlags = a->flags;
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) {
        struct cu_alloc *a;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!p || bytesize == 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        if (cu_alloc_find((uintptr_t) p)) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
        a = calloc(1, sizeof(*a));
        if (a) {
                *a = (struct cu_alloc) { .base = (uintptr_t) p, .size = bytesize, .kind = ALLOC_REGISTERED,
                                         .dev = -1, .flags = Flags };
                if (!cu_table_add(a)) {
                        free(a);
                        a = NULL;
                }
        }
        pthread_mutex_unlock(&cu_lock);
        return a ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CU_EXPORT CUresult cuMemHostUnregister(void *p) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        struct cu_alloc *a = host_take(p, ALLOC_REGISTERED);
        if (!a)
                return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        free(a);
        return CUDA_SUCCESS;
}


/* ---- pointer attributes ---- */

static CUresult pointer_attr(void *data, CUpointer_attribute attr, CUdeviceptr ptr, struct cu_alloc *a) {
        bool dev = a && a->kind != ALLOC_HOST && a->kind != ALLOC_REGISTERED;
        switch (attr) {
        case CU_POINTER_ATTRIBUTE_CONTEXT:
                *(CUcontext *) data = a ? (CUcontext) a->ctx : NULL;
                return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(unsigned *) data = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(CUdeviceptr *) data = ptr;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
                if (!a || (dev && a->kind != ALLOC_MANAGED))
                        return CUDA_ERROR_INVALID_VALUE;
                *(void **) data = (void *) ptr;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
                *(unsigned *) data = a && a->kind == ALLOC_MANAGED;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(int *) data = a->dev >= 0 ? a->dev : (a->ctx ? a->ctx->dev : 0);
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(CUdeviceptr *) data = a->base;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(size_t *) data = a->size;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MAPPED:
                *(int *) data = a != NULL;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                *(unsigned long long *) data = a->base;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
                *(int *) data = 1;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
                return CUDA_ERROR_NOT_SUPPORTED;
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
                *(unsigned long long *) data = 0;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
                *(int *) data = dev && a->kind == ALLOC_DEVICE && !a->pool;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
                *(CUmemoryPool *) data = a ? (CUmemoryPool) a->pool : NULL;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
                *(unsigned *) data = a ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0;
                return CUDA_SUCCESS;
        default:
                if (!a)
                        return CUDA_ERROR_INVALID_VALUE;
                memset(data, 0, sizeof(int));
                return CUDA_SUCCESS;
        }
}

CU_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!data)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        r = pointer_attr(data, attribute, ptr, cu_alloc_find(ptr));
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                          CUdeviceptr ptr) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!attributes || !data)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(ptr);
        for (unsigned i = 0; i < numAttributes; i++) {
                if (!data[i])
                        continue;
                if (pointer_attr(data[i], attributes[i], ptr, a) != CUDA_SUCCESS) {
                        /* Unknown pointers: zeroes (memory type 0 = unregistered host memory). */
                        size_t sz = attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
                                                    attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                                                    attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                                                    attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                                                    attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
                                                    attributes[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID
                                            ? 8
                                            : 4;
                        memset(data[i], 0, sz);
                        if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
                                *(int *) data[i] = -2;
                }
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr) {
        (void) value;
        (void) attribute;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        bool ok = cu_alloc_find(ptr) != NULL;
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
