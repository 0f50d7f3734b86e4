/* Device plugin Allocate latency and memory, on a simulated dgx-h100 with a
 * mixed MIG layout (GPUs 0-1 whole, 2-7 balanced) and the mixed strategy:
 * starts `migkit device-plugin` as a child on a private plugin directory,
 * reads the nvidia.com/mig-1g.10gb device list from ListAndWatch, makes N
 * Allocate calls (one device each, round robin) through the gRPC client
 * (mk_grpc_client_call) and prints the median and p99 latency, and the
 * plugin's VmRSS idle (after start) and after the run, with where the idle
 * RSS goes: /proc/PID/smaps summed per mapping (each shared library's text
 * and data, the heap, thread stacks, other anonymous memory), largest first,
 * RssAnon/RssFile/RssShmem and the thread count from /proc/PID/status.
 *
 * Usage: bench-device-plugin [CALLS]   (default 10000)
 * Needs MIGKIT_BIN (the migkit binary; default <this dir>/../migkit). The
 * simulator is found by `migkit --simulate` beside the binary. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "base/parse.h"
#include "grpc/client.h"
#include "proto/deviceplugin.pb-c.h"

extern char **environ;

static const char *const layout_yaml =
        "version: v1\n"
        "mig-configs:\n"
        "  mixed:\n"
        "    - devices: [0, 1]\n      mig-enabled: false\n"
        "    - devices: [2, 3, 4, 5, 6, 7]\n      mig-enabled: true\n"
        "      mig-devices: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}\n";

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

/* One line of the breakdown: a mapping's name and its Rss in KiB. */
struct rss_part {
        char name[96];
        unsigned long kib;
};

static int cmp_part(const void *a, const void *b) {
        const struct rss_part *x = a, *y = b;
        return x->kib < y->kib ? 1 : x->kib > y->kib ? -1 : 0;
}

/* Prints /proc/PID/smaps summed per mapping name (library basename, [heap],
 * [stack], "anon" for unnamed mappings: thread stacks and arenas), largest
 * first, then the status counters. */
static void rss_breakdown(pid_t pid) {
        char path[64], line[512], cur[96] = "anon";
        struct rss_part parts[256];
        size_t n = 0;
        snprintf(path, sizeof(path), "/proc/%d/smaps", (int) pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f)) {
                unsigned long kib;
                if (sscanf(line, "Rss: %lu kB", &kib) == 1) {
                        size_t i = 0;
                        while (i < n && !streq(parts[i].name, cur))
                                i++;
                        if (i == n && n < ELEMENTSOF(parts)) {
                                snprintf(parts[n].name, sizeof(parts[n].name), "%s", cur);
                                parts[n++].kib = 0;
                        }
                        if (i < n)
                                parts[i].kib += kib;
                        continue;
                }
                /* A mapping header: "start-end perms offset dev inode [path]". */
                char range[64], perms[8], off[16], dev[16];
                unsigned long inode;
                int used = 0;
                if (sscanf(line, "%63s %7s %15s %15s %lu %n", range, perms, off, dev, &inode, &used) == 5 &&
                    strchr(range, '-')) {
                        char *name = line + used;
                        name[strcspn(name, "\n")] = 0;
                        const char *base = strrchr(name, '/');
                        base = base ? base + 1 : name;
                        snprintf(cur, sizeof(cur), "%s", *base ? base : "anon (thread stacks, arenas)");
                }
        }
        qsort(parts, n, sizeof(*parts), cmp_part);
        printf("idle RSS by mapping (KiB):\n");
        for (size_t i = 0; i < n && parts[i].kib > 0; i++)
                printf("  %7lu  %s\n", parts[i].kib, parts[i].name);
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        _cleanup_fclose_ FILE *s = fopen(path, "re");
        while (s && fgets(line, sizeof(line), s))
                if (strneq(line, "RssAnon:", 8) || strneq(line, "RssFile:", 8) || strneq(line, "RssShmem:", 9) ||
                    strneq(line, "Threads:", 8))
                        printf("  %s", line);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

/* VmRSS of pid in KiB, 0 when unknown. */
static unsigned long rss_kib(pid_t pid) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f))
                if (strneq(line, "VmRSS:", 6)) {
                        char *p = line + 6, *end;
                        while (*p == ' ' || *p == '\t')
                                p++;
                        end = p;
                        while (*end >= '0' && *end <= '9')
                                end++;
                        *end = 0;
                        uint64_t v = 0;
                        return mk_parse_u64(p, &v) >= 0 ? (unsigned long) v : 0;
                }
        return 0;
}

/* Runs argv, its stdout to /dev/null when quiet; 0 when it exits 0. */
static int run_wait(char *const argv[], bool quiet) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        if (quiet)
                posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        pid_t pid;
        int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return -r;
        int st;
        if (waitpid(pid, &st, 0) < 0)
                return -errno;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

