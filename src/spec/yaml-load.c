/* A YAML document as a tree with positions, built from libyaml's event API
 * under limits, after an encoding check. See yaml-load.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "base/macro.h"
#include "spec/yaml-load.h"

struct anchor {
        char *name;
        struct mk_yaml_node *node;
};

/* Open addressing, so that many aliases stay linear. */
struct anchor_table {
        struct anchor *slots;
        size_t cap, n;
};

static uint64_t hash_str(const char *s) {
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char) *s) * 1099511628211ull;
        return h;
}

static struct anchor *anchor_slot(struct anchor *slots, size_t cap, const char *name) {
        for (size_t i = hash_str(name) & (cap - 1);; i = (i + 1) & (cap - 1))
                if (!slots[i].name || streq(slots[i].name, name))
                        return &slots[i];
}

static int anchor_put(struct anchor_table *t, const char *name, struct mk_yaml_node *node) {
        if ((t->n + 1) * 2 > t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 64;
                struct anchor *slots = calloc(cap, sizeof(*slots));
                if (!slots)
                        return -ENOMEM;
                for (size_t i = 0; i < t->cap; i++)
                        if (t->slots[i].name)
                                *anchor_slot(slots, cap, t->slots[i].name) = t->slots[i];
                free(t->slots);
                t->slots = slots;
                t->cap = cap;
        }
        struct anchor *a = anchor_slot(t->slots, t->cap, name);
        if (a->name) {
                /* YAML lets an anchor be redefined: later aliases see the new node. */
                a->node = node;
                return 0;
        }
        a->name = strdup(name);
        if (!a->name)
                return -ENOMEM;
        a->node = node;
        t->n++;
        return 0;
}

static struct mk_yaml_node *anchor_get(const struct anchor_table *t, const char *name) {
        if (t->cap == 0)
                return NULL;
        struct anchor *a = anchor_slot(t->slots, t->cap, name);
        return a->name ? a->node : NULL;
}

static void anchor_table_done(struct anchor_table *t) {
        for (size_t i = 0; i < t->cap; i++)
                free(t->slots[i].name);
        free(t->slots);
        *t = (struct anchor_table){0};
}

struct builder {
        const char *file;
        struct mk_error *e;
        struct mk_yaml_doc *doc;
        struct mk_yaml_node *stack[MK_YAML_MAX_DEPTH];
        size_t stack_alloc[MK_YAML_MAX_DEPTH];
        char *stack_anchor[MK_YAML_MAX_DEPTH];
        size_t depth;
        size_t total;
        struct anchor_table anchors;
};

