/*
 * engine.c - the sans-I/O engine driven by one event-loop thread
 * (tests/c/engine_loop.h), beside bare hiredis doing the same scripts in the
 * same run, against one redis-server started here. Prints one line per row;
 * never fails on speed.
 *
 *   pipelined 64   64 lock cycles in flight on one connection from one
 *                  thread: bare hiredis (acquire then release EVALSHA per
 *                  slot, each slot its own name) against the engine with 64
 *                  owners on 64 names. The target: >= 0.7x bare.
 *   sequential 1   one cycle at a time: bare against the engine.
 *   hand-off       release -> the waiter's grant: bare floor (release
 *                  script, then acquire script, back to back on one
 *                  connection) against the engine, waiter in another engine
 *                  (woken by the unlock message) and in the same engine
 *                  (woken by the release's reply).
 *   10k waiters    10,000 acquires waiting on 100 names in one engine; each
 *                  holder releases at once: all complete, memory per waiter,
 *                  hand-off p50/p99.
 *   blocking       the blocking API (the blocking driver of the engine,
 *                  engine_driver.c: the calling threads lead in turn)
 *                  against bare hiredis: 1 and 16 threads on names of their
 *                  own, and the hand-off between two clients against the
 *                  bare floor; 3 rounds taken in turn, medians printed.
 *
 *   rlc_bench_engine [seconds]   (default 3)
 */
#include <hiredis/hiredis.h>
#include <malloc.h>
#include <sys/resource.h>

#include "../c/engine_loop.h"
#include "driver_rows.h"
#include "redis_server.h"
#include "scripts.h"

#define SLOTS 64
#define SETTLE_MS 5 /* before each hand-off: the waiter is asleep, the server idle */
#define UUID_A "0e0e0e0e-0000-4000-8000-00000000000a"
#define UUID_B "0e0e0e0e-0000-4000-8000-00000000000b"

static double seconds = 3;

/* A fresh UUID per engine: two engines must never share one (redlockc.h). */
static const char *fresh_uuid(void)
{
    static char buf[8][40];
    static int k;
    char *u = buf[k++ % 8];
    unsigned v[4];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(v, sizeof v, 1, f) != 1)
        abort();
    fclose(f);
    snprintf(u, 40, "%08x-%04x-4%03x-8%03x-%04x%08x", v[0], v[1] & 0xffff, v[1] >> 20,
             v[2] & 0xfff, v[2] >> 16, v[3]);
    return u;
}

static int64_t user_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
           (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double quant_us(int64_t *v, int n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp64);
    return v[(int)(q * (n - 1))] / 1000.0;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- bare hiredis ------------------------------------------------------------ */

static void append_acquire(redisContext *c, int slot, uint64_t attempt)
{
    /* the library's call without fencing (lock_calls.c, call_acquire) */
    char name[32], att[64], field[64], id[80];
    snprintf(name, sizeof name, "b:%d", slot);
    snprintf(att, sizeof att, "redlockc_attempts:{b:%d}", slot);
    snprintf(field, sizeof field, "%s:%d", UUID_B, slot + 1);
    snprintf(id, sizeof id, "%s:%llx", UUID_B, (unsigned long long)attempt);
    redisAppendCommand(c, "EVALSHA %s 2 %s %s 30000 %s %s %s", script_acquire.sha, name, att, field,
                       id, "");
}

static void append_release(redisContext *c, int slot, uint64_t attempt)
{
    char name[32], ch[64], att[64], field[64], id[80], up[24];
    snprintf(name, sizeof name, "b:%d", slot);
    snprintf(ch, sizeof ch, "redisson_lock__channel:{b:%d}", slot);
    snprintf(att, sizeof att, "redlockc_attempts:{b:%d}", slot);
    snprintf(field, sizeof field, "%s:%d", UUID_B, slot + 1);
    snprintf(id, sizeof id, "%s:%llx", UUID_B, (unsigned long long)attempt);
    snprintf(up, sizeof up, "%llx", (unsigned long long)attempt);
    redisAppendCommand(c, "EVALSHA %s 3 %s %s %s 30000 %s %s %s", script_release.sha, name, ch,
                       att, field, id, up);
}

static void load_scripts(redisContext *c)
{
    const struct script *all[] = {&script_acquire, &script_release};
    for (int i = 0; i < 2; i++)
        freeReplyObject(redisCommand(c, "SCRIPT LOAD %s", all[i]->source));
}

/* cycles/s of `slots` cycles in flight; cpu per cycle in us */
static double bare(const struct redis_server *s, int slots, double *cpu_us)
{
    redisContext *c = redisConnect("127.0.0.1", s->port);
    load_scripts(c);
    uint64_t attempt = 0, att[SLOTS];
    bool releasing[SLOTS] = {false};
    for (int i = 0; i < slots; i++)
        append_acquire(c, i, att[i] = ++attempt);
    long cycles = 0;
    int64_t end = now_ns() + (int64_t)(seconds * 1e9), t0 = now_ns(), cpu0 = user_cpu_us();
    int slot = 0;
    while (now_ns() < end) {
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK)
            break;
        freeReplyObject(r);
        /* replies come back in the order sent: slots take turns */
        if (releasing[slot]) {
            cycles++;
            append_acquire(c, slot, att[slot] = ++attempt);
        } else {
            append_release(c, slot, att[slot]);
        }
        releasing[slot] = !releasing[slot];
        slot = (slot + 1) % slots;
    }
    double secs = (now_ns() - t0) / 1e9;
    *cpu_us = cycles ? (double)(user_cpu_us() - cpu0) / (double)cycles : 0;
    redisFree(c);
    return cycles / secs;
}

