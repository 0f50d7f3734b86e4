/* The gRPC transport of the device plugin: unary and one server-streaming
 * method served on a unix socket, and a client for unary and streaming
 * calls, over gRPC C-core 1.51 (gRPC C-core 1.51 grpc/grpc.h). It moves raw bytes
 * (already packed protobuf messages); callers pack and unpack. This is the
 * only module that includes <grpc/grpc.h>, so another transport (nghttp2,
 * gRPC C-core 1.51 grpc/grpc.h) could replace it without touching callers.
 *
 * Threads and signals: C-core starts threads of its own (about 8) at the
 * first grpc_init. They inherit the signal mask of the thread that creates
 * them, so a daemon blocks SIGTERM, SIGINT and SIGHUP (and handles them with
 * signalfd or sigwait) BEFORE mk_grpc_global_init() or the first server or
 * client; otherwise a gRPC thread may receive them. Avoid fork() once gRPC is
 * initialised (spawn children with posix_spawn, as base/spawn does).
 *
 * C-core logs through gpr_log; mk_grpc_global_init() routes those lines to
 * our log as debug lines of the area "grpc", where this module's own debug
 * lines go too (GRPC_VERBOSITY and GRPC_TRACE still choose what C-core
 * emits).
 *
 * Behaviour a peer sees: every answer carries initial metadata (no
 * trailers-only responses); compressed messages are refused (UNIMPLEMENTED),
 * so nothing is inflated past the cap; a stream ends with status OK when the
 * server stops. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"

struct mk_buf;
struct mk_error;

/* gRPC status codes we use (values as grpc_status_code). */
enum {
        MK_GRPC_OK = 0,
        MK_GRPC_CANCELLED = 1,
        MK_GRPC_UNKNOWN = 2,
        MK_GRPC_INVALID_ARGUMENT = 3,
        MK_GRPC_DEADLINE_EXCEEDED = 4,
        MK_GRPC_NOT_FOUND = 5,
        MK_GRPC_FAILED_PRECONDITION = 9,
        MK_GRPC_RESOURCE_EXHAUSTED = 8,
        MK_GRPC_UNIMPLEMENTED = 12,
        MK_GRPC_INTERNAL = 13,
        MK_GRPC_UNAVAILABLE = 14,
};

/* Default cap on a received message, and the cap on a message we send
 * (published stream messages, handler responses): 4 MiB, gRPC's own default
 * receive limit, which kubelet's grpc-go client keeps. */
#define MK_GRPC_DEFAULT_MAX_MESSAGE (4u * 1024 * 1024)
#define MK_GRPC_MAX_SEND_MESSAGE (4u * 1024 * 1024)
/* Longest method path we accept ("/package.Service/Method"). */
#define MK_GRPC_MAX_METHOD 256

/* "OK", "UNAVAILABLE", ...; "UNKNOWN_STATUS" for values outside 0..16. */
const char *mk_grpc_status_to_string(int status);

/* The gRPC status a handler's negative errno becomes (see mk_grpc_unary_fn),
 * and the errno a client call's status becomes (0, -ETIMEDOUT,
 * -ECONNREFUSED, -EPROTO). */
int mk_grpc_status_from_errno(int error);
int mk_grpc_status_to_errno(int status);

/* Process-wide grpc_init/grpc_shutdown, reference counted, thread-safe.
 * Servers and clients take a reference of their own while they live, so
 * these are needed only to fix when C-core starts (signal mask, above) and
 * to keep it alive between objects. The last shutdown waits for C-core's
 * clean-up, so nothing of gRPC runs or holds memory afterwards. */
void mk_grpc_global_init(void);
void mk_grpc_global_shutdown(void);

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
                                           * "/v1beta1.DevicePlugin/ListAndWatch" (request ignored), or NULL */
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

/* Client on a unix socket, one channel reused across calls; calls from
 * several threads at once are fine (each call has its own completion queue).
 * The channel connects lazily and reconnects with a backoff of at most one
 * second. socket_path need not exist yet. *ret is written only on success. */
struct mk_grpc_client;
int mk_grpc_client_open(const char *socket_path, struct mk_grpc_client **ret, struct mk_error *e)
        _nonnull_(1, 2) _wur_;
struct mk_grpc_client *mk_grpc_client_close(struct mk_grpc_client *c);

/* One unary call. wait_for_ready: wait (up to timeout_ms) for the socket to
 * exist and accept, as the device plugin does when registering with the
 * kubelet; without it a missing server fails at once with UNAVAILABLE.
 * timeout_ms <= 0: no deadline. Returns 0 on status OK (resp's content
 * replaced by the response; resp's cap applies, -E2BIG over it), else a
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

DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_server *, mk_grpc_server_stop);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_client *, mk_grpc_client_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mk_grpc_stream *, mk_grpc_stream_close);
