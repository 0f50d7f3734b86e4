/* libFuzzer target for the extender's request-body reader
 * (mk_sched_body_text: a bounded scan of the NodeNames array, jansson for the
 * rest): on any bytes it gives exactly what mk_json_load_api (the body is a
 * Kubernetes object: "\u0000" allowed, as the server reads it) + the json_t entry
 * points give, answer or error message, for filter and prioritize. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kube/json.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "spec/sched-config.h"

#include "sched-fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_sched *s = fuzz_sched_one_node();
        for (int filter = 0; filter < 2; filter++) {
                char *a = NULL, *b = NULL;
                struct mk_error e1 = {0}, e2 = {0};
                int r1 = mk_sched_body_text(s, filter, (const char *) data, size, 1 << 16, &a, &e1);
                json_t *args = NULL;
                int r2 = mk_json_load_api((const char *) data, size, 1 << 16, "request body", &args, &e2);
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
