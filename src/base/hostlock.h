/* The host lock: one command that changes MIG state at a time per host.
 * apply, the boot service, the MIG manager, the scheduler's node agent and
 * the idle mode switch each hold it while they read the GPUs, plan and
 * change them, so a second one plans against the state the first left
 * (docs/engine.md, "One change at a time"). It is an exclusive flock on
 * <run root>/migkit/mig.lock (MK_HOST_RUN of struct mk_host: /run, or
 * MIGKIT_RUN_ROOT; migkit --simulate points it into the simulated machine's
 * host tree). The kernel drops it when the holder's descriptor closes, a
 * SIGKILL included: no stale lock survives its process. The holder writes
 * its pid and what it does into the file, so a waiter can say who it waits
 * for. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>

#include "base/macro.h"

struct mk_error;
struct mk_host;

#define MK_HOST_LOCK_PATH "migkit/mig.lock"             /* below the run root */
#define MK_HOST_LOCK_DEFAULT_TIMEOUT_MS (5 * 60 * 1000) /* --lock-timeout's default */
#define MK_HOST_LOCK_POLL_MS 50                          /* how often a waiter tries again */
#define MK_HOST_LOCK_MAX_WHO 200                         /* bytes of `who` kept in the file */

struct mk_host_lock_opts {
        /* What the holder does, for the waiters' message ("migkit apply
         * -c all-1g.10gb", "the MIG manager"); NULL: "migkit". */
        const char *who;
        /* How long to wait for a holder: 0 the default, < 0 without limit.
         * After it: -ETIMEDOUT, saying who holds the lock. */
        int timeout_ms;
        /* Set (from a signal handler, another thread) to stop waiting: -ECANCELED. */
        const atomic_bool *cancel;
        /* Called once, when the lock is held by another and this one begins
         * to wait: `what` says for what ("the host's MIG lock
         * '/run/migkit/mig.lock', held by pid 42 (migkit apply -c x)"). NULL:
         * an info log line. */
        void (*waiting)(void *userdata, const char *what);
        void *userdata;
};

/* Takes the host lock, waiting for it as `o` says; *ret_fd holds it (close
 * it, or mk_host_lock_release(), to release it), written only on success.
 * Creates <run root>/migkit (0755) and the lock file (0644) when missing;
 * when that is not permitted (EACCES, EPERM, EROFS: not root, who alone
 * changes a real GPU's MIG state) it warns and returns 0 with *ret_fd = -1,
 * no lock taken. Errors name the lock file: -ETIMEDOUT, -ECANCELED, or
 * open's errno. The
 * lock is per open file: a process holding it that asks again waits for
 * itself, so each flow takes it once, at its top. */
int mk_host_lock_take(const struct mk_host *h, const struct mk_host_lock_opts *o, int *ret_fd, struct mk_error *e)
        _nonnull_(1, 3) _wur_;

/* The lock file's path for host `h` (malloc'd in *ret): 0 or -ENOMEM/-EINVAL. */
int mk_host_lock_path(const struct mk_host *h, char **ret) _nonnull_(1, 2) _wur_;

/* Releases a lock from mk_host_lock_take() and sets *fd to -1; accepts -1. */
void mk_host_lock_release(int *fd);
