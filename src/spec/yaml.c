/* YAML tree with positions over libyaml's event API, and go-yaml v2 /
 * sigs.k8s.io/yaml typing rules. See yaml.h. */
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "base/fileio.h"
#include "base/macro.h"
#include "base/parse.h"
#include "spec/yaml.h"

#define TAG_PREFIX "tag:yaml.org,2002:"

/* ---- errors and paths ---- */

_printf_(4, 0) static int verror(struct mk_yaml_ctx *c, int code, const struct mk_yaml_node *n, const char *fmt,
                                 va_list ap) {
        char msg[MK_ERROR_MSG_MAX];
        int k = vsnprintf(msg, sizeof(msg), fmt, ap);
        if (k >= (int) sizeof(msg))
                memcpy(msg + sizeof(msg) - 4, "...", 4);
        else if (k < 0)
                snprintf(msg, sizeof(msg), "(unformattable message)");
        if (!c->e)
                return code;
        mk_error_set_at(c->e, code, c->file, n ? n->line : 0, n ? n->column : 0, "%s", msg);
        snprintf(c->e->field, sizeof(c->e->field), "%s", c->path);
        return code;
}

int mk_yaml_error(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = verror(c, -EINVAL, n, fmt, ap);
        va_end(ap);
        return r;
}

int mk_yaml_error_code(struct mk_yaml_ctx *c, int code, const struct mk_yaml_node *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = verror(c, code, n, fmt, ap);
        va_end(ap);
        return r;
}

static size_t path_append(struct mk_yaml_ctx *c, const char *s) {
        size_t old = c->path_len, room = sizeof(c->path) - c->path_len, n = strlen(s);
        if (n < room) {
                memcpy(c->path + c->path_len, s, n + 1);
                c->path_len += n;
        } else {
                /* Cut, and mark the cut; the path only serves messages. */
                memcpy(c->path + c->path_len, s, room - 1);
                c->path_len = sizeof(c->path) - 1;
                c->path[c->path_len] = 0;
                memcpy(c->path + sizeof(c->path) - 4, "...", 4);
        }
        return old;
}

size_t mk_yaml_path_push_key(struct mk_yaml_ctx *c, const char *key) {
        size_t old = c->path_len;
        if (c->path_len > 0)
                path_append(c, ".");
        path_append(c, key);
        return old;
}

size_t mk_yaml_path_push_index(struct mk_yaml_ctx *c, size_t index) {
        char buf[32];
        snprintf(buf, sizeof(buf), "[%zu]", index);
        return path_append(c, buf);
}

void mk_yaml_path_pop(struct mk_yaml_ctx *c, size_t len) {
        if (len < sizeof(c->path)) {
                c->path_len = len;
                c->path[len] = 0;
        }
}

/* ---- building the tree ---- */

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

int mk_yaml_parse_walk(const char *data, size_t len, const char *file, size_t max_bytes, mk_yaml_walk_fn walk,
                       void *userdata, struct mk_error *e) {
        struct mk_yaml_ctx c = {.file = file ? file : "<input>", .e = e};
        _cleanup_(mk_yaml_doc_freep) struct mk_yaml_doc *doc = NULL;
        int r = mk_yaml_parse_capped(data, len, c.file, max_bytes, &doc, e);
        if (r < 0)
                return r;
        return walk(&c, doc->root, userdata);
}