static int build_error(struct builder *b, const yaml_mark_t *m, const char *fmt, ...) _printf_(3, 4);
static int build_error(struct builder *b, const yaml_mark_t *m, const char *fmt, ...) {
        char msg[MK_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (k >= (int) sizeof(msg))
                memcpy(msg + sizeof(msg) - 4, "...", 4);
        return mk_error_set_at(b->e, -EINVAL, b->file, (unsigned) m->line + 1, (unsigned) m->column + 1, "%s", msg);
}

static struct mk_yaml_node *node_new(struct builder *b, enum mk_yaml_kind kind, const yaml_mark_t *m,
                                     const yaml_char_t *tag) {
        struct mk_yaml_node *n = calloc(1, sizeof(*n));
        if (!n)
                return NULL;
        n->kind = kind;
        n->line = (unsigned) m->line + 1;
        n->column = (unsigned) m->column + 1;
        n->size = 1;
        n->next_alloc = b->doc->nodes;
        b->doc->nodes = n;
        if (tag) {
                n->tag = strdup((const char *) tag);
                if (!n->tag)
                        return NULL;
        }
        return n;
}

static int count_nodes(struct builder *b, size_t n, const yaml_mark_t *m) {
        if (n > MK_YAML_MAX_NODES - b->total)
                return build_error(b, m, "YAML document too large: more than %u nodes with aliases expanded",
                                   MK_YAML_MAX_NODES);
        b->total += n;
        return 0;
}

/* Adds a finished node (or an alias target) to the open container, or makes
 * it the root. */
static int attach(struct builder *b, struct mk_yaml_node *n) {
        if (b->depth == 0) {
                if (!b->doc->root)
                        b->doc->root = n;
                return 0;
        }
        size_t top = b->depth - 1;
        struct mk_yaml_node *p = b->stack[top];
        if (p->n_items == b->stack_alloc[top]) {
                size_t cap = b->stack_alloc[top] ? b->stack_alloc[top] * 2 : 8;
                struct mk_yaml_node **items = reallocarray(p->items, cap, sizeof(*items));
                if (!items)
                        return -ENOMEM;
                p->items = items;
                b->stack_alloc[top] = cap;
        }
        p->items[p->n_items++] = n;
        /* Bounded by MK_YAML_MAX_NODES through count_nodes(). */
        p->size += n->size;
        return 0;
}

static int register_anchor(struct builder *b, const yaml_char_t *anchor, struct mk_yaml_node *n) {
        if (!anchor)
                return 0;
        return anchor_put(&b->anchors, (const char *) anchor, n);
}

static int handle_event(struct builder *b, yaml_event_t *ev) {
        struct mk_yaml_node *n;
        int r;

        switch (ev->type) {
        case YAML_SCALAR_EVENT:
                r = count_nodes(b, 1, &ev->start_mark);
                if (r < 0)
                        return r;
                n = node_new(b, MK_YAML_SCALAR, &ev->start_mark, ev->data.scalar.tag);
                if (!n)
                        return -ENOMEM;
                n->plain = !ev->data.scalar.tag && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
                n->len = ev->data.scalar.length;
                n->value = malloc(n->len + 1);
                if (!n->value)
                        return -ENOMEM;
                memcpy(n->value, ev->data.scalar.value, n->len);
                n->value[n->len] = 0;
                r = register_anchor(b, ev->data.scalar.anchor, n);
                if (r < 0)
                        return r;
                return attach(b, n);

        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
                bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
                if (b->depth >= MK_YAML_MAX_DEPTH)
                        return build_error(b, &ev->start_mark, "YAML nesting deeper than %u levels",
                                           MK_YAML_MAX_DEPTH);
                r = count_nodes(b, 1, &ev->start_mark);
                if (r < 0)
                        return r;
                const yaml_char_t *tag = seq ? ev->data.sequence_start.tag : ev->data.mapping_start.tag;
                const yaml_char_t *anchor = seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
                n = node_new(b, seq ? MK_YAML_SEQUENCE : MK_YAML_MAPPING, &ev->start_mark, tag);
                if (!n)
                        return -ENOMEM;
                char *a = NULL;
                if (anchor) {
                        a = strdup((const char *) anchor);
                        if (!a)
                                return -ENOMEM;
                }
                b->stack[b->depth] = n;
                b->stack_alloc[b->depth] = 0;
                b->stack_anchor[b->depth] = a;
                b->depth++;
                return 0;
        }

        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: {
                if (b->depth == 0)
                        return build_error(b, &ev->start_mark, "unbalanced YAML events");
                b->depth--;
                n = b->stack[b->depth];
                _cleanup_free_ char *a = TAKE_PTR(b->stack_anchor[b->depth]);
                /* Registered only now, so an alias inside its own node is
                 * an unknown anchor rather than a cycle. */
                r = register_anchor(b, (const yaml_char_t *) a, n);
                if (r < 0)
                        return r;
                return attach(b, n);
        }

        case YAML_ALIAS_EVENT:
                n = anchor_get(&b->anchors, (const char *) ev->data.alias.anchor);
                if (!n)
                        return build_error(b, &ev->start_mark, "unknown anchor '%s' referenced",
                                           (const char *) ev->data.alias.anchor);
                r = count_nodes(b, n->size, &ev->start_mark);
                if (r < 0)
                        return r;
                return attach(b, n);

        default:
                return 0;
        }
}

/* Line and column of a byte offset, for reader errors (which carry no mark). */
static void offset_mark(const char *data, size_t len, size_t offset, yaml_mark_t *m) {
        m->line = m->column = 0;
        for (size_t i = 0; i < offset && i < len; i++) {
                if (data[i] == '\n') {
                        m->line++;
                        m->column = 0;
                } else
                        m->column++;
        }
}

