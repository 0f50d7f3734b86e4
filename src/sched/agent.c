/* The node agent of dynamic MIG (agent.h). */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/host.h"
#include "base/hostlock.h"
#include "base/log.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "mig/gpu.h"
#include "nvml/nvml.h"
#include "sched/agent.h"
#include "vgpunode/dirs.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"

struct orphan {
        char gpu[MK_UUID_MAX];
        unsigned gi_id;
        struct mk_placement placement;
        int64_t since;
        bool seen;
};

/* An idle GPU that may change mode, and when it was first seen idle. */
struct idle_gpu {
        char gpu[MK_UUID_MAX];
        int64_t since;
};

/* A pod of this node with a reservation, and what it currently records. */
struct pod_claim {
        struct mk_claim claim;
        char *devices_ann;      /* migkit.io/mig-devices as found, NULL when absent */
        char *handed_ann;       /* migkit.io/mig-handed as found (the device plugin's), NULL when absent */
};

struct agent {
        const struct mk_sched_agent_opts *o;
        struct mk_nvml *nvml;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool dirty;
        struct orphan *orphans;
        size_t n_orphans;
        char *published;        /* the inventory value last published */
        uint64_t published_ms;  /* when (CLOCK_MONOTONIC); 0: never */
        struct idle_gpu *idle;  /* switchable GPUs and since when they are idle */
        size_t n_idle;
        char *switch_fail;      /* the last mode switch failure, said once while it stays */
};

static void report(const struct mk_sched_agent_opts *o, int level, const char *fmt, ...) _printf_(3, 4);
static void report(const struct mk_sched_agent_opts *o, int level, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        log_debug_area("sched", "%s", msg);
        if (o->report)
                o->report(o->userdata, level, msg);
}

static int64_t now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec;
}

static void pod_claims_free(struct pod_claim *p, size_t n) {
        for (size_t i = 0; p && i < n; i++)
                free(p[i].devices_ann), free(p[i].handed_ann);
        free(p);
}

struct list_ctx {
        const struct mk_sched_agent_opts *o;
        const char *node;
        struct pod_claim *claims;
        size_t n, alloc;
};

static int on_pod_item(json_t *item, void *userdata) {
        struct list_ctx *c = userdata;
        struct mk_claim *cl = calloc(1, sizeof(*cl));
        if (!cl)
                return -ENOMEM;
        struct mk_error e = {0};
        char where[128];
        /* A NUL where we read: the pod is malformed, never read truncated. */
        int has = mk_kube_object_has_nul(item, where, sizeof(where))
                          ? mk_error_set(&e, -EBADMSG, "%s holds a NUL byte", where)
                          : mk_claim_from_pod(item, cl, &e);
        if (has < 0) {
                const char *name = mk_kube_meta(item, "name");
                report(c->o, MK_LOG_WARNING, "Pod '%s' on this node has a malformed reservation (%s), ignoring",
                       name ? name : "?",
                            e.msg);
        }
        if (has <= 0 || !streq(cl->node, c->node)) {
                free(cl);
                return 0;
        }
        if (c->n == c->alloc) {
                size_t na = c->alloc ? c->alloc * 2 : 16;
                struct pod_claim *p = realloc(c->claims, na * sizeof(*p));
                if (!p) {
                        free(cl);
                        return -ENOMEM;
                }
                c->claims = p;
                c->alloc = na;
        }
        const char *devs = mk_kube_annotation(item, MK_ANN_DEVICES);
        const char *handed = mk_kube_annotation(item, MK_ANN_HANDED);
        c->claims[c->n] = (struct pod_claim) {.claim = *cl,
                                              .devices_ann = devs ? strdup(devs) : NULL,
                                              .handed_ann = handed ? strdup(handed) : NULL};
        c->n++;
        free(cl);
        return 0;
}

