/* State file of the NVML simulator: JSON form, validation, locking, cache;
 * see state.h. */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "lib/host.h"
#include "lib/state.h"
#include "lib/util.h"
#include "nvml/nvml-abi.h"

#define STATE_FORMAT 1

static pthread_mutex_t state_mutex = PTHREAD_MUTEX_INITIALIZER;

/* The per-process cache of the parsed state file. Guarded by state_mutex. */
static struct {
        char *path;
        struct sim_state *state;
        dev_t dev;
        ino_t ino;
        struct timespec mtim;
        off_t size;
        uint64_t gen;
} cache;

char *sim_default_state_path(void) {
        const char *e = getenv("MIGKIT_SIM_STATE");
        char *p = NULL;

        if (e && *e)
                return strdup(e);
        e = getenv("XDG_RUNTIME_DIR");
        if (e && *e) {
                if (asprintf(&p, "%s/migkit-sim-state.json", e) < 0)
                        return NULL;
                return p;
        }
        if (asprintf(&p, "/tmp/migkit-sim-%u.json", (unsigned) getuid()) < 0)
                return NULL;
        return p;
}

struct sim_state *sim_state_free(struct sim_state *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_gpus; i++)
                free(s->gpus[i].procs);
        free(s->gpus);
        free(s->machine);
        free(s->mps_log);
        free(s);
        return NULL;
}

static void format_bus_id(struct sim_gpu *g, unsigned bus) {
        g->bus = bus;
        snprintf(g->bus_id, sizeof(g->bus_id), "%08X:%02X:00.0", 0u, bus);
}

int sim_state_new(const char *machine, struct sim_state **ret) {
        const struct sim_model *models[SIM_MAX_GPUS];

        int n = sim_machine_resolve(machine, models, SIM_MAX_GPUS);
        if (n < 0)
                return n;
        struct sim_state *s = calloc(1, sizeof(*s));
        if (!s)
                return sim_error(-ENOMEM, "out of memory");
        s->machine = strdup(machine);
        s->gpus = calloc((size_t) n, sizeof(*s->gpus));
        if (!s->machine || !s->gpus) {
                sim_state_free(s);
                return sim_error(-ENOMEM, "out of memory");
        }
        s->n_gpus = (size_t) n;
        s->next_pid = SIM_FIRST_FAKE_PID;
        for (size_t i = 0; i < s->n_gpus; i++) {
                struct sim_gpu *g = &s->gpus[i];
                unsigned bus;
                g->model = models[i];
                sim_gpu_uuid(machine, (unsigned) i, g->uuid, sizeof(g->uuid));
                sim_gpu_bus((unsigned) i, (unsigned) n, &bus);
                format_bus_id(g, bus);
        }
        *ret = s;
        return 0;
}

struct sim_gi *sim_gpu_find_gi(struct sim_gpu *g, unsigned gi_id) {
        for (unsigned i = 0; i < g->n_gis; i++)
                if (g->gis[i].id == gi_id)
                        return &g->gis[i];
        return NULL;
}

struct sim_ci *sim_gi_find_ci(struct sim_gi *gi, unsigned ci_id) {
        for (unsigned i = 0; i < gi->n_cis; i++)
                if (gi->cis[i].id == ci_id)
                        return &gi->cis[i];
        return NULL;
}

/* ---- JSON writing ---- */

static json_t *id_or_null(unsigned v) {
        return v == SIM_ID_NONE ? json_null() : json_integer(v);
}

static json_t *faults_to_json(const struct sim_state *s, bool describe) {
        json_t *faults = json_array();

        for (size_t i = 0; i < s->n_faults; i++) {
                const struct sim_fault *f = &s->faults[i];
                json_t *o = json_pack("{s:s, s:i, s:i}", "function", f->function, "remaining", (int) f->remaining,
                                      "error", f->error);
                if (describe && o)
                        json_object_set_new(o, "error_name", json_string(sim_nvml_error_name(f->error)));
                json_array_append_new(faults, o);
        }
        return faults;
}

static json_t *events_to_json(const struct sim_state *s) {
        json_t *events = json_array();

        for (size_t i = 0; i < s->n_events; i++) {
                const struct sim_event *e = &s->events[i];
                json_t *o = json_object();
                json_object_set_new(o, "seq", json_integer((json_int_t) e->seq));
                json_object_set_new(o, "gpu", json_integer(e->gpu));
                json_object_set_new(o, "type", json_integer((json_int_t) e->type));
                json_object_set_new(o, "data", json_integer((json_int_t) e->data));
                json_object_set_new(o, "gi", id_or_null(e->gi));
                json_object_set_new(o, "ci", id_or_null(e->ci));
                json_array_append_new(events, o);
        }
        return events;
}

