/* engine/: export grouping (mig-parted v0.15.0 cmd/nvidia-mig-parted/export) and the desired state,
 * tested as data on hand-built snapshots. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dlfcn.h>

#include "base/macro.h"
#include "engine/desired.h"
#include "engine/engine.h"
#include "engine/export.h"
#include "nvml/nvml.h"
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

/* ---- the event stream of an apply on the simulator, as data ---- */

struct recorded {
        enum mk_progress_kind kind;
        int gpu;
        enum mk_progress_step step;
        enum mk_progress_phase phase;
        size_t destroyed, created, kept;
        bool mode_changed, enabled;
        int error;
        char text[160];
};

struct recorder {
        struct recorded ev[512];
        size_t n;
        size_t planned_changing;
        bool planned_seen;
};

static void record(void *userdata, const struct mk_progress_event *ev) {
        struct recorder *r = userdata;
        assert_true(r->n < ELEMENTSOF(r->ev));
        struct recorded *x = &r->ev[r->n++];
        *x = (struct recorded){.kind = ev->kind, .gpu = ev->gpu, .step = ev->step, .phase = ev->phase,
                               .destroyed = ev->destroyed,
                               .created = ev->created, .kept = ev->kept, .mode_changed = ev->mode_changed,
                               .enabled = ev->enabled, .error = ev->error};
        assert_true(mk_progress_format(ev, x->text, sizeof(x->text)) >= 0);
        if (ev->kind == MK_PROGRESS_PLANNED) {
                r->planned_seen = true;
                for (size_t i = 0; i < ev->snapshot->n_gpus; i++)
                        r->planned_changing += ev->plans[i].mode_change || ev->plans[i].layout_change;
        }
}

static size_t count(const struct recorder *r, enum mk_progress_kind k) {
        size_t n = 0;
        for (size_t i = 0; i < r->n; i++)
                n += r->ev[i].kind == k;
        return n;
}

static const char sim_yaml[] = "version: v1\n"
                               "mig-configs:\n"
                               "  balanced:\n"
                               "    - devices: all\n"
                               "      mig-enabled: true\n"
                               "      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n"
                               "  three:\n"
                               "    - devices: [0]\n"
                               "      mig-enabled: true\n"
                               "      mig-devices: {3g.20gb: 1, 1g.5gb: 2, 2g.10gb: 1}\n"
                               "    - devices: [1]\n"
                               "      mig-enabled: true\n"
                               "      mig-devices: {3g.20gb: 2}\n";

static int sim_setup(void **state) {
        const char *smi = getenv("MIGKIT_SIM_SMI");
        if (!getenv("MIGKIT_NVML_LIB") || !smi)
                return 0;
        static char dir[32];
        snprintf(dir, sizeof(dir), "/tmp/test-engine-XXXXXX"); /* each test its own */
        assert_non_null(mkdtemp(dir));
        char path[4200];
        snprintf(path, sizeof(path), "%s/state.json", dir);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", "dgx-a100", 1);
        setenv("MIGKIT_NVIDIA_SMI", smi, 1);
        setenv("MIGKIT_RUN_ROOT", dir, 1); /* the host lock: this test's own, not /run's */
        *state = dir;
        return 0;
}

static int sim_teardown(void **state) {
        if (*state) {
                char path[4200];
                snprintf(path, sizeof(path), "%s/state.json", (char *) *state);
                unlink(path);
                rmdir(*state);
        }
        return 0;
}

static void apply_recorded(const struct mk_config *c, const char *name, struct recorder *r) {
        const struct mk_progress p = {.fn = record, .userdata = r};
        struct mk_engine_opts o = {.selected_config = name, .progress = &p};
        struct mk_apply_report rep = {0};
        struct mk_error e = {0};
        memset(r, 0, sizeof(*r));
        int q = mk_engine_apply(c, NULL, &o, &rep, &e);
        if (q < 0)
                fail_msg("apply %s: %s", name, e.msg);
        mk_apply_report_done(&rep);
}

/* From MIG off to balanced on 8 A100s, then to another layout on two GPUs:
 * the events say what happened, in order, with the counts the plan
 * promised; nothing to do is one planned and one done event. */
