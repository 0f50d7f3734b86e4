/* The private export tables of the CUDA driver simulator (sim/cuda/export-tables.c),
 * checked directly: the ones NVIDIA's libraries need answer as docs/simulator.md
 * says, a slot not simulated fails with CUDA_ERROR_NOT_SUPPORTED, an unknown
 * table is refused. The library programs beside it show that the answers suffice. */
#include <stdint.h>

#include <cuda.h>

#include "common.h"

typedef CUresult (*fn_ctx_out)(CUcontext *);
typedef CUresult (*fn_ctx_id)(CUcontext, unsigned long long *);
typedef CUresult (*fn_resource)(CUcontext, uint64_t, const void **);
typedef CUresult (*fn_resource_number)(CUcontext, const void *, uint64_t *);
typedef void (*fn_each)(void *, CUfunction);
typedef CUresult (*fn_functions)(CUcontext, CUmodule, fn_each, void *);
typedef CUresult (*fn_stub)(void);

static int nibble(char c) {
        return c <= '9' ? c - '0' : c - 'a' + 10;
}

static void **table(const char *hex, size_t slots) {
        CUuuid id;
        const void *t = NULL;
        for (int i = 0; i < 16; i++)
                id.bytes[i] = (char) (nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
        CHECK(hex, cuGetExportTable(&t, &id), CUDA_SUCCESS);
        void **tab = (void **) t;
        if ((uintptr_t) tab[0] != slots * sizeof(void *)) {
                fprintf(stderr, "FAIL table %s: size %zu, expected %zu\n", hex, (size_t) (uintptr_t) tab[0],
                        slots * sizeof(void *));
                exit(1);
        }
        return tab;
}

static void take(void *user, CUfunction f) {
        *(CUfunction *) user = f;
}

int main(void) {
        CUdevice d;
        CUcontext ctx, cur = NULL;
        CUmodule mod;
        CUfunction f = NULL;
        unsigned long long id = 0, want = 0;
        uint64_t number = 7;
        const void *obj = NULL, *t = NULL;
        static const char image[] = "not parsed";

        CHECK("cuInit", cuInit(0), CUDA_SUCCESS);
        CHECK("cuDeviceGet", cuDeviceGet(&d, 0), CUDA_SUCCESS);
        CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, d), CUDA_SUCCESS);

        /* Tools TLS, slot 2: the thread's context, NULL before one is current. */
        void **tls = table("42d85a8123f6cb478298f6e78a3aecdc", 4);
        CHECK("tools TLS slot 2 without a context", ((fn_ctx_out) tls[2])(&cur), CUDA_SUCCESS);
        CHECK("no context yet", cur != NULL, 0);
        CHECK("cuCtxSetCurrent", cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        CHECK("tools TLS slot 2", ((fn_ctx_out) tls[2])(&cur), CUDA_SUCCESS);
        CHECK("the current context", cur == ctx, 1);
        size_t free_b = 0, total_b = 0;
        CHECK("cuMemGetInfo", cuMemGetInfo(&free_b, &total_b), CUDA_SUCCESS);
        printf("mem device 0 total: %zu\n", total_b);

        /* Tools context: slot 4 is cuCtxGetId's number; 51 and 39 a resource and its number. */
        void **tc = table("21318c60971432488ca641ff7324c8f2", 95);
        CHECK("cuCtxGetId", cuCtxGetId(ctx, &want), CUDA_SUCCESS);
        CHECK("tools context slot 4", ((fn_ctx_id) tc[4])(ctx, &id), CUDA_SUCCESS);
        CHECK("the context's number", id == want, 1);
        CHECK("tools context slot 51", ((fn_resource) tc[51])(ctx, 0, &obj), CUDA_SUCCESS);
        CHECK("slot 51 gives an object", obj != NULL, 1);
        CHECK("tools context slot 39", ((fn_resource_number) tc[39])(ctx, obj, &number), CUDA_SUCCESS);
        CHECK("the whole device's number", number, 0);
        CHECK("slot 39 of another object", ((fn_resource_number) tc[39])(ctx, &number, &number),
              CUDA_ERROR_INVALID_VALUE);
        CHECK("tools context slot 5 (not simulated)", ((fn_stub) tc[5])(), CUDA_ERROR_NOT_SUPPORTED);

        /* Tools module, slot 7: one function per module, 1 for success. */
        void **tm = table("6e163fbeb958444d835ce182aff1991e", 56);
        CHECK("cuModuleLoadData", cuModuleLoadData(&mod, image), CUDA_SUCCESS);
        CHECK("tools module slot 7", ((fn_functions) tm[7])(ctx, mod, take, &f), 1);
        CHECK("slot 7 hands a function", f != NULL, 1);
        CHECK("tools module slot 7 without a module", ((fn_functions) tm[7])(ctx, NULL, take, &f) == 1, 0);
        CHECK("cuModuleUnload", cuModuleUnload(mod), CUDA_SUCCESS);

        /* cuBLASLt's 1734dc26: served, slot 4 a failing stub. */
        void **lt = table("1734dc26800d47458726c0f1e7dd8bca", 5);
        CHECK("1734dc26 slot 4 (not simulated)", ((fn_stub) lt[4])(), CUDA_ERROR_NOT_SUPPORTED);

        /* Refused: the CUDA 13 requirements table, NVRTC's da9151d3, any unknown UUID. */
        CUuuid none = { { 0 } };
        CHECK("unknown table", cuGetExportTable(&t, &none), CUDA_ERROR_NOT_SUPPORTED);
        CHECK("no arguments", cuGetExportTable(NULL, &none), CUDA_ERROR_INVALID_VALUE);

        CHECK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(d), CUDA_SUCCESS);
        return finish();
}
