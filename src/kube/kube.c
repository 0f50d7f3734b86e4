/* The Kubernetes API client: requests over libcurl, JSON with jansson.
 *
 * Requests run on easy handles kept in a small pool of idle ones: each
 * keeps its own connections, and a handle is used by one thread at a time,
 * so a connection is never in two threads' hands. TLS sessions and DNS
 * answers are shared between threads through a curl share handle whose
 * locks live in struct mk_kube. The connection cache is not shared:
 * libcurl does not support sharing it between concurrent threads
 * (CURLSHOPT_SHARE(3), CURL_LOCK_DATA_CONNECT), and doing so corrupted the
 * heap of a multi-threaded daemon (curl issues 4544, 13840). The only process-wide state is libcurl
 * itself: loaded with dlopen() (libcurl.so.4, or MIGKIT_CURL_LIB) into a
 * table of the functions used here and curl_global_init()'ed, once under
 * pthread_once, by the first mk_kube_new(). A daemon that never talks to the
 * apiserver (the device plugin without --labels node or --dynamic-mig) never
 * maps libcurl and its TLS stack (docs/decisions.md). */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/dl.h"
#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"
#include "version.h"

#if LIBCURL_VERSION_NUM < 0x074d00
#error "libcurl 7.77 or later is needed (CURLOPT_CAINFO_BLOB)"
#endif

#define TOKEN_REFRESH_MS 60000          /* re-read token files this often (client-go: 1 minute) */
#define MAX_URL_BYTES (64u << 10)       /* a request URL we build (selectors, continue tokens) */
#define STATUS_SNIPPET 200              /* bytes of a non-JSON error body quoted in messages */
#define WATCH_MIN_STREAM_MS 1000        /* a stream that ends sooner without events counts as a failure */
#define MK_KUBE_IDLE_HANDLES 8          /* easy handles kept between requests (more threads: new ones) */
#define MK_KUBE_IDLE_KEEP_MS 20000      /* default: an idle handle unused that long is closed at the next request */

struct mk_kube {
        struct mk_kube_config cfg;
        struct mk_kube_options o;
        char *user_agent;
        char *noproxy;
        CURLSH *share;
        pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
        pthread_mutex_t idle_lock;      /* guards idle[] and n_idle */
        struct idle_handle {
                CURL *c;
                uint64_t since_ms;      /* given back then */
        } idle[MK_KUBE_IDLE_HANDLES];   /* easy handles between requests, their connections kept; most recent last */
        size_t n_idle;
        pthread_mutex_t token_lock;     /* guards cfg.token and token_read_ms */
        uint64_t token_read_ms;
};

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* ---- tables ---- */

static const char *const patch_type_table[_MK_KUBE_PATCH_TYPE_MAX] = {
        [MK_KUBE_PATCH_MERGE] = "merge",
        [MK_KUBE_PATCH_STRATEGIC] = "strategic",
        [MK_KUBE_PATCH_JSON] = "json",
};

