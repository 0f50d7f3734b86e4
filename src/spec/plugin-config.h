/* The NVIDIA device plugin / GPU feature discovery v1 config file, the subset
 * migkit uses (k8s-device-plugin v0.20.0 api/config/v1): `version`,
 * `flags.migStrategy`, `sharing.timeSlicing` / `sharing.mps` with
 * `renameByDefault`, `failRequestsGreaterThanOne` and `resources[]`
 * (`name`, `rename`, `devices`, `replicas`). The other upstream keys of
 * `flags`, `flags.plugin`, `flags.gfd`, `resources` and `imex` are accepted
 * and ignored (so one file serves the device plugin and the labels); any
 * other key is an error. Errors carry file:line:column and the field path. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_MAX_PLUGIN_CONFIG_BYTES (1024u * 1024) /* the config file */
#define MK_MAX_SHARED_RESOURCES 256u              /* sharing.*.resources entries */
#define MK_MAX_SHARED_DEVICES 1024u               /* entries of one `devices` list */
#define MK_MAX_SHARING_REPLICAS 1024u             /* replicas of one resource */
#define MK_MAX_RESOURCE_NAME 63u                  /* Kubernetes qualified name, prefix included */

enum mk_mig_strategy {
        MK_MIG_STRATEGY_NONE,
        MK_MIG_STRATEGY_SINGLE,
        MK_MIG_STRATEGY_MIXED,
        _MK_MIG_STRATEGY_MAX,
        _MK_MIG_STRATEGY_INVALID = -EINVAL,
};
const char *mk_mig_strategy_to_string(enum mk_mig_strategy s);
enum mk_mig_strategy mk_mig_strategy_from_string(const char *s);

enum mk_sharing_strategy {
        MK_SHARING_NONE,
        MK_SHARING_TIME_SLICING,
        MK_SHARING_MPS,
        _MK_SHARING_MAX,
        _MK_SHARING_INVALID = -EINVAL,
};
/* "none", "time-slicing", "mps" (GFD's sharing-strategy label values). */
const char *mk_sharing_strategy_to_string(enum mk_sharing_strategy s);
enum mk_sharing_strategy mk_sharing_strategy_from_string(const char *s);

struct mk_shared_resource {
        char *name;             /* "nvidia.com/gpu", prefix added when missing */
        char *rename;           /* NULL when not renamed; "<name>.shared" with renameByDefault */
        bool devices_all;       /* devices: all (the default) */
        unsigned devices_count; /* devices: N (the first N devices); 0 when not a count */
        char **devices;         /* devices: [...] as strings ("0", "0:1", "GPU-…", "MIG-…"), NULL-terminated or NULL */
        size_t n_devices;
        unsigned replicas;      /* >= 2 from the file; >= 1 from --resource-config (1 = renamed, not shared) */
        bool replicas_auto;     /* --resource-config replicas -1: per device, its memory MiB / 1000 (iktos/k8s-gpu-sharing-plugin); replicas 0 */
};

struct mk_plugin_config {
        char *file;             /* for messages */
        bool has_mig_strategy;  /* flags.migStrategy given */
        enum mk_mig_strategy mig_strategy;
        enum mk_sharing_strategy sharing; /* the active one, by upstream's rule (k8s-device-plugin v0.20.0 api/config/v1) */
        bool rename_by_default;
        bool fail_requests_greater_than_one; /* forced true for MPS when unset */
        struct mk_shared_resource *resources; /* the active list (mps when present, else timeSlicing) */
        size_t n_resources;
};

/* Parses the config (YAML or JSON). Errors: -EINVAL with file:line:column and
 * the field path, -E2BIG over MK_MAX_PLUGIN_CONFIG_BYTES, -ENOMEM. *ret is
 * written only on success and owned by the caller. */
int mk_plugin_config_parse(const char *data, size_t len, const char *file, struct mk_plugin_config **ret,
                           struct mk_error *e) _wur_;
/* Reads and parses `path`; the read errors name it. */
int mk_plugin_config_load(const char *path, struct mk_plugin_config **ret, struct mk_error *e) _wur_;

struct mk_plugin_config *mk_plugin_config_free(struct mk_plugin_config *c);
static inline void mk_plugin_config_freep(struct mk_plugin_config **c) {
        mk_plugin_config_free(*c);
}

#define MK_MAX_RESOURCE_CONFIG_BYTES 65536u /* the --resource-config string */

/* Parses the iktos fork's --resource-config string (iktos/k8s-gpu-sharing-plugin): comma-separated
 * `<name>:<rename>:<replicas>` entries, blanks around parts trimmed, empty
 * entries skipped; names short or prefixed ("gpu", "nvidia.com/mig-1g.10gb"),
 * checked as in the file; replicas >= 1 or -1 (auto). Gives a config with
 * the time-slicing strategy (none when every entry has replicas 1), each
 * entry with devices "all" and `rename` NULL when it equals `name`. Unlike
 * the fork, resources not listed stay advertised, unshared. Errors: -EINVAL
 * naming the entry (1-based) and the part, -E2BIG over
 * MK_MAX_RESOURCE_CONFIG_BYTES or MK_MAX_SHARED_RESOURCES entries. *ret only
 * on success; `file` of the result is "--resource-config". */
int mk_plugin_config_parse_resource_config(const char *s, struct mk_plugin_config **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

/* The first active shared resource named `name` (full name), or NULL. */
const struct mk_shared_resource *mk_plugin_config_find(const struct mk_plugin_config *c, const char *name);
