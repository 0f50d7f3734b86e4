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

#include "sched-fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_sched *s = fuzz_sched_one_node();
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
