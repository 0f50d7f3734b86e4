/* CUDA driver simulator: contexts (created and primary), their flags, limits
 * and synchronisation. A context charges its size when it becomes active. */
#include <stdlib.h>

#include "cuda/internal.h"

static unsigned long long next_ctx_id = 1;

/* A context's size on its device: MIGKIT_SIM_CUDA_CTX_MIB when set, else the model's. */
static uint64_t ctx_size(const struct cu_dev *d) {
        return cu_env_u64("MIGKIT_SIM_CUDA_CTX_MIB", d->ctx_bytes >> 20) << 20;
}

/* A context exists on the device once active: it holds its overhead there and
 * the process shows up in NVML. Primary contexts are objects from their first
 * mention (the runtime asks for them on every device) and become active when
 * retained or made current. */
static CUresult ctx_activate(struct cu_ctx *c) {
        struct cu_dev *d = &cu_devs[c->dev];
        if (c->active)
                return CUDA_SUCCESS;
        cu_slot(d);
        uint64_t size = ctx_size(d);
        if (cu_charge(d, size) != CUDA_SUCCESS)
                return CUDA_ERROR_OUT_OF_MEMORY;
        c->charged = size;
        c->active = true;
        return CUDA_SUCCESS;
}

static void ctx_deactivate(struct cu_ctx *c) {
        if (!c->active)
                return;
        cu_ctx_sync(c);
        cu_ctx_free_resources(c);
        cu_uncharge(&cu_devs[c->dev], c->charged);
        c->charged = 0;
        c->active = false;
}

static CUresult ctx_new(int dev, unsigned flags, bool primary, struct cu_ctx **ret) {
        struct cu_ctx *c = calloc(1, sizeof(*c));

        if (!c)
                return CUDA_ERROR_OUT_OF_MEMORY;
        c->magic = MAGIC_CTX;
        c->dev = dev;
        c->flags = flags;
        c->primary = primary;
        c->id = next_ctx_id++;
        c->limits[CU_LIMIT_STACK_SIZE] = 1024;
        c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
        c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
        c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
        c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
        c->null_stream = cu_stream_new(c, 0, 0);
        if (!c->null_stream) {
                free(c);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (!primary) {
                CUresult r = ctx_activate(c);
                if (r != CUDA_SUCCESS) {
                        cu_ctx_free_streams(c);
                        free(c);
                        return r;
                }
        }
        *ret = c;
        return CUDA_SUCCESS;
}

static void ctx_free(struct cu_ctx *c) {
        ctx_deactivate(c);
        cu_ctx_free_streams(c);
        /* Drop it from this thread's stack (others keep a dangling handle, as with the real driver). */
        for (int i = 0; i < cu_ctx_depth; i++)
                if (cu_ctx_stack[i] == c)
                        cu_ctx_stack[i] = NULL;
        c->magic = 0;
        free(c);
}

/* The primary context object of a device, created inactive on first use. */
static CUresult primary_get(int dev, struct cu_ctx **ret) {
        struct cu_dev *d = &cu_devs[dev];
        CUresult r = CUDA_SUCCESS;
        pthread_mutex_lock(&cu_lock);
        if (!d->primary)
                r = ctx_new(dev, d->primary_flags, true, &d->primary);
        if (r == CUDA_SUCCESS)
                *ret = d->primary;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CUresult cu_primary_get(CUdevice dev, CUcontext *pctx) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        r = primary_get(dev, &c);
        if (r == CUDA_SUCCESS)
                *pctx = (CUcontext) c;
        return r;
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        r = ctx_new(dev, flags, false, &c);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS)
                return r;
        if (cu_ctx_depth >= CUSIM_CTX_STACK) {
                pthread_mutex_lock(&cu_lock);
                ctx_free(c);
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        cu_ctx_stack[cu_ctx_depth++] = c;
        *pctx = (CUcontext) c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev) {
        (void) paramsArray;
        if (numParams < 0)
                return CUDA_ERROR_INVALID_VALUE;
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                  CUdevice dev) {
        (void) ctxCreateParams;
        return ctx_create(pctx, flags, dev);
}

CU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (!cu_ctx_valid(c) || c->primary)
                return CUDA_ERROR_INVALID_CONTEXT;
        pthread_mutex_lock(&cu_lock);
        ctx_free(c);
        pthread_mutex_unlock(&cu_lock);
        /* Pop it if it was current. */
        while (cu_ctx_depth > 0 && cu_ctx_stack[cu_ctx_depth - 1] == NULL)
                cu_ctx_depth--;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
        CHECK_INIT();
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        *pctx = (CUcontext) cu_current();
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (c && !cu_ctx_valid(c))
                return CUDA_ERROR_INVALID_CONTEXT;
        if (c) {
                pthread_mutex_lock(&cu_lock);
                CUresult r = ctx_activate(c);
                pthread_mutex_unlock(&cu_lock);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        if (cu_ctx_depth == 0) {
                if (c)
                        cu_ctx_stack[cu_ctx_depth++] = c;
        } else
                cu_ctx_stack[cu_ctx_depth - 1] = c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
        struct cu_ctx *c = (struct cu_ctx *) ctx;
        CHECK_INIT();
        if (!cu_ctx_valid(c))
                return CUDA_ERROR_INVALID_CONTEXT;
        if (cu_ctx_depth >= CUSIM_CTX_STACK)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        CUresult r = ctx_activate(c);
        pthread_mutex_unlock(&cu_lock);
        if (r != CUDA_SUCCESS)
                return r;
        cu_ctx_stack[cu_ctx_depth++] = c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
        CHECK_INIT();
        if (cu_ctx_depth == 0)
                return CUDA_ERROR_INVALID_CONTEXT;
        struct cu_ctx *c = cu_ctx_stack[--cu_ctx_depth];
        if (pctx)
                *pctx = (CUcontext) c;
        return CUDA_SUCCESS;
}

/* ctx NULL: the current context. The versions share static bodies, not calls
 * through the exported symbols, which an interposer may have taken. */
static CUresult ctx_get_device(CUdevice *device, CUcontext ctx) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        *device = c->dev;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
        return ctx_get_device(device, NULL);
}

