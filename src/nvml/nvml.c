#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/dl.h"
#include "base/log.h"
#include "base/macro.h"
#include "nvml/nvml.h"

/* The symbol table: one typed pointer per NVML function we use. */
struct mk_nvml_syms {
#define X(name, ret, args) ret(*name) args;
        MK_NVML_FUNCTIONS(X)
#undef X
};

struct mk_nvml {
        void *dl;
        char *path;
        bool initialized;
        unsigned long mutations;      /* atomic: the engine calls from one thread per GPU */
        struct mk_nvml_syms s;
};

/* Symbols we can live without: newer/optional queries and the event API
 * (only the device plugin needs events; it checks for them itself). Every
 * other symbol is required, and a library lacking one is refused at open. */
static const char *const optional_symbols[] = {
        "nvmlInitWithFlags",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetBrand", /* in the table for the simulator's exports; migkit does not call it */
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
        "nvmlGpuInstanceGetComputeInstancePossiblePlacements",
        "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
        "nvmlDeviceGetAttributes_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
        /* Interconnect (snapshot matrices; without them the matrices are NULL). */
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlDeviceGetNvLinkRemoteDeviceType",
        /* Compute mode (MPS sharing only). */
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceSetComputeMode",
};

static bool symbol_optional(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(optional_symbols); i++)
                if (streq(optional_symbols[i], name))
                        return true;
        return false;
}

