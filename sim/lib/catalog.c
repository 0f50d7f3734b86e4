/* The simulator's catalog of GPU models and machines; see catalog.h.
 *
 * Source of every number: the MIG user guide (supported profiles and placements),
 * k8s-test-infra profiles/mig and the NVML reference (driver profile ids); see
 * docs/references.md. Memory is in MiB, converted from the GiB the
 * tables give (9.75 GiB = 9984 MiB). Where the reference records nothing, the
 * value is chosen so the profile NAME comes out as the reference names it
 * under the rounding rule of go-nvlib v0.12 pkg/nvlib/device/mig_profile.go, and is marked UNVERIFIED. */
#include <jansson.h>
#include <sys/stat.h>

#include "lib/catalog.h"
#include "lib/util.h"
#include "nvml/nvml-abi.h"

#define SIM_MACHINE_FILE_MAX (64 * 1024) /* a machine JSON file */

/* Placement starts (MIG user guide, placements, MIG user guide, placements), as bit masks over memory units. */
#define S_1G 0x7Fu   /* 0..6: 1g and 1g+me on 8-unit parts */
#define S_1G2 0x55u  /* 0, 2, 4, 6: 1g double memory */
#define S_2G 0x15u   /* 0, 2, 4 */
#define S_3G 0x11u   /* 0, 4 */
#define S_0 0x01u    /* 0 only: 4g and 7g */
#define S_A30_1G 0x0Fu
#define S_A30_2G 0x05u

#define GI(e, i, g, u, mx, mem, sm, ce_, dec_, enc_, jpeg_, ofa_, st, me)                                   \
        {                                                                                                    \
                .nvml_enum = (e), .id = (i), .slices = (g), .units = (u), .max = (mx), .memory_mib = (mem), \
                .sms = (sm), .ce = (ce_), .dec = (dec_), .enc = (enc_), .jpeg = (jpeg_), .ofa = (ofa_),     \
                .starts = (st), .media = (me)                                                               \
        }

#define E_1G NVML_GPU_INSTANCE_PROFILE_1_SLICE
#define E_1GME NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
#define E_2GME NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
#define E_1G2 NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
#define E_2G NVML_GPU_INSTANCE_PROFILE_2_SLICE
#define E_3G NVML_GPU_INSTANCE_PROFILE_3_SLICE
#define E_4G NVML_GPU_INSTANCE_PROFILE_4_SLICE
#define E_7G NVML_GPU_INSTANCE_PROFILE_7_SLICE

/* A30-24GB. Driver ids, memory and the +me placements are UNVERIFIED
 * (the reference marks the ID column UNVERIFIED and records no memory):
 * memory chosen as 5.8125 / 11.625 / 23.25 GiB of a 24576 MiB board, which
 * names 1g.6gb, 2g.12gb, 4g.24gb. CE counts of the +me rows UNVERIFIED. */
static const struct sim_gi_profile a30_profiles[] = {
        GI(E_1G, 14, 1, 1, 4, 5952, 14, 1, 0, 0, 0, 0, S_A30_1G, false),
        GI(E_1GME, 21, 1, 1, 1, 5952, 14, 1, 1, 0, 1, 1, S_A30_1G, true),
        GI(E_2G, 5, 2, 2, 2, 11904, 28, 2, 2, 0, 0, 0, S_A30_2G, false),
        GI(E_2GME, 6, 2, 2, 1, 11904, 28, 2, 2, 0, 1, 1, S_A30_2G, true),
        GI(E_4G, 0, 4, 4, 1, 23808, 56, 4, 4, 0, 1, 1, S_0, false),
};

/* A100-SXM4-40GB: memory [fixture]. SMs of 1g+me and 1g.10gb, and the
 * CE/JPEG/OFA counts not listed in the table, UNVERIFIED. */
static const struct sim_gi_profile a100_40_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 4864, 14, 1, 0, 0, 0, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 4864, 14, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 9856, 14, 1, 1, 0, 0, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 9856, 28, 2, 1, 0, 0, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 19968, 42, 3, 2, 0, 0, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 19968, 56, 4, 2, 0, 0, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 40192, 98, 7, 5, 0, 1, 1, S_0, false),
};

