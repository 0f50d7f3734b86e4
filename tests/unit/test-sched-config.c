/* Unit tests for spec/sched-config: the scheduler's device config in both
 * forms (ours and HAMi's device-config.yaml), as data: YAML in, a one-line
 * dump or an error with file:line:column out. */
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
#include "spec/sched-config.h"

/* "[A100-SXM4-40GB|A100 40GB: 1g.5gb 3g.20gb] node1=mig res=nvidia.com/gpu,..." */
static char *dump(const struct mk_sched_config *c) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        for (size_t i = 0; i < c->n_models; i++) {
                assert_int_equal(mk_buf_puts(&b, "["), 0);
                for (size_t k = 0; k < c->models[i].n_models; k++)
                        assert_int_equal(mk_buf_printf(&b, "%s%s", k ? "|" : "", c->models[i].models[k]), 0);
                assert_int_equal(mk_buf_puts(&b, ":"), 0);
                for (size_t k = 0; k < c->models[i].n_profiles; k++) {
                        char name[MK_PROFILE_NAME_MAX];
                        assert_true(mk_profile_name_format(&c->models[i].profiles[k], name, sizeof(name)) > 0);
                        assert_int_equal(mk_buf_printf(&b, " %s", name), 0);
                }
                assert_int_equal(mk_buf_puts(&b, "] "), 0);
        }
        for (size_t i = 0; i < c->n_nodes; i++) {
                const struct mk_sched_node_config *n = &c->nodes[i];
                assert_int_equal(mk_buf_printf(&b, "%s=%s", n->name, mk_sched_mode_to_string(n->mode)), 0);
                if (n->split)
                        assert_int_equal(mk_buf_printf(&b, ",split=%u", n->split), 0);
                if (n->mode_switch != MK_SCHED_SWITCH_NEVER)
                        assert_int_equal(
                                mk_buf_printf(&b, ",switch=%s", mk_sched_mode_switch_to_string(n->mode_switch)), 0);
                for (size_t k = 0; k < n->n_gpus; k++)
                        assert_int_equal(mk_buf_printf(&b, ",gpu%u=%s", n->gpus[k].index,
                                                       mk_sched_mode_to_string(n->gpus[k].mode)),
                                         0);
                assert_int_equal(mk_buf_puts(&b, " "), 0);
        }
        if (c->split != MK_SCHED_DEFAULT_SPLIT)
                assert_int_equal(mk_buf_printf(&b, "split=%u ", c->split), 0);
        assert_int_equal(mk_buf_printf(&b, "res=%s,%s,%s,%s", c->resource_count, c->resource_memory,
                                       c->resource_memory_percentage, c->resource_cores),
                         0);
        return mk_buf_take(&b);
}

#define DEFRES "res=nvidia.com/gpu,nvidia.com/gpumem,nvidia.com/gpumem-percentage,nvidia.com/gpucores"

