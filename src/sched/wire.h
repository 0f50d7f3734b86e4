/* The wire format of the kube-scheduler extender protocol
 * (k8s.io/kube-scheduler/extender/v1: ExtenderArgs, ExtenderFilterResult,
 * HostPriorityList, ExtenderBindingArgs): input keys matched
 * case-insensitively as Go's decoder does, output keys exactly as
 * kube-scheduler's Go types name them, failures in the Error field.
 *
 * Reading: the pod and the candidate nodes of an ExtenderArgs (jansson),
 * and a fast scan that finds a plain NodeNames list in the raw body so
 * that jansson need not build 1,000s of strings (kept because `bench/run
 * extender` shows it halves a filter; tests/fuzz/fuzz-sched-body.c proves
 * it equal to the jansson path). Writing: the answers as json_t, or as
 * text straight from the decisions (what the HTTP server sends). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "kube/object.h"

struct mk_pod_request;
struct mk_sched_cand;
struct mk_sched_config;
struct mk_sched_decisions;

#define MK_MAX_EXTENDER_REQUEST (8u << 20)     /* one request body (ExtenderArgs with full Nodes can be large) */

/* --- reading ExtenderArgs --- */

/* Args.Pod: its request (with the config's resource names) and uid
 * (borrowed; may be NULL), the Pod object in *ret_pod. -EINVAL with the
 * message in `err` for a missing Pod or a malformed request. */
int mk_sched_wire_pod(const json_t *args, const struct mk_sched_config *cfg, struct mk_pod_request *req,
                      const char **ret_uid, const json_t **ret_pod, char *err, size_t size) _nonnull_(2, 3, 4, 5, 6);

/* Args.NodeNames, else Args.Nodes.items: the candidates (names borrowed
 * from args; malloc'd array) and whether by name. -EINVAL (neither list, a
 * node without a valid name), -E2BIG over MK_MAX_EXTENDER_NODES, with the
 * message in `err`. */
int mk_sched_wire_candidates(const json_t *args, struct mk_sched_cand **ret, size_t *ret_n, bool *ret_by_name,
                             char *err, size_t size) _nonnull_(2, 3, 4, 5);

/* A NodeNames list found in a raw request body: the array's bytes
 * [start, end) of the body and its names (NUL-terminated in buf, pointed
 * to by cands). */
struct mk_sched_names {
        size_t start, end;
        char *buf;
        struct mk_sched_cand *cands;
        size_t n;
};
void mk_sched_names_done(struct mk_sched_names *pn);

/* Finds the top-level key "NodeNames" (this spelling) of the object in
 * body whose value is an array of plain names (printable ASCII but quotes
 * and backslashes, 1 to MK_K8S_NAME_MAX - 1 bytes), at most
 * MK_MAX_EXTENDER_NODES. false when there is none, or anything at all is
 * unusual (an escape in a key, other names): jansson then reads the body
 * as it is, and reports what is wrong. The scan only finds the array; the
 * rest of the body is left to jansson. *ret only when true. */
bool mk_sched_scan_names(const char *body, size_t len, struct mk_sched_names *ret) _nonnull_(1, 3);

/* A streaming count of a request body, fed as its bytes arrive, so that
 * a body is refused before jansson builds its tree (a tree takes about
 * 250 bytes per value): the candidate nodes (elements of the top-level
 * NodeNames array or of Nodes.items, keys compared case-insensitively as
 * mk_sched_wire_candidates reads them; a key written with escapes is not
 * recognised here, jansson's count then refuses it) and all values. */
#define MK_SCHED_COUNT_DEPTH 64         /* nesting the count follows; deeper is refused */
struct mk_sched_body_count {
        size_t nodes, values;
        unsigned depth;
        uint64_t arrays;                /* bit d-1: the container at depth d is an array */
        uint8_t role[4];                /* depth 1..3: 0, or the candidate list / the Nodes object */
        bool in_string, escape, in_scalar, want_key, is_key;
        size_t key_len;                 /* of the key being read (up to 15 bytes kept) */
        char key[16];
        char last_key[3][16];           /* the last key read at depth 1, 2 ("" when longer) */
};
/* Feeds len bytes; -E2BIG with the message in err once more than max_nodes
 * candidates or max_values values are counted, or nesting passes
 * MK_SCHED_COUNT_DEPTH. Malformed JSON is left to jansson. */
int mk_sched_body_count_feed(struct mk_sched_body_count *c, const char *p, size_t len, size_t max_nodes,
                             size_t max_values, char *err, size_t size) _nonnull_(1, 2, 6);

/* --- writing answers --- */

/* ExtenderFilterResult with only Error set. */
json_t *mk_sched_wire_filter_error(const char *msg) _nonnull_(1);
/* ExtenderFilterResult / HostPriorityList of the decisions. */
json_t *mk_sched_wire_filter_json(const struct mk_sched_decisions *d) _nonnull_(1);
json_t *mk_sched_wire_prioritize_json(const struct mk_sched_decisions *d) _nonnull_(1);
/* The same as compact JSON text (malloc'd; NULL when out of memory),
 * written straight from the decisions for the NodeNames form (the Nodes
 * form, which echoes Node objects, goes through jansson). */
char *mk_sched_wire_filter_text(const struct mk_sched_decisions *d) _nonnull_(1);
char *mk_sched_wire_prioritize_text(const struct mk_sched_decisions *d) _nonnull_(1);

/* Appends `v` as a JSON string. Bytes that are not valid UTF-8 (a reason
 * cut in the middle of a character) become '?'. */
int mk_sched_wire_put_string(struct mk_buf *b, const char *v) _nonnull_(1, 2) _wur_;

/* --- bind --- */

/* ExtenderBindingArgs. */
struct mk_bind_args {
        char pod_name[MK_K8S_NAME_MAX];
        char pod_namespace[MK_K8S_NAME_MAX];
        char pod_uid[MK_K8S_UID_MAX];
        char node[MK_K8S_NAME_MAX];
};
/* -EINVAL naming the field (missing, not a string, not a valid name). */
int mk_bind_args_parse(const json_t *args, struct mk_bind_args *ret, struct mk_error *e) _nonnull_(2) _wur_;

/* The Binding object that binds the pod to the node. */
json_t *mk_bind_object(const struct mk_bind_args *a) _nonnull_(1);
