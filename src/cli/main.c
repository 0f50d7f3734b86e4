#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/upstream.h"
#include "version.h"

/* Where the daemon executables are installed, relative to the directory of
 * `migkit` (CMakeLists.txt, MIGKIT_LIBEXEC_DIR). */
#ifndef MK_LIBEXEC_REL
#define MK_LIBEXEC_REL "../lib/migkit"
#endif

/* Every command is a weak reference: `migkit` links the node commands, and
 * each daemon executable (migkit-manager, migkit-device-plugin,
 * migkit-scheduler, migkit-config-manager) links its own command, so that `migkit --version` and
 * `migkit apply` never load gRPC, libcurl or libmicrohttpd. A command whose
 * code is not linked in runs in migkit-<command> (exec_command()). */
#pragma weak cli_profiles
#pragma weak cli_export
#pragma weak cli_generate_config
#pragma weak cli_apply
#pragma weak cli_assert
#pragma weak cli_plan
#pragma weak cli_service
#pragma weak cli_manager
#pragma weak cli_labels
#pragma weak cli_device_plugin
#pragma weak cli_scheduler
#pragma weak cli_config_manager

static void help(void) {
        printf("Usage: migkit [GLOBAL OPTIONS] COMMAND [OPTIONS]\n"
               "\n"
               "Partition NVIDIA GPUs with MIG, declaratively.\n"
               "\n"
               "Commands:\n"
               "  profiles              GPU and compute instance profiles each GPU reports\n"
               "  export                Current MIG layout as a mig-parted v1 config\n"
               "  generate-config       A mig-parted v1 config from the profiles the GPUs report\n"
               "  apply                 Apply a MIG configuration (mig-parted v1 config and hooks)\n"
               "  assert                Check that a MIG configuration is applied\n"
               "  plan                  Show what apply would do, without doing it\n"
               "  service               Node service: boot-time apply, selection, reboot marker\n"
               "  manager               Kubernetes MIG manager: follow the node's nvidia.com/mig.config label\n"
               "  labels                GPU feature discovery labels of this node (key=value)\n"
               "  device-plugin         Kubernetes device plugin (kubelet v1beta1 API) for GPUs and MIG devices\n"
               "  scheduler             kube-scheduler extender: dynamic MIG placement for gpumem requests\n"
               "  config-manager        Link the device plugin config a node label selects (GPU Operator)\n"
               "\n"
               "Global options:\n"
               "  --simulate MACHINE    Run against the NVML simulator, on a simulated MACHINE\n"
               "                        (dgx-a100, dgx-h100, hgx-h200, dgx-b200, mixed-a100, h100-nvl-pairs,\n"
               "                        h100-80gb, ..., or a list like 'a100-40gb*4,h100-80gb*4')\n"
               "                        with a state file of its own that persists between runs\n"
               "  -d, --debug           Debug logging (env MIG_PARTED_DEBUG)\n"
               "      --debug-areas L   Debug logging for areas only: nvml,spawn,... or all\n"
               "  -q, --quiet           Only errors on stderr\n"
               "  -h, --help            This help\n"
               "  -v, --version         Version, git revision and build type\n"
               "\n"
               "Environment: MIGKIT_NVML_LIB (NVML library to load, default libnvidia-ml.so.1),\n"
               "MIGKIT_SIM_STATE (simulator state file with --simulate), MIGKIT_LIBEXEC_DIR (where\n"
               "migkit-manager, migkit-device-plugin, ... are, default: next to\n"
               "migkit, then " MK_LIBEXEC_REL " from it).\n"
               "Run 'migkit COMMAND --help' for the options of a command.\n");
}

/* Directory of the running executable, for finding the simulator next to it. */
static int exe_dir(char *buf, size_t size) {
        ssize_t n = readlink("/proc/self/exe", buf, size - 1);
        if (n <= 0 || (size_t) n >= size - 1)
                return -ENAMETOOLONG;
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        if (!slash)
                return -EINVAL;
        *slash = 0;
        return 0;
}

/* Replaces this process with migkit-<cmd>, found next to this executable
 * (the build tree) or in MK_LIBEXEC_REL from it (installed), or in
 * $MIGKIT_LIBEXEC_DIR; argv is passed on whole (global options, command and
 * its options). argv[0] becomes the executable's path, but a GPU Operator
 * name stays (upstream's config-manager finds the process to signal by it);
 * MIGKIT_EXEC_COMMAND tells the executable that argv is migkit's already.
 * Returns only on failure. */
