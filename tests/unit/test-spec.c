/* Unit tests for spec/: the mig-parted config (v1) and hooks file parsers,
 * device filters, config selection and entry matching. Table-driven: each
 * invalid input has one exact error (code, file:line:column, field path,
 * message); each valid input a dump of what it parses to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "mig/layout.h"
#include "spec/config.h"
#include "spec/hooks.h"
#include "spec/yaml.h"

#define FILE_NAME "t.yaml"

/* ---- helpers ---- */

/* A dump of a parsed config, one token per fact, compared as a string so a
 * failing row prints both values:
 *   name{[f=20B010DE,20B510DE:153310DE ]d=all|0,1 m=0|1[ 1g.5gb=2,...]}... */
static char *dump_config(const struct mk_config *c) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (size_t i = 0; i < c->n_configs; i++) {
                const struct mk_named_config *nc = &c->configs[i];
                assert_int_equal(mk_buf_printf(&b, "%s%s", i ? " " : "", nc->name), 0);
                for (size_t j = 0; j < nc->n_entries; j++) {
                        const struct mk_config_entry *x = &nc->entries[j];
                        assert_int_equal(mk_buf_puts(&b, "{"), 0);
                        if (x->n_filters > 0) {
                                assert_int_equal(mk_buf_puts(&b, "f="), 0);
                                for (size_t k = 0; k < x->n_filters; k++) {
                                        assert_int_equal(mk_buf_printf(&b, "%s%08X", k ? "," : "",
                                                                       x->filters[k].device_vendor),
                                                         0);
                                        if (x->filters[k].has_subsystem)
                                                assert_int_equal(mk_buf_printf(&b, ":%08X", x->filters[k].subsystem), 0);
                                }
                                assert_int_equal(mk_buf_puts(&b, " "), 0);
                        }
                        assert_int_equal(mk_buf_puts(&b, "d="), 0);
                        if (x->all_devices)
                                assert_int_equal(mk_buf_puts(&b, "all"), 0);
                        for (size_t k = 0; k < x->n_devices; k++)
                                assert_int_equal(mk_buf_printf(&b, "%s%u", k ? "," : "", x->devices[k]), 0);
                        assert_int_equal(mk_buf_printf(&b, " m=%d", x->mig_enabled), 0);
                        for (size_t k = 0; k < x->n_mig_devices; k++)
                                assert_int_equal(mk_buf_printf(&b, "%s%s=%u", k ? "," : " ", x->mig_devices[k].raw,
                                                               x->mig_devices[k].count),
                                                 0);
                        assert_int_equal(mk_buf_puts(&b, "}"), 0);
                }
        }
        char *s = mk_buf_take(&b);
        assert_non_null(s);
        return s;
}

static void check_error(const char *what, int r, const struct mk_error *e, int code, const char *file, unsigned line,
                        unsigned column, const char *field, const char *msg) {
        if (r != code)
                fail_msg("%s: r = %d (%s), want %d; message '%s'", what, r, strerror(-r), code, e->msg);
        if (e->code != code)
                fail_msg("%s: e.code = %d, want %d", what, e->code, code);
        if (!streq(e->file, file))
                fail_msg("%s: e.file = '%s', want '%s'", what, e->file, file);
        if (e->line != line || e->column != column)
                fail_msg("%s: position %u:%u, want %u:%u (message '%s')", what, e->line, e->column, line, column,
                         e->msg);
        if (!streq(e->field, field))
                fail_msg("%s: e.field = '%s', want '%s'", what, e->field, field);
        /* A trailing '*' compares a prefix (libyaml's wording may change). */
        size_t n = strlen(msg);
        if (n > 0 && msg[n - 1] == '*' ? strncmp(e->msg, msg, n - 1) != 0 : !streq(e->msg, msg))
                fail_msg("%s: message\n  '%s'\nwant\n  '%s'", what, e->msg, msg);
}

/* ---- valid configs ---- */

#define V1 "version: v1\nmig-configs:\n"

static void test_config_valid(void **state) {
        static const struct {
                const char *name;
                const char *yaml;
                const char *want;
        } cases[] = {
                {"all-disabled", V1 "  all-disabled:\n    - devices: all\n      mig-enabled: false\n",
                 "all-disabled{d=all m=0}"},
                {"all-enabled idiom", V1 "  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n",
                 "all-enabled{d=all m=1}"},
                {"balanced", V1 "  all-balanced:\n"
                                "    - device-filter: \"0x20B010DE\"\n"
                                "      devices: all\n"
                                "      mig-enabled: true\n"
                                "      mig-devices:\n"
                                "        \"1g.5gb\": 2\n"
                                "        \"2g.10gb\": 1\n"
                                "        \"3g.20gb\": 1\n",
                 "all-balanced{f=20B010DE d=all m=1 1g.5gb=2,2g.10gb=1,3g.20gb=1}"},
                {"per-index lists", V1 "  half:\n"
                                       "    - devices: [0, 1, 2, 3]\n      mig-enabled: false\n"
                                       "    - devices: [4, 5, 6, 7]\n      mig-enabled: true\n"
                                       "      mig-devices: {\"3g.20gb\": 2}\n",
                 "half{d=0,1,2,3 m=0}{d=4,5,6,7 m=1 3g.20gb=2}"},
                {"device-filter list and subsystem form",
                 V1 "  c:\n    - device-filter: [\"0x20B010DE\", \"0x20B510DE:0x153310DE\"]\n"
                    "      devices: all\n      mig-enabled: false\n",
                 "c{f=20B010DE,20B510DE:153310DE d=all m=0}"},
                {"device-filter Go base-0 forms",
                 V1 "  c:\n    - device-filter: [\"548409566\", \"04054010336\", \"0X20b010de\", "
                    "\"0b100000101100000001000011011110\", \"0o4054010336:0x0\"]\n"
                    "      devices: all\n      mig-enabled: false\n",
                 "c{f=20B010DE,20B010DE,20B010DE,20B010DE,20B010DE:00000000 d=all m=0}"},
                {"empty device-filter string and list mean no filter",
                 V1 "  c:\n    - device-filter: \"\"\n      devices: all\n      mig-enabled: false\n"
                    "    - device-filter: []\n      devices: all\n      mig-enabled: false\n"
                    "    - device-filter: ~\n      devices: all\n      mig-enabled: false\n",
                 "c{d=all m=0}{d=all m=0}{d=all m=0}"},
                {"device indices in YAML 1.1 / Go base-0 forms",
                 V1 "  c:\n    - devices: [0, 0x1, 0o2, 03, 0b100, 1_0, +5, 6.0, 1e1, 08]\n      mig-enabled: false\n",
                 "c{d=0,1,2,3,4,10,5,6,10,8 m=0}"},
                {"empty devices list", V1 "  c:\n    - devices: []\n      mig-enabled: false\n", "c{d= m=0}"},
                {"zero counts accepted individually",
                 V1 "  c:\n    - devices: all\n      mig-enabled: true\n"
                    "      mig-devices: {\"1g.5gb\": 0, \"2g.10gb\": 3, \"3g.20gb\": ~}\n",
                 "c{d=all m=1 1g.5gb=0,2g.10gb=3,3g.20gb=0}"},
                {"shared GI and non-canonical names",
                 V1 "  c:\n    - devices: all\n      mig-enabled: true\n"
                    "      mig-devices: {1c.3g.20gb: 2, 7c.7g.40gb: 1, 01g.5gb: 1, 1g.10gb+me: 1}\n",
                 "c{d=all m=1 1c.3g.20gb=2,7c.7g.40gb=1,01g.5gb=1,1g.10gb+me=1}"},
                {"counts in Go base-0 and integral float forms",
                 V1 "  c:\n    - devices: all\n      mig-enabled: true\n"
                    "      mig-devices: {1g.5gb: 0x2, 2g.10gb: 1.0, 3g.20gb: 0b1, 4g.20gb: 1e0}\n",
                 "c{d=all m=1 1g.5gb=2,2g.10gb=1,3g.20gb=1,4g.20gb=1}"},
                {"mig-enabled false with mig-devices {}",
                 V1 "  c:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {}\n", "c{d=all m=0}"},
                {"mig-enabled false with mig-devices null",
                 V1 "  c:\n    - devices: all\n      mig-enabled: false\n      mig-devices:\n", "c{d=all m=0}"},
                {"null mig-enabled is false", V1 "  c:\n    - devices: all\n      mig-enabled:\n", "c{d=all m=0}"},
                {"explicit tags", V1 "  c:\n    - devices: !!str all\n      mig-enabled: !!bool \"true\"\n"
                                     "      mig-devices: {1g.5gb: !!int \"0x3\"}\n",
                 "c{d=all m=1 1g.5gb=3}"},
                {"flow style JSON", "{\"version\": \"v1\", \"mig-configs\": {\"a\": [{\"devices\": \"all\", "
                                    "\"mig-enabled\": false}]}}",
                 "a{d=all m=0}"},
                {"config names from non-string keys (sigs.k8s.io/yaml)",
                 V1 "  yes: [{devices: all, mig-enabled: false}]\n"
                    "  0x10: [{devices: all, mig-enabled: false}]\n"
                    "  1.50: [{devices: all, mig-enabled: false}]\n"
                    "  \"0x10\": [{devices: all, mig-enabled: false}]\n",
                 "true{d=all m=0} 16{d=all m=0} 1.5{d=all m=0} 0x10{d=all m=0}"},
                {"anchors and aliases",
                 V1 "  a:\n    - devices: &all all\n      mig-enabled: true\n      mig-devices: &bal {1g.5gb: 2, 3g.20gb: 1}\n"
                    "  b:\n    - devices: *all\n      mig-enabled: true\n      mig-devices: *bal\n",
                 "a{d=all m=1 1g.5gb=2,3g.20gb=1} b{d=all m=1 1g.5gb=2,3g.20gb=1}"},
                {"merge keys: explicit keys win",
                 V1 "  a:\n    - &base {devices: all, mig-enabled: true, mig-devices: {1g.5gb: 7}}\n"
                    "    - <<: *base\n      devices: [1]\n"
                    "    - <<: [{devices: [2]}, *base]\n      mig-enabled: false\n      mig-devices: {}\n",
                 "a{d=all m=1 1g.5gb=7}{d=1 m=1 1g.5gb=7}{d=2 m=0}"},
                {"a later document is ignored", V1 "  a: [{devices: all, mig-enabled: false}]\n---\n[: bad\n",
                 "a{d=all m=0}"},
                {"comments and a document marker",
                 "# header\n---\n" V1 "  a: # the one\n    - {devices: all, mig-enabled: false} # entry\n...\n",
                 "a{d=all m=0}"},
                {"empty name is allowed", V1 "  \"\": [{devices: all, mig-enabled: false}]\n", "{d=all m=0}"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                int r = mk_config_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &c, &e);
                if (r < 0)
                        fail_msg("%s: r = %d: %s:%u:%u: %s [%s]", cases[i].name, r, e.file, e.line, e.column, e.msg,
                                 e.field);
                assert_string_equal(c->file, FILE_NAME);
                assert_string_equal(c->version, "v1");
                _cleanup_free_ char *got = dump_config(c);
                if (!streq(got, cases[i].want))
                        fail_msg("%s:\n  got  '%s'\n  want '%s'", cases[i].name, got, cases[i].want);
        }
}

