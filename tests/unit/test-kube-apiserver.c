/* Behaviour tests for kube/ against a real kube-apiserver (1.20, from
 * scripts/k8s-testenv): TLS with the test CA, token and client-certificate
 * authentication, RBAC refusals, create/get/patch/delete, LIST pagination,
 * WATCH resume, 410 Gone after an etcd compaction, Events, the informer
 * across an apiserver crash.
 *
 * Runs only when MIGKIT_K8S_TESTENV names the k8s-testenv script (the
 * apiserver must already be built: `k8s-testenv build`); otherwise every
 * test is skipped. The control plane is started once for the whole group
 * with the watch cache off for ConfigMaps, so watches of ConfigMaps reach
 * etcd and see 410 after a compaction (docs/k8s-testenv.md). The client's
 * k8s debug lines go to DIR/client.log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

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

/* ---- the control plane ---- */

static const char *testenv;             /* the script, or NULL: skip */
static char envdir[PATH_MAX];
static bool started;
static char *kubeconfig, *cert_kubeconfig, *server, *ca, *user_token, *client_log;

static char *env_value(const char *text, const char *key) {
        char prefix[128];
        snprintf(prefix, sizeof(prefix), "export %s=", key);
        for (const char *p = text; p && *p;) {
                size_t n = strcspn(p, "\n");
                if (strneq(p, prefix, strlen(prefix))) {
                        const char *v = p + strlen(prefix);
                        size_t len = n - strlen(prefix);
                        /* `printf %q` leaves plain paths and tokens bare; we make no others. */
                        if (len == 0 || strchr("'\"$", v[0]) || memchr(v, '\\', len))
                                return NULL;
                        return strndup(v, len);
                }
                p += n + (p[n] == '\n');
        }
        return NULL;
}

