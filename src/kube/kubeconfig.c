/* kubeconfig files and the in-cluster service account -> struct mk_kube_config.
 *
 * kubeconfig is read with spec/yaml.h's bounded tree parser (the generic YAML
 * layer, not the mig-parted schemas), so errors carry file:line:column and
 * the field path. Merging of KUBECONFIG lists follows client-go's
 * clientcmd: for each name, the first file that defines it wins; the first
 * non-empty current-context wins. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/kubeconfig.h"
#include "spec/yaml.h"

void mk_kube_config_done(struct mk_kube_config *c) {
        if (!c)
                return;
        free(c->server);
        free(c->ca_pem);
        /* Secrets: do not leave them in freed memory. */
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        free(c->token_file);
        free(c->cert_pem);
        if (c->key_pem)
                explicit_bzero(c->key_pem, c->key_pem_len);
        free(c->key_pem);
        free(c->namespace);
        free(c->source);
        *c = (struct mk_kube_config) {};
}

int mk_base64_decode(const char *s, size_t len, char **ret, size_t *ret_len) {
        static const signed char table[256] = {
                ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,
                ['H'] = 8,  ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
                ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
                ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28,
                ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35,
                ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
                ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
                ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
                ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63,
                ['/'] = 64,
        }; /* value + 1; 0 = not in the alphabet */
        _cleanup_free_ char *out = malloc(len / 4 * 3 + 4);
        if (!out)
                return -ENOMEM;
        size_t n = 0, pad = 0;
        unsigned acc = 0, bits = 0, digits = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) s[i];
                if (ch == '\r' || ch == '\n')
                        continue;
                if (ch == '=') {
                        pad++;
                        continue;
                }
                if (pad > 0 || table[ch] == 0)
                        return -EINVAL; /* data after padding, or not base64 */
                acc = (acc << 6) | (unsigned) (table[ch] - 1);
                bits += 6;
                digits++;
                if (bits >= 8) {
                        bits -= 8;
                        out[n++] = (char) ((acc >> bits) & 0xff);
                }
        }
        /* A lone digit in the last group cannot encode a byte; padding, when
         * present, must complete the group; left-over bits must be zero. */
        if (digits % 4 == 1 || (pad > 0 && (digits + pad) % 4 != 0) || pad > 2)
                return -EINVAL;
        if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
                return -EINVAL;
        out[n] = 0;
        *ret_len = n;
        *ret = TAKE_PTR(out);
        return 0;
}

int mk_kube_token_check(const char *token) {
        if (!*token)
                return -EINVAL;
        for (const char *p = token; *p; p++)
                if ((unsigned char) *p <= ' ' || (unsigned char) *p == 0x7f)
                        return -EINVAL;
        return 0;
}

/* Reads a token file: at most MK_MAX_KUBE_TOKEN_BYTES, surrounding blanks
 * removed (client-go trims it), checked for use in a header. */
static int read_token_file(const char *path, char **ret, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len;
        int r = mk_read_file(path, MK_MAX_KUBE_TOKEN_BYTES, &data, &len, e);
        if (r < 0)
                return r;
        if (strlen(data) != len)
                return mk_error_set(e, -EINVAL, "token file '%s' contains a NUL byte", path);
        while (len > 0 && strchr(" \t\r\n", data[len - 1]))
                data[--len] = 0;
        size_t skip = strspn(data, " \t\r\n");
        if (skip > 0)
                memmove(data, data + skip, len - skip + 1);
        if (mk_kube_token_check(data) < 0)
                return mk_error_set(e, -EINVAL, "token file '%s' is empty or holds blanks or control characters",
                                    path);
        *ret = TAKE_PTR(data);
        return 0;
}

/* ---- kubeconfig ---- */

struct kc_file {
        char *path;
        char *dir;                      /* for relative paths in the file */
        char *data;
        struct mk_yaml_doc *doc;
};

struct kc {
        struct kc_file files[MK_MAX_KUBECONFIG_FILES];
        size_t n;
};

static void kc_done(struct kc *k) {
        for (size_t i = 0; i < k->n; i++) {
                free(k->files[i].path);
                free(k->files[i].dir);
                free(k->files[i].data);
                mk_yaml_doc_free(k->files[i].doc);
        }
        k->n = 0;
}

