/*
 * test_scripts_loaded.c - the lock's scripts are loaded with SCRIPT LOAD
 * (on every command connection, and again after NOSCRIPT), never left to
 * EVAL's cache, which Redis 7.4+ and Valkey 8 evict beyond 500 scripts: a
 * server that flushes or evicts scripts under load costs no failed lock
 * operation. Real servers (RLC_SERVER=valkey-server runs them on Valkey);
 * linked with the library's objects to name the scripts (scripts.h).
 */
#include "fixture.h"
#include "script_churn.h"
#include "scripts.h"

/* How many of the engine's scripts s has loaded (SCRIPT EXISTS), of *n. */
static int scripts_on(const struct redis_server *s, int *n)
{
    const struct script *all[SCRIPTS_ENGINE_MAX];
    *n = (int)scripts_engine(all, false, false);
    int there = 0;
    for (int i = 0; i < *n; i++) {
        redisReply *r = rs_cmd(s, "SCRIPT EXISTS %s", all[i]->sha);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 1)
            there++;
        else
            fprintf(stderr, "script %s is not loaded\n", all[i]->name);
        if (r)
            freeReplyObject(r);
    }
    return there;
}

/* ---- a mix of the lock's operations, each checked ---------------------------- */

struct mix {
    rlc_client *c;
    rlc_lock *a, *a2, *b; /* a and a2: one name, owners 1 and 2; b: a second name */
    rlc_multilock *m;
    struct op_log log;
};

static int mix_open(struct mix *x, const char *uri, const char *prefix)
{
    memset(x, 0, sizeof *x);
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s:a", prefix);
    snprintf(n2, sizeof n2, "%s:b", prefix);
    const char *names[2] = {n1, n2};
    x->c = client(uri, "watchdog_timeout_ms=300");
    if (!x->c)
        return -1;
    x->a = lock(x->c, n1, 1);
    x->a2 = lock(x->c, n1, 2);
    x->b = lock(x->c, n2, 1);
    if (!x->a || !x->a2 || !x->b ||
        rlc_multilock_new(x->c, names, 2, 3, &x->m) != RLC_OK)
        return -1;
    return 0;
}

static void mix_close(struct mix *x)
{
    rlc_multilock_free(x->m);
    rlc_lock_free(x->a);
    rlc_lock_free(x->a2);
    rlc_lock_free(x->b);
    rlc_client_free(x->c);
}

static bool expect(struct mix *x, const char *what, int rc, int want)
{
    return op_expect(&x->log, what, rc, want);
}

/* One round of each kind: a new hold, a nested level and an extend, a
 * contended try (refused, the holder's lease kept), a multi-lock, a
 * watchdog hold. False once one failed. */
static bool mix_round(void *arg, long i)
{
    struct mix *x = arg;
    switch (i % 5) {
    case 0:
        return expect(x, "acquire", rlc_lock_acquire(x->a, 0, 10000), RLC_OK) &&
               expect(x, "release", rlc_lock_release(x->a), RLC_OK);
    case 1:
        return expect(x, "acquire", rlc_lock_acquire(x->a, 0, 10000), RLC_OK) &&
               expect(x, "nested acquire", rlc_lock_acquire(x->a, 0, 10000), RLC_OK) &&
               expect(x, "extend", rlc_lock_extend(x->a, 20000), RLC_OK) &&
               expect(x, "inner release", rlc_lock_release(x->a), RLC_OK) &&
               expect(x, "outer release", rlc_lock_release(x->a), RLC_OK);
    case 2:
        return expect(x, "acquire", rlc_lock_acquire(x->a, 0, 10000), RLC_OK) &&
               expect(x, "contended try", rlc_lock_acquire(x->a2, 0, 10000),
                      RLC_NOT_ACQUIRED) &&
               expect(x, "release", rlc_lock_release(x->a), RLC_OK);
    case 3:
        return expect(x, "multi acquire", rlc_multilock_acquire(x->m, 0, 10000), RLC_OK) &&
               expect(x, "multi release", rlc_multilock_release(x->m), RLC_OK);
    default:
        return expect(x, "watchdog acquire", rlc_lock_acquire(x->b, 0, -1), RLC_OK) &&
               expect(x, "watchdog release", rlc_lock_release(x->b), RLC_OK);
    }
}