static const struct {
        const char *name, *yaml, *want;
} valid_cases[] = {
        {"empty", "", DEFRES},
        {"ours",
         "version: v1\nallowedProfiles:\n  - models: [A100-SXM4-80GB, A100 80GB]\n"
         "    profiles: [1g.10gb, 1g.20gb, 1g.10gb+me, 3g.40gb, 07g.80gb]\n",
         "[A100-SXM4-80GB|A100 80GB: 1g.10gb 1g.20gb 1g.10gb+me 3g.40gb 7g.80gb] " DEFRES},
        {"duplicate profile kept once", "version: v1\nallowedProfiles:\n  - models: [A30]\n    profiles: [1g.6gb, 1g.6gb]\n",
         "[A30: 1g.6gb] " DEFRES},
        {"nodeconfig, HAMi's default mode",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mig\n  - name: n2\n    devicesplitcount: 4\n",
         "n1=mig n2=hami-core,split=4 " DEFRES},
        {"unified pool: mixed node, per-GPU modes, split counts",
         "version: v1\ndeviceSplitCount: 5\nnodeconfig:\n  - name: m\n    operatingmode: mixed\n"
         "    modeswitch: idle\n    gpus: [{index: 0, mode: mig}, {index: 3, mode: hami-core}, "
         "{mode: disabled, index: 1}]\n  - name: h\n    operatingmode: hami-core\n    devicesplitcount: 1\n"
         "  - name: m2\n    operatingmode: mixed\n    modeswitch: never\n  - name: d\n    operatingmode: disabled\n",
         "m=mixed,switch=idle,gpu0=mig,gpu3=hami-core,gpu1=disabled h=hami-core,split=1 m2=mixed d=disabled split=5 "
         DEFRES},
        {"HAMi deviceSplitCount in nvidia", "nvidia:\n  deviceSplitCount: 3\n", "split=3 " DEFRES},
        {"HAMi knownMigGeometries",
         "nvidia:\n  resourceCountName: nvidia.com/gpu\n  resourceMemoryName: nvidia.com/gpumem\n"
         "  defaultMemory: 0\n  deviceSplitCount: 10\n  knownMigGeometries:\n"
         "  - models: [\"A30\"]\n    allowedGeometries:\n"
         "      - - name: 1g.6gb\n          memory: 6144\n          count: 4\n"
         "      - - name: 2g.12gb\n          memory: 12288\n          count: 2\n"
         "      - - name: 4g.24gb\n          memory: 24576\n          count: 1\n"
         "cambricon:\n  resourceCountName: cambricon.com/mlu\n",
         "[A30: 1g.6gb 2g.12gb 4g.24gb] " DEFRES},
        {"Volcano groups and v2.10 allowlist",
         "nvidia:\n  knownMigGeometries:\n  - models: [A100-SXM4-40GB]\n    allowedGeometries:\n"
         "      - group: g0\n        geometries:\n        - name: 1g.5gb\n          memory: 5120\n          count: 7\n"
         "  migProfileAllowlist:\n  - models: [H100]\n    profiles: [1g.10gb, 7g.80gb]\n"
         "  resourceCoreName: example.com/cores\n",
         "[A100-SXM4-40GB: 1g.5gb] [H100: 1g.10gb 7g.80gb] "
         "res=nvidia.com/gpu,nvidia.com/gpumem,nvidia.com/gpumem-percentage,example.com/cores"},
};

static void test_valid(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(valid_cases); i++) {
                struct mk_sched_config *c = NULL;
                struct mk_error e = {0};
                int r = mk_sched_config_parse(valid_cases[i].yaml, strlen(valid_cases[i].yaml), "cfg.yaml", &c, &e);
                if (r < 0)
                        fail_msg("%s: %s", valid_cases[i].name, e.msg);
                char *d = dump(c);
                if (!streq(d, valid_cases[i].want))
                        fail_msg("%s:\n got  '%s'\n want '%s'", valid_cases[i].name, d, valid_cases[i].want);
                free(d);
                mk_sched_config_free(c);
        }
}

