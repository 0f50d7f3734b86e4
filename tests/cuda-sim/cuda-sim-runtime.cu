// A CUDA runtime program for the CUDA driver simulator's tests, built with
// `nvcc -cudart shared` (sim/cuda/CMakeLists.txt): it queries memory,
// allocates, copies, launches kernels (a plain one and one the simulator runs
// for a given time), captures and replays a graph, and synchronises. On a
// real GPU it runs unchanged (the timed kernel spins for the time asked).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

// The simulator's duration convention: a kernel whose name contains
// "mksim_sleep" runs for the nanoseconds of its first parameter.
__global__ void mksim_sleep_kernel(unsigned long long ns) {
#if __CUDA_ARCH__ >= 700
    for (unsigned long long t = 0; t < ns; t += 1000)
        __nanosleep(1000);
#endif
}

__global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

static int failures;
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        printf("%s ", (cond) ? "ok  " : "FAIL");                                \
        printf(__VA_ARGS__);                                                    \
        printf("\n");                                                           \
        if (!(cond))                                                            \
            failures++;                                                         \
    } while (0)
#define OK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        CHECK(e_ == cudaSuccess, "%s -> %s", #call, cudaGetErrorName(e_));      \
    } while (0)

int main() {
    int n = 0, rt = 0, drv = 0;
    OK(cudaRuntimeGetVersion(&rt));
    OK(cudaDriverGetVersion(&drv));
    printf("runtime %d driver %d\n", rt, drv);
    OK(cudaGetDeviceCount(&n));
    CHECK(n >= 1, "%d devices", n);
    if (n < 1)
        return 1;
    cudaDeviceProp prop;
    OK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s, %zu MiB, %d SMs, cc %d.%d\n", prop.name, prop.totalGlobalMem >> 20,
           prop.multiProcessorCount, prop.major, prop.minor);
    OK(cudaSetDevice(0));

    size_t free0, total0, free1, total1;
    OK(cudaMemGetInfo(&free0, &total0));
    CHECK(total0 == prop.totalGlobalMem, "cudaMemGetInfo total %zu MiB, free %zu MiB", total0 >> 20, free0 >> 20);

    const int count = 1 << 20;
    int *d = nullptr;
    OK(cudaMalloc(&d, 64 << 20));
    OK(cudaMemGetInfo(&free1, &total1));
    CHECK(free0 - free1 >= (64u << 20), "64 MiB allocation seen: free dropped by %zu MiB", (free0 - free1) >> 20);

    static int host[1 << 20], back[1 << 20];
    for (int i = 0; i < count; i++)
        host[i] = i;
    OK(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice));
    OK(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost));
    CHECK(memcmp(host, back, sizeof(host)) == 0, "bytes survive the round trip");

    add_one<<<(count + 255) / 256, 256>>>(d, count);
    OK(cudaGetLastError());
    OK(cudaDeviceSynchronize());

    cudaEvent_t e0, e1;
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    OK(cudaEventRecord(e0));
    mksim_sleep_kernel<<<1, 1>>>(20000000ULL);
    OK(cudaGetLastError());
    OK(cudaEventRecord(e1));
    OK(cudaEventSynchronize(e1));
    float ms = 0;
    OK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 19.0f && ms < 40.0f, "a 20 ms kernel took %.2f ms", ms);

    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t gx;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 4; i++)
        mksim_sleep_kernel<<<1, 1, 0, s>>>(5000000ULL);
    OK(cudaStreamEndCapture(s, &g));
    OK(cudaGraphInstantiate(&gx, g, 0));
    OK(cudaEventRecord(e0, s));
    OK(cudaGraphLaunch(gx, s));
    OK(cudaEventRecord(e1, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 19.0f && ms < 40.0f, "a graph of 4 x 5 ms kernels took %.2f ms", ms);
    OK(cudaGraphExecDestroy(gx));
    OK(cudaGraphDestroy(g));

    void *async = nullptr;
    OK(cudaMallocAsync(&async, 32 << 20, s));
    OK(cudaFreeAsync(async, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaStreamDestroy(s));

    OK(cudaFree(d));
    OK(cudaMemGetInfo(&free1, &total1));
    CHECK(free1 == free0, "free memory back to %zu MiB", free1 >> 20);
    size_t too_much = total0 + (1u << 30);
    void *big = nullptr;
    cudaError_t e = cudaMalloc(&big, too_much);
    CHECK(e == cudaErrorMemoryAllocation, "allocating more than the device has: %s", cudaGetErrorName(e));
    cudaGetLastError();
    printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
    return failures != 0;
}
