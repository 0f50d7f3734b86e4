/* The compute share: admission of launches before the fact.
 *
 * Each device's share is a token bucket in nanoseconds of whole-GPU time,
 * kept in the region so all processes of the container draw from it. It
 * fills at limit% of wall time up to a burst of VGPU_SHARE_BURST_MS of
 * that rate. A launch costs its estimated GPU time (share_estimate, scaled
 * by this process's correction factor) and is admitted at once while the
 * bucket is positive; it takes the bucket into debt, and a launch that
 * finds debt first waits until its own share of the debt is repaid. A
 * synchronous kernel, a graph or a long kernel all pay before they run, so
 * the limit holds for each (HAMi-core only slows the next launches of
 * asynchronous streams of cuLaunchKernel).
 *
 * The estimate is corrected by measurement: every VGPU_SHARE_PERIOD_MS
 * the watcher compares the GPU time NVML says this process used
 * (nvmlDeviceGetProcessUtilization smUtil x window) with the base
 * estimates of what it launched (vgpu_share_observe). */
#pragma once

#include <stdint.h>

#include "vgpu/region.h"

#define VGPU_SHARE_BURST_MS 20
#define VGPU_SHARE_PERIOD_MS 100
#define VGPU_SHARE_CALIBRATE_MS 20     /* the watcher period until 5 corrections */
#define VGPU_SHARE_MAX_WAIT_NS 2000000000ll  /* one wait is at most 2 s (then it re-checks) */

/* The base estimate of a launch in GPU nanoseconds before correction:
 * proportional to the threads launched, 10 us for a grid that fills a GPU
 * of full_threads resident threads once; a graph is 50 us. */
uint64_t vgpu_share_kernel_cost(uint64_t blocks, uint64_t threads_per_block, uint64_t full_threads);
#define VGPU_SHARE_GRAPH_COST_NS 50000ull
/* Until a process's first measurement on a device, a launch costs at least
 * this: a long kernel taken for a short one cannot flood the GPU before the
 * first correction, and what is overcharged is refunded by reconciliation. */
#define VGPU_SHARE_FIRST_COST_NS 1000000ull

/* Takes cost_ns from the bucket of a device limited to pct percent at time
 * now_ns. Returns how long the caller must wait before launching (0: go). */
uint64_t vgpu_share_admit(struct vgpu_share_dev *s, unsigned pct, uint64_t cost_ns, uint64_t now_ns);

/* The correction of one process on one device: GPU time measured over GPU
 * time estimated (base estimates, before correction), both as sums that
 * decay exponentially over VGPU_SHARE_HORIZON_NS, so that work admitted in
 * one window and run in the next, and utilisation rounded to whole
 * percents, even out. The factor is the ratio of the sums (not a product
 * of corrections: it cannot run away), kept in
 * [VGPU_SHARE_FACTOR_MIN, VGPU_SHARE_FACTOR_MAX]. */
#define VGPU_SHARE_HORIZON_NS 1e9
#define VGPU_SHARE_FACTOR_MIN 1e-3
#define VGPU_SHARE_FACTOR_MAX 1e7   /* a 1 us first estimate of a 10 s kernel */
struct vgpu_share_est {
        double base, measured;  /* decayed sums, ns */
        double factor;          /* 1.0 until measured */
};
/* One watcher period of window_ns: base_ns estimated, measured_ns measured. */
void vgpu_share_observe(struct vgpu_share_est *e, uint64_t window_ns, uint64_t base_ns, uint64_t measured_ns);