/* ---- the engine ---------------------------------------------------------------- */

static double engine_cycles(const struct redis_server *s, int slots, double *cpu_us)
{
    struct eloop L;
    if (el_init(&L, s->uri, fresh_uuid(), NULL) != RLC_OK)
        return 0;
    char names[SLOTS][16];
    uint64_t op[SLOTS];
    bool releasing[SLOTS] = {false};
    static int run;
    run++; /* names of their own: an earlier run's holds expire only with their lease */
    for (int i = 0; i < slots; i++) {
        snprintf(names[i], sizeof names[i], "e%d:%d", run, i);
        rlc_engine_acquire(L.e, names[i], strlen(names[i]), (uint64_t)i + 1, 1000, -1, el_now(),
                           &op[i]);
    }
    long cycles = 0;
    int64_t end = now_ns() + (int64_t)(seconds * 1e9), t0 = now_ns(), cpu0 = user_cpu_us();
    while (now_ns() < end) {
        int before = L.n_done;
        el_turn(&L, 10);
        for (int k = before; k < L.n_done; k++) {
            const struct el_done *d = &L.done[k % EL_MAX_DONE];
            int i = -1;
            for (int j = 0; j < slots; j++)
                if (op[j] == d->op)
                    i = j;
            if (i < 0)
                continue;
            if (releasing[i]) {
                cycles++;
                rlc_engine_acquire(L.e, names[i], strlen(names[i]), (uint64_t)i + 1, 1000, -1,
                                   el_now(), &op[i]);
            } else {
                rlc_engine_release(L.e, names[i], strlen(names[i]), (uint64_t)i + 1, el_now(),
                                   &op[i]);
            }
            releasing[i] = !releasing[i];
        }
        if (L.n_done > EL_MAX_DONE / 2)
            L.n_done = 0; /* the records were used */
    }
    double secs = (now_ns() - t0) / 1e9;
    *cpu_us = cycles ? (double)(user_cpu_us() - cpu0) / (double)cycles : 0;
    el_free(&L);
    return cycles / secs;
}

/* ---- hand-off -------------------------------------------------------------------- */

static double bare_handoff_us(const struct redis_server *s, int rounds)
{
    redisContext *c = redisConnect("127.0.0.1", s->port);
    load_scripts(c);
    int64_t *v = calloc((size_t)rounds, sizeof *v);
    uint64_t attempt = 0;
    freeReplyObject(redisCommand(c, "DEL b:0"));
    append_acquire(c, 0, ++attempt);
    redisReply *r;
    redisGetReply(c, (void **)&r);
    freeReplyObject(r);
    for (int i = 0; i < rounds; i++) {
        /* idle as long as the engine's waiter settles before each release:
         * a server woken from idle answers slower than one kept busy */
        struct timespec idle = {0, SETTLE_MS * 1000000L};
        nanosleep(&idle, NULL);
        int64_t t0 = now_ns();
        append_release(c, 0, attempt);
        redisGetReply(c, (void **)&r);
        freeReplyObject(r);
        append_acquire(c, 0, ++attempt);
        redisGetReply(c, (void **)&r);
        freeReplyObject(r);
        v[i] = now_ns() - t0;
    }
    double p50 = quant_us(v, rounds, 0.5);
    free(v);
    redisFree(c);
    return p50;
}

