/* The host lock (hostlock.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/hostlock.h"
#include "base/log.h"

int mk_host_lock_path(const struct mk_host *h, char **ret) {
        const char *root = h->run_root ? h->run_root : "/run"; /* a struct filled by hand */
        return mk_path_join(root, MK_HOST_LOCK_PATH, ret);
}

static uint64_t now_ms(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* "held by pid 42 (migkit apply)" from what the holder wrote, escaped (the
 * file is ours, but anyone who can write /run/migkit could forge it); ""
 * when it says nothing readable. */
static void holder_of(int fd, char *buf, size_t size) {
        char raw[MK_HOST_LOCK_MAX_WHO + 64];
        ssize_t n = pread(fd, raw, sizeof(raw) - 1, 0);
        buf[0] = 0;
        if (n <= 0)
                return;
        raw[n] = 0;
        raw[strcspn(raw, "\n")] = 0;   /* one line: "<pid> <who>" */
        char *end = NULL;
        errno = 0;
        long pid = strtol(raw, &end, 10);
        if (errno || end == raw || pid <= 0 || (*end && *end != ' '))
                return;
        char who[MK_HOST_LOCK_MAX_WHO * 4 + 1];
        (void) mk_log_escape(*end ? end + 1 : "", who, sizeof(who));
        snprintf(buf, size, ", held by pid %ld%s%s%s", pid, *who ? " (" : "", who, *who ? ")" : "");
}

/* Writes "<pid> <who>\n" for the waiters (best effort: the lock works without it). */
static void write_holder(int fd, const char *who) {
        char line[MK_HOST_LOCK_MAX_WHO + 32];
        int n = snprintf(line, sizeof(line), "%ld %.*s\n", (long) getpid(), MK_HOST_LOCK_MAX_WHO, who);
        if (n <= 0 || ftruncate(fd, 0) < 0)
                return;
        ssize_t w = pwrite(fd, line, MIN((size_t) n, sizeof(line) - 1), 0);
        (void) w;
}

static int open_lock(const char *path, struct mk_error *e) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                int r = mk_mkdir_parents(dir, 0755, e);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot take the host's MIG lock");
                        return r;
                }
        }
        /* O_NOFOLLOW | O_NONBLOCK: a link or a FIFO put there is refused, never waited on. */
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd < 0) {
                int r = negative_errno();
                return mk_error_set(e, r, "Cannot open the host's MIG lock '%s': %s", path, strerror(-r));
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return mk_error_set(e, -EINVAL, "Cannot take the host's MIG lock: '%s' is not a regular file", path);
        }
        return fd;
}

int mk_host_lock_take(const struct mk_host *h, const struct mk_host_lock_opts *o, int *ret_fd, struct mk_error *e) {
        static const struct mk_host_lock_opts none = {0};
        if (!o)
                o = &none;
        _cleanup_free_ char *path = NULL;
        if (mk_host_lock_path(h, &path) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        struct mk_error oe = {0};
        _cleanup_close_ int fd = open_lock(path, &oe);
        if (fd == -EACCES || fd == -EPERM || fd == -EROFS) {
                /* Not root (a test, a simulation without --simulate): such a
                 * caller cannot change a real GPU's MIG state anyway. */
                log_warning("%s: going on without it", oe.msg);
                *ret_fd = -1;
                return 0;
        }
        if (fd < 0) {
                if (e)
                        *e = oe;
                return fd;
        }

        int timeout = o->timeout_ms == 0 ? MK_HOST_LOCK_DEFAULT_TIMEOUT_MS : o->timeout_ms;
        uint64_t start = now_ms();
        char holder[MK_HOST_LOCK_MAX_WHO * 4 + 64] = "";
        bool told = false;
        for (;;) {
                if (flock(fd, LOCK_EX | LOCK_NB) == 0)
                        break;
                if (errno == EINTR)
                        continue;
                if (errno != EWOULDBLOCK) {
                        int r = negative_errno();
                        return mk_error_set(e, r, "Cannot lock '%s': %s", path, strerror(-r));
                }
                if (!told) {
                        holder_of(fd, holder, sizeof(holder));
                        char what[sizeof(holder) + 4352], limit[64] = "no time limit";
                        if (timeout >= 0)
                                snprintf(limit, sizeof(limit), "up to %.0f s", (double) timeout / 1000.0);
                        snprintf(what, sizeof(what),
                                 "the host's MIG lock '%s'%s: another command is changing MIG state (%s)", path,
                                 holder, limit);
                        if (o->waiting)
                                o->waiting(o->userdata, what);
                        else
                                log_info("Waiting for %s", what);
                        told = true;
                }
                if (o->cancel && atomic_load(o->cancel))
                        return mk_error_set(e, -ECANCELED, "Stopped while waiting for the host's MIG lock '%s'", path);
                uint64_t waited = now_ms() - start;
                if (timeout >= 0 && waited >= (uint64_t) timeout) {
                        holder_of(fd, holder, sizeof(holder));
                        return mk_error_set(e, -ETIMEDOUT,
                                            "Timed out after %.1f s waiting for the host's MIG lock '%s'%s: another "
                                            "command is changing MIG state (--lock-timeout sets the wait)",
                                            (double) waited / 1000.0, path, holder);
                }
                struct timespec ts = {.tv_nsec = MK_HOST_LOCK_POLL_MS * 1000000L};
                (void) nanosleep(&ts, NULL);
        }
        write_holder(fd, o->who ? o->who : "migkit");
        if (told)
                log_debug("Took the host's MIG lock '%s' after %.1f s", path, (double) (now_ms() - start) / 1000.0);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

void mk_host_lock_release(int *fd) {
        if (!fd || *fd < 0)
                return;
        /* The holder's line goes with the lock, so a waiter never names a
         * process that no longer holds it. */
        int r = ftruncate(*fd, 0);
        (void) r; /* the lock is what matters */
        (void) close(*fd);
        *fd = -1;
}
