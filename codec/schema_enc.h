/* schema_enc.h: a produced key or value given as JSON, written in Confluent's wire format (a 0
 * byte, the schema id, the encoded value) with a schema the registry serves, named by id or by
 * subject and version. One implementation for every edge that produces (HTTP, gRPC).
 *
 * Threads. Never waits for the network: a schema not cached yet is fetched on the registry's
 * thread (registry.h) and the caller's wake is called when it settles; the caller then runs
 * the same encode again. Any thread. */
#ifndef KS_SCHEMA_ENC_H
#define KS_SCHEMA_ENC_H

#include <jansson.h>
#include <stdint.h>

#include "json_out.h"
#include "registry.h"
#include "types.h"

/* Which schema a produced value is written with. */
typedef struct ks_schema_pick {
    int32_t id;          /* > 0: the schema with this id */
    const char *subject; /* else subject's version (id 0, subject not NULL) */
    const char *version; /* "latest" or a version number, as text */
    /* With subject: a schema (its text) to register there, or whose id there is found, when
     * schema_registry.auto_register is set (version then unused). NULL: none. */
    const char *schema;
    ks_schema_type_t type; /* schema's */
} ks_schema_pick_t;

/* Checks a pick as an edge read it: an id from 1 to INT32_MAX, or a subject (not empty) with
 * a version that is "latest" or a number from 1 to INT32_MAX, or with a schema; not both, and
 * a version only with a subject. what: how the edge names the fields ("records[2].value"). Returns
 * 0, or -1 with err. */
int ks_schema_pick_check(const ks_schema_pick_t *pick, const char *what, char *err, size_t errsize);

/* What an encode came to. */
typedef enum ks_schema_enc_res {
    KS_SENC_DONE,    /* *st says: KS_OK with the bytes appended to b, or the error in err */
    KS_SENC_PENDING, /* the schema is being fetched: wake is called when it settles */
} ks_schema_enc_res_t;

/* v (borrowed) written with the schema pick names, in the wire format, appended to b. DONE
 * with *st: KS_OK; KS_E_INVALID when v does not fit the schema (err names the field: `value
 * does not fit schema 7: field "customer.tier": ...`, what[] being "value" or "key"), or pick gives
 * a schema to register while schema_registry.auto_register is off (or the registry refuses it:
 * invalid, incompatible); KS_E_NOT_FOUND when the registry has no such schema, subject or version;
 * KS_E_UNAVAILABLE when the registry cannot be reached (or no schema_registry.url is set). With
 * wake (NULL: none), a wake is also registered for an unreachable registry: the caller that answers
 * at once calls ks_registry_cancel. */
ks_schema_enc_res_t ks_schema_encode(const char *what, const ks_schema_pick_t *pick, json_t *v,
                                     const ks_registry_wake_t *wake, ks_jbuf_t *b, ks_status_t *st,
                                     char *err, size_t errsize);

/* ks_schema_encode for one record an edge produces: DONE with *out, the bytes in a new buffer
 * (*len long; the caller frees it), or *out NULL and the error kept in *rec_st and rec_msg
 * (unless the record has one already: the first error stays); PENDING as ks_schema_encode,
 * *out NULL. */
ks_schema_enc_res_t ks_schema_encode_rec(const char *what, const ks_schema_pick_t *pick, json_t *v,
                                         const ks_registry_wake_t *wake, char **out, size_t *len,
                                         ks_status_t *rec_st, char *rec_msg, size_t msgsize);

#endif
