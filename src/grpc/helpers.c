/* gRPC transport: what its server and client share over C-core (method
 * and socket path checks, byte buffers, deadlines; grpc/internal.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "grpc/common.h"
#include "grpc/internal.h"

int mkgrpc_check_method(const char *method, const char *what, struct mk_error *e) {
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

int mkgrpc_check_socket_path(const char *path, struct mk_error *e) {
        struct sockaddr_un sa;
        size_t n = strlen(path);
        if (n == 0)
                return mk_error_set(e, -EINVAL, "empty socket path");
        if (n >= sizeof(sa.sun_path))
                return mk_error_set(e, -ENAMETOOLONG, "socket path '%s' is longer than %zu bytes", path,
                                    sizeof(sa.sun_path) - 1);
        return 0;
}

char *mkgrpc_target_for(const char *path) {
        size_t n = strlen(path) + sizeof("unix:");
        char *t = malloc(n);
        if (t)
                snprintf(t, n, "unix:%s", path);
        return t;
}

/* Printable copy of a peer's bytes for messages and logs. */
void mkgrpc_text_of(const void *data, size_t len, char *buf, size_t size) {
        const unsigned char *p = data;
        size_t k = 0;
        for (size_t i = 0; i < len && k + 1 < size; i++)
                buf[k++] = p[i] >= ' ' && p[i] < 0x7f ? (char) p[i] : '?';
        buf[k] = 0;
}

void mkgrpc_text_of_slice(grpc_slice s, char *buf, size_t size) {
        mkgrpc_text_of(GRPC_SLICE_START_PTR(s), MIN(GRPC_SLICE_LENGTH(s), (size_t) STATUS_TEXT_MAX), buf, size);
}

grpc_byte_buffer *mkgrpc_byte_buffer_of(const void *data, size_t len) {
        grpc_slice s = len > 0 ? grpc_slice_from_copied_buffer(data, len) : grpc_empty_slice();
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        return bb;
}

/* Replaces b's content with the message in bb; -E2BIG over b's cap. */
int mkgrpc_byte_buffer_read(grpc_byte_buffer *bb, struct mk_buf *b) {
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

gpr_timespec mkgrpc_deadline_in(int timeout_ms) {
        if (timeout_ms < 0)
                return gpr_inf_future(GPR_CLOCK_MONOTONIC);
        return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}
