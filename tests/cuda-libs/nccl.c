/* NCCL on the CUDA driver simulator.
 *   nccl all     ncclCommInitAll on GPUs 0 and 1, ncclAllReduce, stream
 *                synchronise
 *   nccl graph   the same, then captured in a CUDA graph and launched
 *   nccl ranks   two processes, one GPU each: rank 0 makes the unique id and
 *                passes it through a pipe, both ncclCommInitRank, allreduce
 *   nccl tp N    tensor parallelism: the ranks' processes run N rounds of (a
 *                2 ms kernel, an allreduce of 4 KiB, synchronise) and print
 *                "tp rank R rounds N share P" (kernel time / wall time, %)
 * What the communicators allocate is charged on both devices. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include <cuda.h>
#include <nccl.h>

#include "common.h"

#define COUNT (1u << 20)
/* NCCL reports a CUDA out-of-memory as ncclUnhandledCudaError (and logs "out of memory"). */
#define NC(what, expr) CHECK_OOM(what, expr, ncclSuccess, ncclUnhandledCudaError)

/* The allreduce of both ranks captured in a graph per GPU, each launched twice. */
static void allreduce_graph(ncclComm_t comms[2], float *send[2], float *recv[2], cudaStream_t s[2]) {
        cudaGraph_t g[2];
        cudaGraphExec_t ge[2];

        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaStreamBeginCapture", cudaStreamBeginCapture(s[i], cudaStreamCaptureModeThreadLocal));
        }
        NC("ncclGroupStart (capture)", ncclGroupStart());
        for (int i = 0; i < 2; i++)
                NC("ncclAllReduce (capture)",
                   ncclAllReduce(send[i], recv[i], COUNT, ncclFloat, ncclSum, comms[i], s[i]));
        NC("ncclGroupEnd (capture)", ncclGroupEnd());
        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaStreamEndCapture", cudaStreamEndCapture(s[i], &g[i]));
                RT("cudaGraphInstantiate", cudaGraphInstantiate(&ge[i], g[i], 0));
        }
        for (int round = 0; round < 2; round++)
                for (int i = 0; i < 2; i++) {
                        RT("cudaSetDevice", cudaSetDevice(i));
                        RT("cudaGraphLaunch", cudaGraphLaunch(ge[i], s[i]));
                }
        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaStreamSynchronize (graph)", cudaStreamSynchronize(s[i]));
                RT("cudaGraphExecDestroy", cudaGraphExecDestroy(ge[i]));
                RT("cudaGraphDestroy", cudaGraphDestroy(g[i]));
        }
}

static int all(int capture) {
        ncclComm_t comms[2];
        int devs[2] = { 0, 1 };
        float *send[2], *recv[2];
        cudaStream_t s[2];
        unsigned long long base[2];

        for (int i = 0; i < 2; i++)
                base[i] = start_device(i);
        NC("ncclCommInitAll", ncclCommInitAll(comms, 2, devs));
        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaMalloc buffers", cudaMalloc((void **) &send[i], COUNT * sizeof(float)) |
                                                 cudaMalloc((void **) &recv[i], COUNT * sizeof(float)));
                RT("cudaStreamCreate", cudaStreamCreate(&s[i]));
        }
        NC("ncclGroupStart", ncclGroupStart());
        for (int i = 0; i < 2; i++)
                NC("ncclAllReduce", ncclAllReduce(send[i], recv[i], COUNT, ncclFloat, ncclSum, comms[i], s[i]));
        NC("ncclGroupEnd", ncclGroupEnd());
        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaStreamSynchronize", cudaStreamSynchronize(s[i]));
        }
        if (capture)
                allreduce_graph(comms, send, recv, s);
        for (int i = 0; i < 2; i++) {
                unsigned long long used = expect_charged(i, base[i], 2 * COUNT * sizeof(float) + (1u << 20),
                                                          "buffers and communicator");
                printf("nccl: the communicator took %llu bytes on GPU %d\n",
                       used - base[i] - 2 * COUNT * sizeof(float), i);
        }
        for (int i = 0; i < 2; i++)
                NC("ncclCommDestroy", ncclCommDestroy(comms[i]));
        for (int i = 0; i < 2; i++) {
                RT("cudaSetDevice", cudaSetDevice(i));
                RT("cudaFree", cudaFree(send[i]) | cudaFree(recv[i]));
                RT("cudaStreamDestroy", cudaStreamDestroy(s[i]));
        }
        return 0;
}

static unsigned tp_rounds; /* nccl tp N */

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* The layer's work between exchanges: the simulator's kernel that runs the
 * nanoseconds it is given, launched through the driver API. */
