#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "engine/progress.h"

static const char *const kind_table[_MK_PROGRESS_KIND_MAX] = {
        [MK_PROGRESS_BACKEND] = "backend",
        [MK_PROGRESS_PLANNED] = "planned",
        [MK_PROGRESS_HOOK] = "hook",
        [MK_PROGRESS_HOOK_OUTPUT] = "hook-output",
        [MK_PROGRESS_CLIENT_STOPPED] = "client-stopped",
        [MK_PROGRESS_WAITING] = "waiting",
        [MK_PROGRESS_GPU_STARTED] = "gpu-started",
        [MK_PROGRESS_STEP] = "step",
        [MK_PROGRESS_GPU_FINISHED] = "gpu-finished",
        [MK_PROGRESS_WARNING] = "warning",
        [MK_PROGRESS_DONE] = "done",
};

static const char *const step_table[_MK_STEP_MAX] = {
        [MK_STEP_SET_MODE] = "set-mode",
        [MK_STEP_RESET] = "reset",
        [MK_STEP_DESTROY_CI] = "destroy-compute-instance",
        [MK_STEP_DESTROY_GI] = "destroy-gpu-instance",
        [MK_STEP_CREATE_GI] = "create-gpu-instance",
        [MK_STEP_CREATE_CI] = "create-compute-instance",
};

static const char *const phase_table[_MK_PHASE_MAX] = {
        [MK_PHASE_MODE] = "mode",
        [MK_PHASE_LAYOUT] = "layout",
};

const char *mk_progress_kind_to_string(enum mk_progress_kind k) {
        return k >= 0 && k < _MK_PROGRESS_KIND_MAX ? kind_table[k] : NULL;
}

enum mk_progress_kind mk_progress_kind_from_string(const char *s) {
        for (int i = 0; s && i < _MK_PROGRESS_KIND_MAX; i++)
                if (streq(s, kind_table[i]))
                        return (enum mk_progress_kind) i;
        return _MK_PROGRESS_KIND_INVALID;
}

const char *mk_progress_step_to_string(enum mk_progress_step s) {
        return s >= 0 && s < _MK_STEP_MAX ? step_table[s] : NULL;
}

const char *mk_progress_phase_to_string(enum mk_progress_phase p) {
        return p >= 0 && p < _MK_PHASE_MAX ? phase_table[p] : NULL;
}

static int format_step(const struct mk_progress_event *ev, char *buf, size_t size) {
        switch (ev->step) {
        case MK_STEP_SET_MODE:
                return snprintf(buf, size, "GPU %d: %s MIG mode", ev->gpu, ev->enabled ? "enabling" : "disabling");
        case MK_STEP_RESET:
                return snprintf(buf, size, "GPU %d: resetting (%s)", ev->gpu, ev->bus_id ? ev->bus_id : "");
        case MK_STEP_DESTROY_CI:
                return snprintf(buf, size, "GPU %d: destroying compute instance %u of GPU instance %u (%s%s%s)",
                                ev->gpu, ev->ci_id, ev->gi_id, ev->profile, ev->uuid && *ev->uuid ? ", " : "",
                                ev->uuid ? ev->uuid : "");
        case MK_STEP_DESTROY_GI:
                return snprintf(buf, size, "GPU %d: destroying GPU instance %u (%s at %u:%u)", ev->gpu, ev->gi_id,
                                ev->profile, ev->placement.start, ev->placement.size);
        case MK_STEP_CREATE_GI:
                return snprintf(buf, size, "GPU %d: creating GPU instance %s at %u:%u", ev->gpu, ev->profile,
                                ev->placement.start, ev->placement.size);
        case MK_STEP_CREATE_CI:
                return snprintf(buf, size, "GPU %d: creating compute instance %s at %u:%u in GPU instance %u", ev->gpu,
                                ev->profile, ev->placement.start, ev->placement.size, ev->gi_id);
        default:
                return snprintf(buf, size, "GPU %d: step %d", ev->gpu, (int) ev->step);
        }
}

