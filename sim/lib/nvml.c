/* The exported NVML API of the simulator (libnvidia-ml.so.1).
 *
 * Every function except nvmlErrorString runs as one "call": the init check,
 * armed faults (per-process ones from MIGKIT_SIM_FAULTS, machine-wide ones
 * from the state file), then a session on the state file (state.h), shared
 * for reads and exclusive for changes. Handles are per-process interned
 * objects keyed by (GPU index[, GI id[, CI id]]) and are checked against the
 * current state on every call: a handle whose GI or CI is gone gets
 * NVML_ERROR_INVALID_ARGUMENT, as an invalid handle does.
 *
 * Facts: NVML API reference / nvml.h doc comments (CUDA 12.2 and 13.0
 * headers), summarised in docs/simulator.md; model tables in catalog.c. */
#include <pthread.h>
#include <sys/mman.h>
#include <strings.h>
#include <time.h>

#include "lib/catalog.h"
#include "lib/live.h"
#include "lib/mig.h"
#include "lib/state.h"
#include "lib/topo.h"
#include "lib/util.h"
#include "mksim.h"
#include "nvml/nvml-abi.h"

/* Export every function of the ABI with its exact prototype. */
#define X(name, ret, args) MKSIM_EXPORT ret name args;
MK_NVML_FUNCTIONS(X)
#undef X

#define SIM_DRIVER_VERSION "550.54.15"
#define SIM_NVML_VERSION "12.550.54.15"
#define SIM_CUDA_DRIVER_VERSION 12040
#define SIM_EVENT_POLL_MS 20
#define SIM_SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | \
                              nvmlEventTypeDoubleBitEccError)
#define MIB (1024ULL * 1024ULL)

/* ---- process-wide library state (lib_mutex) ---- */

struct env_fault {
        char function[SIM_FUNCTION_NAME_MAX];
        unsigned remaining;
        int error;
};

static pthread_mutex_t lib_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count;
static char *state_path;                      /* fixed at the 0 -> 1 init */
static struct env_fault env_faults[SIM_MAX_FAULTS];
static size_t n_env_faults;
static unsigned op_latency_ms;                /* MIGKIT_SIM_OP_LATENCY_MS, fixed at the 0 -> 1 init */

#define HANDLE_MAGIC 0x6d6b7369u /* "mksi" */

struct nvmlDevice_st {
        unsigned magic;
        unsigned gpu;
        unsigned gi, ci; /* SIM_ID_NONE for a full GPU */
};

struct nvmlGpuInstance_st {
        unsigned magic;
        unsigned gpu, gi;
};

struct nvmlComputeInstance_st {
        unsigned magic;
        unsigned gpu, gi, ci;
};

struct event_reg {
        unsigned long long mask;
        unsigned long long since; /* events with seq > since are delivered */
};

struct nvmlEventSet_st {
        unsigned magic;
        struct event_reg reg[SIM_MAX_GPUS];
        unsigned long long cursor; /* last delivered seq */
};

/* Registries of everything we handed out; handles live for the process. */
struct registry {
        void **items;
        size_t n, cap;
};

static struct registry devices, gpu_instances, compute_instances, event_sets;

static bool registry_has(const struct registry *r, const void *p) {
        for (size_t i = 0; i < r->n; i++)
                if (r->items[i] == p)
                        return true;
        return false;
}

static bool registry_add(struct registry *r, void *p) {
        if (r->n == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : 64;
                void **items = realloc(r->items, cap * sizeof(*items));
                if (!items)
                        return false;
                r->items = items;
                r->cap = cap;
        }
        r->items[r->n++] = p;
        return true;
}

static void registry_remove(struct registry *r, const void *p) {
        for (size_t i = 0; i < r->n; i++)
                if (r->items[i] == p) {
                        r->items[i] = r->items[--r->n];
                        return;
                }
}

static nvmlDevice_t intern_device(unsigned gpu, unsigned gi, unsigned ci) {
        nvmlDevice_t d = NULL;

        pthread_mutex_lock(&lib_mutex);
        for (size_t i = 0; i < devices.n; i++) {
                nvmlDevice_t x = devices.items[i];
                if (x->gpu == gpu && x->gi == gi && x->ci == ci) {
                        d = x;
                        goto out;
                }
        }
        d = calloc(1, sizeof(*d));
        if (!d)
                goto out;
        *d = (struct nvmlDevice_st) { .magic = HANDLE_MAGIC, .gpu = gpu, .gi = gi, .ci = ci };
        if (!registry_add(&devices, d)) {
                free(d);
                d = NULL;
        }
out:
        pthread_mutex_unlock(&lib_mutex);
        return d;
}

static nvmlGpuInstance_t intern_gi(unsigned gpu, unsigned gi) {
        nvmlGpuInstance_t h = NULL;

        pthread_mutex_lock(&lib_mutex);
        for (size_t i = 0; i < gpu_instances.n; i++) {
                nvmlGpuInstance_t x = gpu_instances.items[i];
                if (x->gpu == gpu && x->gi == gi) {
                        h = x;
                        goto out;
                }
        }
        h = calloc(1, sizeof(*h));
        if (!h)
                goto out;
        *h = (struct nvmlGpuInstance_st) { .magic = HANDLE_MAGIC, .gpu = gpu, .gi = gi };
        if (!registry_add(&gpu_instances, h)) {
                free(h);
                h = NULL;
        }
out:
        pthread_mutex_unlock(&lib_mutex);
        return h;
}

static nvmlComputeInstance_t intern_ci(unsigned gpu, unsigned gi, unsigned ci) {
        nvmlComputeInstance_t h = NULL;

        pthread_mutex_lock(&lib_mutex);
        for (size_t i = 0; i < compute_instances.n; i++) {
                nvmlComputeInstance_t x = compute_instances.items[i];
                if (x->gpu == gpu && x->gi == gi && x->ci == ci) {
                        h = x;
                        goto out;
                }
        }
        h = calloc(1, sizeof(*h));
        if (!h)
                goto out;
        *h = (struct nvmlComputeInstance_st) { .magic = HANDLE_MAGIC, .gpu = gpu, .gi = gi, .ci = ci };
        if (!registry_add(&compute_instances, h)) {
                free(h);
                h = NULL;
        }
out:
        pthread_mutex_unlock(&lib_mutex);
        return h;
}

static bool known(struct registry *r, const void *p) {
        pthread_mutex_lock(&lib_mutex);
        bool ok = p && registry_has(r, p);
        pthread_mutex_unlock(&lib_mutex);
        return ok;
}

/* ---- faults from the environment (per process) ---- */

static bool function_known(const char *name) {
#define X(fn, ret, args) if (streq(name, #fn)) return true;
        MK_NVML_FUNCTIONS(X)
#undef X
        return false;
}

/* "fn:N:ERROR,fn:N:ERROR". Called with lib_mutex held. */
static int parse_env_faults(const char *spec) {
        n_env_faults = 0;
        if (!spec || !*spec)
                return 0;
        _cleanup_free_ char *copy = strdup(spec);
        if (!copy)
                return sim_error(-ENOMEM, "out of memory");
        char *save = NULL;
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                char *c1 = strchr(item, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                uint32_t n;
                int err;
                if (!c1 || !c2)
                        return sim_error(-EINVAL, "MIGKIT_SIM_FAULTS: '%s' is not FUNCTION:N:ERROR", item);
                *c1 = *c2 = '\0';
                if (!function_known(item))
                        return sim_error(-EINVAL, "MIGKIT_SIM_FAULTS: unknown NVML function '%s'", item);
                if (sim_parse_u32(c1 + 1, &n) < 0 || n == 0)
                        return sim_error(-EINVAL, "MIGKIT_SIM_FAULTS: invalid call number '%s'", c1 + 1);
                if (sim_nvml_error_parse(c2 + 1, &err) < 0 || err == NVML_SUCCESS)
                        return sim_error(-EINVAL, "MIGKIT_SIM_FAULTS: unknown NVML error '%s'", c2 + 1);
                if (n_env_faults >= SIM_MAX_FAULTS)
                        return sim_error(-E2BIG, "MIGKIT_SIM_FAULTS: more than %d faults", SIM_MAX_FAULTS);
                struct env_fault *f = &env_faults[n_env_faults++];
                snprintf(f->function, sizeof(f->function), "%s", item);
                f->remaining = n;
                f->error = err;
        }
        return 0;
}

