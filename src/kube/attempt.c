/* One HTTP request over libcurl, no retries: the headers (credentials
 * included), the easy handle's options (limits, TLS, proxy, callbacks), the
 * body bounded at max_body or fed to a watch, and the failure as an errno
 * with the apiserver's Status message. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

#define STATUS_SNIPPET 200              /* bytes of a non-JSON error body quoted in messages */

void kube_transfer_done(struct transfer *t) {
        mk_buf_done(&t->body);
}

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        struct transfer *t = userdata;
        size_t len = size * n;
        if (t->rq->watch) {
                long status = 0;
                (void) kube_curl.easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
                if (status == 200)
                        return kube_watch_feed(t->rq->watch, data, len) < 0 ? 0 : len;
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
        kube_curl.slist_free_all(*l);
}

/* The request's header list in *ret: JSON wanted, no 100-continue, the
 * credentials, the body's type. The credentials are wiped from the
 * temporary string (curl keeps its own copy). */
static int request_headers(struct mk_kube *k, const struct request *rq, struct curl_slist **ret) {
        _cleanup_(curl_slist_freep) struct curl_slist *headers = NULL;
        _cleanup_free_ char *auth = NULL, *ct = NULL;
        int r = kube_auth_header(k, &auth);
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
                struct curl_slist *l = kube_curl.slist_append(headers, lines[i]);
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
 * body. The first kube_curl.easy_setopt() failure, or CURLE_OK. */
static CURLcode request_setup(struct mk_kube *k, const struct request *rq, struct transfer *t, CURL *c,
                              const char *url, struct curl_slist *headers, char *errbuf) {
        CURLcode cc = CURLE_OK;
#define SET(opt, val)                                                 \
        do {                                                          \
                if (cc == CURLE_OK)                                   \
                        cc = kube_curl.easy_setopt(c, (opt), (val));       \
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

struct held_handle {
        struct mk_kube *k;
        CURL *c;
};

static void held_handle_give(struct held_handle *h) {
        kube_handle_give(h->k, h->c);
}

int kube_attempt(struct mk_kube *k, const struct request *rq, struct transfer *t, bool *ret_retryable,
                 struct mk_error *e) {
        _cleanup_(held_handle_give) struct held_handle held = {k, kube_handle_take(k)};
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
                return mk_error_set(e, kube_curl_to_errno(cc), "%s %s: cannot set up curl: %s", rq->method, rq->path,
                                    kube_curl.easy_strerror(cc));

        uint64_t t0 = kube_now_ms();
        cc = kube_curl.easy_perform(c);
        long status = 0;
        (void) kube_curl.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        t->curl = NULL;
        log_debug_area("k8s", "%s '%s': %s, HTTP %ld, %zu bytes, %" PRIu64 " ms", rq->method, rq->path,
                       kube_curl.easy_strerror(cc), status, t->body.len, kube_now_ms() - t0);

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
                *ret_retryable = kube_curl_retryable(cc, rq->retry);
                return mk_error_set(e, kube_curl_to_errno(cc), "%s %s: %s", rq->method, rq->path,
                                    errbuf[0] ? errbuf : kube_curl.easy_strerror(cc));
        }
        if (status >= 200 && status <= 299)
                return 0;
        *ret_retryable = kube_status_retryable(status, rq->retry);
        return status_error(rq, status, &t->body, e);
}
