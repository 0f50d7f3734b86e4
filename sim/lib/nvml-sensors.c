/* NVML's sensors, power, clocks and PCIe link: what monitors (DCGM-style
 * exporters, nvidia-smi --query-gpu, HAMi's device plugin) read each period.
 *
 * Each model has the figures of its public spec sheet (catalog.c, the
 * sheet the CUDA driver simulator's attributes read too); what changes
 * with time follows the GPU's busy share over the utilisation window
 * (nvml-procs.c, the CUDA driver simulator's kernels), u in 0..100:
 * - power draw: idle + u% of (limit - idle), idle being 15% of the limit;
 * - GPU temperature: 30 C + u% of 45 C (30 C idle, 75 C busy);
 * - clocks: the maximum (boost) clocks, P0, always: a data-center GPU under
 *   a persistence daemon keeps its application clocks (the "GPU idle" clock
 *   event reason says when it has nothing to run).
 * The idle share, the temperatures and the constant clocks are the
 * simulator's model, UNVERIFIED against a real GPU. Full GPUs only: MIG
 * device handles get NOT_SUPPORTED, as for the driver's other board-level
 * queries; a MIG-mode GPU's figures use all its MIG devices' kernels. */
#include "lib/nvml-call.h"

/* A full GPU and its model's data sheet (catalog.c): NOT_SUPPORTED for MIG
 * handles and for a model without figures (none today). */