/* A GPU instance with its compute instances (describe: with profile names and memory). */
static json_t *gi_to_json(const struct sim_model *m, const struct sim_gi *gi, bool describe) {
        const struct sim_gi_profile *p = sim_gi_profile_by_enum(m, gi->profile);
        json_t *go = json_object(), *cis = json_array();
        char name[64];

        json_object_set_new(go, "id", json_integer(gi->id));
        json_object_set_new(go, "profile", json_integer(gi->profile));
        if (describe && p) {
                sim_profile_name(m, p, 0, name, sizeof(name));
                json_object_set_new(go, "profile_id", json_integer(p->id));
                json_object_set_new(go, "profile_name", json_string(name));
                json_object_set_new(go, "memory_mib", json_integer((json_int_t) p->memory_mib));
        }
        json_object_set_new(go, "start", json_integer(gi->start));
        json_object_set_new(go, "size", json_integer(gi->size));
        json_object_set_new(go, "serial", json_integer((json_int_t) gi->serial));
        for (unsigned k = 0; k < gi->n_cis; k++) {
                const struct sim_ci *ci = &gi->cis[k];
                json_t *co = json_object();
                json_object_set_new(co, "id", json_integer(ci->id));
                json_object_set_new(co, "profile", json_integer(ci->profile));
                if (describe && p) {
                        sim_profile_name(m, p, ci->size, name, sizeof(name));
                        json_object_set_new(co, "profile_name", json_string(name));
                }
                json_object_set_new(co, "start", json_integer(ci->start));
                json_object_set_new(co, "size", json_integer(ci->size));
                json_object_set_new(co, "uuid", json_string(ci->uuid));
                json_array_append_new(cis, co);
        }
        json_object_set_new(go, "compute_instances", cis);
        return go;
}

static json_t *gpu_to_json(const struct sim_gpu *g, size_t index, bool describe) {
        const struct sim_model *m = g->model;
        json_t *o = json_object(), *gis = json_array(), *procs = json_array();

        if (describe) {
                json_object_set_new(o, "index", json_integer((json_int_t) index));
                json_object_set_new(o, "name", json_string(m->name));
                json_object_set_new(o, "memory_mib", json_integer((json_int_t) m->memory_mib));
                json_object_set_new(o, "mig_capable", json_boolean(sim_model_has_mig(m)));
        }
        json_object_set_new(o, "model", json_string(m->key));
        json_object_set_new(o, "uuid", json_string(g->uuid));
        json_object_set_new(o, "bus_id", json_string(g->bus_id));
        json_object_set_new(o, "mig_current", json_integer(g->mig_current));
        json_object_set_new(o, "mig_pending", json_integer(g->mig_pending));
        if (g->lost) /* only when set: older state files stay valid */
                json_object_set_new(o, "lost", json_true());
        if (g->compute_mode || describe) /* as "lost": absent means default */
                json_object_set_new(o, "compute_mode", json_integer(g->compute_mode));
        for (unsigned j = 0; j < g->n_gis; j++)
                json_array_append_new(gis, gi_to_json(m, &g->gis[j], describe));
        json_object_set_new(o, "gpu_instances", gis);
        for (size_t j = 0; j < g->n_procs; j++) {
                const struct sim_process *pr = &g->procs[j];
                json_t *po = json_object();
                json_object_set_new(po, "pid", json_integer(pr->pid));
                json_object_set_new(po, "used_mib", json_integer((json_int_t) pr->used_mib));
                json_object_set_new(po, "gi", id_or_null(pr->gi));
                json_object_set_new(po, "ci", id_or_null(pr->ci));
                json_array_append_new(procs, po);
        }
        json_object_set_new(o, "processes", procs);
        return o;
}

json_t *sim_state_to_json(const struct sim_state *s, bool describe) {
        json_t *root = json_object(), *gpus = json_array();

        json_object_set_new(root, "format", json_integer(STATE_FORMAT));
        json_object_set_new(root, "machine", json_string(s->machine));
        json_object_set_new(root, "serial", json_integer((json_int_t) s->serial));
        json_object_set_new(root, "event_seq", json_integer((json_int_t) s->event_seq));
        json_object_set_new(root, "next_pid", json_integer(s->next_pid));
        json_object_set_new(root, "crash_after", json_integer(s->crash_after));
        json_object_set_new(root, "faults", faults_to_json(s, describe));
        json_object_set_new(root, "events", events_to_json(s));
        if (s->n_mps_log) { /* only when set: older state files stay valid */
                json_t *mps = json_array();
                for (size_t i = 0; i < s->n_mps_log; i++)
                        json_array_append_new(mps, json_pack("{s:s,s:s}", "pipe", s->mps_log[i].pipe, "command",
                                                             s->mps_log[i].command));
                json_object_set_new(root, "mps_commands", mps);
        }
        for (size_t i = 0; i < s->n_gpus; i++)
                json_array_append_new(gpus, gpu_to_json(&s->gpus[i], i, describe));
        json_object_set_new(root, "gpus", gpus);
        return root;
}

/* ---- JSON reading, with full validation ---- */

struct reader {
        const char *path;
        char where[160];
};

static int bad(struct reader *rd, const char *what) {
        return sim_error(-EBADMSG, "state file '%s' is corrupted: %s%s%s", rd->path, rd->where,
                         *rd->where ? ": " : "", what);
}

static int get_uint(struct reader *rd, json_t *o, const char *key, unsigned long long max, bool null_ok,
                    unsigned long long null_value, unsigned long long *ret) {
        json_t *v = json_object_get(o, key);
        char msg[128];

        if (null_ok && (!v || json_is_null(v))) {
                *ret = null_value;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (unsigned long long) json_integer_value(v) > max) {
                snprintf(msg, sizeof(msg), "'%s' must be an integer 0..%llu", key, max);
                return bad(rd, msg);
        }
        *ret = (unsigned long long) json_integer_value(v);
        return 0;
}

#define GET_U(rd, o, key, max, dst)                                                \
        do {                                                                       \
                unsigned long long _v;                                             \
                int _r = get_uint((rd), (o), (key), (max), false, 0, &_v);         \
                if (_r < 0)                                                        \
                        return _r;                                                 \
                (dst) = _v;                                                        \
        } while (0)

