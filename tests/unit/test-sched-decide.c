/* Unit tests for sched/decide over a node cache: the seam between nodes
 * and kinds of placement (a node in another operating mode gets none; bind
 * keeps to the node filter chose), the reasons per node, priorities, the
 * memo answering a second request of one shape, a reservation recorded as
 * pending and seen by the next decision. The entry points on top are in
 * test-sched.c. */
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
#include <time.h>

#include <jansson.h>

#include "base/macro.h"
#include "claim/claim.h"
#include "kube/object.h"
#include "sched/decide.h"
#include "sched/inventory.h"
#include "sched/memo.h"
#include "sched/nodecache.h"
#include "sched/place-mig.h"
#include "sched/request.h"
#include "spec/sched-config.h"

#include "sched-fixtures.h"

/* One A100-40GB-like GPU with 1g.5gb and 3g.20gb, empty. */
#define INV                                                                                                        \
        "{\"version\":1,\"node\":\"%s\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%s\"," FIXTURE_INV_A100_PROFILES     \
        "\"instances\":[]}]}"

struct fixture {
        struct mk_sched_config *cfg;
        struct mk_sched_cache cache;
        struct mk_sched_shapes shapes;
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof(*f));
        const char *y = "version: v1\nnodeconfig:\n  - name: soft\n    operatingmode: disabled\n";
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &f->cfg, NULL), 0);
        assert_int_equal(mk_sched_cache_init(&f->cache), 0);
        assert_int_equal(mk_sched_shapes_init(&f->shapes), 0);
        static const char *const names[] = {"n1", "n2", "soft"};
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                char inv[2048];
                snprintf(inv, sizeof(inv), INV, names[i], names[i]);
                json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", names[i], "annotations",
                                      MK_ANN_INVENTORY, inv);
                assert_int_equal(mk_sched_cache_node_event(&f->cache, MK_KUBE_EVENT_ADDED, n), 0);
                json_decref(n);
        }
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        mk_sched_shapes_done(&f->shapes);
        mk_sched_cache_done(&f->cache);
        mk_sched_config_free(f->cfg);
        free(f);
        return 0;
}

static json_t *pod(const char *uid, const char *mem) {
        json_t *p = json_pack("{s:{s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:i, s:s}}}]}}", "metadata", "namespace", "ns",
                              "name", uid, "uid", uid, "spec", "containers", "name", "c", "resources", "limits",
                              "nvidia.com/gpu", 1, "nvidia.com/gpumem", mem);
        assert_non_null(p);
        return p;
}

/* Decides `p` on the names; the verdicts as "name:r:priority[:reason]" joined by '|'. */
static void decide(struct fixture *f, const json_t *p, const char *const *names, size_t n, bool memo, char *out,
                   size_t size, unsigned long *hits) {
        struct mk_pod_request req;
        assert_int_equal(mk_pod_request_parse(p, f->cfg, &req, NULL), 0);
        struct mk_sched_pod_ask ask = {.req = &req, .uid = json_string_value(json_object_get(
                                                             json_object_get(p, "metadata"), "uid")),
                                       .pod = p};
        struct mk_sched_decisions d = {.n = n, .by_name = true};
        d.cands = calloc(n, sizeof(*d.cands));
        for (size_t i = 0; i < n; i++)
                d.cands[i] = (struct mk_sched_cand) {.name = names[i], .len = strlen(names[i])};
        char err[256];
        assert_int_equal(mk_sched_decide(f->cfg, &f->cache, memo ? &f->shapes : NULL, &ask, true, &d, err,
                                         sizeof(err)),
                         0);
        size_t len = 0;
        out[0] = 0;
        for (size_t i = 0; i < n; i++)
                len += (size_t) snprintf(out + len, size - len, "%s%s:%d:%d%s%s", i ? "|" : "", names[i], d.v[i].r,
                                         d.v[i].priority, d.v[i].r < 0 ? ":" : "",
                                         d.v[i].r < 0 ? mk_sched_verdict_reason(&d, i) : "");
        if (hits)
                *hits = d.memo_hits;
        assert_int_equal(d.feasible, 2);
        mk_sched_decisions_done(&d);
}