/* YAML 1.1 booleans, as go-yaml v2 reads them for sigs.k8s.io/yaml: the
 * y/n/yes/no/on/off families are booleans; anything else, quoted "true"
 * included, is a string or a number and an error for mig-enabled. */
static void test_config_bool_forms(void **state) {
        static const struct {
                const char *v;
                int want; /* 1 true, 0 false, -1 error */
                const char *type;
        } cases[] = {
                {"true", 1, NULL},     {"True", 1, NULL},     {"TRUE", 1, NULL},     {"yes", 1, NULL},
                {"Yes", 1, NULL},      {"YES", 1, NULL},      {"on", 1, NULL},       {"On", 1, NULL},
                {"ON", 1, NULL},       {"y", 1, NULL},        {"Y", 1, NULL},        {"false", 0, NULL},
                {"False", 0, NULL},    {"FALSE", 0, NULL},    {"no", 0, NULL},       {"No", 0, NULL},
                {"NO", 0, NULL},       {"off", 0, NULL},      {"Off", 0, NULL},      {"OFF", 0, NULL},
                {"n", 0, NULL},        {"N", 0, NULL},        {"~", 0, NULL},        {"null", 0, NULL},
                {"!!bool yes", 1, NULL}, {"tRUE", -1, "string"}, {"yEs", -1, "string"}, {"t", -1, "string"},
                {"\"true\"", -1, "string"}, {"'yes'", -1, "string"}, {"1", -1, "number"}, {"0", -1, "number"},
                {"[]", -1, "array"},   {"{}", -1, "object"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char yaml[256], what[64], msg[128];
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                snprintf(yaml, sizeof(yaml), V1 "  a:\n    - devices: all\n      mig-enabled: %s\n      mig-devices: {}\n",
                         cases[i].v);
                snprintf(what, sizeof(what), "mig-enabled: %s", cases[i].v);
                int r = mk_config_parse(yaml, strlen(yaml), FILE_NAME, &c, &e);
                if (cases[i].want < 0) {
                        snprintf(msg, sizeof(msg), "json: cannot unmarshal %s into Go value of type bool",
                                 cases[i].type);
                        check_error(what, r, &e, -EINVAL, FILE_NAME, 5, 20, "mig-configs.a[0].mig-enabled", msg);
                        continue;
                }
                if (r < 0)
                        fail_msg("%s: r = %d: %s", what, r, e.msg);
                if (c->configs[0].entries[0].mig_enabled != (cases[i].want == 1))
                        fail_msg("%s: mig_enabled = %d, want %d", what, c->configs[0].entries[0].mig_enabled,
                                 cases[i].want);
        }
}

static void test_config_empty(void **state) {
        static const char *const cases[] = {
                "", "\n", "# only a comment\n", "---\n", "---\n...\n", "~\n", "null\n", V1 "", "version: v1\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                const struct mk_named_config *nc = NULL;
                int r = mk_config_parse(cases[i], strlen(cases[i]), FILE_NAME, &c, &e);
                if (i == ELEMENTSOF(cases) - 2) {
                        /* `mig-configs:` null is an empty map: an error. */
                        check_error("mig-configs null", r, &e, -EINVAL, FILE_NAME, 2, 13, "mig-configs",
                                    "at least one entry in 'mig-configs' is required");
                        continue;
                }
                if (r < 0)
                        fail_msg("case %zu '%s': r = %d: %s", i, cases[i], r, e.msg);
                assert_int_equal(c->n_configs, 0);
                if (i == ELEMENTSOF(cases) - 1)
                        assert_string_equal(c->version, "v1");
                else
                        assert_null(c->version);

                /* Selection then fails with upstream's message. */
                r = mk_config_select(c, NULL, &nc, &e);
                check_error("select none", r, &e, -ENOENT, FILE_NAME, 0, 0, "", "selected mig-config not present:  (configs: none)");
                r = mk_config_select(c, "all-balanced", &nc, &e);
                check_error("select one", r, &e, -ENOENT, FILE_NAME, 0, 0, "",
                            "selected mig-config not present: all-balanced (configs: none)");
                assert_null(nc);
        }
}

/* ---- invalid configs ---- */

#define ENTRY "  a:\n    - devices: all\n"

static void test_config_invalid(void **state) {
        static const struct {
                const char *name;
                const char *yaml;
                unsigned line, column;
                const char *field;
                const char *msg;
        } cases[] = {
                /* mig-parted v0.15.0 api/spec/v1, row by row */
                {"unexpected top-level field", "version: v1\nbogus: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
                 2, 1, "bogus", "unexpected field: bogus"},
                {"missing version", "mig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n", 1, 1, "version",
                 "unable to parse with missing 'version' field"},
                {"wrong version", "version: v2\nmig-configs: {}\n", 1, 10, "version", "unknown version: v2"},
                {"empty version", "version: \"\"\n", 1, 10, "version", "unknown version: "},
                {"null version", "version:\n", 1, 9, "version", "unknown version: "},
                {"empty top-level mapping", "{}\n", 1, 1, "", "unknown version: "},
                {"version a number", "version: 1\n", 1, 10, "version",
                 "json: cannot unmarshal number into Go value of type string"},
                {"mig-configs {}", "version: v1\nmig-configs: {}\n", 2, 14, "mig-configs",
                 "at least one entry in 'mig-configs' is required"},
                {"mig-configs a list", "version: v1\nmig-configs: []\n", 2, 14, "mig-configs",
                 "json: cannot unmarshal array into Go value of type map[string]v1.MigConfigSpecSlice"},
                {"config with an empty list", V1 "  a: []\n", 3, 6, "mig-configs.a", "at least one entry in 'a' is required"},
                {"config with a null list", V1 "  a:\n  b: []\n", 3, 5, "mig-configs.a",
                 "at least one entry in 'a' is required"},
                {"config a mapping", V1 "  a: {devices: all}\n", 3, 6, "mig-configs.a",
                 "json: cannot unmarshal object into Go value of type v1.MigConfigSpecSlice"},
                {"entry a scalar", V1 "  a: [1]\n", 3, 7, "mig-configs.a[0]",
                 "json: cannot unmarshal number into Go value of type map[string]json.RawMessage"},
                {"entry null", V1 "  a:\n    -\n", 4, 6, "mig-configs.a[0].devices", "missing required field: devices"},
                {"unexpected entry field", V1 ENTRY "      mig-enabled: false\n      bogus: 1\n", 6, 7,
                 "mig-configs.a[0].bogus",
                 "unexpected field: bogus (known: device-filter, devices, mig-enabled, mig-devices)"},
                {"entry keys are case-sensitive", V1 ENTRY "      Mig-Enabled: false\n      mig-enabled: false\n", 5, 7,
                 "mig-configs.a[0].Mig-Enabled", "unexpected field: Mig-Enabled (did you mean 'mig-enabled'?)"},
                {"a typo of a field is that, not a missing field", V1 "  a:\n    - devices: all\n      mig-enable: true\n",
                 5, 7, "mig-configs.a[0].mig-enable", "unexpected field: mig-enable (did you mean 'mig-enabled'?)"},
                {"missing devices", V1 "  a:\n    - mig-enabled: false\n", 4, 7, "mig-configs.a[0].devices",
                 "missing required field: devices"},
                {"missing mig-enabled", V1 "  a:\n    - devices: all\n", 4, 7, "mig-configs.a[0].mig-enabled",
                 "missing required field: mig-enabled"},
                {"unexpected fields before required ones (unlike upstream: a typo is not a missing field)",
                 V1 "  a:\n    - bogus: 1\n", 4, 7, "mig-configs.a[0].bogus",
                 "unexpected field: bogus (known: device-filter, devices, mig-enabled, mig-devices)"},
                {"devices a string other than all", V1 "  a:\n    - devices: some\n      mig-enabled: false\n", 4, 16,
                 "mig-configs.a[0].devices", "invalid string input for 'devices': some"},
                {"devices All", V1 "  a:\n    - devices: All\n      mig-enabled: false\n", 4, 16,
                 "mig-configs.a[0].devices", "invalid string input for 'devices': All"},
                {"devices null", V1 "  a:\n    - devices:\n      mig-enabled: false\n", 4, 15, "mig-configs.a[0].devices",
                 "invalid string input for 'devices': "},
                {"devices a mapping", V1 "  a:\n    - devices: {}\n      mig-enabled: false\n", 4, 16,
                 "mig-configs.a[0].devices",
                 "(json: cannot unmarshal object into Go value of type string, json: cannot unmarshal object into Go "
                 "value of type []int)"},
                {"devices a bool", V1 "  a:\n    - devices: true\n      mig-enabled: false\n", 4, 16,
                 "mig-configs.a[0].devices",
                 "(json: cannot unmarshal bool into Go value of type string, json: cannot unmarshal bool into Go value "
                 "of type []int)"},
                {"devices a number", V1 "  a:\n    - devices: 0\n      mig-enabled: false\n", 4, 16,
                 "mig-configs.a[0].devices",
                 "(json: cannot unmarshal number into Go value of type string, json: cannot unmarshal number into Go "
                 "value of type []int)"},
                {"device index a string", V1 "  a:\n    - devices: [0, \"1\"]\n      mig-enabled: false\n", 4, 20,
                 "mig-configs.a[0].devices[1]",
                 "(json: cannot unmarshal array into Go value of type string, json: cannot unmarshal string into Go "
                 "value of type int)"},
                {"device index a fraction", V1 "  a:\n    - devices: [1.5]\n      mig-enabled: false\n", 4, 17,
                 "mig-configs.a[0].devices[0]",
                 "(json: cannot unmarshal array into Go value of type string, json: cannot unmarshal number 1.5 into "
                 "Go value of type int)"},
                {"negative device index (stricter)", V1 "  a:\n    - devices: [0, -1]\n      mig-enabled: false\n", 4, 20,
                 "mig-configs.a[0].devices[1]", "invalid device index -1: must not be negative"},
                {"device index too large", V1 "  a:\n    - devices: [1024]\n      mig-enabled: false\n", 4, 17,
                 "mig-configs.a[0].devices[0]", "invalid device index 1024: at most 1023"},
                {"device index null (stricter)", V1 "  a:\n    - devices: [0, ~]\n      mig-enabled: false\n", 4, 20,
                 "mig-configs.a[0].devices[1]", "invalid device index: null"},
                {"device-filter a mapping", V1 "  a:\n    - device-filter: {}\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "(json: cannot unmarshal object into Go value of type string, json: cannot unmarshal object into Go "
                 "value of type []string)"},
                {"device-filter a bool", V1 "  a:\n    - device-filter: true\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "(json: cannot unmarshal bool into Go value of type string, json: cannot unmarshal bool into Go value "
                 "of type []string)"},
                {"device-filter unquoted hex", V1 "  a:\n    - device-filter: 0x20B010DE\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "(json: cannot unmarshal number into Go value of type string, json: cannot unmarshal number into Go "
                 "value of type []string) (quote the device-filter: \"0x20B010DE\")"},
                {"device-filter list item a number", V1 "  a:\n    - device-filter: [\"0x20B010DE\", 1]\n      devices: all\n      mig-enabled: false\n",
                 4, 37, "mig-configs.a[0].device-filter[1]",
                 "(json: cannot unmarshal array into Go value of type string, json: cannot unmarshal number into Go "
                 "value of type string)"},
                {"device-filter with two colons", V1 "  a:\n    - device-filter: \"0x1:0x2:0x3\"\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "invalid DeviceID format '0x1:0x2:0x3': expected '<devicevendor>' or '<devicevendor>:<subdevicevendor>'"},
                {"device-filter a model name (stricter)", V1 "  a:\n    - device-filter: A100-SXM4-40GB\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "unable to create DeviceID from string 'A100-SXM4-40GB': strconv.ParseUint: parsing "
                 "\"A100-SXM4-40GB\": invalid syntax"},
                {"device-filter list with a bad item (stricter)",
                 V1 "  a:\n    - device-filter:\n        - \"0x20B010DE\"\n        - \"0x20B010DE:zz\"\n      devices: all\n      mig-enabled: false\n",
                 6, 11, "mig-configs.a[0].device-filter[1]",
                 "unable to create Subsystem from string '0x20B010DE:zz': strconv.ParseUint: parsing \"zz\": invalid "
                 "syntax"},
                {"device-filter out of range", V1 "  a:\n    - device-filter: \"0x120B010DE\"\n      devices: all\n      mig-enabled: false\n",
                 4, 22, "mig-configs.a[0].device-filter",
                 "unable to create DeviceID from string '0x120B010DE': strconv.ParseUint: parsing \"0x120B010DE\": "
                 "value out of range"},
                {"mig-enabled without mig-devices", V1 ENTRY "      mig-enabled: true\n", 4, 7, "mig-configs.a[0].mig-devices",
                 "missing required field 'mig-devices' when 'mig-enabled' is true"},
                {"mig-enabled with null mig-devices", V1 ENTRY "      mig-enabled: true\n      mig-devices: ~\n", 6, 20,
                 "mig-configs.a[0].mig-devices", "missing required field 'mig-devices' when 'mig-enabled' is true"},
                {"mig-devices while disabled", V1 ENTRY "      mig-enabled: false\n      mig-devices: {1g.5gb: 1}\n", 6,
                 20, "mig-configs.a[0].mig-devices", "MIG devices included when 'mig-enabled' is false"},
                {"mig-devices a list", V1 ENTRY "      mig-enabled: true\n      mig-devices: [1g.5gb]\n", 6, 20,
                 "mig-configs.a[0].mig-devices", "json: cannot unmarshal array into Go value of type types.MigConfig"},
                {"bad profile name", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 1, bogus: 1}\n", 6, 32,
                 "mig-configs.a[0].mig-devices.bogus",
                 "error validating values in 'mig-devices' field: invalid format for 'bogus': expected 2 or 3 "
                 "'.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got 1"},
                {"C above G", V1 ENTRY "      mig-enabled: true\n      mig-devices: {4c.3g.20gb: 1}\n", 6, 21,
                 "mig-configs.a[0].mig-devices.4c.3g.20gb",
                 "error validating values in 'mig-devices' field: invalid format for '4c.3g.20gb': compute slices (4) "
                 "exceed GPU-instance slices (3)"},
                {"negative count", V1 ENTRY "      mig-enabled: true\n      mig-devices:\n        1g.5gb: -1\n", 7, 17,
                 "mig-configs.a[0].mig-devices.1g.5gb",
                 "error validating values in 'mig-devices' field: invalid count for '1g.5gb': -1"},
                {"all counts zero", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 0, 2g.10gb: 0}\n", 6,
                 20, "mig-configs.a[0].mig-devices",
                 "error validating values in 'mig-devices' field: all counts for all MigProfiles are 0"},
                {"count a string", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: \"2\"}\n", 6, 29,
                 "mig-configs.a[0].mig-devices.1g.5gb", "json: cannot unmarshal string into Go value of type int"},
                {"count a fraction", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 1.5}\n", 6, 29,
                 "mig-configs.a[0].mig-devices.1g.5gb", "json: cannot unmarshal number 1.5 into Go value of type int"},
                {"count huge", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 99999999999999999999}\n", 6,
                 29, "mig-configs.a[0].mig-devices.1g.5gb",
                 "json: cannot unmarshal number 99999999999999999999 into Go value of type int"},
                {"count above the cap (stricter)", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 1025}\n",
                 6, 29, "mig-configs.a[0].mig-devices.1g.5gb",
                 "error validating values in 'mig-devices' field: invalid count for '1g.5gb': 1025 (at most 1024)"},
                {"type errors before name errors", V1 ENTRY "      mig-enabled: true\n      mig-devices: {bogus: 1, 1g.5gb: x}\n",
                 6, 39, "mig-configs.a[0].mig-devices.1g.5gb", "json: cannot unmarshal string into Go value of type int"},

                /* YAML level */
                {"syntax error", V1 "  a: [\n", 4, 1, "", "invalid YAML: did not find expected node content*"},
                {"bad indentation", V1 "  a:\n  - devices: all\n   mig-enabled: true\n", 5, 4, "",
                 "invalid YAML: did not find expected key*"},
                {"tab indentation", "version: v1\n\tmig-configs: {}\n", 2, 1, "", "invalid YAML: found a tab character*"},
                {"control character", "version: v1\x01\n", 1, 12, "", "invalid YAML: control characters are not allowed*"},
                {"top level a list", "- a\n- b\n", 1, 1, "",
                 "json: cannot unmarshal array into Go value of type map[string]json.RawMessage"},
                {"top level a string", "hello\n", 1, 1, "",
                 "json: cannot unmarshal string into Go value of type map[string]json.RawMessage"},
                {"duplicate config name", V1 "  a: [{devices: all, mig-enabled: false}]\n  b: [{devices: all, mig-enabled: false}]\n"
                                            "  a: [{devices: all, mig-enabled: false}]\n",
                 5, 3, "mig-configs.a", "duplicate key: a"},
                {"duplicate top-level key", "version: v1\nversion: v1\n", 2, 1, "version", "duplicate key: version"},
                {"duplicate after key conversion", V1 "  1: [{devices: all, mig-enabled: false}]\n  \"1\": [{devices: all, mig-enabled: false}]\n",
                 4, 3, "mig-configs.1", "duplicate key: 1"},
                {"duplicate entry key", V1 ENTRY "      mig-enabled: false\n      devices: all\n", 6, 7,
                 "mig-configs.a[0].devices", "duplicate key: devices"},
                {"duplicate profile", V1 ENTRY "      mig-enabled: true\n      mig-devices: {1g.5gb: 1, 1g.5gb: 2}\n", 6, 32,
                 "mig-configs.a[0].mig-devices.1g.5gb", "duplicate key: 1g.5gb"},
                {"null key", V1 "  ~: [{devices: all, mig-enabled: false}]\n", 3, 3, "mig-configs", "unsupported map key: null"},
                {"unknown anchor", V1 "  a: [{devices: *x, mig-enabled: false}]\n", 3, 17, "", "unknown anchor 'x' referenced"},
                {"recursive alias", V1 "  a: &x [{devices: *x, mig-enabled: false}]\n", 3, 20, "", "unknown anchor 'x' referenced"},
                {"merge of a scalar", V1 "  a: [{<<: 1, devices: all, mig-enabled: false}]\n", 3, 12, "mig-configs.a[0]",
                 "map merge requires map or sequence of maps as the value"},
                {"unsupported tag", V1 "  a: [{devices: all, mig-enabled: !!binary eWVz}]\n", 3, 35,
                 "mig-configs.a[0].mig-enabled", "unsupported YAML tag 'tag:yaml.org,2002:binary'"},
                {"tag mismatch", V1 "  a: [{devices: all, mig-enabled: !!bool maybe}]\n", 3, 35,
                 "mig-configs.a[0].mig-enabled", "cannot decode 'maybe' as a !!bool"},
                {"NUL in a key", V1 "  \"a\\0b\": [{devices: all, mig-enabled: false}]\n", 3, 3, "mig-configs",
                 "key contains a NUL byte"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                int r = mk_config_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &c, &e);
                check_error(cases[i].name, r, &e, -EINVAL, FILE_NAME, cases[i].line, cases[i].column, cases[i].field,
                            cases[i].msg);
                assert_null(c);
        }
}

