/* Allocate for one container (k8s-device-plugin v0.20.0 internal/plugin/server.go,
 * iktos/k8s-gpu-sharing-plugin): requested ids in, the envs, mounts, device specs, annotations and
 * CDI devices the kubelet hands the runtime out. Plain structs; the daemon
 * converts. Pure but for one random UUID per CDI annotation key. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/resources.h"

#define MK_DP_MAX_REQUEST_IDS 4096u /* ids in one container request */

struct mk_dp_kv {
        char *key, *value;
};
struct mk_dp_mount {
        char *container_path, *host_path;
        bool read_only;
};
struct mk_dp_devspec {
        char *container_path, *host_path, *permissions;
};
struct mk_dp_response {
        struct mk_dp_kv *envs;            /* in the order added; keys unique */
        size_t n_envs;
        struct mk_dp_mount *mounts;
        size_t n_mounts;
        struct mk_dp_devspec *devices;
        size_t n_devices;
        struct mk_dp_kv *annotations;
        size_t n_annotations;
        char **cdi_devices;               /* fully qualified CDI names, "k8s.device-plugin.nvidia.com/gpu=GPU-…" */
        size_t n_cdi_devices;
};

/* One container of an Allocate. Validates the ids (an unknown id, an id
 * listed twice or more than MK_DP_MAX_REQUEST_IDS: -EINVAL naming it; a shared resource with
 * failRequestsGreaterThanOne and more than one id: -EINVAL "maximum request
 * size for shared resources is 1; found N"), maps replicas to their base
 * devices (deduplicated, request order kept; with the index id strategy
 * also in request order, unlike upstream's map order), then per
 * o->list_strategies: envvar NVIDIA_VISIBLE_DEVICES=<ids>; volume-mounts
 * NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices and one /dev/null
 * mount per id; cdi-annotations one annotation
 * "<prefix>nvidia-device-plugin_<uuid>" = "<kind>=<id>,…"; cdi-cri the CDI
 * names. NVIDIA_GDS/MOFED/GDRCOPY=enabled when on. With pass_device_specs
 * (and not only CDI strategies): /dev/nvidiactl, /dev/nvidia-uvm,
 * /dev/nvidia-uvm-tools, /dev/nvidia-modeset (each when present under the
 * host's dev root; all when o->host is NULL), then per requested replica
 * (not deduplicated, as upstream) /dev/nvidia<minor> and for MIG the GI and
 * CI access caps /dev/nvidia-caps/nvidia-cap<N> (-EINVAL naming the device
 * when mig-minors lacked them). Host paths are <dev_root>/dev/... .
 * *ret is written only on success; release it with mk_dp_response_done(). */
int mk_dp_allocate(const struct mk_snapshot *s, const struct mk_dp_resource *r, const char *const *ids, size_t n_ids,
                   const struct mk_dp_options *o, struct mk_dp_response *ret, struct mk_error *e)
        _nonnull_(2, 5, 6) _wur_;

/* mk_dp_allocate() for devices already resolved (the dynamic MIG mode,
 * plugin/dynamic/dynamic.h, hands the MIG devices of a reservation): `resource`
 * names the resource in messages; no id validation, no sharing check; the
 * same envs, mounts, annotations, CDI devices and device specs as above.
 * *ret is written only on success. */
int mk_dp_allocate_devices(const struct mk_dp_device *const *devs, size_t n, const char *resource,
                           const struct mk_dp_options *o, struct mk_dp_response *ret, struct mk_error *e)
        _nonnull_(1, 3, 4, 5) _wur_;

/* Sets (or replaces) env `key` = `value` in r (copies both). -ENOMEM. */
int mk_dp_response_set_env(struct mk_dp_response *r, const char *key, const char *value) _nonnull_(1, 2, 3) _wur_;
/* Appends a mount (copies the paths). -ENOMEM. */
int mk_dp_response_add_mount(struct mk_dp_response *r, const char *container_path, const char *host_path, bool ro)
        _nonnull_(1, 2, 3) _wur_;

/* Frees the contents and zeroes *r; accepts an already-done response. */
void mk_dp_response_done(struct mk_dp_response *r);

/* The value of env / annotation `key` in r, or NULL (for tests and logs). */
const char *mk_dp_response_env(const struct mk_dp_response *r, const char *key);
