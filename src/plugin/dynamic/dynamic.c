/* The device plugin's dynamic MIG mode (dynamic.h, docs/device-plugin.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/error.h"
#include "base/log.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "plugin/allocate.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/resources.h"
#include "plugin/dynamic/soft.h"

#define AREA "plugin"

static int cmp_by_id(const void *a, const void *b, void *arg) {
        const struct mk_dp_device *d = arg;
        return strcmp(d[*(const size_t *) a].id, d[*(const size_t *) b].id);
}

/* The largest instance count among the GPU's GI profiles: how many pods
 * can at most hold an instance of it at once. */
static unsigned max_instances(const struct mk_gpu *g) {
        unsigned n = 0;
        for (size_t i = 0; i < g->n_profiles; i++)
                n = MAX(n, g->profiles[i].max_count);
        return n;
}

/* Ids of GPU g: MIG on, the most instances of a profile; MIG off, the
 * sharers of a soft-sliced GPU. */
static unsigned gpu_ids(const struct mk_gpu *g, unsigned split) {
        return g->mig_current == MK_MIG_ENABLED ? max_instances(g) : split;
}

int mk_dp_dynamic_resources_build(const struct mk_snapshot *s, unsigned split, struct mk_dp_resources **ret,
                                  struct mk_error *e) {
        if (split == 0)
                split = MK_DP_DEFAULT_SPLIT;
        if (split > MK_DP_MAX_SPLIT)
                return mk_error_set(e, -EINVAL, "device split count %u, at most %u", split, MK_DP_MAX_SPLIT);
        size_t n = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                n += gpu_ids(&s->gpus[i], split);
        if (n > MK_DP_MAX_DEVICES)
                return mk_error_set(e, -E2BIG, "%zu dynamic devices, at most %u", n, MK_DP_MAX_DEVICES);
        struct mk_dp_resources *rs = calloc(1, sizeof(*rs));
        if (!rs)
                return mk_error_set(e, -ENOMEM, "out of memory");
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *out = rs;
        if (n == 0) {
                *ret = TAKE_PTR(out);
                return 0;
        }
        rs->r = calloc(1, sizeof(*rs->r));
        if (!rs->r)
                return mk_error_set(e, -ENOMEM, "out of memory");
        rs->n = 1;
        struct mk_dp_resource *r = &rs->r[0];
        snprintf(r->name, sizeof(r->name), "%s", MK_DP_DYNAMIC_RESOURCE);
        snprintf(r->endpoint, sizeof(r->endpoint), "%s", MK_DP_DYNAMIC_ENDPOINT);
        r->devices = calloc(n, sizeof(*r->devices));
        r->by_id = calloc(n, sizeof(*r->by_id));
        if (!r->devices || !r->by_id)
                return mk_error_set(e, -ENOMEM, "out of memory");
        unsigned most = 0;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                unsigned k = gpu_ids(g, split);
                most = MAX(most, k);
                for (unsigned j = 0; j < k; j++) {
                        struct mk_dp_device *d = &r->devices[r->n_devices++];
                        int a = snprintf(d->id, sizeof(d->id), MK_DP_DYNAMIC_ID_PREFIX "%s::%u", g->uuid, j);
                        int b = snprintf(d->base_id, sizeof(d->base_id), MK_DP_DYNAMIC_ID_PREFIX "%s", g->uuid);
                        if (a < 0 || b < 0 || (size_t) a >= sizeof(d->id) || (size_t) b >= sizeof(d->base_id))
                                return mk_error_set(e, -EINVAL, "GPU %u: UUID '%.96s' too long for a device id",
                                                    g->index, g->uuid);
                        snprintf(d->index, sizeof(d->index), "%u", g->index);
                        snprintf(d->gpu_uuid, sizeof(d->gpu_uuid), "%s", g->uuid);
                        d->gpu = (unsigned) i;
                        d->minor = g->minor;
                        d->gi_cap = d->ci_cap = -1;
                        d->replica = j;
                        d->healthy = true;
                        d->numa_node = -1;
                        d->memory_bytes = g->memory_total_bytes;
                }
        }
        for (size_t i = 0; i < r->n_devices; i++)
                r->by_id[i] = i;
        qsort_r(r->by_id, r->n_devices, sizeof(*r->by_id), cmp_by_id, r->devices);
        r->replicas = most;
        r->shared = true;
        *ret = TAKE_PTR(out);
        return 0;
}

