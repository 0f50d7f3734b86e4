/* Unit tests for manager/: the pure rules of the state machine as tables:
 * which deploy labels get paused, how they are restored (only those still
 * paused by us; never created, never over another controller's value), the
 * paused-labels annotation, which pods count as GPU clients, the retry
 * backoff and the state names. The loop end to end, against a real
 * apiserver, is tests/integration/test-manager.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/macro.h"
#include "manager/manager.h"

static json_t *parse(const char *s) {
        json_error_t err;
        json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err); /* as the apiserver's data */
        if (!j)
                fail_msg("bad test JSON '%s': %s", s, err.text);
        return j;
}

static void assert_json(const json_t *got, const char *want) {
        json_t *w = parse(want);
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        char *ws = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS);
        if (!json_equal((json_t *) got, w))
                fail_msg("got  %s\nwant %s", g ? g : "(null)", ws ? ws : "(null)");
        free(g);
        free(ws);
        json_decref(w);
}

static void test_labels_to_pause(void **state) {
        static const struct {
                const char *labels, *want;
        } rows[] = {
                {"{}", "[]"},
                {"null", "[]"},
                /* exactly "true": other values (false, another controller's pause) are left alone */
                {"{\"nvidia.com/gpu.deploy.device-plugin\":\"true\",\"nvidia.com/gpu.deploy.dcgm\":\"false\","
                 "\"nvidia.com/gpu.deploy.gpu-feature-discovery\":\"paused-for-driver-upgrade\","
                 "\"nvidia.com/gpu.deploy.dcgm-exporter\":\"true\",\"nvidia.com/gpu.deploy.nvsm\":\"True\"}",
                 "[\"nvidia.com/gpu.deploy.dcgm-exporter\",\"nvidia.com/gpu.deploy.device-plugin\"]"},
                /* our own DaemonSet's selector and unrelated labels are never paused */
                {"{\"nvidia.com/gpu.deploy.mig-manager\":\"true\",\"nvidia.com/gpu.present\":\"true\","
                 "\"nvidia.com/gpu.deploy.client\":\"true\"}",
                 "[\"nvidia.com/gpu.deploy.client\"]"},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                json_t *l = parse(rows[i].labels);
                json_t *got = mk_manager_labels_to_pause(l);
                assert_json(got, rows[i].want);
                json_decref(got);
                json_decref(l);
        }
}

static void test_restore_patch(void **state) {
        static const struct {
                const char *labels, *paused, *want;
        } rows[] = {
                /* only labels still paused by us go back to true; the annotation goes */
                {"{\"nvidia.com/gpu.deploy.device-plugin\":\"paused-for-mig-change\","
                 "\"nvidia.com/gpu.deploy.dcgm-exporter\":\"paused-for-driver-upgrade\"}",
                 "[\"nvidia.com/gpu.deploy.device-plugin\",\"nvidia.com/gpu.deploy.dcgm-exporter\"]",
                 "{\"labels\":{\"nvidia.com/gpu.deploy.device-plugin\":\"true\"},"
                 "\"annotations\":{\"migkit.io/paused-labels\":null}}"},
                /* a label removed meanwhile is not created again */
                {"{}", "[\"nvidia.com/gpu.deploy.device-plugin\"]",
                 "{\"labels\":{},\"annotations\":{\"migkit.io/paused-labels\":null}}"},
                /* a paused label we did not record is not ours to restore */
                {"{\"nvidia.com/gpu.deploy.dcgm\":\"paused-for-mig-change\"}", "[]",
                 "{\"labels\":{},\"annotations\":{\"migkit.io/paused-labels\":null}}"},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                json_t *l = parse(rows[i].labels), *p = parse(rows[i].paused);
                json_t *got = mk_manager_restore_patch(l, p);
                assert_json(got, rows[i].want);
                json_decref(got);
                json_decref(l);
                json_decref(p);
        }
}

