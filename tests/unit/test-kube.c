/* Protocol tests for kube/: an HTTP server on 127.0.0.1 in a thread replays
 * the scripts in tests/fixtures/kube/NAME.txt (canned reply in, exact request
 * out; the format is in tests/fixtures/kube/README.md), and kubeconfig and
 * in-cluster parsing against fixture files. The behaviour against a real
 * kube-apiserver is in test-kube-apiserver.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"
#include "version.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define PIECE_GAP_MS 30
#define MAX_CONNS 64

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

#define check_msg(e, substr)                                                                             \
        do {                                                                                             \
                if (!strstr((e)->msg, (substr)))                                                         \
                        fail_msg("%s:%d: message '%s' lacks '%s'", __FILE__, __LINE__, (e)->msg, (substr)); \
        } while (0)

#define check_rc(got, want, e)                                                                                 \
        do {                                                                                                   \
                int g_ = (got), w_ = (want);                                                                   \
                if (g_ != w_)                                                                                  \
                        fail_msg("%s:%d: %s = %d (%s), want %d (%s); error '%s'", __FILE__, __LINE__, #got, g_, \
                                 strerror(g_ < 0 ? -g_ : g_), w_, strerror(w_ < 0 ? -w_ : w_), (e)->msg);        \
        } while (0)

/* ---- fixtures ---- */

static char fixtures[PATH_MAX];

static const char *fixture_dir(void) {
        if (fixtures[0])
                return fixtures;
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        if (src && *src)
                snprintf(fixtures, sizeof(fixtures), "%s/tests/fixtures/kube", src);
        else {
                /* __FILE__ is ".../tests/unit/test-kube.c". */
                char here[PATH_MAX - 64];
                snprintf(here, sizeof(here), "%s", __FILE__);
                char *cut = strstr(here, "unit/test-kube.c");
                if (cut)
                        *cut = 0;
                snprintf(fixtures, sizeof(fixtures), "%sfixtures/kube", cut ? here : "tests/");
        }
        /* Absolute, as some tests write it into files elsewhere. */
        char *abs = realpath(fixtures, NULL);
        if (abs) {
                snprintf(fixtures, sizeof(fixtures), "%s", abs);
                free(abs);
        }
        return fixtures;
}

static char *fixture_path(const char *name) {
        char *p;
        assert_int_equal(mk_path_join(fixture_dir(), name, &p), 0);
        return p;
}

static char tmpdir[PATH_MAX];

static int setup_tmpdir(void **state) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base && *base)
                (void) mkdir(base, 0755);
        snprintf(tmpdir, sizeof(tmpdir), "%s/test-kube.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-kube.XXXXXX");
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

static char *write_tmp(const char *name, const char *content) {
        char *p;
        assert_int_equal(mk_path_join(tmpdir, name, &p), 0);
        FILE *f = fopen(p, "we");
        assert_non_null(f);
        assert_int_equal(fputs(content, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
        return p;
}

/* ---- scripts ---- */

struct exchange {
        char *request;          /* normalized */
        char *reply_head;       /* status line and headers, CRLF after each */
        char **pieces;
        size_t n_pieces;
        bool drop, chunked, close, cut;
        unsigned hold_ms;
};

struct script {
        struct exchange *ex;
        size_t n;
};

static void script_done(struct script *s) {
        for (size_t i = 0; i < s->n; i++) {
                free(s->ex[i].request);
                free(s->ex[i].reply_head);
                for (size_t j = 0; j < s->ex[i].n_pieces; j++)
                        free(s->ex[i].pieces[j]);
                free(s->ex[i].pieces);
        }
        free(s->ex);
        *s = (struct script) {};
}

static int cmp_header(const void *a, const void *b) {
        const char *x = *(const char *const *) a, *y = *(const char *const *) b;
        size_t nx = strcspn(x, ":"), ny = strcspn(y, ":");
        int r = strncasecmp(x, y, MIN(nx, ny));
        if (r != 0)
                return r;
        if (nx != ny)
                return nx < ny ? -1 : 1;
        return strcmp(x, y);
}

/* Request line, headers sorted by name, blank line, body; "\n" line ends.
 * `eol` is the line end of the input ("\r\n" on the wire, "\n" in files). */
static char *normalize_request(const char *raw, size_t len, const char *eol) {
        size_t el = strlen(eol);
        char sep[8];
        snprintf(sep, sizeof(sep), "%s%s", eol, eol);
        const char *end = memmem(raw, len, sep, 2 * el);
        const char *body = end ? end + 2 * el : raw + len;
        size_t head_len = end ? (size_t) (end - raw) : len;
        _cleanup_free_ char *head = strndup(raw, head_len);
        assert_non_null(head);

        char *lines[256];
        size_t n = 0;
        char *p = head;
        while (p && n < ELEMENTSOF(lines)) {
                char *q = strstr(p, eol);
                if (q)
                        *q = 0;
                if (*p)
                        lines[n++] = p;
                p = q ? q + el : NULL;
        }
        if (n > 1)
                qsort(lines + 1, n - 1, sizeof(lines[0]), cmp_header);
        struct mk_buf b;
        mk_buf_init(&b, 1u << 20);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(mk_buf_printf(&b, "%s\n", lines[i]), 0);
        assert_int_equal(mk_buf_putc(&b, '\n'), 0);
        assert_int_equal(mk_buf_append(&b, body, len - (size_t) (body - raw)), 0);
        return mk_buf_take(&b);
}

static char *replace_all(const char *s, const char *what, const char *with) {
        struct mk_buf b;
        mk_buf_init(&b, 16u << 20);
        const char *p = s, *q;
        while ((q = strstr(p, what))) {
                assert_int_equal(mk_buf_append(&b, p, (size_t) (q - p)), 0);
                assert_int_equal(mk_buf_puts(&b, with), 0);
                p = q + strlen(what);
        }
        assert_int_equal(mk_buf_puts(&b, p), 0);
        return mk_buf_take(&b);
}

static void add_exchange(struct script *s, struct exchange *x) {
        s->ex = realloc(s->ex, (s->n + 1) * sizeof(*s->ex));
        assert_non_null(s->ex);
        s->ex[s->n++] = *x;
        *x = (struct exchange) {};
}

static void parse_reply(struct exchange *x, const char *flags, const char *content) {
        const char *f = flags;
        while (*f) {
                size_t n = strcspn(f, " ");
                if (n == 7 && strneq(f, "chunked", 7))
                        x->chunked = true;
                else if (n == 5 && strneq(f, "close", 5))
                        x->close = true;
                else if (n == 3 && strneq(f, "cut", 3))
                        x->cut = true;
                else if (n > 5 && strneq(f, "hold=", 5))
                        x->hold_ms = (unsigned) strtoul(f + 5, NULL, 10);
                else if (n > 0)
                        fail_msg("unknown reply flag '%.*s'", (int) n, f);
                f += n + (f[n] == ' ');
        }
        const char *end = strstr(content, "\n\n");
        size_t head_len = end ? (size_t) (end - content) : strlen(content);
        const char *body = end ? end + 2 : content + strlen(content);
        _cleanup_free_ char *head = strndup(content, head_len);
        x->reply_head = replace_all(head, "\n", "\r\n");
        _cleanup_free_ char *h2 = NULL;
        if (asprintf(&h2, "%s\r\n", x->reply_head) < 0)
                fail();
        free(x->reply_head);
        x->reply_head = TAKE_PTR(h2);
        const char *p = body;
        for (;;) {
                const char *q = strstr(p, "\n~~~\n");
                size_t n = q ? (size_t) (q - p) : strlen(p);
                x->pieces = realloc(x->pieces, (x->n_pieces + 1) * sizeof(char *));
                assert_non_null(x->pieces);
                x->pieces[x->n_pieces++] = strndup(p, n);
                if (!q)
                        break;
                p = q + 5;
        }
}

/* Parses a script: sections ">>> request" and "<<< reply FLAGS" or
 * "<<< drop"; "###" lines are comments. */
static void parse_script(const char *text, int port, struct script *ret) {
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", port);
        _cleanup_free_ char *t1 = replace_all(text, "%PORT%", port_s);
        _cleanup_free_ char *t = replace_all(t1, "%VERSION%", MK_VERSION);
        struct script s = {};
        struct exchange x = {};
        bool have_request = false;

        const char *p = t;
        while (*p) {
                size_t n = strcspn(p, "\n");
                if (strneq(p, "###", 3)) {
                        p += n + (p[n] == '\n');
                        continue;
                }
                if (!strneq(p, ">>> ", 4) && !strneq(p, "<<< ", 4))
                        fail_msg("script: text outside a section: '%.*s'", (int) n, p);
                _cleanup_free_ char *marker = strndup(p, n);
                p += n + (p[n] == '\n');
                /* The section runs to the next marker line. */
                struct mk_buf b;
                mk_buf_init(&b, 16u << 20);
                while (*p && !strneq(p, ">>> ", 4) && !strneq(p, "<<< ", 4)) {
                        size_t m = strcspn(p, "\n");
                        if (!strneq(p, "###", 3))
                                assert_int_equal(mk_buf_append(&b, p, m + (p[m] == '\n')), 0);
                        p += m + (p[m] == '\n');
                }
                _cleanup_free_ char *content = mk_buf_take(&b);
                size_t cl = strlen(content);
                if (cl > 0 && content[cl - 1] == '\n')
                        content[cl - 1] = 0;
                if (streq(marker, ">>> request")) {
                        assert_false(have_request);
                        x.request = normalize_request(content, strlen(content), "\n");
                        have_request = true;
                } else if (streq(marker, "<<< drop")) {
                        assert_true(have_request);
                        x.drop = true;
                        add_exchange(&s, &x);
                        have_request = false;
                } else if (strneq(marker, "<<< reply", 9)) {
                        assert_true(have_request);
                        parse_reply(&x, marker[9] == ' ' ? marker + 10 : "", content);
                        add_exchange(&s, &x);
                        have_request = false;
                } else
                        fail_msg("script: unknown section '%s'", marker);
        }
        assert_false(have_request);
        *ret = s;
}

/* ---- the server ---- */

struct conn {
        int fd;
        char *buf;
        size_t len;
};

struct server {
        int port;
        int listen_fd;
        int wake[2];
        unsigned listen_delay_ms;
        pthread_t thread;
        struct script script;
        size_t next;
        size_t requests;
        size_t connections;
        size_t expect_used;     /* exchanges the test expects to be used; 0: all */
        size_t expect_connections; /* 0: any number */
        char failure[16384];
        struct conn conns[MAX_CONNS];
        size_t n_conns;
};

static void send_all(int fd, const void *data, size_t len) {
        const char *p = data;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return; /* the client went away */
                p += n;
                len -= (size_t) n;
        }
}

/* Waits up to ms; true when the server is being stopped. */
static bool wait_or_stop(struct server *s, unsigned ms) {
        struct pollfd p = {.fd = s->wake[0], .events = POLLIN};
        return poll(&p, 1, (int) ms) > 0;
}

static void fail_once(struct server *s, const char *fmt, ...) _printf_(2, 3);
static void fail_once(struct server *s, const char *fmt, ...) {
        if (s->failure[0])
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->failure, sizeof(s->failure), fmt, ap);
        va_end(ap);
}

