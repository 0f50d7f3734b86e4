/* The extender's HTTP server, informers and bind (server.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/dynbuf.h"
#include "base/hashmap.h"
#include "base/log.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/informer.h"
#include "kube/json.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "sched/ledger.h"
#include "sched/request.h"
#include "sched/server.h"

struct informer_thread {
        struct mk_sched_server *srv;
        const char *path;
        bool pods;
        pthread_t thread;
        bool started;
};

/* Open connections, for the limits (docs/scheduler.md, "Limits"): rather
 * than refuse a new connection at a limit (which locked out kube-scheduler
 * and the probes while others held every slot), the idlest one in the way
 * is closed to make room: first among connections that never completed a
 * request (half-sent headers, idle sockets), then among those that did;
 * each list is kept oldest activity first. */
struct conn {
        struct conn *prev, *next;       /* in fresh or served, oldest activity first */
        int fd;
        bool served;                    /* completed a request */
        bool evicted;                   /* shut down by us, closing: no longer counted */
        struct conn_ip *ip;
};

struct conn_ip {
        unsigned n;                     /* counted connections from this address */
        unsigned refs;                  /* connections pointing here, the evicted ones still closing too */
        char key[48];
};

struct conn_list {
        struct conn *head, *tail;
};

struct conn_table {
        pthread_mutex_t lock;
        struct conn_list fresh, served;
        struct mk_hashmap ips;          /* address text -> struct conn_ip */
        unsigned n;                     /* counted (open, not evicted) */
        unsigned max, per_client;
        atomic_ulong evicted_total, evicted_since_log;
        uint64_t last_log_s;
};

/* One libmicrohttpd message format and when it was last printed. */
struct mhd_note {
        const char *fm;
        uint64_t last_s;
        unsigned suppressed;
};

struct mk_sched_server {
        struct MHD_Daemon *mhd;
        struct mk_sched *sched;         /* NULL: the node agent's endpoint */
        char *(*metrics)(void *userdata);
        void *metrics_userdata;
        struct mk_kube *kube;
        size_t max_request, max_values, max_buffered;
        unsigned request_timeout_s;
        atomic_size_t buffered;         /* body bytes held by all requests */
        pthread_mutex_t big_lock;       /* one big body parsed at a time */
        unsigned port;
        atomic_bool cancel;
        atomic_bool ready;
        pthread_mutex_t fail_lock;
        char failed[MK_ERROR_MSG_MAX];
        struct informer_thread inf[2];
        struct conn_table conns;
        pthread_mutex_t log_lock;       /* libmicrohttpd's messages, once per interval */
        struct mhd_note notes[8];
};

/* --- bind --- */

#define MK_SCHED_EVENT_COMPONENT "migkit-scheduler"

/* The mode a reservation gives its pod (its first device's). */
static const char *claim_mode(const struct mk_claim *c) {
        return mk_claim_mode_to_string(c->n_devices > 0 ? c->devices[0].mode : MK_CLAIM_MIG);
}

/* Tells a pod without nvidia.com/vgpu-mode which mode it got and why (an
 * Event; failures are only logged). */
static void post_mode_chosen(struct mk_kube *k, const struct mk_bind_args *a, const struct mk_claim *c) {
        char msg[512], path[MK_K8S_PATH_MAX];
        /* Without the mode choice's reason: a mig node's MIG fit placed it. */
        snprintf(msg, sizeof(msg), "nvidia.com/vgpu-mode not set: migkit chose %s on node %s (%s)", claim_mode(c),
                 a->node, c->mode_why ? c->mode_why : "the node places MIG instances only");
        json_t *ev = mk_kube_event_new(a->pod_namespace, "Pod", a->pod_name, a->pod_uid, false, "VGPUModeChosen",
                                       msg, MK_SCHED_EVENT_COMPONENT, a->node);
        struct mk_error e = {0};
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", a->pod_namespace);
        if (!ev || mk_kube_post(k, path, ev, NULL, &e) < 0)
                log_warning("Cannot post Event VGPUModeChosen on pod %s/%s, ignoring: %s", a->pod_namespace,
                            a->pod_name, ev ? e.msg : "out of memory");
        json_decref(ev);
}

/* Writes `c` into the Node's bind ledger (ledger.h) as a compare-and-swap
 * on the annotation alone: a JSON patch that tests the value read, then
 * replaces it (the node agent's inventory writes do not conflict with it);
 * the first ledger of a Node is written with the Node's resourceVersion as
 * the precondition. -EBUSY when another bind wrote the ledger since `node`
 * was read. */
static int ledger_write(struct mk_kube *k, const char *npath, const json_t *node, json_t *ledger,
                        const struct mk_claim *c, struct mk_error *e) {
        static const char path[] = "/metadata/annotations/migkit.io~1mig-binds"; /* RFC 6901: '/' is ~1 */
        const char *rv = mk_kube_meta(node, "resourceVersion");
        const char *old = mk_kube_annotation(node, MK_ANN_BINDS);
        if (!rv)
                return mk_error_set(e, -EINVAL, "node '%s' has no resourceVersion", c->node);
        int r = mk_sched_ledger_put(ledger, c);
        if (r == -E2BIG)
                return mk_error_set(e, -EBUSY, "node '%s': %u binds in the last %d s, try later", c->node,
                                    MK_SCHED_LEDGER_MAX, MK_SCHED_LEDGER_TTL_S);
        if (r < 0)
                return r;
        _cleanup_free_ char *value = json_dumps(ledger, JSON_COMPACT);
        if (!value)
                return -ENOMEM;
        json_t *patch = old ? json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "op", "test", "path", path, "value", old,
                                        "op", "replace", "path", path, "value", value)
                            : json_pack("{s:{s:s, s:{s:s}}}", "metadata", "resourceVersion", rv, "annotations",
                                        MK_ANN_BINDS, value);
        if (!patch)
                return -ENOMEM;
        r = mk_kube_patch(k, npath, old ? MK_KUBE_PATCH_JSON : MK_KUBE_PATCH_MERGE, patch, NULL, e);
        json_decref(patch);
        /* A failed test operation is 422 (-EINVAL); the patch is ours and
         * valid otherwise: the ledger changed. */
        return old && r == -EINVAL ? -EBUSY : r;
}

