#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Appends printf output to buf (NUL-terminated, `size` bytes), cutting it
 * at the end: the message is capped by struct mk_error anyway. */
static void append(char *buf, size_t size, const char *fmt, ...) _printf_(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...) {
        size_t used = strlen(buf);
        if (used + 1 >= size)
                return;
        va_list ap;
        va_start(ap, fmt);
        (void) vsnprintf(buf + used, size - used, fmt, ap);
        va_end(ap);
}

/* "device-filter 0x20B010DE, devices [0, 1] (config.yaml:4:5)" */
static void describe_entry(const struct mk_config *c, const struct mk_config_entry *x, char *buf, size_t size) {
        if (x->n_filters > 0) {
                append(buf, size, "device-filter ");
                for (size_t f = 0; f < x->n_filters; f++) {
                        append(buf, size, "%s0x%08X", f ? " or " : "", x->filters[f].device_vendor);
                        if (x->filters[f].has_subsystem)
                                append(buf, size, ":0x%08X", x->filters[f].subsystem);
                }
                append(buf, size, ", ");
        }
        if (x->all_devices)
                append(buf, size, "devices all");
        else {
                append(buf, size, "devices [");
                for (size_t j = 0; j < x->n_devices; j++)
                        append(buf, size, "%s%u", j ? ", " : "", x->devices[j]);
                append(buf, size, "]");
        }
        append(buf, size, " (%s:%u:%u)", c->file, x->pos.line, x->pos.column);
}

int mk_engine_check_selects(const struct mk_snapshot *s, const struct mk_config *c, const struct mk_named_config *nc,
                            struct mk_error *e) {
        for (size_t k = 0; k < nc->n_entries; k++)
                for (size_t i = 0; i < s->n_gpus; i++)
                        if (mk_config_entry_matches(&nc->entries[k], s->gpus[i].index, s->gpus[i].pci_device_id,
                                                    s->gpus[i].pci_subsystem_id))
                                return 0;
        if (s->n_gpus == 0)
                return 0;
        char buf[MK_ERROR_MSG_MAX] = "";
        append(buf, sizeof(buf), "MIG config '%s' selects no GPU of this node: ", nc->name);
        if (nc->n_entries == 0)
                append(buf, sizeof(buf), "it has no entries");
        for (size_t k = 0; k < nc->n_entries; k++) {
                if (k)
                        append(buf, sizeof(buf), "; ");
                describe_entry(c, &nc->entries[k], buf, sizeof(buf));
        }
        append(buf, sizeof(buf), "; GPUs present:");
        /* Consecutive GPUs of one model once: "0-7 NVIDIA A100-SXM4-40GB (0x20B010DE)". */
        for (size_t i = 0; i < s->n_gpus;) {
                const struct mk_gpu *g = &s->gpus[i];
                size_t j = i;
                while (j + 1 < s->n_gpus && s->gpus[j + 1].index == s->gpus[j].index + 1 &&
                       s->gpus[j + 1].pci_device_id == g->pci_device_id &&
                       s->gpus[j + 1].pci_subsystem_id == g->pci_subsystem_id && streq(s->gpus[j + 1].name, g->name))
                        j++;
                append(buf, sizeof(buf), "%s %u", i ? "," : "", g->index);
                if (j > i)
                        append(buf, sizeof(buf), "-%u", s->gpus[j].index);
                append(buf, sizeof(buf), " %s (0x%08X:0x%08X)", g->name, g->pci_device_id, g->pci_subsystem_id);
                i = j + 1;
        }
        return mk_error_set(e, -ENODEV, "%s", buf);
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