/* Handles one request; returns false when the connection is to be closed. */
static bool handle_request(struct server *s, int fd, const char *raw, size_t len) {
        _cleanup_free_ char *got = normalize_request(raw, len, "\r\n");
        s->requests++;
        if (s->next >= s->script.n) {
                fail_once(s, "unexpected request %zu:\n%s", s->requests, got);
                static const char r500[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                send_all(fd, r500, sizeof(r500) - 1);
                return false;
        }
        struct exchange *x = &s->script.ex[s->next++];
        if (!streq(got, x->request))
                fail_once(s, "request %zu differs:\n--- want\n%s\n--- got\n%s", s->requests, x->request, got);
        if (x->drop)
                return false;

        size_t total = 0;
        for (size_t i = 0; i < x->n_pieces; i++)
                total += strlen(x->pieces[i]);
        _cleanup_free_ char *head = NULL;
        if (asprintf(&head, "%s%s%s\r\n", x->reply_head,
                     x->chunked ? "Transfer-Encoding: chunked\r\n" : "", x->close ? "Connection: close\r\n" : "") < 0)
                return false;
        if (!x->chunked) {
                _cleanup_free_ char *h = NULL;
                size_t hl = strlen(head);
                if (asprintf(&h, "%.*sContent-Length: %zu\r\n\r\n", (int) (hl - 2), head, total) < 0)
                        return false;
                send_all(fd, h, strlen(h));
        } else
                send_all(fd, head, strlen(head));
        for (size_t i = 0; i < x->n_pieces; i++) {
                size_t pl = strlen(x->pieces[i]);
                if (pl == 0)
                        continue; /* an empty chunk would end the body */
                if (i > 0 && wait_or_stop(s, PIECE_GAP_MS))
                        return false;
                if (x->chunked) {
                        char sz[32];
                        int n = snprintf(sz, sizeof(sz), "%zx\r\n", pl);
                        send_all(fd, sz, (size_t) n);
                        send_all(fd, x->pieces[i], pl);
                        send_all(fd, "\r\n", 2);
                } else
                        send_all(fd, x->pieces[i], pl);
        }
        if (x->hold_ms > 0 && wait_or_stop(s, x->hold_ms))
                return false;
        if (x->cut)
                return false;
        if (x->chunked)
                send_all(fd, "0\r\n\r\n", 5);
        return !x->close;
}

/* Takes complete requests off a connection's buffer; false to close it. */
static bool serve_buffer(struct server *s, struct conn *c) {
        for (;;) {
                char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
                if (!end)
                        return true;
                size_t head = (size_t) (end - c->buf) + 4, body = 0;
                for (char *p = c->buf; p < end; p++)
                        if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "Content-Length:", 15) == 0)
                                body = strtoul(p + 15, NULL, 10);
                if (c->len < head + body)
                        return true;
                bool keep = handle_request(s, c->fd, c->buf, head + body);
                memmove(c->buf, c->buf + head + body, c->len - head - body);
                c->len -= head + body;
                if (!keep)
                        return false;
        }
}

static int listen_on(int port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t) port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 64) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static int port_of(int fd) {
        struct sockaddr_in a;
        socklen_t l = sizeof(a);
        if (getsockname(fd, (struct sockaddr *) &a, &l) < 0)
                return -1;
        return ntohs(a.sin_port);
}

/* A port on 127.0.0.1 with nothing listening (bound, read, released). */
static int free_port(void) {
        int fd = listen_on(0);
        assert_true(fd >= 0);
        int port = port_of(fd);
        close(fd);
        return port;
}