int mk_yaml_load_walk(const char *path, size_t max_bytes, mk_yaml_walk_fn walk, void *userdata, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = mk_read_file(path, max_bytes, &data, &len, e);
        if (r < 0)
                return r;
        return mk_yaml_parse_walk(data, len, streq(path, "-") ? "<stdin>" : path, max_bytes, walk, userdata, e);
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

/* ---- typing (go-yaml v2 resolve.go) ---- */

static const struct {
        const char *s;
        enum mk_yaml_type type;
        bool b;
        double f;
} resolve_table[] = {
        {"y", MK_YAML_BOOL, true, 0},     {"Y", MK_YAML_BOOL, true, 0},     {"yes", MK_YAML_BOOL, true, 0},
        {"Yes", MK_YAML_BOOL, true, 0},   {"YES", MK_YAML_BOOL, true, 0},   {"true", MK_YAML_BOOL, true, 0},
        {"True", MK_YAML_BOOL, true, 0},  {"TRUE", MK_YAML_BOOL, true, 0},  {"on", MK_YAML_BOOL, true, 0},
        {"On", MK_YAML_BOOL, true, 0},    {"ON", MK_YAML_BOOL, true, 0},    {"n", MK_YAML_BOOL, false, 0},
        {"N", MK_YAML_BOOL, false, 0},    {"no", MK_YAML_BOOL, false, 0},   {"No", MK_YAML_BOOL, false, 0},
        {"NO", MK_YAML_BOOL, false, 0},   {"false", MK_YAML_BOOL, false, 0}, {"False", MK_YAML_BOOL, false, 0},
        {"FALSE", MK_YAML_BOOL, false, 0}, {"off", MK_YAML_BOOL, false, 0}, {"Off", MK_YAML_BOOL, false, 0},
        {"OFF", MK_YAML_BOOL, false, 0},  {"", MK_YAML_NULL, false, 0},     {"~", MK_YAML_NULL, false, 0},
        {"null", MK_YAML_NULL, false, 0}, {"Null", MK_YAML_NULL, false, 0}, {"NULL", MK_YAML_NULL, false, 0},
        {".nan", MK_YAML_FLOAT, false, NAN}, {".NaN", MK_YAML_FLOAT, false, NAN}, {".NAN", MK_YAML_FLOAT, false, NAN},
        {".inf", MK_YAML_FLOAT, false, INFINITY}, {".Inf", MK_YAML_FLOAT, false, INFINITY},
        {".INF", MK_YAML_FLOAT, false, INFINITY}, {"+.inf", MK_YAML_FLOAT, false, INFINITY},
        {"+.Inf", MK_YAML_FLOAT, false, INFINITY}, {"+.INF", MK_YAML_FLOAT, false, INFINITY},
        {"-.inf", MK_YAML_FLOAT, false, -INFINITY}, {"-.Inf", MK_YAML_FLOAT, false, -INFINITY},
        {"-.INF", MK_YAML_FLOAT, false, -INFINITY},
};

static bool is_digit(char ch) {
        return ch >= '0' && ch <= '9';
}

/* ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ (go-yaml's yamlStyleFloat) */
static bool yaml_style_float(const char *s) {
        if (*s == '+' || *s == '-')
                s++;
        if (*s == '.') {
                s++;
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
        } else {
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
                if (*s == '.') {
                        s++;
                        while (is_digit(*s))
                                s++;
                }
        }
        if (*s == 'e' || *s == 'E') {
                s++;
                if (*s == '+' || *s == '-')
                        s++;
                if (!is_digit(*s))
                        return false;
                while (is_digit(*s))
                        s++;
        }
        return *s == 0;
}

/* strtod in the C locale whatever the process locale; false when it
 * overflows (Go's ParseFloat reports a range error then). */
static bool parse_float_c(const char *s, double *ret) {
        locale_t loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t) 0);
        if (!loc)
                return false;
        char *end = NULL;
        errno = 0;
        double f = strtod_l(s, &end, loc);
        freelocale(loc);
        if (!end || *end != 0 || isinf(f))
                return false;
        *ret = f;
        return true;
}

/* Go's strconv.ParseInt(s, 0, 64), then ParseUint(s, 0, 64). */
static bool parse_go_int(const char *s, struct mk_yaml_scalar *ret) {
        bool neg = false, sign = false;
        const char *p = s;
        uint64_t u;

        if (*p == '+' || *p == '-') {
                neg = *p == '-';
                sign = true;
                p++;
        }
        if (mk_parse_u64_base(p, 0, &u) < 0)
                return false;
        if (neg) {
                if (u > (uint64_t) INT64_MAX + 1)
                        return false;
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT,
                                               .i = u == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) u};
                return true;
        }
        if (u <= INT64_MAX) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT, .i = (int64_t) u};
                return true;
        }
        if (sign) /* ParseUint takes no sign */
                return false;
        *ret = (struct mk_yaml_scalar){.type = MK_YAML_INT, .is_unsigned = true, .u = u};
        return true;
}