static int run_testenv(const char *const *args, char **ret_output) {
        const char *argv[16] = {testenv};
        size_t n = 1;
        for (; args[n - 1] && n < ELEMENTSOF(argv) - 1; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        struct mk_spawn_opts o = {.argv = argv, .timeout_ms = 240000, .capture = true, .output_cap = 1u << 20};
        struct mk_spawn_result res = {};
        struct mk_error e = {};
        int r = mk_spawn(&o, &res, &e);
        if (r < 0) {
                fprintf(stderr, "cannot run %s: %s\n", testenv, e.msg);
                return r;
        }
        int status = res.exit_status;
        if (status != 0)
                fprintf(stderr, "%s %s exited with %d:\n%s\n", testenv, args[0], status,
                        res.output ? res.output : "");
        if (ret_output)
                *ret_output = TAKE_PTR(res.output);
        mk_spawn_result_done(&res);
        return status == 0 ? 0 : -EIO;
}

static int group_setup(void **state) {
        testenv = getenv("MIGKIT_K8S_TESTENV");
        if (!testenv || !*testenv) {
                testenv = NULL;
                return 0;
        }
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base && *base)
                (void) mkdir(base, 0755);
        snprintf(envdir, sizeof(envdir), "%s/test-kube-apiserver.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(envdir))
                return -1;

        char pid[32];
        snprintf(pid, sizeof(pid), "%d", (int) getpid());
        /* The watch cache off for ConfigMaps only: their watches reach etcd
         * (410 after a compaction), the others keep the cache. */
        const char *args[] = {"start", envdir, "--no-build", "--owner-pid", pid, "--max-lifetime", "900",
                              "--", "--watch-cache-sizes=configmaps#0", NULL};
        _cleanup_free_ char *out = NULL;
        if (run_testenv(args, &out) < 0)
                return -1;
        started = true;
        _cleanup_free_ char *env_path = NULL, *env = NULL;
        if (mk_path_join(envdir, "env", &env_path) < 0 || mk_read_file(env_path, 1u << 16, &env, NULL, NULL) < 0)
                return -1;
        kubeconfig = env_value(env, "KUBECONFIG");
        cert_kubeconfig = env_value(env, "MIGKIT_K8S_CERT_KUBECONFIG");
        server = env_value(env, "MIGKIT_K8S_SERVER");
        ca = env_value(env, "MIGKIT_K8S_CA");
        user_token = env_value(env, "MIGKIT_K8S_USER_TOKEN");
        if (!kubeconfig || !cert_kubeconfig || !server || !ca || !user_token) {
                fprintf(stderr, "%s/env lacks a variable:\n%s\n", envdir, env);
                return -1;
        }

        /* Debug lines of the client to a file (set before any thread). */
        if (mk_path_join(envdir, "client.log", &client_log) < 0)
                return -1;
        int fd = open(client_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
        if (fd < 0)
                return -1;
        mk_log_set_fd(fd);
        (void) mk_log_parse_debug("k8s");
        return 0;
}

static int group_teardown(void **state) {
        if (started) {
                const char *args[] = {"stop", envdir, NULL};
                (void) run_testenv(args, NULL);
                if (!getenv("MIGKIT_KEEP_TESTENV")) {
                        const char *argv[] = {"rm", "-rf", "--", envdir, NULL};
                        struct mk_spawn_opts o = {.argv = argv};
                        struct mk_spawn_result res;
                        if (mk_spawn(&o, &res, NULL) == 0)
                                mk_spawn_result_done(&res);
                }
        }
        free(kubeconfig);
        free(cert_kubeconfig);
        free(server);
        free(ca);
        free(user_token);
        free(client_log);
        return 0;
}

#define need_apiserver()                        \
        do {                                    \
                if (!testenv)                   \
                        skip();                 \
        } while (0)

static const struct mk_kube_options opts = {
        .attempts = 5,
        .backoff_initial_ms = 100,
        .backoff_max_ms = 1000,
        .request_timeout_ms = 30000,
};

static struct mk_kube *client_from(const char *path) {
        struct mk_kube_config c = {};
        struct mk_error e = {};
        struct mk_kube *k = NULL;
        check_rc(mk_kube_config_from_kubeconfig(path, NULL, &c, &e), 0, &e);
        check_rc(mk_kube_new(&c, &opts, &k, &e), 0, &e);
        return k;
}

static struct mk_kube *admin(void) {
        return client_from(kubeconfig);
}

/* A client with the server, a CA (PEM file or NULL) and a token. */
static struct mk_kube *client_with(const char *ca_file, bool insecure, const char *token) {
        struct mk_kube_config c = {.server = strdup(server), .insecure_skip_tls_verify = insecure};
        struct mk_error e = {};
        struct mk_kube *k = NULL;
        if (ca_file)
                check_rc(mk_read_file(ca_file, 1u << 20, &c.ca_pem, &c.ca_pem_len, &e), 0, &e);
        if (token)
                c.token = strdup(token);
        check_rc(mk_kube_new(&c, &opts, &k, &e), 0, &e);
        return k;
}

static const char *jstr(json_t *j, const char *dotted) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", dotted);
        char *save = NULL;
        for (char *t = strtok_r(buf, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
                j = json_object_get(j, t);
        return json_string_value(j);
}

static const char *label(json_t *obj, const char *key) {
        return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

static void create(struct mk_kube *k, const char *path, const char *json) {
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *body = json_loads(json, 0, &jerr);
        if (!body)
                fail_msg("bad test JSON: %s", jerr.text);
        struct mk_error e = {};
        check_rc(mk_kube_post(k, path, body, NULL, &e), 0, &e);
}

static void patch_labels(struct mk_kube *k, const char *path, const char *json, char **ret_rv) {
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *changes = json_loads(json, 0, &jerr);
        if (!changes)
                fail_msg("bad test JSON: %s", jerr.text);
        struct mk_error e = {};
        _cleanup_(json_decrefp) json_t *j = NULL;
        check_rc(mk_kube_patch_metadata(k, path, "labels", changes, &j, &e), 0, &e);
        if (ret_rv) {
                free(*ret_rv);
                *ret_rv = strdup(jstr(j, "metadata.resourceVersion"));
        }
}

static bool log_has(const char *needle) {
        _cleanup_free_ char *text = NULL;
        if (mk_read_file(client_log, 64u << 20, &text, NULL, NULL) < 0)
                return false;
        return strstr(text, needle) != NULL;
}

/* ---- tests ---- */

static void test_auth(void **state) {
        need_apiserver();
        struct mk_error e = {};
        json_t *j = NULL;

        /* kubeconfig with a token, the CA by file. */
        _cleanup_kube_free_ struct mk_kube *k = admin();
        check_rc(mk_kube_get(k, "/api", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "kind"), "APIVersions");
        json_decref(j);

        /* kubeconfig with the admin client certificate. */
        _cleanup_kube_free_ struct mk_kube *kc = client_from(cert_kubeconfig);
        check_rc(mk_kube_get(kc, "/api/v1/nodes", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "kind"), "NodeList");
        json_decref(j);

        /* A token without roles: RBAC says no, with its message. */
        _cleanup_kube_free_ struct mk_kube *ku = client_with(ca, false, user_token);
        j = NULL;
        check_rc(mk_kube_get(ku, "/api/v1/nodes", &j, &e), -EACCES, &e);
        check_msg(&e, "nodes is forbidden: User \"migkit-user\" cannot list resource \"nodes\"");
        check_msg(&e, "(HTTP 403 Forbidden)");
        assert_null(j);

        /* A wrong token: 401. */
        _cleanup_kube_free_ struct mk_kube *kb = client_with(ca, false, "not-a-token");
        check_rc(mk_kube_get(kb, "/api", &j, &e), -EACCES, &e);
        check_msg(&e, "HTTP 401");

        /* The server's certificate checked against the given CA only: the
         * admin certificate is no CA, so verification fails, unretried. */
        _cleanup_free_ char *admin_crt = NULL;
        assert_int_equal(mk_path_join(envdir, "pki/admin.crt", &admin_crt), 0);
        _cleanup_kube_free_ struct mk_kube *kw = client_with(admin_crt, false, user_token);
        uint64_t t0 = now_ms();
        check_rc(mk_kube_get(kw, "/api", &j, &e), -EPROTO, &e);
        assert_true(now_ms() - t0 < 5000);
        assert_null(strstr(e.msg, "attempts"));

        /* No CA: the system's store does not know the test CA. */
        _cleanup_kube_free_ struct mk_kube *kn = client_with(NULL, false, user_token);
        check_rc(mk_kube_get(kn, "/api", &j, &e), -EPROTO, &e);

        /* insecure-skip-tls-verify. */
        _cleanup_kube_free_ struct mk_kube *ki = client_with(NULL, true, user_token);
        check_rc(mk_kube_get(ki, "/api", &j, &e), 0, &e);
        json_decref(j);
}

static void test_node_crud(void **state) {
        need_apiserver();
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};
        json_t *j = NULL;
        const char *path = "/api/v1/nodes/migkit-crud";

        create(k, "/api/v1/nodes",
               "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"migkit-crud\","
               "\"labels\":{\"nvidia.com/gpu.deploy.device-plugin\":\"true\",\"keep\":\"me\"}}}");
        _cleanup_(json_decrefp) json_t *again =
                json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "Node", "metadata", "name", "migkit-crud");
        check_rc(mk_kube_post(k, "/api/v1/nodes", again, NULL, &e), -EEXIST, &e);
        check_msg(&e, "nodes \"migkit-crud\" already exists");

        check_rc(mk_kube_get(k, path, &j, &e), 0, &e);
        assert_string_equal(label(j, "keep"), "me");
        _cleanup_free_ char *rv0 = strdup(jstr(j, "metadata.resourceVersion"));
        json_decref(j);

        /* Merge patch: set one label, remove another. */
        _cleanup_(json_decrefp) json_t *mp = json_pack("{s:{s:{s:s,s:n}}}", "metadata", "labels",
                                                       "nvidia.com/mig.config.state", "pending", "keep");
        check_rc(mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, mp, &j, &e), 0, &e);
        assert_string_equal(label(j, "nvidia.com/mig.config.state"), "pending");
        assert_null(label(j, "keep"));
        assert_string_equal(label(j, "nvidia.com/gpu.deploy.device-plugin"), "true");
        json_decref(j);

        /* Strategic merge patch of labels. */
        _cleanup_(json_decrefp) json_t *sp = json_pack("{s:{s:{s:s}}}", "metadata", "labels",
                                                       "nvidia.com/gpu.deploy.device-plugin", "paused-for-mig-change");
        check_rc(mk_kube_patch(k, path, MK_KUBE_PATCH_STRATEGIC, sp, &j, &e), 0, &e);
        assert_string_equal(label(j, "nvidia.com/gpu.deploy.device-plugin"), "paused-for-mig-change");
        assert_string_equal(label(j, "nvidia.com/mig.config.state"), "pending");
        json_decref(j);

        /* Where strategic and merge differ: a list with a merge key
         * (status.conditions, by type) is merged, not replaced. */
        _cleanup_(json_decrefp) json_t *cond_a = json_pack("{s:{s:[{s:s,s:s}]}}", "status", "conditions", "type",
                                                       "MigA", "status", "True");
        _cleanup_(json_decrefp) json_t *cond_b = json_pack("{s:{s:[{s:s,s:s}]}}", "status", "conditions", "type",
                                                       "MigB", "status", "False");
        _cleanup_free_ char *status = NULL;
        assert_true(asprintf(&status, "%s/status", path) > 0);
        check_rc(mk_kube_patch(k, status, MK_KUBE_PATCH_STRATEGIC, cond_a, NULL, &e), 0, &e);
        check_rc(mk_kube_patch(k, status, MK_KUBE_PATCH_STRATEGIC, cond_b, &j, &e), 0, &e);
        assert_int_equal(json_array_size(json_object_get(json_object_get(j, "status"), "conditions")), 2);
        json_decref(j);
        check_rc(mk_kube_patch(k, status, MK_KUBE_PATCH_MERGE, cond_a, &j, &e), 0, &e);
        assert_int_equal(json_array_size(json_object_get(json_object_get(j, "status"), "conditions")), 1);
        json_decref(j);

        /* Annotations through the helper. */
        _cleanup_(json_decrefp) json_t *ann = json_pack("{s:s}", "migkit.io/note", "hello");
        check_rc(mk_kube_patch_metadata(k, path, "annotations", ann, &j, &e), 0, &e);
        assert_string_equal(json_string_value(json_object_get(
                                    json_object_get(json_object_get(j, "metadata"), "annotations"), "migkit.io/note")),
                            "hello");
        json_decref(j);

        /* JSON patch with a test that fails: 422, not retried. */
        _cleanup_(json_decrefp) json_t *jp = json_pack("[{s:s,s:s,s:s}]", "op", "test", "path",
                                                       "/metadata/labels/nope", "value", "x");
        check_rc(mk_kube_patch(k, path, MK_KUBE_PATCH_JSON, jp, NULL, &e), -EINVAL, &e);

        /* PUT with a stale resourceVersion: Conflict -> -EBUSY. */
        _cleanup_(json_decrefp) json_t *stale = json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion", "v1", "kind",
                                                          "Node", "metadata", "name", "migkit-crud",
                                                          "resourceVersion", rv0);
        check_rc(mk_kube_put(k, path, stale, NULL, &e), -EBUSY, &e);
        check_msg(&e, "the object has been modified");

        check_rc(mk_kube_delete(k, path, &j, &e), 0, &e);
        json_decref(j);
        j = NULL;
        check_rc(mk_kube_get(k, path, &j, &e), -ENOENT, &e);
        check_msg(&e, "nodes \"migkit-crud\" not found");
        check_rc(mk_kube_delete(k, path, NULL, &e), -ENOENT, &e);
}

