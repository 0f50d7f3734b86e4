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

/* The defaults every settings object starts from. */
static int settings_init(struct mk_service_settings *s) {
        int r = mk_gpu_clients_init_default(&s->clients);
        if (r < 0)
                return r;
        s->reboot = false;
        s->apply_timeout_ms = MK_SERVICE_DEFAULT_APPLY_MS;
        return 0;
}

int mk_service_settings_default(struct mk_service_settings **ret) {
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = calloc(1, sizeof(*s));
        if (!s || !(s->file = strdup("(defaults)")) || settings_init(s) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(s);
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

static int client_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_service_settings *s = userdata;
        bool units = streq(p->name, "systemd-services");
        char **l = NULL;
        size_t count = 0;
        int r = mk_gpu_clients_parse_list(c, p->value, units, &l, &count);
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
        return 0;
}

static int timeout_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_service_settings *s = userdata;
        uint64_t *dst = streq(p->name, "stop")    ? &s->clients.stop_timeout_ms
                        : streq(p->name, "start") ? &s->clients.start_timeout_ms
                                                  : &s->apply_timeout_ms;
        return get_duration(c, p->value, dst);
}

static int top_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        static const char *const clients_known[] = {"systemd-services", "container-images", NULL};
        static const char *const timeouts_known[] = {"stop", "start", "apply", NULL};
        struct mk_service_settings *s = userdata;
        if (streq(p->name, "version"))
                return mk_yaml_check_version(c, p->value, "v1");
        if (streq(p->name, "gpu-clients"))
                return mk_yaml_walk_known(c, p->value, "gpu-clients", clients_known, true, client_field, s);
        if (streq(p->name, "reboot"))
                return mk_yaml_get_bool(c, p->value, &s->reboot);
        return mk_yaml_walk_known(c, p->value, "timeouts", timeouts_known, true, timeout_field, s);
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_service_settings *s) {
        static const char *const known[] = {"version", "gpu-clients", "reboot", "timeouts", NULL};
        if (!root)
                return mk_yaml_error(c, NULL, "empty file: want at least 'version: v1'");
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, root, "the document", known, true, &m);
        if (r < 0)
                return r;
        r = mk_yaml_map_each(c, &m, top_field, s);
        if (r < 0)
                return r;
        if (!mk_yaml_map_find(&m, "version"))
                return mk_yaml_error(c, root, "missing required field 'version' (want 'version: v1')");
        return 0;
}

/* service.yaml starts from the defaults (settings_init()), not from zeros. */
static int parse_document(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_service_settings *s) {
        int r = settings_init(s);
        if (r < 0)
                return mk_yaml_error_code(c, r, NULL, "out of memory");
        return parse_top(c, root, s);
}

MK_YAML_DEFINE_WALK(walk, struct mk_service_settings, mk_service_settings_freep, parse_document)

int mk_service_settings_parse(const char *data, size_t len, const char *file, struct mk_service_settings **ret,
                              struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_SERVICE_YAML_BYTES, walk, ret, e);
}

int mk_service_settings_load(const char *path, struct mk_service_settings **ret, struct mk_error *e) {
        return mk_yaml_load_walk(path, MK_MAX_SERVICE_YAML_BYTES, walk, ret, e);
}
