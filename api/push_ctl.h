/* push_ctl.h: push set at run time as another edge reaches it (HTTP's PUT, GET and DELETE
 * /v1/groups/{group}/push). The edge table (edges.c) fills it with the push edge's calls, so
 * no transport includes another's headers. */
#ifndef KS_PUSH_CTL_H
#define KS_PUSH_CTL_H

#include <stddef.h>

#include "auth.h"
#include "types.h"

struct json_t; /* jansson's */

typedef struct ks_push_ctl {
    void *push; /* the push edge, or NULL when it is not running: each call then refuses */
    /* Starts pushing group's topics as body (a static group's "push" object) says; who must
     * already be allowed the group and topics. KS_E_PERMISSION, KS_E_STALE, KS_E_INVALID with
     * err. Any thread. */
    ks_status_t (*add)(void *push, const char *group, const char *const *topics, size_t topic_cnt,
                       struct json_t *body, const ks_principal_t *who, char *err, size_t errsize);
    /* group's push as JSON (new reference), or NULL when it has none. */
    struct json_t *(*describe)(void *push, const char *group);
    /* Stops group's push set by API call; *out: what it was. */
    ks_status_t (*remove)(void *push, const char *group, struct json_t **out, char *err,
                          size_t errsize);
} ks_push_ctl_t;

#endif