/* Holder and waiter in two engines (same = false) or one. */
static double engine_handoff_us(const struct redis_server *s, int rounds, bool same, double *p99)
{
    struct eloop A, B;
    el_init(&A, s->uri, fresh_uuid(), NULL);
    el_init(&B, s->uri, fresh_uuid(), NULL);
    struct eloop *H = &A, *W = same ? &A : &B;
    int64_t *v = calloc((size_t)rounds, sizeof *v);
    int n = 0;
    uint64_t holder = 1, waiter = 2;
    const char *name = same ? "h-same" : "h-two";
    const struct el_done *first = NULL;
    int rc0 = el_acquire(H, name, holder, 0, -1, &first);
    if (rc0 != RLC_OK)
        fprintf(stderr, "hand-off: the first acquire failed: %d %s\n", rc0,
                first ? first->message : "");
    for (int i = 0; i < rounds; i++) {
        uint64_t wop, rop;
        rlc_engine_acquire(W->e, name, strlen(name), waiter, 10000, -1, el_now(), &wop);
        /* let it find the lock busy and go to sleep (subscribed) */
        int64_t settle = el_now() + SETTLE_MS;
        while (el_now() < settle) {
            el_turn(W, 1);
            el_turn(H, 0);
        }
        int64_t t0 = now_ns();
        rlc_engine_release(H->e, name, strlen(name), holder, el_now(), &rop);
        const struct el_done *d = NULL;
        int64_t end = el_now() + 5000;
        /* block in poll as an event loop does; spinning would steal the
         * server's CPU on a small machine */
        while (!(d = el_wait(W, wop, 0)) && el_now() < end) {
            el_turn(H, W == H ? 50 : 0);
            if (W != H)
                el_turn(W, 1);
        }
        if (d && d->status == RLC_OK)
            v[n++] = now_ns() - t0;
        else
            fprintf(stderr, "hand-off round %d: %s %d %s\n", i, d ? "done" : "no grant in 5 s",
                    d ? d->status : 0, d ? d->message : "");
        uint64_t t = holder;
        holder = waiter;
        waiter = t;
        struct eloop *x = H;
        H = W;
        W = x;
        if (A.n_done > EL_MAX_DONE / 2)
            A.n_done = 0;
        if (B.n_done > EL_MAX_DONE / 2)
            B.n_done = 0;
    }
    el_release(H, name, holder);
    double p50 = quant_us(v, n, 0.5);
    *p99 = quant_us(v, n, 0.99);
    free(v);
    el_free(&A);
    el_free(&B);
    return p50;
}

/* ---- the blocking API against bare hiredis ------------------------------------------- */

