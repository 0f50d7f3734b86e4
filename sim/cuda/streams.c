/* CUDA driver simulator: the stream and event API (sched.c holds the time model). */
#include <time.h>

#include "cuda/internal.h"

/* ---- streams ---- */

CU_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!phStream || (Flags & ~CU_STREAM_NON_BLOCKING))
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_stream *s = cu_stream_new(c, Flags, 0);
        pthread_mutex_unlock(&cu_lock);
        if (!s)
                return CUDA_ERROR_OUT_OF_MEMORY;
        *phStream = (CUstream) s;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
        CUresult r = cuStreamCreate(phStream, flags);
        if (r == CUDA_SUCCESS)
                ((struct cu_stream *) *phStream)->priority = MAX(-5, MIN(0, priority));
        return r;
}

CU_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
        struct cu_stream *s = (struct cu_stream *) hStream;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!s || s->magic != MAGIC_STREAM || s == s->ctx->null_stream)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        cu_stream_free(s);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

/* When the work queued on a stream (not capturing) is done. */
static CUresult stream_done_at(CUstream hStream, uint64_t *ret_ns) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture)
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        pthread_mutex_lock(&cu_lock);
        *ret_ns = cu_stream_ready(s);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
        uint64_t t = 0;
        CUresult r = stream_done_at(hStream, &t);
        if (r == CUDA_SUCCESS)
                cu_sleep_until(t);
        return r;
}

CU_EXPORT CUresult cuStreamQuery(CUstream hStream) {
        uint64_t t = 0;
        CUresult r = stream_done_at(hStream, &t);
        if (r != CUDA_SUCCESS)
                return r;
        return sim_live_now_ns() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CU_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!priority)
                return CUDA_ERROR_INVALID_VALUE;
        *priority = s->priority;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!flags)
                return CUDA_ERROR_INVALID_VALUE;
        *flags = s->flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!streamId)
                return CUDA_ERROR_INVALID_VALUE;
        *streamId = s->id;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        *pctx = (CUcontext) c;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
        if (pGreenCtx)
                *pGreenCtx = NULL;
        return cuStreamGetCtx(hStream, pCtx);
}

CU_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        *device = c->dev;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_event *e = (struct cu_event *) hEvent;
        (void) Flags;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        if (e->capture && cu_capture_active(e->capture, e->capture_id)) {
                /* A capture event: this stream joins the capture (its work goes into the same graph). */
                if (!s->capture) {
                        s->capture = e->capture;
                        s->capture_id = e->capture_id;
                        s->capture_mode = e->capture_mode;
                }
        } else if (!s->capture && e->recorded) { /* a capturing stream records no wait on outside work */
                s->tail_ns = MAX(s->tail_ns, e->time_ns);
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

static CUresult host_call(CUstream hStream, CUhostFn fn, void *userData) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!fn)
                return CUDA_ERROR_INVALID_VALUE;
        if (s->capture) {
                struct cu_node *n = cu_node_new(NODE_HOST);
                if (!n)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                n->fn = fn;
                n->user = userData;
                return cu_graph_add(s->capture, n);
        }
        /* Run in the caller's thread once the stream's work is done. */
        pthread_mutex_lock(&cu_lock);
        uint64_t t = cu_stream_ready(s);
        pthread_mutex_unlock(&cu_lock);
        cu_sleep_until(t);
        fn(userData);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
        return host_call(hStream, fn, userData);
}

struct callback_shim {
        CUstreamCallback cb;
        CUstream stream;
        void *user;
};

CU_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                       unsigned int flags) {
        struct cu_ctx *c;
        CUresult r;
        if (flags != 0 || !callback)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s->capture)
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        pthread_mutex_lock(&cu_lock);
        uint64_t t = cu_stream_ready(s);
        pthread_mutex_unlock(&cu_lock);
        cu_sleep_until(t);
        callback(hStream, CUDA_SUCCESS, userData);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags) {
        struct cu_ctx *c;
        CUresult r;
        (void) dptr;
        (void) length;
        (void) flags;
        return cu_stream_resolve(hStream, &c, &r) ? CUDA_SUCCESS : r;
}

CU_EXPORT CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value) {
        struct cu_ctx *c;
        CUresult r;
        (void) attr;
        (void) value;
        return cu_stream_resolve(hStream, &c, &r) ? CUDA_SUCCESS : r;
}

CU_EXPORT CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out) {
        struct cu_ctx *c;
        CUresult r;
        (void) attr;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        if (value_out)
                memset(value_out, 0, sizeof(*value_out));
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
        struct cu_ctx *c;
        CUresult r;
        if (!cu_stream_resolve(dst, &c, &r) || !cu_stream_resolve(src, &c, &r))
                return r;
        return CUDA_SUCCESS;
}

/* ---- events ---- */

CU_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!phEvent)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_event *e = calloc(1, sizeof(*e));
        if (!e)
                return CUDA_ERROR_OUT_OF_MEMORY;
        e->magic = MAGIC_EVENT;
        e->flags = Flags;
        *phEvent = (CUevent) e;
        return CUDA_SUCCESS;
}

/* In a capturing stream a record only marks the event as part of the capture
 * (a stream that waits on it joins the capture), as the driver does; only an
 * external record (CU_EVENT_RECORD_EXTERNAL) becomes a graph node. A plain
 * record that made a node would leave the graph pointing at an event the
 * program may destroy right after the join (NCCL does). */
static CUresult event_record(CUevent hEvent, CUstream hStream, bool external) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_event *e = (struct cu_event *) hEvent;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        if (s->capture) {
                struct cu_node *n = NULL;
                if (external) {
                        n = cu_node_new(NODE_EVENT_RECORD);
                        if (!n)
                                return CUDA_ERROR_OUT_OF_MEMORY;
                        n->event = e;
                }
                pthread_mutex_lock(&cu_lock);
                e->capture = s->capture;
                e->capture_id = s->capture_id;
                e->capture_mode = s->capture_mode;
                pthread_mutex_unlock(&cu_lock);
                return n ? cu_graph_add(s->capture, n) : CUDA_SUCCESS;
        }
        pthread_mutex_lock(&cu_lock);
        e->capture = NULL;
        e->time_ns = MAX(cu_stream_ready(s), sim_live_now_ns());
        e->recorded = true;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
        return event_record(hEvent, hStream, false);
}

CU_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
        return event_record(hEvent, hStream, flags & CU_EVENT_RECORD_EXTERNAL);
}

CU_EXPORT CUresult cuEventQuery(CUevent hEvent) {
        struct cu_event *e = (struct cu_event *) hEvent;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        return !e->recorded || sim_live_now_ns() >= e->time_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CU_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
        struct cu_event *e = (struct cu_event *) hEvent;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        if (e->recorded)
                cu_sleep_until(e->time_ns);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
        struct cu_event *a = (struct cu_event *) hStart, *b = (struct cu_event *) hEnd;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!pMilliseconds)
                return CUDA_ERROR_INVALID_VALUE;
        if (!a || !b || a->magic != MAGIC_EVENT || b->magic != MAGIC_EVENT || !a->recorded || !b->recorded ||
            (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING))
                return CUDA_ERROR_INVALID_HANDLE;
        uint64_t now = sim_live_now_ns();
        if (now < a->time_ns || now < b->time_ns)
                return CUDA_ERROR_NOT_READY;
        *pMilliseconds = (float) (((double) b->time_ns - (double) a->time_ns) / 1e6);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
        return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CU_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
        struct cu_event *e = (struct cu_event *) hEvent;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        e->magic = 0;
        free(e);
        return CUDA_SUCCESS;
}
