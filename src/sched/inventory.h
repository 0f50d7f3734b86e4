/* The node inventory: what the node agent publishes on its Node in the
 * annotation migkit.io/mig-inventory and the extender reads back. Versioned
 * JSON, at most MK_MAX_INVENTORY_BYTES; format in docs/scheduler.md. Per
 * GPU: uuid, index, model, memory, placement units, compute slices, SMs,
 * whether MIG is on, the profiles the scheduler may create there (config
 * filtered) with their placements, and every instance that exists or is
 * reserved, with the pod that holds or reserves it. A GPU shared by soft
 * slices (unified pool: mode hami-core) also carries its split count and
 * the soft slices reserved on it, with their pods. Pure: no I/O. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "mig/gpu.h"

struct mk_sched_config;

#define MK_ANN_INVENTORY "migkit.io/mig-inventory"
#define MK_INVENTORY_VERSION 1
#define MK_MAX_INVENTORY_BYTES (64u << 10)     /* the annotation value */
#define MK_MAX_INVENTORY_GPUS 64u              /* = MK_FIT_MAX_NODE_GPUS */
#define MK_MAX_INVENTORY_PROFILES 64u          /* = MK_FIT_MAX_PROFILES */
#define MK_MAX_INVENTORY_INSTANCES 64u         /* = MK_FIT_MAX_INSTANCES */
#define MK_MAX_INVENTORY_PLACEMENTS 32u        /* placements of one profile */
#define MK_MAX_INVENTORY_SOFT 64u              /* soft slices of one GPU (= MK_MAX_SCHED_SPLIT) */

enum mk_inv_state {
        MK_INV_CREATED,         /* exists, held by a pod */
        MK_INV_RESERVED,        /* reserved by a pod, not created yet */
        MK_INV_ORPHAN,          /* exists, no active pod holds it (destroyed after the grace period) */
        _MK_INV_STATE_MAX,
        _MK_INV_STATE_INVALID = -EINVAL,
};
const char *mk_inv_state_to_string(enum mk_inv_state s);       /* "created", "reserved", "orphan" */
enum mk_inv_state mk_inv_state_from_string(const char *s);

struct mk_inv_instance {
        enum mk_inv_state state;
        char profile[MK_PROFILE_NAME_MAX];
        unsigned profile_id, slices;
        struct mk_placement placement;
        unsigned gi_id;                 /* UINT32_MAX when not created */
        char mig_uuid[MK_UUID_MAX];     /* "" when not created */
        char pod[2 * MK_K8S_NAME_MAX];  /* "namespace/name", "" for an orphan */
        char uid[MK_K8S_UID_MAX];
};

/* A soft slice reserved or held on a shared GPU (from a pod's claim). */
struct mk_inv_soft {
        char pod[2 * MK_K8S_NAME_MAX];  /* "namespace/name" */
        char uid[MK_K8S_UID_MAX];
        unsigned container;
        uint64_t memory_mib;
        unsigned cores;                 /* percent, 0 = no limit */
};

struct mk_inv_gpu {
        unsigned index;
        char uuid[MK_UUID_MAX];
        char model[MK_GPU_NAME_MAX];
        uint64_t memory_mib;
        unsigned memory_units, slices, multiprocessors;
        bool mig_enabled;
        struct mk_gi_profile *profiles; /* allowed profiles (no CI profiles); placements owned */
        size_t n_profiles;
        struct mk_inv_instance *instances;
        size_t n_instances;
        enum mk_claim_mode mode;        /* how it is used now: "mig" (MIG instances) or "hami-core" (shared) */
        unsigned split;                 /* hami-core: most sharers; 0 for a mig GPU */
        struct mk_inv_soft *soft;       /* hami-core: its soft slices */
        size_t n_soft;
        /* Idle and allowed to change mode (mk_sched_config_may_switch, no
         * instance, no reservation, held idle for the agent's grace): a
         * hami-core GPU then lists its MIG profiles, a mig GPU its split. */
        bool switchable;
};

struct mk_inventory {
        char node[MK_K8S_NAME_MAX];
        struct mk_inv_gpu *gpus;
        size_t n_gpus;
};

struct mk_inventory *mk_inventory_free(struct mk_inventory *inv);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_inventory *, mk_inventory_free);

/* Builds the inventory of `node` from a snapshot. Each GPU's mode comes
 * from `cfg` (mk_sched_config_gpu_mode); a GPU that may switch
 * (mk_sched_config_may_switch) takes the mode of the reservations on it
 * when they all ask the other mode and it has no instance (a switch the
 * agent has still to make; such a mig GPU is listed with "mig": false until
 * it is made), and is `switchable` when idle: no instance, no active
 * claim's device on it. A mig GPU is listed when it is
 * MIG-capable, with the profiles the GPU reports, named, and allowed by
 * `cfg` for its model, and instances from the GPU instances, matched to
 * the active claims by GPU and placement (unmatched ones are orphans);
 * claims' MIG devices not created yet are listed as reserved. A hami-core
 * GPU (MIG-capable or not) is listed with its split count and the active
 * claims' soft devices on it; a disabled one is left out. -E2BIG over the
 * caps. */
int mk_inventory_from_snapshot(const struct mk_snapshot *s, const struct mk_sched_config *cfg, const char *node,
                               const struct mk_claim *claims, size_t n_claims, struct mk_inventory **ret,
                               struct mk_error *e) _nonnull_(1, 2, 3, 6) _wur_;

/* The agent's hysteresis: GPU `i` stays in its mode for now (not
 * switchable; the data listed only for a switch is dropped). */
void mk_inventory_hold_mode(struct mk_inventory *inv, size_t i) _nonnull_(1);

/* The annotation value (compact JSON, keys in a fixed order, so an
 * unchanged inventory gives the same bytes). -E2BIG over
 * MK_MAX_INVENTORY_BYTES. */
int mk_inventory_format(const struct mk_inventory *inv, char **ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Parses an annotation value strictly (version, known fields, ranges,
 * caps, placements inside the GPU, profile names that parse). "mode",
 * "split", "softSlices" and "switchable" are optional (an older agent's GPU
 * is mig; a mig GPU has a split only when switchable).
 * -EINVAL with the field path in `e`, -E2BIG. */
int mk_inventory_parse(const char *data, size_t len, struct mk_inventory **ret, struct mk_error *e)
        _nonnull_(3) _wur_;

/* The inventory a Node object publishes (its MK_ANN_INVENTORY
 * annotation): *ret, or NULL with why in `reason` (no annotation, or a
 * malformed one). Never fails otherwise. */
void mk_inventory_from_node(const json_t *node, struct mk_inventory **ret, char *reason, size_t size)
        _nonnull_(2, 3);
