/* mig-parted config v1 (mig-parted v0.15.0 api/spec/v1). Upstream decodes YAML with
 * go-yaml v2 (YAML 1.1), converts it to JSON (sigs.k8s.io/yaml) and runs a
 * strict custom JSON decode (api/spec/v1/spec.go). We walk the YAML tree and
 * apply the same typing and the same checks, in file order, with upstream's
 * wording; each error also carries file:line:column and the field path.
 *
 * Typing as upstream, so that a file means the same thing to both:
 *   - YAML 1.1 scalars: `mig-enabled: yes|on|y|True` are booleans (go-yaml
 *     v2), quoted "true" is a string and an error there;
 *   - integers in Go base-0 forms (0x1F, 0o17, 017, 0b11, 1_000), and
 *     integral floats (1.0, 1e3) where an int is wanted, as JSON numbers;
 *   - a null field reads as its zero value (`mig-enabled: ~` is false,
 *     `devices: ~` is the string "", `device-filter: ~` is no filter, a null
 *     count is 0), and an empty or null document is a file with no configs.
 * Stricter than upstream, on purpose (each an error with the position):
 *   - a device-filter that does not parse (upstream ignores it at match time,
 *     so the entry silently matches nothing);
 *   - negative or null device indices, and indices above MK_MAX_DEVICE_INDEX;
 *     (an index listed twice is accepted as upstream does: it selects its
 *     GPU once; mk_config_duplicate_device() gives the warning);
 *   - duplicate keys anywhere (go-yaml v2 keeps the last one silently);
 *   - counts above MK_MAX_MIG_COUNT, and the other MK_MAX_* caps. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "spec/config.h"
#include "spec/yaml.h"

static struct mk_pos pos_of(const struct mk_yaml_node *n) {
        return (struct mk_pos){.line = n->line, .column = n->column};
}

static void entry_done(struct mk_config_entry *x) {
        free(x->filters);
        free(x->devices);
        free(x->device_pos);
        free(x->mig_devices);
}

struct mk_config *mk_config_free(struct mk_config *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_configs; i++) {
                struct mk_named_config *nc = &c->configs[i];
                for (size_t j = 0; j < nc->n_entries; j++)
                        entry_done(&nc->entries[j]);
                free(nc->entries);
                free(nc->name);
        }
        free(c->configs);
        free(c->version);
        free(c->file);
        free(c);
        return NULL;
}

/* ---- device filters (mig-parted pkg/types/device.go) ---- */

static int parse_id_half(const char *s, size_t len, uint32_t *ret, const char *what, const char *whole,
                         struct mk_error *e) {
        char buf[64];
        uint32_t v;
        int r;

        if (len >= sizeof(buf))
                r = -EINVAL;
        else {
                memcpy(buf, s, len);
                buf[len] = 0;
                r = mk_parse_u32_base(buf, 0, &v);
        }
        if (r < 0)
                return mk_error_set(e, -EINVAL, "unable to create %s from string '%s': strconv.ParseUint: parsing \"%.*s\": %s",
                                    what, whole, (int) MIN(len, (size_t) 64), s,
                                    r == -ERANGE ? "value out of range" : "invalid syntax");
        *ret = v;
        return 0;
}

int mk_device_filter_parse(const char *s, struct mk_device_filter *ret, struct mk_error *e) {
        struct mk_device_filter f = {0};
        int r;

        if (!s)
                return mk_error_set(e, -EINVAL, "no device-filter given");
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':'))
                return mk_error_set(e, -EINVAL,
                                    "invalid DeviceID format '%s': expected '<devicevendor>' or "
                                    "'<devicevendor>:<subdevicevendor>'",
                                    s);
        r = parse_id_half(s, colon ? (size_t) (colon - s) : strlen(s), &f.device_vendor, "DeviceID", s, e);
        if (r < 0)
                return r;
        if (colon) {
                r = parse_id_half(colon + 1, strlen(colon + 1), &f.subsystem, "Subsystem", s, e);
                if (r < 0)
                        return r;
                f.has_subsystem = true;
        }
        *ret = f;
        return 0;
}