/* A100-SXM4-80GB: 1g, 2g, 3g memory and SMs [hw]. UNVERIFIED: 1g.20gb
 * memory (as 2g), 4g memory (as 3g), 7g memory (80384 MiB, twice the 40 GB
 * part's), SMs of 1g+me / 1g.20gb / 4g / 7g, all engine counts (as 40 GB). */
static const struct sim_gi_profile a100_80_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 9728, 14, 1, 0, 0, 0, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 9728, 14, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 19968, 14, 1, 1, 0, 0, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 19968, 28, 2, 1, 0, 0, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 40192, 42, 3, 2, 0, 0, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 40192, 56, 4, 2, 0, 0, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 80384, 98, 7, 5, 0, 1, 1, S_0, false),
};

/* H100 80GB HBM3 [hw]. UNVERIFIED: 1g+me memory/SMs (as 1g), engine
 * counts of 1g+me (1g + 1 OFA) and of 1g.20gb (as 1g). */
static const struct sim_gi_profile h100_80_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 9984, 16, 1, 1, 0, 1, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 9984, 16, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 20096, 26, 1, 1, 0, 1, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 20096, 32, 2, 2, 0, 2, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 40448, 60, 3, 3, 0, 3, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 40448, 64, 4, 4, 0, 4, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 81152, 132, 8, 7, 0, 7, 1, S_0, false),
};

/* H200 [hw]: memory, SMs. UNVERIFIED: 1g+me row (as 1g), every engine
 * count (as H100). */
static const struct sim_gi_profile h200_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 16384, 16, 1, 1, 0, 1, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 16384, 16, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 33024, 26, 1, 1, 0, 1, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 33024, 32, 2, 2, 0, 2, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 71168, 60, 3, 3, 0, 3, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 71168, 64, 4, 4, 0, 4, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 143104, 132, 8, 7, 0, 7, 1, S_0, false),
};

/* GH200 144G HBM3e [hw]: 1g, 1g.36gb memory; 1g, 1g.36gb, 2g SMs; ids
 * 19/20/15/14. UNVERIFIED: board memory 147000 MiB (chosen so the names come
 * out 1g.18gb, 1g.36gb, 7g.144gb), 2g memory (as 1g.36gb), 3g/4g memory
 * 72704 MiB, 7g memory 146176 MiB, ids 9/5/0 (common mapping), SMs of
 * 3g/4g/7g and +me (as H100), every engine count (as H100). */
static const struct sim_gi_profile gh200_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 17920, 16, 1, 1, 0, 1, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 17920, 16, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 36096, 26, 1, 1, 0, 1, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 36096, 32, 2, 2, 0, 2, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 72704, 60, 3, 3, 0, 3, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 72704, 64, 4, 4, 0, 4, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 146176, 132, 8, 7, 0, 7, 1, S_0, false),
};

/* B200 [hw]: 1g, 1g.45gb, 2g memory and SMs; 1g and 2g engines.
 * UNVERIFIED: 3g/4g memory 91392 MiB (89.25 GiB), 7g memory 182528 MiB
 * (178.25 GiB), SMs 68/72/144 for 3g/4g/7g, the +me row (as 1g + 1 OFA),
 * JPEG counts of 2g and larger, CE counts of 3g and larger. */
static const struct sim_gi_profile b200_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 22528, 18, 2, 1, 0, 1, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 22528, 18, 2, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 45312, 30, 2, 1, 0, 1, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 45312, 36, 4, 2, 0, 2, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 91392, 68, 6, 3, 0, 3, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 91392, 72, 8, 4, 0, 4, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 182528, 144, 14, 7, 0, 7, 1, S_0, false),
};

/* H100 NVL 94 GB [names only]. UNVERIFIED: every memory size (chosen
 * so the names come out 1g.12gb, 1g.24gb, 2g.24gb, 3g.47gb, 4g.47gb,
 * 7g.94gb on a 95830 MiB board), ids (the common mapping), SMs and engine
 * counts (as H100 80GB HBM3). */
