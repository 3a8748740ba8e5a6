/*
 * clock.h - the one clock the library measures time with.
 *
 * Lease validity and deadlines are differences of CLOCK_MONOTONIC readings:
 * the wall clock can jump (NTP, an admin) and a jump must never make a lock
 * look valid for longer than it is.
 */
#ifndef RLC_CLOCK_H
#define RLC_CLOCK_H

#include <stdint.h>
#include <time.h>

#define RLC_NS_PER_MS 1000000LL
/* Far enough to mean "never", small enough that adding to it cannot overflow. */
#define RLC_FOREVER_NS (INT64_MAX / 4)

static inline int64_t rlc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* now + ms, saturating at RLC_FOREVER_NS so that huge waits cannot wrap. */
static inline int64_t rlc_deadline_after_ms(int64_t now_ns, int64_t ms)
{
    if (ms < 0 || ms >= (RLC_FOREVER_NS - now_ns) / RLC_NS_PER_MS)
        return RLC_FOREVER_NS;
    return now_ns + ms * RLC_NS_PER_MS;
}

/* Milliseconds left until a deadline, rounded up so that a poll() with this
 * timeout never wakes just before the deadline and spins; 0 when past. */
static inline int rlc_poll_ms_until(int64_t deadline_ns, int64_t now_ns)
{
    if (deadline_ns <= now_ns)
        return 0;
    int64_t ms = (deadline_ns - now_ns + RLC_NS_PER_MS - 1) / RLC_NS_PER_MS;
    return ms > 60000 ? 60000 : (int)ms;
}

#endif
