/* libFuzzer target for the hooks file parser: arbitrary bytes must never
 * crash it or leak; a failure is -EINVAL (or -ENOMEM) with a message; what
 * it accepts has non-empty commands, NULL-terminated argument and
 * environment lists within the caps, and "KEY=VALUE" environment strings. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/hooks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_hooks *h = NULL;
        struct mk_error e = {0};

        int r = mk_hooks_parse((const char *) data, size, "hooks.yaml", &h, &e);
        if (r < 0) {
                if ((r != -EINVAL && r != -ENOMEM) || e.code != r || e.msg[0] == 0 || h)
                        abort();
                return 0;
        }
        if (!h)
                abort();
        for (int i = 0; i < _MK_HOOK_MAX; i++) {
                if (h->n_entries[i] > MK_MAX_HOOK_ENTRIES || (h->n_entries[i] > 0 && !h->entries[i]))
                        abort();
                for (size_t j = 0; j < h->n_entries[i]; j++) {
                        const struct mk_hook_entry *x = &h->entries[i][j];
                        if (!x->command || !*x->command || strlen(x->command) > MK_MAX_HOOK_STRING || !x->args ||
                            !x->envs)
                                abort();
                        if (x->workdir && (!*x->workdir || strlen(x->workdir) > MK_MAX_HOOK_STRING))
                                abort();
                        size_t n = 0;
                        for (char **a = x->args; *a; a++, n++)
                                if (strlen(*a) > MK_MAX_HOOK_STRING)
                                        abort();
                        if (n > MK_MAX_HOOK_ARGS)
                                abort();
                        n = 0;
                        for (char **a = x->envs; *a; a++, n++) {
                                const char *eq = strchr(*a, '=');
                                if (!eq || eq == *a || strlen(*a) > MK_MAX_HOOK_STRING)
                                        abort();
                        }
                        if (n > MK_MAX_HOOK_ENVS)
                                abort();
                }
        }
        mk_hooks_free(h);
        return 0;
}
