/* What the extender is asked: a pod's GPU request, read from the pod with
 * the scheduler config's resource names and HAMi's annotations, and the
 * candidate nodes of a request. Pure: JSON in, structs out. Formats in
 * docs/scheduler.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "plan/fit.h"

struct mk_sched_config;

#define MK_MAX_EXTENDER_NODES 20000u           /* candidate nodes in one request */

#define MK_ANN_VARIANT "migkit.io/mig-variant"      /* "+me", "+me.all", "+gfx", "-me": profile attributes wanted */
#define MK_ANN_VGPU_MODE "nvidia.com/vgpu-mode"
#define MK_ANN_USE_GPUTYPE "nvidia.com/use-gputype"
#define MK_ANN_NOUSE_GPUTYPE "nvidia.com/nouse-gputype"
#define MK_ANN_NODE_POLICY "hami.io/node-scheduler-policy"
#define MK_ANN_GPU_POLICY "hami.io/gpu-scheduler-policy"

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
        /* nvidia.com/vgpu-mode, HAMi's rule (a mode is allowed when its name
         * is a substring of the value): no annotation allows both and lets
         * the scheduler choose; "mig" MIG only; "hami-core" soft slices only. */
        bool mode_named;                /* the annotation is set */
        bool allow_mig, allow_soft;
        char variant[16];               /* migkit.io/mig-variant, "" for none */
        char use_types[512];            /* nvidia.com/use-gputype, "" for any */
        char nouse_types[512];          /* nvidia.com/nouse-gputype */
        char node_policy[16];           /* hami.io/node-scheduler-policy, "" for the default */
        char gpu_policy[16];            /* hami.io/gpu-scheduler-policy */
        /* The two policies as the fits take them, read once here: binpack
         * and spread for "" or a value that names no policy. */
        enum mk_fit_policy fit_node_policy, fit_gpu_policy;
        uint64_t cpu_milli;             /* sum of the containers' requests */
        uint64_t memory_bytes;
};

/* Reads the request from a pod using the config's resource names (limits,
 * else requests). -EINVAL naming the container and resource for a value
 * that is not a whole non-negative number in range. A pod with no GPU
 * container gives n_containers 0. *ret only on success. */
int mk_pod_request_parse(const json_t *pod, const struct mk_sched_config *cfg, struct mk_pod_request *ret,
                         struct mk_error *e) _nonnull_(1, 2, 3) _wur_;

/* Whether a GPU model passes use-gputype / nouse-gputype (comma lists,
 * case-insensitive substrings, HAMi's rule). */
bool mk_pod_request_gpu_type_ok(const struct mk_pod_request *r, const char *model) _nonnull_(1, 2);

/* One candidate node of a request: by name from the cache (NodeNames), or
 * a Node object (Nodes.items). */
struct mk_sched_cand {
        const char *name;
        size_t len;                     /* strlen(name) */
        const json_t *object;           /* from Nodes; NULL with NodeNames */
        bool plain;                     /* checked: printable ASCII but quotes and backslashes (the
                                         * NodeNames scan's names), written into JSON as it is */
};