int mk_dp_dynamic_pick(const json_t *list, const char *node, const unsigned *counts, size_t n_counts,
                       struct mk_claim *ret_claim, const json_t **ret_pod, struct mk_error *e) {
        const json_t *items = json_object_get(list, "items");
        if (!json_is_array(items))
                return mk_error_set(e, -EINVAL, "pod list: no items");
        size_t n = json_array_size(items);
        if (n > MK_DP_DYNAMIC_MAX_PODS)
                return mk_error_set(e, -E2BIG, "%zu pods on node '%s', at most %u looked at", n, node,
                                    MK_DP_DYNAMIC_MAX_PODS);
        _cleanup_free_ struct mk_claim *claims = calloc(n ? n : 1, sizeof(*claims));
        _cleanup_free_ const json_t **pods = calloc(n ? n : 1, sizeof(*pods));
        if (!claims || !pods)
                return mk_error_set(e, -ENOMEM, "out of memory");
        size_t m = 0, waiting = 0, allocated = 0, malformed = 0;
        for (size_t i = 0; i < n; i++) {
                const json_t *pod = json_array_get(items, i);
                struct mk_error pe = {0};
                int r = mk_claim_from_pod(pod, &claims[m], &pe);
                if (r < 0) {
                        malformed++;
                        log_debug_area_errno(AREA, r, "Pod %zu of node '%s': %s, ignoring", i, node, pe.msg);
                        continue;
                }
                if (r == 0)
                        continue;
                if (claims[m].allocated)
                        allocated++;
                else if (!mk_claim_ready(&claims[m]))
                        waiting++;
                pods[m++] = pod;
        }
        int k = mk_claim_match_allocate(claims, m, node, counts, n_counts);
        if (k < 0)
                return mk_error_set(e, -ENOENT,
                                    "no reservation on node '%s' is ready for this request (%zu container(s)): "
                                    "%zu pod(s) with reservations, %zu waiting for their instances, %zu already "
                                    "allocated, %zu malformed",
                                    node, n_counts, m, waiting, allocated, malformed);
        *ret_claim = claims[k];
        *ret_pod = pods[k];
        return 0;
}

/* The device of `rs` whose MIG UUID is `uuid` (mig) or the whole GPU whose
 * UUID it is (a soft slice), or NULL. */
static const struct mk_dp_device *find_device(const struct mk_dp_resources *rs, const char *uuid, bool mig) {
        for (size_t i = 0; i < rs->n; i++)
                for (size_t j = 0; j < rs->r[i].n_devices; j++) {
                        const struct mk_dp_device *d = &rs->r[i].devices[j];
                        if (mig ? d->mig && streq(d->mig_uuid, uuid) : !d->mig && streq(d->gpu_uuid, uuid))
                                return d;
                }
        return NULL;
}

