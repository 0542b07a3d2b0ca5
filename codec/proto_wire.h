/* proto_wire.h: Protobuf's wire format, read with bounds: varints, tags and skipping a field,
 * for the schema reader (serialized descriptors) and the decoder. */
#ifndef KS_PROTO_WIRE_H
#define KS_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    KS_WT_VARINT = 0,
    KS_WT_I64 = 1,
    KS_WT_LEN = 2,
    KS_WT_SGROUP = 3,
    KS_WT_EGROUP = 4,
    KS_WT_I32 = 5
};

/* A varint at *p (before end) into *v, *p moved past it. false if it runs past end or is
 * longer than 10 bytes. */
static inline bool ks_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t c = *(*p)++;
        r |= (uint64_t)(c & 0x7f) << (shift < 64 ? shift : 0);
        if (!(c & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* The field at *p whose tag (wire type wt) was just read skipped: *p past it. A group is
 * skipped to its end (nested groups counted, not recursed). false when it runs past end or
 * the wire type is not one. */
static inline bool ks_pb_skip(const uint8_t **p, const uint8_t *end, int wt)
{
    uint64_t v;
    int groups = 0;
    for (;;) {
        switch (wt) {
        case KS_WT_VARINT:
            if (!ks_pb_varint(p, end, &v))
                return false;
            break;
        case KS_WT_I64:
        case KS_WT_I32:
            if ((size_t)(end - *p) < (wt == KS_WT_I64 ? 8u : 4u))
                return false;
            *p += wt == KS_WT_I64 ? 8 : 4;
            break;
        case KS_WT_LEN:
            if (!ks_pb_varint(p, end, &v) || v > (uint64_t)(end - *p))
                return false;
            *p += v;
            break;
        case KS_WT_SGROUP:
            groups++;
            break;
        case KS_WT_EGROUP:
            if (--groups < 0)
                return false;
            break;
        default:
            return false;
        }
        if (!groups)
            return true;
        if (!ks_pb_varint(p, end, &v) || v >> 3 == 0)
            return false;
        wt = (int)(v & 7);
    }
}

#endif
