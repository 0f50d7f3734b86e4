/* The config manager's choices (`migkit config-manager`, the GPU Operator's
 * `config-manager`): which of the device plugin configs in a directory a
 * node's label selects, the link that makes it the plugin's config file, and
 * the process to signal. Facts from NVIDIA/k8s-device-plugin
 * cmd/config-manager/main.go (v0.17); docs/gpu-operator.md. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_DP_CONFIG_CHOOSE_MAX_FILES 1024u
#define MK_DP_CONFIG_CHOOSE_DEFAULT_NAME "default" /* the "named" fallback */

/* The config to use: `label` when set (it must name a file in srcdir), else
 * `default_config` when set (it must exist too), else the first fallback of
 * the comma list `fallbacks` that gives one: "named" (a file "default"),
 * "single" (the only file), "empty" (no config). *ret is a new string, or
 * NULL for the empty config. Files are srcdir's entries that are not
 * directories and do not start with ".." (a mounted ConfigMap's own). */
int mk_dp_config_choose(const char *srcdir, const char *label, const char *default_config, const char *fallbacks,
                     char **ret, struct mk_error *e) _nonnull_(1, 5) _wur_;

/* Points `dst` at srcdir/name (at /dev/null when name is NULL) with a
 * symlink, unless both already resolve to the same file. *ret_updated:
 * whether it changed. */
int mk_dp_config_link(const char *srcdir, const char *name, const char *dst, bool *ret_updated, struct mk_error *e)
        _nonnull_(1, 3, 4) _wur_;

/* The first process (lowest pid) of the caller's own PID namespace whose
 * argv[0] is `argv0` exactly, or whose argv[0]'s file name is; *ret is its
 * pid in that namespace, the one kill() takes. Processes of other PID
 * namespaces listed in /proc (a host's /proc lists every container's) are
 * never chosen. -ESRCH when there is none. */
int mk_process_find(const char *argv0, pid_t *ret) _nonnull_(1, 2) _wur_;
