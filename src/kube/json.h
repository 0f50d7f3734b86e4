/* Small checked JSON readers for Kubernetes objects and the codecs built on
 * them (extender wire format, inventory and reservation annotations): bounded loading,
 * known-field checks, ranged integers, bounded strings, and the
 * case-insensitive key lookup Go's encoding/json does. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"

/* Parses `len` bytes (at most `cap`, else -E2BIG) into *ret; duplicate
 * keys and garbage are -EINVAL with jansson's reason, `what` names the input. */
int mk_json_load(const char *data, size_t len, size_t cap, const char *what, json_t **ret, struct mk_error *e)
        _nonnull_(4, 5) _wur_;

/* As mk_json_load, for Kubernetes objects: strings may hold "\u0000" (the
 * apiserver allows it in annotations); readers check the objects they
 * read with mk_kube_object_has_nul. */
int mk_json_load_api(const char *data, size_t len, size_t cap, const char *what, json_t **ret, struct mk_error *e)
        _nonnull_(4, 5) _wur_;

/* -EINVAL naming the first key of object `o` outside `known` (NULL-
 * terminated), or when `o` is not an object. */
int mk_json_check_keys(const json_t *o, const char *field, const char *const *known, struct mk_error *e)
        _nonnull_(2, 3);

/* o[key] as an integer in [0, max]: 1 found, 0 absent and not required,
 * -EINVAL otherwise. */
int mk_json_get_u64(const json_t *o, const char *key, const char *field, uint64_t max, bool required, uint64_t *ret,
                    struct mk_error *e) _nonnull_(2, 3, 6);

/* o[key] as a string copied into buf (size with NUL), printable ASCII
 * only: 1 found, 0 absent and not required (buf ""), -EINVAL or -E2BIG. */
int mk_json_get_str(const json_t *o, const char *key, const char *field, char *buf, size_t size, bool required,
                    struct mk_error *e) _nonnull_(2, 3, 4);

/* Printable ASCII without blanks, quotes or backslashes. */
bool mk_json_token_ok(const char *s) _nonnull_(1);

/* o[key], matching the key case-insensitively when no exact key exists
 * (Go's decoder). NULL when absent or `o` is not an object. Borrowed. */
json_t *mk_json_get_ci(const json_t *o, const char *key);
