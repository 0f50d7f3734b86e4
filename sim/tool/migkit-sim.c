/* migkit-sim: drives the NVML simulator's machine (create it, look at it,
 * add processes, raise Xid events, arm faults, reset GPUs, reboot).
 * Everything goes through the control API in mksim.h; the state file is
 * $MIGKIT_SIM_STATE (or --state FILE). Exit status: 0 success, 1 failure,
 * 2 usage error. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mksim.h"

#define EXIT_USAGE 2

static const char usage_text[] =
        "Usage: migkit-sim [--state FILE] COMMAND [ARGS]\n"
        "\n"
        "Drive the simulated machine behind the NVML simulator (libnvidia-ml.so.1).\n"
        "\n"
        "Commands:\n"
        "  create MACHINE [--force]      create the machine (a catalog name, a list such as\n"
        "                                'a100-40gb*4,h100-80gb*2,t4', or a JSON file path)\n"
        "  show [--json]                 GPUs, MIG modes, instances, MIG UUIDs, processes\n"
        "  host-root                     print the simulated host tree (sysfs PCI entries,\n"
        "                                /proc/driver/nvidia-caps/mig-minors) of the machine\n"
        "  machines                      list the catalog machines\n"
        "  models                        list the catalog GPU models\n"
        "  process add --gpu I [--gi ID --ci ID] [--pid P] [--memory MIB]\n"
        "                                start a (fake) process on a GPU or MIG device\n"
        "  process remove [--pid] P      end a process\n"
        "  xid --gpu I [--gi ID --ci ID] XID\n"
        "                                raise an Xid event\n"
        "  fault set FUNCTION N ERROR    make the N-th next call of an NVML function fail\n"
        "                                with ERROR (IN_USE, NVML_ERROR_IN_USE or 19)\n"
        "  fault crash-after N           exit(137) after the N-th next mutating NVML call\n"
        "  fault clear                   disarm all faults\n"
        "  reset --gpu I[,J...]          reset GPUs (applies pending MIG mode, destroys instances)\n"
        "  reboot                        reboot the machine (lost GPUs come back)\n"
        "  lose --gpu I                  the GPU falls off the bus: NVML calls on it return\n"
        "                                NVML_ERROR_GPU_IS_LOST\n"
        "  recover --gpu I               the lost GPU answers again\n"
        "  cuda-processes [--window MS]  processes of the CUDA driver simulator (libcuda.so.1):\n"
        "                                memory held and SM utilisation over the last MS (1000)\n"
        "\n"
        "Options:\n"
        "  --state FILE                  state file (default: $MIGKIT_SIM_STATE,\n"
        "                                $XDG_RUNTIME_DIR/migkit-sim-state.json, /tmp/migkit-sim-UID.json)\n"
        "  -h, --help                    show this help\n"
        "\n"
        "Environment: MIGKIT_SIM_STATE, MIGKIT_SIM_MACHINE (machine created on first use,\n"
        "default dgx-a100), MIGKIT_SIM_FAULTS. See docs/simulator.md.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
        va_list ap;

        fputs("migkit-sim: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'migkit-sim --help'.\n", stderr);
        return EXIT_USAGE;
}

static int fail(int r, const char *what) {
        const char *msg = mksim_last_error();
        if (msg && *msg)
                fprintf(stderr, "migkit-sim: %s\n", msg);
        else
                fprintf(stderr, "migkit-sim: %s: %s\n", what, strerror(-r));
        return EXIT_FAILURE;
}

/* A whole decimal string that fits in unsigned (or unsigned long long). */
static bool parse_ull(const char *s, unsigned long long max, unsigned long long *ret) {
        if (!s || !*s)
                return false;
        for (const char *p = s; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return false;
        errno = 0;
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || !end || *end || v > max)
                return false;
        *ret = v;
        return true;
}

static bool parse_uint(const char *s, unsigned *ret) {
        unsigned long long v;
        if (!parse_ull(s, UINT_MAX - 1, &v))
                return false;
        *ret = (unsigned) v;
        return true;
}

/* ---- show ---- */

static unsigned long long ju(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_integer(v) ? (unsigned long long) json_integer_value(v) : 0;
}

static const char *js(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_string(v) ? json_string_value(v) : "?";
}

static const char *mode_name(unsigned long long m) {
        return m ? "Enabled" : "Disabled";
}

static void show_process(json_t *p, const char *indent) {
        json_t *gi = json_object_get(p, "gi");
        printf("%spid %-8llu %8llu MiB", indent, ju(p, "pid"), ju(p, "used_mib"));
        if (json_is_integer(gi))
                printf("  GI %llu CI %llu\n", ju(p, "gi"), ju(p, "ci"));
        else
                printf("  whole GPU\n");
}

