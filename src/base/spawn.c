#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/spawn.h"

extern char **environ;

/* Used when neither the child's environment nor ours has PATH (the value
 * systemd gives services). */
#define MK_SPAWN_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MK_SPAWN_READ_CHUNK 16384
/* Without pidfd_open() (Linux < 5.3) we look for the child's exit this often. */
#define MK_SPAWN_POLL_FALLBACK_MS 20
/* After the child exits, read at most this much more of what it left in the
 * pipe, so a grandchild that keeps writing cannot hold us. */
#define MK_SPAWN_DRAIN_MAX (1024 * 1024)
#define MK_SPAWN_ARGV_LOG_MAX 2048

enum child_stage {
        STAGE_SETUP = 1,
        STAGE_CHDIR,
        STAGE_EXEC,
};

/* What the child writes to the CLOEXEC error pipe when it cannot exec. */
struct child_report {
        int stage;
        int err;
};

/* Everything the child needs, prepared before fork(): between fork() and
 * execve() the child only makes async-signal-safe calls (no malloc), as
 * other threads may have held locks at fork time. */
struct child_ctx {
        char *const *candidates;        /* paths to try execve() on, in order */
        char *const *argv;
        char *const *envp;
        const char *cwd;
        int stdin_fd, out_fd, err_fd;   /* out_fd -1: leave 1 and 2 alone */
        int max_fd;
};

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void closep_many(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

/* Moves fd to 3 or above (CLOEXEC), so the child's dup2() onto 0..2 never
 * clobbers a descriptor it still needs. Takes the result of open() or
 * similar: a negative fd means that call failed with errno. Returns the fd
 * or -errno; the original is closed when moved. */
static int fd_move_above_stdio(int fd) {
        if (fd < 0)
                return negative_errno();
        if (fd > STDERR_FILENO)
                return fd;
        int n = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        int r = n < 0 ? negative_errno() : n;
        close(fd);
        return r;
}

static const char *env_lookup(const char *const *envp, const char *name) {
        size_t n = strlen(name);
        for (const char *const *i = envp; *i; i++)
                if (strneq(*i, name, n) && (*i)[n] == '=')
                        return *i + n + 1;
        return NULL;
}

/* The paths execve() is tried on: argv[0] itself when it has a '/', else
 * each non-empty PATH entry joined with it. */
static int build_candidates(const char *cmd, const char *path, char ***ret) {
        size_t n = 0, alloc = 2;
        _cleanup_strv_free_ char **l = calloc(alloc, sizeof(char *));
        if (!l)
                return -ENOMEM;
        if (strchr(cmd, '/')) {
                l[0] = strdup(cmd);
                if (!l[0])
                        return -ENOMEM;
                *ret = TAKE_PTR(l);
                return 0;
        }
        size_t cl = strlen(cmd);
        for (const char *p = path; *p;) {
                size_t dl = strcspn(p, ":");
                if (dl > 0) {
                        if (n + 2 > alloc) {
                                char **nl = reallocarray(l, alloc * 2, sizeof(char *));
                                if (!nl)
                                        return -ENOMEM;
                                l = nl;
                                alloc *= 2;
                        }
                        char *c = malloc(dl + 1 + cl + 1);
                        if (!c)
                                return -ENOMEM;
                        memcpy(c, p, dl);
                        c[dl] = '/';
                        memcpy(c + dl + 1, cmd, cl + 1);
                        l[n++] = c;
                        l[n] = NULL;
                }
                p += dl;
                if (*p == ':')
                        p++;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

_noreturn_ static void child_fail(int err_fd, int stage, int err) {
        struct child_report rep = {.stage = stage, .err = err};
        ssize_t w = write(err_fd, &rep, sizeof(rep));
        (void) w;
        _exit(127);
}

_noreturn_ static void child_run(const struct child_ctx *c) {
        int err_fd = c->err_fd;

        /* Our signal mask blocks everything here (see mk_spawn()): reset
         * dispositions first, then unblock, so no handler of the parent
         * ever runs in the child. Errors are for SIGKILL, SIGSTOP and
         * libc-internal signals. */
        struct sigaction sa = {.sa_handler = SIG_DFL};
        sigemptyset(&sa.sa_mask);
        for (int sig = 1; sig < NSIG; sig++)
                (void) sigaction(sig, &sa, NULL);
        sigset_t empty;
        sigemptyset(&empty);
        if (sigprocmask(SIG_SETMASK, &empty, NULL) < 0)
                child_fail(err_fd, STAGE_SETUP, errno);

        if (setpgid(0, 0) < 0)
                child_fail(err_fd, STAGE_SETUP, errno);

        /* All our descriptors are >= 3, so these never clobber each other. */
        if (dup2(c->stdin_fd, STDIN_FILENO) < 0)
                child_fail(err_fd, STAGE_SETUP, errno);
        if (c->out_fd >= 0 &&
            (dup2(c->out_fd, STDOUT_FILENO) < 0 || dup2(c->out_fd, STDERR_FILENO) < 0))
                child_fail(err_fd, STAGE_SETUP, errno);

        /* Keep only the error pipe, as fd 3, and close everything above. */
        if (err_fd != 3) {
                if (dup3(err_fd, 3, O_CLOEXEC) < 0)
                        child_fail(err_fd, STAGE_SETUP, errno);
                err_fd = 3;
        }
        bool closed = false;
#ifdef SYS_close_range
        closed = syscall(SYS_close_range, 4U, ~0U, 0U) == 0;
#endif
        if (!closed)
                for (int fd = 4; fd < c->max_fd; fd++)
                        (void) close(fd);

        if (c->cwd && chdir(c->cwd) < 0)
                child_fail(err_fd, STAGE_CHDIR, errno);

        /* As execvpe(): keep looking after "not there" errors, remember
         * EACCES, stop at anything else. No /bin/sh fallback for ENOEXEC. */
        bool eacces = false;
        int last = ENOENT;
        for (char *const *p = c->candidates; *p; p++) {
                execve(*p, c->argv, c->envp);
                last = errno;
                switch (last) {
                case EACCES:
                        eacces = true;
                        break;
                case ENOENT:
                case ENOTDIR:
                case ESTALE:
                case ENODEV:
                case ETIMEDOUT:
                        break;
                default:
                        child_fail(err_fd, STAGE_EXEC, last);
                }
        }
        child_fail(err_fd, STAGE_EXEC, eacces ? EACCES : last);
}

static void log_argv(const char *const *argv) {
        if (mk_log_get_level() < MK_LOG_DEBUG && !mk_log_area_enabled("spawn"))
                return;
        _cleanup_buf_done_ struct mk_buf b = {.cap = MK_SPAWN_ARGV_LOG_MAX};
        bool cut = false;
        for (const char *const *a = argv; *a && !cut; a++)
                cut = mk_buf_printf(&b, "%s'%s'", a == argv ? "" : " ", *a) < 0;
        log_debug_area("spawn", "Running %s%s", mk_buf_str(&b), cut ? " ..." : "");
}

static void kill_group(pid_t pid, int sig) {
        if (kill(-pid, sig) < 0 && errno == ESRCH)
                (void) kill(pid, sig);
}

/* Reads what is available without blocking. Keeps up to the cap, drops the
 * rest. Returns 1 at end of file (or a read error), else 0. `budget`, when
 * not NULL, bounds the bytes read and is decreased. */
static int read_output(int fd, struct mk_buf *out, bool *truncated, size_t *budget) {
        char chunk[MK_SPAWN_READ_CHUNK];
        for (;;) {
                if (budget && *budget == 0)
                        return 0;
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN ? 0 : 1;
                }
                if (n == 0)
                        return 1;
                if (budget)
                        *budget = (size_t) n >= *budget ? 0 : *budget - (size_t) n;
                size_t room = out->cap - out->len;
                size_t keep = MIN((size_t) n, room);
                if (keep < (size_t) n)
                        *truncated = true;
                if (keep > 0 && mk_buf_append(out, chunk, keep) < 0)
                        *truncated = true; /* out of memory: drop it too */
        }
}

static int wait_reap(pid_t pid, int *ret_status) {
        int status;
        for (;;) {
                if (waitpid(pid, &status, 0) >= 0)
                        break;
                if (errno != EINTR)
                        return negative_errno();
        }
        if (ret_status)
                *ret_status = status;
        return 0;
}

static int report_start_failure(const struct mk_spawn_opts *o, const struct child_report *rep,
                                struct mk_error *e) {
        const char *cmd = o->argv[0];
        int r = rep->err > 0 ? -rep->err : -EIO;
        switch (rep->stage) {
        case STAGE_CHDIR:
                return mk_error_set(e, r, "Failed to change directory to '%s' to run '%s': %s", o->cwd, cmd,
                                    strerror(-r));
        case STAGE_EXEC:
                if (r == -ENOENT && !strchr(cmd, '/'))
                        return mk_error_set(e, r, "command '%s' not found in PATH", cmd);
                return mk_error_set(e, r, "Failed to execute '%s': %s", cmd, strerror(-r));
        default:
                return mk_error_set(e, r, "Failed to set up the process for '%s': %s", cmd, strerror(-r));
        }
}

/* One run of mk_spawn(): what the steps below share. fds[]: stdin
 * (/dev/null), output read end, output write end, error pipe read end,
 * error pipe write end. */
enum { FD_IN, FD_OUT_R, FD_OUT_W, FD_ERR_R, FD_ERR_W, _FD_MAX };

struct run {
        const struct mk_spawn_opts *o;
        const char *cmd;
        int fds[_FD_MAX];
        int pidfd;
        pid_t pid;              /* > 0 while the child is ours to reap */
        uint64_t start;
        struct mk_buf out;
        bool timed_out, truncated;
        int stopped_by;
};

/* The signal received while a stop_on_signal child runs (one at a time). */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
        stop_signal = sig;
}

/* Opens the child's stdin, output and error pipe. */
static int run_open_fds(struct run *x, struct mk_error *e) {
        const struct mk_spawn_opts *o = x->o;
        int *fds = x->fds, r = 0;
        if (o->input) {
                size_t n = strlen(o->input);
                int p[2];
                if (n > MK_SPAWN_MAX_INPUT)
                        return mk_error_set(e, -EINVAL, "Input for '%s' is over %u bytes", x->cmd, MK_SPAWN_MAX_INPUT);
                if (pipe2(p, O_CLOEXEC) < 0) {
                        int k = negative_errno();
                        return mk_error_set(e, k, "Failed to create a pipe for '%s': %s", x->cmd, strerror(-k));
                }
                /* Fits the pipe's buffer: the write never waits for the child. */
                ssize_t w = n ? write(p[1], o->input, n) : 0;
                int werr = errno;
                (void) close(p[1]);
                if (w != (ssize_t) n) {
                        (void) close(p[0]);
                        return mk_error_set(e, w < 0 ? -werr : -EIO, "Failed to write the input of '%s'", x->cmd);
                }
                fds[FD_IN] = fd_move_above_stdio(p[0]);
        } else
                fds[FD_IN] = fd_move_above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC | O_NOCTTY));
        if (fds[FD_IN] < 0)
                return mk_error_set(e, fds[FD_IN], "Failed to open /dev/null for '%s': %s", x->cmd,
                                    strerror(-fds[FD_IN]));
        if (o->capture) {
                int p[2];
                if (pipe2(p, O_CLOEXEC) < 0) {
                        r = negative_errno();
                } else {
                        fds[FD_OUT_R] = fd_move_above_stdio(p[0]);
                        fds[FD_OUT_W] = fd_move_above_stdio(p[1]);
                        r = fds[FD_OUT_R] < 0 ? fds[FD_OUT_R] : MIN(fds[FD_OUT_W], 0);
                        if (r == 0 && fcntl(fds[FD_OUT_R], F_SETFL, O_NONBLOCK) < 0)
                                r = negative_errno();
                }
        } else if (!o->forward_output) {
                fds[FD_OUT_W] = fd_move_above_stdio(open("/dev/null", O_WRONLY | O_CLOEXEC | O_NOCTTY));
                r = MIN(fds[FD_OUT_W], 0);
        }
        if (r < 0)
                return mk_error_set(e, r, "Failed to set up the output of '%s': %s", x->cmd, strerror(-r));
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                r = negative_errno();
        else {
                fds[FD_ERR_R] = p[0];
                fds[FD_ERR_W] = fd_move_above_stdio(p[1]);
                r = MIN(fds[FD_ERR_W], 0);
        }
        if (r < 0)
                return mk_error_set(e, r, "Failed to create a pipe for '%s': %s", x->cmd, strerror(-r));
        return 0;
}

