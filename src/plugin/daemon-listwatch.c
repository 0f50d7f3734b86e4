/* The device plugin's ListAndWatch streams (plugin/daemon-internal.h):
 * the device list of a resource as kubelet reads it, sent to the streams
 * of its server, and the health monitor's changes fanned out to the
 * resources whose devices they touch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/dynbuf.h"
#include "base/log.h"
#include "base/macro.h"
#include "grpc/server.h"
#include "plugin/daemon-internal.h"
#include "plugin/health.h"
#include "plugin/resources.h"
#include "proto/deviceplugin.pb-c.h"

/* The ListAndWatch message of one resource: every device, its health and
 * NUMA node. Called with d->lock held. */
static int pack_device_list(const struct mk_dp_resource *res, struct mk_buf *b) {
        size_t n = res->n_devices;
        _cleanup_free_ V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
        _cleanup_free_ V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        _cleanup_free_ V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
        _cleanup_free_ V1beta1__NUMANode *numa = calloc(n ? n : 1, sizeof(*numa));
        _cleanup_free_ V1beta1__NUMANode **numa_ptrs = calloc(n ? n : 1, sizeof(*numa_ptrs));
        if (!devs || !ptrs || !topo || !numa || !numa_ptrs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const struct mk_dp_device *dev = &res->devices[i];
                v1beta1__device__init(&devs[i]);
                devs[i].id = (char *) dev->id;
                devs[i].health = (char *) (dev->healthy ? "Healthy" : "Unhealthy");
                if (dev->numa_node >= 0) {
                        v1beta1__topology_info__init(&topo[i]);
                        v1beta1__numanode__init(&numa[i]);
                        numa[i].id = dev->numa_node;
                        numa_ptrs[i] = &numa[i];
                        topo[i].n_nodes = 1;
                        topo[i].nodes = &numa_ptrs[i];
                        devs[i].topology = &topo[i];
                }
                ptrs[i] = &devs[i];
        }
        V1beta1__ListAndWatchResponse msg = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        msg.n_devices = n;
        msg.devices = ptrs;
        return dp_pack_msg(&msg.base, b);
}

/* Sends the current list of server s's resource to its streams. Called
 * with d->lock held. */
int dp_publish(struct dp_server *s) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, MK_GRPC_MAX_SEND_MESSAGE);
        int r = pack_device_list(dp_server_resource(s), &b);
        if (r >= 0)
                r = mk_grpc_server_publish(s->grpc, (const uint8_t *) b.data, b.len);
        if (r < 0)
                log_warning_errno(r, "Cannot send the device list of '%s': %m, ignoring", dp_server_resource(s)->name);
        return r;
}

/* ---- health (the monitor's thread) ---- */
/* Unhealthy devices of a resource on GPU `gpu`; -1 when it has none there. */
static long unhealthy_on(const struct mk_dp_resource *res, unsigned gpu) {
        long n = -1;
        for (size_t k = 0; k < res->n_devices; k++)
                if (res->devices[k].gpu == gpu)
                        n = (n < 0 ? 0 : n) + !res->devices[k].healthy;
        return n;
}

void dp_on_health(void *userdata, const struct mk_health_change *c) {
        struct dp_daemon *d = userdata;
        pthread_mutex_lock(&d->lock);
        /* One change goes one way (all to healthy or all to unhealthy), so a
         * resource changed iff its count of unhealthy devices on that GPU did:
         * only those re-send their list. */
        long *before = calloc(d->n_servers ? d->n_servers : 1, sizeof(long));
        for (size_t i = 0; before && i < d->n_servers; i++)
                before[i] = unhealthy_on(dp_server_resource(&d->servers[i]), c->gpu);
        unsigned changed = mk_dp_resources_set_health(d->resources, c->gpu, c->gi_id, c->ci_id, c->healthy);
        for (size_t i = 0; changed > 0 && i < d->n_servers; i++) {
                long after = unhealthy_on(dp_server_resource(&d->servers[i]), c->gpu);
                if (after >= 0 && (!before || after != before[i]) && d->servers[i].grpc)
                        (void) dp_publish(&d->servers[i]);
        }
        free(before);
        pthread_mutex_unlock(&d->lock);
        if (changed == 0)
                return;
        char where[64] = "";
        if (c->gi_id != UINT32_MAX && c->ci_id != UINT32_MAX)
                snprintf(where, sizeof(where), " GI %u CI %u", c->gi_id, c->ci_id);
        else if (c->gi_id != UINT32_MAX)
                snprintf(where, sizeof(where), " GI %u", c->gi_id);
        if (c->healthy)
                log_info("GPU %u%s: %u device(s) Healthy again (%s)", c->gpu, where, changed, c->reason);
        else
                log_warning("GPU %u%s: %u device(s) Unhealthy: Xid %llu (%s)", c->gpu, where, changed, c->xid,
                            c->reason);
}
