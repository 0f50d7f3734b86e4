/* mig-parted hooks file v1 (mig-parted v0.15.0 api/hooks/v1): lenient as upstream (unknown
 * keys ignored, keys case-insensitive), but malformed YAML, wrong types and
 * unknown hook names are errors with file:line:column. */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"

#define MK_MAX_HOOK_ENTRIES 64    /* entries under one hook name */
#define MK_MAX_HOOK_ARGS 256      /* args of one entry */
#define MK_MAX_HOOK_ENVS 256      /* envs of one entry */
#define MK_MAX_HOOK_STRING 4096   /* bytes in command, workdir, one arg, one "KEY=VALUE" */

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
        char **args;          /* NULL-terminated, argv[1..]; never NULL */
        char **envs;          /* NULL-terminated "KEY=VALUE", in file order; never NULL */
        char *workdir;        /* NULL = inherit */
};

struct mk_hooks {
        char *file;
        char *version;        /* as written; not validated (upstream) */
        struct mk_hook_entry *entries[_MK_HOOK_MAX];
        size_t n_entries[_MK_HOOK_MAX];
};

/* Parses `len` bytes (at most MK_MAX_YAML_BYTES, else -E2BIG). An empty or
 * null document, or no `hooks`, gives a struct with no entries. Errors are
 * -EINVAL with file:line:column and the field path in `e`; -ENOMEM.
 * Stricter than upstream: a hook entry of a known hook without a command (or
 * with an empty one), an env name that is empty or holds '=', keys that
 * differ only in case (`command` and `Command`) and duplicate keys are
 * errors; caps MK_MAX_HOOK_*. Hook names are matched exactly, as upstream
 * looks them up; a name that is none of the four is an error with "did you
 * mean" (`pre-apply-configg`, `Apply-Start`), where upstream ignores it and
 * the hook never runs. */
int mk_hooks_parse(const char *data, size_t len, const char *file, struct mk_hooks **ret, struct mk_error *e);
/* Reads (path "-" = stdin, capped) and parses. A NULL or empty path gives
 * no hooks, as upstream does for an unset hooks file. */
int mk_hooks_load(const char *path, struct mk_hooks **ret, struct mk_error *e);
struct mk_hooks *mk_hooks_free(struct mk_hooks *h);
static inline void mk_hooks_freep(struct mk_hooks **h) {
        mk_hooks_free(*h);
}
