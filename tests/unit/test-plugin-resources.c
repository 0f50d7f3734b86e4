/* Unit tests for plugin/resources: the device plugin's resources as data.
 * Each case is a hand-built node, a MIG strategy and an optional sharing
 * config (YAML or a --resource-config string); the resources it must give
 * (one line each: "name: device indices", replicas as "0::1"), or the error
 * substring it must fail with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/host.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "nvml/nvml.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

/* "nvidia.com/gpu: 0 1 | nvidia.com/mig-1g.5gb: 1:0 1:1" */
static char *dump(const struct mk_dp_resources *rs) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (size_t i = 0; i < rs->n; i++) {
                const struct mk_dp_resource *r = &rs->r[i];
                assert_int_equal(mk_buf_printf(&b, "%s%s:", i ? " | " : "", r->name), 0);
                for (size_t j = 0; j < r->n_devices; j++) {
                        const struct mk_dp_device *d = &r->devices[j];
                        if (!streq(d->id, d->base_id))
                                assert_int_equal(mk_buf_printf(&b, " %s::%u", d->index, d->replica), 0);
                        else
                                assert_int_equal(mk_buf_printf(&b, " %s", d->index), 0);
                }
        }
        return mk_buf_take(&b);
}

struct rcase {
        const char *name;
        struct snap_gpu gpus[5];
        enum mk_mig_strategy strategy;
        const char *config;     /* YAML, or "rc:<resource-config string>" */
        const char *want;       /* dump, or "error: <substring>" */
};

