/* The extender's fast paths against the exact one (sched/place-mig.h,
 * decide.h): on random clusters (1 to 8 A100-like GPUs per node filled at
 * random, GPU models that a pod's type filter matches on every GPU of a
 * node, on none or on some, MIG off on some GPUs, reservations observed,
 * pending, expired and the pod's own, instances the node agent lists as
 * reserved, CPU and memory) and random pods (1 to 3 GPU containers, init
 * containers, 1 or 2 GPUs each, memory in MiB, in percent or the whole GPU,
 * cores, the +me variant, use-gputype / nouse-gputype, policies, CPU),
 * filter and prioritize answer exactly as with mk_sched_set_exact (every
 * node fitted on a view rebuilt for the pod, container by container,
 * without node caches or the memo), with the memo off and on. A fast path
 * that answers differently for any pod or node fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"
#include "../common/a100-profiles.h"

#define NODES 14
#define MAX_GPUS 8

static unsigned pick(uint64_t *x, unsigned n) {
        return (unsigned) (rng_next(x) % n);
}

static const char *const models[] = {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA H100 stand-in"};

/* One GPU filled at random with legal instances; some listed as reserved
 * (not created yet) for one of the pods the test asks about. */
static json_t *gpu_json(uint64_t *x, const char *node, unsigned index, const char *model) {
        char uuid[64];
        snprintf(uuid, sizeof(uuid), "GPU-%.32s-%u", node, index);
        json_t *inst = json_array();
        unsigned used = 0, slices = 0, count[ELEMENTSOF(a100_profs)] = {0}, n = pick(x, 6);
        for (unsigned t = 0; t < 3 * n; t++) {
                size_t k = pick(x, ELEMENTSOF(a100_profs));
                const struct a100_prof *p = &a100_profs[k];
                unsigned start = p->starts[pick(x, p->n_starts)];
                uint32_t m = ((1u << p->size) - 1) << start;
                if ((used & m) || slices + p->slices > 7 || count[k] >= p->max)
                        continue;
                used |= m;
                slices += p->slices;
                count[k]++;
                char pod[64], uid[64];
                bool reserved = pick(x, 12) == 0;
                snprintf(pod, sizeof(pod), "ns/%.32s-%u-%u", node, index, t);
                if (reserved)
                        snprintf(uid, sizeof(uid), "q%u", pick(x, 6));
                else
                        snprintf(uid, sizeof(uid), "uid-%.32s-%u-%u", node, index, t);
                json_t *in = json_pack("{s:s, s:s, s:i, s:i, s:[i, i], s:s, s:s}", "state",
                                       reserved ? "reserved" : "created", "profile", p->name, "id", (int) p->id,
                                       "slices", (int) p->slices, "placement", (int) start, (int) p->size, "pod", pod,
                                       "uid", uid);
                if (!reserved)
                        json_object_set_new(in, "gi", json_integer(t + 1));
                json_array_append_new(inst, in);
        }
        return json_pack("{s:i, s:s, s:s, s:i, s:i, s:i, s:i, s:b, s:o, s:o}", "index", (int) index, "uuid", uuid,
                         "model", model, "memoryMiB", 40960, "units", 8, "slices", 7, "sms", 98, "mig",
                         pick(x, 12) != 0, "profiles", a100_profiles_json(), "instances", inst);
}

/* A Node: 1 to 8 GPUs of one model (or, on one node in four, mixed), and
 * sometimes CPU and memory allocatable. */
