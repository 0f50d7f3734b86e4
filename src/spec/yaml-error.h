/* Errors of a walk over a YAML tree: at a node's position, with the field
 * path of the node being looked at. */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "base/macro.h"

struct mk_yaml_node;

/* Error context for a walk: the file, the error to fill, and the field path
 * of the node being looked at ("mig-configs.a[0].devices"). */
struct mk_yaml_ctx {
        const char *file;
        struct mk_error *e;
        char path[MK_ERROR_LOC_MAX];
        size_t path_len;
};

/* Sets -EINVAL (or `code`) at the node's position (or none for NULL) with the
 * current path, and returns the code. */
int mk_yaml_error(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *fmt, ...) _printf_(3, 4);
int mk_yaml_error_code(struct mk_yaml_ctx *c, int code, const struct mk_yaml_node *n, const char *fmt, ...)
        _printf_(4, 5);

/* Path segments; push returns the previous length to pop back to. Over-long
 * paths are cut with "..." (they only serve messages). */
size_t mk_yaml_path_push_key(struct mk_yaml_ctx *c, const char *key);
size_t mk_yaml_path_push_index(struct mk_yaml_ctx *c, size_t index);
void mk_yaml_path_pop(struct mk_yaml_ctx *c, size_t len);
