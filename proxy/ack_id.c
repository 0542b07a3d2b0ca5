/* ack_id.c: the opaque ack id:
 * "a1<instance><group hash>-<epoch>-<partition>-<offset>-<attempt>-<topic>", and its range
 * form, "<first>~<last>" in place of the offset. */
#include "ack_id.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "util.h"

uint32_t ks_ack_id_group_hash(const char *group)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)group; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

static char *put_hex8(char *p, uint32_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 7; i >= 0; i--)
        *p++ = digits[(v >> (4 * i)) & 0xf];
    return p;
}

/* "a1<instance><group hash>-<epoch>-<partition>-" at p; returns the end. */
static char *put_head(char *p, uint32_t instance, uint32_t group_hash, uint32_t epoch,
                      int32_t partition)
{
    *p++ = 'a';
    *p++ = '1';
    p = put_hex8(p, instance);
    p = put_hex8(p, group_hash);
    *p++ = '-';
    p = ks_put_dec(p, epoch);
    *p++ = '-';
    p = ks_put_dec(p, (uint64_t)(partition < 0 ? 0 : partition));
    *p++ = '-';
    return p;
}

/* "<offset>-<attempt>-<topic>" and its NUL at p; returns the end (at the NUL). */
static char *put_tail(char *p, int64_t offset, uint32_t attempt, const char *topic, size_t tl)
{
    p = ks_put_dec(p, (uint64_t)(offset < 0 ? 0 : offset));
    *p++ = '-';
    p = ks_put_dec(p, attempt);
    *p++ = '-';
    memcpy(p, topic, tl);
    p += tl;
    *p = '\0';
    return p;
}

static bool room_for(char *buf, size_t size, size_t tl)
{
    if (size < KS_ACK_ID_MAX && size < 2 + 16 + 4 * 21 + tl + 1) {
        if (size)
            buf[0] = '\0';
        return false;
    }
    return true;
}

/* Hand-rolled rather than snprintf: this runs once per delivered record. */
size_t ks_ack_id_write(char *buf, size_t size, uint32_t instance, uint32_t group_hash,
                       uint32_t epoch, int32_t partition, int64_t offset, uint32_t attempt,
                       const char *topic, size_t tl)
{
    if (!room_for(buf, size, tl))
        return 0;
    char *p = put_head(buf, instance, group_hash, epoch, partition);
    return (size_t)(put_tail(p, offset, attempt, topic, tl) - buf);
}

size_t ks_ack_id_writer_put(ks_ack_id_writer_t *w, char *buf, size_t size, uint32_t instance,
                            uint32_t group_hash, uint32_t epoch, int32_t partition, int64_t offset,
                            uint32_t attempt, const char *topic)
{
    uint32_t i = (uint32_t)partition % KS_ACK_ID_WRITER_SLOTS;
    __typeof__(w->slot[0]) *sl = &w->slot[i];
    if (!(w->used[i / 64] >> (i % 64) & 1)) {
        w->used[i / 64] |= UINT64_C(1) << (i % 64);
        sl->head_len = 0;
        sl->topic = NULL;
    }
    if (sl->topic != topic) {
        sl->tl = strlen(topic);
        sl->topic = topic;
    }
    if (!sl->head_len || sl->partition != partition || sl->instance != instance ||
        sl->group_hash != group_hash || sl->epoch != epoch) {
        sl->head_len =
            (uint8_t)(put_head(sl->head, instance, group_hash, epoch, partition) - sl->head);
        sl->partition = partition;
        sl->instance = instance;
        sl->group_hash = group_hash;
        sl->epoch = epoch;
    }
    if (!room_for(buf, size, sl->tl))
        return 0;
    memcpy(buf, sl->head, sl->head_len);
    return (size_t)(put_tail(buf + sl->head_len, offset, attempt, topic, sl->tl) - buf);
}

size_t ks_ack_id_format(const ks_ack_id_t *id, char *buf, size_t size)
{
    return ks_ack_id_write(buf, size, id->instance, id->group_hash, id->epoch, id->partition,
                           id->offset, id->attempt, id->topic,
                           strnlen(id->topic, sizeof(id->topic)));
}

/* Reads an unsigned decimal (at most 19 digits after leading zeros, so no overflow while
 * reading). Returns the position of the first byte after its digits, or NULL. */
