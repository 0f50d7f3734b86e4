/* The unified pool's placement (issue 13): a pod on a node whose GPUs are
 * shared (operating mode hami-core) or mixed, as soft slices of shared
 * GPUs and/or MIG instances, per the pod's nvidia.com/vgpu-mode: "mig"
 * MIG only, "hami-core" soft slices only, none (or both named) the mode
 * chosen by plan/fit-soft.h's mk_fit_choose_mode() for the first GPU
 * container, which every further container of the pod then uses. The
 * node's view is rebuilt per fit into the request's scratch (place-mig.h):
 * the MIG GPUs as place-mig's slow path sees them, the shared GPUs with
 * the soft slices of the inventory and of the cache's reservations (a
 * pending one the agent has not published yet counts once: by pod uid and
 * container). The reservation's devices say which mode was chosen. Same
 * signature as mk_sched_place_mig (decide.h's seam). */
#pragma once

#include <stddef.h>

#include "base/macro.h"
#include "sched/place-mig.h"

int mk_sched_place_pool(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                        char *reason, size_t size) _nonnull_(1, 2, 3);