static const struct sim_gi_profile h100_nvl_profiles[] = {
        GI(E_1G, 19, 1, 1, 7, 11520, 16, 1, 1, 0, 1, 0, S_1G, false),
        GI(E_1GME, 20, 1, 1, 1, 11520, 16, 1, 1, 0, 1, 1, S_1G, true),
        GI(E_1G2, 15, 1, 2, 4, 23296, 26, 1, 1, 0, 1, 0, S_1G2, false),
        GI(E_2G, 14, 2, 2, 3, 23296, 32, 2, 2, 0, 2, 0, S_2G, false),
        GI(E_3G, 9, 3, 4, 2, 46848, 60, 3, 3, 0, 3, 0, S_3G, false),
        GI(E_4G, 5, 4, 4, 1, 46848, 64, 4, 4, 0, 4, 0, S_0, false),
        GI(E_7G, 0, 7, 8, 1, 94464, 132, 8, 7, 0, 7, 1, S_0, false),
};

#define PROFILES(p) .profiles = (p), .n_profiles = ELEMENTSOF(p)

/* Data-sheet figures (public spec sheets, boost clocks): SMs, power (W), SM
 * and memory clocks (MHz), memory bus width (bits), L2 (MiB), PCIe generation
 * and width; and ctx_mib, the device memory a context takes: estimates from
 * publicly reported per-process figures of processes that only created a
 * context, CUDA 12 with lazy loading; not measured by this project
 * (docs/simulator.md). */
#define SHEET(sms_, power, sm, mem, bus, l2, gen, width, ctx)                                               \
        .sheet = {                                                                                           \
                .sms = (sms_), .power_w = (power), .sm_mhz = (sm), .mem_mhz = (mem), .bus_width = (bus),    \
                .l2_mib = (l2), .pcie_gen = (gen), .pcie_width = (width), .ctx_mib = (ctx)                  \
        }

