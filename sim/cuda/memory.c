/* CUDA driver simulator: memory. Device memory is host memory carved from one
 * reserved address range (the arena), so a device pointer is a host address:
 * copies and sets act on it, a pointer into the arena that no allocation
 * covers is refused (CUDA_ERROR_INVALID_VALUE) instead of crashing, and
 * untouched pages cost nothing. Each allocation charges its exact size to the
 * device's memory domain in the live region (what NVML reports). */
#include <sys/mman.h>

#include "cuda/internal.h"

#define ARENA_BYTES (16ULL << 40) /* 16 TiB of address space, no memory */
#define PAGE 4096ULL
#define VMM_GRANULARITY (2ULL << 20)

static uintptr_t arena_base, arena_end, arena_bump;
static bool arena_rw; /* mapped read-write up front: no system call per allocation */
static struct cu_alloc **allocs; /* sorted by base */
static size_t n_allocs, cap_allocs;

struct cu_mem_handle {
        uint32_t magic;
        int fd;
        size_t size;
        int dev;
        unsigned maps;
        bool released;
        CUmemAllocationProp prop;
};

struct cu_mapping {
        uintptr_t base;
        size_t size;
        struct cu_mem_handle *h;
        struct cu_mapping *next;
};
static struct cu_mapping *mappings;

static uint64_t round_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

static bool arena_init(void) {
        if (arena_base)
                return true;
        /* Read-write without reservation where the kernel allows it (not under
         * vm.overcommit_memory=2); else inaccessible, opened per allocation.
         * Smaller when the address space is short (sanitizers). */
        for (uint64_t bytes = ARENA_BYTES; bytes >= (64ULL << 30); bytes /= 4) {
                void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                arena_rw = p != MAP_FAILED;
                if (!arena_rw)
                        p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                if (p == MAP_FAILED)
                        continue;
                arena_base = arena_bump = round_up((uintptr_t) p, 2ULL << 20);
                arena_end = (uintptr_t) p + bytes;
                return true;
        }
        return false;
}

static bool in_arena(uintptr_t p) {
        return arena_base && p >= arena_base && p < arena_end;
}

