/*
 * limit.c - what Redis itself can do with a lock cycle's commands.
 *
 * redis-benchmark runs one command per test, and a cycle is two: the acquire
 * script, then the release script, each waiting for its reply. So each is
 * measured alone, doing the work it does in a real cycle, and the two rates
 * combine as one command after the other: cycles/s = 1 / (1/a + 1/r), on the
 * same number of connections. (For one connection that is the sum of the two
 * round trips; for 16 it is the server's time per cycle, since the server
 * runs one command at a time.)
 *
 *   acquire: EVALSHA <acquire> on lock names bench:lim:__rand_int__ out of
 *     10^9, so practically every call finds the name free and takes the
 *     "new hold" path (EXISTS, HINCRBY, PEXPIRE, INCR), as an uncontended
 *     cycle does.
 *   release: EVALSHA <release> on names out of a set of M held names made
 *     beforehand (HSET field 1 + PEXPIRE, as acquire leaves them), M = 8x the
 *     calls, so about 94% of calls find a hold and take the full path
 *     (HEXISTS, HINCRBY, DEL, PUBLISH); the rest find it gone and return
 *     early, which flatters the limit a little (never us). The share that did
 *     the full work is counted (keys gone / calls) and reported.
 *
 * The commands' other arguments (script SHAs, token key, channel, lease,
 * owner field) are the ones captured from the library (capture.c).
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define ACQ_KEYSPACE "1000000000"
#define REL_FACTOR 8
#define POPULATE_CHUNK 200000

struct bm_result {
    double rps, p50_ms, p99_ms;
    int64_t cpu_ns, wall_ns;
};

/* Reads redis-benchmark's --csv line: "name","rps","avg","min","p50","p95","p99","max". */
static int parse_csv(const char *out, struct bm_result *res)
{
    const char *line = strstr(out, "\n\"");
    if (!line)
        return -1;
    const char *p = strstr(line + 2, "\",\"");
    if (!p)
        return -1;
    double avg, min, p95;
    if (sscanf(p, "\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", &res->rps, &avg, &min,
               &res->p50_ms, &p95, &res->p99_ms) != 6)
        return -1;
    return 0;
}

static int bench_once(struct bench *b, int conns, long n, const char *keyspace, const char *sha,
                      const char *key2, const struct cycle_cmds *cc, struct bm_result *res)
{
    char port[16], c[16], nreq[24];
    snprintf(port, sizeof port, "%d", b->srv[0].port);
    snprintf(c, sizeof c, "%d", conns);
    snprintf(nreq, sizeof nreq, "%ld", n);
    /* The acquire's further ARGV go last, as the library sends them. */
    const char *extra = sha == cc->acquire_sha && cc->acquire_extra[0] ? cc->acquire_extra : NULL;
    const char *argv[] = {"redis-benchmark", "-h", "127.0.0.1", "-p", port, "-c", c, "-n", nreq,
                          "-r", keyspace, "--csv", "EVALSHA", sha, "2", "bench:lim:__rand_int__",
                          key2, cc->lease, cc->field, extra, NULL};
    char *out = NULL;
    memset(res, 0, sizeof *res);
    int64_t t0 = now_ns();
    /* Bounded: a run is sized for b->seconds; 60 s more is a hang. */
    int st = run_child(argv, NULL, b->seconds * 4 + 60, &out, NULL, &res->cpu_ns);
    res->wall_ns = now_ns() - t0;
    int rc = st == 0 && parse_csv(out, res) == 0 && res->rps > 0 ? 0 : -1;
    if (rc != 0)
        note("redis-benchmark failed (status %d): %.300s", st, out ? out : "");
    free(out);
    return rc;
}

/* One retry: a failed run (the machine is shared) is run again, never guessed. */
static int bench_cmd(struct bench *b, int conns, long n, const char *keyspace, const char *sha,
                     const char *key2, const struct cycle_cmds *cc, struct bm_result *res)
{
    if (bench_once(b, conns, n, keyspace, sha, key2, cc, res) == 0)
        return 0;
    note("running redis-benchmark once more");
    return bench_once(b, conns, n, keyspace, sha, key2, cc, res);
}

