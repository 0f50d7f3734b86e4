/* Node inventory annotation (inventory.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/macro.h"
#include "kube/json.h"
#include "kube/object.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"

static const char *const state_table[_MK_INV_STATE_MAX] = {
        [MK_INV_CREATED] = "created",
        [MK_INV_RESERVED] = "reserved",
        [MK_INV_ORPHAN] = "orphan",
};

MK_DEFINE_STRING_TABLE_LOOKUP(mk_inv_state, enum mk_inv_state, state_table, _MK_INV_STATE_MAX, _MK_INV_STATE_INVALID);

static void inv_gpu_done(struct mk_inv_gpu *g) {
        for (size_t i = 0; g->profiles && i < g->n_profiles; i++)
                free(g->profiles[i].placements);
        free(g->profiles);
        free(g->instances);
        free(g->soft);
        *g = (struct mk_inv_gpu) {0};
}

struct mk_inventory *mk_inventory_free(struct mk_inventory *inv) {
        if (!inv)
                return NULL;
        for (size_t i = 0; i < inv->n_gpus; i++)
                inv_gpu_done(&inv->gpus[i]);
        free(inv->gpus);
        free(inv);
        return NULL;
}

static int add_instance(struct mk_inv_gpu *g, const struct mk_inv_instance *in, struct mk_error *e) {
        if (g->n_instances >= MK_MAX_INVENTORY_INSTANCES)
                return mk_error_set(e, -E2BIG, "GPU %s: more than %u instances", g->uuid, MK_MAX_INVENTORY_INSTANCES);
        g->instances[g->n_instances++] = *in;
        return 0;
}

static void claim_owner(const struct mk_claim *c, struct mk_inv_instance *in) {
        snprintf(in->pod, sizeof(in->pod), "%s/%s", c->namespace, c->name);
        snprintf(in->uid, sizeof(in->uid), "%s", c->uid);
}

/* A shared GPU's soft slices: the active claims' soft devices on it. */
static int soft_from_claims(const struct mk_gpu *sg, const char *node, const struct mk_claim *claims,
                            size_t n_claims, struct mk_inv_gpu *g, struct mk_error *e) {
        for (size_t c = 0; c < n_claims; c++) {
                if (!claims[c].active || !streq(claims[c].node, node))
                        continue;
                for (size_t d = 0; d < claims[c].n_devices; d++) {
                        const struct mk_claim_device *cd = &claims[c].devices[d];
                        if (cd->mode != MK_CLAIM_SOFT || !streq(cd->gpu, sg->uuid))
                                continue;
                        if (g->n_soft >= MK_MAX_INVENTORY_SOFT)
                                return mk_error_set(e, -E2BIG, "GPU %s: more than %u soft slices", sg->uuid,
                                                    MK_MAX_INVENTORY_SOFT);
                        struct mk_inv_soft *s = &g->soft[g->n_soft++];
                        *s = (struct mk_inv_soft) {
                                .container = cd->container, .memory_mib = cd->memory_mib, .cores = cd->cores};
                        snprintf(s->pod, sizeof(s->pod), "%s/%s", claims[c].namespace, claims[c].name);
                        snprintf(s->uid, sizeof(s->uid), "%s", claims[c].uid);
                }
        }
        return 0;
}

/* The GPU's named profiles the config allows, with their placements. */
static int copy_profiles(const struct mk_gpu *sg, const struct mk_sched_config *cfg, struct mk_inv_gpu *g,
                         struct mk_error *e) {
        for (size_t i = 0; i < sg->n_profiles; i++) {
                const struct mk_gi_profile *p = &sg->profiles[i];
                if (!p->named || !mk_sched_config_allows(cfg, sg->name, &p->pname))
                        continue;
                if (g->n_profiles >= MK_MAX_INVENTORY_PROFILES)
                        return mk_error_set(e, -E2BIG, "GPU %s: more than %u profiles", sg->uuid,
                                            MK_MAX_INVENTORY_PROFILES);
                struct mk_gi_profile *q = &g->profiles[g->n_profiles++];
                *q = *p;
                q->ci_profiles = NULL;
                q->n_ci_profiles = 0;
                q->n_placements = MIN(p->n_placements, (size_t) MK_MAX_INVENTORY_PLACEMENTS);
                q->placements = calloc(q->n_placements + 1, sizeof(*q->placements));
                if (!q->placements)
                        return -ENOMEM;
                memcpy(q->placements, p->placements, q->n_placements * sizeof(*q->placements));
        }
        return 0;
}

