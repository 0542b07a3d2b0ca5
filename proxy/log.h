/* log.h: leveled logging to stderr, as text or JSON lines; safe from any thread. */
#ifndef KS_LOG_H
#define KS_LOG_H

#include <stdbool.h>

typedef enum {
    KS_LOG_ERROR = 0,
    KS_LOG_WARN = 1,
    KS_LOG_INFO = 2,
    KS_LOG_DEBUG = 3,
} ks_log_level_t;

/* Sets the threshold and the format. Call before other threads log. */
void ks_log_setup(ks_log_level_t level, bool json);

/* Parses "error", "warn", "info" or "debug". Returns 0, or -1 for anything else. */
int ks_log_level_parse(const char *s, ks_log_level_t *out);

const char *ks_log_level_str(ks_log_level_t level);

bool ks_log_enabled(ks_log_level_t level);

/* Writes one line if level passes the threshold. `component` names the source
 * ("http", "group:orders", "rdkafka"). One write(2) per line, so lines from
 * different threads never interleave. */
void ks_log(ks_log_level_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ks_err(comp, ...)  ks_log(KS_LOG_ERROR, comp, __VA_ARGS__)
#define ks_warn(comp, ...) ks_log(KS_LOG_WARN, comp, __VA_ARGS__)
#define ks_info(comp, ...) ks_log(KS_LOG_INFO, comp, __VA_ARGS__)
#define ks_dbg(comp, ...)                                                                          \
    do {                                                                                           \
        if (ks_log_enabled(KS_LOG_DEBUG))                                                          \
            ks_log(KS_LOG_DEBUG, comp, __VA_ARGS__);                                               \
    } while (0)

#endif
