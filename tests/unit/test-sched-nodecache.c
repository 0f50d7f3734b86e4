/* Unit tests for sched/nodecache: Nodes in and out (inventory, reason when
 * there is none, allocatable CPU and memory), reservations observed and
 * pending (linked to their node, reflected in the kept fit view, the memo
 * forgotten on each change), bound pods' CPU and memory, deleted nodes,
 * the NodeNames resolution kept between requests, pending expiry, and junk
 * allocatable refused with its field named, logged once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/log.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "sched/inventory.h"
#include "sched/nodecache.h"
#include "sched/request.h"

#include "sched-fixtures.h"

/* One A100-40GB-like GPU with 1g.5gb and 3g.20gb, and one instance. */
#define INV                                                                                                        \
        "{\"version\":1,\"node\":\"%s\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\"," FIXTURE_INV_A100_PROFILES        \
        "\"instances\":[{\"state\":\"orphan\",\"profile\":\"1g.5gb\",\"id\":19,\"slices\":1,\"placement\":[6,1]}]}]}"

static json_t *node(const char *name, bool with_inv, const char *cpu) {
        char inv[2048];
        snprintf(inv, sizeof(inv), INV, name);
        json_t *n = json_pack("{s:{s:s, s:{}}, s:{s:{s:s, s:s}}}", "metadata", "name", name, "annotations", "status",
                              "allocatable", "cpu", cpu, "memory", "64Gi");
        assert_non_null(n);
        if (with_inv)
                json_object_set_new(json_object_get(json_object_get(n, "metadata"), "annotations"), MK_ANN_INVENTORY,
                                    json_string(inv));
        return n;
}

static json_t *pod(const char *uid, const char *bound, const char *reservation_node, unsigned start) {
        char res[512] = "";
        if (reservation_node)
                snprintf(res, sizeof(res),
                         "{\"version\":1,\"node\":\"%s\",\"time\":1,\"devices\":[{\"container\":0,\"gpu\":\"GPU-a\","
                         "\"profile\":\"3g.20gb\",\"profileID\":9,\"slices\":3,\"placement\":{\"start\":%u,\"size\":4}}]}",
                         reservation_node, start);
        json_t *p = json_pack("{s:{s:s, s:s, s:s, s:{}}, s:{s:[{s:s, s:{s:{s:s}}}]}, s:{s:s}}", "metadata", "namespace",
                              "ns", "name", uid, "uid", uid, "annotations", "spec", "containers", "name", "c",
                              "resources", "requests", "cpu", "1500m", "status", "phase", "Running");
        assert_non_null(p);
        if (bound)
                json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(bound));
        if (reservation_node)
                json_object_set_new(json_object_get(json_object_get(p, "metadata"), "annotations"), MK_ANN_RESERVATION,
                                    json_string(res));
        return p;
}

static void event(struct mk_sched_cache *c, enum mk_kube_event_type t, json_t *obj, bool is_node) {
        int r = is_node ? mk_sched_cache_node_event(c, t, obj) : mk_sched_cache_pod_event(c, t, obj);
        assert_int_equal(r, 0);
        json_decref(obj);
}

/* Whether the node's kept view has an instance at `start`. */
static bool view_has(const struct mk_sched_node *n, unsigned start) {
        for (size_t i = 0; n->fit_valid && i < n->fit_gpus[0].n_used; i++)
                if (n->fit_used[i].placement.start == start)
                        return true;
        return false;
}

static void test_nodes(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        event(&c, MK_KUBE_EVENT_ADDED, node("n1", true, "8"), true);
        event(&c, MK_KUBE_EVENT_ADDED, node("bare", false, "4"), true);
        json_t *broken = node("broken", false, "x");
        json_object_set_new(json_object_get(json_object_get(broken, "metadata"), "annotations"), MK_ANN_INVENTORY,
                            json_string("{\"version\":1}"));
        event(&c, MK_KUBE_EVENT_ADDED, broken, true);
        struct mk_sched_node *n = mk_sched_cache_node(&c, "n1");
        assert_non_null(n);
        assert_non_null(n->inv);
        assert_int_equal(n->inv->n_gpus, 1);
        assert_true(n->fit_valid);
        assert_true(view_has(n, 6)); /* the orphan takes its slice */
        assert_int_equal(n->res.cpu_allocatable_milli, 8000);
        assert_int_equal(n->res.memory_allocatable_bytes, 64ull << 30);
        n = mk_sched_cache_node(&c, "bare");
        assert_null(n->inv);
        assert_non_null(strstr(n->reason, "node has no migkit.io/mig-inventory annotation"));
        n = mk_sched_cache_node(&c, "broken");
        assert_null(n->inv);
        assert_non_null(strstr(n->reason, "malformed migkit.io/mig-inventory annotation"));
        assert_int_equal(n->res.cpu_allocatable_milli, 0); /* unparseable: refused, named */
        assert_non_null(n->alloc_error);
        assert_string_equal(n->alloc_error, "status.allocatable.cpu 'x' is not a Kubernetes quantity");
        assert_null(mk_sched_cache_node(&c, "n1")->alloc_error);
        size_t nn, nc;
        mk_sched_cache_counts(&c, &nn, &nc);
        assert_int_equal(nn, 3);
        assert_int_equal(nc, 0);
        /* A deleted node without reservations goes. */
        uint64_t gen = c.nodes_gen;
        event(&c, MK_KUBE_EVENT_DELETED, node("bare", false, "4"), true);
        assert_null(mk_sched_cache_node(&c, "bare"));
        assert_true(c.nodes_gen != gen);
        /* A node without a name is ignored. */
        json_t *nameless = json_object();
        assert_int_equal(mk_sched_cache_node_event(&c, MK_KUBE_EVENT_ADDED, nameless), 0);
        json_decref(nameless);
        mk_sched_cache_done(&c);
}

