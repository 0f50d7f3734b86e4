/* service.yaml (settings.h, docs/service.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "host/clients.h"
#include "service/settings.h"
#include "spec/yaml.h"

struct mk_service_settings *mk_service_settings_free(struct mk_service_settings *s) {
        if (!s)
                return NULL;
        free(s->file);
        mk_gpu_clients_done(&s->clients);
        free(s);
        return NULL;
}

static struct mk_service_settings *settings_new(const char *file) {
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->file = strdup(file);
        if (!s->file || mk_gpu_clients_init_default(&s->clients) < 0)
                return NULL;
        s->reboot = false;
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
                r = mk_gpu_clients_parse_list(c, m.pairs[i].value, units, &l, &count);
                if (r < 0)
                        return r;
                if (units) {
                        strv_free(s->clients.systemd_services);
                        s->clients.systemd_services = l;
                        s->clients.n_systemd_services = count;
                } else {
                        strv_free(s->clients.container_images);
                        s->clients.container_images = l;
                        s->clients.n_container_images = count;
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
                uint64_t *dst = streq(k, "stop") ? &s->clients.stop_timeout_ms
                                : streq(k, "start") ? &s->clients.start_timeout_ms
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

/* The document into a new mk_service_settings (mk_yaml_parse_walk's walk). */
static int walk(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata) {
        struct mk_service_settings **ret = userdata;
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *x = settings_new(c->file);
        if (!x)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        int r = parse_top(c, root, x);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(x);
        return 0;
}

int mk_service_settings_parse(const char *data, size_t len, const char *file, struct mk_service_settings **ret,
                              struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_SERVICE_YAML_BYTES, walk, ret, e);
}

int mk_service_settings_load(const char *path, struct mk_service_settings **ret, struct mk_error *e) {
        return mk_yaml_load_walk(path, MK_MAX_SERVICE_YAML_BYTES, walk, ret, e);
}
