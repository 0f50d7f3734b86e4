#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/thread.h"
#include "base/macro.h"
#include "base/parse.h"
#include "mig/gpu.h"
#include "nvml/nvml.h"
#include "plugin/health.h"

#define AREA "plugin"

/* Application errors upstream never counts (k8s-device-plugin v0.20.0 internal/rm/health.go): 13
 * graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
 * processing, 45 preemptive cleanup, 68 video processor exception, 109
 * context switch timeout. */
static const unsigned long long default_ignored[] = {13, 31, 43, 45, 68, 109};

/* ---- options ---- */

struct xid_list {
        bool all;
        unsigned long long *xids;
        size_t n;
};

static bool list_has(const unsigned long long *l, size_t n, unsigned long long x) {
        for (size_t i = 0; i < n; i++)
                if (l[i] == x)
                        return true;
        return false;
}

/* Upstream's newHealthCheckXIDs(): split on ',', TrimSpace, ToLower; "all"
 * and "xids" mean every Xid; other entries must be decimal uint64, else
 * they are ignored. */
static int parse_xid_list(const char *var, const char *value, struct xid_list *ret, struct mk_error *e) {
        *ret = (struct xid_list){0};
        if (!value)
                return 0;
        size_t len = strnlen(value, MK_HEALTH_ENV_MAX + 1);
        if (len > MK_HEALTH_ENV_MAX)
                return mk_error_set(e, -E2BIG, "%s is longer than %u bytes", var, MK_HEALTH_ENV_MAX);
        const char *p = value;
        for (;;) {
                const char *comma = memchr(p, ',', strlen(p));
                size_t n = comma ? (size_t) (comma - p) : strlen(p);
                while (n > 0 && isspace((unsigned char) *p))
                        p++, n--;
                while (n > 0 && isspace((unsigned char) p[n - 1]))
                        n--;
                char item[32];
                if (n > 0 && n < sizeof(item)) {
                        for (size_t i = 0; i < n; i++)
                                item[i] = (char) tolower((unsigned char) p[i]);
                        item[n] = 0;
                        uint64_t x;
                        if (streq(item, "all") || streq(item, "xids"))
                                ret->all = true;
                        else if (mk_parse_u64(item, &x) >= 0) {
                                if (!list_has(ret->xids, ret->n, x)) {
                                        if (ret->n >= MK_HEALTH_MAX_XIDS) {
                                                free(ret->xids);
                                                *ret = (struct xid_list){0};
                                                return mk_error_set(e, -E2BIG, "%s lists more than %u Xids", var,
                                                                    MK_HEALTH_MAX_XIDS);
                                        }
                                        unsigned long long *l = realloc(ret->xids, (ret->n + 1) * sizeof(*l));
                                        if (!l) {
                                                free(ret->xids);
                                                *ret = (struct xid_list){0};
                                                return mk_error_set(e, -ENOMEM, "Out of memory");
                                        }
                                        ret->xids = l;
                                        ret->xids[ret->n++] = x;
                                }
                        } else
                                log_debug_area(AREA, "%s: ignoring malformed Xid '%s'", var, item);
                } else if (n > 0)
                        log_debug_area(AREA, "%s: ignoring malformed Xid of %zu bytes", var, n);
                if (!comma)
                        break;
                p = comma + 1;
        }
        return 0;
}

void mk_health_options_done(struct mk_health_options *o) {
        if (!o)
                return;
        free(o->ignored_xids);
        *o = (struct mk_health_options){0};
}

