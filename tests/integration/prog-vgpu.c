/* A CUDA driver API client for tests/integration/test-vgpu*.sh and the
 * vgpu bench, run with and without libmigkit-vgpu.so preloaded, on the CUDA
 * driver simulator (or a real driver). It reaches the driver one of three
 * ways, as programs do:
 *
 *   direct    calls the exported versioned names (linked to libcuda.so.1)
 *   dlsym     dlopen("libcuda.so.1") + dlsym of the versioned names
 *   procaddr  dlsym of cuGetProcAddress_v2 only, then plain names through
 *             it, as the CUDA runtime does
 *
 * prog-vgpu MODE COMMAND [ARGS]
 *   info                     cuMemGetInfo, cuDeviceTotalMem and NVML totals of device 0
 *   fill CHUNK_MIB HOLD_S    allocate chunks until refused, print "filled BYTES", hold
 *   hold MIB SECONDS         allocate MIB, print "ready", sleep
 *   storm SECONDS SEED       random allocations and frees on every path, until killed
 *   paths MIB                every allocation path: bytes charged and given back
 *   threads N CHUNK_MIB      N threads fill concurrently; print "filled BYTES"
 *   fork MIB                 allocations across fork (before and after cuInit)
 *   symbols                  unknown names, cuGetExportTable, RTLD_NEXT/DEFAULT
 *   burn KIND SECONDS NS     kernels of NS ns (KIND: async, sync, graph) for SECONDS;
 *                            print "busy_ns B wall_ns W share P"
 *   bench-alloc N [LIVE]     N cuMemAlloc/cuMemFree pairs of 1 MiB, LIVE 4 KiB allocations held
 *                            meanwhile: "alloc_free_ns X"
 *   bench-cudart N           N cudaMalloc/cudaFree pairs of 1 MiB through the CUDA runtime
 *                            ($PROG_VGPU_CUDART, default the toolkit's libcudart.so): "cudart_alloc_free_ns X"
 *   bench-launch N           N launches of a 1-block kernel (no sync): "launch_ns X"
 *   vmm ORDER MIB            a VMM allocation's charge through one order of calls (ORDER:
 *                            release-mapped, unmap-first, retain, thread, host, range, export;
 *                            keep-mapped: the bench's, "held physical B");
 *                            prints "vmm ORDER ok" or FAIL lines
 *   ctx MIB                  contexts charged: prints "ctx primary B created B destroyed B"
 *   procs                    NVML's compute processes of device 0 (v1, v2, v3): "procs vN pid P used B"
 *   nvml-totals N            NVML's memory total of NVML devices 0..N-1: "nvml I total T" (no CUDA call)
 *   pinned MIB               cuMemAllocHost of MIB with the device at its cap: "pinned R"
 *   exchange ROUNDS IN OUT   tensor-parallel style: ROUNDS of (2 ms kernel, synchronise, a byte
 *                            to fifo OUT, a byte from fifo IN): "exchange done ROUNDS share P"
 *   pool-fill MIB            the bench's: MIB kept reserved by the pool, then 64 MiB allocations
 *                            until refused: "held physical B"
 *   graph MIB                graph memory: allocation nodes (added, captured, in a child graph)
 *                            charged from their launch while the graph pool reserves them, refused
 *                            past the cap, given back by cuDeviceGraphMemTrim: "graph ok"
 *   pool MIB                 the default pool keeps MIB reserved past a free (release threshold):
 *                            charged while reserved, given back by cuMemPoolTrimTo: "pool ok"
 * Device $PROG_VGPU_DEVICE (default 0), its primary context. Exit 0 on success, 1 on a failed check,
 * 2 when the driver cannot be set up, 77 when the mode is unavailable. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/cuda-abi.h"

typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
struct access_desc {  /* CUmemAccessDesc */
        CUmemLocation location;
        unsigned long long flags;
};

/* CUgraphNodeParams (cuda.h 13.0) holding a child graph's parameters
 * (CUDA_CHILD_GRAPH_NODE_PARAMS: the graph, its ownership). */
struct graph_node_params {
        int type; /* CUgraphNodeType */
        int reserved0[3];
        union {
                long long reserved1[29];
                struct {
                        CUgraph graph;
                        int ownership; /* CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE 0, _MOVE 1 */
                } child;
        };
        long long reserved2;
};
_Static_assert(sizeof(struct graph_node_params) == 256, "CUgraphNodeParams is 256 bytes");
#define GRAPH_NODE_TYPE_GRAPH 4 /* CU_GRAPH_NODE_TYPE_GRAPH */
#define CHILD_GRAPH_OWNERSHIP_MOVE 1

