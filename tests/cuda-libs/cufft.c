/* cuFFT on the CUDA driver simulator: a plan (whose work area the device
 * charges) and an execution. */
#include <cufft.h>

#include "common.h"

#define NX 1000  /* 2^3 5^3: a mixed-radix plan */
#define BATCH 64

int main(void) {
        cufftHandle plan;
        cufftComplex *d;
        size_t work = 0, data = (size_t) NX * BATCH * sizeof(cufftComplex);

        unsigned long long base = start_device(0);
        RT("cudaMalloc data", cudaMalloc((void **) &d, data));
        CHECK("cufftPlan1d", cufftPlan1d(&plan, NX, CUFFT_C2C, BATCH), CUFFT_SUCCESS);
        CHECK("cufftGetSize", cufftGetSize(plan, &work), CUFFT_SUCCESS);
        printf("plan work area %zu bytes\n", work);
        CHECK("cufftExecC2C forward", cufftExecC2C(plan, d, d, CUFFT_FORWARD), CUFFT_SUCCESS);
        CHECK("cufftExecC2C inverse", cufftExecC2C(plan, d, d, CUFFT_INVERSE), CUFFT_SUCCESS);
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        expect_charged(0, base, data + work, "data and the plan's work area");
        CHECK("cufftDestroy", cufftDestroy(plan), CUFFT_SUCCESS);
        RT("cudaFree", cudaFree(d));
        return finish();
}
