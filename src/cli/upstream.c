/* The GPU Operator's executable names: nvidia-mig-parted, nvidia-mig-manager,
 * nvidia-device-plugin and gpu-feature-discovery are links to `migkit`; run
 * under one of them, migkit takes that program's flags and environment
 * variables and runs the matching command. docs/gpu-operator.md lists, per
 * name, the flags and variables accepted, those accepted and ignored, and
 * what differs. Upstream flags parse as urfave/cli does: "-name" and
 * "--name", "name=value" or "name value", booleans only as "name" or
 * "name=BOOL". The flag lists follow NVIDIA/mig-parted
 * cmd/nvidia-mig-manager/main.go (v0.12) and NVIDIA/k8s-device-plugin
 * cmd/nvidia-device-plugin/main.go and cmd/gpu-feature-discovery/main.go
 * (v0.17). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/upstream.h"
#include "version.h"

#define MAX_ARGS 128
#define MAX_FLAGS 32
#define MAX_LABELS_BYTES (1024 * 1024) /* gpu-feature-discovery's output file */
#define ASKED_HELP 2                      /* translate(): -h/--help was given */

enum flag_kind { FLAG_STRING, FLAG_BOOL };

struct upstream_flag {
        const char *names;  /* comma-separated: the name, then aliases ("node-name,n") */
        enum flag_kind kind;
        const char *envs;   /* comma-separated environment variables upstream reads */
        /* The migkit option it becomes: "--x" gets "--x=VALUE"; with
         * to_switch, a boolean becomes the bare switch when true. NULL:
         * accepted and ignored, or handled by the caller (local). */
        const char *to;
        bool to_switch;
        bool local;
        bool list; /* a string slice upstream: repeated flags join with ',' */
        const char *ignored_why;
};

struct upstream_program {
        const char *name;
        const char *command; /* the migkit command */
        const struct upstream_flag *flags;
        size_t n_flags;
};

/* nvidia-mig-manager: flags of NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go. */
static const struct upstream_flag mig_manager_flags[] = {
        {"kubeconfig", FLAG_STRING, "KUBECONFIG", .to = "--kubeconfig"},
        {"node-name,n", FLAG_STRING, "NODE_NAME", .to = "--node-name"},
        {"config-file,f", FLAG_STRING, "CONFIG_FILE", .to = "--config-file"},
        {"host-root-mount,m", FLAG_STRING, "HOST_ROOT_MOUNT", .to = "--host-root-mount"},
        {"gpu-clients-file,g", FLAG_STRING, "GPU_CLIENTS_FILE", .to = "--gpu-clients-file"},
        {"with-reboot,r", FLAG_BOOL, "WITH_REBOOT", .to = "--with-reboot", .to_switch = true},
        {"with-shutdown-host-gpu-clients,d", FLAG_BOOL, "WITH_SHUTDOWN_HOST_GPU_CLIENTS",
         .to = "--with-shutdown-host-gpu-clients", .to_switch = true},
        {"reconfigure-script,s", FLAG_STRING, "RECONFIGURE_SCRIPT", NULL,
         .ignored_why = "migkit reconfigures in-process, there is no script"},
        {"host-nvidia-dir,i", FLAG_STRING, "HOST_NVIDIA_DIR", NULL,
         .ignored_why = "migkit runs no host-installed mig-parted"},
        {"host-mig-manager-state-file,o", FLAG_STRING, "HOST_MIG_MANAGER_STATE_FILE", NULL,
         .ignored_why = "the reboot marker is <host-root-mount>/var/lib/migkit"},
        {"host-kubelet-systemd-service,k", FLAG_STRING, "HOST_KUBELET_SYSTEMD_SERVICE", NULL,
         .ignored_why = "migkit does not stop the kubelet around a change"},
        {"default-gpu-clients-namespace,p", FLAG_STRING, "DEFAULT_GPU_CLIENTS_NAMESPACE", NULL,
         .ignored_why = "migkit waits for the GPU pods of every namespace on the node"},
        {"nvidia-driver-root,driver-root,t", FLAG_STRING, "NVIDIA_DRIVER_ROOT,DRIVER_ROOT", NULL,
         .ignored_why = "used by upstream for CDI only"},
        {"driver-root-ctr-path,a", FLAG_STRING, "DRIVER_ROOT_CTR_PATH", NULL, .ignored_why = "CDI is not supported"},
        {"cdi-enabled", FLAG_BOOL, "CDI_ENABLED", NULL, .ignored_why = "CDI spec generation is not supported"},
        {"dev-root,b", FLAG_STRING, "NVIDIA_DEV_ROOT", NULL, .ignored_why = "CDI is not supported"},
        {"dev-root-ctr-path,j", FLAG_STRING, "DEV_ROOT_CTR_PATH", NULL, .ignored_why = "CDI is not supported"},
        {"nvidia-cdi-hook-path", FLAG_STRING, "NVIDIA_CDI_HOOK_PATH", NULL, .ignored_why = "CDI is not supported"},
};

