/* The simulator's control API (mksim.h): drives the simulated machine from
 * outside NVML. Each function takes the state lock like an NVML call. */
#include <jansson.h>

#include "lib/catalog.h"
#include "lib/mig.h"
#include "lib/host.h"
#include "lib/state.h"
#include "lib/util.h"
#include "mksim.h"
#include "nvml/nvml-abi.h"

#define SIM_PATH_MAX 4096

static _Thread_local char path_buf[SIM_PATH_MAX];

const char *mksim_state_path(void) {
        _cleanup_free_ char *p = sim_default_state_path();

        if (!p || strlen(p) >= sizeof(path_buf))
                return "";
        memcpy(path_buf, p, strlen(p) + 1);
        return path_buf;
}

const char *mksim_last_error(void) {
        return sim_error_get();
}

/* Begins a session on the default state file (creating it if missing). */
static int begin(struct sim_session *s, bool exclusive) {
        _cleanup_free_ char *path = sim_default_state_path();

        sim_error_clear();
        if (!path)
                return sim_error(-ENOMEM, "out of memory");
        return sim_session_begin(s, path, exclusive, true);
}

/* Saves when r >= 0, ends the session, returns r or the save error. */
static int end(struct sim_session *s, int r) {
        if (r >= 0 && s->exclusive) {
                int k = sim_session_save(s);
                if (k < 0)
                        r = k;
        }
        sim_session_end(s);
        return r;
}

int mksim_create_machine(const char *machine, unsigned flags) {
        _cleanup_free_ char *path = sim_default_state_path();
        struct sim_state *st = NULL;
        struct sim_session s;
        bool exists;

        sim_error_clear();
        if (!path)
                return sim_error(-ENOMEM, "out of memory");
        if (!machine)
                return sim_error(-EINVAL, "no machine given");
        int r = sim_state_new(machine, &st);
        if (r < 0)
                return r;
        r = sim_session_begin_replace(&s, path, &exists);
        if (r < 0) {
                sim_state_free(st);
                return r;
        }
        if (exists && !(flags & MKSIM_CREATE_FORCE)) {
                sim_state_free(st);
                s.saved = true;
                sim_session_end(&s);
                return sim_error(-EEXIST, "state file '%s' exists already (use --force to replace it)", path);
        }
        r = sim_session_replace(&s, st);
        sim_session_end(&s);
        return r;
}

int mksim_describe(char **ret_json) {
        struct sim_session s;

        if (!ret_json)
                return sim_error(-EINVAL, "no output pointer");
        int r = begin(&s, false);
        if (r < 0)
                return r;
        json_t *root = sim_state_to_json(s.state, true);
        sim_session_end(&s);
        if (!root)
                return sim_error(-ENOMEM, "out of memory");
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        if (!text)
                return sim_error(-ENOMEM, "out of memory");
        *ret_json = text;
        return 0;
}

int mksim_host_root(char **ret_path) {
        struct sim_session s;

        if (!ret_path)
                return sim_error(-EINVAL, "no output pointer");
        int r = begin(&s, false);
        if (r < 0)
                return r;
        char *root = sim_host_root(s.path);
        r = root ? sim_host_write(s.path, s.state, false) : sim_error(-ENOMEM, "out of memory");
        sim_session_end(&s);
        if (r < 0) {
                free(root);
                return r;
        }
        *ret_path = root;
        return 0;
}

int mksim_gpu_count(unsigned *ret_count) {
        struct sim_session s;

        int r = begin(&s, false);
        if (r < 0)
                return r;
        if (ret_count)
                *ret_count = (unsigned) s.state->n_gpus;
        sim_session_end(&s);
        return 0;
}

static int check_gpu(const struct sim_state *st, unsigned gpu) {
        if (gpu >= st->n_gpus)
                return sim_error(-ENODEV, "no GPU %u (the machine has %zu)", gpu, st->n_gpus);
        return 0;
}

static bool pid_in_use(const struct sim_state *st, unsigned pid) {
        for (size_t i = 0; i < st->n_gpus; i++)
                for (size_t j = 0; j < st->gpus[i].n_procs; j++)
                        if (st->gpus[i].procs[j].pid == pid)
                                return true;
        return false;
}

