/*
 * main.c - rlc_bench: starts its own redis-server nodes, runs every workload
 * `repeats` times (the repeats interleaved, so that a slow minute on the
 * machine spreads over all workloads instead of spoiling one), and prints
 * one JSON row per workload and repeat. tests/bench/run.sh is the one
 * command; it builds this, installs the Node peer, and prints the table.
 *
 *   rlc_bench [--seconds S] [--repeats N] [--quick] [--wd-seconds S]
 *             [--wd-locks N] [--node-dir DIR --node-js FILE]
 *             [--py-script FILE --py-path DIR] [--only NAME] [--out FILE]
 *             [--log FILE] [--pools N,N,...]
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "redlockc.h"

static void usage(void)
{
    fprintf(stderr, "usage: rlc_bench [--seconds S] [--repeats N] [--quick] [--wd-seconds S]\n"
                    "                 [--wd-locks N] [--node-dir DIR --node-js FILE]\n"
                    "                 [--py-script FILE --py-path DIR] [--only NAME]\n"
                    "                 [--out FILE] [--log FILE] [--pools N,N,...]\n");
    exit(2);
}

/* "2,4,8" -> {2, 4, 8}; "" -> none. */
static int parse_pools(const char *v, int *pools)
{
    int n = 0;
    for (const char *p = v; *p && n < MAX_POOLS; p++) {
        int k = atoi(p);
        if (k < 1 || k > 64)
            usage();
        pools[n++] = k;
        p = strchr(p, ',');
        if (!p)
            break;
    }
    return n;
}

static void parse_args(struct bench *b, int argc, char **argv)
{
    b->seconds = 3;
    b->repeats = 3;
    b->wd_seconds = 30;
    b->wd_locks = 10000;
    b->out = stdout;
    /* 16 threads again with pool_size 2 and 4, beside the default (1). */
    b->pools[0] = 2;
    b->pools[1] = 4;
    b->npools = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            /* CI smoke: one repeat, short windows (about 30 s in all). */
            b->seconds = 1;
            b->repeats = 1;
            b->wd_seconds = 6;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--seconds") == 0)
            b->seconds = atof(v);
        else if (strcmp(a, "--repeats") == 0)
            b->repeats = atoi(v);
        else if (strcmp(a, "--wd-seconds") == 0)
            b->wd_seconds = atof(v);
        else if (strcmp(a, "--wd-locks") == 0)
            b->wd_locks = atoi(v);
        else if (strcmp(a, "--node-dir") == 0)
            b->node_dir = *v ? v : NULL;
        else if (strcmp(a, "--node-js") == 0)
            b->node_js = v;
        else if (strcmp(a, "--py-script") == 0)
            b->py_script = v;
        else if (strcmp(a, "--py-path") == 0)
            b->py_path = v;
        else if (strcmp(a, "--pools") == 0)
            b->npools = parse_pools(v, b->pools);
        else if (strcmp(a, "--only") == 0)
            b->only = v;
        else if (strcmp(a, "--out") == 0)
            b->out = fopen(v, "w");
        else if (strcmp(a, "--log") == 0)
            b->log = fopen(v, "w");
        else
            usage();
        if (!b->out || (strcmp(a, "--log") == 0 && !b->log)) {
            fprintf(stderr, "rlc_bench: cannot write %s\n", v);
            exit(2);
        }
    }
    if (b->seconds <= 0 || b->seconds > 600 || b->repeats < 1 || b->repeats > 20 ||
        b->wd_seconds <= 0 || b->wd_seconds > 600 || b->wd_locks < 1 || b->wd_locks > 1000000)
        usage();
    if (b->node_dir && !b->node_js)
        usage();
}

void flush_nodes(struct bench *b)
{
    /* The limit rows leave a great many keys, which FLUSHALL SYNC takes more
     * than rs_cmd's 2 s to free: waiting less left the server busy under
     * the next workload (the bare fan-out row timed out in every full run). */
    for (int i = 0; i < BENCH_NODES; i++) {
        redisContext *c = rs_connect(&b->srv[i]);
        if (!c)
            continue;
        redisSetTimeout(c, (struct timeval){120, 0});
        redisReply *r = redisCommand(c, "FLUSHALL SYNC");
        if (r)
            freeReplyObject(r);
        redisFree(c);
    }
}