/* nvidia-device-plugin: flags of NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go. */
static const struct upstream_flag device_plugin_flags[] = {
        {"mig-strategy", FLAG_STRING, "MIG_STRATEGY", .to = "--mig-strategy"},
        {"fail-on-init-error", FLAG_BOOL, "FAIL_ON_INIT_ERROR", .to = "--fail-on-init-error"},
        {"nvidia-driver-root,driver-root", FLAG_STRING, "NVIDIA_DRIVER_ROOT", .to = "--nvidia-driver-root"},
        {"dev-root,nvidia-dev-root", FLAG_STRING, "NVIDIA_DEV_ROOT", .to = "--dev-root"},
        {"pass-device-specs", FLAG_BOOL, "PASS_DEVICE_SPECS", .to = "--pass-device-specs"},
        {"device-list-strategy", FLAG_STRING, "DEVICE_LIST_STRATEGY", .to = "--device-list-strategy",
         .list = true},
        {"device-id-strategy", FLAG_STRING, "DEVICE_ID_STRATEGY", .to = "--device-id-strategy"},
        {"gds-enabled", FLAG_BOOL, "GDS_ENABLED", .to = "--gds-enabled"},
        {"mofed-enabled", FLAG_BOOL, "MOFED_ENABLED", .to = "--mofed-enabled"},
        {"gdrcopy-enabled", FLAG_BOOL, "GDRCOPY_ENABLED", .to = "--gdrcopy-enabled"},
        {"config-file", FLAG_STRING, "CONFIG_FILE", .to = "--config-file"},
        {"cdi-annotation-prefix", FLAG_STRING, "CDI_ANNOTATION_PREFIX", .to = "--cdi-annotation-prefix"},
        {"kubelet-socket", FLAG_STRING, "KUBELET_SOCKET", .to = "--kubelet-socket"},
        {"restart-on-device-unhealthy", FLAG_BOOL, "RESTART_ON_DEVICE_UNHEALTHY", NULL,
         .ignored_why = "unhealthy devices are reported to the kubelet, the plugin keeps running"},
        {"nvidia-ctk-path", FLAG_STRING, "NVIDIA_CTK_PATH", NULL,
         .ignored_why = "migkit writes the CDI spec itself, without nvidia-ctk hooks"},
        {"nvidia-cdi-hook-path", FLAG_STRING, "NVIDIA_CDI_HOOK_PATH", NULL,
         .ignored_why = "migkit writes the CDI spec itself, without nvidia-ctk hooks"},
        {"container-driver-root,driver-root-ctr-path", FLAG_STRING, "CONTAINER_DRIVER_ROOT,DRIVER_ROOT_CTR_PATH",
         NULL, .ignored_why = "the CDI spec's driver files are looked up under --nvidia-driver-root"},
        {"cdi-feature-flags", FLAG_STRING, "CDI_FEATURE_FLAGS", NULL,
         .ignored_why = "migkit writes the CDI spec itself, not nvcdi"},
        {"mps-root", FLAG_STRING, "MPS_ROOT", .to = "--mps-root"},
        {"device-discovery-strategy", FLAG_STRING, "DEVICE_DISCOVERY_STRATEGY", NULL,
         .ignored_why = "discovery is always through NVML"},
        {"imex-channel-ids", FLAG_STRING, "IMEX_CHANNEL_IDS", NULL, .ignored_why = "IMEX channels are not supported"},
        {"imex-required", FLAG_BOOL, "IMEX_REQUIRED", NULL, .ignored_why = "IMEX channels are not supported"},
};

