/* The device plugin daemon (daemon.h, docs/device-plugin.md,
 * kubelet v1.20 pkg/kubelet/cm/devicemanager; k8s-device-plugin v0.20.0 cmd/nvidia-device-plugin). Threads: the main thread
 * runs the loop (signalfd, inotify, timers); gRPC's threads call the
 * handlers below; the health monitor's thread calls on_health(); one
 * registrar thread per start runs the Register calls, since the kubelet
 * calls GetDevicePluginOptions back before it answers (kubelet v1.20 pkg/kubelet/cm/devicemanager). `lock`
 * guards the snapshot and the resources against the handlers and the
 * health callback; the main thread replaces them only with every server,
 * the registrar and the monitor stopped. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/thread.h"
#include "base/parse.h"
#include "base/macro.h"
#include "gfd/labels.h"
#include "grpc/client.h"
#include "grpc/server.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "nvml/nvml.h"
#include "plugin/allocate.h"
#include "plugin/cdi.h"
#include "plugin/daemon.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/dynamic/follow.h"
#include "plugin/dynamic/handout.h"
#include "plugin/health.h"
#include "plugin/mps.h"
#include "plugin/pb-scan.h"
#include "plugin/preferred.h"
#include "plugin/resources.h"
#include "proto/deviceplugin.pb-c.h"
#include "spec/plugin-config.h"

#define AREA "plugin"
#define MK_DP_MAX_NODE_NAME 253
#define MK_DP_MAX_LABEL_KEYS_BYTES (256u << 10) /* our annotation; the apiserver's cap on all annotations */

static const char *const labels_mode_table[_MK_DP_LABELS_MODE_MAX] = {
        [MK_DP_LABELS_NONE] = "none",
        [MK_DP_LABELS_NODE] = "node",
        [MK_DP_LABELS_NFD_FILE] = "nfd-file",
};

const char *mk_dp_labels_mode_to_string(enum mk_dp_labels_mode m) {
        return m >= 0 && m < _MK_DP_LABELS_MODE_MAX ? labels_mode_table[m] : NULL;
}

enum mk_dp_labels_mode mk_dp_labels_mode_from_string(const char *s) {
        if (!s)
                return _MK_DP_LABELS_MODE_INVALID;
        for (int i = 0; i < _MK_DP_LABELS_MODE_MAX; i++)
                if (streq(s, labels_mode_table[i]))
                        return (enum mk_dp_labels_mode) i;
        return _MK_DP_LABELS_MODE_INVALID;
}

/* ---- labels: NFD file and Node patch (pure parts testable) ---- */

int mk_dp_write_features_file(const char *path, const struct mk_labels *l, struct mk_error *e) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, (size_t) MK_MAX_LABELS * 1024);
        for (size_t i = 0; i < l->n; i++) {
                int r = mk_buf_printf(&b, "%s=%s\n", l->items[i].key, l->items[i].value);
                if (r < 0)
                        return mk_error_set(e, r, "Cannot write the feature file '%s': %s", path, strerror(-r));
        }
        return mk_write_file_atomic(path, mk_buf_str(&b), b.len, 0644, e);
}

int mk_dp_node_labels_patch(const json_t *node, const struct mk_labels *l, json_t **ret) {
        const char *owned = mk_kube_annotation(node, MK_DP_LABELS_ANNOTATION);

        json_t *labels = json_object();
        _cleanup_buf_done_ struct mk_buf keys;
        mk_buf_init(&keys, MK_DP_MAX_LABEL_KEYS_BYTES);
        if (!labels)
                return -ENOMEM;
        bool changed = false;
        int r = 0;
        for (size_t i = 0; i < l->n && r >= 0; i++) {
                const char *cur = mk_kube_label(node, l->items[i].key);
                if (!cur || !streq(cur, l->items[i].value)) {
                        changed = true;
                        r = json_object_set_new(labels, l->items[i].key, json_string(l->items[i].value));
                }
                if (r >= 0)
                        r = mk_buf_printf(&keys, "%s%s", i ? "," : "", l->items[i].key);
        }
        /* Keys we set before and no longer compute: removed, if still there. */
        for (const char *p = owned; r >= 0 && p && *p;) {
                const char *c = strchr(p, ',');
                size_t n = c ? (size_t) (c - p) : strlen(p);
                _cleanup_free_ char *k = strndup(p, n);
                if (!k) {
                        r = -ENOMEM;
                        break;
                }
                if (*k && !mk_labels_get(l, k) && mk_kube_label(node, k)) {
                        changed = true;
                        r = json_object_set_new(labels, k, json_null());
                }
                p = c ? c + 1 : p + n;
        }
        if (r < 0) {
                json_decref(labels);
                return r == -E2BIG ? -E2BIG : -ENOMEM;
        }
        if (!owned || !streq(owned, mk_buf_str(&keys)))
                changed = true;
        if (!changed) {
                json_decref(labels);
                *ret = NULL;
                return 0;
        }
        json_t *patch = json_pack("{s:{s:o,s:{s:s}}}", "metadata", "labels", labels, "annotations",
                                  MK_DP_LABELS_ANNOTATION, mk_buf_str(&keys));
        if (!patch)
                return -ENOMEM;
        *ret = patch;
        return 0;
}

/* ---- the daemon ---- */

struct dp_daemon;
struct reg_ticket;

struct dp_server {
        struct dp_daemon *d;
        size_t index;                   /* in d->resources->r */
        char name[64];                  /* the resource's */
        char *socket_path;
        struct mk_grpc_server *grpc;
        ino_t ino;                      /* our socket as we bound it */
        struct timespec ctime;
};

struct dp_daemon {
        const struct mk_dp_daemon_options *o;
        struct mk_dp_options dp;        /* o->dp with config and host filled in */
        struct mk_host host;
        char *dir;                      /* plugin directory, no trailing '/' */
        char *kubelet_socket;

        struct mk_nvml *nvml;
        struct mk_plugin_config *file_cfg;
        struct mk_plugin_config *rc_cfg;
        struct mk_snapshot *snapshot;
        struct mk_dp_resources *resources;
        pthread_mutex_t lock;           /* snapshot and resources vs. handlers and health */
        pthread_mutex_t dyn_lock;       /* one dynamic Allocate at a time (the kubelet sends one), and
                                         * the follower's rounds */
        struct mk_dp_follower *follower; /* dynamic MIG with follow_handouts; NULL otherwise */
        char *handout_path;             /* its state file in the plugin directory */

