/* migkit manager: the Kubernetes MIG manager (docs/manager.md). Flags and
 * environment variables follow nvidia-mig-manager's (mig-parted v0.15.0 cmd/nvidia-mig-manager):
 * every flag also reads its variable. */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/kube-connect.h"
#include "cli/options.h"
#include "engine/generate.h"
#include "host/clients.h"
#include "kube/kube.h"
#include "manager/manager.h"
#include "spec/config.h"
#include "spec/emit.h"
#include "spec/hooks.h"
#include "spec/yaml.h"

#define MK_MANAGER_DEFAULT_HOST_ROOT "/host"
#define MK_MANAGER_DEFAULT_GENERATED "/etc/nvidia-mig-manager/generated-config.yaml"

static atomic_bool manager_cancel;

static void on_signal(int sig) {
        (void) sig;
        atomic_store(&manager_cancel, true);
}

static void help(void) {
        printf("Usage: migkit manager -n NODE [OPTIONS]\n"
               "\n"
               "The Kubernetes MIG manager: applies the MIG config named by the node's\n"
               "nvidia.com/mig.config label and reports nvidia.com/mig.config.state.\n"
               "\n"
               "Options (each also read from the environment variable in brackets):\n"
               "      --kubeconfig PATH             Kubeconfig file [KUBECONFIG]; default: in-cluster\n"
               "  -n, --node-name NAME              This node's name [NODE_NAME], required\n"
               "  -f, --config-file PATH            mig-parted v1 config [CONFIG_FILE]; default: generated\n"
               "                                    from the GPUs' profiles and published as ConfigMap\n"
               "                                    <node>-mig-config in POD_NAMESPACE\n"
               "  -k, --hooks-file PATH             Hooks file [HOOKS_FILE]\n"
               "  -r, --with-reboot                 Reboot once when a mode change needs it [WITH_REBOOT]\n"
               "  -d, --with-shutdown-host-gpu-clients\n"
               "                                    Stop host GPU clients around a change\n"
               "                                    [WITH_SHUTDOWN_HOST_GPU_CLIENTS]\n"
               "  -g, --gpu-clients-file PATH       Host GPU clients (version: v1, systemd-services: [...])\n"
               "                                    [GPU_CLIENTS_FILE]; default: upstream's list\n"
               "  -m, --host-root-mount PATH        Host root [HOST_ROOT_MOUNT] (default /host): reboot marker\n"
               "                                    in <root>/var/lib/migkit\n"
               "      --pod-wait-timeout SECONDS    Wait for GPU pods to leave [POD_WAIT_TIMEOUT] (300)\n"
               "      --backoff-initial SECONDS     First retry after a failure [RETRY_BACKOFF_INITIAL] (10)\n"
               "      --backoff-max SECONDS         Longest retry interval [RETRY_BACKOFF_MAX] (300)\n"
               "      --generated-config-file PATH  Where the generated config is written\n"
               "                                    [GENERATED_CONFIG_FILE] (" MK_MANAGER_DEFAULT_GENERATED ")\n"
               "\n"
               "Also read: POD_NAME, POD_NAMESPACE (ConfigMap and owner), DEFAULT_CONFIG_FILE (used\n"
               "when no config can be generated), EVENT_NAMESPACE (Events, default 'default').\n");
}

static const char *env(const char *name) {
        const char *v = secure_getenv(name);
        return v && *v ? v : NULL;
}

static int env_bool(const char *name, bool *b) {
        const char *v = env(name);
        if (v && mk_parse_bool(v, b) < 0) {
                fprintf(stderr, "Error: invalid %s='%s' (want true or false)\n", name, v);
                return -EINVAL;
        }
        return 0;
}

static int parse_secs(const char *what, const char *v, unsigned *ret) {
        uint32_t u;
        if (!v)
                return 0;
        if (mk_parse_u32(v, &u) < 0 || u == 0 || u > 86400) {
                fprintf(stderr, "Error: invalid %s '%s' (seconds, 1..86400)\n", what, v);
                return -EINVAL;
        }
        *ret = u;
        return 0;
}