/* gpu-feature-discovery: flags of NVIDIA/k8s-device-plugin cmd/gpu-feature-discovery/main.go. */
enum { GFD_FAIL_ON_INIT, GFD_ONESHOT, GFD_SLEEP, GFD_OUTPUT, GFD_NFD_API, GFD_DISCOVERY };
static const struct upstream_flag gfd_flags[] = {
        [GFD_FAIL_ON_INIT] = {"fail-on-init-error", FLAG_BOOL, "GFD_FAIL_ON_INIT_ERROR,FAIL_ON_INIT_ERROR",
                              .local = true},
        [GFD_ONESHOT] = {"oneshot", FLAG_BOOL, "GFD_ONESHOT", .local = true},
        [GFD_SLEEP] = {"sleep-interval", FLAG_STRING, "GFD_SLEEP_INTERVAL", .local = true},
        [GFD_OUTPUT] = {"output-file,output,o", FLAG_STRING, "GFD_OUTPUT_FILE", .local = true},
        [GFD_NFD_API] = {"use-node-feature-api", FLAG_BOOL, "GFD_USE_NODE_FEATURE_API,USE_NODE_FEATURE_API",
                         .local = true},
        [GFD_DISCOVERY] = {"device-discovery-strategy", FLAG_STRING, "DEVICE_DISCOVERY_STRATEGY", .local = true},
        {"mig-strategy", FLAG_STRING, "GFD_MIG_STRATEGY,MIG_STRATEGY", .to = "--mig-strategy"},
        {"no-timestamp", FLAG_BOOL, "GFD_NO_TIMESTAMP", .to = "--no-timestamp", .to_switch = true},
        {"machine-type-file", FLAG_STRING, "GFD_MACHINE_TYPE_FILE", .to = "--machine-type-file"},
        {"config-file", FLAG_STRING, "GFD_CONFIG_FILE,CONFIG_FILE", .to = "--config-file"},
        {"driver-root-ctr-path,container-driver-root", FLAG_STRING, "DRIVER_ROOT_CTR_PATH,CONTAINER_DRIVER_ROOT",
         NULL, .ignored_why = "NVML is loaded from the library path"},
        {"kubeconfig", FLAG_STRING, "KUBECONFIG", NULL, .ignored_why = "used with --use-node-feature-api only"},
        {"node-name", FLAG_STRING, "NODE_NAME", NULL, .ignored_why = "used with --use-node-feature-api only"},
        {"kube-api-qps", FLAG_STRING, "KUBE_API_QPS", NULL, .ignored_why = "used with --use-node-feature-api only"},
        {"kube-api-burst", FLAG_STRING, "KUBE_API_BURST", NULL, .ignored_why = "used with --use-node-feature-api only"},
};

static const struct upstream_program programs[] = {
        {"nvidia-mig-parted", NULL, NULL, 0},
        {"nvidia-mig-manager", "manager", mig_manager_flags, ELEMENTSOF(mig_manager_flags)},
        {"nvidia-device-plugin", "device-plugin", device_plugin_flags, ELEMENTSOF(device_plugin_flags)},
        {"gpu-feature-discovery", "labels", gfd_flags, ELEMENTSOF(gfd_flags)},
        /* Upstream's flags and variables are config-manager's own. */
        {"config-manager", "config-manager", NULL, 0},
};

_Static_assert(ELEMENTSOF(mig_manager_flags) <= MAX_FLAGS && ELEMENTSOF(device_plugin_flags) <= MAX_FLAGS &&
                       ELEMENTSOF(gfd_flags) <= MAX_FLAGS,
               "MAX_FLAGS");

static const struct upstream_program *find_program(const char *argv0) {
        const char *base = strrchr(argv0, '/');
        base = base ? base + 1 : argv0;
        for (size_t i = 0; i < ELEMENTSOF(programs); i++)
                if (streq(base, programs[i].name))
                        return &programs[i];
        return NULL;
}

bool cli_upstream_name(const char *argv0) {
        return find_program(argv0) != NULL;
}

