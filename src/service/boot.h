/* The node service's boot run (`migkit service boot`, the ExecStart of
 * migkit.service); its reboot-at-most-once rule is host/reboot.h
 * (docs/service.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "service/state.h"
#include "spec/config.h"

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
