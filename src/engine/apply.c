/* The one apply flow: plan -> hooks -> stop clients -> mode changes (and
 * resets) -> destroy -> create -> verify, over a mode backend
 * (engine/backend.h), reporting each step as an event (engine/progress.h).
 * Every phase reads the GPUs back and plans again, so a crash or a failed
 * step leaves a state the next run starts from. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/host.h"
#include "base/macro.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "nvml/nvml.h"
#include "pci/pci.h"

void mk_apply_report_done(struct mk_apply_report *r) {
        if (!r)
                return;
        mk_gpu_plans_free(r->plans, r->n_gpus);
        free(r->gpu_failed);
        memset(r, 0, sizeof(*r));
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
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        r = mk_nvml_snapshot(n, &s, e);
        if (r < 0)
                return r;
        struct mk_desired *d = NULL;
        r = mk_engine_plan_snapshot(s, c, nc, false, &d, ret_p, e);
        if (r < 0)
                return r;
        mk_desired_free(d, s->n_gpus);
        *ret_s = TAKE_PTR(s);
        return 0;
}

/* What the GPUs are and what they should be, read at the start of a phase. */
struct view {
        struct mk_snapshot *s;
        struct mk_desired *d;
        struct mk_gpu_plan *p;
};

static void view_done(struct view *v) {
        size_t n = v->s ? v->s->n_gpus : 0;
        mk_gpu_plans_free(v->p, n);
        mk_desired_free(v->d, n);
        mk_snapshot_free(v->s);
        *v = (struct view){0};
}

/* Per GPU, across phases: for its one gpu-finished event. */
struct gpu_progress {
        bool started, finished, mode_changed, enabled;
        uint64_t busy_ms;             /* in its own steps (a reset shared by several GPUs is a wait, apart) */
        size_t destroyed, created, destroyed_gis, created_gis, kept;
};

struct apply_ctx {
        const struct mk_config *c;
        const struct mk_named_config *nc;
        const struct mk_hooks *hooks;
        const struct mk_engine_opts *o;
        const char *const *mig_env;
        struct mk_backend b;
        bool mode_only;               /* asked for, or the backend cannot make instances */
        uint64_t t0;
        struct gpu_progress *gpus;
        size_t n_gpus;
        struct mk_apply_report *rep;
};

static uint64_t now_ms(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void emit(const struct apply_ctx *x, struct mk_progress_event ev) {
        ev.t_ms = now_ms() - x->t0;
        mk_progress_emit(x->o->progress, &ev);
}

static void step(const struct apply_ctx *x, unsigned gpu, struct mk_progress_event ev) {
        ev.kind = MK_PROGRESS_STEP;
        ev.gpu = (int) gpu;
        emit(x, ev);
}

static struct gpu_progress *gpu_of(struct apply_ctx *x, unsigned gpu) {
        return gpu < x->n_gpus ? &x->gpus[gpu] : NULL;
}

static void gpu_started(struct apply_ctx *x, unsigned gpu, enum mk_progress_phase phase) {
        struct gpu_progress *g = gpu_of(x, gpu);
        if (!g || g->started)
                return;
        g->started = true;
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_GPU_STARTED, .gpu = (int) gpu, .phase = phase});
}

static void gpu_finished(struct apply_ctx *x, unsigned gpu, enum mk_progress_phase phase, int error,
                         const struct mk_error *ge) {
        struct gpu_progress *g = gpu_of(x, gpu);
        if (!g || !g->started || g->finished)
                return;
        g->finished = true;
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        emit(x, (struct mk_progress_event){
                        .kind = MK_PROGRESS_GPU_FINISHED,
                        .gpu = (int) gpu,
                        .phase = phase,
                        .destroyed = g->destroyed,
                        .created = g->created,
                        .kept = g->kept,
                        .destroyed_gis = g->destroyed_gis,
                        .created_gis = g->created_gis,
                        .mode_changed = g->mode_changed,
                        .enabled = g->enabled,
                        .duration_ms = g->busy_ms,
                        .error = error < 0 ? error : 0,
                        .message = error < 0 && ge ? mk_error_format(ge, buf, sizeof(buf)) : NULL,
                });
}

