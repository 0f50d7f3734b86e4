/* libFuzzer target for the extender's wire format (sched/extender.h):
 * arbitrary bytes as ExtenderArgs (filter, prioritize) and
 * ExtenderBindingArgs never crash or leak, and filter always answers an
 * object with an Error string. The cache holds one node with an inventory. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sched/extender.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char inventory[] =
        "{\"version\":1,\"node\":\"n1\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"model\":\"NVIDIA A100-SXM4-40GB\","
        "\"memoryMiB\":40960,\"units\":8,\"slices\":7,\"sms\":98,\"mig\":true,\"profiles\":[{\"name\":\"1g.5gb\","
        "\"id\":19,\"slices\":1,\"memoryMiB\":4864,\"maxCount\":7,\"sms\":14,\"placements\":[[0,1],[1,1],[2,1],"
        "[3,1],[4,1],[5,1],[6,1]]},{\"name\":\"3g.20gb\",\"id\":9,\"slices\":3,\"memoryMiB\":19968,\"maxCount\":2,"
        "\"sms\":42,\"placements\":[[0,4],[4,4]]}],\"instances\":[{\"state\":\"created\",\"profile\":\"3g.20gb\","
        "\"id\":9,\"slices\":3,\"placement\":[0,4],\"gi\":1}]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static struct mk_sched_config *cfg;
        static struct mk_sched *s;
        if (!s) {
                if (mk_sched_config_load(NULL, &cfg, NULL) < 0 || mk_sched_new(cfg, &s) < 0)
                        abort();
                json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n1", "annotations",
                                      MK_ANN_INVENTORY, inventory);
                if (!n || mk_sched_node_event(s, MK_KUBE_EVENT_ADDED, n) < 0)
                        abort();
                json_decref(n);
        }
        json_t *args = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
        if (!args)
                return 0;
        json_t *r = mk_sched_filter(s, args);
        if (!json_is_object(r) || !json_is_string(json_object_get(r, "Error")))
                abort();
        json_decref(r);
        r = mk_sched_prioritize(s, args);
        if (!json_is_array(r))
                abort();
        json_decref(r);
        struct mk_bind_args b;
        (void) mk_bind_args_parse(args, &b, NULL);
        /* Pods as informer events must not disturb the cache either. */
        json_t *pod = json_object_get(args, "Pod");
        if (pod)
                (void) mk_sched_pod_event(s, MK_KUBE_EVENT_ADDED, pod);
        json_decref(args);
        return 0;
}