/* The GPU's instances: the existing GPU instances, each matched to the
 * claim reserving it (else an orphan), then the reservations of this
 * node's active claims not created yet. */
static int mig_instances(const struct mk_gpu *sg, const char *node, const struct mk_claim *claims, size_t n_claims,
                         struct mk_inv_gpu *g, struct mk_error *e) {
        _cleanup_free_ bool *matched = calloc(n_claims * MK_MAX_CLAIM_DEVICES + 1, sizeof(bool));
        if (!matched)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < sg->n_gis && r >= 0; i++) {
                const struct mk_gi *gi = &sg->gis[i];
                const struct mk_gi_profile *p = mk_gpu_profile_by_id(sg, gi->profile_id);
                struct mk_inv_instance in = {
                        .state = MK_INV_ORPHAN,
                        .profile_id = gi->profile_id,
                        .slices = p ? p->slices : 0,
                        .placement = gi->placement,
                        .gi_id = gi->id,
                };
                snprintf(in.profile, sizeof(in.profile), "%s", p && p->named ? p->name : "unknown");
                if (gi->n_cis > 0)
                        snprintf(in.mig_uuid, sizeof(in.mig_uuid), "%s", gi->cis[0].uuid);
                for (size_t c = 0; c < n_claims && in.state == MK_INV_ORPHAN; c++) {
                        if (!claims[c].active || !streq(claims[c].node, node))
                                continue;
                        for (size_t d = 0; d < claims[c].n_devices; d++) {
                                const struct mk_claim_device *cd = &claims[c].devices[d];
                                if (cd->mode == MK_CLAIM_MIG && streq(cd->gpu, sg->uuid) &&
                                    cd->placement.start == gi->placement.start &&
                                    cd->placement.size == gi->placement.size && cd->profile_id == gi->profile_id) {
                                        in.state = MK_INV_CREATED;
                                        claim_owner(&claims[c], &in);
                                        matched[c * MK_MAX_CLAIM_DEVICES + d] = true;
                                        break;
                                }
                        }
                }
                r = add_instance(g, &in, e);
        }
        for (size_t c = 0; c < n_claims && r >= 0; c++) {
                if (!claims[c].active || !streq(claims[c].node, node))
                        continue;
                for (size_t d = 0; d < claims[c].n_devices && r >= 0; d++) {
                        const struct mk_claim_device *cd = &claims[c].devices[d];
                        if (cd->mode != MK_CLAIM_MIG || !streq(cd->gpu, sg->uuid) ||
                            matched[c * MK_MAX_CLAIM_DEVICES + d])
                                continue;
                        struct mk_inv_instance in = {
                                .state = MK_INV_RESERVED,
                                .profile_id = cd->profile_id,
                                .slices = cd->slices,
                                .placement = cd->placement,
                                .gi_id = UINT32_MAX,
                        };
                        snprintf(in.profile, sizeof(in.profile), "%s", cd->profile);
                        claim_owner(&claims[c], &in);
                        r = add_instance(g, &in, e);
                }
        }
        return r;
}

/* Which modes the node's active claims reserve on GPU `uuid`: bit 0 mig,
 * bit 1 hami-core. */
static unsigned claimed_modes(const char *uuid, const char *node, const struct mk_claim *claims, size_t n_claims) {
        unsigned m = 0;
        for (size_t c = 0; c < n_claims; c++) {
                if (!claims[c].active || !streq(claims[c].node, node))
                        continue;
                for (size_t d = 0; d < claims[c].n_devices; d++)
                        if (streq(claims[c].devices[d].gpu, uuid))
                                m |= claims[c].devices[d].mode == MK_CLAIM_SOFT ? 2u : 1u;
        }
        return m;
}

