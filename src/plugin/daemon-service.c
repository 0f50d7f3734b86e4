/* The device plugin's DevicePlugin service: the unary methods
 * (GetDevicePluginOptions, Allocate, GetPreferredAllocation,
 * PreStartContainer), called on gRPC's threads (plugin/daemon-internal.h).
 * A request is counted before it is decoded (plugin/pb-scan.h); the answers
 * come from plugin/allocate.h and plugin/preferred.h, in dynamic MIG mode
 * from the reservation (plugin/dynamic/dynamic.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "nvml/nvml.h"
#include "plugin/allocate.h"
#include "plugin/cdi.h"
#include "plugin/daemon-internal.h"
#include "plugin/daemon.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/dynamic/follow.h"
#include "plugin/mps.h"
#include "plugin/pb-scan.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "proto/deviceplugin.pb-c.h"

#define AREA "plugin"

/* protobuf-c output appended to a struct mk_buf (its cap applies). */
struct buf_appender {
        ProtobufCBuffer base;
        struct mk_buf *b;
        int r;
};

static void buf_append(ProtobufCBuffer *pb, size_t len, const uint8_t *data) {
        struct buf_appender *a = (struct buf_appender *) pb;
        if (a->r >= 0)
                a->r = mk_buf_append(a->b, data, len);
}

int dp_pack_msg(const ProtobufCMessage *m, struct mk_buf *b) {
        struct buf_appender a = {.base = {.append = buf_append}, .b = b, .r = 0};
        mk_buf_reset(b);
        (void) protobuf_c_message_pack_to_buffer(m, &a.base);
        return a.r;
}

/* ---- unary handlers (the server's thread) ---- */
static int handle_options(struct mk_buf *resp) {
        /* pre_start_required false: nothing to do before a container starts. */
        V1beta1__DevicePluginOptions msg = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        msg.get_preferred_allocation_available = true;
        return dp_pack_msg(&msg.base, resp);
}

/* One ContainerAllocateResponse pointing into `r`; its pointer arrays and
 * entries are malloc'd, freed by container_done(). */
static void container_done(V1beta1__ContainerAllocateResponse *c) {
        if (c->envs)
                free(c->envs[0]);
        free(c->envs);
        if (c->annotations)
                free(c->annotations[0]);
        free(c->annotations);
        if (c->mounts)
                free(c->mounts[0]);
        free(c->mounts);
        if (c->devices)
                free(c->devices[0]);
        free(c->devices);
        if (c->cdi_devices)
                free(c->cdi_devices[0]);
        free(c->cdi_devices);
}

/* n pointers to n consecutive zeroed items of `size` bytes; NULL for n 0. */
static void **ptr_array(size_t n, size_t size, int *r) {
        if (n == 0 || *r < 0)
                return NULL;
        void **p = calloc(n, sizeof(void *));
        char *items = calloc(n, size);
        if (!p || !items) {
                free(p);
                free(items);
                *r = -ENOMEM;
                return NULL;
        }
        for (size_t i = 0; i < n; i++)
                p[i] = items + i * size;
        return p;
}

