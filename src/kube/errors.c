/* Failures as negative errnos: an HTTP status and the apiserver's Status
 * reason (mk_kube_status_to_errno, kube.h), a curl code, and which of them
 * another try of a request may not see. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <curl/curl.h>

#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

int mk_kube_status_to_errno(long status, const char *reason) {
        if (reason && streq(reason, "Timeout"))
                return -ETIMEDOUT;
        switch (status) {
        case 400:
        case 422:
                return -EINVAL;
        case 401:
        case 403:
                return -EACCES;
        case 404:
                return -ENOENT;
        case 405:
        case 415:
                return -EOPNOTSUPP;
        case 409:
                return reason && streq(reason, "AlreadyExists") ? -EEXIST : -EBUSY;
        case 410:
                return -ESTALE;
        case 413:
                return -E2BIG;
        case 429:
                return -EAGAIN;
        case 504:
                return -ETIMEDOUT;
        }
        if (status >= 500 && status <= 599)
                return -EIO;
        return -EPROTO;
}

bool mk_kube_error_is_transient(int error) {
        switch (error) {
        case -ECONNREFUSED:
        case -ECONNRESET:
        case -EHOSTUNREACH:
        case -ETIMEDOUT:
        case -EAGAIN:
        case -EIO:
        case -ESTALE:
                return true;
        default:
                return false;
        }
}

int kube_curl_to_errno(CURLcode c) {
        switch (c) {
        case CURLE_OK:
                return 0;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
                return -ECONNRESET;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_ABORTED_BY_CALLBACK:
                return -ECANCELED;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
                return -EINVAL;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_USE_SSL_FAILED:
                return -EPROTO;
        default:
                return -EIO;
        }
}

bool kube_curl_retryable(CURLcode c, enum retry_policy p) {
        switch (c) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return true; /* nothing was sent */
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR: /* also an apiserver shutting down mid-handshake */
                return p == RETRY_IDEMPOTENT;
        default:
                return false;
        }
}

bool kube_status_retryable(long status, enum retry_policy p) {
        if (status == 429)
                return true; /* rejected before processing (max-in-flight, priority and fairness) */
        return p == RETRY_IDEMPOTENT && (status == 500 || status == 502 || status == 503 || status == 504);
}