/* One try at the reservation of a bind: the Node read and its ledger taken
 * into the cache (what other replicas reserved there), the pod read, a
 * reservation decided, written to the ledger (Node resourceVersion
 * precondition) and then onto the pod (pod resourceVersion precondition).
 * -EBUSY: a conflict, try again. *ret_chosen: the reservation, when the pod
 * named no mode. */
static int reserve_once(struct mk_sched *s, struct mk_kube *k, const struct mk_bind_args *a, const char *path,
                        const char *npath, struct mk_claim **ret_chosen, struct mk_error *e) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t now = ts.tv_sec;
        json_t *node = NULL, *ledger = NULL, *pod = NULL;
        _cleanup_free_ struct mk_claim *c = NULL;
        _cleanup_free_ char *value = NULL;
        int r = mk_kube_get(k, npath, &node, e);
        if (r < 0)
                return r;
        struct mk_error le = {0};
        if (mk_sched_ledger_read(node, now, &ledger, &le) < 0) {
                if (!ledger) {
                        json_decref(node);
                        return -ENOMEM;
                }
                log_warning("Node %s: %s, dropping the bad entries", a->node, le.msg);
        }
        mk_sched_note_ledger(s, ledger, a->pod_uid, now);
        if ((r = mk_kube_get(k, path, &pod, e)) < 0)
                goto out;
        const char *uid = mk_kube_meta(pod, "uid");
        const char *rv = mk_kube_meta(pod, "resourceVersion");
        const char *old = mk_kube_annotation(pod, MK_ANN_RESERVATION);
        if (!uid || !streq(uid, a->pod_uid) || !rv) {
                r = mk_error_set(e, -ESTALE, "pod %s/%s has uid '%s', not '%s' (recreated)", a->pod_namespace,
                                 a->pod_name, uid ? uid : "", a->pod_uid);
                goto out;
        }
        if (!(c = calloc(1, sizeof(*c)))) {
                r = -ENOMEM;
                goto out;
        }
        r = mk_sched_reserve(s, pod, a->node, now, c, e);
        if (r >= 0 && c->n_devices > 0)
                r = mk_claim_reservation_format(c, &value);
        if (r < 0 || !value || (old && streq(old, value)))
                goto out; /* nothing to write: no device asked, or a retried bind */
        bool choose = !mk_kube_annotation(pod, MK_ANN_VGPU_MODE);
        r = ledger_write(k, npath, node, ledger, c, e);
        if (r >= 0) {
                json_t *patch = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "resourceVersion", rv, "annotations",
                                          MK_ANN_RESERVATION, value);
                if (patch && choose)
                        json_object_set_new(json_object_get(json_object_get(patch, "metadata"), "annotations"),
                                            MK_ANN_MODE_CHOSEN, json_string(claim_mode(c)));
                r = patch ? mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, patch, NULL, e) : -ENOMEM;
                json_decref(patch);
        }
        if (r == -EBUSY)
                log_debug_area("sched", "Pod %s/%s or node %s changed while binding, planning again",
                               a->pod_namespace, a->pod_name, a->node);
        if (r < 0)
                mk_sched_unreserve(s, a->pod_uid);
        else if (choose)
                *ret_chosen = TAKE_PTR(c);
out:
        json_decref(pod);
        json_decref(ledger);
        json_decref(node);
        return r;
}

int mk_sched_bind(struct mk_sched *s, struct mk_kube *k, const struct mk_bind_args *a, struct mk_error *e) {
        /* The names are checked by mk_bind_args_parse; escaped anyway. */
        char path[MK_K8S_PATH_MAX], npath[MK_K8S_PATH_MAX];
        if (mk_kube_core_path(a->pod_namespace, "pods", a->pod_name, path, sizeof(path)) < 0 ||
            mk_kube_core_path(NULL, "nodes", a->node, npath, sizeof(npath)) < 0)
                return mk_error_set(e, -EINVAL, "pod or node name too long");
        struct mk_sched_stats *st = mk_sched_stats(s);
        int r = -EBUSY;
        _cleanup_free_ struct mk_claim *chosen = NULL; /* the reservation made, when the pod named no mode */
        for (unsigned attempt = 0; attempt < MK_SCHED_BIND_ATTEMPTS && r == -EBUSY; attempt++) {
                if (attempt > 0) {
                        /* Binds on one Node are serialised by its ledger: back off,
                         * with jitter, so that concurrent ones do not meet again. */
                        atomic_fetch_add(&st->bind_conflicts, 1);
                        struct timespec d = {0, (long) (attempt * 5 + (unsigned) rand() % 20) * 1000000L};
                        nanosleep(&d, NULL);
                }
                r = reserve_once(s, k, a, path, npath, &chosen, e);
        }
        if (r < 0)
                return r;
        json_t *binding = mk_bind_object(a);
        if (!binding)
                return -ENOMEM;
        char bpath[sizeof(path) + 16];
        snprintf(bpath, sizeof(bpath), "%s/binding", path);
        r = mk_kube_post(k, bpath, binding, NULL, e);
        json_decref(binding);
        if (r >= 0 && chosen)
                post_mode_chosen(k, a, chosen);
        if (r < 0) {
                mk_sched_unreserve(s, a->pod_uid);
                json_t *ch = json_pack("{s:n}", MK_ANN_RESERVATION);
                struct mk_error ue = {0};
                if (ch && mk_kube_patch_metadata(k, path, "annotations", ch, NULL, &ue) < 0)
                        log_debug_area("sched", "Cannot remove the reservation of %s/%s: %s", a->pod_namespace,
                                       a->pod_name, ue.msg);
                json_decref(ch);
        }
        return r;
}