/* Subsystem ids are UNVERIFIED for every model (one plausible board each). */
static const struct sim_model models[] = {
        { .key = "a30-24gb", .name = "NVIDIA A30", .pci_device_id = 0x20B710DE,
          .pci_subsystem_id = 0x153210DE, .arch = NVML_DEVICE_ARCH_AMPERE, .cc_major = 8, .cc_minor = 0,
          .memory_mib = 24576 /* UNVERIFIED */, .compute_slices = 4, .memory_units = 4,
          .mode_persistent = true, PROFILES(a30_profiles),
          SHEET(56, 165, 1440, 1215, 3072, 24, 4, 16, 400) },
        { .key = "a100-40gb", .name = "NVIDIA A100-SXM4-40GB", .pci_device_id = 0x20B010DE,
          .pci_subsystem_id = 0x145F10DE, .arch = NVML_DEVICE_ARCH_AMPERE, .cc_major = 8, .cc_minor = 0,
          .memory_mib = 40960, .compute_slices = 7, .memory_units = 8, .mode_persistent = true,
          .nvlinks = 12, PROFILES(a100_40_profiles),
          SHEET(108, 400, 1410, 1215, 5120, 40, 4, 16, 400) },
        { .key = "a100-80gb", .name = "NVIDIA A100-SXM4-80GB", .pci_device_id = 0x20B210DE,
          .pci_subsystem_id = 0x147F10DE, .arch = NVML_DEVICE_ARCH_AMPERE, .cc_major = 8, .cc_minor = 0,
          .memory_mib = 81920, .compute_slices = 7, .memory_units = 8, .mode_persistent = true,
          .nvlinks = 12, PROFILES(a100_80_profiles),
          SHEET(108, 400, 1410, 1593, 5120, 40, 4, 16, 400) },
        { .key = "h100-80gb", .name = "NVIDIA H100 80GB HBM3", .pci_device_id = 0x233010DE,
          .pci_subsystem_id = 0x16C110DE, .arch = NVML_DEVICE_ARCH_HOPPER, .cc_major = 9, .cc_minor = 0,
          .memory_mib = 81559, .compute_slices = 7, .memory_units = 8, .mode_persistent = false,
          .nvlinks = 18, PROFILES(h100_80_profiles),
          SHEET(132, 700, 1980, 2619, 5120, 50, 5, 16, 500) },
        /* H100 NVL: a PCIe card; 12 NvLinks (the 600 GB/s bridge bandwidth at
         * 50 GB/s per NVLink 4 link) to the bridged neighbour. Board memory
         * 95830 MiB and subsystem id UNVERIFIED. */
        { .key = "h100-nvl", .name = "NVIDIA H100 NVL", .pci_device_id = 0x232110DE,
          .pci_subsystem_id = 0x183910DE, .arch = NVML_DEVICE_ARCH_HOPPER, .cc_major = 9, .cc_minor = 0,
          .memory_mib = 95830, .compute_slices = 7, .memory_units = 8, .mode_persistent = false,
          .nvlinks = 12, .nvlink_bridge = true, PROFILES(h100_nvl_profiles),
          SHEET(132, 400, 1785, 2619, 6144, 50, 5, 16, 500) },
        { .key = "h200-141gb", .name = "NVIDIA H200", .pci_device_id = 0x233510DE,
          .pci_subsystem_id = 0x18A210DE, .arch = NVML_DEVICE_ARCH_HOPPER, .cc_major = 9, .cc_minor = 0,
          .memory_mib = 143771, .compute_slices = 7, .memory_units = 8, .mode_persistent = false,
          .nvlinks = 18, PROFILES(h200_profiles),
          SHEET(132, 700, 1980, 3201, 6144, 50, 5, 16, 500) },
        { .key = "gh200-144gb", .name = "NVIDIA GH200 144G HBM3e", .pci_device_id = 0x234810DE,
          .pci_subsystem_id = 0x18B010DE, .arch = NVML_DEVICE_ARCH_HOPPER, .cc_major = 9, .cc_minor = 0,
          .memory_mib = 147000 /* UNVERIFIED, see gh200_profiles */, .compute_slices = 7, .memory_units = 8,
          .mode_persistent = false, .nvlinks = 18, PROFILES(gh200_profiles),
          /* 900 W: the module's, shared with the Grace CPU: UNVERIFIED which the GPU reports. */
          SHEET(132, 900, 1980, 2619, 6144, 60, 5, 16, 500) },
        { .key = "b200", .name = "NVIDIA B200", .pci_device_id = 0x290110DE, .pci_subsystem_id = 0x199910DE,
          .arch = NVML_DEVICE_ARCH_BLACKWELL, .cc_major = 10, .cc_minor = 0, .memory_mib = 183359,
          .compute_slices = 7, .memory_units = 8, .mode_persistent = false, .nvlinks = 18,
          PROFILES(b200_profiles),
          SHEET(148, 1000, 1965, 4000, 8192, 126, 5 /* UNVERIFIED */, 16, 600) },
        { .key = "t4", .name = "Tesla T4", .pci_device_id = 0x1EB810DE, .pci_subsystem_id = 0x12A210DE,
          .arch = NVML_DEVICE_ARCH_TURING, .cc_major = 7, .cc_minor = 5, .memory_mib = 15360,
          .compute_slices = 0, .memory_units = 0, .mode_persistent = false, .profiles = NULL, .n_profiles = 0,
          SHEET(40, 70, 1590, 5001, 256, 4, 3, 16, 250) },
};

/* NVSwitch systems. Links per GPU: A100 12, H100/H200/B200 18 (product
 * briefs). Their spread over the switch chips (DGX A100: 6 chips, 2 links
 * each; HGX H100/H200: 4 chips, 5+4+4+5; DGX B200: 2 chips, 9+9) and the
 * switch PCI ids are UNVERIFIED. The PCIe level of GPUs 2k, 2k+1 is
 * UNVERIFIED too (DGX A100: two levels of PCIe switches, PXB; the others: one
 * switch, PIX); groups of 4 share a NUMA node and the two halves sit on the
 * two CPU sockets (topo.c). */
