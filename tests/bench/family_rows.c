/*
 * family_rows.c - rlc_bench_family's read-to-write hand-off, the bare floor
 * of a hand-off, and the script-call count behind every row's tries.
 *
 * Read to write: R2W_READERS read holders (explicit owners 1..R, one thread
 * that takes and gives back all their levels) and one writer thread. A round:
 * the readers take a read level each; the writer calls write_acquire and
 * waits; R2W_SETTLE_NS after that call (so that its refused first try is
 * surely behind it and it is waiting) the readers give their levels back;
 * the clock starts just before the last reader's release call and stops when
 * the writer's acquire returns. The writer releases before the next round,
 * so the readers' tries are granted at once.
 *
 * The bare floor: two threads A and B, each with a command connection and a
 * subscriber connection on a channel of its own. The holder holds 1 ms, then
 * runs a release script (DEL of the key if it holds it, PUBLISH to the other's
 * channel) and blocks reading its own subscription; the other, blocked reading
 * its subscription, wakes on the message and runs one acquire script (SET NX
 * PX) on its command connection. Timed from the release call to the acquire's
 * reply: the release round trip up to its PUBLISH, the message's way to a
 * thread blocked in read(), one EVAL round trip. No library, no background
 * thread, no lock state beyond one string key: what any pub/sub-woken
 * hand-off costs on this machine.
 */
#include "family_rows.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define R2W_READERS 3
#define R2W_SETTLE_NS (2 * 1000000LL)
#define PATIENCE_NS (6000 * 1000000LL)  /* above the writer's 5 s wait */
#define HOLD_NS (1000 * 1000LL)
#define MAX_SAMPLES 200000

int64_t fam_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

double fam_quantile_us(int64_t *v, size_t n, double q)
{
    if (n == 0)
        return -1;
    qsort(v, n, sizeof *v, cmp64);
    return (double)v[(size_t)(q * (double)(n - 1))] / 1000.0;
}

long long fam_script_calls(const struct redis_server *s)
{
    static const char *const cmds[] = {"cmdstat_eval:calls", "cmdstat_evalsha:calls",
                                       "cmdstat_fcall:calls"};
    long long total = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        long long v = rs_info_int(s, "commandstats", cmds[i]);
        total += v > 0 ? v : 0; /* -1: never called (or INFO failed: see below) */
    }
    return rs_info_int(s, "server", "process_id") > 0 ? total : -1;
}

/* Sleeps until t (ns, monotonic), in short naps. */
static void nap_until(int64_t t)
{
    while (fam_now_ns() < t) {
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
    }
}

/* Waits on cv until *field == want or stop, at most until deadline_ns.
 * Called and returns with mu held. false: timed out or stopped first. */
static bool wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, const long *field, long want,
                     const bool *stop, int64_t deadline_ns)
{
    struct timespec until = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
    while (*field != want && !*stop)
        if (pthread_cond_timedwait(cv, mu, &until) != 0)
            break;
    return *field == want;
}

/* ---- read to write ------------------------------------------------------- */

struct r2w {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    long round;   /* the round the writer is asked to wait in */
    long called;  /* the round whose write_acquire the writer called */
    long done;    /* the round the writer was granted and released */
    bool stop;
    int64_t called_ns, released_ns;
    int64_t *lat;
    size_t n;
    long granted, errors;
    rlc_rwlock *writer;
};

static void r2w_note(struct r2w *x, const char *what, int rc)
{
    if (x->errors++ == 0)
        fprintf(stderr, "read -> write: %s: %s: %s\n", what, rlc_strerror(rc), rlc_errmsg());
}

/* One wait of the writer; false when asked to stop (or nobody asked). */
static bool r2w_writer_turn(struct r2w *x)
{
    pthread_mutex_lock(&x->mu);
    long want = x->done + 1;
    if (!wait_for(&x->changed, &x->mu, &x->round, want, &x->stop,
                  fam_now_ns() + PATIENCE_NS)) {
        pthread_mutex_unlock(&x->mu);
        return false;
    }
    x->called = want;
    x->called_ns = fam_now_ns();
    pthread_cond_broadcast(&x->changed);
    pthread_mutex_unlock(&x->mu);
    int rc = rlc_rwlock_write_acquire(x->writer, 5000, 0);
    int64_t got = fam_now_ns();
    pthread_mutex_lock(&x->mu);
    if (rc != RLC_OK) {
        r2w_note(x, "write_acquire", rc);
    } else if (x->released_ns <= x->called_ns) {
        r2w_note(x, "granted before the last reader's release", RLC_OK);
    } else {
        x->granted++;
        if (x->n < MAX_SAMPLES)
            x->lat[x->n++] = got - x->released_ns;
    }
    pthread_mutex_unlock(&x->mu);
    if (rc == RLC_OK && (rc = rlc_rwlock_write_release(x->writer)) != RLC_OK) {
        pthread_mutex_lock(&x->mu);
        r2w_note(x, "write_release", rc);
        pthread_mutex_unlock(&x->mu);
    }
    pthread_mutex_lock(&x->mu);
    x->done = want;
    pthread_cond_broadcast(&x->changed);
    pthread_mutex_unlock(&x->mu);
    return true;
}