static char *repeat(const char *head, const char *item, size_t n, const char *tail) {
        struct mk_buf b;
        mk_buf_init(&b, 64u << 20);
        assert_int_equal(mk_buf_puts(&b, head), 0);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(mk_buf_puts(&b, item), 0);
        assert_int_equal(mk_buf_puts(&b, tail), 0);
        char *s = mk_buf_take(&b);
        assert_non_null(s);
        return s;
}

static void test_config_caps(void **state) {
        struct mk_error e = {0};
        struct mk_config *c = NULL;
        int r;

        /* Over MK_MAX_YAML_BYTES: -E2BIG before parsing. */
        size_t big = MK_MAX_YAML_BYTES + 1;
        _cleanup_free_ char *blank = malloc(big);
        assert_non_null(blank);
        memset(blank, ' ', big);
        r = mk_config_parse(blank, big, FILE_NAME, &c, &e);
        check_error("too big", r, &e, -E2BIG, FILE_NAME, 0, 0, "", "'t.yaml' is larger than 4194304 bytes");
        assert_null(c);
        /* Exactly at the cap is fine. */
        r = mk_config_parse(blank, big - 1, FILE_NAME, &c, &e);
        assert_int_equal(r, 0);
        c = mk_config_free(c);

        /* Billion laughs: aliases of aliases, bounded by expanded size. */
        static const char laughs[] = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                                     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                                     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                                     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                                     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                                     "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                                     "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
                                     "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
                                     "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
        r = mk_config_parse(laughs, strlen(laughs), FILE_NAME, &c, &e);
        /* The 8th alias of line 5 crosses 100000: (13 + 112 + 1112 + 11112) + 8 * 11111. */
        check_error("billion laughs", r, &e, -EINVAL, FILE_NAME, 5, 36, "",
                    "YAML document too large: more than 100000 nodes with aliases expanded");
        assert_null(c);

        /* Nesting deeper than MK_YAML_MAX_DEPTH. */
        _cleanup_free_ char *deep = repeat("x: ", "[", MK_YAML_MAX_DEPTH + 1, "");
        r = mk_config_parse(deep, strlen(deep), FILE_NAME, &c, &e);
        check_error("too deep", r, &e, -EINVAL, FILE_NAME, 1, 4 + MK_YAML_MAX_DEPTH - 1, "",
                    "YAML nesting deeper than 64 levels");

        /* Too many device indices. */
        _cleanup_free_ char *devs = repeat(V1 "  a:\n    - mig-enabled: false\n      devices: [", "0, ",
                                           MK_MAX_DEVICES, "0]\n");
        r = mk_config_parse(devs, strlen(devs), FILE_NAME, &c, &e);
        check_error("too many devices", r, &e, -EINVAL, FILE_NAME, 5, 16, "mig-configs.a[0].devices",
                    "too many device indices (at most 1024)");

        /* Too many profiles in one mig-devices. */
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        assert_int_equal(mk_buf_puts(&b, V1 "  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"), 0);
        for (int i = 1; i <= MK_MAX_MIG_DEVICES + 1; i++)
                assert_int_equal(mk_buf_printf(&b, "%s1g.%dgb: 1", i > 1 ? ", " : "", i), 0);
        assert_int_equal(mk_buf_puts(&b, "}\n"), 0);
        r = mk_config_parse(mk_buf_str(&b), b.len, FILE_NAME, &c, &e);
        check_error("too many profiles", r, &e, -EINVAL, FILE_NAME, 6, 20, "mig-configs.a[0].mig-devices",
                    "too many profiles in 'mig-devices' (at most 64)");
        mk_buf_done(&b);

        /* Too many entries in one config. */
        _cleanup_free_ char *entries = repeat(V1 "  a:\n", "    - {devices: all, mig-enabled: false}\n",
                                              MK_MAX_ENTRIES + 1, "");
        r = mk_config_parse(entries, strlen(entries), FILE_NAME, &c, &e);
        check_error("too many entries", r, &e, -EINVAL, FILE_NAME, 4, 5, "mig-configs.a",
                    "too many entries in 'a' (at most 1024)");

        /* A config name of 254 bytes. */
        char name[MK_MAX_CONFIG_NAME + 2];
        memset(name, 'n', sizeof(name) - 1);
        name[sizeof(name) - 1] = 0;
        _cleanup_free_ char *longname = repeat(V1 "  ", name, 1, ": [{devices: all, mig-enabled: false}]\n");
        r = mk_config_parse(longname, strlen(longname), FILE_NAME, &c, &e);
        assert_int_equal(r, -EINVAL);
        assert_string_equal(e.msg, "config name too long (at most 253 bytes)");
        assert_int_equal(e.line, 3);
        assert_int_equal(e.column, 3);
        /* ...and 253 is fine. */
        name[MK_MAX_CONFIG_NAME] = 0;
        _cleanup_free_ char *okname = repeat(V1 "  ", name, 1, ": [{devices: all, mig-enabled: false}]\n");
        r = mk_config_parse(okname, strlen(okname), FILE_NAME, &c, &e);
        assert_int_equal(r, 0);
        assert_string_equal(c->configs[0].name, name);
        c = mk_config_free(c);

        /* A long field path is cut with "...", never overflowed. */
        char key[300];
        memset(key, 'k', sizeof(key) - 1);
        key[sizeof(key) - 1] = 0;
        _cleanup_free_ char *longkey = repeat(V1 "  a: [{devices: all, mig-enabled: false, ", key, 1, ": 1}]\n");
        r = mk_config_parse(longkey, strlen(longkey), FILE_NAME, &c, &e);
        assert_int_equal(r, -EINVAL);
        assert_int_equal(strlen(e.field), MK_ERROR_LOC_MAX - 1);
        assert_string_equal(e.field + MK_ERROR_LOC_MAX - 4, "...");
        assert_true(strneq(e.field, "mig-configs.a[0].kkk", 20));
}

