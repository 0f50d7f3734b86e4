/* mig-parted hooks file v1 (mig-parted v0.15.0 api/hooks/v1/hooks.go).
 * Upstream decodes with sigs.k8s.io/yaml into typed structs without a custom
 * decoder, so: unknown keys are ignored (but not unknown hook names, below), struct field names match
 * case-insensitively (`Command:`), and scalars bound for string fields are
 * turned into strings (`args: [1, yes]` is "1", "true"; YAML 1.1 typing as
 * in config.c). A wrong type (a list where a string goes) is an error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "spec/config.h" /* MK_MAX_YAML_BYTES */
#include "spec/hooks.h"
#include "spec/yaml.h"

static const char *const hook_table[_MK_HOOK_MAX] = {
        [MK_HOOK_APPLY_START] = "apply-start",
        [MK_HOOK_PRE_APPLY_MODE] = "pre-apply-mode",
        [MK_HOOK_PRE_APPLY_CONFIG] = "pre-apply-config",
        [MK_HOOK_APPLY_EXIT] = "apply-exit",
};

const char *mk_hook_to_string(enum mk_hook h) {
        if (h < 0 || h >= _MK_HOOK_MAX)
                return NULL;
        return hook_table[h];
}

enum mk_hook mk_hook_from_string(const char *s) {
        if (!s)
                return _MK_HOOK_INVALID;
        for (int i = 0; i < _MK_HOOK_MAX; i++)
                if (strcasecmp(s, hook_table[i]) == 0)
                        return (enum mk_hook) i;
        return _MK_HOOK_INVALID;
}

static void entry_done(struct mk_hook_entry *x) {
        free(x->command);
        strv_free(x->args);
        strv_free(x->envs);
        free(x->workdir);
        *x = (struct mk_hook_entry){0};
}

struct mk_hooks *mk_hooks_free(struct mk_hooks *h) {
        if (!h)
                return NULL;
        for (int i = 0; i < _MK_HOOK_MAX; i++) {
                for (size_t j = 0; j < h->n_entries[i]; j++)
                        entry_done(&h->entries[i][j]);
                free(h->entries[i]);
        }
        free(h->version);
        free(h->file);
        free(h);
        return NULL;
}

/* A scalar for a Go string field, capped. */
static int get_string(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret) {
        char *s;
        int r = mk_yaml_to_string(c, n, false, &s);
        if (r < 0)
                return r;
        if (strlen(s) > MK_MAX_HOOK_STRING) {
                free(s);
                return mk_yaml_error(c, n, "%s too long (at most %d bytes)", what, MK_MAX_HOOK_STRING);
        }
        *ret = s;
        return 0;
}

/* A list or null (mk_yaml_get_list) of at most `max` items, else "too many <what> (at most <max>)". */
static int get_list_max(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, size_t max,
                        const char *what, size_t *ret) {
        int r = mk_yaml_get_list(c, n, go_type, ret);
        if (r < 0)
                return r;
        if (*ret > max)
                return mk_yaml_error(c, n, "too many %s (at most %zu)", what, max);
        return 0;
}

static int get_args(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, char ***ret) {
        size_t count;
        int r = get_list_max(c, n, "[]string", MK_MAX_HOOK_ARGS, "args", &count);
        if (r < 0)
                return r;

        _cleanup_strv_free_ char **args = calloc(count + 1, sizeof(char *));
        if (!args)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < count; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                r = get_string(c, n->items[i], "arg", &args[i]);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        *ret = TAKE_PTR(args);
        return 0;
}

static int get_envs(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, char ***ret) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_get_map(c, n, "v1.EnvsMap", &m);
        if (r < 0)
                return r;
        if (m.n > MK_MAX_HOOK_ENVS)
                return mk_yaml_error(c, n, "too many envs (at most %d)", MK_MAX_HOOK_ENVS);

        _cleanup_strv_free_ char **envs = calloc(m.n + 1, sizeof(char *));
        if (!envs)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < m.n; i++) {
                const char *name = m.pairs[i].name;
                size_t old = mk_yaml_path_push_key(c, name);
                if (!*name || strchr(name, '='))
                        return mk_yaml_error(c, m.pairs[i].key, "invalid environment variable name '%s'", name);

                _cleanup_free_ char *value = NULL;
                r = mk_yaml_to_string(c, m.pairs[i].value, false, &value);
                if (r < 0)
                        return r;
                _cleanup_buf_done_ struct mk_buf b = {0};
                mk_buf_init(&b, MK_MAX_HOOK_STRING);
                r = mk_buf_printf(&b, "%s=%s", name, value);
                if (r == -E2BIG)
                        return mk_yaml_error(c, m.pairs[i].value, "environment variable too long (at most %d bytes)",
                                             MK_MAX_HOOK_STRING);
                if (r < 0)
                        return mk_yaml_error_code(c, r, m.pairs[i].value, "out of memory");
                envs[i] = mk_buf_take(&b);
                if (!envs[i])
                        return mk_yaml_error_code(c, -ENOMEM, m.pairs[i].value, "out of memory");
                mk_yaml_path_pop(c, old);
        }
        *ret = TAKE_PTR(envs);
        return 0;
}

enum { F_COMMAND, F_ARGS, F_ENVS, F_WORKDIR, _F_MAX };
static const char *const entry_fields[_F_MAX] = {"command", "args", "envs", "workdir"};

