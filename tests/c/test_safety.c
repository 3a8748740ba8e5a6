/*
 * test_safety.c - the attempt protocol (docs/design/attempts.md) against
 * real redis-servers: what a late, repeated or refused command may and may
 * not do to a hold. Each case is one observation of the safety issue; the
 * network faults themselves (delayed bytes, cut connections) are in
 * tests/fault/regress.c.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fixture.h"

/* Connections of type normal the server has, less the test's own one. */
static long long library_connections(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "CLIENT LIST TYPE normal");
    long long n = 0;
    /* Every line but the test's own and the loss_push reader (tracking on:
     * flag t, see tracking.c), which carries no lock command. */
    if (r && r->type == REDIS_REPLY_STRING)
        for (const char *line = r->str; line && *line;) {
            const char *end = strchr(line, '\n'), *f = strstr(line, " flags=");
            if (f && (!end || f < end) && memchr(f + 7, 't', strcspn(f + 7, " ")) == NULL)
                n++;
            line = end ? end + 1 : NULL;
        }
    if (r)
        freeReplyObject(r);
    return n - 1;
}

/* ---- one owner, one connection ------------------------------------------- */

struct nest_arg {
    rlc_lock *l;
    atomic_int failures;
};

static void *nest_and_release(void *p)
{
    struct nest_arg *a = p;
    for (int i = 0; i < 50; i++) {
        if (rlc_lock_acquire(a->l, 5000, -1) != RLC_OK || rlc_lock_release(a->l) != RLC_OK)
            atomic_fetch_add(&a->failures, 1);
    }
    return NULL;
}

/* Observation 2: with pool_size 4, an explicit owner used from four threads
 * took four connections, so its undo could run before its acquire. Now one
 * owner's commands to a node always share one connection. */
TEST(one_owner_uses_one_connection_with_a_pool)
{
    START(s);
    rlc_client *c = client(s.uri, "pool_size=4");
    rlc_lock *l = lock(c, "pooled", 77);
    struct nest_arg a = {l, 0};
    pthread_t t[4];
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK); /* the threads nest into it */
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, nest_and_release, &a);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&a.failures) == 0, "%d calls failed", atomic_load(&a.failures));
    long long conns = library_connections(&s);
    CHECK(conns == 1, "owner 77 used %lld connections", conns);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS pooled") == 0, "the lock is gone");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- SCRIPT FLUSH ----------------------------------------------------------- */

struct later_arg {
    rlc_lock *l;
    int rc;
};

/* Another caller on the same connection, sent while the acquire still
 * waits: it becomes the reader of the replies that come after resume. */
static void *query_later(void *p)
{
    struct later_arg *a = p;
    int held;
    check_sleep_ms(60);
    a->rc = rlc_lock_is_locked(a->l, &held);
    return NULL;
}

/* Observation 3: an acquire that timed out and then got NOSCRIPT was sent
 * again as EVAL behind its own undo, leaving the lock held by nobody for
 * the whole lease. Now an abandoned request is never sent again. */
TEST(timed_out_acquire_is_not_resent_after_script_flush)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=150");
    rlc_lock *l = lock(c, "flushed", 5);
    int held = -1;
    pthread_t t;
    struct later_arg later = {l, 0};
    CHECK_RC(rlc_lock_is_locked(l, &held), RLC_OK); /* connected, scripts loaded */
    freeReplyObject(rs_cmd(&s, "SCRIPT FLUSH"));
    rs_pause(&s);
    pthread_create(&t, NULL, query_later, &later);
    int rc = rlc_lock_acquire(l, 0, 600000);
    rs_resume(&s);
    pthread_join(t, NULL);
    CHECK(rc == RLC_E_TIMEOUT, "acquire returned %d (%s)", rc, rlc_strerror(rc));
    CHECK_RC(later.rc, RLC_OK);
    /* whatever is still queued on the connection has run by now */
    CHECK_RC(rlc_lock_is_locked(l, &held), RLC_OK);
    CHECK_RC(rlc_lock_is_locked(l, &held), RLC_OK);
    CHECK(held == 0 && rs_int(&s, "EXISTS flushed") == 0,
          "the lock is held after its acquire timed out (pttl %lld)",
          rs_int(&s, "PTTL flushed"));
    rlc_client *other = client(s.uri, NULL);
    rlc_lock *o = lock(other, "flushed", 9);
    CHECK_RC(rlc_lock_acquire(o, 0, 5000), RLC_OK);
    rlc_lock_release(o);
    rlc_lock_free(o);
    rlc_client_free(other);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- orphan levels ------------------------------------------------------------ */

