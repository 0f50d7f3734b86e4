/* Where the Kubernetes client connects and how it authenticates: from
 * kubeconfig files (kubectl's format, KUBECONFIG lists merged as kubectl
 * does) or from the in-cluster service account. Pure configuration: nothing
 * here opens a connection. docs/kube.md lists what is supported. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/macro.h"

struct mk_error;

/* Caps on what we read from files that come from outside. */
#define MK_MAX_KUBECONFIG_BYTES (4u << 20)      /* one kubeconfig file */
#define MK_MAX_KUBE_PEM_BYTES (1u << 20)        /* a CA bundle, client certificate or key */
#define MK_MAX_KUBE_TOKEN_BYTES (64u << 10)     /* a bearer token (service account tokens are ~1 KiB) */
#define MK_MAX_KUBECONFIG_FILES 64u             /* entries in a KUBECONFIG list */

/* The service account directory below the in-cluster root. */
#define MK_KUBE_SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct mk_kube_config {
        char *server;           /* "https://host:port[/prefix]" (or http:// for tests), no trailing '/' */
        char *ca_pem;           /* CA bundle that alone is trusted for the server; NULL: the system's CAs */
        size_t ca_pem_len;
        bool insecure_skip_tls_verify;
        char *token;            /* bearer token (already read from token_file when that is set); NULL: none */
        char *token_file;       /* re-read by the client every minute (rotated service account tokens); NULL */
        char *cert_pem;         /* client certificate and key (PEM), both or neither; NULL: none */
        size_t cert_pem_len;
        char *key_pem;
        size_t key_pem_len;
        char *namespace;        /* the context's or the service account's namespace; NULL when none */
        char *source;           /* for messages: "kubeconfig '/path' context 'name'" or "in-cluster" */
};

/* Frees the contents and empties *c. Accepts NULL and an emptied config. */
void mk_kube_config_done(struct mk_kube_config *c);
#define _cleanup_kube_config_done_ _cleanup_(mk_kube_config_done)

/* Loads kubeconfig files. `paths` is one file or a ':'-separated list as in
 * KUBECONFIG (missing files in a list are skipped, a single file must
 * exist); for every name the first file that defines it wins, as kubectl
 * merges them. `context` selects a context, NULL the current-context.
 * Relative file paths are resolved against the directory of the file that
 * names them. Certificates, keys, CA bundles and token files are read now.
 * Errors: -ENOENT for a missing file, -E2BIG over the caps, -EINVAL for a
 * malformed file or a missing or bad field (the message names the field,
 * e.g. "users[0].user.client-key"), -EOPNOTSUPP for exec and auth-provider
 * plugins and basic auth. *ret is written only on success. */
int mk_kube_config_from_kubeconfig(const char *paths, const char *context, struct mk_kube_config *ret,
                                   struct mk_error *e) _nonnull_(1, 3) _wur_;

/* The in-cluster configuration, as client-go's InClusterConfig: server from
 * KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (secure_getenv), token,
 * CA and namespace from MK_KUBE_SERVICE_ACCOUNT_DIR below `root` (NULL or ""
 * means "/"; tests pass a fixture tree). Errors: -ENOENT "not running in a
 * cluster" when either variable is unset or empty; the read errors of the
 * token and CA files (the namespace file is optional). */
int mk_kube_config_in_cluster(const char *root, struct mk_kube_config *ret, struct mk_error *e)
        _nonnull_(2) _wur_;

/* What a daemon uses: KUBECONFIG when set and non-empty; else in-cluster when
 * KUBERNETES_SERVICE_HOST is set; else $HOME/.kube/config when it exists;
 * else -ENOENT naming the three. `root` as for mk_kube_config_in_cluster(). */
int mk_kube_config_load(const char *root, struct mk_kube_config *ret, struct mk_error *e) _nonnull_(2) _wur_;

/* Strict base64 (RFC 4648 standard alphabet) as Go's encoding/json decodes
 * []byte fields: '\r' and '\n' are skipped, padding is optional. Returns a
 * malloc'd buffer with a NUL after the data. -EINVAL for other bytes. */
int mk_base64_decode(const char *s, size_t len, char **ret, size_t *ret_len) _nonnull_(1, 3, 4) _wur_;

/* Checks that a bearer token is usable in an HTTP header: non-empty, no
 * control characters, no spaces. 0 or -EINVAL. */
int mk_kube_token_check(const char *token) _nonnull_(1);
