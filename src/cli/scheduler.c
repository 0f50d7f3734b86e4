/* migkit scheduler: dynamic MIG scheduling (docs/scheduler.md).
 *   serve      the kube-scheduler extender (filter, prioritize, bind)
 *   node       the node agent (inventory, creation and clean-up of instances)
 *   inventory  print what the node agent would publish
 *   check      validate a scheduler config file */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/kube-connect.h"
#include "cli/options.h"
#include "engine/engine.h"
#include "kube/kube.h"
#include "sched/agent.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "sched/server.h"
#include "spec/sched-config.h"
#include "vgpunode/dirs.h"
#include "vgpunode/monitor.h"

static atomic_bool sched_cancel;

static void on_signal(int sig) {
        (void) sig;
        atomic_store(&sched_cancel, true);
}

static void help(void) {
        printf("Usage: migkit scheduler COMMAND [OPTIONS]\n"
               "\n"
               "Dynamic MIG: a kube-scheduler extender that reserves MIG instances for pods asking\n"
               "nvidia.com/gpu with nvidia.com/gpumem, and a node agent that creates them.\n"
               "\n"
               "Commands:\n"
               "  serve       Run the extender (POST /filter, /prioritize, /bind; GET /healthz, /readyz, /metrics)\n"
               "  node        Run the node agent: publish the node's inventory, create reserved instances,\n"
               "              destroy instances of finished pods after a grace period\n"
               "  inventory   Print the inventory this node would publish (JSON, one line as published)\n"
               "  check FILE  Validate a scheduler config file\n"
               "\n"
               "Options:\n"
               "  -c, --config PATH          Scheduler config (allowed profiles per GPU model, node modes)\n"
               "                             [MIGKIT_SCHEDULER_CONFIG]; default: every profile allowed\n"
               "      --kubeconfig PATH      Kubeconfig [KUBECONFIG]; default: in-cluster\n"
               "  serve:\n"
               "      --address ADDR         IPv4 address to listen on (127.0.0.1; 0.0.0.0: all)\n"
               "      --port PORT            Port (8888; 0: any free port, printed on stdout)\n"
               "      --threads N            HTTP worker threads (4)\n"
               "      --max-connections N    Open connections in all (16384, less than the fd limit)\n"
               "      --max-connections-per-client N  From one IP address (256)\n"
               "      --request-timeout DURATION  Idle connection, or a request body not received (10s)\n"
               "      --max-request-bytes N  One request body (8388608: 413 over it)\n"
               "      --max-request-values N JSON values in one body (250000: 413 over it)\n"
               "  node, inventory:\n"
               "  -n, --node-name NAME       This node [NODE_NAME], required for node\n"
               "      --grace DURATION       Orphan instances live this long before destruction, and an idle GPU\n"
               "                             this long before it may switch mode (modeswitch: idle) (30s)\n"
               "      --resync DURATION      Full pass at least this often (30s)\n"
               "      --once                 One pass, then exit\n"
               "      --no-kube              inventory: do not read pods from the apiserver\n"
               "      --metrics-address HOST:PORT  node: serve GET /metrics (soft slices per container, HAMi's\n"
               "                             vGPU monitor names), /healthz there (e.g. 0.0.0.0:9394; default: none)\n"
               "      --vgpu-root PATH       node: soft slices' per-container directories [MIGKIT_VGPU_ROOT]\n"
               "                             (" MK_VGPU_DEFAULT_ROOT ")\n"

               "  -o, --output json          inventory: the only format (JSON)\n"
               "      --indent               inventory: indent the JSON for reading\n");
}

static int make_kube(const char *kubeconfig, struct mk_kube **ret) {
        struct mk_error e = {0};
        if (cli_kube_connect(kubeconfig, NULL, ret, &e) < 0) {
                (void) cli_fail(&e);
                return -EINVAL;
        }
        return 0;
}

static int parse_duration_s(const char *what, const char *v, unsigned *ret) {
        uint64_t ms = (uint64_t) *ret * 1000;
        if (!v)
                return 0;
        if (cli_option_duration_ms(what, v, 0, 86400000, &ms) < 0)
                return -EINVAL;
        *ret = (unsigned) ((ms + 999) / 1000);
        return 0;
}

static void install_signals(void) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGINT, &sa, NULL);
}

