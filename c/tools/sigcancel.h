/*
 * sigcancel.h - one blocking acquire that a signal ends at once.
 *
 * redlockc blocks its signals and reads them from a signalfd, so no handler
 * runs anywhere. While the main thread sleeps in an acquire, a helper
 * thread watches that signalfd and, once a signal is pending, cancels the
 * acquire (rlc_lock_cancel, or the family's rlc_*_cancel); it reads
 * nothing, so the main thread still sees the signal afterwards and decides
 * what it means.
 */
#ifndef RLC_CLI_SIGCANCEL_H
#define RLC_CLI_SIGCANCEL_H

#include <stdint.h>

#include "redlockc.h"

/* One wait and the call that cancels it, on the same handle. */
struct sigcancel_wait {
    int (*acquire)(void *handle, int64_t wait_ms); /* an rlc_*_acquire */
    int (*cancel)(void *handle);                   /* its rlc_*_cancel */
    void *handle;
};

/* w->acquire(w->handle, wait_ms), ended with RLC_E_CANCELED (nothing kept)
 * when a signal is pending on sigfd. Every report_ms (0: never) while it
 * waits, report(user) runs on the helper thread. */
int sigcancel_wait(const struct sigcancel_wait *w, int sigfd, int64_t wait_ms,
                   int64_t report_ms, void (*report)(void *user), void *user);

/* The same for rlc_lock_acquire(l, wait_ms, lease_ms). */
int sigcancel_acquire(rlc_lock *l, int sigfd, int64_t wait_ms, int64_t lease_ms,
                      int64_t report_ms, void (*report)(void *user), void *user);

#endif