static int fill_container(const struct mk_dp_response *r, V1beta1__ContainerAllocateResponse *c) {
        int k = 0;
        c->envs = (V1beta1__ContainerAllocateResponse__EnvsEntry **) ptr_array(
                r->n_envs, sizeof(V1beta1__ContainerAllocateResponse__EnvsEntry), &k);
        c->annotations = (V1beta1__ContainerAllocateResponse__AnnotationsEntry **) ptr_array(
                r->n_annotations, sizeof(V1beta1__ContainerAllocateResponse__AnnotationsEntry), &k);
        c->mounts = (V1beta1__Mount **) ptr_array(r->n_mounts, sizeof(V1beta1__Mount), &k);
        c->devices = (V1beta1__DeviceSpec **) ptr_array(r->n_devices, sizeof(V1beta1__DeviceSpec), &k);
        c->cdi_devices = (V1beta1__CDIDevice **) ptr_array(r->n_cdi_devices, sizeof(V1beta1__CDIDevice), &k);
        if (k < 0)
                return k;
        c->n_envs = r->n_envs;
        for (size_t i = 0; i < r->n_envs; i++) {
                v1beta1__container_allocate_response__envs_entry__init(c->envs[i]);
                c->envs[i]->key = r->envs[i].key;
                c->envs[i]->value = r->envs[i].value;
        }
        c->n_annotations = r->n_annotations;
        for (size_t i = 0; i < r->n_annotations; i++) {
                v1beta1__container_allocate_response__annotations_entry__init(c->annotations[i]);
                c->annotations[i]->key = r->annotations[i].key;
                c->annotations[i]->value = r->annotations[i].value;
        }
        c->n_mounts = r->n_mounts;
        for (size_t i = 0; i < r->n_mounts; i++) {
                v1beta1__mount__init(c->mounts[i]);
                c->mounts[i]->container_path = r->mounts[i].container_path;
                c->mounts[i]->host_path = r->mounts[i].host_path;
                c->mounts[i]->read_only = r->mounts[i].read_only;
        }
        c->n_devices = r->n_devices;
        for (size_t i = 0; i < r->n_devices; i++) {
                v1beta1__device_spec__init(c->devices[i]);
                c->devices[i]->container_path = r->devices[i].container_path;
                c->devices[i]->host_path = r->devices[i].host_path;
                c->devices[i]->permissions = r->devices[i].permissions;
        }
        c->n_cdi_devices = r->n_cdi_devices;
        for (size_t i = 0; i < r->n_cdi_devices; i++) {
                v1beta1__cdidevice__init(c->cdi_devices[i]);
                c->cdi_devices[i]->name = r->cdi_devices[i];
        }
        return 0;
}

/* Writes the CDI spec for snapshot s when it changed (a new MIG layout);
 * a failure is logged: devices already in the file keep resolving. */
void dp_cdi_refresh(struct dp_daemon *d, const struct mk_snapshot *s) {
        if (!d->cdi)
                return;
        struct mk_error e = {0};
        struct mk_cdi_stats st = {0};
        int r = mk_cdi_file_update(d->cdi, s, &d->dp, &st, &e);
        if (r < 0)
                log_warning_errno(r, "Cannot write the CDI spec: %s, ignoring", e.msg);
        else if (r > 0)
                log_info("Wrote the CDI spec '%s': %zu devices, %zu driver files", mk_cdi_file_path(d->cdi),
                         st.devices, st.mounts);
        if (r > 0 && st.mig_without_caps)
                log_warning("CDI spec: %zu MIG device(s) left out: no access capabilities in mig-minors",
                            st.mig_without_caps);
}

static int dyn_snapshot(void *userdata, struct mk_snapshot **ret, struct mk_error *e) {
        struct dp_daemon *d = userdata;
        int r = mk_nvml_snapshot(d->nvml, ret, e);
        if (r >= 0)
                dp_cdi_refresh(d, *ret); /* the instances of this pod may be new */
        return r;
}

/* Dynamic MIG: the ids only say how many devices each container wants
 * (checked to be ours); the reservation says which (plugin/dynamic/dynamic.h). */
