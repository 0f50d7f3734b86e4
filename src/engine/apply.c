/* The one apply flow: plan -> hooks -> stop clients -> mode changes (and
 * resets) -> destroy -> create -> verify, over a mode backend
 * (engine/backend.h), reporting each step as an event (engine/progress.h).
 * Every phase reads the GPUs back and plans again, so a crash or a failed
 * step leaves a state the next run starts from. Within the mode and the
 * layout phase each GPU that changes gets its own thread (a GPU instance
 * create or a reset takes up to seconds on real hardware, so an 8-GPU node
 * would wait for the sum); planning, hooks, resets and verification stay on
 * the caller's thread, whole. Without a pre-apply-config hook the phases
 * overlap per GPU: a GPU whose mode stays starts its layout with the mode
 * changes of the others (docs/engine.md, "GPUs in parallel"). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/host.h"
#include "base/hostlock.h"
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
        uint64_t paused_ms;           /* of busy_ms, waiting at the gate (a reset, a read of every GPU) */
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
        struct gpu_progress *gpus;    /* gpus[i]: touched by GPU i's thread alone while it runs */
        size_t n_gpus;
        struct mk_apply_report *rep;
        /* Serialises the progress callback and the report's counts, which
         * the GPUs' threads share. */
        pthread_mutex_t lock;
        /* The gate that GPU threads pass for each backend call while the
         * caller's thread resets GPUs (the NVML session is closed and
         * reopened meanwhile, engine/backend-nvml.c) or reads every GPU (a
         * snapshot must not see a GPU half-way through a call). Closing it
         * waits for the calls in flight; it holds the next ones. */
        pthread_mutex_t gate_lock;
        pthread_cond_t gate_cond;
        unsigned gate_active;         /* backend calls in flight on GPU threads */
        bool gate_closed;
        /* Per GPU layouts that start while modes change (pipelined), or NULL. */
        bool pipelined;
        struct job_set *early;
        struct view early_view;       /* the plans the early layouts follow */
};

static uint64_t now_ms(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* A GPU thread's backend call passes the gate: waits while it is closed. */
static void gate_enter(struct apply_ctx *x, unsigned gpu) {
        pthread_mutex_lock(&x->gate_lock);
        if (x->gate_closed) {
                uint64_t t = now_ms();
                while (x->gate_closed)
                        pthread_cond_wait(&x->gate_cond, &x->gate_lock);
                if (gpu < x->n_gpus)
                        x->gpus[gpu].paused_ms += now_ms() - t;
        }
        x->gate_active++;
        pthread_mutex_unlock(&x->gate_lock);
}

static void gate_leave(struct apply_ctx *x) {
        pthread_mutex_lock(&x->gate_lock);
        if (--x->gate_active == 0)
                pthread_cond_broadcast(&x->gate_cond);
        pthread_mutex_unlock(&x->gate_lock);
}

/* The caller's thread: no backend call of a GPU thread in flight until gate_open(). */
static void gate_close(struct apply_ctx *x) {
        pthread_mutex_lock(&x->gate_lock);
        x->gate_closed = true;
        while (x->gate_active > 0)
                pthread_cond_wait(&x->gate_cond, &x->gate_lock);
        pthread_mutex_unlock(&x->gate_lock);
}

static void gate_open(struct apply_ctx *x) {
        pthread_mutex_lock(&x->gate_lock);
        x->gate_closed = false;
        pthread_cond_broadcast(&x->gate_cond);
        pthread_mutex_unlock(&x->gate_lock);
}

static void emit(struct apply_ctx *x, struct mk_progress_event ev) {
        pthread_mutex_lock(&x->lock);
        ev.t_ms = now_ms() - x->t0;
        mk_progress_emit(x->o->progress, &ev);
        pthread_mutex_unlock(&x->lock);
}

/* One more change in the report's total (shared) and the GPU's count (its own). */
static void count(struct apply_ctx *x, size_t *total, size_t *gpu) {
        pthread_mutex_lock(&x->lock);
        (*total)++;
        pthread_mutex_unlock(&x->lock);
        if (gpu)
                (*gpu)++;
}

static void step(struct apply_ctx *x, unsigned gpu, struct mk_progress_event ev) {
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

static void warn(struct apply_ctx *x, const char *message) {
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_WARNING, .gpu = -1, .message = message});
}