/* Forks the child (all signals blocked around fork(), so no handler of
 * ours runs in it) and waits until it has exec'd or reported why not. */
static int run_start(struct run *x, char *const *candidates, struct mk_error *e) {
        struct rlimit rl;
        int max_fd = 65536;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < INT_MAX)
                max_fd = (int) rl.rlim_cur;
        struct child_ctx ctx = {
                .candidates = candidates,
                .argv = (char *const *) x->o->argv,
                .envp = (char *const *) (x->o->envp ? x->o->envp : (const char *const *) environ),
                .cwd = x->o->cwd,
                .stdin_fd = x->fds[FD_IN],
                .out_fd = x->fds[FD_OUT_W],
                .err_fd = x->fds[FD_ERR_W],
                .max_fd = max_fd,
        };

        x->start = now_ms();
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pid_t pid = fork();
        if (pid == 0)
                child_run(&ctx);
        int fork_errno = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (pid < 0)
                return mk_error_set(e, fork_errno > 0 ? -fork_errno : -EIO, "Failed to fork to run '%s': %s", x->cmd,
                                    strerror(fork_errno));
        x->pid = pid;
        /* Also set the group here, so kill(-pid) works even if we time out
         * before the child got to it. EACCES once it has exec'd: fine. */
        (void) setpgid(pid, pid);
        closep_many(&x->fds[FD_ERR_W], 1);
        closep_many(&x->fds[FD_OUT_W], 1);
        closep_many(&x->fds[FD_IN], 1);

        /* The error pipe closes on a successful execve() (CLOEXEC), or
         * carries a report when the child gave up. */
        struct child_report rep;
        ssize_t n;
        do
                n = read(x->fds[FD_ERR_R], &rep, sizeof(rep));
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t) sizeof(rep)) {
                (void) wait_reap(pid, NULL);
                x->pid = -1;
                return report_start_failure(x->o, &rep, e);
        }