int mk_health_options_parse(const char *disable, const char *enable, const char *recheck_ms,
                            struct mk_health_options *ret, struct mk_error *e) {
        unsigned recheck = MK_HEALTH_DEFAULT_RECHECK_MS;
        if (recheck_ms) {
                uint32_t v;
                if (mk_parse_u32(recheck_ms, &v) < 0 || v == 0 || v > 86400000u)
                        return mk_error_set(e, -EINVAL,
                                            "MIGKIT_HEALTH_RECHECK_MS: '%.64s' is not a period in milliseconds "
                                            "(1..86400000)",
                                            recheck_ms);
                recheck = v;
        }
        struct xid_list dis, en;
        int r = parse_xid_list("DP_DISABLE_HEALTHCHECKS", disable, &dis, e);
        if (r < 0)
                return r;
        r = parse_xid_list("DP_ENABLE_HEALTHCHECKS", enable, &en, e);
        if (r < 0) {
                free(dis.xids);
                return r;
        }

        struct mk_health_options o = {.recheck_ms = recheck};
        if (dis.all && !en.all)
                o.disabled = true; /* even if DP_ENABLE_HEALTHCHECKS lists Xids (upstream's health_test.go) */
        else if (!en.all) {
                size_t cap = ELEMENTSOF(default_ignored) + dis.n;
                o.ignored_xids = calloc(cap, sizeof(*o.ignored_xids));
                if (!o.ignored_xids) {
                        free(dis.xids);
                        free(en.xids);
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                }
                for (size_t i = 0; i < cap; i++) {
                        unsigned long long x = i < ELEMENTSOF(default_ignored) ? default_ignored[i]
                                                                                : dis.xids[i - ELEMENTSOF(default_ignored)];
                        if (!list_has(en.xids, en.n, x) && !list_has(o.ignored_xids, o.n_ignored, x))
                                o.ignored_xids[o.n_ignored++] = x;
                }
        }
        free(dis.xids);
        free(en.xids);
        *ret = o;
        return 0;
}

int mk_health_options_from_env(struct mk_health_options *o, struct mk_error *e) {
        return mk_health_options_parse(secure_getenv("DP_DISABLE_HEALTHCHECKS"), secure_getenv("DP_ENABLE_HEALTHCHECKS"),
                                       secure_getenv("MIGKIT_HEALTH_RECHECK_MS"), o, e);
}

bool mk_health_xid_counts(const struct mk_health_options *o, unsigned long long xid) {
        return !o->disabled && !list_has(o->ignored_xids, o->n_ignored, xid);
}

/* ---- the monitor ---- */

/* A device reported unhealthy and not yet recovered. */
struct entry {
        unsigned gpu, gi, ci;
        bool lost;                      /* the GPU fell off the bus: permanent */
        unsigned long long xid;         /* that made it unhealthy, 0 for other failures */
        char why[96];
        long long last_event_ms;        /* last critical event (or failure) for it */
        long long next_check_ms;
};

struct mk_health {
        struct mk_nvml *n;
        const struct mk_snapshot *s;
        struct mk_health_options o;     /* copy; owns ignored_xids */
        mk_health_fn fn;
        void *userdata;
        const char *disabled_reason;
        char reason_buf[MK_ERROR_MSG_MAX];

        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop;                      /* under lock */

        /* The thread's own state. */
        struct mk_nvml_events *ev;
        struct entry *entries;
        size_t n_entries;
        bool reopen;                    /* re-register (after a failure or a recovered registration) */
};

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool should_stop(struct mk_health *h) {
        pthread_mutex_lock(&h->lock);
        bool stop = h->stop;
        pthread_mutex_unlock(&h->lock);
        return stop;
}

/* Sleeps up to ms, less when stopped. */
static void pause_ms(struct mk_health *h, unsigned ms) {
        struct timespec ts = mk_deadline_in_ms(ms);
        pthread_mutex_lock(&h->lock);
        while (!h->stop && pthread_cond_timedwait(&h->cond, &h->lock, &ts) == 0)
                ;
        pthread_mutex_unlock(&h->lock);
}

_printf_(7, 8) static void report(struct mk_health *h, unsigned gpu, unsigned gi, unsigned ci, bool healthy,
                                  unsigned long long xid, const char *fmt, ...) {
        struct mk_health_change c = {.gpu = gpu, .gi_id = gi, .ci_id = ci, .healthy = healthy, .xid = xid};
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c.reason, sizeof(c.reason), fmt, ap);
        va_end(ap);
        log_debug_area(AREA, "GPU %u GI %d CI %d: %s (%s)", gpu, gi == UINT32_MAX ? -1 : (int) gi,
                       ci == UINT32_MAX ? -1 : (int) ci, healthy ? "healthy" : "unhealthy", c.reason);
        h->fn(h->userdata, &c);
}

static struct entry *find_entry(struct mk_health *h, unsigned gpu, unsigned gi, unsigned ci) {
        for (size_t i = 0; i < h->n_entries; i++)
                if (h->entries[i].gpu == gpu && h->entries[i].gi == gi && h->entries[i].ci == ci)
                        return &h->entries[i];
        return NULL;
}

