/* grpc/: servers and clients of this module talking over unix sockets
 * under $MIGKIT_TEST_TMP: unary calls, status mapping, caps, the streaming
 * method (first message, updates, coalescing, waiting for the first
 * publish, peers that cancel or send garbage, stop with open streams), the
 * kubelet's register call-back pattern across two servers of one process,
 * wait-for-ready, the client's deadline on a server that holds the call,
 * and stop while a unary call is in its handler. Interop with python3-grpcio is in
 * tests/integration/test-grpc-python.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "grpc/client.h"
#include "grpc/server.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Upper bound for things that happen "at once": generous, so a loaded CI
 * machine never fails a test; only a hang reaches it. */
#define WAIT_MS 10000

#define M_ECHO "/test.Svc/Echo"
#define M_FAIL "/test.Svc/Fail"
#define M_RELAY "/test.Svc/Relay"
#define M_WATCH "/test.Svc/Watch"
#define M_PUBLISH "/test.Svc/Publish" /* publishes the request on the same server */
#define M_STREAMS "/test.Svc/Streams" /* the server's open streams, as text */
#define M_BLOCK "/test.Svc/Block"     /* holds the server thread until the test lets go */

static uint64_t now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

#define check_rc(got, want, e)                                                                                 \
        do {                                                                                                   \
                int g_ = (got), w_ = (want);                                                                   \
                if (g_ != w_)                                                                                  \
                        fail_msg("%s:%d: %s = %d (%s), want %d (%s); error '%s'", __FILE__, __LINE__, #got, g_, \
                                 strerror(g_ < 0 ? -g_ : g_), w_, strerror(w_ < 0 ? -w_ : w_), (e)->msg);        \
        } while (0)

#define check_msg(e, substr)                                                                                 \
        do {                                                                                                 \
                if (!strstr((e)->msg, (substr)))                                                             \
                        fail_msg("%s:%d: message '%s' lacks '%s'", __FILE__, __LINE__, (e)->msg, (substr)); \
        } while (0)

#define check_buf(b, str)                                                                                    \
        do {                                                                                                 \
                if ((b)->len != strlen(str) || memcmp((b)->data ? (b)->data : "", (str), (b)->len) != 0)     \
                        fail_msg("%s:%d: got '%.*s' (%zu bytes), want '%s'", __FILE__, __LINE__, (int) (b)->len, \
                                 (b)->data ? (b)->data : "", (b)->len, (str));                               \
        } while (0)

/* ---- temporary directory ---- */

static char tmpdir[PATH_MAX / 2];

static int setup_tmpdir(void **state) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base && *base)
                (void) mkdir(base, 0755);
        /* A unix socket path holds 107 bytes: fall back to /tmp when the build dir is deep. */
        snprintf(tmpdir, sizeof(tmpdir), "%s/grpc.XXXXXX", base && *base && strlen(base) < 60 ? base : "/tmp");
        if (!mkdtemp(tmpdir))
                return -1;
        return 0;
}

static int teardown_tmpdir(void **state) {
        (void) rmdir(tmpdir);
        return 0;
}

static const char *sock(const char *name) {
        static char paths[8][PATH_MAX];
        static unsigned next;
        char *p = paths[next++ % ELEMENTSOF(paths)];
        snprintf(p, PATH_MAX, "%s/%s", tmpdir, name);
        return p;
}

/* ---- a test server ---- */

struct ctx {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        unsigned changes;                 /* streams_changed calls */
        unsigned calls;
        struct mk_grpc_client *relay_to; /* M_RELAY calls M_ECHO there */
        struct mk_grpc_server *server;   /* for M_PUBLISH and M_STREAMS */
        bool hold, held;                 /* M_BLOCK waits while hold; held while it does */
};

#define CTX_INIT {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER}

static const struct {
        const char *name;
        int error;
        const char *message; /* NULL: the handler leaves e empty */
        int status;
        int client_error;
} fail_table[] = {
        {"einval", -EINVAL, "field 'devices_ids' is empty", MK_GRPC_INVALID_ARGUMENT, -EPROTO},
        {"enoent", -ENOENT, "device 'GPU-x' unknown", MK_GRPC_NOT_FOUND, -EPROTO},
        {"enosys", -ENOSYS, "not here", MK_GRPC_UNIMPLEMENTED, -EPROTO},
        {"eagain", -EAGAIN, "try later", MK_GRPC_UNAVAILABLE, -ECONNREFUSED},
        {"e2big", -E2BIG, "too many devices", MK_GRPC_RESOURCE_EXHAUSTED, -EPROTO},
        {"eio", -EIO, "driver said no", MK_GRPC_INTERNAL, -EPROTO},
        {"ebusy-bare", -EBUSY, NULL, MK_GRPC_INTERNAL, -EPROTO},
};

static int handler(void *userdata, const char *method, const uint8_t *req, size_t req_len, struct mk_buf *resp,
                   struct mk_error *e) {
        struct ctx *c = userdata;
        pthread_mutex_lock(&c->lock);
        c->calls++;
        pthread_mutex_unlock(&c->lock);

        if (streq(method, M_ECHO))
                return mk_buf_append(resp, req, req_len);
        if (streq(method, M_FAIL)) {
                for (size_t i = 0; i < ELEMENTSOF(fail_table); i++)
                        if (req_len == strlen(fail_table[i].name) && memcmp(req, fail_table[i].name, req_len) == 0) {
                                if (fail_table[i].message)
                                        return mk_error_set(e, fail_table[i].error, "%s", fail_table[i].message);
                                return fail_table[i].error;
                        }
                return mk_error_set(e, -EINVAL, "no such failure");
        }
        if (streq(method, M_PUBLISH) || streq(method, M_STREAMS)) {
                pthread_mutex_lock(&c->lock);
                struct mk_grpc_server *s = c->server;
                pthread_mutex_unlock(&c->lock);
                if (!s)
                        return mk_error_set(e, -EAGAIN, "server not set yet");
                if (streq(method, M_STREAMS))
                        return mk_buf_printf(resp, "%u", mk_grpc_server_streams(s));
                return mk_grpc_server_publish(s, req, req_len);
        }
        if (streq(method, M_BLOCK)) {
                pthread_mutex_lock(&c->lock);
                c->held = true;
                pthread_cond_broadcast(&c->cond);
                while (c->hold)
                        pthread_cond_wait(&c->cond, &c->lock);
                c->held = false;
                pthread_mutex_unlock(&c->lock);
                return 0;
        }
        if (streq(method, M_RELAY)) {
                /* The kubelet's Register handler: call the caller's server back
                 * before answering (waiting for it, unless asked "nowait"). */
                _cleanup_buf_done_ struct mk_buf inner = {};
                mk_buf_init(&inner, 1024);
                int status = -1;
                bool wait = !(req_len == 6 && memcmp(req, "nowait", 6) == 0);
                int r = mk_grpc_client_call(c->relay_to, M_ECHO, req, req_len, WAIT_MS, wait, &inner, &status, e);
                if (r < 0)
                        return r;
                r = mk_buf_puts(resp, "relayed:");
                if (r < 0)
                        return r;
                return mk_buf_append(resp, inner.data, inner.len);
        }
        return mk_error_set(e, -EIO, "unexpected method '%s'", method);
}