/* Resolution of a plain scalar (go-yaml v2 resolve() with an empty tag). */
static int resolve_plain(const char *s, size_t len, struct mk_yaml_scalar *ret) {
        if (strlen(s) != len) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(resolve_table); i++)
                if (streq(s, resolve_table[i].s)) {
                        *ret = (struct mk_yaml_scalar){
                                .type = resolve_table[i].type, .b = resolve_table[i].b, .f = resolve_table[i].f};
                        return 0;
                }

        if (s[0] == '.') {
                double f;
                if (yaml_style_float(s) && parse_float_c(s, &f)) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_FLOAT, .f = f};
                        return 0;
                }
        } else if (s[0] == '+' || s[0] == '-' || is_digit(s[0])) {
                /* go-yaml drops every '_' before trying numbers. */
                _cleanup_free_ char *plain = malloc(len + 1);
                if (!plain)
                        return -ENOMEM;
                size_t k = 0;
                for (size_t i = 0; i < len; i++)
                        if (s[i] != '_')
                                plain[k++] = s[i];
                plain[k] = 0;

                if (parse_go_int(plain, ret))
                        return 0;
                double f;
                if (yaml_style_float(plain) && parse_float_c(plain, &f)) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_FLOAT, .f = f};
                        return 0;
                }
        }
        *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
        return 0;
}

const char *mk_yaml_type_json(enum mk_yaml_type t) {
        switch (t) {
        case MK_YAML_NULL:
                return "null";
        case MK_YAML_BOOL:
                return "bool";
        case MK_YAML_INT:
        case MK_YAML_FLOAT:
                return "number";
        case MK_YAML_STR:
                return "string";
        case MK_YAML_SEQ:
                return "array";
        case MK_YAML_MAP:
                return "object";
        }
        return "value";
}

static const char *short_tag(const char *tag) {
        static const size_t n = sizeof(TAG_PREFIX) - 1;
        return strncmp(tag, TAG_PREFIX, n) == 0 ? tag + n : NULL;
}

int mk_yaml_resolve(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_scalar *ret) {
        const char *t = n->tag ? short_tag(n->tag) : NULL;

        if (n->kind != MK_YAML_SCALAR) {
                bool seq = n->kind == MK_YAML_SEQUENCE;
                if (n->tag && !(t && streq(t, seq ? "seq" : "map")))
                        return mk_yaml_error(c, n, "unsupported YAML tag '%s'", n->tag);
                *ret = (struct mk_yaml_scalar){.type = seq ? MK_YAML_SEQ : MK_YAML_MAP};
                return 0;
        }

        if (!n->tag) {
                if (!n->plain) {
                        *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                        return 0;
                }
                int r = resolve_plain(n->value, n->len, ret);
                if (r < 0)
                        return mk_yaml_error_code(c, r, n, "out of memory");
                return 0;
        }

        /* "!" is the non-specific tag: a string, as in go-yaml. */
        if (streq(n->tag, "!") || (t && streq(t, "str"))) {
                *ret = (struct mk_yaml_scalar){.type = MK_YAML_STR};
                return 0;
        }
        enum mk_yaml_type want;
        if (t && streq(t, "null"))
                want = MK_YAML_NULL;
        else if (t && streq(t, "bool"))
                want = MK_YAML_BOOL;
        else if (t && streq(t, "int"))
                want = MK_YAML_INT;
        else if (t && streq(t, "float"))
                want = MK_YAML_FLOAT;
        else
                return mk_yaml_error(c, n, "unsupported YAML tag '%s'", n->tag);

        struct mk_yaml_scalar v;
        int r = resolve_plain(n->value, n->len, &v);
        if (r < 0)
                return mk_yaml_error_code(c, r, n, "out of memory");
        if (want == MK_YAML_FLOAT && v.type == MK_YAML_INT) {
                v.f = v.is_unsigned ? (double) v.u : (double) v.i;
                v.type = MK_YAML_FLOAT;
        }
        if (v.type != want)
                return mk_yaml_error(c, n, "cannot decode '%s' as a !!%s", n->value, t);
        *ret = v;
        return 0;
}

