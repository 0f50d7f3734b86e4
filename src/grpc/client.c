/* gRPC transport, the client (grpc/client.h): one channel per client; each
 * call has its own pluck completion queue, so calls from several threads do
 * not meet. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "grpc/client.h"
#include "grpc/internal.h"

/* Client reconnect backoff: first retry and most between retries, so a call
 * with wait_for_ready notices a server that came back within a second;
 * C-core's defaults are 1 s and 120 s. */
#define CLIENT_INITIAL_BACKOFF_MS 100
#define CLIENT_MAX_BACKOFF_MS 1000

struct mk_grpc_client {
        grpc_channel *channel;
        char *socket_path;
};

int mk_grpc_client_open(const char *socket_path, struct mk_grpc_client **ret, struct mk_error *e) {
        int r = mkgrpc_check_socket_path(socket_path, e);
        if (r < 0)
                return r;
        _cleanup_free_ char *target = mkgrpc_target_for(socket_path);
        struct mk_grpc_client *c = calloc(1, sizeof(*c));
        if (!target || !c || !(c->socket_path = strdup(socket_path))) {
                free(c);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }

        mk_grpc_global_init();
        grpc_arg args[] = {
                ARG_INT(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int) MK_GRPC_DEFAULT_MAX_MESSAGE),
                ARG_INT(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int) MK_GRPC_MAX_SEND_MESSAGE),
                ARG_INT(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1),
                ARG_INT(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, CLIENT_INITIAL_BACKOFF_MS),
                ARG_INT(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, CLIENT_MAX_BACKOFF_MS),
                /* The socket path is no authority: "localhost", as other gRPC
                 * clients on unix sockets send (kubelet's, for one). */
                ARG_STR(GRPC_ARG_DEFAULT_AUTHORITY, "localhost"),
        };
        grpc_channel_args cargs = {.num_args = ELEMENTSOF(args), .args = args};
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        c->channel = grpc_channel_create(target, creds, &cargs);
        grpc_channel_credentials_release(creds);
        if (!c->channel) {
                free(c->socket_path);
                free(c);
                mk_grpc_global_shutdown();
                return mk_error_set(e, -ENOMEM, "Cannot create a gRPC channel to '%s'", socket_path);
        }
        *ret = c;
        return 0;
}

struct mk_grpc_client *mk_grpc_client_close(struct mk_grpc_client *c) {
        if (!c)
                return NULL;
        grpc_channel_destroy(c->channel);
        free(c->socket_path);
        free(c);
        mk_grpc_global_shutdown();
        return NULL;
}

static grpc_call *client_create_call(struct mk_grpc_client *c, grpc_completion_queue *cq, const char *method,
                                     int timeout_ms) {
        grpc_slice m = grpc_slice_from_copied_string(method);
        grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                                   mkgrpc_deadline_in(timeout_ms), NULL);
        grpc_slice_unref(m);
        return call;
}

static void completion_queue_free(grpc_completion_queue *cq) {
        /* A pluck queue whose tags were all plucked is drained. */
        grpc_completion_queue_shutdown(cq);
        grpc_completion_queue_destroy(cq);
}

/* The result of a finished call: 0, or the status as errno with a message. */
static int client_status(const char *method, grpc_status_code status, grpc_slice details, int *ret_status,
                         struct mk_error *e) {
        if (ret_status)
                *ret_status = (int) status;
        if (status == GRPC_STATUS_OK)
                return 0;
        char text[STATUS_TEXT_MAX + 1];
        mkgrpc_text_of_slice(details, text, sizeof(text));
        return mk_error_set(e, mk_grpc_status_to_errno(status), "'%s': %s%s%s", method,
                            mk_grpc_status_to_string(status), text[0] ? ": " : "", text);
}

