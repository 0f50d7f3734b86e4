/* The subset of the NVML ABI that migkit uses, declared by us from NVIDIA's
 * documented interface (NVML API reference, nvml.h of CUDA 12.x). We never
 * include or link NVIDIA's header or library at build time: nvml/ resolves
 * these symbols with dlopen() at run time, and sim/ implements them.
 *
 * Exported symbol names carry their _v2/_v3 suffixes where the real library
 * exports several versions (nvml.h maps the plain names to them with #define).
 * Struct layouts must equal the real ones: the static assertions at the end
 * pin every size and the offsets that matter on LP64. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NVML_API_VERSION 12

typedef enum nvmlReturn_enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_ALREADY_INITIALIZED = 5,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_INSUFFICIENT_POWER = 8,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_IRQ_ISSUE = 11,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_CORRUPTED_INFOROM = 14,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_RESET_REQUIRED = 16,
        NVML_ERROR_OPERATING_SYSTEM = 17,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_MEMORY = 20,
        NVML_ERROR_NO_DATA = 21,
        NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
        NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
        NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_DEPRECATED = 26,
        NVML_ERROR_NOT_READY = 27,
        NVML_ERROR_GPU_NOT_FOUND = 28,
        NVML_ERROR_INVALID_STATE = 29,
        NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
        NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* Buffer sizes (nvml.h). */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80

#define NVML_STRUCT_VERSION(data, ver) (unsigned int) (sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))

/* MIG mode (nvmlDeviceGetMigMode / SetMigMode). */
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

/* GPU instance profiles: the argument of nvmlDeviceGetGpuInstanceProfileInfo*.
 * Not the driver's profile id, which comes back in the info struct's `id`. */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0xA
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0xB
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0xC
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0xD
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0xE
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0xF
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX 0x11
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12

#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x8

#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1

/* nvmlDeviceGetArchitecture */
typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffff

/* Event types (bit mask). */
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypePowerSourceChange 0x0000000000000080LL
#define nvmlEventMigConfigChange 0x0000000000000100LL
#define nvmlEventTypeNone 0x0000000000000000LL