static bool gpu_lost(struct mk_health *h, unsigned gpu) {
        for (size_t i = 0; i < h->n_entries; i++)
                if (h->entries[i].gpu == gpu && h->entries[i].lost)
                        return true;
        return false;
}

/* Records (gpu, gi, ci) unhealthy; reports it when it was not already. */
static void mark_unhealthy(struct mk_health *h, unsigned gpu, unsigned gi, unsigned ci, unsigned long long xid,
                           const char *why) {
        long long now = now_ms();
        if (gi == UINT32_MAX)
                ci = UINT32_MAX;
        struct entry *x = find_entry(h, gpu, gi, ci);
        if (x) {
                x->last_event_ms = now;
                x->next_check_ms = now + h->o.recheck_ms;
                return;
        }
        struct entry *l = realloc(h->entries, (h->n_entries + 1) * sizeof(*l));
        if (l) {
                h->entries = l;
                x = &h->entries[h->n_entries++];
                *x = (struct entry){.gpu = gpu,
                                    .gi = gi,
                                    .ci = ci,
                                    .xid = xid,
                                    .last_event_ms = now,
                                    .next_check_ms = now + h->o.recheck_ms};
                snprintf(x->why, sizeof(x->why), "%s", why);
        } else /* reported all the same; it just will not recover */
                log_debug_area(AREA, "Out of memory recording GPU %u as unhealthy", gpu);
        report(h, gpu, gi, ci, false, xid, "%s", why);
}

/* The GPU is lost: it and all its MIG devices stay unhealthy. */
static void mark_lost(struct mk_health *h, unsigned gpu, const char *why) {
        if (gpu_lost(h, gpu))
                return;
        /* Its MIG entries are covered by the whole GPU from now on. */
        size_t w = 0;
        for (size_t i = 0; i < h->n_entries; i++)
                if (h->entries[i].gpu != gpu || h->entries[i].gi == UINT32_MAX)
                        h->entries[w++] = h->entries[i];
        h->n_entries = w;
        mark_unhealthy(h, gpu, UINT32_MAX, UINT32_MAX, 0, why);
        struct entry *x = find_entry(h, gpu, UINT32_MAX, UINT32_MAX);
        if (x)
                x->lost = true;
}

static void on_event(struct mk_health *h, const struct mk_nvml_event *ev) {
        if (ev->type != nvmlEventTypeXidCriticalError) {
                log_debug_area(AREA, "GPU %u: NVML event type 0x%llx (ECC), not acted on", ev->gpu, ev->type);
                return;
        }
        if (!mk_health_xid_counts(&h->o, ev->xid)) {
                log_debug_area(AREA, "GPU %u: Xid %llu is ignored", ev->gpu, ev->xid);
                return;
        }
        char why[96];
        snprintf(why, sizeof(why), "critical Xid %llu", ev->xid);
        if (ev->gpu == UINT32_MAX || ev->gpu >= h->s->n_gpus) {
                /* As upstream: an event we cannot attribute marks everything. */
                for (size_t g = 0; g < h->s->n_gpus; g++)
                        if (!gpu_lost(h, (unsigned) g))
                                mark_unhealthy(h, (unsigned) g, UINT32_MAX, UINT32_MAX, ev->xid,
                                               "critical Xid on a device NVML did not name");
                return;
        }
        if (gpu_lost(h, ev->gpu))
                return;
        mark_unhealthy(h, ev->gpu, ev->gi_id, ev->ci_id, ev->xid, why);
}

/* Reports the GPUs whose registration failed, as upstream does; returns
 * whether any did. */
static bool check_registration(struct mk_health *h) {
        bool failed = false;
        for (size_t g = 0; g < h->s->n_gpus; g++) {
                int st = mk_nvml_events_gpu_status(h->ev, g);
                if (st == -ENXIO) {
                        mark_lost(h, (unsigned) g, "GPU is lost (fallen off the bus)");
                        failed = true;
                } else if (st < 0 && st != -EOPNOTSUPP) {
                        if (!gpu_lost(h, (unsigned) g))
                                mark_unhealthy(h, (unsigned) g, UINT32_MAX, UINT32_MAX, 0,
                                               "cannot register for NVML events");
                        failed = true;
                } else if (st == -EOPNOTSUPP)
                        log_debug_area(AREA, "GPU %zu: NVML events not supported, it stays healthy", g);
        }
        return failed;
}

