/*
 * wdog.c - the watchdog at scale: one client holding many watchdog locks.
 *
 * The client runs in a child process of its own, so that "CPU% of the client
 * process" is that process and nothing of the driver's. It takes wd_locks
 * locks with watchdog_timeout_ms = WD_LEASE_MS and holds them for wd_seconds.
 * Meanwhile the driver watches the server: INFO commandstats every TICK_MS
 * gives the renewal script calls (EVALSHA) and the keys they renewed
 * (PEXPIRE, counted inside scripts too); calls that follow a quiet gap of
 * ROUND_GAP_MS or more start a new renewal round. At the end the driver
 * checks on the server that every key still holds the client's field, and
 * the child reports how many on_lost callbacks ran: locks lost must be 0.
 */
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "redlockc.h"

#define WD_LEASE_MS 3000
#define TICK_MS 20
#define ROUND_GAP_MS 300

static atomic_long lost_callbacks;

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l, (void)reason, (void)user;
    atomic_fetch_add(&lost_callbacks, 1);
}

/* The client process: take the locks, report, hold, report, wait to exit. */
static void child_main(struct bench *b, int to_parent, int from_parent)
{
    rlc_client *c = NULL;
    char opts[64];
    snprintf(opts, sizeof opts, "watchdog_timeout_ms=%d", WD_LEASE_MS);
    if (rlc_client_new(&c, b->srv[0].uri, opts) != RLC_OK)
        _exit(1);
    rlc_lock **locks = calloc((size_t)b->wd_locks, sizeof *locks);
    int got = 0;
    for (int i = 0; locks && i < b->wd_locks; i++) {
        char name[48];
        snprintf(name, sizeof name, "bench:wd:%d", i);
        if (rlc_lock_new(c, name, 0, &locks[i]) != RLC_OK)
            break;
        rlc_lock_on_lost(locks[i], on_lost, NULL);
        got += rlc_lock_acquire(locks[i], 1000, 0) == RLC_OK;
    }
    char msg[256];
    int len = snprintf(msg, sizeof msg, "READY %d %s:%llu\n", got, rlc_client_uuid(c),
                       (unsigned long long)rlc_thread_owner());
    if (write(to_parent, msg, (size_t)len) != len)
        _exit(1);

    int64_t cpu0 = self_cpu_ns(), t0 = now_ns();
    sleep_ns((int64_t)(b->wd_seconds * 1e9));
    int64_t cpu = self_cpu_ns() - cpu0, wall = now_ns() - t0;
    len = snprintf(msg, sizeof msg, "DONE %lld %lld %ld\n", (long long)cpu, (long long)wall,
                   atomic_load(&lost_callbacks));
    if (write(to_parent, msg, (size_t)len) != len)
        _exit(1);
    /* Hold on until the driver has checked the keys (bounded: 120 s). */
    struct pollfd p = {from_parent, POLLIN, 0};
    poll(&p, 1, 120000);
    _exit(0);
}