/* Observation 4: a level the server counts for the owner beyond the
 * client's own (a nested acquire whose connection broke, its undo not yet
 * run) kept the key alive after the owner's last release. Now the last
 * release takes every level of the owner taken by an attempt up to its own.
 * The late acquire's level is made by hand here, as it would have left it:
 * one more level, and the record of its attempt (the client's second). */
TEST(last_release_takes_every_level_of_the_owner)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "orphaned", 3);
    char field[80], attempt[80];
    snprintf(field, sizeof field, "%s:3", rlc_client_uuid(c));
    snprintf(attempt, sizeof attempt, "%s:2", rlc_client_uuid(c));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    redisReply *e = rs_cmd(&s, "HGET redlockc_attempts:{orphaned} e");
    CHECK(e && e->type == REDIS_REPLY_STRING, "no epoch in the attempts hash");
    freeReplyObject(rs_cmd(&s, "HSET redlockc_attempts:{orphaned} %s %s|%s", attempt,
                           e->str, field));
    freeReplyObject(e);
    CHECK(rs_int(&s, "HINCRBY orphaned %s 1", field) == 2, "server counts 2 levels");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS orphaned") == 0, "an orphan level kept the lock");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* A try made as a new hold that finds a level of its owner already there
 * (a stale partial hold of an earlier Redlock round) records the PTTL it
 * replaced, in a record of three parts. A nested acquire names that level
 * as the one it nests in, and must read its epoch from either shape: it
 * was read as a two-part record, so the nested acquire reported the hold
 * lost (A7) while it was held. */
TEST(a_level_over_a_stale_partial_hold_is_nested_in)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "stale", 5);
    char field[80];
    snprintf(field, sizeof field, "%s:5", rlc_client_uuid(c));
    CHECK(rs_int(&s, "HINCRBY stale %s 1", field) == 1, "a stale level of the owner");
    CHECK(rs_int(&s, "PEXPIRE stale 30000") == 1, "with a lease");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t held = 0;
    CHECK(rlc_lock_hold_count(l, &held) == RLC_OK && held == 3,
          "the server counts the stale level and ours: %lld", (long long)held);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Found by the simulation (A7, docs/design/attempts.md): a nested acquire over a hold
 * that had expired made a new hold and was counted as one more level, so
 * the owner's next release freed the lock while the owner still believed it
 * held it. Now that acquire reports the hold lost, and leaves nothing. */
TEST(nested_acquire_over_an_expired_hold_reports_it_lost)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "expired", 4);
    rlc_client *other = client(s.uri, NULL);
    rlc_lock *o = lock(other, "expired", 8);
    CHECK_RC(rlc_lock_acquire(l, 0, 150), RLC_OK);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS expired") == 0, 3000), "the lease did not end");
    CHECK_RC(rlc_lock_acquire(l, 0, 150), RLC_E_LOST);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS expired") == 0, 1000), "the new hold was kept");
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_acquire(o, 0, 5000), RLC_OK);
    CHECK_RC(rlc_lock_release(o), RLC_OK);
done:
    rlc_lock_free(o);
    rlc_client_free(other);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- refused PUBLISH, unusable token key ---------------------------------------- */

/* Observation 8: with Redis 7's default resetchannels, release deleted the
 * key and then failed on PUBLISH, reporting an error for a release that
 * happened. */
