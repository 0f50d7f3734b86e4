/* cuBLAS on the CUDA driver simulator: create, cublasSgemm, cublasGemmEx,
 * cublasSetWorkspace; what the handle and the buffers take is charged. */
#include <cublas_v2.h>

#include "common.h"

#define N 512

/* cuBLAS calls: CUBLAS_STATUS_ALLOC_FAILED is its out-of-memory status. */
#define CB(what, expr) CHECK_OOM(what, expr, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_ALLOC_FAILED)

/* cublas [oom] */
int main(int argc, char **argv) {
        cublasHandle_t h;
        float *a, *b, *c, alpha = 1.0f, beta = 0.0f;
        void *ws;
        size_t mat = (size_t) N * N * sizeof(float), wsize = 8u << 20;

        expect_oom = argc == 2 && strcmp(argv[1], "oom") == 0;

        unsigned long long base = start_device(0);
        CB("cublasCreate", cublasCreate(&h));
        /* The handle allocates its default workspace on the device. */
        unsigned long long created = expect_charged(0, base, 1u << 20, "after cublasCreate");
        RT("cudaMalloc A", cudaMalloc((void **) &a, mat));
        RT("cudaMalloc B", cudaMalloc((void **) &b, mat));
        RT("cudaMalloc C", cudaMalloc((void **) &c, mat));
        CB("cublasSgemm", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, a, N, b, N, &beta, c, N));
        CB("cublasGemmEx (FP16 in, FP32 compute)",
           cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, N, N, N, &alpha, a, CUDA_R_16F, N, b, CUDA_R_16F, N, &beta, c,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        RT("cudaMalloc workspace", cudaMalloc(&ws, wsize));
        CB("cublasSetWorkspace", cublasSetWorkspace(h, ws, wsize));
        CB("cublasSgemm with the workspace",
           cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, N, N, &alpha, a, N, b, N, &beta, c, N));
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        unsigned long long used = expect_charged(0, created, 3 * mat + wsize, "matrices and workspace");
        printf("cublas: the handle took %llu bytes\n", created - base);
        CB("cublasDestroy", cublasDestroy(h));
        RT("cudaFree", cudaFree(a) | cudaFree(b) | cudaFree(c) | cudaFree(ws));
        unsigned long long after = proc_mem(0);
        if (after + 3 * mat + wsize > used) {
                fprintf(stderr, "FAIL freed buffers still charged: %llu bytes, %llu before the frees\n", after, used);
                return 1;
        }
        return finish();
}
