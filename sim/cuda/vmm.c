/* CUDA driver simulator: virtual memory management (cuMemCreate, reserve, map, access). */
#include <sys/mman.h>
#include <unistd.h>

#include "cuda/internal.h"

/* ---- virtual memory management ---- */

CU_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option) {
        (void) option;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!granularity || !prop)
                return CUDA_ERROR_INVALID_VALUE;
        *granularity = VMM_GRANULARITY;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
        (void) flags;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!handle || !prop || size == 0 || size % VMM_GRANULARITY != 0 ||
            prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
            prop->location.id >= cu_ndevs)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_mem_handle *h = calloc(1, sizeof(*h));
        if (!h)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        r = cu_charge(&cu_devs[prop->location.id], size);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS) {
                free(h);
                return r;
        }
        h->fd = memfd_create("cuda-sim-vmm", MFD_CLOEXEC);
        if (h->fd < 0 || ftruncate(h->fd, (off_t) size) < 0) {
                if (h->fd >= 0)
                        close(h->fd);
                cu_uncharge(&cu_devs[prop->location.id], size);
                free(h);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        h->magic = MAGIC_HANDLE;
        h->size = size;
        h->dev = prop->location.id;
        h->prop = *prop;
        *handle = (CUmemGenericAllocationHandle) (uintptr_t) h;
        return CUDA_SUCCESS;
}

static void handle_maybe_free(struct cu_mem_handle *h) {
        if (h->released && h->maps == 0) {
                close(h->fd);
                cu_uncharge(&cu_devs[h->dev], h->size);
                h->magic = 0;
                free(h);
        }
}

static struct cu_mem_handle *handle_get(CUmemGenericAllocationHandle handle) {
        struct cu_mem_handle *h = (struct cu_mem_handle *) (uintptr_t) handle;
        return h && h->magic == MAGIC_HANDLE && !h->released ? h : NULL;
}

CU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
        pthread_mutex_lock(&cu_lock);
        struct cu_mem_handle *h = handle_get(handle);
        if (h) {
                h->released = true;
                handle_maybe_free(h);
        }
        pthread_mutex_unlock(&cu_lock);
        return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
        struct cu_alloc *a;
        (void) addr; /* a hint only */
        (void) flags;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!ptr || size == 0 || size % VMM_GRANULARITY != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        r = cu_arena_alloc(size, MAX(alignment, VMM_GRANULARITY), ALLOC_VMM_RESERVE, -1, 0, cu_current(), &a);
        if (r == CUDA_SUCCESS)
                *ptr = a->base;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(ptr);
        bool ok = a && a->base == ptr && a->kind == ALLOC_VMM_RESERVE && a->size == size;
        if (ok)
                cu_arena_free(a);
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
        if (flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_mem_handle *h = handle_get(handle);
        struct cu_alloc *a = cu_alloc_find(ptr);
        CUresult r = CUDA_SUCCESS;
        if (!h || !a || a->kind != ALLOC_VMM_RESERVE || size == 0 || offset > h->size || size > h->size - offset ||
            size > a->size - (ptr - a->base))
                r = CUDA_ERROR_INVALID_VALUE;
        for (struct cu_mapping *m = cu_mappings; r == CUDA_SUCCESS && m; m = m->next)
                if (ptr < m->base + m->size && m->base < ptr + size)
                        r = CUDA_ERROR_ALREADY_MAPPED;
        struct cu_mapping *m = r == CUDA_SUCCESS ? calloc(1, sizeof(*m)) : NULL;
        if (r == CUDA_SUCCESS && (!m || mmap((void *) ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                                             (off_t) offset) == MAP_FAILED)) {
                free(m);
                r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (r == CUDA_SUCCESS) {
                *m = (struct cu_mapping) { .base = ptr, .size = size, .h = h, .next = cu_mappings };
                cu_mappings = m;
                h->maps++;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
        pthread_mutex_lock(&cu_lock);
        for (struct cu_mapping **pm = &cu_mappings; *pm; pm = &(*pm)->next) {
                struct cu_mapping *m = *pm;
                if (m->base == ptr && m->size == size) {
                        mmap((void *) ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                             -1, 0);
                        *pm = m->next;
                        m->h->maps--;
                        handle_maybe_free(m->h);
                        free(m);
                        pthread_mutex_unlock(&cu_lock);
                        return CUDA_SUCCESS;
                }
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
        if (!desc || count == 0)
                return CUDA_ERROR_INVALID_VALUE;
        int prot = PROT_NONE;
        for (size_t i = 0; i < count; i++)
                if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                        prot = PROT_READ | PROT_WRITE;
                else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
                        prot = PROT_READ;
        pthread_mutex_lock(&cu_lock);
        size_t covered = 0;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                if (m->base >= ptr && m->base + m->size <= ptr + size)
                        covered += m->size;
        bool ok = covered == size && mprotect((void *) ptr, size, prot) == 0;
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
        (void) location;
        if (!flags)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        bool ok = false;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                ok |= ptr >= m->base && ptr < m->base + m->size;
        pthread_mutex_unlock(&cu_lock);
        *flags = ok ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                          CUmemGenericAllocationHandle handle) {
        struct cu_mem_handle *h = handle_get(handle);
        if (!h || !prop)
                return CUDA_ERROR_INVALID_VALUE;
        *prop = h->prop;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
        if (!handle)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_mapping *found = NULL;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                if ((uintptr_t) addr >= m->base && (uintptr_t) addr < m->base + m->size)
                        found = m;
        if (found)
                *handle = (CUmemGenericAllocationHandle) (uintptr_t) found->h;
        pthread_mutex_unlock(&cu_lock);
        return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType, unsigned long long flags) {
        (void) flags;
        struct cu_mem_handle *h = handle_get(handle);
        if (!h || !shareableHandle || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                return CUDA_ERROR_INVALID_VALUE;
        int fd = dup(h->fd);
        if (fd < 0)
                return CUDA_ERROR_OPERATING_SYSTEM;
        *(int *) shareableHandle = fd;
        return CUDA_SUCCESS;
}
