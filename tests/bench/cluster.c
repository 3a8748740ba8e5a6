/*
 * cluster.c - rlc_bench_cluster: locks on a Redis Cluster beside one
 * standalone node, in one run (never a ctest).
 *
 *   rlc_bench_cluster [--seconds S] [--repeats R]
 *
 * It starts one redis-server and a 3-master / 3-replica cluster on loopback
 * (tests/support), then, interleaved R times against both:
 *   cycles/s  THREADS threads, each on NAMES names of its own (no contention),
 *             acquire (no wait, fixed lease) + release as fast as they can;
 *             on the cluster the names spread over every slot and master;
 *   hand-off  two threads with a client each on one name: the time from a
 *             holder's release call to the other thread's acquire returning
 *             with the lock, woken by the unlock message (SPUBLISH /
 *             SSUBSCRIBE on the cluster, PUBLISH / SUBSCRIBE on the node;
 *             two clients, so that no in-process shortcut is measured).
 * Figures are medians over the repeats; the ratio is taken per repeat.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_cluster.h"
#include "redis_server.h"
#include "redlockc.h"

#define THREADS 8
#define NAMES 64
#define HOLD_NS (1000 * 1000LL)
#define PATIENCE_NS (2000 * 1000000LL)
#define MAX_SAMPLES 100000
#define MAX_REPEATS 20

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pause_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    nanosleep(&ts, NULL);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n ? v[n / 2] : -1;
}

/* ---- cycles ---------------------------------------------------------------- */

struct cyc {
    rlc_client *c;
    int id;
    int64_t until_ns;
    long cycles, errors;
};

static void *cyc_main(void *arg)
{
    struct cyc *w = arg;
    rlc_lock *l[NAMES];
    for (int i = 0; i < NAMES; i++) {
        char name[48];
        snprintf(name, sizeof name, "bench:cyc:%d:%d", w->id, i);
        if (rlc_lock_new(w->c, name, 0, &l[i]) != RLC_OK)
            l[i] = NULL;
    }
    for (int i = 0; now_ns() < w->until_ns; i = (i + 1) % NAMES) {
        if (l[i] && rlc_lock_acquire(l[i], 0, 10000) == RLC_OK && rlc_lock_release(l[i]) == RLC_OK)
            w->cycles++;
        else
            w->errors++;
    }
    for (int i = 0; i < NAMES; i++)
        rlc_lock_free(l[i]);
    return NULL;
}

static double cycles_per_s(rlc_client *c, double seconds)
{
    struct cyc w[THREADS];
    pthread_t t[THREADS];
    int64_t start = now_ns(), until = start + (int64_t)(seconds * 1e9);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct cyc){c, i, until, 0, 0};
        pthread_create(&t[i], NULL, cyc_main, &w[i]);
    }
    long total = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += w[i].cycles;
        errors += w[i].errors;
    }
    if (errors)
        fprintf(stderr, "cycles: %ld failed\n", errors);
    return (double)total / ((double)(now_ns() - start) / 1e9);
}

/* ---- hand-off -------------------------------------------------------------- */

struct ho_shared {
    atomic_llong released_ns; /* the last release call's start */
    atomic_int holder;        /* who took it last */
    atomic_int stop;
    int64_t samples[MAX_SAMPLES];
    atomic_int n;
};

struct ho {
    struct ho_shared *sh;
    rlc_client *c;
    int id;
    int64_t until_ns;
};

static void *ho_main(void *arg)
{
    struct ho *w = arg;
    struct ho_shared *sh = w->sh;
    rlc_lock *l = NULL;
    if (rlc_lock_new(w->c, "bench:handoff", 0, &l) != RLC_OK)
        return NULL;
    while (now_ns() < w->until_ns && !atomic_load(&sh->stop)) {
        if (rlc_lock_acquire(l, 5000, 10000) != RLC_OK)
            continue;
        int64_t got = now_ns();
        long long rel = atomic_load(&sh->released_ns);
        /* A hand-off only if the other thread released it last. */
        if (rel && atomic_load(&sh->holder) != w->id) {
            int k = atomic_fetch_add(&sh->n, 1);
            if (k < MAX_SAMPLES)
                sh->samples[k] = got - rel;
        }
        atomic_store(&sh->holder, w->id);
        pause_ns(HOLD_NS);
        atomic_store(&sh->released_ns, now_ns());
        rlc_lock_release(l);
        /* Let the other one take it: it is waiting for it. */
        int64_t patience = now_ns() + PATIENCE_NS;
        while (atomic_load(&sh->holder) == w->id && now_ns() < patience && now_ns() < w->until_ns)
            pause_ns(100 * 1000);
    }
    rlc_lock_free(l);
    return NULL;
}

static double handoff_p50_us(rlc_client *c1, rlc_client *c2, double seconds)
{
    struct ho_shared *sh = calloc(1, sizeof *sh);
    if (!sh)
        return -1;
    int64_t until = now_ns() + (int64_t)(seconds * 1e9);
    struct ho w[2] = {{sh, c1, 1, until}, {sh, c2, 2, until}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, ho_main, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    int n = atomic_load(&sh->n);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    double p50 = -1;
    if (n > 0) {
        qsort(sh->samples, (size_t)n, sizeof sh->samples[0], cmp64);
        p50 = (double)sh->samples[n / 2] / 1000.0;
    }
    free(sh);
    return p50;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    int repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = atoi(argv[i + 1]);
    }
    if (repeats < 1 || repeats > MAX_REPEATS)
        repeats = 3;
    struct redis_server node;
    struct redis_cluster rc;
    if (rs_start(&node, NULL) != 0) {
        fprintf(stderr, "rlc_bench_cluster: redis-server did not start\n");
        return 2;
    }
    if (rc_start(&rc) != 0) {
        fprintf(stderr, "rlc_bench_cluster: the cluster did not start\n");
        rs_stop(&node);
        return 2;
    }
    const char *uris[2] = {node.uri, rc.uri};
    rlc_client *c[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++)
            if (rlc_client_new(&c[k][j], uris[k], NULL) != RLC_OK) {
                fprintf(stderr, "rlc_bench_cluster: %s: %s\n", uris[k], rlc_errmsg());
                return 2;
            }
    double cyc[2][MAX_REPEATS], ratio[MAX_REPEATS], ho[2][MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        for (int k = 0; k < 2; k++)
            cyc[k][r] = cycles_per_s(c[k][0], seconds);
        ratio[r] = cyc[1][r] / cyc[0][r];
        for (int k = 0; k < 2; k++)
            ho[k][r] = handoff_p50_us(c[k][0], c[k][1], seconds);
    }
    printf("cluster (3 masters + 3 replicas) beside one node, %d x %.0f s, %d threads on "
           "%d names each\n", repeats, seconds, THREADS, NAMES);
    double single = median(cyc[0], repeats), clus = median(cyc[1], repeats);
    printf("  %-34s %10.0f cycles/s\n", "single node", single);
    printf("  %-34s %10.0f cycles/s  (x%.2f of the single node)\n", "cluster", clus,
           median(ratio, repeats));
    printf("  %-34s %10.0f us\n", "hand-off p50, single node (PUBLISH)", median(ho[0], repeats));
    printf("  %-34s %10.0f us\n", "hand-off p50, cluster (SPUBLISH)", median(ho[1], repeats));
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++)
            rlc_client_free(c[k][j]);
    rc_stop(&rc);
    rs_stop(&node);
    return 0;
}