static void test_apply_events_on_simulator(void **state) {
        if (!*state)
                skip();
        struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(sim_yaml, strlen(sim_yaml), "sim.yaml", &c, &e), 0);
        struct recorder *r = calloc(1, sizeof(*r));
        assert_non_null(r);

        apply_recorded(c, "balanced", r);
        assert_int_equal(r->ev[0].kind, MK_PROGRESS_BACKEND);
        assert_int_equal(r->ev[1].kind, MK_PROGRESS_PLANNED);
        assert_int_equal(r->planned_changing, 8);
        assert_int_equal(r->ev[r->n - 1].kind, MK_PROGRESS_DONE);
        assert_int_equal(r->ev[r->n - 1].error, 0);
        assert_int_equal(count(r, MK_PROGRESS_GPU_STARTED), 8);
        assert_int_equal(count(r, MK_PROGRESS_GPU_FINISHED), 8);
        assert_int_equal(count(r, MK_PROGRESS_WAITING), 1); /* the reset of the 8 GPUs */
        size_t steps[_MK_STEP_MAX] = {0};
        for (size_t i = 0; i < r->n; i++)
                if (r->ev[i].kind == MK_PROGRESS_STEP)
                        steps[r->ev[i].step]++;
        assert_int_equal(steps[MK_STEP_SET_MODE], 8);
        assert_int_equal(steps[MK_STEP_RESET], 8);
        assert_int_equal(steps[MK_STEP_CREATE_GI], 32);
        assert_int_equal(steps[MK_STEP_CREATE_CI], 32);
        assert_int_equal(steps[MK_STEP_DESTROY_CI] + steps[MK_STEP_DESTROY_GI], 0);
        int gpu = 0;
        for (size_t i = 0; i < r->n; i++)
                if (r->ev[i].kind == MK_PROGRESS_GPU_FINISHED) {
                        /* one line per GPU, in GPU order although the GPUs
                         * change in parallel, each after all its own steps */
                        assert_int_equal(r->ev[i].gpu, gpu);
                        assert_true(r->ev[i].mode_changed && r->ev[i].enabled);
                        assert_int_equal(r->ev[i].created, 4);
                        assert_int_equal(r->ev[i].destroyed, 0);
                        assert_int_equal(r->ev[i].kept, 0);
                        bool own_step_before = false;
                        for (size_t k = 0; k < r->n; k++)
                                if (r->ev[k].kind == MK_PROGRESS_STEP && r->ev[k].gpu == gpu) {
                                        assert_true(k < i);
                                        own_step_before = true;
                                }
                        assert_true(own_step_before);
                        char want[64];
                        snprintf(want, sizeof(want), "GPU %d: 0 destroyed, 4 created, kept 0 (", gpu);
                        assert_memory_equal(r->ev[i].text, want, strlen(want));
                        gpu++;
                }

        /* GPU 0 keeps everything (same layout, other order); GPU 1 keeps
         * its 3g.20gb, drops the rest and makes a second 3g.20gb. */
        apply_recorded(c, "three", r);
        assert_int_equal(r->planned_changing, 1);
        assert_int_equal(count(r, MK_PROGRESS_GPU_FINISHED), 1);
        for (size_t i = 0; i < r->n; i++)
                if (r->ev[i].kind == MK_PROGRESS_GPU_FINISHED) {
                        assert_int_equal(r->ev[i].gpu, 1);
                        assert_false(r->ev[i].mode_changed);
                        assert_int_equal(r->ev[i].destroyed, 3);
                        assert_int_equal(r->ev[i].created, 1);
                        assert_int_equal(r->ev[i].kept, 1);
                }
        assert_int_equal(count(r, MK_PROGRESS_WAITING), 0);

        apply_recorded(c, "three", r);
        assert_int_equal(r->n, 3); /* backend, planned, done */
        assert_int_equal(r->ev[1].kind, MK_PROGRESS_PLANNED);
        assert_int_equal(r->planned_changing, 0);
        assert_int_equal(r->ev[2].kind, MK_PROGRESS_DONE);

        free(r);
        mk_config_free(c);
}

/* ---- parallel apply (one thread per GPU) against sequential ---- */

