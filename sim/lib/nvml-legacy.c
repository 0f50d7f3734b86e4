/* Unversioned and older symbol names that nvml.h maps to the versioned ones
 * (#define nvmlInit nvmlInit_v2, ...). Programs built without those defines,
 * or that look symbols up by their plain names (old pynvml), call these.
 * Each forwards to the current version with the same arguments; faults are
 * counted under the versioned name. */
#include "lib/nvml-call.h"

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

/* Older PCI info versions: the same structure (nvml.h declares them with
 * nvmlPciInfo_t; busIdLegacy holds the old 16-byte busId). NCCL and HAMi-core
 * resolve these plain names. */
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
        return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
        return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
        return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}
