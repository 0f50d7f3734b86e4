/* Reservations on pods and Allocate matching (claim.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "claim/claim.h"
#include "kube/json.h"
#include "kube/object.h"

static const char *const mode_table[_MK_CLAIM_MODE_MAX] = {
        [MK_CLAIM_MIG] = "mig",
        [MK_CLAIM_SOFT] = "hami-core",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_claim_mode, enum mk_claim_mode, mode_table, _MK_CLAIM_MODE_MAX,
                              _MK_CLAIM_MODE_INVALID);

/* One device entry: a MIG device keeps the version-1 form without "mode". */
static json_t *device_json(const struct mk_claim_device *d) {
        if (d->mode == MK_CLAIM_SOFT)
                return json_pack("{s:I, s:s, s:s, s:I, s:I}", "container", (json_int_t) d->container, "mode",
                                 mk_claim_mode_to_string(d->mode), "gpu", d->gpu, "memoryMiB",
                                 (json_int_t) d->memory_mib, "cores", (json_int_t) d->cores);
        return json_pack("{s:I, s:s, s:s, s:I, s:I, s:{s:I, s:I}}", "container", (json_int_t) d->container, "gpu",
                         d->gpu, "profile", d->profile, "profileID", (json_int_t) d->profile_id, "slices",
                         (json_int_t) d->slices, "placement", "start", (json_int_t) d->placement.start, "size",
                         (json_int_t) d->placement.size);
}

int mk_claim_reservation_format(const struct mk_claim *c, char **ret) {
        json_t *devs = json_array();
        json_t *root = json_pack("{s:i, s:s, s:I, s:o}", "version", MK_RESERVATION_VERSION, "node", c->node, "time",
                                 (json_int_t) c->time, "devices", devs);
        if (!root)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_devices; i++) {
                json_t *o = device_json(&c->devices[i]);
                if (!o || json_array_append_new(devs, o) < 0) {
                        json_decref(root);
                        return -ENOMEM;
                }
        }
        char *s = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* o[key] as {"start": n, "size": n} with size >= 1 and start + size <= 32. */
static int get_placement(const json_t *o, const char *key, const char *field, struct mk_placement *ret,
                         struct mk_error *e) {
        static const char *const known[] = {"start", "size", NULL};
        const json_t *p = json_object_get(o, key);
        char f[128];
        snprintf(f, sizeof(f), "%s.%s", field, key);
        int r = mk_json_check_keys(p, f, known, e);
        if (r < 0)
                return r;
        uint64_t start, size;
        if ((r = mk_json_get_u64(p, "start", f, 31, true, &start, e)) < 0 ||
            (r = mk_json_get_u64(p, "size", f, 32, true, &size, e)) < 0)
                return r;
        if (size == 0 || start + size > 32)
                return mk_error_set_field(e, -EINVAL, f, "placement %" PRIu64 "+%" PRIu64 " is out of range", start,
                                          size);
        *ret = (struct mk_placement) {.start = (unsigned) start, .size = (unsigned) size};
        return 0;
}

/* A soft slice's fields: memoryMiB (required, >= 1) and cores (0..100,
 * absent = 0). */
static int parse_soft(const json_t *o, const char *f, struct mk_claim_device *d, struct mk_error *e) {
        static const char *const known[] = {"container", "mode", "gpu", "memoryMiB", "cores", NULL};
        uint64_t v;
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0 || (r = mk_json_get_u64(o, "memoryMiB", f, MK_CLAIM_MAX_MEMORY_MIB, true, &v, e)) < 0)
                return r;
        if (v == 0)
                return mk_error_set_field(e, -EINVAL, f, "memoryMiB: must be at least 1");
        d->memory_mib = v;
        if ((r = mk_json_get_u64(o, "cores", f, 100, false, &v, e)) < 0)
                return r;
        d->cores = r > 0 ? (unsigned) v : 0;
        return 0;
}