/* Per GPU a different layout, then another one on every GPU but 7, written
 * with A100-40GB names; {1} {2} {3} {4} {7} stand for the 1g..7g names. */
static const char mixed_template[] =
        "version: v1\n"
        "mig-configs:\n"
        "  mixed:\n"
        "    - {devices: [0], mig-enabled: true, mig-devices: {7g.{7}: 1}}\n"
        "    - {devices: [1], mig-enabled: true, mig-devices: {3g.{3}: 2}}\n"
        "    - {devices: [2], mig-enabled: true, mig-devices: {1g.{1}: 7}}\n"
        "    - {devices: [3], mig-enabled: true, mig-devices: {1g.{1}: 2, 2g.{2}: 1, 3g.{3}: 1}}\n"
        "    - {devices: [4, 5], mig-enabled: true, mig-devices: {2g.{2}: 3}}\n"
        "    - {devices: [6], mig-enabled: false}\n"
        "    - {devices: [7], mig-enabled: true, mig-devices: {4g.{4}: 1, 3g.{3}: 1}}\n"
        "  mixed2:\n"
        "    - {devices: [0], mig-enabled: true, mig-devices: {1g.{1}: 7}}\n"
        "    - {devices: [1], mig-enabled: true, mig-devices: {1g.{1}: 2, 2g.{2}: 1, 3g.{3}: 1}}\n"
        "    - {devices: [2], mig-enabled: true, mig-devices: {3g.{3}: 2}}\n"
        "    - {devices: [3], mig-enabled: true, mig-devices: {7g.{7}: 1}}\n"
        "    - {devices: [4, 5], mig-enabled: false}\n"
        "    - {devices: [6], mig-enabled: true, mig-devices: {2g.{2}: 3}}\n"
        "    - {devices: [7], mig-enabled: true, mig-devices: {4g.{4}: 1, 3g.{3}: 1}}\n";

/* The template with the memory sizes of a machine's GPUs ("5gb" ... "40gb"). */
static char *mixed_yaml(const char *const sizes[8]) {
        char *out = malloc(sizeof(mixed_template) * 2);
        assert_non_null(out);
        size_t k = 0;
        for (const char *p = mixed_template; *p;) {
                if (p[0] == '{' && p[1] >= '1' && p[1] <= '7' && p[2] == '}') {
                        size_t n = strlen(sizes[p[1] - '0']);
                        memcpy(out + k, sizes[p[1] - '0'], n);
                        k += n;
                        p += 3;
                } else
                        out[k++] = *p++;
        }
        out[k] = 0;
        return out;
}

/* What a GPU is, without what differs between two equal runs (MIG device
 * UUIDs come from a machine-wide creation serial). */
static void fingerprint(char *buf, size_t size) {
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        struct mk_snapshot *s = NULL;
        if (mk_nvml_open(NULL, &n, &e) < 0 || mk_nvml_snapshot(n, &s, &e) < 0)
                fail_msg("snapshot: %s", e.msg);
        size_t k = 0;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                k += (size_t) snprintf(buf + k, size - k, "GPU %zu mig %d/%d:", i, g->mig_current, g->mig_pending);
                for (size_t j = 0; j < g->n_gis; j++) {
                        const struct mk_gi *gi = &g->gis[j];
                        k += (size_t) snprintf(buf + k, size - k, " gi%u p%u@%u:%u[", gi->id, gi->profile_id,
                                               gi->placement.start, gi->placement.size);
                        for (size_t c = 0; c < gi->n_cis; c++)
                                k += (size_t) snprintf(buf + k, size - k, " ci%u %s@%u:%u", gi->cis[c].id,
                                                       gi->cis[c].name, gi->cis[c].placement.start,
                                                       gi->cis[c].placement.size);
                        k += (size_t) snprintf(buf + k, size - k, "]");
                }
                k += (size_t) snprintf(buf + k, size - k, "\n");
                assert_true(k < size);
        }
        mk_snapshot_free(s);
}

static void state_path(char *buf, size_t size) {
        snprintf(buf, size, "%s", getenv("MIGKIT_SIM_STATE"));
}

