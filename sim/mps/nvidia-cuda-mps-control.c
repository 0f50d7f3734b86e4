/* A stand-in for NVIDIA's `nvidia-cuda-mps-control` (NVIDIA MPS
 * documentation, "nvidia-cuda-mps-control"), for tests on the simulator.
 *
 *   nvidia-cuda-mps-control -d   start the control daemon (in the background)
 *   nvidia-cuda-mps-control -f   the same in the foreground
 *   nvidia-cuda-mps-control      client: commands from stdin, answers on stdout
 *
 * Both find each other through $CUDA_MPS_PIPE_DIRECTORY (default
 * /tmp/nvidia-mps) as the real ones do: the daemon listens on the UNIX socket
 * "control" there and writes "nvidia-cuda-mps-control.pid"; it logs to
 * $CUDA_MPS_LOG_DIRECTORY/control.log. Every command, and "start" and
 * "quit", is recorded in the simulator's state (mksim_mps_record()), with
 * the compute mode of the GPUs there, so a test sees what was asked.
 * Commands: set_default_device_pinned_mem_limit DEV VALUE,
 * get_default_device_pinned_mem_limit DEV, set_default_active_thread_percentage P,
 * get_default_active_thread_percentage, quit; others answer
 * "Unrecognized command". A second daemon on a live pipe directory refuses to
 * start. Exit 1 from the client when no daemon answers. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mksim.h"

#define MAX_COMMAND 127
#define MAX_DEVICES 64
#define MAX_VALUE 32 /* a command's argument, and a value the daemon keeps */

static const char *pipe_dir(void) {
        const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
        return p && *p ? p : "/tmp/nvidia-mps";
}

static const char *log_dir(void) {
        const char *p = getenv("CUDA_MPS_LOG_DIRECTORY");
        return p && *p ? p : "/var/log/nvidia-mps";
}

static int socket_addr(struct sockaddr_un *a) {
        memset(a, 0, sizeof(*a));
        a->sun_family = AF_UNIX;
        int n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/control", pipe_dir());
        return n < 0 || (size_t) n >= sizeof(a->sun_path) ? -1 : 0;
}