static const char *const patch_content_type_table[_MK_KUBE_PATCH_TYPE_MAX] = {
        [MK_KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [MK_KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [MK_KUBE_PATCH_JSON] = "application/json-patch+json",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_kube_patch_type, enum mk_kube_patch_type, patch_type_table, _MK_KUBE_PATCH_TYPE_MAX, _MK_KUBE_PATCH_TYPE_INVALID);

const char *mk_kube_patch_content_type(enum mk_kube_patch_type t) {
        return t >= 0 && t < _MK_KUBE_PATCH_TYPE_MAX ? patch_content_type_table[t] : NULL;
}

static const char *const event_type_table[_MK_KUBE_EVENT_TYPE_MAX] = {
        [MK_KUBE_EVENT_ADDED] = "ADDED",
        [MK_KUBE_EVENT_MODIFIED] = "MODIFIED",
        [MK_KUBE_EVENT_DELETED] = "DELETED",
        [MK_KUBE_EVENT_BOOKMARK] = "BOOKMARK",
        [MK_KUBE_EVENT_ERROR] = "ERROR",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_kube_event_type, enum mk_kube_event_type, event_type_table, _MK_KUBE_EVENT_TYPE_MAX, _MK_KUBE_EVENT_TYPE_INVALID);

int mk_kube_status_to_errno(long status, const char *reason) {
        if (reason && streq(reason, "Timeout"))
                return -ETIMEDOUT;
        switch (status) {
        case 400:
        case 422:
                return -EINVAL;
        case 401:
        case 403:
                return -EACCES;
        case 404:
                return -ENOENT;
        case 405:
        case 415:
                return -EOPNOTSUPP;
        case 409:
                return reason && streq(reason, "AlreadyExists") ? -EEXIST : -EBUSY;
        case 410:
                return -ESTALE;
        case 413:
                return -E2BIG;
        case 429:
                return -EAGAIN;
        case 504:
                return -ETIMEDOUT;
        }
        if (status >= 500 && status <= 599)
                return -EIO;
        return -EPROTO;
}

bool mk_kube_error_is_transient(int error) {
        switch (error) {
        case -ECONNREFUSED:
        case -ECONNRESET:
        case -EHOSTUNREACH:
        case -ETIMEDOUT:
        case -EAGAIN:
        case -EIO:
        case -ESTALE:
                return true;
        default:
                return false;
        }
}

/* ---- the client ---- */

#define MK_CURL_DEFAULT_LIB "libcurl.so.4"

/* The libcurl functions this module calls, as curl.h declares them. */
#define MK_CURL_FUNCTIONS(X)                                                                            \
        X(version_info) X(global_init) X(easy_strerror) X(share_init) X(share_setopt) X(share_cleanup) \
        X(easy_init) X(easy_setopt) X(easy_perform) X(easy_getinfo) X(easy_cleanup) X(easy_reset)      \
        X(slist_append) X(slist_free_all)
static struct {
#define X(name) __typeof__(curl_##name) *name;
        MK_CURL_FUNCTIONS(X)
#undef X
} curl;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_init_error[256] = "not loaded"; /* empty once libcurl is loaded and initialised */

/* Loads libcurl and resolves every function before any call. On failure the
 * library stays loaded (dlclose of a TLS stack is not worth the risk) and
 * curl_init_error says why. */
static void curl_init_once(void) {
        const char *path = secure_getenv("MIGKIT_CURL_LIB");
        if (!path || !*path)
                path = MK_CURL_DEFAULT_LIB;
        (void) dlerror();
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
                const char *why = dlerror();
                snprintf(curl_init_error, sizeof(curl_init_error),
                         "%s (libcurl 7.77 or later is needed; MIGKIT_CURL_LIB selects another library)",
                         why ? why : path);
                return;
        }
        static const struct mk_dl_sym table[] = {
#define X(name) {"curl_" #name, offsetof(__typeof__(curl), name)},
                MK_CURL_FUNCTIONS(X)
#undef X
        };
        __typeof__(curl) fn;
        const char *missing = mk_dl_resolve(dl, table, ELEMENTSOF(table), &fn, NULL);
        if (missing) {
                snprintf(curl_init_error, sizeof(curl_init_error), "%s lacks %s: not a libcurl", path, missing);
                return;
        }
        const curl_version_info_data *v = fn.version_info(CURLVERSION_NOW);
        if (!v || v->version_num < 0x074d00) {
                snprintf(curl_init_error, sizeof(curl_init_error),
                         "%s is libcurl %s: 7.77 or later is needed (CURLOPT_CAINFO_BLOB)", path,
                         v && v->version ? v->version : "?");
                return;
        }
        CURLcode cc = fn.global_init(CURL_GLOBAL_DEFAULT);
        if (cc != CURLE_OK) {
                snprintf(curl_init_error, sizeof(curl_init_error), "curl_global_init: %s", fn.easy_strerror(cc));
                return;
        }
        curl = fn;
        curl_init_error[0] = 0;
        log_debug_area("k8s", "Loaded %s (libcurl %s, %s)", path, v->version,
                       v->ssl_version ? v->ssl_version : "no TLS");
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userdata) {
        struct mk_kube *k = userdata;
        if (data >= 0 && data < CURL_LOCK_DATA_LAST)
                pthread_mutex_lock(&k->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *userdata) {
        struct mk_kube *k = userdata;
        if (data >= 0 && data < CURL_LOCK_DATA_LAST)
                pthread_mutex_unlock(&k->share_locks[data]);
}

struct mk_kube *mk_kube_free(struct mk_kube *k) {
        if (!k)
                return NULL;
        /* The handles first: a share in use cannot be cleaned up. */
        for (size_t i = 0; i < k->n_idle; i++)
                curl.easy_cleanup(k->idle[i].c);
        if (k->share)
                curl.share_cleanup(k->share);
        for (size_t i = 0; i < ELEMENTSOF(k->share_locks); i++)
                pthread_mutex_destroy(&k->share_locks[i]);
        pthread_mutex_destroy(&k->token_lock);
        pthread_mutex_destroy(&k->idle_lock);
        mk_kube_config_done(&k->cfg);
        free(k->user_agent);
        free(k->noproxy);
        free(k);
        return NULL;
}

int mk_kube_new(struct mk_kube_config *cfg, const struct mk_kube_options *o, struct mk_kube **ret,
                struct mk_error *e) {
        struct mk_kube_options opts = o ? *o : (struct mk_kube_options) {};
        if (opts.connect_timeout_ms < 0 || opts.request_timeout_ms < 0)
                return mk_error_set(e, -EINVAL, "negative timeout");
        if (!cfg->server || (strncasecmp(cfg->server, "https://", 8) != 0 && strncasecmp(cfg->server, "http://", 7) != 0))
                return mk_error_set(e, -EINVAL, "server '%s': want an https:// (or http://) URL",
                                    cfg->server ? cfg->server : "");
        for (const char *p = cfg->server; *p; p++)
                if ((unsigned char) *p <= ' ' || (unsigned char) *p == 0x7f)
                        return mk_error_set(e, -EINVAL, "server URL holds blanks or control characters");
        if (cfg->token && mk_kube_token_check(cfg->token) < 0)
                return mk_error_set(e, -EINVAL, "the bearer token holds blanks or control characters");
        if (!cfg->cert_pem != !cfg->key_pem)
                return mk_error_set(e, -EINVAL, "a client certificate needs a key and a key a certificate");

        (void) pthread_once(&curl_once, curl_init_once);
        if (curl_init_error[0])
                return mk_error_set(e, -ELIBACC, "The Kubernetes API client needs libcurl: %s", curl_init_error);

        if (opts.connect_timeout_ms == 0)
                opts.connect_timeout_ms = MK_KUBE_CONNECT_TIMEOUT_MS;
        if (opts.request_timeout_ms == 0)
                opts.request_timeout_ms = MK_KUBE_REQUEST_TIMEOUT_MS;
        if (opts.attempts == 0)
                opts.attempts = MK_KUBE_ATTEMPTS;
        if (opts.backoff_initial_ms == 0)
                opts.backoff_initial_ms = MK_KUBE_BACKOFF_INITIAL_MS;
        if (opts.backoff_max_ms == 0)
                opts.backoff_max_ms = MK_KUBE_BACKOFF_MAX_MS;
        if (opts.backoff_max_ms < opts.backoff_initial_ms)
                opts.backoff_max_ms = opts.backoff_initial_ms;
        if (opts.max_body == 0)
                opts.max_body = MK_MAX_APISERVER_BODY;
        if (opts.max_event == 0)
                opts.max_event = MK_MAX_WATCH_EVENT;
        if (opts.idle_keep_ms == 0)
                opts.idle_keep_ms = MK_KUBE_IDLE_KEEP_MS;

        struct mk_kube *k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(k->share_locks); i++)
                pthread_mutex_init(&k->share_locks[i], NULL);
        pthread_mutex_init(&k->token_lock, NULL);
        pthread_mutex_init(&k->idle_lock, NULL);
        _cleanup_kube_free_ struct mk_kube *kk = k;

        if (opts.user_agent)
                k->user_agent = strdup(opts.user_agent);
        else if (asprintf(&k->user_agent, "migkit/%s", MK_VERSION) < 0)
                k->user_agent = NULL;
        if (!k->user_agent)
                return -ENOMEM;
        opts.user_agent = k->user_agent;
        /* As Go's net/http: loopback never goes through a proxy, whatever
         * the environment says; NO_PROXY adds to that. */
        const char *np = secure_getenv("NO_PROXY");
        if (!np || !*np)
                np = secure_getenv("no_proxy");
        if (asprintf(&k->noproxy, "localhost,127.0.0.1,::1%s%s", np && *np ? "," : "", np && *np ? np : "") < 0) {
                k->noproxy = NULL;
                return -ENOMEM;
        }

        k->share = curl.share_init();
        if (!k->share)
                return mk_error_set(e, -ENOMEM, "curl_share_init failed");
        if (curl.share_setopt(k->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
            curl.share_setopt(k->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
            curl.share_setopt(k->share, CURLSHOPT_USERDATA, k) != CURLSHE_OK ||
            curl.share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
            curl.share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
                return mk_error_set(e, -EIO, "curl_share_setopt failed");

        k->o = opts;
        k->cfg = *cfg;
        *cfg = (struct mk_kube_config) {};
        k->token_read_ms = now_ms();
        log_debug_area("k8s", "Kubernetes client for %s (%s)", k->cfg.server,
                       k->cfg.source ? k->cfg.source : "configuration given");
        *ret = TAKE_PTR(kk);
        return 0;
}

const char *mk_kube_namespace(const struct mk_kube *k) {
        return k->cfg.namespace ? k->cfg.namespace : "default";
}

const char *mk_kube_server(const struct mk_kube *k) {
        return k->cfg.server;
}

/* "Authorization: Bearer ..." (malloc'd) or NULL without a token. Token
 * files are re-read every TOKEN_REFRESH_MS; a failed read keeps the old one. */
static int auth_header(struct mk_kube *k, char **ret) {
        int r = 0;
        *ret = NULL;
        pthread_mutex_lock(&k->token_lock);
        if (k->cfg.token_file && now_ms() - k->token_read_ms >= TOKEN_REFRESH_MS) {
                _cleanup_free_ char *data = NULL;
                size_t len;
                if (mk_read_file(k->cfg.token_file, MK_MAX_KUBE_TOKEN_BYTES, &data, &len, NULL) >= 0) {
                        while (len > 0 && strchr(" \t\r\n", data[len - 1]))
                                data[--len] = 0;
                        if (strlen(data) == len && mk_kube_token_check(data) >= 0) {
                                if (k->cfg.token)
                                        explicit_bzero(k->cfg.token, strlen(k->cfg.token));
                                free(k->cfg.token);
                                k->cfg.token = TAKE_PTR(data);
                        } else
                                log_debug_area("k8s", "Token file '%s' holds no usable token, keeping the old one",
                                               k->cfg.token_file);
                } else
                        log_debug_area("k8s", "Cannot re-read token file '%s', keeping the old token",
                                       k->cfg.token_file);
                k->token_read_ms = now_ms();
        }
        if (k->cfg.token && asprintf(ret, "Authorization: Bearer %s", k->cfg.token) < 0) {
                *ret = NULL;
                r = -ENOMEM;
        }
        pthread_mutex_unlock(&k->token_lock);
        return r;
}

/* ---- URLs ---- */

static int check_path(const char *path, struct mk_error *e) {
        if (path[0] != '/')
                return mk_error_set(e, -EINVAL, "request path '%s' does not start with '/'", path);
        for (const char *p = path; *p; p++)
                if ((unsigned char) *p <= ' ' || (unsigned char) *p >= 0x7f || *p == '#')
                        return mk_error_set(e, -EINVAL, "request path holds a blank, '#' or a non-ASCII byte");
        return 0;
}

/* Appends "&name=value" (or "?..." for the first parameter), value
 * percent-encoded except RFC 3986's unreserved characters. */
static int add_param(struct mk_buf *b, const char *name, const char *value) {
        static const char hex[] = "0123456789ABCDEF";
        int r = mk_buf_printf(b, "%c%s=", strchr(mk_buf_str(b), '?') ? '&' : '?', name);
        for (const unsigned char *p = (const unsigned char *) value; r >= 0 && *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("-._~", *p))
                        r = mk_buf_putc(b, (char) *p);
                else {
                        char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
                        r = mk_buf_append(b, esc, 3);
                }
        }
        return r;
}

/* ---- one attempt ---- */

enum retry_policy {
        RETRY_IDEMPOTENT,       /* network errors, 429, 5xx */
        RETRY_UNSENT,           /* only when the request cannot have been processed: connect failures, 429 */
};

struct watch;

struct request {
        const char *method;
        const char *path;               /* with the query */
        const char *content_type;       /* of the body */
        const char *body;
        size_t body_len;
        enum retry_policy retry;
        long timeout_ms;
        struct watch *watch;            /* a streamed watch, or NULL */
        atomic_bool *cancel;
};

struct transfer {
        struct mk_kube *k;
        const struct request *rq;
        CURL *curl;
        struct mk_buf body;
        int body_error;                 /* why on_body refused data: -E2BIG, -ENOMEM */
        unsigned retry_after_s;         /* from a Retry-After header; 0: none */
};

static void transfer_done(struct transfer *t) {
        mk_buf_done(&t->body);
}

struct watch {
        const char *path;
        mk_kube_event_fn fn;
        void *userdata;
        char **resource_version;
        struct mk_buf frame;            /* the event being received, capped at max_event */
        unsigned depth;                 /* of {} and [] in the frame */
        bool in_string, escape;
        int result;                     /* why we ended the transfer: < 0 an error, 1 stopped */
        unsigned events;                /* in the current stream */
        struct mk_error *e;
};

static void watch_done(struct watch *w) {
        mk_buf_done(&w->frame);
}

static int watch_event(struct watch *w) {
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *ev = json_loadb(w->frame.data, w->frame.len, JSON_ALLOW_NUL, &jerr);
        if (!ev)
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: an event is not JSON: %s", w->path, jerr.text);
        const char *type = json_string_value(json_object_get(ev, "type"));
        json_t *obj = json_object_get(ev, "object");
        enum mk_kube_event_type t = mk_kube_event_type_from_string(type);
        if (t < 0)
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: unknown event type '%s'", w->path,
                                    type ? type : "(none)");
        if (!json_is_object(obj))
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: %s event without an object", w->path, type);
        if (t == MK_KUBE_EVENT_ERROR) {
                long code = (long) json_integer_value(json_object_get(obj, "code"));
                const char *reason = json_string_value(json_object_get(obj, "reason"));
                const char *msg = json_string_value(json_object_get(obj, "message"));
                int r = code > 0 ? mk_kube_status_to_errno(code, reason) : -EIO;
                return mk_error_set(w->e, r, "WATCH %s: %s (ERROR event, code %ld%s%s)", w->path,
                                    msg ? msg : "no message", code, reason ? " " : "", reason ? reason : "");
        }
        const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        int r = w->fn(t, obj, w->userdata);
        if (r < 0)
                return mk_error_set(w->e, r, "WATCH %s: the %s event was not handled: %s", w->path, type,
                                    strerror(-r));
        /* The event is consumed: a resumed watch starts after it. */
        if (rv && *rv) {
                char *copy = strdup(rv);
                if (!copy)
                        return -ENOMEM;
                free(*w->resource_version);
                *w->resource_version = copy;
        }
        w->events++;
        return r > 0 ? 1 : 0;
}

/* Splits the stream into top-level JSON values (the apiserver writes one
 * per line, but chunks may end anywhere) and handles each. Returns 0, or
 * sets w->result and returns -1 to end the transfer. */
static int watch_feed(struct watch *w, const char *data, size_t len) {
        size_t start = 0;
        int r;
        for (size_t i = 0; i < len; i++) {
                char ch = data[i];
                if (w->depth == 0) {
                        if (strchr(" \t\r\n", ch)) {
                                start = i + 1;
                                continue;
                        }
                        if (ch != '{') {
                                w->result = mk_error_set(w->e, -EBADMSG, "WATCH %s: garbage in the stream",
                                                         w->path);
                                return -1;
                        }
                        start = i;
                        w->depth = 1;
                        continue;
                }
                if (w->in_string) {
                        if (w->escape)
                                w->escape = false;
                        else if (ch == '\\')
                                w->escape = true;
                        else if (ch == '"')
                                w->in_string = false;
                        continue;
                }
                if (ch == '"')
                        w->in_string = true;
                else if (ch == '{' || ch == '[')
                        w->depth++;
                else if (ch == '}' || ch == ']')
                        w->depth--;
                if (w->depth > 0)
                        continue;
                r = mk_buf_append(&w->frame, data + start, i + 1 - start);
                if (r >= 0)
                        r = watch_event(w);
                mk_buf_reset(&w->frame);
                start = i + 1;
                if (r == -E2BIG)
                        goto too_big;
                if (r != 0) {
                        w->result = r;
                        return -1;
                }
        }
        if (w->depth > 0) {
                r = mk_buf_append(&w->frame, data + start, len - start);
                if (r == -E2BIG)
                        goto too_big;
                if (r < 0) {
                        w->result = r;
                        return -1;
                }
        }
        return 0;
too_big:
        w->result = mk_error_set(w->e, -E2BIG, "WATCH %s: an event is larger than %zu bytes", w->path,
                                 w->frame.cap);
        return -1;
}

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        struct transfer *t = userdata;
        size_t len = size * n;
        if (t->rq->watch) {
                long status = 0;
                (void) curl.easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
                if (status == 200)
                        return watch_feed(t->rq->watch, data, len) < 0 ? 0 : len;
        }
        int r = mk_buf_append(&t->body, data, len);
        if (r < 0) {
                t->body_error = r;
                return 0;
        }
        return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata) {
        struct transfer *t = userdata;
        size_t len = size * n;
        static const char name[] = "retry-after:";
        if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
                unsigned v = 0;
                size_t i = sizeof(name) - 1;
                while (i < len && data[i] == ' ')
                        i++;
                for (; i < len && data[i] >= '0' && data[i] <= '9' && v < 100000; i++)
                        v = v * 10 + (unsigned) (data[i] - '0');
                t->retry_after_s = v;
        }
        return len;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
        struct transfer *t = userdata;
        return t->rq->cancel && atomic_load(t->rq->cancel) ? 1 : 0;
}