static void test_paused_annotation(void **state) {
        static const struct {
                const char *annotations, *want;
        } rows[] = {
                {"{}", "[]"},
                {"null", "[]"},
                {"{\"migkit.io/paused-labels\":\"[\\\"nvidia.com/gpu.deploy.dcgm\\\"]\"}",
                 "[\"nvidia.com/gpu.deploy.dcgm\"]"},
                /* garbage, other types and foreign label names are dropped */
                {"{\"migkit.io/paused-labels\":\"not json\"}", "[]"},
                {"{\"migkit.io/paused-labels\":\"{}\"}", "[]"},
                {"{\"migkit.io/paused-labels\":\"[1,\\\"kubernetes.io/os\\\",\\\"nvidia.com/gpu.deploy.nvsm\\\"]\"}",
                 "[\"nvidia.com/gpu.deploy.nvsm\"]"},
                /* issue 27: a NUL byte in the value is invalid JSON, not the end
                 * of a shorter list (read cut there, this was [dcgm]); nor is a
                 * NUL inside a name kept */
                {"{\"migkit.io/paused-labels\":\"[\\\"nvidia.com/gpu.deploy.dcgm\\\"]\\u0000[]\"}", "[]"},
                {"{\"migkit.io/paused-labels\":\"[\\\"nvidia.com/gpu.deploy.dcgm\\\\u0000x\\\"]\"}", "[]"},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                json_t *a = parse(rows[i].annotations);
                json_t *got = mk_manager_paused_from_annotations(a);
                assert_json(got, rows[i].want);
                json_decref(got);
                json_decref(a);
        }
}

static void test_gpu_pod(void **state) {
        static const struct {
                const char *pod;
                bool want;
        } rows[] = {
                {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]}}", false},
                /* user workloads are never waited for, whatever they request */
                {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"resources\":"
                 "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
                 false},
                {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"resources\":"
                 "{\"requests\":{\"nvidia.com/mig-1g.5gb\":\"1\",\"cpu\":\"1\"}}}]}}",
                 false},
                /* a finished component pod is gone already */
                {"{\"metadata\":{\"name\":\"dp\",\"labels\":{\"app\":\"gpu-feature-discovery\"}},"
                 "\"status\":{\"phase\":\"Succeeded\"},\"spec\":{\"containers\":[{}]}}",
                 false},
                /* the GPU operator's components, by app label */
                {"{\"metadata\":{\"name\":\"dp\",\"labels\":{\"app\":\"nvidia-device-plugin-daemonset\"}},"
                 "\"spec\":{\"containers\":[{}]}}",
                 true},
                {"{\"metadata\":{\"name\":\"x\",\"labels\":{\"app\":\"nginx\"}},\"spec\":{\"containers\":[{}]}}", false},
                /* never ourselves */
                {"{\"metadata\":{\"name\":\"me\",\"labels\":{\"app\":\"nvidia-dcgm\"}},\"spec\":{\"containers\":[{}]}}",
                 false},
                {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"resources\":"
                 "{\"limits\":{\"example.com/nvidia.com\":\"1\"}}}]}}",
                 false},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                json_t *p = parse(rows[i].pod);
                bool got = mk_manager_pod_is_gpu_client(p, "me");
                if (got != rows[i].want)
                        fail_msg("row %zu: got %d want %d for %s", i, got, rows[i].want, rows[i].pod);
                json_decref(p);
        }
}

static void test_backoff(void **state) {
        static const struct {
                unsigned failures, initial, max, want;
        } rows[] = {
                {1, 10, 300, 10}, {2, 10, 300, 20}, {3, 10, 300, 40},  {5, 10, 300, 160},
                {6, 10, 300, 300}, {60, 10, 300, 300}, {1000, 10, 300, 300}, {1, 0, 5, 1},
                {4, 2, 4, 4},
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                unsigned got = mk_manager_backoff_s(rows[i].failures, rows[i].initial, rows[i].max);
                if (got != rows[i].want)
                        fail_msg("backoff(%u, %u, %u) = %u, want %u", rows[i].failures, rows[i].initial,
                                 rows[i].max, got, rows[i].want);
        }
}

static void test_states(void **state) {
        static const char *const names[] = {"pending", "rebooting", "success", "failed"};
        (void) state;
        for (int i = 0; i < _MK_MIG_STATE_MAX; i++) {
                assert_string_equal(mk_mig_state_to_string((enum mk_mig_state) i), names[i]);
                assert_int_equal(mk_mig_state_from_string(names[i]), i);
        }
        assert_int_equal(mk_mig_state_from_string("Success"), _MK_MIG_STATE_INVALID);
        assert_int_equal(mk_mig_state_from_string(NULL), _MK_MIG_STATE_INVALID);
        assert_null(mk_mig_state_to_string(_MK_MIG_STATE_MAX));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_labels_to_pause), cmocka_unit_test(test_restore_patch),
                cmocka_unit_test(test_paused_annotation), cmocka_unit_test(test_gpu_pod),
                cmocka_unit_test(test_backoff), cmocka_unit_test(test_states),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
