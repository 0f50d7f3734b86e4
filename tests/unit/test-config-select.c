/* Unit tests for plugin/config-select: the config manager's choice of a
 * config from a directory, the link it writes, and the process it finds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/macro.h"
#include "plugin/config-select.h"

static char dir[PATH_MAX];

static void touch(const char *name) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fprintf(f, "version: v1\n");
        fclose(f);
}

static void rm(const char *name) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        assert_int_equal(unlink(p), 0);
}

static int setup(void **state) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        snprintf(dir, sizeof(dir), "%s/test-config-select.XXXXXX", base && *base ? base : "/tmp");
        if (base && *base)
                (void) mkdir(base, 0755);
        assert_non_null(mkdtemp(dir));
        return 0;
}

static int teardown(void **state) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        return system(cmd) == 0 ? 0 : -1;
}

/* choose(label, default, fallbacks) -> the name, "(empty)", or "error <errno>". */
static const char *choose(const char *label, const char *def, const char *fallbacks) {
        static char out[128];
        char *name = NULL;
        struct mk_error e = {0};
        int r = mk_dp_config_choose(dir, label, def, fallbacks, &name, &e);
        if (r < 0) {
                assert_true(e.msg[0] != 0);
                snprintf(out, sizeof(out), "error %d", -r);
        } else
                snprintf(out, sizeof(out), "%s", name ? name : "(empty)");
        free(name);
        return out;
}

static void test_choose(void **state) {
        char err[32];
        snprintf(err, sizeof(err), "error %d", ENOENT);
        assert_string_equal(choose("a", NULL, NULL), err); /* no files at all */

        touch("a100-40gb");
        /* A mounted ConfigMap's own entries are not configs. */
        touch("..2025_11_25_data");
        char sub[PATH_MAX + 16];
        snprintf(sub, sizeof(sub), "%s/..data", dir);
        assert_int_equal(mkdir(sub, 0755), 0);
        snprintf(sub, sizeof(sub), "%s/subdir", dir);
        assert_int_equal(mkdir(sub, 0755), 0);

        assert_string_equal(choose("a100-40gb", NULL, NULL), "a100-40gb");
        assert_string_equal(choose("h100", NULL, NULL), err);
        assert_string_equal(choose("../a100-40gb", NULL, NULL), err);
        assert_string_equal(choose("subdir", NULL, NULL), err);
        assert_string_equal(choose("..2025_11_25_data", NULL, NULL), err);
        /* Unset label: the default, which must exist. */
        assert_string_equal(choose(NULL, "a100-40gb", NULL), "a100-40gb");
        assert_string_equal(choose("", "h100", NULL), err);
        /* Then the fallbacks, in order. */
        assert_string_equal(choose(NULL, NULL, NULL), err);
        assert_string_equal(choose(NULL, NULL, "named"), err);
        assert_string_equal(choose(NULL, NULL, "named,single"), "a100-40gb");
        assert_string_equal(choose(NULL, NULL, "empty,single"), "(empty)");
        touch("h100");
        assert_string_equal(choose(NULL, NULL, "single"), err);
        assert_string_equal(choose(NULL, NULL, "single, empty"), "(empty)");
        touch("default");
        assert_string_equal(choose(NULL, NULL, "single,named"), "default");
        snprintf(err, sizeof(err), "error %d", EINVAL);
        assert_string_equal(choose(NULL, NULL, "newest"), err);
        rm("default");
        rm("h100");
}

static void test_link(void **state) {
        touch("one");
        touch("two");
        char dst[PATH_MAX + 16], target[PATH_MAX + 16];
        snprintf(dst, sizeof(dst), "%s/config.yaml", dir);
        struct mk_error e = {0};
        bool updated = false;
        assert_int_equal(mk_dp_config_link(dir, "one", dst, &updated, &e), 0);
        assert_true(updated);
        ssize_t n = readlink(dst, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_non_null(strstr(target, "/one"));
        assert_int_equal(mk_dp_config_link(dir, "one", dst, &updated, &e), 0);
        assert_false(updated);
        assert_int_equal(mk_dp_config_link(dir, "two", dst, &updated, &e), 0);
        assert_true(updated);
        n = readlink(dst, target, sizeof(target) - 1);
        target[n] = 0;
        assert_non_null(strstr(target, "/two"));
        /* The empty config: /dev/null. */
        assert_int_equal(mk_dp_config_link(dir, NULL, dst, &updated, &e), 0);
        assert_true(updated);
        n = readlink(dst, target, sizeof(target) - 1);
        target[n] = 0;
        assert_string_equal(target, "/dev/null");
        assert_int_equal(mk_dp_config_link(dir, NULL, dst, &updated, &e), 0);
        assert_false(updated);
        /* A regular file in the way is replaced. */
        assert_int_equal(unlink(dst), 0);
        touch("config.yaml");
        assert_int_equal(mk_dp_config_link(dir, "one", dst, &updated, &e), 0);
        assert_true(updated);
        assert_int_equal(mk_dp_config_link(dir, "../x", dst, &updated, &e), -EINVAL);
}

static void test_process_find(void **state) {
        char name[64];
        snprintf(name, sizeof(name), "mk-test-proc-%d", (int) getpid());
        pid_t pid;
        assert_int_equal(mk_process_find(name, &pid), -ESRCH);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                execl("/bin/sleep", name, "30", (char *) NULL);
                _exit(127);
        }
        int found = -ESRCH;
        for (int i = 0; i < 200 && found < 0; i++) {
                found = mk_process_find(name, &pid);
                if (found < 0)
                        usleep(10000);
        }
        assert_int_equal(found, 0);
        assert_int_equal(pid, child);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_choose),
                cmocka_unit_test(test_link),
                cmocka_unit_test(test_process_find),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
