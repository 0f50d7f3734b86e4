/* Counts what a protobuf message holds without decoding it, so that a
 * request past the plugin's counts is refused before protobuf-c turns it
 * into objects: protobuf-c's unpack takes about 40 bytes per entry (a
 * pointer, an allocation, its scan record), some 200 MB for a 4 MB request
 * of empty entries. Reads the wire format only (varint tags, the four wire
 * types protobuf-c decodes); no knowledge of the messages but the path of
 * repeated message fields the caller names (mk_pb_scan: one field and one
 * inside it). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct mk_pb_counts {
        size_t outer;  /* occurrences of the top-level field outer_field */
        size_t inner;  /* the most occurrences of inner_field inside one of those */
        size_t fields; /* every field read, at the top level and inside outer_field's messages, known or not */
};

/* Reads buf[0..len) as a message: its fields and, for each occurrence of
 * outer_field (a length-delimited field: a repeated message), the fields of
 * the message inside; deeper messages are not opened. -EINVAL naming the
 * byte offset on malformed data: a truncated varint or one over 10 bytes
 * (5 for a tag or a length), field number 0, wire types 3, 4 (groups), 6
 * and 7, a length past the end of its message, outer_field with another
 * wire type. *ret is written on success only. */
int mk_pb_scan(const uint8_t *buf, size_t len, uint32_t outer_field, uint32_t inner_field,
               struct mk_pb_counts *ret, struct mk_error *e);

#define MK_PB_MAX_DEPTH 8u /* fields of a path */

struct mk_pb_path_counts {
        size_t most[MK_PB_MAX_DEPTH]; /* most[i]: the most occurrences of path[i] in one message reached through
                                       * path[0..i) (most[0]: in the top-level message) */
        size_t fields;                /* every field read, in every message opened, known or not */
};

/* mk_pb_scan along a path of depth fields: path[0] at the top level,
 * path[i + 1] inside each message of path[i]; every field but the last is
 * a length-delimited message the scan opens, the last is only counted.
 * Field number 0 in the path matches nothing. Refuses as mk_pb_scan, and
 * a depth of 0 or over MK_PB_MAX_DEPTH (-EINVAL). */
int mk_pb_scan_path(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth, struct mk_pb_path_counts *ret,
                    struct mk_error *e);