/* Counts a call of fn against the armed per-process faults; returns the
 * error to fail with, or NVML_SUCCESS. Called with lib_mutex held. */
static nvmlReturn_t env_fault_hit(const char *fn) {
        nvmlReturn_t hit = NVML_SUCCESS;

        for (size_t i = 0; i < n_env_faults; i++) {
                struct env_fault *f = &env_faults[i];
                if (!streq(f->function, fn) || f->remaining == 0)
                        continue;
                if (--f->remaining == 0 && hit == NVML_SUCCESS)
                        hit = (nvmlReturn_t) f->error;
        }
        return hit;
}

/* ---- calls ---- */

struct call {
        struct sim_session ss;
        struct sim_state *st;
        char *path;
        bool mutating;
        unsigned latency_ms;   /* a mutating call lasts this long, outside every lock */
        struct sim_live *live; /* the live region, when this call read it */
};

static void report(const char *msg) {
        fprintf(stderr, "migkit-sim: %s\n", msg);
}

/* Counts the call against the state's armed faults. Needs an exclusive
 * session; returns the error to fail with, or NVML_SUCCESS. */
static nvmlReturn_t state_fault_hit(struct sim_state *st, const char *fn, bool *ret_changed) {
        nvmlReturn_t hit = NVML_SUCCESS;
        size_t w = 0;

        *ret_changed = false;
        for (size_t i = 0; i < st->n_faults; i++) {
                struct sim_fault *f = &st->faults[i];
                if (streq(f->function, fn)) {
                        *ret_changed = true;
                        if (--f->remaining == 0) {
                                if (hit == NVML_SUCCESS)
                                        hit = (nvmlReturn_t) f->error;
                                continue; /* disarmed */
                        }
                }
                st->faults[w++] = *f;
        }
        st->n_faults = w;
        return hit;
}

static bool state_has_fault(const struct sim_state *st, const char *fn) {
        for (size_t i = 0; i < st->n_faults; i++)
                if (streq(st->faults[i].function, fn))
                        return true;
        return false;
}

static nvmlReturn_t call_begin(struct call *c, const char *fn, bool mutating) {
        nvmlReturn_t r;
        int k;

        *c = (struct call) { .mutating = mutating };
        pthread_mutex_lock(&lib_mutex);
        if (init_count == 0) {
                pthread_mutex_unlock(&lib_mutex);
                return NVML_ERROR_UNINITIALIZED;
        }
        c->path = strdup(state_path);
        c->latency_ms = mutating ? op_latency_ms : 0;
        r = env_fault_hit(fn);
        pthread_mutex_unlock(&lib_mutex);
        if (!c->path)
                return NVML_ERROR_MEMORY;
        sim_error_clear();
        if (r != NVML_SUCCESS)
                goto fail;

        k = sim_session_begin(&c->ss, c->path, mutating, true);
        if (k < 0) {
                report(sim_error_get());
                r = NVML_ERROR_UNKNOWN;
                goto fail;
        }
        if (state_has_fault(c->ss.state, fn)) {
                bool changed;
                if (!c->ss.exclusive) {
                        sim_session_end(&c->ss);
                        k = sim_session_begin(&c->ss, c->path, true, true);
                        if (k < 0) {
                                report(sim_error_get());
                                r = NVML_ERROR_UNKNOWN;
                                goto fail;
                        }
                }
                r = state_fault_hit(c->ss.state, fn, &changed);
                if (changed && sim_session_save(&c->ss) < 0) {
                        report(sim_error_get());
                        r = NVML_ERROR_UNKNOWN;
                }
                if (r != NVML_SUCCESS) {
                        sim_session_end(&c->ss);
                        goto fail;
                }
                /* A change the call itself makes must be saved again. */
                c->ss.saved = false;
        }
        c->st = c->ss.state;
        return NVML_SUCCESS;
fail:
        free(c->path);
        c->path = NULL;
        return r;
}

static nvmlReturn_t call_end(struct call *c, nvmlReturn_t r) {
        bool crash = false;

        if (c->mutating && r == NVML_SUCCESS) {
                if (c->st->crash_after > 0 && --c->st->crash_after == 0)
                        crash = true;
                if (sim_session_save(&c->ss) < 0) {
                        report(sim_error_get());
                        r = NVML_ERROR_UNKNOWN;
                        crash = false;
                }
        }
        sim_session_end(&c->ss);
        free(c->path);
        c->path = NULL;
        /* Drop this process's page-table entries of the live region (the
         * shared file pages stay in the page cache): a scan of its slots
         * would otherwise leave tens of MB in the caller's RSS, which is not
         * what an NVML client holds on a real machine. */
        if (c->live)
                (void) madvise(c->live, sizeof(*c->live), MADV_DONTNEED);
        c->live = NULL;
        if (crash) {
                /* As if killed by SIGKILL right after the driver call returned. */
                fflush(NULL);
                _exit(137);
        }
        /* The operation's duration, with no lock held: calls on other GPUs
         * (other threads, other processes) go on meanwhile, as on a driver. */
        sim_sleep_ms(c->latency_ms);
        return r;
}

#define CALL_BEGIN(c, mutating)                                            \
        do {                                                               \
                nvmlReturn_t _r = call_begin((c), __func__, (mutating));   \
                if (_r != NVML_SUCCESS)                                    \
                        return _r;                                         \
        } while (0)

/* ---- resolving handles against the state ---- */

struct dev {
        unsigned index;
        struct sim_gpu *g;
        struct sim_gi *gi; /* MIG device handles only */
        struct sim_ci *ci;
        bool mig;
};

static nvmlReturn_t resolve_device(struct call *c, nvmlDevice_t device, struct dev *ret) {
        if (!known(&devices, device))
                return NVML_ERROR_INVALID_ARGUMENT;
        if (device->gpu >= c->st->n_gpus)
                return NVML_ERROR_INVALID_ARGUMENT;
        *ret = (struct dev) { .index = device->gpu, .g = &c->st->gpus[device->gpu] };
        if (ret->g->lost)
                return NVML_ERROR_GPU_IS_LOST;
        if (device->gi != SIM_ID_NONE) {
                ret->mig = true;
                ret->gi = sim_gpu_find_gi(ret->g, device->gi);
                ret->ci = ret->gi ? sim_gi_find_ci(ret->gi, device->ci) : NULL;
                if (!ret->ci)
                        return NVML_ERROR_INVALID_ARGUMENT; /* destroyed: stale handle */
        }
        return NVML_SUCCESS;
}

