/* MPS sharing: plan, paths, Allocate additions, control client (mps.h;
 * k8s-device-plugin v0.16 cmd/mps-control-daemon/mps, internal/plugin/mps.go). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "nvml/nvml.h"
#include "plugin/mps.h"

extern char **environ;

unsigned mk_mps_max_clients(int cc_major, int cc_minor) {
        (void) cc_minor;
        return cc_major >= 7 ? 48 : 16;
}

struct mk_mps_plan *mk_mps_plan_free(struct mk_mps_plan *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n; i++)
                free(p->daemons[i].gpus);
        free(p->daemons);
        free(p);
        return NULL;
}

const struct mk_mps_daemon *mk_mps_plan_find(const struct mk_mps_plan *p, const char *resource) {
        for (size_t i = 0; p && resource && i < p->n; i++)
                if (streq(p->daemons[i].resource, resource))
                        return &p->daemons[i];
        return NULL;
}

/* The daemon of one shared resource: its GPUs in device order, replicas per GPU. */
static int daemon_build(const struct mk_snapshot *s, const struct mk_dp_resource *r, struct mk_mps_daemon *d,
                        struct mk_error *e) {
        *d = (struct mk_mps_daemon) {0};
        snprintf(d->resource, sizeof(d->resource), "%s", r->name);
        d->gpus = calloc(r->n_devices ? r->n_devices : 1, sizeof(*d->gpus));
        if (!d->gpus)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct mk_dp_device *dev = &r->devices[i];
                if (dev->mig)
                        return mk_error_set(e, -EINVAL,
                                            "resource '%s': sharing using MPS is not supported for MIG devices ('%s')",
                                            r->name, dev->base_id);
                struct mk_mps_gpu *g = NULL;
                for (size_t j = 0; j < d->n_gpus && !g; j++)
                        if (d->gpus[j].gpu == dev->gpu)
                                g = &d->gpus[j];
                if (!g) {
                        g = &d->gpus[d->n_gpus++];
                        const struct mk_gpu *sg = dev->gpu < s->n_gpus ? &s->gpus[dev->gpu] : NULL;
                        g->gpu = dev->gpu;
                        g->index = sg ? sg->index : dev->gpu;
                        snprintf(g->uuid, sizeof(g->uuid), "%s", dev->gpu_uuid);
                        g->pinned_limit_mib = dev->memory_bytes >> 20; /* divided below */
                }
                g->replicas++;
        }
        for (size_t j = 0; j < d->n_gpus; j++) {
                struct mk_mps_gpu *g = &d->gpus[j];
                const struct mk_gpu *sg = g->gpu < s->n_gpus ? &s->gpus[g->gpu] : NULL;
                int major = sg ? sg->cc_major : -1, minor = sg ? sg->cc_minor : -1;
                unsigned max = mk_mps_max_clients(major, minor);
                if (g->replicas > max)
                        return mk_error_set(e, -EINVAL,
                                            "resource '%s': invalid MPS configuration: GPU %u has %u replicas, "
                                            "maximum allowed replicas exceeded (%u MPS clients on compute "
                                            "capability %d.%d)",
                                            r->name, g->index, g->replicas, max, major, minor);
                g->pinned_limit_mib /= g->replicas;
        }
        unsigned per = d->n_gpus ? (unsigned) (r->n_devices / d->n_gpus) : 1;
        d->thread_percentage = 100 / (per ? per : 1);
        return 0;
}

