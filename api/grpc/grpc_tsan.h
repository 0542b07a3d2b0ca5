/* ThreadSanitizer annotations for completion-queue tags; empty unless built with TSan. */
#ifndef KS_GRPC_TSAN_H
#define KS_GRPC_TSAN_H

/* grpc core synchronizes through absl mutexes and futexes that an uninstrumented
 * libgrpc hides from TSan, so a tag handed to grpc on one thread and returned by
 * grpc_completion_queue_next on another looks unsynchronized. Every call that hands
 * grpc a tag releases it, and every completion acquires its tag: the happens-before
 * edge grpc really provides. Include this after the grpc headers; it wraps the calls
 * by name, so the code that uses them reads as plain grpc. */
#if defined(__SANITIZE_THREAD__)
#include <grpc/grpc.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);

static inline grpc_call_error ks_tsan_start_batch(grpc_call *call, const grpc_op *ops, size_t nops,
                                                  void *tag, void *reserved)
{
    __tsan_release(tag);
    return (grpc_call_start_batch)(call, ops, nops, tag, reserved);
}

static inline grpc_call_error ks_tsan_request_call(grpc_server *server, grpc_call **call,
                                                   grpc_call_details *details,
                                                   grpc_metadata_array *md,
                                                   grpc_completion_queue *bound,
                                                   grpc_completion_queue *notify, void *tag)
{
    __tsan_release(tag);
    return (grpc_server_request_call)(server, call, details, md, bound, notify, tag);
}

static inline void ks_tsan_shutdown_and_notify(grpc_server *server, grpc_completion_queue *cq,
                                               void *tag)
{
    __tsan_release(tag);
    (grpc_server_shutdown_and_notify)(server, cq, tag);
}

static inline grpc_event ks_tsan_cq_next(grpc_completion_queue *cq, gpr_timespec deadline,
                                         void *reserved)
{
    grpc_event e = (grpc_completion_queue_next)(cq, deadline, reserved);
    if (e.type == GRPC_OP_COMPLETE && e.tag)
        __tsan_acquire(e.tag);
    return e;
}

#define grpc_call_start_batch           ks_tsan_start_batch
#define grpc_server_request_call        ks_tsan_request_call
#define grpc_server_shutdown_and_notify ks_tsan_shutdown_and_notify
#define grpc_completion_queue_next      ks_tsan_cq_next
#endif

#endif