CU_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
        return ctx_get_device(device, ctx);
}

CU_EXPORT CUresult cuCtxGetFlags(unsigned int *flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!flags)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = c->flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        c->flags = flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!ctxId)
                return CUDA_ERROR_INVALID_VALUE;
        *ctxId = c->id;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!version)
                return CUDA_ERROR_INVALID_VALUE;
        *version = 3020;
        return CUDA_SUCCESS;
}

static CUresult ctx_synchronize(CUcontext ctx) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        return cu_ctx_sync(c);
}

CU_EXPORT CUresult cuCtxSynchronize(void) {
        return ctx_synchronize(NULL);
}

CU_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
        return ctx_synchronize(ctx);
}

CU_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pvalue || (unsigned) limit >= ELEMENTSOF(c->limits))
                return CUDA_ERROR_INVALID_VALUE;
        *pvalue = c->limits[limit];
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if ((unsigned) limit >= ELEMENTSOF(c->limits))
                return CUDA_ERROR_UNSUPPORTED_LIMIT;
        c->limits[limit] = value;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pconfig)
                return CUDA_ERROR_INVALID_VALUE;
        *pconfig = c->cache_config;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        c->cache_config = config;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
        CHECK_INIT();
        if (leastPriority)
                *leastPriority = 0;
        if (greatestPriority)
                *greatestPriority = -5;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxResetPersistingL2Cache(void) {
        CHECK_INIT();
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
                return CUDA_ERROR_INVALID_VALUE;
        pExecAffinity->type = type;
        pExecAffinity->param.smCount.val = cu_devs[c->dev].sms;
        return CUDA_SUCCESS;
}

/* Primary contexts. */

CU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
        struct cu_dev *d;
        struct cu_ctx *c;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        r = primary_get(dev, &c);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        r = ctx_activate(c);
        if (r == CUDA_SUCCESS) {
                d->primary_refs++;
                *pctx = (CUcontext) c;
        }
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        if (!d->primary || d->primary_refs <= 0) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_INVALID_CONTEXT;
        }
        if (--d->primary_refs == 0)
                ctx_deactivate(d->primary);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cu_lock);
        if (d->primary) {
                ctx_deactivate(d->primary);
                d->primary_refs = 0;
        }
        d->primary_flags = 0;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        d->primary_flags = flags;
        if (d->primary)
                d->primary->flags = flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!flags || !active)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = d->primary_flags;
        *active = d->primary && d->primary->active;
        return CUDA_SUCCESS;
}
