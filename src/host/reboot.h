/* Rebooting the node once for a MIG mode change that needs a reset this
 * node cannot do: the reboot-at-most-once rule, its marker file, and the
 * `reboot` command. Used by the node service (`migkit service boot`) and
 * the Kubernetes manager alike (docs/service.md, docs/manager.md). */
#pragma once

#include <errno.h>
#include <stdbool.h>

#include "base/macro.h"

struct mk_error;

#define MK_MAX_REBOOT_MARKER_BYTES 4096
#define MK_REBOOT_MARKER_NAME "reboot-attempted" /* in the node service's state directory */
#define MK_REBOOT_TIMEOUT_MS (60 * 1000) /* for the `reboot` command to return */

/* How an apply ended, as the reboot rule sees it. */
enum mk_reboot_outcome {
        MK_REBOOT_APPLIED,        /* the selected config (or, driverless, its MIG mode) is in place */
        MK_REBOOT_NEEDED,         /* a MIG mode change waits for a reset this node cannot do */
        MK_REBOOT_FAILED_MODE_OK, /* failed, but every MIG mode is as selected */
        MK_REBOOT_FAILED,         /* failed otherwise (or the modes could not be read) */
        _MK_REBOOT_OUTCOME_MAX,
        _MK_REBOOT_OUTCOME_INVALID = -EINVAL,
};

const char *mk_reboot_outcome_to_string(enum mk_reboot_outcome o);

struct mk_reboot_decision {
        bool reboot;            /* run `reboot` (after creating the marker) */
        int exit_code;          /* of the run: 0 applied or rebooting, 1 failed */
        bool marker_after;      /* the marker exists afterwards */
};

/* The reboot-once rule, as data: reboot only when a reset is needed,
 * rebooting is enabled and no marker says it was tried; the marker goes
 * away once the MIG modes are right, and stays otherwise. */
struct mk_reboot_decision mk_reboot_decide(enum mk_reboot_outcome o, bool reboot_enabled, bool marker);

/* The marker's content in *ret (malloc'd, trailing blanks dropped), -ENOENT
 * when absent, -EINVAL when it holds a NUL byte; read errors as
 * mk_read_file(). */
int mk_reboot_marker_read(const char *path, char **ret, struct mk_error *e) _nonnull_(1, 2) _wur_;
/* Creates the marker holding `text` atomically (its directory is created
 * when missing), before the reboot it records. */
int mk_reboot_marker_create(const char *path, const char *text, struct mk_error *e) _nonnull_(1, 2) _wur_;
/* Removes the marker, durably; *ret_removed (may be NULL) says whether
 * there was one. */
int mk_reboot_marker_remove(const char *path, bool *ret_removed, struct mk_error *e) _nonnull_(1) _wur_;

/* Runs `reboot` (bounded by MK_REBOOT_TIMEOUT_MS). 0 when it exited 0 (the
 * node goes down soon after); else the error with the command's status and
 * output in `e`. */
int mk_reboot_run(struct mk_error *e) _wur_;
