/* CUDA driver simulator, layer 1: the address arena. Device memory is host memory carved from one
 * reserved address range (the arena), so a device pointer is a host address:
 * copies and sets act on it, a pointer into the arena that no allocation
 * covers is refused (CUDA_ERROR_INVALID_VALUE) instead of crashing, and
 * untouched pages cost nothing. Each allocation charges its exact size to the
 * device's memory domain in the live region (what NVML reports). This file
 * holds the arena, the allocation table, the table of VMM mappings and the
 * checked copy and set every other file uses. */
#include <sys/mman.h>

#include "cuda/internal.h"

#define ARENA_BYTES (16ULL << 40) /* 16 TiB of address space, no memory */

static uintptr_t arena_base, arena_end, arena_bump;
static bool arena_rw; /* mapped read-write up front: no system call per allocation */
static struct cu_alloc **allocs; /* sorted by base */
static size_t n_allocs, cap_allocs;

struct cu_mapping *cu_mappings;

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
                arena_base = arena_bump = cu_round_up((uintptr_t) p, 2ULL << 20);
                arena_end = (uintptr_t) p + bytes;
                return true;
        }
        return false;
}

bool cu_in_arena(uintptr_t p) {
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

bool cu_table_add(struct cu_alloc *a) {
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

void cu_table_remove(struct cu_alloc *a) {
        size_t i = lower_bound(a->base);
        if (i < n_allocs && allocs[i] == a) {
                memmove(allocs + i, allocs + i + 1, (n_allocs - i - 1) * sizeof(*allocs));
                n_allocs--;
        }
}

/* A free range of `size` bytes (page multiple) in the arena, aligned to `align`. */
static uintptr_t arena_find(size_t size, size_t align) {
        uintptr_t p = cu_round_up(arena_bump, align);
        if (p + size <= arena_end && p + size > p) {
                arena_bump = p + size;
                return p;
        }
        /* Wrapped: first fit between the allocations. */
        uintptr_t prev = arena_base;
        for (size_t i = 0; i <= n_allocs; i++) {
                uintptr_t next = i < n_allocs ? allocs[i]->base : arena_end;
                if (i < n_allocs && !cu_in_arena(next))
                        continue;
                uintptr_t c = cu_round_up(prev, align);
                if (c + size <= next)
                        return c;
                if (i < n_allocs)
                        prev = MAX(prev, cu_round_up(allocs[i]->base + allocs[i]->size, CU_PAGE));
        }
        return 0;
}

/* Allocates device-visible memory in the arena; caller holds cu_lock. */
CUresult cu_arena_alloc(size_t size, size_t align, enum cu_alloc_kind kind, int dev, uint64_t charge,
                            struct cu_ctx *ctx, struct cu_alloc **ret) {
        struct cu_alloc *a;
        CUresult r;

        if (!arena_init())
                return CUDA_ERROR_OUT_OF_MEMORY;
        size_t span = cu_round_up(size, CU_PAGE);
        if (span < size)
                return CUDA_ERROR_OUT_OF_MEMORY;
        if (dev >= 0) {
                r = cu_charge(&cu_devs[dev], charge);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        uintptr_t p = arena_find(span, MAX(align, CU_PAGE));
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
        if (!cu_table_add(a)) {
                mprotect((void *) p, span, PROT_NONE);
                if (dev >= 0)
                        cu_uncharge(&cu_devs[dev], charge);
                free(a);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *ret = a;
        return CUDA_SUCCESS;
}

void cu_arena_free(struct cu_alloc *a) {
        size_t span = cu_round_up(a->size, CU_PAGE);
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
        if (a->pool) {
                a->pool->used -= MIN(a->pool->used, a->size);
                cu_pool_trim(a->pool, a->pool->release_threshold);
        }
        cu_table_remove(a);
        free(a);
}

/* Pool accounting: what a pool reserves is charged to its device; an
 * allocation takes freed bytes the pool still holds first. */
CUresult cu_pool_take(struct cu_pool *p, uint64_t bytes) {
        uint64_t cached = p->reserved - p->used;
        if (bytes > cached) {
                CUresult r = cu_charge(&cu_devs[p->dev], bytes - cached);
                if (r != CUDA_SUCCESS)
                        return r;
                p->reserved += bytes - cached;
        }
        p->used += bytes;
        p->high = MAX(p->high, p->used);
        p->reserved_high = MAX(p->reserved_high, p->reserved);
        return CUDA_SUCCESS;
}

void cu_pool_trim(struct cu_pool *p, uint64_t keep) {
        uint64_t target = MAX(keep, p->used);
        if (p->reserved > target) {
                cu_uncharge(&cu_devs[p->dev], p->reserved - target);
                p->reserved = target;
        }
}

void cu_arena_free_pool(struct cu_pool *p) {
        for (size_t i = n_allocs; i-- > 0;)
                if (allocs[i]->pool == p)
                        cu_arena_free(allocs[i]);
}

void cu_ctx_free_resources(struct cu_ctx *ctx) {
        for (size_t i = n_allocs; i-- > 0;) {
                struct cu_alloc *a = allocs[i];
                if (a->ctx == ctx && (a->kind == ALLOC_DEVICE || a->kind == ALLOC_MANAGED))
                        cu_arena_free(a);
        }
}


/* ---- copies and sets ---- */

/* A pointer into the arena must lie in a live allocation with [p, p+n) inside it. */
bool cu_range_ok_w(uintptr_t p, size_t n, bool write) {
        struct cu_alloc *a = cu_alloc_find(p);
        if (!a)
                return !cu_in_arena(p);
        if (a->graph && !a->glive)
                return false; /* a graph allocation's address, no memory behind it */
        if (write)
                a->touched = true;
        if (a->kind == ALLOC_VMM_RESERVE) {
                for (struct cu_mapping *m = cu_mappings; m; m = m->next)
                        if (p >= m->base && p - m->base <= m->size && n <= m->size - (p - m->base))
                                return true;
                return false;
        }
        return n <= a->size - (p - a->base);
}

bool cu_range_ok(uintptr_t p, size_t n) {
        return cu_range_ok_w(p, n, false);
}

CUresult cu_memcpy_checked(void *dst, const void *src, size_t n) {
        if (n == 0)
                return CUDA_SUCCESS;
        if (!dst || !src)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        bool ok = cu_range_ok_w((uintptr_t) dst, n, true) && cu_range_ok((uintptr_t) src, n);
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
        bool ok = cu_range_ok_w(dst, span, true);
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


/* Module globals: device memory not charged (part of the loaded image). */
CUresult cu_alloc_global(size_t size, struct cu_ctx *ctx, CUdeviceptr *ret) {
        struct cu_alloc *a;
        pthread_mutex_lock(&cu_lock);
        CUresult r = cu_arena_alloc(size, 512, ALLOC_DEVICE, -1, 0, ctx, &a);
        if (r == CUDA_SUCCESS)
                *ret = a->base;
        pthread_mutex_unlock(&cu_lock);
        return r;
}
