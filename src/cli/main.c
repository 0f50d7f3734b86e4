#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "version.h"

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
               "MIGKIT_SIM_STATE (simulator state file with --simulate).\n"
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

static bool file_exists(const char *p) {
        struct stat st;
        return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Points NVML at the simulator library and a per-machine state file. The
 * simulator reads its configuration from the environment only. */
static int setup_simulation(const char *machine) {
        if (!*machine || strlen(machine) > 200) {
                log_error("Invalid simulated machine name '%s'", machine);
                return -EINVAL;
        }
        char dir[PATH_MAX], lib[PATH_MAX + 64] = "";
        const char *env_lib = secure_getenv("MIGKIT_SIM_LIB");
        if (env_lib && *env_lib)
                snprintf(lib, sizeof(lib), "%s", env_lib);
        else if (exe_dir(dir, sizeof(dir)) >= 0) {
                static const char *const candidates[] = {
                        "/sim/lib/libnvidia-ml.so.1",           /* build tree */
                        "/../lib/migkit/sim/libnvidia-ml.so.1", /* installed */
                };
                for (size_t i = 0; i < ELEMENTSOF(candidates) && !*lib; i++) {
                        char p[PATH_MAX + 64];
                        int n = snprintf(p, sizeof(p), "%s%s", dir, candidates[i]);
                        if (n > 0 && (size_t) n < sizeof(p) && file_exists(p))
                                memcpy(lib, p, (size_t) n + 1);
                }
        }
        if (!*lib) {
                log_error("Cannot find the NVML simulator library (libnvidia-ml.so.1 of migkit's sim/); "
                          "set MIGKIT_SIM_LIB to its path");
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
        if (setenv("MIGKIT_NVML_LIB", lib, 1) < 0 || setenv("MIGKIT_SIM_STATE", state, 1) < 0 ||
            setenv("MIGKIT_SIM_MACHINE", machine, 1) < 0)
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
        log_debug("Simulating '%s' with '%s', state in '%s'", machine, lib, state);
        return 0;
}

int main(int argc, char **argv) {
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
        while ((c = getopt_long(argc, argv, "+dqhv", options, NULL)) >= 0) {
                switch (c) {
                case ARG_SIMULATE:
                        simulate = optarg;
                        break;
                case 'd':
                        mk_log_set_level(MK_LOG_DEBUG);
                        break;
                case ARG_DEBUG_AREAS:
                        if (mk_log_parse_debug(optarg) < 0) {
                                fprintf(stderr, "Error: invalid --debug-areas '%s'\n", optarg);
                                return MK_EXIT_USAGE;
                        }
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
        if (optind >= argc) {
                help();
                return MK_EXIT_USAGE;
        }
        if (simulate && setup_simulation(simulate) < 0)
                return MK_EXIT_FAILURE;

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
        };
        const char *cmd = argv[optind];
        if (streq(cmd, "help")) {
                help();
                return MK_EXIT_OK;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(cmd, commands[i].name)) {
                        int sub_argc = argc - optind;
                        char **sub_argv = argv + optind;
                        optind = 0; /* GNU getopt: re-initialise for the subcommand */
                        return commands[i].run(sub_argc, sub_argv);
                }
        fprintf(stderr, "Error: unknown command '%s'. Run 'migkit --help' for usage.\n", cmd);
        return MK_EXIT_USAGE;
}