static int curl_to_errno(CURLcode c) {
        switch (c) {
        case CURLE_OK:
                return 0;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
                return -ECONNRESET;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_ABORTED_BY_CALLBACK:
                return -ECANCELED;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
                return -EINVAL;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_USE_SSL_FAILED:
                return -EPROTO;
        default:
                return -EIO;
        }
}

static bool curl_retryable(CURLcode c, enum retry_policy p) {
        switch (c) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return true; /* nothing was sent */
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR: /* also an apiserver shutting down mid-handshake */
                return p == RETRY_IDEMPOTENT;
        default:
                return false;
        }
}

static bool status_retryable(long status, enum retry_policy p) {
        if (status == 429)
                return true; /* rejected before processing (max-in-flight, priority and fairness) */
        return p == RETRY_IDEMPOTENT && (status == 500 || status == 502 || status == 503 || status == 504);
}

/* The apiserver's Status message for a failed request, or a snippet of a
 * non-JSON body, into e; returns the mapped errno. */
static int status_error(const struct request *rq, long status, const struct mk_buf *body, struct mk_error *e) {
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *j = body->len > 0 ? json_loadb(body->data, body->len, JSON_ALLOW_NUL, &jerr) : NULL;
        const char *reason = json_string_value(json_object_get(j, "reason"));
        const char *msg = json_string_value(json_object_get(j, "message"));
        int r = mk_kube_status_to_errno(status, reason);
        if (msg)
                return mk_error_set(e, r, "%s %s: %s (HTTP %ld%s%s)", rq->method, rq->path, msg, status,
                                    reason ? " " : "", reason ? reason : "");
        char snippet[STATUS_SNIPPET + 1];
        size_t n = 0;
        for (size_t i = 0; i < body->len && n < STATUS_SNIPPET; i++) {
                char ch = body->data[i];
                snippet[n++] = (ch >= ' ' && ch < 0x7f) ? ch : ' ';
        }
        snippet[n] = 0;
        return mk_error_set(e, r, "%s %s: HTTP %ld%s%s", rq->method, rq->path, status, n ? ": " : "", snippet);
}