/* name used by the exported symbol, name asked of cuGetProcAddress, type. */
#define CU_FUNCS(X)                                                                                           \
        X(cuInit, "cuInit", CUresult (*)(unsigned))                                                          \
        X(cuDeviceGet, "cuDeviceGet", CUresult (*)(CUdevice *, int))                                         \
        X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice))         \
        X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult (*)(CUcontext))                                      \
        X(cuCtxSynchronize, "cuCtxSynchronize", CUresult (*)(void))                                          \
        X(cuMemAlloc_v2, "cuMemAlloc", CUresult (*)(CUdeviceptr *, size_t))                                  \
        X(cuMemFree_v2, "cuMemFree", CUresult (*)(CUdeviceptr))                                              \
        X(cuMemGetInfo_v2, "cuMemGetInfo", CUresult (*)(size_t *, size_t *))                                 \
        X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", CUresult (*)(size_t *, CUdevice))                         \
        X(cuMemAllocPitch_v2, "cuMemAllocPitch", CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned)) \
        X(cuMemAllocManaged, "cuMemAllocManaged", CUresult (*)(CUdeviceptr *, size_t, unsigned))             \
        X(cuMemAllocAsync, "cuMemAllocAsync", CUresult (*)(CUdeviceptr *, size_t, CUstream))                 \
        X(cuMemFreeAsync, "cuMemFreeAsync", CUresult (*)(CUdeviceptr, CUstream))                             \
        X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync",                                                \
          CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))                                       \
        X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", CUresult (*)(CUmemoryPool *, CUdevice))    \
        X(cuMemCreate, "cuMemCreate",                                                                        \
          CUresult (*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
        X(cuMemRelease, "cuMemRelease", CUresult (*)(CUmemGenericAllocationHandle))                          \
        X(cuStreamCreate, "cuStreamCreate", CUresult (*)(CUstream *, unsigned))                              \
        X(cuStreamSynchronize, "cuStreamSynchronize", CUresult (*)(CUstream))                                \
        X(cuLibraryLoadData, "cuLibraryLoadData",                                                            \
          CUresult (*)(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned))     \
        X(cuLibraryGetKernel, "cuLibraryGetKernel", CUresult (*)(CUkernel *, CUlibrary, const char *))      \
        X(cuKernelGetFunction, "cuKernelGetFunction", CUresult (*)(CUfunction *, CUkernel))                  \
        X(cuLaunchKernel, "cuLaunchKernel",                                                                  \
          CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                       CUstream, void **, void **))                                                          \
        X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", CUresult (*)(CUstream, int))                     \
        X(cuStreamEndCapture, "cuStreamEndCapture", CUresult (*)(CUstream, CUgraph *))                       \
        X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",                                        \
          CUresult (*)(CUgraphExec *, CUgraph, unsigned long long))                                          \
        X(cuGraphLaunch, "cuGraphLaunch", CUresult (*)(CUgraphExec, CUstream))                               \
        X(cuGetExportTable, "cuGetExportTable", CUresult (*)(const void **, const CUuuid *))                 \
        X(cuMemAddressReserve, "cuMemAddressReserve",                                                        \
          CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                      \
        X(cuMemAddressFree, "cuMemAddressFree", CUresult (*)(CUdeviceptr, size_t))                           \
        X(cuMemMap, "cuMemMap",                                                                              \
          CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))       \
        X(cuMemUnmap, "cuMemUnmap", CUresult (*)(CUdeviceptr, size_t))                                       \
        X(cuMemSetAccess, "cuMemSetAccess", CUresult (*)(CUdeviceptr, size_t, const struct access_desc *, size_t)) \
        X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle",                                        \
          CUresult (*)(CUmemGenericAllocationHandle *, void *))                                              \
        X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle",                                      \
          CUresult (*)(void *, CUmemGenericAllocationHandle, int, unsigned long long))                       \
        X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle",                                  \
          CUresult (*)(CUmemGenericAllocationHandle *, void *, int))                                         \
        X(cuCtxCreate_v2, "cuCtxCreate", CUresult (*)(CUcontext *, unsigned, CUdevice))                      \
        X(cuCtxDestroy_v2, "cuCtxDestroy", CUresult (*)(CUcontext))                                          \
        X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", CUresult (*)(CUdevice))                 \
        X(cuMemAllocHost_v2, "cuMemAllocHost", CUresult (*)(void **, size_t))                                \
        X(cuMemFreeHost, "cuMemFreeHost", CUresult (*)(void *))                                              \
        X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", CUresult (*)(CUmemoryPool, int, void *))           \
        X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", CUresult (*)(CUmemoryPool, int, void *))           \
        X(cuMemPoolTrimTo, "cuMemPoolTrimTo", CUresult (*)(CUmemoryPool, size_t))                            \
        X(cuGraphCreate, "cuGraphCreate", CUresult (*)(CUgraph *, unsigned))                                 \
        X(cuGraphDestroy, "cuGraphDestroy", CUresult (*)(CUgraph))                                           \
        X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode",                                                  \
          CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *))   \
        X(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode",                                                    \
          CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr))                    \
        X(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode",                                              \
          CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph))                        \
        X(cuGraphAddNode, "cuGraphAddNode",                                                                  \
          CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, struct graph_node_params *))     \
        X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult (*)(CUgraphExec))                               \
        X(cuGraphUpload, "cuGraphUpload", CUresult (*)(CUgraphExec, CUstream))                               \
        X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", CUresult (*)(CUdevice))

/* Weak: without a driver at link time the direct mode is unavailable. */
#define DECLARE_WEAK(sym, name, type) extern __typeof__(*(type) 0) sym __attribute__((weak));
CU_FUNCS(DECLARE_WEAK)

static struct {
#define FIELD(sym, name, type) __typeof__(type) sym;
        CU_FUNCS(FIELD)
} cu;

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, int *);

static const char *cu_mode;  /* direct, dlsym, procaddr */

