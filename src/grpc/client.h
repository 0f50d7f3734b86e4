/* gRPC transport, the client: unary and server-streaming calls on a unix
 * socket (grpc/common.h for what the server shares). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "grpc/common.h"

struct mk_buf;
struct mk_error;

/* Client on a unix socket, one channel reused across calls; calls from
 * several threads at once are fine (each call has its own completion queue).
 * The channel connects lazily and reconnects with a backoff of at most one
 * second. socket_path need not exist yet. *ret is written only on success. */
struct mk_grpc_client;
int mk_grpc_client_open(const char *socket_path, struct mk_grpc_client **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;
struct mk_grpc_client *mk_grpc_client_close(struct mk_grpc_client *c);

/* One unary call. wait_for_ready: wait (up to timeout_ms) for the socket to
 * exist and accept, for a server that may start later than its client;
 * without it a missing server fails at once with UNAVAILABLE.
 * timeout_ms < 0: no deadline (0 is a deadline already passed). Returns 0
 * on status OK (resp's content replaced by the response; resp's cap
 * applies, -E2BIG over it), else a
 * negative errno (-ETIMEDOUT for DEADLINE_EXCEEDED, -ECONNREFUSED for
 * UNAVAILABLE, -EPROTO otherwise) with *ret_status (may be NULL) set to the
 * gRPC status and e carrying the status message. -EINVAL for a bad method
 * path (no call made; *ret_status untouched). Responses over
 * MK_GRPC_DEFAULT_MAX_MESSAGE fail with RESOURCE_EXHAUSTED. */
int mk_grpc_client_call(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                        int timeout_ms, bool wait_for_ready, struct mk_buf *resp, int *ret_status,
                        struct mk_error *e) _nonnull_(1, 2, 7) _wur_;

/* Server-streaming: opens the stream (sends the request and half-closes),
 * then each next() returns one message (0, msg's content replaced), -ETIMEDOUT
 * after timeout_ms without one (the stream stays usable; timeout_ms < 0
 * waits forever), or, once the stream ended, -EPIPE when it ended with status
 * OK and -EPROTO with any other status (status in *ret_status, message in e).
 * A stream is used by one thread at a time. close() cancels a stream still
 * open. */
struct mk_grpc_stream;
int mk_grpc_client_stream_open(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t len,
                               struct mk_grpc_stream **ret, struct mk_error *e) _nonnull_(1, 2, 5) _wur_;
int mk_grpc_stream_next(struct mk_grpc_stream *st, int timeout_ms, struct mk_buf *msg, int *ret_status,
                        struct mk_error *e) _nonnull_(1, 3) _wur_;
struct mk_grpc_stream *mk_grpc_stream_close(struct mk_grpc_stream *st);

DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_client *, mk_grpc_client_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_stream *, mk_grpc_stream_close);