/* Whether `name` (length n) is one of the comma-separated `list`. */
static bool in_list(const char *list, const char *name, size_t n) {
        for (const char *p = list; *p;) {
                size_t len = strcspn(p, ",");
                if (len == n && strncmp(p, name, n) == 0)
                        return true;
                p += len + (p[len] == ',');
        }
        return false;
}

/* The comma-separated name at `p` into buf; NULL when it does not fit. */
static const char *name_at(const char *p, char *buf, size_t size) {
        size_t len = strcspn(p, ",");
        if (len >= size)
                return NULL;
        memcpy(buf, p, len);
        buf[len] = 0;
        return buf;
}

/* The first of the comma-separated variables that is set and not empty. */
static const char *env_of(const char *envs, const char **ret_name) {
        char name[64];
        for (const char *p = envs; p && *p;) {
                const char *v = name_at(p, name, sizeof(name)) ? secure_getenv(name) : NULL;
                if (v && *v) {
                        if (ret_name)
                                *ret_name = p;
                        return v;
                }
                p += strcspn(p, ",");
                p += *p == ',';
        }
        return NULL;
}

struct argv_buf {
        char *items[MAX_ARGS + 1];
        size_t n;
        char *owned[MAX_ARGS]; /* the "--x=value" and "a,b" strings made here */
        size_t n_owned;
};

static int push(struct argv_buf *a, const char *s) {
        if (a->n >= MAX_ARGS) {
                fprintf(stderr, "Error: too many arguments (at most %d)\n", MAX_ARGS);
                return -E2BIG;
        }
        a->items[a->n++] = (char *) s;
        a->items[a->n] = NULL;
        return 0;
}

static void argv_buf_done(struct argv_buf *a) {
        for (size_t i = 0; i < a->n_owned; i++)
                free(a->owned[i]);
        a->n_owned = 0;
}

/* "<x><sep><y>", owned by `a`; NULL when out of memory or room. */
static const char *own_join(struct argv_buf *a, const char *x, const char *sep, const char *y) {
        char *s;
        if (a->n_owned >= MAX_ARGS || asprintf(&s, "%s%s%s", x, sep, y) < 0)
                return NULL;
        return a->owned[a->n_owned++] = s;
}

/* Appends "<opt>=<value>", owned by `a`. */
static int push_opt(struct argv_buf *a, const char *opt, const char *value) {
        const char *s = own_join(a, opt, "=", value);
        return s ? push(a, s) : -ENOMEM;
}

static void version(const char *name) {
        printf("%s (migkit %s)\ngit revision: %s\nbuild: %s\n", name, MK_VERSION, MK_GIT_REV, MK_BUILD_FLAGS);
}

/* -h/--help: the upstream flags `p` accepts, each with its variables and
 * what migkit does with it, then the migkit command's help (run by `run`).
 * Returns the exit code. */
static int upstream_help(const struct upstream_program *p, cli_run_fn run) {
        printf("%s: migkit's %s with upstream's flags and environment variables\n"
               "(docs/gpu-operator.md lists them and what differs; a flag wins over its variable):\n",
               p->name, p->command);
        for (size_t k = 0; k < p->n_flags; k++) {
                const struct upstream_flag *f = &p->flags[k];
                char names[96] = "";
                size_t used = 0;
                for (const char *n = f->names; *n && used < sizeof(names);) {
                        size_t len = strcspn(n, ",");
                        int w = snprintf(names + used, sizeof(names) - used, "%s%s%.*s", used ? ", " : "",
                                         len == 1 ? "-" : "--", (int) len, n);
                        used += w > 0 ? (size_t) w : 0;
                        n += len + (n[len] == ',');
                }
                printf("  %s %s%s [%s]", names, f->kind == FLAG_STRING ? "VALUE" : "true|false", f->list ? ",..." : "",
                       f->envs);
                if (f->ignored_why)
                        printf(": accepted, ignored (%s)", f->ignored_why);
                else if (f->to)
                        printf(": migkit %s %s", p->command, f->to);
                putchar('\n');
        }
        printf("  -h, --help; -v, --version\n"
               "On a simulated machine: MIGKIT_SIMULATE=MACHINE %s ..., or migkit --simulate MACHINE %s.\n\n"
               "The migkit command:\n\n",
               p->name, p->command);
        fflush(stdout);
        char *help_argv[] = {(char *) "migkit", (char *) p->command, (char *) "--help", NULL};
        return run(3, help_argv);
}

