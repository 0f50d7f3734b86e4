/* What NVIDIA's libraries (cuBLAS, cuFFT, NCCL, ...) and frameworks need from
 * the driver, checked against the CUDA driver simulator
 * (tests/integration/test-cuda-sim.sh):
 *
 *   cuda-sim-libs selftest   one line per check, "PASSED"/"FAILED" at the end
 *   cuda-sim-libs clusters   cluster occupancy on device 0: "clusters N size S" or "clusters error R"
 *
 * Two-process checks (shareable VMM handles, IPC handles) fork before cuInit,
 * as a child of a process that initialised CUDA cannot use it. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                 \
        do {                             \
                if (cond)                \
                        printf("ok   "); \
                else {                   \
                        printf("FAIL "); \
                        failures++;      \
                }                        \
                printf(__VA_ARGS__);     \
                printf("\n");            \
        } while (0)

#define OK(call) CHECK((r = (call)) == CUDA_SUCCESS, "%s -> %d", #call, (int) r)

/* Older entry points: cuda.h declares only the newest forms. */
typedef CUresult (*graph_instantiate_v1_t)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*prefetch_v1_t)(CUdeviceptr, size_t, CUdevice, CUstream);
typedef CUresult (*kernel_get_v1_t)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v1 *);
typedef CUresult (*exec_kernel_set_v1_t)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *);
typedef CUresult (*capture_info_v1_t)(CUstream, CUstreamCaptureStatus *, cuuint64_t *);

static void *sym(const char *name) {
        void *p = dlsym(RTLD_DEFAULT, name);
        if (!p) {
                printf("FAIL %s not exported\n", name);
                failures++;
                exit(1);
        }
        return p;
}

static CUfunction some_kernel(void) {
        static const char image[] = "fake image: the simulator does not parse it";
        CUmodule m;
        CUfunction f;
        if (cuModuleLoadData(&m, image) != CUDA_SUCCESS || cuModuleGetFunction(&f, m, "gemm_kernel") != CUDA_SUCCESS) {
                fprintf(stderr, "no kernel\n");
                exit(2);
        }
        return f;
}

static void check_link(void) {
        CUresult r;
        CUlinkState ls;
        char info[64] = "x", err[64] = "x";
        CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                                CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
        void *vals[] = { info, (void *) (uintptr_t) sizeof(info), err, (void *) (uintptr_t) sizeof(err) };
        static char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
        void *cubin = NULL;
        size_t size = 0;
        CUmodule m;
        OK(cuLinkCreate_v2(4, opts, vals, &ls));
        CHECK(cuLinkComplete(ls, &cubin, &size) == CUDA_ERROR_INVALID_VALUE, "cuLinkComplete without input refused");
        OK(cuLinkAddData_v2(ls, CU_JIT_INPUT_PTX, ptx, sizeof(ptx), "k.ptx", 0, NULL, NULL));
        CHECK(cuLinkAddData_v2(ls, (CUjitInputType) 99, ptx, sizeof(ptx), "k", 0, NULL, NULL) ==
                      CUDA_ERROR_INVALID_VALUE,
              "cuLinkAddData: unknown input type refused");
        CHECK(cuLinkAddFile_v2(ls, CU_JIT_INPUT_CUBIN, "/nonexistent/k.cubin", 0, NULL, NULL) ==
                      CUDA_ERROR_FILE_NOT_FOUND,
              "cuLinkAddFile: missing file");
        OK(cuLinkComplete(ls, &cubin, &size));
        CHECK(cubin && size > 0 && info[0] == '\0' && err[0] == '\0', "linked image, empty logs");
        OK(cuModuleLoadData(&m, cubin));
        OK(cuModuleUnload(m));
        OK(cuLinkDestroy(ls));
        /* The v1 names (CUDA 5.5) have the same ABI on 64-bit hosts. */
        CUresult (*create1)(unsigned, CUjit_option *, void **, CUlinkState *) = sym("cuLinkCreate");
        OK(create1(0, NULL, NULL, &ls));
        OK(cuLinkDestroy(ls));
}

