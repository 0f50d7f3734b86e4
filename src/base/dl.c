#include <dlfcn.h>
#include <string.h>

#include "base/dl.h"

const char *mk_dl_resolve(void *dl, const struct mk_dl_sym *table, size_t n, void *dst,
                          bool (*optional)(const char *name)) {
        const char *missing = NULL;
        for (size_t i = 0; i < n; i++) {
                (void) dlerror();
                void *sym = dlsym(dl, table[i].name);
                if (!sym && !missing && !(optional && optional(table[i].name)))
                        missing = table[i].name;
                memcpy((char *) dst + table[i].offset, &sym, sizeof(sym));
        }
        return missing;
}
