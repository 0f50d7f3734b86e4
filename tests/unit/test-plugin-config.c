/* Unit tests for spec/plugin-config: the device plugin / GFD v1 config file
 * subset, as data: YAML in, a one-line dump or an error with its position out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "spec/plugin-config.h"

#define FILE_NAME "config.yaml"

/* "mig=mixed sharing=time-slicing fail1=0 [nvidia.com/gpu>nvidia.com/gpu.shared devices=all replicas=4]" */
static char *dump(const struct mk_plugin_config *c) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        assert_int_equal(mk_buf_printf(&b, "mig=%s sharing=%s fail1=%d",
                                       c->has_mig_strategy ? mk_mig_strategy_to_string(c->mig_strategy) : "-",
                                       mk_sharing_strategy_to_string(c->sharing), c->fail_requests_greater_than_one),
                         0);
        for (size_t i = 0; i < c->n_resources; i++) {
                const struct mk_shared_resource *r = &c->resources[i];
                assert_int_equal(mk_buf_printf(&b, " [%s>%s devices=", r->name, r->rename ? r->rename : "-"), 0);
                if (r->devices_all)
                        assert_int_equal(mk_buf_puts(&b, "all"), 0);
                else if (r->devices_count)
                        assert_int_equal(mk_buf_printf(&b, "%u", r->devices_count), 0);
                else
                        for (size_t k = 0; k < r->n_devices; k++)
                                assert_int_equal(mk_buf_printf(&b, "%s%s", k ? "," : "", r->devices[k]), 0);
                assert_int_equal(mk_buf_printf(&b, " replicas=%u%s]", r->replicas, r->replicas_auto ? "(auto)" : ""),
                                 0);
        }
        return mk_buf_take(&b);
}

static const struct valid_case {
        const char *name, *yaml, *want;
} valid_cases[] = {
        {"empty", "", "mig=- sharing=none fail1=0"},
        {"version only", "version: v1\n", "mig=- sharing=none fail1=0"},
        {"mig strategy", "version: v1\nflags:\n  migStrategy: mixed\n", "mig=mixed sharing=none fail1=0"},
        {"other upstream flags ignored",
         "version: v1\nflags:\n  migStrategy: single\n  failOnInitError: true\n  plugin:\n    passDeviceSpecs: true\n"
         "    deviceListStrategy: [envvar, cdi-annotations]\n  gfd:\n    oneshot: false\n    noTimestamp: true\n"
         "resources:\n  gpus:\n  - pattern: '*'\n    name: gpu\nimex:\n  channelIDs: [0]\n",
         "mig=single sharing=none fail1=0"},
        {"time-slicing",
         "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
         "mig=- sharing=time-slicing fail1=0 [nvidia.com/gpu>- devices=all replicas=4]"},
        {"prefix added, rename, renameByDefault",
         "sharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n"
         "    - name: gpu\n      replicas: 2\n    - name: mig-1g.5gb\n      rename: small\n      replicas: 7\n",
         "mig=- sharing=time-slicing fail1=1 [nvidia.com/gpu>nvidia.com/gpu.shared devices=all replicas=2]"
         " [nvidia.com/mig-1g.5gb>nvidia.com/small devices=all replicas=7]"},
        {"devices count and list",
         "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      devices: 2\n      replicas: 3\n"
         "    - name: gpu\n      rename: gpu-fast\n      devices: [2, \"3\", \"0:1\", GPU-8a1b-22, MIG-GPU-8a1b/1/0]\n"
         "      replicas: 2\n",
         "mig=- sharing=time-slicing fail1=0 [nvidia.com/gpu>- devices=2 replicas=3]"
         " [nvidia.com/gpu>nvidia.com/gpu-fast devices=2,3,0:1,GPU-8a1b-22,MIG-GPU-8a1b/1/0 replicas=2]"},
        {"mps wins and forces fail1",
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 9}\n  mps:\n    resources:\n"
         "    - {name: gpu, replicas: 4}\n",
         "mig=- sharing=mps fail1=1 [nvidia.com/gpu>- devices=all replicas=4]"},
        {"mps with an explicit false", "sharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n"
                                       "    - {name: gpu, replicas: 4}\n",
         "mig=- sharing=mps fail1=0 [nvidia.com/gpu>- devices=all replicas=4]"},
        {"empty resources list", "sharing:\n  timeSlicing:\n    resources: []\n", "mig=- sharing=none fail1=0"},
        {"json", "{\"version\": \"v1\", \"flags\": {\"migStrategy\": \"none\"}, \"sharing\": {\"timeSlicing\": "
                 "{\"resources\": [{\"name\": \"gpu\", \"replicas\": 10}]}}}",
         "mig=none sharing=time-slicing fail1=0 [nvidia.com/gpu>- devices=all replicas=10]"},
};

