#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/macro.h"
#include "engine/desired.h"

void mk_desired_free(struct mk_desired *d, size_t n) {
        if (!d)
                return;
        for (size_t i = 0; i < n; i++)
                mk_layout_done(&d[i].layout);
        free(d);
}

void mk_gpu_plans_free(struct mk_gpu_plan *p, size_t n) {
        if (!p)
                return;
        for (size_t i = 0; i < n; i++)
                mk_gpu_plan_done(&p[i]);
        free(p);
}

static int out_of_range(const struct mk_config *c, const struct mk_named_config *nc, size_t k, size_t j,
                        size_t n_gpus, struct mk_error *e) {
        const struct mk_config_entry *x = &nc->entries[k];
        struct mk_pos p = x->device_pos ? x->device_pos[j] : x->devices_pos;
        int r = mk_error_set_at(e, -EINVAL, c->file, p.line, p.column,
                                "devices: index %u is out of range: this node has %zu GPU%s", x->devices[j], n_gpus,
                                n_gpus == 1 ? "" : "s");
        if (e)
                snprintf(e->field, sizeof(e->field), "mig-configs.%s[%zu].devices", nc->name, k);
        return r;
}

int mk_engine_desired(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                      struct mk_desired **ret, struct mk_error *e) {
        struct mk_desired *d = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*d));
        if (!d)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t k = 0; k < nc->n_entries; k++) {
                const struct mk_config_entry *x = &nc->entries[k];
                for (size_t j = 0; !x->all_devices && j < x->n_devices; j++)
                        if (x->devices[j] >= s->n_gpus) {
                                mk_desired_free(d, s->n_gpus);
                                return out_of_range(c, nc, k, j, s->n_gpus, e);
                        }
                for (size_t i = 0; i < s->n_gpus; i++) {
                        const struct mk_gpu *g = &s->gpus[i];
                        if (!mk_config_entry_matches(x, g->index, g->pci_device_id, g->pci_subsystem_id))
                                continue;
                        if (!g->mig_capable) {
                                /* Selected by `all` or a filter: not ours to change. */
                                if (x->mig_enabled && !x->all_devices && x->n_filters == 0) {
                                        mk_desired_free(d, s->n_gpus);
                                        return mk_error_set_at(e, -EOPNOTSUPP, c->file, x->pos.line, x->pos.column,
                                                               "GPU %u (%s) is not MIG-capable, but this entry "
                                                               "enables MIG on it",
                                                               g->index, g->name);
                                }
                                continue;
                        }
                        struct mk_layout l = {0};
                        int r = mk_config_entry_layout(x, &l);
                        if (r < 0) {
                                mk_desired_free(d, s->n_gpus);
                                return mk_error_set(e, r, "Out of memory");
                        }
                        mk_layout_done(&d[i].layout);
                        d[i] = (struct mk_desired){.matched = true, .enabled = x->mig_enabled, .layout = l, .entry = x};
                }
        }
        *ret = d;
        return 0;
}

int mk_engine_plan_all(const struct mk_snapshot *s, const struct mk_desired *d, bool modes_only,
                       struct mk_gpu_plan **ret, struct mk_error *e) {
        struct mk_gpu_plan *p = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*p));
        if (!p)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        const struct mk_layout none = {0};
        for (size_t i = 0; i < s->n_gpus; i++) {
                p[i].gpu_index = s->gpus[i].index;
                if (!d[i].matched)
                        continue;
                int r = mk_plan_gpu(&s->gpus[i], d[i].enabled, modes_only ? &none : &d[i].layout, &p[i], e);
                if (r < 0) {
                        mk_gpu_plans_free(p, s->n_gpus);
                        return r;
                }
        }
        *ret = p;
        return 0;
}

bool mk_engine_plans_change(const struct mk_gpu_plan *p, size_t n, bool mode_only) {
        for (size_t i = 0; i < n; i++)
                if (p[i].mode_change || (!mode_only && p[i].layout_change))
                        return true;
        return false;
}

int mk_engine_plan_snapshot(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                            bool modes_only, struct mk_desired **ret_d, struct mk_gpu_plan **ret_p,
                            struct mk_error *e) {
        struct mk_desired *d = NULL;
        int r = mk_engine_desired(s, c, nc, &d, e);
        if (r < 0)
                return r;
        r = mk_engine_plan_all(s, d, modes_only, ret_p, e);
        if (r < 0) {
                mk_desired_free(d, s->n_gpus);
                return r;
        }
        *ret_d = d;
        return 0;
}