static int load(const char *mode) {
        cu_mode = mode;
        if (strcmp(mode, "direct") == 0) {
                if (!&cuInit)
                        return 77;
#define DIRECT(sym, name, type) cu.sym = &sym;
                CU_FUNCS(DIRECT)
                return 0;
        }
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h) {
                fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
                return 2;
        }
        if (strcmp(mode, "dlsym") == 0) {
#define BY_DLSYM(sym, name, type) cu.sym = (type) dlsym(h, #sym);
                CU_FUNCS(BY_DLSYM)
                return 0;
        }
        if (strcmp(mode, "procaddr") == 0) {
                gpa_fn gpa = (gpa_fn) dlsym(h, "cuGetProcAddress_v2");
                if (!gpa)
                        return 2;
                int st;
                void *p;
#define BY_GPA(sym, name, type)                                                 \
        p = NULL;                                                               \
        if (gpa(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == 0 && st == 0) \
                cu.sym = (type) p;
                CU_FUNCS(BY_GPA)
                return 0;
        }
        fprintf(stderr, "unknown mode '%s'\n", mode);
        return 2;
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static int device_index(void) {
        const char *e = getenv("PROG_VGPU_DEVICE");
        return e ? (int) strtol(e, NULL, 10) : 0;
}

static int setup(void) {
        CUdevice d;
        CUcontext c;
        if (!cu.cuInit || cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGet(&d, device_index()) != CUDA_SUCCESS ||
            cu.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cu.cuCtxSetCurrent(c) != CUDA_SUCCESS) {
                fprintf(stderr, "cannot set up device %d\n", device_index());
                return 2;
        }
        return 0;
}

static int failures;
#define CHECK(cond, ...)                                                         \
        do {                                                                     \
                if (!(cond)) {                                                   \
                        failures++;                                              \
                        printf("FAIL %s:%d: ", __FILE__, __LINE__);              \
                        printf(__VA_ARGS__);                                     \
                        printf("\n");                                            \
                }                                                                \
        } while (0)

static size_t mem_used(void) {
        size_t f = 0, t = 0;
        cu.cuMemGetInfo_v2(&f, &t);
        return t - f;
}

typedef nvmlReturn_t (*nvml_init_fn)(void);
typedef nvmlReturn_t (*nvml_handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_mem_fn)(nvmlDevice_t, vgpu_nvmlMemory_t *);

static int cmd_info(void) {
        size_t f, t, tot;
        if (cu.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS || cu.cuDeviceTotalMem_v2(&tot, device_index()) != CUDA_SUCCESS)
                return 1;
        printf("cuMemGetInfo total %zu free %zu\n", t, f);
        printf("cuDeviceTotalMem %zu\n", tot);
        void *n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_init_fn ini = n ? (nvml_init_fn) dlsym(n, "nvmlInit_v2") : NULL;
        nvml_handle_fn by_index = n ? (nvml_handle_fn) dlsym(n, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        nvml_mem_fn mem = n ? (nvml_mem_fn) dlsym(n, "nvmlDeviceGetMemoryInfo") : NULL;
        nvmlDevice_t dev;
        vgpu_nvmlMemory_t m;
        if (ini && by_index && mem && ini() == 0 && by_index((unsigned) device_index(), &dev) == 0 && mem(dev, &m) == 0)
                printf("nvmlDeviceGetMemoryInfo total %llu used %llu free %llu\n", m.total, m.used, m.free);
        return 0;
}

static void hold_until(unsigned seconds) {
        fflush(stdout);
        for (unsigned i = 0; i < seconds * 10; i++) {
                struct timespec ts = { 0, 100 * 1000 * 1000 };
                nanosleep(&ts, NULL);
        }
}

static int cmd_fill(size_t chunk, unsigned hold) {
        size_t total = 0;
        CUdeviceptr p;
        CUresult r;
        while ((r = cu.cuMemAlloc_v2(&p, chunk)) == CUDA_SUCCESS)
                total += chunk;
        printf("filled %zu result %d\n", total, (int) r);
        hold_until(hold);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

static int cmd_hold(size_t bytes, unsigned seconds) {
        CUdeviceptr p;
        CUresult r = cu.cuMemAlloc_v2(&p, bytes);
        printf(r == CUDA_SUCCESS ? "ready\n" : "refused %d\n", (int) r);
        hold_until(seconds);
        return r == CUDA_SUCCESS ? 0 : 1;
}

/* Allocation paths: each returns the pointer/handle and a free function. */
enum path { P_ALLOC, P_PITCH, P_MANAGED, P_ASYNC, P_POOL, P_CREATE, P_MAX };
static const char *const path_names[P_MAX] = { "cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged",
                                               "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate" };

static CUresult path_alloc(enum path p, size_t bytes, uint64_t *ret, size_t *ret_size) {
        CUdeviceptr d = 0;
        CUresult r;
        CUmemoryPool pool;
        size_t pitch = 0;
        *ret_size = bytes;
        switch (p) {
        case P_ALLOC:
                r = cu.cuMemAlloc_v2(&d, bytes);
                break;
        case P_PITCH:
                r = cu.cuMemAllocPitch_v2(&d, &pitch, bytes / 1024 + 3, 1024, 4);
                *ret_size = pitch * 1024;
                break;
        case P_MANAGED:
                r = cu.cuMemAllocManaged(&d, bytes, 1 /* CU_MEM_ATTACH_GLOBAL */);
                break;
        case P_ASYNC:
                r = cu.cuMemAllocAsync(&d, bytes, NULL);
                break;
        case P_POOL:
                r = cu.cuDeviceGetDefaultMemPool(&pool, device_index());
                if (r == CUDA_SUCCESS)
                        r = cu.cuMemAllocFromPoolAsync(&d, bytes, pool, NULL);
                break;
        case P_CREATE: {
                CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                             .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device_index() } };
                CUmemGenericAllocationHandle h;
                size_t gran = 2u << 20;
                *ret_size = (bytes + gran - 1) / gran * gran;
                r = cu.cuMemCreate(&h, *ret_size, &prop, 0);
                d = h;
                break;
        }
        default:
                return CUDA_ERROR_INVALID_VALUE;
        }
        *ret = d;
        return r;
}

static CUresult path_free(enum path p, uint64_t x) {
        switch (p) {
        case P_ASYNC:
        case P_POOL: {
                CUresult r = cu.cuMemFreeAsync(x, NULL);
                cu.cuCtxSynchronize();
                return r;
        }
        case P_CREATE:
                return cu.cuMemRelease(x);
        default:
                return cu.cuMemFree_v2(x);
        }
}

static int cmd_paths(size_t bytes) {
        for (int p = 0; p < P_MAX; p++) {
                uint64_t x;
                size_t size;
                size_t before = mem_used();
                CUresult r = path_alloc((enum path) p, bytes, &x, &size);
                if (r != CUDA_SUCCESS) {
                        printf("path %s unavailable %d\n", path_names[p], (int) r);
                        continue;
                }
                size_t mid = mem_used();
                r = path_free((enum path) p, x);
                size_t after = mem_used();
                printf("path %s size %zu charged %zu released %zu free %d\n", path_names[p], size, mid - before,
                       mid - after, (int) r);
                CHECK(mid - before == size, "%s charged %zu, allocated %zu", path_names[p], mid - before, size);
                CHECK(mid - after == size, "%s released %zu of %zu", path_names[p], mid - after, size);
        }
        return failures ? 1 : 0;
}

static int cmd_storm(unsigned seconds, unsigned seed) {
        uint64_t keep[64] = { 0 };
        size_t sizes[64];
        enum path kinds[64];
        uint64_t end = now_ns() + (uint64_t) seconds * 1000000000ull;
        srand(seed);
        printf("ready\n");
        fflush(stdout);
        while (now_ns() < end) {
                int i = rand() % 64;
                if (keep[i]) {
                        path_free(kinds[i], keep[i]);
                        keep[i] = 0;
                } else {
                        enum path p = (enum path) (rand() % P_MAX);
                        size_t want = ((size_t) (rand() % 64) + 1) << 20, got;
                        if (path_alloc(p, want, &keep[i], &got) != CUDA_SUCCESS)
                                keep[i] = 0;
                        sizes[i] = got;
                        kinds[i] = p;
                }
        }
        (void) sizes;
        return 0;
}

struct fill_arg {
        size_t chunk, total;
};

static void *fill_thread(void *a) {
        struct fill_arg *f = a;
        CUdeviceptr p;
        CUdevice d;
        CUcontext c;
        cu.cuDeviceGet(&d, device_index());
        cu.cuDevicePrimaryCtxRetain(&c, d);
        cu.cuCtxSetCurrent(c);
        while (cu.cuMemAlloc_v2(&p, f->chunk) == CUDA_SUCCESS)
                f->total += f->chunk;
        return NULL;
}

static int cmd_threads(unsigned n, size_t chunk) {
        pthread_t t[64];
        struct fill_arg a[64];
        if (n > 64)
                n = 64;
        for (unsigned i = 0; i < n; i++) {
                a[i] = (struct fill_arg) { .chunk = chunk };
                pthread_create(&t[i], NULL, fill_thread, &a[i]);
        }
        size_t total = 0;
        for (unsigned i = 0; i < n; i++) {
                pthread_join(t[i], NULL);
                total += a[i].total;
        }
        printf("filled %zu\n", total);
        return 0;
}

/* Before cuInit: two children each allocate; after: the parent's charge
 * survives a child that exits. Prints what cuMemGetInfo sees. */
static int cmd_fork(size_t bytes, const char *mode) {
        for (int i = 0; i < 2; i++) {
                pid_t p = fork();
                if (p == 0) {
                        if (setup() != 0)
                                _exit(2);
                        CUdeviceptr d;
                        _exit(cu.cuMemAlloc_v2(&d, bytes) == CUDA_SUCCESS ? 0 : 1);
                }
                int st;
                waitpid(p, &st, 0);
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %d", i, st);
        }
        int r = setup();
        if (r)
                return r;
        CHECK(mem_used() == 0, "children's charges left after they exited: %zu", mem_used());
        CUdeviceptr d;
        CHECK(cu.cuMemAlloc_v2(&d, bytes) == CUDA_SUCCESS, "parent allocation");
        pid_t p = fork();
        if (p == 0)
                _exit(0);  /* the child's exit must not drop the parent's slot */
        waitpid(p, NULL, 0);
        CHECK(mem_used() == bytes, "after a child exited the parent has %zu charged, not %zu", mem_used(), bytes);
        printf("fork ok used %zu\n", mem_used());
        (void) mode;
        return failures ? 1 : 0;
}

static int cmd_symbols(void) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        CHECK(h != NULL, "dlopen");
        CHECK(dlsym(h, "cuFutureFunction_v9") == NULL, "an unknown name resolved");
        CHECK(dlsym(h, "cuDeviceGetName") != NULL, "cuDeviceGetName did not resolve");
        CHECK(dlsym(RTLD_DEFAULT, "printf") == (void *) printf, "RTLD_DEFAULT printf");
        CHECK(dlsym(RTLD_NEXT, "malloc") != NULL, "RTLD_NEXT malloc");
        gpa_fn gpa = (gpa_fn) dlsym(h, "cuGetProcAddress_v2");
        CHECK(gpa != NULL, "cuGetProcAddress_v2");
        if (gpa) {
                void *p = (void *) 1;
                int st = -1;
                CUresult r = gpa("cuFutureFunction", &p, 99000, 0, &st);
                printf("unknown via cuGetProcAddress_v2: result %d status %d\n", (int) r, st);
                CHECK(r != CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown symbol");
                /* Asking for cuGetProcAddress itself, and a per-thread variant. */
                void *self = NULL;
                CHECK(gpa("cuGetProcAddress", &self, 12000, 0, &st) == CUDA_SUCCESS && self, "self");
                void *lk = NULL;
                CHECK(gpa("cuLaunchKernel", &lk, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) ==
                              CUDA_SUCCESS && lk, "cuLaunchKernel per-thread");
        }
        if (cu.cuGetExportTable) {
                const void *t = NULL;
                CUuuid bogus = { { 1, 2, 3 } };
                CUresult r = cu.cuGetExportTable(&t, &bogus);
                printf("cuGetExportTable(bogus) %d\n", (int) r);
                CHECK(r != CUDA_SUCCESS, "a bogus export table");
        }
        printf("symbols done\n");
        return failures ? 1 : 0;
}

static CUfunction sleep_kernel(void) {
        static const char image[] = "fake image: the simulator does not parse it";
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        if (!cu.cuLibraryLoadData || cu.cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0) != CUDA_SUCCESS ||
            cu.cuLibraryGetKernel(&k, lib, "_Z17mksim_sleep_kernely") != CUDA_SUCCESS ||
            cu.cuKernelGetFunction(&f, k) != CUDA_SUCCESS)
                return NULL;
        return f;
}

