/* Control API of the NVML simulator (libnvidia-ml.so.1 built from sim/).
 *
 * These functions drive the simulated machine from outside NVML: create a
 * machine, add processes, raise Xid events, arm faults, reset GPUs, reboot.
 * migkit-sim and the nvidia-smi stand-in call them; NVML clients never need
 * them. They act on the same state file as the NVML functions (see
 * mksim_state_path()), take the same lock, and need no nvmlInit().
 *
 * Conventions: functions that can fail return an int, >= 0 on success and a
 * negative errno on failure; mksim_last_error() then returns a one-line human
 * message for the calling thread. Out-parameters (ret_*) are written only on
 * success. Strings returned through char ** are owned by the caller (free()).
 *
 * Every function that needs a machine creates the state file from
 * MIGKIT_SIM_MACHINE (default "dgx-a100") when it does not exist, exactly as
 * nvmlInit does. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MKSIM_EXPORT __attribute__((visibility("default")))

/* "No GPU instance / compute instance": the process runs on the whole GPU,
 * the Xid is not attributed to an instance. Same value as NVML uses. */
#define MKSIM_ID_NONE 0xFFFFFFFFu

/* Flags of mksim_create_machine(). */
#define MKSIM_CREATE_FORCE 0x1u

/* The path of the state file the library uses: $MIGKIT_SIM_STATE, else
 * $XDG_RUNTIME_DIR/migkit-sim-state.json, else /tmp/migkit-sim-<uid>.json.
 * Points to thread-local storage valid until the next call in the thread. */
MKSIM_EXPORT const char *mksim_state_path(void);

/* One-line message describing the last failure of an mksim_* function in the
 * calling thread ("" when none). Thread-local storage. */
MKSIM_EXPORT const char *mksim_last_error(void);

/* Writes a new state file for MACHINE (a catalog machine name, a custom list
 * "a100-40gb*4,h100-80gb", or a path to a JSON file {"gpus": [...]} starting
 * with '/' or './'). -EEXIST when a state file exists and MKSIM_CREATE_FORCE
 * is not given; -EINVAL for an unknown machine or model. */
MKSIM_EXPORT int mksim_create_machine(const char *machine, unsigned flags);

/* The whole state as pretty-printed JSON text (the state file's content plus
 * derived fields: profile names, model names). *ret_json is malloc'ed. */
MKSIM_EXPORT int mksim_describe(char **ret_json);

/* The simulated host tree of the current machine ("<state file>.host", with
 * sys/bus/pci/devices/<address>/{vendor,device,subsystem_*,class,numa_node,
 * config} and proc/driver/nvidia-caps/mig-minors; docs/simulator.md), written
 * when missing. *ret_path is malloc'ed. */
MKSIM_EXPORT int mksim_host_root(char **ret_path);

/* Number of GPUs of the current machine. */
MKSIM_EXPORT int mksim_gpu_count(unsigned *ret_count);

/* Adds a process on GPU `gpu`, on the whole GPU (gi = ci = MKSIM_ID_NONE) or
 * on the compute instance (gi, ci), which must exist. pid 0 allocates a fake
 * pid from 100000 up. used_mib is the memory it uses. -ENODEV bad GPU index,
 * -ENOENT no such GI/CI, -EEXIST pid already present, -EINVAL gi without ci. */
MKSIM_EXPORT int mksim_process_add(unsigned gpu, unsigned gi, unsigned ci, unsigned pid,
                                   unsigned long long used_mib, unsigned *ret_pid);

/* Removes the process `pid` wherever it runs. -ENOENT when absent. */
MKSIM_EXPORT int mksim_process_remove(unsigned pid);

/* Queues an Xid event on GPU `gpu` (attributed to gi/ci, or MKSIM_ID_NONE).
 * NVML event sets registered for Xid on that GPU before this call see it. */
MKSIM_EXPORT int mksim_xid(unsigned gpu, unsigned gi, unsigned ci, unsigned long long xid);

