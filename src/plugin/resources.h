/* The device plugin's resource model (k8s-device-plugin v0.20.0 internal/rm,
 * k8s-device-plugin v0.20.0 internal/rm, k8s-device-plugin v0.20.0 api/config/v1, iktos/k8s-gpu-sharing-plugin): from a snapshot, the MIG strategy and the sharing
 * config, the resources the plugin advertises ("nvidia.com/gpu",
 * "nvidia.com/mig-1g.10gb", renames) and their devices (with replicas).
 * Plain structs; the daemon converts them to the kubelet messages. Reads
 * only /proc/driver/nvidia-caps/mig-minors and sysfs numa_node, through the
 * injectable host roots. docs/device-plugin-resources.md states every rule
 * and where migkit differs from upstream. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "spec/plugin-config.h"

struct mk_host;

#define MK_DP_ID_MAX 128u           /* one advertised device id, NUL included */
#define MK_DP_MAX_DEVICES 65536u    /* devices of one resource, replicas included (kubelet lists them all) */
#define MK_MAX_MIG_MINORS_BYTES (1024u * 1024) /* /proc/driver/nvidia-caps/mig-minors */

/* Upstream's --device-list-strategy values; a bit set, several may be on. */
enum mk_dp_list_strategy {
        MK_DP_LIST_ENVVAR = 1,
        MK_DP_LIST_VOLUME_MOUNTS = 2,
        MK_DP_LIST_CDI_ANNOTATIONS = 4,
        MK_DP_LIST_CDI_CRI = 8,
};
/* "envvar", "volume-mounts", "cdi-annotations", "cdi-cri" for one bit, NULL otherwise. */
const char *mk_dp_list_strategy_to_string(enum mk_dp_list_strategy s);
/* One name -> its bit, or -EINVAL. */
int mk_dp_list_strategy_from_string(const char *s);
/* A comma-separated list ("envvar,cdi-cri"; blanks around names allowed) ->
 * the bit set in *ret. -EINVAL naming the bad entry (also for an empty list). */
int mk_dp_list_strategies_parse(const char *s, unsigned *ret, struct mk_error *e) _wur_;

enum mk_dp_id_strategy {
        MK_DP_ID_UUID,
        MK_DP_ID_INDEX,
        _MK_DP_ID_MAX,
        _MK_DP_ID_INVALID = -EINVAL,
};
const char *mk_dp_id_strategy_to_string(enum mk_dp_id_strategy s); /* "uuid", "index" */
enum mk_dp_id_strategy mk_dp_id_strategy_from_string(const char *s);

struct mk_dp_options {
        enum mk_mig_strategy mig_strategy;
        unsigned list_strategies;          /* mk_dp_list_strategy bits; 0 means envvar */
        enum mk_dp_id_strategy id_strategy;
        bool pass_device_specs;
        const char *driver_root;           /* host path of the driver root, "/" default (--driver-root) */
        const char *dev_root;              /* host prefix of /dev nodes in device specs; NULL/"" = driver_root (--dev-root) */
        const char *cdi_annotation_prefix; /* NULL = "cdi.k8s.io/" */
        const char *cdi_kind;              /* NULL = "k8s.device-plugin.nvidia.com/gpu" (vendor/class of upstream's CDI spec) */
        bool gds_enabled, mofed_enabled, gdrcopy_enabled; /* env NVIDIA_GDS / NVIDIA_MOFED / NVIDIA_GDRCOPY = enabled */
        const struct mk_plugin_config *config; /* sharing; may be NULL */
        const struct mk_host *host;        /* roots: proc (mig-minors), sysfs (numa_node), dev (which control
                                            * nodes exist); NULL = no mig-minors, NUMA unknown, every control node */
};

/* Fills *o with upstream's defaults (strategy none, envvar, uuid, "/", the
 * CDI prefix and kind); pointers not owned. */
void mk_dp_options_init(struct mk_dp_options *o) _nonnull_(1);

struct mk_dp_device {
        char id[MK_DP_ID_MAX];       /* advertised id: "GPU-…"/"MIG-…", with replicas "<uuid>::<k>" (as upstream,
                                      * always the UUID; the id strategy changes only what Allocate hands the runtime) */
        char base_id[MK_DP_ID_MAX];  /* id without the replica suffix: the GPU or MIG device UUID */
        char index[32];              /* upstream's Index: "0" for a GPU, "<gpu index>:<mig index>" for MIG */
        unsigned gpu;                /* position of the parent in snapshot->gpus */
        unsigned minor;              /* the parent's /dev/nvidia<minor> */
        bool mig;
        unsigned gi_id, ci_id;       /* MIG only */
        int gi_cap, ci_cap;          /* /dev/nvidia-caps/nvidia-cap<N> of the GI / CI access; -1 unknown (MIG only) */
        char mig_uuid[MK_UUID_MAX];  /* "" for a whole GPU */
        char gpu_uuid[MK_UUID_MAX];
        unsigned replica;            /* k of "::k"; 0 when not shared */
        bool healthy;
        int numa_node;               /* -1 unknown */
        uint64_t memory_bytes;       /* the GPU's total, or the MIG device's GI profile memory */
};

