/* Unit tests for plugin/dynamic: the replica resource of dynamic MIG mode,
 * GetPreferredAllocation over it, picking the reservation an Allocate
 * serves from a pod list (as data: pods in, chosen pod or reason out), the
 * Allocate answers built from a claim's MIG devices, and the exact
 * mig-allocated patch. The apiserver round trip is in
 * tests/integration/test-scheduler.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/host.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/dynamic.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "sched/claim.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

/* GPU 0: an A100-40GB with MIG on and a 3g.20gb (GI 1) and a 1g.5gb (GI 2);
 * GPU 1: MIG off; GPU 2: an H100 with MIG on, no instance. snap.h leaves
 * instance counts at 0: NVML's are set here (7 / slices, 1 for 7g). */
static struct mk_snapshot *node(void) {
        static const struct snap_gpu gpus[] = {
                {"a100", MIG, "3g.20gb,1g.5gb"}, {"a100", OFF, NULL}, {"h100", MIG, NULL}, {0}};
        struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        for (size_t i = 0; i < s->n_gpus; i++)
                for (size_t k = 0; k < s->gpus[i].n_profiles; k++) {
                        struct mk_gi_profile *p = &s->gpus[i].profiles[k];
                        p->max_count = p->slices >= 4 ? 1 : 7 / p->slices;
                }
        return s;
}

#define MIG0_1 "MIG-00000000-0000-0000-0000-000000000100" /* GPU 0, GI 1 (3g.20gb) */
#define MIG0_2 "MIG-00000000-0000-0000-0000-000000000200" /* GPU 0, GI 2 (1g.5gb) */
#define GPU0 "GPU-00000000-0000-0000-0000-000000000000"
#define GPU2 "GPU-00000002-0000-0000-0000-000000000000"

static void test_resources(void **state) {
        (void) state;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = node();
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s, &rs, &e), 0);
        assert_int_equal(rs->n, 1);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/gpu");
        assert_non_null(r);
        assert_string_equal(r->endpoint, "nvidia-gpu.sock");
        assert_int_equal(r->n_devices, 14); /* 7 per MIG-enabled GPU, none for the MIG-off one */
        assert_true(r->shared);
        assert_int_equal(r->replicas, 7);
        assert_string_equal(r->devices[0].id, "dyn-" GPU0 "::0");
        assert_string_equal(r->devices[6].id, "dyn-" GPU0 "::6");
        assert_string_equal(r->devices[7].id, "dyn-" GPU2 "::0");
        assert_string_equal(r->devices[7].base_id, "dyn-" GPU2);
        assert_int_equal(r->devices[7].gpu, 2);
        for (size_t i = 0; i < r->n_devices; i++) {
                assert_true(r->devices[i].healthy);
                assert_false(r->devices[i].mig);
                assert_ptr_equal(mk_dp_resource_find_device(r, r->devices[i].id), &r->devices[i]);
        }
        assert_null(mk_dp_resource_find_device(r, "dyn-" GPU0 "::7"));
        assert_null(mk_dp_resource_find_device(r, MIG0_1));
        /* Health follows the parent GPU, a GI's event included. */
        assert_int_equal(mk_dp_resources_set_health(rs, 0, 1, UINT32_MAX, false), 7);
        assert_false(rs->r[0].devices[3].healthy);
        assert_true(rs->r[0].devices[7].healthy);
        assert_int_equal(mk_dp_resources_set_health(rs, 0, UINT32_MAX, UINT32_MAX, true), 7);

        /* No MIG-enabled GPU: no resource, not an error. */
        static const struct snap_gpu off[] = {{"a100", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s2 = snap_build(off);
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs2 = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s2, &rs2, &e), 0);
        assert_int_equal(rs2->n, 0);
}

