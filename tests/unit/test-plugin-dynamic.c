/* Unit tests for plugin/dynamic: the replica resource of dynamic MIG mode,
 * GetPreferredAllocation over it, picking the reservation an Allocate
 * serves from a pod list (as data: pods in, chosen pod or reason out), the
 * Allocate answers built from a claim's MIG devices, the exact
 * mig-allocated patch, and the whole Allocate against a scripted HTTP
 * apiserver (409 -> list and match again; a failed patch fails the
 * Allocate). The real apiserver is in tests/integration/test-scheduler.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "plugin/dynamic/soft.h"
#include "vgpunode/dirs.h"

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
#define GPU1 "GPU-00000001-0000-0000-0000-000000000000"
#define GPU2 "GPU-00000002-0000-0000-0000-000000000000"

static void test_resources(void **state) {
        (void) state;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = node();
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s, 3, &rs, &e), 0);
        assert_int_equal(rs->n, 1);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/gpu");
        assert_non_null(r);
        assert_string_equal(r->endpoint, "nvidia-gpu.sock");
        assert_int_equal(r->n_devices, 17); /* 7 per MIG-enabled GPU, the split count for the MIG-off (shared) one */
        assert_true(r->shared);
        assert_int_equal(r->replicas, 7);
        assert_string_equal(r->devices[0].id, "dyn-" GPU0 "::0");
        assert_string_equal(r->devices[6].id, "dyn-" GPU0 "::6");
        assert_string_equal(r->devices[7].id, "dyn-" GPU1 "::0");
        assert_string_equal(r->devices[9].id, "dyn-" GPU1 "::2");
        assert_int_equal(r->devices[9].gpu, 1);
        assert_string_equal(r->devices[10].id, "dyn-" GPU2 "::0");
        assert_string_equal(r->devices[10].base_id, "dyn-" GPU2);
        assert_int_equal(r->devices[10].gpu, 2);
        for (size_t i = 0; i < r->n_devices; i++) {
                assert_true(r->devices[i].healthy);
                assert_false(r->devices[i].mig);
                assert_ptr_equal(mk_dp_resource_find_device(r, r->devices[i].id), &r->devices[i]);
        }
        assert_null(mk_dp_resource_find_device(r, "dyn-" GPU0 "::7"));
        assert_null(mk_dp_resource_find_device(r, "dyn-" GPU1 "::3"));
        assert_null(mk_dp_resource_find_device(r, MIG0_1));
        /* Health follows the parent GPU, a GI's event included. */
        assert_int_equal(mk_dp_resources_set_health(rs, 0, 1, UINT32_MAX, false), 7);
        assert_false(rs->r[0].devices[3].healthy);
        assert_true(rs->r[0].devices[7].healthy);
        assert_int_equal(mk_dp_resources_set_health(rs, 0, UINT32_MAX, UINT32_MAX, true), 7);

        /* A MIG-enabled GPU that reports no profile: no resource, not an error. */
        static const struct snap_gpu none[] = {{"a100", MIG, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s2 = snap_build(none);
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs2 = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s2, 3, &rs2, &e), 0);
        assert_int_equal(rs2->n, 0);
        /* A shared GPU: the split count, HAMi's default 10; at most 64. */
        static const struct snap_gpu off[] = {{"a100", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s3 = snap_build(off);
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs3 = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s3, 0, &rs3, &e), 0);
        assert_int_equal(rs3->r[0].n_devices, 10);
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs4 = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s3, 65, &rs4, &e), -EINVAL);
        assert_null(rs4);
}

static void test_preferred(void **state) {
        (void) state;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = node();
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_dynamic_resources_build(s, 0, &rs, NULL), 0);
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
         "error: no reservation on node 'n1' is ready for this request (1 container(s)): 7 pod(s) with "
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
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, NULL, &o, NULL, res, &e), 0);
        assert_string_equal(mk_dp_response_env(&res[0], "NVIDIA_VISIBLE_DEVICES"), MIG0_1);
        assert_string_equal(mk_dp_response_env(&res[1], "NVIDIA_VISIBLE_DEVICES"), MIG0_2);
        assert_int_equal(res[0].n_devices, 0);
        mk_dp_response_done(&res[0]);
        mk_dp_response_done(&res[1]);

        /* Index ids, device specs with the GI and CI caps from mig-minors. */
        o.id_strategy = MK_DP_ID_INDEX;
        o.pass_device_specs = true;
        o.host = &h;
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, NULL, &o, NULL, res, &e), 0);
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
        assert_int_equal(mk_dp_dynamic_responses(s, &c, one, 1, NULL, &o, NULL, &keep, &e), -EINVAL);
        assert_int_equal(keep.n_envs, 99);
        /* A MIG UUID the GPUs do not have (destroyed since). */
        snprintf(c.devices[1].mig_uuid, sizeof(c.devices[1].mig_uuid), "MIG-gone");
        assert_int_equal(mk_dp_dynamic_responses(s, &c, two, 2, NULL, &o, NULL, res, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "pod ns/two: MIG device 'MIG-gone'"));
        json_decref(list);
}