static const struct {
        const char *name, *yaml;
        unsigned line, column;
        const char *msg;
} invalid_cases[] = {
        {"version", "version: v2\n", 1, 10, "unsupported version 'v2'"},
        {"unknown key in our form", "version: v1\nallowed: []\n", 2, 1, "unknown field 'allowed'"},
        {"bad profile", "version: v1\nallowedProfiles:\n  - models: [A30]\n    profiles: [1g.6gb, 2x.12gb]\n", 4, 24,
         "2x.12gb"},
        {"CI profile", "version: v1\nallowedProfiles:\n  - models: [A30]\n    profiles: [1c.2g.12gb]\n", 4, 16,
         "compute-instance profile"},
        {"no models", "version: v1\nallowedProfiles:\n  - profiles: [1g.6gb]\n", 3, 5, "needs 'models'"},
        {"no profiles", "version: v1\nallowedProfiles:\n  - models: [A30]\n", 3, 5, "needs 'profiles'"},
        {"empty models", "version: v1\nallowedProfiles:\n  - models: []\n    profiles: []\n", 3, 13,
         "models must not be empty"},
        {"profiles not a list", "version: v1\nallowedProfiles:\n  - models: [A30]\n    profiles: 1g.6gb\n", 4, 15,
         "must be a list"},
        {"geometry without name", "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries:\n"
                                  "      - - memory: 6144\n",
         5, 11, "needs a name"},
        {"geometry bad count", "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries:\n"
                               "      - - name: 1g.6gb\n          count: -1\n",
         6, 18, "count must be between"},
        {"geometry unknown key", "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries:\n"
                                 "      - - name: 1g.6gb\n          size: 1\n",
         6, 11, "unknown field 'size'"},
        {"bad mode", "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: fast\n", 4, 20, "unknown operatingmode"},
        {"node twice", "version: v1\nnodeconfig:\n  - name: n1\n  - name: n1\n", 4, 5, "listed twice"},
        {"node without name", "nodeconfig:\n  - operatingmode: mig\n", 2, 5, "needs a name"},
        {"not a mapping", "- a\n", 1, 1, "must be a mapping"},
        {"mixed as a GPU's mode",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    gpus:\n      - index: 0\n"
         "        mode: mixed\n",
         7, 15, "unknown mode 'mixed' (mig, hami-core or disabled)"},
        {"gpus on a mig node",
         "version: v1\nnodeconfig:\n  - name: n1\n    gpus: [{index: 0, mode: mig}]\n    operatingmode: mig\n", 3,
         5, "gpus and modeswitch are for operatingmode mixed, not mig"},
        {"modeswitch on a default (hami-core) node", "version: v1\nnodeconfig:\n  - name: n1\n    modeswitch: idle\n",
         3, 5, "for operatingmode mixed, not hami-core"},
        {"bad modeswitch", "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    modeswitch: busy\n",
         5, 17, "unknown modeswitch 'busy' (never or idle)"},
        {"GPU twice",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    gpus:\n      - {index: 1, mode: mig}\n"
         "      - {index: 1, mode: hami-core}\n",
         7, 9, "GPU 1 is listed twice"},
        {"gpus entry without mode",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    gpus: [{index: 2}]\n", 5, 12,
         "needs an index and a mode"},
        {"gpus entry unknown key",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    gpus: [{index: 2, uuid: x}]\n", 5,
         23, "unknown field 'uuid'"},
        {"GPU index out of range",
         "version: v1\nnodeconfig:\n  - name: n1\n    operatingmode: mixed\n    gpus: [{index: 64, mode: mig}]\n", 5,
         20, "index must be between 0 and 63"},
        {"split zero", "version: v1\nnodeconfig:\n  - name: n1\n    devicesplitcount: 0\n", 4, 23,
         "devicesplitcount must be between 1 and 64"},
        {"split not a number", "nvidia:\n  deviceSplitCount: many\n", 2, 21, "deviceSplitCount must be an integer"},
        {"split too big in our form", "version: v1\ndeviceSplitCount: 65\n", 2, 19, "between 1 and 64"},
        {"nvidia not a mapping", "nvidia: 3\n", 1, 9, "must be a mapping"},
        {"duplicate key", "version: v1\nversion: v1\n", 2, 1, "duplicate key"},
};

