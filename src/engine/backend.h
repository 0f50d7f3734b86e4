/* The engine's mode backends (STYLE.md #10, pciutils' access methods): how
 * one apply flow reads the GPUs, sets their MIG mode and resets them.
 *   nvml  the driver through NVML: modes, resets (nvidia-smi or sysfs), and
 *         GPU / compute instances.
 *   pci   no driver: the MIG mode through PCI BAR0 and the sysfs function
 *         reset (GA100 only, src/pci/); it cannot see or make instances.
 * The flow (engine/apply.c) tries them in order with detect(); everything
 * else goes through the ops, so a crash or an error behaves the same on both. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "mig/gpu.h"

struct mk_backend;

struct mk_backend_ops {
        const char *name;          /* "nvml", "pci" */
        const char *description;   /* for people: "NVML", "PCI BAR0" */
        bool instances;            /* can read, create and destroy GPU and compute instances */
        /* set_mode and the instance calls may run on several threads at
         * once, one GPU per thread (NVML API Reference, introduction: "safe
         * to make simultaneous NVML calls from multiple threads"); else the
         * flow calls them one at a time. */
        bool concurrent;
        /* Can this backend drive the node? When so, sets itself up in b
         * (b->data) and returns 0; else -errno with the reason in e and b
         * unchanged. */
        int (*detect)(struct mk_backend *b, struct mk_error *e);
        void (*close)(struct mk_backend *b);
        /* Reads every GPU. GPU i of the snapshot is the GPU the other ops
         * call `gpu` i (its index). Caller frees. */
        int (*snapshot)(struct mk_backend *b, struct mk_snapshot **ret, struct mk_error *e);
        /* Requests the MIG mode; *ret_pending: it waits for a reset. */
        int (*set_mode)(struct mk_backend *b, const struct mk_gpu *g, bool enabled, bool *ret_pending,
                        struct mk_error *e);
        /* Resets these GPUs, all or none: a GPU that cannot be reset (no
         * sysfs reset, GPU passthrough) is -EAGAIN with *ret_reboot_needed
         * before any reset. */
        int (*reset)(struct mk_backend *b, const struct mk_gpu *const *gpus, size_t n, bool *ret_reboot_needed,
                     struct mk_error *e);
        /* Instances (NULL unless `instances`). */
        int (*destroy_ci)(struct mk_backend *b, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e);
        int (*destroy_gi)(struct mk_backend *b, unsigned gpu, unsigned gi_id, struct mk_error *e);
        int (*create_gi)(struct mk_backend *b, unsigned gpu, unsigned profile_id, struct mk_placement placement,
                         unsigned *ret_gi_id, struct mk_error *e);
        /* ci_profile_id < 0: look the id of `ci_enum` up inside the GI first. */
        int (*create_ci)(struct mk_backend *b, unsigned gpu, unsigned gi_id, int ci_profile_id, unsigned ci_enum,
                         struct mk_placement placement, unsigned *ret_ci_id, struct mk_error *e);
        /* Mutating calls so far, for tests and benchmarks: NVML's set mode,
         * create and destroy calls; PCI's BAR0 mode writes and sysfs resets. */
        unsigned long (*mutations)(const struct mk_backend *b);
};

struct mk_backend {
        const struct mk_backend_ops *ops;
        void *data;
};

extern const struct mk_backend_ops mk_backend_nvml;
extern const struct mk_backend_ops mk_backend_pci;

/* Closes b (its ops' close), leaving it empty; accepts an empty b. */
void mk_backend_close(struct mk_backend *b);