#define GET_ID(rd, o, key, dst)                                                        \
        do {                                                                           \
                unsigned long long _v;                                                 \
                int _r = get_uint((rd), (o), (key), 0xFFFFFFFEu, true, SIM_ID_NONE, &_v); \
                if (_r < 0)                                                            \
                        return _r;                                                     \
                (dst) = (unsigned) _v;                                                 \
        } while (0)

static int get_str(struct reader *rd, json_t *o, const char *key, char *buf, size_t size) {
        json_t *v = json_object_get(o, key);
        char msg[128];

        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size ||
            strlen(json_string_value(v)) != json_string_length(v)) {
                snprintf(msg, sizeof(msg), "'%s' must be a non-empty string shorter than %zu bytes", key, size);
                return bad(rd, msg);
        }
        memcpy(buf, json_string_value(v), json_string_length(v) + 1);
        return 0;
}

static bool uuid_ok(const char *s, const char *prefix) {
        size_t pl = strlen(prefix);
        if (strncmp(s, prefix, pl) != 0 || strlen(s) != pl + 36)
                return false;
        for (size_t i = 0; i < 36; i++) {
                char c = s[pl + i];
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return false;
        }
        return true;
}

static int read_ci(struct reader *rd, json_t *o, const struct sim_gi_profile *p, struct sim_ci *ci) {
        struct sim_ci_profile cp;

        if (!json_is_object(o))
                return bad(rd, "expected an object");
        GET_U(rd, o, "id", SIM_MAX_CI - 1, ci->id);
        GET_U(rd, o, "profile", NVML_COMPUTE_INSTANCE_PROFILE_COUNT, ci->profile);
        GET_U(rd, o, "start", SIM_MAX_UNITS, ci->start);
        GET_U(rd, o, "size", SIM_MAX_UNITS, ci->size);
        int r = get_str(rd, o, "uuid", ci->uuid, sizeof(ci->uuid));
        if (r < 0)
                return r;
        if (!uuid_ok(ci->uuid, "MIG-"))
                return bad(rd, "'uuid' is not a MIG UUID");
        if (!sim_ci_profile_get(p, ci->profile, &cp))
                return bad(rd, "compute instance profile not offered by its GPU instance");
        if (ci->size != cp.slices || ci->start % cp.align != 0 || ci->start + ci->size > p->slices)
                return bad(rd, "invalid compute instance placement");
        return 0;
}

static int read_gi(struct reader *rd, json_t *o, const struct sim_model *m, struct sim_gi *gi) {
        const struct sim_gi_profile *p;
        size_t base = strlen(rd->where);

        if (!json_is_object(o))
                return bad(rd, "expected an object");
        GET_U(rd, o, "id", 64, gi->id);
        GET_U(rd, o, "profile", NVML_GPU_INSTANCE_PROFILE_COUNT, gi->profile);
        GET_U(rd, o, "start", SIM_MAX_UNITS, gi->start);
        GET_U(rd, o, "size", SIM_MAX_UNITS, gi->size);
        GET_U(rd, o, "serial", (unsigned long long) INT64_MAX, gi->serial);
        p = sim_gi_profile_by_enum(m, gi->profile);
        if (!p)
                return bad(rd, "GPU instance profile not offered by the model");
        if (gi->size != p->units || gi->start >= 32 || !(p->starts & (1u << gi->start)) ||
            gi->id != sim_gi_id_for_placement(m, gi->start, gi->size))
                return bad(rd, "invalid GPU instance placement or id");

        json_t *cis = json_object_get(o, "compute_instances");
        if (!json_is_array(cis) || json_array_size(cis) > p->slices)
                return bad(rd, "'compute_instances' must be an array no longer than the compute slices");
        unsigned used = 0;
        unsigned count[NVML_COMPUTE_INSTANCE_PROFILE_COUNT + 1] = { 0 };
        for (size_t i = 0; i < json_array_size(cis); i++) {
                struct sim_ci *ci = &gi->cis[i];
                snprintf(rd->where + base, sizeof(rd->where) - base, ".compute_instances[%zu]", i);
                int r = read_ci(rd, json_array_get(cis, i), p, ci);
                if (r < 0)
                        return r;
                unsigned mask = ((1u << ci->size) - 1) << ci->start;
                if (used & mask)
                        return bad(rd, "overlapping compute instances");
                used |= mask;
                for (size_t j = 0; j < i; j++)
                        if (gi->cis[j].id == ci->id)
                                return bad(rd, "duplicate compute instance id");
                struct sim_ci_profile cp;
                sim_ci_profile_get(p, ci->profile, &cp);
                if (++count[ci->profile] > cp.max)
                        return bad(rd, "too many compute instances of one profile");
        }
        gi->n_cis = (unsigned) json_array_size(cis);
        rd->where[base] = '\0';
        return 0;
}

