/* A watch stream cut into events: the bytes of the response, in chunks
 * that may end anywhere, into top-level JSON objects, each checked and
 * handed to the caller's callback, the resourceVersion to resume from kept
 * after each. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

static const char *const event_type_table[_MK_KUBE_EVENT_TYPE_MAX] = {
        [MK_KUBE_EVENT_ADDED] = "ADDED",
        [MK_KUBE_EVENT_MODIFIED] = "MODIFIED",
        [MK_KUBE_EVENT_DELETED] = "DELETED",
        [MK_KUBE_EVENT_BOOKMARK] = "BOOKMARK",
        [MK_KUBE_EVENT_ERROR] = "ERROR",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_kube_event_type, enum mk_kube_event_type, event_type_table, _MK_KUBE_EVENT_TYPE_MAX, _MK_KUBE_EVENT_TYPE_INVALID);

void kube_watch_done(struct watch *w) {
        mk_buf_done(&w->frame);
}

static int watch_event(struct watch *w) {
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *ev = json_loadb(w->frame.data, w->frame.len, JSON_ALLOW_NUL, &jerr);
        if (!ev)
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: an event is not JSON: %s", w->path, jerr.text);
        const char *type = json_string_value(json_object_get(ev, "type"));
        json_t *obj = json_object_get(ev, "object");
        enum mk_kube_event_type t = mk_kube_event_type_from_string(type);
        if (t < 0)
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: unknown event type '%s'", w->path,
                                    type ? type : "(none)");
        if (!json_is_object(obj))
                return mk_error_set(w->e, -EBADMSG, "WATCH %s: %s event without an object", w->path, type);
        if (t == MK_KUBE_EVENT_ERROR) {
                long code = (long) json_integer_value(json_object_get(obj, "code"));
                const char *reason = json_string_value(json_object_get(obj, "reason"));
                const char *msg = json_string_value(json_object_get(obj, "message"));
                int r = code > 0 ? mk_kube_status_to_errno(code, reason) : -EIO;
                return mk_error_set(w->e, r, "WATCH %s: %s (ERROR event, code %ld%s%s)", w->path,
                                    msg ? msg : "no message", code, reason ? " " : "", reason ? reason : "");
        }
        const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        int r = w->fn(t, obj, w->userdata);
        if (r < 0)
                return mk_error_set(w->e, r, "WATCH %s: the %s event was not handled: %s", w->path, type,
                                    strerror(-r));
        /* The event is consumed: a resumed watch starts after it. */
        if (rv && *rv) {
                char *copy = strdup(rv);
                if (!copy)
                        return -ENOMEM;
                free(*w->resource_version);
                *w->resource_version = copy;
        }
        w->events++;
        return r > 0 ? 1 : 0;
}

/* Splits the stream into top-level JSON values (the apiserver writes one
 * per line, but chunks may end anywhere) and handles each. Returns 0, or
 * sets w->result and returns -1 to end the transfer. */
int kube_watch_feed(struct watch *w, const char *data, size_t len) {
        size_t start = 0;
        int r;
        for (size_t i = 0; i < len; i++) {
                char ch = data[i];
                if (w->depth == 0) {
                        if (strchr(" \t\r\n", ch)) {
                                start = i + 1;
                                continue;
                        }
                        if (ch != '{') {
                                w->result = mk_error_set(w->e, -EBADMSG, "WATCH %s: garbage in the stream",
                                                         w->path);
                                return -1;
                        }
                        start = i;
                        w->depth = 1;
                        continue;
                }
                if (w->in_string) {
                        if (w->escape)
                                w->escape = false;
                        else if (ch == '\\')
                                w->escape = true;
                        else if (ch == '"')
                                w->in_string = false;
                        continue;
                }
                if (ch == '"')
                        w->in_string = true;
                else if (ch == '{' || ch == '[')
                        w->depth++;
                else if (ch == '}' || ch == ']')
                        w->depth--;
                if (w->depth > 0)
                        continue;
                r = mk_buf_append(&w->frame, data + start, i + 1 - start);
                if (r >= 0)
                        r = watch_event(w);
                mk_buf_reset(&w->frame);
                start = i + 1;
                if (r == -E2BIG)
                        goto too_big;
                if (r != 0) {
                        w->result = r;
                        return -1;
                }
        }
        if (w->depth > 0) {
                r = mk_buf_append(&w->frame, data + start, len - start);
                if (r == -E2BIG)
                        goto too_big;
                if (r < 0) {
                        w->result = r;
                        return -1;
                }
        }
        return 0;
too_big:
        w->result = mk_error_set(w->e, -E2BIG, "WATCH %s: an event is larger than %zu bytes", w->path,
                                 w->frame.cap);
        return -1;
}
