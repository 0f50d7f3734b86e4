/* The scheduler's device config: which MIG profiles the dynamic scheduler
 * may create on which GPU model, and which nodes it manages. Two forms are
 * accepted in one file (docs/scheduler.md):
 *
 *   ours:   version: v1
 *           allowedProfiles: [{models: [substrings], profiles: ["1g.10gb", "1g.10gb+me", ...]}]
 *           deviceSplitCount: 10
 *           nodeconfig: [{name: node, operatingmode: mig|hami-core|mixed|disabled,
 *                         devicesplitcount: N, modeswitch: never|idle,
 *                         gpus: [{index: 0, mode: mig|hami-core|disabled}]}]   (gpus, modeswitch: mixed only)
 *   HAMi:   nvidia: {knownMigGeometries: [{models, allowedGeometries: [[{name, memory, count}]]}],
 *                    migProfileAllowlist: [{models, profiles}], resource*Name: ...}
 *           nodeconfig: [...]      (HAMi v2.10.0 charts/hami device config; HAMi release-v2.9 knownMigGeometries; HAMi v2.10.0 dynamic MIG, PR #2378)
 *
 * Profiles are identified exactly by their canonical name (`1g.10gb`,
 * `1g.20gb`, `1g.10gb+me` are three profiles), never by slice count.
 * Models match the NVML GPU name as a case-insensitive substring; the first
 * matching entry wins (HAMi's rule). Errors carry file:line:column. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/profile.h"

#define MK_MAX_SCHED_CONFIG_BYTES (1024u * 1024) /* the config file */
#define MK_MAX_SCHED_MODELS 256u                 /* allowedProfiles / knownMigGeometries entries */
#define MK_MAX_SCHED_PROFILES 64u                /* profiles of one entry */
#define MK_MAX_SCHED_NODES 4096u                 /* nodeconfig entries */
#define MK_MAX_SCHED_NAME 253u                   /* a node name or model substring */
#define MK_MAX_SCHED_NODE_GPUS 64u               /* gpus entries of one node (= MK_MAX_INVENTORY_GPUS) */
#define MK_SCHED_DEFAULT_SPLIT 10u               /* HAMi's deviceSplitCount default */
#define MK_MAX_SCHED_SPLIT 64u                   /* sharers of one GPU (= MK_MAX_INVENTORY_SOFT) */

enum mk_sched_mode {
        MK_SCHED_MODE_MIG,             /* dynamic MIG: the scheduler creates instances */
        MK_SCHED_MODE_HAMI_CORE,       /* soft slicing: whole GPUs shared, capped by libmigkit-vgpu.so */
        MK_SCHED_MODE_DISABLED,
        MK_SCHED_MODE_MIXED,           /* a node: each GPU mig or hami-core (gpus, else its MIG state) */
        _MK_SCHED_MODE_MAX,
        _MK_SCHED_MODE_INVALID = -EINVAL,
};
/* "mig", "hami-core", "disabled", "mixed". */
const char *mk_sched_mode_to_string(enum mk_sched_mode m);
enum mk_sched_mode mk_sched_mode_from_string(const char *s);

/* Whether the scheduler may turn an idle GPU to the other mode. */
enum mk_sched_mode_switch {
        MK_SCHED_SWITCH_NEVER,
        MK_SCHED_SWITCH_IDLE,
        _MK_SCHED_SWITCH_MAX,
        _MK_SCHED_SWITCH_INVALID = -EINVAL,
};
/* "never", "idle". */
const char *mk_sched_mode_switch_to_string(enum mk_sched_mode_switch m);
enum mk_sched_mode_switch mk_sched_mode_switch_from_string(const char *s);

struct mk_sched_model {
        char **models;                  /* substrings, NULL-terminated */
        size_t n_models;
        struct mk_profile_name *profiles; /* canonical GI profile names (C == G) */
        size_t n_profiles;
        unsigned line;                  /* where the entry starts, for messages */
};

/* A GPU of a mixed node, by its NVML index. */
struct mk_sched_gpu_config {
        unsigned index;
        enum mk_sched_mode mode;        /* mig, hami-core or disabled */
};

