/* `migkit device-plugin`: flags and environment as NVIDIA's device plugin
 * (k8s-device-plugin v0.20.0 cmd/nvidia-device-plugin/main.go), then plugin/daemon.h runs.
 * Precedence: flag > environment > config file > default. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/kube-connect.h"
#include "cli/options.h"
#include "kube/kube.h"
#include "plugin/cdi.h"
#include "plugin/daemon.h"
#include "plugin/mps.h"
#include "plugin/dynamic/podres.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"
#include "spec/sched-config.h"

#define DEFAULT_MACHINE_TYPE_FILE "/sys/class/dmi/id/product_name"

static void help(void) {
        printf("Usage: migkit device-plugin [OPTIONS]\n"
               "\n"
               "Kubernetes device plugin (kubelet API v1beta1) for whole GPUs and MIG devices,\n"
               "with GPU feature discovery labels. Runs until SIGTERM; SIGHUP reloads the\n"
               "config and NVML. docs/device-plugin.md describes every option.\n"
               "\n"
               "Environment variables in [brackets]; a flag wins over its variable. Boolean\n"
               "options take =true or =false; alone they mean true (as upstream).\n"
               "\n"
               "  --mig-strategy S            none (default), single or mixed [MIG_STRATEGY]\n"
               "  --fail-on-init-error[=BOOL] exit when NVML or the resources fail (default true);\n"
               "                              false: log, serve nothing, retry [FAIL_ON_INIT_ERROR]\n"
               "  --retry-interval DURATION   wait before a failed start (with --fail-on-init-error=false)\n"
               "                              or a failed label publication is tried again (default 30s)\n"
               "                              [MIGKIT_RETRY_INTERVAL]\n"
               "  --pass-device-specs[=BOOL]  device nodes in Allocate answers (default false)\n"
               "                              [PASS_DEVICE_SPECS]\n"
               "  --device-list-strategy L    envvar (default), volume-mounts, cdi-annotations,\n"
               "                              cdi-cri; a comma list combines [DEVICE_LIST_STRATEGY]\n"
               "  --device-id-strategy S      uuid (default) or index [DEVICE_ID_STRATEGY]\n"
               "  --nvidia-driver-root DIR    driver root on the host (default /) [NVIDIA_DRIVER_ROOT]\n"
               "                              (alias --driver-root)\n"
               "  --dev-root DIR              host prefix of /dev in device specs (default: the driver\n"
               "                              root) [NVIDIA_DEV_ROOT] (alias --nvidia-dev-root)\n"
               "  --cdi-annotation-prefix P   CDI annotation key prefix (default cdi.k8s.io/)\n"
               "                              [CDI_ANNOTATION_PREFIX]\n"
               "  --mps-root DIR              MPS sharing: the control daemons' pipe, log and shm\n"
               "                              directories (default " MK_MPS_DEFAULT_ROOT ") [MPS_ROOT]\n"
               "  --cdi-spec-dir DIR          with a cdi-* list strategy, where the CDI spec is written\n"
               "                              (default " MK_CDI_DEFAULT_SPEC_DIR ") [MIGKIT_CDI_SPEC_DIR]\n"
               "  --gds-enabled, --mofed-enabled, --gdrcopy-enabled [=BOOL]\n"
               "                              NVIDIA_GDS / NVIDIA_MOFED / NVIDIA_GDRCOPY=enabled in\n"
               "                              Allocate answers [GDS_ENABLED, MOFED_ENABLED, GDRCOPY_ENABLED]\n"
               "  --config-file FILE          v1 config: flags.migStrategy, sharing.timeSlicing /\n"
               "                              sharing.mps; re-read on SIGHUP [CONFIG_FILE]\n"
               "  --resource-config LIST      <name>:<rename>:<replicas>,... (replicas -1: one per\n"
               "                              GB); replaces the config's sharing\n"
               "                              [NVIDIA_DRIVER_RESOURCE_CONFIG]\n"
               "  --device-plugin-path DIR    kubelet device plugin directory\n"
               "                              (default " MK_DP_DEFAULT_PLUGIN_DIR ") [DEVICE_PLUGIN_PATH]\n"
               "  --kubelet-socket PATH       kubelet registration socket (default <dir>/kubelet.sock);\n"
               "                              empty: serve without registering [KUBELET_SOCKET]\n"
               "  --labels MODE               GPU feature labels: none (default), node (patch the Node\n"
               "                              NODE_NAME) or nfd-file [MIGKIT_LABELS]\n"
               "  --nfd-features-file FILE    where --labels nfd-file writes (default\n"
               "                              " MK_DP_DEFAULT_NFD_FILE ") [GFD_OUTPUT_FILE]\n"
               "  --dynamic-mig[=BOOL]        dynamic MIG (default false): nvidia.com/gpu as replica ids,\n"
               "                              Allocate answers with the MIG devices `migkit scheduler`\n"
               "                              reserved for the pod; needs the node name and the\n"
               "                              apiserver [MIGKIT_DYNAMIC_MIG]; GPUs with MIG off are shared\n"
               "                              by soft slices (libmigkit-vgpu.so, docs/vgpu.md)\n"
               "  --device-split-count N      dynamic: ids per shared GPU, its most sharers [DEVICE_SPLIT_COUNT]\n"
               "                              (default: the node's devicesplitcount in --scheduler-config, else 10)\n"
               "  --scheduler-config PATH     dynamic: `migkit scheduler`'s config [MIGKIT_SCHEDULER_CONFIG]\n"
               "  --vgpu-root PATH            dynamic: soft slices' per-container directories and\n"
               "                              ld.so.preload (" MK_VGPU_DEFAULT_ROOT ") [MIGKIT_VGPU_ROOT]\n"
               "  --vgpu-library PATH         dynamic: the host's libmigkit-vgpu.so mounted into soft slice\n"
               "                              containers (<vgpu-root>/libmigkit-vgpu.so) [MIGKIT_VGPU_LIBRARY]\n"
               "  --pod-resources[=BOOL]      dynamic: reservations follow the devices kubelet really\n"
               "                              handed out, read from its PodResources API (default true)\n"
               "                              [MIGKIT_POD_RESOURCES]\n"
               "  --pod-resources-socket PATH dynamic: kubelet's PodResources socket (default\n"
               "                              " MK_DP_PODRES_SOCKET ")\n"
               "                              [MIGKIT_POD_RESOURCES_SOCKET]\n"
               "  --node-name NAME            this node, for --labels node and --dynamic-mig [NODE_NAME]\n"
               "  --kubeconfig PATH           kubeconfig for --labels node and --dynamic-mig [KUBECONFIG];\n"
               "                              default in-cluster\n"
               "  --machine-type-file FILE    source of nvidia.com/gpu.machine\n"
               "                              (default " DEFAULT_MACHINE_TYPE_FILE ") [GFD_MACHINE_TYPE_FILE]\n"
               "\n"
               "Health: DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS (docs/device-plugin-health.md).\n");
}

/* The strategies and the labels mode into *o; a usage error is printed. */
static int parse_modes(const char *mig_strategy, const char *list_strategy, const char *id_strategy,
                       const char *labels, struct mk_dp_daemon_options *o) {
        struct mk_error e = {0};
        if (mig_strategy) {
                int s = mk_mig_strategy_from_string(mig_strategy);
                if (s < 0) {
                        fprintf(stderr, "Error: unknown MIG strategy '%s' (none, single or mixed)\n", mig_strategy);
                        return -EINVAL;
                }
                o->dp.mig_strategy = (enum mk_mig_strategy) s;
                o->mig_strategy_given = true;
        }
        if (list_strategy && mk_dp_list_strategies_parse(list_strategy, &o->dp.list_strategies, &e) < 0) {
                fprintf(stderr, "Error: invalid device list strategy: %s\n", e.msg);
                return -EINVAL;
        }
        if (id_strategy) {
                int s = mk_dp_id_strategy_from_string(id_strategy);
                if (s < 0) {
                        fprintf(stderr, "Error: unknown device id strategy '%s' (uuid or index)\n", id_strategy);
                        return -EINVAL;
                }
                o->dp.id_strategy = (enum mk_dp_id_strategy) s;
        }
        o->labels = MK_DP_LABELS_NONE;
        if (labels) {
                int m = mk_dp_labels_mode_from_string(labels);
                if (m < 0) {
                        fprintf(stderr, "Error: unknown --labels '%s' (none, node or nfd-file)\n", labels);
                        return -EINVAL;
                }
                o->labels = (enum mk_dp_labels_mode) m;
        }
        return 0;
}