int mk_progress_format(const struct mk_progress_event *ev, char *buf, size_t size) {
        switch (ev->kind) {
        case MK_PROGRESS_BACKEND:
                if (ev->backend && streq(ev->backend, "pci"))
                        return snprintf(buf, size,
                                        "NVML unavailable and the nvidia module not loaded: changing MIG mode through "
                                        "PCI");
                return snprintf(buf, size, "Driving the GPUs through %s", ev->backend_description);
        case MK_PROGRESS_HOOK:
                return snprintf(buf, size, "Running %s hook: '%s'", ev->hook, ev->command);
        case MK_PROGRESS_HOOK_OUTPUT:
                return snprintf(buf, size, "Output of the failed %s hook '%s':", ev->hook, ev->command);
        case MK_PROGRESS_CLIENT_STOPPED:
                return snprintf(buf, size, "Stopping GPU client '%s'", ev->client);
        case MK_PROGRESS_WAITING:
                if (ev->gpu >= 0)
                        return snprintf(buf, size, "GPU %d: waiting for %s", ev->gpu, ev->what);
                return snprintf(buf, size, "Waiting for %s", ev->what);
        case MK_PROGRESS_GPU_STARTED:
                return snprintf(buf, size, "GPU %d: %s changes", ev->gpu, mk_progress_phase_to_string(ev->phase));
        case MK_PROGRESS_STEP:
                return format_step(ev, buf, size);
        case MK_PROGRESS_GPU_FINISHED:
                if (ev->error < 0)
                        return snprintf(buf, size, "%s", ev->message ? ev->message : "failed");
                return snprintf(buf, size, "GPU %d: %zu destroyed, %zu created, kept %zu (%.1f s)", ev->gpu,
                                ev->destroyed, ev->created, ev->kept, (double) ev->duration_ms / 1000.0);
        case MK_PROGRESS_WARNING:
                return snprintf(buf, size, "%s", ev->message ? ev->message : "");
        default:
                if (size)
                        buf[0] = 0;
                return 0;
        }
}

void mk_progress_klog(void *userdata, const struct mk_progress_event *ev) {
        (void) userdata;
        char buf[1024];
        (void) mk_progress_format(ev, buf, sizeof(buf));
        switch (ev->kind) {
        case MK_PROGRESS_BACKEND:
                if (ev->backend && streq(ev->backend, "pci"))
                        log_info("%s", buf);
                else
                        log_debug("%s", buf);
                break;
        case MK_PROGRESS_HOOK:
        case MK_PROGRESS_CLIENT_STOPPED:
        case MK_PROGRESS_STEP:
        case MK_PROGRESS_WAITING:
                log_info("%s", buf);
                break;
        case MK_PROGRESS_WARNING:
                log_warning("%s", buf);
                break;
        case MK_PROGRESS_HOOK_OUTPUT:
                log_error("%s\n%s", buf, ev->output);
                break;
        case MK_PROGRESS_GPU_FINISHED:
                if (ev->error < 0)
                        log_error("%s", buf);
                else
                        log_debug("%s", buf);
                break;
        case MK_PROGRESS_GPU_STARTED:
                log_debug("%s", buf);
                break;
        default:
                break; /* PLANNED, DONE: the daemon says it in its own words */
        }
}

const struct mk_progress mk_progress_klog_sink = {.fn = mk_progress_klog};

void mk_progress_emit(const struct mk_progress *p, const struct mk_progress_event *ev) {
        if (p && p->fn) {
                p->fn(p->userdata, ev);
                return;
        }
        if (mk_log_get_level() < MK_LOG_DEBUG)
                return;
        char buf[1024];
        (void) mk_progress_format(ev, buf, sizeof(buf));
        if (buf[0])
                log_debug("%s%s%s", buf, ev->output ? "\n" : "", ev->output ? ev->output : "");
}

void mk_progress_waiting(const struct mk_progress *p, int gpu, const char *what) {
        mk_progress_emit(p, &(struct mk_progress_event){.kind = MK_PROGRESS_WAITING, .gpu = gpu, .what = what});
}

void mk_progress_client_stopped(const struct mk_progress *p, const char *client) {
        mk_progress_emit(p, &(struct mk_progress_event){.kind = MK_PROGRESS_CLIENT_STOPPED, .gpu = -1, .client = client});
}
