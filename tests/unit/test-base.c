/* Unit tests for base/: error, log, dynbuf, fileio, parse, host, spawn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/hostlock.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "base/spawn.h"

/* Every cmocka test takes a `void **state` that most of these do not use. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Table rows fail with the input and both values in decimal. */
#define check_ll(input, got, want)                                                                    \
        do {                                                                                          \
                long long g_ = (long long) (got), w_ = (long long) (want);                            \
                if (g_ != w_)                                                                         \
                        fail_msg("%s:%d: input '%s': %s = %lld, want %lld", __FILE__, __LINE__,       \
                                 (input) ? (input) : "(null)", #got, g_, w_);                         \
        } while (0)
#define check_ull(input, got, want)                                                                   \
        do {                                                                                          \
                unsigned long long g_ = (unsigned long long) (got), w_ = (unsigned long long) (want); \
                if (g_ != w_)                                                                         \
                        fail_msg("%s:%d: input '%s': %s = %llu, want %llu", __FILE__, __LINE__,       \
                                 (input) ? (input) : "(null)", #got, g_, w_);                         \
        } while (0)

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static char tmpdir[PATH_MAX];

static int setup_tmpdir(void **state) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base)
                (void) mkdir(base, 0755);
        snprintf(tmpdir, sizeof(tmpdir), "%s/test-base.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-base.XXXXXX");
                if (!mkdtemp(tmpdir))
                        return -1;
        }
        return 0;
}

static int teardown_tmpdir(void **state) {
        const char *argv[] = {"rm", "-rf", "--", tmpdir, NULL};
        struct mk_spawn_opts o = {.argv = argv};
        struct mk_spawn_result res;
        if (mk_spawn(&o, &res, NULL) == 0)
                mk_spawn_result_done(&res);
        return 0;
}

static char *tmp_path(const char *name) {
        char *p;
        assert_int_equal(mk_path_join(tmpdir, name, &p), 0);
        return p;
}

static void write_file(const char *path, const void *data, size_t n) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, data, n), (ssize_t) n);
        close(fd);
}

/* ---- error ---- */

static void test_error_set(void **state) {
        struct mk_error e = {};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 32];

        assert_int_equal(mk_error_set(&e, -EINVAL, "bad value '%s'", "x"), -EINVAL);
        assert_int_equal(e.code, -EINVAL);
        assert_string_equal(e.msg, "bad value 'x'");
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), "bad value 'x'");

        /* A second set replaces everything, location included. */
        assert_int_equal(mk_error_set_at(&e, -EBADMSG, "cfg.yaml", 3, 7, "unknown key '%s'", "foo"), -EBADMSG);
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), "cfg.yaml:3:7: unknown key 'foo'");
        assert_int_equal(mk_error_set(&e, -ENOENT, "gone"), -ENOENT);
        assert_string_equal(e.file, "");
        assert_int_equal(e.line, 0);
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), "gone");
}

static void test_error_locations(void **state) {
        static const struct {
                const char *file;
                unsigned line, column;
                const char *field;
                const char *want;
        } cases[] = {
                {"a.yaml", 1, 1, NULL, "a.yaml:1:1: m"},
                {"a.yaml", 0, 0, NULL, "a.yaml: m"},
                {NULL, 0, 0, "mig-configs.all[0].devices", "mig-configs.all[0].devices: m"},
                {NULL, 0, 0, "", "m"},
        };
        char buf[1024];
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_error e = {};
                if (cases[i].field)
                        assert_int_equal(mk_error_set_field(&e, -EINVAL, cases[i].field, "m"), -EINVAL);
                else
                        assert_int_equal(mk_error_set_at(&e, -EINVAL, cases[i].file, cases[i].line,
                                                         cases[i].column, "m"),
                                         -EINVAL);
                assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), cases[i].want);
        }
}

static void test_error_prefix(void **state) {
        struct mk_error e = {};
        char buf[1024];
        mk_error_set(&e, -EIO, "read failed");
        mk_error_prefix(&e, "GPU %u", 3);
        assert_string_equal(e.msg, "GPU 3: read failed");
        assert_int_equal(e.code, -EIO);
        mk_error_prefix(&e, "apply");
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), "apply: GPU 3: read failed");
}

static void test_error_truncation(void **state) {
        struct mk_error e = {};
        char big[2000];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;

        mk_error_set(&e, -E2BIG, "%s", big);
        assert_int_equal(strlen(e.msg), MK_ERROR_MSG_MAX - 1);
        assert_string_equal(e.msg + MK_ERROR_MSG_MAX - 4, "...");

        mk_error_set(&e, -E2BIG, "short");
        mk_error_prefix(&e, "%s", big);
        assert_int_equal(strlen(e.msg), MK_ERROR_MSG_MAX - 1);
        assert_string_equal(e.msg + MK_ERROR_MSG_MAX - 4, "...");

        /* A long file name is cut, not overflowed. */
        mk_error_set_at(&e, -EINVAL, big, 1, 2, "m");
        assert_int_equal(strlen(e.file), MK_ERROR_LOC_MAX - 1);

        /* Formatting into a small buffer stays NUL-terminated. */
        char small[8];
        mk_error_set(&e, -EINVAL, "0123456789");
        assert_string_equal(mk_error_format(&e, small, sizeof(small)), "0123456");
}

static void test_error_null(void **state) {
        char buf[64];
        assert_int_equal(mk_error_set(NULL, -ENOENT, "x %d", 1), -ENOENT);
        assert_int_equal(mk_error_set_at(NULL, -EINVAL, "f", 1, 1, "x"), -EINVAL);
        assert_int_equal(mk_error_set_field(NULL, -ERANGE, "a.b", "x"), -ERANGE);
        mk_error_prefix(NULL, "p");
        mk_error_clear(NULL);
        assert_string_equal(mk_error_format(NULL, buf, sizeof(buf)), "");
        assert_null(mk_error_format(NULL, NULL, 0));
}

static void test_error_unset_message(void **state) {
        struct mk_error e = {};
        char buf[128];
        mk_error_set(&e, -ENOENT, "%s", "");
        assert_string_equal(mk_error_format(&e, buf, sizeof(buf)), strerror(ENOENT));
        mk_error_clear(&e);
        assert_int_equal(e.code, 0);
        assert_string_equal(e.msg, "");
}

/* ---- log ---- */

static int log_pipe[2] = {-1, -1};

static int setup_log(void **state) {
        if (pipe2(log_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return -1;
        mk_log_set_fd(log_pipe[1]);
        mk_log_set_level(MK_LOG_INFO);
        return 0;
}

static int teardown_log(void **state) {
        mk_log_set_fd(STDERR_FILENO);
        mk_log_set_level(MK_LOG_INFO);
        (void) mk_log_parse_debug("none");
        close(log_pipe[0]);
        close(log_pipe[1]);
        log_pipe[0] = log_pipe[1] = -1;
        return 0;
}

/* Everything logged since the last call ("" when nothing). */
static const char *log_read(void) {
        static char buf[65536];
        size_t n = 0;
        for (;;) {
                ssize_t k = read(log_pipe[0], buf + n, sizeof(buf) - 1 - n);
                if (k <= 0)
                        break;
                n += (size_t) k;
        }
        buf[n] = 0;
        return buf;
}

static bool digits(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!isdigit((unsigned char) s[i]))
                        return false;
        return true;
}

static void test_log_line_shape(void **state) {
        (void) log_read();
        int line = __LINE__ + 1;
        log_info("hello '%s' %d", "world", 42);
        const char *l = log_read();

        /* I1121 23:17:10.000123    1234 test-base.c:42] msg */
        if (strlen(l) < 22)
                fail_msg("line too short: '%s'", l);
        assert_int_equal(l[0], 'I');
        if (!digits(l + 1, 4) || l[5] != ' ' || !digits(l + 6, 2) || l[8] != ':' || !digits(l + 9, 2) ||
            l[11] != ':' || !digits(l + 12, 2) || l[14] != '.' || !digits(l + 15, 6) || l[21] != ' ')
                fail_msg("bad timestamp in '%s'", l);
        int month = (l[1] - '0') * 10 + (l[2] - '0');
        if (month < 1 || month > 12)
                fail_msg("bad month in '%s'", l);

        const char *p = l + 21;
        while (*p == ' ')
                p++;
        char *end;
        long pid = strtol(p, &end, 10);
        assert_int_equal(pid, getpid());
        char want[128];
        snprintf(want, sizeof(want), " test-base.c:%d] hello 'world' 42\n", line);
        assert_string_equal(end, want);
}

static void test_log_levels(void **state) {
        static const struct {
                enum mk_log_level set;
                enum mk_log_level at;
                char letter; /* 0: filtered out */
        } cases[] = {
                {MK_LOG_ERROR, MK_LOG_ERROR, 'E'},   {MK_LOG_ERROR, MK_LOG_WARNING, 0},
                {MK_LOG_ERROR, MK_LOG_INFO, 0},      {MK_LOG_WARNING, MK_LOG_WARNING, 'W'},
                {MK_LOG_WARNING, MK_LOG_INFO, 0},    {MK_LOG_INFO, MK_LOG_INFO, 'I'},
                {MK_LOG_INFO, MK_LOG_DEBUG, 0},      {MK_LOG_DEBUG, MK_LOG_DEBUG, 'D'},
                {MK_LOG_DEBUG, MK_LOG_ERROR, 'E'},
        };
        (void) mk_log_parse_debug("none");
        (void) log_read();
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                mk_log_set_level(cases[i].set);
                assert_int_equal(mk_log_get_level(), cases[i].set);
                assert_int_equal(mk_log_full(cases[i].at, NULL, -EIO, "case %zu", i), -EIO);
                const char *l = log_read();
                if (cases[i].letter == 0 ? l[0] != 0 : l[0] != cases[i].letter)
                        fail_msg("case %zu (level %d, at %d): got '%s', want letter '%c'", i, cases[i].set,
                                 cases[i].at, l, cases[i].letter ? cases[i].letter : '-');
        }
        mk_log_set_level(MK_LOG_INFO);
}

