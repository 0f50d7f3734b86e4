/* Symbol tables filled from a dlopen()ed library (NVML, libcurl): one entry
 * per function, its name and where its pointer goes in a struct. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct mk_dl_sym {
        const char *name;
        size_t offset; /* of the function pointer in the destination struct */
};

/* Resolves every entry of table[n] in dl into (char *) dst + offset (NULL
 * where absent). Returns NULL when every symbol was found or the missing
 * ones are all accepted by optional (may be NULL: none is), else the name
 * of the first missing one. */
const char *mk_dl_resolve(void *dl, const struct mk_dl_sym *table, size_t n, void *dst,
                          bool (*optional)(const char *name));