static const struct {
        nvmlReturn_t code;
        int err;
        const char *name;
} return_table[] = {
        {NVML_SUCCESS, 0, "NVML_SUCCESS"},
        {NVML_ERROR_UNINITIALIZED, -ENOTCONN, "NVML_ERROR_UNINITIALIZED"},
        {NVML_ERROR_INVALID_ARGUMENT, -EINVAL, "NVML_ERROR_INVALID_ARGUMENT"},
        {NVML_ERROR_NOT_SUPPORTED, -EOPNOTSUPP, "NVML_ERROR_NOT_SUPPORTED"},
        {NVML_ERROR_NO_PERMISSION, -EPERM, "NVML_ERROR_NO_PERMISSION"},
        {NVML_ERROR_ALREADY_INITIALIZED, -EALREADY, "NVML_ERROR_ALREADY_INITIALIZED"},
        {NVML_ERROR_NOT_FOUND, -ENOENT, "NVML_ERROR_NOT_FOUND"},
        {NVML_ERROR_INSUFFICIENT_SIZE, -ENOBUFS, "NVML_ERROR_INSUFFICIENT_SIZE"},
        {NVML_ERROR_INSUFFICIENT_POWER, -EIO, "NVML_ERROR_INSUFFICIENT_POWER"},
        {NVML_ERROR_DRIVER_NOT_LOADED, -ENODEV, "NVML_ERROR_DRIVER_NOT_LOADED"},
        {NVML_ERROR_TIMEOUT, -ETIMEDOUT, "NVML_ERROR_TIMEOUT"},
        {NVML_ERROR_IRQ_ISSUE, -EIO, "NVML_ERROR_IRQ_ISSUE"},
        {NVML_ERROR_LIBRARY_NOT_FOUND, -ELIBACC, "NVML_ERROR_LIBRARY_NOT_FOUND"},
        {NVML_ERROR_FUNCTION_NOT_FOUND, -ENOSYS, "NVML_ERROR_FUNCTION_NOT_FOUND"},
        {NVML_ERROR_CORRUPTED_INFOROM, -EIO, "NVML_ERROR_CORRUPTED_INFOROM"},
        {NVML_ERROR_GPU_IS_LOST, -ENXIO, "NVML_ERROR_GPU_IS_LOST"},
        {NVML_ERROR_RESET_REQUIRED, -ERESTART, "NVML_ERROR_RESET_REQUIRED"},
        {NVML_ERROR_OPERATING_SYSTEM, -EACCES, "NVML_ERROR_OPERATING_SYSTEM"},
        {NVML_ERROR_LIB_RM_VERSION_MISMATCH, -EPROTO, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
        {NVML_ERROR_IN_USE, -EBUSY, "NVML_ERROR_IN_USE"},
        {NVML_ERROR_MEMORY, -ENOMEM, "NVML_ERROR_MEMORY"},
        {NVML_ERROR_NO_DATA, -ENODATA, "NVML_ERROR_NO_DATA"},
        {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, -EOPNOTSUPP, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED"},
        {NVML_ERROR_INSUFFICIENT_RESOURCES, -ENOSPC, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
        {NVML_ERROR_FREQ_NOT_SUPPORTED, -EOPNOTSUPP, "NVML_ERROR_FREQ_NOT_SUPPORTED"},
        {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, -EPROTONOSUPPORT, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
        {NVML_ERROR_DEPRECATED, -EOPNOTSUPP, "NVML_ERROR_DEPRECATED"},
        {NVML_ERROR_NOT_READY, -EAGAIN, "NVML_ERROR_NOT_READY"},
        {NVML_ERROR_GPU_NOT_FOUND, -ENODEV, "NVML_ERROR_GPU_NOT_FOUND"},
        {NVML_ERROR_INVALID_STATE, -EBADFD, "NVML_ERROR_INVALID_STATE"},
        {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, -EOPNOTSUPP, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED"},
        {NVML_ERROR_UNKNOWN, -EIO, "NVML_ERROR_UNKNOWN"},
};

int mk_nvml_errno(nvmlReturn_t r) {
        for (size_t i = 0; i < ELEMENTSOF(return_table); i++)
                if (return_table[i].code == r)
                        return return_table[i].err;
        return -EIO;
}

const char *mk_nvml_return_name(nvmlReturn_t r) {
        for (size_t i = 0; i < ELEMENTSOF(return_table); i++)
                if (return_table[i].code == r)
                        return return_table[i].name;
        return "NVML_ERROR_UNKNOWN";
}

static const char *nvml_strerror(const struct mk_nvml *n, nvmlReturn_t r) {
        const char *s = n->s.nvmlErrorString ? n->s.nvmlErrorString(r) : NULL;
        return s ? s : mk_nvml_return_name(r);
}

/* Sets `e` to "<what>: <NVML string> (<NVML name>)" and returns the errno. */
_printf_(4, 5) static int nvml_fail(const struct mk_nvml *n, struct mk_error *e, nvmlReturn_t r,
                                   const char *fmt, ...) {
        char what[MK_ERROR_MSG_MAX / 2];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        int err = mk_nvml_errno(r);
        log_debug_area("nvml", "%s failed: %s (%s)", what, nvml_strerror(n, r), mk_nvml_return_name(r));
        return mk_error_set(e, err ? err : -EIO, "%s: %s (%s)", what, nvml_strerror(n, r), mk_nvml_return_name(r));
}

struct mk_nvml *mk_nvml_close(struct mk_nvml *n) {
        if (!n)
                return NULL;
        if (n->initialized && n->s.nvmlShutdown)
                (void) n->s.nvmlShutdown();
        if (n->dl)
                dlclose(n->dl);
        free(n->path);
        free(n);
        return NULL;
}

const char *mk_nvml_path(const struct mk_nvml *n) {
        return n->path;
}

int mk_nvml_open(const char *path, struct mk_nvml **ret, struct mk_error *e) {
        if (!path) {
                path = secure_getenv("MIGKIT_NVML_LIB");
                if (!path || !*path)
                        path = MK_NVML_DEFAULT_LIB;
        }

        _cleanup_(mk_nvml_closep) struct mk_nvml *n = calloc(1, sizeof(*n));
        if (!n)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        n->path = strdup(path);
        if (!n->path)
                return mk_error_set(e, -ENOMEM, "Out of memory");

        (void) dlerror();
        n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!n->dl) {
                const char *why = dlerror();
                return mk_error_set(e, -ELIBACC,
                                    "Cannot load the NVML library '%s': %s (is the NVIDIA driver installed? "
                                    "MIGKIT_NVML_LIB selects another library; --simulate uses the simulator)",
                                    path, why ? why : "unknown error");
        }

        /* Resolve everything before any call, so a missing required symbol is
         * reported by name before a GPU is touched. */
        static const struct mk_dl_sym table[] = {
#define X(name, ret, args) {#name, offsetof(struct mk_nvml_syms, name)},
                MK_NVML_FUNCTIONS(X)
#undef X
        };
        const char *missing = mk_dl_resolve(n->dl, table, ELEMENTSOF(table), &n->s, symbol_optional);
        if (missing)
                return mk_error_set(e, -ELIBBAD,
                                    "The NVML library '%s' lacks the required symbol '%s' "
                                    "(driver too old, or not an NVML library)",
                                    path, missing);

        nvmlReturn_t r = n->s.nvmlInit_v2();
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "Failed to initialise NVML from '%s'", path);
        n->initialized = true;
        log_debug_area("nvml", "Loaded NVML from '%s'", path);

        *ret = TAKE_PTR(n);
        return 0;
}

/* Copies at most size-1 bytes and NUL-terminates; NVML strings are bounded
 * by their buffers but we never trust that. */
static void copy_str(char *dst, size_t size, const char *src) {
        size_t len = strnlen(src, size - 1);
        memcpy(dst, src, len);
        dst[len] = 0;
}

struct gi_query {
        unsigned id;
        unsigned slices;
        unsigned max_count;
        unsigned long long memory_mib;
        unsigned sms, ce, dec, enc, jpeg, ofa;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

/* Queries one GI profile enum. Returns 1 when the GPU has it, 0 when it does
 * not (NOT_SUPPORTED / INVALID_ARGUMENT), negative on other failures. Uses
 * the versioned call (v3, then v2) when the library has it. */
static int query_gi_profile(struct mk_nvml *n, nvmlDevice_t dev, unsigned gpu, unsigned profile,
                            struct gi_query *q, struct mk_error *e) {
        nvmlReturn_t r;
        memset(q, 0, sizeof(*q));
        if (n->s.nvmlDeviceGetGpuInstanceProfileInfoV) {
                nvmlGpuInstanceProfileInfo_v3_t v3 = {.version = nvmlGpuInstanceProfileInfo_v3};
                r = n->s.nvmlDeviceGetGpuInstanceProfileInfoV(dev, profile, (nvmlGpuInstanceProfileInfo_v2_t *) &v3);
                if (r == NVML_SUCCESS) {
                        *q = (struct gi_query){v3.id, v3.sliceCount, v3.instanceCount, v3.memorySizeMB,
                                               v3.multiprocessorCount, v3.copyEngineCount, v3.decoderCount,
                                               v3.encoderCount, v3.jpegCount, v3.ofaCount, ""};
                        copy_str(q->name, sizeof(q->name), v3.name);
                        return 1;
                }
                if (r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH || r == NVML_ERROR_FUNCTION_NOT_FOUND) {
                        nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
                        r = n->s.nvmlDeviceGetGpuInstanceProfileInfoV(dev, profile, &v2);
                        if (r == NVML_SUCCESS) {
                                *q = (struct gi_query){v2.id, v2.sliceCount, v2.instanceCount, v2.memorySizeMB,
                                                       v2.multiprocessorCount, v2.copyEngineCount,
                                                       v2.decoderCount, v2.encoderCount, v2.jpegCount,
                                                       v2.ofaCount, ""};
                                copy_str(q->name, sizeof(q->name), v2.name);
                                return 1;
                        }
                }
                if (r != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
                        goto verdict;
        }
        nvmlGpuInstanceProfileInfo_t v1 = {0};
        r = n->s.nvmlDeviceGetGpuInstanceProfileInfo(dev, profile, &v1);
        if (r == NVML_SUCCESS) {
                *q = (struct gi_query){v1.id, v1.sliceCount, v1.instanceCount, v1.memorySizeMB,
                                       v1.multiprocessorCount, v1.copyEngineCount, v1.decoderCount,
                                       v1.encoderCount, v1.jpegCount, v1.ofaCount, ""};
                return 1;
        }
verdict:
        if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                return 0;
        return nvml_fail(n, e, r, "GPU %u: failed to query GPU instance profile %u", gpu, profile);
}

static int query_gi_placements(struct mk_nvml *n, nvmlDevice_t dev, unsigned gpu, struct mk_gi_profile *p,
                               struct mk_error *e) {
        unsigned count = 0;
        nvmlReturn_t r = n->s.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, p->id, NULL, &count);
        if (r == NVML_ERROR_NOT_SUPPORTED) /* older drivers with MIG disabled */
                return 0;
        if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
                return nvml_fail(n, e, r, "GPU %u: failed to count placements of profile %s", gpu, p->name);
        if (count == 0)
                return 0;
        if (count > 64)
                return mk_error_set(e, -EPROTO, "GPU %u: NVML reports %u placements for profile %s", gpu, count,
                                    p->name);
        nvmlGpuInstancePlacement_t pl[64];
        r = n->s.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, p->id, pl, &count);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to list placements of profile %s", gpu, p->name);
        p->placements = calloc(count, sizeof(*p->placements));
        if (!p->placements)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (unsigned i = 0; i < count && i < 64; i++)
                p->placements[i] = (struct mk_placement){pl[i].start, pl[i].size};
        p->n_placements = count;
        return 0;
}

/* Compute-instance profiles of a GI profile as NVML reports them on a live GI
 * of that profile. Returns the number found (0 when none), negative on error. */
static int query_ci_profiles(struct mk_nvml *n, nvmlGpuInstance_t gi, const struct mk_gpu *g,
                             struct mk_gi_profile *p, struct mk_error *e) {
        struct mk_ci_profile *list = NULL;
        size_t n_list = 0;
        for (unsigned ce = 0; ce < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ce++) {
                nvmlComputeInstanceProfileInfo_t info = {0};
                nvmlReturn_t r = n->s.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, ce, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS) {
                        free(list);
                        return nvml_fail(n, e, r, "GPU %u: failed to query compute instance profile %u of %s",
                                         g->index, ce, p->name);
                }
                /* Enums 7 and 8 repeat the slice counts of 0 and 4; keep the first
                 * profile with a given driver id. */
                bool dup = false;
                for (size_t i = 0; i < n_list; i++)
                        dup = dup || list[i].id == info.id;
                if (dup)
                        continue;
                struct mk_ci_profile *nl = realloc(list, (n_list + 1) * sizeof(*list));
                if (!nl) {
                        free(list);
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                }
                list = nl;
                struct mk_ci_profile *c = &list[n_list++];
                *c = (struct mk_ci_profile){.nvml_enum = ce,
                                            .id = info.id,
                                            .slices = info.sliceCount,
                                            .max_count = info.instanceCount,
                                            .multiprocessors = info.multiprocessorCount,
                                            .queried = true};
                struct mk_profile_name nm;
                if (mk_profile_name_from_nvml(p->nvml_enum, ce, p->memory_mib, g->memory_total_bytes, &nm) >= 0)
                        (void) mk_profile_name_format(&nm, c->name, sizeof(c->name));
                if (n->s.nvmlGpuInstanceGetComputeInstancePossiblePlacements) {
                        nvmlComputeInstancePlacement_t pl[16];
                        unsigned count = ELEMENTSOF(pl);
                        r = n->s.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, info.id, pl, &count);
                        if (r == NVML_SUCCESS && count > 0 && count <= ELEMENTSOF(pl)) {
                                c->placements = calloc(count, sizeof(*c->placements));
                                if (c->placements) {
                                        for (unsigned i = 0; i < count; i++)
                                                c->placements[i] = (struct mk_placement){pl[i].start, pl[i].size};
                                        c->n_placements = count;
                                }
                        }
                }
        }
        p->ci_profiles = list;
        p->n_ci_profiles = n_list;
        return (int) n_list;
}

/* Without a live GI, NVML cannot list compute-instance profiles; derive the
 * sizes with upstream's rule (go-nvlib v0.12 pkg/nvlib/device/mig_profile.go) and mark them derived. */
static int derive_ci_profiles(const struct mk_gpu *g, struct mk_gi_profile *p, struct mk_error *e) {
        struct mk_ci_profile *list = calloc(NVML_COMPUTE_INSTANCE_PROFILE_COUNT, sizeof(*list));
        if (!list)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t n_list = 0;
        /* Enums 0..6 only: 7 and 8 duplicate sizes and fail on most GPUs. */
        for (unsigned ce = 0; ce <= NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE; ce++) {
                unsigned c = mk_ci_enum_slices(ce);
                if (c == 0 || !mk_ci_size_offered(c, p->slices))
                        continue;
                struct mk_ci_profile *cp = &list[n_list++];
                *cp = (struct mk_ci_profile){.nvml_enum = ce, .id = UINT32_MAX, .slices = c};
                struct mk_profile_name nm;
                if (mk_profile_name_from_nvml(p->nvml_enum, ce, p->memory_mib, g->memory_total_bytes, &nm) >= 0)
                        (void) mk_profile_name_format(&nm, cp->name, sizeof(cp->name));
        }
        p->ci_profiles = list;
        p->n_ci_profiles = n_list;
        return 0;
}

static int add_gi(struct mk_gpu *g, const struct mk_gi *gi) {
        struct mk_gi *l = realloc(g->gis, (g->n_gis + 1) * sizeof(*l));
        if (!l)
                return -ENOMEM;
        g->gis = l;
        g->gis[g->n_gis++] = *gi;
        return 0;
}

static int cmp_gi(const void *a, const void *b) {
        const struct mk_gi *x = a, *y = b;
        if (x->placement.start != y->placement.start)
                return x->placement.start < y->placement.start ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_ci(const void *a, const void *b) {
        const struct mk_ci *x = a, *y = b;
        if (x->placement.start != y->placement.start)
                return x->placement.start < y->placement.start ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

/* Lists the compute instances of one live GI into `out`. */
static int read_cis(struct mk_nvml *n, nvmlGpuInstance_t gih, struct mk_gpu *g, const struct mk_gi_profile *p,
                    struct mk_gi *out, struct mk_error *e) {
        for (size_t k = 0; k < p->n_ci_profiles; k++) {
                const struct mk_ci_profile *cp = &p->ci_profiles[k];
                if (!cp->queried)
                        continue;
                nvmlComputeInstance_t cis[16];
                unsigned count = ELEMENTSOF(cis);
                nvmlReturn_t r = n->s.nvmlGpuInstanceGetComputeInstances(gih, cp->id, cis, &count);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NOT_FOUND)
                        continue;
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, e, r, "GPU %u: failed to list compute instances of GPU instance %u",
                                         g->index, out->id);
                for (unsigned c = 0; c < count && c < ELEMENTSOF(cis); c++) {
                        nvmlComputeInstanceInfo_t info = {0};
                        r = n->s.nvmlComputeInstanceGetInfo_v2(cis[c], &info);
                        if (r != NVML_SUCCESS)
                                return nvml_fail(n, e, r, "GPU %u: failed to read a compute instance of GPU instance %u",
                                                 g->index, out->id);
                        struct mk_ci *l = realloc(out->cis, (out->n_cis + 1) * sizeof(*l));
                        if (!l)
                                return mk_error_set(e, -ENOMEM, "Out of memory");
                        out->cis = l;
                        struct mk_ci *ci = &out->cis[out->n_cis++];
                        *ci = (struct mk_ci){.id = info.id,
                                             .profile_id = info.profileId,
                                             .nvml_enum = cp->nvml_enum,
                                             .slices = cp->slices,
                                             .placement = {info.placement.start, info.placement.size},
                                             .mig_index = UINT32_MAX};
                        copy_str(ci->name, sizeof(ci->name), cp->name);
                }
        }
        if (out->n_cis > 1)
                qsort(out->cis, out->n_cis, sizeof(*out->cis), cmp_ci);
        return 0;
}

/* Matches MIG device handles (by GI and CI id) to the compute instances to
 * learn their UUIDs. Slots may have gaps (NVML_ERROR_NOT_FOUND). */
static int read_mig_uuids(struct mk_nvml *n, nvmlDevice_t dev, struct mk_gpu *g, struct mk_error *e) {
        unsigned max = 0;
        nvmlReturn_t r = n->s.nvmlDeviceGetMaxMigDeviceCount(dev, &max);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the MIG device count", g->index);
        for (unsigned i = 0; i < max && i < 64; i++) {
                nvmlDevice_t mig;
                r = n->s.nvmlDeviceGetMigDeviceHandleByIndex(dev, i, &mig);
                if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, e, r, "GPU %u: failed to get MIG device %u", g->index, i);
                unsigned gi_id, ci_id;
                char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
                r = n->s.nvmlDeviceGetGpuInstanceId(mig, &gi_id);
                if (r == NVML_SUCCESS)
                        r = n->s.nvmlDeviceGetComputeInstanceId(mig, &ci_id);
                if (r == NVML_SUCCESS)
                        r = n->s.nvmlDeviceGetUUID(mig, uuid, sizeof(uuid));
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, e, r, "GPU %u: failed to identify MIG device %u", g->index, i);
                for (size_t a = 0; a < g->n_gis; a++) {
                        if (g->gis[a].id != gi_id)
                                continue;
                        for (size_t b = 0; b < g->gis[a].n_cis; b++)
                                if (g->gis[a].cis[b].id == ci_id) {
                                        copy_str(g->gis[a].cis[b].uuid, sizeof(g->gis[a].cis[b].uuid), uuid);
                                        g->gis[a].cis[b].mig_index = i;
                                }
                }
        }
        return 0;
}