static inline void curl_slist_freep(struct curl_slist **l) {
        curl.slist_free_all(*l);
}

/* The request's header list in *ret: JSON wanted, no 100-continue, the
 * credentials, the body's type. The credentials are wiped from the
 * temporary string (curl keeps its own copy). */
static int request_headers(struct mk_kube *k, const struct request *rq, struct curl_slist **ret) {
        _cleanup_(curl_slist_freep) struct curl_slist *headers = NULL;
        _cleanup_free_ char *auth = NULL, *ct = NULL;
        int r = auth_header(k, &auth);
        if (r < 0)
                return r;
        if (rq->content_type && asprintf(&ct, "Content-Type: %s", rq->content_type) < 0) {
                ct = NULL;
                r = -ENOMEM;
        }
        const char *const lines[] = {"Accept: application/json", "Expect:" /* no 100-continue round trip */, auth,
                                     ct};
        for (size_t i = 0; i < ELEMENTSOF(lines) && r >= 0; i++) {
                if (!lines[i])
                        continue;
                struct curl_slist *l = curl.slist_append(headers, lines[i]);
                if (!l)
                        r = -ENOMEM;
                else
                        headers = l;
        }
        if (auth)
                explicit_bzero(auth, strlen(auth));
        if (r < 0)
                return r;
        *ret = TAKE_PTR(headers);
        return 0;
}

