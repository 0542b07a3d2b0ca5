/* assert_contains.h: a cmocka check that a message holds the words it must (include after
 * cmocka.h). */
#ifndef KS_TEST_ASSERT_CONTAINS_H
#define KS_TEST_ASSERT_CONTAINS_H

#include <string.h>

#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            fail_msg("expected \"%s\" to contain \"%s\"", h_ ? h_ : "(null)", n_);                 \
    } while (0)

#endif