static void test_preferred(void **state) {
        (void) state;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = node();
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s, &rs, NULL), 0);
        const struct mk_dp_resource *r = &rs->r[0];
        const char *avail[] = {"dyn-" GPU0 "::1", "dyn-" GPU0 "::2", "dyn-" GPU2 "::5"};
        _cleanup_strv_free_ char **ids = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_dp_preferred(s, r, avail, 3, NULL, 0, 2, &ids, &e), 0);
        /* Any valid choice is right; the shared-device rule spreads over GPUs. */
        assert_non_null(ids[0]);
        assert_non_null(ids[1]);
        assert_null(ids[2]);
        assert_true(strstr(ids[0], GPU2) || strstr(ids[1], GPU2));
        const char *unknown[] = {"GPU-x"};
        _cleanup_strv_free_ char **none = NULL;
        assert_int_equal(mk_dp_preferred(s, r, unknown, 1, NULL, 0, 1, &none, &e), -EINVAL);
        assert_null(none);
}

/* A pod of namespace "ns" named `name` with a reservation on `resnode` at
 * `time` of `devices` (container:gpu:profile;...), MIG UUIDs `mig` (JSON
 * array or NULL: not created), allocated or not, phase. */
static json_t *pod(const char *name, const char *resnode, long time, const char *devices, const char *mig,
                   bool allocated, const char *phase) {
        json_t *ann = json_object();
        if (resnode) {
                json_t *devs = json_array();
                _cleanup_free_ char *copy = strdup(devices);
                char *save = NULL;
                unsigned start = 0;
                for (char *w = strtok_r(copy, ";", &save); w; w = strtok_r(NULL, ";", &save)) {
                        assert_true(w[0] >= '0' && w[0] <= '9' && w[1] == ':');
                        unsigned ctr = (unsigned) (w[0] - '0');
                        const char *gpu = w + 2;
                        json_array_append_new(devs, json_pack("{s:i,s:s,s:s,s:i,s:i,s:{s:i,s:i}}", "container", ctr,
                                                              "gpu", gpu, "profile", "1g.5gb", "profileID", 19,
                                                              "slices", 1, "placement", "start", start++, "size", 1));
                }
                json_t *res = json_pack("{s:i,s:s,s:i,s:o}", "version", 1, "node", resnode, "time", time, "devices",
                                        devs);
                char *txt = json_dumps(res, JSON_COMPACT);
                json_object_set_new(ann, MK_ANN_RESERVATION, json_string(txt));
                free(txt);
                json_decref(res);
        } else if (devices) {
                json_object_set_new(ann, MK_ANN_RESERVATION, json_string(devices)); /* malformed */
        }
        if (mig)
                json_object_set_new(ann, MK_ANN_DEVICES, json_string(mig));
        if (allocated)
                json_object_set_new(ann, MK_ANN_ALLOCATED, json_string("2026-01-01T00:00:00Z"));
        char uid[80];
        snprintf(uid, sizeof(uid), "uid-%s", name);
        json_t *p = json_pack("{s:{s:s,s:s,s:s,s:s,s:o},s:{s:s},s:{s:s}}", "metadata", "namespace", "ns", "name", name,
                              "uid", uid, "resourceVersion", "42", "annotations", ann, "spec", "nodeName", "n1",
                              "status", "phase", phase);
        assert_non_null(p);
        return p;
}