static size_t lower_bound(uintptr_t p) {
        size_t lo = 0, hi = n_allocs;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (allocs[mid]->base < p)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

struct cu_alloc *cu_alloc_find(uintptr_t p) {
        size_t i = lower_bound(p + 1); /* first with base > p */
        if (i == 0)
                return NULL;
        struct cu_alloc *a = allocs[i - 1];
        return p >= a->base && p < a->base + MAX(a->size, 1) ? a : NULL;
}

static bool table_add(struct cu_alloc *a) {
        if (n_allocs == cap_allocs) {
                size_t n = cap_allocs ? cap_allocs * 2 : 256;
                struct cu_alloc **t = realloc(allocs, n * sizeof(*t));
                if (!t)
                        return false;
                allocs = t;
                cap_allocs = n;
        }
        size_t i = lower_bound(a->base);
        memmove(allocs + i + 1, allocs + i, (n_allocs - i) * sizeof(*allocs));
        allocs[i] = a;
        n_allocs++;
        return true;
}

static void table_remove(struct cu_alloc *a) {
        size_t i = lower_bound(a->base);
        if (i < n_allocs && allocs[i] == a) {
                memmove(allocs + i, allocs + i + 1, (n_allocs - i - 1) * sizeof(*allocs));
                n_allocs--;
        }
}

/* A free range of `size` bytes (page multiple) in the arena, aligned to `align`. */
static uintptr_t arena_find(size_t size, size_t align) {
        uintptr_t p = round_up(arena_bump, align);
        if (p + size <= arena_end && p + size > p) {
                arena_bump = p + size;
                return p;
        }
        /* Wrapped: first fit between the allocations. */
        uintptr_t prev = arena_base;
        for (size_t i = 0; i <= n_allocs; i++) {
                uintptr_t next = i < n_allocs ? allocs[i]->base : arena_end;
                if (i < n_allocs && !in_arena(next))
                        continue;
                uintptr_t c = round_up(prev, align);
                if (c + size <= next)
                        return c;
                if (i < n_allocs)
                        prev = MAX(prev, round_up(allocs[i]->base + allocs[i]->size, PAGE));
        }
        return 0;
}

/* Allocates device-visible memory in the arena; caller holds cu_lock. */
static CUresult arena_alloc(size_t size, size_t align, enum cu_alloc_kind kind, int dev, uint64_t charge,
                            struct cu_ctx *ctx, struct cu_alloc **ret) {
        struct cu_alloc *a;
        CUresult r;

        if (!arena_init())
                return CUDA_ERROR_OUT_OF_MEMORY;
        size_t span = round_up(size, PAGE);
        if (span < size)
                return CUDA_ERROR_OUT_OF_MEMORY;
        if (dev >= 0) {
                r = cu_charge(&cu_devs[dev], charge);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        uintptr_t p = arena_find(span, MAX(align, PAGE));
        a = calloc(1, sizeof(*a));
        int prot = kind == ALLOC_VMM_RESERVE ? PROT_NONE : PROT_READ | PROT_WRITE;
        if (!p || !a || ((kind == ALLOC_VMM_RESERVE || !arena_rw) && mprotect((void *) p, span, prot) < 0)) {
                free(a);
                if (dev >= 0)
                        cu_uncharge(&cu_devs[dev], charge);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *a = (struct cu_alloc) { .base = p, .size = size, .kind = kind, .dev = dev, .charged = dev >= 0 ? charge : 0,
                                 .ctx = ctx };
        if (!table_add(a)) {
                mprotect((void *) p, span, PROT_NONE);
                if (dev >= 0)
                        cu_uncharge(&cu_devs[dev], charge);
                free(a);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *ret = a;
        return CUDA_SUCCESS;
}

static void arena_free(struct cu_alloc *a) {
        size_t span = round_up(a->size, PAGE);
        if (a->kind == ALLOC_VMM_RESERVE) {
                if (arena_rw)
                        mmap((void *) a->base, span, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        } else {
                /* Pages written through the driver (or by the program, for managed memory) go back. */
                if (a->touched || a->kind == ALLOC_MANAGED)
                        madvise((void *) a->base, span, MADV_DONTNEED);
                if (!arena_rw)
                        mprotect((void *) a->base, span, PROT_NONE);
        }
        if (a->dev >= 0)
                cu_uncharge(&cu_devs[a->dev], a->charged);
        table_remove(a);
        free(a);
}

void cu_ctx_free_resources(struct cu_ctx *ctx) {
        for (size_t i = n_allocs; i-- > 0;) {
                struct cu_alloc *a = allocs[i];
                if (a->ctx == ctx && (a->kind == ALLOC_DEVICE || a->kind == ALLOC_MANAGED))
                        arena_free(a);
        }
}

static CUresult current(struct cu_ctx **ret) {
        return cu_ctx_or_current(NULL, ret);
}

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytes, enum cu_alloc_kind kind, struct cu_pool *pool) {
        struct cu_ctx *c;
        struct cu_alloc *a;
        CUresult r = current(&c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!dptr || bytes == 0)
                return CUDA_ERROR_INVALID_VALUE;
        int dev = pool ? pool->dev : c->dev;
        pthread_mutex_lock(&cu_lock);
        r = arena_alloc(bytes, 512, kind, dev, bytes, c, &a);
        if (r == CUDA_SUCCESS) {
                a->pool = pool;
                if (pool) {
                        pool->used += bytes;
                        pool->high = MAX(pool->high, pool->used);
                }
                *dptr = a->base;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
        return mem_alloc(dptr, bytesize, ALLOC_DEVICE, NULL);
}

CU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes) {
        if (!pPitch || WidthInBytes == 0 || Height == 0 ||
            (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
                return CUDA_ERROR_INVALID_VALUE;
        size_t pitch = round_up(WidthInBytes, 512);
        if (Height > SIZE_MAX / pitch)
                return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = mem_alloc(dptr, pitch * Height, ALLOC_DEVICE, NULL);
        if (r == CUDA_SUCCESS)
                *pPitch = pitch;
        return r;
}

CU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
        if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
                return CUDA_ERROR_INVALID_VALUE;
        return mem_alloc(dptr, bytesize, ALLOC_MANAGED, NULL);
}

static CUresult mem_free(CUdeviceptr dptr, bool async) {
        struct cu_ctx *c;
        CUresult r = current(&c);
        (void) async;
        if (r != CUDA_SUCCESS)
                return r;
        if (dptr == 0)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(dptr);
        if (!a || a->base != dptr || (a->kind != ALLOC_DEVICE && a->kind != ALLOC_MANAGED)) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (a->pool)
                a->pool->used -= a->size;
        arena_free(a);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
        struct cu_ctx *c;
        /* cudaFree waits for the device, as the real driver does for a free. */
        if (current(&c) == CUDA_SUCCESS)
                cu_ctx_sync(c);
        return mem_free(dptr, false);
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
        bool ok = table_add(a);
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
                table_remove(a);
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
                if (!table_add(a)) {
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

/* ---- copies and sets ---- */

/* A pointer into the arena must lie in a live allocation with [p, p+n) inside it. */
static bool range_ok_w(uintptr_t p, size_t n, bool write) {
        struct cu_alloc *a = cu_alloc_find(p);
        if (!a)
                return !in_arena(p);
        if (write)
                a->touched = true;
        if (a->kind == ALLOC_VMM_RESERVE) {
                for (struct cu_mapping *m = mappings; m; m = m->next)
                        if (p >= m->base && p - m->base <= m->size && n <= m->size - (p - m->base))
                                return true;
                return false;
        }
        return n <= a->size - (p - a->base);
}

static bool range_ok(uintptr_t p, size_t n) {
        return range_ok_w(p, n, false);
}

CUresult cu_memcpy_checked(void *dst, const void *src, size_t n) {
        if (n == 0)
                return CUDA_SUCCESS;
        if (!dst || !src)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        bool ok = range_ok_w((uintptr_t) dst, n, true) && range_ok((uintptr_t) src, n);
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        memmove(dst, src, n);
        return CUDA_SUCCESS;
}

CUresult cu_memset_checked(CUdeviceptr dst, unsigned value, unsigned elem, size_t width, size_t height,
                           size_t pitch) {
        if (width == 0 || height == 0)
                return CUDA_SUCCESS;
        if (dst == 0 || (dst % elem) != 0)
                return CUDA_ERROR_INVALID_VALUE;
        size_t row = width * elem;
        size_t span = (height - 1) * pitch + row;
        pthread_mutex_lock(&cu_lock);
        bool ok = range_ok_w(dst, span, true);
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t y = 0; y < height; y++) {
                unsigned char *p = (unsigned char *) (uintptr_t) (dst + y * pitch);
                if (elem == 1)
                        memset(p, (int) (value & 0xFF), width);
                else if (elem == 2)
                        for (size_t i = 0; i < width; i++)
                                ((uint16_t *) p)[i] = (uint16_t) value;
                else
                        for (size_t i = 0; i < width; i++)
                                ((uint32_t *) p)[i] = value;
        }
        return CUDA_SUCCESS;
}

static CUresult sync_current(void) {
        struct cu_ctx *c;
        CUresult r = current(&c);
        if (r != CUDA_SUCCESS)
                return r;
        return cu_ctx_sync(c);
}

/* Stream-ordered copy: while the stream captures, a graph node; else done now. */
static CUresult async_copy(void *dst, const void *src, size_t n, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture) {
                struct cu_node *node = cu_node_new(NODE_MEMCPY);
                if (!node)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                node->dst = (CUdeviceptr) dst;
                node->src = src;
                node->bytes = n;
                return cu_graph_add(s->capture, node);
        }
        return cu_memcpy_checked(dst, src, n);
}

static CUresult async_set(CUdeviceptr dst, unsigned value, unsigned elem, size_t width, size_t height, size_t pitch,
                          CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture) {
                struct cu_node *node = cu_node_new(NODE_MEMSET);
                if (!node)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                node->dst = dst;
                node->value = value;
                node->element = elem;
                node->width = width;
                node->height = height;
                node->pitch = pitch;
                return cu_graph_add(s->capture, node);
        }
        return cu_memset_checked(dst, value, elem, width, height, pitch);
}

#define SYNC_OR_RETURN()                              \
        do {                                          \
                CUresult _r = sync_current();         \
                if (_r != CUDA_SUCCESS)               \
                        return _r;                    \
        } while (0)

CU_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
        SYNC_OR_RETURN();
        return cu_memcpy_checked((void *) dst, (const void *) src, ByteCount);
}
CU_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
        return async_copy((void *) dst, (const void *) src, ByteCount, hStream);
}
CU_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount) {
        (void) dstContext;
        (void) srcContext;
        SYNC_OR_RETURN();
        return cu_memcpy_checked((void *) dstDevice, (const void *) srcDevice, ByteCount);
}
CU_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                     CUcontext srcContext, size_t ByteCount, CUstream hStream) {
        (void) dstContext;
        (void) srcContext;
        return async_copy((void *) dstDevice, (const void *) srcDevice, ByteCount, hStream);
}
CU_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
        SYNC_OR_RETURN();
        return cu_memcpy_checked((void *) dstDevice, srcHost, ByteCount);
}
CU_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
        SYNC_OR_RETURN();
        return cu_memcpy_checked(dstHost, (const void *) srcDevice, ByteCount);
}
CU_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
        SYNC_OR_RETURN();
        return cu_memcpy_checked((void *) dstDevice, (const void *) srcDevice, ByteCount);
}
CU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                        CUstream hStream) {
        return async_copy((void *) dstDevice, srcHost, ByteCount, hStream);
}
CU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
        return async_copy(dstHost, (const void *) srcDevice, ByteCount, hStream);
}
CU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                        CUstream hStream) {
        return async_copy((void *) dstDevice, (const void *) srcDevice, ByteCount, hStream);
}