int main(int argc, char **argv) {
        unsigned calls = 10000;
        if (argc > 1 && (mk_parse_u32(argv[1], &calls) < 0 || calls == 0)) {
                fprintf(stderr, "Usage: bench-device-plugin [CALLS]\n");
                return 2;
        }
        char migkit[4096];
        const char *env_bin = getenv("MIGKIT_BIN");
        if (env_bin && *env_bin)
                snprintf(migkit, sizeof(migkit), "%s", env_bin);
        else {
                ssize_t n = readlink("/proc/self/exe", migkit, sizeof(migkit) - 16);
                if (n <= 0)
                        return 1;
                migkit[n] = 0;
                char *slash = strrchr(migkit, '/');
                snprintf(slash, sizeof(migkit) - (size_t) (slash - migkit), "/../migkit");
        }

        char tmp[] = "/tmp/bench-dp.XXXXXX";
        if (!mkdtemp(tmp)) {
                perror("mkdtemp");
                return 1;
        }
        char state[128], cfg[128], dir[128], sock[192], log[128];
        snprintf(state, sizeof(state), "%s/state.json", tmp);
        snprintf(cfg, sizeof(cfg), "%s/mig.yaml", tmp);
        snprintf(dir, sizeof(dir), "%s/dp", tmp);
        snprintf(log, sizeof(log), "%s/plugin.log", tmp);
        snprintf(sock, sizeof(sock), "%s/nvidia-mig-1g.10gb.sock", dir);
        (void) mkdir(dir, 0700);
        FILE *f = fopen(cfg, "we");
        if (!f || fputs(layout_yaml, f) < 0 || fclose(f) != 0) {
                perror(cfg);
                return 1;
        }
        setenv("MIGKIT_SIM_STATE", state, 1);
        setenv("MIGKIT_HEALTH_RECHECK_MS", "30000", 1);
        char *apply[] = {migkit, (char *) "-q", (char *) "--simulate", (char *) "dgx-h100", (char *) "apply",
                         (char *) "-f", cfg, (char *) "-c", (char *) "mixed", NULL};
        if (run_wait(apply, true) < 0) {
                fprintf(stderr, "apply of the mixed layout failed (%s)\n", migkit);
                return 1;
        }

        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char *plugin[] = {migkit, (char *) "--simulate", (char *) "dgx-h100", (char *) "device-plugin",
                          (char *) "--mig-strategy", (char *) "mixed", (char *) "--device-plugin-path", dir,
                          (char *) "--kubelet-socket", (char *) "", NULL};
        pid_t pid;
        int r = posix_spawn(&pid, migkit, &fa, NULL, plugin, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0) {
                fprintf(stderr, "cannot start %s: %s\n", migkit, strerror(r));
                return 1;
        }
        struct stat st;
        for (int i = 0; i < 1000 && stat(sock, &st) < 0; i++)
                usleep(10 * 1000);

        struct mk_error e = {0};
        struct mk_grpc_client *c = NULL;
        struct mk_grpc_stream *law = NULL;
        _cleanup_buf_done_ struct mk_buf in, out;
        mk_buf_init(&in, MK_GRPC_MAX_SEND_MESSAGE);
        mk_buf_init(&out, MK_GRPC_DEFAULT_MAX_MESSAGE);
        double *lat = calloc(calls, sizeof(double));
        char **ids = NULL;
        size_t n_ids = 0;
        int rc = 1;
        if (!lat || mk_grpc_client_open(sock, &c, &e) < 0 ||
            mk_grpc_client_stream_open(c, "/v1beta1.DevicePlugin/ListAndWatch", NULL, 0, &law, &e) < 0 ||
            mk_grpc_stream_next(law, 10000, &out, NULL, &e) < 0) {
                fprintf(stderr, "cannot read the device list from %s: %s\n", sock, e.msg);
                goto out;
        }
        V1beta1__ListAndWatchResponse *list =
                v1beta1__list_and_watch_response__unpack(NULL, out.len, (const uint8_t *) out.data);
        if (!list || list->n_devices == 0) {
                fprintf(stderr, "empty device list\n");
                goto out;
        }
        n_ids = list->n_devices;
        ids = calloc(n_ids, sizeof(char *));
        for (size_t i = 0; ids && i < n_ids; i++)
                ids[i] = strdup(list->devices[i]->id);
        v1beta1__list_and_watch_response__free_unpacked(list, NULL);
        law = mk_grpc_stream_close(law);
        usleep(500 * 1000);
        unsigned long rss_idle = rss_kib(pid);
        rss_breakdown(pid);

        for (unsigned i = 0; i < calls; i++) {
                V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
                creq.n_devices_ids = 1;
                creq.devices_ids = &ids[i % n_ids];
                V1beta1__ContainerAllocateRequest *cp = &creq;
                V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
                req.n_container_requests = 1;
                req.container_requests = &cp;
                size_t len = v1beta1__allocate_request__get_packed_size(&req);
                uint8_t buf[512];
                if (len > sizeof(buf))
                        goto out;
                v1beta1__allocate_request__pack(&req, buf);
                double t0 = now_us();
                if (mk_grpc_client_call(c, "/v1beta1.DevicePlugin/Allocate", buf, len, 10000, false, &out, NULL, &e) <
                    0) {
                        fprintf(stderr, "Allocate %u failed: %s\n", i, e.msg);
                        goto out;
                }
                lat[i] = now_us() - t0;
        }
        unsigned long rss_after = rss_kib(pid);
        qsort(lat, calls, sizeof(double), cmp_double);
        printf("device-plugin: dgx-h100 mixed MIG, resource nvidia.com/mig-1g.10gb (%zu devices)\n", n_ids);
        printf("Allocate x %u: median %.1f us, p99 %.1f us, max %.1f us\n", calls, lat[calls / 2],
               lat[(size_t) ((double) calls * 0.99)], lat[calls - 1]);
        printf("plugin VmRSS: idle %lu KiB, after %u calls %lu KiB\n", rss_idle, calls, rss_after);
        rc = 0;
out:
        law = mk_grpc_stream_close(law);
        c = mk_grpc_client_close(c);
        kill(pid, SIGTERM);
        int wst;
        (void) waitpid(pid, &wst, 0);
        if (rc != 0) {
                char *cat[] = {(char *) "/bin/cat", log, NULL};
                (void) run_wait(cat, false);
        }
        for (size_t i = 0; ids && i < n_ids; i++)
                free(ids[i]);
        free(ids);
        free(lat);
        char *rm[] = {(char *) "/bin/rm", (char *) "-rf", tmp, NULL};
        (void) run_wait(rm, false);
        return rc;
}
