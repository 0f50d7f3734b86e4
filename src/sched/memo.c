/* The extender's decision memo (memo.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/memo.h"
#include "sched/request.h"

static atomic_uint_fast64_t memo_gen;

void mk_sched_memo_forget(struct mk_sched_memo *m) {
        for (size_t i = 0; i < MK_SCHED_MEMO_SLOTS; i++)
                m->shape[i] = 0;
        m->gen = (uint64_t) atomic_fetch_add(&memo_gen, 1) + 1;
}

void mk_sched_memo_done(struct mk_sched_memo *m) {
        free(m->reason);
        m->reason = NULL;
        mk_sched_memo_forget(m);
}

void mk_sched_memo_put(struct mk_sched_memo *m, uint64_t shape, int r, int priority, const char *reason) {
        if (atomic_flag_test_and_set(&m->busy))
                return;
        size_t k = MK_SCHED_MEMO_SLOTS;
        for (size_t i = 0; i < MK_SCHED_MEMO_SLOTS && k == MK_SCHED_MEMO_SLOTS; i++)
                if (m->shape[i] == shape)
                        k = i;
        /* A failure's reason is kept from the shape's second decision on
         * the node (the slot already holds it): pods of many shapes evict
         * each other before a filter asks again, and copying every failed
         * node's reason into its memo cost a filter more than the memo
         * gave it; prioritize, which follows the filter of the same shape,
         * needs no reason. */
        if (k == MK_SCHED_MEMO_SLOTS) {
                k = m->next++ % MK_SCHED_MEMO_SLOTS;
                reason = NULL;
        }
        if (r < 0 && reason && !m->reason)
                m->reason = calloc(MK_SCHED_MEMO_SLOTS, sizeof(*m->reason));
        m->shape[k] = shape;
        m->r[k] = r;
        m->priority[k] = (int8_t) priority;
        m->has_reason[k] = r < 0 && reason && m->reason;
        if (m->has_reason[k]) { /* a copy, not a snprintf("%s"): it runs for every failed node of a filter */
                size_t len = strnlen(reason, sizeof(m->reason[k]) - 1);
                memcpy(m->reason[k], reason, len);
                m->reason[k][len] = 0;
        }
        atomic_flag_clear(&m->busy);
}

int mk_sched_shapes_init(struct mk_sched_shapes *s) {
        *s = (struct mk_sched_shapes) {.next = 1};
        if (pthread_mutex_init(&s->lock, NULL) != 0)
                return -ENOMEM;
        if (pthread_mutex_init(&s->handoff.lock, NULL) != 0) {
                pthread_mutex_destroy(&s->lock);
                return -ENOMEM;
        }
        return 0;
}

void mk_sched_shapes_done(struct mk_sched_shapes *s) {
        mk_hashmap_clear(&s->ids, free);
        pthread_mutex_destroy(&s->lock);
        for (size_t i = 0; i < MK_SCHED_HANDOFF_SLOTS; i++)
                free(s->handoff.slot[i].v);
        pthread_mutex_destroy(&s->handoff.lock);
}

void mk_sched_handoff_put(struct mk_sched_handoff *h, const char *uid, uint64_t shape, int64_t now,
                          struct mk_sched_handoff_verdict *v, size_t n) {
        size_t len = strlen(uid);
        if (shape == 0 || len == 0 || len >= MK_SCHED_UID_MAX) {
                free(v);
                return;
        }
        struct mk_sched_handoff_verdict *old = NULL;
        pthread_mutex_lock(&h->lock);
        struct mk_sched_handoff_slot *sl = NULL;
        for (size_t i = 0; i < MK_SCHED_HANDOFF_SLOTS && !sl; i++) /* the pod's last filter is replaced */
                if (h->slot[i].shape && streq(h->slot[i].uid, uid))
                        sl = &h->slot[i];
        if (!sl)
                sl = &h->slot[h->next++ % MK_SCHED_HANDOFF_SLOTS];
        old = sl->v;
        sl->shape = shape;
        sl->time = now;
        memcpy(sl->uid, uid, len + 1);
        sl->v = v;
        sl->n = n;
        pthread_mutex_unlock(&h->lock);
        free(old);
}

struct mk_sched_handoff_verdict *mk_sched_handoff_take(struct mk_sched_handoff *h, const char *uid, uint64_t shape,
                                                       int64_t now, size_t *ret_n) {
        struct mk_sched_handoff_verdict *v = NULL;
        *ret_n = 0;
        if (shape == 0 || !*uid)
                return NULL;
        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < MK_SCHED_HANDOFF_SLOTS; i++) {
                struct mk_sched_handoff_slot *sl = &h->slot[i];
                if (!sl->shape || !streq(sl->uid, uid))
                        continue;
                if (sl->shape == shape && now >= sl->time && now - sl->time <= MK_SCHED_HANDOFF_TTL_S) {
                        v = sl->v;
                        *ret_n = sl->n;
                } else
                        free(sl->v);
                *sl = (struct mk_sched_handoff_slot) {0};
                break;
        }
        pthread_mutex_unlock(&h->lock);
        return v;
}

/* Appends `v` to the shape text as "<length>:<v>" (no separator can be forged). */
static bool shape_add(char *buf, size_t size, size_t *len, const char *fmt, ...) _printf_(4, 5);
static bool shape_add(char *buf, size_t size, size_t *len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(buf + *len, size - *len, fmt, ap);
        va_end(ap);
        if (k < 0 || (size_t) k >= size - *len)
                return false;
        *len += (size_t) k;
        return true;
}

uint64_t mk_sched_shape_id(struct mk_sched_shapes *s, const struct mk_pod_request *req) {
        char buf[MK_SCHED_SHAPE_MAX];
        size_t len = 0;
        bool ok = shape_add(buf, sizeof(buf), &len,
                            "%zu|%d%d%d|%" PRIu64 "|%" PRIu64 "|%zu:%s|%zu:%s|%zu:%s|%zu:%s|%zu:%s", req->n_containers,
                            (int) req->mode_named, (int) req->allow_mig, (int) req->allow_soft, req->cpu_milli,
                            req->memory_bytes,
                            strlen(req->variant), req->variant, strlen(req->use_types), req->use_types,
                            strlen(req->nouse_types), req->nouse_types, strlen(req->node_policy), req->node_policy,
                            strlen(req->gpu_policy), req->gpu_policy);
        for (size_t i = 0; ok && i < req->n_containers && i < MK_MAX_POD_CONTAINERS; i++) {
                const struct mk_pod_request_container *c = &req->containers[i];
                ok = shape_add(buf, sizeof(buf), &len, "|%u,%u,%" PRIu64 ",%u,%u", c->index, c->gpus, c->mem_mib,
                               c->mem_percent, c->cores_percent);
        }
        if (!ok)
                return 0;
        uint64_t id = 0;
        pthread_mutex_lock(&s->lock);
        uint64_t *v = mk_hashmap_get(&s->ids, buf);
        if (v)
                id = *v;
        else {
                if (s->ids.n >= MK_SCHED_MEMO_MAX_SHAPES)
                        mk_hashmap_clear(&s->ids, free); /* ids are not reused: old memos just stop matching */
                v = malloc(sizeof(*v));
                if (v && mk_hashmap_put(&s->ids, buf, v) == 0)
                        *v = id = s->next++;
                else
                        free(v);
        }
        pthread_mutex_unlock(&s->lock);
        return id;
}
