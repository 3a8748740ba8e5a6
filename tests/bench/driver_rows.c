/*
 * driver_rows.c - the blocking driver of the engine (engine_driver.c)
 * beside today's blocking API, in the same run and the same way: threads
 * that call acquire + release on names of their own, and a hand-off from a
 * holder's release to a waiter in another client. rlc_bench_engine prints
 * them beside the bare hiredis client's figures.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_rows.h"
#include "engine_driver.h"
#include "redlockc.h"

/* One client of either kind and its calls. */
struct side {
    bool api; /* the blocking API (rlc_client), else the driver */
    rlc_client *c;
    struct edrv *d;
};

static int side_open(struct side *s, bool api, const char *uri, const char *uuid)
{
    memset(s, 0, sizeof *s);
    s->api = api;
    if (api)
        return rlc_client_new(&s->c, uri, NULL);
    return edrv_new(&s->d, uri, uuid, NULL, NULL, NULL);
}

static void side_close(struct side *s)
{
    if (s->api)
        rlc_client_free(s->c);
    else
        edrv_free(s->d, 1000);
}

/* A lock of the side: the API's handle, or the driver's name. */
struct hlock {
    struct side *s;
    rlc_lock *l;
    char name[32];
    uint64_t owner;
};

static int hlock_open(struct hlock *h, struct side *s, const char *name, uint64_t owner)
{
    h->s = s;
    h->l = NULL;
    h->owner = owner;
    snprintf(h->name, sizeof h->name, "%s", name);
    return s->api ? rlc_lock_new(s->c, name, owner, &h->l) : RLC_OK;
}

static int hlock_acquire(struct hlock *h, int64_t wait_ms, int64_t lease_ms)
{
    struct edrv_outcome o;
    if (h->s->api)
        return rlc_lock_acquire(h->l, wait_ms, lease_ms);
    return edrv_acquire(h->s->d, h->name, strlen(h->name), h->owner, NULL, wait_ms, lease_ms, &o);
}

static int hlock_release(struct hlock *h)
{
    struct edrv_outcome o;
    if (h->s->api)
        return rlc_lock_release(h->l);
    return edrv_release(h->s->d, h->name, strlen(h->name), h->owner, &o);
}

static void hlock_close(struct hlock *h)
{
    rlc_lock_free(h->l);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *uuid_for(int k)
{
    static char buf[8][40];
    snprintf(buf[k % 8], 40, "d71e0000-0000-4000-8000-%012x", (unsigned)(now_ns() & 0xffffff) * 8 + k);
    return buf[k % 8];
}

/* ---- cycles ----------------------------------------------------------- */

struct cyc {
    struct side *s;
    int index, run;
    int64_t end_ns;
    long cycles, errors;
};

static void *cycle_thread(void *arg)
{
    struct cyc *c = arg;
    char name[32];
    snprintf(name, sizeof name, "dr%d:%d", c->run, c->index);
    struct hlock h;
    if (hlock_open(&h, c->s, name, (uint64_t)c->index + 1) != RLC_OK) {
        c->errors++;
        return NULL;
    }
    while (now_ns() < c->end_ns) {
        if (hlock_acquire(&h, 1000, -1) == RLC_OK && hlock_release(&h) == RLC_OK)
            c->cycles++;
        else
            c->errors++;
    }
    hlock_close(&h);
    return NULL;
}

double driver_cycles(const char *uri, bool api, int threads, double seconds, long *errors)
{
    static int run;
    struct side s;
    *errors = 0;
    if (side_open(&s, api, uri, uuid_for(0)) != RLC_OK)
        return 0;
    struct cyc *c = calloc((size_t)threads, sizeof *c);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    run++;
    int64_t t0 = now_ns(), end = t0 + (int64_t)(seconds * 1e9);
    int started = 0;
    for (int i = 0; i < threads; i++) {
        c[i] = (struct cyc){&s, i, run, end, 0, 0};
        if (pthread_create(&th[i], NULL, cycle_thread, &c[i]) == 0)
            started++;
    }
    long total = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        total += c[i].cycles;
        *errors += c[i].errors;
    }
    double secs = (now_ns() - t0) / 1e9;
    free(c);
    free(th);
    side_close(&s);
    return total / secs;
}

/* ---- hand-off --------------------------------------------------------- */

struct waiter_arg {
    struct hlock *h;
    atomic_int state; /* 0 idle, 1 go, 2 granted, 3 failed, 4 quit */
    atomic_llong granted_ns;
};

static void *handoff_waiter(void *arg)
{
    struct waiter_arg *w = arg;
    for (;;) {
        int st;
        while ((st = atomic_load(&w->state)) == 0 || st == 2 || st == 3) {
            struct timespec t = {0, 100000};
            nanosleep(&t, NULL);
        }
        if (st == 4)
            return NULL;
        int rc = hlock_acquire(w->h, 10000, -1);
        atomic_store(&w->granted_ns, now_ns());
        atomic_store(&w->state, rc == RLC_OK ? 2 : 3);
    }
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Two clients take turns: each round the holder's side releases once the
 * other side's waiter (its own thread) has had settle_ms to go to sleep;
 * the time from release() to the waiter's acquire() returning. */
double driver_handoff_us(const char *uri, bool api, int rounds, int settle_ms, double *p99)
{
    struct side a, b;
    *p99 = 0;
    if (side_open(&a, api, uri, uuid_for(1)) != RLC_OK)
        return 0;
    if (side_open(&b, api, uri, uuid_for(2)) != RLC_OK) {
        side_close(&a);
        return 0;
    }
    const char *name = api ? "dh-api" : "dh-drv";
    struct hlock ha, hb;
    hlock_open(&ha, &a, name, 1);
    hlock_open(&hb, &b, name, 2);
    struct waiter_arg wa = {.h = &ha}, wb = {.h = &hb};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, handoff_waiter, &wa);
    pthread_create(&tb, NULL, handoff_waiter, &wb);
    int64_t *v = calloc((size_t)rounds, sizeof *v);
    int n = 0;
    struct hlock *holder = &ha;
    struct waiter_arg *next = &wb;
    hlock_acquire(holder, 0, -1);
    for (int i = 0; i < rounds; i++) {
        atomic_store(&next->state, 1);
        struct timespec settle = {0, settle_ms * 1000000L};
        nanosleep(&settle, NULL);
        int64_t t0 = now_ns();
        hlock_release(holder);
        int64_t limit = now_ns() + 10 * 1000000000LL;
        int st;
        while ((st = atomic_load(&next->state)) == 1 && now_ns() < limit) {
            struct timespec t = {0, 20000};
            nanosleep(&t, NULL);
        }
        if (st != 2)
            break;
        v[n++] = atomic_load(&next->granted_ns) - t0;
        holder = next->h;
        atomic_store(&next->state, 0);
        next = next == &wa ? &wb : &wa;
    }
    hlock_release(holder);
    atomic_store(&wa.state, 4);
    atomic_store(&wb.state, 4);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    hlock_close(&ha);
    hlock_close(&hb);
    side_close(&a);
    side_close(&b);
    qsort(v, (size_t)n, sizeof *v, cmp64);
    double p50 = n ? v[n / 2] / 1000.0 : 0;
    *p99 = n ? v[(int)(0.99 * (n - 1))] / 1000.0 : 0;
    free(v);
    return p50;
}