static int do_serve(struct mk_sched_config *cfg, const char *kubeconfig, struct mk_sched_server_opts so) {
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (make_kube(kubeconfig, &k) < 0)
                return MK_EXIT_FAILURE;
        _cleanup_(mk_sched_freep) struct mk_sched *s = NULL;
        if (mk_sched_new(cfg, &s) < 0) {
                log_error("Out of memory");
                return MK_EXIT_FAILURE;
        }
        install_signals();
        mk_sched_server_malloc(); /* before the server's threads: its requests' buffers kept */
        so.sched = s;
        so.kube = k;
        struct mk_sched_server *srv = NULL;
        struct mk_error e = {0};
        if (mk_sched_server_start(&so, &srv, &e) < 0)
                return cli_fail(&e);
        log_info("Extender listening on %s:%u", so.address ? so.address : "127.0.0.1", mk_sched_server_port(srv));
        printf("listening on port %u\n", mk_sched_server_port(srv));
        fflush(stdout);
        int ret = MK_EXIT_OK;
        while (!atomic_load(&sched_cancel)) {
                const char *f = mk_sched_server_failed(srv);
                if (f) {
                        log_error("%s", f);
                        ret = MK_EXIT_FAILURE;
                        break;
                }
                usleep(200 * 1000);
        }
        mk_sched_server_stop(srv);
        return ret;
}

static void agent_report(void *userdata, int level, const char *msg) {
        (void) userdata;
        mk_log_full((enum mk_log_level) level, NULL, 0, "%s", msg);
}

/* /metrics of the node agent: the soft slices' monitor (vgpunode/monitor.h). */
static char *node_metrics(void *userdata) {
        struct mk_buf b;
        mk_buf_init(&b, MK_VGPU_MAX_METRICS_BYTES);
        struct mk_error e = {0};
        char *text = NULL;
        if (mk_vgpu_metrics(userdata, &b, &e) < 0)
                log_warning("Metrics: %s", e.msg);
        else
                text = mk_buf_take(&b);
        mk_buf_done(&b);
        return text;
}

/* "HOST:PORT" of --metrics-address into the server's options. */
static int parse_host_port(const char *v, char host[64], unsigned *ret_port) {
        const char *colon = v ? strrchr(v, ':') : NULL;
        uint32_t port;
        if (!colon || colon == v || (size_t) (colon - v) >= 64 || mk_parse_u32(colon + 1, &port) < 0 || port > 65535) {
                fprintf(stderr, "Error: invalid --metrics-address '%s' (HOST:PORT, e.g. 0.0.0.0:9394)\n", v ? v : "");
                return -EINVAL;
        }
        memcpy(host, v, (size_t) (colon - v));
        host[colon - v] = 0;
        *ret_port = port;
        return 0;
}

/* The idle mode switch's GPU reset (the agent has no engine/ edge). */
static int agent_reset_gpu(void *userdata, const char *bus_id, struct mk_error *e) {
        (void) userdata;
        bool reboot = false;
        return mk_engine_reset_gpus(&bus_id, 1, &reboot, e);
}

static int do_node(struct mk_sched_config *cfg, const char *kubeconfig, const char *node, unsigned grace,
                   unsigned resync, bool once, const char *metrics_address, const char *vgpu_root) {
        char host[64];
        unsigned mport = 0;
        if (metrics_address && parse_host_port(metrics_address, host, &mport) < 0)
                return MK_EXIT_USAGE;
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (make_kube(kubeconfig, &k) < 0)
                return MK_EXIT_FAILURE;
        install_signals();
        cli_daemon_malloc();
        struct mk_sched_server *srv = NULL;
        if (metrics_address) {
                struct mk_sched_server_opts so = {.address = host, .port = mport, .threads = 1,
                                                  .metrics = node_metrics, .metrics_userdata = (void *) vgpu_root};
                struct mk_error me = {0};
                if (mk_sched_server_start(&so, &srv, &me) < 0)
                        return cli_fail(&me);
                log_info("Node metrics on %s:%u/metrics (soft slices under '%s')", host, mk_sched_server_port(srv),
                         vgpu_root);
        }
        struct mk_sched_agent_opts o = {.node = node, .kube = k, .cfg = cfg, .grace_s = grace, .resync_s = resync,
                                        .cancel = &sched_cancel, .once = once, .report = agent_report,
                                        .reset_gpu = agent_reset_gpu, .vgpu_root = vgpu_root};
        struct mk_sched_agent_pass pass = {0};
        struct mk_error e = {0};
        log_info("Node agent for '%s' starting (grace %us)", node, grace);
        int r = mk_sched_agent_run(&o, &pass, &e);
        mk_sched_server_stop(srv);
        if (once && r >= 0)
                log_info("Published the inventory of node '%s' (annotation %s, %zu bytes): %u MIG-capable GPU%s, "
                         "%u instance%s; %u instance%s created, %u destroyed, %u pod%s annotated%s", node,
                         MK_ANN_INVENTORY, pass.inventory_bytes, pass.inventory_gpus,
                         pass.inventory_gpus == 1 ? "" : "s", pass.inventory_instances,
                         pass.inventory_instances == 1 ? "" : "s", pass.created, pass.created == 1 ? "" : "s",
                         pass.destroyed, pass.pods_patched, pass.pods_patched == 1 ? "" : "s",
                         pass.failed ? ", some failed (logged above)" : "");
        if (r == -ECANCELED || (once && r >= 0))
                return pass.failed ? MK_EXIT_FAILURE : MK_EXIT_OK;
        return cli_fail(&e);
}

