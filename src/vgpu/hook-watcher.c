/* libmigkit-vgpu.so: the utilisation watcher, a thread per process that
 * uses a device with a compute share: what NVML measured this process use
 * corrects the launches' estimates, and other users of the GPU seen make
 * the default policy limit (hook.h lists the interposer's files and their
 * order; the launches' side is hook-launch.c). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "vgpu/hook.h"

typedef nvmlReturn_t (*nvmlDeviceGetProcessUtilization_fn)(nvmlDevice_t, vgpu_nvmlProcessUtilizationSample_t *,
                                                            unsigned int *, unsigned long long);

#define WATCH_SAMPLES 256
#define OTHERS_HOLD_NS 500000000ull   /* another user seen: limit for the next 0.5 s */
#define RECLAIM_EVERY 10              /* watcher periods between dead-slot sweeps */

/* The NVML functions the watcher calls. */
struct watch_nvml {
        nvmlDeviceGetHandleByUUID_fn by_uuid;
        nvmlDeviceGetHandleByIndex_fn by_index;
        nvmlDeviceGetProcessUtilization_fn util;
        bool ok;
};

/* What the watcher keeps of a device between its looks. */
struct watch_dev {
        unsigned long long last_seen;   /* the newest sample's time stamp */
        uint64_t last_admitted, last_t, last_charged;
        unsigned corrections;
        bool calibrating;               /* the last look found its estimates not yet corrected */
};

static vgpu_nvmlProcessUtilizationSample_t samples[WATCH_SAMPLES];   /* the watcher thread's */

static bool pid_in_region(unsigned pid) {
        unsigned hwm = atomic_load(&vgpu_reg->slot_hwm);
        for (unsigned i = 0; i < hwm && i < VGPU_MAX_SLOTS; i++) {
                uint64_t o = atomic_load(&vgpu_reg->slots[i].owner);
                if (o && VGPU_OWNER_STATE(o) == VGPU_OWNER_LIVE && (unsigned) VGPU_OWNER_PID(o) == pid)
                        return true;
        }
        return false;
}

/* Sleeps ms; true when the process is exiting (watcher_stop). */
static bool watcher_sleep(unsigned ms) {
        uint64_t t = vgpu_now_ns() + (uint64_t) ms * 1000000ull; /* vgpu_watch_cond waits on CLOCK_MONOTONIC */
        struct timespec until = { (time_t) (t / 1000000000ull), (long) (t % 1000000000ull) };
        pthread_mutex_lock(&vgpu_watch_lock);
        while (!vgpu_watch_stop && pthread_cond_timedwait(&vgpu_watch_cond, &vgpu_watch_lock, &until) == 0)
                ;
        bool stop = vgpu_watch_stop;
        pthread_mutex_unlock(&vgpu_watch_lock);
        return stop;
}

/* atexit: stop the watcher and wait until it is out of NVML. */
static void watcher_stop(void) {
        pthread_mutex_lock(&vgpu_watch_lock);
        bool join = vgpu_watch_running && !pthread_equal(vgpu_watch_thread, pthread_self());
        vgpu_watch_stop = true;
        pthread_cond_broadcast(&vgpu_watch_cond);
        pthread_mutex_unlock(&vgpu_watch_lock);
        if (join)
                (void) pthread_join(vgpu_watch_thread, NULL);
        vgpu_watch_running = false;
}