static int exec_command(const char *cmd, char **argv) {
        char dir[PATH_MAX], path[PATH_MAX + 64];
        const char *env_dir = secure_getenv("MIGKIT_LIBEXEC_DIR");
        int r = exe_dir(dir, sizeof(dir));
        if (r < 0) {
                fprintf(stderr, "Error: cannot find the directory of this executable: %s\n", strerror(-r));
                return MK_EXIT_FAILURE;
        }
        char rel[PATH_MAX + 32];
        int n = snprintf(rel, sizeof(rel), "%s/%s", dir, MK_LIBEXEC_REL);
        const char *const dirs[] = {env_dir && *env_dir ? env_dir : NULL, dir,
                                    n > 0 && (size_t) n < sizeof(rel) ? rel : NULL};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                if (!dirs[i])
                        continue;
                n = snprintf(path, sizeof(path), "%s/migkit-%s", dirs[i], cmd);
                if (n < 0 || (size_t) n >= sizeof(path) || access(path, X_OK) < 0)
                        continue;
                if (!cli_upstream_name(argv[0]))
                        argv[0] = path;
                if (setenv("MIGKIT_EXEC_COMMAND", cmd, 1) < 0)
                        return MK_EXIT_FAILURE;
                execv(path, argv);
                fprintf(stderr, "Error: cannot run '%s': %m\n", path);
                return MK_EXIT_FAILURE;
        }
        fprintf(stderr,
                "Error: 'migkit %s' runs in the executable migkit-%s, found neither in '%s' nor in '%s/%s'"
                " (set MIGKIT_LIBEXEC_DIR to its directory)\n",
                cmd, cmd, dir, dir, MK_LIBEXEC_REL);
        return MK_EXIT_FAILURE;
}

static bool file_exists(const char *p) {
        struct stat st;
        return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Before NVML is loaded: a state file of another machine is refused (an
 * exported MIGKIT_SIM_STATE outlives the --simulate it was made for), and a
 * missing one is made now by the simulator's control API, so a machine name it
 * does not know is one clear error, not an NVML initialisation failure after it. */
static int sim_prepare(const char *lib, const char *state, const char *machine, bool from_env) {
        struct stat st;
        if (stat(state, &st) == 0) {
                if (!from_env)
                        return 0;
                json_error_t je;
                json_t *j = json_load_file(state, 0, &je);
                const char *had = json_string_value(json_object_get(j, "machine"));
                int r = 0;
                if (had && !streq(had, machine)) {
                        fprintf(stderr,
                                "Error: --simulate %s, but the state file '%s' (MIGKIT_SIM_STATE) holds a simulated "
                                "'%s': unset MIGKIT_SIM_STATE, or use --simulate %s\n",
                                machine, state, had, had);
                        r = -EEXIST;
                }
                json_decref(j);
                return r;
        }
        void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!dl)
                return 0; /* loading NVML reports it */
        int (*create)(const char *, unsigned) = NULL;
        const char *(*last_error)(void) = NULL;
        void *sym = dlsym(dl, "mksim_create_machine");
        memcpy(&create, &sym, sizeof(sym));
        sym = dlsym(dl, "mksim_last_error");
        memcpy(&last_error, &sym, sizeof(sym));
        int r = create && last_error ? create(machine, 0) : 0;
        if (r < 0 && r != -EEXIST)
                fprintf(stderr, "Error: --simulate %s: %s\n", machine, last_error());
        (void) dlclose(dl);
        return r == -EEXIST ? 0 : r;
}

/* The NVML simulator library: $MIGKIT_SIM_LIB, or beside this executable
 * (build tree or installed); "" when there is none. */
static void find_sim_lib(char *lib, size_t size) {
        char dir[PATH_MAX];
        const char *env_lib = secure_getenv("MIGKIT_SIM_LIB");
        *lib = 0;
        if (env_lib && *env_lib)
                snprintf(lib, size, "%s", env_lib);
        else if (exe_dir(dir, sizeof(dir)) >= 0) {
                static const char *const candidates[] = {
                        "/sim/lib/libnvidia-ml.so.1",           /* build tree */
                        "/../lib/migkit/sim/libnvidia-ml.so.1", /* installed */
                        "/sim/libnvidia-ml.so.1",               /* a daemon executable, installed */
                };
                for (size_t i = 0; i < ELEMENTSOF(candidates) && !*lib; i++) {
                        char p[PATH_MAX + 64];
                        int n = snprintf(p, sizeof(p), "%s%s", dir, candidates[i]);
                        if (n > 0 && (size_t) n < sizeof(p) && (size_t) n < size && file_exists(p))
                                memcpy(lib, p, (size_t) n + 1);
                }
        }
}