static int collect_name(json_t *item, void *userdata) {
        struct mk_buf *b = userdata;
        assert_int_equal(mk_buf_printf(b, "%s,", jstr(item, "metadata.name")), 0);
        return 0;
}

static void test_list_pagination(void **state) {
        need_apiserver();
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};

        create(k, "/api/v1/namespaces", "{\"metadata\":{\"name\":\"migkit-list\"}}");
        for (int i = 0; i < 5; i++) {
                char json[256];
                snprintf(json, sizeof(json),
                         "{\"metadata\":{\"name\":\"cm-%d\",\"labels\":{\"app\":\"migkit-list\",\"idx\":\"%d\"}},"
                         "\"data\":{\"i\":\"%d\"}}",
                         i, i, i);
                create(k, "/api/v1/namespaces/migkit-list/configmaps", json);
        }
        create(k, "/api/v1/namespaces/migkit-list/configmaps", "{\"metadata\":{\"name\":\"other\"}}");

        /* limit=1: six pages for five items, one by one, in name order. */
        struct mk_buf b;
        mk_buf_init(&b, 4096);
        struct mk_kube_list_opts lo = {.label_selector = "app=migkit-list", .limit = 1};
        _cleanup_free_ char *rv = NULL;
        check_rc(mk_kube_list_each(k, "/api/v1/namespaces/migkit-list/configmaps", &lo, collect_name, &b, &rv, &e),
                 0, &e);
        assert_string_equal(mk_buf_str(&b), "cm-0,cm-1,cm-2,cm-3,cm-4,");
        assert_non_null(rv);
        assert_true(*rv);
        mk_buf_done(&b);

        json_t *list = NULL;
        lo.limit = 2;
        check_rc(mk_kube_list(k, "/api/v1/namespaces/migkit-list/configmaps", &lo, &list, &e), 0, &e);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 5);
        assert_string_equal(jstr(list, "kind"), "ConfigMapList");
        assert_null(jstr(list, "metadata.continue"));
        json_decref(list);

        /* Set-based selector (escaped) and a field selector. */
        mk_buf_init(&b, 4096);
        struct mk_kube_list_opts sel = {.label_selector = "app=migkit-list,idx in (1,3)", .limit = 1};
        check_rc(mk_kube_list_each(k, "/api/v1/namespaces/migkit-list/configmaps", &sel, collect_name, &b, NULL, &e),
                 0, &e);
        assert_string_equal(mk_buf_str(&b), "cm-1,cm-3,");
        mk_buf_done(&b);
        mk_buf_init(&b, 4096);
        struct mk_kube_list_opts fsel = {.field_selector = "metadata.name=cm-2"};
        check_rc(mk_kube_list_each(k, "/api/v1/configmaps", &fsel, collect_name, &b, NULL, &e), 0, &e);
        assert_string_equal(mk_buf_str(&b), "cm-2,");
        mk_buf_done(&b);

        /* A bad selector: 400 -> -EINVAL with the apiserver's reason. */
        struct mk_kube_list_opts bad = {.label_selector = "app in in"};
        check_rc(mk_kube_list(k, "/api/v1/configmaps", &bad, &list, &e), -EINVAL, &e);
}

