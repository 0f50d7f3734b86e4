/* The extender's entry points (extender.h): read (wire.h), decide
 * (decide.h), write (wire.h), count. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/macro.h"
#include "kube/json.h"
#include "sched/decide.h"
#include "sched/extender.h"
#include "sched/ledger.h"
#include "sched/memo.h"
#include "sched/nodecache.h"
#include "sched/request.h"
#include "sched/wire.h"
#include "spec/sched-config.h"

struct mk_sched {
        const struct mk_sched_config *cfg;
        struct mk_sched_cache cache;
        struct mk_sched_shapes shapes;
        atomic_bool memo_off;
        atomic_bool exact;
        struct mk_sched_stats stats;
};

int mk_sched_new(const struct mk_sched_config *cfg, struct mk_sched **ret) {
        struct mk_sched *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cfg = cfg;
        if (mk_sched_cache_init(&s->cache) < 0) {
                free(s);
                return -ENOMEM;
        }
        if (mk_sched_shapes_init(&s->shapes) < 0) {
                mk_sched_cache_done(&s->cache);
                free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

struct mk_sched *mk_sched_free(struct mk_sched *s) {
        if (!s)
                return NULL;
        mk_sched_cache_done(&s->cache);
        mk_sched_shapes_done(&s->shapes);
        free(s);
        return NULL;
}

struct mk_sched_stats *mk_sched_stats(struct mk_sched *s) {
        return &s->stats;
}

void mk_sched_counts(struct mk_sched *s, size_t *ret_nodes, size_t *ret_claims) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        mk_sched_cache_sweep(&s->cache, ts.tv_sec); /* what is counted is live */
        mk_sched_cache_counts(&s->cache, ret_nodes, ret_claims);
}

void mk_sched_set_memo(struct mk_sched *s, bool on) {
        atomic_store(&s->memo_off, !on);
}

void mk_sched_set_exact(struct mk_sched *s, bool on) {
        atomic_store(&s->exact, on);
}

int mk_sched_node_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *node) {
        return mk_sched_cache_node_event(&s->cache, type, node);
}

