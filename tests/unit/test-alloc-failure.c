/* Allocation failure: every parser of outside input and the pure model code are run
 * with the Nth allocation made to fail, for every N until a run makes fewer than N
 * allocations. Each run must return (no crash), give back everything it took (ASan's
 * leak check in the sanitizer build), and either succeed or fail with an error whose
 * detail says what failed (a set struct mk_error, never "Success").
 *
 * Allocations are counted by wrapping the allocator at link time
 * (-Wl,--wrap=malloc,... on this test only, tests/CMakeLists.txt): every call from
 * migkit's own objects goes through __wrap_*; jansson is pointed at the same counter
 * with json_set_alloc_funcs(). libyaml's internal allocations are not counted. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "kube/kubeconfig.h"
#include "mig/profile.h"
#include "spec/config.h"
#include "spec/hooks.h"
#include "spec/plugin-config.h"
#include "spec/sched-config.h"
#include "spec/yaml.h"

/* ---- the failing allocator ---------------------------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_vasprintf(char **ret, const char *fmt, va_list ap);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_vasprintf(char **ret, const char *fmt, va_list ap);
int __wrap_asprintf(char **ret, const char *fmt, ...);

static unsigned long fail_at;   /* 0: never fail */
static unsigned long n_allocs;  /* allocations counted since arm() */
static int injected;

static int should_fail(void) {
        if (fail_at == 0)
                return 0;
        if (++n_allocs == fail_at) {
                injected = 1;
                return 1;
        }
        return 0;
}

void *__wrap_malloc(size_t size) {
        return should_fail() ? NULL : __real_malloc(size);
}
void *__wrap_calloc(size_t n, size_t size) {
        return should_fail() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t size) {
        return should_fail() ? NULL : __real_realloc(p, size);
}
char *__wrap_strdup(const char *s) {
        return should_fail() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n) {
        return should_fail() ? NULL : __real_strndup(s, n);
}
int __wrap_vasprintf(char **ret, const char *fmt, va_list ap) {
        return should_fail() ? -1 : __real_vasprintf(ret, fmt, ap);
}
int __wrap_asprintf(char **ret, const char *fmt, ...) {
        va_list ap;
        int r;

        if (should_fail())
                return -1;
        va_start(ap, fmt);
        r = __real_vasprintf(ret, fmt, ap);
        va_end(ap);
        return r;
}

static void *json_alloc(size_t size) {
        return __wrap_malloc(size);
}
static void json_dealloc(void *p) {
        free(p);
}

static void arm(unsigned long n) {
        n_allocs = 0;
        injected = 0;
        fail_at = n;
}
static void disarm(void) {
        fail_at = 0;
}

/* ---- the code under test ------------------------------------------------------ */

static const char *source_dir(void) {
        const char *d = getenv("MIGKIT_SOURCE_DIR");
        return d ? d : ".";
}

/* Read before any failure is armed, so the wrapped allocator counts nothing here. */
static char *read_fixture(const char *rel, size_t *ret_len) {
        char path[4096];
        char *data = NULL;
        struct mk_error e = {};

        snprintf(path, sizeof(path), "%s/%s", source_dir(), rel);
        if (mk_read_file(path, 1u << 20, &data, ret_len, &e) < 0)
                fail_msg("%s", e.msg);
        return data;
}

struct input {
        const char *data;
        size_t len;
};

static int run_config(const struct input *in, struct mk_error *e) {
        struct mk_config *c = NULL;
        int r = mk_config_parse(in->data, in->len, "config.yaml", &c, e);
        mk_config_free(c);
        return r;
}

static int run_hooks(const struct input *in, struct mk_error *e) {
        struct mk_hooks *h = NULL;
        int r = mk_hooks_parse(in->data, in->len, "hooks.yaml", &h, e);
        mk_hooks_free(h);
        return r;
}

static int run_plugin_config(const struct input *in, struct mk_error *e) {
        struct mk_plugin_config *c = NULL;
        int r = mk_plugin_config_parse(in->data, in->len, "plugin.yaml", &c, e);
        mk_plugin_config_free(c);
        return r;
}

static int run_resource_config(const struct input *in, struct mk_error *e) {
        struct mk_plugin_config *c = NULL;
        int r = mk_plugin_config_parse_resource_config(in->data, &c, e);
        mk_plugin_config_free(c);
        return r;
}

static int run_sched_config(const struct input *in, struct mk_error *e) {
        struct mk_sched_config *c = NULL;
        int r = mk_sched_config_parse(in->data, in->len, "device-config.yaml", &c, e);
        mk_sched_config_free(c);
        return r;
}

static int run_yaml(const struct input *in, struct mk_error *e) {
        struct mk_yaml_doc *d = NULL;
        int r = mk_yaml_parse(in->data, in->len, "doc.yaml", &d, e);
        mk_yaml_doc_free(d);
        return r;
}