static uintptr_t copy_base(CUmemorytype t, const void *host, CUdeviceptr dev, bool *ok) {
        switch (t) {
        case CU_MEMORYTYPE_HOST:
                return (uintptr_t) host;
        case CU_MEMORYTYPE_DEVICE:
        case CU_MEMORYTYPE_UNIFIED:
                return (uintptr_t) dev;
        default:
                *ok = false; /* CUDA arrays are not simulated */
                return 0;
        }
}

static CUresult copy2d(const CUDA_MEMCPY2D *p) {
        bool ok = true;
        if (!p)
                return CUDA_ERROR_INVALID_VALUE;
        uintptr_t s = copy_base(p->srcMemoryType, p->srcHost, p->srcDevice, &ok);
        uintptr_t d = copy_base(p->dstMemoryType, p->dstHost, p->dstDevice, &ok);
        if (!ok)
                return CUDA_ERROR_NOT_SUPPORTED;
        size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
        s += p->srcY * sp + p->srcXInBytes;
        d += p->dstY * dp + p->dstXInBytes;
        for (size_t y = 0; y < p->Height; y++) {
                CUresult r = cu_memcpy_checked((void *) (d + y * dp), (const void *) (s + y * sp), p->WidthInBytes);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        return CUDA_SUCCESS;
}

static CUresult copy3d(const CUDA_MEMCPY3D *p) {
        bool ok = true;
        if (!p)
                return CUDA_ERROR_INVALID_VALUE;
        uintptr_t s = copy_base(p->srcMemoryType, p->srcHost, p->srcDevice, &ok);
        uintptr_t d = copy_base(p->dstMemoryType, p->dstHost, p->dstDevice, &ok);
        if (!ok)
                return CUDA_ERROR_NOT_SUPPORTED;
        size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
        size_t sh = p->srcHeight ? p->srcHeight : p->Height, dh = p->dstHeight ? p->dstHeight : p->Height;
        for (size_t z = 0; z < MAX(p->Depth, 1); z++)
                for (size_t y = 0; y < p->Height; y++) {
                        uintptr_t so = s + ((p->srcZ + z) * sh + p->srcY + y) * sp + p->srcXInBytes;
                        uintptr_t dof = d + ((p->dstZ + z) * dh + p->dstY + y) * dp + p->dstXInBytes;
                        CUresult r = cu_memcpy_checked((void *) dof, (const void *) so, p->WidthInBytes);
                        if (r != CUDA_SUCCESS)
                                return r;
                }
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) {
        SYNC_OR_RETURN();
        return copy2d(pCopy);
}
CU_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) {
        SYNC_OR_RETURN();
        return copy2d(pCopy);
}
CU_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        return copy2d(pCopy);
}
CU_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) {
        SYNC_OR_RETURN();
        return copy3d(pCopy);
}
CU_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        return copy3d(pCopy);
}

