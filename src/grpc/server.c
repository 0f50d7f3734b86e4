/* gRPC transport over C-core 1.51 (grpc.h; gRPC C-core 1.51 grpc/grpc.h).
 *
 * Server: one completion queue and one thread per server. Every method is
 * pre-registered with GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, so C-core
 * reads (and caps) the request before it hands us the call; one generic
 * request stays outstanding to answer any other method with UNIMPLEMENTED.
 * Unary handlers run synchronously on the server thread. Streams are driven
 * by completions: RECV_CLOSE_ON_SERVER tells us the peer went, one SEND_MESSAGE
 * at a time carries the newest published message. A publish from another
 * thread wakes the server thread with an empty batch on an open stream's
 * call (it posts its tag at once, gRPC C-core 1.51 grpc/grpc.h), under the lock that serialises
 * every batch on stream calls (grpc_call_start_batch is thread-compatible).
 *
 * Client: one channel per client; each call has its own pluck completion
 * queue, so calls from several threads do not meet. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "grpc/client.h"
#include "grpc/server.h"

/* How long stop waits for peers to take the final status of their streams
 * before it cuts every call (grpc_server_cancel_all_calls). */
#define STOP_GRACE_MS 500
/* Client reconnect backoff: first retry and most between retries, so a call
 * with wait_for_ready notices a server (kubelet) that came back within a
 * second; C-core's defaults are 1 s and 120 s. */
#define CLIENT_INITIAL_BACKOFF_MS 100
#define CLIENT_MAX_BACKOFF_MS 1000
/* Most bytes of a peer's status message we keep. */
#define STATUS_TEXT_MAX 300

/* ---- status codes ---- */

static const char *const status_names[] = {
        [0] = "OK",
        [1] = "CANCELLED",
        [2] = "UNKNOWN",
        [3] = "INVALID_ARGUMENT",
        [4] = "DEADLINE_EXCEEDED",
        [5] = "NOT_FOUND",
        [6] = "ALREADY_EXISTS",
        [7] = "PERMISSION_DENIED",
        [8] = "RESOURCE_EXHAUSTED",
        [9] = "FAILED_PRECONDITION",
        [10] = "ABORTED",
        [11] = "OUT_OF_RANGE",
        [12] = "UNIMPLEMENTED",
        [13] = "INTERNAL",
        [14] = "UNAVAILABLE",
        [15] = "DATA_LOSS",
        [16] = "UNAUTHENTICATED",
};

const char *mk_grpc_status_to_string(int status) {
        if (status < 0 || (size_t) status >= ELEMENTSOF(status_names))
                return "UNKNOWN_STATUS";
        return status_names[status];
}

int mk_grpc_status_from_errno(int error) {
        switch (error) {
        case 0:
                return MK_GRPC_OK;
        case -EINVAL:
                return MK_GRPC_INVALID_ARGUMENT;
        case -ENOENT:
                return MK_GRPC_NOT_FOUND;
        case -ENOSYS:
                return MK_GRPC_UNIMPLEMENTED;
        case -EAGAIN:
                return MK_GRPC_UNAVAILABLE;
        case -E2BIG:
                return MK_GRPC_RESOURCE_EXHAUSTED;
        default:
                return error > 0 ? MK_GRPC_OK : MK_GRPC_INTERNAL;
        }
}

int mk_grpc_status_to_errno(int status) {
        switch (status) {
        case MK_GRPC_OK:
                return 0;
        case MK_GRPC_DEADLINE_EXCEEDED:
                return -ETIMEDOUT;
        case MK_GRPC_UNAVAILABLE:
                return -ECONNREFUSED;
        default:
                return -EPROTO;
        }
}

/* ---- global init ---- */

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned global_refs;

static void log_forward(gpr_log_func_args *a) {
        log_debug_area("grpc", "%s:%d: %s", a->file ? a->file : "?", a->line, a->message ? a->message : "");
}

void mk_grpc_global_init(void) {
        pthread_mutex_lock(&global_lock);
        if (global_refs++ == 0) {
                gpr_set_log_function(log_forward);
                grpc_init();
        }
        pthread_mutex_unlock(&global_lock);
}

void mk_grpc_global_shutdown(void) {
        pthread_mutex_lock(&global_lock);
        if (global_refs > 0 && --global_refs == 0)
                /* From a thread of ours grpc_shutdown() cleans up before it
                 * returns (C-core defers it only on its own threads). */
                grpc_shutdown();
        pthread_mutex_unlock(&global_lock);
}

/* ---- helpers ---- */

static int check_method(const char *method, const char *what, struct mk_error *e) {
        size_t n = strnlen(method, MK_GRPC_MAX_METHOD + 1);
        if (n == 0 || method[0] != '/' || n > MK_GRPC_MAX_METHOD)
                return mk_error_set(e, -EINVAL, "%s '%.*s' is not a method path ('/package.Service/Method', at most %u bytes)",
                                    what, (int) MIN(n, (size_t) 64), method, MK_GRPC_MAX_METHOD);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) method[i] <= ' ' || (unsigned char) method[i] >= 0x7f)
                        return mk_error_set(e, -EINVAL, "%s '%.*s' holds a blank or non-ASCII byte", what,
                                            (int) MIN(n, (size_t) 64), method);
        return 0;
}

static int check_socket_path(const char *path, struct mk_error *e) {
        struct sockaddr_un sa;
        size_t n = strlen(path);
        if (n == 0)
                return mk_error_set(e, -EINVAL, "empty socket path");
        if (n >= sizeof(sa.sun_path))
                return mk_error_set(e, -ENAMETOOLONG, "socket path '%s' is longer than %zu bytes", path,
                                    sizeof(sa.sun_path) - 1);
        return 0;
}

static char *target_for(const char *path) {
        size_t n = strlen(path) + sizeof("unix:");
        char *t = malloc(n);
        if (t)
                snprintf(t, n, "unix:%s", path);
        return t;
}

/* Printable copy of a peer's bytes for messages and logs. */
static void text_of(const void *data, size_t len, char *buf, size_t size) {
        const unsigned char *p = data;
        size_t k = 0;
        for (size_t i = 0; i < len && k + 1 < size; i++)
                buf[k++] = p[i] >= ' ' && p[i] < 0x7f ? (char) p[i] : '?';
        buf[k] = 0;
}

