/* libFuzzer target for the node service's service.yaml parser: arbitrary
 * bytes must never crash it or leak; a failure carries a message and leaves
 * no result. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "service/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_service_settings *s = NULL;
        struct mk_error e = {0};
        int r = mk_service_settings_parse((const char *) data, size, "service.yaml", &s, &e);
        if (r < 0) {
                if (e.msg[0] == 0 || s)
                        abort();
                return 0;
        }
        if (!s)
                abort();
        mk_service_settings_free(s);
        return 0;
}