static void *server_main(void *userdata) {
        struct server *s = userdata;
        if (s->listen_fd < 0) {
                if (wait_or_stop(s, s->listen_delay_ms))
                        return NULL;
                s->listen_fd = listen_on(s->port);
                if (s->listen_fd < 0) {
                        fail_once(s, "cannot listen on port %d: %s", s->port, strerror(errno));
                        return NULL;
                }
        }
        for (;;) {
                struct pollfd p[MAX_CONNS + 2];
                p[0] = (struct pollfd) {.fd = s->wake[0], .events = POLLIN};
                p[1] = (struct pollfd) {.fd = s->listen_fd, .events = POLLIN};
                for (size_t i = 0; i < s->n_conns; i++)
                        p[2 + i] = (struct pollfd) {.fd = s->conns[i].fd, .events = POLLIN};
                if (poll(p, 2 + s->n_conns, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[0].revents)
                        break;
                for (size_t i = 0; i < s->n_conns; i++) {
                        if (!p[2 + i].revents)
                                continue;
                        struct conn *c = &s->conns[i];
                        char buf[65536];
                        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
                        bool keep = n > 0;
                        if (keep) {
                                c->buf = realloc(c->buf, c->len + (size_t) n);
                                assert_non_null(c->buf);
                                memcpy(c->buf + c->len, buf, (size_t) n);
                                c->len += (size_t) n;
                                keep = serve_buffer(s, c);
                        }
                        if (!keep) {
                                close(c->fd);
                                c->fd = -1;
                        }
                }
                size_t j = 0;
                for (size_t i = 0; i < s->n_conns; i++) {
                        if (s->conns[i].fd >= 0)
                                s->conns[j++] = s->conns[i];
                        else
                                free(s->conns[i].buf);
                }
                s->n_conns = j;
                if (p[1].revents & POLLIN) {
                        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                        if (fd >= 0) {
                                int one = 1;
                                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                                s->connections++;
                                if (s->n_conns < MAX_CONNS)
                                        s->conns[s->n_conns++] = (struct conn) {.fd = fd};
                                else
                                        close(fd);
                        }
                }
        }
        return NULL;
}

/* Starts a server for a script given as text; port 0 picks one. With
 * listen_delay_ms, it listens only that much later (connection refused
 * until then). */
static struct server *server_start_text(const char *text, int port, unsigned listen_delay_ms) {
        struct server *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        assert_int_equal(pipe2(s->wake, O_CLOEXEC), 0);
        s->listen_fd = -1;
        if (listen_delay_ms == 0) {
                s->listen_fd = listen_on(port);
                assert_true(s->listen_fd >= 0);
                port = port_of(s->listen_fd);
        }
        s->port = port;
        s->listen_delay_ms = listen_delay_ms;
        parse_script(text, port, &s->script);
        assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
        return s;
}

static struct server *server_start(const char *name) {
        _cleanup_free_ char *path = fixture_path(name), *text = NULL;
        struct mk_error e = {};
        if (mk_read_file(path, 1u << 20, &text, NULL, &e) < 0)
                fail_msg("cannot read fixture: %s", e.msg);
        return server_start_text(text, 0, 0);
}

/* Stops the server and checks that every exchange happened as scripted. */
static void server_finish(struct server *s) {
        assert_int_equal(write(s->wake[1], "x", 1), 1);
        assert_int_equal(pthread_join(s->thread, NULL), 0);
        for (size_t i = 0; i < s->n_conns; i++) {
                close(s->conns[i].fd);
                free(s->conns[i].buf);
        }
        if (s->listen_fd >= 0)
                close(s->listen_fd);
        close(s->wake[0]);
        close(s->wake[1]);
        char failure[sizeof(s->failure)];
        snprintf(failure, sizeof(failure), "%s", s->failure);
        size_t next = s->next, n = s->expect_used ? s->expect_used : s->script.n;
        size_t conns = s->connections, want_conns = s->expect_connections;
        script_done(&s->script);
        free(s);
        if (failure[0])
                fail_msg("%s", failure);
        if (next != n)
                fail_msg("the client made %zu of the %zu scripted requests", next, n);
        if (want_conns && conns != want_conns)
                fail_msg("the client opened %zu connections, want %zu", conns, want_conns);
}

/* ---- clients ---- */

static const struct mk_kube_options fast = {
        .attempts = 4,
        .backoff_initial_ms = 20,
        .backoff_max_ms = 100,
        .request_timeout_ms = 10000,
        .connect_timeout_ms = 2000,
};

static struct mk_kube *client_opts(int port, const struct mk_kube_options *o) {
        struct mk_kube_config c = {};
        struct mk_error e = {};
        struct mk_kube *k = NULL;
        assert_true(asprintf(&c.server, "http://127.0.0.1:%d", port) > 0);
        c.token = strdup("t0ken");
        check_rc(mk_kube_new(&c, o, &k, &e), 0, &e);
        assert_null(c.server); /* taken */
        return k;
}

static struct mk_kube *client(int port) {
        return client_opts(port, &fast);
}

static const char *jstr(json_t *j, const char *dotted) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", dotted);
        char *save = NULL;
        for (char *t = strtok_r(buf, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
                j = json_object_get(j, t);
        return json_string_value(j);
}

/* ---- tables ---- */

static void test_status_to_errno(void **state) {
        static const struct {
                long status;
                const char *reason;
                int want;
        } t[] = {
                {400, "BadRequest", -EINVAL},
                {401, "Unauthorized", -EACCES},
                {403, "Forbidden", -EACCES},
                {404, "NotFound", -ENOENT},
                {405, "MethodNotAllowed", -EOPNOTSUPP},
                {409, "AlreadyExists", -EEXIST},
                {409, "Conflict", -EBUSY},
                {409, NULL, -EBUSY},
                {410, "Expired", -ESTALE},
                {410, "Gone", -ESTALE},
                {413, "RequestEntityTooLarge", -E2BIG},
                {415, "UnsupportedMediaType", -EOPNOTSUPP},
                {422, "Invalid", -EINVAL},
                {429, "TooManyRequests", -EAGAIN},
                {500, "InternalError", -EIO},
                {500, "Timeout", -ETIMEDOUT},
                {503, "ServiceUnavailable", -EIO},
                {504, "Timeout", -ETIMEDOUT},
                {302, NULL, -EPROTO},
                {418, NULL, -EPROTO},
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                int got = mk_kube_status_to_errno(t[i].status, t[i].reason);
                if (got != t[i].want)
                        fail_msg("%ld %s: %d, want %d", t[i].status, t[i].reason ? t[i].reason : "(null)", got,
                                 t[i].want);
        }
        assert_true(mk_kube_error_is_transient(-ESTALE));
        assert_true(mk_kube_error_is_transient(-ECONNREFUSED));
        assert_false(mk_kube_error_is_transient(-EACCES));
        assert_false(mk_kube_error_is_transient(-ENOENT));
}

static void test_string_tables(void **state) {
        for (int i = 0; i < _MK_KUBE_EVENT_TYPE_MAX; i++)
                assert_int_equal(mk_kube_event_type_from_string(mk_kube_event_type_to_string(i)), i);
        assert_int_equal(mk_kube_event_type_from_string("added"), -EINVAL);
        assert_int_equal(mk_kube_event_type_from_string(NULL), -EINVAL);
        assert_null(mk_kube_event_type_to_string(_MK_KUBE_EVENT_TYPE_MAX));
        for (int i = 0; i < _MK_KUBE_PATCH_TYPE_MAX; i++)
                assert_int_equal(mk_kube_patch_type_from_string(mk_kube_patch_type_to_string(i)), i);
        assert_string_equal(mk_kube_patch_content_type(MK_KUBE_PATCH_MERGE), "application/merge-patch+json");
        assert_string_equal(mk_kube_patch_content_type(MK_KUBE_PATCH_STRATEGIC),
                            "application/strategic-merge-patch+json");
        assert_string_equal(mk_kube_patch_content_type(MK_KUBE_PATCH_JSON), "application/json-patch+json");
        assert_null(mk_kube_patch_content_type(_MK_KUBE_PATCH_TYPE_INVALID));
}

static void test_base64(void **state) {
        static const struct {
                const char *in;
                int rc;
                const char *out;
        } t[] = {
                {"", 0, ""},
                {"Zg==", 0, "f"},
                {"Zg", 0, "f"},
                {"Zm8=", 0, "fo"},
                {"Zm9v", 0, "foo"},
                {"Zm9v\nYmFy\r\n", 0, "foobar"},
                {"ZGF0YQprZXk=", 0, "data\nkey"},
                {"Z", -EINVAL, NULL},
                {"Zg=", -EINVAL, NULL},
                {"Zg===", -EINVAL, NULL},
                {"Zm9v YmFy", -EINVAL, NULL},
                {"Zm9v-_", -EINVAL, NULL},        /* URL alphabet */
                {"Zg==Zg==", -EINVAL, NULL},      /* data after padding */
                {"Zh==", -EINVAL, NULL},          /* left-over bits */
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                char *out = NULL;
                size_t len = 0;
                int r = mk_base64_decode(t[i].in, strlen(t[i].in), &out, &len);
                if (r != t[i].rc)
                        fail_msg("'%s': %d, want %d", t[i].in, r, t[i].rc);
                if (r == 0) {
                        assert_int_equal(len, strlen(t[i].out));
                        assert_memory_equal(out, t[i].out, len);
                        assert_int_equal(out[len], 0);
                }
                free(out);
        }
        assert_int_equal(mk_kube_token_check("abc.def-_"), 0);
        assert_int_equal(mk_kube_token_check(""), -EINVAL);
        assert_int_equal(mk_kube_token_check("a b"), -EINVAL);
        assert_int_equal(mk_kube_token_check("a\r\nX-Evil: 1"), -EINVAL);
}

/* ---- protocol ---- */

static void test_get(void **state) {
        struct server *s = server_start("get.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        json_t *o = NULL;
        check_rc(mk_kube_get(k, "/api/v1/nodes/n1", &o, &e), 0, &e);
        assert_string_equal(jstr(o, "metadata.resourceVersion"), "42");
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"),
                                                                                "labels"),
                                                              "nvidia.com/mig.config")),
                            "all-1g.10gb");
        json_decref(o);
        o = NULL;
        check_rc(mk_kube_get(k, "/api/v1/nodes/n2", &o, &e), -ENOENT, &e);
        assert_null(o);
        assert_int_equal(e.code, -ENOENT);
        check_msg(&e, "GET /api/v1/nodes/n2: nodes \"n2\" not found (HTTP 404 NotFound)");
        k = mk_kube_free(k);
        s->expect_connections = 1; /* kept alive and reused */
        server_finish(s);
}

/* ---- many threads on one client ---- */

/* A keep-alive HTTP server for the thread test: a thread per connection,
 * every request answered with one small object; counts connections. */
struct keepalive_server {
        int listen_fd;
        atomic_uint connections;
        atomic_uint open;               /* connections the client has not closed */
        atomic_bool stop;
        pthread_t thread;
};

struct keepalive_conn {
        struct keepalive_server *s;
        int fd;
};

static void *keepalive_conn_main(void *userdata) {
        struct keepalive_conn kc = *(struct keepalive_conn *) userdata;
        free(userdata);
        int fd = kc.fd;
        static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n"
                                     "{\"metadata\":{\"name\":\"n1\"}}\n";
        char buf[8192];
        size_t len = 0;
        for (;;) {
                ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        break;
                len += (size_t) n;
                buf[len] = 0;
                char *end;
                while ((end = strstr(buf, "\r\n\r\n"))) { /* GETs: no body */
                        if (write(fd, answer, sizeof(answer) - 1) != (ssize_t) sizeof(answer) - 1)
                                goto out;
                        size_t used = (size_t) (end + 4 - buf);
                        memmove(buf, buf + used, len - used + 1);
                        len -= used;
                }
                if (len >= sizeof(buf) - 1)
                        break;
        }
out:
        close(fd);
        atomic_fetch_sub(&kc.s->open, 1);
        return NULL;
}