static void check_graphs(CUstream s) {
        CUresult r;
        CUfunction f = some_kernel();
        CUgraph g, g2;
        CUgraphNode n, n2;
        CUgraphExec gx;
        CUDA_KERNEL_NODE_PARAMS p = { .func = f, .gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
                                      .blockDimY = 1, .blockDimZ = 1 };
        OK(cuGraphCreate(&g, 0));
        OK(cuGraphAddKernelNode_v2(&n, g, NULL, 0, &p));
        CUDA_KERNEL_NODE_PARAMS got;
        OK(cuGraphKernelNodeGetParams_v2(n, &got));
        CHECK(got.func == f && got.gridDimX == 4 && got.blockDimX == 128, "kernel node parameters read back");
        p.gridDimX = 8;
        OK(cuGraphKernelNodeSetParams_v2(n, &p));
        CUDA_KERNEL_NODE_PARAMS_v1 got1;
        kernel_get_v1_t get1 = (kernel_get_v1_t) sym("cuGraphKernelNodeGetParams");
        OK(get1(n, &got1));
        CHECK(got1.func == f && got1.gridDimX == 8, "cuGraphKernelNodeGetParams (v1): the new grid");
        graph_instantiate_v1_t inst1 = (graph_instantiate_v1_t) sym("cuGraphInstantiate");
        char log[32] = "x";
        CUgraphNode errnode = (CUgraphNode) 1;
        OK(inst1(&gx, g, &errnode, log, sizeof(log)));
        CHECK(errnode == NULL && log[0] == '\0', "cuGraphInstantiate (v1): no error node, empty log");
        p.gridDimX = 16;
        OK(cuGraphExecKernelNodeSetParams_v2(gx, n, &p));
        exec_kernel_set_v1_t xset1 = (exec_kernel_set_v1_t) sym("cuGraphExecKernelNodeSetParams");
        CUDA_KERNEL_NODE_PARAMS_v1 p1 = { .func = f, .gridDimX = 2, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 64,
                                          .blockDimY = 1, .blockDimZ = 1 };
        OK(xset1(gx, n, &p1));
        CHECK(cuGraphExecKernelNodeSetParams_v2(gx, (CUgraphNode) &p, &p) == CUDA_ERROR_INVALID_VALUE,
              "exec kernel node set: a node not in the graph refused");
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        /* Update from a graph of the same shape; then from one of another shape. */
        OK(cuGraphCreate(&g2, 0));
        OK(cuGraphAddKernelNode_v2(&n2, g2, NULL, 0, &p));
        CUgraphExecUpdateResultInfo info;
        OK(cuGraphExecUpdate_v2(gx, g2, &info));
        CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "exec update: same topology");
        OK(cuGraphAddKernelNode_v2(&n2, g2, NULL, 0, &p));
        CHECK(cuGraphExecUpdate_v2(gx, g2, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE &&
                      info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
              "exec update: topology changed refused");
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
        OK(cuGraphDestroy(g2));
        capture_info_v1_t ci1 = (capture_info_v1_t) sym("cuStreamGetCaptureInfo");
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        cuuint64_t id = 1;
        OK(ci1(s, &st, &id));
        CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "cuStreamGetCaptureInfo (v1): not capturing");
}

/* NCCL inside a capture: its own nodes (cuGraphAddNode) and the capture's dependencies. */
static int host_calls;
static void host_fn(void *p) {
        (void) p;
        host_calls++;
}

