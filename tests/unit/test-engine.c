/* engine/: export grouping (mig-parted.md §4.3) and the desired state,
 * tested as data on hand-built snapshots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/desired.h"
#include "engine/export.h"
#include "spec/config.h"

#define A100_40 0x20B010DEu
#define A100_80 0x20B210DEu

struct gpu_spec {
        uint32_t pci_id;
        int mode;             /* MK_MIG_* */
        const char *cis[8];   /* CI names, one per GI (NULL-terminated) */
        bool gi_without_ci;   /* add one GI that has no CI */
};

static struct mk_snapshot *make_snapshot(const struct gpu_spec *specs, size_t n) {
        struct mk_snapshot *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        s->gpus = calloc(n, sizeof(*s->gpus));
        s->n_gpus = n;
        for (size_t i = 0; i < n; i++) {
                struct mk_gpu *g = &s->gpus[i];
                g->index = (unsigned) i;
                g->pci_device_id = specs[i].pci_id;
                g->mig_capable = specs[i].mode != MK_MIG_UNSUPPORTED;
                g->mig_current = g->mig_pending = specs[i].mode;
                size_t k = 0;
                while (specs[i].cis[k])
                        k++;
                g->gis = calloc(k + 1, sizeof(*g->gis));
                for (size_t j = 0; j < k; j++) {
                        g->gis[j].id = (unsigned) j + 1;
                        g->gis[j].cis = calloc(1, sizeof(struct mk_ci));
                        g->gis[j].n_cis = 1;
                        snprintf(g->gis[j].cis[0].name, sizeof(g->gis[j].cis[0].name), "%s", specs[i].cis[j]);
                }
                g->n_gis = k;
                if (specs[i].gi_without_ci)
                        g->gis[g->n_gis++].id = 99;
        }
        return s;
}

static void layout_str(const struct mk_layout *l, char *buf, size_t n) {
        assert_true(mk_layout_format(l, buf, n) >= 0);
}

static void test_single_type_same_layout_is_all(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_ENABLED, {"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}, false},
                {A100_40, MK_MIG_ENABLED, {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 2);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 1);
        assert_true(x.entries[0].all_devices);
        assert_int_equal(x.entries[0].n_filters, 0);
        assert_true(x.entries[0].mig_enabled);
        char buf[128];
        layout_str(&x.entries[0].layout, buf, sizeof(buf));
        assert_string_equal(buf, "3g.20gb:1, 2g.10gb:1, 1g.5gb:2");
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_single_type_two_layouts_lists_devices(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_ENABLED, {"7g.40gb"}, false},
                {A100_40, MK_MIG_DISABLED, {NULL}, false},
                {A100_40, MK_MIG_ENABLED, {"7g.40gb"}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 3);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 2);
        /* first seen first; devices sorted; no filters on a single-type node */
        assert_false(x.entries[0].all_devices);
        assert_int_equal(x.entries[0].n_devices, 2);
        assert_int_equal(x.entries[0].devices[0], 0);
        assert_int_equal(x.entries[0].devices[1], 2);
        assert_int_equal(x.entries[0].n_filters, 0);
        assert_false(x.entries[1].mig_enabled);
        assert_int_equal(x.entries[1].n_devices, 1);
        assert_int_equal(x.entries[1].devices[0], 1);
        assert_int_equal(x.entries[1].layout.n_items, 0);
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_mixed_node_keeps_filters(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_ENABLED, {"3g.20gb", "3g.20gb"}, false},
                {A100_40, MK_MIG_ENABLED, {"3g.20gb", "3g.20gb"}, false},
                {A100_80, MK_MIG_ENABLED, {"7g.80gb"}, false},
                {A100_80, MK_MIG_ENABLED, {"3g.40gb"}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 4);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 3);
        /* all 40 GB GPUs share a layout: filter + devices: all */
        assert_int_equal(x.entries[0].n_filters, 1);
        assert_int_equal(x.entries[0].filters[0], A100_40);
        assert_true(x.entries[0].all_devices);
        /* the 80 GB ones differ: filter + explicit index */
        assert_int_equal(x.entries[1].n_filters, 1);
        assert_int_equal(x.entries[1].filters[0], A100_80);
        assert_false(x.entries[1].all_devices);
        assert_int_equal(x.entries[1].devices[0], 2);
        assert_int_equal(x.entries[2].devices[0], 3);
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_mixed_node_same_layout_everywhere_drops_filters(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_DISABLED, {NULL}, false},
                {A100_80, MK_MIG_DISABLED, {NULL}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 2);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 1);
        assert_int_equal(x.entries[0].n_filters, 0);
        assert_true(x.entries[0].all_devices);
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_mixed_types_merged_entry_has_both_filters(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_DISABLED, {NULL}, false},
                {A100_80, MK_MIG_DISABLED, {NULL}, false},
                {A100_80, MK_MIG_ENABLED, {"7g.80gb"}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 3);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 2);
        assert_int_equal(x.entries[0].n_filters, 2);
        assert_int_equal(x.entries[0].filters[0], A100_40); /* sorted */
        assert_int_equal(x.entries[0].filters[1], A100_80);
        assert_false(x.entries[0].all_devices); /* GPU 2 is an 80 GB one too */
        assert_int_equal(x.entries[0].n_devices, 2);
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_gi_without_ci_is_counted_and_left_out(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_ENABLED, {"1g.5gb"}, true},
        };
        struct mk_snapshot *s = make_snapshot(g, 1);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_gis_without_ci, 1);
        char buf[64];
        layout_str(&x.entries[0].layout, buf, sizeof(buf));
        assert_string_equal(buf, "1g.5gb:1");
        mk_export_done(&x);
        mk_snapshot_free(s);
}

