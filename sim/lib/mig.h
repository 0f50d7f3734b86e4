/* MIG layout rules of the simulator: which GPU and compute instances fit,
 * where the driver places them, how many more fit, and what a GPU reset or a
 * reboot does. Works on struct sim_state; returns -errno (-EINVAL: invalid
 * placement, -ENOSPC: no room, -EBUSY: in use). No I/O. */
#pragma once

#include "lib/catalog.h"
#include "lib/state.h"

/* Whether a GI of profile p may be created at `start` now. */
int sim_gi_check(const struct sim_gpu *g, const struct sim_gi_profile *p, unsigned start, unsigned size);
/* The placement the driver chooses (see mig.c), -ENOSPC when none. */
int sim_gi_pick_start(const struct sim_gpu *g, const struct sim_gi_profile *p, unsigned *ret_start);
/* How many more GIs of profile p fit, by exhaustive search. */
unsigned sim_gi_remaining(const struct sim_gpu *g, const struct sim_gi_profile *p);
/* Creates the GI (checked by the caller) and returns it. */
struct sim_gi *sim_gi_create(struct sim_state *st, struct sim_gpu *g, const struct sim_gi_profile *p,
                             unsigned start);
/* Destroys a GI: -EBUSY while it has compute instances or processes. */
int sim_gi_destroy(struct sim_gpu *g, unsigned gi_id);

/* Valid CI placement starts of cp inside a GI of profile p, ascending. */
unsigned sim_ci_placements(const struct sim_gi_profile *p, const struct sim_ci_profile *cp, unsigned *starts,
                           unsigned max);
int sim_ci_check(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                 unsigned start, unsigned size);
int sim_ci_pick_start(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                      unsigned *ret_start);
unsigned sim_ci_remaining(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp);
struct sim_ci *sim_ci_create(struct sim_state *st, const struct sim_gpu *g, struct sim_gi *gi,
                             const struct sim_ci_profile *cp, unsigned start);
/* -EBUSY when a process runs on it. */
int sim_ci_destroy(struct sim_gpu *g, struct sim_gi *gi, unsigned ci_id);

/* Processes. */
bool sim_gpu_has_processes(const struct sim_gpu *g);
bool sim_gi_has_processes(const struct sim_gpu *g, unsigned gi_id);
bool sim_ci_has_processes(const struct sim_gpu *g, unsigned gi_id, unsigned ci_id);
unsigned long long sim_used_mib(const struct sim_gpu *g, unsigned gi_id); /* SIM_ID_NONE: all */

/* MIG devices of a GPU in NVML index order: compute instances by (GI id, CI id). */
unsigned sim_mig_device_count(const struct sim_gpu *g);
bool sim_mig_device_at(struct sim_gpu *g, unsigned index, struct sim_gi **ret_gi, struct sim_ci **ret_ci);
unsigned sim_mig_device_index(const struct sim_gpu *g, unsigned gi_id, unsigned ci_id);

/* A GPU reset: -EBUSY when processes run; else the pending MIG mode applies
 * and every instance is destroyed. */
int sim_gpu_reset(struct sim_state *st, unsigned index);
/* A reboot: processes, instances and queued events are gone; Ampere applies
 * the pending mode, Hopper and later come back with MIG disabled. */
void sim_machine_reboot(struct sim_state *st);