/* Applies `name` with the GPUs one after another or in parallel, checks it
 * succeeded, and returns its report's counts as text. */
static void apply_counts(const struct mk_config *c, const char *name, bool sequential, struct recorder *r, char *buf,
                         size_t size) {
        const struct mk_progress p = {.fn = record, .userdata = r};
        struct mk_engine_opts o = {.selected_config = name, .progress = &p, .sequential = sequential};
        struct mk_apply_report rep = {0};
        struct mk_error e = {0};
        memset(r, 0, sizeof(*r));
        if (mk_engine_apply(c, NULL, &o, &rep, &e) < 0)
                fail_msg("apply %s (%s): %s", name, sequential ? "sequential" : "parallel", e.msg);
        snprintf(buf, size, "modes %u resets %u gis -%zu +%zu cis -%zu +%zu mutations %lu", rep.mode_changes,
                 rep.resets, rep.destroyed_gis, rep.created_gis, rep.destroyed_cis, rep.created_cis, rep.mutations);
        mk_apply_report_done(&rep);
}

/* gpu-finished events: one per GPU that changed, each after every step of
 * its GPU; those of the layout phase (run in parallel) in GPU order. */
static void check_finished_order(const struct recorder *r) {
        int last = -1;
        bool seen[64] = {false};
        for (size_t i = 0; i < r->n; i++) {
                if (r->ev[i].kind != MK_PROGRESS_GPU_FINISHED)
                        continue;
                int gpu = r->ev[i].gpu;
                assert_true(gpu >= 0 && gpu < 64 && !seen[gpu]);
                seen[gpu] = true;
                if (r->ev[i].phase == MK_PHASE_LAYOUT) {
                        assert_true(gpu > last);
                        last = gpu;
                }
                for (size_t k = i + 1; k < r->n; k++)
                        assert_false(r->ev[k].kind == MK_PROGRESS_STEP && r->ev[k].gpu == gpu);
        }
}

/* On a DGX A100 (mode changes wait for a reset) and a DGX H100 (they do
 * not): from MIG off to a different layout per GPU, then to another one on
 * seven GPUs, the parallel apply ends where the sequential one does, with
 * the same counts. */
static void test_parallel_apply_same_as_sequential(void **state) {
        if (!*state)
                skip();
        static const struct {
                const char *machine;
                const char *sizes[8];
        } machines[] = {
                {"dgx-a100", {"", "5gb", "10gb", "20gb", "20gb", "", "", "40gb"}},
                {"dgx-h100", {"", "10gb", "20gb", "40gb", "40gb", "", "", "80gb"}},
        };
        struct recorder *r = calloc(1, sizeof(*r));
        assert_non_null(r);
        char path[4200];
        state_path(path, sizeof(path));
        for (size_t m = 0; m < ELEMENTSOF(machines); m++) {
                _cleanup_free_ char *yaml = mixed_yaml(machines[m].sizes);
                struct mk_config *c = NULL;
                struct mk_error e = {0};
                if (mk_config_parse(yaml, strlen(yaml), "mixed.yaml", &c, &e) < 0)
                        fail_msg("%s: %s", machines[m].machine, e.msg);
                setenv("MIGKIT_SIM_MACHINE", machines[m].machine, 1);
                char want[2][4096], got[4096], want_counts[2][256], got_counts[256];
                for (int parallel = 0; parallel <= 1; parallel++) {
                        unlink(path);
                        for (int step = 0; step < 2; step++) {
                                const char *name = step == 0 ? "mixed" : "mixed2";
                                char *counts = parallel ? got_counts : want_counts[step];
                                apply_counts(c, name, !parallel, r, counts, 256);
                                check_finished_order(r);
                                assert_int_equal(count(r, MK_PROGRESS_GPU_FINISHED), 7); /* GPU 6, then 7 stay */
                                if (!parallel) {
                                        fingerprint(want[step], sizeof(want[step]));
                                        continue;
                                }
                                fingerprint(got, sizeof(got));
                                assert_string_equal(got, want[step]);
                                assert_string_equal(got_counts, want_counts[step]);
                        }
                }
                mk_config_free(c);
        }
        unlink(path);
        setenv("MIGKIT_SIM_MACHINE", "dgx-a100", 1);
        free(r);
}

