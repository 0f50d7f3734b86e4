/* GPU feature discovery labels (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm, with
 * the MIG strategies of k8s-device-plugin v0.20.0 internal/rm and sharing of k8s-device-plugin v0.20.0 api/config/v1): a snapshot, the driver
 * and CUDA versions, the MIG strategy and the sharing config in, a sorted
 * list of key=value labels out. Pure: no I/O, no clock.
 *
 * Deviation from upstream (gfd#66): when several GPU models share a node,
 * `nvidia.com/gpu.*` describes the model with the most GPUs, ties going to
 * the model of the lowest-index GPU; `count` is that model's count. Never a
 * random one. Under mixed, `nvidia.com/mig-<profile>.count` counts every
 * device of that name and the group describes the first one, as GFD.
 * docs/labels.md lists every label. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "gfd/labels-host.h"
#include "spec/plugin-config.h"

#define MK_MAX_LABELS 4096u /* labels of one node; far above what 16 GPUs give */

struct mk_label {
        char *key;
        char *value;
};

struct mk_labels {
        struct mk_label *items; /* sorted by key (strcmp) */
        size_t n;
};

struct mk_labels_input {
        const struct mk_snapshot *snapshot;
        enum mk_mig_strategy strategy;
        const struct mk_plugin_config *config; /* sharing; NULL: none */
        unsigned cuda_driver_version;          /* nvmlSystemGetCudaDriverVersion (12040); 0: unknown, labels left out */
        const char *machine_type;              /* DMI product name, raw; NULL: no gpu.machine label */
        uint64_t timestamp;                    /* unix seconds; 0: no gfd.timestamp label */
        const struct mk_labels_host *host;     /* gpu.mode, vgpu.* (mk_labels_host_read()); NULL: left out */
};

/* Computes the labels. Errors (-EINVAL, message in `e`): a driver version
 * that is not X.Y[.Z] in digits; MPS sharing with a MIG-enabled GPU; with
 * The invalid single-strategy
 * layouts are not errors: they give GFD's `-MIG-INVALID` labels. A node
 * without GPUs gives an empty list. *ret is owned by the caller. */
int mk_labels_compute(const struct mk_labels_input *in, struct mk_labels **ret, struct mk_error *e) _wur_;

struct mk_labels *mk_labels_free(struct mk_labels *l);
static inline void mk_labels_freep(struct mk_labels **l) {
        mk_labels_free(*l);
}

/* The value of `key`, or NULL. */
const char *mk_labels_get(const struct mk_labels *l, const char *key);

/* GFD's sanitising of a model name: characters outside [A-Za-z0-9-_. ]
 * dropped, blank-separated words joined with '-'. Returns the length or
 * -ENOBUFS. */
int mk_labels_sanitise(const char *in, char *buf, size_t size);

/* The family name of a compute capability ("ampere"), or NULL for major 0. */
const char *mk_labels_family(int cc_major, int cc_minor);
