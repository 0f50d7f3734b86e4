/* NVML's device functions: counting, handles by index, UUID, PCI bus id and
 * serial, identities (name, UUID, PCI, minor, serial, board), memory, compute
 * capability, architecture, compute mode. */
#include "lib/mig.h"
#include "lib/nvml-call.h"

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!deviceCount)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        *deviceCount = (unsigned) c.st->n_gpus;
        return call_end(&c, NVML_SUCCESS);
}

/* The handle of GPU i into *device: GPU_IS_LOST for a lost GPU. */
static nvmlReturn_t gpu_handle(const struct sim_state *st, size_t i, nvmlDevice_t *device) {
        if (st->gpus[i].lost)
                return NVML_ERROR_GPU_IS_LOST;
        nvmlDevice_t d = intern_device((unsigned) i, SIM_ID_NONE, SIM_ID_NONE);
        if (!d)
                return NVML_ERROR_MEMORY;
        *device = d;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!device || index >= c.st->n_gpus)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        return call_end(&c, gpu_handle(c.st, index, device));
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!uuid || !device)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        for (size_t i = 0; i < c.st->n_gpus; i++) {
                struct sim_gpu *g = &c.st->gpus[i];
                nvmlDevice_t d = NULL;
                if (streq(g->uuid, uuid)) {
                        d = intern_device((unsigned) i, SIM_ID_NONE, SIM_ID_NONE);
                        if (!d)
                                return call_end(&c, NVML_ERROR_MEMORY);
                }
                for (unsigned j = 0; !d && j < g->n_gis; j++)
                        for (unsigned k = 0; !d && k < g->gis[j].n_cis; k++)
                                if (streq(g->gis[j].cis[k].uuid, uuid)) {
                                        d = intern_device((unsigned) i, g->gis[j].id, g->gis[j].cis[k].id);
                                        if (!d)
                                                return call_end(&c, NVML_ERROR_MEMORY);
                                }
                if (d && g->lost)
                        return call_end(&c, NVML_ERROR_GPU_IS_LOST);
                if (d) {
                        *device = d;
                        return call_end(&c, NVML_SUCCESS);
                }
        }
        return call_end(&c, NVML_ERROR_NOT_FOUND);
}

/* "[domain:]bus:device[.function]", hex fields. */
static bool parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn) {
        unsigned long v[4] = { 0, 0, 0, 0 };
        const char *p = s;
        int fields = 0;
        char sep[4] = { 0 };

        while (fields < 4) {
                char *end;
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
                        return false;
                errno = 0;
                v[fields] = strtoul(p, &end, 16);
                if (errno || end == p || end - p > 8)
                        return false;
                sep[fields] = *end;
                fields++;
                if (*end == '\0')
                        break;
                if (*end != ':' && *end != '.')
                        return false;
                p = end + 1;
        }
        /* Accept d:b:D.f, b:D.f, d:b:D and b:D. */
        if (fields == 4 && sep[0] == ':' && sep[1] == ':' && sep[2] == '.') {
                *dom = (unsigned) v[0], *bus = (unsigned) v[1], *dev = (unsigned) v[2], *fn = (unsigned) v[3];
        } else if (fields == 3 && sep[0] == ':' && sep[1] == '.') {
                *dom = 0, *bus = (unsigned) v[0], *dev = (unsigned) v[1], *fn = (unsigned) v[2];
        } else if (fields == 3 && sep[0] == ':' && sep[1] == ':') {
                *dom = (unsigned) v[0], *bus = (unsigned) v[1], *dev = (unsigned) v[2], *fn = 0;
        } else if (fields == 2 && sep[0] == ':') {
                *dom = 0, *bus = (unsigned) v[0], *dev = (unsigned) v[1], *fn = 0;
        } else
                return false;
        return true;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
        struct call c;
        unsigned dom, bus, dv, fn;

        CALL_BEGIN(&c, false);
        if (!pciBusId || !device || !parse_bus_id(pciBusId, &dom, &bus, &dv, &fn))
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        for (size_t i = 0; i < c.st->n_gpus; i++)
                if (dom == 0 && dv == 0 && fn == 0 && c.st->gpus[i].bus == bus) {
                        return call_end(&c, gpu_handle(c.st, i, device));
                }
        return call_end(&c, NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
        /* On a MIG handle: its index for nvmlDeviceGetMigDeviceHandleByIndex (nvml.h). */
        DEVICE_GETTER(resolve_device, index, true, d.mig ? sim_mig_device_index(d.g, d.gi->id, d.ci->id) : d.index);
}

static void mig_device_name(const struct dev *d, char *buf, size_t size) {
        char profile[64];
        const struct sim_gi_profile *p = sim_gi_profile_by_enum(d->g->model, d->gi->profile);

        sim_profile_name(d->g->model, p, d->ci->size, profile, sizeof(profile));
        snprintf(buf, size, "%s MIG %s", d->g->model->name, profile);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
        struct call c;
        struct dev d;
        char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        if (d.mig)
                mig_device_name(&d, buf, sizeof(buf));
        else
                snprintf(buf, sizeof(buf), "%s", d.g->model->name);
        return call_end(&c, copy_string(name, length, buf));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        return call_end(&c, copy_string(uuid, length, d.mig ? d.ci->uuid : d.g->uuid));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !pci)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0u, d.g->bus, 0u);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", 0u, d.g->bus, 0u);
        pci->domain = 0;
        pci->bus = d.g->bus;
        pci->device = 0;
        pci->pciDeviceId = d.g->model->pci_device_id;
        pci->pciSubSystemId = d.g->model->pci_subsystem_id;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
        DEVICE_GETTER(resolve_gpu, minorNumber, true, d.index);
}