static void *r2w_writer(void *arg)
{
    struct r2w *x = arg;
    for (long i = 0; i < 100000000L && r2w_writer_turn(x); i++)
        ;
    return NULL;
}

/* One round on the readers' side; false on an error (the run stops). */
static bool r2w_round(struct r2w *x, rlc_rwlock **rd, long round)
{
    int taken = 0, rc = RLC_OK;
    while (taken < R2W_READERS && (rc = rlc_rwlock_read_acquire(rd[taken], 5000, 0)) == RLC_OK)
        taken++;
    pthread_mutex_lock(&x->mu);
    bool ok = taken == R2W_READERS;
    if (!ok)
        r2w_note(x, "read_acquire", rc);
    x->round = ok ? round : x->round;
    pthread_cond_broadcast(&x->changed);
    ok = ok && wait_for(&x->changed, &x->mu, &x->called, round, &x->stop,
                        fam_now_ns() + PATIENCE_NS);
    int64_t settled = x->called_ns + R2W_SETTLE_NS;
    pthread_mutex_unlock(&x->mu);
    if (ok)
        nap_until(settled);
    for (int i = 0; i < taken; i++) {
        if (i == taken - 1) {
            pthread_mutex_lock(&x->mu);
            x->released_ns = fam_now_ns();
            pthread_mutex_unlock(&x->mu);
        }
        if ((rc = rlc_rwlock_read_release(rd[i])) != RLC_OK) {
            pthread_mutex_lock(&x->mu);
            r2w_note(x, "read_release", rc);
            pthread_mutex_unlock(&x->mu);
            ok = false;
        }
    }
    pthread_mutex_lock(&x->mu);
    ok = ok && wait_for(&x->changed, &x->mu, &x->done, round, &x->stop,
                        fam_now_ns() + PATIENCE_NS);
    pthread_mutex_unlock(&x->mu);
    return ok;
}

void fam_read_to_write(rlc_client *c, const struct redis_server *s, const char *name, double secs,
                       struct fam_result *out)
{
    *out = (struct fam_result){-1, -1, -1, -1};
    struct r2w x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x.changed, &ca);
    rlc_rwlock *rd[R2W_READERS] = {NULL};
    int made = 0;
    x.lat = calloc(MAX_SAMPLES, sizeof *x.lat);
    /* Readers are explicit owners 1..R: one thread holds all their levels. */
    while (x.lat && made < R2W_READERS &&
           rlc_rwlock_new(c, name, (uint64_t)made + 1, &rd[made]) == RLC_OK)
        made++;
    pthread_t tid;
    bool started = made == R2W_READERS &&
                   rlc_rwlock_new(c, name, R2W_READERS + 1, &x.writer) == RLC_OK &&
                   pthread_create(&tid, NULL, r2w_writer, &x) == 0;
    long long calls0 = fam_script_calls(s);
    int64_t t0 = fam_now_ns(), end = t0 + (int64_t)(secs * 1e9);
    long rounds = 0;
    while (started && rounds < 100000000L && fam_now_ns() < end && r2w_round(&x, rd, rounds + 1))
        rounds++;
    double elapsed = (double)(fam_now_ns() - t0) / 1e9;
    if (started) {
        pthread_mutex_lock(&x.mu);
        x.stop = true;
        pthread_cond_broadcast(&x.changed);
        pthread_mutex_unlock(&x.mu);
        pthread_join(tid, NULL);
    }
    long long calls1 = fam_script_calls(s);
    if (started && x.n > 0) {
        out->rate = (double)x.n / elapsed;
        out->p50 = fam_quantile_us(x.lat, x.n, 0.50);
        out->p99 = fam_quantile_us(x.lat, x.n, 0.99);
        /* The readers' tries and every release are one script each. */
        long long others = (long long)rounds * (2 * R2W_READERS + 1);
        if (calls0 >= 0 && calls1 >= 0 && x.granted > 0)
            out->tries = (double)(calls1 - calls0 - others) / (double)x.granted;
    }
    if (x.errors)
        fprintf(stderr, "read -> write: %ld errors in %ld rounds\n", x.errors, rounds);
    rlc_rwlock_free(x.writer);
    for (int i = 0; i < made; i++)
        rlc_rwlock_free(rd[i]);
    free(x.lat);
    pthread_cond_destroy(&x.changed);
}

/* ---- the bare floor -------------------------------------------------------- */

static const char REL_SCRIPT[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end "
    "return redis.call('publish', KEYS[2], ARGV[2])";
static const char ACQ_SCRIPT[] =
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 30000) then return 1 end return 0";

struct floor_run {
    pthread_mutex_t mu;
    const char *key;
    char chan[2][96];
    int64_t released_ns, end_ns;
    int64_t *lat;
    size_t n;
    long granted, releases, errors;
};

struct floor_side {
    pthread_t tid;
    int me;
    redisContext *cmd, *sub;
    struct floor_run *f;
};

/* The reply's integer, or LLONG_MIN for anything else (freed). */
static long long reply_int(redisReply *r)
{
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
    if (r)
        freeReplyObject(r);
    return v;
}

