/* CUDA driver simulator: streams, events, modules and libraries, launches,
 * graphs and stream capture.
 *
 * Time model: every stream has a tail, the CLOCK_MONOTONIC time at which the
 * work queued on it ends. A kernel starts when its stream is ready (the
 * stream's tail, and for the legacy default stream every blocking stream of
 * the context) and its device's compute domain is free (live.h: kernels of all
 * processes on one GPU or MIG compute instance run one at a time), runs for
 * its duration (cu_kernel_duration) and is booked as busy time of this
 * process on that device (NVML utilisation). Launches return at once;
 * synchronisation sleeps until the tail. Copies and sets act when called. */
#include <time.h>

#include "cuda/internal.h"

static struct cu_stream *streams; /* all streams of all contexts, under cu_lock */
static unsigned long long next_stream_id = 1, next_capture_id = 1;

void cu_sleep_until(uint64_t t_ns) {
        struct timespec ts = { .tv_sec = (time_t) (t_ns / 1000000000ULL), .tv_nsec = (long) (t_ns % 1000000000ULL) };
        while (sim_live_now_ns() < t_ns)
                if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0 && errno != EINTR)
                        break;
}

struct cu_stream *cu_stream_new(struct cu_ctx *ctx, unsigned flags, int prio) {
        struct cu_stream *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->magic = MAGIC_STREAM;
        s->ctx = ctx;
        s->flags = flags;
        s->priority = prio;
        s->id = next_stream_id++;
        s->next = streams;
        streams = s;
        return s;
}

static void stream_unlink(struct cu_stream *s) {
        for (struct cu_stream **p = &streams; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        break;
                }
        s->magic = 0;
        free(s);
}

void cu_ctx_free_streams(struct cu_ctx *ctx) {
        struct cu_stream **p = &streams;
        while (*p) {
                struct cu_stream *s = *p;
                if (s->ctx == ctx) {
                        *p = s->next;
                        s->magic = 0;
                        free(s);
                } else
                        p = &s->next;
        }
}

struct cu_stream *cu_stream_resolve(CUstream h, struct cu_ctx **ret_ctx, CUresult *ret_err) {
        struct cu_stream *s = (struct cu_stream *) h;
        struct cu_ctx *c;

        *ret_err = cu_check_init();
        if (*ret_err != CUDA_SUCCESS)
                return NULL;
        if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
                *ret_err = cu_ctx_or_current(NULL, &c);
                if (*ret_err != CUDA_SUCCESS)
                        return NULL;
                *ret_ctx = c;
                return c->null_stream;
        }
        if (s->magic != MAGIC_STREAM || !cu_ctx_valid(s->ctx)) {
                *ret_err = CUDA_ERROR_INVALID_HANDLE;
                return NULL;
        }
        *ret_ctx = s->ctx;
        return s;
}

/* Under cu_lock. */
uint64_t cu_stream_ready(struct cu_stream *s) {
        uint64_t t = s->tail_ns;
        struct cu_stream *null = s->ctx->null_stream;

        if (s == null) {
                for (struct cu_stream *o = streams; o; o = o->next)
                        if (o->ctx == s->ctx && !(o->flags & CU_STREAM_NON_BLOCKING))
                                t = MAX(t, o->tail_ns);
        } else if (!(s->flags & CU_STREAM_NON_BLOCKING))
                t = MAX(t, null->tail_ns);
        return t;
}

static uint64_t ctx_tail(struct cu_ctx *ctx) {
        uint64_t t = 0;
        pthread_mutex_lock(&cu_lock);
        for (struct cu_stream *o = streams; o; o = o->next)
                if (o->ctx == ctx)
                        t = MAX(t, o->tail_ns);
        pthread_mutex_unlock(&cu_lock);
        return t;
}

CUresult cu_ctx_sync(struct cu_ctx *ctx) {
        cu_sleep_until(ctx_tail(ctx));
        return CUDA_SUCCESS;
}

