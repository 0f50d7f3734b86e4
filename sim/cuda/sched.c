/* CUDA driver simulator, layer 1: stream objects, the time model, kernel
 * booking (cu_launch) and the graph node list stream capture appends to.
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
static unsigned long long next_stream_id = 1;

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

void cu_stream_free(struct cu_stream *s) {
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
void cu_queue_room(struct cu_stream *s) {
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
        cu_queue_room(s);
        pthread_mutex_lock(&cu_lock);
        s->tail_ns = cu_book(d, cu_stream_ready(s), dur);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
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

/* The first parameter of an `extra`-style launch (CU_LAUNCH_PARAM_BUFFER_POINTER). */
void *cu_extra_buffer(void **extra) {
        for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2)
                if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                        return extra[i + 1];
        return NULL;
}

/* Stream capture across streams: a stream that waits on an event recorded in a
 * capturing stream joins that capture; ending it on its origin ends it on all. */
bool cu_capture_active(const struct cu_graph *g, unsigned long long id) {
        for (struct cu_stream *o = streams; o; o = o->next)
                if (o->capture == g && o->capture_id == id)
                        return true;
        return false;
}

void cu_capture_end_all(const struct cu_graph *g) {
        for (struct cu_stream *o = streams; o; o = o->next)
                if (o->capture == g)
                        o->capture = NULL;
}