static int allocate_dynamic(struct dp_server *s, const V1beta1__AllocateRequest *m, struct mk_dp_response *out,
                            struct mk_error *e) {
        struct dp_daemon *d = s->d;
        size_t n = m->n_container_requests;
        if (n == 0 || n > MK_MAX_POD_CONTAINERS)
                return mk_error_set(e, -EINVAL, "Allocate: %zu container requests, 1 to %u in dynamic MIG mode", n,
                                    MK_MAX_POD_CONTAINERS);
        unsigned counts[MK_MAX_POD_CONTAINERS];
        int r = 0;
        pthread_mutex_lock(&d->lock);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const V1beta1__ContainerAllocateRequest *c = m->container_requests[i];
                if (c->n_devices_ids == 0 || c->n_devices_ids > MK_MAX_CLAIM_DEVICES)
                        r = mk_error_set(e, -EINVAL, "Allocate: container request %zu has %zu devices, 1 to %u", i,
                                         c->n_devices_ids, MK_MAX_CLAIM_DEVICES);
                if (r >= 0)
                        r = mk_dp_resource_find_devices(dp_server_resource(s), (const char *const *) c->devices_ids,
                                                        c->n_devices_ids, "invalid allocation request", NULL, e);
                counts[i] = (unsigned) c->n_devices_ids;
        }
        pthread_mutex_unlock(&d->lock);
        if (r < 0)
                return r;
        struct mk_claim *claim = calloc(1, sizeof(*claim));
        if (!claim)
                return mk_error_set(e, -ENOMEM, "out of memory");
        pthread_mutex_lock(&d->dyn_lock);
        r = mk_dp_dynamic_allocate(d->o->kube, d->o->node_name, counts, n, &d->dp, &d->o->soft, dyn_snapshot, d, out,
                                   claim, e);
        if (r >= 0 && d->follower) {
                /* What was answered for which ids: kubelet's PodResources
                 * later says which pod really got them (plugin/dynamic/follow.h). */
                const char *const *ids[MK_MAX_POD_CONTAINERS];
                size_t n_ids[MK_MAX_POD_CONTAINERS];
                for (size_t i = 0; i < n; i++) {
                        ids[i] = (const char *const *) m->container_requests[i]->devices_ids;
                        n_ids[i] = m->container_requests[i]->n_devices_ids;
                }
                mk_dp_follower_record(d->follower, ids, n_ids, n, claim);
        }
        pthread_mutex_unlock(&d->dyn_lock);
        if (r >= 0)
                log_info("Allocate: %zu container(s) of pod %s/%s get their reserved devices", n, claim->namespace,
                         claim->name);
        else
                log_warning_errno(r, "Allocate in dynamic MIG mode failed: %s", e->msg);
        free(claim);
        return r;
}

/* Refuses a request past the counts the handlers check before protobuf-c
 * decodes it (plugin/pb-scan.h): container requests (field `outer`, 0 for
 * none) over MK_DP_MAX_CONTAINERS, more than max_ids of one container's
 * field 1 (0: no such check), fields over MK_DP_MAX_REQUEST_FIELDS;
 * malformed data as protobuf-c's refusal. what: the method, as its messages
 * name it. */
static int request_check(const char *what, const uint8_t *req, size_t len, uint32_t outer, size_t max_ids,
                         const char *resource, struct mk_error *e) {
        struct mk_pb_counts c;
        struct mk_error why = { 0 };
        if (mk_pb_scan(req, len, outer, 1, &c, &why) < 0)
                return mk_error_set(e, -EINVAL, "%s: cannot decode the request: %s", what, why.msg);
        if (c.outer > MK_DP_MAX_CONTAINERS)
                return mk_error_set(e, -E2BIG, "%s: %zu container requests, at most %u", what, c.outer,
                                    MK_DP_MAX_CONTAINERS);
        if (max_ids && c.inner > max_ids)
                return mk_error_set(e, -EINVAL, "invalid allocation request for '%s': %zu devices, at most %zu",
                                    resource, c.inner, max_ids);
        if (c.fields > MK_DP_MAX_REQUEST_FIELDS)
                return mk_error_set(e, -E2BIG, "%s: %zu fields in the request, at most %u", what, c.fields,
                                    MK_DP_MAX_REQUEST_FIELDS);
        return 0;
}