/* A full-GPU handle: MIG device handles get NOT_SUPPORTED. */
static nvmlReturn_t resolve_gpu(struct call *c, nvmlDevice_t device, struct dev *ret) {
        nvmlReturn_t r = resolve_device(c, device, ret);
        if (r != NVML_SUCCESS)
                return r;
        return ret->mig ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

struct gih {
        unsigned index;
        struct sim_gpu *g;
        struct sim_gi *gi;
        const struct sim_gi_profile *p;
};

static nvmlReturn_t resolve_gi(struct call *c, nvmlGpuInstance_t h, struct gih *ret) {
        if (!known(&gpu_instances, h) || h->gpu >= c->st->n_gpus)
                return NVML_ERROR_INVALID_ARGUMENT;
        ret->index = h->gpu;
        ret->g = &c->st->gpus[h->gpu];
        if (ret->g->lost)
                return NVML_ERROR_GPU_IS_LOST;
        ret->gi = sim_gpu_find_gi(ret->g, h->gi);
        if (!ret->gi)
                return NVML_ERROR_INVALID_ARGUMENT;
        ret->p = sim_gi_profile_by_enum(ret->g->model, ret->gi->profile);
        return ret->p ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

struct cih {
        struct gih gi;
        struct sim_ci *ci;
};

static nvmlReturn_t resolve_ci(struct call *c, nvmlComputeInstance_t h, struct cih *ret) {
        if (!known(&compute_instances, h) || h->gpu >= c->st->n_gpus)
                return NVML_ERROR_INVALID_ARGUMENT;
        ret->gi.index = h->gpu;
        ret->gi.g = &c->st->gpus[h->gpu];
        if (ret->gi.g->lost)
                return NVML_ERROR_GPU_IS_LOST;
        ret->gi.gi = sim_gpu_find_gi(ret->gi.g, h->gi);
        ret->ci = ret->gi.gi ? sim_gi_find_ci(ret->gi.gi, h->ci) : NULL;
        if (!ret->ci)
                return NVML_ERROR_INVALID_ARGUMENT;
        ret->gi.p = sim_gi_profile_by_enum(ret->gi.g->model, ret->gi.gi->profile);
        return ret->gi.p ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t copy_string(char *buf, unsigned length, const char *s) {
        if (!buf)
                return NVML_ERROR_INVALID_ARGUMENT;
        size_t n = strlen(s);
        if ((size_t) length < n + 1)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(buf, s, n + 1);
        return NVML_SUCCESS;
}

/* ---- init, shutdown, errors, system ---- */

static nvmlReturn_t init_common(const char *fn) {
        struct sim_session ss;
        nvmlReturn_t r;

        pthread_mutex_lock(&lib_mutex);
        if (init_count == 0) {
                free(state_path);
                state_path = sim_default_state_path();
                if (!state_path) {
                        pthread_mutex_unlock(&lib_mutex);
                        return NVML_ERROR_MEMORY;
                }
                if (parse_env_faults(getenv("MIGKIT_SIM_FAULTS")) < 0 || sim_op_latency_ms(&op_latency_ms) < 0) {
                        n_env_faults = 0;
                        report(sim_error_get());
                        pthread_mutex_unlock(&lib_mutex);
                        return NVML_ERROR_UNKNOWN;
                }
        }
        r = env_fault_hit(fn);
        _cleanup_free_ char *path = strdup(state_path);
        pthread_mutex_unlock(&lib_mutex);
        if (r != NVML_SUCCESS)
                return r;
        if (!path)
                return NVML_ERROR_MEMORY;

        if (sim_session_begin(&ss, path, false, true) < 0) {
                report(sim_error_get());
                return NVML_ERROR_UNKNOWN;
        }
        if (state_has_fault(ss.state, fn)) {
                bool changed;
                sim_session_end(&ss);
                if (sim_session_begin(&ss, path, true, true) < 0) {
                        report(sim_error_get());
                        return NVML_ERROR_UNKNOWN;
                }
                r = state_fault_hit(ss.state, fn, &changed);
                if (changed && sim_session_save(&ss) < 0) {
                        report(sim_error_get());
                        r = NVML_ERROR_UNKNOWN;
                }
        }
        sim_session_end(&ss);
        if (r != NVML_SUCCESS)
                return r;

        pthread_mutex_lock(&lib_mutex);
        init_count++;
        pthread_mutex_unlock(&lib_mutex);
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
        return init_common(__func__);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
        return init_common(__func__);
}

nvmlReturn_t nvmlShutdown(void) {
        struct call c;

        /* Faults apply as to any call, but a state file gone bad meanwhile
         * must not keep the library initialised. */
        nvmlReturn_t r = call_begin(&c, __func__, false);
        if (r == NVML_SUCCESS)
                call_end(&c, NVML_SUCCESS);
        else if (r != NVML_ERROR_UNKNOWN || !*sim_error_get())
                return r;
        pthread_mutex_lock(&lib_mutex);
        r = NVML_SUCCESS;
        if (init_count == 0)
                r = NVML_ERROR_UNINITIALIZED;
        else
                init_count--;
        pthread_mutex_unlock(&lib_mutex);
        return r;
}

const char *nvmlErrorString(nvmlReturn_t result) {
        /* The strings of libnvidia-ml as far as public sources show them:
         * pynvml's fallback table (1-18, 20, 999), nvidia-smi output ("In
         * use by another client", "Insufficient Resources" in go-nvml error
         * messages). The others are UNVERIFIED. */
        switch ((int) result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
        case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
        case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
        case NVML_ERROR_IN_USE: return "In use by another client";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case NVML_ERROR_NO_DATA: return "No data";
        case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
                return "The requested vgpu operation is not available on target device, becasue ECC is enabled";
        case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
        case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
        case NVML_ERROR_DEPRECATED: return "Deprecated";
        case NVML_ERROR_NOT_READY: return "System is not ready";
        case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
        case NVML_ERROR_INVALID_STATE: return "Resource not in correct state to perform requested operation";
        default: return "Unknown Error";
        }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
        struct call c;

        CALL_BEGIN(&c, false);
        return call_end(&c, copy_string(version, length, SIM_DRIVER_VERSION));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
        struct call c;

        CALL_BEGIN(&c, false);
        return call_end(&c, copy_string(version, length, SIM_NVML_VERSION));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!cudaDriverVersion)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *cudaDriverVersion = SIM_CUDA_DRIVER_VERSION;
        return call_end(&c, NVML_SUCCESS);
}

/* ---- devices ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!deviceCount)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *deviceCount = (unsigned) c.st->n_gpus;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!device || index >= c.st->n_gpus)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        if (c.st->gpus[index].lost)
                return call_end(&c, NVML_ERROR_GPU_IS_LOST);
        nvmlDevice_t d = intern_device(index, SIM_ID_NONE, SIM_ID_NONE);
        if (!d)
                return call_end(&c, NVML_ERROR_MEMORY);
        *device = d;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!uuid || !device)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        for (size_t i = 0; i < c.st->n_gpus; i++) {
                struct sim_gpu *g = &c.st->gpus[i];
                nvmlDevice_t d = NULL;
                if (streq(g->uuid, uuid)) {
                        d = intern_device((unsigned) i, SIM_ID_NONE, SIM_ID_NONE);
                        if (!d)
                                return call_end(&c, NVML_ERROR_MEMORY);
                }
                for (unsigned j = 0; !d && j < g->n_gis; j++)
                        for (unsigned k = 0; !d && k < g->gis[j].n_cis; k++)
                                if (streq(g->gis[j].cis[k].uuid, uuid)) {
                                        d = intern_device((unsigned) i, g->gis[j].id, g->gis[j].cis[k].id);
                                        if (!d)
                                                return call_end(&c, NVML_ERROR_MEMORY);
                                }
                if (d && g->lost)
                        return call_end(&c, NVML_ERROR_GPU_IS_LOST);
                if (d) {
                        *device = d;
                        return call_end(&c, NVML_SUCCESS);
                }
        }
        return call_end(&c, NVML_ERROR_NOT_FOUND);
}

/* "[domain:]bus:device[.function]", hex fields. */
static bool parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn) {
        unsigned long v[4] = { 0, 0, 0, 0 };
        const char *p = s;
        int fields = 0;
        char sep[4] = { 0 };

        while (fields < 4) {
                char *end;
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
                        return false;
                errno = 0;
                v[fields] = strtoul(p, &end, 16);
                if (errno || end == p || end - p > 8)
                        return false;
                sep[fields] = *end;
                fields++;
                if (*end == '\0')
                        break;
                if (*end != ':' && *end != '.')
                        return false;
                p = end + 1;
        }
        /* Accept d:b:D.f, b:D.f, d:b:D and b:D. */
        if (fields == 4 && sep[0] == ':' && sep[1] == ':' && sep[2] == '.') {
                *dom = (unsigned) v[0], *bus = (unsigned) v[1], *dev = (unsigned) v[2], *fn = (unsigned) v[3];
        } else if (fields == 3 && sep[0] == ':' && sep[1] == '.') {
                *dom = 0, *bus = (unsigned) v[0], *dev = (unsigned) v[1], *fn = (unsigned) v[2];
        } else if (fields == 3 && sep[0] == ':' && sep[1] == ':') {
                *dom = (unsigned) v[0], *bus = (unsigned) v[1], *dev = (unsigned) v[2], *fn = 0;
        } else if (fields == 2 && sep[0] == ':') {
                *dom = 0, *bus = (unsigned) v[0], *dev = (unsigned) v[1], *fn = 0;
        } else
                return false;
        return true;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
        struct call c;
        unsigned dom, bus, dv, fn;

        CALL_BEGIN(&c, false);
        if (!pciBusId || !device || !parse_bus_id(pciBusId, &dom, &bus, &dv, &fn))
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        for (size_t i = 0; i < c.st->n_gpus; i++)
                if (dom == 0 && dv == 0 && fn == 0 && c.st->gpus[i].bus == bus) {
                        if (c.st->gpus[i].lost)
                                return call_end(&c, NVML_ERROR_GPU_IS_LOST);
                        nvmlDevice_t d = intern_device((unsigned) i, SIM_ID_NONE, SIM_ID_NONE);
                        if (!d)
                                return call_end(&c, NVML_ERROR_MEMORY);
                        *device = d;
                        return call_end(&c, NVML_SUCCESS);
                }
        return call_end(&c, NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !index)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                /* On a MIG handle: its index for nvmlDeviceGetMigDeviceHandleByIndex (nvml.h). */
                *index = d.mig ? sim_mig_device_index(d.g, d.gi->id, d.ci->id) : d.index;
        return call_end(&c, r);
}

static void mig_device_name(const struct dev *d, char *buf, size_t size) {
        char profile[64];
        const struct sim_gi_profile *p = sim_gi_profile_by_enum(d->g->model, d->gi->profile);

        sim_profile_name(d->g->model, p, d->ci->size, profile, sizeof(profile));
        snprintf(buf, size, "%s MIG %s", d->g->model->name, profile);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
        struct call c;
        struct dev d;
        char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        if (d.mig)
                mig_device_name(&d, buf, sizeof(buf));
        else
                snprintf(buf, sizeof(buf), "%s", d.g->model->name);
        return call_end(&c, copy_string(name, length, buf));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        return call_end(&c, copy_string(uuid, length, d.mig ? d.ci->uuid : d.g->uuid));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !pci)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0u, d.g->bus, 0u);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", 0u, d.g->bus, 0u);
        pci->domain = 0;
        pci->bus = d.g->bus;
        pci->device = 0;
        pci->pciDeviceId = d.g->model->pci_device_id;
        pci->pciSubSystemId = d.g->model->pci_subsystem_id;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !minorNumber)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *minorNumber = d.index;
        return call_end(&c, r);
}

