/* NVML's topology functions: NvLinks, PCIe ancestors, P2P, nearest GPUs,
 * CPU and memory affinity, field values. The machine's interconnect is in
 * topo.c.
 *
 * nvml.h: the NvLink queries take a link 0..NVML_NVLINK_MAX_LINKS-1 and
 * return INVALID_ARGUMENT for a bad device or link or a NULL pointer,
 * NOT_SUPPORTED when the device lacks the feature. A link the part does not
 * have is NOT_SUPPORTED (go-gpuallocator loops over all 18 links and skips
 * exactly that on 12-link A100s). Remote queries on an inactive link are
 * NOT_SUPPORTED (UNVERIFIED: real drivers' answer undocumented). MIG device
 * handles: NOT_SUPPORTED, as for the other GPU-level queries. */
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "lib/nvml-call.h"
#include "lib/topo.h"

static nvmlReturn_t resolve_link(struct call *c, nvmlDevice_t device, unsigned link, const void *out,
                                 bool need_active, struct sim_link *ret) {
        struct dev d;
        nvmlReturn_t r = resolve_gpu(c, device, &d);
        if (r != NVML_SUCCESS)
                return r;
        if (!out || link >= NVML_NVLINK_MAX_LINKS)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!sim_topo_link(c->st, d.index, link, ret))
                return NVML_ERROR_NOT_SUPPORTED;
        if (need_active && !ret->active)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, isActive, false, &l);
        if (r == NVML_SUCCESS)
                *isActive = l.active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, pci, true, &l);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0u, l.remote_bus, 0u);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", 0u, l.remote_bus, 0u);
        pci->bus = l.remote_bus;
        pci->pciDeviceId = l.remote_pci_device_id;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, pNvLinkDeviceType, true, &l);
        if (r == NVML_SUCCESS)
                *pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t) l.remote_type;
        return call_end(&c, r);
}

/* Two GPUs' closest common PCIe ancestor. The same GPU twice gives INTERNAL
 * (UNVERIFIED; nvidia-smi topo prints "X" there). */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo) {
        GPU_PAIR_GETTER(pathInfo, (nvmlGpuTopologyLevel_t) sim_topo_pcie_level(c.st, a.index, b.index));
}


/* ---- NvLink capabilities and versions ---- */

/* nvml.h nvmlNvlinkVersion_t of a model's links: NVLink 3 on Ampere (value
 * 4, NVML_NVLINK_VERSION_3_0), 4 on Hopper (6), 5 on Blackwell (7). */
static unsigned nvlink_version(const struct sim_model *m) {
        switch (m->arch) {
        case NVML_DEVICE_ARCH_AMPERE: return 4;
        case NVML_DEVICE_ARCH_HOPPER: return 6;
        case NVML_DEVICE_ARCH_BLACKWELL: return 7;
        default: return 0;
        }
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, version, true, &l);
        if (r == NVML_SUCCESS)
                *version = nvlink_version(c.st->gpus[device->gpu].model);
        return call_end(&c, r);
}

/* Capabilities of an active link: P2P and P2P atomics over it, and VALID;
 * no system memory access (x86 hosts: NVLink goes to GPUs or switches), no
 * SLI. An inactive link answers 0 for all, VALID included (UNVERIFIED).
 * NCCL counts a GPU's links with NVML_NVLINK_CAP_P2P_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, unsigned int capability,
                                           unsigned int *capResult) {
        struct call c;
        struct sim_link l;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_link(&c, device, link, capResult, false, &l);
        if (r == NVML_SUCCESS && capability >= SIM_NVML_NVLINK_CAP_COUNT)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *capResult = l.active && (capability == SIM_NVML_NVLINK_CAP_P2P_SUPPORTED ||
                                          capability == SIM_NVML_NVLINK_CAP_P2P_ATOMICS ||
                                          capability == SIM_NVML_NVLINK_CAP_VALID);
        return call_end(&c, r);
}

/* ---- P2P and nearest GPUs ---- */

/* Whether GPUs a and b reach each other over NvLink: both on the machine's
 * NVSwitch fabric, or a bridge between them. */
static bool nvlink_connected(const struct sim_state *st, unsigned a, unsigned b) {
        bool a_switch = false, b_switch = false;
        struct sim_link l;

        for (unsigned i = 0; i < NVML_NVLINK_MAX_LINKS; i++) {
                if (sim_topo_link(st, a, i, &l) && l.active) {
                        if (l.remote_type == NVML_NVLINK_DEVICE_TYPE_GPU && l.remote_bus == st->gpus[b].bus)
                                return true;
                        a_switch = a_switch || l.remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
                }
                if (sim_topo_link(st, b, i, &l) && l.active)
                        b_switch = b_switch || l.remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
        }
        return a_switch && b_switch;
}

