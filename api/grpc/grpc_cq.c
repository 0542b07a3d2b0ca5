/* grpc_cq.c: the gRPC edge's completion-queue threads: their loop, which runs each event's
 * handler (ev_t), and whether the running thread is one of them. Calls no other file of
 * the edge. */
#include "grpc_int.h"

static _Thread_local bool cq_thread;

bool on_cq_thread(void)
{
    return cq_thread;
}

void *cq_main(void *arg)
{
    ks_grpc_t *s = arg;
    cq_thread = true;
    for (;;) {
        grpc_event e = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (e.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (e.type != GRPC_OP_COMPLETE)
            continue;
        ev_t *ev = e.tag;
        if (ev && ev->fn)
            ev->fn(ev->ctx, e.success != 0);
    }
    return NULL;
}