static void text_of_slice(grpc_slice s, char *buf, size_t size) {
        text_of(GRPC_SLICE_START_PTR(s), MIN(GRPC_SLICE_LENGTH(s), (size_t) STATUS_TEXT_MAX), buf, size);
}

static grpc_byte_buffer *byte_buffer_of(const void *data, size_t len) {
        grpc_slice s = len > 0 ? grpc_slice_from_copied_buffer(data, len) : grpc_empty_slice();
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        return bb;
}

/* Replaces b's content with the message in bb; -E2BIG over b's cap. */
static int byte_buffer_read(grpc_byte_buffer *bb, struct mk_buf *b) {
        grpc_byte_buffer_reader reader;
        if (!grpc_byte_buffer_reader_init(&reader, bb))
                return -EBADMSG;
        grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        mk_buf_reset(b);
        int r = mk_buf_append(b, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
        grpc_slice_unref(s);
        return r;
}

static gpr_timespec deadline_in(int timeout_ms) {
        if (timeout_ms < 0)
                return gpr_inf_future(GPR_CLOCK_MONOTONIC);
        return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

#define ARG_INT(k, v) { .type = GRPC_ARG_INTEGER, .key = (char *) (k), .value.integer = (v) }
#define ARG_STR(k, v) { .type = GRPC_ARG_STRING, .key = (char *) (k), .value.string = (char *) (v) }

/* ---- server ---- */

enum tag_kind {
        TAG_REQUEST,      /* obj: struct request_slot */
        TAG_CALL_DONE,    /* obj: struct srv_call */
        TAG_STREAM_CLOSE, /* obj: struct srv_stream */
        TAG_STREAM_SEND,
        TAG_STREAM_STATUS,
        TAG_WAKE,         /* obj: the server */
        TAG_SHUTDOWN,
};

struct tag {
        enum tag_kind kind;
        void *obj;
};

/* One outstanding grpc_server_request_*call and what it fills in. */
struct request_slot {
        struct tag tag;
        void *registered;       /* NULL: the generic request (unregistered methods) */
        const char *method;     /* registered path */
        bool stream;
        grpc_call *call;
        gpr_timespec deadline;
        grpc_metadata_array metadata;
        grpc_byte_buffer *payload;
        grpc_call_details details;
};

/* A call we answered with one batch (unary or UNIMPLEMENTED). */
struct srv_call {
        struct tag tag;
        grpc_call *call;
        grpc_byte_buffer *send;
        int cancelled;
};

struct srv_stream {
        struct srv_stream *next;
        grpc_call *call;
        struct tag tag_close, tag_send, tag_status;
        grpc_byte_buffer *send;
        uint64_t sent_gen;      /* generation of the message last sent */
        unsigned pending;       /* our batches outstanding on the call */
        int cancelled;
        bool closed;            /* RECV_CLOSE_ON_SERVER completed: the call is over */
        bool sending;
        bool md_sent;
        bool status_started;
};

struct mk_grpc_server {
        grpc_server *server;
        grpc_completion_queue *cq;
        bool trim_after_call; /* a big request's call: trim again once C-core freed it (queue thread only) */
        pthread_t thread;
        bool thread_started;
        bool global_ref;
        bool started;
        char *socket_path;
        bool bound;
        dev_t sock_dev;
        ino_t sock_ino;
        char **methods;         /* unary paths, NULL-terminated */
        char *stream_method;
        struct request_slot *slots;
        size_t n_slots;
        mk_grpc_unary_fn unary;
        mk_grpc_streams_fn streams_changed;
        void *userdata;
        size_t max_message;
        struct tag wake_tag, shutdown_tag;
        atomic_uint outstanding; /* batches and requests whose completion has not been seen */

        /* Server thread only. */
        bool shutdown_done;
        bool finishing;         /* streams were told to end */
        bool cancelled_all;
        gpr_timespec grace_deadline;

        /* The lock guards what follows and every batch on a stream call. */
        pthread_mutex_t lock;
        struct srv_stream *streams;
        unsigned n_open;
        grpc_slice msg;         /* valid when gen > 0 */
        uint64_t gen;
        uint64_t sends;
        bool wake_pending;
        bool stopping;
};

static void server_notify(struct mk_grpc_server *s) {
        if (s->streams_changed)
                s->streams_changed(s->userdata);
}

static int server_request(struct mk_grpc_server *s, struct request_slot *slot) {
        grpc_call_error err;
        slot->call = NULL;
        slot->payload = NULL;
        if (slot->registered)
                err = grpc_server_request_registered_call(s->server, slot->registered, &slot->call, &slot->deadline,
                                                          &slot->metadata, &slot->payload, s->cq, s->cq, &slot->tag);
        else
                err = grpc_server_request_call(s->server, &slot->call, &slot->details, &slot->metadata, s->cq, s->cq,
                                               &slot->tag);
        if (err != GRPC_CALL_OK) {
                log_debug_area("grpc", "Failed to request a call on '%s': grpc_call_error %d", s->socket_path, err);
                return -EIO;
        }
        atomic_fetch_add(&s->outstanding, 1);
        return 0;
}

/* Answers a call with one batch: initial metadata and the message when there
 * is one, the status, and RECV_CLOSE_ON_SERVER. Takes the call. */
static void server_answer(struct mk_grpc_server *s, grpc_call *call, const struct mk_buf *resp, int status,
                          const char *message) {
        struct srv_call *sc = calloc(1, sizeof(*sc));
        if (!sc) {
                grpc_call_cancel(call, NULL);
                grpc_call_unref(call);
                return;
        }
        sc->tag = (struct tag) {TAG_CALL_DONE, sc};
        sc->call = call;

        grpc_op ops[4];
        size_t n = 0;
        memset(ops, 0, sizeof(ops));
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        if (resp) {
                sc->send = byte_buffer_of(resp->data, resp->len);
                ops[n].op = GRPC_OP_SEND_MESSAGE;
                ops[n++].data.send_message.send_message = sc->send;
        }
        /* C-core takes its own reference of the details slice. */
        grpc_slice details = grpc_slice_from_copied_string(message ? message : "");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = (grpc_status_code) status;
        ops[n++].data.send_status_from_server.status_details = &details;
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &sc->cancelled;
        grpc_call_error err = grpc_call_start_batch(call, ops, n, &sc->tag, NULL);
        grpc_slice_unref(details);
        if (err != GRPC_CALL_OK) {
                log_debug_area("grpc", "Failed to answer a call on '%s': grpc_call_error %d", s->socket_path, err);
                if (sc->send)
                        grpc_byte_buffer_destroy(sc->send);
                grpc_call_cancel(call, NULL);
                grpc_call_unref(call);
                free(sc);
                return;
        }
        atomic_fetch_add(&s->outstanding, 1);
}

static void server_call_done(struct srv_call *sc) {
        if (sc->send)
                grpc_byte_buffer_destroy(sc->send);
        grpc_call_unref(sc->call);
        free(sc);
}

/* A unary request at least this big is followed by malloc_trim(). */
#define MK_GRPC_TRIM_AFTER_BYTES (256u * 1024)

/* Frees the request's copy now and hands the free heap back (malloc_trim),
 * before the answer goes out: a client that sees the answer sees the memory
 * given back (the answer's own buffer is small and freed after sending). */
static void trim_memory(struct mk_buf *req) {
        mk_buf_done(req);
        (void) malloc_trim(0);
}

static void server_unary(struct mk_grpc_server *s, const char *method, grpc_call *call, grpc_byte_buffer *payload) {
        if (!payload) {
                server_answer(s, call, NULL, MK_GRPC_INVALID_ARGUMENT, "the request carried no message");
                return;
        }
        _cleanup_buf_done_ struct mk_buf req = {};
        mk_buf_init(&req, s->max_message);
        int r = byte_buffer_read(payload, &req);
        grpc_byte_buffer_destroy(payload);
        if (r == -E2BIG) {
                /* C-core caps it already; kept for the case it is configured otherwise. */
                server_answer(s, call, NULL, MK_GRPC_RESOURCE_EXHAUSTED, "request message too large");
                return;
        }
        if (r < 0) {
                server_answer(s, call, NULL, MK_GRPC_INTERNAL, "cannot read the request message");
                return;
        }

        _cleanup_buf_done_ struct mk_buf resp = {};
        mk_buf_init(&resp, MK_GRPC_MAX_SEND_MESSAGE);
        struct mk_error err = {};
        r = s->unary(s->userdata, method, (const uint8_t *) req.data, req.len, &resp, &err);
        /* What a big request took (its copy, what decoding it allocated)
         * goes back to the system, not kept by malloc for the next one. */
        if (req.len >= MK_GRPC_TRIM_AFTER_BYTES) {
                trim_memory(&req);
                s->trim_after_call = true;
        }
        if (r >= 0) {
                server_answer(s, call, &resp, MK_GRPC_OK, NULL);
                return;
        }
        log_debug_area("grpc", "'%s' on '%s' failed: %s", method, s->socket_path,
                       err.msg[0] ? err.msg : strerror(-r));
        server_answer(s, call, NULL, mk_grpc_status_from_errno(r), err.msg[0] ? err.msg : strerror(-r));
}

static void server_unimplemented(struct mk_grpc_server *s, grpc_call *call, grpc_slice method) {
        char name[MK_GRPC_MAX_METHOD + 1], msg[MK_GRPC_MAX_METHOD + 64];
        text_of(GRPC_SLICE_START_PTR(method), MIN(GRPC_SLICE_LENGTH(method), (size_t) MK_GRPC_MAX_METHOD), name,
                sizeof(name));
        snprintf(msg, sizeof(msg), "unknown method '%s'", name);
        log_debug_area("grpc", "'%s': %s", s->socket_path, msg);
        server_answer(s, call, NULL, MK_GRPC_UNIMPLEMENTED, msg);
}

/* Frees a stream whose call is over and whose batches all completed. */
static bool stream_maybe_free_locked(struct mk_grpc_server *s, struct srv_stream *st) {
        if (!st->closed || st->pending > 0)
                return false;
        for (struct srv_stream **p = &s->streams; *p; p = &(*p)->next)
                if (*p == st) {
                        *p = st->next;
                        break;
                }
        if (st->send)
                grpc_byte_buffer_destroy(st->send);
        grpc_call_unref(st->call);
        free(st);
        return true;
}

static void stream_send_locked(struct mk_grpc_server *s, struct srv_stream *st) {
        if (st->closed || st->sending || st->status_started || s->gen == 0 || st->sent_gen >= s->gen)
                return;
        grpc_op ops[2];
        size_t n = 0;
        memset(ops, 0, sizeof(ops));
        /* Shares the published slice (a reference, no copy). */
        st->send = grpc_raw_byte_buffer_create(&s->msg, 1);
        if (!st->md_sent)
                ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = st->send;
        grpc_call_error err = grpc_call_start_batch(st->call, ops, n, &st->tag_send, NULL);
        if (err != GRPC_CALL_OK) {
                log_debug_area("grpc", "Failed to send on a stream of '%s': grpc_call_error %d", s->socket_path, err);
                grpc_byte_buffer_destroy(st->send);
                st->send = NULL;
                grpc_call_cancel(st->call, NULL);
                return;
        }
        atomic_fetch_add(&s->outstanding, 1);
        st->pending++;
        st->sending = true;
        st->md_sent = true;
        st->sent_gen = s->gen;
        s->sends++;
}

/* Ends a stream with status OK (once its send in flight is done). */
static void stream_finish_locked(struct mk_grpc_server *s, struct srv_stream *st) {
        if (st->closed || st->sending || st->status_started)
                return;
        grpc_op ops[2];
        size_t n = 0;
        memset(ops, 0, sizeof(ops));
        grpc_slice details = grpc_empty_slice();
        if (!st->md_sent)
                ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[n++].data.send_status_from_server.status_details = &details;
        grpc_call_error err = grpc_call_start_batch(st->call, ops, n, &st->tag_status, NULL);
        if (err != GRPC_CALL_OK) {
                log_debug_area("grpc", "Failed to end a stream of '%s': grpc_call_error %d", s->socket_path, err);
                grpc_call_cancel(st->call, NULL);
                return;
        }
        atomic_fetch_add(&s->outstanding, 1);
        st->pending++;
        st->md_sent = true;
        st->status_started = true;
}

static void server_stream_begin(struct mk_grpc_server *s, grpc_call *call) {
        struct srv_stream *st = calloc(1, sizeof(*st));
        if (!st) {
                grpc_call_cancel(call, NULL);
                grpc_call_unref(call);
                return;
        }
        st->call = call;
        st->tag_close = (struct tag) {TAG_STREAM_CLOSE, st};
        st->tag_send = (struct tag) {TAG_STREAM_SEND, st};
        st->tag_status = (struct tag) {TAG_STREAM_STATUS, st};

        grpc_op op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
        op.data.recv_close_on_server.cancelled = &st->cancelled;

        pthread_mutex_lock(&s->lock);
        grpc_call_error err = grpc_call_start_batch(call, &op, 1, &st->tag_close, NULL);
        if (err != GRPC_CALL_OK) {
                pthread_mutex_unlock(&s->lock);
                log_debug_area("grpc", "Failed to watch a stream of '%s': grpc_call_error %d", s->socket_path, err);
                grpc_call_cancel(call, NULL);
                grpc_call_unref(call);
                free(st);
                return;
        }
        atomic_fetch_add(&s->outstanding, 1);
        st->pending++;
        st->next = s->streams;
        s->streams = st;
        s->n_open++;
        if (s->stopping)
                stream_finish_locked(s, st);
        else
                stream_send_locked(s, st);
        pthread_mutex_unlock(&s->lock);
        log_debug_area("grpc", "Stream opened on '%s'", s->socket_path);
        server_notify(s);
}

static void server_stream_event(struct mk_grpc_server *s, struct tag *t, bool success) {
        struct srv_stream *st = t->obj;
        bool changed = false, by_peer = false;

        pthread_mutex_lock(&s->lock);
        st->pending--;
        switch (t->kind) {
        case TAG_STREAM_CLOSE:
                st->closed = true;
                s->n_open--;
                changed = true;
                by_peer = st->cancelled;
                break;
        case TAG_STREAM_SEND:
                st->sending = false;
                grpc_byte_buffer_destroy(st->send);
                st->send = NULL;
                /* A failed send means the call is over; its close completion follows. */
                if (success) {
                        if (s->stopping)
                                stream_finish_locked(s, st);
                        else
                                stream_send_locked(s, st);
                }
                break;
        default:
                break;
        }
        stream_maybe_free_locked(s, st); /* st may be gone after this */
        pthread_mutex_unlock(&s->lock);

        if (changed) {
                log_debug_area("grpc", "Stream on '%s' closed%s", s->socket_path, by_peer ? " by the peer" : "");
                server_notify(s);
        }
}

static void server_wake(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        s->wake_pending = false;
        for (struct srv_stream *st = s->streams; st; st = st->next)
                stream_send_locked(s, st);
        pthread_mutex_unlock(&s->lock);
}

static void server_request_event(struct mk_grpc_server *s, struct request_slot *slot, bool success) {
        if (!success)
                return; /* shutting down */

        grpc_call *call = TAKE_PTR(slot->call);
        grpc_byte_buffer *payload = TAKE_PTR(slot->payload);
        grpc_slice method = grpc_empty_slice();
        if (!slot->registered)
                method = grpc_slice_ref(slot->details.method);
        grpc_metadata_array_destroy(&slot->metadata);
        grpc_metadata_array_init(&slot->metadata);
        grpc_call_details_destroy(&slot->details);
        grpc_call_details_init(&slot->details);

        pthread_mutex_lock(&s->lock);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        if (!stopping)
                (void) server_request(s, slot);

        if (!slot->registered)
                server_unimplemented(s, call, method);
        else if (slot->stream) {
                if (payload)
                        grpc_byte_buffer_destroy(payload);
                server_stream_begin(s, call);
        } else
                server_unary(s, slot->method, call, payload);
        grpc_slice_unref(method);
}

static void server_begin_finish(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        for (struct srv_stream *st = s->streams; st; st = st->next)
                stream_finish_locked(s, st);
        pthread_mutex_unlock(&s->lock);
        s->finishing = true;
        s->grace_deadline = deadline_in(STOP_GRACE_MS);
}

static void *server_thread(void *userdata) {
        struct mk_grpc_server *s = userdata;

        for (;;) {
                gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
                if (s->finishing && !s->cancelled_all)
                        deadline = s->grace_deadline;
                grpc_event ev = grpc_completion_queue_next(s->cq, deadline, NULL);
                if (ev.type == GRPC_QUEUE_SHUTDOWN)
                        break;
                if (ev.type == GRPC_OP_COMPLETE) {
                        struct tag *t = ev.tag;
                        if (t->kind == TAG_SHUTDOWN)
                                s->shutdown_done = true;
                        else {
                                atomic_fetch_sub(&s->outstanding, 1);
                                switch (t->kind) {
                                case TAG_REQUEST:
                                        server_request_event(s, t->obj, ev.success);
                                        break;
                                case TAG_CALL_DONE:
                                        server_call_done(t->obj);
                                        if (s->trim_after_call) {
                                                /* what C-core kept of the call (its arena) is freed now */
                                                s->trim_after_call = false;
                                                (void) malloc_trim(0);
                                        }
                                        break;
                                case TAG_STREAM_CLOSE:
                                case TAG_STREAM_SEND:
                                case TAG_STREAM_STATUS:
                                        server_stream_event(s, t, ev.success);
                                        break;
                                case TAG_WAKE:
                                        server_wake(s);
                                        break;
                                case TAG_SHUTDOWN:
                                        break;
                                }
                        }
                }

                if (!s->finishing) {
                        pthread_mutex_lock(&s->lock);
                        bool stopping = s->stopping;
                        pthread_mutex_unlock(&s->lock);
                        if (stopping)
                                server_begin_finish(s);
                }
                if (s->finishing && !s->cancelled_all && !s->shutdown_done &&
                    gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), s->grace_deadline) >= 0) {
                        log_debug_area("grpc", "Cancelling the calls left on '%s'", s->socket_path);
                        grpc_server_cancel_all_calls(s->server);
                        s->cancelled_all = true;
                }
                if (s->shutdown_done && atomic_load(&s->outstanding) == 0)
                        break;
        }
        return NULL;
}