static void test_config_positions(void **state) {
        static const char yaml[] = V1 "  a:\n"
                                      "    - device-filter: [\"0x20B010DE\", \"0x20B510DE:0x153310DE\"]\n"
                                      "      devices: [0,\n                3]\n"
                                      "      mig-enabled: true\n"
                                      "      mig-devices:\n"
                                      "        1g.5gb: 2\n";
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(yaml, strlen(yaml), FILE_NAME, &c, &e), 0);
        const struct mk_named_config *nc = &c->configs[0];
        assert_int_equal(nc->pos.line, 3);
        assert_int_equal(nc->pos.column, 3);
        const struct mk_config_entry *x = &nc->entries[0];
        assert_int_equal(x->pos.line, 4);
        assert_int_equal(x->pos.column, 7);
        assert_int_equal(x->filters[0].pos.line, 4);
        assert_int_equal(x->filters[0].pos.column, 23);
        assert_int_equal(x->filters[1].pos.column, 37);
        assert_int_equal(x->devices_pos.line, 5);
        assert_int_equal(x->devices_pos.column, 16);
        assert_int_equal(x->device_pos[0].line, 5);
        assert_int_equal(x->device_pos[0].column, 17);
        assert_int_equal(x->device_pos[1].line, 6);
        assert_int_equal(x->device_pos[1].column, 17);
        assert_int_equal(x->mig_devices[0].pos.line, 9);
        assert_int_equal(x->mig_devices[0].pos.column, 9);
        assert_string_equal(x->mig_devices[0].raw, "1g.5gb");
        assert_int_equal(x->mig_devices[0].name.g, 1);
        assert_int_equal(x->mig_devices[0].name.gb, 5);
}