struct mk_sched_node_config {
        char *name;
        enum mk_sched_mode mode;
        unsigned split;                 /* devicesplitcount; 0: the config's */
        enum mk_sched_mode_switch mode_switch; /* mixed only */
        struct mk_sched_gpu_config *gpus; /* mixed only */
        size_t n_gpus;
};

struct mk_sched_config {
        char *file;
        struct mk_sched_model *models;
        size_t n_models;
        struct mk_sched_node_config *nodes;
        size_t n_nodes;
        unsigned split;                 /* deviceSplitCount (both forms), default MK_SCHED_DEFAULT_SPLIT */
        bool pool;                      /* some node is hami-core or mixed: pods without a vgpu-mode are ranked
                                         * on the mode choice's tier scale on every node */
        /* Resource names (HAMi's nvidia.resource*Name), defaults nvidia.com/gpu,
         * nvidia.com/gpumem, nvidia.com/gpumem-percentage, nvidia.com/gpucores. */
        char *resource_count, *resource_memory, *resource_memory_percentage, *resource_cores;
};

/* Parses `len` bytes. An empty document is a config with no model entries
 * (every profile allowed) and default resource names. Errors: -EINVAL with
 * file:line:column and field path, -E2BIG over MK_MAX_SCHED_CONFIG_BYTES,
 * -ENOMEM. *ret is written only on success; free with mk_sched_config_free(). */
int mk_sched_config_parse(const char *data, size_t len, const char *file, struct mk_sched_config **ret,
                          struct mk_error *e) _nonnull_(4) _wur_;
/* Reads and parses a file; NULL path gives the default (empty) config. */
int mk_sched_config_load(const char *path, struct mk_sched_config **ret, struct mk_error *e) _nonnull_(2) _wur_;
struct mk_sched_config *mk_sched_config_free(struct mk_sched_config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_sched_config *, mk_sched_config_free);

/* The first entry whose model substring occurs in `gpu_name` (case-
 * insensitive), NULL when none does. */
const struct mk_sched_model *mk_sched_config_match(const struct mk_sched_config *c, const char *gpu_name)
        _nonnull_(1, 2);

/* Whether a GPU named `gpu_name` may get profile `p`: with no model entries
 * at all, every profile; else only the profiles of the matching entry (a
 * GPU no entry matches gets none). */
bool mk_sched_config_allows(const struct mk_sched_config *c, const char *gpu_name, const struct mk_profile_name *p)
        _nonnull_(1, 2, 3);

/* The node's operating mode: its nodeconfig entry's, else MIG. */
enum mk_sched_mode mk_sched_config_node_mode(const struct mk_sched_config *c, const char *node) _nonnull_(1, 2);

/* The node's nodeconfig entry, NULL when it has none. */
const struct mk_sched_node_config *mk_sched_config_node(const struct mk_sched_config *c, const char *node)
        _nonnull_(1, 2);

/* How GPU `index` of `node` is used (never MIXED): a mig, hami-core or
 * disabled node's GPUs all follow the node; on a mixed node, the GPU's
 * gpus entry, else its current state (`mig_enabled`: mig, else hami-core). */
enum mk_sched_mode mk_sched_config_gpu_mode(const struct mk_sched_config *c, const char *node, unsigned index,
                                            bool mig_enabled) _nonnull_(1, 2);

/* The most sharers of one shared GPU of `node`: its devicesplitcount, else
 * the config's deviceSplitCount, else 10. */
unsigned mk_sched_config_split(const struct mk_sched_config *c, const char *node) _nonnull_(1, 2);

/* The idle mode-switch rule: whether the scheduler may turn GPU `index` of
 * `node` to the other mode when it is idle (no MIG instance, no soft slice,
 * no reservation: the caller checks that). Only on a mixed node with
 * modeswitch: idle, and only a GPU without a gpus entry (an entry pins its
 * mode). Never a GPU with a pod on it. */
bool mk_sched_config_may_switch(const struct mk_sched_config *c, const char *node, unsigned index) _nonnull_(1, 2);