/* The answer for container `ctr` of c, whose devices are c->devices[from..to). */
static int container_response(const struct mk_snapshot *s, const struct mk_dp_resources *rs,
                              const struct mk_claim *c, size_t from, size_t to, const json_t *pod,
                              const struct mk_dp_options *o, const struct mk_dp_soft_options *so,
                              struct mk_dp_response *ret, struct mk_error *e) {
        const struct mk_dp_device *devs[MK_MAX_CLAIM_DEVICES];
        unsigned ctr = c->devices[from].container;
        bool soft = c->devices[from].mode == MK_CLAIM_SOFT;
        size_t nd = 0;
        struct mk_vgpu_slice sl[MK_VGPU_MAX_DEVICES];
        if (soft) {
                nd = mk_dp_soft_slices(c, ctr, s, sl);
                if (nd != to - from)
                        return mk_error_set(e, -EINVAL, "pod %s/%s: container %u mixes MIG devices and soft slices",
                                            c->namespace, c->name, ctr);
        }
        for (size_t i = 0; i < to - from; i++) {
                const struct mk_claim_device *cd = &c->devices[from + i];
                const char *uuid = soft ? sl[i].gpu_uuid : cd->mig_uuid;
                devs[i] = find_device(rs, uuid, !soft);
                if (!devs[i])
                        return soft ? mk_error_set(e, -ENOENT,
                                                   "pod %s/%s: GPU '%s' of a soft slice not found with MIG off",
                                                   c->namespace, c->name, uuid)
                                    : mk_error_set(e, -ENOENT, "pod %s/%s: MIG device '%s' (GPU '%s', %s) not found",
                                                   c->namespace, c->name, uuid, cd->gpu, cd->profile);
        }
        nd = to - from;
        _cleanup_(mk_dp_response_done) struct mk_dp_response res = {0};
        int r = mk_dp_allocate_devices(devs, nd, MK_DP_DYNAMIC_RESOURCE, o, &res, e);
        if (r < 0 || !soft) {
                if (r >= 0) {
                        *ret = res;
                        res = (struct mk_dp_response) {0};
                }
                return r;
        }
        _cleanup_free_ char *dir = NULL;
        r = mk_vgpu_container_dir(mk_dp_soft_root(so), c->uid, ctr, &dir);
        if (r < 0)
                return mk_error_set(e, r, "pod %s/%s: uid '%s' cannot name a directory", c->namespace, c->name, c->uid);
        r = mk_dp_soft_response(sl, nd, dir, mk_dp_soft_control_disabled(pod, ctr), so, &res, e);
        if (r < 0)
                return r;
        *ret = res;
        res = (struct mk_dp_response) {0};
        return 0;
}

int mk_dp_dynamic_responses(const struct mk_snapshot *s, const struct mk_claim *c, const unsigned *counts,
                            size_t n_counts, const json_t *pod, const struct mk_dp_options *o,
                            const struct mk_dp_soft_options *so, struct mk_dp_response *ret, struct mk_error *e) {
        /* The devices as the mixed strategy sees them: MIG devices with their
         * UUIDs, GI/CI ids, minors and access capabilities for device specs;
         * whole GPUs (MIG off) for soft slices. */
        struct mk_dp_options mo = *o;
        mo.mig_strategy = MK_MIG_STRATEGY_MIXED;
        mo.config = NULL;
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        int r = mk_dp_resources_build(s, &mo, &rs, e);
        if (r < 0) {
                mk_error_prefix(e, "Cannot read the GPUs");
                return r;
        }
        _cleanup_free_ struct mk_dp_response *out = calloc(n_counts ? n_counts : 1, sizeof(*out));
        if (!out)
                return mk_error_set(e, -ENOMEM, "out of memory");
        size_t i = 0, k = 0;
        r = 0;
        while (r >= 0 && i < c->n_devices) {
                size_t from = i;
                unsigned ctr = c->devices[i].container;
                while (i < c->n_devices && c->devices[i].container == ctr && i - from < MK_MAX_CLAIM_DEVICES)
                        i++;
                if (k >= n_counts || counts[k] != i - from) {
                        r = mk_error_set(e, -EINVAL,
                                         "pod %s/%s: the reservation's containers do not match the request",
                                         c->namespace, c->name);
                        break;
                }
                r = container_response(s, rs, c, from, i, pod, o, so, &out[k], e);
                if (r >= 0)
                        k++;
        }
        if (r >= 0 && k != n_counts)
                r = mk_error_set(e, -EINVAL, "pod %s/%s: the reservation's containers do not match the request",
                                 c->namespace, c->name);
        if (r < 0) {
                for (size_t j = 0; j < k; j++)
                        mk_dp_response_done(&out[j]);
                return r;
        }
        memcpy(ret, out, n_counts * sizeof(*out));
        return 0;
}