static int read_view(struct apply_ctx *x, struct view *v, struct mk_error *e) {
        struct view n = {0};
        gate_close(x);
        int r = x->b.ops->snapshot(&x->b, &n.s, e);
        gate_open(x);
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

static int hook(struct apply_ctx *x, enum mk_hook which, struct mk_error *e) {
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
                        gate_enter(x, gpu);
                        r = ops->destroy_ci(&x->b, gpu, d->gi_id, d->ci_id, e);
                        gate_leave(x);
                        if (r >= 0)
                                count(x, &x->rep->destroyed_cis, g ? &g->destroyed : NULL);
                } else {
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_DESTROY_GI, .profile = d->name,
                                                                .gi_id = d->gi_id, .placement = d->placement});
                        gate_enter(x, gpu);
                        r = ops->destroy_gi(&x->b, gpu, d->gi_id, e);
                        gate_leave(x);
                        if (r >= 0)
                                count(x, &x->rep->destroyed_gis, g ? &g->destroyed_gis : NULL);
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
                        gate_enter(x, gpu);
                        int r = ops->create_gi(&x->b, gpu, t->profile->id, t->placement, &gi_id, e);
                        gate_leave(x);
                        if (r < 0)
                                return r;
                        count(x, &x->rep->created_gis, g ? &g->created_gis : NULL);
                }
                for (size_t k = 0; k < t->n_cis; k++) {
                        const struct mk_plan_ci *c = &t->cis[k];
                        if (c->kept)
                                continue;
                        step(x, gpu, (struct mk_progress_event){.step = MK_STEP_CREATE_CI, .profile = c->profile->name,
                                                                .gi_id = gi_id, .placement = c->placement});
                        unsigned ci_id;
                        gate_enter(x, gpu);
                        int r = ops->create_ci(&x->b, gpu, gi_id, c->profile->queried ? (int) c->profile->id : -1,
                                               c->profile->nvml_enum, c->placement, &ci_id, e);
                        gate_leave(x);
                        if (r < 0)
                                return r;
                        count(x, &x->rep->created_cis, g ? &g->created : NULL);
                }
        }
        return 0;
}

/* One GPU's share of a phase, run on its own thread. */
struct gpu_job {
        struct job_set *set;
        size_t i;                     /* its index in the snapshot */
        const struct mk_gpu *g;
        const struct mk_gpu_plan *p;  /* NULL: an empty slot of a set indexed by GPU */
        int r;
        struct mk_error e;
        bool pending;                 /* mode phase: the change waits for a reset */
        bool started, ran, done, threaded;
        pthread_t thread;
};

/* The GPUs of one phase. Their gpu-finished events go out in GPU order (a
 * GPU's waits for those before it), so that the output of a run does not
 * depend on which thread ends first; steps go out as they happen. */
struct job_set {
        struct apply_ctx *x;
        enum mk_progress_phase phase;
        int (*fn)(struct apply_ctx *x, struct gpu_job *j);
        bool finish;                  /* a job that succeeds ends its GPU (else only a failure does) */
        bool stop_at_failure;         /* sequential: the first failure stops the others */
        /* gpu-finished events wait until the set is released: the early
         * layouts' (pipelined) wait for the layout step, where the GPUs
         * whose layout starts late join the set. */
        bool hold;
        struct gpu_job *jobs;
        size_t n, next;               /* next: the first job whose end is not reported yet */
        pthread_mutex_t lock;         /* done, next, hold; taken before the ctx's lock */
};

/* With s->lock held: the ends not reported yet, in order, up to the first job still running. */
static void jobs_report(struct job_set *s) {
        if (s->hold)
                return;
        for (; s->next < s->n && (!s->jobs[s->next].p || s->jobs[s->next].done); s->next++) {
                struct gpu_job *k = &s->jobs[s->next];
                if (k->p && (s->finish || k->r < 0))
                        gpu_finished(s->x, k->p->gpu_index, s->phase, k->r, &k->e);
        }
}

static void job_end(struct job_set *s, struct gpu_job *j) {
        pthread_mutex_lock(&s->lock);
        j->done = true;
        jobs_report(s);
        pthread_mutex_unlock(&s->lock);
}

static void job_run(struct gpu_job *j) {
        struct job_set *s = j->set;
        struct gpu_progress *g = gpu_of(s->x, j->p->gpu_index);
        gpu_started(s->x, j->p->gpu_index, s->phase);
        uint64_t t = now_ms(), paused = g ? g->paused_ms : 0;
        j->r = s->fn(s->x, j);
        if (g)
                g->busy_ms += now_ms() - t - (g->paused_ms - paused);
        j->ran = true;
        job_end(s, j);
}