/* Upstream's host clients file (version: v1, systemd-services: [units]);
 * without one, upstream's default units. */
static int load_clients(const char *path, struct mk_gpu_clients *ret) {
        if (path) {
                struct mk_error e = {0};
                int r = mk_gpu_clients_file_load(path, ret, &e);
                if (r < 0)
                        (void) cli_fail(&e);
                return r;
        }
        _cleanup_(mk_gpu_clients_done) struct mk_gpu_clients c = {0};
        if (mk_gpu_clients_init_default(&c) < 0)
                return -ENOMEM;
        /* Upstream stops no containers from the manager. */
        c.container_images = strv_free(c.container_images);
        c.container_images = calloc(1, sizeof(char *));
        c.n_container_images = 0;
        if (!c.container_images)
                return -ENOMEM;
        *ret = c;
        c = (struct mk_gpu_clients){0};
        return 0;
}

/* The config when no -f: generated from the GPUs, else DEFAULT_CONFIG_FILE. */
static int generate(const char *node, const char *out_path, char **ret_yaml, struct mk_config **ret) {
        struct mk_error e = {0};
        int r = -ENODATA;
        json_t *j = NULL;
        struct mk_snapshot *s = cli_snapshot();
        if (!s)
                return -EIO;
        r = mk_generate_config(s, &j, &e);
        mk_snapshot_free(s);
        if (r < 0) {
                const char *def = env("DEFAULT_CONFIG_FILE");
                if (!def) {
                        fprintf(stderr, "Error: cannot generate a MIG config (%s) and DEFAULT_CONFIG_FILE is unset\n",
                                e.msg);
                        return r;
                }
                log_warning("Cannot generate a MIG config (%s): using DEFAULT_CONFIG_FILE '%s'", e.msg, def);
                if (mk_config_load(def, ret, &e) < 0) {
                        (void) cli_fail(&e);
                        return -EINVAL;
                }
                *ret_yaml = NULL;
                return 0;
        }
        _cleanup_free_ char *body = mk_yaml_dump(j, true);
        json_decref(j);
        if (!body)
                return -ENOMEM;
        char *yaml = NULL;
        if (asprintf(&yaml, "# Generated by migkit manager on node '%s' from the MIG profiles its GPUs report.\n"
                            "# Choose a config by labelling the node nvidia.com/mig.config=<name>.\n%s",
                     node, body) < 0)
                return -ENOMEM;
        r = mk_config_parse(yaml, strlen(yaml), out_path, ret, &e);
        if (r < 0) {
                free(yaml);
                (void) cli_fail(&e);
                return r;
        }
        struct mk_error we = {0};
        if (mk_write_file_atomic(out_path, yaml, strlen(yaml), 0600, &we) < 0)
                log_warning("Cannot write the generated config, ignoring: %s", we.msg);
        *ret_yaml = yaml;
        return 0;
}

