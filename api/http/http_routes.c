/* http_routes.c: the HTTP edge's route table: each endpoint one row (method, path, engine
 * command, when the caller is checked, decoder, encoder). It names the decoders of every
 * route's file, above them; http_router.c serves requests by it. */
#include <stddef.h>

#include "http_int.h"

/* The route table: each endpoint one row. The row whose path and method match serves the
 * request; a path served with other methods only is answered 405 with Allow naming them. A
 * new endpoint for an existing command is a row here, a decoder in its route's file and an
 * encoder in http_json.c. */
static const route_t routes[] = {
    /* The status page: it asks the status API itself, with the caller's token. */
    {"GET", "/", KS_CMD_NONE, 0, false, AUTH_NONE, http_page_decode, NULL},
    {"GET", "/healthz", KS_CMD_NONE, 0, true, AUTH_NONE, http_health_decode, NULL},
    {"GET", "/readyz", KS_CMD_STATUS, 0, true, AUTH_NONE, http_ready_decode, http_reply_ready},
    {"GET", "/openapi.yaml", KS_CMD_NONE, 0, false, AUTH_NONE, http_openapi_decode, NULL},
    /* Group and topic names show: with tokens, a caller sees only its groups, as a listing. */
    {"GET", "/metrics", KS_CMD_STATUS, 0, true, AUTH_METHOD, http_metrics_decode,
     http_reply_metrics},
    {"GET", "/v1/groups", KS_CMD_STATUS, 0, false, AUTH_METHOD, http_status_decode,
     http_reply_status},
    {"GET", "/v1/groups/", KS_CMD_STATUS, 0, false, AUTH_METHOD, http_status_decode,
     http_reply_status},
    {"GET", "/v1/groups/{group}", KS_CMD_STATUS, 0, false, AUTH_METHOD, http_status_decode,
     http_reply_status},
    {"GET", "/v1/groups/{group}/records", KS_CMD_FETCH, 0, false, AUTH_FIRST, http_fetch_decode,
     http_reply_fetch},
    /* A stream's fetches are the subscriber-stream core's (http_stream.c), its answer the
     * open response: the row itself sends no command. */
    {"GET", "/v1/groups/{group}/stream", KS_CMD_NONE, 0, false, AUTH_FIRST, http_stream_decode,
     NULL},
    {"POST", "/v1/groups/{group}/acks", KS_CMD_SETTLE, KS_SETTLE_ACK, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/nacks", KS_CMD_SETTLE, KS_SETTLE_NACK, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/deadline", KS_CMD_SETTLE, KS_SETTLE_EXTEND, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/seek", KS_CMD_SEEK, 0, false, AUTH_FIRST, http_seek_decode,
     http_reply_seek},
    /* Each dead letter's original topic is checked against the produce scope as it is read. */
    {"POST", "/v1/groups/{group}/redrive", KS_CMD_REDRIVE, 0, false, AUTH_FIRST,
     http_decode_redrive, http_reply_redrive},
    /* Each record's topic is checked against the produce scope on its own (http_produce.c). */
    {"GET", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_get, NULL},
    {"PUT", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_put, NULL},
    {"DELETE", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_delete,
     NULL},
    {"POST", "/v1/topics/{topic}/records", KS_CMD_PRODUCE, 0, false, AUTH_METHOD,
     http_produce_decode, http_produce_reply},
};

const route_t *http_route_table(size_t *n)
{
    *n = sizeof(routes) / sizeof(routes[0]);
    return routes;
}