        struct dp_server *servers;
        size_t n_servers;
        struct mk_health *health;
        struct mk_cdi_file *cdi;        /* with a CDI list strategy: the spec file we keep */
        struct mk_mps_plan *mps;        /* MPS sharing: the control daemons we run; NULL when none */
        bool *mps_down;                 /* per daemon: found dead, devices marked Unhealthy */
        uint64_t mps_check_at_ms;
        uint64_t mode_check_at_ms;      /* dynamic MIG: the next look at the GPUs' MIG modes */

        struct reg_ticket *ticket;      /* the running registration, NULL when none */

        bool up;                        /* servers started */
        uint64_t retry_at_ms;           /* 0: no retry pending */
        bool retry_reload;              /* the retry re-reads config and NVML */
        uint64_t labels_retry_at_ms;    /* NFD file */

        /* The labeller thread (labels=node). */
        pthread_t lab_thread;
        bool lab_running, lab_init, lab_stop;
        pthread_mutex_t lab_lock;
        pthread_cond_t lab_cond;
        struct mk_labels *lab_pending;  /* newest labels not yet taken by the thread */
};

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static const struct mk_dp_resource *server_resource(const struct dp_server *s) {
        return &s->d->resources->r[s->index];
}

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

static int pack_msg(const ProtobufCMessage *m, struct mk_buf *b) {
        struct buf_appender a = {.base = {.append = buf_append}, .b = b, .r = 0};
        mk_buf_reset(b);
        (void) protobuf_c_message_pack_to_buffer(m, &a.base);
        return a.r;
}

/* The ListAndWatch message of one resource: every device, its health and
 * NUMA node. Called with d->lock held. */
static int pack_device_list(const struct mk_dp_resource *res, struct mk_buf *b) {
        size_t n = res->n_devices;
        _cleanup_free_ V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
        _cleanup_free_ V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        _cleanup_free_ V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
        _cleanup_free_ V1beta1__NUMANode *numa = calloc(n ? n : 1, sizeof(*numa));
        _cleanup_free_ V1beta1__NUMANode **numa_ptrs = calloc(n ? n : 1, sizeof(*numa_ptrs));
        if (!devs || !ptrs || !topo || !numa || !numa_ptrs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const struct mk_dp_device *dev = &res->devices[i];
                v1beta1__device__init(&devs[i]);
                devs[i].id = (char *) dev->id;
                devs[i].health = (char *) (dev->healthy ? "Healthy" : "Unhealthy");
                if (dev->numa_node >= 0) {
                        v1beta1__topology_info__init(&topo[i]);
                        v1beta1__numanode__init(&numa[i]);
                        numa[i].id = dev->numa_node;
                        numa_ptrs[i] = &numa[i];
                        topo[i].n_nodes = 1;
                        topo[i].nodes = &numa_ptrs[i];
                        devs[i].topology = &topo[i];
                }
                ptrs[i] = &devs[i];
        }
        V1beta1__ListAndWatchResponse msg = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        msg.n_devices = n;
        msg.devices = ptrs;
        return pack_msg(&msg.base, b);
}

/* Sends the current list of server s's resource to its streams. Called
 * with d->lock held. */
static int publish(struct dp_server *s) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, MK_GRPC_MAX_SEND_MESSAGE);
        int r = pack_device_list(server_resource(s), &b);
        if (r >= 0)
                r = mk_grpc_server_publish(s->grpc, (const uint8_t *) b.data, b.len);
        if (r < 0)
                log_warning_errno(r, "Cannot send the device list of '%s': %m, ignoring", server_resource(s)->name);
        return r;
}

/* ---- unary handlers (the server's thread) ---- */