static void test_non_capable_gpu_exports_disabled(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_ENABLED, {"7g.40gb"}, false},
                {0x1EB810DEu, MK_MIG_UNSUPPORTED, {NULL}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 2);
        struct mk_export x = {0};
        assert_int_equal(mk_export_build(s, &x, NULL), 0);
        assert_int_equal(x.n_entries, 2);
        assert_false(x.entries[1].mig_enabled);
        assert_true(x.entries[1].all_devices); /* the only T4 */
        assert_int_equal(x.entries[1].filters[0], 0x1EB810DEu);
        mk_export_done(&x);
        mk_snapshot_free(s);
}


static const char desired_yaml[] = "version: v1\n"
                                   "mig-configs:\n"
                                   "  c:\n"
                                   "    - devices: all\n"
                                   "      mig-enabled: true\n"
                                   "      mig-devices: {3g.20gb: 2}\n"
                                   "    - devices: [1]\n"
                                   "      mig-enabled: false\n";

/* A snapshot read through PCI has modes but no profiles: with modes_only
 * the plans are the mode changes alone; a full plan cannot resolve the
 * profile and names the GPU. Later entries win. */
static void test_desired_modes_only_plan(void **state) {
        const struct gpu_spec g[] = {
                {A100_40, MK_MIG_DISABLED, {NULL}, false},
                {A100_40, MK_MIG_ENABLED, {NULL}, false},
                {A100_40, MK_MIG_UNSUPPORTED, {NULL}, false},
        };
        struct mk_snapshot *s = make_snapshot(g, 3);
        struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(desired_yaml, strlen(desired_yaml), "d.yaml", &c, &e), 0);
        const struct mk_named_config *nc = NULL;
        assert_int_equal(mk_config_select(c, "c", &nc, &e), 0);
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        assert_int_equal(mk_engine_plan_snapshot(s, c, nc, true, &d, &p, &e), 0);
        assert_true(d[0].matched && d[0].enabled);
        assert_true(d[1].matched && !d[1].enabled);
        assert_false(d[2].matched); /* not MIG-capable, selected by `all`: left alone */
        assert_true(p[0].mode_change && p[0].mig_enabled && !p[0].layout_change);
        assert_true(p[1].mode_change && !p[1].mig_enabled && !p[1].layout_change);
        assert_false(p[2].mode_change);
        assert_true(mk_engine_plans_change(p, 3, true));
        mk_gpu_plans_free(p, 3);
        mk_desired_free(d, 3);

        assert_true(mk_engine_plan_snapshot(s, c, nc, false, &d, &p, &e) < 0);
        assert_non_null(strstr(e.msg, "GPU 0"));
        mk_config_free(c);
        mk_snapshot_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_single_type_same_layout_is_all),
                cmocka_unit_test(test_single_type_two_layouts_lists_devices),
                cmocka_unit_test(test_mixed_node_keeps_filters),
                cmocka_unit_test(test_mixed_node_same_layout_everywhere_drops_filters),
                cmocka_unit_test(test_mixed_types_merged_entry_has_both_filters),
                cmocka_unit_test(test_gi_without_ci_is_counted_and_left_out),
                cmocka_unit_test(test_non_capable_gpu_exports_disabled),
                cmocka_unit_test(test_desired_modes_only_plan),
        };
        return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
