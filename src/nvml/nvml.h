/* The only code that calls NVML. Loads the library at run time (dlopen with
 * RTLD_NOW of MIGKIT_NVML_LIB or libnvidia-ml.so.1), resolves every symbol we
 * use up front, and turns NVML answers into mig/ types. NVML errors become
 * -errno plus NVML's own error string in the struct mk_error. */
#pragma once

#include <stdbool.h>

#include "base/error.h"
#include "mig/gpu.h"
#include "nvml/nvml-abi.h"

#define MK_NVML_DEFAULT_LIB "libnvidia-ml.so.1"

struct mk_nvml;

/* Opens the library at `path` (NULL: $MIGKIT_NVML_LIB, else the default
 * soname), resolves the symbol table and calls nvmlInit_v2. A missing library,
 * a missing required symbol (named in the message) or a failed init returns a
 * negative errno and one line of explanation in `e`; nothing else is touched. */
int mk_nvml_open(const char *path, struct mk_nvml **ret, struct mk_error *e);

/* nvmlShutdown and dlclose. Accepts NULL, returns NULL. */
struct mk_nvml *mk_nvml_close(struct mk_nvml *n);
static inline void mk_nvml_closep(struct mk_nvml **n) {
        mk_nvml_close(*n);
}
#define _cleanup_nvml_ _cleanup_(mk_nvml_closep)

/* The path the library was loaded from (as given to dlopen). */
const char *mk_nvml_path(const struct mk_nvml *n);

/* Reads every GPU: identity, memory, MIG mode, the GPU instance profiles the
 * GPU reports with placements and compute-instance profiles, and the existing
 * GPU and compute instances with their MIG device UUIDs. On failure nothing is
 * returned and `e` names the GPU and the call. Caller frees with
 * mk_snapshot_free(). */
int mk_nvml_snapshot(struct mk_nvml *n, struct mk_snapshot **ret, struct mk_error *e);

/* NVML return code -> negative errno (0 for NVML_SUCCESS). */
int mk_nvml_errno(nvmlReturn_t r);
/* NVML's own name for a return code ("NVML_ERROR_IN_USE"), for messages and tests. */
const char *mk_nvml_return_name(nvmlReturn_t r);

/* --- Changes. Each is one NVML call (plus the look-ups of its handles);
 * failures name the GPU, the operation and NVML's reason. --- */

/* GPU `gpu`'s current MIG mode (MK_MIG_UNSUPPORTED when it has none), in one
 * NVML call: for a daemon that watches for a mode change between
 * snapshots. */
int mk_nvml_mig_mode(struct mk_nvml *n, unsigned gpu, enum mk_mig_mode *ret, struct mk_error *e);

/* Sets the MIG mode; *ret_pending is true when the change waits for a GPU
 * reset (activation status RESET_REQUIRED or IN_USE, or the re-read mode
 * still differs). */
int mk_nvml_set_mig_mode(struct mk_nvml *n, unsigned gpu, bool enabled, bool *ret_pending, struct mk_error *e);

/* Sets the compute mode of GPU `gpu` (NVML_COMPUTEMODE_DEFAULT,
 * _EXCLUSIVE_PROCESS, _PROHIBITED: MPS wants exclusive process, NVIDIA MPS
 * documentation 2.3.1) and reads it back; -EOPNOTSUPP when the library lacks
 * the call, -EIO when the mode read back differs. Needs root on a real GPU. */
int mk_nvml_set_compute_mode(struct mk_nvml *n, unsigned gpu, unsigned mode, struct mk_error *e);

/* Creates a GPU instance of driver profile `profile_id` at `placement`;
 * returns its id. */
int mk_nvml_create_gi(struct mk_nvml *n, unsigned gpu, unsigned profile_id, struct mk_placement placement,
                      unsigned *ret_gi_id, struct mk_error *e);
/* Creates a compute instance of driver CI profile `ci_profile_id` in GI
 * `gi_id`, at `placement` when the library supports placement (else the
 * driver chooses); returns its id. */
int mk_nvml_create_ci(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_profile_id,
                      struct mk_placement placement, unsigned *ret_ci_id, struct mk_error *e);
int mk_nvml_destroy_ci(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e);
int mk_nvml_destroy_gi(struct mk_nvml *n, unsigned gpu, unsigned gi_id, struct mk_error *e);

/* The driver CI profile id of NVML CI profile enum `ci_enum` inside GI
 * `gi_id` (for CI profiles derived before the GI existed). */
int mk_nvml_ci_profile_id(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_enum, unsigned *ret_id,
                          struct mk_error *e);

/* Mutating NVML calls made through this handle (set mode, create, destroy),
 * successful or not: for benchmarks and tests. */
unsigned long mk_nvml_mutations(const struct mk_nvml *n);

/* --- Events, for the device plugin's health thread. The functions below
 * may run in one thread while others use the same struct mk_nvml for
 * read-only queries (NVML is thread-safe; so is the simulator). One event
 * set belongs to one thread: nvml.h warns that "operations on set are not
 * thread safe". --- */

/* An event set registered, on every GPU of the snapshot, for critical Xid
 * errors and the ECC events the GPU supports. */
struct mk_nvml_events;

/* Creates the set and registers each GPU. A GPU that cannot be registered
 * does not fail the call: mk_nvml_events_gpu_status() tells. Fails with
 * -EOPNOTSUPP when the library has no event API, or NVML's error when the
 * set cannot be created. Free with mk_nvml_events_close(). */
int mk_nvml_events_open(struct mk_nvml *n, const struct mk_snapshot *s, struct mk_nvml_events **ret,
                        struct mk_error *e);

/* Registration of the i-th snapshot GPU: 0 registered, -EOPNOTSUPP events
 * not supported on it, another negative errno when registration failed
 * (-ENXIO: GPU lost). */
int mk_nvml_events_gpu_status(const struct mk_nvml_events *ev, size_t i);

struct mk_nvml_event {
        unsigned gpu;                 /* snapshot index; UINT32_MAX when NVML named an unknown device */
        unsigned long long type;      /* nvmlEventType* bit */
        unsigned long long xid;       /* eventData: the Xid for nvmlEventTypeXidCriticalError */
        unsigned gi_id, ci_id;        /* the MIG device; UINT32_MAX when the event is for the whole GPU */
};

/* Waits up to timeout_ms: 1 with an event in *ret, 0 on timeout, negative
 * errno on failure (-ENXIO: a registered GPU is lost; the set then keeps
 * failing, reopen it without that GPU). */
int mk_nvml_events_wait(struct mk_nvml_events *ev, unsigned timeout_ms, struct mk_nvml_event *ret,
                        struct mk_error *e);

/* Frees the set. Accepts NULL, returns NULL. */
struct mk_nvml_events *mk_nvml_events_close(struct mk_nvml_events *ev);
static inline void mk_nvml_events_closep(struct mk_nvml_events **ev) {
        mk_nvml_events_close(*ev);
}

/* A cheap liveness check of GPU `gpu` (NVML index), or of its MIG device
 * (gi_id, ci_id; UINT32_MAX for "the whole GPU" / "the GPU instance"):
 * the handle, its memory information, the instance look-ups. 0 when it
 * answers, else NVML's error (-ENXIO: GPU lost). */
int mk_nvml_device_check(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e);