static const struct mk_yaml_node *map_get(const struct mk_yaml_node *map, const char *key) {
        if (!map || map->kind != MK_YAML_MAPPING)
                return NULL;
        for (size_t i = 0; i + 1 < map->n_items; i += 2) {
                const struct mk_yaml_node *k = map->items[i];
                if (k->kind == MK_YAML_SCALAR && strlen(k->value) == k->len && streq(k->value, key))
                        return map->items[i + 1];
        }
        return NULL;
}

/* The string value of map[key]; *ret NULL when absent, null or empty. */
static int get_string(struct mk_yaml_ctx *c, const struct mk_yaml_node *map, const char *key, char **ret) {
        const struct mk_yaml_node *v = map_get(map, key);
        *ret = NULL;
        if (!v)
                return 0;
        size_t old = mk_yaml_path_push_key(c, key);
        char *s = NULL;
        int r = mk_yaml_to_string(c, v, false, &s);
        if (r < 0)
                return r;
        mk_yaml_path_pop(c, old);
        if (!*s)
                free(s);
        else
                *ret = s;
        return 0;
}

static int get_bool(struct mk_yaml_ctx *c, const struct mk_yaml_node *map, const char *key, bool *ret) {
        const struct mk_yaml_node *v = map_get(map, key);
        *ret = false;
        if (!v)
                return 0;
        size_t old = mk_yaml_path_push_key(c, key);
        struct mk_yaml_scalar s;
        int r = mk_yaml_resolve(c, v, &s);
        if (r < 0)
                return r;
        if (s.type == MK_YAML_NULL) {
                mk_yaml_path_pop(c, old);
                return 0;
        }
        if (s.type != MK_YAML_BOOL)
                return mk_yaml_error(c, v, "%s: want true or false, got a %s", c->path, mk_yaml_type_json(s.type));
        mk_yaml_path_pop(c, old);
        *ret = s.b;
        return 0;
}

/* Finds the entry `name` in the list `list` ("clusters", "users",
 * "contexts") of the first file that has it; returns 1 with its `field`
 * mapping ("cluster", ...), the file and the entry's field path in c, 0
 * when no file has it, or a negative errno for a malformed entry. */
static int kc_find(struct kc *k, const char *list, const char *field, const char *name, struct kc_file **ret_file,
                   const struct mk_yaml_node **ret_node, struct mk_yaml_ctx *c) {
        for (size_t f = 0; f < k->n; f++) {
                const struct mk_yaml_node *root = k->files[f].doc->root;
                const struct mk_yaml_node *seq = map_get(root, list);
                if (!seq || seq->kind != MK_YAML_SEQUENCE)
                        continue;
                for (size_t i = 0; i < seq->n_items; i++) {
                        const struct mk_yaml_node *entry = seq->items[i];
                        const struct mk_yaml_node *nm = map_get(entry, "name");
                        if (!nm || nm->kind != MK_YAML_SCALAR || !streq(nm->value, name))
                                continue;
                        c->file = k->files[f].path;
                        c->path_len = 0;
                        c->path[0] = 0;
                        mk_yaml_path_push_key(c, list);
                        mk_yaml_path_push_index(c, i);
                        mk_yaml_path_push_key(c, field);
                        const struct mk_yaml_node *v = map_get(entry, field);
                        if (!v)
                                return mk_yaml_error(c, entry, "%s: missing (%s '%s' has no %s)", c->path, list,
                                                     name, field);
                        if (v->kind != MK_YAML_MAPPING)
                                return mk_yaml_error(c, v, "%s: want a mapping", c->path);
                        *ret_file = &k->files[f];
                        *ret_node = v;
                        return 1;
                }
        }
        return 0;
}

