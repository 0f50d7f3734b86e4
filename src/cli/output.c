#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "nvml/nvml.h"

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

/* YAML 1.1 and 1.2 readers would take these as something other than a string. */
static bool yaml_needs_quotes(const char *s) {
        if (!*s)
                return true;
        static const char *const special[] = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"};
        for (size_t i = 0; i < ELEMENTSOF(special); i++)
                if (strcasecmp(s, special[i]) == 0)
                        return true;
        if (strchr("-?:,[]{}#&*!|>'\"%@`", s[0]) || isspace((unsigned char) s[0]) ||
            isspace((unsigned char) s[strlen(s) - 1]))
                return true;
        if (strstr(s, ": ") || strstr(s, " #") || s[strlen(s) - 1] == ':')
                return true;
        /* Anything number-like (decimal, 0x hex, 0o octal, floats, .inf). */
        bool numberish = true;
        for (const char *p = s; *p && numberish; p++)
                numberish = isxdigit((unsigned char) *p) || strchr("+-._:xXoO", *p); /* incl. 1.1 sexagesimal */
        if (numberish && (isdigit((unsigned char) s[0]) || s[0] == '.' || s[0] == '+'))
                return true;
        for (const char *p = s; *p; p++)
                if ((unsigned char) *p < 0x20)
                        return true;
        return false;
}

static void yaml_scalar(FILE *f, const json_t *v) {
        switch (json_typeof(v)) {
        case JSON_STRING: {
                const char *s = json_string_value(v);
                if (!yaml_needs_quotes(s)) {
                        fputs(s, f);
                        return;
                }
                fputc('"', f);
                for (const char *p = s; *p; p++) {
                        if (*p == '"' || *p == '\\')
                                fprintf(f, "\\%c", *p);
                        else if ((unsigned char) *p < 0x20)
                                fprintf(f, "\\x%02x", (unsigned char) *p);
                        else
                                fputc(*p, f);
                }
                fputc('"', f);
                return;
        }
        case JSON_INTEGER:
                fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                return;
        case JSON_REAL:
                fprintf(f, "%.17g", json_real_value(v));
                return;
        case JSON_TRUE:
                fputs("true", f);
                return;
        case JSON_FALSE:
                fputs("false", f);
                return;
        default:
                fputs("null", f);
        }
}

static bool is_scalar(const json_t *v) {
        return !json_is_object(v) && !json_is_array(v);
}

static bool flow_array(const json_t *v) {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) if (!is_scalar(x)) return false;
        return true;
}

static void yaml_value(FILE *f, const json_t *v, int indent, bool sort_keys);

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static void yaml_object_keys(FILE *f, const json_t *v, int indent, bool sort_here, bool sort_keys,
                             bool first_inline);

static void yaml_object(FILE *f, const json_t *v, int indent, bool sort_keys, bool first_inline) {
        yaml_object_keys(f, v, indent, sort_keys, sort_keys, first_inline);
}

static void yaml_object_keys(FILE *f, const json_t *v, int indent, bool sort_here, bool sort_keys, bool first_inline) {
        size_t n = json_object_size(v);
        const char **keys = calloc(n ? n : 1, sizeof(*keys));
        if (!keys)
                return;
        size_t k = 0;
        const char *key;
        const json_t *x;
        json_object_foreach((json_t *) v, key, x) keys[k++] = key;
        if (sort_here)
                qsort(keys, n, sizeof(*keys), cmp_str);
        for (size_t i = 0; i < n; i++) {
                x = json_object_get(v, keys[i]);
                if (!(first_inline && i == 0))
                        fprintf(f, "%*s", indent, "");
                json_t *ks = json_string(keys[i]);
                yaml_scalar(f, ks);
                json_decref(ks);
                fputc(':', f);
                if (is_scalar(x) || (json_is_array(x) && flow_array(x)) ||
                    (json_is_object(x) && json_object_size(x) == 0) || (json_is_array(x) && json_array_size(x) == 0)) {
                        fputc(' ', f);
                        yaml_value(f, x, indent, sort_keys);
                        fputc('\n', f);
                } else if (json_is_array(x)) {
                        fputc('\n', f);
                        yaml_value(f, x, indent, sort_keys); /* Go style: "- " at the key's indent */
                } else {
                        fputc('\n', f);
                        yaml_value(f, x, indent + 2, sort_keys);
                }
        }
        free(keys);
}

static void yaml_value(FILE *f, const json_t *v, int indent, bool sort_keys) {
        if (is_scalar(v)) {
                yaml_scalar(f, v);
                return;
        }
        if (json_is_object(v)) {
                if (json_object_size(v) == 0)
                        fputs("{}", f);
                else
                        yaml_object(f, v, indent, sort_keys, false);
                return;
        }
        if (json_array_size(v) == 0) {
                fputs("[]", f);
                return;
        }
        size_t i;
        const json_t *x;
        if (flow_array(v)) {
                fputc('[', f);
                json_array_foreach(v, i, x) {
                        if (i)
                                fputs(", ", f);
                        yaml_scalar(f, x);
                }
                fputc(']', f);
                return;
        }
        json_array_foreach(v, i, x) {
                fprintf(f, "%*s- ", indent, "");
                if (json_is_object(x) && json_object_size(x) > 0)
                        yaml_object(f, x, indent + 2, sort_keys, true);
                else {
                        yaml_value(f, x, indent + 2, sort_keys);
                        fputc('\n', f);
                }
        }
}

void cli_print_yaml(FILE *f, const json_t *v, bool sort_keys) {
        /* The top level keeps its order (`version` first, as mig-parted writes it). */
        if (json_is_object(v) && json_object_size(v) > 0)
                yaml_object_keys(f, v, 0, false, sort_keys, false);
        else {
                yaml_value(f, v, 0, sort_keys);
                fputc('\n', f);
        }
}
