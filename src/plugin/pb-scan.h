/* Counts what a protobuf message holds without decoding it, so that a
 * request past the plugin's counts is refused before protobuf-c turns it
 * into objects: protobuf-c's unpack takes about 40 bytes per entry (a
 * pointer, an allocation, its scan record), some 200 MB for a 4 MB request
 * of empty entries. Reads the wire format only (varint tags, the four wire
 * types protobuf-c decodes); no knowledge of the messages but the one
 * repeated message field and the one field inside it the caller names. */
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
