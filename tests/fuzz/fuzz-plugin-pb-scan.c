/* libFuzzer target for the device plugin's count of a request before it is
 * decoded (plugin/pb-scan.h): arbitrary bytes never crash nor read past the
 * input, and where protobuf-c decodes the bytes as an AllocateRequest and
 * the scan accepts them, the counts are what the decoded message holds
 * (the containers, the most device IDs of one, and at least that many
 * fields). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "plugin/pb-scan.h"
#include "proto/deviceplugin.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_pb_counts c;
        struct mk_error e = {0};
        int r = mk_pb_scan(data, size, 1, 1, &c, &e);
        if (r < 0 && r != -EINVAL)
                abort();
        if (size > 65536) /* protobuf-c's decoding is the slow part */
                return 0;
        V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, size, data);
        if (!m)
                return 0;
        if (r >= 0) {
                size_t most = 0, all = m->n_container_requests;
                for (size_t i = 0; i < m->n_container_requests; i++) {
                        size_t k = m->container_requests[i]->n_devices_ids;
                        most = k > most ? k : most;
                        all += k;
                }
                if (c.outer != m->n_container_requests || c.inner != most || c.fields < all)
                        abort();
        }
        v1beta1__allocate_request__free_unpacked(m, NULL);
        return 0;
}