static int handle_allocate(struct dp_server *s, const uint8_t *req, size_t len, struct mk_buf *resp,
                           struct mk_error *e) {
        /* dynamic MIG mode checks its own (smaller) count of IDs after decoding */
        int chk = request_check("Allocate", req, len, 1, s->d->o->dynamic_mig ? 0 : MK_DP_MAX_REQUEST_IDS,
                              dp_server_resource(s)->name, e);
        if (chk < 0)
                return chk;
        V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, len, req);
        if (!m)
                return mk_error_set(e, -EINVAL, "Allocate: cannot decode the request");
        size_t n = m->n_container_requests;
        if (n > MK_DP_MAX_CONTAINERS) {
                v1beta1__allocate_request__free_unpacked(m, NULL);
                return mk_error_set(e, -E2BIG, "Allocate: %zu container requests, at most %u", n,
                                    MK_DP_MAX_CONTAINERS);
        }
        struct mk_dp_response *out = calloc(n ? n : 1, sizeof(*out));
        V1beta1__ContainerAllocateResponse *cs = calloc(n ? n : 1, sizeof(*cs));
        V1beta1__ContainerAllocateResponse **cps = calloc(n ? n : 1, sizeof(*cps));
        int r = out && cs && cps ? 0 : mk_error_set(e, -ENOMEM, "out of memory");
        size_t done = 0;
        struct dp_daemon *d = s->d;
        if (r >= 0 && d->o->dynamic_mig) {
                r = allocate_dynamic(s, m, out, e);
                done = r >= 0 ? n : 0;
        }
        pthread_mutex_lock(&d->lock);
        for (; r >= 0 && done < n; done++) {
                const V1beta1__ContainerAllocateRequest *c = m->container_requests[done];
                r = mk_dp_allocate(d->snapshot, dp_server_resource(s), (const char *const *) c->devices_ids,
                                   c->n_devices_ids, &d->dp, &out[done], e);
                if (r < 0)
                        break;
                if (mk_mps_plan_find(d->mps, s->name) &&
                    (r = mk_mps_allocate(dp_mps_root(d), s->name, &out[done])) < 0) {
                        mk_dp_response_done(&out[done]);
                        mk_error_set(e, r, "Allocate: cannot add the MPS directories of '%s'", s->name);
                        break;
                }
        }
        pthread_mutex_unlock(&d->lock);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                v1beta1__container_allocate_response__init(&cs[i]);
                r = fill_container(&out[i], &cs[i]);
                cps[i] = &cs[i];
                if (r < 0)
                        mk_error_set(e, r, "out of memory");
        }
        if (r >= 0) {
                V1beta1__AllocateResponse msg = V1BETA1__ALLOCATE_RESPONSE__INIT;
                msg.n_container_responses = n;
                msg.container_responses = cps;
                r = dp_pack_msg(&msg.base, resp);
                if (r < 0)
                        mk_error_set(e, r, "Allocate: cannot pack the response");
        }
        for (size_t i = 0; cs && i < n; i++)
                container_done(&cs[i]);
        for (size_t i = 0; out && i < done; i++)
                mk_dp_response_done(&out[i]);
        free(out);
        free(cs);
        free(cps);
        v1beta1__allocate_request__free_unpacked(m, NULL);
        return r;
}