/* "dgx-a100, dgx-h100, ..." to stderr: the simulator's catalog machines
 * (the help's short list when the library cannot be loaded). */
static void print_machines(void) {
        char lib[PATH_MAX + 64];
        find_sim_lib(lib, sizeof(lib));
        void *dl = *lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
        int (*machine_at)(size_t, const char **, const char **) = NULL;
        void *sym = dl ? dlsym(dl, "mksim_catalog_machine") : NULL;
        memcpy(&machine_at, &sym, sizeof(sym));
        const char *name = NULL;
        if (!machine_at || machine_at(0, &name, NULL) < 0)
                fputs("dgx-a100, dgx-h100, hgx-h200, dgx-b200, mixed-a100, ...", stderr);
        else
                for (size_t i = 0; machine_at(i, &name, NULL) >= 0; i++)
                        fprintf(stderr, "%s%s", i ? ", " : "", name);
        if (dl)
                (void) dlclose(dl);
}

/* Points NVML at the simulator library and a per-machine state file. The
 * simulator reads its configuration from the environment only. */
static int setup_simulation(const char *machine) {
        if (!*machine || strlen(machine) > 200) {
                log_error("Invalid simulated machine name '%s'", machine);
                return -EINVAL;
        }
        char lib[PATH_MAX + 64] = "";
        find_sim_lib(lib, sizeof(lib));
        if (!*lib) {
                /* Installed from the .deb: the simulator is the package migkit-sim. */
                log_error("Cannot find the NVML simulator library for --simulate: install the package "
                          "migkit-sim (apt install migkit-sim), or set MIGKIT_SIM_LIB to the path of "
                          "the simulator's libnvidia-ml.so.1");
                return -ENOENT;
        }

        /* State file: one per machine, persisting between runs. */
        char state[PATH_MAX];
        const char *env_state = secure_getenv("MIGKIT_SIM_STATE");
        if (env_state && *env_state)
                snprintf(state, sizeof(state), "%s", env_state);
        else {
                char safe[256];
                size_t k = 0;
                for (const char *p = machine; *p && k < sizeof(safe) - 1; p++)
                        safe[k++] = (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", *p))
                                            ? *p
                                            : '_';
                safe[k] = 0;
                const char *xdg = secure_getenv("XDG_STATE_HOME"), *home = secure_getenv("HOME");
                char base[PATH_MAX];
                if (xdg && *xdg == '/')
                        snprintf(base, sizeof(base), "%s/migkit", xdg);
                else if (home && *home == '/')
                        snprintf(base, sizeof(base), "%s/.local/state/migkit", home);
                else
                        snprintf(base, sizeof(base), "/tmp/migkit-%u", (unsigned) getuid());
                /* mkdir -p of the two or three levels below an existing root. */
                char tmp[PATH_MAX + 8];
                int m = snprintf(tmp, sizeof(tmp), "%s/sim", base);
                if (m < 0 || (size_t) m >= sizeof(tmp))
                        return -ENAMETOOLONG;
                for (char *p = tmp + 1; *p; p++)
                        if (*p == '/') {
                                *p = 0;
                                (void) mkdir(tmp, 0700);
                                *p = '/';
                        }
                if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
                        log_error("Cannot create the simulator state directory '%s': %m", tmp);
                        return -errno;
                }
                int n = snprintf(state, sizeof(state), "%s/%s.json", tmp, safe);
                if (n < 0 || (size_t) n >= sizeof(state))
                        return -ENAMETOOLONG;
        }
        /* MIGKIT_SIM_LIB and MIGKIT_SIM_STATE: a daemon executable this one
         * runs (exec_command()) simulates the same machine with the same state. */
        if (setenv("MIGKIT_NVML_LIB", lib, 1) < 0 || setenv("MIGKIT_SIM_LIB", lib, 1) < 0 ||
            setenv("MIGKIT_SIM_STATE", state, 1) < 0 || setenv("MIGKIT_SIM_MACHINE", machine, 1) < 0)
                return -errno;
        /* GPU resets go through the simulator's nvidia-smi stand-in, found
         * beside the library: <lib dir>/../bin/nvidia-smi. */
        const char *env_smi = secure_getenv("MIGKIT_NVIDIA_SMI");
        if (!env_smi || !*env_smi) {
                char smi[PATH_MAX + 64];
                const char *slash = strrchr(lib, '/');
                int n = slash ? snprintf(smi, sizeof(smi), "%.*s/../bin/nvidia-smi", (int) (slash - lib), lib) : -1;
                if (n > 0 && (size_t) n < sizeof(smi) && access(smi, X_OK) == 0 && setenv("MIGKIT_NVIDIA_SMI", smi, 1) < 0)
                        return -errno;
        }
        /* The simulated machine's host tree (sysfs PCI entries, mig-minors,
         * written by the simulator beside its state: docs/simulator.md) stands
         * in for /sys and /proc, and its run/ for /run (the host lock of
         * base/hostlock.h: one per simulated machine), unless the caller
         * chose other roots. */
        static const struct {
                const char *var, *sub;
        } roots[] = {{"MIGKIT_SYSFS_ROOT", "sys"}, {"MIGKIT_PROC_ROOT", "proc"}, {"MIGKIT_RUN_ROOT", "run"}};
        for (size_t i = 0; i < ELEMENTSOF(roots); i++) {
                const char *cur = secure_getenv(roots[i].var);
                char root[PATH_MAX + 16];
                int n = snprintf(root, sizeof(root), "%s.host/%s", state, roots[i].sub);
                if ((!cur || !*cur) && n > 0 && (size_t) n < sizeof(root) && setenv(roots[i].var, root, 1) < 0)
                        return -errno;
        }
        log_debug("Simulating '%s' with '%s', state in '%s'", machine, lib, state);
        return sim_prepare(lib, state, machine, env_state && *env_state);
}

