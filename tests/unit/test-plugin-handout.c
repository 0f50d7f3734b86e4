/* Unit tests for plugin/handout: recording what the dynamic device plugin
 * handed out, finding it from kubelet's PodResources ids, the corrections
 * a List calls for (in order, so that no instance in use is unnamed), and
 * the state file's codec with malformed input. */
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

#include "base/macro.h"
#include "claim/claim.h"
#include "plugin/dynamic/handout.h"
#include "sched-fixtures.h"

/* P reserved A (placement 0), Q reserved B (placement 1), one 1g each. */
static struct mk_claim claim_p(void) {
        struct mk_claim c = make_claim("ns", "p", "uid-p", "n1", 100);
        add_dev(&c, 0, "GPU-0", "1g.10gb", 19, 1, pl(0, 1), "MIG-A");
        return c;
}

static struct mk_claim claim_q(void) {
        struct mk_claim c = make_claim("ns", "q", "uid-q", "n1", 101);
        add_dev(&c, 0, "GPU-0", "1g.10gb", 19, 1, pl(1, 1), "MIG-B");
        return c;
}

static void add1(struct mk_dp_handouts *h, const char *id, const struct mk_claim *assumed, int64_t now) {
        const char *ids[] = {id};
        const char *const *c[] = {ids};
        size_t n[] = {1};
        assert_int_equal(mk_dp_handouts_add(h, c, n, 1, assumed, now, NULL), 0);
}

static char *key1(const char *id) {
        char *k = NULL;
        assert_int_equal(mk_dp_handout_key(&id, 1, &k), 0);
        return k;
}

static void test_key_and_find(void **state) {
        (void) state;
        const char *ids[] = {"dyn-b::1", "dyn-a::0"};
        char *k = NULL;
        assert_int_equal(mk_dp_handout_key(ids, 2, &k), 0);
        assert_string_equal(k, "dyn-a::0,dyn-b::1"); /* sorted: kubelet's order is not ours */
        free(k);
        const char *bad[] = {"a,b"};
        assert_int_equal(mk_dp_handout_key(bad, 1, &k), -EINVAL);
        const char *empty[] = {""};
        assert_int_equal(mk_dp_handout_key(empty, 1, &k), -EINVAL);
        assert_int_equal(mk_dp_handout_key(ids, 0, &k), -EINVAL);

        struct mk_dp_handouts h = {0};
        struct mk_claim p = claim_p(), q = claim_q();
        add1(&h, "dyn-x::0", &p, 10);
        add1(&h, "dyn-x::0", &q, 20); /* ids reused after the first pod left: the newest wins */
        add1(&h, "dyn-x::1", &p, 30);
        assert_int_equal(h.n, 3);
        assert_int_equal(h.v[2].seq, 3);
        char *key = key1("dyn-x::0");
        const char *keys[] = {"other", key};
        struct mk_dp_handout *o = mk_dp_handouts_find(&h, keys, 2);
        assert_non_null(o);
        assert_string_equal(o->slot->name, "q");
        assert_null(mk_dp_handouts_find(&h, keys, 1));
        free(key);
        mk_dp_handouts_done(&h);
}

static void test_bounded(void **state) {
        (void) state;
        struct mk_dp_handouts h = {0};
        struct mk_claim p = claim_p();
        for (unsigned i = 0; i < MK_DP_HANDOUT_MAX + 5; i++) {
                char id[32];
                snprintf(id, sizeof(id), "dyn-x::%u", i);
                add1(&h, id, &p, i);
        }
        assert_int_equal(h.n, MK_DP_HANDOUT_MAX);
        assert_int_equal(h.v[0].seq, 6); /* the oldest went */
        mk_dp_handouts_done(&h);
}

struct scene {
        struct mk_dp_handouts h;
        struct mk_dp_pod pods[2];
        struct mk_dp_held held[2];
        char *kq, *kp;
        size_t n_held;
};

/* Q admitted first and answered P's A (assuming P); then, if both, P
 * answered Q's B (assuming Q). Pods as the apiserver then has them. */
static void scene_init(struct scene *s, bool both) {
        *s = (struct scene) {0};
        struct mk_claim p = claim_p(), q = claim_q();
        add1(&s->h, "dyn-g::0", &p, 1000);
        p.allocated = true;
        if (both) {
                add1(&s->h, "dyn-g::1", &q, 1001);
                q.allocated = true;
        }
        s->pods[0] = (struct mk_dp_pod) {.claim = p};
        s->pods[1] = (struct mk_dp_pod) {.claim = q};
        s->kq = key1("dyn-g::0");
        s->kp = key1("dyn-g::1");
        s->held[0] = (struct mk_dp_held) {.namespace = "ns", .name = "q", .keys = &s->kq, .n_keys = 1};
        s->held[1] = (struct mk_dp_held) {.namespace = "ns", .name = "p", .keys = &s->kp, .n_keys = 1};
        s->n_held = both ? 2 : 1;
}