bool mk_device_filter_match(const struct mk_device_filter *f, uint32_t pci_device_id, uint32_t pci_subsystem_id) {
        if (f->device_vendor != pci_device_id)
                return false;
        return !f->has_subsystem || f->subsystem == pci_subsystem_id;
}

bool mk_config_entry_matches(const struct mk_config_entry *x, unsigned index, uint32_t pci_device_id,
                             uint32_t pci_subsystem_id) {
        if (x->n_filters > 0) {
                bool any = false;
                for (size_t i = 0; i < x->n_filters && !any; i++)
                        any = mk_device_filter_match(&x->filters[i], pci_device_id, pci_subsystem_id);
                if (!any)
                        return false;
        }
        if (x->all_devices)
                return true;
        for (size_t i = 0; i < x->n_devices; i++)
                if (x->devices[i] == index)
                        return true;
        return false;
}

int mk_config_duplicate_device(const struct mk_config *c, const struct mk_named_config *nc, struct mk_error *w) {
        for (size_t k = 0; k < nc->n_entries; k++) {
                const struct mk_config_entry *x = &nc->entries[k];
                if (x->dup_device_pos.line == 0)
                        continue;
                size_t j = 0;
                while (j < x->n_devices && (x->device_pos[j].line != x->dup_device_pos.line ||
                                            x->device_pos[j].column != x->dup_device_pos.column))
                        j++;
                mk_error_set_at(w, -EINVAL, c->file, x->dup_device_pos.line, x->dup_device_pos.column,
                                "GPU index %u is listed twice in 'devices' of mig-configs.%s[%zu]: it is "
                                "selected once (as mig-parted does)",
                                j < x->n_devices ? x->devices[j] : 0, nc->name, k);
                return 1;
        }
        return 0;
}

int mk_config_entry_layout(const struct mk_config_entry *x, struct mk_layout *ret) {
        struct mk_layout l = {0};
        for (size_t i = 0; i < x->n_mig_devices; i++) {
                if (x->mig_devices[i].count == 0)
                        continue;
                int r = mk_layout_add(&l, &x->mig_devices[i].name, x->mig_devices[i].count);
                if (r < 0) {
                        mk_layout_done(&l);
                        return r;
                }
        }
        mk_layout_canonicalize(&l);
        *ret = l;
        return 0;
}

int mk_config_names(const struct mk_config *c, char *buf, size_t size) {
        size_t used = 0;
        if (size)
                buf[0] = 0;
        for (size_t i = 0; i < c->n_configs && size; i++) {
                int k = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", c->configs[i].name);
                if (k < 0 || (size_t) k >= size - used) {
                        if (size >= 5)
                                snprintf(buf + MIN(used, size - 5), 5, ", ..");
                        return -ENOBUFS;
                }
                used += (size_t) k;
        }
        return 0;
}

int mk_config_select(const struct mk_config *c, const char *name, const struct mk_named_config **ret,
                     struct mk_error *e) {
        char names[256];
        (void) mk_config_names(c, names, sizeof(names));
        if (!name || !*name) {
                if (c->n_configs > 1)
                        return mk_error_set_at(e, -EINVAL, c->file, 0, 0,
                                               "missing required flag 'selected-config' when more than one "
                                               "config available: -c NAME, one of %s",
                                               names);
                if (c->n_configs == 1) {
                        *ret = &c->configs[0];
                        return 0;
                }
                name = "";
        }
        const char *cands[64];
        size_t n = 0;
        for (size_t i = 0; i < c->n_configs; i++) {
                if (streq(c->configs[i].name, name)) {
                        *ret = &c->configs[i];
                        return 0;
                }
                if (n < ELEMENTSOF(cands))
                        cands[n++] = c->configs[i].name;
        }
        const char *near = mk_closest_word(name, cands, n);
        if (near)
                return mk_error_set_at(e, -ENOENT, c->file, 0, 0,
                                       "selected mig-config not present: %s (did you mean '%s'? configs: %s)", name,
                                       near, names);
        return mk_error_set_at(e, -ENOENT, c->file, 0, 0, "selected mig-config not present: %s (configs: %s)", name,
                               c->n_configs ? names : "none");
}

