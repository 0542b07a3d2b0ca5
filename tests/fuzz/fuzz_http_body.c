/* fuzz_http_body.c: libFuzzer harness for the HTTP edge's fast ack-id reader
 * (api/http/http_settle.c's http_fast_ack_ids, reached by including the file). Input: a request
 * body. Whatever the fast reader accepts, jansson must read as {"ack_ids":[...]} with the same
 * strings in the same order. (The JSON bodies as a whole go through fuzz_http_url.) */
#include "../../api/http/http_settle.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* As the server stores it (http_req_add_body): body_len bytes, NUL-terminated. */
    req_t r;
    memset(&r, 0, sizeof(r));
    r.io.body = malloc(size + 1);
    if (!r.io.body)
        abort();
    memcpy(r.io.body, data, size);
    r.io.body[size] = '\0';
    r.io.body_len = size;
    if (http_fast_ack_ids(&r)) {
        json_error_t jerr;
        json_t *root = json_loadb((const char *)data, size, 0, &jerr);
        json_t *ids = json_object_get(root, "ack_ids");
        if (!root || json_object_size(root) != 1 || !json_is_array(ids) ||
            json_array_size(ids) != r.u.settle.id_cnt)
            abort();
        for (size_t i = 0; i < r.u.settle.id_cnt; i++) {
            json_t *it = json_array_get(ids, i);
            if (!json_is_string(it) || strcmp(json_string_value(it), r.u.settle.ids[i]) != 0)
                abort();
        }
        json_decref(root);
    } else if (r.u.settle.ids || r.u.settle.id_cnt || memcmp(r.io.body, data, size) != 0) {
        abort(); /* declined: the body must be untouched */
    }
    free(r.u.settle.ids);
    free(r.io.body);
    return 0;
}
