/* proto_schema.h: a Protobuf schema as the registry serves it (a .proto file's text, or the
 * base64 of its serialized FileDescriptorProto, which confluent-kafka's serializer registers)
 * parsed into the descriptors the decoder (proto_json.c) and encoder (proto_enc.c) walk:
 * messages, their fields and enums, every type name resolved.
 *
 * Taken: proto2 and proto3, package, messages and enums at any nesting, labels optional,
 * required and repeated, map<k, v>, oneof, the field options packed and json_name. Skipped:
 * other options, reserved, extensions, extend, service. Refused, naming it: imports (types
 * from other files, the well-known types among them), groups, editions.
 *
 * A parsed schema is immutable: any thread may use it at once. */
#ifndef KS_PROTO_SCHEMA_H
#define KS_PROTO_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

/* Field types, numbered as descriptor.proto's FieldDescriptorProto.Type. */
typedef enum ks_pb_type {
    KS_PB_DOUBLE = 1,
    KS_PB_FLOAT = 2,
    KS_PB_INT64 = 3,
    KS_PB_UINT64 = 4,
    KS_PB_INT32 = 5,
    KS_PB_FIXED64 = 6,
    KS_PB_FIXED32 = 7,
    KS_PB_BOOL = 8,
    KS_PB_STRING = 9,
    KS_PB_GROUP = 10,
    KS_PB_MESSAGE = 11,
    KS_PB_BYTES = 12,
    KS_PB_UINT32 = 13,
    KS_PB_ENUM = 14,
    KS_PB_SFIXED32 = 15,
    KS_PB_SFIXED64 = 16,
    KS_PB_SINT32 = 17,
    KS_PB_SINT64 = 18,
} ks_pb_type_t;

typedef struct ks_pb_field {
    char *name;      /* as in the schema */
    char *json_name; /* lowerCamelCase of name, or json_name's */
    uint32_t number;
    ks_pb_type_t type;
    bool repeated; /* a map is a repeated field of its entry message */
    bool presence; /* shown when set even at its zero value: proto2, optional, oneof, message */
    bool packed;   /* written packed by the encoder */
    int oneof;     /* index of its oneof within the message, or -1 */
    int ref;       /* MESSAGE: index in messages; ENUM: index in enums; else -1 */
} ks_pb_field_t;

typedef struct ks_pb_msg {
    char *full_name;       /* "pkg.Outer.Inner" */
    ks_pb_field_t *fields; /* sorted by number */
    size_t nfields;
    int *nested; /* indexes in messages of the nested messages, map entries among them, in order */
    size_t nnested;
    bool map_entry; /* key is field 1, value field 2 */
} ks_pb_msg_t;

typedef struct ks_pb_enum_value {
    char *name;
    int32_t number;
} ks_pb_enum_value_t;

typedef struct ks_pb_enum {
    char *full_name;
    ks_pb_enum_value_t *values;
    size_t nvalues;
} ks_pb_enum_t;

typedef struct ks_proto {
    ks_pb_msg_t *msgs;
    size_t nmsgs;
    ks_pb_enum_t *enums;
    size_t nenums;
    int *top; /* indexes of the top-level messages, in order */
    size_t ntop;
    bool proto3;
} ks_proto_t;

/* text[0..len) parsed: .proto text, or base64 of a FileDescriptorProto. NULL with err (naming
 * the line, or what is refused) when it is neither or uses what is not taken. The caller frees
 * it with ks_proto_free. */
ks_proto_t *ks_proto_new(const char *text, size_t len, char *err, size_t errsize);
void ks_proto_free(ks_proto_t *p);

/* The wire type (proto_wire.h's KS_WT_*) a field of type t is written with, not packed. */
int ks_pb_wire_type(ks_pb_type_t t);
/* The field of m numbered n, or NULL. */
const ks_pb_field_t *ks_pb_field_by_number(const ks_pb_msg_t *m, uint32_t n);
/* The field of m whose json_name or name is name[0..len), or NULL. */
const ks_pb_field_t *ks_pb_field_by_name(const ks_pb_msg_t *m, const char *name, size_t len);
/* The name of e's value numbered n (the first when aliased), or NULL. */
const char *ks_pb_enum_name(const ks_pb_enum_t *e, int32_t n);

/* How a registry's schema object keeps its parsed Protobuf schema (ks_schema_parsed). */
extern const ks_schema_parser_t ks_proto_parser;

#endif
