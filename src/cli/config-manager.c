/* `migkit config-manager`: the GPU Operator's config-manager (init container
 * and sidecar of its device plugin and GFD pods). Follows the node's
 * nvidia.com/device-plugin.config label, links the config it names from a
 * directory of configs (a ConfigMap) to the plugin's config file, and sends
 * the plugin SIGHUP. Upstream's flags and variables (NVIDIA/k8s-device-plugin
 * cmd/config-manager/main.go, v0.17); docs/gpu-operator.md. */
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/kube-connect.h"
#include "cli/options.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "plugin/config-select.h"
#include "version.h"

static atomic_bool cm_cancel;

static void on_term(int sig) {
        atomic_store(&cm_cancel, true);
}

static void help(void) {
        printf("Usage: migkit config-manager [OPTIONS]   (also as 'config-manager')\n"
               "\n"
               "Links the device plugin config that the node's label selects and signals the plugin.\n"
               "Each option is also read from the environment variable in brackets.\n"
               "\n"
               "  --oneshot[=BOOL]              update once and exit [ONESHOT]\n"
               "  --kubeconfig PATH             kubeconfig [KUBECONFIG]; default: in-cluster\n"
               "  --node-name NAME              this node, required [NODE_NAME]\n"
               "  --node-label KEY              the label naming the config [NODE_LABEL]\n"
               "                                (default nvidia.com/device-plugin.config)\n"
               "  --config-file-srcdir DIR      the available configs, required [CONFIG_FILE_SRCDIR]\n"
               "  --config-file-dst PATH        the link to write, required [CONFIG_FILE_DST]\n"
               "  --default-config NAME         the config when the label is unset [DEFAULT_CONFIG]\n"
               "  --fallback-strategies LIST    then: named, single, empty [FALLBACK_STRATEGIES]\n"
               "  --send-signal[=BOOL]          signal the process after a change (default true)\n"
               "                                [SEND_SIGNAL]\n"
               "  --signal N                    the signal (default 1, SIGHUP) [SIGNAL]\n"
               "  --process-to-signal NAME      its argv[0] (default nvidia-device-plugin), a process of\n"
               "                                this PID namespace only (the pod's, with\n"
               "                                shareProcessNamespace) [PROCESS_TO_SIGNAL]\n"
               "  -v, --version                 print the version\n");
}

struct cm {
        const char *node, *label_key, *srcdir, *dst, *default_config, *fallbacks, *process;
        bool oneshot, send_signal;
        int signal;
        bool have_last;
        char *last; /* the label value last acted on; NULL: unset */
};

/* Acts on the label's value (NULL: unset) unless it is the one acted on last. */
static int update(struct cm *c, const char *value, struct mk_error *e) {
        if (c->have_last && ((!value && !c->last) || (value && c->last && streq(value, c->last))))
                return 0;
        free(c->last);
        c->last = value ? strdup(value) : NULL;
        if (value && !c->last)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        c->have_last = true;
        log_info("Label %s=%s", c->label_key, value ? value : "(unset)");

        _cleanup_free_ char *name = NULL;
        int r = mk_dp_config_choose(c->srcdir, value, c->default_config, c->fallbacks, &name, e);
        if (r < 0)
                return r;
        bool updated;
        r = mk_dp_config_link(c->srcdir, name, c->dst, &updated, e);
        if (r < 0)
                return r;
        if (!updated) {
                log_info("Already configured with %s", name ? name : "the empty config");
                return 0;
        }
        log_info("Updated '%s' to %s", c->dst, name ? name : "the empty config");
        if (!c->send_signal)
                return 0;
        pid_t pid;
        r = mk_process_find(c->process, &pid);
        if (r < 0)
                return mk_error_set(e, r, "Cannot find the process '%s' to signal in this PID namespace%s",
                                    c->process,
                                    r == -ESRCH ? " (a pod's containers share one with shareProcessNamespace)" : "");
        if (kill(pid, c->signal) < 0)
                return mk_error_set(e, -errno, "Cannot send signal %d to '%s' (pid %d): %s", c->signal, c->process,
                                    (int) pid, strerror(errno));
        log_info("Sent signal %d to '%s' (pid %d)", c->signal, c->process, (int) pid);
        return 0;
}

static const char *node_label(const json_t *node, const char *key) {
        return json_string_value(json_object_get(json_object_get(json_object_get(node, "metadata"), "labels"), key));
}

struct watch_ctx {
        struct cm *c;
        struct mk_error *e;
};

