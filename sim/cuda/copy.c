/* CUDA driver simulator: copies, sets, prefetch and advice. */
#include "cuda/internal.h"

static CUresult current(struct cu_ctx **ret) {
        return cu_ctx_or_current(NULL, ret);
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

/* Managed memory: prefetches and advice are remembered per allocation for
 * cuMemRangeGetAttribute(s); the memory itself does not move. */
static struct cu_alloc *managed_range(CUdeviceptr p, size_t count) {
        struct cu_alloc *a = cu_alloc_find(p);
        if (!a || !count || count > a->size - (p - a->base))
                return NULL;
        return a;
}

static bool location_ok(CUmemLocation loc) {
        if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
                return loc.id >= 0 && loc.id < cu_ndevs;
        return loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
               loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

CU_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                         unsigned int flags, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        if (flags != 0 || !location_ok(location))
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = managed_range(devPtr, count);
        bool ok = cu_range_ok(devPtr, count) && (!a || a->kind == ALLOC_MANAGED || a->kind == ALLOC_DEVICE);
        if (ok && a && a->kind == ALLOC_MANAGED)
                a->last_prefetch = location;
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = managed_range(devPtr, count);
        bool ok = cu_range_ok(devPtr, count);
        if (ok && a && a->kind == ALLOC_MANAGED) {
                if (advice == CU_MEM_ADVISE_SET_READ_MOSTLY)
                        a->read_mostly = true;
                else if (advice == CU_MEM_ADVISE_UNSET_READ_MOSTLY)
                        a->read_mostly = false;
                else if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION)
                        a->preferred = location;
                else if (advice == CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
                        a->preferred = (CUmemLocation) { .type = CU_MEM_LOCATION_TYPE_INVALID };
        }
        pthread_mutex_unlock(&cu_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A location as the CUDA 8 attributes give it: a device ordinal, CU_DEVICE_CPU, or CU_DEVICE_INVALID. */
static int location_ordinal(CUmemLocation l) {
        if (l.type == CU_MEM_LOCATION_TYPE_DEVICE)
                return l.id;
        if (l.type == CU_MEM_LOCATION_TYPE_INVALID)
                return CU_DEVICE_INVALID;
        return CU_DEVICE_CPU;
}

static CUresult range_attribute(void *data, size_t size, CUmem_range_attribute attr, const struct cu_alloc *a) {
        int v;
        switch (attr) {
        case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: v = a->read_mostly; break;
        case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: v = location_ordinal(a->preferred); break;
        case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: v = location_ordinal(a->last_prefetch); break;
        case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: v = (int) a->preferred.type; break;
        case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: v = a->preferred.id; break;
        case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: v = (int) a->last_prefetch.type; break;
        case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: v = a->last_prefetch.id; break;
        case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: /* no device was advised: an array of CU_DEVICE_INVALID */
                if (size == 0 || size % 4)
                        return CUDA_ERROR_INVALID_VALUE;
                for (size_t i = 0; i < size / 4; i++)
                        ((int *) data)[i] = CU_DEVICE_INVALID;
                return CUDA_SUCCESS;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
        if (size != sizeof(int))
                return CUDA_ERROR_INVALID_VALUE;
        memcpy(data, &v, sizeof(v));
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                           size_t numAttributes, CUdeviceptr devPtr, size_t count) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!data || !dataSizes || !attributes || numAttributes == 0 || numAttributes > 64)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_alloc *a = managed_range(devPtr, count);
        r = a && a->kind == ALLOC_MANAGED ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* managed memory only */
        for (size_t i = 0; r == CUDA_SUCCESS && i < numAttributes; i++)
                r = data[i] ? range_attribute(data[i], dataSizes[i], attributes[i], a) : CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
                                          CUdeviceptr devPtr, size_t count) {
        return cuMemRangeGetAttributes(&data, &dataSize, &attribute, 1, devPtr, count);
}

/* CUDA 8 forms: a device ordinal (CU_DEVICE_CPU for the host) instead of a location. */
static CUmemLocation location_of(CUdevice dev) {
        if (dev == CU_DEVICE_CPU)
                return (CUmemLocation) { .type = CU_MEM_LOCATION_TYPE_HOST, .id = 0 };
        return (CUmemLocation) { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev };
}

CU_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
        return cuMemPrefetchAsync_v2(devPtr, count, location_of(dstDevice), 0, hStream);
}

CU_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
        return cuMemAdvise_v2(devPtr, count, advice, location_of(device));
}