static int show_human(const char *text) {
        json_error_t err;
        json_t *root = json_loads(text, 0, &err);
        size_t i, j, k;
        json_t *g, *gi, *ci, *x;

        if (!root) {
                fprintf(stderr, "migkit-sim: cannot parse the state description: %s\n", err.text);
                return EXIT_FAILURE;
        }
        printf("Machine: %s (state %s)\n", js(root, "machine"), mksim_state_path());
        json_array_foreach(json_object_get(root, "gpus"), i, g) {
                printf("GPU %zu: %s (UUID: %s)%s\n", i, js(g, "name"), js(g, "uuid"),
                       json_is_true(json_object_get(g, "lost")) ? " LOST (fallen off the bus)" : "");
                printf("  Bus %s, %llu MiB, ", js(g, "bus_id"), ju(g, "memory_mib"));
                if (json_is_true(json_object_get(g, "mig_capable")))
                        printf("MIG current %s, pending %s\n", mode_name(ju(g, "mig_current")),
                               mode_name(ju(g, "mig_pending")));
                else
                        printf("MIG not supported\n");
                json_array_foreach(json_object_get(g, "gpu_instances"), j, gi) {
                        printf("  GI %-2llu %-14s profile %-2llu placement %llu:%llu\n", ju(gi, "id"),
                               js(gi, "profile_name"), ju(gi, "profile_id"), ju(gi, "start"), ju(gi, "size"));
                        json_array_foreach(json_object_get(gi, "compute_instances"), k, ci)
                                printf("    CI %-2llu %-14s placement %llu:%llu  %s\n", ju(ci, "id"),
                                       js(ci, "profile_name"), ju(ci, "start"), ju(ci, "size"), js(ci, "uuid"));
                }
                if (json_array_size(json_object_get(g, "processes")) > 0) {
                        printf("  Processes:\n");
                        json_array_foreach(json_object_get(g, "processes"), j, x)
                                show_process(x, "    ");
                }
        }
        json_array_foreach(json_object_get(root, "faults"), i, x)
                printf("Fault: call %llu from now of %s fails with %s\n", ju(x, "remaining"), js(x, "function"),
                       js(x, "error_name"));
        if (ju(root, "crash_after"))
                printf("Fault: exit(137) after %llu more mutating NVML calls\n", ju(root, "crash_after"));
        if (json_array_size(json_object_get(root, "events")) > 0)
                printf("Events queued: %zu (last sequence number %llu)\n",
                       json_array_size(json_object_get(root, "events")), ju(root, "event_seq"));
        json_decref(root);
        return EXIT_SUCCESS;
}

static int cmd_show(int argc, char **argv) {
        bool as_json = false;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0)
                        as_json = true;
                else
                        return usage_error("show: unexpected argument '%s'", argv[i]);
        }
        char *text = NULL;
        int r = mksim_describe(&text);
        if (r < 0)
                return fail(r, "cannot read the machine");
        if (as_json) {
                printf("%s\n", text);
                r = EXIT_SUCCESS;
        } else
                r = show_human(text);
        free(text);
        return r;
}

/* ---- other commands ---- */

static int cmd_create(int argc, char **argv) {
        const char *machine = NULL;
        unsigned flags = 0;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--force") == 0)
                        flags |= MKSIM_CREATE_FORCE;
                else if (argv[i][0] == '-' && argv[i][1] == '-')
                        return usage_error("create: unknown option '%s'", argv[i]);
                else if (!machine)
                        machine = argv[i];
                else
                        return usage_error("create: unexpected argument '%s'", argv[i]);
        }
        if (!machine)
                return usage_error("create: missing MACHINE");
        int r = mksim_create_machine(machine, flags);
        if (r < 0)
                return fail(r, "cannot create the machine");
        unsigned n = 0;
        (void) mksim_gpu_count(&n);
        printf("Created machine '%s' with %u GPU(s) in %s\n", machine, n, mksim_state_path());
        return EXIT_SUCCESS;
}

static int cmd_host_root(int argc, char **argv) {
        char *root = NULL;

        if (argc > 1)
                return usage_error("host-root: unexpected argument '%s'", argv[1]);
        if (mksim_host_root(&root) < 0) {
                fprintf(stderr, "migkit-sim: %s\n", mksim_last_error());
                return EXIT_FAILURE;
        }
        printf("%s\n", root);
        free(root);
        return EXIT_SUCCESS;
}