static void check_capture_nodes(CUstream s) {
        CUresult r;
        CUgraph g, cg;
        CUgraphExec gx;
        CUgraphNode n;
        cuuint64_t id;
        const CUgraphNode *deps;
        size_t nd;
        CUstreamCaptureStatus st;
        OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        OK(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &nd));
        CUgraphNodeParams np;
        memset(&np, 0, sizeof(np));
        np.type = CU_GRAPH_NODE_TYPE_HOST;
        np.host.fn = host_fn;
        OK(cuGraphAddNode_v2(&n, cg, deps, NULL, nd, &np));
        OK(cuStreamUpdateCaptureDependencies_v2(s, &n, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
        CHECK(cuStreamUpdateCaptureDependencies_v2(s, &n, NULL, 1, 7) == CUDA_ERROR_INVALID_VALUE,
              "capture dependencies: unknown flags refused");
        OK(cuStreamEndCapture(s, &g));
        CHECK(cuStreamUpdateCaptureDependencies_v2(s, &n, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES) ==
                      CUDA_ERROR_ILLEGAL_STATE,
              "capture dependencies outside a capture refused");
        np.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        CUgraphNode n2;
        CHECK(cuGraphAddNode_v2(&n2, g, NULL, NULL, 0, &np) == CUDA_ERROR_NOT_SUPPORTED,
              "cuGraphAddNode: a node kind not simulated refused");
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        CHECK(host_calls == 1, "the host node added inside the capture ran");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
}

static int destroyed;
static void obj_destroy(void *p) {
        (void) p;
        destroyed++;
}

/* NCCL in a capture: a second stream joins through an event, a user object keeps resources. */
static void check_capture_join(CUstream s) {
        CUresult r;
        CUstream s2;
        CUevent e, back;
        CUgraph g;
        CUgraphExec gx;
        CUuserObject obj;
        CUstreamCaptureStatus st;
        OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
        OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        OK(cuEventCreate(&back, CU_EVENT_DISABLE_TIMING));
        OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        OK(cuEventRecord(e, s));
        OK(cuStreamWaitEvent(s2, e, 0));
        OK(cuStreamIsCapturing(s2, &st));
        CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "a stream waiting on a capture event joins the capture");
        OK(cuLaunchHostFunc(s2, host_fn, NULL));
        OK(cuStreamUpdateCaptureDependencies_v2(s2, NULL, NULL, 0, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
        OK(cuEventRecord(back, s2));
        OK(cuStreamWaitEvent(s, back, 0));
        OK(cuUserObjectCreate(&obj, &destroyed, obj_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
        OK(cuStreamEndCapture(s, &g));
        OK(cuStreamIsCapturing(s2, &st));
        CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "ending the capture on its origin ends it on the joined stream");
        OK(cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        int before = host_calls;
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        CHECK(host_calls == before + 1, "the joined stream's work is in the graph");
        OK(cuGraphDestroy(g));
        CHECK(destroyed == 0, "user object alive while the executable graph holds it");
        OK(cuGraphExecDestroy(gx));
        CHECK(destroyed == 1, "user object destroyed with the last reference");
        CHECK(cuUserObjectCreate(&obj, NULL, obj_destroy, 1, 0) == CUDA_ERROR_INVALID_VALUE,
              "user object without NO_DESTRUCTOR_SYNC refused");
        OK(cuEventDestroy_v2(e));
        OK(cuEventDestroy_v2(back));
        OK(cuStreamDestroy_v2(s2));
}

/* cuBLASLt's start: cluster occupancy (compute capability 9.0 on). */
static int cmd_clusters(void) {
        CUcontext ctx;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return 2;
        CUfunction f = some_kernel();
        CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION };
        attr.value.clusterDim.x = 2;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
        CUlaunchConfig cfg = { .gridDimX = 132, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                               .blockDimZ = 1, .attrs = &attr, .numAttrs = 1 };
        int n = 0, size = 0;
        CUresult r = cuOccupancyMaxActiveClusters(&n, f, &cfg);
        if (r == CUDA_SUCCESS)
                r = cuOccupancyMaxPotentialClusterSize(&size, f, &cfg);
        if (r != CUDA_SUCCESS) {
                printf("clusters error %d\n", (int) r);
                return 0;
        }
        attr.value.clusterDim.x = 16;
        CUresult big = cuOccupancyMaxActiveClusters(&n, f, &cfg);
        cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
        int n16 = 0;
        CUresult big2 = cuOccupancyMaxActiveClusters(&n16, f, &cfg);
        attr.value.clusterDim.x = 2;
        cuOccupancyMaxActiveClusters(&n, f, &cfg);
        printf("clusters %d size %d 16-portable %d 16-nonportable %d/%d\n", n, size, (int) big, (int) big2, n16);
        return 0;
}

struct waiter {
        CUcontext ctx;
        CUstream s;
        CUdeviceptr flag;
        CUresult r;
};

static void *wait_thread(void *arg) {
        struct waiter *w = arg;
        cuCtxSetCurrent(w->ctx);
        w->r = cuStreamWaitValue32_v2(w->s, w->flag, 7, CU_STREAM_WAIT_VALUE_GEQ);
        return NULL;
}

static void check_memops(CUcontext ctx, CUstream s) {
        CUresult r;
        CUdeviceptr d;
        uint64_t v = 0;
        OK(cuMemAlloc_v2(&d, 4096));
        OK(cuMemsetD8_v2(d, 0, 4096));
        OK(cuStreamWriteValue32_v2(s, d, 5, 0));
        OK(cuStreamWriteValue64_v2(s, d + 8, 0x123456789ULL, 0));
        OK(cuMemcpyDtoH_v2(&v, d + 8, 8));
        CHECK(v == 0x123456789ULL, "cuStreamWriteValue64 stored");
        OK(cuStreamWaitValue32_v2(s, d, 5, CU_STREAM_WAIT_VALUE_EQ));
        OK(cuStreamWaitValue64_v2(s, d + 8, 0x100000000ULL, CU_STREAM_WAIT_VALUE_GEQ));
        OK(cuStreamWaitValue32_v2(s, d, 4, CU_STREAM_WAIT_VALUE_AND));
        CHECK(cuStreamWriteValue32_v2(s, d + 2, 1, 0) == CUDA_ERROR_INVALID_VALUE, "misaligned write refused");
        CHECK(cuStreamWriteValue32_v2(s, d + 4096, 1, 0) == CUDA_ERROR_INVALID_VALUE, "write past the allocation");
        /* A wait is released by a later write (another thread's stream). */
        struct waiter w = { ctx, s, d, CUDA_ERROR_UNKNOWN };
        pthread_t th;
        pthread_create(&th, NULL, wait_thread, &w);
        usleep(20000);
        CUstreamBatchMemOpParams ops[2];
        memset(ops, 0, sizeof(ops));
        ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        ops[0].writeValue.address = d;
        ops[0].writeValue.value = 9;
        ops[1].operation = CU_STREAM_MEM_OP_BARRIER;
        OK(cuStreamBatchMemOp_v2(s, 2, ops, 0));
        pthread_join(th, NULL);
        CHECK(w.r == CUDA_SUCCESS, "a wait released by a batch write -> %d", (int) w.r);
        setenv("MIGKIT_SIM_WAIT_VALUE_MS", "50", 1);
        CHECK(cuStreamWaitValue32_v2(s, d, 100, CU_STREAM_WAIT_VALUE_EQ) == CUDA_ERROR_LAUNCH_TIMEOUT,
              "a wait never met times out");
        unsetenv("MIGKIT_SIM_WAIT_VALUE_MS");
        OK(cuMemFree_v2(d));
}

static void check_managed(CUstream s) {
        CUresult r;
        CUdeviceptr m;
        OK(cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL));
        prefetch_v1_t pf1 = (prefetch_v1_t) sym("cuMemPrefetchAsync");
        OK(pf1(m, 1 << 20, 0, s));
        OK(pf1(m, 1 << 20, CU_DEVICE_CPU, s));
        CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
        OK(cuMemPrefetchAsync_v2(m, 1 << 20, loc, 0, s));
        OK(cuMemAdvise_v2(m, 1 << 20, CU_MEM_ADVISE_SET_READ_MOSTLY, loc));
        CHECK(pf1(m, 2 << 20, 0, s) == CUDA_ERROR_INVALID_VALUE, "prefetch past the allocation refused");
        OK(cuMemFree_v2(m));
}

static const CUmemAllocationProp vmm_prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};

static size_t used_bytes(void) {
        size_t freeb = 0, total = 0;
        cuMemGetInfo_v2(&freeb, &total);
        return total - freeb;
}

/* NCCL's free sequence and the reference counts behind it. */
static void check_vmm(void) {
        CUresult r;
        size_t gran = 0, u0 = used_bytes();
        CUmemGenericAllocationHandle h, h2;
        CUdeviceptr va;
        OK(cuMemGetAllocationGranularity(&gran, &vmm_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        OK(cuMemCreate(&h, 2 * gran, &vmm_prop, 0));
        OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
        OK(cuMemMap(va, 2 * gran, 0, h, 0));
        unsigned long long flags = 99;
        CUmemLocation loc = vmm_prop.location;
        OK(cuMemGetAccess(&flags, &loc, va));
        CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE, "no access before cuMemSetAccess");
        CUmemAccessDesc acc = { .location = loc, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
        OK(cuMemGetAccess(&flags, &loc, va + gran));
        CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "read-write after cuMemSetAccess");
        CUmemAccessDesc bad = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 99 },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CHECK(cuMemSetAccess(va, 2 * gran, &bad, 1) == CUDA_ERROR_INVALID_VALUE, "access for no device refused");
        OK(cuMemRetainAllocationHandle(&h2, (void *) (va + 100)));
        CHECK(h2 == h, "retain: the mapped allocation's handle");
        CHECK(cuMemRelease(h2) == CUDA_SUCCESS, "release of the retained reference -> 0");
        CHECK(used_bytes() - u0 == 2 * gran, "still charged while mapped and referenced");
        OK(cuMemUnmap(va, 2 * gran));
        CHECK(used_bytes() - u0 == 2 * gran, "unmapped, one reference left: still charged");
        CHECK(cuMemRelease(h) == CUDA_SUCCESS, "the creator's release -> 0 (NCCL: retain, release, unmap, release)");
        CHECK(used_bytes() == u0, "last reference and mapping gone: uncharged");
        CHECK(cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE, "a third release refused");
        /* Release while mapped, then retain through the mapping. */
        OK(cuMemCreate(&h, gran, &vmm_prop, 0));
        OK(cuMemMap(va, gran, 0, h, 0));
        OK(cuMemRelease(h));
        CHECK(used_bytes() - u0 == gran, "released while mapped: still charged");
        OK(cuMemRetainAllocationHandle(&h2, (void *) va));
        OK(cuMemUnmap(va, gran));
        CHECK(used_bytes() - u0 == gran, "retained after release: still charged");
        OK(cuMemRelease(h2));
        CHECK(used_bytes() == u0, "released: uncharged");
        OK(cuMemAddressFree(va, 2 * gran));
        /* Host memory through VMM: not device memory. */
        CUmemAllocationProp hp = vmm_prop;
        hp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        OK(cuMemCreate(&h, gran, &hp, 0));
        CHECK(used_bytes() == u0, "host NUMA memory not charged to the device");
        OK(cuMemRelease(h));
}

/* A stream-ordered pool keeps freed memory up to its release threshold. */
static void check_pool(CUstream s) {
        CUresult r;
        CUmemoryPool pool;
        CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
        cuuint64_t v, threshold = 64 << 20;
        size_t u0 = used_bytes();
        CUdeviceptr a, b;
        OK(cuMemPoolCreate(&pool, &props));
        OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
        OK(cuMemAllocFromPoolAsync(&a, 48 << 20, pool, s));
        OK(cuMemAllocFromPoolAsync(&b, 32 << 20, pool, s));
        CHECK(used_bytes() - u0 == 80 << 20, "pool: 80 MiB in use, charged");
        OK(cuMemFreeAsync(a, s));
        OK(cuMemFreeAsync(b, s));
        OK(cuStreamSynchronize(s));
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
        CHECK(v == 0, "pool: nothing used after the frees");
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
        CHECK(v == threshold, "pool: reserved down to the threshold (%llu)", (unsigned long long) v);
        CHECK(used_bytes() - u0 == threshold, "pool: what it reserves is charged");
        OK(cuMemAllocFromPoolAsync(&a, 16 << 20, pool, s));
        CHECK(used_bytes() - u0 == threshold, "pool: an allocation from the reserve charges nothing more");
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
        CHECK(v == 80 << 20, "pool: used high-water mark 80 MiB");
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
        CHECK(v == 80 << 20, "pool: reserved high-water mark 80 MiB");
        cuuint64_t zero = 0;
        OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
        cuuint64_t rh;
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &rh));
        CHECK(v == 16 << 20 && rh == 80 << 20, "pool: used high reset to 16 MiB, reserved high stays 80 MiB");
        OK(cuMemFreeAsync(a, s));
        OK(cuMemPoolTrimTo(pool, 8 << 20));
        OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
        CHECK(v == 8 << 20 && used_bytes() - u0 == 8 << 20, "pool: trimmed to 8 MiB, given back");
        OK(cuMemPoolDestroy(pool));
        CHECK(used_bytes() == u0, "pool destroyed: nothing charged");
}

