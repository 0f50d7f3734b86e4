/* Unit tests for plugin/pb-scan: counting a protobuf message's fields
 * without decoding it. Hand-written wire bytes (every wire type, truncated
 * varints, lengths past the end of the message or of a nested one, field
 * number 0, groups) and requests packed by protobuf-c, whose counts must be
 * what the decoded message holds; a path of four nested fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/macro.h"
#include "plugin/pb-scan.h"
#include "proto/deviceplugin.pb-c.h"

struct scan_case {
        const char *name;
        const uint8_t *data;
        size_t len;
        uint32_t outer, inner_field;
        int r;                    /* expected return */
        size_t outer_n, inner, fields;
        const char *msg;          /* a part of the error message */
};

#define B(...) (const uint8_t[]){ __VA_ARGS__ }, sizeof((const uint8_t[]){ __VA_ARGS__ })

static const struct scan_case cases[] = {
        { "empty message", (const uint8_t *) "", 0, 1, 1, 0, 0, 0, 0, NULL },
        /* two containers: 3 IDs ("", "a", "") and 1 ID; a top-level varint field 2 */
        { "two containers", B(0x0a, 0x07, 0x0a, 0x00, 0x0a, 0x01, 'a', 0x0a, 0x00,
                              0x10, 0x96, 0x01,
                              0x0a, 0x02, 0x0a, 0x00), 1, 1, 0, 2, 3, 7, NULL },
        /* an empty container counts as one outer, no inner */
        { "empty container", B(0x0a, 0x00, 0x0a, 0x00, 0x0a, 0x00), 1, 1, 0, 3, 0, 3, NULL },
        /* inside a container: a varint of field 1, 8 bytes, 4 bytes, bytes of field 15 */
        { "every wire type", B(0x0a, 0x13, 0x08, 0xff, 0x01, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1d, 1, 2, 3, 4,
                               0x7a, 0x00),
          1, 1, 0, 1, 1, 5, NULL },
        /* a field number of 5 bytes (2^28) is fine */
        { "big field number", B(0x80, 0x80, 0x80, 0x80, 0x08, 0x00), 1, 1, 0, 0, 0, 1, NULL },
        /* outer 0: device IDs at the top level are fields, not messages */
        { "no outer field", B(0x0a, 0x03, 'a', 'b', 'c', 0x0a, 0x00), 0, 1, 0, 0, 0, 2, NULL },
        /* "abc" read as a message would be malformed */
        { "string as outer", B(0x0a, 0x03, 'a', 'b', 'c'), 1, 1, -EINVAL, 0, 0, 0, "at byte 2" },
        { "truncated varint value", B(0x08, 0x80), 1, 1, -EINVAL, 0, 0, 0, "truncated varint at byte 2" },
        { "truncated tag", B(0x0a, 0x00, 0x80), 1, 1, -EINVAL, 0, 0, 0, "truncated varint at byte 3" },
        { "varint of 11 bytes", B(0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), 1, 1,
          -EINVAL, 0, 0, 0, "longer than 10 bytes" },
        { "tag of 6 bytes", B(0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00), 1, 1, -EINVAL, 0, 0, 0,
          "longer than 5 bytes at byte 0" },
        { "length of 6 bytes", B(0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), 1, 1, -EINVAL, 0, 0, 0,
          "longer than 5 bytes at byte 1" },
        { "length past the end", B(0x0a, 0x05, 0x00, 0x00), 1, 1, -EINVAL, 0, 0, 0,
          "length 5 at byte 0 past the end (2 bytes left)" },
        { "huge length", B(0x12, 0xff, 0xff, 0xff, 0xff, 0x0f), 1, 1, -EINVAL, 0, 0, 0, "length 4294967295" },
        /* the inner string's length ends inside the buffer but past its container */
        { "nested length past its message", B(0x0a, 0x02, 0x0a, 0x05, 'a', 'b', 'c', 'd', 'e'), 1, 1, -EINVAL, 0,
          0, 0, "length 5 at byte 2 past the end (0 bytes left)" },
        { "nested truncated varint", B(0x0a, 0x02, 0x08, 0x80, 0x01), 1, 1, -EINVAL, 0, 0, 0,
          "truncated varint at byte 4" },
        { "truncated 8 bytes", B(0x09, 1, 2, 3), 1, 1, -EINVAL, 0, 0, 0, "truncated 8-byte value at byte 0" },
        { "truncated 4 bytes", B(0x0d, 1, 2, 3), 1, 1, -EINVAL, 0, 0, 0, "truncated 4-byte value at byte 0" },
        { "field number 0", B(0x02, 0x00), 1, 1, -EINVAL, 0, 0, 0, "field number 0 at byte 0" },
        { "field number 0 in two bytes", B(0x0a, 0x00, 0x80, 0x00), 1, 1, -EINVAL, 0, 0, 0,
          "field number 0 at byte 2" },
        { "start group", B(0x0b, 0x0c), 1, 1, -EINVAL, 0, 0, 0, "wire type 3 at byte 0" },
        { "end group", B(0x0c), 1, 1, -EINVAL, 0, 0, 0, "wire type 4" },
        { "wire type 6", B(0x0e), 1, 1, -EINVAL, 0, 0, 0, "wire type 6" },
        { "wire type 7", B(0x17), 1, 1, -EINVAL, 0, 0, 0, "wire type 7" },
        { "outer as a varint", B(0x08, 0x01), 1, 1, -EINVAL, 0, 0, 0,
          "field 1 at byte 0 has wire type 0, not a message" },
};