/* Grid size from $PROG_VGPU_GRID (default 1): the simulator runs the
 * kernel for ns whatever the grid; limiters that count blocks see it. */
static unsigned grid_x(void) {
        const char *e = getenv("PROG_VGPU_GRID");
        unsigned long g = e ? strtoul(e, NULL, 10) : 1;
        return g ? (unsigned) g : 1;
}

static CUresult launch_ns(CUfunction f, uint64_t ns, CUstream s) {
        void *params[] = { &ns };
        return cu.cuLaunchKernel(f, grid_x(), 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static int cmd_burn(const char *kind, unsigned seconds, uint64_t ns) {
        CUfunction f = sleep_kernel();
        CUstream s;
        if (!f || cu.cuStreamCreate(&s, 0) != CUDA_SUCCESS)
                return 2;
        CUgraphExec exec = NULL;
        unsigned per_graph = 5;
        if (strcmp(kind, "graph") == 0) {
                CUgraph g;
                if (cu.cuStreamBeginCapture_v2(s, 2 /* RELAXED */) != CUDA_SUCCESS)
                        return 77;
                for (unsigned i = 0; i < per_graph; i++)
                        launch_ns(f, ns, s);
                if (cu.cuStreamEndCapture(s, &g) != CUDA_SUCCESS ||
                    cu.cuGraphInstantiateWithFlags(&exec, g, 0) != CUDA_SUCCESS)
                        return 77;
        }
        uint64_t start = now_ns(), end = start + (uint64_t) seconds * 1000000000ull, busy = 0;
        unsigned n = 0;
        while (now_ns() < end) {
                if (exec) {
                        cu.cuGraphLaunch(exec, s);
                        cu.cuStreamSynchronize(s);
                        busy += per_graph * ns;
                } else {
                        launch_ns(f, ns, s);
                        busy += ns;
                        if (strcmp(kind, "sync") == 0 || ++n % 16 == 0)
                                cu.cuStreamSynchronize(s);
                }
        }
        cu.cuStreamSynchronize(s);
        uint64_t wall = now_ns() - start;
        printf("busy_ns %llu wall_ns %llu share %.2f\n", (unsigned long long) busy, (unsigned long long) wall,
               100.0 * (double) busy / (double) wall);
        return 0;
}

static int cmd_bench_alloc(unsigned n, unsigned live) {
        CUdeviceptr p;
        /* live allocations held meanwhile: a table the frees search */
        for (unsigned i = 0; i < live; i++)
                if (cu.cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS)
                        return 1;
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < n; i++) {
                if (cu.cuMemAlloc_v2(&p, 1u << 20) != CUDA_SUCCESS)
                        return 1;
                cu.cuMemFree_v2(p);
        }
        printf("alloc_free_ns %.1f\n", (double) (now_ns() - t0) / n);
        return 0;
}

/* cudaMalloc + cudaFree pairs of 1 MiB through the CUDA runtime (libcudart,
 * $PROG_VGPU_CUDART or the toolkit's), which reaches the driver through
 * cuGetProcAddress; the first call (the runtime's start) is not timed. */
static int cmd_bench_cudart(unsigned n) {
        typedef int (*malloc_fn)(void **, size_t);
        typedef int (*free_fn)(void *);
        const char *path = getenv("PROG_VGPU_CUDART");
        void *h = dlopen(path ? path : "/usr/local/cuda/lib64/libcudart.so", RTLD_NOW);
        if (!h)
                return 77;
        malloc_fn cuda_malloc = (malloc_fn) dlsym(h, "cudaMalloc");
        free_fn cuda_free = (free_fn) dlsym(h, "cudaFree");
        void *p;
        if (!cuda_malloc || !cuda_free || cuda_malloc(&p, 1u << 20) != 0 || cuda_free(p) != 0)
                return 77;
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < n; i++) {
                if (cuda_malloc(&p, 1u << 20) != 0)
                        return 1;
                cuda_free(p);
        }
        printf("cudart_alloc_free_ns %.1f\n", (double) (now_ns() - t0) / n);
        return 0;
}

static int cmd_bench_launch(unsigned n) {
        CUfunction f = sleep_kernel();
        CUstream s;
        if (!f || cu.cuStreamCreate(&s, 0) != CUDA_SUCCESS)
                return 2;
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < n; i++)
                launch_ns(f, 0, s);
        uint64_t t = now_ns() - t0;
        cu.cuStreamSynchronize(s);
        printf("launch_ns %.1f\n", (double) t / n);
        return 0;
}

/* ---- VMM, contexts, NVML process lists, pinned memory ---- */

#define GRAN (2ull << 20)

static CUresult vmm_create(size_t size, int loc_type, int handle_types, CUmemGenericAllocationHandle *h) {
        CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                     .requestedHandleTypes = handle_types,
                                     .location = { .type = loc_type, .id = loc_type == CU_MEM_LOCATION_TYPE_DEVICE ? device_index() : 0 } };
        return cu.cuMemCreate(h, size, &prop, 0);
}