static int cmd_machines(int argc, char **argv) {
        const char *name, *desc;

        if (argc > 1)
                return usage_error("machines: unexpected argument '%s'", argv[1]);
        for (size_t i = 0; mksim_catalog_machine(i, &name, &desc) >= 0; i++)
                printf("%-14s %s\n", name, desc);
        return EXIT_SUCCESS;
}

static int cmd_models(int argc, char **argv) {
        const char *name, *product;

        if (argc > 1)
                return usage_error("models: unexpected argument '%s'", argv[1]);
        for (size_t i = 0; mksim_catalog_model(i, &name, &product) >= 0; i++)
                printf("%-14s %s\n", name, product);
        return EXIT_SUCCESS;
}

/* Options shared by `process add` and `xid`: --gpu --gi --ci --pid --memory. */
struct target {
        bool has_gpu, has_gi, has_ci, has_pid, has_memory;
        unsigned gpu, gi, ci, pid;
        unsigned long long memory;
};

/* Parses --opt VALUE / --opt=VALUE pairs from argv[from..]; positional
 * arguments are returned in pos (at most max_pos). Returns 0 or EXIT_USAGE. */
static int parse_target(const char *cmd, int argc, char **argv, int from, struct target *t, const char **pos,
                        int max_pos, int *n_pos) {
        *n_pos = 0;
        for (int i = from; i < argc; i++) {
                const char *a = argv[i], *val = NULL;
                char name[16];

                if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
                        if (*n_pos >= max_pos)
                                return usage_error("unexpected argument '%s'", a);
                        pos[(*n_pos)++] = a;
                        continue;
                }
                const char *eq = strchr(a, '=');
                size_t len = eq ? (size_t) (eq - a) : strlen(a);
                if (len >= sizeof(name))
                        return usage_error("unknown option '%s'", a);
                memcpy(name, a, len);
                name[len] = '\0';
                if (eq)
                        val = eq + 1;
                else if (i + 1 < argc)
                        val = argv[++i];
                else
                        return usage_error("option '%s' needs a value", name);

                bool ok;
                if (strcmp(name, "--gpu") == 0)
                        ok = parse_uint(val, &t->gpu), t->has_gpu = true;
                else if (strcmp(name, "--gi") == 0)
                        ok = parse_uint(val, &t->gi), t->has_gi = true;
                else if (strcmp(name, "--ci") == 0)
                        ok = parse_uint(val, &t->ci), t->has_ci = true;
                else if (strcmp(name, "--pid") == 0 && strcmp(cmd, "xid") != 0)
                        ok = parse_uint(val, &t->pid) && t->pid > 0, t->has_pid = true;
                else if (strcmp(name, "--memory") == 0 && strcmp(cmd, "xid") != 0)
                        ok = parse_ull(val, 1ULL << 40, &t->memory), t->has_memory = true;
                else
                        return usage_error("unknown option '%s'", name);
                if (!ok)
                        return usage_error("invalid value '%s'", val);
        }
        if (t->has_gi != t->has_ci)
                return usage_error("--gi and --ci go together");
        return 0;
}

static int cmd_process(int argc, char **argv) {
        struct target t = { 0 };
        const char *pos[1];
        int n_pos, r;

        if (argc < 2)
                return usage_error("process: expected 'add' or 'remove'");
        if (strcmp(argv[1], "add") == 0) {
                r = parse_target("process", argc, argv, 2, &t, pos, 0, &n_pos);
                if (r)
                        return r;
                if (!t.has_gpu)
                        return usage_error("process add: --gpu is required");
                unsigned pid;
                r = mksim_process_add(t.gpu, t.has_gi ? t.gi : MKSIM_ID_NONE, t.has_ci ? t.ci : MKSIM_ID_NONE,
                                      t.has_pid ? t.pid : 0, t.has_memory ? t.memory : 0, &pid);
                if (r < 0)
                        return fail(r, "cannot add the process");
                printf("%u\n", pid);
                return EXIT_SUCCESS;
        }
        if (strcmp(argv[1], "remove") == 0) {
                /* The pid as --pid P or as a plain argument. */
                r = parse_target("process", argc, argv, 2, &t, pos, 1, &n_pos);
                if (r)
                        return r;
                if (n_pos == 1 && !t.has_pid) {
                        if (!parse_uint(pos[0], &t.pid) || t.pid == 0)
                                return usage_error("process remove: invalid pid '%s'", pos[0]);
                        t.has_pid = true;
                } else if (n_pos > 0)
                        return usage_error("process remove: give the pid once");
                if (!t.has_pid || t.has_gpu || t.has_gi || t.has_memory)
                        return usage_error("process remove: usage: process remove [--pid] P");
                r = mksim_process_remove(t.pid);
                if (r < 0)
                        return fail(r, "cannot remove the process");
                printf("Process %u ended\n", t.pid);
                return EXIT_SUCCESS;
        }
        return usage_error("process: unknown subcommand '%s'", argv[1]);
}