/* One HookSpec. */
static int parse_entry(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_hook_entry *ret) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        _cleanup_(entry_done) struct mk_hook_entry x = {0};
        int r = mk_yaml_get_map(c, n, "v1.HookSpec", &m);
        if (r < 0)
                return r;

        bool seen[_F_MAX] = {false};
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                int f = -1;
                for (int j = 0; j < _F_MAX; j++)
                        if (strcasecmp(k, entry_fields[j]) == 0)
                                f = j;
                if (f < 0)
                        continue; /* unknown keys are ignored, as upstream */

                size_t old = mk_yaml_path_push_key(c, k);
                const struct mk_yaml_node *val = m.pairs[i].value;
                if (seen[f])
                        return mk_yaml_error(c, m.pairs[i].key, "duplicate key: %s", k);
                seen[f] = true;
                switch (f) {
                case F_COMMAND:
                        r = get_string(c, val, "command", &x.command);
                        if (r >= 0 && !*x.command)
                                r = mk_yaml_error(c, val, "invalid empty command");
                        break;
                case F_ARGS:
                        r = get_args(c, val, &x.args);
                        break;
                case F_ENVS:
                        r = get_envs(c, val, &x.envs);
                        break;
                case F_WORKDIR:
                        r = get_string(c, val, "workdir", &x.workdir);
                        if (r >= 0 && !*x.workdir) {
                                free(x.workdir); /* "" = inherit */
                                x.workdir = NULL;
                        }
                        break;
                }
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }

        if (!x.command || !*x.command) {
                size_t old = mk_yaml_path_push_key(c, "command");
                r = mk_yaml_error(c, n, "missing required field: command");
                mk_yaml_path_pop(c, old);
                return r;
        }
        if (!x.args) {
                x.args = calloc(1, sizeof(char *));
                if (!x.args)
                        return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        }
        if (!x.envs) {
                x.envs = calloc(1, sizeof(char *));
                if (!x.envs)
                        return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        }
        *ret = x;
        x = (struct mk_hook_entry){0};
        return 0;
}

static int parse_hook_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, int hook, struct mk_hooks *h) {
        size_t count;
        int r = get_list_max(c, n, "[]v1.HookSpec", MK_MAX_HOOK_ENTRIES, "entries", &count);
        if (r < 0)
                return r;

        if (count > 0) {
                h->entries[hook] = calloc(count, sizeof(struct mk_hook_entry));
                if (!h->entries[hook])
                        return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        }
        for (size_t i = 0; i < count; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                r = parse_entry(c, n->items[i], &h->entries[hook][i]);
                if (r < 0)
                        return r;
                h->n_entries[hook]++;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int hook_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        /* Exact match: upstream looks hooks up by their exact name. It
         * ignores any other name, so a typo there is a hook that never
         * runs: refused here. */
        for (int j = 0; j < _MK_HOOK_MAX; j++)
                if (streq(p->name, hook_table[j]))
                        return parse_hook_list(c, p->value, j, userdata);
        const char *near = mk_closest_word(p->name, hook_table, _MK_HOOK_MAX);
        if (near)
                return mk_yaml_error(c, p->key, "unknown hook '%s' (did you mean '%s'?)", p->name, near);
        return mk_yaml_error(c, p->key, "unknown hook '%s' (known: %s, %s, %s, %s)", p->name, hook_table[0],
                             hook_table[1], hook_table[2], hook_table[3]);
}

static int parse_hooks_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_hooks *h) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_get_map(c, n, "v1.HooksMap", &m);
        if (r < 0)
                return r;
        return mk_yaml_map_each(c, &m, hook_field, h);
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_hooks *h) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        if (!root)
                return 0;
        int r = mk_yaml_get_map(c, root, "v1.Spec", &m);
        if (r < 0)
                return r;

        bool seen_version = false, seen_hooks = false;
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                bool is_version = strcasecmp(k, "version") == 0, is_hooks = strcasecmp(k, "hooks") == 0;
                if (!is_version && !is_hooks)
                        continue;
                size_t old = mk_yaml_path_push_key(c, k);
                if ((is_version && seen_version) || (is_hooks && seen_hooks))
                        return mk_yaml_error(c, m.pairs[i].key, "duplicate key: %s", k);
                if (is_version) {
                        seen_version = true;
                        struct mk_yaml_scalar vv;
                        r = mk_yaml_resolve(c, m.pairs[i].value, &vv);
                        if (r < 0)
                                return r;
                        if (vv.type != MK_YAML_NULL) {
                                r = get_string(c, m.pairs[i].value, "version", &h->version);
                                if (r < 0)
                                        return r;
                        }
                } else {
                        seen_hooks = true;
                        r = parse_hooks_map(c, m.pairs[i].value, h);
                        if (r < 0)
                                return r;
                }
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

/* The document into a new mk_hooks (mk_yaml_parse_walk's walk). */
MK_YAML_DEFINE_WALK(walk, struct mk_hooks, mk_hooks_freep, parse_top)

int mk_hooks_parse(const char *data, size_t len, const char *file, struct mk_hooks **ret, struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_YAML_BYTES, walk, ret, e);
}

int mk_hooks_load(const char *path, struct mk_hooks **ret, struct mk_error *e) {
        if (!path || !*path)
                return mk_hooks_parse("", 0, "", ret, e);
        return mk_yaml_load_walk(path, MK_MAX_YAML_BYTES, walk, ret, e);
}