/* The apiserver client for --labels node and --dynamic-mig. One try per
 * request with short timeouts: the plugin retries labels on its own every
 * 30 s, the kubelet retries a failed Allocate, and a shutdown waits for the
 * request in flight. One try also keeps a lost answer to the mig-allocated
 * patch from being retried into a 409 that would make the next pod's claim
 * look free. */
static int connect_kube(const char *kubeconfig, struct mk_kube **ret, struct mk_error *e) {
        const struct mk_kube_options ko = {
                .connect_timeout_ms = 5000,
                .request_timeout_ms = 10000,
                .attempts = 1,
        };
        return cli_kube_connect(kubeconfig, &ko, ret, e);
}

/* The soft slices' ids per shared GPU into *ret: --device-split-count, else
 * the node's devicesplitcount in --scheduler-config (as the scheduler counts
 * sharers), else left 0 (the default). MK_EXIT_OK, or the exit code after
 * printing the error. */
static int parse_split(const char *split_s, const char *sched_config, const char *node_name, unsigned *ret) {
        if (split_s) {
                uint32_t v;
                if (mk_parse_u32(split_s, &v) < 0 || v < 1 || v > MK_DP_MAX_SPLIT) {
                        fprintf(stderr, "Error: invalid --device-split-count '%s' (1..%u)\n", split_s, MK_DP_MAX_SPLIT);
                        return MK_EXIT_USAGE;
                }
                *ret = v;
        } else if (sched_config && node_name) {
                _cleanup_(mk_sched_config_freep) struct mk_sched_config *sc = NULL;
                struct mk_error e = {0};
                if (mk_sched_config_load(sched_config, &sc, &e) < 0)
                        return cli_fail(&e);
                *ret = mk_sched_config_split(sc, node_name);
        }
        return MK_EXIT_OK;
}