/* A stream holds at most MIGKIT_SIM_QUEUE_AHEAD_MS (default 50) of queued kernel
 * time: a launch past that waits, as a launch waits for room in a real
 * driver's queue. So processes queueing work asynchronously on one GPU take
 * turns at that granularity instead of one booking the GPU far ahead. Call
 * without cu_lock. */
static void queue_room(struct cu_stream *s) {
        uint64_t ahead = cu_queue_ahead_ns + 1;
        uint64_t tail = __atomic_load_n(&s->tail_ns, __ATOMIC_RELAXED); /* a hint; booking rereads it */
        if (tail > ahead && tail - ahead > sim_live_now_ns())
                cu_sleep_until(tail - ahead);
}

uint64_t cu_book(struct cu_dev *d, uint64_t ready, uint64_t dur) {
        uint64_t now = sim_live_now_ns();
        uint64_t busy = atomic_load(&d->comp->busy_until), start;

        for (;;) {
                start = MAX(MAX(now, ready), busy);
                if (atomic_compare_exchange_weak(&d->comp->busy_until, &busy, start + dur))
                        break;
        }
        struct sim_live_slot *slot = cu_slot(d);
        if (slot)
                sim_live_book(slot, start, start + dur);
        return start + dur;
}

/* ---- kernel durations ---- */

uint64_t cu_kernel_duration(const struct cu_func *f, const unsigned grid[3], void **params, const struct cu_dev *d) {
        /* Convention: a kernel whose name contains "mksim_sleep" runs for the
         * nanoseconds its first parameter (64 bits) says. */
        if (f && f->name && strstr(f->name, "mksim_sleep") && params && params[0]) {
                uint64_t ns;
                memcpy(&ns, params[0], sizeof(ns));
                return ns;
        }
        uint64_t per_wave = cu_wave_ns;
        uint64_t blocks = (uint64_t) grid[0] * grid[1] * grid[2];
        uint64_t sms = d->sms ? d->sms : 1;
        uint64_t waves = (blocks + sms - 1) / sms;
        return per_wave * MAX(waves, 1);
}

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
        stream_unlink(s);
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
        if (e->recorded)
                s->tail_ns = MAX(s->tail_ns, e->time_ns);
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

CU_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_event *e = (struct cu_event *) hEvent;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!e || e->magic != MAGIC_EVENT)
                return CUDA_ERROR_INVALID_HANDLE;
        if (s->capture) {
                struct cu_node *n = cu_node_new(NODE_EVENT_RECORD);
                if (!n)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                n->event = e;
                return cu_graph_add(s->capture, n);
        }
        pthread_mutex_lock(&cu_lock);
        e->time_ns = MAX(cu_stream_ready(s), sim_live_now_ns());
        e->recorded = true;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
        (void) flags;
        return cuEventRecord(hEvent, hStream);
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

/* ---- modules, libraries, functions ---- */

extern CUresult cu_alloc_global(size_t size, struct cu_ctx *ctx, CUdeviceptr *ret); /* memory.c */

static struct cu_module *modules; /* every loaded module and library, under cu_lock */

static CUresult module_new(bool library, struct cu_module **ret) {
        struct cu_module *m = calloc(1, sizeof(*m));
        if (!m)
                return CUDA_ERROR_OUT_OF_MEMORY;
        m->magic = MAGIC_MODULE;
        m->ctx = cu_current();
        m->library = library;
        pthread_mutex_lock(&cu_lock);
        m->next = modules;
        modules = m;
        pthread_mutex_unlock(&cu_lock);
        *ret = m;
        return CUDA_SUCCESS;
}

static CUresult module_load(CUmodule *module, const void *image) {
        struct cu_ctx *c;
        struct cu_module *m;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!module || !image)
                return CUDA_ERROR_INVALID_VALUE;
        r = module_new(false, &m);
        if (r == CUDA_SUCCESS)
                *module = (CUmodule) m;
        return r;
}

CU_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) {
        if (!fname)
                return CUDA_ERROR_INVALID_VALUE;
        if (access(fname, R_OK) != 0)
                return CUDA_ERROR_FILE_NOT_FOUND;
        return module_load(module, fname);
}