/* --- metrics --- */

char *mk_sched_metrics_text(struct mk_sched *s) {
        struct mk_sched_stats *st = mk_sched_stats(s);
        size_t nodes, claims;
        mk_sched_counts(s, &nodes, &claims);
        struct mk_buf b;
        mk_buf_init(&b, 1u << 16);
        int r = mk_buf_printf(
                &b,
                "# HELP migkit_scheduler_requests_total Extender requests by verb.\n"
                "# TYPE migkit_scheduler_requests_total counter\n"
                "migkit_scheduler_requests_total{verb=\"filter\"} %lu\n"
                "migkit_scheduler_requests_total{verb=\"prioritize\"} %lu\n"
                "migkit_scheduler_requests_total{verb=\"bind\"} %lu\n"
                "# HELP migkit_scheduler_binds_total Binds by result.\n"
                "# TYPE migkit_scheduler_binds_total counter\n"
                "migkit_scheduler_binds_total{result=\"ok\"} %lu\n"
                "migkit_scheduler_binds_total{result=\"error\"} %lu\n"
                "# HELP migkit_scheduler_bind_conflicts_total Reservations re-planned after a conflict.\n"
                "# TYPE migkit_scheduler_bind_conflicts_total counter\n"
                "migkit_scheduler_bind_conflicts_total %lu\n"
                "# HELP migkit_scheduler_request_errors_total Malformed extender requests.\n"
                "# TYPE migkit_scheduler_request_errors_total counter\n"
                "migkit_scheduler_request_errors_total %lu\n"
                "# HELP migkit_scheduler_filter_seconds_total Time spent deciding filters.\n"
                "# TYPE migkit_scheduler_filter_seconds_total counter\n"
                "migkit_scheduler_filter_seconds_total %.9f\n"
                "# HELP migkit_scheduler_filter_nodes_total Nodes evaluated by filters.\n"
                "# TYPE migkit_scheduler_filter_nodes_total counter\n"
                "migkit_scheduler_filter_nodes_total %lu\n"
                "# HELP migkit_scheduler_filter_feasible_total Nodes found feasible by filters.\n"
                "# TYPE migkit_scheduler_filter_feasible_total counter\n"
                "migkit_scheduler_filter_feasible_total %lu\n"
                "# HELP migkit_scheduler_memo_hits_total Node decisions answered from the node's memo (same state, "
                "same request shape).\n"
                "# TYPE migkit_scheduler_memo_hits_total counter\n"
                "migkit_scheduler_memo_hits_total %lu\n"
                "# HELP migkit_scheduler_malformed_objects_total Object versions from the apiserver skipped as "
                "malformed (a NUL byte in a field migkit reads); the last readable version of each is kept.\n"
                "# TYPE migkit_scheduler_malformed_objects_total counter\n"
                "migkit_scheduler_malformed_objects_total{kind=\"node\"} %lu\n"
                "migkit_scheduler_malformed_objects_total{kind=\"pod\"} %lu\n"
                "# HELP migkit_scheduler_nodes Nodes in the cache.\n"
                "# TYPE migkit_scheduler_nodes gauge\n"
                "migkit_scheduler_nodes %zu\n"
                "# HELP migkit_scheduler_reservations Pods holding a reservation in the cache.\n"
                "# TYPE migkit_scheduler_reservations gauge\n"
                "migkit_scheduler_reservations %zu\n",
                atomic_load(&st->filter), atomic_load(&st->prioritize), atomic_load(&st->bind),
                atomic_load(&st->bind_ok), atomic_load(&st->bind_errors), atomic_load(&st->bind_conflicts),
                atomic_load(&st->errors), (double) atomic_load(&st->filter_ns_total) / 1e9,
                atomic_load(&st->filter_nodes_total), atomic_load(&st->feasible_total), atomic_load(&st->memo_hits),
                atomic_load(&st->bad_nodes), atomic_load(&st->bad_pods), nodes, claims);
        if (r < 0) {
                mk_buf_done(&b);
                return NULL;
        }
        return mk_buf_take(&b);
}

/* --- connections --- */

#define MK_SCHED_LOG_INTERVAL_S 60      /* a repeated limit message is printed once per interval */
#define MK_SCHED_CLOSING_SLACK 256u     /* libmicrohttpd's limit over ours: evicted connections still closing */

static uint64_t mono_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec;
}

static void list_remove(struct conn_list *l, struct conn *c) {
        if (c->prev)
                c->prev->next = c->next;
        else
                l->head = c->next;
        if (c->next)
                c->next->prev = c->prev;
        else
                l->tail = c->prev;
        c->prev = c->next = NULL;
}