/* M held names bench:lim:000000000000.., as the acquire script leaves them. */
static int populate(struct bench *b, long m, const struct cycle_cmds *cc)
{
    static const char *script =
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do\n"
        "  local k = 'bench:lim:' .. string.format('%012d', i)\n"
        "  redis.call('hset', k, ARGV[3], 1)\n"
        "  redis.call('pexpire', k, ARGV[4])\n"
        "end\n"
        "return 1\n";
    redisContext *ctx = rs_connect(&b->srv[0]);
    if (!ctx)
        return -1;
    int rc = 0;
    for (long from = 0; from < m && rc == 0; from += POPULATE_CHUNK) {
        long to = from + POPULATE_CHUNK < m ? from + POPULATE_CHUNK - 1 : m - 1;
        redisReply *r = redisCommand(ctx, "EVAL %s 0 %ld %ld %s %s", script, from, to, cc->field,
                                     "600000");
        rc = r && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
        if (r)
            freeReplyObject(r);
    }
    redisFree(ctx);
    return rc;
}

static long long dbsize(struct bench *b)
{
    return rs_int(&b->srv[0], "DBSIZE");
}

void run_limit(struct bench *b, const struct cycle_cmds *cc, int conns)
{
    char row[32];
    snprintf(row, sizeof row, "limit.c%d", conns);
    struct bm_result cal, acq, rel;

    /* Calibrate, then size each run to take about b->seconds. */
    flush_nodes(b);
    if (bench_cmd(b, conns, conns == 1 ? 3000 : 30000, ACQ_KEYSPACE, cc->acquire_sha,
                  cc->token_key, cc, &cal) != 0)
        goto fail;
    long n = (long)(cal.rps * b->seconds);
    if (n < 1000)
        n = 1000;
    flush_nodes(b);
    int64_t srv0 = pid_cpu_ns(b->srv[0].pid);
    if (bench_cmd(b, conns, n, ACQ_KEYSPACE, cc->acquire_sha, cc->token_key, cc, &acq) != 0)
        goto fail;
    int64_t srv_acq = pid_cpu_ns(b->srv[0].pid) - srv0;

    long nr = (long)(acq.rps * b->seconds);
    if (nr < 1000)
        nr = 1000;
    long m = nr * REL_FACTOR;
    char keyspace[24];
    snprintf(keyspace, sizeof keyspace, "%ld", m);
    flush_nodes(b);
    if (populate(b, m, cc) != 0)
        goto fail;
    long long before = dbsize(b);
    srv0 = pid_cpu_ns(b->srv[0].pid);
    if (bench_cmd(b, conns, nr, keyspace, cc->release_sha, cc->channel, cc, &rel) != 0)
        goto fail;
    int64_t srv_rel = pid_cpu_ns(b->srv[0].pid) - srv0;
    long long full = before - dbsize(b);
    flush_nodes(b);

    double wall = (double)(acq.wall_ns + rel.wall_ns);
    row_begin(b, row);
    row_num(b, "conns", conns);
    row_num(b, "cycles", 1.0 / (1.0 / acq.rps + 1.0 / rel.rps));
    row_num(b, "acquire_rps", acq.rps);
    row_num(b, "release_rps", rel.rps);
    /* A cycle's latency, as the sum of its two commands' (an approximation). */
    row_num(b, "p50_us", (acq.p50_ms + rel.p50_ms) * 1000);
    row_num(b, "p99_us", (acq.p99_ms + rel.p99_ms) * 1000);
    row_num(b, "release_full_pct", 100.0 * (double)full / (double)nr);
    row_num(b, "client_cpu_pct", 100.0 * (double)(acq.cpu_ns + rel.cpu_ns) / wall);
    row_num(b, "server_cpu_pct", 100.0 * (double)(srv_acq + srv_rel) / wall);
    row_end(b);
    return;
fail:
    flush_nodes(b);
    row_begin(b, row);
    row_str(b, "error", "redis-benchmark failed");
    row_end(b);
}