static int read_instances(struct mk_nvml *n, nvmlDevice_t dev, struct mk_gpu *g, struct mk_error *e) {
        for (size_t i = 0; i < g->n_profiles; i++) {
                struct mk_gi_profile *p = &g->profiles[i];
                unsigned cap = p->max_count > 0 && p->max_count <= 64 ? p->max_count : 64;
                nvmlGpuInstance_t gis[64];
                unsigned count = cap;
                nvmlReturn_t r = n->s.nvmlDeviceGetGpuInstances(dev, p->id, gis, &count);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NOT_FOUND)
                        continue;
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, e, r, "GPU %u: failed to list GPU instances of profile %s", g->index,
                                         p->name);
                for (unsigned k = 0; k < count && k < cap; k++) {
                        nvmlGpuInstanceInfo_t info = {0};
                        r = n->s.nvmlGpuInstanceGetInfo(gis[k], &info);
                        if (r != NVML_SUCCESS)
                                return nvml_fail(n, e, r, "GPU %u: failed to read a GPU instance of profile %s",
                                                 g->index, p->name);
                        /* A live GI is where NVML tells the real CI profiles. */
                        if (p->n_ci_profiles == 0 || !p->ci_profiles[0].queried) {
                                struct mk_ci_profile *old = p->ci_profiles;
                                size_t n_old = p->n_ci_profiles;
                                p->ci_profiles = NULL;
                                p->n_ci_profiles = 0;
                                int q = query_ci_profiles(n, gis[k], g, p, e);
                                if (q < 0) {
                                        free(old);
                                        return q;
                                }
                                if (q == 0) { /* keep the derived list */
                                        free(p->ci_profiles);
                                        p->ci_profiles = old;
                                        p->n_ci_profiles = n_old;
                                } else
                                        free(old);
                        }
                        struct mk_gi gi = {.id = info.id,
                                           .profile_id = info.profileId,
                                           .nvml_enum = p->nvml_enum,
                                           .placement = {info.placement.start, info.placement.size}};
                        int q = read_cis(n, gis[k], g, p, &gi, e);
                        if (q >= 0 && add_gi(g, &gi) < 0)
                                q = mk_error_set(e, -ENOMEM, "Out of memory");
                        if (q < 0) {
                                free(gi.cis);
                                return q;
                        }
                }
        }
        if (g->n_gis > 1)
                qsort(g->gis, g->n_gis, sizeof(*g->gis), cmp_gi);
        return read_mig_uuids(n, dev, g, e);
}