static void streams_changed(void *userdata) {
        struct ctx *c = userdata;
        pthread_mutex_lock(&c->lock);
        c->changes++;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* Waits (at most WAIT_MS) under c->lock until done(c, s, n) holds. */
static bool wait_until(struct ctx *c, struct mk_grpc_server *s, unsigned n,
                       bool (*done)(const struct ctx *, struct mk_grpc_server *, unsigned)) {
        uint64_t end = now_us() + (uint64_t) WAIT_MS * 1000;
        pthread_mutex_lock(&c->lock);
        while (!done(c, s, n) && now_us() < end) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 50 * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                (void) pthread_cond_timedwait(&c->cond, &c->lock, &ts);
        }
        bool ok = done(c, s, n);
        pthread_mutex_unlock(&c->lock);
        return ok;
}

static bool streams_are(const struct ctx *c, struct mk_grpc_server *s, unsigned n) {
        return mk_grpc_server_streams(s) == n;
}

/* Waits (at most WAIT_MS) for the server to count n open streams. */
static void wait_streams(struct ctx *c, struct mk_grpc_server *s, unsigned n) {
        if (!wait_until(c, s, n, streams_are))
                fail_msg("server has %u open streams, want %u", mk_grpc_server_streams(s), n);
}

static bool changes_reach(const struct ctx *c, struct mk_grpc_server *s, unsigned n) {
        return c->changes >= n;
}

/* Waits (at most WAIT_MS) for n streams_changed calls in all: the server
 * calls it after it counts a stream, so a count seen is no call seen yet. */
static unsigned wait_changes(struct ctx *c, struct mk_grpc_server *s, unsigned n) {
        if (!wait_until(c, s, n, changes_reach))
                fail_msg("streams_changed called %u times, want at least %u", c->changes, n);
        pthread_mutex_lock(&c->lock);
        unsigned got = c->changes;
        pthread_mutex_unlock(&c->lock);
        return got;
}

static const char *const methods[] = {M_ECHO, M_FAIL, M_RELAY, M_PUBLISH, M_STREAMS, M_BLOCK, NULL};

static struct mk_grpc_server *start(const char *path, struct ctx *c, size_t max_message) {
        struct mk_grpc_server_config cfg = {
                .socket_path = path,
                .stream_method = M_WATCH,
                .unary_methods = methods,
                .unary = handler,
                .userdata = c,
                .max_message = max_message,
                .streams_changed = streams_changed,
        };
        struct mk_grpc_server *s = NULL;
        struct mk_error e = {};
        check_rc(mk_grpc_server_start(&cfg, &s, &e), 0, &e);
        assert_non_null(s);
        return s;
}

static struct mk_grpc_client *client(const char *path) {
        struct mk_grpc_client *cl = NULL;
        struct mk_error e = {};
        check_rc(mk_grpc_client_open(path, &cl, &e), 0, &e);
        return cl;
}

static int call(struct mk_grpc_client *cl, const char *method, const char *req, struct mk_buf *resp, int *status,
                struct mk_error *e) {
        return mk_grpc_client_call(cl, method, (const uint8_t *) req, strlen(req), WAIT_MS, false, resp, status, e);
}

static void publish(struct mk_grpc_server *s, const char *msg) {
        assert_int_equal(mk_grpc_server_publish(s, (const uint8_t *) msg, strlen(msg)), 0);
}

static struct mk_grpc_stream *watch(struct mk_grpc_client *cl) {
        struct mk_grpc_stream *st = NULL;
        struct mk_error e = {};
        check_rc(mk_grpc_client_stream_open(cl, M_WATCH, NULL, 0, &st, &e), 0, &e);
        return st;
}

static void next_is(struct mk_grpc_stream *st, const char *want) {
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);
        struct mk_error e = {};
        int status = -1;
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), 0, &e);
        check_buf(&b, want);
}

/* ---- tests ---- */