CU_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
        return module_load(module, image);
}

CU_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                      CUjit_option *options, void **optionValues) {
        (void) numOptions;
        (void) options;
        (void) optionValues;
        return module_load(module, image);
}

CU_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
        return module_load(module, fatCubin);
}

static void module_free(struct cu_module *m) {
        for (struct cu_module **p = &modules; *p; p = &(*p)->next)
                if (*p == m) {
                        *p = m->next;
                        break;
                }
        while (m->funcs) {
                struct cu_func *f = m->funcs;
                m->funcs = f->next;
                f->magic = 0;
                free(f->name);
                free(f);
        }
        while (m->globals) {
                struct cu_global *g = m->globals;
                m->globals = g->next;
                free(g->name);
                free(g);
        }
        m->magic = 0;
        free(m);
}

CU_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
        struct cu_module *m = (struct cu_module *) hmod;
        if (!m || m->magic != MAGIC_MODULE || m->library)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        module_free(m);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

static CUresult func_get(struct cu_module *m, const char *name, struct cu_func **ret) {
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!name || !*name)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_func *f;
        for (f = m->funcs; f; f = f->next)
                if (streq(f->name, name))
                        break;
        if (!f) {
                f = calloc(1, sizeof(*f));
                if (f)
                        f->name = strndup(name, 4096);
                if (!f || !f->name) {
                        if (f)
                                free(f);
                        pthread_mutex_unlock(&cu_lock);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                f->magic = MAGIC_FUNC;
                f->mod = m;
                f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 0;
                f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
                f->next = m->funcs;
                m->funcs = f;
        }
        pthread_mutex_unlock(&cu_lock);
        *ret = f;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
        struct cu_func *f;
        if (!hfunc)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = func_get((struct cu_module *) hmod, name, &f);
        if (r == CUDA_SUCCESS)
                *hfunc = (CUfunction) f;
        return r;
}

static CUresult global_get(struct cu_module *m, const char *name, CUdeviceptr *dptr, size_t *bytes) {
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!name)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_global *g;
        pthread_mutex_lock(&cu_lock);
        for (g = m->globals; g; g = g->next)
                if (streq(g->name, name))
                        break;
        pthread_mutex_unlock(&cu_lock);
        if (!g) {
                /* Images are not parsed: every global is a 64 KiB zeroed block. */
                CUdeviceptr p;
                CUresult r = cu_alloc_global(65536, cu_current(), &p);
                if (r != CUDA_SUCCESS)
                        return r;
                g = calloc(1, sizeof(*g));
                if (!g || !(g->name = strndup(name, 4096))) {
                        free(g);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                g->ptr = (void *) p;
                g->size = 65536;
                pthread_mutex_lock(&cu_lock);
                g->next = m->globals;
                m->globals = g;
                pthread_mutex_unlock(&cu_lock);
        }
        if (dptr)
                *dptr = (CUdeviceptr) g->ptr;
        if (bytes)
                *bytes = g->size;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
        return global_get((struct cu_module *) hmod, name, dptr, bytes);
}

CU_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
        if (!mode)
                return CUDA_ERROR_INVALID_VALUE;
        *mode = CU_MODULE_LAZY_LOADING;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
        struct cu_module *m = (struct cu_module *) mod;
        if (!m || m->magic != MAGIC_MODULE || !count)
                return CUDA_ERROR_INVALID_VALUE;
        unsigned n = 0;
        for (struct cu_func *f = m->funcs; f; f = f->next)
                n++;
        *count = n;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                     void **jitOptionsValues, unsigned int numJitOptions,
                                     CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                     unsigned int numLibraryOptions) {
        struct cu_module *m;
        (void) jitOptions;
        (void) jitOptionsValues;
        (void) numJitOptions;
        (void) libraryOptions;
        (void) libraryOptionValues;
        (void) numLibraryOptions;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!library || !code)
                return CUDA_ERROR_INVALID_VALUE;
        r = module_new(true, &m);
        if (r == CUDA_SUCCESS)
                *library = (CUlibrary) m;
        return r;
}