int mk_mps_plan_build(const struct mk_snapshot *s, const struct mk_dp_resources *rs, const struct mk_plugin_config *cfg,
                      struct mk_mps_plan **ret, struct mk_error *e) {
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *p = calloc(1, sizeof(*p));
        if (!p || !(p->daemons = calloc(rs->n ? rs->n : 1, sizeof(*p->daemons))))
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; cfg && cfg->sharing == MK_SHARING_MPS && i < rs->n; i++) {
                const struct mk_dp_resource *r = &rs->r[i];
                if (!r->shared || r->n_devices == 0)
                        continue;
                int k = daemon_build(s, r, &p->daemons[p->n], e);
                p->n++; /* freed with the plan, built or not */
                if (k < 0)
                        return k;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

int mk_mps_path(const char *root, const char *resource, const char *what, char **ret) {
        if (resource && (mk_path_has_dotdot(resource) || !*resource))
                return -EINVAL;
        _cleanup_free_ char *rel = NULL;
        int n;
        if (!resource || streq(what, "shm"))
                n = asprintf(&rel, "%s", what);
        else
                n = asprintf(&rel, "%s/%s", resource, what);
        if (n < 0)
                return -ENOMEM;
        return mk_path_join(root, rel, ret);
}

int mk_mps_setup_commands(const struct mk_mps_daemon *d, char **ret) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, MK_SPAWN_MAX_INPUT);
        int r = 0;
        for (size_t i = 0; i < d->n_gpus && r >= 0; i++)
                if (d->gpus[i].pinned_limit_mib)
                        r = mk_buf_printf(&b, "set_default_device_pinned_mem_limit %u %lluM\n", d->gpus[i].index,
                                          (unsigned long long) d->gpus[i].pinned_limit_mib);
        if (r >= 0)
                r = mk_buf_printf(&b, "set_default_active_thread_percentage %u\n", d->thread_percentage);
        if (r < 0)
                return r;
        *ret = mk_buf_take(&b);
        return *ret ? 0 : -ENOMEM;
}

int mk_mps_allocate(const char *host_root, const char *resource, struct mk_dp_response *r) {
        _cleanup_free_ char *ctr_pipe = NULL, *host_pipe = NULL, *host_shm = NULL;
        int k = mk_mps_path(MK_MPS_CONTAINER_ROOT, resource, "pipe", &ctr_pipe);
        if (k >= 0)
                k = mk_mps_path(host_root, resource, "pipe", &host_pipe);
        if (k >= 0)
                k = mk_mps_path(host_root, resource, "shm", &host_shm);
        if (k >= 0)
                k = mk_dp_response_set_env(r, "CUDA_MPS_PIPE_DIRECTORY", ctr_pipe);
        if (k >= 0)
                k = mk_dp_response_add_mount(r, ctr_pipe, host_pipe, false);
        if (k >= 0)
                k = mk_dp_response_add_mount(r, "/dev/shm", host_shm, false);
        return k;
}

/* Our environment without the variables we set, then ours. */
static char **control_env(char *const *extra) {
        size_t n = 0, m = 0;
        while (environ && environ[n])
                n++;
        while (extra[m])
                m++;
        char **env = calloc(n + m + 1, sizeof(*env));
        if (!env)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                bool ours = strneq(environ[i], "CUDA_MPS_PIPE_DIRECTORY=", 24) ||
                            strneq(environ[i], "CUDA_MPS_LOG_DIRECTORY=", 23) ||
                            strneq(environ[i], "CUDA_VISIBLE_DEVICES=", 21);
                if (!ours)
                        env[k++] = environ[i];
        }
        for (size_t i = 0; i < m; i++)
                env[k++] = extra[i];
        return env;
}

int mk_mps_control(const char *root, const char *resource, const char *const *args, const char *input,
                   const char *visible, char **ret_output, struct mk_error *e) {
        _cleanup_free_ char *pipe_dir = NULL, *log_dir = NULL, *pipe_env = NULL, *log_env = NULL, *vis_env = NULL;
        if (mk_mps_path(root, resource, "pipe", &pipe_dir) < 0 || mk_mps_path(root, resource, "log", &log_dir) < 0)
                return mk_error_set(e, -EINVAL, "Invalid MPS resource '%s'", resource);
        if (asprintf(&pipe_env, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir) < 0 ||
            asprintf(&log_env, "CUDA_MPS_LOG_DIRECTORY=%s", log_dir) < 0 ||
            (visible && asprintf(&vis_env, "CUDA_VISIBLE_DEVICES=%s", visible) < 0))
                return mk_error_set(e, -ENOMEM, "Out of memory");
        char *extra[] = {pipe_env, log_env, vis_env, NULL};
        _cleanup_free_ char **env = control_env(extra);
        const char *argv[8] = {MK_MPS_CONTROL};
        size_t n = 1;
        for (size_t i = 0; args && args[i] && n + 1 < ELEMENTSOF(argv); i++)
                argv[n++] = args[i];
        if (!env)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        struct mk_spawn_opts o = {
                .argv = argv,
                .envp = (const char *const *) env,
                .timeout_ms = MK_MPS_CONTROL_TIMEOUT_MS,
                .capture = true,
                .output_cap = MK_MPS_MAX_OUTPUT,
                .input = input,
        };
        struct mk_spawn_result res = {0};
        int r = mk_spawn(&o, &res, e);
        if (r < 0)
                return r;
        if (res.exit_status != 0 || res.timed_out) {
                r = mk_error_set(e, -EIO, "%s for '%s' %s %d: %s", MK_MPS_CONTROL, resource,
                                 res.timed_out ? "timed out, status" : "exited with status", res.exit_status,
                                 mk_spawn_output_last_line(&res));
                mk_spawn_result_done(&res);
                return r;
        }
        if (ret_output)
                *ret_output = TAKE_PTR(res.output);
        mk_spawn_result_done(&res);
        return 0;
}

