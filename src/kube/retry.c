/* Retries: exponential backoff with jitter (per-request random state, no
 * shared generator), a sleep that a cancel flag cuts short, and the loop
 * that runs a request until it succeeds, fails for good or runs out of
 * attempts. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

uint64_t kube_next_random(uint64_t *state) {
        /* splitmix64: per-request state, no shared generator. */
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

uint64_t kube_random_seed(const void *p) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_nsec ^ ((uint64_t) ts.tv_sec << 32) ^ (uint64_t) (uintptr_t) p ^
               (uint64_t) pthread_self();
}

/* Exponential backoff with "equal jitter": half the step fixed, half random. */
unsigned kube_backoff(const struct mk_kube *k, unsigned failures, unsigned retry_after_s, uint64_t *rnd) {
        if (*rnd == 0)
                *rnd = kube_random_seed(rnd);
        uint64_t d = k->o.backoff_initial_ms;
        for (unsigned i = 1; i < failures && d < k->o.backoff_max_ms; i++)
                d *= 2;
        if (d > k->o.backoff_max_ms)
                d = k->o.backoff_max_ms;
        d = d / 2 + kube_next_random(rnd) % (d / 2 + 1);
        if (retry_after_s > 0 && (uint64_t) retry_after_s * 1000 > d)
                d = MIN((uint64_t) retry_after_s * 1000, (uint64_t) k->o.backoff_max_ms);
        return (unsigned) d;
}

unsigned mk_kube_backoff_ms(const struct mk_kube *k, unsigned failures, uint64_t *rnd) {
        return kube_backoff(k, failures, 0, rnd);
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
void kube_note_attempts(struct mk_error *e, unsigned n) {
        if (!e || n < 2)
                return;
        char msg[MK_ERROR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%s", e->msg);
        size_t len = strlen(msg);
        snprintf(msg + len, sizeof(msg) - len, " (after %u attempts)", n);
        snprintf(e->msg, sizeof(e->msg), "%s", msg);
}

/* A request with retries; on success the parsed body (when ret). */
int kube_request(struct mk_kube *k, const struct request *rq, json_t **ret, struct mk_error *e) {
        _cleanup_(kube_transfer_done) struct transfer t = {.k = k, .rq = rq};
        uint64_t rnd = kube_random_seed(&t);
        unsigned n;
        int r;

        r = kube_check_path(rq->path, e);
        if (r < 0)
                return r;
        mk_buf_init(&t.body, k->o.max_body);
        for (n = 1;; n++) {
                bool retryable;
                r = kube_attempt(k, rq, &t, &retryable, e);
                if (r >= 0 || !retryable || n >= k->o.attempts)
                        break;
                unsigned d = kube_backoff(k, n, t.retry_after_s, &rnd);
                log_debug_area("k8s", "%s '%s' failed (%s), retrying in %u ms (attempt %u of %u)", rq->method,
                               rq->path, strerror(-r), d, n + 1, k->o.attempts);
                int s = mk_kube_sleep_ms(d, rq->cancel);
                if (s < 0)
                        return mk_error_set(e, s, "%s %s: cancelled", rq->method, rq->path);
        }
        if (r < 0) {
                kube_note_attempts(e, n);
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