/* ---- selection, filters, matching, layout ---- */

static void test_config_select(void **state) {
        static const char one[] = V1 "  only: [{devices: all, mig-enabled: false}]\n";
        static const char two[] = V1 "  a: [{devices: all, mig-enabled: false}]\n  b: [{devices: all, mig-enabled: false}]\n";
        static const struct {
                const char *yaml;
                const char *select;
                int r;
                const char *want; /* config name, or the error message */
        } cases[] = {
                {one, NULL, 0, "only"},
                {one, "", 0, "only"},
                {one, "only", 0, "only"},
                {one, "other", -ENOENT, "selected mig-config not present: other (configs: only)"},
                {two, NULL, -EINVAL,
                 "missing required flag 'selected-config' when more than one config available: -c NAME, one of a, b"},
                {two, "", -EINVAL,
                 "missing required flag 'selected-config' when more than one config available: -c NAME, one of a, b"},
                {two, "b", 0, "b"},
                {two, "a", 0, "a"},
                {two, "A", -ENOENT, "selected mig-config not present: A (did you mean 'a'? configs: a, b)"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                const struct mk_named_config *nc = NULL;
                assert_int_equal(mk_config_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &c, &e), 0);
                int r = mk_config_select(c, cases[i].select, &nc, &e);
                if (r != cases[i].r)
                        fail_msg("select '%s' (case %zu): r = %d, want %d", cases[i].select ?: "(null)", i, r,
                                 cases[i].r);
                if (r == 0) {
                        assert_non_null(nc);
                        assert_string_equal(nc->name, cases[i].want);
                } else {
                        assert_null(nc);
                        assert_string_equal(e.msg, cases[i].want);
                        assert_string_equal(e.file, FILE_NAME);
                }
        }
}

static void test_device_filter_parse(void **state) {
        static const struct {
                const char *s;
                int r;
                uint32_t dv;
                bool sub;
                uint32_t ss;
                const char *msg;
        } cases[] = {
                {"0x20B010DE", 0, 0x20B010DE, false, 0, NULL},
                {"0x20b010de", 0, 0x20B010DE, false, 0, NULL},
                {"0X20B010DE", 0, 0x20B010DE, false, 0, NULL},
                {"0x20B510DE:0x153310DE", 0, 0x20B510DE, true, 0x153310DE, NULL},
                {"548409566", 0, 0x20B010DE, false, 0, NULL},
                {"04054010336", 0, 0x20B010DE, false, 0, NULL},
                {"0o4054010336", 0, 0x20B010DE, false, 0, NULL},
                {"0b100000101100000001000011011110", 0, 0x20B010DE, false, 0, NULL},
                {"0", 0, 0, false, 0, NULL},
                {"0xFFFFFFFF:0", 0, 0xFFFFFFFF, true, 0, NULL},
                {"0x100000000", -EINVAL, 0, false, 0,
                 "unable to create DeviceID from string '0x100000000': strconv.ParseUint: parsing \"0x100000000\": value out of range"},
                {"0x1:0x2:0x3", -EINVAL, 0, false, 0,
                 "invalid DeviceID format '0x1:0x2:0x3': expected '<devicevendor>' or '<devicevendor>:<subdevicevendor>'"},
                {"", -EINVAL, 0, false, 0, "unable to create DeviceID from string '': strconv.ParseUint: parsing \"\": invalid syntax"},
                {":", -EINVAL, 0, false, 0, "unable to create DeviceID from string ':': strconv.ParseUint: parsing \"\": invalid syntax"},
                {"0x20B010DE:", -EINVAL, 0, false, 0,
                 "unable to create Subsystem from string '0x20B010DE:': strconv.ParseUint: parsing \"\": invalid syntax"},
                {"-1", -EINVAL, 0, false, 0, "unable to create DeviceID from string '-1': strconv.ParseUint: parsing \"-1\": invalid syntax"},
                {"+1", -EINVAL, 0, false, 0, "unable to create DeviceID from string '+1': strconv.ParseUint: parsing \"+1\": invalid syntax"},
                {" 0x1", -EINVAL, 0, false, 0, "unable to create DeviceID from string ' 0x1': strconv.ParseUint: parsing \" 0x1\": invalid syntax"},
                {"0x", -EINVAL, 0, false, 0, "unable to create DeviceID from string '0x': strconv.ParseUint: parsing \"0x\": invalid syntax"},
                {"08", -EINVAL, 0, false, 0, "unable to create DeviceID from string '08': strconv.ParseUint: parsing \"08\": invalid syntax"},
                {"A100-SXM4-40GB", -EINVAL, 0, false, 0,
                 "unable to create DeviceID from string 'A100-SXM4-40GB': strconv.ParseUint: parsing \"A100-SXM4-40GB\": invalid syntax"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_device_filter f = {.device_vendor = 0xDEAD};
                struct mk_error e = {0};
                int r = mk_device_filter_parse(cases[i].s, &f, &e);
                if (r != cases[i].r)
                        fail_msg("'%s': r = %d, want %d (%s)", cases[i].s, r, cases[i].r, e.msg);
                if (r < 0) {
                        assert_string_equal(e.msg, cases[i].msg);
                        assert_int_equal(f.device_vendor, 0xDEAD); /* untouched on failure */
                        continue;
                }
                if (f.device_vendor != cases[i].dv || f.has_subsystem != cases[i].sub || f.subsystem != cases[i].ss)
                        fail_msg("'%s': got %08X/%d/%08X, want %08X/%d/%08X", cases[i].s, f.device_vendor,
                                 f.has_subsystem, f.subsystem, cases[i].dv, cases[i].sub, cases[i].ss);
        }
        assert_int_equal(mk_device_filter_parse(NULL, &(struct mk_device_filter){0}, NULL), -EINVAL);
}

static void test_device_filter_match(void **state) {
        static const struct {
                const char *filter;
                uint32_t dev, sub;
                bool want;
        } cases[] = {
                {"0x20B010DE", 0x20B010DE, 0x134F10DE, true},  /* any board variant */
                {"0x20B010DE", 0x20B010DE, 0, true},           /* subsystem files missing read as 0:0 */
                {"0x20B010DE", 0x20B510DE, 0x153310DE, false},
                {"0x20B010DE", 0x20B01234, 0, false},          /* vendor differs */
                {"0x20B510DE:0x153310DE", 0x20B510DE, 0x153310DE, true},
                {"0x20B510DE:0x153310DE", 0x20B510DE, 0x153210DE, false},
                {"0x20B510DE:0x153310DE", 0x20B510DE, 0x15331234, false},
                {"0x20B510DE:0x153310DE", 0x20B510DE, 0, false},
                {"0x20B510DE:0x0", 0x20B510DE, 0, true},
                {"0x20B510DE:0x153310DE", 0x20B010DE, 0x153310DE, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_device_filter f;
                assert_int_equal(mk_device_filter_parse(cases[i].filter, &f, NULL), 0);
                bool got = mk_device_filter_match(&f, cases[i].dev, cases[i].sub);
                if (got != cases[i].want)
                        fail_msg("filter '%s' vs %08X:%08X: %d, want %d", cases[i].filter, cases[i].dev, cases[i].sub,
                                 got, cases[i].want);
        }
}

static void test_entry_matches(void **state) {
        static const char yaml[] = V1 "  m:\n"
                                      "    - devices: all\n      mig-enabled: false\n"                        /* 0 */
                                      "    - devices: [1, 3]\n      mig-enabled: false\n"                   /* 1 */
                                      "    - devices: []\n      mig-enabled: false\n"                       /* 2 */
                                      "    - device-filter: \"0x20B010DE\"\n      devices: all\n      mig-enabled: false\n" /* 3 */
                                      "    - device-filter: [\"0x20B010DE\", \"0x233010DE\"]\n      devices: [0]\n      mig-enabled: false\n" /* 4 */
                                      "    - device-filter: \"0x20B510DE:0x153310DE\"\n      devices: all\n      mig-enabled: false\n"; /* 5 */
        static const struct {
                size_t entry;
                unsigned index;
                uint32_t dev, sub;
                bool want;
        } cases[] = {
                {0, 0, 0x20B010DE, 0, true},  {0, 7, 0x12345678, 0, true},
                {1, 0, 0x20B010DE, 0, false}, {1, 1, 0x20B010DE, 0, true},  {1, 3, 0x20B010DE, 0, true},
                {1, 2, 0x20B010DE, 0, false},
                {2, 0, 0x20B010DE, 0, false},
                {3, 0, 0x20B010DE, 0x134F10DE, true}, {3, 5, 0x20B210DE, 0, false},
                {4, 0, 0x233010DE, 0, true},  {4, 0, 0x20B010DE, 0, true},  {4, 1, 0x20B010DE, 0, false},
                {4, 0, 0x20B210DE, 0, false},
                {5, 2, 0x20B510DE, 0x153310DE, true}, {5, 2, 0x20B510DE, 0x153210DE, false},
        };
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(yaml, strlen(yaml), FILE_NAME, &c, &e), 0);
        assert_int_equal(c->configs[0].n_entries, 6);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct mk_config_entry *x = &c->configs[0].entries[cases[i].entry];
                bool got = mk_config_entry_matches(x, cases[i].index, cases[i].dev, cases[i].sub);
                if (got != cases[i].want)
                        fail_msg("entry %zu, GPU %u %08X:%08X: %d, want %d", cases[i].entry, cases[i].index,
                                 cases[i].dev, cases[i].sub, got, cases[i].want);
        }
}