static void test_decide(void **state) {
        struct fixture *f = *state;
        static const char *const names[] = {"n1", "soft", "gone", "n2"};
        json_t *p = pod("u1", "19000");
        char a[1024], b[1024];
        unsigned long hits = 0;
        decide(f, p, names, 4, true, a, sizeof(a), &hits);
        assert_string_equal(a, "n1:0:5|soft:-28:0:node is in operating mode 'disabled'|"
                               "gone:-2:0:node is not in migkit's cache (not seen by its Node informer)|n2:0:5");
        assert_int_equal(hits, 0);
        /* The same shape again: n1 and n2 answered from their memo, the same verdicts. */
        decide(f, p, names, 4, true, b, sizeof(b), &hits);
        assert_string_equal(a, b);
        assert_int_equal(hits, 2);
        /* Memo off: the same. */
        decide(f, p, names, 4, false, b, sizeof(b), &hits);
        assert_string_equal(a, b);
        assert_int_equal(hits, 0);
        json_decref(p);
}

static void test_reserve(void **state) {
        struct fixture *f = *state;
        json_t *p = pod("u1", "19000");
        struct mk_pod_request req;
        assert_int_equal(mk_pod_request_parse(p, f->cfg, &req, NULL), 0);
        struct mk_claim c = {0};
        assert_int_equal(mk_claim_from_pod(p, &c, NULL), 0);
        struct mk_sched_pod_ask ask = {.req = &req, .uid = c.uid, .pod = p};
        struct mk_error e = {0};
        assert_int_equal(mk_sched_decide_reserve(f->cfg, &f->cache, &ask, "n1", 1000, &c, &e), 0);
        assert_int_equal(c.n_devices, 1);
        assert_string_equal(c.devices[0].profile, "3g.20gb");
        assert_string_equal(c.devices[0].gpu, "GPU-n1");
        const struct mk_sched_pod *held = mk_sched_cache_pod(&f->cache, "u1");
        assert_non_null(held);
        assert_true(held->pending);
        /* A second pod of that size still fits (the other 3g.20gb), a third does not. */
        json_t *p2 = pod("u2", "19000"), *p3 = pod("u3", "19000");
        struct mk_claim c2 = {0}, c3 = {0};
        assert_int_equal(mk_claim_from_pod(p2, &c2, NULL), 0);
        assert_int_equal(mk_claim_from_pod(p3, &c3, NULL), 0);
        ask.pod = p2;
        ask.uid = c2.uid;
        assert_int_equal(mk_sched_decide_reserve(f->cfg, &f->cache, &ask, "n1", 1000, &c2, &e), 0);
        assert_true(c2.devices[0].placement.start != c.devices[0].placement.start);
        ask.pod = p3;
        ask.uid = c3.uid;
        assert_int_equal(mk_sched_decide_reserve(f->cfg, &f->cache, &ask, "n1", 1000, &c3, &e), -ENOSPC);
        assert_non_null(strstr(e.msg, "node 'n1': "));
        /* Unknown node; bind does not check the operating mode (filter chose the node). */
        assert_int_equal(mk_sched_decide_reserve(f->cfg, &f->cache, &ask, "gone", 1000, &c3, &e), -ENOENT);
        int r = mk_sched_decide_reserve(f->cfg, &f->cache, &ask, "soft", 1000, &c3, &e);
        if (r != 0)
                fail_msg("soft: %d %s", r, e.msg);
        json_decref(p);
        json_decref(p2);
        json_decref(p3);
}

/* The unified pool: "mixed" has a MIG GPU and a shared one (another pod
 * holds 30000 MiB and 50% of it), "shared" one shared GPU. */