int cli_manager(int argc, char **argv) {
        const char *kubeconfig = NULL, *config_file = NULL, *hooks = NULL, *clients_file = NULL, *host_root = NULL,
                   *generated = NULL, *node = NULL, *pod_wait = NULL, *b_init = NULL, *b_max = NULL,
                   *reboot_flag = NULL, *shutdown_flag = NULL;
        const struct cli_option options[] = {
                {"kubeconfig", 0, required_argument, "KUBECONFIG", &kubeconfig},
                {"node-name", 'n', required_argument, "NODE_NAME", &node},
                {"config-file", 'f', required_argument, "CONFIG_FILE", &config_file},
                {"hooks-file", 'k', required_argument, "HOOKS_FILE", &hooks},
                {"with-reboot", 'r', no_argument, NULL, &reboot_flag},
                {"with-shutdown-host-gpu-clients", 'd', no_argument, NULL, &shutdown_flag},
                {"gpu-clients-file", 'g', required_argument, "GPU_CLIENTS_FILE", &clients_file},
                {"host-root-mount", 'm', required_argument, "HOST_ROOT_MOUNT", &host_root},
                {"pod-wait-timeout", 0, required_argument, "POD_WAIT_TIMEOUT", &pod_wait},
                {"backoff-initial", 0, required_argument, "RETRY_BACKOFF_INITIAL", &b_init},
                {"backoff-max", 0, required_argument, "RETRY_BACKOFF_MAX", &b_max},
                {"generated-config-file", 0, required_argument, "GENERATED_CONFIG_FILE", &generated},
                {},
        };
        struct mk_manager_opts o = {.cancel = &manager_cancel};
        if (env_bool("WITH_REBOOT", &o.with_reboot) < 0 ||
            env_bool("WITH_SHUTDOWN_HOST_GPU_CLIENTS", &o.with_shutdown_host_gpu_clients) < 0)
                return MK_EXIT_USAGE;
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        if (reboot_flag)
                o.with_reboot = true;
        if (shutdown_flag)
                o.with_shutdown_host_gpu_clients = true;
        if (!node || !*node) {
                fprintf(stderr, "Error: invalid -n <node-name> flag: must not be empty string\n");
                return MK_EXIT_USAGE;
        }
        if (parse_secs("--pod-wait-timeout", pod_wait, &o.pod_wait_timeout_s) < 0 ||
            parse_secs("--backoff-initial", b_init, &o.backoff_initial_s) < 0 ||
            parse_secs("--backoff-max", b_max, &o.backoff_max_s) < 0)
                return MK_EXIT_USAGE;
        o.node = node;
        o.hooks_file = hooks;
        o.host_root = host_root ? host_root : MK_MANAGER_DEFAULT_HOST_ROOT;
        o.pod_name = env("POD_NAME");
        o.event_namespace = env("EVENT_NAMESPACE");
        const char *pod_ns = env("POD_NAMESPACE");

        struct mk_error e = {0};
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (cli_kube_connect(kubeconfig, NULL, &k, &e) < 0)
                return cli_fail(&e);

        _cleanup_(mk_config_freep) struct mk_config *cfg = NULL;
        _cleanup_free_ char *yaml = NULL;
        if (config_file) {
                if (mk_config_load(config_file, &cfg, &e) < 0)
                        return cli_fail(&e);
                log_info("Using MIG config file '%s'", config_file);
        } else {
                if (!generated)
                        generated = MK_MANAGER_DEFAULT_GENERATED;
                if (generate(node, generated, &yaml, &cfg) < 0)
                        return MK_EXIT_FAILURE;
                if (yaml) {
                        config_file = generated;
                        log_info("Generated a MIG config with %zu configs from the GPUs' profiles", cfg->n_configs);
                        if (!pod_ns)
                                log_warning("POD_NAMESPACE is unset: not publishing the generated config");
                        else if (mk_manager_publish_config(k, pod_ns, node, o.pod_name, yaml, &e) < 0)
                                log_warning("Cannot publish ConfigMap '%s-mig-config' in '%s', ignoring: %s", node,
                                            pod_ns, e.msg);
                        else
                                log_info("Published the generated config as ConfigMap '%s/%s-mig-config'", pod_ns,
                                         node);
                } else
                        config_file = env("DEFAULT_CONFIG_FILE");
        }
        o.config_file = config_file;

        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
        if (hooks && mk_hooks_load(hooks, &h, &e) < 0)
                return cli_fail(&e);
        _cleanup_(mk_gpu_clients_done) struct mk_gpu_clients clients = {0};
        if (o.with_shutdown_host_gpu_clients && load_clients(clients_file, &clients) < 0)
                return MK_EXIT_FAILURE;

        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGINT, &sa, NULL);

        cli_daemon_malloc();
        r = mk_manager_run(k, cfg, h, o.with_shutdown_host_gpu_clients ? &clients : NULL, &o);
        return r < 0 ? MK_EXIT_FAILURE : MK_EXIT_OK;
}