static int gpu_from_snapshot(const struct mk_gpu *sg, const struct mk_sched_config *cfg, const char *node,
                             enum mk_sched_mode mode, bool switchable, const struct mk_claim *claims,
                             size_t n_claims, struct mk_inv_gpu *g, struct mk_error *e) {
        g->index = sg->index;
        snprintf(g->uuid, sizeof(g->uuid), "%s", sg->uuid);
        snprintf(g->model, sizeof(g->model), "%s", sg->name);
        g->memory_mib = sg->memory_total_bytes >> 20;
        g->memory_units = sg->memory_units;
        g->mig_enabled = sg->mig_current == MK_MIG_ENABLED;
        g->switchable = switchable;
        for (size_t i = 0; i < sg->n_profiles; i++) {
                g->slices = MAX(g->slices, sg->profiles[i].slices);
                g->multiprocessors = MAX(g->multiprocessors, sg->profiles[i].multiprocessors);
        }
        g->profiles = calloc(MK_MAX_INVENTORY_PROFILES, sizeof(*g->profiles));
        g->instances = calloc(MK_MAX_INVENTORY_INSTANCES, sizeof(*g->instances));
        if (!g->profiles || !g->instances)
                return -ENOMEM;
        if (mode == MK_SCHED_MODE_HAMI_CORE) {
                g->mode = MK_CLAIM_SOFT;
                g->split = mk_sched_config_split(cfg, node);
                g->soft = calloc(MK_MAX_INVENTORY_SOFT, sizeof(*g->soft));
                if (!g->soft)
                        return -ENOMEM;
                int r = switchable ? copy_profiles(sg, cfg, g, e) : 0; /* what it would offer as MIG */
                return r < 0 ? r : soft_from_claims(sg, node, claims, n_claims, g, e);
        }
        if (switchable)
                g->split = mk_sched_config_split(cfg, node); /* what it would offer shared */
        int r = copy_profiles(sg, cfg, g, e);
        return r < 0 ? r : mig_instances(sg, node, claims, n_claims, g, e);
}

int mk_inventory_from_snapshot(const struct mk_snapshot *s, const struct mk_sched_config *cfg, const char *node,
                               const struct mk_claim *claims, size_t n_claims, struct mk_inventory **ret,
                               struct mk_error *e) {
        _cleanup_(mk_inventory_freep) struct mk_inventory *inv = calloc(1, sizeof(*inv));
        if (!inv)
                return -ENOMEM;
        if (strlen(node) >= sizeof(inv->node))
                return mk_error_set(e, -EINVAL, "node name too long");
        snprintf(inv->node, sizeof(inv->node), "%s", node);
        inv->gpus = calloc(MIN(s->n_gpus, (size_t) MK_MAX_INVENTORY_GPUS) + 1, sizeof(*inv->gpus));
        if (!inv->gpus)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *sg = &s->gpus[i];
                enum mk_sched_mode mode =
                        mk_sched_config_gpu_mode(cfg, node, sg->index, sg->mig_current == MK_MIG_ENABLED);
                bool switchable = false;
                if (sg->mig_capable && sg->n_gis == 0 && mk_sched_config_may_switch(cfg, node, sg->index)) {
                        /* The idle mode-switch rule: reservations of one mode on an empty GPU give it that
                         * mode (the agent switches it); none at all leave it switchable. */
                        unsigned m = claimed_modes(sg->uuid, node, claims, n_claims);
                        switchable = m == 0;
                        if (m == 1u || m == 2u)
                                mode = m == 1u ? MK_SCHED_MODE_MIG : MK_SCHED_MODE_HAMI_CORE;
                }
                if (mode == MK_SCHED_MODE_DISABLED || (mode == MK_SCHED_MODE_MIG && !sg->mig_capable))
                        continue;
                if (inv->n_gpus >= MK_MAX_INVENTORY_GPUS)
                        return mk_error_set(e, -E2BIG, "more than %u GPUs", MK_MAX_INVENTORY_GPUS);
                int r = gpu_from_snapshot(sg, cfg, node, mode, switchable, claims, n_claims,
                                          &inv->gpus[inv->n_gpus++], e);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(inv);
        return 0;
}