static const char *read_digits(const char *p, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (*p != '0' && (unsigned)(*p - '0') > 9)
        return NULL;
    while (*p == '0')
        p++; /* leading zeros are allowed and do not count */
    const char *start = p;
    for (; (unsigned)(*p - '0') <= 9; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    if ((size_t)(p - start) > 19 || v > max)
        return NULL;
    *out = v;
    return p;
}

/* read_digits up to the next '-'. Returns the position after the '-'. */
static const char *read_num(const char *p, uint64_t max, uint64_t *out)
{
    p = read_digits(p, max, out);
    return p && *p == '-' ? p + 1 : NULL;
}

static int hex8(const char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* The offset (or range), attempt and topic of s from p on (p just past the partition's '-').
 * A topic equal to *checked passed ks_valid_kafka_name already; one that passes it now is
 * kept there (when checked is not NULL). */
static int parse_tail(const char *s, const char *p, ks_ack_ref_t *out, const char **checked)
{
    uint64_t v, last;
    if (!(p = read_digits(p, INT64_MAX, &v)))
        return -1;
    out->offset = (int64_t)v;
    out->last = (int64_t)v;
    size_t range_len = 0; /* "~<last>": a range id may be that much longer */
    if (*p == '~') {
        const char *r = p;
        out->range = true;
        if (!(p = read_digits(p + 1, INT64_MAX, &last)) || last < v || last - v >= KS_ACK_RANGE_MAX)
            return -1;
        out->last = (int64_t)last;
        range_len = (size_t)(p - r);
        if (range_len > 20) /* "~" and 19 digits: no zeros to pad an id past KS_ACK_ID_MAX */
            return -1;
    }
    if (*p++ != '-')
        return -1;
    if (!(p = read_num(p, UINT32_MAX, &v)))
        return -1;
    out->attempt = (uint32_t)v;
    size_t tl = strnlen(p, sizeof(((ks_ack_id_t *)0)->topic));
    if (tl >= sizeof(((ks_ack_id_t *)0)->topic) ||
        (size_t)(p - s) - range_len + tl >= KS_ACK_ID_MAX)
        return -1;
    if (!(checked && *checked && strcmp(p, *checked) == 0)) {
        if (!ks_valid_kafka_name(p))
            return -1;
        if (checked)
            *checked = p;
    }
    out->topic = p;
    out->ok = true;
    return 0;
}

/* Epoch and partition, from p (just past the group hash's '-'); returns the position after
 * the partition's '-', or NULL. */
static const char *parse_epoch_partition(const char *p, ks_ack_ref_t *out)
{
    uint64_t v;
    if (!(p = read_num(p, UINT32_MAX, &v)))
        return NULL;
    out->epoch = (uint32_t)v;
    if (!(p = read_num(p, INT32_MAX, &v)))
        return NULL;
    out->partition = (int32_t)v;
    return p;
}

int ks_ack_id_parse_ref(const char *s, ks_ack_ref_t *out)
{
    out->ok = false;
    out->range = false;
    if (s[0] != 'a' || s[1] != '1')
        return -1;
    const char *p = s + 2;
    /* hex8 stops at the first non-hex byte, so it never reads past a shorter string's NUL. */
    if (hex8(p, &out->instance) < 0 || hex8(p + 8, &out->group_hash) < 0 || p[16] != '-')
        return -1;
    if (!(p = parse_epoch_partition(p + 17, out)))
        return -1;
    return parse_tail(s, p, out, NULL);
}

int ks_ack_id_parse_ref_cached(const char *s, ks_ack_ref_t *out, ks_ack_parse_cache_t *c)
{
    out->ok = false;
    out->range = false;
    /* 19 bytes before the epoch: "a1", 16 hex digits, '-' (strnlen: never past the NUL). */
    if (s[0] != 'a' || s[1] != '1' || strnlen(s + 2, 17) < 17)
        return -1;
    const char *p = parse_epoch_partition(s + 19, out);
    if (!p)
        return -1;
    __typeof__(c->slot[0]) *sl = &c->slot[(uint32_t)out->partition & 15];
    if (memcmp(sl->lead, s + 2, sizeof(sl->lead)) == 0) {
        out->instance = sl->instance;
        out->group_hash = sl->group_hash;
    } else {
        if (hex8(s + 2, &out->instance) < 0 || hex8(s + 10, &out->group_hash) < 0 || s[18] != '-')
            return -1;
        memcpy(sl->lead, s + 2, sizeof(sl->lead));
        sl->instance = out->instance;
        sl->group_hash = out->group_hash;
        sl->topic = NULL;
    }
    return parse_tail(s, p, out, &sl->topic);
}

int ks_ack_id_parse(const char *s, ks_ack_id_t *out)
{
    ks_ack_ref_t r;
    if (ks_ack_id_parse_ref(s, &r) < 0 || r.range)
        return -1;
    out->instance = r.instance;
    out->group_hash = r.group_hash;
    out->epoch = r.epoch;
    out->partition = r.partition;
    out->offset = r.offset;
    out->attempt = r.attempt;
    memcpy(out->topic, r.topic, strlen(r.topic) + 1); /* valid names are at most 249 chars */
    return 0;
}

size_t ks_ack_id_count(const char *s)
{
    ks_ack_ref_t r;
    if (!strchr(s, '~') || ks_ack_id_parse_ref(s, &r) < 0)
        return 1;
    return (size_t)(r.last - r.offset) + 1;
}

size_t ks_ack_id_nth(const char *s, size_t k, char *buf, size_t size)
{
    ks_ack_ref_t r;
    if (!strchr(s, '~') || ks_ack_id_parse_ref(s, &r) < 0) {
        size_t n = strlen(s);
        if (n >= size)
            n = size ? size - 1 : 0;
        if (size) {
            memcpy(buf, s, n);
            buf[n] = '\0';
        }
        return n;
    }
    return ks_ack_id_write(buf, size, r.instance, r.group_hash, r.epoch, r.partition,
                           r.offset + (int64_t)k, r.attempt, r.topic, strlen(r.topic));
}
