/* cuBLASLt on the CUDA driver simulator: a matmul descriptor, the heuristic
 * query (cublasLtMatmulAlgoGetHeuristic) and cublasLtMatmul with a workspace
 * the device charges. */
#include <cublasLt.h>

#include "common.h"

#define M 256
#define N 384
#define K 512

int main(void) {
        cublasLtHandle_t lt;
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulHeuristicResult_t res[4];
        int found = 0;
        float *a, *b, *c, alpha = 1.0f, beta = 0.0f;
        void *ws;
        size_t wsize = 32u << 20;
        cudaStream_t s;

        unsigned long long base = start_device(0);
        CHECK("cublasLtCreate", cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
        RT("cudaStreamCreate", cudaStreamCreate(&s));
        RT("cudaMalloc A", cudaMalloc((void **) &a, (size_t) M * K * sizeof(float)));
        RT("cudaMalloc B", cudaMalloc((void **) &b, (size_t) K * N * sizeof(float)));
        RT("cudaMalloc C", cudaMalloc((void **) &c, (size_t) M * N * sizeof(float)));
        RT("cudaMalloc workspace", cudaMalloc(&ws, wsize));
        CHECK("cublasLtMatmulDescCreate", cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
        cublasOperation_t tr = CUBLAS_OP_N;
        CHECK("cublasLtMatmulDescSetAttribute TRANSA",
              cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof(tr)), CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatrixLayoutCreate A", cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M),
              CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatrixLayoutCreate B", cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K),
              CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatrixLayoutCreate C", cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M),
              CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES",
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsize,
                                                   sizeof(wsize)),
              CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatmulAlgoGetHeuristic",
              cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, res, &found), CUBLAS_STATUS_SUCCESS);
        if (found < 1) {
                fprintf(stderr, "FAIL cublasLtMatmulAlgoGetHeuristic found no algorithm\n");
                return 1;
        }
        printf("heuristics: %d algorithms, the first needs %zu bytes of workspace\n", found, res[0].workspaceSize);
        CHECK("cublasLtMatmul",
              cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &res[0].algo, ws, wsize, s),
              CUBLAS_STATUS_SUCCESS);
        RT("cudaStreamSynchronize", cudaStreamSynchronize(s));
        expect_charged(0, base, (size_t) (M * K + K * N + M * N) * sizeof(float) + wsize, "matrices and workspace");
        CHECK("cublasLtMatmulPreferenceDestroy", cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy(la) | cublasLtMatrixLayoutDestroy(lb) |
                                                     cublasLtMatrixLayoutDestroy(lc),
              CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtMatmulDescDestroy", cublasLtMatmulDescDestroy(op), CUBLAS_STATUS_SUCCESS);
        CHECK("cublasLtDestroy", cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
        RT("cudaFree", cudaFree(a) | cudaFree(b) | cudaFree(c) | cudaFree(ws));
        return finish();
}
