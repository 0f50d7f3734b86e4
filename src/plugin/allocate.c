/* Allocate for one container (allocate.h; k8s-device-plugin v0.20.0 internal/plugin/server.go). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "base/dynbuf.h"
#include "base/host.h"
#include "base/macro.h"
#include "plugin/allocate.h"

#define CONTAINER_DEVICES_DIR "/var/run/nvidia-container-devices"
#define MK_MAX_ALLOCATE_VALUE (1024u * 1024) /* one env or annotation value */

void mk_dp_response_done(struct mk_dp_response *r) {
        if (!r)
                return;
        for (size_t i = 0; i < r->n_envs; i++) {
                free(r->envs[i].key);
                free(r->envs[i].value);
        }
        free(r->envs);
        for (size_t i = 0; i < r->n_mounts; i++) {
                free(r->mounts[i].container_path);
                free(r->mounts[i].host_path);
        }
        free(r->mounts);
        for (size_t i = 0; i < r->n_devices; i++) {
                free(r->devices[i].container_path);
                free(r->devices[i].host_path);
                free(r->devices[i].permissions);
        }
        free(r->devices);
        for (size_t i = 0; i < r->n_annotations; i++) {
                free(r->annotations[i].key);
                free(r->annotations[i].value);
        }
        free(r->annotations);
        for (size_t i = 0; i < r->n_cdi_devices; i++)
                free(r->cdi_devices[i]);
        free(r->cdi_devices);
        *r = (struct mk_dp_response) {0};
}

const char *mk_dp_response_env(const struct mk_dp_response *r, const char *key) {
        for (size_t i = 0; r && key && i < r->n_envs; i++)
                if (streq(r->envs[i].key, key))
                        return r->envs[i].value;
        for (size_t i = 0; r && key && i < r->n_annotations; i++)
                if (streq(r->annotations[i].key, key))
                        return r->annotations[i].value;
        return NULL;
}

/* Sets (or replaces) a key in a kv list. Takes value. */
static int kv_set(struct mk_dp_kv **l, size_t *n, const char *key, char *value) {
        _cleanup_free_ char *v = value;
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < *n; i++)
                if (streq((*l)[i].key, key)) {
                        free((*l)[i].value);
                        (*l)[i].value = TAKE_PTR(v);
                        return 0;
                }
        _cleanup_free_ char *k = strdup(key);
        if (!k)
                return -ENOMEM;
        struct mk_dp_kv *m = realloc(*l, (*n + 1) * sizeof(**l));
        if (!m)
                return -ENOMEM;
        *l = m;
        m[(*n)++] = (struct mk_dp_kv) {.key = TAKE_PTR(k), .value = TAKE_PTR(v)};
        return 0;
}

static int add_mount(struct mk_dp_response *r, const char *container_path, const char *host_path, bool ro) {
        _cleanup_free_ char *c = strdup(container_path), *h = strdup(host_path);
        if (!c || !h)
                return -ENOMEM;
        struct mk_dp_mount *m = realloc(r->mounts, (r->n_mounts + 1) * sizeof(*m));
        if (!m)
                return -ENOMEM;
        r->mounts = m;
        m[r->n_mounts++] = (struct mk_dp_mount) {.container_path = TAKE_PTR(c), .host_path = TAKE_PTR(h), .read_only = ro};
        return 0;
}

int mk_dp_response_set_env(struct mk_dp_response *r, const char *key, const char *value) {
        return kv_set(&r->envs, &r->n_envs, key, strdup(value));
}

int mk_dp_response_add_mount(struct mk_dp_response *r, const char *container_path, const char *host_path, bool ro) {
        return add_mount(r, container_path, host_path, ro);
}

/* A device spec: container `path`, host <dev_root><path>, "rw". */
static int add_devspec(struct mk_dp_response *r, const char *dev_root, const char *path) {
        _cleanup_free_ char *c = strdup(path), *h = NULL, *p = strdup("rw");
        if (!c || !p || mk_path_join(dev_root, path, &h) < 0)
                return -ENOMEM;
        struct mk_dp_devspec *m = realloc(r->devices, (r->n_devices + 1) * sizeof(*m));
        if (!m)
                return -ENOMEM;
        r->devices = m;
        m[r->n_devices++] =
                (struct mk_dp_devspec) {.container_path = TAKE_PTR(c), .host_path = TAKE_PTR(h), .permissions = TAKE_PTR(p)};
        return 0;
}