/* Tears down what start built, in C-core's order (gRPC C-core 1.51 grpc/grpc.h). The server thread
 * has ended, or never ran. */
static void server_free(struct mk_grpc_server *s) {
        if (s->server) {
                if (s->started && !s->thread_started) {
                        /* Started but the thread could not be: run the shutdown here. */
                        s->stopping = true;
                        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
                        grpc_server_cancel_all_calls(s->server);
                        (void) server_thread(s);
                }
                grpc_server_destroy(s->server);
        }
        if (s->cq) {
                grpc_completion_queue_shutdown(s->cq);
                while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                       GRPC_QUEUE_SHUTDOWN)
                        ;
                grpc_completion_queue_destroy(s->cq);
        }
        /* Every stream ended with its call; nothing should be left. */
        while (s->streams) {
                struct srv_stream *st = s->streams;
                s->streams = st->next;
                if (st->send)
                        grpc_byte_buffer_destroy(st->send);
                grpc_call_unref(st->call);
                free(st);
        }
        if (s->gen > 0)
                grpc_slice_unref(s->msg);
        for (size_t i = 0; i < s->n_slots; i++) {
                grpc_metadata_array_destroy(&s->slots[i].metadata);
                grpc_call_details_destroy(&s->slots[i].details);
        }
        free(s->slots);
        if (s->bound) {
                /* Only if the path still is our socket: a newer instance may have bound it. */
                struct stat st;
                if (lstat(s->socket_path, &st) == 0 && st.st_dev == s->sock_dev && st.st_ino == s->sock_ino)
                        (void) unlink(s->socket_path);
        }
        free(s->socket_path);
        strv_free(s->methods);
        free(s->stream_method);
        pthread_mutex_destroy(&s->lock);
        if (s->global_ref)
                mk_grpc_global_shutdown();
        free(s);
}

