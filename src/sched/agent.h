/* `migkit scheduler node`: the node side of dynamic MIG. On its node it
 *   - follows the pods bound there (an informer on spec.nodeName) and their
 *     reservations (claim.h);
 *   - creates each reserved GPU instance at its explicit placement, with one
 *     compute instance spanning it, and records the MIG device UUIDs on the
 *     pod (migkit.io/mig-devices);
 *   - destroys instances no active pod reserves once they have been orphans
 *     for the grace period (pods deleted, Succeeded or Failed);
 *   - publishes the inventory (inventory.h) on its Node when it changes;
 *   - removes the soft slice directories of pods no longer on the node
 *     (mk_vgpu_prune, after a complete pod list only);
 *   - on a mixed node with modeswitch: idle, turns MIG on or off on a GPU
 *     that nothing holds when reservations ask the other mode, and lists an
 *     idle GPU as switchable only once it has been idle for the grace
 *     period (docs/scheduler.md "Unified pool").
 * It owns every MIG instance on the node's MIG-enabled GPUs (do not run the
 * MIG manager on the same node). State lives only in the apiserver and NVML:
 * a restarted agent rebuilds it (orphan timers restart, so nothing is
 * destroyed early). A failed pod LIST skips the pass: nothing is destroyed
 * on partial knowledge. NVML goes through nvml/ only. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"

struct mk_kube;
struct mk_sched_config;
struct mk_inventory;

#define MK_AGENT_DEFAULT_GRACE_S 30
#define MK_AGENT_DEFAULT_RESYNC_S 30
#define MK_AGENT_PUBLISH_MIN_MS 1000    /* inventory writes of one node at most this often (docs/scheduler.md) */

struct mk_sched_agent_opts {
        const char *node;
        struct mk_kube *kube;                   /* NULL: no apiserver (inventory only, no pods) */
        const struct mk_sched_config *cfg;
        const char *nvml_lib;                   /* NULL: MIGKIT_NVML_LIB or the default */
        unsigned grace_s;                       /* orphan instances live this long; 0: destroy at once */
        unsigned resync_s;                      /* full pass at least this often; 0: the default */
        atomic_bool *cancel;
        bool once;                              /* one pass, then return */
        const char *vgpu_root;                  /* soft slices' directories (vgpunode/dirs.h); NULL: the default */
        /* What happened, for the caller to log (the library logs at debug
         * only): level is MK_LOG_INFO for changes, MK_LOG_WARNING for
         * failures that are retried, MK_LOG_ERROR for ones that are not.
         * NULL: debug lines only. Called from the agent's threads. */
        void (*report)(void *userdata, int level, const char *msg);
        /* Resets the GPU with this NVML bus id (the unified pool's idle mode
         * switch on a GPU whose MIG mode changes at reset, e.g. an A100);
         * called with the agent's NVML session closed. NULL: such a switch
         * fails (reported, retried). */
        int (*reset_gpu)(void *userdata, const char *bus_id, struct mk_error *e);
        void *userdata;
};

/* What one pass did (for logs and tests). */
struct mk_sched_agent_pass {
        unsigned created, destroyed, pods_patched, failed;
        bool inventory_published;       /* changed and written this pass */
        bool publish_deferred;          /* changed, written by a pass at most MK_AGENT_PUBLISH_MIN_MS later */
        unsigned orphans_waiting;
        unsigned switched;              /* GPUs whose MIG mode this pass changed (idle mode switch) */
        unsigned switch_held;           /* idle switchable GPUs held in their mode for the grace period */
        unsigned inventory_gpus, inventory_instances;   /* what the inventory lists */
        size_t inventory_bytes;         /* its annotation value's size */
};

/* Runs passes until cancelled (-ECANCELED) or, with `once`, one pass.
 * Per-instance failures are logged and retried next pass; a failure to
 * start (NVML, the first pod list) is returned. */
int mk_sched_agent_run(const struct mk_sched_agent_opts *o, struct mk_sched_agent_pass *ret_last,
                       struct mk_error *e) _nonnull_(1) _wur_;

/* The inventory of this node right now (NVML snapshot + the pods'
 * reservations when kube is set), for `migkit scheduler inventory`. */
int mk_sched_agent_inventory(const struct mk_sched_agent_opts *o, struct mk_inventory **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;
