/*
 * handoff.c - contended hand-off: N threads, one lock name.
 *
 * What is timed: from the moment a holder calls rlc_lock_release() to the
 * moment another thread's rlc_lock_acquire() returns with the lock. That is
 * the release's round trip, the unlock message's way to the waiters, and the
 * winning waiter's acquire round trip.
 *
 * A releaser does not try again until someone else has taken the lock (or
 * HANDOFF_PATIENCE passed): otherwise the releaser, which needs no wake-up,
 * would win nearly every time and hand-offs would be rare. And a holder holds
 * for HOLD_NS (a small critical section): with no hold at all, the previous
 * releaser, woken by the new holder's acquire, would send its next acquire
 * right behind the new holder's release and win without ever waiting, so
 * two threads would play ping-pong while the others slept. With the hold,
 * every hand-off goes to a thread that was really waiting. cycles/s is
 * hand-offs per second (each includes the hold). The node-redlock driver
 * follows the same rules.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "redlockc.h"

#define HANDOFF_PATIENCE_NS (2000 * 1000000LL)
#define MAX_ERRORS 1000
#define HOLD_NS (1000 * 1000LL)

struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    int holder;           /* the last thread to acquire, -1 none */
    int64_t released_ns;  /* when that holder called release */
    int64_t end_ns;
    struct samples lat;   /* under mu */
    long cycles, errors, timeouts;
};

struct handoff_worker {
    pthread_t tid;
    int id;
    rlc_lock *lock;
    struct handoff *h;
};

/* Waits until another thread took the lock, or the patience (or the
 * workload's time) ran out. The condition variable runs on CLOCK_MONOTONIC. */
static void wait_for_taker(struct handoff *h, int me)
{
    int64_t until_ns = now_ns() + HANDOFF_PATIENCE_NS;
    bool patience = until_ns < h->end_ns;
    if (!patience)
        until_ns = h->end_ns;
    struct timespec until = {until_ns / 1000000000LL, until_ns % 1000000000LL};
    pthread_mutex_lock(&h->mu);
    while (h->holder == me) {
        if (pthread_cond_timedwait(&h->changed, &h->mu, &until) != 0) {
            h->timeouts += patience;
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
}

static void *handoff_thread(void *arg)
{
    struct handoff_worker *w = arg;
    struct handoff *h = w->h;
    for (long i = 0; i < 100000000L && now_ns() < h->end_ns; i++) {
        int rc = rlc_lock_acquire(w->lock, 5000, 0);
        int64_t got = now_ns();
        if (rc != RLC_OK) {
            pthread_mutex_lock(&h->mu);
            if (h->errors++ == 0)
                note("handoff: %s: %s", rlc_strerror(rc), rlc_errmsg());
            bool stop = h->errors > MAX_ERRORS;
            pthread_mutex_unlock(&h->mu);
            if (stop)
                break;
            continue;
        }
        pthread_mutex_lock(&h->mu);
        if (h->holder >= 0 && h->holder != w->id && got < h->end_ns) {
            samples_add(&h->lat, got - h->released_ns);
            h->cycles++;
        }
        h->holder = w->id;
        pthread_cond_broadcast(&h->changed);
        pthread_mutex_unlock(&h->mu);
        sleep_ns(HOLD_NS);
        /* Stamped before the call: the next holder may return before we do. */
        pthread_mutex_lock(&h->mu);
        h->released_ns = now_ns();
        pthread_mutex_unlock(&h->mu);
        rc = rlc_lock_release(w->lock);
        if (rc != RLC_OK)
            note("handoff: release: %s: %s", rlc_strerror(rc), rlc_errmsg());
        if (now_ns() < h->end_ns)
            wait_for_taker(h, w->id);
    }
    return NULL;
}

void run_handoff(struct bench *b, int threads)
{
    struct handoff h;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h.changed, &ca);
    pthread_condattr_destroy(&ca);
    h.holder = -1;
    samples_init(&h.lat, 4u << 20);
    rlc_client *c = NULL;
    struct handoff_worker *w = calloc((size_t)threads, sizeof *w);
    if (!w || rlc_client_new(&c, b->srv[0].uri, NULL) != RLC_OK) {
        note("handoff: client: %s", rlc_errmsg());
        goto out;
    }
    /* Warm-up: one cycle per thread's handle makes the connections. */
    for (int i = 0; i < threads; i++) {
        w[i].id = i;
        w[i].h = &h;
        rlc_lock_new(c, "bench:handoff", 0, &w[i].lock);
    }
    if (rlc_lock_acquire(w[0].lock, 1000, 0) == RLC_OK)
        rlc_lock_release(w[0].lock);

    struct cpu_window cpu;
    cpu_begin(b, &cpu, 1);
    int64_t t0 = now_ns();
    h.end_ns = t0 + (int64_t)(b->seconds * 1e9);
    for (int i = 0; i < threads; i++)
        pthread_create(&w[i].tid, NULL, handoff_thread, &w[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(w[i].tid, NULL);
    int64_t wall = h.end_ns - t0; /* hand-offs after end_ns are not counted */

    row_begin(b, "c.handoff");
    row_num(b, "threads", threads);
    row_num(b, "cycles", (double)h.cycles / ((double)wall / 1e9));
    row_num(b, "handoff_p50_us", samples_quantile_us(&h.lat, 0.5));
    row_num(b, "handoff_p99_us", samples_quantile_us(&h.lat, 0.99));
    row_num(b, "errors", (double)h.errors);
    row_num(b, "patience_timeouts", (double)h.timeouts);
    cpu_end(b, &cpu);
    row_end(b);
    for (int i = 0; i < threads; i++)
        rlc_lock_free(w[i].lock);
out:
    rlc_client_free(c);
    free(w);
    samples_free(&h.lat);
    pthread_cond_destroy(&h.changed);
    pthread_mutex_destroy(&h.mu);
}
