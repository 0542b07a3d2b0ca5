/* healthcheck.h: `ksidecar --healthcheck`, a container's probe of the ksidecar running beside it.
 */
#ifndef KS_HEALTHCHECK_H
#define KS_HEALTHCHECK_H

#include <stdbool.h>

#include "config.h"

/* Whether argv asks for --healthcheck; if so the flag is taken out of argv (and *argc), so
 * that the rest parses as the daemon's own arguments would. */
bool ks_healthcheck_wanted(int *argc, char **argv);

/* GET /healthz of the ksidecar that cfg describes: on http.health_listen, else on http.listen
 * when that is plain HTTP; a listen host of any address (empty, "*", 0.0.0.0) is asked on
 * 127.0.0.1. Prints the answer's body on stdout, or why there is none on stderr. Returns 0
 * when the answer is 200, 1 otherwise (a HEALTHCHECK's "unhealthy"); waits at most
 * timeout_ms. Main thread only (it sets libcurl up and down). */
int ks_healthcheck(const ks_config_t *cfg, long timeout_ms);

#endif
