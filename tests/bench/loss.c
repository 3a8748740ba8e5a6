/*
 * loss.c - rlc_bench_loss: how long after its lock key is lost a holder's
 * on_lost runs, with loss pushed at once (loss_push=1, CLIENT TRACKING) and
 * with today's renewal-time detection (loss_push=0), in the same run against
 * the same redis-server. Never a ctest; prints one JSON row per case and a
 * small table. docs/design/loss-push.md quotes its figures.
 *
 *   rlc_bench_loss [--samples N] [--lease MS]
 *
 * Cases, each N times per mode, the event placed at a random point of the
 * renewal period (lease/3):
 *   del        DEL of the lock key from another connection;
 *   overwrite  another owner's hash in its place, in one atomic script;
 *   expiry     the key's TTL shortened to 50 ms behind the holder's back:
 *              measured from the moment the TTL ends (Redis deletes it on
 *              its active expiry cycle, hz 10, so this includes that);
 *   paused     a holder process stopped (SIGSTOP) until its key expired,
 *              then continued: measured from SIGCONT;
 *   engine_del, engine_overwrite
 *              del and overwrite with the holder on the engine (the
 *              asyncio, Node and OpenResty drivers' core, engine_track.c),
 *              driven by tests/c/engine_loop.h: to its RLC_EV_LOST event;
 *   cluster_del, engine_cluster_del
 *              del on a 3+3 Redis Cluster (a tracking pair per master), the
 *              blocking API and the engine; DEL on the key's master.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_loop.h"
#include "redis_cluster.h"
#include "redis_server.h"
#include "redlockc.h"

/* Where a case runs: one server, or a cluster (its key's master is struck). */
struct target {
    const char *uri;
    const struct redis_server *s;
    const struct redis_cluster *rc;
};

static const struct redis_server *server_of(const struct target *t, const char *name)
{
    if (!t->rc)
        return t->s;
    long long slot = rs_int(&t->rc->node[0], "CLUSTER KEYSLOT %s", name);
    int m = slot >= 0 ? rc_master_of(t->rc, (int)slot) : -1;
    return m >= 0 ? &t->rc->node[m] : NULL;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static atomic_llong lost_at_ns;

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)reason;
    (void)user;
    atomic_store(&lost_at_ns, mono_ns());
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double quantile_ms(int64_t *v, int n, double q)
{
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp64);
    int k = (int)(q * (n - 1) + 0.5);
    return (double)v[k] / 1e6;
}

/* Waits, bounded, for on_lost; its time, or 0. */
static int64_t await_lost(int64_t bound_ms)
{
    int64_t until = mono_ns() + bound_ms * 1000000LL;
    while (atomic_load(&lost_at_ns) == 0 && mono_ns() < until)
        sleep_ms(1);
    return atomic_load(&lost_at_ns);
}

/* The event of a case on the key name: when it happened, in ns. */
static int64_t strike(const struct redis_server *s, const char *what, const char *name)
{
    int64_t t0 = mono_ns();
    redisReply *r = NULL;
    if (!s) {
        return t0; /* no master known: the sample is missed */
    } else if (strcmp(what, "del") == 0) {
        r = rs_cmd(s, "DEL %s", name);
    } else if (strcmp(what, "overwrite") == 0) {
        r = rs_cmd(s, "EVAL %s 1 %s",
                   "redis.call('del', KEYS[1]); redis.call('hset', KEYS[1], 'someone:1', 1); "
                   "redis.call('pexpire', KEYS[1], 30000) return 1",
                   name);
    } else { /* expiry */
        r = rs_cmd(s, "PEXPIRE %s 50", name);
        t0 += 50 * 1000000LL;
    }
    if (r)
        freeReplyObject(r);
    return t0;
}

/* One sample with the holder on the engine: the latency in ns, or -1. */
static int64_t one_engine(const struct target *t, const char *opts, const char *what,
                          int lease, int k)
{
    struct eloop L;
    int64_t lat = -1;
    char name[64], uuid[40];
    snprintf(name, sizeof name, "loss-engine-%s-%d-%d", what, k, (int)(mono_ns() % 100000));
    snprintf(uuid, sizeof uuid, "6d7a1c3e-0000-4000-8000-%012llx",
             (unsigned long long)(mono_ns() & 0xffffffffffffLL));
    if (el_init(&L, t->uri, uuid, opts) != RLC_OK)
        return -1;
    if (el_acquire(&L, name, 1, 0, -1, NULL) == RLC_OK) {
        int64_t until = el_now() + 100 + rand() % (lease / 3); /* anywhere in the period */
        while (el_now() < until && !L.lost)
            el_turn(&L, 5);
        int64_t t0 = strike(server_of(t, name), what, name);
        int64_t bound = mono_ns() + (2LL * lease + 1000) * 1000000LL;
        while (!L.lost && mono_ns() < bound)
            el_turn(&L, 1);
        if (L.lost)
            lat = mono_ns() - t0;
    }
    el_free(&L);
    return lat;
}

/* One sample of an in-process case: the latency in ns, or -1. */
static int64_t one(const struct target *t, const char *opts, const char *what, int lease,
                   int k)
{
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    int64_t lat = -1;
    char name[64];
    snprintf(name, sizeof name, "loss-%s-%d-%d", what, k, (int)(mono_ns() % 100000));
    if (rlc_client_new(&c, t->uri, opts) != RLC_OK || rlc_lock_new(c, name, 0, &l) != RLC_OK ||
        rlc_lock_on_lost(l, on_lost, NULL) != RLC_OK || rlc_lock_acquire(l, 0, -1) != RLC_OK)
        goto out;
    atomic_store(&lost_at_ns, 0);
    sleep_ms(100 + rand() % (lease / 3)); /* anywhere in the renewal period */
    int64_t t0 = strike(server_of(t, name), what, name);
    int64_t at = await_lost(2 * lease + 1000);
    if (at)
        lat = at - t0;
out:
    rlc_lock_free(l);
    rlc_client_free(c);
    return lat;
}