static int read_profiles(struct mk_nvml *n, nvmlDevice_t dev, struct mk_gpu *g, struct mk_error *e) {
        g->profiles = calloc(NVML_GPU_INSTANCE_PROFILE_COUNT, sizeof(*g->profiles));
        if (!g->profiles)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (unsigned pe = 0; pe < NVML_GPU_INSTANCE_PROFILE_COUNT; pe++) {
                struct gi_query q;
                int r = query_gi_profile(n, dev, g->index, pe, &q, e);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                struct mk_gi_profile *p = &g->profiles[g->n_profiles++];
                *p = (struct mk_gi_profile){.nvml_enum = pe,
                                            .id = q.id,
                                            .slices = q.slices,
                                            .max_count = q.max_count,
                                            .memory_mib = q.memory_mib,
                                            .multiprocessors = q.sms,
                                            .copy_engines = q.ce,
                                            .decoders = q.dec,
                                            .encoders = q.enc,
                                            .jpegs = q.jpeg,
                                            .ofas = q.ofa};
                if (mk_profile_name_from_nvml(pe, MK_CI_ENUM_FULL, q.memory_mib, g->memory_total_bytes, &p->pname) >=
                            0 &&
                    mk_profile_name_format(&p->pname, p->name, sizeof(p->name)) >= 0)
                        p->named = true;
                else {
                        /* An enum the naming rules do not cover (e.g. 3_SLICE_GFX):
                         * keep it, with NVML's own name, instead of aborting. */
                        const char *nv = strncmp(q.name, "MIG ", 4) == 0 ? q.name + 4 : q.name;
                        copy_str(p->name, sizeof(p->name), *nv ? nv : "unnamed");
                        log_debug_area("nvml", "GPU %u: profile enum %u has no derivable name, using '%s'",
                                       g->index, pe, p->name);
                }
                r = query_gi_placements(n, dev, g->index, p, e);
                if (r < 0)
                        return r;
                for (size_t k = 0; k < p->n_placements; k++)
                        g->memory_units = MAX(g->memory_units, p->placements[k].start + p->placements[k].size);
                r = derive_ci_profiles(g, p, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int read_gpu(struct mk_nvml *n, unsigned index, struct mk_gpu *g, struct mk_error *e) {
        nvmlDevice_t dev;
        nvmlReturn_t r = n->s.nvmlDeviceGetHandleByIndex_v2(index, &dev);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to get a handle", index);
        g->index = index;

        char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        r = n->s.nvmlDeviceGetName(dev, buf, sizeof(buf));
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the name", index);
        copy_str(g->name, sizeof(g->name), buf);
        char ubuf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        r = n->s.nvmlDeviceGetUUID(dev, ubuf, sizeof(ubuf));
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the UUID", index);
        copy_str(g->uuid, sizeof(g->uuid), ubuf);

        nvmlPciInfo_t pci = {0};
        r = n->s.nvmlDeviceGetPciInfo_v3(dev, &pci);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read PCI information", index);
        copy_str(g->bus_id, sizeof(g->bus_id), pci.busId);
        g->pci_device_id = pci.pciDeviceId;
        g->pci_subsystem_id = pci.pciSubSystemId;

        r = n->s.nvmlDeviceGetMinorNumber(dev, &g->minor);
        if (r != NVML_SUCCESS) {
                log_debug_area("nvml", "GPU %u: no minor number (%s), ignoring", index, nvml_strerror(n, r));
                g->minor = UINT32_MAX;
        }

        nvmlMemory_t mem = {0};
        r = n->s.nvmlDeviceGetMemoryInfo(dev, &mem);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read memory information", index);
        g->memory_total_bytes = mem.total;

        r = n->s.nvmlDeviceGetCudaComputeCapability(dev, &g->cc_major, &g->cc_minor);
        if (r != NVML_SUCCESS)
                g->cc_major = g->cc_minor = -1;
        g->architecture = NVML_DEVICE_ARCH_UNKNOWN;
        if (n->s.nvmlDeviceGetArchitecture) {
                nvmlDeviceArchitecture_t arch;
                if (n->s.nvmlDeviceGetArchitecture(dev, &arch) == NVML_SUCCESS)
                        g->architecture = arch;
        }

        unsigned cur = 0, pend = 0;
        r = n->s.nvmlDeviceGetMigMode(dev, &cur, &pend);
        if (r == NVML_ERROR_NOT_SUPPORTED) {
                g->mig_capable = false;
                g->mig_current = g->mig_pending = MK_MIG_UNSUPPORTED;
                return 0;
        }
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the MIG mode", index);
        g->mig_capable = true;
        g->mig_current = cur == NVML_DEVICE_MIG_ENABLE ? MK_MIG_ENABLED : MK_MIG_DISABLED;
        g->mig_pending = pend == NVML_DEVICE_MIG_ENABLE ? MK_MIG_ENABLED : MK_MIG_DISABLED;

        int q = read_profiles(n, dev, g, e);
        if (q < 0)
                return q;
        if (g->mig_current == MK_MIG_ENABLED) {
                q = read_instances(n, dev, g, e);
                if (q < 0)
                        return q;
        }
        return 0;
}

/* NvLinks of GPU `i`: counts of direct links to each other GPU (by bus id)
 * into direct[0..n_gpus), and links to NVSwitch chips into *ret_switch.
 * Links the GPU lacks answer NOT_SUPPORTED (skipped, as go-gpuallocator
 * does); INVALID_ARGUMENT ends the walk (a library with fewer links than
 * NVML_NVLINK_MAX_LINKS). Other failures: negative errno. */
static int read_gpu_links(struct mk_nvml *n, const struct mk_snapshot *s, nvmlDevice_t dev, size_t i,
                          unsigned *direct, unsigned *ret_switch) {
        unsigned sw = 0;
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
                nvmlEnableState_t active = NVML_FEATURE_DISABLED;
                nvmlReturn_t r = n->s.nvmlDeviceGetNvLinkState(dev, l, &active);
                if (r == NVML_ERROR_NOT_SUPPORTED)
                        continue;
                if (r == NVML_ERROR_INVALID_ARGUMENT)
                        break;
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, NULL, r, "GPU %zu: NvLink %u state", i, l);
                if (active != NVML_FEATURE_ENABLED)
                        continue;
                if (n->s.nvmlDeviceGetNvLinkRemoteDeviceType) {
                        nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
                        r = n->s.nvmlDeviceGetNvLinkRemoteDeviceType(dev, l, &type);
                        if (r == NVML_SUCCESS && type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                                sw++;
                                continue;
                        }
                        if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED)
                                return nvml_fail(n, NULL, r, "GPU %zu: NvLink %u remote device type", i, l);
                }
                nvmlPciInfo_t pci = {0};
                r = n->s.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev, l, &pci);
                if (r == NVML_ERROR_NOT_SUPPORTED)
                        continue;
                if (r != NVML_SUCCESS)
                        return nvml_fail(n, NULL, r, "GPU %zu: NvLink %u remote PCI information", i, l);
                /* The peer by bus id, as go-gpuallocator matches it; from the
                 * fields too, in case a driver fills only those. */
                char fields[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
                pci.busId[sizeof(pci.busId) - 1] = 0;
                snprintf(fields, sizeof(fields), "%08X:%02X:%02X.0", pci.domain, pci.bus, pci.device);
                for (size_t j = 0; j < s->n_gpus; j++)
                        if (j != i && (strcasecmp(pci.busId, s->gpus[j].bus_id) == 0 ||
                                       strcasecmp(fields, s->gpus[j].bus_id) == 0))
                                direct[j]++;
        }
        *ret_switch = sw;
        return 0;
}