static int cmd_xid(int argc, char **argv) {
        struct target t = { 0 };
        const char *pos[1];
        int n_pos;
        unsigned long long xid;

        int r = parse_target("xid", argc, argv, 1, &t, pos, 1, &n_pos);
        if (r)
                return r;
        if (!t.has_gpu || n_pos != 1)
                return usage_error("xid: usage: xid --gpu I [--gi ID --ci ID] XID");
        if (!parse_ull(pos[0], (unsigned long long) LLONG_MAX, &xid))
                return usage_error("xid: invalid Xid '%s'", pos[0]);
        r = mksim_xid(t.gpu, t.has_gi ? t.gi : MKSIM_ID_NONE, t.has_ci ? t.ci : MKSIM_ID_NONE, xid);
        if (r < 0)
                return fail(r, "cannot raise the Xid");
        if (t.has_gi)
                printf("Xid %llu raised on GPU %u, GPU instance %u, compute instance %u\n", xid, t.gpu, t.gi, t.ci);
        else
                printf("Xid %llu raised on GPU %u\n", xid, t.gpu);
        return EXIT_SUCCESS;
}

static int cmd_fault(int argc, char **argv) {
        unsigned n;
        int err, r;

        if (argc < 2)
                return usage_error("fault: expected 'set', 'crash-after' or 'clear'");
        if (strcmp(argv[1], "set") == 0) {
                if (argc != 5)
                        return usage_error("fault set: usage: fault set FUNCTION N ERROR");
                if (!parse_uint(argv[3], &n) || n == 0)
                        return usage_error("fault set: invalid call number '%s'", argv[3]);
                if (mksim_nvml_error_from_string(argv[4], &err) < 0 || err == 0)
                        return usage_error("fault set: unknown NVML error '%s'", argv[4]);
                r = mksim_fault_set(argv[2], n, err);
                if (r < 0)
                        return fail(r, "cannot arm the fault");
                printf("Call %u of %s from now fails with %s\n", n, argv[2], argv[4]);
                return EXIT_SUCCESS;
        }
        if (strcmp(argv[1], "crash-after") == 0) {
                if (argc != 3 || !parse_uint(argv[2], &n))
                        return usage_error("fault crash-after: usage: fault crash-after N");
                r = mksim_fault_crash_after(n);
                if (r < 0)
                        return fail(r, "cannot arm crash-after");
                printf("The process making the mutating NVML call %u from now exits with 137\n", n);
                return EXIT_SUCCESS;
        }
        if (strcmp(argv[1], "clear") == 0) {
                if (argc != 2)
                        return usage_error("fault clear: unexpected argument '%s'", argv[2]);
                r = mksim_fault_clear();
                if (r < 0)
                        return fail(r, "cannot clear faults");
                printf("All faults cleared\n");
                return EXIT_SUCCESS;
        }
        return usage_error("fault: unknown subcommand '%s'", argv[1]);
}

static int cmd_reset(int argc, char **argv) {
        struct target t = { 0 };
        const char *list = NULL;
        int status = EXIT_SUCCESS;

        /* --gpu takes a list here, so parse it apart from parse_target(). */
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--gpu") == 0 && i + 1 < argc)
                        list = argv[++i];
                else if (strncmp(argv[i], "--gpu=", 6) == 0)
                        list = argv[i] + 6;
                else
                        return usage_error("reset: unexpected argument '%s'", argv[i]);
        }
        if (!list || !*list)
                return usage_error("reset: --gpu I[,J...] is required");
        char *copy = strdup(list), *save = NULL;
        if (!copy)
                return fail(-ENOMEM, "out of memory");
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save))
                if (!parse_uint(item, &t.gpu)) {
                        free(copy);
                        return usage_error("reset: invalid GPU index '%s'", item);
                }
        memcpy(copy, list, strlen(list) + 1);
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                (void) parse_uint(item, &t.gpu);
                int r = mksim_reset_gpu(t.gpu);
                if (r < 0)
                        status = fail(r, "cannot reset the GPU");
                else
                        printf("GPU %u reset\n", t.gpu);
        }
        free(copy);
        return status;
}