static CUresult vmm_map(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h) {
        CUresult r = cu.cuMemMap(va, size, 0, h, 0);
        if (r != CUDA_SUCCESS)
                return r;
        struct access_desc a = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device_index() }, .flags = 3 };
        return cu.cuMemSetAccess(va, size, &a, 1);
}

struct thread_arg {
        size_t size;
        size_t charged;
        CUresult r;
};

/* A thread with no current context creates and releases. */
static void *vmm_thread(void *p) {
        struct thread_arg *t = p;
        CUmemGenericAllocationHandle h;
        t->r = vmm_create(t->size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h);
        if (t->r == CUDA_SUCCESS) {
                t->charged = 1;
                t->r = cu.cuMemRelease(h);
        }
        return NULL;
}

static int cmd_vmm(const char *order, size_t mib) {
        size_t size = (mib << 20) < GRAN ? GRAN : (mib << 20) / GRAN * GRAN;
        size_t u0 = mem_used();
        CUmemGenericAllocationHandle h, h2;
        CUdeviceptr va;
        CUresult r;
        if (!cu.cuMemCreate || !cu.cuMemMap || !cu.cuMemAddressReserve)
                return 77;
#define NEED(call) do { if ((r = (call)) != CUDA_SUCCESS) { printf("FAIL %s: %s returned %d\n", order, #call, (int) r); return 1; } } while (0)
        if (strcmp(order, "release-mapped") == 0) {
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h));
                CHECK(mem_used() == u0 + size, "created: charged %zu, want %zu", mem_used() - u0, size);
                NEED(cu.cuMemAddressReserve(&va, size, 0, 0, 0));
                NEED(vmm_map(va, size, h));
                NEED(cu.cuMemRelease(h));
                CHECK(mem_used() == u0 + size, "released while mapped: %zu charged, want %zu (still mapped)",
                      mem_used() - u0, size);
                NEED(cu.cuMemUnmap(va, size));
                CHECK(mem_used() == u0, "unmapped after release: %zu still charged", mem_used() - u0);
                cu.cuMemAddressFree(va, size);
        } else if (strcmp(order, "unmap-first") == 0) {
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h));
                NEED(cu.cuMemAddressReserve(&va, size, 0, 0, 0));
                NEED(vmm_map(va, size, h));
                NEED(cu.cuMemUnmap(va, size));
                CHECK(mem_used() == u0 + size, "unmapped, not released: %zu charged, want %zu", mem_used() - u0, size);
                NEED(cu.cuMemRelease(h));
                CHECK(mem_used() == u0, "released after unmap: %zu still charged", mem_used() - u0);
                cu.cuMemAddressFree(va, size);
        } else if (strcmp(order, "retain") == 0) {
                if (!cu.cuMemRetainAllocationHandle)
                        return 77;
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h));
                NEED(cu.cuMemAddressReserve(&va, size, 0, 0, 0));
                NEED(vmm_map(va, size, h));
                NEED(cu.cuMemRetainAllocationHandle(&h2, (void *) (uintptr_t) va));
                NEED(cu.cuMemRelease(h));
                NEED(cu.cuMemUnmap(va, size));
                CHECK(mem_used() == u0 + size, "retained, first handle released, unmapped: %zu charged, want %zu",
                      mem_used() - u0, size);
                r = cu.cuMemRelease(h2);
                if (r != CUDA_SUCCESS) {
                        printf("note: the driver's retained handle holds no reference (release %d)\n", (int) r);
                        return 77;
                }
                CHECK(mem_used() == u0, "retained handle released: %zu still charged", mem_used() - u0);
                cu.cuMemAddressFree(va, size);
        } else if (strcmp(order, "thread") == 0) {
                struct thread_arg t = { .size = size };
                pthread_t th;
                pthread_create(&th, NULL, vmm_thread, &t);
                pthread_join(th, NULL);
                CHECK(t.r == CUDA_SUCCESS && t.charged, "from a thread with no context: %d", (int) t.r);
                CHECK(mem_used() == u0, "after the thread released: %zu charged", mem_used() - u0);
                /* And one kept: charged on its location's device. */
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h));
                CHECK(mem_used() == u0 + size, "charged %zu, want %zu", mem_used() - u0, size);
                NEED(cu.cuMemRelease(h));
        } else if (strcmp(order, "host") == 0) {
                for (int loc = 2; loc <= 3; loc++) {  /* CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA */
                        r = vmm_create(size, loc, 0, &h);
                        CHECK(mem_used() == u0, "host location %d: %zu charged on the device", loc, mem_used() - u0);
                        if (r == CUDA_SUCCESS)
                                cu.cuMemRelease(h);
                        printf("host location %d result %d\n", loc, (int) r);
                }
        } else if (strcmp(order, "range") == 0) {
                /* Two mappings side by side, one unmap of the whole range. */
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h));
                NEED(vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h2));
                NEED(cu.cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
                NEED(vmm_map(va, size, h));
                NEED(vmm_map(va + size, size, h2));
                NEED(cu.cuMemRelease(h));
                NEED(cu.cuMemRelease(h2));
                CHECK(mem_used() == u0 + 2 * size, "both released, mapped: %zu charged", mem_used() - u0);
                r = cu.cuMemUnmap(va, 2 * size);
                if (r != CUDA_SUCCESS) {
                        NEED(cu.cuMemUnmap(va, size));
                        NEED(cu.cuMemUnmap(va + size, size));
                }
                CHECK(mem_used() == u0, "range unmapped: %zu still charged", mem_used() - u0);
                cu.cuMemAddressFree(va, 2 * size);
        } else if (strcmp(order, "keep-mapped") == 0) {
                /* The bench's case: handles released while mapped, up to 2 GiB. */
                size_t held = 0;
                for (int i = 0; i < 32; i++) {
                        if (vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h) != CUDA_SUCCESS)
                                break;
                        if (cu.cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || vmm_map(va, size, h) != CUDA_SUCCESS)
                                break;
                        cu.cuMemRelease(h);
                        held += size;
                }
                printf("held physical %zu\n", held);
                return 0;
        } else if (strcmp(order, "cap") == 0) {
                size_t made = 0;
                while ((r = vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, &h)) == CUDA_SUCCESS)
                        made += size;
                printf("vmm cap result %d created %zu\n", (int) r, made);
                return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
        } else if (strcmp(order, "export") == 0) {
                /* A second process of the container imports and maps: charged once. */
                if (!cu.cuMemExportToShareableHandle || !cu.cuMemImportFromShareableHandle)
                        return 77;
                int fd = -1;
                r = vmm_create(size, CU_MEM_LOCATION_TYPE_DEVICE, 1 /* POSIX fd */, &h);
                if (r != CUDA_SUCCESS || cu.cuMemExportToShareableHandle(&fd, h, 1, 0) != CUDA_SUCCESS) {
                        printf("note: no export of shareable handles here (%d)\n", (int) r);
                        return 77;
                }
                /* A new process (CUDA is not usable in a forked child), the fd inherited. */
                char fds[16], mibs[32];
                snprintf(fds, sizeof(fds), "%d", fd);
                snprintf(mibs, sizeof(mibs), "%zu", size >> 20);
                pid_t p = fork();
                if (p == 0) {
                        char a0[] = "prog-vgpu", a2[] = "import", mode[16];
                        snprintf(mode, sizeof(mode), "%s", cu_mode);
                        char *args[] = { a0, mode, a2, fds, mibs, NULL };
                        fcntl(fd, F_SETFD, 0);  /* passed on, as a program hands it to its worker */
                        execv("/proc/self/exe", args);
                        _exit(2);
                }
                int st;
                waitpid(p, &st, 0);
                if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
                        return 77;
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the importing process: status %d (3: charged twice)", st);
                NEED(cu.cuMemRelease(h));
                CHECK(mem_used() == u0, "all released: %zu charged", mem_used() - u0);
        } else {
                printf("unknown order %s\n", order);
                return 2;
        }