#define SHARED_GPU(idx, uuid, mib, split, slices)                                                                 \
        "{\"index\":" idx ",\"uuid\":\"" uuid "\",\"model\":\"NVIDIA A100-SXM4-40GB\",\"memoryMiB\":" mib    \
        ",\"units\":8,\"slices\":7,\"mig\":false,\"profiles\":[],\"instances\":[],\"mode\":\"hami-core\","  \
        "\"split\":" split ",\"softSlices\":[" slices "]}"

static int setup_pool(void **state) {
        struct fixture *f = calloc(1, sizeof(*f));
        const char *y = "version: v1\nnodeconfig:\n  - name: mixed\n    operatingmode: mixed\n"
                        "  - name: shared\n    operatingmode: hami-core\n";
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &f->cfg, NULL), 0);
        assert_int_equal(mk_sched_cache_init(&f->cache), 0);
        assert_int_equal(mk_sched_shapes_init(&f->shapes), 0);
        static const char *const invs[][2] = {
                {"mixed", "{\"version\":1,\"node\":\"mixed\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-m0\","
                          FIXTURE_INV_A100_PROFILES "\"instances\":[]}," SHARED_GPU(
                                  "1", "GPU-m1", "40960", "2",
                                  "{\"pod\":\"ns/other\",\"uid\":\"o1\",\"container\":0,\"memoryMiB\":30000,"
                                  "\"cores\":50}") "]}"},
                {"shared", "{\"version\":1,\"node\":\"shared\",\"gpus\":[" SHARED_GPU("0", "GPU-s0", "16384", "4",
                                                                                        "") "]}"},
        };
        for (size_t i = 0; i < ELEMENTSOF(invs); i++) {
                json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", invs[i][0], "annotations",
                                      MK_ANN_INVENTORY, invs[i][1]);
                assert_int_equal(mk_sched_cache_node_event(&f->cache, MK_KUBE_EVENT_ADDED, n), 0);
                json_decref(n);
        }
        *state = f;
        return 0;
}

/* A pod asking `mem` MiB and `cores` percent with vgpu-mode `mode` (NULL: none). */
static json_t *pool_pod(const char *uid, const char *mem, int cores, const char *mode) {
        json_t *p = json_pack("{s:{s:s, s:s, s:s, s:{}}, s:{s:[{s:s, s:{s:{s:i, s:s, s:i}}}]}}", "metadata",
                              "namespace", "ns", "name", uid, "uid", uid, "annotations", "spec", "containers",
                              "name", "c", "resources", "limits", "nvidia.com/gpu", 1, "nvidia.com/gpumem", mem,
                              "nvidia.com/gpucores", cores);
        assert_non_null(p);
        if (mode)
                json_object_set_new(json_object_get(json_object_get(p, "metadata"), "annotations"),
                                    "nvidia.com/vgpu-mode", json_string(mode));
        return p;
}

/* decide() without its two-feasible check: the verdicts on nodes n0, n1 only. */
static void decide_pool_nodes(struct fixture *f, const json_t *p, const char *n0, const char *n1, char *out,
                              size_t size) {
        const char *const names[] = {n0, n1};
        struct mk_pod_request req;
        assert_int_equal(mk_pod_request_parse(p, f->cfg, &req, NULL), 0);
        struct mk_sched_pod_ask ask = {
                .req = &req, .uid = mk_kube_meta(p, "uid"), .pod = p};
        struct mk_sched_decisions d = {.n = 2, .by_name = true};
        d.cands = calloc(2, sizeof(*d.cands));
        for (size_t i = 0; i < 2; i++)
                d.cands[i] = (struct mk_sched_cand) {.name = names[i], .len = strlen(names[i])};
        char err[256];
        assert_int_equal(mk_sched_decide(f->cfg, &f->cache, &f->shapes, &ask, true, &d, err, sizeof(err)), 0);
        size_t len = 0;
        out[0] = 0;
        for (size_t i = 0; i < 2; i++)
                len += (size_t) snprintf(out + len, size - len, "%s%s:%d%s%s", i ? "|" : "", names[i], d.v[i].r,
                                         d.v[i].r < 0 ? ":" : "", d.v[i].r < 0 ? mk_sched_verdict_reason(&d, i) : "");
        mk_sched_decisions_done(&d);
}

