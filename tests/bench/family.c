/*
 * family.c - rlc_bench_family: the lock family's figures beside RLock's,
 * in one run against one redis-server it starts itself (never a ctest).
 *
 *   rlc_bench_family [--seconds S] [--repeats R]
 *
 * Hand-off (as handoff.c measures RLock): THREADS threads on one name, each
 * with its own handle; the time from a holder's release call to another
 * thread's acquire returning with the lock (or the permit: a semaphore of one
 * permit is a lock without an owner). A releaser waits until someone else
 * took it (or PATIENCE passed) and a holder holds HOLD_NS, so that every
 * hand-off goes to a thread that was really waiting. Beside them, in the same
 * repeat, the read-to-write hand-off and the bare floor (family_rows.c). All
 * rows run interleaved, R times each, against the same server; p50 and p99
 * are medians over the repeats, and the ratio to RLock is taken within each
 * repeat, then its median.
 *
 * Tries: the server's script calls (INFO commandstats: EVAL, EVALSHA, FCALL)
 * over the row, less the row's own release calls (and, read to write, the
 * readers' levels), per granted acquire. A waiter woken by the unlock message
 * alone makes about 2 (its refused first try, the granted one), more when one
 * message wakes every waiter of the name and all but one are refused again; a
 * waiter that polls adds one per poll.
 *
 * Read throughput: READERS threads each take and give back a read level of
 * one name as fast as they can (readers never exclude each other); beside it
 * RLock with READERS threads on READERS distinct names (no contention at
 * all: the ceiling of a cycle's two round trips), and the write lock with
 * READERS threads on one name (all exclusive).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "family_rows.h"

#define THREADS 4
#define READERS 16
#define HOLD_NS (1000 * 1000LL)
#define PATIENCE_NS (2000 * 1000000LL)
#define MAX_SAMPLES 200000
#define MAX_REPEATS 20

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

/* ---- one kind of lock behind two calls ------------------------------------- */

enum kind { K_RLOCK, K_FAIR, K_WRITE, K_READ, K_SEM, K_PSEM };
static const char *const kind_name[] = {"RLock",     "fair lock", "write lock",
                                        "read lock", "semaphore", "permit semaphore"};

struct handle {
    enum kind kind;
    void *h;
    char permit[RLC_PERMIT_ID_LEN + 1]; /* K_PSEM: the id of the permit held */
};

/* A semaphore's handles set its one permit; the first sets it, the others
 * find it set (try_set_permits sets only a semaphore that has none). */
static int h_new(rlc_client *c, enum kind k, const char *name, struct handle *out)
{
    int set = 0, rc;
    out->kind = k;
    switch (k) {
    case K_RLOCK: return rlc_lock_new(c, name, 0, (rlc_lock **)&out->h);
    case K_FAIR: return rlc_fairlock_new(c, name, 0, 0, (rlc_fairlock **)&out->h);
    case K_SEM:
        if ((rc = rlc_semaphore_new(c, name, (rlc_semaphore **)&out->h)) == RLC_OK &&
            (rc = rlc_semaphore_try_set_permits(out->h, 1, &set)) != RLC_OK)
            rlc_semaphore_free(out->h);
        return rc;
    case K_PSEM:
        if ((rc = rlc_psemaphore_new(c, name, (rlc_psemaphore **)&out->h)) == RLC_OK &&
            (rc = rlc_psemaphore_try_set_permits(out->h, 1, &set)) != RLC_OK)
            rlc_psemaphore_free(out->h);
        return rc;
    default: return rlc_rwlock_new(c, name, 0, (rlc_rwlock **)&out->h);
    }
}

static void h_free(struct handle *h)
{
    switch (h->kind) {
    case K_RLOCK: rlc_lock_free(h->h); break;
    case K_FAIR: rlc_fairlock_free(h->h); break;
    case K_SEM: rlc_semaphore_free(h->h); break;
    case K_PSEM: rlc_psemaphore_free(h->h); break;
    default: rlc_rwlock_free(h->h); break;
    }
}

