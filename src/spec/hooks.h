/* mig-parted hooks file v1 (mig-parted.md §3): lenient as upstream (unknown
 * keys and hook names ignored, keys case-insensitive), but malformed YAML or
 * wrong types are errors with file:line:column. */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"

enum mk_hook {
        MK_HOOK_APPLY_START,
        MK_HOOK_PRE_APPLY_MODE,
        MK_HOOK_PRE_APPLY_CONFIG,
        MK_HOOK_APPLY_EXIT,
        _MK_HOOK_MAX,
        _MK_HOOK_INVALID = -EINVAL,
};

const char *mk_hook_to_string(enum mk_hook h);   /* "apply-start", ... */
enum mk_hook mk_hook_from_string(const char *s); /* case-insensitive */

struct mk_hook_entry {
        char *command;        /* required, non-empty */
        char **args;          /* NULL-terminated, argv[1..] */
        char **envs;          /* NULL-terminated "KEY=VALUE", in file order */
        char *workdir;        /* NULL = inherit */
};

struct mk_hooks {
        char *file;
        char *version;        /* as written; not validated (upstream) */
        struct mk_hook_entry *entries[_MK_HOOK_MAX];
        size_t n_entries[_MK_HOOK_MAX];
};

int mk_hooks_parse(const char *data, size_t len, const char *file, struct mk_hooks **ret, struct mk_error *e);
int mk_hooks_load(const char *path, struct mk_hooks **ret, struct mk_error *e);
struct mk_hooks *mk_hooks_free(struct mk_hooks *h);
static inline void mk_hooks_freep(struct mk_hooks **h) {
        mk_hooks_free(*h);
}
