/* WATCH: one stream after another from the last resourceVersion seen,
 * backing off while the apiserver cannot be reached; the stream's framing
 * is in watch-frame.c. */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

#define WATCH_MIN_STREAM_MS 1000        /* a stream that ends sooner without events counts as a failure */

/* The request path of one stream: path?watch=1, the version to start
 * from, bookmarks, the server's timeout, the selectors. */
static int watch_url(struct mk_buf *u, const char *path, const struct mk_kube_watch_opts *o,
                     const char *resource_version, unsigned timeout) {
        int r = mk_buf_printf(u, "%s%cwatch=1", path, strchr(path, '?') ? '&' : '?');
        if (r >= 0 && resource_version && *resource_version)
                r = kube_add_param(u, "resourceVersion", resource_version);
        if (r >= 0 && o->allow_bookmarks)
                r = mk_buf_puts(u, "&allowWatchBookmarks=true");
        if (r >= 0)
                r = mk_buf_printf(u, "&timeoutSeconds=%u", timeout);
        if (r >= 0)
                r = kube_add_selectors(u, o->label_selector, o->field_selector);
        return r;
}

int mk_kube_watch(struct mk_kube *k, const char *path, const struct mk_kube_watch_opts *o, char **resource_version,
                  mk_kube_event_fn fn, void *userdata, struct mk_error *e) {
        static const struct mk_kube_watch_opts none = {};
        uint64_t rnd = kube_random_seed(path);
        unsigned failures = 0;
        int r = kube_check_path(path, e);
        if (r < 0)
                return r;
        if (!o)
                o = &none;

        _cleanup_(kube_watch_done) struct watch w = {
                .path = path, .fn = fn, .userdata = userdata, .resource_version = resource_version, .e = e};
        _cleanup_(kube_transfer_done) struct transfer t = {.k = k};
        mk_buf_init(&w.frame, k->o.max_event);
        mk_buf_init(&t.body, k->o.max_body);

        for (;;) {
                if (o->cancel && atomic_load(o->cancel))
                        return mk_error_set(e, -ECANCELED, "WATCH %s: cancelled", path);
                /* client-go spreads its watches over 5-10 minutes the same way. */
                unsigned timeout = o->timeout_seconds ? o->timeout_seconds : 300 + (unsigned) (kube_next_random(&rnd) % 300);

                _cleanup_buf_done_ struct mk_buf u;
                mk_buf_init(&u, MAX_URL_BYTES);
                r = watch_url(&u, path, o, *resource_version, timeout);
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
                uint64_t t0 = kube_now_ms();
                r = kube_attempt(k, &rq, &t, &retryable, e);
                if (r == 1)
                        return 0; /* stopped by the callback */
                if (r == 0 && w.depth > 0) {
                        r = mk_error_set(e, -ECONNRESET, "WATCH %s: the stream ended inside an event", path);
                        retryable = true;
                }
                if (r == 0) {
                        if (o->once)
                                return 0;
                        if (w.events > 0 || kube_now_ms() - t0 >= WATCH_MIN_STREAM_MS) {
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
                        kube_note_attempts(e, failures);
                        return r;
                }
                unsigned d = kube_backoff(k, failures, t.retry_after_s, &rnd);
                log_debug_area("k8s", "WATCH '%s' ended (%s), resuming from '%s' in %u ms", path, strerror(-r),
                               *resource_version ? *resource_version : "", d);
                r = mk_kube_sleep_ms(d, o->cancel);
                if (r < 0)
                        return mk_error_set(e, r, "WATCH %s: cancelled", path);
        }
}