/* --only "a,b": the workloads whose names contain a or b. */
static int wanted(const struct bench *b, const char *name)
{
    if (!b->only)
        return 1;
    for (const char *p = b->only; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        size_t len = strcspn(p, ",");
        for (const char *q = name; len && *q; q++)
            if (strncmp(q, p, len) == 0)
                return 1;
    }
    return 0;
}

static void meta_row(struct bench *b, const struct cycle_cmds *cc, int captured)
{
    row_begin(b, "meta");
    row_num(b, "seconds", b->seconds);
    row_num(b, "repeats", b->repeats);
    row_num(b, "wd_seconds", b->wd_seconds);
    row_num(b, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    row_str(b, "library", rlc_version());
    Dl_info dl; /* which libredlockc.so was measured (LD_LIBRARY_PATH may change it) */
    if (dladdr((void *)rlc_version, &dl) && dl.dli_fname)
        row_str(b, "library_path", dl.dli_fname);
    redisReply *r = rs_cmd(&b->srv[0], "INFO server");
    const char *v = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
    char ver[32] = "?";
    if (v)
        sscanf(v, "redis_version:%31s", ver);
    if (r)
        freeReplyObject(r);
    row_str(b, "redis", ver);
    if (captured) {
        row_str(b, "acquire_sha", cc->acquire.sha);
        row_str(b, "release_sha", cc->release.sha);
    }
    row_end(b);
}

int main(int argc, char **argv)
{
    static struct bench b;
    parse_args(&b, argc, argv);
    size_t len = 0;
    for (int i = 0; i < BENCH_NODES; i++) {
        if (rs_start(&b.srv[i], NULL) != 0) {
            note("could not start redis-server %d", i + 1);
            for (int j = 0; j < i; j++)
                rs_stop(&b.srv[j]);
            return 1;
        }
        len += (size_t)snprintf(b.uris + len, sizeof b.uris - len, "%s%s", i ? "," : "",
                                b.srv[i].uri);
    }
    struct cycle_cmds cc;
    int captured = capture_cycle(&b, &cc) == 0;
    if (!captured)
        note("could not capture a lock cycle's commands: the limit rows will be missing");
    meta_row(&b, &cc, captured);

    for (b.rep = 1; b.rep <= b.repeats; b.rep++) {
        note("repeat %d of %d", b.rep, b.repeats);
        if (captured && wanted(&b, "limit.c1"))
            run_limit(&b, &cc, 1);
        if (captured && wanted(&b, "limit.c16"))
            run_limit(&b, &cc, 16);
        if (captured && wanted(&b, "limit.fan1"))
            run_fanout_limit(&b, &cc, 1);
        if (captured && wanted(&b, "limit.fan5"))
            run_fanout_limit(&b, &cc, 5);
        if (wanted(&b, "c.t1"))
            run_cycles(&b, "c.t1", 1, 1, NULL);
        if (wanted(&b, "c.t16"))
            run_cycles(&b, "c.t16", 1, 16, NULL);
        for (int i = 0; i < b.npools; i++) {
            char row[32], opts[32];
            snprintf(row, sizeof row, "c.t16.pool%d", b.pools[i]);
            snprintf(opts, sizeof opts, "pool_size=%d", b.pools[i]);
            if (wanted(&b, row))
                run_cycles(&b, row, 1, 16, opts);
        }
        if (wanted(&b, "c.redlock3"))
            run_cycles(&b, "c.redlock3", 3, 1, NULL);
        if (wanted(&b, "c.redlock5"))
            run_cycles(&b, "c.redlock5", 5, 1, NULL);
        /* PING right before the hand-off it is the yardstick of. */
        if (wanted(&b, "ping") || wanted(&b, "c.handoff"))
            run_ping(&b);
        if (wanted(&b, "c.handoff"))
            run_handoff(&b, 8);
        flush_nodes(&b);
        if (wanted(&b, "node"))
            run_node(&b);
        flush_nodes(&b);
        if (wanted(&b, "python"))
            run_python(&b);
        if (wanted(&b, "c.watchdog"))
            run_watchdog(&b);
        flush_nodes(&b);
    }
    for (int i = 0; i < BENCH_NODES; i++)
        rs_stop(&b.srv[i]);
    if (b.out != stdout)
        fclose(b.out);
    if (b.log)
        fclose(b.log);
    return 0;
}
