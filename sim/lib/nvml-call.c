/* The NVML simulator's call machinery (nvml-call.h): the process-wide lock,
 * handle registries, faults, sessions on the state file, handle resolution,
 * init and shutdown, the stubs' common answer. */
#include <pthread.h>
#include <sys/mman.h>

#include "lib/nvml-call.h"

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
static bool trace;                            /* MIGKIT_SIM_NVML_TRACE, read at the 0 -> 1 init */

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

nvmlDevice_t intern_device(unsigned gpu, unsigned gi, unsigned ci) {
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

nvmlGpuInstance_t intern_gi(unsigned gpu, unsigned gi) {
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

nvmlComputeInstance_t intern_ci(unsigned gpu, unsigned gi, unsigned ci) {
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

void nvml_lock(void) {
        pthread_mutex_lock(&lib_mutex);
}

void nvml_unlock(void) {
        pthread_mutex_unlock(&lib_mutex);
}

bool nvml_event_set_known(nvmlEventSet_t set) {
        return known(&event_sets, set);
}

bool nvml_event_set_add(nvmlEventSet_t set) {
        pthread_mutex_lock(&lib_mutex);
        bool ok = registry_add(&event_sets, set);
        pthread_mutex_unlock(&lib_mutex);
        return ok;
}

bool nvml_event_set_remove(nvmlEventSet_t set) {
        pthread_mutex_lock(&lib_mutex);
        bool ok = set && registry_has(&event_sets, set);
        if (ok)
                registry_remove(&event_sets, set);
        pthread_mutex_unlock(&lib_mutex);
        return ok;
}

/* ---- faults from the environment (per process) ---- */

/* Faults can be armed on every function the simulator implements (the
 * IMPL names of the generated table). */
static bool function_known(const char *name) {
#define IMPL true
#define STUB false
#define NVML_NAME(fn, impl) if ((impl) && streq(name, #fn)) return true;
#include "lib/nvml-names.inc"
#undef NVML_NAME
#undef STUB
#undef IMPL
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

void report(const char *msg) {
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

nvmlReturn_t call_begin(struct call *c, const char *fn, bool mutating) {
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

/* The rings of the live region this process has read (and so has mapped)
 * since it last dropped them (lib_mutex). */
static uint64_t rings_read[SIM_LIVE_SLOTS / 64];
static unsigned n_rings_read;

uint64_t slot_busy(struct sim_live_slot *s, uint64_t from_ns, uint64_t to_ns) {
        uint32_t i = s->index;
        if (i < SIM_LIVE_SLOTS) {
                pthread_mutex_lock(&lib_mutex);
                if (!(rings_read[i / 64] & (1ULL << (i % 64)))) {
                        rings_read[i / 64] |= 1ULL << (i % 64);
                        n_rings_read++;
                }
                pthread_mutex_unlock(&lib_mutex);
        }
        return sim_live_busy(s, from_ns, to_ns);
}

/* Drops this process's page-table entries of the live region's rings (the
 * shared file pages stay in the page cache) once it has read more than
 * NVML_RINGS_KEPT of them: reading the busy time of slot after slot would
 * otherwise leave up to 32 MiB in the caller's RSS, which is not what an NVML
 * client holds on a real machine. The directory (32 KiB) and the few rings a
 * poller reads again and again stay mapped: dropping the whole region after
 * every call made each query fault its pages in again, one per slot (5-120 ms
 * a call under load). A thread that reads a ring while another drops them
 * maps it again uncounted: the bound is off by what calls run at once. */
static void rings_trim(struct sim_live *l) {
        pthread_mutex_lock(&lib_mutex);
        if (n_rings_read > NVML_RINGS_KEPT) {
                void *start;
                size_t len;
                sim_live_rings_range(l, &start, &len);
                (void) madvise(start, len, MADV_DONTNEED);
                memset(rings_read, 0, sizeof(rings_read));
                n_rings_read = 0;
        }
        pthread_mutex_unlock(&lib_mutex);
}

nvmlReturn_t call_end(struct call *c, nvmlReturn_t r) {
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
        if (c->live)
                rings_trim(c->live);
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

/* ---- resolving handles against the state ---- */

nvmlReturn_t resolve_device(struct call *c, nvmlDevice_t device, struct dev *ret) {
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
nvmlReturn_t resolve_gpu(struct call *c, nvmlDevice_t device, struct dev *ret) {
        nvmlReturn_t r = resolve_device(c, device, ret);
        if (r != NVML_SUCCESS)
                return r;
        return ret->mig ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t resolve_gi(struct call *c, nvmlGpuInstance_t h, struct gih *ret) {
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

nvmlReturn_t resolve_ci(struct call *c, nvmlComputeInstance_t h, struct cih *ret) {
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

nvmlReturn_t copy_string(char *buf, unsigned length, const char *s) {
        if (!buf)
                return NVML_ERROR_INVALID_ARGUMENT;
        size_t n = strlen(s);
        if ((size_t) length < n + 1)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(buf, s, n + 1);
        return NVML_SUCCESS;
}

/* ---- init, shutdown, errors, system ---- */

nvmlReturn_t nvml_init(const char *fn) {
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
                const char *t = getenv("MIGKIT_SIM_NVML_TRACE");
                trace = t && *t && !streq(t, "0");
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

nvmlReturn_t nvml_shutdown(void) {
        struct call c;

        /* Faults apply as to any call, but a state file gone bad meanwhile
         * must not keep the library initialised. */
        nvmlReturn_t r = call_begin(&c, "nvmlShutdown", false);
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

nvmlReturn_t nvml_stub(const char *fn) {
        pthread_mutex_lock(&lib_mutex);
        bool initialised = init_count > 0, log = trace;
        pthread_mutex_unlock(&lib_mutex);
        if (!initialised)
                return NVML_ERROR_UNINITIALIZED;
        if (log)
                fprintf(stderr, "nvml-sim: %s: not simulated (NVML_ERROR_NOT_SUPPORTED)\n", fn);
        return NVML_ERROR_NOT_SUPPORTED;
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