#undef NEED
        if (!failures)
                printf("vmm %s ok\n", order);
        return failures ? 1 : 0;
}

/* The importing side of "vmm export": maps the handle behind fd and checks
 * the container is charged once. Exit 0, 3 when charged twice, 77 when the
 * driver cannot import. */
static int cmd_import(int fd, size_t mib) {
        size_t size = mib << 20, u0;
        CUmemGenericAllocationHandle hi;
        CUdeviceptr v;
        u0 = mem_used();  /* the creator's charge is in already */
        if (!cu.cuMemImportFromShareableHandle ||
            cu.cuMemImportFromShareableHandle(&hi, (void *) (uintptr_t) fd, 1) != CUDA_SUCCESS) {
                printf("note: the driver cannot import a handle by fd\n");
                return 77;
        }
        if (cu.cuMemAddressReserve(&v, size, 0, 0, 0) != CUDA_SUCCESS || vmm_map(v, size, hi) != CUDA_SUCCESS)
                return 1;
        size_t seen = mem_used();
        printf("importer sees %zu more charged\n", seen - u0);
        if (seen != u0)
                return 3;
        return cu.cuMemUnmap(v, size) == CUDA_SUCCESS && cu.cuMemRelease(hi) == CUDA_SUCCESS ? 0 : 1;
}

static int cmd_ctx(void) {
        size_t primary = mem_used();
        CUcontext c, prim;
        CUdevice d;
        cu.cuDeviceGet(&d, device_index());
        cu.cuDevicePrimaryCtxRetain(&prim, d);
        CUresult r = cu.cuCtxCreate_v2 ? cu.cuCtxCreate_v2(&c, 0, d) : CUDA_ERROR_NOT_FOUND;
        if (r != CUDA_SUCCESS) {
                printf("ctx primary %zu create %d\n", primary, (int) r);
                return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
        }
        size_t created = mem_used() - primary;
        cu.cuCtxDestroy_v2(c);
        cu.cuCtxSetCurrent(prim);
        size_t destroyed = primary + created - mem_used();
        printf("ctx primary %zu created %zu destroyed %zu\n", primary, created, destroyed);
        return 0;
}

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned *, void *);

static int cmd_procs(void) {
        void *n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_init_fn ini = n ? (nvml_init_fn) dlsym(n, "nvmlInit_v2") : NULL;
        nvml_handle_fn by_index = n ? (nvml_handle_fn) dlsym(n, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        nvmlDevice_t dev;
        if (!ini || !by_index || ini() != 0 || by_index((unsigned) device_index(), &dev) != 0)
                return 2;
        static const char *const names[] = { "nvmlDeviceGetComputeRunningProcesses",
                                             "nvmlDeviceGetComputeRunningProcesses_v2",
                                             "nvmlDeviceGetComputeRunningProcesses_v3" };
        for (int v = 0; v < 3; v++) {
                procs_fn f = (procs_fn) dlsym(n, names[v]);
                unsigned cnt = 0;
                if (!f)
                        continue;
                nvmlReturn_t r = f(dev, &cnt, NULL);
                printf("procs v%d count %u result %d\n", v + 1, cnt, (int) r);
                vgpu_nvmlProcessInfo_v2_t list[64];
                vgpu_nvmlProcessInfo_v1_t l1[64];
                cnt = 64;
                r = v == 0 ? f(dev, &cnt, l1) : f(dev, &cnt, list);
                if (r != 0)
                        continue;
                for (unsigned i = 0; i < cnt; i++)
                        printf("procs v%d pid %u used %llu\n", v + 1, v == 0 ? l1[i].pid : list[i].pid,
                               v == 0 ? l1[i].usedGpuMemory : list[i].usedGpuMemory);
        }
        return 0;
}

static int cmd_nvml_totals(unsigned count) {
        void *n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_init_fn ini = n ? (nvml_init_fn) dlsym(n, "nvmlInit_v2") : NULL;
        nvml_handle_fn by_index = n ? (nvml_handle_fn) dlsym(n, "nvmlDeviceGetHandleByIndex_v2") : NULL;
        nvml_mem_fn mem = n ? (nvml_mem_fn) dlsym(n, "nvmlDeviceGetMemoryInfo") : NULL;
        if (!ini || !by_index || !mem || ini() != 0)
                return 2;
        for (unsigned i = 0; i < count; i++) {
                nvmlDevice_t d;
                vgpu_nvmlMemory_t m;
                if (by_index(i, &d) == 0 && mem(d, &m) == 0)
                        printf("nvml %u total %llu\n", i, m.total);
        }
        return 0;
}

static int cmd_pinned(size_t bytes) {
        CUdeviceptr p;
        while (cu.cuMemAlloc_v2(&p, 64u << 20) == CUDA_SUCCESS)
                ;
        void *h = NULL;
        CUresult r = cu.cuMemAllocHost_v2 ? cu.cuMemAllocHost_v2(&h, bytes) : CUDA_ERROR_NOT_FOUND;
        printf("pinned %d\n", (int) r);
        if (r == CUDA_SUCCESS)
                cu.cuMemFreeHost(h);
        return 0;
}

/* The bench's pool case: the default pool keeps bytes reserved past a free,
 * then 64 MiB allocations until refused: "held physical B" (reserved + filled). */
static int cmd_pool_fill(size_t bytes) {
        CUmemoryPool pool;
        CUdeviceptr p;
        cuuint64_t all = UINT64_MAX, reserved = 0;
        size_t filled = 0;
        if (!cu.cuMemPoolSetAttribute || cu.cuDeviceGetDefaultMemPool(&pool, device_index()) != CUDA_SUCCESS ||
            cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &all) != CUDA_SUCCESS ||
            cu.cuMemAllocAsync(&p, bytes, NULL) != CUDA_SUCCESS)
                return 77;
        cu.cuMemFreeAsync(p, NULL);
        cu.cuCtxSynchronize();
        cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        for (int i = 0; i < 64 && cu.cuMemAlloc_v2(&p, 64u << 20) == CUDA_SUCCESS; i++)
                filled += 64u << 20;
        printf("held physical %llu\n", (unsigned long long) reserved + filled);
        return 0;
}