static void scene_done(struct scene *s) {
        mk_dp_handouts_done(&s->h);
        free(s->kq);
        free(s->kp);
}

/* Applies fixes as the daemon would: handed first, then reservations. */
static void apply(struct scene *s, const struct mk_dp_fix *f, size_t n, char handed[2][128]) {
        for (size_t i = 0; i < n; i++) {
                struct mk_dp_pod *p = &s->pods[f[i].pod];
                if (f[i].kind == MK_DP_FIX_HANDED) {
                        snprintf(handed[f[i].pod], 128, "[\"%s\"]", f[i].to.devices[0].mig_uuid);
                        p->handed = handed[f[i].pod];
                } else
                        p->claim = f[i].to;
        }
}

static void test_decide_out_of_order(void **state) {
        (void) state;
        struct scene s;
        scene_init(&s, true);
        char handed[2][128] = {{0}};
        struct mk_dp_fix *f = NULL;
        size_t n = 0;
        bool changed = false;
        /* Round 1: both pods must first be handed what they hold. */
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_true(changed);
        assert_int_equal(n, 2);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(f[i].kind, MK_DP_FIX_HANDED);
        assert_int_equal(f[0].pod, 1); /* q holds A */
        assert_string_equal(f[0].to.devices[0].mig_uuid, "MIG-A");
        assert_int_equal(f[1].pod, 0); /* p holds B */
        assert_string_equal(f[1].to.devices[0].mig_uuid, "MIG-B");
        assert_non_null(s.h.v[0].displaced);
        apply(&s, f, n, handed);
        free(f);
        /* Round 2: the reservations move. */
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 2);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(f[i].kind, MK_DP_FIX_RESERVATION);
        apply(&s, f, n, handed);
        free(f);
        assert_string_equal(s.pods[0].claim.devices[0].mig_uuid, "MIG-B");
        assert_int_equal(s.pods[0].claim.devices[0].placement.start, 1);
        assert_string_equal(s.pods[1].claim.devices[0].mig_uuid, "MIG-A");
        assert_int_equal(s.pods[1].claim.devices[0].placement.start, 0);
        assert_true(s.pods[0].claim.allocated && s.pods[1].claim.allocated);
        assert_int_equal(s.pods[0].claim.time, 100); /* each keeps its own reservation time */
        /* Round 3: nothing left. */
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 0);
        assert_false(changed);
        free(f);
        scene_done(&s);
}

/* Only Q admitted so far: Q takes A, P (not admitted) takes B and loses the
 * allocated mark, so its own Allocate later finds B. */
static void test_decide_assumed_not_admitted(void **state) {
        (void) state;
        struct scene s;
        scene_init(&s, false);
        char handed[2][128] = {{0}};
        struct mk_dp_fix *f = NULL;
        size_t n = 0;
        bool changed = false;
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 1);
        assert_int_equal(f[0].kind, MK_DP_FIX_HANDED);
        apply(&s, f, n, handed);
        free(f);
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 2);
        /* Cut short after the first patch: the saved displaced finishes it. */
        apply(&s, f, 1, handed);
        free(f);
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 1);
        apply(&s, f, n, handed);
        free(f);
        assert_string_equal(s.pods[1].claim.devices[0].mig_uuid, "MIG-A");
        assert_true(s.pods[1].claim.allocated);
        assert_string_equal(s.pods[0].claim.devices[0].mig_uuid, "MIG-B");
        assert_false(s.pods[0].claim.allocated);
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 0);
        free(f);
        scene_done(&s);
}

