#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "engine/generate.h"

/* mig-parted pkg/mig/discovery: NVML reports wrong instance counts on the A30,
 * so upstream lists its GI profiles by hand (mig-parted v0.15.0 generate-config). */
#define A30_DEVICE_ID 0x20B710DEu
static const struct {
        const char *name;
        unsigned max_count;
} a30_profiles[] = {
        {"1g.6gb", 4}, {"1g.6gb+me", 1}, {"2g.12gb", 2}, {"2g.12gb+me", 1}, {"4g.24gb", 1},
};

struct gen_profile {
        char name[MK_PROFILE_NAME_MAX];
        struct mk_profile_name pname;
        unsigned max_count;
};

/* One MIG-capable model on the node: its PCI device id and the GI profiles
 * the first of its GPUs that reports any lists. */
struct gen_type {
        uint32_t id;
        struct gen_profile *profiles;
        size_t n_profiles;
};

static void types_free(struct gen_type *t, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(t[i].profiles);
        free(t);
}

static int type_add_profile(struct gen_type *t, const char *name, const struct mk_profile_name *pname,
                            unsigned max_count) {
        for (size_t i = 0; i < t->n_profiles; i++)
                if (streq(t->profiles[i].name, name))
                        return 0; /* same name from two enums: the first one counts */
        struct gen_profile *np = realloc(t->profiles, (t->n_profiles + 1) * sizeof(*np));
        if (!np)
                return -ENOMEM;
        t->profiles = np;
        struct gen_profile *p = &np[t->n_profiles++];
        *p = (struct gen_profile){.pname = *pname, .max_count = max_count};
        snprintf(p->name, sizeof(p->name), "%s", name);
        return 0;
}

