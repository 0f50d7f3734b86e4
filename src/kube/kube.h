/* A small Kubernetes API client: GET, LIST (selectors, pagination), WATCH
 * (resume from the last resourceVersion, bookmarks, -ESTALE on 410 Gone),
 * POST, PUT, PATCH (merge, strategic merge, JSON patch), DELETE. libcurl +
 * jansson. Policy-free: callers decide what to retry after an error.
 *
 * Every response is bounded (MK_MAX_APISERVER_BODY, MK_MAX_WATCH_EVENT by
 * default), every request has connect and total timeouts, and idempotent
 * requests are retried with exponential backoff and jitter on network
 * errors, 429 and 5xx. An HTTP failure becomes a negative errno
 * (mk_kube_status_to_errno()) with the apiserver's Status message in the
 * struct mk_error. docs/kube.md has the details.
 *
 * Threads: one struct mk_kube may be used by several threads at once. It
 * holds no per-request state; each request uses its own curl easy handle,
 * and connections and TLS sessions are shared through a locked curl share
 * handle. Callbacks run in the calling thread. */
#pragma once

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/macro.h"

struct mk_error;
struct mk_kube;
struct mk_kube_config;

#define MK_MAX_APISERVER_BODY (16u << 20)       /* one response body (a LIST page, an object, a Status) */
#define MK_MAX_WATCH_EVENT (4u << 20)           /* one event of a watch stream */
#define MK_MAX_LIST_PAGES 100000u               /* pages of one LIST: a server that never ends it */

#define MK_KUBE_CONNECT_TIMEOUT_MS 10000
#define MK_KUBE_REQUEST_TIMEOUT_MS 60000        /* a whole request but a watch */
#define MK_KUBE_ATTEMPTS 5                      /* tries of one request, the first included */
#define MK_KUBE_BACKOFF_INITIAL_MS 200
#define MK_KUBE_BACKOFF_MAX_MS 10000
#define MK_KUBE_LIST_PAGE 500                   /* items per LIST page, as client-go's pager */
#define MK_KUBE_WATCH_SLACK_S 30                /* our own deadline beyond the watch's timeoutSeconds */

/* Zero fields take the defaults above. */
struct mk_kube_options {
        int connect_timeout_ms;
        int request_timeout_ms;
        unsigned attempts;              /* 1: never retry */
        unsigned backoff_initial_ms;    /* before the second try; doubles up to backoff_max_ms */
        unsigned backoff_max_ms;
        size_t max_body;
        size_t max_event;
        const char *user_agent;         /* "migkit/<version>" */
        unsigned idle_keep_ms;          /* an idle connection unused that long is closed (20 s) */
};

/* Creates a client. On success it takes the contents of *cfg (leaving it
 * empty); on failure *cfg is left as it was. o may be NULL. Errors: -EINVAL
 * for a bad server URL or options, -ENOMEM, -EIO when curl cannot start.
 * Free with mk_kube_free() once no request is running. */
int mk_kube_new(struct mk_kube_config *cfg, const struct mk_kube_options *o, struct mk_kube **ret,
                struct mk_error *e) _nonnull_(1, 3) _wur_;
struct mk_kube *mk_kube_free(struct mk_kube *k);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_kube *, mk_kube_free);
#define _cleanup_kube_free_ _cleanup_(mk_kube_freep)

/* The configuration's namespace, "default" when it has none. Owned by k. */
const char *mk_kube_namespace(const struct mk_kube *k) _nonnull_(1);
/* The server URL. Owned by k. */
const char *mk_kube_server(const struct mk_kube *k) _nonnull_(1);

/* HTTP status and Status reason -> negative errno:
 *   400 BadRequest -EINVAL, 401 and 403 -EACCES, 404 -ENOENT,
 *   405 and 415 -EOPNOTSUPP, 409 AlreadyExists -EEXIST, 409 otherwise
 *   (Conflict: the object changed since it was read) -EBUSY, 410 -ESTALE,
 *   413 -E2BIG, 422 -EINVAL, 429 -EAGAIN, 504 and reason Timeout -ETIMEDOUT,
 *   other 5xx -EIO, anything else (1xx, 3xx, other 4xx) -EPROTO.
 * `reason` may be NULL. */