/* The command line's values, each a flag or its environment variable. */
struct dp_args {
        const char *mig_strategy, *fail_on_init, *pass_specs, *list_strategy, *id_strategy, *driver_root,
                *dev_root, *cdi_prefix, *gds, *mofed, *gdrcopy, *config_file, *resource_config, *plugin_path,
                *labels, *nfd_file, *node_name, *kubeconfig, *machine_file, *dynamic, *kubelet_socket, *cdi_dir,
                *vgpu_root, *vgpu_library, *split_s, *sched_config, *mps_root, *podres, *podres_socket, *retry;
};

/* Flags and environment into *a, as cli_options_parse() returns. */
static int parse_args(int argc, char **argv, struct dp_args *a) {
        const struct cli_option options[] = {
                {"mig-strategy", 0, required_argument, "MIG_STRATEGY", &a->mig_strategy},
                {"fail-on-init-error", 0, optional_argument, "FAIL_ON_INIT_ERROR", &a->fail_on_init},
                {"retry-interval", 0, required_argument, "MIGKIT_RETRY_INTERVAL", &a->retry},
                {"pass-device-specs", 0, optional_argument, "PASS_DEVICE_SPECS", &a->pass_specs},
                {"device-list-strategy", 0, required_argument, "DEVICE_LIST_STRATEGY", &a->list_strategy},
                {"device-id-strategy", 0, required_argument, "DEVICE_ID_STRATEGY", &a->id_strategy},
                {"nvidia-driver-root", 0, required_argument, "NVIDIA_DRIVER_ROOT", &a->driver_root},
                {"driver-root", 0, required_argument, NULL, &a->driver_root},
                {"dev-root", 0, required_argument, NULL, &a->dev_root},
                {"nvidia-dev-root", 0, required_argument, "NVIDIA_DEV_ROOT", &a->dev_root},
                {"cdi-annotation-prefix", 0, required_argument, "CDI_ANNOTATION_PREFIX", &a->cdi_prefix},
                {"cdi-spec-dir", 0, required_argument, "MIGKIT_CDI_SPEC_DIR", &a->cdi_dir},
                {"mps-root", 0, required_argument, "MPS_ROOT", &a->mps_root},
                {"gds-enabled", 0, optional_argument, "GDS_ENABLED", &a->gds},
                {"mofed-enabled", 0, optional_argument, "MOFED_ENABLED", &a->mofed},
                {"gdrcopy-enabled", 0, optional_argument, "GDRCOPY_ENABLED", &a->gdrcopy},
                {"config-file", 0, required_argument, "CONFIG_FILE", &a->config_file},
                {"resource-config", 0, required_argument, "NVIDIA_DRIVER_RESOURCE_CONFIG", &a->resource_config},
                {"device-plugin-path", 0, required_argument, "DEVICE_PLUGIN_PATH", &a->plugin_path},
                {"kubelet-socket", 0, required_argument, NULL, &a->kubelet_socket},
                {"labels", 0, required_argument, "MIGKIT_LABELS", &a->labels},
                {"nfd-features-file", 0, required_argument, "GFD_OUTPUT_FILE", &a->nfd_file},
                {"node-name", 0, required_argument, "NODE_NAME", &a->node_name},
                {"kubeconfig", 0, required_argument, "KUBECONFIG", &a->kubeconfig},
                {"machine-type-file", 0, required_argument, "GFD_MACHINE_TYPE_FILE", &a->machine_file},
                {"dynamic-mig", 0, optional_argument, "MIGKIT_DYNAMIC_MIG", &a->dynamic},
                {"vgpu-root", 0, required_argument, "MIGKIT_VGPU_ROOT", &a->vgpu_root},
                {"vgpu-library", 0, required_argument, "MIGKIT_VGPU_LIBRARY", &a->vgpu_library},
                {"device-split-count", 0, required_argument, "DEVICE_SPLIT_COUNT", &a->split_s},
                {"scheduler-config", 0, required_argument, "MIGKIT_SCHEDULER_CONFIG", &a->sched_config},
                {"pod-resources", 0, optional_argument, "MIGKIT_POD_RESOURCES", &a->podres},
                {"pod-resources-socket", 0, required_argument, "MIGKIT_POD_RESOURCES_SOCKET", &a->podres_socket},
                {},
        };
        /* Set but empty means "do not register", so not through the table's
         * rule (set and non-empty). */
        a->kubelet_socket = secure_getenv("KUBELET_SOCKET");
        return cli_options_parse(argc, argv, options, help);
}

