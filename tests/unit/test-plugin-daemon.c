/* plugin/daemon: the pure parts. The Node label patch as data (node in,
 * exact merge patch out), the NFD feature file, the --labels table. The
 * daemon itself is tested end to end by tests/integration/test-device-plugin*.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "gfd/labels.h"
#include "plugin/daemon.h"

static void test_labels_mode_table(void **state) {
        for (int i = 0; i < _MK_DP_LABELS_MODE_MAX; i++)
                assert_int_equal(mk_dp_labels_mode_from_string(mk_dp_labels_mode_to_string(i)), i);
        assert_string_equal(mk_dp_labels_mode_to_string(MK_DP_LABELS_NFD_FILE), "nfd-file");
        assert_int_equal(mk_dp_labels_mode_from_string("NODE"), -EINVAL);
        assert_int_equal(mk_dp_labels_mode_from_string(""), -EINVAL);
        assert_int_equal(mk_dp_labels_mode_from_string(NULL), -EINVAL);
        assert_null(mk_dp_labels_mode_to_string(_MK_DP_LABELS_MODE_MAX));
}

/* Labels from "k=v" strings (sorted by the caller). */
static struct mk_labels *labels_of(const char *const *kv, size_t n) {
        struct mk_labels *l = calloc(1, sizeof(*l));
        assert_non_null(l);
        l->items = calloc(n ? n : 1, sizeof(*l->items));
        assert_non_null(l->items);
        for (size_t i = 0; i < n; i++) {
                const char *eq = strchr(kv[i], '=');
                assert_non_null(eq);
                l->items[i].key = strndup(kv[i], (size_t) (eq - kv[i]));
                l->items[i].value = strdup(eq + 1);
        }
        l->n = n;
        return l;
}

static const struct {
        const char *name;
        const char *node;       /* JSON, NULL: no node */
        const char *labels[4];
        const char *patch;      /* JSON, NULL: no change */
} patch_cases[] = {
        {"unlabelled node", "{\"metadata\":{\"name\":\"n1\"}}",
         {"nvidia.com/gpu.count=8", "nvidia.com/mig.strategy=mixed"},
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\",\"nvidia.com/mig.strategy\":\"mixed\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count,nvidia.com/mig.strategy\"}}}"},
        {"no node object", NULL, {"nvidia.com/gpu.count=8"},
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}"},
        {"up to date",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\",\"other\":\"x\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}",
         {"nvidia.com/gpu.count=8"}, NULL},
        {"changed value",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"7\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}",
         {"nvidia.com/gpu.count=8"},
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}"},
        /* A key we set before goes; labels of others (the manager's
         * mig.config, a label we never set) stay even under nvidia.com/. */
        {"stale key removed, foreign kept",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\",\"nvidia.com/mig-1g.10gb.count\":\"7\","
         "\"nvidia.com/mig.config\":\"all-1g\",\"nvidia.com/gpu.product\":\"X\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count,nvidia.com/mig-1g.10gb.count,"
         "nvidia.com/gone\"}}}",
         {"nvidia.com/gpu.count=8"},
         "{\"metadata\":{\"labels\":{\"nvidia.com/mig-1g.10gb.count\":null},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}"},
        {"only the annotation is missing",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\"}}}", {"nvidia.com/gpu.count=8"},
         "{\"metadata\":{\"labels\":{},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}"},
        {"no labels any more",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}",
         {NULL},
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":null},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"\"}}}"},
        /* Garbage where the annotation should be: treated as no annotation. */
        {"annotation not a string",
         "{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\"},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":7}}}",
         {"nvidia.com/gpu.count=8"},
         "{\"metadata\":{\"labels\":{},"
         "\"annotations\":{\"migkit.io/device-plugin-labels\":\"nvidia.com/gpu.count\"}}}"},
};

static void test_node_labels_patch(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(patch_cases); i++) {
                size_t n = 0;
                while (n < ELEMENTSOF(patch_cases[i].labels) && patch_cases[i].labels[n])
                        n++;
                struct mk_labels *l = labels_of(patch_cases[i].labels, n);
                json_t *node = patch_cases[i].node ? json_loads(patch_cases[i].node, 0, NULL) : NULL;
                if (patch_cases[i].node)
                        assert_non_null(node);
                json_t *patch = NULL;
                assert_int_equal(mk_dp_node_labels_patch(node, l, &patch), 0);
                if (!patch_cases[i].patch) {
                        if (patch) {
                                char *got = json_dumps(patch, JSON_SORT_KEYS | JSON_COMPACT);
                                print_error("%s: want no patch, got %s\n", patch_cases[i].name, got);
                                free(got);
                                fail();
                        }
                } else {
                        json_t *want = json_loads(patch_cases[i].patch, 0, NULL);
                        assert_non_null(want);
                        assert_non_null(patch);
                        char *g = json_dumps(patch, JSON_SORT_KEYS | JSON_COMPACT);
                        char *w = json_dumps(want, JSON_SORT_KEYS | JSON_COMPACT);
                        if (!streq(g, w))
                                print_error("%s:\n got  %s\n want %s\n", patch_cases[i].name, g, w);
                        assert_string_equal(g, w);
                        free(g);
                        free(w);
                        json_decref(want);
                }
                json_decref(patch);
                json_decref(node);
                mk_labels_free(l);
        }
}

static void test_features_file(void **state) {
        char dir[] = "/tmp/test-plugin-daemon.XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof(path), "%s/gfd", dir);
        static const char *const kv[] = {"nvidia.com/gpu.count=8", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"};
        struct mk_labels *l = labels_of(kv, 2);
        struct mk_error e = {0};
        assert_int_equal(mk_dp_write_features_file(path, l, &e), 0);
        /* Replaced as a whole on the next write. */
        l->n = 1;
        assert_int_equal(mk_dp_write_features_file(path, l, &e), 0);
        l->n = 2;
        char *data = NULL;
        assert_int_equal(mk_read_file(path, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "nvidia.com/gpu.count=8\n");
        free(data);
        assert_int_equal(unlink(path), 0);

        /* An empty list gives an empty file; a missing directory an error naming it. */
        struct mk_labels empty = {0};
        assert_int_equal(mk_dp_write_features_file(path, &empty, &e), 0);
        assert_int_equal(mk_read_file(path, 4096, &data, NULL, &e), 0);
        assert_string_equal(data, "");
        free(data);
        assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof(path), "%s/missing/gfd", dir);
        mk_error_clear(&e);
        assert_int_equal(mk_dp_write_features_file(path, l, &e), -ENOENT);
        assert_non_null(strstr(e.msg, path));
        assert_int_equal(rmdir(dir), 0);
        mk_labels_free(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_labels_mode_table),
                cmocka_unit_test(test_node_labels_patch),
                cmocka_unit_test(test_features_file),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
