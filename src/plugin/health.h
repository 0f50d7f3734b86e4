/* The device plugin's health monitor: a thread that waits on NVML events
 * (nvml/'s event API) and reports device health changes by callback.
 *
 * Upstream parity (k8s-device-plugin v0.20.0 internal/rm/health.go): DP_DISABLE_HEALTHCHECKS /
 * DP_ENABLE_HEALTHCHECKS and the default ignored Xids; a critical Xid that
 * is not ignored turns the affected device unhealthy: the MIG device when
 * the event carries GI/CI ids, else the whole GPU. Unlike upstream, devices
 * recover (docs/device-plugin-health.md):
 *   - a device made unhealthy by an Xid (or a failed event wait) is checked
 *     every recheck_ms with mk_nvml_device_check(); it is reported healthy
 *     again when the check succeeds and no critical event for it came in the
 *     last recheck_ms;
 *   - a GPU found lost (NVML_ERROR_GPU_IS_LOST) stays unhealthy, with all its
 *     MIG devices, until the monitor is restarted.
 * Each change is reported once (no repeats while the state holds). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

struct mk_nvml;
struct mk_snapshot;

#define MK_HEALTH_DEFAULT_RECHECK_MS 30000u
#define MK_HEALTH_WAIT_MS 500u          /* longest NVML event wait; mk_health_stop() joins within it */
#define MK_HEALTH_MAX_XIDS 256u         /* Xids listed in one variable */
#define MK_HEALTH_ENV_MAX 4096u         /* bytes of one variable */

struct mk_health_options {
        bool disabled;                  /* no monitoring at all (DP_DISABLE_HEALTHCHECKS=all|xids) */
        unsigned long long *ignored_xids; /* Xids that never make a device unhealthy */
        size_t n_ignored;
        unsigned recheck_ms;            /* recovery check period; 0: MK_HEALTH_DEFAULT_RECHECK_MS */
};

/* Builds the options from DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS
 * exactly as upstream: comma lists, trimmed, lower-cased; "all" or "xids"
 * in DP_DISABLE_HEALTHCHECKS disables monitoring (only
 * DP_ENABLE_HEALTHCHECKS=all overrides it); numbers there add to the default
 * ignore list (13, 31, 43, 45, 68, 109); numbers in DP_ENABLE_HEALTHCHECKS
 * are removed from it, "all" there empties it; malformed entries are
 * ignored. Also MIGKIT_HEALTH_RECHECK_MS (1..86400000) for recheck_ms, where
 * a bad value is an error naming the variable. Release with
 * mk_health_options_done(). */
int mk_health_options_from_env(struct mk_health_options *o, struct mk_error *e);

/* The same from given values (NULL = unset); for tests and callers that
 * read their environment elsewhere. */
int mk_health_options_parse(const char *disable, const char *enable, const char *recheck_ms,
                            struct mk_health_options *ret, struct mk_error *e);

void mk_health_options_done(struct mk_health_options *o);

/* Whether Xid `xid` counts (is not ignored) under `o`. */
bool mk_health_xid_counts(const struct mk_health_options *o, unsigned long long xid);

struct mk_health_change {
        unsigned gpu;                   /* snapshot GPU index */
        unsigned gi_id, ci_id;          /* UINT32_MAX: the whole GPU / all CIs of the GI */
        bool healthy;
        unsigned long long xid;         /* the Xid that made it unhealthy; 0 otherwise */
        char reason[128];
};

/* Called from the monitor's thread; must not call mk_health_stop(). */
typedef void (*mk_health_fn)(void *userdata, const struct mk_health_change *c);

struct mk_health;

/* Starts the monitor for the GPUs of `s` (which must outlive it; options
 * are copied). When monitoring is disabled by the options, or NVML has no
 * event API / cannot create an event set, it still succeeds, never calls
 * `fn`, and mk_health_disabled_reason() says why: as upstream, devices then
 * stay healthy ("continuing with health checks disabled"). GPUs whose
 * registration fails with an error other than NOT_SUPPORTED are reported
 * unhealthy at once (upstream). Fails only on resource errors. */
int mk_health_start(struct mk_nvml *n, const struct mk_snapshot *s, const struct mk_health_options *o,
                    mk_health_fn fn, void *userdata, struct mk_health **ret, struct mk_error *e);

/* NULL while monitoring, else why not (static or owned by h). */
const char *mk_health_disabled_reason(const struct mk_health *h);

/* Stops the thread (joins within about MK_HEALTH_WAIT_MS, or recheck_ms
 * when smaller) and frees. Accepts NULL, returns NULL. */
struct mk_health *mk_health_stop(struct mk_health *h);
