/* service.yaml (settings.h, docs/service.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "service/settings.h"
#include "spec/yaml.h"

/* Driver clients and Kubernetes components, in the order they start; they
 * are stopped in reverse (kubelet first). mig-parted's hooks.sh lists and the
 * operator's default-gpu-clients (mig-parted.md §7.4, §8.5). */
const char *const mk_service_default_units[] = {
        "nvsm.service",
        "nvsm-mqtt.service",
        "nvsm-core.service",
        "nvsm-api-gateway.service",
        "nvsm-notifier.service",
        "nv_peer_mem.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "dcgm-exporter.service",
        "kubelet.service",
        NULL,
};

const char *const mk_service_default_images[] = {
        "k8s-device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        NULL,
};

struct mk_service_settings *mk_service_settings_free(struct mk_service_settings *s) {
        if (!s)
                return NULL;
        free(s->file);
        strv_free(s->systemd_services);
        strv_free(s->container_images);
        free(s);
        return NULL;
}

static char **strv_copy(const char *const *l, size_t *ret_n) {
        size_t n = 0;
        while (l[n])
                n++;
        _cleanup_strv_free_ char **c = calloc(n + 1, sizeof(char *));
        if (!c)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                c[i] = strdup(l[i]);
                if (!c[i])
                        return NULL;
        }
        *ret_n = n;
        return TAKE_PTR(c);
}

static struct mk_service_settings *settings_new(const char *file) {
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->file = strdup(file);
        s->systemd_services = strv_copy(mk_service_default_units, &s->n_systemd_services);
        s->container_images = strv_copy(mk_service_default_images, &s->n_container_images);
        if (!s->file || !s->systemd_services || !s->container_images)
                return NULL;
        s->reboot = false;
        s->stop_timeout_ms = MK_SERVICE_DEFAULT_STOP_MS;
        s->start_timeout_ms = MK_SERVICE_DEFAULT_START_MS;
        s->apply_timeout_ms = MK_SERVICE_DEFAULT_APPLY_MS;
        return TAKE_PTR(s);
}

int mk_service_settings_default(struct mk_service_settings **ret) {
        struct mk_service_settings *s = settings_new("(defaults)");
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

bool mk_service_unit_name_valid(const char *s) {
        static const char *const types[] = {".service", ".socket", ".device", ".mount", ".automount", ".swap",
                                            ".target",  ".path",   ".timer",  ".slice", ".scope"};
        size_t n = strlen(s);
        if (n == 0 || n > MK_MAX_CLIENT_NAME || s[0] == '-' || s[0] == '.')
                return false;
        for (const char *p = s; *p; p++)
                if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789:_.\\@-", *p))
                        return false;
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                size_t k = strlen(types[i]);
                if (n > k && streq(s + n - k, types[i]))
                        return true;
        }
        return false;
}

bool mk_service_image_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > MK_MAX_CLIENT_NAME || s[0] == '-')
                return false;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p <= ' ' || *p >= 0x7f)
                        return false;
        return true;
}

static int get_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool units, char ***ret, size_t *ret_n) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        size_t count = 0;
        if (v.type == MK_YAML_SEQ)
                count = n->n_items;
        else if (v.type != MK_YAML_NULL)
                return mk_yaml_error(c, n, "must be a list of %s names, not %s", units ? "systemd unit" : "image",
                                     mk_yaml_type_json(v.type));
        if (count > MK_MAX_GPU_CLIENTS)
                return mk_yaml_error(c, n, "too many entries (at most %d)", MK_MAX_GPU_CLIENTS);
        _cleanup_strv_free_ char **l = calloc(count + 1, sizeof(char *));
        if (!l)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < count; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                r = mk_yaml_get_str(c, it, units ? "a unit name" : "an image name", &l[i]);
                if (r < 0)
                        return r;
                if (strlen(l[i]) > MK_MAX_CLIENT_NAME)
                        return mk_yaml_error(c, it, "name too long (at most %d bytes)", MK_MAX_CLIENT_NAME);
                if (units && !mk_service_unit_name_valid(l[i]))
                        return mk_yaml_error(c, it,
                                             "invalid systemd unit name '%s' (want NAME.TYPE such as "
                                             "'kubelet.service')",
                                             l[i]);
                if (!units && !mk_service_image_name_valid(l[i]))
                        return mk_yaml_error(c, it, "invalid image name '%s'", l[i]);
                for (size_t k = 0; k < i; k++)
                        if (streq(l[k], l[i]))
                                return mk_yaml_error(c, it, "'%s' is listed twice", l[i]);
                mk_yaml_path_pop(c, old);
        }
        *ret = TAKE_PTR(l);
        *ret_n = count;
        return 0;
}