static json_t *node_json(uint64_t *x, const char *name) {
        json_t *gpus = json_array();
        unsigned n = 1 + pick(x, MAX_GPUS), m = pick(x, ELEMENTSOF(models));
        bool mixed = pick(x, 4) == 0;
        for (unsigned g = 0; g < n; g++)
                json_array_append_new(gpus, gpu_json(x, name, g, models[mixed ? pick(x, ELEMENTSOF(models)) : m]));
        json_t *inv = json_pack("{s:i, s:s, s:o}", "version", 1, "node", name, "gpus", gpus);
        char *v = json_dumps(inv, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(inv);
        struct mk_inventory *parsed = NULL; /* a test that feeds malformed inventories compares little */
        struct mk_error e = {0};
        if (mk_inventory_parse(v, strlen(v), &parsed, &e) < 0)
                fail_msg("test inventory refused: %s", e.msg);
        mk_inventory_free(parsed);
        json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name, "annotations", MK_ANN_INVENTORY, v);
        free(v);
        if (pick(x, 2))
                json_object_set_new(node, "status", json_pack("{s:{s:s, s:s}}", "allocatable", "cpu",
                                                              pick(x, 2) ? "3" : "16", "memory", "8Gi"));
        return node;
}

/* One container's resources: 0 to 2 GPUs, memory in MiB, in percent or
 * none (the whole GPU), sometimes cores and CPU. */
static void container_json(uint64_t *x, char *buf, size_t size, const char *name) {
        static const char *const mems[] = {"1000", "4000", "9000", "12000", "19000", "30000", "40000"};
        char lim[256] = "";
        size_t len = 0;
        unsigned gpus = pick(x, 8) == 0 ? 0 : pick(x, 5) == 0 ? 2 : 1;
        if (gpus)
                len += (size_t) snprintf(lim + len, sizeof(lim) - len, "\"nvidia.com/gpu\":%u", gpus);
        unsigned kind = pick(x, 6);
        if (gpus && kind < 4)
                len += (size_t) snprintf(lim + len, sizeof(lim) - len, ",\"nvidia.com/gpumem\":\"%s\"",
                                         mems[pick(x, ELEMENTSOF(mems))]);
        else if (gpus && kind == 4)
                len += (size_t) snprintf(lim + len, sizeof(lim) - len, ",\"nvidia.com/gpumem-percentage\":\"%u\"",
                                         5 + pick(x, 96));
        if (gpus && pick(x, 5) == 0)
                len += (size_t) snprintf(lim + len, sizeof(lim) - len, ",\"nvidia.com/gpucores\":\"%u\"",
                                         10 + pick(x, 50));
        snprintf(buf, size, "{\"name\":\"%s\",\"resources\":{\"limits\":{%s}%s}}", name, lim,
                 pick(x, 3) == 0 ? ",\"requests\":{\"cpu\":\"1500m\",\"memory\":\"1Gi\"}" : "");
}

static json_t *pod_json(uint64_t *x, const char *uid) {
        static const char *const anns[] = {
                "",
                "",
                "",
                "\"nvidia.com/use-gputype\":\"A100\"",
                "\"nvidia.com/use-gputype\":\"SXM4\"",
                "\"nvidia.com/use-gputype\":\"a100-pcie,H100\"",
                "\"nvidia.com/nouse-gputype\":\"H100\"",
                "\"nvidia.com/nouse-gputype\":\"PCIE\"",
                "\"hami.io/node-scheduler-policy\":\"spread\"",
                "\"hami.io/gpu-scheduler-policy\":\"binpack\"",
                "\"migkit.io/mig-variant\":\"+me\"",
                "\"nvidia.com/vgpu-mode\":\"mig\"",
        };
        char init[1024] = "", ctrs[2048] = "", one[512];
        size_t il = 0, cl = 0;
        unsigned n_init = pick(x, 4) == 0 ? 1 + pick(x, 2) : 0, n_ctr = 1 + pick(x, 3);
        for (unsigned i = 0; i < n_init; i++) {
                char nm[16];
                snprintf(nm, sizeof(nm), "init%u", i);
                container_json(x, one, sizeof(one), nm);
                il += (size_t) snprintf(init + il, sizeof(init) - il, "%s%s", i ? "," : "", one);
        }
        for (unsigned i = 0; i < n_ctr; i++) {
                char nm[16];
                snprintf(nm, sizeof(nm), "c%u", i);
                container_json(x, one, sizeof(one), nm);
                cl += (size_t) snprintf(ctrs + cl, sizeof(ctrs) - cl, "%s%s", i ? "," : "", one);
        }
        const char *a1 = anns[pick(x, ELEMENTSOF(anns))], *a2 = pick(x, 3) == 0 ? anns[pick(x, ELEMENTSOF(anns))] : "";
        char buf[4096];
        snprintf(buf, sizeof(buf),
                 "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"pod-%s\",\"uid\":\"%s\",\"annotations\":{%s%s%s}},"
                 "\"spec\":{\"initContainers\":[%s],\"containers\":[%s]},\"status\":{\"phase\":\"Pending\"}}",
                 uid, uid, a1, a1[0] && a2[0] && !streq(a1, a2) ? "," : "", streq(a1, a2) ? "" : a2, init, ctrs);
        json_error_t je;
        json_t *j = json_loads(buf, 0, &je);
        if (!j)
                fail_msg("bad test pod (%s): %s", je.text, buf);
        return j;
}