/* ---- the cases ---------------------------------------------------------------- */

/* Before: the first call of each script on a server was answered NOSCRIPT
 * (then sent as EVAL), so every client's first operations cost a round
 * trip each and left the scripts in EVAL's evictable cache. */
TEST(no_operation_is_answered_noscript)
{
    START(s);
    struct mix x;
    long long before = noscripts(&s);
    CHECK(mix_open(&x, s.uri, "sl") == 0, "client and locks");
    for (long i = 0; i < 50; i++)
        CHECK(mix_round(&x, i), "%s", x.log.failed);
    /* a watchdog hold renewed (every 100 ms of its 300 ms lease) */
    uint64_t m[RLC_M_RENEWALS + 1] = {0};
    CHECK_RC(rlc_lock_acquire(x.b, 0, -1), RLC_OK);
    CHECK(WAIT_UNTIL(rlc_client_metrics(x.c, m, RLC_M_RENEWALS + 1) > 0 &&
                         m[RLC_M_RENEWALS] >= 2,
                     5000),
          "renewals: %llu", (unsigned long long)m[RLC_M_RENEWALS]);
    CHECK_RC(rlc_lock_release(x.b), RLC_OK);
    CHECK_RC(rlc_lock_force_release(x.b), RLC_OK);
    CHECK(noscripts(&s) - before == 0, "NOSCRIPT answers: %lld", noscripts(&s) - before);
    int n, there = scripts_on(&s, &n);
    CHECK(there == n, "%d of the %d scripts loaded", there, n);
done:
    mix_close(&x);
    rs_stop(&s);
}

/* Before: the operations went through (NOSCRIPT, then EVAL), but what
 * stayed on the server was the few scripts last sent as EVAL, in EVAL's
 * evictable cache: the others were not loaded after the run. */
TEST(a_flush_every_100_ms_fails_no_operation_and_leaves_the_scripts_loaded)
{
    START(s);
    struct mix x;
    struct side sd = {.s = &s, .evals = false};
    pthread_t t;
    bool started = false;
    long long before = noscripts(&s);
    CHECK(mix_open(&x, s.uri, "fl") == 0, "client and locks");
    CHECK(pthread_create(&t, NULL, side_run, &sd) == 0, "flusher thread");
    started = true;
    churn_run(&x.log, mix_round, &x, &sd, 10);
    atomic_store(&sd.stop, true);
    pthread_join(t, NULL);
    started = false;
    fprintf(stderr, "%ld operations, %ld flushes, %lld NOSCRIPT answers\n", x.log.ops,
            atomic_load(&sd.done), noscripts(&s) - before);
    CHECK(!x.log.failed[0], "%s", x.log.failed);
    CHECK(!sd.err[0], "SCRIPT FLUSH: %s", sd.err);
    CHECK(atomic_load(&sd.done) >= 10, "flushes during the run: %ld", atomic_load(&sd.done));
    CHECK(noscripts(&s) - before > 0, "the flushes were met (NOSCRIPT answers)");
    /* the last flush may have come after the last operation: one more */
    CHECK(mix_round(&x, 0), "%s", x.log.failed);
    int n, there = scripts_on(&s, &n);
    CHECK(there == n, "%d of the %d scripts loaded after the run", there, n);
    CHECK(rs_info_int(&s, "memory", "number_of_cached_scripts") >= n,
          "number_of_cached_scripts: %lld", rs_info_int(&s, "memory", "number_of_cached_scripts"));
done:
    if (started) {
        atomic_store(&sd.stop, true);
        pthread_join(t, NULL);
    }
    mix_close(&x);
    rs_stop(&s);
}

/* Valkey 8 (and Redis 7.4+) keep 500 scripts that came by EVAL and evict
 * the oldest; another client EVALing distinct scripts evicts ours unless
 * they were loaded. Redis 7.0 evicts nothing: there, the case shows the
 * first calls are no NOSCRIPT either. Before: NOSCRIPT answers to us (the
 * first calls; on Valkey, each script evicted and sent as EVAL again). */