static int handle_options(struct mk_buf *resp) {
        /* pre_start_required false: nothing to do before a container starts. */
        V1beta1__DevicePluginOptions msg = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        msg.get_preferred_allocation_available = true;
        return pack_msg(&msg.base, resp);
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
static void cdi_refresh(struct dp_daemon *d, const struct mk_snapshot *s) {
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
                cdi_refresh(d, *ret); /* the instances of this pod may be new */
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
                        r = mk_dp_resource_find_devices(server_resource(s), (const char *const *) c->devices_ids,
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

static const char *mps_root(const struct dp_daemon *d) {
        return d->o->mps_root && *d->o->mps_root ? d->o->mps_root : MK_MPS_DEFAULT_ROOT;
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
                              server_resource(s)->name, e);
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
                r = mk_dp_allocate(d->snapshot, server_resource(s), (const char *const *) c->devices_ids,
                                   c->n_devices_ids, &d->dp, &out[done], e);
                if (r < 0)
                        break;
                if (mk_mps_plan_find(d->mps, s->name) &&
                    (r = mk_mps_allocate(mps_root(d), s->name, &out[done])) < 0) {
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
                r = pack_msg(&msg.base, resp);
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
                r = mk_dp_preferred(d->snapshot, server_resource(s), (const char *const *) c->available_deviceids,
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
                r = pack_msg(&msg.base, resp);
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
        return pack_msg(&msg.base, resp);
}

#define METHOD_OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define METHOD_LIST_AND_WATCH "/v1beta1.DevicePlugin/ListAndWatch"
#define METHOD_PREFERRED "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define METHOD_ALLOCATE "/v1beta1.DevicePlugin/Allocate"
#define METHOD_PRESTART "/v1beta1.DevicePlugin/PreStartContainer"
#define METHOD_REGISTER "/v1beta1.Registration/Register"

static const char *const unary_methods[] = {
        METHOD_OPTIONS, METHOD_PREFERRED, METHOD_ALLOCATE, METHOD_PRESTART, NULL,
};

static int on_unary(void *userdata, const char *method, const uint8_t *req, size_t len, struct mk_buf *resp,
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

/* ---- health (the monitor's thread) ---- */

/* Unhealthy devices of a resource on GPU `gpu`; -1 when it has none there. */
static long unhealthy_on(const struct mk_dp_resource *res, unsigned gpu) {
        long n = -1;
        for (size_t k = 0; k < res->n_devices; k++)
                if (res->devices[k].gpu == gpu)
                        n = (n < 0 ? 0 : n) + !res->devices[k].healthy;
        return n;
}

static void on_health(void *userdata, const struct mk_health_change *c) {
        struct dp_daemon *d = userdata;
        pthread_mutex_lock(&d->lock);
        /* One change goes one way (all to healthy or all to unhealthy), so a
         * resource changed iff its count of unhealthy devices on that GPU did:
         * only those re-send their list. */
        long *before = calloc(d->n_servers ? d->n_servers : 1, sizeof(long));
        for (size_t i = 0; before && i < d->n_servers; i++)
                before[i] = unhealthy_on(server_resource(&d->servers[i]), c->gpu);
        unsigned changed = mk_dp_resources_set_health(d->resources, c->gpu, c->gi_id, c->ci_id, c->healthy);
        for (size_t i = 0; changed > 0 && i < d->n_servers; i++) {
                long after = unhealthy_on(server_resource(&d->servers[i]), c->gpu);
                if (after >= 0 && (!before || after != before[i]) && d->servers[i].grpc)
                        (void) publish(&d->servers[i]);
        }
        free(before);
        pthread_mutex_unlock(&d->lock);
        if (changed == 0)
                return;
        char where[64] = "";
        if (c->gi_id != UINT32_MAX && c->ci_id != UINT32_MAX)
                snprintf(where, sizeof(where), " GI %u CI %u", c->gi_id, c->ci_id);
        else if (c->gi_id != UINT32_MAX)
                snprintf(where, sizeof(where), " GI %u", c->gi_id);
        if (c->healthy)
                log_info("GPU %u%s: %u device(s) Healthy again (%s)", c->gpu, where, changed, c->reason);
        else
                log_warning("GPU %u%s: %u device(s) Unhealthy: Xid %llu (%s)", c->gpu, where, changed, c->xid,
                            c->reason);
}

/* ---- servers ---- */

static int stat_id(const char *path, ino_t *ret_ino, struct timespec *ret_ctime) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return -errno;
        if (!S_ISSOCK(st.st_mode))
                return -ENOTSOCK;
        *ret_ino = st.st_ino;
        *ret_ctime = st.st_ctim;
        return 0;
}

static bool same_id(ino_t a, struct timespec ac, ino_t b, struct timespec bc) {
        return a == b && ac.tv_sec == bc.tv_sec && ac.tv_nsec == bc.tv_nsec;
}

/* The health callback walks d->servers under d->lock, so the array is
 * swapped under it; gRPC servers are stopped outside it (their handlers take
 * it, and stopping waits for a handler that runs). */
static void servers_stop(struct dp_daemon *d) {
        pthread_mutex_lock(&d->lock);
        struct dp_server *servers = d->servers;
        size_t n = d->n_servers;
        d->servers = NULL;
        d->n_servers = 0;
        pthread_mutex_unlock(&d->lock);
        for (size_t i = 0; i < n; i++) {
                struct dp_server *s = &servers[i];
                s->grpc = mk_grpc_server_stop(s->grpc);
                /* gRPC unlinks only the socket it bound; a file another
                 * process put there is not ours to remove. */
                ino_t ino = 0;
                struct timespec ct = {0};
                if (s->socket_path && stat_id(s->socket_path, &ino, &ct) >= 0 && same_id(ino, ct, s->ino, s->ctime))
                        (void) unlink(s->socket_path);
                free(s->socket_path);
        }
        free(servers);
}

static int servers_start(struct dp_daemon *d, struct mk_error *e) {
        size_t n = d->resources->n;
        struct dp_server *servers = calloc(n ? n : 1, sizeof(*servers));
        if (!servers)
                return mk_error_set(e, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                servers[i].d = d;
                servers[i].index = i;
                snprintf(servers[i].name, sizeof(servers[i].name), "%s", d->resources->r[i].name);
        }
        /* Published before any server runs (grpc NULL: skipped by on_health),
         * so no health change falls between a server's first list and its
         * being known to the callback. */
        pthread_mutex_lock(&d->lock);
        d->servers = servers;
        d->n_servers = n;
        pthread_mutex_unlock(&d->lock);
        for (size_t i = 0; i < n; i++) {
                struct dp_server *s = &servers[i];
                if (mk_path_join(d->dir, d->resources->r[i].endpoint, &s->socket_path) < 0)
                        return mk_error_set(e, -ENOMEM, "out of memory");
                struct mk_grpc_server_config c = {
                        .socket_path = s->socket_path,
                        .stream_method = METHOD_LIST_AND_WATCH,
                        .unary_methods = unary_methods,
                        .unary = on_unary,
                        .userdata = s,
                        .max_message = MK_DP_MAX_REQUEST_BYTES,
                };
                struct mk_grpc_server *g = NULL;
                int r = mk_grpc_server_start(&c, &g, e);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot serve '%s' on '%s'", s->name, s->socket_path);
                        return r;
                }
                /* Gone already (a kubelet wiping the directory at its start):
                 * not an error here; identity 0 makes the main loop restart. */
                if (stat_id(s->socket_path, &s->ino, &s->ctime) < 0)
                        s->ino = 0;
                pthread_mutex_lock(&d->lock);
                s->grpc = g;
                r = publish(s);
                pthread_mutex_unlock(&d->lock);
                if (r < 0) {
                        errno = -r;
                        return mk_error_set(e, r, "Cannot start '%s' on '%s': %m", s->name, s->socket_path);
                }
                log_info("Serving '%s' (%zu devices) on '%s'", s->name, d->resources->r[i].n_devices,
                         s->socket_path);
        }
        return 0;
}

/* ---- registration (a registrar thread per start) ----
 *
 * A Register call may take its whole deadline (a kubelet that is going
 * away), and a restart must not wait for it: each start hands a ticket with
 * copies of what the thread needs to a detached thread; a restart cancels
 * the ticket and drops it, and the thread frees it when it ends. */

struct reg_item {
        char name[64];
        char endpoint[128];
        atomic_bool registered;
};

struct reg_ticket {
        atomic_int refs;
        atomic_bool cancelled;
        atomic_bool done;               /* every item registered; kubelet_* valid */
        char *kubelet_socket;
        int timeout_ms;
        ino_t kubelet_ino;              /* kubelet.sock as it was when the last item registered */
        struct timespec kubelet_ctime;
        struct reg_item *items;
        size_t n;
};

static struct reg_ticket *ticket_unref(struct reg_ticket *t) {
        if (t && atomic_fetch_sub(&t->refs, 1) == 1) {
                free(t->kubelet_socket);
                free(t->items);
                free(t);
        }
        return NULL;
}

static int register_one(struct reg_ticket *t, struct mk_grpc_client *c, struct reg_item *it, struct mk_error *e) {
        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        opts.get_preferred_allocation_available = true;
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        req.version = (char *) "v1beta1";
        req.endpoint = it->endpoint;
        req.resource_name = it->name;
        req.options = &opts;
        _cleanup_buf_done_ struct mk_buf in;
        _cleanup_buf_done_ struct mk_buf out;
        mk_buf_init(&in, MK_GRPC_MAX_SEND_MESSAGE);
        mk_buf_init(&out, MK_GRPC_DEFAULT_MAX_MESSAGE);
        int r = pack_msg(&req.base, &in);
        if (r < 0)
                return mk_error_set(e, r, "Cannot pack the RegisterRequest");
        return mk_grpc_client_call(c, METHOD_REGISTER, (const uint8_t *) in.data, in.len, t->timeout_ms, true, &out,
                                   NULL, e);
}

/* Waits until kubelet.sock exists as a socket, then registers every item
 * not registered yet; retries with a backoff until all are or the ticket is
 * cancelled. */
static void *registrar_main(void *userdata) {
        struct reg_ticket *t = userdata;
        unsigned failures = 0;
        bool waiting_logged = false;
        while (!atomic_load(&t->cancelled)) {
                ino_t ino = 0;
                struct timespec ct = {0};
                if (stat_id(t->kubelet_socket, &ino, &ct) < 0) {
                        if (!waiting_logged)
                                log_info("Waiting for the kubelet socket '%s'", t->kubelet_socket);
                        waiting_logged = true;
                        usleep(20 * 1000);
                        continue;
                }
                struct mk_error e = {0};
                struct mk_grpc_client *c = NULL;
                int r = mk_grpc_client_open(t->kubelet_socket, &c, &e);
                for (size_t i = 0; r >= 0 && i < t->n && !atomic_load(&t->cancelled); i++) {
                        struct reg_item *it = &t->items[i];
                        if (atomic_load(&it->registered))
                                continue;
                        r = register_one(t, c, it, &e);
                        if (r >= 0) {
                                atomic_store(&it->registered, true);
                                log_info("Registered '%s' (endpoint '%s') with the kubelet", it->name, it->endpoint);
                        }
                }
                c = mk_grpc_client_close(c);
                bool all = r >= 0;
                for (size_t i = 0; all && i < t->n; i++)
                        all = atomic_load(&t->items[i].registered);
                /* Recorded after the calls: a stale kubelet.sock seen before
                 * them may have been replaced by the one that answered. */
                if (all && stat_id(t->kubelet_socket, &ino, &ct) >= 0) {
                        t->kubelet_ino = ino;
                        t->kubelet_ctime = ct;
                        atomic_store(&t->done, true);
                        break;
                }
                if (atomic_load(&t->cancelled))
                        break;
                if (r < 0)
                        log_warning_errno(r, "Registration with the kubelet on '%s' failed: %s; retrying",
                                          t->kubelet_socket, e.msg);
                /* 0.1 s, 0.2 s, ... up to 5 s, in slices so a cancel is seen quickly. */
                unsigned ms = MIN(100u << MIN(failures, 6u), 5000u);
                failures++;
                for (unsigned w = 0; w < ms && !atomic_load(&t->cancelled); w += 20)
                        usleep(20 * 1000);
        }
        ticket_unref(t);
        return NULL;
}

static int registrar_start(struct dp_daemon *d, struct mk_error *e) {
        if (!*d->kubelet_socket)
                return 0; /* --kubelet-socket '': serve only */
        struct reg_ticket *t = calloc(1, sizeof(*t));
        if (!t)
                return mk_error_set(e, -ENOMEM, "out of memory");
        atomic_init(&t->refs, 1);
        t->timeout_ms = d->o->register_timeout_ms > 0 ? d->o->register_timeout_ms : MK_DP_REGISTER_TIMEOUT_MS;
        t->kubelet_socket = strdup(d->kubelet_socket);
        t->items = calloc(d->n_servers ? d->n_servers : 1, sizeof(*t->items));
        if (!t->kubelet_socket || !t->items) {
                ticket_unref(t);
                return mk_error_set(e, -ENOMEM, "out of memory");
        }
        t->n = d->n_servers;
        for (size_t i = 0; i < d->n_servers; i++) {
                snprintf(t->items[i].name, sizeof(t->items[i].name), "%s", d->servers[i].name);
                snprintf(t->items[i].endpoint, sizeof(t->items[i].endpoint), "%s",
                         d->resources->r[d->servers[i].index].endpoint);
        }
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        atomic_fetch_add(&t->refs, 1); /* the thread's */
        pthread_t th;
        int r = pthread_create(&th, &attr, registrar_main, t);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                atomic_fetch_sub(&t->refs, 1);
                ticket_unref(t);
                return mk_error_set(e, -r, "Cannot start the registration thread");
        }
        d->ticket = t;
        return 0;
}

static void registrar_stop(struct dp_daemon *d) {
        if (!d->ticket)
                return;
        atomic_store(&d->ticket->cancelled, true);
        d->ticket = ticket_unref(d->ticket);
}

/* ---- start, stop, restart ---- */

/* Loads the config file and --resource-config into d (replacing what was
 * there only on success). */
static int load_config(struct dp_daemon *d, struct mk_error *e) {
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *file = NULL, *rc = NULL;
        if (d->o->config_file) {
                int r = mk_plugin_config_load(d->o->config_file, &file, e);
                if (r < 0)
                        return r;
        }
        if (d->o->resource_config) {
                int r = mk_plugin_config_parse_resource_config(d->o->resource_config, &rc, e);
                if (r < 0)
                        return r;
                if (file && file->n_resources > 0)
                        log_warning("--resource-config replaces the sharing section of '%s'", d->o->config_file);
        }
        mk_plugin_config_free(d->file_cfg);
        mk_plugin_config_free(d->rc_cfg);
        d->file_cfg = TAKE_PTR(file);
        d->rc_cfg = TAKE_PTR(rc);
        d->dp = d->o->dp;
        if (!d->o->mig_strategy_given)
                d->dp.mig_strategy = d->file_cfg && d->file_cfg->has_mig_strategy ? d->file_cfg->mig_strategy
                                                                                 : MK_MIG_STRATEGY_NONE;
        d->dp.config = d->rc_cfg ? d->rc_cfg : d->file_cfg;
        d->dp.host = &d->host;
        return 0;
}

/* Merge-patches `l` onto the Node (GET, compute, PATCH when something
 * changed). Runs on the labeller thread. */
static int node_labels_publish(struct dp_daemon *d, const struct mk_labels *l) {
        char path[MK_K8S_PATH_MAX];
        struct mk_error e = {0};
        _cleanup_(json_decrefp) json_t *node = NULL, *patch = NULL;
        int r = mk_kube_core_path(NULL, "nodes", d->o->node_name, path, sizeof(path));
        if (r < 0)
                mk_error_set(&e, r, "Invalid node name");
        else
                r = mk_kube_get(d->o->kube, path, &node, &e);
        if (r >= 0) {
                r = mk_dp_node_labels_patch(node, l, &patch);
                if (r < 0)
                        mk_error_set(&e, r, "Cannot build the label patch");
        }
        if (r >= 0 && patch) {
                r = mk_kube_patch(d->o->kube, path, MK_KUBE_PATCH_MERGE, patch, NULL, &e);
                if (r >= 0)
                        log_info("Labelled node '%s' with %zu labels", d->o->node_name, l->n);
        }
        if (r < 0)
                log_warning_errno(r, "Cannot label node '%s': %s; retrying in %us", d->o->node_name, e.msg,
                                  MK_DP_RETRY_MS / 1000);
        return r;
}

/* The labeller thread: the apiserver may be slow or away, and the main loop
 * must keep answering signals and kubelet restarts, so Node labels are
 * published here. It takes the newest labels handed over, and retries a
 * failed publication every MK_DP_RETRY_MS until newer labels replace it. */
static void *labeller_main(void *userdata) {
        struct dp_daemon *d = userdata;
        struct mk_labels *cur = NULL;
        struct timespec deadline = {0};
        pthread_mutex_lock(&d->lab_lock);
        for (;;) {
                while (!d->lab_pending && !d->lab_stop) {
                        if (!cur)
                                pthread_cond_wait(&d->lab_cond, &d->lab_lock);
                        else if (pthread_cond_timedwait(&d->lab_cond, &d->lab_lock, &deadline) == ETIMEDOUT)
                                break;
                }
                if (d->lab_stop)
                        break;
                if (d->lab_pending) {
                        mk_labels_free(cur);
                        cur = TAKE_PTR(d->lab_pending);
                }
                pthread_mutex_unlock(&d->lab_lock);
                int r = node_labels_publish(d, cur);
                pthread_mutex_lock(&d->lab_lock);
                if (r >= 0)
                        cur = mk_labels_free(cur);
                else {
                        clock_gettime(CLOCK_MONOTONIC, &deadline);
                        deadline.tv_sec += MK_DP_RETRY_MS / 1000;
                }
        }
        pthread_mutex_unlock(&d->lab_lock);
        mk_labels_free(cur);
        return NULL;
}

static int labeller_start(struct dp_daemon *d, struct mk_error *e) {
        mk_cond_init_monotonic(&d->lab_cond);
        pthread_mutex_init(&d->lab_lock, NULL);
        d->lab_init = true;
        int r = pthread_create(&d->lab_thread, NULL, labeller_main, d);
        if (r != 0)
                return mk_error_set(e, -r, "Cannot start the labeller thread");
        d->lab_running = true;
        return 0;
}

/* Joins the labeller (after the request in flight, bounded by the
 * client's timeouts). */
static void labeller_stop(struct dp_daemon *d) {
        if (d->lab_running) {
                pthread_mutex_lock(&d->lab_lock);
                d->lab_stop = true;
                pthread_cond_signal(&d->lab_cond);
                pthread_mutex_unlock(&d->lab_lock);
                pthread_join(d->lab_thread, NULL);
                d->lab_running = false;
        }
        if (d->lab_init) {
                d->lab_pending = mk_labels_free(d->lab_pending);
                pthread_cond_destroy(&d->lab_cond);
                pthread_mutex_destroy(&d->lab_lock);
                d->lab_init = false;
        }
}

/* Computes the GFD labels and puts them where o->labels says: the NFD file
 * at once (retried every MK_DP_RETRY_MS on failure), the Node through the
 * labeller thread. Failures never stop the plugin. */
static void labels_refresh(struct dp_daemon *d) {
        d->labels_retry_at_ms = 0;
        if (d->o->labels == MK_DP_LABELS_NONE || !d->snapshot)
                return;
        _cleanup_free_ char *machine = NULL;
        struct mk_error me = {0};
        if (!d->o->machine_type_file || mk_read_sysfs_attr(d->o->machine_type_file, &machine, &me) < 0)
                machine = NULL;
        struct mk_labels_host host = {.vgpu_present = -1};
        if (d->dp.host)
                mk_labels_host_read(d->dp.host, d->snapshot, &host);
        struct mk_labels_input in = {
                .snapshot = d->snapshot,
                .host = &host,
                .strategy = d->dp.mig_strategy,
                .config = d->dp.config,
                .cuda_driver_version = d->snapshot->cuda_driver_version,
                .machine_type = machine ? machine : "unknown",
                .timestamp = d->o->labels == MK_DP_LABELS_NFD_FILE ? (uint64_t) time(NULL) : 0,
        };
        struct mk_error e = {0};
        _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
        int r = mk_labels_compute(&in, &l, &e);
        if (r < 0) {
                log_warning_errno(r, "Cannot compute the GPU feature labels: %s, ignoring", e.msg);
                return;
        }
        if (d->o->labels == MK_DP_LABELS_NODE) {
                pthread_mutex_lock(&d->lab_lock);
                mk_labels_free(d->lab_pending);
                d->lab_pending = TAKE_PTR(l);
                pthread_cond_signal(&d->lab_cond);
                pthread_mutex_unlock(&d->lab_lock);
                return;
        }
        const char *path = d->o->nfd_features_file ? d->o->nfd_features_file : MK_DP_DEFAULT_NFD_FILE;
        r = mk_dp_write_features_file(path, l, &e);
        if (r >= 0)
                log_info("Wrote %zu labels to '%s'", l->n, path);
        else {
                log_warning_errno(r, "%s; retrying in %us", e.msg, MK_DP_RETRY_MS / 1000);
                d->labels_retry_at_ms = now_ms() + MK_DP_RETRY_MS;
        }
}

/* Stops what serves: the registrar, the servers, and with `health` the
 * health monitor, last: joining it can take up to its NVML event wait
 * (MK_HEALTH_WAIT_MS), and the kubelet should see the streams end at once.
 * Kept over a kubelet restart. */
/* ---- MPS control daemons (plugin/mps.h) ---- */

#define MK_DP_MPS_CHECK_MS 5000 /* MIGKIT_MPS_CHECK_MS overrides (tests) */

/* Quits every daemon we started, GPUs back to the default compute mode,
 * <root>/.ready removed. */
static void mps_stop(struct dp_daemon *d) {
        if (!d->mps)
                return;
        _cleanup_free_ char *ready = NULL;
        if (mk_mps_path(mps_root(d), NULL, MK_MPS_READY_FILE, &ready) >= 0)
                (void) unlink(ready);
        for (size_t i = 0; i < d->mps->n; i++) {
                struct mk_error e = {0};
                if (mk_mps_stop(d->nvml, mps_root(d), &d->mps->daemons[i], &e) < 0)
                        log_warning("Stopping the MPS control daemon of '%s': %s, ignoring",
                                    d->mps->daemons[i].resource, e.msg);
        }
        d->mps = mk_mps_plan_free(d->mps);
        free(d->mps_down);
        d->mps_down = NULL;
}

/* The daemons the resources need, started and configured before anything
 * registers (upstream's plugin waits for them instead: here the plugin runs
 * them, docs/device-plugin.md). A plan upstream rejects fails the start. */
static int mps_start(struct dp_daemon *d, struct mk_error *e) {
        _cleanup_(mk_mps_plan_freep) struct mk_mps_plan *plan = NULL;
        if (d->o->dynamic_mig)
                return 0; /* sharing does not apply */
        int r = mk_mps_plan_build(d->snapshot, d->resources, d->dp.config, &plan, e);
        if (r < 0 || plan->n == 0)
                return r;
        d->mps_down = calloc(plan->n, sizeof(*d->mps_down));
        if (!d->mps_down)
                return mk_error_set(e, -ENOMEM, "out of memory");
        d->mps = TAKE_PTR(plan);
        for (size_t i = 0; i < d->mps->n; i++) {
                const struct mk_mps_daemon *m = &d->mps->daemons[i];
                r = mk_mps_start(d->nvml, mps_root(d), m, e);
                if (r < 0)
                        return r;
                log_info("Started the MPS control daemon of '%s' (%zu GPU(s), active thread percentage %u) in '%s'",
                         m->resource, m->n_gpus, m->thread_percentage, mps_root(d));
        }
        _cleanup_free_ char *ready = NULL;
        if (mk_mps_path(mps_root(d), NULL, MK_MPS_READY_FILE, &ready) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        d->mps_check_at_ms = now_ms();
        return mk_write_file_atomic(ready, "", 0, 0644, e);
}

/* Marks every device of daemon i's resource, re-sends its list. */
static void mps_mark(struct dp_daemon *d, size_t i, bool healthy) {
        const struct mk_mps_daemon *m = &d->mps->daemons[i];
        pthread_mutex_lock(&d->lock);
        for (size_t k = 0; k < d->resources->n; k++) {
                struct mk_dp_resource *res = &d->resources->r[k];
                if (!streq(res->name, m->resource))
                        continue;
                for (size_t j = 0; j < res->n_devices; j++)
                        res->devices[j].healthy = healthy;
        }
        for (size_t k = 0; k < d->n_servers; k++)
                if (streq(d->servers[k].name, m->resource) && d->servers[k].grpc)
                        (void) publish(&d->servers[k]);
        pthread_mutex_unlock(&d->lock);
}

/* Every check period: a daemon that does not answer has its devices marked
 * Unhealthy and is started again; once it answers again they are Healthy. */
static void mps_check(struct dp_daemon *d) {
        if (!d->mps || now_ms() < d->mps_check_at_ms)
                return;
        for (size_t i = 0; i < d->mps->n; i++) {
                const struct mk_mps_daemon *m = &d->mps->daemons[i];
                struct mk_error e = {0};
                int r = mk_mps_check(mps_root(d), m, &e);
                if (r >= 0 && d->mps_down[i]) {
                        d->mps_down[i] = false;
                        mps_mark(d, i, true);
                        log_info("The MPS control daemon of '%s' answers again: its devices are Healthy", m->resource);
                }
                if (r >= 0)
                        continue;
                if (!d->mps_down[i]) {
                        d->mps_down[i] = true;
                        mps_mark(d, i, false);
                        log_warning("The MPS control daemon of '%s' does not answer (%s): its devices are Unhealthy, "
                                    "restarting it",
                                    m->resource, e.msg);
                }
                mk_error_clear(&e);
                if (mk_mps_start(d->nvml, mps_root(d), m, &e) < 0)
                        log_warning("Restarting the MPS control daemon of '%s' failed: %s; retrying", m->resource,
                                    e.msg);
        }
        const char *env = secure_getenv("MIGKIT_MPS_CHECK_MS");
        unsigned ms = MK_DP_MPS_CHECK_MS;
        if (env && mk_parse_u32(env, &ms) < 0)
                ms = MK_DP_MPS_CHECK_MS;
        d->mps_check_at_ms = now_ms() + ms;
}

static void plugin_stop(struct dp_daemon *d, bool health) {
        registrar_stop(d);
        servers_stop(d);
        if (health) {
                d->health = mk_health_stop(d->health);
                mps_stop(d);
        }
        d->up = false;
}

/* Everything from NVML on: (re)open NVML, snapshot, resources, servers,
 * health, registration, labels. With reload false only the servers and
 * the registration are redone (a kubelet restart); health states stay. */
static int plugin_start(struct dp_daemon *d, bool reload, struct mk_error *e) {
        int r;
        bool fresh = reload || !d->resources;
        if (fresh) {
                r = load_config(d, e);
                if (r < 0)
                        return r;
                d->nvml = mk_nvml_close(d->nvml);
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *snap = NULL;
                _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *res = NULL;
                r = mk_nvml_open(d->o->nvml_lib, &d->nvml, e);
                if (r >= 0)
                        r = mk_nvml_snapshot(d->nvml, &snap, e);
                if (r < 0) {
                        mk_error_prefix(e, "NVML");
                        return r;
                }
                r = d->o->dynamic_mig ? mk_dp_dynamic_resources_build(snap, d->o->soft.split, &res, e)
                                      : mk_dp_resources_build(snap, &d->dp, &res, e);
                if (r < 0)
                        return r;
                pthread_mutex_lock(&d->lock);
                mk_dp_resources_free(d->resources);
                mk_snapshot_free(d->snapshot);
                d->resources = TAKE_PTR(res);
                d->snapshot = TAKE_PTR(snap);
                pthread_mutex_unlock(&d->lock);
                cdi_refresh(d, d->snapshot);
                if (d->o->dynamic_mig)
                        log_info("%zu GPU(s), dynamic MIG for node '%s': %zu resource(s)", d->snapshot->n_gpus,
                                 d->o->node_name, d->resources->n);
                else
                        log_info("%zu GPU(s), MIG strategy %s: %zu resource(s)", d->snapshot->n_gpus,
                                 mk_mig_strategy_to_string(d->dp.mig_strategy), d->resources->n);
                if (d->resources->warning)
                        log_warning("%s", d->resources->warning);
        }
        if (fresh) {
                mps_stop(d);
                r = mps_start(d, e);
                if (r < 0) {
                        mk_error_prefix(e, "MPS");
                        return r;
                }
        }
        if (d->resources->n == 0)
                log_warning("No devices found. Waiting indefinitely.");
        r = servers_start(d, e);
        if (r < 0)
                return r;
        if (reload || !d->health) {
                d->health = mk_health_stop(d->health);
                struct mk_health_options ho = {0};
                r = mk_health_options_from_env(&ho, e);
                if (r >= 0)
                        r = mk_health_start(d->nvml, d->snapshot, &ho, on_health, d, &d->health, e);
                mk_health_options_done(&ho);
                if (r >= 0 && mk_health_disabled_reason(d->health))
                        log_warning("Health checks disabled: %s", mk_health_disabled_reason(d->health));
                if (r < 0) {
                        mk_error_prefix(e, "Health monitor");
                        return r;
                }
        }
        r = registrar_start(d, e);
        if (r < 0)
                return r;
        d->up = true;
        if (reload)
                labels_refresh(d);
        return 0;
}

/* A kubelet restart: our socket deleted or replaced, or kubelet.sock
 * re-created since we registered with it. */
static bool kubelet_restarted(struct dp_daemon *d) {
        if (!d->up)
                return false;
        for (size_t i = 0; i < d->n_servers; i++) {
                ino_t ino = 0;
                struct timespec ct = {0};
                if (stat_id(d->servers[i].socket_path, &ino, &ct) < 0 ||
                    !same_id(ino, ct, d->servers[i].ino, d->servers[i].ctime)) {
                        log_info("Socket '%s' was removed: the kubelet restarted", d->servers[i].socket_path);
                        return true;
                }
        }
        if (d->ticket && atomic_load(&d->ticket->done)) {
                ino_t ino = 0;
                struct timespec ct = {0};
                if (stat_id(d->kubelet_socket, &ino, &ct) >= 0 &&
                    !same_id(ino, ct, d->ticket->kubelet_ino, d->ticket->kubelet_ctime)) {
                        log_info("'%s' was re-created: the kubelet restarted", d->kubelet_socket);
                        return true;
                }
        }
        return false;
}

static void daemon_done(struct dp_daemon *d) {
        labeller_stop(d);
        d->follower = mk_dp_follower_stop(d->follower);
        free(d->handout_path);
        plugin_stop(d, true);
        mk_dp_resources_free(d->resources);
        mk_snapshot_free(d->snapshot);
        d->nvml = mk_nvml_close(d->nvml);
        int k = 0;
        d->cdi = mk_cdi_file_free(d->cdi, &k);
        if (k < 0)
                log_warning_errno(k, "Cannot remove the CDI spec: %m, ignoring");
        mk_plugin_config_free(d->file_cfg);
        mk_plugin_config_free(d->rc_cfg);
        mk_host_done(&d->host);
        free(d->dir);
        free(d->kubelet_socket);
        pthread_mutex_destroy(&d->dyn_lock);
        pthread_mutex_destroy(&d->lock);
}

/* After a failed (re)start: fatal only for the first start with
 * fail-on-init-error; otherwise logged, nothing served, retried after
 * retry_ms (or on SIGHUP). `reload`: the retry re-reads everything; else
 * only the servers and the registration are redone (health states kept). */
static int start_failed(struct dp_daemon *d, int r, struct mk_error *e, bool initial, bool reload,
                        unsigned retry_ms) {
        plugin_stop(d, reload);
        if (initial && d->o->fail_on_init_error)
                return r;
        log_error_errno(r, "Cannot start the device plugin: %s; serving nothing, retrying in %.1fs (or on SIGHUP)",
                        e->msg, retry_ms / 1000.0);
        d->retry_at_ms = now_ms() + retry_ms;
        d->retry_reload = reload;
        mk_error_clear(e);
        return 0;
}

/* The daemon's state from its options: the plugin directory, the kubelet
 * socket, the host roots; the options checked. On failure *d is for
 * daemon_done(). */
static int daemon_init(struct dp_daemon *d, const struct mk_dp_daemon_options *o, struct mk_error *e) {
        *d = (struct dp_daemon){.o = o};
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->dyn_lock, NULL);
        const char *dir = o->plugin_dir ? o->plugin_dir : MK_DP_DEFAULT_PLUGIN_DIR;
        if (!*dir)
                return mk_error_set(e, -EINVAL, "The device plugin directory is empty");
        d->dir = strdup(dir);
        if (!d->dir)
                return mk_error_set(e, -ENOMEM, "out of memory");
        for (size_t n = strlen(d->dir); n > 1 && d->dir[n - 1] == '/'; n--)
                d->dir[n - 1] = 0;
        /* --kubelet-socket: NULL the default in the plugin directory, "" no registration. */
        int r = o->kubelet_socket ? ((d->kubelet_socket = strdup(o->kubelet_socket)) ? 0 : -ENOMEM)
                                  : mk_path_join(d->dir, MK_DP_KUBELET_SOCKET, &d->kubelet_socket);
        if (r < 0 || mk_host_init_from_env(&d->host) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        bool have_node = o->kube && o->node_name && *o->node_name && strlen(o->node_name) <= MK_DP_MAX_NODE_NAME;
        if (o->labels == MK_DP_LABELS_NODE && !have_node)
                return mk_error_set(e, -EINVAL, "--labels node needs a Kubernetes client and a node name (NODE_NAME)");
        if (o->dynamic_mig && !have_node)
                return mk_error_set(e, -EINVAL, "--dynamic-mig needs a Kubernetes client and a node name (NODE_NAME)");
        if (o->dp.list_strategies & (MK_DP_LIST_CDI_ANNOTATIONS | MK_DP_LIST_CDI_CRI))
                return mk_cdi_file_new(o->cdi_spec_dir, o->dp.cdi_kind, &d->cdi, e);
        return 0;
}

/* Serves until a termination signal (0) or a failure that retrying does
 * not cure: reloads on SIGHUP, restarts the plugin when kubelet restarts,
 * retries failed starts and label updates when due. */
/* Dynamic MIG: whether a GPU's MIG mode is no longer the snapshot's (the
 * node agent switched an idle GPU, docs/scheduler.md "Unified pool"). A
 * MIG GPU offers as many ids as its largest instance count, a shared one
 * the split count: the device list must be rebuilt and re-sent. Looked at
 * every MK_DP_MODE_CHECK_MS, one NVML call per GPU. */
static bool modes_changed(struct dp_daemon *d, uint64_t now) {
        if (!d->o->dynamic_mig || !d->up || !d->snapshot || !d->nvml || now < d->mode_check_at_ms)
                return false;
        d->mode_check_at_ms = now + MK_DP_MODE_CHECK_MS;
        for (size_t i = 0; i < d->snapshot->n_gpus; i++) {
                const struct mk_gpu *g = &d->snapshot->gpus[i];
                enum mk_mig_mode m;
                struct mk_error e = {0};
                if (mk_nvml_mig_mode(d->nvml, g->index, &m, &e) < 0 || m == g->mig_current)
                        continue; /* an error is the health monitor's to report */
                log_info("GPU %u: MIG mode is now %s (was %s): rebuilding the device list", g->index,
                         m == MK_MIG_ENABLED ? "enabled" : "disabled",
                         g->mig_current == MK_MIG_ENABLED ? "enabled" : "disabled");
                return true;
        }
        return false;
}

static int daemon_loop(struct dp_daemon *d, int sfd, int ifd, struct mk_error *e) {
        for (;;) {
                uint64_t now = now_ms(), next = UINT64_MAX;
                if (d->retry_at_ms)
                        next = MIN(next, d->retry_at_ms);
                if (d->labels_retry_at_ms)
                        next = MIN(next, d->labels_retry_at_ms);
                /* While registering, poll for kubelet.sock changes too: an
                 * inotify event may come before the registrar recorded it. */
                int timeout = next == UINT64_MAX ? 1000 : (int) MIN(next > now ? next - now : 0, 1000u);
                struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ifd, .events = POLLIN}};
                if (poll(p, 2, timeout) < 0 && errno != EINTR)
                        return mk_error_set(e, negative_errno(), "poll: %m");
                if (p[1].revents & POLLIN) {
                        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                        while (read(ifd, buf, sizeof(buf)) > 0)
                                ; /* the state is checked below, not the events */
                }
                bool reload = false, quit = false;
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == (ssize_t) sizeof(si)) {
                        if (si.ssi_signo == SIGHUP)
                                reload = true;
                        else
                                quit = true;
                }
                if (quit) {
                        log_info("Received a termination signal, shutting down");
                        return 0;
                }
                now = now_ms();
                bool restart = false;
                if (d->retry_at_ms && now >= d->retry_at_ms) {
                        d->retry_at_ms = 0;
                        if (d->retry_reload)
                                reload = true;
                        else
                                restart = true;
                }
                if (!reload && !d->retry_at_ms && modes_changed(d, now))
                        reload = true;
                if (reload) {
                        log_info("Reloading: config, NVML, resources");
                        d->retry_at_ms = 0;
                        plugin_stop(d, true);
                        int r = plugin_start(d, true, e);
                        if (r < 0 && (r = start_failed(d, r, e, false, true, MK_DP_RETRY_MS)) < 0)
                                return r;
                        continue;
                }
                if (restart || kubelet_restarted(d)) {
                        plugin_stop(d, false);
                        int r = plugin_start(d, false, e);
                        /* A kubelet wiping its directory while we bind: soon again. */
                        if (r < 0 && (r = start_failed(d, r, e, false, false, 1000)) < 0)
                                return r;
                        continue;
                }
                if (d->labels_retry_at_ms && now >= d->labels_retry_at_ms)
                        labels_refresh(d);
                mps_check(d);
        }
}

