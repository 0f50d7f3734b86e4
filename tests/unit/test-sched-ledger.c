/* Unit tests for sched/ledger (the bind ledger on a Node that serialises the
 * binds of extender replicas): read keeps the fresh entries of this node and
 * drops old, foreign and malformed ones; put replaces a pod's entry and is
 * bounded; an entry's claim round-trips. And the cache's side: a ledger
 * reservation is noted as pending only when the pod has none, expires after
 * the ledger's TTL and is swept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/macro.h"
#include "claim/claim.h"
#include "sched/ledger.h"
#include "sched/nodecache.h"

static struct mk_claim claim(const char *uid, const char *node, int64_t time, unsigned start) {
        struct mk_claim c = {.time = time, .active = true, .n_devices = 1};
        snprintf(c.uid, sizeof(c.uid), "%s", uid);
        snprintf(c.namespace, sizeof(c.namespace), "ns");
        snprintf(c.name, sizeof(c.name), "pod-%s", uid);
        snprintf(c.node, sizeof(c.node), "%s", node);
        struct mk_claim_device *d = &c.devices[0];
        snprintf(d->gpu, sizeof(d->gpu), "GPU-a");
        snprintf(d->profile, sizeof(d->profile), "1g.5gb");
        d->profile_id = 19;
        d->slices = 1;
        d->placement = (struct mk_placement) {.start = start, .size = 1};
        return c;
}

static json_t *node_with(const char *name, json_t *ledger) {
        char *v = json_dumps(ledger, JSON_COMPACT);
        assert_non_null(v);
        json_t *n = json_pack("{s:{s:s, s:s, s:{s:s}}}", "metadata", "name", name, "resourceVersion", "7",
                              "annotations", MK_ANN_BINDS, v);
        free(v);
        assert_non_null(n);
        return n;
}

static void test_read_and_put(void **state) {
        (void) state;
        json_t *l = json_array();
        struct mk_claim c;
        c = claim("fresh", "n1", 1000, 0);
        assert_int_equal(mk_sched_ledger_put(l, &c), 0);
        c = claim("old", "n1", 1000 - MK_SCHED_LEDGER_TTL_S - 1, 1);
        assert_int_equal(mk_sched_ledger_put(l, &c), 0);
        c = claim("foreign", "n2", 1000, 2);
        assert_int_equal(mk_sched_ledger_put(l, &c), 0);
        /* A pod's entry is replaced, not added. */
        c = claim("fresh", "n1", 1000, 3);
        assert_int_equal(mk_sched_ledger_put(l, &c), 0);
        assert_int_equal(json_array_size(l), 3);
        json_t *n = node_with("n1", l);
        json_t *r = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_sched_ledger_read(n, 1000, &r, &e), 0);
        assert_int_equal(json_array_size(r), 1);
        struct mk_claim back;
        assert_int_equal(mk_sched_ledger_claim(json_array_get(r, 0), &back, &e), 0);
        assert_string_equal(back.uid, "fresh");
        assert_string_equal(back.name, "pod-fresh");
        assert_string_equal(back.node, "n1");
        assert_int_equal(back.time, 1000);
        assert_true(back.active);
        assert_int_equal(back.n_devices, 1);
        assert_int_equal(back.devices[0].placement.start, 3);
        json_decref(r);
        json_decref(n);

        /* A malformed entry is left out and reported; the others stay. */
        json_array_append_new(l, json_pack("{s:s}", "uid", "x"));
        n = node_with("n1", l);
        assert_int_equal(mk_sched_ledger_read(n, 1000, &r, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "entry 3"));
        assert_int_equal(json_array_size(r), 1);
        json_decref(r);
        json_decref(n);
        /* A value that is not JSON: an empty ledger, and the error. */
        n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n1", "annotations", MK_ANN_BINDS, "[{");
        assert_int_equal(mk_sched_ledger_read(n, 1000, &r, &e), -EINVAL);
        assert_int_equal(json_array_size(r), 0);
        json_decref(r);
        json_decref(n);
        /* No annotation: empty. */
        n = json_pack("{s:{s:s}}", "metadata", "name", "n1");
        assert_int_equal(mk_sched_ledger_read(n, 1000, &r, &e), 0);
        assert_int_equal(json_array_size(r), 0);
        json_decref(r);
        json_decref(n);
        json_decref(l);

        /* Bounded. */
        l = json_array();
        char uid[32];
        for (unsigned i = 0; i < MK_SCHED_LEDGER_MAX; i++) {
                snprintf(uid, sizeof(uid), "u%u", i);
                c = claim(uid, "n1", 1000, 0);
                assert_int_equal(mk_sched_ledger_put(l, &c), 0);
        }
        c = claim("one-more", "n1", 1000, 0);
        assert_int_equal(mk_sched_ledger_put(l, &c), -E2BIG);
        c = claim("u0", "n1", 1001, 0);
        assert_int_equal(mk_sched_ledger_put(l, &c), 0); /* a replacement still fits */
        char *v = json_dumps(l, JSON_COMPACT);
        assert_true(strlen(v) <= MK_SCHED_LEDGER_BYTES);
        free(v);
        json_decref(l);
}

static void test_cache_note_and_sweep(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        struct mk_claim a = claim("a", "n1", 1000, 0), b = claim("b", "n1", 1000, 1);
        /* The pod informer already delivered a: the ledger's copy is not noted. */
        pthread_rwlock_wrlock(&c.lock);
        assert_int_equal(mk_sched_cache_set_claim(&c, &a, false, 0), 0);
        pthread_rwlock_unlock(&c.lock);
        assert_int_equal(mk_sched_cache_note_claim(&c, &a, MK_SCHED_LEDGER_TTL_S), 0);
        assert_int_equal(mk_sched_cache_note_claim(&c, &b, MK_SCHED_LEDGER_TTL_S), 1);
        pthread_rwlock_rdlock(&c.lock);
        struct mk_sched_pod *p = mk_sched_cache_pod(&c, "b");
        assert_non_null(p);
        assert_true(p->pending);
        assert_false(mk_sched_pod_expired(p, 1000 + MK_SCHED_LEDGER_TTL_S));
        assert_true(mk_sched_pod_expired(p, 1001 + MK_SCHED_LEDGER_TTL_S));
        assert_false(mk_sched_pod_expired(mk_sched_cache_pod(&c, "a"), 1001 + MK_SCHED_LEDGER_TTL_S));
        assert_int_equal(mk_sched_cache_node(&c, "n1")->n_claims, 2);
        pthread_rwlock_unlock(&c.lock);
        /* Swept once expired, at most once per MK_SCHED_SWEEP_S. */
        assert_int_equal(mk_sched_cache_sweep(&c, 1000 + MK_SCHED_LEDGER_TTL_S), 0);
        assert_int_equal(mk_sched_cache_sweep(&c, 1001 + MK_SCHED_LEDGER_TTL_S), 0); /* too soon */
        assert_int_equal(mk_sched_cache_sweep(&c, 1000 + MK_SCHED_LEDGER_TTL_S + MK_SCHED_SWEEP_S), 1);
        size_t nodes, claims;
        mk_sched_cache_counts(&c, &nodes, &claims);
        assert_int_equal(claims, 1);
        mk_sched_cache_done(&c);
}

/* A pod seen deleted is not brought back by a ledger entry made before its
 * deletion (the entry lives MK_SCHED_LEDGER_TTL_S): its GPU was held for
 * that long, and a pod needing the GPU's mode switched was refused at bind. */
static void test_cache_gone_not_noted(void **state) {
        (void) state;
        struct mk_sched_cache c;
        assert_int_equal(mk_sched_cache_init(&c), 0);
        struct mk_claim a = claim("a", "n1", 1000, 0);
        pthread_rwlock_wrlock(&c.lock);
        assert_int_equal(mk_sched_cache_set_claim(&c, &a, false, 0), 0);
        pthread_rwlock_unlock(&c.lock);
        json_t *pod = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "uid", "a", "name", "p", "namespace", "default");
        assert_int_equal(mk_sched_cache_pod_event(&c, MK_KUBE_EVENT_DELETED, pod), 0);
        json_decref(pod);
        assert_null(mk_sched_cache_pod(&c, "a"));
        assert_int_equal(mk_sched_cache_note_claim(&c, &a, MK_SCHED_LEDGER_TTL_S), 0);
        assert_null(mk_sched_cache_pod(&c, "a"));
        assert_int_equal(mk_sched_cache_node(&c, "n1")->n_claims, 0);
        /* Forgotten after MK_SCHED_GONE_S: a ledger that old has no entry for it. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        mk_sched_cache_sweep(&c, ts.tv_sec + MK_SCHED_GONE_S + 1);
        assert_int_equal(c.gone.n, 0);
        mk_sched_cache_done(&c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_read_and_put),
                cmocka_unit_test(test_cache_note_and_sweep),
                cmocka_unit_test(test_cache_gone_not_noted),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
