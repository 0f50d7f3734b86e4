/* The reboot-once rule, its marker and the `reboot` command (reboot.h). */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "host/reboot.h"

#define MK_REBOOT_OUTPUT_CAP (16 * 1024)

static const char *const outcome_table[_MK_REBOOT_OUTCOME_MAX] = {
        [MK_REBOOT_APPLIED] = "applied",
        [MK_REBOOT_NEEDED] = "reboot-needed",
        [MK_REBOOT_FAILED_MODE_OK] = "failed-mode-ok",
        [MK_REBOOT_FAILED] = "failed",
};

const char *mk_reboot_outcome_to_string(enum mk_reboot_outcome o) {
        return o >= 0 && o < _MK_REBOOT_OUTCOME_MAX ? outcome_table[o] : NULL;
}

struct mk_reboot_decision mk_reboot_decide(enum mk_reboot_outcome o, bool reboot_enabled, bool marker) {
        switch (o) {
        case MK_REBOOT_APPLIED:
                return (struct mk_reboot_decision){.reboot = false, .exit_code = 0, .marker_after = false};
        case MK_REBOOT_FAILED_MODE_OK:
                /* The mode step passed: a later mode change may reboot again. */
                return (struct mk_reboot_decision){.reboot = false, .exit_code = 1, .marker_after = false};
        case MK_REBOOT_NEEDED:
                if (reboot_enabled && !marker)
                        return (struct mk_reboot_decision){.reboot = true, .exit_code = 0, .marker_after = true};
                return (struct mk_reboot_decision){.reboot = false, .exit_code = 1, .marker_after = marker};
        case MK_REBOOT_FAILED:
        default:
                return (struct mk_reboot_decision){.reboot = false, .exit_code = 1, .marker_after = marker};
        }
}

int mk_reboot_marker_read(const char *path, char **ret, struct mk_error *e) {
        return mk_read_text_file(path, MK_MAX_REBOOT_MARKER_BYTES, ret, e);
}

int mk_reboot_marker_create(const char *path, const char *text, struct mk_error *e) {
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        int r = mk_mkdir_parents(dirname(copy), 0755, e);
        if (r < 0)
                return r;
        _cleanup_close_ int lock = -1;
        r = mk_lock_for_write(path, &lock, e);
        if (r < 0)
                return r;
        return mk_write_file_atomic(path, text, strlen(text), 0644, e);
}

int mk_reboot_marker_remove(const char *path, bool *ret_removed, struct mk_error *e) {
        bool removed = true;
        if (unlink(path) < 0) {
                if (errno != ENOENT) {
                        int r = negative_errno();
                        return mk_error_set(e, r, "Failed to remove '%s': %s", path, strerror(-r));
                }
                removed = false;
        }
        if (removed) {
                int r = mk_fsync_parent_dir(path);
                if (r < 0)
                        return mk_error_set(e, r, "Failed to sync the directory of '%s': %s", path, strerror(-r));
        }
        if (ret_removed)
                *ret_removed = removed;
        return 0;
}

int mk_reboot_run(struct mk_error *e) {
        const char *argv[] = {"reboot", NULL};
        struct mk_spawn_opts so = {.argv = argv, .timeout_ms = MK_REBOOT_TIMEOUT_MS, .capture = true,
                                   .output_cap = MK_REBOOT_OUTPUT_CAP};
        struct mk_spawn_result res = {0};
        int r = mk_spawn(&so, &res, e);
        if (r < 0) {
                mk_error_prefix(e, "Cannot run 'reboot'");
                return r;
        }
        if (res.timed_out || res.exit_status != 0)
                r = mk_error_set(e, -EIO, "'reboot' failed (%s %d)%s%s",
                                 res.timed_out ? "timed out, status" : "exit status", res.exit_status,
                                 res.output && *res.output ? ": " : "", res.output ? res.output : "");
        mk_spawn_result_done(&res);
        return r;
}