/* ---- Go float formatting ---- */

int mk_yaml_format_float32(double f, char *buf, size_t size) {
        float x = (float) f;
        int k;

        if (isnan(x))
                k = snprintf(buf, size, "NaN");
        else if (isinf(x))
                k = snprintf(buf, size, "%sInf", x < 0 ? "-" : "+");
        else if (x == 0)
                k = snprintf(buf, size, "%s0", signbit(x) ? "-" : "");
        else {
                /* Shortest digits that read back as the same float32. */
                char e[32];
                for (int prec = 0; prec < 9; prec++) {
                        snprintf(e, sizeof(e), "%.*e", prec, (double) x);
                        if (strtof(e, NULL) == x)
                                break;
                }
                /* e is "-d.ddde+XX": split into sign, digits, exponent. */
                const char *p = e;
                bool neg = *p == '-';
                if (neg)
                        p++;
                char digits[16];
                size_t nd = 0;
                for (; *p && *p != 'e'; p++)
                        if (is_digit(*p) && nd < sizeof(digits) - 1)
                                digits[nd++] = *p;
                digits[nd] = 0;
                int exp = 0;
                if (*p == 'e') {
                        bool eneg = p[1] == '-';
                        for (p += 2; is_digit(*p); p++)
                                exp = exp * 10 + (*p - '0');
                        if (eneg)
                                exp = -exp;
                }

                /* strconv's %g with shortest precision: %e when exp < -4 or
                 * exp >= 6 (eprec is 6 for the shortest form), else %f. */
                char out[64];
                size_t o = 0;
                if (neg)
                        out[o++] = '-';
                if (exp < -4 || exp >= 6) {
                        out[o++] = digits[0];
                        if (nd > 1) {
                                out[o++] = '.';
                                for (size_t i = 1; i < nd; i++)
                                        out[o++] = digits[i];
                        }
                        snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
                        o += strlen(out + o);
                } else if (exp < 0) {
                        out[o++] = '0';
                        out[o++] = '.';
                        for (int i = 0; i < -exp - 1; i++)
                                out[o++] = '0';
                        for (size_t i = 0; i < nd; i++)
                                out[o++] = digits[i];
                } else {
                        size_t int_digits = (size_t) exp + 1;
                        for (size_t i = 0; i < int_digits; i++)
                                out[o++] = i < nd ? digits[i] : '0';
                        if (nd > int_digits) {
                                out[o++] = '.';
                                for (size_t i = int_digits; i < nd; i++)
                                        out[o++] = digits[i];
                        }
                }
                out[o] = 0;
                k = snprintf(buf, size, "%s", out);
        }
        if (k < 0 || (size_t) k >= size)
                return -ENOBUFS;
        return k;
}

int mk_yaml_to_string(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool key, char **ret) {
        struct mk_yaml_scalar v;
        char buf[64];
        const char *s;
        int r;

        r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        switch (v.type) {
        case MK_YAML_STR:
                if (strlen(n->value) != n->len)
                        return mk_yaml_error(c, n, "%s contains a NUL byte", key ? "key" : "string");
                s = n->value;
                break;
        case MK_YAML_NULL:
                if (key)
                        return mk_yaml_error(c, n, "unsupported map key: null");
                s = "";
                break;
        case MK_YAML_BOOL:
                s = v.b ? "true" : "false";
                break;
        case MK_YAML_INT:
                if (v.is_unsigned)
                        snprintf(buf, sizeof(buf), "%" PRIu64, v.u);
                else
                        snprintf(buf, sizeof(buf), "%" PRId64, v.i);
                s = buf;
                break;
        case MK_YAML_FLOAT:
                if (mk_yaml_format_float32(v.f, buf, sizeof(buf)) < 0)
                        return mk_yaml_error(c, n, "cannot format number");
                s = buf;
                if (key) {
                        if (streq(buf, "+Inf"))
                                s = ".inf";
                        else if (streq(buf, "-Inf"))
                                s = "-.inf";
                        else if (streq(buf, "NaN"))
                                s = ".nan";
                }
                break;
        default:
                if (key)
                        return mk_yaml_error(c, n, "invalid map key: a %s",
                                             v.type == MK_YAML_SEQ ? "sequence" : "mapping");
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type string",
                                     mk_yaml_type_json(v.type));
        }
        char *copy = strdup(s);
        if (!copy)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        *ret = copy;
        return 0;
}

