/* engine/generate: mig-parted's generate-config (mig-parted v0.15.0 generate-config) on
 * hand-built snapshots. GPUs are data (profile name, NVML enum, MaxCount as
 * the driver reports them); expected configs are JSON text compared as
 * canonical dumps, so a failing row prints both values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "engine/generate.h"
#include "spec/emit.h"

/* PCI device ids (0xDDDDVVVV), mig-parted v0.15.0 generate-config. */
#define A100_40 0x20B010DEu
#define A100_80 0x20B210DEu
#define A30 0x20B710DEu
#define H100_80 0x233010DEu
#define H100_94 0x232110DEu
#define H100_96 0x234210DEu
#define H200 0x233510DEu
#define B200 0x290110DEu
#define RTX6000 0x2BB510DEu
#define RTX5000 0x2BB810DEu /* hypothetical id for the RTX PRO 5000-like GPU */
#define T4 0x1EB810DEu

struct prof {
        const char *name; /* NULL: a profile the naming rules cannot name */
        unsigned gi_enum;
        unsigned max_count;
};
#define PROFILES_MAX 16

struct model {
        uint32_t id;
        bool capable;
        struct prof p[PROFILES_MAX]; /* terminated by max_count == 0 && !name */
};

/* Profiles in NVML enum order, with the counts and names the drivers report
 * (nvidia-smi mig -lgip on each model; enums: 0 1g, 1 2g, 2 3g, 3 4g, 4 7g,
 * 7 1g+me, 9 1g (2 memory slices), 10-12 +gfx, 13-14 -me, 15-16 +me.all). */
static const struct model a100_40 = {A100_40, true,
        {{"1g.5gb", 0, 7}, {"2g.10gb", 1, 3}, {"3g.20gb", 2, 2}, {"4g.20gb", 3, 1}, {"7g.40gb", 4, 1},
         {"1g.5gb+me", 7, 1}, {"1g.10gb", 9, 4}}};
static const struct model a100_80 = {A100_80, true,
        {{"1g.10gb", 0, 7}, {"2g.20gb", 1, 3}, {"3g.40gb", 2, 2}, {"4g.40gb", 3, 1}, {"7g.80gb", 4, 1},
         {"1g.10gb+me", 7, 1}, {"1g.20gb", 9, 4}}};
static const struct model h100_80 = {H100_80, true,
        {{"1g.10gb", 0, 7}, {"2g.20gb", 1, 3}, {"3g.40gb", 2, 2}, {"4g.40gb", 3, 1}, {"7g.80gb", 4, 1},
         {"1g.10gb+me", 7, 1}, {"1g.20gb", 9, 4}}};
static const struct model h100_94 = {H100_94, true,
        {{"1g.12gb", 0, 7}, {"2g.24gb", 1, 3}, {"3g.47gb", 2, 2}, {"4g.47gb", 3, 1}, {"7g.94gb", 4, 1},
         {"1g.12gb+me", 7, 1}, {"1g.24gb", 9, 4}}};
static const struct model h100_96 = {H100_96, true,
        {{"1g.12gb", 0, 7}, {"2g.24gb", 1, 3}, {"3g.48gb", 2, 2}, {"4g.48gb", 3, 1}, {"7g.96gb", 4, 1},
         {"1g.12gb+me", 7, 1}, {"1g.24gb", 9, 4}}};
static const struct model h200 = {H200, true,
        {{"1g.18gb", 0, 7}, {"2g.35gb", 1, 3}, {"3g.71gb", 2, 2}, {"4g.71gb", 3, 1}, {"7g.141gb", 4, 1},
         {"1g.18gb+me", 7, 1}, {"1g.35gb", 9, 4}}};
/* Blackwell adds -me and +me.all profiles; the 1g.45gb before 1g.23gb checks
 * that the highest MaxCount, not the first, wins. */
static const struct model b200 = {B200, true,
        {{"1g.45gb", 9, 4}, {"1g.23gb", 0, 7}, {"2g.45gb", 1, 3}, {"3g.90gb", 2, 2}, {"4g.90gb", 3, 1},
         {"7g.180gb", 4, 1}, {"1g.23gb+me", 7, 1}, {"1g.23gb-me", 13, 7}, {"2g.45gb-me", 14, 3},
         {"1g.23gb+me.all", 15, 1}, {"2g.45gb+me.all", 16, 1}}};