static const struct rcase cases[] = {
        {"none: whole GPUs, MIG or not", {{"a100", MIG, "1g.5gb*2"}, {"a100", OFF, NULL}, {"t4", OFF, NULL}},
         MK_MIG_STRATEGY_NONE, NULL, "nvidia.com/gpu: 0 1 2"},
        {"empty node", {{0}}, MK_MIG_STRATEGY_MIXED, NULL, ""},
        {"single without MIG-enabled GPUs behaves as none", {{"a100", OFF, NULL}, {"t4", OFF, NULL}}, MK_MIG_STRATEGY_SINGLE,
         NULL, "nvidia.com/gpu: 0 1"},
        {"single: MIG devices as nvidia.com/gpu", {{"a100", MIG, "1g.5gb*3"}, {"a100", MIG, "1g.5gb*2"}},
         MK_MIG_STRATEGY_SINGLE, NULL, "nvidia.com/gpu: 0:0 0:1 0:2 1:0 1:1"},
        {"single: a CI smaller than its GI is fine", {{"a100", MIG, "1c.3g.20gb*2"}}, MK_MIG_STRATEGY_SINGLE, NULL,
         "nvidia.com/gpu: 0:0 0:1"},
        {"single: two types", {{"a100", MIG, "1g.5gb,2g.10gb"}}, MK_MIG_STRATEGY_SINGLE, NULL,
         "error: more than one MIG device type present on node: '1g.5gb' on GPU 0 and '2g.10gb' on GPU 0"},
        {"single: same name, other model", {{"a100-80", MIG, "1g.10gb"}, {"h100", MIG, "1g.10gb"}},
         MK_MIG_STRATEGY_SINGLE, NULL, "error: more than one MIG device type present on node"},
        {"single: MIG GPU without devices", {{"a100", MIG, "1g.5gb"}, {"a100", MIG, ""}}, MK_MIG_STRATEGY_SINGLE,
         NULL, "error: GPU 1 has no MIG devices configured"},
        {"single: MIG and full GPUs mixed", {{"a100", MIG, "1g.5gb"}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_SINGLE, NULL,
         "error: GPU 1: MIG is disabled while other GPUs have it enabled"},
        {"single: non-MIG-capable GPU beside MIG", {{"a100", MIG, "1g.5gb"}, {"t4", OFF, NULL}}, MK_MIG_STRATEGY_SINGLE,
         NULL, "error: same migEnabled value"},
        {"mixed: per profile, full GPUs as gpu",
         {{"a100", MIG, "3g.20gb,1g.5gb*2,2g.10gb"}, {"a100", OFF, NULL}, {"a100", MIG, "1g.5gb"}, {"t4", OFF, NULL}},
         MK_MIG_STRATEGY_MIXED, NULL,
         "nvidia.com/gpu: 1 3 | nvidia.com/mig-1g.5gb: 0:1 0:2 2:0 | nvidia.com/mig-2g.10gb: 0:3 | "
         "nvidia.com/mig-3g.20gb: 0:0"},
        {"mixed: +me becomes .me", {{"a100-80", MIG, "1g.10gb+me,1g.10gb"}}, MK_MIG_STRATEGY_MIXED, NULL,
         "nvidia.com/mig-1g.10gb: 0:1 | nvidia.com/mig-1g.10gb.me: 0:0"},
        {"mixed: MIG GPU without devices only warns", {{"a100", MIG, ""}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_MIXED,
         NULL, "nvidia.com/gpu: 1"},
        {"mixed: CI smaller than GI: named by its GPU instance profile",
         {{"a100", MIG, "1g.5gb"}, {"a100", MIG, "1c.3g.20gb,3g.20gb"}}, MK_MIG_STRATEGY_MIXED, NULL,
         "nvidia.com/mig-1g.5gb: 0:0 | nvidia.com/mig-3g.20gb: 1:0 1:1"},
        {"time-slicing replicas", {{"a100", OFF, NULL}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 3}\n",
         "nvidia.com/gpu: 0::0 0::1 0::2 1::0 1::1 1::2"},
        {"renameByDefault", {{"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: gpu, replicas: 2}\n",
         "nvidia.com/gpu.shared: 0::0 0::1"},
        {"devices list splits a resource", {{"a100", OFF, NULL}, {"a100", OFF, NULL}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, rename: gpu-shared, devices: [\"2\", "
         "GPU-00000000-0000-0000-0000-000000000000], replicas: 2}\n",
         "nvidia.com/gpu: 1 | nvidia.com/gpu-shared: 0::0 0::1 2::0 2::1"},
        {"devices count, then all the rest", {{"a100", OFF, NULL}, {"a100", OFF, NULL}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, rename: big, devices: 1, replicas: 4}\n"
         "    - {name: gpu, replicas: 2}\n",
         "nvidia.com/big: 0::0 0::1 0::2 0::3 | nvidia.com/gpu: 1::0 1::1 2::0 2::1"},
        {"mixed: sharing one profile, by MIG index and by parent", {{"a100", MIG, "1g.5gb*2"}, {"a100", MIG, "1g.5gb"}},
         MK_MIG_STRATEGY_MIXED,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: mig-1g.5gb, devices: [\"0:1\", \"1\"], replicas: 2}\n",
         "nvidia.com/mig-1g.5gb: 0:0 0:1::0 0:1::1 1:0::0 1:0::1"},
        {"sharing entry for a resource the node lacks", {{"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: mig-1g.5gb, devices: [\"0:0\"], replicas: 2}\n",
         "nvidia.com/gpu: 0"},
        {"devices entry naming nothing", {{"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, devices: [\"0\", \"5\"], replicas: 2}\n",
         "error: sharing.timeSlicing.resources[0].devices[1]: '5' names no device of 'nvidia.com/gpu'"},
        {"one device in two entries", {{"a100", OFF, NULL}, {"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, devices: [\"0\"], replicas: 2}\n"
         "    - {name: gpu, rename: b, devices: [\"1\", \"0\"], replicas: 3}\n",
         "error: sharing.timeSlicing.resources[1]: device 'GPU-00000000-0000-0000-0000-000000000000' (index 0) is "
         "already taken by entry 0"},
        {"mps with MIG", {{"a100", MIG, "1g.5gb"}}, MK_MIG_STRATEGY_SINGLE,
         "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n",
         "error: MPS sharing is not supported with MIG devices"},
        {"mps with mixed", {{"a100", OFF, NULL}}, MK_MIG_STRATEGY_MIXED,
         "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n",
         "error: MPS sharing is not supported with the mixed MIG strategy"},
        {"mps on whole GPUs", {{"a100", OFF, NULL}}, MK_MIG_STRATEGY_NONE,
         "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n", "nvidia.com/gpu: 0::0 0::1"},
        {"resource-config: rename and replicas", {{"a100", MIG, "3g.20gb,1g.5gb"}, {"a100", OFF, NULL}},
         MK_MIG_STRATEGY_MIXED, "rc:gpu:sharedgpu:2, mig-3g.20gb:small:1",
         "nvidia.com/mig-1g.5gb: 0:1 | nvidia.com/sharedgpu: 1::0 1::1 | nvidia.com/small: 0:0"},
        {"resource-config: auto replicas by memory (MIG: its own)", {{"a100", MIG, "1g.5gb"}, {"t4", OFF, NULL}},
         MK_MIG_STRATEGY_MIXED, "rc:mig-1g.5gb:mig-1g.5gb:-1,gpu:gpu-mem:-1",
         "nvidia.com/gpu-mem: 1::0 1::1 1::2 1::3 1::4 1::5 1::6 1::7 1::8 1::9 1::10 1::11 1::12 1::13 1::14 | "
         "nvidia.com/mig-1g.5gb: 0:0::0 0:0::1 0:0::2 0:0::3"},
};

static struct mk_plugin_config *load_config(const char *text) {
        if (!text)
                return NULL;
        struct mk_error e = {0};
        struct mk_plugin_config *c = NULL;
        int r = strneq(text, "rc:", 3) ? mk_plugin_config_parse_resource_config(text + 3, &c, &e)
                                       : mk_plugin_config_parse(text, strlen(text), "config.yaml", &c, &e);
        if (r < 0)
                fail_msg("config '%s': %s", text, e.msg);
        return c;
}

static void test_cases(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct rcase *t = &cases[i];
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(t->gpus);
                assert_non_null(s);
                _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = load_config(t->config);
                struct mk_dp_options o;
                mk_dp_options_init(&o);
                o.mig_strategy = t->strategy;
                o.config = cfg;
                struct mk_error e = {0};
                _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
                int r = mk_dp_resources_build(s, &o, &rs, &e);
                if (strneq(t->want, "error: ", 7)) {
                        if (r >= 0)
                                fail_msg("case '%s': built, want %s", t->name, t->want);
                        assert_int_equal(r, -EINVAL);
                        assert_null(rs);
                        if (!strstr(e.msg, t->want + 7))
                                fail_msg("case '%s':\n got: %s\nwant: %s", t->name, e.msg, t->want + 7);
                        continue;
                }
                if (r < 0)
                        fail_msg("case '%s': %s", t->name, e.msg);
                _cleanup_free_ char *got = dump(rs);
                if (!streq(got, t->want))
                        fail_msg("case '%s':\n got: %s\nwant: %s", t->name, got, t->want);
        }
}

static void host_init(struct mk_host *h) {
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        assert_non_null(src);
        *h = (struct mk_host) {0};
        assert_true(asprintf(&h->sysfs_root, "%s/tests/fixtures/plugin/sys", src) > 0);
        assert_true(asprintf(&h->proc_root, "%s/tests/fixtures/plugin/proc", src) > 0);
        assert_true(asprintf(&h->dev_root, "%s/tests/fixtures/plugin/dev", src) > 0);
}

/* Ids, endpoints, NUMA from sysfs, caps from mig-minors, memory. */
static void test_device_fields(void **state) {
        const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb,3g.20gb"}, {"a100", MIG, "1g.5gb"}, {"a100", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_MIXED;
        o.host = &h;
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        assert_int_equal(rs->n, 3);

        const struct mk_dp_resource *gpu = mk_dp_resources_find(rs, "nvidia.com/gpu");
        assert_non_null(gpu);
        assert_string_equal(gpu->endpoint, "nvidia-gpu.sock");
        assert_int_equal(gpu->n_devices, 1);
        assert_string_equal(gpu->devices[0].id, "GPU-00000002-0000-0000-0000-000000000000");
        assert_string_equal(gpu->devices[0].index, "2");
        assert_int_equal(gpu->devices[0].numa_node, -1); /* sysfs says -1 */
        assert_false(gpu->devices[0].mig);
        assert_true(gpu->devices[0].healthy);
        assert_int_equal(gpu->devices[0].memory_bytes, 40960ull << 20);

        const struct mk_dp_resource *m1 = mk_dp_resources_find(rs, "nvidia.com/mig-1g.5gb");
        assert_non_null(m1);
        assert_string_equal(m1->endpoint, "nvidia-mig-1g.5gb.sock");
        assert_int_equal(m1->n_devices, 2);
        const struct mk_dp_device *d = &m1->devices[1];
        assert_string_equal(d->id, "MIG-00000001-0000-0000-0000-000000000100");
        assert_string_equal(d->base_id, d->id);
        assert_string_equal(d->gpu_uuid, "GPU-00000001-0000-0000-0000-000000000000");
        assert_string_equal(d->index, "1:0");
        assert_int_equal(d->gpu, 1);
        assert_int_equal(d->gi_id, 1);
        assert_int_equal(d->ci_id, 0);
        assert_int_equal(d->gi_cap, 147); /* gpu1/gi1/access */
        assert_int_equal(d->ci_cap, 148); /* gpu1/gi1/ci0/access */
        assert_int_equal(d->numa_node, 1);
        assert_int_equal(d->memory_bytes, 4864ull << 20);
        assert_int_equal(m1->devices[0].numa_node, 0);
        assert_int_equal(m1->devices[0].gi_cap, 12);
        assert_int_equal(m1->devices[0].ci_cap, 13);
        assert_ptr_equal(mk_dp_resource_find_device(m1, d->id), d);
        assert_null(mk_dp_resource_find_device(m1, "MIG-nope"));
        assert_null(mk_dp_resources_find(rs, "nvidia.com/mig-7g.40gb"));

        /* Without host roots: caps and NUMA unknown, not an error. */
        o.host = NULL;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs2 = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs2, &e), 0);
        m1 = mk_dp_resources_find(rs2, "nvidia.com/mig-1g.5gb");
        assert_int_equal(m1->devices[0].gi_cap, -1);
        assert_int_equal(m1->devices[0].numa_node, -1);
}

/* A damaged mig-minors (tests/fixtures/plugin/proc-bad): bad lines skipped, never a crash. */
static void test_bad_mig_minors(void **state) {
        const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb"}, {"a100", MIG, "1g.5gb"}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h);
        free(h.proc_root);
        assert_true(asprintf(&h.proc_root, "%s/tests/fixtures/plugin/proc-bad", getenv("MIGKIT_SOURCE_DIR")) > 0);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_SINGLE;
        o.host = &h;
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/gpu");
        assert_int_equal(r->n_devices, 2);
        assert_int_equal(r->devices[0].gi_cap, 30);
        assert_int_equal(r->devices[0].ci_cap, 31);
        assert_int_equal(r->devices[1].gi_cap, -1);
        assert_int_equal(r->devices[1].ci_cap, 40);
}

static void test_health(void **state) {
        const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb*2,3g.20gb"}, {"a100", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg =
                load_config("sharing:\n  timeSlicing:\n    resources:\n    - {name: mig-1g.5gb, replicas: 3}\n");
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_MIXED;
        o.config = cfg;
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *m1 = mk_dp_resources_find(rs, "nvidia.com/mig-1g.5gb");
        assert_int_equal(m1->n_devices, 6);
        assert_true(m1->shared);
        assert_int_equal(m1->replicas, 3);
        /* An Xid on GI 2: its three replicas, nothing else (upstream marks one, #1929). */
        assert_int_equal(mk_dp_resources_set_health(rs, 0, 2, UINT32_MAX, false), 3);
        for (size_t i = 0; i < m1->n_devices; i++)
                assert_int_equal(m1->devices[i].healthy, m1->devices[i].gi_id != 2);
        assert_int_equal(mk_dp_resources_set_health(rs, 0, 2, 0, false), 0); /* already */
        /* The whole GPU 0: the other GI's replicas and the 3g device. */
        assert_int_equal(mk_dp_resources_set_health(rs, 0, UINT32_MAX, UINT32_MAX, false), 4);
        assert_false(mk_dp_resources_find(rs, "nvidia.com/mig-3g.20gb")->devices[0].healthy);
        assert_true(mk_dp_resources_find(rs, "nvidia.com/gpu")->devices[0].healthy);
        /* Recovery: back to healthy. */
        assert_int_equal(mk_dp_resources_set_health(rs, 0, UINT32_MAX, UINT32_MAX, true), 7);
        assert_int_equal(mk_dp_resources_set_health(rs, 9, UINT32_MAX, UINT32_MAX, false), 0);
        assert_int_equal(mk_dp_resources_set_health(NULL, 0, UINT32_MAX, UINT32_MAX, false), 0);

        /* Strategy none: a GI's event reaches the whole GPU that holds it. */
        o.mig_strategy = MK_MIG_STRATEGY_NONE;
        o.config = NULL;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *whole = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &whole, &e), 0);
        assert_int_equal(mk_dp_resources_set_health(whole, 0, 2, 0, false), 1);
        assert_false(whole->r[0].devices[0].healthy);
        assert_true(whole->r[0].devices[1].healthy);
}

static void test_strings(void **state) {
        unsigned bits = 0;
        struct mk_error e = {0};
        assert_int_equal(mk_dp_list_strategies_parse("envvar", &bits, &e), 0);
        assert_int_equal(bits, MK_DP_LIST_ENVVAR);
        assert_int_equal(mk_dp_list_strategies_parse(" volume-mounts , cdi-cri,cdi-annotations", &bits, &e), 0);
        assert_int_equal(bits, MK_DP_LIST_VOLUME_MOUNTS | MK_DP_LIST_CDI_CRI | MK_DP_LIST_CDI_ANNOTATIONS);
        bits = 77;
        assert_int_equal(mk_dp_list_strategies_parse("envvar,cdi", &bits, &e), -EINVAL);
        assert_int_equal(bits, 77);
        assert_non_null(strstr(e.msg, "'cdi'"));
        assert_int_equal(mk_dp_list_strategies_parse("", &bits, &e), -EINVAL);
        assert_int_equal(mk_dp_list_strategies_parse("envvar,", &bits, &e), -EINVAL);
        assert_int_equal(mk_dp_list_strategy_from_string("cdi-cri"), MK_DP_LIST_CDI_CRI);
        assert_int_equal(mk_dp_list_strategy_from_string("CDI-CRI"), -EINVAL);
        assert_string_equal(mk_dp_list_strategy_to_string(MK_DP_LIST_VOLUME_MOUNTS), "volume-mounts");
        assert_null(mk_dp_list_strategy_to_string(3));
        assert_int_equal(mk_dp_id_strategy_from_string("index"), MK_DP_ID_INDEX);
        assert_int_equal(mk_dp_id_strategy_from_string("indices"), _MK_DP_ID_INVALID);
        assert_string_equal(mk_dp_id_strategy_to_string(MK_DP_ID_UUID), "uuid");
        assert_null(mk_dp_id_strategy_to_string(_MK_DP_ID_MAX));
        assert_null(mk_dp_resources_free(NULL));
}

/* Snapshot faults a broken NVML could give: never a crash, an error naming the GPU. */
static void test_bad_snapshots(void **state) {
        const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb"}, {"a100", OFF, NULL}, {0}};
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_MIXED;
        struct mk_error e = {0};
        struct mk_dp_resources *rs = NULL;
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
                s->gpus[0].gis[0].cis[0].uuid[0] = 0;
                assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "GPU 0: MIG device GI 1 CI 0 has no UUID"));
        }
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
                s->gpus[0].gis[0].profile_id = 77;
                assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "GPU instance profile 77"));
        }
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
                snprintf(s->gpus[1].uuid, sizeof(s->gpus[1].uuid), "%s", s->gpus[0].uuid);
                s->gpus[0].mig_current = MK_MIG_DISABLED;
                assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "appears twice"));
        }
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
                s->gpus[1].uuid[0] = 0;
                assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "GPU 1: NVML reported no UUID"));
        }
        o.mig_strategy = (enum mk_mig_strategy) 9;
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
                assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -EINVAL);
        }
        assert_null(rs);
}