static void warn(const struct apply_ctx *x, const char *message) {
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_WARNING, .gpu = -1, .message = message});
}

static int read_view(struct apply_ctx *x, struct view *v, struct mk_error *e) {
        struct view n = {0};
        int r = x->b.ops->snapshot(&x->b, &n.s, e);
        if (r < 0)
                return r;
        r = mk_engine_plan_snapshot(n.s, x->c, x->nc, !x->b.ops->instances, &n.d, &n.p, e);
        if (r < 0) {
                mk_snapshot_free(n.s);
                return r;
        }
        *v = n;
        return 0;
}

static int hook(const struct apply_ctx *x, enum mk_hook which, struct mk_error *e) {
        return mk_engine_run_hook(x->hooks, which, x->mig_env, x->o, e);
}

/* The node service's hook: once, before the first change. */
static int before_change(struct apply_ctx *x, struct mk_error *e) {
        if (x->rep->changed)
                return 0;
        x->rep->changed = true;
        return x->o->before_change ? x->o->before_change(x->o->userdata, e) : 0;
}

/* One GPU's layout plan: destroy, then create GIs with explicit placements
 * and their CIs. Stops at the first failure of this GPU. */
static int execute_layout(struct apply_ctx *x, const struct mk_gpu_plan *p, struct mk_error *e) {
        const struct mk_backend_ops *ops = x->b.ops;
        struct gpu_progress *g = gpu_of(x, p->gpu_index);
        unsigned gpu = p->gpu_index;
        for (size_t i = 0; i < p->n_destroy; i++) {
                const struct mk_plan_destroy *d = &p->destroy[i];
                int r;
                if (d->is_ci) {
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_DESTROY_CI, .profile = d->name,
                                                                .gi_id = d->gi_id, .ci_id = d->ci_id,
                                                                .placement = d->placement, .uuid = d->uuid});
                        r = ops->destroy_ci(&x->b, gpu, d->gi_id, d->ci_id, e);
                        if (r >= 0) {
                                x->rep->destroyed_cis++;
                                if (g)
                                        g->destroyed++;
                        }
                } else {
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_DESTROY_GI, .profile = d->name,
                                                                .gi_id = d->gi_id, .placement = d->placement});
                        r = ops->destroy_gi(&x->b, gpu, d->gi_id, e);
                        if (r >= 0) {
                                x->rep->destroyed_gis++;
                                if (g)
                                        g->destroyed_gis++;
                        }
                }
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < p->n_target; i++) {
                const struct mk_plan_gi *t = &p->target[i];
                unsigned gi_id = t->existing_id;
                if (!t->kept) {
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_CREATE_GI, .profile = t->profile->name,
                                                                .placement = t->placement});
                        int r = ops->create_gi(&x->b, gpu, t->profile->id, t->placement, &gi_id, e);
                        if (r < 0)
                                return r;
                        x->rep->created_gis++;
                        if (g)
                                g->created_gis++;
                }
                for (size_t k = 0; k < t->n_cis; k++) {
                        const struct mk_plan_ci *c = &t->cis[k];
                        if (c->kept)
                                continue;
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_CREATE_CI, .profile = c->profile->name,
                                                                .gi_id = gi_id, .placement = c->placement});
                        unsigned ci_id;
                        int r = ops->create_ci(&x->b, gpu, gi_id, c->profile->queried ? (int) c->profile->id : -1,
                                               c->profile->nvml_enum, c->placement, &ci_id, e);
                        if (r < 0)
                                return r;
                        x->rep->created_cis++;
                        if (g)
                                g->created++;
                }
        }
        return 0;
}

static const char *mode_str(enum mk_mig_mode m) {
        return m == MK_MIG_ENABLED ? "enabled" : "disabled";
}