/* ---- mappings ---- */

static bool is_merge_key(const struct mk_yaml_node *k) {
        if (k->kind != MK_YAML_SCALAR || !streq(k->value, "<<"))
                return false;
        return k->plain || (k->tag && streq(k->tag, TAG_PREFIX "merge"));
}

struct pair_vec {
        struct mk_yaml_pair *v;
        size_t n, cap;
        size_t n_explicit;
};

static void pair_vec_done(struct pair_vec *p) {
        for (size_t i = 0; i < p->n; i++)
                free(p->v[i].name);
        free(p->v);
        *p = (struct pair_vec){0};
}

static int pair_vec_push(struct pair_vec *p, const struct mk_yaml_node *k, const struct mk_yaml_node *v, char *name) {
        if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 16;
                struct mk_yaml_pair *a = reallocarray(p->v, cap, sizeof(*a));
                if (!a)
                        return -ENOMEM;
                p->v = a;
                p->cap = cap;
        }
        p->v[p->n++] = (struct mk_yaml_pair){.key = k, .value = v, .name = name};
        return 0;
}

static int index_by_name(const void *a, const void *b, void *userdata) {
        const struct mk_yaml_pair *v = userdata;
        size_t x = *(const size_t *) a, y = *(const size_t *) b;
        int r = strcmp(v[x].name, v[y].name);
        if (r != 0)
                return r;
        return x < y ? -1 : x > y;
}

/* Keeps the first pair of each name (explicit pairs come first, then merged
 * ones in precedence order); two explicit pairs of one name are an error at
 * the later one. Sorting keeps this O(n log n) for large mappings. */
static int dedup(struct mk_yaml_ctx *c, struct pair_vec *p) {
        if (p->n < 2)
                return 0;
        _cleanup_free_ size_t *idx = reallocarray(NULL, p->n, sizeof(size_t));
        if (!idx)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; i < p->n; i++)
                idx[i] = i;
        qsort_r(idx, p->n, sizeof(size_t), index_by_name, p->v);

        size_t dup = SIZE_MAX;
        for (size_t i = 1; i < p->n; i++)
                if (streq(p->v[idx[i]].name, p->v[idx[i - 1]].name) && idx[i] < p->n_explicit &&
                    idx[i - 1] < p->n_explicit && (i < 2 || !streq(p->v[idx[i]].name, p->v[idx[i - 2]].name)))
                        dup = MIN(dup, idx[i]);
        if (dup != SIZE_MAX) {
                size_t old = mk_yaml_path_push_key(c, p->v[dup].name);
                int r = mk_yaml_error(c, p->v[dup].key, "duplicate key: %s", p->v[dup].name);
                mk_yaml_path_pop(c, old);
                return r;
        }

        /* Mark the losers, then compact in the original order. */
        size_t keep = 0;
        bool *drop = calloc(p->n, sizeof(bool));
        if (!drop)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        for (size_t i = 1; i < p->n; i++)
                if (streq(p->v[idx[i]].name, p->v[idx[i - 1]].name))
                        drop[idx[i]] = true;
        for (size_t i = 0; i < p->n; i++) {
                if (drop[i]) {
                        free(p->v[i].name);
                        continue;
                }
                p->v[keep++] = p->v[i];
        }
        free(drop);
        p->n = keep;
        return 0;
}

