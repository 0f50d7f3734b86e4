/* vgpu/cuda-abi.h against NVIDIA's cuda.h: every constant, size and the
 * offsets that matter, checked at compile time when the toolkit header is
 * installed (/usr/local/cuda/include/cuda.h); skipped otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#if __has_include("/usr/local/cuda/include/cuda.h")
#define HAVE_CUDA_H 1
#include "/usr/local/cuda/include/cuda.h"
#define VGPU_ABI_CHECK
#include "vgpu/cuda-abi.h"

#define CHECK_VALUE(name, value) _Static_assert((long long) (name) == (value), #name);
VGPU_CUDA_RESULTS(CHECK_VALUE)
VGPU_CUDA_CONSTANTS(CHECK_VALUE)

#define SAME_SIZE(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #theirs " size");
#define SAME_OFFSET(ours, theirs, field) \
        _Static_assert(offsetof(ours, field) == offsetof(theirs, field), #theirs "." #field);
SAME_SIZE(vgpu_check_CUuuid, CUuuid)
SAME_SIZE(vgpu_check_CUmemLocation, CUmemLocation)
SAME_SIZE(vgpu_check_CUmemAllocationProp, CUmemAllocationProp)
SAME_OFFSET(vgpu_check_CUmemAllocationProp, CUmemAllocationProp, type)
SAME_OFFSET(vgpu_check_CUmemAllocationProp, CUmemAllocationProp, location)
SAME_OFFSET(vgpu_check_CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData)
SAME_OFFSET(vgpu_check_CUmemAllocationProp, CUmemAllocationProp, allocFlags)
SAME_OFFSET(vgpu_check_CUmemLocation, CUmemLocation, id)
SAME_SIZE(vgpu_check_CUlaunchAttribute, CUlaunchAttribute)
SAME_OFFSET(vgpu_check_CUlaunchAttribute, CUlaunchAttribute, value)
SAME_SIZE(vgpu_check_CUlaunchConfig, CUlaunchConfig)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, gridDimZ)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, blockDimZ)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, sharedMemBytes)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, hStream)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, attrs)
SAME_OFFSET(vgpu_check_CUlaunchConfig, CUlaunchConfig, numAttrs)
SAME_SIZE(vgpu_check_CUmemPoolProps, CUmemPoolProps)
SAME_OFFSET(vgpu_check_CUmemPoolProps, CUmemPoolProps, location)
SAME_OFFSET(vgpu_check_CUmemPoolProps, CUmemPoolProps, maxSize)
SAME_SIZE(vgpu_check_CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS)
SAME_OFFSET(vgpu_check_CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS, poolProps)
SAME_OFFSET(vgpu_check_CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS, accessDescCount)
SAME_OFFSET(vgpu_check_CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS, bytesize)
SAME_OFFSET(vgpu_check_CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS, dptr)
/* Scalar types our header declares with the same names. */
_Static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr");
_Static_assert(sizeof(CUdevice) == sizeof(int), "CUdevice");
_Static_assert(sizeof(CUmemGenericAllocationHandle) == 8, "CUmemGenericAllocationHandle");
_Static_assert(sizeof(CUresult) == sizeof(int), "CUresult");
#endif

#pragma GCC diagnostic ignored "-Wunused-parameter"

static void test_abi(void **state) {
#ifndef HAVE_CUDA_H
        skip();
#endif
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_abi) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