/* Resets the GPUs whose mode change is pending, or says why not. */
static int reset_pending(struct apply_ctx *x, const struct mk_gpu *const *pending, size_t n, bool *ret_done,
                         struct mk_error *e) {
        *ret_done = false;
        if (n == 0)
                return 0;
        if (x->o->skip_reset && x->mode_only) {
                /* As upstream: the mode is requested; a later reset applies it. */
                char msg[128];
                snprintf(msg, sizeof(msg), "%zu GPU(s) need a reset to change MIG mode, skipped (--skip-reset)", n);
                warn(x, msg);
                return 0;
        }
        if (x->o->skip_reset)
                return mk_error_set(e, -EAGAIN,
                                    "%zu GPU(s) need a reset to change MIG mode, skipped (--skip-reset); reset them "
                                    "(or reboot) and run apply again",
                                    n);
        for (size_t i = 0; i < n; i++)
                step(x, pending[i]->index,
                     (struct mk_progress_event){.step = MK_STEP_RESET, .bus_id = pending[i]->bus_id});
        char what[64];
        snprintf(what, sizeof(what), "the reset of %zu GPU%s", n, n == 1 ? "" : "s");
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_WAITING, .gpu = n == 1 ? (int) pending[0]->index : -1,
                                           .what = what});
        int r = x->b.ops->reset(&x->b, pending, n, &x->rep->reboot_needed, e);
        if (r < 0)
                return r;
        x->rep->resets += (unsigned) n;
        *ret_done = true;
        return 0;
}

static int mode_phase(struct apply_ctx *x, struct mk_error *e) {
        _cleanup_(view_done) struct view v = {0};
        int r = read_view(x, &v, e);
        if (r < 0)
                return r;
        if (!mk_engine_plans_change(v.p, v.s->n_gpus, true))
                return 0;
        r = hook(x, MK_HOOK_PRE_APPLY_MODE, e);
        if (r >= 0)
                r = before_change(x, e);
        if (r < 0)
                return r;
        _cleanup_free_ const struct mk_gpu **pending = calloc(v.s->n_gpus, sizeof(*pending));
        if (!pending)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t n_pending = 0;
        for (size_t i = 0; i < v.s->n_gpus && r >= 0; i++) {
                const struct mk_gpu_plan *p = &v.p[i];
                if (!p->mode_change)
                        continue;
                gpu_started(x, p->gpu_index, MK_PHASE_MODE);
                uint64_t t = now_ms();
                /* NVML refuses to disable MIG while instances exist. */
                if (!p->mig_enabled && p->n_destroy > 0)
                        r = execute_layout(x, p, e);
                bool pend = false;
                if (r >= 0) {
                        step(x, p->gpu_index, (struct mk_progress_event){.step = MK_STEP_SET_MODE,
                                                                         .enabled = p->mig_enabled});
                        r = x->b.ops->set_mode(&x->b, &v.s->gpus[i], p->mig_enabled, &pend, e);
                }
                if (gpu_of(x, p->gpu_index))
                        gpu_of(x, p->gpu_index)->busy_ms += now_ms() - t;
                if (r < 0) {
                        x->rep->gpu_failed[i] = true;
                        gpu_finished(x, p->gpu_index, MK_PHASE_MODE, r, e);
                        break;
                }
                x->rep->mode_changes++;
                struct gpu_progress *g = gpu_of(x, p->gpu_index);
                if (g) {
                        g->mode_changed = true;
                        g->enabled = p->mig_enabled;
                }
                if (pend)
                        pending[n_pending++] = &v.s->gpus[i];
        }
        if (r < 0)
                return r;
        bool reset = false;
        r = reset_pending(x, pending, n_pending, &reset, e);
        if (r < 0 || (n_pending > 0 && !reset))
                return r;

        /* The modes must now be right. */
        view_done(&v);
        r = read_view(x, &v, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < v.s->n_gpus && r >= 0; i++)
                if (v.p[i].mode_change) {
                        x->rep->gpu_failed[i] = true;
                        x->rep->reboot_needed = true;
                        const struct mk_gpu *g = &v.s->gpus[i];
                        char pend[32] = "";
                        if (g->mig_pending != g->mig_current)
                                snprintf(pend, sizeof(pend), " (pending: %s)", mode_str(g->mig_pending));
                        r = mk_error_set(e, -EAGAIN, "GPU %u: MIG mode still %s after the %s; a reboot is needed%s",
                                         g->index, mode_str(g->mig_current), reset ? "reset" : "change", pend);
                }
        return r;
}

