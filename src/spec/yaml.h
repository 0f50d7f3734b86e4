/* A YAML document as a tree with positions, built from libyaml's event API,
 * and the typing rules mig-parted's YAML stack applies to it (go-yaml v2,
 * YAML 1.1 resolution, then sigs.k8s.io/yaml's conversion to JSON).
 *
 * Why not libyaml's document API: it drops whether a scalar was plain or
 * quoted ("true" vs true), and a walk over its alias graph is unbounded.
 * Here aliases share the anchored node, and the document is rejected once
 * its size with every alias expanded exceeds MK_YAML_MAX_NODES, so a walk
 * over the expanded tree is bounded (billion laughs). Only the first
 * document of a stream is read, as go-yaml's Unmarshal does. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define MK_YAML_MAX_NODES 100000u /* nodes with aliases expanded */
#define MK_YAML_MAX_DEPTH 64u     /* nesting of sequences and mappings */
#define MK_YAML_MAX_KEYS 65536u   /* keys in one mapping, merge keys included */
#define MK_YAML_MAX_MERGE_DEPTH 16u

enum mk_yaml_kind {
        MK_YAML_SCALAR,
        MK_YAML_SEQUENCE,
        MK_YAML_MAPPING,
};

struct mk_yaml_node {
        enum mk_yaml_kind kind;
        unsigned line, column;          /* 1-based, of the node's first character */
        char *tag;                      /* explicit tag, expanded ("tag:yaml.org,2002:int"); NULL when none */
        bool plain;                     /* scalar written plain, without tag: subject to type resolution */
        char *value;                    /* scalar: NUL-terminated (may hold NUL bytes before len) */
        size_t len;
        struct mk_yaml_node **items;    /* sequence: items; mapping: key, value, key, value... */
        size_t n_items;
        size_t size;                    /* nodes in this subtree with aliases expanded */
        struct mk_yaml_node *next_alloc;
};

struct mk_yaml_doc {
        struct mk_yaml_node *root;      /* NULL for a stream without a document */
        struct mk_yaml_node *nodes;     /* every node, for freeing */
};

/* Parses the first document of `len` bytes. Errors: -EINVAL for malformed
 * YAML (the libyaml problem at its position), too deep a nesting, an unknown
 * anchor, or more than MK_YAML_MAX_NODES expanded nodes; -ENOMEM. Input in
 * an encoding libyaml would misread is -EINVAL at its position first: UTF-32,
 * UTF-16 without a byte-order mark, a byte-order mark after the start, a NUL
 * character (UTF-8, with or without one leading BOM, and UTF-16 with one
 * leading BOM are read). */
int mk_yaml_parse(const char *data, size_t len, const char *file, struct mk_yaml_doc **ret, struct mk_error *e);
/* The same for a whole input file: -E2BIG ("'<file>' is larger than N
 * bytes") over `max_bytes`; NULL data is an empty document. */
int mk_yaml_parse_capped(const char *data, size_t len, const char *file, size_t max_bytes, struct mk_yaml_doc **ret,
                         struct mk_error *e);
struct mk_yaml_doc *mk_yaml_doc_free(struct mk_yaml_doc *d);
static inline void mk_yaml_doc_freep(struct mk_yaml_doc **d) {
        mk_yaml_doc_free(*d);
}

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

struct mk_yaml_pair {
        const struct mk_yaml_node *key, *value;
        char *name;             /* the key as a string (mk_yaml_to_string, key mode) */
};

struct mk_yaml_map {
        struct mk_yaml_pair *pairs;     /* in file order; merged keys after explicit ones */
        size_t n;
};

/* The effective pairs of a mapping: YAML merge keys (`<<: *anchor`, or a list
 * of them) expanded, explicit keys winning over merged ones and earlier merge
 * sources over later ones. Two explicit keys equal as strings are an error
 * "duplicate key: <k>" at the second one (stricter than go-yaml v2, where the
 * last one silently wins). `n` must be a mapping. */
