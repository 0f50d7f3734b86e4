/* The pool of idle curl easy handles. Each keeps its own connections and
 * is used by one thread at a time, so a connection is never in two
 * threads' hands; the connection cache is not shared between handles:
 * libcurl does not support sharing it between concurrent threads
 * (CURLSHOPT_SHARE(3), CURL_LOCK_DATA_CONNECT), and doing so corrupted the
 * heap of a multi-threaded daemon (curl issues 4544, 13840). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <curl/curl.h>

#include "base/macro.h"
#include "kube/internal.h"

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
                kube_curl.easy_cleanup(c[i]);
}

CURL *kube_handle_take(struct mk_kube *k) {
        CURL *c = NULL, *stale[MK_KUBE_IDLE_HANDLES];
        uint64_t now = kube_now_ms();
        pthread_mutex_lock(&k->idle_lock);
        size_t n = idle_expire(k, now, stale);
        if (k->n_idle > 0)
                c = k->idle[--k->n_idle].c;
        pthread_mutex_unlock(&k->idle_lock);
        cleanup_all(stale, n);
        return c ? c : kube_curl.easy_init();
}

/* Gives a handle back to the pool, its options reset (no pointer into the
 * finished attempt's stack or headers stays set), or cleans it up when the
 * pool is full. */
void kube_handle_give(struct mk_kube *k, CURL *c) {
        if (!c)
                return;
        kube_curl.easy_reset(c);
        CURL *stale[MK_KUBE_IDLE_HANDLES];
        uint64_t now = kube_now_ms();
        pthread_mutex_lock(&k->idle_lock);
        size_t n = idle_expire(k, now, stale);
        bool kept = k->n_idle < ELEMENTSOF(k->idle);
        if (kept)
                k->idle[k->n_idle++] = (struct idle_handle) {c, now};
        pthread_mutex_unlock(&k->idle_lock);
        cleanup_all(stale, n);
        if (!kept)
                kube_curl.easy_cleanup(c);
}

void kube_handles_free(struct mk_kube *k) {
        for (size_t i = 0; i < k->n_idle; i++)
                kube_curl.easy_cleanup(k->idle[i].c);
        k->n_idle = 0;
}
