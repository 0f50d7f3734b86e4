/* A CUDA driver API client for the CUDA driver simulator's tests
 * (tests/integration/test-cuda-sim.sh). Linked to the simulator's
 * libcuda.so.1; it uses the API the way frameworks do.
 *
 *   cuda-sim-driver selftest          every simulated area, one line per check
 *   cuda-sim-driver info              one line per device
 *   cuda-sim-driver hold MIB SECONDS  allocates MIB on device 0, prints "ready", sleeps
 *   cuda-sim-driver burn NS COUNT     COUNT kernels of NS ns each, synchronised each time
 *   cuda-sim-driver flood NS COUNT    COUNT kernels of NS ns queued at once, then one synchronisation
 *                                     (CUDA_SIM_GO_FILE: starts once that file exists)
 *   cuda-sim-driver duty NS PERIOD COUNT  a kernel of NS ns every PERIOD ns (by the clock), COUNT times
 *   cuda-sim-driver oom               allocates past the device's memory
 *   cuda-sim-driver bench N           ns per cuMemAlloc+cuMemFree pair, per launch, per cuMemGetInfo
 *   cuda-sim-driver nvml GPU          (NVML) memory, processes and utilisation of GPU GPU
 *   cuda-sim-driver mig-setup         (NVML) MIG on GPU 0 with two 1-slice instances; prints their UUIDs
 *   cuda-sim-driver exit-late MIB     allocates MIB and exits; a handler that runs after the driver's own
 *                                     exit handler frees it and releases the primary context (the CUDA
 *                                     runtime's teardown does this) */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mksim.h"
#include "nvml/nvml-abi.h"

#define X(name, ret, args) ret name args;
MK_NVML_FUNCTIONS(X)
#undef X

static int failures;

#define CHECK(cond, ...)                                 \
        do {                                             \
                if (cond)                                \
                        printf("ok   ");                 \
                else {                                   \
                        printf("FAIL ");                 \
                        failures++;                      \
                }                                        \
                printf(__VA_ARGS__);                     \
                printf("\n");                            \
        } while (0)

#define OK(call) CHECK((r = (call)) == CUDA_SUCCESS, "%s -> %d", #call, (int) r)

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static CUcontext setup(void) {
        CUcontext ctx = NULL;
        CUresult r = cuInit(0);
        if (r != CUDA_SUCCESS) {
                fprintf(stderr, "cuInit: %d\n", (int) r);
                exit(2);
        }
        if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
                fprintf(stderr, "no context on device 0\n");
                exit(2);
        }
        return ctx;
}

static CUfunction sleep_kernel(void) {
        static const char image[] = "fake image: the simulator does not parse it";
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        if (cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0) != CUDA_SUCCESS ||
            cuLibraryGetKernel(&k, lib, "_Z17mksim_sleep_kernely") != CUDA_SUCCESS ||
            cuKernelGetFunction(&f, k) != CUDA_SUCCESS) {
                fprintf(stderr, "no kernel\n");
                exit(2);
        }
        return f;
}

static CUresult launch_ns(CUfunction f, uint64_t ns, CUstream s) {
        void *params[] = { &ns };
        return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static int cmd_info(void) {
        int n;
        CUresult r = cuInit(0);
        if (r != CUDA_SUCCESS) {
                printf("cuInit %d\n", (int) r);
                return 1;
        }
        cuDeviceGetCount(&n);
        for (int i = 0; i < n; i++) {
                char name[256];
                CUuuid u;
                size_t mem;
                int sms, major, minor, bus;
                cuDeviceGetName(name, sizeof(name), i);
                cuDeviceGetUuid_v2(&u, i);
                cuDeviceTotalMem_v2(&mem, i);
                cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, i);
                cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, i);
                cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, i);
                cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
                printf("%d name=%s uuid=", i, name);
                for (int k = 0; k < 16; k++)
                        printf("%s%02x", k == 4 || k == 6 || k == 8 || k == 10 ? "-" : "", (unsigned char) u.bytes[k]);
                printf(" mem_mib=%zu sms=%d cc=%d.%d bus=%02x\n", mem >> 20, sms, major, minor, bus);
        }
        return 0;
}

