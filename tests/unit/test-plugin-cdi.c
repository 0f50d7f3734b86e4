/* Unit tests for plugin/cdi: the CDI spec of a node as data (device names by
 * UUID and index, device nodes with the MIG access caps from mig-minors,
 * control nodes present under the dev root, driver libraries and binaries
 * found under a driver root built here), the file name, the keeper's
 * write-when-changed and removal. The spec's validity per the CDI reference
 * library is checked by tests/integration/test-cdi.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/cdi.h"
#include "plugin/resources.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

static char *tmpdir(const char *name) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        char *d = NULL;
        assert_true(asprintf(&d, "%s/test-plugin-cdi-%s-%d", base ? base : "/tmp", name, (int) getpid()) > 0);
        struct mk_error e = {0};
        assert_int_equal(mk_mkdir_parents(d, 0755, &e), 0);
        return d;
}

static void touch(const char *root, const char *rel) {
        _cleanup_free_ char *p = NULL, *dir = NULL;
        assert_true(asprintf(&p, "%s%s", root, rel) > 0);
        dir = strdup(p);
        *strrchr(dir, '/') = 0;
        struct mk_error e = {0};
        assert_int_equal(mk_mkdir_parents(dir, 0755, &e), 0);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0755);
        assert_true(fd >= 0);
        close(fd);
}

static void host_init(struct mk_host *h, const char *proc) {
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        assert_non_null(src);
        *h = (struct mk_host) {0};
        assert_true(asprintf(&h->sysfs_root, "%s/tests/fixtures/plugin/sys", src) > 0);
        assert_true(asprintf(&h->proc_root, "%s/tests/fixtures/plugin/%s", src, proc) > 0);
        assert_true(asprintf(&h->dev_root, "%s/tests/fixtures/plugin/dev", src) > 0);
}

/* Options with host roots h (proc fixture `proc`) and no driver files. */
static void opts_init(struct mk_dp_options *o, struct mk_host *h, const char *proc) {
        host_init(h, proc);
        mk_dp_options_init(o);
        o->host = h;
        o->driver_root = "/nonexistent";
}

/* A driver root: the driver's libraries of version 550.54.15 (and things
 * that must not be taken: an other version, a symlink name, a foreign
 * library), binaries, /bin -> usr/bin as on merged-/usr systems. */