static char *dumps(json_t *v) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(v);
        return s;
}

/* A reservation of pod `p` on `node` made at `when`: pending, or observed
 * (written on the pod, which is bound there). */
static void reserve(struct mk_sched *s, json_t *p, const char *node, int64_t when, bool observe) {
        struct mk_claim c;
        if (mk_sched_reserve(s, p, node, when, &c, NULL) < 0 || !observe)
                return;
        char *v = NULL;
        assert_int_equal(mk_claim_reservation_format(&c, &v), 0);
        json_object_set_new(json_object_get(json_object_get(p, "metadata"), "annotations"), MK_ANN_RESERVATION,
                            json_string(v));
        json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node));
        free(v);
        assert_int_equal(mk_sched_pod_event(s, MK_KUBE_EVENT_MODIFIED, p), 0);
}

/* An extender with the default configuration. */
static struct mk_sched *sched_new(struct mk_sched_config **cfg) {
        const char *y = "version: v1\n";
        struct mk_sched *s = NULL;
        assert_int_equal(mk_sched_config_parse(y, strlen(y), "c", cfg, NULL), 0);
        assert_int_equal(mk_sched_new(*cfg, &s), 0);
        return s;
}

static void test_fast_equals_exact(void **state) {
        (void) state;
        struct mk_sched_config *cfg = NULL;
        struct mk_sched *s = sched_new(&cfg);
        uint64_t x = 2026;
        int64_t now = (int64_t) time(NULL);
        char names[NODES][16];
        json_t *list = json_array();
        unsigned long compared = 0, differed_nodes = 0;
        for (unsigned round = 0; round < 40; round++) {
                /* A new cluster state: every node again, then reservations. */
                for (unsigned i = 0; i < NODES; i++) {
                        snprintf(names[i], sizeof(names[i]), "node-%u", i);
                        json_t *n = node_json(&x, names[i]);
                        assert_int_equal(mk_sched_node_event(s, round ? MK_KUBE_EVENT_MODIFIED : MK_KUBE_EVENT_ADDED,
                                                             n),
                                         0);
                        json_decref(n);
                        if (round == 0)
                                json_array_append_new(list, json_string(names[i]));
                }
                if (round == 0)
                        json_array_append_new(list, json_string("not-there"));
                for (unsigned r = 0; r < 10; r++) {
                        char uid[32];
                        unsigned kind = pick(&x, 4);
                        /* q0..q5 are also the pods asked about: their own reservations are left out. */
                        snprintf(uid, sizeof(uid), kind == 0 ? "q%u" : "held-%u-%u", pick(&x, 6), round * 10 + r);
                        json_t *p = pod_json(&x, uid);
                        const char *node = names[pick(&x, NODES)];
                        /* pending now, pending and expired, observed */
                        reserve(s, p, node, kind == 1 ? now - 10 * 60 : now, kind >= 2);
                        json_decref(p);
                }
                for (unsigned q = 0; q < 30; q++) {
                        char uid[16];
                        snprintf(uid, sizeof(uid), "q%u", pick(&x, 8));
                        json_t *args = json_pack("{s:o, s:O}", "Pod", pod_json(&x, uid), "NodeNames", list);
                        mk_sched_set_exact(s, true);
                        char *fe = dumps(mk_sched_filter(s, args)), *pe = dumps(mk_sched_prioritize(s, args));
                        char *te = mk_sched_filter_text(s, args);
                        mk_sched_set_exact(s, false);
                        mk_sched_set_memo(s, false);
                        char *ff = dumps(mk_sched_filter(s, args)), *pf = dumps(mk_sched_prioritize(s, args));
                        mk_sched_set_memo(s, true);
                        char *fm = mk_sched_filter_text(s, args); /* text answers: compared as text */
                        char *pm = dumps(mk_sched_prioritize(s, args));
                        char *fm2 = dumps(mk_sched_filter(s, args));
                        assert_non_null(te);
                        assert_non_null(fm);
                        char *pod = json_dumps(json_object_get(args, "Pod"), JSON_COMPACT);
                        if (!streq(fe, ff) || !streq(te, fm) || !streq(fe, fm2))
                                fail_msg("round %u: filter differs for pod %s\n exact    %s\n fast     %s\n memo     %s\n "
                                         "memo hit %s",
                                         round, pod, fe, ff, fm, fm2);
                        if (!streq(pe, pf) || !streq(pe, pm))
                                fail_msg("round %u: prioritize differs for pod %s\n exact %s\n fast  %s\n memo  %s",
                                         round, pod, pe, pf, pm);
                        json_t *fj = json_loads(fe, 0, NULL);
                        differed_nodes += json_array_size(json_object_get(fj, "NodeNames")) > 0 &&
                                          json_object_size(json_object_get(fj, "FailedNodes")) > 1;
                        json_decref(fj);
                        free(pod);
                        free(fe);
                        free(te);
                        free(pe);
                        free(ff);
                        free(pf);
                        free(fm);
                        free(pm);
                        free(fm2);
                        json_decref(args);
                        compared++;
                }
        }
        assert_int_equal(compared, 40 * 30);
        /* Answers that tell nodes apart (some feasible, several not), else this compares little. */
        assert_true(differed_nodes > 300);
        json_decref(list);
        mk_sched_free(s);
        mk_sched_config_free(cfg);
}