static int get_duration(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, uint64_t *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_STR)
                return mk_yaml_error(c, n, "must be a duration such as \"120s\" or \"2m\", not %s",
                                     mk_yaml_type_json(v.type));
        uint64_t ms = 0;
        r = strlen(n->value) == n->len ? mk_parse_duration_ms(n->value, &ms) : -EINVAL;
        if (r < 0 && r != -ERANGE)
                return mk_yaml_error(c, n, "invalid duration '%s' (want a sequence of NUMBER UNIT, unit h, m, s or ms: "
                                           "\"120s\", \"1m30s\")",
                                     n->value);
        if (r == -ERANGE || ms > MK_MAX_SERVICE_TIMEOUT_MS)
                return mk_yaml_error(c, n, "duration '%s' too long (at most 24h)", n->value);
        if (ms == 0)
                return mk_yaml_error(c, n, "duration must not be zero");
        *ret = ms;
        return 0;
}

static int parse_clients(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_service_settings *s) {
        static const char *const known[] = {"systemd-services", "container-images", NULL};
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, n, "gpu-clients", known, true, &m);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                size_t old = mk_yaml_path_push_key(c, k);
                bool units = streq(k, "systemd-services");
                char **l = NULL;
                size_t count = 0;
                r = get_list(c, m.pairs[i].value, units, &l, &count);
                if (r < 0)
                        return r;
                if (units) {
                        strv_free(s->systemd_services);
                        s->systemd_services = l;
                        s->n_systemd_services = count;
                } else {
                        strv_free(s->container_images);
                        s->container_images = l;
                        s->n_container_images = count;
                }
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int parse_timeouts(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_service_settings *s) {
        static const char *const known[] = {"stop", "start", "apply", NULL};
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, n, "timeouts", known, true, &m);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                size_t old = mk_yaml_path_push_key(c, k);
                uint64_t *dst = streq(k, "stop") ? &s->stop_timeout_ms
                                : streq(k, "start") ? &s->start_timeout_ms
                                                    : &s->apply_timeout_ms;
                r = get_duration(c, m.pairs[i].value, dst);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_service_settings *s) {
        static const char *const known[] = {"version", "gpu-clients", "reboot", "timeouts", NULL};
        if (!root)
                return mk_yaml_error(c, NULL, "empty file: want at least 'version: v1'");
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, root, "the document", known, true, &m);
        if (r < 0)
                return r;
        bool have_version = false;
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                const struct mk_yaml_node *v = m.pairs[i].value;
                size_t old = mk_yaml_path_push_key(c, k);
                if (streq(k, "version")) {
                        r = mk_yaml_check_version(c, v, "v1");
                        have_version = true;
                } else if (streq(k, "gpu-clients"))
                        r = parse_clients(c, v, s);
                else if (streq(k, "reboot"))
                        r = mk_yaml_get_bool(c, v, &s->reboot);
                else
                        r = parse_timeouts(c, v, s);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        if (!have_version)
                return mk_yaml_error(c, root, "missing required field 'version' (want 'version: v1')");
        return 0;
}

int mk_service_settings_parse(const char *data, size_t len, const char *file, struct mk_service_settings **ret,
                              struct mk_error *e) {
        struct mk_yaml_ctx c = {.file = file ? file : "<input>", .e = e};
        _cleanup_(mk_yaml_doc_freep) struct mk_yaml_doc *doc = NULL;
        int r = mk_yaml_parse_capped(data, len, c.file, MK_MAX_SERVICE_YAML_BYTES, &doc, e);
        if (r < 0)
                return r;
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = settings_new(c.file);
        if (!s)
                return mk_error_set_at(e, -ENOMEM, c.file, 0, 0, "out of memory");
        r = parse_top(&c, doc->root, s);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int mk_service_settings_load(const char *path, struct mk_service_settings **ret, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = mk_read_file(path, MK_MAX_SERVICE_YAML_BYTES, &data, &len, e);
        if (r < 0)
                return r;
        return mk_service_settings_parse(data, len, path, ret, e);
}