/* Sets up `c` for `rq`: URL, limits, TLS, callbacks into `t`, method and
 * body. The first curl.easy_setopt() failure, or CURLE_OK. */
static CURLcode request_setup(struct mk_kube *k, const struct request *rq, struct transfer *t, CURL *c,
                              const char *url, struct curl_slist *headers, char *errbuf) {
        CURLcode cc = CURLE_OK;
#define SET(opt, val)                                                 \
        do {                                                          \
                if (cc == CURLE_OK)                                   \
                        cc = curl.easy_setopt(c, (opt), (val));       \
        } while (0)
        SET(CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
        SET(CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_ERRORBUFFER, errbuf);
        SET(CURLOPT_SHARE, k->share);
        SET(CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
        SET(CURLOPT_FOLLOWLOCATION, 0L);
        SET(CURLOPT_NOPROXY, k->noproxy);
        SET(CURLOPT_CONNECTTIMEOUT_MS, (long) k->o.connect_timeout_ms);
        SET(CURLOPT_TIMEOUT_MS, rq->timeout_ms);
        SET(CURLOPT_TCP_KEEPALIVE, 1L);
        SET(CURLOPT_TCP_KEEPIDLE, 30L);
        SET(CURLOPT_TCP_KEEPINTVL, 10L);
        SET(CURLOPT_USERAGENT, k->user_agent);
        SET(CURLOPT_HTTPHEADER, headers);
        SET(CURLOPT_WRITEFUNCTION, on_body);
        SET(CURLOPT_WRITEDATA, t);
        SET(CURLOPT_HEADERFUNCTION, on_header);
        SET(CURLOPT_HEADERDATA, t);
        if (rq->cancel) {
                SET(CURLOPT_XFERINFOFUNCTION, on_progress);
                SET(CURLOPT_XFERINFODATA, t);
                SET(CURLOPT_NOPROGRESS, 0L);
        }
        if (k->cfg.insecure_skip_tls_verify) {
                SET(CURLOPT_SSL_VERIFYPEER, 0L);
                SET(CURLOPT_SSL_VERIFYHOST, 0L);
        }
        if (k->cfg.ca_pem) {
                /* This CA alone: drop curl's default bundle and directory. */
                struct curl_blob blob = {.data = k->cfg.ca_pem, .len = k->cfg.ca_pem_len, .flags = CURL_BLOB_NOCOPY};
                SET(CURLOPT_CAINFO_BLOB, &blob);
                SET(CURLOPT_CAINFO, (char *) NULL);
                SET(CURLOPT_CAPATH, (char *) NULL);
        }
        if (k->cfg.cert_pem) {
                struct curl_blob cert = {.data = k->cfg.cert_pem, .len = k->cfg.cert_pem_len, .flags = CURL_BLOB_NOCOPY};
                struct curl_blob key = {.data = k->cfg.key_pem, .len = k->cfg.key_pem_len, .flags = CURL_BLOB_NOCOPY};
                SET(CURLOPT_SSLCERT_BLOB, &cert);
                SET(CURLOPT_SSLCERTTYPE, "PEM");
                SET(CURLOPT_SSLKEY_BLOB, &key);
                SET(CURLOPT_SSLKEYTYPE, "PEM");
        }
        if (streq(rq->method, "GET"))
                SET(CURLOPT_HTTPGET, 1L);
        else if (!streq(rq->method, "POST"))
                SET(CURLOPT_CUSTOMREQUEST, rq->method);
        if (rq->body) {
                SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) rq->body_len);
                SET(CURLOPT_POSTFIELDS, rq->body);
        }
#undef SET
        return cc;
}

/* Takes the pool's handles idle for over o.idle_keep_ms (the oldest
 * first, at the bottom) into stale[], so that the pool, and the
 * connections it holds open, shrinks back after a burst of concurrent
 * requests. Called with idle_lock held; returns how many. */
static size_t idle_expire(struct mk_kube *k, uint64_t now, CURL **stale) {
        size_t n = 0;
        while (n < k->n_idle && now - k->idle[n].since_ms > k->o.idle_keep_ms) {
                stale[n] = k->idle[n].c;
                n++;
        }
        memmove(k->idle, k->idle + n, (k->n_idle - n) * sizeof(k->idle[0]));
        k->n_idle -= n;
        return n;
}

static void cleanup_all(CURL **c, size_t n) {
        for (size_t i = 0; i < n; i++)
                curl.easy_cleanup(c[i]);
}

/* An easy handle for one attempt: the pool's most recently used one (its
 * live connections kept), else a new one. */
static CURL *handle_take(struct mk_kube *k) {
        CURL *c = NULL, *stale[MK_KUBE_IDLE_HANDLES];
        uint64_t now = now_ms();
        pthread_mutex_lock(&k->idle_lock);
        size_t n = idle_expire(k, now, stale);
        if (k->n_idle > 0)
                c = k->idle[--k->n_idle].c;
        pthread_mutex_unlock(&k->idle_lock);
        cleanup_all(stale, n);
        return c ? c : curl.easy_init();
}

/* Gives a handle back to the pool, its options reset (no pointer into the
 * finished attempt's stack or headers stays set), or cleans it up when the
 * pool is full. */
