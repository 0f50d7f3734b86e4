/* Unit tests for claim/: the reservation annotation codec, a claim read
 * from a pod, and the device plugin's Allocate matching. */
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
#include "sched-fixtures.h"

static void test_reservation_roundtrip(void **state) {
        (void) state;
        struct mk_claim c = make_claim("ns", "p", "u1", "n1", 1700000000);
        add_dev(&c, 0, "GPU-aaaa", "3g.20gb", 9, 3, pl(4, 4), NULL);
        add_dev(&c, 1, "GPU-bbbb", "1g.5gb", 19, 1, pl(6, 1), NULL);
        char *s = NULL;
        assert_int_equal(mk_claim_reservation_format(&c, &s), 0);
        assert_string_equal(s, "{\"version\":1,\"node\":\"n1\",\"time\":1700000000,\"devices\":["
                               "{\"container\":0,\"gpu\":\"GPU-aaaa\",\"profile\":\"3g.20gb\",\"profileID\":9,"
                               "\"slices\":3,\"placement\":{\"start\":4,\"size\":4}},"
                               "{\"container\":1,\"gpu\":\"GPU-bbbb\",\"profile\":\"1g.5gb\",\"profileID\":19,"
                               "\"slices\":1,\"placement\":{\"start\":6,\"size\":1}}]}");
        struct mk_claim back = {0};
        assert_int_equal(mk_claim_reservation_parse(s, &back, NULL), 0);
        assert_string_equal(back.node, "n1");
        assert_int_equal(back.time, 1700000000);
        assert_int_equal(back.n_devices, 2);
        assert_memory_equal(&back.devices[0], &c.devices[0], sizeof(c.devices[0]));
        assert_memory_equal(&back.devices[1], &c.devices[1], sizeof(c.devices[1]));
        assert_int_equal(mk_claim_devices_parse("[\"MIG-1\",\"MIG-2\"]", &back, NULL), 0);
        assert_string_equal(back.devices[1].mig_uuid, "MIG-2");
        free(s);
}

/* A soft slice (unified pool) next to a MIG device: the MIG entry keeps the
 * version-1 form without "mode", the soft one has no profile fields. */
static void test_reservation_soft(void **state) {
        (void) state;
        struct mk_claim c = make_claim("ns", "p", "u1", "n1", 9);
        add_dev(&c, 0, "GPU-aaaa", "1g.5gb", 19, 1, pl(6, 1), NULL);
        add_soft(&c, 1, "GPU-bbbb", 8000, 30, NULL);
        add_soft(&c, 1, "GPU-cccc", 1, 0, NULL);
        char *s = NULL;
        assert_int_equal(mk_claim_reservation_format(&c, &s), 0);
        assert_string_equal(s, "{\"version\":1,\"node\":\"n1\",\"time\":9,\"devices\":["
                               "{\"container\":0,\"gpu\":\"GPU-aaaa\",\"profile\":\"1g.5gb\",\"profileID\":19,"
                               "\"slices\":1,\"placement\":{\"start\":6,\"size\":1}},"
                               "{\"container\":1,\"mode\":\"hami-core\",\"gpu\":\"GPU-bbbb\",\"memoryMiB\":8000,"
                               "\"cores\":30},"
                               "{\"container\":1,\"mode\":\"hami-core\",\"gpu\":\"GPU-cccc\",\"memoryMiB\":1,"
                               "\"cores\":0}]}");
        struct mk_claim back = {0};
        assert_int_equal(mk_claim_reservation_parse(s, &back, NULL), 0);
        assert_int_equal(back.n_devices, 3);
        assert_int_equal(back.devices[0].mode, MK_CLAIM_MIG);
        assert_int_equal(back.devices[1].mode, MK_CLAIM_SOFT);
        assert_string_equal(back.devices[1].gpu, "GPU-bbbb");
        assert_int_equal(back.devices[1].memory_mib, 8000);
        assert_int_equal(back.devices[1].cores, 30);
        assert_string_equal(back.devices[1].profile, "");
        assert_int_equal(back.devices[2].memory_mib, 1);
        free(s);
        /* "mode":"mig" is the default spelled out; "cores" may be left out. */
        assert_int_equal(mk_claim_reservation_parse(
                                 "{\"version\":1,\"node\":\"n\",\"devices\":[{\"container\":0,\"mode\":\"mig\","
                                 "\"gpu\":\"G\",\"profile\":\"1g.5gb\",\"profileID\":19,\"slices\":1,"
                                 "\"placement\":{\"start\":0,\"size\":1}},{\"container\":0,\"mode\":\"hami-core\","
                                 "\"gpu\":\"G\",\"memoryMiB\":5}]}",
                                 &back, NULL),
                         0);
        assert_int_equal(back.devices[0].mode, MK_CLAIM_MIG);
        assert_int_equal(back.devices[1].cores, 0);
        /* The agent's mig-devices: the GPU's UUID stands for a soft device. */
        assert_int_equal(mk_claim_devices_parse("[\"MIG-1\",\"G\"]", &back, NULL), 0);
        assert_string_equal(back.devices[1].mig_uuid, "G");
        assert_string_equal(mk_claim_mode_to_string(MK_CLAIM_SOFT), "hami-core");
        assert_string_equal(mk_claim_mode_to_string(MK_CLAIM_MIG), "mig");
        assert_null(mk_claim_mode_to_string(_MK_CLAIM_MODE_MAX));
        assert_int_equal(mk_claim_mode_from_string("hami-core"), MK_CLAIM_SOFT);
        assert_int_equal(mk_claim_mode_from_string("HAMi-core"), -EINVAL);
}