static void test_valid(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(valid_cases); i++) {
                const struct valid_case *t = &valid_cases[i];
                struct mk_error e = {0};
                _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *c = NULL;
                int r = mk_plugin_config_parse(t->yaml, strlen(t->yaml), FILE_NAME, &c, &e);
                if (r < 0) {
                        char buf[1024];
                        fail_msg("case '%s': %s", t->name, mk_error_format(&e, buf, sizeof(buf)));
                }
                _cleanup_free_ char *got = dump(c);
                if (!streq(got, t->want))
                        fail_msg("case '%s':\n got: %s\nwant: %s", t->name, got, t->want);
        }
}

static const struct invalid_case {
        const char *name, *yaml, *want; /* want: "line:column: message substring" */
} invalid_cases[] = {
        {"bad version", "version: v2\n", "1:10: unsupported version 'v2'"},
        {"unknown top key", "version: v1\nfoo: 1\n", "2:1: unknown field 'foo'"},
        {"unknown flag", "flags:\n  migstrategy: mixed\n", "2:3: unknown field 'migstrategy'"},
        {"bad strategy", "flags:\n  migStrategy: double\n", "2:16: unknown MIG strategy 'double'"},
        {"strategy not a string", "flags:\n  migStrategy: 1\n", "2:16: migStrategy must be a string, not number"},
        {"unknown plugin flag", "flags:\n  plugin:\n    frob: 1\n", "3:5: unknown field 'frob'"},
        {"sharing without resources", "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
         "3:5: missing required field 'resources'"},
        {"unknown sharing kind", "sharing:\n  slicing: {}\n", "2:3: unknown field 'slicing'"},
        {"replicas 1", "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 1\n",
         "5:17: replicas must be at least 2"},
        {"replicas missing", "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n",
         "4:7: missing required field 'replicas'"},
        {"replicas huge", "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 100000}\n",
         "4:29: replicas must be at most 1024"},
        {"replicas string", "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: \"4\"}\n",
         "4:29: replicas must be an integer, not string"},
        {"name missing", "sharing:\n  timeSlicing:\n    resources:\n    - replicas: 2\n",
         "4:7: missing required field 'name'"},
        {"name upper case", "sharing:\n  timeSlicing:\n    resources:\n    - {name: GPU, replicas: 2}\n",
         "4:14: invalid resource name 'GPU'"},
        {"name other prefix", "sharing:\n  timeSlicing:\n    resources:\n    - {name: amd.com/gpu, replicas: 2}\n",
         "4:14: invalid resource name 'amd.com/gpu'"},
        {"name too long",
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: "
         "gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, replicas: 2}\n",
         "4:14: resource name 'nvidia.com/gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' longer than 63"},
        {"renamed by default too long",
         "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: "
         "gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, replicas: 2}\n",
         "5:7: resource name 'nvidia.com/gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.shared' longer"},
        {"devices word", "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: some}\n",
         "4:41: devices must be \"all\", a count or a list, not 'some'"},
        {"devices zero", "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: 0}\n",
         "4:41: a devices count must be between 1 and 1024"},
        {"devices bad item", "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
                             "      devices: [0, \"x:1\"]\n",
         "6:20: invalid device 'x:1'"},
        {"devices twice", "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
                          "      devices: [0, \"0\"]\n",
         "6:20: device '0' is listed twice"},
        {"devices empty", "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: []}\n",
         "4:41: devices must not be an empty list"},
        {"renameByDefault not bool", "sharing:\n  timeSlicing:\n    renameByDefault: 1\n    resources: []\n",
         "3:22: must be true or false, not number"},
        {"duplicate key", "version: v1\nversion: v1\n", "2:1: duplicate key: version"},
        {"not a mapping", "- a\n", "1:1: the document must be a mapping, not array"},
        {"malformed", "flags: [\n", "2:1:"},
};