/* Whether the flag name `name` (length n) is `l` or the one-letter `s`. */
static bool is_flag(const char *name, size_t n, const char *l, char s) {
        return (n == strlen(l) && strncmp(name, l, n) == 0) || (n == 1 && name[0] == s);
}

/* One flag argv[*i] ("-name", "--name", "name=value"; the value may be the
 * next argument, then *i moves past it) into values[]. Returns as translate(). */
static int parse_flag(const struct upstream_program *p, int argc, char **argv, int *i, struct argv_buf *out,
                      const char **values) {
        const char *arg = argv[*i];
        const char *name = arg + 1 + (arg[1] == '-');
        size_t n = strcspn(name, "=");
        const char *value = name[n] == '=' ? name + n + 1 : NULL;
        if (is_flag(name, n, "help", 'h'))
                return ASKED_HELP;
        if (is_flag(name, n, "version", 'v')) {
                version(p->name);
                return 1;
        }
        const struct upstream_flag *f = NULL;
        for (size_t k = 0; k < p->n_flags && !f; k++)
                if (in_list(p->flags[k].names, name, n))
                        f = &p->flags[k];
        if (!f) {
                fprintf(stderr, "Error: flag provided but not defined: -%.*s\n", (int) n, name);
                if (n == strlen("simulate") && strncmp(name, "simulate", n) == 0)
                        fprintf(stderr, "%s takes upstream's flags only: for a simulated machine run "
                                        "migkit --simulate MACHINE %s, or set MIGKIT_SIMULATE=MACHINE\n",
                                p->name, p->command);
                fprintf(stderr, "Run '%s --help' for its flags.\n", p->name);
                return -MK_EXIT_USAGE;
        }
        if (f->kind == FLAG_STRING && !value) {
                if (*i + 1 >= argc) {
                        fprintf(stderr, "Error: flag needs an argument: %s\n", arg);
                        return -MK_EXIT_USAGE;
                }
                value = argv[++*i];
        } else if (f->kind == FLAG_BOOL) {
                bool b = true;
                if (value && mk_parse_bool(value, &b) < 0) {
                        fprintf(stderr, "Error: invalid boolean value \"%s\" for flag -%.*s\n", value, (int) n,
                                name);
                        return -MK_EXIT_USAGE;
                }
                value = b ? "true" : "false";
        }
        const char **slot = &values[f - p->flags];
        if (f->list && *slot && !(value = own_join(out, *slot, ",", value)))
                return -MK_EXIT_USAGE;
        *slot = value;
        return 0;
}

/* values[] into the migkit command line `out`: a flag given that maps to a
 * migkit option becomes it; the others (local, or ignored: logged) take
 * upstream's variables when not given. */
static int apply_values(const struct upstream_program *p, struct argv_buf *out, const char **values) {
        for (size_t k = 0; k < p->n_flags; k++) {
                const struct upstream_flag *f = &p->flags[k];
                const char *v = values[k];
                if (f->to && v) {
                        /* On the command line: it wins over the environment. */
                        if (!f->to_switch) {
                                if (push_opt(out, f->to, v) < 0)
                                        return -MK_EXIT_USAGE;
                        } else if (streq(v, "true")) {
                                if (push(out, f->to) < 0)
                                        return -MK_EXIT_USAGE;
                        } else {
                                /* --x=false: the migkit command must not read true from the variable. */
                                char env[64];
                                if (name_at(f->envs, env, sizeof(env)))
                                        (void) setenv(env, "false", 1);
                        }
                } else if (!f->to && !v) {
                        const char *var = NULL;
                        v = values[k] = env_of(f->envs, &var);
                        if (v && !f->local)
                                log_info("%s: %.*s=%s is ignored: %s", p->name, (int) strcspn(var, ","), var, v,
                                         f->ignored_why);
                } else if (!f->to && !f->local)
                        log_info("%s: --%.*s is ignored: %s", p->name, (int) strcspn(f->names, ","), f->names,
                                 f->ignored_why);
                /* f->to and not given: the migkit command reads the same variables itself. */
        }
        return 0;
}

