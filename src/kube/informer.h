/* A LIST + WATCH loop (client-go's informer, without resync): keeps the
 * objects of a collection in a store, calls back for each change, relists
 * after 410 Gone, and backs off and goes on across apiserver outages. For
 * daemons that follow a few objects (the manager's own Node). */
#pragma once

#include <stdatomic.h>

#include <jansson.h>

#include "base/macro.h"
#include "kube/kube.h"

struct mk_error;

/* ADDED (old NULL), MODIFIED (old: the previous version) or DELETED (object:
 * the deleted object, old: the version last seen) for one object; borrowed
 * references. Return < 0 to end the loop with that error, > 0 to end it
 * with 0, 0 to go on. */
typedef int (*mk_kube_informer_fn)(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata);

struct mk_kube_informer_opts {
        const char *label_selector;
        const char *field_selector;
        unsigned page_limit;            /* LIST page size; 0: MK_KUBE_LIST_PAGE */
        unsigned watch_timeout_seconds; /* 0: random 5-10 min */
        atomic_bool *cancel;            /* set to end the loop with -ECANCELED within about a second */
        atomic_ulong *bad_objects;      /* NULL, or counts the object versions skipped as malformed */
        /* NULL, or called (in the loop's thread) when an object becomes
         * malformed, once until it is readable again or deleted; `why` names
         * the field. For an Event on the object. */
        void (*on_bad)(json_t *object, const char *why, void *userdata);
};

/* Malformed objects are that object's problem, never the loop's: one
 * without metadata.name, or one whose strings hold an embedded NUL where
 * migkit may read them (mk_kube_object_has_nul), is not passed to fn; the
 * last readable version of it stays (fn sees no change) until a readable
 * version comes or it is deleted (DELETED is passed as usual). The first
 * time an object goes bad is a warning (then debug until it is readable
 * again), counted in bad_objects and passed to on_bad.
 *
 * Lists `path` and calls fn with ADDED for each object, then watches from
 * the list's version and calls fn for each change. A watch that breaks is
 * resumed from the last version seen (client-go's reflector); a version
 * the server no longer has (410 Gone) or a failed LIST makes it list
 * again. After a relist, fn sees only the differences from what it saw
 * before: ADDED, MODIFIED (a new resourceVersion) and DELETED (gone
 * from the list). Transient errors (mk_kube_error_is_transient) and a
 * stream the client cannot read (-EBADMSG, -E2BIG, -EPROTO: garbage, an
 * event over the size cap) are retried forever with the client's backoff
 * (a relist after the latter); others (-EACCES, -ENOENT, -EINVAL: the
 * deployment's fault) end the loop with the error in e. Returns only on those, on fn's request, or on cancel. */
int mk_kube_informer_run(struct mk_kube *k, const char *path, const struct mk_kube_informer_opts *o,
                         mk_kube_informer_fn fn, void *userdata, struct mk_error *e) _nonnull_(1, 2, 4) _wur_;
