/* cuRAND on the CUDA driver simulator: a generator (its states live on the
 * device) and a generation. */
#include <curand.h>

#include "common.h"

#define COUNT (1u << 20)

int main(void) {
        curandGenerator_t g;
        float *d;

        unsigned long long base = start_device(0);
        RT("cudaMalloc", cudaMalloc((void **) &d, COUNT * sizeof(float)));
        CHECK("curandCreateGenerator XORWOW", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_XORWOW),
              CURAND_STATUS_SUCCESS);
        CHECK("curandSetPseudoRandomGeneratorSeed", curandSetPseudoRandomGeneratorSeed(g, 1234ULL),
              CURAND_STATUS_SUCCESS);
        CHECK("curandGenerateUniform", curandGenerateUniform(g, d, COUNT), CURAND_STATUS_SUCCESS);
        CHECK("curandGenerateNormal", curandGenerateNormal(g, d, COUNT, 0.0f, 1.0f), CURAND_STATUS_SUCCESS);
        RT("cudaDeviceSynchronize", cudaDeviceSynchronize());
        /* The generator keeps its states on the device. */
        unsigned long long used = expect_charged(0, base, COUNT * sizeof(float) + 65536, "output and generator states");
        printf("curand: the generator took %llu bytes\n", used - base - COUNT * sizeof(float));
        CHECK("curandDestroyGenerator", curandDestroyGenerator(g), CURAND_STATUS_SUCCESS);
        RT("cudaFree", cudaFree(d));
        return finish();
}
