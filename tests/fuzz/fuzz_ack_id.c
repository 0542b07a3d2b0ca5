/* fuzz_ack_id.c: libFuzzer harness for ack id parsing (proxy/ack_id.c): no crash, and every id
 * that parses formats back to text that parses to the same fields; a range parses by reference
 * only, counts its offsets, and its first and last offsets' own ids parse; and the input's lines
 * parsed through one ks_ack_parse_cache_t give what each gives alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ack_id.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The edges hand the parser NUL-terminated strings of any length. */
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    ks_ack_ref_t ref;
    ks_ack_id_t id;
    int rr = ks_ack_id_parse_ref(s, &ref);
    int ri = ks_ack_id_parse(s, &id);
    if (ref.ok != (rr == 0))
        abort();
    if (rr == 0 && ref.range) { /* a range: the single-id parser refuses it */
        size_t cnt = ks_ack_id_count(s);
        if (ri == 0 || ref.last < ref.offset || cnt != (size_t)(ref.last - ref.offset) + 1 ||
            cnt > KS_ACK_RANGE_MAX)
            abort();
        char one[KS_ACK_ID_MAX];
        ks_ack_id_t first, last;
        if (!ks_ack_id_nth(s, 0, one, sizeof(one)) || ks_ack_id_parse(one, &first) != 0 ||
            first.offset != ref.offset || !ks_ack_id_nth(s, cnt - 1, one, sizeof(one)) ||
            ks_ack_id_parse(one, &last) != 0 || last.offset != ref.last)
            abort();
    } else if (rr != ri) {
        abort(); /* the two parsers must agree */
    }
    if (ri == 0) {
        if (id.instance != ref.instance || id.group_hash != ref.group_hash ||
            id.epoch != ref.epoch || id.partition != ref.partition || id.offset != ref.offset ||
            id.attempt != ref.attempt || strcmp(id.topic, ref.topic) != 0)
            abort();
        char buf[KS_ACK_ID_MAX];
        size_t n = ks_ack_id_format(&id, buf, sizeof(buf));
        if (n == 0 || n >= sizeof(buf) || strlen(buf) != n)
            abort();
        ks_ack_id_t back;
        if (ks_ack_id_parse(buf, &back) != 0 || back.instance != id.instance ||
            back.group_hash != id.group_hash || back.epoch != id.epoch ||
            back.partition != id.partition || back.offset != id.offset ||
            back.attempt != id.attempt || strcmp(back.topic, id.topic) != 0)
            abort();
    }
    /* Lines parsed one after another through one cache give what each gives alone. */
    if (strchr(s, '\n')) {
        ks_ack_parse_cache_t c = {0};
        for (char *line = s, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            ks_ack_ref_t a, b;
            int ra = ks_ack_id_parse_ref(line, &a);
            int rb = ks_ack_id_parse_ref_cached(line, &b, &c);
            if (ra != rb || a.ok != b.ok)
                abort();
            if (a.ok &&
                (a.instance != b.instance || a.group_hash != b.group_hash || a.epoch != b.epoch ||
                 a.partition != b.partition || a.offset != b.offset || a.attempt != b.attempt ||
                 a.last != b.last || a.range != b.range || strcmp(a.topic, b.topic) != 0))
                abort();
        }
    }
    free(s);
    return 0;
}
