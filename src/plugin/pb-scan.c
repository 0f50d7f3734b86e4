/* Protobuf wire-format counting (plugin/pb-scan.h). The wire format:
 * https://protobuf.dev/programming-guides/encoding/ (varints of 7 bits a
 * byte, low groups first; a tag is field_number << 3 | wire_type; wire type
 * 0 varint, 1 eight bytes, 2 a varint length then that many bytes, 5 four
 * bytes; 3 and 4 are the deprecated groups, which protobuf-c refuses). */
#include <errno.h>

#include "plugin/pb-scan.h"

#define PB_MAX_VARINT 10 /* bytes of a 64-bit varint */
#define PB_MAX_HEADER 5  /* bytes of a tag or a length (32 bits), as protobuf-c reads them */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

struct reader {
        const uint8_t *buf;
        size_t pos, end; /* end: of the message being read */
};

/* One varint of at most max bytes; -EINVAL when it does not end in time. */
static int read_varint(struct reader *r, unsigned max, uint64_t *ret, struct mk_error *e) {
        uint64_t v = 0;
        for (unsigned i = 0; i < max; i++) {
                if (r->pos >= r->end)
                        return mk_error_set(e, -EINVAL, "truncated varint at byte %zu", r->pos);
                uint8_t b = r->buf[r->pos++];
                v |= (uint64_t) (b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *ret = v;
                        return 0;
                }
        }
        return mk_error_set(e, -EINVAL, "varint longer than %u bytes at byte %zu", max, r->pos - max);
}

/* Reads one field's tag and steps over its value; a length-delimited
 * value's bounds go to *ret_start and *ret_len. */
static int next_field(struct reader *r, uint32_t *ret_field, unsigned *ret_wire, size_t *ret_start, size_t *ret_len,
                      struct mk_error *e) {
        size_t at = r->pos;
        uint64_t tag = 0, v = 0;
        int k = read_varint(r, PB_MAX_HEADER, &tag, e);
        if (k < 0)
                return k;
        if (tag >> 3 == 0) /* 35 bits at most: the field number fits 32 */
                return mk_error_set(e, -EINVAL, "field number %llu at byte %zu", (unsigned long long) (tag >> 3), at);
        unsigned wire = (unsigned) (tag & 7);
        size_t left, width = 0;
        switch (wire) {
        case WT_VARINT:
                k = read_varint(r, PB_MAX_VARINT, &v, e);
                if (k < 0)
                        return k;
                break;
        case WT_I64:
                width = 8;
                break;
        case WT_I32:
                width = 4;
                break;
        case WT_LEN:
                k = read_varint(r, PB_MAX_HEADER, &v, e);
                if (k < 0)
                        return k;
                left = r->end - r->pos;
                if (v > left)
                        return mk_error_set(e, -EINVAL, "length %llu at byte %zu past the end (%zu bytes left)",
                                            (unsigned long long) v, at, left);
                *ret_start = r->pos;
                *ret_len = (size_t) v;
                r->pos += (size_t) v;
                break;
        default:
                return mk_error_set(e, -EINVAL, "wire type %u at byte %zu", wire, at);
        }
        if (width) {
                if (r->end - r->pos < width)
                        return mk_error_set(e, -EINVAL, "truncated %zu-byte value at byte %zu", width, at);
                r->pos += width;
        }
        *ret_field = (uint32_t) (tag >> 3);
        *ret_wire = wire;
        return 0;
}

/* The fields of the message r reads (level `level` of the path): the
 * occurrences of path[level] counted, each opened in turn (level + 1) while
 * the path goes on. */
static int scan_message(struct reader *r, const uint32_t *path, size_t depth, size_t level, struct mk_pb_path_counts *c,
                        struct mk_error *e) {
        size_t n = 0;
        while (r->pos < r->end) {
                size_t at = r->pos, s = 0, l = 0;
                uint32_t field = 0;
                unsigned wire = 0;
                int k = next_field(r, &field, &wire, &s, &l, e);
                if (k < 0)
                        return k;
                c->fields++;
                if (field != path[level])
                        continue;
                n++;
                if (level + 1 == depth)
                        continue;
                if (wire != WT_LEN)
                        return mk_error_set(e, -EINVAL, "field %u at byte %zu has wire type %u, not a message", field,
                                            at, wire);
                struct reader inner = { .buf = r->buf, .pos = s, .end = s + l };
                k = scan_message(&inner, path, depth, level + 1, c, e);
                if (k < 0)
                        return k;
        }
        if (n > c->most[level])
                c->most[level] = n;
        return 0;
}

int mk_pb_scan_path(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth, struct mk_pb_path_counts *ret,
                    struct mk_error *e) {
        if (depth == 0 || depth > MK_PB_MAX_DEPTH)
                return mk_error_set(e, -EINVAL, "a path of %zu fields, 1 to %u", depth, MK_PB_MAX_DEPTH);
        struct reader r = { .buf = buf, .pos = 0, .end = len };
        struct mk_pb_path_counts c = { 0 };
        int k = scan_message(&r, path, depth, 0, &c, e);
        if (k < 0)
                return k;
        *ret = c;
        return 0;
}

int mk_pb_scan(const uint8_t *buf, size_t len, uint32_t outer_field, uint32_t inner_field,
               struct mk_pb_counts *ret, struct mk_error *e) {
        const uint32_t path[] = { outer_field, inner_field };
        struct mk_pb_path_counts c;
        int k = mk_pb_scan_path(buf, len, path, 2, &c, e);
        if (k < 0)
                return k;
        *ret = (struct mk_pb_counts){ .outer = c.most[0], .inner = c.most[1], .fields = c.fields };
        return 0;
}