CU_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                         void **jitOptionsValues, unsigned int numJitOptions,
                                         CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                         unsigned int numLibraryOptions) {
        if (!fileName)
                return CUDA_ERROR_INVALID_VALUE;
        if (access(fileName, R_OK) != 0)
                return CUDA_ERROR_FILE_NOT_FOUND;
        return cuLibraryLoadData(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                                 libraryOptionValues, numLibraryOptions);
}

CU_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
        struct cu_module *m = (struct cu_module *) library;
        if (!m || m->magic != MAGIC_MODULE || !m->library)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        module_free(m);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
        struct cu_func *f;
        if (!pKernel)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = func_get((struct cu_module *) library, name, &f);
        if (r == CUDA_SUCCESS)
                *pKernel = (CUkernel) f;
        return r;
}

CU_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library) {
        struct cu_module *m = (struct cu_module *) library;
        if (!pMod)
                return CUDA_ERROR_INVALID_VALUE;
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        *pMod = (CUmodule) m;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
        return global_get((struct cu_module *) library, name, dptr, bytes);
}

CU_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
        return global_get((struct cu_module *) library, name, dptr, bytes);
}

CU_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) {
        return cuModuleGetFunctionCount(count, (CUmodule) lib);
}

CU_EXPORT CUresult cuLibraryGetUnifiedFunction(void **fptr, CUlibrary library, const char *symbol) {
        (void) library;
        (void) symbol;
        if (fptr)
                *fptr = NULL;
        return CUDA_ERROR_NOT_FOUND;
}

static struct cu_func *as_func(const void *h) {
        struct cu_func *f = (struct cu_func *) h;
        return f && f->magic == MAGIC_FUNC ? f : NULL;
}

CU_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
        struct cu_func *f = as_func(kernel);
        if (!pFunc)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *pFunc = (CUfunction) f;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel) {
        struct cu_func *f = as_func(kernel);
        if (!pLib)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *pLib = (CUlibrary) f->mod;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
        struct cu_func *f = as_func(hfunc);
        if (!name)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *name = f->name;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
        return cuKernelGetName(name, (CUkernel) hfunc);
}

CU_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
        struct cu_func *f = as_func(hfunc);
        if (!hmod)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *hmod = (CUmodule) f->mod;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function) {
        if (!state)
                return CUDA_ERROR_INVALID_VALUE;
        if (!as_func(function))
                return CUDA_ERROR_INVALID_HANDLE;
        *state = CU_FUNCTION_LOADING_STATE_LOADED;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncLoad(CUfunction function) {
        return as_func(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult func_attr(int *pi, CUfunction_attribute attrib, struct cu_func *f, int major) {
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
        case CU_FUNC_ATTRIBUTE_PTX_VERSION:
        case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = major * 10; break;
        default:
                if ((unsigned) attrib < ELEMENTSOF(f->attrs))
                        *pi = f->attrs[attrib];
                else
                        *pi = 0;
        }
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
        struct cu_ctx *c = cu_current();
        int major = cu_ctx_valid(c) ? cu_devs[c->dev].model->cc_major : 8;
        return func_attr(pi, attrib, as_func(hfunc), major);
}

CU_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        return func_attr(pi, attrib, as_func(kernel), d->model->cc_major);
}

CU_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
        struct cu_func *f = as_func(hfunc);
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        if ((unsigned) attrib < ELEMENTSOF(f->attrs))
                f->attrs[attrib] = value;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
        (void) dev;
        return cuFuncSetAttribute((CUfunction) kernel, attrib, val);
}

CU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
        (void) config;
        return as_func(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
        (void) config;
        (void) dev;
        return as_func(kernel) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        (void) func;
        (void) paramIndex;
        (void) paramOffset;
        (void) paramSize;
        return CUDA_ERROR_NOT_SUPPORTED; /* images are not parsed */
}

