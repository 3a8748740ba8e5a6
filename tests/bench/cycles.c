/*
 * cycles.c - PING round trips, and uncontended acquire + release cycles.
 *
 * A cycle is rlc_lock_acquire(wait 1 s, watchdog lease) then
 * rlc_lock_release(), timed together: what a caller of lock()/unlock()
 * waits for. Each thread has its own lock name, so nothing contends but the
 * client's shared connection(s) and the CPU.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "redlockc.h"

#define SAMPLES_PER_THREAD (4u << 20)
#define WARMUP_CYCLES 50
#define MAX_ERRORS 1000

void run_ping(struct bench *b)
{
    redisContext *c = rs_connect(&b->srv[0]);
    if (!c)
        return;
    struct samples s;
    samples_init(&s, SAMPLES_PER_THREAD);
    double secs = b->seconds < 2 ? b->seconds : 2;
    int64_t t0 = now_ns(), end = t0 + (int64_t)(secs * 1e9), t = t0;
    for (long i = 0; i < 100000000L && t < end; i++) {
        redisReply *r = redisCommand(c, "PING");
        int64_t t1 = now_ns();
        if (!r)
            break;
        freeReplyObject(r);
        samples_add(&s, t1 - t);
        t = t1;
    }
    row_begin(b, "ping");
    row_num(b, "rps", (double)s.total / ((double)(t - t0) / 1e9));
    row_num(b, "p50_us", samples_quantile_us(&s, 0.5));
    row_num(b, "p99_us", samples_quantile_us(&s, 0.99));
    row_end(b);
    samples_free(&s);
    redisFree(c);
}

struct cycle_worker {
    pthread_t tid;
    rlc_lock *lock;
    pthread_barrier_t *start;
    int64_t seconds_ns;
    struct samples lat;
    struct samples acq; /* the acquire alone */
    long errors;
    int64_t began, ended;
};

/* *acquired_ns: when the acquire returned. */
static int one_cycle(rlc_lock *l, int64_t *acquired_ns)
{
    int rc = rlc_lock_acquire(l, 1000, 0);
    *acquired_ns = now_ns();
    if (rc == RLC_OK)
        rc = rlc_lock_release(l);
    return rc;
}

static void *cycle_thread(void *arg)
{
    struct cycle_worker *w = arg;
    /* Warm-up: connections made, scripts loaded, thread ids given. */
    int64_t acquired;
    for (int i = 0; i < WARMUP_CYCLES; i++)
        one_cycle(w->lock, &acquired);
    pthread_barrier_wait(w->start);
    w->began = now_ns();
    int64_t end = w->began + w->seconds_ns, t = w->began;
    for (long i = 0; i < 1000000000L && t < end && w->errors < MAX_ERRORS; i++) {
        int rc = one_cycle(w->lock, &acquired);
        int64_t t1 = now_ns();
        if (rc == RLC_OK) {
            samples_add(&w->lat, t1 - t);
            samples_add(&w->acq, acquired - t);
        }
        else if (w->errors++ == 0)
            note("cycle: %s: %s", rlc_strerror(rc), rlc_errmsg());
        t = t1;
    }
    w->ended = t;
    return NULL;
}

/* The first `nodes` URIs of the driver's servers. */
static void node_list(const struct bench *b, int nodes, char *buf, size_t size)
{
    buf[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < nodes && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? "," : "", b->srv[i].uri);
}

void run_cycles(struct bench *b, const char *row, int nodes, int threads, const char *opts)
{
    char uris[sizeof b->uris];
    node_list(b, nodes, uris, sizeof uris);
    rlc_client *c = NULL;
    struct cycle_worker *w = calloc((size_t)threads, sizeof *w);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    int rc = rlc_client_new(&c, uris, opts);
    if (rc != RLC_OK || !w) {
        note("%s: client: %s", row, rlc_errmsg());
        goto out;
    }
    for (int i = 0; i < threads; i++) {
        char name[64];
        snprintf(name, sizeof name, "bench:%s:%d", row, i);
        rlc_lock_new(c, name, 0, &w[i].lock);
        w[i].start = &start;
        w[i].seconds_ns = (int64_t)(b->seconds * 1e9);
        samples_init(&w[i].lat, SAMPLES_PER_THREAD);
        samples_init(&w[i].acq, SAMPLES_PER_THREAD);
        pthread_create(&w[i].tid, NULL, cycle_thread, &w[i]);
    }
    pthread_barrier_wait(&start);
    struct cpu_window cpu;
    cpu_begin(b, &cpu, nodes);
    struct samples all, acq;
    samples_init(&all, (size_t)SAMPLES_PER_THREAD * 4);
    samples_init(&acq, (size_t)SAMPLES_PER_THREAD * 4);
    int64_t began = INT64_MAX, ended = 0;
    long errors = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].tid, NULL);
        samples_merge(&all, &w[i].lat);
        samples_merge(&acq, &w[i].acq);
        errors += w[i].errors;
        began = w[i].began < began ? w[i].began : began;
        ended = w[i].ended > ended ? w[i].ended : ended;
    }
    row_begin(b, row);
    row_num(b, "threads", threads);
    row_num(b, "nodes", nodes);
    if (opts)
        row_str(b, "options", opts);
    row_num(b, "cycles", (double)all.total / ((double)(ended - began) / 1e9));
    row_num(b, "p50_us", samples_quantile_us(&all, 0.5));
    row_num(b, "p99_us", samples_quantile_us(&all, 0.99));
    row_num(b, "acq_p50_us", samples_quantile_us(&acq, 0.5));
    row_num(b, "acq_p99_us", samples_quantile_us(&acq, 0.99));
    row_num(b, "errors", (double)errors);
    cpu_end(b, &cpu);
    row_end(b);
    samples_free(&all);
    samples_free(&acq);
    for (int i = 0; i < threads; i++) {
        rlc_lock_free(w[i].lock);
        samples_free(&w[i].lat);
        samples_free(&w[i].acq);
    }
out:
    rlc_client_free(c);
    pthread_barrier_destroy(&start);
    free(w);
}
