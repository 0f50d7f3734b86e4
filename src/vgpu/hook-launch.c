/* libmigkit-vgpu.so: compute share at the launches, and cuInit, after which
 * the devices' facts are recorded and the watcher starts (hook.h lists the
 * interposer's files and their order; the watcher is hook-watcher.c). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "vgpu/graph.h"
#include "vgpu/hook.h"

static bool share_applies(unsigned dev, uint64_t now) {
        unsigned pct = vgpu_reg->sm_limit[dev];
        if (pct >= 100 || pct == 0)
                return false;
        switch (vgpu_reg->policy) {
        case VGPU_POLICY_DISABLE:
                return false;
        case VGPU_POLICY_FORCE:
                return true;
        default:
                /* A lone container bursts; the watcher says when others run. */
                return now < atomic_load(&vgpu_reg->share[dev].others_until_ns);
        }
}

/* Admits one launch: blocks until its turn. blocks == 0: a graph. */
static void admit(uint64_t blocks, uint64_t threads) {
        unsigned dev;
        if (vgpu_current_device(&dev) < 0 || dev >= VGPU_MAX_DEVICES)
                return;
        if (!atomic_load(&vgpu_watcher_started))
                vgpu_watcher_start();
        if (!atomic_load_explicit(&vgpu_share_used[dev], memory_order_relaxed))
                atomic_store(&vgpu_share_used[dev], true);
        uint64_t now = vgpu_now_ns();
        if (!share_applies(dev, now))
                return;
        uint64_t base = blocks ? vgpu_share_kernel_cost(blocks, threads, vgpu_full_threads[dev]) : VGPU_SHARE_GRAPH_COST_NS;
        uint64_t cost = (uint64_t) ((double) base * atomic_load_explicit(&vgpu_share_factor[dev], memory_order_relaxed));
        if (!atomic_load_explicit(&vgpu_share_calibrated[dev], memory_order_relaxed) && cost < VGPU_SHARE_FIRST_COST_NS)
                cost = VGPU_SHARE_FIRST_COST_NS;
        atomic_fetch_add(&vgpu_share_base[dev], base);
        atomic_fetch_add(&vgpu_share_charged[dev], cost);
        uint64_t wait = vgpu_share_admit(&vgpu_reg->share[dev], vgpu_reg->sm_limit[dev], cost, now);
        int s = vgpu_slot();
        if (s >= 0)
                atomic_fetch_add(&vgpu_reg->slots[s].launches, 1);
        if (wait == 0)
                return;
        struct timespec ts = { (time_t) (wait / 1000000000ull), (long) (wait % 1000000000ull) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        if (s >= 0)
                atomic_fetch_add(&vgpu_reg->slots[s].throttled_ns, wait);
}

/* A launch hook: admit (when a compute share is set and `when` holds), then
 * the real launch. The admit arguments are (blocks, threads); (0, 0) is a graph. */
#define LAUNCH_HOOK(name, params, args, when, ...)                                                          \
        EXPORT CUresult name params {                                                                        \
                vgpu_init();                                                                                      \
                REAL(name);                                                                                  \
                if (vgpu_on && vgpu_any_sm_limit && (when))                                                        \
                        admit(__VA_ARGS__);                                                                  \
                return real args;                                                                            \
        }
#define GRID(gx, gy, gz, bx, by, bz) (uint64_t) (gx) * (gy) * (gz), (uint64_t) (bx) * (by) * (bz)
#define EX_PARAMS (const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
#define EX_ARGS (c, f, params, extra)
#define EX_GRID GRID(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ)

LAUNCH_HOOK(cuLaunchKernel, LAUNCH_PARAMS, LAUNCH_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchKernel_ptsz, LAUNCH_PARAMS, LAUNCH_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchKernelEx, EX_PARAMS, EX_ARGS, c != NULL, EX_GRID)
LAUNCH_HOOK(cuLaunchKernelEx_ptsz, EX_PARAMS, EX_ARGS, c != NULL, EX_GRID)
LAUNCH_HOOK(cuLaunchCooperativeKernel, COOP_PARAMS, COOP_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, COOP_PARAMS, COOP_ARGS, true, GRID(gx, gy, gz, bx, by, bz))
/* A graph: the compute share, then its memory (hook-graph.c). */
#define GRAPH_LAUNCH_HOOK(name)                                                                              \
        EXPORT CUresult name(CUgraphExec g, CUstream st) {                                                   \
                vgpu_init();                                                                                 \
                REAL(name);                                                                                  \
                if (vgpu_on && vgpu_any_sm_limit)                                                            \
                        admit(0, 0);                                                                         \
                return vgpu_graph_run(g, st, real);                                                          \
        }
GRAPH_LAUNCH_HOOK(cuGraphLaunch)
GRAPH_LAUNCH_HOOK(cuGraphLaunch_ptsz)

EXPORT CUresult cuInit(unsigned int flags) {
        vgpu_init();
        REAL(cuInit);
        CUresult r = real(flags);
        if (r == CUDA_SUCCESS) {
                static pthread_once_t once = PTHREAD_ONCE_INIT;
                pthread_once(&once, vgpu_devices_record);
                if (vgpu_on && vgpu_any_sm_limit)
                        vgpu_watcher_start();
        }
        return r;
}

VGPU_HOOK_TABLE(launch, VGPU_LAUNCH_HOOKS(VGPU_HOOK_ENTRY));
