/* libmigkit-vgpu.so: what NVML shows of the container, its memory and its
 * processes (hook.h lists the interposer's files and their order; which
 * NVML device is which CUDA device is hook-devmap.c's). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/hook.h"

/* ---- memory views ---- */

static void nvml_view(nvmlDevice_t d, unsigned long long *total, unsigned long long *used,
                      unsigned long long *free_b) {
        int i = vgpu_nvml_dev_index(d);
        if (i < 0 || vgpu_reg->mem_limit[i] == VGPU_UNLIMITED)
                return;
        uint64_t t = vgpu_capped_total((unsigned) i, *total);
        uint64_t u = vgpu_region_used_live(vgpu_reg, (unsigned) i, vgpu_pid_alive);
        uint64_t f = u < t ? t - u : 0;
        *total = t;
        *used = u < t ? u : t;
        *free_b = f < *free_b ? f : *free_b;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, vgpu_nvmlMemory_t *m) {
        vgpu_init();
        nvmlDeviceGetMemoryInfo_fn real = atomic_load(&real_nvmlDeviceGetMemoryInfo);
        if (!real)
                return NVML_ERROR_FUNCTION_NOT_FOUND;
        nvmlReturn_t r = real(d, m);
        if (r == NVML_SUCCESS && vgpu_on && m)
                nvml_view(d, &m->total, &m->used, &m->free);
        return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, vgpu_nvmlMemory_v2_t *m) {
        vgpu_init();
        nvmlDeviceGetMemoryInfo_v2_fn real = atomic_load(&real_nvmlDeviceGetMemoryInfo_v2);
        if (!real)
                return NVML_ERROR_FUNCTION_NOT_FOUND;
        nvmlReturn_t r = real(d, m);
        if (r == NVML_SUCCESS && vgpu_on && m) {
                nvml_view(d, &m->total, &m->used, &m->free);
                if (m->reserved > m->total - m->used - m->free)
                        m->reserved = m->total - m->used - m->free;
        }
        return r;
}

/* ---- process lists ----
 *
 * On a device of the container, the compute processes NVML lists are the
 * container's own: the live processes of the region holding memory there
 * (their charge, contexts included), under the pids the container sees.
 * The graphics list keeps only NVML's entries of those pids, with their
 * charge. Other devices, and everything without limits, are NVML's. */

#define PROC_MAX 256    /* the real list read for the graphics filter */

/* The region's live processes with bytes on dev: (pid, bytes) into out,
 * up to cap; the number there are. */
static unsigned region_procs(unsigned dev, vgpu_nvmlProcessInfo_v2_t *out, unsigned cap) {
        unsigned n = 0, hwm = atomic_load(&vgpu_reg->slot_hwm);
        vgpu_region_reclaim(vgpu_reg, vgpu_pid_alive);
        for (unsigned i = 0; i < hwm && i < VGPU_MAX_SLOTS; i++) {
                uint64_t o = atomic_load(&vgpu_reg->slots[i].owner);
                uint64_t used = vgpu_region_slot_used(vgpu_reg, (int) i, dev);
                if (!o || VGPU_OWNER_STATE(o) != VGPU_OWNER_LIVE || used == 0)
                        continue;
                if (n < cap)
                        out[n] = (vgpu_nvmlProcessInfo_v2_t) { .pid = (unsigned) VGPU_OWNER_PID(o),
                                                               .usedGpuMemory = used,
                                                               .gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_U32,
                                                               .computeInstanceId = NVML_VALUE_NOT_AVAILABLE_U32 };
                n++;
        }
        return n;
}

