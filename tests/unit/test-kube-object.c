/* Unit tests for kube/object: metadata, annotation and label accessors,
 * Kubernetes quantities, and a pod's CPU and memory requests as
 * kube-scheduler counts them. */
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
#include "kube/object.h"

static json_t *load(const char *text) {
        json_error_t je;
        json_t *j = json_loads(text, 0, &je);
        if (!j)
                fail_msg("bad test object: %s", je.text);
        return j;
}

static void test_accessors(void **state) {
        (void) state;
        json_t *o = load("{\"metadata\":{\"name\":\"n1\",\"uid\":\"u\",\"generation\":3,"
                         "\"annotations\":{\"a\":\"1\",\"n\":2},\"labels\":{\"l\":\"x\"}}}");
        assert_string_equal(mk_kube_meta(o, "name"), "n1");
        assert_string_equal(mk_kube_meta(o, "uid"), "u");
        assert_null(mk_kube_meta(o, "generation")); /* not a string */
        assert_null(mk_kube_meta(o, "namespace"));
        assert_string_equal(mk_kube_annotation(o, "a"), "1");
        assert_null(mk_kube_annotation(o, "n"));
        assert_null(mk_kube_annotation(o, "l"));
        assert_string_equal(mk_kube_label(o, "l"), "x");
        assert_null(mk_kube_label(o, "a"));
        json_decref(o);
        /* Missing pieces and non-objects answer NULL. */
        o = load("{\"metadata\":[]}");
        assert_null(mk_kube_meta(o, "name"));
        assert_null(mk_kube_annotation(o, "a"));
        json_decref(o);
        assert_null(mk_kube_meta(NULL, "name"));
        assert_null(mk_kube_annotation(NULL, "a"));
        assert_null(mk_kube_label(NULL, "a"));
}

static void test_quantity(void **state) {
        (void) state;
        static const struct {
                const char *s;
                int r;
                uint64_t v;
        } cases[] = {
                {"1", 0, 1000},       {"500m", 0, 500},       {"1.5", 0, 1500},  {"2k", 0, 2000000},
                {"1Ki", 0, 1024000},  {"1Gi", 0, 1073741824000ull}, {"1e3", 0, 1000000}, {"0.0001", 0, 1},
                {"", -EINVAL, 0},     {"abc", -EINVAL, 0},    {"1x", -EINVAL, 0}, {"-1", -EINVAL, 0},
                {"99999999999999999999", -ERANGE, 0},         {".", -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = 0;
                int r = mk_quantity_parse_milli(cases[i].s, &v);
                if (r != cases[i].r || (r == 0 && v != cases[i].v))
                        fail_msg("'%s': %d %llu, want %d %llu", cases[i].s, r, (unsigned long long) v, cases[i].r,
                                 (unsigned long long) cases[i].v);
        }
}

static void test_pod_resource_requests(void **state) {
        (void) state;
        /* Containers add up; an init container counts when it asks more;
         * requests win over limits; integers and garbage count 0. */
        json_t *p = load("{\"spec\":{\"containers\":["
                         "{\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"},\"limits\":{\"cpu\":\"4\"}}},"
                         "{\"resources\":{\"limits\":{\"cpu\":\"1\",\"memory\":\"512Mi\"}}},"
                         "{\"resources\":{\"requests\":{\"cpu\":2,\"memory\":\"lots\"}}}],"
                         "\"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"3\",\"memory\":\"1Mi\"}}}]}}");
        uint64_t cpu = 0, mem = 0;
        mk_pod_resource_requests(p, &cpu, &mem);
        assert_int_equal(cpu, 3000);
        assert_int_equal(mem, (1ull << 30) + (512ull << 20));
        const json_t *c0 = json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0);
        assert_int_equal(mk_kube_container_request(c0, "cpu"), 500);
        assert_int_equal(mk_kube_container_request(c0, "nvidia.com/gpu"), 0);
        json_decref(p);
        p = load("{}");
        mk_pod_resource_requests(p, &cpu, &mem);
        assert_int_equal(cpu, 0);
        assert_int_equal(mem, 0);
        json_decref(p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_accessors),
                cmocka_unit_test(test_quantity),
                cmocka_unit_test(test_pod_resource_requests),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