/* `lose --gpu I` and `recover --gpu I`. */
static int cmd_lost(int argc, char **argv) {
        bool lose = strcmp(argv[0], "lose") == 0;
        const char *idx = NULL;
        unsigned gpu;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--gpu") == 0 && i + 1 < argc)
                        idx = argv[++i];
                else if (strncmp(argv[i], "--gpu=", 6) == 0)
                        idx = argv[i] + 6;
                else
                        return usage_error("%s: unexpected argument '%s'", argv[0], argv[i]);
        }
        if (!idx)
                return usage_error("%s: --gpu I is required", argv[0]);
        if (!parse_uint(idx, &gpu))
                return usage_error("%s: invalid GPU index '%s'", argv[0], idx);
        int r = mksim_gpu_set_lost(gpu, lose);
        if (r < 0)
                return fail(r, lose ? "cannot lose the GPU" : "cannot recover the GPU");
        printf("GPU %u %s\n", gpu, lose ? "lost" : "recovered");
        return EXIT_SUCCESS;
}

static int cmd_reboot(int argc, char **argv) {
        if (argc > 1)
                return usage_error("reboot: unexpected argument '%s'", argv[1]);
        int r = mksim_reboot();
        if (r < 0)
                return fail(r, "cannot reboot");
        printf("Machine rebooted: pending MIG modes applied, instances and processes gone, lost GPUs back\n");
        return EXIT_SUCCESS;
}

static int cmd_cuda_processes(int argc, char **argv) {
        unsigned long window = 1000;
        struct mksim_cuda_process *p = NULL;
        size_t n = 0;

        for (int i = 1; i < argc; i++) {
                char *end;
                if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
                        errno = 0;
                        window = strtoul(argv[++i], &end, 10);
                        if (errno || *end || window == 0 || window > 3600000)
                                return usage_error("cuda-processes: bad --window '%s'", argv[i]);
                } else
                        return usage_error("cuda-processes: unexpected argument '%s'", argv[i]);
        }
        int r = mksim_cuda_processes((unsigned) window, &p, &n);
        if (r < 0)
                return fail(r, "cannot read the CUDA processes");
        printf("%-4s %-4s %-4s %-8s %12s %5s\n", "GPU", "GI", "CI", "PID", "MEMORY_MIB", "SM%");
        for (size_t i = 0; i < n; i++) {
                char gi[16] = "-", ci[16] = "-";
                if (p[i].gi != MKSIM_ID_NONE) {
                        snprintf(gi, sizeof(gi), "%u", p[i].gi);
                        snprintf(ci, sizeof(ci), "%u", p[i].ci);
                }
                printf("%-4u %-4s %-4s %-8u %12.1f %5u\n", p[i].gpu, gi, ci, p[i].pid,
                       (double) p[i].used_bytes / (1024.0 * 1024.0), p[i].sm_percent);
        }
        free(p);
        return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
        int i = 1;

        /* Global options come before the command. */
        while (i < argc && argv[i][0] == '-') {
                if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
                        fputs(usage_text, stdout);
                        return EXIT_SUCCESS;
                } else if (strcmp(argv[i], "--state") == 0) {
                        if (i + 1 >= argc || !*argv[i + 1])
                                return usage_error("--state needs a file");
                        setenv("MIGKIT_SIM_STATE", argv[i + 1], 1);
                        i += 2;
                } else if (strncmp(argv[i], "--state=", 8) == 0 && argv[i][8]) {
                        setenv("MIGKIT_SIM_STATE", argv[i] + 8, 1);
                        i++;
                } else
                        return usage_error("unknown option '%s'", argv[i]);
        }
        if (i >= argc)
                return usage_error("missing COMMAND");

        static const struct {
                const char *name;
                int (*fn)(int argc, char **argv);
        } commands[] = {
                { "create", cmd_create }, { "show", cmd_show },       { "machines", cmd_machines }, { "host-root", cmd_host_root },
                { "models", cmd_models }, { "process", cmd_process }, { "xid", cmd_xid },
                { "fault", cmd_fault },   { "reset", cmd_reset },     { "reboot", cmd_reboot },
                { "lose", cmd_lost },     { "recover", cmd_lost },
                { "cuda-processes", cmd_cuda_processes },
        };
        if (strcmp(argv[i], "help") == 0) {
                fputs(usage_text, stdout);
                return EXIT_SUCCESS;
        }
        for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
                if (strcmp(argv[i], commands[c].name) == 0) {
                        for (int j = i + 1; j < argc; j++)
                                if (strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) {
                                        fputs(usage_text, stdout);
                                        return EXIT_SUCCESS;
                                }
                        return commands[c].fn(argc - i, argv + i);
                }
        return usage_error("unknown command '%s'", argv[i]);
}