void mk_inventory_hold_mode(struct mk_inventory *inv, size_t i) {
        struct mk_inv_gpu *g = &inv->gpus[i];
        if (!g->switchable)
                return;
        g->switchable = false;
        if (g->mode == MK_CLAIM_MIG) {
                g->split = 0;
                return;
        }
        for (size_t k = 0; k < g->n_profiles; k++)
                free(g->profiles[k].placements);
        g->n_profiles = 0;
}

static json_t *placement_json(struct mk_placement p) {
        return json_pack("[I, I]", (json_int_t) p.start, (json_int_t) p.size);
}

static json_t *gpu_json(const struct mk_inv_gpu *g) {
        json_t *profiles = json_array(), *instances = json_array();
        json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:o, s:o}", "index", (json_int_t) g->index,
                              "uuid", g->uuid, "model", g->model, "memoryMiB", (json_int_t) g->memory_mib, "units",
                              (json_int_t) g->memory_units, "slices", (json_int_t) g->slices, "sms",
                              (json_int_t) g->multiprocessors, "mig", g->mig_enabled, "profiles", profiles,
                              "instances", instances);
        if (!o)
                return NULL;
        for (size_t i = 0; i < g->n_profiles; i++) {
                const struct mk_gi_profile *p = &g->profiles[i];
                json_t *pl = json_array();
                json_t *po = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "name", p->name, "id", (json_int_t) p->id,
                                       "slices", (json_int_t) p->slices, "memoryMiB", (json_int_t) p->memory_mib,
                                       "maxCount", (json_int_t) p->max_count, "sms", (json_int_t) p->multiprocessors,
                                       "placements", pl);
                if (!po || json_array_append_new(profiles, po) < 0)
                        goto fail;
                for (size_t k = 0; k < p->n_placements; k++)
                        if (json_array_append_new(pl, placement_json(p->placements[k])) < 0)
                                goto fail;
        }
        for (size_t i = 0; i < g->n_instances; i++) {
                const struct mk_inv_instance *in = &g->instances[i];
                json_t *io = json_pack("{s:s, s:s, s:I, s:I, s:o}", "state", mk_inv_state_to_string(in->state),
                                       "profile", in->profile, "id", (json_int_t) in->profile_id, "slices",
                                       (json_int_t) in->slices, "placement", placement_json(in->placement));
                if (!io || json_array_append_new(instances, io) < 0)
                        goto fail;
                if ((in->gi_id != UINT32_MAX && json_object_set_new(io, "gi", json_integer(in->gi_id)) < 0) ||
                    (in->mig_uuid[0] && json_object_set_new(io, "migUUID", json_string(in->mig_uuid)) < 0) ||
                    (in->pod[0] && json_object_set_new(io, "pod", json_string(in->pod)) < 0) ||
                    (in->uid[0] && json_object_set_new(io, "uid", json_string(in->uid)) < 0))
                        goto fail;
        }
        if (g->switchable && json_object_set_new(o, "switchable", json_true()) < 0)
                goto fail;
        if (g->mode == MK_CLAIM_MIG) {
                if (g->switchable && json_object_set_new(o, "split", json_integer(g->split)) < 0)
                        goto fail;
                return o; /* the version-1 form, unchanged unless switchable */
        }
        json_t *soft = json_array();
        if (json_object_set_new(o, "mode", json_string(mk_claim_mode_to_string(g->mode))) < 0 ||
            json_object_set_new(o, "split", json_integer(g->split)) < 0 ||
            json_object_set_new(o, "softSlices", soft) < 0)
                goto fail;
        for (size_t i = 0; i < g->n_soft; i++) {
                const struct mk_inv_soft *s = &g->soft[i];
                if (json_array_append_new(soft, json_pack("{s:s, s:s, s:I, s:I, s:I}", "pod", s->pod, "uid", s->uid,
                                                          "container", (json_int_t) s->container, "memoryMiB",
                                                          (json_int_t) s->memory_mib, "cores",
                                                          (json_int_t) s->cores)) < 0)
                        goto fail;
        }
        return o;
