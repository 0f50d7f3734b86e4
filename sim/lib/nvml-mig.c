/* NVML's MIG functions: MIG mode, GPU and compute instance profiles and
 * placements, creating, listing and destroying instances, MIG device handles
 * and their attributes. Rules in catalog.c and mig.c. */
#include "lib/mig.h"
#include "lib/nvml-call.h"

/* ---- MIG mode ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!currentMode || !pendingMode))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_model_has_mig(d.g->model))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS) {
                *currentMode = d.g->mig_current;
                *pendingMode = d.g->mig_pending;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && (!activationStatus || mode > NVML_DEVICE_MIG_ENABLE))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_model_has_mig(d.g->model))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && mode == NVML_DEVICE_MIG_DISABLE && d.g->n_gis > 0)
                r = NVML_ERROR_IN_USE;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);

        struct sim_gpu *g = d.g;
        g->mig_pending = mode;
        if (g->model->mode_persistent) {
                /* Ampere: the mode changes at the next GPU reset. */
                *activationStatus = g->mig_pending != g->mig_current ? NVML_ERROR_RESET_REQUIRED : NVML_SUCCESS;
        } else if (g->mig_current == mode) {
                *activationStatus = NVML_SUCCESS;
        } else if (sim_gpu_has_processes(g)) {
                /* Hopper+: applied at once only on an idle GPU (nvml.h:
                 * "if device unbind fails because the device isn't idle"). */
                *activationStatus = NVML_ERROR_IN_USE;
        } else {
                g->mig_current = mode;
                *activationStatus = NVML_SUCCESS;
        }
        return call_end(&c, NVML_SUCCESS);
}

/* ---- GPU instance profiles and placements ---- */

static void fill_gi_info(const struct sim_gi_profile *p, nvmlGpuInstanceProfileInfo_t *info) {
        *info = (nvmlGpuInstanceProfileInfo_t) {
                .id = p->id,
                .isP2pSupported = 0,
                .sliceCount = p->slices,
                .instanceCount = p->max,
                .multiprocessorCount = p->sms,
                .copyEngineCount = p->ce,
                .decoderCount = p->dec,
                .encoderCount = p->enc,
                .jpegCount = p->jpeg,
                .ofaCount = p->ofa,
                .memorySizeMB = p->memory_mib,
        };
}

/* The profile `profile` (NVML enum) of a full-GPU handle. */
static nvmlReturn_t gi_profile_for_enum(struct call *c, nvmlDevice_t device, unsigned profile, const void *info,
                                        struct dev *d, const struct sim_gi_profile **ret) {
        nvmlReturn_t r = resolve_gpu(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (!sim_model_has_mig(d->g->model))
                return NVML_ERROR_NOT_SUPPORTED;
        *ret = sim_gi_profile_by_enum(d->g->model, profile);
        return *ret ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_enum(&c, device, profile, info, &d, &p);
        if (r == NVML_SUCCESS)
                fill_gi_info(p, info);
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;
        nvmlGpuInstanceProfileInfo_t v1;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], profname[64];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_enum(&c, device, profile, info, &d, &p);
        if (r == NVML_SUCCESS && info->version != nvmlGpuInstanceProfileInfo_v2 &&
            info->version != nvmlGpuInstanceProfileInfo_v3)
                r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        fill_gi_info(p, &v1);
        sim_profile_name(d.g->model, p, 0, profname, sizeof(profname));
        snprintf(name, sizeof(name), "MIG %s", profname);
        if (info->version == nvmlGpuInstanceProfileInfo_v2) {
                *info = (nvmlGpuInstanceProfileInfo_v2_t) {
                        .version = nvmlGpuInstanceProfileInfo_v2,
                        .id = v1.id,
                        .isP2pSupported = v1.isP2pSupported,
                        .sliceCount = v1.sliceCount,
                        .instanceCount = v1.instanceCount,
                        .multiprocessorCount = v1.multiprocessorCount,
                        .copyEngineCount = v1.copyEngineCount,
                        .decoderCount = v1.decoderCount,
                        .encoderCount = v1.encoderCount,
                        .jpegCount = v1.jpegCount,
                        .ofaCount = v1.ofaCount,
                        .memorySizeMB = v1.memorySizeMB,
                };
                snprintf(info->name, sizeof(info->name), "%s", name);
        } else {
                nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *) (void *) info;
                *v3 = (nvmlGpuInstanceProfileInfo_v3_t) {
                        .version = nvmlGpuInstanceProfileInfo_v3,
                        .id = v1.id,
                        .sliceCount = v1.sliceCount,
                        .instanceCount = v1.instanceCount,
                        .multiprocessorCount = v1.multiprocessorCount,
                        .copyEngineCount = v1.copyEngineCount,
                        .decoderCount = v1.decoderCount,
                        .encoderCount = v1.encoderCount,
                        .jpegCount = v1.jpegCount,
                        .ofaCount = v1.ofaCount,
                        .memorySizeMB = v1.memorySizeMB,
                        .capabilities = 0, /* no P2P, no graphics */
                };
                snprintf(v3->name, sizeof(v3->name), "%s", name);
        }
        return call_end(&c, NVML_SUCCESS);
}