static void test_entry_layout(void **state) {
        static const struct {
                const char *mig_devices;
                const char *want;
        } cases[] = {
                {"{}", ""},
                {"{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}", "3g.20gb:1, 2g.10gb:1, 1g.5gb:2"},
                {"{1g.5gb: 0, 7c.7g.40gb: 1}", "7g.40gb:1"},
                {"{1g.5gb: 1, 01g.5gb: 2, 1c.1g.5gb: 1}", "1g.5gb:4"},
                {"{1c.3g.20gb: 2, 3g.20gb: 0}", "1c.3g.20gb:2"},
                {"{1g.10gb+me: 1, 1g.10gb: 2}", "1g.10gb:2, 1g.10gb+me:1"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char yaml[512], got[256];
                _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                struct mk_error e = {0};
                struct mk_layout l = {.n_items = 99};
                snprintf(yaml, sizeof(yaml), V1 "  a: [{devices: all, mig-enabled: true, mig-devices: %s}]\n",
                         cases[i].mig_devices);
                if (mk_config_parse(yaml, strlen(yaml), FILE_NAME, &c, &e) < 0)
                        fail_msg("%s: %s", cases[i].mig_devices, e.msg);
                assert_int_equal(mk_config_entry_layout(&c->configs[0].entries[0], &l), 0);
                assert_true(mk_layout_format(&l, got, sizeof(got)) >= 0);
                if (!streq(got, cases[i].want))
                        fail_msg("%s: layout '%s', want '%s'", cases[i].mig_devices, got, cases[i].want);
                for (size_t k = 0; k < l.n_items; k++)
                        assert_true(l.items[k].count > 0);
                mk_layout_done(&l);
        }
}

/* ---- the YAML layer ---- */

static void test_yaml_format_float32(void **state) {
        static const struct {
                double f;
                const char *want;
        } cases[] = {
                {1.5, "1.5"},       {1.0, "1"},           {0.1, "0.1"},          {100000, "100000"},
                {1e6, "1e+06"},     {1234567, "1.234567e+06"}, {0.0001, "0.0001"}, {0.00001, "1e-05"},
                {3.14159265358979, "3.1415927"}, {-2.5, "-2.5"}, {0, "0"},        {12.4, "12.4"},
                {1e21, "1e+21"},    {123456, "123456"},   {16777217, "1.6777216e+07"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char buf[64];
                assert_true(mk_yaml_format_float32(cases[i].f, buf, sizeof(buf)) > 0);
                if (!streq(buf, cases[i].want))
                        fail_msg("%.17g: '%s', want '%s'", cases[i].f, buf, cases[i].want);
        }
}

/* ---- hooks ---- */

static char *dump_hooks(const struct mk_hooks *h) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (int i = 0; i < _MK_HOOK_MAX; i++)
                for (size_t j = 0; j < h->n_entries[i]; j++) {
                        const struct mk_hook_entry *x = &h->entries[i][j];
                        assert_int_equal(mk_buf_printf(&b, "%s%s[%s", b.len ? " " : "", mk_hook_to_string(i), x->command), 0);
                        assert_non_null(x->args);
                        assert_non_null(x->envs);
                        for (char **a = x->args; *a; a++)
                                assert_int_equal(mk_buf_printf(&b, " '%s'", *a), 0);
                        for (char **a = x->envs; *a; a++)
                                assert_int_equal(mk_buf_printf(&b, " env:%s", *a), 0);
                        if (x->workdir)
                                assert_int_equal(mk_buf_printf(&b, " wd:%s", x->workdir), 0);
                        assert_int_equal(mk_buf_puts(&b, "]"), 0);
                }
        char *s = mk_buf_take(&b);
        assert_non_null(s);
        return s;
}

static void test_hook_names(void **state) {
        static const struct {
                const char *s;
                enum mk_hook h;
        } cases[] = {
                {"apply-start", MK_HOOK_APPLY_START},       {"pre-apply-mode", MK_HOOK_PRE_APPLY_MODE},
                {"pre-apply-config", MK_HOOK_PRE_APPLY_CONFIG}, {"apply-exit", MK_HOOK_APPLY_EXIT},
                {"APPLY-EXIT", MK_HOOK_APPLY_EXIT},         {"apply", _MK_HOOK_INVALID},
                {"", _MK_HOOK_INVALID},                     {NULL, _MK_HOOK_INVALID},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_int_equal(mk_hook_from_string(cases[i].s), cases[i].h);
        for (int i = 0; i < _MK_HOOK_MAX; i++)
                assert_int_equal(mk_hook_from_string(mk_hook_to_string(i)), i);
        assert_null(mk_hook_to_string(_MK_HOOK_MAX));
        assert_null(mk_hook_to_string(_MK_HOOK_INVALID));
}

static void test_hooks_valid(void **state) {
        static const struct {
                const char *name;
                const char *yaml;
                const char *version;
                const char *want;
        } cases[] = {
                {"all four", "version: v1\nhooks:\n"
                             "  apply-exit:\n    - command: /bin/exit\n"
                             "  pre-apply-config:\n    - command: /bin/config\n"
                             "  pre-apply-mode:\n    - command: /bin/mode\n"
                             "  apply-start:\n    - command: /bin/start\n      args: [a, b]\n",
                 "v1", "apply-start[/bin/start 'a' 'b'] pre-apply-mode[/bin/mode] pre-apply-config[/bin/config] apply-exit[/bin/exit]"},
                {"full entry", "hooks:\n  apply-start:\n"
                               "    - command: /usr/bin/logger\n"
                               "      args: [\"-t\", migkit, 1, yes, 1.50, 0x10, ~]\n"
                               "      envs: {B: \"2\", A: 1, C: on, D: ~}\n"
                               "      workdir: /tmp\n",
                 NULL, "apply-start[/usr/bin/logger '-t' 'migkit' '1' 'true' '1.5' '16' '' env:B=2 env:A=1 env:C=true env:D= wd:/tmp]"},
                {"several entries, in order", "hooks:\n  apply-exit:\n    - command: one\n    - command: two\n      workdir: \"\"\n",
                 NULL, "apply-exit[one] apply-exit[two]"},
                {"case-insensitive keys", "Version: v2\nHOOKS:\n  apply-start:\n    - Command: /bin/true\n      ARGS: [x]\n      Envs: {K: v}\n      WorkDir: /\n",
                 "v2", "apply-start[/bin/true 'x' env:K=v wd:/]"},
                {"unknown keys ignored",
                 "version: v1\nextra: 1\nhooks:\n  apply-start:\n    - command: /bin/a\n      timeout: 5\n",
                 "v1", "apply-start[/bin/a]"},
                {"null hook list", "hooks:\n  apply-start:\n", NULL, ""},
                {"null hooks", "version: v1\nhooks:\n", "v1", ""},
                {"no hooks key", "version: v1\n", "v1", ""},
                {"empty file", "", NULL, ""},
                {"null document", "~\n", NULL, ""},
                {"version is not validated", "version: 3\n", "3", ""},
                {"anchors", "hooks:\n  apply-start: &h\n    - command: /bin/x\n  apply-exit: *h\n", NULL,
                 "apply-start[/bin/x] apply-exit[/bin/x]"},
                {"command coerced to a string", "hooks:\n  apply-start:\n    - command: 123\n", NULL, "apply-start[123]"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
                struct mk_error e = {0};
                int r = mk_hooks_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &h, &e);
                if (r < 0)
                        fail_msg("%s: r = %d: %u:%u: %s [%s]", cases[i].name, r, e.line, e.column, e.msg, e.field);
                assert_string_equal(h->file, FILE_NAME);
                if (cases[i].version)
                        assert_string_equal(h->version, cases[i].version);
                else
                        assert_null(h->version);
                _cleanup_free_ char *got = dump_hooks(h);
                if (!streq(got, cases[i].want))
                        fail_msg("%s:\n  got  '%s'\n  want '%s'", cases[i].name, got, cases[i].want);
        }
}

static void test_hooks_invalid(void **state) {
        static const struct {
                const char *name;
                const char *yaml;
                unsigned line, column;
                const char *field;
                const char *msg;
        } cases[] = {
                {"missing command", "hooks:\n  apply-start:\n    - args: [x]\n", 3, 7, "hooks.apply-start[0].command",
                 "missing required field: command"},
                {"null entry", "hooks:\n  apply-exit:\n    - ~\n", 3, 7, "hooks.apply-exit[0].command",
                 "missing required field: command"},
                {"empty command", "hooks:\n  apply-start:\n    - command: \"\"\n", 3, 16, "hooks.apply-start[0].command",
                 "invalid empty command"},
                {"command a list", "hooks:\n  apply-start:\n    - command: [a]\n", 3, 16, "hooks.apply-start[0].command",
                 "json: cannot unmarshal array into Go value of type string"},
                {"args a string", "hooks:\n  apply-start:\n    - command: a\n      args: x\n", 4, 13,
                 "hooks.apply-start[0].args", "json: cannot unmarshal string into Go value of type []string"},
                {"arg a mapping", "hooks:\n  apply-start:\n    - command: a\n      args: [x, {}]\n", 4, 17,
                 "hooks.apply-start[0].args[1]", "json: cannot unmarshal object into Go value of type string"},
                {"envs a list", "hooks:\n  apply-start:\n    - command: a\n      envs: [A=1]\n", 4, 13,
                 "hooks.apply-start[0].envs", "json: cannot unmarshal array into Go value of type v1.EnvsMap"},
                {"env value a list", "hooks:\n  apply-start:\n    - command: a\n      envs: {A: [1]}\n", 4, 17,
                 "hooks.apply-start[0].envs.A", "json: cannot unmarshal array into Go value of type string"},
                {"env name with '='", "hooks:\n  apply-start:\n    - command: a\n      envs: {\"A=B\": 1}\n", 4, 14,
                 "hooks.apply-start[0].envs.A=B", "invalid environment variable name 'A=B'"},
                {"workdir a mapping", "hooks:\n  apply-start:\n    - command: a\n      workdir: {}\n", 4, 16,
                 "hooks.apply-start[0].workdir", "json: cannot unmarshal object into Go value of type string"},
                {"hook a mapping", "hooks:\n  apply-start: {command: a}\n", 2, 16, "hooks.apply-start",
                 "json: cannot unmarshal object into Go value of type []v1.HookSpec"},
                {"entry a string", "hooks:\n  apply-start: [a]\n", 2, 17, "hooks.apply-start[0]",
                 "json: cannot unmarshal string into Go value of type v1.HookSpec"},
                {"hooks a list", "hooks: []\n", 1, 8, "hooks", "json: cannot unmarshal array into Go value of type v1.HooksMap"},
                {"top level a list", "- a\n", 1, 1, "", "json: cannot unmarshal array into Go value of type v1.Spec"},
                {"unknown hook: a typo", "hooks:\n  apply-start: []\n  pre-apply-configg:\n    - command: x\n", 3, 3,
                 "hooks.pre-apply-configg", "unknown hook 'pre-apply-configg' (did you mean 'pre-apply-config'?)"},
                {"unknown hook: case", "hooks:\n  Apply-Start:\n    - {}\n", 2, 3, "hooks.Apply-Start",
                 "unknown hook 'Apply-Start' (did you mean 'apply-start'?)"},
                {"unknown hook: none close", "hooks:\n  later:\n    - command: [x]\n", 2, 3, "hooks.later",
                 "unknown hook 'later' (known: apply-start, pre-apply-mode, pre-apply-config, apply-exit)"},
                {"keys equal but for case", "hooks:\n  apply-start:\n    - command: a\n      Command: b\n", 4, 7,
                 "hooks.apply-start[0].Command", "duplicate key: Command"},
                {"duplicate hook", "hooks:\n  apply-exit: []\n  apply-exit: []\n", 3, 3, "hooks.apply-exit",
                 "duplicate key: apply-exit"},
                {"syntax error", "hooks:\n  apply-start:\n    - command: \"a\n", 4, 1, "", "invalid YAML: *"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
                struct mk_error e = {0};
                int r = mk_hooks_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &h, &e);
                check_error(cases[i].name, r, &e, -EINVAL, FILE_NAME, cases[i].line, cases[i].column, cases[i].field,
                            cases[i].msg);
                assert_null(h);
        }
}

/* A GPU index listed twice is accepted (upstream selects the GPU once) and
 * reported once, at the first repeat. */
static void test_config_duplicate_device(void **state) {
        static const char yaml[] = V1 "  a:\n    - devices: [3]\n      mig-enabled: false\n"
                                      "    - devices: [0, 2, 0, 2]\n      mig-enabled: false\n";
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(yaml, strlen(yaml), FILE_NAME, &c, &e), 0);
        assert_int_equal(c->configs[0].entries[1].n_devices, 4);
        struct mk_error w = {0};
        assert_int_equal(mk_config_duplicate_device(c, &c->configs[0], &w), 1);
        check_error("index twice", w.code, &w, -EINVAL, FILE_NAME, 6, 23, "",
                    "GPU index 0 is listed twice in 'devices' of mig-configs.a[1]: it is selected once (as mig-parted "
                    "does)");
        static const char once[] = V1 "  a:\n    - devices: [0, 1]\n      mig-enabled: false\n"
                                      "  b:\n    - devices: all\n      mig-enabled: false\n";
        c = mk_config_free(c);
        assert_int_equal(mk_config_parse(once, strlen(once), FILE_NAME, &c, &e), 0);
        w = (struct mk_error){0};
        assert_int_equal(mk_config_duplicate_device(c, &c->configs[0], &w), 0);
        assert_int_equal(mk_config_duplicate_device(c, &c->configs[1], &w), 0);
        assert_int_equal(w.code, 0);
}

/* ---- encodings: tests/fixtures/encoding/ ---- */

/* What libyaml reads is read; what it would misread (a doubled BOM read as
 * an empty document: "selected mig-config not present") is refused at its
 * position, naming the encoding. Columns count characters. */
static void test_encodings(void **state) {
        static const struct {
                const char *file;
                bool hooks;
                unsigned line, column; /* 0: parses */
                const char *msg;
        } cases[] = {
                {"utf8.yaml", false, 0, 0, NULL},
                {"utf8-bom.yaml", false, 0, 0, NULL},
                {"utf16le-bom.yaml", false, 0, 0, NULL},
                {"utf16be-bom.yaml", false, 0, 0, NULL},
                {"hooks-utf16le-bom.yaml", true, 0, 0, NULL},
                {"utf8-bom-twice.yaml", false, 1, 1, "a byte-order mark (U+FEFF) inside the text: only one is allowed*"},
                {"utf8-bom-inside.yaml", false, 3, 3, "a byte-order mark (U+FEFF) inside the text*"},
                {"utf16le-bom-twice.yaml", false, 1, 1, "a byte-order mark (U+FEFF) inside the text*"},
                {"utf16be-bom-inside.yaml", false, 5, 7, "a byte-order mark (U+FEFF) inside the text*"},
                {"hooks-utf16le-bom-twice.yaml", true, 1, 1, "a byte-order mark (U+FEFF) inside the text*"},
                {"utf8-nul.yaml", false, 2, 5, "a NUL character: YAML text cannot hold one*"},
                {"utf16le.yaml", false, 1, 1,
                 "the file looks like UTF-16LE without a byte-order mark; migkit reads YAML as UTF-8, or UTF-16 with a "
                 "byte-order mark: convert it, e.g. with iconv -f UTF-16LE -t UTF-8"},
                {"utf16be.yaml", false, 1, 1, "the file looks like UTF-16BE without a byte-order mark;*"},
                {"utf32le.yaml", false, 1, 1, "the file looks like UTF-32LE without a byte-order mark;*"},
                {"utf32be.yaml", false, 1, 1, "the file looks like UTF-32BE without a byte-order mark;*"},
                {"utf32le-bom.yaml", false, 1, 1,
                 "the file is UTF-32LE (it starts with that byte-order mark); migkit reads YAML as UTF-8, or UTF-16 "
                 "with a byte-order mark: convert it, e.g. with iconv -f UTF-32LE -t UTF-8"},
                {"utf32be-bom.yaml", false, 1, 1, "the file is UTF-32BE (it starts with that byte-order mark);*"},
        };
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *path = NULL;
                assert_true(asprintf(&path, "%s/tests/fixtures/encoding/%s", src ? src : ".", cases[i].file) > 0);
                struct mk_error e = {0};
                int r;
                if (cases[i].hooks) {
                        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
                        r = mk_hooks_load(path, &h, &e);
                        if (r >= 0 && (h->n_entries[MK_HOOK_APPLY_START] != 1 ||
                                       !streq(h->entries[MK_HOOK_APPLY_START][0].command, "/bin/true")))
                                fail_msg("%s: the apply-start hook was misread", cases[i].file);
                } else {
                        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
                        r = mk_config_load(path, &c, &e);
                        if (r >= 0 && (c->n_configs != 1 || !streq(c->configs[0].name, "c") ||
                                       c->configs[0].n_entries != 1 || !c->configs[0].entries[0].all_devices))
                                fail_msg("%s: config 'c' was misread", cases[i].file);
                }
                if (!cases[i].msg) {
                        if (r < 0)
                                fail_msg("%s: r = %d: %u:%u: %s", cases[i].file, r, e.line, e.column, e.msg);
                        continue;
                }
                check_error(cases[i].file, r, &e, -EINVAL, path, cases[i].line, cases[i].column, "", cases[i].msg);
        }
}