struct watch_rec {
        pthread_mutex_t lock;
        struct mk_buf log;
        const char *stop_round;         /* label round value that stops the watch */
};

static int on_node_event(enum mk_kube_event_type t, json_t *obj, void *userdata) {
        struct watch_rec *r = userdata;
        const char *round = label(obj, "round");
        pthread_mutex_lock(&r->lock);
        assert_int_equal(mk_buf_printf(&r->log, "%s %s|", mk_kube_event_type_to_string(t), round ? round : "-"), 0);
        pthread_mutex_unlock(&r->lock);
        return round && r->stop_round && streq(round, r->stop_round) ? 1 : 0;
}

struct watch_thread {
        struct mk_kube *k;
        struct mk_kube_watch_opts wo;
        char *rv;
        struct watch_rec rec;
        int result;
        char msg[MK_ERROR_MSG_MAX];
};

static void *watch_main(void *userdata) {
        struct watch_thread *w = userdata;
        struct mk_error e = {};
        w->result = mk_kube_watch(w->k, "/api/v1/nodes", &w->wo, &w->rv, on_node_event, &w->rec, &e);
        snprintf(w->msg, sizeof(w->msg), "%s", e.msg);
        return NULL;
}

static void test_watch_resume(void **state) {
        need_apiserver();
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};
        const char *path = "/api/v1/nodes/migkit-watch";

        create(k, "/api/v1/nodes", "{\"metadata\":{\"name\":\"migkit-watch\",\"labels\":{\"round\":\"0\"}}}");
        json_t *j = NULL;
        check_rc(mk_kube_get(k, path, &j, &e), 0, &e);
        char *rv = strdup(jstr(j, "metadata.resourceVersion"));
        json_decref(j);
        patch_labels(k, path, "{\"round\":\"1\"}", NULL);
        patch_labels(k, path, "{\"round\":\"2\"}", NULL);

        /* From the creation's version: both changes, in order. */
        struct watch_rec r = {.lock = PTHREAD_MUTEX_INITIALIZER, .stop_round = "2"};
        mk_buf_init(&r.log, 4096);
        struct mk_kube_watch_opts wo = {.field_selector = "metadata.name=migkit-watch", .timeout_seconds = 30,
                                        .allow_bookmarks = true};
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_node_event, &r, &e), 0, &e);
        assert_string_equal(mk_buf_str(&r.log), "MODIFIED 1|MODIFIED 2|");

        /* Resumed from the last version seen: only what came after. */
        patch_labels(k, path, "{\"round\":\"3\"}", NULL);
        mk_buf_reset(&r.log);
        r.stop_round = "3";
        check_rc(mk_kube_watch(k, "/api/v1/nodes", &wo, &rv, on_node_event, &r, &e), 0, &e);
        assert_string_equal(mk_buf_str(&r.log), "MODIFIED 3|");
        mk_buf_done(&r.log);

        /* Across the server's timeouts (1 s): the watch resumes by itself
         * and misses nothing made while it reconnects. */
        struct watch_thread w = {.k = k, .rv = rv, .rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .stop_round = "6"}};
        w.wo = (struct mk_kube_watch_opts) {.field_selector = "metadata.name=migkit-watch", .timeout_seconds = 1};
        mk_buf_init(&w.rec.log, 4096);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, watch_main, &w), 0);
        for (int i = 4; i <= 6; i++) {
                sleep_ms(1300);
                char json[64];
                snprintf(json, sizeof(json), "{\"round\":\"%d\"}", i);
                patch_labels(k, path, json, NULL);
        }
        assert_int_equal(pthread_join(t, NULL), 0);
        check_rc(w.result, 0, &(struct mk_error) {.msg = ""});
        assert_string_equal(mk_buf_str(&w.rec.log), "MODIFIED 4|MODIFIED 5|MODIFIED 6|");
        mk_buf_done(&w.rec.log);
        free(w.rv);

        check_rc(mk_kube_delete(k, path, NULL, &e), 0, &e);
}

