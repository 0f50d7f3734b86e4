/* CUDA driver simulator: the kernel launch API (sched.c books the kernels). */
#include "cuda/internal.h"

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream hStream, void **kernelParams, void **extra, bool cooperative) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
        void *xparams[1] = { cu_extra_buffer(extra) };
        if (cooperative && (uint64_t) gx * gy * gz > (uint64_t) cu_devs[c->dev].sms * 32)
                return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
        return cu_launch(cu_as_func(f), grid, block, kernelParams ? kernelParams : (xparams[0] ? xparams : NULL), s, c);
}

CU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
        (void) sharedMemBytes;
        return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra,
                      false);
}

CU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
        bool coop = false;
        if (!config)
                return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < config->numAttrs && config->attrs; i++)
                if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && config->attrs[i].value.cooperative)
                        coop = true;
        return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                      config->blockDimZ, config->hStream, kernelParams, extra, coop);
}

CU_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void **kernelParams) {
        (void) sharedMemBytes;
        return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, NULL,
                      true);
}