/* Over the device cap: -E2BIG, not a truncated list. */
static void test_device_cap(void **state) {
        struct snap_gpu gpus[80];
        for (size_t i = 0; i < 79; i++)
                gpus[i] = (struct snap_gpu) {"a100", OFF, NULL};
        gpus[79] = (struct snap_gpu) {0};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg =
                load_config("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1024}\n");
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.config = cfg;
        struct mk_error e = {0};
        struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), -E2BIG);
        assert_null(rs);
        assert_non_null(strstr(e.msg, "more than 65536 devices"));
}

/* ---- against the simulator: a snapshot as nvml/ reads it ---- */

static char state_dir[] = "/tmp/migkit-test-plugin-resources-XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
        return remove(path);
}

/* Creates the k-th placement's GI of profile `pname` on `gpu`, with one full CI. */
static void sim_create(struct mk_nvml *n, const struct mk_snapshot *s, unsigned gpu, const char *pname, size_t k) {
        const struct mk_gpu *g = &s->gpus[gpu];
        const struct mk_gi_profile *p = NULL;
        for (size_t i = 0; i < g->n_profiles && !p; i++)
                if (streq(g->profiles[i].name, pname))
                        p = &g->profiles[i];
        assert_non_null(p);
        assert_true(k < p->n_placements);
        struct mk_error e = {0};
        unsigned gi = 0, ci = 0, ci_profile = UINT32_MAX;
        if (mk_nvml_create_gi(n, gpu, p->id, p->placements[k], &gi, &e) < 0)
                fail_msg("create GI: %s", e.msg);
        const struct mk_ci_profile *cp = NULL;
        for (size_t i = 0; i < p->n_ci_profiles && !cp; i++)
                if (p->ci_profiles[i].slices == p->slices)
                        cp = &p->ci_profiles[i];
        assert_non_null(cp);
        if (cp->queried)
                ci_profile = cp->id;
        else
                assert_int_equal(mk_nvml_ci_profile_id(n, gpu, gi, cp->nvml_enum, &ci_profile, &e), 0);
        if (mk_nvml_create_ci(n, gpu, gi, ci_profile, (struct mk_placement) {0, cp->slices}, &ci, &e) < 0)
                fail_msg("create CI: %s", e.msg);
}

