/* cuSOLVER (dense) on the CUDA driver simulator: create, the Cholesky
 * factorisation's buffer size, potrf with that buffer charged. */
#include <cusolverDn.h>

#include "common.h"

#define N 512

int main(void) {
        cusolverDnHandle_t h;
        float *a, *work;
        int lwork = 0, *info;

        unsigned long long base = start_device(0);
        CHECK("cusolverDnCreate", cusolverDnCreate(&h), CUSOLVER_STATUS_SUCCESS);
        /* The handle creates cuBLAS and cuSPARSE handles, with their workspaces. */
        unsigned long long created = expect_charged(0, base, 1u << 20, "after cusolverDnCreate");
        RT("cudaMalloc A", cudaMalloc((void **) &a, (size_t) N * N * sizeof(float)));
        RT("cudaMalloc info", cudaMalloc((void **) &info, sizeof(int)));
        CHECK("cusolverDnSpotrf_bufferSize", cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, N, a, N, &lwork),
              CUSOLVER_STATUS_SUCCESS);
        printf("potrf buffer %d floats\n", lwork);
        RT("cudaMalloc work", cudaMalloc((void **) &work, (size_t) lwork * sizeof(float)));
        CHECK("cusolverDnSpotrf", cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, N, a, N, work, lwork, info),
              CUSOLVER_STATUS_SUCCESS);
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        expect_charged(0, created, (size_t) N * N * sizeof(float) + (size_t) lwork * sizeof(float),
                       "matrix and buffer");
        printf("cusolver: the handle took %llu bytes\n", created - base);
        CHECK("cusolverDnDestroy", cusolverDnDestroy(h), CUSOLVER_STATUS_SUCCESS);
        RT("cudaFree", cudaFree(a) | cudaFree(work) | cudaFree(info));
        return finish();
}