int mk_grpc_client_call(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                        int timeout_ms, bool wait_for_ready, struct mk_buf *resp, int *ret_status,
                        struct mk_error *e) {
        int r = mkgrpc_check_method(method, "method", e);
        if (r < 0)
                return r;
        if (req_len > MK_GRPC_MAX_SEND_MESSAGE)
                return mk_error_set(e, -E2BIG, "request to '%s' is larger than %u bytes", method,
                                    MK_GRPC_MAX_SEND_MESSAGE);
        if (req_len > 0 && !req)
                return mk_error_set(e, -EINVAL, "request to '%s' has a length but no data", method);

        grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
        if (!cq)
                return mk_error_set(e, -ENOMEM, "Cannot create a completion queue");
        grpc_call *call = client_create_call(c, cq, method, timeout_ms);
        if (!call) {
                completion_queue_free(cq);
                return mk_error_set(e, -ENOMEM, "Cannot create a call to '%s'", method);
        }

        grpc_byte_buffer *send = mkgrpc_byte_buffer_of(req, req_len), *recv = NULL;
        grpc_metadata_array md, trailing;
        grpc_metadata_array_init(&md);
        grpc_metadata_array_init(&trailing);
        grpc_status_code status = GRPC_STATUS_UNKNOWN;
        grpc_slice details = grpc_empty_slice();

        grpc_op ops[6];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        if (wait_for_ready)
                ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &recv;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
        ops[5].data.recv_status_on_client.status = &status;
        ops[5].data.recv_status_on_client.status_details = &details;

        int tag;
        grpc_call_error err = grpc_call_start_batch(call, ops, ELEMENTSOF(ops), &tag, NULL);
        if (err != GRPC_CALL_OK)
                r = mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        else {
                /* The call's deadline bounds the wait. */
                grpc_event ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                if (ev.type != GRPC_OP_COMPLETE)
                        r = mk_error_set(e, -EIO, "Call to '%s' did not complete", method);
                else {
                        r = client_status(method, status, details, ret_status, e);
                        if (r >= 0 && !recv)
                                r = mk_error_set(e, -EPROTO, "'%s': the response carried no message", method);
                        else if (r >= 0) {
                                r = mkgrpc_byte_buffer_read(recv, resp);
                                if (r == -E2BIG)
                                        r = mk_error_set(e, r, "'%s': response of %zu bytes is larger than %zu bytes",
                                                         method, grpc_byte_buffer_length(recv), resp->cap);
                                else if (r < 0)
                                        r = mk_error_set(e, r, "'%s': cannot read the response", method);
                        }
                }
        }

        if (recv)
                grpc_byte_buffer_destroy(recv);
        grpc_byte_buffer_destroy(send);
        grpc_metadata_array_destroy(&md);
        grpc_metadata_array_destroy(&trailing);
        grpc_slice_unref(details);
        grpc_call_unref(call);
        completion_queue_free(cq);
        return r;
}

struct mk_grpc_stream {
        grpc_call *call;
        grpc_completion_queue *cq;
        char *method;
        grpc_byte_buffer *send, *recv;
        grpc_metadata_array md, trailing;
        grpc_status_code status;
        grpc_slice details;
        int tag_open, tag_msg, tag_status; /* their addresses are the tags */
        bool open_pending, msg_pending, status_pending;
        bool ended;
};

struct mk_grpc_stream *mk_grpc_stream_close(struct mk_grpc_stream *st) {
        if (!st)
                return NULL;
        if (st->call) {
                /* After the cancel (a no-op on a call that ended) every batch
                 * completes promptly. */
                grpc_call_cancel(st->call, NULL);
                if (st->open_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_open, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                           NULL);
                if (st->msg_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_msg, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                           NULL);
                if (st->status_pending)
                        (void) grpc_completion_queue_pluck(st->cq, &st->tag_status,
                                                           gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                grpc_call_unref(st->call);
        }
        if (st->cq)
                completion_queue_free(st->cq);
        if (st->send)
                grpc_byte_buffer_destroy(st->send);
        if (st->recv)
                grpc_byte_buffer_destroy(st->recv);
        grpc_metadata_array_destroy(&st->md);
        grpc_metadata_array_destroy(&st->trailing);
        grpc_slice_unref(st->details);
        free(st->method);
        free(st);
        /* The client's reference on gRPC outlives the stream: the client must. */
        return NULL;
}

int mk_grpc_client_stream_open(struct mk_grpc_client *c, const char *method, const uint8_t *req, size_t len,
                               struct mk_grpc_stream **ret, struct mk_error *e) {
        int r = mkgrpc_check_method(method, "method", e);
        if (r < 0)
                return r;
        if (len > MK_GRPC_MAX_SEND_MESSAGE)
                return mk_error_set(e, -E2BIG, "request to '%s' is larger than %u bytes", method,
                                    MK_GRPC_MAX_SEND_MESSAGE);
        if (len > 0 && !req)
                return mk_error_set(e, -EINVAL, "request to '%s' has a length but no data", method);