static void test_status_tables(void **state) {
        assert_string_equal(mk_grpc_status_to_string(MK_GRPC_OK), "OK");
        assert_string_equal(mk_grpc_status_to_string(MK_GRPC_UNAVAILABLE), "UNAVAILABLE");
        assert_string_equal(mk_grpc_status_to_string(MK_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
        assert_string_equal(mk_grpc_status_to_string(16), "UNAUTHENTICATED");
        assert_string_equal(mk_grpc_status_to_string(17), "UNKNOWN_STATUS");
        assert_string_equal(mk_grpc_status_to_string(-1), "UNKNOWN_STATUS");
        for (size_t i = 0; i < ELEMENTSOF(fail_table); i++) {
                assert_int_equal(mk_grpc_status_from_errno(fail_table[i].error), fail_table[i].status);
                assert_int_equal(mk_grpc_status_to_errno(fail_table[i].status), fail_table[i].client_error);
        }
        assert_int_equal(mk_grpc_status_from_errno(0), MK_GRPC_OK);
        assert_int_equal(mk_grpc_status_to_errno(MK_GRPC_OK), 0);
        assert_int_equal(mk_grpc_status_to_errno(MK_GRPC_DEADLINE_EXCEEDED), -ETIMEDOUT);
        assert_int_equal(mk_grpc_status_to_errno(MK_GRPC_CANCELLED), -EPROTO);
}

static void test_config_errors(void **state) {
        struct mk_error e = {};
        struct mk_grpc_server *s = NULL;
        struct ctx c = CTX_INIT;
        const char *const bad_methods[] = {"Echo", NULL};
        const char *const blank_methods[] = {"/test.Svc/E cho", NULL};
        const char *const twice[] = {M_ECHO, M_ECHO, NULL};
        char long_path[200];
        memset(long_path, 'x', sizeof(long_path) - 1);
        long_path[0] = '/';
        long_path[sizeof(long_path) - 1] = 0;

        struct {
                struct mk_grpc_server_config cfg;
                int error;
                const char *msg;
        } table[] = {
                {{.socket_path = NULL}, -EINVAL, "no socket path"},
                {{.socket_path = ""}, -EINVAL, "empty socket path"},
                {{.socket_path = long_path}, -ENAMETOOLONG, "longer than 107 bytes"},
                {{.socket_path = sock("a.sock"), .unary_methods = bad_methods, .unary = handler}, -EINVAL,
                 "unary method 'Echo' is not a method path"},
                {{.socket_path = sock("a.sock"), .unary_methods = blank_methods, .unary = handler}, -EINVAL,
                 "blank or non-ASCII"},
                {{.socket_path = sock("a.sock"), .unary_methods = methods}, -EINVAL, "without a handler"},
                {{.socket_path = sock("a.sock"), .stream_method = "x"}, -EINVAL, "stream method 'x'"},
                {{.socket_path = sock("a.sock"), .unary_methods = twice, .unary = handler}, -EINVAL,
                 "Cannot register method '/test.Svc/Echo'"},
                {{.socket_path = sock("a.sock"), .unary_methods = methods, .unary = handler, .stream_method = M_ECHO},
                 -EINVAL, "Cannot register method '/test.Svc/Echo'"},
                {{.socket_path = sock("a.sock"), .max_message = (size_t) INT_MAX + 1}, -EINVAL, "max_message"},
                {{.socket_path = sock("no-such-dir/a.sock")}, -ENOENT, "no-such-dir"},
        };
        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                table[i].cfg.userdata = &c;
                check_rc(mk_grpc_server_start(&table[i].cfg, &s, &e), table[i].error, &e);
                check_msg(&e, table[i].msg);
                assert_null(s);
        }
        assert_int_equal(access(sock("a.sock"), F_OK), -1);

        /* A file that is not a socket is never replaced. */
        const char *file = sock("file.sock");
        FILE *f = fopen(file, "we");
        assert_non_null(f);
        assert_int_equal(fputs("keep me", f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
        struct mk_grpc_server_config cfg = {.socket_path = file};
        check_rc(mk_grpc_server_start(&cfg, &s, &e), -EEXIST, &e);
        check_msg(&e, "is not a socket");
        struct stat st;
        assert_int_equal(stat(file, &st), 0);
        assert_int_equal(st.st_size, 7);
        assert_int_equal(unlink(file), 0);

        /* A stale socket (its server gone) is replaced. */
        const char *stale = sock("stale.sock");
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", stale);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        close(fd);
        s = start(stale, &c, 0);
        struct mk_grpc_client *cl = client(stale);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        int status = -1;
        check_rc(call(cl, M_ECHO, "hi", &b, &status, &e), 0, &e);
        check_buf(&b, "hi");
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
        assert_null(s);
        /* Stop removes its socket. */
        assert_int_equal(access(stale, F_OK), -1);

        /* Client paths. */
        check_rc(mk_grpc_client_open(long_path, &cl, &e), -ENAMETOOLONG, &e);
        check_rc(mk_grpc_client_open("", &cl, &e), -EINVAL, &e);
        assert_null(cl);
        assert_null(mk_grpc_server_stop(NULL));
        assert_null(mk_grpc_client_close(NULL));
        assert_null(mk_grpc_stream_close(NULL));
}

static void test_unary(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("unary.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);
        struct mk_error e = {};
        int status = -1;

        check_rc(call(cl, M_ECHO, "hello", &b, &status, &e), 0, &e);
        check_buf(&b, "hello");
        assert_int_equal(status, MK_GRPC_OK);

        /* Bytes, not strings: NULs pass both ways. */
        const uint8_t bin[] = {0, 1, 2, 0, 0xff, 0x80, 0};
        check_rc(mk_grpc_client_call(cl, M_ECHO, bin, sizeof(bin), WAIT_MS, false, &b, &status, &e), 0, &e);
        assert_int_equal(b.len, sizeof(bin));
        assert_memory_equal(b.data, bin, sizeof(bin));

        /* An empty message (proto3 Empty) both ways; the buffer's old content goes. */
        check_rc(mk_grpc_client_call(cl, M_ECHO, NULL, 0, WAIT_MS, false, &b, &status, &e), 0, &e);
        assert_int_equal(b.len, 0);

        /* The channel is reused. */
        for (int i = 0; i < 50; i++) {
                char msg[32];
                snprintf(msg, sizeof(msg), "call %d", i);
                check_rc(call(cl, M_ECHO, msg, &b, NULL, &e), 0, &e);
                check_buf(&b, msg);
        }
        assert_int_equal(c.calls, 53);

        /* A response over the caller's cap. */
        struct mk_buf small;
        mk_buf_init(&small, 3);
        status = -1;
        check_rc(call(cl, M_ECHO, "four", &small, &status, &e), -E2BIG, &e);
        check_msg(&e, "larger than 3 bytes");
        mk_buf_done(&small);

        /* A bad method path is refused before any call. */
        status = -1;
        check_rc(call(cl, "nope", "x", &b, &status, &e), -EINVAL, &e);
        assert_int_equal(status, -1);

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_unknown_method(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("unknown.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);
        struct mk_error e = {};
        int status = -1;

        check_rc(call(cl, "/test.Svc/Nope", "x", &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_UNIMPLEMENTED);
        check_msg(&e, "UNIMPLEMENTED");
        check_msg(&e, "unknown method '/test.Svc/Nope'");
        /* Twice: the generic request is re-armed. */
        check_rc(call(cl, "/other.Svc/Echo", "x", &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_UNIMPLEMENTED);
        assert_int_equal(c.calls, 0);
        check_rc(call(cl, M_ECHO, "still", &b, &status, &e), 0, &e);
        check_buf(&b, "still");

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_handler_errors(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("fail.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);

        for (size_t i = 0; i < ELEMENTSOF(fail_table); i++) {
                struct mk_error e = {};
                int status = -1;
                check_rc(call(cl, M_FAIL, fail_table[i].name, &b, &status, &e), fail_table[i].client_error, &e);
                if (status != fail_table[i].status)
                        fail_msg("%s: status %d, want %d", fail_table[i].name, status, fail_table[i].status);
                check_msg(&e, M_FAIL);
                check_msg(&e, mk_grpc_status_to_string(fail_table[i].status));
                check_msg(&e, fail_table[i].message ? fail_table[i].message : strerror(-fail_table[i].error));
                assert_int_equal(e.code, fail_table[i].client_error);
        }

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_oversized(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("big.sock");
        struct mk_grpc_server *s = start(path, &c, 1024);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64 * 1024);
        struct mk_error e = {};
        int status = -1;

        _cleanup_free_ uint8_t *big = calloc(1, 64 * 1024);
        assert_non_null(big);
        check_rc(mk_grpc_client_call(cl, M_ECHO, big, 1025, WAIT_MS, false, &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_RESOURCE_EXHAUSTED);
        check_rc(mk_grpc_client_call(cl, M_ECHO, big, 64 * 1024, WAIT_MS, false, &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_RESOURCE_EXHAUSTED);
        /* The oversized stream request too. */
        struct mk_grpc_stream *st = NULL;
        check_rc(mk_grpc_client_stream_open(cl, M_WATCH, big, 4096, &st, &e), 0, &e);
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_RESOURCE_EXHAUSTED);
        st = mk_grpc_stream_close(st);
        assert_int_equal(c.calls, 0);
        assert_int_equal(mk_grpc_server_streams(s), 0);

        /* At the cap it passes, and the server still serves. */
        check_rc(mk_grpc_client_call(cl, M_ECHO, big, 1024, WAIT_MS, false, &b, &status, &e), 0, &e);
        assert_int_equal(b.len, 1024);
        check_rc(call(cl, M_ECHO, "after", &b, &status, &e), 0, &e);
        check_buf(&b, "after");

        /* What we send is capped too. */
        assert_int_equal(mk_grpc_server_publish(s, big, MK_GRPC_MAX_SEND_MESSAGE + 1), -E2BIG);
        check_rc(mk_grpc_client_call(cl, M_ECHO, big, MK_GRPC_MAX_SEND_MESSAGE + 1, WAIT_MS, false, &b, &status, &e),
                 -E2BIG, &e);

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_stream_updates(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("stream.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);

        publish(s, "list 1");
        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "list 1");
        wait_streams(&c, s, 1);
        publish(s, "list 2");
        next_is(st, "list 2");
        publish(s, "list 3");
        next_is(st, "list 3");

        /* A second stream starts with the newest message; both get the next. */
        struct mk_grpc_stream *st2 = watch(cl);
        next_is(st2, "list 3");
        wait_streams(&c, s, 2);
        publish(s, "list 4");
        next_is(st, "list 4");
        next_is(st2, "list 4");
        /* An empty message is a message (an empty device list). */
        publish(s, "");
        next_is(st, "");
        next_is(st2, "");

        /* Unary calls while streams are open. */
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        check_rc(call(cl, M_ECHO, "beside", &b, NULL, &e), 0, &e);

        st = mk_grpc_stream_close(st);
        st2 = mk_grpc_stream_close(st2);
        wait_streams(&c, s, 0);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_stream_coalescing(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("coalesce.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);

        publish(s, "m000");
        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "m000");
        wait_streams(&c, s, 1);
        uint64_t sends_before = mk_grpc_server_stream_sends(s);

        for (int i = 1; i <= 100; i++) {
                char msg[16];
                snprintf(msg, sizeof(msg), "m%03d", i);
                publish(s, msg);
        }
        /* The last always arrives; before it, fewer or equal, in order. */
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status, received = 0, last = 0;
        for (;;) {
                check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), 0, &e);
                received++;
                assert_int_equal(b.len, 4);
                int n = (b.data[1] - '0') * 100 + (b.data[2] - '0') * 10 + (b.data[3] - '0');
                if (n <= last)
                        fail_msg("message m%03d after m%03d", n, last);
                last = n;
                if (n == 100)
                        break;
        }
        uint64_t sends = mk_grpc_server_stream_sends(s) - sends_before;
        print_message("coalescing: 100 publishes, %d messages received, %llu sent\n", received,
                      (unsigned long long) sends);
        assert_true(received <= 100);
        assert_int_equal(sends, (uint64_t) received);
        /* Nothing is left to come. */
        check_rc(mk_grpc_stream_next(st, 200, &b, &status, &e), -ETIMEDOUT, &e);

        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

struct block_call {
        struct mk_grpc_client *cl;
        int r;
        struct mk_error e;
};

static void *block_thread(void *userdata) {
        struct block_call *bc = userdata;
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        bc->r = mk_grpc_client_call(bc->cl, M_BLOCK, NULL, 0, WAIT_MS, false, &b, NULL, &bc->e);
        return NULL;
}

static void test_stream_coalescing_busy(void **state) {
        /* Deterministic: while the server thread is held in a handler, 100
         * publishes pile up; once it is free, the stream gets the newest only. */
        struct ctx c = CTX_INIT;
        const char *path = sock("busy.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        publish(s, "m000");
        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "m000");
        wait_streams(&c, s, 1);
        uint64_t sends_before = mk_grpc_server_stream_sends(s);

        pthread_mutex_lock(&c.lock);
        c.hold = true;
        pthread_mutex_unlock(&c.lock);
        struct block_call bc = {.cl = cl};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, block_thread, &bc), 0);
        pthread_mutex_lock(&c.lock);
        while (!c.held)
                pthread_cond_wait(&c.cond, &c.lock);
        pthread_mutex_unlock(&c.lock);

        for (int i = 1; i <= 100; i++) {
                char msg[16];
                snprintf(msg, sizeof(msg), "m%03d", i);
                publish(s, msg);
        }
        assert_int_equal(mk_grpc_server_stream_sends(s), sends_before);

        pthread_mutex_lock(&c.lock);
        c.hold = false;
        pthread_cond_broadcast(&c.cond);
        pthread_mutex_unlock(&c.lock);
        assert_int_equal(pthread_join(t, NULL), 0);
        check_rc(bc.r, 0, &bc.e);

        next_is(st, "m100");
        assert_int_equal(mk_grpc_server_stream_sends(s) - sends_before, 1);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status;
        check_rc(mk_grpc_stream_next(st, 200, &b, &status, &e), -ETIMEDOUT, &e);

        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

struct publisher {
        struct mk_grpc_server *s;
        int id;
        int r; /* first failure; asserted on the main thread */
};

static void *publisher_thread(void *userdata) {
        struct publisher *p = userdata;
        for (int i = 0; i < 300 && p->r == 0; i++) {
                char msg[32];
                snprintf(msg, sizeof(msg), "t%d-%d", p->id, i);
                p->r = mk_grpc_server_publish(p->s, (const uint8_t *) msg, strlen(msg));
        }
        return NULL;
}

static void test_stream_churn(void **state) {
        /* Publishers on four threads while streams open, read a little and
         * go: the wake-ups land on calls that are ending (ASan watches). */
        struct ctx c = CTX_INIT;
        const char *path = sock("churn.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        publish(s, "start");

        struct publisher p[4];
        pthread_t t[4];
        for (int i = 0; i < 4; i++) {
                p[i] = (struct publisher) {.s = s, .id = i};
                assert_int_equal(pthread_create(&t[i], NULL, publisher_thread, &p[i]), 0);
        }
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status;
        for (int round = 0; round < 20; round++) {
                struct mk_grpc_stream *st[3];
                for (int k = 0; k < 3; k++)
                        st[k] = watch(cl);
                for (int k = 0; k < 3; k++)
                        check_rc(mk_grpc_stream_next(st[k], WAIT_MS, &b, &status, &e), 0, &e);
                for (int k = 0; k < 3; k++)
                        st[k] = mk_grpc_stream_close(st[k]);
        }
        for (int i = 0; i < 4; i++) {
                assert_int_equal(pthread_join(t[i], NULL), 0);
                assert_int_equal(p[i].r, 0);
        }
        wait_streams(&c, s, 0);

        /* After the storm: a new stream gets the newest, then the next. */
        struct mk_grpc_stream *st = watch(cl);
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), 0, &e);
        assert_true(b.len > 0 && b.data[0] == 't');
        publish(s, "final");
        next_is(st, "final");
        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_stream_waits_for_first_publish(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("wait.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status = -1;

        struct mk_grpc_stream *st = watch(cl);
        wait_streams(&c, s, 1);
        check_rc(mk_grpc_stream_next(st, 200, &b, &status, &e), -ETIMEDOUT, &e);
        check_msg(&e, "No message on '" M_WATCH "' within 200 ms");
        /* The receive stays pending across the timeout. */
        check_rc(mk_grpc_stream_next(st, 0, &b, &status, &e), -ETIMEDOUT, &e);
        publish(s, "first");
        next_is(st, "first");

        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_stream_cancel(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("cancel.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);

        publish(s, "a");
        struct mk_grpc_stream *st = watch(cl);
        struct mk_grpc_stream *idle = watch(cl); /* never read */
        next_is(st, "a");
        wait_streams(&c, s, 2);
        unsigned changes = wait_changes(&c, s, 2);

        st = mk_grpc_stream_close(st);
        wait_streams(&c, s, 1);
        idle = mk_grpc_stream_close(idle);
        wait_streams(&c, s, 0);
        assert_int_equal(wait_changes(&c, s, changes + 2), changes + 2);

        /* Publishing to no stream, and the server still serves streams and calls. */
        publish(s, "b");
        st = watch(cl);
        next_is(st, "b");
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        check_rc(call(cl, M_ECHO, "alive", &b, NULL, &e), 0, &e);

        /* A whole client going away with its stream. */
        struct mk_grpc_client *cl2 = client(path);
        struct mk_grpc_stream *st2 = watch(cl2);
        next_is(st2, "b");
        wait_streams(&c, s, 2);
        st2 = mk_grpc_stream_close(st2);
        cl2 = mk_grpc_client_close(cl2);
        wait_streams(&c, s, 1);

        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_stop_with_open_streams(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("stop.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status = -1;

        /* One stream that reads, one before the first publish, one that never reads. */
        struct mk_grpc_stream *waiting = watch(cl);
        wait_streams(&c, s, 1);
        publish(s, "x");
        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "x");
        struct mk_grpc_stream *idle = watch(cl);
        wait_streams(&c, s, 3);

        uint64_t t0 = now_us();
        s = mk_grpc_server_stop(s);
        uint64_t t1 = now_us();
        print_message("stop with 3 open streams: %.1f ms\n", (double) (t1 - t0) / 1000.0);
        assert_null(s);
        assert_int_equal(access(path, F_OK), -1);

        /* Each stream sees its end (not a timeout): status OK, or the cut. */
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), -EPIPE, &e);
        assert_int_equal(status, MK_GRPC_OK);
        check_msg(&e, "the stream ended");
        /* Again: the end is sticky. */
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), -EPIPE, &e);
        int r = mk_grpc_stream_next(waiting, WAIT_MS, &b, &status, &e);
        if (r == 0)
                check_buf(&b, "x");
        else if (r != -EPIPE && r != -EPROTO)
                fail_msg("waiting stream: %d (%s)", r, e.msg);
        do
                r = mk_grpc_stream_next(idle, WAIT_MS, &b, &status, &e);
        while (r == 0);
        if (r != -EPIPE && r != -EPROTO)
                fail_msg("idle stream: %d (%s)", r, e.msg);

        waiting = mk_grpc_stream_close(waiting);
        st = mk_grpc_stream_close(st);
        idle = mk_grpc_stream_close(idle);

        /* A call to the stopped server fails fast. */
        check_rc(call(cl, M_ECHO, "gone", &b, &status, &e), -ECONNREFUSED, &e);
        assert_int_equal(status, MK_GRPC_UNAVAILABLE);
        cl = mk_grpc_client_close(cl);
}

struct relay_call {
        struct mk_grpc_client *cl;
        int r, status;
        struct mk_error e;
        struct mk_buf resp;
};

static void *relay_thread(void *userdata) {
        struct relay_call *rc = userdata;
        rc->r = mk_grpc_client_call(rc->cl, M_RELAY, (const uint8_t *) "options?", 8, WAIT_MS, true, &rc->resp,
                                    &rc->status, &rc->e);
        return NULL;
}

static void test_register_callback(void **state) {
        /* The kubelet pattern: our thread T calls B (kubelet's Register); B's
         * handler calls back A (our plugin server) before it answers. Both
         * servers live in this process. */
        struct ctx ca = CTX_INIT, cb = CTX_INIT;
        const char *pa = sock("plugin.sock"), *pb = sock("kubelet.sock");
        struct mk_grpc_server *a = start(pa, &ca, 0);
        cb.relay_to = client(pa);
        struct mk_grpc_server *b = start(pb, &cb, 0);

        struct relay_call rc = {.cl = client(pb), .status = -1};
        mk_buf_init(&rc.resp, 1024);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, relay_thread, &rc), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        check_rc(rc.r, 0, &rc.e);
        check_buf(&rc.resp, "relayed:options?");
        assert_int_equal(ca.calls, 1);
        assert_int_equal(cb.calls, 1);

        /* From this thread too, several times. */
        for (int i = 0; i < 5; i++) {
                relay_thread(&rc);
                check_rc(rc.r, 0, &rc.e);
        }
        assert_int_equal(ca.calls, 6);

        /* A gone: B's handler fails, B answers with A's status, nothing hangs. */
        a = mk_grpc_server_stop(a);
        rc.r = mk_grpc_client_call(rc.cl, M_RELAY, (const uint8_t *) "nowait", 6, WAIT_MS, false, &rc.resp,
                                   &rc.status, &rc.e);
        check_rc(rc.r, -EPROTO, &rc.e);
        assert_int_equal(rc.status, MK_GRPC_INTERNAL);
        check_msg(&rc.e, "UNAVAILABLE");

        mk_buf_done(&rc.resp);
        rc.cl = mk_grpc_client_close(rc.cl);
        b = mk_grpc_server_stop(b);
        cb.relay_to = mk_grpc_client_close(cb.relay_to);
}

struct late_start {
        const char *path;
        struct ctx *c;
        struct mk_grpc_server *s;
};

static void *late_start_thread(void *userdata) {
        struct late_start *ls = userdata;
        sleep_ms(300);
        ls->s = start(ls->path, ls->c, 0);
        return NULL;
}

static void test_wait_for_ready(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("late.sock");
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status = -1;

        /* No server: fails at once without wait_for_ready, at the deadline with it. */
        check_rc(call(cl, M_ECHO, "x", &b, &status, &e), -ECONNREFUSED, &e);
        assert_int_equal(status, MK_GRPC_UNAVAILABLE);
        uint64_t t0 = now_us();
        check_rc(mk_grpc_client_call(cl, M_ECHO, (const uint8_t *) "x", 1, 500, true, &b, &status, &e), -ETIMEDOUT,
                 &e);
        assert_int_equal(status, MK_GRPC_DEADLINE_EXCEEDED);
        check_msg(&e, "DEADLINE_EXCEEDED");
        uint64_t waited = now_us() - t0;
        print_message("wait_for_ready without a server: -ETIMEDOUT after %.0f ms (deadline 500 ms)\n",
                      (double) waited / 1000.0);

        /* The server comes 300 ms after the call started. */
        struct late_start ls = {.path = path, .c = &c};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, late_start_thread, &ls), 0);
        t0 = now_us();
        check_rc(mk_grpc_client_call(cl, M_ECHO, (const uint8_t *) "ready", 5, WAIT_MS, true, &b, &status, &e), 0, &e);
        print_message("wait_for_ready, server 300 ms late: answered after %.0f ms\n",
                      (double) (now_us() - t0) / 1000.0);
        check_buf(&b, "ready");
        assert_int_equal(pthread_join(t, NULL), 0);

        cl = mk_grpc_client_close(cl);
        ls.s = mk_grpc_server_stop(ls.s);
}

/* ---- a call in flight: the client's deadline, the server's stop ---- */

static void set_hold(struct ctx *c, bool hold) {
        pthread_mutex_lock(&c->lock);
        c->hold = hold;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* Waits until the M_BLOCK handler holds the server thread. */
static void wait_held(struct ctx *c) {
        pthread_mutex_lock(&c->lock);
        while (!c->held)
                pthread_cond_wait(&c->cond, &c->lock);
        pthread_mutex_unlock(&c->lock);
}

static bool is_held(struct ctx *c) {
        pthread_mutex_lock(&c->lock);
        bool held = c->held;
        pthread_mutex_unlock(&c->lock);
        return held;
}

static void test_client_deadline(void **state) {
        /* The server takes the call and never answers in time: the client's
         * own deadline ends it (not a refused connection, not a hang), and
         * the server serves on once its handler returns. */
        struct ctx c = CTX_INIT;
        const char *path = sock("deadline.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status = -1;

        set_hold(&c, true);
        uint64_t t0 = now_us();
        check_rc(mk_grpc_client_call(cl, M_BLOCK, NULL, 0, 300, false, &b, &status, &e), -ETIMEDOUT, &e);
        uint64_t waited = now_us() - t0;
        assert_int_equal(status, MK_GRPC_DEADLINE_EXCEEDED);
        assert_int_equal(e.code, -ETIMEDOUT);
        check_msg(&e, M_BLOCK);
        check_msg(&e, "DEADLINE_EXCEEDED");
        /* The handler was running: the call reached the server before its deadline passed. */
        wait_held(&c);
        print_message("deadline 300 ms, server holding: -ETIMEDOUT after %.0f ms\n", (double) waited / 1000.0);
        if (waited < 300 * 1000)
                fail_msg("the call ended after %.0f ms, before its 300 ms deadline", (double) waited / 1000.0);

        set_hold(&c, false);
        check_rc(call(cl, M_ECHO, "after", &b, &status, &e), 0, &e);
        check_buf(&b, "after");
        assert_int_equal(c.calls, 2);

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

struct pending_call {
        struct mk_grpc_client *cl;
        struct mk_grpc_server *s;
        int r, status;
        struct mk_error e;
        struct mk_buf resp;
        pthread_mutex_t lock;
        bool stopped;
};

static void *pending_call_thread(void *userdata) {
        struct pending_call *pc = userdata;
        pc->r = mk_grpc_client_call(pc->cl, M_BLOCK, (const uint8_t *) "held", 4, WAIT_MS, false, &pc->resp,
                                    &pc->status, &pc->e);
        return NULL;
}

static void *stop_thread(void *userdata) {
        struct pending_call *pc = userdata;
        pc->s = mk_grpc_server_stop(pc->s);
        pthread_mutex_lock(&pc->lock);
        pc->stopped = true;
        pthread_mutex_unlock(&pc->lock);
        return NULL;
}

static void test_stop_with_pending_call(void **state) {
        /* stop while a unary call is in its handler: stop waits for the
         * handler (it must not free the server under it), the call gets its
         * answer, the socket goes, and later calls fail fast. */
        struct ctx c = CTX_INIT;
        const char *path = sock("pending.sock");
        struct pending_call pc = {.lock = PTHREAD_MUTEX_INITIALIZER, .status = -1};
        pc.s = start(path, &c, 0);
        pc.cl = client(path);
        mk_buf_init(&pc.resp, 64);

        set_hold(&c, true);
        pthread_t caller, stopper;
        assert_int_equal(pthread_create(&caller, NULL, pending_call_thread, &pc), 0);
        wait_held(&c);
        assert_int_equal(pthread_create(&stopper, NULL, stop_thread, &pc), 0);
        sleep_ms(300);
        pthread_mutex_lock(&pc.lock);
        bool stopped = pc.stopped;
        pthread_mutex_unlock(&pc.lock);
        if (stopped)
                fail_msg("stop returned while a handler was still running");
        assert_true(is_held(&c));

        set_hold(&c, false);
        assert_int_equal(pthread_join(stopper, NULL), 0);
        assert_int_equal(pthread_join(caller, NULL), 0);
        assert_null(pc.s);
        print_message("call pending across stop: %d, status %s (%s)\n", pc.r, mk_grpc_status_to_string(pc.status),
                      pc.e.msg);
        check_rc(pc.r, 0, &pc.e);
        assert_int_equal(pc.status, MK_GRPC_OK);
        assert_int_equal(c.calls, 1);
        assert_int_equal(access(path, F_OK), -1);

        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        int status = -1;
        check_rc(call(pc.cl, M_ECHO, "gone", &b, &status, &e), -ECONNREFUSED, &e);
        assert_int_equal(status, MK_GRPC_UNAVAILABLE);
        mk_buf_done(&pc.resp);
        pc.cl = mk_grpc_client_close(pc.cl);
}

static int raw_connect(const char *path) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        assert_int_equal(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        return fd;
}

static void raw_send(int fd, const void *data, size_t len) {
        /* The server may already have closed: a short or failed write is fine. */
        (void) send(fd, data, len, MSG_NOSIGNAL);
}

static void test_garbage_peers(void **state) {
        struct ctx c = CTX_INIT;
        const char *path = sock("garbage.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        publish(s, "ok");
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

        /* Connect and leave; plain text; a preface then junk frames; a frame
         * header announcing 16 MiB; a half preface left hanging. */
        close(raw_connect(path));
        int fd = raw_connect(path);
        raw_send(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
        close(fd);
        fd = raw_connect(path);
        raw_send(fd, preface, sizeof(preface) - 1);
        uint8_t junk[512];
        for (size_t i = 0; i < sizeof(junk); i++)
                junk[i] = (uint8_t) (i * 37 + 11);
        raw_send(fd, junk, sizeof(junk));
        close(fd);
        fd = raw_connect(path);
        raw_send(fd, preface, sizeof(preface) - 1);
        const uint8_t huge[] = {0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
        raw_send(fd, huge, sizeof(huge));
        close(fd);
        int hanging = raw_connect(path);
        raw_send(hanging, preface, 10);

        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 64);
        struct mk_error e = {};
        check_rc(call(cl, M_ECHO, "survived", &b, NULL, &e), 0, &e);
        check_buf(&b, "survived");
        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "ok");
        st = mk_grpc_stream_close(st);
        cl = mk_grpc_client_close(cl);

        /* Stop does not wait for the hanging peer. */
        s = mk_grpc_server_stop(s);
        close(hanging);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static void test_many_calls(void **state) {
        /* 10,000 sequential calls on one client: every one answered. The
         * latency is printed for the record, never asserted. */
        enum { N = 10000 };
        struct ctx c = CTX_INIT;
        const char *path = sock("many.sock");
        struct mk_grpc_server *s = start(path, &c, 0);
        struct mk_grpc_client *cl = client(path);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);
        struct mk_error e = {};
        _cleanup_free_ uint64_t *lat = calloc(N, sizeof(uint64_t));
        assert_non_null(lat);
        /* About the size of an AllocateRequest for one MIG device. */
        uint8_t req[64];
        memset(req, 'r', sizeof(req));

        for (int i = 0; i < N; i++) {
                uint64_t t0 = now_us();
                int r = mk_grpc_client_call(cl, M_ECHO, req, sizeof(req), WAIT_MS, false, &b, NULL, &e);
                lat[i] = now_us() - t0;
                if (r < 0)
                        fail_msg("call %d: %d (%s)", i, r, e.msg);
                assert_int_equal(b.len, sizeof(req));
        }
        assert_int_equal(c.calls, N);
        qsort(lat, N, sizeof(uint64_t), cmp_u64);
        print_message("unary round trip over %d calls: median %llu us, p99 %llu us, max %llu us\n", N,
                      (unsigned long long) lat[N / 2], (unsigned long long) lat[N * 99 / 100],
                      (unsigned long long) lat[N - 1]);

        cl = mk_grpc_client_close(cl);
        s = mk_grpc_server_stop(s);
}

static void test_global_refcount(void **state) {
        /* Nested init/shutdown pairs around objects, and again after a full shutdown. */
        for (int round = 0; round < 2; round++) {
                mk_grpc_global_init();
                mk_grpc_global_init();
                struct ctx c = CTX_INIT;
                const char *path = sock("global.sock");
                struct mk_grpc_server *s = start(path, &c, 0);
                mk_grpc_global_shutdown();
                struct mk_grpc_client *cl = client(path);
                _cleanup_buf_done_ struct mk_buf b = {};
                mk_buf_init(&b, 64);
                struct mk_error e = {};
                check_rc(call(cl, M_ECHO, "ref", &b, NULL, &e), 0, &e);
                cl = mk_grpc_client_close(cl);
                s = mk_grpc_server_stop(s);
                mk_grpc_global_shutdown();
        }
        /* An unbalanced shutdown is ignored. */
        mk_grpc_global_shutdown();
}

/* ---- interop with python3-grpcio (tests/integration/grpc_peer.py) ---- */

static bool run(const char *const *argv, int timeout_ms, struct mk_spawn_result *res) {
        struct mk_spawn_opts o = {.argv = argv, .timeout_ms = timeout_ms, .capture = true, .output_cap = 64 * 1024};
        struct mk_error e = {};
        int r = mk_spawn(&o, res, &e);
        if (r < 0) {
                *res = (struct mk_spawn_result) {.exit_status = 127};
                return false;
        }
        return res->exit_status == 0;
}

/* Debian's python3 with python3-grpcio; NULL when there is none. */
static const char *python_with_grpc(void) {
        static const char *const candidates[] = {"/usr/bin/python3", "python3"};
        for (size_t i = 0; i < ELEMENTSOF(candidates); i++) {
                const char *argv[] = {candidates[i], "-c", "import grpc", NULL};
                struct mk_spawn_result res;
                bool ok = run(argv, 30000, &res);
                mk_spawn_result_done(&res);
                if (ok)
                        return candidates[i];
        }
        return NULL;
}

static const char *peer_script(void) {
        static char path[PATH_MAX];
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        if (src && *src)
                snprintf(path, sizeof(path), "%s/tests/integration/grpc_peer.py", src);
        else {
                /* __FILE__ is ".../tests/unit/test-grpc.c". */
                snprintf(path, sizeof(path), "%s", __FILE__);
                char *cut = strstr(path, "unit/test-grpc.c");
                if (cut)
                        snprintf(cut, sizeof(path) - (size_t) (cut - path), "integration/grpc_peer.py");
        }
        return path;
}

static void test_python_client(void **state) {
        /* python3-grpcio calls our server: the test's methods, errors, caps,
         * a refused gzip request, a stream it cancels and one whose process
         * it kills. */
        const char *py = python_with_grpc();
        if (!py) {
                print_message("python3-grpcio not found: skipped\n");
                skip();
        }
        struct ctx c = CTX_INIT;
        const char *path = sock("py-client.sock");
        struct mk_grpc_server *s = start(path, &c, 1024);
        pthread_mutex_lock(&c.lock);
        c.server = s;
        pthread_mutex_unlock(&c.lock);

        const char *argv[] = {py, peer_script(), "client", path, NULL};
        struct mk_spawn_result res;
        bool ok = run(argv, 120000, &res);
        if (!ok)
                fail_msg("grpc_peer.py client: exit %d%s\n%s", res.exit_status, res.timed_out ? " (timed out)" : "",
                         res.output ? res.output : "");
        mk_spawn_result_done(&res);
        wait_streams(&c, s, 0);

        s = mk_grpc_server_stop(s);
}

struct peer_run {
        const char *const *argv;
        struct mk_spawn_result res;
        bool ok;
};

static void *peer_thread(void *userdata) {
        struct peer_run *p = userdata;
        p->ok = run(p->argv, 90000, &p->res);
        return NULL;
}

static void test_python_server(void **state) {
        /* Our client against python3-grpcio's server, which also plays the
         * kubelet: its Callback dials our server A back while our call waits. */
        const char *py = python_with_grpc();
        if (!py) {
                print_message("python3-grpcio not found: skipped\n");
                skip();
        }
        struct ctx ca = CTX_INIT;
        const char *pa = sock("py-a.sock"), *pb = sock("py-b.sock");
        struct mk_grpc_server *a = start(pa, &ca, 0);

        const char *argv[] = {py, peer_script(), "serve", pb, NULL};
        struct peer_run p = {.argv = argv};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, peer_thread, &p), 0);

        struct mk_grpc_client *cl = client(pb);
        _cleanup_buf_done_ struct mk_buf b = {};
        mk_buf_init(&b, 1024);
        struct mk_error e = {};
        int status = -1;
        /* Python takes a while to start: wait_for_ready. */
        check_rc(mk_grpc_client_call(cl, M_ECHO, (const uint8_t *) "hi", 2, 60000, true, &b, &status, &e), 0, &e);
        check_buf(&b, "hi");

        struct mk_grpc_stream *st = watch(cl);
        next_is(st, "p1");
        next_is(st, "p2");
        next_is(st, "p3");
        check_rc(mk_grpc_stream_next(st, WAIT_MS, &b, &status, &e), -EPIPE, &e);
        assert_int_equal(status, MK_GRPC_OK);
        st = mk_grpc_stream_close(st);

        check_rc(call(cl, M_FAIL, "x", &b, &status, &e), -EPROTO, &e);
        assert_int_equal(status, MK_GRPC_FAILED_PRECONDITION);
        check_msg(&e, "python says no");

        check_rc(call(cl, "/test.Svc/Callback", pa, &b, &status, &e), 0, &e);
        check_buf(&b, "callback:from python");
        assert_int_equal(ca.calls, 1);

        check_rc(call(cl, "/test.Svc/Quit", "", &b, &status, &e), 0, &e);
        check_buf(&b, "bye");
        assert_int_equal(pthread_join(t, NULL), 0);
        if (!p.ok)
                fail_msg("grpc_peer.py serve: exit %d%s\n%s", p.res.exit_status, p.res.timed_out ? " (timed out)" : "",
                         p.res.output ? p.res.output : "");
        mk_spawn_result_done(&p.res);

        cl = mk_grpc_client_close(cl);
        a = mk_grpc_server_stop(a);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_status_tables),
                cmocka_unit_test(test_config_errors),
                cmocka_unit_test(test_unary),
                cmocka_unit_test(test_unknown_method),
                cmocka_unit_test(test_handler_errors),
                cmocka_unit_test(test_oversized),
                cmocka_unit_test(test_stream_updates),
                cmocka_unit_test(test_stream_coalescing),
                cmocka_unit_test(test_stream_coalescing_busy),
                cmocka_unit_test(test_stream_churn),
                cmocka_unit_test(test_stream_waits_for_first_publish),
                cmocka_unit_test(test_stream_cancel),
                cmocka_unit_test(test_stop_with_open_streams),
                cmocka_unit_test(test_register_callback),
                cmocka_unit_test(test_wait_for_ready),
                cmocka_unit_test(test_client_deadline),
                cmocka_unit_test(test_stop_with_pending_call),
                cmocka_unit_test(test_garbage_peers),
                cmocka_unit_test(test_many_calls),
                cmocka_unit_test(test_global_refcount),
                cmocka_unit_test(test_python_client),
                cmocka_unit_test(test_python_server),
        };
        return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