static int map_collect(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, unsigned merge_depth,
                       struct pair_vec *out);

static int merge_source(struct mk_yaml_ctx *c, const struct mk_yaml_node *src, unsigned merge_depth,
                        struct pair_vec *out) {
        if (src->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, src, "map merge requires map or sequence of maps as the value");
        if (merge_depth >= MK_YAML_MAX_MERGE_DEPTH)
                return mk_yaml_error(c, src, "YAML merge keys nested deeper than %u levels", MK_YAML_MAX_MERGE_DEPTH);

        _cleanup_(pair_vec_done) struct pair_vec sub = {0};
        int r = map_collect(c, src, merge_depth + 1, &sub);
        if (r < 0)
                return r;
        for (size_t i = 0; i < sub.n; i++) {
                if (out->n >= MK_YAML_MAX_KEYS)
                        return mk_yaml_error(c, src, "mapping with more than %u keys", MK_YAML_MAX_KEYS);
                r = pair_vec_push(out, sub.v[i].key, sub.v[i].value, sub.v[i].name);
                if (r < 0)
                        return mk_yaml_error_code(c, r, src, "out of memory");
                sub.v[i].name = NULL;
        }
        return 0;
}

static int map_collect(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, unsigned merge_depth,
                       struct pair_vec *out) {
        int r;

        struct mk_yaml_scalar t;
        r = mk_yaml_resolve(c, n, &t); /* checks the tag */
        if (r < 0)
                return r;
        if (n->n_items / 2 > MK_YAML_MAX_KEYS)
                return mk_yaml_error(c, n, "mapping with more than %u keys", MK_YAML_MAX_KEYS);

        bool has_merge = false;
        for (size_t i = 0; i + 1 < n->n_items; i += 2) {
                const struct mk_yaml_node *k = n->items[i], *v = n->items[i + 1];
                if (is_merge_key(k)) {
                        has_merge = true;
                        continue;
                }
                char *name;
                r = mk_yaml_to_string(c, k, true, &name);
                if (r < 0)
                        return r;
                r = pair_vec_push(out, k, v, name);
                if (r < 0) {
                        free(name);
                        return mk_yaml_error_code(c, r, k, "out of memory");
                }
        }
        out->n_explicit = out->n;

        if (has_merge)
                for (size_t i = 0; i + 1 < n->n_items; i += 2) {
                        const struct mk_yaml_node *k = n->items[i], *v = n->items[i + 1];
                        if (!is_merge_key(k))
                                continue;
                        if (v->kind == MK_YAML_SEQUENCE) {
                                for (size_t j = 0; j < v->n_items; j++) {
                                        r = merge_source(c, v->items[j], merge_depth, out);
                                        if (r < 0)
                                                return r;
                                }
                        } else {
                                r = merge_source(c, v, merge_depth, out);
                                if (r < 0)
                                        return r;
                        }
                }

        return dedup(c, out);
}

int mk_yaml_map_load(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, struct mk_yaml_map *ret) {
        struct pair_vec p = {0};

        if (n->kind != MK_YAML_MAPPING)
                return mk_yaml_error(c, n, "expected a mapping");
        int r = map_collect(c, n, 0, &p);
        if (r < 0) {
                pair_vec_done(&p);
                return r;
        }
        *ret = (struct mk_yaml_map){.pairs = p.v, .n = p.n};
        return 0;
}

void mk_yaml_map_done(struct mk_yaml_map *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++)
                free(m->pairs[i].name);
        free(m->pairs);
        *m = (struct mk_yaml_map){0};
}

const struct mk_yaml_pair *mk_yaml_map_find(const struct mk_yaml_map *m, const char *name) {
        for (size_t i = 0; i < m->n; i++)
                if (streq(m->pairs[i].name, name))
                        return &m->pairs[i];
        return NULL;
}

