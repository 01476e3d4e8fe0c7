/* check.h - the tiny assertion header shared by every tests/test_<module>.c
 *
 * Each test is a function run by RUN(fn); it prints one line per test:
 *   PASS name | FAIL name: file:line: what | SKIP name: reason
 * tests/run.sh counts those lines. A test binary exits 1 if any failed.
 */
#ifndef DL_CHECK_H
#define DL_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failed_tests, check_passed_tests, check_skipped_tests;
static int check_current_failed;
static char check_skip_reason[256];

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!check_current_failed)                                                             \
                printf("  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                  \
            check_current_failed++;                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!check_current_failed) {                                                           \
                printf("  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                  \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
            }                                                                                      \
            check_current_failed++;                                                                \
        }                                                                                          \
    } while (0)

/* |a - b| <= tol, printing both values on failure. */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                     \
        if (!(fabs(check_a_ - check_b_) <= (tol))) {                                               \
            if (!check_current_failed)                                                             \
                printf("  %s:%d: %s = %.9g, %s = %.9g, tolerance %g\n", __FILE__, __LINE__, #a,    \
                       check_a_, #b, check_b_, (double)(tol));                                     \
            check_current_failed++;                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int check_rc_ = (expr);                                                                    \
        if (check_rc_ < 0) {                                                                       \
            if (!check_current_failed)                                                             \
                printf("  %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, check_rc_,      \
                       dl_error_message());                                                        \
            check_current_failed++;                                                                \
        }                                                                                          \
    } while (0)

/* Marks the running test skipped with a visible reason; return after it. */
#define SKIP(...) snprintf(check_skip_reason, sizeof check_skip_reason, __VA_ARGS__)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        check_current_failed = 0;                                                                  \
        check_skip_reason[0] = 0;                                                                  \
        fn();                                                                                      \
        if (check_current_failed) {                                                                \
            printf("FAIL %s\n", #fn);                                                              \
            check_failed_tests++;                                                                  \
        } else if (check_skip_reason[0]) {                                                         \
            printf("SKIP %s: %s\n", #fn, check_skip_reason);                                       \
            check_skipped_tests++;                                                                 \
        } else {                                                                                   \
            printf("PASS %s\n", #fn);                                                              \
            check_passed_tests++;                                                                  \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)

#define CHECK_EXIT() return check_failed_tests ? 1 : 0

#endif
