/* The CDI spec file of the device plugin's devices (Container Device
 * Interface spec v0.5.0, github.com/cncf-tags/container-device-interface
 * SPEC.md; what k8s-device-plugin v0.16 internal/cdi writes through
 * nvidia-container-toolkit's nvcdi): with a CDI device-list strategy the
 * plugin hands out names "k8s.device-plugin.nvidia.com/gpu=<id>", and the
 * container engine resolves them from this file. One device per GPU and per
 * MIG device, named by UUID and by index ("0", "2:1"); device nodes from
 * the dev root, the driver's libraries and binaries found under the driver
 * root as read-only bind mounts. JSON through jansson. docs/device-plugin.md
 * ("CDI spec file") lists what differs from upstream. */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/resources.h"

#define MK_CDI_DEFAULT_SPEC_DIR "/var/run/cdi" /* upstream's cdiRoot */
#define MK_CDI_SPEC_VERSION "0.5.0"
#define MK_CDI_DEFAULT_KIND "k8s.device-plugin.nvidia.com/gpu"
#define MK_CDI_MAX_HOST_FILES 512u /* driver libraries and binaries mounted; more is a broken driver root */

struct mk_cdi_stats {
        size_t devices;         /* CDI devices (two names per GPU / MIG device) */
        size_t mounts;          /* libraries and binaries found */
        size_t mig_without_caps; /* MIG devices left out: no access caps in mig-minors */
};

/* The spec as indented JSON text (malloc'd, NUL-terminated) for the
 * snapshot's GPUs and MIG devices (plugin/resources.h mk_dp_all_devices()),
 * kind o->cdi_kind (NULL: MK_CDI_DEFAULT_KIND). Device nodes: /dev/nvidia<minor>
 * and, for MIG, /dev/nvidia-caps/nvidia-cap<N> of the GI and CI access
 * (a MIG device whose caps mig-minors lacks is left out and counted); the
 * control nodes /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,
 * /dev/nvidia-modeset that exist under the dev root (o->dev_root, else
 * o->driver_root, else "/"), host paths below it. Mounts: the driver
 * libraries named lib{nvidia-*,cuda*,nvcuvid,nvoptix,...}.so.<driver version>
 * in the usual library directories and the driver's binaries (nvidia-smi,
 * nvidia-cuda-mps-control, ...) in the bin directories under o->driver_root,
 * container path = the path below the root. Deterministic: the same input
 * gives the same text. -EINVAL (bad kind, a device without UUID), -E2BIG
 * (more than MK_CDI_MAX_HOST_FILES files), -ENOMEM; *ret only on success. */
int mk_cdi_spec_render(const struct mk_snapshot *s, const struct mk_dp_options *o, char **ret_text,
                       struct mk_cdi_stats *ret_stats, struct mk_error *e) _nonnull_(1, 2, 3) _wur_;

/* "<dir>/<vendor>-<class>.json" for kind (NULL: MK_CDI_DEFAULT_KIND), the
 * name the CDI library's GenerateNameForSpec() gives. -EINVAL for a kind
 * without '/', -ENOMEM. */
int mk_cdi_spec_path(const char *dir, const char *kind, char **ret) _nonnull_(1, 3) _wur_;

/* Creates `path`'s directory when missing and replaces the file atomically
 * (base/fileio.h), mode 0644. -errno with the path in e. */
int mk_cdi_spec_write(const char *path, const char *text, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* The spec file the plugin keeps: written at start and whenever the
 * rendered spec changes (a reload, a new MIG layout seen by the dynamic
 * mode's Allocate), removed at exit. Calls may come from several threads. */
struct mk_cdi_file;

/* A keeper for "<dir>/<vendor>-<class>.json" (dir NULL: MK_CDI_DEFAULT_SPEC_DIR);
 * nothing is written yet. -EINVAL for a bad kind, -ENOMEM. */
int mk_cdi_file_new(const char *dir, const char *kind, struct mk_cdi_file **ret, struct mk_error *e)
        _nonnull_(3) _wur_;
/* Renders the spec for s and o and writes it when it differs from what
 * this keeper wrote last. 1 written, 0 unchanged, -errno (e names the
 * path). *ret_stats (may be NULL) describes the rendered spec. */
int mk_cdi_file_update(struct mk_cdi_file *f, const struct mk_snapshot *s, const struct mk_dp_options *o,
                       struct mk_cdi_stats *ret_stats, struct mk_error *e) _nonnull_(1, 2, 3) _wur_;
/* The spec file's path (owned by f). */
const char *mk_cdi_file_path(const struct mk_cdi_file *f) _nonnull_(1);
/* Removes the file if this keeper wrote it (a container engine must not
 * resolve devices of a plugin that is gone, as upstream's removal at exit),
 * then frees f. Returns NULL; accepts NULL. A failed unlink is returned in
 * *ret_error (may be NULL) as -errno. */
struct mk_cdi_file *mk_cdi_file_free(struct mk_cdi_file *f, int *ret_error);