static void test_invalid(void **state) {
        (void) state;
        unsigned bad = 0;
        for (size_t i = 0; i < ELEMENTSOF(invalid_cases); i++) {
                struct mk_sched_config *c = NULL;
                struct mk_error e = {0};
                int r = mk_sched_config_parse(invalid_cases[i].yaml, strlen(invalid_cases[i].yaml), "cfg.yaml", &c,
                                              &e);
                if (r >= 0)
                        fail_msg("%s: accepted", invalid_cases[i].name);
                assert_null(c);
                if (!strstr(e.msg, invalid_cases[i].msg) || e.line != invalid_cases[i].line ||
                    e.column != invalid_cases[i].column || !streq(e.file, "cfg.yaml"))
                        print_error("%s: got %s:%u:%u '%s', want %u:%u '%s'\n", invalid_cases[i].name, e.file,
                                    e.line, e.column, e.msg, invalid_cases[i].line, invalid_cases[i].column,
                                    invalid_cases[i].msg),
                                bad++;
        }
        assert_int_equal(bad, 0);
}

static void test_match_and_modes(void **state) {
        (void) state;
        const char *y = "version: v1\nallowedProfiles:\n  - models: [a100-sxm4-80gb]\n    profiles: [1g.10gb, 1g.20gb]\n"
                        "  - models: [A100]\n    profiles: [7g.40gb]\nnodeconfig:\n  - name: soft\n"
                        "    operatingmode: hami-core\n";
        struct mk_sched_config *c = NULL;
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &c, NULL), 0);
        struct mk_profile_name p10, p20, pme, p7;
        assert_int_equal(mk_profile_name_parse("1g.10gb", &p10, NULL), 0);
        assert_int_equal(mk_profile_name_parse("1g.20gb", &p20, NULL), 0);
        assert_int_equal(mk_profile_name_parse("1g.10gb+me", &pme, NULL), 0);
        assert_int_equal(mk_profile_name_parse("7g.40gb", &p7, NULL), 0);
        /* First match wins, case-insensitive substring; +me is its own profile. */
        assert_true(mk_sched_config_allows(c, "NVIDIA A100-SXM4-80GB", &p10));
        assert_true(mk_sched_config_allows(c, "NVIDIA A100-SXM4-80GB", &p20));
        assert_false(mk_sched_config_allows(c, "NVIDIA A100-SXM4-80GB", &pme));
        assert_false(mk_sched_config_allows(c, "NVIDIA A100-SXM4-80GB", &p7));
        assert_true(mk_sched_config_allows(c, "NVIDIA A100-SXM4-40GB", &p7));
        assert_false(mk_sched_config_allows(c, "NVIDIA H100 80GB HBM3", &p7));
        assert_null(mk_sched_config_match(c, "NVIDIA H100"));
        assert_int_equal(mk_sched_config_node_mode(c, "soft"), MK_SCHED_MODE_HAMI_CORE);
        assert_int_equal(mk_sched_config_node_mode(c, "other"), MK_SCHED_MODE_MIG);
        mk_sched_config_free(c);
        /* No entries: everything allowed. */
        assert_int_equal(mk_sched_config_load(NULL, &c, NULL), 0);
        assert_true(mk_sched_config_allows(c, "anything", &pme));
        mk_sched_config_free(c);
        assert_int_equal(mk_sched_mode_from_string("mig"), MK_SCHED_MODE_MIG);
        assert_int_equal(mk_sched_mode_from_string("MIG"), -EINVAL);
        assert_string_equal(mk_sched_mode_to_string(MK_SCHED_MODE_DISABLED), "disabled");
}

/* The unified pool's queries: a GPU's mode, the split count, the idle
 * mode-switch rule. */