/* ---- the walk ---- */

/* A JSON number wanted as a Go int: ints, and floats with an integral value
 * (sigs.k8s.io/yaml writes 1.0 as the JSON number 1). -ERANGE beyond int64. */
static int number_as_int(const struct mk_yaml_scalar *v, int64_t *ret) {
        if (v->type == MK_YAML_INT) {
                if (v->is_unsigned)
                        return -ERANGE;
                *ret = v->i;
                return 0;
        }
        if (v->type != MK_YAML_FLOAT || isnan(v->f) || isinf(v->f))
                return -EINVAL;
        /* Beyond 2^53 every double is integral; int64 ends near 9.22e18. */
        if (v->f < -9.2e18 || v->f > 9.2e18)
                return -ERANGE;
        int64_t i = (int64_t) v->f;
        if ((double) i != v->f)
                return -EINVAL;
        *ret = i;
        return 0;
}

static int parse_filters(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_config_entry *x) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;

        const struct mk_yaml_node *const *items;
        size_t n_items;
        if (v.type == MK_YAML_NULL || (v.type == MK_YAML_STR && n->len == 0))
                return 0; /* "" means no filter upstream */
        if (v.type == MK_YAML_STR) {
                items = (const struct mk_yaml_node *const *) &n;
                n_items = 1;
        } else if (v.type == MK_YAML_SEQ) {
                items = (const struct mk_yaml_node *const *) n->items;
                n_items = n->n_items;
        } else
                return mk_yaml_error(c, n,
                                     "(json: cannot unmarshal %s into Go value of type string, json: cannot "
                                     "unmarshal %s into Go value of type []string)%s",
                                     mk_yaml_type_json(v.type), mk_yaml_type_json(v.type),
                                     v.type == MK_YAML_INT ? " (quote the device-filter: \"0x20B010DE\")" : "");
        if (n_items > MK_MAX_DEVICE_FILTERS)
                return mk_yaml_error(c, n, "too many device filters (at most %d)", MK_MAX_DEVICE_FILTERS);
        if (n_items == 0)
                return 0;

        x->filters = calloc(n_items, sizeof(*x->filters));
        if (!x->filters)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < n_items; i++) {
                const struct mk_yaml_node *it = items[i];
                size_t old = v.type == MK_YAML_SEQ ? mk_yaml_path_push_index(c, i) : c->path_len;
                struct mk_yaml_scalar iv;
                r = mk_yaml_resolve(c, it, &iv);
                if (r < 0)
                        return r;
                if (iv.type != MK_YAML_STR && iv.type != MK_YAML_NULL)
                        return mk_yaml_error(c, it,
                                             "(json: cannot unmarshal array into Go value of type string, json: "
                                             "cannot unmarshal %s into Go value of type string)",
                                             mk_yaml_type_json(iv.type));
                const char *s = iv.type == MK_YAML_NULL ? "" : it->value;
                if (iv.type == MK_YAML_STR && strlen(s) != it->len)
                        return mk_yaml_error(c, it, "device-filter contains a NUL byte");
                struct mk_error fe = {0};
                r = mk_device_filter_parse(s, &x->filters[i], &fe);
                if (r < 0)
                        return mk_yaml_error(c, it, "%s", fe.msg);
                x->filters[i].pos = pos_of(it);
                x->n_filters++;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int parse_devices(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_config_entry *x) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;

        x->devices_pos = pos_of(n);
        if (v.type == MK_YAML_STR || v.type == MK_YAML_NULL) {
                const char *s = v.type == MK_YAML_NULL ? "" : n->value;
                if (v.type == MK_YAML_STR && strlen(s) == n->len && streq(s, "all")) {
                        x->all_devices = true;
                        return 0;
                }
                return mk_yaml_error(c, n, "invalid string input for 'devices': %s", s);
        }
        if (v.type != MK_YAML_SEQ)
                return mk_yaml_error(c, n,
                                     "(json: cannot unmarshal %s into Go value of type string, json: cannot "
                                     "unmarshal %s into Go value of type []int)",
                                     mk_yaml_type_json(v.type), mk_yaml_type_json(v.type));
        if (n->n_items > MK_MAX_DEVICES)
                return mk_yaml_error(c, n, "too many device indices (at most %d)", MK_MAX_DEVICES);
        if (n->n_items == 0)
                return 0; /* legal: matches nothing */

        x->devices = calloc(n->n_items, sizeof(*x->devices));
        x->device_pos = calloc(n->n_items, sizeof(*x->device_pos));
        if (!x->devices || !x->device_pos)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        uint64_t seen[(MK_MAX_DEVICE_INDEX + 64) / 64] = {0};
        for (size_t i = 0; i < n->n_items; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                struct mk_yaml_scalar iv;
                int64_t idx;
                r = mk_yaml_resolve(c, it, &iv);
                if (r < 0)
                        return r;
                if (iv.type == MK_YAML_NULL)
                        return mk_yaml_error(c, it, "invalid device index: null");
                r = number_as_int(&iv, &idx);
                if (r == -EINVAL && iv.type == MK_YAML_FLOAT)
                        return mk_yaml_error(c, it,
                                             "(json: cannot unmarshal array into Go value of type string, json: "
                                             "cannot unmarshal number %s into Go value of type int)",
                                             it->value);
                if (r == -EINVAL)
                        return mk_yaml_error(c, it,
                                             "(json: cannot unmarshal array into Go value of type string, json: "
                                             "cannot unmarshal %s into Go value of type int)",
                                             mk_yaml_type_json(iv.type));
                if (r < 0 || idx > (int64_t) MK_MAX_DEVICE_INDEX)
                        return mk_yaml_error(c, it, "invalid device index %s: at most %u", it->value,
                                             MK_MAX_DEVICE_INDEX);
                if (idx < 0)
                        return mk_yaml_error(c, it, "invalid device index %" PRId64 ": must not be negative", idx);
                x->devices[x->n_devices] = (unsigned) idx;
                x->device_pos[x->n_devices] = pos_of(it);
                if (seen[idx / 64] & (UINT64_C(1) << (idx % 64))) {
                        if (x->dup_device_pos.line == 0)
                                x->dup_device_pos = pos_of(it);
                } else
                        seen[idx / 64] |= UINT64_C(1) << (idx % 64);
                x->n_devices++;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

#define MIG_DEVICES_ERR "error validating values in 'mig-devices' field: "

/* The reason part of mk_profile_name_parse()'s message, without its
 * "invalid MIG profile '<name>': " prefix (upstream prints the name once). */
static const char *profile_why(const char *msg, const char *name) {
        static const char prefix[] = "invalid MIG profile '";
        size_t pl = sizeof(prefix) - 1, nl = strlen(name);
        if (strncmp(msg, prefix, pl) == 0 && strncmp(msg + pl, name, nl) == 0 && strncmp(msg + pl + nl, "': ", 3) == 0)
                return msg + pl + nl + 3;
        return msg;
}

static int parse_mig_devices(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_config_entry *x,
                             bool *ret_present) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_get_map(c, n, "types.MigConfig", &m);
        if (r < 0)
                return r;
        *ret_present = r > 0; /* null: a nil map upstream */
        if (r == 0)
                return 0;
        if (m.n > MK_MAX_MIG_DEVICES)
                return mk_yaml_error(c, n, "too many profiles in 'mig-devices' (at most %d)", MK_MAX_MIG_DEVICES);
        if (m.n == 0)
                return 0;
        x->mig_devices = calloc(m.n, sizeof(*x->mig_devices));
        if (!x->mig_devices)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");

        /* Upstream decodes the whole map (type errors), then validates names
         * and counts (AssertValid), then the all-zero rule; same order here. */
        int64_t counts[MK_MAX_MIG_DEVICES];
        for (size_t i = 0; i < m.n; i++) {
                const struct mk_yaml_node *val = m.pairs[i].value;
                size_t old = mk_yaml_path_push_key(c, m.pairs[i].name);
                struct mk_yaml_scalar cv;
                r = mk_yaml_resolve(c, val, &cv);
                if (r < 0)
                        return r;
                if (cv.type == MK_YAML_NULL)
                        counts[i] = 0;
                else {
                        r = number_as_int(&cv, &counts[i]);
                        if (r == -EINVAL && cv.type == MK_YAML_FLOAT)
                                return mk_yaml_error(c, val, "json: cannot unmarshal number %s into Go value of type int",
                                                     val->value);
                        if (r == -EINVAL)
                                return mk_yaml_error(c, val, "json: cannot unmarshal %s into Go value of type int",
                                                     mk_yaml_type_json(cv.type));
                        if (r < 0)
                                return mk_yaml_error(c, val,
                                                     "json: cannot unmarshal number %s into Go value of type int",
                                                     val->value);
                }
                mk_yaml_path_pop(c, old);
        }

        bool any = false;
        for (size_t i = 0; i < m.n; i++) {
                const char *name = m.pairs[i].name;
                struct mk_mig_device *d = &x->mig_devices[i];
                size_t old = mk_yaml_path_push_key(c, name);
                struct mk_error pe = {0};

                r = mk_profile_name_parse(name, &d->name, &pe);
                if (r < 0)
                        return mk_yaml_error(c, m.pairs[i].key, MIG_DEVICES_ERR "invalid format for '%s': %s", name,
                                             profile_why(pe.msg, name));
                if (counts[i] < 0)
                        return mk_yaml_error(c, m.pairs[i].value, MIG_DEVICES_ERR "invalid count for '%s': %" PRId64,
                                             name, counts[i]);
                if (counts[i] > (int64_t) MK_MAX_MIG_COUNT)
                        return mk_yaml_error(c, m.pairs[i].value,
                                             MIG_DEVICES_ERR "invalid count for '%s': %" PRId64 " (at most %u)", name,
                                             counts[i], MK_MAX_MIG_COUNT);
                /* A name that parsed is shorter than MK_PROFILE_NAME_MAX. */
                snprintf(d->raw, sizeof(d->raw), "%s", name);
                d->count = (unsigned) counts[i];
                d->pos = pos_of(m.pairs[i].key);
                any = any || d->count > 0;
                x->n_mig_devices++;
                mk_yaml_path_pop(c, old);
        }
        if (!any)
                return mk_yaml_error(c, n, MIG_DEVICES_ERR "all counts for all MigProfiles are 0");
        return 0;
}

static int parse_entry(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_config_entry *x) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};

        x->pos = pos_of(n);
        int r = mk_yaml_get_map(c, n, "map[string]json.RawMessage", &m); /* null: an empty map upstream */
        if (r < 0)
                return r;

        /* An unknown key first: `mig-enable:` is a typo of a field, not a missing one. */
        static const char *const fields[] = {"device-filter", "devices", "mig-enabled", "mig-devices"};
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                bool known = false;
                for (size_t j = 0; j < ELEMENTSOF(fields) && !known; j++)
                        known = streq(k, fields[j]);
                if (known)
                        continue;
                const char *near = mk_closest_word(k, fields, ELEMENTSOF(fields));
                size_t old = mk_yaml_path_push_key(c, k);
                if (near)
                        r = mk_yaml_error(c, m.pairs[i].key, "unexpected field: %s (did you mean '%s'?)", k, near);
                else
                        r = mk_yaml_error(c, m.pairs[i].key,
                                          "unexpected field: %s (known: device-filter, devices, mig-enabled, "
                                          "mig-devices)",
                                          k);
                mk_yaml_path_pop(c, old);
                return r;
        }
        static const char *const required[] = {"devices", "mig-enabled"};
        for (size_t i = 0; i < ELEMENTSOF(required); i++)
                if (!mk_yaml_map_find(&m, required[i])) {
                        size_t old = mk_yaml_path_push_key(c, required[i]);
                        r = mk_yaml_error(c, n, "missing required field: %s", required[i]);
                        mk_yaml_path_pop(c, old);
                        return r;
                }

        bool has_mig_devices = false;
        const struct mk_yaml_node *mig_devices_node = NULL;
        for (size_t i = 0; i < m.n; i++) {
                const char *k = m.pairs[i].name;
                const struct mk_yaml_node *val = m.pairs[i].value;
                size_t old = mk_yaml_path_push_key(c, k);

                if (streq(k, "device-filter"))
                        r = parse_filters(c, val, x);
                else if (streq(k, "devices"))
                        r = parse_devices(c, val, x);
                else if (streq(k, "mig-enabled")) {
                        struct mk_yaml_scalar bv;
                        r = mk_yaml_resolve(c, val, &bv);
                        if (r >= 0 && bv.type != MK_YAML_BOOL && bv.type != MK_YAML_NULL)
                                r = mk_yaml_error(c, val, "json: cannot unmarshal %s into Go value of type bool",
                                                  mk_yaml_type_json(bv.type));
                        if (r >= 0)
                                x->mig_enabled = bv.type == MK_YAML_BOOL && bv.b;
                } else if (streq(k, "mig-devices")) {
                        r = parse_mig_devices(c, val, x, &has_mig_devices);
                        mig_devices_node = val;
                } else
                        r = mk_yaml_error(c, m.pairs[i].key, "unexpected field: %s", k);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }

        if (x->mig_enabled && !has_mig_devices) {
                size_t old = mk_yaml_path_push_key(c, "mig-devices");
                r = mk_yaml_error(c, mig_devices_node ? mig_devices_node : n,
                                  "missing required field 'mig-devices' when 'mig-enabled' is true");
                mk_yaml_path_pop(c, old);
                return r;
        }
        if (!x->mig_enabled && x->n_mig_devices > 0) {
                size_t old = mk_yaml_path_push_key(c, "mig-devices");
                r = mk_yaml_error(c, mig_devices_node, "MIG devices included when 'mig-enabled' is false");
                mk_yaml_path_pop(c, old);
                return r;
        }
        return 0;
}