static int kc_load_file(struct kc *k, const char *path, bool must_exist, struct mk_error *e) {
        if (k->n >= MK_MAX_KUBECONFIG_FILES)
                return mk_error_set(e, -E2BIG, "more than %u kubeconfig files", MK_MAX_KUBECONFIG_FILES);
        _cleanup_free_ char *data = NULL;
        size_t len;
        int r = mk_read_file(path, MK_MAX_KUBECONFIG_BYTES, &data, &len, e);
        if (r == -ENOENT && !must_exist) {
                mk_error_clear(e);
                return 0;
        }
        if (r < 0)
                return r;
        struct mk_yaml_doc *doc = NULL;
        r = mk_yaml_parse(data, len, path, &doc, e);
        if (r < 0)
                return r;
        if (doc->root && doc->root->kind != MK_YAML_MAPPING) {
                unsigned line = doc->root->line, col = doc->root->column;
                mk_yaml_doc_free(doc);
                return mk_error_set_at(e, -EINVAL, path, line, col, "a kubeconfig file must be a mapping");
        }
        struct kc_file *f = &k->files[k->n];
        *f = (struct kc_file) {.doc = doc, .data = TAKE_PTR(data)};
        k->n++;
        f->path = strdup(path);
        const char *slash = strrchr(path, '/');
        f->dir = slash ? strndup(path, (size_t) (slash - path) + (slash == path)) : strdup(".");
        if (!f->path || !f->dir)
                return -ENOMEM;
        return 0;
}

/* Reads a file named by a kubeconfig field, relative to the file's directory. */
static int kc_read_path(struct mk_yaml_ctx *c, const struct kc_file *f, const struct mk_yaml_node *map,
                        const char *key, const char *rel, size_t cap, char **ret, size_t *ret_len,
                        char **ret_path) {
        _cleanup_free_ char *path = NULL;
        int r;
        if (rel[0] == '/')
                path = strdup(rel);
        else
                r = mk_path_join(f->dir, rel, &path);
        if (!path)
                return -ENOMEM;
        struct mk_error inner = {};
        if (ret_path)
                r = read_token_file(path, ret, &inner);
        else
                r = mk_read_file(path, cap, ret, ret_len, &inner);
        if (r < 0) {
                size_t old = mk_yaml_path_push_key(c, key);
                char buf[MK_ERROR_MSG_MAX];
                r = mk_yaml_error_code(c, r, map_get(map, key), "%s: %s", c->path,
                                       mk_error_format(&inner, buf, sizeof(buf)));
                mk_yaml_path_pop(c, old);
                return r;
        }
        if (ret_path)
                *ret_path = TAKE_PTR(path);
        return 0;
}

/* `key-data` (base64) wins over `key` (a file), as in client-go. Sets *ret
 * NULL when neither is given. */
static int kc_pem(struct mk_yaml_ctx *c, const struct kc_file *f, const struct mk_yaml_node *map,
                  const char *key, char **ret, size_t *ret_len) {
        _cleanup_free_ char *data_key = NULL, *b64 = NULL, *path = NULL;
        int r;
        *ret = NULL;
        *ret_len = 0;
        if (asprintf(&data_key, "%s-data", key) < 0)
                return -ENOMEM;
        r = get_string(c, map, data_key, &b64);
        if (r < 0)
                return r;
        if (b64) {
                if (strlen(b64) > MK_MAX_KUBE_PEM_BYTES / 3 * 4 + 1024) {
                        size_t old = mk_yaml_path_push_key(c, data_key);
                        r = mk_yaml_error_code(c, -E2BIG, map_get(map, data_key), "%s: larger than %u bytes",
                                               c->path, MK_MAX_KUBE_PEM_BYTES);
                        mk_yaml_path_pop(c, old);
                        return r;
                }
                r = mk_base64_decode(b64, strlen(b64), ret, ret_len);
                if (r == -EINVAL) {
                        size_t old = mk_yaml_path_push_key(c, data_key);
                        r = mk_yaml_error(c, map_get(map, data_key), "%s: not valid base64", c->path);
                        mk_yaml_path_pop(c, old);
                }
                return r;
        }
        r = get_string(c, map, key, &path);
        if (r < 0 || !path)
                return r;
        return kc_read_path(c, f, map, key, path, MK_MAX_KUBE_PEM_BYTES, ret, ret_len, NULL);
}