/* "bus_id": the fixed format format_bus_id() writes, and the bus number in it. */
static int read_bus_id(struct reader *rd, json_t *o, struct sim_gpu *g) {
        int r = get_str(rd, o, "bus_id", g->bus_id, sizeof(g->bus_id));
        if (r < 0)
                return r;
        /* Fixed format written by format_bus_id(): "00000000:" 2 upper-case hex ":00.0". */
        if (strlen(g->bus_id) != 16 || strncmp(g->bus_id, "00000000:", 9) != 0 ||
            strcmp(g->bus_id + 11, ":00.0") != 0)
                return bad(rd, "'bus_id' must look like 00000000:07:00.0");
        g->bus = 0;
        for (int i = 9; i < 11; i++) {
                char c = g->bus_id[i];
                if (c >= '0' && c <= '9')
                        g->bus = g->bus * 16 + (unsigned) (c - '0');
                else if (c >= 'A' && c <= 'F')
                        g->bus = g->bus * 16 + (unsigned) (c - 'A' + 10);
                else
                        return bad(rd, "'bus_id' must look like 00000000:07:00.0");
        }
        return 0;
}

/* "gpu_instances": placements, counts and media engines checked against the
 * model; kept sorted by id, their compute instances too. */
static int read_gpu_instances(struct reader *rd, json_t *o, struct sim_gpu *g) {
        size_t base = strlen(rd->where);
        int r;

        json_t *gis = json_object_get(o, "gpu_instances");
        if (!json_is_array(gis) || json_array_size(gis) > SIM_MAX_GI)
                return bad(rd, "'gpu_instances' must be an array of at most 8");
        if (json_array_size(gis) > 0 && !g->mig_current)
                return bad(rd, "GPU instances on a GPU with MIG disabled");
        unsigned used = 0, slices = 0, media = 0;
        for (size_t i = 0; i < json_array_size(gis); i++) {
                struct sim_gi *gi = &g->gis[i];
                snprintf(rd->where + base, sizeof(rd->where) - base, ".gpu_instances[%zu]", i);
                r = read_gi(rd, json_array_get(gis, i), g->model, gi);
                if (r < 0)
                        return r;
                const struct sim_gi_profile *p = sim_gi_profile_by_enum(g->model, gi->profile);
                unsigned mask = ((1u << gi->size) - 1) << gi->start;
                if (used & mask)
                        return bad(rd, "overlapping GPU instances");
                used |= mask;
                slices += p->slices;
                media += p->media;
                unsigned same = 0;
                for (size_t j = 0; j <= i; j++)
                        same += g->gis[j].profile == gi->profile;
                if (same > p->max)
                        return bad(rd, "too many GPU instances of one profile");
        }
        g->n_gis = (unsigned) json_array_size(gis);
        rd->where[base] = '\0';
        if (slices > g->model->compute_slices || media > 1)
                return bad(rd, "GPU instances exceed the GPU's compute slices or media engines");
        /* Keep instances sorted by id (ids are unique: placements are disjoint). */
        for (unsigned i = 1; i < g->n_gis; i++)
                for (unsigned j = i; j > 0 && g->gis[j - 1].id > g->gis[j].id; j--) {
                        struct sim_gi t = g->gis[j];
                        g->gis[j] = g->gis[j - 1];
                        g->gis[j - 1] = t;
                }
        for (unsigned i = 0; i < g->n_gis; i++)
                for (unsigned a = 1; a < g->gis[i].n_cis; a++)
                        for (unsigned b = a; b > 0 && g->gis[i].cis[b - 1].id > g->gis[i].cis[b].id; b--) {
                                struct sim_ci t = g->gis[i].cis[b];
                                g->gis[i].cis[b] = g->gis[i].cis[b - 1];
                                g->gis[i].cis[b - 1] = t;
                        }
        return 0;
}

/* "processes": `migkit-sim process add` ones, on existing compute instances. */
static int read_processes(struct reader *rd, json_t *o, struct sim_gpu *g) {
        size_t base = strlen(rd->where);

        json_t *procs = json_object_get(o, "processes");
        if (!json_is_array(procs) || json_array_size(procs) > SIM_MAX_PROCESSES)
                return bad(rd, "'processes' must be an array of at most 1024");
        g->n_procs = json_array_size(procs);
        g->procs = g->n_procs ? calloc(g->n_procs, sizeof(*g->procs)) : NULL;
        if (g->n_procs && !g->procs)
                return sim_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < g->n_procs; i++) {
                struct sim_process *p = &g->procs[i];
                json_t *po = json_array_get(procs, i);
                snprintf(rd->where + base, sizeof(rd->where) - base, ".processes[%zu]", i);
                if (!json_is_object(po))
                        return bad(rd, "expected an object");
                GET_U(rd, po, "pid", 0x7FFFFFFF, p->pid);
                GET_U(rd, po, "used_mib", 1ULL << 40, p->used_mib);
                GET_ID(rd, po, "gi", p->gi);
                GET_ID(rd, po, "ci", p->ci);
                if (p->pid == 0)
                        return bad(rd, "'pid' must be positive");
                if ((p->gi == SIM_ID_NONE) != (p->ci == SIM_ID_NONE))
                        return bad(rd, "'gi' and 'ci' must both be set or both be null");
                if (p->gi != SIM_ID_NONE) {
                        struct sim_gi *gi = sim_gpu_find_gi(g, p->gi);
                        if (!gi || !sim_gi_find_ci(gi, p->ci))
                                return bad(rd, "process on a compute instance that does not exist");
                }
        }
        rd->where[base] = '\0';
        return 0;
}

