/* bench-vgpu: libmigkit-vgpu.so beside HAMi-core's algorithms, on the CUDA
 * driver simulator (bench/run vgpu sets up the environment).
 *
 * 1. Accounting error under an allocation storm with kills. Workers
 *    allocate and free at random (1-64 MiB, cuMemAlloc_v2/cuMemFree_v2);
 *    some are killed with SIGKILL in the middle; the survivors stop and
 *    hold. Then what each accounting says the container uses is compared
 *    with the simulator's truth (NVML used memory). "ours": the workers run
 *    with libmigkit-vgpu.so preloaded, its region read as cuMemGetInfo
 *    reads it. "hami": HAMi-core's documented algorithm (HAMi-core)
 *    re-implemented below: sum of per-process totals checked before the
 *    allocation and re-checked after it under a process-local mutex; the
 *    slot cleared by an exit handler (so not on SIGKILL); dead slots
 *    compacted only when an allocation would not fit.
 * 2. Overhead per cuMemAlloc+cuMemFree pair and per launch, with and
 *    without the library (prog-vgpu bench-alloc / bench-launch).
 * 3. Compute share achieved vs asked, per workload kind (prog-vgpu burn),
 *    and HAMi-core's token bucket (HAMi-core) re-implemented for the
 *    same kinds.
 *
 * bench-vgpu [--sections mem,overhead,share] [--rounds N] [--seconds S] */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/config.h"
#include "vgpu/cuda-abi.h"
#include "vgpu/region.h"
#include "vgpu/share.h"
#include "vgpu/track.h"

#define MIB (1024ull * 1024ull)
#define WORKERS 6
#define CAP (4096 * MIB)

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
        struct timespec ts = { (time_t) (ns / 1000000000ull), (long) (ns % 1000000000ull) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ---- the driver, as the workers reach it ---- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
static alloc_fn cu_alloc;
static free_fn cu_free;

static int driver_setup(void) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h)
                return -1;
        CUresult (*init)(unsigned) = (CUresult (*)(unsigned)) dlsym(h, "cuInit");
        CUresult (*get)(CUdevice *, int) = (CUresult (*)(CUdevice *, int)) dlsym(h, "cuDeviceGet");
        CUresult (*retain)(CUcontext *, CUdevice) = (CUresult (*)(CUcontext *, CUdevice)) dlsym(h, "cuDevicePrimaryCtxRetain");
        CUresult (*set)(CUcontext) = (CUresult (*)(CUcontext)) dlsym(h, "cuCtxSetCurrent");
        cu_alloc = (alloc_fn) dlsym(h, "cuMemAlloc_v2");
        cu_free = (free_fn) dlsym(h, "cuMemFree_v2");
        CUdevice d;
        CUcontext c;
        if (!init || !get || !retain || !set || !cu_alloc || !cu_free || init(0) || get(&d, 0) || retain(&c, d) || set(c))
                return -1;
        return 0;
}

/* ---- HAMi-core's accounting, as documented (HAMi-core) ---- */

struct hami_slot {
        _Atomic int32_t pid;
        _Atomic uint64_t total;  /* used[dev].total, device 0 only here */
};
struct hami_region {
        uint64_t limit;
        struct hami_slot procs[1024];
};
static struct hami_region *hami;
static int hami_me = -1;
static pthread_mutex_t hami_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hami_usage(void) {
        uint64_t s = 0;
        for (int i = 0; i < 1024; i++)
                if (atomic_load(&hami->procs[i].pid) != 0)
                        s += atomic_load(&hami->procs[i].total);
        return s;
}

/* Slots with pid 0 or a dead pid are compacted; at most 10 liveness checks. */
static void hami_compact(void) {
        int checks = 0;
        for (int i = 0; i < 1024 && checks < 10; i++) {
                int32_t p = atomic_load(&hami->procs[i].pid);
                if (p == 0)
                        continue;
                checks++;
                if (kill(p, 0) < 0 && errno == ESRCH) {
                        atomic_store(&hami->procs[i].total, 0);
                        atomic_store(&hami->procs[i].pid, 0);
                }
        }
}