/* Fills s->nvlinks and s->pcie_level when the library can tell; each stays
 * NULL otherwise (older libraries, NOT_SUPPORTED, a failing query). Never
 * fails the snapshot: the interconnect only ranks allocations. */
static void read_topology(struct mk_nvml *n, struct mk_snapshot *s) {
        size_t g = s->n_gpus;
        if (g == 0)
                return;
        _cleanup_free_ nvmlDevice_t *devs = calloc(g, sizeof(*devs));
        _cleanup_free_ unsigned *links = calloc(g * g, sizeof(*links));
        _cleanup_free_ unsigned *level = calloc(g * g, sizeof(*level));
        _cleanup_free_ unsigned *sw = calloc(g, sizeof(*sw));
        if (!devs || !links || !level || !sw)
                return;
        for (size_t i = 0; i < g; i++)
                if (n->s.nvmlDeviceGetHandleByIndex_v2((unsigned) i, &devs[i]) != NVML_SUCCESS)
                        return;

        bool have_links = n->s.nvmlDeviceGetNvLinkState && n->s.nvmlDeviceGetNvLinkRemotePciInfo_v2;
        for (size_t i = 0; i < g && have_links; i++)
                if (read_gpu_links(n, s, devs[i], i, &links[i * g], &sw[i]) < 0)
                        have_links = false;
        if (have_links) {
                /* NVSwitch: every GPU with switch links reaches every other
                 * one; the pair gets the links the poorer side has. */
                for (size_t i = 0; i < g; i++)
                        for (size_t j = 0; j < g; j++)
                                if (i != j && sw[i] > 0 && sw[j] > 0)
                                        links[i * g + j] += MIN(sw[i], sw[j]);
                s->nvlinks = TAKE_PTR(links);
        }

        bool have_level = n->s.nvmlDeviceGetTopologyCommonAncestor != NULL;
        for (size_t i = 0; i < g && have_level; i++)
                for (size_t j = i + 1; j < g && have_level; j++) {
                        nvmlGpuTopologyLevel_t lv = NVML_TOPOLOGY_SYSTEM;
                        nvmlReturn_t r = n->s.nvmlDeviceGetTopologyCommonAncestor(devs[i], devs[j], &lv);
                        if (r != NVML_SUCCESS) {
                                log_debug_area("nvml", "GPUs %zu and %zu: no common PCIe ancestor (%s), ignoring",
                                               i, j, mk_nvml_return_name(r));
                                have_level = false;
                        }
                        level[i * g + j] = level[j * g + i] = (unsigned) lv;
                }
        if (have_level) {
                for (size_t i = 0; i < g; i++)
                        level[i * g + i] = NVML_TOPOLOGY_INTERNAL;
                s->pcie_level = TAKE_PTR(level);
        }
}

