/* The node service's boot run (`migkit service boot`, the ExecStart of
 * migkit.service) and its reboot-at-most-once rule (docs/service.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "service/state.h"
#include "spec/config.h"

/* How the apply ended, as the reboot rule sees it. */
enum mk_boot_outcome {
        MK_BOOT_APPLIED,        /* the selected config (or, driverless, its MIG mode) is in place */
        MK_BOOT_REBOOT_NEEDED,  /* a MIG mode change waits for a reset this node cannot do */
        MK_BOOT_FAILED_MODE_OK, /* failed, but every MIG mode is as selected */
        MK_BOOT_FAILED,         /* failed otherwise (or the modes could not be read) */
        _MK_BOOT_OUTCOME_MAX,
        _MK_BOOT_OUTCOME_INVALID = -EINVAL,
};

const char *mk_boot_outcome_to_string(enum mk_boot_outcome o);

struct mk_boot_decision {
        bool reboot;            /* run `reboot` (after creating the marker) */
        int exit_code;          /* of `migkit service boot` */
        bool marker_after;      /* the marker exists afterwards */
};

/* The reboot-once rule, as data: reboot only when a reset is needed,
 * rebooting is enabled and no marker says it was tried; the marker goes
 * away once the MIG modes are right, and stays otherwise. */
struct mk_boot_decision mk_boot_decide(enum mk_boot_outcome o, bool reboot_enabled, bool marker);

/* The whole boot run: read service.yaml, config.yaml, hooks.yaml and the
 * selection (none: all-disabled when config.yaml has it); apply in a child
 * process bounded by the apply timeout, stopping GPU clients right before
 * the first change; restart the clients it stopped, whatever happened;
 * then the reboot rule. Logs what it does and why; returns the exit code
 * (0 applied or rebooting, 1 failed). */
int mk_service_boot(const struct mk_service_paths *p);

/* Read-only check of `name` in `c` on this node's GPUs (through NVML):
 * *ret_differ = how many GPUs differ (0: applied). NVML errors and targets
 * that cannot be built are returned with e. */
int mk_service_check(const struct mk_config *c, const char *name, bool mode_only, size_t *ret_differ,
                     struct mk_error *e) _wur_;

/* Validates `name` for `migkit service select`: it must exist in the
 * service's config.yaml; when `apply_config_file` is given (the
 * MIG_PARTED_CONFIG_FILE of an apply whose hook runs us) it must be that
 * same file, as the boot applies only that one. */
int mk_service_validate_selection(const struct mk_service_paths *p, const char *name, const char *apply_config_file,
                                  struct mk_error *e) _wur_;