/* Every simulated model is a data-center part, which current drivers report
 * as NVML_BRAND_NVIDIA ("Product Brand : NVIDIA" in nvidia-smi -q; the T4
 * said Tesla on older drivers: UNVERIFIED for it). A MIG device handle
 * answers its parent's brand (UNVERIFIED). */
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !type)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *type = NVML_BRAND_NVIDIA;
        return call_end(&c, r);
}

/* The live region (CUDA processes of the CUDA driver simulator); NULL when it cannot be mapped. */
static struct sim_live *live_get(struct call *c) {
        struct sim_live *l;
        if (sim_live_open(c->path, &l) < 0)
                return NULL;
        c->live = l;
        return l;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !memory)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned long long total, used;
        struct sim_live *l = live_get(&c);
        if (d.mig) {
                total = sim_gi_profile_by_enum(d.g->model, d.gi->profile)->memory_mib * MIB;
                used = sim_used_mib(d.g, d.gi->id) * MIB + (l ? sim_live_used(l, d.index, d.gi->id, false) : 0);
        } else {
                total = d.g->model->memory_mib * MIB;
                used = sim_used_mib(d.g, SIM_ID_NONE) * MIB + (l ? sim_live_used(l, d.index, 0, true) : 0);
        }
        used = MIN(used, total);
        memory->total = total;
        memory->used = used;
        memory->free = total - used;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && (!major || !minor))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) {
                *major = d.g->model->cc_major;
                *minor = d.g->model->cc_minor;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !arch)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *arch = d.g->model->arch;
        return call_end(&c, r);
}

/* ---- MIG mode ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!currentMode || !pendingMode))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_model_has_mig(d.g->model))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS) {
                *currentMode = d.g->mig_current;
                *pendingMode = d.g->mig_pending;
        }
        return call_end(&c, r);
}

/* Compute mode: kept per GPU in the state file (so nvidia-smi -c, the MPS
 * control daemon and tests see one value); MIG device handles refuse it,
 * as the driver does. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !mode)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *mode = (nvmlComputeMode_t) d.g->compute_mode;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && mode != NVML_COMPUTEMODE_DEFAULT && mode != NVML_COMPUTEMODE_PROHIBITED &&
            mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
                r = NVML_ERROR_INVALID_ARGUMENT; /* EXCLUSIVE_THREAD is gone since CUDA 8 */
        if (r == NVML_SUCCESS)
                d.g->compute_mode = (unsigned) mode;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!activationStatus || mode > NVML_DEVICE_MIG_ENABLE))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_model_has_mig(d.g->model))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && mode == NVML_DEVICE_MIG_DISABLE && d.g->n_gis > 0)
                r = NVML_ERROR_IN_USE;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);

        struct sim_gpu *g = d.g;
        g->mig_pending = mode;
        if (g->model->mode_persistent) {
                /* Ampere: the mode changes at the next GPU reset. */
                *activationStatus = g->mig_pending != g->mig_current ? NVML_ERROR_RESET_REQUIRED : NVML_SUCCESS;
        } else if (g->mig_current == mode) {
                *activationStatus = NVML_SUCCESS;
        } else if (sim_gpu_has_processes(g)) {
                /* Hopper+: applied at once only on an idle GPU (nvml.h:
                 * "if device unbind fails because the device isn't idle"). */
                *activationStatus = NVML_ERROR_IN_USE;
        } else {
                g->mig_current = mode;
                *activationStatus = NVML_SUCCESS;
        }
        return call_end(&c, NVML_SUCCESS);
}

/* ---- GPU instance profiles and placements ---- */

static void fill_gi_info(const struct sim_gi_profile *p, nvmlGpuInstanceProfileInfo_t *info) {
        *info = (nvmlGpuInstanceProfileInfo_t) {
                .id = p->id,
                .isP2pSupported = 0,
                .sliceCount = p->slices,
                .instanceCount = p->max,
                .multiprocessorCount = p->sms,
                .copyEngineCount = p->ce,
                .decoderCount = p->dec,
                .encoderCount = p->enc,
                .jpegCount = p->jpeg,
                .ofaCount = p->ofa,
                .memorySizeMB = p->memory_mib,
        };
}

