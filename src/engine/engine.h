/* apply / assert / plan: the mig-parted engine (docs/engine.md), done as
 * plan-then-act in one flow over a mode backend (engine/backend.h: NVML, or
 * PCI BAR0 without the driver): read the GPUs, plan every matched GPU
 * (refusing before touching anything when any target cannot be built), run
 * hooks, stop GPU clients, change MIG modes and reset only the GPUs that
 * need it, destroy and create per plan, verify by reading back. Re-running
 * converges (a crash leaves a state that the next plan starts from). What
 * happens is reported as events (engine/progress.h). */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "engine/desired.h"
#include "engine/progress.h"
#include "mig/gpu.h"
#include "plan/plan.h"
#include "spec/config.h"
#include "spec/hooks.h"

struct mk_nvml;

struct mk_engine_opts {
        const char *config_file;      /* for MIG_PARTED_CONFIG_FILE in hooks */
        const char *selected_config;
        const char *hooks_file;
        bool skip_reset;
        bool mode_only;
        /* With neither NVML nor the nvidia module: change the mode through
         * PCI and stop there, successfully (the boot service: instances are
         * made once the driver is up). report->driverless says it happened. */
        bool mode_only_without_driver;
        bool hook_output;             /* forward hook stdout/stderr (upstream: only with --debug) */
        int hook_timeout_ms;          /* <= 0: none */
        /* Called once, right before the first change to any GPU (after the
         * pre-apply-mode or pre-apply-config hook): the node service stops
         * GPU clients here. A negative return aborts before the change. */
        int (*before_change)(void *userdata, struct mk_error *e);
        void *userdata;
        /* Where apply reports what it does (engine/progress.h); NULL: the debug log.
         * Called by one thread at a time, but not always the caller's: the
         * GPUs change in parallel, one thread each (docs/engine.md). */
        const struct mk_progress *progress;
        /* Change the GPUs one after another, as mig-parted does, instead of
         * one thread per GPU (for comparison; the result is the same). */
        bool sequential;
        /* The host lock (base/hostlock.h), held from before the GPUs are
         * read until the apply-exit hook returned: how long to wait for
         * another holder (0: MK_HOST_LOCK_DEFAULT_TIMEOUT_MS, < 0: no
         * limit), what this apply is for the waiters' message (NULL:
         * "migkit apply"), and a flag that stops the wait. */
        int lock_timeout_ms;
        const char *lock_who;
        const atomic_bool *cancel;
};

/* Reads the GPUs (NVML) and plans the selected config on each, changing
 * nothing: what `plan` prints and `assert` checks. Caller frees both. */
int mk_engine_plan_selected(const struct mk_config *c, const char *name, struct mk_snapshot **ret_s,
                            struct mk_gpu_plan **ret_p, struct mk_error *e);

struct mk_apply_report {
        size_t n_gpus;
        struct mk_gpu_plan *plans;    /* the plans as first computed (what was to be done) */
        bool *gpu_failed;             /* per GPU: its changes failed (reported as a gpu-finished event) */
        unsigned mode_changes, resets;
        size_t destroyed_gis, destroyed_cis, created_gis, created_cis;
        unsigned long mutations;      /* mutating backend calls (engine/backend.h) */
        bool nothing_to_do;
        bool changed;                 /* before_change ran: something was (to be) changed */
        bool reboot_needed;           /* a mode change waits for a reset this node cannot do */
        bool driverless;              /* the mode went through PCI BAR0 (no driver) */
};
void mk_apply_report_done(struct mk_apply_report *r);

/* Applies the selected config under the host lock (waiting for another
 * holder with a WAITING event, o->lock_timeout_ms). Opens the backend
 * itself: NVML, else (with mode_only or mode_only_without_driver, and no
 * nvidia module) PCI BAR0.
 * Returns 0 when the GPUs now match, else a negative errno with
 * the reason in `e`; `report` is filled as far as it got. */
int mk_engine_apply(const struct mk_config *c, const struct mk_hooks *hooks, const struct mk_engine_opts *o,
                    struct mk_apply_report *report, struct mk_error *e);

/* Resets the GPUs with these NVML bus ids: `nvidia-smi -r -i ...` (path from
 * $MIGKIT_NVIDIA_SMI, or from PATH when the nvidia module is loaded), else
 * each GPU's sysfs `reset` file under the host's sysfs root. A GPU whose
 * sysfs function exists but has no `reset` file cannot be reset (GPU
 * passthrough): -EAGAIN and *ret_reboot_needed = true, before any reset. */
int mk_engine_reset_gpus(const char *const *bus_ids, size_t n, bool *ret_reboot_needed, struct mk_error *e);

/* Runs the entries of one hook in order; the first failure stops and is
 * returned (-EIO with the exit status in `e`). `mig_env` holds the
 * MIG_PARTED_* variables ("KEY=VALUE", NULL-terminated) that override the
 * entry's own envs. */
int mk_engine_run_hook(const struct mk_hooks *h, enum mk_hook which, const char *const *mig_env,
                       const struct mk_engine_opts *o, struct mk_error *e);