static void *keepalive_main(void *userdata) {
        struct keepalive_server *s = userdata;
        while (!atomic_load(&s->stop)) {
                struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0)
                        continue;
                int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                struct keepalive_conn *kc = malloc(sizeof(*kc));
                if (!kc) {
                        close(fd);
                        continue;
                }
                *kc = (struct keepalive_conn) {s, fd};
                atomic_fetch_add(&s->connections, 1);
                atomic_fetch_add(&s->open, 1);
                pthread_t t;
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &a, keepalive_conn_main, kc) != 0) {
                        close(fd);
                        free(kc);
                        atomic_fetch_sub(&s->open, 1);
                }
                pthread_attr_destroy(&a);
        }
        return NULL;
}

struct hammer {
        struct mk_kube *k;
        unsigned requests, failures;
        char msg[MK_ERROR_MSG_MAX];
};

static void *hammer_main(void *userdata) {
        struct hammer *h = userdata;
        for (unsigned i = 0; i < h->requests; i++) {
                struct mk_error e = {};
                json_t *j = NULL;
                if (mk_kube_get(h->k, "/api/v1/nodes/n1", &j, &e) < 0 || !jstr(j, "metadata.name")) {
                        h->failures++;
                        snprintf(h->msg, sizeof(h->msg), "%s", e.msg);
                }
                json_decref(j);
        }
        return NULL;
}

/* Threads share one client, as the extender's HTTP workers, informers and
 * binds do. libcurl does not support one connection cache in concurrent
 * threads (CURLSHOPT_SHARE(3)); with it shared, this run opened a new
 * connection for most requests (3,000-3,800 of 4,000). Each request must
 * succeed, connections are reused (far fewer than requests), and once the
 * burst is over the idle ones are closed: after idle_keep_ms, the next
 * request leaves one open. */
static void test_threads_hammer(void **state) {
        enum { THREADS = 8, REQUESTS = 500 };
        struct keepalive_server srv = {.listen_fd = listen_on(0)};
        assert_true(srv.listen_fd >= 0);
        assert_int_equal(pthread_create(&srv.thread, NULL, keepalive_main, &srv), 0);
        struct mk_kube_options o = fast;
        o.idle_keep_ms = 300;
        _cleanup_kube_free_ struct mk_kube *k = client_opts(port_of(srv.listen_fd), &o);
        struct hammer h[THREADS];
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
                h[i] = (struct hammer) {.k = k, .requests = REQUESTS};
                assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
        }
        for (int i = 0; i < THREADS; i++)
                assert_int_equal(pthread_join(t[i], NULL), 0);
        unsigned open_after_burst = atomic_load(&srv.open);
        usleep(400 * 1000);
        struct hammer one = {.k = k, .requests = 1};
        hammer_main(&one);
        for (int i = 0; i < 100 && atomic_load(&srv.open) > 1; i++)
                usleep(10 * 1000); /* the server thread sees the close */
        unsigned open_after_idle = atomic_load(&srv.open);
        k = mk_kube_free(k);
        atomic_store(&srv.stop, true);
        assert_int_equal(pthread_join(srv.thread, NULL), 0);
        close(srv.listen_fd);
        for (int i = 0; i < THREADS; i++)
                if (h[i].failures)
                        fail_msg("thread %d: %u of %u requests failed, last: %s", i, h[i].failures, h[i].requests,
                                 h[i].msg);
        unsigned conns = atomic_load(&srv.connections);
        print_message("%u connections for %d requests in %d threads; open after the burst %u, after idling %u\n",
                      conns, THREADS * REQUESTS, THREADS, open_after_burst, open_after_idle);
        if (one.failures)
                fail_msg("the request after idling failed: %s", one.msg);
        if (open_after_idle != 1)
                fail_msg("%u connections open after idling, want 1: idle connections are not closed", open_after_idle);
        if (conns > THREADS * 4)
                fail_msg("%u connections for %d requests: connections are not reused", conns, THREADS * REQUESTS);
}

static void test_bad_paths(void **state) {
        _cleanup_kube_free_ struct mk_kube *k = client(free_port());
        struct mk_error e = {};
        json_t *o = NULL;
        check_rc(mk_kube_get(k, "api/v1/nodes", &o, &e), -EINVAL, &e);
        check_rc(mk_kube_get(k, "/api/v1/nodes/a b", &o, &e), -EINVAL, &e);
        check_rc(mk_kube_get(k, "/api/v1/nodes/a\r\nX: y", &o, &e), -EINVAL, &e);
        check_rc(mk_kube_get(k, "/api/v1/nodes#x", &o, &e), -EINVAL, &e);
        check_rc(mk_kube_delete(k, "/api/v1/nodes/\xc3\xa9", NULL, &e), -EINVAL, &e);
        assert_null(o);

        /* Configurations the client refuses. */
        struct mk_kube *k2 = NULL;
        struct mk_kube_config c = {.server = strdup("ftp://127.0.0.1")};
        check_rc(mk_kube_new(&c, NULL, &k2, &e), -EINVAL, &e);
        assert_non_null(c.server); /* left as it was */
        mk_kube_config_done(&c);
        c = (struct mk_kube_config) {.server = strdup("https://127.0.0.1"), .token = strdup("a\nb")};
        check_rc(mk_kube_new(&c, NULL, &k2, &e), -EINVAL, &e);
        mk_kube_config_done(&c);
        c = (struct mk_kube_config) {.server = strdup("https://127.0.0.1"), .cert_pem = strdup("x"), .cert_pem_len = 1};
        check_rc(mk_kube_new(&c, NULL, &k2, &e), -EINVAL, &e);
        mk_kube_config_done(&c);
        assert_null(k2);
}

static int collect_item(json_t *item, void *userdata) {
        struct mk_buf *b = userdata;
        assert_int_equal(mk_buf_printf(b, "%s/%s,", jstr(item, "metadata.namespace"), jstr(item, "metadata.name")), 0);
        return 0;
}

static int stop_after_first(json_t *item, void *userdata) {
        int *n = userdata;
        (*n)++;
        return 1;
}

static int fail_item(json_t *item, void *userdata) {
        return -EIO;
}

