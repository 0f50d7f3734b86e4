/* The node side of soft slicing (docs/vgpu.md "On Kubernetes"): the
 * per-container directories under the vgpu root that the device plugin
 * creates at Allocate and mounts into the container (the region file of
 * libmigkit-vgpu.so lives there), the identity file beside each, the
 * ld.so.preload file, and the removal of the directories of gone pods (the
 * node agent). Layout under <root> (default MK_VGPU_DEFAULT_ROOT):
 *   containers/<pod uid>_<container index>/       mounted rw in the container
 *   containers/<pod uid>_<container index>.json   who it is (monitor labels);
 *                                                 outside the mount, so the
 *                                                 container cannot rewrite it
 *   ld.so.preload                                 names the library's path in
 *                                                 the container
 * Shared by plugin/ (creates) and sched/ + cli/ (prune, monitor), which do
 * not depend on each other. */
#pragma once

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_VGPU_DEFAULT_ROOT "/var/lib/migkit/vgpu"
#define MK_VGPU_CONTAINERS "containers"
#define MK_VGPU_REGION_FILE "migkit-vgpu.cache"
#define MK_VGPU_PRELOAD_FILE "ld.so.preload"
#define MK_VGPU_INFO_SUFFIX ".json"
#define MK_VGPU_UID_MAX 64              /* a pod UID with its NUL (MK_K8S_UID_MAX) */
#define MK_VGPU_MAX_DEVICES 16          /* devices of one container (VGPU_MAX_DEVICES) */
#define MK_VGPU_MAX_INFO_BYTES (16u << 10)
#define MK_VGPU_MAX_ENTRIES 65536u      /* entries of containers/ looked at */
#define MK_VGPU_MAX_DEPTH 8             /* directories inside a container's directory removed */

/* One soft slice of a container, as the reservation gave it. */
struct mk_vgpu_slice {
        const char *gpu_uuid;
        uint64_t memory_mib;
        unsigned cores;                 /* percent, 0: no compute limit */
};

/* Who a container directory belongs to (the identity file). */
struct mk_vgpu_container {
        const char *pod_uid, *namespace, *name;
        const char *container;          /* container name; "" when unknown */
        unsigned index;                 /* among init containers then containers */
        const struct mk_vgpu_slice *slices;
        size_t n_slices;
};

/* "<root>/containers/<uid>_<index>" in *ret (malloc'd). -EINVAL for a uid
 * that is empty, longer than MK_VGPU_UID_MAX - 1 or holds anything but
 * letters, digits and '-' (it becomes a path component). */
int mk_vgpu_container_dir(const char *root, const char *pod_uid, unsigned index, char **ret) _nonnull_(1, 2, 4) _wur_;

/* Parses a directory name "<uid>_<index>" (uid as above). -EINVAL otherwise. */
int mk_vgpu_container_name_parse(const char *name, char ret_uid[MK_VGPU_UID_MAX], unsigned *ret_index)
        _nonnull_(1, 2, 3) _wur_;

/* Creates <root>/containers/ and the container's directory (mode 0777: the
 * container's processes may run as any user and create the region file
 * there), then writes its identity file atomically. Idempotent: an
 * existing directory (a retried Allocate) is kept with its region file.
 * On success *ret_dir (may be NULL) is the directory (malloc'd). -errno
 * with the path in e. */
int mk_vgpu_container_prepare(const char *root, const struct mk_vgpu_container *c, char **ret_dir,
                              struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Writes <root>/ld.so.preload = "<library>\n" (library: the path inside the
 * container) when it does not already say so (atomic replace). On success
 * *ret_path (may be NULL) is the file's path (malloc'd). */
int mk_vgpu_preload_file_ensure(const char *root, const char *library, char **ret_path, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

/* Opens <root>/containers for reading: 1 with *ret_dir (closedir it) and
 * *ret_path (malloc'd), 0 when it does not exist (nothing set), -errno
 * naming the path in e. */
int mk_vgpu_containers_open(const char *root, DIR **ret_dir, char **ret_path, struct mk_error *e)
        _nonnull_(1, 2, 3) _wur_;

/* Removes the directories (recursively, MK_VGPU_MAX_DEPTH deep, symlinks
 * removed as links) and identity files under <root>/containers whose pod
 * uid is not among live[0..n_live), unless modified less than min_age_s
 * seconds before `now` (an Allocate may have made it for a pod the
 * caller's list does not show yet). Names that are not "<uid>_<index>"
 * are left alone. Returns how many containers were removed (0 when
 * containers/ does not exist), -errno when it cannot be read; a single
 * entry that cannot be removed is skipped (debug log) and counted in
 * *ret_failed (may be NULL). Call it only with a complete list of the
 * node's pods: a partial list removes the directories of running pods. */
int mk_vgpu_prune(const char *root, const char *const *live, size_t n_live, int64_t now, unsigned min_age_s,
                  unsigned *ret_failed, struct mk_error *e) _nonnull_(1) _wur_;