/* The profile `profile` (NVML enum) of a full-GPU handle. */
static nvmlReturn_t gi_profile_for_enum(struct call *c, nvmlDevice_t device, unsigned profile, const void *info,
                                        struct dev *d, const struct sim_gi_profile **ret) {
        nvmlReturn_t r = resolve_gpu(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!sim_model_has_mig(d->g->model))
                return NVML_ERROR_NOT_SUPPORTED;
        *ret = sim_gi_profile_by_enum(d->g->model, profile);
        return *ret ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_enum(&c, device, profile, info, &d, &p);
        if (r == NVML_SUCCESS)
                fill_gi_info(p, info);
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;
        nvmlGpuInstanceProfileInfo_t v1;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], profname[64];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_enum(&c, device, profile, info, &d, &p);
        if (r == NVML_SUCCESS && info->version != nvmlGpuInstanceProfileInfo_v2 &&
            info->version != nvmlGpuInstanceProfileInfo_v3)
                r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        fill_gi_info(p, &v1);
        sim_profile_name(d.g->model, p, 0, profname, sizeof(profname));
        snprintf(name, sizeof(name), "MIG %s", profname);
        if (info->version == nvmlGpuInstanceProfileInfo_v2) {
                *info = (nvmlGpuInstanceProfileInfo_v2_t) {
                        .version = nvmlGpuInstanceProfileInfo_v2,
                        .id = v1.id,
                        .isP2pSupported = v1.isP2pSupported,
                        .sliceCount = v1.sliceCount,
                        .instanceCount = v1.instanceCount,
                        .multiprocessorCount = v1.multiprocessorCount,
                        .copyEngineCount = v1.copyEngineCount,
                        .decoderCount = v1.decoderCount,
                        .encoderCount = v1.encoderCount,
                        .jpegCount = v1.jpegCount,
                        .ofaCount = v1.ofaCount,
                        .memorySizeMB = v1.memorySizeMB,
                };
                snprintf(info->name, sizeof(info->name), "%s", name);
        } else {
                nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *) (void *) info;
                *v3 = (nvmlGpuInstanceProfileInfo_v3_t) {
                        .version = nvmlGpuInstanceProfileInfo_v3,
                        .id = v1.id,
                        .sliceCount = v1.sliceCount,
                        .instanceCount = v1.instanceCount,
                        .multiprocessorCount = v1.multiprocessorCount,
                        .copyEngineCount = v1.copyEngineCount,
                        .decoderCount = v1.decoderCount,
                        .encoderCount = v1.encoderCount,
                        .jpegCount = v1.jpegCount,
                        .ofaCount = v1.ofaCount,
                        .memorySizeMB = v1.memorySizeMB,
                        .capabilities = 0, /* no P2P, no graphics */
                };
                snprintf(v3->name, sizeof(v3->name), "%s", name);
        }
        return call_end(&c, NVML_SUCCESS);
}

/* The profile with driver id `profileId` of a full-GPU handle; need_mig:
 * MIG mode must currently be enabled. */
static nvmlReturn_t gi_profile_for_id(struct call *c, nvmlDevice_t device, unsigned profileId, bool need_mig,
                                      struct dev *d, const struct sim_gi_profile **ret) {
        nvmlReturn_t r = resolve_gpu(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (!sim_model_has_mig(d->g->model) || (need_mig && !d->g->mig_current))
                return NVML_ERROR_NOT_SUPPORTED;
        *ret = sim_gi_profile_by_id(d->g->model, profileId);
        return *ret ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, false, &d, &p);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned s = 0; s < d.g->model->memory_units; s++)
                n += !!(p->starts & (1u << s));
        if (!placements) {
                *count = n;
                return call_end(&c, NVML_SUCCESS);
        }
        if (*count < n) {
                *count = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        n = 0;
        for (unsigned s = 0; s < d.g->model->memory_units; s++)
                if (p->starts & (1u << s))
                        placements[n++] = (nvmlGpuInstancePlacement_t) { .start = s, .size = p->units };
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, true, &d, &p);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *count = sim_gi_remaining(d.g, p);
        return call_end(&c, r);
}

/* ---- GPU instances ---- */

static nvmlReturn_t create_gi(struct call *c, nvmlDevice_t device, unsigned profileId,
                              const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gpuInstance) {
        struct dev d;
        const struct sim_gi_profile *p;
        unsigned start;

        nvmlReturn_t r = gi_profile_for_id(c, device, profileId, true, &d, &p);
        if (r != NVML_SUCCESS)
                return r;
        if (!gpuInstance)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (placement) {
                int k = sim_gi_check(d.g, p, placement->start, placement->size);
                if (k == -EINVAL)
                        return NVML_ERROR_INVALID_ARGUMENT;
                if (k < 0)
                        return NVML_ERROR_INSUFFICIENT_RESOURCES;
                start = placement->start;
        } else if (sim_gi_pick_start(d.g, p, &start) < 0)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;

        struct sim_gi *gi = sim_gi_create(c->st, d.g, p, start);
        if (!gi)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        nvmlGpuInstance_t h = intern_gi(d.index, gi->id);
        if (!h)
                return NVML_ERROR_MEMORY; /* not saved: the session drops the change */
        *gpuInstance = h;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t *gpuInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        return call_end(&c, create_gi(&c, device, profileId, NULL, gpuInstance));
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        if (!placement) {
                /* Still check the handle first, as every call does. */
                struct dev d;
                nvmlReturn_t r = resolve_gpu(&c, device, &d);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
        }
        return call_end(&c, create_gi(&c, device, profileId, placement, gpuInstance));
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        int k = sim_gi_destroy(h.g, h.gi->id);
        return call_end(&c, k == -EBUSY ? NVML_ERROR_IN_USE : k < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, true, &d, &p);
        /* Like the driver, *count is output only: the array must hold the
         * profile's instanceCount (nvml.h; DCGM passes count = 0). */
        if (r == NVML_SUCCESS && (!gpuInstances || !count))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned i = 0; i < d.g->n_gis; i++) {
                if (d.g->gis[i].profile != p->nvml_enum)
                        continue;
                nvmlGpuInstance_t h = intern_gi(d.index, d.g->gis[i].id);
                if (!h)
                        return call_end(&c, NVML_ERROR_MEMORY);
                gpuInstances[n++] = h;
        }
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !gpuInstance)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (!sim_model_has_mig(d.g->model) || !d.g->mig_current))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && !sim_gpu_find_gi(d.g, id))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlGpuInstance_t h = intern_gi(d.index, id);
                if (!h)
                        r = NVML_ERROR_MEMORY;
                else
                        *gpuInstance = h;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r == NVML_SUCCESS && !info)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        nvmlDevice_t dev = intern_device(h.index, SIM_ID_NONE, SIM_ID_NONE);
        if (!dev)
                return call_end(&c, NVML_ERROR_MEMORY);
        *info = (nvmlGpuInstanceInfo_t) {
                .device = dev,
                .id = h.gi->id,
                .profileId = h.p->id,
                .placement = { .start = h.gi->start, .size = h.gi->size },
        };
        return call_end(&c, NVML_SUCCESS);
}

/* ---- compute instances ---- */

static void fill_ci_info(const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                         nvmlComputeInstanceProfileInfo_t *info) {
        *info = (nvmlComputeInstanceProfileInfo_t) {
                .id = cp->nvml_enum,
                .sliceCount = cp->slices,
                .instanceCount = cp->max,
                .multiprocessorCount = cp->sms,
                .sharedCopyEngineCount = p->ce,
                .sharedDecoderCount = p->dec,
                .sharedEncoderCount = p->enc,
                .sharedJpegCount = p->jpeg,
                .sharedOfaCount = p->ofa,
        };
}