static int remove_stale_socket(const char *path, struct mk_error *e) {
        struct stat st;
        if (lstat(path, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                return mk_error_set(e, negative_errno(), "Cannot check socket path '%s': %m", path);
        }
        if (!S_ISSOCK(st.st_mode))
                return mk_error_set(e, -EEXIST, "'%s' exists and is not a socket; not replacing it", path);
        if (unlink(path) < 0 && errno != ENOENT)
                return mk_error_set(e, negative_errno(), "Cannot remove stale socket '%s': %m", path);
        return 0;
}

/* Why binding failed, as far as the directory tells. */
static int bind_error(const char *path, struct mk_error *e) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        if (slash == dir)
                slash[1] = 0;
        else if (slash)
                *slash = 0;
        else
                dir[0] = '.', dir[1] = 0;
        if (access(dir, W_OK | X_OK) < 0)
                return mk_error_set(e, negative_errno(), "Cannot bind socket '%s': directory '%s': %m", path, dir);
        return mk_error_set(e, -EADDRNOTAVAIL, "Cannot bind socket '%s'", path);
}

static void server_freep(struct mk_grpc_server **s) {
        if (*s)
                server_free(*s);
}

/* Checks a server configuration: the socket path, the method names, the
 * message cap. The number of unary methods and the cap in ret_*. */
