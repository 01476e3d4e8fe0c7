/* pb.c - the protocol-buffers wire format, written (engine/export/pb.h) */
#include "engine/export/pb.h"

#include <stdlib.h>
#include <string.h>

#include "engine/export/export_impl.h"

enum { WIRE_VARINT = 0, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

void dl_pb_init(dl_pb *b) { memset(b, 0, sizeof *b); }

void dl_pb_done(dl_pb *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

int dl_pb_ok(const dl_pb *b) { return !b->failed; }

/* Room for n more bytes: a pointer to them, or NULL (failed set). */
static unsigned char *reserve(dl_pb *b, size_t n)
{
    if (b->failed)
        return NULL;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return NULL;
        }
        b->data = d;
        b->cap = cap;
    }
    unsigned char *p = b->data + b->len;
    b->len += n;
    return p;
}

static void raw_varint(dl_pb *b, uint64_t v)
{
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    unsigned char *p = reserve(b, n);
    if (p)
        memcpy(p, tmp, n);
}

static void tag(dl_pb *b, int field, int wire) { raw_varint(b, ((uint64_t)field << 3) | wire); }

void dl_pb_varint(dl_pb *b, int field, uint64_t v)
{
    tag(b, field, WIRE_VARINT);
    raw_varint(b, v);
}

void dl_pb_int64(dl_pb *b, int field, int64_t v) { dl_pb_varint(b, field, (uint64_t)v); }

void dl_pb_float(dl_pb *b, int field, float v)
{
    tag(b, field, WIRE_FIXED32);
    unsigned char *p = reserve(b, 4);
    if (p)
        dl_export_put_le32(p, &v, 1);
}

void dl_pb_bytes(dl_pb *b, int field, const void *data, size_t n)
{
    tag(b, field, WIRE_LEN);
    raw_varint(b, n);
    unsigned char *p = reserve(b, n);
    if (p && n)
        memcpy(p, data, n);
}

void dl_pb_string(dl_pb *b, int field, const char *s) { dl_pb_bytes(b, field, s, strlen(s)); }

void dl_pb_floats_le(dl_pb *b, int field, const float *v, size_t n)
{
    tag(b, field, WIRE_LEN);
    raw_varint(b, n * 4);
    unsigned char *p = reserve(b, n * 4);
    if (p && n)
        dl_export_put_le32(p, v, n);
}

void dl_pb_message(dl_pb *b, int field, const dl_pb *child)
{
    if (child->failed) {
        b->failed = 1;
        return;
    }
    dl_pb_bytes(b, field, child->data, child->len);
}