static nvmlReturn_t resolve_spec(struct call *c, nvmlDevice_t device, const void *out, struct dev *d,
                                 const struct sim_datasheet **ret) {
        nvmlReturn_t r = resolve_gpu(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (!out)
                return NVML_ERROR_INVALID_ARGUMENT;
        *ret = &d->g->model->sheet;
        return (*ret)->power_w ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* One unsigned figure of a GPU: begins the call, resolves, computes. */
typedef unsigned (*figure_fn)(struct call *c, const struct dev *d, const struct sim_datasheet *s);

static nvmlReturn_t gpu_figure(const char *fn, nvmlDevice_t device, unsigned int *out, figure_fn f) {
        struct call c;
        struct dev d;
        const struct sim_datasheet *s;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_spec(&c, device, out, &d, &s);
        if (r == NVML_SUCCESS)
                *out = f(&c, &d, s);
        return call_end(&c, r);
}

static unsigned power_limit_mw(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return s->power_w * 1000;
}

static unsigned power_min_mw(const struct sim_datasheet *s) {
        return s->power_w * 1000 / 2; /* UNVERIFIED: half the default, as A100/H100 data sheets' ranges */
}

static unsigned power_draw_mw(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        unsigned limit = s->power_w * 1000, idle = limit * 15 / 100;
        return idle + (limit - idle) / 100 * device_busy_percent(c, d);
}

static unsigned temperature_c(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return 30 + 45 * device_busy_percent(c, d) / 100;
}

static unsigned bus_width(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return s->bus_width;
}

static unsigned pcie_gen(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return s->pcie_gen;
}

static unsigned pcie_width(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return s->pcie_width;
}

static unsigned pstate_p0(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return 0; /* NVML_PSTATE_0 */
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
        return gpu_figure(__func__, device, power, power_draw_mw);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
        return gpu_figure(__func__, device, limit, power_limit_mw);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit) {
        return gpu_figure(__func__, device, defaultLimit, power_limit_mw);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
        return gpu_figure(__func__, device, limit, power_limit_mw);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit) {
        struct call c;
        struct dev d;
        const struct sim_datasheet *s;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_spec(&c, device, minLimit && maxLimit ? minLimit : NULL, &d, &s);
        if (r == NVML_SUCCESS) {
                *minLimit = power_min_mw(s);
                *maxLimit = s->power_w * 1000;
        }
        return call_end(&c, r);
}

/* nvml.h: NVML_TEMPERATURE_GPU is the only sensor; another is INVALID_ARGUMENT. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp) {
        if (sensorType != SIM_NVML_TEMPERATURE_GPU) {
                struct call c;
                struct dev d;
                CALL_BEGIN(&c, false);
                nvmlReturn_t r = resolve_gpu(&c, device, &d);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
        }
        return gpu_figure(__func__, device, temp, temperature_c);
}

nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth) {
        return gpu_figure(__func__, device, busWidth, bus_width);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
        return gpu_figure(__func__, device, gen, pcie_gen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
        return gpu_figure(__func__, device, gen, pcie_gen);
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
        return gpu_figure(__func__, device, gen, pcie_gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
        return gpu_figure(__func__, device, width, pcie_width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
        return gpu_figure(__func__, device, width, pcie_width);
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState) {
        return gpu_figure(__func__, device, pState, pstate_p0);
}

nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, unsigned int *pState) {
        return gpu_figure(__func__, device, pState, pstate_p0);
}

/* The clock of a domain in MHz (graphics and SM share the SM clock; video
 * the SM clock too, UNVERIFIED), or 0 for an unknown domain. */
static unsigned clock_mhz(const struct sim_datasheet *s, unsigned type) {
        switch (type) {
        case SIM_NVML_CLOCK_GRAPHICS:
        case SIM_NVML_CLOCK_SM:
        case SIM_NVML_CLOCK_VIDEO:
                return s->sm_mhz;
        case SIM_NVML_CLOCK_MEM:
                return s->mem_mhz;
        default:
                return 0;
        }
}

static nvmlReturn_t clock_query(const char *fn, nvmlDevice_t device, unsigned type, unsigned id,
                                unsigned int *out) {
        struct call c;
        struct dev d;
        const struct sim_datasheet *s;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_spec(&c, device, out, &d, &s);
        if (r == NVML_SUCCESS && (clock_mhz(s, type) == 0 || id > SIM_NVML_CLOCK_ID_CUSTOMER_BOOST_MAX))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *out = clock_mhz(s, type);
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
        return clock_query(__func__, device, type, SIM_NVML_CLOCK_ID_CURRENT, clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
        return clock_query(__func__, device, type, SIM_NVML_CLOCK_ID_CURRENT, clock);
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, unsigned int clockType, unsigned int clockId,
                                unsigned int *clockMHz) {
        return clock_query(__func__, device, clockType, clockId, clockMHz);
}

nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, unsigned int clockType,
                                                unsigned int *clockMHz) {
        return clock_query(__func__, device, clockType, SIM_NVML_CLOCK_ID_CUSTOMER_BOOST_MAX, clockMHz);
}

/* Clock event reasons: "GPU idle" when no kernel ran over the window, else
 * none; the supported set is idle and the software power cap. */
static nvmlReturn_t event_reasons(const char *fn, nvmlDevice_t device, unsigned long long *out, bool supported) {
        struct call c;
        struct dev d;
        const struct sim_datasheet *s;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_spec(&c, device, out, &d, &s);
        if (r == NVML_SUCCESS && supported)
                *out = SIM_NVML_CLOCKS_EVENT_GPU_IDLE | SIM_NVML_CLOCKS_EVENT_SW_POWER_CAP;
        else if (r == NVML_SUCCESS)
                *out = device_busy_percent(&c, &d) == 0 ? SIM_NVML_CLOCKS_EVENT_GPU_IDLE : 0;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
        return event_reasons(__func__, device, reasons, false);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
        return event_reasons(__func__, device, reasons, false);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
        return event_reasons(__func__, device, reasons, true);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
        return event_reasons(__func__, device, reasons, true);
}

/* Link errors and video engines: no PCIe replay happens on a simulated link,
 * and simulated processes never use the encoders or decoders (0% over the
 * utilisation period, NVML's 1 s; DCGM-style exporters read all three). */
static unsigned zero(struct call *c, const struct dev *d, const struct sim_datasheet *s) {
        return 0;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
        return gpu_figure(__func__, device, value, zero);
}

static nvmlReturn_t video_utilisation(const char *fn, nvmlDevice_t device, unsigned int *utilization,
                                      unsigned int *samplingPeriodUs) {
        nvmlReturn_t r = gpu_figure(fn, device, samplingPeriodUs ? utilization : NULL, zero);
        if (r == NVML_SUCCESS)
                *samplingPeriodUs = 1000000;
        return r;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
        return video_utilisation(__func__, device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
        return video_utilisation(__func__, device, utilization, samplingPeriodUs);
}