struct ipc_pair {
        CUipcMemHandle mem;
        CUipcEventHandle event;
};

/* Child of the export check: receives the descriptor, imports and maps it. */
static int import_child(int sock) {
        char byte;
        char ctrl[CMSG_SPACE(sizeof(int))];
        struct iovec io = { &byte, 1 };
        struct msghdr msg = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
        CUcontext ctx;
        if (recvmsg(sock, &msg, 0) != 1 || !CMSG_FIRSTHDR(&msg))
                return 10;
        int fd;
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(fd));
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return 11;
        size_t u0 = used_bytes();
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        CUmemAllocationProp prop;
        if (cuMemImportFromShareableHandle(&h, (void *) (intptr_t) fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
            CUDA_SUCCESS)
                return 12;
        if (cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS || prop.location.id != 0)
                return 13;
        if (cuMemAddressReserve(&va, 2 << 20, 0, 0, 0) != CUDA_SUCCESS || cuMemMap(va, 2 << 20, 0, h, 0) != CUDA_SUCCESS)
                return 14;
        CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        unsigned v = 0;
        if (cuMemSetAccess(va, 2 << 20, &acc, 1) != CUDA_SUCCESS || cuMemcpyDtoH_v2(&v, va, 4) != CUDA_SUCCESS)
                return 15;
        if (v != 0x5a5a5a5a)
                return 16; /* the exporter's bytes: one physical allocation */
        if (used_bytes() != u0)
                return 17; /* charged once: to the exporter */
        if (cuMemUnmap(va, 2 << 20) != CUDA_SUCCESS || cuMemRelease(h) != CUDA_SUCCESS)
                return 18;
        int bogus = 0; /* stdin: not an exported allocation */
        if (cuMemImportFromShareableHandle(&h, (void *) (intptr_t) bogus, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
            CUDA_ERROR_INVALID_VALUE)
                return 19;
        /* IPC handles of the other process. */
        struct ipc_pair ip;
        if (read(sock, &ip, sizeof(ip)) != (ssize_t) sizeof(ip))
                return 20;
        CUdeviceptr p;
        if (cuIpcOpenMemHandle_v2(&p, ip.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
                return 21;
        if (used_bytes() != u0)
                return 22; /* the exporter holds the charge */
        if (cuMemsetD8_v2(p, 1, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_ERROR_INVALID_VALUE)
                return 23; /* usable; closed with cuIpcCloseMemHandle, not freed */
        if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS || cuIpcCloseMemHandle(p) != CUDA_ERROR_INVALID_VALUE)
                return 24;
        CUevent ev;
        if (cuIpcOpenEventHandle(&ev, ip.event) != CUDA_SUCCESS || cuEventQuery(ev) != CUDA_SUCCESS ||
            cuEventDestroy_v2(ev) != CUDA_SUCCESS)
                return 25;
        ip.mem.reserved[0] ^= 1;
        if (cuIpcOpenMemHandle_v2(&p, ip.mem, 0) != CUDA_ERROR_INVALID_VALUE)
                return 26; /* a damaged handle */
        return 0;
}

/* Export in this process, import in a child forked before cuInit. */
static void check_export(int sock, pid_t child) {
        CUresult r;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        int fd = -1;
        OK(cuMemCreate(&h, 2 << 20, &vmm_prop, 0));
        OK(cuMemAddressReserve(&va, 2 << 20, 0, 0, 0));
        OK(cuMemMap(va, 2 << 20, 0, h, 0));
        CUmemAccessDesc acc = { .location = vmm_prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(cuMemSetAccess(va, 2 << 20, &acc, 1));
        OK(cuMemsetD32_v2(va, 0x5a5a5a5a, 1024));
        OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CUmemAllocationProp np = vmm_prop;
        np.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        CUmemGenericAllocationHandle h3;
        int fd3;
        OK(cuMemCreate(&h3, 2 << 20, &np, 0));
        CHECK(cuMemExportToShareableHandle(&fd3, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
                      CUDA_ERROR_NOT_SUPPORTED,
              "export without the handle type asked at creation refused");
        OK(cuMemRelease(h3));
        /* IPC: a cuMemAlloc allocation and an interprocess event (made before the other
         * process measures the device). */
        struct ipc_pair ip;
        CUdeviceptr d;
        CUevent ev, ev2;
        OK(cuMemAlloc_v2(&d, 1 << 20));
        OK(cuIpcGetMemHandle(&ip.mem, d));
        CUdeviceptr self;
        CHECK(cuIpcOpenMemHandle_v2(&self, ip.mem, 0) == CUDA_ERROR_INVALID_CONTEXT,
              "IPC: the exporting process cannot open its own handle");
        CHECK(cuIpcGetMemHandle(&ip.mem, d + 512) == CUDA_ERROR_INVALID_VALUE, "IPC: not an allocation's start");
        OK(cuIpcGetMemHandle(&ip.mem, d));
        OK(cuEventCreate(&ev2, 0));
        CHECK(cuIpcGetEventHandle(&ip.event, ev2) == CUDA_ERROR_INVALID_VALUE,
              "IPC: an event without CU_EVENT_INTERPROCESS refused");
        OK(cuEventDestroy_v2(ev2));
        OK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        OK(cuIpcGetEventHandle(&ip.event, ev));
        char byte = 1;
        char ctrl[CMSG_SPACE(sizeof(int))];
        memset(ctrl, 0, sizeof(ctrl));
        struct iovec io = { &byte, 1 };
        struct msghdr msg = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
        CHECK(sendmsg(sock, &msg, 0) == 1, "descriptor sent to the other process");
        CHECK(write(sock, &ip, sizeof(ip)) == (ssize_t) sizeof(ip), "IPC handles sent");
        int st = 0;
        waitpid(child, &st, 0);
        OK(cuMemFree_v2(d));
        OK(cuEventDestroy_v2(ev));
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "other process: imported, mapped, read the bytes, charged nothing; opened IPC memory and event "
              "handles (exit %d)",
              WEXITSTATUS(st));
        close(fd);
        OK(cuMemUnmap(va, 2 << 20));
        OK(cuMemRelease(h));
        OK(cuMemAddressFree(va, 2 << 20));
}

/* Arrays are sized in memory and charged. */
static void check_arrays(void) {
        CUresult r;
        size_t u0 = used_bytes();
        CUarray a, a3, lvl;
        CUDA_ARRAY_DESCRIPTOR d = { .Width = 1000, .Height = 100, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4 };
        OK(cuArrayCreate_v2(&a, &d));
        /* 1000 x 16 bytes = 16000, rounded up to 16384, x 100 rows */
        CHECK(used_bytes() - u0 == 16384 * 100, "2D array charged %zu", used_bytes() - u0);
        CUDA_ARRAY_DESCRIPTOR back;
        OK(cuArrayGetDescriptor_v2(&back, a));
        CHECK(back.Width == 1000 && back.Height == 100 && back.Format == CU_AD_FORMAT_FLOAT, "array descriptor");
        CUDA_ARRAY3D_DESCRIPTOR d3 = { .Width = 64, .Height = 64, .Depth = 8, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                       .NumChannels = 1 };
        OK(cuArray3DCreate_v2(&a3, &d3));
        CHECK(used_bytes() - u0 == 16384 * 100 + 512 * 64 * 8, "3D array charged");
        CUDA_ARRAY3D_DESCRIPTOR b3;
        OK(cuArray3DGetDescriptor_v2(&b3, a3));
        CHECK(b3.Depth == 8, "3D array descriptor");
        d.NumChannels = 3;
        CHECK(cuArrayCreate_v2(&a, &d) == CUDA_ERROR_INVALID_VALUE, "3 channels refused");
        OK(cuArrayDestroy(a3));
        CUmipmappedArray mm;
        d3.Depth = 0;
        OK(cuMipmappedArrayCreate(&mm, &d3, 3));
        OK(cuMipmappedArrayGetLevel(&lvl, mm, 2));
        OK(cuArray3DGetDescriptor_v2(&b3, lvl));
        CHECK(b3.Width == 16 && b3.Height == 16, "mipmap level 2 is 16 x 16");
        CHECK(used_bytes() - u0 == 16384 * 100 + 512 * (64 + 32 + 16), "mipmapped array charged");
        OK(cuMipmappedArrayDestroy(mm));
        OK(cuArrayDestroy(a));
        CHECK(used_bytes() == u0, "arrays destroyed: nothing charged");
        CUexternalMemory em;
        CUDA_EXTERNAL_MEMORY_HANDLE_DESC emd = { .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD, .size = 1 << 20 };
        CHECK(cuImportExternalMemory(&em, &emd) == CUDA_ERROR_NOT_SUPPORTED, "external memory refused");
        CUexternalSemaphore es;
        CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC esd = { .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD };
        CHECK(cuImportExternalSemaphore(&es, &esd) == CUDA_ERROR_NOT_SUPPORTED, "external semaphores refused");
}

static void check_ranges(CUstream s) {
        CUresult r;
        CUdeviceptr m, d;
        int v = -5, last = -5;
        OK(cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL));
        OK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 1 << 20));
        CHECK(v == 0, "not read-mostly before advice");
        CUmemLocation dev0 = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
        OK(cuMemAdvise_v2(m, 1 << 20, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
        OK(cuMemAdvise_v2(m, 1 << 20, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev0));
        OK(cuMemPrefetchAsync_v2(m, 1 << 20, dev0, 0, s));
        void *data[3] = { &v, &last, NULL };
        int pref = -5;
        data[2] = &pref;
        size_t sizes[3] = { sizeof(int), sizeof(int), sizeof(int) };
        CUmem_range_attribute attrs[3] = { CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                           CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                           CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION };
        OK(cuMemRangeGetAttributes(data, sizes, attrs, 3, m, 4096));
        CHECK(v == 1 && last == 0 && pref == 0, "range: read-mostly, prefetched to and preferring device 0");
        OK(cuMemAlloc_v2(&d, 4096));
        CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, d, 4096) ==
                      CUDA_ERROR_INVALID_VALUE,
              "range attributes of device memory refused");
        OK(cuMemFree_v2(d));
        OK(cuMemFree_v2(m));
}

static cuuint64_t graph_mem(CUgraphMem_attribute attr) {
        cuuint64_t v = ~0ull;
        if (cuDeviceGetGraphMemAttribute(0, attr, &v) != CUDA_SUCCESS)
                return ~0ull;
        return v;
}

/* Graph memory: allocation and free nodes, added or captured; the graph pool
 * reserves (and charges) at the launch and keeps it until trimmed. */
static void check_graph_memory(CUstream s) {
        CUresult r;
        CUgraph g;
        CUgraphExec gx;
        CUgraphNode na, nm, nf, n2;
        CUgraphNodeType type;
        size_t u0 = used_bytes();
        CUDA_MEM_ALLOC_NODE_PARAMS ap = { .poolProps = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                         .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } },
                                          .bytesize = 64 << 20 };
        OK(cuGraphCreate(&g, 0));
        OK(cuGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
        CHECK(ap.dptr != 0 && used_bytes() == u0, "graph memory: an allocation node has an address, nothing charged");
        CHECK(cuMemsetD8_v2(ap.dptr, 1, 4096) == CUDA_ERROR_INVALID_VALUE, "graph memory: no memory before a launch");
        CUDA_MEMSET_NODE_PARAMS mp = { .dst = ap.dptr, .value = 7, .elementSize = 1, .width = 4096, .height = 1 };
        OK(cuGraphAddMemsetNode(&nm, g, &na, 1, &mp, NULL));
        OK(cuGraphAddMemFreeNode(&nf, g, &nm, 1, ap.dptr));
        CHECK(cuGraphAddMemFreeNode(&n2, g, &nf, 1, ap.dptr) == CUDA_ERROR_INVALID_VALUE,
              "graph memory: a second free node of one allocation refused");
        CUdeviceptr plain;
        OK(cuMemAlloc_v2(&plain, 4096));
        CHECK(cuGraphAddMemFreeNode(&n2, g, NULL, 0, plain) == CUDA_ERROR_INVALID_VALUE,
              "graph memory: a free node of memory no allocation node gave refused");
        OK(cuGraphNodeGetType(na, &type));
        CHECK(type == CU_GRAPH_NODE_TYPE_MEM_ALLOC, "graph memory: allocation node type");
        OK(cuGraphNodeGetType(nf, &type));
        CHECK(type == CU_GRAPH_NODE_TYPE_MEM_FREE, "graph memory: free node type");
        CUDA_MEM_ALLOC_NODE_PARAMS got;
        CUdeviceptr fp = 0;
        OK(cuGraphMemAllocNodeGetParams(na, &got));
        OK(cuGraphMemFreeNodeGetParams(nf, &fp));
        CHECK(got.bytesize == 64 << 20 && got.dptr == ap.dptr && got.poolProps.location.id == 0 && fp == ap.dptr,
              "graph memory: node parameters read back");
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        CHECK(used_bytes() == u0 + 4096 && graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0,
              "graph memory: nothing reserved at instantiation");
        OK(cuGraphLaunch(gx, s));
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        CHECK(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 64 << 20 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 64 << 20,
              "graph memory: two launches reserve 64 MiB once, none in use after the in-graph free");
        CHECK(used_bytes() == u0 + 4096 + (64 << 20), "graph memory: the reserve is charged to the device");
        OK(cuDeviceGraphMemTrim(0));
        CHECK(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0 && used_bytes() == u0 + 4096,
              "graph memory: trimmed, given back");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
        OK(cuMemFree_v2(plain));

        /* Captured: cuMemAllocAsync becomes an allocation node, not freed in the graph. */
        CUdeviceptr p;
        size_t n = 0;
        OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        OK(cuMemAllocAsync(&p, 32 << 20, s));
        OK(cuMemsetD8Async(p, 3, 1 << 20, s));
        OK(cuStreamEndCapture(s, &g));
        OK(cuGraphGetNodes(g, NULL, &n));
        CHECK(n == 2 && used_bytes() == u0, "graph memory: capture made 2 nodes and charged nothing (%zu)", n);
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        OK(cuGraphUpload(gx, s));
        CHECK(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 32 << 20 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0,
              "graph memory: an upload reserves");
        OK(cuGraphLaunch(gx, s));
        unsigned char b = 0;
        OK(cuMemcpyDtoH_v2(&b, p + 100, 1));
        CHECK(b == 3 && graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 32 << 20,
              "graph memory: the allocation outlives the launch (byte %u)", b);
        CHECK(cuGraphLaunch(gx, s) == CUDA_ERROR_INVALID_VALUE,
              "graph memory: no second launch before the allocation is freed");
        OK(cuMemFreeAsync(p, s));
        OK(cuGraphLaunch(gx, s));
        OK(cuMemFree_v2(p));
        cuuint64_t zero = 0;
        OK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
        CHECK(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 0, "graph memory: used high-water mark reset");
        CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero) == CUDA_ERROR_INVALID_VALUE,
              "graph memory: the current use cannot be set");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
        OK(cuDeviceGraphMemTrim(0));
        CHECK(used_bytes() == u0, "graph memory: nothing charged at the end");

        /* Past the device's free memory: the launch fails, nothing runs, nothing stays charged. */
        size_t fr, tot;
        OK(cuMemGetInfo_v2(&fr, &tot));
        ap.bytesize = fr + (64 << 20);
        OK(cuGraphCreate(&g, 0));
        OK(cuGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        CHECK(cuGraphLaunch(gx, s) == CUDA_ERROR_OUT_OF_MEMORY && used_bytes() == u0 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0,
              "graph memory: a launch past the free memory fails with CUDA_ERROR_OUT_OF_MEMORY");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
}

