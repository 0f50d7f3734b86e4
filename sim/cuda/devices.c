/* CUDA driver simulator: device queries (names, UUIDs, attributes, PCI, peers). */
#include <stdlib.h>
#include <strings.h>

#include "cuda/internal.h"

CU_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
        if (!driverVersion)
                return CUDA_ERROR_INVALID_VALUE;
        *driverVersion = (int) cu_env_u64("MIGKIT_SIM_CUDA_VERSION", CUSIM_DRIVER_VERSION);
        return CUDA_SUCCESS;
}


CU_EXPORT CUresult cuDeviceGetCount(int *count) {
        CHECK_INIT();
        if (!count)
                return CUDA_ERROR_INVALID_VALUE;
        *count = cu_ndevs;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
        CHECK_INIT();
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        if (ordinal < 0 || ordinal >= cu_ndevs)
                return CUDA_ERROR_INVALID_DEVICE;
        *device = ordinal;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!name || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(name, (size_t) len, "%s", d->name);
        return CUDA_SUCCESS;
}

static CUresult dev_uuid(CUuuid *uuid, CUdevice dev, bool gpu) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!uuid)
                return CUDA_ERROR_INVALID_VALUE;
        *uuid = gpu ? d->gpu_uuid : d->uuid;
        return CUDA_SUCCESS;
}

/* The first version gives the GPU's UUID on MIG devices too. */
CU_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
        return dev_uuid(uuid, dev, true);
}

CU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
        return dev_uuid(uuid, dev, false);
}

CU_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev) {
        (void) luid;
        (void) deviceNodeMask;
        (void) dev;
        return CUDA_ERROR_NOT_SUPPORTED; /* Windows only */
}

CU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!bytes)
                return CUDA_ERROR_INVALID_VALUE;
        *bytes = d->total_bytes;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!major || !minor)
                return CUDA_ERROR_INVALID_VALUE;
        *major = d->model->cc_major;
        *minor = d->model->cc_minor;
        return CUDA_SUCCESS;
}

static int attribute(const struct cu_dev *d, CUdevice_attribute a, bool *ok) {
        int major = d->model->cc_major;
        *ok = true;
        switch ((int) a) {
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
        case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
        case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
        case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return d->clock_khz;
        case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
        case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return (int) d->sms;
        case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
        case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
        case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: return 16384;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: return 16384;
        case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
        case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
        case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
        case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
        case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int) d->bus;
        case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
        case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return d->mem_clock_khz;
        case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return d->bus_width;
        case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return d->l2_bytes;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return major >= 9 || major == 8 ? 2048 : 1024;
        case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
        case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return major;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return d->model->cc_minor;
        case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return major >= 9 ? 233472 : 167936;
        case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
        case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
        case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
        case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
        case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
        case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
        case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return major >= 9 ? 232448 : 166912;
        case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
        case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return major >= 9 ? 32 : 32;
        case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return d->l2_bytes / 4 * 3;
        case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
        case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return major >= 9;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
        case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
        case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return major >= 9 ? 4 : 1;
        case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: return major >= 9;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 1;
        case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return 0;
        case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
        case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: return 0;
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: return (int) d->model->pci_device_id;
        case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: return (int) d->model->pci_subsystem_id;
        default:
                if (a > 0 && a < CU_DEVICE_ATTRIBUTE_MAX)
                        return 0; /* known attribute the simulator does not model: 0 (unsupported) */
                *ok = false;
                return 0;
        }
}

CU_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
        struct cu_dev *d;
        bool ok;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        int v = attribute(d, attrib, &ok);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        *pi = v;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!prop)
                return CUDA_ERROR_INVALID_VALUE;
        *prop = (CUdevprop) {
                .maxThreadsPerBlock = 1024, .maxThreadsDim = { 1024, 1024, 64 },
                .maxGridSize = { 2147483647, 65535, 65535 }, .sharedMemPerBlock = 49152,
                .totalConstantMemory = 65536, .SIMDWidth = 32, .memPitch = 2147483647,
                .regsPerBlock = 65536, .clockRate = d->clock_khz, .textureAlign = 512,
        };
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pciBusId || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(pciBusId, (size_t) len, "%08X:%02X:%02X.0", 0u, d->bus, 0u);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
        unsigned long part[4];
        unsigned bus;
        const char *p;
        char *end;
        CHECK_INIT();
        if (!dev || !pciBusId)
                return CUDA_ERROR_INVALID_VALUE;
        /* domain:bus:device.function, each hexadecimal */
        p = pciBusId;
        for (int k = 0; k < 4; k++) {
                errno = 0;
                part[k] = strtoul(p, &end, 16);
                if (errno || end == p || *end != (k < 2 ? ':' : k == 2 ? '.' : '\0'))
                        return CUDA_ERROR_INVALID_VALUE;
                p = end + (k < 3);
        }
        bus = (unsigned) part[1];
        for (int i = 0; i < cu_ndevs; i++)
                if (cu_devs[i].bus == bus) {
                        *dev = i;
                        return CUDA_SUCCESS;
                }
        return CUDA_ERROR_INVALID_DEVICE;
}

CU_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
        struct cu_dev *a, *b;
        CUresult r = cu_dev_get(dev, &a);
        if (r == CUDA_SUCCESS)
                r = cu_dev_get(peerDev, &b);
        if (r != CUDA_SUCCESS)
                return r;
        if (!canAccessPeer)
                return CUDA_ERROR_INVALID_VALUE;
        *canAccessPeer = dev != peerDev && !a->mig && !b->mig;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
        int can;
        CUresult r = cuDeviceCanAccessPeer(&can, src, dst);
        if (r != CUDA_SUCCESS)
                return r;
        if (!value)
                return CUDA_ERROR_INVALID_VALUE;
        *value = attrib == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : can;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
                                                      unsigned numChannels, CUdevice dev) {
        struct cu_dev *d;
        (void) format;
        (void) numChannels;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!maxWidthInElements)
                return CUDA_ERROR_INVALID_VALUE;
        *maxWidthInElements = 1u << 27;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        (void) type;
        *pi = 0; /* no execution affinity type is supported */
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type) {
        (void) device;
        (void) resource;
        (void) type;
        return CUDA_ERROR_NOT_SUPPORTED;
}

CU_EXPORT CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                             CUflushGPUDirectRDMAWritesScope scope) {
        (void) target;
        (void) scope;
        return CUDA_SUCCESS;
}