static void list_append(struct conn_list *l, struct conn *c) {
        c->prev = l->tail;
        c->next = NULL;
        if (l->tail)
                l->tail->next = c;
        else
                l->head = c;
        l->tail = c;
}

static struct conn_list *list_of(struct conn_table *t, struct conn *c) {
        return c->served ? &t->served : &t->fresh;
}

/* Stops counting c and shuts its socket down: libmicrohttpd's thread sees
 * the end of the stream and closes it (the fd stays valid until then: it
 * is closed only after NOTIFY_CLOSED, which takes the table's lock). */
static void conn_evict(struct conn_table *t, struct conn *c) {
        list_remove(list_of(t, c), c);
        c->evicted = true;
        c->ip->n--;
        t->n--;
        (void) shutdown(c->fd, SHUT_RDWR);
        atomic_fetch_add(&t->evicted_total, 1);
        atomic_fetch_add(&t->evicted_since_log, 1);
}

/* The idlest connection to close for a new one: from address `ip` when
 * that address is at its limit, else any; never-served ones first. */
static struct conn *conn_victim(struct conn_table *t, const struct conn_ip *ip, const struct conn *self) {
        struct conn_list *lists[2] = {&t->fresh, &t->served};
        for (int i = 0; i < 2; i++)
                for (struct conn *c = lists[i]->head; c; c = c->next)
                        if (c != self && (!ip || c->ip == ip))
                                return c;
        return NULL;
}

static void conn_note_evictions(struct conn_table *t) {
        uint64_t now = mono_s();
        if (t->last_log_s && now - t->last_log_s < MK_SCHED_LOG_INTERVAL_S)
                return;
        unsigned long n = atomic_exchange(&t->evicted_since_log, 0);
        if (n == 0)
                return;
        t->last_log_s = now;
        log_warning("Connection limits reached (%u in all, %u per address): closed %lu idle connection(s) to make "
                    "room for new ones; said at most once a minute",
                    t->max, t->per_client, n);
}

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
        struct mk_sched_server *srv = cls;
        struct conn_table *t = &srv->conns;
        if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
                struct conn *c = *socket_context;
                if (!c)
                        return;
                pthread_mutex_lock(&t->lock);
                if (!c->evicted) {
                        list_remove(list_of(t, c), c);
                        c->ip->n--;
                        t->n--;
                }
                if (--c->ip->refs == 0)
                        free(mk_hashmap_remove(&t->ips, c->ip->key));
                pthread_mutex_unlock(&t->lock);
                free(c);
                *socket_context = NULL;
                return;
        }
        if (toe != MHD_CONNECTION_NOTIFY_STARTED)
                return;
        const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        char key[48] = "?";
        if (ai && ai->client_addr) {
                const struct sockaddr *sa = ai->client_addr;
                if (sa->sa_family == AF_INET)
                        inet_ntop(AF_INET, &((const struct sockaddr_in *) (const void *) sa)->sin_addr, key,
                                  sizeof(key));
                else if (sa->sa_family == AF_INET6)
                        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) (const void *) sa)->sin6_addr, key,
                                  sizeof(key));
        }
        struct conn *c = calloc(1, sizeof(*c));
        if (!c || !fdi)
                goto refuse;
        c->fd = fdi->connect_fd;
        pthread_mutex_lock(&t->lock);
        struct conn_ip *ip = mk_hashmap_get(&t->ips, key);
        if (!ip) {
                ip = calloc(1, sizeof(*ip));
                if (ip)
                        snprintf(ip->key, sizeof(ip->key), "%s", key);
                if (!ip || mk_hashmap_put(&t->ips, ip->key, ip) < 0) {
                        pthread_mutex_unlock(&t->lock);
                        free(ip);
                        goto refuse;
                }
        }
        c->ip = ip;
        ip->n++;
        ip->refs++;
        t->n++;
        list_append(&t->fresh, c);
        *socket_context = c;
        /* Over a limit: the idlest in the way makes room (the new one is the
         * most recent, so it is never its own victim while another exists). */
        while (ip->n > t->per_client || t->n > t->max) {
                struct conn *v = conn_victim(t, ip->n > t->per_client ? ip : NULL, c);
                if (!v)
                        break;
                conn_evict(t, v);
        }
        conn_note_evictions(t);
        pthread_mutex_unlock(&t->lock);
        return;
refuse:
        free(c);
        if (fdi)
                (void) shutdown(fdi->connect_fd, SHUT_RDWR); /* out of memory: this one is not served */
}

/* A request's activity on its connection: it moves to the end of its list
 * (served once a request completed). */
static void conn_active(struct mk_sched_server *srv, struct MHD_Connection *connection, bool completed) {
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        struct conn *c = ci ? ci->socket_context : NULL;
        if (!c)
                return;
        struct conn_table *t = &srv->conns;
        pthread_mutex_lock(&t->lock);
        if (!c->evicted) {
                list_remove(list_of(t, c), c);
                c->served = c->served || completed;
                list_append(list_of(t, c), c);
        }
        pthread_mutex_unlock(&t->lock);
}

