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
#include "host/clients.h"

#define MK_MAX_SERVICE_YAML_BYTES (256u * 1024) /* service.yaml */
#define MK_MAX_SERVICE_TIMEOUT_MS (24ull * 3600 * 1000)

/* Default of the whole apply including client stops (docs/service.md); the
 * clients' own timeouts are in host/clients.h. The unit's TimeoutStartSec
 * (15 min) is larger than apply + all starts. */
#define MK_SERVICE_DEFAULT_APPLY_MS (600u * 1000)

struct mk_service_settings {
        char *file;                     /* for messages; "(defaults)" when built in */
        struct mk_gpu_clients clients;  /* gpu-clients and the stop/start timeouts */
        bool reboot;                    /* reboot once when a mode change needs it */
        uint64_t apply_timeout_ms;
};

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