static void mark_all(struct mk_health *h, const char *why) {
        for (size_t g = 0; g < h->s->n_gpus; g++)
                if (!gpu_lost(h, (unsigned) g))
                        mark_unhealthy(h, (unsigned) g, UINT32_MAX, UINT32_MAX, 0, why);
}

/* (Re-)registers the snapshot's GPUs; GPUs that fail are reported. A set
 * that cannot be created marks every GPU (nothing watches them) and is
 * retried. Returns whether some GPU failed. */
static bool open_events(struct mk_health *h) {
        struct mk_error e = {0};
        h->ev = mk_nvml_events_close(h->ev);
        h->reopen = false;
        int r = mk_nvml_events_open(h->n, h->s, &h->ev, &e);
        if (r < 0) {
                log_debug_area(AREA, "Cannot reopen NVML events: %s", e.msg);
                mark_all(h, "NVML events unavailable");
                h->reopen = true;
                return true;
        }
        return check_registration(h);
}

/* After a failed wait (a registered GPU lost keeps every wait failing):
 * register again at once, so lost GPUs show and are left out, then check
 * the others. When every GPU answers, the failure is not attributable and,
 * as upstream, every GPU is marked (they recover by the usual rule). */
static void on_wait_failure(struct mk_health *h, const char *why) {
        bool any = open_events(h);
        for (size_t g = 0; g < h->s->n_gpus && !h->reopen; g++) {
                if (gpu_lost(h, (unsigned) g) || mk_nvml_events_gpu_status(h->ev, g) < 0)
                        continue;
                struct mk_error e = {0};
                int r = mk_nvml_device_check(h->n, h->s->gpus[g].index, UINT32_MAX, UINT32_MAX, &e);
                if (r == -ENXIO) {
                        mark_lost(h, (unsigned) g, "GPU is lost (fallen off the bus)");
                        any = true;
                } else if (r < 0) {
                        mark_unhealthy(h, (unsigned) g, UINT32_MAX, UINT32_MAX, 0, "GPU does not answer NVML");
                        any = true;
                }
        }
        if (!any)
                mark_all(h, why);
}

/* The recovery rule. */
static void recheck(struct mk_health *h) {
        long long now = now_ms();
        for (size_t i = 0; i < h->n_entries;) {
                struct entry *x = &h->entries[i];
                if (x->lost || now < x->next_check_ms) {
                        i++;
                        continue;
                }
                x->next_check_ms = now + h->o.recheck_ms;
                if (now - x->last_event_ms < (long long) h->o.recheck_ms) {
                        i++;
                        continue;
                }
                struct mk_error e = {0};
                unsigned gpu = x->gpu, gi = x->gi, ci = x->ci;
                int r = mk_nvml_device_check(h->n, h->s->gpus[gpu].index, gi, ci, &e);
                if (r == -ENXIO) {
                        mark_lost(h, gpu, "GPU is lost (fallen off the bus)");
                        i = 0; /* entries changed */
                        continue;
                }
                if (r < 0) {
                        log_debug_area(AREA, "GPU %u: still unhealthy: %s", gpu, e.msg);
                        i++;
                        continue;
                }
                h->entries[i] = h->entries[--h->n_entries];
                if (h->ev && gi == UINT32_MAX && mk_nvml_events_gpu_status(h->ev, gpu) < 0 &&
                    mk_nvml_events_gpu_status(h->ev, gpu) != -EOPNOTSUPP)
                        h->reopen = true; /* its registration had failed: try again */
                report(h, gpu, gi, ci, true, 0, "recovered: answers NVML, no critical Xid for %u ms",
                       h->o.recheck_ms);
                /* The recovery of a GPU (or GPU instance) covers its MIG
                 * devices for the receiver; those still unhealthy are
                 * reported again so that they stay so. */
                for (size_t k = 0; k < h->n_entries; k++) {
                        const struct entry *y = &h->entries[k];
                        if (y->gpu == gpu && !y->lost && (gi == UINT32_MAX || (y->gi == gi && ci == UINT32_MAX)) &&
                            !(y->gi == gi && y->ci == ci))
                                report(h, y->gpu, y->gi, y->ci, false, y->xid, "%s", y->why);
                }
        }
}

