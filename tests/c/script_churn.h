/*
 * script_churn.h - what the cases that churn a server's script cache share
 * (test_scripts_loaded.c for the lock, test_family_scripts.c for the
 * family): another connection on its own thread that runs SCRIPT FLUSH
 * every 100 ms or EVALs scripts never seen before (Redis 7.4+ and Valkey 8
 * evict beyond 500 of them), the server's NOSCRIPT count, and a log of
 * operations each checked against the answer it must give.
 */
#ifndef RLC_TEST_SCRIPT_CHURN_H
#define RLC_TEST_SCRIPT_CHURN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fixture.h"

/* Mixed operations: the issue asks for 100,000 under the flushes. A run
 * stops at that count or at its time bound, whichever comes first, and
 * the case prints the count it reached. */
#define MIXED_OPS 100000
#define MIXED_MS 5000

static inline long long noscripts(const struct redis_server *s)
{
    long long n = rs_info_int(s, "errorstats", "errorstat_NOSCRIPT:count");
    return n < 0 ? 0 : n; /* no line: none yet */
}

/* Operations done, and the first that did not answer as it must. */
struct op_log {
    long ops;
    char failed[300];
};

static inline bool op_expect(struct op_log *x, const char *what, int rc, int want)
{
    x->ops++;
    if (rc == want || x->failed[0])
        return rc == want;
    snprintf(x->failed, sizeof x->failed, "op %ld, %s: %d (%s), expected %d; %s", x->ops, what,
             rc, rlc_strerror(rc), want, rlc_errmsg());
    return false;
}

#define SIDE_MAX 20000 /* EVALs or flushes: a bound on the server's script cache */

struct side {
    const struct redis_server *s;
    bool evals; /* EVAL distinct scripts (else SCRIPT FLUSH every 100 ms) */
    atomic_bool stop;
    atomic_long done; /* flushes, or scripts EVALed */
    char err[200];
};

static inline void *side_run(void *arg)
{
    struct side *sd = arg;
    redisContext *raw = rs_connect(sd->s);
    int64_t until = check_now_ms() + MIXED_MS + 10000; /* bounded even if never stopped */
    for (long i = 0; raw && !atomic_load(&sd->stop) && check_now_ms() < until && i < SIDE_MAX;
         i++) {
        redisReply *r;
        if (sd->evals) {
            char src[64];
            snprintf(src, sizeof src, "return %ld", i); /* a script never seen before */
            r = redisCommand(raw, "EVAL %s 0", src);
        } else {
            r = redisCommand(raw, "SCRIPT FLUSH");
        }
        if (!r || r->type == REDIS_REPLY_ERROR) {
            snprintf(sd->err, sizeof sd->err, "%s", r ? r->str : raw->errstr);
            if (r)
                freeReplyObject(r);
            break;
        }
        freeReplyObject(r);
        atomic_fetch_add(&sd->done, 1);
        if (!sd->evals)
            check_sleep_ms(100);
    }
    if (raw)
        redisFree(raw);
    return NULL;
}

/* Runs round(x, i), i = 0, 1, ..., until MIXED_OPS operations (and at
 * least min_side of the side's work) or MIXED_MS, or until one failed. */
static inline void churn_run(const struct op_log *log, bool (*round)(void *x, long i), void *x,
                             struct side *sd, long min_side)
{
    int64_t until = check_now_ms() + MIXED_MS;
    for (long i = 0; check_now_ms() < until; i++) {
        if (log->ops >= MIXED_OPS && atomic_load(&sd->done) >= min_side)
            break;
        if (!round(x, i))
            break;
    }
}

#endif
