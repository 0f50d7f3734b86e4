/* GPU clients around a MIG change (docs/service.md): systemd units stopped
 * (reverse order, only the active ones) and restarted afterwards with
 * `systemctl start --no-block` (queued, so a boot never waits on a unit
 * ordered after migkit.service); containers of listed images killed through
 * docker or containerd's ctr (their orchestrator recreates them). Every
 * command runs from an argv with a timeout (base/spawn.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "service/settings.h"

#define MK_MAX_RUNTIME_OUTPUT (4u << 20) /* `docker ps`, `ctr ... list` output */
#define MK_MAX_CONTAINERS 65536          /* containers acted on in one listing */

struct mk_clients_stop_opts {
        const struct mk_service_settings *settings;
        /* Called with each unit right before its `systemctl stop` runs, so
         * the caller restarts it even when the stop (or this process) dies
         * half-way. */
        void (*stopping)(void *userdata, const char *unit);
        void *userdata;
};

/* Stops the GPU clients: each listed unit that `systemctl is-active` reports
 * active, last listed first, then the containers of listed images (docker
 * when its CLI is on PATH and docker.service is active; `ctr -n k8s.io`
 * likewise with containerd.service). The first failure stops the walk and
 * is returned with the reason in `e`; the units already reported through
 * stopping() are for the caller to restart. Without systemctl on PATH
 * nothing is stopped (a warning). */
int mk_clients_stop(const struct mk_clients_stop_opts *o, struct mk_error *e);

/* Enqueues `systemctl start --no-block UNIT` for each of `units` that the
 * settings list, in the settings' order (units not listed go last, in the
 * given order). Failures are logged, never fatal; returns how many failed. */
unsigned mk_clients_start(const struct mk_service_settings *s, char *const *units, size_t n_units);

/* Does container image reference `image` ("nvcr.io/nvidia/k8s-device-plugin:v0.14.1",
 * "...@sha256:...") belong to listed `name`? Its repository (without tag
 * and digest) must equal `name` or end with "/" + `name`. */
bool mk_image_matches(const char *image, const char *name);

/* From `docker ps --format '{{.ID}} {{.Image}}'` output, the ids of the
 * containers whose image matches one of `images` (NULL-terminated), in
 * output order, NULL-terminated in *ret. -EINVAL for a malformed line. */
int mk_docker_ps_select(const char *output, char *const *images, char ***ret, struct mk_error *e) _wur_;

/* From `ctr containers list` (CONTAINER IMAGE RUNTIME) and `ctr tasks list`
 * (TASK PID STATUS) output, the ids of the containers whose image matches
 * and whose task is RUNNING. -EINVAL for a malformed line. */
int mk_ctr_select(const char *containers, const char *tasks, char *const *images, char ***ret, struct mk_error *e)
        _wur_;
