/* pb.h - a protocol-buffers writer for the few messages an ONNX file needs
 *
 * The wire format as protobuf documents it: each field a tag (number << 3
 * | wire type) then a varint (type 0), 4 little-endian bytes (type 5) or a
 * length-delimited payload (type 2: bytes, strings, nested messages).
 * A nested message is written into its own buffer, then appended to its
 * parent with its length. Out of memory is sticky: every call after it does
 * nothing and dl_pb_ok says so once, at the end.
 */
#ifndef DL_PB_H
#define DL_PB_H

#include <stddef.h>
#include <stdint.h>

typedef struct dl_pb {
    unsigned char *data;
    size_t len, cap;
    int failed; /* an allocation failed: the bytes are incomplete */
} dl_pb;

/* An empty buffer; dl_pb_done frees it (and may run twice). */
void dl_pb_init(dl_pb *b);
void dl_pb_done(dl_pb *b);
/* 1 when every write so far succeeded. */
int dl_pb_ok(const dl_pb *b);

/* Field `field` as a varint: unsigned, or an int64 in two's complement
 * (a negative value takes 10 bytes, as protobuf's int64). */
void dl_pb_varint(dl_pb *b, int field, uint64_t v);
void dl_pb_int64(dl_pb *b, int field, int64_t v);
/* Field `field` as a 32-bit float (wire type 5). */
void dl_pb_float(dl_pb *b, int field, float v);
/* Length-delimited: n raw bytes, a NUL-terminated string, or n floats as
 * little-endian bytes (ONNX's raw_data). */
void dl_pb_bytes(dl_pb *b, int field, const void *data, size_t n);
void dl_pb_string(dl_pb *b, int field, const char *s);
void dl_pb_floats_le(dl_pb *b, int field, const float *v, size_t n);
/* child's bytes as a nested message in field `field` (child unchanged). */
void dl_pb_message(dl_pb *b, int field, const dl_pb *child);

#endif
