/* What each GPU should be, computed in one place: the selected config's
 * entries matched against the GPUs read (by NVML or PCI), then one plan per
 * GPU. Pure: no I/O. Used by apply, assert, plan, the node service and the
 * manager (through engine.h), and tested as data. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "mig/gpu.h"
#include "mig/layout.h"
#include "plan/plan.h"
#include "spec/config.h"

/* What one GPU gets. */
struct mk_desired {
        bool matched;                 /* some entry selects this GPU */
        bool enabled;
        struct mk_layout layout;
        const struct mk_config_entry *entry;
};

/* Per-GPU desired state from the selected config: entries in file order,
 * GPUs in index order, later entries win. A listed index beyond the node's
 * GPUs is an error at its file:line:column; a non-MIG-capable GPU selected
 * by `all` or a filter is left alone, named explicitly with mig-enabled
 * true it is an error. `ret` is an array of s->n_gpus. */
int mk_engine_desired(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                      struct mk_desired **ret, struct mk_error *e);
void mk_desired_free(struct mk_desired *d, size_t n);

/* Upstream's assert fails when the selected config selects no GPU of a node
 * that has some (mig-parted's assert counts the GPUs it matched): -ENODEV
 * with "MIG config 'x' selects no GPU of this node: <each entry's
 * device-filter and devices, at file:line:column>; GPUs present: <index
 * ranges, names and PCI ids>". 0 when some entry selects a GPU (MIG-capable
 * or not), or when the node has none. */
int mk_engine_check_selects(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                            struct mk_error *e);

/* Plans of every matched GPU; on the first GPU whose target cannot be
 * built, an error naming it (nothing is touched). `*ret` has s->n_gpus
 * entries (unmatched GPUs get empty plans with gpu_index set). With
 * `modes_only` the layouts are not planned (a snapshot without instances,
 * read through PCI): each plan is the mode change alone. */
int mk_engine_plan_all(const struct mk_snapshot *s, const struct mk_desired *d, bool modes_only,
                       struct mk_gpu_plan **ret, struct mk_error *e);
void mk_gpu_plans_free(struct mk_gpu_plan *p, size_t n);

/* Does any plan change something (a mode, or with !mode_only a layout)? */
bool mk_engine_plans_change(const struct mk_gpu_plan *p, size_t n, bool mode_only);

/* Snapshot s, config c, selected nc -> desired and plans, both or neither. */
int mk_engine_plan_snapshot(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                            bool modes_only, struct mk_desired **ret_d, struct mk_gpu_plan **ret_p,
                            struct mk_error *e);