static int parse_named_config(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, struct mk_named_config *nc) {
        const struct mk_yaml_node *n = p->value;
        int r;

        if (strlen(p->name) > MK_MAX_CONFIG_NAME)
                return mk_yaml_error(c, p->key, "config name too long (at most %d bytes)", MK_MAX_CONFIG_NAME);
        nc->name = strdup(p->name);
        if (!nc->name)
                return mk_yaml_error_code(c, -ENOMEM, p->key, "out of memory");
        nc->pos = pos_of(p->key);

        size_t count;
        r = mk_yaml_get_list(c, n, "v1.MigConfigSpecSlice", &count);
        if (r < 0)
                return r;
        if (count == 0)
                return mk_yaml_error(c, n, "at least one entry in '%s' is required", p->name);
        if (count > MK_MAX_ENTRIES)
                return mk_yaml_error(c, n, "too many entries in '%s' (at most %d)", p->name, MK_MAX_ENTRIES);

        nc->entries = calloc(count, sizeof(*nc->entries));
        if (!nc->entries)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < count; i++) {
                size_t old = mk_yaml_path_push_index(c, i);
                /* Counted first, so that mk_config_free() frees a half-parsed entry. */
                nc->n_entries++;
                r = parse_entry(c, n->items[i], &nc->entries[i]);
                if (r < 0)
                        return r;
                mk_yaml_path_pop(c, old);
        }
        return 0;
}

