/* What the device plugin daemon's files share (plugin/daemon.h is the
 * daemon's public side): its state, one gRPC server per resource, the gRPC
 * method names and the functions one of its files calls in another. Only
 * plugin/daemon*.c include this header.
 *   daemon.c           the run loop: start, stop, restart, signals, timers
 *   daemon-service.c   the DevicePlugin service's unary methods (Allocate, ...)
 *   daemon-listwatch.c the ListAndWatch streams: device lists, health changes
 *   daemon-register.c  the servers' sockets, registration with the kubelet,
 *                      the kubelet restart watch
 *   daemon-labels.c    GPU feature labels: NFD file, Node patch, its thread
 *   daemon-mps.c       the MPS control daemons the plugin runs */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <protobuf-c/protobuf-c.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/host.h"
#include "plugin/daemon.h"
#include "plugin/mps.h"
#include "plugin/resources.h"

struct mk_cdi_file;
struct mk_dp_follower;
struct mk_grpc_server;
struct mk_health;
struct mk_health_change;
struct mk_labels;
struct mk_mps_plan;
struct mk_nvml;
struct mk_plugin_config;
struct mk_snapshot;

#define METHOD_OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define METHOD_LIST_AND_WATCH "/v1beta1.DevicePlugin/ListAndWatch"
#define METHOD_PREFERRED "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define METHOD_ALLOCATE "/v1beta1.DevicePlugin/Allocate"
#define METHOD_PRESTART "/v1beta1.DevicePlugin/PreStartContainer"
#define METHOD_REGISTER "/v1beta1.Registration/Register"

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

static inline uint64_t dp_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* How long after a failed start or label publication it is tried again. */
static inline unsigned dp_retry_ms(const struct dp_daemon *d) {
        return d->o->retry_ms ? d->o->retry_ms : MK_DP_RETRY_MS;
}

static inline const struct mk_dp_resource *dp_server_resource(const struct dp_server *s) {
        return &s->d->resources->r[s->index];
}

static inline const char *dp_mps_root(const struct dp_daemon *d) {
        return d->o->mps_root && *d->o->mps_root ? d->o->mps_root : MK_MPS_DEFAULT_ROOT;
}

/* daemon-service.c: the unary methods, on gRPC's threads */
void dp_cdi_refresh(struct dp_daemon *d, const struct mk_snapshot *s);
extern const char *const dp_unary_methods[];
int dp_on_unary(void *userdata, const char *method, const uint8_t *req, size_t len, struct mk_buf *resp,
                struct mk_error *e);
int dp_pack_msg(const ProtobufCMessage *m, struct mk_buf *b);

/* daemon-listwatch.c */
int dp_publish(struct dp_server *s);
void dp_on_health(void *userdata, const struct mk_health_change *c);

/* daemon-register.c */
void dp_servers_stop(struct dp_daemon *d);
int dp_servers_start(struct dp_daemon *d, struct mk_error *e);
int dp_registrar_start(struct dp_daemon *d, struct mk_error *e);
void dp_registrar_stop(struct dp_daemon *d);
bool dp_kubelet_restarted(struct dp_daemon *d);

/* daemon-labels.c */
int dp_labeller_start(struct dp_daemon *d, struct mk_error *e);
void dp_labeller_stop(struct dp_daemon *d);
void dp_labels_refresh(struct dp_daemon *d);

/* daemon-mps.c */
void dp_mps_stop(struct dp_daemon *d);
int dp_mps_start(struct dp_daemon *d, struct mk_error *e);
void dp_mps_check(struct dp_daemon *d);