static char *driver_root(void) {
        char *root = tmpdir("root");
        touch(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
        touch(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15");
        touch(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.550.54.15");
        touch(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05");
        touch(root, "/usr/lib/x86_64-linux-gnu/libz.so.550.54.15");
        touch(root, "/usr/lib64/libnvidia-ml.so.550.54.15"); /* the same name again: first directory wins */
        _cleanup_free_ char *link = NULL, *bin = NULL;
        assert_true(asprintf(&link, "%s/usr/lib/x86_64-linux-gnu/libcuda.so.1", root) > 0);
        (void) unlink(link);
        assert_int_equal(symlink("libcuda.so.550.54.15", link), 0);
        touch(root, "/usr/bin/nvidia-smi");
        touch(root, "/usr/bin/nvidia-cuda-mps-control");
        assert_true(asprintf(&bin, "%s/bin", root) > 0);
        (void) unlink(bin);
        assert_int_equal(symlink("usr/bin", bin), 0);
        return root;
}

/* "name: node node ..." per device, one line each. */
static char *devices_dump(const json_t *spec) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        size_t i;
        json_t *d;
        json_array_foreach(json_object_get(spec, "devices"), i, d) {
                assert_int_equal(mk_buf_printf(&b, "%s:", json_string_value(json_object_get(d, "name"))), 0);
                size_t j;
                json_t *n;
                json_array_foreach(json_object_get(json_object_get(d, "containerEdits"), "deviceNodes"), j, n)
                        assert_int_equal(mk_buf_printf(&b, " %s", json_string_value(json_object_get(n, "path"))), 0);
                assert_int_equal(mk_buf_puts(&b, "\n"), 0);
        }
        return mk_buf_take(&b);
}

static void test_spec(void **state) {
        (void) state;
        static const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb*2,3g.20gb"}, {"a100", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h, "proc");
        _cleanup_free_ char *root = driver_root(), *devroot = NULL;
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        assert_true(asprintf(&devroot, "%s/tests/fixtures/plugin", src) > 0);

        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.host = &h;
        o.driver_root = root;
        o.dev_root = devroot;
        struct mk_error e = {0};
        _cleanup_free_ char *text = NULL;
        struct mk_cdi_stats st = {0};
        assert_int_equal(mk_cdi_spec_render(s, &o, &text, &st, &e), 0);
        json_error_t je;
        _cleanup_(json_decrefp) json_t *spec = json_loads(text, 0, &je);
        assert_non_null(spec);
        assert_string_equal(json_string_value(json_object_get(spec, "cdiVersion")), "0.5.0");
        assert_string_equal(json_string_value(json_object_get(spec, "kind")), "k8s.device-plugin.nvidia.com/gpu");

        /* Every GPU whole (the MIG-enabled one too) and every MIG device, by UUID and by index. */
        _cleanup_free_ char *devs = devices_dump(spec);
        assert_string_equal(devs,
                            "GPU-00000000-0000-0000-0000-000000000000: /dev/nvidia0\n"
                            "0: /dev/nvidia0\n"
                            "MIG-00000000-0000-0000-0000-000000000100: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap12 "
                            "/dev/nvidia-caps/nvidia-cap13\n"
                            "0:0: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap12 /dev/nvidia-caps/nvidia-cap13\n"
                            "MIG-00000000-0000-0000-0000-000000000200: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap21 "
                            "/dev/nvidia-caps/nvidia-cap22\n"
                            "0:1: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap21 /dev/nvidia-caps/nvidia-cap22\n"
                            "MIG-00000000-0000-0000-0000-000000000300: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap30 "
                            "/dev/nvidia-caps/nvidia-cap31\n"
                            "0:2: /dev/nvidia0 /dev/nvidia-caps/nvidia-cap30 /dev/nvidia-caps/nvidia-cap31\n"
                            "GPU-00000001-0000-0000-0000-000000000000: /dev/nvidia1\n"
                            "1: /dev/nvidia1\n");
        assert_int_equal(st.devices, 10);
        assert_int_equal(st.mig_without_caps, 0);

        /* Host paths below the dev root. */
        json_t *d0 = json_array_get(json_object_get(spec, "devices"), 0);
        json_t *n0 = json_array_get(json_object_get(json_object_get(d0, "containerEdits"), "deviceNodes"), 0);
        _cleanup_free_ char *want_host = NULL;
        assert_true(asprintf(&want_host, "%s/dev/nvidia0", devroot) > 0);
        assert_string_equal(json_string_value(json_object_get(n0, "hostPath")), want_host);

        /* Common edits: the control nodes the fixture has (nvidiactl, nvidia-uvm), the env, the driver files. */
        json_t *edits = json_object_get(spec, "containerEdits");
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(edits, "env"), i, x)
                assert_int_equal(mk_buf_printf(&b, "env %s\n", json_string_value(x)), 0);
        json_array_foreach(json_object_get(edits, "deviceNodes"), i, x)
                assert_int_equal(mk_buf_printf(&b, "node %s\n", json_string_value(json_object_get(x, "path"))), 0);
        json_array_foreach(json_object_get(edits, "mounts"), i, x) {
                const char *host = json_string_value(json_object_get(x, "hostPath"));
                const char *ctr = json_string_value(json_object_get(x, "containerPath"));
                assert_true(strneq(host, root, strlen(root)));
                assert_string_equal(host + strlen(root), ctr);
                json_t *opts = json_object_get(x, "options");
                assert_int_equal(json_array_size(opts), 4);
                assert_string_equal(json_string_value(json_array_get(opts, 0)), "ro");
                assert_string_equal(json_string_value(json_array_get(opts, 3)), "bind");
                assert_int_equal(mk_buf_printf(&b, "mount %s\n", ctr), 0);
        }
        _cleanup_free_ char *common = mk_buf_take(&b);
        assert_string_equal(common, "env NVIDIA_VISIBLE_DEVICES=void\n"
                                    "node /dev/nvidiactl\n"
                                    "node /dev/nvidia-uvm\n"
                                    "mount /usr/bin/nvidia-cuda-mps-control\n"
                                    "mount /usr/bin/nvidia-smi\n"
                                    "mount /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
                                    "mount /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15\n"
                                    "mount /usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.550.54.15\n");
        assert_int_equal(st.mounts, 5);

        /* The same input, the same text. */
        _cleanup_free_ char *again = NULL;
        assert_int_equal(mk_cdi_spec_render(s, &o, &again, NULL, &e), 0);
        assert_string_equal(text, again);
}

static void test_mig_without_caps(void **state) {
        (void) state;
        static const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb*2"}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        _cleanup_(mk_host_done) struct mk_host h;
        struct mk_dp_options o;
        opts_init(&o, &h, "no-such-proc");
        struct mk_error e = {0};
        _cleanup_free_ char *text = NULL;
        struct mk_cdi_stats st = {0};
        assert_int_equal(mk_cdi_spec_render(s, &o, &text, &st, &e), 0);
        assert_int_equal(st.mig_without_caps, 2);
        assert_int_equal(st.devices, 2);
        assert_int_equal(st.mounts, 0);
        _cleanup_(json_decrefp) json_t *spec = json_loads(text, 0, NULL);
        _cleanup_free_ char *devs = devices_dump(spec);
        assert_string_equal(devs, "GPU-00000000-0000-0000-0000-000000000000: /dev/nvidia0\n0: /dev/nvidia0\n");
        /* A driver version NVML did not give: no libraries (binaries are still looked for). */
        s->driver_version[0] = 0;
        _cleanup_free_ char *t2 = NULL;
        assert_int_equal(mk_cdi_spec_render(s, &o, &t2, &st, &e), 0);
        assert_int_equal(st.mounts, 0);
}

static void test_path_and_kind(void **state) {
        (void) state;
        _cleanup_free_ char *p = NULL, *q = NULL;
        assert_int_equal(mk_cdi_spec_path("/var/run/cdi/", NULL, &p), 0);
        assert_string_equal(p, "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json");
        assert_int_equal(mk_cdi_spec_path("/etc/cdi", "example.com/dev", &q), 0);
        assert_string_equal(q, "/etc/cdi/example.com-dev.json");
        char *r = NULL;
        assert_int_equal(mk_cdi_spec_path("/x", "nokind", &r), -EINVAL);
        assert_int_equal(mk_cdi_spec_path("/x", "a/b/c", &r), -EINVAL);
        assert_null(r);

        static const struct snap_gpu gpus[] = {{"t4", OFF, NULL}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.cdi_kind = "vendor-only";
        struct mk_error e = {0};
        char *text = NULL;
        assert_int_equal(mk_cdi_spec_render(s, &o, &text, NULL, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "'vendor-only'"));
        assert_null(text);
}

static void test_keeper(void **state) {
        (void) state;
        _cleanup_free_ char *dir = tmpdir("keeper"), *sub = NULL;
        assert_true(asprintf(&sub, "%s/run/cdi", dir) > 0); /* created on the first write */
        static const struct snap_gpu one[] = {{"a100", MIG, "1g.5gb"}, {0}};
        static const struct snap_gpu two[] = {{"a100", MIG, "1g.5gb*2"}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s1 = snap_build(one);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s2 = snap_build(two);
        _cleanup_(mk_host_done) struct mk_host h;
        struct mk_dp_options o;
        opts_init(&o, &h, "proc");
        struct mk_error e = {0};
        struct mk_cdi_file *f = NULL;
        assert_int_equal(mk_cdi_file_new(sub, NULL, &f, &e), 0);
        _cleanup_free_ char *path = strdup(mk_cdi_file_path(f));
        assert_non_null(strstr(path, "/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"));
        struct stat sb;
        assert_int_equal(stat(path, &sb), -1);
        assert_int_equal(mk_cdi_file_update(f, s1, &o, NULL, &e), 1);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(sb.st_mode & 0777, 0644);
        /* Unchanged: not rewritten (same inode: the atomic write renames a new file). */
        ino_t ino = sb.st_ino;
        assert_int_equal(mk_cdi_file_update(f, s1, &o, NULL, &e), 0);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(sb.st_ino, ino);
        /* A new MIG layout: rewritten, with the new device. */
        assert_int_equal(mk_cdi_file_update(f, s2, &o, NULL, &e), 1);
        _cleanup_free_ char *data = NULL;
        assert_int_equal(mk_read_file(path, 1 << 20, &data, NULL, &e), 0);
        assert_non_null(strstr(data, "\"0:1\""));
        int err = 1;
        f = mk_cdi_file_free(f, &err);
        assert_int_equal(err, 0);
        assert_null(f);
        assert_int_equal(stat(path, &sb), -1);

        /* A keeper that never wrote leaves another's file alone. */
        assert_int_equal(mk_write_file_atomic(path, "{}", 2, 0644, &e), 0);
        assert_int_equal(mk_cdi_file_new(sub, NULL, &f, &e), 0);
        f = mk_cdi_file_free(f, NULL);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(unlink(path), 0);

        /* An unwritable directory: the error names the path. */
        assert_int_equal(mk_cdi_file_new("/proc/no-such-dir", NULL, &f, &e), 0);
        assert_true(mk_cdi_file_update(f, s1, &o, NULL, &e) < 0);
        assert_non_null(strstr(e.msg, "/proc/no-such-dir"));
        f = mk_cdi_file_free(f, NULL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_spec),
                cmocka_unit_test(test_mig_without_caps),
                cmocka_unit_test(test_path_and_kind),
                cmocka_unit_test(test_keeper),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