fail:
        json_decref(o);
        return NULL;
}

int mk_inventory_format(const struct mk_inventory *inv, char **ret, struct mk_error *e) {
        json_t *gpus = json_array();
        json_t *root = json_pack("{s:i, s:s, s:o}", "version", MK_INVENTORY_VERSION, "node", inv->node, "gpus", gpus);
        if (!root)
                return -ENOMEM;
        for (size_t i = 0; i < inv->n_gpus; i++)
                if (json_array_append_new(gpus, gpu_json(&inv->gpus[i])) < 0) {
                        json_decref(root);
                        return -ENOMEM;
                }
        char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(root);
        if (!s)
                return -ENOMEM;
        if (strlen(s) > MK_MAX_INVENTORY_BYTES) {
                size_t n = strlen(s);
                free(s);
                return mk_error_set(e, -E2BIG, "the inventory takes %zu bytes, more than %u", n,
                                    MK_MAX_INVENTORY_BYTES);
        }
        *ret = s;
        return 0;
}

static int parse_pl(const json_t *v, const char *f, unsigned units, struct mk_placement *ret, struct mk_error *e) {
        if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
            !json_is_integer(json_array_get(v, 1)))
                return mk_error_set_field(e, -EINVAL, f, "a placement must be [start, size]");
        json_int_t st = json_integer_value(json_array_get(v, 0)), sz = json_integer_value(json_array_get(v, 1));
        if (st < 0 || sz < 1 || st + sz > (json_int_t) units)
                return mk_error_set_field(e, -EINVAL, f, "placement [%lld, %lld] is outside the GPU's %u units",
                                          (long long) st, (long long) sz, units);
        *ret = (struct mk_placement) {.start = (unsigned) st, .size = (unsigned) sz};
        return 0;
}

static int parse_profile(const json_t *o, const char *f, unsigned units, struct mk_gi_profile *p,
                         struct mk_error *e) {
        static const char *const known[] = {"name", "id", "slices", "memoryMiB", "maxCount", "sms", "placements", NULL};
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0)
                return r;
        uint64_t v;
        if ((r = mk_json_get_str(o, "name", f, p->name, sizeof(p->name), true, e)) < 0)
                return r;
        struct mk_error pe = {0};
        if (mk_profile_name_parse(p->name, &p->pname, &pe) < 0 || p->pname.c != p->pname.g)
                return mk_error_set_field(e, -EINVAL, f, "name: '%s' is not a GPU instance profile", p->name);
        p->named = true;
        if ((r = mk_json_get_u64(o, "id", f, UINT32_MAX - 1, true, &v, e)) < 0)
                return r;
        p->id = (unsigned) v;
        if ((r = mk_json_get_u64(o, "slices", f, 32, true, &v, e)) < 0)
                return r;
        p->slices = (unsigned) v;
        if ((r = mk_json_get_u64(o, "memoryMiB", f, 1ull << 30, true, &v, e)) < 0)
                return r;
        p->memory_mib = v;
        if ((r = mk_json_get_u64(o, "maxCount", f, 64, true, &v, e)) < 0)
                return r;
        p->max_count = (unsigned) v;
        if ((r = mk_json_get_u64(o, "sms", f, 1u << 20, false, &v, e)) < 0)
                return r;
        p->multiprocessors = r > 0 ? (unsigned) v : 0;
        const json_t *pl = json_object_get(o, "placements");
        if (!json_is_array(pl) || json_array_size(pl) > MK_MAX_INVENTORY_PLACEMENTS)
                return mk_error_set_field(e, -EINVAL, f, "placements: must be an array of at most %u",
                                          MK_MAX_INVENTORY_PLACEMENTS);
        p->placements = calloc(json_array_size(pl) + 1, sizeof(*p->placements));
        if (!p->placements)
                return -ENOMEM;
        for (size_t i = 0; i < json_array_size(pl); i++) {
                if ((r = parse_pl(json_array_get(pl, i), f, units, &p->placements[i], e)) < 0)
                        return r;
                p->n_placements++;
        }
        return 0;
}