static int cmd_hold(unsigned long long mib, unsigned seconds) {
        CUdeviceptr p;
        setup();
        CUresult r = cuMemAlloc_v2(&p, mib << 20);
        if (r != CUDA_SUCCESS) {
                printf("alloc %d\n", (int) r);
                return 1;
        }
        printf("ready\n");
        fflush(stdout);
        sleep(seconds);
        return 0;
}

static int cmd_burn(uint64_t ns, unsigned count) {
        setup();
        CUfunction f = sleep_kernel();
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < count; i++) {
                if (launch_ns(f, ns, NULL) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS)
                        return 1;
        }
        printf("elapsed_ns=%llu\n", (unsigned long long) (now_ns() - t0));
        return 0;
}

/* With CUDA_SIM_GO_FILE set: prints "ready" once set up, then waits (30 s at
 * most) for that file to exist, so that several processes start together
 * whatever each one's start-up took. */
static void wait_go(void) {
        const char *go = getenv("CUDA_SIM_GO_FILE");
        if (!go)
                return;
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 30000 && access(go, F_OK) != 0; i++)
                usleep(1000);
}

static int cmd_flood(uint64_t ns, unsigned count) {
        setup();
        CUfunction f = sleep_kernel();
        wait_go();
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < count; i++)
                if (launch_ns(f, ns, NULL) != CUDA_SUCCESS)
                        return 1;
        if (cuCtxSynchronize() != CUDA_SUCCESS)
                return 1;
        printf("elapsed_ns=%llu\n", (unsigned long long) (now_ns() - t0));
        return 0;
}

/* Busy NS of every PERIOD ns: each launch at its time on the clock (a late
 * one runs right after the one before), so any window of many periods is busy
 * NS/PERIOD of its length. */
static int cmd_duty(uint64_t ns, uint64_t period, unsigned count) {
        setup();
        CUfunction f = sleep_kernel();
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < count; i++) {
                uint64_t at = t0 + i * period;
                struct timespec ts = { (time_t) (at / 1000000000ULL), (long) (at % 1000000000ULL) };
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                        ;
                if (launch_ns(f, ns, NULL) != CUDA_SUCCESS)
                        return 1;
        }
        if (cuCtxSynchronize() != CUDA_SUCCESS)
                return 1;
        printf("elapsed_ns=%llu\n", (unsigned long long) (now_ns() - t0));
        return 0;
}

static int cmd_oom(void) {
        CUdeviceptr p, q;
        size_t total, freeb;
        setup();
        cuMemGetInfo_v2(&freeb, &total);
        CUresult r1 = cuMemAlloc_v2(&p, total + 1);
        CUresult r2 = cuMemAlloc_v2(&p, freeb);
        CUresult r3 = cuMemAlloc_v2(&q, 1 << 20);
        printf("over=%d all_free=%d one_more=%d\n", (int) r1, (int) r2, (int) r3);
        return !(r1 == CUDA_ERROR_OUT_OF_MEMORY && r2 == CUDA_SUCCESS && r3 == CUDA_ERROR_OUT_OF_MEMORY);
}

static int cmd_mig_setup(void) {
        nvmlDevice_t dev;
        nvmlReturn_t st;
        if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
            nvmlDeviceSetMigMode(dev, 1, &st) != NVML_SUCCESS || mksim_reset_gpu(0) < 0)
                return 1;
        for (int i = 0; i < 2; i++) {
                nvmlGpuInstance_t gi;
                nvmlComputeInstance_t ci;
                nvmlGpuInstanceProfileInfo_t gp;
                nvmlComputeInstanceProfileInfo_t cp;
                if (nvmlDeviceGetGpuInstanceProfileInfo(dev, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &gp) != NVML_SUCCESS ||
                    nvmlDeviceCreateGpuInstance(dev, gp.id, &gi) != NVML_SUCCESS ||
                    nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                                 NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                 &cp) != NVML_SUCCESS ||
                    nvmlGpuInstanceCreateComputeInstance(gi, cp.id, &ci) != NVML_SUCCESS)
                        return 1;
        }
        for (unsigned i = 0; i < 2; i++) {
                nvmlDevice_t mig;
                char uuid[96];
                if (nvmlDeviceGetMigDeviceHandleByIndex(dev, i, &mig) != NVML_SUCCESS ||
                    nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)) != NVML_SUCCESS)
                        return 1;
                printf("%s\n", uuid);
        }
        nvmlShutdown();
        return 0;
}