/* 4 slots, graphics profiles beside the compute ones. */
static const struct model rtx6000 = {RTX6000, true,
        {{"1g.24gb", 0, 4}, {"2g.48gb", 1, 2}, {"4g.96gb", 3, 1}, {"1g.24gb+me", 7, 1},
         {"1g.24gb+gfx", 10, 4}, {"2g.48gb+gfx", 11, 2}, {"4g.96gb+gfx", 12, 1}, {"1g.24gb-me", 13, 4},
         {"2g.48gb-me", 14, 2}, {"1g.24gb+me.all", 15, 1}, {"2g.48gb+me.all", 16, 1}}};
/* 4 slots without a base 2g profile: no all-balanced. */
static const struct model rtx5000 = {RTX5000, true,
        {{"1g.12gb", 0, 4}, {"4g.48gb", 3, 1}, {"1g.12gb+gfx", 10, 4}, {"2g.24gb+gfx", 11, 2}}};
/* What NVML reports on an A30: counts upstream does not trust. */
static const struct model a30 = {A30, true,
        {{"1g.6gb", 0, 3}, {"2g.12gb", 1, 1}, {"4g.24gb", 3, 1}, {"1g.6gb+me", 7, 3}, {"2g.12gb+me", 8, 2}}};
static const struct model t4 = {T4, false, {{0}}};

static void fill_gpu(struct mk_gpu *g, unsigned index, const struct model *m) {
        g->index = index;
        g->pci_device_id = m->id;
        g->mig_capable = m->capable;
        g->mig_current = g->mig_pending = m->capable ? MK_MIG_DISABLED : MK_MIG_UNSUPPORTED;
        size_t n = 0;
        while (n < PROFILES_MAX && (m->p[n].name || m->p[n].max_count))
                n++;
        g->profiles = calloc(n ? n : 1, sizeof(*g->profiles));
        assert_non_null(g->profiles);
        g->n_profiles = n;
        for (size_t i = 0; i < n; i++) {
                struct mk_gi_profile *p = &g->profiles[i];
                p->nvml_enum = m->p[i].gi_enum;
                p->id = 100 + (unsigned) i;
                p->max_count = m->p[i].max_count;
                if (m->p[i].name) {
                        assert_int_equal(mk_profile_name_parse(m->p[i].name, &p->pname, NULL), 0);
                        snprintf(p->name, sizeof(p->name), "%s", m->p[i].name);
                        p->named = true;
                        p->slices = p->pname.g;
                } else
                        snprintf(p->name, sizeof(p->name), "1g.24gb+gfx3"); /* NVML's own name */
        }
}

/* A snapshot of GPUs, in order; NULL ends the list. */
static struct mk_snapshot *make_snapshot(const struct model *const *models) {
        struct mk_snapshot *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        size_t n = 0;
        while (models[n])
                n++;
        s->gpus = calloc(n ? n : 1, sizeof(*s->gpus));
        assert_non_null(s->gpus);
        s->n_gpus = n;
        for (size_t i = 0; i < n; i++)
                fill_gpu(&s->gpus[i], (unsigned) i, models[i]);
        return s;
}

/* Canonical text of a JSON value (keys sorted), or "(null)". */
static char *canon(const json_t *v) {
        char *s = v ? json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY) : strdup("(null)");
        assert_non_null(s);
        return s;
}

static void assert_json_equal(const json_t *got, const char *want_text) {
        json_error_t err;
        json_t *want = json_loads(want_text, JSON_DECODE_ANY, &err);
        if (!want)
                fail_msg("bad expected JSON '%s': %s", want_text, err.text);
        _cleanup_free_ char *a = canon(got), *b = canon(want);
        json_decref(want);
        assert_string_equal(a, b);
}

static json_t *generate(const struct model *const *models) {
        struct mk_snapshot *s = make_snapshot(models);
        struct mk_error e = {0};
        json_t *root = NULL;
        int r = mk_generate_config(s, &root, &e);
        if (r < 0)
                fail_msg("mk_generate_config: %d %s", r, e.msg);
        mk_snapshot_free(s);
        assert_non_null(root);
        return root;
}

static const json_t *config(const json_t *root, const char *name) {
        return json_object_get(json_object_get(root, "mig-configs"), name);
}

/* ---- all-balanced, upstream balanced_test.go (mig-parted v0.15.0 generate-config table) ---- */

