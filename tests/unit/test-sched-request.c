/* Unit tests for sched/request: a pod's GPU request (resource names from
 * the config, HAMi's annotations, limits and their errors) and the
 * GPU-type filter. */
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

#include "base/error.h"
#include "base/macro.h"
#include "sched/request.h"
#include "spec/sched-config.h"
#include "sched-fixtures.h"

static void test_pod_request(void **state) {
        (void) state;
        struct mk_sched_config *cfg = NULL;
        assert_int_equal(mk_sched_config_load(NULL, &cfg, NULL), 0);
        struct mk_pod_request r;
        json_t *p = pod_json("u1",
                             "{\"limits\":{\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpumem\":\"8000\","
                             "\"nvidia.com/gpucores\":30},\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}",
                             "\"nvidia.com/vgpu-mode\":\"mig\",\"migkit.io/mig-variant\":\"+me\","
                             "\"hami.io/node-scheduler-policy\":\"spread\",\"nvidia.com/use-gputype\":\"a100, h100\"");
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_int_equal(r.n_containers, 1);
        assert_int_equal(r.containers[0].gpus, 2);
        assert_int_equal(r.containers[0].mem_mib, 8000);
        assert_int_equal(r.containers[0].cores_percent, 30);
        assert_true(r.mode_named);
        assert_true(r.allow_mig);
        assert_false(r.allow_soft);
        assert_string_equal(r.variant, "+me");
        assert_string_equal(r.node_policy, "spread");
        assert_int_equal(r.fit_node_policy, MK_FIT_SPREAD); /* read once, as the fits take it */
        assert_int_equal(r.fit_gpu_policy, MK_FIT_SPREAD);  /* none: spread */
        assert_int_equal(r.cpu_milli, 500);
        assert_int_equal(r.memory_bytes, 1073741824ull);
        assert_true(mk_pod_request_gpu_type_ok(&r, "NVIDIA A100-SXM4-40GB"));
        assert_true(mk_pod_request_gpu_type_ok(&r, "NVIDIA H100 80GB HBM3"));
        assert_false(mk_pod_request_gpu_type_ok(&r, "NVIDIA A30"));
        json_decref(p);
        /* Memory without a count: one GPU (HAMi's default); hami-core: soft slices only. */
        p = pod_json("u2", "{\"limits\":{\"nvidia.com/gpumem-percentage\":\"50\"}}",
                     "\"nvidia.com/vgpu-mode\":\"hami-core\",\"nvidia.com/nouse-gputype\":\"A30\"");
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_int_equal(r.n_containers, 1);
        assert_int_equal(r.containers[0].gpus, 1);
        assert_int_equal(r.containers[0].mem_percent, 50);
        assert_false(r.allow_mig);
        assert_true(r.allow_soft);
        assert_false(mk_pod_request_gpu_type_ok(&r, "NVIDIA A30"));
        assert_int_equal(r.fit_node_policy, MK_FIT_BINPACK); /* none: binpack */
        json_decref(p);
        /* A policy that names none takes the default; case does not matter. */
        p = pod_json("u2b", "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}",
                     "\"hami.io/node-scheduler-policy\":\"fastest\",\"hami.io/gpu-scheduler-policy\":\"BINPACK\"");
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_int_equal(r.fit_node_policy, MK_FIT_BINPACK);
        assert_int_equal(r.fit_gpu_policy, MK_FIT_BINPACK);
        json_decref(p);
        /* No GPU at all. */
        p = pod_json("u3", "{\"limits\":{\"cpu\":\"1\"}}", NULL);
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_int_equal(r.n_containers, 0);
        assert_false(r.mode_named);
        assert_true(r.allow_mig && r.allow_soft); /* no mode: the scheduler chooses */
        json_decref(p);
        /* Both named (HAMi's substring rule); an unknown mode allows neither. */
        p = pod_json("u5", "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}", "\"nvidia.com/vgpu-mode\":\"mig,hami-core\"");
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_true(r.mode_named && r.allow_mig && r.allow_soft);
        json_decref(p);
        p = pod_json("u6", "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}", "\"nvidia.com/vgpu-mode\":\"mps\"");
        assert_int_equal(mk_pod_request_parse(p, cfg, &r, NULL), 0);
        assert_false(r.allow_mig || r.allow_soft);
        json_decref(p);
        static const char *const bad[] = {
                "{\"limits\":{\"nvidia.com/gpumem\":\"1.5\"}}",
                "{\"limits\":{\"nvidia.com/gpumem-percentage\":\"101\"}}",
                "{\"limits\":{\"nvidia.com/gpu\":\"17\"}}",
                "{\"limits\":{\"nvidia.com/gpu\":\"x\"}}",
                "{\"limits\":{\"nvidia.com/gpu\":[1]}}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct mk_error e = {0};
                p = pod_json("u4", bad[i], NULL);
                assert_int_equal(mk_pod_request_parse(p, cfg, &r, &e), -EINVAL);
                if (!strstr(e.field, "container 'c'"))
                        fail_msg("%s: field '%s'", bad[i], e.field);
                json_decref(p);
        }
        mk_sched_config_free(cfg);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pod_request),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