int mk_nvml_snapshot(struct mk_nvml *n, struct mk_snapshot **ret, struct mk_error *e) {
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = calloc(1, sizeof(*s));
        if (!s)
                return mk_error_set(e, -ENOMEM, "Out of memory");

        nvmlReturn_t r = n->s.nvmlSystemGetDriverVersion(s->driver_version, sizeof(s->driver_version));
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "Failed to read the driver version");
        r = n->s.nvmlSystemGetNVMLVersion(s->nvml_version, sizeof(s->nvml_version));
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "Failed to read the NVML version");
        int cuda = 0;
        if (n->s.nvmlSystemGetCudaDriverVersion && n->s.nvmlSystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS &&
            cuda > 0)
                s->cuda_driver_version = (unsigned) cuda;
        s->driver_version[sizeof(s->driver_version) - 1] = 0;
        s->nvml_version[sizeof(s->nvml_version) - 1] = 0;

        unsigned count = 0;
        r = n->s.nvmlDeviceGetCount_v2(&count);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "Failed to count GPUs");
        if (count > 256)
                return mk_error_set(e, -EPROTO, "NVML reports %u GPUs; refusing more than 256", count);
        if (count > 0) {
                s->gpus = calloc(count, sizeof(*s->gpus));
                if (!s->gpus)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        for (unsigned i = 0; i < count; i++) {
                s->n_gpus = i + 1; /* so that cleanup frees what is partly filled */
                int q = read_gpu(n, i, &s->gpus[i], e);
                if (q < 0)
                        return q;
        }
        read_topology(n, s);
        *ret = TAKE_PTR(s);
        return 0;
}

unsigned long mk_nvml_mutations(const struct mk_nvml *n) {
        return __atomic_load_n(&n->mutations, __ATOMIC_RELAXED);
}

static void count_mutation(struct mk_nvml *n) {
        __atomic_add_fetch(&n->mutations, 1, __ATOMIC_RELAXED);
}

static int get_device(struct mk_nvml *n, unsigned gpu, nvmlDevice_t *ret, struct mk_error *e) {
        nvmlReturn_t r = n->s.nvmlDeviceGetHandleByIndex_v2(gpu, ret);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to get a handle", gpu);
        return 0;
}

static int get_gi(struct mk_nvml *n, unsigned gpu, unsigned gi_id, nvmlGpuInstance_t *ret, struct mk_error *e) {
        nvmlDevice_t dev;
        int q = get_device(n, gpu, &dev, e);
        if (q < 0)
                return q;
        nvmlReturn_t r = n->s.nvmlDeviceGetGpuInstanceById(dev, gi_id, ret);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to find GPU instance %u", gpu, gi_id);
        return 0;
}