static void test_gpu_modes(void **state) {
        (void) state;
        const char *y = "version: v1\nnodeconfig:\n  - name: m\n    operatingmode: mixed\n    modeswitch: idle\n"
                        "    devicesplitcount: 4\n    gpus: [{index: 0, mode: mig}, {index: 1, mode: hami-core}, "
                        "{index: 2, mode: disabled}]\n  - name: fixed\n    operatingmode: mixed\n"
                        "  - name: h\n    operatingmode: hami-core\n  - name: d\n    operatingmode: disabled\n";
        struct mk_sched_config *c = NULL;
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &c, NULL), 0);
        /* Listed GPUs follow their entry whatever their MIG state. */
        assert_int_equal(mk_sched_config_gpu_mode(c, "m", 0, false), MK_SCHED_MODE_MIG);
        assert_int_equal(mk_sched_config_gpu_mode(c, "m", 1, true), MK_SCHED_MODE_HAMI_CORE);
        assert_int_equal(mk_sched_config_gpu_mode(c, "m", 2, true), MK_SCHED_MODE_DISABLED);
        /* Unlisted ones follow their MIG state. */
        assert_int_equal(mk_sched_config_gpu_mode(c, "m", 5, true), MK_SCHED_MODE_MIG);
        assert_int_equal(mk_sched_config_gpu_mode(c, "m", 5, false), MK_SCHED_MODE_HAMI_CORE);
        /* Other nodes: the node's mode for every GPU; no entry: mig. */
        assert_int_equal(mk_sched_config_gpu_mode(c, "h", 0, true), MK_SCHED_MODE_HAMI_CORE);
        assert_int_equal(mk_sched_config_gpu_mode(c, "d", 0, true), MK_SCHED_MODE_DISABLED);
        assert_int_equal(mk_sched_config_gpu_mode(c, "none", 0, false), MK_SCHED_MODE_MIG);
        /* Only an unlisted GPU of a mixed node with modeswitch: idle may switch. */
        assert_true(mk_sched_config_may_switch(c, "m", 5));
        assert_false(mk_sched_config_may_switch(c, "m", 0));
        assert_false(mk_sched_config_may_switch(c, "fixed", 5));
        assert_false(mk_sched_config_may_switch(c, "h", 5));
        assert_false(mk_sched_config_may_switch(c, "none", 5));
        assert_int_equal(mk_sched_config_split(c, "m"), 4);
        assert_int_equal(mk_sched_config_split(c, "h"), MK_SCHED_DEFAULT_SPLIT);
        assert_int_equal(mk_sched_config_split(c, "none"), MK_SCHED_DEFAULT_SPLIT);
        assert_non_null(mk_sched_config_node(c, "fixed"));
        assert_null(mk_sched_config_node(c, "none"));
        assert_int_equal(mk_sched_mode_from_string("mixed"), MK_SCHED_MODE_MIXED);
        assert_int_equal(mk_sched_mode_switch_from_string("idle"), MK_SCHED_SWITCH_IDLE);
        assert_string_equal(mk_sched_mode_switch_to_string(MK_SCHED_SWITCH_NEVER), "never");
        mk_sched_config_free(c);
}

static void test_caps(void **state) {
        (void) state;
        struct mk_sched_config *c = NULL;
        struct mk_error e = {0};
        size_t n = MK_MAX_SCHED_CONFIG_BYTES + 1;
        char *big = malloc(n);
        assert_non_null(big);
        memset(big, ' ', n);
        assert_int_equal(mk_sched_config_parse(big, n, "big.yaml", &c, &e), -E2BIG);
        free(big);
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        assert_int_equal(mk_buf_puts(&b, "version: v1\nallowedProfiles:\n  - models: [X]\n    profiles: ["), 0);
        for (unsigned i = 0; i <= MK_MAX_SCHED_PROFILES; i++)
                assert_int_equal(mk_buf_printf(&b, "%s1g.%ugb", i ? ", " : "", i + 1), 0);
        assert_int_equal(mk_buf_puts(&b, "]\n"), 0);
        assert_int_equal(mk_sched_config_parse(mk_buf_str(&b), b.len, "many.yaml", &c, &e), -E2BIG);
        mk_buf_done(&b);
        assert_int_equal(mk_sched_config_load("/nonexistent/sched.yaml", &c, &e), -ENOENT);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid),
                cmocka_unit_test(test_invalid),
                cmocka_unit_test(test_match_and_modes),
                cmocka_unit_test(test_caps),
                cmocka_unit_test(test_gpu_modes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