static void test_balanced_table(void **state) {
        static const struct {
                const struct model *m;
                const char *want; /* mig-devices of the one entry; NULL: no all-balanced */
        } rows[] = {
                {&a30, "{\"1g.6gb\": 2, \"2g.12gb\": 1}"},
                {&a100_40, "{\"1g.5gb\": 2, \"2g.10gb\": 1, \"3g.20gb\": 1}"},
                {&a100_80, "{\"1g.10gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}"},
                {&h100_80, "{\"1g.10gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}"},
                {&h100_94, "{\"1g.12gb\": 2, \"2g.24gb\": 1, \"3g.47gb\": 1}"},
                {&h100_96, "{\"1g.12gb\": 2, \"2g.24gb\": 1, \"3g.48gb\": 1}"},
                {&h200, "{\"1g.18gb\": 2, \"2g.35gb\": 1, \"3g.71gb\": 1}"},
                {&b200, "{\"1g.23gb\": 2, \"2g.45gb\": 1, \"3g.90gb\": 1}"},
                {&rtx6000, "{\"1g.24gb\": 2, \"2g.48gb\": 1}"},
                {&rtx5000, NULL},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                const struct model *models[] = {rows[i].m, rows[i].m, NULL};
                json_t *root = generate(models);
                const json_t *b = config(root, "all-balanced");
                if (!rows[i].want)
                        assert_null(b);
                else {
                        char want[256];
                        snprintf(want, sizeof(want), "[{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": %s}]",
                                 rows[i].want);
                        assert_json_equal(b, want);
                }
                json_decref(root);
        }
}

/* Other slot counts, and a 7-slot GPU lacking a base 3g, give no entry. */
static void test_balanced_needs_known_slots(void **state) {
        static const struct model eight = {0x11110000u, true,
                {{"1g.10gb", 0, 8}, {"2g.20gb", 1, 4}, {"3g.30gb", 2, 2}, {"8g.80gb", 5, 1}}};
        static const struct model no3g = {0x22220000u, true,
                {{"1g.10gb", 0, 7}, {"2g.20gb", 1, 3}, {"3g.40gb+gfx", 12, 2}, {"7g.80gb", 4, 1}}};
        const struct model *const m1[] = {&eight, NULL}, *const m2[] = {&no3g, NULL};
        json_t *root = generate(m1);
        assert_null(config(root, "all-balanced"));
        assert_non_null(config(root, "all-8g.80gb"));
        json_decref(root);
        root = generate(m2);
        assert_null(config(root, "all-balanced"));
        assert_non_null(config(root, "all-3g.40gb.gfx"));
        json_decref(root);
}

/* Equal MaxCounts for one G: the first profile seen wins (the enums here only
 * order the data). */
static void test_balanced_tie_keeps_first(void **state) {
        static const struct model tie = {0x44440000u, true,
                {{"1g.12gb", 9, 7}, {"1g.10gb", 0, 7}, {"2g.20gb", 1, 3}, {"2g.24gb", 8, 3}, {"3g.40gb", 2, 2},
                 {"7g.80gb", 4, 1}}};
        const struct model *const models[] = {&tie, NULL};
        json_t *root = generate(models);
        assert_json_equal(config(root, "all-balanced"),
                          "[{\"devices\": \"all\", \"mig-enabled\": true,"
                          " \"mig-devices\": {\"1g.12gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}}]");
        json_decref(root);
}

/* ---- the whole config of a single-type node ---- */

static void test_single_type_full_config(void **state) {
        const struct model *const models[] = {&a100_40, &a100_40, &t4, NULL};
        json_t *root = generate(models);
        assert_json_equal(root,
                "{\"version\": \"v1\", \"mig-configs\": {"
                "\"all-disabled\": [{\"devices\": \"all\", \"mig-enabled\": false}],"
                "\"all-enabled\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {}}],"
                "\"all-1g.5gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"1g.5gb\": 7}}],"
                "\"all-1g.5gb.me\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"1g.5gb+me\": 1}}],"
                "\"all-1g.10gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"1g.10gb\": 4}}],"
                "\"all-2g.10gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"2g.10gb\": 3}}],"
                "\"all-3g.20gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"3g.20gb\": 2}}],"
                "\"all-4g.20gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"4g.20gb\": 1}}],"
                "\"all-7g.40gb\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"7g.40gb\": 1}}],"
                "\"all-balanced\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": "
                "{\"1g.5gb\": 2, \"2g.10gb\": 1, \"3g.20gb\": 1}}]}}");

        /* Order as written: version first, configs sorted by name (bytewise),
         * entry keys in mig-parted's struct order. */
        _cleanup_free_ char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        assert_non_null(text);
        assert_true(strncmp(text, "{\"version\":\"v1\",\"mig-configs\":{\"all-1g.10gb\":[{\"devices\":\"all\","
                                  "\"mig-enabled\":true,\"mig-devices\":{\"1g.10gb\":4}}],\"all-1g.5gb\":",
                            strlen("{\"version\":\"v1\",\"mig-configs\":{\"all-1g.10gb\":[{\"devices\":\"all\","
                                   "\"mig-enabled\":true,\"mig-devices\":{\"1g.10gb\":4}}],\"all-1g.5gb\":")) == 0);
        const char *prev = "";
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(root, "mig-configs"), key, v) {
                if (strcmp(prev, key) >= 0)
                        fail_msg("configs out of order: '%s' before '%s'", prev, key);
                prev = key;
        }
        json_decref(root);
}