static int add_cdi(struct mk_dp_response *r, char *name) {
        _cleanup_free_ char *n = name;
        if (!n)
                return -ENOMEM;
        char **m = realloc(r->cdi_devices, (r->n_cdi_devices + 1) * sizeof(*m));
        if (!m)
                return -ENOMEM;
        r->cdi_devices = m;
        m[r->n_cdi_devices++] = TAKE_PTR(n);
        return 0;
}

static char *strdup_printf(const char *fmt, ...) _printf_(1, 2);
static char *strdup_printf(const char *fmt, ...) {
        va_list ap;
        char *s = NULL;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        return n < 0 ? NULL : s;
}

/* A random (version 4) UUID for the CDI annotation key, as upstream's
 * uuid.NewString(). */
static int random_uuid(char buf[37]) {
        uint8_t b[16];
        size_t got = 0;
        while (got < sizeof(b)) {
                ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                got += (size_t) n;
        }
        b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40);
        b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80);
        snprintf(buf, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        return 0;
}

/* Is the control node /dev/<name> there (under the host's dev root)? */
static bool control_node_present(const struct mk_host *h, const char *name) {
        if (!h)
                return true;
        _cleanup_free_ char *p = NULL;
        if (mk_host_path(h, MK_HOST_DEV, name, &p) < 0)
                return false;
        struct stat st;
        return stat(p, &st) == 0;
}