static unsigned next_wait_ms(struct mk_health *h) {
        long long wait = MIN(MK_HEALTH_WAIT_MS, h->o.recheck_ms);
        long long now = now_ms();
        for (size_t i = 0; i < h->n_entries; i++)
                if (!h->entries[i].lost)
                        wait = MIN(wait, MAX(h->entries[i].next_check_ms - now, 0));
        return (unsigned) MAX(wait, 1);
}

static void *thread_main(void *userdata) {
        struct mk_health *h = userdata;
        unsigned failures = 0;

        (void) check_registration(h); /* of the set mk_health_start() opened */
        while (!should_stop(h)) {
                if (h->reopen) {
                        if (failures > 0) /* no busy loop while NVML keeps failing */
                                pause_ms(h, MIN(h->o.recheck_ms, MK_HEALTH_WAIT_MS));
                        if (should_stop(h))
                                break;
                        (void) open_events(h);
                        failures = h->reopen ? failures + 1 : 0;
                }
                if (h->ev && !h->reopen) {
                        struct mk_nvml_event ev;
                        struct mk_error e = {0};
                        int r = mk_nvml_events_wait(h->ev, next_wait_ms(h), &ev, &e);
                        if (r >= 0)
                                failures = 0;
                        if (r > 0)
                                on_event(h, &ev);
                        else if (r < 0) {
                                log_debug_area(AREA, "%s", e.msg);
                                if (failures++ > 0)
                                        pause_ms(h, MIN(h->o.recheck_ms, MK_HEALTH_WAIT_MS));
                                if (!should_stop(h))
                                        on_wait_failure(h, "NVML event wait failed");
                        }
                }
                recheck(h);
        }
        h->ev = mk_nvml_events_close(h->ev);
        return NULL;
}

const char *mk_health_disabled_reason(const struct mk_health *h) {
        return h ? h->disabled_reason : "no health monitor";
}

struct mk_health *mk_health_stop(struct mk_health *h) {
        if (!h)
                return NULL;
        if (h->started) {
                pthread_mutex_lock(&h->lock);
                h->stop = true;
                pthread_cond_broadcast(&h->cond);
                pthread_mutex_unlock(&h->lock);
                pthread_join(h->thread, NULL);
        }
        mk_nvml_events_close(h->ev);
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->lock);
        free(h->entries);
        mk_health_options_done(&h->o);
        free(h);
        return NULL;
}

int mk_health_start(struct mk_nvml *n, const struct mk_snapshot *s, const struct mk_health_options *o,
                    mk_health_fn fn, void *userdata, struct mk_health **ret, struct mk_error *e) {
        struct mk_health *h = calloc(1, sizeof(*h));
        if (!h)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        h->n = n;
        h->s = s;
        h->fn = fn;
        h->userdata = userdata;
        h->o = (struct mk_health_options){.disabled = o->disabled,
                                          .recheck_ms = o->recheck_ms ? o->recheck_ms : MK_HEALTH_DEFAULT_RECHECK_MS};
        pthread_mutex_init(&h->lock, NULL);
        mk_cond_init_monotonic(&h->cond);
        if (o->n_ignored > 0) {
                h->o.ignored_xids = calloc(o->n_ignored, sizeof(*h->o.ignored_xids));
                if (!h->o.ignored_xids) {
                        mk_health_stop(h);
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                }
                memcpy(h->o.ignored_xids, o->ignored_xids, o->n_ignored * sizeof(*o->ignored_xids));
                h->o.n_ignored = o->n_ignored;
        }

        if (o->disabled) {
                h->disabled_reason = "health checks disabled by DP_DISABLE_HEALTHCHECKS";
                *ret = h;
                return 0;
        }
        /* Registered here, so that a library without events is known now and
         * no event raised after mk_health_start() returns is missed. */
        struct mk_error pe = {0};
        int r = mk_nvml_events_open(n, s, &h->ev, &pe);
        if (r < 0) {
                snprintf(h->reason_buf, sizeof(h->reason_buf), "%.400s; continuing with health checks disabled",
                         pe.msg);
                h->disabled_reason = h->reason_buf;
                *ret = h;
                return 0;
        }
        r = pthread_create(&h->thread, NULL, thread_main, h);
        if (r != 0) {
                mk_health_stop(h);
                return mk_error_set(e, -r, "Cannot start the health monitor thread: %s", strerror(r));
        }
        h->started = true;
        *ret = h;
        return 0;
}
