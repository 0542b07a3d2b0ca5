/* sd_notify.h: tells systemd (Type=notify) that ksidecar is ready or stopping, without libsystemd.
 */
#ifndef KS_SD_NOTIFY_H
#define KS_SD_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) as one datagram to the socket named by
 * $NOTIFY_SOCKET: a path, or an abstract name when it starts with '@'. Returns 1 when sent,
 * 0 when NOTIFY_SOCKET is unset or empty (not run by systemd), -1 with errno on failure.
 * Any thread; the caller logs a failure. */
int ks_sd_notify(const char *state);

/* Says a reload has begun: "RELOADING=1" with "MONOTONIC_USEC=" the CLOCK_MONOTONIC time in
 * microseconds, in one datagram, as systemd 253 and later require of a reload (Type=
 * notify-reload; older ones take it too). Returns as ks_sd_notify does; any thread. */
int ks_sd_notify_reloading(void);

#endif
