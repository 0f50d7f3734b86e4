/* The PCI BAR0 mode backend: no NVIDIA driver. The MIG mode of GA100 GPUs
 * through BAR0 and the sysfs function reset (src/pci/, docs/pci.md); unknown
 * chips are never written. It sees no instances: the flow only changes
 * modes with it. GPU i is the i-th NVIDIA function in address order, the
 * index mig-parted gives GPUs without the driver. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "engine/backend.h"
#include "nvml/nvml-abi.h"
#include "pci/pci.h"

#define MK_PCI_BOOT_TIMEOUT_MS 5000 /* upstream: 5 s, polling every 100 ms */
#define MK_PCI_BOOT_POLL_MS 100

struct pci_backend {
        struct mk_host host;
        struct mk_pci_gpu *fns;
        size_t n;
        unsigned long mutations;
};

static int pci_detect(struct mk_backend *b, struct mk_error *e) {
        _cleanup_free_ struct pci_backend *x = calloc(1, sizeof(*x));
        if (!x)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        int r = mk_host_init_from_env(&x->host);
        if (r < 0)
                return mk_error_set(e, r, "Cannot set up host paths");
        if (mk_pci_driver_loaded(&x->host)) {
                mk_host_done(&x->host);
                return mk_error_set(e, -EBUSY, "The nvidia module is loaded: MIG mode goes through NVML");
        }
        r = mk_pci_enumerate(&x->host, &x->fns, &x->n, e);
        if (r < 0) {
                mk_host_done(&x->host);
                return r;
        }
        b->data = TAKE_PTR(x);
        return 0;
}

static void pci_close(struct mk_backend *b) {
        struct pci_backend *x = b->data;
        if (!x)
                return;
        mk_pci_gpus_free(x->fns, x->n);
        mk_host_done(&x->host);
        free(x);
        b->data = NULL;
}

static int read_gpu(const struct mk_pci_gpu *f, unsigned index, struct mk_gpu *g, struct mk_error *e) {
        g->index = index;
        (void) mk_pci_address_to_nvml(f->address, g->bus_id, sizeof(g->bus_id));
        snprintf(g->name, sizeof(g->name), "PCI %04x:%04x", f->vendor, f->device);
        g->pci_device_id = (uint32_t) f->device << 16 | f->vendor;
        g->pci_subsystem_id = (uint32_t) f->subsystem_device << 16 | f->subsystem_vendor;
        g->architecture = NVML_DEVICE_ARCH_AMPERE;
        g->mig_current = g->mig_pending = MK_MIG_UNSUPPORTED;
        bool capable = false;
        int r = mk_pci_mig_capable(f, &capable, e);
        if (r < 0 || !capable)
                return r;
        bool cur = false, pend = false;
        r = mk_pci_get_mig_mode(f, &cur, &pend, e);
        if (r < 0)
                return r;
        g->mig_capable = true;
        g->mig_current = cur ? MK_MIG_ENABLED : MK_MIG_DISABLED;
        g->mig_pending = pend ? (cur ? MK_MIG_DISABLED : MK_MIG_ENABLED) : g->mig_current;
        return 0;
}

static int pci_snapshot(struct mk_backend *b, struct mk_snapshot **ret, struct mk_error *e) {
        const struct pci_backend *x = b->data;
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = calloc(1, sizeof(*s));
        if (s)
                s->gpus = calloc(x->n ? x->n : 1, sizeof(*s->gpus));
        if (!s || !s->gpus)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        s->n_gpus = x->n;
        for (size_t i = 0; i < x->n; i++) {
                int r = read_gpu(&x->fns[i], (unsigned) i, &s->gpus[i], e);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(s);
        return 0;
}

static const struct mk_pci_gpu *function_of(const struct mk_backend *b, const struct mk_gpu *g) {
        const struct pci_backend *x = b->data;
        return g->index < x->n ? &x->fns[g->index] : NULL;
}

static int pci_set_mode(struct mk_backend *b, const struct mk_gpu *g, bool enabled, bool *ret_pending,
                        struct mk_error *e) {
        struct pci_backend *x = b->data;
        const struct mk_pci_gpu *f = function_of(b, g);
        if (!f)
                return mk_error_set(e, -ENODEV, "GPU %u is not on the PCI bus", g->index);
        int r = mk_pci_set_mig_mode(f, enabled, MK_PCI_BOOT_TIMEOUT_MS, MK_PCI_BOOT_POLL_MS, e);
        x->mutations++;
        if (r < 0)
                return r;
        bool cur = false;
        r = mk_pci_get_mig_mode(f, &cur, NULL, e);
        if (r < 0)
                return r;
        *ret_pending = cur != enabled;
        return 0;
}

static int pci_reset(struct mk_backend *b, const struct mk_gpu *const *gpus, size_t n, bool *ret_reboot_needed,
                     struct mk_error *e) {
        struct pci_backend *x = b->data;
        *ret_reboot_needed = false;
        for (size_t i = 0; i < n; i++) {
                const struct mk_pci_gpu *f = function_of(b, gpus[i]);
                if (!f)
                        return mk_error_set(e, -ENODEV, "GPU %u is not on the PCI bus", gpus[i]->index);
                if (!f->has_reset) {
                        *ret_reboot_needed = true;
                        return mk_error_set(e, -EAGAIN,
                                            "GPU %u (%s) has no sysfs reset (GPU passthrough?): its MIG mode change "
                                            "needs a reboot",
                                            gpus[i]->index, f->address);
                }
        }
        for (size_t i = 0; i < n; i++) {
                const struct mk_pci_gpu *f = function_of(b, gpus[i]);
                log_debug("GPU %u (%s): resetting through sysfs", gpus[i]->index, f->address);
                int r = mk_pci_reset(f, e);
                x->mutations++;
                if (r < 0)
                        return r;
        }
        return 0;
}

static unsigned long pci_mutations(const struct mk_backend *b) {
        const struct pci_backend *x = b->data;
        return x ? x->mutations : 0;
}

const struct mk_backend_ops mk_backend_pci = {
        .name = "pci",
        .description = "PCI BAR0",
        .instances = false,
        .detect = pci_detect,
        .close = pci_close,
        .snapshot = pci_snapshot,
        .set_mode = pci_set_mode,
        .reset = pci_reset,
        .mutations = pci_mutations,
};
