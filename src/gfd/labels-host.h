/* The host facts GFD labels besides NVML's (k8s-device-plugin v0.16+
 * internal/lm/nvml.go newGPUModeLabeler, internal/vgpu): the PCI class of
 * each GPU (`nvidia.com/gpu.mode`) and the vGPU vendor capability in the PCI
 * configuration space of NVIDIA functions (`nvidia.com/vgpu.*`). Read through
 * the injectable sysfs root of struct mk_host, so tests and the simulator's
 * host tree stand in for /sys. docs/labels.md states the rules. */
#pragma once

#include <stdbool.h>

#include "base/error.h"
#include "base/host.h"
#include "base/macro.h"

struct mk_snapshot;

#define MK_PCI_CONFIG_MAX 4096u /* PCIe extended configuration space */

struct mk_labels_host {
        const char *gpu_mode;              /* "compute", "graphics", "unknown"; NULL: no gpu.mode label */
        int vgpu_present;                  /* 1, 0; -1: not known (no vgpu.* labels) */
        char vgpu_host_driver_version[16]; /* "" when the capability has no driver record */
        char vgpu_host_driver_branch[16];
};

/* Reads `attr` ("class", "numa_node") of the PCI function with NVML bus id
 * `nvml_bus_id` ("00000000:07:00.0"; sysfs names it "0000:07:00.0") under the
 * sysfs root of h, blanks stripped, into *ret (malloc'd). -EINVAL for a bus
 * id that is not hex digits, ':' and '.'; else as mk_read_sysfs_attr(). */
int mk_pci_attr_by_bus_id(const struct mk_host *h, const char *nvml_bus_id, const char *attr, char **ret)
        _nonnull_(1, 2, 3, 4) _wur_;

/* gpu.mode as GFD derives it: every GPU's class 0x030200 -> "compute",
 * 0x030000 -> "graphics"; classes that differ, any other class or one that
 * cannot be read -> "unknown". */
const char *mk_labels_gpu_mode(const struct mk_host *h, const struct mk_snapshot *s) _nonnull_(1, 2);

/* Parses one PCI configuration space (`len` bytes): 1 when its vendor-
 * specific capability carries NVIDIA's vGPU signature ("VF"), with the host
 * driver version and branch of its record 0 when there is one; 0 when not;
 * -ENODATA when fewer than 256 bytes (an unprivileged read of `config`). */
int mk_pci_config_vgpu(const unsigned char *cfg, size_t len, char version[16], char branch[16])
        _nonnull_(1, 3, 4);

/* Both facts of the host into *ret. vgpu_present is -1 when some NVIDIA
 * function's configuration space could not be read in full and none read
 * showed a vGPU. Never fails. */
void mk_labels_host_read(const struct mk_host *h, const struct mk_snapshot *s, struct mk_labels_host *ret)
        _nonnull_(1, 2, 3);
