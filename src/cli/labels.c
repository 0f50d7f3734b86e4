/* `migkit labels`: GPU feature discovery labels for this node (docs/labels.md). */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "gfd/labels.h"
#include "spec/plugin-config.h"

#define DEFAULT_MACHINE_TYPE_FILE "/sys/class/dmi/id/product_name"

static void help(void) {
        printf("Usage: migkit labels [--mig-strategy none|single|mixed] [--config-file FILE] [-o table|json]\n"
               "                     [--no-timestamp] [--machine-type-file FILE]\n"
               "\n"
               "Print the GPU feature discovery labels of this node, one key=value per line,\n"
               "sorted, as GFD writes its NFD feature file (docs/labels.md).\n"
               "\n"
               "  --mig-strategy S        none (default), single or mixed\n"
               "                          (env GFD_MIG_STRATEGY, MIG_STRATEGY; else flags.migStrategy)\n"
               "  --config-file FILE      device plugin / GFD v1 config: flags.migStrategy and\n"
               "                          sharing (env GFD_CONFIG_FILE, CONFIG_FILE)\n"
               "  --no-timestamp          leave out nvidia.com/gfd.timestamp (env GFD_NO_TIMESTAMP)\n"
               "  --machine-type-file F   source of nvidia.com/gpu.machine (env GFD_MACHINE_TYPE_FILE,\n"
               "                          default " DEFAULT_MACHINE_TYPE_FILE ")\n"
               "  -o, --output FORMAT     table (default: name=value lines) or json\n");
}

/* The first set, non-empty variable of `names`, or NULL. */
static const char *env_first(const char *a, const char *b) {
        const char *v = secure_getenv(a);
        if (v && *v)
                return v;
        v = b ? secure_getenv(b) : NULL;
        return v && *v ? v : NULL;
}

int cli_labels(int argc, char **argv) {
        const char *strategy_arg = NULL, *config_file = NULL, *machine_file = NULL, *format = NULL,
                   *no_timestamp_flag = NULL;
        const struct cli_option options[] = {
                {"mig-strategy", 0, required_argument, NULL, &strategy_arg},
                {"config-file", 0, required_argument, NULL, &config_file},
                {"no-timestamp", 0, no_argument, NULL, &no_timestamp_flag},
                {"machine-type-file", 0, required_argument, NULL, &machine_file},
                {"output", 'o', required_argument, NULL, &format},
                {"output-format", 0, required_argument, NULL, &format},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        bool no_timestamp = no_timestamp_flag != NULL;
        enum mk_output_format fmt;
        if (cli_parse_output("labels", format, CLI_OUTPUT(MK_OUTPUT_TABLE) | CLI_OUTPUT(MK_OUTPUT_JSON),
                             MK_OUTPUT_TABLE, &fmt) < 0)
                return MK_EXIT_USAGE;
        /* Flags, then the environment (GFD's names first), then the config file. */
        if (!strategy_arg)
                strategy_arg = env_first("GFD_MIG_STRATEGY", "MIG_STRATEGY");
        if (!config_file)
                config_file = env_first("GFD_CONFIG_FILE", "CONFIG_FILE");
        if (!machine_file)
                machine_file = env_first("GFD_MACHINE_TYPE_FILE", NULL);
        if (!machine_file)
                machine_file = DEFAULT_MACHINE_TYPE_FILE;
        const char *nots = env_first("GFD_NO_TIMESTAMP", NULL);
        if (!no_timestamp && nots) {
                bool v;
                if (mk_parse_bool(nots, &v) < 0) {
                        fprintf(stderr, "Error: invalid GFD_NO_TIMESTAMP '%s'\n", nots);
                        return MK_EXIT_USAGE;
                }
                no_timestamp = v;
        }
        enum mk_mig_strategy strategy = MK_MIG_STRATEGY_NONE;
        if (strategy_arg) {
                strategy = mk_mig_strategy_from_string(strategy_arg);
                if (strategy < 0) {
                        fprintf(stderr, "Error: unknown MIG strategy '%s' (none, single or mixed)\n", strategy_arg);
                        return MK_EXIT_USAGE;
                }
        }

        struct mk_error e = {0};
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = NULL;
        if (config_file && mk_plugin_config_load(config_file, &cfg, &e) < 0)
                return cli_fail(&e);
        if (!strategy_arg && cfg && cfg->has_mig_strategy)
                strategy = cfg->mig_strategy;

        /* GFD labels "unknown" when the machine type cannot be read. */
        _cleanup_free_ char *machine = NULL;
        struct mk_error me = {0};
        if (mk_read_sysfs_attr(machine_file, &machine, &me) < 0)
                machine = NULL;

        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = cli_snapshot();
        if (!s)
                return MK_EXIT_FAILURE;

        /* gpu.mode and vgpu.* from sysfs (MIGKIT_SYSFS_ROOT; the simulator's host tree under --simulate). */
        struct mk_host host = {0};
        struct mk_labels_host facts = {.vgpu_present = -1};
        if (mk_host_init_from_env(&host) < 0) {
                mk_error_set(&e, -ENOMEM, "Out of memory");
                return cli_fail(&e);
        }
        mk_labels_host_read(&host, s, &facts);
        mk_host_done(&host);
        struct mk_labels_input in = {
                .snapshot = s,
                .host = &facts,
                .strategy = strategy,
                .config = cfg,
                .cuda_driver_version = s->cuda_driver_version,
                .machine_type = machine ? machine : "unknown",
                .timestamp = no_timestamp ? 0 : (uint64_t) time(NULL),
        };
        _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
        if (mk_labels_compute(&in, &l, &e) < 0)
                return cli_fail(&e);

        if (fmt == MK_OUTPUT_TABLE) {
                for (size_t i = 0; i < l->n; i++)
                        printf("%s=%s\n", l->items[i].key, l->items[i].value);
        } else {
                json_t *o = json_object();
                for (size_t i = 0; o && i < l->n; i++)
                        json_object_set_new(o, l->items[i].key, json_string(l->items[i].value));
                if (!o)
                        return MK_EXIT_FAILURE;
                cli_print_json(stdout, o);
                json_decref(o);
        }
        return fflush(stdout) == 0 ? MK_EXIT_OK : MK_EXIT_FAILURE;
}
