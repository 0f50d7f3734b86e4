/* mig-parted config v1 (mig-parted v0.15.0 api/spec/v1): parsed with libyaml into plain
 * structs, with file:line:column and the field path for every error. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "mig/layout.h"
#include "mig/profile.h"

#define MK_MAX_YAML_BYTES (4u << 20)   /* config and hooks files */
#define MK_MAX_CONFIGS 4096            /* named configs in one file */
#define MK_MAX_ENTRIES 1024            /* entries in one named config */
#define MK_MAX_DEVICES 1024            /* indices in one `devices` list */
#define MK_MAX_DEVICE_INDEX 1023u      /* largest GPU index in `devices` */
#define MK_MAX_DEVICE_FILTERS 64       /* strings in one `device-filter` */
#define MK_MAX_MIG_DEVICES 64          /* profiles in one `mig-devices` */
#define MK_MAX_MIG_COUNT 1024u         /* largest count in `mig-devices` */
#define MK_MAX_CONFIG_NAME 253         /* bytes in a config name (a DNS subdomain's length) */

struct mk_pos {
        unsigned line, column; /* 1-based; 0 when unknown */
};

/* `0xDDDDVVVV` or `0xDDDDVVVV:0xSSSSVVVV` (mig-parted v0.15.0 pkg/types/device.go). */
struct mk_device_filter {
        uint32_t device_vendor;  /* (device id << 16) | vendor id */
        bool has_subsystem;
        uint32_t subsystem;      /* (subsystem device id << 16) | subsystem vendor id */
        struct mk_pos pos;
};

struct mk_mig_device {
        char raw[MK_PROFILE_NAME_MAX];  /* as written in the file */
        struct mk_profile_name name;     /* parsed, canonical */
        unsigned count;
        struct mk_pos pos;               /* of the key */
};

struct mk_config_entry {
        struct mk_pos pos;               /* of the entry (the mapping) */
        struct mk_device_filter *filters;
        size_t n_filters;                /* 0: no device-filter */
        bool all_devices;                /* devices: all */
        unsigned *devices;               /* when !all_devices (may be empty: matches nothing) */
        struct mk_pos *device_pos;       /* position of each index, for "index out of range" */
        size_t n_devices;
        struct mk_pos devices_pos;
        struct mk_pos dup_device_pos;    /* of the first index listed twice; line 0: none */
        bool mig_enabled;
        struct mk_mig_device *mig_devices;
        size_t n_mig_devices;            /* zero counts kept as written */
};

struct mk_named_config {
        char *name;
        struct mk_pos pos;
        struct mk_config_entry *entries;
        size_t n_entries;
};

struct mk_config {
        char *file;                      /* for messages; "<stdin>" for "-" */
        char *version;                   /* "v1", or NULL for an empty document */
        struct mk_named_config *configs;
        size_t n_configs;
};

/* Parses `len` bytes of YAML. `file` names the input in errors. Every file
 * upstream accepts parses with the same meaning; an invalid one returns
 * -EINVAL (or -E2BIG over MK_MAX_YAML_BYTES) with one precise error in `e`
 * (file, line, column, field path like "mig-configs.balanced[1].devices").
 * Stricter than upstream where upstream silently ignores: an unparseable
 * device-filter and negative device indices are errors. Also errors here:
 * duplicate keys (go-yaml v2 keeps the last), null or too large device
 * indices, and going over the MK_MAX_* caps above. */
int mk_config_parse(const char *data, size_t len, const char *file, struct mk_config **ret, struct mk_error *e);
/* Reads (path "-" = stdin, capped) and parses. */
int mk_config_load(const char *path, struct mk_config **ret, struct mk_error *e);
struct mk_config *mk_config_free(struct mk_config *c);
static inline void mk_config_freep(struct mk_config **c) {
        mk_config_free(*c);
}

/* Upstream's selection rules (mig-parted v0.15.0 cmd/nvidia-mig-parted/assert/assert.go): NULL/empty name with exactly one config
 * selects it; with several, -EINVAL "missing required flag 'selected-config'
 * when more than one config available"; an unknown name, -ENOENT "selected
 * mig-config not present: <name>"; each followed by the config names in
 * parentheses, and a close name as "did you mean". */
int mk_config_select(const struct mk_config *c, const char *name, const struct mk_named_config **ret,
                     struct mk_error *e);

/* The config names, ", " separated, into buf; -ENOBUFS when they do not
 * fit (buf then ends ", .."). */
int mk_config_names(const struct mk_config *c, char *buf, size_t size);

/* Parses one device-filter string (mig-parted v0.15.0 pkg/types/device.go, Go base-0 integers). */
int mk_device_filter_parse(const char *s, struct mk_device_filter *ret, struct mk_error *e);
/* Device + vendor equal, and subsystem too when the filter has one. */
bool mk_device_filter_match(const struct mk_device_filter *f, uint32_t pci_device_id, uint32_t pci_subsystem_id);

/* Does entry `x` select GPU `index` with these PCI ids (mig-parted v0.15.0 api/spec/v1)? No filter
 * matches all; several filters match any. */
bool mk_config_entry_matches(const struct mk_config_entry *x, unsigned index, uint32_t pci_device_id,
                             uint32_t pci_subsystem_id);

/* Upstream accepts a GPU index listed twice in one entry's `devices`
 * (`[0, 0]`: the GPU is selected once), and so do we, with a warning: for
 * the first entry of `nc` that has one, 1 and the warning in *w ("GPU
 * index 0 is listed twice in 'devices' of mig-configs.x[0]: ...", at the
 * second one's file:line:column); else 0. */
int mk_config_duplicate_device(const struct mk_config *c, const struct mk_named_config *nc, struct mk_error *w);

/* The entry's mig-devices as a canonical layout (zero counts dropped). */
int mk_config_entry_layout(const struct mk_config_entry *x, struct mk_layout *ret);
