/* Scalars typed by go-yaml v2's rules, and as sigs.k8s.io/yaml turns them
 * into strings. See yaml-scalar.h. */
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "base/parse.h"
#include "spec/yaml-load.h"
#include "spec/yaml-scalar.h"

/* ---- typing (go-yaml v2 resolve.go) ---- */

static const struct {
        const char *s;
        enum mk_yaml_type type;
        bool b;
        double f;
} resolve_table[] = {
        {"y", MK_YAML_BOOL, true, 0},     {"Y", MK_YAML_BOOL, true, 0},     {"yes", MK_YAML_BOOL, true, 0},
        {"Yes", MK_YAML_BOOL, true, 0},   {"YES", MK_YAML_BOOL, true, 0},   {"true", MK_YAML_BOOL, true, 0},
        {"True", MK_YAML_BOOL, true, 0},  {"TRUE", MK_YAML_BOOL, true, 0},  {"on", MK_YAML_BOOL, true, 0},
        {"On", MK_YAML_BOOL, true, 0},    {"ON", MK_YAML_BOOL, true, 0},    {"n", MK_YAML_BOOL, false, 0},
        {"N", MK_YAML_BOOL, false, 0},    {"no", MK_YAML_BOOL, false, 0},   {"No", MK_YAML_BOOL, false, 0},
        {"NO", MK_YAML_BOOL, false, 0},   {"false", MK_YAML_BOOL, false, 0}, {"False", MK_YAML_BOOL, false, 0},
        {"FALSE", MK_YAML_BOOL, false, 0}, {"off", MK_YAML_BOOL, false, 0}, {"Off", MK_YAML_BOOL, false, 0},
        {"OFF", MK_YAML_BOOL, false, 0},  {"", MK_YAML_NULL, false, 0},     {"~", MK_YAML_NULL, false, 0},
        {"null", MK_YAML_NULL, false, 0}, {"Null", MK_YAML_NULL, false, 0}, {"NULL", MK_YAML_NULL, false, 0},
        {".nan", MK_YAML_FLOAT, false, NAN}, {".NaN", MK_YAML_FLOAT, false, NAN}, {".NAN", MK_YAML_FLOAT, false, NAN},
        {".inf", MK_YAML_FLOAT, false, INFINITY}, {".Inf", MK_YAML_FLOAT, false, INFINITY},
        {".INF", MK_YAML_FLOAT, false, INFINITY}, {"+.inf", MK_YAML_FLOAT, false, INFINITY},
        {"+.Inf", MK_YAML_FLOAT, false, INFINITY}, {"+.INF", MK_YAML_FLOAT, false, INFINITY},
        {"-.inf", MK_YAML_FLOAT, false, -INFINITY}, {"-.Inf", MK_YAML_FLOAT, false, -INFINITY},
        {"-.INF", MK_YAML_FLOAT, false, -INFINITY},
};

static bool is_digit(char ch) {
        return ch >= '0' && ch <= '9';
}

/* ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ (go-yaml's yamlStyleFloat) */
static bool yaml_style_float(const char *s) {
        if (*s == '+' || *s == '-')
                s++;
        if (*s == '.') {
                s++;
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
        } else {
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
                if (*s == '.') {
                        s++;
                        while (is_digit(*s))
                                s++;
                }
        }
        if (*s == 'e' || *s == 'E') {
                s++;
                if (*s == '+' || *s == '-')
                        s++;
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
        }
        return *s == 0;
}

/* strtod in the C locale whatever the process locale; false when it
 * overflows (Go's ParseFloat reports a range error then). */
static bool parse_float_c(const char *s, double *ret) {
        locale_t loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t) 0);
        if (!loc)
                return false;
        char *end = NULL;
        errno = 0;
        double f = strtod_l(s, &end, loc);
        freelocale(loc);
        if (!end || *end != 0 || isinf(f))
                return false;
        *ret = f;
        return true;
}

/* Go's strconv.ParseInt(s, 0, 64), then ParseUint(s, 0, 64). */
static bool parse_go_int(const char *s, struct mk_yaml_scalar *ret) {
        bool neg = false, sign = false;
        const char *p = s;
        uint64_t u;

        if (*p == '+' || *p == '-') {
                neg = *p == '-';
                sign = true;
                p++;
        }
        if (mk_parse_u64_base(p, 0, &u) < 0)
                return false;
        if (neg) {
                if (u > (uint64_t) INT64_MAX + 1)
                        return false;
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT,
                                               .i = u == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) u};
                return true;
        }
        if (u <= INT64_MAX) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT, .i = (int64_t) u};
                return true;
        }
        if (sign) /* ParseUint takes no sign */
                return false;
        *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT, .is_unsigned = true, .u = u};
        return true;
}

