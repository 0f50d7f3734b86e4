/* CUDA driver simulator: CUDA arrays and mipmapped arrays, sized in device
 * memory and charged to the current context's device: a row is its width
 * times the element size (format x channels) rounded up to 512 bytes, times
 * the height and depth (each at least 1); a mipmapped array charges all its
 * levels (each half the one before, at least 1). Textures and surfaces over
 * them are not simulated; copies to and from arrays are refused
 * (CUDA_ERROR_NOT_SUPPORTED, generated stubs). */
#include <stdlib.h>

#include "cuda/internal.h"

#define MAGIC_ARRAY 0x41525231
#define MAGIC_MIPMAP 0x4d495031
#define MAX_LEVELS 32

struct cu_array {
        uint32_t magic;
        int dev;
        uint64_t charged;        /* 0 for a level of a mipmapped array */
        CUDA_ARRAY3D_DESCRIPTOR desc;
};

struct cu_mipmap {
        uint32_t magic;
        int dev;
        uint64_t charged;
        unsigned levels;
        struct cu_array level[MAX_LEVELS];
};

static unsigned format_bytes(CUarray_format f) {
        switch (f) {
        case CU_AD_FORMAT_UNSIGNED_INT8:
        case CU_AD_FORMAT_SIGNED_INT8:
        case CU_AD_FORMAT_UNORM_INT8X1: return 1;
        case CU_AD_FORMAT_UNSIGNED_INT16:
        case CU_AD_FORMAT_SIGNED_INT16:
        case CU_AD_FORMAT_HALF:
        case CU_AD_FORMAT_UNORM_INT8X2: return 2;
        case CU_AD_FORMAT_UNSIGNED_INT32:
        case CU_AD_FORMAT_SIGNED_INT32:
        case CU_AD_FORMAT_FLOAT:
        case CU_AD_FORMAT_UNORM_INT8X4: return 4;
        default: return 0;
        }
}

/* Bytes of one array; 0 when the description is invalid. */
static uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d) {
        unsigned elem = format_bytes(d->Format);
        if (!elem || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) || d->Width == 0 ||
            d->Width > (1 << 20) || d->Height > (1 << 20) || d->Depth > (1 << 16))
                return 0;
        uint64_t row = cu_round_up((uint64_t) d->Width * elem * d->NumChannels, 512);
        return row * MAX(d->Height, (size_t) 1) * MAX(d->Depth, (size_t) 1);
}

static CUresult charge_current(uint64_t bytes, int *dev) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        *dev = c->dev;
        pthread_mutex_lock(&cu_lock);
        r = cu_charge(&cu_devs[c->dev], bytes);
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
        int dev;
        if (!pHandle || !pAllocateArray)
                return CUDA_ERROR_INVALID_VALUE;
        uint64_t bytes = array_bytes(pAllocateArray);
        if (!bytes)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_array *a = calloc(1, sizeof(*a));
        if (!a)
                return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = charge_current(bytes, &dev);
        if (r != CUDA_SUCCESS) {
                free(a);
                return r;
        }
        *a = (struct cu_array) { MAGIC_ARRAY, dev, bytes, *pAllocateArray };
        *pHandle = (CUarray) a;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
        if (!pAllocateArray)
                return CUDA_ERROR_INVALID_VALUE;
        CUDA_ARRAY3D_DESCRIPTOR d = { .Width = pAllocateArray->Width, .Height = pAllocateArray->Height,
                                      .Format = pAllocateArray->Format,
                                      .NumChannels = pAllocateArray->NumChannels };
        return cuArray3DCreate_v2(pHandle, &d);
}

static struct cu_array *as_array(CUarray h) {
        struct cu_array *a = (struct cu_array *) h;
        return a && a->magic == MAGIC_ARRAY ? a : NULL;
}

CU_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
        struct cu_array *a = as_array(hArray);
        if (!a)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!a->charged)
                return CUDA_ERROR_INVALID_VALUE; /* a mipmapped array's level goes with it */
        pthread_mutex_lock(&cu_lock);
        cu_uncharge(&cu_devs[a->dev], a->charged);
        pthread_mutex_unlock(&cu_lock);
        a->magic = 0;
        free(a);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
        struct cu_array *a = as_array(hArray);
        if (!a)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!pArrayDescriptor)
                return CUDA_ERROR_INVALID_VALUE;
        *pArrayDescriptor = a->desc;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
        struct cu_array *a = as_array(hArray);
        if (!a)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!pArrayDescriptor)
                return CUDA_ERROR_INVALID_VALUE;
        if (a->desc.Depth > 0)
                return CUDA_ERROR_INVALID_VALUE; /* a 3D array: cuArray3DGetDescriptor */
        *pArrayDescriptor = (CUDA_ARRAY_DESCRIPTOR) { .Width = a->desc.Width, .Height = a->desc.Height,
                                                      .Format = a->desc.Format,
                                                      .NumChannels = a->desc.NumChannels };
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                          unsigned int numMipmapLevels) {
        int dev;
        if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0 || numMipmapLevels > MAX_LEVELS)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_mipmap *m = calloc(1, sizeof(*m));
        if (!m)
                return CUDA_ERROR_OUT_OF_MEMORY;
        uint64_t total = 0;
        CUDA_ARRAY3D_DESCRIPTOR d = *pMipmappedArrayDesc;
        for (unsigned i = 0; i < numMipmapLevels; i++) {
                uint64_t b = array_bytes(&d);
                if (!b) {
                        free(m);
                        return CUDA_ERROR_INVALID_VALUE;
                }
                m->level[i] = (struct cu_array) { MAGIC_ARRAY, -1, 0, d };
                total += b;
                d.Width = MAX(d.Width / 2, (size_t) 1);
                d.Height = d.Height ? MAX(d.Height / 2, (size_t) 1) : 0;
                d.Depth = d.Depth ? MAX(d.Depth / 2, (size_t) 1) : 0;
        }
        CUresult r = charge_current(total, &dev);
        if (r != CUDA_SUCCESS) {
                free(m);
                return r;
        }
        m->magic = MAGIC_MIPMAP;
        m->dev = dev;
        m->charged = total;
        m->levels = numMipmapLevels;
        for (unsigned i = 0; i < numMipmapLevels; i++)
                m->level[i].dev = dev;
        *pHandle = (CUmipmappedArray) m;
        return CUDA_SUCCESS;
}

static struct cu_mipmap *as_mipmap(CUmipmappedArray h) {
        struct cu_mipmap *m = (struct cu_mipmap *) h;
        return m && m->magic == MAGIC_MIPMAP ? m : NULL;
}

CU_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level) {
        struct cu_mipmap *m = as_mipmap(hMipmappedArray);
        if (!m)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!pLevelArray || level >= m->levels)
                return CUDA_ERROR_INVALID_VALUE;
        *pLevelArray = (CUarray) &m->level[level];
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
        struct cu_mipmap *m = as_mipmap(hMipmappedArray);
        if (!m)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        cu_uncharge(&cu_devs[m->dev], m->charged);
        pthread_mutex_unlock(&cu_lock);
        for (unsigned i = 0; i < m->levels; i++)
                m->level[i].magic = 0;
        m->magic = 0;
        free(m);
        return CUDA_SUCCESS;
}
