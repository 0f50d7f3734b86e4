/* The simulated machine's host tree: the files a program reads beside NVML,
 * made for the simulated GPUs under "<state file>.host/":
 *   sys/bus/pci/devices/<0000:bb:dd.f>/{vendor,device,subsystem_vendor,
 *     subsystem_device,class,numa_node,config}
 *     and an empty `reset` (the function can be reset)
 *   proc/driver/nvidia-caps/mig-minors, proc/modules (the nvidia module loaded)
 * so a program pointed there (migkit: MIGKIT_SYSFS_ROOT / MIGKIT_PROC_ROOT,
 * which `migkit --simulate` sets) runs against the simulator without fixture
 * files. The content depends on the GPUs only (not on the MIG layout: the
 * driver lists every possible capability minor), so it is written when a
 * machine is created and when a state file without a tree is loaded. */
#pragma once

#include <stdbool.h>

struct sim_state;

#define SIM_CAPS_PER_GI 9u   /* gi<g>/access, then ci0..ci7 */
#define SIM_CAPS_GIS 15u     /* gi0..gi14 per GPU */

/* "<state_path>.host", malloc'ed; NULL on ENOMEM. */
char *sim_host_root(const char *state_path);

/* Writes the tree of `st` (built beside it, then renamed into place). With
 * `replace` an existing tree is replaced (a new machine); without, an
 * existing tree is kept. 0 or a negative errno (message via sim_error). */
int sim_host_write(const char *state_path, const struct sim_state *st, bool replace);

/* The capability minor of GPU minor `gpu`, GI `gi`, CI `ci` (SIM_ID_NONE:
 * the GI's access), as the NVIDIA driver numbers /dev/nvidia-caps: config 1,
 * monitor 2, then SIM_CAPS_GIS GIs of SIM_CAPS_PER_GI minors per GPU. */
unsigned sim_host_cap_minor(unsigned gpu, unsigned gi, unsigned ci);