static void decide_pool(struct fixture *f, const json_t *p, char *out, size_t size) {
        decide_pool_nodes(f, p, "mixed", "shared", out, size);
}

static void reserve_pool(struct fixture *f, const json_t *p, const char *node, struct mk_claim *c, int want) {
        struct mk_pod_request req;
        assert_int_equal(mk_pod_request_parse(p, f->cfg, &req, NULL), 0);
        struct mk_sched_pod_ask ask = {.req = &req, .uid = mk_kube_meta(p, "uid"), .pod = p};
        *c = make_claim("ns", mk_kube_meta(p, "uid"), mk_kube_meta(p, "uid"), "", 0);
        struct mk_error e = {0};
        int r = mk_sched_decide_reserve(f->cfg, &f->cache, &ask, node, (int64_t) time(NULL), c, &e);
        if (r != want)
                fail_msg("reserve on %s: %d, want %d (%s)", node, r, want, e.msg);
}

static void test_pool(void **state) {
        struct fixture *f = *state;
        char a[2048];
        /* hami-core: both nodes have a shared GPU with room. */
        json_t *soft = pool_pod("s1", "8000", 20, "hami-core");
        decide_pool(f, soft, a, sizeof(a));
        assert_string_equal(a, "mixed:0|shared:0");
        struct mk_claim c;
        reserve_pool(f, soft, "mixed", &c, 0);
        assert_int_equal(c.n_devices, 1);
        assert_int_equal(c.devices[0].mode, MK_CLAIM_SOFT);
        assert_string_equal(c.devices[0].gpu, "GPU-m1");
        assert_int_equal(c.devices[0].memory_mib, 8000);
        assert_int_equal(c.devices[0].cores, 20);
        assert_null(c.mode_why); /* the pod named its mode: nothing chosen */
        /* The pending slice counts: 2960 MiB left and the split (2) reached on GPU-m1. */
        json_t *soft2 = pool_pod("s2", "2000", 10, "hami-core");
        decide_pool(f, soft2, a, sizeof(a));
        if (strncmp(a, "mixed:-28:", 10) != 0 || !strstr(a, "|shared:0"))
                fail_msg("second soft pod: %s", a);
        /* mig: only the mixed node's MIG GPU. */
        json_t *mig = pool_pod("m1", "19000", 0, "mig");
        decide_pool(f, mig, a, sizeof(a));
        assert_string_equal(a, "mixed:0|shared:-28:MIG: no MIG GPU on this node");
        reserve_pool(f, mig, "mixed", &c, 0);
        assert_int_equal(c.devices[0].mode, MK_CLAIM_MIG);
        assert_string_equal(c.devices[0].profile, "3g.20gb");
        /* No mode, too big for either: the reason names both modes. */
        json_t *big = pool_pod("b1", "60000", 0, NULL);
        decide_pool(f, big, a, sizeof(a));
        if (!strstr(a, "mixed:-28:MIG: ") || !strstr(a, "; hami-core: ") || !strstr(a, "shared:-28:MIG: "))
                fail_msg("too big: %s", a);
        /* No mode, isolation (cores 100): MIG only (no profile here gives
         * all SMs), never the shared GPU with room. */
        json_t *iso = pool_pod("i1", "4000", 100, NULL);
        decide_pool(f, iso, a, sizeof(a));
        if (!strstr(a, "mixed:-28:MIG: ") || !strstr(a, "shared:-28:") || !strstr(a, "isolation"))
                fail_msg("isolation: %s", a);
        /* No mode, small: a soft slice of the empty shared GPU or a MIG
         * instance, either way a reservation of one device. */
        json_t *any = pool_pod("a1", "3000", 10, NULL);
        reserve_pool(f, any, "shared", &c, 0);
        assert_int_equal(c.n_devices, 1);
        assert_int_equal(c.devices[0].mode, MK_CLAIM_SOFT);
        assert_string_equal(c.devices[0].gpu, "GPU-s0");
        /* The mode choice's reason, for bind's VGPUModeChosen Event. */
        if (!c.mode_why || !strstr(c.mode_why, "an empty shared GPU"))
                fail_msg("mode_why: '%s'", c.mode_why ? c.mode_why : "(null)");
        json_decref(soft);
        json_decref(soft2);
        json_decref(mig);
        json_decref(big);
        json_decref(iso);
        json_decref(any);
}