int mksim_process_add(unsigned gpu, unsigned gi, unsigned ci, unsigned pid, unsigned long long used_mib,
                      unsigned *ret_pid) {
        struct sim_session s;

        if ((gi == MKSIM_ID_NONE) != (ci == MKSIM_ID_NONE))
                return sim_error(-EINVAL, "a process on a MIG device needs both a GPU instance and a compute instance");
        if (pid > 0x7FFFFFFF)
                return sim_error(-EINVAL, "invalid pid %u", pid);
        if (used_mib > (1ULL << 40))
                return sim_error(-EINVAL, "invalid memory size %llu MiB", used_mib);
        int r = begin(&s, true);
        if (r < 0)
                return r;
        struct sim_state *st = s.state;
        r = check_gpu(st, gpu);
        if (r < 0)
                return end(&s, r);
        struct sim_gpu *g = &st->gpus[gpu];
        if (gi != MKSIM_ID_NONE) {
                struct sim_gi *x = sim_gpu_find_gi(g, gi);
                if (!x || !sim_gi_find_ci(x, ci))
                        return end(&s, sim_error(-ENOENT, "GPU %u has no compute instance %u in GPU instance %u",
                                                 gpu, ci, gi));
        }
        if (pid == 0) {
                pid = MAX(st->next_pid, SIM_FIRST_FAKE_PID);
                while (pid_in_use(st, pid))
                        pid++;
                st->next_pid = pid + 1;
        } else if (pid_in_use(st, pid))
                return end(&s, sim_error(-EEXIST, "process %u exists already", pid));
        if (g->n_procs >= SIM_MAX_PROCESSES)
                return end(&s, sim_error(-E2BIG, "too many processes on GPU %u", gpu));
        struct sim_process *procs = realloc(g->procs, (g->n_procs + 1) * sizeof(*procs));
        if (!procs)
                return end(&s, sim_error(-ENOMEM, "out of memory"));
        g->procs = procs;
        g->procs[g->n_procs++] = (struct sim_process) { .pid = pid, .used_mib = used_mib, .gi = gi, .ci = ci };
        r = end(&s, 0);
        if (r >= 0 && ret_pid)
                *ret_pid = pid;
        return r;
}

int mksim_process_remove(unsigned pid) {
        struct sim_session s;

        int r = begin(&s, true);
        if (r < 0)
                return r;
        struct sim_state *st = s.state;
        for (size_t i = 0; i < st->n_gpus; i++) {
                struct sim_gpu *g = &st->gpus[i];
                for (size_t j = 0; j < g->n_procs; j++)
                        if (g->procs[j].pid == pid) {
                                memmove(&g->procs[j], &g->procs[j + 1], (g->n_procs - j - 1) * sizeof(g->procs[0]));
                                g->n_procs--;
                                return end(&s, 0);
                        }
        }
        return end(&s, sim_error(-ENOENT, "no process %u", pid));
}

int mksim_xid(unsigned gpu, unsigned gi, unsigned ci, unsigned long long xid) {
        struct sim_session s;

        if ((gi == MKSIM_ID_NONE) != (ci == MKSIM_ID_NONE))
                return sim_error(-EINVAL, "an Xid on a MIG device needs both a GPU instance and a compute instance");
        if (xid > (unsigned long long) INT64_MAX)
                return sim_error(-EINVAL, "invalid Xid %llu", xid);
        int r = begin(&s, true);
        if (r < 0)
                return r;
        struct sim_state *st = s.state;
        r = check_gpu(st, gpu);
        if (r < 0)
                return end(&s, r);
        if (gi != MKSIM_ID_NONE) {
                struct sim_gi *x = sim_gpu_find_gi(&st->gpus[gpu], gi);
                if (!x || !sim_gi_find_ci(x, ci))
                        return end(&s, sim_error(-ENOENT, "GPU %u has no compute instance %u in GPU instance %u",
                                                 gpu, ci, gi));
        }
        if (st->n_events == SIM_MAX_EVENTS) {
                memmove(&st->events[0], &st->events[1], (SIM_MAX_EVENTS - 1) * sizeof(st->events[0]));
                st->n_events--;
        }
        st->events[st->n_events++] = (struct sim_event) {
                .seq = ++st->event_seq,
                .gpu = gpu,
                .type = nvmlEventTypeXidCriticalError,
                .data = xid,
                .gi = gi,
                .ci = ci,
        };
        return end(&s, 0);
}

int mksim_gpu_set_lost(unsigned gpu, int lost) {
        struct sim_session s;

        int r = begin(&s, true);
        if (r < 0)
                return r;
        r = check_gpu(s.state, gpu);
        if (r < 0)
                return end(&s, r);
        s.state->gpus[gpu].lost = lost != 0;
        return end(&s, 0);
}

static bool nvml_function_known(const char *name) {
#define X(fn, ret, args) if (streq(name, #fn)) return true;
        MK_NVML_FUNCTIONS(X)
#undef X
        return false;
}