static int cmd_bench(unsigned n) {
        CUdeviceptr p;
        size_t fr, tot;
        setup();
        CUfunction f = sleep_kernel();
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < n; i++)
                if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
                        return 1;
        uint64_t t1 = now_ns();
        for (unsigned i = 0; i < n; i++)
                if (launch_ns(f, 0, NULL) != CUDA_SUCCESS)
                        return 1;
        uint64_t t2 = now_ns();
        for (unsigned i = 0; i < n; i++)
                if (cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS)
                        return 1;
        uint64_t t3 = now_ns();
        printf("alloc_free_ns=%.0f launch_ns=%.0f meminfo_ns=%.0f\n", (double) (t1 - t0) / n, (double) (t2 - t1) / n,
               (double) (t3 - t2) / n);
        return 0;
}

/* nvml.h layouts of the utilisation queries (not in the product's NVML ABI list). */
typedef struct {
        unsigned int gpu, memory;
} nvml_util_t;
typedef struct {
        unsigned int pid;
        unsigned long long timeStamp;
        unsigned int smUtil, memUtil, encUtil, decUtil;
} nvml_proc_util_t;
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvml_util_t *utilization);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvml_proc_util_t *utilization,
                                             unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp);

static int cmd_nvml(unsigned gpu) {
        nvmlDevice_t dev;
        nvmlMemory_t mem;
        nvmlProcessInfo_t procs[64];
        nvml_util_t util = { 0, 0 };
        nvml_proc_util_t samples[64];
        unsigned n = 64, ns = 64;
        if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(gpu, &dev) != NVML_SUCCESS ||
            nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS ||
            nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs) != NVML_SUCCESS)
                return 1;
        nvmlReturn_t ru = nvmlDeviceGetUtilizationRates(dev, &util);
        nvmlReturn_t rp = nvmlDeviceGetProcessUtilization(dev, samples, &ns, 0);
        printf("used_mib=%llu procs=%u util=%u util_rc=%d samples_rc=%d\n", mem.used >> 20, n, util.gpu, (int) ru,
               (int) rp);
        for (unsigned i = 0; i < n; i++) {
                unsigned sm = 0;
                for (unsigned k = 0; rp == NVML_SUCCESS && k < ns; k++)
                        if (samples[k].pid == procs[i].pid)
                                sm = samples[k].smUtil;
                printf("pid=%u used_mib=%llu sm=%u\n", procs[i].pid, procs[i].usedGpuMemory >> 20, sm);
        }
        nvmlShutdown();
        return 0;
}

static CUcontext thread_ctx;

