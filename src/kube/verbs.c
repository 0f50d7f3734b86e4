/* The single-object verbs: GET, POST, PUT, PATCH (merge, strategic, JSON
 * patch), DELETE, each with the retry policy its method allows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

static const char *const patch_type_table[_MK_KUBE_PATCH_TYPE_MAX] = {
        [MK_KUBE_PATCH_MERGE] = "merge",
        [MK_KUBE_PATCH_STRATEGIC] = "strategic",
        [MK_KUBE_PATCH_JSON] = "json",
};

static const char *const patch_content_type_table[_MK_KUBE_PATCH_TYPE_MAX] = {
        [MK_KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [MK_KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [MK_KUBE_PATCH_JSON] = "application/json-patch+json",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_kube_patch_type, enum mk_kube_patch_type, patch_type_table, _MK_KUBE_PATCH_TYPE_MAX, _MK_KUBE_PATCH_TYPE_INVALID);

const char *mk_kube_patch_content_type(enum mk_kube_patch_type t) {
        return t >= 0 && t < _MK_KUBE_PATCH_TYPE_MAX ? patch_content_type_table[t] : NULL;
}

int mk_kube_get(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) {
        struct request rq = {.method = "GET", .path = path, .timeout_ms = k->o.request_timeout_ms};
        return kube_request(k, &rq, ret, e);
}

static int send_body(struct mk_kube *k, const char *method, const char *path, const char *content_type,
                     enum retry_policy retry, const json_t *body, json_t **ret, struct mk_error *e) {
        _cleanup_free_ char *data = json_dumps(body, JSON_COMPACT);
        if (!data)
                return mk_error_set(e, -ENOMEM, "%s %s: cannot serialise the body", method, path);
        struct request rq = {
                .method = method,
                .path = path,
                .content_type = content_type,
                .body = data,
                .body_len = strlen(data),
                .retry = retry,
                .timeout_ms = k->o.request_timeout_ms,
        };
        return kube_request(k, &rq, ret, e);
}

int mk_kube_post(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e) {
        return send_body(k, "POST", path, "application/json", RETRY_UNSENT, body, ret, e);
}

int mk_kube_put(struct mk_kube *k, const char *path, const json_t *body, json_t **ret, struct mk_error *e) {
        return send_body(k, "PUT", path, "application/json", RETRY_IDEMPOTENT, body, ret, e);
}

int mk_kube_patch(struct mk_kube *k, const char *path, enum mk_kube_patch_type type, const json_t *patch,
                  json_t **ret, struct mk_error *e) {
        const char *ct = mk_kube_patch_content_type(type);
        if (!ct)
                return mk_error_set(e, -EINVAL, "PATCH %s: unknown patch type %d", path, (int) type);
        return send_body(k, "PATCH", path, ct, type == MK_KUBE_PATCH_JSON ? RETRY_UNSENT : RETRY_IDEMPOTENT, patch,
                         ret, e);
}

int mk_kube_patch_metadata(struct mk_kube *k, const char *path, const char *field, const json_t *changes,
                           json_t **ret, struct mk_error *e) {
        if (json_typeof(changes) != JSON_OBJECT)
                return mk_error_set(e, -EINVAL, "PATCH %s: the %s changes must be a JSON object", path, field);
        _cleanup_(json_decrefp) json_t *patch = json_pack("{s:{s:O}}", "metadata", field, changes);
        if (!patch)
                return -ENOMEM;
        return mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, patch, ret, e);
}

int mk_kube_delete(struct mk_kube *k, const char *path, json_t **ret, struct mk_error *e) {
        struct request rq = {.method = "DELETE", .path = path, .timeout_ms = k->o.request_timeout_ms};
        return kube_request(k, &rq, ret, e);
}