/* Parses upstream's flags of `p` in argv[1..] into `out` (the migkit command
 * line) and values[] (the value of each flag of p->flags: from the command
 * line or, for local and ignored flags, upstream's environment variables).
 * Returns 1 when done (version printed), ASKED_HELP for -h/--help, 0 to
 * run, or an exit code as -MK_EXIT_USAGE. */
static int translate(const struct upstream_program *p, int argc, char **argv, struct argv_buf *out,
                     const char **values) {
        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                if (streq(arg, "--")) {
                        for (i++; i < argc; i++)
                                if (push(out, argv[i]) < 0)
                                        return -MK_EXIT_USAGE;
                        break;
                }
                int r;
                if (arg[0] != '-' || !arg[1])
                        r = push(out, arg) < 0 ? -MK_EXIT_USAGE : 0;
                else
                        r = parse_flag(p, argc, argv, &i, out, values);
                if (r != 0)
                        return r;
        }
        return apply_values(p, out, values);
}

/* One labelling: `migkit labels` with stdout on `output` (caught in memory,
 * then written with mk_write_file_atomic()) or on stdout when output is
 * empty. */
static int gfd_label(struct argv_buf *cmd, const char *output, cli_run_fn run) {
        char *argv[MAX_ARGS + 1];
        memcpy(argv, cmd->items, sizeof(char *) * (cmd->n + 1));
        if (!*output) {
                int r = run((int) cmd->n, argv);
                fflush(stdout);
                return r;
        }
        _cleanup_close_ int fd = memfd_create("gfd-labels", MFD_CLOEXEC);
        fflush(stdout);
        _cleanup_close_ int saved = fd < 0 ? -1 : dup(STDOUT_FILENO);
        if (saved < 0 || dup2(fd, STDOUT_FILENO) < 0) {
                log_error("gpu-feature-discovery: cannot redirect the labels: %m");
                return MK_EXIT_FAILURE;
        }
        int r = run((int) cmd->n, argv);
        bool flushed = fflush(stdout) == 0;
        (void) dup2(saved, STDOUT_FILENO);
        if (r != MK_EXIT_OK || !flushed)
                return r != MK_EXIT_OK ? r : MK_EXIT_FAILURE;
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        struct mk_error e = {0};
        if (lseek(fd, 0, SEEK_SET) < 0)
                mk_error_set(&e, negative_errno(), "Cannot read the labels back: %s", strerror(errno));
        else if (mk_read_fd(fd, "the labels", MAX_LABELS_BYTES, &data, &len, &e) >= 0 &&
                 mk_write_file_atomic(output, data, len, 0644, &e) >= 0)
                return MK_EXIT_OK;
        log_error("gpu-feature-discovery: cannot write '%s': %s", output, mk_error_format(&e, buf, sizeof(buf)));
        return MK_EXIT_FAILURE;
}

#define GFD_DEFAULT_OUTPUT "/etc/kubernetes/node-feature-discovery/features.d/gfd"