static void test_list_pages(void **state) {
        struct mk_kube_list_opts lo = {
                .label_selector = "app=gpu,tier in (a,b)",
                .field_selector = "spec.nodeName=n1",
                .limit = 2,
        };
        struct mk_error e = {};

        /* Item by item. */
        struct server *s = server_start("list-pages.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, 4096);
        _cleanup_free_ char *rv = NULL;
        check_rc(mk_kube_list_each(k, "/api/v1/pods", &lo, collect_item, &b, &rv, &e), 0, &e);
        assert_string_equal(mk_buf_str(&b), "ns/p1,ns/p2,ns/p3,");
        assert_string_equal(rv, "500");
        k = mk_kube_free(k);
        server_finish(s);

        /* All at once: one list object, items of both pages, no continue. */
        s = server_start("list-pages.txt");
        k = client(s->port);
        json_t *list = NULL;
        check_rc(mk_kube_list(k, "/api/v1/pods", &lo, &list, &e), 0, &e);
        assert_string_equal(jstr(list, "kind"), "PodList");
        assert_string_equal(jstr(list, "metadata.resourceVersion"), "500");
        assert_null(json_object_get(json_object_get(list, "metadata"), "continue"));
        assert_int_equal(json_array_size(json_object_get(list, "items")), 3);
        assert_string_equal(jstr(json_array_get(json_object_get(list, "items"), 2), "metadata.name"), "p3");
        json_decref(list);
        k = mk_kube_free(k);
        server_finish(s);

        /* A callback that stops after the first item: no second page. The
         * script's second exchange then stays unused, so check by hand. */
        s = server_start("list-pages.txt");
        k = client(s->port);
        int n = 0;
        check_rc(mk_kube_list_each(k, "/api/v1/pods", &lo, stop_after_first, &n, NULL, &e), 0, &e);
        assert_int_equal(n, 1);
        k = mk_kube_free(k);
        s->expect_used = 1; /* only the first exchange was due */
        server_finish(s);

        /* A callback that fails: its error, and a message saying so. */
        s = server_start("list-pages.txt");
        k = client(s->port);
        check_rc(mk_kube_list_each(k, "/api/v1/pods", &lo, fail_item, NULL, NULL, &e), -EIO, &e);
        check_msg(&e, "LIST /api/v1/pods: an item was not handled");
        k = mk_kube_free(k);
        s->expect_used = 1;
        server_finish(s);
}

static void test_list_expired(void **state) {
        struct server *s = server_start("list-expired.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct mk_kube_list_opts lo = {.limit = 1};
        json_t *list = NULL;
        check_rc(mk_kube_list(k, "/api/v1/namespaces/ns/configmaps", &lo, &list, &e), -ESTALE, &e);
        assert_null(list);
        check_msg(&e, "continue parameter is too old");
        check_msg(&e, "(HTTP 410 Expired)");
        k = mk_kube_free(k);
        server_finish(s);
}

/* Records events as "TYPE name@rv{k=v}|"; stops or fails on request. */
struct recorder {
        struct mk_buf log;
        const char *stop_on;    /* "TYPE name" that makes the callback return 1 */
        atomic_bool *cancel_on_first;
};

static void record(struct recorder *r, const char *type, json_t *obj) {
        const char *name = jstr(obj, "metadata.name"), *rv = jstr(obj, "metadata.resourceVersion");
        assert_int_equal(mk_buf_printf(&r->log, "%s %s@%s", type, name ? name : "-", rv ? rv : "-"), 0);
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(json_object_get(obj, "metadata"), "annotations"), key, v)
                assert_int_equal(mk_buf_printf(&r->log, "{%s=%s}", key, json_string_value(v)), 0);
        assert_int_equal(mk_buf_putc(&r->log, '|'), 0);
}

static bool stop_here(struct recorder *r, const char *type, json_t *obj) {
        char what[256];
        const char *name = jstr(obj, "metadata.name");
        snprintf(what, sizeof(what), "%s %s", type, name ? name : "-");
        return r->stop_on && streq(r->stop_on, what);
}

static int on_watch_event(enum mk_kube_event_type t, json_t *obj, void *userdata) {
        struct recorder *r = userdata;
        record(r, mk_kube_event_type_to_string(t), obj);
        return stop_here(r, mk_kube_event_type_to_string(t), obj) ? 1 : 0;
}

static void test_watch_stream(void **state) {
        struct server *s = server_start("watch-stream.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct recorder r = {};
        mk_buf_init(&r.log, 1u << 16);
        char *rv = strdup("100");
        struct mk_kube_watch_opts wo = {
                .field_selector = "metadata.name=n1",
                .timeout_seconds = 30,
                .allow_bookmarks = true,
        };
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_watch_event, &r, &e), -ESTALE, &e);
        assert_string_equal(mk_buf_str(&r.log), "ADDED n1@101{x=a \"}{\" b ][}|"
                                                "MODIFIED n1@102|"
                                                "MODIFIED n1@103{y=tricky \\ \" }}|"
                                                "BOOKMARK -@150|");
        assert_string_equal(rv, "150"); /* the bookmark's: a relist is still due after 410 */
        check_msg(&e, "too old resource version: 100 (160) (ERROR event, code 410 Expired)");
        free(rv);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_watch_resume(void **state) {
        struct server *s = server_start("watch-resume.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct recorder r = {.stop_on = "DELETED a"};
        mk_buf_init(&r.log, 1u << 16);
        char *rv = strdup("5");
        struct mk_kube_watch_opts wo = {.label_selector = "app=mig", .timeout_seconds = 60};
        check_rc(mk_kube_watch(k, "/api/v1/namespaces/gpu/configmaps", &wo, &rv, on_watch_event, &r, &e), 0, &e);
        assert_string_equal(mk_buf_str(&r.log), "ADDED a@6|MODIFIED a@7|DELETED a@9|");
        assert_string_equal(rv, "9");
        free(rv);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_watch_gone(void **state) {
        struct server *s = server_start("watch-gone.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct recorder r = {};
        mk_buf_init(&r.log, 1024);
        char *rv = strdup("3");
        struct mk_kube_watch_opts wo = {.timeout_seconds = 10};
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_watch_event, &r, &e), -ESTALE, &e);
        assert_string_equal(mk_buf_str(&r.log), "");
        assert_string_equal(rv, "3");
        check_msg(&e, "too old resource version: 3 (200) (HTTP 410 Expired)");
        free(rv);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_watch_oversize(void **state) {
        struct server *s = server_start("watch-oversize.txt");
        struct mk_kube_options o = fast;
        o.max_event = 200;
        _cleanup_kube_free_ struct mk_kube *k = client_opts(s->port, &o);
        struct mk_error e = {};
        struct recorder r = {};
        mk_buf_init(&r.log, 1024);
        char *rv = NULL;
        struct mk_kube_watch_opts wo = {.timeout_seconds = 10};
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_watch_event, &r, &e), -E2BIG, &e);
        assert_string_equal(mk_buf_str(&r.log), "ADDED small@1|");
        assert_string_equal(rv, "1");
        check_msg(&e, "an event is larger than 200 bytes");
        free(rv);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_body_oversize(void **state) {
        struct server *s = server_start("oversize.txt");
        struct mk_kube_options o = fast;
        o.max_body = 200;
        _cleanup_kube_free_ struct mk_kube *k = client_opts(s->port, &o);
        struct mk_error e = {};
        json_t *j = NULL;
        check_rc(mk_kube_get(k, "/api/v1/nodes/big", &j, &e), -E2BIG, &e);
        assert_null(j);
        check_msg(&e, "the response is larger than 200 bytes");
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_retry(void **state) {
        struct server *s = server_start("retry.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        json_t *j = NULL;
        check_rc(mk_kube_get(k, "/api/v1/nodes/n1", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "metadata.name"), "n1");
        json_decref(j);

        _cleanup_(json_decrefp) json_t *ev = json_pack("{s:{s:s}}", "metadata", "name", "ev1");
        check_rc(mk_kube_post(k, "/api/v1/namespaces/default/events", ev, NULL, &e), -EIO, &e);
        check_msg(&e, "POST /api/v1/namespaces/default/events: HTTP 500: boom");
        j = NULL;
        check_rc(mk_kube_post(k, "/api/v1/namespaces/default/events", ev, &j, &e), 0, &e);
        assert_string_equal(jstr(j, "kind"), "Event");
        json_decref(j);
        k = mk_kube_free(k);
        server_finish(s);
}

static const char get_n1_script[] = ">>> request\n"
                                    "GET /api/v1/nodes/n1 HTTP/1.1\n"
                                    "Host: 127.0.0.1:%PORT%\n"
                                    "Accept: application/json\n"
                                    "Authorization: Bearer t0ken\n"
                                    "User-Agent: migkit/%VERSION%\n"
                                    "\n"
                                    "<<< reply\n"
                                    "HTTP/1.1 200 OK\n"
                                    "Content-Type: application/json\n"
                                    "\n"
                                    "{\"kind\":\"Node\",\"metadata\":{\"name\":\"n1\"}}\n";

static void test_refused_then_success(void **state) {
        int port = free_port();
        struct server *s = server_start_text(get_n1_script, port, 300);
        struct mk_kube_options o = {.attempts = 10, .backoff_initial_ms = 50, .backoff_max_ms = 200};
        _cleanup_kube_free_ struct mk_kube *k = client_opts(port, &o);
        struct mk_error e = {};
        json_t *j = NULL;
        uint64_t t0 = now_ms();
        check_rc(mk_kube_get(k, "/api/v1/nodes/n1", &j, &e), 0, &e);
        uint64_t dt = now_ms() - t0;
        assert_string_equal(jstr(j, "metadata.name"), "n1");
        json_decref(j);
        if (dt < 250 || dt > 5000)
                fail_msg("took %" PRIu64 " ms; the server listened after 300 ms", dt);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_refused_bounded(void **state) {
        int port = free_port();
        struct mk_kube_options o = {.attempts = 3, .backoff_initial_ms = 100, .backoff_max_ms = 400};
        _cleanup_kube_free_ struct mk_kube *k = client_opts(port, &o);
        struct mk_error e = {};
        json_t *j = NULL;
        uint64_t t0 = now_ms();
        check_rc(mk_kube_get(k, "/api/v1/nodes/n1", &j, &e), -ECONNREFUSED, &e);
        uint64_t dt = now_ms() - t0;
        check_msg(&e, "GET /api/v1/nodes/n1: ");
        check_msg(&e, "(after 3 attempts)");
        /* Two backoffs: [50, 100] then [100, 200] ms. */
        if (dt < 150 || dt > 3000)
                fail_msg("took %" PRIu64 " ms for 3 attempts", dt);
        /* POST is retried when nothing was sent, too. */
        _cleanup_(json_decrefp) json_t *ev = json_object();
        check_rc(mk_kube_post(k, "/api/v1/nodes", ev, NULL, &e), -ECONNREFUSED, &e);
        check_msg(&e, "(after 3 attempts)");
}

static void test_patch(void **state) {
        struct server *s = server_start("patch.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        json_t *j = NULL;
        _cleanup_(json_decrefp) json_t *labels =
                json_pack("{s:s,s:n}", "nvidia.com/mig.config.state", "pending", "old-label");
        check_rc(mk_kube_patch_metadata(k, "/api/v1/nodes/n1", "labels", labels, &j, &e), 0, &e);
        assert_string_equal(jstr(j, "metadata.resourceVersion"), "11");
        json_decref(j);
        _cleanup_(json_decrefp) json_t *sp =
                json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "migkit/reboot", "once");
        check_rc(mk_kube_patch(k, "/api/v1/nodes/n1", MK_KUBE_PATCH_STRATEGIC, sp, NULL, &e), 0, &e);
        _cleanup_(json_decrefp) json_t *jp =
                json_pack("[{s:s,s:s,s:s}]", "op", "add", "path", "/status/capacity/nvidia.com~1mig-1g.10gb",
                          "value", "7");
        check_rc(mk_kube_patch(k, "/api/v1/nodes/n1/status", MK_KUBE_PATCH_JSON, jp, NULL, &e), 0, &e);
        _cleanup_(json_decrefp) json_t *empty = json_pack("{s:{s:{}}}", "metadata", "labels");
        check_rc(mk_kube_patch(k, "/apis/example.com/v1/widgets/w", MK_KUBE_PATCH_STRATEGIC, empty, NULL, &e),
                 -EOPNOTSUPP, &e);
        check_msg(&e, "(HTTP 415 UnsupportedMediaType)");
        check_rc(mk_kube_patch(k, "/api/v1/nodes/n1", (enum mk_kube_patch_type) 7, empty, NULL, &e), -EINVAL, &e);
        _cleanup_(json_decrefp) json_t *notobj = json_string("x");
        check_rc(mk_kube_patch_metadata(k, "/api/v1/nodes/n1", "labels", notobj, NULL, &e), -EINVAL, &e);
        k = mk_kube_free(k);
        server_finish(s);
}

static void test_verbs(void **state) {
        struct server *s = server_start("verbs.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        json_t *j = NULL;
        check_rc(mk_kube_delete(k, "/api/v1/nodes/n1", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "metadata.name"), "n1");
        json_decref(j);
        check_rc(mk_kube_delete(k, "/api/v1/nodes/n1", NULL, &e), -ENOENT, &e);

        _cleanup_(json_decrefp) json_t *node = json_pack("{s:s,s:{s:s}}", "kind", "Node", "metadata", "name", "n1");
        check_rc(mk_kube_post(k, "/api/v1/nodes", node, NULL, &e), -EEXIST, &e);
        check_msg(&e, "already exists");
        _cleanup_(json_decrefp) json_t *cm = json_pack("{s:{s:s,s:s}}", "metadata", "name", "c", "resourceVersion", "1");
        check_rc(mk_kube_put(k, "/api/v1/namespaces/ns/configmaps/c", cm, NULL, &e), -EBUSY, &e);
        check_msg(&e, "the object has been modified");
        _cleanup_(json_decrefp) json_t *bad = json_pack("{s:{s:s}}", "metadata", "name", "C!");
        check_rc(mk_kube_post(k, "/api/v1/namespaces/ns/configmaps", bad, NULL, &e), -EINVAL, &e);
        check_msg(&e, "(HTTP 422 Invalid)");
        j = NULL;
        check_rc(mk_kube_get(k, "/api/v1/secrets", &j, &e), -EACCES, &e);
        check_msg(&e, "secrets is forbidden");
        check_rc(mk_kube_get(k, "/api/v1/nodes/x", &j, &e), -EBADMSG, &e);
        check_msg(&e, "the response is not JSON");
        assert_null(j);
        k = mk_kube_free(k);
        server_finish(s);
}

struct informer_rec {
        struct mk_buf log;
};

static int on_informer(enum mk_kube_event_type t, json_t *obj, json_t *old, void *userdata) {
        struct informer_rec *r = userdata;
        const char *oldrv = old ? jstr(old, "metadata.resourceVersion") : NULL;
        assert_int_equal(mk_buf_printf(&r->log, "%s %s@%s%s%s|", mk_kube_event_type_to_string(t),
                                       jstr(obj, "metadata.name"), jstr(obj, "metadata.resourceVersion"),
                                       oldrv ? " was " : "", oldrv ? oldrv : ""),
                         0);
        return t == MK_KUBE_EVENT_DELETED && streq(jstr(obj, "metadata.name"), "n3") ? 1 : 0;
}

static void test_informer(void **state) {
        struct server *s = server_start("informer.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct informer_rec r = {};
        mk_buf_init(&r.log, 1u << 16);
        struct mk_kube_informer_opts io = {.label_selector = "gpu=true", .watch_timeout_seconds = 60};
        check_rc(mk_kube_informer_run(k, "/api/v1/nodes", &io, on_informer, &r, &e), 0, &e);
        assert_string_equal(mk_buf_str(&r.log), "ADDED n1@8|ADDED n2@9|"
                                                "MODIFIED n1@11 was 8|"
                                                "MODIFIED n1@25 was 11|ADDED n3@29|DELETED n2@9 was 9|"
                                                "DELETED n3@31 was 29|");
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

/* A watch that broke after making progress does not raise the informer's
 * backoff: six breaks in a row, each after an event, wait about the initial
 * backoff each (< 1.2 s in all), not 0.4, 0.8, ... 12.8 s (>= 6.3 s). */
static void test_informer_backoff_after_progress(void **state) {
        static const struct mk_kube_options one_attempt = {
                .attempts = 1,
                .backoff_initial_ms = 200,
                .backoff_max_ms = 60000,
                .request_timeout_ms = 10000,
                .connect_timeout_ms = 2000,
        };
        struct server *s = server_start("informer-backoff.txt");
        _cleanup_kube_free_ struct mk_kube *k = client_opts(s->port, &one_attempt);
        struct mk_error e = {};
        struct informer_rec r = {};
        mk_buf_init(&r.log, 1u << 16);
        struct mk_kube_informer_opts io = {.watch_timeout_seconds = 60};
        uint64_t t0 = now_ms();
        check_rc(mk_kube_informer_run(k, "/api/v1/nodes", &io, on_informer, &r, &e), 0, &e);
        uint64_t dt = now_ms() - t0;
        assert_string_equal(mk_buf_str(&r.log), "ADDED n1@8|ADDED n3@9|MODIFIED n1@11 was 8|MODIFIED n1@12 was 11|"
                                                "MODIFIED n1@13 was 12|MODIFIED n1@14 was 13|MODIFIED n1@15 was 14|"
                                                "MODIFIED n1@16 was 15|DELETED n3@17 was 9|");
        if (dt > 5000)
                fail_msg("six breaks after progress took %" PRIu64 " ms: the backoff grew", dt);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

struct bad_rec {
        struct mk_buf log;
        unsigned calls;
};

static void on_bad(json_t *obj, const char *why, void *userdata) {
        struct bad_rec *r = userdata;
        (void) obj;
        r->calls++;
        assert_int_equal(mk_buf_printf(&r->log, "%s|", why), 0);
}

static int on_informer_bad(enum mk_kube_event_type t, json_t *obj, json_t *old, void *userdata) {
        struct bad_rec *b = userdata;
        const char *oldrv = old ? jstr(old, "metadata.resourceVersion") : NULL;
        assert_int_equal(mk_buf_printf(&b->log, "%s %s@%s%s%s|", mk_kube_event_type_to_string(t),
                                       jstr(obj, "metadata.name"), jstr(obj, "metadata.resourceVersion"),
                                       oldrv ? " was " : "", oldrv ? oldrv : ""),
                         0);
        return t == MK_KUBE_EVENT_DELETED && streq(jstr(obj, "metadata.name"), "n3") ? 1 : 0;
}

/* Issue 27: what the apiserver sends is data. A NUL (\u0000) where we read
 * makes that object malformed, never the stream: skipped (its last readable
 * version stays), counted, said once; one in an annotation we do not read
 * changes nothing; garbage in the stream makes the informer list again. On
 * the old client the first LIST failed ("\u0000 is not allowed") and
 * garbage ended the informer with -EBADMSG. */
static void test_informer_hostile(void **state) {
        struct server *s = server_start("informer-nul.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct bad_rec r = {};
        mk_buf_init(&r.log, 1u << 16);
        atomic_ulong bad = 0;
        struct mk_kube_informer_opts io = {.watch_timeout_seconds = 60, .bad_objects = &bad, .on_bad = on_bad};
        check_rc(mk_kube_informer_run(k, "/api/v1/nodes", &io, on_informer_bad, &r, &e), 0, &e);
        assert_string_equal(mk_buf_str(&r.log),
                            "ADDED n1@8|" /* n2 skipped: NUL in our annotation */
                            "metadata.annotations.migkit.io/mig-inventory holds a NUL byte (\\u0000)|"
                            "ADDED n4@9|" /* a NUL in a foreign annotation: read as usual */
                            "metadata.annotations.migkit.io/mig-binds holds a NUL byte (\\u0000)|"
                            /* n1@11 and n1@12 skipped (the second said once only), garbage: relist */
                            "MODIFIED n1@40 was 8|ADDED n3@41|"
                            /* n2 was never readable: its deletion is not passed on */
                            "DELETED n3@43 was 41|");
        assert_int_equal(atomic_load(&bad), 4); /* n2, n1@11, n1@12, n2 again */
        assert_int_equal(r.calls, 2);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

static void *cancel_later(void *userdata) {
        sleep_ms(300);
        atomic_store((atomic_bool *) userdata, true);
        return NULL;
}

static void test_watch_cancel(void **state) {
        struct server *s = server_start("cancel.txt");
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct mk_error e = {};
        struct recorder r = {};
        mk_buf_init(&r.log, 1024);
        atomic_bool cancel = false;
        char *rv = strdup("1");
        struct mk_kube_watch_opts wo = {.timeout_seconds = 300, .cancel = &cancel};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, cancel_later, &cancel), 0);
        uint64_t t0 = now_ms();
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_watch_event, &r, &e), -ECANCELED, &e);
        uint64_t dt = now_ms() - t0;
        assert_int_equal(pthread_join(t, NULL), 0);
        if (dt > 2500)
                fail_msg("cancel took %" PRIu64 " ms", dt);
        assert_string_equal(rv, "1");
        free(rv);
        mk_buf_done(&r.log);
        k = mk_kube_free(k);
        server_finish(s);
}

struct getter {
        struct mk_kube *k;
        int failures;
        char msg[MK_ERROR_MSG_MAX];
};

static void *get_many(void *userdata) {
        struct getter *g = userdata;
        for (int i = 0; i < 10; i++) {
                struct mk_error e = {};
                json_t *j = NULL;
                if (mk_kube_get(g->k, "/api/v1/nodes/n1", &j, &e) < 0 || !jstr(j, "metadata.name")) {
                        g->failures++;
                        snprintf(g->msg, sizeof(g->msg), "%s", e.msg);
                }
                json_decref(j);
        }
        return NULL;
}

static void test_threads(void **state) {
        /* 4 threads x 10 GETs on one client: shared connections, no races
         * (run under the sanitizers). */
        struct mk_buf b;
        mk_buf_init(&b, 1u << 20);
        for (int i = 0; i < 40; i++)
                assert_int_equal(mk_buf_puts(&b, get_n1_script), 0);
        _cleanup_free_ char *text = mk_buf_take(&b);
        struct server *s = server_start_text(text, 0, 0);
        _cleanup_kube_free_ struct mk_kube *k = client(s->port);
        struct getter g[4];
        pthread_t t[4];
        for (int i = 0; i < 4; i++) {
                g[i] = (struct getter) {.k = k};
                assert_int_equal(pthread_create(&t[i], NULL, get_many, &g[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
                assert_int_equal(pthread_join(t[i], NULL), 0);
                if (g[i].failures)
                        fail_msg("thread %d: %d failures, last: %s", i, g[i].failures, g[i].msg);
        }
        k = mk_kube_free(k);
        server_finish(s);
}

/* ---- configuration ---- */

static void test_kubeconfig_contexts(void **state) {
        _cleanup_free_ char *path = fixture_path("kubeconfig/config");
        struct mk_error e = {};
        struct mk_kube_config c = {};

        /* current-context: token user, CA file relative to the file. */
        check_rc(mk_kube_config_from_kubeconfig(path, NULL, &c, &e), 0, &e);
        assert_string_equal(c.server, "https://a.example:6443");
        assert_string_equal(c.token, "t0ken");
        assert_null(c.token_file);
        assert_string_equal(c.namespace, "gpu-operator");
        assert_non_null(c.ca_pem);
        assert_non_null(strstr(c.ca_pem, "fixture CA"));
        assert_false(c.insecure_skip_tls_verify);
        assert_null(c.cert_pem);
        assert_non_null(strstr(c.source, "context 'ctx-a'"));
        mk_kube_config_done(&c);

        /* Another context: client certificate files, no scheme, insecure. */
        check_rc(mk_kube_config_from_kubeconfig(path, "ctx-b", &c, &e), 0, &e);
        assert_string_equal(c.server, "https://b.example:6443");
        assert_true(c.insecure_skip_tls_verify);
        assert_null(c.ca_pem);
        assert_null(c.token);
        assert_non_null(strstr(c.cert_pem, "fixture client certificate"));
        assert_int_equal(c.cert_pem_len, strlen(c.cert_pem));
        assert_non_null(strstr(c.key_pem, "fixture client key"));
        assert_null(c.namespace);
        mk_kube_config_done(&c);

        /* -data fields (base64, a block scalar with a line break) win over files. */
        check_rc(mk_kube_config_from_kubeconfig(path, "ctx-data", &c, &e), 0, &e);
        assert_string_equal(c.server, "https://[fd00::1]:443/prefix");
        assert_int_equal(c.ca_pem_len, 7);
        assert_string_equal(c.ca_pem, "data CA");
        assert_string_equal(c.cert_pem, "data cert");
        assert_int_equal(c.key_pem_len, 8);
        assert_string_equal(c.key_pem, "data\nkey");
        mk_kube_config_done(&c);

        /* tokenFile: read (trimmed) and kept for re-reading. */
        check_rc(mk_kube_config_from_kubeconfig(path, "ctx-file", &c, &e), 0, &e);
        assert_string_equal(c.token, "from-a-file");
        assert_non_null(strstr(c.token_file, "kubeconfig/token"));
        mk_kube_config_done(&c);

        /* A context without a user: anonymous. */
        check_rc(mk_kube_config_from_kubeconfig(path, "ctx-anonymous", &c, &e), 0, &e);
        assert_null(c.token);
        assert_null(c.cert_pem);
        mk_kube_config_done(&c);
        mk_kube_config_done(&c); /* twice is fine */
}

static void test_kubeconfig_merge(void **state) {
        _cleanup_free_ char *config = fixture_path("kubeconfig/config");
        _cleanup_free_ char *users = fixture_path("kubeconfig/merge-users");
        _cleanup_free_ char *first = fixture_path("kubeconfig/merge-first");
        _cleanup_free_ char *missing = fixture_path("kubeconfig/does-not-exist");
        _cleanup_free_ char *list1 = NULL, *list2 = NULL;
        struct mk_error e = {};
        struct mk_kube_config c = {};

        /* The first file's current-context and token-user win. */
        assert_true(asprintf(&list1, "%s::%s:%s", missing, config, users) > 0);
        check_rc(mk_kube_config_from_kubeconfig(list1, NULL, &c, &e), 0, &e);
        assert_string_equal(c.token, "t0ken");
        assert_string_equal(c.server, "https://a.example:6443");
        mk_kube_config_done(&c);

        /* current-context from the first file, its context from the third,
         * the cluster from the second. */
        assert_true(asprintf(&list2, "%s:%s:%s", first, config, users) > 0);
        check_rc(mk_kube_config_from_kubeconfig(list2, NULL, &c, &e), 0, &e);
        assert_string_equal(c.token, "other-t0ken");
        assert_string_equal(c.server, "https://a.example:6443");
        assert_non_null(c.ca_pem);
        mk_kube_config_done(&c);

        /* A single missing file is an error; a list of only missing ones too. */
        check_rc(mk_kube_config_from_kubeconfig(missing, NULL, &c, &e), -ENOENT, &e);
        _cleanup_free_ char *list3 = NULL;
        assert_true(asprintf(&list3, "%s:%s", missing, missing) > 0);
        check_rc(mk_kube_config_from_kubeconfig(list3, NULL, &c, &e), -ENOENT, &e);
        check_msg(&e, "no kubeconfig file in");
}

static void test_kubeconfig_errors(void **state) {
        static const struct {
                const char *yaml;
                const char *context;
                int rc;
                const char *msg;
        } t[] = {
                {"current-context: x\n", NULL, -EINVAL, "contexts: no context named 'x'"},
                {"clusters: []\n", NULL, -EINVAL, "current-context: not set"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context:\n    user: u\n",
                 NULL, -EINVAL, "contexts[0].context.cluster: missing (context 'c')"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: nope}\n",
                 NULL, -EINVAL, "contexts[0].context.cluster: no cluster named 'nope'"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: nobody}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n",
                 NULL, -EINVAL, "contexts[0].context.user: no user named 'nobody'"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k}\n"
                 "clusters:\n- name: k\n  cluster: {insecure-skip-tls-verify: true}\n",
                 NULL, -EINVAL, "clusters[0].cluster.server: missing"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k}\n"
                 "clusters:\n- name: k\n",
                 NULL, -EINVAL, "clusters[0].cluster: missing (clusters 'k' has no cluster)"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x', insecure-skip-tls-verify: maybe}\n",
                 NULL, -EINVAL, "clusters[0].cluster.insecure-skip-tls-verify: want true or false"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x', insecure-skip-tls-verify: true, "
                 "certificate-authority-data: Zm9v}\n",
                 NULL, -EINVAL, "certificate-authority with insecure-skip-tls-verify is not allowed"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'ftp://x'}\n",
                 NULL, -EINVAL, "server 'ftp://x': want an https:// (or http://) URL"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {client-certificate-data: Zm9v}\n",
                 NULL, -EINVAL, "users[0].user.client-key: missing (client-certificate needs a key)"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {client-key-data: Zm9v}\n",
                 NULL, -EINVAL, "users[0].user.client-certificate: missing (client-key needs a certificate)"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {client-certificate-data: 'not base64!', client-key-data: Zm9v}\n",
                 NULL, -EINVAL, "users[0].user.client-certificate-data: not valid base64"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {client-certificate: /nonexistent/x.crt, client-key-data: Zm9v}\n",
                 NULL, -ENOENT, "users[0].user.client-certificate: "},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {tokenFile: no-such-token}\n",
                 NULL, -ENOENT, "users[0].user.tokenFile: "},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {token: 'two words'}\n",
                 NULL, -EINVAL, "users[0].user.token: holds blanks or control characters"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user:\n    exec: {command: aws}\n",
                 NULL, -EOPNOTSUPP, "users[0].user.exec: not supported"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                 "clusters:\n- name: k\n  cluster: {server: 'https://x'}\n"
                 "users:\n- name: u\n  user: {username: a, password: b}\n",
                 NULL, -EOPNOTSUPP, "users[0].user.username: not supported"},
                {"current-context: c\n"
                 "contexts:\n- name: c\n  context: {cluster: [k]}\n",
                 NULL, -EINVAL, "json: cannot unmarshal array"},
                {"- just\n- a list\n", NULL, -EINVAL, "a kubeconfig file must be a mapping"},
                {"current-context: [\n", NULL, -EINVAL, ""},
                {"current-context: a\n", "b", -EINVAL, "no context named 'b'"},
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                char name[32];
                snprintf(name, sizeof(name), "bad-%zu.yaml", i);
                _cleanup_free_ char *path = write_tmp(name, t[i].yaml);
                struct mk_error e = {};
                struct mk_kube_config c = {};
                int r = mk_kube_config_from_kubeconfig(path, t[i].context, &c, &e);
                char buf[1024];
                mk_error_format(&e, buf, sizeof(buf));
                if (r != t[i].rc || !strstr(e.msg, t[i].msg))
                        fail_msg("case %zu: %d '%s', want %d '%s'", i, r, buf, t[i].rc, t[i].msg);
                assert_null(c.server); /* untouched on failure */
        }
        /* Errors carry file:line:column. */
        _cleanup_free_ char *path = write_tmp("pos.yaml", "current-context: c\n"
                                                          "contexts:\n- name: c\n  context: {cluster: k}\n"
                                                          "clusters:\n- name: k\n  cluster:\n    insecure-skip-tls-verify: true\n");
        struct mk_error e = {};
        struct mk_kube_config c = {};
        check_rc(mk_kube_config_from_kubeconfig(path, NULL, &c, &e), -EINVAL, &e);
        assert_string_equal(e.file, path);
        assert_int_equal(e.line, 8);
        assert_string_equal(e.field, "clusters[0].cluster");
}

static void test_in_cluster(void **state) {
        _cleanup_free_ char *root = fixture_path("incluster");
        struct mk_error e = {};
        struct mk_kube_config c = {};

        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
        check_rc(mk_kube_config_in_cluster(root, &c, &e), -ENOENT, &e);
        check_msg(&e, "not running in a cluster");

        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        check_rc(mk_kube_config_in_cluster(root, &c, &e), 0, &e);
        assert_string_equal(c.server, "https://10.96.0.1:443");
        assert_string_equal(c.token, "eyJhbGciOiJSUzI1NiJ9.fixture-sa-token.sig");
        assert_non_null(strstr(c.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token"));
        assert_non_null(strstr(c.ca_pem, "fixture in-cluster CA"));
        assert_string_equal(c.namespace, "gpu-operator");
        assert_string_equal(c.source, "in-cluster");
        mk_kube_config_done(&c);

        setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
        check_rc(mk_kube_config_in_cluster(root, &c, &e), 0, &e);
        assert_string_equal(c.server, "https://[fd00:10:96::1]:443");
        mk_kube_config_done(&c);

        /* No service account files under this root. */
        check_rc(mk_kube_config_in_cluster(tmpdir, &c, &e), -ENOENT, &e);
        check_msg(&e, "token");
        assert_null(c.server);

        /* The automatic choice: KUBECONFIG, else in-cluster, else ~/.kube/config. */
        _cleanup_free_ char *kc = fixture_path("kubeconfig/config");
        setenv("KUBECONFIG", kc, 1);
        check_rc(mk_kube_config_load(root, &c, &e), 0, &e);
        assert_string_equal(c.server, "https://a.example:6443");
        mk_kube_config_done(&c);
        setenv("KUBECONFIG", "", 1);
        check_rc(mk_kube_config_load(root, &c, &e), 0, &e);
        assert_string_equal(c.source, "in-cluster");
        mk_kube_config_done(&c);
        unsetenv("KUBERNETES_SERVICE_HOST");
        const char *home = getenv("HOME");
        _cleanup_free_ char *saved_home = home ? strdup(home) : NULL;
        setenv("HOME", tmpdir, 1);
        check_rc(mk_kube_config_load(root, &c, &e), -ENOENT, &e);
        check_msg(&e, "no Kubernetes configuration");
        _cleanup_free_ char *dotkube = NULL;
        assert_int_equal(mk_path_join(tmpdir, ".kube", &dotkube), 0);
        assert_int_equal(mkdir(dotkube, 0755), 0);
        _cleanup_free_ char *home_config = write_tmp(".kube/config", "current-context: h\n"
                                                                     "contexts:\n- name: h\n  context: {cluster: h}\n"
                                                                     "clusters:\n- name: h\n  cluster: {server: 'https://home:6443'}\n");
        check_rc(mk_kube_config_load(root, &c, &e), 0, &e);
        assert_string_equal(c.server, "https://home:6443");
        assert_non_null(strstr(c.source, home_config));
        mk_kube_config_done(&c);
        if (saved_home)
                setenv("HOME", saved_home, 1);
        else
                unsetenv("HOME");
        unsetenv("KUBECONFIG");
        unsetenv("KUBERNETES_SERVICE_PORT");
}

static void test_kubeconfig_request(void **state) {
        /* From a kubeconfig file to the bytes on the wire. */
        struct server *s = server_start("kubeconfig-request.txt");
        _cleanup_free_ char *token = fixture_path("kubeconfig/token"), *yaml = NULL;
        assert_true(asprintf(&yaml,
                             "current-context: other\n"
                             "contexts:\n"
                             "- {name: other, context: {cluster: x, user: nobody}}\n"
                             "- {name: test, context: {cluster: local, user: me, namespace: ns1}}\n"
                             "clusters:\n- name: local\n  cluster:\n    server: http://127.0.0.1:%d/\n"
                             "users:\n- name: me\n  user:\n    tokenFile: %s\n",
                             s->port, token) > 0);
        _cleanup_free_ char *path = write_tmp("request.kubeconfig", yaml);
        struct mk_error e = {};
        struct mk_kube_config c = {};
        check_rc(mk_kube_config_from_kubeconfig(path, "test", &c, &e), 0, &e);
        _cleanup_kube_free_ struct mk_kube *k = NULL;
        check_rc(mk_kube_new(&c, &fast, &k, &e), 0, &e);
        assert_string_equal(mk_kube_namespace(k), "ns1");
        assert_non_null(strstr(mk_kube_server(k), "http://127.0.0.1:"));
        json_t *j = NULL;
        check_rc(mk_kube_get(k, "/api", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "kind"), "APIVersions");
        json_decref(j);
        k = mk_kube_free(k);
        server_finish(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_status_to_errno),
                cmocka_unit_test(test_string_tables),
                cmocka_unit_test(test_base64),
                cmocka_unit_test(test_get),
                cmocka_unit_test(test_bad_paths),
                cmocka_unit_test(test_list_pages),
                cmocka_unit_test(test_list_expired),
                cmocka_unit_test(test_watch_stream),
                cmocka_unit_test(test_watch_resume),
                cmocka_unit_test(test_watch_gone),
                cmocka_unit_test(test_watch_oversize),
                cmocka_unit_test(test_body_oversize),
                cmocka_unit_test(test_retry),
                cmocka_unit_test(test_refused_then_success),
                cmocka_unit_test(test_refused_bounded),
                cmocka_unit_test(test_patch),
                cmocka_unit_test(test_verbs),
                cmocka_unit_test(test_informer),
                cmocka_unit_test(test_informer_backoff_after_progress),
                cmocka_unit_test(test_informer_hostile),
                cmocka_unit_test(test_watch_cancel),
                cmocka_unit_test(test_threads),
                cmocka_unit_test(test_kubeconfig_contexts),
                cmocka_unit_test(test_kubeconfig_merge),
                cmocka_unit_test(test_kubeconfig_errors),
                cmocka_unit_test(test_in_cluster),
                cmocka_unit_test(test_kubeconfig_request),
                cmocka_unit_test(test_threads_hammer),
        };
        return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