struct mk_dp_resource {
        char name[64];               /* "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", a rename, ... */
        char endpoint[128];          /* socket file name: "nvidia-gpu.sock", "nvidia-mig-1g.10gb.sock" (kubelet deviceplugin/v1beta1 api.proto) */
        struct mk_dp_device *devices; /* snapshot order: GPU, GI, CI, then replica */
        size_t n_devices;
        size_t *by_id;               /* positions in devices[] sorted by id (strcmp), for lookups */
        unsigned replicas;           /* 0/1 = not shared; for "auto" replicas the largest count of one device */
        bool shared;                 /* devices carry "::k" ids (sharing configured for them) */
        bool fail_requests_greater_than_one;
};

struct mk_dp_resources {
        struct mk_dp_resource *r;    /* sorted by name */
        size_t n;
        char *warning;               /* what is wrong with a layout that still builds (mixed: MIG-enabled GPUs
                                      * without MIG devices), for the daemon to log once; NULL when nothing */
};

/* Builds the resources of a snapshot by the MIG strategy (k8s-device-plugin v0.20.0 internal/rm): none: every
 * GPU whole; single: every MIG device (or every GPU when none is MIG-enabled)
 * as nvidia.com/gpu; mixed: MIG-disabled GPUs as nvidia.com/gpu and one
 * nvidia.com/mig-<profile> per profile. Then sharing (k8s-device-plugin v0.20.0 api/config/v1): each config
 * entry's `devices` picks devices of the resource it names, they get
 * `replicas` ids each and go to `rename` (or stay) — so one resource may be
 * split into a shared and a whole part. Resources with no device are left out.
 * Errors -EINVAL naming the GPU and the rule (single: MIG-enabled GPU
 * without MIG devices, several MIG device types, MIG and non-MIG GPUs mixed;
 * MPS with MIG; a `devices` entry that
 * matches nothing; two sharing entries taking one device; a name over 63
 * characters), -E2BIG over MK_DP_MAX_DEVICES, -ENOMEM. A missing mig-minors
 * file is not an error here (gi_cap/ci_cap stay -1; Allocate with device
 * specs then fails naming the device). *ret is owned by the caller. */
int mk_dp_resources_build(const struct mk_snapshot *s, const struct mk_dp_options *o, struct mk_dp_resources **ret,
                          struct mk_error *e) _nonnull_(1, 2, 3) _wur_;

struct mk_dp_resources *mk_dp_resources_free(struct mk_dp_resources *rs);
static inline void mk_dp_resources_freep(struct mk_dp_resources **rs) {
        mk_dp_resources_free(*rs);
}

/* The resource named `name`, or NULL. */
const struct mk_dp_resource *mk_dp_resources_find(const struct mk_dp_resources *rs, const char *name);
/* The device with advertised id `id` in r, or NULL (binary search when
 * ids are sorted, linear otherwise). */
const struct mk_dp_device *mk_dp_resource_find_device(const struct mk_dp_resource *r, const char *id);

/* Looks up the n ids of one request (an Allocate container request, a
 * GetPreferredAllocation list) in r: -EINVAL "<what> for '<resource>':
 * unknown device: '<id>'" for an id r lacks (or a NULL one), and
 * "<what> for '<resource>': device '<id>' is listed twice" for an id given
 * again. The kubelet keeps device ids in sets and never repeats one;
 * upstream k8s-device-plugin v0.17 accepts repeats, we refuse them
 * (docs/device-plugin.md). devs (n entries, may be NULL), a scratch
 * buffer of the caller's, gets the devices in request order. */
int mk_dp_resource_find_devices(const struct mk_dp_resource *r, const char *const *ids, size_t n, const char *what,
                                const struct mk_dp_device **devs, struct mk_error *e) _nonnull_(1, 4) _wur_;

/* Health from the health monitor: marks every device (all replicas) of the
 * GPU at position `gpu` of the snapshot: the whole GPU and all its MIG
 * devices when gi_id == UINT32_MAX, else the MIG devices of GI gi_id (and CI
 * ci_id; ci_id == UINT32_MAX: every CI of that GI) and the GPU itself when it
 * is advertised whole (strategy none). Returns the number
 * of devices whose state changed (so the caller knows whether to re-send
 * ListAndWatch). Never fails; rs may be NULL. */
unsigned mk_dp_resources_set_health(struct mk_dp_resources *rs, unsigned gpu, unsigned gi_id, unsigned ci_id,
                                    bool healthy);

/* Every GPU of the snapshot (whole, MIG-enabled ones included) and every MIG
 * device, in snapshot order, unshared (id = base_id), MIG access caps from
 * mig-minors under h (-1 when unknown; h NULL: all unknown), NUMA unknown:
 * what exists on the node whatever the strategy (the CDI spec, plugin/cdi.h).
 * *ret (malloc'd array of *ret_n) only on success; -EINVAL naming a device
 * without UUID, -ENOMEM. */
int mk_dp_all_devices(const struct mk_snapshot *s, const struct mk_host *h, struct mk_dp_device **ret, size_t *ret_n,
                      struct mk_error *e) _nonnull_(1, 3, 4) _wur_;