/* P2P between two GPUs (nvidia-smi topo -p2p): over NvLink every capability
 * is OK; over PCIe, reads and writes are OK below a CPU socket (NODE or
 * closer) and CHIPSET_NOT_SUPPORTED across sockets (SYSTEM), atomics are not
 * supported, the NVLINK index is NOT_SUPPORTED. The same GPU twice: OK
 * (UNVERIFIED). The PCIe rules are the simulator's model of a two-socket x86
 * host, UNVERIFIED per platform. NCCL's topology reads READ and WRITE. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, unsigned int p2pIndex,
                                    unsigned int *p2pStatus) {
        struct call c;
        struct dev a, b;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device1, &a);
        if (r == NVML_SUCCESS)
                r = resolve_gpu(&c, device2, &b);
        if (r == NVML_SUCCESS && (!p2pStatus || p2pIndex > SIM_NVML_P2P_CAPS_INDEX_PCI))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        bool nvlink = a.index == b.index || nvlink_connected(c.st, a.index, b.index);
        bool pcie = sim_topo_pcie_level(c.st, a.index, b.index) <= NVML_TOPOLOGY_NODE;
        unsigned st = SIM_NVML_P2P_STATUS_OK;
        if (!nvlink) {
                switch (p2pIndex) {
                case SIM_NVML_P2P_CAPS_INDEX_READ:
                case SIM_NVML_P2P_CAPS_INDEX_WRITE:
                case SIM_NVML_P2P_CAPS_INDEX_PCI:
                        st = pcie ? SIM_NVML_P2P_STATUS_OK : SIM_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
                        break;
                case SIM_NVML_P2P_CAPS_INDEX_ATOMICS:
                        st = SIM_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
                        break;
                default:
                        st = SIM_NVML_P2P_STATUS_NOT_SUPPORTED;
                }
        }
        *p2pStatus = st;
        return call_end(&c, NVML_SUCCESS);
}

/* Appends GPU i to a device array with the count protocol of nvml.h (a NULL
 * array or a full one only counts). Returns false when out of memory. */
static bool add_gpu(unsigned i, nvmlDevice_t *array, unsigned cap, unsigned *n) {
        if (array && *n < cap) {
                nvmlDevice_t d = intern_device(i, SIM_ID_NONE, SIM_ID_NONE);
                if (!d)
                        return false;
                array[*n] = d;
        }
        (*n)++;
        return true;
}

/* nvml.h: the GPUs whose common ancestor with `device` is at `level` or
 * closer, the device itself excluded; *count in: the array's size, out: the
 * number found (a NULL array: just the count). */
nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned cap = deviceArray ? *count : 0, n = 0;
        for (unsigned i = 0; i < c.st->n_gpus; i++)
                if (i != d.index && !c.st->gpus[i].lost && sim_topo_pcie_level(c.st, d.index, i) <= level &&
                    !add_gpu(i, deviceArray, cap, &n))
                        return call_end(&c, NVML_ERROR_MEMORY);
        *count = n;
        return call_end(&c, deviceArray && n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
}

/* ---- CPUs and NUMA ---- */

/* The simulated machine runs on the real host's CPUs: a GPU's CPU affinity
 * is every online CPU of the host (a mask naming CPUs the host lacks would
 * make the pinning that NCCL and the device plugin do from it fail), and
 * its memory affinity the NUMA node of its socket (the *Topology* rule:
 * the first half of the GPUs on node 0, the rest on node 1). */
static unsigned gpu_socket(const struct sim_state *st, unsigned gpu) {
        size_t half = st->n_gpus <= 4 ? 4 : (st->n_gpus + 1) / 2;
        return (unsigned) (gpu / half);
}

static void host_cpus(unsigned long *set, unsigned size) {
        const unsigned bits = 8 * sizeof(unsigned long);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        memset(set, 0, size * sizeof(*set));
        for (long i = 0; i < n && (unsigned long) i < (unsigned long) size * bits; i++)
                set[i / bits] |= 1UL << (i % bits);
}

static nvmlReturn_t cpu_affinity(const char *fn, nvmlDevice_t device, unsigned size, unsigned long *set,
                                 unsigned scope) {
        struct call c;
        struct dev d;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!set || size == 0 || scope > SIM_NVML_AFFINITY_SCOPE_SOCKET))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                host_cpus(set, size);
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet) {
        return cpu_affinity(__func__, device, cpuSetSize, cpuSet, SIM_NVML_AFFINITY_SCOPE_NODE);
}

nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                 unsigned long *cpuSet, unsigned int scope) {
        return cpu_affinity(__func__, device, cpuSetSize, cpuSet, scope);
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize, unsigned long *nodeSet,
                                         unsigned int scope) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!nodeSet || nodeSetSize == 0 || scope > SIM_NVML_AFFINITY_SCOPE_SOCKET))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) {
                memset(nodeSet, 0, nodeSetSize * sizeof(*nodeSet));
                nodeSet[0] = 1UL << gpu_socket(c.st, d.index);
        }
        return call_end(&c, r);
}

