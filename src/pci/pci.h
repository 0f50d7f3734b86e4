/* NVIDIA GPUs on the PCI bus, without the driver: sysfs enumeration, BAR0
 * register access (resource0), MIG mode on GA100 (go-nvlib v0.12 pkg/nvpci), and the
 * sysfs function reset. Every path goes through struct mk_host, so tests use
 * fixture trees with a regular file as resource0. Never touches NVML. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/host.h"

#define MK_PCI_VENDOR_NVIDIA 0x10deu
#define MK_PCI_CLASS_VGA 0x030000u
#define MK_PCI_CLASS_3D 0x030200u

/* BAR0 registers (go-nvlib v0.12 pkg/nvpci; go-nvlib nvpci, mig-parted pkg/mig/mode/pci.go). */
#define MK_BAR0_PMC_BOOT_0 0x000000u      /* chip id */
#define MK_BAR0_PMC_BOOT_1 0x000004u      /* endianness probe */
#define MK_BAR0_BOOT_COMPLETE 0x118234u   /* == 0x3FF when the GPU is ready */
#define MK_BAR0_MIG_MODE 0x001404u        /* bit 15: MIG enabled */
#define MK_BAR0_MIG_REQUEST 0x118F78u     /* bits 15:14: 11 enable, 10 disable */
#define MK_PMC_BOOT_0_GA100 0x170000A1u
#define MK_BOOT_COMPLETE_VALUE 0x3FFu
#define MK_PMC_BOOT_1_LITTLE_ENDIAN 0x00000000u /* PMC_BOOT_1 as read little-endian */
#define MK_PMC_BOOT_1_BIG_ENDIAN 0x01000001u
#define MK_MIG_MODE_ENABLED 0x8000u             /* MK_BAR0_MIG_MODE bit 15 */
#define MK_MIG_REQUEST_MASK 0xC000u             /* MK_BAR0_MIG_REQUEST bits 15:14 */
#define MK_MIG_REQUEST_ENABLE 0xC000u
#define MK_MIG_REQUEST_DISABLE 0x8000u

/* Largest <proc>/modules we read: ~100 bytes a module, a few thousand modules. */
#define MK_MAX_PROC_MODULES_BYTES (1024 * 1024)

struct mk_pci_gpu {
        char address[16];          /* "0000:07:00.0" */
        uint16_t vendor, device;
        uint16_t subsystem_vendor, subsystem_device;
        uint32_t class_code;       /* 0x030000 or 0x030200 */
        bool has_reset;            /* the function has a sysfs `reset` file */
        char *path;                /* sysfs directory of the function */
};

/* NVIDIA VGA and 3D controllers under <sysfs>/bus/pci/devices, SR-IOV virtual
 * functions (with a `physfn` link) excluded, sorted by address: the index
 * mig-parted gives GPUs. Unreadable attributes of one device are an error
 * naming the file. */
int mk_pci_enumerate(const struct mk_host *h, struct mk_pci_gpu **ret, size_t *ret_n, struct mk_error *e);
void mk_pci_gpus_free(struct mk_pci_gpu *g, size_t n);

/* "0000:07:00.0" -> "00000000:07:00.0" (NVML's bus id form), and back. */
int mk_pci_address_to_nvml(const char *address, char *buf, size_t size);
int mk_pci_address_from_nvml(const char *bus_id, char *buf, size_t size);
/* Both: input "D:BB:SS.F" in either case, slot <= 0x1f, function 0-7; the
 * sysfs side takes a 4-8 digit domain, the NVML side exactly 8. Output is
 * lower-case for sysfs ("%04x:%02x:%02x.%x"), upper-case for NVML
 * ("%08X:%02X:%02X.%X", as nvidia-smi prints "00000000:B7:00.0"). 0,
 * -EINVAL for a malformed or NULL input, -ENOBUFS when buf is too small. */

/* Is the nvidia kernel module loaded (a line starting "nvidia " in <proc>/modules)? */
bool mk_pci_driver_loaded(const struct mk_host *h);

/* MIG mode through BAR0. Only GA100 (PMC_BOOT_0 == 0x170000A1) is known;
 * any other chip is refused with -EOPNOTSUPP before anything is written. */
int mk_pci_mig_capable(const struct mk_pci_gpu *g, bool *ret, struct mk_error *e);
int mk_pci_get_mig_mode(const struct mk_pci_gpu *g, bool *ret_current, bool *ret_pending, struct mk_error *e);
/* Waits for boot complete (polling every poll_ms, giving up after
 * timeout_ms with -ETIMEDOUT), then read-modify-writes the request bits and
 * syncs the mapping. The change takes effect at the next reset. */
int mk_pci_set_mig_mode(const struct mk_pci_gpu *g, bool enabled, unsigned timeout_ms, unsigned poll_ms,
                        struct mk_error *e);

/* Writes "1" to the function's sysfs `reset`; -ENOENT when it has none
 * (for example GPU passthrough in a VM: a reboot is then needed). */
int mk_pci_reset(const struct mk_pci_gpu *g, struct mk_error *e);
