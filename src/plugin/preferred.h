/* GetPreferredAllocation for one container (k8s-device-plugin v0.20.0
 * k8s-device-plugin v0.20.0 internal/plugin/server.go, iktos/k8s-gpu-sharing-plugin). Pure: reads only the snapshot's interconnect matrices. */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/resources.h"

/* Chooses `size` ids of r from `available`, every id of `must_include`
 * first. Shared devices ("::k" ids): least-shared-first (iktos/k8s-gpu-sharing-plugin): each slot
 * goes to the physical device not yet used by this request with the most
 * available replicas (ties: smallest base id), then to used ones; within a
 * device its smallest available replica. Whole GPUs: the set with the best
 * interconnect: most NVLinks summed over its pairs (s->nvlinks), then the
 * closest common PCIe ancestors (s->pcie_level), then lowest indices;
 * exact search up to a node budget, then greedy growth from every seed, so
 * 8 and 16 GPU nodes stay fast. MIG devices: packed on the fewest parent
 * GPUs, preferring parents already holding must_include devices.
 * Ids are returned in ascending order (must_include ones included).
 * must_include ids missing from `available` are taken as available (the
 * kubelet sends them in both). -EINVAL when size is 0, there are fewer than
 * size ids, an id is unknown to r or listed twice in one list, or
 * must_include has more than size ids. *ret_ids (NULL-terminated, strv_free) only on success. */
int mk_dp_preferred(const struct mk_snapshot *s, const struct mk_dp_resource *r, const char *const *available,
                    size_t n_available, const char *const *must_include, size_t n_must, unsigned size,
                    char ***ret_ids, struct mk_error *e) _nonnull_(2, 8) _wur_;
