/* CUDA driver simulator: virtual memory management (cuMemCreate, reserve, map,
 * access, retain, shareable handles). The physical allocation of cuMemCreate
 * is a memfd; it lives, and stays charged, while a handle to it is held
 * (create or import 1, each cuMemRetainAllocationHandle 1 more, each
 * cuMemRelease 1 less) or a range maps it, whatever the order, as with the
 * driver. Its POSIX file descriptor is the shareable handle: another process
 * imports it (cuMemImportFromShareableHandle) without being charged again. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/internal.h"

static struct cu_mem_handle *handles; /* live physical allocations, under cu_lock */

static void handle_register(struct cu_mem_handle *h) {
        pthread_mutex_lock(&cu_lock);
        h->next = handles;
        handles = h;
        pthread_mutex_unlock(&cu_lock);
}

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
        if (!handle || !prop || size == 0 || size % VMM_GRANULARITY != 0)
                return CUDA_ERROR_INVALID_VALUE;
        /* Host memory (pinned, or on a NUMA node) is not device memory: not charged. */
        bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
        if (!host && (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
                      prop->location.id >= cu_ndevs))
                return CUDA_ERROR_INVALID_VALUE;
        int dev = host ? -1 : prop->location.id;
        struct cu_mem_handle *h = calloc(1, sizeof(*h));
        if (!h)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        r = host ? CUDA_SUCCESS : cu_charge(&cu_devs[dev], size);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS) {
                free(h);
                return r;
        }
        char name[64];
        snprintf(name, sizeof(name), "cuda-sim-vmm:%d", dev);
        h->fd = memfd_create(name, MFD_CLOEXEC);
        if (h->fd < 0 || ftruncate(h->fd, (off_t) size) < 0) {
                if (h->fd >= 0)
                        close(h->fd);
                if (!host)
                        cu_uncharge(&cu_devs[dev], size);
                free(h);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        h->magic = MAGIC_HANDLE;
        h->size = size;
        h->dev = dev;
        h->refs = 1;
        h->charged = host ? 0 : size;
        h->prop = *prop;
        handle_register(h);
        *handle = (CUmemGenericAllocationHandle) (uintptr_t) h;
        return CUDA_SUCCESS;
}

static void handle_maybe_free(struct cu_mem_handle *h) {
        if (h->refs == 0 && h->maps == 0) {
                for (struct cu_mem_handle **p = &handles; *p; p = &(*p)->next)
                        if (*p == h) {
                                *p = h->next;
                                break;
                        }
                close(h->fd);
                if (h->dev >= 0)
                        cu_uncharge(&cu_devs[h->dev], h->charged);
                h->magic = 0;
                free(h);
        }
}

/* A handle the program holds; a freed or made-up one is found in no list (never
 * dereferenced). Under cu_lock. */
static struct cu_mem_handle *handle_get(CUmemGenericAllocationHandle handle) {
        for (struct cu_mem_handle *h = handles; h; h = h->next)
                if ((uintptr_t) h == handle)
                        return h->magic == MAGIC_HANDLE && h->refs > 0 ? h : NULL;
        return NULL;
}