#define MK_APPLY_THREAD_STACK ((size_t) 512 * 1024)

static void *job_thread(void *userdata) {
        job_run(userdata);
        return NULL;
}

static bool jobs_parallel(const struct job_set *s) {
        return s->n > 1 && s->x->b.ops->concurrent && !s->x->o->sequential;
}

static int jobs_init(struct job_set *s, struct mk_error *e) {
        if (pthread_mutex_init(&s->lock, NULL) != 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        return 0;
}

/* Starts the jobs not started yet: one thread each when the set runs in
 * parallel, else one after another here. A thread that cannot be started
 * runs its job here. */
static void jobs_start(struct job_set *s) {
        bool parallel = jobs_parallel(s);
        /* A job's thread runs NVML calls only: a small stack, so that 8 GPUs
         * fit a small address space (test-exec's ulimit -v, where 8 default
         * 8 MiB stacks left NVML no memory and failed a GPU). */
        pthread_attr_t attr;
        bool attr_ok = parallel && pthread_attr_init(&attr) == 0;
        if (attr_ok)
                (void) pthread_attr_setstacksize(&attr, MK_APPLY_THREAD_STACK);
        for (size_t i = 0; i < s->n; i++) {
                struct gpu_job *j = &s->jobs[i];
                if (!j->p || j->started)
                        continue;
                j->started = true;
                if (parallel && pthread_create(&j->thread, attr_ok ? &attr : NULL, job_thread, j) == 0) {
                        j->threaded = true;
                        continue;
                }
                job_run(j);
                if (!parallel && s->stop_at_failure && j->r < 0)
                        break;
        }
        if (attr_ok)
                (void) pthread_attr_destroy(&attr);
}

/* Releases the set's reports, waits for its threads and ends the set.
 * Returns the first failure in GPU order, its detail in e. */
static int jobs_join(struct job_set *s, struct mk_error *e) {
        pthread_mutex_lock(&s->lock);
        s->hold = false;
        jobs_report(s);
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < s->n; i++)
                if (s->jobs[i].threaded) {
                        (void) pthread_join(s->jobs[i].thread, NULL);
                        s->jobs[i].threaded = false;
                }
        (void) pthread_mutex_destroy(&s->lock);
        for (size_t i = 0; i < s->n; i++)
                if (s->jobs[i].ran && s->jobs[i].r < 0) {
                        if (e)
                                *e = s->jobs[i].e;
                        return s->jobs[i].r;
                }
        return 0;
}

/* Runs every job (see jobs_start) and waits for them. */
static int jobs_run(struct job_set *s, struct mk_error *e) {
        int r = jobs_init(s, e);
        if (r < 0)
                return r;
        jobs_start(s);
        return jobs_join(s, e);
}

/* The GPUs of view v whose plan changes something: the mode (mode) or the layout. */
static struct gpu_job *jobs_of(struct job_set *s, const struct mk_snapshot *snap, const struct mk_gpu_plan *p,
                               bool mode) {
        s->jobs = calloc(snap->n_gpus ? snap->n_gpus : 1, sizeof(*s->jobs));
        if (!s->jobs)
                return NULL;
        for (size_t i = 0; i < snap->n_gpus; i++)
                if (mode ? p[i].mode_change : p[i].layout_change)
                        s->jobs[s->n++] = (struct gpu_job){.set = s, .i = i, .g = &snap->gpus[i], .p = &p[i]};
        return s->jobs;
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
        gate_close(x);
        int r = x->b.ops->reset(&x->b, pending, n, &x->rep->reboot_needed, e);
        gate_open(x);
        if (r < 0)
                return r;
        x->rep->resets += (unsigned) n;
        *ret_done = true;
        return 0;
}

/* One GPU's mode: its instances go first when MIG is being disabled (NVML
 * refuses to disable MIG while instances exist), then the mode is set. */
static int mode_job(struct apply_ctx *x, struct gpu_job *j) {
        const struct mk_gpu_plan *p = j->p;
        if (!p->mig_enabled && p->n_destroy > 0) {
                int r = execute_layout(x, p, &j->e);
                if (r < 0)
                        return r;
        }
        step(x, p->gpu_index, (struct mk_progress_event){.step = MK_STEP_SET_MODE, .enabled = p->mig_enabled});
        gate_enter(x, p->gpu_index);
        int r = x->b.ops->set_mode(&x->b, j->g, p->mig_enabled, &j->pending, &j->e);
        gate_leave(x);
        return r;
}