static int connect_daemon(void) {
        struct sockaddr_un a;
        if (socket_addr(&a) < 0)
                return -1;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        if (connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static void log_line(const char *msg) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/control.log", log_dir());
        FILE *f = fopen(path, "a");
        if (!f)
                return;
        time_t t = time(NULL);
        char ts[32];
        strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", gmtime(&t));
        fprintf(f, "[%s] %s\n", ts, msg);
        fclose(f);
}

static void record(const char *command) {
        if (mksim_mps_record(pipe_dir(), command) < 0)
                fprintf(stderr, "nvidia-cuda-mps-control (simulated): cannot record '%s': %s\n", command,
                        mksim_last_error());
}

/* Values are kept as the client sent them, as text: an argument is already
 * cut to MAX_VALUE - 1 bytes, so it is copied whole. */
struct settings {
        char thread_percentage[MAX_VALUE];
        char pinned[MAX_DEVICES][MAX_VALUE];
};

/* One command; the answer into out. Returns 1 for quit. */
static int handle(struct settings *st, char *cmd, FILE *out) {
        size_t n = strlen(cmd);
        while (n && (cmd[n - 1] == '\n' || cmd[n - 1] == '\r' || cmd[n - 1] == ' '))
                cmd[--n] = 0;
        if (!*cmd)
                return 0;
        record(cmd);
        log_line(cmd);
        char verb[64] = "", a[MAX_VALUE] = "", b[MAX_VALUE] = "";
        char *w[3] = {verb, a, b};
        size_t cap[3] = {sizeof(verb), sizeof(a), sizeof(b)};
        int k = 0;
        for (const char *p = cmd; *p && k < 3;) {
                while (*p == ' ')
                        p++;
                size_t len = strcspn(p, " ");
                if (!len)
                        break;
                snprintf(w[k], cap[k], "%.*s", (int) len, p);
                k++;
                p += len;
        }
        unsigned dev = MAX_DEVICES;
        if (k >= 2) {
                char *end = NULL;
                unsigned long v = strtoul(a, &end, 10);
                if (end && !*end && v < MAX_DEVICES)
                        dev = (unsigned) v;
        }
        if (!strcmp(verb, "quit")) {
                fprintf(out, "Quitting\n");
                return 1;
        } else if (!strcmp(verb, "set_default_active_thread_percentage") && k == 2) {
                memcpy(st->thread_percentage, a, MAX_VALUE);
                fprintf(out, "%s\n", a);
        } else if (!strcmp(verb, "get_default_active_thread_percentage") && k == 1) {
                fprintf(out, "%s\n", st->thread_percentage);
        } else if (!strcmp(verb, "set_default_device_pinned_mem_limit") && k == 3 && dev < MAX_DEVICES) {
                memcpy(st->pinned[dev], b, MAX_VALUE);
        } else if (!strcmp(verb, "get_default_device_pinned_mem_limit") && k == 2 && dev < MAX_DEVICES) {
                fprintf(out, "%s\n", *st->pinned[dev] ? st->pinned[dev] : "0");
        } else {
                fprintf(out, "Unrecognized command: %s\n", cmd);
        }
        return 0;
}

/* The daemon: serves the control socket until "quit" or SIGTERM. `ready`
 * (or -1) gets one byte once the socket listens. */
static int serve(int ready) {
        struct sockaddr_un a;
        if (socket_addr(&a) < 0) {
                fprintf(stderr, "pipe directory name too long\n");
                return 1;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        unlink(a.sun_path); /* a dead daemon's socket */
        if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 16) < 0) {
                fprintf(stderr, "Cannot listen on '%s': %s\n", a.sun_path, strerror(errno));
                return 1;
        }
        char pidfile[4096];
        snprintf(pidfile, sizeof(pidfile), "%s/nvidia-cuda-mps-control.pid", pipe_dir());
        FILE *pf = fopen(pidfile, "w");
        if (pf) {
                fprintf(pf, "%d\n", (int) getpid());
                fclose(pf);
        }
        record("start");
        log_line("Startup");
        if (ready >= 0) {
                (void) !write(ready, "1", 1);
                close(ready);
        }
        struct settings st = {.thread_percentage = "100.0"};
        for (;;) {
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                FILE *in = fdopen(c, "r+");
                if (!in) {
                        close(c);
                        continue;
                }
                char line[MAX_COMMAND + 2];
                int quit = 0;
                while (!quit && fgets(line, sizeof(line), in))
                        quit = handle(&st, line, in);
                fclose(in);
                if (quit)
                        break;
        }
        unlink(a.sun_path);
        unlink(pidfile);
        log_line("Shutdown");
        return 0;
}

static int client(void) {
        int fd = connect_daemon();
        if (fd < 0) {
                fprintf(stderr, "Cannot find MPS control daemon process\n");
                return 1;
        }
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
                if (write(fd, buf, n) != (ssize_t) n)
                        return 1;
        shutdown(fd, SHUT_WR);
        ssize_t m;
        while ((m = read(fd, buf, sizeof(buf))) > 0)
                fwrite(buf, 1, (size_t) m, stdout);
        close(fd);
        return 0;
}

int main(int argc, char **argv) {
        if (argc == 1)
                return client();
        if (argc != 2 || (strcmp(argv[1], "-d") && strcmp(argv[1], "-f"))) {
                fprintf(stderr, "usage: nvidia-cuda-mps-control [-d | -f]\n");
                return 1;
        }
        struct stat sb;
        if (stat(pipe_dir(), &sb) < 0 || !S_ISDIR(sb.st_mode)) {
                fprintf(stderr, "Pipe directory '%s' does not exist\n", pipe_dir());
                return 1;
        }
        int live = connect_daemon();
        if (live >= 0) {
                close(live);
                fprintf(stderr, "An instance of this daemon is already running\n");
                return 1;
        }
        if (!strcmp(argv[1], "-f"))
                return serve(-1);
        int p[2];
        if (pipe(p) < 0)
                return 1;
        pid_t pid = fork();
        if (pid < 0)
                return 1;
        if (pid == 0) {
                close(p[0]);
                setsid();
                /* Away from the caller's output: the daemon outlives it. */
                FILE *devnull = freopen("/dev/null", "w", stdout);
                (void) devnull;
                devnull = freopen("/dev/null", "r", stdin);
                (void) devnull;
                devnull = freopen("/dev/null", "w", stderr);
                (void) devnull;
                signal(SIGHUP, SIG_IGN);
                _exit(serve(p[1]));
        }
        close(p[1]);
        char c;
        int ok = read(p[0], &c, 1) == 1;
        return ok ? 0 : 1;
}