static int h_acquire(struct handle *h, int64_t wait_ms)
{
    switch (h->kind) {
    case K_RLOCK: return rlc_lock_acquire(h->h, wait_ms, 0);
    case K_FAIR: return rlc_fairlock_acquire(h->h, wait_ms, 0);
    case K_WRITE: return rlc_rwlock_write_acquire(h->h, wait_ms, 0);
    case K_SEM: return rlc_semaphore_acquire(h->h, 1, wait_ms);
    case K_PSEM: return rlc_psemaphore_acquire(h->h, 1, wait_ms, 30000, h->permit);
    default: return rlc_rwlock_read_acquire(h->h, wait_ms, 0);
    }
}

static int h_release(struct handle *h)
{
    switch (h->kind) {
    case K_RLOCK: return rlc_lock_release(h->h);
    case K_FAIR: return rlc_fairlock_release(h->h);
    case K_WRITE: return rlc_rwlock_write_release(h->h);
    case K_SEM: return rlc_semaphore_release(h->h, 1);
    case K_PSEM: return rlc_psemaphore_release(h->h, h->permit);
    default: return rlc_rwlock_read_release(h->h);
    }
}

/* ---- hand-off ----------------------------------------------------------------- */

struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    int holder;
    int64_t released_ns, end_ns;
    int64_t *lat;
    size_t n;
    long errors;
};

struct worker {
    pthread_t tid;
    int id;
    struct handle h;
    struct handoff *ho;
    long cycles;
};

static void *handoff_thread(void *arg)
{
    struct worker *w = arg;
    struct handoff *ho = w->ho;
    for (long i = 0; i < 100000000L && fam_now_ns() < ho->end_ns; i++) {
        int rc = h_acquire(&w->h, 5000);
        int64_t got = fam_now_ns();
        if (rc != RLC_OK) {
            pthread_mutex_lock(&ho->mu);
            if (ho->errors++ == 0 && rc != RLC_NOT_ACQUIRED)
                fprintf(stderr, "hand-off: %s: %s\n", rlc_strerror(rc), rlc_errmsg());
            bool stop = ho->errors > 1000;
            pthread_mutex_unlock(&ho->mu);
            if (stop)
                break;
            continue;
        }
        pthread_mutex_lock(&ho->mu);
        if (ho->holder >= 0 && ho->holder != w->id && ho->n < MAX_SAMPLES)
            ho->lat[ho->n++] = got - ho->released_ns;
        ho->holder = w->id;
        pthread_cond_broadcast(&ho->changed);
        pthread_mutex_unlock(&ho->mu);
        int64_t until = fam_now_ns() + HOLD_NS;
        while (fam_now_ns() < until) {
            struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
        }
        pthread_mutex_lock(&ho->mu);
        ho->released_ns = fam_now_ns();
        pthread_mutex_unlock(&ho->mu);
        int rel = h_release(&w->h);
        pthread_mutex_lock(&ho->mu);
        ho->errors += rel != RLC_OK;
        pthread_mutex_unlock(&ho->mu);
        w->cycles++;
        /* Not again until another thread took it (or patience ran out). */
        int64_t limit = fam_now_ns() + PATIENCE_NS;
        if (limit > ho->end_ns)
            limit = ho->end_ns;
        struct timespec until_ts = {limit / 1000000000LL, limit % 1000000000LL};
        pthread_mutex_lock(&ho->mu);
        while (ho->holder == w->id)
            if (pthread_cond_timedwait(&ho->changed, &ho->mu, &until_ts) != 0)
                break;
        pthread_mutex_unlock(&ho->mu);
    }
    return NULL;
}

