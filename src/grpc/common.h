/* The gRPC transport (module grpc/): a server of unary methods and one
 * server-streaming method on a unix socket (grpc/server.h), and a client of
 * unary and streaming calls (grpc/client.h), over gRPC C-core 1.51. This
 * header is what both share: status codes, message caps, C-core's
 * process-wide start and stop. The transport moves raw bytes (already packed
 * protobuf messages); callers pack and unpack, and it knows nothing of the
 * services it carries. It is the only module that includes <grpc/grpc.h>,
 * so another transport (nghttp2, say) could replace it without touching
 * callers.
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
 * receive limit, which grpc-go clients keep by default. */
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