static int device_specs(struct mk_dp_response *res, const struct mk_dp_device *const *req, size_t n,
                        const struct mk_dp_options *o, struct mk_error *e) {
        const char *dev_root = o->dev_root && *o->dev_root ? o->dev_root
                               : o->driver_root && *o->driver_root ? o->driver_root
                                                                    : "/";
        static const char *const control[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};
        for (size_t i = 0; i < ELEMENTSOF(control); i++) {
                if (!control_node_present(o->host, control[i]))
                        continue;
                char path[64];
                snprintf(path, sizeof(path), "/dev/%s", control[i]);
                if (add_devspec(res, dev_root, path) < 0)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        for (size_t i = 0; i < n; i++) {
                const struct mk_dp_device *d = req[i];
                char path[64];
                snprintf(path, sizeof(path), "/dev/nvidia%u", d->minor);
                if (add_devspec(res, dev_root, path) < 0)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                if (!d->mig)
                        continue;
                if (d->gi_cap < 0 || d->ci_cap < 0)
                        return mk_error_set(e, -EINVAL,
                                            "MIG device '%s' (GPU minor %u, GI %u, CI %u): no %s access capability "
                                            "in /proc/driver/nvidia-caps/mig-minors",
                                            d->base_id, d->minor, d->gi_id, d->ci_id,
                                            d->gi_cap < 0 ? "GPU instance" : "compute instance");
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", d->gi_cap);
                if (add_devspec(res, dev_root, path) < 0)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", d->ci_cap);
                if (add_devspec(res, dev_root, path) < 0)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        return 0;
}

int mk_dp_allocate(const struct mk_snapshot *s, const struct mk_dp_resource *r, const char *const *ids, size_t n_ids,
                   const struct mk_dp_options *o, struct mk_dp_response *ret, struct mk_error *e) {
        if (n_ids > MK_DP_MAX_REQUEST_IDS)
                return mk_error_set(e, -EINVAL, "invalid allocation request for '%s': %zu devices, at most %u", r->name,
                                    n_ids, MK_DP_MAX_REQUEST_IDS);
        if (n_ids == 0)
                return mk_error_set(e, -EINVAL, "invalid allocation request for '%s': no devices", r->name);
        if (r->fail_requests_greater_than_one && n_ids > 1)
                return mk_error_set(e, -EINVAL,
                                    "invalid allocation request for '%s': maximum request size for shared resources "
                                    "is 1; found %zu",
                                    r->name, n_ids);
        _cleanup_free_ const struct mk_dp_device **req = calloc(n_ids, sizeof(*req));
        if (!req)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        int q = mk_dp_resource_find_devices(r, ids, n_ids, "invalid allocation request", req, e);
        if (q < 0)
                return q;
        (void) s;
        return mk_dp_allocate_devices(req, n_ids, r->name, o, ret, e);
}

int mk_dp_allocate_devices(const struct mk_dp_device *const *req, size_t n_ids, const char *resource,
                           const struct mk_dp_options *o, struct mk_dp_response *ret, struct mk_error *e) {
        if (n_ids == 0)
                return mk_error_set(e, -EINVAL, "invalid allocation request for '%s': no devices", resource);
        _cleanup_free_ const char **rt = calloc(n_ids, sizeof(*rt)); /* runtime ids, deduplicated */
        if (!rt)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        size_t n_rt = 0;
        for (size_t i = 0; i < n_ids; i++) {
                const struct mk_dp_device *d = req[i];
                const char *v = o->id_strategy == MK_DP_ID_INDEX ? d->index : d->base_id;
                bool seen = false;
                for (size_t j = 0; j < n_rt && !seen; j++)
                        seen = streq(rt[j], v);
                if (!seen)
                        rt[n_rt++] = v;
        }

        unsigned ls = o->list_strategies ? o->list_strategies : MK_DP_LIST_ENVVAR;
        bool cdi_only = !(ls & (MK_DP_LIST_ENVVAR | MK_DP_LIST_VOLUME_MOUNTS));
        const char *kind = o->cdi_kind && *o->cdi_kind ? o->cdi_kind : "k8s.device-plugin.nvidia.com/gpu";
        const char *slash = strchr(kind, '/');
        size_t vendor_len = slash ? (size_t) (slash - kind) : strlen(kind);
        _cleanup_(mk_dp_response_done) struct mk_dp_response res = {0};
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, MK_MAX_ALLOCATE_VALUE);
        int q = 0;

        if (ls & MK_DP_LIST_ENVVAR) {
                for (size_t i = 0; i < n_rt && q >= 0; i++)
                        q = mk_buf_printf(&b, "%s%s", i ? "," : "", rt[i]);
                if (q >= 0)
                        q = kv_set(&res.envs, &res.n_envs, "NVIDIA_VISIBLE_DEVICES", mk_buf_take(&b));
        }
        if (q >= 0 && (ls & MK_DP_LIST_VOLUME_MOUNTS)) {
                q = kv_set(&res.envs, &res.n_envs, "NVIDIA_VISIBLE_DEVICES", strdup(CONTAINER_DEVICES_DIR));
                for (size_t i = 0; i < n_rt && q >= 0; i++) {
                        _cleanup_free_ char *cp = strdup_printf(CONTAINER_DEVICES_DIR "/%s", rt[i]);
                        q = cp ? add_mount(&res, cp, "/dev/null", false) : -ENOMEM;
                }
        }
        /* GPUDirect Storage, MOFED, GDRCopy: env always, CDI devices with the CDI strategies. */
        static const char *const extras[] = {"gds", "mofed", "gdrcopy"};
        static const char *const extra_envs[] = {"NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_GDRCOPY"};
        bool extra_on[] = {o->gds_enabled, o->mofed_enabled, o->gdrcopy_enabled};
        for (size_t i = 0; i < ELEMENTSOF(extras) && q >= 0; i++)
                if (extra_on[i])
                        q = kv_set(&res.envs, &res.n_envs, extra_envs[i], strdup("enabled"));
        if (q >= 0 && (ls & MK_DP_LIST_CDI_ANNOTATIONS)) {
                mk_buf_reset(&b);
                for (size_t i = 0; i < n_rt && q >= 0; i++)
                        q = mk_buf_printf(&b, "%s%s=%s", i ? "," : "", kind, rt[i]);
                for (size_t i = 0; i < ELEMENTSOF(extras) && q >= 0; i++)
                        if (extra_on[i])
                                q = mk_buf_printf(&b, ",%.*s/%s=all", (int) vendor_len, kind, extras[i]);
                char uuid[37];
                if (q >= 0)
                        q = random_uuid(uuid);
                if (q >= 0) {
                        const char *prefix = o->cdi_annotation_prefix && *o->cdi_annotation_prefix
                                                     ? o->cdi_annotation_prefix
                                                     : "cdi.k8s.io/";
                        _cleanup_free_ char *key = strdup_printf("%snvidia-device-plugin_%s", prefix, uuid);
                        q = key ? kv_set(&res.annotations, &res.n_annotations, key, mk_buf_take(&b)) : -ENOMEM;
                }
        }
        if (q >= 0 && (ls & MK_DP_LIST_CDI_CRI)) {
                for (size_t i = 0; i < n_rt && q >= 0; i++)
                        q = add_cdi(&res, strdup_printf("%s=%s", kind, rt[i]));
                for (size_t i = 0; i < ELEMENTSOF(extras) && q >= 0; i++)
                        if (extra_on[i])
                                q = add_cdi(&res, strdup_printf("%.*s/%s=all", (int) vendor_len, kind, extras[i]));
        }
        if (q < 0)
                return mk_error_set(e, q, q == -E2BIG ? "Allocate response for '%s' larger than the cap"
                                                      : "Failed to build the Allocate response for '%s'",
                                    resource);
        if (o->pass_device_specs && !cdi_only) {
                int k = device_specs(&res, req, n_ids, o, e);
                if (k < 0)
                        return k;
        }
        *ret = res;
        res = (struct mk_dp_response) {0};
        return 0;
}