int mk_kube_status_to_errno(long http_status, const char *reason);

/* Paths are the request path with the leading '/', optionally with a query
 * ("/api/v1/nodes/n1", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db"),
 * printable ASCII only (-EINVAL otherwise). They are appended to the
 * server URL. Results are new references (json_decref them); a ret pointer
 * may be NULL where noted when the caller does not want the body. */

/* GET one object. */
int mk_kube_get(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) _nonnull_(1, 2, 3) _wur_;

/* POST (create) `body`; ret may be NULL. Retried only when the request cannot
 * have reached the server (connect failures) and on 429. */
int mk_kube_post(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e)
        _nonnull_(1, 2, 3) _wur_;

/* PUT (replace) `body`; ret may be NULL. With metadata.resourceVersion set,
 * -EBUSY when the object changed since. */
int mk_kube_put(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e)
        _nonnull_(1, 2, 3) _wur_;

enum mk_kube_patch_type {
        MK_KUBE_PATCH_MERGE,            /* application/merge-patch+json (RFC 7386) */
        MK_KUBE_PATCH_STRATEGIC,        /* application/strategic-merge-patch+json (built-in types only) */
        MK_KUBE_PATCH_JSON,             /* application/json-patch+json (RFC 6902) */
        _MK_KUBE_PATCH_TYPE_MAX,
        _MK_KUBE_PATCH_TYPE_INVALID = -EINVAL,
};
const char *mk_kube_patch_type_to_string(enum mk_kube_patch_type t);        /* "merge", "strategic", "json" */
enum mk_kube_patch_type mk_kube_patch_type_from_string(const char *s);
const char *mk_kube_patch_content_type(enum mk_kube_patch_type t);

/* PATCH with `patch`; ret may be NULL. Merge and strategic patches are
 * retried (applying one twice gives the same object); JSON patches are
 * retried like POST. */
int mk_kube_patch(struct mk_kube *k, const char *path, enum mk_kube_patch_type type, const json_t *patch,
                  json_t **ret, struct mk_error *e) _nonnull_(1, 2, 4) _wur_;

/* Merge-patches metadata.<field> ("labels" or "annotations") with `changes`:
 * string values set keys, JSON null removes them. ret may be NULL. */
int mk_kube_patch_metadata(struct mk_kube *k, const char *path, const char *field, const json_t *changes,
                           json_t **ret, struct mk_error *e) _nonnull_(1, 2, 3, 4) _wur_;

/* DELETE; ret (the deleted object or a Status) may be NULL. A retry after a
 * lost answer may see -ENOENT although the first try deleted the object. */