/* Holds 1 ms, then releases to the other side; false if the run ends here. */
static bool floor_release(struct floor_side *s, bool stop)
{
    struct floor_run *f = s->f;
    nap_until(fam_now_ns() + HOLD_NS);
    pthread_mutex_lock(&f->mu);
    f->released_ns = fam_now_ns();
    pthread_mutex_unlock(&f->mu);
    long long heard = reply_int(redisCommand(s->cmd, "EVAL %s 2 %s %s %s %s", REL_SCRIPT, f->key,
                                             f->chan[!s->me], s->me ? "B" : "A",
                                             stop ? "stop" : "go"));
    pthread_mutex_lock(&f->mu);
    f->releases++;
    f->errors += heard != 1;
    pthread_mutex_unlock(&f->mu);
    return heard == 1 && !stop;
}

/* Waits for the other side's message and takes the key; false to stop. */
static bool floor_take(struct floor_side *s)
{
    struct floor_run *f = s->f;
    void *v = NULL;
    if (redisGetReply(s->sub, &v) != REDIS_OK || !v) /* 2 s read timeout */
        goto fail;
    redisReply *m = v;
    bool stop = m->type != REDIS_REPLY_ARRAY || m->elements != 3 ||
                m->element[2]->type != REDIS_REPLY_STRING || strcmp(m->element[2]->str, "go") != 0;
    freeReplyObject(v);
    if (stop)
        return false;
    long long got = reply_int(redisCommand(s->cmd, "EVAL %s 1 %s %s", ACQ_SCRIPT, f->key,
                                           s->me ? "B" : "A"));
    int64_t t = fam_now_ns();
    if (got != 1)
        goto fail;
    pthread_mutex_lock(&f->mu);
    f->granted++;
    if (f->n < MAX_SAMPLES)
        f->lat[f->n++] = t - f->released_ns;
    pthread_mutex_unlock(&f->mu);
    return true;
fail:
    pthread_mutex_lock(&f->mu);
    f->errors++;
    pthread_mutex_unlock(&f->mu);
    return false;
}

static void *floor_thread(void *arg)
{
    struct floor_side *s = arg;
    bool holding = s->me == 0, going = true;
    for (long i = 0; going && i < 100000000L; i++) {
        if (holding)
            going = floor_release(s, fam_now_ns() >= s->f->end_ns);
        holding = true;
        going = going && floor_take(s);
    }
    return NULL;
}

/* Both connections of a side, its subscription confirmed. */
static bool floor_connect(const struct redis_server *srv, struct floor_side *s)
{
    s->cmd = rs_connect(srv);
    s->sub = rs_connect(srv);
    if (!s->cmd || !s->sub)
        return false;
    redisReply *r = redisCommand(s->sub, "SUBSCRIBE %s", s->f->chan[s->me]);
    bool ok = r && r->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    return ok;
}

void fam_bare_floor(const struct redis_server *srv, const char *name, double secs,
                    struct fam_result *out)
{
    *out = (struct fam_result){-1, -1, -1, -1};
    struct floor_run f = {.mu = PTHREAD_MUTEX_INITIALIZER, .key = name};
    struct floor_side side[2] = {{.me = 0, .f = &f}, {.me = 1, .f = &f}};
    for (int i = 0; i < 2; i++)
        snprintf(f.chan[i], sizeof f.chan[i], "%s:chan:%c", name, 'A' + i);
    f.lat = calloc(MAX_SAMPLES, sizeof *f.lat);
    bool ok = f.lat && floor_connect(srv, &side[0]) && floor_connect(srv, &side[1]) &&
              reply_int(redisCommand(side[0].cmd, "EVAL %s 1 %s A", ACQ_SCRIPT, name)) == 1;
    long long calls0 = fam_script_calls(srv);
    int64_t t0 = fam_now_ns();
    f.end_ns = t0 + (int64_t)(secs * 1e9);
    int started = 0;
    while (ok && started < 2 && pthread_create(&side[started].tid, NULL, floor_thread,
                                               &side[started]) == 0)
        started++;
    for (int i = 0; i < started; i++)
        pthread_join(side[i].tid, NULL);
    double elapsed = (double)(fam_now_ns() - t0) / 1e9;
    long long calls1 = fam_script_calls(srv);
    if (started == 2 && f.n > 0) {
        out->rate = (double)f.n / elapsed;
        out->p50 = fam_quantile_us(f.lat, f.n, 0.50);
        out->p99 = fam_quantile_us(f.lat, f.n, 0.99);
        if (calls0 >= 0 && calls1 >= 0)
            out->tries = (double)(calls1 - calls0 - f.releases) / (double)f.granted;
    }
    if (!ok || started < 2 || f.errors)
        fprintf(stderr, "bare floor: set-up %s, %d threads, %ld errors\n", ok ? "ok" : "failed",
                started, f.errors);
    for (int i = 0; i < 2; i++) {
        if (side[i].cmd)
            redisFree(side[i].cmd);
        if (side[i].sub)
            redisFree(side[i].sub);
    }
    free(f.lat);
}