static int handle_preferred(struct dp_server *s, const uint8_t *req, size_t len, struct mk_buf *resp,
                            struct mk_error *e) {
        int chk = request_check("GetPreferredAllocation", req, len, 1, 0, NULL, e);
        if (chk < 0)
                return chk;
        V1beta1__PreferredAllocationRequest *m = v1beta1__preferred_allocation_request__unpack(NULL, len, req);
        if (!m)
                return mk_error_set(e, -EINVAL, "GetPreferredAllocation: cannot decode the request");
        size_t n = m->n_container_requests;
        if (n > MK_DP_MAX_CONTAINERS) {
                v1beta1__preferred_allocation_request__free_unpacked(m, NULL);
                return mk_error_set(e, -E2BIG, "GetPreferredAllocation: %zu container requests, at most %u", n,
                                    MK_DP_MAX_CONTAINERS);
        }
        char ***ids = calloc(n ? n : 1, sizeof(*ids));
        V1beta1__ContainerPreferredAllocationResponse *cs = calloc(n ? n : 1, sizeof(*cs));
        V1beta1__ContainerPreferredAllocationResponse **cps = calloc(n ? n : 1, sizeof(*cps));
        int r = ids && cs && cps ? 0 : mk_error_set(e, -ENOMEM, "out of memory");
        struct dp_daemon *d = s->d;
        pthread_mutex_lock(&d->lock);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const V1beta1__ContainerPreferredAllocationRequest *c = m->container_requests[i];
                if (c->allocation_size <= 0) {
                        r = mk_error_set(e, -EINVAL, "GetPreferredAllocation: allocation_size %d is not positive",
                                         (int) c->allocation_size);
                        break;
                }
                r = mk_dp_preferred(d->snapshot, dp_server_resource(s), (const char *const *) c->available_deviceids,
                                    c->n_available_deviceids, (const char *const *) c->must_include_deviceids,
                                    c->n_must_include_deviceids, (unsigned) c->allocation_size, &ids[i], e);
        }
        pthread_mutex_unlock(&d->lock);
        if (r >= 0) {
                for (size_t i = 0; i < n; i++) {
                        v1beta1__container_preferred_allocation_response__init(&cs[i]);
                        size_t k = 0;
                        while (ids[i][k])
                                k++;
                        cs[i].n_deviceids = k;
                        cs[i].deviceids = ids[i];
                        cps[i] = &cs[i];
                }
                V1beta1__PreferredAllocationResponse msg = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
                msg.n_container_responses = n;
                msg.container_responses = cps;
                r = dp_pack_msg(&msg.base, resp);
                if (r < 0)
                        mk_error_set(e, r, "GetPreferredAllocation: cannot pack the response");
        }
        for (size_t i = 0; ids && i < n; i++)
                strv_free(ids[i]);
        free(ids);
        free(cs);
        free(cps);
        v1beta1__preferred_allocation_request__free_unpacked(m, NULL);
        return r;
}

static int handle_prestart(const uint8_t *req, size_t len, struct mk_buf *resp, struct mk_error *e) {
        int chk = request_check("PreStartContainer", req, len, 0, 0, NULL, e); /* device IDs: fields only */
        if (chk < 0)
                return chk;
        V1beta1__PreStartContainerRequest *m = v1beta1__pre_start_container_request__unpack(NULL, len, req);
        if (!m)
                return mk_error_set(e, -EINVAL, "PreStartContainer: cannot decode the request");
        v1beta1__pre_start_container_request__free_unpacked(m, NULL);
        V1beta1__PreStartContainerResponse msg = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
        return dp_pack_msg(&msg.base, resp);
}

const char *const dp_unary_methods[] = {
        METHOD_OPTIONS, METHOD_PREFERRED, METHOD_ALLOCATE, METHOD_PRESTART, NULL,
};

int dp_on_unary(void *userdata, const char *method, const uint8_t *req, size_t len, struct mk_buf *resp,
                    struct mk_error *e) {
        struct dp_server *s = userdata;
        int r;
        if (streq(method, METHOD_ALLOCATE))
                r = handle_allocate(s, req, len, resp, e);
        else if (streq(method, METHOD_PREFERRED))
                r = handle_preferred(s, req, len, resp, e);
        else if (streq(method, METHOD_OPTIONS))
                r = handle_options(resp);
        else if (streq(method, METHOD_PRESTART))
                r = handle_prestart(req, len, resp, e);
        else
                r = mk_error_set(e, -ENOSYS, "unknown method '%s'", method);
        if (r < 0)
                log_debug_area_errno(AREA, r, "%s for '%s' failed: %s", method, s->name, e ? e->msg : "");
        return r;
}
