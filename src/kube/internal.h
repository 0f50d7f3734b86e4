/* Internals of the Kubernetes API client (kube.h): what its files share.
 * Not for use outside src/kube/; other modules include kube.h.
 *
 * Requests run on curl easy handles kept in a small pool of idle ones
 * (handles.c): each keeps its own connections, and a handle is used by one
 * thread at a time, so a connection is never in two threads' hands. TLS
 * sessions and DNS answers are shared between threads through a curl share
 * handle whose locks live in struct mk_kube (client.c). libcurl itself is
 * the only process-wide state, loaded on first use (libcurl.c).
 *
 * Layers (each file calls only files listed before it, never one after it,
 * so no call circle can form; check on the object files with
 * `sim/cuda/check-layers.py src/kube <build>/CMakeFiles/migkit-daemons.dir/src/kube`,
 * or by reading `nm -u` of each object):
 *   0  json.c      checked JSON readers (bounded load, known keys, ranges)
 *      object.c    reading objects: metadata, quantities, pod requests, Events
 *      kubeconfig.c  where to connect and how to authenticate (kubeconfig,
 *                  in-cluster service account), token checks
 *      errors.c    HTTP status and curl codes to errno, which are worth a retry
 *      url.c       request path checks, query parameters and selectors
 *      libcurl.c   libcurl loaded with dlopen() into the kube_curl table
 *   1  credentials.c  the bearer token, re-read from its file
 *      handles.c   the pool of idle easy handles
 *      client.c    mk_kube_new/free: options, proxy, the share handle
 *      watch-frame.c  a watch stream cut into events, each handed to the callback
 *   2  attempt.c   one HTTP request over libcurl: headers, options, body, errors
 *   3  retry.c     backoff with jitter, cancellable sleep, the retry loop
 *   4  verbs.c     GET, POST, PUT, PATCH, DELETE
 *      list.c      LIST, page by page
 *      watch.c     WATCH, resumed from the last version seen
 *   5  informer.c  LIST then WATCH into a cache, on the public API only
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/dynbuf.h"
#include "kube/kube.h"
#include "kube/kubeconfig.h"

#if LIBCURL_VERSION_NUM < 0x074d00
#error "libcurl 7.77 or later is needed (CURLOPT_CAINFO_BLOB)"
#endif

#define MAX_URL_BYTES (64u << 10)       /* a request URL we build (selectors, continue tokens) */
#define MK_KUBE_IDLE_HANDLES 8          /* easy handles kept between requests (more threads: new ones) */

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

static inline uint64_t kube_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* ---- errors.c ---- */

enum retry_policy {
        RETRY_IDEMPOTENT,       /* network errors, 429, 5xx */
        RETRY_UNSENT,           /* only when the request cannot have been processed: connect failures, 429 */
};

int kube_curl_to_errno(CURLcode c);
bool kube_curl_retryable(CURLcode c, enum retry_policy p);
bool kube_status_retryable(long status, enum retry_policy p);

/* ---- url.c ---- */

/* 0, or -EINVAL with e set for a path that does not start with '/' or
 * holds a blank, '#' or a non-ASCII byte. */
int kube_check_path(const char *path, struct mk_error *e);
/* Appends "&name=value" (or "?..." for the first parameter), value
 * percent-encoded except RFC 3986's unreserved characters. */
int kube_add_param(struct mk_buf *b, const char *name, const char *value);
/* Appends the label and field selectors that are set (NULL or "": none). */
int kube_add_selectors(struct mk_buf *b, const char *label_selector, const char *field_selector);

/* ---- libcurl.c ---- */

/* The libcurl functions this module calls, as curl.h declares them. */
#define MK_CURL_FUNCTIONS(X)                                                                            \
        X(version_info) X(global_init) X(easy_strerror) X(share_init) X(share_setopt) X(share_cleanup) \
        X(easy_init) X(easy_setopt) X(easy_perform) X(easy_getinfo) X(easy_cleanup) X(easy_reset)      \
        X(slist_append) X(slist_free_all)
struct kube_curl_functions {
#define X(name) __typeof__(curl_##name) *name;
        MK_CURL_FUNCTIONS(X)
#undef X
};
/* Filled by kube_curl_load(); every pointer set once it returned NULL. */
extern struct kube_curl_functions kube_curl;

/* Loads and initialises libcurl once per process (later calls return the
 * first one's answer): NULL when kube_curl is ready, else why not. */
const char *kube_curl_load(void);

/* ---- credentials.c ---- */

/* "Authorization: Bearer ..." (malloc'd) or NULL without a token. Token
 * files are re-read every TOKEN_REFRESH_MS; a failed read keeps the old one. */
int kube_auth_header(struct mk_kube *k, char **ret);

/* ---- handles.c ---- */

/* An easy handle for one attempt: the pool's most recently used one (its
 * live connections kept), else a new one; NULL when curl has no memory. */
CURL *kube_handle_take(struct mk_kube *k);
/* Gives a handle (may be NULL) back to the pool, its options reset, or
 * cleans it up when the pool is full. */
void kube_handle_give(struct mk_kube *k, CURL *c);
/* Cleans up every idle handle (mk_kube_free). */
void kube_handles_free(struct mk_kube *k);

/* ---- watch-frame.c ---- */

/* A watch stream being cut into events. */
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

void kube_watch_done(struct watch *w);
/* Splits the stream into top-level JSON values (the apiserver writes one
 * per line, but chunks may end anywhere) and handles each. Returns 0, or
 * sets w->result and returns -1 to end the transfer. */
int kube_watch_feed(struct watch *w, const char *data, size_t len);

/* ---- attempt.c ---- */

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

void kube_transfer_done(struct transfer *t);
/* Runs one attempt. 0 on a 2xx answer (t->body holds it); otherwise a
 * negative errno with e set and *ret_retryable telling whether another try
 * may succeed. For watches, 1 when the callback stopped the watch. */
int kube_attempt(struct mk_kube *k, const struct request *rq, struct transfer *t, bool *ret_retryable,
                 struct mk_error *e);

/* ---- retry.c ---- */

/* splitmix64 on a per-request state; kube_random_seed() seeds one. */
uint64_t kube_next_random(uint64_t *state);
uint64_t kube_random_seed(const void *p);
/* Exponential backoff with "equal jitter": half the step fixed, half
 * random; at least Retry-After (retry_after_s, 0: none) up to the maximum. */
unsigned kube_backoff(const struct mk_kube *k, unsigned failures, unsigned retry_after_s, uint64_t *rnd);
/* Appends " (after N attempts)" to e's message (n >= 2). */
void kube_note_attempts(struct mk_error *e, unsigned n);
/* A request with retries; on success the parsed body (when ret). */
int kube_request(struct mk_kube *k, const struct request *rq, json_t **ret, struct mk_error *e);
