#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "spec/emit.h"

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

static void yaml_string(FILE *f, const char *s) {
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
}

static void yaml_scalar(FILE *f, const json_t *v) {
        switch (json_typeof(v)) {
        case JSON_STRING:
                yaml_string(f, json_string_value(v));
                return;
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

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static int yaml_value(FILE *f, const json_t *v, int indent, bool sort_keys);

static int yaml_object_keys(FILE *f, const json_t *v, int indent, bool sort_here, bool sort_keys,
                            bool first_inline) {
        size_t n = json_object_size(v);
        _cleanup_free_ const char **keys = calloc(n ? n : 1, sizeof(*keys));
        if (!keys)
                return -ENOMEM;
        size_t k = 0;
        const char *key;
        const json_t *x;
        json_object_foreach((json_t *) v, key, x) keys[k++] = key;
        if (sort_here)
                qsort(keys, n, sizeof(*keys), cmp_str);
        for (size_t i = 0; i < n; i++) {
                int r = 0;
                x = json_object_get(v, keys[i]);
                if (!(first_inline && i == 0))
                        fprintf(f, "%*s", indent, "");
                yaml_string(f, keys[i]);
                fputc(':', f);
                if (is_scalar(x) || (json_is_array(x) && flow_array(x)) ||
                    (json_is_object(x) && json_object_size(x) == 0) || (json_is_array(x) && json_array_size(x) == 0)) {
                        fputc(' ', f);
                        r = yaml_value(f, x, indent, sort_keys);
                        fputc('\n', f);
                } else if (json_is_array(x)) {
                        fputc('\n', f);
                        r = yaml_value(f, x, indent, sort_keys); /* Go style: "- " at the key's indent */
                } else {
                        fputc('\n', f);
                        r = yaml_value(f, x, indent + 2, sort_keys);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

static int yaml_value(FILE *f, const json_t *v, int indent, bool sort_keys) {
        if (is_scalar(v)) {
                yaml_scalar(f, v);
                return 0;
        }
        if (json_is_object(v)) {
                if (json_object_size(v) == 0) {
                        fputs("{}", f);
                        return 0;
                }
                return yaml_object_keys(f, v, indent, sort_keys, sort_keys, false);
        }
        if (json_array_size(v) == 0) {
                fputs("[]", f);
                return 0;
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
                return 0;
        }
        json_array_foreach(v, i, x) {
                int r;
                fprintf(f, "%*s- ", indent, "");
                if (json_is_object(x) && json_object_size(x) > 0)
                        r = yaml_object_keys(f, x, indent + 2, sort_keys, sort_keys, true);
                else {
                        r = yaml_value(f, x, indent + 2, sort_keys);
                        fputc('\n', f);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

int mk_yaml_write(FILE *f, const json_t *v, bool sort_keys) {
        int r;
        /* The top level keeps its order (`version` first, as mig-parted writes it). */
        if (json_is_object(v) && json_object_size(v) > 0)
                r = yaml_object_keys(f, v, 0, false, sort_keys, false);
        else {
                r = yaml_value(f, v, 0, sort_keys);
                fputc('\n', f);
        }
        if (r < 0)
                return r;
        if (fflush(f) != 0 || ferror(f))
                return errno == ENOMEM ? -ENOMEM : -EIO;
        return 0;
}

char *mk_yaml_dump(const json_t *v, bool sort_keys) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        if (!f)
                return NULL;
        int r = mk_yaml_write(f, v, sort_keys);
        /* The buffer is only final (and NUL-terminated) after fclose. */
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                free(buf);
                return NULL;
        }
        return buf;
}