int mk_kube_delete(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

struct mk_kube_list_opts {
        const char *label_selector;     /* "app=x,tier in (a,b)"; escaped by us; NULL: none */
        const char *field_selector;     /* "metadata.name=n1"; NULL: none */
        unsigned limit;                 /* items per page; 0: MK_KUBE_LIST_PAGE */
        const char *resource_version;   /* first page only; NULL: the most recent (a quorum read) */
};

/* Called for each item of a LIST, page by page; `item` is borrowed
 * (json_incref to keep it). Return < 0 to fail the list with that error,
 * > 0 to stop early (the list then returns 0), 0 to go on. */
typedef int (*mk_kube_item_fn)(json_t *item, void *userdata);

/* LIST following `continue` tokens; calls fn for every item and returns the
 * list's resourceVersion (malloc'd) in *ret_resource_version (may be NULL).
 * -ESTALE when a continue token expired (410): list again from the start.
 * Items already passed to fn stay passed. */
int mk_kube_list_each(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, mk_kube_item_fn fn,
                      void *userdata, char **ret_resource_version, struct mk_error *e) _nonnull_(1, 2, 4) _wur_;

/* LIST all pages into one list object: the first page's object with every
 * page's items in "items" and no metadata.continue. */
int mk_kube_list(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, json_t **ret,
                 struct mk_error *e) _nonnull_(1, 2, 4) _wur_;

enum mk_kube_event_type {
        MK_KUBE_EVENT_ADDED,
        MK_KUBE_EVENT_MODIFIED,
        MK_KUBE_EVENT_DELETED,
        MK_KUBE_EVENT_BOOKMARK,         /* object holds only metadata.resourceVersion */
        MK_KUBE_EVENT_ERROR,            /* never passed to callbacks: it ends the watch */
        _MK_KUBE_EVENT_TYPE_MAX,
        _MK_KUBE_EVENT_TYPE_INVALID = -EINVAL,
};
const char *mk_kube_event_type_to_string(enum mk_kube_event_type t);        /* "ADDED", ... */
enum mk_kube_event_type mk_kube_event_type_from_string(const char *s);

/* Called for each watch event (BOOKMARK included); `object` is borrowed.
 * Return < 0 to end the watch with that error, > 0 to stop it (the watch
 * returns 0), 0 to go on. */
typedef int (*mk_kube_event_fn)(enum mk_kube_event_type type, json_t *object, void *userdata);

struct mk_kube_watch_opts {
        const char *label_selector;
        const char *field_selector;
        unsigned timeout_seconds;       /* per request (the server ends the stream); 0: random 5-10 min */
        bool allow_bookmarks;
        bool once;                      /* return 0 when the first stream ends instead of resuming */
        atomic_bool *cancel;            /* NULL, or set from any thread or a signal handler to end the
                                         * watch with -ECANCELED within about a second */        bool *progressed;               /* NULL, or set true when a stream delivered an event or ran its
                                         * course (the connection worked), whatever the return */
};

/* WATCH `path` (a collection; select one object with a field selector
 * metadata.name=...). *resource_version (malloc'd or NULL; NULL or "" starts
 * at the most recent version with synthetic ADDED events for what exists)
 * is where the watch starts; it is updated in place as events (bookmarks
 * included) arrive, so it always holds the last version seen, whatever the
 * return. When a stream ends (the server's timeout, a dropped connection, a
 * restarted apiserver) the watch resumes from there, backing off while it
 * cannot connect; it ends when fn stops it (0), fn fails (fn's error),
 * `cancel` is set (-ECANCELED), `once` is set and a stream ended (0), the
 * version is too old (-ESTALE: 410 Gone as an HTTP status or an ERROR event;
 * LIST again and watch from the list's version), another ERROR event (its
 * code mapped), an event over max_event (-E2BIG), garbage (-EBADMSG), or
 * `attempts` failed connections in a row (the last error). */
int mk_kube_watch(struct mk_kube *k, const char *path, const struct mk_kube_watch_opts *o, char **resource_version,
                  mk_kube_event_fn fn, void *userdata, struct mk_error *e) _nonnull_(1, 2, 4, 5) _wur_;

/* The client's backoff before the next try after `failures` failures in a
 * row: exponential from backoff_initial_ms to backoff_max_ms, half of it
 * random. *rnd is the caller's generator state (0 seeds it). For callers'
 * own retry loops. */
unsigned mk_kube_backoff_ms(const struct mk_kube *k, unsigned failures, uint64_t *rnd) _nonnull_(1, 3);

/* Sleeps `ms` in slices of at most 100 ms; -ECANCELED as soon as *cancel
 * (may be NULL) is set, else 0. */
int mk_kube_sleep_ms(unsigned ms, atomic_bool *cancel);

/* True for errors a later try may not see: network errors and timeouts,
 * 429, 5xx, -ESTALE. False for configuration, permission and request errors. */
bool mk_kube_error_is_transient(int error);
