/* The device plugin's servers and its registration with the kubelet
 * (plugin/daemon-internal.h): one gRPC server per resource on a socket in
 * the plugin directory, a registrar thread per start that registers them on
 * kubelet.sock, and the watch that tells a kubelet restart (our socket gone
 * or replaced, kubelet.sock re-created). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "grpc/client.h"
#include "grpc/server.h"
#include "plugin/daemon-internal.h"
#include "plugin/daemon.h"
#include "proto/deviceplugin.pb-c.h"

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
void dp_servers_stop(struct dp_daemon *d) {
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

int dp_servers_start(struct dp_daemon *d, struct mk_error *e) {
        size_t n = d->resources->n;
        struct dp_server *servers = calloc(n ? n : 1, sizeof(*servers));
        if (!servers)
                return mk_error_set(e, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                servers[i].d = d;
                servers[i].index = i;
                snprintf(servers[i].name, sizeof(servers[i].name), "%s", d->resources->r[i].name);
        }
        /* Published before any server runs (grpc NULL: skipped by dp_on_health),
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
                        .unary_methods = dp_unary_methods,
                        .unary = dp_on_unary,
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
                r = dp_publish(s);
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
        int r = dp_pack_msg(&req.base, &in);
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

int dp_registrar_start(struct dp_daemon *d, struct mk_error *e) {
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

void dp_registrar_stop(struct dp_daemon *d) {
        if (!d->ticket)
                return;
        atomic_store(&d->ticket->cancelled, true);
        d->ticket = ticket_unref(d->ticket);
}

/* A kubelet restart: our socket deleted or replaced, or kubelet.sock
 * re-created since we registered with it. */
bool dp_kubelet_restarted(struct dp_daemon *d) {
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
