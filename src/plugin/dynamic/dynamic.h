/* The device plugin's dynamic MIG mode (`migkit device-plugin
 * --dynamic-mig`, docs/device-plugin.md "Dynamic MIG mode",
 * docs/scheduler.md "How the device plugin's Allocate finds its
 * reservation"): on a node whose MIG instances `migkit scheduler node`
 * creates per pod, nvidia.com/gpu is advertised as interchangeable replica
 * ids, and Allocate answers with the MIG devices the extender reserved for
 * the pod the kubelet admits, found among the node's pods with
 * mk_claim_match_allocate(). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/resources.h"
#include "plugin/dynamic/soft.h"

struct mk_kube;

#define MK_DP_DYNAMIC_RESOURCE "nvidia.com/gpu"
#define MK_DP_DYNAMIC_ENDPOINT "nvidia-gpu.sock"
#define MK_DP_DYNAMIC_ID_PREFIX "dyn-"          /* ids "dyn-<GPU uuid>::<k>" */
#define MK_DP_DYNAMIC_MAX_PODS 4096u            /* pods of one node looked at per Allocate */
#define MK_DP_DYNAMIC_ATTEMPTS 5                /* list + match + patch rounds on 409 Conflict */

/* The one resource of dynamic mode: per MIG-enabled GPU of s, as many ids
 * as the largest instance count of its GI profiles (7 on A100/H100), per
 * GPU with MIG off (shared by soft slices) `split` ids (0:
 * MK_DP_DEFAULT_SPLIT; over MK_DP_MAX_SPLIT: -EINVAL), "dyn-<GPU
 * uuid>::<k>", k from 0; base_id "dyn-<GPU uuid>", shared (so
 * GetPreferredAllocation spreads over GPUs), healthy; health then follows
 * the parent GPU (mk_dp_resources_set_health: any event of the GPU). A
 * MIG-enabled GPU reporting no profile gets none; a node with none gives a
 * resource list with no resource. -E2BIG over MK_DP_MAX_DEVICES, -ENOMEM.
 * *ret (free with mk_dp_resources_free) only on success. */
int mk_dp_dynamic_resources_build(const struct mk_snapshot *s, unsigned split, struct mk_dp_resources **ret,
                                  struct mk_error *e) _nonnull_(1, 3) _wur_;

/* From a pod LIST answer (an object with "items"), the reservation this
 * Allocate serves: each pod through mk_claim_from_pod() (pods without a
 * reservation or with a malformed one are skipped), then
 * mk_claim_match_allocate(claims, node, counts). On success *ret_claim is
 * the claim and *ret_pod the pod object (borrowed from `list`). -ENOENT
 * when none matches (the message says what was found), -E2BIG over
 * MK_DP_DYNAMIC_MAX_PODS pods, -EINVAL for a list without items. */
int mk_dp_dynamic_pick(const json_t *list, const char *node, const unsigned *counts, size_t n_counts,
                       struct mk_claim *ret_claim, const json_t **ret_pod, struct mk_error *e)
        _nonnull_(1, 2, 5, 6) _wur_;

/* The Allocate answers for claim c, one per container request (n_counts of
 * them, the claim's containers in order, as mk_claim_match_allocate checked):
 * a container's MIG devices looked up by UUID in `s` (a snapshot taken
 * after the node agent created them), or for soft slices its whole GPUs
 * (MIG off), answered per o's list and id strategies and device specs, as
 * mk_dp_allocate_devices(); soft slice containers also get
 * mk_dp_soft_response() (their directory <root>/containers/<pod
 * uid>_<index>, the opt-out read from `pod`, may be NULL). -ENOENT naming
 * a UUID the GPUs do not have, -EINVAL when the claim's containers do not
 * match counts or a container mixes MIG devices and soft slices, errors of
 * the resource build (the mixed strategy's rules). ret is an array of
 * n_counts responses, written only on success (each released with
 * mk_dp_response_done). */
int mk_dp_dynamic_responses(const struct mk_snapshot *s, const struct mk_claim *c, const unsigned *counts,
                            size_t n_counts, const json_t *pod, const struct mk_dp_options *o,
                            const struct mk_dp_soft_options *so, struct mk_dp_response *ret, struct mk_error *e)
        _nonnull_(1, 2, 6, 8) _wur_;

/* The merge patch marking `pod` allocated: migkit.io/mig-allocated = `when`
 * (RFC 3339 UTC), with the pod's metadata.uid and metadata.resourceVersion
 * as preconditions, so the apiserver refuses it (409) if the pod changed
 * since it was listed, e.g. another Allocate took it. -EINVAL for a pod
 * without uid or resourceVersion, -ENOMEM. *ret only on success. */
int mk_dp_dynamic_allocated_patch(const json_t *pod, int64_t when, json_t **ret) _nonnull_(1, 3) _wur_;

/* Takes a snapshot of the node's GPUs (the daemon's NVML). */
typedef int (*mk_dp_snapshot_fn)(void *userdata, struct mk_snapshot **ret, struct mk_error *e);

/* One dynamic Allocate: LIST the pods with spec.nodeName=node, pick the
 * claim (mk_dp_dynamic_pick), take a snapshot, build the answers
 * (mk_dp_dynamic_responses), make the soft slice containers' directories
 * (mk_dp_soft_prepare; so may be NULL: defaults), then merge-patch migkit.io/mig-allocated on
 * the pod (mk_dp_dynamic_allocated_patch); on 409 Conflict all again, up
 * to MK_DP_DYNAMIC_ATTEMPTS times. Any failure (the patch's included)
 * fails the Allocate, so two pods never get one claim: -ENOENT when no
 * reservation is ready (the kubelet retries the pod), else the apiserver's
 * or NVML's error, with the reason in e. On success ret (n_counts
 * responses) is filled and *ret_claim (may be NULL) names the pod. */
int mk_dp_dynamic_allocate(struct mk_kube *k, const char *node, const unsigned *counts, size_t n_counts,
                           const struct mk_dp_options *o, const struct mk_dp_soft_options *so,
                           mk_dp_snapshot_fn snapshot, void *userdata, struct mk_dp_response *ret,
                           struct mk_claim *ret_claim, struct mk_error *e) _nonnull_(1, 2, 5, 7, 9) _wur_;