static int parse_device(const json_t *o, size_t i, struct mk_claim_device *d, struct mk_error *e) {
        static const char *const known[] = {"container", "mode",      "gpu", "profile", "profileID",
                                            "slices",    "placement", NULL};
        char f[64];
        snprintf(f, sizeof(f), "devices[%zu]", i);
        char mode[16] = "";
        if (!json_is_object(o))
                return mk_error_set_field(e, -EINVAL, f, "must be an object");
        int r = mk_json_get_str(o, "mode", f, mode, sizeof(mode), false, e);
        if (r < 0)
                return r;
        *d = (struct mk_claim_device) {0};
        if (mode[0] && (int) (d->mode = mk_claim_mode_from_string(mode)) < 0)
                return mk_error_set_field(e, -EINVAL, f, "mode: unknown '%s' (want mig or hami-core)", mode);
        uint64_t v;
        if ((r = mk_json_get_u64(o, "container", f, MK_MAX_POD_CONTAINERS - 1, true, &v, e)) < 0)
                return r;
        d->container = (unsigned) v;
        if ((r = mk_json_get_str(o, "gpu", f, d->gpu, sizeof(d->gpu), true, e)) < 0)
                return r;
        if (d->mode == MK_CLAIM_SOFT)
                return parse_soft(o, f, d, e);
        if ((r = mk_json_check_keys(o, f, known, e)) < 0 ||
            (r = mk_json_get_str(o, "profile", f, d->profile, sizeof(d->profile), true, e)) < 0)
                return r;
        if ((r = mk_json_get_u64(o, "profileID", f, UINT32_MAX - 1, true, &v, e)) < 0)
                return r;
        d->profile_id = (unsigned) v;
        if ((r = mk_json_get_u64(o, "slices", f, 32, true, &v, e)) < 0)
                return r;
        d->slices = (unsigned) v;
        return get_placement(o, "placement", f, &d->placement, e);
}

int mk_claim_reservation_parse(const char *s, struct mk_claim *c, struct mk_error *e) {
        static const char *const known[] = {"version", "node", "time", "devices", NULL};
        const char *f = MK_ANN_RESERVATION;
        json_t *root = NULL;
        int r = mk_json_load(s, strlen(s), MK_MAX_RESERVATION_BYTES, f, &root, e);
        if (r < 0)
                return r;
        struct mk_claim tmp = *c;
        uint64_t v;
        const json_t *devs;
        if ((r = mk_json_check_keys(root, f, known, e)) < 0 ||
            (r = mk_json_get_u64(root, "version", f, UINT32_MAX, true, &v, e)) < 0)
                goto out;
        if (v != MK_RESERVATION_VERSION) {
                r = mk_error_set_field(e, -EINVAL, f, "unsupported version %" PRIu64 " (want %d)", v,
                                       MK_RESERVATION_VERSION);
                goto out;
        }
        if ((r = mk_json_get_str(root, "node", f, tmp.node, sizeof(tmp.node), true, e)) < 0 ||
            (r = mk_json_get_u64(root, "time", f, INT64_MAX, false, &v, e)) < 0)
                goto out;
        tmp.time = r > 0 ? (int64_t) v : 0;
        devs = json_object_get(root, "devices");
        if (!json_is_array(devs) || json_array_size(devs) == 0) {
                r = mk_error_set_field(e, -EINVAL, f, "devices: must be a non-empty array");
                goto out;
        }
        if (json_array_size(devs) > MK_MAX_CLAIM_DEVICES) {
                r = mk_error_set_field(e, -E2BIG, f, "devices: more than %u", MK_MAX_CLAIM_DEVICES);
                goto out;
        }
        tmp.n_devices = json_array_size(devs);
        for (size_t i = 0; i < tmp.n_devices; i++)
                if ((r = parse_device(json_array_get(devs, i), i, &tmp.devices[i], e)) < 0)
                        goto out;
        *c = tmp;
        r = 0;
out:
        json_decref(root);
        return r;
}

int mk_claim_uuids_parse(const char *s, const char *field, char (*ret)[MK_UUID_MAX], size_t *ret_n,
                         struct mk_error *e) {
        json_t *root = NULL;
        int r = mk_json_load(s, strlen(s), MK_MAX_RESERVATION_BYTES, field, &root, e);
        if (r < 0)
                return r;
        size_t n = json_is_array(root) ? json_array_size(root) : 0;
        if (!json_is_array(root) || n > MK_MAX_CLAIM_DEVICES) {
                r = mk_error_set_field(e, -EINVAL, field, "must be an array of at most %u device UUIDs",
                                       MK_MAX_CLAIM_DEVICES);
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                const char *u = json_string_value(json_array_get(root, i));
                if (!u || !*u || strlen(u) >= MK_UUID_MAX || !mk_json_token_ok(u)) {
                        r = mk_error_set_field(e, -EINVAL, field, "[%zu]: not a device UUID", i);
                        goto out;
                }
        }
        for (size_t i = 0; i < n; i++)
                snprintf(ret[i], MK_UUID_MAX, "%s", json_string_value(json_array_get(root, i)));
        *ret_n = n;
        r = 0;
out:
        json_decref(root);
        return r;
}

