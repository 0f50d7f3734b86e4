/* Reservations ("claims"): the format the scheduler extender writes on a
 * pod at bind, the node agent completes and the device plugin consumes, and
 * the device plugin's matching of an Allocate to a reservation. Shared by
 * sched/ and plugin/, which depend on it and not on each other. Pure: JSON
 * in, structs out; no I/O. Formats in docs/scheduler.md.
 *
 * Pod annotations:
 *   migkit.io/mig-reservation  written by the extender at bind (before the
 *       Binding), {"version":1,"node":N,"time":unix,"devices":[{"container":i,
 *       "gpu":"GPU-…","profile":"3g.40gb","profileID":9,"slices":3,
 *       "placement":{"start":0,"size":4}}]}; a soft slice of a whole
 *       GPU (unified pool, docs/scheduler.md) is {"container":i,
 *       "mode":"hami-core","gpu":"GPU-…","memoryMiB":8000,"cores":30}
 *       (a device without "mode", or "mode":"mig", is a MIG instance).
 *   migkit.io/mig-devices      written by the node agent once it created the
 *       instances: a JSON array of device UUIDs, one per reserved device, in
 *       the reservation's order: the MIG device's UUID, or for a soft slice
 *       the GPU's UUID.
 *   migkit.io/mig-allocated    written by the device plugin when an Allocate
 *       consumed the reservation (any value; the time).
 *   migkit.io/mig-handed       written by the device plugin when it found
 *       (kubelet's PodResources List) that an Allocate handed this pod
 *       another pod's devices of the same shape: a JSON array of the device
 *       UUIDs the pod really holds, written before its reservation is moved
 *       onto them (plugin/dynamic/handout.h); the node agent never destroys an
 *       instance an active pod's handed list names.
 *   migkit.io/vgpu-mode-chosen written by the extender with the reservation
 *       when the pod named no nvidia.com/vgpu-mode: the mode it chose. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "kube/object.h"
#include "mig/gpu.h"
#include "mig/layout.h"

#define MK_ANN_RESERVATION "migkit.io/mig-reservation"
#define MK_ANN_DEVICES "migkit.io/mig-devices"
#define MK_ANN_ALLOCATED "migkit.io/mig-allocated"
#define MK_ANN_HANDED "migkit.io/mig-handed"
#define MK_ANN_MODE_CHOSEN "migkit.io/vgpu-mode-chosen" /* mig|hami-core: the extender's choice, for a pod
                                                         * without nvidia.com/vgpu-mode (unified pool) */

#define MK_RESERVATION_VERSION 1
#define MK_MAX_RESERVATION_BYTES (16u << 10)   /* one reservation annotation */
#define MK_MAX_CLAIM_DEVICES 16u               /* devices of one pod (HAMi caps a container at 16) */
#define MK_MAX_POD_CONTAINERS 64u              /* containers (init included) of one pod we look at */
#define MK_CLAIM_MAX_MEMORY_MIB (UINT64_C(1) << 24) /* a soft slice's cap: 16 TiB, far above any GPU */

/* How a reserved device is provided: a MIG instance, or a soft slice of a
 * whole GPU enforced by libmigkit-vgpu.so (HAMi-core's way). */
enum mk_claim_mode {
        MK_CLAIM_MIG,
        MK_CLAIM_SOFT,
        _MK_CLAIM_MODE_MAX,
        _MK_CLAIM_MODE_INVALID = -EINVAL,
};

const char *mk_claim_mode_to_string(enum mk_claim_mode m); /* "mig", "hami-core" */
enum mk_claim_mode mk_claim_mode_from_string(const char *s);

/* One reserved device: MIG, a GPU instance of `profile` at `placement` on
 * GPU `gpu`; SOFT, a share of GPU `gpu` capped at memory_mib and cores. */