static int type_fill_a30(struct gen_type *t) {
        for (size_t i = 0; i < ELEMENTSOF(a30_profiles); i++) {
                struct mk_profile_name pn;
                int r = mk_profile_name_parse(a30_profiles[i].name, &pn, NULL);
                if (r < 0)
                        return r;
                r = type_add_profile(t, a30_profiles[i].name, &pn, a30_profiles[i].max_count);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Full GI profiles only (C == G), named ones only; a profile the driver
 * allows no instance of cannot be part of any config. */
static int type_fill_gpu(struct gen_type *t, const struct mk_gpu *g) {
        for (size_t i = 0; i < g->n_profiles; i++) {
                const struct mk_gi_profile *p = &g->profiles[i];
                if (!p->named || p->pname.c != p->pname.g || p->max_count == 0) {
                        log_debug("GPU %u: profile '%s' (enum %u) is not usable for generated configs, ignoring",
                                  g->index, p->name, p->nvml_enum);
                        continue;
                }
                int r = type_add_profile(t, p->name, &p->pname, p->max_count);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int cmp_type(const void *a, const void *b) {
        uint32_t x = ((const struct gen_type *) a)->id, y = ((const struct gen_type *) b)->id;
        return x < y ? -1 : x > y;
}

static int discover(const struct mk_snapshot *s, struct gen_type **ret, size_t *ret_n, struct mk_error *e) {
        struct gen_type *t = NULL;
        size_t n = 0;
        int r;

        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                if (!g->mig_capable)
                        continue;
                size_t k = 0;
                while (k < n && t[k].id != g->pci_device_id)
                        k++;
                if (k == n) {
                        struct gen_type *nt = realloc(t, (n + 1) * sizeof(*nt));
                        if (!nt) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        t = nt;
                        t[n++] = (struct gen_type){.id = g->pci_device_id};
                        if (g->pci_device_id == A30_DEVICE_ID) {
                                r = type_fill_a30(&t[k]);
                                if (r < 0)
                                        goto fail;
                        }
                }
                /* GPUs of one model report the same profiles; take the first
                 * that reports any (an old driver lists none with MIG off). */
                if (t[k].n_profiles == 0) {
                        r = type_fill_gpu(&t[k], g);
                        if (r < 0)
                                goto fail;
                }
        }
        if (n == 0)
                return mk_error_set(e, -ENODATA, "No MIG-capable GPU found");
        size_t with_profiles = 0;
        for (size_t k = 0; k < n; k++)
                with_profiles += t[k].n_profiles > 0;
        if (with_profiles == 0) {
                types_free(t, n);
                return mk_error_set(e, -ENODATA, "No MIG profiles discovered on the MIG-capable GPUs");
        }
        qsort(t, n, sizeof(*t), cmp_type);
        *ret = t;
        *ret_n = n;
        return 0;
fail:
        types_free(t, n);
        return mk_error_set(e, r, "Out of memory");
}

static int set_new(json_t *o, const char *key, json_t *v) {
        /* json_object_set_new() steals v even on failure; NULL v fails. */
        return json_object_set_new(o, key, v) < 0 ? -ENOMEM : 0;
}

static int append_new(json_t *a, json_t *v) {
        return json_array_append_new(a, v) < 0 ? -ENOMEM : 0;
}

static int append_id(json_t *filter, uint32_t id) {
        char s[16];
        snprintf(s, sizeof(s), "0x%08" PRIX32, id);
        return append_new(filter, json_string(s));
}

/* {device-filter: [id] (mixed nodes only), devices: all, mig-enabled: true,
 * mig-devices: <devices, stolen>}, appended to the config's list. */
static int add_entry(json_t *list, bool mixed, uint32_t id, json_t *devices) {
        json_t *o = json_object();
        if (!o) {
                json_decref(devices);
                return -ENOMEM;
        }
        int r = json_array_append_new(list, o) < 0 ? -ENOMEM : 0;
        if (r < 0) {
                json_decref(devices);
                return r;
        }
        if (mixed) {
                json_t *f = json_array();
                r = set_new(o, "device-filter", f);
                if (r < 0) {
                        json_decref(devices);
                        return r;
                }
                r = append_id(f, id);
                if (r < 0) {
                        json_decref(devices);
                        return r;
                }
        }
        r = set_new(o, "devices", json_string("all"));
        if (r >= 0)
                r = set_new(o, "mig-enabled", json_true());
        if (r < 0) {
                json_decref(devices);
                return r;
        }
        return set_new(o, "mig-devices", devices);
}

/* Adds type t's use of `devices` to the config `name`: types with equal
 * mig-devices share one entry (their ids in its filter), as upstream does
 * for profiles with the same name and MaxCount. Steals `devices`. */
static int add_to_config(json_t *configs, const char *name, bool mixed, uint32_t id, json_t *devices) {
        if (!devices)
                return -ENOMEM;
        json_t *list = json_object_get(configs, name);
        if (!list) {
                list = json_array();
                int r = set_new(configs, name, list);
                if (r < 0) {
                        json_decref(devices);
                        return r;
                }
        }
        size_t i;
        json_t *x;
        json_array_foreach(list, i, x) {
                json_t *f = json_object_get(x, "device-filter");
                if (f && json_equal(json_object_get(x, "mig-devices"), devices)) {
                        json_decref(devices);
                        return append_id(f, id);
                }
        }
        return add_entry(list, mixed, id, devices);
}

/* upstream balanced.go: slots = the largest G among base profiles; 7 slots
 * give 2 x 1g + 1 x 2g + 1 x 3g, 4 slots give 2 x 1g + 1 x 2g. Per G, the base
 * profile with the highest MaxCount (the smallest memory); ties keep the
 * first seen. NULL when the rules give nothing for this type. */
static json_t *balanced_devices(const struct gen_type *t, bool *ret_none) {
        const struct gen_profile *best[4] = {0};
        unsigned slots = 0;
        *ret_none = true;
        for (size_t i = 0; i < t->n_profiles; i++) {
                const struct gen_profile *p = &t->profiles[i];
                if (p->pname.n_attrs > 0 || p->pname.c != p->pname.g)
                        continue;
                slots = MAX(slots, p->pname.g);
                if (p->pname.g < ELEMENTSOF(best) &&
                    (!best[p->pname.g] || p->max_count > best[p->pname.g]->max_count))
                        best[p->pname.g] = p;
        }
        static const unsigned want7[4] = {0, 2, 1, 1}, want4[4] = {0, 2, 1, 0};
        const unsigned *want = slots == 7 ? want7 : slots == 4 ? want4 : NULL;
        if (!want) {
                log_debug("Device 0x%08" PRIX32 ": %u slots, no balanced layout for it, ignoring", t->id, slots);
                return NULL;
        }
        for (unsigned g = 1; g < ELEMENTSOF(best); g++)
                if (want[g] > 0 && !best[g]) {
                        log_debug("Device 0x%08" PRIX32 ": no base %ug profile, no balanced layout for it, ignoring",
                                  t->id, g);
                        return NULL;
                }
        *ret_none = false;
        json_t *m = json_object();
        for (unsigned g = 1; m && g < ELEMENTSOF(best); g++)
                if (want[g] > 0 && json_object_set_new(m, best[g]->name, json_integer(want[g])) < 0) {
                        json_decref(m);
                        m = NULL;
                }
        return m;
}

static int build_configs(const struct gen_type *t, size_t n, json_t *configs) {
        bool mixed = n > 1;
        int r;

        json_t *disabled = json_pack("[{s:s,s:b}]", "devices", "all", "mig-enabled", 0);
        r = set_new(configs, "all-disabled", disabled);
        if (r < 0)
                return r;
        json_t *enabled = json_pack("[{s:s,s:b,s:{}}]", "devices", "all", "mig-enabled", 1, "mig-devices");
        r = set_new(configs, "all-enabled", enabled);
        if (r < 0)
                return r;

        for (size_t k = 0; k < n; k++) {
                for (size_t i = 0; i < t[k].n_profiles; i++) {
                        const struct gen_profile *p = &t[k].profiles[i];
                        char name[4 + MK_PROFILE_NAME_MAX];
                        snprintf(name, sizeof(name), "all-%s", p->name);
                        for (char *c = name; *c; c++)
                                if (*c == '+')
                                        *c = '.';
                        json_t *m = json_object();
                        if (m && json_object_set_new(m, p->name, json_integer(p->max_count)) < 0)
                                m = (json_decref(m), NULL);
                        r = add_to_config(configs, name, mixed, t[k].id, m);
                        if (r < 0)
                                return r;
                }
                bool none;
                json_t *m = balanced_devices(&t[k], &none);
                if (none)
                        continue;
                r = add_to_config(configs, "all-balanced", mixed, t[k].id, m);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* The same object with keys inserted in sorted order (for JSON output, which
 * keeps insertion order). */
static json_t *sorted_copy(json_t *o) {
        size_t n = json_object_size(o);
        _cleanup_free_ const char **keys = calloc(n ? n : 1, sizeof(*keys));
        json_t *s = json_object();
        if (!keys || !s) {
                json_decref(s);
                return NULL;
        }
        size_t k = 0;
        const char *key;
        json_t *v;
        json_object_foreach(o, key, v) keys[k++] = key;
        qsort(keys, n, sizeof(*keys), cmp_str);
        for (size_t i = 0; i < n; i++)
                if (json_object_set(s, keys[i], json_object_get(o, keys[i])) < 0) {
                        json_decref(s);
                        return NULL;
                }
        return s;
}

int mk_generate_config(const struct mk_snapshot *s, json_t **ret, struct mk_error *e) {
        struct gen_type *t = NULL;
        size_t n = 0;
        int r = discover(s, &t, &n, e);
        if (r < 0)
                return r;

        json_t *configs = json_object();
        r = configs ? build_configs(t, n, configs) : -ENOMEM;
        types_free(t, n);
        json_t *sorted = r >= 0 ? sorted_copy(configs) : NULL;
        json_decref(configs);
        if (!sorted)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        json_t *root = json_object();
        if (!root || set_new(root, "version", json_string("v1")) < 0) {
                json_decref(sorted);
                json_decref(root);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        if (set_new(root, "mig-configs", sorted) < 0) {
                json_decref(root);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        *ret = root;
        return 0;
}
