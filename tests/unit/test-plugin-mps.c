/* Unit tests for plugin/mps: the daemons a sharing.mps config needs (GPUs,
 * replicas, pinned memory limit total/replicas, thread percentage
 * 100/replicas), what upstream rejects (MIG devices, replicas over the
 * MPS client limit of the architecture), the paths under the MPS root, the
 * setup commands, Allocate's env and mounts, and the control client run
 * through base/spawn (a stand-in script records its environment and stdin). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/mps.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

/* Builds the resources of gpus under `config` (YAML), then the MPS plan. */
static int plan(const struct snap_gpu *gpus, int cc_major, enum mk_mig_strategy strat, const char *config,
                struct mk_mps_plan **ret, struct mk_error *e) {
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        for (size_t i = 0; i < s->n_gpus; i++) {
                s->gpus[i].cc_major = cc_major;
                s->gpus[i].cc_minor = 0;
        }
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = NULL;
        assert_int_equal(mk_plugin_config_parse(config, strlen(config), "c.yaml", &cfg, e), 0);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = strat;
        o.config = cfg;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        int r = mk_dp_resources_build(s, &o, &rs, e);
        if (r < 0)
                return r;
        return mk_mps_plan_build(s, rs, cfg, ret, e);
}

static const char *const mps4 = "version: v1\n"
                                "sharing:\n"
                                "  mps:\n"
                                "    resources:\n"
                                "      - name: nvidia.com/gpu\n"
                                "        replicas: 4\n";

static void test_plan(void **state) {
        (void) state;
        static const struct snap_gpu gpus[] = {{"a100", OFF, NULL}, {"a100-80", OFF, NULL}, {0}};
        struct mk_error e = {0};
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *p = NULL;
        assert_int_equal(plan(gpus, 8, MK_MIG_STRATEGY_NONE, mps4, &p, &e), 0);
        assert_int_equal(p->n, 1);
        const struct mk_mps_daemon *d = mk_mps_plan_find(p, "nvidia.com/gpu");
        assert_non_null(d);
        assert_int_equal(d->n_gpus, 2);
        assert_int_equal(d->gpus[0].replicas, 4);
        assert_int_equal(d->gpus[0].pinned_limit_mib, 40960 / 4);
        assert_int_equal(d->gpus[1].pinned_limit_mib, 81920 / 4);
        assert_int_equal(d->thread_percentage, 25);
        assert_string_equal(d->gpus[1].uuid, "GPU-00000001-0000-0000-0000-000000000000");
        _cleanup_free_ char *cmds = NULL;
        assert_int_equal(mk_mps_setup_commands(d, &cmds), 0);
        assert_string_equal(cmds, "set_default_device_pinned_mem_limit 0 10240M\n"
                                  "set_default_device_pinned_mem_limit 1 20480M\n"
                                  "set_default_active_thread_percentage 25\n");
        assert_null(mk_mps_plan_find(p, "nvidia.com/mig-1g.5gb"));

        /* Time-slicing: no daemon. */
        static const char *const ts = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                      "      - name: nvidia.com/gpu\n        replicas: 4\n";
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *q = NULL;
        assert_int_equal(plan(gpus, 8, MK_MIG_STRATEGY_NONE, ts, &q, &e), 0);
        assert_int_equal(q->n, 0);
        /* 3 replicas: 33 %. */
        static const char *const mps3 = "version: v1\nsharing:\n  mps:\n    resources:\n"
                                        "      - name: nvidia.com/gpu\n        replicas: 3\n";
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *t = NULL;
        assert_int_equal(plan(gpus, 8, MK_MIG_STRATEGY_NONE, mps3, &t, &e), 0);
        assert_int_equal(t->daemons[0].thread_percentage, 33);
        assert_int_equal(t->daemons[0].gpus[0].pinned_limit_mib, 40960 / 3);
}

static void test_rejected(void **state) {
        (void) state;
        static const struct snap_gpu gpus[] = {{"t4", OFF, NULL}, {0}};
        static const char *const many = "version: v1\nsharing:\n  mps:\n    resources:\n"
                                        "      - name: nvidia.com/gpu\n        replicas: 17\n";
        struct mk_error e = {0};
        struct mk_mps_plan *p = NULL;
        /* Pre-Volta: 16 clients. */
        assert_int_equal(plan(gpus, 6, MK_MIG_STRATEGY_NONE, many, &p, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "GPU 0 has 17 replicas, maximum allowed replicas exceeded (16 MPS clients"));
        assert_null(p);
        /* Volta and later: 48. */
        assert_int_equal(plan(gpus, 7, MK_MIG_STRATEGY_NONE, many, &p, &e), 0);
        p = mk_mps_plan_free(p);
        static const char *const over = "version: v1\nsharing:\n  mps:\n    resources:\n"
                                        "      - name: nvidia.com/gpu\n        replicas: 49\n";
        assert_int_equal(plan(gpus, 9, MK_MIG_STRATEGY_NONE, over, &p, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "(48 MPS clients"));
        assert_int_equal(mk_mps_max_clients(7, 0), 48);
        assert_int_equal(mk_mps_max_clients(6, 1), 16);

        /* MIG: refused by the resources already (single, mixed), as upstream. */
        static const struct snap_gpu mig[] = {{"a100", MIG, "1g.5gb*2"}, {0}};
        assert_int_equal(plan(mig, 8, MK_MIG_STRATEGY_SINGLE, mps4, &p, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "MPS sharing is not supported with MIG devices"));
        assert_int_equal(plan(mig, 8, MK_MIG_STRATEGY_MIXED, mps4, &p, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "mixed"));
        assert_null(p);
}