static int gfd_main(const struct upstream_program *p, struct argv_buf *cmd, const char **values, cli_run_fn run) {
        bool fail_on_init = true, oneshot = false, nfd_api = false;
        const char *output = values[GFD_OUTPUT] ? values[GFD_OUTPUT] : GFD_DEFAULT_OUTPUT;
        uint64_t sleep_ms = 60 * 1000;
        if ((values[GFD_FAIL_ON_INIT] && mk_parse_bool(values[GFD_FAIL_ON_INIT], &fail_on_init) < 0) ||
            (values[GFD_ONESHOT] && mk_parse_bool(values[GFD_ONESHOT], &oneshot) < 0) ||
            (values[GFD_NFD_API] && mk_parse_bool(values[GFD_NFD_API], &nfd_api) < 0)) {
                fprintf(stderr, "Error: invalid boolean in GFD_FAIL_ON_INIT_ERROR, GFD_ONESHOT or "
                                "GFD_USE_NODE_FEATURE_API\n");
                return MK_EXIT_USAGE;
        }
        if (values[GFD_SLEEP] && (mk_parse_duration_ms(values[GFD_SLEEP], &sleep_ms) < 0 || sleep_ms == 0)) {
                fprintf(stderr, "Error: invalid --sleep-interval '%s' (a duration like 60s or 1m)\n",
                        values[GFD_SLEEP]);
                return MK_EXIT_USAGE;
        }
        if (nfd_api) {
                fprintf(stderr, "Error: --use-node-feature-api (NodeFeature objects) is not supported; "
                                "labels go to --output-file for NFD's local source\n");
                return MK_EXIT_USAGE;
        }
        const char *disc = values[GFD_DISCOVERY];
        if (disc && !streq(disc, "auto") && !streq(disc, "nvml")) {
                fprintf(stderr, "Error: invalid --device-discovery-strategy option %s (auto or nvml)\n", disc);
                return MK_EXIT_USAGE;
        }

        if (oneshot)
                return gfd_label(cmd, output, run);

        /* The signals stay blocked and are taken with sigtimedwait() while
         * sleeping, so one that comes during a labelling is not lost. */
        sigset_t mask;
        sigemptyset(&mask);
        int sigs[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT};
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
                sigaddset(&mask, sigs[i]);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
                log_error("%s: cannot block signals: %m", p->name);
                return MK_EXIT_FAILURE;
        }
        for (bool first = true;; first = false) {
                int r = gfd_label(cmd, output, run);
                if (r != MK_EXIT_OK && first && fail_on_init)
                        return r;
                if (r != MK_EXIT_OK)
                        log_error("%s: labelling failed, retrying in %" PRIu64 " ms", p->name, sleep_ms);
                log_debug("%s: sleeping for %" PRIu64 " ms", p->name, sleep_ms);
                struct timespec ts = {.tv_sec = (time_t) (sleep_ms / 1000),
                                      .tv_nsec = (long) (sleep_ms % 1000) * 1000000L};
                int sig;
                while ((sig = sigtimedwait(&mask, NULL, &ts)) < 0 && errno == EINTR)
                        ;
                if (sig < 0)
                        continue; /* EAGAIN: the interval passed */
                if (sig == SIGHUP) {
                        log_info("%s: received SIGHUP, relabelling", p->name);
                        continue;
                }
                log_info("%s: received signal %d, shutting down", p->name, sig);
                if (*output && unlink(output) < 0 && errno != ENOENT)
                        log_warning("%s: cannot remove '%s': %m", p->name, output);
                return MK_EXIT_OK;
        }
}

int cli_upstream_main(int argc, char **argv, cli_run_fn run) {
        const struct upstream_program *p = find_program(argv[0]);
        if (!p)
                return MK_EXIT_USAGE;
        const char *dbg = secure_getenv("MIG_PARTED_DEBUG");
        if (dbg && (streq(dbg, "1") || strcasecmp(dbg, "true") == 0))
                mk_log_set_level(MK_LOG_DEBUG);

        _cleanup_(argv_buf_done) struct argv_buf out = {};
        (void) push(&out, argv[0]); /* kept: the process is found by it (main.c, exec_command()) */
        if (!p->flags) {
                /* nvidia-mig-parted: the same global options and commands as
                 * migkit (apply, assert, export, ...); `version` is --version.
                 * config-manager: the command takes upstream's flags. */
                if (p->command && push(&out, p->command) < 0)
                        return MK_EXIT_USAGE;
                for (int i = 1; i < argc; i++)
                        if (push(&out, i == 1 && streq(argv[i], "version") ? "--version" : argv[i]) < 0)
                                return MK_EXIT_USAGE;
                return run((int) out.n, out.items);
        }

        /* MIGKIT_SIMULATE: run against the simulator, as --simulate. */
        const char *sim = secure_getenv("MIGKIT_SIMULATE");
        if (sim && *sim && push_opt(&out, "--simulate", sim) < 0)
                return MK_EXIT_FAILURE;
        if (push(&out, p->command) < 0)
                return MK_EXIT_USAGE;
        const char *values[MAX_FLAGS] = {};
        int r = translate(p, argc, argv, &out, values);
        if (r == ASKED_HELP)
                return upstream_help(p, run);
        if (r != 0)
                return r > 0 ? MK_EXIT_OK : -r;
        if (p->flags == gfd_flags)
                return gfd_main(p, &out, values, run);
        return run((int) out.n, out.items);
}
