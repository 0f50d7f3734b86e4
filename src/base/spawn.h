/* Runs an external command from an argument vector, never through a shell:
 * own process group, stdin from /dev/null, no inherited descriptors beyond
 * stdio, default signal dispositions, optional timeout that kills the whole
 * group, optional bounded capture of stdout+stderr. For hooks, systemctl,
 * nvidia-smi and the like. Thread-safe (no globals); the caller must not set
 * SIGCHLD to SIG_IGN nor reap children it did not start. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/macro.h"

struct mk_error;

/* After a timeout the group gets SIGTERM, then SIGKILL this much later. */
#define MK_SPAWN_KILL_GRACE_MS 2000
/* Bytes of mk_spawn_opts.input: what a pipe holds without a reader (POSIX PIPE_BUF minimum is 512; Linux holds 64 KiB). */
#define MK_SPAWN_MAX_INPUT 4096

struct mk_spawn_opts {
        /* argv[0] is the command; without '/', it is looked up in the PATH of
         * envp (or of our environment when envp is NULL; a default PATH when
         * none is set; empty PATH entries are skipped). NULL-terminated. */
        const char *const *argv;
        const char *const *envp;        /* NULL: inherit our environment */
        const char *cwd;                /* NULL: inherit */
        int timeout_ms;                 /* <= 0: no timeout */
        bool capture;                   /* stdout+stderr together into the result */
        size_t output_cap;              /* bytes kept when capturing (> 0); the rest is read and dropped */
        bool forward_output;            /* not capturing: child's stdout/stderr are ours; else /dev/null */
        /* While it runs, SIGTERM and SIGINT of ours stop the child: its group
         * gets SIGTERM, SIGKILL after the grace, it is reaped, and
         * stopped_by says which signal came (the old handlers are back).
         * One that came when no child ran (before the start, after the
         * exit) is raised again once the old handlers are back. */
        bool stop_on_signal;
        const char *input;              /* NULL: stdin is /dev/null; else the child reads these bytes, then EOF
                                         * (at most MK_SPAWN_MAX_INPUT: written into the pipe before the fork) */
        /* When the child exits, whatever is left in its process group (a
         * background job it started) gets SIGKILL, before the child is
         * reaped, so the group id cannot have been reused. A process that
         * must outlive the command leaves the group itself (setsid). */
        bool kill_group_at_exit;
};

struct mk_spawn_result {
        int exit_status;        /* exit code, or 128 + signal number */
        bool timed_out;         /* killed because timeout_ms passed */
        int stopped_by;         /* stop_on_signal: the signal of ours that killed it, else 0 */
        char *output;           /* capture: malloc'd, NUL-terminated; else NULL */
        size_t output_len;
        bool output_truncated;  /* more than output_cap bytes came */
};

/* Runs o->argv and waits for it. Returns 0 when the child ran, whatever its
 * exit status (a timeout too: timed_out set, exit_status 128 + SIGTERM or
 * SIGKILL). Negative errno when it could not be started: -ENOENT "command
 * 'x' not found in PATH", -ENOENT/-EACCES/... for a missing cwd or a
 * command that cannot be executed, -EINVAL for bad options; e gets the
 * message. Output captured while the child runs; anything its left-behind
 * children write after it exits is not. *ret is written only on success;
 * free it with mk_spawn_result_done(). */
int mk_spawn(const struct mk_spawn_opts *o, struct mk_spawn_result *ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

/* Frees the output; accepts NULL. */
void mk_spawn_result_done(struct mk_spawn_result *r);

/* The last non-blank line of a captured output, for an error message (the
 * reason a command gives last): trailing blanks and newlines are cut off
 * r->output in place. Points into r->output; "" when nothing was captured. */
const char *mk_spawn_output_last_line(struct mk_spawn_result *r) _nonnull_(1);