static int check_config(const struct mk_grpc_server_config *c, size_t *ret_n_unary, size_t *ret_max,
                        struct mk_error *e) {
        if (!c->socket_path)
                return mk_error_set(e, -EINVAL, "no socket path");
        int r = check_socket_path(c->socket_path, e);
        if (r < 0)
                return r;
        size_t n_unary = 0;
        for (const char *const *m = c->unary_methods; m && *m; m++, n_unary++) {
                r = check_method(*m, "unary method", e);
                if (r < 0)
                        return r;
        }
        if (n_unary > 0 && !c->unary)
                return mk_error_set(e, -EINVAL, "unary methods without a handler");
        if (c->stream_method) {
                r = check_method(c->stream_method, "stream method", e);
                if (r < 0)
                        return r;
        }
        size_t max = c->max_message ? c->max_message : MK_GRPC_DEFAULT_MAX_MESSAGE;
        if (max > INT_MAX)
                return mk_error_set(e, -EINVAL, "max_message %zu is larger than %d", max, INT_MAX);
        *ret_n_unary = n_unary;
        *ret_max = max;
        return 0;
}

/* A server's memory for `c`: its own copies of the names and one request
 * slot per method (unary ones first, then the stream), plus one. Nothing
 * of gRPC yet. */
static int server_new(const struct mk_grpc_server_config *c, size_t n_unary, size_t max,
                      struct mk_grpc_server **ret, struct mk_error *e) {
        _cleanup_(server_freep) struct mk_grpc_server *s = calloc(1, sizeof(*s));
        if (!s)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        pthread_mutex_init(&s->lock, NULL);
        s->unary = c->unary;
        s->userdata = c->userdata;
        s->streams_changed = c->streams_changed;
        s->max_message = max;
        s->wake_tag = (struct tag) {TAG_WAKE, s};
        s->shutdown_tag = (struct tag) {TAG_SHUTDOWN, s};
        s->socket_path = strdup(c->socket_path);
        s->methods = calloc(n_unary + 1, sizeof(char *));
        size_t n_slots = n_unary + (c->stream_method ? 1 : 0) + 1;
        s->slots = calloc(n_slots, sizeof(struct request_slot));
        if (c->stream_method)
                s->stream_method = strdup(c->stream_method);
        if (!s->socket_path || !s->methods || !s->slots || (c->stream_method && !s->stream_method))
                return mk_error_set(e, -ENOMEM, "Out of memory");
        s->n_slots = n_slots; /* server_free() tears down this many */
        for (size_t i = 0; i < s->n_slots; i++) {
                s->slots[i].tag = (struct tag) {TAG_REQUEST, &s->slots[i]};
                grpc_metadata_array_init(&s->slots[i].metadata);
                grpc_call_details_init(&s->slots[i].details);
        }
        for (size_t i = 0; i < n_unary; i++)
                if (!(s->methods[i] = strdup(c->unary_methods[i])))
                        return mk_error_set(e, -ENOMEM, "Out of memory");
        *ret = TAKE_PTR(s);
        return 0;
}

