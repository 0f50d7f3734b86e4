/* Reservations follow what the device plugin handed out (follow.h). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/error.h"
#include "base/log.h"
#include "base/thread.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "grpc/client.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/dynamic/follow.h"
#include "plugin/dynamic/handout.h"
#include "plugin/dynamic/podres.h"

#define AREA "plugin"

struct mk_dp_follower {
        struct mk_dp_follower_options o;
        struct mk_dp_handouts h;        /* under o.serialize */
        struct mk_grpc_client *client;
        pthread_t thread;
        pthread_mutex_t lock;           /* due, stop */
        pthread_cond_t cond;
        bool due, stop, running;
        bool warned;                    /* the PodResources API was found missing (said once) */
        int64_t listed;                 /* unix seconds of the last List that answered; 0: none yet */
};

static void save(struct mk_dp_follower *f) {
        struct mk_error e = {0};
        int r = mk_dp_handouts_save(&f->h, f->o.state_path, &e);
        if (r < 0)
                log_warning_errno(r, "Cannot save what the device plugin handed out: %s, ignoring", e.msg);
}

static void wake(struct mk_dp_follower *f) {
        pthread_mutex_lock(&f->lock);
        f->due = true;
        pthread_cond_signal(&f->cond);
        pthread_mutex_unlock(&f->lock);
}

void mk_dp_follower_record(struct mk_dp_follower *f, const char *const *const *ids, const size_t *n_ids,
                           size_t n_containers, const struct mk_claim *assumed) {
        struct mk_error e = {0};
        int r = mk_dp_handouts_add(&f->h, ids, n_ids, n_containers, assumed, (int64_t) time(NULL), &e);
        if (r < 0) {
                log_warning_errno(r, "Cannot record the Allocate of pod %s/%s: %s, ignoring", assumed->namespace,
                                  assumed->name, e.msg);
                return;
        }
        save(f);
        wake(f);
}