static int list_claims(struct agent *a, struct pod_claim **ret, size_t *ret_n, struct mk_error *e) {
        struct list_ctx c = {.o = a->o, .node = a->o->node};
        *ret = NULL;
        *ret_n = 0;
        if (!a->o->kube)
                return 0;
        char sel[MK_K8S_NAME_MAX + 32];
        snprintf(sel, sizeof(sel), "spec.nodeName=%s", a->o->node);
        struct mk_kube_list_opts lo = {.field_selector = sel};
        int r = mk_kube_list_each(a->o->kube, "/api/v1/pods", &lo, on_pod_item, &c, NULL, e);
        if (r < 0) {
                pod_claims_free(c.claims, c.n);
                return r;
        }
        *ret = c.claims;
        *ret_n = c.n;
        return 0;
}

static const struct mk_gpu *gpu_by_uuid(const struct mk_snapshot *s, const char *uuid) {
        for (size_t i = 0; i < s->n_gpus; i++)
                if (streq(s->gpus[i].uuid, uuid))
                        return &s->gpus[i];
        return NULL;
}

static const struct mk_gi *gi_at(const struct mk_gpu *g, unsigned profile_id, struct mk_placement p) {
        for (size_t i = 0; i < g->n_gis; i++)
                if (g->gis[i].profile_id == profile_id && g->gis[i].placement.start == p.start &&
                    g->gis[i].placement.size == p.size)
                        return &g->gis[i];
        return NULL;
}

static bool reserved(const struct pod_claim *claims, size_t n, const char *gpu, const struct mk_gi *gi) {
        for (size_t c = 0; c < n; c++) {
                if (!claims[c].claim.active)
                        continue;
                for (size_t d = 0; d < claims[c].claim.n_devices; d++) {
                        const struct mk_claim_device *cd = &claims[c].claim.devices[d];
                        if (cd->mode == MK_CLAIM_MIG && streq(cd->gpu, gpu) && cd->profile_id == gi->profile_id &&
                            cd->placement.start == gi->placement.start && cd->placement.size == gi->placement.size)
                                return true;
                }
        }
        return false;
}

/* Whether an active pod holds gi because the device plugin handed it out
 * (migkit.io/mig-handed): while the plugin moves two pods' reservations
 * onto the instances kubelet really gave them (plugin/dynamic/handout.h), one of
 * those instances may be reserved by neither for a moment, but it is in
 * use, so it is never an orphan. */
static bool handed_out(const struct pod_claim *claims, size_t n, const struct mk_gi *gi) {
        for (size_t c = 0; c < n; c++)
                for (size_t k = 0; claims[c].claim.active && claims[c].handed_ann && k < gi->n_cis; k++)
                        if (mk_claim_handed_names(claims[c].handed_ann, gi->cis[k].uuid))
                                return true;
        return false;
}

/* Creates the GI of `d` and one compute instance spanning it; rolls the GI
 * back when the CI cannot be made. */
static int create_instance(struct agent *a, const struct mk_gpu *g, const struct mk_claim_device *d,
                           struct mk_error *e) {
        const struct mk_gi_profile *p = mk_gpu_profile_by_id(g, d->profile_id);
        if (!p)
                return mk_error_set(e, -EINVAL, "GPU %u has no GPU instance profile id %u (%s)", g->index,
                                    d->profile_id, d->profile);
        if (g->mig_current != MK_MIG_ENABLED)
                return mk_error_set(e, -EOPNOTSUPP, "GPU %u has MIG disabled", g->index);
        for (size_t i = 0; i < g->n_gis; i++)
                if (mk_placement_overlaps(g->gis[i].placement, d->placement))
                        return mk_error_set(e, -EBUSY,
                                            "GPU %u: placement %u:%u overlaps GPU instance %u, waiting for it to go",
                                            g->index, d->placement.start, d->placement.size, g->gis[i].id);
        const struct mk_ci_profile *cp = NULL;
        for (size_t i = 0; i < p->n_ci_profiles; i++)
                if (p->ci_profiles[i].slices == p->slices)
                        cp = &p->ci_profiles[i];
        if (!cp)
                return mk_error_set(e, -EINVAL, "profile %s has no full-size compute instance profile", p->name);
        unsigned gi_id, ci_id, ci_profile_id = cp->id;
        int r = mk_nvml_create_gi(a->nvml, g->index, p->id, d->placement, &gi_id, e);
        if (r < 0)
                return r;
        if (!cp->queried)
                r = mk_nvml_ci_profile_id(a->nvml, g->index, gi_id, cp->nvml_enum, &ci_profile_id, e);
        if (r >= 0)
                r = mk_nvml_create_ci(a->nvml, g->index, gi_id, ci_profile_id,
                                      (struct mk_placement) {.start = 0, .size = cp->slices}, &ci_id, e);
        if (r < 0) {
                struct mk_error re = {0};
                if (mk_nvml_destroy_gi(a->nvml, g->index, gi_id, &re) < 0)
                        report(a->o, MK_LOG_WARNING, "GPU %u: cannot roll back GPU instance %u: %s", g->index, gi_id,
                               re.msg);
                return r;
        }
        report(a->o, MK_LOG_INFO, "GPU %u: created %s at %u:%u (GPU instance %u)", g->index, p->name,
               d->placement.start,
                 d->placement.size, gi_id);
        return 0;
}

