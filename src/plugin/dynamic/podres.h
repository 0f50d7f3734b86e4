/* kubelet's PodResources API v1 (Kubernetes 1.20+), the List call only:
 * which pod holds which device ids of a resource. The dynamic MIG device
 * plugin reads it to see which pod an Allocate really served
 * (plugin/dynamic/handout.h). Messages from proto/podresources.proto. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "plugin/dynamic/handout.h"

struct mk_grpc_client;

#define MK_DP_PODRES_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"
#define MK_DP_PODRES_LIST "/v1.PodResourcesLister/List"
#define MK_DP_PODRES_TIMEOUT_MS 5000           /* one List call */
#define MK_DP_PODRES_MAX_BYTES (16u << 20)     /* one List answer */

/* What one List answer may hold, counted from its bytes before protobuf-c
 * decodes it (plugin/pb-scan.h): decoding takes 50-100 bytes an entry (8 MB
 * of empty entries took 417 MB before this count). Bounds of real nodes, with
 * room: the kubelet runs 110 pods by default and managed offerings allow
 * up to ~750; the API sets no count of containers, which the plugin's own
 * Allocate takes up to 1024 of (MK_DP_MAX_CONTAINERS); kubelet 1.21+ sends
 * one device entry per device ID and NUMA node, kubelet 1.20 one per
 * resource with all its IDs (the plugin's Allocate takes 4096 IDs of one
 * container, MK_DP_MAX_REQUEST_IDS); a heavy node of 750 pods of 4
 * containers with 8 devices each is ~111,000 fields, 6 MB decoded, so the
 * fields' bound takes ~36 MB at most (test-plugin-podres). Past any of them
 * the answer is refused whole, and the reservations stay with the pods
 * each Allocate assumed (plugin/dynamic/follow.h). */
#define MK_DP_PODRES_MAX_PODS 4096u            /* pods */
#define MK_DP_PODRES_MAX_CONTAINERS 1024u      /* containers of one pod */
#define MK_DP_PODRES_MAX_DEVICES 16384u        /* device entries of one container */
#define MK_DP_PODRES_MAX_IDS 4096u             /* device IDs of one entry */
#define MK_DP_PODRES_MAX_FIELDS 524288u        /* fields in all, in the answer, its pods, containers and entries */

/* Frees n held pods (their names and keys) and the array; NULL ok. */
void mk_dp_held_free(struct mk_dp_held *held, size_t n);

/* From a packed ListPodResourcesResponse: the pods holding ids of
 * `resource`, each with one key (mk_dp_handout_key) per container holding
 * some, over all the container's entries of the resource (kubelet 1.21+
 * sends one per id and NUMA node, 1.20 one with all the resource's ids);
 * containers with more than MK_MAX_CLAIM_DEVICES ids of it, or ids
 * no key can carry, are left out (no Allocate of ours answered them).
 * -EINVAL for bytes that do not decode, -E2BIG past one of the
 * MK_DP_PODRES_MAX_* counts (the message names which, before anything is
 * decoded), -ENOMEM. *ret (mk_dp_held_free) and *ret_n only on success. */
int mk_dp_podres_decode(const uint8_t *buf, size_t len, const char *resource, struct mk_dp_held **ret,
                        size_t *ret_n, struct mk_error *e) _nonnull_(3, 4, 5) _wur_;

/* One List call on `c` (no wait for the socket: a kubelet without the API
 * fails at once), decoded as mk_dp_podres_decode(). The client's errors
 * (-ECONNREFUSED: no socket or nobody listening; -EPROTO with
 * UNIMPLEMENTED: a kubelet without v1) pass through. */
int mk_dp_podres_list(struct mk_grpc_client *c, const char *resource, struct mk_dp_held **ret, size_t *ret_n,
                      int *ret_status, struct mk_error *e) _nonnull_(1, 2, 3, 4) _wur_;