/* The profile with driver id `profileId` of a full-GPU handle; need_mig:
 * MIG mode must currently be enabled. */
static nvmlReturn_t gi_profile_for_id(struct call *c, nvmlDevice_t device, unsigned profileId, bool need_mig,
                                      struct dev *d, const struct sim_gi_profile **ret) {
        nvmlReturn_t r = resolve_gpu(c, device, d);
        if (r != NVML_SUCCESS)
                return r;
        if (!sim_model_has_mig(d->g->model) || (need_mig && !d->g->mig_current))
                return NVML_ERROR_NOT_SUPPORTED;
        *ret = sim_gi_profile_by_id(d->g->model, profileId);
        return *ret ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, false, &d, &p);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned s = 0; s < d.g->model->memory_units; s++)
                n += !!(p->starts & (1u << s));
        if (!placements) {
                *count = n;
                return call_end(&c, NVML_SUCCESS);
        }
        if (*count < n) {
                *count = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        n = 0;
        for (unsigned s = 0; s < d.g->model->memory_units; s++)
                if (p->starts & (1u << s))
                        placements[n++] = (nvmlGpuInstancePlacement_t) { .start = s, .size = p->units };
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, true, &d, &p);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *count = sim_gi_remaining(d.g, p);
        return call_end(&c, r);
}

/* ---- GPU instances ---- */