/* One GPU fails (a process holds a compute instance the new layout
 * destroys): its error is the apply's, its gpu-finished event says so, and
 * the other GPUs, changed on their own threads meanwhile, reach the target. */
static void test_parallel_apply_one_gpu_fails(void **state) {
        if (!*state)
                skip();
        static const char *const sizes[8] = {"", "5gb", "10gb", "20gb", "20gb", "", "", "40gb"};
        _cleanup_free_ char *yaml = mixed_yaml(sizes);
        struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(yaml, strlen(yaml), "mixed.yaml", &c, &e), 0);
        char path[4200];
        state_path(path, sizeof(path));
        unlink(path);
        struct recorder *r = calloc(1, sizeof(*r));
        assert_non_null(r);
        char counts[256];
        apply_counts(c, "mixed", false, r, counts, sizeof(counts));

        /* GPU 3 (balanced -> 7g) must destroy all its instances: hold one. */
        void *lib = dlopen(getenv("MIGKIT_NVML_LIB"), RTLD_NOW);
        assert_non_null(lib);
        int (*process_add)(unsigned, unsigned, unsigned, unsigned, unsigned long long, unsigned *) =
                (int (*)(unsigned, unsigned, unsigned, unsigned, unsigned long long, unsigned *)) dlsym(
                        lib, "mksim_process_add");
        assert_non_null(process_add);
        struct mk_snapshot *s = NULL;
        struct mk_gpu_plan *p = NULL;
        assert_int_equal(mk_engine_plan_selected(c, "mixed2", &s, &p, &e), 0);
        assert_true(p[3].n_destroy > 0);
        unsigned pid = 0;
        assert_int_equal(process_add(3, s->gpus[3].gis[0].id, s->gpus[3].gis[0].cis[0].id, 0, 100, &pid), 0);
        mk_gpu_plans_free(p, s->n_gpus);
        mk_snapshot_free(s);

        const struct mk_progress prog = {.fn = record, .userdata = r};
        struct mk_engine_opts o = {.selected_config = "mixed2", .progress = &prog};
        struct mk_apply_report rep = {0};
        memset(r, 0, sizeof(*r));
        assert_true(mk_engine_apply(c, NULL, &o, &rep, &e) < 0);
        assert_non_null(strstr(e.msg, "GPU 3"));
        for (size_t i = 0; i < rep.n_gpus; i++)
                assert_int_equal(rep.gpu_failed[i], i == 3);
        mk_apply_report_done(&rep);
        check_finished_order(r);
        bool reported = false;
        for (size_t i = 0; i < r->n; i++)
                if (r->ev[i].kind == MK_PROGRESS_GPU_FINISHED && r->ev[i].gpu == 3) {
                        assert_true(r->ev[i].error < 0);
                        assert_non_null(strstr(r->ev[i].text, "GPU 3"));
                        reported = true;
                }
        assert_true(reported);

        /* Every other GPU is as configured: planning again changes GPU 3 only. */
        assert_int_equal(mk_engine_plan_selected(c, "mixed2", &s, &p, &e), 0);
        for (size_t i = 0; i < s->n_gpus; i++)
                assert_int_equal(p[i].mode_change || p[i].layout_change, i == 3);
        mk_gpu_plans_free(p, s->n_gpus);
        mk_snapshot_free(s);

        int (*process_remove)(unsigned) = (int (*)(unsigned)) dlsym(lib, "mksim_process_remove");
        assert_non_null(process_remove);
        assert_int_equal(process_remove(pid), 0);
        apply_counts(c, "mixed2", false, r, counts, sizeof(counts)); /* a re-run repairs it */
        dlclose(lib);
        unlink(path);
        free(r);
        mk_config_free(c);
}

/* ---- pipelined: a GPU whose mode stays does not wait for the others' reset ---- */