static const unsigned char dgx_a100_spread[] = { 2, 2, 2, 2, 2, 2 };
static const unsigned char hgx_h100_spread[] = { 5, 4, 4, 5 };
static const unsigned char dgx_b200_spread[] = { 9, 9 };
static const struct sim_topology dgx_a100_topology = {
        .switches = 6, .links_per_switch = dgx_a100_spread, .switch_pci_device_id = 0x1AF110DE,
        .pair_level = NVML_TOPOLOGY_MULTIPLE,
};
static const struct sim_topology hgx_h100_topology = {
        .switches = 4, .links_per_switch = hgx_h100_spread, .switch_pci_device_id = 0x22A310DE,
        .pair_level = NVML_TOPOLOGY_SINGLE,
};
static const struct sim_topology dgx_b200_topology = {
        .switches = 2, .links_per_switch = dgx_b200_spread, .switch_pci_device_id = 0,
        .pair_level = NVML_TOPOLOGY_SINGLE,
};

static const struct sim_machine machines[] = {
        { "dgx-a100", "DGX A100: 8 x NVIDIA A100-SXM4-40GB, NVSwitch (12 NvLinks per GPU)", "a100-40gb*8",
          &dgx_a100_topology },
        { "dgx-h100", "DGX H100: 8 x NVIDIA H100 80GB HBM3, NVSwitch (18 NvLinks per GPU)", "h100-80gb*8",
          &hgx_h100_topology },
        { "hgx-h200", "HGX H200: 8 x NVIDIA H200, NVSwitch (18 NvLinks per GPU)", "h200-141gb*8", &hgx_h100_topology },
        { "dgx-b200", "DGX B200: 8 x NVIDIA B200, NVSwitch (18 NVLink 5 links per GPU)", "b200*8",
          &dgx_b200_topology },
        { "mixed-a100", "4 x NVIDIA A100-SXM4-40GB + 4 x NVIDIA A100-SXM4-80GB, NVSwitch", "a100-40gb*4,a100-80gb*4",
          &dgx_a100_topology },
        { "h100-nvl-pairs", "4 x NVIDIA H100 NVL, NVLink bridges (0,1) and (2,3)", "h100-nvl*4", NULL },
        /* One single-GPU machine per model, named like the model. */
        { "a30-24gb", "1 x NVIDIA A30", "a30-24gb", NULL },
        { "a100-40gb", "1 x NVIDIA A100-SXM4-40GB", "a100-40gb", NULL },
        { "a100-80gb", "1 x NVIDIA A100-SXM4-80GB", "a100-80gb", NULL },
        { "h100-80gb", "1 x NVIDIA H100 80GB HBM3", "h100-80gb", NULL },
        { "h100-nvl", "1 x NVIDIA H100 NVL (no bridge)", "h100-nvl", NULL },
        { "h200-141gb", "1 x NVIDIA H200", "h200-141gb", NULL },
        { "gh200-144gb", "1 x NVIDIA GH200 144G HBM3e", "gh200-144gb", NULL },
        { "b200", "1 x NVIDIA B200", "b200", NULL },
        { "t4", "1 x Tesla T4 (no MIG)", "t4", NULL },
};

const struct sim_model *sim_model_find(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(models); i++)
                if (streq(models[i].key, key))
                        return &models[i];
        return NULL;
}

const struct sim_model *sim_model_at(size_t i) {
        return i < ELEMENTSOF(models) ? &models[i] : NULL;
}

const struct sim_machine *sim_machine_at(size_t i) {
        return i < ELEMENTSOF(machines) ? &machines[i] : NULL;
}

const struct sim_machine *sim_machine_find(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(machines); i++)
                if (streq(machines[i].name, name))
                        return &machines[i];
        return NULL;
}

static char *join_names(bool want_models) {
        size_t n = want_models ? ELEMENTSOF(models) : ELEMENTSOF(machines), len = 1;

        for (size_t i = 0; i < n; i++)
                len += strlen(want_models ? models[i].key : machines[i].name) + 2;
        char *s = malloc(len);
        if (!s)
                return NULL;
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
                const char *name = want_models ? models[i].key : machines[i].name;
                int w = snprintf(s + off, len - off, "%s%s", i ? ", " : "", name);
                if (w < 0 || (size_t) w >= len - off)
                        break;
                off += (size_t) w;
        }
        s[off] = '\0';
        return s;
}

char *sim_machine_names(void) {
        return join_names(false);
}

char *sim_model_names(void) {
        return join_names(true);
}