static int kc_cluster(struct kc *k, const char *name, struct mk_kube_config *cfg, struct mk_yaml_ctx *c) {
        struct kc_file *f;
        const struct mk_yaml_node *m;
        int r = kc_find(k, "clusters", "cluster", name, &f, &m, c);
        if (r <= 0)
                return r;
        r = get_string(c, m, "server", &cfg->server);
        if (r < 0)
                return r;
        if (!cfg->server)
                return mk_yaml_error(c, m, "%s.server: missing", c->path);
        r = get_bool(c, m, "insecure-skip-tls-verify", &cfg->insecure_skip_tls_verify);
        if (r < 0)
                return r;
        r = kc_pem(c, f, m, "certificate-authority", &cfg->ca_pem, &cfg->ca_pem_len);
        if (r < 0)
                return r;
        if (cfg->ca_pem && cfg->insecure_skip_tls_verify)
                /* client-go refuses this combination too. */
                return mk_yaml_error(c, m, "%s: certificate-authority with insecure-skip-tls-verify is not allowed",
                                     c->path);
        return 1;
}

static int kc_user(struct kc *k, const char *name, struct mk_kube_config *cfg, struct mk_yaml_ctx *c) {
        struct kc_file *f;
        const struct mk_yaml_node *m;
        int r = kc_find(k, "users", "user", name, &f, &m, c);
        if (r <= 0)
                return r;

        _cleanup_free_ char *token = NULL, *token_file = NULL;
        r = get_string(c, m, "token", &token);
        if (r < 0)
                return r;
        if (token && mk_kube_token_check(token) < 0) {
                size_t old = mk_yaml_path_push_key(c, "token");
                r = mk_yaml_error(c, map_get(m, "token"), "%s: holds blanks or control characters", c->path);
                mk_yaml_path_pop(c, old);
                return r;
        }
        r = get_string(c, m, "tokenFile", &token_file);
        if (r < 0)
                return r;
        if (token_file && !token) {
                /* Read now, so a bad path fails here naming the field; the
                 * client re-reads it. With both, client-go uses the token. */
                r = kc_read_path(c, f, m, "tokenFile", token_file, 0, &token, NULL, &cfg->token_file);
                if (r < 0)
                        return r;
        }
        cfg->token = TAKE_PTR(token);

        r = kc_pem(c, f, m, "client-certificate", &cfg->cert_pem, &cfg->cert_pem_len);
        if (r < 0)
                return r;
        r = kc_pem(c, f, m, "client-key", &cfg->key_pem, &cfg->key_pem_len);
        if (r < 0)
                return r;
        if (cfg->cert_pem && !cfg->key_pem)
                return mk_yaml_error(c, m, "%s.client-key: missing (client-certificate needs a key)", c->path);
        if (!cfg->cert_pem && cfg->key_pem)
                return mk_yaml_error(c, m, "%s.client-certificate: missing (client-key needs a certificate)",
                                     c->path);

        if (!cfg->token && !cfg->cert_pem) {
                static const char *const unsupported[] = {"exec", "auth-provider", "username", "password"};
                for (size_t i = 0; i < ELEMENTSOF(unsupported); i++) {
                        const struct mk_yaml_node *v = map_get(m, unsupported[i]);
                        if (!v)
                                continue;
                        size_t old = mk_yaml_path_push_key(c, unsupported[i]);
                        r = mk_yaml_error_code(c, -EOPNOTSUPP, v,
                                               "%s: not supported (use a token, tokenFile or client certificate)",
                                               c->path);
                        mk_yaml_path_pop(c, old);
                        return r;
                }
        }
        return 1;
}

/* "https://" prepended when the server has no scheme, as client-go does for
 * a TLS configuration; schemes other than http and https are refused. */
static int normalize_server(char **server) {
        char *s = *server;
        if (strncasecmp(s, "https://", 8) != 0 && strncasecmp(s, "http://", 7) != 0) {
                if (strstr(s, "://"))
                        return -EINVAL;
                char *t;
                if (asprintf(&t, "https://%s", s) < 0)
                        return -ENOMEM;
                free(s);
                *server = s = t;
        }
        for (const char *p = s; *p; p++)
                if ((unsigned char) *p <= ' ' || (unsigned char) *p == 0x7f)
                        return -EINVAL;
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
                s[--n] = 0;
        return 0;
}