static int set_debug_areas(const char *areas) {
        char bad[64] = "";
        if (mk_log_check_areas(areas, bad, sizeof(bad)) == -ENOENT) {
                fprintf(stderr, "Error: invalid --debug-areas '%s': unknown area '%s' (known: %s)\n", areas, bad,
                        mk_log_known_areas());
                return -ENOENT;
        }
        if (mk_log_parse_debug(areas) < 0) {
                fprintf(stderr, "Error: invalid --debug-areas '%s'\n", areas);
                return -EINVAL;
        }
        return 0;
}

/* The global options a user puts after the command (`migkit profiles
 * --simulate X`): no command has options of these names, so they are moved
 * before the command (up to a "--"), where a daemon command run through
 * exec_command() finds them too, and applied. argv[0] is the command; *ret_moved
 * is how many arguments now stand before it. */
static int take_global_options(int argc, char **argv, const char **simulate, int *ret_moved) {
        char *moved[argc > 0 ? argc : 1], *rest[argc > 0 ? argc : 1];
        int n_moved = 0, n_rest = 0;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = NULL;
                if (streq(a, "--")) {
                        while (i < argc)
                                rest[n_rest++] = argv[i++];
                        break;
                }
                bool sim = streq(a, "--simulate") || strncmp(a, "--simulate=", 11) == 0;
                bool areas = streq(a, "--debug-areas") || strncmp(a, "--debug-areas=", 14) == 0;
                if (!sim && !areas) {
                        rest[n_rest++] = argv[i];
                        continue;
                }
                moved[n_moved++] = argv[i];
                const char *eq = strchr(a, '=');
                if (eq)
                        v = eq + 1;
                else if (i + 1 < argc)
                        v = moved[n_moved++] = argv[++i];
                else {
                        fprintf(stderr, "Error: option '%s' requires an argument\n", a);
                        return -EINVAL;
                }
                if (sim)
                        *simulate = v;
                else if (set_debug_areas(v) < 0)
                        return -EINVAL;
        }
        char *cmd = argv[0];
        memcpy(argv, moved, n_moved * sizeof(char *));
        argv[n_moved] = cmd;
        memcpy(argv + n_moved + 1, rest, n_rest * sizeof(char *));
        *ret_moved = n_moved;
        return 0;
}

static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
} commands[] = {
        {"profiles", cli_profiles},
        {"export", cli_export},
        {"generate-config", cli_generate_config},
        {"apply", cli_apply},
        {"assert", cli_assert},
        {"plan", cli_plan},
        {"service", cli_service},
        {"manager", cli_manager},
        {"labels", cli_labels},
        {"device-plugin", cli_device_plugin},
        {"scheduler", cli_scheduler},
        {"config-manager", cli_config_manager},
};

/* `migkit --simulate profiles`: the command taken for the machine. Says so
 * (with the machines) and returns true. */
