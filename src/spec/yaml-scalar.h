/* Scalars typed as mig-parted's YAML stack types them: go-yaml v2's YAML 1.1
 * resolution, then sigs.k8s.io/yaml's conversion to JSON and to strings. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec/yaml-error.h"

struct mk_yaml_node;

/* The type go-yaml v2 gives a scalar (YAML 1.1: yes/no/on/off are booleans,
 * 0x/0o/0b/leading-0 integers, '_' separators), and JSON's name for it. */
enum mk_yaml_type {
        MK_YAML_NULL,
        MK_YAML_BOOL,
        MK_YAML_INT,
        MK_YAML_FLOAT,
        MK_YAML_STR,
        MK_YAML_SEQ,
        MK_YAML_MAP,
};

struct mk_yaml_scalar {
        enum mk_yaml_type type;
        bool b;
        bool is_unsigned;       /* INT above INT64_MAX: in u */
        int64_t i;
        uint64_t u;
        double f;
};

/* Resolves a scalar (or reports SEQ/MAP for containers). Explicit tags
 * !!str, !!null, !!bool, !!int, !!float, !!seq, !!map are honoured;
 * others, and a tagged value of another type, are errors. */
int mk_yaml_resolve(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_scalar *ret);
/* JSON's name for a type, as Go's encoding/json prints it: "object", "array",
 * "string", "number", "bool", "null". */
const char *mk_yaml_type_json(enum mk_yaml_type t);

/* A scalar as sigs.k8s.io/yaml turns it into a string: strings as written,
 * integers in decimal, booleans "true"/"false", floats as Go's
 * FormatFloat(f, 'g', -1, 32). For a mapping key (`key` true) null is an
 * error and infinities read ".inf"; for a value it is "" and "+Inf".
 * Containers, and strings with a NUL byte, are errors. */
int mk_yaml_to_string(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool key, char **ret);

/* Formats like Go's strconv.FormatFloat(f, 'g', -1, 32). */
int mk_yaml_format_float32(double f, char *buf, size_t size);
