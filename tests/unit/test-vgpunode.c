/* Unit tests for vgpunode/: per-container directory names, their creation
 * with the identity file, the ld.so.preload file, the removal of gone pods'
 * directories (live, young and foreign entries kept; symlinks removed as
 * links), and the monitor's Prometheus text from real region files (the
 * HTTP endpoint is tested in test-sched and the whole-path test). */
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
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/prom.h"
#include "vgpu/config.h"
#include "vgpu/region.h"
#include "vgpunode/dirs.h"
#include "vgpunode/monitor.h"

#define MIB (1024ull * 1024ull)
#define UID1 "0b6c1c57-8d3e-4f0a-9d55-6f1a2b3c4d5e"
#define UID2 "7f00e1aa-1111-2222-3333-444455556666"

static char *tmpdir(void) {
        char *d = strdup("/tmp/test-vgpunode.XXXXXX");
        assert_non_null(d);
        assert_non_null(mkdtemp(d));
        return d;
}

static void rmrf(const char *d) {
        char *cmd = NULL;
        assert_true(asprintf(&cmd, "rm -rf '%s'", d) > 0);
        assert_int_equal(system(cmd), 0);  /* test only: the tree is ours */
        free(cmd);
}

static bool exists(const char *root, const char *rel) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        return lstat(p, &st) == 0;
}