/* `text` (taken; NULL passes) with the connection gauges appended. */
static char *conn_metrics(struct mk_sched_server *srv, char *text) {
        if (!text)
                return NULL;
        struct conn_table *t = &srv->conns;
        pthread_mutex_lock(&t->lock);
        unsigned open = t->n;
        pthread_mutex_unlock(&t->lock);
        char *out = NULL;
        if (asprintf(&out,
                     "%s# HELP migkit_http_connections Open HTTP connections (counted against the limits).\n"
                     "# TYPE migkit_http_connections gauge\n"
                     "migkit_http_connections %u\n"
                     "# HELP migkit_http_connections_evicted_total Idle connections closed to make room for a new "
                     "one at a connection limit.\n"
                     "# TYPE migkit_http_connections_evicted_total counter\n"
                     "migkit_http_connections_evicted_total %lu\n",
                     text, open, atomic_load(&t->evicted_total)) < 0)
                out = NULL;
        free(text);
        return out;
}

/* libmicrohttpd's own messages, each format at most once per interval
 * (a burst of refusals printed one line each before). */
/* libmicrohttpd's own format and arguments (clang: a va_list format). */
static void on_mhd_log(void *cls, const char *fm, va_list ap) _printf_(2, 0);
static void on_mhd_log(void *cls, const char *fm, va_list ap) {
        struct mk_sched_server *srv = cls;
        uint64_t now = mono_s();
        unsigned suppressed = 0;
        pthread_mutex_lock(&srv->log_lock);
        struct mhd_note *n = NULL, *oldest = &srv->notes[0];
        for (size_t i = 0; i < ELEMENTSOF(srv->notes) && !n; i++) {
                if (srv->notes[i].fm == fm)
                        n = &srv->notes[i];
                else if (srv->notes[i].last_s < oldest->last_s)
                        oldest = &srv->notes[i];
        }
        if (n && now - n->last_s < MK_SCHED_LOG_INTERVAL_S) {
                n->suppressed++;
                pthread_mutex_unlock(&srv->log_lock);
                return;
        }
        if (!n) {
                n = oldest;
                *n = (struct mhd_note) {.fm = fm};
        }
        suppressed = n->suppressed;
        n->suppressed = 0;
        n->last_s = now;
        pthread_mutex_unlock(&srv->log_lock);
        char msg[512];
        vsnprintf(msg, sizeof(msg), fm, ap);
        size_t len = strlen(msg);
        while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
                msg[--len] = 0;
        if (suppressed)
                log_warning("HTTP server: %s (and %u more like it in the last %d s)", msg, suppressed,
                            MK_SCHED_LOG_INTERVAL_S);
        else
                log_warning("HTTP server: %s (said at most once every %d s)", msg, MK_SCHED_LOG_INTERVAL_S);
}

/* --- HTTP --- */

struct request {
        struct mk_buf body;
        struct mk_sched_body_count count;
        uint64_t start_s;
        size_t held;                    /* bytes counted in srv->buffered */
        unsigned refused;               /* a limit's status; the rest of the body is read and dropped */
        char why[128];
};

static uint64_t now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, char *text) {
        if (!text)
                return MHD_NO;
        struct MHD_Response *resp =
                MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", type);
        enum MHD_Result ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static enum MHD_Result respond_json_status(struct MHD_Connection *conn, unsigned status, json_t *v) {
        char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
        json_decref(v);
        return respond(conn, status, "application/json", s);
}

static enum MHD_Result respond_json(struct MHD_Connection *conn, json_t *v) {
        return respond_json_status(conn, MHD_HTTP_OK, v);
}

static json_t *handle_bind(struct mk_sched_server *srv, const json_t *args, unsigned *ret_status) {
        struct mk_sched_stats *st = mk_sched_stats(srv->sched);
        atomic_fetch_add(&st->bind, 1);
        struct mk_bind_args a;
        struct mk_error e = {0};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
        int r = mk_bind_args_parse(args, &a, &e);
        if (r < 0) {
                /* Refused before any apiserver call: 400, the field named. */
                atomic_fetch_add(&st->bind_errors, 1);
                atomic_fetch_add(&st->errors, 1);
                *ret_status = MHD_HTTP_BAD_REQUEST;
                return json_pack("{s:s}", "Error", mk_error_format(&e, buf, sizeof(buf)));
        }
        if (!srv->kube)
                r = mk_error_set(&e, -ENOTCONN, "no apiserver connection");
        if (r >= 0)
                r = mk_sched_bind(srv->sched, srv->kube, &a, &e);
        if (r < 0) {
                atomic_fetch_add(&st->bind_errors, 1);
                /* kube-scheduler logs the Error and records it on the pod. */
                log_debug_area("sched", "Bind of pod %s/%s to node '%s' failed: %s", a.pod_namespace, a.pod_name,
                               a.node, mk_error_format(&e, buf, sizeof(buf)));
                return json_pack("{s:s}", "Error", mk_error_format(&e, buf, sizeof(buf)));
        }
        atomic_fetch_add(&st->bind_ok, 1);
        log_debug_area("sched", "Bound pod %s/%s to node '%s'", a.pod_namespace, a.pod_name, a.node);
        return json_pack("{s:s}", "Error", "");
}

static enum MHD_Result count_content_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                            const char *value) {
        (void) kind;
        (void) value;
        if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
                (*(unsigned *) cls)++;
        return MHD_YES;
}

static enum MHD_Result answer(struct mk_sched_server *srv, struct MHD_Connection *conn, const char *url,
                             struct request *rq);

/* A request refused by a limit: counted as an error, answered with status
 * (the connection is closed when the body was not read whole). */
