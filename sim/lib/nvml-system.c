/* NVML's library and system functions: init, shutdown, error strings,
 * versions, process names, confidential computing. */
#include <fcntl.h>
#include <unistd.h>

#include "lib/nvml-call.h"

nvmlReturn_t nvmlInit_v2(void) {
        return nvml_init(__func__);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
        return nvml_init(__func__);
}

nvmlReturn_t nvmlShutdown(void) {
        return nvml_shutdown();
}

const char *nvmlErrorString(nvmlReturn_t result) {
        /* The strings of libnvidia-ml as far as public sources show them:
         * pynvml's fallback table (1-18, 20, 999), nvidia-smi output ("In
         * use by another client", "Insufficient Resources" in go-nvml error
         * messages). The others are UNVERIFIED. */
        switch ((int) result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
        case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
        case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
        case NVML_ERROR_IN_USE: return "In use by another client";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case NVML_ERROR_NO_DATA: return "No data";
        case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
                return "The requested vgpu operation is not available on target device, becasue ECC is enabled";
        case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
        case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
        case NVML_ERROR_DEPRECATED: return "Deprecated";
        case NVML_ERROR_NOT_READY: return "System is not ready";
        case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
        case NVML_ERROR_INVALID_STATE: return "Resource not in correct state to perform requested operation";
        default: return "Unknown Error";
        }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
        struct call c;

        CALL_BEGIN(&c, false);
        return call_end(&c, copy_string(version, length, SIM_DRIVER_VERSION));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
        struct call c;

        CALL_BEGIN(&c, false);
        return call_end(&c, copy_string(version, length, SIM_NVML_VERSION));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!cudaDriverVersion)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *cudaDriverVersion = SIM_CUDA_DRIVER_VERSION;
        return call_end(&c, NVML_SUCCESS);
}

/* The name of a process (nvml.h: "the name of the process with the given
 * process id"): its /proc/PID/comm, what nvidia-smi's process table shows
 * for a process that is not a full path. Not a live process: NOT_FOUND. */
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
        struct call c;
        char path[64], buf[64];

        CALL_BEGIN(&c, false);
        if (!name || length == 0 || pid == 0)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        snprintf(path, sizeof(path), "/proc/%u/comm", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return call_end(&c, NVML_ERROR_NOT_FOUND);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return call_end(&c, NVML_ERROR_NOT_FOUND);
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        return call_end(&c, copy_string(name, length, buf));
}

/* Confidential computing: off on every simulated machine (nvml.h
 * nvmlConfComputeSystemState_t: environment UNAVAILABLE 0, ccFeature and
 * devToolsMode DISABLED 0). NCCL reads it at init. */
nvmlReturn_t nvmlSystemGetConfComputeState(sim_nvmlConfComputeSystemState_t *state);
MKSIM_EXPORT nvmlReturn_t nvmlSystemGetConfComputeSettings(sim_nvmlSystemConfComputeSettings_v1_t *settings);

nvmlReturn_t nvmlSystemGetConfComputeState(sim_nvmlConfComputeSystemState_t *state) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!state)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *state = (sim_nvmlConfComputeSystemState_t) { 0, 0, 0 };
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetConfComputeSettings(sim_nvmlSystemConfComputeSettings_v1_t *settings) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!settings)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        if (settings->version != sim_nvmlSystemConfComputeSettings_v1)
                return call_end(&c, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        *settings = (sim_nvmlSystemConfComputeSettings_v1_t) { .version = sim_nvmlSystemConfComputeSettings_v1 };
        return call_end(&c, NVML_SUCCESS);
}

/* Excluded devices (NVreg_ExcludedGpus) and S-class units: a simulated host
 * has neither. The old "blacklist" names answer the same. */
nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!deviceCount)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *deviceCount = 0;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount) {
        return nvmlGetExcludedDeviceCount(deviceCount);
}

/* Every index is past the (empty) list. */
nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, void *info) {
        struct call c;

        CALL_BEGIN(&c, false);
        return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
}

nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, void *info) {
        return nvmlGetExcludedDeviceInfoByIndex(index, info);
}

nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!unitCount)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *unitCount = 0;
        return call_end(&c, NVML_SUCCESS);
}
