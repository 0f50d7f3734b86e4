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
                /* the rest of apimachinery's grammar: signed exponents, E and Ei, bare fractions */
                {"5e-1", 0, 500},     {"1E3", 0, 1000000},    {"1e+3", 0, 1000000}, {"1e-3", 0, 1},
                {"1e-4", 0, 1},       {"0e-18", 0, 0},        {"+2", 0, 2000},   {".5", 0, 500},
                {"1.", 0, 1000},      {"123456789e-6", 0, 123457}, {"1e15", 0, 1000000000000000000ull},
                {"1E", -ERANGE, 0},   {"1Ei", -ERANGE, 0},    {"0.001E", 0, 1000000000000000000ull},
                {"0.000000000000000001Ei", 0, 1153},        {"1e18", -ERANGE, 0}, {"1e-19", -ERANGE, 0},
                {"1e", -EINVAL, 0},   {"1e+", -EINVAL, 0},    {"1e+-3", -EINVAL, 0}, {"1e3.5", -EINVAL, 0},
                {"1ei", -EINVAL, 0},  {"1 ", -EINVAL, 0},     {" 1", -EINVAL, 0}, {"1Qi", -EINVAL, 0},
                {"-1Gi", -EINVAL, 0}, {"1KI", -EINVAL, 0},    {"1K", -EINVAL, 0},
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

static void test_name_rules(void **state) {
        (void) state;
        char l63[64], l64[65], s253[254], s254[255];
        memset(l63, 'a', 63), l63[63] = 0;
        memset(l64, 'a', 64), l64[64] = 0;
        memset(s253, 'a', 253), s253[253] = 0;
        s253[100] = '.';
        memset(s254, 'a', 254), s254[254] = 0;
        static const struct {
                const char *s;
                int label, subdomain;
        } cases[] = {
                {"a", 0, 0},           {"p1", 0, 0},          {"my-pod-0", 0, 0},    {"0", 0, 0},
                {"a.b", -EINVAL, 0},   {"node-1.example.com", -EINVAL, 0},
                {"", -EINVAL, -EINVAL}, {".", -EINVAL, -EINVAL}, {"..", -EINVAL, -EINVAL},
                {"../x", -EINVAL, -EINVAL}, {"p1;x", -EINVAL, -EINVAL}, {"a/b", -EINVAL, -EINVAL},
                {"A", -EINVAL, -EINVAL}, {"-a", -EINVAL, -EINVAL}, {"a-", -EINVAL, -EINVAL},
                {"a.-b", -EINVAL, -EINVAL}, {"a-.b", -EINVAL, -EINVAL}, {".a", -EINVAL, -EINVAL},
                {"a.", -EINVAL, -EINVAL}, {"a..b", -EINVAL, -EINVAL}, {"a b", -EINVAL, -EINVAL},
                {"a%2f", -EINVAL, -EINVAL}, {"a?b", -EINVAL, -EINVAL}, {"a#b", -EINVAL, -EINVAL},
                {"\xc3\xa9", -EINVAL, -EINVAL}, {"a_b", -EINVAL, -EINVAL},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *why = "unset";
                int r = mk_kube_name_check_label(cases[i].s, &why);
                if (r != cases[i].label || (r < 0) != (why != NULL))
                        fail_msg("label '%s': %d (%s), want %d", cases[i].s, r, why ? why : "-", cases[i].label);
                why = "unset";
                r = mk_kube_name_check_subdomain(cases[i].s, &why);
                if (r != cases[i].subdomain || (r < 0) != (why != NULL))
                        fail_msg("subdomain '%s': %d (%s), want %d", cases[i].s, r, why ? why : "-",
                                 cases[i].subdomain);
        }
        assert_int_equal(mk_kube_name_check_label(l63, NULL), 0);
        assert_int_equal(mk_kube_name_check_label(l64, NULL), -EINVAL);
        assert_int_equal(mk_kube_name_check_subdomain(l64, NULL), 0);
        assert_int_equal(mk_kube_name_check_subdomain(s253, NULL), 0);
        assert_int_equal(mk_kube_name_check_subdomain(s254, NULL), -EINVAL);
        assert_int_equal(mk_kube_name_check_subdomain(NULL, NULL), -EINVAL);
}