static void compact(void) {
        const char *args[] = {"compact", envdir, NULL};
        assert_int_equal(run_testenv(args, NULL), 0);
}

static int ignore_event(enum mk_kube_event_type t, json_t *obj, void *userdata) {
        return 0;
}

struct informer_thread {
        struct mk_kube *k;
        atomic_bool cancel;
        pthread_mutex_t lock;
        struct mk_buf log;
        int result;
        char msg[MK_ERROR_MSG_MAX];
        const char *path;
        const char *field_selector;
};

static int on_informer(enum mk_kube_event_type t, json_t *obj, json_t *old, void *userdata) {
        struct informer_thread *in = userdata;
        const char *v = json_string_value(json_object_get(json_object_get(obj, "data"), "v"));
        const char *round = label(obj, "round");
        pthread_mutex_lock(&in->lock);
        assert_int_equal(mk_buf_printf(&in->log, "%s %s%s%s|", mk_kube_event_type_to_string(t),
                                       jstr(obj, "metadata.name"), v || round ? "=" : "", v ? v : round ? round : ""),
                         0);
        pthread_mutex_unlock(&in->lock);
        return 0;
}

static void *informer_main(void *userdata) {
        struct informer_thread *in = userdata;
        struct mk_error e = {};
        struct mk_kube_informer_opts io = {.field_selector = in->field_selector, .watch_timeout_seconds = 1,
                                           .cancel = &in->cancel};
        in->result = mk_kube_informer_run(in->k, in->path, &io, on_informer, in, &e);
        snprintf(in->msg, sizeof(in->msg), "%s", e.msg);
        return NULL;
}

