#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "engine/engine.h"
#include "nvml/nvml.h"
#include "base/host.h"
#include "pci/pci.h"

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

void mk_apply_report_done(struct mk_apply_report *r) {
        if (!r)
                return;
        mk_gpu_plans_free(r->plans, r->n_gpus);
        free(r->gpu_failed);
        memset(r, 0, sizeof(*r));
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
                                struct mk_pos p = x->device_pos ? x->device_pos[j] : x->devices_pos;
                                mk_desired_free(d, s->n_gpus);
                                int r = mk_error_set_at(
                                        e, -EINVAL, c->file, p.line, p.column,
                                        "devices: index %u is out of range: this node has %zu GPU%s", x->devices[j],
                                        s->n_gpus, s->n_gpus == 1 ? "" : "s");
                                if (e)
                                        snprintf(e->field, sizeof(e->field), "mig-configs.%s[%zu].devices", nc->name,
                                                 k);
                                return r;
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

int mk_engine_plan_all(const struct mk_snapshot *s, const struct mk_desired *d, struct mk_gpu_plan **ret,
                       struct mk_error *e) {
        struct mk_gpu_plan *p = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*p));
        if (!p)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < s->n_gpus; i++) {
                p[i].gpu_index = s->gpus[i].index;
                if (!d[i].matched)
                        continue;
                int r = mk_plan_gpu(&s->gpus[i], d[i].enabled, &d[i].layout, &p[i], e);
                if (r < 0) {
                        mk_gpu_plans_free(p, s->n_gpus);
                        return r;
                }
        }
        *ret = p;
        return 0;
}

int mk_engine_plan_selected(const struct mk_config *c, const char *name, struct mk_snapshot **ret_s,
                            struct mk_gpu_plan **ret_p, struct mk_error *e) {
        const struct mk_named_config *nc;
        int r = mk_config_select(c, name, &nc, e);
        if (r < 0)
                return r;
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        r = mk_nvml_open(NULL, &n, e);
        if (r < 0)
                return r;
        struct mk_snapshot *s = NULL;
        r = mk_nvml_snapshot(n, &s, e);
        if (r < 0)
                return r;
        struct mk_desired *d = NULL;
        r = mk_engine_desired(s, c, nc, &d, e);
        if (r >= 0) {
                r = mk_engine_plan_all(s, d, ret_p, e);
                mk_desired_free(d, s->n_gpus);
        }
        if (r < 0) {
                mk_snapshot_free(s);
                return r;
        }
        *ret_s = s;
        return 0;
}

static bool plans_change(const struct mk_gpu_plan *p, size_t n, bool mode_only) {
        for (size_t i = 0; i < n; i++)
                if (p[i].mode_change || (!mode_only && p[i].layout_change))
                        return true;
        return false;
}

/* Executes one GPU's layout plan: destroy, then create GIs with explicit
 * placements and their CIs. Stops at the first failure of this GPU. */
static int execute_layout(struct mk_nvml *n, const struct mk_gpu_plan *p, struct mk_apply_report *rep,
                          struct mk_error *e) {
        unsigned gpu = p->gpu_index;
        for (size_t i = 0; i < p->n_destroy; i++) {
                const struct mk_plan_destroy *x = &p->destroy[i];
                int r;
                if (x->is_ci) {
                        log_info("GPU %u: destroying compute instance %u of GPU instance %u (%s%s%s)", gpu, x->ci_id,
                                 x->gi_id, x->name, x->uuid[0] ? ", " : "", x->uuid);
                        r = mk_nvml_destroy_ci(n, gpu, x->gi_id, x->ci_id, e);
                        if (r >= 0)
                                rep->destroyed_cis++;
                } else {
                        log_info("GPU %u: destroying GPU instance %u (%s at %u:%u)", gpu, x->gi_id, x->name,
                                 x->placement.start, x->placement.size);
                        r = mk_nvml_destroy_gi(n, gpu, x->gi_id, e);
                        if (r >= 0)
                                rep->destroyed_gis++;
                }
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < p->n_target; i++) {
                const struct mk_plan_gi *t = &p->target[i];
                unsigned gi_id = t->existing_id;
                if (!t->kept) {
                        log_info("GPU %u: creating GPU instance %s at %u:%u", gpu, t->profile->name,
                                 t->placement.start, t->placement.size);
                        int r = mk_nvml_create_gi(n, gpu, t->profile->id, t->placement, &gi_id, e);
                        if (r < 0)
                                return r;
                        rep->created_gis++;
                }
                for (size_t k = 0; k < t->n_cis; k++) {
                        const struct mk_plan_ci *c = &t->cis[k];
                        if (c->kept)
                                continue;
                        unsigned ci_profile_id = c->profile->id;
                        if (!c->profile->queried) {
                                int r = mk_nvml_ci_profile_id(n, gpu, gi_id, c->profile->nvml_enum, &ci_profile_id, e);
                                if (r < 0)
                                        return r;
                        }
                        unsigned ci_id;
                        log_info("GPU %u: creating compute instance %s at %u:%u in GPU instance %u", gpu,
                                 c->profile->name, c->placement.start, c->placement.size, gi_id);
                        int r = mk_nvml_create_ci(n, gpu, gi_id, ci_profile_id, c->placement, &ci_id, e);
                        if (r < 0)
                                return r;
                        rep->created_cis++;
                }
        }
        return 0;
}