/* Registers one method on its slot. */
static int register_method(struct mk_grpc_server *s, struct request_slot *slot, const char *method, bool stream,
                           const char *why, struct mk_error *e) {
        slot->method = method;
        slot->stream = stream;
        slot->registered =
                grpc_server_register_method(s->server, method, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!slot->registered)
                return mk_error_set(e, -EINVAL, "Cannot register method '%s' (%s)", method, why);
        return 0;
}

/* The transport memory a server may hold (its GRPC_ARG_RESOURCE_QUOTA):
 * room for four messages at the larger of the caps, received or sent, and
 * 8 MiB for everything else; 24 MiB with the defaults. */
static size_t mk_grpc_server_quota(size_t max_message) {
        return 4 * MAX(max_message, (size_t) MK_GRPC_MAX_SEND_MESSAGE) + (8u << 20);
}

/* The gRPC server and its completion queue, every method registered. */
static int server_create(struct mk_grpc_server *s, size_t n_unary, struct mk_error *e) {
        mk_grpc_global_init();
        s->global_ref = true;

        s->cq = grpc_completion_queue_create_for_next(NULL);
        /* C-core 1.51 checks GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH only once
         * a message is whole, and its flow control opens the window to the
         * length the message announces: one 200 MB request was buffered
         * whole (219 MB RSS) before it was refused. A memory quota bounds
         * what the transport may hold: past it the stream is reset
         * (RST_STREAM, ENHANCE_YOUR_CALM) as the bytes come, so a message
         * over the cap is refused before it is read (docs/device-plugin.md). */
        grpc_resource_quota *quota = grpc_resource_quota_create("migkit-grpc-server");
        if (quota)
                grpc_resource_quota_resize(quota, mk_grpc_server_quota(s->max_message));
        grpc_arg args[] = {
                ARG_INT(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int) s->max_message),
                ARG_INT(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int) MK_GRPC_MAX_SEND_MESSAGE),
                /* Identity only: a compressed request is refused, never inflated past the cap. */
                ARG_INT(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1),
                {.type = GRPC_ARG_POINTER, .key = (char *) GRPC_ARG_RESOURCE_QUOTA,
                 .value.pointer = {.p = quota, .vtable = grpc_resource_quota_arg_vtable()}},
        };
        grpc_channel_args cargs = {.num_args = ELEMENTSOF(args) - (quota ? 0 : 1), .args = args};
        s->server = grpc_server_create(&cargs, NULL);
        if (quota)
                grpc_resource_quota_unref(quota); /* the server holds its own reference */
        if (!s->cq || !s->server)
                return mk_error_set(e, -ENOMEM, "Cannot create a gRPC server");
        grpc_server_register_completion_queue(s->server, s->cq, NULL);

        for (size_t i = 0; i < n_unary; i++) {
                int r = register_method(s, &s->slots[i], s->methods[i], false, "listed twice?", e);
                if (r < 0)
                        return r;
        }
        if (s->stream_method)
                return register_method(s, &s->slots[n_unary], s->stream_method, true, "also a unary method?", e);
        return 0;
}

/* Binds the socket and starts the server; remembers which socket file is
 * ours, for server_free() to remove. */
static int server_listen(struct mk_grpc_server *s, struct mk_error *e) {
        _cleanup_free_ char *target = target_for(s->socket_path);
        if (!target)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
        int port = grpc_server_add_http2_port(s->server, target, creds);
        grpc_server_credentials_release(creds);
        if (port == 0)
                return bind_error(s->socket_path, e);
        grpc_server_start(s->server);
        s->started = true;
        struct stat st;
        if (lstat(s->socket_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
                s->bound = true;
                s->sock_dev = st.st_dev;
                s->sock_ino = st.st_ino;
        }
        return 0;
}

int mk_grpc_server_start(const struct mk_grpc_server_config *c, struct mk_grpc_server **ret, struct mk_error *e) {
        size_t n_unary = 0, max = 0;
        int r = check_config(c, &n_unary, &max, e);
        if (r < 0)
                return r;
        r = remove_stale_socket(c->socket_path, e);
        if (r < 0)
                return r;

        _cleanup_(server_freep) struct mk_grpc_server *s = NULL;
        r = server_new(c, n_unary, max, &s, e);
        if (r < 0)
                return r;
        r = server_create(s, n_unary, e);
        if (r < 0)
                return r;
        r = server_listen(s, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_slots; i++) {
                r = server_request(s, &s->slots[i]);
                if (r < 0)
                        return mk_error_set(e, r, "Cannot request calls on '%s'", c->socket_path);
        }
        r = -pthread_create(&s->thread, NULL, server_thread, s);
        if (r < 0)
                return mk_error_set(e, r, "Cannot start the server thread for '%s': %s", c->socket_path,
                                    strerror(-r));
        s->thread_started = true;
        log_debug_area("grpc", "Serving on '%s'", s->socket_path);
        *ret = TAKE_PTR(s);
        return 0;
}

int mk_grpc_server_publish(struct mk_grpc_server *s, const uint8_t *msg, size_t len) {
        if (len > MK_GRPC_MAX_SEND_MESSAGE)
                return -E2BIG;
        if (len > 0 && !msg)
                return -EINVAL;
        grpc_slice slice = len > 0 ? grpc_slice_from_copied_buffer((const char *) msg, len) : grpc_empty_slice();

        pthread_mutex_lock(&s->lock);
        if (s->stopping) {
                pthread_mutex_unlock(&s->lock);
                grpc_slice_unref(slice);
                return -ESHUTDOWN;
        }
        if (s->gen > 0)
                grpc_slice_unref(s->msg);
        s->msg = slice;
        s->gen++;
        /* Wake the server thread once; it sends to every stream that is idle
         * and behind. Streams opened later get the message when they open. */
        if (!s->wake_pending) {
                struct srv_stream *st = s->streams;
                while (st && st->closed)
                        st = st->next;
                if (st) {
                        atomic_fetch_add(&s->outstanding, 1);
                        if (grpc_call_start_batch(st->call, NULL, 0, &s->wake_tag, NULL) == GRPC_CALL_OK)
                                s->wake_pending = true;
                        else
                                atomic_fetch_sub(&s->outstanding, 1);
                }
        }
        pthread_mutex_unlock(&s->lock);
        return 0;
}

unsigned mk_grpc_server_streams(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        unsigned n = s->n_open;
        pthread_mutex_unlock(&s->lock);
        return n;
}

uint64_t mk_grpc_server_stream_sends(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        uint64_t n = s->sends;
        pthread_mutex_unlock(&s->lock);
        return n;
}

struct mk_grpc_server *mk_grpc_server_stop(struct mk_grpc_server *s) {
        if (!s)
                return NULL;
        pthread_mutex_lock(&s->lock);
        s->stopping = true;
        pthread_mutex_unlock(&s->lock);
        if (s->thread_started) {
                /* Fails the outstanding requests, which wakes the server
                 * thread; it then ends the streams and drains. */
                grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
                pthread_join(s->thread, NULL);
        }
        log_debug_area("grpc", "Stopped serving on '%s'", s->socket_path);
        server_free(s);
        return NULL;
}

/* ---- client ---- */

struct mk_grpc_client {
        grpc_channel *channel;
        char *socket_path;
};

int mk_grpc_client_open(const char *socket_path, struct mk_grpc_client **ret, struct mk_error *e) {
        int r = check_socket_path(socket_path, e);
        if (r < 0)
                return r;
        _cleanup_free_ char *target = target_for(socket_path);
        struct mk_grpc_client *c = calloc(1, sizeof(*c));
        if (!target || !c || !(c->socket_path = strdup(socket_path))) {
                free(c);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }

        mk_grpc_global_init();
        grpc_arg args[] = {
                ARG_INT(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int) MK_GRPC_DEFAULT_MAX_MESSAGE),
                ARG_INT(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int) MK_GRPC_MAX_SEND_MESSAGE),
                ARG_INT(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1),
                ARG_INT(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, CLIENT_INITIAL_BACKOFF_MS),
                ARG_INT(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, CLIENT_MAX_BACKOFF_MS),
                /* As kubelet dials plugins: the socket path is no authority. */
                ARG_STR(GRPC_ARG_DEFAULT_AUTHORITY, "localhost"),
        };
        grpc_channel_args cargs = {.num_args = ELEMENTSOF(args), .args = args};
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        c->channel = grpc_channel_create(target, creds, &cargs);
        grpc_channel_credentials_release(creds);
        if (!c->channel) {
                free(c->socket_path);
                free(c);
                mk_grpc_global_shutdown();
                return mk_error_set(e, -ENOMEM, "Cannot create a gRPC channel to '%s'", socket_path);
        }
        *ret = c;
        return 0;
}

