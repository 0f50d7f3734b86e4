/* libmigkit-vgpu.so: the process's state, logging, its slot in the region,
 * fork and exit (hook.h lists the interposer's files and their order). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/hook.h"

/* ---- process state ---- */

HIDDEN struct vgpu_config vgpu_cfg;
HIDDEN struct vgpu_region *vgpu_reg;
HIDDEN _Atomic int vgpu_own_slot = -1;
HIDDEN pid_t vgpu_pid;
HIDDEN bool vgpu_on;
HIDDEN bool vgpu_any_sm_limit;
HIDDEN pthread_once_t vgpu_init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
HIDDEN struct vgpu_share_est vgpu_share_estimate[VGPU_MAX_DEVICES];
HIDDEN _Atomic double vgpu_share_factor[VGPU_MAX_DEVICES];
HIDDEN _Atomic uint64_t vgpu_share_base[VGPU_MAX_DEVICES];
HIDDEN _Atomic uint64_t vgpu_share_charged[VGPU_MAX_DEVICES];
HIDDEN _Atomic bool vgpu_share_calibrated[VGPU_MAX_DEVICES];
HIDDEN _Atomic bool vgpu_share_used[VGPU_MAX_DEVICES];
HIDDEN _Atomic bool vgpu_watcher_started;
/* The watcher calls NVML until exit() begins: an atexit handler stops and
 * joins it before the libraries' destructors run (_dl_fini is the first
 * exit handler registered, so it runs last); NVML's own destructor must not
 * find it inside a call. Its sleep is a wait on vgpu_watch_cond, so the stop
 * wakes it at once. */
HIDDEN pthread_mutex_t vgpu_watch_lock = PTHREAD_MUTEX_INITIALIZER;
HIDDEN pthread_cond_t vgpu_watch_cond;
HIDDEN bool vgpu_watch_stop, vgpu_watch_running;
HIDDEN pthread_t vgpu_watch_thread;

/* The real entry points: of every hook, and of the functions we call but do not hook. */
#define DEFINE_REAL(name, ret, params, args) HIDDEN _Atomic(name##_fn) real_##name;
VGPU_CUDA_HOOKS(DEFINE_REAL)
VGPU_NVML_HOOKS(DEFINE_REAL)
HIDDEN cuCtxGetDevice_fn real_cuCtxGetDevice;
HIDDEN cuDevicePrimaryCtxGetState_fn real_cuDevicePrimaryCtxGetState;
HIDDEN cuDeviceGetCount_fn real_cuDeviceGetCount;
HIDDEN cuDeviceGet_fn real_cuDeviceGet;
HIDDEN cuDeviceGetUuid_fn real_cuDeviceGetUuid;
HIDDEN cuDeviceGetAttribute_fn real_cuDeviceGetAttribute;
HIDDEN cuDeviceGetMemPool_fn real_cuDeviceGetMemPool;
HIDDEN cuMemPoolGetAttribute_fn real_cuMemPoolGetAttribute;
HIDDEN cuDeviceGetGraphMemAttribute_fn real_cuDeviceGetGraphMemAttribute;
HIDDEN cuGraphGetNodes_fn real_cuGraphGetNodes;
HIDDEN cuGraphNodeGetType_fn real_cuGraphNodeGetType;
HIDDEN cuGraphMemAllocNodeGetParams_fn real_cuGraphMemAllocNodeGetParams;
HIDDEN cuGraphChildGraphNodeGetGraph_fn real_cuGraphChildGraphNodeGetGraph;
HIDDEN cuStreamIsCapturing_fn real_cuStreamIsCapturing;
HIDDEN _Atomic(nvmlDeviceGetUUID_fn) real_nvmlDeviceGetUUID;
HIDDEN _Atomic(nvmlDeviceGetIndex_fn) real_nvmlDeviceGetIndex;

void vgpu_watch_cond_init(void) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&vgpu_watch_cond, &ca);
        pthread_condattr_destroy(&ca);
}

/* ---- logging: a stack buffer and write(2), nothing allocated ---- */

__attribute__((format(printf, 3, 0)))
static void vlogv(int level, char tag, const char *fmt, va_list ap) {
        if (level > vgpu_cfg.log_level)
                return;
        char buf[1024];
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        int n = snprintf(buf, sizeof(buf), "%c%02d%02d %02d:%02d:%02d.%06ld %d migkit-vgpu] ", tag, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, (int) getpid());
        if (n > 0 && (size_t) n < sizeof(buf))
                n += vsnprintf(buf + n, sizeof(buf) - (size_t) n, fmt, ap);
        if (n < 0)
                return;
        if ((size_t) n >= sizeof(buf) - 1)
                n = sizeof(buf) - 2;
        buf[n++] = '\n';
        ssize_t w = write(STDERR_FILENO, buf, (size_t) n);
        (void) w;
}

void vgpu_log(int level, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlogv(level, level <= VGPU_LOG_ERROR ? 'E' : level <= VGPU_LOG_WARNING ? 'W' : 'I', fmt, ap);
        va_end(ap);
}

void vgpu_log_notice(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlogv(VGPU_LOG_WARNING, 'I', fmt, ap);
        va_end(ap);
}

/* ---- the slot, the device, the clock ---- */

int vgpu_current_device(unsigned *ret) {
        CUdevice d;
        if (!real_cuCtxGetDevice || real_cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0)
                return -ENODEV;
        *ret = (unsigned) d;
        return 0;
}

int vgpu_slot_claim(void) {
        pthread_mutex_lock(&slot_lock);
        int s = atomic_load(&vgpu_own_slot);
        if (s < 0) {
                s = vgpu_region_claim(vgpu_reg, vgpu_pid, vgpu_proc_start_time(vgpu_pid), vgpu_pid_alive);
                if (s < 0)
                        vgpu_log(VGPU_LOG_ERROR, "all %d process slots of region '%s' are held by live processes",
                                 VGPU_MAX_SLOTS, vgpu_cfg.region_path);
                else
                        atomic_store(&vgpu_own_slot, s);
        }
        pthread_mutex_unlock(&slot_lock);
        return s;
}

void vgpu_uncharge(int s, unsigned dev, uint64_t size) {
        if (vgpu_region_uncharge(vgpu_reg, s, dev, size) < 0)
                vgpu_log(VGPU_LOG_ERROR, "accounting: uncharging %llu bytes on device %u went below zero (clamped)",
                         (unsigned long long) size, dev);
}

uint64_t vgpu_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* ---- fork and exit ---- */

void vgpu_atfork_child(void) {
        vgpu_track_atfork_child();
        /* The child charges into a slot of its own, claimed on first use. */
        atomic_store(&vgpu_own_slot, -1);
        vgpu_pid = getpid();
        pthread_mutex_init(&slot_lock, NULL);
        /* The parent's watcher did not come along; the child starts its own. */
        pthread_mutex_init(&vgpu_watch_lock, NULL);
        vgpu_watch_cond_init();
        vgpu_watch_running = vgpu_watch_stop = false;
        atomic_store(&vgpu_watcher_started, false);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                atomic_store(&vgpu_share_base[d], 0);
                atomic_store(&vgpu_share_charged[d], 0);
                atomic_store(&vgpu_share_calibrated[d], false);
                atomic_store(&vgpu_share_used[d], false);
        }
}

__attribute__((destructor)) static void vgpu_fini(void) {
        int s = atomic_load(&vgpu_own_slot);
        if (vgpu_reg && s >= 0 && vgpu_pid == getpid())
                vgpu_region_release(vgpu_reg, s);
}
