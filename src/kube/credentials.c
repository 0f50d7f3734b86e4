/* The bearer token a request carries: re-read from its file (a projected
 * service account token rotates) every TOKEN_REFRESH_MS, as client-go does. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kubeconfig.h"

#define TOKEN_REFRESH_MS 60000          /* re-read token files this often (client-go: 1 minute) */

int kube_auth_header(struct mk_kube *k, char **ret) {
        int r = 0;
        *ret = NULL;
        pthread_mutex_lock(&k->token_lock);
        if (k->cfg.token_file && kube_now_ms() - k->token_read_ms >= TOKEN_REFRESH_MS) {
                _cleanup_free_ char *data = NULL;
                size_t len;
                if (mk_read_file(k->cfg.token_file, MK_MAX_KUBE_TOKEN_BYTES, &data, &len, NULL) >= 0) {
                        while (len > 0 && strchr(" \t\r\n", data[len - 1]))
                                data[--len] = 0;
                        if (strlen(data) == len && mk_kube_token_check(data) >= 0) {
                                if (k->cfg.token)
                                        explicit_bzero(k->cfg.token, strlen(k->cfg.token));
                                free(k->cfg.token);
                                k->cfg.token = TAKE_PTR(data);
                        } else
                                log_debug_area("k8s", "Token file '%s' holds no usable token, keeping the old one",
                                               k->cfg.token_file);
                } else
                        log_debug_area("k8s", "Cannot re-read token file '%s', keeping the old token",
                                       k->cfg.token_file);
                k->token_read_ms = kube_now_ms();
        }
        if (k->cfg.token && asprintf(ret, "Authorization: Bearer %s", k->cfg.token) < 0) {
                *ret = NULL;
                r = -ENOMEM;
        }
        pthread_mutex_unlock(&k->token_lock);
        return r;
}
