/* Shared by the toolkit library tests (tests/cuda-libs): status checks and
 * the simulator's truth about the memory this process holds.
 *
 * The simulator computes nothing, so the tests check status codes only, never
 * numbers; and they check that what a library allocates is charged to the
 * device, as NVML (the simulator's libnvidia-ml.so.1) lists this process. */
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "nvml/nvml-abi.h"

#define X(name, ret, args) ret name args;
MK_NVML_FUNCTIONS(X)
#undef X

/* Set from the command line ("oom") when the test runs the program under a
 * memory cap too small for it: then a call that fails with its library's
 * out-of-memory status ends the program successfully, and reaching the end
 * without one is a failure (finish()). */
static int expect_oom;

/* CHECK_OOM(what, expr, ok, oom): the call must return ok (or, under
 * expect_oom, oom); the first failure ends the program. */
#define CHECK_OOM(what, expr, ok, oom)                                                                          \
        do {                                                                                                    \
                long long rc_ = (long long) (expr);                                                             \
                if (expect_oom && rc_ == (long long) (oom)) {                                                   \
                        printf("OOM %s: status %lld, the library's out-of-memory status\n", what, rc_);         \
                        exit(0);                                                                                \
                }                                                                                               \
                if (rc_ != (long long) (ok)) {                                                                  \
                        fprintf(stderr, "FAIL %s: status %lld (line %d)\n", what, rc_, __LINE__);               \
                        exit(1);                                                                                \
                }                                                                                               \
                printf("ok %s\n", what);                                                                        \
        } while (0)
#define CHECK(what, expr, ok) CHECK_OOM(what, expr, ok, -1)
#define RT(what, expr) CHECK_OOM(what, expr, cudaSuccess, cudaErrorMemoryAllocation)

/* The end of a program: under expect_oom it should not have come this far. */
static inline int finish(void) {
        if (expect_oom) {
                fprintf(stderr, "FAIL: no call failed with an out-of-memory status under the cap\n");
                return 1;
        }
        printf("PASSED\n");
        return 0;
}

/* Bytes the simulated device (NVML index dev: the CUDA index too, as the
 * tests set no CUDA_VISIBLE_DEVICES) has charged to this process. */
static inline unsigned long long proc_mem(int dev) {
        static int inited;
        nvmlDevice_t d;
        nvmlProcessInfo_t procs[64];
        unsigned n = 64;

        if (!inited) {
                if (nvmlInit_v2() != NVML_SUCCESS) {
                        fprintf(stderr, "FAIL nvmlInit_v2\n");
                        exit(1);
                }
                inited = 1;
        }
        if (nvmlDeviceGetHandleByIndex_v2((unsigned) dev, &d) != NVML_SUCCESS ||
            nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs) != NVML_SUCCESS) {
                fprintf(stderr, "FAIL NVML process list of GPU %d\n", dev);
                exit(1);
        }
        for (unsigned i = 0; i < n; i++)
                if (procs[i].pid == (unsigned) getpid())
                        return procs[i].usedGpuMemory;
        return 0;
}

/* The device must hold at least min bytes more for this process than at base. */
static inline unsigned long long expect_charged(int dev, unsigned long long base, unsigned long long min,
                                                const char *what) {
        unsigned long long now = proc_mem(dev);
        printf("mem %s: %llu bytes charged (%+lld since the baseline, at least %llu expected)\n", what, now,
               (long long) (now - base), min);
        if (now < base + min) {
                fprintf(stderr, "FAIL %s: the device holds %llu bytes for this process, expected at least %llu\n",
                        what, now, base + min);
                exit(1);
        }
        return now;
}

/* The CUDA runtime's context on dev, and the bytes charged once it exists. */
static inline unsigned long long start_device(int dev) {
        RT("cudaSetDevice", cudaSetDevice(dev));
        RT("cudaFree(0)", cudaFree(0));
        unsigned long long base = proc_mem(dev);
        size_t free_b = 0, total_b = 0;
        RT("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b));
        /* The test checks the total under a memory cap (the soft-slicing library preloaded). */
        printf("mem device %d total: %zu\n", dev, total_b);
        printf("mem context: %llu bytes charged\n", base);
        return base;
}
