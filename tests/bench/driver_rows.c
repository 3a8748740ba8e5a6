/*
 * driver_rows.c - the blocking API (rlc_lock_*, the blocking driver of the
 * engine): threads that call acquire + release on names of their own, and a
 * hand-off from a holder's release to a waiter in another client.
 * rlc_bench_engine prints them beside the bare hiredis client's figures.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_rows.h"
#include "redlockc.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- cycles ----------------------------------------------------------- */

struct cyc {
    rlc_client *c;
    int index, run;
    int64_t end_ns;
    long cycles, errors;
};

static void *cycle_thread(void *arg)
{
    struct cyc *c = arg;
    char name[32];
    snprintf(name, sizeof name, "dr%d:%d", c->run, c->index);
    rlc_lock *l;
    if (rlc_lock_new(c->c, name, (uint64_t)c->index + 1, &l) != RLC_OK) {
        c->errors++;
        return NULL;
    }
    while (now_ns() < c->end_ns) {
        if (rlc_lock_acquire(l, 1000, -1) == RLC_OK && rlc_lock_release(l) == RLC_OK)
            c->cycles++;
        else
            c->errors++;
    }
    rlc_lock_free(l);
    return NULL;
}

double driver_cycles(const char *uri, int threads, double seconds, long *errors)
{
    static int run;
    rlc_client *client;
    *errors = 0;
    if (rlc_client_new(&client, uri, NULL) != RLC_OK)
        return 0;
    struct cyc *c = calloc((size_t)threads, sizeof *c);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    run++;
    int64_t t0 = now_ns(), end = t0 + (int64_t)(seconds * 1e9);
    int started = 0;
    for (int i = 0; i < threads; i++) {
        c[i] = (struct cyc){client, i, run, end, 0, 0};
        if (pthread_create(&th[started], NULL, cycle_thread, &c[i]) == 0)
            started++;
    }
    long total = 0;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < threads; i++) {
        total += c[i].cycles;
        *errors += c[i].errors;
    }
    double secs = (now_ns() - t0) / 1e9;
    free(c);
    free(th);
    rlc_client_free(client);
    return total / secs;
}

/* ---- hand-off --------------------------------------------------------- */

/* A waiter thread and the main thread hand turns over on semaphores, so
 * that neither spins while a hand-off is timed (on two vCPUs a polling
 * thread takes a core from the waiter or the server). */
struct waiter_arg {
    rlc_lock *l;
    sem_t go, done;
    atomic_bool quit;
    int rc;
    int64_t granted_ns;
};

static void *handoff_waiter(void *arg)
{
    struct waiter_arg *w = arg;
    for (;;) {
        sem_wait(&w->go);
        if (atomic_load(&w->quit))
            return NULL;
        w->rc = rlc_lock_acquire(w->l, 10000, -1);
        w->granted_ns = now_ns();
        sem_post(&w->done);
    }
}

static bool waited(sem_t *s, int seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    while (sem_timedwait(s, &until) != 0)
        if (errno != EINTR)
            return false;
    return true;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Two clients take turns: each round the holder's client releases once the
 * other client's waiter (its own thread) has had settle_ms to go to sleep;
 * the time from release() to the waiter's acquire() returning. */
double driver_handoff_us(const char *uri, int rounds, int settle_ms, double *p99)
{
    rlc_client *a, *b;
    rlc_lock *la = NULL, *lb = NULL;
    *p99 = 0;
    if (rlc_client_new(&a, uri, NULL) != RLC_OK)
        return 0;
    if (rlc_client_new(&b, uri, NULL) != RLC_OK) {
        rlc_client_free(a);
        return 0;
    }
    int64_t *v = calloc((size_t)rounds, sizeof *v);
    int n = 0;
    if (rlc_lock_new(a, "dh-api", 1, &la) == RLC_OK && rlc_lock_new(b, "dh-api", 2, &lb) == RLC_OK &&
        rlc_lock_acquire(la, 0, -1) == RLC_OK) {
        struct waiter_arg wa = {.l = la}, wb = {.l = lb};
        struct waiter_arg *side[2] = {&wa, &wb};
        pthread_t t[2];
        for (int k = 0; k < 2; k++) {
            sem_init(&side[k]->go, 0, 0);
            sem_init(&side[k]->done, 0, 0);
            pthread_create(&t[k], NULL, handoff_waiter, side[k]);
        }
        struct waiter_arg *holder = &wa, *next = &wb;
        for (int i = 0; i < rounds; i++) {
            sem_post(&next->go);
            struct timespec settle = {0, settle_ms * 1000000L};
            nanosleep(&settle, NULL);
            int64_t t0 = now_ns();
            rlc_lock_release(holder->l);
            if (!waited(&next->done, 10)) {
                holder = NULL; /* its acquire may still end: quit waits for it */
                break;
            }
            if (next->rc != RLC_OK)
                break;
            v[n++] = next->granted_ns - t0;
            holder = next;
            next = next == &wa ? &wb : &wa;
        }
        if (holder)
            rlc_lock_release(holder->l);
        for (int k = 0; k < 2; k++) {
            atomic_store(&side[k]->quit, true);
            sem_post(&side[k]->go);
            pthread_join(t[k], NULL);
            sem_destroy(&side[k]->go);
            sem_destroy(&side[k]->done);
        }
    }
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    qsort(v, (size_t)n, sizeof *v, cmp64);
    double p50 = n ? v[n / 2] / 1000.0 : 0;
    *p99 = n ? v[(int)(0.99 * (n - 1))] / 1000.0 : 0;
    free(v);
    return p50;
}
