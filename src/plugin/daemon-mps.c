/* The MPS control daemons the device plugin runs (plugin/mps.h has the
 * plan): started before anything registers, checked every period, their
 * resource's devices Unhealthy while one does not answer. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "plugin/daemon-internal.h"
#include "plugin/daemon.h"
#include "plugin/mps.h"
#include "plugin/resources.h"

#define MK_DP_MPS_CHECK_MS 5000 /* MIGKIT_MPS_CHECK_MS overrides (tests) */

/* Quits every daemon we started, GPUs back to the default compute mode,
 * <root>/.ready removed. */
void dp_mps_stop(struct dp_daemon *d) {
        if (!d->mps)
                return;
        _cleanup_free_ char *ready = NULL;
        if (mk_mps_path(dp_mps_root(d), NULL, MK_MPS_READY_FILE, &ready) >= 0)
                (void) unlink(ready);
        for (size_t i = 0; i < d->mps->n; i++) {
                struct mk_error e = {0};
                if (mk_mps_stop(d->nvml, dp_mps_root(d), &d->mps->daemons[i], &e) < 0)
                        log_warning("Stopping the MPS control daemon of '%s': %s, ignoring",
                                    d->mps->daemons[i].resource, e.msg);
        }
        d->mps = mk_mps_plan_free(d->mps);
        free(d->mps_down);
        d->mps_down = NULL;
}

/* The daemons the resources need, started and configured before anything
 * registers (upstream's plugin waits for them instead: here the plugin runs
 * them, docs/device-plugin.md). A plan upstream rejects fails the start. */
int dp_mps_start(struct dp_daemon *d, struct mk_error *e) {
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *plan = NULL;
        if (d->o->dynamic_mig)
                return 0; /* sharing does not apply */
        int r = mk_mps_plan_build(d->snapshot, d->resources, d->dp.config, &plan, e);
        if (r < 0 || plan->n == 0)
                return r;
        d->mps_down = calloc(plan->n, sizeof(*d->mps_down));
        if (!d->mps_down)
                return mk_error_set(e, -ENOMEM, "out of memory");
        d->mps = TAKE_PTR(plan);
        for (size_t i = 0; i < d->mps->n; i++) {
                const struct mk_mps_daemon *m = &d->mps->daemons[i];
                r = mk_mps_start(d->nvml, dp_mps_root(d), m, e);
                if (r < 0)
                        return r;
                log_info("Started the MPS control daemon of '%s' (%zu GPU(s), active thread percentage %u) in '%s'",
                         m->resource, m->n_gpus, m->thread_percentage, dp_mps_root(d));
        }
        _cleanup_free_ char *ready = NULL;
        if (mk_mps_path(dp_mps_root(d), NULL, MK_MPS_READY_FILE, &ready) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        d->mps_check_at_ms = dp_now_ms();
        return mk_write_file_atomic(ready, "", 0, 0644, e);
}

/* Marks every device of daemon i's resource, re-sends its list. */
static void mps_mark(struct dp_daemon *d, size_t i, bool healthy) {
        const struct mk_mps_daemon *m = &d->mps->daemons[i];
        pthread_mutex_lock(&d->lock);
        for (size_t k = 0; k < d->resources->n; k++) {
                struct mk_dp_resource *res = &d->resources->r[k];
                if (!streq(res->name, m->resource))
                        continue;
                for (size_t j = 0; j < res->n_devices; j++)
                        res->devices[j].healthy = healthy;
        }
        for (size_t k = 0; k < d->n_servers; k++)
                if (streq(d->servers[k].name, m->resource) && d->servers[k].grpc)
                        (void) dp_publish(&d->servers[k]);
        pthread_mutex_unlock(&d->lock);
}

/* Every check period: a daemon that does not answer has its devices marked
 * Unhealthy and is started again; once it answers again they are Healthy. */
void dp_mps_check(struct dp_daemon *d) {
        if (!d->mps || dp_now_ms() < d->mps_check_at_ms)
                return;
        for (size_t i = 0; i < d->mps->n; i++) {
                const struct mk_mps_daemon *m = &d->mps->daemons[i];
                struct mk_error e = {0};
                int r = mk_mps_check(dp_mps_root(d), m, &e);
                if (r >= 0 && d->mps_down[i]) {
                        d->mps_down[i] = false;
                        mps_mark(d, i, true);
                        log_info("The MPS control daemon of '%s' answers again: its devices are Healthy", m->resource);
                }
                if (r >= 0)
                        continue;
                if (!d->mps_down[i]) {
                        d->mps_down[i] = true;
                        mps_mark(d, i, false);
                        log_warning("The MPS control daemon of '%s' does not answer (%s): its devices are Unhealthy, "
                                    "restarting it",
                                    m->resource, e.msg);
                }
                mk_error_clear(&e);
                if (mk_mps_start(d->nvml, dp_mps_root(d), m, &e) < 0)
                        log_warning("Restarting the MPS control daemon of '%s' failed: %s; retrying", m->resource,
                                    e.msg);
        }
        const char *env = secure_getenv("MIGKIT_MPS_CHECK_MS");
        unsigned ms = MK_DP_MPS_CHECK_MS;
        if (env && mk_parse_u32(env, &ms) < 0)
                ms = MK_DP_MPS_CHECK_MS;
        d->mps_check_at_ms = dp_now_ms() + ms;
}