/* nvml.h: binds the calling thread to the GPU's CPU affinity, and the clear
 * to all CPUs: both are the host's online CPUs here, so the calling thread
 * is bound to all of them. */
static nvmlReturn_t bind_thread(const char *fn, nvmlDevice_t device) {
        struct call c;
        struct dev d;
        cpu_set_t set;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_gpu(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        CPU_ZERO(&set);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < CPU_SETSIZE; i++)
                CPU_SET(i, &set);
        if (sched_setaffinity(0, sizeof(set), &set) < 0)
                r = NVML_ERROR_NO_PERMISSION;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceSetCpuAffinity(nvmlDevice_t device) {
        return bind_thread(__func__, device);
}

nvmlReturn_t nvmlDeviceClearCpuAffinity(nvmlDevice_t device) {
        return bind_thread(__func__, device);
}

/* nvml.h: the GPUs "with the given CPU in their affinity": every GPU (all
 * have every online CPU); a CPU the host does not have: none. */
nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!count)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        unsigned cap = deviceArray ? *count : 0, n = 0;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (unsigned i = 0; (long) cpuNumber < cpus && i < c.st->n_gpus; i++)
                if (!c.st->gpus[i].lost && !add_gpu(i, deviceArray, cap, &n))
                        return call_end(&c, NVML_ERROR_MEMORY);
        *count = n;
        return call_end(&c, deviceArray && n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
}

/* ---- field values ---- */

/* One field of a full GPU (NCCL reads the NvLink and C2C counts; DCGM-style
 * readers batch many): the NvLink count, a link's state (scopeId: the link),
 * the C2C link count (0: no CPU-GPU link but on the Grace Hopper, whose C2C
 * links are UNVERIFIED and so NOT_SUPPORTED); the instant power is read by
 * nvmlDeviceGetFieldValues itself. Any other field answers NOT_SUPPORTED in
 * its entry. */
static nvmlReturn_t field_value(struct call *c, const struct dev *d, sim_nvmlFieldValue_t *v) {
        struct sim_link l;
        unsigned links = 0;

        v->valueType = SIM_NVML_VALUE_TYPE_UNSIGNED_INT;
        switch (v->fieldId) {
        case SIM_NVML_FI_DEV_NVLINK_LINK_COUNT:
                for (unsigned i = 0; i < NVML_NVLINK_MAX_LINKS; i++)
                        links += sim_topo_link(c->st, d->index, i, &l);
                v->value.uiVal = links;
                return NVML_SUCCESS;
        case SIM_NVML_FI_DEV_NVLINK_GET_STATE:
                if (v->scopeId >= NVML_NVLINK_MAX_LINKS || !sim_topo_link(c->st, d->index, v->scopeId, &l))
                        return NVML_ERROR_NOT_SUPPORTED;
                v->value.uiVal = l.active;
                return NVML_SUCCESS;
        case SIM_NVML_FI_DEV_C2C_LINK_COUNT:
                if (streq(d->g->model->key, "gh200-144gb"))
                        return NVML_ERROR_NOT_SUPPORTED;
                v->value.uiVal = 0;
                return NVML_SUCCESS;
        default:
                return NVML_ERROR_NOT_SUPPORTED;
        }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, sim_nvmlFieldValue_t *values) {
        struct call c;
        struct dev d;
        struct timespec now;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (valuesCount < 0 || (valuesCount > 0 && !values)))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        clock_gettime(CLOCK_REALTIME, &now);
        bool power = false;
        for (int i = 0; i < valuesCount; i++) {
                sim_nvmlFieldValue_t *v = &values[i];
                v->timestamp = (long long) now.tv_sec * 1000000 + now.tv_nsec / 1000;
                v->latencyUsec = 0;
                memset(&v->value, 0, sizeof(v->value));
                if (v->fieldId == SIM_NVML_FI_DEV_POWER_INSTANT) {
                        power = true; /* after this call: its own session */
                        continue;
                }
                v->nvmlReturn = field_value(&c, &d, v);
        }
        r = call_end(&c, NVML_SUCCESS);
        for (int i = 0; power && i < valuesCount; i++)
                if (values[i].fieldId == SIM_NVML_FI_DEV_POWER_INSTANT) {
                        unsigned mw = 0;
                        values[i].valueType = SIM_NVML_VALUE_TYPE_UNSIGNED_INT;
                        values[i].nvmlReturn = nvmlDeviceGetPowerUsage(device, &mw);
                        values[i].value.uiVal = mw;
                }
        return r;
}