/* Reads one line from fd within timeout_ms; 0 on success. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    size_t n = 0;
    int64_t end = now_ns() + (int64_t)timeout_ms * 1000000LL;
    while (n + 1 < size) {
        int left = (int)((end - now_ns()) / 1000000LL);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        if (read(fd, buf + n, 1) != 1)
            return -1;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

static long long cmdstat_calls(redisContext *ctx, const char *cmd)
{
    redisReply *r = redisCommand(ctx, "INFO commandstats");
    long long v = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
        const char *p = strstr(r->str, pat);
        if (p)
            v = atoll(p + strlen(pat));
    }
    if (r)
        freeReplyObject(r);
    return v;
}

/* How many of the locks no longer hold the client's field on the server. */
static long missing_keys(redisContext *ctx, int n, const char *field)
{
    for (int i = 0; i < n; i++)
        redisAppendCommand(ctx, "HEXISTS bench:wd:%d %s", i, field);
    long missing = 0;
    for (int i = 0; i < n; i++) {
        void *v = NULL;
        if (redisGetReply(ctx, &v) != REDIS_OK)
            return n;
        redisReply *r = v;
        missing += !(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        freeReplyObject(r);
    }
    return missing;
}

struct watch {
    long long calls0, keys0, calls, keys;
    int rounds;
};

/* Samples the server until the child says DONE (or the time is up). */
static int watch_rounds(redisContext *ctx, int fd, double seconds, struct watch *w, char *done,
                        size_t size)
{
    w->calls0 = w->calls = cmdstat_calls(ctx, "evalsha");
    w->keys0 = cmdstat_calls(ctx, "pexpire");
    int64_t last_change = 0, end = now_ns() + (int64_t)((seconds + 30) * 1e9);
    while (now_ns() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, TICK_MS) > 0)
            return read_line(fd, done, size, 5000);
        long long calls = cmdstat_calls(ctx, "evalsha");
        if (calls > w->calls) {
            int64_t t = now_ns();
            if (last_change == 0 || t - last_change >= ROUND_GAP_MS * 1000000LL)
                w->rounds++;
            last_change = t;
            w->calls = calls;
        }
    }
    return -1;
}

void run_watchdog(struct bench *b)
{
    flush_nodes(b);
    int up[2], down[2];
    if (pipe(up) < 0)
        return;
    if (pipe(down) < 0) {
        close(up[0]);
        close(up[1]);
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        child_main(b, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    char line[256], field[128] = "";
    int acquired = 0;
    struct watch w;
    memset(&w, 0, sizeof w);
    long long cpu = 0, wall = 1;
    long lost_cb = -1, missing = -1;
    redisContext *ctx = rs_connect(&b->srv[0]);
    int ok = pid > 0 && ctx && read_line(up[0], line, sizeof line, 120000) == 0 &&
             sscanf(line, "READY %d %127s", &acquired, field) == 2;
    if (ok)
        ok = watch_rounds(ctx, up[0], b->wd_seconds, &w, line, sizeof line) == 0 &&
             sscanf(line, "DONE %lld %lld %ld", &cpu, &wall, &lost_cb) == 3;
    if (ok) {
        w.keys = cmdstat_calls(ctx, "pexpire");
        missing = missing_keys(ctx, b->wd_locks, field);
    }
    /* Let the child go, then reap it (bounded: 10 s, then SIGKILL by pid). */
    if (write(down[1], "x", 1) != 1)
        note("watchdog: could not signal the client process");
    close(down[1]);
    close(up[0]);
    if (pid > 0) {
        int i = 0;
        while (waitpid(pid, NULL, WNOHANG) == 0 && i++ < 1000)
            sleep_ns(10 * 1000000LL);
        if (i > 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    if (ctx)
        redisFree(ctx);

    row_begin(b, "c.watchdog");
    if (!ok) {
        row_str(b, "error", "the watchdog client process did not report");
        row_end(b);
        return;
    }
    double secs = (double)wall / 1e9;
    long long calls = w.calls - w.calls0, keys = w.keys - w.keys0;
    row_num(b, "locks", b->wd_locks);
    row_num(b, "acquired", acquired);
    row_num(b, "lease_ms", WD_LEASE_MS);
    row_num(b, "seconds", secs);
    row_num(b, "renew_calls_per_s", (double)calls / secs);
    row_num(b, "keys_renewed_per_s", (double)keys / secs);
    row_num(b, "rounds", w.rounds);
    row_num(b, "calls_per_round", w.rounds ? (double)calls / w.rounds : 0);
    row_num(b, "keys_per_round", w.rounds ? (double)keys / w.rounds : 0);
    row_num(b, "client_cpu_pct", 100.0 * (double)cpu / (double)wall);
    row_num(b, "lost_callbacks", (double)lost_cb);
    row_num(b, "missing_keys", (double)missing);
    row_num(b, "lost", (double)(missing > lost_cb ? missing : lost_cb));
    row_end(b);
}
