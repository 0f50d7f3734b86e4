/* gRPC transport: status codes and C-core's process-wide start and stop
 * (grpc/common.h). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <grpc/support/log.h>

#include "base/log.h"
#include "base/macro.h"
#include "grpc/common.h"

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
