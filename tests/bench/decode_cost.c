/* decode_cost: the schema decoders alone, for callgrind: one order of 10 fields (as the
 * benchmark's schema-aware row writes it) encoded once in Avro and in Protobuf by ksidecar's own
 * encoders, then decoded to JSON N times each. Instructions a decode are the decoder's
 * inclusive count over N:
 *   valgrind --tool=callgrind build/decode_cost 100000
 *   callgrind_annotate --inclusive=yes callgrind.out.PID | grep -E 'ks_avro_decode|ks_proto_decode'
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_enc.h"
#include "avro_json.h"
#include "proto_json.h"

static const char AVRO[] =
    "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"bench\",\"fields\":["
    "{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"customer\",\"type\":\"string\"},"
    "{\"name\":\"sku\",\"type\":\"string\"},{\"name\":\"qty\",\"type\":\"int\"},"
    "{\"name\":\"price\",\"type\":\"double\"},{\"name\":\"currency\",\"type\":\"string\"},"
    "{\"name\":\"created\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
    "{\"name\":\"status\",\"type\":{\"type\":\"enum\",\"name\":\"Status\",\"symbols\":"
    "[\"NEW\",\"PAID\",\"SHIPPED\",\"RETURNED\"]}},"
    "{\"name\":\"note\",\"type\":[\"null\",\"string\"],\"default\":null},"
    "{\"name\":\"tags\",\"type\":{\"type\":\"array\",\"items\":\"string\"}}]}";

static const char PROTO[] =
    "syntax = \"proto3\";\npackage bench;\n"
    "message Order { int64 id = 1; string customer = 2; string sku = 3; int32 qty = 4;\n"
    "  double price = 5; string currency = 6; int64 created = 7; Status status = 8;\n"
    "  optional string note = 9; repeated string tags = 10; }\n"
    "enum Status { NEW = 0; PAID = 1; SHIPPED = 2; RETURNED = 3; }\n";

static const char ORDER[] =
    "{\"id\":1000003,\"customer\":\"customer-0003.lastname@example.com\","
    "\"sku\":\"SKU-00003-SHIRT-COTTON-BLUE-XL\",\"qty\":4,\"price\":22.99,\"currency\":\"EUR\","
    "\"created\":1796000000003,\"status\":\"PAID\","
    "\"note\":\"leave the parcel at the door and ring twice, please (3 floors up)\","
    "\"tags\":[\"gift\",\"express\",\"insured\",\"batch-3\",\"eu-west\"]}";

static void die(const char *what, const char *err)
{
    fprintf(stderr, "decode_cost: %s: %s\n", what, err);
    exit(1);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    char err[256];
    json_t *v = json_loads(ORDER, 0, NULL);
    ks_avro_t *a = ks_avro_new(AVRO, strlen(AVRO), err, sizeof(err));
    ks_proto_t *p = ks_proto_new(PROTO, strlen(PROTO), err, sizeof(err));
    if (!v || !a || !p)
        die("schema", err);
    ks_jbuf_t av, pb, out;
    ks_jbuf_init(&av, 256);
    ks_jbuf_init(&pb, 256);
    ks_jbuf_init(&out, 1024);
    if (ks_avro_encode(a, v, &av, err, sizeof(err)))
        die("avro encode", err);
    if (ks_proto_encode(p, v, &pb, err, sizeof(err)))
        die("protobuf encode", err);
    size_t a_out = 0, p_out = 0;
    for (int i = 0; i < n; i++) {
        out.len = 0;
        if (ks_avro_decode(a, av.p, av.len, KS_AVRO_JSON_PLAIN, &out, err, sizeof(err)))
            die("avro decode", err);
        a_out = out.len;
        out.len = 0;
        if (ks_proto_decode(p, pb.p, pb.len, &out, err, sizeof(err)))
            die("protobuf decode", err);
        p_out = out.len;
    }
    printf("%d decodes each: Avro %zu bytes -> %zu of JSON; Protobuf %zu bytes -> %zu of JSON\n", n,
           av.len, a_out, pb.len, p_out);
    printf("%.*s\n", (int)out.len, out.p);
    ks_jbuf_free(&av);
    ks_jbuf_free(&pb);
    ks_jbuf_free(&out);
    ks_avro_free(a);
    ks_proto_free(p);
    json_decref(v);
    return 0;
}
