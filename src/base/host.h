/* Injectable host roots (pciutils' sysfs override): every path under /sys,
 * /proc, /dev or /run is built from a struct mk_host, so tests and the simulator
 * point the product at a fixture tree (STYLE.md habit 9). */
#pragma once

#include <errno.h>
#include <stdbool.h>

#include "base/macro.h"

struct mk_host {
        char *sysfs_root;       /* "/sys" by default */
        char *proc_root;        /* "/proc" */
        char *dev_root;         /* "/dev" */
        char *run_root;         /* "/run": the host lock (base/hostlock.h) */
};

enum mk_host_root {
        MK_HOST_SYSFS,
        MK_HOST_PROC,
        MK_HOST_DEV,
        MK_HOST_RUN,
        _MK_HOST_ROOT_MAX,
        _MK_HOST_ROOT_INVALID = -EINVAL,
};

/* Fills *h with "/sys", "/proc", "/dev", "/run". 0 or -ENOMEM; *h is written only on
 * success. Free with mk_host_done(). */
int mk_host_init_default(struct mk_host *h) _nonnull_(1) _wur_;

/* As mk_host_init_default(), with each root overridden by a non-empty
 * MIGKIT_SYSFS_ROOT, MIGKIT_PROC_ROOT, MIGKIT_DEV_ROOT or MIGKIT_RUN_ROOT (read with
 * secure_getenv(), so ignored in set-uid contexts). Trailing slashes are
 * dropped. 0 or -ENOMEM. */
int mk_host_init_from_env(struct mk_host *h) _nonnull_(1) _wur_;

/* Frees the roots; accepts NULL and an already-done *h. */
void mk_host_done(struct mk_host *h);

/* The root directory for `root` (owned by h), NULL for an invalid root. */
const char *mk_host_root(const struct mk_host *h, enum mk_host_root root) _nonnull_(1);

/* Joins a root and a path below it ("bus/pci/devices" or "/bus/pci/devices")
 * into a malloc'd string in *ret. -EINVAL when `relative` has a ".."
 * component (it could leave the root) or `root` is invalid; -ENOMEM. An
 * empty or NULL relative gives the root itself. */
int mk_host_path(const struct mk_host *h, enum mk_host_root root, const char *relative, char **ret)
        _nonnull_(1, 4) _wur_;

/* Joins a and b with exactly one '/' between them into a malloc'd string:
 * ("/sys/", "/bus") -> "/sys/bus", ("/", "dev") -> "/dev". An empty side
 * gives a copy of the other. No ".." checking. 0 or -ENOMEM. */
int mk_path_join(const char *a, const char *b, char **ret) _nonnull_(1, 2, 3) _wur_;

/* True when some '/'-separated component of path is "..". */
bool mk_path_has_dotdot(const char *path);