static nvmlReturn_t create_gi(struct call *c, nvmlDevice_t device, unsigned profileId,
                              const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gpuInstance) {
        struct dev d;
        const struct sim_gi_profile *p;
        unsigned start;

        nvmlReturn_t r = gi_profile_for_id(c, device, profileId, true, &d, &p);
        if (r != NVML_SUCCESS)
                return r;
        if (!gpuInstance)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (placement) {
                int k = sim_gi_check(d.g, p, placement->start, placement->size);
                if (k == -EINVAL)
                        return NVML_ERROR_INVALID_ARGUMENT;
                if (k < 0)
                        return NVML_ERROR_INSUFFICIENT_RESOURCES;
                start = placement->start;
        } else if (sim_gi_pick_start(d.g, p, &start) < 0)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;

        struct sim_gi *gi = sim_gi_create(c->st, d.g, p, start);
        if (!gi)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        nvmlGpuInstance_t h = intern_gi(d.index, gi->id);
        if (!h)
                return NVML_ERROR_MEMORY; /* not saved: the session drops the change */
        *gpuInstance = h;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t *gpuInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        return call_end(&c, create_gi(&c, device, profileId, NULL, gpuInstance));
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        if (!placement) {
                /* Still check the handle first, as every call does. */
                struct dev d;
                nvmlReturn_t r = resolve_gpu(&c, device, &d);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
        }
        return call_end(&c, create_gi(&c, device, profileId, placement, gpuInstance));
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        int k = sim_gi_destroy(h.g, h.gi->id);
        return call_end(&c, k == -EBUSY ? NVML_ERROR_IN_USE : k < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
        struct call c;
        struct dev d;
        const struct sim_gi_profile *p;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = gi_profile_for_id(&c, device, profileId, true, &d, &p);
        /* Like the driver, *count is output only: the array must hold the
         * profile's instanceCount (nvml.h; DCGM passes count = 0). */
        if (r == NVML_SUCCESS && (!gpuInstances || !count))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned i = 0; i < d.g->n_gis; i++) {
                if (d.g->gis[i].profile != p->nvml_enum)
                        continue;
                nvmlGpuInstance_t h = intern_gi(d.index, d.g->gis[i].id);
                if (!h)
                        return call_end(&c, NVML_ERROR_MEMORY);
                gpuInstances[n++] = h;
        }
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !gpuInstance)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (!sim_model_has_mig(d.g->model) || !d.g->mig_current))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && !sim_gpu_find_gi(d.g, id))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlGpuInstance_t h = intern_gi(d.index, id);
                if (!h)
                        r = NVML_ERROR_MEMORY;
                else
                        *gpuInstance = h;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r == NVML_SUCCESS && !info)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        nvmlDevice_t dev = intern_device(h.index, SIM_ID_NONE, SIM_ID_NONE);
        if (!dev)
                return call_end(&c, NVML_ERROR_MEMORY);
        *info = (nvmlGpuInstanceInfo_t) {
                .device = dev,
                .id = h.gi->id,
                .profileId = h.p->id,
                .placement = { .start = h.gi->start, .size = h.gi->size },
        };
        return call_end(&c, NVML_SUCCESS);
}

/* ---- compute instances ---- */

static void fill_ci_info(const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                         nvmlComputeInstanceProfileInfo_t *info) {
        *info = (nvmlComputeInstanceProfileInfo_t) {
                .id = cp->nvml_enum,
                .sliceCount = cp->slices,
                .instanceCount = cp->max,
                .multiprocessorCount = cp->sms,
                .sharedCopyEngineCount = p->ce,
                .sharedDecoderCount = p->dec,
                .sharedEncoderCount = p->enc,
                .sharedJpegCount = p->jpeg,
                .sharedOfaCount = p->ofa,
        };
}