/* A prioritize answered from its filter's verdicts (memo.h, the handoff)
 * follows what changed in between: after each filter another pod is
 * reserved on a node (often a feasible one), and the prioritize that
 * follows answers exactly as the exact path does then; the nodes that did
 * not change come from the filter's verdicts (counted). The verdicts are
 * taken once: a second prioritize without a new filter decides again. */
static void test_handoff_follows_changes(void **state) {
        (void) state;
        struct mk_sched_config *cfg = NULL;
        struct mk_sched *s = sched_new(&cfg);
        uint64_t x = 4242;
        int64_t now = (int64_t) time(NULL);
        char names[NODES][16];
        json_t *list = json_array();
        unsigned long compared = 0, changed_feasible = 0, from_filter = 0;
        for (unsigned i = 0; i < NODES; i++) {
                snprintf(names[i], sizeof(names[i]), "node-%u", i);
                json_array_append_new(list, json_string(names[i]));
        }
        for (unsigned round = 0; round < 20; round++) {
                for (unsigned i = 0; i < NODES; i++) {
                        json_t *n = node_json(&x, names[i]);
                        assert_int_equal(mk_sched_node_event(s, round ? MK_KUBE_EVENT_MODIFIED : MK_KUBE_EVENT_ADDED,
                                                             n),
                                         0);
                        json_decref(n);
                }
                for (unsigned q = 0; q < 30; q++) {
                        char uid[16], held[32];
                        snprintf(uid, sizeof(uid), "p%u-%u", round, q);
                        json_t *pod = pod_json(&x, uid);
                        json_t *args = json_pack("{s:O, s:O}", "Pod", pod, "NodeNames", list);
                        mk_sched_set_memo(s, true);
                        mk_sched_set_exact(s, false);
                        char *f = mk_sched_filter_text(s, args);
                        assert_non_null(f);
                        /* Another pod, the same shape, reserved on a node the filter found feasible
                         * (or any): that node's priority may change, or it may stop fitting. */
                        json_t *fj = json_loads(f, 0, NULL);
                        json_t *feas = json_object_get(fj, "NodeNames");
                        const char *node = json_array_size(feas) > 0
                                                   ? json_string_value(json_array_get(
                                                             feas, pick(&x, (unsigned) json_array_size(feas))))
                                                   : names[pick(&x, NODES)];
                        changed_feasible += json_array_size(feas) > 0;
                        snprintf(held, sizeof(held), "held-%u-%u", round, q);
                        json_t *other = json_deep_copy(pod);
                        json_object_set_new(json_object_get(other, "metadata"), "uid", json_string(held));
                        reserve(s, other, node, now, false);
                        json_decref(other);
                        unsigned long h0 = atomic_load(&mk_sched_stats(s)->memo_hits);
                        char *pm = dumps(mk_sched_prioritize(s, args));
                        from_filter += atomic_load(&mk_sched_stats(s)->memo_hits) - h0;
                        mk_sched_set_exact(s, true);
                        char *pe = dumps(mk_sched_prioritize(s, args));
                        mk_sched_set_exact(s, false);
                        if (!streq(pm, pe)) {
                                char *pt = json_dumps(pod, JSON_COMPACT);
                                fail_msg("round %u pod %u: prioritize after a reservation on %s differs\n exact "
                                         "%s\n kept  %s\n pod %s",
                                         round, q, node, pe, pm, pt);
                        }
                        free(pm);
                        free(pe);
                        free(f);
                        json_decref(fj);
                        json_decref(args);
                        json_decref(pod);
                        compared++;
                }
        }
        print_message("handoff: %lu prioritizes compared (%lu after a reservation on a feasible node), %lu node "
                      "decisions from the filters' verdicts\n",
                      compared, changed_feasible, from_filter);
        assert_true(changed_feasible > 100);
        assert_true(from_filter > 1000);

        /* Taken once: a two-container pod's second prioritize decides every node again. */
        json_t *pod = json_loads("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"two\",\"uid\":\"two\"},"
                                 "\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                                 "{\"nvidia.com/gpu\":1,\"nvidia.com/gpumem\":\"4000\"}}},{\"name\":\"b\","
                                 "\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,\"nvidia.com/gpumem\":"
                                 "\"4000\"}}}]},\"status\":{\"phase\":\"Pending\"}}",
                                 0, NULL);
        assert_non_null(pod);
        json_t *args = json_pack("{s:o, s:O}", "Pod", pod, "NodeNames", list);
        free(mk_sched_filter_text(s, args));
        unsigned long h0 = atomic_load(&mk_sched_stats(s)->memo_hits);
        char *p1 = dumps(mk_sched_prioritize(s, args));
        unsigned long h1 = atomic_load(&mk_sched_stats(s)->memo_hits);
        char *p2 = dumps(mk_sched_prioritize(s, args));
        unsigned long h2 = atomic_load(&mk_sched_stats(s)->memo_hits);
        assert_true(h1 - h0 > NODES / 2);
        assert_int_equal(h2 - h1, 0);
        assert_string_equal(p1, p2);
        free(p1);
        free(p2);
        json_decref(args);
        json_decref(list);
        mk_sched_free(s);
        mk_sched_config_free(cfg);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fast_equals_exact),
                cmocka_unit_test(test_handoff_follows_changes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