/* Appends one "model" or "model*N" item (surrounding blanks ignored). */
static int add_item(const char *item, size_t len, const struct sim_model **out, size_t max, size_t *n) {
        while (len > 0 && (*item == ' ' || *item == '\t'))
                item++, len--;
        while (len > 0 && (item[len - 1] == ' ' || item[len - 1] == '\t'))
                len--;
        if (len == 0)
                return sim_error(-EINVAL, "empty GPU model in machine description");

        char buf[128];
        if (len >= sizeof(buf))
                return sim_error(-EINVAL, "GPU model name too long in machine description");
        memcpy(buf, item, len);
        buf[len] = '\0';

        uint32_t count = 1;
        char *star = strchr(buf, '*');
        if (star) {
                *star = '\0';
                if (sim_parse_u32(star + 1, &count) < 0 || count == 0 || count > SIM_MAX_GPUS)
                        return sim_error(-EINVAL, "invalid GPU count '%s' for model '%s' (1-%d)", star + 1, buf,
                                         SIM_MAX_GPUS);
        }
        const struct sim_model *m = sim_model_find(buf);
        if (!m) {
                _cleanup_free_ char *known = sim_model_names();
                return sim_error(-EINVAL, "unknown GPU model '%s' (known: %s)", buf, known ? known : "?");
        }
        if (*n + count > max)
                return sim_error(-E2BIG, "too many GPUs in machine description (at most %zu)", max);
        for (uint32_t i = 0; i < count; i++)
                out[(*n)++] = m;
        return 0;
}

static int resolve_list(const char *spec, const struct sim_model **out, size_t max) {
        size_t n = 0;
        const char *p = spec;

        for (;;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t) (comma - p) : strlen(p);
                int r = add_item(p, len, out, max, &n);
                if (r < 0)
                        return r;
                if (!comma)
                        break;
                p = comma + 1;
        }
        return (int) n;
}

static int resolve_file(const char *path, const struct sim_model **out, size_t max) {
        struct stat st;
        json_error_t jerr;

        if (stat(path, &st) < 0)
                return sim_error(-errno, "cannot read machine file '%s': %s", path, strerror(errno));
        if (st.st_size > SIM_MACHINE_FILE_MAX)
                return sim_error(-E2BIG, "machine file '%s' is larger than %d bytes", path, SIM_MACHINE_FILE_MAX);
        json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return sim_error(-EINVAL, "machine file '%s':%d:%d: %s", path, jerr.line, jerr.column, jerr.text);

        int r;
        json_t *gpus = json_object_get(root, "gpus");
        if (!json_is_array(gpus) || json_array_size(gpus) == 0) {
                r = sim_error(-EINVAL, "machine file '%s': expected {\"gpus\": [\"model\", ...]}", path);
                goto out;
        }
        size_t n = 0, i;
        json_t *v;
        json_array_foreach(gpus, i, v) {
                if (!json_is_string(v)) {
                        r = sim_error(-EINVAL, "machine file '%s': gpus[%zu] is not a string", path, i);
                        goto out;
                }
                r = add_item(json_string_value(v), strlen(json_string_value(v)), out, max, &n);
                if (r < 0)
                        goto out;
        }
        r = (int) n;
out:
        json_decref(root);
        return r;
}

int sim_machine_resolve(const char *spec, const struct sim_model **out, size_t max) {
        if (!spec || !*spec)
                return sim_error(-EINVAL, "empty machine name");
        if (strlen(spec) >= SIM_MACHINE_SPEC_MAX)
                return sim_error(-E2BIG, "machine description longer than %d bytes", SIM_MACHINE_SPEC_MAX - 1);
        if (spec[0] == '/' || strncmp(spec, "./", 2) == 0)
                return resolve_file(spec, out, max);

        const struct sim_machine *m = sim_machine_find(spec);
        if (m)
                return resolve_list(m->gpus, out, max);

        int r = resolve_list(spec, out, max);
        if (r == -EINVAL && !strchr(spec, ',') && !strchr(spec, '*')) {
                /* A bare unknown word: the user meant a machine. */
                _cleanup_free_ char *known = sim_machine_names();
                return sim_error(-EINVAL, "unknown machine '%s' (known: %s)", spec, known ? known : "?");
        }
        return r;
}

