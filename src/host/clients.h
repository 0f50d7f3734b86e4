/* GPU clients around a MIG change (docs/service.md): systemd units stopped
 * (reverse order, only the active ones) and restarted afterwards with
 * `systemctl start --no-block` (queued, so a boot never waits on a unit
 * ordered after migkit.service); containers of listed images killed through
 * docker or containerd's ctr (their orchestrator recreates them). Every
 * command runs from an argv with a timeout (base/spawn.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_MAX_RUNTIME_OUTPUT (4u << 20) /* `docker ps`, `ctr ... list` output */
#define MK_MAX_CONTAINERS 65536          /* containers acted on in one listing */
#define MK_MAX_GPU_CLIENTS 256           /* entries in one client list */
#define MK_MAX_CLIENT_NAME 255           /* bytes in a unit or image name (systemd's UNIT_NAME_MAX - 1) */
#define MK_MAX_GPU_CLIENTS_FILE_BYTES (256u * 1024)

/* Defaults (docs/service.md): the stop of one client and the enqueueing of
 * one start. */
#define MK_CLIENTS_DEFAULT_STOP_MS (120u * 1000)
#define MK_CLIENTS_DEFAULT_START_MS (30u * 1000)

struct mk_yaml_ctx;
struct mk_yaml_node;

/* Which clients to stop around a change, and how long each command may take. */
struct mk_gpu_clients {
        char **systemd_services;        /* NULL-terminated, never NULL once initialised; stopped in reverse order */
        size_t n_systemd_services;
        char **container_images;        /* NULL-terminated, never NULL once initialised */
        size_t n_container_images;
        uint64_t stop_timeout_ms, start_timeout_ms;
};

/* Upstream's default clients (mig-parted v0.15.0 deployments/systemd/hooks.sh and cmd/nvidia-mig-manager), NULL-terminated. */
extern const char *const mk_gpu_clients_default_units[];
extern const char *const mk_gpu_clients_default_images[];

/* Fills *ret with the default lists and timeouts. 0 or -ENOMEM; *ret is
 * written only on success. Free with mk_gpu_clients_done(). */
int mk_gpu_clients_init_default(struct mk_gpu_clients *ret) _nonnull_(1) _wur_;
/* Frees the lists; accepts NULL and an already-done *c. */
void mk_gpu_clients_done(struct mk_gpu_clients *c);

/* A systemd unit name we accept: "name.type", at most MK_MAX_CLIENT_NAME
 * bytes of [A-Za-z0-9:_.\\@-], not starting with '-' or '.' (it goes into an
 * argv, never as an option). An image name: printable, no blanks, not
 * starting with '-'. */
bool mk_unit_name_valid(const char *s) _nonnull_(1);
bool mk_image_name_valid(const char *s) _nonnull_(1);

/* A YAML list of unit names (`units`) or image names at `n` (null: empty),
 * each checked as above and listed once, at most MK_MAX_GPU_CLIENTS;
 * NULL-terminated in *ret, its length in *ret_n. Errors at the node with
 * the context's path. */
int mk_gpu_clients_parse_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool units, char ***ret,
                              size_t *ret_n) _wur_;

/* nvidia-mig-manager's GPU clients file (`version: v1`, `systemd-services:
 * [units]`; other keys are ignored as upstream does): the default
 * timeouts, the listed units and no container images in *ret. Errors:
 * -EINVAL with file:line:column, -E2BIG over MK_MAX_GPU_CLIENTS_FILE_BYTES,
 * read errors. *ret is written only on success. */
int mk_gpu_clients_file_load(const char *path, struct mk_gpu_clients *ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

struct mk_clients_stop_opts {
        const struct mk_gpu_clients *clients;
        /* Called with each unit right before its `systemctl stop` runs, so
         * the caller restarts it even when the stop (or this process) dies
         * half-way, and reports it (this module logs the stop at debug
         * only; the daemons emit a client-stopped progress event). */
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
 * list `c` holds, in its order (units not listed go last, in the given
 * order). Failures are logged, never fatal; returns how many failed. */
unsigned mk_clients_start(const struct mk_gpu_clients *c, char *const *units, size_t n_units);

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