static json_t *pod_list(void) {
        json_t *items = json_array();
        /* no reservation */
        json_array_append_new(items, pod("plain", NULL, 0, NULL, NULL, false, "Running"));
        /* malformed reservation: skipped, counted */
        json_array_append_new(items, pod("bad", NULL, 0, "{garbage", NULL, false, "Pending"));
        /* the earliest, but already allocated */
        json_array_append_new(items, pod("done", "n1", 5, "0:" GPU0, "[\"" MIG0_1 "\"]", true, "Running"));
        /* earlier than the ready ones, instances not created yet */
        json_array_append_new(items, pod("waiting", "n1", 8, "0:" GPU0, NULL, false, "Pending"));
        /* ready, one device; "b" and "a" tie on time: "a" first */
        json_array_append_new(items, pod("b", "n1", 10, "0:" GPU0, "[\"" MIG0_2 "\"]", false, "Pending"));
        json_array_append_new(items, pod("a", "n1", 10, "0:" GPU0, "[\"" MIG0_1 "\"]", false, "Pending"));
        /* finished: not a candidate */
        json_array_append_new(items, pod("gone", "n1", 1, "0:" GPU0, "[\"" MIG0_1 "\"]", false, "Succeeded"));
        /* two containers, 1 + 1 */
        json_array_append_new(items, pod("two", "n1", 12, "0:" GPU0 ";1:" GPU0,
                                         "[\"" MIG0_1 "\",\"" MIG0_2 "\"]", false, "Pending"));
        /* reserved on another node */
        json_array_append_new(items, pod("other", "n2", 2, "0:" GPU0, "[\"" MIG0_1 "\"]", false, "Pending"));
        return json_pack("{s:s,s:o}", "kind", "PodList", "items", items);
}

struct pick_case {
        const char *name;
        const char *node;
        unsigned counts[4];
        size_t n;
        const char *want;       /* pod name, or "error: <substring>" */
};

static const struct pick_case pick_cases[] = {
        {"one device: earliest ready, tie by name", "n1", {1}, 1, "a"},
        {"two containers of one device", "n1", {1, 1}, 2, "two"},
        {"one container of two: none", "n1", {2}, 1,
         "error: no MIG reservation on node 'n1' is ready for this request (1 container(s)): 7 pod(s) with "
         "reservations, 1 waiting for their instances, 1 already allocated, 1 malformed"},
        {"other node", "n2", {1}, 1, "other"},
        {"unknown node", "n3", {1}, 1, "error: node 'n3'"},
};

static void test_pick(void **state) {
        (void) state;
        json_t *list = pod_list();
        for (size_t i = 0; i < ELEMENTSOF(pick_cases); i++) {
                const struct pick_case *t = &pick_cases[i];
                struct mk_claim c = {.n_devices = 99};
                const json_t *p = NULL;
                struct mk_error e = {0};
                int r = mk_dp_dynamic_pick(list, t->node, t->counts, t->n, &c, &p, &e);
                if (strneq(t->want, "error: ", 7)) {
                        if (r != -ENOENT)
                                fail_msg("case '%s': %d, want -ENOENT", t->name, r);
                        assert_int_equal(c.n_devices, 99);
                        if (!strstr(e.msg, t->want + 7))
                                fail_msg("case '%s':\n got: %s\nwant: %s", t->name, e.msg, t->want + 7);
                        continue;
                }
                if (r < 0)
                        fail_msg("case '%s': %s", t->name, e.msg);
                assert_string_equal(c.name, t->want);
                assert_string_equal(json_string_value(json_object_get(json_object_get(p, "metadata"), "name")),
                                    t->want);
        }
        /* Not a list. */
        json_t *bad = json_object();
        struct mk_claim c;
        const json_t *p = NULL;
        unsigned one = 1;
        assert_int_equal(mk_dp_dynamic_pick(bad, "n1", &one, 1, &c, &p, NULL), -EINVAL);
        json_decref(bad);
        /* Over the cap. */
        json_t *big = json_pack("{s:[]}", "items");
        for (unsigned i = 0; i <= MK_DP_DYNAMIC_MAX_PODS; i++)
                json_array_append_new(json_object_get(big, "items"), json_object());
        assert_int_equal(mk_dp_dynamic_pick(big, "n1", &one, 1, &c, &p, NULL), -E2BIG);
        json_decref(big);
        json_decref(list);
}

static void host_init(struct mk_host *h) {
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        assert_non_null(src);
        *h = (struct mk_host) {0};
        assert_true(asprintf(&h->sysfs_root, "%s/tests/fixtures/plugin/sys", src) > 0);
        assert_true(asprintf(&h->proc_root, "%s/tests/fixtures/plugin/proc", src) > 0);
        assert_true(asprintf(&h->dev_root, "%s/tests/fixtures/plugin/dev", src) > 0);
}