static void test_invalid(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(invalid_cases); i++) {
                const struct invalid_case *t = &invalid_cases[i];
                struct mk_error e = {0};
                struct mk_plugin_config *c = NULL;
                int r = mk_plugin_config_parse(t->yaml, strlen(t->yaml), FILE_NAME, &c, &e);
                if (r >= 0) {
                        mk_plugin_config_free(c);
                        fail_msg("case '%s': parsed, want error '%s'", t->name, t->want);
                }
                assert_null(c);
                char buf[1024], want[512];
                mk_error_format(&e, buf, sizeof(buf));
                snprintf(want, sizeof(want), FILE_NAME ":%s", t->want);
                if (!strstr(buf, want))
                        fail_msg("case '%s':\n got: %s\nwant: %s", t->name, buf, want);
        }
}

static void test_caps(void **state) {
        /* Over the byte cap: -E2BIG before parsing. */
        size_t n = MK_MAX_PLUGIN_CONFIG_BYTES + 1;
        _cleanup_free_ char *big = malloc(n);
        assert_non_null(big);
        memset(big, '#', n);
        struct mk_error e = {0};
        struct mk_plugin_config *c = NULL;
        assert_int_equal(mk_plugin_config_parse(big, n, FILE_NAME, &c, &e), -E2BIG);
        assert_null(c);

        /* Too many resources. */
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        assert_int_equal(mk_buf_puts(&b, "sharing:\n  timeSlicing:\n    resources:\n"), 0);
        for (unsigned i = 0; i <= MK_MAX_SHARED_RESOURCES; i++)
                assert_int_equal(mk_buf_printf(&b, "    - {name: gpu, replicas: 2}\n"), 0);
        assert_int_equal(mk_plugin_config_parse(mk_buf_str(&b), b.len, FILE_NAME, &c, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "too many resources"));
        mk_buf_done(&b);
}

static void test_strings_and_find(void **state) {
        assert_int_equal(mk_mig_strategy_from_string("single"), MK_MIG_STRATEGY_SINGLE);
        assert_int_equal(mk_mig_strategy_from_string("Single"), _MK_MIG_STRATEGY_INVALID);
        assert_int_equal(mk_mig_strategy_from_string(NULL), _MK_MIG_STRATEGY_INVALID);
        assert_string_equal(mk_mig_strategy_to_string(MK_MIG_STRATEGY_MIXED), "mixed");
        assert_null(mk_mig_strategy_to_string(_MK_MIG_STRATEGY_MAX));
        assert_int_equal(mk_sharing_strategy_from_string("time-slicing"), MK_SHARING_TIME_SLICING);
        assert_string_equal(mk_sharing_strategy_to_string(MK_SHARING_MPS), "mps");

        const char *y = "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 3}\n"
                        "    - {name: gpu, replicas: 5}\n";
        struct mk_error e = {0};
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *c = NULL;
        assert_int_equal(mk_plugin_config_parse(y, strlen(y), FILE_NAME, &c, &e), 0);
        const struct mk_shared_resource *r = mk_plugin_config_find(c, "nvidia.com/gpu");
        assert_non_null(r);
        assert_int_equal(r->replicas, 3); /* the first entry */
        assert_null(mk_plugin_config_find(c, "gpu"));
        assert_null(mk_plugin_config_find(NULL, "nvidia.com/gpu"));
        assert_null(mk_plugin_config_free(NULL));
}

static void test_load(void **state) {
        struct mk_error e = {0};
        struct mk_plugin_config *c = NULL;
        assert_int_equal(mk_plugin_config_load("/nonexistent/config.yaml", &c, &e), -ENOENT);
        assert_null(c);
        assert_non_null(strstr(e.msg, "/nonexistent/config.yaml"));
}

/* --resource-config (the iktos fork's string, iktos/k8s-gpu-sharing-plugin). */
static const struct valid_case rc_valid[] = {
        {"fork example", "gpu:sharedgpu:4,mig-3g.20gb:small:2",
         "mig=- sharing=time-slicing fail1=0 [nvidia.com/gpu>nvidia.com/sharedgpu devices=all replicas=4]"
         " [nvidia.com/mig-3g.20gb>nvidia.com/small devices=all replicas=2]"},
        {"helm default, auto", "gpu:gpu-mem-gb:-1",
         "mig=- sharing=time-slicing fail1=0 [nvidia.com/gpu>nvidia.com/gpu-mem-gb devices=all replicas=0(auto)]"},
        {"blanks, empty entries, prefixes, same name", " , nvidia.com/gpu : gpu : 3 ,,",
         "mig=- sharing=time-slicing fail1=0 [nvidia.com/gpu>- devices=all replicas=3]"},
        {"rename only", "gpu:big:1", "mig=- sharing=none fail1=0 [nvidia.com/gpu>nvidia.com/big devices=all replicas=1]"},
        {"empty string", "", "mig=- sharing=none fail1=0"},
};