/* Waits until the informer's log ends with `tail` (at most 30 s). */
static void wait_log(struct informer_thread *in, const char *want) {
        for (uint64_t t0 = now_ms(); now_ms() - t0 < 30000; sleep_ms(50)) {
                pthread_mutex_lock(&in->lock);
                bool ok = streq(mk_buf_str(&in->log), want);
                pthread_mutex_unlock(&in->lock);
                if (ok)
                        return;
        }
        pthread_mutex_lock(&in->lock);
        fail_msg("informer log '%s', want '%s'", mk_buf_str(&in->log), want);
}

static void test_gone_and_relist(void **state) {
        need_apiserver();
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};
        const char *cms = "/api/v1/namespaces/migkit-gone/configmaps";

        create(k, "/api/v1/namespaces", "{\"metadata\":{\"name\":\"migkit-gone\"}}");
        create(k, cms, "{\"metadata\":{\"name\":\"a\"},\"data\":{\"v\":\"1\"}}");
        json_t *j = NULL;
        check_rc(mk_kube_get(k, "/api/v1/namespaces/migkit-gone/configmaps/a", &j, &e), 0, &e);
        char *rv = strdup(jstr(j, "metadata.resourceVersion"));
        json_decref(j);
        /* At least two writes before the compaction (docs/k8s-testenv.md). */
        _cleanup_(json_decrefp) json_t *p2 = json_pack("{s:{s:s}}", "data", "v", "2");
        _cleanup_(json_decrefp) json_t *p3 = json_pack("{s:{s:s}}", "data", "v", "3");
        check_rc(mk_kube_patch(k, "/api/v1/namespaces/migkit-gone/configmaps/a", MK_KUBE_PATCH_MERGE, p2, NULL, &e),
                 0, &e);
        check_rc(mk_kube_patch(k, "/api/v1/namespaces/migkit-gone/configmaps/a", MK_KUBE_PATCH_MERGE, p3, NULL, &e),
                 0, &e);
        compact();

        /* A watch from the old version: 410 -> -ESTALE. */
        struct mk_kube_watch_opts wo = {.timeout_seconds = 5};
        check_rc(mk_kube_watch(k, cms, &wo, &rv, ignore_event, NULL, &e), -ESTALE, &e);
        check_msg(&e, "code 410");

        /* Relist, then watch from the list's version: fine. */
        json_t *list = NULL;
        check_rc(mk_kube_list(k, cms, NULL, &list, &e), 0, &e);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
        free(rv);
        rv = strdup(jstr(list, "metadata.resourceVersion"));
        json_decref(list);
        wo = (struct mk_kube_watch_opts) {.timeout_seconds = 1, .once = true};
        check_rc(mk_kube_watch(k, cms, &wo, &rv, ignore_event, NULL, &e), 0, &e);
        free(rv);

        /* The informer: it lists, watches in 1 s streams, and when a
         * compaction passes its version between two streams, relists and
         * goes on without losing changes. */
        struct informer_thread in = {.k = k, .lock = PTHREAD_MUTEX_INITIALIZER, .path = cms};
        mk_buf_init(&in.log, 1u << 16);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, informer_main, &in), 0);
        wait_log(&in, "ADDED a=3|");
        create(k, cms, "{\"metadata\":{\"name\":\"b\"},\"data\":{\"v\":\"1\"}}");
        wait_log(&in, "ADDED a=3|ADDED b=1|");
        /* Writes elsewhere, then a compaction past the informer's version. */
        create(k, "/api/v1/namespaces/default/configmaps", "{\"metadata\":{\"name\":\"elsewhere-1\"}}");
        create(k, "/api/v1/namespaces/default/configmaps", "{\"metadata\":{\"name\":\"elsewhere-2\"}}");
        compact();
        for (uint64_t t0 = now_ms(); !log_has("version too old, relisting") && now_ms() - t0 < 20000;)
                sleep_ms(100);
        if (!log_has("version too old, relisting"))
                fail_msg("the informer did not relist after the compaction (see %s)", client_log);
        check_rc(mk_kube_patch(k, "/api/v1/namespaces/migkit-gone/configmaps/b", MK_KUBE_PATCH_MERGE, p2, NULL, &e),
                 0, &e);
        check_rc(mk_kube_delete(k, "/api/v1/namespaces/migkit-gone/configmaps/a", NULL, &e), 0, &e);
        wait_log(&in, "ADDED a=3|ADDED b=1|MODIFIED b=2|DELETED a=3|");
        atomic_store(&in.cancel, true);
        assert_int_equal(pthread_join(t, NULL), 0);
        check_rc(in.result, -ECANCELED, &(struct mk_error) {.msg = ""});
        mk_buf_done(&in.log);
}

