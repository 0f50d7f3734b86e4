/* The extender protocol's wire format (wire.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "kube/json.h"
#include "kube/object.h"
#include "sched/decide.h"
#include "sched/request.h"
#include "sched/wire.h"

/* --- reading ExtenderArgs --- */

int mk_sched_wire_pod(const json_t *args, const struct mk_sched_config *cfg, struct mk_pod_request *req,
                      const char **ret_uid, const json_t **ret_pod, char *err, size_t size) {
        const json_t *pod = mk_json_get_ci(args, "Pod");
        if (!json_is_object(pod)) {
                snprintf(err, size, "ExtenderArgs has no Pod");
                return -EINVAL;
        }
        struct mk_error e = {0};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
        char where[128];
        if (mk_kube_object_has_nul(pod, where, sizeof(where))) {
                for (char *p = where; *p; p++)
                        if ((unsigned char) *p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\')
                                *p = '?';
                snprintf(err, size, "pod: %s holds a NUL byte (\\u0000)", where);
                return -EINVAL;
        }
        if (mk_pod_request_parse(pod, cfg, req, &e) < 0) {
                snprintf(err, size, "pod request: %s", mk_error_format(&e, buf, sizeof(buf)));
                return -EINVAL;
        }
        *ret_uid = mk_kube_meta(pod, "uid");
        *ret_pod = pod;
        return 0;
}

int mk_sched_wire_candidates(const json_t *args, struct mk_sched_cand **ret, size_t *ret_n, bool *ret_by_name,
                             char *err, size_t size) {
        const json_t *names = mk_json_get_ci(args, "NodeNames");
        const json_t *nodes = mk_json_get_ci(args, "Nodes");
        const json_t *items = json_is_object(nodes) ? mk_json_get_ci(nodes, "items") : NULL;
        bool by_name = json_is_array(names);
        size_t n = by_name ? json_array_size(names) : json_is_array(items) ? json_array_size(items) : 0;
        if (!by_name && !json_is_array(items)) {
                snprintf(err, size, "ExtenderArgs has neither NodeNames nor Nodes.items");
                return -EINVAL;
        }
        if (n > MK_MAX_EXTENDER_NODES) {
                snprintf(err, size, "more than %u nodes in one request", MK_MAX_EXTENDER_NODES);
                return -E2BIG;
        }
        struct mk_sched_cand *c = calloc(n + 1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (by_name)
                        c[i].name = json_string_value(json_array_get(names, i));
                else {
                        c[i].object = json_array_get(items, i);
                        c[i].name = mk_kube_meta(c[i].object, "name");
                }
                /* A name too long for Kubernetes is decided (failed) with the
                 * others, not an error of the whole request. */
                if (!c[i].name || !(c[i].len = strlen(c[i].name))) {
                        snprintf(err, size, "node %zu has no valid name", i);
                        free(c);
                        return -EINVAL;
                }
        }
        *ret = c;
        *ret_n = n;
        *ret_by_name = by_name;
        return 0;
}

void mk_sched_names_done(struct mk_sched_names *pn) {
        free(pn->buf);
        free(pn->cands);
        *pn = (struct mk_sched_names) {0};
}

static const char *skip_ws(const char *p, const char *end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
                p++;
        return p;
}

/* Bytes by class, looked up per byte of every name of a request (1,000s):
 * NAME_BYTE a byte of a plain name (printable ASCII but blank, quote and
 * backslash), JSON_PLAIN one a JSON string holds as it is (0x20..0x7f but
 * quote and backslash), STRING_TEXT one inside a JSON string that neither
 * ends it nor starts an escape (all but quote and backslash). */
enum { NAME_BYTE = 1, JSON_PLAIN = 2, STRING_TEXT = 4 };
static const uint8_t byte_class[256] = {
        [0x00 ... 0x1f] = STRING_TEXT,
        [0x20] = JSON_PLAIN | STRING_TEXT,
        [0x21] = NAME_BYTE | JSON_PLAIN | STRING_TEXT,
        [0x23 ... 0x5b] = NAME_BYTE | JSON_PLAIN | STRING_TEXT,
        [0x5d ... 0x7e] = NAME_BYTE | JSON_PLAIN | STRING_TEXT,
        [0x7f] = JSON_PLAIN | STRING_TEXT,
        [0x80 ... 0xff] = STRING_TEXT,
};

/* The same classes eight bytes at a time (names and reasons run to 1,000s
 * of bytes per answer): a mask with the top bit of each byte set that is
 * not of the class, exact up to the lowest set byte (a borrow can flag
 * bytes above a flagged one, never below), so __builtin_ctzll(mask) / 8
 * is the first byte outside the class. Loaded little-endian. */
#define BYTES(c) (UINT64_C(0x0101010101010101) * (uint8_t) (c))
static inline uint64_t load8(const char *p) {
        uint64_t x;
        memcpy(&x, p, sizeof(x));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        x = __builtin_bswap64(x);
#endif
        return x;
}
static inline uint64_t bytes_zero(uint64_t x) {
        return (x - BYTES(1)) & ~x & BYTES(0x80);
}
static inline uint64_t bytes_below(uint64_t x, uint8_t n) { /* n <= 0x80 */
        return (x - BYTES(n)) & ~x & BYTES(0x80);
}
static inline uint64_t not_in_class(uint64_t x, unsigned cls) {
        uint64_t m = bytes_zero(x ^ BYTES('"')) | bytes_zero(x ^ BYTES('\\'));
        if (cls == STRING_TEXT)
                return m;
        m |= x & BYTES(0x80);
        if (cls == JSON_PLAIN)
                return m | bytes_below(x, 0x20);
        return m | bytes_below(x, 0x21) | bytes_zero(x ^ BYTES(0x7f)); /* NAME_BYTE */
}

/* The length (at most n) of the run of bytes of class `cls` that starts at
 * p. Eight-byte blocks may read past n up to `avail` bytes (the rest of a
 * body), never further. Inlined with a constant class. */
static inline size_t class_run(const char *p, size_t n, size_t avail, unsigned cls) {
        size_t k = 0;
        for (; k < n && avail - k >= 8; k += 8) {
                uint64_t m = not_in_class(load8(p + k), cls);
                if (m)
                        return MIN(n, k + (size_t) __builtin_ctzll(m) / 8);
        }
        while (k < n && byte_class[(uint8_t) p[k]] & cls)
                k++;
        return MIN(k, n);
}

/* The length of the run of JSON_PLAIN bytes that starts p[0..n). */
static size_t json_plain_run(const char *p, size_t n) {
        return class_run(p, n, n, JSON_PLAIN);
}

/* A plain name at p (after its opening quote): its length, the closing
 * quote at p[len]; 0 when it is empty, too long, or holds anything but
 * printable ASCII other than quotes and backslashes. */
static size_t plain_name(const char *p, const char *end) {
        size_t max = MIN((size_t) (end - p), (size_t) MK_K8S_NAME_MAX);
        size_t k = class_run(p, max, (size_t) (end - p), NAME_BYTE);
        return p + k < end && p[k] == '"' && k < MK_K8S_NAME_MAX ? k : 0;
}

bool mk_sched_scan_names(const char *body, size_t len, struct mk_sched_names *ret) {
        const char *end = body + len, *p = skip_ws(body, end), *arr = NULL;
        if (p == end || *p != '{')
                return false;
        size_t depth = 0;
        char last = 0; /* the last structural character outside strings */
        while (p < end && !arr) {
                char c = *p;
                if (c == '"') {
                        const char *q = p + 1;
                        while (q < end && *q != '"')
                                q += *q == '\\' ? 2 : 1;
                        if (q >= end)
                                return false;
                        bool key = depth == 1 && (last == '{' || last == ',');
                        if (key && q - p - 1 == 9 && memcmp(p + 1, "NodeNames", 9) == 0) {
                                const char *v = skip_ws(q + 1, end);
                                if (v == end || *v != ':')
                                        return false;
                                v = skip_ws(v + 1, end);
                                if (v == end || *v != '[')
                                        return false;
                                arr = v;
                        }
                        p = q + 1;
                        last = '"';
                        continue;
                }
                if (c == '{' || c == '[')
                        depth++;
                else if (c == '}' || c == ']') {
                        if (depth == 0)
                                return false;
                        depth--;
                }
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
                        last = c;
                p++;
        }
        if (!arr)
                return false;
        /* One pass over the array: each name checked and copied (the names
         * with their NULs fit in the array's bytes; the list grows). */
        struct mk_sched_names pn = {.start = (size_t) (arr - body)};
        size_t cap = 0;
        char *out = pn.buf = malloc((size_t) (end - arr));
        if (!pn.buf)
                return false;
        p = skip_ws(arr + 1, end);
        if (p < end && *p == ']')
                p++;
        else
                for (;;) {
                        size_t k = p < end && *p == '"' ? plain_name(p + 1, end) : 0;
                        if (k == 0 || pn.n + 1 > MK_MAX_EXTENDER_NODES)
                                goto fail;
                        if (pn.n + 1 >= cap) { /* room for the name and the closing empty entry */
                                size_t ncap = cap ? 2 * cap : 1024;
                                struct mk_sched_cand *nc = realloc(pn.cands, ncap * sizeof(*nc));
                                if (!nc)
                                        goto fail;
                                pn.cands = nc;
                                cap = ncap;
                        }
                        memcpy(out, p + 1, k);
                        out[k] = 0;
                        pn.cands[pn.n++] = (struct mk_sched_cand) {.name = out, .len = k, .plain = true};
                        out += k + 1;
                        p = skip_ws(p + k + 2, end);
                        if (p < end && *p == ']') {
                                p++;
                                break;
                        }
                        if (p == end || *p != ',')
                                goto fail;
                        p = skip_ws(p + 1, end);
                }
        if (!pn.cands && !(pn.cands = malloc(sizeof(*pn.cands))))
                goto fail;
        pn.cands[pn.n] = (struct mk_sched_cand) {0};
        pn.end = (size_t) (p - body);
        *ret = pn;
        return true;
fail:
        mk_sched_names_done(&pn);
        return false;
}

/* --- counting a body as it arrives --- */

enum { ROLE_NONE, ROLE_LIST, ROLE_NODES };

static bool is_array_at(const struct mk_sched_body_count *c, unsigned depth) {
        return depth > 0 && (c->arrays >> (depth - 1)) & 1;
}

static inline int count_value(struct mk_sched_body_count *c, size_t max_nodes, size_t max_values, char *err, size_t size) {
        if (++c->values > max_values) {
                snprintf(err, size, "more than %zu JSON values in one request", max_values);
                return -E2BIG;
        }
        if (c->depth >= 1 && c->depth <= 3 && c->role[c->depth] == ROLE_LIST && is_array_at(c, c->depth) &&
            ++c->nodes > max_nodes) {
                snprintf(err, size, "more than %zu nodes in one request", max_nodes);
                return -E2BIG;
        }
        return 0;
}

static int count_open(struct mk_sched_body_count *c, char ch, char *err, size_t size) {
        if (c->depth >= MK_SCHED_COUNT_DEPTH) {
                snprintf(err, size, "request nested deeper than %u", MK_SCHED_COUNT_DEPTH);
                return -E2BIG;
        }
        unsigned d = ++c->depth;
        bool array = ch == '[';
        c->arrays = array ? c->arrays | (UINT64_C(1) << (d - 1)) : c->arrays & ~(UINT64_C(1) << (d - 1));
        if (d <= 3) {
                uint8_t role = ROLE_NONE;
                if (d == 2 && !is_array_at(c, 1))
                        role = array && strcasecmp(c->last_key[1], "NodeNames") == 0 ? ROLE_LIST
                               : !array && strcasecmp(c->last_key[1], "Nodes") == 0 ? ROLE_NODES
                                                                               : ROLE_NONE;
                else if (d == 3 && c->role[2] == ROLE_NODES && array && strcasecmp(c->last_key[2], "items") == 0)
                        role = ROLE_LIST;
                c->role[d] = role;
        }
        c->want_key = !array;
        return 0;
}

int mk_sched_body_count_feed(struct mk_sched_body_count *c, const char *p, size_t len, size_t max_nodes,
                             size_t max_values, char *err, size_t size) {
        int r = 0;
        for (size_t i = 0; i < len && r >= 0; i++) {
                char ch = p[i];
                if (c->in_string) {
                        /* A value's text (most of a body: the node names), up to the next
                         * quote or backslash at once instead of a byte at a time. */
                        if (!c->escape && !c->is_key && ch != '"' && ch != '\\') {
                                const char *q = p + i + 1, *end = p + len;
                                q += class_run(q, (size_t) (end - q), (size_t) (end - q), STRING_TEXT);
                                if (q == end)
                                        break;
                                i = (size_t) (q - p);
                                ch = *q;
                        }
                        if (c->escape)
                                c->escape = false;
                        else if (ch == '\\')
                                c->escape = true;
                        else if (ch == '"') {
                                c->in_string = false;
                                if (c->is_key && c->depth >= 1 && c->depth <= 2) {
                                        c->key[c->key_len < sizeof(c->key) ? c->key_len : 0] = 0;
                                        memcpy(c->last_key[c->depth], c->key, sizeof(c->key));
                                }
                        } else if (c->is_key && c->key_len++ < sizeof(c->key) - 1)
                                c->key[c->key_len - 1] = ch;
                        continue;
                }
                bool delim = ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ',' || ch == ':' ||
                             ch == ']' || ch == '}' || ch == '{' || ch == '[' || ch == '"';
                if (c->in_scalar && !delim)
                        continue;
                c->in_scalar = false;
                switch (ch) {
                case ' ':
                case '\t':
                case '\n':
                case '\r':
                        break;
                case '"':
                        c->is_key = c->want_key && !is_array_at(c, c->depth);
                        c->key_len = 0;
                        c->in_string = true;
                        if (!c->is_key)
                                r = count_value(c, max_nodes, max_values, err, size);
                        break;
                case '{':
                case '[':
                        r = count_value(c, max_nodes, max_values, err, size);
                        if (r >= 0)
                                r = count_open(c, ch, err, size);
                        break;
                case '}':
                case ']':
                        if (c->depth > 0)
                                c->depth--;
                        c->want_key = false;
                        break;
                case ',':
                        c->want_key = c->depth > 0 && !is_array_at(c, c->depth);
                        break;
                case ':':
                        c->want_key = false;
                        break;
                default:
                        c->in_scalar = true;
                        r = count_value(c, max_nodes, max_values, err, size);
                        break;
                }
        }
        return r;
}

/* --- writing answers --- */

json_t *mk_sched_wire_filter_error(const char *msg) {
        return json_pack("{s:n, s:n, s:{}, s:s}", "Nodes", "NodeNames", "FailedNodes", "Error", msg);
}

json_t *mk_sched_wire_filter_json(const struct mk_sched_decisions *d) {
        json_t *ok = json_array(), *failed = json_object(), *res = json_object();
        for (size_t i = 0; i < d->n; i++) {
                if (d->v[i].r >= 0) {
                        if (d->by_name)
                                json_array_append_new(ok, json_string(d->cands[i].name));
                        else
                                json_array_append(ok, (json_t *) d->cands[i].object);
                } else {
                        char msg[MK_ERROR_MSG_MAX + 16];
                        snprintf(msg, sizeof(msg), "migkit: %s", mk_sched_verdict_reason(d, i));
                        json_object_set_new(failed, d->cands[i].name, json_string(msg));
                }
        }
        if (d->by_name) {
                json_object_set_new(res, "Nodes", json_null());
                json_object_set_new(res, "NodeNames", ok);
        } else {
                json_object_set_new(res, "Nodes", json_pack("{s:o}", "items", ok));
                json_object_set_new(res, "NodeNames", json_null());
        }
        json_object_set_new(res, "FailedNodes", failed);
        json_object_set_new(res, "Error", json_string(""));
        return res;
}

json_t *mk_sched_wire_prioritize_json(const struct mk_sched_decisions *d) {
        json_t *list = json_array();
        for (size_t i = 0; i < d->n; i++) {
                json_t *h = json_object();
                json_object_set_new(h, "Host", json_string(d->cands[i].name));
                json_object_set_new(h, "Score", json_integer(d->v[i].r >= 0 ? d->v[i].priority : 0));
                json_array_append_new(list, h);
        }
        return list;
}

int mk_sched_wire_put_string(struct mk_buf *b, const char *v) {
        static const char hex[] = "0123456789abcdef";
        char out[512];
        size_t k = 0;
        int r;
        /* Names and reasons are plain ASCII almost always: one copy. */
        size_t len = strlen(v), plain = json_plain_run(v, len);
        if (plain == len) {
                if ((r = mk_buf_reserve(b, plain + 2)) < 0)
                        return r;
                char *w = b->data + b->len;
                w[0] = '"';
                memcpy(w + 1, v, plain);
                w[plain + 1] = '"';
                w[plain + 2] = 0;
                b->len += plain + 2;
                return 0;
        }
        out[k++] = '"';
        for (const unsigned char *p = (const unsigned char *) v; *p;) {
                if (k > sizeof(out) - 16) {
                        if ((r = mk_buf_append(b, out, k)) < 0)
                                return r;
                        k = 0;
                }
                unsigned char c = *p;
                if (c == '"' || c == '\\') {
                        out[k++] = '\\';
                        out[k++] = (char) c;
                        p++;
                } else if (c < 0x20) {
                        memcpy(out + k, "\\u00", 4);
                        out[k + 4] = hex[c >> 4];
                        out[k + 5] = hex[c & 15];
                        k += 6;
                        p++;
                } else if (c < 0x80) {
                        out[k++] = (char) c;
                        p++;
                } else {
                        /* the length of a well-formed sequence (RFC 3629), else 0 */
                        size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
                        for (size_t j = 1; j < n; j++)
                                if ((p[j] & 0xc0) != 0x80)
                                        n = 0;
                        if (n >= 3) {
                                unsigned cp = n == 3 ? (c & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu)
                                                     : (c & 0x07u) << 18 | (p[1] & 0x3fu) << 12 | (p[2] & 0x3fu) << 6 |
                                                               (p[3] & 0x3fu);
                                if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
                                    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                                        n = 0;
                        }
                        if (n == 0) {
                                out[k++] = '?';
                                p++;
                        } else {
                                memcpy(out + k, p, n);
                                k += n;
                                p += n;
                        }
                }
        }
        out[k++] = '"';
        return mk_buf_append(b, out, k);
}

/* Appends pre, candidate c's name as a JSON string, post: a name of plain
 * bytes (almost every one: the body scan takes only such names) is copied
 * whole, its length known, the rest as mk_sched_wire_put_string() writes
 * it. 1,000s of these make an answer. */
static int put_entry(struct mk_buf *b, const char *pre, size_t pre_len, const struct mk_sched_cand *c,
                     const char *post, size_t post_len) {
        int r;
        if (!c->plain && (json_plain_run(c->name, c->len) < c->len || c->name[c->len])) {
                /* not plain, or a NUL before len */
                if ((r = mk_buf_append(b, pre, pre_len)) < 0 || (r = mk_sched_wire_put_string(b, c->name)) < 0)
                        return r;
                return mk_buf_append(b, post, post_len);
        }
        if ((r = mk_buf_reserve(b, pre_len + c->len + 2 + post_len)) < 0)
                return r;
        char *w = b->data + b->len;
        memcpy(w, pre, pre_len);
        w += pre_len;
        *w++ = '"';
        memcpy(w, c->name, c->len);
        w += c->len;
        *w++ = '"';
        memcpy(w, post, post_len);
        w += post_len;
        *w = 0;
        b->len = (size_t) (w - b->data);
        return 0;
}

char *mk_sched_wire_filter_text(const struct mk_sched_decisions *d) {
        if (!d->by_name) {
                /* Full Node objects are echoed back: jansson writes them. */
                json_t *v = mk_sched_wire_filter_json(d);
                char *t = json_dumps(v, JSON_COMPACT);
                json_decref(v);
                return t;
        }
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, SIZE_MAX);
        /* The answer's size, near enough (names and reasons as they are,
         * quotes, separators): one allocation instead of a dozen doublings,
         * each a copy, the larger ones fresh pages. */
        size_t est = 64 + d->reasons.len; /* every failed node's reason, NUL-separated */
        for (size_t i = 0; i < d->n; i++)
                est += d->cands[i].len + 4 + (d->v[i].r >= 0 ? 0 : 16);
        int r = mk_buf_reserve(&b, est) == -ENOMEM ? -ENOMEM : 0;
        if (r >= 0)
                r = mk_buf_puts(&b, "{\"Nodes\":null,\"NodeNames\":[");
        for (size_t i = 0, k = 0; r >= 0 && i < d->n; i++)
                if (d->v[i].r >= 0)
                        r = put_entry(&b, ",", k++ ? 1 : 0, &d->cands[i], "", 0);
        if (r >= 0)
                r = mk_buf_puts(&b, "],\"FailedNodes\":{");
        for (size_t i = 0, k = 0; r >= 0 && i < d->n; i++) {
                char msg[MK_ERROR_MSG_MAX + 16];
                if (d->v[i].r >= 0)
                        continue;
                const char *why = mk_sched_verdict_reason(d, i);
                size_t len = strnlen(why, sizeof(msg) - sizeof("migkit: "));
                memcpy(msg, "migkit: ", sizeof("migkit: ") - 1);
                memcpy(msg + sizeof("migkit: ") - 1, why, len);
                msg[sizeof("migkit: ") - 1 + len] = 0;
                if ((r = put_entry(&b, ",", k++ ? 1 : 0, &d->cands[i], ":", 1)) >= 0)
                        r = mk_sched_wire_put_string(&b, msg);
        }
        if (r >= 0)
                r = mk_buf_puts(&b, "},\"Error\":\"\"}");
        return r < 0 ? NULL : mk_buf_take(&b);
}