static void test_simulator(void **state) {
        const char *lib = getenv("MIGKIT_NVML_LIB");
        if (!lib)
                skip();
        assert_non_null(mkdtemp(state_dir));
        char path[256];
        snprintf(path, sizeof(path), "%s/state.json", state_dir);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", "dgx-a100", 1);
        void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(dl);
        int (*sim_reset)(unsigned) = (int (*)(unsigned)) dlsym(dl, "mksim_reset_gpu");
        assert_non_null(sim_reset);
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        if (mk_nvml_open(lib, &n, &e) < 0)
                fail_msg("%s", e.msg);
        for (unsigned gpu = 0; gpu < 2; gpu++) {
                bool pending = false;
                assert_int_equal(mk_nvml_set_mig_mode(n, gpu, true, &pending, &e), 0);
                if (pending)
                        assert_int_equal(sim_reset(gpu), 0);
        }
        {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s0 = NULL;
                assert_int_equal(mk_nvml_snapshot(n, &s0, &e), 0);
                sim_create(n, s0, 0, "3g.20gb", 0);
                sim_create(n, s0, 0, "3g.20gb", 1);
                sim_create(n, s0, 1, "1g.5gb", 0);
                sim_create(n, s0, 1, "1g.5gb", 1);
        }
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        n = mk_nvml_close(n);
        /* The simulator's own host tree (mig-minors, sysfs), no fixture files. */
        int (*host_root)(char **) = (int (*)(char **)) dlsym(dl, "mksim_host_root");
        assert_non_null(host_root);
        char *root = NULL;
        assert_int_equal(host_root(&root), 0);
        dlclose(dl);

        _cleanup_(mk_host_done) struct mk_host h = {0};
        assert_true(asprintf(&h.sysfs_root, "%s/sys", root) > 0);
        assert_true(asprintf(&h.proc_root, "%s/proc", root) > 0);
        h.dev_root = strdup("/dev");
        free(root);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_MIXED;
        o.host = &h;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        if (mk_dp_resources_build(s, &o, &rs, &e) < 0)
                fail_msg("%s", e.msg);
        _cleanup_free_ char *got = dump(rs);
        assert_string_equal(got, "nvidia.com/gpu: 2 3 4 5 6 7 | nvidia.com/mig-1g.5gb: 1:0 1:1 | "
                                 "nvidia.com/mig-3g.20gb: 0:0 0:1");
        const struct mk_dp_resource *m3 = mk_dp_resources_find(rs, "nvidia.com/mig-3g.20gb");
        for (size_t i = 0; i < m3->n_devices; i++) {
                const struct mk_dp_device *d = &m3->devices[i];
                assert_true(strneq(d->id, "MIG-", 4));
                assert_string_equal(d->gpu_uuid, s->gpus[0].uuid);
                assert_string_equal(d->id, s->gpus[0].gis[i].cis[0].uuid);
                assert_int_equal(d->gi_id, s->gpus[0].gis[i].id);
                /* The driver's numbering (gpu0/gi<g>/access = 3 + 9g, its ci<c> = that + 1 + c). */
                assert_int_equal(d->gi_cap, 3 + 9 * (int) d->gi_id);
                assert_int_equal(d->ci_cap, d->gi_cap + 1 + (int) d->ci_id);
                assert_int_equal(d->numa_node, 0);
        }
        /* Single fails on this layout, naming the rule. */
        o.mig_strategy = MK_MIG_STRATEGY_SINGLE;
        struct mk_dp_resources *bad = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &bad, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "more than one MIG device type present on node: '3g.20gb' on GPU 0 and '1g.5gb' on GPU 1"));

        /* The interconnect NVML reports: NVSwitch, 12 links between every pair,
         * PCIe pairs (0,1) (2,3) ... under one switch, 0-3 and 4-7 on one CPU each. */
        const struct mk_dp_resource *gpu = mk_dp_resources_find(rs, "nvidia.com/gpu");
        const char *avail[] = {gpu->devices[5].id, gpu->devices[1].id, gpu->devices[2].id};
        _cleanup_strv_free_ char **ids = NULL;
        assert_int_equal(mk_dp_preferred(s, gpu, avail, 3, NULL, 0, 2, &ids, &e), 0);
        char pair[80];
        const char *a = mk_dp_resource_find_device(gpu, ids[0])->index, *b = mk_dp_resource_find_device(gpu, ids[1])->index;
        snprintf(pair, sizeof(pair), "%s %s", strcmp(a, b) < 0 ? a : b, strcmp(a, b) < 0 ? b : a);
        assert_string_equal(pair, "4 7"); /* same NUMA node; 3 is across the sockets */
        assert_int_equal(nftw(state_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* Issue 16: the cases where upstream differed, with upstream's answers
 * (nvidia-device-plugin v0.14.5, v0.15.1, v0.16.2 on the same layouts). */
static struct mk_dp_resources *build_with(const struct snap_gpu *gpus, enum mk_mig_strategy strategy,
                                          struct mk_error *e) {
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = strategy;
        struct mk_dp_resources *rs = NULL;
        return mk_dp_resources_build(s, &o, &rs, e) < 0 ? NULL : rs;
}

static void test_upstream_parity(void **state) {
        struct mk_error e = {0};
        /* Case 2: two 1c.3g.20gb per GPU on 8 A100: 16 devices of nvidia.com/mig-3g.20gb. */
        static const struct snap_gpu c2[] = {
                {"a100", MIG, "1c.3g.20gb*2"}, {"a100", MIG, "1c.3g.20gb*2"}, {"a100", MIG, "1c.3g.20gb*2"},
                {"a100", MIG, "1c.3g.20gb*2"}, {"a100", MIG, "1c.3g.20gb*2"}, {"a100", MIG, "1c.3g.20gb*2"},
                {"a100", MIG, "1c.3g.20gb*2"}, {"a100", MIG, "1c.3g.20gb*2"}, {NULL, 0, NULL}};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *r2 = build_with(c2, MK_MIG_STRATEGY_MIXED, &e);
        if (!r2)
                fail_msg("%s", e.msg);
        assert_int_equal(r2->n, 1);
        assert_string_equal(r2->r[0].name, "nvidia.com/mig-3g.20gb");
        assert_int_equal(r2->r[0].n_devices, 16);
        assert_null(r2->warning);

        /* Case 3: A100 40GB (1g.10gb x4) and 80GB (1g.10gb x7): 44 devices of nvidia.com/mig-1g.10gb. */
        static const struct snap_gpu c3[] = {
                {"a100", MIG, "1g.10gb*4"}, {"a100", MIG, "1g.10gb*4"}, {"a100", MIG, "1g.10gb*4"},
                {"a100", MIG, "1g.10gb*4"}, {"a100-80", MIG, "1g.10gb*7"}, {"a100-80", MIG, "1g.10gb*7"},
                {"a100-80", MIG, "1g.10gb*7"}, {"a100-80", MIG, "1g.10gb*7"}, {NULL, 0, NULL}};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *r3 = build_with(c3, MK_MIG_STRATEGY_MIXED, &e);
        if (!r3)
                fail_msg("%s", e.msg);
        assert_int_equal(r3->n, 1);
        assert_string_equal(r3->r[0].name, "nvidia.com/mig-1g.10gb");
        assert_int_equal(r3->r[0].n_devices, 44);
        /* ... single: upstream's plugin refuses two device types; so do we. */
        assert_null(build_with(c3, MK_MIG_STRATEGY_SINGLE, &e));
        assert_non_null(strstr(e.msg, "more than one MIG device type present on node"));

        /* Case 5: mixed, MIG-enabled GPUs without instances: built, with one warning naming them. */
        static const struct snap_gpu c5[] = {
                {"a100", MIG, ""}, {"a100", OFF, NULL}, {"a100", MIG, ""}, {"a100", MIG, "1g.5gb"}, {NULL, 0, NULL}};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *r5 = build_with(c5, MK_MIG_STRATEGY_MIXED, &e);
        if (!r5)
                fail_msg("%s", e.msg);
        assert_non_null(r5->warning);
        assert_string_equal(r5->warning, "Invalid configuration for mig-strategy=mixed: GPU 0, 2 have MIG enabled "
                                         "but no MIG devices; they are not advertised (create MIG devices, or "
                                         "disable MIG)");
        static const struct snap_gpu c5b[] = {{"a100", MIG, ""}, {NULL, 0, NULL}};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *r5b = build_with(c5b, MK_MIG_STRATEGY_MIXED, &e);
        assert_non_null(r5b);
        assert_int_equal(r5b->n, 0);
        assert_non_null(strstr(r5b->warning, "GPU 0 has MIG enabled but no MIG devices; it is not advertised"));
        /* Under none nothing is wrong. */
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *r5c = build_with(c5b, MK_MIG_STRATEGY_NONE, &e);
        assert_non_null(r5c);
        assert_null(r5c->warning);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_device_fields),
                cmocka_unit_test(test_bad_mig_minors),
                cmocka_unit_test(test_health),
                cmocka_unit_test(test_strings),
                cmocka_unit_test(test_bad_snapshots),
                cmocka_unit_test(test_device_cap),
                cmocka_unit_test(test_simulator),
                cmocka_unit_test(test_upstream_parity),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