#ifdef SYS_pidfd_open
        x->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
#endif
        return 0;
}

/* Waits for the child to exit, reading its output as it comes and enforcing
 * the timeout (SIGTERM to its group, SIGKILL after the grace). Returns once
 * it exited (not yet reaped). */
static int run_wait_exit(struct run *x, struct mk_error *e) {
        const struct mk_spawn_opts *o = x->o;
        int *fds = x->fds;
        uint64_t deadline = o->timeout_ms > 0 ? x->start + (uint64_t) o->timeout_ms : UINT64_MAX;
        uint64_t kill_at = UINT64_MAX;
        int sent = 0, r;
        for (;;) {
                siginfo_t si = {};
                if (waitid(P_PID, (id_t) x->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
                        if (errno == EINTR)
                                continue;
                        r = negative_errno();
                        x->pid = -1; /* ECHILD: not ours to reap any more */
                        return mk_error_set(e, r, "Failed to wait for '%s': %s", x->cmd, strerror(-r));
                }
                if (si.si_pid == x->pid) {
                        /* Exited but not reaped: its pid, hence the group
                         * id, cannot be reused yet, so this kill cannot hit
                         * a stranger. It takes down what the timed-out
                         * command left in its group. */
                        if (x->timed_out || x->stopped_by || o->kill_group_at_exit) {
                                if (o->kill_group_at_exit && !x->timed_out && !x->stopped_by)
                                        log_debug_area("spawn", "'%s' exited: killing what is left of its "
                                                       "process group", x->cmd);
                                kill_group(x->pid, SIGKILL);
                        }
                        if (fds[FD_OUT_R] >= 0) {
                                size_t budget = MK_SPAWN_DRAIN_MAX;
                                (void) read_output(fds[FD_OUT_R], &x->out, &x->truncated, &budget);
                        }
                        return 0;
                }

                uint64_t now = now_ms();
                if (sent == 0 && o->stop_on_signal && stop_signal) {
                        x->stopped_by = stop_signal;
                        log_debug_area("spawn", "Signal %d: terminating the process group of '%s'", (int) stop_signal,
                                       x->cmd);
                        kill_group(x->pid, SIGTERM);
                        sent = SIGTERM;
                        kill_at = now + MK_SPAWN_KILL_GRACE_MS;
                }
                if (sent == 0 && now >= deadline) {
                        x->timed_out = true;
                        log_debug_area("spawn", "'%s' ran past %d ms, terminating its process group", x->cmd,
                                       o->timeout_ms);
                        kill_group(x->pid, SIGTERM);
                        sent = SIGTERM;
                        kill_at = now + MK_SPAWN_KILL_GRACE_MS;
                }
                if (sent == SIGTERM && now >= kill_at) {
                        log_debug_area("spawn", "'%s' still running, killing its process group", x->cmd);
                        kill_group(x->pid, SIGKILL);
                        sent = SIGKILL;
                }

                uint64_t next = sent == 0 ? deadline : sent == SIGTERM ? kill_at : UINT64_MAX;
                int wait_ms = next == UINT64_MAX ? -1 : (int) MIN(next - now, (uint64_t) INT_MAX);
                if (x->pidfd < 0 || (o->stop_on_signal && sent == 0)) /* a signal just before poll: seen soon */
                        wait_ms = wait_ms < 0 ? MK_SPAWN_POLL_FALLBACK_MS : MIN(wait_ms, MK_SPAWN_POLL_FALLBACK_MS);

                struct pollfd pfd[2];
                nfds_t np = 0;
                int out_idx = -1;
                if (fds[FD_OUT_R] >= 0) {
                        out_idx = (int) np;
                        pfd[np++] = (struct pollfd) {.fd = fds[FD_OUT_R], .events = POLLIN};
                }
                if (x->pidfd >= 0)
                        pfd[np++] = (struct pollfd) {.fd = x->pidfd, .events = POLLIN};
                if (poll(pfd, np, wait_ms) < 0 && errno != EINTR) {
                        r = negative_errno();
                        return mk_error_set(e, r, "Failed to wait for '%s': %s", x->cmd, strerror(-r));
                }
                if (out_idx >= 0 && (pfd[out_idx].revents & (POLLIN | POLLHUP | POLLERR)) &&
                    read_output(fds[FD_OUT_R], &x->out, &x->truncated, NULL) > 0)
                        closep_many(&fds[FD_OUT_R], 1);
        }
}

/* Reaps the exited child and fills *ret. */
static int run_finish(struct run *x, struct mk_spawn_result *ret, struct mk_error *e) {
        int status = 0;
        int r = wait_reap(x->pid, &status);
        x->pid = -1;
        if (r < 0)
                return mk_error_set(e, r, "Failed to wait for '%s': %s", x->cmd, strerror(-r));
        struct mk_spawn_result res = {
                .exit_status = WIFEXITED(status) ? WEXITSTATUS(status)
                               : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255,
                .timed_out = x->timed_out,
                .stopped_by = x->stopped_by,
                .output_truncated = x->truncated,
        };
        if (x->o->capture) {
                res.output_len = x->out.len;
                res.output = mk_buf_take(&x->out);
                if (!res.output)
                        return mk_error_set(e, -ENOMEM, "Failed to collect the output of '%s'", x->cmd);
        }
        log_debug_area("spawn", "'%s' finished with status %d%s (%llu ms)", x->cmd, res.exit_status,
                       x->timed_out ? " after its timeout" : "", (unsigned long long) (now_ms() - x->start));
        *ret = res;
        return 0;
}

/* Whatever happened: no child left behind, every fd closed. */
static void run_done(struct run *x) {
        if (x->pid > 0) {
                /* Failing after the fork: do not leave the command behind. */
                kill_group(x->pid, SIGKILL);
                (void) wait_reap(x->pid, NULL);
        }
        closep_many(x->fds, _FD_MAX);
        closep_many(&x->pidfd, 1);
        mk_buf_done(&x->out);
}

int mk_spawn(const struct mk_spawn_opts *o, struct mk_spawn_result *ret, struct mk_error *e) {
        if (!o->argv || !o->argv[0] || !o->argv[0][0])
                return mk_error_set(e, -EINVAL, "No command to run");
        if (o->capture && o->output_cap == 0)
                return mk_error_set(e, -EINVAL, "output_cap is required to capture the output of '%s'",
                                    o->argv[0]);
        const char *cmd = o->argv[0];
        log_argv(o->argv);

        const char *path = o->envp ? env_lookup(o->envp, "PATH") : secure_getenv("PATH");
        if (!path)
                path = MK_SPAWN_DEFAULT_PATH;
        _cleanup_strv_free_ char **candidates = NULL;
        int r = build_candidates(cmd, path, &candidates);
        if (r < 0)
                return mk_error_set(e, r, "Failed to run '%s': %s", cmd, strerror(-r));

        _cleanup_(run_done) struct run x = {
                .o = o,
                .cmd = cmd,
                .fds = {-1, -1, -1, -1, -1},
                .pidfd = -1,
                .pid = -1,
                .out = {.cap = o->output_cap},
        };
        r = run_open_fds(&x, e);
        struct sigaction old[2], sa = {.sa_handler = on_stop_signal}; /* no SA_RESTART: poll returns */
        sigemptyset(&sa.sa_mask);
        if (o->stop_on_signal) {
                stop_signal = 0;
                (void) sigaction(SIGTERM, &sa, &old[0]);
                (void) sigaction(SIGINT, &sa, &old[1]);
        }
        if (r >= 0)
                r = run_start(&x, candidates, e);
        if (r >= 0)
                r = run_wait_exit(&x, e);
        if (r >= 0)
                r = run_finish(&x, ret, e);
        if (o->stop_on_signal) {
                /* A signal that stopped no child (it came before the start or
                 * after the exit) goes to the handler it was meant for. */
                int missed = x.stopped_by ? 0 : stop_signal;
                (void) sigaction(SIGTERM, &old[0], NULL);
                (void) sigaction(SIGINT, &old[1], NULL);
                if (missed)
                        (void) raise(missed);
        }
        return r;
}

void mk_spawn_result_done(struct mk_spawn_result *r) {
        if (!r)
                return;
        free(r->output);
        r->output = NULL;
        r->output_len = 0;
}

const char *mk_spawn_output_last_line(struct mk_spawn_result *r) {
        if (!r->output)
                return "";
        size_t len = strnlen(r->output, r->output_len);
        while (len > 0 && strchr("\n\r \t", r->output[len - 1]))
                len--;
        r->output[len] = 0;
        r->output_len = len;
        const char *nl = strrchr(r->output, '\n');
        return nl ? nl + 1 : r->output;
}