static void test_path_segment(void **state) {
        (void) state;
        char buf[32];
        assert_int_equal(mk_kube_path_segment("node-1.x_y~", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "node-1.x_y~");
        assert_int_equal(mk_kube_path_segment("a/b;c?d#e%f g", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "a%2Fb%3Bc%3Fd%23e%25f%20g");
        assert_int_equal(mk_kube_path_segment("", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "");
        assert_int_equal(mk_kube_path_segment("abc", buf, 3), -ENOBUFS);
        assert_int_equal(mk_kube_path_segment("abc", buf, 4), 0);
        assert_int_equal(mk_kube_path_segment("a/", buf, 4), -ENOBUFS);
}

static void test_core_path(void **state) {
        (void) state;
        char buf[MK_K8S_PATH_MAX];
        assert_int_equal(mk_kube_core_path("ns-1", "pods", "p.0", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "/api/v1/namespaces/ns-1/pods/p.0");
        assert_int_equal(mk_kube_core_path(NULL, "nodes", "a/b", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "/api/v1/nodes/a%2Fb");
        assert_int_equal(mk_kube_core_path("..", "pods", "x", buf, sizeof(buf)), -EINVAL);
        assert_int_equal(mk_kube_core_path("ns", "pods", ".", buf, sizeof(buf)), -EINVAL);
        assert_int_equal(mk_kube_core_path(NULL, "nodes", "", buf, sizeof(buf)), -EINVAL);
        assert_int_equal(mk_kube_core_path(NULL, "nodes", "n", buf, 15), -ENOBUFS);
        assert_int_equal(mk_kube_core_path(NULL, "nodes", "n", buf, 16), 0);
        char big[MK_K8S_NAME_MAX];
        memset(big, '/', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        assert_int_equal(mk_kube_core_path(big, "pods", big, buf, sizeof(buf)), 0);
}

static json_t *load_nul(const char *text) {
        json_error_t je;
        json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
        if (!j)
                fail_msg("%s: %s", text, je.text);
        return j;
}

/* Issue 27: a NUL where migkit reads makes the object malformed (with the
 * field's path); one in an annotation that is not ours does not; the
 * accessors never return a truncated string. */
static void test_object_nul(void **state) {
        static const struct {
                const char *json, *where; /* NULL: no NUL we read */
        } cases[] = {
                {"{\"metadata\":{\"name\":\"p\"}}", NULL},
                {"{\"metadata\":{\"annotations\":{\"note\":\"a\\u0000b\"}}}", NULL},
                {"{\"metadata\":{\"annotations\":{\"migkit.io/mig-reservation\":\"a\\u0000b\"}}}",
                 "metadata.annotations.migkit.io/mig-reservation"},
                {"{\"metadata\":{\"annotations\":{\"nvidia.com/vgpu-mode\":\"\\u0000\"}}}",
                 "metadata.annotations.nvidia.com/vgpu-mode"},
                {"{\"metadata\":{\"labels\":{\"note\":\"a\\u0000\"}}}", "metadata.labels.note"},
                {"{\"spec\":{\"containers\":[{\"name\":\"c\"},{\"args\":[\"x\",\"\\u0000\"]}]}}",
                 "spec.containers[1].args[1]"},
                /* "annotations" elsewhere than the object's metadata is read as any field */
                {"{\"spec\":{\"annotations\":{\"note\":\"\\u0000\"}}}", "spec.annotations.note"},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                json_t *j = load_nul(cases[i].json);
                char where[128] = "x";
                bool has = mk_kube_object_has_nul(j, where, sizeof(where));
                if (has != !!cases[i].where || (has && !streq(where, cases[i].where)))
                        fail_msg("%s: %d '%s'", cases[i].json, has, where);
                assert_int_equal(mk_kube_object_has_nul(j, NULL, 0), has);
                json_decref(j);
        }
        char tiny[8];
        json_t *j = load_nul("{\"metadata\":{\"annotations\":{\"migkit.io/mig-binds\":\"\\u0000\"}}}");
        assert_true(mk_kube_object_has_nul(j, tiny, sizeof(tiny)));
        assert_true(strlen(tiny) < sizeof(tiny));
        assert_null(mk_kube_annotation(j, "migkit.io/mig-binds"));
        json_decref(j);
        j = load_nul("{\"metadata\":{\"name\":\"a\\u0000b\",\"labels\":{\"l\":\"v\\u0000\"},\"namespace\":\"ns\"}}");
        assert_null(mk_kube_meta(j, "name"));
        assert_null(mk_kube_label(j, "l"));
        assert_string_equal(mk_kube_meta(j, "namespace"), "ns");
        json_decref(j);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_accessors),
                cmocka_unit_test(test_quantity),
                cmocka_unit_test(test_pod_resource_requests),
                cmocka_unit_test(test_name_rules),
                cmocka_unit_test(test_path_segment),
                cmocka_unit_test(test_core_path),
                cmocka_unit_test(test_object_nul),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
