/* cuDNN on the CUDA driver simulator: create, a convolution descriptor set,
 * the forward-algorithm query and a forward call with the workspace it asks
 * for, charged on the device. */
#include <cudnn.h>

#include "common.h"

int main(void) {
        cudnnHandle_t h;
        cudnnTensorDescriptor_t xd, yd;
        cudnnFilterDescriptor_t wd;
        cudnnConvolutionDescriptor_t cd;
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int n, c, hh, w, found = 0;
        float *x, *y, *f, alpha = 1.0f, beta = 0.0f;
        void *ws = NULL;
        size_t wsize = 0;

        unsigned long long base = start_device(0);
        printf("cudnn version %zu\n", cudnnGetVersion());
        CHECK("cudnnCreate", cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnCreateTensorDescriptor", cudnnCreateTensorDescriptor(&xd) | cudnnCreateTensorDescriptor(&yd),
              CUDNN_STATUS_SUCCESS);
        CHECK("cudnnCreateFilterDescriptor", cudnnCreateFilterDescriptor(&wd), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnCreateConvolutionDescriptor", cudnnCreateConvolutionDescriptor(&cd), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnSetTensor4dDescriptor x",
              cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 8, 16, 64, 64),
              CUDNN_STATUS_SUCCESS);
        CHECK("cudnnSetFilter4dDescriptor",
              cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 32, 16, 3, 3), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnSetConvolution2dDescriptor",
              cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
        CHECK("cudnnGetConvolution2dForwardOutputDim",
              cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &hh, &w), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnSetTensor4dDescriptor y",
              cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, w), CUDNN_STATUS_SUCCESS);
        CHECK("cudnnGetConvolutionForwardAlgorithm_v7",
              cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &found, perf), CUDNN_STATUS_SUCCESS);
        if (found < 1) {
                fprintf(stderr, "FAIL no forward algorithm\n");
                return 1;
        }
        cudnnConvolutionFwdAlgo_t algo = perf[0].algo;
        printf("forward algorithms: %d, first %d\n", found, (int) algo);
        CHECK("cudnnGetConvolutionForwardWorkspaceSize",
              cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &wsize), CUDNN_STATUS_SUCCESS);
        printf("workspace %zu bytes\n", wsize);
        size_t xs = (size_t) 8 * 16 * 64 * 64 * sizeof(float), fs = (size_t) 32 * 16 * 3 * 3 * sizeof(float);
        size_t ys = (size_t) n * c * hh * w * sizeof(float);
        RT("cudaMalloc x", cudaMalloc((void **) &x, xs));
        RT("cudaMalloc w", cudaMalloc((void **) &f, fs));
        RT("cudaMalloc y", cudaMalloc((void **) &y, ys));
        if (wsize)
                RT("cudaMalloc workspace", cudaMalloc(&ws, wsize));
        CHECK("cudnnConvolutionForward",
              cudnnConvolutionForward(h, &alpha, xd, x, wd, f, cd, algo, ws, wsize, &beta, yd, y),
              CUDNN_STATUS_SUCCESS);
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        expect_charged(0, base, xs + fs + ys + wsize, "tensors and workspace");
        CHECK("cudnnDestroy descriptors",
              cudnnDestroyTensorDescriptor(xd) | cudnnDestroyTensorDescriptor(yd) | cudnnDestroyFilterDescriptor(wd) |
                      cudnnDestroyConvolutionDescriptor(cd),
              CUDNN_STATUS_SUCCESS);
        CHECK("cudnnDestroy", cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
        RT("cudaFree", cudaFree(x) | cudaFree(f) | cudaFree(y) | cudaFree(ws));
        return finish();
}
