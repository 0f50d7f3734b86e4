/* The NVML simulator's per-process queries under polling: the calls a
 * utilisation watcher (libmigkit-vgpu's, DCGM-style readers) makes every
 * period, against a machine with CUDA processes running.
 *
 * Creates a dgx-a100 machine in a temporary directory, starts PROCS CUDA
 * processes on each of the first GPUS GPUs (`cuda-sim-driver duty`: 3 ms
 * busy every 10 ms) and waits until NVML lists them; then, for each query on
 * GPU 0 (and the process utilisation of every GPU in turn), calls it for
 * SECONDS from one thread and prints calls per second, the median and p99 of
 * a call, the minor page faults per call (getrusage) and what the live region
 * leaves in the caller's RSS afterwards (the Rss of its mapping,
 * /proc/self/smaps).
 *
 * Usage: bench-nvml-sim [SECONDS [PROCS [GPUS]]]   (default 2 s a query, 4 processes on each of 8 GPUs)
 * Needs MIGKIT_NVML_LIB (the simulator's libnvidia-ml.so.1) and
 * MIGKIT_SIM_DRIVER (the cuda-sim-driver test program, run on the CUDA
 * driver simulator). bench/run nvml-sim sets both. */
#include <dlfcn.h>
#include <ftw.h>
#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/macro.h"
#include "nvml/nvml-abi.h"

extern char **environ;

/* nvml.h layouts of the utilisation queries (not in the product's NVML ABI list). */
typedef struct {
        unsigned int gpu, memory;
} util_t;
typedef struct {
        unsigned int pid;
        unsigned long long timeStamp;
        unsigned int smUtil, memUtil, encUtil, decUtil;
} proc_util_t;