static int layout_phase(struct apply_ctx *x, struct mk_error *e) {
        _cleanup_(view_done) struct view v = {0};
        int r = read_view(x, &v, e);
        if (r < 0)
                return r;
        bool any = false;
        for (size_t i = 0; i < v.s->n_gpus; i++) {
                any = any || v.p[i].layout_change;
                if (!v.p[i].layout_change)
                        gpu_finished(x, v.p[i].gpu_index, MK_PHASE_MODE, 0, NULL);
        }
        if (any)
                r = hook(x, MK_HOOK_PRE_APPLY_CONFIG, e);
        if (any && r >= 0)
                r = before_change(x, e);
        int first = 0;
        for (size_t i = 0; r >= 0 && i < v.s->n_gpus; i++) {
                const struct mk_gpu_plan *p = &v.p[i];
                if (!p->layout_change)
                        continue;
                gpu_started(x, p->gpu_index, MK_PHASE_LAYOUT);
                struct gpu_progress *g = gpu_of(x, p->gpu_index);
                if (g)
                        g->kept = p->n_kept_cis;
                struct mk_error ge = {0};
                uint64_t t = now_ms();
                int q = execute_layout(x, p, &ge);
                if (g)
                        g->busy_ms += now_ms() - t;
                gpu_finished(x, p->gpu_index, MK_PHASE_LAYOUT, q, &ge);
                if (q < 0) {
                        /* Stop this GPU, go on with the others; a re-run repairs it. */
                        x->rep->gpu_failed[i] = true;
                        if (first == 0) {
                                first = q;
                                if (e)
                                        *e = ge;
                        }
                }
        }
        return r < 0 ? r : first;
}

static int verify(struct apply_ctx *x, struct mk_error *e) {
        _cleanup_(view_done) struct view v = {0};
        int r = read_view(x, &v, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < v.s->n_gpus && r >= 0; i++)
                if ((v.p[i].mode_change && !(x->o->skip_reset && x->mode_only)) ||
                    (!x->mode_only && v.p[i].layout_change))
                        r = mk_error_set(e, -EIO, "GPU %u: verification failed: the layout read back differs from "
                                                  "the target",
                                         v.s->gpus[i].index);
        return r;
}

/* NVML; else, when only modes are asked for and the nvidia module is not
 * loaded, PCI BAR0. */
static int open_backend(struct apply_ctx *x, struct mk_error *e) {
        struct mk_backend b = {.ops = &mk_backend_nvml};
        int r = b.ops->detect(&b, e);
        if (r >= 0) {
                x->b = b;
                return 0;
        }
        struct mk_backend pb = {.ops = &mk_backend_pci};
        struct mk_error pe = {0};
        int q = pb.ops->detect(&pb, &pe);
        bool driver = q == -EBUSY;
        if (driver)
                return r; /* the driver is there; NVML's error is the one */
        if (!(x->o->mode_only || x->o->mode_only_without_driver)) {
                mk_backend_close(&pb);
                if (e)
                        mk_error_prefix(e, "The nvidia module is not loaded (only --mode-only works without the "
                                           "driver)");
                return r;
        }
        if (q < 0) {
                if (e)
                        *e = pe;
                return q;
        }
        mk_error_clear(e);
        x->b = pb;
        return 0;
}