static void test_event(void **state) {
        need_apiserver();
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};
        json_t *j = NULL;
        create(k, "/api/v1/nodes", "{\"metadata\":{\"name\":\"migkit-event\"}}");
        _cleanup_(json_decrefp) json_t *ev = json_pack(
                "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s,s:s},s:s,s:s}", "apiVersion", "v1", "kind",
                "Event", "metadata", "name", "migkit-event.1", "namespace", "default", "involvedObject", "kind",
                "Node", "name", "migkit-event", "apiVersion", "v1", "reason", "MigConfigApplied", "message",
                "applied 'all-1g.10gb'", "type", "Normal", "source", "component", "migkit-manager", "host",
                "migkit-event", "firstTimestamp", "2024-01-01T00:00:00Z", "lastTimestamp", "2024-01-01T00:00:00Z");
        check_rc(mk_kube_post(k, "/api/v1/namespaces/default/events", ev, &j, &e), 0, &e);
        assert_string_equal(jstr(j, "reason"), "MigConfigApplied");
        json_decref(j);
        check_rc(mk_kube_get(k, "/api/v1/namespaces/default/events/migkit-event.1", &j, &e), 0, &e);
        assert_string_equal(jstr(j, "involvedObject.name"), "migkit-event");
        json_decref(j);
        /* POST is not retried: the second is a plain AlreadyExists. */
        check_rc(mk_kube_post(k, "/api/v1/namespaces/default/events", ev, NULL, &e), -EEXIST, &e);
        check_rc(mk_kube_delete(k, "/api/v1/nodes/migkit-event", NULL, &e), 0, &e);
}

