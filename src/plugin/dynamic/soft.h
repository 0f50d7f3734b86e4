/* Soft slices in the device plugin's dynamic mode (docs/device-plugin.md
 * "Soft slices"): what Allocate adds for a container whose reservation is a
 * soft slice of a whole GPU (claim mode hami-core), so that
 * libmigkit-vgpu.so enforces its memory cap and compute share, the way
 * HAMi's device plugin answers for HAMi-core (HAMi plugin/server.go):
 * HAMi-core's variables, the per-container directory for the region file,
 * the library and an ld.so.preload that loads it. Pure: paths and limits
 * in, response items out; the directories are made by vgpunode/dirs.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "vgpunode/dirs.h"

#define MK_DP_SOFT_DIR "/usr/local/vgpu"                          /* container: the per-container directory */
#define MK_DP_SOFT_REGION MK_DP_SOFT_DIR "/" MK_VGPU_REGION_FILE  /* container: the region file */
#define MK_DP_SOFT_LIBRARY "/usr/lib/migkit/libmigkit-vgpu.so"    /* container: the library */
#define MK_DP_SOFT_PRELOAD "/etc/ld.so.preload"
#define MK_DP_SOFT_LIBRARY_NAME "libmigkit-vgpu.so"
#define MK_DP_DEFAULT_SPLIT 10u                                   /* HAMi's deviceSplitCount default */
#define MK_DP_MAX_SPLIT 64u

struct mk_dp_soft_options {
        const char *root;               /* host vgpu root; NULL: MK_VGPU_DEFAULT_ROOT */
        const char *library;            /* host path of the library; NULL: <root>/libmigkit-vgpu.so */
        unsigned split;                 /* ids per shared GPU; 0: MK_DP_DEFAULT_SPLIT */
};

/* The option values with defaults filled in (borrowed strings). */
const char *mk_dp_soft_root(const struct mk_dp_soft_options *o);
/* The host library path; *buf receives a malloc'd path when it is derived. */
const char *mk_dp_soft_library(const struct mk_dp_soft_options *o, char **buf) _nonnull_(2);

/* Adds to res (which already names the GPUs, mk_dp_allocate_devices) the
 * items of a soft slice container: envs CUDA_DEVICE_MEMORY_LIMIT_<i>=<M>m
 * and CUDA_DEVICE_SM_LIMIT_<i>=<C> for slices[i] (i: CUDA's index of the
 * device in the container; the caller orders slices as CUDA enumerates
 * them), CUDA_DEVICE_MEMORY_SHARED_CACHE=MK_DP_SOFT_REGION; mounts host_dir
 * on MK_DP_SOFT_DIR (rw), the library on MK_DP_SOFT_LIBRARY (ro) and, unless
 * disable_control, <root>/ld.so.preload on /etc/ld.so.preload (ro; HAMi's
 * CUDA_DISABLE_CONTROL opt-out). -EINVAL for 0 or more than
 * MK_VGPU_MAX_DEVICES slices, a cap of 0 MiB or cores over 100; -ENOMEM. */
int mk_dp_soft_response(const struct mk_vgpu_slice *slices, size_t n, const char *host_dir, bool disable_control,
                        const struct mk_dp_soft_options *o, struct mk_dp_response *res, struct mk_error *e)
        _nonnull_(1, 3, 5, 6) _wur_;

/* The soft slices of container `ctr` of claim c, in the order CUDA numbers
 * the container's GPUs: by NVML index in s (PCI bus order, which is CUDA's
 * order among identical GPUs); a GPU s does not have goes last. Returns how
 * many (at most MK_VGPU_MAX_DEVICES; more are not written). ret[i].gpu_uuid
 * points into c. */
size_t mk_dp_soft_slices(const struct mk_claim *c, unsigned ctr, const struct mk_snapshot *s,
                         struct mk_vgpu_slice ret[MK_VGPU_MAX_DEVICES]) _nonnull_(1, 4);

/* The node side of a soft slice Allocate, before it is answered: for each
 * container of c with soft slices, its directory and identity file
 * (mk_vgpu_container_prepare; the container's name from `pod`), then
 * <root>/ld.so.preload naming MK_DP_SOFT_LIBRARY; fails with -ENOENT when
 * the host library is not there (the runtime's mount would fail with a
 * less clear message). Nothing is done for a claim without soft slices. */
int mk_dp_soft_prepare(const struct mk_claim *c, const json_t *pod, const struct mk_snapshot *s,
                       const struct mk_dp_soft_options *o, struct mk_error *e) _nonnull_(1) _wur_;

/* Container `index` of a pod object (init containers first, then
 * containers, as reservations count them), or NULL. */
const json_t *mk_dp_pod_container(const json_t *pod, unsigned index);

/* Whether that container sets CUDA_DISABLE_CONTROL to "true" (any case)
 * in its env, as HAMi's device plugin reads it. Only a literal value
 * counts: a valueFrom reference is not resolved (the plugin sees the pod
 * spec, not the container's final environment). */
bool mk_dp_soft_control_disabled(const json_t *pod, unsigned index);
