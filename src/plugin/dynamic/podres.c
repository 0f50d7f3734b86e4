/* kubelet's PodResources API v1 List (podres.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"
#include "grpc/client.h"
#include "plugin/dynamic/handout.h"
#include "plugin/dynamic/podres.h"
#include "plugin/pb-scan.h"
#include "proto/podresources.pb-c.h"

void mk_dp_held_free(struct mk_dp_held *held, size_t n) {
        for (size_t i = 0; held && i < n; i++) {
                free((char *) held[i].namespace);
                free((char *) held[i].name);
                for (size_t k = 0; k < held[i].n_keys; k++)
                        free(held[i].keys[k]);
                free(held[i].keys);
        }
        free(held);
}

/* The ids of `resource` container cr holds, each once, into ids[MK_MAX_CLAIM_DEVICES]:
 * kubelet 1.21+ sends one device entry per id and NUMA node (an id twice for
 * a device on two nodes), kubelet 1.20 one entry per resource with all its
 * ids. False past MK_MAX_CLAIM_DEVICES ids (no Allocate of ours answered it). */
static bool container_ids(const V1__ContainerResources *cr, const char *resource, const char **ids, size_t *ret_n) {
        size_t n = 0;
        for (size_t d = 0; d < cr->n_devices; d++) {
                const V1__ContainerDevices *cd = cr->devices[d];
                if (!cd || !cd->resource_name || !streq(cd->resource_name, resource))
                        continue;
                for (size_t i = 0; i < cd->n_device_ids; i++) {
                        const char *id = cd->device_ids[i];
                        bool seen = false;
                        for (size_t k = 0; k < n && !seen; k++)
                                seen = id && ids[k] && streq(ids[k], id);
                        if (seen)
                                continue;
                        if (n == MK_MAX_CLAIM_DEVICES)
                                return false;
                        ids[n++] = id;
                }
        }
        *ret_n = n;
        return true;
}

/* The keys of pod p's containers holding ids of `resource`, into h: one a
 * container, over all its entries of the resource. */
static int pod_keys(const V1__PodResources *p, const char *resource, struct mk_dp_held *h) {
        for (size_t c = 0; c < p->n_containers; c++) {
                const V1__ContainerResources *cr = p->containers[c];
                const char *ids[MK_MAX_CLAIM_DEVICES];
                size_t n = 0;
                if (!cr || !container_ids(cr, resource, ids, &n) || n == 0)
                        continue;
                char *k = NULL;
                int r = mk_dp_handout_key(ids, n, &k);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        continue; /* not one of ours */
                char **v = realloc(h->keys, (h->n_keys + 1) * sizeof(*v));
                if (!v) {
                        free(k);
                        return -ENOMEM;
                }
                h->keys = v;
                h->keys[h->n_keys++] = k;
        }
        return 0;
}

/* Refuses an answer past the MK_DP_PODRES_MAX_* counts before protobuf-c
 * decodes it: the path pods (ListPodResourcesResponse.pod_resources = 1),
 * containers (PodResources.containers = 3), device entries
 * (ContainerResources.devices = 2), IDs (ContainerDevices.device_ids = 2). */
static int podres_check(const uint8_t *buf, size_t len, struct mk_error *e) {
        static const uint32_t path[] = { 1, 3, 2, 2 };
        static const struct {
                unsigned max;
                const char *what, *in;
        } bound[] = {
                { MK_DP_PODRES_MAX_PODS, "pods", "the answer" },
                { MK_DP_PODRES_MAX_CONTAINERS, "containers", "one pod" },
                { MK_DP_PODRES_MAX_DEVICES, "device entries", "one container" },
                { MK_DP_PODRES_MAX_IDS, "device IDs", "one device entry" },
        };
        struct mk_pb_path_counts c;
        struct mk_error why = { 0 };
        if (mk_pb_scan_path(buf, len, path, ELEMENTSOF(path), &c, &why) < 0)
                return mk_error_set(e, -EINVAL, "PodResources List: cannot decode the answer: %s", why.msg);
        for (size_t i = 0; i < ELEMENTSOF(bound); i++)
                if (c.most[i] > bound[i].max)
                        return mk_error_set(e, -E2BIG, "PodResources List: %zu %s in %s, at most %u", c.most[i],
                                            bound[i].what, bound[i].in, bound[i].max);
        if (c.fields > MK_DP_PODRES_MAX_FIELDS)
                return mk_error_set(e, -E2BIG, "PodResources List: %zu fields in the answer, at most %u", c.fields,
                                    MK_DP_PODRES_MAX_FIELDS);
        return 0;
}

int mk_dp_podres_decode(const uint8_t *buf, size_t len, const char *resource, struct mk_dp_held **ret,
                        size_t *ret_n, struct mk_error *e) {
        int r = podres_check(buf, len, e);
        if (r < 0)
                return r;
        V1__ListPodResourcesResponse *m = v1__list_pod_resources_response__unpack(NULL, len, buf);
        if (!m)
                return mk_error_set(e, -EINVAL, "PodResources List: cannot decode the answer");
        size_t n = 0;
        struct mk_dp_held *held = calloc(m->n_pod_resources ? m->n_pod_resources : 1, sizeof(*held));
        if (!held) {
                r = mk_error_set(e, -ENOMEM, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < m->n_pod_resources; i++) {
                const V1__PodResources *p = m->pod_resources[i];
                if (!p || !p->name || !p->namespace_ || !*p->name || !*p->namespace_)
                        continue;
                struct mk_dp_held h = {0};
                r = pod_keys(p, resource, &h);
                if (r >= 0 && h.n_keys > 0) {
                        h.namespace = strdup(p->namespace_);
                        h.name = strdup(p->name);
                        if (!h.namespace || !h.name)
                                r = -ENOMEM;
                }
                if (r < 0 || h.n_keys == 0) {
                        free((char *) h.namespace);
                        free((char *) h.name);
                        for (size_t k = 0; k < h.n_keys; k++)
                                free(h.keys[k]);
                        free(h.keys);
                        if (r < 0) {
                                r = mk_error_set(e, r, "out of memory");
                                goto out;
                        }
                        continue;
                }
                held[n++] = h;
        }
out:
        v1__list_pod_resources_response__free_unpacked(m, NULL);
        if (r < 0) {
                mk_dp_held_free(held, n);
                return r;
        }
        *ret = held;
        *ret_n = n;
        return 0;
}

int mk_dp_podres_list(struct mk_grpc_client *c, const char *resource, struct mk_dp_held **ret, size_t *ret_n,
                      int *ret_status, struct mk_error *e) {
        _cleanup_buf_done_ struct mk_buf resp;
        mk_buf_init(&resp, MK_DP_PODRES_MAX_BYTES);
        /* ListPodResourcesRequest has no field: its packed form is empty. */
        int r = mk_grpc_client_call(c, MK_DP_PODRES_LIST, (const uint8_t *) "", 0, MK_DP_PODRES_TIMEOUT_MS, false,
                                    &resp, ret_status, e);
        if (r < 0)
                return r;
        return mk_dp_podres_decode((const uint8_t *) (resp.data ? resp.data : ""), resp.len, resource, ret, ret_n, e);
}