CU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                        int blockSize, size_t dynamicSMemSize,
                                                                        unsigned int flags) {
        (void) dynamicSMemSize;
        (void) flags;
        if (!numBlocks || blockSize <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (!as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *numBlocks = MIN(32, 2048 / blockSize);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                               size_t dynamicSMemSize) {
        return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

CU_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                             CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                             size_t dynamicSMemSize, int blockSizeLimit,
                                                             unsigned int flags) {
        struct cu_ctx *c;
        (void) blockSizeToDynamicSMemSize;
        (void) dynamicSMemSize;
        (void) flags;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!minGridSize || !blockSize)
                return CUDA_ERROR_INVALID_VALUE;
        if (!as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *blockSize = blockSizeLimit > 0 ? MIN(blockSizeLimit, 1024) : 1024;
        *minGridSize = (int) cu_devs[c->dev].sms * (2048 / *blockSize);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                    CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                    size_t dynamicSMemSize, int blockSizeLimit) {
        return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                         dynamicSMemSize, blockSizeLimit, 0);
}

CU_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                           int blockSize) {
        (void) numBlocks;
        (void) blockSize;
        if (!dynamicSmemSize)
                return CUDA_ERROR_INVALID_VALUE;
        if (!as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *dynamicSmemSize = 49152;
        return CUDA_SUCCESS;
}

/* ---- launches ---- */

CUresult cu_launch(struct cu_func *f, const unsigned grid[3], const unsigned block[3], void **params,
                   struct cu_stream *s, struct cu_ctx *ctx) {
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0 ||
            (uint64_t) block[0] * block[1] * block[2] > 1024 || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_dev *d = &cu_devs[ctx->dev];
        uint64_t dur = cu_kernel_duration(f, grid, params, d);
        if (s->capture) {
                struct cu_node *n = cu_node_new(NODE_KERNEL);
                if (!n)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                n->func = f;
                n->duration_ns = dur;
                memcpy(n->grid, grid, sizeof(n->grid));
                memcpy(n->block, block, sizeof(n->block));
                return cu_graph_add(s->capture, n);
        }
        queue_room(s);
        pthread_mutex_lock(&cu_lock);
        s->tail_ns = cu_book(d, cu_stream_ready(s), dur);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

/* The first parameter of an `extra`-style launch (CU_LAUNCH_PARAM_BUFFER_POINTER). */
static void *extra_buffer(void **extra) {
        for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2)
                if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                        return extra[i + 1];
        return NULL;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream hStream, void **kernelParams, void **extra, bool cooperative) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
        void *xparams[1] = { extra_buffer(extra) };
        if (cooperative && (uint64_t) gx * gy * gz > (uint64_t) cu_devs[c->dev].sms * 32)
                return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
        return cu_launch(as_func(f), grid, block, kernelParams ? kernelParams : (xparams[0] ? xparams : NULL), s, c);
}

CU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
        (void) sharedMemBytes;
        return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra,
                      false);
}

CU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
        bool coop = false;
        if (!config)
                return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < config->numAttrs && config->attrs; i++)
                if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && config->attrs[i].value.cooperative)
                        coop = true;
        return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                      config->blockDimZ, config->hStream, kernelParams, extra, coop);
}

CU_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void **kernelParams) {
        (void) sharedMemBytes;
        return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, NULL,
                      true);
}

/* ---- graphs ---- */

struct cu_node *cu_node_new(enum cu_node_kind kind) {
        struct cu_node *n = calloc(1, sizeof(*n));
        if (n) {
                n->magic = MAGIC_NODE;
                n->kind = kind;
        }
        return n;
}

