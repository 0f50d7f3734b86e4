/* Soft slices in the device plugin's dynamic mode (soft.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/dynamic/soft.h"
#include "vgpunode/dirs.h"

const char *mk_dp_soft_root(const struct mk_dp_soft_options *o) {
        return o && o->root && *o->root ? o->root : MK_VGPU_DEFAULT_ROOT;
}

const char *mk_dp_soft_library(const struct mk_dp_soft_options *o, char **buf) {
        if (o && o->library && *o->library)
                return o->library;
        free(*buf);
        *buf = NULL;
        if (asprintf(buf, "%s/" MK_DP_SOFT_LIBRARY_NAME, mk_dp_soft_root(o)) < 0) {
                *buf = NULL;
                return NULL;
        }
        return *buf;
}

int mk_dp_soft_response(const struct mk_vgpu_slice *slices, size_t n, const char *host_dir, bool disable_control,
                        const struct mk_dp_soft_options *o, struct mk_dp_response *res, struct mk_error *e) {
        if (n == 0 || n > MK_VGPU_MAX_DEVICES)
                return mk_error_set(e, -EINVAL, "%zu soft slices in one container, 1 to %u", n, MK_VGPU_MAX_DEVICES);
        for (size_t i = 0; i < n; i++)
                if (slices[i].memory_mib == 0 || slices[i].cores > 100)
                        return mk_error_set(e, -EINVAL, "soft slice %zu: memory %llu MiB, cores %u (1+ MiB, 0-100)", i,
                                            (unsigned long long) slices[i].memory_mib, slices[i].cores);
        _cleanup_free_ char *libbuf = NULL, *preload = NULL;
        const char *lib = mk_dp_soft_library(o, &libbuf);
        if (!lib || asprintf(&preload, "%s/" MK_VGPU_PRELOAD_FILE, mk_dp_soft_root(o)) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        int r = 0;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                char key[64], value[32];
                snprintf(key, sizeof(key), "CUDA_DEVICE_MEMORY_LIMIT_%zu", i);
                snprintf(value, sizeof(value), "%llum", (unsigned long long) slices[i].memory_mib);
                r = mk_dp_response_set_env(res, key, value);
                if (r < 0)
                        break;
                snprintf(key, sizeof(key), "CUDA_DEVICE_SM_LIMIT_%zu", i);
                snprintf(value, sizeof(value), "%u", slices[i].cores);
                r = mk_dp_response_set_env(res, key, value);
        }
        if (r >= 0)
                r = mk_dp_response_set_env(res, "CUDA_DEVICE_MEMORY_SHARED_CACHE", MK_DP_SOFT_REGION);
        if (r >= 0)
                r = mk_dp_response_add_mount(res, MK_DP_SOFT_DIR, host_dir, false);
        if (r >= 0)
                r = mk_dp_response_add_mount(res, MK_DP_SOFT_LIBRARY, lib, true);
        if (r >= 0 && !disable_control)
                r = mk_dp_response_add_mount(res, MK_DP_SOFT_PRELOAD, preload, true);
        return r < 0 ? mk_error_set(e, r, "out of memory") : 0;
}

const json_t *mk_dp_pod_container(const json_t *pod, unsigned index) {
        const json_t *spec = json_object_get(pod, "spec");
        const json_t *init = json_object_get(spec, "initContainers");
        size_t n_init = json_is_array(init) ? json_array_size(init) : 0;
        if (index < n_init)
                return json_array_get(init, index);
        return json_array_get(json_object_get(spec, "containers"), index - n_init);
}

bool mk_dp_soft_control_disabled(const json_t *pod, unsigned index) {
        const json_t *env = json_object_get(mk_dp_pod_container(pod, index), "env");
        size_t i;
        const json_t *v;
        bool disabled = false;
        /* Kubernetes: of two entries with one name, the last one counts. */
        json_array_foreach(env, i, v) {
                const char *name = json_string_value(json_object_get(v, "name"));
                const char *value = json_string_value(json_object_get(v, "value"));
                if (name && streq(name, "CUDA_DISABLE_CONTROL"))
                        disabled = value && strcasecmp(value, "true") == 0;
        }
        return disabled;
}

static unsigned gpu_order(const struct mk_snapshot *s, const char *uuid) {
        for (size_t i = 0; s && i < s->n_gpus; i++)
                if (streq(s->gpus[i].uuid, uuid))
                        return s->gpus[i].index;
        return UINT32_MAX;
}

size_t mk_dp_soft_slices(const struct mk_claim *c, unsigned ctr, const struct mk_snapshot *s,
                         struct mk_vgpu_slice ret[MK_VGPU_MAX_DEVICES]) {
        unsigned order[MK_VGPU_MAX_DEVICES];
        size_t n = 0;
        for (size_t i = 0; i < c->n_devices && n < MK_VGPU_MAX_DEVICES; i++) {
                const struct mk_claim_device *d = &c->devices[i];
                if (d->container != ctr || d->mode != MK_CLAIM_SOFT)
                        continue;
                struct mk_vgpu_slice sl = {.gpu_uuid = d->gpu, .memory_mib = d->memory_mib, .cores = d->cores};
                unsigned o = gpu_order(s, d->gpu);
                size_t j = n++;
                for (; j > 0 && order[j - 1] > o; j--) {  /* insertion: stable, n <= 16 */
                        order[j] = order[j - 1];
                        ret[j] = ret[j - 1];
                }
                order[j] = o;
                ret[j] = sl;
        }
        return n;
}

int mk_dp_soft_prepare(const struct mk_claim *c, const json_t *pod, const struct mk_snapshot *s,
                       const struct mk_dp_soft_options *o, struct mk_error *e) {
        const char *root = mk_dp_soft_root(o);
        bool any = false;
        for (size_t i = 0; i < c->n_devices; i++) {
                unsigned ctr = c->devices[i].container;
                bool first = c->devices[i].mode == MK_CLAIM_SOFT;
                for (size_t j = 0; first && j < i; j++)
                        first = !(c->devices[j].container == ctr && c->devices[j].mode == MK_CLAIM_SOFT);
                if (!first)
                        continue;
                struct mk_vgpu_slice sl[MK_VGPU_MAX_DEVICES];
                size_t n = mk_dp_soft_slices(c, ctr, s, sl);
                const char *name = json_string_value(json_object_get(mk_dp_pod_container(pod, ctr), "name"));
                struct mk_vgpu_container vc = {.pod_uid = c->uid, .namespace = c->namespace, .name = c->name,
                                               .container = name ? name : "", .index = ctr, .slices = sl,
                                               .n_slices = n};
                int r = mk_vgpu_container_prepare(root, &vc, NULL, e);
                if (r < 0)
                        return r;
                any = true;
        }
        if (!any)
                return 0;
        _cleanup_free_ char *libbuf = NULL;
        const char *lib = mk_dp_soft_library(o, &libbuf);
        if (!lib)
                return mk_error_set(e, -ENOMEM, "out of memory");
        struct stat st;
        if (stat(lib, &st) < 0 || !S_ISREG(st.st_mode))
                return mk_error_set(e, -ENOENT,
                                    "pod %s/%s has soft slices but the library '%s' is not on this node (the node "
                                    "DaemonSet installs it; --vgpu-library)",
                                    c->namespace, c->name, lib);
        return mk_vgpu_preload_file_ensure(root, MK_DP_SOFT_LIBRARY, NULL, e);
}