/* Makes GPU `gpu` fall off the bus (lost = 1) or come back (lost = 0).
 * While lost, every NVML call on the GPU or its MIG devices (handle look-up
 * by index, UUID or bus id included) returns NVML_ERROR_GPU_IS_LOST, and
 * nvmlEventSetWait_v2 on a set with the GPU registered returns it too. A
 * reboot brings every GPU back; a GPU reset does not. -ENODEV bad index. */
MKSIM_EXPORT int mksim_gpu_set_lost(unsigned gpu, int lost);

/* Arms a fault: the n-th call (n >= 1, counted from now, across processes) of
 * the NVML function `function` returns `nvml_error` without doing anything,
 * then the fault disarms. -EINVAL unknown function name, n == 0 or error 0. */
MKSIM_EXPORT int mksim_fault_set(const char *function, unsigned n, int nvml_error);

/* After the n-th successful mutating NVML call (create, destroy, set MIG
 * mode) has been saved, the calling process dies with _exit(137). 0 disarms. */
MKSIM_EXPORT int mksim_fault_crash_after(unsigned n);

/* Disarms every fault and crash_after. */
MKSIM_EXPORT int mksim_fault_clear(void);

/* Resets GPU `index`: applies the pending MIG mode and destroys all its GPU
 * and compute instances. -EBUSY when a process runs on the GPU, -ENODEV for a
 * bad index. */
MKSIM_EXPORT int mksim_reset_gpu(unsigned index);

/* Waits as long as one mutating operation takes ($MIGKIT_SIM_OP_LATENCY_MS,
 * milliseconds, default 0; docs/simulator.md): the nvidia-smi stand-in waits
 * once per reset command, however many GPUs it resets. -EINVAL for a bad
 * value (mksim_last_error() says why). */
MKSIM_EXPORT int mksim_op_wait(void);

/* Reboots the machine: all processes end, all instances are destroyed on all
 * GPUs, pending MIG modes apply; Hopper and later GPUs come back with MIG
 * disabled, Ampere GPUs keep their mode. Queued events are dropped. */
MKSIM_EXPORT int mksim_reboot(void);

/* Catalog enumeration: i-th machine / model, -ENOENT past the end. The
 * returned strings are static. */
MKSIM_EXPORT int mksim_catalog_machine(size_t i, const char **ret_name, const char **ret_description);
MKSIM_EXPORT int mksim_catalog_model(size_t i, const char **ret_name, const char **ret_product_name);

/* NVML return codes by name: "IN_USE", "NVML_ERROR_IN_USE", "in_use", or a
 * decimal number. -EINVAL when unknown. */
MKSIM_EXPORT int mksim_nvml_error_from_string(const char *s, int *ret_nvml_error);
/* "NVML_ERROR_IN_USE" style name of an NVML return code, NULL when unknown. */
MKSIM_EXPORT const char *mksim_nvml_error_to_string(int nvml_error);

/* A running process of the CUDA driver simulator (libcuda.so.1) on one CUDA
 * device: the memory it holds there and the share of the last window_ms its
 * kernels kept the device's SMs busy. gi/ci are MKSIM_ID_NONE on a whole GPU. */
struct mksim_cuda_process {
        unsigned pid, gpu, gi, ci;
        unsigned long long used_bytes;
        unsigned sm_percent;
};

/* The live CUDA processes (dead ones are reaped on the way), one entry per
 * process and device. *ret is malloc'ed (NULL when none). */
MKSIM_EXPORT int mksim_cuda_processes(unsigned window_ms, struct mksim_cuda_process **ret, size_t *ret_n);

/* Records that the MPS control daemon stand-in (sim/mps) whose pipe
 * directory is `pipe` was sent `command` (or did "start", "quit"), in the
 * state file's "mps_commands" (the last 256 kept), so tests read what a
 * device plugin or control daemon asked through `migkit-sim show --json`.
 * -EINVAL for strings over 255 / 127 bytes. */
MKSIM_EXPORT int mksim_mps_record(const char *pipe, const char *command);

#ifdef __cplusplus
}
#endif