/* ---- names: '+' becomes '.', '-' stays; the mig-devices key keeps '+' ---- */

static void test_profile_config_names(void **state) {
        static const struct {
                const char *config, *entry;
        } rows[] = {
                {"all-1g.23gb", "{\"1g.23gb\": 7}"},
                {"all-1g.45gb", "{\"1g.45gb\": 4}"},
                {"all-1g.23gb.me", "{\"1g.23gb+me\": 1}"},
                {"all-1g.23gb-me", "{\"1g.23gb-me\": 7}"},
                {"all-2g.45gb-me", "{\"2g.45gb-me\": 3}"},
                {"all-1g.23gb.me.all", "{\"1g.23gb+me.all\": 1}"},
                {"all-2g.45gb.me.all", "{\"2g.45gb+me.all\": 1}"},
                {"all-7g.180gb", "{\"7g.180gb\": 1}"},
        };
        const struct model *const models[] = {&b200, NULL};
        json_t *root = generate(models);
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                const json_t *c = config(root, rows[i].config);
                if (!c)
                        fail_msg("no config '%s'", rows[i].config);
                assert_json_equal(json_object_get(json_array_get(c, 0), "mig-devices"), rows[i].entry);
                assert_int_equal(json_array_size(c), 1);
        }
        /* 11 profiles + all-disabled, all-enabled, all-balanced. */
        assert_int_equal(json_object_size(json_object_get(root, "mig-configs")), 14);
        json_decref(root);
}

/* Unnamed profiles (e.g. 3_SLICE_GFX, enum 17) and profiles with no
 * instance are left out; the rest of the GPU still counts. */
static void test_unnamed_and_empty_profiles_skipped(void **state) {
        static const struct model m = {0x33330000u, true,
                {{"1g.10gb", 0, 7}, {"2g.20gb", 1, 3}, {"3g.40gb", 2, 2}, {NULL, 17, 1}, {"7g.80gb", 4, 1},
                 {"1g.10gb+me", 7, 0}}};
        const struct model *const models[] = {&m, NULL};
        json_t *root = generate(models);
        assert_int_equal(json_object_size(json_object_get(root, "mig-configs")), 3 + 4);
        assert_null(config(root, "all-1g.24gb.gfx3"));
        assert_null(config(root, "all-1g.10gb.me"));
        assert_non_null(config(root, "all-balanced"));
        json_decref(root);
}

/* ---- A30: upstream's hard-coded list, whatever NVML says ---- */

static void test_a30_hard_coded(void **state) {
        const struct model *const models[] = {&a30, NULL};
        json_t *root = generate(models);
        static const struct {
                const char *config, *entry;
        } rows[] = {
                {"all-1g.6gb", "{\"1g.6gb\": 4}"},
                {"all-1g.6gb.me", "{\"1g.6gb+me\": 1}"},
                {"all-2g.12gb", "{\"2g.12gb\": 2}"},
                {"all-2g.12gb.me", "{\"2g.12gb+me\": 1}"},
                {"all-4g.24gb", "{\"4g.24gb\": 1}"},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                const json_t *c = config(root, rows[i].config);
                if (!c)
                        fail_msg("no config '%s'", rows[i].config);
                char want[256];
                snprintf(want, sizeof(want), "[{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": %s}]",
                         rows[i].entry);
                assert_json_equal(c, want);
        }
        /* Nothing else (NVML's 2g.12gb+me count of 2 is not used either). */
        assert_int_equal(json_object_size(json_object_get(root, "mig-configs")), 3 + ELEMENTSOF(rows));
        json_decref(root);
}

