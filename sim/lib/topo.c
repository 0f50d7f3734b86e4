/* The simulated interconnect; see topo.h and the table in catalog.c.
 *
 * Named NVSwitch machines: every GPU has all its links active, to the switch
 * chips in order (link 0.. to chip 0 first). Custom machines: no switch;
 * consecutive GPUs of a bridge-capable model (h100-nvl) are bridged in pairs
 * (first and second of a run, third and fourth, ...) with all their links;
 * other GPUs with NvLinks have them inactive. PCIe: GPUs 2k and 2k+1 share a
 * PCIe switch tree (the machine's pair level, SINGLE for custom machines),
 * GPUs of one group of 4 share a NUMA node (NODE) and the two halves of the
 * machine are on two sockets (SYSTEM). The layout rule is ours, modelled on
 * the DGX block diagrams: UNVERIFIED beyond "two sockets". */
#include "lib/catalog.h"
#include "lib/topo.h"
#include "lib/util.h"
#include "nvml/nvml-abi.h"

unsigned sim_topo_switch_bus(unsigned i) {
        return 0xC4 + i;
}

static const struct sim_topology *machine_topology(const struct sim_state *st) {
        const struct sim_machine *m = st->machine ? sim_machine_find(st->machine) : NULL;
        return m ? m->topology : NULL;
}

/* The bridged neighbour of GPU `gpu` on a custom machine, or -1. */
static int bridge_peer(const struct sim_state *st, unsigned gpu) {
        const struct sim_model *m = st->gpus[gpu].model;
        if (!m->nvlink_bridge)
                return -1;
        unsigned first = gpu;
        while (first > 0 && st->gpus[first - 1].model == m)
                first--;
        unsigned peer = (gpu - first) % 2 == 0 ? gpu + 1 : gpu - 1;
        if (peer >= st->n_gpus || st->gpus[peer].model != m)
                return -1;
        return (int) peer;
}

bool sim_topo_link(const struct sim_state *st, unsigned gpu, unsigned link, struct sim_link *ret) {
        if (gpu >= st->n_gpus)
                return false;
        const struct sim_model *m = st->gpus[gpu].model;
        if (link >= m->nvlinks)
                return false;
        *ret = (struct sim_link) { .active = false, .remote_type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN };

        const struct sim_topology *t = machine_topology(st);
        if (t && t->switches > 0) {
                unsigned first = 0;
                for (unsigned s = 0; s < t->switches; s++) {
                        if (link < first + t->links_per_switch[s]) {
                                *ret = (struct sim_link) {
                                        .active = true,
                                        .remote_type = NVML_NVLINK_DEVICE_TYPE_SWITCH,
                                        .remote_bus = sim_topo_switch_bus(s),
                                        .remote_pci_device_id = t->switch_pci_device_id,
                                };
                                return true;
                        }
                        first += t->links_per_switch[s];
                }
                return true; /* a link beyond the spread: present, inactive */
        }
        int peer = bridge_peer(st, gpu);
        if (peer >= 0)
                *ret = (struct sim_link) {
                        .active = true,
                        .remote_type = NVML_NVLINK_DEVICE_TYPE_GPU,
                        .remote_bus = st->gpus[peer].bus,
                        .remote_pci_device_id = st->gpus[peer].model->pci_device_id,
                };
        return true;
}

unsigned sim_topo_pcie_level(const struct sim_state *st, unsigned a, unsigned b) {
        if (a == b)
                return NVML_TOPOLOGY_INTERNAL;
        const struct sim_topology *t = machine_topology(st);
        size_t n = st->n_gpus;
        size_t half = n <= 4 ? 4 : (n + 1) / 2; /* GPUs per socket */
        if (a / 2 == b / 2)
                return t ? t->pair_level : NVML_TOPOLOGY_SINGLE;
        if (a / half != b / half)
                return NVML_TOPOLOGY_SYSTEM;
        return NVML_TOPOLOGY_NODE;
}