struct mk_grpc_client *mk_grpc_client_close(struct mk_grpc_client *c) {
        if (!c)
                return NULL;
        grpc_channel_destroy(c->channel);
        free(c->socket_path);
        free(c);
        mk_grpc_global_shutdown();
        return NULL;
}

static grpc_call *client_create_call(struct mk_grpc_client *c, grpc_completion_queue *cq, const char *method,
                                     int timeout_ms) {
        grpc_slice m = grpc_slice_from_copied_string(method);
        grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                                   deadline_in(timeout_ms), NULL);
        grpc_slice_unref(m);
        return call;
}

static void completion_queue_free(grpc_completion_queue *cq) {
        /* A pluck queue whose tags were all plucked is drained. */
        grpc_completion_queue_shutdown(cq);
        grpc_completion_queue_destroy(cq);
}

/* The result of a finished call: 0, or the status as errno with a message. */
static int client_status(const char *method, grpc_status_code status, grpc_slice details, int *ret_status,
                         struct mk_error *e) {
        if (ret_status)
                *ret_status = (int) status;
        if (status == GRPC_STATUS_OK)
                return 0;
        char text[STATUS_TEXT_MAX + 1];
        text_of_slice(details, text, sizeof(text));
        return mk_error_set(e, mk_grpc_status_to_errno(status), "'%s': %s%s%s", method,
                            mk_grpc_status_to_string(status), text[0] ? ": " : "", text);
}

int mk_grpc_client_call(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                        int timeout_ms, bool wait_for_ready, struct mk_buf *resp, int *ret_status,
                        struct mk_error *e) {
        int r = check_method(method, "method", e);
        if (r < 0)
                return r;
        if (req_len > MK_GRPC_MAX_SEND_MESSAGE)
                return mk_error_set(e, -E2BIG, "request to '%s' is larger than %u bytes", method,
                                    MK_GRPC_MAX_SEND_MESSAGE);
        if (req_len > 0 && !req)
                return mk_error_set(e, -EINVAL, "request to '%s' has a length but no data", method);

        grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
        if (!cq)
                return mk_error_set(e, -ENOMEM, "Cannot create a completion queue");
        grpc_call *call = client_create_call(c, cq, method, timeout_ms);
        if (!call) {
                completion_queue_free(cq);
                return mk_error_set(e, -ENOMEM, "Cannot create a call to '%s'", method);
        }

        grpc_byte_buffer *send = byte_buffer_of(req, req_len), *recv = NULL;
        grpc_metadata_array md, trailing;
        grpc_metadata_array_init(&md);
        grpc_metadata_array_init(&trailing);
        grpc_status_code status = GRPC_STATUS_UNKNOWN;
        grpc_slice details = grpc_empty_slice();

        grpc_op ops[6];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        if (wait_for_ready)
                ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &recv;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
        ops[5].data.recv_status_on_client.status = &status;
        ops[5].data.recv_status_on_client.status_details = &details;

        int tag;
        grpc_call_error err = grpc_call_start_batch(call, ops, ELEMENTSOF(ops), &tag, NULL);
        if (err != GRPC_CALL_OK)
                r = mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        else {
                /* The call's deadline bounds the wait. */
                grpc_event ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                if (ev.type != GRPC_OP_COMPLETE)
                        r = mk_error_set(e, -EIO, "Call to '%s' did not complete", method);
                else {
                        r = client_status(method, status, details, ret_status, e);
                        if (r >= 0 && !recv)
                                r = mk_error_set(e, -EPROTO, "'%s': the response carried no message", method);
                        else if (r >= 0) {
                                r = byte_buffer_read(recv, resp);
                                if (r == -E2BIG)
                                        r = mk_error_set(e, r, "'%s': response of %zu bytes is larger than %zu bytes",
                                                         method, grpc_byte_buffer_length(recv), resp->cap);
                                else if (r < 0)
                                        r = mk_error_set(e, r, "'%s': cannot read the response", method);
                        }
                }
        }

        if (recv)
                grpc_byte_buffer_destroy(recv);
        grpc_byte_buffer_destroy(send);
        grpc_metadata_array_destroy(&md);
        grpc_metadata_array_destroy(&trailing);
        grpc_slice_unref(details);
        grpc_call_unref(call);
        completion_queue_free(cq);
        return r;
}