static struct mk_claim soft_claim(void) {
        struct mk_claim c = {.namespace = "ns", .name = "infer", .uid = "u-1", .node = "n1", .active = true};
        /* Container 0: two soft slices, listed against PCI order; container 1: one. */
        c.devices[0] = (struct mk_claim_device) {.container = 0, .mode = MK_CLAIM_SOFT, .gpu = GPU1,
                                                 .memory_mib = 2000, .cores = 20};
        c.devices[1] = (struct mk_claim_device) {.container = 0, .mode = MK_CLAIM_SOFT, .gpu = GPU0,
                                                 .memory_mib = 8000, .cores = 0};
        c.devices[2] = (struct mk_claim_device) {.container = 1, .mode = MK_CLAIM_SOFT, .gpu = GPU0,
                                                 .memory_mib = 1000, .cores = 50};
        c.n_devices = 3;
        return c;
}

static const char *mount_host(const struct mk_dp_response *r, const char *container_path) {
        for (size_t i = 0; i < r->n_mounts; i++)
                if (streq(r->mounts[i].container_path, container_path))
                        return r->mounts[i].host_path;
        return NULL;
}

static void test_soft(void **state) {
        (void) state;
        static const struct snap_gpu gpus[] = {{"a100", OFF, NULL}, {"a100", OFF, NULL}, {"a100", MIG, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        struct mk_claim c = soft_claim();
        json_error_t je;
        json_t *pod = json_loads("{\"spec\":{\"containers\":[{\"name\":\"main\"},{\"name\":\"side\",\"env\":[{\"name\":"
                                 "\"CUDA_DISABLE_CONTROL\",\"value\":\"true\"}]}]}}",
                                 0, &je);
        assert_non_null(pod);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        struct mk_dp_soft_options so = {.root = "/vg"};
        struct mk_dp_response res[2];
        struct mk_error e = {0};
        unsigned counts[] = {2, 1};
        assert_int_equal(mk_dp_dynamic_responses(s, &c, counts, 2, pod, &o, &so, res, &e), 0);
        /* CUDA numbers the two GPUs in PCI order: GPU0 is device 0. */
        assert_string_equal(mk_dp_response_env(&res[0], "NVIDIA_VISIBLE_DEVICES"), GPU0 "," GPU1);
        assert_string_equal(mk_dp_response_env(&res[0], "CUDA_DEVICE_MEMORY_LIMIT_0"), "8000m");
        assert_string_equal(mk_dp_response_env(&res[0], "CUDA_DEVICE_SM_LIMIT_0"), "0");
        assert_string_equal(mk_dp_response_env(&res[0], "CUDA_DEVICE_MEMORY_LIMIT_1"), "2000m");
        assert_string_equal(mk_dp_response_env(&res[0], "CUDA_DEVICE_SM_LIMIT_1"), "20");
        assert_string_equal(mk_dp_response_env(&res[0], "CUDA_DEVICE_MEMORY_SHARED_CACHE"),
                            "/usr/local/vgpu/migkit-vgpu.cache");
        assert_string_equal(mount_host(&res[0], "/usr/local/vgpu"), "/vg/containers/u-1_0");
        assert_string_equal(mount_host(&res[0], "/usr/lib/migkit/libmigkit-vgpu.so"), "/vg/libmigkit-vgpu.so");
        assert_string_equal(mount_host(&res[0], "/etc/ld.so.preload"), "/vg/ld.so.preload");
        /* Container 1 opted out of the preload (HAMi's CUDA_DISABLE_CONTROL). */
        assert_string_equal(mk_dp_response_env(&res[1], "NVIDIA_VISIBLE_DEVICES"), GPU0);
        assert_string_equal(mk_dp_response_env(&res[1], "CUDA_DEVICE_MEMORY_LIMIT_0"), "1000m");
        assert_string_equal(mount_host(&res[1], "/usr/local/vgpu"), "/vg/containers/u-1_1");
        assert_null(mount_host(&res[1], "/etc/ld.so.preload"));
        mk_dp_response_done(&res[0]);
        mk_dp_response_done(&res[1]);

        /* A soft slice of a MIG-enabled GPU, a container mixing both kinds. */
        struct mk_claim bad = soft_claim();
        snprintf(bad.devices[2].gpu, sizeof(bad.devices[2].gpu), "%s", s->gpus[2].uuid);
        assert_int_equal(mk_dp_dynamic_responses(s, &bad, counts, 2, pod, &o, &so, res, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "not found with MIG off"));
        bad = soft_claim();
        bad.devices[1].mode = MK_CLAIM_MIG;
        assert_int_equal(mk_dp_dynamic_responses(s, &bad, counts, 2, pod, &o, &so, res, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "mixes MIG devices and soft slices"));

        /* The node side: directories with identity files, then the preload
         * file once the library is there. */
        char root[] = "/tmp/test-plugin-dynamic.XXXXXX";
        assert_non_null(mkdtemp(root));
        so.root = root;
        assert_int_equal(mk_dp_soft_prepare(&c, pod, s, &so, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "libmigkit-vgpu.so' is not on this node"));
        char p[512], *data = NULL;
        snprintf(p, sizeof(p), "%s/libmigkit-vgpu.so", root);
        assert_int_equal(mk_write_file_atomic(p, "elf", 3, 0644, &e), 0);
        assert_int_equal(mk_dp_soft_prepare(&c, pod, s, &so, &e), 0);
        snprintf(p, sizeof(p), "%s/containers/u-1_0.json", root);
        assert_int_equal(mk_read_file(p, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "{\"container\":\"main\",\"devices\":[{\"cores\":0,\"gpu\":\"" GPU0 "\",\"memoryMiB\":"
                                  "8000},{\"cores\":20,\"gpu\":\"" GPU1 "\",\"memoryMiB\":2000}],\"index\":0,"
                                  "\"name\":\"infer\",\"namespace\":\"ns\",\"podUID\":\"u-1\"}");
        free(data);
        snprintf(p, sizeof(p), "%s/containers/u-1_1", root);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/ld.so.preload", root);
        assert_int_equal(mk_read_file(p, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "/usr/lib/migkit/libmigkit-vgpu.so\n");
        free(data);
        assert_int_equal(mk_vgpu_prune(root, NULL, 0, time(NULL) + 1, 0, NULL, &e), 2);
        snprintf(p, sizeof(p), "%s/containers/u-1_1", root);
        assert_int_equal(stat(p, &st), -1);
        snprintf(p, sizeof(p), "rm -rf '%s'", root);
        assert_int_equal(system(p), 0);
        json_decref(pod);
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

/* ---- the whole Allocate against a scripted apiserver ---- */

struct step {
        const char *method;     /* expected request method */
        const char *path;       /* expected path prefix */
        const char *body_has;   /* substring the request body must hold, or NULL */
        int status;
        char *reply;            /* malloc'd body */
};

struct fake {
        int fd;
        struct step *steps;
        size_t n, next;
        char failure[512];
};

/* Reads one request (headers, Content-Length body) from fd into a malloc'd string. */
static char *read_request(int fd, size_t *ret_header_len) {
        size_t cap = 1 << 20, len = 0;
        char *buf = calloc(1, cap + 1);
        if (!buf)
                return NULL;
        char *end = NULL;
        while (!(end = strstr(buf, "\r\n\r\n")) && len < cap) {
                ssize_t k = read(fd, buf + len, cap - len);
                if (k <= 0)
                        break;
                len += (size_t) k;
        }
        if (!end) {
                free(buf);
                return NULL;
        }
        size_t hlen = (size_t) (end - buf) + 4, body = 0;
        for (char *l = buf; l && l < end; l = strstr(l, "\r\n"), l = l ? l + 2 : NULL)
                if (strncasecmp(l, "Content-Length:", 15) == 0) {
                        char *e = NULL;
                        unsigned long v = strtoul(l + 15, &e, 10);
                        if (e && (*e == '\r' || *e == ' '))
                                body = v;
                }
        while (len < hlen + body && len < cap) {
                ssize_t k = read(fd, buf + len, cap - len);
                if (k <= 0)
                        break;
                len += (size_t) k;
        }
        *ret_header_len = hlen;
        return buf;
}

static void *fake_main(void *userdata) {
        struct fake *f = userdata;
        while (f->next < f->n) {
                int c = accept(f->fd, NULL, NULL);
                if (c < 0)
                        break;
                size_t hlen = 0;
                char *req = read_request(c, &hlen);
                struct step *st = &f->steps[f->next++];
                char method[16] = "", path[512] = "";
                const char *sp = req ? strchr(req, ' ') : NULL, *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
                if (sp && sp2 && (size_t) (sp - req) < sizeof(method) && (size_t) (sp2 - sp - 1) < sizeof(path)) {
                        memcpy(method, req, (size_t) (sp - req));
                        memcpy(path, sp + 1, (size_t) (sp2 - sp - 1));
                }
                const char *body = req ? req + hlen : "";
                if (!f->failure[0] && (!streq(method, st->method) || !strneq(path, st->path, strlen(st->path)) ||
                                       (st->body_has && !strstr(body, st->body_has))))
                        (void) !snprintf(f->failure, sizeof(f->failure),
                                 "request %zu: got '%s %.200s' body '%.200s', want '%s %s' with '%s'", f->next, method,
                                 path, body, st->method, st->path, st->body_has ? st->body_has : "");
                char head[256];
                int hn = snprintf(head, sizeof(head),
                                  "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                  "Connection: close\r\n\r\n",
                                  st->status, strlen(st->reply));
                if (write(c, head, (size_t) hn) < 0 || write(c, st->reply, strlen(st->reply)) < 0)
                        snprintf(f->failure, sizeof(f->failure), "request %zu: cannot answer", f->next);
                free(req);
                close(c);
        }
        return NULL;
}

static char *list_text(const char *allocated_name) {
        json_t *l = pod_list();
        json_t *items = json_object_get(l, "items");
        for (size_t i = 0; allocated_name && i < json_array_size(items); i++) {
                json_t *m = json_object_get(json_array_get(items, i), "metadata");
                if (streq(json_string_value(json_object_get(m, "name")), allocated_name))
                        json_object_set_new(json_object_get(m, "annotations"), MK_ANN_ALLOCATED, json_string("x"));
        }
        char *t = json_dumps(l, JSON_COMPACT);
        json_decref(l);
        return t;
}

static int fake_snapshot(void *userdata, struct mk_snapshot **ret, struct mk_error *e) {
        (void) e;
        (*(unsigned *) userdata)++;
        *ret = node();
        return 0;
}

/* Runs mk_dp_dynamic_allocate for one container of one device against the
 * script; returns its result, the chosen pod in ret_name, the env in ret_env. */
static int run_script(struct step *steps, size_t n, char *ret_name, char *ret_env, unsigned *ret_snapshots,
                      struct mk_error *e) {
        struct fake f = {.steps = steps, .n = n};
        f.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(f.fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        assert_int_equal(bind(f.fd, (struct sockaddr *) &a, sizeof(a)), 0);
        socklen_t al = sizeof(a);
        assert_int_equal(getsockname(f.fd, (struct sockaddr *) &a, &al), 0);
        assert_int_equal(listen(f.fd, 8), 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);

        struct mk_kube_config c = {0};
        assert_true(asprintf(&c.server, "http://127.0.0.1:%u", (unsigned) ntohs(a.sin_port)) > 0);
        c.token = strdup("t0ken");
        const struct mk_kube_options ko = {.attempts = 1, .request_timeout_ms = 10000, .connect_timeout_ms = 2000};
        struct mk_kube *k = NULL;
        assert_int_equal(mk_kube_new(&c, &ko, &k, e), 0);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        unsigned one = 1;
        struct mk_dp_response res = {.n_envs = 99};
        struct mk_claim *claim = calloc(1, sizeof(*claim));
        assert_non_null(claim);
        int r = mk_dp_dynamic_allocate(k, "n1", &one, 1, &o, NULL, fake_snapshot, ret_snapshots, &res, claim, e);
        if (r >= 0) {
                snprintf(ret_name, 64, "%.63s", claim->name);
                snprintf(ret_env, 128, "%.127s", mk_dp_response_env(&res, "NVIDIA_VISIBLE_DEVICES"));
                mk_dp_response_done(&res);
        } else
                assert_int_equal(res.n_envs, 99); /* untouched */
        free(claim);
        mk_kube_free(k);
        shutdown(f.fd, SHUT_RDWR);
        close(f.fd);
        pthread_join(th, NULL);
        if (f.failure[0])
                fail_msg("%s", f.failure);
        if (f.next != n)
                fail_msg("the plugin made %zu of the %zu scripted requests", f.next, n);
        for (size_t i = 0; i < n; i++)
                free(steps[i].reply);
        return r;
}

#define LIST_PATH "/api/v1/pods?"
#define CONFLICT "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Conflict\",\"code\":409}"

static void test_allocate_conflict(void **state) {
        (void) state;
        /* 409 on pod a (another Allocate took it meanwhile): list again, b. */
        struct step steps[] = {
                {"GET", LIST_PATH, NULL, 200, list_text(NULL)},
                {"PATCH", "/api/v1/namespaces/ns/pods/a", "\"resourceVersion\":\"42\"", 409, strdup(CONFLICT)},
                {"GET", LIST_PATH, NULL, 200, list_text("a")},
                {"PATCH", "/api/v1/namespaces/ns/pods/b", "migkit.io/mig-allocated", 200, strdup("{}")},
        };
        char name[64] = "", env[128] = "";
        unsigned snaps = 0;
        struct mk_error e = {0};
        int r = run_script(steps, ELEMENTSOF(steps), name, env, &snaps, &e);
        if (r < 0)
                fail_msg("allocate: %s", e.msg);
        assert_string_equal(name, "b");
        assert_string_equal(env, MIG0_2);
        assert_int_equal(snaps, 2);
}

static void test_allocate_patch_fails(void **state) {
        (void) state;
        /* A refused patch fails the Allocate: nothing handed out. */
        struct step steps[] = {
                {"GET", LIST_PATH, NULL, 200, list_text(NULL)},
                {"PATCH", "/api/v1/namespaces/ns/pods/a", NULL, 403,
                 strdup("{\"kind\":\"Status\",\"reason\":\"Forbidden\",\"message\":\"no\",\"code\":403}")},
        };
        char name[64] = "", env[128] = "";
        unsigned snaps = 0;
        struct mk_error e = {0};
        assert_int_equal(run_script(steps, ELEMENTSOF(steps), name, env, &snaps, &e), -EACCES);
        assert_non_null(strstr(e.msg, "Cannot mark pod ns/a allocated"));

        /* Nothing ready (every pod allocated): -ENOENT, no snapshot, no patch. */
        json_t *l = pod_list();
        json_t *items = json_object_get(l, "items");
        for (size_t i = 0; i < json_array_size(items); i++) {
                json_t *m = json_object_get(json_array_get(items, i), "metadata");
                json_object_set_new(json_object_get(m, "annotations"), MK_ANN_ALLOCATED, json_string("x"));
        }
        struct step none[] = {{"GET", LIST_PATH, NULL, 200, json_dumps(l, JSON_COMPACT)}};
        json_decref(l);
        snaps = 0;
        assert_int_equal(run_script(none, 1, name, env, &snaps, &e), -ENOENT);
        assert_int_equal(snaps, 0);

        /* Conflicts every time: gives up after MK_DP_DYNAMIC_ATTEMPTS rounds. */
        struct step busy[2 * MK_DP_DYNAMIC_ATTEMPTS];
        for (size_t i = 0; i < ELEMENTSOF(busy); i += 2) {
                busy[i] = (struct step) {"GET", LIST_PATH, NULL, 200, list_text(NULL)};
                busy[i + 1] = (struct step) {"PATCH", "/api/v1/namespaces/ns/pods/a", NULL, 409, strdup(CONFLICT)};
        }
        assert_int_equal(run_script(busy, ELEMENTSOF(busy), name, env, &snaps, &e), -EBUSY);
        assert_non_null(strstr(e.msg, "gave up after 5 attempts"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_resources), cmocka_unit_test(test_preferred), cmocka_unit_test(test_pick),
                cmocka_unit_test(test_responses),
                cmocka_unit_test(test_soft), cmocka_unit_test(test_allocated_patch),
                cmocka_unit_test(test_allocate_conflict), cmocka_unit_test(test_allocate_patch_fails),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
