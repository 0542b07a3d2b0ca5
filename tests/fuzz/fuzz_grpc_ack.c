/* fuzz_grpc_ack.c: libFuzzer harness for the gRPC edge's fast ack decoder (api/grpc/grpc_wire.c's
 * grpc_fast_ack_ids, reached by including the file). Input: a SubscribeRequest message. Whenever
 * the fast decoder answers, protobuf-c must accept the same bytes as an ack with the same
 * ids; whenever protobuf-c reads an ack of printable ids only, the fast decoder must either
 * decline or give the same ids. */
#include "../../api/grpc/grpc_wire.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that ASan sees any read past the message. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        abort();
    memcpy(copy, data, size);
    grpc_slice sl = grpc_slice_from_static_buffer(copy, size);
    size_t n = 0;
    bool by_position = false;
    char **fast = grpc_fast_ack_ids(sl, &n, &by_position);
    Ksidecar__V1__SubscribeRequest *r = ksidecar__v1__subscribe_request__unpack(NULL, size, copy);
    if (fast) {
        if (!r || r->kind_case != KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK ||
            r->ack->n_ack_ids != n || r->ack->results_by_position != by_position)
            abort();
        for (size_t i = 0; i < n; i++)
            if (strcmp(fast[i], r->ack->ack_ids[i]) != 0)
                abort();
        free(fast);
    }
    if (r)
        ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
    free(copy);
    return 0;
}
