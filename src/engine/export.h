/* `export`: the live MIG layout as mig-parted v1 config entries, grouped the
 * way mig-parted groups them (mig-parted v0.15.0 cmd/nvidia-mig-parted/export), so that feeding the output
 * back to `apply` reproduces the layout. Pure: works on a snapshot. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "mig/gpu.h"
#include "mig/layout.h"

struct mk_export_entry {
        uint32_t *filters;      /* PCI ids 0xDDDDVVVV, sorted; none = no device-filter */
        size_t n_filters;
        bool all_devices;       /* `devices: all` */
        unsigned *devices;      /* GPU indices, sorted (when !all_devices) */
        size_t n_devices;
        bool mig_enabled;
        struct mk_layout layout; /* canonical; empty when disabled or no instances */
};

struct mk_export {
        struct mk_export_entry *entries;
        size_t n_entries;
        /* GIs left out because they have no compute instance (a v1 config
         * cannot express them); callers warn about them. */
        size_t n_gis_without_ci;
};

/* Builds the grouped entries from a snapshot. Returns 0 or -ENOMEM. */
int mk_export_build(const struct mk_snapshot *s, struct mk_export *ret, struct mk_error *e);
void mk_export_done(struct mk_export *x);