static nvmlReturn_t ci_profile_for_enum(struct call *c, nvmlGpuInstance_t gi, unsigned profile,
                                        unsigned engProfile, const void *info, struct gih *h,
                                        struct sim_ci_profile *ret) {
        nvmlReturn_t r = resolve_gi(c, gi, h);
        if (r != NVML_SUCCESS)
                return r;
        if (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
            engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                return NVML_ERROR_INVALID_ARGUMENT;
        return sim_ci_profile_get(h->p, profile, ret) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_enum(&c, gpuInstance, profile, engProfile, info, &h, &cp);
        if (r == NVML_SUCCESS)
                fill_ci_info(h.p, &cp, info);
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;
        nvmlComputeInstanceProfileInfo_t v1;
        char profname[64];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_enum(&c, gpuInstance, profile, engProfile, info, &h, &cp);
        if (r == NVML_SUCCESS && info->version != nvmlComputeInstanceProfileInfo_v2 &&
            info->version != nvmlComputeInstanceProfileInfo_v3)
                r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        fill_ci_info(h.p, &cp, &v1);
        sim_profile_name(h.g->model, h.p, cp.slices, profname, sizeof(profname));
        unsigned version = info->version;
        nvmlComputeInstanceProfileInfo_v2_t v2 = {
                .version = version,
                .id = v1.id,
                .sliceCount = v1.sliceCount,
                .instanceCount = v1.instanceCount,
                .multiprocessorCount = v1.multiprocessorCount,
                .sharedCopyEngineCount = v1.sharedCopyEngineCount,
                .sharedDecoderCount = v1.sharedDecoderCount,
                .sharedEncoderCount = v1.sharedEncoderCount,
                .sharedJpegCount = v1.sharedJpegCount,
                .sharedOfaCount = v1.sharedOfaCount,
        };
        snprintf(v2.name, sizeof(v2.name), "MIG %s", profname);
        /* v3 = v2 + capabilities (0: no graphics); same prefix layout. */
        memcpy(info, &v2, sizeof(v2));
        if (version == nvmlComputeInstanceProfileInfo_v3)
                ((nvmlComputeInstanceProfileInfo_v3_t *) (void *) info)->capabilities = 0;
        return call_end(&c, NVML_SUCCESS);
}

static nvmlReturn_t ci_profile_for_id(struct call *c, nvmlGpuInstance_t gi, unsigned profileId, struct gih *h,
                                      struct sim_ci_profile *ret) {
        nvmlReturn_t r = resolve_gi(c, gi, h);
        if (r != NVML_SUCCESS)
                return r;
        /* The CI driver profile id equals the CI enum (nvidia-smi mig -lcip). */
        if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        return sim_ci_profile_get(h->p, profileId, ret) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *count = sim_ci_remaining(h.gi, h.p, &cp);
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                 unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t *placements,
                                                                 unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;
        unsigned starts[SIM_MAX_CI];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = sim_ci_placements(h.p, &cp, starts, SIM_MAX_CI);
        if (!placements) {
                *count = n;
                return call_end(&c, NVML_SUCCESS);
        }
        if (*count < n) {
                *count = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (unsigned i = 0; i < n; i++)
                placements[i] = (nvmlComputeInstancePlacement_t) { .start = starts[i], .size = cp.slices };
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

static nvmlReturn_t create_ci(struct call *c, nvmlGpuInstance_t gpuInstance, unsigned profileId,
                              const nvmlComputeInstancePlacement_t *placement,
                              nvmlComputeInstance_t *computeInstance) {
        struct gih h;
        struct sim_ci_profile cp;
        unsigned start;

        nvmlReturn_t r = ci_profile_for_id(c, gpuInstance, profileId, &h, &cp);
        if (r != NVML_SUCCESS)
                return r;
        if (!computeInstance)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (placement) {
                int k = sim_ci_check(h.gi, h.p, &cp, placement->start, placement->size);
                if (k == -EINVAL)
                        return NVML_ERROR_INVALID_ARGUMENT;
                if (k < 0)
                        return NVML_ERROR_INSUFFICIENT_RESOURCES;
                start = placement->start;
        } else if (sim_ci_pick_start(h.gi, h.p, &cp, &start) < 0)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;

        struct sim_ci *ci = sim_ci_create(c->st, h.g, h.gi, &cp, start);
        if (!ci)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, ci->id);
        if (!ch)
                return NVML_ERROR_MEMORY;
        *computeInstance = ch;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        return call_end(&c, create_ci(&c, gpuInstance, profileId, NULL, computeInstance));
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                               unsigned int profileId,
                                                               const nvmlComputeInstancePlacement_t *placement,
                                                               nvmlComputeInstance_t *computeInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        if (!placement) {
                struct gih h;
                nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
        }
        return call_end(&c, create_ci(&c, gpuInstance, profileId, placement, computeInstance));
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
        struct call c;
        struct cih h;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_ci(&c, computeInstance, &h);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        int k = sim_ci_destroy(h.gi.g, h.gi.gi, h.ci->id);
        return call_end(&c, k == -EBUSY ? NVML_ERROR_IN_USE : k < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        /* *count is output only, as for nvmlDeviceGetGpuInstances. */
        if (r == NVML_SUCCESS && (!computeInstances || !count))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned i = 0; i < h.gi->n_cis; i++) {
                if (h.gi->cis[i].profile != cp.nvml_enum)
                        continue;
                nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, h.gi->cis[i].id);
                if (!ch)
                        return call_end(&c, NVML_ERROR_MEMORY);
                computeInstances[n++] = ch;
        }
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r == NVML_SUCCESS && !computeInstance)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_gi_find_ci(h.gi, id))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, id);
                if (!ch)
                        r = NVML_ERROR_MEMORY;
                else
                        *computeInstance = ch;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
        struct call c;
        struct cih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_ci(&c, computeInstance, &h);
        if (r == NVML_SUCCESS && !info)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        nvmlDevice_t dev = intern_device(h.gi.index, SIM_ID_NONE, SIM_ID_NONE);
        nvmlGpuInstance_t gi = intern_gi(h.gi.index, h.gi.gi->id);
        if (!dev || !gi)
                return call_end(&c, NVML_ERROR_MEMORY);
        *info = (nvmlComputeInstanceInfo_t) {
                .device = dev,
                .gpuInstance = gi,
                .id = h.ci->id,
                .profileId = h.ci->profile,
                .placement = { .start = h.ci->start, .size = h.ci->size },
        };
        return call_end(&c, NVML_SUCCESS);
}

/* ---- MIG devices ---- */

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !isMigDevice)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *isMigDevice = d.mig;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !id)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !d.mig)
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS)
                *id = d.gi->id;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !id)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !d.mig)
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS)
                *id = d.ci->id;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        /* nvml.h: "Returns zero if MIG is not supported or enabled." */
        if (r == NVML_SUCCESS)
                *count = d.g->mig_current ? d.g->model->compute_slices : 0;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
        struct call c;
        struct dev d;
        struct sim_gi *gi;
        struct sim_ci *ci;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !migDevice)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (!sim_model_has_mig(d.g->model) || !d.g->mig_current))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && index >= d.g->model->compute_slices)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_mig_device_at(d.g, index, &gi, &ci))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlDevice_t m = intern_device(d.index, gi->id, ci->id);
                if (!m)
                        r = NVML_ERROR_MEMORY;
                else
                        *migDevice = m;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, migDevice, &d);
        if (r == NVML_SUCCESS && (!device || !d.mig))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) {
                nvmlDevice_t p = intern_device(d.index, SIM_ID_NONE, SIM_ID_NONE);
                if (!p)
                        r = NVML_ERROR_MEMORY;
                else
                        *device = p;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !attributes)
                r = NVML_ERROR_INVALID_ARGUMENT;
        /* nvml.h: "currently only supports MIG device handles". */
        if (r == NVML_SUCCESS && !d.mig)
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        const struct sim_gi_profile *p = sim_gi_profile_by_enum(d.g->model, d.gi->profile);
        *attributes = (nvmlDeviceAttributes_t) {
                .multiprocessorCount = p->sms * d.ci->size / p->slices,
                .sharedCopyEngineCount = p->ce,
                .sharedDecoderCount = p->dec,
                .sharedEncoderCount = p->enc,
                .sharedJpegCount = p->jpeg,
                .sharedOfaCount = p->ofa,
                .gpuInstanceSliceCount = p->slices,
                .computeInstanceSliceCount = d.ci->size,
                .memorySizeMB = p->memory_mib,
        };
        return call_end(&c, NVML_SUCCESS);
}

