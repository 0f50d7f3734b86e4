/* The device plugin daemon (`migkit device-plugin`): NVML inventory ->
 * resources per MIG strategy -> one gRPC server per resource on
 * <plugin dir>/<endpoint> -> Register with the kubelet -> Allocate,
 * GetPreferredAllocation, ListAndWatch updates from the health monitor.
 * Kubelet restarts (kubelet.sock re-created, our socket deleted) are seen
 * with inotify and answered by a restart and a new registration; SIGHUP
 * re-reads the config and NVML; SIGTERM/SIGINT stop cleanly. Optionally
 * keeps the GPU feature discovery labels on the Node or in an NFD feature
 * file. docs/device-plugin.md describes the behaviour and every setting. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "gfd/labels.h"
#include "plugin/resources.h"
#include "plugin/dynamic/soft.h"

struct mk_kube;

#define MK_DP_DEFAULT_PLUGIN_DIR "/var/lib/kubelet/device-plugins/"
#define MK_DP_KUBELET_SOCKET "kubelet.sock"
#define MK_DP_DEFAULT_NFD_FILE "/etc/kubernetes/node-feature-discovery/features.d/gfd"
/* Node annotation listing the label keys the plugin set, so that only those
 * are ever removed (other nvidia.com/ labels belong to other components). */
#define MK_DP_LABELS_ANNOTATION "migkit.io/device-plugin-labels"
#define MK_DP_MAX_REQUEST_BYTES (4u << 20)    /* one request message from the kubelet */
#define MK_DP_MAX_CONTAINERS 1024u            /* container requests in one Allocate / GetPreferredAllocation
                                               * (the kubelet sends one) */
#define MK_DP_MAX_REQUEST_FIELDS 16384u       /* fields of one request, at the top level and in its container
                                               * requests: counted before decoding (plugin/pb-scan.h); the
                                               * kubelet's carry one container and its device IDs */
#define MK_DP_REGISTER_TIMEOUT_MS 10000       /* one Register call (the kubelet dials back inside it) */
#define MK_DP_RETRY_MS 30000                  /* default retry_ms: after a failed start with fail-on-init-error
                                               * false, a failed label publication */
#define MK_DP_MODE_CHECK_MS 2000              /* dynamic MIG: how often the GPUs' MIG modes are looked at */

enum mk_dp_labels_mode {
        MK_DP_LABELS_NONE,
        MK_DP_LABELS_NODE,      /* patched onto the Node (NODE_NAME) */
        MK_DP_LABELS_NFD_FILE,  /* key=value lines, written atomically */
        _MK_DP_LABELS_MODE_MAX,
        _MK_DP_LABELS_MODE_INVALID = -EINVAL,
};
const char *mk_dp_labels_mode_to_string(enum mk_dp_labels_mode m); /* "none", "node", "nfd-file" */
enum mk_dp_labels_mode mk_dp_labels_mode_from_string(const char *s);

struct mk_dp_daemon_options {
        /* Allocate / resource options; .config and .host are filled in by the
         * daemon (config file and --resource-config, host roots from the
         * environment). .mig_strategy applies when mig_strategy_given, else
         * the config file's flags.migStrategy, else none. */
        struct mk_dp_options dp;
        bool mig_strategy_given;
        const char *plugin_dir;         /* NULL: MK_DP_DEFAULT_PLUGIN_DIR */
        const char *kubelet_socket;     /* NULL: <plugin_dir>/kubelet.sock; "": do not register */
        const char *config_file;        /* v1 config, re-read on SIGHUP; NULL: none */
        const char *resource_config;    /* "<name>:<rename>:<replicas>,..." (replaces the config's sharing) */
        bool fail_on_init_error;        /* false: NVML or resource errors are logged, retried, nothing served */
        const char *nvml_lib;           /* NULL: MIGKIT_NVML_LIB or libnvidia-ml.so.1 */
        enum mk_dp_labels_mode labels;
        const char *nfd_features_file;  /* NULL: MK_DP_DEFAULT_NFD_FILE */
        const char *node_name;          /* labels=node, dynamic_mig */
        struct mk_kube *kube;           /* labels=node, dynamic_mig; borrowed */
        /* Dynamic MIG (plugin/dynamic/dynamic.h): nvidia.com/gpu as replica ids, each
         * Allocate answered with the MIG devices `migkit scheduler` reserved
         * for the pod; needs kube and node_name; the MIG strategy and sharing
         * do not apply. */
        bool dynamic_mig;
        /* Soft slices in dynamic mode (plugin/dynamic/soft.h): GPUs with MIG off get
         * soft.split ids; their Allocate mounts the library and the
         * per-container directory under soft.root. */
        struct mk_dp_soft_options soft;
        /* Dynamic MIG: reservations follow what kubelet really handed out
         * (plugin/dynamic/follow.h), read from kubelet's PodResources API at
         * pod_resources_socket (NULL: MK_DP_PODRES_SOCKET); false: off. */
        bool follow_handouts;
        const char *pod_resources_socket;
        const char *machine_type_file;  /* nvidia.com/gpu.machine; NULL: none */
        const char *mps_root;           /* MPS sharing: pipe, log, shm directories (plugin/mps.h); NULL:
                                         * MK_MPS_DEFAULT_ROOT */
        const char *cdi_spec_dir;       /* with a CDI list strategy, where the CDI spec goes (plugin/cdi.h);
                                         * NULL: MK_CDI_DEFAULT_SPEC_DIR */
        int register_timeout_ms;        /* <= 0: MK_DP_REGISTER_TIMEOUT_MS */
        unsigned retry_ms;              /* a failed start (fail_on_init_error false) or label publication is
                                         * tried again after it; 0: MK_DP_RETRY_MS */
};

/* Runs the daemon until SIGTERM or SIGINT (returns 0) or a fatal error
 * (-errno, logged; e has the message). Blocks SIGTERM, SIGINT and SIGHUP in
 * the calling thread before any other thread starts, so call it from the
 * main thread before creating threads. */
int mk_dp_daemon_run(const struct mk_dp_daemon_options *o, struct mk_error *e) _nonnull_(1) _wur_;

/* Writes labels as sorted key=value lines to `path` atomically (a temporary
 * file in the same directory, fsync, rename). -errno naming the path. */
int mk_dp_write_features_file(const char *path, const struct mk_labels *l, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* The merge patch that makes `node` (a Node object as read from the
 * apiserver; NULL: treated as unlabelled) carry `l`: every label of l set,
 * every key listed in the node's MK_DP_LABELS_ANNOTATION but not in l
 * removed (JSON null), the annotation rewritten. Other labels are never
 * touched. NULL in *ret when nothing changes. -ENOMEM. */
int mk_dp_node_labels_patch(const json_t *node, const struct mk_labels *l, json_t **ret) _nonnull_(2, 3) _wur_;
