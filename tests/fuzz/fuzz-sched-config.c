/* libFuzzer target for the scheduler config parser (spec/sched-config.h):
 * arbitrary bytes must never crash it or leak; a failure carries a message
 * and leaves no result; a success has only GI profiles (C == G) and every
 * model entry has a model and resource names. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spec/sched-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_sched_config *c = NULL;
        struct mk_error e = {0};
        int r = mk_sched_config_parse((const char *) data, size, "sched.yaml", &c, &e);
        if (r < 0) {
                if (e.msg[0] == 0 || c)
                        abort();
                return 0;
        }
        if (!c || !c->resource_count || !c->resource_memory)
                abort();
        for (size_t i = 0; i < c->n_models; i++) {
                if (c->models[i].n_models == 0 || !c->models[i].models[0])
                        abort();
                for (size_t k = 0; k < c->models[i].n_profiles; k++)
                        if (c->models[i].profiles[k].c != c->models[i].profiles[k].g)
                                abort();
        }
        for (size_t i = 0; i < c->n_nodes; i++)
                if (!c->nodes[i].name || !mk_sched_mode_to_string(c->nodes[i].mode))
                        abort();
        mk_sched_config_free(c);
        return 0;
}
