/* Reservations ("claims") recorded on pods, the pod's GPU request, and the
 * device plugin's matching of an Allocate to a reservation. Pure: JSON in,
 * structs out; no I/O. Formats in docs/scheduler.md.
 *
 * Pod annotations:
 *   migkit.io/mig-reservation  written by the extender at bind (before the
 *       Binding), {"version":1,"node":N,"time":unix,"devices":[{"container":i,
 *       "gpu":"GPU-…","profile":"3g.40gb","profileID":9,"slices":3,
 *       "placement":{"start":0,"size":4}}]}
 *   migkit.io/mig-devices      written by the node agent once it created the
 *       instances: a JSON array of MIG device UUIDs, one per reserved device,
 *       in the reservation's order.
 *   migkit.io/mig-allocated    written by the device plugin when an Allocate
 *       consumed the reservation (any value; the time). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "mig/layout.h"

struct mk_sched_config;

#define MK_ANN_RESERVATION "migkit.io/mig-reservation"
#define MK_ANN_DEVICES "migkit.io/mig-devices"
#define MK_ANN_ALLOCATED "migkit.io/mig-allocated"
#define MK_ANN_VARIANT "migkit.io/mig-variant"      /* "+me", "+me.all", "+gfx", "-me": profile attributes wanted */
#define MK_ANN_VGPU_MODE "nvidia.com/vgpu-mode"
#define MK_ANN_USE_GPUTYPE "nvidia.com/use-gputype"
#define MK_ANN_NOUSE_GPUTYPE "nvidia.com/nouse-gputype"
#define MK_ANN_NODE_POLICY "hami.io/node-scheduler-policy"
#define MK_ANN_GPU_POLICY "hami.io/gpu-scheduler-policy"

#define MK_RESERVATION_VERSION 1
#define MK_MAX_RESERVATION_BYTES (16u << 10)   /* one reservation annotation */
#define MK_MAX_CLAIM_DEVICES 16u               /* devices of one pod (HAMi caps a container at 16) */
#define MK_MAX_POD_CONTAINERS 64u              /* containers (init included) of one pod we look at */
#define MK_K8S_NAME_MAX 254                    /* a DNS subdomain, with NUL */
#define MK_K8S_UID_MAX 64

/* One reserved device: a GPU instance of `profile` at `placement` on GPU `gpu`. */
struct mk_claim_device {
        unsigned container;             /* index among init containers then containers */
        char gpu[MK_UUID_MAX];
        char profile[MK_PROFILE_NAME_MAX];
        unsigned profile_id;            /* driver GI profile id */
        unsigned slices;
        struct mk_placement placement;  /* memory units */
        char mig_uuid[MK_UUID_MAX];     /* from migkit.io/mig-devices; "" until created */
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

/* From a pod object: identity, activity and, when the pod carries a
 * reservation annotation, the claim. 1 when it has one, 0 when it has none
 * (*ret then holds the identity only), -EINVAL for a malformed pod or
 * annotation (the reason in `e`). */
int mk_claim_from_pod(const json_t *pod, struct mk_claim *ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* A pod's GPU request, per container (init containers first). */
struct mk_pod_request_container {
        unsigned index;                 /* container index as in mk_claim_device.container */
        unsigned gpus;                  /* resource count (nvidia.com/gpu) */
        uint64_t mem_mib;               /* nvidia.com/gpumem; 0: none */
        unsigned mem_percent;           /* nvidia.com/gpumem-percentage; 0: none */
        unsigned cores_percent;         /* nvidia.com/gpucores */
};

struct mk_pod_request {
        struct mk_pod_request_container containers[MK_MAX_POD_CONTAINERS];
        size_t n_containers;            /* containers that ask for GPUs */
        bool not_mig;                   /* nvidia.com/vgpu-mode set and not naming mig */
        char variant[16];               /* migkit.io/mig-variant, "" for none */
        char use_types[512];            /* nvidia.com/use-gputype, "" for any */
        char nouse_types[512];          /* nvidia.com/nouse-gputype */
        char node_policy[16];           /* hami.io/node-scheduler-policy, "" for the default */
        char gpu_policy[16];            /* hami.io/gpu-scheduler-policy */
        uint64_t cpu_milli;             /* sum of the containers' requests */
        uint64_t memory_bytes;
};

/* Reads the request from a pod using the config's resource names (limits,
 * else requests). -EINVAL naming the container and resource for a value
 * that is not a whole non-negative number in range. A pod with no GPU
 * container gives n_containers 0. */
int mk_pod_request_parse(const json_t *pod, const struct mk_sched_config *cfg, struct mk_pod_request *ret,
                         struct mk_error *e) _nonnull_(1, 2, 3) _wur_;

/* The pod's CPU (milli) and memory (bytes) requests as kube-scheduler
 * counts them: the sum over its containers, or the largest init container
 * when that is more (requests, else limits; unparseable values count 0). */
void mk_pod_resource_requests(const json_t *pod, uint64_t *ret_cpu_milli, uint64_t *ret_memory_bytes)
        _nonnull_(2, 3);

/* Whether a GPU model passes use-gputype / nouse-gputype (comma lists,
 * case-insensitive substrings, HAMi's rule). */
bool mk_pod_request_gpu_type_ok(const struct mk_pod_request *r, const char *model) _nonnull_(1, 2);

/* Parses a Kubernetes quantity ("500m", "2", "1Gi", "10M", "1e3") into
 * milli-units, rounding fractions up. -EINVAL, -ERANGE. */
int mk_quantity_parse_milli(const char *s, uint64_t *ret) _nonnull_(1, 2) _wur_;

/* The device plugin's question: which reservation does this Allocate
 * serve? The kubelet's AllocateRequest carries only device ids, one
 * ContainerAllocateRequest per container asking for the resource, in
 * container order; kubelet admits pods one at a time. Among `claims` (the
 * node's pods with reservations), a candidate is active, not yet allocated,
 * reserved on `node`, has every MIG UUID created, and has one container per
 * request entry in order with exactly counts[i] devices. The chosen one is
 * the earliest reservation (time), ties by namespace/name. Returns the
 * index in `claims`, -ENOENT when none matches (the plugin fails the
 * Allocate: kubelet retries the pod). Each container's MIG UUIDs are then
 * the claim's devices of that container, in order. */
int mk_claim_match_allocate(const struct mk_claim *claims, size_t n, const char *node, const unsigned *counts,
                            size_t n_counts) _nonnull_(3);