/* The idle mode switch: node "sw" (mixed, modeswitch: idle) has a full
 * MIG GPU and an idle shared GPU the agent lists switchable, with the MIG
 * profiles it would offer; node "pin" the same without switchable. */
#define SWITCH_INV(node, sw)                                                                                      \
        "{\"version\":1,\"node\":\"" node "\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-" node "0\","               \
        FIXTURE_INV_A100_PROFILES "\"instances\":[{\"state\":\"created\",\"profile\":\"7g.40gb\",\"id\":0,"     \
        "\"slices\":7,\"placement\":[0,8],\"gi\":1,\"migUUID\":\"MIG-x\",\"pod\":\"ns/x\",\"uid\":\"x\"}]},"       \
        "{\"index\":1,\"uuid\":\"GPU-" node "1\",\"model\":\"NVIDIA A100-SXM4-40GB\",\"memoryMiB\":40960,"       \
        "\"units\":8,\"slices\":7,\"sms\":98,\"mig\":false,\"profiles\":[{\"name\":\"3g.20gb\",\"id\":9,"       \
        "\"slices\":3,\"memoryMiB\":19968,\"maxCount\":2,\"sms\":42,\"placements\":[[0,4],[4,4]]}],"            \
        "\"instances\":[],\"mode\":\"hami-core\",\"split\":4,\"softSlices\":[]" sw "}]}"

static int setup_switch(void **state) {
        struct fixture *f = calloc(1, sizeof(*f));
        const char *y = "version: v1\nnodeconfig:\n  - name: sw\n    operatingmode: mixed\n    modeswitch: idle\n"
                        "  - name: pin\n    operatingmode: mixed\n";
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &f->cfg, NULL), 0);
        assert_int_equal(mk_sched_cache_init(&f->cache), 0);
        assert_int_equal(mk_sched_shapes_init(&f->shapes), 0);
        static const char *const invs[][2] = {{"sw", SWITCH_INV("sw", ",\"switchable\":true")},
                                              {"pin", SWITCH_INV("pin", "")}};
        for (size_t i = 0; i < ELEMENTSOF(invs); i++) {
                json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", invs[i][0], "annotations",
                                      MK_ANN_INVENTORY, invs[i][1]);
                assert_int_equal(mk_sched_cache_node_event(&f->cache, MK_KUBE_EVENT_ADDED, n), 0);
                json_decref(n);
        }
        *state = f;
        return 0;
}