/* Generic enable/disable (nvmlDeviceGetNvLinkState's isActive). */
typedef enum nvmlEnableState_enum {
        NVML_FEATURE_DISABLED = 0,
        NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

/* nvmlDeviceGetBrand (NVML API reference, nvmlBrandType_t). */
typedef enum nvmlBrandType_enum {
        NVML_BRAND_UNKNOWN = 0,
        NVML_BRAND_QUADRO = 1,
        NVML_BRAND_TESLA = 2,
        NVML_BRAND_NVS = 3,
        NVML_BRAND_GRID = 4, /* deprecated */
        NVML_BRAND_GEFORCE = 5,
        NVML_BRAND_TITAN = 6,
        NVML_BRAND_NVIDIA_VAPPS = 7,
        NVML_BRAND_NVIDIA_VPC = 8,
        NVML_BRAND_NVIDIA_VCS = 9,
        NVML_BRAND_NVIDIA_VWS = 10,
        NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
        NVML_BRAND_NVIDIA_VGAMING = NVML_BRAND_NVIDIA_CLOUD_GAMING, /* deprecated */
        NVML_BRAND_QUADRO_RTX = 12,
        NVML_BRAND_NVIDIA_RTX = 13,
        NVML_BRAND_NVIDIA = 14,
        NVML_BRAND_GEFORCE_RTX = 15,
        NVML_BRAND_TITAN_RTX = 16,
        NVML_BRAND_COUNT = 18
} nvmlBrandType_t;

/* nvml.h nvmlComputeMode_t (NVML API reference, Device Enums). */
typedef enum nvmlComputeMode_enum {
        NVML_COMPUTEMODE_DEFAULT = 0,
        NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1, /* deprecated */
        NVML_COMPUTEMODE_PROHIBITED = 2,
        NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
} nvmlComputeMode_t;

/* Highest NvLink count of any GPU: the link argument of the NvLink queries
 * runs 0..NVML_NVLINK_MAX_LINKS-1 (nvml.h of CUDA 12.x: 18; CUDA 11: 12).
 * Links a GPU lacks answer NVML_ERROR_NOT_SUPPORTED (what go-gpuallocator's
 * loop over all 18 relies on, as A100s have 12). */
#define NVML_NVLINK_MAX_LINKS 18

/* nvmlDeviceGetNvLinkRemoteDeviceType */
typedef enum nvmlIntNvLinkDeviceType_enum {
        NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
        NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
        NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
        NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;

/* nvmlDeviceGetTopologyCommonAncestor: the closest common PCIe ancestor of
 * two GPUs; the values are spaced on purpose (nvml.h). */
typedef enum nvmlGpuLevel_enum {
        NVML_TOPOLOGY_INTERNAL = 0,    /* one board (e.g. Tesla K80) */
        NVML_TOPOLOGY_SINGLE = 10,     /* a single PCIe switch */
        NVML_TOPOLOGY_MULTIPLE = 20,   /* several PCIe switches, no host bridge */
        NVML_TOPOLOGY_HOSTBRIDGE = 30, /* the same host bridge */
        NVML_TOPOLOGY_NODE = 40,       /* the same NUMA node, several host bridges */
        NVML_TOPOLOGY_SYSTEM = 50      /* across NUMA nodes (SMP interconnect) */
} nvmlGpuTopologyLevel_t;

typedef struct nvmlPciInfo_st {
        char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
        unsigned int domain;
        unsigned int bus;
        unsigned int device;
        unsigned int pciDeviceId;    /* (device id << 16) | vendor id */
        unsigned int pciSubSystemId; /* (subsystem device id << 16) | subsystem vendor id */
        char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
        unsigned long long total;
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlProcessInfo_st {
        unsigned int pid;
        unsigned long long usedGpuMemory;
        unsigned int gpuInstanceId;
        unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlEventData_st {
        nvmlDevice_t device;
        unsigned long long eventType;
        unsigned long long eventData;
        unsigned int gpuInstanceId;
        unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct nvmlDeviceAttributes_st {
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        unsigned int gpuInstanceSliceCount;
        unsigned int computeInstanceSliceCount;
        unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct nvmlGpuInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
        unsigned int id;
        unsigned int isP2pSupported;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int copyEngineCount;
        unsigned int decoderCount;
        unsigned int encoderCount;
        unsigned int jpegCount;
        unsigned int ofaCount;
        unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
        unsigned int version;
        unsigned int id;
        unsigned int isP2pSupported;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int copyEngineCount;
        unsigned int decoderCount;
        unsigned int encoderCount;
        unsigned int jpegCount;
        unsigned int ofaCount;
        unsigned long long memorySizeMB;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)

typedef struct nvmlGpuInstanceProfileInfo_v3_st {
        unsigned int version;
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int copyEngineCount;
        unsigned int decoderCount;
        unsigned int encoderCount;
        unsigned int jpegCount;
        unsigned int ofaCount;
        unsigned long long memorySizeMB;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3)

typedef struct nvmlGpuInstanceInfo_st {
        nvmlDevice_t device;
        unsigned int id;
        unsigned int profileId;
        nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
        unsigned int version;
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
        unsigned int version;
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)

typedef struct nvmlComputeInstanceInfo_st {
        nvmlDevice_t device;
        nvmlGpuInstance_t gpuInstance;
        unsigned int id;
        unsigned int profileId;
        nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* The real ABI on LP64 (x86_64, aarch64). */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t size");
_Static_assert(offsetof(nvmlPciInfo_t, pciDeviceId) == 28, "nvmlPciInfo_t.pciDeviceId");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t size");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t size");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t size");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t size");
_Static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8, "nvmlGpuInstancePlacement_t size");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48, "nvmlGpuInstanceProfileInfo_t size");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40, "GI info memorySizeMB");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152, "nvmlGpuInstanceProfileInfo_v2_t size");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB) == 48, "GI info v2 memorySizeMB");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, name) == 56, "GI info v2 name");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152, "nvmlGpuInstanceProfileInfo_v3_t size");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, memorySizeMB) == 40, "GI info v3 memorySizeMB");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, capabilities) == 144, "GI info v3 capabilities");
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "GI info v2 version word");
_Static_assert(nvmlGpuInstanceProfileInfo_v3 == 0x03000098, "GI info v3 version word");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "nvmlGpuInstanceInfo_t size");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36, "nvmlComputeInstanceProfileInfo_t size");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136, "nvmlComputeInstanceProfileInfo_v2_t size");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v3_t) == 140, "nvmlComputeInstanceProfileInfo_v3_t size");
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "CI info v2 version word");
_Static_assert(nvmlComputeInstanceProfileInfo_v3 == 0x0300008C, "CI info v3 version word");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "nvmlComputeInstanceInfo_t size");
_Static_assert(sizeof(nvmlEnableState_t) == 4, "nvmlEnableState_t size");
_Static_assert(sizeof(nvmlBrandType_t) == 4, "nvmlBrandType_t size");
_Static_assert(sizeof(nvmlIntNvLinkDeviceType_t) == 4, "nvmlIntNvLinkDeviceType_t size");
_Static_assert(sizeof(nvmlGpuTopologyLevel_t) == 4, "nvmlGpuTopologyLevel_t size");
_Static_assert(offsetof(nvmlEventData_t, eventData) == 16, "nvmlEventData_t.eventData");
_Static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24, "nvmlEventData_t.gpuInstanceId");

