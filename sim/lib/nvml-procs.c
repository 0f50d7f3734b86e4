/* NVML's process and utilisation functions: the processes of `migkit-sim
 * process add` (the state file) and the CUDA driver simulator's running
 * processes (the live region), their memory and their kernels' busy time. */
#include <time.h>

#include "lib/nvml-call.h"

struct sim_live *live_get(struct call *c) {
        struct sim_live *l;
        if (sim_live_open(c->path, &l) < 0)
                return NULL;
        c->live = l;
        return l;
}

/* ---- processes ---- */

/* Live slots of running processes on a device (all of a GPU's for a full-GPU handle). */
static unsigned live_slots(struct sim_live *l, const struct dev *d, struct sim_live_slot **out) {
        unsigned n = 0;
        for (unsigned i = 0; i < SIM_LIVE_SLOTS; i++) {
                struct sim_live_slot *s = &l->slot[i];
                if (s->gpu != d->index || (d->mig && (s->gi != d->gi->id || s->ci != d->ci->id)))
                        continue;
                if (sim_live_slot_live(l, s))
                        out[n++] = s;
        }
        return n;
}

unsigned device_live_slots(struct call *c, const struct dev *d, struct sim_live_slot *ret[SIM_LIVE_SLOTS]) {
        struct sim_live *l = live_get(c);
        return l ? live_slots(l, d, ret) : 0;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !infoCount)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (size_t i = 0; i < d.g->n_procs; i++)
                n += !d.mig || (d.g->procs[i].gi == d.gi->id && d.g->procs[i].ci == d.ci->id);
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n_live = device_live_slots(&c, &d, live);
        n += n_live;
        if (*infoCount < n) {
                *infoCount = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        if (n > 0 && !infos)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        n = 0;
        for (size_t i = 0; i < d.g->n_procs; i++) {
                const struct sim_process *p = &d.g->procs[i];
                if (d.mig && !(p->gi == d.gi->id && p->ci == d.ci->id))
                        continue;
                infos[n++] = (nvmlProcessInfo_t) {
                        .pid = p->pid,
                        .usedGpuMemory = p->used_mib * MIB,
                        .gpuInstanceId = p->gi,
                        .computeInstanceId = p->ci,
                };
        }
        for (unsigned i = 0; i < n_live; i++)
                infos[n++] = (nvmlProcessInfo_t) {
                        .pid = sim_live_pid(atomic_load(&live[i]->owner)),
                        .usedGpuMemory = atomic_load(&live[i]->used_bytes),
                        .gpuInstanceId = live[i]->gi,
                        .computeInstanceId = live[i]->ci,
                };
        *infoCount = n;
        return call_end(&c, NVML_SUCCESS);
}

/* ---- utilisation and older process queries (not in the product's NVML ABI list) ----
 *
 * Kernels the CUDA driver simulator runs are booked per process and device in
 * the live region; utilisation is the busy fraction of the last sample window
 * (MIGKIT_SIM_UTIL_WINDOW_MS, default 1000 ms, NVML's 1 s period for most
 * GPUs). Like the real driver, MIG-enabled GPUs and MIG devices answer
 * NVML_ERROR_NOT_SUPPORTED. Memory utilisation (bandwidth) is not modelled: 0. */

/* Start of the utilisation window ending at now (MIGKIT_SIM_UTIL_WINDOW_MS). */
static uint64_t util_window_from(uint64_t now_ns) {
        const char *e = getenv("MIGKIT_SIM_UTIL_WINDOW_MS");
        uint64_t ms = 1000;
        if (e && *e && (sim_parse_u64(e, false, &ms) < 0 || ms == 0 || ms > UINT64_MAX / 1000000ULL))
                ms = 1000;
        return sim_live_window_from(now_ns, ms * 1000000ULL);
}

/* CLOCK_REALTIME minus CLOCK_MONOTONIC, ns. */
static int64_t real_minus_mono_ns(void) {
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        return ((int64_t) rt.tv_sec * 1000000000LL + rt.tv_nsec) - (int64_t) sim_live_now_ns();
}