static void test_pool_switch(void **state) {
        struct fixture *f = *state;
        char a[2048];
        /* A MIG pod fits only after a switch: on "sw" only, on its shared GPU. */
        json_t *m1 = pool_pod("m1", "19000", 0, "mig");
        decide_pool_nodes(f, m1, "sw", "pin", a, sizeof(a));
        if (strncmp(a, "sw:0|pin:-28:", 13) != 0)
                fail_msg("mig pod: %s", a);
        struct mk_claim c;
        reserve_pool(f, m1, "sw", &c, 0); /* recorded as pending in the cache */
        assert_int_equal(c.devices[0].mode, MK_CLAIM_MIG);
        assert_string_equal(c.devices[0].gpu, "GPU-sw1");
        assert_string_equal(c.devices[0].profile, "3g.20gb");
        /* Its reservation turns the GPU MIG for the extender: a second MIG
         * pod takes the other 3g there, a soft pod finds no shared GPU. */
        json_t *s1 = pool_pod("s1", "2000", 0, "hami-core");
        decide_pool_nodes(f, s1, "sw", "pin", a, sizeof(a));
        if (strncmp(a, "sw:-28:", 7) != 0 || !strstr(a, "|pin:0"))
                fail_msg("soft pod after the switch: %s", a);
        json_t *m2 = pool_pod("m2", "19000", 0, "mig");
        struct mk_claim c2;
        reserve_pool(f, m2, "sw", &c2, 0);
        assert_string_equal(c2.devices[0].gpu, "GPU-sw1");
        assert_int_not_equal(c2.devices[0].placement.start, c.devices[0].placement.start);
        /* A pod without a mode that fits a shared GPU takes "pin"'s shared
         * GPU without a switch: a switch is the last resort. */
        json_t *any = pool_pod("a1", "3000", 0, NULL);
        struct mk_claim c3;
        reserve_pool(f, any, "pin", &c3, 0);
        assert_int_equal(c3.devices[0].mode, MK_CLAIM_SOFT);
        json_decref(m1);
        json_decref(s1);
        json_decref(m2);
        json_decref(any);
}

/* One priority scale: node "m" (mig) and node "x" (mixed, its one GPU
 * pinned mig) hold the same MIG GPU; a pod gets one priority on both,
 * whether it names a mode or lets the scheduler choose (the mode choice's
 * tier scale on "x", so on "m" too). */
static int setup_scale(void **state) {
        struct fixture *f = calloc(1, sizeof(*f));
        const char *y = "version: v1\nnodeconfig:\n  - name: m\n    operatingmode: mig\n"
                        "  - name: x\n    operatingmode: mixed\n    gpus: [{index: 0, mode: mig}]\n";
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", &f->cfg, NULL), 0);
        assert_true(f->cfg->pool);
        assert_int_equal(mk_sched_cache_init(&f->cache), 0);
        assert_int_equal(mk_sched_shapes_init(&f->shapes), 0);
        static const char *const names[] = {"m", "x"};
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                char inv[4096];
                snprintf(inv, sizeof(inv),
                         "{\"version\":1,\"node\":\"%s\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%s\","
                         FIXTURE_INV_A100_PROFILES "\"instances\":[{\"state\":\"created\",\"profile\":\"1g.5gb\","
                         "\"id\":19,\"slices\":1,\"placement\":[6,1],\"gi\":1,\"migUUID\":\"MIG-%s\","
                         "\"pod\":\"ns/o\",\"uid\":\"o-%s\"}]}]}",
                         names[i], names[i], names[i], names[i]);
                json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", names[i], "annotations",
                                      MK_ANN_INVENTORY, inv);
                assert_int_equal(mk_sched_cache_node_event(&f->cache, MK_KUBE_EVENT_ADDED, n), 0);
                json_decref(n);
        }
        *state = f;
        return 0;
}

static void priorities(struct fixture *f, const json_t *p, int *ret_m, int *ret_x) {
        static const char *const names[] = {"m", "x"};
        struct mk_pod_request req;
        assert_int_equal(mk_pod_request_parse(p, f->cfg, &req, NULL), 0);
        struct mk_sched_pod_ask ask = {.req = &req, .uid = mk_kube_meta(p, "uid"), .pod = p};
        struct mk_sched_decisions d = {.n = 2, .by_name = true};
        d.cands = calloc(2, sizeof(*d.cands));
        for (size_t i = 0; i < 2; i++)
                d.cands[i] = (struct mk_sched_cand) {.name = names[i], .len = strlen(names[i])};
        char err[256];
        assert_int_equal(mk_sched_decide(f->cfg, &f->cache, &f->shapes, &ask, true, &d, err, sizeof(err)), 0);
        assert_int_equal(d.v[0].r, 0);
        assert_int_equal(d.v[1].r, 0);
        *ret_m = d.v[0].priority;
        *ret_x = d.v[1].priority;
        mk_sched_decisions_done(&d);
}