static void handle_give(struct mk_kube *k, CURL *c) {
        if (!c)
                return;
        curl.easy_reset(c);
        CURL *stale[MK_KUBE_IDLE_HANDLES];
        uint64_t now = now_ms();
        pthread_mutex_lock(&k->idle_lock);
        size_t n = idle_expire(k, now, stale);
        bool kept = k->n_idle < ELEMENTSOF(k->idle);
        if (kept)
                k->idle[k->n_idle++] = (struct idle_handle) {c, now};
        pthread_mutex_unlock(&k->idle_lock);
        cleanup_all(stale, n);
        if (!kept)
                curl.easy_cleanup(c);
}

struct held_handle {
        struct mk_kube *k;
        CURL *c;
};

static void held_handle_give(struct held_handle *h) {
        handle_give(h->k, h->c);
}

/* Runs one attempt. 0 on a 2xx answer (t->body holds it); otherwise a
 * negative errno with e set and *ret_retryable telling whether another try
 * may succeed. For watches, 1 when the callback stopped the watch. */
static int attempt(struct mk_kube *k, const struct request *rq, struct transfer *t, bool *ret_retryable,
                   struct mk_error *e) {
        _cleanup_(held_handle_give) struct held_handle held = {k, handle_take(k)};
        CURL *c = held.c;
        _cleanup_(curl_slist_freep) struct curl_slist *headers = NULL;
        _cleanup_free_ char *url = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";

        *ret_retryable = false;
        if (!c)
                return mk_error_set(e, -ENOMEM, "curl_easy_init failed");
        t->curl = c;
        mk_buf_reset(&t->body);
        t->body_error = 0;
        t->retry_after_s = 0;
        if (asprintf(&url, "%s%s", k->cfg.server, rq->path) < 0)
                return -ENOMEM;
        int r = request_headers(k, rq, &headers);
        if (r < 0)
                return r;
        CURLcode cc = request_setup(k, rq, t, c, url, headers, errbuf);
        if (cc != CURLE_OK)
                return mk_error_set(e, curl_to_errno(cc), "%s %s: cannot set up curl: %s", rq->method, rq->path,
                                    curl.easy_strerror(cc));

        uint64_t t0 = now_ms();
        cc = curl.easy_perform(c);
        long status = 0;
        (void) curl.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        t->curl = NULL;
        log_debug_area("k8s", "%s '%s': %s, HTTP %ld, %zu bytes, %" PRIu64 " ms", rq->method, rq->path,
                       curl.easy_strerror(cc), status, t->body.len, now_ms() - t0);

        if (rq->watch && rq->watch->result != 0)
                return rq->watch->result;
        if (t->body_error == -E2BIG)
                return mk_error_set(e, -E2BIG, "%s %s: the response is larger than %zu bytes", rq->method, rq->path,
                                    t->body.cap);
        if (t->body_error < 0)
                return mk_error_set(e, t->body_error, "%s %s: cannot keep the response", rq->method, rq->path);
        if (cc == CURLE_ABORTED_BY_CALLBACK)
                return mk_error_set(e, -ECANCELED, "%s %s: cancelled", rq->method, rq->path);
        if (cc != CURLE_OK) {
                *ret_retryable = curl_retryable(cc, rq->retry);
                return mk_error_set(e, curl_to_errno(cc), "%s %s: %s", rq->method, rq->path,
                                    errbuf[0] ? errbuf : curl.easy_strerror(cc));
        }
        if (status >= 200 && status <= 299)
                return 0;
        *ret_retryable = status_retryable(status, rq->retry);
        return status_error(rq, status, &t->body, e);
}

/* ---- retries ---- */

static uint64_t next_random(uint64_t *state) {
        /* splitmix64: per-request state, no shared generator. */
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static uint64_t random_seed(const void *p) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_nsec ^ ((uint64_t) ts.tv_sec << 32) ^ (uint64_t) (uintptr_t) p ^
               (uint64_t) pthread_self();
}

/* Exponential backoff with "equal jitter": half the step fixed, half random. */
static unsigned backoff_ms(const struct mk_kube *k, unsigned failures, unsigned retry_after_s, uint64_t *rnd) {
        if (*rnd == 0)
                *rnd = random_seed(rnd);
        uint64_t d = k->o.backoff_initial_ms;
        for (unsigned i = 1; i < failures && d < k->o.backoff_max_ms; i++)
                d *= 2;
        if (d > k->o.backoff_max_ms)
                d = k->o.backoff_max_ms;
        d = d / 2 + next_random(rnd) % (d / 2 + 1);
        if (retry_after_s > 0 && (uint64_t) retry_after_s * 1000 > d)
                d = MIN((uint64_t) retry_after_s * 1000, (uint64_t) k->o.backoff_max_ms);
        return (unsigned) d;
}

unsigned mk_kube_backoff_ms(const struct mk_kube *k, unsigned failures, uint64_t *rnd) {
        return backoff_ms(k, failures, 0, rnd);
}

int mk_kube_sleep_ms(unsigned ms, atomic_bool *cancel) {
        while (ms > 0) {
                if (cancel && atomic_load(cancel))
                        return -ECANCELED;
                unsigned s = MIN(ms, 100u);
                struct timespec ts = {.tv_sec = 0, .tv_nsec = (long) s * 1000000};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
                ms -= s;
        }
        return cancel && atomic_load(cancel) ? -ECANCELED : 0;
}

