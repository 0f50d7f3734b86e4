/* Unit tests for host/: the GPU client lists (names, nvidia-mig-manager's
 * clients file), the container runtime output parsers (canned output in,
 * ids out), the reboot marker and the reboot-once rule as a table. Stopping
 * and starting real units is in tests/integration/test-service.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "host/clients.h"
#include "host/reboot.h"

/* Every cmocka test takes a `void **state` that most of these do not use. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* A fresh directory under MIGKIT_TEST_TMP (or /tmp) in buf. */
static void tmp_dir(char *buf, size_t size) {
        const char *base = secure_getenv("MIGKIT_TEST_TMP");
        if (base && *base)
                (void) mkdir(base, 0755);
        snprintf(buf, size, "%s/test-host.XXXXXX", base && *base ? base : "/tmp");
        assert_non_null(mkdtemp(buf));
}

static char *join_ids(char **ids) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        for (size_t i = 0; ids[i]; i++)
                assert_int_equal(mk_buf_printf(&b, "%s%s", i ? "," : "", ids[i]), 0);
        char *s = mk_buf_take(&b);
        assert_non_null(s);
        return s;
}

/* ---- client lists ---- */

static void test_names(void **state) {
        static const struct {
                const char *s;
                bool unit, image;
        } cases[] = {
                {"kubelet.service", true, true},
                {"nv_peer_mem.service", true, true},
                {"getty@tty1.service", true, true},
                {"a\\x2db.mount", true, true},
                {"k8s.target", true, true},
                {"kubelet", false, true},
                {"kubelet.services", false, true},
                {".service", false, true},
                {"-.mount", false, false},
                {"--now.service", false, false},
                {"a b.service", false, false},
                {"a/b.service", false, true},
                {"nvcr.io/nvidia/k8s-device-plugin", false, true},
                {"", false, false},
                {"tab\t", false, false},
                {"\xc3\xa9.service", false, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                if (mk_unit_name_valid(cases[i].s) != cases[i].unit)
                        fail_msg("unit name '%s': valid = %d, want %d", cases[i].s, !cases[i].unit, cases[i].unit);
                if (mk_image_name_valid(cases[i].s) != cases[i].image)
                        fail_msg("image name '%s': valid = %d, want %d", cases[i].s, !cases[i].image, cases[i].image);
        }
}



/* nvidia-mig-manager's clients file: the units it lists (or none), no
 * images, the default timeouts; other keys ignored as upstream does. */
static void test_clients_file(void **state) {
        static const struct {
                const char *name, *text;
                int r;
                const char *want; /* units joined, or a message part */
        } cases[] = {
                {"upstream", "version: v1\nsystemd-services:\n  - nvsm.service\n  - dcgm.service\n", 0,
                 "nvsm.service,dcgm.service"},
                {"no list", "version: v1\n", 0, ""},
                {"null list", "version: v1\nsystemd-services:\n", 0, ""},
                {"other keys", "version: v1\nfoo: bar\nsystemd-services: [a.service]\n", 0, "a.service"},
                {"empty file", "", 0, ""},
                {"bad unit", "version: v1\nsystemd-services: [kubelet]\n", -EINVAL, "invalid systemd unit name"},
                {"not a list", "version: v1\nsystemd-services: a.service\n", -EINVAL, "must be a list"},
                {"bad yaml", "systemd-services: [\n", -EINVAL, ""},
        };
        char dir[PATH_MAX], path[PATH_MAX + 16];
        tmp_dir(dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/clients.yaml", dir);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                FILE *f = fopen(path, "we");
                assert_non_null(f);
                assert_true(fputs(cases[i].text, f) >= 0);
                assert_int_equal(fclose(f), 0);
                struct mk_gpu_clients c = {0};
                struct mk_error e = {0};
                int r = mk_gpu_clients_file_load(path, &c, &e);
                if (r != cases[i].r)
                        fail_msg("%s: r = %d, want %d (%s)", cases[i].name, r, cases[i].r, e.msg);
                if (r < 0) {
                        if (!strstr(e.msg, cases[i].want) || !streq(e.file, path))
                                fail_msg("%s: error '%s' in '%s', want '%s' in '%s'", cases[i].name, e.msg, e.file,
                                         cases[i].want, path);
                        continue;
                }
                char *got = join_ids(c.systemd_services);
                if (!streq(got, cases[i].want))
                        fail_msg("%s: units '%s', want '%s'", cases[i].name, got, cases[i].want);
                free(got);
                assert_null(c.container_images[0]);
                assert_int_equal(c.n_container_images, 0);
                assert_int_equal(c.stop_timeout_ms, MK_CLIENTS_DEFAULT_STOP_MS);
                assert_int_equal(c.start_timeout_ms, MK_CLIENTS_DEFAULT_START_MS);
                mk_gpu_clients_done(&c);
                mk_gpu_clients_done(&c); /* twice is fine */
        }
        struct mk_gpu_clients c = {0};
        struct mk_error e = {0};
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mk_gpu_clients_file_load(path, &c, &e), -ENOENT);
        assert_non_null(strstr(e.msg, path));
        assert_int_equal(rmdir(dir), 0);

        assert_int_equal(mk_gpu_clients_init_default(&c), 0);
        assert_int_equal(c.n_systemd_services, 10);
        assert_string_equal(c.systemd_services[9], "kubelet.service");
        assert_int_equal(c.n_container_images, 3);
        mk_gpu_clients_done(&c);
}

