/* cuSPARSE on the CUDA driver simulator: create and one SpMV (CSR) with the
 * external buffer it asks for, charged on the device. */
#include <cusparse.h>

#include "common.h"

#define ROWS 1024

int main(void) {
        cusparseHandle_t h;
        cusparseSpMatDescr_t A;
        cusparseDnVecDescr_t X, Y;
        int *rowptr, *cols, hrow[ROWS + 1], hcol[ROWS];
        float *vals, *x, *y, alpha = 1.0f, beta = 0.0f;
        size_t bsize = 0;
        void *buf = NULL;

        for (int i = 0; i <= ROWS; i++)
                hrow[i] = i;
        for (int i = 0; i < ROWS; i++)
                hcol[i] = i;
        unsigned long long base = start_device(0);
        CHECK("cusparseCreate", cusparseCreate(&h), CUSPARSE_STATUS_SUCCESS);
        RT("cudaMalloc CSR", cudaMalloc((void **) &rowptr, sizeof(hrow)) | cudaMalloc((void **) &cols, sizeof(hcol)) |
                                     cudaMalloc((void **) &vals, ROWS * sizeof(float)));
        RT("cudaMalloc vectors",
           cudaMalloc((void **) &x, ROWS * sizeof(float)) | cudaMalloc((void **) &y, ROWS * sizeof(float)));
        RT("cudaMemcpy CSR", cudaMemcpy(rowptr, hrow, sizeof(hrow), cudaMemcpyHostToDevice) |
                                     cudaMemcpy(cols, hcol, sizeof(hcol), cudaMemcpyHostToDevice));
        CHECK("cusparseCreateCsr",
              cusparseCreateCsr(&A, ROWS, ROWS, ROWS, rowptr, cols, vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F),
              CUSPARSE_STATUS_SUCCESS);
        CHECK("cusparseCreateDnVec",
              cusparseCreateDnVec(&X, ROWS, x, CUDA_R_32F) | cusparseCreateDnVec(&Y, ROWS, y, CUDA_R_32F),
              CUSPARSE_STATUS_SUCCESS);
        CHECK("cusparseSpMV_bufferSize",
              cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, X, &beta, Y, CUDA_R_32F,
                                      CUSPARSE_SPMV_ALG_DEFAULT, &bsize),
              CUSPARSE_STATUS_SUCCESS);
        printf("SpMV buffer %zu bytes\n", bsize);
        if (bsize)
                RT("cudaMalloc buffer", cudaMalloc(&buf, bsize));
        CHECK("cusparseSpMV",
              cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, X, &beta, Y, CUDA_R_32F,
                           CUSPARSE_SPMV_ALG_DEFAULT, buf),
              CUSPARSE_STATUS_SUCCESS);
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        expect_charged(0, base, sizeof(hrow) + sizeof(hcol) + 3 * ROWS * sizeof(float) + bsize,
                       "matrix, vectors, buffer");
        CHECK("cusparseDestroy descriptors",
              cusparseDestroySpMat(A) | cusparseDestroyDnVec(X) | cusparseDestroyDnVec(Y), CUSPARSE_STATUS_SUCCESS);
        CHECK("cusparseDestroy", cusparseDestroy(h), CUSPARSE_STATUS_SUCCESS);
        RT("cudaFree", cudaFree(rowptr) | cudaFree(cols) | cudaFree(vals) | cudaFree(x) | cudaFree(y) | cudaFree(buf));
        return finish();
}
