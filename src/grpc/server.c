/* gRPC transport, the server (grpc/server.h): one completion queue and one
 * thread per server. Every method is pre-registered with
 * GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, so C-core reads (and caps) the
 * request before it hands us the call; one generic request stays
 * outstanding to answer any other method with UNIMPLEMENTED. Unary handlers
 * run synchronously on the server thread; the streaming method is
 * server-stream.c's. */
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
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "grpc/internal.h"
#include "grpc/server-internal.h"
#include "grpc/server.h"

/* How long stop waits for peers to take the final status of their streams
 * before it cuts every call (grpc_server_cancel_all_calls). */
#define STOP_GRACE_MS 500

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
                sc->send = mkgrpc_byte_buffer_of(resp->data, resp->len);
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
        int r = mkgrpc_byte_buffer_read(payload, &req);
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
        mkgrpc_text_of(GRPC_SLICE_START_PTR(method), MIN(GRPC_SLICE_LENGTH(method), (size_t) MK_GRPC_MAX_METHOD), name,
                sizeof(name));
        snprintf(msg, sizeof(msg), "unknown method '%s'", name);
        log_debug_area("grpc", "'%s': %s", s->socket_path, msg);
        server_answer(s, call, NULL, MK_GRPC_UNIMPLEMENTED, msg);
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
                mkgrpc_srv_stream_begin(s, call);
        } else
                server_unary(s, slot->method, call, payload);
        grpc_slice_unref(method);
}

static void server_begin_finish(struct mk_grpc_server *s) {
        mkgrpc_srv_streams_finish(s);
        s->finishing = true;
        s->grace_deadline = mkgrpc_deadline_in(STOP_GRACE_MS);
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
                                        mkgrpc_srv_stream_event(s, t, ev.success);
                                        break;
                                case TAG_WAKE:
                                        mkgrpc_srv_streams_wake(s);
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
        int r = mkgrpc_check_socket_path(c->socket_path, e);
        if (r < 0)
                return r;
        size_t n_unary = 0;
        for (const char *const *m = c->unary_methods; m && *m; m++, n_unary++) {
                r = mkgrpc_check_method(*m, "unary method", e);
                if (r < 0)
                        return r;
        }
        if (n_unary > 0 && !c->unary)
                return mk_error_set(e, -EINVAL, "unary methods without a handler");
        if (c->stream_method) {
                r = mkgrpc_check_method(c->stream_method, "stream method", e);
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
         * over the cap is refused before it is read (docs/device-plugin.md,
         * "Limits", tells what a peer sees). */
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
        _cleanup_free_ char *target = mkgrpc_target_for(s->socket_path);
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
