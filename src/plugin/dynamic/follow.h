/* Reservations follow what the dynamic MIG device plugin really handed
 * out (docs/device-plugin.md "Dynamic MIG mode", docs/scheduler.md "How
 * the device plugin's Allocate finds its reservation"). The follower
 * records each dynamic Allocate (plugin/dynamic/handout.h) in a state file and, on
 * a thread of its own, polls kubelet's PodResources List (plugin/dynamic/podres.h)
 * every interval while an Allocate waits to be seen there; it then patches
 * the reservations of pods that got another pod's devices of the same
 * shape (migkit.io/mig-handed first, then migkit.io/mig-reservation,
 * migkit.io/mig-devices and migkit.io/mig-allocated, each with the pod's
 * uid and resourceVersion as preconditions), one log line per pod moved.
 * Without the PodResources socket (kubelet before 1.20, or the API off) it
 * warns once and changes nothing: Allocate works as before. */
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"

struct mk_kube;

#define MK_DP_FOLLOW_INTERVAL_MS 2000          /* List while an Allocate waits to be seen */
#define MK_DP_FOLLOW_ROUNDS 4                  /* decide + patch rounds per List (handed, then reservations) */

struct mk_dp_follower_options {
        struct mk_kube *kube;           /* borrowed */
        const char *node;
        const char *socket;             /* PodResources socket; NULL: MK_DP_PODRES_SOCKET */
        const char *state_path;         /* the handouts file */
        unsigned interval_ms;           /* 0: MK_DP_FOLLOW_INTERVAL_MS */
        pthread_mutex_t *serialize;     /* held by the caller around mk_dp_follower_record(), taken by the
                                         * thread around each round: one Allocate or round at a time */
        const char *resource;           /* the resource whose ids are recorded */
};

struct mk_dp_follower;

/* Loads the state file (a malformed one is logged and replaced, never
 * fatal) and starts the thread, which runs a round at once when a handout
 * waits. The strings of o must outlive the follower. -ENOMEM, or the
 * error of pthread_create. */
int mk_dp_follower_start(const struct mk_dp_follower_options *o, struct mk_dp_follower **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

/* Records an Allocate answered with `assumed`'s devices (ids as
 * mk_dp_handouts_add) and saves the state file; the caller holds
 * o->serialize. Failures are logged (the Allocate stands). Wakes the
 * thread. */
void mk_dp_follower_record(struct mk_dp_follower *f, const char *const *const *ids, const size_t *n_ids,
                           size_t n_containers, const struct mk_claim *assumed) _nonnull_(1, 2, 3, 5);

/* Stops and joins the thread (after the call in flight, bounded by the
 * clients' timeouts), frees everything. NULL ok; returns NULL. */
struct mk_dp_follower *mk_dp_follower_stop(struct mk_dp_follower *f);