int mk_nvml_mig_mode(struct mk_nvml *n, unsigned gpu, enum mk_mig_mode *ret, struct mk_error *e) {
        nvmlDevice_t dev;
        int q = get_device(n, gpu, &dev, e);
        if (q < 0)
                return q;
        unsigned cur = 0, pend = 0;
        nvmlReturn_t r = n->s.nvmlDeviceGetMigMode(dev, &cur, &pend);
        if (r == NVML_ERROR_NOT_SUPPORTED) {
                *ret = MK_MIG_UNSUPPORTED;
                return 0;
        }
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the MIG mode", gpu);
        *ret = cur == NVML_DEVICE_MIG_ENABLE ? MK_MIG_ENABLED : MK_MIG_DISABLED;
        return 0;
}

int mk_nvml_set_mig_mode(struct mk_nvml *n, unsigned gpu, bool enabled, bool *ret_pending, struct mk_error *e) {
        nvmlDevice_t dev;
        int q = get_device(n, gpu, &dev, e);
        if (q < 0)
                return q;
        nvmlReturn_t activation = NVML_SUCCESS;
        count_mutation(n);
        nvmlReturn_t r = n->s.nvmlDeviceSetMigMode(dev, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE,
                                                   &activation);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to %s MIG mode", gpu, enabled ? "enable" : "disable");
        unsigned cur = 0, pend = 0;
        r = n->s.nvmlDeviceGetMigMode(dev, &cur, &pend);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the MIG mode", gpu);
        bool want = enabled;
        bool pending = (cur == NVML_DEVICE_MIG_ENABLE) != want;
        log_debug_area("nvml", "GPU %u: set MIG mode %s: activation %s, current %u pending %u", gpu,
                       enabled ? "on" : "off", mk_nvml_return_name(activation), cur, pend);
        *ret_pending = pending;
        return 0;
}

int mk_nvml_set_compute_mode(struct mk_nvml *n, unsigned gpu, unsigned mode, struct mk_error *e) {
        if (!n->s.nvmlDeviceSetComputeMode || !n->s.nvmlDeviceGetComputeMode)
                return mk_error_set(e, -EOPNOTSUPP, "GPU %u: NVML has no nvmlDeviceSetComputeMode", gpu);
        nvmlDevice_t dev;
        int q = get_device(n, gpu, &dev, e);
        if (q < 0)
                return q;
        count_mutation(n);
        nvmlReturn_t r = n->s.nvmlDeviceSetComputeMode(dev, (nvmlComputeMode_t) mode);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to set compute mode %u", gpu, mode);
        nvmlComputeMode_t got = NVML_COMPUTEMODE_DEFAULT;
        r = n->s.nvmlDeviceGetComputeMode(dev, &got);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the compute mode", gpu);
        if ((unsigned) got != mode)
                return mk_error_set(e, -EIO, "GPU %u: compute mode is %u after setting %u", gpu, (unsigned) got, mode);
        log_debug_area("nvml", "GPU %u: compute mode %u", gpu, mode);
        return 0;
}

int mk_nvml_create_gi(struct mk_nvml *n, unsigned gpu, unsigned profile_id, struct mk_placement placement,
                      unsigned *ret_gi_id, struct mk_error *e) {
        nvmlDevice_t dev;
        int q = get_device(n, gpu, &dev, e);
        if (q < 0)
                return q;
        nvmlGpuInstancePlacement_t pl = {placement.start, placement.size};
        nvmlGpuInstance_t gi;
        count_mutation(n);
        nvmlReturn_t r = n->s.nvmlDeviceCreateGpuInstanceWithPlacement(dev, profile_id, &pl, &gi);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to create a GPU instance of profile %u at %u:%u", gpu,
                                 profile_id, placement.start, placement.size);
        nvmlGpuInstanceInfo_t info = {0};
        r = n->s.nvmlGpuInstanceGetInfo(gi, &info);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the new GPU instance", gpu);
        *ret_gi_id = info.id;
        return 0;
}

int mk_nvml_ci_profile_id(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_enum, unsigned *ret_id,
                          struct mk_error *e) {
        nvmlGpuInstance_t gi;
        int q = get_gi(n, gpu, gi_id, &gi, e);
        if (q < 0)
                return q;
        nvmlComputeInstanceProfileInfo_t info = {0};
        nvmlReturn_t r = n->s.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, ci_enum, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: GPU instance %u has no compute instance profile %u", gpu, gi_id,
                                 ci_enum);
        *ret_id = info.id;
        return 0;
}

int mk_nvml_create_ci(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_profile_id,
                      struct mk_placement placement, unsigned *ret_ci_id, struct mk_error *e) {
        nvmlGpuInstance_t gi;
        int q = get_gi(n, gpu, gi_id, &gi, e);
        if (q < 0)
                return q;
        nvmlComputeInstance_t ci;
        nvmlReturn_t r;
        count_mutation(n);
        if (n->s.nvmlGpuInstanceCreateComputeInstanceWithPlacement) {
                nvmlComputeInstancePlacement_t pl = {placement.start, placement.size};
                r = n->s.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, ci_profile_id, &pl, &ci);
        } else
                r = n->s.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile_id, &ci);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r,
                                 "GPU %u: failed to create a compute instance of profile %u at %u:%u in GPU instance %u",
                                 gpu, ci_profile_id, placement.start, placement.size, gi_id);
        nvmlComputeInstanceInfo_t info = {0};
        r = n->s.nvmlComputeInstanceGetInfo_v2(ci, &info);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read the new compute instance", gpu);
        *ret_ci_id = info.id;
        return 0;
}

int mk_nvml_destroy_ci(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e) {
        nvmlGpuInstance_t gi;
        int q = get_gi(n, gpu, gi_id, &gi, e);
        if (q < 0)
                return q;
        nvmlComputeInstance_t ci;
        nvmlReturn_t r = n->s.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &ci);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to find compute instance %u of GPU instance %u", gpu, ci_id,
                                 gi_id);
        count_mutation(n);
        r = n->s.nvmlComputeInstanceDestroy(ci);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to destroy compute instance %u of GPU instance %u", gpu,
                                 ci_id, gi_id);
        return 0;
}