char *mk_sched_wire_prioritize_text(const struct mk_sched_decisions *d) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, SIZE_MAX);
        size_t est = 8; /* as in the filter's answer: one allocation */
        for (size_t i = 0; i < d->n; i++)
                est += d->cands[i].len + sizeof(",{\"Host\":\"\",\"Score\":10}");
        int r = mk_buf_reserve(&b, est) == -ENOMEM ? -ENOMEM : 0;
        if (r >= 0)
                r = mk_buf_putc(&b, '[');
        for (size_t i = 0; r >= 0 && i < d->n; i++) {
                /* 0..10 (MaxExtenderPriority) from a table: no snprintf per node */
                static const char *const tails[] = {
                        ",\"Score\":0}", ",\"Score\":1}", ",\"Score\":2}", ",\"Score\":3}",
                        ",\"Score\":4}", ",\"Score\":5}", ",\"Score\":6}", ",\"Score\":7}",
                        ",\"Score\":8}", ",\"Score\":9}", ",\"Score\":10}",
                };
                char tail[32];
                const char *t = tail;
                int pri = d->v[i].r >= 0 ? d->v[i].priority : 0;
                if (pri < 0 || pri >= (int) ELEMENTSOF(tails))
                        snprintf(tail, sizeof(tail), ",\"Score\":%d}", pri);
                else
                        t = tails[pri];
                static const char host[] = ",{\"Host\":";
                r = put_entry(&b, host + (i ? 0 : 1), sizeof(host) - (i ? 1 : 2), &d->cands[i], t, strlen(t));
        }
        if (r >= 0)
                r = mk_buf_putc(&b, ']');
        return r < 0 ? NULL : mk_buf_take(&b);
}

