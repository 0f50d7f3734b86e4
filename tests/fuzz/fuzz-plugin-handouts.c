/* libFuzzer target for the dynamic device plugin's handouts file
 * (plugin/dynamic/handout.h), read back at start and so input: arbitrary bytes
 * never crash or leak, and a file that parses formats to text that parses
 * and formats to the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/dynamic/handout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_dp_handouts h = {0};
        struct mk_error e = {0};
        if (mk_dp_handouts_parse((const char *) data, size, &h, &e) < 0)
                return 0;
        char *a = NULL, *b = NULL;
        if (mk_dp_handouts_format(&h, &a) >= 0) {
                struct mk_dp_handouts back = {0};
                if (mk_dp_handouts_parse(a, strlen(a), &back, &e) < 0)
                        abort();
                if (mk_dp_handouts_format(&back, &b) < 0 || strcmp(a, b) != 0)
                        abort();
                mk_dp_handouts_done(&back);
        }
        free(a);
        free(b);
        mk_dp_handouts_done(&h);
        return 0;
}
