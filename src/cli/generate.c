#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "engine/generate.h"
#include "spec/emit.h"

static void help(void) {
        printf("Usage: migkit generate-config [-f OUTPUT] [-o yaml|json]\n"
               "\n"
               "Generate a mig-parted v1 config from the MIG profiles the GPUs report:\n"
               "all-disabled, all-enabled, all-<profile> for every GPU instance profile and\n"
               "all-balanced, with device filters on nodes with several MIG-capable models.\n"
               "\n"
               "  -f, --output-file FILE          (env MIG_PARTED_OUTPUT_FILE, default stdout;\n"
               "                                  written atomically)\n"
               "  -o, --output-format yaml|json   (env MIG_PARTED_OUTPUT_FORMAT, default yaml)\n");
}

int cli_generate_config(int argc, char **argv) {
        const char *file = NULL, *format = NULL;
        const struct cli_option options[] = {
                {"output-file", 'f', required_argument, "MIG_PARTED_OUTPUT_FILE", &file},
                {"output-format", 'o', required_argument, "MIG_PARTED_OUTPUT_FORMAT", &format},
                {"output", 0, required_argument, NULL, &format},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        enum mk_output_format fmt;
        if (cli_parse_output("generate-config", format, CLI_OUTPUT(MK_OUTPUT_YAML) | CLI_OUTPUT(MK_OUTPUT_JSON), MK_OUTPUT_YAML, &fmt) < 0)
                return MK_EXIT_USAGE;

        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = cli_snapshot();
        if (!s)
                return MK_EXIT_FAILURE;
        struct mk_error e = {0};
        json_t *root = NULL;
        if (mk_generate_config(s, &root, &e) < 0)
                return cli_fail(&e);

        _cleanup_free_ char *text = NULL;
        if (fmt == MK_OUTPUT_JSON) {
                _cleanup_free_ char *j = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                if (j && asprintf(&text, "%s\n", j) < 0)
                        text = NULL;
        } else
                text = mk_yaml_dump(root, true);
        json_decref(root);
        if (!text) {
                mk_error_set(&e, -ENOMEM, "Out of memory while rendering the config");
                return cli_fail(&e);
        }

        if (!file || !*file || streq(file, "-")) {
                fputs(text, stdout);
                if (fflush(stdout) != 0) {
                        r = negative_errno();
                        mk_error_set(&e, r, "Failed to write the config to stdout: %s", strerror(-r));
                        return cli_fail(&e);
                }
                return MK_EXIT_OK;
        }
        if (mk_write_file_atomic(file, text, strlen(text), 0644, &e) < 0)
                return cli_fail(&e);
        log_info("Generated MIG config written to '%s'", file);
        return MK_EXIT_OK;
}
