/* libmigkit-vgpu.so: virtual memory management (hook.h lists the
 * interposer's files and their order).
 *
 * A physical allocation (cuMemCreate) lives until its last reference is
 * released and its last mapping unmapped, in any order: the handle's entry
 * counts references (create, retain, import of a handle this process holds)
 * and mappings, and its charge goes when both are 0. A mapping's entry
 * (address -> bytes, handle) lets cuMemUnmap find the handles of a range. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/hook.h"

#define VMM_STEP (2ull << 20)           /* the smallest granularity: a range's mappings start on it */
#define VMM_MAX_STEPS (1u << 20)        /* an unmap walks at most this many steps (2 TiB) */

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
        vgpu_init();
        REAL(cuMemCreate);
        int s;
        /* Host and host NUMA locations are host memory: not charged. */
        if (!vgpu_on || !h || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
            prop->location.id >= VGPU_MAX_DEVICES)
                return real(h, size, prop, flags);
        unsigned dev = (unsigned) prop->location.id;
        CUresult r = vgpu_charge(dev, size, &s);
        if (r != CUDA_SUCCESS)
                return r;
        r = real(h, size, prop, flags);
        if (r != CUDA_SUCCESS) {
                vgpu_uncharge(s, dev, size);
                return r;
        }
        if (vgpu_track_put_aux(VGPU_TRACK_HANDLE, *h, size, dev, 1) < 0) {
                vgpu_undo_release(*h);
                vgpu_uncharge(s, dev, size);
                vgpu_log(VGPU_LOG_ERROR, "cannot track more than %u allocations, refusing one more",
                         VGPU_TRACK_MAX_ENTRIES);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

/* A handle's counts moved; uncharge when the physical allocation is gone. */
static void handle_adjust(CUmemGenericAllocationHandle h, int refs, int maps) {
        uint64_t size;
        unsigned dev;
        int s = vgpu_my_slot();
        if (vgpu_track_handle_adjust(h, refs, maps, &size, &dev) == 1 && s >= 0 && size > 0)
                vgpu_uncharge(s, dev, size);
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
        vgpu_init();
        REAL(cuMemRelease);
        if (!vgpu_on)
                return real(h);
        /* The reference goes first: once the driver freed it, the same handle
         * value may come back from another thread's cuMemCreate. */
        uint64_t size = 0;
        unsigned dev = 0;
        int t = vgpu_track_handle_adjust(h, -1, 0, &size, &dev);
        CUresult r = real(h);
        if (r != CUDA_SUCCESS) {
                if (t == 1)
                        (void) vgpu_track_put_aux(VGPU_TRACK_HANDLE, h, size, dev, 1);
                else if (t == 0)
                        (void) vgpu_track_handle_adjust(h, 1, 0, &size, &dev);
                return r;
        }
        int s = vgpu_my_slot();
        if (t == 1 && s >= 0 && size > 0)
                vgpu_uncharge(s, dev, size);
        return r;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
        vgpu_init();
        REAL(cuMemRetainAllocationHandle);
        CUresult r = real(h, addr);
        if (r == CUDA_SUCCESS && vgpu_on && h)
                handle_adjust(*h, 1, 0);
        return r;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
        vgpu_init();
        REAL(cuMemImportFromShareableHandle);
        CUresult r = real(h, os, type);
        if (r != CUDA_SUCCESS || !vgpu_on || !h)
                return r;
        uint64_t size;
        unsigned dev;
        /* A handle this process holds already: one more reference. */
        if (vgpu_track_handle_adjust(*h, 1, 0, &size, &dev) == 0)
                return r;
        /* Another process's allocation: its creator is charged for it (once
         * for the container); tracked uncharged so release and unmap balance. */
        (void) vgpu_track_put_aux(VGPU_TRACK_HANDLE, *h, 0, 0, 1);
        return r;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long fl) {
        vgpu_init();
        REAL(cuMemMap);
        CUresult r = real(ptr, size, offset, h, fl);
        uint64_t hs;
        unsigned hd;
        if (r != CUDA_SUCCESS || !vgpu_on || vgpu_track_handle_adjust(h, 0, 1, &hs, &hd) != 0)
                return r;
        if (vgpu_track_put_aux(VGPU_TRACK_MAP, ptr, size, 0, h) < 0) {
                /* Cannot remember the mapping: the handle then lives until its
                 * release (the mapping is not counted). */
                handle_adjust(h, 0, -1);
                vgpu_log(VGPU_LOG_ERROR, "cannot track more than %u mappings; a mapping is not counted",
                          VGPU_TRACK_MAX_ENTRIES);
        }
        return r;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
        vgpu_init();
        REAL(cuMemUnmap);
        CUresult r = real(ptr, size);
        if (r != CUDA_SUCCESS || !vgpu_on)
                return r;
        /* The mappings the range held, from its start: each mapping's end is
         * the next one's start, or the next granule. */
        uint64_t p = ptr, end = ptr + size < ptr ? UINT64_MAX : ptr + size;
        for (unsigned steps = 0; p < end && steps < VMM_MAX_STEPS; steps++) {
                uint64_t msize, h;
                unsigned d;
                if (vgpu_track_take_aux(VGPU_TRACK_MAP, p, &msize, &d, &h) == 0) {
                        handle_adjust(h, 0, -1);
                        p += msize ? msize : VMM_STEP;
                } else
                        p += VMM_STEP;
        }
        return r;
}

VGPU_HOOK_TABLE(vmm, VGPU_VMM_HOOKS(VGPU_HOOK_ENTRY));