/* ---- processes ---- */

/* Live slots of running processes on a device (all of a GPU's for a full-GPU handle). */
static unsigned live_slots(struct sim_live *l, const struct dev *d, struct sim_live_slot **out) {
        unsigned n = 0;
        for (unsigned i = 0; i < SIM_LIVE_SLOTS; i++) {
                struct sim_live_slot *s = &l->slot[i];
                if (s->gpu != d->index || (d->mig && (s->gi != d->gi->id || s->ci != d->ci->id)))
                        continue;
                if (sim_live_slot_live(l, s))
                        out[n++] = s;
        }
        return n;
}

/* The live slots of a device's CUDA processes (none without a live region). */
static unsigned device_live_slots(struct call *c, struct dev *d, struct sim_live_slot *ret[SIM_LIVE_SLOTS]) {
        struct sim_live *l = live_get(c);
        return l ? live_slots(l, d, ret) : 0;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !infoCount)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (size_t i = 0; i < d.g->n_procs; i++)
                n += !d.mig || (d.g->procs[i].gi == d.gi->id && d.g->procs[i].ci == d.ci->id);
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n_live = device_live_slots(&c, &d, live);
        n += n_live;
        if (*infoCount < n) {
                *infoCount = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        if (n > 0 && !infos)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        n = 0;
        for (size_t i = 0; i < d.g->n_procs; i++) {
                const struct sim_process *p = &d.g->procs[i];
                if (d.mig && !(p->gi == d.gi->id && p->ci == d.ci->id))
                        continue;
                infos[n++] = (nvmlProcessInfo_t) {
                        .pid = p->pid,
                        .usedGpuMemory = p->used_mib * MIB,
                        .gpuInstanceId = p->gi,
                        .computeInstanceId = p->ci,
                };
        }
        for (unsigned i = 0; i < n_live; i++)
                infos[n++] = (nvmlProcessInfo_t) {
                        .pid = sim_live_pid(atomic_load(&live[i]->owner)),
                        .usedGpuMemory = atomic_load(&live[i]->used_bytes),
                        .gpuInstanceId = live[i]->gi,
                        .computeInstanceId = live[i]->ci,
                };
        *infoCount = n;
        return call_end(&c, NVML_SUCCESS);
}

/* ---- events ---- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!set)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        nvmlEventSet_t s = calloc(1, sizeof(*s));
        if (!s)
                return call_end(&c, NVML_ERROR_MEMORY);
        s->magic = HANDLE_MAGIC;
        s->cursor = c.st->event_seq;
        pthread_mutex_lock(&lib_mutex);
        bool ok = registry_add(&event_sets, s);
        pthread_mutex_unlock(&lib_mutex);
        if (!ok) {
                free(s);
                return call_end(&c, NVML_ERROR_MEMORY);
        }
        *set = s;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !known(&event_sets, set))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (eventTypes & ~(unsigned long long) SIM_SUPPORTED_EVENTS))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS) {
                pthread_mutex_lock(&lib_mutex);
                struct event_reg *reg = &set->reg[d.index];
                if (reg->mask == 0)
                        reg->since = c.st->event_seq;
                reg->mask |= eventTypes;
                pthread_mutex_unlock(&lib_mutex);
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !eventTypes)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *eventTypes = SIM_SUPPORTED_EVENTS;
        return call_end(&c, r);
}

/* Whether a GPU registered in `set` has fallen off the bus. */
static bool set_has_lost_gpu(const struct sim_state *st, nvmlEventSet_t set) {
        bool lost = false;

        pthread_mutex_lock(&lib_mutex);
        for (size_t i = 0; i < st->n_gpus && i < SIM_MAX_GPUS; i++)
                lost = lost || (set->reg[i].mask && st->gpus[i].lost);
        pthread_mutex_unlock(&lib_mutex);
        return lost;
}

/* The first queued event for `set`, if any; called inside a session. */
static bool next_event(const struct sim_state *st, nvmlEventSet_t set, nvmlEventData_t *data) {
        bool found = false;

        pthread_mutex_lock(&lib_mutex);
        for (size_t i = 0; i < st->n_events && !found; i++) {
                const struct sim_event *e = &st->events[i];
                if (e->seq <= set->cursor || e->gpu >= SIM_MAX_GPUS)
                        continue;
                const struct event_reg *reg = &set->reg[e->gpu];
                if (!(reg->mask & e->type) || e->seq <= reg->since)
                        continue;
                set->cursor = e->seq;
                found = true;
                pthread_mutex_unlock(&lib_mutex);
                nvmlDevice_t dev = intern_device(e->gpu, SIM_ID_NONE, SIM_ID_NONE);
                pthread_mutex_lock(&lib_mutex);
                *data = (nvmlEventData_t) {
                        .device = dev,
                        .eventType = e->type,
                        .eventData = e->data,
                        .gpuInstanceId = e->gi,
                        .computeInstanceId = e->ci,
                };
        }
        pthread_mutex_unlock(&lib_mutex);
        return found;
}

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!known(&event_sets, set) || !data)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        if (set_has_lost_gpu(c.st, set))
                return call_end(&c, NVML_ERROR_GPU_IS_LOST);
        if (next_event(c.st, set, data))
                return call_end(&c, NVML_SUCCESS);
        _cleanup_free_ char *path = strdup(c.path);
        call_end(&c, NVML_SUCCESS);
        if (!path)
                return NVML_ERROR_MEMORY;

        /* Poll the state file: events come from other processes. */
        long long deadline = now_ms() + timeoutms;
        for (;;) {
                long long left = deadline - now_ms();
                if (left <= 0)
                        return NVML_ERROR_TIMEOUT;
                struct timespec ts = { .tv_sec = 0, .tv_nsec = (long) MIN(left, SIM_EVENT_POLL_MS) * 1000000L };
                nanosleep(&ts, NULL);

                struct sim_session ss;
                if (sim_session_begin(&ss, path, false, true) < 0) {
                        report(sim_error_get());
                        return NVML_ERROR_UNKNOWN;
                }
                if (!known(&event_sets, set)) {
                        sim_session_end(&ss);
                        return NVML_ERROR_INVALID_ARGUMENT; /* freed meanwhile */
                }
                if (set_has_lost_gpu(ss.state, set)) {
                        sim_session_end(&ss);
                        return NVML_ERROR_GPU_IS_LOST;
                }
                bool found = next_event(ss.state, set, data);
                sim_session_end(&ss);
                if (found)
                        return NVML_SUCCESS;
        }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
        struct call c;

        CALL_BEGIN(&c, false);
        pthread_mutex_lock(&lib_mutex);
        bool ok = set && registry_has(&event_sets, set);
        if (ok)
                registry_remove(&event_sets, set);
        pthread_mutex_unlock(&lib_mutex);
        if (ok)
                free(set);
        return call_end(&c, ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT);
}

/* ---- topology (topo.c) ----
 *
 * nvml.h: the NvLink queries take a link 0..NVML_NVLINK_MAX_LINKS-1 and
 * return INVALID_ARGUMENT for a bad device or link or a NULL pointer,
 * NOT_SUPPORTED when the device lacks the feature. A link the part does not
 * have is NOT_SUPPORTED (go-gpuallocator loops over all 18 links and skips
 * exactly that on 12-link A100s). Remote queries on an inactive link are
 * NOT_SUPPORTED (UNVERIFIED: real drivers' answer undocumented). MIG device
 * handles: NOT_SUPPORTED, as for the other GPU-level queries. */