static const char pipe_yaml[] = "version: v1\n"
                                "mig-configs:\n"
                                "  from:\n"
                                "    - {devices: [0], mig-enabled: true, mig-devices: {7g.40gb: 1}}\n"
                                "    - {devices: [1], mig-enabled: true, mig-devices: {1g.5gb: 7}}\n"
                                "    - {devices: [2], mig-enabled: false}\n"
                                "  to:\n"
                                "    - {devices: [0], mig-enabled: true, mig-devices: {3g.20gb: 2}}\n"
                                "    - {devices: [1], mig-enabled: false}\n"
                                "    - {devices: [2], mig-enabled: true, mig-devices: {2g.10gb: 3}}\n";

/* How long each mutating NVML call takes in pipe_apply's second apply: long
 * enough that GPU 1's 15 operations before the reset (450 ms) dwarf a
 * thread's start on a loaded machine, short enough that the test's three
 * such applies (about 22 operations each on their longest GPU) take ~2 s,
 * not the 7 s of 100 ms (the test's 9.5 of test-engine's 11 s). */
#define PIPE_OP_LATENCY_MS "30"

/* Where things happened in one recorded apply (event indexes; SIZE_MAX: never). */
struct pipe_order {
        size_t waiting, hook, first_gpu0_step, first_finished;
};

static struct pipe_order pipe_apply(const struct mk_config *c, const struct mk_hooks *h, bool sequential,
                                    struct recorder *r, char *fp, size_t fp_size) {
        char path[4200];
        state_path(path, sizeof(path));
        unlink(path);
        struct mk_error e = {0};
        struct mk_apply_report rep = {0};
        struct mk_engine_opts o = {.selected_config = "from"};
        if (mk_engine_apply(c, NULL, &o, &rep, &e) < 0)
                fail_msg("apply from: %s", e.msg);
        mk_apply_report_done(&rep);

        /* GPU 1 destroys 14 instances before its mode changes: 15
         * operations of PIPE_OP_LATENCY_MS (450 ms) before the reset
         * begins, while GPU 0's first step comes at once. */
        setenv("MIGKIT_SIM_OP_LATENCY_MS", PIPE_OP_LATENCY_MS, 1);
        const struct mk_progress p = {.fn = record, .userdata = r};
        o = (struct mk_engine_opts){.selected_config = "to", .progress = &p, .sequential = sequential};
        memset(r, 0, sizeof(*r));
        int q = mk_engine_apply(c, h, &o, &rep, &e);
        unsetenv("MIGKIT_SIM_OP_LATENCY_MS");
        if (q < 0)
                fail_msg("apply to: %s", e.msg);
        assert_int_equal(rep.resets, 2);
        mk_apply_report_done(&rep);
        check_finished_order(r);
        fingerprint(fp, fp_size);

        struct pipe_order w = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
        for (size_t i = 0; i < r->n; i++) {
                const struct recorded *ev = &r->ev[i];
                if (ev->kind == MK_PROGRESS_WAITING && w.waiting == SIZE_MAX)
                        w.waiting = i;
                if (ev->kind == MK_PROGRESS_HOOK && strstr(ev->text, "pre-apply-config"))
                        w.hook = i;
                if (ev->kind == MK_PROGRESS_STEP && ev->gpu == 0 && w.first_gpu0_step == SIZE_MAX)
                        w.first_gpu0_step = i;
                if (ev->kind == MK_PROGRESS_GPU_FINISHED && w.first_finished == SIZE_MAX)
                        w.first_finished = i;
        }
        assert_true(w.waiting != SIZE_MAX && w.first_gpu0_step != SIZE_MAX && w.first_finished != SIZE_MAX);
        /* Whatever the path, no GPU's line comes before the reset's. */
        assert_true(w.first_finished > w.waiting);
        return w;
}

/* GPU 0 changes its layout only, GPU 1 disables MIG (a reset), GPU 2
 * enables it (a reset) and then makes instances. Without a pre-apply-config
 * hook GPU 0 starts before the reset; with one, after the reset and the
 * hook, as with --sequential; all three end in the same state. */