CU_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, uc, 1, N, 1, N);
}
CU_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, us, 2, N, 1, N * 2);
}
CU_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, ui, 4, N, 1, N * 4);
}
CU_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                   size_t Height) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, uc, 1, Width, Height, dstPitch);
}
CU_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                    size_t Height) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, us, 2, Width, Height, dstPitch);
}
CU_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                    size_t Height) {
        SYNC_OR_RETURN();
        return cu_memset_checked(dstDevice, ui, 4, Width, Height, dstPitch);
}
CU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
        return async_set(dstDevice, uc, 1, N, 1, N, hStream);
}
CU_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
        return async_set(dstDevice, us, 2, N, 1, N * 2, hStream);
}
CU_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
        return async_set(dstDevice, ui, 4, N, 1, N * 4, hStream);
}
CU_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                     size_t Height, CUstream hStream) {
        return async_set(dstDevice, uc, 1, Width, Height, dstPitch, hStream);
}
CU_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                      size_t Height, CUstream hStream) {
        return async_set(dstDevice, us, 2, Width, Height, dstPitch, hStream);
}
CU_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                      size_t Height, CUstream hStream) {
        return async_set(dstDevice, ui, 4, Width, Height, dstPitch, hStream);
}

CU_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                         unsigned int flags, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        (void) location;
        (void) flags;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        pthread_mutex_lock(&cu_lock);
        bool ok = range_ok(devPtr, count);
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
        (void) advice;
        (void) location;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        bool ok = range_ok(devPtr, count);
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
        if (!pool)
                pool = device_pool(c->dev);
        if (!pool)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return mem_alloc(dptr, bytesize, ALLOC_DEVICE, pool);
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
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        return mem_free(dptr, true);
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
        for (size_t i = n_allocs; i-- > 0;)
                if (allocs[i]->pool == p)
                        arena_free(allocs[i]);
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
        (void) minBytesToKeep;
        return p && p->magic == MAGIC_POOL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL || !value)
                return CUDA_ERROR_INVALID_VALUE;
        if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
                p->release_threshold = *(cuuint64_t *) value;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
                p->high = p->used;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
        struct cu_pool *p = (struct cu_pool *) pool;
        if (!p || p->magic != MAGIC_POOL || !value)
                return CUDA_ERROR_INVALID_VALUE;
        switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *) value = p->release_threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *) value = p->used; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *) value = p->high; break;
        default: *(int *) value = 1; break;
        }
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
        r = arena_alloc(size, MAX(alignment, VMM_GRANULARITY), ALLOC_VMM_RESERVE, -1, 0, cu_current(), &a);
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
                arena_free(a);
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
        for (struct cu_mapping *m = mappings; r == CUDA_SUCCESS && m; m = m->next)
                if (ptr < m->base + m->size && m->base < ptr + size)
                        r = CUDA_ERROR_ALREADY_MAPPED;
        struct cu_mapping *m = r == CUDA_SUCCESS ? calloc(1, sizeof(*m)) : NULL;
        if (r == CUDA_SUCCESS && (!m || mmap((void *) ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                                             (off_t) offset) == MAP_FAILED)) {
                free(m);
                r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (r == CUDA_SUCCESS) {
                *m = (struct cu_mapping) { .base = ptr, .size = size, .h = h, .next = mappings };
                mappings = m;
                h->maps++;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
        pthread_mutex_lock(&cu_lock);
        for (struct cu_mapping **pm = &mappings; *pm; pm = &(*pm)->next) {
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
        for (struct cu_mapping *m = mappings; m; m = m->next)
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
        for (struct cu_mapping *m = mappings; m; m = m->next)
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
        for (struct cu_mapping *m = mappings; m; m = m->next)
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

/* Module globals: device memory not charged (part of the loaded image). */
CUresult cu_alloc_global(size_t size, struct cu_ctx *ctx, CUdeviceptr *ret) {
        struct cu_alloc *a;
        pthread_mutex_lock(&cu_lock);
        CUresult r = arena_alloc(size, 512, ALLOC_DEVICE, -1, 0, ctx, &a);
        if (r == CUDA_SUCCESS)
                *ret = a->base;
        pthread_mutex_unlock(&cu_lock);
        return r;
}