/* Points error messages back at a field of the context. */
static void ctx_path_set(struct mk_yaml_ctx *c, const char *file, const char *path, const char *key) {
        c->file = file;
        snprintf(c->path, sizeof(c->path), "%s", path);
        c->path_len = strlen(c->path);
        mk_yaml_path_push_key(c, key);
}

/* A context's "cluster" or "user" (key) names no entry: the error, at that
 * key of the context (in file, at ctx_path). */
static int no_such_entry(struct mk_yaml_ctx *c, const char *file, const char *ctx_path,
                         const struct mk_yaml_node *ctx, const char *key, const char *name) {
        ctx_path_set(c, file, ctx_path, key);
        return mk_yaml_error(c, map_get(ctx, key), "%s: no %s named '%s'", c->path, key, name);
}

static int from_kubeconfig(const char *paths, const char *context, struct mk_kube_config *ret,
                           struct mk_error *e) {
        _cleanup_(kc_done) struct kc k = {};
        _cleanup_kube_config_done_ struct mk_kube_config cfg = {};
        struct mk_yaml_ctx c = {.e = e};
        int r;

        bool list = strchr(paths, ':') != NULL;
        const char *p = paths;
        while (*p) {
                size_t n = strcspn(p, ":");
                if (n > 0) {
                        _cleanup_free_ char *one = strndup(p, n);
                        if (!one)
                                return -ENOMEM;
                        r = kc_load_file(&k, one, !list, e);
                        if (r < 0)
                                return r;
                }
                p += n + (p[n] == ':');
        }
        if (k.n == 0)
                return mk_error_set(e, -ENOENT, "no kubeconfig file in '%s' exists", paths);

        /* The context: given, or the first non-empty current-context. */
        _cleanup_free_ char *ctx_name = NULL;
        if (context) {
                ctx_name = strdup(context);
                if (!ctx_name)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < k.n && !ctx_name; i++) {
                c.file = k.files[i].path;
                r = get_string(&c, k.files[i].doc->root, "current-context", &ctx_name);
                if (r < 0)
                        return r;
        }
        if (!ctx_name)
                return mk_error_set_field(e, -EINVAL, "current-context",
                                          "current-context: not set in '%s' and no context given", paths);

        struct kc_file *f;
        const struct mk_yaml_node *m;
        r = kc_find(&k, "contexts", "context", ctx_name, &f, &m, &c);
        if (r == 0)
                return mk_error_set_field(e, -EINVAL, "contexts", "contexts: no context named '%s' in '%s'",
                                          ctx_name, paths);
        if (r < 0)
                return r;
        _cleanup_free_ char *cluster = NULL, *user = NULL;
        char ctx_path[MK_ERROR_LOC_MAX];
        snprintf(ctx_path, sizeof(ctx_path), "%s", c.path);
        r = get_string(&c, m, "cluster", &cluster);
        if (r < 0)
                return r;
        if (!cluster)
                return mk_yaml_error(&c, m, "%s.cluster: missing (context '%s')", c.path, ctx_name);
        r = get_string(&c, m, "user", &user);
        if (r < 0)
                return r;
        r = get_string(&c, m, "namespace", &cfg.namespace);
        if (r < 0)
                return r;
        const char *ctx_file = f->path;

        r = kc_cluster(&k, cluster, &cfg, &c);
        if (r == 0)
                return no_such_entry(&c, ctx_file, ctx_path, m, "cluster", cluster);
        if (r < 0)
                return r;
        if (user) {
                r = kc_user(&k, user, &cfg, &c);
                if (r == 0)
                        return no_such_entry(&c, ctx_file, ctx_path, m, "user", user);
                if (r < 0)
                        return r;
        }
        r = normalize_server(&cfg.server);
        if (r == -EINVAL)
                return mk_error_set_field(e, -EINVAL, "server", "server '%s': want an https:// (or http://) URL",
                                          cfg.server);
        if (r < 0)
                return r;
        if (asprintf(&cfg.source, "kubeconfig '%s' context '%s'", paths, ctx_name) < 0)
                return -ENOMEM;
        *ret = cfg;
        cfg = (struct mk_kube_config) {};
        return 0;
}

