/* LIST + WATCH with a store keyed by namespace/name. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "kube/object.h"

struct informer {
        const char *path;
        const struct mk_kube_informer_opts *o;
        mk_kube_informer_fn fn;
        void *userdata;
        json_t *store;          /* "namespace/name" -> object */
        json_t *bad;            /* "namespace/name" -> true: malformed now (said once) */
        unsigned bad_objects;   /* skipped for want of metadata.name */
        int fn_result;          /* fn's last non-zero answer */
};

/* An object the apiserver sent without metadata.name: skipped, never fatal
 * (input must not stop the informer). The first of a run is a warning, the
 * rest debug: a bad object comes back on every relist and watch event. */
static void skip_bad_object(struct informer *in, json_t *obj, const char *where) {
        const char *uid = mk_kube_meta(obj, "uid");
        _cleanup_free_ char *text = uid ? NULL : json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
        char id[160];
        snprintf(id, sizeof(id), "%s%.150s", uid ? "uid:" : "", uid ? uid : text ? text : "?");
        for (char *p = id; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        *p = '?';
        if (in->bad_objects++ == 0)
                log_warning("Informer on '%s': skipping an object without metadata.name (%s): %s; "
                            "further ones at debug level", in->path, where, id);
        else
                log_debug_area("k8s", "Informer on '%s': skipping an object without metadata.name (%s): %s",
                               in->path, where, id);
}

/* An object whose strings hold a NUL where we may read them: true when it
 * is to be skipped. Said (warning, counter, on_bad) when it goes bad; a
 * readable version of a key that was bad is said too (info). */
static bool skip_nul_object(struct informer *in, json_t *obj, const char *key) {
        char where[160];
        bool was = json_object_get(in->bad, key) != NULL;
        if (!mk_kube_object_has_nul(obj, where, sizeof(where))) {
                if (was) {
                        (void) json_object_del(in->bad, key);
                        log_info("Informer on '%s': object '%s' is readable again", in->path, key);
                }
                return false;
        }
        for (char *p = where; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        *p = '?';
        if (in->o->bad_objects)
                atomic_fetch_add(in->o->bad_objects, 1);
        if (was) {
                log_debug_area("k8s", "Informer on '%s': object '%s' still holds a NUL in %s, skipped", in->path,
                               key, where);
                return true;
        }
        (void) json_object_set_new(in->bad, key, json_true());
        log_warning("Informer on '%s': object '%s' holds a NUL byte in %s; skipping it (its last readable "
                    "version, if any, stays) until that is fixed",
                    in->path, key, where);
        if (in->o->on_bad) {
                char why[200];
                snprintf(why, sizeof(why), "%s holds a NUL byte (\\u0000)", where);
                in->o->on_bad(obj, why, in->userdata);
        }
        return true;
}

static int object_key(json_t *obj, char **ret) {
        const char *name = mk_kube_meta(obj, "name"), *ns = mk_kube_meta(obj, "namespace");
        if (!name || !*name)
                return -EBADMSG;
        if (asprintf(ret, "%s/%s", ns ? ns : "", name) < 0)
                return -ENOMEM;
        return 0;
}

static const char *object_rv(json_t *obj) {
        return mk_kube_meta(obj, "resourceVersion");
}

static int call(struct informer *in, enum mk_kube_event_type type, json_t *obj, json_t *old) {
        int r = in->fn(type, obj, old, in->userdata);
        if (r != 0)
                in->fn_result = r;
        return r;
}

/* Replaces the store with the listed items, calling back for differences. */
static int sync_list(struct informer *in, json_t *list, struct mk_error *e) {
        _cleanup_(json_decrefp) json_t *fresh = json_object();
        size_t i;
        json_t *item;
        int r;

        if (!fresh)
                return -ENOMEM;
        json_array_foreach(json_object_get(list, "items"), i, item) {
                _cleanup_free_ char *key = NULL;
                r = object_key(item, &key);
                if (r == -EBADMSG) {
                        skip_bad_object(in, item, "in a LIST");
                        continue;
                }
                if (r < 0)
                        return r;
                json_t *old = json_object_get(in->store, key);
                if (skip_nul_object(in, item, key)) {
                        if (old && json_object_set(fresh, key, old) < 0)
                                return -ENOMEM; /* the last readable version stays */
                        continue;
                }
                if (json_object_set(fresh, key, item) < 0)
                        return -ENOMEM;
                if (!old)
                        r = call(in, MK_KUBE_EVENT_ADDED, item, NULL);
                else if (!object_rv(item) || !object_rv(old) || !streq(object_rv(item), object_rv(old)))
                        r = call(in, MK_KUBE_EVENT_MODIFIED, item, old);
                else
                        r = 0;
                if (r != 0)
                        return r;
        }
        const char *key;
        json_t *old;
        json_object_foreach(in->store, key, old) {
                if (json_object_get(fresh, key))
                        continue;
                (void) json_object_del(in->bad, key);
                r = call(in, MK_KUBE_EVENT_DELETED, old, old);
                if (r != 0)
                        return r;
        }
        json_decref(in->store);
        in->store = TAKE_PTR(fresh);
        return 0;
}

static int on_event(enum mk_kube_event_type type, json_t *obj, void *userdata) {
        struct informer *in = userdata;
        _cleanup_free_ char *key = NULL;
        int r;

        if (type == MK_KUBE_EVENT_BOOKMARK)
                return 0;
        r = object_key(obj, &key);
        if (r == -EBADMSG) {
                skip_bad_object(in, obj, "in a WATCH event");
                return 0;
        }
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *old = json_incref(json_object_get(in->store, key));
        if (type == MK_KUBE_EVENT_DELETED) {
                (void) json_object_del(in->bad, key);
                (void) json_object_del(in->store, key);
                bool nul = mk_kube_object_has_nul(obj, NULL, 0);
                if (nul && !old)
                        return 0; /* never passed on: nothing to delete */
                return call(in, MK_KUBE_EVENT_DELETED, nul ? old : obj, old);
        }
        if (skip_nul_object(in, obj, key))
                return 0;
        if (json_object_set(in->store, key, obj) < 0)
                return -ENOMEM;
        return call(in, old ? MK_KUBE_EVENT_MODIFIED : MK_KUBE_EVENT_ADDED, obj, old);
}

/* LISTs and syncs the store; on success *ret_rv is the list's version
 * (-ENOMEM, not transient, when it cannot be copied: the caller stops). A
 * callback's verdict stays in in->fn_result. */
static int relist(struct informer *in, struct mk_kube *k, const struct mk_kube_list_opts *lo, char **ret_rv,
                  struct mk_error *e) {
        _cleanup_(json_decrefp) json_t *list = NULL;
        int r = mk_kube_list(k, in->path, lo, &list, e);
        if (r < 0)
                return r;
        r = sync_list(in, list, e);
        if (r < 0 || (r != 0 && in->fn_result != 0))
                return r;
        const char *v = mk_kube_meta(list, "resourceVersion");
        char *rv = strdup(v ? v : "");
        if (!rv)
                return -ENOMEM;
        log_debug_area("k8s", "Informer on '%s': %zu objects at version '%s'", in->path, json_object_size(in->store),
                       rv);
        *ret_rv = rv;
        return r;
}

int mk_kube_informer_run(struct mk_kube *k, const char *path, const struct mk_kube_informer_opts *o,
                         mk_kube_informer_fn fn, void *userdata, struct mk_error *e) {
        static const struct mk_kube_informer_opts none = {};
        if (!o)
                o = &none;
        struct informer in = {
                .path = path, .o = o, .fn = fn, .userdata = userdata, .store = json_object(), .bad = json_object()};
        unsigned failures = 0;
        uint64_t rnd = 0;
        int r;

        if (!in.store || !in.bad) {
                json_decref(in.store);
                json_decref(in.bad);
                return -ENOMEM;
        }
        struct mk_kube_list_opts lo = {
                .label_selector = o->label_selector,
                .field_selector = o->field_selector,
                .limit = o->page_limit,
        };
        struct mk_kube_watch_opts wo = {
                .label_selector = o->label_selector,
                .field_selector = o->field_selector,
                .timeout_seconds = o->watch_timeout_seconds,
                .allow_bookmarks = true,
                .cancel = o->cancel,
        };

        /* As client-go's reflector: LIST, then WATCH from the list's version;
         * a watch that breaks (the apiserver restarted, the network) is
         * resumed from the last version seen, and only a version the server
         * no longer has (410 Gone) or a failed LIST makes it LIST again. */
        _cleanup_free_ char *rv = NULL;
        for (;;) {
                if (o->cancel && atomic_load(o->cancel)) {
                        r = mk_error_set(e, -ECANCELED, "informer on %s: cancelled", path);
                        break;
                }
                r = 0;
                if (!rv) {
                        r = relist(&in, k, &lo, &rv, e);
                        if (r != 0 && in.fn_result != 0)
                                break;
                        if (r >= 0)
                                failures = 0;
                }
                if (r >= 0) {
                        bool progressed = false;
                        wo.progressed = &progressed;
                        r = mk_kube_watch(k, path, &wo, &rv, on_event, &in, e);
                        if (progressed)
                                failures = 0; /* a watch that worked a while: its break starts the backoff anew */
                        if (in.fn_result != 0)
                                break;
                        if (r == 0)
                                continue; /* cannot happen without `once`; resume */
                }
                /* What the apiserver sent is data: a stream or a page we cannot
                 * read is retried (from a fresh LIST), never the end of the loop. */
                bool unreadable = r == -EBADMSG || r == -E2BIG || r == -EPROTO;
                if (r == -ECANCELED || (!unreadable && !mk_kube_error_is_transient(r)))
                        break;
                failures++;
                if (unreadable) {
                        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
                        (void) mk_log_full(failures == 1 ? MK_LOG_WARNING : MK_LOG_DEBUG, NULL, 0,
                                           "Informer on '%s': %s; listing again", path,
                                           e ? mk_error_format(e, buf, sizeof(buf)) : strerror(-r));
                        free(rv);
                        rv = NULL;
                }
                if (r == -ESTALE) {
                        free(rv);
                        rv = NULL;
                        log_debug_area("k8s", "Informer on '%s': version too old, relisting", path);
                        if (failures == 1)
                                continue; /* at once; after an outage, with the backoff */
                }
                unsigned d = mk_kube_backoff_ms(k, failures, &rnd);
                log_debug_area("k8s", "Informer on '%s': %s, %s in %u ms", path, strerror(-r),
                               rv ? "resuming the watch" : "relisting", d);
                if (mk_kube_sleep_ms(d, o->cancel) < 0) {
                        r = mk_error_set(e, -ECANCELED, "informer on %s: cancelled", path);
                        break;
                }
        }
        json_decref(in.store);
        json_decref(in.bad);
        if (in.fn_result != 0)
                return in.fn_result > 0 ? 0 : in.fn_result;
        return r;
}