const struct sim_gi_profile *sim_gi_profile_by_enum(const struct sim_model *m, unsigned nvml_enum) {
        for (size_t i = 0; i < m->n_profiles; i++)
                if (m->profiles[i].nvml_enum == nvml_enum)
                        return &m->profiles[i];
        return NULL;
}

const struct sim_gi_profile *sim_gi_profile_by_id(const struct sim_model *m, unsigned id) {
        for (size_t i = 0; i < m->n_profiles; i++)
                if (m->profiles[i].id == id)
                        return &m->profiles[i];
        return NULL;
}

/* Compute slices of the CI profile enums 0..6 (nvml-abi.h); 7 (1_SLICE_REV1)
 * and 8 (7_SLICE_NVL) are not offered by any catalog model. */
static const unsigned ci_enum_slices[] = { 1, 2, 3, 4, 7, 8, 6 };

bool sim_ci_profile_get(const struct sim_gi_profile *p, unsigned ci_enum, struct sim_ci_profile *ret) {
        if (ci_enum >= ELEMENTSOF(ci_enum_slices))
                return false;
        unsigned c = ci_enum_slices[ci_enum], g = p->slices;
        /* Upstream's rule for offered CI sizes (go-nvlib v0.12 pkg/nvlib/device/mig_profile.go). */
        if (c > g || !(c == g || 2 * c <= g + 1))
                return false;
        unsigned align = 1;
        while (align < c)
                align *= 2;
        *ret = (struct sim_ci_profile) {
                .nvml_enum = ci_enum,
                .slices = c,
                .max = g / c,
                .sms = p->sms * c / g,
                .align = c == g ? 1 : align,
        };
        return true;
}

unsigned sim_memory_gb(unsigned long long mem_mib, unsigned long long total_mib) {
        if (total_mib == 0)
                return 0;
        /* eighths = ceil(mem * 8 / total); gib = ceil(total / 1024);
         * result = round(eighths * gib / 8), ties away from zero. */
        unsigned long long eighths = (mem_mib * 8 + total_mib - 1) / total_mib;
        unsigned long long gib = (total_mib + 1023) / 1024;
        return (unsigned) ((eighths * gib * 2 + 8) / 16);
}

void sim_profile_name(const struct sim_model *m, const struct sim_gi_profile *p, unsigned ci_slices, char *buf,
                      size_t size) {
        const char *attr = p->media ? "+me" : "";
        unsigned gb = sim_memory_gb(p->memory_mib, m->memory_mib);

        if (ci_slices && ci_slices != p->slices)
                snprintf(buf, size, "%uc.%ug.%ugb%s", ci_slices, p->slices, gb, attr);
        else
                snprintf(buf, size, "%ug.%ugb%s", p->slices, gb, attr);
}

unsigned sim_gi_id_for_placement(const struct sim_model *m, unsigned start, unsigned size) {
        /* The GPU-instance ids seen on hardware follow the memory-slice tree
         * (MIG user guide, `nvidia-smi mig -lgi` examples: 7g.40gb is id 0,
         * the 3g.20gb at 4:4 id 2, the one at 0:4 id 1, 1g.5gb ids 7-13). */
        if (size == 0 || size > m->memory_units)
                return 0;
        return m->memory_units / size - 1 + start / size;
}

void sim_gpu_uuid(const char *machine, unsigned index, char *buf, size_t size) {
        char key[SIM_MACHINE_SPEC_MAX + 32];
        int n = snprintf(key, sizeof(key), "%s#%u", machine, index);
        size_t len = n < 0 ? 0 : MIN((size_t) n, sizeof(key) - 1);

        sim_format_uuid(buf, size, "GPU-", sim_hash(key, len, 0x6d69676b6974ULL),
                        sim_hash(key, len, 0x73696d756c61ULL), false);
}

void sim_gpu_bus(unsigned index, unsigned count, unsigned *ret_bus) {
        /* DGX A100/H100 bus numbers; larger custom machines get an evenly
         * spaced, still increasing sequence. */
        static const unsigned dgx[] = { 0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD };

        if (count <= ELEMENTSOF(dgx))
                *ret_bus = dgx[index];
        else
                *ret_bus = 0x03 + 3 * index;
}