static double median3(double *v)
{
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

static void blocking_rows(const struct redis_server *s)
{
    double bare1[3], api1[3], api16[3], cpu, fl[3], ah[3], ah99[3];
    long err = 0, e;
    for (int r = 0; r < 3; r++) {
        bare1[r] = bare(s, 1, &cpu);
        api1[r] = driver_cycles(s->uri, 1, seconds, &e), err += e;
        api16[r] = driver_cycles(s->uri, 16, seconds, &e), err += e;
        fl[r] = bare_handoff_us(s, 200);
        ah[r] = driver_handoff_us(s->uri, 200, SETTLE_MS, &ah99[r]);
    }
    double b = median3(bare1), a = median3(api1), f = median3(fl);
    printf("blocking 1    bare hiredis %.0f cycles/s | blocking API %.0f (%.2fx bare, target >= "
           "0.95)\n",
           b, a, a / b);
    printf("blocking 16   blocking API %.0f cycles/s\n", median3(api16));
    a = median3(ah);
    printf("blocking hand-off  bare floor p50 %.0f us | blocking API p50 %.0f us (%.2fx floor, "
           "target <= 1.5x) p99 %.0f us | errors %ld\n",
           f, a, a / f, median3(ah99), err);
}

/* ---- 10,000 waiters ------------------------------------------------------------------ */

static void many_waiters(const struct redis_server *s, int waiters, int locks)
{
    struct eloop L;
    el_init(&L, s->uri, fresh_uuid(), NULL);
    struct mallinfo2 m0 = mallinfo2();
    uint64_t *ops = calloc((size_t)waiters, sizeof *ops);
    char name[32];
    /* one holder per lock first, so that everyone else waits */
    for (int k = 0; k < locks; k++) {
        snprintf(name, sizeof name, "m:%d", k);
        el_acquire(&L, name, (uint64_t)waiters + 1 + (uint64_t)k, 0, -1, NULL);
    }
    for (int i = 0; i < waiters; i++) {
        snprintf(name, sizeof name, "m:%d", i % locks);
        rlc_engine_acquire(L.e, name, strlen(name), (uint64_t)i + 1, -1, -1, el_now(), &ops[i]);
    }
    for (int k = 0; k < 200; k++)
        el_turn(&L, 1);
    struct mallinfo2 m1 = mallinfo2();
    double per_waiter = (double)(m1.uordblks - m0.uordblks) / waiters;
    int64_t *hand = calloc((size_t)waiters, sizeof *hand);
    int64_t *released_at = calloc((size_t)locks, sizeof *released_at);
    int done = 0, nh = 0;
    L.n_done = 0;
    /* the first holders let go */
    for (int k = 0; k < locks; k++) {
        uint64_t op;
        snprintf(name, sizeof name, "m:%d", k);
        rlc_engine_release(L.e, name, strlen(name), (uint64_t)waiters + 1 + (uint64_t)k,
                           el_now(), &op);
        released_at[k] = now_ns();
    }
    int64_t end = el_now() + 120000;
    while (done < waiters && el_now() < end) {
        int before = L.n_done;
        el_turn(&L, 10);
        for (int k = before; k < L.n_done; k++) {
            const struct el_done *d = &L.done[k % EL_MAX_DONE];
            if (d->status != RLC_OK || d->count != 1)
                continue;
            /* a grant: which owner? the ops table tells */
            uint64_t owner = 0;
            for (int i = 0; i < waiters && !owner; i++)
                if (ops[i] == d->op) {
                    owner = (uint64_t)i + 1;
                    ops[i] = 0;
                }
            if (!owner)
                continue;
            int lk = (int)((owner - 1) % (uint64_t)locks);
            hand[nh++] = now_ns() - released_at[lk];
            done++;
            uint64_t op;
            snprintf(name, sizeof name, "m:%d", lk);
            rlc_engine_release(L.e, name, strlen(name), owner, el_now(), &op);
            released_at[lk] = now_ns();
        }
        if (L.n_done > EL_MAX_DONE / 2)
            L.n_done = 0;
    }
    printf("10k waiters   %d acquires waiting on %d locks in one engine: %d completed; "
           "memory per waiter %.0f B; hand-off p50 %.0f us p99 %.0f us\n",
           waiters, locks, done, per_waiter, quant_us(hand, nh, 0.5), quant_us(hand, nh, 0.99));
    free(hand);
    free(released_at);
    free(ops);
    el_free(&L);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1)
        seconds = atof(argv[1]);
    scripts_init();
    struct redis_server s;
    if (rs_start(&s, NULL) != 0) {
        fprintf(stderr, "redis-server did not start\n");
        return 1;
    }
    double cb = 0, ce = 0, b64 = bare(&s, SLOTS, &cb), e64 = engine_cycles(&s, SLOTS, &ce);
    printf("pipelined 64  bare hiredis %.0f cycles/s (%.1f us CPU/cycle) | engine %.0f cycles/s "
           "(%.1f us CPU/cycle) | engine/bare %.2f (target >= 0.70)\n",
           b64, cb, e64, ce, e64 / b64);
    double b1 = bare(&s, 1, &cb), e1 = engine_cycles(&s, 1, &ce);
    printf("sequential 1  bare hiredis %.0f cycles/s (%.1f us CPU/cycle) | engine %.0f cycles/s "
           "(%.1f us CPU/cycle) | engine/bare %.2f\n",
           b1, cb, e1, ce, e1 / b1);
    double floor = bare_handoff_us(&s, 500), p99a, p99b;
    double other = engine_handoff_us(&s, 500, false, &p99a);
    double same = engine_handoff_us(&s, 500, true, &p99b);
    printf("hand-off      bare floor (release + acquire) p50 %.0f us | engine, waiter in another "
           "engine p50 %.0f us (%.2fx floor, target <= 1.5x) p99 %.0f us | same engine p50 %.0f "
           "us (%.2fx) p99 %.0f us\n",
           floor, other, other / floor, p99a, same, same / floor, p99b);
    blocking_rows(&s);
    many_waiters(&s, 10000, 100);
    rs_stop(&s);
    return 0;
}