int mk_dp_daemon_run(const struct mk_dp_daemon_options *o, struct mk_error *e) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        /* Before gRPC and the monitor start threads: they inherit the mask. */
        int r = pthread_sigmask(SIG_BLOCK, &mask, NULL);
        if (r != 0)
                return mk_error_set(e, -r, "Cannot block signals");
        _cleanup_close_ int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                return mk_error_set(e, negative_errno(), "signalfd: %m");

        struct dp_daemon d;
        r = daemon_init(&d, o, e);
        if (r < 0) {
                daemon_done(&d);
                return r;
        }
        /* The directory is watched, not the files: kubelet.sock is
         * re-created on a kubelet restart (IN_CREATE, IN_MOVED_TO), our
         * sockets are deleted by it (IN_DELETE). */
        _cleanup_close_ int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (ifd < 0 || inotify_add_watch(ifd, d.dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
                r = negative_errno();
                daemon_done(&d);
                return mk_error_set(e, r, "Cannot watch the device plugin directory '%s': %m",
                                    o->plugin_dir ? o->plugin_dir : MK_DP_DEFAULT_PLUGIN_DIR);
        }

        if (o->labels == MK_DP_LABELS_NODE && (r = labeller_start(&d, e)) < 0) {
                daemon_done(&d);
                return r;
        }
        mk_grpc_global_init();
        if (o->dynamic_mig && o->follow_handouts) {
                r = mk_path_join(d.dir, MK_DP_HANDOUT_FILE, &d.handout_path);
                const struct mk_dp_follower_options fo = {
                        .kube = o->kube,
                        .node = o->node_name,
                        .socket = o->pod_resources_socket,
                        .state_path = d.handout_path,
                        .serialize = &d.dyn_lock,
                };
                if (r >= 0)
                        r = mk_dp_follower_start(&fo, &d.follower, e);
                else
                        mk_error_set(e, r, "out of memory");
                if (r < 0) {
                        daemon_done(&d);
                        mk_grpc_global_shutdown();
                        return r;
                }
        }
        r = plugin_start(&d, true, e);
        if (r < 0)
                r = start_failed(&d, r, e, true, true, MK_DP_RETRY_MS);
        if (r < 0) {
                daemon_done(&d);
                mk_grpc_global_shutdown();
                return r;
        }
        r = daemon_loop(&d, sfd, ifd, e);
        if (r < 0)
                log_error_errno(r, "Device plugin failed: %s", e->msg);
        daemon_done(&d);
        if (r >= 0 && o->labels == MK_DP_LABELS_NFD_FILE) {
                /* As GFD: the file goes with the plugin, so stale labels do not stay. */
                const char *path = o->nfd_features_file ? o->nfd_features_file : MK_DP_DEFAULT_NFD_FILE;
                if (unlink(path) < 0 && errno != ENOENT)
                        log_warning("Cannot remove '%s': %m, ignoring", path);
        }
        mk_grpc_global_shutdown();
        return r;
}