static void test_one_scale(void **state) {
        struct fixture *f = *state;
        static const struct {
                const char *uid, *mem, *mode;
                int cores;
        } pods[] = {
                {"a", "4000", NULL, 0},  /* 1g.5gb on the cut GPU, more waste */
                {"b", "19000", NULL, 0}, /* 3g.20gb on the cut GPU, little waste */
                {"c", "4000", "mig", 0},
                {"d", "19000", "mig", 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(pods); i++) {
                json_t *p = pool_pod(pods[i].uid, pods[i].mem, pods[i].cores, pods[i].mode);
                int pm, px;
                priorities(f, p, &pm, &px);
                if (pm != px)
                        fail_msg("pod %s: priority %d on the mig node, %d on the mixed one", pods[i].uid, pm, px);
                json_decref(p);
        }
}

/* mk_sched_reason_join writes what snprintf("%s%.*s%s") wrote, cut alike,
 * with `b` apart or the output buffer itself (reasons are rewritten in
 * place); mk_sched_fit_reason as its snprintf did. */
static void test_reason_join(void **state) {
        (void) state;
        static const char *const as[] = {"", "MIG: ", "container 12: "};
        static const char *const cs[] = {"", "; hami-core: node is in operating mode mig (no shared GPU)"};
        char long_b[700];
        memset(long_b, 'x', sizeof(long_b) - 1);
        long_b[sizeof(long_b) - 1] = 0;
        const char *bs[] = {"", "3 of 8 GPUs have a free MIG placement for 19000 MiB, 1 needed", long_b};
        static const size_t sizes[] = {1, 2, 7, 40, 100, 410, 512};
        static const size_t maxes[] = {0, 5, 400, SIZE_MAX};
        for (size_t ia = 0; ia < ELEMENTSOF(as); ia++)
                for (size_t ib = 0; ib < ELEMENTSOF(bs); ib++)
                        for (size_t ic = 0; ic < ELEMENTSOF(cs); ic++)
                                for (size_t is = 0; is < ELEMENTSOF(sizes); is++)
                                        for (size_t im = 0; im < ELEMENTSOF(maxes); im++) {
                                                size_t size = sizes[is], max = maxes[im];
                                                char want[1024], got[1024], inplace[1024];
                                                snprintf(want, size, "%s%.*s%s", as[ia],
                                                         (int) MIN(max, (size_t) INT_MAX), bs[ib], cs[ic]);
                                                mk_sched_reason_join(got, size, as[ia], bs[ib], max, cs[ic]);
                                                snprintf(inplace, sizeof(inplace), "%s", bs[ib]);
                                                mk_sched_reason_join(inplace, size, as[ia], inplace, max, cs[ic]);
                                                if (!streq(want, got) || !streq(want, inplace))
                                                        fail_msg("a %zu b %zu c %zu size %zu max %zu: '%s' / '%s', "
                                                                 "want '%s'",
                                                                 ia, ib, ic, size, max, got, inplace, want);
                                        }
        struct mk_pod_request req = {.n_containers = 2};
        struct mk_error e = {.code = -ENOSPC};
        memset(e.msg, 'y', sizeof(e.msg) - 1);
        e.msg[sizeof(e.msg) - 1] = 0;
        char got[512], want[512];
        mk_sched_fit_reason(&req, 1, &e, got, sizeof(got));
        snprintf(want, sizeof(want), "container %u: %.400s", 1u, e.msg);
        assert_string_equal(got, want);
        req.n_containers = 1;
        e.msg[0] = 0;
        mk_sched_fit_reason(&req, 0, &e, got, sizeof(got));
        assert_string_equal(got, "does not fit");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_decide, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reserve, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pool, setup_pool, teardown),
                cmocka_unit_test_setup_teardown(test_pool_switch, setup_switch, teardown),
                cmocka_unit_test_setup_teardown(test_one_scale, setup_scale, teardown),
                cmocka_unit_test(test_reason_join),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