static int run_profile_name(const struct input *in, struct mk_error *e) {
        struct mk_profile_name p;
        return mk_profile_name_parse(in->data, &p, e);
}

static int run_kubeconfig(const struct input *in, struct mk_error *e) {
        struct mk_kube_config c = {};
        int r = mk_kube_config_from_kubeconfig(in->data, NULL, &c, e);
        if (r >= 0)
                mk_kube_config_done(&c);
        return r;
}

/* Runs `fn` with allocation N failing for N = 1, 2, ... until a run makes fewer
 * than N allocations; checks each failed run's error. Returns how many runs had
 * a failure injected. */
static unsigned long sweep(const char *name, int (*fn)(const struct input *, struct mk_error *),
                           const struct input *in) {
        struct mk_error e0 = {};
        unsigned long n;
        int r0;

        /* Without failures the input is valid. */
        r0 = fn(in, &e0);
        if (r0 < 0)
                fail_msg("%s: fails without injected failures: %s", name, e0.msg);

        for (n = 1; n < 1000000; n++) {
                struct mk_error e = {};
                int r;

                arm(n);
                r = fn(in, &e);
                disarm();
                if (!injected) {
                        assert_true(r >= 0);
                        break;
                }
                if (r >= 0)
                        continue; /* recovered (e.g. an optional cache); nothing leaked: ASan checks */
                if (e.code == 0 || e.msg[0] == '\0' || strstr(e.msg, "Success"))
                        fail_msg("%s: allocation %lu failed: returned %d (%s) without an error detail "
                                 "(code %d, message '%s')",
                                 name, n, r, strerror(-r), e.code, e.msg);
                if (e.code != r)
                        fail_msg("%s: allocation %lu failed: returned %d but the error says %d ('%s')",
                                 name, n, r, e.code, e.msg);
        }
        print_message("%s: %lu allocation failures injected, each reported\n", name, n - 1);
        return n - 1;
}

static void test_config(void **state) {
        struct input in;
        char *data = read_fixture("examples/config.yaml", &in.len);
        in.data = data;
        assert_true(sweep("mig-parted config", run_config, &in) > 0);
        free(data);
}

static void test_hooks(void **state) {
        struct input in;
        char *data = read_fixture("examples/hooks.yaml", &in.len);
        in.data = data;
        assert_true(sweep("hooks", run_hooks, &in) > 0);
        free(data);
}

static void test_plugin_config(void **state) {
        static const char doc[] =
                "version: v1\n"
                "flags:\n  migStrategy: mixed\n  failOnInitError: true\n"
                "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                "      - name: nvidia.com/gpu\n        replicas: 4\n"
                "      - name: nvidia.com/mig-1g.10gb\n        replicas: 2\n        devices: [0, 1]\n";
        struct input in = {doc, sizeof(doc) - 1};
        assert_true(sweep("plugin config", run_plugin_config, &in) > 0);
}

static void test_resource_config(void **state) {
        static const char s[] = "gpu:shared:4,nvidia.com/mig-1g.10gb:small:2";
        struct input in = {s, sizeof(s) - 1};
        assert_true(sweep("--resource-config", run_resource_config, &in) > 0);
}

static void test_sched_config(void **state) {
        static const char doc[] =
                "version: v1\n"
                "nodeconfig:\n  - name: n1\n    operatingmode: mig\n  - name: n2\n    devicesplitcount: 4\n";
        struct input in = {doc, sizeof(doc) - 1};
        assert_true(sweep("scheduler config", run_sched_config, &in) > 0);
}

static void test_yaml(void **state) {
        static const char doc[] = "a: [1, 2, {b: c}]\nd:\n  e: 'f'\n  g: &x [h]\n  i: *x\n";
        struct input in = {doc, sizeof(doc) - 1};
        assert_true(sweep("yaml tree", run_yaml, &in) > 0);
}

static void test_profile_name(void **state) {
        static const char s[] = "1c.3g.20gb+me";
        struct input in = {s, sizeof(s) - 1};
        /* mig/profile.c is documented "no allocation": a parse makes none. */
        assert_int_equal(sweep("profile name", run_profile_name, &in), 0);
}

static void test_kubeconfig(void **state) {
        char path[4096];
        struct input in;

        snprintf(path, sizeof(path), "%s/tests/fixtures/kube/kubeconfig/config", source_dir());
        in.data = path;
        in.len = strlen(path);
        assert_true(sweep("kubeconfig", run_kubeconfig, &in) > 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_config),         cmocka_unit_test(test_hooks),
                cmocka_unit_test(test_plugin_config),  cmocka_unit_test(test_resource_config),
                cmocka_unit_test(test_sched_config),   cmocka_unit_test(test_yaml),
                cmocka_unit_test(test_profile_name),   cmocka_unit_test(test_kubeconfig),
        };

        json_set_alloc_funcs(json_alloc, json_dealloc);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
