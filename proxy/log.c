/* log.c: leveled logging to stderr, as text or JSON lines. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static ks_log_level_t log_level = KS_LOG_INFO;
static bool log_json = false;

static const char *level_names[] = {"error", "warn", "info", "debug"};

void ks_log_setup(ks_log_level_t level, bool json)
{
    log_level = level;
    log_json = json;
}

int ks_log_level_parse(const char *s, ks_log_level_t *out)
{
    for (int i = 0; i <= KS_LOG_DEBUG; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *out = (ks_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

const char *ks_log_level_str(ks_log_level_t level)
{
    return level <= KS_LOG_DEBUG ? level_names[level] : "?";
}

bool ks_log_enabled(ks_log_level_t level)
{
    return level <= log_level;
}

/* Appends s to buf as JSON string content (without quotes). */
static size_t json_escape(char *buf, size_t pos, size_t cap, const char *s)
{
    for (; *s && pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[pos++] = '\\';
            buf[pos++] = (char)c;
        } else if (c == '\n') {
            buf[pos++] = '\\';
            buf[pos++] = 'n';
        } else if (c < 0x20) {
            pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
        } else {
            buf[pos++] = (char)c;
        }
    }
    return pos;
}

void ks_log(ks_log_level_t level, const char *component, const char *fmt, ...)
{
    if (!ks_log_enabled(level))
        return;

    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t wl = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + wl, sizeof(when) - wl, ".%03ldZ", ts.tv_nsec / 1000000);

    char line[4096 + 256];
    size_t n;
    if (log_json) {
        n = (size_t)snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"",
                             when, level_names[level]);
        n = json_escape(line, n, sizeof(line) - 32, component);
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\",\"msg\":\"");
        n = json_escape(line, n, sizeof(line) - 8, msg);
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\"}\n");
    } else {
        n = (size_t)snprintf(line, sizeof(line), "%s %-5s [%s] %s\n", when, level_names[level],
                             component, msg);
    }
    if (n >= sizeof(line))
        n = sizeof(line) - 1;
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}