static int tp_loop(int r, ncclComm_t comm, float *send, float *recv, cudaStream_t s) {
        static const char image[] = "fake image: the simulator does not parse it";
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        unsigned long long ns = 2000000;
        void *params[] = { &ns };
        CHECK("cuLibraryLoadData", cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
        CHECK("cuLibraryGetKernel", cuLibraryGetKernel(&k, lib, "_Z17mksim_sleep_kernely"), CUDA_SUCCESS);
        CHECK("cuKernelGetFunction", cuKernelGetFunction(&f, k), CUDA_SUCCESS);
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < tp_rounds; i++) {
                if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream) s, params, NULL) != CUDA_SUCCESS ||
                    ncclAllReduce(send, recv, 1024, ncclFloat, ncclSum, comm, s) != ncclSuccess ||
                    cudaStreamSynchronize(s) != cudaSuccess) {
                        fprintf(stderr, "FAIL rank %d: round %u\n", r, i);
                        return 1;
                }
        }
        printf("tp rank %d rounds %u share %.1f\n", r, tp_rounds,
               100.0 * (double) tp_rounds * (double) ns / (double) (now_ns() - t0));
        return 0;
}

/* One rank of two: rank 0 writes the id to fd, rank 1 reads it. */
static int rank(int r, int fd) {
        ncclUniqueId id;
        ncclComm_t comm;
        float *send, *recv;
        cudaStream_t s;

        if (r == 0) {
                NC("ncclGetUniqueId", ncclGetUniqueId(&id));
                if (write(fd, &id, sizeof(id)) != (ssize_t) sizeof(id)) {
                        fprintf(stderr, "FAIL writing the unique id\n");
                        return 1;
                }
        } else {
                size_t got = 0;
                while (got < sizeof(id)) {
                        ssize_t n = read(fd, (char *) &id + got, sizeof(id) - got);
                        if (n <= 0) {
                                fprintf(stderr, "FAIL reading the unique id\n");
                                return 1;
                        }
                        got += (size_t) n;
                }
        }
        close(fd);
        unsigned long long base = start_device(r);
        NC("ncclCommInitRank", ncclCommInitRank(&comm, 2, id, r));
        RT("cudaMalloc buffers", cudaMalloc((void **) &send, COUNT * sizeof(float)) |
                                         cudaMalloc((void **) &recv, COUNT * sizeof(float)));
        RT("cudaStreamCreate", cudaStreamCreate(&s));
        for (int i = 0; i < 3; i++)
                NC("ncclAllReduce", ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, comm, s));
        RT("cudaStreamSynchronize", cudaStreamSynchronize(s));
        if (tp_rounds && tp_loop(r, comm, send, recv, s) != 0)
                return 1;
        if (!tp_rounds)
                expect_charged(r, base, 2 * COUNT * sizeof(float) + (1u << 20), "buffers and communicator");
        NC("ncclCommDestroy", ncclCommDestroy(comm));
        RT("cudaFree", cudaFree(send) | cudaFree(recv));
        return 0;
}

static int ranks(void) {
        int fds[2], bad = 0;
        pid_t pid[2];

        if (pipe(fds) < 0)
                return 1;
        for (int r = 0; r < 2; r++) {
                pid[r] = fork();
                if (pid[r] < 0)
                        return 1;
                if (pid[r] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test's timeout that kills the parent ends the ranks */
                        close(fds[r == 0 ? 0 : 1]);
                        fflush(stdout);
                        _exit(rank(r, fds[r == 0 ? 1 : 0]));
                }
        }
        close(fds[0]);
        close(fds[1]);
        /* A rank that fails leaves the other waiting for it in NCCL: it is killed. */
        for (int left = 2; left > 0; left--) {
                int st = 0;
                pid_t p = wait(&st);
                int r = p == pid[0] ? 0 : p == pid[1] ? 1 : -1;
                if (r < 0)
                        return 1;
                pid[r] = 0;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "FAIL rank %d: wait status %d\n", r, st);
                        bad = 1;
                        if (pid[1 - r] > 0)
                                kill(pid[1 - r], SIGKILL);
                }
        }
        return bad;
}

int main(int argc, char **argv) {
        int v = 0;
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 3 && strcmp(argv[1], "tp") == 0) {
                tp_rounds = (unsigned) strtoul(argv[2], NULL, 10);
                if (tp_rounds == 0 || tp_rounds > 100000) {
                        fprintf(stderr, "nccl tp: ROUNDS from 1 to 100000\n");
                        return 2;
                }
        } else if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "oom") != 0) ||
                   (strcmp(argv[1], "all") != 0 && strcmp(argv[1], "graph") != 0 && strcmp(argv[1], "ranks") != 0)) {
                fprintf(stderr, "usage: nccl all|graph|ranks [oom] | nccl tp ROUNDS\n");
                return 2;
        }
        expect_oom = argc == 3 && !tp_rounds;
        NC("ncclGetVersion", ncclGetVersion(&v));
        printf("nccl %d\n", v);
        int r = strcmp(argv[1], "ranks") == 0 || tp_rounds ? ranks() : all(strcmp(argv[1], "graph") == 0);
        if (r != 0)
                return 1;
        return finish();
}
