/* libFuzzer target for the device plugin / GFD v1 config parser
 * (spec/plugin-config.h): arbitrary bytes must never crash it or leak; a
 * failure carries a message and leaves no result; a success holds only
 * resources with a name and at least 2 replicas. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spec/plugin-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_plugin_config *c = NULL;
        struct mk_error e = {0};
        int r = mk_plugin_config_parse((const char *) data, size, "config.yaml", &c, &e);
        if (r < 0) {
                if (e.msg[0] == 0 || c)
                        abort();
                return 0;
        }
        if (!c)
                abort();
        for (size_t i = 0; i < c->n_resources; i++)
                if (!c->resources[i].name || c->resources[i].replicas < 2 ||
                    (c->rename_by_default && !c->resources[i].rename))
                        abort();
        mk_plugin_config_free(c);
        return 0;
}