int mk_claim_devices_parse(const char *s, struct mk_claim *c, struct mk_error *e) {
        char uuids[MK_MAX_CLAIM_DEVICES][MK_UUID_MAX];
        size_t n = 0;
        int r = mk_claim_uuids_parse(s, MK_ANN_DEVICES, uuids, &n, e);
        if (r < 0)
                return r;
        if (n != c->n_devices)
                return mk_error_set_field(e, -EINVAL, MK_ANN_DEVICES, "must be an array of %zu MIG device UUIDs",
                                          c->n_devices);
        for (size_t i = 0; i < n; i++)
                memcpy(c->devices[i].mig_uuid, uuids[i], MK_UUID_MAX);
        return 0;
}

bool mk_claim_handed_names(const char *handed, const char *uuid) {
        char uuids[MK_MAX_CLAIM_DEVICES][MK_UUID_MAX];
        size_t n = 0;
        if (!handed || !uuid || !*uuid || mk_claim_uuids_parse(handed, MK_ANN_HANDED, uuids, &n, NULL) < 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (streq(uuids[i], uuid))
                        return true;
        return false;
}

int mk_claim_from_pod(const json_t *pod, struct mk_claim *ret, struct mk_error *e) {
        const json_t *md = json_object_get(pod, "metadata");
        const char *ns = mk_kube_meta(pod, "namespace");
        const char *name = mk_kube_meta(pod, "name");
        const char *uid = mk_kube_meta(pod, "uid");
        if (!ns || !name || !uid || strlen(ns) >= MK_K8S_NAME_MAX || strlen(name) >= MK_K8S_NAME_MAX ||
            strlen(uid) >= MK_K8S_UID_MAX)
                return mk_error_set_field(e, -EINVAL, "metadata", "pod without a valid namespace, name or uid");
        struct mk_claim *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        snprintf(c->namespace, sizeof(c->namespace), "%s", ns);
        snprintf(c->name, sizeof(c->name), "%s", name);
        snprintf(c->uid, sizeof(c->uid), "%s", uid);
        const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        c->active = !json_object_get(md, "deletionTimestamp") &&
                    !(phase && (streq(phase, "Succeeded") || streq(phase, "Failed")));
        c->allocated = mk_kube_annotation(pod, MK_ANN_ALLOCATED) != NULL;
        const char *res = mk_kube_annotation(pod, MK_ANN_RESERVATION);
        int r = 0;
        if (res) {
                r = mk_claim_reservation_parse(res, c, e);
                const char *devs = mk_kube_annotation(pod, MK_ANN_DEVICES);
                if (r >= 0 && devs)
                        r = mk_claim_devices_parse(devs, c, e);
                if (r >= 0)
                        r = 1;
        }
        if (r >= 0)
                *ret = *c;
        free(c);
        return r;
}

static bool claim_fits_counts(const struct mk_claim *c, const unsigned *counts, size_t n_counts) {
        /* The claim's containers in order, with their device counts. */
        size_t k = 0, i = 0;
        while (i < c->n_devices) {
                unsigned ctr = c->devices[i].container, cnt = 0;
                while (i < c->n_devices && c->devices[i].container == ctr)
                        i++, cnt++;
                if (k >= n_counts || counts[k] != cnt)
                        return false;
                k++;
        }
        return k == n_counts;
}

bool mk_claim_ready(const struct mk_claim *c) {
        for (size_t d = 0; d < c->n_devices; d++)
                if (c->devices[d].mode == MK_CLAIM_MIG && !c->devices[d].mig_uuid[0])
                        return false;
        return true;
}

int mk_claim_match_allocate(const struct mk_claim *claims, size_t n, const char *node, const unsigned *counts,
                            size_t n_counts) {
        int best = -ENOENT;
        for (size_t i = 0; i < n; i++) {
                const struct mk_claim *c = &claims[i];
                if (!c->active || c->allocated || !streq(c->node, node) || c->n_devices == 0)
                        continue;
                if (!mk_claim_ready(c) || !claim_fits_counts(c, counts, n_counts))
                        continue;
                if (best >= 0) {
                        const struct mk_claim *b = &claims[best];
                        int cmp = c->time < b->time ? -1 : c->time > b->time ? 1 : strcmp(c->namespace, b->namespace);
                        if (cmp == 0)
                                cmp = strcmp(c->name, b->name);
                        if (cmp >= 0)
                                continue;
                }
                best = (int) i;
        }
        return best;
}
