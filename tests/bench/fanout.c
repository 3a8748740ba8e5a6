/*
 * fanout.c - the floor under Redlock on this machine: a bare hiredis client
 * doing a lock cycle over N nodes.
 *
 * It writes the acquire script (the captured EVALSHA, with a new attempt id
 * per cycle) to all N nodes, then reads the N replies (each must grant);
 * then the same with the release script naming that attempt (each must free
 * the lock). Building the two argument vectors is inside the timed cycle, as
 * the library's is. No quorum
 * logic, no threads, no library: what N nodes cost on these cores, where the
 * N redis-server processes share the CPUs with the client. The ratio of its
 * N-node p50 to its 1-node p50 is the best a Redlock client can do here.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SAMPLES (4u << 20)

/* One script call on all n nodes: written to all, then the n replies read.
 * want: the reply's (first) integer every node must give. */
static int send_all(redisContext **ctx, int n, struct cmd_vec *cv, long long want)
{
    for (int i = 0; i < n; i++)
        if (redisAppendCommandArgv(ctx[i], cv->argc, cv->argv, cv->lens) != REDIS_OK)
            return -1;
    for (int i = 0; i < n; i++) {
        int done = 0;
        /* Bounded: a few small commands always fit the socket buffer. */
        for (int k = 0; k < 100 && !done; k++)
            if (redisBufferWrite(ctx[i], &done) != REDIS_OK)
                return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        void *v = NULL;
        if (redisGetReply(ctx[i], &v) != REDIS_OK || !v)
            return -1;
        redisReply *r = v;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0)
            r = r->element[0];
        if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
            rc = -1;
        freeReplyObject(v);
    }
    return rc;
}

/* A cycle as the library's: an acquire with a new attempt id (granted: 1),
 * then the release of that level (freed: 0). */
static int cycle(redisContext **ctx, int n, const struct cycle_cmds *cc, const char *name,
                 unsigned long long *seq, struct cmd_vec *acq, struct cmd_vec *rel)
{
    char id[128];
    snprintf(id, sizeof id, "%s:%llx", cc->uuid, ++*seq);
    if (cmd_build(&cc->acquire, name, id, acq) != 0 ||
        cmd_build(&cc->release, name, id, rel) != 0)
        return -1;
    return send_all(ctx, n, acq, 1) == 0 && send_all(ctx, n, rel, 0) == 0 ? 0 : -1;
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
    /* Attempt ids never repeat within the process (a repeated id would find
     * its own record and do nothing); the servers are flushed between
     * workloads anyway. Well above the capturing client's few ids. */
    static unsigned long long seq = 0x100000;
    static struct cmd_vec acq, rel;
    for (int i = 0; ok && i < 50; i++) /* warm-up */
        ok = cycle(ctx, n, cc, "bench:fan", &seq, &acq, &rel) == 0;
    struct cpu_window cpu;
    cpu_begin(b, &cpu, n);
    int64_t t0 = now_ns(), end = t0 + (int64_t)(b->seconds * 1e9), t = t0;
    for (long i = 0; ok && i < 100000000L && t < end; i++) {
        ok = cycle(ctx, n, cc, "bench:fan", &seq, &acq, &rel) == 0;
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
        row_str(b, "error", "a node refused or did not grant the captured scripts");
    }
    row_end(b);
    samples_free(&s);
    for (int i = 0; i < n; i++)
        if (ctx[i])
            redisFree(ctx[i]);
}
