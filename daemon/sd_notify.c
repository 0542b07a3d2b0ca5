/* sd_notify.c: the notify protocol of systemd's Type=notify, one datagram on $NOTIFY_SOCKET. */
#include "sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int ks_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@')) {
        errno = EINVAL;
        return -1;
    }
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@') /* an abstract socket: its name starts with a NUL, not '@' */
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t salen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '@' ? 0 : 1));
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    int saved = errno;
    close(fd);
    errno = saved;
    return n < 0 ? -1 : 1;
}

int ks_sd_notify_reloading(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
        return -1;
    char state[64];
    snprintf(state, sizeof(state), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
    return ks_sd_notify(state);
}
