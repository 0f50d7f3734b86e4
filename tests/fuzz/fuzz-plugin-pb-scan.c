/* libFuzzer target for the device plugin's count of a message before it is
 * decoded (plugin/pb-scan.h): arbitrary bytes never crash nor read past the
 * input; where protobuf-c decodes the bytes as an AllocateRequest and the
 * scan accepts them, the counts are what the decoded message holds (the
 * containers, the most device IDs of one, and at least that many fields);
 * the same for the kubelet's PodResources List answer along its path of
 * four fields (pods, containers, device entries, IDs), which
 * mk_dp_podres_decode() then refuses or decodes without a crash. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "plugin/dynamic/podres.h"
#include "plugin/pb-scan.h"
#include "proto/deviceplugin.pb-c.h"
#include "proto/podresources.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t most(size_t a, size_t b) {
        return a > b ? a : b;
}

/* The path scan against protobuf-c's decoding of a List answer. */
static void check_podres(const uint8_t *data, size_t size) {
        static const uint32_t path[] = { 1, 3, 2, 2 };
        struct mk_pb_path_counts c;
        struct mk_error e = {0};
        int r = mk_pb_scan_path(data, size, path, 4, &c, &e);
        if (r < 0 && r != -EINVAL)
                abort();
        struct mk_dp_held *held = NULL;
        size_t n = 0;
        int d = mk_dp_podres_decode(data, size, "nvidia.com/mig-1g.10gb", &held, &n, &e);
        if (d >= 0)
                mk_dp_held_free(held, n);
        else if (d != -EINVAL && d != -E2BIG && d != -ENOMEM)
                abort();
        if (r < 0 && d >= 0) /* what the scan refuses is never decoded */
                abort();
        V1__ListPodResourcesResponse *m = v1__list_pod_resources_response__unpack(NULL, size, data);
        if (!m)
                return;
        if (r >= 0) {
                size_t ctrs = 0, devs = 0, ids = 0, all = m->n_pod_resources;
                for (size_t i = 0; i < m->n_pod_resources; i++) {
                        const V1__PodResources *p = m->pod_resources[i];
                        ctrs = most(ctrs, p->n_containers);
                        all += p->n_containers;
                        for (size_t k = 0; k < p->n_containers; k++) {
                                const V1__ContainerResources *cr = p->containers[k];
                                devs = most(devs, cr->n_devices);
                                all += cr->n_devices;
                                for (size_t j = 0; j < cr->n_devices; j++) {
                                        ids = most(ids, cr->devices[j]->n_device_ids);
                                        all += cr->devices[j]->n_device_ids;
                                }
                        }
                }
                if (c.most[0] != m->n_pod_resources || c.most[1] != ctrs || c.most[2] != devs ||
                    c.most[3] != ids || c.fields < all)
                        abort();
        }
        v1__list_pod_resources_response__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_pb_counts c;
        struct mk_error e = {0};
        int r = mk_pb_scan(data, size, 1, 1, &c, &e);
        if (r < 0 && r != -EINVAL)
                abort();
        if (size > 65536) /* protobuf-c's decoding is the slow part */
                return 0;
        check_podres(data, size);
        V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, size, data);
        if (!m)
                return 0;
        if (r >= 0) {
                size_t longest = 0, all = m->n_container_requests;
                for (size_t i = 0; i < m->n_container_requests; i++) {
                        size_t k = m->container_requests[i]->n_devices_ids;
                        longest = most(k, longest);
                        all += k;
                }
                if (c.outer != m->n_container_requests || c.inner != longest || c.fields < all)
                        abort();
        }
        v1beta1__allocate_request__free_unpacked(m, NULL);
        return 0;
}