/* ---- mixed nodes ---- */

static void test_mixed_node_filters(void **state) {
        const struct model *const models[] = {&a100_40, &a100_80, &t4, &a100_40, &a100_80, NULL};
        json_t *root = generate(models);
        const char *ef = "\"devices\": \"all\", \"mig-enabled\": true";
        char want[1024];

        /* all-disabled and all-enabled stay unfiltered. */
        assert_json_equal(config(root, "all-disabled"), "[{\"devices\": \"all\", \"mig-enabled\": false}]");
        assert_json_equal(config(root, "all-enabled"),
                          "[{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {}}]");
        /* Same name, different MaxCount: one entry per model. */
        snprintf(want, sizeof(want),
                 "[{\"device-filter\": [\"0x20B010DE\"], %s, \"mig-devices\": {\"1g.10gb\": 4}},"
                 " {\"device-filter\": [\"0x20B210DE\"], %s, \"mig-devices\": {\"1g.10gb\": 7}}]",
                 ef, ef);
        assert_json_equal(config(root, "all-1g.10gb"), want);
        /* Only the models that have the profile. */
        snprintf(want, sizeof(want), "[{\"device-filter\": [\"0x20B010DE\"], %s, \"mig-devices\": {\"7g.40gb\": 1}}]",
                 ef);
        assert_json_equal(config(root, "all-7g.40gb"), want);
        snprintf(want, sizeof(want), "[{\"device-filter\": [\"0x20B210DE\"], %s, \"mig-devices\": {\"1g.20gb\": 4}}]",
                 ef);
        assert_json_equal(config(root, "all-1g.20gb"), want);
        snprintf(want, sizeof(want),
                 "[{\"device-filter\": [\"0x20B010DE\"], %s, \"mig-devices\": "
                 "{\"1g.5gb\": 2, \"2g.10gb\": 1, \"3g.20gb\": 1}},"
                 " {\"device-filter\": [\"0x20B210DE\"], %s, \"mig-devices\": "
                 "{\"1g.10gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}}]",
                 ef, ef);
        assert_json_equal(config(root, "all-balanced"), want);

        /* Every entry but all-disabled/all-enabled has a filter. */
        const char *key;
        json_t *list;
        json_object_foreach(json_object_get(root, "mig-configs"), key, list) {
                size_t i;
                json_t *x;
                json_array_foreach(list, i, x) {
                        bool plain = streq(key, "all-disabled") || streq(key, "all-enabled");
                        if (plain == !!json_object_get(x, "device-filter"))
                                fail_msg("config '%s' entry %zu: filter %s", key, i, plain ? "present" : "missing");
                }
        }

        /* The YAML text quotes the ids and writes filters in flow style. */
        _cleanup_free_ char *yaml = mk_yaml_dump(root, true);
        assert_non_null(yaml);
        assert_non_null(strstr(yaml, "  all-7g.40gb:\n"
                                     "  - device-filter: [\"0x20B010DE\"]\n"
                                     "    devices: all\n"
                                     "    mig-devices:\n"
                                     "      7g.40gb: 1\n"
                                     "    mig-enabled: true\n"));
        assert_true(strncmp(yaml, "version: v1\nmig-configs:\n  all-1g.10gb:\n", 39) == 0);
        assert_non_null(strstr(yaml, "  all-enabled:\n  - devices: all\n    mig-devices: {}\n    mig-enabled: true\n"));
        json_decref(root);
}

/* Models with the same profile name and MaxCount share one entry. */
static void test_mixed_node_shared_entries(void **state) {
        const struct model *const models[] = {&h100_80, &a100_80, NULL};
        json_t *root = generate(models);
        assert_json_equal(config(root, "all-7g.80gb"),
                          "[{\"device-filter\": [\"0x20B210DE\", \"0x233010DE\"], \"devices\": \"all\","
                          " \"mig-enabled\": true, \"mig-devices\": {\"7g.80gb\": 1}}]");
        assert_json_equal(config(root, "all-balanced"),
                          "[{\"device-filter\": [\"0x20B210DE\", \"0x233010DE\"], \"devices\": \"all\","
                          " \"mig-enabled\": true, \"mig-devices\": {\"1g.10gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}}]");
        json_decref(root);
}

