/* Prototypes and layouts of the NVML functions the simulator implements
 * beyond the product's ABI list (src/nvml/nvml-abi.h): the layouts follow
 * nvml.h (NVML API 13, go-nvml's copy), with sim_ names so they never clash
 * with that list; sizes are checked where a field's padding matters. */
#pragma once

#include "../mksim.h" /* relative: the tests include this header too */
#include "nvml/nvml-abi.h"

typedef struct {
        unsigned int gpu, memory;
} sim_nvmlUtilization_t;

typedef struct {
        unsigned int pid;
        unsigned long long timeStamp; /* CPU timestamp in microseconds */
        unsigned int smUtil, memUtil, encUtil, decUtil;
} sim_nvmlProcessUtilizationSample_t;
_Static_assert(sizeof(sim_nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");

typedef struct {
        unsigned int pid;
        unsigned long long usedGpuMemory;
} sim_nvmlProcessInfo_v1_t;
_Static_assert(sizeof(sim_nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");

typedef struct {
        unsigned int version; /* sim_nvmlMemory_v2 */
        unsigned long long total, reserved, free, used;
} sim_nvmlMemory_v2_t;
_Static_assert(sizeof(sim_nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
#define sim_nvmlMemory_v2 ((unsigned) sizeof(sim_nvmlMemory_v2_t) | (2u << 24))

typedef struct {
        unsigned int environment, ccFeature, devToolsMode;
} sim_nvmlConfComputeSystemState_t;

typedef struct {
        unsigned int version, environment, ccFeature, devToolsMode, multiGpuMode;
} sim_nvmlSystemConfComputeSettings_v1_t;
#define sim_nvmlSystemConfComputeSettings_v1 \
        ((unsigned) sizeof(sim_nvmlSystemConfComputeSettings_v1_t) | (1u << 24))

typedef union {
        double dVal;
        int siVal;
        unsigned int uiVal;
        unsigned long ulVal;
        unsigned long long ullVal;
        signed long long sllVal;
        unsigned short usVal;
} sim_nvmlValue_t;

typedef struct {
        unsigned int fieldId, scopeId;
        long long timestamp;   /* CPU time, microseconds since 1970 */
        long long latencyUsec;
        unsigned int valueType; /* NVML_VALUE_TYPE_* */
        nvmlReturn_t nvmlReturn;
        sim_nvmlValue_t value;
} sim_nvmlFieldValue_t;
_Static_assert(sizeof(sim_nvmlFieldValue_t) == 40, "nvmlFieldValue_t");

typedef struct {
        unsigned int pid;
        unsigned long long usedGpuMemory;
        unsigned int gpuInstanceId, computeInstanceId;
        unsigned long long usedGpuCcProtectedMemory;
} sim_nvmlProcessDetail_v1_t;
_Static_assert(sizeof(sim_nvmlProcessDetail_v1_t) == 32, "nvmlProcessDetail_v1_t");

typedef struct {
        unsigned int version; /* sim_nvmlProcessDetailList_v1 */
        unsigned int mode;    /* NVML_PROCESS_MODE_COMPUTE 0, GRAPHICS 1, MPS 2, ALL 3 */
        unsigned int numProcArrayEntries;
        sim_nvmlProcessDetail_v1_t *procArray;
} sim_nvmlProcessDetailList_v1_t;
_Static_assert(sizeof(sim_nvmlProcessDetailList_v1_t) == 24, "nvmlProcessDetailList_v1_t");
#define sim_nvmlProcessDetailList_v1 ((unsigned) sizeof(sim_nvmlProcessDetailList_v1_t) | (1u << 24))

typedef struct {
        unsigned long long timeStamp;
        unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} sim_nvmlProcessUtilizationInfo_v1_t;
_Static_assert(sizeof(sim_nvmlProcessUtilizationInfo_v1_t) == 40, "nvmlProcessUtilizationInfo_v1_t");

typedef struct {
        unsigned int version; /* sim_nvmlProcessesUtilizationInfo_v1 */
        unsigned int processSamplesCount;
        unsigned long long lastSeenTimeStamp;
        sim_nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} sim_nvmlProcessesUtilizationInfo_v1_t;
_Static_assert(sizeof(sim_nvmlProcessesUtilizationInfo_v1_t) == 24, "nvmlProcessesUtilizationInfo_v1_t");
#define sim_nvmlProcessesUtilizationInfo_v1 \
        ((unsigned) sizeof(sim_nvmlProcessesUtilizationInfo_v1_t) | (1u << 24))

typedef struct {
        unsigned int version; /* sim_nvmlUUID_v1 */
        unsigned int type;    /* NVML_UUID_TYPE_ASCII 1, BINARY 2 */
        union {
                char str[41];
                unsigned char bytes[16];
        } value;
} sim_nvmlUUID_v1_t;
_Static_assert(sizeof(sim_nvmlUUID_v1_t) == 52, "nvmlUUID_v1_t");
#define sim_nvmlUUID_v1 ((unsigned) sizeof(sim_nvmlUUID_v1_t) | (1u << 24))

/* nvml.h constants the implementations use. */
#define SIM_NVML_VALUE_TYPE_UNSIGNED_INT 1
#define SIM_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define SIM_NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define SIM_NVML_FI_DEV_NVLINK_GET_STATE 165
#define SIM_NVML_FI_DEV_C2C_LINK_COUNT 170
#define SIM_NVML_FI_DEV_POWER_INSTANT 186
#define SIM_NVML_P2P_STATUS_OK 0
#define SIM_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED 1
#define SIM_NVML_P2P_STATUS_NOT_SUPPORTED 5
#define SIM_NVML_P2P_CAPS_INDEX_READ 0
#define SIM_NVML_P2P_CAPS_INDEX_WRITE 1
#define SIM_NVML_P2P_CAPS_INDEX_NVLINK 2
#define SIM_NVML_P2P_CAPS_INDEX_ATOMICS 3
#define SIM_NVML_P2P_CAPS_INDEX_PCI 4
#define SIM_NVML_NVLINK_CAP_P2P_SUPPORTED 0
#define SIM_NVML_NVLINK_CAP_P2P_ATOMICS 2
#define SIM_NVML_NVLINK_CAP_VALID 5
#define SIM_NVML_NVLINK_CAP_COUNT 6
#define SIM_NVML_AFFINITY_SCOPE_NODE 0
#define SIM_NVML_AFFINITY_SCOPE_SOCKET 1
#define SIM_NVML_CLOCK_GRAPHICS 0
#define SIM_NVML_CLOCK_SM 1
#define SIM_NVML_CLOCK_MEM 2
#define SIM_NVML_CLOCK_VIDEO 3
#define SIM_NVML_CLOCK_ID_CURRENT 0
#define SIM_NVML_CLOCK_ID_APP_CLOCK_TARGET 1
#define SIM_NVML_CLOCK_ID_APP_CLOCK_DEFAULT 2
#define SIM_NVML_CLOCK_ID_CUSTOMER_BOOST_MAX 3
#define SIM_NVML_TEMPERATURE_GPU 0
#define SIM_NVML_CLOCKS_EVENT_GPU_IDLE 0x1ULL
#define SIM_NVML_CLOCKS_EVENT_SW_POWER_CAP 0x4ULL

/* ---- system (nvml-system.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetConfComputeState(sim_nvmlConfComputeSystemState_t *state);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetConfComputeSettings(sim_nvmlSystemConfComputeSettings_v1_t *settings);

MKSIM_EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount);
MKSIM_EXPORT nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount);
MKSIM_EXPORT nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, void *info);
MKSIM_EXPORT nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, void *info);
MKSIM_EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount);

/* ---- devices (nvml-device.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, sim_nvmlMemory_v2_t *memory);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const sim_nvmlUUID_v1_t *uuid, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                               nvmlEnableState_t *pending);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *mode);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, unsigned int *type);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                      unsigned int counterType, unsigned long long *eccCounts);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                    unsigned int *isPending, unsigned int *failureOccurred);

/* ---- processes and utilisation (nvml-procs.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, sim_nvmlUtilization_t *utilization);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                          sim_nvmlProcessUtilizationSample_t *utilization,
                                                          unsigned int *processSamplesCount,
                                                          unsigned long long lastSeenTimeStamp);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                               sim_nvmlProcessInfo_v1_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                                 sim_nvmlProcessDetailList_v1_t *plist);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                                sim_nvmlProcessesUtilizationInfo_v1_t *info);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                   nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                   nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                                sim_nvmlProcessInfo_v1_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                     nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                     nvmlProcessInfo_t *infos);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                                  sim_nvmlProcessInfo_v1_t *infos);

/* ---- sensors, power, clocks, PCIe (nvml-sensors.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                       unsigned int *maxLimit);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, unsigned int clockType, unsigned int clockId,
                                             unsigned int *clockMHz);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, unsigned int clockType,
                                                             unsigned int *clockMHz);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, unsigned int *pState);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                                      unsigned long long *reasons);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                          unsigned int *samplingPeriodUs);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                          unsigned int *samplingPeriodUs);

/* ---- topology (nvml-topo.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                        unsigned int capability, unsigned int *capResult);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, unsigned int p2pIndex,
                                                 unsigned int *p2pStatus);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                                           unsigned int *count, nvmlDevice_t *deviceArray);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                      nvmlDevice_t *deviceArray);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                                   unsigned long *cpuSet);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                              unsigned long *cpuSet, unsigned int scope);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                      unsigned long *nodeSet, unsigned int scope);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceSetCpuAffinity(nvmlDevice_t device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceClearCpuAffinity(nvmlDevice_t device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                   sim_nvmlFieldValue_t *values);

/* ---- older names (nvml-legacy.c) ---- */
MKSIM_EXPORT nvmlReturn_t nvmlInit(void);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                           nvmlPciInfo_t *pci);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes);
MKSIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                     nvmlComputeInstanceInfo_t *info);
MKSIM_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);
MKSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                                     nvmlGpuInstancePlacement_t *placements,
                                                                     unsigned int *count);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);
