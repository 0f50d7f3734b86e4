/* The subset of the CUDA driver ABI (and the two NVML memory calls) that
 * libmigkit-vgpu.so interposes, declared by us from the public ABI: the
 * CUDA Driver API reference and cuda.h of CUDA 12/13 (the _v2/_v3/_ptsz/_ptds
 * entry points that cuda.h #defines the plain names to). We never include
 * NVIDIA's headers or link libcuda at build time.
 *
 * Check mode: tests/unit/test-vgpu-abi.c includes NVIDIA's cuda.h first and
 * then this header with VGPU_ABI_CHECK defined. The constants are then only
 * listed (X-macros) and our structs are declared under vgpu_check_* names,
 * so the test static-asserts every value, size and offset against the real
 * header. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef VGPU_ABI_CHECK
#define VGPU_T(name) vgpu_check_##name
#else
#define VGPU_T(name) name
#endif

/* CUresult values we produce or test for (cuda.h, enum cudaError_enum). */
#define VGPU_CUDA_RESULTS(X)                       \
        X(CUDA_SUCCESS, 0)                         \
        X(CUDA_ERROR_INVALID_VALUE, 1)             \
        X(CUDA_ERROR_OUT_OF_MEMORY, 2)             \
        X(CUDA_ERROR_NOT_INITIALIZED, 3)           \
        X(CUDA_ERROR_DEINITIALIZED, 4)             \
        X(CUDA_ERROR_NO_DEVICE, 100)               \
        X(CUDA_ERROR_INVALID_DEVICE, 101)          \
        X(CUDA_ERROR_INVALID_CONTEXT, 201)         \
        X(CUDA_ERROR_INVALID_HANDLE, 400)          \
        X(CUDA_ERROR_NOT_FOUND, 500)               \
        X(CUDA_ERROR_NOT_SUPPORTED, 801)           \
        X(CUDA_ERROR_UNKNOWN, 999)

/* Other enum constants we use (cuda.h). */
#define VGPU_CUDA_CONSTANTS(X)                                 \
        X(CU_GET_PROC_ADDRESS_DEFAULT, 0)                      \
        X(CU_GET_PROC_ADDRESS_LEGACY_STREAM, 1)                \
        X(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 2)    \
        X(CU_GET_PROC_ADDRESS_SUCCESS, 0)                      \
        X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)             \
        X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)       \
        X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)        \
        X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 39) \
        X(CU_MEM_LOCATION_TYPE_INVALID, 0)                     \
        X(CU_MEM_LOCATION_TYPE_DEVICE, 1)                      \
        X(CU_MEM_ALLOCATION_TYPE_PINNED, 1)                    \
        X(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 4)                \
        X(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 5)             \
        X(CU_GRAPH_NODE_TYPE_GRAPH, 4)                         \
        X(CU_GRAPH_NODE_TYPE_MEM_ALLOC, 10)                    \
        X(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, 0)               \
        X(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, 2)           \
        X(CU_STREAM_CAPTURE_STATUS_NONE, 0)

#ifndef VGPU_ABI_CHECK
#define VGPU_ENUM_ENTRY_(name, value) name = value,
typedef enum cudaError_enum { VGPU_CUDA_RESULTS(VGPU_ENUM_ENTRY_) } CUresult;
enum { VGPU_CUDA_CONSTANTS(VGPU_ENUM_ENTRY_) };
#undef VGPU_ENUM_ENTRY_

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;      /* CUdeviceptr_v2 on LP64 */
typedef unsigned int CUdeviceptr_v1;          /* the pre-3.2 entry points */
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdevice_attribute;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
#endif

typedef struct VGPU_T(CUuuid_st) {
        char bytes[16];
} VGPU_T(CUuuid);

typedef struct VGPU_T(CUmemLocation_st) {
        int type; /* CUmemLocationType */
        int id;
} VGPU_T(CUmemLocation);

typedef struct VGPU_T(CUmemAllocationProp_st) {
        int type;                 /* CUmemAllocationType */
        int requestedHandleTypes; /* CUmemAllocationHandleType */
        VGPU_T(CUmemLocation) location;
        void *win32HandleMetaData;
        struct {
                unsigned char compressionType;
                unsigned char gpuDirectRDMACapable;
                unsigned short usage;
                unsigned char reserved[4];
        } allocFlags;
} VGPU_T(CUmemAllocationProp);

typedef struct VGPU_T(CUmemPoolProps_st) {
        int allocType;   /* CUmemAllocationType */
        int handleTypes; /* CUmemAllocationHandleType */
        VGPU_T(CUmemLocation) location;
        void *win32SecurityAttributes;
        size_t maxSize;
        unsigned short usage;
        unsigned char reserved[54];
} VGPU_T(CUmemPoolProps);

/* CUDA_MEM_ALLOC_NODE_PARAMS (v1): a graph allocation node's parameters. */
typedef struct VGPU_T(CUDA_MEM_ALLOC_NODE_PARAMS_v1_st) {
        VGPU_T(CUmemPoolProps) poolProps;
        const void *accessDescs; /* const CUmemAccessDesc * */
        size_t accessDescCount;
        size_t bytesize;
        unsigned long long dptr; /* CUdeviceptr */
} VGPU_T(CUDA_MEM_ALLOC_NODE_PARAMS);

/* CUlaunchAttribute: an id and a 64-byte value union; we only pass it on. */
typedef struct VGPU_T(CUlaunchAttribute_st) {
        int id;
        char pad[4];
        union {
                char pad[64];
        } value;
} VGPU_T(CUlaunchAttribute);

typedef struct VGPU_T(CUlaunchConfig_st) {
        unsigned int gridDimX, gridDimY, gridDimZ;
        unsigned int blockDimX, blockDimY, blockDimZ;
        unsigned int sharedMemBytes;
        struct CUstream_st *hStream;
        VGPU_T(CUlaunchAttribute) *attrs;
        unsigned int numAttrs;
} VGPU_T(CUlaunchConfig);

#ifndef VGPU_ABI_CHECK
/* NVML: the two memory-info calls (NVML API reference, nvml.h). */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
typedef struct {
        unsigned long long total, free, used;
} vgpu_nvmlMemory_t;
typedef struct {
        unsigned int version;
        unsigned long long total, reserved, free, used;
} vgpu_nvmlMemory_v2_t;
typedef struct {
        unsigned int pid;
        unsigned long long timeStamp;
        unsigned int smUtil, memUtil, encUtil, decUtil;
} vgpu_nvmlProcessUtilizationSample_t;
/* nvmlProcessInfo_v1_t; v2 is nvmlProcessInfo_t, which the _v2 and _v3
 * process lists fill (nvml.h). */
typedef struct {
        unsigned int pid;
        unsigned long long usedGpuMemory;
} vgpu_nvmlProcessInfo_v1_t;
typedef struct {
        unsigned int pid;
        unsigned long long usedGpuMemory;
        unsigned int gpuInstanceId, computeInstanceId;
} vgpu_nvmlProcessInfo_v2_t;
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE_U32 0xffffffffu
_Static_assert(sizeof(vgpu_nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(vgpu_nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t");
_Static_assert(sizeof(vgpu_nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(vgpu_nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(vgpu_nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
#define VGPU_NVML_MEMORY_V2_VERSION ((unsigned) (sizeof(vgpu_nvmlMemory_v2_t) | (2u << 24)))

_Static_assert(sizeof(CUuuid) == 16, "CUuuid");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream");
_Static_assert(offsetof(CUmemAllocationProp, location) == 8, "CUmemAllocationProp.location");
#endif