static int read_gpu(struct reader *rd, json_t *o, struct sim_gpu *g) {
        char model[64];
        int r;

        if (!json_is_object(o))
                return bad(rd, "expected an object");
        r = get_str(rd, o, "model", model, sizeof(model));
        if (r < 0)
                return r;
        g->model = sim_model_find(model);
        if (!g->model)
                return bad(rd, "unknown 'model'");
        r = get_str(rd, o, "uuid", g->uuid, sizeof(g->uuid));
        if (r < 0)
                return r;
        if (!uuid_ok(g->uuid, "GPU-"))
                return bad(rd, "'uuid' is not a GPU UUID");
        r = read_bus_id(rd, o, g);
        if (r < 0)
                return r;
        GET_U(rd, o, "mig_current", 1, g->mig_current);
        GET_U(rd, o, "mig_pending", 1, g->mig_pending);
        if (!sim_model_has_mig(g->model) && (g->mig_current || g->mig_pending))
                return bad(rd, "MIG mode set on a GPU without MIG");
        json_t *lost = json_object_get(o, "lost");
        if (lost && !json_is_boolean(lost))
                return bad(rd, "'lost' must be true or false");
        g->lost = lost && json_is_true(lost);
        json_t *cm = json_object_get(o, "compute_mode");
        if (cm && (!json_is_integer(cm) || json_integer_value(cm) < 0 || json_integer_value(cm) > 3 ||
                   json_integer_value(cm) == 1))
                return bad(rd, "'compute_mode' must be 0 (default), 2 (prohibited) or 3 (exclusive process)");
        g->compute_mode = cm ? (unsigned) json_integer_value(cm) : 0;
        r = read_gpu_instances(rd, o, g);
        if (r < 0)
                return r;
        return read_processes(rd, o, g);
}

/* "faults": armed per state file, on known NVML errors. */
static int read_faults(struct reader *rd, json_t *root, struct sim_state *s) {
        int r;

        json_t *faults = json_object_get(root, "faults");
        if (!json_is_array(faults) || json_array_size(faults) > SIM_MAX_FAULTS)
                return bad(rd, "'faults' must be an array of at most 64");
        for (size_t i = 0; i < json_array_size(faults); i++) {
                struct sim_fault *f = &s->faults[i];
                json_t *fo = json_array_get(faults, i);
                unsigned long long v;
                snprintf(rd->where, sizeof(rd->where), "faults[%zu]", i);
                if (!json_is_object(fo))
                        return bad(rd, "expected an object");
                r = get_str(rd, fo, "function", f->function, sizeof(f->function));
                if (r < 0)
                        return r;
                r = get_uint(rd, fo, "remaining", 0x7FFFFFFF, false, 0, &v);
                if (r < 0)
                        return r;
                f->remaining = (unsigned) v;
                r = get_uint(rd, fo, "error", 999, false, 0, &v);
                if (r < 0)
                        return r;
                f->error = (int) v;
                if (f->remaining == 0 || f->error == 0 || !sim_nvml_error_name(f->error))
                        return bad(rd, "fault needs remaining >= 1 and a known NVML error");
        }
        s->n_faults = json_array_size(faults);
        return 0;
}

/* "gpus": each GPU (read_gpu), in increasing bus order, UUIDs and process ids unique. */
static int read_gpus(struct reader *rd, json_t *root, struct sim_state *s) {
        int r;

        json_t *gpus = json_object_get(root, "gpus");
        *rd->where = '\0';
        if (!json_is_array(gpus) || json_array_size(gpus) == 0 || json_array_size(gpus) > SIM_MAX_GPUS)
                return bad(rd, "'gpus' must be an array of 1 to 64 GPUs");
        s->n_gpus = json_array_size(gpus);
        s->gpus = calloc(s->n_gpus, sizeof(*s->gpus));
        if (!s->gpus)
                return sim_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < s->n_gpus; i++) {
                snprintf(rd->where, sizeof(rd->where), "gpus[%zu]", i);
                r = read_gpu(rd, json_array_get(gpus, i), &s->gpus[i]);
                if (r < 0)
                        return r;
                if (i > 0 && s->gpus[i].bus <= s->gpus[i - 1].bus)
                        return bad(rd, "GPUs must be in increasing PCI bus order");
                for (size_t j = 0; j < i; j++)
                        if (streq(s->gpus[j].uuid, s->gpus[i].uuid))
                                return bad(rd, "duplicate GPU UUID");
        }
        /* Process ids are unique on the machine. */
        for (size_t i = 0; i < s->n_gpus; i++)
                for (size_t a = 0; a < s->gpus[i].n_procs; a++)
                        for (size_t j = i; j < s->n_gpus; j++)
                                for (size_t b = (j == i ? a + 1 : 0); b < s->gpus[j].n_procs; b++)
                                        if (s->gpus[i].procs[a].pid == s->gpus[j].procs[b].pid) {
                                                *rd->where = '\0';
                                                return bad(rd, "duplicate process id");
                                        }
        return 0;
}

