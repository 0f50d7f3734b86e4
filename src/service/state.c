/* Paths, the persisted selection and the reboot marker (state.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "host/reboot.h"
#include "service/state.h"
#include "spec/config.h" /* MK_MAX_CONFIG_NAME */

void mk_service_paths_done(struct mk_service_paths *p) {
        if (!p)
                return;
        free(p->etc_dir);
        free(p->state_dir);
        free(p->config_file);
        free(p->hooks_file);
        free(p->settings_file);
        free(p->selection_file);
        free(p->marker_file);
        *p = (struct mk_service_paths){0};
}

static char *dir_dup(const char *d) {
        size_t n = strlen(d);
        while (n > 1 && d[n - 1] == '/')
                n--;
        return strndup(d, n);
}

int mk_service_paths_init(const char *etc_dir, const char *state_dir, struct mk_service_paths *ret) {
        if (!etc_dir)
                etc_dir = MK_SERVICE_ETC_DIR;
        if (!state_dir)
                state_dir = MK_SERVICE_STATE_DIR;
        if (etc_dir[0] != '/' || state_dir[0] != '/')
                return -EINVAL;
        struct mk_service_paths p = {0};
        p.etc_dir = dir_dup(etc_dir);
        p.state_dir = dir_dup(state_dir);
        int r = !p.etc_dir || !p.state_dir ? -ENOMEM : 0;
        if (r >= 0)
                r = mk_path_join(p.etc_dir, "config.yaml", &p.config_file);
        if (r >= 0)
                r = mk_path_join(p.etc_dir, "hooks.yaml", &p.hooks_file);
        if (r >= 0)
                r = mk_path_join(p.etc_dir, "service.yaml", &p.settings_file);
        if (r >= 0)
                r = mk_path_join(p.state_dir, "selected-config", &p.selection_file);
        if (r >= 0)
                r = mk_path_join(p.state_dir, MK_REBOOT_MARKER_NAME, &p.marker_file);
        if (r < 0) {
                mk_service_paths_done(&p);
                return r;
        }
        *ret = p;
        return 0;
}

int mk_service_paths_from_env(struct mk_service_paths *ret, struct mk_error *e) {
        const char *etc = secure_getenv("MIGKIT_ETC_DIR"), *state = secure_getenv("MIGKIT_STATE_DIR");
        if (etc && !*etc)
                etc = NULL;
        if (state && !*state)
                state = NULL;
        int r = mk_service_paths_init(etc, state, ret);
        if (r == -EINVAL)
                return mk_error_set(e, r, "MIGKIT_ETC_DIR ('%s') and MIGKIT_STATE_DIR ('%s') must be absolute paths",
                                    etc ? etc : MK_SERVICE_ETC_DIR, state ? state : MK_SERVICE_STATE_DIR);
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        return 0;
}

bool mk_service_name_storable(const char *name) {
        size_t n = strlen(name);
        if (n == 0 || n > MK_MAX_CONFIG_NAME || name[0] == ' ' || name[n - 1] == ' ')
                return false;
        for (const unsigned char *p = (const unsigned char *) name; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

int mk_service_check_name(const char *name, struct mk_error *e) {
        if (!mk_service_name_storable(name))
                return mk_error_set(e, -EINVAL,
                                    "Config name '%s' cannot be persisted (1 to %d printable characters, no leading "
                                    "or trailing blank)",
                                    name, MK_MAX_CONFIG_NAME);
        return 0;
}

int mk_service_selection_read(const struct mk_service_paths *p, char **ret, struct mk_error *e) {
        _cleanup_free_ char *s = NULL;
        int r = mk_read_text_file(p->selection_file, MK_MAX_STATE_FILE_BYTES, &s, e);
        if (r < 0)
                return r;
        if (!mk_service_name_storable(s))
                return mk_error_set(e, -EINVAL,
                                    "'%s' is corrupt: it must hold one config name on one line; select again with "
                                    "'migkit service select NAME'",
                                    p->selection_file);
        *ret = TAKE_PTR(s);
        return 0;
}

int mk_service_selection_write(const struct mk_service_paths *p, const char *name, bool *ret_changed,
                               struct mk_error *e) {
        int r = mk_service_check_name(name, e);
        if (r < 0)
                return r;
        r = mk_mkdir_parents(p->state_dir, 0755, e);
        if (r < 0)
                return r;
        /* Under the writers' lock, which also removes the temporary file of a
         * `select` killed before its rename. */
        _cleanup_close_ int lock = -1;
        r = mk_lock_for_write(p->selection_file, &lock, e);
        if (r < 0)
                return r;
        _cleanup_free_ char *old = NULL;
        struct mk_error ignored = {0};
        if (mk_service_selection_read(p, &old, &ignored) >= 0 && streq(old, name)) {
                if (ret_changed)
                        *ret_changed = false;
                return 0;
        }
        _cleanup_free_ char *line = NULL;
        if (asprintf(&line, "%s\n", name) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        r = mk_write_file_atomic(p->selection_file, line, strlen(line), 0644, e);
        if (r < 0)
                return r;
        if (ret_changed)
                *ret_changed = true;
        return 0;
}