static int parse_instance(const json_t *o, const char *f, unsigned units, struct mk_inv_instance *in,
                          struct mk_error *e) {
        static const char *const known[] = {"state", "profile", "id", "slices", "placement", "gi", "migUUID", "pod",
                                            "uid", NULL};
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0)
                return r;
        char st[16];
        uint64_t v;
        if ((r = mk_json_get_str(o, "state", f, st, sizeof(st), true, e)) < 0)
                return r;
        if ((int) (in->state = mk_inv_state_from_string(st)) < 0)
                return mk_error_set_field(e, -EINVAL, f, "state: unknown '%s'", st);
        if ((r = mk_json_get_str(o, "profile", f, in->profile, sizeof(in->profile), true, e)) < 0 ||
            (r = mk_json_get_u64(o, "id", f, UINT32_MAX - 1, true, &v, e)) < 0)
                return r;
        in->profile_id = (unsigned) v;
        if ((r = mk_json_get_u64(o, "slices", f, 32, true, &v, e)) < 0)
                return r;
        in->slices = (unsigned) v;
        if ((r = parse_pl(json_object_get(o, "placement"), f, units, &in->placement, e)) < 0)
                return r;
        if ((r = mk_json_get_u64(o, "gi", f, UINT32_MAX - 1, false, &v, e)) < 0)
                return r;
        in->gi_id = r > 0 ? (unsigned) v : UINT32_MAX;
        if ((r = mk_json_get_str(o, "migUUID", f, in->mig_uuid, sizeof(in->mig_uuid), false, e)) < 0 ||
            (r = mk_json_get_str(o, "pod", f, in->pod, sizeof(in->pod), false, e)) < 0 ||
            (r = mk_json_get_str(o, "uid", f, in->uid, sizeof(in->uid), false, e)) < 0)
                return r;
        return 0;
}

static int parse_soft(const json_t *o, const char *f, struct mk_inv_soft *s, struct mk_error *e) {
        static const char *const known[] = {"pod", "uid", "container", "memoryMiB", "cores", NULL};
        uint64_t v;
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0 || (r = mk_json_get_str(o, "pod", f, s->pod, sizeof(s->pod), true, e)) < 0 ||
            (r = mk_json_get_str(o, "uid", f, s->uid, sizeof(s->uid), true, e)) < 0 ||
            (r = mk_json_get_u64(o, "container", f, MK_MAX_POD_CONTAINERS - 1, true, &v, e)) < 0)
                return r;
        s->container = (unsigned) v;
        if ((r = mk_json_get_u64(o, "memoryMiB", f, MK_CLAIM_MAX_MEMORY_MIB, true, &s->memory_mib, e)) < 0 ||
            (r = mk_json_get_u64(o, "cores", f, 100, true, &v, e)) < 0)
                return r;
        s->cores = (unsigned) v;
        return 0;
}

/* The unified pool's optional fields: mode (default mig), switchable, and
 * for a hami-core or switchable GPU split (default 10), for a hami-core one
 * softSlices. */
