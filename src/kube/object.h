/* Reading Kubernetes objects (jansson values as the apiserver sends them):
 * metadata fields, annotations and labels, resource quantities, and a
 * pod's CPU and memory requests as kube-scheduler counts them; and the
 * Event object to post about one. Pure: no I/O, values borrowed from the
 * object. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/macro.h"

#define MK_K8S_NAME_MAX 254                    /* a DNS subdomain, with NUL */
#define MK_K8S_UID_MAX 64
#define MK_K8S_LABEL_MAX 64                    /* a DNS label, with NUL */

/* Kubernetes object-name rules (k8s.io/apimachinery/pkg/util/validation,
 * IsDNS1123Label and IsDNS1123Subdomain): a label is 1 to 63 of [a-z0-9-],
 * starting and ending alphanumeric (a namespace); a subdomain is such
 * labels joined by '.', 1 to 253 characters (a pod or node name). 0 when
 * `s` follows the rule, else -EINVAL with a short reason in *ret_why
 * (static text; may be NULL). So "", ".", "..", "a;b", "A" and "a/b" are
 * refused: a valid name is also a safe URL path segment. */
int mk_kube_name_check_label(const char *s, const char **ret_why) _wur_;
int mk_kube_name_check_subdomain(const char *s, const char **ret_why) _wur_;

/* Percent-encodes `seg` for one URL path segment (RFC 3986: all but
 * unreserved characters) into buf. -ENOBUFS when it does not fit. */
int mk_kube_path_segment(const char *seg, char *buf, size_t size) _nonnull_(1, 2) _wur_;

/* The apiserver path of a core (v1) object into buf:
 * "/api/v1/namespaces/<ns>/<resource>/<name>", or "/api/v1/<resource>/<name>"
 * when `ns` is NULL (a cluster-scoped object); ns and name percent-encoded
 * with mk_kube_path_segment. -EINVAL when ns or name is "", "." or "..";
 * -ENOBUFS when it does not fit (MK_K8S_PATH_MAX always does for names
 * up to MK_K8S_NAME_MAX). */
#define MK_K8S_PATH_MAX (6 * MK_K8S_NAME_MAX + 64)
int mk_kube_core_path(const char *ns, const char *resource, const char *name, char *buf, size_t size)
        _nonnull_(2, 3, 4) _wur_;

/* metadata.<key> of `o` as a string (name, namespace, uid,
 * resourceVersion...); NULL when absent or not a string. */
const char *mk_kube_meta(const json_t *o, const char *key) _nonnull_(2);

/* metadata.annotations[key] / metadata.labels[key] of `o`; NULL when
 * absent or not a string. These three also give NULL for a string that
 * holds an embedded NUL (the apiserver allows one; a C string would be a
 * shorter, different value): callers that must tell that apart check the
 * object with mk_kube_object_has_nul first. */
const char *mk_kube_annotation(const json_t *o, const char *key) _nonnull_(2);
const char *mk_kube_label(const json_t *o, const char *key) _nonnull_(2);

/* True for annotation keys migkit reads: "migkit.io/", "nvidia.com/" and
 * "hami.io/" ones. */
bool mk_kube_annotation_ours(const char *key) _nonnull_(1);

/* True when a string of `obj` that migkit may read holds an embedded NUL
 * (JSON "\u0000", which the apiserver accepts): every string but the
 * values of metadata.annotations that are not ours. `where` (may be NULL)
 * gets the path of the first one ("metadata.annotations.migkit.io/x",
 * "spec.containers[0].args[1]"), cut to `size`. Readers treat such an
 * object as malformed (skip it, log it, count it) rather than read a
 * truncated string. */
bool mk_kube_object_has_nul(const json_t *obj, char *where, size_t size);

/* Parses a Kubernetes quantity ("500m", "2", "1Gi", "10M", "1e3", "5e-1",
 * apimachinery resource.Quantity's grammar) into milli-units, rounding
 * fractions up as its MilliValue() does. -EINVAL for anything else (a
 * negative one included), -ERANGE over 2^64-1 milli or an exponent beyond
 * +-18; *ret only on success. */
int mk_quantity_parse_milli(const char *s, uint64_t *ret) _nonnull_(1, 2) _wur_;

/* The pod's CPU (milli) and memory (bytes) requests as kube-scheduler
 * counts them: the sum over its containers, or the largest init container
 * when that is more (requests, else limits; unparseable values count 0). */
void mk_pod_resource_requests(const json_t *pod, uint64_t *ret_cpu_milli, uint64_t *ret_memory_bytes)
        _nonnull_(2, 3);

/* A container's request of resource `res` in milli-units (requests, else
 * limits; 0 when absent or not a quantity string). */
uint64_t mk_kube_container_request(const json_t *ctr, const char *res) _nonnull_(2);

/* A core/v1 Event about object `kind` `name` (uid may be NULL) in
 * namespace `ns`, reported by `component` on `host`, timestamped now:
 * POST it to /api/v1/namespaces/<ns>/events. NULL when out of memory. */
json_t *mk_kube_event_new(const char *ns, const char *kind, const char *name, const char *uid, bool warning,
                          const char *reason, const char *message, const char *component, const char *host)
        _nonnull_(1, 2, 3, 6, 7, 8, 9);
