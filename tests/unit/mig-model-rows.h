/* GPU models as data for the plan/ unit tests (test-plan.c, and test-fit*.c
 * through test-fit-models.h): GI profile rows of an A100-40GB, an A100-80GB
 * and an H100-80GB, written once. Sources: the MIG user guide's
 * supported-profiles tables and k8s-test-infra profiles/mig (memory in MiB
 * from the GiB column: 9.75 GiB = 9984 MiB, ...); placements as NVML's
 * nvmlDeviceGetGpuInstancePossiblePlacements reports them; SMs as the
 * simulator's catalog has them. Rows in NVML enum order, as nvml/ lists
 * them. */
#pragma once

#include <stdint.h>

#include "base/macro.h"

struct gi_row {
        const char *name;
        unsigned nvml_enum, id, slices, units, max_count;
        uint64_t memory_mib;
        unsigned sms;
        unsigned starts; /* bit s set: placement start s is valid (MIG user guide, placements) */
};

static const struct gi_row a100_40gb_rows[] _unused_ = {
        {"1g.5gb", 0, 19, 1, 1, 7, 4864, 14, 0x7f},
        {"2g.10gb", 1, 14, 2, 2, 3, 9856, 28, 0x15},
        {"3g.20gb", 2, 9, 3, 4, 2, 19968, 42, 0x11},
        {"4g.20gb", 3, 5, 4, 4, 1, 19968, 56, 0x01},
        {"7g.40gb", 4, 0, 7, 8, 1, 40192, 98, 0x01},
        {"1g.5gb+me", 7, 20, 1, 1, 1, 4864, 14, 0x7f},
        {"1g.10gb", 9, 15, 1, 2, 4, 9856, 14, 0x55},
};

static const struct gi_row a100_80gb_rows[] _unused_ = {
        {"1g.10gb", 0, 19, 1, 1, 7, 9728, 14, 0x7f},
        {"2g.20gb", 1, 14, 2, 2, 3, 19968, 28, 0x15},
        {"3g.40gb", 2, 9, 3, 4, 2, 40192, 42, 0x11},
        {"4g.40gb", 3, 5, 4, 4, 1, 40192, 56, 0x01},
        {"7g.80gb", 4, 0, 7, 8, 1, 80384, 98, 0x01},
        {"1g.10gb+me", 7, 20, 1, 1, 1, 9728, 14, 0x7f},
        {"1g.20gb", 9, 15, 1, 2, 4, 19968, 14, 0x55},
};

static const struct gi_row h100_80gb_rows[] _unused_ = {
        {"1g.10gb", 0, 19, 1, 1, 7, 9984, 16, 0x7f},
        {"2g.20gb", 1, 14, 2, 2, 3, 20096, 32, 0x15},
        {"3g.40gb", 2, 9, 3, 4, 2, 40448, 60, 0x11},
        {"4g.40gb", 3, 5, 4, 4, 1, 40448, 64, 0x01},
        {"7g.80gb", 4, 0, 7, 8, 1, 81152, 132, 0x01},
        {"1g.10gb+me", 7, 20, 1, 1, 1, 9984, 16, 0x7f},
        {"1g.20gb", 9, 15, 1, 2, 4, 20096, 26, 0x55},
};