/* Appends " (after N attempts)" to the message. */
static void note_attempts(struct mk_error *e, unsigned n) {
        if (!e || n < 2)
                return;
        char msg[MK_ERROR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%s", e->msg);
        size_t len = strlen(msg);
        snprintf(msg + len, sizeof(msg) - len, " (after %u attempts)", n);
        snprintf(e->msg, sizeof(e->msg), "%s", msg);
}

/* A request with retries; on success the parsed body (when ret). */
static int request(struct mk_kube *k, const struct request *rq, json_t **ret, struct mk_error *e) {
        _cleanup_(transfer_done) struct transfer t = {.k = k, .rq = rq};
        uint64_t rnd = random_seed(&t);
        unsigned n;
        int r;

        r = check_path(rq->path, e);
        if (r < 0)
                return r;
        mk_buf_init(&t.body, k->o.max_body);
        for (n = 1;; n++) {
                bool retryable;
                r = attempt(k, rq, &t, &retryable, e);
                if (r >= 0 || !retryable || n >= k->o.attempts)
                        break;
                unsigned d = backoff_ms(k, n, t.retry_after_s, &rnd);
                log_debug_area("k8s", "%s '%s' failed (%s), retrying in %u ms (attempt %u of %u)", rq->method,
                               rq->path, strerror(-r), d, n + 1, k->o.attempts);
                int s = mk_kube_sleep_ms(d, rq->cancel);
                if (s < 0)
                        return mk_error_set(e, s, "%s %s: cancelled", rq->method, rq->path);
        }
        if (r < 0) {
                note_attempts(e, n);
                return r;
        }
        if (!ret)
                return 0;
        if (t.body.len == 0)
                return mk_error_set(e, -EBADMSG, "%s %s: empty response", rq->method, rq->path);
        json_error_t jerr;
        json_t *j = json_loadb(t.body.data, t.body.len, JSON_ALLOW_NUL, &jerr);
        if (!j)
                return mk_error_set(e, -EBADMSG, "%s %s: the response is not JSON: %s (at byte %d)", rq->method,
                                    rq->path, jerr.text, jerr.position);
        *ret = j;
        return 0;
}

/* ---- verbs ---- */

int mk_kube_get(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) {
        struct request rq = {.method = "GET", .path = path, .timeout_ms = k->o.request_timeout_ms};
        return request(k, &rq, ret, e);
}

static int send_body(struct mk_kube *k, const char *method, const char *path, const char *content_type,
                     enum retry_policy retry, const json_t *body, json_t **ret, struct mk_error *e) {
        _cleanup_free_ char *data = json_dumps(body, JSON_COMPACT);
        if (!data)
                return mk_error_set(e, -ENOMEM, "%s %s: cannot serialise the body", method, path);
        struct request rq = {
                .method = method,
                .path = path,
                .content_type = content_type,
                .body = data,
                .body_len = strlen(data),
                .retry = retry,
                .timeout_ms = k->o.request_timeout_ms,
        };
        return request(k, &rq, ret, e);
}

int mk_kube_post(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e) {
        return send_body(k, "POST", path, "application/json", RETRY_UNSENT, body, ret, e);
}

int mk_kube_put(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e) {
        return send_body(k, "PUT", path, "application/json", RETRY_IDEMPOTENT, body, ret, e);
}

int mk_kube_patch(struct mk_kube *k, const char *path, enum mk_kube_patch_type type, const json_t *patch,
                  json_t **ret, struct mk_error *e) {
        const char *ct = mk_kube_patch_content_type(type);
        if (!ct)
                return mk_error_set(e, -EINVAL, "PATCH %s: unknown patch type %d", path, (int) type);
        return send_body(k, "PATCH", path, ct, type == MK_KUBE_PATCH_JSON ? RETRY_UNSENT : RETRY_IDEMPOTENT, patch,
                         ret, e);
}

int mk_kube_patch_metadata(struct mk_kube *k, const char *path, const char *field, const json_t *changes,
                           json_t **ret, struct mk_error *e) {
        if (json_typeof(changes) != JSON_OBJECT)
                return mk_error_set(e, -EINVAL, "PATCH %s: the %s changes must be a JSON object", path, field);
        _cleanup_(json_decrefp) json_t *patch = json_pack("{s:{s:O}}", "metadata", field, changes);
        if (!patch)
                return -ENOMEM;
        return mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, patch, ret, e);
}

int mk_kube_delete(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) {
        struct request rq = {.method = "DELETE", .path = path, .timeout_ms = k->o.request_timeout_ms};
        return request(k, &rq, ret, e);
}

/* Appends the label and field selectors that are set (NULL or "": none). */
static int add_selectors(struct mk_buf *b, const char *label_selector, const char *field_selector) {
        int r = 0;
        if (label_selector && *label_selector)
                r = add_param(b, "labelSelector", label_selector);
        if (r >= 0 && field_selector && *field_selector)
                r = add_param(b, "fieldSelector", field_selector);
        return r;
}

/* ---- LIST ---- */

typedef int (*page_fn)(json_t *page, void *userdata);

static int list_pages(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, page_fn fn,
                      void *userdata, struct mk_error *e) {
        static const struct mk_kube_list_opts none = {};
        _cleanup_free_ char *cont = NULL;
        int r;

        if (!o)
                o = &none;
        r = check_path(path, e);
        if (r < 0)
                return r;
        for (unsigned page = 0;; page++) {
                if (page >= MK_MAX_LIST_PAGES)
                        return mk_error_set(e, -E2BIG, "LIST %s: more than %u pages", path, MK_MAX_LIST_PAGES);
                _cleanup_buf_done_ struct mk_buf u;
                mk_buf_init(&u, MAX_URL_BYTES);
                r = mk_buf_puts(&u, path);
                if (r >= 0)
                        r = mk_buf_printf(&u, "%climit=%u", strchr(path, '?') ? '&' : '?',
                                          o->limit ? o->limit : MK_KUBE_LIST_PAGE);
                if (r >= 0)
                        r = add_selectors(&u, o->label_selector, o->field_selector);
                if (r >= 0 && page == 0 && o->resource_version)
                        r = add_param(&u, "resourceVersion", o->resource_version);
                if (r >= 0 && cont)
                        r = add_param(&u, "continue", cont);
                if (r < 0)
                        return mk_error_set(e, r, "LIST %s: the request URL is too long", path);

                _cleanup_(json_decrefp) json_t *j = NULL;
                struct request rq = {.method = "GET", .path = mk_buf_str(&u), .timeout_ms = k->o.request_timeout_ms};
                r = request(k, &rq, &j, e);
                if (r < 0)
                        return r;
                json_t *items = json_object_get(j, "items");
                if (!json_is_object(j) || !(json_is_array(items) || json_is_null(items) || !items))
                        return mk_error_set(e, -EBADMSG, "LIST %s: the answer is not a list", path);
                const char *next = json_string_value(json_object_get(json_object_get(j, "metadata"), "continue"));
                char *next_copy = next && *next ? strdup(next) : NULL;
                if (next && *next && !next_copy)
                        return -ENOMEM;
                free(cont);
                cont = next_copy;
                r = fn(j, userdata);
                if (r != 0)
                        return r;
                if (!cont)
                        return 0;
        }
}