int mk_yaml_map_load(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_map *ret);
void mk_yaml_map_done(struct mk_yaml_map *m);
/* The pair named `name` in `m`, or NULL. */
const struct mk_yaml_pair *mk_yaml_map_find(const struct mk_yaml_map *m, const char *name);
#define _cleanup_yaml_map_done_ _cleanup_(mk_yaml_map_done)

/* Loads mapping `n` (named `what` in the error when it is something else)
 * and refuses any key outside the NULL-terminated `known` list with
 * "unknown field '<k>'", followed by " (known: a, b)" when list_known. On
 * failure `ret` is left empty. For the strict formats (service.yaml, the
 * plugin config). */
int mk_yaml_map_load_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                           const char *const *known, bool list_known, struct mk_yaml_map *ret);

/* A field of a mapping, for mk_yaml_map_each(): `p` is the pair, its key
 * already on the path. */
typedef int (*mk_yaml_field_fn)(struct mk_yaml_ctx *c, const struct mk_yaml_pair *p, void *userdata);
/* Calls field() on each pair of `m` in order with its key pushed on the
 * path; returns the first error. */
int mk_yaml_map_each(struct mk_yaml_ctx *c, const struct mk_yaml_map *m, mk_yaml_field_fn field, void *userdata);
/* mk_yaml_map_load_known() of `n`, then mk_yaml_map_each(): a strict
 * mapping, field by field. */
int mk_yaml_walk_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                       const char *const *known, bool list_known, mk_yaml_field_fn field, void *userdata);

/* The frame every config parser shares. walk() gets a context for `file`
 * and the first document's root (NULL for an empty stream); its result is
 * returned. */
typedef int (*mk_yaml_walk_fn)(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata);
/* Parses `len` bytes named `file` (NULL: "<input>"; -E2BIG over
 * max_bytes; NULL data is an empty document), then walk(). */
int mk_yaml_parse_walk(const char *data, size_t len, const char *file, size_t max_bytes, mk_yaml_walk_fn walk,
                       void *userdata, struct mk_error *e);
/* Reads `path` (at most max_bytes; "-" reads stdin, named "<stdin>" in
 * messages), then as mk_yaml_parse_walk(). Read errors as mk_read_file(). */
int mk_yaml_load_walk(const char *path, size_t max_bytes, mk_yaml_walk_fn walk, void *userdata, struct mk_error *e);

/* Defines `static int name(...)`, the mk_yaml_walk_fn of a parser whose
 * result is one `type` with a `file` member: `type` calloc()ed, its file
 * set to the context's, `top(c, root, obj)` fills it; on success it goes
 * to the `type **` userdata, on failure `freep` frees it. */
#define MK_YAML_DEFINE_WALK(name, type, freep, top)                                                     \
        static int name(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata) {       \
                _cleanup_(freep) type *x = calloc(1, sizeof(*x));                                      \
                if (!x || !(x->file = strdup(c->file)))                                                \
                        return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");                  \
                int r = top(c, root, x);                                                               \
                if (r < 0)                                                                             \
                        return r;                                                                      \
                *(type **) userdata = TAKE_PTR(x);                                                     \
                return 0;                                                                              \
        }

/* A string scalar (plain or quoted, but a string: `123` or `yes` is not),
 * without NUL bytes, copied to *ret; else "<what> must be a string, not <type>". */
int mk_yaml_get_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret);
/* A list or null (how go-yaml fills a Go slice): the number of items in
 * *ret (0 for null); anything else is the Go tools' error for the same
 * file, "json: cannot unmarshal <type> into Go value of type <go_type>". */
int mk_yaml_get_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, size_t *ret);
/* A mapping or null (how go-yaml fills a Go map or struct): its pairs in
 * *ret (none for null); 1 for a mapping, 0 for null; anything else is
 * "json: cannot unmarshal <type> into Go value of type <go_type>". */
int mk_yaml_get_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, struct mk_yaml_map *ret);
/* A `version` value: a string equal to `want`, else "unsupported version 'x' (want v1)". */
int mk_yaml_check_version(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *want);
/* A YAML boolean (YAML 1.1 forms), else "must be true or false, not <type>". */
int mk_yaml_get_bool(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool *ret);