static nvmlReturn_t ci_profile_for_enum(struct call *c, nvmlGpuInstance_t gi, unsigned profile,
                                        unsigned engProfile, const void *info, struct gih *h,
                                        struct sim_ci_profile *ret) {
        nvmlReturn_t r = resolve_gi(c, gi, h);
        if (r != NVML_SUCCESS)
                return r;
        if (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
            engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                return NVML_ERROR_INVALID_ARGUMENT;
        return sim_ci_profile_get(h->p, profile, ret) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_enum(&c, gpuInstance, profile, engProfile, info, &h, &cp);
        if (r == NVML_SUCCESS)
                fill_ci_info(h.p, &cp, info);
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;
        nvmlComputeInstanceProfileInfo_t v1;
        char profname[64];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_enum(&c, gpuInstance, profile, engProfile, info, &h, &cp);
        if (r == NVML_SUCCESS && info->version != nvmlComputeInstanceProfileInfo_v2 &&
            info->version != nvmlComputeInstanceProfileInfo_v3)
                r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        fill_ci_info(h.p, &cp, &v1);
        sim_profile_name(h.g->model, h.p, cp.slices, profname, sizeof(profname));
        unsigned version = info->version;
        nvmlComputeInstanceProfileInfo_v2_t v2 = {
                .version = version,
                .id = v1.id,
                .sliceCount = v1.sliceCount,
                .instanceCount = v1.instanceCount,
                .multiprocessorCount = v1.multiprocessorCount,
                .sharedCopyEngineCount = v1.sharedCopyEngineCount,
                .sharedDecoderCount = v1.sharedDecoderCount,
                .sharedEncoderCount = v1.sharedEncoderCount,
                .sharedJpegCount = v1.sharedJpegCount,
                .sharedOfaCount = v1.sharedOfaCount,
        };
        snprintf(v2.name, sizeof(v2.name), "MIG %s", profname);
        /* v3 = v2 + capabilities (0: no graphics); same prefix layout. */
        memcpy(info, &v2, sizeof(v2));
        if (version == nvmlComputeInstanceProfileInfo_v3)
                ((nvmlComputeInstanceProfileInfo_v3_t *) (void *) info)->capabilities = 0;
        return call_end(&c, NVML_SUCCESS);
}

static nvmlReturn_t ci_profile_for_id(struct call *c, nvmlGpuInstance_t gi, unsigned profileId, struct gih *h,
                                      struct sim_ci_profile *ret) {
        nvmlReturn_t r = resolve_gi(c, gi, h);
        if (r != NVML_SUCCESS)
                return r;
        /* The CI driver profile id equals the CI enum (nvidia-smi mig -lcip). */
        if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
                return NVML_ERROR_INVALID_ARGUMENT;
        return sim_ci_profile_get(h->p, profileId, ret) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
                *count = sim_ci_remaining(h.gi, h.p, &cp);
        return call_end(&c, r);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                 unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t *placements,
                                                                 unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;
        unsigned starts[SIM_MAX_CI];

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        if (r == NVML_SUCCESS && !count)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = sim_ci_placements(h.p, &cp, starts, SIM_MAX_CI);
        if (!placements) {
                *count = n;
                return call_end(&c, NVML_SUCCESS);
        }
        if (*count < n) {
                *count = n;
                return call_end(&c, NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (unsigned i = 0; i < n; i++)
                placements[i] = (nvmlComputeInstancePlacement_t) { .start = starts[i], .size = cp.slices };
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

static nvmlReturn_t create_ci(struct call *c, nvmlGpuInstance_t gpuInstance, unsigned profileId,
                              const nvmlComputeInstancePlacement_t *placement,
                              nvmlComputeInstance_t *computeInstance) {
        struct gih h;
        struct sim_ci_profile cp;
        unsigned start;

        nvmlReturn_t r = ci_profile_for_id(c, gpuInstance, profileId, &h, &cp);
        if (r != NVML_SUCCESS)
                return r;
        if (!computeInstance)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (placement) {
                int k = sim_ci_check(h.gi, h.p, &cp, placement->start, placement->size);
                if (k == -EINVAL)
                        return NVML_ERROR_INVALID_ARGUMENT;
                if (k < 0)
                        return NVML_ERROR_INSUFFICIENT_RESOURCES;
                start = placement->start;
        } else if (sim_ci_pick_start(h.gi, h.p, &cp, &start) < 0)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;

        struct sim_ci *ci = sim_ci_create(c->st, h.g, h.gi, &cp, start);
        if (!ci)
                return NVML_ERROR_INSUFFICIENT_RESOURCES;
        nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, ci->id);
        if (!ch)
                return NVML_ERROR_MEMORY;
        *computeInstance = ch;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        return call_end(&c, create_ci(&c, gpuInstance, profileId, NULL, computeInstance));
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                               unsigned int profileId,
                                                               const nvmlComputeInstancePlacement_t *placement,
                                                               nvmlComputeInstance_t *computeInstance) {
        struct call c;

        CALL_BEGIN(&c, true);
        if (!placement) {
                struct gih h;
                nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
                return call_end(&c, r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
        }
        return call_end(&c, create_ci(&c, gpuInstance, profileId, placement, computeInstance));
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
        struct call c;
        struct cih h;

        CALL_BEGIN(&c, true);
        nvmlReturn_t r = resolve_ci(&c, computeInstance, &h);
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        int k = sim_ci_destroy(h.gi.g, h.gi.gi, h.ci->id);
        return call_end(&c, k == -EBUSY ? NVML_ERROR_IN_USE : k < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count) {
        struct call c;
        struct gih h;
        struct sim_ci_profile cp;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = ci_profile_for_id(&c, gpuInstance, profileId, &h, &cp);
        /* *count is output only, as for nvmlDeviceGetGpuInstances. */
        if (r == NVML_SUCCESS && (!computeInstances || !count))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        unsigned n = 0;
        for (unsigned i = 0; i < h.gi->n_cis; i++) {
                if (h.gi->cis[i].profile != cp.nvml_enum)
                        continue;
                nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, h.gi->cis[i].id);
                if (!ch)
                        return call_end(&c, NVML_ERROR_MEMORY);
                computeInstances[n++] = ch;
        }
        *count = n;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
        struct call c;
        struct gih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gi(&c, gpuInstance, &h);
        if (r == NVML_SUCCESS && !computeInstance)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_gi_find_ci(h.gi, id))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlComputeInstance_t ch = intern_ci(h.index, h.gi->id, id);
                if (!ch)
                        r = NVML_ERROR_MEMORY;
                else
                        *computeInstance = ch;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
        struct call c;
        struct cih h;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_ci(&c, computeInstance, &h);
        if (r == NVML_SUCCESS && !info)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        nvmlDevice_t dev = intern_device(h.gi.index, SIM_ID_NONE, SIM_ID_NONE);
        nvmlGpuInstance_t gi = intern_gi(h.gi.index, h.gi.gi->id);
        if (!dev || !gi)
                return call_end(&c, NVML_ERROR_MEMORY);
        *info = (nvmlComputeInstanceInfo_t) {
                .device = dev,
                .gpuInstance = gi,
                .id = h.ci->id,
                .profileId = h.ci->profile,
                .placement = { .start = h.ci->start, .size = h.ci->size },
        };
        return call_end(&c, NVML_SUCCESS);
}

/* ---- MIG devices ---- */

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
        DEVICE_GETTER(resolve_device, isMigDevice, true, d.mig);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
        DEVICE_GETTER(resolve_device, id, d.mig, d.gi->id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
        DEVICE_GETTER(resolve_device, id, d.mig, d.ci->id);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
        /* nvml.h: "Returns zero if MIG is not supported or enabled." */
        DEVICE_GETTER(resolve_gpu, count, true, d.g->mig_current ? d.g->model->compute_slices : 0);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
        struct call c;
        struct dev d;
        struct sim_gi *gi;
        struct sim_ci *ci;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !migDevice)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (!sim_model_has_mig(d.g->model) || !d.g->mig_current))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS && index >= d.g->model->compute_slices)
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && !sim_mig_device_at(d.g, index, &gi, &ci))
                r = NVML_ERROR_NOT_FOUND;
        if (r == NVML_SUCCESS) {
                nvmlDevice_t m = intern_device(d.index, gi->id, ci->id);
                if (!m)
                        r = NVML_ERROR_MEMORY;
                else
                        *migDevice = m;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, migDevice, &d);
        if (r == NVML_SUCCESS && (!device || !d.mig))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) {
                nvmlDevice_t p = intern_device(d.index, SIM_ID_NONE, SIM_ID_NONE);
                if (!p)
                        r = NVML_ERROR_MEMORY;
                else
                        *device = p;
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_device(&c, device, &d);
        if (r == NVML_SUCCESS && !attributes)
                r = NVML_ERROR_INVALID_ARGUMENT;
        /* nvml.h: "currently only supports MIG device handles". */
        if (r == NVML_SUCCESS && !d.mig)
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r != NVML_SUCCESS)
                return call_end(&c, r);
        const struct sim_gi_profile *p = sim_gi_profile_by_enum(d.g->model, d.gi->profile);
        *attributes = (nvmlDeviceAttributes_t) {
                .multiprocessorCount = p->sms * d.ci->size / p->slices,
                .sharedCopyEngineCount = p->ce,
                .sharedDecoderCount = p->dec,
                .sharedEncoderCount = p->enc,
                .sharedJpegCount = p->jpeg,
                .sharedOfaCount = p->ofa,
                .gpuInstanceSliceCount = p->slices,
                .computeInstanceSliceCount = d.ci->size,
                .memorySizeMB = p->memory_mib,
        };
        return call_end(&c, NVML_SUCCESS);
}