/* The daemon's options from a (no apiserver client yet): MK_EXIT_OK, or the
 * exit code after printing the error. */
static int daemon_options(const struct dp_args *a, struct mk_dp_daemon_options *o) {
        *o = (struct mk_dp_daemon_options) {
                .fail_on_init_error = true,
                .config_file = a->config_file,
                .resource_config = a->resource_config,
                .plugin_dir = a->plugin_path,
                .kubelet_socket = a->kubelet_socket,
                .nfd_features_file = a->nfd_file,
                .node_name = a->node_name,
                .machine_type_file = a->machine_file ? a->machine_file : DEFAULT_MACHINE_TYPE_FILE,
                .cdi_spec_dir = a->cdi_dir,
                .mps_root = a->mps_root,
                .soft = {.root = a->vgpu_root, .library = a->vgpu_library},
                .follow_handouts = true,
                .pod_resources_socket = a->podres_socket,
        };
        mk_dp_options_init(&o->dp);
        uint64_t retry_ms = MK_DP_RETRY_MS;
        if (cli_option_duration_ms("--retry-interval", a->retry, 100, 86400000, &retry_ms) < 0)
                return MK_EXIT_USAGE;
        o->retry_ms = (unsigned) retry_ms;
        if (parse_modes(a->mig_strategy, a->list_strategy, a->id_strategy, a->labels, o) < 0 ||
            cli_option_bool("--fail-on-init-error", a->fail_on_init, &o->fail_on_init_error) < 0 ||
            cli_option_bool("--pass-device-specs", a->pass_specs, &o->dp.pass_device_specs) < 0 ||
            cli_option_bool("--gds-enabled", a->gds, &o->dp.gds_enabled) < 0 ||
            cli_option_bool("--mofed-enabled", a->mofed, &o->dp.mofed_enabled) < 0 ||
            cli_option_bool("--gdrcopy-enabled", a->gdrcopy, &o->dp.gdrcopy_enabled) < 0 ||
            cli_option_bool("--dynamic-mig", a->dynamic, &o->dynamic_mig) < 0 ||
            cli_option_bool("--pod-resources", a->podres, &o->follow_handouts) < 0)
                return MK_EXIT_USAGE;
        int r = parse_split(a->split_s, a->sched_config, a->node_name, &o->soft.split);
        if (r != MK_EXIT_OK)
                return r;
        if (a->driver_root)
                o->dp.driver_root = a->driver_root;
        if (a->dev_root)
                o->dp.dev_root = a->dev_root;
        if (a->cdi_prefix)
                o->dp.cdi_annotation_prefix = a->cdi_prefix;
        return MK_EXIT_OK;
}

int cli_device_plugin(int argc, char **argv) {
        struct dp_args a = {0};
        int r = parse_args(argc, argv, &a);
        if (r != CLI_CONTINUE)
                return r;
        struct mk_dp_daemon_options o;
        r = daemon_options(&a, &o);
        if (r != MK_EXIT_OK)
                return r;
        struct mk_error e = {0};
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (o.labels == MK_DP_LABELS_NODE || o.dynamic_mig) {
                if (!a.node_name) {
                        fprintf(stderr, "Error: %s needs --node-name or NODE_NAME\n",
                                o.dynamic_mig ? "--dynamic-mig" : "--labels node");
                        return MK_EXIT_USAGE;
                }
                if (connect_kube(a.kubeconfig, &k, &e) < 0)
                        return cli_fail(&e);
                o.kube = k;
        }
        r = mk_dp_daemon_run(&o, &e);
        if (r < 0)
                return cli_fail(&e);
        return MK_EXIT_OK;
}
