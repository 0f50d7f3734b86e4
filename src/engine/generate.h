/* A mig-parted v1 config generated from the profiles the GPUs report
 * (mig-parted v0.15.0 generate-config): all-disabled, all-enabled, all-<profile> for every GPU
 * instance profile, all-balanced by upstream's rules, device-filter entries
 * on nodes with several MIG-capable models. Pure: works on a snapshot. */
#pragma once

#include <jansson.h>

#include "base/error.h"
#include "mig/gpu.h"

/* The config as a JSON tree in mig-parted's structure (version, mig-configs,
 * configs sorted by name). -ENODATA when the node has no MIG-capable GPU or
 * no GPU reports profiles (callers then fall back to a static file). */
int mk_generate_config(const struct mk_snapshot *s, json_t **ret, struct mk_error *e);