/* Resolution of a plain scalar (go-yaml v2 resolve() with an empty tag). */
static int resolve_plain(const char *s, size_t len, struct mk_yaml_scalar *ret) {
        if (strlen(s) != len) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(resolve_table); i++)
                if (streq(s, resolve_table[i].s)) {
                        *ret = (struct mk_yaml_scalar){
                                .type = resolve_table[i].type, .b = resolve_table[i].b, .f = resolve_table[i].f};
                        return 0;
                }

        if (s[0] == '.') {
                double f;
                if (yaml_style_float(s) && parse_float_c(s, &f)) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_FLOAT, .f = f};
                        return 0;
                }
        } else if (s[0] == '+' || s[0] == '-' || is_digit(s[0])) {
                /* go-yaml drops every '_' before trying numbers. */
                _cleanup_free_ char *plain = malloc(len + 1);
                if (!plain)
                        return -ENOMEM;
                size_t k = 0;
                for (size_t i = 0; i < len; i++)
                        if (s[i] != '_')
                                plain[k++] = s[i];
                plain[k] = 0;

                if (parse_go_int(plain, ret))
                        return 0;
                double f;
                if (yaml_style_float(plain) && parse_float_c(plain, &f)) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_FLOAT, .f = f};
                        return 0;
                }
        }
        *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
        return 0;
}

const char *mk_yaml_type_json(enum mk_yaml_type t) {
        switch (t) {
        case MK_YAML_NULL:
                return "null";
        case MK_YAML_BOOL:
                return "bool";
        case MK_YAML_INT:
        case MK_YAML_FLOAT:
                return "number";
        case MK_YAML_STR:
                return "string";
        case MK_YAML_SEQ:
                return "array";
        case MK_YAML_MAP:
                return "object";
        }
        return "value";
}

static const char *short_tag(const char *tag) {
        static const size_t n = sizeof(MK_YAML_TAG_PREFIX) - 1;
        return strncmp(tag, MK_YAML_TAG_PREFIX, n) == 0 ? tag + n : NULL;
}

int mk_yaml_resolve(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_scalar *ret) {
        const char *t = n->tag ? short_tag(n->tag) : NULL;

        if (n->kind != MK_YAML_SCALAR) {
                bool seq = n->kind == MK_YAML_SEQUENCE;
                if (n->tag && !(t && streq(t, seq ? "seq" : "map")))
                        return mk_yaml_error(c, n, "unsupported YAML tag '%s'", n->tag);
                *ret = (struct mk_yaml_scalar){.type = seq ? MK_YAML_SEQ : MK_YAML_MAP};
                return 0;
        }

        if (!n->tag) {
                if (!n->plain) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                        return 0;
                }
                int r = resolve_plain(n->value, n->len, ret);
                if (r < 0)
                        return mk_yaml_error_code(c, r, n, "out of memory");
                return 0;
        }

        /* "!" is the non-specific tag: a string, as in go-yaml. */
        if (streq(n->tag, "!") || (t && streq(t, "str"))) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                return 0;
        }
        enum mk_yaml_type want;
        if (t && streq(t, "null"))
                want = MK_YAML_NULL;
        else if (t && streq(t, "bool"))
                want = MK_YAML_BOOL;
        else if (t && streq(t, "int"))
                want = MK_YAML_INT;
        else if (t && streq(t, "float"))
                want = MK_YAML_FLOAT;
        else
                return mk_yaml_error(c, n, "unsupported YAML tag '%s'", n->tag);

        struct mk_yaml_scalar v;
        int r = resolve_plain(n->value, n->len, &v);
        if (r < 0)
                return mk_yaml_error_code(c, r, n, "out of memory");
        if (want == MK_YAML_FLOAT && v.type == MK_YAML_INT) {
                v.f = v.is_unsigned ? (double) v.u : (double) v.i;
                v.type = MK_YAML_FLOAT;
        }
        if (v.type != want)
                return mk_yaml_error(c, n, "cannot decode '%s' as a !!%s", n->value, t);
        *ret = v;
        return 0;
}