static void test_names(void **state) {
        (void) state;
        char *p = NULL;
        assert_int_equal(mk_vgpu_container_dir("/r", UID1, 3, &p), 0);
        assert_string_equal(p, "/r/containers/" UID1 "_3");
        free(p);
        static const char *const bad[] = {"", "..", "a/b", "a_b", "a b",
                                          "0123456789012345678901234567890123456789012345678901234567890123"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(mk_vgpu_container_dir("/r", bad[i], 0, &p), -EINVAL);
        char uid[MK_VGPU_UID_MAX];
        unsigned ix = 99;
        assert_int_equal(mk_vgpu_container_name_parse(UID1 "_12", uid, &ix), 0);
        assert_string_equal(uid, UID1);
        assert_int_equal(ix, 12);
        static const char *const badn[] = {"x", "x_", "_1", "x_01", "x_1a", "a_b_1", "x_123456", "x.json", "../x_1"};
        for (size_t i = 0; i < ELEMENTSOF(badn); i++)
                assert_int_equal(mk_vgpu_container_name_parse(badn[i], uid, &ix), -EINVAL);
}

static void prepare(const char *root, const char *uid, unsigned index, const char *ctr) {
        static const struct mk_vgpu_slice sl[] = {{"GPU-aaaa", 4000, 30}, {"GPU-bbbb", 2000, 0}};
        struct mk_vgpu_container c = {.pod_uid = uid, .namespace = "team\"a", .name = "infer-0",
                                      .container = ctr, .index = index, .slices = sl, .n_slices = 2};
        struct mk_error e = {0};
        char *dir = NULL;
        assert_int_equal(mk_vgpu_container_prepare(root, &c, &dir, &e), 0);
        struct stat st;
        assert_int_equal(stat(dir, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0777);
        free(dir);
}

static void test_prepare(void **state) {
        (void) state;
        char *root = tmpdir();
        prepare(root, UID1, 0, "main");
        char p[1024], *data = NULL;
        snprintf(p, sizeof(p), "%s/containers/" UID1 "_0.json", root);
        struct mk_error e = {0};
        assert_int_equal(mk_read_file(p, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "{\"container\":\"main\",\"devices\":[{\"cores\":30,\"gpu\":\"GPU-aaaa\",\"memoryMiB\":"
                                  "4000},{\"cores\":0,\"gpu\":\"GPU-bbbb\",\"memoryMiB\":2000}],\"index\":0,\"name\":"
                                  "\"infer-0\",\"namespace\":\"team\\\"a\",\"podUID\":\"" UID1 "\"}");
        free(data);
        /* A retried Allocate keeps what the container wrote. */
        snprintf(p, sizeof(p), "%s/containers/" UID1 "_0/" MK_VGPU_REGION_FILE, root);
        assert_int_equal(mk_write_file_atomic(p, "x", 1, 0644, &e), 0);
        prepare(root, UID1, 0, "main");
        assert_true(exists(root, "containers/" UID1 "_0/" MK_VGPU_REGION_FILE));
        /* A uid that is not one. */
        struct mk_vgpu_container bad = {.pod_uid = "../../etc", .namespace = "n", .name = "p"};
        assert_int_equal(mk_vgpu_container_prepare(root, &bad, NULL, &e), -EINVAL);
        /* ld.so.preload: written, then left alone, then corrected. */
        char *path = NULL;
        assert_int_equal(mk_vgpu_preload_file_ensure(root, "/usr/lib/migkit/libmigkit-vgpu.so", &path, &e), 0);
        assert_int_equal(mk_read_file(path, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "/usr/lib/migkit/libmigkit-vgpu.so\n");
        free(data);
        struct stat a, b;
        assert_int_equal(stat(path, &a), 0);
        assert_int_equal(mk_vgpu_preload_file_ensure(root, "/usr/lib/migkit/libmigkit-vgpu.so", NULL, &e), 0);
        assert_int_equal(stat(path, &b), 0);
        assert_int_equal(a.st_ino, b.st_ino);
        assert_int_equal(mk_vgpu_preload_file_ensure(root, "/other.so", NULL, &e), 0);
        assert_int_equal(mk_read_file(path, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "/other.so\n");
        free(data);
        free(path);
        rmrf(root);
        free(root);
}

static void test_prune(void **state) {
        (void) state;
        char *root = tmpdir(), *outside = tmpdir();
        struct mk_error e = {0};
        unsigned failed = 9;
        /* No containers/ yet: nothing to do. */
        assert_int_equal(mk_vgpu_prune(root, NULL, 0, time(NULL), 0, &failed, &e), 0);
        prepare(root, UID1, 0, "a");
        prepare(root, UID1, 1, "b");
        prepare(root, UID2, 0, "c");
        /* What a container could leave in its directory: files, a tree, a
         * symlink to something outside that must survive. */
        char p[1024], q[1024];
        snprintf(p, sizeof(p), "%s/containers/" UID2 "_0/d1/d2", root);
        assert_int_equal(mk_mkdir_parents(p, 0755, &e), 0);
        snprintf(p, sizeof(p), "%s/containers/" UID2 "_0/d1/d2/f", root);
        assert_int_equal(mk_write_file_atomic(p, "x", 1, 0644, &e), 0);
        snprintf(q, sizeof(q), "%s/keep", outside);
        assert_int_equal(mk_write_file_atomic(q, "x", 1, 0644, &e), 0);
        snprintf(p, sizeof(p), "%s/containers/" UID2 "_0/link", root);
        assert_int_equal(symlink(outside, p), 0);
        snprintf(p, sizeof(p), "%s/containers/not-ours", root);
        assert_int_equal(mkdir(p, 0755), 0);
        const char *live[] = {UID1};
        /* Young directories stay (an Allocate may be ahead of the list). */
        assert_int_equal(mk_vgpu_prune(root, live, 1, time(NULL), 60, &failed, &e), 0);
        assert_true(exists(root, "containers/" UID2 "_0"));
        assert_int_equal(mk_vgpu_prune(root, live, 1, time(NULL) + 61, 60, &failed, &e), 1);
        assert_int_equal(failed, 0);
        assert_false(exists(root, "containers/" UID2 "_0"));
        assert_false(exists(root, "containers/" UID2 "_0.json"));
        assert_true(exists(root, "containers/" UID1 "_0"));
        assert_true(exists(root, "containers/" UID1 "_1.json"));
        assert_true(exists(root, "containers/not-ours"));
        assert_true(exists(outside, "keep"));
        /* Every pod gone. */
        assert_int_equal(mk_vgpu_prune(root, NULL, 0, time(NULL) + 61, 60, &failed, &e), 2);
        assert_false(exists(root, "containers/" UID1 "_1"));
        rmrf(root);
        rmrf(outside);
        free(root);
        free(outside);
}

static struct vgpu_region *region_at(const char *root, const char *uid, unsigned index) {
        struct vgpu_config c;
        memset(&c, 0, sizeof(c));
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                c.mem_limit[d] = VGPU_UNLIMITED;
                c.sm_limit[d] = 100;
        }
        c.mem_limit[0] = 4000 * MIB;
        c.sm_limit[0] = 30;
        c.mem_limit[1] = 2000 * MIB;
        char p[1024], err[256];
        snprintf(p, sizeof(p), "%s/containers/%s_%u/" MK_VGPU_REGION_FILE, root, uid, index);
        struct vgpu_region *r = NULL;
        assert_int_equal(vgpu_region_open(p, &c, &r, err, sizeof(err)), 0);
        return r;
}

static void test_metrics(void **state) {
        (void) state;
        char *root = tmpdir();
        struct mk_error e = {0};
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        /* Nothing on the node yet. */
        assert_int_equal(mk_vgpu_metrics(root, &b, &e), 0);
        assert_non_null(strstr(mk_buf_str(&b), "migkit_vgpu_regions_unreadable 0\n"));
        prepare(root, UID1, 0, "main");
        prepare(root, UID1, 1, "side");  /* no CUDA process yet: no region, left out */
        prepare(root, UID2, 0, "x");
        struct vgpu_region *r = region_at(root, UID1, 0);
        vgpu_region_set_uuid(r, 0, "GPU-real-0");
        int slot = vgpu_region_claim(r, getpid(), vgpu_proc_start_time(getpid()), vgpu_pid_alive);
        assert_true(slot >= 0);
        assert_int_equal(vgpu_region_charge(r, slot, 0, 100 * MIB, vgpu_pid_alive), 0);
        assert_int_equal(vgpu_region_charge(r, slot, 1, 7 * MIB, vgpu_pid_alive), 0);
        /* A foreign file where a region should be. */
        char p[1024];
        snprintf(p, sizeof(p), "%s/containers/" UID2 "_0/" MK_VGPU_REGION_FILE, root);
        assert_int_equal(mk_write_file_atomic(p, "not a region", 12, 0644, &e), 0);
        mk_buf_reset(&b);
        assert_int_equal(mk_vgpu_metrics(root, &b, &e), 0);
        const char *t = mk_buf_str(&b);
        const char *l0 = "podnamespace=\"team\\\"a\",podname=\"infer-0\",ctrname=\"main\",poduid=\"" UID1
                         "\",vdeviceid=\"0\",deviceuuid=\"GPU-real-0\"";
        const char *l1 = "podnamespace=\"team\\\"a\",podname=\"infer-0\",ctrname=\"main\",poduid=\"" UID1
                         "\",vdeviceid=\"1\",deviceuuid=\"GPU-bbbb\"";
        char want[2048];
        snprintf(want, sizeof(want), "\nvGPU_device_memory_usage_in_bytes{%s} %llu\n", l0, 100 * MIB);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nvGPU_device_memory_usage_in_bytes{%s} %llu\n", l1, 7 * MIB);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nvGPU_device_memory_limit_in_bytes{%s} %llu\n", l0, 4000 * MIB);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nvGPU_device_memory_limit_in_bytes{%s} %llu\n", l1, 2000 * MIB);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nmigkit_vgpu_device_core_limit_percent{%s} 30\n", l0);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nmigkit_vgpu_device_core_limit_percent{%s} 100\n", l1);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof(want), "\nDevice_memory_desc_of_container{%s,context=\"0\",module=\"0\",data=\"%llu\","
                                     "offset=\"0\"} %llu\n", l0, 100 * MIB, 100 * MIB);
        assert_non_null(strstr(t, want));
        assert_non_null(strstr(t, "\nmigkit_vgpu_container_processes{podnamespace=\"team\\\"a\",podname=\"infer-0\","
                                  "ctrname=\"main\",poduid=\"" UID1 "\"} 1\n"));
        assert_non_null(strstr(t, "\nmigkit_vgpu_regions_unreadable 1\n"));
        assert_null(strstr(t, "vdeviceid=\"2\""));  /* unused devices are left out */
        assert_null(strstr(t, "ctrname=\"side\""));
        /* One family, one HELP/TYPE, samples together. */
        const char *h = strstr(t, "# TYPE vGPU_device_memory_usage_in_bytes gauge\n");
        assert_non_null(h);
        assert_null(strstr(h + 1, "# TYPE vGPU_device_memory_usage_in_bytes"));
        /* The process leaves: its charges go with its slot. */
        vgpu_region_release(r, slot);
        mk_buf_reset(&b);
        assert_int_equal(mk_vgpu_metrics(root, &b, &e), 0);
        snprintf(want, sizeof(want), "\nvGPU_device_memory_usage_in_bytes{%s} 0\n", l0);
        assert_non_null(strstr(mk_buf_str(&b), want));
        /* A region file the container truncated or replaced by a FIFO: skipped, counted. */
        snprintf(p, sizeof(p), "%s/containers/" UID2 "_0/" MK_VGPU_REGION_FILE, root);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(mkfifo(p, 0644), 0);
        mk_buf_reset(&b);
        assert_int_equal(mk_vgpu_metrics(root, &b, &e), 0);
        assert_non_null(strstr(mk_buf_str(&b), "\nmigkit_vgpu_regions_unreadable 1\n"));
        /* Over the cap: an error, never a cut answer. */
        struct mk_buf small;
        mk_buf_init(&small, 100);
        assert_int_equal(mk_vgpu_metrics(root, &small, &e), -E2BIG);
        mk_buf_done(&small);
        vgpu_region_unmap(r);
        mk_buf_done(&b);
        rmrf(root);
        free(root);
}

/* A region whose device UUID holds invalid UTF-8, quotes, a backslash and a
 * newline (the container writes its region): the page stays valid UTF-8,
 * escaped, one sample a line (issue 27: Prometheus rejected the whole scrape). */
static void test_metrics_hostile_uuid(void **state) {
        (void) state;
        char *root = tmpdir();
        struct mk_error e = {0};
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        prepare(root, UID1, 0, "main");
        struct vgpu_region *r = region_at(root, UID1, 0);
        vgpu_region_set_uuid(r, 0, "GPU-\xff\xc3(\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf\"x\\\nq\xe2\x82\xac");
        assert_int_equal(mk_vgpu_metrics(root, &b, &e), 0);
        const char *t = mk_buf_str(&b);
        assert_true(mk_utf8_valid(t));
        /* Each bad byte one U+FFFD; the euro sign kept; escapes as the format says. */
        assert_non_null(strstr(t, "deviceuuid=\"GPU-\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                  "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                  "\\\"x\\\\\\nq\xe2\x82\xac\"}"));
        /* Every line is a comment or a sample of ours. */
        for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
                assert_true(l[0] == '#' || strncmp(l, "vGPU_", 5) == 0 || strncmp(l, "Device_", 7) == 0 ||
                            strncmp(l, "migkit_", 7) == 0);
                assert_non_null(strchr(l, '\n'));
        }
        vgpu_region_unmap(r);
        mk_buf_done(&b);
        rmrf(root);
        free(root);
}

static void test_utf8(void **state) {
        (void) state;
        assert_true(mk_utf8_valid("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
        static const char *const bad[] = {"\x80", "\xc0\x80", "\xc3", "\xe0\x80\x80", "\xed\xa0\x80",
                                          "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xff", "a\xc3("};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(mk_utf8_valid(bad[i]));
        struct mk_buf b;
        mk_buf_init(&b, 64);
        assert_int_equal(mk_prom_label(&b, "k", "a\"b\\c\nd\xff", true), 0);
        assert_string_equal(mk_buf_str(&b), "k=\"a\\\"b\\\\c\\nd\xef\xbf\xbd\"");
        mk_buf_done(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_metrics_hostile_uuid),
                cmocka_unit_test(test_utf8),
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_prepare),
                cmocka_unit_test(test_prune),
                cmocka_unit_test(test_metrics),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
