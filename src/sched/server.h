/* `migkit scheduler serve`: the kube-scheduler extender over HTTP
 * (libmicrohttpd, a thread pool), with Node and Pod informers feeding the
 * decision cache (extender.h) and bind carried out against the apiserver.
 *
 * Routes: POST /filter, /prioritize, /bind (bodies capped at max_request
 * bytes, max_values JSON values and MK_MAX_EXTENDER_NODES candidates,
 * counted as the bytes arrive: 413 as soon as one is passed, before any
 * parse; all bodies buffered at once capped at 4 x max_request: 503); GET /healthz, /readyz (200 once both informers listed),
 * /metrics (Prometheus text). Any other path: 404. Extender failures are
 * answered with HTTP 200 and the Error field, as kube-scheduler expects. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"
#include "sched/extender.h"

struct mk_kube;
struct mk_sched_server;

#define MK_SCHED_BIND_ATTEMPTS 16      /* conflicts (pod or Node changed) re-planned before bind gives up */
/* Limits against hostile or broken clients (docs/scheduler.md, "Limits"). */
#define MK_SCHED_MAX_VALUES 250000u     /* JSON values in one body (a parsed value takes ~250 bytes) */
#define MK_SCHED_MAX_CONNECTIONS 16384u /* open connections in all (at it, new ones wait in the backlog) */
#define MK_SCHED_MAX_PER_CLIENT 256u    /* open connections from one IP address */
#define MK_SCHED_REQUEST_TIMEOUT_S 10u  /* a connection idle, or a request's body, this long is closed */
#define MK_SCHED_BIG_BODY (1u << 20)    /* bodies over this are parsed one at a time, memory trimmed after */

struct mk_sched_server_opts {
        const char *address;            /* IPv4 address to listen on; NULL: 127.0.0.1 */
        unsigned port;                  /* 0: any free port (see mk_sched_server_port) */
        unsigned threads;               /* 0: 4 */
        size_t max_request;             /* 0: MK_MAX_EXTENDER_REQUEST */
        size_t max_values;              /* JSON values in one body; 0: MK_SCHED_MAX_VALUES */
        unsigned max_connections;       /* 0: MK_SCHED_MAX_CONNECTIONS (less the fd limit's margin) */
        unsigned max_per_client;        /* connections from one IP address; 0: MK_SCHED_MAX_PER_CLIENT */
        unsigned request_timeout_s;     /* idle and whole-body deadline; 0: MK_SCHED_REQUEST_TIMEOUT_S */
        struct mk_sched *sched;         /* borrowed; NULL: the node agent's endpoint (below) */
        struct mk_kube *kube;           /* borrowed; NULL: no informers, bind fails */
        /* The node agent's endpoint (`scheduler node --metrics-address`),
         * when sched is NULL: only GET /healthz, /readyz and /metrics, the
         * last answered with metrics(metrics_userdata), malloc'd Prometheus
         * text (NULL: 500). */
        char *(*metrics)(void *userdata);
        void *metrics_userdata;
};

/* The allocator settings of a process that serves the extender. They are
 * process-wide, so the library never sets them itself: the program that
 * serves the extender calls this before starting the server (`migkit
 * scheduler serve` does, next to the other daemons' settings in cli/;
 * bench-extender too, so that it measures what the server runs with; the
 * node agent's metrics server does not need them). Buffers of
 * MK_SCHED_MMAP_THRESHOLD and more come from mmap, so that a freed large
 * body goes back to the system at once, and up to MK_SCHED_TRIM_THRESHOLD
 * stays free at the top of the heap. A filter over 1,000 nodes takes and
 * frees up to some 600 KiB of smaller buffers (its reasons and its answer
 * 256 KiB each when most nodes fail): with glibc's defaults (128 KiB, the
 * mmap threshold moving) they were mapped, or handed back, and faulted in
 * again by the next request page by page, several microseconds a page in
 * a VM: 4 faults a request on average, 100s in the slowest. */
#define MK_SCHED_MMAP_THRESHOLD (1024u * 1024)
#define MK_SCHED_TRIM_THRESHOLD (8u * 1024 * 1024)
void mk_sched_server_malloc(void);

/* Starts the HTTP server and, with a client, the informers (threads). */
int mk_sched_server_start(const struct mk_sched_server_opts *o, struct mk_sched_server **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;
unsigned mk_sched_server_port(const struct mk_sched_server *srv) _nonnull_(1);
/* True once both informers delivered their first LIST (always with no client). */
bool mk_sched_server_ready(const struct mk_sched_server *srv) _nonnull_(1);
/* An informer ended with a permanent error: its message, else NULL. */
const char *mk_sched_server_failed(struct mk_sched_server *srv) _nonnull_(1);
/* Stops the informers and the server. Accepts NULL. */
struct mk_sched_server *mk_sched_server_stop(struct mk_sched_server *srv);

/* The bind: read the pod, reserve (mk_sched_reserve), write the reservation
 * annotation with a merge patch guarded by the pod's resourceVersion (a
 * conflict re-plans, up to MK_SCHED_BIND_ATTEMPTS), then POST the Binding.
 * A failed Binding drops the reservation (memory and annotation). */
int mk_sched_bind(struct mk_sched *s, struct mk_kube *k, const struct mk_bind_args *a, struct mk_error *e)
        _nonnull_(1, 2, 3) _wur_;

/* The Prometheus text of the counters (malloc'd). */
char *mk_sched_metrics_text(struct mk_sched *s) _nonnull_(1);