CU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
        pthread_mutex_lock(&cu_lock);
        struct cu_mem_handle *h = handle_get(handle);
        if (h) {
                h->refs--;
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
                *m = (struct cu_mapping) { .base = ptr, .size = size, .h = h, .access = CU_MEM_ACCESS_FLAGS_PROT_NONE,
                                           .next = cu_mappings };
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
        if (!desc || count == 0 || count > 64 || size == 0)
                return CUDA_ERROR_INVALID_VALUE;
        int prot = PROT_NONE;
        unsigned long long access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        for (size_t i = 0; i < count; i++) {
                if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
                    desc[i].location.id >= cu_ndevs || desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
                    desc[i].flags == 2)
                        return CUDA_ERROR_INVALID_VALUE;
                if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                        prot = PROT_READ | PROT_WRITE;
                else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
                        prot = PROT_READ;
                access = MAX(access, (unsigned long long) desc[i].flags);
        }
        pthread_mutex_lock(&cu_lock);
        size_t covered = 0;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                if (m->base >= ptr && m->base + m->size <= ptr + size)
                        covered += m->size;
        bool ok = covered == size && mprotect((void *) ptr, size, prot) == 0;
        for (struct cu_mapping *m = cu_mappings; ok && m; m = m->next)
                if (m->base >= ptr && m->base + m->size <= ptr + size)
                        m->access = access;
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
        if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id < 0 ||
            location->id >= cu_ndevs)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        bool ok = false;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                if (ptr >= m->base && ptr < m->base + m->size) {
                        ok = true;
                        *flags = m->access;
                }
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                          CUmemGenericAllocationHandle handle) {
        pthread_mutex_lock(&cu_lock);
        struct cu_mem_handle *h = handle_get(handle);
        if (h && prop)
                *prop = h->prop;
        pthread_mutex_unlock(&cu_lock);
        return h && prop ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
        if (!handle)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_mapping *found = NULL;
        for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                if ((uintptr_t) addr >= m->base && (uintptr_t) addr < m->base + m->size)
                        found = m;
        if (found) {
                found->h->refs++; /* a reference the caller gives back with cuMemRelease */
                *handle = (CUmemGenericAllocationHandle) (uintptr_t) found->h;
        }
        pthread_mutex_unlock(&cu_lock);
        return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType, unsigned long long flags) {
        if (flags != 0 || !shareableHandle)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_mem_handle *h = handle_get(handle);
        CUresult r = CUDA_SUCCESS;
        if (!h)
                r = CUDA_ERROR_INVALID_VALUE;
        else if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
                 !(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
                r = CUDA_ERROR_NOT_SUPPORTED; /* only file descriptors, when asked for at creation */
        int fd = r == CUDA_SUCCESS ? fcntl(h->fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (r == CUDA_SUCCESS && fd < 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
        pthread_mutex_unlock(&cu_lock);
        if (r == CUDA_SUCCESS)
                *(int *) shareableHandle = fd;
        return r;
}

/* The device an exported allocation lives on: its memfd's name, "cuda-sim-vmm:<device>"
 * (-1: host memory); -2 when the descriptor is not one. */
static int shared_device(int fd) {
        char link[64], target[128];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
                return -2;
        target[n] = '\0';
        const char *p = strstr(target, "memfd:cuda-sim-vmm:");
        if (!p)
                return -2;
        p += strlen("memfd:cuda-sim-vmm:");
        if (strncmp(p, "-1", 2) == 0)
                return -1;
        int dev = 0;
        for (; *p >= '0' && *p <= '9' && dev < CUSIM_MAX_DEVICES; p++)
                dev = dev * 10 + (*p - '0');
        return dev < cu_ndevs ? dev : -2;
}

CU_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                  CUmemAllocationHandleType shHandleType) {
        struct stat st;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!handle)
                return CUDA_ERROR_INVALID_VALUE;
        if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                return CUDA_ERROR_NOT_SUPPORTED;
        int fd = (int) (intptr_t) osHandle, dev = fd >= 0 ? shared_device(fd) : -2;
        if (dev < -1 || fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t) st.st_size % VMM_GRANULARITY != 0)
                return CUDA_ERROR_INVALID_VALUE; /* not a descriptor cuMemExportToShareableHandle made */
        struct cu_mem_handle *h = calloc(1, sizeof(*h));
        if (!h)
                return CUDA_ERROR_OUT_OF_MEMORY;
        h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (h->fd < 0) {
                free(h);
                return CUDA_ERROR_OPERATING_SYSTEM;
        }
        h->magic = MAGIC_HANDLE;
        h->size = (size_t) st.st_size;
        h->dev = dev;
        h->refs = 1;
        h->charged = 0; /* one physical allocation: the exporting process holds its charge */
        h->prop = (CUmemAllocationProp) { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                          .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                          .location = { .type = dev < 0 ? CU_MEM_LOCATION_TYPE_HOST
                                                                        : CU_MEM_LOCATION_TYPE_DEVICE,
                                                        .id = dev < 0 ? 0 : dev } };
        handle_register(h);
        *handle = (CUmemGenericAllocationHandle) (uintptr_t) h;
        return CUDA_SUCCESS;
}