/* --- bind --- */

int mk_bind_args_parse(const json_t *args, struct mk_bind_args *ret, struct mk_error *e) {
        struct mk_bind_args tmp = {0};
        /* Names go into apiserver URLs: Kubernetes' own rules (a namespace
         * is a DNS label, pod and node names DNS subdomains). */
        const struct {
                const char *key;
                char *buf;
                size_t size;
                int (*rule)(const char *s, const char **ret_why); /* NULL: not a name */
        } f[] = {
                {"PodName", tmp.pod_name, sizeof(tmp.pod_name), mk_kube_name_check_subdomain},
                {"PodNamespace", tmp.pod_namespace, sizeof(tmp.pod_namespace), mk_kube_name_check_label},
                {"PodUID", tmp.pod_uid, sizeof(tmp.pod_uid), NULL},
                {"Node", tmp.node, sizeof(tmp.node), mk_kube_name_check_subdomain},
        };
        if (!json_is_object(args))
                return mk_error_set_field(e, -EINVAL, "ExtenderBindingArgs", "must be an object");
        for (size_t i = 0; i < ELEMENTSOF(f); i++) {
                const char *v = json_string_value(mk_json_get_ci(args, f[i].key));
                if (!v || !*v)
                        return mk_error_set_field(e, -EINVAL, f[i].key, "missing or not a string");
                const char *why = NULL;
                if (f[i].rule && f[i].rule(v, &why) < 0)
                        return mk_error_set_field(e, -EINVAL, f[i].key, "not a valid name: %s", why);
                if (strlen(v) >= f[i].size || !mk_json_token_ok(v) || strchr(v, '/') || strchr(v, '?') ||
                    strchr(v, '%') || strchr(v, '#'))
                        return mk_error_set_field(e, -EINVAL, f[i].key, "not a valid name");
                snprintf(f[i].buf, f[i].size, "%s", v);
        }
        *ret = tmp;
        return 0;
}

json_t *mk_bind_object(const struct mk_bind_args *a) {
        return json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "Binding",
                         "metadata", "name", a->pod_name, "namespace", a->pod_namespace, "uid", a->pod_uid, "target",
                         "apiVersion", "v1", "kind", "Node", "name", a->node);
}