/* CLOCK_REALTIME microseconds of a CLOCK_MONOTONIC nanosecond time, and back. */
static unsigned long long mono_to_real_us(uint64_t mono_ns) {
        return (unsigned long long) (((int64_t) mono_ns + real_minus_mono_ns()) / 1000);
}

static uint64_t real_us_to_mono(unsigned long long us) {
        int64_t v = (int64_t) us * 1000 - real_minus_mono_ns();
        return v < 0 ? 0 : (uint64_t) v;
}

static nvmlReturn_t resolve_util_device(struct call *c, nvmlDevice_t device, struct dev *d) {
        nvmlReturn_t r = resolve_device(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (d->mig || d->g->mig_current)
                return NVML_ERROR_NOT_SUPPORTED;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, sim_nvmlUtilization_t *utilization) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_util_device(&c, device, &d);
        if (r == NVML_SUCCESS && !utilization)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        utilization->gpu = device_busy_percent(&c, &d);
        utilization->memory = 0;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, sim_nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_util_device(&c, device, &d);
        if (r == NVML_SUCCESS && !processSamplesCount)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n = device_live_slots(&c, &d, live);
        if (!utilization || *processSamplesCount < n) {
                *processSamplesCount = n;
                return call_end(&c, n == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE);
        }
        uint64_t now = sim_live_now_ns();
        uint64_t from = MAX(util_window_from(now), real_us_to_mono(lastSeenTimeStamp));
        if (from >= now) {
                *processSamplesCount = 0;
                return call_end(&c, NVML_ERROR_NOT_FOUND);
        }
        for (unsigned i = 0; i < n; i++) {
                uint64_t busy = slot_busy(live[i], from, now);
                utilization[i] = (sim_nvmlProcessUtilizationSample_t) {
                        .pid = sim_live_pid(atomic_load(&live[i]->owner)),
                        .timeStamp = mono_to_real_us(now),
                        .smUtil = sim_live_percent(busy, from, now),
                };
        }
        *processSamplesCount = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
        /* nvmlProcessInfo_v2_t has the layout of the v3 structure. */
        return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

/* A v1 list (pid, bytes) from a v3 lister: at most every process of a GPU
 * (state and live ones) is listed, so the copy is bounded whatever the
 * caller's *infoCount says. */
static nvmlReturn_t list_v1(nvmlReturn_t (*list)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *),
                            nvmlDevice_t device, unsigned int *infoCount, sim_nvmlProcessInfo_v1_t *infos) {
        unsigned n = infoCount ? MIN(*infoCount, SIM_MAX_PROCESSES + SIM_LIVE_SLOTS) : 0;
        nvmlProcessInfo_t *tmp = n && infos ? calloc(n, sizeof(*tmp)) : NULL;
        if (n && infos && !tmp)
                return NVML_ERROR_MEMORY;
        unsigned got = n;
        nvmlReturn_t r = list(device, infoCount ? &got : NULL, infos ? tmp : NULL);
        if (infoCount && (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE))
                *infoCount = got;
        if (r == NVML_SUCCESS && infos)
                for (unsigned i = 0; i < got; i++)
                        infos[i] = (sim_nvmlProcessInfo_v1_t) { tmp[i].pid, tmp[i].usedGpuMemory };
        free(tmp);
        return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  sim_nvmlProcessInfo_v1_t *infos) {
        return list_v1(nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount, infos);
}

/* Graphics and MPS-client processes: the simulated machine runs compute
 * processes only (CUDA contexts, `migkit-sim process add`), which real
 * drivers list as compute, not graphics; an MPS server's clients are not
 * modelled. So these lists are empty, with the count protocol of the compute
 * list (nvidia-smi and DCGM call them beside it). */
