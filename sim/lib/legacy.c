/* Unversioned and older symbol names that nvml.h maps to the versioned ones
 * (#define nvmlInit nvmlInit_v2, ...). Programs built without those defines,
 * or that look symbols up by their plain names (old pynvml), call these.
 * Each forwards to the current version with the same arguments; faults are
 * counted under the versioned name. */
#include "mksim.h"
#include "nvml/nvml-abi.h"

#define X(name, ret, args) MKSIM_EXPORT ret name args;
MK_NVML_FUNCTIONS(X)
#undef X

MKSIM_EXPORT nvmlReturn_t nvmlInit(void);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes);
MKSIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                     nvmlComputeInstanceInfo_t *info);
MKSIM_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                                     nvmlGpuInstancePlacement_t *placements,
                                                                     unsigned int *count);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);

nvmlReturn_t nvmlInit(void) {
        return nvmlInit_v2();
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
        return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
        return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
        return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
        return nvmlDeviceGetAttributes_v2(device, attributes);
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
        return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
        return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements,
                                                        unsigned int *count) {
        return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
        return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}
