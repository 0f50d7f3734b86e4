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

/* The fields of one outer_field message; the occurrences of inner_field to
 * *ret_inner. */
static int scan_inner(const uint8_t *buf, size_t start, size_t len, uint32_t inner_field, size_t *ret_inner,
                      size_t *fields, struct mk_error *e) {
        struct reader r = { .buf = buf, .pos = start, .end = start + len };
        size_t n = 0;
        while (r.pos < r.end) {
                uint32_t field;
                unsigned wire;
                size_t s, l;
                int k = next_field(&r, &field, &wire, &s, &l, e);
                if (k < 0)
                        return k;
                (*fields)++;
                if (field == inner_field)
                        n++;
        }
        *ret_inner = n;
        return 0;
}

int mk_pb_scan(const uint8_t *buf, size_t len, uint32_t outer_field, uint32_t inner_field,
               struct mk_pb_counts *ret, struct mk_error *e) {
        struct reader r = { .buf = buf, .pos = 0, .end = len };
        struct mk_pb_counts c = { 0 };
        while (r.pos < r.end) {
                size_t at = r.pos, s = 0, l = 0, n;
                uint32_t field;
                unsigned wire;
                int k = next_field(&r, &field, &wire, &s, &l, e);
                if (k < 0)
                        return k;
                c.fields++;
                if (field != outer_field || outer_field == 0)
                        continue;
                if (wire != WT_LEN)
                        return mk_error_set(e, -EINVAL, "field %u at byte %zu has wire type %u, not a message", field,
                                            at, wire);
                c.outer++;
                k = scan_inner(buf, s, l, inner_field, &n, &c.fields, e);
                if (k < 0)
                        return k;
                if (n > c.inner)
                        c.inner = n;
        }
        *ret = c;
        return 0;
}
