#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "engine/export.h"

static void help(void) {
        printf("Usage: migkit export [-o yaml|json] [-l LABEL]\n"
               "\n"
               "Print the current MIG layout as a mig-parted v1 config named LABEL (default\n"
               "'current'), grouping GPUs as mig-parted does. Feeding the output to 'apply'\n"
               "reproduces the layout.\n"
               "\n"
               "  -o, --output-format yaml|json   (env MIG_PARTED_OUTPUT_FORMAT, default yaml)\n"
               "  -l, --config-label LABEL        (env MIG_PARTED_CONFIG_LABEL, default current)\n");
}

static json_t *entry_json(const struct mk_export_entry *x) {
        json_t *o = json_object();
        if (x->n_filters > 0) {
                json_t *f = x->n_filters == 1 ? NULL : json_array();
                for (size_t i = 0; i < x->n_filters; i++) {
                        char id[16];
                        snprintf(id, sizeof(id), "0x%08" PRIX32, x->filters[i]);
                        if (f)
                                json_array_append_new(f, json_string(id));
                        else
                                f = json_string(id);
                }
                json_object_set_new(o, "device-filter", f);
        }
        if (x->all_devices)
                json_object_set_new(o, "devices", json_string("all"));
        else {
                json_t *d = json_array();
                for (size_t i = 0; i < x->n_devices; i++)
                        json_array_append_new(d, json_integer(x->devices[i]));
                json_object_set_new(o, "devices", d);
        }
        json_object_set_new(o, "mig-enabled", json_boolean(x->mig_enabled));
        json_t *m = json_object();
        for (size_t i = 0; i < x->layout.n_items; i++) {
                char name[MK_PROFILE_NAME_MAX];
                if (mk_profile_name_format(&x->layout.items[i].name, name, sizeof(name)) >= 0)
                        json_object_set_new(m, name, json_integer(x->layout.items[i].count));
        }
        json_object_set_new(o, "mig-devices", m);
        return o;
}

int cli_export(int argc, char **argv) {
        const char *format = NULL, *label = NULL;
        const struct cli_option options[] = {
                {"output-format", 'o', required_argument, "MIG_PARTED_OUTPUT_FORMAT", &format},
                {"output", 0, required_argument, NULL, &format},
                {"config-label", 'l', required_argument, "MIG_PARTED_CONFIG_LABEL", &label},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        if (!label || !*label)
                label = "current";
        enum mk_output_format fmt;
        if (cli_parse_output("export", format, CLI_OUTPUT(MK_OUTPUT_YAML) | CLI_OUTPUT(MK_OUTPUT_JSON), MK_OUTPUT_YAML, &fmt) < 0)
                return MK_EXIT_USAGE;
        if (strlen(label) > 253) {
                fprintf(stderr, "Error: config label '%.32s...' is longer than 253 characters\n", label);
                return MK_EXIT_USAGE;
        }

        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = cli_snapshot();
        if (!s)
                return MK_EXIT_FAILURE;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (s->gpus[i].mig_capable && s->gpus[i].mig_current != s->gpus[i].mig_pending)
                        log_warning("GPU %u: MIG mode is %s with %s pending a reset; exporting the current mode",
                                    s->gpus[i].index, cli_mig_mode_str(s->gpus[i].mig_current),
                                    cli_mig_mode_str(s->gpus[i].mig_pending));

        struct mk_error e = {0};
        struct mk_export x = {0};
        if (mk_export_build(s, &x, &e) < 0)
                return cli_fail(&e);
        if (x.n_gis_without_ci > 0)
                log_warning("%zu GPU instance(s) without a compute instance are left out: a mig-parted config "
                            "cannot express them",
                            x.n_gis_without_ci);

        json_t *entries = json_array();
        for (size_t i = 0; i < x.n_entries; i++)
                json_array_append_new(entries, entry_json(&x.entries[i]));
        mk_export_done(&x);
        json_t *root = json_pack("{s:s,s:{s:o}}", "version", "v1", "mig-configs", label, entries);
        return cli_print_document(fmt, root, true);
}