static int snapshot_and_plan(struct mk_nvml *n, const struct mk_config *c, const struct mk_named_config *nc,
                             struct mk_snapshot **ret_s, struct mk_desired **ret_d, struct mk_gpu_plan **ret_p,
                             struct mk_error *e) {
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        int r = mk_nvml_snapshot(n, &s, e);
        if (r >= 0)
                r = mk_engine_desired(s, c, nc, &d, e);
        if (r >= 0)
                r = mk_engine_plan_all(s, d, &p, e);
        if (r < 0) {
                if (s && d)
                        mk_desired_free(d, s->n_gpus);
                mk_snapshot_free(s);
                return r;
        }
        *ret_s = s;
        *ret_d = d;
        *ret_p = p;
        return 0;
}

struct apply_ctx {
        const struct mk_config *c;
        const struct mk_named_config *nc;
        const struct mk_hooks *hooks;
        const struct mk_engine_opts *o;
        const char *const *mig_env;
        struct mk_nvml *n;
        struct mk_apply_report *rep;
};

/* The node service's hook: once, before the first change. */
static int before_change(struct apply_ctx *x, struct mk_error *e) {
        if (x->rep->changed)
                return 0;
        x->rep->changed = true;
        return x->o->before_change ? x->o->before_change(x->o->userdata, e) : 0;
}

static void drop(struct mk_snapshot **s, struct mk_desired **d, struct mk_gpu_plan **p) {
        size_t n = *s ? (*s)->n_gpus : 0;
        mk_gpu_plans_free(*p, n);
        mk_desired_free(*d, n);
        mk_snapshot_free(*s);
        *s = NULL;
        *d = NULL;
        *p = NULL;
}