/* ---- Go float formatting ---- */

int mk_yaml_format_float32(double f, char *buf, size_t size) {
        float x = (float) f;
        int k;

        if (isnan(x))
                k = snprintf(buf, size, "NaN");
        else if (isinf(x))
                k = snprintf(buf, size, "%sInf", x < 0 ? "-" : "+");
        else if (x == 0)
                k = snprintf(buf, size, "%s0", signbit(x) ? "-" : "");
        else {
                /* Shortest digits that read back as the same float32. */
                char e[32];
                for (int prec = 0; prec < 9; prec++) {
                        snprintf(e, sizeof(e), "%.*e", prec, (double) x);
                        if (strtof(e, NULL) == x)
                                break;
                }
                /* e is "-d.ddde+XX": split into sign, digits, exponent. */
                const char *p = e;
                bool neg = *p == '-';
                if (neg)
                        p++;
                char digits[16];
                size_t nd = 0;
                for (; *p && *p != 'e'; p++)
                        if (is_digit(*p) && nd < sizeof(digits) - 1)
                                digits[nd++] = *p;
                digits[nd] = 0;
                int exp = 0;
                if (*p == 'e') {
                        bool eneg = p[1] == '-';
                        for (p += 2; is_digit(*p); p++)
                                exp = exp * 10 + (*p - '0');
                        if (eneg)
                                exp = -exp;
                }

                /* strconv's %g with shortest precision: %e when exp < -4 or
                 * exp >= 6 (eprec is 6 for the shortest form), else %f. */
                char out[64];
                size_t o = 0;
                if (neg)
                        out[o++] = '-';
                if (exp < -4 || exp >= 6) {
                        out[o++] = digits[0];
                        if (nd > 1) {
                                out[o++] = '.';
                                for (size_t i = 1; i < nd; i++)
                                        out[o++] = digits[i];
                        }
                        snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
                        o += strlen(out + o);
                } else if (exp < 0) {
                        out[o++] = '0';
                        out[o++] = '.';
                        for (int i = 0; i < -exp - 1; i++)
                                out[o++] = '0';
                        for (size_t i = 0; i < nd; i++)
                                out[o++] = digits[i];
                } else {
                        size_t int_digits = (size_t) exp + 1;
                        for (size_t i = 0; i < int_digits; i++)
                                out[o++] = i < nd ? digits[i] : '0';
                        if (nd > int_digits) {
                                out[o++] = '.';
                                for (size_t i = int_digits; i < nd; i++)
                                        out[o++] = digits[i];
                        }
                }
                out[o] = 0;
                k = snprintf(buf, size, "%s", out);
        }
        if (k < 0 || (size_t) k >= size)
                return -ENOBUFS;
        return k;
}

int mk_yaml_to_string(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool key, char **ret) {
        struct mk_yaml_scalar v;
        char buf[64];
        const char *s;
        int r;

        r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        switch (v.type) {
        case MK_YAML_STR:
                if (strlen(n->value) != n->len)
                        return mk_yaml_error(c, n, "%s contains a NUL byte", key ? "key" : "string");
                s = n->value;
                break;
        case MK_YAML_NULL:
                if (key)
                        return mk_yaml_error(c, n, "unsupported map key: null");
                s = "";
                break;
        case MK_YAML_BOOL:
                s = v.b ? "true" : "false";
                break;
        case MK_YAML_INT:
                if (v.is_unsigned)
                        snprintf(buf, sizeof(buf), "%" PRIu64, v.u);
                else
                        snprintf(buf, sizeof(buf), "%" PRId64, v.i);
                s = buf;
                break;
        case MK_YAML_FLOAT:
                if (mk_yaml_format_float32(v.f, buf, sizeof(buf)) < 0)
                        return mk_yaml_error(c, n, "cannot format number");
                s = buf;
                if (key) {
                        if (streq(buf, "+Inf"))
                                s = ".inf";
                        else if (streq(buf, "-Inf"))
                                s = "-.inf";
                        else if (streq(buf, "NaN"))
                                s = ".nan";
                }
                break;
        default:
                if (key)
                        return mk_yaml_error(c, n, "invalid map key: a %s",
                                             v.type == MK_YAML_SEQ ? "sequence" : "mapping");
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type string",
                                     mk_yaml_type_json(v.type));
        }
        char *copy = strdup(s);
        if (!copy)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        *ret = copy;
        return 0;
}