/* The answer in NVML's terms: n entries of list into infos (v1 or v2 layout). */
static nvmlReturn_t procs_answer(const vgpu_nvmlProcessInfo_v2_t *list, unsigned n, unsigned *count, void *infos,
                                 bool v1) {
        if (!count)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (*count < n) {
                *count = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (n > 0 && !infos)
                return NVML_ERROR_INVALID_ARGUMENT;
        for (unsigned i = 0; i < n; i++) {
                if (v1)
                        ((vgpu_nvmlProcessInfo_v1_t *) infos)[i] =
                                (vgpu_nvmlProcessInfo_v1_t) { .pid = list[i].pid, .usedGpuMemory = list[i].usedGpuMemory };
                else
                        ((vgpu_nvmlProcessInfo_v2_t *) infos)[i] = list[i];
        }
        *count = n;
        return NVML_SUCCESS;
}

/* The lists' buffers: process-wide under procs_lock, not per thread (a
 * preloaded library's thread-local storage is taken in every thread of
 * every process). */
/* Recursive: an NVML whose graphics list calls its own exported compute list
 * would reach compute_procs inside the graphics hook. */
static pthread_mutex_t procs_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static vgpu_nvmlProcessInfo_v2_t procs_mine[VGPU_MAX_SLOTS], procs_keep[PROC_MAX];

static nvmlReturn_t compute_procs(nvmlDevice_t d, unsigned *count, void *infos, bool v1) {
        int i = vgpu_nvml_dev_index(d);
        pthread_mutex_lock(&procs_lock);
        unsigned n = region_procs((unsigned) i, procs_mine, VGPU_MAX_SLOTS);
        nvmlReturn_t r = procs_answer(procs_mine, n < VGPU_MAX_SLOTS ? n : VGPU_MAX_SLOTS, count, infos, v1);
        pthread_mutex_unlock(&procs_lock);
        return r;
}

#define COMPUTE_PROCS(name, type, v1)                                                                        \
        EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *n, type *p) {                                 \
                vgpu_init();                                                                                      \
                name##_fn real = atomic_load(&real_##name);                                                  \
                if (!real)                                                                                   \
                        return NVML_ERROR_FUNCTION_NOT_FOUND;                                                \
                if (!vgpu_on || vgpu_nvml_dev_index(d) < 0)                                                        \
                        return real(d, n, p);                                                                \
                return compute_procs(d, n, p, v1);                                                           \
        }
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses, vgpu_nvmlProcessInfo_v1_t, true)
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, vgpu_nvmlProcessInfo_v2_t, false)
COMPUTE_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, vgpu_nvmlProcessInfo_v2_t, false)

/* NVML's graphics list, kept to the container's processes. */
#define GRAPHICS_PROCS(name, type, v1)                                                                       \
        EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *n, type *p) {                                 \
                vgpu_init();                                                                                      \
                name##_fn real = atomic_load(&real_##name);                                                  \
                if (!real)                                                                                   \
                        return NVML_ERROR_FUNCTION_NOT_FOUND;                                                \
                int dev = vgpu_on ? vgpu_nvml_dev_index(d) : -1;                                                   \
                if (dev < 0)                                                                                 \
                        return real(d, n, p);                                                                \
                static type all[PROC_MAX]; /* under procs_lock */                                            \
                unsigned na = PROC_MAX, k = 0;                                                               \
                pthread_mutex_lock(&procs_lock);                                                             \
                nvmlReturn_t r = real(d, &na, all);                                                          \
                if (r == NVML_SUCCESS) {                                                                     \
                        unsigned nm = region_procs((unsigned) dev, procs_mine, VGPU_MAX_SLOTS);              \
                        for (unsigned i = 0; i < na && i < PROC_MAX; i++)                                    \
                                for (unsigned j = 0; j < nm && j < VGPU_MAX_SLOTS; j++)                      \
                                        if (procs_mine[j].pid == all[i].pid) {                               \
                                                procs_keep[k++] = procs_mine[j];                             \
                                                break;                                                       \
                                        }                                                                    \
                        r = procs_answer(procs_keep, k, n, p, v1);                                           \
                }                                                                                            \
                pthread_mutex_unlock(&procs_lock);                                                           \
                return r;                                                                                    \
        }
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses, vgpu_nvmlProcessInfo_v1_t, true)
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, vgpu_nvmlProcessInfo_v2_t, false)
GRAPHICS_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, vgpu_nvmlProcessInfo_v2_t, false)

VGPU_HOOK_TABLE(nvml, VGPU_NVML_HOOKS(VGPU_HOOK_ENTRY_NVML));