/* "mps_commands" (optional): what the MPS control daemon stand-in recorded. */
static int read_mps_log(struct reader *rd, json_t *root, struct sim_state *s) {
        json_t *mps = json_object_get(root, "mps_commands");
        *rd->where = '\0';
        if (mps && (!json_is_array(mps) || json_array_size(mps) > SIM_MAX_MPS_LOG))
                return bad(rd, "'mps_commands' must be an array of at most 256");
        if (mps && json_array_size(mps) > 0) {
                s->mps_log = calloc(SIM_MAX_MPS_LOG, sizeof(*s->mps_log));
                if (!s->mps_log)
                        return -ENOMEM;
                for (size_t i = 0; i < json_array_size(mps); i++) {
                        json_t *mo = json_array_get(mps, i);
                        const char *pp = json_string_value(json_object_get(mo, "pipe"));
                        const char *cc = json_string_value(json_object_get(mo, "command"));
                        if (!pp || !cc || strlen(pp) >= SIM_MPS_PIPE_MAX || strlen(cc) >= SIM_MPS_COMMAND_MAX) {
                                snprintf(rd->where, sizeof(rd->where), "mps_commands[%zu]", i);
                                return bad(rd, "expected {\"pipe\": string, \"command\": string}");
                        }
                        snprintf(s->mps_log[i].pipe, SIM_MPS_PIPE_MAX, "%s", pp);
                        snprintf(s->mps_log[i].command, SIM_MPS_COMMAND_MAX, "%s", cc);
                        s->n_mps_log++;
                }
        }
        return 0;
}

/* "events": Xid events in increasing sequence order, on existing GPUs. */
static int read_events(struct reader *rd, json_t *root, struct sim_state *s) {
        int r;

        json_t *events = json_object_get(root, "events");
        *rd->where = '\0';
        if (!json_is_array(events) || json_array_size(events) > SIM_MAX_EVENTS)
                return bad(rd, "'events' must be an array of at most 256");
        for (size_t i = 0; i < json_array_size(events); i++) {
                struct sim_event *e = &s->events[i];
                json_t *eo = json_array_get(events, i);
                unsigned long long v;
                snprintf(rd->where, sizeof(rd->where), "events[%zu]", i);
                if (!json_is_object(eo))
                        return bad(rd, "expected an object");
                r = get_uint(rd, eo, "seq", s->event_seq, false, 0, &v);
                if (r < 0)
                        return r;
                e->seq = v;
                r = get_uint(rd, eo, "gpu", s->n_gpus - 1, false, 0, &v);
                if (r < 0)
                        return r;
                e->gpu = (unsigned) v;
                r = get_uint(rd, eo, "type", (unsigned long long) INT64_MAX, false, 0, &e->type);
                if (r < 0)
                        return r;
                r = get_uint(rd, eo, "data", (unsigned long long) INT64_MAX, false, 0, &e->data);
                if (r < 0)
                        return r;
                r = get_uint(rd, eo, "gi", 0xFFFFFFFEu, true, SIM_ID_NONE, &v);
                if (r < 0)
                        return r;
                e->gi = (unsigned) v;
                r = get_uint(rd, eo, "ci", 0xFFFFFFFEu, true, SIM_ID_NONE, &v);
                if (r < 0)
                        return r;
                e->ci = (unsigned) v;
                if (i > 0 && e->seq <= s->events[i - 1].seq)
                        return bad(rd, "events must be in increasing 'seq' order");
        }
        s->n_events = json_array_size(events);
        return 0;
}

/* The machine and its counters: "format", "machine", "serial", "event_seq",
 * "next_pid", "crash_after". */
static int read_header(struct reader *rd, json_t *root, struct sim_state *s) {
        unsigned long long fmt;
        int r;

        *rd->where = '\0';
        if (!json_is_object(root))
                return bad(rd, "not a JSON object");
        r = get_uint(rd, root, "format", 1000, false, 0, &fmt);
        if (r < 0)
                return r;
        if (fmt != STATE_FORMAT)
                return bad(rd, "unsupported 'format'");
        json_t *machine = json_object_get(root, "machine");
        if (!json_is_string(machine) || json_string_length(machine) == 0 ||
            json_string_length(machine) >= SIM_MACHINE_SPEC_MAX)
                return bad(rd, "'machine' must be a non-empty string");
        s->machine = strdup(json_string_value(machine));
        if (!s->machine)
                return sim_error(-ENOMEM, "out of memory");
        GET_U(rd, root, "serial", (unsigned long long) INT64_MAX, s->serial);
        GET_U(rd, root, "event_seq", (unsigned long long) INT64_MAX, s->event_seq);
        GET_U(rd, root, "next_pid", 0x7FFFFFFF, s->next_pid);
        GET_U(rd, root, "crash_after", 0x7FFFFFFF, s->crash_after);
        return 0;
}

