/* See share.h. */
#include <math.h>
#include <stdatomic.h>

#include "vgpu/share.h"

uint64_t vgpu_share_kernel_cost(uint64_t blocks, uint64_t threads_per_block, uint64_t full_threads) {
        if (full_threads == 0)
                full_threads = 108 * 2048;  /* an A100, when the device does not say */
        if (threads_per_block == 0)
                threads_per_block = 1;
        long double waves = (long double) blocks * (long double) threads_per_block / (long double) full_threads;
        long double ns = waves * 10000.0L;
        if (ns < 1000.0L)
                ns = 1000.0L;  /* a launch costs at least 1 us of GPU time */
        if (ns > 1e15L)
                ns = 1e15L;
        return (uint64_t) ns;
}

uint64_t vgpu_share_admit(struct vgpu_share_dev *s, unsigned pct, uint64_t cost_ns, uint64_t now_ns) {
        if (pct == 0 || pct >= 100)
                return 0;
        int64_t burst = (int64_t) VGPU_SHARE_BURST_MS * 1000000 * pct / 100;
        /* Refill: the process that moves last_ns forward adds the interval. */
        uint64_t last = atomic_load(&s->last_ns);
        if (last == 0) {
                if (atomic_compare_exchange_strong(&s->last_ns, &last, now_ns))
                        atomic_store(&s->tokens, burst);
        } else if (now_ns > last && atomic_compare_exchange_strong(&s->last_ns, &last, now_ns)) {
                /* The refill stops at the burst; tokens above it (a refund of
                 * overestimated launches, share.h) are kept, not cut. */
                uint64_t dt = now_ns - last;
                int64_t add = dt > 100ull * 1000000000ull ? burst : (int64_t) (dt * pct / 100);
                int64_t t = atomic_load(&s->tokens);
                if (t < burst)
                        atomic_fetch_add(&s->tokens, add < burst - t ? add : burst - t);
        }
        if (cost_ns > (uint64_t) INT64_MAX / 4)
                cost_ns = (uint64_t) INT64_MAX / 4;
        int64_t before = atomic_fetch_sub(&s->tokens, (int64_t) cost_ns);
        atomic_fetch_add(&s->admitted_ns, cost_ns);
        if (before > 0)
                return 0;
        /* In debt before us: wait until the debt up to our turn is repaid. */
        long double wait = (long double) (-before) * 100.0L / pct;
        if (wait > (long double) VGPU_SHARE_MAX_WAIT_NS)
                wait = (long double) VGPU_SHARE_MAX_WAIT_NS;
        return (uint64_t) wait;
}

void vgpu_share_observe(struct vgpu_share_est *e, uint64_t window_ns, uint64_t base_ns, uint64_t measured_ns) {
        double decay = exp(-(double) window_ns / VGPU_SHARE_HORIZON_NS);
        e->base = e->base * decay + (double) base_ns;
        e->measured = e->measured * decay + (double) measured_ns;
        if (!(e->factor > 0))
                e->factor = 1.0;
        /* Too little launched lately to say anything: keep the factor. */
        if (e->base < 1000.0)
                return;
        double f = e->measured / e->base;
        if (f < VGPU_SHARE_FACTOR_MIN)
                f = VGPU_SHARE_FACTOR_MIN;
        if (f > VGPU_SHARE_FACTOR_MAX)
                f = VGPU_SHARE_FACTOR_MAX;
        e->factor = f;
}
