/* The simulated interconnect: NvLinks (to NVSwitch chips or to a bridged
 * neighbour) and the PCIe tree, derived from the machine (catalog.c) and the
 * models of its GPUs; nothing of it is kept in the state file. */
#pragma once

#include <stdbool.h>

#include "lib/state.h"

struct sim_link {
        bool active;
        unsigned remote_type;          /* nvmlIntNvLinkDeviceType_t */
        unsigned remote_bus;           /* PCI bus of the far end (domain 0, device 0) */
        unsigned remote_pci_device_id; /* (device << 16) | vendor; 0 unknown */
};

/* Link `link` of GPU `gpu`: false when the GPU has no such link (the NVML
 * answer is then NOT_SUPPORTED). */
bool sim_topo_link(const struct sim_state *st, unsigned gpu, unsigned link, struct sim_link *ret);

/* nvmlGpuTopologyLevel_t of the closest common PCIe ancestor of two GPUs. */
unsigned sim_topo_pcie_level(const struct sim_state *st, unsigned a, unsigned b);

/* The bus number of NVSwitch chip `i` (UNVERIFIED, made up: 0xC4 up). */
unsigned sim_topo_switch_bus(unsigned i);