static int cmd_pool(size_t bytes) {
        CUmemoryPool pool;
        CUdeviceptr p;
        cuuint64_t all = UINT64_MAX, reserved = 0;
        size_t u0 = mem_used();
        if (!cu.cuMemPoolSetAttribute || !cu.cuMemPoolTrimTo ||
            cu.cuDeviceGetDefaultMemPool(&pool, device_index()) != CUDA_SUCCESS ||
            cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &all) != CUDA_SUCCESS)
                return 77;
        if (cu.cuMemAllocAsync(&p, bytes, NULL) != CUDA_SUCCESS)
                return 1;
        CHECK(mem_used() == u0 + bytes, "allocated from the pool: %zu charged, want %zu", mem_used() - u0, bytes);
        cu.cuMemFreeAsync(p, NULL);
        cu.cuCtxSynchronize();
        cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        if (reserved < bytes) {
                printf("note: the driver's pool keeps nothing reserved (%llu bytes)\n", (unsigned long long) reserved);
                return failures ? 1 : 77;
        }
        CHECK(mem_used() == u0 + reserved, "freed, kept reserved by the pool: %zu charged, want %llu", mem_used() - u0,
              (unsigned long long) reserved);
        CHECK(cu.cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS, "trim");
        CHECK(mem_used() == u0, "trimmed: %zu still charged", mem_used() - u0);
        if (!failures)
                printf("pool ok\n");
        return failures ? 1 : 0;
}

/* A graph of one allocation node of ap->bytesize bytes (and its free when
 * freed), moved into a child graph node of a new graph *ret (the only way
 * the driver embeds a graph with allocation nodes: a copy is refused). */
static void graph_with_child(CUDA_MEM_ALLOC_NODE_PARAMS *ap, bool freed, CUgraph *ret) {
        CUgraph child = NULL, g = NULL;
        CUgraphNode na = NULL, nf = NULL, nc = NULL;
        CHECK(cu.cuGraphCreate(&child, 0) == CUDA_SUCCESS && cu.cuGraphCreate(&g, 0) == CUDA_SUCCESS &&
                      cu.cuGraphAddMemAllocNode(&na, child, NULL, 0, ap) == CUDA_SUCCESS &&
                      (!freed || cu.cuGraphAddMemFreeNode(&nf, child, &na, 1, ap->dptr) == CUDA_SUCCESS),
              "a graph with an allocation node");
        CUresult r = cu.cuGraphAddChildGraphNode(&nc, g, NULL, 0, child);
        CHECK(r == CUDA_ERROR_INVALID_VALUE, "a graph with allocation nodes copied into a child graph node: %d, want %d",
              (int) r, (int) CUDA_ERROR_INVALID_VALUE);
        struct graph_node_params np;
        memset(&np, 0, sizeof(np));
        np.type = GRAPH_NODE_TYPE_GRAPH;
        np.child.graph = child;
        np.child.ownership = CHILD_GRAPH_OWNERSHIP_MOVE;
        r = cu.cuGraphAddNode(&nc, g, NULL, 0, &np);
        CHECK(r == CUDA_SUCCESS, "a graph with allocation nodes moved into a child graph node: %d", (int) r);
        *ret = g;
}

/* D and E: allocation nodes in a child graph, charged from the parent's
 * launch as the parent's own; past the cap refused before the driver
 * reserves. */
static void graph_child(CUstream s, CUDA_MEM_ALLOC_NODE_PARAMS *ap, size_t bytes, size_t total, size_t u0) {
        CUgraph gd = NULL, ge = NULL;
        CUgraphExec xd = NULL, xe = NULL;
        ap->bytesize = bytes;
        graph_with_child(ap, true, &gd);
        CHECK(cu.cuGraphInstantiateWithFlags(&xd, gd, 0) == CUDA_SUCCESS, "instantiate D");
        CHECK(mem_used() == u0, "D instantiated: %zu charged, want 0", mem_used() - u0);
        CHECK(cu.cuGraphLaunch(xd, s) == CUDA_SUCCESS, "launch D");
        cu.cuStreamSynchronize(s);
        CHECK(mem_used() == u0 + bytes, "D launched: %zu charged, want %zu (its child graph's allocation)",
              mem_used() - u0, bytes);
        ap->bytesize = total - u0 + (64u << 20);
        graph_with_child(ap, false, &ge);
        CHECK(cu.cuGraphInstantiateWithFlags(&xe, ge, 0) == CUDA_SUCCESS, "instantiate E");
        CUresult r = cu.cuGraphLaunch(xe, s);
        CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "E past the cap in a child graph: launch returned %d, want %d", (int) r,
              (int) CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(mem_used() == u0 + bytes, "after E's refusal: %zu charged, want %zu", mem_used() - u0, bytes);
        cu.cuGraphExecDestroy(xd);
        cu.cuGraphExecDestroy(xe);
        cu.cuGraphDestroy(gd); /* with its child graph */
        cu.cuGraphDestroy(ge);
        CHECK(cu.cuDeviceGraphMemTrim(device_index()) == CUDA_SUCCESS, "trim after D");
        CHECK(mem_used() == u0, "D trimmed: %zu still charged", mem_used() - u0);
}

/* Graph memory: reserved by the graph pool at a launch (not at capture nor
 * instantiation), charged while reserved, refused past the cap before the
 * launch, given back by a trim; allocation nodes in child graphs too. */