#define SOFT_DEV(x) "{\"version\":1,\"node\":\"n\",\"devices\":[{\"container\":0,\"gpu\":\"G\"," x "}]}"

static const struct {
        const char *value, *msg;
} bad_reservations[] = {
        {"", "not valid JSON"},
        {"[]", "must be an object"},
        {"{\"version\":2,\"node\":\"n\",\"devices\":[]}", "unsupported version 2"},
        {"{\"version\":1,\"node\":\"n\",\"devices\":[]}", "non-empty array"},
        {"{\"version\":1,\"devices\":[{}]}", "node: missing"},
        {"{\"version\":1,\"node\":\"n\",\"extra\":1,\"devices\":[]}", "unknown field 'extra'"},
        {"{\"version\":1,\"node\":\"n\",\"devices\":[{\"container\":0,\"gpu\":\"G\",\"profile\":\"1g.5gb\","
         "\"profileID\":19,\"slices\":1,\"placement\":{\"start\":30,\"size\":4}}]}",
         "out of range"},
        {"{\"version\":1,\"node\":\"n\",\"devices\":[{\"container\":0,\"gpu\":\"G\",\"profile\":\"1g.5gb\","
         "\"profileID\":-1,\"slices\":1,\"placement\":{\"start\":0,\"size\":1}}]}",
         "profileID: must be an integer"},
        {"{\"version\":1,\"node\":\"n\",\"node\":\"m\",\"devices\":[]}", "duplicate"},
        {"{\"version\":1,\"node\":\"n\\u0001\",\"devices\":[]}", "printable ASCII"},
        {"{\"version\":1,\"node\":\"n\",\"devices\":[7]}", "must be an object"},
        {SOFT_DEV("\"mode\":\"time-slicing\",\"memoryMiB\":1"), "mode: unknown 'time-slicing'"},
        {SOFT_DEV("\"mode\":\"hami-core-and-more-than-sixteen\""), "mode"},
        {SOFT_DEV("\"mode\":1"), "mode: must be a string"},
        {SOFT_DEV("\"mode\":\"hami-core\""), "memoryMiB: missing"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":0"), "memoryMiB: must be at least 1"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":16777217"), "memoryMiB: must be an integer"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":8,\"cores\":101"), "cores: must be an integer from 0 to 100"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":8,\"cores\":-1"), "cores: must be an integer"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":8,\"profile\":\"1g.5gb\""), "unknown field 'profile'"},
        {SOFT_DEV("\"mode\":\"hami-core\",\"memoryMiB\":8,\"placement\":{}"), "unknown field 'placement'"},
        {SOFT_DEV("\"profile\":\"1g.5gb\",\"profileID\":19,\"slices\":1,\"placement\":{\"start\":0,\"size\":1},"
                  "\"memoryMiB\":8"),
         "unknown field 'memoryMiB'"},
        {SOFT_DEV("\"mode\":\"mig\",\"cores\":5"), "unknown field 'cores'"},
};