static void test_cases(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct scan_case *t = &cases[i];
                struct mk_pb_counts c = { 7, 7, 7 };
                struct mk_error e = { 0 };
                int r = mk_pb_scan(t->data, t->len, t->outer, t->inner_field, &c, &e);
                printf("%s: %d (%s) outer %zu inner %zu fields %zu\n", t->name, r, e.msg, c.outer, c.inner,
                       c.fields);
                assert_int_equal(r, t->r);
                if (r < 0) {
                        assert_non_null(strstr(e.msg, t->msg));
                        /* untouched on failure */
                        assert_int_equal(c.outer, 7);
                        assert_int_equal(c.inner, 7);
                        assert_int_equal(c.fields, 7);
                        continue;
                }
                assert_int_equal(c.outer, t->outer_n);
                assert_int_equal(c.inner, t->inner);
                assert_int_equal(c.fields, t->fields);
        }
}

/* Every truncation of a valid request is either a valid message with fewer
 * fields or refused; never a read past the bytes given (ASan). */
static void test_truncations(void **state) {
        (void) state;
        static const uint8_t m[] = { 0x0a, 0x07, 0x0a, 0x00, 0x0a, 0x01, 'a', 0x0a, 0x00, 0x10, 0x96, 0x01,
                                     0x0a, 0x02, 0x0a, 0x00 };
        for (size_t n = 0; n <= sizeof(m); n++) {
                uint8_t *copy = malloc(n ? n : 1); /* exactly n bytes, so ASan sees an overread */
                assert_non_null(copy);
                memcpy(copy, m, n);
                struct mk_pb_counts c;
                int r = mk_pb_scan(copy, n, 1, 1, &c, NULL);
                if (r >= 0)
                        assert_true(c.fields <= 7);
                else
                        assert_int_equal(r, -EINVAL);
                free(copy);
        }
}

/* A request protobuf-c packs: the counts are what the decoded message holds. */
static void check_packed(size_t n_containers, size_t n_ids, size_t longest) {
        V1beta1__ContainerAllocateRequest *cs = calloc(n_containers + 1, sizeof(*cs));
        V1beta1__ContainerAllocateRequest **cps = calloc(n_containers + 1, sizeof(*cps));
        char **ids = calloc(longest + n_ids + 1, sizeof(*ids));
        assert_true(cs && cps && ids);
        for (size_t i = 0; i < longest + n_ids; i++)
                ids[i] = (char *) (i % 3 ? "GPU-0c1b" : "");
        for (size_t i = 0; i < n_containers; i++) {
                v1beta1__container_allocate_request__init(&cs[i]);
                cs[i].n_devices_ids = i == n_containers / 2 ? longest : n_ids;
                cs[i].devices_ids = ids;
                cps[i] = &cs[i];
        }
        V1beta1__AllocateRequest m = V1BETA1__ALLOCATE_REQUEST__INIT;
        m.n_container_requests = n_containers;
        m.container_requests = cps;
        size_t len = v1beta1__allocate_request__get_packed_size(&m);
        uint8_t *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        assert_int_equal(v1beta1__allocate_request__pack(&m, buf), len);
        struct mk_pb_counts c;
        assert_int_equal(mk_pb_scan(buf, len, 1, 1, &c, NULL), 0);
        V1beta1__AllocateRequest *d = v1beta1__allocate_request__unpack(NULL, len, buf);
        assert_non_null(d);
        size_t most = 0, all = d->n_container_requests;
        for (size_t i = 0; i < d->n_container_requests; i++) {
                size_t k = d->container_requests[i]->n_devices_ids;
                most = k > most ? k : most;
                all += k;
        }
        assert_int_equal(c.outer, d->n_container_requests);
        assert_int_equal(c.inner, most);
        assert_int_equal(c.fields, all);
        v1beta1__allocate_request__free_unpacked(d, NULL);
        free(buf);
        free(ids);
        free(cps);
        free(cs);
}

