/* test_sd_notify.c: the notify datagram reaches a path socket and an abstract one, whole; a
 * reload's carries its monotonic time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sd_notify.h"

/* Binds a datagram socket to name ('@' first: abstract) and returns its fd. */
static int listen_on(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    memcpy(sa.sun_path, name, len);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t salen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0 : 1));
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, salen), 0);
    return fd;
}

static void expect_message(int fd, const char *want)
{
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static void test_path_socket(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/ks_sd_notify_%d.sock", (int)getpid());
    unlink(path);
    int fd = listen_on(path);
    setenv("NOTIFY_SOCKET", path, 1);
    assert_int_equal(ks_sd_notify("READY=1\nSTATUS=listening"), 1);
    expect_message(fd, "READY=1\nSTATUS=listening");
    assert_int_equal(ks_sd_notify("STOPPING=1"), 1);
    expect_message(fd, "STOPPING=1");
    close(fd);
    unlink(path);
}

static void test_abstract_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof(name), "@ks_sd_notify_%d", (int)getpid());
    int fd = listen_on(name);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(ks_sd_notify("READY=1"), 1);
    expect_message(fd, "READY=1");
    close(fd);
}

static void test_not_under_systemd(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(ks_sd_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(ks_sd_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(ks_sd_notify("READY=1"), -1);
    setenv("NOTIFY_SOCKET", "/nonexistent/dir/notify.sock", 1);
    assert_int_equal(ks_sd_notify("READY=1"), -1);
}

/* A reload's datagram: RELOADING=1 and the monotonic time it began, in microseconds. */
static void test_reloading(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/ks_sd_notify_r%d.sock", (int)getpid());
    unlink(path);
    int fd = listen_on(path);
    setenv("NOTIFY_SOCKET", path, 1);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(ks_sd_notify_reloading(), 1);
    clock_gettime(CLOCK_MONOTONIC, &b);
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    assert_true(n > 0);
    buf[n] = '\0';
    unsigned long long usec;
    char rest;
    assert_int_equal(sscanf(buf, "RELOADING=1\nMONOTONIC_USEC=%llu%c", &usec, &rest), 1);
    assert_true(usec >= (unsigned long long)a.tv_sec * 1000000ULL + a.tv_nsec / 1000);
    assert_true(usec <= (unsigned long long)b.tv_sec * 1000000ULL + b.tv_nsec / 1000);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(ks_sd_notify_reloading(), 0);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_not_under_systemd),
        cmocka_unit_test(test_reloading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