static int mode_phase(struct apply_ctx *x, struct mk_error *e) {
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        int r = snapshot_and_plan(x->n, x->c, x->nc, &s, &d, &p, e);
        if (r < 0)
                return r;
        bool any = false;
        for (size_t i = 0; i < s->n_gpus; i++)
                any = any || p[i].mode_change;
        if (!any) {
                drop(&s, &d, &p);
                return 0;
        }
        r = mk_engine_run_hook(x->hooks, MK_HOOK_PRE_APPLY_MODE, x->mig_env, x->o, e);
        if (r >= 0)
                r = before_change(x, e);
        if (r < 0) {
                drop(&s, &d, &p);
                return r;
        }
        const char **pending = calloc(s->n_gpus, sizeof(char *));
        size_t n_pending = 0;
        if (!pending) {
                drop(&s, &d, &p);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++) {
                if (!p[i].mode_change)
                        continue;
                /* NVML refuses to disable MIG while instances exist. */
                if (!p[i].mig_enabled && p[i].n_destroy > 0)
                        r = execute_layout(x->n, &p[i], x->rep, e);
                bool pend = false;
                if (r >= 0) {
                        log_info("GPU %u: %s MIG mode", p[i].gpu_index, p[i].mig_enabled ? "enabling" : "disabling");
                        r = mk_nvml_set_mig_mode(x->n, p[i].gpu_index, p[i].mig_enabled, &pend, e);
                }
                if (r < 0) {
                        x->rep->gpu_failed[i] = true;
                        break;
                }
                x->rep->mode_changes++;
                if (pend)
                        pending[n_pending++] = s->gpus[i].bus_id;
        }
        if (r >= 0 && n_pending > 0) {
                if (x->o->skip_reset && x->o->mode_only) {
                        /* As upstream: the mode is requested; a later reset applies it. */
                        log_warning("%zu GPU(s) need a reset to change MIG mode, skipped (--skip-reset)", n_pending);
                        free(pending);
                        drop(&s, &d, &p);
                        return 0;
                } else if (x->o->skip_reset) {
                        r = mk_error_set(e, -EAGAIN,
                                         "%zu GPU(s) need a reset to change MIG mode, skipped (--skip-reset); reset "
                                         "them (or reboot) and run apply again",
                                         n_pending);
                } else {
                        /* Our NVML session must not hold the GPUs while they reset. */
                        const char *path = mk_nvml_path(x->n);
                        _cleanup_free_ char *lib = strdup(path);
                        x->rep->mutations += mk_nvml_mutations(x->n);
                        x->n = mk_nvml_close(x->n);
                        r = mk_engine_reset_gpus(pending, n_pending, &x->rep->reboot_needed, e);
                        if (r >= 0)
                                x->rep->resets += (unsigned) n_pending;
                        struct mk_error e2 = {0};
                        int q = mk_nvml_open(lib, &x->n, &e2);
                        if (q < 0 && r >= 0) {
                                *e = e2;
                                r = q;
                        }
                }
        }
        free(pending);
        drop(&s, &d, &p);
        if (r < 0)
                return r;

        /* The modes must now be right. */
        r = snapshot_and_plan(x->n, x->c, x->nc, &s, &d, &p, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++)
                if (p[i].mode_change) {
                        x->rep->gpu_failed[i] = true;
                        x->rep->reboot_needed = true;
                        r = mk_error_set(e, -EAGAIN,
                                         "GPU %u: MIG mode is still %s (pending %s) after the change; a reboot is "
                                         "needed",
                                         s->gpus[i].index, s->gpus[i].mig_current == MK_MIG_ENABLED ? "enabled" : "disabled",
                                         s->gpus[i].mig_pending == MK_MIG_ENABLED ? "enabled" : "disabled");
                }
        drop(&s, &d, &p);
        return r;
}

static int layout_phase(struct apply_ctx *x, struct mk_error *e) {
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        int r = snapshot_and_plan(x->n, x->c, x->nc, &s, &d, &p, e);
        if (r < 0)
                return r;
        bool any = false;
        for (size_t i = 0; i < s->n_gpus; i++)
                any = any || p[i].layout_change;
        if (any)
                r = mk_engine_run_hook(x->hooks, MK_HOOK_PRE_APPLY_CONFIG, x->mig_env, x->o, e);
        if (any && r >= 0)
                r = before_change(x, e);
        int first = 0;
        for (size_t i = 0; r >= 0 && i < s->n_gpus; i++) {
                if (!p[i].layout_change)
                        continue;
                struct mk_error ge = {0};
                int q = execute_layout(x->n, &p[i], x->rep, &ge);
                if (q < 0) {
                        /* Stop this GPU, go on with the others; a re-run repairs it. */
                        char buf[MK_ERROR_MSG_MAX];
                        log_error("%s", mk_error_format(&ge, buf, sizeof(buf)));
                        x->rep->gpu_failed[i] = true;
                        if (first == 0) {
                                first = q;
                                if (e)
                                        *e = ge;
                        }
                }
        }
        drop(&s, &d, &p);
        return r < 0 ? r : first;
}

static int verify(struct apply_ctx *x, struct mk_error *e) {
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        int r = snapshot_and_plan(x->n, x->c, x->nc, &s, &d, &p, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++)
                if ((p[i].mode_change && !(x->o->skip_reset && x->o->mode_only)) ||
                    (!x->o->mode_only && p[i].layout_change))
                        r = mk_error_set(e, -EIO, "GPU %u: verification failed: the layout read back differs from "
                                                  "the target",
                                         s->gpus[i].index);
        drop(&s, &d, &p);
        return r;
}