static const struct { const char *name, *in, *want; } rc_invalid[] = {
        {"two parts", "gpu:4", "--resource-config: entry 1 'gpu:4': want <name>:<rename>:<replicas>, found 2 parts"},
        {"four parts", "gpu:a:4,gpu:b:c:1", "entry 2 'gpu:b:c:1': want <name>:<rename>:<replicas>, found more"},
        {"empty rename", "gpu::4", "entry 1 'gpu::4': empty rename"},
        {"replicas 0", "gpu:a:0", "entry 1: replicas '0' is not -1 (auto) or an integer from 1 to 1024"},
        {"replicas -2", "gpu:a:-2", "replicas '-2' is not -1"},
        {"replicas word", "gpu:a:four", "replicas 'four' is not"},
        {"replicas huge", "gpu:a:99999999999", "replicas '99999999999' is not"},
        {"bad name", "GPU:a:2", "entry 1: invalid name 'GPU': want lower-case"},
        {"other prefix", "gpu:amd.com/gpu:2", "entry 1: invalid rename 'amd.com/gpu': only the 'nvidia.com/' prefix"},
        {"long rename", "gpu:gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:2",
         "entry 1: rename 'gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' longer than 63 characters"},
        {"listed twice", "gpu:a:2,nvidia.com/gpu:b:3", "entry 2: resource 'nvidia.com/gpu' listed twice"},
};

static void test_resource_config(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(rc_valid); i++) {
                struct mk_error e = {0};
                _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *c = NULL;
                if (mk_plugin_config_parse_resource_config(rc_valid[i].yaml, &c, &e) < 0)
                        fail_msg("case '%s': %s", rc_valid[i].name, e.msg);
                assert_string_equal(c->file, "--resource-config");
                _cleanup_free_ char *got = dump(c);
                if (!streq(got, rc_valid[i].want))
                        fail_msg("case '%s':\n got: %s\nwant: %s", rc_valid[i].name, got, rc_valid[i].want);
        }
        for (size_t i = 0; i < ELEMENTSOF(rc_invalid); i++) {
                struct mk_error e = {0};
                struct mk_plugin_config *c = NULL;
                int r = mk_plugin_config_parse_resource_config(rc_invalid[i].in, &c, &e);
                if (r >= 0) {
                        mk_plugin_config_free(c);
                        fail_msg("case '%s': parsed, want error '%s'", rc_invalid[i].name, rc_invalid[i].want);
                }
                assert_int_equal(r, -EINVAL);
                assert_null(c);
                char buf[1024];
                mk_error_format(&e, buf, sizeof(buf));
                if (!strstr(buf, rc_invalid[i].want))
                        fail_msg("case '%s':\n got: %s\nwant: %s", rc_invalid[i].name, buf, rc_invalid[i].want);
        }
        /* Caps: bytes, entries. */
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (unsigned i = 0; i <= MK_MAX_SHARED_RESOURCES; i++)
                assert_int_equal(mk_buf_printf(&b, "g%u:g%u:2,", i, i), 0);
        struct mk_error e = {0};
        struct mk_plugin_config *c = NULL;
        assert_int_equal(mk_plugin_config_parse_resource_config(mk_buf_str(&b), &c, &e), -E2BIG);
        assert_non_null(strstr(e.msg, "more than 256 entries"));
        mk_buf_reset(&b);
        while (b.len <= MK_MAX_RESOURCE_CONFIG_BYTES)
                assert_int_equal(mk_buf_puts(&b, ",,,,,,,,"), 0);
        assert_int_equal(mk_plugin_config_parse_resource_config(mk_buf_str(&b), &c, &e), -E2BIG);
        assert_null(c);
        mk_buf_done(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid),
                cmocka_unit_test(test_invalid),
                cmocka_unit_test(test_caps),
                cmocka_unit_test(test_strings_and_find),
                cmocka_unit_test(test_load),
                cmocka_unit_test(test_resource_config),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