static int do_inventory(struct mk_sched_config *cfg, const char *kubeconfig, const char *node, bool no_kube,
                        bool indent) {
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        if (!no_kube && make_kube(kubeconfig, &k) < 0)
                return MK_EXIT_FAILURE;
        struct mk_sched_agent_opts o = {.node = node, .kube = k, .cfg = cfg};
        _cleanup_(mk_inventory_freep) struct mk_inventory *inv = NULL;
        struct mk_error e = {0};
        if (mk_sched_agent_inventory(&o, &inv, &e) < 0)
                return cli_fail(&e);
        _cleanup_free_ char *v = NULL;
        if (mk_inventory_format(inv, &v, &e) < 0)
                return cli_fail(&e);
        if (!indent) {          /* the annotation's bytes: one line */
                puts(v);
                return MK_EXIT_OK;
        }
        json_error_t je;
        json_t *j = json_loads(v, 0, &je);
        if (!j)
                return MK_EXIT_FAILURE;
        cli_print_json(stdout, j);
        json_decref(j);
        return MK_EXIT_OK;
}

/* The numbers of `migkit scheduler` flags, checked; a usage error is printed. */
static int parse_numbers(const char *port_s, const char *threads_s, const char *grace_s, const char *resync_s,
                         unsigned *port, unsigned *threads, unsigned *grace, unsigned *resync) {
        uint32_t u;
        if (port_s) {
                if (mk_parse_u32(port_s, &u) < 0 || u > 65535) {
                        fprintf(stderr, "Error: invalid --port '%s'\n", port_s);
                        return -EINVAL;
                }
                *port = u;
        }
        if (threads_s) {
                if (mk_parse_u32(threads_s, &u) < 0 || u < 1 || u > 256) {
                        fprintf(stderr, "Error: invalid --threads '%s' (1..256)\n", threads_s);
                        return -EINVAL;
                }
                *threads = u;
        }
        if (grace_s && parse_duration_s("--grace", grace_s, grace) < 0)
                return -EINVAL;
        if (resync_s && (parse_duration_s("--resync", resync_s, resync) < 0 || *resync == 0))
                return -EINVAL;
        return 0;
}

/* The extender's limits (--max-connections ... --max-request-values). */
static int parse_limits(const char *const v[5], struct mk_sched_server_opts *so) {
        static const char *const names[5] = {"--max-connections", "--max-connections-per-client", NULL,
                                             "--max-request-bytes", "--max-request-values"};
        uint32_t u[5] = {0};
        for (int i = 0; i < 5; i++) {
                if (!v[i] || i == 2)
                        continue;
                if (mk_parse_u32(v[i], &u[i]) < 0 || u[i] < 1) {
                        fprintf(stderr, "Error: invalid %s '%s' (a positive number)\n", names[i], v[i]);
                        return -EINVAL;
                }
        }
        if (v[2] && (parse_duration_s("--request-timeout", v[2], &u[2]) < 0 || u[2] == 0))
                return -EINVAL;
        so->max_connections = u[0];
        so->max_per_client = u[1];
        so->request_timeout_s = u[2];
        so->max_request = u[3];
        so->max_values = u[4];
        return 0;
}

