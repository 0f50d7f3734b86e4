#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "nvml/nvml.h"
#include "spec/emit.h"

static const char *const output_format_table[_MK_OUTPUT_MAX] = {
        [MK_OUTPUT_TABLE] = "table",
        [MK_OUTPUT_JSON] = "json",
        [MK_OUTPUT_YAML] = "yaml",
};

enum mk_output_format mk_output_format_from_string(const char *s) {
        for (int i = 0; i < _MK_OUTPUT_MAX; i++)
                if (s && streq(s, output_format_table[i]))
                        return (enum mk_output_format) i;
        return _MK_OUTPUT_INVALID;
}

const char *mk_output_format_to_string(enum mk_output_format f) {
        return f >= 0 && f < _MK_OUTPUT_MAX ? output_format_table[f] : NULL;
}

int cli_parse_output(const char *cmd, const char *value, unsigned accepted, enum mk_output_format def,
                     enum mk_output_format *ret) {
        if (!value || !*value) {
                *ret = def;
                return 0;
        }
        /* "text": the name `migkit labels` used for its table. */
        enum mk_output_format f = streq(value, "text") ? MK_OUTPUT_TABLE : mk_output_format_from_string(value);
        if (f >= 0 && (accepted & CLI_OUTPUT(f))) {
                *ret = f;
                return 0;
        }
        char list[64] = "";
        size_t n = 0, k = 0;
        for (int i = 0; i < _MK_OUTPUT_MAX; i++)
                n += !!(accepted & CLI_OUTPUT(i));
        for (int i = 0; i < _MK_OUTPUT_MAX; i++) {
                if (!(accepted & CLI_OUTPUT(i)))
                        continue;
                size_t used = strlen(list);
                snprintf(list + used, sizeof(list) - used, "%s%s", k == 0 ? "" : k + 1 == n ? " or " : ", ",
                         output_format_table[i]);
                k++;
        }
        fprintf(stderr, "Error: unrecognized 'output-format': %s (migkit %s accepts %s; docs/cli.md)\n", value, cmd,
                list);
        return -EINVAL;
}

const char *cli_mig_mode_str(enum mk_mig_mode m) {
        switch (m) {
        case MK_MIG_ENABLED:
                return "enabled";
        case MK_MIG_DISABLED:
                return "disabled";
        default:
                return "unsupported";
        }
}

int cli_fail(const struct mk_error *e) {
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        fprintf(stderr, "Error: %s\n", mk_error_format(e, buf, sizeof(buf)));
        return MK_EXIT_FAILURE;
}

struct mk_snapshot *cli_snapshot(void) {
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        struct mk_snapshot *s = NULL;
        if (mk_nvml_open(NULL, &n, &e) < 0 || mk_nvml_snapshot(n, &s, &e) < 0) {
                (void) cli_fail(&e);
                return NULL;
        }
        return s;
}

void cli_print_json(FILE *f, const json_t *v) {
        char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s) {
                fputs(s, f);
                fputc('\n', f);
                free(s);
        }
}

void cli_print_yaml(FILE *f, const json_t *v, bool sort_keys) {
        int r = mk_yaml_write(f, v, sort_keys);
        if (r < 0)
                fprintf(stderr, "Error: Failed to write YAML output: %s\n", strerror(-r));
}

int cli_print_document(enum mk_output_format fmt, json_t *root, bool sort_keys) {
        if (fmt == MK_OUTPUT_JSON)
                cli_print_json(stdout, root);
        else
                cli_print_yaml(stdout, root, sort_keys);
        json_decref(root);
        return MK_EXIT_OK;
}

/* Here, with the other pieces the commands share, not in main.c: the daemon
 * commands (manager.c, scheduler.c) call it, and main.c dispatches to them. */
void cli_daemon_malloc(void) {
        (void) mallopt(M_ARENA_MAX, 1);
}