/* Admitted in the order assumed: nothing to patch. */
static void test_decide_in_order(void **state) {
        (void) state;
        struct mk_dp_handouts h = {0};
        struct mk_claim p = claim_p();
        add1(&h, "dyn-g::0", &p, 1000);
        p.allocated = true;
        struct mk_dp_pod pods[] = {{.claim = p}, {.claim = claim_q()}};
        char *k = key1("dyn-g::0");
        struct mk_dp_held held[] = {{.namespace = "ns", .name = "p", .keys = &k, .n_keys = 1}};
        struct mk_dp_fix *f = NULL;
        size_t n = 0;
        bool changed = false;
        assert_true(mk_dp_handouts_pending(&h, 1001));
        assert_int_equal(mk_dp_handouts_decide(&h, held, 1, pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 0);
        assert_true(changed); /* resolved: p holds it */
        assert_string_equal(h.v[0].holder, "ns/p");
        assert_false(mk_dp_handouts_pending(&h, 1001));
        free(f);
        /* Pruned once the pods are gone. */
        assert_int_equal(mk_dp_handouts_prune(&h, held, 1, pods, 2, 1002), 0);
        assert_int_equal(mk_dp_handouts_prune(&h, NULL, 0, NULL, 0, 1002), 1);
        assert_int_equal(h.n, 0);
        free(k);
        mk_dp_handouts_done(&h);
}

/* Without an answer from kubelet's List since they were made, unresolved
 * handouts are dropped after MK_DP_HANDOUT_UNSEEN_S instead of kept for
 * the hour (a soak without the PodResources API grew the plugin by 65 KiB
 * per 8 Allocates); a resolved one, or one made before the last answer,
 * stays. */
static void test_expire_unseen(void **state) {
        (void) state;
        struct mk_dp_handouts h = {0};
        struct mk_claim p = claim_p(), q = claim_q();
        add1(&h, "dyn-g::0", &p, 1000);  /* before the last List that answered (1500) */
        add1(&h, "dyn-g::1", &q, 2000);  /* after it */
        add1(&h, "dyn-g::2", &p, 2100);  /* after it, younger */
        add1(&h, "dyn-g::3", &q, 2000);  /* after it, resolved */
        free(h.v[3].holder);
        h.v[3].holder = strdup("ns/q");
        assert_non_null(h.v[3].holder);
        assert_int_equal(mk_dp_handouts_expire_unseen(&h, 1500, 2000 + MK_DP_HANDOUT_UNSEEN_S - 1), 0);
        assert_int_equal(mk_dp_handouts_expire_unseen(&h, 1500, 2000 + MK_DP_HANDOUT_UNSEEN_S), 1);
        assert_int_equal(h.n, 3);
        assert_int_equal(h.v[0].time, 1000);
        assert_int_equal(h.v[1].time, 2100);
        assert_string_equal(h.v[2].holder, "ns/q");
        assert_int_equal(mk_dp_handouts_expire_unseen(&h, 0, 2100 + MK_DP_HANDOUT_UNSEEN_S), 2); /* never listed */
        assert_int_equal(h.n, 1);
        assert_string_equal(h.v[0].holder, "ns/q");
        mk_dp_handouts_done(&h);
}

/* A handout resolved to one pod does not speak for a later pod holding
 * the same ids whose own Allocate was not recorded. */
static void test_decide_stale(void **state) {
        (void) state;
        struct mk_dp_handouts h = {0};
        struct mk_claim p = claim_p(), q = claim_q();
        add1(&h, "dyn-g::0", &p, 1000);
        struct mk_dp_pod pods[] = {{.claim = p}, {.claim = q}};
        char *k = key1("dyn-g::0");
        struct mk_dp_held held_p[] = {{.namespace = "ns", .name = "p", .keys = &k, .n_keys = 1}};
        struct mk_dp_held held_q[] = {{.namespace = "ns", .name = "q", .keys = &k, .n_keys = 1}};
        struct mk_dp_fix *f = NULL;
        size_t n = 0;
        bool changed = false;
        assert_int_equal(mk_dp_handouts_decide(&h, held_p, 1, pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 0);
        free(f);
        assert_int_equal(mk_dp_handouts_decide(&h, held_q, 1, pods, 2, &f, &n, &changed), 0);
        assert_int_equal(n, 0); /* without the holder check, q would be moved onto A */
        assert_false(changed);
        free(f);
        free(k);
        mk_dp_handouts_done(&h);
}

static void test_file_roundtrip(void **state) {
        (void) state;
        struct scene s;
        scene_init(&s, true);
        struct mk_dp_fix *f = NULL;
        size_t n = 0;
        bool changed = false;
        assert_int_equal(mk_dp_handouts_decide(&s.h, s.held, s.n_held, s.pods, 2, &f, &n, &changed), 0);
        free(f);
        char *text = NULL;
        assert_int_equal(mk_dp_handouts_format(&s.h, &text), 0);
        struct mk_dp_handouts back = {0};
        struct mk_error e = {0};
        assert_int_equal(mk_dp_handouts_parse(text, strlen(text), &back, &e), 0);
        assert_int_equal(back.n, 2);
        assert_int_equal(back.next_seq, 2);
        assert_string_equal(back.v[0].keys[0], "dyn-g::0");
        assert_string_equal(back.v[0].slot->name, "p");
        assert_string_equal(back.v[0].slot->devices[0].mig_uuid, "MIG-A");
        assert_string_equal(back.v[0].holder, "ns/q");
        assert_non_null(back.v[0].displaced);
        assert_string_equal(back.v[0].displaced->devices[0].mig_uuid, "MIG-B");
        char *again = NULL;
        assert_int_equal(mk_dp_handouts_format(&back, &again), 0);
        assert_string_equal(again, text);
        free(again);
        free(text);
        mk_dp_handouts_done(&back);
        scene_done(&s);
}

static void test_file_malformed(void **state) {
        (void) state;
        static const char *const bad[] = {
                "",
                "[]",
                "{\"version\":2,\"next\":0,\"handouts\":[]}",
                "{\"version\":1,\"next\":0,\"handouts\":[],\"x\":1}",
                "{\"version\":1,\"next\":0,\"handouts\":{}}",
                "{\"version\":1,\"next\":-1,\"handouts\":[]}",
                "{\"version\":1,\"next\":1,\"handouts\":[{\"seq\":1,\"time\":1,\"containers\":[],\"pod\":{},"
                "\"displaced\":null,\"holder\":null}]}",
                "{\"version\":1,\"next\":1,\"handouts\":[{\"seq\":1,\"time\":1,\"containers\":[[\"a,b\"]],"
                "\"pod\":{},\"displaced\":null,\"holder\":null}]}",
                "{\"version\":1,\"next\":1,\"handouts\":[{\"seq\":1,\"time\":1,\"containers\":[[\"a\"]],"
                "\"pod\":{\"namespace\":\"ns\",\"name\":\"p\",\"uid\":\"u\",\"reservation\":\"{}\","
                "\"devices\":\"[]\",\"allocated\":true},\"displaced\":null,\"holder\":null}]}",
                "{\"version\":1,\"next\":0,\"handouts\":[{\"seq\":1,\"time\":1,\"containers\":[[\"a\"]],"
                "\"pod\":{\"namespace\":\"ns\",\"name\":\"p\",\"uid\":\"u\",\"reservation\":"
                "\"{\\\"version\\\":1,\\\"node\\\":\\\"n\\\",\\\"time\\\":1,\\\"devices\\\":[{\\\"container\\\":0,"
                "\\\"gpu\\\":\\\"GPU-0\\\",\\\"profile\\\":\\\"1g.10gb\\\",\\\"profileID\\\":19,\\\"slices\\\":1,"
                "\\\"placement\\\":{\\\"start\\\":0,\\\"size\\\":1}}]}\","
                "\"devices\":\"[\\\"MIG-A\\\"]\",\"allocated\":true},\"displaced\":null,\"holder\":null}]}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct mk_dp_handouts h = {.n = 77};
                struct mk_error e = {0};
                int r = mk_dp_handouts_parse(bad[i], strlen(bad[i]), &h, &e);
                if (r >= 0)
                        fail_msg("case %zu parsed: %s", i, bad[i]);
                assert_int_equal(h.n, 77); /* untouched */
                assert_true(e.msg[0] != '\0');
        }
        /* A file with a valid handout whose seq exceeds "next" is refused too
         * (the last case); the same with next=1 parses. */
        const char *good = "{\"version\":1,\"next\":1,\"handouts\":[{\"seq\":1,\"time\":1,\"containers\":[[\"a\"]],"
                           "\"pod\":{\"namespace\":\"ns\",\"name\":\"p\",\"uid\":\"u\",\"reservation\":"
                           "\"{\\\"version\\\":1,\\\"node\\\":\\\"n\\\",\\\"time\\\":1,\\\"devices\\\":[{\\\"container\\\":0,"
                "\\\"gpu\\\":\\\"GPU-0\\\",\\\"profile\\\":\\\"1g.10gb\\\",\\\"profileID\\\":19,\\\"slices\\\":1,"
                "\\\"placement\\\":{\\\"start\\\":0,\\\"size\\\":1}}]}\","
                           "\"devices\":\"[\\\"MIG-A\\\"]\",\"allocated\":true},\"displaced\":null,\"holder\":null}]}";
        struct mk_dp_handouts h = {0};
        struct mk_error e = {0};
        int r = mk_dp_handouts_parse(good, strlen(good), &h, &e);
        if (r < 0)
                fail_msg("good: %s", e.msg);
        assert_int_equal(h.n, 1);
        mk_dp_handouts_done(&h);
}

static void test_handed_names(void **state) {
        (void) state;
        assert_true(mk_claim_handed_names("[\"MIG-A\",\"MIG-B\"]", "MIG-B"));
        assert_false(mk_claim_handed_names("[\"MIG-A\"]", "MIG-B"));
        assert_false(mk_claim_handed_names("[\"MIG-A\"", "MIG-A"));
        assert_false(mk_claim_handed_names(NULL, "MIG-A"));
        assert_false(mk_claim_handed_names("[\"MIG-A\"]", ""));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_key_and_find),
                cmocka_unit_test(test_bounded),
                cmocka_unit_test(test_decide_out_of_order),
                cmocka_unit_test(test_decide_assumed_not_admitted),
                cmocka_unit_test(test_decide_in_order),
                cmocka_unit_test(test_decide_stale),
                cmocka_unit_test(test_file_roundtrip),
                cmocka_unit_test(test_file_malformed),
                cmocka_unit_test(test_handed_names),
                cmocka_unit_test(test_expire_unseen),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