/* "GPU-a,GPU-b": the daemon's GPUs for CUDA_VISIBLE_DEVICES. */
static int visible_list(const struct mk_mps_daemon *d, char **ret) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, MK_SPAWN_MAX_INPUT);
        for (size_t i = 0; i < d->n_gpus; i++) {
                int r = mk_buf_printf(&b, "%s%s", i ? "," : "", d->gpus[i].uuid);
                if (r < 0)
                        return r;
        }
        *ret = mk_buf_take(&b);
        return *ret ? 0 : -ENOMEM;
}

static int set_modes(struct mk_nvml *nvml, const struct mk_mps_daemon *d, unsigned mode, struct mk_error *e) {
        for (size_t i = 0; nvml && i < d->n_gpus; i++) {
                int r = mk_nvml_set_compute_mode(nvml, d->gpus[i].gpu, mode, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mk_mps_start(struct mk_nvml *nvml, const char *root, const struct mk_mps_daemon *d, struct mk_error *e) {
        int r = set_modes(nvml, d, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, e);
        if (r < 0) {
                mk_error_prefix(e, "MPS for '%s': exclusive-process compute mode", d->resource);
                return r;
        }
        static const char *const dirs[] = {"pipe", "log", "shm"};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                _cleanup_free_ char *p = NULL;
                if (mk_mps_path(root, d->resource, dirs[i], &p) < 0)
                        return mk_error_set(e, -EINVAL, "Invalid MPS resource '%s'", d->resource);
                r = mk_mkdir_parents(p, 0755, e);
                if (r < 0)
                        return r;
        }
        _cleanup_free_ char *visible = NULL, *cmds = NULL, *started = NULL;
        if (visible_list(d, &visible) < 0 || mk_mps_setup_commands(d, &cmds) < 0 ||
            mk_mps_path(root, d->resource, ".started", &started) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        static const char *const daemonize[] = {"-d", NULL};
        r = mk_mps_control(root, d->resource, daemonize, NULL, visible, NULL, e);
        if (r < 0)
                return r;
        r = mk_mps_control(root, d->resource, NULL, cmds, NULL, NULL, e);
        if (r < 0) {
                mk_error_prefix(e, "MPS for '%s': setting the limits", d->resource);
                return r;
        }
        return mk_write_file_atomic(started, "", 0, 0644, e);
}

int mk_mps_check(const char *root, const struct mk_mps_daemon *d, struct mk_error *e) {
        _cleanup_free_ char *out = NULL;
        int r = mk_mps_control(root, d->resource, NULL, "get_default_active_thread_percentage\n", NULL, &out, e);
        if (r >= 0 && (!out || !*out))
                r = mk_error_set(e, -EIO, "the MPS control daemon of '%s' gave no answer", d->resource);
        return r;
}

int mk_mps_stop(struct mk_nvml *nvml, const char *root, const struct mk_mps_daemon *d, struct mk_error *e) {
        int r = mk_mps_control(root, d->resource, NULL, "quit\n", NULL, NULL, e);
        struct mk_error e2 = {0};
        int k = set_modes(nvml, d, NVML_COMPUTEMODE_DEFAULT, r < 0 ? &e2 : e);
        if (r >= 0)
                r = k;
        _cleanup_free_ char *started = NULL;
        if (mk_mps_path(root, d->resource, ".started", &started) >= 0)
                (void) unlink(started);
        return r;
}