/* Every simulated model is a data-center part, which current drivers report
 * as NVML_BRAND_NVIDIA ("Product Brand : NVIDIA" in nvidia-smi -q; the T4
 * said Tesla on older drivers: UNVERIFIED for it). A MIG device handle
 * answers its parent's brand (UNVERIFIED). */
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
        DEVICE_GETTER(resolve_device, type, true, NVML_BRAND_NVIDIA);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !memory)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned long long total, used;
        struct sim_live *l = live_get(&c);
        if (d.mig) {
                total = sim_gi_profile_by_enum(d.g->model, d.gi->profile)->memory_mib * MIB;
                used = sim_used_mib(d.g, d.gi->id) * MIB + (l ? sim_live_used(l, d.index, d.gi->id, false) : 0);
        } else {
                total = d.g->model->memory_mib * MIB;
                used = sim_used_mib(d.g, SIM_ID_NONE) * MIB + (l ? sim_live_used(l, d.index, 0, true) : 0);
        }
        used = MIN(used, total);
        memory->total = total;
        memory->used = used;
        memory->free = total - used;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && (!major || !minor))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) {
                *major = d.g->model->cc_major;
                *minor = d.g->model->cc_minor;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
        DEVICE_GETTER(resolve_device, arch, true, d.g->model->arch);
}


/* Compute mode: kept per GPU in the state file (so nvidia-smi -c, the MPS
 * control daemon and tests see one value); MIG device handles refuse it,
 * as the driver does. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
        DEVICE_GETTER(resolve_gpu, mode, true, (nvmlComputeMode_t) d.g->compute_mode);
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && mode != NVML_COMPUTEMODE_DEFAULT && mode != NVML_COMPUTEMODE_PROHIBITED &&
            mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
                r = NVML_ERROR_INVALID_ARGUMENT; /* EXCLUSIVE_THREAD is gone since CUDA 8 */
        if (r == NVML_SUCCESS)
                d.g->compute_mode = (unsigned) mode;
        return call_end(&c, r);
}

/* nvmlMemory_v2_t: as nvmlDeviceGetMemoryInfo, with `reserved` the memory the
 * driver keeps for itself. The simulator reserves none: the whole of a model's
 * memory is `total` (real drivers report a few hundred MiB reserved and a
 * total that much smaller: UNVERIFIED per model, so not modelled). */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, sim_nvmlMemory_v2_t *memory) {
        nvmlMemory_t v1;

        if (memory && memory->version != sim_nvmlMemory_v2) {
                struct call c;
                struct dev d;
                CALL_BEGIN(&c, false);
                nvmlReturn_t r = resolve_device(&c, device, &d);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_ARGUMENT_VERSION_MISMATCH : r);
        }
        nvmlReturn_t r = nvmlDeviceGetMemoryInfo(device, memory ? &v1 : NULL);
        if (r == NVML_SUCCESS)
                *memory = (sim_nvmlMemory_v2_t) {
                        .version = sim_nvmlMemory_v2,
                        .total = v1.total,
                        .reserved = 0,
                        .free = v1.free,
                        .used = v1.used,
                };
        return r;
}

/* Board serial numbers: 13 decimal digits on data-center boards (nvidia-smi
 * -q "Serial Number"); the simulator derives one from the GPU's UUID, so it
 * is stable for a machine and unique within it. Every GPU is its own board
 * (SXM modules and PCIe cards hold one GPU each). */
static void gpu_serial(const struct sim_gpu *g, char *buf, size_t size) {
        uint64_t h = sim_hash(g->uuid, strlen(g->uuid), 0x73657269616cULL /* "serial" */);
        snprintf(buf, size, "1%012llu", (unsigned long long) (h % 1000000000000ULL));
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
        struct call c;
        struct dev d;
        char buf[32];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        gpu_serial(d.g, buf, sizeof(buf));
        return call_end(&c, copy_string(serial, length, buf));
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) {
        struct call c;
        char buf[32];

        CALL_BEGIN(&c, false);
        if (!serial || !device)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        for (size_t i = 0; i < c.st->n_gpus; i++) {
                gpu_serial(&c.st->gpus[i], buf, sizeof(buf));
                if (!streq(buf, serial))
                        continue;
                return call_end(&c, gpu_handle(c.st, i, device));
        }
        return call_end(&c, NVML_ERROR_NOT_FOUND);
}

