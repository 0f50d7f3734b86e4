/* gRPC transport, the server: unary methods and one server-streaming
 * method on a unix socket (grpc/common.h for what the client shares). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "grpc/common.h"

struct mk_buf;
struct mk_error;

/* A unary method handler, called on the server's own thread, one call at a
 * time per server. Returns 0 with the packed response in `resp` (empty, cap
 * MK_GRPC_MAX_SEND_MESSAGE), or a negative errno with a message in `e`:
 * -EINVAL -> INVALID_ARGUMENT, -ENOENT -> NOT_FOUND, -ENOSYS -> UNIMPLEMENTED,
 * -EAGAIN -> UNAVAILABLE, -E2BIG -> RESOURCE_EXHAUSTED, else INTERNAL; e's
 * message becomes grpc-message (strerror when the handler left it empty).
 * `req` is the request message as received (at most max_message bytes;
 * req_len may be 0). The handler may make blocking client calls, also to
 * another server of this process; not to its own server. */
typedef int (*mk_grpc_unary_fn)(void *userdata, const char *method, const uint8_t *req, size_t req_len,
                                struct mk_buf *resp, struct mk_error *e);

/* Called on the server's thread whenever a stream opened or closed; call
 * mk_grpc_server_streams() for the count. Must not block for long. */
typedef void (*mk_grpc_streams_fn)(void *userdata);

struct mk_grpc_server_config {
        const char *socket_path;          /* unix socket path; a stale socket there is removed before bind */
        const char *stream_method;        /* full path of the one server-streaming method, e.g.
                                           * "/example.v1.Service/Watch" (request ignored), or NULL */
        const char *const *unary_methods; /* NULL-terminated full paths served by `unary`; any other
                                           * method -> UNIMPLEMENTED */
        mk_grpc_unary_fn unary;
        void *userdata;                   /* for unary and streams_changed */
        size_t max_message;               /* cap on received messages (bytes); 0 = MK_GRPC_DEFAULT_MAX_MESSAGE */
        mk_grpc_streams_fn streams_changed; /* optional */
};

struct mk_grpc_server;

/* Binds, starts serving on a thread of its own, returns once the socket
 * accepts connections. Refuses (-EEXIST) to replace a file at socket_path
 * that is not a socket; -ENAMETOOLONG for a path longer than a unix socket
 * address holds; -EINVAL for a bad method path or a stream/unary method
 * without its handler. *ret is written only on success. */
int mk_grpc_server_start(const struct mk_grpc_server_config *c, struct mk_grpc_server **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

/* Sets the message for the streaming method: every open stream sends it next
 * (a stream still busy sending gets only the newest: coalescing), and every
 * stream opened later gets it first. Copies msg. Thread-safe, never blocks on
 * the network; may be called from the unary handler. Before the first
 * publish, a new stream waits. -E2BIG over MK_GRPC_MAX_SEND_MESSAGE,
 * -ESHUTDOWN once stop has begun (the caller must still not publish once
 * stop may have returned: it frees the server). */
int mk_grpc_server_publish(struct mk_grpc_server *s, const uint8_t *msg, size_t len) _nonnull_(1);

/* Open streams right now (for tests and logs). Thread-safe. */
unsigned mk_grpc_server_streams(struct mk_grpc_server *s) _nonnull_(1);

/* Messages the streams sent so far, all streams together (for tests of
 * coalescing and for logs). Thread-safe. */
uint64_t mk_grpc_server_stream_sends(struct mk_grpc_server *s) _nonnull_(1);

/* Stops: open streams end with status OK (peers that do not take it within
 * half a second are cut with grpc_server_cancel_all_calls), shuts the server
 * down, joins its thread, and unlinks the socket if it is still the one we
 * bound. Must not be called from the server's own callbacks. NULL ok;
 * returns NULL. */
struct mk_grpc_server *mk_grpc_server_stop(struct mk_grpc_server *s);

DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_server *, mk_grpc_server_stop);
