/*
 * fanout.c - the floor under Redlock on this machine: a bare hiredis client
 * doing a lock cycle over N nodes.
 *
 * It writes the acquire script (the captured EVALSHA) to all N nodes, then
 * reads the N replies; then the same with the release script. No quorum
 * logic, no threads, no library: what N nodes cost on these cores, where the
 * N redis-server processes share the CPUs with the client. The ratio of its
 * N-node p50 to its 1-node p50 is the best a Redlock client can do here.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SAMPLES (4u << 20)

static int send_all(redisContext **ctx, int n, const char *sha, const char *key2,
                    const struct cycle_cmds *cc)
{
    const char *extra = sha == cc->acquire_sha ? cc->acquire_extra : "";
    for (int i = 0; i < n; i++) {
        int rc = extra[0] ? redisAppendCommand(ctx[i], "EVALSHA %s 2 bench:fan %s %s %s %s", sha,
                                               key2, cc->lease, cc->field, extra)
                          : redisAppendCommand(ctx[i], "EVALSHA %s 2 bench:fan %s %s %s", sha,
                                               key2, cc->lease, cc->field);
        if (rc != REDIS_OK)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        int done = 0;
        /* Bounded: a few small commands always fit the socket buffer. */
        for (int k = 0; k < 100 && !done; k++)
            if (redisBufferWrite(ctx[i], &done) != REDIS_OK)
                return -1;
    }
    for (int i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(ctx[i], &r) != REDIS_OK || !r)
            return -1;
        int err = ((redisReply *)r)->type == REDIS_REPLY_ERROR;
        freeReplyObject(r);
        if (err)
            return -1;
    }
    return 0;
}

void run_fanout_limit(struct bench *b, const struct cycle_cmds *cc, int n)
{
    redisContext *ctx[BENCH_NODES] = {NULL};
    struct samples s;
    samples_init(&s, SAMPLES);
    char row[32];
    snprintf(row, sizeof row, "limit.fan%d", n);
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok = ok && (ctx[i] = rs_connect(&b->srv[i])) != NULL;
    for (int i = 0; ok && i < 50; i++) /* warm-up */
        ok = send_all(ctx, n, cc->acquire_sha, cc->token_key, cc) == 0 &&
             send_all(ctx, n, cc->release_sha, cc->channel, cc) == 0;
    struct cpu_window cpu;
    cpu_begin(b, &cpu, n);
    int64_t t0 = now_ns(), end = t0 + (int64_t)(b->seconds * 1e9), t = t0;
    for (long i = 0; ok && i < 100000000L && t < end; i++) {
        ok = send_all(ctx, n, cc->acquire_sha, cc->token_key, cc) == 0 &&
             send_all(ctx, n, cc->release_sha, cc->channel, cc) == 0;
        int64_t t1 = now_ns();
        samples_add(&s, t1 - t);
        t = t1;
    }
    row_begin(b, row);
    if (ok) {
        row_num(b, "nodes", n);
        row_num(b, "cycles", (double)s.total / ((double)(t - t0) / 1e9));
        row_num(b, "p50_us", samples_quantile_us(&s, 0.5));
        row_num(b, "p99_us", samples_quantile_us(&s, 0.99));
        cpu_end(b, &cpu);
    } else {
        row_str(b, "error", "a node refused the captured scripts");
    }
    row_end(b);
    samples_free(&s);
    for (int i = 0; i < n; i++)
        if (ctx[i])
            redisFree(ctx[i]);
}