int mk_nvml_destroy_gi(struct mk_nvml *n, unsigned gpu, unsigned gi_id, struct mk_error *e) {
        nvmlGpuInstance_t gi;
        int q = get_gi(n, gpu, gi_id, &gi, e);
        if (q < 0)
                return q;
        count_mutation(n);
        nvmlReturn_t r = n->s.nvmlGpuInstanceDestroy(gi);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to destroy GPU instance %u", gpu, gi_id);
        return 0;
}

/* ---- events ---- */

struct mk_nvml_events {
        struct mk_nvml *n;
        nvmlEventSet_t set;
        size_t n_gpus;
        nvmlDevice_t *devs;   /* NULL where no handle */
        int *status;          /* per GPU: 0 registered, negative errno otherwise */
};

struct mk_nvml_events *mk_nvml_events_close(struct mk_nvml_events *ev) {
        if (!ev)
                return NULL;
        if (ev->set)
                (void) ev->n->s.nvmlEventSetFree(ev->set);
        free(ev->devs);
        free(ev->status);
        free(ev);
        return NULL;
}

int mk_nvml_events_open(struct mk_nvml *n, const struct mk_snapshot *s, struct mk_nvml_events **ret,
                        struct mk_error *e) {
        if (!n->s.nvmlEventSetCreate || !n->s.nvmlDeviceRegisterEvents || !n->s.nvmlEventSetWait_v2 ||
            !n->s.nvmlEventSetFree)
                return mk_error_set(e, -EOPNOTSUPP, "The NVML library '%s' has no event API", n->path);

        _cleanup_(mk_nvml_events_closep) struct mk_nvml_events *ev = calloc(1, sizeof(*ev));
        if (!ev)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        ev->n = n;
        ev->n_gpus = s->n_gpus;
        ev->devs = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*ev->devs));
        ev->status = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*ev->status));
        if (!ev->devs || !ev->status)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        nvmlReturn_t r = n->s.nvmlEventSetCreate(&ev->set);
        if (r != NVML_SUCCESS) {
                ev->set = NULL;
                return nvml_fail(n, e, r, "Failed to create an NVML event set");
        }
        for (size_t i = 0; i < s->n_gpus; i++) {
                unsigned idx = s->gpus[i].index;
                nvmlDevice_t dev;
                r = n->s.nvmlDeviceGetHandleByIndex_v2(idx, &dev);
                if (r != NVML_SUCCESS) {
                        ev->status[i] = nvml_fail(n, NULL, r, "GPU %u: failed to get a handle for events", idx);
                        continue;
                }
                /* As upstream: Xid and ECC, masked with what the GPU supports. */
                unsigned long long want = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                                          nvmlEventTypeSingleBitEccError;
                unsigned long long supported = nvmlEventTypeXidCriticalError;
                if (n->s.nvmlDeviceGetSupportedEventTypes) {
                        r = n->s.nvmlDeviceGetSupportedEventTypes(dev, &supported);
                        if (r != NVML_SUCCESS) {
                                ev->status[i] = nvml_fail(n, NULL, r, "GPU %u: failed to read supported events",
                                                          idx);
                                continue;
                        }
                }
                if ((want & supported) == 0) {
                        ev->status[i] = -EOPNOTSUPP;
                        continue;
                }
                r = n->s.nvmlDeviceRegisterEvents(dev, want & supported, ev->set);
                if (r != NVML_SUCCESS) {
                        ev->status[i] = nvml_fail(n, NULL, r, "GPU %u: failed to register for events", idx);
                        continue;
                }
                ev->devs[i] = dev;
        }
        *ret = TAKE_PTR(ev);
        return 0;
}

int mk_nvml_events_gpu_status(const struct mk_nvml_events *ev, size_t i) {
        return i < ev->n_gpus ? ev->status[i] : -ENODEV;
}

int mk_nvml_events_wait(struct mk_nvml_events *ev, unsigned timeout_ms, struct mk_nvml_event *ret,
                        struct mk_error *e) {
        struct mk_nvml *n = ev->n;
        nvmlEventData_t data = {0};
        nvmlReturn_t r = n->s.nvmlEventSetWait_v2(ev->set, &data, timeout_ms);
        if (r == NVML_ERROR_TIMEOUT)
                return 0;
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "Failed to wait for NVML events");

        unsigned gpu = UINT32_MAX;
        for (size_t i = 0; i < ev->n_gpus && gpu == UINT32_MAX; i++)
                if (ev->devs[i] && ev->devs[i] == data.device)
                        gpu = (unsigned) i;
        if (gpu == UINT32_MAX && data.device) {
                unsigned idx;
                if (n->s.nvmlDeviceGetIndex(data.device, &idx) == NVML_SUCCESS && idx < ev->n_gpus)
                        gpu = idx;
        }
        *ret = (struct mk_nvml_event){.gpu = gpu,
                                      .type = data.eventType,
                                      .xid = data.eventData,
                                      .gi_id = data.gpuInstanceId,
                                      .ci_id = data.computeInstanceId};
        return 1;
}

int mk_nvml_device_check(struct mk_nvml *n, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e) {
        nvmlDevice_t dev;
        nvmlReturn_t r = n->s.nvmlDeviceGetHandleByIndex_v2(gpu, &dev);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to get a handle", gpu);
        nvmlMemory_t mem;
        r = n->s.nvmlDeviceGetMemoryInfo(dev, &mem);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to read memory information", gpu);
        if (gi_id == UINT32_MAX)
                return 0;
        nvmlGpuInstance_t gi;
        r = n->s.nvmlDeviceGetGpuInstanceById(dev, gi_id, &gi);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to find GPU instance %u", gpu, gi_id);
        if (ci_id == UINT32_MAX)
                return 0;
        nvmlComputeInstance_t ci;
        r = n->s.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &ci);
        if (r != NVML_SUCCESS)
                return nvml_fail(n, e, r, "GPU %u: failed to find compute instance %u of GPU instance %u", gpu,
                                 ci_id, gi_id);
        return 0;
}