int cli_scheduler(int argc, char **argv) {
        if (argc < 2 || streq(argv[1], "-h") || streq(argv[1], "--help")) {
                help();
                return argc < 2 ? MK_EXIT_USAGE : MK_EXIT_OK;
        }
        const char *cmd = argv[1];
        if (!streq(cmd, "serve") && !streq(cmd, "node") && !streq(cmd, "inventory") && !streq(cmd, "check")) {
                fprintf(stderr, "Error: unknown scheduler command '%s' (serve, node, inventory, check)\n", cmd);
                return MK_EXIT_USAGE;
        }
        const char *config = NULL, *kubeconfig = NULL, *address = NULL, *node = NULL, *port_s = NULL,
                   *threads_s = NULL, *grace_s = NULL, *resync_s = NULL, *once_s = NULL, *no_kube_s = NULL,
                   *metrics_address = NULL, *vgpu_root = NULL, *format = NULL, *indent_s = NULL;
        const char *limit_s[5] = {0}; /* --max-connections, -per-client, --request-timeout, -bytes, -values */
        const struct cli_option options[] = {
                {"config", 'c', required_argument, "MIGKIT_SCHEDULER_CONFIG", &config},
                {"kubeconfig", 0, required_argument, "KUBECONFIG", &kubeconfig},
                {"address", 0, required_argument, NULL, &address},
                {"port", 0, required_argument, NULL, &port_s},
                {"threads", 0, required_argument, NULL, &threads_s},
                {"node-name", 'n', required_argument, "NODE_NAME", &node},
                {"grace", 0, required_argument, NULL, &grace_s},
                {"resync", 0, required_argument, NULL, &resync_s},
                {"once", 0, no_argument, NULL, &once_s},
                {"no-kube", 0, no_argument, NULL, &no_kube_s},
                {"metrics-address", 0, required_argument, NULL, &metrics_address},
                {"vgpu-root", 0, required_argument, "MIGKIT_VGPU_ROOT", &vgpu_root},
                {"max-connections", 0, required_argument, NULL, &limit_s[0]},
                {"max-connections-per-client", 0, required_argument, NULL, &limit_s[1]},
                {"request-timeout", 0, required_argument, NULL, &limit_s[2]},
                {"max-request-bytes", 0, required_argument, NULL, &limit_s[3]},
                {"max-request-values", 0, required_argument, NULL, &limit_s[4]},
                {"output", 'o', required_argument, NULL, &format},
                {"output-format", 0, required_argument, NULL, &format},
                {"indent", 0, no_argument, NULL, &indent_s},
                {},
        };
        bool check = streq(cmd, "check");
        optind = 2;
        int r = cli_options_parse_args(argc, argv, options, help, check ? INT_MAX : 0);
        if (r != CLI_CONTINUE)
                return r;
        if (check) {
                if (optind != argc - 1) {
                        fprintf(stderr, "Error: check takes one config file\n");
                        return MK_EXIT_USAGE;
                }
                config = argv[optind];
        }
        unsigned port = 8888, threads = 4, grace = MK_AGENT_DEFAULT_GRACE_S, resync = MK_AGENT_DEFAULT_RESYNC_S;
        bool once = once_s != NULL, no_kube = no_kube_s != NULL;
        if (parse_numbers(port_s, threads_s, grace_s, resync_s, &port, &threads, &grace, &resync) < 0)
                return MK_EXIT_USAGE;
        enum mk_output_format fmt;
        if (cli_parse_output("scheduler", format, CLI_OUTPUT(MK_OUTPUT_JSON), MK_OUTPUT_JSON, &fmt) < 0)
                return MK_EXIT_USAGE;
        _cleanup_(mk_sched_config_freep) struct mk_sched_config *cfg = NULL;
        struct mk_error e = {0};
        if (mk_sched_config_load(config, &cfg, &e) < 0)
                return cli_fail(&e);
        if (streq(cmd, "check")) {
                printf("%s: %zu model entries, %zu nodes\n", config, cfg->n_models, cfg->n_nodes);
                return MK_EXIT_OK;
        }
        if (streq(cmd, "serve")) {
                struct mk_sched_server_opts so = {.address = address, .port = port, .threads = threads};
                if (parse_limits(limit_s, &so) < 0)
                        return MK_EXIT_USAGE;
                return do_serve(cfg, kubeconfig, so);
        }
        if (!node) {
                if (streq(cmd, "node")) {
                        fprintf(stderr, "Error: --node-name (or NODE_NAME) is required\n");
                        return MK_EXIT_USAGE;
                }
                node = "localhost";
        }
        if (streq(cmd, "node"))
                return do_node(cfg, kubeconfig, node, grace, resync, once, metrics_address,
                               vgpu_root && *vgpu_root ? vgpu_root : MK_VGPU_DEFAULT_ROOT);
        return do_inventory(cfg, kubeconfig, node, no_kube, indent_s != NULL);
}