/* The MIG UUIDs of c as a JSON array text (malloc'd), or NULL. */
static char *uuids_of(const struct mk_claim *c) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < c->n_devices; i++)
                if (json_array_append_new(a, json_string(c->devices[i].mig_uuid)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
        json_decref(a);
        return s;
}

/* The merge patch of fix f on `pod`, with its uid and resourceVersion as
 * preconditions (mk_dp_dynamic_allocated_patch's). */
static int fix_patch(const json_t *pod, const struct mk_dp_fix *f, json_t **ret) {
        _cleanup_(json_decrefp) json_t *p = NULL;
        int r = mk_dp_dynamic_allocated_patch(pod, (int64_t) time(NULL), &p);
        if (r < 0)
                return r;
        json_t *ann = json_object_get(json_object_get(p, "metadata"), "annotations");
        _cleanup_free_ char *uuids = uuids_of(&f->to), *res = NULL;
        if (!uuids)
                return -ENOMEM;
        if (f->kind == MK_DP_FIX_HANDED) {
                json_object_clear(ann);
                r = json_object_set_new(ann, MK_ANN_HANDED, json_string(uuids));
        } else {
                r = mk_claim_reservation_format(&f->to, &res);
                if (r < 0)
                        return r;
                if (json_object_set_new(ann, MK_ANN_RESERVATION, json_string(res)) < 0 ||
                    json_object_set_new(ann, MK_ANN_DEVICES, json_string(uuids)) < 0 ||
                    (!f->to.allocated && json_object_set_new(ann, MK_ANN_ALLOCATED, json_null()) < 0))
                        r = -ENOMEM;
        }
        if (r < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(p);
        return 0;
}

/* The node's pods with a reservation on it, and their objects (borrowed
 * from list). */
static int pods_of(const json_t *list, const char *node, struct mk_dp_pod **ret, const json_t ***ret_obj,
                   size_t *ret_n) {
        const json_t *items = json_object_get(list, "items");
        size_t n = json_array_size(items);
        if (n > MK_DP_DYNAMIC_MAX_PODS)
                return -E2BIG;
        _cleanup_free_ struct mk_dp_pod *pods = calloc(n ? n : 1, sizeof(*pods));
        _cleanup_free_ const json_t **obj = calloc(n ? n : 1, sizeof(*obj));
        if (!pods || !obj)
                return -ENOMEM;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                const json_t *pod = json_array_get(items, i);
                if (mk_claim_from_pod(pod, &pods[m].claim, NULL) <= 0 || !streq(pods[m].claim.node, node))
                        continue;
                pods[m].handed = mk_kube_annotation(pod, MK_ANN_HANDED);
                obj[m++] = pod;
        }
        *ret = TAKE_PTR(pods);
        *ret_obj = TAKE_PTR(obj);
        *ret_n = m;
        return 0;
}

/* One round under o.serialize: list the pods, decide, save, patch.
 * Returns the fixes wanted (>= 0; a failed patch is tried again next
 * round) or -errno. */
static int round_run(struct mk_dp_follower *f, const struct mk_dp_held *held, size_t n_held) {
        _cleanup_free_ char *selector = NULL;
        if (asprintf(&selector, "spec.nodeName=%s", f->o.node) < 0)
                return -ENOMEM;
        const struct mk_kube_list_opts lo = {.field_selector = selector};
        _cleanup_(json_decrefp) json_t *list = NULL;
        struct mk_error e = {0};
        int r = mk_kube_list(f->o.kube, "/api/v1/pods", &lo, &list, &e);
        if (r < 0)
                return log_warning_errno(r, "Cannot list the pods of node '%s' to follow the Allocates: %s",
                                         f->o.node, e.msg);
        _cleanup_free_ struct mk_dp_pod *pods = NULL;
        _cleanup_free_ const json_t **obj = NULL;
        size_t n = 0;
        r = pods_of(list, f->o.node, &pods, &obj, &n);
        if (r < 0)
                return log_warning_errno(r, "Cannot read the pods of node '%s': %m", f->o.node);
        _cleanup_free_ struct mk_dp_fix *fixes = NULL;
        size_t n_fixes = 0;
        bool changed = false;
        r = mk_dp_handouts_decide(&f->h, held, n_held, pods, n, &fixes, &n_fixes, &changed);
        if (r < 0)
                return log_warning_errno(r, "Cannot decide which reservations to move: %m");
        if (mk_dp_handouts_prune(&f->h, held, n_held, pods, n, (int64_t) time(NULL)) > 0)
                changed = true;
        if (changed)
                save(f); /* before the patches: a displaced reservation must survive a crash */
        for (size_t i = 0; i < n_fixes; i++) {
                const struct mk_dp_fix *x = &fixes[i];
                const struct mk_claim *c = &pods[x->pod].claim;
                _cleanup_(json_decrefp) json_t *patch = NULL;
                char path[MK_K8S_PATH_MAX];
                mk_error_clear(&e);
                r = fix_patch(obj[x->pod], x, &patch);
                if (r >= 0 && mk_kube_core_path(c->namespace, "pods", c->name, path, sizeof(path)) < 0)
                        r = -EINVAL;
                if (r >= 0)
                        r = mk_kube_patch(f->o.kube, path, MK_KUBE_PATCH_MERGE, patch, NULL, &e);
                if (r < 0) {
                        /* 409: the pod changed since listed; the next round sees it. */
                        log_warning_errno(r, "Cannot move the reservation of pod %s/%s: %s", c->namespace, c->name,
                                          e.msg[0] ? e.msg : strerror(-r));
                        continue;
                }
                _cleanup_free_ char *from = uuids_of(c), *to = uuids_of(&x->to);
                if (x->kind == MK_DP_FIX_HANDED)
                        log_debug_area(AREA, "Pod %s/%s: %s %s", c->namespace, c->name, MK_ANN_HANDED,
                                       to ? to : "?");
                else
                        log_info("Pod %s/%s: reservation follows what kubelet handed out: %s -> %s%s",
                                 c->namespace, c->name, from ? from : "?", to ? to : "?",
                                 x->to.allocated ? "" : " (not allocated yet)");
        }
        return (int) MIN(n_fixes, (size_t) INT_MAX);
}

static void *follower_main(void *userdata) {
        struct mk_dp_follower *f = userdata;
        bool polling = false;
        pthread_mutex_lock(&f->lock);
        for (;;) {
                while (!f->due && !f->stop) {
                        if (!polling)
                                pthread_cond_wait(&f->cond, &f->lock);
                        else {
                                struct timespec t = mk_deadline_in_ms(f->o.interval_ms);
                                if (pthread_cond_timedwait(&f->cond, &f->lock, &t) == ETIMEDOUT)
                                        break;
                        }
                }
                if (f->stop)
                        break;
                f->due = false;
                pthread_mutex_unlock(&f->lock);

                struct mk_dp_held *held = NULL;
                size_t n_held = 0;
                int status = 0;
                struct mk_error e = {0};
                int r = mk_dp_podres_list(f->client, f->o.resource, &held, &n_held, &status, &e);
                if (r < 0 && !f->warned) {
                        f->warned = true;
                        /* No socket, nobody listening or no v1 service: an old kubelet or the API
                         * off; anything else (an answer refused, out of memory) says itself. */
                        bool absent = r == -ECONNREFUSED || r == -ENOENT || r == -EPROTO;
                        log_warning_errno(r,
                                          "Cannot list kubelet's PodResources at '%s' (%s)%s; reservations stay "
                                          "with the pod each Allocate assumed",
                                          f->o.socket, e.msg[0] ? e.msg : strerror(-r),
                                          absent ? ": kubelet before 1.20 or the API off?" : "");
                } else if (r < 0)
                        log_debug_area(AREA, "PodResources List: %s", e.msg);
                else if (f->warned) {
                        f->warned = false;
                        log_info("kubelet's PodResources API answers at '%s'", f->o.socket);
                }
                int64_t now = (int64_t) time(NULL);
                if (r >= 0)
                        f->listed = now;
                int fixed = 0;
                pthread_mutex_lock(f->o.serialize);
                if (r < 0 && mk_dp_handouts_expire_unseen(&f->h, f->listed, now) > 0)
                        save(f);
                for (unsigned k = 0; r >= 0 && k < MK_DP_FOLLOW_ROUNDS; k++) {
                        fixed = round_run(f, held, n_held);
                        if (fixed <= 0)
                                break;
                }
                polling = fixed != 0 || mk_dp_handouts_pending(&f->h, now);
                pthread_mutex_unlock(f->o.serialize);
                mk_dp_held_free(held, n_held);
                pthread_mutex_lock(&f->lock);
        }
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

int mk_dp_follower_start(const struct mk_dp_follower_options *o, struct mk_dp_follower **ret, struct mk_error *e) {
        struct mk_dp_follower *f = calloc(1, sizeof(*f));
        if (!f)
                return mk_error_set(e, -ENOMEM, "out of memory");
        f->o = *o;
        if (!f->o.socket)
                f->o.socket = MK_DP_PODRES_SOCKET;
        if (!f->o.interval_ms)
                f->o.interval_ms = MK_DP_FOLLOW_INTERVAL_MS;
        if (!f->o.resource)
                f->o.resource = MK_DP_DYNAMIC_RESOURCE;
        struct mk_error le = {0};
        int r = mk_dp_handouts_load(f->o.state_path, &f->h, &le);
        if (r < 0)
                log_warning_errno(r, "Cannot read what the device plugin handed out before: %s; starting afresh",
                                  le.msg);
        mk_cond_init_monotonic(&f->cond);
        pthread_mutex_init(&f->lock, NULL);
        r = mk_grpc_client_open(f->o.socket, &f->client, e);
        if (r >= 0) {
                f->due = f->h.n > 0; /* a round at once: a correction may have been cut short */
                r = -pthread_create(&f->thread, NULL, follower_main, f);
                if (r < 0)
                        mk_error_set(e, r, "Cannot start the follower thread");
        }
        if (r < 0) {
                f->running = false;
                mk_dp_follower_stop(f);
                return r;
        }
        f->running = true;
        *ret = f;
        return 0;
}

struct mk_dp_follower *mk_dp_follower_stop(struct mk_dp_follower *f) {
        if (!f)
                return NULL;
        if (f->running) {
                pthread_mutex_lock(&f->lock);
                f->stop = true;
                pthread_cond_signal(&f->cond);
                pthread_mutex_unlock(&f->lock);
                pthread_join(f->thread, NULL);
        }
        f->client = mk_grpc_client_close(f->client);
        mk_dp_handouts_done(&f->h);
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->lock);
        free(f);
        return NULL;
}
