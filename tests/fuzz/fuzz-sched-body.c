/* libFuzzer target for the extender's request-body reader
 * (mk_sched_body_text: a bounded scan of the NodeNames array, jansson for the
 * rest): on any bytes it gives exactly what mk_json_load + the json_t entry
 * points give, answer or error message, for filter and prioritize. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sched/extender.h"
#include "sched/inventory.h"
#include "sched/json.h"
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
        for (int filter = 0; filter < 2; filter++) {
                char *a = NULL, *b = NULL;
                struct mk_error e1 = {0}, e2 = {0};
                int r1 = mk_sched_body_text(s, filter, (const char *) data, size, 1 << 16, &a, &e1);
                json_t *args = NULL;
                int r2 = mk_json_load((const char *) data, size, 1 << 16, "request body", &args, &e2);
                if (r2 >= 0) {
                        b = filter ? mk_sched_filter_text(s, args) : mk_sched_prioritize_text(s, args);
                        json_decref(args);
                }
                if (r1 != r2 || (r1 >= 0 && (!a || !b || strcmp(a, b) != 0)) ||
                    (r1 < 0 && strcmp(e1.msg, e2.msg) != 0))
                        abort();
                free(a);
                free(b);
        }
        return 0;
}