int mk_yaml_map_load_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                           const char *const *known, bool list_known, struct mk_yaml_map *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_MAP)
                return mk_yaml_error(c, n, "%s must be a mapping, not %s", what, mk_yaml_type_json(v.type));
        r = mk_yaml_map_load(c, n, ret);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ret->n; i++) {
                bool ok = false;
                for (const char *const *k = known; *k && !ok; k++)
                        ok = streq(*k, ret->pairs[i].name);
                if (!ok) {
                        size_t old = mk_yaml_path_push_key(c, ret->pairs[i].name);
                        char list[256] = "";
                        size_t used = 0;
                        for (const char *const *k = known; *k; k++) {
                                int m = snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", *k);
                                if (m < 0 || (size_t) m >= sizeof(list) - used)
                                        break;
                                used += (size_t) m;
                        }
                        size_t n_known = 0;
                        while (known[n_known])
                                n_known++;
                        const char *near = mk_closest_word(ret->pairs[i].name, known, n_known);
                        if (near)
                                r = mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s' (did you mean '%s'?%s%s)",
                                                  ret->pairs[i].name, near, list_known ? " known: " : "",
                                                  list_known ? list : "");
                        else
                                r = list_known ? mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s' (known: %s)",
                                                               ret->pairs[i].name, list)
                                               : mk_yaml_error(c, ret->pairs[i].key, "unknown field '%s'",
                                                               ret->pairs[i].name);
                        mk_yaml_path_pop(c, old);
                        mk_yaml_map_done(ret);
                        return r;
                }
        }
        return 0;
}

int mk_yaml_map_each(struct mk_yaml_ctx *c, const struct mk_yaml_map *m, mk_yaml_field_fn field, void *userdata) {
        for (size_t i = 0; i < m->n; i++) {
                size_t old = mk_yaml_path_push_key(c, m->pairs[i].name);
                int r = field(c, &m->pairs[i], userdata);
                mk_yaml_path_pop(c, old);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mk_yaml_walk_known(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what,
                       const char *const *known, bool list_known, mk_yaml_field_fn field, void *userdata) {
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        int r = mk_yaml_map_load_known(c, n, what, known, list_known, &m);
        if (r < 0)
                return r;
        return mk_yaml_map_each(c, &m, field, userdata);
}

int mk_yaml_get_str(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *what, char **ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_STR)
                return mk_yaml_error(c, n, "%s must be a string, not %s", what, mk_yaml_type_json(v.type));
        if (strlen(n->value) != n->len)
                return mk_yaml_error(c, n, "%s contains a NUL byte", what);
        char *s = strdup(n->value);
        if (!s)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        *ret = s;
        return 0;
}

int mk_yaml_get_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, size_t *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_SEQ && v.type != MK_YAML_NULL)
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type %s",
                                     mk_yaml_type_json(v.type), go_type);
        *ret = v.type == MK_YAML_SEQ ? n->n_items : 0;
        return 0;
}

int mk_yaml_get_map(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *go_type, struct mk_yaml_map *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type == MK_YAML_NULL) {
                *ret = (struct mk_yaml_map) {0};
                return 0;
        }
        if (v.type != MK_YAML_MAP)
                return mk_yaml_error(c, n, "json: cannot unmarshal %s into Go value of type %s",
                                     mk_yaml_type_json(v.type), go_type);
        r = mk_yaml_map_load(c, n, ret);
        return r < 0 ? r : 1;
}

int mk_yaml_check_version(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, const char *want) {
        _cleanup_free_ char *ver = NULL;
        int r = mk_yaml_get_str(c, n, "version", &ver);
        if (r < 0)
                return r;
        if (!streq(ver, want))
                return mk_yaml_error(c, n, "unsupported version '%s' (want %s)", ver, want);
        return 0;
}

int mk_yaml_get_bool(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool *ret) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        if (v.type != MK_YAML_BOOL) {
                if (n->kind == MK_YAML_SCALAR && n->value)
                        return mk_yaml_error(c, n, "must be true or false, not %s '%.40s%s'", mk_yaml_type_json(v.type),
                                             n->value, n->len > 40 ? "..." : "");
                return mk_yaml_error(c, n, "must be true or false, not %s", mk_yaml_type_json(v.type));
        }
        *ret = v.b;
        return 0;
}