static int parser_error(struct builder *b, yaml_parser_t *p, const char *data, size_t len) {
        if (p->error == YAML_MEMORY_ERROR)
                return mk_error_set_at(b->e, -ENOMEM, b->file, 0, 0, "out of memory parsing YAML");
        const char *problem = p->problem ? p->problem : "unknown error";
        if (p->error == YAML_READER_ERROR) {
                yaml_mark_t m;
                offset_mark(data, len, p->problem_offset, &m);
                if (p->problem_value != -1)
                        return build_error(b, &m, "invalid YAML: %s (#%X at byte %zu)", problem,
                                           (unsigned) p->problem_value, p->problem_offset);
                return build_error(b, &m, "invalid YAML: %s (at byte %zu)", problem, p->problem_offset);
        }
        if (p->context)
                return build_error(b, &p->problem_mark, "invalid YAML: %s (%s at line %zu, column %zu)", problem,
                                   p->context, p->context_mark.line + 1, p->context_mark.column + 1);
        return build_error(b, &p->problem_mark, "invalid YAML: %s", problem);
}

#define MK_CONVERT_HINT "migkit reads YAML as UTF-8, or UTF-16 with a byte-order mark: convert it, e.g. with iconv -f %s -t UTF-8"

static int encoding_error(struct mk_error *e, const char *file, unsigned line, unsigned column, const char *what,
                          const char *encoding) {
        return mk_error_set_at(e, -EINVAL, file, line, column, "%s; " MK_CONVERT_HINT, what, encoding);
}

/* One character of the text at line:column: a byte-order mark (U+FEFF) or
 * a NUL there is an error. */
static int check_char(uint32_t ch, unsigned line, unsigned column, const char *file, struct mk_error *e) {
        if (ch == 0xFEFF)
                return mk_error_set_at(e, -EINVAL, file, line, column,
                                       "a byte-order mark (U+FEFF) inside the text: only one is allowed, at the very "
                                       "start of the file (was it saved twice with one, or joined from two files?)");
        if (ch == 0)
                return mk_error_set_at(e, -EINVAL, file, line, column,
                                       "a NUL character: YAML text cannot hold one (is the file binary, or in an "
                                       "encoding such as UTF-16 without its byte-order mark?)");
        return 0;
}

/* Input libyaml (and go-yaml, the same reader) would misread, refused with
 * its position before parsing: UTF-32 (read as UTF-16 or as UTF-8), UTF-16
 * or UTF-32 without a byte-order mark (read as UTF-8: NUL bytes), a
 * byte-order mark after the start (a doubled one reads as an empty
 * document: "selected mig-config not present"), and NUL characters.
 * Accepted as libyaml reads them: UTF-8 with or without one leading BOM,
 * UTF-16LE/BE with one leading BOM. The encoding is guessed from the first
 * bytes as YAML 1.2 §5.2 says. Columns count characters, as libyaml's. */
