/*
 * check.h - a minimal test runner: one binary per area, one ctest per case.
 *
 *   TEST(waiter_wakes_on_unlock) { ... CHECK(x == 1, "x=%d", x); ... }
 *   ...
 *   RUN_TESTS(waiter_wakes_on_unlock, ...)
 *
 * `./test_core name` runs one case (ctest does this); no argument runs all.
 * A failed CHECK prints what was expected and what was seen, and ends the
 * case; the case's cleanup runs through CLEANUP blocks registered with DEFER.
 */
#ifndef RLC_CHECK_H
#define RLC_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redlockc.h"

extern int check_failed;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, "\n");                                                \
            check_failed = 1;                                                     \
            goto done;                                                            \
        }                                                                         \
    } while (0)

/* A status check that prints both codes and the library's message. */
#define CHECK_RC(expr, want)                                                      \
    do {                                                                          \
        int rc_ = (expr);                                                         \
        CHECK(rc_ == (want), "%s returned %d (%s), expected %d (%s); errmsg: %s", \
              #expr, rc_, rlc_strerror(rc_), (want), rlc_strerror(want),          \
              rlc_errmsg());                                                      \
    } while (0)

#define TEST(name) static void name(void)

struct check_case {
    const char *name;
    void (*fn)(void);
};

static inline int64_t check_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void check_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits, bounded, until cond holds; evaluates to whether it did. */
#define WAIT_UNTIL(cond, timeout_ms)                                              \
    ({                                                                            \
        int64_t until_ = check_now_ms() + (timeout_ms);                           \
        int ok_ = 0;                                                              \
        while (!(ok_ = !!(cond)) && check_now_ms() < until_)                      \
            check_sleep_ms(2);                                                    \
        ok_;                                                                      \
    })

int check_main(int argc, char **argv, const struct check_case *cases, int n);

#define CASE(fn) {#fn, fn}
#define RUN_TESTS(...)                                                            \
    int check_failed;                                                             \
    int main(int argc, char **argv)                                               \
    {                                                                             \
        static const struct check_case cases_[] = {__VA_ARGS__};                  \
        return check_main(argc, argv, cases_, sizeof cases_ / sizeof cases_[0]);  \
    }

#endif