/* One hand-off row of kind k on name; every figure -1 when it did not run. */
static void handoff_once(rlc_client *c, const struct redis_server *srv, enum kind k,
                         const char *name, double secs, struct fam_result *out)
{
    struct handoff ho = {.mu = PTHREAD_MUTEX_INITIALIZER, .holder = -1};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ho.changed, &ca);
    ho.lat = calloc(MAX_SAMPLES, sizeof *ho.lat);
    struct worker w[THREADS];
    int started = 0;
    *out = (struct fam_result){-1, -1, -1, -1};
    long long calls0 = fam_script_calls(srv);
    int64_t t0 = fam_now_ns();
    ho.end_ns = t0 + (int64_t)(secs * 1e9);
    for (int i = 0; ho.lat && i < THREADS; i++) {
        w[i] = (struct worker){.id = i, .ho = &ho};
        if (h_new(c, k, name, &w[i].h) != RLC_OK)
            break;
        if (pthread_create(&w[i].tid, NULL, handoff_thread, &w[i]) != 0) {
            h_free(&w[i].h);
            break;
        }
        started++;
    }
    long granted = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].tid, NULL);
        h_free(&w[i].h);
        granted += w[i].cycles;
    }
    double elapsed = (double)(fam_now_ns() - t0) / 1e9;
    long long calls1 = fam_script_calls(srv);
    if (started == THREADS && ho.n > 0) {
        out->rate = (double)ho.n / elapsed;
        out->p50 = fam_quantile_us(ho.lat, ho.n, 0.50);
        out->p99 = fam_quantile_us(ho.lat, ho.n, 0.99);
        /* Every granted acquire was released once, by one script call. */
        if (calls0 >= 0 && calls1 >= 0)
            out->tries = (double)(calls1 - calls0 - granted) / (double)granted;
    }
    if (started < THREADS || ho.errors > 0)
        fprintf(stderr, "hand-off (%s): %d threads started, %ld errors\n", kind_name[k], started,
                ho.errors);
    free(ho.lat);
    pthread_cond_destroy(&ho.changed);
}

/* ---- cycles/s --------------------------------------------------------------- */

struct cyc {
    pthread_t tid;
    struct handle h;
    int64_t end_ns;
    long cycles, errors;
};

static void *cycle_thread(void *arg)
{
    struct cyc *t = arg;
    for (long i = 0; i < 100000000L && fam_now_ns() < t->end_ns; i++) {
        if (h_acquire(&t->h, 5000) != RLC_OK || h_release(&t->h) != RLC_OK) {
            if (++t->errors > 1000)
                break;
            continue;
        }
        t->cycles++;
    }
    return NULL;
}

/* Cycles/s of READERS threads: one name (shared), or one name each. */
static double cycles_once(rlc_client *c, enum kind k, const char *name, bool own_names,
                          double secs)
{
    struct cyc t[READERS];
    int started = 0;
    int64_t t0 = fam_now_ns();
    for (int i = 0; i < READERS; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%s%s%d", name, own_names ? "-" : "", own_names ? i : 0);
        t[i] = (struct cyc){.end_ns = t0 + (int64_t)(secs * 1e9)};
        if (h_new(c, k, own_names ? nm : name, &t[i].h) != RLC_OK)
            break;
        if (pthread_create(&t[i].tid, NULL, cycle_thread, &t[i]) != 0) {
            h_free(&t[i].h);
            break;
        }
        started++;
    }
    long total = 0, errors = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i].tid, NULL);
        total += t[i].cycles;
        errors += t[i].errors;
        h_free(&t[i].h);
    }
    if (started < READERS || errors > 0)
        fprintf(stderr, "cycles (%s): %d threads started, %ld errors\n", kind_name[k], started,
                errors);
    return started == READERS ? (double)total / ((double)(fam_now_ns() - t0) / 1e9) : -1;
}

/* ---- the run ---------------------------------------------------------------- */

enum row { R_RLOCK, R_FAIR, R_WRITE, R_R2W, R_SEM, R_PSEM, R_FLOOR, NROWS };
static const char *const row_name[NROWS] = {
    "RLock",         "fair lock",           "write lock", "read -> write (3 readers)",
    "semaphore, 1 permit", "permit semaphore, 1 permit", "bare floor",
};
static const enum kind row_kind[NROWS] = {K_RLOCK, K_FAIR, K_WRITE, 0, K_SEM, K_PSEM, 0};

static void row_once(rlc_client *c, const struct redis_server *srv, enum row r, int rep,
                     double secs, struct fam_result *out)
{
    char name[64];
    snprintf(name, sizeof name, "bench-family-%d-%d", (int)r, rep);
    if (r == R_R2W)
        fam_read_to_write(c, srv, name, secs, out);
    else if (r == R_FLOOR)
        fam_bare_floor(srv, name, secs, out);
    else
        handoff_once(c, srv, row_kind[r], name, secs, out);
}