static int parse_shared(const json_t *o, const char *f, struct mk_inv_gpu *g, struct mk_error *e) {
        char mode[16];
        uint64_t v;
        int r = mk_json_get_str(o, "mode", f, mode, sizeof(mode), false, e);
        if (r < 0)
                return r;
        if (r > 0 && (int) (g->mode = mk_claim_mode_from_string(mode)) < 0)
                return mk_error_set_field(e, -EINVAL, f, "mode: unknown '%s' (want mig or hami-core)", mode);
        const json_t *sw = json_object_get(o, "switchable");
        if (sw && !json_is_boolean(sw))
                return mk_error_set_field(e, -EINVAL, f, "switchable: must be true or false");
        g->switchable = json_is_true(sw);
        const json_t *soft = json_object_get(o, "softSlices");
        if (g->mode == MK_CLAIM_MIG && (soft || (json_object_get(o, "split") && !g->switchable)))
                return mk_error_set_field(e, -EINVAL, f,
                                          "split and softSlices are for a hami-core GPU (split also a switchable one)");
        if (g->mode == MK_CLAIM_MIG && !g->switchable)
                return 0;
        if ((r = mk_json_get_u64(o, "split", f, MK_MAX_INVENTORY_SOFT, false, &v, e)) < 0)
                return r;
        g->split = r > 0 ? (unsigned) v : MK_SCHED_DEFAULT_SPLIT;
        if (g->split == 0)
                return mk_error_set_field(e, -EINVAL, f, "split: must be at least 1");
        if (g->mode == MK_CLAIM_MIG)
                return 0;
        if (soft && (!json_is_array(soft) || json_array_size(soft) > MK_MAX_INVENTORY_SOFT))
                return mk_error_set_field(e, -EINVAL, f, "softSlices: must be an array of at most %u",
                                          MK_MAX_INVENTORY_SOFT);
        g->soft = calloc(json_array_size(soft) + 1, sizeof(*g->soft));
        if (!g->soft)
                return -ENOMEM;
        char sub[128];
        for (size_t i = 0; i < json_array_size(soft); i++) {
                snprintf(sub, sizeof(sub), "%s.softSlices[%zu]", f, i);
                if ((r = parse_soft(json_array_get(soft, i), sub, &g->soft[i], e)) < 0)
                        return r;
                g->n_soft++;
        }
        return 0;
}

static int parse_gpu(const json_t *o, const char *f, struct mk_inv_gpu *g, struct mk_error *e) {
        static const char *const known[] = {"index", "uuid",     "model",     "memoryMiB", "units",
                                            "slices", "sms",     "mig",       "profiles",  "instances",
                                            "mode",  "split",    "softSlices", "switchable", NULL};
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0)
                return r;
        uint64_t v;
        if ((r = mk_json_get_u64(o, "index", f, 1023, true, &v, e)) < 0)
                return r;
        g->index = (unsigned) v;
        if ((r = mk_json_get_str(o, "uuid", f, g->uuid, sizeof(g->uuid), true, e)) < 0 ||
            (r = mk_json_get_str(o, "model", f, g->model, sizeof(g->model), true, e)) < 0 ||
            (r = mk_json_get_u64(o, "memoryMiB", f, 1ull << 30, true, &g->memory_mib, e)) < 0)
                return r;
        if (!mk_json_token_ok(g->uuid) || !g->uuid[0])
                return mk_error_set_field(e, -EINVAL, f, "uuid: not a GPU UUID");
        if ((r = mk_json_get_u64(o, "units", f, 32, true, &v, e)) < 0)
                return r;
        g->memory_units = (unsigned) v;
        if ((r = mk_json_get_u64(o, "slices", f, 32, true, &v, e)) < 0)
                return r;
        g->slices = (unsigned) v;
        if ((r = mk_json_get_u64(o, "sms", f, 1u << 20, false, &v, e)) < 0)
                return r;
        g->multiprocessors = r > 0 ? (unsigned) v : 0;
        const json_t *mig = json_object_get(o, "mig");
        if (!json_is_boolean(mig))
                return mk_error_set_field(e, -EINVAL, f, "mig: must be true or false");
        g->mig_enabled = json_is_true(mig);
        const json_t *pr = json_object_get(o, "profiles"), *ins = json_object_get(o, "instances");
        if (!json_is_array(pr) || json_array_size(pr) > MK_MAX_INVENTORY_PROFILES)
                return mk_error_set_field(e, -EINVAL, f, "profiles: must be an array of at most %u",
                                          MK_MAX_INVENTORY_PROFILES);
        if (!json_is_array(ins) || json_array_size(ins) > MK_MAX_INVENTORY_INSTANCES)
                return mk_error_set_field(e, -EINVAL, f, "instances: must be an array of at most %u",
                                          MK_MAX_INVENTORY_INSTANCES);
        g->profiles = calloc(json_array_size(pr) + 1, sizeof(*g->profiles));
        g->instances = calloc(json_array_size(ins) + 1, sizeof(*g->instances));
        if (!g->profiles || !g->instances)
                return -ENOMEM;
        char sub[128];
        for (size_t i = 0; i < json_array_size(pr); i++) {
                snprintf(sub, sizeof(sub), "%s.profiles[%zu]", f, i);
                r = parse_profile(json_array_get(pr, i), sub, g->memory_units, &g->profiles[i], e);
                g->n_profiles++; /* its placements are freed with g even on failure */
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < json_array_size(ins); i++) {
                snprintf(sub, sizeof(sub), "%s.instances[%zu]", f, i);
                if ((r = parse_instance(json_array_get(ins, i), sub, g->memory_units, &g->instances[i], e)) < 0)
                        return r;
                g->n_instances++;
        }
        if ((r = parse_shared(o, f, g, e)) < 0)
                return r;
        if (g->switchable && (g->n_instances > 0 || g->n_soft > 0))
                return mk_error_set_field(e, -EINVAL, f, "switchable: a GPU with instances or soft slices is not idle");
        return 0;
}