CUresult cu_graph_add(struct cu_graph *g, struct cu_node *n) {
        pthread_mutex_lock(&cu_lock);
        if (g->n_nodes == g->cap) {
                size_t cap = g->cap ? g->cap * 2 : 16;
                struct cu_node **t = realloc(g->nodes, cap * sizeof(*t));
                if (!t) {
                        pthread_mutex_unlock(&cu_lock);
                        free(n);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                g->nodes = t;
                g->cap = cap;
        }
        n->graph = g;
        g->nodes[g->n_nodes++] = n;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

static struct cu_graph *graph_new(void) {
        struct cu_graph *g = calloc(1, sizeof(*g));
        if (g)
                g->magic = MAGIC_GRAPH;
        return g;
}

static void graph_free(struct cu_graph *g) {
        for (size_t i = 0; i < g->n_nodes; i++) {
                g->nodes[i]->magic = 0;
                free(g->nodes[i]);
        }
        free(g->nodes);
        g->magic = 0;
        free(g);
}

static struct cu_graph *as_graph(CUgraph h) {
        struct cu_graph *g = (struct cu_graph *) h;
        return g && g->magic == MAGIC_GRAPH ? g : NULL;
}

CU_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!phGraph || flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_graph *g = graph_new();
        if (!g)
                return CUDA_ERROR_OUT_OF_MEMORY;
        *phGraph = (CUgraph) g;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g)
                return CUDA_ERROR_INVALID_VALUE;
        graph_free(g);
        return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *phNode, CUgraph hGraph, struct cu_node *n) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !phNode) {
                free(n);
                return CUDA_ERROR_INVALID_VALUE;
        }
        CUresult r = cu_graph_add(g, n);
        if (r == CUDA_SUCCESS)
                *phNode = (CUgraphNode) n;
        return r;
}

