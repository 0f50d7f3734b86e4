/* CUDA driver simulator, layer 0: the process's driver state (cuInit, the
 * device list, tracing, environment), this thread's current context stack,
 * the charging of device memory to this process's slot in the live region,
 * and error names. Calls nothing else of sim/cuda. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <strings.h>

#include "cuda/internal.h"
#include "lib/mig.h"
#include "lib/state.h"

pthread_mutex_t cu_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* recursive: destroy paths synchronise */
bool cu_initialized;
struct cu_dev cu_devs[CUSIM_MAX_DEVICES];
int cu_ndevs;
struct sim_live *cu_live;
uint64_t cu_self;
int cu_trace;
uint64_t cu_wave_ns, cu_queue_ahead_ns;
static CUresult init_result = CUDA_SUCCESS;
static bool forked_after_init;
__thread struct cu_ctx *cu_ctx_stack[CUSIM_CTX_STACK];
__thread int cu_ctx_depth;




/* Read at load: look-ups and stubs are traced before cuInit too. */
__attribute__((constructor)) static void trace_init(void) {
        const char *e = getenv("MIGKIT_SIM_CUDA_TRACE");
        cu_trace = e && *e && *e != '0';
}

void cu_log(const char *fmt, ...) {
        va_list ap;

        if (!cu_trace)
                return;
        va_start(ap, fmt);
        fputs("cuda-sim: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

CUresult cu_unsupported(const char *symbol) {
        cu_log("%s: not supported by the simulator", symbol);
        return CUDA_ERROR_NOT_SUPPORTED;
}

uint64_t cu_env_u64(const char *name, uint64_t def) {
        const char *e = getenv(name);
        uint64_t v;

        if (!e || !*e || sim_parse_u64(e, false, &v) < 0)
                return def;
        return v;
}

static void parse_uuid(const char *s, CUuuid *ret) {
        unsigned n = 0;
        int hi = -1;

        memset(ret, 0, sizeof(*ret));
        const char *p = strchr(s, '-'); /* after "GPU" / "MIG" */
        for (p = p ? p + 1 : s; *p && n < 16; p++) {
                int v;
                if (*p >= '0' && *p <= '9')
                        v = *p - '0';
                else if (*p >= 'a' && *p <= 'f')
                        v = *p - 'a' + 10;
                else if (*p >= 'A' && *p <= 'F')
                        v = *p - 'A' + 10;
                else
                        continue;
                if (hi < 0)
                        hi = v;
                else {
                        ret->bytes[n++] = (char) (hi << 4 | v);
                        hi = -1;
                }
        }
}

static void fill_dev(struct cu_dev *d, struct sim_gpu *g, unsigned index, struct sim_gi *gi, struct sim_ci *ci) {
        const struct sim_model *m = g->model;

        memset(d, 0, sizeof(*d));
        d->gpu = index;
        d->model = m;
        d->bus = g->bus;
        parse_uuid(g->uuid, &d->gpu_uuid);
        /* The model's data sheet (sim/lib/catalog.c), which NVML's sensors report too. */
        d->sms = m->sheet.sms;
        d->clock_khz = (int) m->sheet.sm_mhz * 1000;
        d->mem_clock_khz = (int) m->sheet.mem_mhz * 1000;
        d->bus_width = (int) m->sheet.bus_width;
        d->l2_bytes = (int) m->sheet.l2_mib << 20;
        d->ctx_bytes = (uint64_t) m->sheet.ctx_mib << 20;
        if (gi && ci) {
                const struct sim_gi_profile *p = sim_gi_profile_by_enum(m, gi->profile);
                char profile[64];
                d->mig = true;
                d->gi = gi->id;
                d->ci = ci->id;
                d->total_bytes = (p ? p->memory_mib : m->memory_mib) * 1024ULL * 1024ULL;
                d->sms = p && p->slices ? p->sms * ci->size / p->slices : d->sms;
                if (p)
                        sim_profile_name(m, p, ci->size, profile, sizeof(profile));
                else
                        snprintf(profile, sizeof(profile), "?");
                snprintf(d->name, sizeof(d->name), "%s MIG %s", m->name, profile);
                parse_uuid(ci->uuid, &d->uuid);
                if (p && m->memory_units)
                        d->l2_bytes = (int) ((uint64_t) d->l2_bytes * p->units / m->memory_units);
        } else {
                d->gi = d->ci = SIM_ID_NONE;
                d->total_bytes = m->memory_mib * 1024ULL * 1024ULL;
                snprintf(d->name, sizeof(d->name), "%s", m->name);
                d->uuid = d->gpu_uuid;
        }
}

/* The devices CUDA enumerates without CUDA_VISIBLE_DEVICES: each GPU not in
 * MIG mode, and the MIG devices of each GPU in MIG mode, in GPU index order. */
struct candidate {
        unsigned gpu;
        struct sim_gi *gi;
        struct sim_ci *ci;
};

static size_t default_devices(struct sim_state *st, struct candidate *out, size_t max) {
        size_t n = 0;

        for (unsigned i = 0; i < st->n_gpus && n < max; i++) {
                struct sim_gpu *g = &st->gpus[i];
                if (g->lost)
                        continue;
                if (g->mig_current) {
                        unsigned k = sim_mig_device_count(g);
                        for (unsigned j = 0; j < k && n < max; j++) {
                                struct sim_gi *gi;
                                struct sim_ci *ci;
                                if (sim_mig_device_at(g, j, &gi, &ci))
                                        out[n++] = (struct candidate) { i, gi, ci };
                        }
                } else
                        out[n++] = (struct candidate) { i, NULL, NULL };
        }
        return n;
}

static bool uuid_prefix(const char *uuid, const char *token) {
        size_t n = strlen(token);
        return n >= 5 && strncasecmp(uuid, token, n) == 0;
}

/* One CUDA_VISIBLE_DEVICES token; false when it names nothing (the list stops there). */
static bool resolve_token(struct sim_state *st, const char *tok, const struct candidate *all, size_t n_all,
                          struct candidate *ret) {
        uint32_t idx;

        if (sim_parse_u32(tok, &idx) == 0) {
                if (idx >= n_all)
                        return false;
                *ret = all[idx];
                return true;
        }
        for (unsigned i = 0; i < st->n_gpus; i++) {
                struct sim_gpu *g = &st->gpus[i];
                if (g->lost)
                        continue;
                if (uuid_prefix(g->uuid, tok)) {
                        if (!g->mig_current) {
                                *ret = (struct candidate) { i, NULL, NULL };
                                return true;
                        }
                        if (sim_mig_device_count(g) > 0 && sim_mig_device_at(g, 0, &ret->gi, &ret->ci)) {
                                ret->gpu = i;
                                return true;
                        }
                        return false;
                }
                for (unsigned a = 0; a < g->n_gis; a++)
                        for (unsigned b = 0; b < g->gis[a].n_cis; b++) {
                                struct sim_ci *ci = &g->gis[a].cis[b];
                                char legacy[128];
                                snprintf(legacy, sizeof(legacy), "MIG-%s/%u/%u", g->uuid, g->gis[a].id, ci->id);
                                if (uuid_prefix(ci->uuid, tok) || strcasecmp(legacy, tok) == 0) {
                                        *ret = (struct candidate) { i, &g->gis[a], ci };
                                        return g->mig_current != 0;
                                }
                        }
        }
        return false;
}

static CUresult enumerate(void) {
        _cleanup_free_ char *path = sim_default_state_path();
        struct sim_session ss;
        struct candidate all[CUSIM_MAX_DEVICES], pick[CUSIM_MAX_DEVICES];
        size_t n_all, n_pick = 0;

        if (!path)
                return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_session_begin(&ss, path, false, true) < 0) {
                fprintf(stderr, "cuda-sim: %s\n", sim_error_get());
                return CUDA_ERROR_NO_DEVICE;
        }
        n_all = default_devices(ss.state, all, CUSIM_MAX_DEVICES);
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        if (!cvd) {
                memcpy(pick, all, n_all * sizeof(all[0]));
                n_pick = n_all;
        } else {
                _cleanup_free_ char *copy = strdup(cvd);
                char *save = NULL;
                if (!copy) {
                        sim_session_end(&ss);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                for (char *tok = strtok_r(copy, ",", &save); tok && n_pick < CUSIM_MAX_DEVICES;
                     tok = strtok_r(NULL, ",", &save)) {
                        while (*tok == ' ')
                                tok++;
                        size_t len = strlen(tok);
                        while (len > 0 && tok[len - 1] == ' ')
                                tok[--len] = 0;
                        struct candidate c;
                        if (!resolve_token(ss.state, tok, all, n_all, &c))
                                break;
                        bool dup = false;
                        for (size_t k = 0; k < n_pick; k++)
                                dup |= pick[k].gpu == c.gpu && pick[k].ci == c.ci && pick[k].gi == c.gi;
                        if (dup)
                                break;
                        pick[n_pick++] = c;
                }
        }
        for (size_t i = 0; i < n_pick; i++) {
                struct sim_gpu *g = &ss.state->gpus[pick[i].gpu];
                struct cu_dev *d = &cu_devs[i];
                fill_dev(d, g, pick[i].gpu, pick[i].gi, pick[i].ci);
                d->static_bytes = sim_used_mib(g, d->mig ? d->gi : SIM_ID_NONE) * 1024ULL * 1024ULL;
                d->mem = sim_live_device(cu_live, sim_live_mem_key(d->gpu, d->gi));
                d->comp = sim_live_device(cu_live, sim_live_key(d->gpu, d->gi, d->ci));
                d->primary_flags = 0;
        }
        cu_ndevs = (int) n_pick;
        sim_session_end(&ss);
        for (int i = 0; i < cu_ndevs; i++)
                if (!cu_devs[i].mem || !cu_devs[i].comp) {
                        fprintf(stderr, "cuda-sim: live region full\n");
                        return CUDA_ERROR_UNKNOWN;
                }
        return CUDA_SUCCESS;
}

/* At exit the slots give their bytes back at once. Destructors that run after
 * (the CUDA runtime's teardown frees memory and releases primary contexts)
 * then touch no shared counter: a second give-back would drive the device's
 * count below zero for every later process. */
static _Atomic bool slots_released;

static void release_slots(void) {
        if (forked_after_init || !cu_live)
                return;
        pthread_mutex_lock(&cu_lock);
        slots_released = true;
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].slot) {
                        sim_live_release(cu_live, cu_devs[i].slot, cu_self);
                        cu_devs[i].slot = NULL;
                }
        pthread_mutex_unlock(&cu_lock);
}