/* The median over the repeats of one figure of a row. */
static double row_median(struct fam_result res[][MAX_REPEATS], enum row r, int repeats,
                         size_t field)
{
    double v[MAX_REPEATS];
    for (int i = 0; i < repeats; i++)
        v[i] = *(const double *)((const char *)&res[r][i] + field);
    return median(v, repeats);
}

/* The median over the repeats of a figure's ratio to RLock's in the same repeat. */
static double ratio_median(struct fam_result res[][MAX_REPEATS], enum row r, int repeats,
                           size_t field)
{
    double v[MAX_REPEATS];
    for (int i = 0; i < repeats; i++) {
        double mine = *(const double *)((const char *)&res[r][i] + field);
        double rlock = *(const double *)((const char *)&res[R_RLOCK][i] + field);
        v[i] = mine > 0 && rlock > 0 ? mine / rlock : -1;
    }
    return median(v, repeats);
}

static void print_handoff(struct fam_result res[][MAX_REPEATS], int repeats)
{
    const size_t p50 = offsetof(struct fam_result, p50), p99 = offsetof(struct fam_result, p99);
    printf("%-32s %8s %8s %11s %8s %8s %9s\n", "hand-off (4 threads, 1 ms hold)", "p50 us",
           "p99 us", "hand-offs/s", "p50 / R", "p99 / R", "tries/acq");
    for (int r = 0; r < NROWS; r++)
        printf("%-32s %8.1f %8.1f %11.0f %8.2f %8.2f %9.2f\n", row_name[r],
               row_median(res, r, repeats, p50), row_median(res, r, repeats, p99),
               row_median(res, r, repeats, offsetof(struct fam_result, rate)),
               ratio_median(res, r, repeats, p50), ratio_median(res, r, repeats, p99),
               row_median(res, r, repeats, offsetof(struct fam_result, tries)));
    printf("(p50 / R, p99 / R: the row's figure over RLock's in the same repeat)\n");
}

int main(int argc, char **argv)
{
    double secs = 3;
    int repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            secs = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = atoi(argv[i + 1]);
    }
    if (secs <= 0 || secs > 600 || repeats < 1 || repeats > MAX_REPEATS) {
        fprintf(stderr, "usage: rlc_bench_family [--seconds S (0-600)] [--repeats R (1-%d)]\n",
                MAX_REPEATS);
        return 2;
    }
    struct redis_server srv;
    if (rs_start(&srv, NULL) != 0) {
        fprintf(stderr, "rlc_bench_family: redis-server did not start\n");
        return 1;
    }
    rlc_client *c = NULL;
    if (rlc_client_new(&c, srv.uri, NULL) != RLC_OK) {
        fprintf(stderr, "rlc_bench_family: %s\n", rlc_errmsg());
        rs_stop(&srv);
        return 1;
    }
    static struct fam_result res[NROWS][MAX_REPEATS];
    enum { C_READ, C_RLOCK_OWN, C_WRITE, NC };
    double cyc[NC][MAX_REPEATS];
    for (int rep = 0; rep < repeats; rep++) {
        for (int r = 0; r < NROWS; r++)
            row_once(c, &srv, (enum row)r, rep, secs, &res[r][rep]);
        cyc[C_READ][rep] = cycles_once(c, K_READ, "bench-family-read", false, secs);
        cyc[C_RLOCK_OWN][rep] = cycles_once(c, K_RLOCK, "bench-family-own", true, secs);
        cyc[C_WRITE][rep] = cycles_once(c, K_WRITE, "bench-family-write", false, secs);
        fprintf(stderr, "repeat %d/%d done\n", rep + 1, repeats);
    }
    printf("Lock family, 1 redis-server, %d repeat(s) x %.1f s per row, medians over repeats\n\n",
           repeats, secs);
    print_handoff(res, repeats);
    printf("\n%-48s %12s\n", "cycles/s (acquire + release, 16 threads)", "cycles/s");
    printf("%-48s %12.0f\n", "read lock, 16 readers, one name", median(cyc[C_READ], repeats));
    printf("%-48s %12.0f\n", "RLock, 16 threads, 16 names (no contention)",
           median(cyc[C_RLOCK_OWN], repeats));
    printf("%-48s %12.0f\n", "write lock, 16 writers, one name", median(cyc[C_WRITE], repeats));
    rlc_client_free(c);
    rs_stop(&srv);
    return 0;
}
