/* The soft slice monitor (docs/vgpu.md "Monitor"): Prometheus metrics of
 * every container directory under the vgpu root (dirs.h), read from the
 * region file libmigkit-vgpu.so keeps there (vgpu/region.h, read into a
 * copy: the monitor never writes a region, and a container truncating its
 * file cannot fault the reader) and the identity file the
 * device plugin wrote beside it. Metric names are HAMi's vGPU monitor's
 * where HAMi has one (cmd/vGPUmonitor/metrics.go, v2.x "legacy" names):
 *   vGPU_device_memory_usage_in_bytes, vGPU_device_memory_limit_in_bytes,
 *   Device_memory_desc_of_container
 * with HAMi's labels podnamespace, podname, ctrname, vdeviceid, deviceuuid
 * (plus poduid); and migkit's own for what HAMi does not export:
 *   migkit_vgpu_device_core_limit_percent, migkit_vgpu_device_gpu_seconds_total,
 *   migkit_vgpu_container_processes, migkit_vgpu_regions_unreadable.
 * `migkit scheduler node --metrics-address` serves them (sched/server.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"

#define MK_VGPU_MAX_METRICS_BYTES (64u << 20)   /* one /metrics answer */

/* Appends the Prometheus text of every container under <root>/containers
 * to b. A container without a region file yet (no CUDA process ran) is
 * left out; a region file of another format or size, or one that cannot
 * be read, is counted in migkit_vgpu_regions_unreadable and skipped.
 * Labels come from the identity file (empty when it is missing). -E2BIG
 * over b's cap, -errno when containers/ exists but cannot be read. */
int mk_vgpu_metrics(const char *root, struct mk_buf *b, struct mk_error *e) _nonnull_(1, 2) _wur_;