static int on_node(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata) {
        struct watch_ctx *w = userdata;
        const char *v = type == MK_KUBE_EVENT_DELETED ? NULL : node_label(object, w->c->label_key);
        if (type != MK_KUBE_EVENT_ADDED && type != MK_KUBE_EVENT_MODIFIED && type != MK_KUBE_EVENT_DELETED)
                return 0;
        return update(w->c, v, w->e);
}

int cli_config_manager(int argc, char **argv) {
        struct cm c = {
                .label_key = "nvidia.com/device-plugin.config",
                .process = "nvidia-device-plugin",
                .send_signal = true,
                .signal = SIGHUP,
        };
        const char *kubeconfig = NULL, *oneshot = NULL, *send = NULL, *sig = NULL, *version = NULL;
        const struct cli_option options[] = {
                {"oneshot", 0, optional_argument, "ONESHOT", &oneshot},
                {"kubeconfig", 0, required_argument, "KUBECONFIG", &kubeconfig},
                {"node-name", 0, required_argument, "NODE_NAME", &c.node},
                {"node-label", 0, required_argument, "NODE_LABEL", &c.label_key},
                {"config-file-srcdir", 0, required_argument, "CONFIG_FILE_SRCDIR", &c.srcdir},
                {"config-file-dst", 0, required_argument, "CONFIG_FILE_DST", &c.dst},
                {"default-config", 0, required_argument, "DEFAULT_CONFIG", &c.default_config},
                {"fallback-strategies", 0, required_argument, "FALLBACK_STRATEGIES", &c.fallbacks},
                {"send-signal", 0, optional_argument, "SEND_SIGNAL", &send},
                {"signal", 0, required_argument, "SIGNAL", &sig},
                {"process-to-signal", 0, required_argument, "PROCESS_TO_SIGNAL", &c.process},
                {"version", 'v', no_argument, NULL, &version},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        if (version) {
                /* As the GPU Operator's other names print it (cli/upstream.c). */
                printf("config-manager (migkit %s)\ngit revision: %s\nbuild: %s\n", MK_VERSION, MK_GIT_REV,
                       MK_BUILD_FLAGS);
                return MK_EXIT_OK;
        }
        if (cli_option_bool("ONESHOT/--oneshot", oneshot, &c.oneshot) < 0 ||
            cli_option_bool("SEND_SIGNAL/--send-signal", send, &c.send_signal) < 0)
                return MK_EXIT_USAGE;
        if (sig && (mk_parse_int(sig, &c.signal) < 0 || c.signal <= 0 || c.signal >= NSIG)) {
                fprintf(stderr, "Error: invalid signal '%s'\n", sig);
                return MK_EXIT_USAGE;
        }
        /* Upstream's checks, upstream's words. */
        static const char *const required[] = {"node-name", "node-label", "config-file-srcdir", "config-file-dst"};
        const char *values[] = {c.node, c.label_key, c.srcdir, c.dst};
        for (size_t i = 0; i < ELEMENTSOF(required); i++)
                if (!values[i] || !*values[i]) {
                        fprintf(stderr, "Error: invalid <%s>: must not be empty string\n", required[i]);
                        return MK_EXIT_USAGE;
                }
        if (strlen(c.node) > 253 || strchr(c.node, '/')) {
                fprintf(stderr, "Error: invalid node name '%s'\n", c.node);
                return MK_EXIT_USAGE;
        }

        struct mk_error e = {0};
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (cli_kube_connect(kubeconfig, NULL, &k, &e) < 0)
                return cli_fail(&e);

        char path[320];
        if (c.oneshot) {
                snprintf(path, sizeof(path), "/api/v1/nodes/%s", c.node);
                json_t *node = NULL;
                if (mk_kube_get(k, path, &node, &e) < 0) {
                        mk_error_prefix(&e, "Cannot get node '%s'", c.node);
                        return cli_fail(&e);
                }
                r = update(&c, node_label(node, c.label_key), &e);
                json_decref(node);
                free(c.last);
                return r < 0 ? cli_fail(&e) : MK_EXIT_OK;
        }

        struct sigaction sa = {.sa_handler = on_term};
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGINT, &sa, NULL);
        char fs[300];
        snprintf(fs, sizeof(fs), "metadata.name=%s", c.node);
        struct mk_kube_informer_opts io = {.field_selector = fs, .cancel = &cm_cancel};
        struct watch_ctx w = {.c = &c, .e = &e};
        log_info("Following label '%s' of node '%s'", c.label_key, c.node);
        r = mk_kube_informer_run(k, "/api/v1/nodes", &io, on_node, &w, &e);
        free(c.last);
        if (r == -ECANCELED) {
                log_info("Shutting down");
                return MK_EXIT_OK;
        }
        return r < 0 ? cli_fail(&e) : MK_EXIT_OK;
}