        _cleanup_(mk_grpc_stream_closep) struct mk_grpc_stream *st = calloc(1, sizeof(*st));
        if (!st)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        grpc_metadata_array_init(&st->md);
        grpc_metadata_array_init(&st->trailing);
        st->details = grpc_empty_slice();
        st->method = strdup(method);
        st->cq = grpc_completion_queue_create_for_pluck(NULL);
        if (!st->method || !st->cq)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        st->call = client_create_call(c, st->cq, method, -1);
        if (!st->call)
                return mk_error_set(e, -ENOMEM, "Cannot create a call to '%s'", method);
        st->send = mkgrpc_byte_buffer_of(req, len);

        grpc_op ops[4];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = st->send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &st->md;
        grpc_call_error err = grpc_call_start_batch(st->call, ops, ELEMENTSOF(ops), &st->tag_open, NULL);
        if (err != GRPC_CALL_OK)
                return mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        st->open_pending = true;

        grpc_op op = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
        op.data.recv_status_on_client.trailing_metadata = &st->trailing;
        op.data.recv_status_on_client.status = &st->status;
        op.data.recv_status_on_client.status_details = &st->details;
        err = grpc_call_start_batch(st->call, &op, 1, &st->tag_status, NULL);
        if (err != GRPC_CALL_OK)
                return mk_error_set(e, -EIO, "Cannot start a call to '%s': grpc_call_error %d", method, err);
        st->status_pending = true;

        *ret = TAKE_PTR(st);
        return 0;
}

int mk_grpc_stream_next(struct mk_grpc_stream *st, int timeout_ms, struct mk_buf *msg, int *ret_status,
                        struct mk_error *e) {
        if (!st->ended) {
                if (!st->msg_pending) {
                        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
                        op.data.recv_message.recv_message = &st->recv;
                        grpc_call_error err = grpc_call_start_batch(st->call, &op, 1, &st->tag_msg, NULL);
                        if (err != GRPC_CALL_OK)
                                return mk_error_set(e, -EIO, "Cannot read from '%s': grpc_call_error %d", st->method,
                                                    err);
                        st->msg_pending = true;
                }
                grpc_event ev = grpc_completion_queue_pluck(st->cq, &st->tag_msg, mkgrpc_deadline_in(timeout_ms), NULL);
                if (ev.type == GRPC_QUEUE_TIMEOUT)
                        return mk_error_set(e, -ETIMEDOUT, "No message on '%s' within %d ms", st->method, timeout_ms);
                if (ev.type != GRPC_OP_COMPLETE)
                        return mk_error_set(e, -EIO, "Reading from '%s' did not complete", st->method);
                st->msg_pending = false;
                if (st->recv) {
                        int r = mkgrpc_byte_buffer_read(st->recv, msg);
                        grpc_byte_buffer_destroy(st->recv);
                        st->recv = NULL;
                        if (r == -E2BIG)
                                return mk_error_set(e, r, "'%s': message larger than %zu bytes", st->method, msg->cap);
                        if (r < 0)
                                return mk_error_set(e, r, "'%s': cannot read the message", st->method);
                        return 0;
                }
                /* No message: the stream ended; the status is (about to be) there. */
                (void) grpc_completion_queue_pluck(st->cq, &st->tag_status, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                st->status_pending = false;
                st->ended = true;
        }
        if (client_status(st->method, st->status, st->details, ret_status, e) >= 0)
                return mk_error_set(e, -EPIPE, "'%s': the stream ended", st->method);
        if (e)
                e->code = -EPROTO;
        return -EPROTO;
}