static void *alloc_thread(void *arg) {
        (void) arg;
        if (cuCtxSetCurrent(thread_ctx) != CUDA_SUCCESS)
                return (void *) 1;
        for (int i = 0; i < 500; i++) {
                CUdeviceptr p;
                if (cuMemAlloc_v2(&p, 4096 + (size_t) i) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
                        return (void *) 1;
        }
        return NULL;
}

static void host_fn(void *p) {
        (*(int *) p)++;
}

static int cmd_selftest(void) {
        CUresult r;
        int n = 0, v, drv = 0;
        char name[256];
        CUdevice dev;

        CHECK(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED, "calls before cuInit: NOT_INITIALIZED");
        OK(cuInit(0));
        OK(cuDriverGetVersion(&drv));
        CHECK(drv >= 13000, "driver version %d >= 13000", drv);
        OK(cuDeviceGetCount(&n));
        CHECK(n >= 1, "%d devices", n);
        OK(cuDeviceGet(&dev, 0));
        CHECK(cuDeviceGet(&dev, n) == CUDA_ERROR_INVALID_DEVICE, "device %d: INVALID_DEVICE", n);
        OK(cuDeviceGetName(name, sizeof(name), 0));
        OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
        CHECK(v > 0, "SMs %d", v);
        CHECK(cuDeviceGetAttribute(&v, (CUdevice_attribute) 100000, 0) == CUDA_ERROR_INVALID_VALUE,
              "unknown attribute: INVALID_VALUE");

        /* Contexts. */
        CUcontext pctx, cur, ctx2;
        unsigned flags;
        int active;
        OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
        CHECK(!active, "primary context inactive at first");
        OK(cuDevicePrimaryCtxRetain(&pctx, 0));
        OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
        CHECK(active, "primary context active after retain");
        CHECK(cuMemAlloc_v2(&(CUdeviceptr) { 0 }, 16) == CUDA_ERROR_INVALID_CONTEXT, "alloc without a current context");
        OK(cuCtxSetCurrent(pctx));
        OK(cuCtxGetCurrent(&cur));
        CHECK(cur == pctx, "current context");
        OK(cuCtxCreate_v4(&ctx2, NULL, 0, 0));
        OK(cuCtxGetCurrent(&cur));
        CHECK(cur == ctx2, "cuCtxCreate pushes");
        OK(cuCtxPopCurrent_v2(&cur));
        CHECK(cur == ctx2, "pop returns it");
        OK(cuCtxPushCurrent_v2(ctx2));
        OK(cuCtxDestroy_v2(ctx2));
        OK(cuCtxGetCurrent(&cur));
        CHECK(cur == pctx, "back to the primary context after destroy");
        OK(cuCtxGetDevice(&dev));

        /* Memory. */
        size_t freeb, total, freeb2, total0;
        CUdeviceptr d, d2;
        OK(cuDeviceTotalMem_v2(&total0, 0));
        OK(cuMemGetInfo_v2(&freeb, &total));
        CHECK(total == total0, "cuMemGetInfo total = cuDeviceTotalMem (%zu)", total);
        OK(cuMemAlloc_v2(&d, 256 << 20));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb - freeb2 == (256u << 20), "256 MiB allocation seen by cuMemGetInfo (%zu)", freeb - freeb2);
        char host[4096], back[4096];
        for (size_t i = 0; i < sizeof(host); i++)
                host[i] = (char) i;
        OK(cuMemcpyHtoD_v2(d, host, sizeof(host)));
        OK(cuMemAlloc_v2(&d2, 4096));
        OK(cuMemcpyDtoD_v2(d2, d, 4096));
        OK(cuMemcpyDtoH_v2(back, d2, sizeof(back)));
        CHECK(memcmp(host, back, sizeof(host)) == 0, "bytes survive HtoD, DtoD, DtoH");
        OK(cuMemsetD32_v2(d2, 0x01020304, 1024));
        OK(cuMemcpyDtoH_v2(back, d2, 8));
        CHECK(*(uint32_t *) back == 0x01020304, "memset D32");
        CHECK(cuMemcpyHtoD_v2(d2, host, 8192) == CUDA_ERROR_INVALID_VALUE, "copy past an allocation refused");
        OK(cuMemFree_v2(d2));
        CHECK(cuMemcpyHtoD_v2(d2, host, 8) == CUDA_ERROR_INVALID_VALUE, "copy to freed memory refused");
        CHECK(cuMemFree_v2(d2) == CUDA_ERROR_INVALID_VALUE, "double free refused");
        OK(cuMemFree_v2(d));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb2 == freeb, "free gives the memory back");
        size_t pitch;
        OK(cuMemAllocPitch_v2(&d, &pitch, 1000, 10, 4));
        CHECK(pitch >= 1000 && pitch % 512 == 0, "pitch %zu", pitch);
        OK(cuMemsetD2D8_v2(d, pitch, 7, 1000, 10));
        OK(cuMemFree_v2(d));
        OK(cuMemAllocManaged(&d, 1 << 20, CU_MEM_ATTACH_GLOBAL));
        ((char *) d)[0] = 5; /* managed memory is host accessible */
        unsigned mt = 0, managed = 0;
        OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
        CHECK(managed == 1, "managed pointer");
        OK(cuMemFree_v2(d));
        void *h;
        OK(cuMemAllocHost_v2(&h, 1 << 20));
        OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr) h));
        CHECK(mt == CU_MEMORYTYPE_HOST, "host allocation: memory type host");
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb2 == freeb, "host memory is not device memory");
        OK(cuMemFreeHost(h));
        OK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_PORTABLE));
        OK(cuMemFreeHost(h));

        /* Stream-ordered allocation and pools. */
        CUstream s;
        CUmemoryPool pool;
        CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
        OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        OK(cuMemAllocAsync(&d, 64 << 20, s));
        OK(cuMemPoolCreate(&pool, &props));
        OK(cuMemAllocFromPoolAsync(&d2, 32 << 20, pool, s));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb - freeb2 == (96u << 20), "async and pool allocations charged (%zu)", freeb - freeb2);
        cuuint64_t used = 0;
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
        CHECK(used == (32u << 20), "pool used %llu", (unsigned long long) used);
        OK(cuMemFreeAsync(d, s));
        OK(cuMemFreeAsync(d2, s));
        OK(cuStreamSynchronize(s));
        OK(cuMemPoolDestroy(pool));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb2 == freeb, "async frees give the memory back");

        /* Virtual memory management. */
        CUmemAllocationProp ap = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                   .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
        size_t gran;
        CUmemGenericAllocationHandle mh;
        CUdeviceptr va;
        OK(cuMemGetAllocationGranularity(&gran, &ap, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CHECK(cuMemCreate(&mh, gran + 1, &ap, 0) == CUDA_ERROR_INVALID_VALUE, "cuMemCreate needs the granularity");
        OK(cuMemCreate(&mh, 4 * gran, &ap, 0));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb - freeb2 == 4 * gran, "cuMemCreate charged");
        OK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
        OK(cuMemMap(va, 4 * gran, 0, mh, 0));
        CUmemAccessDesc acc = { .location = ap.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(cuMemSetAccess(va, 4 * gran, &acc, 1));
        OK(cuMemsetD8_v2(va, 9, 4 * gran));
        OK(cuMemcpyDtoH_v2(back, va + gran, 16));
        CHECK(back[15] == 9, "mapped VMM memory is usable");
        OK(cuMemRelease(mh));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb - freeb2 == 4 * gran, "released while mapped: still charged");
        OK(cuMemUnmap(va, 4 * gran));
        OK(cuMemAddressFree(va, 4 * gran));
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(freeb2 == freeb, "unmapped and released: free again");

        /* Launches, streams, events. */
        CUfunction f = sleep_kernel();
        CUevent e0, e1;
        float ms = 0;
        OK(cuEventCreate(&e0, 0));
        OK(cuEventCreate(&e1, 0));
        OK(cuEventRecord(e0, s));
        uint64_t t0 = now_ns();
        OK(launch_ns(f, 20000000, s));
        uint64_t t_launch = now_ns() - t0;
        CHECK(t_launch < 10000000, "launch is asynchronous (%llu ns)", (unsigned long long) t_launch);
        OK(cuEventRecord(e1, s));
        CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY, "stream busy while the kernel runs");
        OK(cuStreamSynchronize(s));
        uint64_t t_sync = now_ns() - t0;
        CHECK(t_sync >= 20000000, "synchronize waits for the kernel (%llu ns)", (unsigned long long) t_sync);
        OK(cuStreamQuery(s));
        OK(cuEventElapsedTime_v2(&ms, e0, e1));
        CHECK(ms >= 19.9f && ms <= 21.0f, "event elapsed %.3f ms for a 20 ms kernel", ms);
        CUkernel k;
        CUlibrary lib;
        OK(cuLibraryLoadData(&lib, "x", NULL, NULL, 0, NULL, NULL, 0));
        OK(cuLibraryGetKernel(&k, lib, "plain_kernel"));
        int sms;
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
        OK(cuEventRecord(e0, NULL));
        OK(cuLaunchKernel((CUfunction) k, (unsigned) sms * 100, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
        OK(cuEventRecord(e1, NULL));
        OK(cuEventSynchronize(e1));
        OK(cuEventElapsedTime_v2(&ms, e0, e1));
        CHECK(ms > 0.99f && ms < 1.2f, "default model: 100 waves x 10 us = %.3f ms", ms);
        CUlaunchConfig cfg = { .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                               .blockDimZ = 1, .hStream = s };
        uint64_t ns = 1000000;
        void *params[] = { &ns };
        OK(cuLaunchKernelEx(&cfg, f, params, NULL));
        OK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params));
        CHECK(cuLaunchCooperativeKernel(f, (unsigned) sms * 1000, 1, 1, 1, 1, 1, 0, s, params) ==
                      CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
              "cooperative launch too large");
        CHECK(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, params, NULL) == CUDA_ERROR_INVALID_VALUE,
              "2048 threads per block refused");
        int calls = 0;
        OK(cuLaunchHostFunc(s, host_fn, &calls));
        CHECK(calls == 1, "host function ran");
        OK(cuCtxSynchronize());

        /* Graphs: a captured launch sequence, replayed. */
        CUgraph g;
        CUgraphExec gx;
        size_t nodes = 0;
        OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CUstreamCaptureStatus cs;
        OK(cuStreamIsCapturing(s, &cs));
        CHECK(cs == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capturing");
        ns = 2000000;
        for (int i = 0; i < 5; i++)
                OK(launch_ns(f, ns, s));
        CHECK(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "no sync while capturing");
        OK(cuStreamEndCapture(s, &g));
        OK(cuGraphGetNodes(g, NULL, &nodes));
        CHECK(nodes == 5, "5 captured nodes");
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        OK(cuEventRecord(e0, s));
        OK(cuGraphLaunch(gx, s));
        OK(cuEventRecord(e1, s));
        OK(cuStreamSynchronize(s));
        OK(cuEventElapsedTime_v2(&ms, e0, e1));
        /* 10 ms of device time: the nodes run one after the other, each for
         * its duration. e0 is stamped when the host records it and the first
         * node starts when the host launches the graph, so a host preempted
         * in between (a loaded CI machine, ASan) adds its delay: the bound
         * above is below a sixth kernel (12 ms), not a timing goal. */
        CHECK(ms >= 9.9f && ms < 12.0f, "graph of 5 x 2 ms kernels took %.3f ms", ms);
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
        OK(cuStreamDestroy_v2(s));
        OK(cuEventDestroy_v2(e0));
        OK(cuEventDestroy_v2(e1));

        /* cuGetProcAddress: versions, per-thread variants, status codes. */
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, &st));
        CHECK(fn == (void *) cuMemAlloc_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS, "cuMemAlloc@13000 = cuMemAlloc_v2");
        OK(cuGetProcAddress_v2("cuCtxCreate", &fn, 12080, 0, &st));
        CHECK(fn == (void *) cuCtxCreate_v4, "cuCtxCreate@12080 = cuCtxCreate_v4");
        OK(cuGetProcAddress_v2("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        CHECK(fn == dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds") && fn, "per-thread cuMemcpyHtoD = _v2_ptds");
        OK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        CHECK(fn == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz") && fn, "per-thread cuLaunchKernel = _ptsz");
        CHECK(cuGetProcAddress_v2("cuNoSuchThing", &fn, 13000, 0, &st) == CUDA_ERROR_NOT_FOUND &&
                      st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == NULL,
              "unknown symbol: SYMBOL_NOT_FOUND");
        CHECK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &st) == CUDA_ERROR_NOT_FOUND &&
                      st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "cuMemAllocAsync@11000: VERSION_NOT_SUFFICIENT");
        const void *table = NULL;
        CUuuid unknown = { { 1, 2, 3 } };
        CHECK(cuGetExportTable(&table, &unknown) == CUDA_ERROR_NOT_SUPPORTED, "unknown export table refused");
        const char *str;
        OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &str));
        CHECK(strcmp(str, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "error name");
        OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));
        CHECK(cuGetErrorName((CUresult) 12345, &str) == CUDA_ERROR_INVALID_VALUE, "unknown error code");
        /* Threads allocate and free concurrently; the books balance. */
        pthread_t th[4];
        void *tr;
        int bad = 0;
        thread_ctx = pctx;
        for (int i = 0; i < 4; i++)
                pthread_create(&th[i], NULL, alloc_thread, NULL);
        for (int i = 0; i < 4; i++) {
                pthread_join(th[i], &tr);
                bad += tr != NULL;
        }
        OK(cuMemGetInfo_v2(&freeb2, &total));
        CHECK(bad == 0 && freeb2 == freeb, "4 threads x 500 allocations: balanced");

        /* A child forked after cuInit cannot use CUDA (as with the real driver). */
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
                int cnt;
                _exit(cuInit(0) == CUDA_ERROR_NOT_INITIALIZED && cuDeviceGetCount(&cnt) == CUDA_ERROR_NOT_INITIALIZED
                              ? 0
                              : 1);
        }
        int wst = 0;
        waitpid(child, &wst, 0);
        CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "forked child: CUDA_ERROR_NOT_INITIALIZED");

        OK(cuDevicePrimaryCtxRelease_v2(0));
        printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
        return failures != 0;
}