static void test_packed(void **state) {
        (void) state;
        check_packed(0, 0, 0);
        check_packed(1, 1, 1);
        check_packed(1, 0, 4097);
        check_packed(1025, 2, 5);
        check_packed(64, 16, 300);
}

/* 4 MB of empty entries, as the plugin's integration test sends: counted,
 * none kept (the point of scanning first). */
static void test_many(void **state) {
        (void) state;
        size_t n = 2000000;
        uint8_t *buf = malloc(2 * n + 8);
        assert_non_null(buf);
        /* one container of n - 4 empty IDs: tag, a 4-byte length, the IDs */
        size_t body = 2 * (n - 4);
        buf[0] = 0x0a;
        buf[1] = (uint8_t) (0x80 | (body & 0x7f));
        buf[2] = (uint8_t) (0x80 | ((body >> 7) & 0x7f));
        buf[3] = (uint8_t) (0x80 | ((body >> 14) & 0x7f));
        buf[4] = (uint8_t) ((body >> 21) & 0x7f);
        for (size_t i = 0; i < n - 4; i++) {
                buf[5 + 2 * i] = 0x0a;
                buf[6 + 2 * i] = 0x00;
        }
        struct mk_pb_counts c;
        assert_int_equal(mk_pb_scan(buf, 5 + body, 1, 1, &c, NULL), 0);
        assert_int_equal(c.outer, 1);
        assert_int_equal(c.inner, n - 4);
        assert_int_equal(c.fields, n - 3);
        free(buf);
}

/* A path of four fields, as the kubelet's PodResources List answer nests
 * them (pods 1, containers 3, device entries 2, device IDs 2): each level's
 * most per message, every field of every message opened. */
static void test_path(void **state) {
        (void) state;
        static const uint32_t path[] = { 1, 3, 2, 2 };
        /* pod { name "a", container { entry { "x", "y", "z" }, entry {} }, container {} }, pod {}, pod {} */
        static const uint8_t m[] = { 0x0a, 0x14, 0x0a, 0x01, 'a', 0x1a, 0x0d, 0x12, 0x09, 0x12, 0x01, 'x', 0x12,
                                     0x01, 'y', 0x12, 0x01, 'z', 0x12, 0x00, 0x1a, 0x00, 0x0a, 0x00, 0x0a, 0x00 };
        struct mk_pb_path_counts c;
        struct mk_error e = { 0 };
        assert_int_equal(mk_pb_scan_path(m, sizeof(m), path, 4, &c, &e), 0);
        assert_int_equal(c.most[0], 3);
        assert_int_equal(c.most[1], 2);
        assert_int_equal(c.most[2], 2);
        assert_int_equal(c.most[3], 3);
        assert_int_equal(c.fields, 3 + 3 + 2 + 3);
        /* the same bytes with the path cut short: the IDs' entries are not opened */
        assert_int_equal(mk_pb_scan_path(m, sizeof(m), path, 2, &c, &e), 0);
        assert_int_equal(c.most[0], 3);
        assert_int_equal(c.most[1], 2);
        assert_int_equal(c.most[2], 0);
        assert_int_equal(c.fields, 3 + 3);
        /* two of the path's fields, as mk_pb_scan counts them */
        struct mk_pb_counts two;
        assert_int_equal(mk_pb_scan(m, sizeof(m), 1, 3, &two, &e), 0);
        assert_int_equal(two.outer, 3);
        assert_int_equal(two.inner, 2);
        assert_int_equal(two.fields, 6);
        /* a container as a varint, two levels down */
        static const uint8_t bad[] = { 0x0a, 0x02, 0x18, 0x01 };
        assert_int_equal(mk_pb_scan_path(bad, sizeof(bad), path, 4, &c, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "field 3 at byte 2 has wire type 0, not a message"));
        /* the last field of the path is counted, never opened: "x" is no message */
        static const uint8_t leaf[] = { 0x0a, 0x03, 0x1a, 0x01, 'x' };
        assert_int_equal(mk_pb_scan_path(leaf, sizeof(leaf), path, 2, &c, &e), 0);
        assert_int_equal(mk_pb_scan_path(leaf, sizeof(leaf), path, 3, &c, &e), -EINVAL);
        assert_int_equal(mk_pb_scan_path(m, sizeof(m), path, 0, &c, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "a path of 0 fields"));
        static const uint32_t long_path[MK_PB_MAX_DEPTH + 1] = { 1 };
        assert_int_equal(mk_pb_scan_path(m, sizeof(m), long_path, MK_PB_MAX_DEPTH + 1, &c, &e), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_truncations),
                cmocka_unit_test(test_packed),
                cmocka_unit_test(test_many),
                cmocka_unit_test(test_path),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
