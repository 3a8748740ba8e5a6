/*
 * sigcancel.c - a helper thread that cancels one acquire when a signal comes.
 *
 * The helper polls the signalfd and a pipe the main thread writes to when
 * its acquire has returned. A pending signal makes it cancel, and cancel
 * again every CANCEL_AGAIN_MS until that pipe says the acquire is over:
 * a cancel spares an acquire that had not started yet, and the
 * signal may come just before the main thread enters it. Without a signal
 * nothing is polled; the wait sleeps on the unlock message.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "sigcancel.h"

#define CANCEL_AGAIN_MS 20

struct helper {
    const struct sigcancel_wait *w;
    int sigfd;
    int done[2];          /* the main thread writes a byte once acquire returned */
    int64_t report_ms;
    void (*report)(void *user);
    void *user;
};

static void *helper_main(void *arg)
{
    struct helper *h = arg;
    struct pollfd pf[2] = {{h->done[0], POLLIN, 0}, {h->sigfd, POLLIN, 0}};
    int timeout = h->report && h->report_ms > 0 ? (int)h->report_ms : -1;
    for (;;) {
        int n = poll(pf, 2, timeout);
        if (n > 0 && pf[0].revents)
            return NULL;
        if (n > 0 && pf[1].revents)
            break;
        if (n == 0)
            h->report(h->user);
    }
    do
        h->w->cancel(h->w->handle);
    while (poll(pf, 1, CANCEL_AGAIN_MS) == 0);
    return NULL;
}

int sigcancel_wait(const struct sigcancel_wait *w, int sigfd, int64_t wait_ms,
                   int64_t report_ms, void (*report)(void *user), void *user)
{
    struct helper h = {w, sigfd, {-1, -1}, report_ms, report, user};
    pthread_t t;
    /* Without a helper the wait still works; it is only not cancellable. */
    if (pipe2(h.done, O_CLOEXEC) != 0)
        return w->acquire(w->handle, wait_ms);
    if (pthread_create(&t, NULL, helper_main, &h) != 0) {
        close(h.done[0]);
        close(h.done[1]);
        return w->acquire(w->handle, wait_ms);
    }
    int rc = w->acquire(w->handle, wait_ms);
    char one = 1;
    while (write(h.done[1], &one, 1) < 0 && errno == EINTR)
        ; /* a fresh pipe takes one byte: nothing else can fail */
    pthread_join(t, NULL);
    close(h.done[0]);
    close(h.done[1]);
    return rc;
}

struct lock_wait {
    rlc_lock *l;
    int64_t lease_ms;
};

static int lock_acquire(void *handle, int64_t wait_ms)
{
    const struct lock_wait *lw = handle;
    return rlc_lock_acquire(lw->l, wait_ms, lw->lease_ms);
}

static int lock_cancel(void *handle)
{
    return rlc_lock_cancel(((const struct lock_wait *)handle)->l);
}

int sigcancel_acquire(rlc_lock *l, int sigfd, int64_t wait_ms, int64_t lease_ms,
                      int64_t report_ms, void (*report)(void *user), void *user)
{
    struct lock_wait lw = {l, lease_ms};
    struct sigcancel_wait w = {lock_acquire, lock_cancel, &lw};
    return sigcancel_wait(&w, sigfd, wait_ms, report_ms, report, user);
}