/* Function types, one per exported symbol we use. The symbol name is the
 * string in the table of nvml/nvml.c and the function name in sim/. */
#define MK_NVML_FUNCTIONS(X)                                                                                   \
        X(nvmlInit_v2, nvmlReturn_t, (void))                                                                   \
        X(nvmlInitWithFlags, nvmlReturn_t, (unsigned int flags))                                               \
        X(nvmlShutdown, nvmlReturn_t, (void))                                                                  \
        X(nvmlErrorString, const char *, (nvmlReturn_t result))                                                \
        X(nvmlSystemGetDriverVersion, nvmlReturn_t, (char *version, unsigned int length))                      \
        X(nvmlSystemGetNVMLVersion, nvmlReturn_t, (char *version, unsigned int length))                        \
        X(nvmlSystemGetCudaDriverVersion, nvmlReturn_t, (int *cudaDriverVersion))                              \
        X(nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned int *deviceCount))                                    \
        X(nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t, (unsigned int index, nvmlDevice_t *device))             \
        X(nvmlDeviceGetHandleByUUID, nvmlReturn_t, (const char *uuid, nvmlDevice_t *device))                   \
        X(nvmlDeviceGetHandleByPciBusId_v2, nvmlReturn_t, (const char *pciBusId, nvmlDevice_t *device))        \
        X(nvmlDeviceGetIndex, nvmlReturn_t, (nvmlDevice_t device, unsigned int *index))                        \
        X(nvmlDeviceGetName, nvmlReturn_t, (nvmlDevice_t device, char *name, unsigned int length))             \
        X(nvmlDeviceGetUUID, nvmlReturn_t, (nvmlDevice_t device, char *uuid, unsigned int length))             \
        X(nvmlDeviceGetPciInfo_v3, nvmlReturn_t, (nvmlDevice_t device, nvmlPciInfo_t *pci))                    \
        X(nvmlDeviceGetMinorNumber, nvmlReturn_t, (nvmlDevice_t device, unsigned int *minorNumber))            \
        X(nvmlDeviceGetBrand, nvmlReturn_t, (nvmlDevice_t device, nvmlBrandType_t *type))                      \
        X(nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t device, nvmlMemory_t *memory))                  \
        X(nvmlDeviceGetCudaComputeCapability, nvmlReturn_t, (nvmlDevice_t device, int *major, int *minor))    \
        X(nvmlDeviceGetArchitecture, nvmlReturn_t, (nvmlDevice_t device, nvmlDeviceArchitecture_t *arch))     \
        X(nvmlDeviceGetMigMode, nvmlReturn_t, (nvmlDevice_t device, unsigned int *currentMode,                 \
                                               unsigned int *pendingMode))                                     \
        X(nvmlDeviceSetMigMode, nvmlReturn_t, (nvmlDevice_t device, unsigned int mode,                         \
                                               nvmlReturn_t *activationStatus))                                \
        X(nvmlDeviceGetGpuInstanceProfileInfo, nvmlReturn_t, (nvmlDevice_t device, unsigned int profile,       \
                                                              nvmlGpuInstanceProfileInfo_t *info))             \
        X(nvmlDeviceGetGpuInstanceProfileInfoV, nvmlReturn_t, (nvmlDevice_t device, unsigned int profile,      \
                                                               nvmlGpuInstanceProfileInfo_v2_t *info))         \
        X(nvmlDeviceGetGpuInstancePossiblePlacements_v2, nvmlReturn_t,                                         \
          (nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,               \
           unsigned int *count))                                                                               \
        X(nvmlDeviceGetGpuInstanceRemainingCapacity, nvmlReturn_t, (nvmlDevice_t device,                      \
                                                                    unsigned int profileId,                    \
                                                                    unsigned int *count))                      \
        X(nvmlDeviceCreateGpuInstance, nvmlReturn_t, (nvmlDevice_t device, unsigned int profileId,             \
                                                      nvmlGpuInstance_t *gpuInstance))                         \
        X(nvmlDeviceCreateGpuInstanceWithPlacement, nvmlReturn_t,                                              \
          (nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,          \
           nvmlGpuInstance_t *gpuInstance))                                                                    \
        X(nvmlGpuInstanceDestroy, nvmlReturn_t, (nvmlGpuInstance_t gpuInstance))                               \
        X(nvmlDeviceGetGpuInstances, nvmlReturn_t, (nvmlDevice_t device, unsigned int profileId,               \
                                                    nvmlGpuInstance_t *gpuInstances, unsigned int *count))     \
        X(nvmlDeviceGetGpuInstanceById, nvmlReturn_t, (nvmlDevice_t device, unsigned int id,                   \
                                                       nvmlGpuInstance_t *gpuInstance))                        \
        X(nvmlGpuInstanceGetInfo, nvmlReturn_t, (nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info))  \
        X(nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlReturn_t,                                          \
          (nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,                       \
           nvmlComputeInstanceProfileInfo_t *info))                                                            \
        X(nvmlGpuInstanceGetComputeInstanceProfileInfoV, nvmlReturn_t,                                         \
          (nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,                       \
           nvmlComputeInstanceProfileInfo_v2_t *info))                                                         \
        X(nvmlGpuInstanceGetComputeInstanceRemainingCapacity, nvmlReturn_t,                                    \
          (nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count))                        \
        X(nvmlGpuInstanceGetComputeInstancePossiblePlacements, nvmlReturn_t,                                   \
          (nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstancePlacement_t *placements, \
           unsigned int *count))                                                                               \
        X(nvmlGpuInstanceCreateComputeInstance, nvmlReturn_t, (nvmlGpuInstance_t gpuInstance,                 \
                                                               unsigned int profileId,                         \
                                                               nvmlComputeInstance_t *computeInstance))        \
        X(nvmlGpuInstanceCreateComputeInstanceWithPlacement, nvmlReturn_t,                                     \
          (nvmlGpuInstance_t gpuInstance, unsigned int profileId,                                              \
           const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance))           \
        X(nvmlComputeInstanceDestroy, nvmlReturn_t, (nvmlComputeInstance_t computeInstance))                   \
        X(nvmlGpuInstanceGetComputeInstances, nvmlReturn_t,                                                    \
          (nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstances,    \
           unsigned int *count))                                                                               \
        X(nvmlGpuInstanceGetComputeInstanceById, nvmlReturn_t, (nvmlGpuInstance_t gpuInstance,                \
                                                                unsigned int id,                               \
                                                                nvmlComputeInstance_t *computeInstance))       \
        X(nvmlComputeInstanceGetInfo_v2, nvmlReturn_t, (nvmlComputeInstance_t computeInstance,                \
                                                        nvmlComputeInstanceInfo_t *info))                      \
        X(nvmlDeviceIsMigDeviceHandle, nvmlReturn_t, (nvmlDevice_t device, unsigned int *isMigDevice))        \
        X(nvmlDeviceGetGpuInstanceId, nvmlReturn_t, (nvmlDevice_t device, unsigned int *id))                   \
        X(nvmlDeviceGetComputeInstanceId, nvmlReturn_t, (nvmlDevice_t device, unsigned int *id))               \
        X(nvmlDeviceGetMaxMigDeviceCount, nvmlReturn_t, (nvmlDevice_t device, unsigned int *count))            \
        X(nvmlDeviceGetMigDeviceHandleByIndex, nvmlReturn_t, (nvmlDevice_t device, unsigned int index,         \
                                                              nvmlDevice_t *migDevice))                        \
        X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, nvmlReturn_t, (nvmlDevice_t migDevice,                \
                                                                       nvmlDevice_t *device))                  \
        X(nvmlDeviceGetAttributes_v2, nvmlReturn_t, (nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)) \
        X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                                               \
          (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos))                            \
        X(nvmlEventSetCreate, nvmlReturn_t, (nvmlEventSet_t *set))                                             \
        X(nvmlDeviceRegisterEvents, nvmlReturn_t, (nvmlDevice_t device, unsigned long long eventTypes,        \
                                                   nvmlEventSet_t set))                                        \
        X(nvmlDeviceGetSupportedEventTypes, nvmlReturn_t, (nvmlDevice_t device,                               \
                                                           unsigned long long *eventTypes))                    \
        X(nvmlEventSetWait_v2, nvmlReturn_t, (nvmlEventSet_t set, nvmlEventData_t *data,                      \
                                              unsigned int timeoutms))                                         \
        X(nvmlEventSetFree, nvmlReturn_t, (nvmlEventSet_t set))                                                \
        X(nvmlDeviceGetTopologyCommonAncestor, nvmlReturn_t,                                                   \
          (nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t *pathInfo))                      \
        X(nvmlDeviceGetNvLinkState, nvmlReturn_t, (nvmlDevice_t device, unsigned int link,                    \
                                                   nvmlEnableState_t *isActive))                               \
        X(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlReturn_t, (nvmlDevice_t device, unsigned int link,         \
                                                              nvmlPciInfo_t *pci))                             \
        X(nvmlDeviceGetNvLinkRemoteDeviceType, nvmlReturn_t,                                                   \
          (nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType))              \
        X(nvmlDeviceGetComputeMode, nvmlReturn_t, (nvmlDevice_t device, nvmlComputeMode_t *mode))              \
        X(nvmlDeviceSetComputeMode, nvmlReturn_t, (nvmlDevice_t device, nvmlComputeMode_t mode))

#ifdef __cplusplus
}
#endif