static bool hami_oom_check(uint64_t size) {
        if (hami_usage() + size <= hami->limit)
                return false;
        hami_compact();
        return hami_usage() + size > hami->limit;
}

/* The parent's view: HAMi-core's reader sums the slots of non-zero pids. */
static uint64_t hami_usage_ext(const char *dir) {
        char path[300];
        snprintf(path, sizeof(path), "%s/hami.region", dir);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
                return 0;
        struct hami_region *r = mmap(NULL, sizeof(*r), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (r == MAP_FAILED)
                return 0;
        uint64_t s = 0;
        for (int i = 0; i < 1024; i++)
                if (atomic_load(&r->procs[i].pid) != 0)
                        s += atomic_load(&r->procs[i].total);
        munmap(r, sizeof(*r));
        return s;
}

static void hami_exit(void) {
        if (hami_me >= 0)
                atomic_store(&hami->procs[hami_me].pid, 0);
}

static int hami_attach(const char *path) {
        int fd = open(path, O_RDWR | O_CREAT, 0666);
        if (fd < 0 || ftruncate(fd, sizeof(struct hami_region)) < 0)
                return -1;
        hami = mmap(NULL, sizeof(*hami), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (hami == MAP_FAILED)
                return -1;
        hami->limit = CAP;
        for (int i = 0; i < 1024; i++) {
                int32_t z = 0;
                if (atomic_compare_exchange_strong(&hami->procs[i].pid, &z, (int32_t) getpid())) {
                        atomic_store(&hami->procs[i].total, 0);
                        hami_me = i;
                        atexit(hami_exit);
                        return 0;
                }
        }
        return -1;
}

static CUresult hami_alloc(CUdeviceptr *p, size_t size) {
        if (hami_oom_check(size))
                return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = cu_alloc(p, size);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&hami_mutex);
        if (hami_oom_check(size)) {  /* another process raced in */
                pthread_mutex_unlock(&hami_mutex);
                cu_free(*p);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        atomic_fetch_add(&hami->procs[hami_me].total, size);
        pthread_mutex_unlock(&hami_mutex);
        return CUDA_SUCCESS;
}

static void hami_free(CUdeviceptr p, size_t size) {
        atomic_fetch_sub(&hami->procs[hami_me].total, size);
        cu_free(p);
}

/* ---- workers ---- */

/* A normal exit (atexit handlers and destructors run). */
static void on_usr1(int sig) {
        exit(0);
}

/* Random allocations and frees for `seconds`, then "done" and hold until
 * SIGUSR1 (normal exit) or SIGKILL. */
static int worker_mem(bool is_hami, double seconds, unsigned seed, const char *hami_path) {
        if (driver_setup() < 0 || (is_hami && hami_attach(hami_path) < 0)) {
                fprintf(stderr, "worker: no driver\n");
                return 2;
        }
        CUdeviceptr keep[64] = { 0 };
        size_t sizes[64] = { 0 };
        srand(seed);
        uint64_t end = now_ns() + (uint64_t) (seconds * 1e9);
        while (now_ns() < end) {
                int i = rand() % 64;
                if (keep[i]) {
                        if (is_hami)
                                hami_free(keep[i], sizes[i]);
                        else
                                cu_free(keep[i]);
                        keep[i] = 0;
                } else {
                        size_t s = ((size_t) (rand() % 64) + 1) * MIB + (size_t) (rand() % 4096);
                        CUresult r = is_hami ? hami_alloc(&keep[i], s) : cu_alloc(&keep[i], s);
                        if (r != CUDA_SUCCESS)
                                keep[i] = 0;
                        sizes[i] = s;
                }
        }
        printf("done\n");
        fflush(stdout);
        signal(SIGUSR1, on_usr1);
        for (;;)
                pause();
}

/* ---- the truth: the simulator's NVML ---- */

typedef nvmlReturn_t (*nvml_init_fn)(void);
typedef nvmlReturn_t (*nvml_handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_mem_fn)(nvmlDevice_t, vgpu_nvmlMemory_t *);
static nvml_mem_fn nvml_mem;
static nvmlDevice_t nvml_dev0;

static int truth_setup(void) {
        void *n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_init_fn ini = n ? (nvml_init_fn) dlsym(n, "nvmlInit_v2") : NULL;
        nvml_handle_fn by_index = n ? (nvml_handle_fn) dlsym(n, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        nvml_mem = n ? (nvml_mem_fn) dlsym(n, "nvmlDeviceGetMemoryInfo") : NULL;
        if (!ini || !by_index || !nvml_mem || ini() != 0 || by_index(0, &nvml_dev0) != 0)
                return -1;
        return 0;
}

static uint64_t truth_used(void) {
        vgpu_nvmlMemory_t m;
        return nvml_mem(nvml_dev0, &m) == 0 ? m.used : UINT64_MAX;
}

/* ---- section 1: accounting error ---- */

static const char *self_exe;
static const char *vgpu_lib;
static char tmpdir[256];

static pid_t spawn_worker(bool is_hami, double seconds, unsigned seed, int *ret_fd) {
        int p[2];
        if (pipe(p) < 0)
                return -1;
        pid_t pid = fork();
        if (pid == 0) {
                dup2(p[1], 1);
                close(p[0]);
                close(p[1]);
                char secs[32], sd[32], region[300], hpath[300];
                snprintf(secs, sizeof(secs), "%.3f", seconds);
                snprintf(sd, sizeof(sd), "%u", seed);
                snprintf(region, sizeof(region), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/ours.region", tmpdir);
                snprintf(hpath, sizeof(hpath), "%s/hami.region", tmpdir);
                char preload[1100], limit[64];
                snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", vgpu_lib);
                snprintf(limit, sizeof(limit), "CUDA_DEVICE_MEMORY_LIMIT_0=%llum", (unsigned long long) (CAP / MIB));
                if (!is_hami) {
                        putenv(preload);
                        putenv(region);
                        putenv(limit);
                        putenv((char *) "LIBCUDA_LOG_LEVEL=0");
                }
                execl(self_exe, self_exe, "--worker-mem", is_hami ? "hami" : "ours", secs, sd, hpath, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        *ret_fd = p[0];
        return pid;
}

struct acc_stats {
        double sum_abs, max_abs;
        unsigned samples, over_cap;
        uint64_t max_truth;
};

static int section_mem(unsigned rounds) {
        struct vgpu_region *ours = NULL;
        char path[300], err[256];
        printf("\n== accounting error under an allocation storm with kills (%u rounds, %d workers, cap %llu MiB)\n",
               rounds, WORKERS, (unsigned long long) (CAP / MIB));
        if (truth_setup() < 0) {
                printf("no simulator NVML: skipped\n");
                return 0;
        }
        struct acc_stats st[2] = { { 0 } };
        for (int impl = 0; impl < 2; impl++) {
                bool is_hami = impl == 1;
                srand(4242);
                for (unsigned round = 0; round < rounds; round++) {
                        pid_t pids[WORKERS];
                        int fds[WORKERS];
                        bool killed[WORKERS] = { false };
                        for (int w = 0; w < WORKERS; w++)
                                pids[w] = spawn_worker(is_hami, 1.0, round * 100 + (unsigned) w, &fds[w]);
                        /* Kill two at random moments of their storm. */
                        for (int k = 0; k < 2; k++) {
                                sleep_ns((uint64_t) (rand() % 400 + 100) * 1000000ull);
                                int w = rand() % WORKERS;
                                kill(pids[w], SIGKILL);
                                killed[w] = true;
                        }
                        /* Survivors finish their last operation and hold. */
                        for (int w = 0; w < WORKERS; w++) {
                                char buf[16];
                                if (!killed[w] && read(fds[w], buf, sizeof(buf)) <= 0)
                                        killed[w] = true;
                        }
                        for (int w = 0; w < WORKERS; w++)
                                if (killed[w])
                                        waitpid(pids[w], NULL, 0);
                        uint64_t truth = truth_used(), acc;
                        if (is_hami)
                                acc = hami_usage_ext(tmpdir);
                        else {
                                if (!ours) {
                                        snprintf(path, sizeof(path), "%s/ours.region", tmpdir);
                                        if (vgpu_region_open(path, NULL, &ours, err, sizeof(err)) < 0) {
                                                printf("cannot open our region: %s\n", err);
                                                return 1;
                                        }
                                }
                                acc = vgpu_region_used_live(ours, 0, vgpu_pid_alive);
                        }
                        double e = fabs((double) acc - (double) truth);
                        st[impl].sum_abs += e;
                        st[impl].max_abs = e > st[impl].max_abs ? e : st[impl].max_abs;
                        st[impl].samples++;
                        st[impl].over_cap += truth > CAP;
                        st[impl].max_truth = truth > st[impl].max_truth ? truth : st[impl].max_truth;
                        /* Survivors end normally; the killed stay killed. */
                        for (int w = 0; w < WORKERS; w++) {
                                if (!killed[w])
                                        kill(pids[w], SIGUSR1);
                                waitpid(pids[w], NULL, 0);
                                close(fds[w]);
                        }
                }
        }
        printf("%-28s %14s %14s %10s %16s\n", "accounting", "mean |err| B", "max |err| B", "over cap", "max truth MiB");
        static const char *const names[2] = { "libmigkit-vgpu", "HAMi-core (re-implemented)" };
        for (int i = 0; i < 2; i++)
                printf("%-28s %14.0f %14.0f %5u/%-4u %16.1f\n", names[i], st[i].sum_abs / st[i].samples, st[i].max_abs,
                       st[i].over_cap, st[i].samples, (double) st[i].max_truth / MIB);
        vgpu_region_unmap(ours);
        return 0;
}

/* ---- section 2: overhead per call ---- */

static const char *prog;

/* Runs exe with extra variables and arguments; returns the number after
 * `key` in its output. */
static double run_exe(const char *exe, const char *const *envs, const char *const *args, const char *key) {
        int p[2];
        if (pipe(p) < 0)
                return NAN;
        pid_t pid = fork();
        if (pid == 0) {
                dup2(p[1], 1);
                close(p[0]);
                close(p[1]);
                for (size_t i = 0; envs[i]; i++)
                        putenv((char *) envs[i]);
                const char *argv[16] = { exe };
                size_t n = 1;
                for (size_t i = 0; args[i] && n < 15; i++)
                        argv[n++] = args[i];
                argv[n] = NULL;
                execv(exe, (char *const *) argv);
                _exit(127);
        }
        close(p[1]);
        char buf[4096];
        size_t len = 0;
        ssize_t r;
        while ((r = read(p[0], buf + len, sizeof(buf) - 1 - len)) > 0)
                len += (size_t) r;
        buf[len] = 0;
        close(p[0]);
        waitpid(pid, NULL, 0);
        char *k = strstr(buf, key);
        return k ? strtod(k + strlen(key), NULL) : NAN;
}

/* Runs prog-vgpu with extra variables. */
static double run_prog(const char *const *envs, const char *const *args, const char *key) {
        return run_exe(prog, envs, args, key);
}

static double best_of(unsigned n, const char *const *envs, const char *const *args, const char *key) {
        double best = INFINITY;
        for (unsigned i = 0; i < n; i++) {
                double v = run_prog(envs, args, key);
                if (v < best)
                        best = v;
        }
        return best;
}

static char env_preload[1100], env_region[400];

static int section_overhead(void) {
        printf("\n== overhead per call (prog-vgpu, dlsym mode, best of 5 runs of 20,000 calls)\n");
        const char *none[] = { NULL };
        const char *mem[] = { env_preload, env_region, "CUDA_DEVICE_MEMORY_LIMIT_0=30g", NULL };
        const char *share[] = { env_preload, env_region, "CUDA_DEVICE_MEMORY_LIMIT_0=30g", "CUDA_DEVICE_SM_LIMIT_0=99",
                                "GPU_CORE_UTILIZATION_POLICY=force", NULL };
        const char *alloc[] = { "dlsym", "bench-alloc", "20000", NULL };
        const char *launch[] = { "dlsym", "bench-launch", "20000", NULL };
        double a0 = best_of(5, none, alloc, "alloc_free_ns "), a1 = best_of(5, mem, alloc, "alloc_free_ns ");
        double l0 = best_of(5, none, launch, "launch_ns "), l1 = best_of(5, mem, launch, "launch_ns ");
        double l2 = best_of(5, share, launch, "launch_ns ");
        printf("%-44s %12s %12s %12s\n", "call", "no library", "library", "overhead");
        printf("%-44s %10.0f ns %10.0f ns %10.0f ns\n", "cuMemAlloc + cuMemFree (1 MiB, capped)", a0, a1, a1 - a0);
        printf("%-44s %10.0f ns %10.0f ns %10.0f ns\n", "cuLaunchKernel (no SM limit)", l0, l1, l1 - l0);
        printf("%-44s %10.0f ns %10.0f ns %10.0f ns\n", "cuLaunchKernel (SM limit 99%, admission on)", l0, l2, l2 - l0);
        printf("(the simulator's own cost varies by several us between runs; the 99%% line includes waits: its\n"
               " 0 ns kernels are launched faster than 99%% of the GPU allows before the first correction)\n");

        /* The library's own work per call, in this process, without the driver. */
        const unsigned n = 1000000;
        struct vgpu_config c;
        memset(&c, 0, sizeof(c));
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                c.mem_limit[d] = 1ull << 40;
                c.sm_limit[d] = 100;
        }
        struct vgpu_region *r;
        if (vgpu_region_new_private(&c, &r) < 0)
                return 1;
        int slot = vgpu_region_claim(r, getpid(), 0, vgpu_pid_alive);
        for (int i = 1; i < WORKERS; i++)  /* a few other processes in the region */
                vgpu_region_claim(r, getpid(), 0, vgpu_pid_alive);
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < n; i++) {
                vgpu_region_charge(r, slot, 0, 1 << 20, vgpu_pid_alive);
                vgpu_region_uncharge(r, slot, 0, 1 << 20);
        }
        double charge = (double) (now_ns() - t0) / n;
        t0 = now_ns();
        for (unsigned i = 0; i < n; i++) {
                uint64_t sz;
                unsigned dev;
                vgpu_track_put(VGPU_TRACK_PTR, 0x7f0000000000ull + (uint64_t) i * 4096, 1 << 20, 0);
                vgpu_track_take(VGPU_TRACK_PTR, 0x7f0000000000ull + (uint64_t) i * 4096, &sz, &dev);
        }
        double track = (double) (now_ns() - t0) / n;
        struct vgpu_share_dev sd;
        memset(&sd, 0, sizeof(sd));
        t0 = now_ns();
        uint64_t waits = 0;
        for (unsigned i = 0; i < n; i++)
                waits += vgpu_share_admit(&sd, 50, 0, now_ns());
        double admit = (double) (now_ns() - t0) / n;
        vgpu_region_unmap(r);
        printf("library work per call, in process, %u calls (6 slots in the region):\n", n);
        printf("  charge + uncharge against a cap (announce, sum, commit)   %6.1f ns\n", charge);
        printf("  allocation table put + take                               %6.1f ns\n", track);
        printf("  launch admission (clock + bucket)                         %6.1f ns%s\n", admit, waits ? " (waited)" : "");
        return 0;
}

/* ---- section 3: compute share ---- */

struct kind {
        const char *name, *burn, *ns;
};
static const struct kind kinds[] = {
        { "long kernels (50 ms, async)", "async", "50000000" },
        { "short sync kernels (500 us)", "sync", "500000" },
        { "kernels (2 ms, async)", "async", "2000000" },
        { "graphs (5 x 2 ms, sync)", "graph", "2000000" },
};

static double burn(bool lib, bool is_hami, const char *policy, unsigned pct, const struct kind *k, unsigned seconds,
                   const char *region) {
        char secs[16], sm[64], reg[400], pol[64];
        snprintf(secs, sizeof(secs), "%u", seconds);
        snprintf(sm, sizeof(sm), "CUDA_DEVICE_SM_LIMIT=%u", pct);
        snprintf(reg, sizeof(reg), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/%s", tmpdir, region);
        snprintf(pol, sizeof(pol), "GPU_CORE_UTILIZATION_POLICY=%s", policy);
        const char *envs_lib[] = { env_preload, reg, sm, pol, "PROG_VGPU_GRID=216", NULL };
        const char *envs_none[] = { "PROG_VGPU_GRID=216", NULL };
        char pcts[16];
        snprintf(pcts, sizeof(pcts), "%u", pct);
        if (is_hami) {
                const char *no_envs[] = { NULL };
                const char *wargs[] = { "--worker-share", k->burn, pcts, secs, k->ns, NULL };
                return run_exe(self_exe, no_envs, wargs, "share ");
        }
        const char *args[] = { "dlsym", "burn", k->burn, secs, k->ns, NULL };
        return run_prog(lib ? envs_lib : envs_none, args, "share ");
}

static int section_share(unsigned seconds) {
        static const unsigned pcts[] = { 10, 30, 50, 70, 90 };
        printf("\n== compute share achieved vs asked (%u s per point, policy force, share = GPU busy time / wall time)\n",
               seconds);
        printf("%-30s %7s %9s", "workload", "alone", "impl");
        for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
                printf("   %3u%%", pcts[i]);
        printf("  max|err|\n");
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
                double alone = burn(false, false, "force", 100, &kinds[k], seconds, "none");
                for (int impl = 0; impl < 2; impl++) {
                        printf("%-30s %6.1f%% %9s", impl ? "" : kinds[k].name, alone, impl ? "HAMi-core" : "ours");
                        fflush(stdout);
                        double worst = 0;
                        for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
                                double got = burn(true, impl == 1, "force", pcts[i], &kinds[k], seconds, "share.region");
                                /* A workload cannot exceed what it reaches alone. */
                                double want = pcts[i] < alone ? pcts[i] : alone;
                                double err = fabs(got - want);
                                worst = err > worst ? err : worst;
                                printf(" %6.1f", got);
                                fflush(stdout);
                        }
                        printf("  %7.1f\n", worst);
                }
        }
        /* Two containers on one GPU, 10% and 90%, default policy. */
        printf("two containers on one GPU, 10%% and 90%% asked, default policy, kernels of 2 ms async:\n");
        pid_t a = fork();
        if (a == 0) {
                double v = burn(true, false, "default", 10, &kinds[2], seconds, "container-a.region");
                printf("  container A (10%%): %.1f%%\n", v);
                fflush(stdout);
                _exit(0);
        }
        double b = burn(true, false, "default", 90, &kinds[2], seconds, "container-b.region");
        waitpid(a, NULL, 0);
        printf("  container B (90%%): %.1f%%\n", b);
        double lone = burn(true, false, "default", 30, &kinds[2], seconds, "container-a.region");
        printf("a lone container, 30%% asked, default policy (may use idle capacity): %.1f%%\n", lone);
        return 0;
}

/* ---- HAMi-core's token bucket (HAMi-core), for the share section ---- */

typedef nvmlReturn_t (*nvml_util_fn)(nvmlDevice_t, vgpu_nvmlProcessUtilizationSample_t *, unsigned *,
                                     unsigned long long);
static _Atomic int64_t hami_cur;
static int64_t hami_total, hami_share;
static unsigned hami_limit, hami_sms = 108, hami_tpm = 2048;

static void *hami_watcher(void *arg) {
        void *n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_util_fn util = n ? (nvml_util_fn) dlsym(n, "nvmlDeviceGetProcessUtilization") : NULL;
        vgpu_nvmlProcessUtilizationSample_t samples[256];
        unsigned long long last = 0;
        if (truth_setup() < 0 || !util)
                return NULL;
        for (;;) {
                sleep_ns(120000000ull);
                unsigned cnt = 256, u = 0;
                if (util(nvml_dev0, samples, &cnt, last) == 0)
                        for (unsigned i = 0; i < cnt; i++) {
                                if (samples[i].timeStamp > last)
                                        last = samples[i].timeStamp;
                                if (samples[i].pid == (unsigned) getpid())
                                        u += samples[i].smUtil;
                        }
                int64_t diff = llabs((int64_t) hami_limit - (int64_t) u);
                if (diff < 5)
                        diff = 5;
                int64_t inc = (int64_t) hami_sms * hami_sms * hami_tpm * diff / 2560;
                if (diff > hami_limit / 2)
                        inc = inc * diff * 2 / (hami_limit + 1);
                hami_share += u <= hami_limit ? inc : -inc;
                if (hami_share < 0)
                        hami_share = 0;
                if (hami_share > hami_total)
                        hami_share = hami_total;
                int64_t c = atomic_load(&hami_cur);
                int64_t next = c + hami_share > hami_total ? hami_total : c + hami_share;
                atomic_fetch_add(&hami_cur, next - c);
                if (hami_share == hami_total && atomic_load(&hami_cur) < 0)
                        hami_total *= 2;
        }
        return arg;
}

static void hami_rate_limit(int64_t grid) {
        for (;;) {
                int64_t c = atomic_load(&hami_cur);
                if (c < 0) {
                        sleep_ns(10000000ull);
                        continue;
                }
                if (atomic_compare_exchange_weak(&hami_cur, &c, c - grid))
                        return;
        }
}

typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUgraph_st *CUgraph;

static int worker_share(const char *kind, unsigned pct, unsigned seconds, uint64_t ns) {
        if (driver_setup() < 0)
                return 2;
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        CUresult (*lib_load)(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned) =
                (CUresult (*)(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned)) dlsym(
                        h, "cuLibraryLoadData");
        CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) =
                (CUresult (*)(CUkernel *, CUlibrary, const char *)) dlsym(h, "cuLibraryGetKernel");
        CUresult (*get_func)(CUfunction *, CUkernel) = (CUresult (*)(CUfunction *, CUkernel)) dlsym(h, "cuKernelGetFunction");
        CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **) = (CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                             unsigned, unsigned, CUstream, void **, void **)) dlsym(h, "cuLaunchKernel");
        CUresult (*stream_create)(CUstream *, unsigned) = (CUresult (*)(CUstream *, unsigned)) dlsym(h, "cuStreamCreate");
        CUresult (*sync)(CUstream) = (CUresult (*)(CUstream)) dlsym(h, "cuStreamSynchronize");
        CUresult (*begin)(CUstream, int) = (CUresult (*)(CUstream, int)) dlsym(h, "cuStreamBeginCapture_v2");
        CUresult (*endc)(CUstream, CUgraph *) = (CUresult (*)(CUstream, CUgraph *)) dlsym(h, "cuStreamEndCapture");
        CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long) =
                (CUresult (*)(CUgraphExec *, CUgraph, unsigned long long)) dlsym(h, "cuGraphInstantiateWithFlags");
        CUresult (*glaunch)(CUgraphExec, CUstream) = (CUresult (*)(CUgraphExec, CUstream)) dlsym(h, "cuGraphLaunch");
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        CUstream s;
        static const char image[] = "fake image: the simulator does not parse it";
        if (!lib_load || lib_load(&lib, image, NULL, NULL, 0, NULL, NULL, 0) || get_kernel(&k, lib, "_Z17mksim_sleep_kernely") ||
            get_func(&f, k) || stream_create(&s, 0))
                return 2;
        hami_limit = pct;
        hami_total = (int64_t) hami_tpm * hami_sms * 32;
        atomic_store(&hami_cur, 0);  /* the watcher hands out the first tokens */
        pthread_t t;
        pthread_create(&t, NULL, hami_watcher, NULL);
        const unsigned grid = 216, per_graph = 5;
        void *params[] = { &ns };
        CUgraphExec exec = NULL;
        if (strcmp(kind, "graph") == 0) {
                CUgraph g;
                if (begin(s, 2 /* relaxed */))
                        return 2;
                for (unsigned i = 0; i < per_graph; i++)
                        launch(f, grid, 1, 1, 32, 1, 1, 0, s, params, NULL);
                if (endc(s, &g) || inst(&exec, g, 0))
                        return 2;
        }
        uint64_t start = now_ns(), end = start + (uint64_t) seconds * 1000000000ull, busy = 0;
        unsigned n = 0;
        while (now_ns() < end) {
                if (exec) {
                        glaunch(exec, s);  /* HAMi-core does not limit graphs */
                        sync(s);
                        busy += per_graph * ns;
                } else {
                        if (pct > 0 && pct < 100)
                                hami_rate_limit(grid);
                        launch(f, grid, 1, 1, 32, 1, 1, 0, s, params, NULL);
                        busy += ns;
                        if (strcmp(kind, "sync") == 0 || ++n % 16 == 0)
                                sync(s);
                }
        }
        sync(s);
        uint64_t wall = now_ns() - start;
        printf("busy_ns %llu wall_ns %llu share %.2f\n", (unsigned long long) busy, (unsigned long long) wall,
               100.0 * (double) busy / (double) wall);
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc >= 6 && strcmp(argv[1], "--worker-mem") == 0)
                return worker_mem(strcmp(argv[2], "hami") == 0, strtod(argv[3], NULL), (unsigned) strtoul(argv[4], NULL, 10),
                                  argv[5]);
        if (argc >= 6 && strcmp(argv[1], "--worker-share") == 0)
                return worker_share(argv[2], (unsigned) strtoul(argv[3], NULL, 10), (unsigned) strtoul(argv[4], NULL, 10),
                                    strtoull(argv[5], NULL, 10));
        const char *sections = "mem,overhead,share";
        unsigned rounds = 10, seconds = 6;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--sections") == 0)
                        sections = argv[i + 1];
                else if (strcmp(argv[i], "--rounds") == 0)
                        rounds = (unsigned) strtoul(argv[i + 1], NULL, 10);
                else if (strcmp(argv[i], "--seconds") == 0)
                        seconds = (unsigned) strtoul(argv[i + 1], NULL, 10);
                else {
                        fprintf(stderr, "usage: bench-vgpu [--sections mem,overhead,share] [--rounds N] [--seconds S]\n");
                        return 2;
                }
        }
        static char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return 2;
        exe[n] = 0;
        self_exe = exe;
        vgpu_lib = getenv("MIGKIT_VGPU_LIB");
        prog = getenv("MIGKIT_TEST_PROG_VGPU");
        if (!vgpu_lib || !prog) {
                fprintf(stderr, "bench-vgpu: set MIGKIT_VGPU_LIB and MIGKIT_TEST_PROG_VGPU (bench/run vgpu does)\n");
                return 2;
        }
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/bench-vgpu-XXXXXX");
        if (!mkdtemp(tmpdir))
                return 2;
        snprintf(env_preload, sizeof(env_preload), "LD_PRELOAD=%s", vgpu_lib);
        snprintf(env_region, sizeof(env_region), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/overhead.region", tmpdir);
        int r = 0;
        if (strstr(sections, "mem"))
                r |= section_mem(rounds);
        if (strstr(sections, "overhead"))
                r |= section_overhead();
        if (strstr(sections, "share"))
                r |= section_share(seconds);
        static const char *const files[] = { "ours.region", "hami.region", "overhead.region", "share.region",
                                             "container-a.region", "container-b.region", "none" };
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                char path[400];
                snprintf(path, sizeof(path), "%s/%s", tmpdir, files[i]);
                unlink(path);
        }
        rmdir(tmpdir);
        return r;
}