static int destroy_instance(struct agent *a, const struct mk_gpu *g, const struct mk_gi *gi, struct mk_error *e) {
        for (size_t i = 0; i < gi->n_cis; i++) {
                int r = mk_nvml_destroy_ci(a->nvml, g->index, gi->id, gi->cis[i].id, e);
                if (r < 0)
                        return r;
        }
        int r = mk_nvml_destroy_gi(a->nvml, g->index, gi->id, e);
        if (r >= 0)
                report(a->o, MK_LOG_INFO, "GPU %u: destroyed orphan GPU instance %u at %u:%u", g->index, gi->id,
                       gi->placement.start,
                         gi->placement.size);
        return r;
}

static struct orphan *orphan_find(struct agent *a, const char *gpu, const struct mk_gi *gi) {
        for (size_t i = 0; i < a->n_orphans; i++)
                if (streq(a->orphans[i].gpu, gpu) && a->orphans[i].gi_id == gi->id &&
                    a->orphans[i].placement.start == gi->placement.start &&
                    a->orphans[i].placement.size == gi->placement.size)
                        return &a->orphans[i];
        return NULL;
}

static int orphan_add(struct agent *a, const char *gpu, const struct mk_gi *gi, int64_t now) {
        struct orphan *o = realloc(a->orphans, (a->n_orphans + 1) * sizeof(*o));
        if (!o)
                return -ENOMEM;
        a->orphans = o;
        o = &a->orphans[a->n_orphans++];
        *o = (struct orphan) {.gi_id = gi->id, .placement = gi->placement, .since = now, .seen = true};
        snprintf(o->gpu, sizeof(o->gpu), "%s", gpu);
        return 0;
}

/* Writes migkit.io/mig-devices on pods whose instances all exist. */
static int record_devices(struct agent *a, const struct mk_snapshot *s, struct pod_claim *pc,
                          struct mk_sched_agent_pass *pass) {
        json_t *arr = json_array();
        if (!arr)
                return -ENOMEM;
        for (size_t d = 0; d < pc->claim.n_devices; d++) {
                const struct mk_claim_device *cd = &pc->claim.devices[d];
                const struct mk_gpu *g = gpu_by_uuid(s, cd->gpu);
                if (g && cd->mode == MK_CLAIM_SOFT) {
                        /* A soft slice needs nothing created: the GPU's UUID keeps the array aligned. */
                        json_array_append_new(arr, json_string(g->uuid));
                        continue;
                }
                const struct mk_gi *gi = g ? gi_at(g, cd->profile_id, cd->placement) : NULL;
                if (!gi || gi->n_cis == 0 || !gi->cis[0].uuid[0]) {
                        json_decref(arr);
                        return 0; /* not all there yet */
                }
                json_array_append_new(arr, json_string(gi->cis[0].uuid));
        }
        _cleanup_free_ char *v = json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
        if (!v)
                return -ENOMEM;
        if (pc->devices_ann && streq(pc->devices_ann, v))
                return 0;
        char path[MK_K8S_PATH_MAX];
        struct mk_error e = {0};
        int r = mk_kube_core_path(pc->claim.namespace, "pods", pc->claim.name, path, sizeof(path));
        if (r < 0)
                return r; /* cannot happen: claim names are bounded */
        json_t *ch = json_pack("{s:s}", MK_ANN_DEVICES, v);
        r = ch ? mk_kube_patch_metadata(a->o->kube, path, "annotations", ch, NULL, &e) : -ENOMEM;
        json_decref(ch);
        if (r < 0) {
                report(a->o, MK_LOG_WARNING, "Cannot record the MIG devices of pod %s/%s: %s", pc->claim.namespace,
                       pc->claim.name,
                            e.msg);
                pass->failed++;
                return 0;
        }
        report(a->o, MK_LOG_INFO, "Pod %s/%s: MIG devices %s", pc->claim.namespace, pc->claim.name, v);
        pass->pods_patched++;
        return 0;
}