static void test_pipelined_layout_before_reset(void **state) {
        if (!*state)
                skip();
        struct mk_config *c = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_config_parse(pipe_yaml, strlen(pipe_yaml), "pipe.yaml", &c, &e), 0);
        struct recorder *r = calloc(1, sizeof(*r));
        assert_non_null(r);
        char want[4096], got[4096];

        struct pipe_order w = pipe_apply(c, NULL, false, r, want, sizeof(want));
        assert_true(w.first_gpu0_step < w.waiting);
        assert_int_equal(w.hook, SIZE_MAX);

        static const char hooks_yaml[] = "version: v1\nhooks:\n  pre-apply-config:\n"
                                         "    - {command: /bin/sh, args: [-c, 'true']}\n";
        struct mk_hooks *h = NULL;
        assert_int_equal(mk_hooks_parse(hooks_yaml, strlen(hooks_yaml), "hooks.yaml", &h, &e), 0);
        w = pipe_apply(c, h, false, r, got, sizeof(got));
        mk_hooks_free(h);
        assert_true(w.waiting < w.hook && w.hook < w.first_gpu0_step);
        assert_string_equal(got, want);

        w = pipe_apply(c, NULL, true, r, got, sizeof(got));
        assert_true(w.waiting < w.first_gpu0_step);
        assert_string_equal(got, want);

        char path[4200];
        state_path(path, sizeof(path));
        unlink(path);
        free(r);
        mk_config_free(c);
}

static void test_progress_names(void **state) {
        for (int k = 0; k < _MK_PROGRESS_KIND_MAX; k++) {
                const char *s = mk_progress_kind_to_string((enum mk_progress_kind) k);
                assert_non_null(s);
                assert_int_equal(mk_progress_kind_from_string(s), k);
        }
        assert_int_equal(mk_progress_kind_from_string("nope"), _MK_PROGRESS_KIND_INVALID);
        assert_null(mk_progress_kind_to_string(_MK_PROGRESS_KIND_MAX));
        for (int k = 0; k < _MK_STEP_MAX; k++)
                assert_non_null(mk_progress_step_to_string((enum mk_progress_step) k));
}

static void keep_hook_output(void *userdata, const struct mk_progress_event *ev) {
        char **out = userdata;
        if (ev->kind == MK_PROGRESS_HOOK_OUTPUT) {
                free(*out);
                *out = strdup(ev->output);
        }
}

/* A failed hook's captured output (not shown otherwise) is reported as a
 * hook-output event; the error says which hook and its exit status. */
static void test_failed_hook_output_event(void **state) {
        char c[] = "-c", script[] = "echo first; echo 'the reason' >&2; exit 3", quiet_script[] = "exit 4",
             sh[] = "sh";
        char *args[] = {c, script, NULL};
        char *envs[] = {NULL};
        struct mk_hook_entry entry = {.command = sh, .args = args, .envs = envs};
        struct mk_hooks h = {0};
        h.entries[MK_HOOK_APPLY_START] = &entry;
        h.n_entries[MK_HOOK_APPLY_START] = 1;
        char *out = NULL;
        struct mk_progress p = {.fn = keep_hook_output, .userdata = &out};
        struct mk_engine_opts o = {.progress = &p};
        struct mk_error e = {0};
        assert_int_equal(mk_engine_run_hook(&h, MK_HOOK_APPLY_START, NULL, &o, &e), -EIO);
        assert_string_equal(e.msg, "apply-start hook 'sh' failed with exit status 3");
        assert_non_null(out);
        assert_string_equal(out, "first\nthe reason\n");
        free(out);
        out = NULL;

        char *quiet[] = {c, quiet_script, NULL};
        entry.args = quiet;
        assert_int_equal(mk_engine_run_hook(&h, MK_HOOK_APPLY_START, NULL, &o, &e), -EIO);
        assert_string_equal(e.msg, "apply-start hook 'sh' failed with exit status 4");
        assert_null(out);
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
                cmocka_unit_test(test_progress_names),
                cmocka_unit_test(test_failed_hook_output_event),
                cmocka_unit_test_setup_teardown(test_apply_events_on_simulator, sim_setup, sim_teardown),
                cmocka_unit_test_setup_teardown(test_parallel_apply_same_as_sequential, sim_setup, sim_teardown),
                cmocka_unit_test_setup_teardown(test_parallel_apply_one_gpu_fails, sim_setup, sim_teardown),
                cmocka_unit_test_setup_teardown(test_pipelined_layout_before_reset, sim_setup, sim_teardown),
        };
        return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