static void test_paths_and_allocate(void **state) {
        (void) state;
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL;
        assert_int_equal(mk_mps_path("/run/nvidia/mps", "nvidia.com/gpu", "pipe", &a), 0);
        assert_string_equal(a, "/run/nvidia/mps/nvidia.com/gpu/pipe");
        assert_int_equal(mk_mps_path("/run/nvidia/mps/", "nvidia.com/gpu", "log", &b), 0);
        assert_string_equal(b, "/run/nvidia/mps/nvidia.com/gpu/log");
        assert_int_equal(mk_mps_path("/run/nvidia/mps", "nvidia.com/gpu", "shm", &c), 0);
        assert_string_equal(c, "/run/nvidia/mps/shm");
        assert_int_equal(mk_mps_path("/run/nvidia/mps", NULL, MK_MPS_READY_FILE, &d), 0);
        assert_string_equal(d, "/run/nvidia/mps/.ready");
        char *x = NULL;
        assert_int_equal(mk_mps_path("/r", "../etc", "pipe", &x), -EINVAL);
        assert_null(x);

        struct mk_dp_response r = {0};
        assert_int_equal(mk_dp_response_set_env(&r, "NVIDIA_VISIBLE_DEVICES", "GPU-1"), 0);
        assert_int_equal(mk_mps_allocate("/run/nvidia/mps", "nvidia.com/gpu", &r), 0);
        assert_string_equal(mk_dp_response_env(&r, "CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu/pipe");
        assert_string_equal(mk_dp_response_env(&r, "NVIDIA_VISIBLE_DEVICES"), "GPU-1");
        assert_int_equal(r.n_mounts, 2);
        assert_string_equal(r.mounts[0].container_path, "/mps/nvidia.com/gpu/pipe");
        assert_string_equal(r.mounts[0].host_path, "/run/nvidia/mps/nvidia.com/gpu/pipe");
        assert_string_equal(r.mounts[1].container_path, "/dev/shm");
        assert_string_equal(r.mounts[1].host_path, "/run/nvidia/mps/shm");
        mk_dp_response_done(&r);
}

/* The control client: a stand-in on PATH prints its environment and stdin. */
static void test_control(void **state) {
        (void) state;
        const char *base = getenv("MIGKIT_TEST_TMP");
        _cleanup_free_ char *dir = NULL, *bin = NULL, *path = NULL;
        assert_true(asprintf(&dir, "%s/test-plugin-mps-%d", base ? base : "/tmp", (int) getpid()) > 0);
        struct mk_error e = {0};
        assert_int_equal(mk_mkdir_parents(dir, 0755, &e), 0);
        assert_true(asprintf(&bin, "%s/" MK_MPS_CONTROL, dir) > 0);
        static const char script[] = "#!/bin/sh\n"
                                     "echo \"args=$*\"\n"
                                     "echo \"pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY\"\n"
                                     "echo \"visible=${CUDA_VISIBLE_DEVICES-unset}\"\n"
                                     "cat\n"
                                     "[ \"$1\" != fail ] || { echo 'cannot connect' >&2; exit 1; }\n";
        assert_int_equal(mk_write_file_atomic(bin, script, strlen(script), 0755, &e), 0);
        const char *old = getenv("PATH");
        assert_true(asprintf(&path, "%s:%s", dir, old ? old : "/usr/bin:/bin") > 0);
        setenv("PATH", path, 1);
        setenv("CUDA_VISIBLE_DEVICES", "inherited", 1);
        _cleanup_free_ char *out = NULL;
        assert_int_equal(mk_mps_control("/root", "nvidia.com/gpu", NULL, "get_default_active_thread_percentage\n",
                                        NULL, &out, &e),
                         0);
        assert_string_equal(out, "args=\npipe=/root/nvidia.com/gpu/pipe log=/root/nvidia.com/gpu/log\n"
                                 "visible=unset\nget_default_active_thread_percentage\n");
        const char *args[] = {"-d", NULL};
        _cleanup_free_ char *out2 = NULL;
        assert_int_equal(mk_mps_control("/root", "nvidia.com/gpu", args, NULL, "GPU-a,GPU-b", &out2, &e), 0);
        assert_non_null(strstr(out2, "args=-d\n"));
        assert_non_null(strstr(out2, "visible=GPU-a,GPU-b\n"));
        const char *bad[] = {"fail", NULL};
        assert_int_equal(mk_mps_control("/root", "nvidia.com/gpu", bad, NULL, NULL, NULL, &e), -EIO);
        assert_non_null(strstr(e.msg, "exited with status 1: cannot connect"));
        unsetenv("CUDA_VISIBLE_DEVICES");
        setenv("PATH", old ? old : "/usr/bin:/bin", 1);
        (void) unlink(bin);
        (void) rmdir(dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plan),
                cmocka_unit_test(test_rejected),
                cmocka_unit_test(test_paths_and_allocate),
                cmocka_unit_test(test_control),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