static void test_responses(void **state) {
        (void) state;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = node();
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h);
        json_t *list = pod_list();
        struct mk_claim c;
        const json_t *p = NULL;
        struct mk_error e = {0};
        unsigned two[] = {1, 1};
        assert_int_equal(mk_dp_dynamic_pick(list, "n1", two, 2, &c, &p, &e), 0);

        struct mk_dp_options o;
        mk_dp_options_init(&o);
        struct mk_dp_response res[2];
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, &o, res, &e), 0);
        assert_string_equal(mk_dp_response_env(&res[0], "NVIDIA_VISIBLE_DEVICES"), MIG0_1);
        assert_string_equal(mk_dp_response_env(&res[1], "NVIDIA_VISIBLE_DEVICES"), MIG0_2);
        assert_int_equal(res[0].n_devices, 0);
        mk_dp_response_done(&res[0]);
        mk_dp_response_done(&res[1]);

        /* Index ids, device specs with the GI and CI caps from mig-minors. */
        o.id_strategy = MK_DP_ID_INDEX;
        o.pass_device_specs = true;
        o.host = &h;
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, &o, res, &e), 0);
        assert_string_equal(mk_dp_response_env(&res[0], "NVIDIA_VISIBLE_DEVICES"), "0:0");
        assert_string_equal(mk_dp_response_env(&res[1], "NVIDIA_VISIBLE_DEVICES"), "0:1");
        bool gi = false, ci = false;
        for (size_t i = 0; i < res[0].n_devices; i++) {
                gi |= streq(res[0].devices[i].container_path, "/dev/nvidia-caps/nvidia-cap12");
                ci |= streq(res[0].devices[i].container_path, "/dev/nvidia-caps/nvidia-cap13");
        }
        if (!gi || !ci)
                fail_msg("GPU 0 GI 1: caps 12 (GI) and 13 (CI) expected in the device specs");
        mk_dp_response_done(&res[0]);
        mk_dp_response_done(&res[1]);

        /* Counts that do not fit the claim. */
        unsigned one[] = {2};
        struct mk_dp_response keep = {.n_envs = 99};
        assert_int_equal(mk_dp_dynamic_responses(s, &c, one, 1, &o, &keep, &e), -EINVAL);
        assert_int_equal(keep.n_envs, 99);
        /* A MIG UUID the GPUs do not have (destroyed since). */
        snprintf(c.devices[1].mig_uuid, sizeof(c.devices[1].mig_uuid), "MIG-gone");
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, &o, res, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "pod ns/two: MIG device 'MIG-gone'"));
        json_decref(list);
}

static void test_allocated_patch(void **state) {
        (void) state;
        json_t *list = pod_list();
        const json_t *p = json_array_get(json_object_get(list, "items"), 4);
        json_t *patch = NULL;
        assert_int_equal(mk_dp_dynamic_allocated_patch(p, 1795000000, &patch), 0);
        char *got = json_dumps(patch, JSON_COMPACT | JSON_SORT_KEYS);
        assert_string_equal(got, "{\"metadata\":{\"annotations\":{\"migkit.io/mig-allocated\":\"2026-11-18T"
                                 "11:06:40Z\"},\"resourceVersion\":\"42\",\"uid\":\"uid-b\"}}");
        free(got);
        json_decref(patch);
        /* No resourceVersion: no precondition, no patch. */
        json_t *q = json_deep_copy(p);
        json_object_del(json_object_get(q, "metadata"), "resourceVersion");
        patch = NULL;
        assert_int_equal(mk_dp_dynamic_allocated_patch(q, 1, &patch), -EINVAL);
        assert_null(patch);
        json_decref(q);
        json_decref(list);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_resources), cmocka_unit_test(test_preferred), cmocka_unit_test(test_pick),
                cmocka_unit_test(test_responses), cmocka_unit_test(test_allocated_patch),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