static nvmlReturn_t (*p_init)(void);
static nvmlReturn_t (*p_handle)(unsigned, nvmlDevice_t *);
static nvmlReturn_t (*p_procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
static nvmlReturn_t (*p_mem)(nvmlDevice_t, nvmlMemory_t *);
static nvmlReturn_t (*p_util)(nvmlDevice_t, util_t *);
static nvmlReturn_t (*p_name)(nvmlDevice_t, char *, unsigned);
static nvmlReturn_t (*p_proc_util)(nvmlDevice_t, proc_util_t *, unsigned *, unsigned long long);

static nvmlDevice_t devs[8], dev;
static unsigned n_gpus, turn;

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static nvmlReturn_t q_proc_util(void) {
        proc_util_t s[64];
        unsigned n = 64;
        return p_proc_util(dev, s, &n, 0);
}

/* GPU 0..n_gpus-1 in turn, as a reader of every GPU does each period. */
static nvmlReturn_t q_proc_util_all(void) {
        proc_util_t s[64];
        unsigned n = 64;
        return p_proc_util(devs[turn++ % n_gpus], s, &n, 0);
}

static nvmlReturn_t q_procs(void) {
        nvmlProcessInfo_t p[64];
        unsigned n = 64;
        return p_procs(dev, &n, p);
}

static nvmlReturn_t q_mem(void) {
        nvmlMemory_t m;
        return p_mem(dev, &m);
}

static nvmlReturn_t q_name(void) {
        char name[96];
        return p_name(dev, name, sizeof(name));
}

static nvmlReturn_t q_util(void) {
        util_t u;
        return p_util(dev, &u);
}

/* Rss of the mappings of the live region (<state>.live) in this process, KiB. */
static unsigned long live_rss_kib(void) {
        char line[512], first[128];
        unsigned long sum = 0, kib;
        bool in_live = false;
        FILE *f = fopen("/proc/self/smaps", "re");
        while (f && fgets(line, sizeof(line), f)) {
                if (sscanf(line, "%127s", first) != 1)
                        continue;
                if (first[strlen(first) - 1] != ':') { /* a mapping's header: "start-end perms offset dev inode path" */
                        line[strcspn(line, "\n")] = 0;
                        size_t n = strlen(line);
                        in_live = n > 5 && streq(line + n - 5, ".live");
                } else if (in_live && sscanf(line, "Rss: %lu kB", &kib) == 1)
                        sum += kib;
        }
        if (f)
                fclose(f);
        return sum;
}

static void run(const char *name, nvmlReturn_t (*q)(void), double seconds) {
        size_t cap = 1 << 20, n = 0;
        double *lat = malloc(cap * sizeof(*lat));
        struct rusage r0, r1;
        if (!lat)
                return;
        getrusage(RUSAGE_SELF, &r0);
        double t0 = now_us(), end = t0 + seconds * 1e6, t = t0;
        while (t < end && n < cap) {
                nvmlReturn_t r = q();
                double t2 = now_us();
                if (r != NVML_SUCCESS) {
                        fprintf(stderr, "%s: NVML error %d\n", name, (int) r);
                        break;
                }
                lat[n++] = t2 - t;
                t = t2;
        }
        getrusage(RUSAGE_SELF, &r1);
        if (n > 0) {
                qsort(lat, n, sizeof(*lat), cmp_double);
                printf("%-48s %7.0f calls/s  median %8.1f us  p99 %8.1f us  %7.1f minor faults/call  live RSS %5lu KiB\n",
                       name, (double) n / ((t - t0) / 1e6), lat[n / 2], lat[n * 99 / 100],
                       (double) (r1.ru_minflt - r0.ru_minflt) / (double) n, live_rss_kib());
        }
        free(lat);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st, (void) flag, (void) ftw;
        return remove(p);
}

static void *sym(void *lib, const char *name) {
        void *p = dlsym(lib, name);
        if (!p) {
                fprintf(stderr, "the library lacks %s\n", name);
                exit(1);
        }
        return p;
}

int main(int argc, char **argv) {
        double seconds = argc > 1 ? strtod(argv[1], NULL) : 2.0;
        unsigned procs = argc > 2 ? (unsigned) strtoul(argv[2], NULL, 10) : 4;
        n_gpus = argc > 3 ? (unsigned) strtoul(argv[3], NULL, 10) : 8;
        const char *lib_path = getenv("MIGKIT_NVML_LIB"), *driver = getenv("MIGKIT_SIM_DRIVER");
        char dir[] = "/tmp/bench-nvml-sim-XXXXXX", state[128];
        pid_t pids[256];
        unsigned started = 0;
        int rc = 1;

        if (!lib_path || !driver || seconds <= 0 || n_gpus < 1 || n_gpus > 8 || procs < 1 || procs * n_gpus > 256) {
                fprintf(stderr, "usage: bench-nvml-sim [SECONDS [PROCS [GPUS<=8]]] (PROCS*GPUS<=256); needs "
                                "MIGKIT_NVML_LIB and MIGKIT_SIM_DRIVER\n");
                return 2;
        }
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(state, sizeof(state), "%s/m.json", dir);
        setenv("MIGKIT_SIM_STATE", state, 1);
        setenv("MIGKIT_SIM_MACHINE", "dgx-a100", 1);
        void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
                fprintf(stderr, "cannot load %s: %s\n", lib_path, dlerror());
                return 1;
        }
        p_init = sym(lib, "nvmlInit_v2");
        p_handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
        p_procs = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
        p_mem = sym(lib, "nvmlDeviceGetMemoryInfo");
        p_util = sym(lib, "nvmlDeviceGetUtilizationRates");
        p_proc_util = sym(lib, "nvmlDeviceGetProcessUtilization");
        p_name = sym(lib, "nvmlDeviceGetName");
        if (p_init() != NVML_SUCCESS) {
                fprintf(stderr, "nvmlInit failed\n");
                return 1;
        }
        for (unsigned g = 0; g < n_gpus; g++)
                if (p_handle(g, &devs[g]) != NVML_SUCCESS) {
                        fprintf(stderr, "no handle for GPU %u\n", g);
                        return 1;
                }
        dev = devs[0];

        /* 3 ms busy every 10 ms, for far longer than the bench runs. */
        for (; started < procs * n_gpus; started++) {
                char *args[] = { (char *) driver, (char *) "duty", (char *) "3000000", (char *) "10000000",
                                 (char *) "360000", NULL };
                char visible[32];
                snprintf(visible, sizeof(visible), "%u", started % n_gpus);
                setenv("CUDA_VISIBLE_DEVICES", visible, 1);
                if (posix_spawn(&pids[started], driver, NULL, NULL, args, environ) != 0) {
                        fprintf(stderr, "cannot start %s\n", driver);
                        goto out;
                }
        }
        unsetenv("CUDA_VISIBLE_DEVICES");
        for (unsigned g = 0; g < n_gpus; g++)
                for (int tries = 0;; tries++) {
                        nvmlProcessInfo_t p[300];
                        unsigned n = 300;
                        if (p_procs(devs[g], &n, p) == NVML_SUCCESS && n >= procs)
                                break;
                        if (tries == 500) {
                                fprintf(stderr, "the CUDA processes of GPU %u did not show in NVML\n", g);
                                goto out;
                        }
                        usleep(20000);
                }
        usleep(300000); /* a few hundred ms of kernels booked */
        printf("NVML simulator, dgx-a100 with %u CUDA processes (30 %% busy each) on each of %u GPUs, %.1f s a query\n",
               procs, n_gpus, seconds);
        run("nvmlDeviceGetProcessUtilization", q_proc_util, seconds);
        run("nvmlDeviceGetProcessUtilization, GPUs in turn", q_proc_util_all, seconds);
        run("nvmlDeviceGetComputeRunningProcesses_v3", q_procs, seconds);
        run("nvmlDeviceGetMemoryInfo", q_mem, seconds);
        run("nvmlDeviceGetUtilizationRates", q_util, seconds);
        run("nvmlDeviceGetName (no live region)", q_name, seconds);
        rc = 0;
out:
        for (unsigned i = 0; i < started; i++)
                kill(pids[i], SIGKILL);
        for (unsigned i = 0; i < started; i++)
                waitpid(pids[i], NULL, 0);
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        return rc;
}
