/* Unit tests for plugin/soft: the Allocate items of a soft slice container
 * as data (envs, mounts, the CUDA_DISABLE_CONTROL opt-out), the container
 * of a pod by reservation index, and the refused slices. */
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
#include "plugin/allocate.h"
#include "plugin/dynamic/soft.h"
#include "vgpunode/dirs.h"

static const struct mk_dp_mount *mount_at(const struct mk_dp_response *r, const char *container_path) {
        for (size_t i = 0; i < r->n_mounts; i++)
                if (streq(r->mounts[i].container_path, container_path))
                        return &r->mounts[i];
        return NULL;
}

static void test_response(void **state) {
        (void) state;
        static const struct mk_vgpu_slice sl[] = {{"GPU-a", 8000, 30}, {"GPU-b", 1024, 0}};
        struct mk_dp_soft_options o = {.root = "/var/lib/mk"};
        struct mk_dp_response r = {0};
        struct mk_error e = {0};
        assert_int_equal(mk_dp_response_set_env(&r, "NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"), 0);
        assert_int_equal(mk_dp_soft_response(sl, 2, "/var/lib/mk/containers/u_1", false, &o, &r, &e), 0);
        static const char *const envs[][2] = {
                {"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"},
                {"CUDA_DEVICE_MEMORY_LIMIT_0", "8000m"},
                {"CUDA_DEVICE_SM_LIMIT_0", "30"},
                {"CUDA_DEVICE_MEMORY_LIMIT_1", "1024m"},
                {"CUDA_DEVICE_SM_LIMIT_1", "0"},
                {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/usr/local/vgpu/migkit-vgpu.cache"},
        };
        assert_int_equal(r.n_envs, ELEMENTSOF(envs));
        for (size_t i = 0; i < ELEMENTSOF(envs); i++) {
                assert_string_equal(r.envs[i].key, envs[i][0]);
                assert_string_equal(r.envs[i].value, envs[i][1]);
        }
        assert_int_equal(r.n_mounts, 3);
        const struct mk_dp_mount *m = mount_at(&r, "/usr/local/vgpu");
        assert_non_null(m);
        assert_string_equal(m->host_path, "/var/lib/mk/containers/u_1");
        assert_false(m->read_only);
        m = mount_at(&r, "/usr/lib/migkit/libmigkit-vgpu.so");
        assert_non_null(m);
        assert_string_equal(m->host_path, "/var/lib/mk/libmigkit-vgpu.so");
        assert_true(m->read_only);
        m = mount_at(&r, "/etc/ld.so.preload");
        assert_non_null(m);
        assert_string_equal(m->host_path, "/var/lib/mk/ld.so.preload");
        assert_true(m->read_only);
        mk_dp_response_done(&r);

        /* Opt-out: everything but the preload; an explicit library path; the default root. */
        struct mk_dp_soft_options o2 = {.library = "/usr/lib/migkit/libmigkit-vgpu.so"};
        assert_int_equal(mk_dp_soft_response(sl, 1, "/d", true, &o2, &r, &e), 0);
        assert_int_equal(r.n_mounts, 2);
        assert_null(mount_at(&r, "/etc/ld.so.preload"));
        assert_string_equal(mount_at(&r, "/usr/lib/migkit/libmigkit-vgpu.so")->host_path,
                            "/usr/lib/migkit/libmigkit-vgpu.so");
        assert_string_equal(mk_dp_response_env(&r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "8000m");
        assert_null(mk_dp_response_env(&r, "CUDA_DEVICE_MEMORY_LIMIT_1"));
        mk_dp_response_done(&r);
        struct mk_dp_soft_options o3 = {0};
        assert_int_equal(mk_dp_soft_response(sl, 1, "/d", false, &o3, &r, &e), 0);
        assert_string_equal(mount_at(&r, "/etc/ld.so.preload")->host_path, MK_VGPU_DEFAULT_ROOT "/ld.so.preload");
        mk_dp_response_done(&r);

        /* Refused: no slice, too many, 0 MiB, cores over 100. */
        struct mk_vgpu_slice bad[MK_VGPU_MAX_DEVICES + 1];
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                bad[i] = (struct mk_vgpu_slice) {"GPU-x", 1, 0};
        assert_int_equal(mk_dp_soft_response(bad, 0, "/d", false, &o, &r, &e), -EINVAL);
        assert_int_equal(mk_dp_soft_response(bad, ELEMENTSOF(bad), "/d", false, &o, &r, &e), -EINVAL);
        bad[0].memory_mib = 0;
        assert_int_equal(mk_dp_soft_response(bad, 1, "/d", false, &o, &r, &e), -EINVAL);
        bad[0] = (struct mk_vgpu_slice) {"GPU-x", 1, 101};
        assert_int_equal(mk_dp_soft_response(bad, 1, "/d", false, &o, &r, &e), -EINVAL);
        assert_int_equal(r.n_envs + r.n_mounts, 0);
}

static void test_disable_control(void **state) {
        (void) state;
        json_error_t je;
        json_t *pod = json_loads(
                "{\"spec\":{\"initContainers\":[{\"name\":\"init\",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\","
                "\"value\":\"true\"}]}],\"containers\":[{\"name\":\"a\",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\","
                "\"value\":\"TRUE\"}]},{\"name\":\"b\",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\",\"value\":\"1\"}]},"
                "{\"name\":\"c\",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\",\"valueFrom\":{\"configMapKeyRef\":{}}}]},"
                "{\"name\":\"d\",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\",\"value\":\"true\"},"
                "{\"name\":\"CUDA_DISABLE_CONTROL\",\"value\":\"false\"}]},{\"name\":\"e\"}]}}",
                0, &je);
        assert_non_null(pod);
        static const struct {
                unsigned index;
                const char *name;
                bool disabled;
        } t[] = {{0, "init", true}, {1, "a", true}, {2, "b", false}, {3, "c", false}, {4, "d", false}, {5, "e", false}};
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                const json_t *c = mk_dp_pod_container(pod, t[i].index);
                assert_non_null(c);
                assert_string_equal(json_string_value(json_object_get(c, "name")), t[i].name);
                assert_int_equal(mk_dp_soft_control_disabled(pod, t[i].index), t[i].disabled);
        }
        assert_null(mk_dp_pod_container(pod, 6));
        assert_false(mk_dp_soft_control_disabled(pod, 6));
        assert_false(mk_dp_soft_control_disabled(NULL, 0));
        json_decref(pod);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_response),
                cmocka_unit_test(test_disable_control),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