_printf_(4, 5) static enum MHD_Result refuse(struct mk_sched_server *srv, struct MHD_Connection *conn,
                                            unsigned status, const char *fmt, ...) {
        atomic_fetch_add(&mk_sched_stats(srv->sched)->errors, 1);
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
        va_end(ap);
        size_t len = n < 0 ? 0 : MIN((size_t) n, sizeof(msg) - 2);
        msg[len] = '\n';
        msg[len + 1] = 0;
        if (respond(conn, status, "text/plain", strdup(msg)) == MHD_YES)
                return MHD_YES;
        return MHD_NO; /* libmicrohttpd cannot answer now: the connection is closed */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
        struct mk_sched_server *srv = cls;
        (void) version;
        conn_active(srv, conn, false);
        bool known = srv->sched && (streq(url, "/filter") || streq(url, "/prioritize") || streq(url, "/bind"));
        if (streq(method, "GET") && !known) {
                if (streq(url, "/healthz"))
                        return respond(conn, MHD_HTTP_OK, "text/plain", strdup("ok\n"));
                if (streq(url, "/readyz"))
                        return atomic_load(&srv->ready) ? respond(conn, MHD_HTTP_OK, "text/plain", strdup("ok\n"))
                                                        : respond(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                                                                  strdup("informers not synced\n"));
                if (streq(url, "/metrics")) {
                        char *text = conn_metrics(srv, srv->sched ? mk_sched_metrics_text(srv->sched)
                                                                  : srv->metrics(srv->metrics_userdata));
                        return text ? respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4", text)
                                    : respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
                                              strdup("metrics unavailable\n"));
                }
                return respond(conn, MHD_HTTP_NOT_FOUND, "text/plain", strdup("not found\n"));
        }
        if (!streq(method, "POST") || !known)
                return respond(conn, known ? MHD_HTTP_METHOD_NOT_ALLOWED : MHD_HTTP_NOT_FOUND, "text/plain",
                               strdup(known ? "use POST\n" : "not found\n"));
        struct request *rq = *con_cls;
        if (!rq) {
                /* Two Content-Length headers (libmicrohttpd takes one): refused,
                 * as RFC 9112 6.3 asks of a server. */
                unsigned n_length = 0;
                MHD_get_connection_values(conn, MHD_HEADER_KIND, count_content_length, &n_length);
                if (n_length > 1)
                        return respond(conn, MHD_HTTP_BAD_REQUEST, "text/plain",
                                       strdup("more than one Content-Length header\n"));
                /* A declared length over the cap: 413 before reading the body. */
                const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
                if (cl && strtoull(cl, NULL, 10) > srv->max_request)
                        return refuse(srv, conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body larger than %zu bytes",
                                      srv->max_request);
                rq = calloc(1, sizeof(*rq));
                if (!rq)
                        return MHD_NO;
                mk_buf_init(&rq->body, srv->max_request);
                rq->start_s = now_s();
                *con_cls = rq;
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                /* Counted as they arrive, refused at the first byte over a
                 * limit, before any parse: the body's memory is given back
                 * at once, the rest of it read and dropped (libmicrohttpd
                 * 0.9 answers only once the body is read), then the status. */
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (now_s() - rq->start_s > srv->request_timeout_s)
                        return MHD_NO; /* a trickled body: the connection is closed */
                if (rq->refused)
                        return MHD_YES;
                if (rq->body.len + n > srv->max_request) {
                        rq->refused = MHD_HTTP_CONTENT_TOO_LARGE;
                        snprintf(rq->why, sizeof(rq->why), "request body larger than %zu bytes", srv->max_request);
                } else if (mk_sched_body_count_feed(&rq->count, upload_data, n, MK_MAX_EXTENDER_NODES, srv->max_values,
                                                    rq->why, sizeof(rq->why)) < 0)
                        rq->refused = MHD_HTTP_CONTENT_TOO_LARGE;
                else if (atomic_fetch_add(&srv->buffered, n) + n > srv->max_buffered) {
                        atomic_fetch_sub(&srv->buffered, n);
                        rq->refused = MHD_HTTP_SERVICE_UNAVAILABLE;
                        snprintf(rq->why, sizeof(rq->why), "too many request bytes held at once (%zu), try again",
                                 srv->max_buffered);
                } else {
                        rq->held += n;
                        return mk_buf_append(&rq->body, upload_data, n) < 0 ? MHD_NO : MHD_YES;
                }
                atomic_fetch_sub(&srv->buffered, rq->held);
                rq->held = 0;
                mk_buf_done(&rq->body);
                return MHD_YES;
        }
        if (rq->refused)
                return refuse(srv, conn, rq->refused, "%s", rq->why);
        bool big = rq->body.len > MK_SCHED_BIG_BODY;
        if (big)
                pthread_mutex_lock(&srv->big_lock);
        enum MHD_Result res = answer(srv, conn, url, rq);
        if (big)
                pthread_mutex_unlock(&srv->big_lock);
        return res;
}