static void test_log_areas(void **state) {
        mk_log_set_level(MK_LOG_INFO);
        (void) log_read();

        assert_int_equal(mk_log_parse_debug("nvml,k8s"), 0);
        assert_true(mk_log_area_enabled("nvml"));
        assert_true(mk_log_area_enabled("k8s"));
        assert_false(mk_log_area_enabled("plugin"));
        assert_false(mk_log_area_enabled("nvm"));
        /* A typo is refused, naming the unknown area, and changes nothing. */
        char bad[16] = "";
        assert_int_equal(mk_log_parse_debug("nvmll"), -ENOENT);
        assert_true(mk_log_area_enabled("nvml"));
        assert_int_equal(mk_log_check_areas("nvml,k8ss", bad, sizeof(bad)), -ENOENT);
        assert_string_equal(bad, "k8ss");
        assert_int_equal(mk_log_check_areas("all", NULL, 0), 0);
        assert_non_null(strstr(mk_log_known_areas(), "spawn"));
        assert_false(mk_log_area_enabled(NULL));

        log_debug_area("k8s", "watch restarted");
        const char *l = log_read();
        assert_int_equal(l[0], 'D');
        assert_non_null(strstr(l, "] watch restarted\n"));
        log_debug_area("plugin", "hidden");
        assert_string_equal(log_read(), "");
        log_debug("plain debug stays hidden");
        assert_string_equal(log_read(), "");

        assert_int_equal(mk_log_parse_debug("all"), 0);
        assert_true(mk_log_area_enabled("plugin"));
        log_debug_area("plugin", "shown");
        assert_non_null(strstr(log_read(), "] shown\n"));

        assert_int_equal(mk_log_parse_debug(""), -EINVAL);
        assert_int_equal(mk_log_parse_debug(NULL), -EINVAL);
        char big[400];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        assert_int_equal(mk_log_parse_debug(big), -EINVAL);
        (void) mk_log_parse_debug("none");
        assert_false(mk_log_area_enabled("plugin"));
}

static void test_log_errno(void **state) {
        mk_log_set_level(MK_LOG_INFO);
        (void) log_read();
        errno = EAGAIN;
        assert_int_equal(log_error_errno(-ENOENT, "Failed to open '%s': %m", "/x"), -ENOENT);
        assert_int_equal(errno, EAGAIN);
        const char *l = log_read();
        assert_int_equal(l[0], 'E');
        char want[128];
        snprintf(want, sizeof(want), "] Failed to open '/x': %s\n", strerror(ENOENT));
        const char *tail = strstr(l, "] ");
        assert_non_null(tail);
        assert_string_equal(tail, want);

        /* Filtered out, it still returns the error. */
        assert_int_equal(log_debug_errno(-EBUSY, "x: %m"), -EBUSY);
        assert_string_equal(log_read(), "");
}

static void test_log_long_line(void **state) {
        mk_log_set_level(MK_LOG_INFO);
        (void) log_read();
        char *big = malloc(10000);
        assert_non_null(big);
        memset(big, 'y', 9999);
        big[9999] = 0;
        log_info("%s", big);
        free(big);
        const char *l = log_read();
        size_t n = strlen(l);
        assert_int_equal(n, 4095);
        assert_string_equal(l + n - 4, "...\n");
}

/* A name carrying control characters cannot forge a second line or drive
 * the terminal: the line comes out escaped, one line (issue 17). */
static void test_log_escapes_controls(void **state) {
        mk_log_set_level(MK_LOG_INFO);
        (void) log_read();
        log_info("Node '%s' has junk", "n1\nI1121 00:00:00.000000 1 forged.c:1] evil\r\x1b[31m\x7f\tx\xc2\x9by\x01");
        const char *l = log_read();
        assert_int_equal(l[0], 'I');
        const char *nl = strchr(l, '\n');
        assert_non_null(nl);
        assert_int_equal(nl[1], 0); /* one line */
        const char *tail = strstr(l, "] ");
        assert_non_null(tail);
        assert_string_equal(tail, "] Node 'n1\\nI1121 00:00:00.000000 1 forged.c:1] evil\\r\\x1b[31m\\x7f\\tx\\u009by"
                                  "\\x01' has junk\n");
        /* Plain UTF-8 stays as it is. */
        log_info("pod '%s'", "caf\xc3\xa9 \xe2\x9c\x93");
        assert_non_null(strstr(log_read(), "] pod 'caf\xc3\xa9 \xe2\x9c\x93'\n"));

        /* Escapes never split at the buffer's end; the copy says what it took. */
        char buf[8];
        assert_int_equal(mk_log_escape("ab\ncd", buf, sizeof(buf)), 5);
        assert_string_equal(buf, "ab\\ncd");
        assert_int_equal(mk_log_escape("abcde\x1b", buf, sizeof(buf)), 5);
        assert_string_equal(buf, "abcde");
        assert_int_equal(mk_log_escape("x", buf, 0), 0);

        /* A long line of newlines stays one line, cut with "...". */
        char *big = malloc(5000);
        assert_non_null(big);
        memset(big, '\n', 4999);
        big[4999] = 0;
        log_info("%s", big);
        free(big);
        l = log_read();
        size_t n = strlen(l);
        assert_in_range(n, 4090, 4095); /* an escape that does not fit whole is left out */
        assert_ptr_equal(strchr(l, '\n'), l + n - 1);
        assert_string_equal(l + n - 4, "...\n");
}

/* ---- dynbuf ---- */

static void test_buf_cap_boundary(void **state) {
        static const size_t caps[] = {1, 2, 63, 64, 65, 127, 128, 1000, 4096};
        for (size_t i = 0; i < ELEMENTSOF(caps); i++) {
                size_t cap = caps[i];
                struct mk_buf b;
                mk_buf_init(&b, cap);
                for (size_t k = 0; k < cap; k++)
                        check_ll("putc", mk_buf_putc(&b, (char) ('a' + k % 26)), 0);
                check_ull("len", b.len, cap);
                check_ll("putc over cap", mk_buf_putc(&b, 'z'), -E2BIG);
                check_ll("append over cap", mk_buf_append(&b, "z", 1), -E2BIG);
                check_ll("append nothing", mk_buf_append(&b, "", 0), 0);
                check_ll("printf over cap", mk_buf_printf(&b, "%d", 1), -E2BIG);
                check_ull("len after", b.len, cap);
                check_ll("NUL", b.data[cap], 0);
                check_ull("strlen", strlen(mk_buf_str(&b)), cap);
                if (b.alloc > cap + 1)
                        fail_msg("cap %zu: allocated %zu", cap, b.alloc);

                /* The same with one append of exactly cap bytes. */
                char *blob = malloc(cap + 1);
                assert_non_null(blob);
                memset(blob, 'q', cap + 1);
                mk_buf_reset(&b);
                check_ll("append cap+1", mk_buf_append(&b, blob, cap + 1), -E2BIG);
                check_ull("len after failed append", b.len, 0);
                check_ll("append cap", mk_buf_append(&b, blob, cap), 0);
                check_ull("len", b.len, cap);
                free(blob);
                mk_buf_done(&b);
                assert_null(b.data);
                assert_int_equal(b.cap, cap);
        }
}

static void test_buf_atomic(void **state) {
        struct mk_buf b;
        mk_buf_init(&b, 10);
        assert_string_equal(mk_buf_str(&b), "");
        assert_int_equal(mk_buf_puts(&b, "12345"), 0);
        assert_int_equal(mk_buf_puts(&b, "123456"), -E2BIG);
        assert_string_equal(mk_buf_str(&b), "12345");
        assert_int_equal(mk_buf_printf(&b, "%s-%d", "ab", 12345), -E2BIG);
        assert_string_equal(mk_buf_str(&b), "12345");
        assert_int_equal(mk_buf_printf(&b, "%s-%d", "a", 123), 0);
        assert_string_equal(mk_buf_str(&b), "12345a-123");
        assert_int_equal(b.len, 10);
        mk_buf_done(&b);
}

/* A reservation makes room at once, within the cap; appends then fit
 * without moving the data. */
static void test_buf_reserve(void **state) {
        (void) state;
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, 100);
        assert_int_equal(mk_buf_reserve(&b, 101), -E2BIG);
        assert_null(b.data);
        assert_int_equal(mk_buf_reserve(&b, 100), 0);
        assert_true(b.alloc >= 101);
        const char *p = b.data;
        for (int i = 0; i < 10; i++)
                assert_int_equal(mk_buf_puts(&b, "0123456789"), 0);
        assert_ptr_equal(b.data, p);
        assert_int_equal(b.len, 100);
        assert_int_equal(mk_buf_reserve(&b, 1), -E2BIG);
        assert_int_equal(mk_buf_reserve(&b, 0), 0);
}

static void test_buf_printf(void **state) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (int i = 0; i < 1000; i++)
                assert_int_equal(mk_buf_printf(&b, "%d,", i), 0);
        assert_int_equal(b.len, 10 * 2 + 90 * 3 + 900 * 4);
        assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
        assert_string_equal(b.data + b.len - 4, "999,");
        mk_buf_done(&b);

        mk_buf_init(&b, 5);
        assert_int_equal(mk_buf_printf(&b, "%s", ""), 0);
        assert_int_equal(mk_buf_printf(&b, "%05d", 42), 0);
        assert_string_equal(mk_buf_str(&b), "00042");
        mk_buf_done(&b);
}

static void test_buf_take(void **state) {
        struct mk_buf b;
        mk_buf_init(&b, 100);
        char *s = mk_buf_take(&b);
        assert_non_null(s);
        assert_string_equal(s, "");
        free(s);

        assert_int_equal(mk_buf_puts(&b, "abc"), 0);
        s = mk_buf_take(&b);
        assert_string_equal(s, "abc");
        free(s);
        assert_null(b.data);
        assert_int_equal(b.len, 0);
        assert_int_equal(b.alloc, 0);
        assert_int_equal(b.cap, 100);
        assert_int_equal(mk_buf_puts(&b, "again"), 0);
        assert_string_equal(mk_buf_str(&b), "again");
        mk_buf_done(&b);
        mk_buf_done(&b);
        mk_buf_done(NULL);
}

static void test_buf_binary_and_zero_cap(void **state) {
        struct mk_buf b;
        mk_buf_init(&b, 8);
        assert_int_equal(mk_buf_append(&b, "a\0b", 3), 0);
        assert_int_equal(b.len, 3);
        assert_memory_equal(b.data, "a\0b\0", 4);
        mk_buf_done(&b);

        mk_buf_init(&b, 0);
        assert_int_equal(mk_buf_putc(&b, 'x'), -E2BIG);
        assert_int_equal(mk_buf_printf(&b, "x"), -E2BIG);
        assert_int_equal(mk_buf_append(&b, "", 0), 0);
        assert_string_equal(mk_buf_str(&b), "");
        mk_buf_done(&b);
}

static void test_buf_large(void **state) {
        struct mk_buf b;
        const size_t cap = 3 * 1000 * 1000 + 7;
        mk_buf_init(&b, cap);
        char chunk[1000];
        memset(chunk, 'k', sizeof(chunk));
        size_t total = 0;
        int r;
        while ((r = mk_buf_append(&b, chunk, sizeof(chunk))) == 0)
                total += sizeof(chunk);
        assert_int_equal(r, -E2BIG);
        assert_int_equal(total, 3 * 1000 * 1000);
        assert_int_equal(mk_buf_append(&b, chunk, 7), 0);
        assert_int_equal(mk_buf_putc(&b, 'x'), -E2BIG);
        assert_int_equal(b.len, cap);
        assert_true(b.alloc <= cap + 1);
        mk_buf_done(&b);
}