static int layout_job(struct apply_ctx *x, struct gpu_job *j);

/* Pipelined: the layouts of the GPUs whose mode stays start now, with the
 * others' mode changes, on their own threads; plans of v, which x takes. */
static int early_start(struct apply_ctx *x, struct view *v, struct mk_error *e) {
        struct job_set *s = calloc(1, sizeof(*s));
        struct gpu_job *jobs = calloc(v->s->n_gpus ? v->s->n_gpus : 1, sizeof(*jobs));
        if (!s || !jobs) {
                free(s);
                free(jobs);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        *s = (struct job_set){.x = x, .phase = MK_PHASE_LAYOUT, .fn = layout_job, .finish = true, .hold = true,
                              .jobs = jobs, .n = v->s->n_gpus};
        int r = jobs_init(s, e);
        if (r < 0) {
                free(s);
                free(jobs);
                return r;
        }
        x->early_view = *v;
        *v = (struct view){0};
        const struct view *ev = &x->early_view;
        for (size_t i = 0; i < ev->s->n_gpus; i++)
                if (!ev->p[i].mode_change && ev->p[i].layout_change)
                        jobs[i] = (struct gpu_job){.set = s, .i = i, .g = &ev->s->gpus[i], .p = &ev->p[i]};
        x->early = s;
        jobs_start(s);
        return 0;
}

/* Joins the early layouts, and the late ones added to their set; records
 * the GPUs that failed. Returns the first failure in GPU order. */
static int early_join(struct apply_ctx *x, struct mk_error *e) {
        struct job_set *s = x->early;
        if (!s)
                return 0;
        int r = jobs_join(s, e);
        for (size_t i = 0; i < s->n; i++)
                if (s->jobs[i].ran && s->jobs[i].r < 0)
                        x->rep->gpu_failed[s->jobs[i].i] = true;
        free(s->jobs);
        free(s);
        x->early = NULL;
        view_done(&x->early_view);
        return r;
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
        struct job_set set = {.x = x, .phase = MK_PHASE_MODE, .fn = mode_job, .stop_at_failure = true};
        _cleanup_free_ struct gpu_job *jobs = jobs_of(&set, v.s, v.p, true);
        _cleanup_free_ const struct mk_gpu **pending = calloc(v.s->n_gpus ? v.s->n_gpus : 1, sizeof(*pending));
        if (!jobs || !pending)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        bool early = false;
        for (size_t i = 0; x->pipelined && i < v.s->n_gpus; i++)
                early = early || (!v.p[i].mode_change && v.p[i].layout_change);
        if (early) {
                r = early_start(x, &v, e); /* the mode jobs' pointers stay valid: x holds the arrays */
                if (r < 0)
                        return r;
        }
        r = jobs_run(&set, e);
        size_t n_pending = 0;
        for (size_t k = 0; k < set.n; k++) {
                const struct gpu_job *j = &jobs[k];
                if (!j->ran)
                        continue;
                if (j->r < 0) {
                        x->rep->gpu_failed[j->i] = true;
                        continue;
                }
                x->rep->mode_changes++;
                struct gpu_progress *g = gpu_of(x, j->p->gpu_index);
                if (g) {
                        g->mode_changed = true;
                        g->enabled = j->p->mig_enabled;
                }
                if (j->pending)
                        pending[n_pending++] = j->g;
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

static int layout_job(struct apply_ctx *x, struct gpu_job *j) {
        struct gpu_progress *g = gpu_of(x, j->p->gpu_index);
        if (g)
                g->kept = j->p->n_kept_cis;
        return execute_layout(x, j->p, &j->e);
}

static int layout_phase(struct apply_ctx *x, struct mk_error *e) {
        _cleanup_(view_done) struct view v = {0};
        int r = read_view(x, &v, e);
        if (r < 0)
                return r;
        struct job_set *early = x->early;
        bool any = false;
        for (size_t i = 0; i < v.s->n_gpus; i++) {
                if (early && i < early->n && early->jobs[i].p)
                        continue; /* its layout runs already: this read may see it half-way */
                any = any || v.p[i].layout_change;
                if (!v.p[i].layout_change)
                        gpu_finished(x, v.p[i].gpu_index, MK_PHASE_MODE, 0, NULL);
        }
        if (any)
                r = hook(x, MK_HOOK_PRE_APPLY_CONFIG, e);
        if (any && r >= 0)
                r = before_change(x, e);
        if (r < 0)
                return r;
        if (early) {
                /* The GPUs whose mode changed join the early layouts' set,
                 * so that gpu-finished events stay in GPU order. */
                pthread_mutex_lock(&early->lock);
                for (size_t i = 0; i < v.s->n_gpus && i < early->n; i++)
                        if (!early->jobs[i].p && v.p[i].layout_change)
                                early->jobs[i] = (struct gpu_job){.set = early, .i = i, .g = &v.s->gpus[i],
                                                                  .p = &v.p[i]};
                pthread_mutex_unlock(&early->lock);
                jobs_start(early);
                return early_join(x, e);
        }
        /* A GPU that fails stops; the others go on, and a re-run repairs it. */
        struct job_set set = {.x = x, .phase = MK_PHASE_LAYOUT, .fn = layout_job, .finish = true};
        _cleanup_free_ struct gpu_job *jobs = jobs_of(&set, v.s, v.p, false);
        if (!jobs)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        r = jobs_run(&set, e);
        for (size_t k = 0; k < set.n; k++)
                if (jobs[k].ran && jobs[k].r < 0)
                        x->rep->gpu_failed[jobs[k].i] = true;
        return r;
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
        /* Nothing must run between the mode step and the first layout
         * change (no pre-apply-config hook), and a pending mode change
         * cannot fail the apply for want of a reset (--skip-reset). */
        x->pipelined = x->b.ops->concurrent && !x->mode_only && !x->o->sequential && !x->o->skip_reset &&
                       !(x->hooks && x->hooks->n_entries[MK_HOOK_PRE_APPLY_CONFIG] > 0);
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
                /* The mode step failed: the early layouts still end, and report. */
                struct mk_error je = {0};
                int q = early_join(x, &je);
                if (r >= 0 && q < 0) {
                        if (e)
                                *e = je;
                        r = q;
                }
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

static void lock_waiting(void *userdata, const char *what) {
        struct apply_ctx *x = userdata;
        emit(x, (struct mk_progress_event){.kind = MK_PROGRESS_WAITING, .gpu = -1, .what = what});
}

/* The host lock, before anything is read: a second apply plans against what
 * the first one left (docs/engine.md, "One change at a time"). */
static int take_host_lock(struct apply_ctx *x, int *ret_fd, struct mk_error *e) {
        struct mk_host host = {0};
        int r = mk_host_init_from_env(&host);
        if (r < 0)
                return mk_error_set(e, r, "Cannot set up host paths");
        char who[MK_HOST_LOCK_MAX_WHO];
        if (x->o->lock_who)
                snprintf(who, sizeof(who), "%s", x->o->lock_who);
        else
                snprintf(who, sizeof(who), "migkit apply of '%s'", x->nc->name);
        struct mk_host_lock_opts lo = {
                .who = who,
                .timeout_ms = x->o->lock_timeout_ms,
                .cancel = x->o->cancel,
                .waiting = lock_waiting,
                .userdata = x,
        };
        r = mk_host_lock_take(&host, &lo, ret_fd, e);
        mk_host_done(&host);
        return r;
}

int mk_engine_apply(const struct mk_config *c, const struct mk_hooks *hooks, const struct mk_engine_opts *o,
                    struct mk_apply_report *rep, struct mk_error *e) {
        struct apply_ctx x = {.c = c, .hooks = hooks, .o = o, .rep = rep, .t0 = now_ms()};
        if (pthread_mutex_init(&x.lock, NULL) != 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        if (pthread_mutex_init(&x.gate_lock, NULL) != 0) {
                (void) pthread_mutex_destroy(&x.lock);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        if (pthread_cond_init(&x.gate_cond, NULL) != 0) {
                (void) pthread_mutex_destroy(&x.gate_lock);
                (void) pthread_mutex_destroy(&x.lock);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        int lock_fd = -1;
        int r = mk_config_select(c, o->selected_config, &x.nc, e);
        if (r >= 0)
                r = take_host_lock(&x, &lock_fd, e);
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
        mk_host_lock_release(&lock_fd);

        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        emit(&x, (struct mk_progress_event){.kind = MK_PROGRESS_DONE, .gpu = -1, .report = rep,
                                            .error = r < 0 ? r : 0,
                                            .message = r < 0 && e ? mk_error_format(e, buf, sizeof(buf)) : NULL});
        (void) pthread_cond_destroy(&x.gate_cond);
        (void) pthread_mutex_destroy(&x.gate_lock);
        (void) pthread_mutex_destroy(&x.lock);
        return r;
}