struct getter {
        struct mk_kube *k;
        int failures;
        char msg[MK_ERROR_MSG_MAX];
};

static void *get_many(void *userdata) {
        struct getter *g = userdata;
        for (int i = 0; i < 20; i++) {
                struct mk_error e = {};
                json_t *j = NULL;
                if (mk_kube_get(g->k, "/api/v1/namespaces/default", &j, &e) < 0 || !jstr(j, "metadata.name")) {
                        g->failures++;
                        snprintf(g->msg, sizeof(g->msg), "%s", e.msg);
                }
                json_decref(j);
        }
        return NULL;
}

static void test_threads(void **state) {
        need_apiserver();
        /* One client, 4 threads, TLS connections and sessions shared. */
        _cleanup_kube_free_ struct mk_kube *k = client_from(cert_kubeconfig);
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
}

static void test_apiserver_crash(void **state) {
        need_apiserver();
        /* Last: restarts the apiserver. The informer rides it out. */
        _cleanup_kube_free_ struct mk_kube *k = admin();
        struct mk_error e = {};
        const char *path = "/api/v1/nodes/migkit-crash";
        create(k, "/api/v1/nodes", "{\"metadata\":{\"name\":\"migkit-crash\",\"labels\":{\"round\":\"0\"}}}");

        struct informer_thread in = {.k = k, .lock = PTHREAD_MUTEX_INITIALIZER, .path = "/api/v1/nodes",
                                     .field_selector = "metadata.name=migkit-crash"};
        mk_buf_init(&in.log, 1u << 16);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, informer_main, &in), 0);
        wait_log(&in, "ADDED migkit-crash=0|");
        const char *args[] = {"restart", envdir, "kube-apiserver", "--kill", NULL};
        assert_int_equal(run_testenv(args, NULL), 0);
        patch_labels(k, path, "{\"round\":\"1\"}", NULL);
        wait_log(&in, "ADDED migkit-crash=0|MODIFIED migkit-crash=1|");
        atomic_store(&in.cancel, true);
        assert_int_equal(pthread_join(t, NULL), 0);
        check_rc(in.result, -ECANCELED, &(struct mk_error) {.msg = ""});
        mk_buf_done(&in.log);
        check_rc(mk_kube_delete(k, path, NULL, &e), 0, &e);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_auth),
                cmocka_unit_test(test_node_crud),
                cmocka_unit_test(test_list_pagination),
                cmocka_unit_test(test_watch_resume),
                cmocka_unit_test(test_gone_and_relist),
                cmocka_unit_test(test_event),
                cmocka_unit_test(test_threads),
                cmocka_unit_test(test_apiserver_crash),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