static int state_from_json(struct reader *rd, json_t *root, struct sim_state **ret) {
        struct sim_state *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return sim_error(-ENOMEM, "out of memory");
        r = read_header(rd, root, s);
        if (r >= 0)
                r = read_faults(rd, root, s);
        if (r >= 0)
                r = read_gpus(rd, root, s);
        if (r >= 0)
                r = read_mps_log(rd, root, s);
        if (r >= 0)
                r = read_events(rd, root, s);
        if (r < 0) {
                sim_state_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* ---- files and locks ---- */

static uint64_t read_gen(int fd) {
        unsigned char b[8];
        uint64_t v = 0;

        if (pread(fd, b, sizeof(b), 0) != (ssize_t) sizeof(b))
                return 0;
        for (int i = 7; i >= 0; i--)
                v = (v << 8) | b[i];
        return v;
}

static void write_gen(int fd, uint64_t v) {
        unsigned char b[8];

        for (int i = 0; i < 8; i++)
                b[i] = (unsigned char) (v >> (8 * i));
        /* Best effort: a missed bump only weakens the cache check, which
         * also compares inode, mtime and size. */
        (void) !pwrite(fd, b, sizeof(b), 0);
}

static void cache_drop(void) {
        cache.state = sim_state_free(cache.state);
        free(cache.path);
        cache.path = NULL;
}

static bool cache_matches(const char *path, const struct stat *st, uint64_t gen) {
        return cache.state && cache.path && streq(cache.path, path) && cache.dev == st->st_dev &&
               cache.ino == st->st_ino && cache.size == st->st_size && cache.mtim.tv_sec == st->st_mtim.tv_sec &&
               cache.mtim.tv_nsec == st->st_mtim.tv_nsec && cache.gen == gen;
}

static void cache_set_identity(const struct stat *st, uint64_t gen) {
        cache.dev = st->st_dev;
        cache.ino = st->st_ino;
        cache.size = st->st_size;
        cache.mtim = st->st_mtim;
        cache.gen = gen;
}

static int load_file(const char *path, uint64_t gen) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;

        if (fd < 0)
                return sim_error(-errno, "cannot open state file '%s': %s", path, strerror(errno));
        if (fstat(fd, &st) < 0)
                return sim_error(-errno, "cannot stat state file '%s': %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return sim_error(-EBADMSG, "state file '%s' is not a regular file", path);
        if (st.st_size > SIM_MAX_STATE_BYTES)
                return sim_error(-E2BIG, "state file '%s' is larger than %d bytes", path, SIM_MAX_STATE_BYTES);

        size_t size = (size_t) st.st_size;
        _cleanup_free_ char *buf = malloc(size + 1);
        if (!buf)
                return sim_error(-ENOMEM, "out of memory");
        size_t got = 0;
        while (got < size) {
                ssize_t n = read(fd, buf + got, size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sim_error(-errno, "cannot read state file '%s': %s", path, strerror(errno));
                if (n == 0)
                        break;
                got += (size_t) n;
        }

        json_error_t jerr;
        json_t *root = json_loadb(buf, got, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return sim_error(-EBADMSG, "state file '%s' is corrupted: line %d column %d: %s", path, jerr.line,
                                 jerr.column, jerr.text);
        struct reader rd = { .path = path };
        struct sim_state *s = NULL;
        int r = state_from_json(&rd, root, &s);
        json_decref(root);
        if (r < 0)
                return r;

        cache_drop();
        cache.path = strdup(path);
        if (!cache.path) {
                sim_state_free(s);
                return sim_error(-ENOMEM, "out of memory");
        }
        cache.state = s;
        cache_set_identity(&st, gen);
        return 0;
}

static int write_all(int fd, const char *buf, size_t size) {
        while (size > 0) {
                ssize_t n = write(fd, buf, size);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                buf += n;
                size -= (size_t) n;
        }
        return 0;
}

/* Removes the "<path>.tmp.XXXXXX" files (mkostemp's six characters) that a
 * process killed between mkostemp() and rename() left beside the state file.
 * Only called under the exclusive flock every writer holds while its
 * temporary file exists, so none of them is a live writer's; once per
 * process and path, at its first save. */
static char *temps_removed_for; /* the state file cleaned so far (under state_mutex) */

static void remove_stale_temps(const char *path) {
        static const char infix[] = ".tmp.";
        if (temps_removed_for && strcmp(temps_removed_for, path) == 0)
                return; /* a directory scan per save is not free */
        free(temps_removed_for);
        temps_removed_for = strdup(path);
        _cleanup_free_ char *dir_copy = strdup(path), *base_copy = strdup(path);
        if (!dir_copy || !base_copy)
                return;
        const char *base = basename(base_copy);
        size_t n = strlen(base);
        DIR *d = opendir(dirname(dir_copy));
        if (!d)
                return;
        for (struct dirent *de; (de = readdir(d));) {
                if (strncmp(de->d_name, base, n) != 0 || strncmp(de->d_name + n, infix, strlen(infix)) != 0)
                        continue;
                const char *x = de->d_name + n + strlen(infix);
                if (strlen(x) == 6 &&
                    strspn(x, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") == 6)
                        (void) unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
}

static int save_file(const char *path, const struct sim_state *s, int lock_fd) {
        json_t *root = sim_state_to_json(s, false);
        if (!root)
                return sim_error(-ENOMEM, "out of memory");
        _cleanup_free_ char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        if (!text)
                return sim_error(-ENOMEM, "out of memory");
        size_t len = strlen(text);
        if (len + 1 > SIM_MAX_STATE_BYTES)
                return sim_error(-E2BIG, "state would exceed %d bytes", SIM_MAX_STATE_BYTES);

        remove_stale_temps(path);
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0)
                return sim_error(-ENOMEM, "out of memory");
        _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return sim_error(-errno, "cannot create '%s': %s", tmp, strerror(errno));
        int r = write_all(fd, text, len);
        if (r >= 0)
                r = write_all(fd, "\n", 1);
        if (r >= 0 && fchmod(fd, 0644) < 0)
                r = -errno;
        /* No fsync, of the file or of the directory: what the simulator
         * models is a process killed at any point, which the rename alone
         * survives (the old state or the new); a power loss of the machine it
         * runs on is not modelled. Two fsyncs a change were most of an
         * 8-GPU apply's time. */
        struct stat st;
        if (r >= 0 && fstat(fd, &st) < 0)
                r = -errno;
        if (r >= 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                int saved = r;
                unlink(tmp);
                return sim_error(saved, "cannot write state file '%s': %s", path, strerror(-saved));
        }
        uint64_t gen = read_gen(lock_fd) + 1;
        write_gen(lock_fd, gen);
        cache_set_identity(&st, gen);
        return 0;
}

static int create_default(struct sim_session *s) {
        const char *machine = getenv("MIGKIT_SIM_MACHINE");
        struct sim_state *st = NULL;

        if (!machine || !*machine)
                machine = "dgx-a100";
        int r = sim_state_new(machine, &st);
        if (r < 0)
                return r;
        return sim_session_replace(s, st);
}

/* Takes the mutex and the flock; on failure holds nothing. */
static int lock_begin(struct sim_session *s, const char *path, bool exclusive) {
        _cleanup_free_ char *lock_path = NULL;
        int r;

        *s = (struct sim_session) { .lock_fd = -1, .exclusive = exclusive };
        if (!path || !*path)
                return sim_error(-EINVAL, "no state file path");
        if (asprintf(&lock_path, "%s.lock", path) < 0)
                return sim_error(-ENOMEM, "out of memory");

        pthread_mutex_lock(&state_mutex);
        s->path = strdup(path);
        if (!s->path) {
                r = sim_error(-ENOMEM, "out of memory");
                goto fail;
        }
        s->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (s->lock_fd < 0) {
                r = sim_error(-errno, "cannot open lock file '%s': %s", lock_path, strerror(errno));
                goto fail;
        }
        while (flock(s->lock_fd, exclusive ? LOCK_EX : LOCK_SH) < 0)
                if (errno != EINTR) {
                        r = sim_error(-errno, "cannot lock '%s': %s", lock_path, strerror(errno));
                        goto fail;
                }
        return 0;
fail:
        if (s->lock_fd >= 0)
                close(s->lock_fd);
        free(s->path);
        *s = (struct sim_session) { .lock_fd = -1 };
        pthread_mutex_unlock(&state_mutex);
        return r;
}

int sim_session_begin_replace(struct sim_session *s, const char *path, bool *ret_exists) {
        struct stat st;
        int r = lock_begin(s, path, true);
        if (r < 0)
                return r;
        if (stat(path, &st) == 0) {
                *ret_exists = true;
                return 0;
        }
        if (errno == ENOENT) {
                *ret_exists = false;
                return 0;
        }
        r = sim_error(-errno, "cannot stat state file '%s': %s", path, strerror(errno));
        s->saved = true;
        sim_session_end(s);
        return r;
}

int sim_session_begin(struct sim_session *s, const char *path, bool exclusive, bool create) {
        int r = lock_begin(s, path, exclusive);
        if (r < 0)
                return r;

        struct stat st;
        if (stat(path, &st) < 0) {
                if (errno != ENOENT) {
                        r = sim_error(-errno, "cannot stat state file '%s': %s", path, strerror(errno));
                        goto fail;
                }
                if (!create) {
                        r = sim_error(-ENOENT, "state file '%s' does not exist", path);
                        goto fail;
                }
                if (!s->exclusive) {
                        /* Upgrade and look again: another process may create it first. */
                        while (flock(s->lock_fd, LOCK_EX) < 0)
                                if (errno != EINTR) {
                                        r = sim_error(-errno, "cannot lock '%s.lock': %s", path, strerror(errno));
                                        goto fail;
                                }
                        s->exclusive = true;
                }
                if (stat(path, &st) < 0) {
                        r = create_default(s);
                        if (r < 0)
                                goto fail;
                        s->state = cache.state;
                        return 0;
                }
        }

        uint64_t gen = read_gen(s->lock_fd);
        if (!cache_matches(path, &st, gen)) {
                r = load_file(path, gen);
                if (r < 0) {
                        cache_drop();
                        goto fail;
                }
                /* A state file from before the host tree existed gets one (best effort). */
                (void) sim_host_write(path, cache.state, false);
        }
        s->state = cache.state;
        return 0;
fail:
        s->saved = true; /* nothing to forget beyond what cache_drop did */
        sim_session_end(s);
        return r;
}

int sim_session_save(struct sim_session *s) {
        if (!s->exclusive)
                return sim_error(-EPERM, "internal error: saving under a shared lock");
        int r = save_file(s->path, s->state, s->lock_fd);
        if (r < 0)
                return r;
        s->saved = true;
        return 0;
}

int sim_session_replace(struct sim_session *s, struct sim_state *st) {
        if (!s->exclusive) {
                sim_state_free(st);
                return sim_error(-EPERM, "internal error: replacing under a shared lock");
        }
        cache_drop();
        cache.path = strdup(s->path);
        cache.state = st;
        s->state = st;
        if (!cache.path) {
                cache_drop();
                return sim_error(-ENOMEM, "out of memory");
        }
        int r = sim_session_save(s);
        if (r < 0)
                cache_drop();
        else
                (void) sim_host_write(s->path, st, true); /* a new machine: its own host tree */
        return r;
}

void sim_session_end(struct sim_session *s) {
        if (s->lock_fd < 0)
                return;
        if (s->exclusive && !s->saved)
                cache_drop();
        close(s->lock_fd); /* releases the flock */
        free(s->path);
        *s = (struct sim_session) { .lock_fd = -1 };
        pthread_mutex_unlock(&state_mutex);
}

/* When the library is unloaded (dlclose), its memory goes with it: free the
 * cache so that leak checkers see nothing left behind. */
static void __attribute__((destructor)) state_unload(void) {
        cache_drop();
        free(temps_removed_for);
}