static void test_reservation_invalid(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(bad_reservations); i++) {
                struct mk_claim c = make_claim("ns", "p", "u", "keep", 5);
                struct mk_error e = {0};
                assert_true(mk_claim_reservation_parse(bad_reservations[i].value, &c, &e) < 0);
                if (!strstr(e.msg, bad_reservations[i].msg))
                        fail_msg("'%s': message '%s', want '%s'", bad_reservations[i].value, e.msg,
                                 bad_reservations[i].msg);
                assert_string_equal(c.node, "keep"); /* untouched on failure */
        }
        /* Over the cap. */
        size_t n = MK_MAX_RESERVATION_BYTES + 10;
        char *big = malloc(n + 1);
        memset(big, ' ', n);
        big[n] = 0;
        struct mk_claim c = {0};
        assert_int_equal(mk_claim_reservation_parse(big, &c, NULL), -E2BIG);
        free(big);
        c.n_devices = 2;
        assert_int_equal(mk_claim_devices_parse("[\"MIG-1\"]", &c, NULL), -EINVAL);
        assert_int_equal(mk_claim_devices_parse("[\"MIG 1\",\"x\"]", &c, NULL), -EINVAL);
}

static void test_claim_from_pod(void **state) {
        (void) state;
        json_t *p = pod_json("u1", "{}",
                             "\"migkit.io/mig-reservation\":\"{\\\"version\\\":1,\\\"node\\\":\\\"n1\\\",\\\"time\\\":7,"
                             "\\\"devices\\\":[{\\\"container\\\":0,\\\"gpu\\\":\\\"GPU-aaaa\\\",\\\"profile\\\":"
                             "\\\"1g.5gb\\\",\\\"profileID\\\":19,\\\"slices\\\":1,\\\"placement\\\":{\\\"start\\\":6,"
                             "\\\"size\\\":1}}]}\",\"migkit.io/mig-devices\":\"[\\\"MIG-9\\\"]\"");
        struct mk_claim c;
        assert_int_equal(mk_claim_from_pod(p, &c, NULL), 1);
        assert_string_equal(c.uid, "u1");
        assert_string_equal(c.node, "n1");
        assert_true(c.active);
        assert_string_equal(c.devices[0].mig_uuid, "MIG-9");
        json_object_set_new(json_object_get(p, "status"), "phase", json_string("Succeeded"));
        assert_int_equal(mk_claim_from_pod(p, &c, NULL), 1);
        assert_false(c.active);
        json_decref(p);
        p = pod_json("u2", "{}", NULL);
        assert_int_equal(mk_claim_from_pod(p, &c, NULL), 0);
        json_decref(p);
        p = pod_json("u3", "{}", "\"migkit.io/mig-reservation\":\"garbage\"");
        assert_int_equal(mk_claim_from_pod(p, &c, NULL), -EINVAL);
        json_decref(p);
}