int mk_dp_dynamic_allocated_patch(const json_t *pod, int64_t when, json_t **ret) {
        const char *uid = mk_kube_meta(pod, "uid"), *rv = mk_kube_meta(pod, "resourceVersion");
        if (!uid || !*uid || !rv || !*rv)
                return -EINVAL;
        time_t t = (time_t) when;
        struct tm tm;
        char stamp[64];
        if (!gmtime_r(&t, &tm) || strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                return -EINVAL;
        json_t *p = json_pack("{s:{s:s,s:s,s:{s:s}}}", "metadata", "uid", uid, "resourceVersion", rv, "annotations",
                              MK_ANN_ALLOCATED, stamp);
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

int mk_dp_dynamic_allocate(struct mk_kube *k, const char *node, const unsigned *counts, size_t n_counts,
                           const struct mk_dp_options *o, const struct mk_dp_soft_options *so,
                           mk_dp_snapshot_fn snapshot, void *userdata, struct mk_dp_response *ret,
                           struct mk_claim *ret_claim, struct mk_error *e) {
        _cleanup_free_ char *selector = NULL;
        if (asprintf(&selector, "spec.nodeName=%s", node) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        const struct mk_kube_list_opts lo = {.field_selector = selector};
        _cleanup_free_ struct mk_claim *c = calloc(1, sizeof(*c));
        _cleanup_free_ struct mk_dp_response *out = calloc(n_counts ? n_counts : 1, sizeof(*out));
        if (!c || !out)
                return mk_error_set(e, -ENOMEM, "out of memory");
        int r = -EBUSY;
        for (unsigned attempt = 0; attempt < MK_DP_DYNAMIC_ATTEMPTS; attempt++) {
                _cleanup_(json_decrefp) json_t *list = NULL, *patch = NULL;
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
                const json_t *pod = NULL;
                r = mk_kube_list(k, "/api/v1/pods", &lo, &list, e);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot list the pods of node '%s'", node);
                        return r;
                }
                r = mk_dp_dynamic_pick(list, node, counts, n_counts, c, &pod, e);
                if (r < 0)
                        return r;
                r = snapshot(userdata, &s, e);
                if (r < 0) {
                        mk_error_prefix(e, "NVML");
                        return r;
                }
                r = mk_dp_dynamic_responses(s, c, counts, n_counts, pod, o, so, out, e);
                if (r < 0)
                        return r;
                r = mk_dp_soft_prepare(c, pod, s, so, e);
                if (r < 0) {
                        for (size_t i = 0; i < n_counts; i++)
                                mk_dp_response_done(&out[i]);
                        return r;
                }
                r = mk_dp_dynamic_allocated_patch(pod, (int64_t) time(NULL), &patch);
                if (r < 0) {
                        for (size_t i = 0; i < n_counts; i++)
                                mk_dp_response_done(&out[i]);
                        return mk_error_set(e, r, "pod %s/%s: cannot build the %s patch", c->namespace, c->name,
                                            MK_ANN_ALLOCATED);
                }
                char path[MK_K8S_PATH_MAX];
                if (mk_kube_core_path(c->namespace, "pods", c->name, path, sizeof(path)) < 0)
                        r = mk_error_set(e, -EINVAL, "pod %s/%s: not a valid name", c->namespace, c->name);
                else
                        r = mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, patch, NULL, e);
                if (r >= 0) {
                        memcpy(ret, out, n_counts * sizeof(*out));
                        if (ret_claim)
                                *ret_claim = *c;
                        return 0;
                }
                for (size_t i = 0; i < n_counts; i++)
                        mk_dp_response_done(&out[i]);
                if (r != -EBUSY) {
                        mk_error_prefix(e, "Cannot mark pod %s/%s allocated", c->namespace, c->name);
                        return r;
                }
                log_debug_area(AREA, "Pod %s/%s changed since listed (409), matching again", c->namespace, c->name);
        }
        return mk_error_set(e, r, "the pods of node '%s' kept changing; gave up after %d attempts", node,
                            MK_DP_DYNAMIC_ATTEMPTS);
}