/* ---- mk_read_file ---- */

static void test_read_file(void **state) {
        _cleanup_free_ char *p = tmp_path("hundred");
        char data[100];
        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (char) i; /* includes a NUL byte */
        write_file(p, data, sizeof(data));

        char *got = NULL;
        size_t len = 0;
        struct mk_error e = {};
        assert_int_equal(mk_read_file(p, 100, &got, &len, &e), 0);
        assert_int_equal(len, 100);
        assert_memory_equal(got, data, 100);
        assert_int_equal(got[100], 0);
        free(got);

        assert_int_equal(mk_read_file(p, 1000, &got, NULL, NULL), 0);
        free(got);

        /* One byte over the cap. ret_* untouched. */
        char *sentinel = (char *) "untouched";
        got = sentinel;
        len = 12345;
        assert_int_equal(mk_read_file(p, 99, &got, &len, &e), -E2BIG);
        assert_ptr_equal(got, sentinel);
        assert_int_equal(len, 12345);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof(want), "'%s' is larger than 99 bytes", p);
        assert_string_equal(e.msg, want);
        assert_int_equal(e.code, -E2BIG);
}

static void test_read_file_errors(void **state) {
        _cleanup_free_ char *missing = tmp_path("no-such-file");
        char *got = NULL;
        struct mk_error e = {};
        assert_int_equal(mk_read_file(missing, 10, &got, NULL, &e), -ENOENT);
        assert_null(got);
        assert_non_null(strstr(e.msg, missing));
        assert_non_null(strstr(e.msg, strerror(ENOENT)));

        assert_int_equal(mk_read_file(tmpdir, 10, &got, NULL, &e), -EISDIR);
        assert_non_null(strstr(e.msg, tmpdir));
        assert_int_equal(mk_read_file(missing, 10, &got, NULL, NULL), -ENOENT);

        _cleanup_free_ char *empty = tmp_path("empty");
        write_file(empty, "", 0);
        size_t len = 99;
        assert_int_equal(mk_read_file(empty, 1, &got, &len, &e), 0);
        assert_int_equal(len, 0);
        assert_string_equal(got, "");
        free(got);
}

/* A FIFO, a device or a socket where a file should be: refused at once, never
 * waited on (issue 27: a FIFO in place of the plugin's handouts file held it
 * in open() before it registered). The alarm ends a test that blocks. */
static void test_read_file_special(void **state) {
        _cleanup_free_ char *fifo = tmp_path("fifo");
        assert_int_equal(mkfifo(fifo, 0600), 0);
        char *got = NULL;
        struct mk_error e = {};
        alarm(10);
        assert_int_equal(mk_read_file(fifo, 100, &got, NULL, &e), -EINVAL);
        assert_null(got);
        assert_non_null(strstr(e.msg, "it is a FIFO, not a regular file"));
        assert_non_null(strstr(e.msg, fifo));
        assert_int_equal(mk_read_text_file(fifo, 100, &got, &e), -EINVAL);
        assert_int_equal(mk_read_sysfs_attr(fifo, &got, &e), -EINVAL);
        /* With a writer too: still refused, not read. */
        int w = open(fifo, O_RDWR | O_NONBLOCK);
        assert_true(w >= 0);
        assert_int_equal(write(w, "x", 1), 1);
        assert_int_equal(mk_read_file(fifo, 100, &got, NULL, &e), -EINVAL);
        close(w);
        assert_int_equal(mk_read_file("/dev/zero", 100, &got, NULL, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "a character device"));
        alarm(0);
        assert_int_equal(unlink(fifo), 0);
        /* A link to a regular file is read. */
        _cleanup_free_ char *target = tmp_path("target"), *link = tmp_path("link");
        write_file(target, "data", 4);
        assert_int_equal(symlink(target, link), 0);
        assert_int_equal(mk_read_file(link, 100, &got, NULL, &e), 0);
        assert_string_equal(got, "data");
        free(got);
        assert_int_equal(unlink(link), 0);
        assert_int_equal(unlink(target), 0);
}

/* ---- the host lock ---- */

static int lock_waits;
static char lock_what[1024];
static void on_lock_wait(void *userdata, const char *what) {
        (void) userdata;
        lock_waits++;
        snprintf(lock_what, sizeof(lock_what), "%s", what);
}

static void test_host_lock(void **state) {
        _cleanup_free_ char *root = tmp_path("run");
        setenv("MIGKIT_RUN_ROOT", root, 1);
        struct mk_host h = {};
        assert_int_equal(mk_host_init_from_env(&h), 0);
        unsetenv("MIGKIT_RUN_ROOT");
        _cleanup_free_ char *path = NULL;
        assert_int_equal(mk_host_lock_path(&h, &path), 0);
        char want[PATH_MAX + 32];
        snprintf(want, sizeof(want), "%s/migkit/mig.lock", root);
        assert_string_equal(path, want);

        struct mk_error e = {};
        int fd = -1, fd2 = -1;
        struct mk_host_lock_opts first = {.who = "unit test\x1b[31m"};
        assert_int_equal(mk_host_lock_take(&h, &first, &fd, &e), 0); /* creates run/migkit */
        assert_true(fd >= 0);
        /* A second holder waits, says for what and for whom, then times out. */
        struct mk_host_lock_opts second = {.timeout_ms = 200, .waiting = on_lock_wait};
        lock_waits = 0;
        assert_int_equal(mk_host_lock_take(&h, &second, &fd2, &e), -ETIMEDOUT);
        assert_int_equal(fd2, -1);
        assert_int_equal(lock_waits, 1);
        char held[128];
        snprintf(held, sizeof(held), "held by pid %d (unit test\\x1b[31m)", (int) getpid());
        assert_non_null(strstr(lock_what, held));
        assert_non_null(strstr(lock_what, path));
        assert_non_null(strstr(e.msg, held));
        assert_non_null(strstr(e.msg, "Timed out after 0."));
        /* A cancel flag stops the wait. */
        atomic_bool cancel = true;
        struct mk_host_lock_opts third = {.timeout_ms = -1, .cancel = &cancel, .waiting = on_lock_wait};
        assert_int_equal(mk_host_lock_take(&h, &third, &fd2, &e), -ECANCELED);
        /* Released: the next one takes it at once, without waiting. */
        mk_host_lock_release(&fd);
        assert_int_equal(fd, -1);
        lock_waits = 0;
        assert_int_equal(mk_host_lock_take(&h, &second, &fd2, &e), 0);
        assert_int_equal(lock_waits, 0);
        mk_host_lock_release(&fd2);
        mk_host_lock_release(&fd2); /* accepts -1 */
        /* A FIFO in its place is refused, not waited on. */
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mkfifo(path, 0600), 0);
        alarm(10);
        assert_true(mk_host_lock_take(&h, NULL, &fd, &e) < 0);
        alarm(0);
        assert_non_null(strstr(e.msg, path));
        assert_int_equal(unlink(path), 0);
        mk_host_done(&h);

        /* Without permission to create it (not root): a warning, no lock, success. */
        _cleanup_free_ char *ro = tmp_path("ro");
        assert_int_equal(mkdir(ro, 0555), 0);
        if (getuid() == 0) {
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        if (setgid(65534) < 0 || setuid(65534) < 0)
                                _exit(3);
                        char rr[PATH_MAX + 8];
                        snprintf(rr, sizeof(rr), "%s/run", ro);
                        struct mk_host hh = {.run_root = rr};
                        int lfd = 7;
                        int q = mk_host_lock_take(&hh, NULL, &lfd, NULL);
                        _exit(q == 0 && lfd == -1 ? 0 : 1);
                }
                int st = 0;
                assert_int_equal(waitpid(pid, &st, 0), pid);
                assert_true(WIFEXITED(st));
                assert_int_equal(WEXITSTATUS(st), 0);
        }
}

static void test_read_file_stdin(void **state) {
        _cleanup_free_ char *p = tmp_path("stdin");
        write_file(p, "from stdin\n", 11);
        int saved = dup(STDIN_FILENO);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        assert_true(saved >= 0 && fd >= 0);
        assert_int_equal(dup2(fd, STDIN_FILENO), STDIN_FILENO);
        close(fd);

        char *got = NULL;
        size_t len = 0;
        int r = mk_read_file("-", 100, &got, &len, NULL);
        dup2(saved, STDIN_FILENO);
        close(saved);
        assert_int_equal(r, 0);
        assert_int_equal(len, 11);
        assert_string_equal(got, "from stdin\n");
        free(got);
}

static void test_read_sysfs_attr(void **state) {
        _cleanup_free_ char *p = tmp_path("device");
        write_file(p, "0x20b0\n", 7);
        char *v = NULL;
        assert_int_equal(mk_read_sysfs_attr(p, &v, NULL), 0);
        assert_string_equal(v, "0x20b0");
        free(v);

        _cleanup_free_ char *big = tmp_path("big-attr");
        char data[MK_MAX_SYSFS_BYTES + 1];
        memset(data, '1', sizeof(data));
        write_file(big, data, sizeof(data));
        struct mk_error e = {};
        assert_int_equal(mk_read_sysfs_attr(big, &v, &e), -E2BIG);
        write_file(big, data, sizeof(data) - 1);
        assert_int_equal(mk_read_sysfs_attr(big, &v, &e), 0);
        assert_int_equal(strlen(v), MK_MAX_SYSFS_BYTES);
        free(v);
}

/* ---- fileio: atomic replace, mkdir -p ---- */

/* The names in `dir`, sorted, joined with ' '. */
static void dir_names(const char *dir, char *buf, size_t size) {
        const char *argv[] = {"sh", "-c", "ls -A \"$0\" | tr '\\n' ' '", dir, NULL};
        struct mk_spawn_opts o = {.argv = argv, .capture = true, .output_cap = 4096};
        struct mk_spawn_result res;
        assert_int_equal(mk_spawn(&o, &res, NULL), 0);
        snprintf(buf, size, "%s", res.output ? res.output : "");
        mk_spawn_result_done(&res);
}