/* A model without all-balanced on a mixed node: the other keeps its entry. */
static void test_mixed_node_partial_balanced(void **state) {
        const struct model *const models[] = {&rtx5000, &h200, NULL};
        json_t *root = generate(models);
        assert_json_equal(config(root, "all-balanced"),
                          "[{\"device-filter\": [\"0x233510DE\"], \"devices\": \"all\", \"mig-enabled\": true,"
                          " \"mig-devices\": {\"1g.18gb\": 2, \"2g.35gb\": 1, \"3g.71gb\": 1}}]");
        assert_json_equal(config(root, "all-2g.24gb.gfx"),
                          "[{\"device-filter\": [\"0x2BB810DE\"], \"devices\": \"all\", \"mig-enabled\": true,"
                          " \"mig-devices\": {\"2g.24gb+gfx\": 2}}]");
        json_decref(root);
}

/* ---- no data ---- */

static void test_no_data(void **state) {
        static const struct model no_profiles = {A100_40, true, {{0}}};
        static const struct model only_unnamed = {A100_40, true, {{NULL, 17, 1}}};
        const struct model *const none[] = {NULL};
        const struct model *const not_capable[] = {&t4, &t4, NULL};
        const struct model *const empty[] = {&no_profiles, &t4, NULL};
        const struct model *const unnamed[] = {&only_unnamed, NULL};
        const struct {
                const struct model *const *models;
                const char *msg;
        } rows[] = {
                {none, "No MIG-capable GPU found"},
                {not_capable, "No MIG-capable GPU found"},
                {empty, "No MIG profiles discovered on the MIG-capable GPUs"},
                {unnamed, "No MIG profiles discovered on the MIG-capable GPUs"},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct mk_snapshot *s = make_snapshot(rows[i].models);
                struct mk_error e = {0};
                json_t *root = NULL;
                assert_int_equal(mk_generate_config(s, &root, &e), -ENODATA);
                assert_null(root);
                assert_int_equal(e.code, -ENODATA);
                assert_string_equal(e.msg, rows[i].msg);
                /* No detail wanted is fine too. */
                assert_int_equal(mk_generate_config(s, &root, NULL), -ENODATA);
                mk_snapshot_free(s);
        }
}

/* A GPU of a model that reports no profiles (old driver, MIG off) does not
 * hide the profiles a sibling reports. */
static void test_first_gpu_with_profiles(void **state) {
        static const struct model silent = {A100_40, true, {{0}}};
        const struct model *const models[] = {&silent, &a100_40, NULL};
        json_t *root = generate(models);
        assert_non_null(config(root, "all-1g.5gb"));
        assert_null(json_object_get(json_array_get(config(root, "all-1g.5gb"), 0), "device-filter"));
        json_decref(root);
}

/* ---- allocation failures: each fails cleanly (no leak under ASAN) ---- */

static int fail_at, n_allocs;
static void *failing_malloc(size_t n) {
        return n_allocs++ == fail_at ? NULL : malloc(n);
}

static void test_allocation_failures(void **state) {
        const struct model *const models[] = {&a100_40, &a100_80, NULL};
        struct mk_snapshot *s = make_snapshot(models);
        bool done = false;
        for (fail_at = 0; !done && fail_at < 100000; fail_at++) {
                n_allocs = 0;
                json_set_alloc_funcs(failing_malloc, free);
                struct mk_error e = {0};
                json_t *root = NULL;
                int r = mk_generate_config(s, &root, &e);
                json_set_alloc_funcs(malloc, free);
                if (r >= 0) {
                        assert_non_null(root);
                        done = true;
                } else {
                        assert_int_equal(r, -ENOMEM);
                        assert_null(root);
                }
                json_decref(root);
        }
        assert_true(done);
        assert_true(fail_at > 10);
        mk_snapshot_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_balanced_table),
                cmocka_unit_test(test_balanced_needs_known_slots),
                cmocka_unit_test(test_balanced_tie_keeps_first),
                cmocka_unit_test(test_single_type_full_config),
                cmocka_unit_test(test_profile_config_names),
                cmocka_unit_test(test_unnamed_and_empty_profiles_skipped),
                cmocka_unit_test(test_a30_hard_coded),
                cmocka_unit_test(test_mixed_node_filters),
                cmocka_unit_test(test_mixed_node_shared_entries),
                cmocka_unit_test(test_mixed_node_partial_balanced),
                cmocka_unit_test(test_no_data),
                cmocka_unit_test(test_first_gpu_with_profiles),
                cmocka_unit_test(test_allocation_failures),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