static nvmlReturn_t resolve_link(struct call *c, nvmlDevice_t device, unsigned link, const void *out,
                                 bool need_active, struct sim_link *ret) {
        struct dev d;
        nvmlReturn_t r = resolve_gpu(c, device, &d);
        if (r != NVML_SUCCESS)
                return r;
        if (!out || link >= NVML_NVLINK_MAX_LINKS)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!sim_topo_link(c->st, d.index, link, ret))
                return NVML_ERROR_NOT_SUPPORTED;
        if (need_active && !ret->active)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, isActive, false, &l);
        if (r == NVML_SUCCESS)
                *isActive = l.active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, pci, true, &l);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0u, l.remote_bus, 0u);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", 0u, l.remote_bus, 0u);
        pci->bus = l.remote_bus;
        pci->pciDeviceId = l.remote_pci_device_id;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, pNvLinkDeviceType, true, &l);
        if (r == NVML_SUCCESS)
                *pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t) l.remote_type;
        return call_end(&c, r);
}

/* Two GPUs' closest common PCIe ancestor. The same GPU twice gives INTERNAL
 * (UNVERIFIED; nvidia-smi topo prints "X" there). */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo) {
        struct call c;
        struct dev a, b;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device1, &a);
        if (r == NVML_SUCCESS)
                r = resolve_gpu(&c, device2, &b);
        if (r == NVML_SUCCESS && !pathInfo)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *pathInfo = (nvmlGpuTopologyLevel_t) sim_topo_pcie_level(c.st, a.index, b.index);
        return call_end(&c, r);
}

static void registry_free(struct registry *r) {
        for (size_t i = 0; i < r->n; i++)
                free(r->items[i]);
        free(r->items);
        *r = (struct registry) { 0 };
}

/* Handles die with the library (dlclose, exit): freed for leak checkers.
 * Calls that begin later answer NVML_ERROR_UNINITIALIZED (init_count 0) and
 * the registries are emptied under lib_mutex, so known() never reads a
 * half-freed one. The rule, as for any library: no thread may be inside an
 * NVML call when the library unloads (a call past call_begin() still reads
 * its handle after known()). migkit keeps it: its background NVML callers
 * are joined before exit (the vgpu utilisation watcher by an atexit handler
 * that runs before the destructors, src/vgpu/hook.c watcher_stop(); the
 * device plugin's health thread when the plugin stops). */
static void __attribute__((destructor)) nvml_unload(void) {
        pthread_mutex_lock(&lib_mutex);
        init_count = 0;
        registry_free(&devices);
        registry_free(&gpu_instances);
        registry_free(&compute_instances);
        registry_free(&event_sets);
        free(state_path);
        state_path = NULL;
        pthread_mutex_unlock(&lib_mutex);
}

/* ---- utilisation and older process queries (not in the product's NVML ABI list) ----
 *
 * Kernels the CUDA driver simulator runs are booked per process and device in
 * the live region; utilisation is the busy fraction of the last sample window
 * (MIGKIT_SIM_UTIL_WINDOW_MS, default 1000 ms, NVML's 1 s period for most
 * GPUs). Like the real driver, MIG-enabled GPUs and MIG devices answer
 * NVML_ERROR_NOT_SUPPORTED. Memory utilisation (bandwidth) is not modelled: 0.
 * Layouts: nvml.h nvmlUtilization_t, nvmlProcessUtilizationSample_t,
 * nvmlProcessInfo_v1_t. */
typedef struct {
        unsigned int gpu, memory;
} sim_nvmlUtilization_t;

typedef struct {
        unsigned int pid;
        unsigned long long timeStamp; /* CPU timestamp in microseconds */
        unsigned int smUtil, memUtil, encUtil, decUtil;
} sim_nvmlProcessUtilizationSample_t;
_Static_assert(sizeof(sim_nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");

typedef struct {
        unsigned int pid;
        unsigned long long usedGpuMemory;
} sim_nvmlProcessInfo_v1_t;
_Static_assert(sizeof(sim_nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");

MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, sim_nvmlUtilization_t *utilization);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                          sim_nvmlProcessUtilizationSample_t *utilization,
                                                          unsigned int *processSamplesCount,
                                                          unsigned long long lastSeenTimeStamp);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                               sim_nvmlProcessInfo_v1_t *infos);

/* Start of the utilisation window ending at now (MIGKIT_SIM_UTIL_WINDOW_MS). */
static uint64_t util_window_from(uint64_t now_ns) {
        const char *e = getenv("MIGKIT_SIM_UTIL_WINDOW_MS");
        uint64_t ms = 1000;
        if (e && *e && (sim_parse_u64(e, false, &ms) < 0 || ms == 0 || ms > UINT64_MAX / 1000000ULL))
                ms = 1000;
        return sim_live_window_from(now_ns, ms * 1000000ULL);
}

/* CLOCK_REALTIME minus CLOCK_MONOTONIC, ns. */
static int64_t real_minus_mono_ns(void) {
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        return ((int64_t) rt.tv_sec * 1000000000LL + rt.tv_nsec) - (int64_t) sim_live_now_ns();
}

/* CLOCK_REALTIME microseconds of a CLOCK_MONOTONIC nanosecond time, and back. */
static unsigned long long mono_to_real_us(uint64_t mono_ns) {
        return (unsigned long long) (((int64_t) mono_ns + real_minus_mono_ns()) / 1000);
}

static uint64_t real_us_to_mono(unsigned long long us) {
        int64_t v = (int64_t) us * 1000 - real_minus_mono_ns();
        return v < 0 ? 0 : (uint64_t) v;
}

static nvmlReturn_t resolve_util_device(struct call *c, nvmlDevice_t device, struct dev *d) {
        nvmlReturn_t r = resolve_device(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (d->mig || d->g->mig_current)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, sim_nvmlUtilization_t *utilization) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_util_device(&c, device, &d);
        if (r == NVML_SUCCESS && !utilization)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n = device_live_slots(&c, &d, live);
        uint64_t now = sim_live_now_ns(), busy = 0;
        uint64_t from = util_window_from(now);
        for (unsigned i = 0; i < n; i++)
                busy += sim_live_busy(live[i], from, now);
        utilization->gpu = sim_live_percent(busy, from, now);
        utilization->memory = 0;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, sim_nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_util_device(&c, device, &d);
        if (r == NVML_SUCCESS && !processSamplesCount)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n = device_live_slots(&c, &d, live);
        if (!utilization || *processSamplesCount < n) {
                *processSamplesCount = n;
                return call_end(&c, n == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE);
        }
        uint64_t now = sim_live_now_ns();
        uint64_t from = MAX(util_window_from(now), real_us_to_mono(lastSeenTimeStamp));
        if (from >= now) {
                *processSamplesCount = 0;
                return call_end(&c, NVML_ERROR_NOT_FOUND);
        }
        for (unsigned i = 0; i < n; i++) {
                uint64_t busy = sim_live_busy(live[i], from, now);
                utilization[i] = (sim_nvmlProcessUtilizationSample_t) {
                        .pid = sim_live_pid(atomic_load(&live[i]->owner)),
                        .timeStamp = mono_to_real_us(now),
                        .smUtil = sim_live_percent(busy, from, now),
                };
        }
        *processSamplesCount = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
        /* nvmlProcessInfo_v2_t has the layout of the v3 structure. */
        return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  sim_nvmlProcessInfo_v1_t *infos) {
        unsigned n = infoCount ? *infoCount : 0;
        nvmlProcessInfo_t *tmp = n ? calloc(n, sizeof(*tmp)) : NULL;
        if (n && !tmp)
                return NVML_ERROR_MEMORY;
        nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, tmp);
        if (r == NVML_SUCCESS && infos)
                for (unsigned i = 0; i < *infoCount; i++)
                        infos[i] = (sim_nvmlProcessInfo_v1_t) { tmp[i].pid, tmp[i].usedGpuMemory };
        free(tmp);
        return r;
}
