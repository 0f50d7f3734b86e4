/* Internals of the gRPC transport's server (grpc/server.h): what server.c
 * (requests, unary calls, the thread, start and stop) and server-stream.c
 * (the streaming method: publish, send, finish) share. Not for use outside
 * src/grpc/. server-stream.c calls nothing of server.c; server.c calls the
 * mkgrpc_srv_* functions below. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <grpc/grpc.h>

#include "grpc/server.h"

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

/* Server-streaming calls (server-stream.c), on the server thread. */
/* A new call of the streaming method: watches it, sends the newest message. Takes the call. */
void mkgrpc_srv_stream_begin(struct mk_grpc_server *s, grpc_call *call);
/* A completion of a stream's batch (TAG_STREAM_*). */
void mkgrpc_srv_stream_event(struct mk_grpc_server *s, struct tag *t, bool success);
/* TAG_WAKE: a publish happened; sends to every idle stream that is behind. */
void mkgrpc_srv_streams_wake(struct mk_grpc_server *s);
/* Stop began: every stream ends with status OK once its send in flight is done. */
void mkgrpc_srv_streams_finish(struct mk_grpc_server *s);