static int inventory_of(struct agent *a, const struct mk_snapshot *s, const struct pod_claim *pcs, size_t n,
                        struct mk_inventory **ret, struct mk_error *e) {
        struct mk_claim *claims = calloc(n + 1, sizeof(*claims));
        if (!claims)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                claims[i] = pcs[i].claim;
        int r = mk_inventory_from_snapshot(s, a->o->cfg, a->o->node, claims, n, ret, e);
        free(claims);
        return r;
}

/* The hysteresis of the idle mode switch: a GPU is listed switchable only
 * once it has been idle for the grace period (a GPU just freed keeps its
 * mode for pods of that mode; a restart starts the wait again). */
static int hold_idle(struct agent *a, struct mk_inventory *inv, int64_t now, struct mk_sched_agent_pass *pass) {
        struct idle_gpu *keep = calloc(inv->n_gpus + 1, sizeof(*keep));
        if (!keep)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < inv->n_gpus; i++) {
                const struct mk_inv_gpu *g = &inv->gpus[i];
                if (!g->switchable)
                        continue;
                int64_t since = now;
                for (size_t j = 0; j < a->n_idle; j++)
                        if (streq(a->idle[j].gpu, g->uuid))
                                since = a->idle[j].since;
                keep[k] = (struct idle_gpu) {.since = since};
                snprintf(keep[k++].gpu, sizeof(keep->gpu), "%s", g->uuid);
                if (now - since < (int64_t) a->o->grace_s) {
                        mk_inventory_hold_mode(inv, i);
                        pass->switch_held++;
                }
        }
        free(a->idle);
        a->idle = keep;
        a->n_idle = k;
        return 0;
}

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static int publish(struct agent *a, const struct mk_snapshot *s, const struct pod_claim *pcs, size_t n,
                   struct mk_sched_agent_pass *pass, struct mk_error *e) {
        struct mk_inventory *inv = NULL;
        int r = inventory_of(a, s, pcs, n, &inv, e);
        if (r >= 0 && (r = hold_idle(a, inv, now_s(), pass)) < 0)
                mk_inventory_free(inv);
        if (r < 0)
                return r;
        char *v = NULL;
        r = mk_inventory_format(inv, &v, e);
        pass->inventory_gpus = (unsigned) inv->n_gpus;
        for (size_t i = 0; i < inv->n_gpus; i++)
                pass->inventory_instances += (unsigned) inv->gpus[i].n_instances;
        mk_inventory_free(inv);
        if (r < 0)
                return r;
        pass->inventory_bytes = strlen(v);
        if (a->published && streq(a->published, v)) {
                free(v);
                return 0;
        }
        /* At most one inventory write a node per MK_AGENT_PUBLISH_MIN_MS,
         * whatever the churn: a change within it is written by the pass the
         * interval ends in (the loop wakes each second while one waits).
         * Reservations cover the lag: the extender counts them whatever the
         * inventory says. */
        uint64_t now = mono_ms();
        if (a->o->kube && a->published_ms && now - a->published_ms < MK_AGENT_PUBLISH_MIN_MS) {
                pass->publish_deferred = true;
                free(v);
                return 0;
        }
        if (a->o->kube) {
                char path[MK_K8S_PATH_MAX];
                json_t *ch = NULL;
                if (mk_kube_core_path(NULL, "nodes", a->o->node, path, sizeof(path)) < 0)
                        r = mk_error_set(e, -EINVAL, "node name too long or empty");
                else if (!(ch = json_pack("{s:s}", MK_ANN_INVENTORY, v)))
                        r = -ENOMEM;
                else
                        r = mk_kube_patch_metadata(a->o->kube, path, "annotations", ch, NULL, e);
                json_decref(ch);
                if (r < 0) {
                        free(v);
                        return r;
                }
        }
        free(a->published);
        a->published = v;
        a->published_ms = now;
        pass->inventory_published = true;
        return 0;
}