static enum MHD_Result answer(struct mk_sched_server *srv, struct MHD_Connection *conn, const char *url,
                             struct request *rq) {
        json_t *args = NULL;
        struct mk_error e = {0};
        char *text = NULL;
        bool verb = !streq(url, "/bind");
        /* filter and prioritize: written as text straight from the decisions
         * (no json_t for 1,000s of nodes, a plain NodeNames list read without jansson). */
        if (verb ? mk_sched_body_text(srv->sched, streq(url, "/filter"), mk_buf_str(&rq->body), rq->body.len,
                                      srv->max_request, &text, &e) < 0
                 : mk_json_load(mk_buf_str(&rq->body), rq->body.len, srv->max_request, "request body", &args, &e) < 0) {
                atomic_fetch_add(&mk_sched_stats(srv->sched)->errors, 1);
                if (streq(url, "/prioritize"))
                        return respond_json(conn, json_array());
                char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
                return respond_json(conn, json_pack("{s:s}", "Error", mk_error_format(&e, buf, sizeof(buf))));
        }
        if (verb)
                return respond(conn, MHD_HTTP_OK, "application/json", text);
        unsigned status = MHD_HTTP_OK;
        json_t *res = handle_bind(srv, args, &status);
        json_decref(args);
        return respond_json_status(conn, status, res);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t) {
        struct mk_sched_server *srv = cls;
        if (t == MHD_REQUEST_TERMINATED_COMPLETED_OK)
                conn_active(srv, conn, true);
        struct request *rq = *con_cls;
        if (rq) {
                bool big = rq->body.alloc > MK_SCHED_BIG_BODY || rq->count.values > MK_SCHED_MAX_VALUES / 25;
                atomic_fetch_sub(&srv->buffered, rq->held);
                mk_buf_done(&rq->body);
                free(rq);
                *con_cls = NULL;
                /* The pages of a big body's tree back to the system. */
                if (big)
                        malloc_trim(0);
        }
}

/* --- informers --- */

static int on_node(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata) {
        (void) old;
        struct mk_sched_server *srv = userdata;
        return mk_sched_node_event(srv->sched, type, object) == -ENOMEM ? -ENOMEM : 0;
}

static int on_pod(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata) {
        (void) old;
        struct mk_sched_server *srv = userdata;
        return mk_sched_pod_event(srv->sched, type, object) == -ENOMEM ? -ENOMEM : 0;
}

/* An object gone malformed: a warning Event on it (once until it is
 * readable again; failures only logged). */
static void post_malformed(struct mk_kube *k, json_t *object, bool pod, const char *why) {
        const char *name = mk_kube_meta(object, "name"), *ns = pod ? mk_kube_meta(object, "namespace") : "default";
        if (!name || !ns || mk_kube_name_check_subdomain(name, NULL) < 0 || mk_kube_name_check_label(ns, NULL) < 0)
                return;
        char msg[400], path[MK_K8S_PATH_MAX], host[65] = "";
        if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
                snprintf(host, sizeof(host), "migkit-scheduler");
        snprintf(msg, sizeof(msg), "migkit-scheduler skips this %s: %s; it keeps its last readable version",
                 pod ? "pod" : "node", why);
        json_t *ev = mk_kube_event_new(ns, pod ? "Pod" : "Node", name, mk_kube_meta(object, "uid"), true,
                                       "MalformedObject", msg, MK_SCHED_EVENT_COMPONENT, host);
        struct mk_error e = {0};
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
        if (!ev || mk_kube_post(k, path, ev, NULL, &e) < 0)
                log_debug_area("sched", "Cannot post Event MalformedObject on %s %s: %s", pod ? "pod" : "node", name,
                               ev ? e.msg : "out of memory");
        json_decref(ev);
}

static void on_bad_node(json_t *object, const char *why, void *userdata) {
        struct mk_sched_server *srv = userdata;
        post_malformed(srv->kube, object, false, why);
}

static void on_bad_pod(json_t *object, const char *why, void *userdata) {
        struct mk_sched_server *srv = userdata;
        post_malformed(srv->kube, object, true, why);
}

static void *informer_main(void *p) {
        struct informer_thread *it = p;
        struct mk_sched_server *srv = it->srv;
        struct mk_sched_stats *st = mk_sched_stats(srv->sched);
        struct mk_kube_informer_opts o = {.cancel = &srv->cancel,
                                          .bad_objects = it->pods ? &st->bad_pods : &st->bad_nodes,
                                          .on_bad = it->pods ? on_bad_pod : on_bad_node};
        struct mk_error e = {0};
        int r = mk_kube_informer_run(srv->kube, it->path, &o, it->pods ? on_pod : on_node, srv, &e);
        if (r < 0 && r != -ECANCELED) {
                char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
                pthread_mutex_lock(&srv->fail_lock);
                snprintf(srv->failed, sizeof(srv->failed), "%s informer: %s", it->pods ? "Pod" : "Node",
                         mk_error_format(&e, buf, sizeof(buf)));
                pthread_mutex_unlock(&srv->fail_lock);
        }
        return NULL;
}

struct initial {
        struct mk_sched *sched;
        bool pods;
};

static int initial_item(json_t *item, void *userdata) {
        struct initial *in = userdata;
        if (mk_kube_object_has_nul(item, NULL, 0))
                return 0; /* the informer's LIST that follows says it, counts it and posts the Event */
        int r = in->pods ? mk_sched_pod_event(in->sched, MK_KUBE_EVENT_ADDED, item)
                         : mk_sched_node_event(in->sched, MK_KUBE_EVENT_ADDED, item);
        return r == -ENOMEM ? r : 0;
}

void mk_sched_server_malloc(void) {
        (void) mallopt(M_MMAP_THRESHOLD, MK_SCHED_MMAP_THRESHOLD);
        (void) mallopt(M_TRIM_THRESHOLD, MK_SCHED_TRIM_THRESHOLD);
}

