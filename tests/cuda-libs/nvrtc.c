/* NVRTC on the CUDA driver simulator: compile a kernel to PTX and to a
 * cubin, load both with cuModuleLoadData, launch, synchronise. */
#include <cuda.h>
#include <nvrtc.h>

#include "common.h"

static const char source[] =
        "extern \"C\" __global__ void scale(float *x, float f, int n) {\n"
        "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "        if (i < n) x[i] *= f;\n"
        "}\n";

/* Compiles source with the option opt; returns PTX (cubin = 0) or the cubin. */
static char *compile(const char *opt, int cubin) {
        nvrtcProgram p;
        size_t size;
        const char *opts[] = { opt };

        CHECK("nvrtcCreateProgram", nvrtcCreateProgram(&p, source, "scale.cu", 0, NULL, NULL), NVRTC_SUCCESS);
        nvrtcResult r = nvrtcCompileProgram(p, 1, opts);
        if (r != NVRTC_SUCCESS) {
                char log[4096];
                size_t n = 0;
                if (nvrtcGetProgramLogSize(p, &n) == NVRTC_SUCCESS && n < sizeof(log) &&
                    nvrtcGetProgramLog(p, log) == NVRTC_SUCCESS)
                        fprintf(stderr, "%s\n", log);
        }
        CHECK("nvrtcCompileProgram", r, NVRTC_SUCCESS);
        CHECK("nvrtcGet(PTX|CUBIN)Size", cubin ? nvrtcGetCUBINSize(p, &size) : nvrtcGetPTXSize(p, &size),
              NVRTC_SUCCESS);
        char *image = malloc(size);
        if (!image)
                exit(1);
        CHECK("nvrtcGet(PTX|CUBIN)", cubin ? nvrtcGetCUBIN(p, image) : nvrtcGetPTX(p, image), NVRTC_SUCCESS);
        CHECK("nvrtcDestroyProgram", nvrtcDestroyProgram(&p), NVRTC_SUCCESS);
        printf("%s: %zu bytes\n", cubin ? "cubin" : "PTX", size);
        return image;
}

static void load_and_launch(const char *image, CUdeviceptr x, int n) {
        CUmodule m;
        CUfunction f;
        float factor = 2.0f;
        void *args[] = { &x, &factor, &n };

        CHECK("cuModuleLoadData", cuModuleLoadData(&m, image), CUDA_SUCCESS);
        CHECK("cuModuleGetFunction", cuModuleGetFunction(&f, m, "scale"), CUDA_SUCCESS);
        CHECK("cuLaunchKernel", cuLaunchKernel(f, (unsigned) (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL),
              CUDA_SUCCESS);
        CHECK("cuCtxSynchronize", cuCtxSynchronize(), CUDA_SUCCESS);
        CHECK("cuModuleUnload", cuModuleUnload(m), CUDA_SUCCESS);
}

int main(void) {
        int major, minor, dev = 0, n = 1 << 20;
        CUdevice d;
        CUcontext ctx;
        CUdeviceptr x;
        char arch[64];

        CHECK("nvrtcVersion", nvrtcVersion(&major, &minor), NVRTC_SUCCESS);
        printf("nvrtc %d.%d\n", major, minor);
        CHECK("cuInit", cuInit(0), CUDA_SUCCESS);
        CHECK("cuDeviceGet", cuDeviceGet(&d, dev), CUDA_SUCCESS);
        CHECK("cuDeviceGetAttribute compute capability",
              cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) |
                      cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d),
              CUDA_SUCCESS);
        CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, d), CUDA_SUCCESS);
        CHECK("cuCtxSetCurrent", cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        unsigned long long base = proc_mem(dev);
        size_t free_b = 0, total_b = 0;
        CHECK("cuMemGetInfo", cuMemGetInfo(&free_b, &total_b), CUDA_SUCCESS);
        printf("mem device %d total: %zu\n", dev, total_b);
        CHECK("cuMemAlloc", cuMemAlloc(&x, (size_t) n * sizeof(float)), CUDA_SUCCESS);
        snprintf(arch, sizeof(arch), "--gpu-architecture=compute_%d%d", major, minor);
        char *ptx = compile(arch, 0);
        load_and_launch(ptx, x, n);
        snprintf(arch, sizeof(arch), "--gpu-architecture=sm_%d%d", major, minor);
        char *cubin = compile(arch, 1);
        load_and_launch(cubin, x, n);
        expect_charged(dev, base, (size_t) n * sizeof(float), "the kernel's buffer");
        free(ptx);
        free(cubin);
        CHECK("cuMemFree", cuMemFree(x), CUDA_SUCCESS);
        CHECK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(d), CUDA_SUCCESS);
        return finish();
}