TEST(another_clients_600_evals_cost_no_noscript_and_no_failed_operation)
{
    START(s);
    struct mix x;
    struct side sd = {.s = &s, .evals = true};
    pthread_t t;
    bool started = false;
    long long before = noscripts(&s), evicted = rs_info_int(&s, "stats", "evicted_scripts");
    CHECK(mix_open(&x, s.uri, "ev") == 0, "client and locks");
    CHECK(pthread_create(&t, NULL, side_run, &sd) == 0, "EVAL thread");
    started = true;
    churn_run(&x.log, mix_round, &x, &sd, 600);
    atomic_store(&sd.stop, true);
    pthread_join(t, NULL);
    started = false;
    long long now_evicted = rs_info_int(&s, "stats", "evicted_scripts");
    fprintf(stderr, "%ld operations, %ld distinct EVALs, evicted scripts %lld\n", x.log.ops,
            atomic_load(&sd.done), now_evicted < 0 ? -1 : now_evicted - evicted);
    CHECK(!x.log.failed[0], "%s", x.log.failed);
    CHECK(!sd.err[0], "EVAL: %s", sd.err);
    CHECK(atomic_load(&sd.done) >= 600, "distinct EVALs: %ld", atomic_load(&sd.done));
    /* where the server evicts (it counts evicted_scripts), it did */
    CHECK(now_evicted < 0 || now_evicted > evicted, "evicted scripts: %lld", now_evicted);
    CHECK(noscripts(&s) - before == 0, "NOSCRIPT answers: %lld", noscripts(&s) - before);
    int n, there = scripts_on(&s, &n);
    CHECK(there == n, "%d of the %d scripts loaded after the run", there, n);
done:
    if (started) {
        atomic_store(&sd.stop, true);
        pthread_join(t, NULL);
    }
    mix_close(&x);
    rs_stop(&s);
}

/* The log lines kept for c that say SCRIPT LOAD was refused (taken). */
static int refusals_said(rlc_client *c)
{
    int said = 0, level = 0;
    char line[300];
    while (rlc_client_next_log(c, &level, line, sizeof line) > 0)
        if (level == RLC_LOG_WARN && strstr(line, "refused SCRIPT LOAD"))
            said++;
        else
            fprintf(stderr, "log: %s\n", line);
    return said;
}

/* A user whose ACL refuses SCRIPT LOAD: the calls fall back to EVAL after
 * NOSCRIPT, as before the loads, with one warning that says so. Before:
 * the operations went through, and nothing was said. */
TEST(a_refused_script_load_fails_no_operation_and_is_said_once)
{
    START(s);
    struct mix x = {0};
    char uri[128];
    redisReply *r = rs_cmd(&s, "ACL SETUSER noload on >pw ~* &* +@all -script|load");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", r ? r->str : "no reply");
    freeReplyObject(r);
    snprintf(uri, sizeof uri, "redis://noload:pw@127.0.0.1:%d", s.port);
    CHECK(mix_open(&x, uri, "acl") == 0, "client and locks");
    CHECK_RC(rlc_client_keep_log(x.c, RLC_LOG_WARN), RLC_OK);
    for (long i = 0; i < 20; i++)
        CHECK(mix_round(&x, i), "%s", x.log.failed);
    freeReplyObject(rs_cmd(&s, "SCRIPT FLUSH"));
    for (long i = 0; i < 10; i++)
        CHECK(mix_round(&x, i), "after a flush: %s", x.log.failed);
    int said = 0;
    WAIT_UNTIL((said += refusals_said(x.c)) > 0, 5000);
    said += refusals_said(x.c); /* and nothing more */
    CHECK(said == 1, "warnings about SCRIPT LOAD: %d", said);
done:
    mix_close(&x);
    rs_stop(&s);
}

RUN_TESTS(CASE(no_operation_is_answered_noscript),
          CASE(a_flush_every_100_ms_fails_no_operation_and_leaves_the_scripts_loaded),
          CASE(another_clients_600_evals_cost_no_noscript_and_no_failed_operation),
          CASE(a_refused_script_load_fails_no_operation_and_is_said_once))
