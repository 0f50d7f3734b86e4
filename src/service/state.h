/* The node service's files: where they are (injectable for tests), the
 * persisted selection; the reboot-once marker's path (its content: host/reboot.h)
 * (docs/service.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_SERVICE_ETC_DIR "/etc/migkit"
#define MK_SERVICE_STATE_DIR "/var/lib/migkit"
#define MK_MAX_STATE_FILE_BYTES 4096 /* selected-config */

struct mk_service_paths {
        char *etc_dir;          /* MIGKIT_ETC_DIR, default /etc/migkit */
        char *state_dir;        /* MIGKIT_STATE_DIR, default /var/lib/migkit */
        char *config_file;      /* <etc>/config.yaml (mig-parted v1) */
        char *hooks_file;       /* <etc>/hooks.yaml (mig-parted hooks v1) */
        char *settings_file;    /* <etc>/service.yaml */
        char *selection_file;   /* <state>/selected-config */
        char *marker_file;      /* <state>/reboot-attempted */
};

/* Builds the paths from two directories (NULL: the default). 0 or -ENOMEM,
 * -EINVAL for a relative or empty directory. Free with mk_service_paths_done(). */
int mk_service_paths_init(const char *etc_dir, const char *state_dir, struct mk_service_paths *ret) _wur_;
/* As mk_service_paths_init() with MIGKIT_ETC_DIR and MIGKIT_STATE_DIR (read
 * with secure_getenv; unset or empty: the defaults). */
int mk_service_paths_from_env(struct mk_service_paths *ret, struct mk_error *e) _wur_;
void mk_service_paths_done(struct mk_service_paths *p);

/* A config name the selection file can hold: 1..253 bytes, printable,
 * no leading or trailing blank. */
bool mk_service_name_storable(const char *name);
/* 0 for a storable name, else -EINVAL with "Config name '<name>' cannot be
 * persisted (...)". */
int mk_service_check_name(const char *name, struct mk_error *e);

/* The persisted selection, malloc'd in *ret. -ENOENT when none was made;
 * -EINVAL for a file that does not hold one valid name (message naming
 * it); read errors as mk_read_file() (base/fileio.h). */
int mk_service_selection_read(const struct mk_service_paths *p, char **ret, struct mk_error *e) _wur_;
/* Persists `name` atomically (the state directory is created when
 * missing). Writes nothing when the file already holds it; *ret_changed
 * (may be NULL) says whether it was written. */
int mk_service_selection_write(const struct mk_service_paths *p, const char *name, bool *ret_changed,
                               struct mk_error *e) _wur_;
