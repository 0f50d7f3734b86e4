/* `apply --mode-only` with no NVIDIA driver loaded: the MIG mode of GA100
 * GPUs through PCI BAR0 and the sysfs function reset (mig-parted.md §6).
 * Unknown chips are never written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "engine/engine.h"
#include "nvml/nvml-abi.h"
#include "pci/pci.h"

#define MK_PCI_BOOT_TIMEOUT_MS 5000 /* upstream: 5 s, polling every 100 ms */
#define MK_PCI_BOOT_POLL_MS 100

static int read_node(const struct mk_host *h, struct mk_pci_gpu **ret_fns, size_t *ret_n, struct mk_snapshot **ret,
                     struct mk_error *e) {
        struct mk_pci_gpu *fns = NULL;
        size_t n = 0;
        int r = mk_pci_enumerate(h, &fns, &n, e);
        if (r < 0)
                return r;
        struct mk_snapshot *s = calloc(1, sizeof(*s));
        if (s)
                s->gpus = calloc(n ? n : 1, sizeof(*s->gpus));
        if (!s || !s->gpus) {
                mk_snapshot_free(s);
                mk_pci_gpus_free(fns, n);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        s->n_gpus = n;
        for (size_t i = 0; i < n && r >= 0; i++) {
                struct mk_gpu *g = &s->gpus[i];
                const struct mk_pci_gpu *f = &fns[i];
                g->index = (unsigned) i;
                (void) mk_pci_address_to_nvml(f->address, g->bus_id, sizeof(g->bus_id));
                snprintf(g->name, sizeof(g->name), "PCI %04x:%04x", f->vendor, f->device);
                g->pci_device_id = (uint32_t) f->device << 16 | f->vendor;
                g->pci_subsystem_id = (uint32_t) f->subsystem_device << 16 | f->subsystem_vendor;
                g->architecture = NVML_DEVICE_ARCH_AMPERE;
                g->mig_current = g->mig_pending = MK_MIG_UNSUPPORTED;
                bool capable = false;
                r = mk_pci_mig_capable(f, &capable, e);
                if (r < 0 || !capable)
                        continue;
                bool cur = false, pend = false;
                r = mk_pci_get_mig_mode(f, &cur, &pend, e);
                g->mig_capable = true;
                g->mig_current = cur ? MK_MIG_ENABLED : MK_MIG_DISABLED;
                g->mig_pending = pend ? (cur ? MK_MIG_DISABLED : MK_MIG_ENABLED) : g->mig_current;
        }
        if (r < 0) {
                mk_snapshot_free(s);
                mk_pci_gpus_free(fns, n);
                return r;
        }
        *ret_fns = fns;
        *ret_n = n;
        *ret = s;
        return 0;
}

int mk_engine_apply_driverless(const struct mk_config *c, const struct mk_named_config *nc,
                               const struct mk_hooks *hooks, const struct mk_engine_opts *o,
                               const char *const *mig_env, struct mk_apply_report *rep, struct mk_error *e) {
        struct mk_host host = {0};
        int r = mk_host_init_from_env(&host);
        if (r < 0)
                return mk_error_set(e, r, "Cannot set up host paths");
        struct mk_pci_gpu *fns = NULL;
        size_t n = 0;
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        r = read_node(&host, &fns, &n, &s, e);
        if (r >= 0)
                r = mk_engine_desired(s, c, nc, &d, e);
        if (r < 0)
                goto out;
        rep->driverless = true;
        rep->n_gpus = n;
        rep->plans = calloc(n ? n : 1, sizeof(*rep->plans));
        rep->gpu_failed = calloc(n ? n : 1, sizeof(bool));
        if (!rep->plans || !rep->gpu_failed) {
                r = mk_error_set(e, -ENOMEM, "Out of memory");
                goto out;
        }
        bool any = false;
        for (size_t i = 0; i < n; i++) {
                rep->plans[i].gpu_index = (unsigned) i;
                if (!d[i].matched)
                        continue;
                enum mk_mig_mode want = d[i].enabled ? MK_MIG_ENABLED : MK_MIG_DISABLED;
                rep->plans[i].mig_enabled = d[i].enabled;
                rep->plans[i].mode_change = s->gpus[i].mig_current != want || s->gpus[i].mig_pending != want;
                any = any || rep->plans[i].mode_change;
        }
        rep->nothing_to_do = !any;

        r = mk_engine_run_hook(hooks, MK_HOOK_APPLY_START, mig_env, o, e);
        if (r < 0)
                goto out;
        if (any) {
                r = mk_engine_run_hook(hooks, MK_HOOK_PRE_APPLY_MODE, mig_env, o, e);
                if (r >= 0) {
                        rep->changed = true;
                        if (o->before_change)
                                r = o->before_change(o->userdata, e);
                }
                for (size_t i = 0; i < n && r >= 0; i++) {
                        if (!rep->plans[i].mode_change)
                                continue;
                        bool want = rep->plans[i].mig_enabled;
                        log_info("GPU %zu (%s): %s MIG mode through PCI BAR0", i, fns[i].address,
                                 want ? "enabling" : "disabling");
                        r = mk_pci_set_mig_mode(&fns[i], want, MK_PCI_BOOT_TIMEOUT_MS, MK_PCI_BOOT_POLL_MS, e);
                        if (r < 0) {
                                rep->gpu_failed[i] = true;
                                break;
                        }
                        rep->mode_changes++;
                        bool cur = false, pend = false;
                        r = mk_pci_get_mig_mode(&fns[i], &cur, &pend, e);
                        if (r < 0 || cur == want)
                                continue;
                        rep->plans[i].reset_needed = true;
                        if (o->skip_reset)
                                continue;
                        if (!fns[i].has_reset) {
                                rep->reboot_needed = true;
                                r = mk_error_set(e, -EAGAIN,
                                                 "GPU %zu (%s) has no sysfs reset (GPU passthrough?): its MIG mode "
                                                 "change needs a reboot",
                                                 i, fns[i].address);
                                break;
                        }
                        log_info("GPU %zu (%s): resetting through sysfs", i, fns[i].address);
                        r = mk_pci_reset(&fns[i], e);
                        if (r >= 0) {
                                rep->resets++;
                                r = mk_pci_get_mig_mode(&fns[i], &cur, &pend, e);
                        }
                        if (r >= 0 && cur != want) {
                                rep->reboot_needed = true;
                                r = mk_error_set(e, -EAGAIN, "GPU %zu (%s): MIG mode still %s after the reset; a "
                                                             "reboot is needed",
                                                 i, fns[i].address, cur ? "enabled" : "disabled");
                        }
                }
                if (r >= 0 && o->skip_reset)
                        for (size_t i = 0; i < n; i++)
                                if (rep->plans[i].reset_needed) {
                                        log_warning("MIG mode changes wait for a GPU reset, skipped (--skip-reset)");
                                        break;
                                }
        }
        struct mk_error he = {0};
        int h = mk_engine_run_hook(hooks, MK_HOOK_APPLY_EXIT, mig_env, o, &he);
        if (h < 0 && r >= 0) {
                if (e)
                        *e = he;
                r = h;
        }
out:
        if (s)
                mk_desired_free(d, s->n_gpus);
        mk_snapshot_free(s);
        mk_pci_gpus_free(fns, n);
        mk_host_done(&host);
        return r;
}
