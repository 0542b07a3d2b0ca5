/* order_schema.h: the Avro Order schema the codec's tests share (test_avro_json.c decodes it,
 * test_avro_enc.c encodes it): a record with primitives, a nested record, unions with a null, a
 * named and a primitive branch, an array of records, a map, an enum, bytes, a fixed and a
 * reference to a named type. EXTRA goes after the field "paid" ("" or fields, each ending in
 * a comma); TIER is the customer's field after "name" (a union of null and an enum Tier). */
#ifndef KS_TEST_ORDER_SCHEMA_H
#define KS_TEST_ORDER_SCHEMA_H

#define ORDER_SCHEMA(EXTRA, TIER)                                                                  \
    "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"com.acme\",\"fields\":["              \
    "{\"name\":\"id\",\"type\":\"long\"},"                                                         \
    "{\"name\":\"qty\",\"type\":\"int\"},"                                                         \
    "{\"name\":\"price\",\"type\":\"double\"},"                                                    \
    "{\"name\":\"ratio\",\"type\":\"float\"},"                                                     \
    "{\"name\":\"paid\",\"type\":\"boolean\"}," EXTRA "{\"name\":\"note\",\"type\":\"string\"},"   \
    "{\"name\":\"maybe\",\"type\":[\"null\",\"string\"]},"                                         \
    "{\"name\":\"either\",\"type\":[\"int\",\"string\",{\"type\":\"array\",\"items\":\"long\"}]}," \
    "{\"name\":\"customer\",\"type\":{\"type\":\"record\",\"name\":\"Customer\",\"fields\":["      \
    "  {\"name\":\"name\",\"type\":\"string\"}," TIER "]}},"                                       \
    "{\"name\":\"lines\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","             \
    "  \"name\":\"Line\",\"fields\":[{\"name\":\"sku\",\"type\":\"string\"},"                      \
    "  {\"name\":\"n\",\"type\":\"int\"}]}}},"                                                     \
    "{\"name\":\"tags\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"                         \
    "{\"name\":\"status\",\"type\":{\"type\":\"enum\",\"name\":\"Status\","                        \
    "  \"symbols\":[\"NEW\",\"SHIPPED\",\"DONE\"]}},"                                              \
    "{\"name\":\"blob\",\"type\":\"bytes\"},"                                                      \
    "{\"name\":\"hash\",\"type\":{\"type\":\"fixed\",\"name\":\"H4\",\"size\":4}},"                \
    "{\"name\":\"ref\",\"type\":[\"null\",\"Customer\"]}"                                          \
    "]}"

#endif
