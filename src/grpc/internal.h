/* Internals of the gRPC transport: what its server (server.c,
 * server-stream.c) and client (client.c) share over C-core, defined in
 * helpers.c. Not for use outside src/grpc/; other modules include
 * grpc/server.h or grpc/client.h.
 *
 * Files and what they call (no circle):
 *   common.c        status codes, grpc_init/grpc_shutdown (grpc/common.h)
 *   helpers.c       this header: checks, byte buffers, deadlines
 *   server-stream.c the server's streaming method (server-internal.h)
 *   server.c        the server: requests, unary calls, its thread, start/stop;
 *                   calls server-stream.c
 *   client.c        the client: unary calls and streams
 */
#pragma once

#include <stddef.h>

#include <grpc/grpc.h>
#include <grpc/support/time.h>

struct mk_buf;
struct mk_error;

/* Most bytes of a peer's status message we keep. */
#define STATUS_TEXT_MAX 300

#define ARG_INT(k, v) { .type = GRPC_ARG_INTEGER, .key = (char *) (k), .value.integer = (v) }
#define ARG_STR(k, v) { .type = GRPC_ARG_STRING, .key = (char *) (k), .value.string = (char *) (v) }

/* 0 for a method path "/package.Service/Method" of printable ASCII, at most
 * MK_GRPC_MAX_METHOD bytes; else -EINVAL naming `what` and the path. */
int mkgrpc_check_method(const char *method, const char *what, struct mk_error *e);
/* 0 for a path a unix socket address holds; -EINVAL empty, -ENAMETOOLONG. */
int mkgrpc_check_socket_path(const char *path, struct mk_error *e);
/* "unix:<path>", malloc'ed; NULL when out of memory. */
char *mkgrpc_target_for(const char *path);
/* Printable copy of a peer's bytes for messages and logs ('?' for the rest). */
void mkgrpc_text_of(const void *data, size_t len, char *buf, size_t size);
void mkgrpc_text_of_slice(grpc_slice s, char *buf, size_t size);
/* A byte buffer holding a copy of data (len may be 0). */
grpc_byte_buffer *mkgrpc_byte_buffer_of(const void *data, size_t len);
/* Replaces b's content with the message in bb; -E2BIG over b's cap. */
int mkgrpc_byte_buffer_read(grpc_byte_buffer *bb, struct mk_buf *b);
/* timeout_ms from now on the monotonic clock; < 0: never. */
gpr_timespec mkgrpc_deadline_in(int timeout_ms);