struct mk_claim_device {
        unsigned container;             /* index among init containers then containers */
        enum mk_claim_mode mode;        /* MK_CLAIM_MIG (the zero default) or MK_CLAIM_SOFT */
        char gpu[MK_UUID_MAX];
        char profile[MK_PROFILE_NAME_MAX]; /* MIG only, from here to placement */
        unsigned profile_id;            /* driver GI profile id */
        unsigned slices;
        struct mk_placement placement;  /* memory units */
        uint64_t memory_mib;            /* SOFT: the memory cap, >= 1 */
        unsigned cores;                 /* SOFT: SM limit in percent 0..100, 0 = no limit */
        char mig_uuid[MK_UUID_MAX];     /* from migkit.io/mig-devices; "" until created (SOFT: the GPU's UUID) */
};

struct mk_claim {
        char namespace[MK_K8S_NAME_MAX];
        char name[MK_K8S_NAME_MAX];
        char uid[MK_K8S_UID_MAX];
        char node[MK_K8S_NAME_MAX];     /* the reservation's node */
        int64_t time;                   /* unix seconds of the reservation */
        bool active;                    /* the pod is neither deleting, Succeeded nor Failed */
        bool allocated;                 /* migkit.io/mig-allocated is set */
        struct mk_claim_device devices[MK_MAX_CLAIM_DEVICES];
        size_t n_devices;
        /* Reserve only, never encoded: why the mode choice chose the
         * devices' mode (static text, mk_fit_mode_result.why) for a pod
         * that named none; NULL otherwise. */
        const char *mode_why;
};

/* Encodes the reservation annotation value of `c` (node, time, devices; no
 * MIG UUIDs). Returns a malloc'd string. */
int mk_claim_reservation_format(const struct mk_claim *c, char **ret) _nonnull_(1, 2) _wur_;

/* Parses a reservation annotation value into c->node, time, devices
 * (strict: version 1, known fields, bounded, each field checked). -EINVAL
 * with the field in `e`, -E2BIG over MK_MAX_RESERVATION_BYTES. On failure
 * *c is unchanged. */
int mk_claim_reservation_parse(const char *s, struct mk_claim *c, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Parses migkit.io/mig-devices into c->devices[].mig_uuid. The array must
 * have one string per device. */
int mk_claim_devices_parse(const char *s, struct mk_claim *c, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Parses a JSON array of at most MK_MAX_CLAIM_DEVICES device UUIDs (the
 * value of annotation `field`) into ret[0..*ret_n). -EINVAL with the field
 * in e, -E2BIG over MK_MAX_RESERVATION_BYTES; ret and *ret_n written only
 * on success. */
int mk_claim_uuids_parse(const char *s, const char *field, char (*ret)[MK_UUID_MAX], size_t *ret_n,
                         struct mk_error *e) _nonnull_(1, 2, 3, 4) _wur_;

/* Whether `handed` (a migkit.io/mig-handed value; NULL: none) names
 * `uuid`. A malformed value names nothing. */
bool mk_claim_handed_names(const char *handed, const char *uuid);

/* From a pod object: identity, activity and, when the pod carries a
 * reservation annotation, the claim. 1 when it has one, 0 when it has none
 * (*ret then holds the identity only), -EINVAL for a malformed pod or
 * annotation (the reason in `e`). */
int mk_claim_from_pod(const json_t *pod, struct mk_claim *ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Whether every device of c is there for an Allocate: a MIG device once the
 * node agent created it (mig_uuid set), a SOFT device at once (it needs
 * nothing created). */
bool mk_claim_ready(const struct mk_claim *c) _nonnull_(1);

/* The device plugin's question: which reservation does this Allocate
 * serve? The kubelet's AllocateRequest carries only device ids, one
 * ContainerAllocateRequest per container asking for the resource, in
 * container order; kubelet admits pods one at a time. Among `claims` (the
 * node's pods with reservations), a candidate is active, not yet allocated,
 * reserved on `node`, is ready (mk_claim_ready()), and has one container per
 * request entry in order with exactly counts[i] devices. The chosen one is
 * the earliest reservation (time), ties by namespace/name. Returns the
 * index in `claims`, -ENOENT when none matches (the plugin fails the
 * Allocate: kubelet retries the pod). Each container's MIG UUIDs are then
 * the claim's devices of that container, in order. */
int mk_claim_match_allocate(const struct mk_claim *claims, size_t n, const char *node, const unsigned *counts,
                            size_t n_counts) _nonnull_(3);