static int run(struct apply_ctx *x, struct mk_error *e) {
        int r = open_backend(x, e);
        if (r < 0)
                return r;
        x->rep->driverless = !x->b.ops->instances;
        x->mode_only = x->o->mode_only || !x->b.ops->instances;
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_BACKEND, .gpu = -1, .backend = x->b.ops->name,
                                           .backend_description = x->b.ops->description});

        /* Plan everything first: refuse before any hook or change when a
         * target cannot be built on some GPU. */
        struct view v = {0};
        r = read_view(x, &v, e);
        if (r < 0)
                return r;
        x->n_gpus = v.s->n_gpus;
        x->rep->n_gpus = v.s->n_gpus;
        x->rep->nothing_to_do = !mk_engine_plans_change(v.p, v.s->n_gpus, x->mode_only);
        x->rep->gpu_failed = calloc(v.s->n_gpus ? v.s->n_gpus : 1, sizeof(bool));
        x->gpus = calloc(v.s->n_gpus ? v.s->n_gpus : 1, sizeof(*x->gpus));
        if (!x->rep->gpu_failed || !x->gpus) {
                view_done(&v);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_PLANNED, .gpu = -1, .config = x->nc->name,
                                           .snapshot = v.s, .plans = v.p, .mode_only = x->mode_only});
        /* Accepted as upstream does, said once. No GPU selected: nothing to
         * change, and a success as upstream's apply. */
        struct mk_error w = {0};
        char wbuf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        if (mk_config_duplicate_device(x->c, x->nc, &w) > 0)
                warn(x, mk_error_format(&w, wbuf, sizeof(wbuf)));
        w = (struct mk_error){0};
        if (mk_engine_check_selects(v.s, x->c, x->nc, &w) < 0)
                warn(x, w.msg);
        x->rep->plans = TAKE_PTR(v.p);
        view_done(&v);

        r = hook(x, MK_HOOK_APPLY_START, e);
        if (r < 0)
                return r;
        if (!x->rep->nothing_to_do) {
                r = mode_phase(x, e);
                if (r >= 0 && !x->mode_only)
                        r = layout_phase(x, e);
                if (r >= 0)
                        r = verify(x, e);
        }
        for (size_t i = 0; i < x->n_gpus; i++)
                gpu_finished(x, (unsigned) i, MK_PHASE_MODE, x->rep->gpu_failed[i] ? -EIO : 0, e);
        x->rep->mutations += x->b.ops->mutations(&x->b);
        mk_backend_close(&x->b);

        struct mk_error he = {0};
        int h = hook(x, MK_HOOK_APPLY_EXIT, &he);
        if (h < 0) {
                if (r >= 0) {
                        if (e)
                                *e = he;
                        r = h;
                } else {
                        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
                        warn(x, mk_error_format(&he, buf, sizeof(buf)));
                }
        }
        return r;
}

int mk_engine_apply(const struct mk_config *c, const struct mk_hooks *hooks, const struct mk_engine_opts *o,
                    struct mk_apply_report *rep, struct mk_error *e) {
        struct apply_ctx x = {.c = c, .hooks = hooks, .o = o, .rep = rep, .t0 = now_ms()};
        int r = mk_config_select(c, o->selected_config, &x.nc, e);
        if (r >= 0) {
                char env[5][4200];
                snprintf(env[0], sizeof(env[0]), "MIG_PARTED_CONFIG_FILE=%s", o->config_file ? o->config_file : "");
                snprintf(env[1], sizeof(env[1]), "MIG_PARTED_SELECTED_CONFIG=%s", x.nc->name);
                snprintf(env[2], sizeof(env[2]), "MIG_PARTED_HOOKS_FILE=%s", o->hooks_file ? o->hooks_file : "");
                snprintf(env[3], sizeof(env[3]), "MIG_PARTED_SKIP_RESET=%s", o->skip_reset ? "true" : "false");
                snprintf(env[4], sizeof(env[4]), "MIG_PARTED_MODE_CHANGE_ONLY=%s",
                         o->mode_only ? "true" : "false");
                const char *const mig_env[] = {env[0], env[1], env[2], env[3], env[4], NULL};
                x.mig_env = mig_env;
                r = run(&x, e);
                x.mig_env = NULL;
        }
        if (x.b.ops) {
                rep->mutations += x.b.ops->mutations(&x.b);
                mk_backend_close(&x.b);
        }
        free(x.gpus);

        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        emit(&x, (struct mk_progress_event){.kind = MK_PROGRESS_DONE, .gpu = -1, .report = rep,
                                            .error = r < 0 ? r : 0,
                                            .message = r < 0 && e ? mk_error_format(e, buf, sizeof(buf)) : NULL});
        return r;
}