/* nvml.h: "The board ID is unique per board; GPUs on the same board share
 * it". One GPU per board here: its PCI bus number, shifted as nvidia-smi's
 * "Board ID" (0x700 for bus 07) shows. */
nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId) {
        DEVICE_GETTER(resolve_gpu, boardId, true, d.g->bus << 8);
}

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool) {
        DEVICE_GETTER(resolve_gpu, multiGpuBool, true, 0);
}

nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard) {
        GPU_PAIR_GETTER(onSameBoard, a.index == b.index);
}

/* The fixed modes of a data-center GPU under a Linux driver: persistence
 * mode on (the simulator's machine is always initialised, as with
 * nvidia-persistenced), no display, ECC on (the memory sizes of the catalogue
 * are those with ECC). Not settable here. */
static nvmlReturn_t gpu_enable_state(nvmlDevice_t device, nvmlEnableState_t *out, nvmlEnableState_t value,
                                     const char *fn) {
        struct call c;
        struct dev d;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !out)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *out = value;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
        return gpu_enable_state(device, mode, NVML_FEATURE_ENABLED, __func__);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display) {
        return gpu_enable_state(device, display, NVML_FEATURE_DISABLED, __func__);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive) {
        return gpu_enable_state(device, isActive, NVML_FEATURE_DISABLED, __func__);
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
        nvmlReturn_t r = gpu_enable_state(device, pending ? current : NULL, NVML_FEATURE_ENABLED, __func__);
        if (r == NVML_SUCCESS)
                *pending = NVML_FEATURE_ENABLED;
        return r;
}

/* Bare metal (NVML_GPU_VIRTUALIZATION_MODE_NONE) on a PCIe bus
 * (NVML_BUS_TYPE_PCIE: SXM modules are PCIe devices too). */
static nvmlReturn_t gpu_constant(const char *fn, nvmlDevice_t device, unsigned int *out, unsigned value) {
        struct call c;
        struct dev d;

        nvmlReturn_t r = call_begin(&c, fn, false);
        if (r != NVML_SUCCESS)
                return r;
        r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !out)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *out = value;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *mode) {
        return gpu_constant(__func__, device, mode, 0);
}

nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, unsigned int *type) {
        return gpu_constant(__func__, device, type, 2);
}

/* Memory errors: a simulated GPU has none. ECC counts are 0 for each error
 * type (corrected, uncorrected) and counter (volatile, aggregate); other
 * values are INVALID_ARGUMENT. Row remapping (Ampere and later; the T4 has
 * page retirement instead: NOT_SUPPORTED) has remapped no row. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                         unsigned long long *eccCounts) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!eccCounts || errorType > 1 || counterType > 1))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *eccCounts = 0;
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!corrRows || !uncRows || !isPending || !failureOccurred))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && d.g->model->arch < NVML_DEVICE_ARCH_AMPERE)
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS)
                *corrRows = *uncRows = *isPending = *failureOccurred = 0;
        return call_end(&c, r);
}

/* nvmlDeviceGetHandleByUUID with a versioned UUID: ASCII ("GPU-..." or
 * "MIG-...") or the 16 bytes, which name a GPU or a MIG device. */
nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const sim_nvmlUUID_v1_t *uuid, nvmlDevice_t *device) {
        char s[64];

        if (uuid && uuid->version == sim_nvmlUUID_v1 && uuid->type == 1) {
                if (!memchr(uuid->value.str, '\0', sizeof(uuid->value.str)))
                        return nvmlDeviceGetHandleByUUID(NULL, device); /* INVALID_ARGUMENT */
                return nvmlDeviceGetHandleByUUID(uuid->value.str, device);
        }
        if (!uuid || uuid->version != sim_nvmlUUID_v1 || uuid->type != 2) {
                struct call c;
                CALL_BEGIN(&c, false);
                return call_end(&c, uuid && uuid->version != sim_nvmlUUID_v1 ? NVML_ERROR_ARGUMENT_VERSION_MISMATCH
                                                                             : NVML_ERROR_INVALID_ARGUMENT);
        }
        const unsigned char *b = uuid->value.bytes;
        static const char *const prefixes[] = { "GPU", "MIG" };
        nvmlReturn_t r = NVML_ERROR_NOT_FOUND;
        for (size_t i = 0; i < ELEMENTSOF(prefixes) && r == NVML_ERROR_NOT_FOUND; i++) {
                snprintf(s, sizeof(s),
                         "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefixes[i],
                         b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                         b[14], b[15]);
                r = nvmlDeviceGetHandleByUUID(s, device);
        }
        return r;
}