int mk_sched_pod_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *pod) {
        return mk_sched_cache_pod_event(&s->cache, type, pod);
}

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* Reads the request and decides it: 0, or <0 with `err` for a malformed
 * request (a filter's Error). `names`: the NodeNames list the body scan
 * found (its candidates are taken), else NULL. */
static int decide_request(struct mk_sched *s, const json_t *args, struct mk_sched_names *names, bool with_reasons,
                          struct mk_sched_decisions *d, char *err, size_t size) {
        *d = (struct mk_sched_decisions) {0};
        _cleanup_free_ struct mk_pod_request *req = calloc(1, sizeof(*req));
        if (!req) {
                snprintf(err, size, "out of memory");
                return -ENOMEM;
        }
        struct mk_sched_pod_ask ask = {.req = req, .exact = atomic_load(&s->exact)};
        int r = mk_sched_wire_pod(args, s->cfg, req, &ask.uid, &ask.pod, err, size);
        if (r >= 0 && names) {
                d->cands = TAKE_PTR(names->cands);
                d->n = names->n;
                d->by_name = true;
        } else if (r >= 0)
                r = mk_sched_wire_candidates(args, &d->cands, &d->n, &d->by_name, err, size);
        if (r >= 0)
                r = mk_sched_decide(s->cfg, &s->cache, atomic_load(&s->memo_off) ? NULL : &s->shapes, &ask,
                                    with_reasons, d, err, size);
        if (r < 0) {
                mk_sched_decisions_done(d);
                atomic_fetch_add(&s->stats.errors, 1);
                return r;
        }
        atomic_fetch_add(&s->stats.memo_hits, d->memo_hits);
        return 0;
}

static void filter_account(struct mk_sched *s, const struct mk_sched_decisions *d, uint64_t t0) {
        atomic_fetch_add(&s->stats.filter_ns_total, mono_ns() - t0);
        atomic_fetch_add(&s->stats.filter_nodes_total, d->n);
        atomic_fetch_add(&s->stats.feasible_total, d->feasible);
}

json_t *mk_sched_filter(struct mk_sched *s, const json_t *args) {
        atomic_fetch_add(&s->stats.filter, 1);
        uint64_t t0 = mono_ns();
        char err[MK_ERROR_MSG_MAX];
        struct mk_sched_decisions d;
        if (decide_request(s, args, NULL, true, &d, err, sizeof(err)) < 0)
                return mk_sched_wire_filter_error(err);
        json_t *res = mk_sched_wire_filter_json(&d);
        filter_account(s, &d, t0);
        mk_sched_decisions_done(&d);
        return res;
}

json_t *mk_sched_prioritize(struct mk_sched *s, const json_t *args) {
        atomic_fetch_add(&s->stats.prioritize, 1);
        char err[MK_ERROR_MSG_MAX];
        struct mk_sched_decisions d;
        if (decide_request(s, args, NULL, false, &d, err, sizeof(err)) < 0)
                return json_array();
        json_t *list = mk_sched_wire_prioritize_json(&d);
        mk_sched_decisions_done(&d);
        return list;
}

static char *json_text(json_t *v) {
        char *t = json_dumps(v, JSON_COMPACT);
        json_decref(v);
        return t;
}

static char *filter_text(struct mk_sched *s, const json_t *args, struct mk_sched_names *names) {
        atomic_fetch_add(&s->stats.filter, 1);
        uint64_t t0 = mono_ns();
        char err[MK_ERROR_MSG_MAX];
        struct mk_sched_decisions d;
        if (decide_request(s, args, names, true, &d, err, sizeof(err)) < 0)
                return json_text(mk_sched_wire_filter_error(err));
        char *t = mk_sched_wire_filter_text(&d);
        filter_account(s, &d, t0);
        mk_sched_decisions_done(&d);
        return t;
}

static char *prioritize_text(struct mk_sched *s, const json_t *args, struct mk_sched_names *names) {
        atomic_fetch_add(&s->stats.prioritize, 1);
        char err[MK_ERROR_MSG_MAX];
        struct mk_sched_decisions d;
        if (decide_request(s, args, names, false, &d, err, sizeof(err)) < 0)
                return strdup("[]");
        char *t = mk_sched_wire_prioritize_text(&d);
        mk_sched_decisions_done(&d);
        return t;
}

char *mk_sched_filter_text(struct mk_sched *s, const json_t *args) {
        return filter_text(s, args, NULL);
}

char *mk_sched_prioritize_text(struct mk_sched *s, const json_t *args) {
        return prioritize_text(s, args, NULL);
}

int mk_sched_body_text(struct mk_sched *s, bool filter, const char *body, size_t len, size_t cap, char **ret,
                       struct mk_error *e) {
        struct mk_sched_names pn = {0};
        json_t *args = NULL;
        _cleanup_free_ char *copy = NULL;
        size_t clen = 0;
        if (len <= cap && body && mk_sched_scan_names(body, len, &pn) && (copy = malloc(len + 1))) {
                /* jansson reads the rest, the array cut to "[]" (it skipped the 16 KiB of a
                 * 1,000-name list byte by byte). The copy is valid JSON exactly when the body
                 * is; on an error the body is read whole, for the error's position. */
                memcpy(copy, body, pn.start + 1);
                copy[pn.start + 1] = ']';
                memcpy(copy + pn.start + 2, body + pn.end, len - pn.end);
                clen = pn.start + 2 + len - pn.end;
                copy[clen] = 0;
        } else
                mk_sched_names_done(&pn);
        int r = mk_json_load_api(copy ? copy : body, copy ? clen : len, cap, "request body", &args, e);
        if (r < 0 && copy)
                r = mk_json_load_api(body, len, cap, "request body", &args, e);
        if (r < 0) {
                mk_sched_names_done(&pn);
                return r;
        }
        struct mk_sched_names *names = pn.cands ? &pn : NULL;
        *ret = filter ? filter_text(s, args, names) : prioritize_text(s, args, names);
        mk_sched_names_done(&pn);
        json_decref(args);
        return 0;
}

int mk_sched_reserve(struct mk_sched *s, const json_t *pod, const char *node, int64_t now, struct mk_claim *ret,
                     struct mk_error *e) {
        _cleanup_free_ struct mk_claim *c = calloc(1, sizeof(*c));
        _cleanup_free_ struct mk_pod_request *req = calloc(1, sizeof(*req));
        if (!c || !req)
                return -ENOMEM;
        int r = mk_claim_from_pod(pod, c, e);
        if (r < 0)
                return r;
        if (r > 0 && streq(c->node, node)) {
                *ret = *c; /* a retried bind: keep what was reserved */
                return 0;
        }
        if ((r = mk_pod_request_parse(pod, s->cfg, req, e)) < 0)
                return r;
        struct mk_sched_pod_ask ask = {.req = req, .uid = c->uid, .pod = pod};
        r = mk_sched_decide_reserve(s->cfg, &s->cache, &ask, node, now, c, e);
        if (r >= 0)
                *ret = *c;
        return r;
}

void mk_sched_note_ledger(struct mk_sched *s, const json_t *ledger, const char *skip_uid, int64_t now) {
        mk_sched_cache_sweep(&s->cache, now);
        _cleanup_free_ struct mk_claim *c = malloc(sizeof(*c));
        size_t i;
        json_t *entry;
        json_array_foreach(ledger, i, entry) {
                struct mk_error e = {0};
                if (!c || mk_sched_ledger_claim(entry, c, &e) < 0 || streq(c->uid, skip_uid))
                        continue; /* entries were checked by mk_sched_ledger_read */
                if (mk_sched_cache_note_claim(&s->cache, c, MK_SCHED_LEDGER_TTL_S) < 0)
                        break;
        }
}

void mk_sched_unreserve(struct mk_sched *s, const char *uid) {
        mk_sched_cache_drop_pending(&s->cache, uid);
}