/* Child graph nodes: a graph with allocation or free nodes can be embedded
 * only by moving it (cuGraphAddNode, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE),
 * never copied (cuGraphAddChildGraphNode: CUDA_ERROR_INVALID_VALUE, as the
 * driver documents); a launch reserves the child graphs' allocations with
 * the parent's, at any depth. */
static void check_child_graphs(CUstream s) {
        CUresult r;
        CUgraph g, mid, inner, plain, got;
        CUgraphExec gx;
        CUgraphNode na, nf, nm, nc, n2;
        CUgraphNodeType type;
        size_t u0 = used_bytes(), n = 0;
        CUdeviceptr buf;
        unsigned char b = 0;
        OK(cuMemAlloc_v2(&buf, 4096));
        /* no memory nodes: copied, run as part of its parent */
        OK(cuGraphCreate(&plain, 0));
        CUDA_MEMSET_NODE_PARAMS mp = { .dst = buf, .value = 9, .elementSize = 1, .width = 4096, .height = 1 };
        OK(cuGraphAddMemsetNode(&nm, plain, NULL, 0, &mp, NULL));
        OK(cuGraphCreate(&g, 0));
        OK(cuGraphAddChildGraphNode(&nc, g, NULL, 0, plain));
        OK(cuGraphDestroy(plain)); /* the node holds a copy */
        OK(cuGraphNodeGetType(nc, &type));
        OK(cuGraphChildGraphNodeGetGraph(nc, &got));
        OK(cuGraphGetNodes(got, NULL, &n));
        CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH && n == 1, "child graph: a node of type GRAPH holding a copy (%zu nodes)",
              n);
        CHECK(cuGraphDestroy(got) == CUDA_ERROR_INVALID_VALUE, "child graph: its node's graph is not destroyed alone");
        CUDA_MEM_ALLOC_NODE_PARAMS ap = { .poolProps = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                         .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } },
                                          .bytesize = 16 << 20 };
        CHECK(cuGraphAddMemAllocNode(&na, got, NULL, 0, &ap) == CUDA_ERROR_INVALID_VALUE,
              "child graph: no allocation node added to an embedded graph");
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        OK(cuGraphLaunch(gx, s));
        OK(cuMemcpyDtoH_v2(&b, buf + 100, 1));
        CHECK(b == 9, "child graph: its memset ran in the parent's launch (byte %u)", b);
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));

        /* inner: an allocation and its free; mid holds inner, moved; g holds mid, moved */
        OK(cuGraphCreate(&inner, 0));
        OK(cuGraphAddMemAllocNode(&na, inner, NULL, 0, &ap));
        OK(cuGraphAddMemFreeNode(&nf, inner, &na, 1, ap.dptr));
        OK(cuGraphCreate(&mid, 0));
        OK(cuGraphCreate(&g, 0));
        CHECK(cuGraphAddChildGraphNode(&nc, mid, NULL, 0, inner) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a graph with allocation nodes is not copied (cuGraphAddChildGraphNode)");
        CUgraphNodeParams np;
        memset(&np, 0, sizeof(np));
        np.type = CU_GRAPH_NODE_TYPE_GRAPH;
        np.graph.graph = inner;
        np.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE;
        CHECK(cuGraphAddNode(&nc, mid, NULL, NULL, 0, &np) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a graph with allocation nodes is not copied (cuGraphAddNode, ownership CLONE)");
        np.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        OK(cuGraphAddNode(&nc, mid, NULL, NULL, 0, &np));
        CHECK(cuGraphAddChildGraphNode(&n2, g, NULL, 0, mid) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a graph holding one with allocation nodes is not copied either");
        CHECK(cuGraphAddNode(&n2, g, NULL, NULL, 0, &np) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a moved graph is not embedded twice");
        CHECK(cuGraphDestroy(inner) == CUDA_ERROR_INVALID_VALUE &&
                      cuGraphInstantiateWithFlags(&gx, inner, 0) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a moved graph is neither destroyed nor instantiated alone");
        CHECK(cuGraphAddMemAllocNode(&n2, inner, NULL, 0, &ap) == CUDA_ERROR_INVALID_VALUE,
              "child graph: no allocation node added to a moved graph");
        CUgraphExecUpdateResultInfo info;
        OK(cuGraphCreate(&plain, 0));
        OK(cuGraphInstantiateWithFlags(&gx, plain, 0));
        CHECK(cuGraphExecUpdate(gx, inner, &info) == CUDA_ERROR_INVALID_VALUE,
              "child graph: a moved graph is no argument of cuGraphExecUpdate");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(plain));
        np.graph.graph = g;
        CHECK(cuGraphAddNode(&n2, g, NULL, NULL, 0, &np) == CUDA_ERROR_INVALID_VALUE, "child graph: not inside itself");
        np.graph.graph = mid;
        OK(cuGraphAddNode(&nc, g, NULL, NULL, 0, &np));
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        CHECK(used_bytes() == u0 + 4096 && graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0,
              "child graph: nothing reserved at instantiation");
        OK(cuGraphLaunch(gx, s));
        OK(cuStreamSynchronize(s));
        CHECK(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 16 << 20 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0 &&
                      used_bytes() == u0 + 4096 + (16 << 20),
              "child graph: a launch reserves (and charges) the allocation two levels down");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g)); /* with mid and inner */
        OK(cuDeviceGraphMemTrim(0));

        /* past the device's free memory, two levels down: refused before anything runs */
        size_t fr, tot;
        OK(cuMemGetInfo_v2(&fr, &tot));
        ap.bytesize = fr + (64 << 20);
        OK(cuGraphCreate(&inner, 0));
        OK(cuGraphAddMemAllocNode(&na, inner, NULL, 0, &ap));
        OK(cuGraphCreate(&g, 0));
        np.graph.graph = inner;
        OK(cuGraphAddNode(&nc, g, NULL, NULL, 0, &np));
        OK(cuGraphInstantiateWithFlags(&gx, g, 0));
        CHECK(cuGraphLaunch(gx, s) == CUDA_ERROR_OUT_OF_MEMORY && used_bytes() == u0 + 4096 &&
                      graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0,
              "child graph: a launch past the free memory fails with CUDA_ERROR_OUT_OF_MEMORY");
        OK(cuGraphExecDestroy(gx));
        OK(cuGraphDestroy(g));
        OK(cuMemFree_v2(buf));
        CHECK(used_bytes() == u0, "child graph: nothing charged at the end");
}

static int cmd_selftest(void) {
        CUresult r;
        CUcontext ctx;
        CUstream s;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
                return 2;
        fflush(stdout);
        pid_t child = fork(); /* before cuInit: a child of an initialised process cannot use CUDA */
        if (child == 0) {
                close(sv[0]);
                _exit(import_child(sv[1]));
        }
        close(sv[1]);
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
                fprintf(stderr, "no context on device 0\n");
                return 2;
        }
        OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        check_link();
        check_graphs(s);
        check_memops(ctx, s);
        check_capture_nodes(s);
        check_capture_join(s);
        check_managed(s);
        check_vmm();
        check_arrays();
        check_ranges(s);
        check_pool(s);
        check_graph_memory(s);
        check_child_graphs(s);
        check_export(sv[0], child);
        OK(cuStreamDestroy_v2(s));
        OK(cuDevicePrimaryCtxRelease_v2(0));
        printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
        return failures != 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc >= 2 && strcmp(argv[1], "selftest") == 0)
                return cmd_selftest();
        if (argc >= 2 && strcmp(argv[1], "clusters") == 0)
                return cmd_clusters();
        fprintf(stderr, "usage: %s selftest|clusters\n", argv[0]);
        return 2;
}
