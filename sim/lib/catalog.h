/* The simulator's catalog: GPU models with their MIG profile tables, and
 * machines (lists of models). The only place in migkit that holds model
 * tables (DESIGN.md, principle 1). Facts: MIG user guide, supported profiles; k8s-test-infra profiles/mig;
 * every value not confirmed there is marked UNVERIFIED in catalog.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_GPUS 64          /* GPUs in one machine (custom machines included) */
#define SIM_MAX_UNITS 8          /* memory units of the largest part */
#define SIM_MAX_GI 8             /* GPU instances on one GPU (<= memory units) */
#define SIM_MAX_CI 8             /* compute instances in one GPU instance (<= compute slices) */
#define SIM_MACHINE_SPEC_MAX 1024 /* length of a MIGKIT_SIM_MACHINE value */

/* One row of `nvidia-smi mig -lgip`: a GPU-instance profile of a model. */
struct sim_gi_profile {
        unsigned nvml_enum;      /* NVML_GPU_INSTANCE_PROFILE_* */
        unsigned id;             /* driver profile id ("ID" column) */
        unsigned slices;         /* compute slices G */
        unsigned units;          /* memory units = placement size */
        unsigned max;            /* instanceCount */
        unsigned long long memory_mib;
        unsigned sms;
        unsigned ce, dec, enc, jpeg, ofa;
        unsigned starts;         /* bit i set: placement start i is valid */
        bool media;              /* uses the GPU's single media-extension set (+me) */
};

/* A model's figures from its public spec sheet (NVIDIA data sheets; boost
 * clocks), which NVML's sensors (nvml-sensors.c) and the CUDA driver
 * simulator's device attributes (sim/cuda/core.c) report, and the device
 * memory a CUDA context takes on it. */
struct sim_datasheet {
        unsigned sms;            /* streaming multiprocessors of the whole GPU */
        unsigned power_w;        /* maximum (default) power limit, W */
        unsigned sm_mhz;         /* boost SM clock */
        unsigned mem_mhz;        /* memory clock */
        unsigned bus_width;      /* memory bus width, bits */
        unsigned l2_mib;         /* L2 cache of the whole GPU */
        unsigned pcie_gen, pcie_width;
        unsigned ctx_mib;        /* a context's device memory (an estimate: catalog.c) */
};

struct sim_model {
        const char *key;         /* "a100-40gb" */
        const char *name;        /* nvmlDeviceGetName: "NVIDIA A100-SXM4-40GB" */
        unsigned pci_device_id;  /* (device << 16) | vendor */
        unsigned pci_subsystem_id;
        unsigned arch;           /* NVML_DEVICE_ARCH_* */
        int cc_major, cc_minor;
        unsigned long long memory_mib;
        unsigned compute_slices; /* 7 or 4; 0 when the model has no MIG */
        unsigned memory_units;   /* 8 or 4 */
        bool mode_persistent;    /* Ampere: MIG mode survives reboot, changes need a reset */
        unsigned nvlinks;        /* NvLinks of the part (0: none, every link query NOT_SUPPORTED) */
        bool nvlink_bridge;      /* PCIe card whose links go to a bridge to the next card of its kind */
        struct sim_datasheet sheet;
        const struct sim_gi_profile *profiles;
        size_t n_profiles;
};

/* A compute-instance profile of a GI profile, derived by rule (catalog.c). */
struct sim_ci_profile {
        unsigned nvml_enum;      /* NVML_COMPUTE_INSTANCE_PROFILE_*, also the driver id */
        unsigned slices;         /* C */
        unsigned max;            /* G / C */
        unsigned sms;
        unsigned align;          /* placement starts are multiples of this */
};

/* Interconnect of a named machine (topo.c). Custom machines get none:
 * PCIe only, plus NVLink bridges between consecutive bridge-capable cards. */
struct sim_topology {
        unsigned switches;          /* NVSwitch chips every GPU links to (0: none) */
        const unsigned char *links_per_switch; /* [switches]: links of each GPU to switch s, in link order */
        unsigned switch_pci_device_id;         /* (device << 16) | vendor of the switch, 0 unknown */
        unsigned pair_level;        /* nvmlGpuTopologyLevel_t of GPUs 2k and 2k+1 (one PCIe switch tree) */
};

struct sim_machine {
        const char *name;
        const char *description;
        const char *gpus;        /* custom-machine syntax: "a100-40gb*4,a100-80gb*4" */
        const struct sim_topology *topology; /* NULL: the custom-machine rule */
};

const struct sim_model *sim_model_find(const char *key);
const struct sim_model *sim_model_at(size_t i);  /* NULL past the end */
const struct sim_machine *sim_machine_at(size_t i);
const struct sim_machine *sim_machine_find(const char *name);

static inline bool sim_model_has_mig(const struct sim_model *m) {
        return m->compute_slices > 0;
}

/* Resolves a machine: catalog name, custom list "model[*N],...", or a JSON
 * file {"gpus": [...]} when spec starts with '/' or './'. Fills models[] (at
 * most SIM_MAX_GPUS) and returns the count, or -EINVAL / -E2BIG / -errno with
 * sim_error() set to a one-line message. */
int sim_machine_resolve(const char *spec, const struct sim_model **models, size_t max);

/* Comma-separated lists of catalog names, for messages. malloc'ed. */
char *sim_machine_names(void);
char *sim_model_names(void);

/* GI profile of a model by NVML enum or by driver id; NULL when absent. */
const struct sim_gi_profile *sim_gi_profile_by_enum(const struct sim_model *m, unsigned nvml_enum);
const struct sim_gi_profile *sim_gi_profile_by_id(const struct sim_model *m, unsigned id);

/* The compute-instance profile `ci_enum` of GI profile p; false when that
 * enum is not offered (enums 7 and 8 never are). */
bool sim_ci_profile_get(const struct sim_gi_profile *p, unsigned ci_enum, struct sim_ci_profile *ret);

/* Memory part of a profile name: round(ceil(mem*8/total)/8 * ceil(total/1GiB)). */
unsigned sim_memory_gb(unsigned long long mem_mib, unsigned long long total_mib);

/* "1g.5gb", "1g.5gb+me", "1c.7g.40gb" (ci_slices 0 or == G for the GI name). */
void sim_profile_name(const struct sim_model *m, const struct sim_gi_profile *p, unsigned ci_slices,
                      char *buf, size_t size);

/* The GPU-instance id the driver assigns to a placement: the node of the
 * binary tree over memory units (0 = whole GPU, 1-2 halves, 3-6 quarters,
 * 7-14 eighths on 8-unit parts). */
unsigned sim_gi_id_for_placement(const struct sim_model *m, unsigned start, unsigned size);

/* Deterministic identities. */
void sim_gpu_uuid(const char *machine, unsigned index, char *buf, size_t size);
void sim_gpu_bus(unsigned index, unsigned count, unsigned *ret_bus);