#define VGPU_DIR_MIN_AGE_S 60  /* an Allocate may be ahead of the pod list this pass read */

/* Soft slices: the per-container directories of pods no longer listed on
 * this node go (pcs is the complete list: a failed LIST never gets here). */
static void prune_vgpu(struct agent *a, const struct pod_claim *pcs, size_t n, int64_t now) {
        const char **live = calloc(n ? n : 1, sizeof(*live));
        if (!live)
                return;
        for (size_t i = 0; i < n; i++)
                live[i] = pcs[i].claim.uid;
        struct mk_error pe = {0};
        unsigned failed = 0;
        int r = mk_vgpu_prune(a->o->vgpu_root ? a->o->vgpu_root : MK_VGPU_DEFAULT_ROOT, live, n, now,
                              VGPU_DIR_MIN_AGE_S, &failed, &pe);
        free(live);
        if (r < 0)
                report(a->o, MK_LOG_WARNING, "Soft slice directories: %s", pe.msg);
        else if (r > 0)
                report(a->o, MK_LOG_INFO, "Removed the soft slice directories of %d container(s) of gone pods", r);
        if (failed)
                report(a->o, MK_LOG_WARNING, "%u soft slice director(ies) of gone pods could not be removed", failed);
}

/* Changes GPU g's MIG mode; a change that waits for a reset gets one
 * (the agent's NVML session closed meanwhile). */
static int set_mig_mode(struct agent *a, const struct mk_gpu *g, bool enable, struct mk_error *e) {
        bool pending = false;
        int r = mk_nvml_set_mig_mode(a->nvml, g->index, enable, &pending, e);
        if (r < 0 || !pending)
                return r;
        if (!a->o->reset_gpu)
                return mk_error_set(e, -EOPNOTSUPP, "GPU %u: the MIG mode change needs a GPU reset", g->index);
        _cleanup_free_ char *lib = strdup(mk_nvml_path(a->nvml));
        if (!lib)
                return -ENOMEM;
        char bus_id[sizeof(g->bus_id)];
        snprintf(bus_id, sizeof(bus_id), "%s", g->bus_id);
        a->nvml = mk_nvml_close(a->nvml);
        r = a->o->reset_gpu(a->o->userdata, bus_id, e);
        struct mk_error oe = {0};
        int q = mk_nvml_open(lib, &a->nvml, &oe);
        if (q < 0) {
                if (r >= 0 && e)
                        *e = oe;
                return r < 0 ? r : q;
        }
        return r;
}

/* The idle mode switch: a GPU that may switch (mixed node, modeswitch:
 * idle, no gpus entry) whose reservations all ask the mode it is not in
 * and that has no GPU instance (the inventory's rule) gets that mode. A
 * GPU anything else holds is never touched: the reservation waits. */
static int switch_modes(struct agent *a, const struct pod_claim *pcs, size_t n, struct mk_snapshot **sp,
                        struct mk_sched_agent_pass *pass, struct mk_error *e) {
        _cleanup_(mk_inventory_freep) struct mk_inventory *inv = NULL;
        int r = inventory_of(a, *sp, pcs, n, &inv, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < inv->n_gpus; i++) {
                const struct mk_inv_gpu *ig = &inv->gpus[i];
                const struct mk_gpu *g = gpu_by_uuid(*sp, ig->uuid);
                bool want_mig = ig->mode == MK_CLAIM_MIG;
                if (!g || !g->mig_capable || want_mig == (g->mig_current == MK_MIG_ENABLED) ||
                    !mk_sched_config_may_switch(a->o->cfg, a->o->node, g->index))
                        continue;
                if (g->n_gis > 0) /* the inventory's rule already; never with an instance on it */
                        continue;
                struct mk_error se = {0};
                unsigned index = g->index;
                if (set_mig_mode(a, g, want_mig, &se) < 0) {
                        /* Tried again every pass: warned once, and again when it changes. */
                        char line[sizeof(se.msg) + 64];
                        snprintf(line, sizeof(line), "GPU %u: cannot turn MIG %s for a waiting pod: %s", index,
                                 want_mig ? "on" : "off", se.msg);
                        if (!a->switch_fail || strcmp(a->switch_fail, line) != 0) {
                                report(a->o, MK_LOG_WARNING, "%s (retried every pass, not said again)", line);
                                free(a->switch_fail);
                                a->switch_fail = strdup(line);
                        }
                        pass->failed++;
                } else {
                        free(a->switch_fail);
                        a->switch_fail = NULL;
                        report(a->o, MK_LOG_INFO, "GPU %u: idle, turned MIG %s for a waiting pod", index,
                               want_mig ? "on" : "off");
                        pass->switched++;
                }
                if (!a->nvml)
                        return mk_error_set(e, -EIO, "NVML could not be reopened after a GPU reset");
                /* The snapshot may be stale (a reset reopens NVML): read it again. */
                mk_snapshot_free(*sp);
                *sp = NULL;
                if ((r = mk_nvml_snapshot(a->nvml, sp, e)) < 0)
                        return r;
                break; /* the inventory was of the old snapshot: the next pass sees the rest */
        }
        return 0;
}

