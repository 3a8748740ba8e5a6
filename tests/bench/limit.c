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
#define REL_FACTOR 16
#define POPULATE_CHUNK 20000

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

static int bench_once(struct bench *b, int conns, long n, const char *keyspace,
                      const struct cmd_vec *cv, struct bm_result *res)
{
    char port[16], c[16], nreq[24];
    snprintf(port, sizeof port, "%d", b->srv[0].port);
    snprintf(c, sizeof c, "%d", conns);
    snprintf(nreq, sizeof nreq, "%ld", n);
    const char *argv[16 + CMD_MAX_ARGS + 3] = {"redis-benchmark", "-h", "127.0.0.1", "-p", port,
                                               "-c", c, "-n", nreq, "-r", keyspace, "--csv"};
    int k = 12;
    for (int i = 0; i < cv->argc; i++)
        argv[k++] = cv->argv[i];
    argv[k] = NULL;
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
static int bench_cmd(struct bench *b, int conns, long n, const char *keyspace,
                     const struct cmd_vec *cv, struct bm_result *res)
{
    if (bench_once(b, conns, n, keyspace, cv, res) == 0)
        return 0;
    note("running redis-benchmark once more");
    return bench_once(b, conns, n, keyspace, cv, res);
}

static long long cmdstat_calls(struct bench *b, const char *cmd)
{
    redisReply *r = rs_cmd(&b->srv[0], "INFO commandstats");
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

/* Splits key i of sc, for lock names "bench:lim:<n>", into what goes before
 * and after <n>. */
static int key_parts(const struct script_cmd *sc, int i, char *pre, char *post, size_t size)
{
    char buf[2 * CMD_ARG_LEN];
    if (cmd_arg(sc, i, "bench:lim:#", "", buf, sizeof buf) < 0)
        return -1;
    char *h = strchr(buf, '#');
    if (!h || strlen(buf) >= size)
        return -1;
    *h = '\0';
    snprintf(pre, size, "%s", buf);
    snprintf(post, size, "%s", h + 1);
    return 0;
}

/* M held names bench:lim:000000000000.. as an acquire with attempt id `att`
 * leaves them: the lock's hash (field = 1) and its attempts hash (epoch
 * e = att, and att's record "-2|att|field": a new hold, taken in that epoch).
 * Long PTTLs, so that nothing expires during the run. */
static int populate(struct bench *b, long m, const struct cycle_cmds *cc, const char *att)
{
    static const char *script =
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do\n"
        "  local n = string.format('%012d', i)\n"
        "  local k = ARGV[5] .. n .. ARGV[6]\n"
        "  local a = ARGV[7] .. n .. ARGV[8]\n"
        "  redis.call('hset', k, ARGV[3], 1)\n"
        "  redis.call('pexpire', k, ARGV[4])\n"
        "  redis.call('hset', a, 'e', ARGV[9], ARGV[9], '-2|' .. ARGV[9] .. '|' .. ARGV[3])\n"
        "  redis.call('pexpire', a, ARGV[4])\n"
        "end\n"
        "return 1\n";
    char kpre[CMD_ARG_LEN], kpost[CMD_ARG_LEN], apre[CMD_ARG_LEN], apost[CMD_ARG_LEN];
    char field[2 * CMD_ARG_LEN];
    if (key_parts(&cc->release, 0, kpre, kpost, sizeof kpre) != 0 ||
        key_parts(&cc->release, 2, apre, apost, sizeof apre) != 0 ||
        cmd_arg(&cc->release, cc->release.numkeys + 1, "", "", field, sizeof field) < 0)
        return -1;
    redisContext *ctx = rs_connect(&b->srv[0]);
    if (!ctx)
        return -1;
    /* A chunk's script can outlast rs_connect's 2 s on a busy VM while the
     * keyspace grows (it did at 100,000 names a chunk): small chunks, 30 s. */
    redisSetTimeout(ctx, (struct timeval){30, 0});
    int rc = 0;
    for (long from = 0; from < m && rc == 0; from += POPULATE_CHUNK) {
        long to = from + POPULATE_CHUNK < m ? from + POPULATE_CHUNK - 1 : m - 1;
        char sfrom[24], sto[24];
        snprintf(sfrom, sizeof sfrom, "%ld", from);
        snprintf(sto, sizeof sto, "%ld", to);
        const char *argv[] = {"EVAL", script, "0", sfrom, sto, field, "600000",
                              kpre, kpost, apre, apost, att};
        redisReply *r = redisCommandArgv(ctx, 12, argv, NULL);
        rc = r && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
        if (rc && r && r->type == REDIS_REPLY_ERROR)
            note("populate: %s", r->str);
        if (r)
            freeReplyObject(r);
    }
    redisFree(ctx);
    return rc;
}

/* How many attempts hashes of the M lost their epoch: each one a release
 * that went the whole way on the attempts path (nothing else removes "e"). */
static long long epochs_gone(struct bench *b, long m, const struct cycle_cmds *cc)
{
    static const char *script =
        "local c = 0\n"
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do\n"
        "  if redis.call('hexists', ARGV[3] .. string.format('%012d', i) .. ARGV[4], 'e') == 0 then\n"
        "    c = c + 1\n"
        "  end\n"
        "end\n"
        "return c\n";
    char apre[CMD_ARG_LEN], apost[CMD_ARG_LEN];
    if (key_parts(&cc->release, 2, apre, apost, sizeof apre) != 0)
        return -1;
    redisContext *ctx = rs_connect(&b->srv[0]);
    if (!ctx)
        return -1;
    redisSetTimeout(ctx, (struct timeval){30, 0});
    long long total = 0;
    for (long from = 0; from < m && total >= 0; from += POPULATE_CHUNK) {
        long to = from + POPULATE_CHUNK < m ? from + POPULATE_CHUNK - 1 : m - 1;
        char sfrom[24], sto[24];
        snprintf(sfrom, sizeof sfrom, "%ld", from);
        snprintf(sto, sizeof sto, "%ld", to);
        const char *argv[] = {"EVAL", script, "0", sfrom, sto, apre, apost};
        redisReply *r = redisCommandArgv(ctx, 7, argv, NULL);
        total = r && r->type == REDIS_REPLY_INTEGER ? total + r->integer : -1;
        if (r)
            freeReplyObject(r);
    }
    redisFree(ctx);
    return total;
}

void run_limit(struct bench *b, const struct cycle_cmds *cc, int conns)
{
    char row[32];
    snprintf(row, sizeof row, "limit.c%d", conns);
    struct bm_result cal, acq, rel;
    const char *why = "redis-benchmark failed";

    /* acquire: every __rand_int__ gets its own random value, so lock, attempts
     * hash and attempt id are three independent draws out of 10^9: all new,
     * as for a free name (fencing off: no token counter is named). */
    static struct cmd_vec acq_cv, rel_cv;
    char att[160];
    snprintf(att, sizeof att, "%s:__rand_int__", cc->uuid);
    if (cmd_build(&cc->acquire, "bench:lim:__rand_int__", att, &acq_cv) != 0)
        goto fail;
    /* release: lock and attempts hash drawn independently out of M populated
     * ones; each attempts hash holds the record of the same attempt id. */
    snprintf(att, sizeof att, "%s:b0000001", cc->uuid);
    if (cmd_build(&cc->release, "bench:lim:__rand_int__", att, &rel_cv) != 0)
        goto fail;

    /* Calibrate, then size each run to take about b->seconds. */
    flush_nodes(b);
    if (bench_cmd(b, conns, conns == 1 ? 3000 : 30000, ACQ_KEYSPACE, &acq_cv, &cal) != 0)
        goto fail;
    long n = (long)(cal.rps * b->seconds);
    if (n < 1000)
        n = 1000;
    flush_nodes(b);
    int64_t srv0 = pid_cpu_ns(b->srv[0].pid);
    long long hset0 = cmdstat_calls(b, "hset");
    if (bench_cmd(b, conns, n, ACQ_KEYSPACE, &acq_cv, &acq) != 0)
        goto fail;
    int64_t srv_acq = pid_cpu_ns(b->srv[0].pid) - srv0;
    /* A granted new hold runs 2 HSETs (the lock's field; "e" and its record
     * in one). */
    long long granted = (cmdstat_calls(b, "hset") - hset0) / 2;

    long nr = (long)(acq.rps * b->seconds);
    if (nr < 1000)
        nr = 1000;
    long m = nr * REL_FACTOR;
    char keyspace[24];
    snprintf(keyspace, sizeof keyspace, "%ld", m);
    flush_nodes(b);
    why = "populating the held names failed";
    if (populate(b, m, cc, att) != 0)
        goto fail;
    why = "redis-benchmark failed";
    long long pub0 = cmdstat_calls(b, "publish");
    srv0 = pid_cpu_ns(b->srv[0].pid);
    if (bench_cmd(b, conns, nr, keyspace, &rel_cv, &rel) != 0)
        goto fail;
    int64_t srv_rel = pid_cpu_ns(b->srv[0].pid) - srv0;
    long long freed = cmdstat_calls(b, "publish") - pub0;
    long long full = epochs_gone(b, m, cc);
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
    row_num(b, "acquire_new_pct", 100.0 * (double)granted / (double)n);
    /* full: freed on the attempts path, as a real cycle's release;
     * legacy: freed on the path for a missing attempts hash. */
    if (full >= 0) {
        row_num(b, "release_full_pct", 100.0 * (double)full / (double)nr);
        row_num(b, "release_legacy_pct", 100.0 * (double)(freed - full) / (double)nr);
    }
    row_num(b, "client_cpu_pct", 100.0 * (double)(acq.cpu_ns + rel.cpu_ns) / wall);
    row_num(b, "server_cpu_pct", 100.0 * (double)(srv_acq + srv_rel) / wall);
    row_end(b);
    return;
fail:
    flush_nodes(b);
    row_begin(b, row);
    row_str(b, "error", why);
    row_end(b);
}
