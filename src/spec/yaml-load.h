/* A YAML document as a tree with positions, built from libyaml's event API
 * (the typing rules applied to it are yaml-scalar.h's; yaml.h lists the
 * pieces).
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

#include "base/error.h"

#define MK_YAML_MAX_NODES 100000u /* nodes with aliases expanded */
#define MK_YAML_MAX_DEPTH 64u     /* nesting of sequences and mappings */

/* Explicit tags are kept expanded under this prefix ("!!int" is
 * MK_YAML_TAG_PREFIX "int"). */
#define MK_YAML_TAG_PREFIX "tag:yaml.org,2002:"

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
