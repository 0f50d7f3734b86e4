/* Shared by the extender fuzz targets: a scheduler whose cache holds one
 * node, "n1", with one A100-40GB (1g.5gb and 3g.20gb allowed, one 3g.20gb
 * instance at 0). Aborts when the setup itself fails. */
#pragma once

#include <stdlib.h>

#include <jansson.h>

#include "sched/extender.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"

static const char fuzz_sched_inventory[] =
        "{\"version\":1,\"node\":\"n1\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"model\":\"NVIDIA A100-SXM4-40GB\","
        "\"memoryMiB\":40960,\"units\":8,\"slices\":7,\"sms\":98,\"mig\":true,\"profiles\":[{\"name\":\"1g.5gb\","
        "\"id\":19,\"slices\":1,\"memoryMiB\":4864,\"maxCount\":7,\"sms\":14,\"placements\":[[0,1],[1,1],[2,1],"
        "[3,1],[4,1],[5,1],[6,1]]},{\"name\":\"3g.20gb\",\"id\":9,\"slices\":3,\"memoryMiB\":19968,\"maxCount\":2,"
        "\"sms\":42,\"placements\":[[0,4],[4,4]]}],\"instances\":[{\"state\":\"created\",\"profile\":\"3g.20gb\","
        "\"id\":9,\"slices\":3,\"placement\":[0,4],\"gi\":1}]}]}";

static inline struct mk_sched *fuzz_sched_one_node(void) {
        static struct mk_sched_config *cfg;
        static struct mk_sched *s;
        if (s)
                return s;
        if (mk_sched_config_load(NULL, &cfg, NULL) < 0 || mk_sched_new(cfg, &s) < 0)
                abort();
        json_t *n = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n1", "annotations", MK_ANN_INVENTORY,
                              fuzz_sched_inventory);
        if (!n || mk_sched_node_event(s, MK_KUBE_EVENT_ADDED, n) < 0)
                abort();
        json_decref(n);
        return s;
}
