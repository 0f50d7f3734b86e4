/* The node service's own file, service.yaml (docs/service.md): which GPU
 * clients to stop around a change, whether to reboot once when a MIG mode
 * change needs a reset this node cannot do, and the timeouts. Parsed
 * strictly (unknown keys, wrong types, duplicates and bad names are errors
 * with file:line:column and the field path). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_MAX_SERVICE_YAML_BYTES (256u * 1024) /* service.yaml */
#define MK_MAX_GPU_CLIENTS 256                  /* entries in one client list */
#define MK_MAX_CLIENT_NAME 255                  /* bytes in a unit or image name (systemd's UNIT_NAME_MAX - 1) */
#define MK_MAX_SERVICE_TIMEOUT_MS (24ull * 3600 * 1000)

/* Defaults (docs/service.md): the stop of one client, the enqueueing of one
 * start, and the whole apply including client stops. The unit's
 * TimeoutStartSec (15 min) is larger than apply + all starts. */
#define MK_SERVICE_DEFAULT_STOP_MS (120u * 1000)
#define MK_SERVICE_DEFAULT_START_MS (30u * 1000)
#define MK_SERVICE_DEFAULT_APPLY_MS (600u * 1000)

struct mk_service_settings {
        char *file;                     /* for messages; "(defaults)" when built in */
        char **systemd_services;        /* NULL-terminated, never NULL; stopped in reverse order */
        size_t n_systemd_services;
        char **container_images;        /* NULL-terminated, never NULL */
        size_t n_container_images;
        bool reboot;                    /* reboot once when a mode change needs it */
        uint64_t stop_timeout_ms, start_timeout_ms, apply_timeout_ms;
};

/* Upstream's default clients (mig-parted.md §7.4 and §8.5), NULL-terminated. */
extern const char *const mk_service_default_units[];
extern const char *const mk_service_default_images[];

/* The built-in defaults (what a service.yaml with only `version: v1` gives). */
int mk_service_settings_default(struct mk_service_settings **ret) _wur_;

/* Parses service.yaml. Errors: -EINVAL with file:line:column and field path,
 * -E2BIG over MK_MAX_SERVICE_YAML_BYTES, -ENOMEM. */
int mk_service_settings_parse(const char *data, size_t len, const char *file, struct mk_service_settings **ret,
                              struct mk_error *e) _wur_;
/* Reads and parses `path`; -ENOENT (message naming it) when it is missing. */
int mk_service_settings_load(const char *path, struct mk_service_settings **ret, struct mk_error *e) _wur_;

struct mk_service_settings *mk_service_settings_free(struct mk_service_settings *s);
static inline void mk_service_settings_freep(struct mk_service_settings **s) {
        mk_service_settings_free(*s);
}

/* A systemd unit name we accept: "name.type", at most MK_MAX_CLIENT_NAME
 * bytes of [A-Za-z0-9:_.\\@-], not starting with '-' or '.' (it goes into an
 * argv, never as an option). An image name: printable, no blanks, not
 * starting with '-'. */
bool mk_service_unit_name_valid(const char *s);
bool mk_service_image_name_valid(const char *s);