static void test_match_allocate(void **state) {
        (void) state;
        struct mk_claim cl[5];
        cl[0] = make_claim("ns", "b", "u0", "n1", 20); /* later */
        add_dev(&cl[0], 0, "G", "1g.5gb", 19, 1, pl(0, 1), "MIG-a");
        cl[1] = make_claim("ns", "a", "u1", "n1", 10); /* earliest, but not created yet */
        add_dev(&cl[1], 0, "G", "1g.5gb", 19, 1, pl(1, 1), NULL);
        cl[2] = make_claim("ns", "c", "u2", "n1", 15); /* earliest created, two containers 1+2 */
        add_dev(&cl[2], 0, "G", "1g.5gb", 19, 1, pl(2, 1), "MIG-c0");
        add_dev(&cl[2], 1, "G", "1g.5gb", 19, 1, pl(3, 1), "MIG-c1");
        add_dev(&cl[2], 1, "H", "1g.5gb", 19, 1, pl(0, 1), "MIG-c2");
        cl[3] = make_claim("ns", "d", "u3", "n2", 1); /* other node */
        add_dev(&cl[3], 0, "G", "1g.5gb", 19, 1, pl(4, 1), "MIG-d");
        cl[4] = make_claim("ns", "e", "u4", "n1", 5); /* allocated already */
        add_dev(&cl[4], 0, "G", "1g.5gb", 19, 1, pl(5, 1), "MIG-e");
        cl[4].allocated = true;
        unsigned one[] = {1}, one_two[] = {1, 2}, two[] = {2};
        assert_int_equal(mk_claim_match_allocate(cl, 5, "n1", one, 1), 0);
        assert_int_equal(mk_claim_match_allocate(cl, 5, "n1", one_two, 2), 2);
        assert_int_equal(mk_claim_match_allocate(cl, 5, "n1", two, 1), -ENOENT);
        assert_int_equal(mk_claim_match_allocate(cl, 5, "n2", one, 1), 3);
        assert_int_equal(mk_claim_match_allocate(cl, 5, "n3", one, 1), -ENOENT);
        /* Ties on time: namespace/name decides, whatever the order. */
        struct mk_claim t[2] = {make_claim("ns", "z", "1", "n1", 1), make_claim("ns", "y", "2", "n1", 1)};
        add_dev(&t[0], 0, "G", "1g.5gb", 19, 1, pl(0, 1), "MIG-z");
        add_dev(&t[1], 0, "G", "1g.5gb", 19, 1, pl(1, 1), "MIG-y");
        assert_int_equal(mk_claim_match_allocate(t, 2, "n1", one, 1), 1);
        /* Once allocated it is skipped; an inactive pod is never chosen. */
        t[1].allocated = true;
        assert_int_equal(mk_claim_match_allocate(t, 2, "n1", one, 1), 0);
        t[0].active = false;
        assert_int_equal(mk_claim_match_allocate(t, 2, "n1", one, 1), -ENOENT);
        /* A soft device is ready at once; a MIG device beside it still waits
         * for its MIG UUID. */
        struct mk_claim s[2] = {make_claim("ns", "s", "3", "n1", 1), make_claim("ns", "m", "4", "n1", 0)};
        add_soft(&s[0], 0, "GPU-a", 4000, 20, NULL);
        add_soft(&s[1], 0, "GPU-a", 4000, 0, NULL);
        add_dev(&s[1], 1, "GPU-b", "1g.5gb", 19, 1, pl(0, 1), NULL);
        assert_int_equal(mk_claim_match_allocate(s, 2, "n1", one, 1), 0);
        assert_int_equal(mk_claim_match_allocate(s, 2, "n1", (unsigned[]) {1, 1}, 2), -ENOENT);
        snprintf(s[1].devices[1].mig_uuid, sizeof(s[1].devices[1].mig_uuid), "MIG-b");
        assert_int_equal(mk_claim_match_allocate(s, 2, "n1", (unsigned[]) {1, 1}, 2), 1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_reservation_roundtrip),
                cmocka_unit_test(test_reservation_soft),
                cmocka_unit_test(test_reservation_invalid),
                cmocka_unit_test(test_claim_from_pod),
                cmocka_unit_test(test_match_allocate),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