int mk_engine_apply(const struct mk_config *c, const struct mk_hooks *hooks, const struct mk_engine_opts *o,
                    struct mk_apply_report *rep, struct mk_error *e) {
        const struct mk_named_config *nc = NULL;
        int r = mk_config_select(c, o->selected_config, &nc, e);
        if (r < 0)
                return r;

        struct apply_ctx x = {.c = c, .nc = nc, .hooks = hooks, .o = o, .rep = rep};
        char env[5][4200];
        snprintf(env[0], sizeof(env[0]), "MIG_PARTED_CONFIG_FILE=%s", o->config_file ? o->config_file : "");
        snprintf(env[1], sizeof(env[1]), "MIG_PARTED_SELECTED_CONFIG=%s", nc->name);
        snprintf(env[2], sizeof(env[2]), "MIG_PARTED_HOOKS_FILE=%s", o->hooks_file ? o->hooks_file : "");
        snprintf(env[3], sizeof(env[3]), "MIG_PARTED_SKIP_RESET=%s", o->skip_reset ? "true" : "false");
        snprintf(env[4], sizeof(env[4]), "MIG_PARTED_MODE_CHANGE_ONLY=%s", o->mode_only ? "true" : "false");
        const char *const mig_env[] = {env[0], env[1], env[2], env[3], env[4], NULL};
        x.mig_env = mig_env;

        r = mk_nvml_open(NULL, &x.n, e);
        if (r < 0) {
                /* No driver: the mode alone can still change, through PCI. */
                struct mk_host host = {0};
                bool driver = mk_host_init_from_env(&host) >= 0 && mk_pci_driver_loaded(&host);
                mk_host_done(&host);
                if (driver || !(o->mode_only || o->mode_only_without_driver)) {
                        if (!driver && e)
                                mk_error_prefix(e, "The nvidia module is not loaded (only --mode-only works "
                                                   "without the driver)");
                        return r;
                }
                log_info("NVML unavailable and the nvidia module not loaded: changing MIG mode through PCI");
                mk_error_clear(e);
                return mk_engine_apply_driverless(c, nc, hooks, o, mig_env, rep, e);
        }

        /* Plan everything first: refuse before any hook or change when a
         * target cannot be built on some GPU. */
        struct mk_snapshot *s = NULL;
        struct mk_desired *d = NULL;
        struct mk_gpu_plan *p = NULL;
        r = snapshot_and_plan(x.n, c, nc, &s, &d, &p, e);
        if (r < 0) {
                mk_nvml_close(x.n);
                return r;
        }
        rep->n_gpus = s->n_gpus;
        rep->plans = p;
        rep->gpu_failed = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(bool));
        rep->nothing_to_do = !plans_change(p, s->n_gpus, o->mode_only);
        mk_desired_free(d, s->n_gpus);
        mk_snapshot_free(s);
        if (!rep->gpu_failed) {
                mk_nvml_close(x.n);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }

        r = mk_engine_run_hook(hooks, MK_HOOK_APPLY_START, mig_env, o, e);
        if (r < 0) {
                mk_nvml_close(x.n);
                return r;
        }
        if (!rep->nothing_to_do) {
                r = mode_phase(&x, e);
                if (r >= 0 && !o->mode_only)
                        r = layout_phase(&x, e);
                if (r >= 0 && x.n)
                        r = verify(&x, e);
        }
        if (x.n)
                rep->mutations += mk_nvml_mutations(x.n);
        x.n = mk_nvml_close(x.n);

        struct mk_error he = {0};
        int h = mk_engine_run_hook(hooks, MK_HOOK_APPLY_EXIT, mig_env, o, &he);
        if (h < 0) {
                if (r >= 0) {
                        if (e)
                                *e = he;
                        r = h;
                } else {
                        char buf[MK_ERROR_MSG_MAX];
                        log_error("%s", mk_error_format(&he, buf, sizeof(buf)));
                }
        }
        return r;
}