/* ---- in-cluster ---- */

static int in_cluster(const char *root, struct mk_kube_config *ret, struct mk_error *e) {
        _cleanup_kube_config_done_ struct mk_kube_config cfg = {};
        _cleanup_free_ char *dir = NULL, *token_path = NULL, *ca_path = NULL, *ns_path = NULL, *ns = NULL;
        int r;

        const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
        const char *port = secure_getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !*host || !port || !*port)
                return mk_error_set(e, -ENOENT,
                                    "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                                    "must be set");
        if (!root || !*root)
                root = "/";
        if (mk_path_join(root, MK_KUBE_SERVICE_ACCOUNT_DIR, &dir) < 0 || mk_path_join(dir, "token", &token_path) < 0 ||
            mk_path_join(dir, "ca.crt", &ca_path) < 0 || mk_path_join(dir, "namespace", &ns_path) < 0)
                return -ENOMEM;

        /* An IPv6 service address needs brackets (Go's net.JoinHostPort). */
        bool v6 = strchr(host, ':') != NULL;
        if (asprintf(&cfg.server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port) < 0)
                return -ENOMEM;
        r = normalize_server(&cfg.server);
        if (r < 0)
                return mk_error_set(e, r, "KUBERNETES_SERVICE_HOST/PORT do not make a URL: '%s'", cfg.server);

        r = read_token_file(token_path, &cfg.token, e);
        if (r < 0)
                return r;
        cfg.token_file = TAKE_PTR(token_path);
        r = mk_read_file(ca_path, MK_MAX_KUBE_PEM_BYTES, &cfg.ca_pem, &cfg.ca_pem_len, e);
        if (r < 0)
                return r;
        /* The namespace file is optional (client-go falls back to "default"). */
        size_t len;
        r = mk_read_file(ns_path, 256, &ns, &len, NULL);
        if (r >= 0) {
                while (len > 0 && strchr(" \t\r\n", ns[len - 1]))
                        ns[--len] = 0;
                if (len > 0 && strlen(ns) == len)
                        cfg.namespace = TAKE_PTR(ns);
        }
        cfg.source = strdup("in-cluster");
        if (!cfg.source)
                return -ENOMEM;
        *ret = cfg;
        cfg = (struct mk_kube_config) {};
        return 0;
}

int mk_kube_config_from_kubeconfig(const char *paths, const char *context, struct mk_kube_config *ret,
                                   struct mk_error *e) {
        return mk_error_ensure(e, from_kubeconfig(paths, context, ret, e), "Failed to load kubeconfig '%s'", paths);
}

int mk_kube_config_in_cluster(const char *root, struct mk_kube_config *ret, struct mk_error *e) {
        return mk_error_ensure(e, in_cluster(root, ret, e), "Failed to read the in-cluster configuration");
}

int mk_kube_config_load(const char *root, struct mk_kube_config *ret, struct mk_error *e) {
        const char *kubeconfig = secure_getenv("KUBECONFIG");
        if (kubeconfig && *kubeconfig) {
                log_debug_area("k8s", "Using KUBECONFIG '%s'", kubeconfig);
                return mk_kube_config_from_kubeconfig(kubeconfig, NULL, ret, e);
        }
        const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
        if (host && *host) {
                log_debug_area("k8s", "Using the in-cluster configuration");
                return mk_kube_config_in_cluster(root, ret, e);
        }
        const char *home = secure_getenv("HOME");
        if (home && *home) {
                _cleanup_free_ char *path = NULL;
                if (mk_path_join(home, ".kube/config", &path) < 0)
                        return -ENOMEM;
                struct stat st;
                if (stat(path, &st) == 0) {
                        log_debug_area("k8s", "Using '%s'", path);
                        return mk_kube_config_from_kubeconfig(path, NULL, ret, e);
                }
        }
        return mk_error_set(e, -ENOENT,
                            "no Kubernetes configuration: KUBECONFIG is unset, KUBERNETES_SERVICE_HOST is unset (not "
                            "in a cluster), and there is no ~/.kube/config");
}