static int cmd_graph(size_t bytes) {
        CUstream s;
        CUgraph ga = NULL, gb = NULL, gc = NULL;
        CUgraphExec xa = NULL, xb = NULL, xc = NULL;
        CUgraphNode na = NULL, nf = NULL;
        CUdeviceptr pb;
        size_t fr = 0, total = 0, u0 = mem_used();
        if (!cu.cuGraphAddMemAllocNode || !cu.cuDeviceGraphMemTrim || cu.cuStreamCreate(&s, 0) != CUDA_SUCCESS)
                return 77;
        cu.cuMemGetInfo_v2(&fr, &total);
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        memset(&ap, 0, sizeof(ap));
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.poolProps.location.id = device_index();
        ap.bytesize = bytes;
        /* A: allocated and freed in the graph. */
        if (cu.cuGraphCreate(&ga, 0) != CUDA_SUCCESS || cu.cuGraphAddMemAllocNode(&na, ga, NULL, 0, &ap) != CUDA_SUCCESS)
                return 77;
        CHECK(cu.cuGraphAddMemFreeNode(&nf, ga, &na, 1, ap.dptr) == CUDA_SUCCESS, "free node");
        CHECK(cu.cuGraphInstantiateWithFlags(&xa, ga, 0) == CUDA_SUCCESS, "instantiate A");
        CHECK(mem_used() == u0, "allocation node instantiated: %zu charged, want 0", mem_used() - u0);
        CHECK(cu.cuGraphLaunch(xa, s) == CUDA_SUCCESS && cu.cuGraphLaunch(xa, s) == CUDA_SUCCESS, "launch A twice");
        cu.cuStreamSynchronize(s);
        CHECK(mem_used() == u0 + bytes, "A launched: %zu charged, want %zu (the graph pool's reserve)", mem_used() - u0,
              bytes);
        /* B: captured, not freed in the graph; it reuses A's reserve. */
        CHECK(cu.cuStreamBeginCapture_v2(s, 2 /* RELAXED */) == CUDA_SUCCESS, "capture");
        CHECK(cu.cuMemAllocAsync(&pb, bytes, s) == CUDA_SUCCESS, "captured cuMemAllocAsync");
        CHECK(cu.cuStreamEndCapture(s, &gb) == CUDA_SUCCESS, "end capture");
        CHECK(mem_used() == u0 + bytes, "captured allocation: %zu charged, want %zu", mem_used() - u0, bytes);
        CHECK(cu.cuGraphInstantiateWithFlags(&xb, gb, 0) == CUDA_SUCCESS, "instantiate B");
        CHECK(cu.cuGraphLaunch(xb, s) == CUDA_SUCCESS, "launch B");
        CHECK(mem_used() == u0 + bytes, "B from A's reserve: %zu charged, want %zu", mem_used() - u0, bytes);
        CHECK(cu.cuGraphUpload(xa, s) == CUDA_SUCCESS, "upload A beside B's live allocation");
        CHECK(mem_used() == u0 + 2 * bytes, "A beside B: %zu charged, want %zu", mem_used() - u0, 2 * bytes);
        /* C: more than the cap leaves, refused before the driver reserves it. */
        size_t left = total - (u0 + 2 * bytes);
        ap.bytesize = left + bytes + (64u << 20); /* A's reserve, not in use, counts as free */
        CHECK(cu.cuGraphCreate(&gc, 0) == CUDA_SUCCESS && cu.cuGraphAddMemAllocNode(&na, gc, NULL, 0, &ap) == CUDA_SUCCESS &&
                      cu.cuGraphInstantiateWithFlags(&xc, gc, 0) == CUDA_SUCCESS,
              "graph C");
        CUresult r = cu.cuGraphLaunch(xc, s);
        CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "C past the cap: launch returned %d, want %d", (int) r,
              (int) CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(mem_used() == u0 + 2 * bytes, "after the refusal: %zu charged, want %zu", mem_used() - u0, 2 * bytes);
        /* B's allocation freed, the graphs gone, the pool trimmed: nothing charged. */
        CHECK(cu.cuMemFreeAsync(pb, s) == CUDA_SUCCESS, "free B's allocation");
        cu.cuStreamSynchronize(s);
        cu.cuGraphExecDestroy(xa);
        cu.cuGraphExecDestroy(xb);
        cu.cuGraphExecDestroy(xc);
        CHECK(mem_used() == u0 + 2 * bytes, "graphs destroyed, the pool keeps its reserve: %zu charged", mem_used() - u0);
        CHECK(cu.cuDeviceGraphMemTrim(device_index()) == CUDA_SUCCESS, "trim");
        CHECK(mem_used() == u0, "trimmed: %zu still charged", mem_used() - u0);
        cu.cuGraphDestroy(ga);
        cu.cuGraphDestroy(gb);
        cu.cuGraphDestroy(gc);
        if (cu.cuGraphAddNode && cu.cuGraphAddChildGraphNode)
                graph_child(s, &ap, bytes, total, u0);
        if (!failures)
                printf("graph ok\n");
        return failures ? 1 : 0;
}

static int cmd_exchange(unsigned rounds, const char *in, const char *out) {
        CUfunction f = sleep_kernel();
        CUstream s;
        if (!f || cu.cuStreamCreate(&s, 0) != CUDA_SUCCESS)
                return 2;
        /* Open both ends without a deadlock: the peer opens them in the other order. */
        FILE *w = NULL, *r = NULL;
        if (strcmp(in, out) < 0) {
                r = fopen(in, "r");
                w = fopen(out, "w");
        } else {
                w = fopen(out, "w");
                r = fopen(in, "r");
        }
        if (!r || !w)
                return 2;
        uint64_t t0 = now_ns(), busy = 0;
        for (unsigned i = 0; i < rounds; i++) {
                launch_ns(f, 2000000, s);
                cu.cuStreamSynchronize(s);
                busy += 2000000;
                if (fputc('x', w) == EOF || fflush(w) != 0 || fgetc(r) == EOF) {
                        printf("exchange broken at round %u\n", i);
                        return 1;
                }
        }
        printf("exchange done %u share %.1f\n", rounds, 100.0 * (double) busy / (double) (now_ns() - t0));
        return 0;
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: prog-vgpu direct|dlsym|procaddr COMMAND [ARGS]\n");
                return 2;
        }
        setvbuf(stdout, NULL, _IOLBF, 0);
        int r = load(argv[1]);
        if (r)
                return r;
        const char *cmd = argv[2];
        unsigned long a = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
        unsigned long b = argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
        if (strcmp(cmd, "fork") == 0)
                return cmd_fork(a << 20, argv[1]);
        if (strcmp(cmd, "nvml-totals") == 0)  /* NVML only: no CUDA call first */
                return cmd_nvml_totals((unsigned) a);
        if ((r = setup()) != 0)
                return r;
        if (strcmp(cmd, "info") == 0)
                return cmd_info();
        if (strcmp(cmd, "fill") == 0)
                return cmd_fill(a << 20, (unsigned) b);
        if (strcmp(cmd, "hold") == 0)
                return cmd_hold(a << 20, (unsigned) b);
        if (strcmp(cmd, "storm") == 0)
                return cmd_storm((unsigned) a, (unsigned) b);
        if (strcmp(cmd, "paths") == 0)
                return cmd_paths(a << 20);
        if (strcmp(cmd, "threads") == 0)
                return cmd_threads((unsigned) a, b << 20);
        if (strcmp(cmd, "symbols") == 0)
                return cmd_symbols();
        if (strcmp(cmd, "burn") == 0 && argc > 5)
                return cmd_burn(argv[3], (unsigned) b, strtoull(argv[5], NULL, 10));
        if (strcmp(cmd, "bench-alloc") == 0)
                return cmd_bench_alloc((unsigned) a, (unsigned) b);
        if (strcmp(cmd, "bench-cudart") == 0)
                return cmd_bench_cudart((unsigned) a);
        if (strcmp(cmd, "bench-launch") == 0)
                return cmd_bench_launch((unsigned) a);
        if (strcmp(cmd, "vmm") == 0 && argc > 4)
                return cmd_vmm(argv[3], b);
        if (strcmp(cmd, "ctx") == 0)
                return cmd_ctx();
        if (strcmp(cmd, "procs") == 0)
                return cmd_procs();
        if (strcmp(cmd, "import") == 0 && argc > 4)
                return cmd_import((int) a, b);
        if (strcmp(cmd, "exchange") == 0 && argc > 5)
                return cmd_exchange((unsigned) a, argv[4], argv[5]);
        if (strcmp(cmd, "pool-fill") == 0)
                return cmd_pool_fill(a << 20);
        if (strcmp(cmd, "pool") == 0)
                return cmd_pool(a << 20);
        if (strcmp(cmd, "graph") == 0)
                return cmd_graph(a << 20);
        if (strcmp(cmd, "pinned") == 0)
                return cmd_pinned(a << 20);
        fprintf(stderr, "unknown command '%s'\n", cmd);
        return 2;
}
