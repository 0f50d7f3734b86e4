/* Progress as events: what apply (and the daemons around it) does, reported
 * as typed data through a callback instead of log lines. The CLI renders
 * them for a person (a few lines, one per GPU) or as JSON lines; the daemons
 * install mk_progress_klog(), which writes the klog lines they always wrote.
 * Without a callback the events go to the debug log. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mig/gpu.h"
#include "plan/plan.h"

enum mk_progress_kind {
        MK_PROGRESS_BACKEND,      /* how the GPUs are driven: NVML, or PCI BAR0 without the driver */
        MK_PROGRESS_PLANNED,      /* every GPU's plan, before anything runs */
        MK_PROGRESS_HOOK,         /* a hook entry is about to run */
        MK_PROGRESS_HOOK_OUTPUT,  /* what a failed hook entry printed (captured, not shown otherwise) */
        MK_PROGRESS_CLIENT_STOPPED, /* a GPU client (systemd unit) is stopped for the change: sent right before its stop */
        MK_PROGRESS_WAITING,      /* a long wait begins: for what */
        MK_PROGRESS_GPU_STARTED,  /* one GPU's changes begin (mode or layout) */
        MK_PROGRESS_STEP,         /* one change on one GPU (verbose) */
        MK_PROGRESS_GPU_FINISHED, /* one GPU's changes ended, with counts */
        MK_PROGRESS_WARNING,      /* something skipped or ignored; apply goes on */
        MK_PROGRESS_DONE,         /* apply ended: totals, success or the error */
        _MK_PROGRESS_KIND_MAX,
        _MK_PROGRESS_KIND_INVALID = -EINVAL,
};

enum mk_progress_step {
        MK_STEP_SET_MODE,
        MK_STEP_RESET,
        MK_STEP_DESTROY_CI,
        MK_STEP_DESTROY_GI,
        MK_STEP_CREATE_GI,
        MK_STEP_CREATE_CI,
        _MK_STEP_MAX,
        _MK_STEP_INVALID = -EINVAL,
};

enum mk_progress_phase {
        MK_PHASE_MODE,    /* the MIG mode (and the instances a disabled GPU drops) */
        MK_PHASE_LAYOUT,  /* destroy, then create */
        _MK_PHASE_MAX,
        _MK_PHASE_INVALID = -EINVAL,
};

struct mk_apply_report;

/* One event. Pointers are valid during the callback only. Fields not named
 * for a kind are zero. */
struct mk_progress_event {
        enum mk_progress_kind kind;
        uint64_t t_ms;                   /* since the apply began (0 outside apply) */
        int gpu;                         /* GPU index, -1 when none */
        /* BACKEND */
        const char *backend;             /* "nvml", "pci" */
        const char *backend_description; /* "NVML", "PCI BAR0" */
        /* PLANNED */
        const char *config;              /* the selected config's name */
        const struct mk_snapshot *snapshot;
        const struct mk_gpu_plan *plans; /* snapshot->n_gpus of them */
        bool mode_only;
        /* HOOK, HOOK_OUTPUT */
        const char *hook;                /* "apply-start", ... */
        const char *command;
        const char *output;              /* HOOK_OUTPUT: stdout and stderr, up to 64 KiB */
        /* CLIENT_STOPPED */
        const char *client;
        /* WAITING: a phrase, "the GPU reset of 2 GPUs", "3 GPU pods to be evicted" */
        const char *what;
        /* GPU_STARTED, GPU_FINISHED */
        enum mk_progress_phase phase;
        /* STEP */
        enum mk_progress_step step;
        bool enabled;                    /* SET_MODE: the mode asked for */
        const char *profile;             /* CREATE_*, DESTROY_*: profile name */
        unsigned gi_id, ci_id;
        struct mk_placement placement;
        const char *uuid;                /* DESTROY_CI: the MIG device going away ("" when unknown) */
        const char *bus_id;              /* RESET */
        /* GPU_FINISHED */
        size_t destroyed, created, kept; /* MIG devices (compute instances) */
        size_t destroyed_gis, created_gis; /* GPU instances */
        bool mode_changed;
        uint64_t duration_ms;            /* in this GPU's own steps (shared waits apart) */
        /* GPU_FINISHED, DONE: negative errno when it failed; `message` says why */
        int error;
        /* WARNING, GPU_FINISHED and DONE on failure */
        const char *message;
        /* DONE */
        const struct mk_apply_report *report;
};

typedef void (*mk_progress_fn)(void *userdata, const struct mk_progress_event *ev);

struct mk_progress {
        mk_progress_fn fn;
        void *userdata;
};

const char *mk_progress_kind_to_string(enum mk_progress_kind k);
enum mk_progress_kind mk_progress_kind_from_string(const char *s);
const char *mk_progress_step_to_string(enum mk_progress_step s);
const char *mk_progress_phase_to_string(enum mk_progress_phase p);

/* Delivers ev to p (NULL p or p->fn: the debug log, rendered as by mk_progress_klog). */
void mk_progress_emit(const struct mk_progress *p, const struct mk_progress_event *ev);

/* Shorthands for the events other modules report. */
void mk_progress_waiting(const struct mk_progress *p, int gpu, const char *what);
void mk_progress_client_stopped(const struct mk_progress *p, const char *client);

/* The daemons' renderer: one klog line per event at info (warnings at
 * warning), the lines migkit's daemons always wrote. userdata unused. */
void mk_progress_klog(void *userdata, const struct mk_progress_event *ev);
extern const struct mk_progress mk_progress_klog_sink;

/* One line of text for an event (no newline), as the klog renderer writes
 * it; "" for PLANNED and DONE (several lines: rendered by the caller). For
 * HOOK_OUTPUT the line heads the output, which renderers write after it. */
int mk_progress_format(const struct mk_progress_event *ev, char *buf, size_t size);