static nvmlReturn_t empty_list(const char *fn, nvmlDevice_t device, unsigned int *infoCount) {
        struct call c;
        struct dev d;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !infoCount)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *infoCount = 0;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos) {
        return empty_list(__func__, device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos) {
        return empty_list(__func__, device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   sim_nvmlProcessInfo_v1_t *infos) {
        return empty_list(__func__, device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos) {
        return empty_list(__func__, device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos) {
        return empty_list(__func__, device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     sim_nvmlProcessInfo_v1_t *infos) {
        return empty_list(__func__, device, infoCount);
}

unsigned device_busy_percent(struct call *c, const struct dev *d) {
        struct sim_live_slot *live[SIM_LIVE_SLOTS];
        unsigned n = device_live_slots(c, d, live);
        uint64_t now = sim_live_now_ns(), busy = 0;
        uint64_t from = util_window_from(now);
        for (unsigned i = 0; i < n; i++)
                busy += slot_busy(live[i], from, now);
        return MIN(sim_live_percent(busy, from, now), 100u);
}

/* A call refused for its argument structure: the handle is still checked
 * first, as every call does. */
static nvmlReturn_t refuse(const char *fn, nvmlDevice_t device, nvmlReturn_t err) {
        struct call c;
        struct dev d;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_device(&c, device, &d);
        return call_end(&c, r == NVML_SUCCESS ? err : r);
}

/* The versioned process list of newer drivers (nvidia-smi's): COMPUTE and
 * ALL are the compute list above, GRAPHICS and MPS empty; no confidential
 * computing memory. numProcArrayEntries: in the array's size, out the count
 * (INSUFFICIENT_SIZE when it does not fit). */
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, sim_nvmlProcessDetailList_v1_t *plist) {
        if (!plist || plist->mode > 3)
                return refuse(__func__, device, NVML_ERROR_INVALID_ARGUMENT);
        if (plist->version != sim_nvmlProcessDetailList_v1)
                return refuse(__func__, device, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        if (plist->mode == 1 || plist->mode == 2)
                return empty_list(__func__, device, &plist->numProcArrayEntries);
        unsigned n = MIN(plist->numProcArrayEntries, SIM_MAX_PROCESSES + SIM_LIVE_SLOTS);
        nvmlProcessInfo_t *tmp = n && plist->procArray ? calloc(n, sizeof(*tmp)) : NULL;
        if (n && plist->procArray && !tmp)
                return NVML_ERROR_MEMORY;
        unsigned got = n;
        nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(device, &got, plist->procArray ? tmp : NULL);
        if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE)
                plist->numProcArrayEntries = got;
        for (unsigned i = 0; r == NVML_SUCCESS && i < got; i++)
                plist->procArray[i] = (sim_nvmlProcessDetail_v1_t) {
                        .pid = tmp[i].pid,
                        .usedGpuMemory = tmp[i].usedGpuMemory,
                        .gpuInstanceId = tmp[i].gpuInstanceId,
                        .computeInstanceId = tmp[i].computeInstanceId,
                };
        free(tmp);
        return r;
}

/* The versioned per-process utilisation: nvmlDeviceGetProcessUtilization's
 * samples (SM share; memory, video, JPEG and OFA 0). */
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, sim_nvmlProcessesUtilizationInfo_v1_t *info) {
        if (!info)
                return refuse(__func__, device, NVML_ERROR_INVALID_ARGUMENT);
        if (info->version != sim_nvmlProcessesUtilizationInfo_v1)
                return refuse(__func__, device, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        unsigned n = MIN(info->processSamplesCount, SIM_LIVE_SLOTS);
        sim_nvmlProcessUtilizationSample_t *tmp = n && info->procUtilArray ? calloc(n, sizeof(*tmp)) : NULL;
        if (n && info->procUtilArray && !tmp)
                return NVML_ERROR_MEMORY;
        unsigned got = n;
        nvmlReturn_t r = nvmlDeviceGetProcessUtilization(device, info->procUtilArray ? tmp : NULL, &got,
                                                         info->lastSeenTimeStamp);
        if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE || r == NVML_ERROR_NOT_FOUND)
                info->processSamplesCount = got;
        for (unsigned i = 0; r == NVML_SUCCESS && i < got; i++)
                info->procUtilArray[i] = (sim_nvmlProcessUtilizationInfo_v1_t) {
                        .timeStamp = tmp[i].timeStamp,
                        .pid = tmp[i].pid,
                        .smUtil = tmp[i].smUtil,
                };
        free(tmp);
        return r;
}