static void test_claims_and_usage(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        event(&c, MK_KUBE_EVENT_ADDED, node("n1", true, "8"), true);
        struct mk_sched_node *n = mk_sched_cache_node(&c, "n1");
        /* An observed reservation: linked, in the view, the memo forgotten. */
        mk_sched_memo_put(&n->memo, 42, 0, 5, NULL);
        event(&c, MK_KUBE_EVENT_ADDED, pod("p1", "n1", "n1", 0), false);
        int r, pri;
        assert_false(mk_sched_memo_get(&n->memo, 42, &r, &pri, NULL, 0));
        assert_int_equal(n->n_claims, 1);
        assert_int_equal(n->n_pending, 0);
        assert_true(view_has(n, 0));
        assert_non_null(mk_sched_cache_pod(&c, "p1"));
        /* The bound pod's CPU counts on its node. */
        assert_int_equal(n->res.cpu_requested_milli, 1500);
        /* A pending reservation of ours, then dropped (a failed bind). */
        struct mk_claim cl = {.active = true};
        snprintf(cl.uid, sizeof(cl.uid), "p2");
        snprintf(cl.node, sizeof(cl.node), "n1");
        cl.devices[0] = (struct mk_claim_device) {.profile_id = 9, .slices = 3, .placement = {.start = 4, .size = 4}};
        snprintf(cl.devices[0].gpu, sizeof(cl.devices[0].gpu), "GPU-a");
        cl.n_devices = 1;
        pthread_rwlock_wrlock(&c.lock);
        assert_int_equal(mk_sched_cache_set_claim(&c, &cl, true, 1000), 0);
        pthread_rwlock_unlock(&c.lock);
        assert_int_equal(n->n_pending, 1);
        assert_true(view_has(n, 4));
        const struct mk_sched_pod *p2 = mk_sched_cache_pod(&c, "p2");
        assert_false(mk_sched_pod_expired(p2, 1000 + MK_SCHED_PENDING_TTL_S));
        assert_true(mk_sched_pod_expired(p2, 1001 + MK_SCHED_PENDING_TTL_S));
        assert_false(mk_sched_pod_expired(p2, 0));
        mk_sched_cache_drop_pending(&c, "p2");
        assert_null(mk_sched_cache_pod(&c, "p2"));
        assert_int_equal(n->n_pending, 0);
        assert_false(view_has(n, 4));
        /* An observed one is not dropped that way. */
        mk_sched_cache_drop_pending(&c, "p1");
        assert_non_null(mk_sched_cache_pod(&c, "p1"));
        /* The node deleted while it holds a reservation: kept, without inventory. */
        event(&c, MK_KUBE_EVENT_DELETED, node("n1", true, "8"), true);
        n = mk_sched_cache_node(&c, "n1");
        assert_non_null(n);
        assert_null(n->inv);
        assert_string_equal(n->reason, "node was deleted");
        /* The pod finishes: its reservation and its CPU go. */
        json_t *done = pod("p1", "n1", "n1", 0);
        json_object_set_new(json_object_get(done, "status"), "phase", json_string("Succeeded"));
        event(&c, MK_KUBE_EVENT_MODIFIED, done, false);
        assert_null(mk_sched_cache_pod(&c, "p1"));
        assert_int_equal(n->n_claims, 0);
        assert_int_equal(n->res.cpu_requested_milli, 0);
        /* A pod without identity is ignored. */
        json_t *anonymous = json_object();
        assert_int_equal(mk_sched_cache_pod_event(&c, MK_KUBE_EVENT_ADDED, anonymous), 0);
        json_decref(anonymous);
        mk_sched_cache_done(&c);
}