struct each {
        mk_kube_item_fn fn;
        void *userdata;
        char *resource_version;
        bool fn_failed;
};

static int each_page(json_t *page, void *userdata) {
        struct each *x = userdata;
        if (!x->resource_version) {
                const char *rv = json_string_value(json_object_get(json_object_get(page, "metadata"), "resourceVersion"));
                x->resource_version = strdup(rv ? rv : "");
                if (!x->resource_version)
                        return -ENOMEM;
        }
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(page, "items"), i, item) {
                int r = x->fn(item, x->userdata);
                if (r < 0)
                        x->fn_failed = true;
                if (r != 0)
                        return r;
        }
        return 0;
}

int mk_kube_list_each(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, mk_kube_item_fn fn,
                      void *userdata, char **ret_resource_version, struct mk_error *e) {
        struct each x = {.fn = fn, .userdata = userdata};
        _cleanup_free_ char *rv = NULL;
        int r = list_pages(k, path, o, each_page, &x, e);
        rv = x.resource_version;
        if (r < 0) {
                if (x.fn_failed)
                        mk_error_set(e, r, "LIST %s: an item was not handled: %s", path, strerror(-r));
                return r;
        }
        if (ret_resource_version)
                *ret_resource_version = TAKE_PTR(rv);
        return 0;
}

static int all_page(json_t *page, void *userdata) {
        json_t **list = userdata;
        json_t *items = json_object_get(page, "items");
        if (!*list) {
                *list = json_incref(page);
                if (!json_is_array(items)) {
                        json_t *a = json_array();
                        if (!a || json_object_set_new(*list, "items", a) < 0)
                                return -ENOMEM;
                }
                return 0;
        }
        if (json_is_array(items) && json_array_extend(json_object_get(*list, "items"), items) < 0)
                return -ENOMEM;
        return 0;
}

int mk_kube_list(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, json_t **ret,
                 struct mk_error *e) {
        _cleanup_(json_decrefp) json_t *list = NULL;
        int r = list_pages(k, path, o, all_page, &list, e);
        if (r < 0)
                return r;
        json_t *md = json_object_get(list, "metadata");
        if (json_is_object(md))
                (void) json_object_del(md, "continue");
        *ret = TAKE_PTR(list);
        return 0;
}

/* ---- WATCH ---- */

int mk_kube_watch(struct mk_kube *k, const char *path, const struct mk_kube_watch_opts *o, char **resource_version,
                  mk_kube_event_fn fn, void *userdata, struct mk_error *e) {
        static const struct mk_kube_watch_opts none = {};
        uint64_t rnd = random_seed(path);
        unsigned failures = 0;
        int r;

        if (!o)
                o = &none;
        r = check_path(path, e);
        if (r < 0)
                return r;

        _cleanup_(watch_done) struct watch w = {
                .path = path, .fn = fn, .userdata = userdata, .resource_version = resource_version, .e = e};
        _cleanup_(transfer_done) struct transfer t = {.k = k};
        mk_buf_init(&w.frame, k->o.max_event);
        mk_buf_init(&t.body, k->o.max_body);

        for (;;) {
                if (o->cancel && atomic_load(o->cancel))
                        return mk_error_set(e, -ECANCELED, "WATCH %s: cancelled", path);
                /* client-go spreads its watches over 5-10 minutes the same way. */
                unsigned timeout = o->timeout_seconds ? o->timeout_seconds : 300 + (unsigned) (next_random(&rnd) % 300);

                _cleanup_buf_done_ struct mk_buf u;
                mk_buf_init(&u, MAX_URL_BYTES);
                r = mk_buf_printf(&u, "%s%cwatch=1", path, strchr(path, '?') ? '&' : '?');
                if (r >= 0 && *resource_version && **resource_version)
                        r = add_param(&u, "resourceVersion", *resource_version);
                if (r >= 0 && o->allow_bookmarks)
                        r = mk_buf_puts(&u, "&allowWatchBookmarks=true");
                if (r >= 0)
                        r = mk_buf_printf(&u, "&timeoutSeconds=%u", timeout);
                if (r >= 0)
                        r = add_selectors(&u, o->label_selector, o->field_selector);
                if (r < 0)
                        return mk_error_set(e, r, "WATCH %s: the request URL is too long", path);

                struct request rq = {
                        .method = "GET",
                        .path = mk_buf_str(&u),
                        .retry = RETRY_IDEMPOTENT,
                        .timeout_ms = ((long) timeout + MK_KUBE_WATCH_SLACK_S) * 1000,
                        .watch = &w,
                        .cancel = o->cancel,
                };
                t.rq = &rq;
                w.result = 0;
                w.events = 0;
                w.depth = 0;
                w.in_string = w.escape = false;
                mk_buf_reset(&w.frame);

                bool retryable;
                uint64_t t0 = now_ms();
                r = attempt(k, &rq, &t, &retryable, e);
                if (r == 1)
                        return 0; /* stopped by the callback */
                if (r == 0 && w.depth > 0) {
                        r = mk_error_set(e, -ECONNRESET, "WATCH %s: the stream ended inside an event", path);
                        retryable = true;
                }
                if (r == 0) {
                        if (o->once)
                                return 0;
                        if (w.events > 0 || now_ms() - t0 >= WATCH_MIN_STREAM_MS) {
                                failures = 0;
                                if (o->progressed)
                                        *o->progressed = true;
                                continue; /* the server's timeout: resume */
                        }
                        r = mk_error_set(e, -ECONNRESET, "WATCH %s: the stream ended at once", path);
                        retryable = true;
                }
                if (r == -ECANCELED)
                        return r;
                if (!retryable)
                        return r;
                if (w.events > 0) {
                        failures = 0; /* it broke after making progress */
                        if (o->progressed)
                                *o->progressed = true;
                }
                failures++;
                if (failures >= k->o.attempts) {
                        note_attempts(e, failures);
                        return r;
                }
                unsigned d = backoff_ms(k, failures, t.retry_after_s, &rnd);
                log_debug_area("k8s", "WATCH '%s' ended (%s), resuming from '%s' in %u ms", path, strerror(-r),
                               *resource_version ? *resource_version : "", d);
                r = mk_kube_sleep_ms(d, o->cancel);
                if (r < 0)
                        return mk_error_set(e, r, "WATCH %s: cancelled", path);
        }
}