int mksim_fault_set(const char *function, unsigned n, int nvml_error) {
        struct sim_session s;

        if (!function || !nvml_function_known(function) || streq(function, "nvmlErrorString"))
                return sim_error(-EINVAL, "unknown NVML function '%s'", function ? function : "");
        if (n == 0)
                return sim_error(-EINVAL, "the call number must be 1 or more");
        if (nvml_error == 0 || !sim_nvml_error_name(nvml_error))
                return sim_error(-EINVAL, "invalid NVML error %d", nvml_error);
        int r = begin(&s, true);
        if (r < 0)
                return r;
        struct sim_state *st = s.state;
        if (st->n_faults >= SIM_MAX_FAULTS)
                return end(&s, sim_error(-E2BIG, "too many faults armed (at most %d)", SIM_MAX_FAULTS));
        struct sim_fault *f = &st->faults[st->n_faults++];
        *f = (struct sim_fault) { .remaining = n, .error = nvml_error };
        snprintf(f->function, sizeof(f->function), "%s", function);
        return end(&s, 0);
}

int mksim_fault_crash_after(unsigned n) {
        struct sim_session s;

        if (n > 0x7FFFFFFF)
                return sim_error(-EINVAL, "invalid count %u", n);
        int r = begin(&s, true);
        if (r < 0)
                return r;
        s.state->crash_after = n;
        return end(&s, 0);
}

int mksim_fault_clear(void) {
        struct sim_session s;

        int r = begin(&s, true);
        if (r < 0)
                return r;
        s.state->n_faults = 0;
        s.state->crash_after = 0;
        return end(&s, 0);
}

int mksim_reset_gpu(unsigned index) {
        struct sim_session s;

        int r = begin(&s, true);
        if (r < 0)
                return r;
        r = check_gpu(s.state, index);
        if (r < 0)
                return end(&s, r);
        r = sim_gpu_reset(s.state, index);
        if (r == -EBUSY)
                r = sim_error(-EBUSY, "GPU %u is in use by %zu process(es)", index, s.state->gpus[index].n_procs);
        return end(&s, r);
}

int mksim_op_wait(void) {
        unsigned ms;

        sim_error_clear();
        int r = sim_op_latency_ms(&ms);
        if (r < 0)
                return r;
        sim_sleep_ms(ms);
        return 0;
}

int mksim_reboot(void) {
        struct sim_session s;

        int r = begin(&s, true);
        if (r < 0)
                return r;
        sim_machine_reboot(s.state);
        return end(&s, 0);
}

int mksim_catalog_machine(size_t i, const char **ret_name, const char **ret_description) {
        const struct sim_machine *m = sim_machine_at(i);

        if (!m)
                return -ENOENT;
        if (ret_name)
                *ret_name = m->name;
        if (ret_description)
                *ret_description = m->description;
        return 0;
}

int mksim_catalog_model(size_t i, const char **ret_name, const char **ret_product_name) {
        const struct sim_model *m = sim_model_at(i);

        if (!m)
                return -ENOENT;
        if (ret_name)
                *ret_name = m->key;
        if (ret_product_name)
                *ret_product_name = m->name;
        return 0;
}

int mksim_nvml_error_from_string(const char *s, int *ret_nvml_error) {
        int v;

        if (sim_nvml_error_parse(s, &v) < 0)
                return sim_error(-EINVAL, "unknown NVML error '%s'", s ? s : "");
        if (ret_nvml_error)
                *ret_nvml_error = v;
        return 0;
}

const char *mksim_nvml_error_to_string(int nvml_error) {
        return sim_nvml_error_name(nvml_error);
}

int mksim_mps_record(const char *pipe, const char *command) {
        struct sim_session s;

        if (!pipe || !command || strlen(pipe) >= SIM_MPS_PIPE_MAX || strlen(command) >= SIM_MPS_COMMAND_MAX)
                return sim_error(-EINVAL, "MPS pipe directory or command too long");
        int r = begin(&s, true);
        if (r < 0)
                return r;
        struct sim_state *st = s.state;
        if (!st->mps_log && !(st->mps_log = calloc(SIM_MAX_MPS_LOG, sizeof(*st->mps_log))))
                return end(&s, sim_error(-ENOMEM, "out of memory"));
        if (st->n_mps_log == SIM_MAX_MPS_LOG) {
                memmove(st->mps_log, st->mps_log + 1, (SIM_MAX_MPS_LOG - 1) * sizeof(*st->mps_log));
                st->n_mps_log--;
        }
        struct sim_mps_command *c = &st->mps_log[st->n_mps_log++];
        snprintf(c->pipe, sizeof(c->pipe), "%s", pipe);
        snprintf(c->command, sizeof(c->command), "%s", command);
        return end(&s, 0);
}
