/* gRPC transport, the server's streaming method (grpc/server.h,
 * grpc/server-internal.h). Streams are driven by completions on the server
 * thread: RECV_CLOSE_ON_SERVER tells us the peer went, one SEND_MESSAGE at a
 * time carries the newest published message. A publish from another thread
 * wakes the server thread with an empty batch on an open stream's call (it
 * posts its tag at once), under the lock that serialises every batch on
 * stream calls (grpc_call_start_batch is thread-compatible). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "base/log.h"
#include "base/macro.h"
#include "grpc/internal.h"
#include "grpc/server-internal.h"
#include "grpc/server.h"

static void server_notify(struct mk_grpc_server *s) {
        if (s->streams_changed)
                s->streams_changed(s->userdata);
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

void mkgrpc_srv_stream_begin(struct mk_grpc_server *s, grpc_call *call) {
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

void mkgrpc_srv_stream_event(struct mk_grpc_server *s, struct tag *t, bool success) {
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

void mkgrpc_srv_streams_wake(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        s->wake_pending = false;
        for (struct srv_stream *st = s->streams; st; st = st->next)
                stream_send_locked(s, st);
        pthread_mutex_unlock(&s->lock);
}

void mkgrpc_srv_streams_finish(struct mk_grpc_server *s) {
        pthread_mutex_lock(&s->lock);
        for (struct srv_stream *st = s->streams; st; st = st->next)
                stream_finish_locked(s, st);
        pthread_mutex_unlock(&s->lock);
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
