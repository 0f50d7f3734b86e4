/* libFuzzer target for the profile-name parser: arbitrary bytes must never
 * crash it, and whatever it accepts must format to a canonical name that
 * parses back to an equal name and formats identically (a fixed point). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mig/profile.h"

/* Far above the parser's own 63-byte limit, so the too-long path is fuzzed too. */
#define FUZZ_INPUT_MAX 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char in[FUZZ_INPUT_MAX + 1];
        struct mk_profile_name a, b;
        struct mk_error e = {0};
        char out[MK_PROFILE_NAME_MAX], out2[MK_PROFILE_NAME_MAX];

        if (size > FUZZ_INPUT_MAX)
                size = FUZZ_INPUT_MAX;
        memcpy(in, data, size);
        in[size] = 0;

        int r = mk_profile_name_parse(in, &a, &e);
        if (r < 0) {
                /* Failures are -EINVAL with a message. */
                if (r != -EINVAL || e.code != r || e.msg[0] == 0)
                        abort();
                return 0;
        }
        if (a.c < 1 || a.g < 1 || a.gb < 1 || a.c > a.g || a.n_attrs > MK_PROFILE_ATTRS_MAX)
                abort();

        /* A parsed name always fits MK_PROFILE_NAME_MAX in canonical form. */
        int n = mk_profile_name_format(&a, out, sizeof(out));
        if (n < 0 || (size_t) n != strlen(out))
                abort();

        if (mk_profile_name_parse(out, &b, NULL) < 0)
                abort();
        if (!mk_profile_name_equal(&a, &b) || mk_profile_name_compare(&a, &b) != 0 ||
            mk_profile_name_compare(&b, &a) != 0)
                abort();
        /* Field by field too, so a bug shared by parse and equal still shows. */
        if (a.c != b.c || a.g != b.g || a.gb != b.gb || a.negative != b.negative || a.n_attrs != b.n_attrs)
                abort();
        for (unsigned i = 0; i < a.n_attrs; i++)
                if (strcmp(a.attrs[i], b.attrs[i]) != 0 || (i > 0 && strcmp(a.attrs[i - 1], a.attrs[i]) >= 0))
                        abort();

        if (mk_profile_name_format(&b, out2, sizeof(out2)) != n || strcmp(out, out2) != 0)
                abort();
        return 0;
}