static int check_encoding(const char *data, size_t len, const char *file, struct mk_error *e) {
        const unsigned char *u = (const unsigned char *) data;
        if (len >= 4 && u[0] == 0 && u[1] == 0 && u[2] == 0xFE && u[3] == 0xFF)
                return encoding_error(e, file, 1, 1, "the file is UTF-32BE (it starts with that byte-order mark)",
                                      "UTF-32BE");
        if (len >= 4 && u[0] == 0xFF && u[1] == 0xFE && u[2] == 0 && u[3] == 0)
                return encoding_error(e, file, 1, 1, "the file is UTF-32LE (it starts with that byte-order mark)",
                                      "UTF-32LE");
        unsigned line = 1, column = 1;
        if (len >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF))) {
                bool le = u[0] == 0xFF;
                for (size_t i = 2; i + 1 < len; i += 2) {
                        uint32_t unit = le ? (uint32_t) u[i] | (uint32_t) u[i + 1] << 8
                                           : (uint32_t) u[i] << 8 | (uint32_t) u[i + 1];
                        int r = check_char(unit, line, column, file, e);
                        if (r < 0)
                                return r;
                        if (unit == '\n') {
                                line++;
                                column = 1;
                        } else if (unit < 0xDC00 || unit > 0xDFFF) /* a low surrogate ends its character */
                                column++;
                }
                return 0;
        }
        if (len >= 4 && u[0] == 0 && u[1] == 0 && u[2] == 0 && u[3] != 0)
                return encoding_error(e, file, 1, 1, "the file looks like UTF-32BE without a byte-order mark",
                                      "UTF-32BE");
        if (len >= 4 && u[0] != 0 && u[1] == 0 && u[2] == 0 && u[3] == 0)
                return encoding_error(e, file, 1, 1, "the file looks like UTF-32LE without a byte-order mark",
                                      "UTF-32LE");
        if (len >= 2 && u[0] == 0 && u[1] != 0)
                return encoding_error(e, file, 1, 1, "the file looks like UTF-16BE without a byte-order mark",
                                      "UTF-16BE");
        if (len >= 2 && u[0] != 0 && u[1] == 0)
                return encoding_error(e, file, 1, 1, "the file looks like UTF-16LE without a byte-order mark",
                                      "UTF-16LE");
        for (size_t i = len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF ? 3 : 0; i < len; i++) {
                uint32_t ch = u[i];
                if (u[i] == 0xEF && i + 2 < len && u[i + 1] == 0xBB && u[i + 2] == 0xBF)
                        ch = 0xFEFF;
                int r = check_char(ch, line, column, file, e);
                if (r < 0)
                        return r;
                if (u[i] == '\n') {
                        line++;
                        column = 1;
                } else if ((u[i] & 0xC0) != 0x80) /* not a continuation byte */
                        column++;
        }
        return 0;
}

int mk_yaml_parse(const char *data, size_t len, const char *file, struct mk_yaml_doc **ret, struct mk_error *e) {
        struct builder b = {.file = file, .e = e};
        yaml_parser_t parser;
        int r = check_encoding(data, len, file, e);
        if (r < 0)
                return r;

        b.doc = calloc(1, sizeof(*b.doc));
        if (!b.doc)
                return mk_error_set_at(e, -ENOMEM, file, 0, 0, "out of memory parsing YAML");
        if (!yaml_parser_initialize(&parser)) {
                free(b.doc);
                return mk_error_set_at(e, -ENOMEM, file, 0, 0, "out of memory parsing YAML");
        }
        yaml_parser_set_input_string(&parser, (const unsigned char *) data, len);

        for (bool done = false; !done;) {
                yaml_event_t ev;
                if (!yaml_parser_parse(&parser, &ev)) {
                        r = parser_error(&b, &parser, data, len);
                        break;
                }
                /* Only the first document counts, as in go-yaml's Unmarshal. */
                done = ev.type == YAML_STREAM_END_EVENT || ev.type == YAML_DOCUMENT_END_EVENT;
                r = handle_event(&b, &ev);
                yaml_event_delete(&ev);
                if (r < 0)
                        break;
        }
        if (r == -ENOMEM)
                mk_error_set_at(e, r, file, 0, 0, "out of memory parsing YAML");

        yaml_parser_delete(&parser);
        for (size_t i = 0; i < b.depth; i++)
                free(b.stack_anchor[i]);
        anchor_table_done(&b.anchors);
        if (r < 0) {
                mk_yaml_doc_free(b.doc);
                return r;
        }
        *ret = b.doc;
        return 0;
}

int mk_yaml_parse_capped(const char *data, size_t len, const char *file, size_t max_bytes, struct mk_yaml_doc **ret,
                         struct mk_error *e) {
        if (len > max_bytes)
                return mk_error_set_at(e, -E2BIG, file, 0, 0, "'%s' is larger than %zu bytes", file, max_bytes);
        return mk_yaml_parse(data ? data : "", data ? len : 0, file, ret, e);
}

struct mk_yaml_doc *mk_yaml_doc_free(struct mk_yaml_doc *d) {
        if (!d)
                return NULL;
        for (struct mk_yaml_node *n = d->nodes, *next; n; n = next) {
                next = n->next_alloc;
                free(n->tag);
                free(n->value);
                free(n->items);
                free(n);
        }
        free(d);
        return NULL;
}