static int config_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        struct mk_config *cfg = userdata;
        /* Counted first, so that mk_config_free() frees a half-parsed config. */
        return parse_named_config(c, p, &cfg->configs[cfg->n_configs++]);
}

static int parse_configs(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_config *cfg) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_get_map(c, n, "map[string]v1.MigConfigSpecSlice", &m);
        if (r < 0)
                return r;
        if (m.n == 0)
                return mk_yaml_error(c, n, "at least one entry in 'mig-configs' is required");
        if (m.n > MK_MAX_CONFIGS)
                return mk_yaml_error(c, n, "too many configs in 'mig-configs' (at most %d)", MK_MAX_CONFIGS);

        cfg->configs = calloc(m.n, sizeof(*cfg->configs));
        if (!cfg->configs)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        return mk_yaml_map_each(c, &m, config_field, cfg);
}

static int top_field(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata) {
        if (streq(p->name, "version"))
                return 0; /* read first, by parse_top() */
        if (streq(p->name, "mig-configs"))
                return parse_configs(c, p->value, userdata);
        return mk_yaml_error(c, p->key, "unexpected field: %s", p->name);
}

static int parse_top(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, struct mk_config *cfg) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        struct mk_yaml_scalar v;
        int r;

        if (!root)
                return 0; /* no document: no configs */
        r = mk_yaml_get_map(c, root, "map[string]json.RawMessage", &m);
        if (r <= 0)
                return r; /* 0: an empty document, JSON null, which upstream leaves as an empty spec */

        const struct mk_yaml_pair *ver = mk_yaml_map_find(&m, "version");
        if (!ver && m.n > 0) {
                size_t old = mk_yaml_path_push_key(c, "version");
                r = mk_yaml_error(c, root, "unable to parse with missing 'version' field");
                mk_yaml_path_pop(c, old);
                return r;
        }
        const char *version = "";
        if (ver) {
                size_t old = mk_yaml_path_push_key(c, "version");
                r = mk_yaml_resolve(c, ver->value, &v);
                if (r < 0)
                        return r;
                if (v.type != MK_YAML_STR && v.type != MK_YAML_NULL)
                        return mk_yaml_error(c, ver->value, "json: cannot unmarshal %s into Go value of type string",
                                             mk_yaml_type_json(v.type));
                if (v.type == MK_YAML_STR)
                        version = ver->value->value;
                if (!streq(version, "v1") || ver->value->len != 2)
                        return mk_yaml_error(c, ver->value, "unknown version: %s", version);
                mk_yaml_path_pop(c, old);
        } else
                /* `{}`: upstream finds no version and wants "v1". */
                return mk_yaml_error(c, root, "unknown version: ");

        cfg->version = strdup(version);
        if (!cfg->version)
                return mk_yaml_error_code(c, -ENOMEM, root, "out of memory");
        return mk_yaml_map_each(c, &m, top_field, cfg);
}

/* The document into a new mk_config (mk_yaml_parse_walk's walk). */
MK_YAML_DEFINE_WALK(walk, struct mk_config, mk_config_freep, parse_top)

int mk_config_parse(const char *data, size_t len, const char *file, struct mk_config **ret, struct mk_error *e) {
        return mk_yaml_parse_walk(data, len, file, MK_MAX_YAML_BYTES, walk, ret, e);
}

int mk_config_load(const char *path, struct mk_config **ret, struct mk_error *e) {
        return mk_yaml_load_walk(path, MK_MAX_YAML_BYTES, walk, ret, e);
}