/* The paused case: a child holds the lock, is stopped until its key has
 * expired, and is continued; it writes the time of its on_lost to a pipe. */
static int64_t one_paused(const struct redis_server *s, const char *opts, int lease, int k)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char name[64];
    snprintf(name, sizeof name, "loss-paused-%d-%d", k, (int)(mono_ns() % 100000));
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        rlc_client *c = NULL;
        rlc_lock *l = NULL;
        int64_t ready = 1, at = 0;
        if (rlc_client_new(&c, s->uri, opts) != RLC_OK || rlc_lock_new(c, name, 0, &l) != RLC_OK ||
            rlc_lock_on_lost(l, on_lost, NULL) != RLC_OK || rlc_lock_acquire(l, 0, -1) != RLC_OK)
            ready = 0;
        if (!ready)
            fprintf(stderr, "paused holder: %s\n", rlc_errmsg());
        if (write(fds[1], &ready, sizeof ready) != sizeof ready || !ready)
            _exit(1);
        at = await_lost(4 * lease + 5000);
        if (!at)
            fprintf(stderr, "paused holder: no on_lost; held=%d\n", rlc_lock_is_held(l, &(int){0}));
        if (write(fds[1], &at, sizeof at) != sizeof at)
            _exit(1);
        rlc_lock_free(l);
        rlc_client_free(c);
        _exit(0);
    }
    close(fds[1]);
    int64_t lat = -1, ready = 0, at = 0;
    if (pid < 0 || read(fds[0], &ready, sizeof ready) != sizeof ready || !ready)
        goto out;
    sleep_ms(50 + rand() % (lease / 3));
    kill(pid, SIGSTOP);
    for (int i = 0; i < 4 * lease && rs_int(s, "EXISTS %s", name) == 1; i++)
        sleep_ms(1);
    sleep_ms(100);
    int64_t t0 = mono_ns();
    kill(pid, SIGCONT);
    if (read(fds[0], &at, sizeof at) == sizeof at && at)
        lat = at - t0;
out:
    if (pid > 0) {
        kill(pid, SIGCONT);
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    return lat;
}

int main(int argc, char **argv)
{
    int samples = 20, lease = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0)
            samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--lease") == 0)
            lease = atoi(argv[i + 1]);
    }
    if (samples < 1 || samples > 10000 || lease < 300) {
        fprintf(stderr, "usage: rlc_bench_loss [--samples N (1..10000)] [--lease MS (>= 300)]\n");
        return 2;
    }
    srand((unsigned)mono_ns());
    struct redis_server s;
    if (rs_start(&s, NULL) != 0) {
        fprintf(stderr, "redis-server did not start\n");
        return 1;
    }
    static const char *const cases[] = {"paused",      "del",
                                        "overwrite",   "expiry",
                                        "engine_del",  "engine_overwrite",
                                        "cluster_del", "engine_cluster_del"};
    struct redis_cluster rc;
    bool rc_up = false;
    struct target single = {s.uri, &s, NULL}, cluster = {NULL, NULL, &rc};
    int64_t *v = malloc(sizeof *v * (size_t)samples);
    printf("# lease %d ms (renewal every %d ms), %d samples per row\n", lease, lease / 3, samples);
    printf("# %-10s %-10s %9s %9s %9s %6s\n", "case", "loss_push", "p50_ms", "p99_ms", "max_ms",
           "missed");
    for (size_t ci = 0; v && ci < sizeof cases / sizeof cases[0]; ci++) {
        const char *what = cases[ci];
        bool engine = strncmp(what, "engine_", 7) == 0;
        what += engine ? 7 : 0;
        bool on_cluster = strncmp(what, "cluster_", 8) == 0;
        what += on_cluster ? 8 : 0;
        if (on_cluster && !rc_up) {
            if (rc_start(&rc) != 0) {
                fprintf(stderr, "a 3+3 redis cluster did not start: no cluster rows\n");
                break;
            }
            rc_up = true;
            cluster.uri = rc.uri;
        }
        const struct target *t = on_cluster ? &cluster : &single;
        for (int push = 1; push >= 0; push--) {
            char opts[96];
            snprintf(opts, sizeof opts, "watchdog_timeout_ms=%d;loss_push=%d", lease, push);
            int n = 0, missed = 0;
            for (int k = 0; k < samples; k++) {
                int64_t lat = strcmp(what, "paused") == 0 ? one_paused(&s, opts, lease, k)
                              : engine ? one_engine(t, opts, what, lease, k)
                                       : one(t, opts, what, lease, k);
                if (lat < 0)
                    missed++;
                else
                    v[n++] = lat;
            }
            double p50 = quantile_ms(v, n, 0.5), p99 = quantile_ms(v, n, 0.99),
                   max = quantile_ms(v, n, 1.0);
            printf("{\"row\":\"loss_%s\",\"loss_push\":%d,\"lease_ms\":%d,\"samples\":%d,"
                   "\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.2f,\"missed\":%d}\n",
                   cases[ci], push, lease, n, p50, p99, max, missed);
            fflush(stdout);
        }
    }
    free(v);
    if (rc_up)
        rc_stop(&rc);
    rs_stop(&s);
    return 0;
}