static void atfork_child(void) {
        /* As the real driver: a child of a process that initialised CUDA cannot use it. */
        if (cu_initialized)
                forked_after_init = true;
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&cu_lock, &a);
        pthread_mutexattr_destroy(&a);
}

CU_EXPORT CUresult cuInit(unsigned int Flags) {
        static bool once;

        if (Flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        if (forked_after_init) {
                pthread_mutex_unlock(&cu_lock);
                return CUDA_ERROR_NOT_INITIALIZED;
        }
        if (!once) {
                once = true;
                cu_wave_ns = cu_env_u64("MIGKIT_SIM_KERNEL_NS", 10000);
                cu_queue_ahead_ns = cu_env_u64("MIGKIT_SIM_QUEUE_AHEAD_MS", 50) * 1000000ULL;
                _cleanup_free_ char *path = sim_default_state_path();
                cu_self = sim_live_self();
                if (!path)
                        init_result = CUDA_ERROR_OUT_OF_MEMORY;
                else if (sim_live_open(path, &cu_live) < 0) {
                        fprintf(stderr, "cuda-sim: %s\n", sim_error_get());
                        init_result = CUDA_ERROR_NO_DEVICE;
                } else
                        init_result = enumerate();
                if (init_result == CUDA_SUCCESS) {
                        cu_initialized = true;
                        atexit(release_slots);
                        pthread_atfork(NULL, NULL, atfork_child);
                }
        }
        CUresult r = init_result;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CUresult cu_check_init(void) {
        if (forked_after_init)
                return CUDA_ERROR_NOT_INITIALIZED;
        return cu_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}



CUresult cu_dev_get(CUdevice d, struct cu_dev **ret) {
        CHECK_INIT();
        if (d < 0 || d >= cu_ndevs)
                return CUDA_ERROR_INVALID_DEVICE;
        *ret = &cu_devs[d];
        return CUDA_SUCCESS;
}


/* ---- this process's slot in the live region ---- */

struct sim_live_slot *cu_slot(struct cu_dev *d) {
        if (!d->slot && !slots_released) {
                d->slot = sim_live_claim(cu_live, cu_self, d->gpu, d->gi, d->ci);
                if (!d->slot)
                        cu_log("no free slot in the live region: this process is not accounted");
        }
        return d->slot;
}

uint64_t cu_dev_used(struct cu_dev *d) {
        return sim_live_used(cu_live, d->gpu, d->gi, false) + d->static_bytes;
}

static void refresh_static(struct cu_dev *d) {
        _cleanup_free_ char *path = sim_default_state_path();
        struct sim_session ss;

        if (!path || sim_session_begin(&ss, path, false, true) < 0)
                return;
        if (d->gpu < ss.state->n_gpus)
                d->static_bytes = sim_used_mib(&ss.state->gpus[d->gpu], d->mig ? d->gi : SIM_ID_NONE) * 1024ULL *
                                  1024ULL;
        sim_session_end(&ss);
}

static bool try_charge(struct cu_dev *d, uint64_t bytes) {
        uint64_t cap = d->total_bytes > d->static_bytes ? d->total_bytes - d->static_bytes : 0;
        uint64_t used = atomic_load(&d->mem->used_bytes);
        for (;;) {
                if (used > cap || bytes > cap - used)
                        return false;
                if (atomic_compare_exchange_weak(&d->mem->used_bytes, &used, used + bytes))
                        return true;
        }
}

CUresult cu_charge(struct cu_dev *d, uint64_t bytes) {
        struct sim_live_slot *s = cu_slot(d);

        if (bytes == 0)
                return CUDA_SUCCESS;
        if (slots_released)
                return CUDA_ERROR_DEINITIALIZED;
        if (!try_charge(d, bytes)) {
                /* Slow path: reap dead processes' charges, re-read NVML-level processes. */
                (void) sim_live_used(cu_live, d->gpu, d->gi, false);
                refresh_static(d);
                if (!try_charge(d, bytes))
                        return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (s)
                atomic_fetch_add(&s->used_bytes, bytes);
        return CUDA_SUCCESS;
}

void cu_uncharge(struct cu_dev *d, uint64_t bytes) {
        if (bytes == 0 || slots_released)
                return;
        if (d->slot)
                atomic_fetch_sub(&d->slot->used_bytes, bytes);
        atomic_fetch_sub(&d->mem->used_bytes, bytes);
}

/* ---- contexts ---- */

struct cu_ctx *cu_current(void) {
        return cu_ctx_depth > 0 ? cu_ctx_stack[cu_ctx_depth - 1] : NULL;
}

bool cu_ctx_valid(struct cu_ctx *ctx) {
        return ctx && ctx->magic == MAGIC_CTX;
}

CUresult cu_ctx_or_current(struct cu_ctx *ctx, struct cu_ctx **ret) {
        CHECK_INIT();
        if (!ctx)
                ctx = cu_current();
        if (!cu_ctx_valid(ctx))
                return CUDA_ERROR_INVALID_CONTEXT;
        *ret = ctx;
        return CUDA_SUCCESS;
}

extern void cu_ctx_free_resources(struct cu_ctx *ctx); /* memory.c */
extern struct cu_stream *cu_stream_new(struct cu_ctx *ctx, unsigned flags, int prio); /* exec.c */

/* ---- error names ---- */

static const struct {
        CUresult code;
        const char *name, *text;
} errors[] = {
#define E(c, t) { c, #c, t }
        E(CUDA_SUCCESS, "no error"),
        E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
        E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
        E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
        E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
        E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
        E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
        E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA driver is too old for this call"),
        E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
        E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
        E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
        E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
        E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
        E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
        E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
        E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
        E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
        E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
        E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
        E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
        E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
        E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
        E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
        E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
        E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
        E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
        E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
        E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
        E(CUDA_ERROR_NOT_READY, "device not ready"),
        E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
        E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
        E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
        E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
        E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
        E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
        E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
        E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
        E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
        E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
        E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
        E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
        E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
        E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
        E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
        E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
        E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
        E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream"),
        E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
        E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
        E(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded"),
        E(CUDA_ERROR_UNKNOWN, "unknown error"),
#undef E
};

CU_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].code == error) {
                        *pStr = errors[i].name;
                        return CUDA_SUCCESS;
                }
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].code == error) {
                        *pStr = errors[i].text;
                        return CUDA_SUCCESS;
                }
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
}