/* ---- the reboot-once rule ---- */

static void test_decide(void **state) {
        static const struct {
                enum mk_reboot_outcome outcome;
                bool reboot_enabled, marker;
                bool reboot;
                int exit_code;
                bool marker_after;
        } table[] = {
                /* outcome                 enabled marker   reboot exit marker after */
                {MK_REBOOT_APPLIED, false, false, false, 0, false},
                {MK_REBOOT_APPLIED, false, true, false, 0, false},  /* success clears it */
                {MK_REBOOT_APPLIED, true, false, false, 0, false},
                {MK_REBOOT_APPLIED, true, true, false, 0, false},
                {MK_REBOOT_NEEDED, true, false, true, 0, true},   /* the one reboot */
                {MK_REBOOT_NEEDED, true, true, false, 1, true},   /* never a second */
                {MK_REBOOT_NEEDED, false, false, false, 1, false},
                {MK_REBOOT_NEEDED, false, true, false, 1, true},
                {MK_REBOOT_FAILED_MODE_OK, true, true, false, 1, false}, /* the mode step passed */
                {MK_REBOOT_FAILED_MODE_OK, false, false, false, 1, false},
                {MK_REBOOT_FAILED_MODE_OK, true, false, false, 1, false},
                {MK_REBOOT_FAILED_MODE_OK, false, true, false, 1, false},
                {MK_REBOOT_FAILED, true, true, false, 1, true},          /* unknown: keep it */
                {MK_REBOOT_FAILED, true, false, false, 1, false},
                {MK_REBOOT_FAILED, false, true, false, 1, true},
                {MK_REBOOT_FAILED, false, false, false, 1, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                struct mk_reboot_decision d = mk_reboot_decide(table[i].outcome, table[i].reboot_enabled, table[i].marker);
                if (d.reboot != table[i].reboot || d.exit_code != table[i].exit_code ||
                    d.marker_after != table[i].marker_after)
                        fail_msg("%s, reboot %s, marker %s: got reboot=%d exit=%d marker_after=%d, want %d %d %d",
                                 mk_reboot_outcome_to_string(table[i].outcome),
                                 table[i].reboot_enabled ? "enabled" : "disabled", table[i].marker ? "present" : "absent",
                                 d.reboot, d.exit_code, d.marker_after, table[i].reboot, table[i].exit_code,
                                 table[i].marker_after);
                /* Invariant: a reboot always leaves a marker, and only happens without one. */
                assert_true(!d.reboot || (d.marker_after && !table[i].marker));
        }
        assert_string_equal(mk_reboot_outcome_to_string(MK_REBOOT_NEEDED), "reboot-needed");
        assert_null(mk_reboot_outcome_to_string(_MK_REBOOT_OUTCOME_MAX));
}

/* ---- container runtimes ---- */

static void test_image_matches(void **state) {
        static const struct {
                const char *image, *name;
                bool want;
        } cases[] = {
                {"nvcr.io/nvidia/k8s-device-plugin:v0.14.1", "k8s-device-plugin", true},
                {"nvcr.io/nvidia/k8s-device-plugin", "k8s-device-plugin", true},
                {"nvcr.io/nvidia/k8s-device-plugin@sha256:0123abcd", "k8s-device-plugin", true},
                {"nvcr.io/nvidia/k8s-device-plugin:v1@sha256:0123", "k8s-device-plugin", true},
                {"k8s-device-plugin", "k8s-device-plugin", true},
                {"k8s-device-plugin:latest", "k8s-device-plugin", true},
                {"nvcr.io/nvidia/k8s/dcgm-exporter:3.1.7-3.1.4-ubuntu20.04", "dcgm-exporter", true},
                {"nvcr.io/nvidia/k8s/dcgm-exporter:3.1.7", "k8s/dcgm-exporter", true},
                {"localhost:5000/gpu-feature-discovery:v0.8", "gpu-feature-discovery", true},
                {"localhost:5000/gpu-feature-discovery", "gpu-feature-discovery", true},
                {"example.com/my-dcgm-exporter:1", "dcgm-exporter", false},
                {"example.com/dcgm-exporter-fork:1", "dcgm-exporter", false},
                {"nvcr.io/nvidia/k8s-device-plugin:v1", "plugin", false},
                {"registry.k8s.io/pause:3.9", "k8s-device-plugin", false},
                {"dcgm-exporter", "", false},
                {"sha256:abcdef", "dcgm-exporter", false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                if (mk_image_matches(cases[i].image, cases[i].name) != cases[i].want)
                        fail_msg("'%s' vs '%s': got %d, want %d", cases[i].image, cases[i].name, !cases[i].want,
                                 cases[i].want);
}

static void test_docker_ps(void **state) {
        char i1[] = "k8s-device-plugin", i2[] = "gpu-feature-discovery", i3[] = "dcgm-exporter";
        char *images[] = {i1, i2, i3, NULL};
        static const struct {
                const char *name, *output, *want; /* want NULL: an error */
        } cases[] = {
                {"none", "", ""},
                {"mixed",
                 "3f2a1b nvcr.io/nvidia/k8s-device-plugin:v0.14.1\n"
                 "77aa00 docker.io/library/nginx:latest\n"
                 "\n"
                 "9c9c9c nvcr.io/nvidia/k8s/dcgm-exporter:3.1.7\n"
                 "1d1d1d example.com/my-dcgm-exporter:1\n"
                 "4e4e4e nvcr.io/nvidia/gpu-feature-discovery:v0.8.2",
                 "3f2a1b,9c9c9c,4e4e4e"},
                {"one field", "3f2a1b\n", NULL},
                {"three fields", "3f2a1b a b\n", NULL},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char **ids = NULL;
                struct mk_error e = {0};
                int r = mk_docker_ps_select(cases[i].output, images, &ids, &e);
                if (!cases[i].want) {
                        if (r != -EINVAL)
                                fail_msg("%s: r = %d, want -EINVAL", cases[i].name, r);
                        assert_non_null(strstr(e.msg, "docker ps: line 1"));
                        continue;
                }
                if (r < 0)
                        fail_msg("%s: %s", cases[i].name, e.msg);
                char *got = join_ids(ids);
                if (!streq(got, cases[i].want))
                        fail_msg("%s: got '%s', want '%s'", cases[i].name, got, cases[i].want);
                free(got);
                strv_free(ids);
        }
}

static void test_ctr(void **state) {
        char i1[] = "k8s-device-plugin", i2[] = "gpu-feature-discovery";
        char *images[] = {i1, i2, NULL};
        const char *containers =
                "CONTAINER    IMAGE                                          RUNTIME\n"
                "aaa          nvcr.io/nvidia/k8s-device-plugin:v0.14.1       io.containerd.runc.v2\n"
                "bbb          registry.k8s.io/pause:3.9                      io.containerd.runc.v2\n"
                "ccc          nvcr.io/nvidia/gpu-feature-discovery:v0.8.2    io.containerd.runc.v2\n"
                "ddd          nvcr.io/nvidia/k8s-device-plugin:v0.13         io.containerd.runc.v2\n"
                "eee          nvcr.io/nvidia/k8s-device-plugin:v0.12         io.containerd.runc.v2\n";
        const char *tasks = "TASK    PID     STATUS\n"
                            "aaa     1001    RUNNING\n"
                            "bbb     1002    RUNNING\n"
                            "ccc     1003    RUNNING\n"
                            "ddd     1004    STOPPED\n";
        char **ids = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_ctr_select(containers, tasks, images, &ids, &e), 0);
        char *got = join_ids(ids);
        assert_string_equal(got, "aaa,ccc"); /* ddd stopped, eee has no task */
        free(got);
        strv_free(ids);

        assert_int_equal(mk_ctr_select("", "", images, &ids, &e), 0);
        assert_null(ids[0]);
        strv_free(ids);

        e = (struct mk_error){0};
        assert_int_equal(mk_ctr_select("CONTAINER IMAGE RUNTIME\naaa nvcr.io/nvidia/k8s-device-plugin\n", tasks, images,
                                       &ids, &e),
                         -EINVAL);
        assert_non_null(strstr(e.msg, "ctr containers list: line 2"));
        e = (struct mk_error){0};
        assert_int_equal(mk_ctr_select(containers, "TASK PID STATUS\naaa RUNNING\n", images, &ids, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "ctr tasks list: line 2"));
}


/* ---- the reboot marker ---- */

static void test_marker(void **state) {
        char dir[PATH_MAX];
        tmp_dir(dir, sizeof(dir));
        char marker[PATH_MAX + 64], state_dir[PATH_MAX + 16];
        snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
        snprintf(marker, sizeof(marker), "%s/" MK_REBOOT_MARKER_NAME, state_dir);
        struct mk_error e = {0};
        char *text = NULL;
        bool removed = true;
        assert_int_equal(mk_reboot_marker_read(marker, &text, &e), -ENOENT);
        assert_int_equal(mk_reboot_marker_remove(marker, &removed, &e), 0);
        assert_false(removed);
        /* The state directory is created on the way. */
        assert_int_equal(mk_reboot_marker_create(marker, "rebooted for X\nsecond line\n", &e), 0);
        assert_int_equal(mk_reboot_marker_read(marker, &text, &e), 0);
        assert_string_equal(text, "rebooted for X\nsecond line");
        free(text);
        assert_int_equal(mk_reboot_marker_remove(marker, &removed, &e), 0);
        assert_true(removed);
        assert_int_equal(access(marker, F_OK), -1);
        assert_int_equal(mk_reboot_marker_remove(marker, NULL, &e), 0);
        /* A boot killed between the marker's temporary file and its rename
         * left one: the next create, under the writers' lock, removes it. */
        char stale[PATH_MAX + 96], lock[PATH_MAX + 96];
        snprintf(stale, sizeof(stale), "%s.tmp.999999.0badf00d", marker);
        snprintf(lock, sizeof(lock), "%s.lock", marker);
        FILE *sf = fopen(stale, "we");
        assert_non_null(sf);
        assert_int_equal(fclose(sf), 0);
        assert_int_equal(mk_reboot_marker_create(marker, "again", &e), 0);
        assert_int_equal(access(stale, F_OK), -1);
        assert_int_equal(mk_reboot_marker_remove(marker, NULL, &e), 0);
        assert_int_equal(unlink(lock), 0);     /* the writers' lock file stays until then */
        assert_int_equal(rmdir(state_dir), 0); /* empty: no temporary file left */
        /* A NUL byte: corrupt. */
        assert_int_equal(mkdir(state_dir, 0755), 0);
        FILE *f = fopen(marker, "we");
        assert_non_null(f);
        assert_int_equal(fwrite("a\0b", 1, 3, f), 3);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(mk_reboot_marker_read(marker, &text, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "corrupt"));
        assert_int_equal(unlink(marker), 0);
        assert_int_equal(rmdir(state_dir), 0);
        assert_int_equal(rmdir(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),         cmocka_unit_test(test_clients_file),
                cmocka_unit_test(test_decide),        cmocka_unit_test(test_image_matches),
                cmocka_unit_test(test_docker_ps),     cmocka_unit_test(test_ctr),
                cmocka_unit_test(test_marker),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