static void test_write_atomic(void **state) {
        _cleanup_free_ char *dir = tmp_path("atomic");
        assert_int_equal(mkdir(dir, 0755), 0);
        _cleanup_free_ char *path = NULL;
        assert_int_equal(mk_path_join(dir, "file", &path), 0);
        write_file(path, "a much longer old content\n", 26);
        struct mk_error e = {};
        assert_int_equal(mk_write_file_atomic(path, "new\n", 4, 0600, &e), 0);
        char *text = NULL;
        assert_int_equal(mk_read_file(path, 4096, &text, NULL, NULL), 0);
        assert_string_equal(text, "new\n");
        free(text);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        /* An empty write gives an empty file; nothing is left beside it. */
        assert_int_equal(mk_write_file_atomic(path, NULL, 0, 0644, &e), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        char names[256];
        dir_names(dir, names, sizeof(names));
        assert_string_equal(names, "file ");
}

/* A failed write leaves the old file and no temporary file. */
static void test_write_atomic_failure(void **state) {
        _cleanup_free_ char *dir = tmp_path("atomic-fail");
        assert_int_equal(mkdir(dir, 0755), 0);
        _cleanup_free_ char *path = NULL, *inner = NULL;
        assert_int_equal(mk_path_join(dir, "target", &path), 0);
        /* A non-empty directory in the way: refused before anything is written. */
        assert_int_equal(mkdir(path, 0755), 0);
        assert_int_equal(mk_path_join(path, "keep", &inner), 0);
        write_file(inner, "old", 3);
        struct mk_error e = {};
        int r = mk_write_file_atomic(path, "new\n", 4, 0644, &e);
        assert_int_equal(r, -EISDIR);
        assert_non_null(strstr(e.msg, "not a regular file"));
        assert_non_null(strstr(e.msg, path));
        char names[256];
        dir_names(dir, names, sizeof(names));
        assert_string_equal(names, "target ");
        char *text = NULL;
        assert_int_equal(mk_read_file(inner, 4096, &text, NULL, NULL), 0);
        assert_string_equal(text, "old");
        free(text);

        /* A directory that does not exist: nothing created, the error names the path. */
        _cleanup_free_ char *missing = NULL;
        assert_int_equal(mk_path_join(dir, "missing/file", &missing), 0);
        mk_error_clear(&e);
        assert_int_equal(mk_write_file_atomic(missing, "x", 1, 0644, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "temporary file"));
        assert_non_null(strstr(e.msg, missing));

        /* Not a regular file (a FIFO here; /dev/full as root): left as it is. */
        _cleanup_free_ char *fifo = NULL;
        struct stat st;
        assert_int_equal(mk_path_join(dir, "fifo", &fifo), 0);
        assert_int_equal(mkfifo(fifo, 0600), 0);
        mk_error_clear(&e);
        assert_int_equal(mk_write_file_atomic(fifo, "x", 1, 0644, &e), -EEXIST);
        assert_non_null(strstr(e.msg, "not a regular file"));
        assert_int_equal(lstat(fifo, &st), 0);
        assert_true(S_ISFIFO(st.st_mode));
        mk_error_clear(&e);
        assert_int_equal(mk_write_file_atomic(dir, "x", 1, 0644, &e), -EISDIR);
}

/* Temporary files are "<path>.tmp.<pid>.<8 hex>" (so a later start can
 * find the ones a crash left) and created with O_EXCL: another writer's
 * stays untouched. */
static void test_write_atomic_temp_name(void **state) {
        _cleanup_free_ char *dir = tmp_path("atomic-name");
        assert_int_equal(mkdir(dir, 0755), 0);
        _cleanup_free_ char *path = NULL;
        assert_int_equal(mk_path_join(dir, "f", &path), 0);
        /* A read-only directory: the temporary file cannot be created, and
         * the message says which. Root ignores the mode, so only check when
         * the create did fail. */
        assert_int_equal(chmod(dir, 0555), 0);
        struct mk_error e = {};
        int r = mk_write_file_atomic(path, "x", 1, 0644, &e);
        assert_int_equal(chmod(dir, 0755), 0);
        if (r < 0) {
                assert_int_equal(r, -EACCES);
                assert_non_null(strstr(e.msg, "temporary file"));
        }
        (void) unlink(path);
        /* Stale temporary files of another (dead) writer stay as they are;
         * the new content lands whole. */
        _cleanup_free_ char *stale = NULL;
        assert_true(asprintf(&stale, "%s" MK_TEMP_FILE_INFIX "%d.%08x", path, 1, 0xdeadbeefu) > 0);
        write_file(stale, "stale", 5);
        assert_int_equal(mk_write_file_atomic(path, "y", 1, 0644, &e), 0);
        char names[256];
        dir_names(dir, names, sizeof(names));
        assert_string_equal(names, "f f.tmp.1.deadbeef ");
}

/* mk_lock_for_write(): under the writers' lock, the temporary files of dead
 * writers of that file go (SIGKILL between create and rename leaves them);
 * another file's, and names not of our exact form, stay. The lock is
 * exclusive: a second taker would wait. */
static void test_lock_for_write(void **state) {
        _cleanup_free_ char *dir = tmp_path("lock-write");
        assert_int_equal(mkdir(dir, 0755), 0);
        _cleanup_free_ char *path = NULL, *stale1 = NULL, *stale2 = NULL, *other = NULL;
        assert_int_equal(mk_path_join(dir, "f", &path), 0);
        assert_true(asprintf(&stale1, "%s" MK_TEMP_FILE_INFIX "%d.%08x", path, 1, 0xdeadbeefu) > 0);
        assert_true(asprintf(&stale2, "%s" MK_TEMP_FILE_INFIX "%d.%08x", path, 4242, 0x0123abcdu) > 0);
        assert_true(asprintf(&other, "%s/g" MK_TEMP_FILE_INFIX "1.deadbeef", dir) > 0);
        write_file(stale1, "stale", 5);
        write_file(stale2, "stale", 5);
        write_file(other, "other", 5);
        static const char *const keep[] = {"f.tmp.backup", "f.tmp.1.deadbeef0", "f.tmp.1.DEADBEEF", "f.tmp..deadbeef"};
        for (size_t i = 0; i < ELEMENTSOF(keep); i++) {
                _cleanup_free_ char *k = NULL;
                assert_int_equal(mk_path_join(dir, keep[i], &k), 0);
                write_file(k, "k", 1);
        }
        struct mk_error e = {};
        int fd = -1;
        assert_int_equal(mk_lock_for_write(path, &fd, &e), 2);
        assert_true(fd >= 0);
        _cleanup_free_ char *lock = NULL;
        assert_true(asprintf(&lock, "%s.lock", path) > 0);
        _cleanup_close_ int second = open(lock, O_RDWR | O_CLOEXEC);
        assert_true(second >= 0);
        assert_int_equal(flock(second, LOCK_EX | LOCK_NB), -1);
        assert_int_equal(errno, EWOULDBLOCK);
        assert_int_equal(mk_write_file_atomic(path, "y", 1, 0644, &e), 0);
        close(fd);
        assert_int_equal(flock(second, LOCK_EX | LOCK_NB), 0);
        assert_int_equal(flock(second, LOCK_UN), 0);
        char names[512];
        dir_names(dir, names, sizeof(names));
        assert_string_equal(names, "f f.lock f.tmp..deadbeef f.tmp.1.DEADBEEF f.tmp.1.deadbeef0 f.tmp.backup "
                                   "g.tmp.1.deadbeef ");
        /* Nothing left: 0 removed. */
        fd = -1;
        assert_int_equal(mk_lock_for_write(path, &fd, &e), 0);
        close(fd);
        /* A directory that does not exist: the lock file cannot be made. */
        _cleanup_free_ char *missing = NULL;
        assert_int_equal(mk_path_join(dir, "no/such", &missing), 0);
        e = (struct mk_error){};
        assert_int_equal(mk_lock_for_write(missing, &fd, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "lock file"));
}

static void test_mkdir_parents(void **state) {
        _cleanup_free_ char *deep = tmp_path("mk/a/b/c");
        struct mk_error e = {};
        assert_int_equal(mk_mkdir_parents(deep, 0755, &e), 0);
        struct stat st;
        assert_int_equal(stat(deep, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        /* Again: nothing to do. */
        assert_int_equal(mk_mkdir_parents(deep, 0755, &e), 0);
        /* A file in the way. */
        _cleanup_free_ char *file = tmp_path("mk/a/file");
        write_file(file, "x", 1);
        assert_int_equal(mk_mkdir_parents(file, 0755, &e), -ENOTDIR);
        assert_non_null(strstr(e.msg, file));
        _cleanup_free_ char *below = tmp_path("mk/a/file/sub");
        assert_true(mk_mkdir_parents(below, 0755, &e) < 0);
        assert_int_equal(mk_fsync_parent_dir(deep), 0);
}

/* ---- parse ---- */

#define SENTINEL32 0xdeadbeefU
#define SENTINEL64 0xdeadbeefcafef00dULL

static void test_parse_u32(void **state) {
        static const struct {
                const char *s;
                int r;
                uint32_t v;
        } cases[] = {
                {"0", 0, 0},
                {"1", 0, 1},
                {"007", 0, 7},
                {"4294967295", 0, UINT32_MAX},
                {"4294967296", -ERANGE, 0},
                {"18446744073709551615", -ERANGE, 0},
                {"99999999999999999999999", -ERANGE, 0},
                {"", -EINVAL, 0},
                {NULL, -EINVAL, 0},
                {" 1", -EINVAL, 0},
                {"1 ", -EINVAL, 0},
                {"1\n", -EINVAL, 0},
                {"\t1", -EINVAL, 0},
                {"-1", -EINVAL, 0},
                {"+1", -EINVAL, 0},
                {"-0", -EINVAL, 0},
                {"0x10", -EINVAL, 0},
                {"1a", -EINVAL, 0},
                {"a", -EINVAL, 0},
                {"1.0", -EINVAL, 0},
                {"1e3", -EINVAL, 0},
                {"1_000", -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint32_t v = SENTINEL32;
                check_ll(cases[i].s, mk_parse_u32(cases[i].s, &v), cases[i].r);
                check_ull(cases[i].s, v, cases[i].r == 0 ? cases[i].v : SENTINEL32);
        }
}

static void test_parse_u64(void **state) {
        static const struct {
                const char *s;
                int r;
                uint64_t v;
        } cases[] = {
                {"0", 0, 0},
                {"4294967296", 0, 4294967296ULL},
                {"18446744073709551615", 0, UINT64_MAX},
                {"18446744073709551616", -ERANGE, 0},
                {"000000000000000000000000000001", 0, 1},
                {"-1", -EINVAL, 0},
                {"+1", -EINVAL, 0},
                {"", -EINVAL, 0},
                {" 5", -EINVAL, 0},
                {"5 ", -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = SENTINEL64;
                check_ll(cases[i].s, mk_parse_u64(cases[i].s, &v), cases[i].r);
                check_ull(cases[i].s, v, cases[i].r == 0 ? cases[i].v : SENTINEL64);
        }
}

static void test_parse_u32_base(void **state) {
        static const struct {
                const char *s;
                unsigned base;
                int r;
                uint32_t v;
        } cases[] = {
                /* Go's base 0 */
                {"0x20B010DE", 0, 0, 0x20B010DE},
                {"0x20b010de", 0, 0, 0x20B010DE},
                {"0X1f", 0, 0, 31},
                {"0b101", 0, 0, 5},
                {"0B11", 0, 0, 3},
                {"010", 0, 0, 8},
                {"0o17", 0, 0, 15},
                {"0O17", 0, 0, 15},
                {"0", 0, 0, 0},
                {"00", 0, 0, 0},
                {"10", 0, 0, 10},
                {"4294967295", 0, 0, UINT32_MAX},
                {"0xFFFFFFFF", 0, 0, UINT32_MAX},
                {"0x100000000", 0, -ERANGE, 0},
                {"0b100000000000000000000000000000000", 0, -ERANGE, 0},
                {"037777777777", 0, 0, UINT32_MAX},
                {"040000000000", 0, -ERANGE, 0},
                {"0x", 0, -EINVAL, 0},
                {"0b", 0, -EINVAL, 0},
                {"0o", 0, -EINVAL, 0},
                {"08", 0, -EINVAL, 0},
                {"0b102", 0, -EINVAL, 0},
                {"0xg", 0, -EINVAL, 0},
                {"0x0x1", 0, -EINVAL, 0},
                {"0x-1", 0, -EINVAL, 0},
                {"0x+1", 0, -EINVAL, 0},
                {"0x 1", 0, -EINVAL, 0},
                {"-0x1", 0, -EINVAL, 0},
                {" 0x1", 0, -EINVAL, 0},
                {"0x1 ", 0, -EINVAL, 0},
                {"0x_1", 0, -EINVAL, 0},
                {"", 0, -EINVAL, 0},
                {"x10", 0, -EINVAL, 0},
                /* explicit bases: digits only */
                {"ff", 16, 0, 255},
                {"FF", 16, 0, 255},
                {"0xff", 16, -EINVAL, 0},
                {"101", 2, 0, 5},
                {"2", 2, -EINVAL, 0},
                {"777", 8, 0, 511},
                {"8", 8, -EINVAL, 0},
                {"z", 36, 0, 35},
                {"10", 10, 0, 10},
                {"1", 1, -EINVAL, 0},
                {"1", 37, -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint32_t v = SENTINEL32;
                int r = mk_parse_u32_base(cases[i].s, cases[i].base, &v);
                if (r != cases[i].r || v != (cases[i].r == 0 ? cases[i].v : SENTINEL32))
                        fail_msg("input '%s' base %u: r=%d v=%#x, want r=%d v=%#x", cases[i].s, cases[i].base, r,
                                 v, cases[i].r, cases[i].r == 0 ? cases[i].v : SENTINEL32);
        }

        uint64_t v64 = 0;
        assert_int_equal(mk_parse_u64_base("0xFFFFFFFFFFFFFFFF", 0, &v64), 0);
        assert_true(v64 == UINT64_MAX);
        assert_int_equal(mk_parse_u64_base("0x10000000000000000", 0, &v64), -ERANGE);
}

static void test_parse_int(void **state) {
        static const struct {
                const char *s;
                int r;
                int v;
        } cases[] = {
                {"0", 0, 0},
                {"-1", 0, -1},
                {"42", 0, 42},
                {"-007", 0, -7},
                {"2147483647", 0, INT_MAX},
                {"2147483648", -ERANGE, 0},
                {"-2147483648", 0, INT_MIN},
                {"-2147483649", -ERANGE, 0},
                {"99999999999999999999", -ERANGE, 0},
                {"+1", -EINVAL, 0},
                {"-", -EINVAL, 0},
                {"--1", -EINVAL, 0},
                {"- 1", -EINVAL, 0},
                {"1.5", -EINVAL, 0},
                {"0x10", -EINVAL, 0},
                {"", -EINVAL, 0},
                {NULL, -EINVAL, 0},
                {" 1", -EINVAL, 0},
                {"1 ", -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int v = 12345;
                check_ll(cases[i].s, mk_parse_int(cases[i].s, &v), cases[i].r);
                check_ll(cases[i].s, v, cases[i].r == 0 ? cases[i].v : 12345);
        }
}

static void test_parse_long(void **state) {
        static const struct {
                const char *s;
                int r;
                long v;
        } cases[] = {
                {"9223372036854775807", 0, LONG_MAX},
                {"9223372036854775808", -ERANGE, 0},
                {"-9223372036854775808", 0, LONG_MIN},
                {"-9223372036854775809", -ERANGE, 0},
                {"-5", 0, -5},
                {"+5", -EINVAL, 0},
                {"5x", -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                long v = 12345;
                check_ll(cases[i].s, mk_parse_long(cases[i].s, &v), cases[i].r);
                check_ll(cases[i].s, v, cases[i].r == 0 ? cases[i].v : 12345);
        }
}

static void test_parse_bool(void **state) {
        static const struct {
                const char *s;
                int r;
                bool v;
        } cases[] = {
                {"true", 0, true},  {"TRUE", 0, true},  {"True", 0, true},   {"yes", 0, true},
                {"Yes", 0, true},   {"on", 0, true},    {"ON", 0, true},     {"1", 0, true},
                {"y", 0, true},     {"t", 0, true},     {"false", 0, false}, {"FALSE", 0, false},
                {"no", 0, false},   {"No", 0, false},   {"off", 0, false},   {"oFf", 0, false},
                {"0", 0, false},    {"n", 0, false},    {"F", 0, false},     {"", -EINVAL, false},
                {NULL, -EINVAL, false}, {"2", -EINVAL, false}, {"truee", -EINVAL, false},
                {" true", -EINVAL, false}, {"true ", -EINVAL, false}, {"ye", -EINVAL, false},
                {"enabled", -EINVAL, false}, {"01", -EINVAL, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                /* Start from the opposite value so "written only on success" shows. */
                bool v = cases[i].r == 0 ? !cases[i].v : true;
                check_ll(cases[i].s, mk_parse_bool(cases[i].s, &v), cases[i].r);
                check_ll(cases[i].s, v, cases[i].r == 0 ? cases[i].v : true);
        }
}

static void test_parse_duration(void **state) {
        static const struct {
                const char *s;
                int r;
                uint64_t v;
        } cases[] = {
                {"0", 0, 0},
                {"0s", 0, 0},
                {"500ms", 0, 500},
                {"30s", 0, 30000},
                {"2m", 0, 120000},
                {"1h", 0, 3600000},
                {"1m30s", 0, 90000},
                {"1h2m3s4ms", 0, 3723004},
                {"90s", 0, 90000},
                {"18446744073709551615ms", 0, UINT64_MAX},
                {"18446744073709551616ms", -ERANGE, 0},
                {"18446744073709551615s", -ERANGE, 0},
                {"18446744073709551615ms1ms", -ERANGE, 0},
                {"10", -EINVAL, 0},
                {"s", -EINVAL, 0},
                {"ms", -EINVAL, 0},
                {"1.5s", -EINVAL, 0},
                {"1us", -EINVAL, 0},
                {"1ns", -EINVAL, 0},
                {"1x", -EINVAL, 0},
                {"1S", -EINVAL, 0},
                {"-1s", -EINVAL, 0},
                {"+1s", -EINVAL, 0},
                {" 1s", -EINVAL, 0},
                {"1s ", -EINVAL, 0},
                {"1 s", -EINVAL, 0},
                {"1m30", -EINVAL, 0},
                {"", -EINVAL, 0},
                {NULL, -EINVAL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = SENTINEL64;
                check_ll(cases[i].s, mk_parse_duration_ms(cases[i].s, &v), cases[i].r);
                check_ull(cases[i].s, v, cases[i].r == 0 ? cases[i].v : SENTINEL64);
        }
}

/* ---- host ---- */

static void test_host_default(void **state) {
        struct mk_host h;
        assert_int_equal(mk_host_init_default(&h), 0);
        assert_string_equal(h.sysfs_root, "/sys");
        assert_string_equal(h.proc_root, "/proc");
        assert_string_equal(h.dev_root, "/dev");
        assert_string_equal(mk_host_root(&h, MK_HOST_DEV), "/dev");
        assert_null(mk_host_root(&h, _MK_HOST_ROOT_MAX));
        mk_host_done(&h);
        assert_null(h.sysfs_root);
        mk_host_done(&h);
        mk_host_done(NULL);
}

static void test_host_env(void **state) {
        setenv("MIGKIT_SYSFS_ROOT", "/tmp/fixture/sys//", 1);
        unsetenv("MIGKIT_PROC_ROOT");
        setenv("MIGKIT_DEV_ROOT", "", 1);
        struct mk_host h;
        int r = mk_host_init_from_env(&h);
        unsetenv("MIGKIT_SYSFS_ROOT");
        unsetenv("MIGKIT_DEV_ROOT");
        assert_int_equal(r, 0);
        assert_string_equal(h.sysfs_root, "/tmp/fixture/sys");
        assert_string_equal(h.proc_root, "/proc");
        assert_string_equal(h.dev_root, "/dev");

        char *p = NULL;
        assert_int_equal(mk_host_path(&h, MK_HOST_SYSFS, "bus/pci/devices/0000:3b:00.0/resource0", &p), 0);
        assert_string_equal(p, "/tmp/fixture/sys/bus/pci/devices/0000:3b:00.0/resource0");
        free(p);
        mk_host_done(&h);

        setenv("MIGKIT_PROC_ROOT", "/", 1);
        r = mk_host_init_from_env(&h);
        unsetenv("MIGKIT_PROC_ROOT");
        assert_int_equal(r, 0);
        assert_string_equal(h.proc_root, "/");
        assert_int_equal(mk_host_path(&h, MK_HOST_PROC, "driver/nvidia/gpus", &p), 0);
        assert_string_equal(p, "/driver/nvidia/gpus");
        free(p);
        mk_host_done(&h);
}

static void test_host_path(void **state) {
        static const struct {
                enum mk_host_root root;
                const char *rel;
                int r;
                const char *want;
        } cases[] = {
                {MK_HOST_SYSFS, "bus/pci/devices", 0, "/sys/bus/pci/devices"},
                {MK_HOST_SYSFS, "/bus/pci/devices", 0, "/sys/bus/pci/devices"},
                {MK_HOST_SYSFS, "//bus", 0, "/sys/bus"},
                {MK_HOST_PROC, "driver/nvidia/capabilities", 0, "/proc/driver/nvidia/capabilities"},
                {MK_HOST_DEV, "nvidia-caps/nvidia-cap1", 0, "/dev/nvidia-caps/nvidia-cap1"},
                {MK_HOST_SYSFS, "", 0, "/sys"},
                {MK_HOST_SYSFS, NULL, 0, "/sys"},
                {MK_HOST_SYSFS, "..foo/x", 0, "/sys/..foo/x"},
                {MK_HOST_SYSFS, "a/..b", 0, "/sys/a/..b"},
                {MK_HOST_SYSFS, "a/./b", 0, "/sys/a/./b"},
                {MK_HOST_SYSFS, "..", -EINVAL, NULL},
                {MK_HOST_SYSFS, "../etc/passwd", -EINVAL, NULL},
                {MK_HOST_SYSFS, "/../etc", -EINVAL, NULL},
                {MK_HOST_SYSFS, "bus/../../etc", -EINVAL, NULL},
                {MK_HOST_SYSFS, "bus/..", -EINVAL, NULL},
                {MK_HOST_SYSFS, "bus/../", -EINVAL, NULL},
                {MK_HOST_SYSFS, "bus//..//x", -EINVAL, NULL},
                {(enum mk_host_root) 7, "x", -EINVAL, NULL},
                {_MK_HOST_ROOT_INVALID, "x", -EINVAL, NULL},
        };
        struct mk_host h;
        assert_int_equal(mk_host_init_default(&h), 0);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *sentinel = (char *) "untouched", *p = sentinel;
                int r = mk_host_path(&h, cases[i].root, cases[i].rel, &p);
                check_ll(cases[i].rel, r, cases[i].r);
                if (r == 0) {
                        if (!streq(p, cases[i].want))
                                fail_msg("input '%s': got '%s', want '%s'", cases[i].rel, p, cases[i].want);
                        free(p);
                } else
                        assert_ptr_equal(p, sentinel);
        }
        mk_host_done(&h);
}

static void test_path_join(void **state) {
        static const struct {
                const char *a, *b, *want;
        } cases[] = {
                {"/sys", "bus", "/sys/bus"},
                {"/sys/", "/bus", "/sys/bus"},
                {"a//", "//b/c", "a/b/c"},
                {"/", "dev", "/dev"},
                {"/", "/dev", "/dev"},
                {"/", "", "/"},
                {"//", "", "/"},
                {"", "x", "x"},
                {"", "/x", "/x"},
                {"a", "", "a"},
                {"a/", "/", "a"},
                {"", "", ""},
                {"rel", "x/y/", "rel/x/y/"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *p = NULL;
                assert_int_equal(mk_path_join(cases[i].a, cases[i].b, &p), 0);
                if (!streq(p, cases[i].want))
                        fail_msg("('%s', '%s'): got '%s', want '%s'", cases[i].a, cases[i].b, p, cases[i].want);
                free(p);
        }
        assert_false(mk_path_has_dotdot(NULL));
        assert_false(mk_path_has_dotdot("a.b/c..d/..."));
        assert_true(mk_path_has_dotdot("a/../b"));
}

/* ---- spawn ---- */

static int run(const char *const *argv, const struct mk_spawn_opts *base, struct mk_spawn_result *res,
               struct mk_error *e) {
        struct mk_spawn_opts o = base ? *base : (struct mk_spawn_opts) {};
        o.argv = argv;
        return mk_spawn(&o, res, e);
}

static void test_spawn_exit_codes(void **state) {
        static const struct {
                const char *argv[4];
                int status;
        } cases[] = {
                {{"true"}, 0},
                {{"false"}, 1},
                {{"sh", "-c", "exit 42"}, 42},
                {{"sh", "-c", "exit 255"}, 255},
                {{"sh", "-c", "kill -KILL $$"}, 128 + SIGKILL},
                {{"sh", "-c", "kill -SEGV $$"}, 128 + SIGSEGV},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_spawn_result res;
                struct mk_error e = {};
                int r = run(cases[i].argv, NULL, &res, &e);
                if (r != 0)
                        fail_msg("%s: r=%d %s", cases[i].argv[0], r, e.msg);
                check_ll(cases[i].argv[cases[i].argv[2] ? 2 : 0], res.exit_status, cases[i].status);
                assert_false(res.timed_out);
                assert_null(res.output);
                mk_spawn_result_done(&res);
        }
}

static volatile sig_atomic_t test_sigterms;

static void count_sigterm(int sig) {
        (void) sig;
        test_sigterms++;
}

/* stop_on_signal: a SIGTERM that comes as the child exits is either the
 * child's stop (stopped_by) or, when the child was already gone, raised
 * again for the handler of before: never lost. */
static void test_spawn_stop_signal_not_lost(void **state) {
        const char *argv[] = {"sh", "-c", "kill -TERM $PPID", NULL};
        struct sigaction sa = {.sa_handler = count_sigterm}, old;
        sigemptyset(&sa.sa_mask);
        assert_int_equal(sigaction(SIGTERM, &sa, &old), 0);
        for (int i = 0; i < 20; i++) {
                struct mk_spawn_opts o = {.stop_on_signal = true, .timeout_ms = 20000};
                struct mk_spawn_result res;
                struct mk_error e = {};
                test_sigterms = 0;
                if (run(argv, &o, &res, &e) != 0)
                        fail_msg("run %d: %s", i, e.msg);
                int stopped = res.stopped_by;
                mk_spawn_result_done(&res);
                if ((stopped == SIGTERM) + test_sigterms != 1)
                        fail_msg("run %d: stopped_by=%d, SIGTERMs to the old handler: %d", i, stopped,
                                 (int) test_sigterms);
        }
        assert_int_equal(sigaction(SIGTERM, &old, NULL), 0);
}

static void test_spawn_capture(void **state) {
        const char *argv[] = {"sh", "-c", "echo out; echo err >&2; printf 'no newline'", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 4096};
        struct mk_spawn_result res;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        assert_int_equal(res.exit_status, 0);
        assert_string_equal(res.output, "out\nerr\nno newline");
        assert_int_equal(res.output_len, strlen("out\nerr\nno newline"));
        assert_false(res.output_truncated);
        mk_spawn_result_done(&res);
        assert_null(res.output);
        mk_spawn_result_done(NULL);

        /* Nothing printed: "" rather than NULL. stdin is /dev/null, so cat ends. */
        const char *cat[] = {"cat", NULL};
        assert_int_equal(run(cat, &o, &res, NULL), 0);
        assert_string_equal(res.output, "");
        assert_int_equal(res.output_len, 0);
        mk_spawn_result_done(&res);

        /* Given input: the child reads it, then EOF (the MPS control client's commands). */
        o.input = "get_default_active_thread_percentage\nquit\n";
        assert_int_equal(run(cat, &o, &res, NULL), 0);
        assert_string_equal(res.output, "get_default_active_thread_percentage\nquit\n");
        mk_spawn_result_done(&res);
        char big[MK_SPAWN_MAX_INPUT + 2];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        o.input = big;
        struct mk_error e = {0};
        struct mk_spawn_opts o2 = o;
        o2.argv = cat;
        assert_int_equal(mk_spawn(&o2, &res, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "over 4096 bytes"));
}

/* The last line of an output, for a message. */
static void test_spawn_output_last_line(void **state) {
        static const struct {
                const char *out, *want;
        } cases[] = {
                {"a\nbb\nccc\n\n \r\n", "ccc"}, {"a\nbb\nccc", "ccc"}, {"one", "one"},
                {"\n\n", ""},                   {"", ""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_spawn_result res = {.output = strdup(cases[i].out)};
                assert_non_null(res.output);
                res.output_len = strlen(res.output);
                assert_string_equal(mk_spawn_output_last_line(&res), cases[i].want);
                mk_spawn_result_done(&res);
        }
        struct mk_spawn_result none = {0};
        assert_string_equal(mk_spawn_output_last_line(&none), "");
}

static void test_spawn_capture_truncated(void **state) {
        /* 1 MiB of "y\n" through a 1000-byte cap: the rest is read and
         * dropped, so the child finishes normally. */
        const char *argv[] = {"sh", "-c", "yes | head -c 1048576; echo done >&2", NULL};
        static const size_t caps[] = {1, 1000, 65536, 1048575};
        for (size_t i = 0; i < ELEMENTSOF(caps); i++) {
                struct mk_spawn_opts o = {.capture = true, .output_cap = caps[i], .timeout_ms = 20000};
                struct mk_spawn_result res;
                assert_int_equal(run(argv, &o, &res, NULL), 0);
                assert_false(res.timed_out);
                assert_int_equal(res.exit_status, 0);
                assert_true(res.output_truncated);
                assert_int_equal(res.output_len, caps[i]);
                assert_int_equal(strlen(res.output), caps[i]);
                assert_int_equal(res.output[0], 'y');
                if (caps[i] > 1)
                        assert_int_equal(res.output[1], '\n');
                mk_spawn_result_done(&res);
        }

        struct mk_spawn_opts o = {.capture = true, .output_cap = 2 << 20};
        struct mk_spawn_result res;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        assert_false(res.output_truncated);
        assert_int_equal(res.output_len, 1048576 + 5);
        assert_string_equal(res.output + 1048576, "done\n");
        mk_spawn_result_done(&res);

        /* Exactly at the cap is not truncated. */
        const char *ten[] = {"printf", "0123456789", NULL};
        o.output_cap = 10;
        assert_int_equal(run(ten, &o, &res, NULL), 0);
        assert_false(res.output_truncated);
        assert_string_equal(res.output, "0123456789");
        mk_spawn_result_done(&res);
}

static void test_spawn_env(void **state) {
        if (access("/usr/bin/env", X_OK) < 0)
                skip();
        const char *argv[] = {"/usr/bin/env", NULL};
        const char *envp[] = {"A=1", "B=two words", "EMPTY=", NULL};
        struct mk_spawn_opts o = {.envp = envp, .capture = true, .output_cap = 4096};
        struct mk_spawn_result res;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        assert_string_equal(res.output, "A=1\nB=two words\nEMPTY=\n");
        mk_spawn_result_done(&res);

        const char *none[] = {NULL};
        o.envp = none;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        assert_string_equal(res.output, "");
        mk_spawn_result_done(&res);

        /* envp NULL inherits ours. */
        setenv("MK_TEST_INHERITED", "hello there", 1);
        const char *sh[] = {"sh", "-c", "printf '%s' \"$MK_TEST_INHERITED\"", NULL};
        o.envp = NULL;
        int r = run(sh, &o, &res, NULL);
        unsetenv("MK_TEST_INHERITED");
        assert_int_equal(r, 0);
        assert_string_equal(res.output, "hello there");
        mk_spawn_result_done(&res);
}

static void test_spawn_path_lookup(void **state) {
        const char *argv[] = {"true", NULL};
        struct mk_spawn_result res = {.exit_status = 99};
        struct mk_error e = {};

        /* The child's PATH is the one searched. */
        const char *bad_path[] = {"PATH=/nonexistent-migkit:/also-not-there", NULL};
        struct mk_spawn_opts o = {.envp = bad_path};
        assert_int_equal(run(argv, &o, &res, &e), -ENOENT);
        assert_string_equal(e.msg, "command 'true' not found in PATH");
        assert_int_equal(res.exit_status, 99);

        /* Empty PATH entries are skipped, not taken as ".". */
        const char *empty_path[] = {"PATH=::", NULL};
        o.envp = empty_path;
        assert_int_equal(run(argv, &o, &res, &e), -ENOENT);

        /* No PATH at all: the default one. */
        const char *no_path[] = {"X=1", NULL};
        o.envp = no_path;
        assert_int_equal(run(argv, &o, &res, &e), 0);
        assert_int_equal(res.exit_status, 0);
        mk_spawn_result_done(&res);

        const char *good_path[] = {"PATH=/nonexistent-migkit:/usr/bin:/bin", NULL};
        o.envp = good_path;
        assert_int_equal(run(argv, &o, &res, &e), 0);
        mk_spawn_result_done(&res);
}

static void test_spawn_cwd(void **state) {
        char real[PATH_MAX];
        assert_non_null(realpath(tmpdir, real));
        const char *argv[] = {"pwd", "-P", NULL};
        struct mk_spawn_opts o = {.cwd = tmpdir, .capture = true, .output_cap = 4096};
        struct mk_spawn_result res;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        char want[PATH_MAX + 2];
        snprintf(want, sizeof(want), "%s\n", real);
        assert_string_equal(res.output, want);
        mk_spawn_result_done(&res);

        struct mk_error e = {};
        o.cwd = "/nonexistent-migkit-dir";
        assert_int_equal(run(argv, &o, &res, &e), -ENOENT);
        assert_int_equal(e.code, -ENOENT);
        assert_non_null(strstr(e.msg, "'/nonexistent-migkit-dir'"));
}

static void test_spawn_start_failures(void **state) {
        struct mk_spawn_result res = {.exit_status = 77};
        struct mk_error e = {};

        const char *missing[] = {"migkit-no-such-command", "arg", NULL};
        assert_int_equal(run(missing, NULL, &res, &e), -ENOENT);
        assert_string_equal(e.msg, "command 'migkit-no-such-command' not found in PATH");

        const char *abs_missing[] = {"/nonexistent-migkit/cmd", NULL};
        assert_int_equal(run(abs_missing, NULL, &res, &e), -ENOENT);
        assert_non_null(strstr(e.msg, "'/nonexistent-migkit/cmd'"));

        /* A file that is not executable. Root passes access checks but not
         * the exec bit check, so this holds for root too. */
        _cleanup_free_ char *noexec = tmp_path("noexec");
        write_file(noexec, "#!/bin/sh\n", 10);
        const char *ne[] = {noexec, NULL};
        assert_int_equal(run(ne, NULL, &res, &e), -EACCES);
        assert_non_null(strstr(e.msg, noexec));

        /* Executable but no valid format: no shell fallback. */
        _cleanup_free_ char *garbage = tmp_path("garbage");
        write_file(garbage, "\x01\x02\x03\x04garbage", 11);
        assert_int_equal(chmod(garbage, 0755), 0);
        const char *gb[] = {garbage, NULL};
        assert_int_equal(run(gb, NULL, &res, &e), -ENOEXEC);

        const char *empty_cmd[] = {"", NULL};
        assert_int_equal(run(empty_cmd, NULL, &res, &e), -EINVAL);
        const char *no_cmd[] = {NULL};
        assert_int_equal(run(no_cmd, NULL, &res, &e), -EINVAL);
        assert_int_equal(run(NULL, NULL, &res, &e), -EINVAL);
        const char *t[] = {"true", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 0};
        assert_int_equal(run(t, &o, &res, &e), -EINVAL);
        assert_int_equal(run(missing, NULL, &res, NULL), -ENOENT);

        assert_int_equal(res.exit_status, 77); /* untouched throughout */
}

static void test_spawn_timeout(void **state) {
        const char *argv[] = {"sleep", "10", NULL};
        struct mk_spawn_opts o = {.timeout_ms = 300};
        struct mk_spawn_result res;
        uint64_t t0 = now_ms();
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        uint64_t dt = now_ms() - t0;
        assert_true(res.timed_out);
        assert_int_equal(res.exit_status, 128 + SIGTERM);
        if (dt < 250 || dt > 3000)
                fail_msg("took %llu ms, want about 300", (unsigned long long) dt);
        mk_spawn_result_done(&res);

        /* A timeout that is not reached costs nothing. */
        const char *t[] = {"true", NULL};
        o.timeout_ms = 10000;
        t0 = now_ms();
        assert_int_equal(run(t, &o, &res, NULL), 0);
        dt = now_ms() - t0;
        assert_false(res.timed_out);
        assert_int_equal(res.exit_status, 0);
        if (dt > 2000)
                fail_msg("true took %llu ms", (unsigned long long) dt);
}

static void test_spawn_timeout_sigkill(void **state) {
        /* SIGTERM ignored (and inherited by sleep): SIGKILL after the grace.
         * The timeout leaves sh time to set its trap on a loaded machine (a
         * SIGTERM before the trap would end it with 143); the bounds say
         * that the grace was waited and the 30 s sleep was not. */
        const char *argv[] = {"sh", "-c", "trap '' TERM; sleep 30", NULL};
        struct mk_spawn_opts o = {.timeout_ms = 1500};
        struct mk_spawn_result res;
        uint64_t t0 = now_ms();
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        uint64_t dt = now_ms() - t0;
        assert_true(res.timed_out);
        assert_int_equal(res.exit_status, 128 + SIGKILL);
        if (dt < 1500 + MK_SPAWN_KILL_GRACE_MS - 100 || dt > 20000)
                fail_msg("took %llu ms, want about %d", (unsigned long long) dt, 1500 + MK_SPAWN_KILL_GRACE_MS);
}

/* True once pid is gone or a zombie (a container's init may not reap). */
static bool wait_process_gone(pid_t pid, int ms) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        for (int waited = 0; waited <= ms; waited += 20) {
                char *stat = NULL;
                if (mk_read_file(path, 4096, &stat, NULL, NULL) < 0)
                        return true;
                const char *p = strrchr(stat, ')');
                bool zombie = p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
                free(stat);
                if (zombie)
                        return true;
                struct timespec ts = {.tv_nsec = 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        return false;
}

static void test_spawn_timeout_kills_group(void **state) {
        const char *argv[] = {"sh", "-c", "sleep 30 & echo $!; wait", NULL};
        struct mk_spawn_opts o = {.timeout_ms = 1000, .capture = true, .output_cap = 100};
        struct mk_spawn_result res;
        uint64_t t0 = now_ms();
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        uint64_t dt = now_ms() - t0;
        assert_true(res.timed_out);
        if (dt > 20000) /* not the 30 s of the sleep */
                fail_msg("took %llu ms", (unsigned long long) dt);
        char *nl = strchr(res.output, '\n');
        assert_non_null(nl);
        *nl = 0;
        int pid = 0;
        assert_int_equal(mk_parse_int(res.output, &pid), 0);
        assert_true(pid > 1);
        if (!wait_process_gone(pid, 3000)) {
                kill(pid, SIGKILL);
                fail_msg("grandchild %d survived the timeout", pid);
        }
        mk_spawn_result_done(&res);
}

static void test_spawn_timeout_kills_stragglers(void **state) {
        /* The command dies of SIGTERM but leaves a grandchild that ignores
         * it: once the command is gone, the rest of its group gets SIGKILL
         * at once, not after the grace period. */
        const char *argv[] = {"sh", "-c", "sh -c 'trap \"\" TERM; exec sleep 30' & echo $!; wait", NULL};
        struct mk_spawn_opts o = {.timeout_ms = 1000, .capture = true, .output_cap = 100};
        struct mk_spawn_result res;
        uint64_t t0 = now_ms();
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        uint64_t dt = now_ms() - t0;
        assert_true(res.timed_out);
        assert_int_equal(res.exit_status, 128 + SIGTERM);
        char *nl = strchr(res.output, '\n');
        assert_non_null(nl);
        *nl = 0;
        int pid = 0;
        assert_int_equal(mk_parse_int(res.output, &pid), 0);
        assert_true(pid > 1);
        if (!wait_process_gone(pid, 1000)) {
                kill(pid, SIGKILL);
                fail_msg("grandchild %d ignoring SIGTERM survived the timeout", pid);
        }
        if (dt >= 1000 + MK_SPAWN_KILL_GRACE_MS - 100) /* the grace was not waited */
                fail_msg("took %llu ms", (unsigned long long) dt);
        mk_spawn_result_done(&res);
}

static void test_spawn_grandchild_keeps_pipe(void **state) {
        /* The child exits at once; the grandchild holds the output pipe for
         * 10 s. We return when the child exits, with what it wrote. */
        const char *argv[] = {"sh", "-c", "sleep 10 & echo $!", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 100};
        struct mk_spawn_result res;
        uint64_t t0 = now_ms();
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        uint64_t dt = now_ms() - t0;
        assert_false(res.timed_out);
        assert_int_equal(res.exit_status, 0);
        int pid = 0;
        char *nl = strchr(res.output, '\n');
        assert_non_null(nl);
        *nl = 0;
        assert_int_equal(mk_parse_int(res.output, &pid), 0);
        kill(pid, SIGKILL);
        if (dt > 3000)
                fail_msg("took %llu ms", (unsigned long long) dt);
        mk_spawn_result_done(&res);
}

/* Running, not a zombie nor gone (a container's init may not reap at once). */
static bool pid_running(int pid) {
        char path[64], *stat = NULL;
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        if (mk_read_file(path, 4096, &stat, NULL, NULL) < 0)
                return false;
        const char *rp = strrchr(stat, ')');
        bool running = rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
        free(stat);
        return running;
}

static int spawned_pid(struct mk_spawn_result *res) {
        int pid = 0;
        char *nl = strchr(res->output, '\n');
        assert_non_null(nl);
        *nl = 0;
        assert_int_equal(mk_parse_int(res->output, &pid), 0);
        return pid;
}

/* kill_group_at_exit: the background job a command leaves in its group is
 * killed when it exits (issue 27: a hook's child outlived the apply); one
 * that left the group with setsid is not. */
static void test_spawn_kill_group_at_exit(void **state) {
        const char *argv[] = {"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 100, .kill_group_at_exit = true};
        struct mk_spawn_result res;
        assert_int_equal(run(argv, &o, &res, NULL), 0);
        assert_int_equal(res.exit_status, 0);
        int pid = spawned_pid(&res);
        mk_spawn_result_done(&res);
        for (int i = 0; i < 100 && pid_running(pid); i++)
                usleep(20 * 1000);
        bool left = pid_running(pid);
        if (left)
                kill(pid, SIGKILL);
        assert_false(left);

        /* The job has left the group (it wrote its pid after setsid) before the command exits. */
        _cleanup_free_ char *pidfile = tmp_path("setsid.pid");
        char script[PATH_MAX + 256];
        snprintf(script, sizeof(script),
                 "setsid sh -c 'echo $$ >%s.tmp && mv %s.tmp %s && exec sleep 30' >/dev/null 2>&1 & "
                 "while [ ! -s %s ]; do sleep 0.01; done; cat %s",
                 pidfile, pidfile, pidfile, pidfile, pidfile);
        const char *argv2[] = {"sh", "-c", script, NULL};
        assert_int_equal(run(argv2, &o, &res, NULL), 0);
        pid = spawned_pid(&res);
        mk_spawn_result_done(&res);
        usleep(200 * 1000);
        bool kept = pid_running(pid);
        kill(pid, SIGKILL);
        assert_true(kept);
}

static void test_spawn_isolation(void **state) {
        /* A descriptor we leak without CLOEXEC is not inherited, nor is the
         * exec error pipe: ls sees 0, 1, 2 and its own directory fd 3. (A
         * shell would not do here: dash renumbers descriptors.) */
        assert_int_equal(dup2(STDERR_FILENO, 100), 100);
        const char *ls[] = {"ls", "/proc/self/fd", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 4096};
        struct mk_spawn_result res;
        int r = run(ls, &o, &res, NULL);
        close(100);
        assert_int_equal(r, 0);
        assert_string_equal(res.output, "0\n1\n2\n3\n");
        mk_spawn_result_done(&res);

        /* The child leads its own process group. */
        const char *sh[] = {"sh", "-c",
                            "read -r pid comm state ppid pgrp rest < /proc/$$/stat; "
                            "[ \"$pgrp\" = \"$$\" ] && echo leader; exit 0",
                            NULL};
        assert_int_equal(run(sh, &o, &res, NULL), 0);
        assert_string_equal(res.output, "leader\n");
        mk_spawn_result_done(&res);
}

static void test_spawn_stdin_devnull(void **state) {
        /* Our stdin holds data; the child's stdin is /dev/null. */
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(write(p[1], "leak\n", 5), 5);
        close(p[1]);
        int saved = dup(STDIN_FILENO);
        assert_true(saved >= 0);
        dup2(p[0], STDIN_FILENO);
        close(p[0]);

        const char *cat[] = {"cat", NULL};
        struct mk_spawn_opts o = {.capture = true, .output_cap = 4096, .timeout_ms = 10000};
        struct mk_spawn_result res;
        int r = run(cat, &o, &res, NULL);
        dup2(saved, STDIN_FILENO);
        close(saved);
        assert_int_equal(r, 0);
        assert_false(res.timed_out);
        assert_string_equal(res.output, "");
        mk_spawn_result_done(&res);
}

static void test_spawn_signals_reset(void **state) {
        /* We ignore SIGTERM and block SIGUSR1; the child gets defaults and an
         * empty mask, so both kill it. */
        struct sigaction ign = {.sa_handler = SIG_IGN}, old_term;
        sigaction(SIGTERM, &ign, &old_term);
        sigset_t block, old_mask;
        sigemptyset(&block);
        sigaddset(&block, SIGUSR1);
        sigprocmask(SIG_BLOCK, &block, &old_mask);

        const char *term[] = {"sh", "-c", "kill -TERM $$; exit 3", NULL};
        const char *usr1[] = {"sh", "-c", "kill -USR1 $$; exit 3", NULL};
        struct mk_spawn_result r1, r2;
        int a = run(term, NULL, &r1, NULL);
        int b = run(usr1, NULL, &r2, NULL);

        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        sigaction(SIGTERM, &old_term, NULL);

        assert_int_equal(a, 0);
        assert_int_equal(b, 0);
        assert_int_equal(r1.exit_status, 128 + SIGTERM);
        assert_int_equal(r2.exit_status, 128 + SIGUSR1);
}

static void test_spawn_output_routing(void **state) {
        /* forward_output: the child writes to our stdout and stderr;
         * otherwise to /dev/null. Swap both for a pipe to see which. */
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        fflush(stdout);
        fflush(stderr);
        int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
        assert_true(saved_out >= 0 && saved_err >= 0);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);

        const char *argv[] = {"sh", "-c", "echo forwarded; echo err-forwarded >&2", NULL};
        const char *quiet[] = {"sh", "-c", "echo dropped; echo dropped-err >&2", NULL};
        struct mk_spawn_opts fwd = {.forward_output = true};
        struct mk_spawn_result res1, res2;
        int a = run(argv, &fwd, &res1, NULL);
        int b = run(quiet, NULL, &res2, NULL);

        dup2(saved_out, STDOUT_FILENO);
        dup2(saved_err, STDERR_FILENO);
        close(saved_out);
        close(saved_err);
        close(p[1]);
        char buf[256] = {};
        ssize_t n = read(p[0], buf, sizeof(buf) - 1);
        close(p[0]);
        assert_int_equal(a, 0);
        assert_int_equal(b, 0);
        assert_null(res1.output);
        assert_null(res2.output);
        assert_true(n > 0);
        assert_string_equal(buf, "forwarded\nerr-forwarded\n");
}

static int count_fds(void) {
        int n = 0;
        for (int fd = 0; fd < 1024; fd++)
                if (fcntl(fd, F_GETFD) >= 0)
                        n++;
        return n;
}

static void test_spawn_no_fd_leak(void **state) {
        /* Every path (ran, not found, bad cwd, timed out, captured) gives
         * back all its descriptors. */
        const char *ok[] = {"true", NULL};
        const char *missing[] = {"migkit-no-such-command", NULL};
        const char *slow[] = {"sleep", "5", NULL};
        const char *chatty[] = {"sh", "-c", "echo hi", NULL};
        int before = count_fds();
        for (int i = 0; i < 20; i++) {
                struct mk_spawn_result res;
                struct mk_spawn_opts o = {.capture = i % 2 == 0, .output_cap = 16};
                assert_int_equal(run(ok, &o, &res, NULL), 0);
                mk_spawn_result_done(&res);
                assert_int_equal(run(missing, &o, &res, NULL), -ENOENT);
                o.cwd = "/nonexistent-migkit-dir";
                assert_int_equal(run(ok, &o, &res, NULL), -ENOENT);
                o.cwd = NULL;
                assert_int_equal(run(chatty, &o, &res, NULL), 0);
                mk_spawn_result_done(&res);
        }
        struct mk_spawn_opts t = {.capture = true, .output_cap = 16, .timeout_ms = 50};
        struct mk_spawn_result res;
        assert_int_equal(run(slow, &t, &res, NULL), 0);
        assert_true(res.timed_out);
        mk_spawn_result_done(&res);
        assert_int_equal(count_fds(), before);
}

static void test_spawn_log(void **state) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        mk_log_set_fd(p[1]);
        mk_log_set_level(MK_LOG_INFO);
        assert_int_equal(mk_log_parse_debug("spawn"), 0);

        const char *argv[] = {"sh", "-c", "exit 0", NULL};
        struct mk_spawn_result res;
        int r = run(argv, NULL, &res, NULL);

        (void) mk_log_parse_debug("none");
        mk_log_set_fd(STDERR_FILENO);
        char buf[4096] = {};
        ssize_t n = read(p[0], buf, sizeof(buf) - 1);
        close(p[0]);
        close(p[1]);
        assert_int_equal(r, 0);
        assert_true(n > 0);
        assert_non_null(strstr(buf, "] Running 'sh' '-c' 'exit 0'\n"));
        assert_non_null(strstr(buf, "'sh' finished with status 0"));
}

int main(void) {
        const struct CMUnitTest error_tests[] = {
                cmocka_unit_test(test_error_set),        cmocka_unit_test(test_error_locations),
                cmocka_unit_test(test_error_prefix),     cmocka_unit_test(test_error_truncation),
                cmocka_unit_test(test_error_null),       cmocka_unit_test(test_error_unset_message),
        };
        const struct CMUnitTest log_tests[] = {
                cmocka_unit_test(test_log_line_shape), cmocka_unit_test(test_log_levels),
                cmocka_unit_test(test_log_areas),      cmocka_unit_test(test_log_errno),
                cmocka_unit_test(test_log_long_line),    cmocka_unit_test(test_log_escapes_controls),
        };
        const struct CMUnitTest buf_tests[] = {
                cmocka_unit_test(test_buf_cap_boundary), cmocka_unit_test(test_buf_atomic),
                cmocka_unit_test(test_buf_reserve),
                cmocka_unit_test(test_buf_printf),       cmocka_unit_test(test_buf_take),
                cmocka_unit_test(test_buf_binary_and_zero_cap), cmocka_unit_test(test_buf_large),
                cmocka_unit_test(test_read_file),        cmocka_unit_test(test_read_file_errors),
                cmocka_unit_test(test_read_file_stdin),  cmocka_unit_test(test_read_sysfs_attr),
                cmocka_unit_test(test_read_file_special), cmocka_unit_test(test_host_lock),
                cmocka_unit_test(test_write_atomic),     cmocka_unit_test(test_write_atomic_failure),
                cmocka_unit_test(test_write_atomic_temp_name), cmocka_unit_test(test_lock_for_write),
                cmocka_unit_test(test_mkdir_parents),
        };
        const struct CMUnitTest parse_tests[] = {
                cmocka_unit_test(test_parse_u32),      cmocka_unit_test(test_parse_u64),
                cmocka_unit_test(test_parse_u32_base), cmocka_unit_test(test_parse_int),
                cmocka_unit_test(test_parse_long),     cmocka_unit_test(test_parse_bool),
                cmocka_unit_test(test_parse_duration),
        };
        const struct CMUnitTest host_tests[] = {
                cmocka_unit_test(test_host_default), cmocka_unit_test(test_host_env),
                cmocka_unit_test(test_host_path),    cmocka_unit_test(test_path_join),
        };
        const struct CMUnitTest spawn_tests[] = {
                cmocka_unit_test(test_spawn_exit_codes),
                cmocka_unit_test(test_spawn_capture),
                cmocka_unit_test(test_spawn_output_last_line),
                cmocka_unit_test(test_spawn_stop_signal_not_lost),
                cmocka_unit_test(test_spawn_capture_truncated),
                cmocka_unit_test(test_spawn_env),
                cmocka_unit_test(test_spawn_path_lookup),
                cmocka_unit_test(test_spawn_cwd),
                cmocka_unit_test(test_spawn_start_failures),
                cmocka_unit_test(test_spawn_timeout),
                cmocka_unit_test(test_spawn_timeout_sigkill),
                cmocka_unit_test(test_spawn_timeout_kills_group),
                cmocka_unit_test(test_spawn_timeout_kills_stragglers),
                cmocka_unit_test(test_spawn_grandchild_keeps_pipe),
                cmocka_unit_test(test_spawn_isolation),
                cmocka_unit_test(test_spawn_kill_group_at_exit),
                cmocka_unit_test(test_spawn_stdin_devnull),
                cmocka_unit_test(test_spawn_signals_reset),
                cmocka_unit_test(test_spawn_output_routing),
                cmocka_unit_test(test_spawn_no_fd_leak),
                cmocka_unit_test(test_spawn_log),
        };
        int failed = 0;
        failed += cmocka_run_group_tests_name("error", error_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("log", log_tests, setup_log, teardown_log);
        failed += cmocka_run_group_tests_name("dynbuf", buf_tests, setup_tmpdir, teardown_tmpdir);
        failed += cmocka_run_group_tests_name("parse", parse_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("host", host_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("spawn", spawn_tests, setup_tmpdir, teardown_tmpdir);
        return failed == 0 ? 0 : 1;
}