static void test_resolve(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        event(&c, MK_KUBE_EVENT_ADDED, node("a", true, "8"), true);
        event(&c, MK_KUBE_EVENT_ADDED, node("b", true, "8"), true);
        struct mk_sched_cand cands[] = {{"a", 1, NULL, true}, {"zz", 2, NULL, true}, {"b", 1, NULL, true}};
        struct mk_sched_node *got[3], *again[3];
        pthread_rwlock_rdlock(&c.lock);
        mk_sched_cache_resolve(&c, cands, 3, got);
        assert_int_equal(c.names_n, 3); /* kept for the next request */
        mk_sched_cache_resolve(&c, cands, 3, again);
        pthread_rwlock_unlock(&c.lock);
        assert_ptr_equal(got[0], mk_sched_cache_node(&c, "a"));
        assert_null(got[1]);
        assert_ptr_equal(got[2], mk_sched_cache_node(&c, "b"));
        assert_memory_equal(got, again, sizeof(got));
        /* A node added since: the kept list is stale, the names are looked up again. */
        event(&c, MK_KUBE_EVENT_ADDED, node("zz", true, "8"), true);
        pthread_rwlock_rdlock(&c.lock);
        mk_sched_cache_resolve(&c, cands, 3, again);
        pthread_rwlock_unlock(&c.lock);
        assert_ptr_equal(again[1], mk_sched_cache_node(&c, "zz"));
        /* Another list of the same length does not match the kept one. */
        struct mk_sched_cand other[] = {{"b", 1, NULL, true}, {"a", 1, NULL, true}, {"zz", 2, NULL, true}};
        pthread_rwlock_rdlock(&c.lock);
        mk_sched_cache_resolve(&c, other, 3, again);
        pthread_rwlock_unlock(&c.lock);
        assert_ptr_equal(again[0], mk_sched_cache_node(&c, "b"));
        assert_ptr_equal(again[1], mk_sched_cache_node(&c, "a"));
        mk_sched_cache_done(&c);
}

/* Junk allocatable CPU or memory (issue 17): the node keeps an error naming
 * the field (no longer "none, so feasible"); the warning is logged when the
 * error appears or changes, not on every update; a fixed node is cleared. */
static void test_junk_allocatable(void **state) {
        (void) state;
        static const struct {
                const char *cpu, *memory, *want; /* want NULL: fine */
        } cases[] = {
                {"8", "64Gi", NULL},
                {"abc", "64Gi", "status.allocatable.cpu 'abc' is not a Kubernetes quantity"},
                {"8", "12Qi", "status.allocatable.memory '12Qi' is not a Kubernetes quantity"},
                {"-4", "64Gi", "status.allocatable.cpu '-4' is negative"},
                {"8", "-1Gi", "status.allocatable.memory '-1Gi' is negative"},
                {"99999999999999999999", "64Gi", "status.allocatable.cpu '99999999999999999999' is out of range"},
                {"8", "100Pi", "status.allocatable.memory '100Pi' is out of range"},
                {"", "64Gi", "status.allocatable.cpu '' is not a Kubernetes quantity"},
                {"8 ", "64Gi", "status.allocatable.cpu '8 ' is not a Kubernetes quantity"},
                {"1.5", "1e9", NULL},
                {"5e-1", "1Ei", "status.allocatable.memory '1Ei' is out of range"},
                {NULL, "64Gi", NULL}, /* absent: unknown, not checked */
                {"4", NULL, NULL},
                {"7", "", "status.allocatable.memory '' is not a Kubernetes quantity"},
        };
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        mk_log_set_fd(p[1]);
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                json_t *n = node("j", true, "1");
                json_t *alloc = json_object_get(json_object_get(n, "status"), "allocatable");
                json_object_clear(alloc);
                if (cases[i].cpu)
                        json_object_set_new(alloc, "cpu", json_string(cases[i].cpu));
                if (cases[i].memory)
                        json_object_set_new(alloc, "memory", json_string(cases[i].memory));
                for (int twice = 0; twice < 2; twice++)
                        assert_int_equal(mk_sched_cache_node_event(&c, MK_KUBE_EVENT_MODIFIED, n), 0);
                json_decref(n);
                const struct mk_sched_node *e = mk_sched_cache_node(&c, "j");
                char log[4096] = "";
                ssize_t k = read(p[0], log, sizeof(log) - 1);
                log[k > 0 ? k : 0] = 0;
                if (!cases[i].want) {
                        if (e->alloc_error)
                                fail_msg("case %zu: got '%s', want none", i, e->alloc_error);
                        continue;
                }
                if (!e->alloc_error || !streq(e->alloc_error, cases[i].want))
                        fail_msg("case %zu: got '%s', want '%s'", i, e->alloc_error ? e->alloc_error : "(none)",
                                 cases[i].want);
                assert_int_equal(e->res.cpu_allocatable_milli, 0);
                /* Two identical updates, one warning naming the node and the field. */
                const char *w = strstr(log, "] Node 'j': ");
                if (!w || !strstr(w, cases[i].want) || strstr(w + 1, "] Node 'j': "))
                        fail_msg("case %zu: want one warning, got:\n%s", i, log);
                assert_int_equal(log[0], 'W');
        }
        /* A number where a quantity string belongs. */
        json_t *n = node("j", true, "1");
        json_object_set_new(json_object_get(json_object_get(n, "status"), "allocatable"), "cpu", json_integer(8));
        assert_int_equal(mk_sched_cache_node_event(&c, MK_KUBE_EVENT_MODIFIED, n), 0);
        json_decref(n);
        assert_string_equal(mk_sched_cache_node(&c, "j")->alloc_error, "status.allocatable.cpu is not a quantity string");
        mk_sched_cache_done(&c);
        mk_log_set_fd(STDERR_FILENO);
        close(p[0]);
        close(p[1]);
}