static void watch_nvml_open(struct watch_nvml *w) {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (lib)
                vgpu_adopt_nvml(lib, vgpu_real_dlsym);
        nvmlInit_fn ini = lib ? (nvmlInit_fn) vgpu_real_dlsym(lib, "nvmlInit_v2") : NULL;
        w->by_uuid = lib ? (nvmlDeviceGetHandleByUUID_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetHandleByUUID") : NULL;
        w->by_index =
                lib ? (nvmlDeviceGetHandleByIndex_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        w->util = lib ? (nvmlDeviceGetProcessUtilization_fn) vgpu_real_dlsym(lib, "nvmlDeviceGetProcessUtilization")
                      : NULL;
        w->ok = ini && w->util && (w->by_uuid || w->by_index) && ini() == NVML_SUCCESS;
        if (!w->ok)
                vgpu_log(VGPU_LOG_INFO, "no NVML process utilisation: compute share runs on estimates only, "
                                        "and the default policy limits at all times");
}

/* NVML's handle of CUDA device d; false when there is none. */
static bool watch_handle(const struct watch_nvml *w, unsigned d, nvmlDevice_t *h) {
        bool have = false;
        /* Our driver's UUID first: the region's may be a
         * previous run's (another CUDA_VISIBLE_DEVICES). */
        if (w->ok && atomic_load(&vgpu_own_uuid_set[d]) && w->by_uuid)
                have = w->by_uuid(vgpu_own_uuid[d], h) == NVML_SUCCESS;
        if (w->ok && !have && atomic_load(&vgpu_reg->uuid_set[d]) == 2 && w->by_uuid)
                have = w->by_uuid(vgpu_reg->uuid[d], h) == NVML_SUCCESS;
        /* Not recorded yet: CUDA_VISIBLE_DEVICES's index, or
         * NVML's own when it is not set. */
        if (w->ok && !have && w->by_index && !vgpu_cvd.set)
                have = w->by_index(d, h) == NVML_SUCCESS;
        else if (w->ok && !have && w->by_index && d < vgpu_cvd.n && vgpu_cvd.index[d] >= 0)
                have = w->by_index((unsigned) vgpu_cvd.index[d], h) == NVML_SUCCESS;
        return have;
}

/* Reconcile: the bucket pays for the GPU time NVML measured, not for the
 * estimate, so a first estimate that was wrong (a long kernel taken for a
 * short one) is paid back; the estimates' factor follows the measurement.
 * The look's end: what was launched and when, for the next window. */
static void watch_reconcile(unsigned d, struct watch_dev *wd, uint64_t now, unsigned mine, unsigned mine_n) {
        uint64_t window = wd->last_t ? now - wd->last_t : 0;
        uint64_t measured = mine_n ? (uint64_t) ((double) window * mine / mine_n / 100.0) : 0;
        uint64_t charged = atomic_load(&vgpu_share_charged[d]);
        if (wd->last_t && mine_n > 0) {
                int64_t adjust = (int64_t) measured - (int64_t) (charged - wd->last_charged);
                atomic_fetch_sub(&vgpu_reg->share[d].tokens, adjust);
                wd->last_charged = charged;
        } else if (!wd->last_t)
                /* The first look has no window to measure: what was
                 * charged before it stays charged (estimates), and is
                 * not refunded by the next window's reconciliation. */
                wd->last_charged = charged;
        uint64_t adm = atomic_load(&vgpu_share_base[d]);
        if (wd->last_t && (adm > wd->last_admitted || mine_n > 0)) {
                vgpu_share_observe(&vgpu_share_estimate[d], window, adm - wd->last_admitted, measured);
                atomic_store_explicit(&vgpu_share_factor[d], vgpu_share_estimate[d].factor, memory_order_relaxed);
                vgpu_log(VGPU_LOG_DEBUG, "share: device %u window %llu us, launched %llu us estimated, "
                         "measured %llu us (%u%%), factor %.3g", d, (unsigned long long) (window / 1000),
                         (unsigned long long) ((adm - wd->last_admitted) / 1000),
                         (unsigned long long) (measured / 1000), mine_n ? mine / mine_n : 0,
                         vgpu_share_estimate[d].factor);
                wd->corrections++;
                if (adm > wd->last_admitted && mine_n > 0)
                        atomic_store(&vgpu_share_calibrated[d], true);
        }
        wd->calibrating = adm > 0 && wd->corrections < 5;
        wd->last_admitted = adm;
        wd->last_t = now;
}

/* One look at device d; true while its estimates are still being
 * calibrated (the watcher then looks more often). */
static bool watch_device(const struct watch_nvml *w, unsigned d, struct watch_dev *wd, uint64_t now) {
        nvmlDevice_t h = NULL;
        if (!watch_handle(w, d, &h)) {
                atomic_store(&vgpu_reg->share[d].others_until_ns, UINT64_MAX);
                return false;
        }
        unsigned n = WATCH_SAMPLES;
        nvmlReturn_t r = w->util(h, samples, &n, wd->last_seen);
        if (r != NVML_SUCCESS) {
                if (r == 6 /* NVML_ERROR_NOT_FOUND */ || n == 0)
                        n = 0;  /* no samples since last_seen: idle */
                else {
                        atomic_store(&vgpu_reg->share[d].others_until_ns, UINT64_MAX);
                        return false;
                }
        }
        unsigned mine = 0, mine_n = 0;
        bool others = false;
        for (unsigned i = 0; i < n && i < WATCH_SAMPLES; i++) {
                if (samples[i].timeStamp > wd->last_seen)
                        wd->last_seen = samples[i].timeStamp;
                if (samples[i].pid == (unsigned) vgpu_pid) {
                        mine += samples[i].smUtil;
                        mine_n++;
                } else if (samples[i].smUtil > 0 && !pid_in_region(samples[i].pid))
                        others = true;
        }
        if (others)
                atomic_store(&vgpu_reg->share[d].others_until_ns, now + OTHERS_HOLD_NS);
        watch_reconcile(d, wd, now, mine, mine_n);
        return wd->calibrating;
}

static void *watcher(void *arg) {
        struct watch_nvml w;
        struct watch_dev devs[VGPU_MAX_DEVICES] = { 0 };
        watch_nvml_open(&w);
        bool calibrating = true;
        for (unsigned tick = 0;; tick++) {
                /* Until a device's first estimates are corrected, look 5x as often:
                 * a kernel the first estimate gets wrong runs unchecked meanwhile. */
                if (watcher_sleep(calibrating ? VGPU_SHARE_CALIBRATE_MS : VGPU_SHARE_PERIOD_MS))
                        break;
                calibrating = false;
                uint64_t now = vgpu_now_ns();
                if (tick % RECLAIM_EVERY == 0)
                        vgpu_region_reclaim(vgpu_reg, vgpu_pid_alive);
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                        if (vgpu_reg->sm_limit[d] >= 100 || vgpu_reg->sm_limit[d] == 0)
                                continue;
                        /* Only the devices this process launches on: each
                         * process of the container watches its own, and an
                         * NVML query per idle device per period is not free. */
                        if (!atomic_load(&vgpu_share_used[d]))
                                continue;
                        if (watch_device(&w, d, &devs[d], now))
                                calibrating = true;
                }
        }
        return arg;
}

void vgpu_watcher_start(void) {
        bool expect = false;
        if (!atomic_compare_exchange_strong(&vgpu_watcher_started, &expect, true))
                return;
        static bool at_exit;    /* registered once; a forked child inherits it */
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        pthread_mutex_lock(&vgpu_watch_lock);
        if (!at_exit) {
                vgpu_watch_cond_init();
                at_exit = atexit(watcher_stop) == 0;
        }
        vgpu_watch_stop = false;
        vgpu_watch_running = at_exit && pthread_create(&vgpu_watch_thread, &a, watcher, NULL) == 0;
        pthread_mutex_unlock(&vgpu_watch_lock);
        if (!vgpu_watch_running) {
                vgpu_log(VGPU_LOG_ERROR, "cannot start the utilisation watcher: compute share on estimates only");
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                        atomic_store(&vgpu_reg->share[d].others_until_ns, UINT64_MAX);
        }
        pthread_attr_destroy(&a);
}