CU_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies, size_t numDependencies,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
        struct cu_ctx *c;
        (void) dependencies;
        (void) numDependencies;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_func *f = as_func(nodeParams->func ? (void *) nodeParams->func : (void *) nodeParams->kern);
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        struct cu_node *n = cu_node_new(NODE_KERNEL);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->func = f;
        unsigned grid[3] = { nodeParams->gridDimX, nodeParams->gridDimY, nodeParams->gridDimZ };
        memcpy(n->grid, grid, sizeof(grid));
        n->block[0] = nodeParams->blockDimX;
        n->block[1] = nodeParams->blockDimY;
        n->block[2] = nodeParams->blockDimZ;
        void *xparams[1] = { extra_buffer(nodeParams->extra) };
        n->duration_ns = cu_kernel_duration(f, grid, nodeParams->kernelParams ? nodeParams->kernelParams : xparams,
                                            &cu_devs[c->dev]);
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                        CUcontext ctx) {
        (void) dependencies;
        (void) numDependencies;
        (void) ctx;
        if (!memsetParams || (memsetParams->elementSize != 1 && memsetParams->elementSize != 2 &&
                              memsetParams->elementSize != 4))
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_node *n = cu_node_new(NODE_MEMSET);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->dst = memsetParams->dst;
        n->value = memsetParams->value;
        n->element = memsetParams->elementSize;
        n->width = memsetParams->width;
        n->height = memsetParams->height;
        n->pitch = memsetParams->height > 1 ? memsetParams->pitch : memsetParams->width * memsetParams->elementSize;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies) {
        (void) dependencies;
        (void) numDependencies;
        struct cu_node *n = cu_node_new(NODE_EMPTY);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams) {
        (void) dependencies;
        (void) numDependencies;
        if (!nodeParams || !nodeParams->fn)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_node *n = cu_node_new(NODE_HOST);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->fn = nodeParams->fn;
        n->user = nodeParams->userData;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !numNodes)
                return CUDA_ERROR_INVALID_VALUE;
        if (nodes)
                for (size_t i = 0; i < MIN(*numNodes, g->n_nodes); i++)
                        nodes[i] = (CUgraphNode) g->nodes[i];
        *numNodes = g->n_nodes;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
        struct cu_node *n = (struct cu_node *) hNode;
        if (!n || n->magic != MAGIC_NODE || !type)
                return CUDA_ERROR_INVALID_VALUE;
        static const CUgraphNodeType map[] = {
                [NODE_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,  [NODE_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
                [NODE_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,  [NODE_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY,
                [NODE_HOST] = CU_GRAPH_NODE_TYPE_HOST,      [NODE_EVENT_RECORD] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                [NODE_WAIT_EVENT] = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
        };
        *type = map[n->kind];
        return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !phGraphExec)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_gexec *x = calloc(1, sizeof(*x));
        struct cu_graph *copy = graph_new();
        if (!x || !copy) {
                free(x);
                free(copy);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < g->n_nodes; i++) {
                struct cu_node *n = cu_node_new(g->nodes[i]->kind);
                if (!n || (*n = *g->nodes[i], cu_graph_add(copy, n)) != CUDA_SUCCESS) {
                        graph_free(copy);
                        free(x);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
        }
        x->magic = MAGIC_GEXEC;
        x->graph = copy;
        *phGraphExec = (CUgraphExec) x;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
        (void) flags;
        return instantiate(phGraphExec, hGraph);
}

CU_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
        CUresult r = instantiate(phGraphExec, hGraph);
        if (instantiateParams)
                instantiateParams->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                                                  : CUDA_GRAPH_INSTANTIATE_ERROR;
        return r;
}

CU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        graph_free(x->graph);
        x->magic = 0;
        free(x);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        struct cu_ctx *c;
        CUresult r;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        return cu_stream_resolve(hStream, &c, &r) ? CUDA_SUCCESS : r;
}

CU_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_dev *d = &cu_devs[c->dev];
        for (size_t i = 0; i < x->graph->n_nodes; i++) {
                struct cu_node *n = x->graph->nodes[i];
                switch (n->kind) {
                case NODE_KERNEL:
                        queue_room(s);
                        pthread_mutex_lock(&cu_lock);
                        s->tail_ns = cu_book(d, cu_stream_ready(s), n->duration_ns);
                        pthread_mutex_unlock(&cu_lock);
                        break;
                case NODE_MEMSET:
                        r = cu_memset_checked(n->dst, n->value, n->element, n->width, n->height, n->pitch);
                        break;
                case NODE_MEMCPY:
                        r = cu_memcpy_checked((void *) n->dst, n->src, n->bytes);
                        break;
                case NODE_HOST:
                        pthread_mutex_lock(&cu_lock);
                        uint64_t t = cu_stream_ready(s);
                        pthread_mutex_unlock(&cu_lock);
                        cu_sleep_until(t);
                        n->fn(n->user);
                        break;
                case NODE_EVENT_RECORD:
                        if (n->event && n->event->magic == MAGIC_EVENT) {
                                pthread_mutex_lock(&cu_lock);
                                n->event->time_ns = MAX(cu_stream_ready(s), sim_live_now_ns());
                                n->event->recorded = true;
                                pthread_mutex_unlock(&cu_lock);
                        }
                        break;
                default:
                        break;
                }
                if (r != CUDA_SUCCESS)
                        return r;
        }
        return CUDA_SUCCESS;
}

/* ---- stream capture ---- */

CU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s == c->null_stream)
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        if (s->capture)
                return CUDA_ERROR_ILLEGAL_STATE;
        struct cu_graph *g = graph_new();
        if (!g)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        s->capture = g;
        s->capture_mode = mode;
        s->capture_id = next_capture_id++;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
        return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CU_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!phGraph)
                return CUDA_ERROR_INVALID_VALUE;
        if (!s->capture)
                return CUDA_ERROR_ILLEGAL_STATE;
        pthread_mutex_lock(&cu_lock);
        *phGraph = (CUgraph) s->capture;
        s->capture = NULL;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!captureStatus)
                return CUDA_ERROR_INVALID_VALUE;
        *captureStatus = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (captureStatus_out)
                *captureStatus_out = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
        if (id_out)
                *id_out = s->capture ? s->capture_id : 0;
        if (graph_out)
                *graph_out = (CUgraph) s->capture;
        if (dependencies_out)
                *dependencies_out = NULL;
        if (numDependencies_out)
                *numDependencies_out = 0;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
                                             size_t *numDependencies_out) {
        if (edgeData_out)
                *edgeData_out = NULL;
        return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                         numDependencies_out);
}

CU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
        if (!mode)
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
}