/* GPUs of one kind share one profile array and one set of tables across
 * nodes (one copy for the cluster), held while a node has them: a node of
 * another kind adds one, an updated node keeps its kind, the last node
 * going frees it. */
static void test_kinds_shared(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        event(&c, MK_KUBE_EVENT_ADDED, node("n1", true, "8"), true);
        event(&c, MK_KUBE_EVENT_ADDED, node("n2", true, "8"), true);
        struct mk_sched_node *a = mk_sched_cache_node(&c, "n1"), *b = mk_sched_cache_node(&c, "n2");
        assert_int_equal(c.n_kinds, 1);
        assert_non_null(a->kinds[0]);
        assert_ptr_equal(a->kinds[0], b->kinds[0]);
        assert_int_equal(a->kinds[0]->refs, 2);
        assert_non_null(a->kinds[0]->tables);
        assert_ptr_equal(a->fit_gpus[0].profiles, b->fit_gpus[0].profiles); /* the fit sees one array */
        assert_ptr_equal(a->fit_gpus[0].tables, a->kinds[0]->tables);
        assert_true(a->fit_gpus[0].profiles != a->inv->gpus[0].profiles);
        /* Another kind: the same GPU with one profile fewer. */
        char inv[2048];
        snprintf(inv, sizeof(inv), INV, "n3");
        json_t *j = json_loads(inv, 0, NULL);
        assert_non_null(j);
        json_t *profiles = json_object_get(json_array_get(json_object_get(j, "gpus"), 0), "profiles");
        assert_true(json_array_size(profiles) >= 2);
        json_array_remove(profiles, json_array_size(profiles) - 1);
        char *v = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        json_t *n3 = node("n3", false, "8");
        json_object_set_new(json_object_get(json_object_get(n3, "metadata"), "annotations"), MK_ANN_INVENTORY,
                            json_string(v));
        free(v);
        event(&c, MK_KUBE_EVENT_ADDED, n3, true);
        assert_int_equal(c.n_kinds, 2);
        assert_true(mk_sched_cache_node(&c, "n3")->kinds[0] != a->kinds[0]);
        /* Updated: the kind stays, held once. */
        event(&c, MK_KUBE_EVENT_MODIFIED, node("n1", true, "16"), true);
        a = mk_sched_cache_node(&c, "n1");
        assert_ptr_equal(a->kinds[0], b->kinds[0]);
        assert_int_equal(a->kinds[0]->refs, 2);
        event(&c, MK_KUBE_EVENT_DELETED, node("n1", false, "8"), true);
        assert_int_equal(b->kinds[0]->refs, 1);
        event(&c, MK_KUBE_EVENT_DELETED, node("n3", false, "8"), true);
        assert_int_equal(c.n_kinds, 1);
        assert_int_equal(c.kinds[0]->slot, 0);
        event(&c, MK_KUBE_EVENT_DELETED, node("n2", false, "8"), true);
        assert_int_equal(c.n_kinds, 0);
        mk_sched_cache_done(&c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_nodes),
                cmocka_unit_test(test_claims_and_usage),
                cmocka_unit_test(test_resolve),
                cmocka_unit_test(test_junk_allocatable),
                cmocka_unit_test(test_kinds_shared),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