struct mk_grpc_stream {
        grpc_call *call;
        grpc_completion_queue *cq;
        char *method;
        grpc_byte_buffer *send, *recv;
        grpc_metadata_array md, trailing;
        grpc_status_code status;
        grpc_slice details;
        int tag_open, tag_msg, tag_status; /* their addresses are the tags */
        bool open_pending, msg_pending, status_pending;
        bool ended;
};

struct mk_grpc_stream *mk_grpc_stream_close(struct mk_grpc_stream *st) {
        if (!st)
                return NULL;
        if (st->call) {
                /* After the cancel (a no-op on a call that ended) every batch
                 * completes promptly. */
                grpc_call_cancel(st->call, NULL);
                if (st->open_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_open, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                           NULL);
                if (st->msg_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_msg, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                           NULL);
                if (st->status_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_status,
                                                           gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                grpc_call_unref(st->call);
        }
        if (st->cq)
                completion_queue_free(st->cq);
        if (st->send)
                grpc_byte_buffer_destroy(st->send);
        if (st->recv)
                grpc_byte_buffer_destroy(st->recv);
        grpc_metadata_array_destroy(&st->md);
        grpc_metadata_array_destroy(&st->trailing);
        grpc_slice_unref(st->details);
        free(st->method);
        free(st);
        /* The client's reference on gRPC outlives the stream: the client must. */
        return NULL;
}

int mk_grpc_client_stream_open(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t len,
                               struct mk_grpc_stream **ret, struct mk_error *e) {
        int r = check_method(method, "method", e);
        if (r < 0)
                return r;
        if (len > MK_GRPC_MAX_SEND_MESSAGE)
                return mk_error_set(e, -E2BIG, "request to '%s' is larger than %u bytes", method,
                                    MK_GRPC_MAX_SEND_MESSAGE);
        if (len > 0 && !req)
                return mk_error_set(e, -EINVAL, "request to '%s' has a length but no data", method);

        _cleanup_(mk_grpc_stream_closep) struct mk_grpc_stream *st = calloc(1, sizeof(*st));
        if (!st)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        grpc_metadata_array_init(&st->md);
        grpc_metadata_array_init(&st->trailing);
        st->details = grpc_empty_slice();
        st->method = strdup(method);
        st->cq = grpc_completion_queue_create_for_pluck(NULL);
        if (!st->method || !st->cq)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        st->call = client_create_call(c, st->cq, method, -1);
        if (!st->call)
                return mk_error_set(e, -ENOMEM, "Cannot create a call to '%s'", method);
        st->send = byte_buffer_of(req, len);

        grpc_op ops[4];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = st->send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &st->md;
        grpc_call_error err = grpc_call_start_batch(st->call, ops, ELEMENTSOF(ops), &st->tag_open, NULL);
        if (err != GRPC_CALL_OK)
                return mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        st->open_pending = true;

        grpc_op op = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
        op.data.recv_status_on_client.trailing_metadata = &st->trailing;
        op.data.recv_status_on_client.status = &st->status;
        op.data.recv_status_on_client.status_details = &st->details;
        err = grpc_call_start_batch(st->call, &op, 1, &st->tag_status, NULL);
        if (err != GRPC_CALL_OK)
                return mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        st->status_pending = true;

        *ret = TAKE_PTR(st);
        return 0;
}

int mk_grpc_stream_next(struct mk_grpc_stream *st, int timeout_ms, struct mk_buf *msg, int *ret_status,
                        struct mk_error *e) {
        if (!st->ended) {
                if (!st->msg_pending) {
                        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
                        op.data.recv_message.recv_message = &st->recv;
                        grpc_call_error err = grpc_call_start_batch(st->call, &op, 1, &st->tag_msg, NULL);
                        if (err != GRPC_CALL_OK)
                                return mk_error_set(e, -EIO, "Cannot read from '%s': grpc_call_error %d", st->method,
                                                    err);
                        st->msg_pending = true;
                }
                grpc_event ev = grpc_completion_queue_pluck(st->cq, &st->tag_msg, deadline_in(timeout_ms), NULL);
                if (ev.type == GRPC_QUEUE_TIMEOUT)
                        return mk_error_set(e, -ETIMEDOUT, "No message on '%s' within %d ms", st->method, timeout_ms);
                if (ev.type != GRPC_OP_COMPLETE)
                        return mk_error_set(e, -EIO, "Reading from '%s' did not complete", st->method);
                st->msg_pending = false;
                if (st->recv) {
                        int r = byte_buffer_read(st->recv, msg);
                        grpc_byte_buffer_destroy(st->recv);
                        st->recv = NULL;
                        if (r == -E2BIG)
                                return mk_error_set(e, r, "'%s': message larger than %zu bytes", st->method, msg->cap);
                        if (r < 0)
                                return mk_error_set(e, r, "'%s': cannot read the message", st->method);
                        return 0;
                }
                /* No message: the stream ended; the status is (about to be) there. */
                (void) grpc_completion_queue_pluck(st->cq, &st->tag_status, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                st->status_pending = false;
                st->ended = true;
        }
        if (client_status(st->method, st->status, st->details, ret_status, e) >= 0)
                return mk_error_set(e, -EPIPE, "'%s': the stream ended", st->method);
        if (e)
                e->code = -EPROTO;
        return -EPROTO;
}