/* Creates the reserved MIG instances that are missing; *sp is re-read
 * after each creation (later ones must see it). */
static int create_reserved(struct agent *a, const struct pod_claim *pcs, size_t n, struct mk_snapshot **sp,
                           struct mk_sched_agent_pass *pass, bool *changed, struct mk_error *e) {
        for (size_t c = 0; c < n; c++) {
                if (!pcs[c].claim.active)
                        continue;
                for (size_t d = 0; d < pcs[c].claim.n_devices; d++) {
                        const struct mk_claim_device *cd = &pcs[c].claim.devices[d];
                        const struct mk_gpu *g = gpu_by_uuid(*sp, cd->gpu);
                        struct mk_error ce = {0};
                        if (!g) {
                                report(a->o, MK_LOG_WARNING,
                                       "Pod %s/%s reserves GPU '%s', which this node does not have",
                                       pcs[c].claim.namespace, pcs[c].claim.name, cd->gpu);
                                pass->failed++;
                                continue;
                        }
                        if (cd->mode == MK_CLAIM_SOFT || gi_at(g, cd->profile_id, cd->placement))
                                continue;
                        if (create_instance(a, g, cd, &ce) < 0) {
                                report(a->o, MK_LOG_WARNING, "Pod %s/%s: cannot create %s at %u:%u on GPU %u: %s",
                                       pcs[c].claim.namespace, pcs[c].claim.name, cd->profile,
                                       cd->placement.start, cd->placement.size, g->index, ce.msg);
                                pass->failed++;
                                continue;
                        }
                        pass->created++;
                        *changed = true;
                        mk_snapshot_free(*sp);
                        *sp = NULL;
                        int r = mk_nvml_snapshot(a->nvml, sp, e);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* Destroys the GPU instances no reservation holds once they have been
 * orphans for the grace period; forgets orphans no longer seen. */
static int destroy_orphans(struct agent *a, const struct mk_snapshot *s, const struct pod_claim *pcs, size_t n,
                           struct mk_sched_agent_pass *pass, bool *changed) {
        int64_t now = now_s();
        for (size_t i = 0; i < a->n_orphans; i++)
                a->orphans[i].seen = false;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                for (size_t k = 0; k < g->n_gis; k++) {
                        const struct mk_gi *gi = &g->gis[k];
                        if (reserved(pcs, n, g->uuid, gi) || handed_out(pcs, n, gi))
                                continue;
                        struct orphan *o = orphan_find(a, g->uuid, gi);
                        if (!o) {
                                int r = orphan_add(a, g->uuid, gi, now);
                                if (r < 0)
                                        return r;
                                o = &a->orphans[a->n_orphans - 1];
                        }
                        o->seen = true;
                        if (now - o->since < (int64_t) a->o->grace_s) {
                                pass->orphans_waiting++;
                                continue;
                        }
                        struct mk_error de = {0};
                        if (destroy_instance(a, g, gi, &de) < 0) {
                                report(a->o, MK_LOG_WARNING, "GPU %u: cannot destroy orphan GPU instance %u: %s",
                                       g->index, gi->id, de.msg);
                                pass->failed++;
                                continue;
                        }
                        o->seen = false;
                        pass->destroyed++;
                        *changed = true;
                }
        }
        size_t k = 0;
        for (size_t i = 0; i < a->n_orphans; i++)
                if (a->orphans[i].seen)
                        a->orphans[k++] = a->orphans[i];
        a->n_orphans = k;
        return 0;
}

static void lock_waiting(void *userdata, const char *what) {
        report(userdata, MK_LOG_INFO, "Waiting for %s", what);
}

static int take_host_lock(struct agent *a, int *ret_fd, struct mk_error *e) {
        struct mk_host host = {0};
        if (mk_host_init_from_env(&host) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        struct mk_host_lock_opts lo = {.who = "the scheduler's node agent", .cancel = a->o->cancel,
                                       .waiting = lock_waiting, .userdata = (void *) a->o};
        int r = mk_host_lock_take(&host, &lo, ret_fd, e);
        mk_host_done(&host);
        return r;
}

static int pass_run(struct agent *a, struct mk_sched_agent_pass *pass, struct mk_error *e) {
        *pass = (struct mk_sched_agent_pass) {0};
        struct pod_claim *pcs = NULL;
        size_t n = 0;
        int r = list_claims(a, &pcs, &n, e);
        if (r < 0)
                return r;
        if (a->o->kube)
                prune_vgpu(a, pcs, n, now_s());
        struct mk_snapshot *s = NULL;
        bool changed = false;
        /* The host lock from the GPUs' read to the last change (base/hostlock.h). */
        int lock_fd = -1;
        if ((r = take_host_lock(a, &lock_fd, e)) < 0)
                goto out;
        if ((r = mk_nvml_snapshot(a->nvml, &s, e)) < 0 || (r = switch_modes(a, pcs, n, &s, pass, e)) < 0 ||
            (r = create_reserved(a, pcs, n, &s, pass, &changed, e)) < 0)
                goto out;
        if ((r = destroy_orphans(a, s, pcs, n, pass, &changed)) < 0)
                goto out;
        if (changed) {
                mk_snapshot_free(s);
                s = NULL;
                if ((r = mk_nvml_snapshot(a->nvml, &s, e)) < 0)
                        goto out;
        }
        mk_host_lock_release(&lock_fd);
        for (size_t c = 0; a->o->kube && c < n; c++)
                if (pcs[c].claim.active && (r = record_devices(a, s, &pcs[c], pass)) < 0)
                        goto out;
        r = publish(a, s, pcs, n, pass, e);
out:
        mk_host_lock_release(&lock_fd);
        mk_snapshot_free(s);
        pod_claims_free(pcs, n);
        return r;
}

static int on_pod_event(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata) {
        (void) type;
        (void) object;
        (void) old;
        struct agent *a = userdata;
        pthread_mutex_lock(&a->lock);
        a->dirty = true;
        pthread_cond_signal(&a->cond);
        pthread_mutex_unlock(&a->lock);
        return 0;
}

static void *informer_main(void *p) {
        struct agent *a = p;
        char sel[MK_K8S_NAME_MAX + 32];
        snprintf(sel, sizeof(sel), "spec.nodeName=%s", a->o->node);
        struct mk_kube_informer_opts io = {.field_selector = sel, .cancel = a->o->cancel};
        struct mk_error e = {0};
        int r = mk_kube_informer_run(a->o->kube, "/api/v1/pods", &io, on_pod_event, a, &e);
        if (r < 0 && r != -ECANCELED)
                report(a->o, MK_LOG_ERROR, "Pod informer of node '%s' ended: %s", a->o->node, e.msg);
        return NULL;
}

static int agent_open(struct agent *a, const struct mk_sched_agent_opts *o, struct mk_error *e) {
        *a = (struct agent) {.o = o};
        pthread_mutex_init(&a->lock, NULL);
        pthread_cond_init(&a->cond, NULL);
        return mk_nvml_open(o->nvml_lib, &a->nvml, e);
}

static void agent_close(struct agent *a) {
        a->nvml = mk_nvml_close(a->nvml);
        free(a->orphans);
        free(a->idle);
        free(a->published);
        free(a->switch_fail);
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->cond);
}

int mk_sched_agent_run(const struct mk_sched_agent_opts *o, struct mk_sched_agent_pass *ret_last,
                       struct mk_error *e) {
        struct agent a;
        int r = agent_open(&a, o, e);
        if (r < 0) {
                agent_close(&a);
                return r;
        }
        struct mk_sched_agent_pass pass = {0};
        r = pass_run(&a, &pass, e);
        if (r < 0 || o->once) {
                if (ret_last)
                        *ret_last = pass;
                agent_close(&a);
                return r;
        }
        pthread_t th;
        bool started = o->kube && pthread_create(&th, NULL, informer_main, &a) == 0;
        unsigned resync = o->resync_s ? o->resync_s : MK_AGENT_DEFAULT_RESYNC_S;
        unsigned failures = 0;
        int told = -1;          /* what the last "Waiting for" line said, so it is said once per wait */
        while (!(o->cancel && atomic_load(o->cancel))) {
                /* Wake on a pod change, every second while orphans wait, else at resync. */
                unsigned wait_s = pass.orphans_waiting || pass.switch_held || pass.switched || pass.failed || failures ||
                                                  pass.publish_deferred
                                          ? 1
                                          : resync;
                int why = pass.orphans_waiting ? 0 : pass.failed || failures ? 1 : pass.switch_held ? 3 : 2;
                if (why != told) {
                        if (why == 0)
                                report(o, MK_LOG_INFO, "Waiting for %u orphan instance(s) to pass their grace period",
                                       pass.orphans_waiting);
                        else if (why == 1)
                                report(o, MK_LOG_INFO, "Waiting 1 s to retry what failed");
                        else if (why == 3)
                                report(o, MK_LOG_INFO,
                                       "Waiting for %u idle GPU(s) to pass their grace period before they may switch mode",
                                       pass.switch_held);
                        else
                                report(o, MK_LOG_INFO, "Waiting for pod changes on node '%s' (a full pass every %u s)",
                                       o->node, resync);
                        told = why;
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                int64_t deadline = ts.tv_sec + wait_s;
                pthread_mutex_lock(&a.lock);
                while (!a.dirty && !(o->cancel && atomic_load(o->cancel))) {
                        clock_gettime(CLOCK_REALTIME, &ts);
                        if (ts.tv_sec >= deadline)
                                break;
                        struct timespec until = {.tv_sec = ts.tv_sec + 1, .tv_nsec = ts.tv_nsec};
                        pthread_cond_timedwait(&a.cond, &a.lock, &until);
                }
                a.dirty = false;
                pthread_mutex_unlock(&a.lock);
                if (o->cancel && atomic_load(o->cancel))
                        break;
                struct mk_error pe = {0};
                r = pass_run(&a, &pass, &pe);
                if (r < 0) {
                        failures++;
                        report(o, MK_LOG_WARNING, "Pass failed, retrying: %s", pe.msg);
                } else
                        failures = 0;
        }
        if (started)
                pthread_join(th, NULL);
        if (ret_last)
                *ret_last = pass;
        agent_close(&a);
        return -ECANCELED;
}

int mk_sched_agent_inventory(const struct mk_sched_agent_opts *o, struct mk_inventory **ret, struct mk_error *e) {
        struct agent a;
        int r = agent_open(&a, o, e);
        struct pod_claim *pcs = NULL;
        size_t n = 0;
        struct mk_snapshot *s = NULL;
        struct mk_claim *claims = NULL;
        if (r >= 0)
                r = list_claims(&a, &pcs, &n, e);
        if (r >= 0)
                r = mk_nvml_snapshot(a.nvml, &s, e);
        if (r >= 0 && !(claims = calloc(n + 1, sizeof(*claims))))
                r = -ENOMEM;
        for (size_t i = 0; r >= 0 && i < n; i++)
                claims[i] = pcs[i].claim;
        if (r >= 0)
                r = mk_inventory_from_snapshot(s, o->cfg, o->node, claims, n, ret, e);
        free(claims);
        mk_snapshot_free(s);
        pod_claims_free(pcs, n);
        agent_close(&a);
        return r;
}