static void test_hooks_caps(void **state) {
        struct mk_hooks *h = NULL;
        struct mk_error e = {0};
        int r;

        _cleanup_free_ char *args = repeat("hooks:\n  apply-start:\n    - command: a\n      args: [", "x, ",
                                           MK_MAX_HOOK_ARGS, "x]\n");
        r = mk_hooks_parse(args, strlen(args), FILE_NAME, &h, &e);
        check_error("too many args", r, &e, -EINVAL, FILE_NAME, 4, 13, "hooks.apply-start[0].args",
                    "too many args (at most 256)");

        char big[MK_MAX_HOOK_STRING + 2];
        memset(big, 'c', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        _cleanup_free_ char *cmd = repeat("hooks:\n  apply-start:\n    - command: ", big, 1, "\n");
        r = mk_hooks_parse(cmd, strlen(cmd), FILE_NAME, &h, &e);
        check_error("long command", r, &e, -EINVAL, FILE_NAME, 3, 16, "hooks.apply-start[0].command",
                    "command too long (at most 4096 bytes)");

        big[MK_MAX_HOOK_STRING - 2] = 0; /* "K=" + value is exactly the cap */
        _cleanup_free_ char *env_ok = repeat("hooks:\n  apply-start:\n    - command: a\n      envs: {K: ", big, 1, "}\n");
        r = mk_hooks_parse(env_ok, strlen(env_ok), FILE_NAME, &h, &e);
        assert_int_equal(r, 0);
        assert_int_equal(strlen(h->entries[MK_HOOK_APPLY_START][0].envs[0]), MK_MAX_HOOK_STRING);
        h = mk_hooks_free(h);
        big[MK_MAX_HOOK_STRING - 2] = 'c'; /* one byte over */
        big[MK_MAX_HOOK_STRING - 1] = 0;
        _cleanup_free_ char *env = repeat("hooks:\n  apply-start:\n    - command: a\n      envs: {K: ", big, 1, "}\n");
        r = mk_hooks_parse(env, strlen(env), FILE_NAME, &h, &e);
        check_error("long env", r, &e, -EINVAL, FILE_NAME, 4, 17, "hooks.apply-start[0].envs.K",
                    "environment variable too long (at most 4096 bytes)");

        size_t n = MK_MAX_YAML_BYTES + 1;
        _cleanup_free_ char *blank = malloc(n);
        assert_non_null(blank);
        memset(blank, '\n', n);
        r = mk_hooks_parse(blank, n, FILE_NAME, &h, &e);
        check_error("too big", r, &e, -E2BIG, FILE_NAME, 0, 0, "", "'t.yaml' is larger than 4194304 bytes");
        assert_null(h);

        /* An unset hooks file means no hooks. */
        assert_int_equal(mk_hooks_load(NULL, &h, &e), 0);
        assert_int_equal(h->n_entries[MK_HOOK_APPLY_START], 0);
        h = mk_hooks_free(h);
        assert_int_equal(mk_hooks_load("", &h, &e), 0);
        h = mk_hooks_free(h);
        assert_null(mk_hooks_free(NULL));
        assert_null(mk_config_free(NULL));
}

/* ---- files ---- */

static void test_load_files(void **state) {
        struct mk_error e = {0};
        struct mk_config *c = NULL;
        struct mk_hooks *h = NULL;

        assert_int_equal(mk_config_load("/nonexistent/migkit.yaml", &c, &e), -ENOENT);
        assert_null(c);
        assert_int_equal(mk_hooks_load("/nonexistent/hooks.yaml", &h, &e), -ENOENT);
        assert_null(h);

        char path[] = "/tmp/test-spec.XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        static const char bad[] = V1 "  a:\n    - devices: all\n";
        assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t) strlen(bad));
        close(fd);
        assert_int_equal(mk_config_load(path, &c, &e), -EINVAL);
        check_error("load", -EINVAL, &e, -EINVAL, path, 4, 7, "mig-configs.a[0].mig-enabled",
                    "missing required field: mig-enabled");
        char buf[1024], want[1024];
        snprintf(want, sizeof(want), "%s:4:7: missing required field: mig-enabled", path);
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), want);
        unlink(path);
}

