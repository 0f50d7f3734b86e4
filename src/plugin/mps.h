/* MPS sharing (k8s-device-plugin v0.16 `sharing.mps`, cmd/mps-control-daemon
 * and internal/plugin/mps.go; NVIDIA MPS documentation): per resource shared
 * with MPS, one MPS control daemon whose pipe and log directories are
 * <root>/<resource>/pipe and <root>/<resource>/log, the shared memory of its
 * clients in <root>/shm, its GPUs in exclusive-process compute mode, a
 * default pinned device memory limit of total/replicas per GPU and an active
 * thread percentage of 100/replicas. Pure planning and paths here, plus the
 * control client (nvidia-cuda-mps-control through base/spawn, never a
 * shell). docs/device-plugin.md ("MPS sharing") says who runs what. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#define MK_MPS_DEFAULT_ROOT "/run/nvidia/mps" /* upstream's --mps-root default */
#define MK_MPS_CONTAINER_ROOT "/mps"          /* where containers see the root (upstream mps.ContainerRoot) */
#define MK_MPS_CONTROL "nvidia-cuda-mps-control"
#define MK_MPS_READY_FILE ".ready"            /* in the root: every daemon started and configured */
#define MK_MPS_MAX_OUTPUT 4096u               /* what one control command answers */
#define MK_MPS_CONTROL_TIMEOUT_MS 10000

struct mk_mps_gpu {
        unsigned gpu;                 /* position in the snapshot */
        unsigned index;               /* NVML index: the device number of the MPS control commands */
        char uuid[MK_UUID_MAX];
        unsigned replicas;            /* ids of this GPU in the resource */
        uint64_t pinned_limit_mib;    /* total memory / replicas; 0: unknown, no limit set */
};

struct mk_mps_daemon {
        char resource[64];            /* "nvidia.com/gpu" */
        struct mk_mps_gpu *gpus;
        size_t n_gpus;
        unsigned thread_percentage;   /* 100 / (devices / GPUs), as upstream */
};

struct mk_mps_plan {
        struct mk_mps_daemon *daemons; /* one per resource shared with MPS, resources' order */
        size_t n;
};

/* The MPS clients one server takes: 48 from Volta (compute capability 7.0)
 * on, 16 before (NVIDIA MPS documentation, "Limitations"). Upstream compares
 * with 7.5 (V100 gets 16 there). */
unsigned mk_mps_max_clients(int cc_major, int cc_minor);

/* The daemons the resources need when cfg's sharing strategy is MPS (none
 * otherwise: *ret gets an empty plan): every resource with shared devices.
 * -EINVAL naming it for a MIG device ("sharing using MPS is not supported
 * for MIG devices"), and for replicas over mk_mps_max_clients() of the GPU.
 * *ret only on success; free with mk_mps_plan_free(). */
int mk_mps_plan_build(const struct mk_snapshot *s, const struct mk_dp_resources *rs, const struct mk_plugin_config *cfg,
                      struct mk_mps_plan **ret, struct mk_error *e) _nonnull_(1, 2, 4) _wur_;
struct mk_mps_plan *mk_mps_plan_free(struct mk_mps_plan *p);
static inline void mk_mps_plan_freep(struct mk_mps_plan **p) {
        mk_mps_plan_free(*p);
}
/* The plan's daemon for `resource`, or NULL. */
const struct mk_mps_daemon *mk_mps_plan_find(const struct mk_mps_plan *p, const char *resource);

/* "<root>/<resource>/<what>" ("pipe", "log", ".started"), "<root>/shm" for
 * what "shm" (one for all resources), "<root>/.ready" for MK_MPS_READY_FILE
 * with resource NULL. malloc'd in *ret; -EINVAL for a resource with a ".."
 * component, -ENOMEM. */
int mk_mps_path(const char *root, const char *resource, const char *what, char **ret) _nonnull_(1, 3, 4) _wur_;

/* The control commands that configure daemon d after it started, one per
 * line: set_default_device_pinned_mem_limit <index> <N>M per GPU with a
 * known memory, then set_default_active_thread_percentage <P>. malloc'd. */
int mk_mps_setup_commands(const struct mk_mps_daemon *d, char **ret) _nonnull_(1, 2) _wur_;

/* Allocate's additions for a container of MPS resource `resource`
 * (upstream internal/plugin/mps.go): CUDA_MPS_PIPE_DIRECTORY =
 * /mps/<resource>/pipe, that directory mounted from <host_root>/<resource>/pipe,
 * and /dev/shm from <host_root>/shm. -ENOMEM, -EINVAL (bad resource). */
int mk_mps_allocate(const char *host_root, const char *resource, struct mk_dp_response *r) _nonnull_(1, 2, 3) _wur_;

/* Runs `nvidia-cuda-mps-control` (from PATH) with `args` (NULL-terminated,
 * may be NULL: client mode) and `input` on stdin, CUDA_MPS_PIPE_DIRECTORY
 * and CUDA_MPS_LOG_DIRECTORY of `resource` under `root` and, with `visible`,
 * CUDA_VISIBLE_DEVICES. *ret_output (may be NULL) gets its output. -errno
 * when it cannot run, -EIO when it exits non-zero or times out (e has its
 * last line). */
int mk_mps_control(const char *root, const char *resource, const char *const *args, const char *input,
                   const char *visible, char **ret_output, struct mk_error *e) _nonnull_(1, 2) _wur_;

struct mk_nvml;

/* Starts the control daemon of d (upstream cmd/mps-control-daemon Daemon.Start):
 * its GPUs to exclusive-process compute mode through NVML (nvml NULL:
 * skipped), the pipe, log and shm directories created, `nvidia-cuda-mps-control
 * -d` with CUDA_VISIBLE_DEVICES = its GPUs' UUIDs, the setup commands
 * (mk_mps_setup_commands()), then "<root>/<resource>/.started". -errno with
 * e naming the step. */
int mk_mps_start(struct mk_nvml *nvml, const char *root, const struct mk_mps_daemon *d, struct mk_error *e)
        _nonnull_(2, 3) _wur_;
/* Is d's daemon answering (get_default_active_thread_percentage, as upstream's
 * AssertHealthy)? 0 or -errno with the reason in e. */
int mk_mps_check(const char *root, const struct mk_mps_daemon *d, struct mk_error *e) _nonnull_(1, 2) _wur_;
/* Stops d's daemon ("quit"), its GPUs back to the default compute mode,
 * .started removed. Best effort: every step runs; the first error is
 * returned. */
int mk_mps_stop(struct mk_nvml *nvml, const char *root, const struct mk_mps_daemon *d, struct mk_error *e)
        _nonnull_(2, 3);
