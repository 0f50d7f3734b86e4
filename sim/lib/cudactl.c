/* Control API over the live region of the CUDA driver simulator (mksim.h). */
#include "lib/live.h"
#include "lib/state.h"
#include "lib/util.h"
#include "mksim.h"

int mksim_cuda_processes(unsigned window_ms, struct mksim_cuda_process **ret, size_t *ret_n) {
        _cleanup_free_ char *path = NULL;
        struct sim_live *l;
        struct mksim_cuda_process *out = NULL;
        size_t n = 0;

        sim_error_clear();
        path = strdup(mksim_state_path());
        if (!path)
                return sim_error(-ENOMEM, "out of memory");
        int r = sim_live_open(path, &l);
        if (r < 0)
                return r;
        out = calloc(SIM_LIVE_SLOTS, sizeof(*out));
        if (!out)
                return sim_error(-ENOMEM, "out of memory");
        uint64_t now = sim_live_now_ns();
        uint64_t from = sim_live_window_from(now, (uint64_t) (window_ms ? window_ms : 1000) * 1000000ULL);
        for (unsigned i = 0; i < SIM_LIVE_SLOTS; i++) {
                struct sim_live_slot *s = &l->slot[i];
                if (!sim_live_slot_live(l, s))
                        continue;
                uint64_t busy = sim_live_busy(s, from, now);
                out[n++] = (struct mksim_cuda_process) {
                        .pid = sim_live_pid(atomic_load(&s->owner)),
                        .gpu = s->gpu,
                        .gi = s->gi,
                        .ci = s->ci,
                        .used_bytes = atomic_load(&s->used_bytes),
                        .sm_percent = sim_live_percent(busy, from, now),
                };
        }
        if (n == 0) {
                free(out);
                out = NULL;
        }
        *ret = out;
        *ret_n = n;
        return 0;
}