static bool simulate_names_command(const char *simulate) {
        for (size_t i = 0; i <= ELEMENTSOF(commands); i++)
                if (i == ELEMENTSOF(commands) ? streq(simulate, "help") : streq(simulate, commands[i].name)) {
                        fprintf(stderr,
                                "Error: --simulate takes a machine, and '%s' is a command: "
                                "migkit --simulate MACHINE %s ...\nMachines: ",
                                simulate, simulate);
                        print_machines();
                        fputs(" (or a list of models like 'a100-40gb*4,h100-80gb*4').\n", stderr);
                        return true;
                }
        return false;
}

/* The whole `migkit [GLOBAL OPTIONS] COMMAND [OPTIONS]` command line; also
 * the runner upstream.c hands its translated command lines to. */
static int cli_main(int argc, char **argv) {
        enum { ARG_SIMULATE = 0x100, ARG_DEBUG_AREAS };
        static const struct option options[] = {
                {"simulate", required_argument, NULL, ARG_SIMULATE},
                {"debug", no_argument, NULL, 'd'},
                {"debug-areas", required_argument, NULL, ARG_DEBUG_AREAS},
                {"quiet", no_argument, NULL, 'q'},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, 'v'},
                {},
        };
        const char *simulate = NULL;
        const char *dbg = secure_getenv("MIG_PARTED_DEBUG");
        if (dbg && (streq(dbg, "1") || strcasecmp(dbg, "true") == 0))
                mk_log_set_level(MK_LOG_DEBUG);

        int c;
        optind = 0; /* GNU getopt: cli_main() may run more than once (gpu-feature-discovery) */
        while ((c = getopt_long(argc, argv, "+dqhv", options, NULL)) >= 0) {
                switch (c) {
                case ARG_SIMULATE:
                        simulate = optarg;
                        break;
                case 'd':
                        mk_log_set_level(MK_LOG_DEBUG);
                        break;
                case ARG_DEBUG_AREAS:
                        if (set_debug_areas(optarg) < 0)
                                return MK_EXIT_USAGE;
                        break;
                case 'q':
                        mk_log_set_level(MK_LOG_ERROR);
                        break;
                case 'h':
                        help();
                        return MK_EXIT_OK;
                case 'v':
                        printf("migkit %s\ngit revision: %s\nbuild: %s\n", MK_VERSION, MK_GIT_REV, MK_BUILD_FLAGS);
                        return MK_EXIT_OK;
                default:
                        fprintf(stderr, "Run 'migkit --help' for usage.\n");
                        return MK_EXIT_USAGE;
                }
        }
        if (simulate && simulate_names_command(simulate))
                return MK_EXIT_USAGE;
        if (optind >= argc) {
                if (simulate) {
                        fprintf(stderr, "Error: no command after --simulate %s: migkit --simulate %s profiles, for "
                                        "example. Run 'migkit --help' for the commands.\n",
                                simulate, simulate);
                        return MK_EXIT_USAGE;
                }
                help();
                return MK_EXIT_USAGE;
        }
        const char *cmd = argv[optind];
        cli_command_name = cmd;
        if (streq(cmd, "help")) {
                help();
                return MK_EXIT_OK;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(cmd, commands[i].name)) {
                        int moved = 0;
                        if (take_global_options(argc - optind, argv + optind, &simulate, &moved) < 0)
                                return MK_EXIT_USAGE;
                        int sub_argc = argc - optind - moved;
                        char **sub_argv = argv + optind + moved;
                        if (simulate && setup_simulation(simulate) < 0)
                                return MK_EXIT_FAILURE;
                        if (!commands[i].run)
                                return exec_command(cmd, argv);
                        optind = 0; /* GNU getopt: re-initialise for the subcommand */
                        return commands[i].run(sub_argc, sub_argv);
                }
        fprintf(stderr, "Error: unknown command '%s'. Run 'migkit --help' for usage.\n", cmd);
        return MK_EXIT_USAGE;
}

int main(int argc, char **argv) {
        /* Run by exec_command(): a migkit command line, whatever argv[0] is. */
        if (secure_getenv("MIGKIT_EXEC_COMMAND")) {
                (void) unsetenv("MIGKIT_EXEC_COMMAND");
                return cli_main(argc, argv);
        }
        if (argc > 0 && cli_upstream_name(argv[0]))
                return cli_upstream_main(argc, argv, cli_main);
        return cli_main(argc, argv);
}