TEST(release_stands_when_publish_is_refused)
{
    START(s);
    freeReplyObject(rs_cmd(&s, "ACL SETUSER nochan on >pw ~* resetchannels +@all"));
    char uri[128];
    snprintf(uri, sizeof uri, "redis://nochan:pw@127.0.0.1:%d", s.port);
    rlc_client *c = client(uri, NULL);
    rlc_lock *l = lock(c, "acl", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS acl") == 0, "the lock is gone");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Observation 9: a token key that is not an integer failed the acquire
 * after the hash had been written, leaving the lock held for a lease. */
TEST(unusable_token_key_fails_acquire_without_writing)
{
    START(s);
    rlc_client *c = client(s.uri, "fencing=1");
    rlc_lock *l = lock(c, "tok", 1);
    freeReplyObject(rs_cmd(&s, "SET redisson_lock_token:{tok} abc"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_E_SERVER);
    CHECK(strstr(rlc_errmsg(), "redisson_lock_token:{tok}"), "errmsg: %s", rlc_errmsg());
    CHECK(rs_int(&s, "EXISTS tok") == 0, "the lock was written");
    freeReplyObject(rs_cmd(&s, "DEL redisson_lock_token:{tok}"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- Redlock ----------------------------------------------------------------------- */

struct trio {
    struct redis_server node[3];
    int started;
    char uris[256];
};

static int trio_start(struct trio *t)
{
    t->started = 0;
    t->uris[0] = '\0';
    for (int i = 0; i < 3; i++) {
        if (rs_start(&t->node[i], NULL) != 0)
            return -1;
        t->started++;
        strcat(t->uris, i ? "," : "");
        strcat(t->uris, t->node[i].uri);
    }
    return 0;
}

static void trio_stop(struct trio *t)
{
    for (int i = 0; i < t->started; i++)
        rs_stop(&t->node[i]);
}

/* Observation 5: another owner holds 2 of 3 nodes and the third lacks the
 * key. Each try was a "split vote", retried after the jitter (~6,000 tries
 * a second with retry_jitter_ms=0), and each undo published a false unlock
 * message. Now the waiter sleeps on messages or the holder's TTL, and an
 * undo publishes nothing. */
TEST(redlock_waiter_sleeps_while_another_owner_holds_a_quorum)
{
    struct trio t;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    redisContext *sub = NULL;
    if (trio_start(&t) != 0) {
        check_failed = 1;
        fprintf(stderr, "could not start 3 redis-servers\n");
        goto done;
    }
    for (int i = 0; i < 2; i++) {
        freeReplyObject(rs_cmd(&t.node[i], "HSET quorate other-client:1 1"));
        freeReplyObject(rs_cmd(&t.node[i], "PEXPIRE quorate 60000"));
    }
    sub = rs_connect(&t.node[2]);
    CHECK(sub, "no subscriber connection");
    freeReplyObject(redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{quorate}"));
    c = client(t.uris, "retry_jitter_ms=0;node_timeout_ms=500");
    l = lock(c, "quorate", 1);
    long long before = command_calls(&t.node[2], "evalsha") + command_calls(&t.node[2], "eval");
    CHECK_RC(rlc_lock_acquire(l, 1500, 10000), RLC_NOT_ACQUIRED);
    long long tries = command_calls(&t.node[2], "evalsha") + command_calls(&t.node[2], "eval") -
                      before;
    /* one try, then a sleep until a message or the holder's TTL, with at
     * most a safety look now and then: a handful, not thousands */
    CHECK(tries <= 10, "%lld script calls on the free node in 1.5 s", tries);
    CHECK(rs_int(&t.node[2], "EXISTS quorate") == 0, "the free node was left locked");
    /* no unlock message reached the channel's subscribers */
    struct timeval tv = {0, 200000};
    redisSetTimeout(sub, tv);
    void *msg = NULL;
    int got = redisGetReply(sub, &msg);
    CHECK(got != REDIS_OK, "an undo published an unlock message");
done:
    if (sub)
        redisFree(sub);
    rlc_lock_free(l);
    rlc_client_free(c);
    trio_stop(&t);
}

/* ---- a late extend ----------------------------------------------------------- */

/* An extend to a shorter lease that gets no answer in time may still run
 * (a stalled server reads it when it resumes) and cut the key's TTL to its
 * lease. Before, the holder kept the validity of its acquire (about 20 s)
 * while the key could expire 2 s after the extend was sent: another client
 * could take it while the first still claimed it. Now a failed extend caps
 * the validity at its own lease from its start, as the engine does (E8). */
TEST(a_failed_extend_caps_the_validity_at_what_it_could_leave)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=200");
    rlc_lock *l = lock(c, "late_extend", 5);
    rlc_client *other = NULL;
    rlc_lock *o = NULL;
    int64_t v = -1;
    CHECK_RC(rlc_lock_acquire(l, 0, 20000), RLC_OK);
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v > 15000, "validity after the acquire: %lld", (long long)v);
    rs_pause(&s);
    int64_t t0 = check_now_ms();
    int rc = rlc_lock_extend(l, 2000);
    rs_resume(&s);
    CHECK(rc == RLC_E_TIMEOUT, "extend returned %d (%s)", rc, rlc_strerror(rc));
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v <= 2000 - (check_now_ms() - t0) + 5,
          "the holder claims %lld ms after an extend to 2000 ms that may still run "
          "(key's PTTL now %lld)", (long long)v, rs_int(&s, "PTTL late_extend"));
    /* and the extend did run late: the key has at most its 2000 ms */
    CHECK(WAIT_UNTIL(rs_int(&s, "PTTL late_extend") <= 2000, 2000),
          "the late extend did not run (PTTL %lld)", rs_int(&s, "PTTL late_extend"));
    /* another client takes the lock once the key expires: by then the
     * first no longer claims it */
    other = client(s.uri, NULL);
    o = lock(other, "late_extend", 9);
    CHECK_RC(rlc_lock_acquire(o, 5000, 5000), RLC_OK);
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v == 0, "two holders: the first still claims %lld ms", (long long)v);
done:
    rlc_lock_free(o);
    rlc_client_free(other);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Issue 36 in the blocking API: a fixed lease that ran out while another
 * client took the lock is lost at its end. The on_lost callback fires once
 * (before, only a watchdog hold could be reported lost), and is_held,
 * hold_count, validity and the fencing token say so. */
static atomic_int fixed_lost_calls, fixed_lost_reason;
static void fixed_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)user;
    atomic_store(&fixed_lost_reason, reason);
    atomic_fetch_add(&fixed_lost_calls, 1);
}

TEST(a_fixed_lease_that_runs_out_is_lost_in_the_blocking_api)
{
    START(s);
    rlc_client *c = client(s.uri, "fencing=1");
    rlc_lock *l = lock(c, "fixed", 1);
    rlc_client *other = client(s.uri, "fencing=1");
    rlc_lock *o = lock(other, "fixed", 2);
    atomic_store(&fixed_lost_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, fixed_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 500), RLC_OK);
    uint64_t t1 = 0, t2 = 0;
    CHECK_RC(rlc_lock_fencing_token(l, &t1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(o, 5000, 10000), RLC_OK); /* once the lease ran out */
    CHECK_RC(rlc_lock_fencing_token(o, &t2), RLC_OK);
    CHECK(t2 > t1, "tokens %llu then %llu", (unsigned long long)t1, (unsigned long long)t2);
    int held = -1;
    int64_t n = -1, v = -1;
    CHECK_RC(rlc_lock_is_held(l, &held), RLC_OK);
    CHECK(held == 0, "is_held %d beside the new holder", held);
    CHECK_RC(rlc_lock_hold_count(l, &n), RLC_OK);
    CHECK(n == 0, "hold_count %lld", (long long)n);
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v == 0, "validity %lld", (long long)v);
    uint64_t tok = 0;
    CHECK_RC(rlc_lock_fencing_token(l, &tok), RLC_E_LOST);
    CHECK(WAIT_UNTIL(atomic_load(&fixed_lost_calls) >= 1, 3000), "on_lost did not fire");
    CHECK(atomic_load(&fixed_lost_reason) == RLC_E_LOST, "reason %d",
          atomic_load(&fixed_lost_reason));
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_is_held(o, &held), RLC_OK);
    CHECK(held == 1, "the new holder keeps it after the late release");
    CHECK(atomic_load(&fixed_lost_calls) == 1, "on_lost ran %d times",
          atomic_load(&fixed_lost_calls));
    CHECK_RC(rlc_lock_release(o), RLC_OK);
done:
    rlc_lock_free(o);
    rlc_client_free(other);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(one_owner_uses_one_connection_with_a_pool),
          CASE(a_failed_extend_caps_the_validity_at_what_it_could_leave),
          CASE(timed_out_acquire_is_not_resent_after_script_flush),
          CASE(last_release_takes_every_level_of_the_owner),
          CASE(a_level_over_a_stale_partial_hold_is_nested_in), CASE(nested_acquire_over_an_expired_hold_reports_it_lost),
          CASE(release_stands_when_publish_is_refused),
          CASE(unusable_token_key_fails_acquire_without_writing),
          CASE(redlock_waiter_sleeps_while_another_owner_holds_a_quorum),
          CASE(a_fixed_lease_that_runs_out_is_lost_in_the_blocking_api))