static void test_examples(void **state) {
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        if (!src || !*src)
                skip();
        char path[PATH_MAX];
        struct mk_error e = {0};

        snprintf(path, sizeof(path), "%s/examples/config.yaml", src);
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        if (mk_config_load(path, &c, &e) < 0)
                fail_msg("%s:%u:%u: %s [%s]", e.file, e.line, e.column, e.msg, e.field);
        static const char *const names[] = {"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.10gb", "all-2g.10gb",
                                            "all-3g.20gb", "all-7g.40gb", "all-balanced", "custom-config",
                                            "all-1c.3g.20gb"};
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                const struct mk_named_config *nc = NULL;
                if (mk_config_select(c, names[i], &nc, &e) < 0)
                        fail_msg("examples/config.yaml: %s", e.msg);
        }
        /* all-balanced picks the layout by board. */
        const struct mk_named_config *bal = NULL;
        assert_int_equal(mk_config_select(c, "all-balanced", &bal, &e), 0);
        bool a100_40 = false, h100 = false;
        for (size_t i = 0; i < bal->n_entries; i++) {
                a100_40 = a100_40 || mk_config_entry_matches(&bal->entries[i], 0, 0x20B010DE, 0x134F10DE);
                h100 = h100 || mk_config_entry_matches(&bal->entries[i], 0, 0x233010DE, 0x16C110DE);
        }
        assert_true(a100_40);
        assert_true(h100);

        snprintf(path, sizeof(path), "%s/examples/hooks.yaml", src);
        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
        if (mk_hooks_load(path, &h, &e) < 0)
                fail_msg("%s:%u:%u: %s [%s]", e.file, e.line, e.column, e.msg, e.field);
        for (int i = 0; i < _MK_HOOK_MAX; i++)
                if (h->n_entries[i] == 0)
                        fail_msg("examples/hooks.yaml has no %s hook", mk_hook_to_string(i));
}

/* The parser frame (mk_yaml_parse_walk, mk_yaml_load_walk): the walk sees
 * the file's name, the root or NULL, and its result comes back; the cap and
 * read errors come before it. */
static int walk_record(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata) {
        char *buf = userdata;
        snprintf(buf, 128, "%s:%s", c->file, !root ? "none" : root->kind == MK_YAML_MAPPING ? "map" : "other");
        return root && root->kind == MK_YAML_SEQUENCE ? mk_yaml_error(c, root, "no lists here") : 0;
}

static void test_yaml_walk(void **state) {
        char got[128] = "";
        struct mk_error e = {0};
        assert_int_equal(mk_yaml_parse_walk("a: 1\n", 5, "x.yaml", 64, walk_record, got, &e), 0);
        assert_string_equal(got, "x.yaml:map");
        assert_int_equal(mk_yaml_parse_walk(NULL, 0, NULL, 64, walk_record, got, &e), 0);
        assert_string_equal(got, "<input>:none");
        assert_int_equal(mk_yaml_parse_walk("[1]\n", 4, "l.yaml", 64, walk_record, got, &e), -EINVAL);
        assert_string_equal(e.msg, "no lists here");
        assert_int_equal(e.line, 1);
        got[0] = 0;
        mk_error_clear(&e);
        assert_int_equal(mk_yaml_parse_walk("a: 1\n", 5, "big.yaml", 4, walk_record, got, &e), -E2BIG);
        assert_string_equal(got, "");
        assert_string_equal(e.msg, "'big.yaml' is larger than 4 bytes");
        mk_error_clear(&e);
        assert_int_equal(mk_yaml_load_walk("/nonexistent/x.yaml", 64, walk_record, got, &e), -ENOENT);
        assert_string_equal(got, "");
        assert_non_null(strstr(e.msg, "/nonexistent/x.yaml"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_config_valid),
                cmocka_unit_test(test_config_bool_forms),
                cmocka_unit_test(test_config_empty),
                cmocka_unit_test(test_config_invalid),
                cmocka_unit_test(test_encodings),
                cmocka_unit_test(test_config_duplicate_device),
                cmocka_unit_test(test_config_caps),
                cmocka_unit_test(test_config_positions),
                cmocka_unit_test(test_config_select),
                cmocka_unit_test(test_device_filter_parse),
                cmocka_unit_test(test_device_filter_match),
                cmocka_unit_test(test_entry_matches),
                cmocka_unit_test(test_entry_layout),
                cmocka_unit_test(test_yaml_format_float32),
                cmocka_unit_test(test_yaml_walk),
                cmocka_unit_test(test_hook_names),
                cmocka_unit_test(test_hooks_valid),
                cmocka_unit_test(test_hooks_invalid),
                cmocka_unit_test(test_hooks_caps),
                cmocka_unit_test(test_load_files),
                cmocka_unit_test(test_examples),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
