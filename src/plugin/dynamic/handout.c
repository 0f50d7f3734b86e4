/* What the dynamic MIG device plugin handed out (handout.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/json.h"
#include "kube/object.h"
#include "plugin/dynamic/handout.h"

static void handout_done(struct mk_dp_handout *o) {
        for (size_t i = 0; i < o->n_keys; i++)
                free(o->keys[i]);
        free(o->keys);
        free(o->slot);
        free(o->displaced);
        free(o->holder);
        *o = (struct mk_dp_handout) {0};
}

void mk_dp_handouts_done(struct mk_dp_handouts *h) {
        for (size_t i = 0; i < h->n; i++)
                handout_done(&h->v[i]);
        free(h->v);
        *h = (struct mk_dp_handouts) {0};
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

int mk_dp_handout_key(const char *const *ids, size_t n, char **ret) {
        if (n == 0 || n > MK_MAX_CLAIM_DEVICES)
                return -EINVAL;
        const char *sorted[MK_MAX_CLAIM_DEVICES];
        size_t len = 0;
        for (size_t i = 0; i < n; i++) {
                size_t l = ids[i] ? strlen(ids[i]) : 0;
                if (l == 0 || l > MK_DP_HANDOUT_MAX_ID || strchr(ids[i], ','))
                        return -EINVAL;
                sorted[i] = ids[i];
                len += l + 1;
        }
        qsort(sorted, n, sizeof(*sorted), cmp_str);
        char *k = malloc(len);
        if (!k)
                return -ENOMEM;
        char *p = k;
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(sorted[i]);
                memcpy(p, sorted[i], l);
                p += l;
                *p++ = i + 1 < n ? ',' : '\0';
        }
        *ret = k;
        return 0;
}

/* Appends o (taken over) after dropping the oldest beyond the cap. */
static int push(struct mk_dp_handouts *h, struct mk_dp_handout *o) {
        if (h->n >= MK_DP_HANDOUT_MAX) {
                handout_done(&h->v[0]);
                memmove(&h->v[0], &h->v[1], (h->n - 1) * sizeof(*h->v));
                h->n--;
        }
        struct mk_dp_handout *v = realloc(h->v, (h->n + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        h->v = v;
        h->v[h->n++] = *o;
        *o = (struct mk_dp_handout) {0};
        return 0;
}

int mk_dp_handouts_add(struct mk_dp_handouts *h, const char *const *const *ids, const size_t *n_ids,
                       size_t n_containers, const struct mk_claim *assumed, int64_t now, struct mk_error *e) {
        if (n_containers == 0 || n_containers > MK_MAX_POD_CONTAINERS)
                return mk_error_set(e, -EINVAL, "%zu container requests, 1 to %u", n_containers,
                                    MK_MAX_POD_CONTAINERS);
        _cleanup_(handout_done) struct mk_dp_handout o = {.seq = h->next_seq + 1, .time = now};
        o.keys = calloc(n_containers, sizeof(*o.keys));
        o.slot = malloc(sizeof(*o.slot));
        if (!o.keys || !o.slot)
                return mk_error_set(e, -ENOMEM, "out of memory");
        *o.slot = *assumed;
        for (size_t i = 0; i < n_containers; i++, o.n_keys++) {
                int r = mk_dp_handout_key(ids[i], n_ids[i], &o.keys[i]);
                if (r < 0)
                        return mk_error_set(e, r, "container request %zu: %zu device ids, or one empty, too long "
                                                  "or with a ','", i, n_ids[i]);
        }
        int r = push(h, &o);
        if (r < 0)
                return mk_error_set(e, r, "out of memory");
        h->next_seq++;
        return 0;
}

static bool has_key(const char *const *keys, size_t n, const char *k) {
        for (size_t i = 0; i < n; i++)
                if (keys[i] && streq(keys[i], k))
                        return true;
        return false;
}

struct mk_dp_handout *mk_dp_handouts_find(const struct mk_dp_handouts *h, const char *const *keys, size_t n) {
        for (size_t i = h->n; i-- > 0;) {
                struct mk_dp_handout *o = &h->v[i];
                bool all = o->n_keys > 0;
                for (size_t k = 0; all && k < o->n_keys; k++)
                        all = has_key(keys, n, o->keys[k]);
                if (all)
                        return o;
        }
        return NULL;
}

/* Same devices, field by field (the structs have padding). */
static bool same_devices(const struct mk_claim *a, const struct mk_claim *b) {
        if (a->n_devices != b->n_devices)
                return false;
        for (size_t i = 0; i < a->n_devices; i++) {
                const struct mk_claim_device *x = &a->devices[i], *y = &b->devices[i];
                if (x->container != y->container || x->mode != y->mode || !streq(x->gpu, y->gpu) ||
                    !streq(x->profile, y->profile) || x->profile_id != y->profile_id || x->slices != y->slices ||
                    x->placement.start != y->placement.start || x->placement.size != y->placement.size ||
                    x->memory_mib != y->memory_mib || x->cores != y->cores || !streq(x->mig_uuid, y->mig_uuid))
                        return false;
        }
        return true;
}

static bool same_pod(const struct mk_claim *c, const char *ns, const char *name) {
        return streq(c->namespace, ns) && streq(c->name, name);
}

static const struct mk_dp_held *held_find(const struct mk_dp_held *held, size_t n, const char *ns, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (streq(held[i].namespace, ns) && streq(held[i].name, name))
                        return &held[i];
        return NULL;
}

static ssize_t pod_find(const struct mk_dp_pod *pods, size_t n, const char *ns, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (same_pod(&pods[i].claim, ns, name))
                        return (ssize_t) i;
        return -1;
}

/* Whether handed (migkit.io/mig-handed) lists exactly c's MIG UUIDs. */
static bool handed_matches(const char *handed, const struct mk_claim *c) {
        char uuids[MK_MAX_CLAIM_DEVICES][MK_UUID_MAX];
        size_t n = 0;
        if (!handed || mk_claim_uuids_parse(handed, MK_ANN_HANDED, uuids, &n, NULL) < 0 || n != c->n_devices)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(uuids[i], c->devices[i].mig_uuid))
                        return false;
        return true;
}

/* `base` with the devices of `from` and the allocated mark. */
static void moved(const struct mk_claim *base, const struct mk_claim *from, bool allocated, struct mk_claim *ret) {
        *ret = *base;
        memcpy(ret->devices, from->devices, sizeof(ret->devices));
        ret->n_devices = from->n_devices;
        ret->allocated = allocated;
}

static int fix_add(struct mk_dp_fix **v, size_t *n, enum mk_dp_fix_kind kind, size_t pod, const struct mk_claim *to) {
        for (size_t i = 0; i < *n; i++)
                if ((*v)[i].pod == pod && (*v)[i].kind == kind)
                        return 0; /* one fix per pod and kind: the newest handout decided first */
        struct mk_dp_fix *p = realloc(*v, (*n + 1) * sizeof(*p));
        if (!p)
                return -ENOMEM;
        *v = p;
        p[*n] = (struct mk_dp_fix) {.kind = kind, .pod = pod, .to = *to};
        (*n)++;
        return 0;
}

int mk_dp_handouts_decide(struct mk_dp_handouts *h, const struct mk_dp_held *held, size_t n_held,
                          const struct mk_dp_pod *pods, size_t n_pods, struct mk_dp_fix **ret, size_t *ret_n,
                          bool *ret_changed) {
        _cleanup_free_ struct mk_dp_fix *first = NULL, *then = NULL;
        size_t n_first = 0, n_then = 0;
        bool changed = false;
        _cleanup_free_ struct mk_claim *to = malloc(sizeof(*to));
        if (!to)
                return -ENOMEM;
        for (size_t i = 0; i < n_held; i++) {
                const struct mk_dp_held *x = &held[i];
                struct mk_dp_handout *o = mk_dp_handouts_find(h, (const char *const *) x->keys, x->n_keys);
                if (!o)
                        continue;
                _cleanup_free_ char *who = NULL;
                if (asprintf(&who, "%s/%s", x->namespace, x->name) < 0)
                        return -ENOMEM;
                if (o->holder && !streq(o->holder, who))
                        continue; /* stale: another pod held these ids, and this one's Allocate is not recorded */
                if (!o->holder) {
                        o->holder = TAKE_PTR(who);
                        changed = true;
                }
                if (same_pod(o->slot, x->namespace, x->name))
                        continue; /* admitted in the order assumed */
                ssize_t xp = pod_find(pods, n_pods, x->namespace, x->name);
                if (xp < 0)
                        continue; /* no reservation: not ours to move */
                const struct mk_claim *cx = &pods[xp].claim;
                int r;
                if (!same_devices(cx, o->slot)) {
                        if (!o->displaced) {
                                o->displaced = malloc(sizeof(*o->displaced));
                                if (!o->displaced)
                                        return -ENOMEM;
                                *o->displaced = *cx;
                                changed = true;
                        }
                        moved(cx, o->slot, true, to);
                        r = handed_matches(pods[xp].handed, o->slot)
                                    ? fix_add(&then, &n_then, MK_DP_FIX_RESERVATION, (size_t) xp, to)
                                    : fix_add(&first, &n_first, MK_DP_FIX_HANDED, (size_t) xp, to);
                } else if (!cx->allocated) {
                        moved(cx, o->slot, true, to);
                        r = fix_add(&then, &n_then, MK_DP_FIX_RESERVATION, (size_t) xp, to);
                } else
                        r = 0;
                if (r < 0)
                        return r;
                /* The pod assumed, not admitted yet and still holding what x
                 * got, takes what x held before. */
                ssize_t yp = pod_find(pods, n_pods, o->slot->namespace, o->slot->name);
                if (yp < 0 || yp == xp || !o->displaced ||
                    held_find(held, n_held, o->slot->namespace, o->slot->name) ||
                    !same_devices(&pods[yp].claim, o->slot))
                        continue;
                moved(&pods[yp].claim, o->displaced, o->displaced->allocated, to);
                r = fix_add(&then, &n_then, MK_DP_FIX_RESERVATION, (size_t) yp, to);
                if (r < 0)
                        return r;
        }
        *ret_changed = changed;
        if (n_first > 0) {
                *ret = TAKE_PTR(first);
                *ret_n = n_first;
        } else {
                *ret = TAKE_PTR(then);
                *ret_n = n_then;
        }
        return 0;
}

bool mk_dp_handouts_pending(const struct mk_dp_handouts *h, int64_t now) {
        for (size_t i = 0; i < h->n; i++)
                if (!h->v[i].holder && now - h->v[i].time < MK_DP_HANDOUT_TTL_S)
                        return true;
        return false;
}

/* Whether a pod of held holds any key of o. */
static bool held_any(const struct mk_dp_handout *o, const struct mk_dp_held *held, size_t n_held) {
        for (size_t i = 0; i < n_held; i++)
                for (size_t k = 0; k < o->n_keys; k++)
                        if (has_key((const char *const *) held[i].keys, held[i].n_keys, o->keys[k]))
                                return true;
        return false;
}

/* Drops (and frees) the handouts `drop` says, keeping the others' order. */
static size_t drop_where(struct mk_dp_handouts *h, bool (*drop)(const struct mk_dp_handout *o, const void *ctx),
                         const void *ctx) {
        size_t k = 0, dropped = 0;
        for (size_t i = 0; i < h->n; i++) {
                struct mk_dp_handout *o = &h->v[i];
                if (drop(o, ctx)) {
                        handout_done(o);
                        dropped++;
                } else
                        h->v[k++] = *o;
        }
        h->n = k;
        return dropped;
}

struct prune_ctx {
        const struct mk_dp_held *held;
        size_t n_held;
        const struct mk_dp_pod *pods;
        size_t n_pods;
        int64_t now;
};

static bool prune_one(const struct mk_dp_handout *o, const void *ctx) {
        const struct prune_ctx *c = ctx;
        return o->holder ? !held_any(o, c->held, c->n_held) &&
                                   pod_find(c->pods, c->n_pods, o->slot->namespace, o->slot->name) < 0
                         : c->now - o->time >= MK_DP_HANDOUT_TTL_S;
}

size_t mk_dp_handouts_prune(struct mk_dp_handouts *h, const struct mk_dp_held *held, size_t n_held,
                            const struct mk_dp_pod *pods, size_t n_pods, int64_t now) {
        const struct prune_ctx c = {held, n_held, pods, n_pods, now};
        return drop_where(h, prune_one, &c);
}

struct unseen_ctx {
        int64_t listed, now;
};

static bool unseen_one(const struct mk_dp_handout *o, const void *ctx) {
        const struct unseen_ctx *c = ctx;
        return !o->holder && o->time > c->listed && c->now - o->time >= MK_DP_HANDOUT_UNSEEN_S;
}

size_t mk_dp_handouts_expire_unseen(struct mk_dp_handouts *h, int64_t listed, int64_t now) {
        const struct unseen_ctx c = {listed, now};
        return drop_where(h, unseen_one, &c);
}

/* ---- the state file ---- */

/* A claim as {"namespace","name","uid","reservation","devices","allocated"}. */
static json_t *claim_to_json(const struct mk_claim *c) {
        _cleanup_free_ char *res = NULL;
        if (mk_claim_reservation_format(c, &res) < 0)
                return NULL;
        json_t *devs = json_array();
        for (size_t i = 0; devs && i < c->n_devices; i++)
                if (json_array_append_new(devs, json_string(c->devices[i].mig_uuid)) < 0) {
                        json_decref(devs);
                        return NULL;
                }
        _cleanup_free_ char *dv = devs ? json_dumps(devs, JSON_COMPACT) : NULL;
        json_decref(devs);
        if (!dv)
                return NULL;
        return json_pack("{s:s,s:s,s:s,s:s,s:s,s:b}", "namespace", c->namespace, "name", c->name, "uid", c->uid,
                         "reservation", res, "devices", dv, "allocated", c->allocated);
}

int mk_dp_handouts_format(const struct mk_dp_handouts *h, char **ret) {
        json_t *arr = json_array();
        _cleanup_(json_decrefp) json_t *root = json_pack("{s:i,s:I,s:o}", "version", MK_DP_HANDOUT_FILE_VERSION,
                                                         "next", (json_int_t) h->next_seq, "handouts", arr);
        if (!root)
                return -ENOMEM;
        for (size_t i = 0; i < h->n; i++) {
                const struct mk_dp_handout *o = &h->v[i];
                json_t *cs = json_array();
                for (size_t k = 0; cs && k < o->n_keys; k++) {
                        json_t *ids = json_array();
                        for (const char *p = o->keys[k]; ids && *p;) {
                                size_t l = strcspn(p, ",");
                                if (json_array_append_new(ids, json_stringn(p, l)) < 0) {
                                        json_decref(ids);
                                        ids = NULL;
                                        break;
                                }
                                p += l + (p[l] == ',');
                        }
                        if (!ids || json_array_append_new(cs, ids) < 0) {
                                json_decref(cs);
                                cs = NULL;
                        }
                }
                json_t *pod = claim_to_json(o->slot);
                json_t *disp = o->displaced ? claim_to_json(o->displaced) : json_null();
                json_t *holder = o->holder ? json_string(o->holder) : json_null();
                json_t *e = cs && pod && disp && holder
                                    ? json_pack("{s:I,s:I,s:o,s:o,s:o,s:o}", "seq", (json_int_t) o->seq, "time",
                                                (json_int_t) o->time, "containers", cs, "pod", pod, "displaced",
                                                disp, "holder", holder)
                                    : NULL;
                if (!e) {
                        if (!cs || !pod || !disp || !holder)
                                json_decref(cs), json_decref(pod), json_decref(disp), json_decref(holder);
                        return -ENOMEM;
                }
                if (json_array_append_new(arr, e) < 0)
                        return -ENOMEM;
        }
        char *s = json_dumps(root, JSON_COMPACT);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static int claim_from_json(const json_t *o, const char *field, struct mk_claim *ret, struct mk_error *e) {
        static const char *const known[] = {"namespace", "name", "uid", "reservation", "devices", "allocated",
                                            NULL};
        int r = mk_json_check_keys(o, field, known, e);
        if (r < 0)
                return r;
        _cleanup_free_ struct mk_claim *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        if ((r = mk_json_get_str(o, "namespace", field, c->namespace, sizeof(c->namespace), true, e)) < 0 ||
            (r = mk_json_get_str(o, "name", field, c->name, sizeof(c->name), true, e)) < 0 ||
            (r = mk_json_get_str(o, "uid", field, c->uid, sizeof(c->uid), true, e)) < 0)
                return r;
        const char *rs = json_string_value(json_object_get(o, "reservation"));
        const char *ds = json_string_value(json_object_get(o, "devices"));
        const json_t *al = json_object_get(o, "allocated");
        if (!rs || !ds || strlen(rs) > MK_MAX_RESERVATION_BYTES || strlen(ds) > MK_MAX_RESERVATION_BYTES ||
            !json_is_boolean(al))
                return mk_error_set_field(e, -EINVAL, field, "needs reservation, devices and allocated");
        if (!*c->namespace || !*c->name || !*c->uid)
                return mk_error_set_field(e, -EINVAL, field, "empty namespace, name or uid");
        if ((r = mk_claim_reservation_parse(rs, c, e)) < 0 || (r = mk_claim_devices_parse(ds, c, e)) < 0) {
                mk_error_prefix(e, "%s", field);
                return r;
        }
        for (size_t i = 0; i < c->n_devices; i++)
                if (!*c->devices[i].mig_uuid)
                        return mk_error_set_field(e, -EINVAL, field, "device %zu has no UUID", i);
        c->allocated = json_is_true(al);
        c->active = true;
        *ret = *c;
        return 0;
}

static int handout_from_json(const json_t *j, size_t idx, struct mk_dp_handout *o, struct mk_error *e) {
        static const char *const known[] = {"seq", "time", "containers", "pod", "displaced", "holder", NULL};
        char field[64];
        snprintf(field, sizeof(field), "handouts[%zu]", idx);
        int r = mk_json_check_keys(j, field, known, e);
        if (r < 0)
                return r;
        uint64_t seq = 0, t = 0;
        if ((r = mk_json_get_u64(j, "seq", field, UINT64_C(1) << 53, true, &seq, e)) < 0 ||
            (r = mk_json_get_u64(j, "time", field, UINT64_C(1) << 40, true, &t, e)) < 0)
                return r;
        const json_t *cs = json_object_get(j, "containers"), *ho = json_object_get(j, "holder");
        size_t n = json_array_size(cs);
        const char *holder = json_string_value(ho);
        if (!json_is_array(cs) || n == 0 || n > MK_MAX_POD_CONTAINERS || !(json_is_null(ho) || holder))
                return mk_error_set_field(e, -EINVAL, field, "needs 1 to %u containers and a holder (or null)",
                                          MK_MAX_POD_CONTAINERS);
        if (holder && (strlen(holder) >= 2 * MK_K8S_NAME_MAX || !strchr(holder, '/') || !mk_json_token_ok(holder)))
                return mk_error_set_field(e, -EINVAL, field, "holder: not a namespace/name");
        o->seq = seq;
        o->time = (int64_t) t;
        if (holder && !(o->holder = strdup(holder)))
                return -ENOMEM;
        o->keys = calloc(n, sizeof(*o->keys));
        o->slot = calloc(1, sizeof(*o->slot));
        if (!o->keys || !o->slot)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++, o->n_keys++) {
                const json_t *ids = json_array_get(cs, k);
                size_t m = json_array_size(ids);
                const char *v[MK_MAX_CLAIM_DEVICES];
                bool ok = json_is_array(ids) && m > 0 && m <= MK_MAX_CLAIM_DEVICES;
                for (size_t i = 0; ok && i < m; i++) {
                        v[i] = json_string_value(json_array_get(ids, i));
                        ok = v[i] && mk_json_token_ok(v[i]);
                }
                if (!ok || mk_dp_handout_key(v, m, &o->keys[k]) < 0)
                        return mk_error_set_field(e, -EINVAL, field, "containers[%zu]: 1 to %u device ids", k,
                                                  MK_MAX_CLAIM_DEVICES);
        }
        char sub[96];
        snprintf(sub, sizeof(sub), "%s.pod", field);
        if ((r = claim_from_json(json_object_get(j, "pod"), sub, o->slot, e)) < 0)
                return r;
        const json_t *d = json_object_get(j, "displaced");
        if (d && !json_is_null(d)) {
                o->displaced = calloc(1, sizeof(*o->displaced));
                if (!o->displaced)
                        return -ENOMEM;
                snprintf(sub, sizeof(sub), "%s.displaced", field);
                if ((r = claim_from_json(d, sub, o->displaced, e)) < 0)
                        return r;
        }
        return 0;
}

int mk_dp_handouts_parse(const char *s, size_t len, struct mk_dp_handouts *ret, struct mk_error *e) {
        static const char *const known[] = {"version", "next", "handouts", NULL};
        _cleanup_(json_decrefp) json_t *root = NULL;
        int r = mk_json_load(s, len, MK_DP_HANDOUT_MAX_FILE, "handouts file", &root, e);
        if (r < 0)
                return r;
        if ((r = mk_json_check_keys(root, "handouts file", known, e)) < 0)
                return r;
        uint64_t version = 0, next = 0;
        if ((r = mk_json_get_u64(root, "version", "version", 1000, true, &version, e)) < 0 ||
            (r = mk_json_get_u64(root, "next", "next", UINT64_C(1) << 53, true, &next, e)) < 0)
                return r;
        if (version != MK_DP_HANDOUT_FILE_VERSION)
                return mk_error_set_field(e, -EINVAL, "version", "%llu, only %d is read",
                                          (unsigned long long) version, MK_DP_HANDOUT_FILE_VERSION);
        const json_t *arr = json_object_get(root, "handouts");
        size_t n = json_array_size(arr);
        if (!json_is_array(arr))
                return mk_error_set_field(e, -EINVAL, "handouts", "must be an array");
        if (n > MK_DP_HANDOUT_MAX)
                return mk_error_set_field(e, -E2BIG, "handouts", "%zu, at most %u", n, MK_DP_HANDOUT_MAX);
        _cleanup_(mk_dp_handouts_done) struct mk_dp_handouts h = {.next_seq = next};
        h.v = calloc(n ? n : 1, sizeof(*h.v));
        if (!h.v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                r = handout_from_json(json_array_get(arr, i), i, &h.v[h.n], e);
                h.n++; /* freed with h, even when half read */
                if (r < 0)
                        return r;
                if (h.v[i].seq > next || (i > 0 && h.v[i].seq <= h.v[i - 1].seq))
                        return mk_error_set_field(e, -EINVAL, "handouts", "[%zu]: seq out of order", i);
        }
        *ret = h;
        h = (struct mk_dp_handouts) {0};
        return 0;
}

int mk_dp_handouts_load(const char *path, struct mk_dp_handouts *ret, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = mk_read_file(path, MK_DP_HANDOUT_MAX_FILE, &data, &len, e);
        if (r == -ENOENT) {
                *ret = (struct mk_dp_handouts) {0};
                return 0;
        }
        if (r < 0)
                return r;
        r = mk_dp_handouts_parse(data, len, ret, e);
        if (r < 0)
                mk_error_prefix(e, "%s", path);
        return r;
}

int mk_dp_handouts_save(const struct mk_dp_handouts *h, const char *path, struct mk_error *e) {
        _cleanup_free_ char *s = NULL;
        int r = mk_dp_handouts_format(h, &s);
        if (r < 0)
                return mk_error_set(e, r, "Cannot format the handouts");
        return mk_write_file_atomic(path, s, strlen(s), 0600, e);
}