int mk_inventory_parse(const char *data, size_t len, struct mk_inventory **ret, struct mk_error *e) {
        static const char *const known[] = {"version", "node", "gpus", NULL};
        json_t *root = NULL;
        int r = mk_json_load(data, len, MK_MAX_INVENTORY_BYTES, MK_ANN_INVENTORY, &root, e);
        if (r < 0)
                return r;
        _cleanup_(mk_inventory_freep) struct mk_inventory *inv = calloc(1, sizeof(*inv));
        uint64_t v;
        const json_t *gpus;
        if (!inv) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = mk_json_check_keys(root, "inventory", known, e)) < 0 ||
            (r = mk_json_get_u64(root, "version", "inventory", UINT32_MAX, true, &v, e)) < 0)
                goto out;
        if (v != MK_INVENTORY_VERSION) {
                r = mk_error_set_field(e, -EINVAL, "inventory.version", "unsupported version %" PRIu64 " (want %d)",
                                       v, MK_INVENTORY_VERSION);
                goto out;
        }
        if ((r = mk_json_get_str(root, "node", "inventory", inv->node, sizeof(inv->node), true, e)) < 0)
                goto out;
        gpus = json_object_get(root, "gpus");
        if (!json_is_array(gpus) || json_array_size(gpus) > MK_MAX_INVENTORY_GPUS) {
                r = mk_error_set_field(e, -EINVAL, "inventory.gpus", "must be an array of at most %u",
                                       MK_MAX_INVENTORY_GPUS);
                goto out;
        }
        inv->gpus = calloc(json_array_size(gpus) + 1, sizeof(*inv->gpus));
        if (!inv->gpus) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < json_array_size(gpus); i++) {
                char f[64];
                snprintf(f, sizeof(f), "gpus[%zu]", i);
                r = parse_gpu(json_array_get(gpus, i), f, &inv->gpus[i], e);
                inv->n_gpus++;
                if (r < 0)
                        goto out;
                for (size_t k = 0; k < i; k++)
                        if (streq(inv->gpus[k].uuid, inv->gpus[i].uuid)) {
                                r = mk_error_set_field(e, -EINVAL, f, "uuid: '%s' listed twice", inv->gpus[i].uuid);
                                goto out;
                        }
        }
        *ret = TAKE_PTR(inv);
        r = 0;
out:
        json_decref(root);
        return r;
}

void mk_inventory_from_node(const json_t *node, struct mk_inventory **ret, char *reason, size_t size) {
        const char *v = mk_kube_annotation(node, MK_ANN_INVENTORY);
        *ret = NULL;
        if (!v) {
                snprintf(reason, size, "node has no %s annotation (is 'migkit scheduler node' running there?)",
                         MK_ANN_INVENTORY);
                return;
        }
        struct mk_error e = {0};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
        struct mk_inventory *inv = NULL;
        if (mk_inventory_parse(v, strlen(v), &inv, &e) < 0) {
                snprintf(reason, size, "malformed %s annotation: %s", MK_ANN_INVENTORY,
                         mk_error_format(&e, buf, sizeof(buf)));
                return;
        }
        *ret = inv;
}