static CUdeviceptr late_ptr;

static void late_teardown(void) {
        CUresult r1 = cuMemFree_v2(late_ptr), r2 = cuDevicePrimaryCtxRelease_v2(0);
        printf("late teardown: free %d release %d\n", (int) r1, (int) r2);
}

static int cmd_exit_late(unsigned long long mib) {
        atexit(late_teardown); /* before cuInit's handler: runs after it */
        setup();
        if (cuMemAlloc_v2(&late_ptr, (size_t) mib << 20) != CUDA_SUCCESS)
                return 1;
        printf("allocated\n");
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc >= 2 && strcmp(argv[1], "selftest") == 0)
                return cmd_selftest();
        if (argc >= 2 && strcmp(argv[1], "info") == 0)
                return cmd_info();
        if (argc >= 4 && strcmp(argv[1], "hold") == 0)
                return cmd_hold(strtoull(argv[2], NULL, 10), (unsigned) atoi(argv[3]));
        if (argc >= 4 && strcmp(argv[1], "burn") == 0)
                return cmd_burn(strtoull(argv[2], NULL, 10), (unsigned) atoi(argv[3]));
        if (argc >= 4 && strcmp(argv[1], "flood") == 0)
                return cmd_flood(strtoull(argv[2], NULL, 10), (unsigned) atoi(argv[3]));
        if (argc >= 5 && strcmp(argv[1], "duty") == 0)
                return cmd_duty(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), (unsigned) atoi(argv[4]));
        if (argc >= 2 && strcmp(argv[1], "oom") == 0)
                return cmd_oom();
        if (argc >= 3 && strcmp(argv[1], "bench") == 0)
                return cmd_bench((unsigned) atoi(argv[2]));
        if (argc >= 3 && strcmp(argv[1], "nvml") == 0)
                return cmd_nvml((unsigned) atoi(argv[2]));
        if (argc >= 2 && strcmp(argv[1], "mig-setup") == 0)
                return cmd_mig_setup();
        if (argc >= 3 && strcmp(argv[1], "exit-late") == 0)
                return cmd_exit_late(strtoull(argv[2], NULL, 10));
        fprintf(stderr, "usage: %s selftest|info|hold MIB SECONDS|burn NS COUNT|flood NS COUNT|duty NS PERIOD COUNT|oom\n", argv[0]);
        return 2;
}
