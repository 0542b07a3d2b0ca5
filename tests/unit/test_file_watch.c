/* test_file_watch.c: a rewrite, a rename over the file, a symlink swap and a file that goes
 * and comes back are each seen once; a look with nothing new sees nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "file_watch.h"

static char dir[64];

static void write_file(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_changes_seen_once(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ks_test_file_watch_%d", (int)getpid());
    char cmd[256], path[128], data1[128], data2[128], link1[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir %s", dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/tokens.json", dir);
    write_file("tokens.json", "one");
    ks_file_watch_t w;
    ks_file_watch_init(&w, path);
    assert_false(ks_file_watch_changed(&w));

    write_file("tokens.json", "two, longer"); /* rewritten in place */
    assert_true(ks_file_watch_changed(&w));
    assert_false(ks_file_watch_changed(&w));

    write_file("new", "three"); /* a new file renamed over it */
    snprintf(data1, sizeof(data1), "%s/new", dir);
    assert_int_equal(rename(data1, path), 0);
    assert_true(ks_file_watch_changed(&w));
    assert_false(ks_file_watch_changed(&w));

    assert_int_equal(unlink(path), 0); /* gone: unchanged until it comes back */
    assert_false(ks_file_watch_changed(&w));
    write_file("tokens.json", "four");
    assert_true(ks_file_watch_changed(&w));

    /* A Kubernetes volume: the path is a symlink whose target directory is swapped. */
    write_file("a", "five");
    write_file("b", "six");
    snprintf(data1, sizeof(data1), "%s/a", dir);
    snprintf(data2, sizeof(data2), "%s/b", dir);
    snprintf(link1, sizeof(link1), "%s/link", dir);
    assert_int_equal(symlink(data1, link1), 0);
    ks_file_watch_t lw;
    ks_file_watch_init(&lw, link1);
    assert_false(ks_file_watch_changed(&lw));
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s/link.tmp", dir);
    assert_int_equal(symlink(data2, tmp), 0);
    assert_int_equal(rename(tmp, link1), 0);
    assert_true(ks_file_watch_changed(&lw));
    assert_false(ks_file_watch_changed(&lw));

    ks_file_watch_t none;
    ks_file_watch_init(&none, "");
    assert_false(ks_file_watch_changed(&none));
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changes_seen_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