int mk_sched_server_start(const struct mk_sched_server_opts *o, struct mk_sched_server **ret, struct mk_error *e) {
        struct mk_sched_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return -ENOMEM;
        srv->sched = o->sched;
        srv->kube = o->sched ? o->kube : NULL;
        srv->metrics = o->metrics;
        srv->metrics_userdata = o->metrics_userdata;
        if (!srv->sched && !srv->metrics) {
                free(srv);
                return mk_error_set(e, -EINVAL, "an HTTP server with neither extender nor metrics");
        }
        srv->max_request = o->max_request ? o->max_request : MK_MAX_EXTENDER_REQUEST;
        srv->max_values = o->max_values ? o->max_values : MK_SCHED_MAX_VALUES;
        srv->max_buffered = 4 * srv->max_request;
        srv->request_timeout_s = o->request_timeout_s ? o->request_timeout_s : MK_SCHED_REQUEST_TIMEOUT_S;
        unsigned max_conn = o->max_connections ? o->max_connections : MK_SCHED_MAX_CONNECTIONS;
        unsigned per_client = o->max_per_client ? o->max_per_client : MK_SCHED_MAX_PER_CLIENT;
        /* Connections past the fd limit would fail accept() for everyone:
         * keep 128 descriptors for the apiserver, logs and the connections
         * closing after an eviction (libmicrohttpd's own limit is ours plus
         * MK_SCHED_CLOSING_SLACK, so that it never refuses one itself). */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur < (rlim_t) max_conn + 128 + MK_SCHED_CLOSING_SLACK)
                max_conn = rl.rlim_cur > 128 + MK_SCHED_CLOSING_SLACK + 16
                                   ? (unsigned) rl.rlim_cur - 128 - MK_SCHED_CLOSING_SLACK
                                   : 16;
        srv->conns.max = max_conn;
        srv->conns.per_client = MIN(per_client, max_conn);
        pthread_mutex_init(&srv->conns.lock, NULL);
        pthread_mutex_init(&srv->log_lock, NULL);
        pthread_mutex_init(&srv->fail_lock, NULL);
        pthread_mutex_init(&srv->big_lock, NULL);
        int r;
        if (srv->kube) {
                /* One LIST of each before serving, so the first filter already
                 * sees every node and reservation; the informers then list
                 * again and follow changes (events are idempotent). */
                static const char *const paths[2] = {"/api/v1/nodes", "/api/v1/pods"};
                for (int i = 0; i < 2; i++) {
                        struct initial in = {.sched = srv->sched, .pods = i == 1};
                        r = mk_kube_list_each(srv->kube, paths[i], NULL, initial_item, &in, NULL, e);
                        if (r < 0)
                                goto fail;
                }
        }
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t) o->port)};
        if (inet_pton(AF_INET, o->address ? o->address : "127.0.0.1", &sa.sin_addr) != 1) {
                r = mk_error_set(e, -EINVAL, "invalid listen address '%s'", o->address);
                goto fail;
        }
        /* The limits are ours (on_connection): libmicrohttpd's per-address
         * limit refused new connections, so it is not set. */
        srv->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                    on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, /* first */
                                    MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &sa, MHD_OPTION_THREAD_POOL_SIZE,
                                    (unsigned) (o->threads ? o->threads : 4), MHD_OPTION_NOTIFY_COMPLETED,
                                    on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
                                    MHD_OPTION_CONNECTION_TIMEOUT, srv->request_timeout_s,
                                    MHD_OPTION_CONNECTION_LIMIT, max_conn + MK_SCHED_CLOSING_SLACK, MHD_OPTION_END);
        if (!srv->mhd) {
                r = mk_error_set(e, -EADDRINUSE, "cannot listen on %s:%u", o->address ? o->address : "127.0.0.1",
                                 o->port);
                goto fail;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
        srv->port = di ? di->port : o->port;
        if (srv->kube) {
                static const char *const paths[2] = {"/api/v1/nodes", "/api/v1/pods"};
                for (int i = 0; i < 2; i++) {
                        srv->inf[i] = (struct informer_thread) {.srv = srv, .path = paths[i], .pods = i == 1};
                        if (pthread_create(&srv->inf[i].thread, NULL, informer_main, &srv->inf[i]) != 0) {
                                r = mk_error_set(e, -EAGAIN, "cannot start the informer thread");
                                goto fail;
                        }
                        srv->inf[i].started = true;
                }
        }
        atomic_store(&srv->ready, true);
        *ret = srv;
        return 0;
fail:
        mk_sched_server_stop(srv);
        return r;
}

unsigned mk_sched_server_port(const struct mk_sched_server *srv) {
        return srv->port;
}

bool mk_sched_server_ready(const struct mk_sched_server *srv) {
        return atomic_load(&((struct mk_sched_server *) srv)->ready);
}

const char *mk_sched_server_failed(struct mk_sched_server *srv) {
        pthread_mutex_lock(&srv->fail_lock);
        const char *f = srv->failed[0] ? srv->failed : NULL;
        pthread_mutex_unlock(&srv->fail_lock);
        return f;
}

struct mk_sched_server *mk_sched_server_stop(struct mk_sched_server *srv) {
        if (!srv)
                return NULL;
        atomic_store(&srv->cancel, true);
        for (int i = 0; i < 2; i++)
                if (srv->inf[i].started)
                        pthread_join(srv->inf[i].thread, NULL);
        if (srv->mhd)
                MHD_stop_daemon(srv->mhd);
        mk_hashmap_clear(&srv->conns.ips, free); /* empty once every connection closed */
        pthread_mutex_destroy(&srv->conns.lock);
        pthread_mutex_destroy(&srv->log_lock);
        pthread_mutex_destroy(&srv->fail_lock);
        pthread_mutex_destroy(&srv->big_lock);
        free(srv);
        return NULL;
}
