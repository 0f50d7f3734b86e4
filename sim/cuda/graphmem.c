/* CUDA driver simulator: graph memory (allocation and free nodes).
 *
 * An allocation node reserves its address when it is created; the address
 * stays fixed for the graph's life. The memory behind it comes from the
 * device's graph memory pool when a launch (or cuGraphUpload) of an
 * instantiated graph needs it: the pool reserves, and charges to the device,
 * what its allocations in use plus the graph's allocations need, and keeps it
 * reserved past the frees until cuDeviceGraphMemTrim. An allocation not freed
 * in its graph stays in use after the launch, until a free node of another
 * graph, cuMemFree or cuMemFreeAsync frees it; the graph cannot be launched
 * again before. The simulator reserves the sum of a graph's allocations (the
 * driver may reuse memory inside one launch: it can need less). */
#include "cuda/internal.h"

static struct cu_alloc *graph_alloc_at(CUdeviceptr dptr) {
        struct cu_alloc *a = cu_alloc_find(dptr);
        return a && a->base == dptr && a->graph ? a : NULL;
}

CUresult cu_gmem_alloc_node(struct cu_graph *g, int dev, size_t bytes, struct cu_node **ret) {
        struct cu_alloc *a;
        if (dev < 0 || dev >= cu_ndevs || bytes == 0)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_node *n = cu_node_new(NODE_MEM_ALLOC);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        CUresult r = cu_arena_alloc(bytes, 512, ALLOC_DEVICE, dev, 0, NULL, &a); /* the address only */
        if (r == CUDA_SUCCESS) {
                a->graph = true;
                a->grefs = 1;
                a->gowner = g;
                n->alloc = a;
                n->dst = a->base;
                n->bytes = bytes;
        }
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS) {
                free(n);
                return r;
        }
        r = cu_graph_add(g, n); /* frees n on failure */
        if (r != CUDA_SUCCESS) {
                pthread_mutex_lock(&cu_lock);
                cu_arena_free(a);
                pthread_mutex_unlock(&cu_lock);
                return r;
        }
        *ret = n;
        return CUDA_SUCCESS;
}

CUresult cu_gmem_free_node(struct cu_graph *g, CUdeviceptr dptr, struct cu_node **ret) {
        struct cu_node *n = cu_node_new(NODE_MEM_FREE);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = graph_alloc_at(dptr);
        /* Freed once in its own graph, or else in other graphs only. */
        bool own = a && a->gowner == g;
        if (!a || a->gfreed_own || (own && a->gfreed_other)) {
                pthread_mutex_unlock(&cu_lock);
                free(n);
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (own)
                a->gfreed_own = true;
        else
                a->gfreed_other = true;
        a->grefs++;
        n->alloc = a;
        n->dst = dptr;
        n->bytes = a->size;
        pthread_mutex_unlock(&cu_lock);
        CUresult r = cu_graph_add(g, n);
        if (r != CUDA_SUCCESS) {
                pthread_mutex_lock(&cu_lock);
                cu_gmem_drop(a);
                pthread_mutex_unlock(&cu_lock);
                return r;
        }
        *ret = n;
        return CUDA_SUCCESS;
}

/* Under cu_lock: a node (of a graph or of its instantiated copy) lets go of its allocation. */
void cu_gmem_drop(struct cu_alloc *a) {
        if (a->grefs > 0)
                a->grefs--;
        if (a->grefs == 0 && !a->glive)
                cu_arena_free(a);
}

void cu_gmem_hold(struct cu_alloc *a) {
        a->grefs++;
}

/* Under cu_lock: the allocations of a launch, their bytes per device, taken
 * from the graph pools: refused when one is still in use, or when the pool
 * cannot reserve them (CUDA_ERROR_OUT_OF_MEMORY). */
CUresult cu_gmem_reserve(struct cu_node *const *nodes, size_t n_nodes) {
        uint64_t need[CUSIM_MAX_DEVICES] = { 0 };
        for (size_t i = 0; i < n_nodes; i++) {
                struct cu_alloc *a = nodes[i]->alloc;
                if (nodes[i]->kind != NODE_MEM_ALLOC || !a)
                        continue;
                if (a->glive)
                        return CUDA_ERROR_INVALID_VALUE; /* the previous launch's allocation is not freed */
                need[a->dev] += a->size;
        }
        int done = 0;
        CUresult r = CUDA_SUCCESS;
        uint64_t added[CUSIM_MAX_DEVICES] = { 0 };
        for (; done < cu_ndevs && r == CUDA_SUCCESS; done++) {
                struct cu_dev *d = &cu_devs[done];
                uint64_t want = d->gmem_used + need[done];
                if (need[done] == 0 || want <= d->gmem_reserved)
                        continue;
                r = cu_charge(d, want - d->gmem_reserved);
                if (r == CUDA_SUCCESS) {
                        added[done] = want - d->gmem_reserved;
                        d->gmem_reserved = want;
                        d->gmem_reserved_high = MAX(d->gmem_reserved_high, want);
                }
        }
        if (r != CUDA_SUCCESS)
                for (int i = 0; i < done; i++) {
                        cu_uncharge(&cu_devs[i], added[i]);
                        cu_devs[i].gmem_reserved -= added[i];
                }
        return r;
}

/* Under cu_lock: an allocation node runs (its bytes were reserved). */
void cu_gmem_take(struct cu_alloc *a) {
        struct cu_dev *d = &cu_devs[a->dev];
        a->glive = true;
        d->gmem_used += a->size;
        d->gmem_used_high = MAX(d->gmem_used_high, d->gmem_used);
}

/* Under cu_lock: a graph allocation is freed (free node, cuMemFree, cuMemFreeAsync).
 * outside: not by a free node; refused for an allocation its own graph frees. */
CUresult cu_gmem_release(struct cu_alloc *a, bool outside) {
        if (!a->glive || (outside && a->gfreed_own))
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_dev *d = &cu_devs[a->dev];
        a->glive = false;
        d->gmem_used -= MIN(d->gmem_used, a->size);
        if (a->grefs == 0)
                cu_arena_free(a);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(device, &d);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        if (d->gmem_reserved > d->gmem_used) {
                cu_uncharge(d, d->gmem_reserved - d->gmem_used);
                d->gmem_reserved = d->gmem_used;
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(device, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!value)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        switch (attr) {
        case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *) value = d->gmem_used; break;
        case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *) value = d->gmem_used_high; break;
        case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *) value = d->gmem_reserved; break;
        case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *) value = d->gmem_reserved_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

/* Only the high-water marks, and only reset (to 0: the current value). */
CU_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(device, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!value || *(cuuint64_t *) value != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
                d->gmem_used_high = d->gmem_used;
        else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
                d->gmem_reserved_high = d->gmem_reserved;
        else
                r = CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&cu_lock);
        return r;
}
