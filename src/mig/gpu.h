/* What migkit knows about a node's GPUs: one snapshot, filled in by nvml/
 * from what the GPUs report (never from tables), read by every other module.
 * Plain data; mk_snapshot_free() releases everything. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mig/layout.h"
#include "mig/profile.h"

#define MK_UUID_MAX 96
#define MK_GPU_NAME_MAX 96
#define MK_BUS_ID_MAX 32

enum mk_mig_mode {
        MK_MIG_DISABLED = 0,
        MK_MIG_ENABLED = 1,
        MK_MIG_UNSUPPORTED = 2,  /* GPU is not MIG-capable */
};

/* A compute-instance profile of a GI profile. */
struct mk_ci_profile {
        unsigned nvml_enum;       /* NVML_COMPUTE_INSTANCE_PROFILE_* */
        unsigned id;              /* driver profile id; UINT32_MAX when derived, not queried */
        unsigned slices;          /* C */
        unsigned max_count;       /* instanceCount; 0 when derived */
        unsigned multiprocessors; /* 0 when derived */
        bool queried;             /* read from NVML on a live GI, not derived by rule */
        char name[MK_PROFILE_NAME_MAX];
        struct mk_placement *placements; /* in compute-slice units; NULL when not queried */
        size_t n_placements;
};

struct mk_gi_profile {
        unsigned nvml_enum;       /* NVML_GPU_INSTANCE_PROFILE_* */
        unsigned id;              /* driver profile id (nvidia-smi's "ID") */
        unsigned slices;          /* G, sliceCount */
        unsigned max_count;       /* instanceCount */
        uint64_t memory_mib;      /* memorySizeMB */
        unsigned multiprocessors;
        unsigned copy_engines, decoders, encoders, jpegs, ofas;
        bool named;               /* name[] valid (false for enums the rules cannot name) */
        char name[MK_PROFILE_NAME_MAX];
        struct mk_profile_name pname;
        struct mk_placement *placements; /* in memory units */
        size_t n_placements;
        struct mk_ci_profile *ci_profiles;
        size_t n_ci_profiles;
};

struct mk_ci {
        unsigned id;
        unsigned profile_id;      /* driver CI profile id */
        unsigned nvml_enum;       /* UINT32_MAX when not mapped */
        unsigned slices;
        struct mk_placement placement;
        char name[MK_PROFILE_NAME_MAX];  /* e.g. "1c.2g.10gb" */
        char uuid[MK_UUID_MAX];   /* MIG device UUID, "" when unknown */
        unsigned mig_index;       /* slot for nvmlDeviceGetMigDeviceHandleByIndex */
};

struct mk_gi {
        unsigned id;
        unsigned profile_id;      /* driver GI profile id */
        unsigned nvml_enum;       /* UINT32_MAX when not mapped */
        struct mk_placement placement;
        struct mk_ci *cis;
        size_t n_cis;
};

struct mk_gpu {
        unsigned index;           /* NVML index */
        char uuid[MK_UUID_MAX];
        char name[MK_GPU_NAME_MAX];
        char bus_id[MK_BUS_ID_MAX];   /* "00000000:07:00.0" as NVML writes it */
        uint32_t pci_device_id;       /* 0xDDDDVVVV */
        uint32_t pci_subsystem_id;    /* 0xSSSSVVVV */
        unsigned minor;
        uint64_t memory_total_bytes;
        int cc_major, cc_minor;
        unsigned architecture;        /* NVML_DEVICE_ARCH_* */
        bool mig_capable;
        enum mk_mig_mode mig_current, mig_pending;
        unsigned memory_units;        /* placement units of the GPU (8 or 4), 0 when unknown */
        struct mk_gi_profile *profiles;
        size_t n_profiles;
        struct mk_gi *gis;
        size_t n_gis;
};

struct mk_snapshot {
        char driver_version[80];
        char nvml_version[80];
        unsigned cuda_driver_version;   /* e.g. 12040 for CUDA 12.4; 0 when NVML cannot tell */
        struct mk_gpu *gpus;
        size_t n_gpus;
        /* Interconnect, n_gpus × n_gpus row-major (entry [i * n_gpus + j]),
         * NULL when NVML could not tell. `nvlinks`: active NVLinks joining GPU
         * i to GPU j (directly or through NVSwitch; 0 = none). `pcie_level`:
         * NVML topology level of the pair's common PCIe ancestor
         * (nvmlGpuTopologyLevel_t: 0 internal, 10 single switch, 20 multiple
         * switches, 30 host bridge, 40 NUMA node, 50 system). */
        unsigned *nvlinks;
        unsigned *pcie_level;
};

void mk_gpu_done(struct mk_gpu *g);
struct mk_snapshot *mk_snapshot_free(struct mk_snapshot *s);
static inline void mk_snapshot_freep(struct mk_snapshot **s) {
        mk_snapshot_free(*s);
}

/* The GI profile with this driver id / NVML enum, or NULL. */
const struct mk_gi_profile *mk_gpu_profile_by_id(const struct mk_gpu *g, unsigned id);
const struct mk_gi_profile *mk_gpu_profile_by_enum(const struct mk_gpu *g, unsigned nvml_enum);

/* The current layout as mig-parted counts it: one item per compute instance,
 * named by its CI (GIs without CIs are not counted, as upstream). */
int mk_gpu_current_layout(const struct mk_gpu *g, struct mk_layout *ret);
