/* CUDA driver simulator: IPC handles between processes (cuIpcGetMemHandle,
 * cuIpcOpenMemHandle, cuIpcCloseMemHandle, cuIpcGetEventHandle,
 * cuIpcOpenEventHandle).
 *
 * A memory handle names the exporting process (its live-region identity),
 * the allocation's address and size, and its GPU (index, GPU instance,
 * compute instance: the same in every process, whatever CUDA_VISIBLE_DEVICES
 * says). Opening it in another process maps a range of the same size there,
 * charged nothing (the exporter holds the charge). Device memory is each
 * process's own host memory here, so bytes written on one side are not seen
 * on the other (kernels compute nothing anyway); shared bytes need
 * cuMemCreate with a POSIX descriptor (vmm.c). An event handle opens as an
 * interprocess event of the importing process, never recorded. */
#include "cuda/internal.h"

#define IPC_MAGIC 0x4350494d49534b4dULL /* "MKSIMIPC" */

struct ipc_mem {
        uint64_t magic, owner, base, size;
        uint32_t gpu, gi, ci, kind; /* kind 1: memory */
};
struct ipc_event {
        uint64_t magic, owner, event;
        uint32_t kind; /* 2: event */
};
_Static_assert(sizeof(struct ipc_mem) <= CU_IPC_HANDLE_SIZE, "IPC memory handle size");
_Static_assert(sizeof(struct ipc_event) <= CU_IPC_HANDLE_SIZE, "IPC event handle size");

CU_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pHandle)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(dptr);
        /* Whole cuMemAlloc allocations only (not pools, managed or VMM memory). */
        bool ok = a && a->base == dptr && a->kind == ALLOC_DEVICE && !a->pool && !a->ipc && a->dev >= 0 && a->charged;
        struct ipc_mem h = { 0 };
        if (ok) {
                const struct cu_dev *d = &cu_devs[a->dev];
                h = (struct ipc_mem) { IPC_MAGIC, cu_self, a->base, a->size, d->gpu, d->gi, d->ci, 1 };
        }
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &h, sizeof(h));
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
        struct cu_ctx *c;
        struct ipc_mem h;
        struct cu_alloc *a;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        memcpy(&h, handle.reserved, sizeof(h));
        if (!pdptr || (Flags & ~(unsigned) CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || h.magic != IPC_MAGIC || h.kind != 1 ||
            h.size == 0 || h.size > (1ULL << 40))
                return CUDA_ERROR_INVALID_VALUE;
        if (h.owner == cu_self)
                return CUDA_ERROR_INVALID_CONTEXT; /* as the driver: not in the exporting process */
        int dev = -1;
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].gpu == h.gpu && cu_devs[i].gi == h.gi && cu_devs[i].ci == h.ci)
                        dev = i;
        if (dev < 0)
                return CUDA_ERROR_INVALID_DEVICE; /* not visible to this process */
        pthread_mutex_lock(&cu_lock);
        r = cu_arena_alloc(h.size, 512, ALLOC_DEVICE, dev, 0, c, &a);
        if (r == CUDA_SUCCESS) {
                a->ipc = true;
                *pdptr = a->base;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
        return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CU_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = cu_alloc_find(dptr);
        bool ok = a && a->base == dptr && a->ipc;
        if (ok)
                cu_arena_free(a);
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
        struct cu_event *e = (struct cu_event *) event;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!pHandle || !e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!(e->flags & CU_EVENT_INTERPROCESS) || !(e->flags & CU_EVENT_DISABLE_TIMING))
                return CUDA_ERROR_INVALID_VALUE; /* the driver's rule */
        struct ipc_event h = { IPC_MAGIC, cu_self, (uint64_t) (uintptr_t) e, 2 };
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &h, sizeof(h));
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
        struct ipc_event h;
        memcpy(&h, handle.reserved, sizeof(h));
        if (!phEvent || h.magic != IPC_MAGIC || h.kind != 2)
                return CUDA_ERROR_INVALID_VALUE;
        if (h.owner == cu_self)
                return CUDA_ERROR_INVALID_CONTEXT;
        return cuEventCreate(phEvent, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}
