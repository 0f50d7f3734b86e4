/* The client object: mk_kube_new() checks the configuration and options,
 * loads libcurl on first use, and sets up the share handle through which
 * threads share TLS sessions and DNS answers (its locks live in struct
 * mk_kube); mk_kube_free(). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"
#include "version.h"

#define MK_KUBE_IDLE_KEEP_MS 20000      /* default: an idle handle unused that long is closed at the next request */

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
        kube_handles_free(k);
        if (k->share)
                kube_curl.share_cleanup(k->share);
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

/* Zero fields of *o take the defaults of kube.h. */
static void options_defaults(struct mk_kube_options *o) {
        o->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : MK_KUBE_CONNECT_TIMEOUT_MS;
        o->request_timeout_ms = o->request_timeout_ms ? o->request_timeout_ms : MK_KUBE_REQUEST_TIMEOUT_MS;
        o->attempts = o->attempts ? o->attempts : MK_KUBE_ATTEMPTS;
        o->backoff_initial_ms = o->backoff_initial_ms ? o->backoff_initial_ms : MK_KUBE_BACKOFF_INITIAL_MS;
        o->backoff_max_ms = MAX(o->backoff_max_ms ? o->backoff_max_ms : MK_KUBE_BACKOFF_MAX_MS, o->backoff_initial_ms);
        o->max_body = o->max_body ? o->max_body : MK_MAX_APISERVER_BODY;
        o->max_event = o->max_event ? o->max_event : MK_MAX_WATCH_EVENT;
        o->idle_keep_ms = o->idle_keep_ms ? o->idle_keep_ms : MK_KUBE_IDLE_KEEP_MS;
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

        const char *no_curl = kube_curl_load();
        if (no_curl)
                return mk_error_set(e, -ELIBACC, "The Kubernetes API client needs libcurl: %s", no_curl);

        options_defaults(&opts);

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

        k->share = kube_curl.share_init();
        if (!k->share)
                return mk_error_set(e, -ENOMEM, "curl_share_init failed");
        if (kube_curl.share_setopt(k->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
            kube_curl.share_setopt(k->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
            kube_curl.share_setopt(k->share, CURLSHOPT_USERDATA, k) != CURLSHE_OK ||
            kube_curl.share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
            kube_curl.share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
                return mk_error_set(e, -EIO, "curl_share_setopt failed");

        k->o = opts;
        k->cfg = *cfg;
        *cfg = (struct mk_kube_config) {};
        k->token_read_ms = kube_now_ms();
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
