/*
 * test_classic.c - the classic lock format (format=classic): the string key
 * of redis-py's Lock, node-redlock and redsync, on real servers. The peers'
 * side is played with their own commands (SET NX PX, compare-and-delete),
 * as they send them; tests/interop/classic runs the peers themselves.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* The value of key on s ("" when missing or not a string). */
static const char *value_of(const struct redis_server *s, const char *key, char *buf,
                            size_t size)
{
    buf[0] = '\0';
    redisReply *r = rs_cmd(s, "GET %s", key);
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(buf, size, "%s", r->str);
    if (r)
        freeReplyObject(r);
    return buf;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A peer's compare-and-delete (redis-py's, node-redlock's script). */
#define PEER_RELEASE                                                                     \
    "EVAL %s 1 %s %s",                                                                   \
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) " \
        "else return 0 end"

TEST(a_classic_lock_is_a_string_holding_its_attempt_id)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    rlc_lock *l = lock(c, "orders", 1), *other = lock(c, "orders", 2);
    CHECK(c && l && other, "client and locks");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    redisReply *t = rs_cmd(&s, "TYPE orders");
    CHECK(t && t->type == REDIS_REPLY_STATUS && strcmp(t->str, "string") == 0, "TYPE %s",
          t ? t->str : "?");
    if (t)
        freeReplyObject(t);
    char v[128], want[64];
    snprintf(want, sizeof want, "%s:", rlc_client_uuid(c));
    CHECK(starts_with(value_of(&s, "orders", v, sizeof v), want), "value '%s'", v);
    long long pttl = rs_int(&s, "PTTL orders");
    CHECK(pttl > 9000 && pttl <= 10000, "PTTL %lld for a 10 s lease", pttl);
    CHECK(rs_int(&s, "DBSIZE") == 1, "one key, no attempts hash, no counter");
    /* a peer's SET NX is refused while we hold it; our other owner too */
    CHECK(rs_int(&s, "EXISTS orders") == 1, "held");
    redisReply *set = rs_cmd(&s, "SET orders peer NX PX 1000");
    CHECK(set && set->type == REDIS_REPLY_NIL, "a peer's SET NX was refused");
    if (set)
        freeReplyObject(set);
    CHECK_RC(rlc_lock_acquire(other, 0, 10000), RLC_NOT_ACQUIRED);
    CHECK(is_held(l) == 1 && is_held(other) == 0, "held by owner 1 only");
    int64_t count = -1;
    CHECK_RC(rlc_lock_hold_count(l, &count), RLC_OK);
    CHECK(count == 1, "hold count %lld", (long long)count);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "DBSIZE") == 0, "released: nothing left");
    CHECK(is_locked(l) == 0, "not locked");
done:
    rlc_lock_free(l);
    rlc_lock_free(other);
    rlc_client_free(c);
    rs_stop(&s);
}

/* One value, one level: the owner's second acquire is refused, sending
 * nothing, and the hold stays as it was. */
TEST(a_nested_acquire_is_refused_and_the_hold_stays)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    rlc_lock *l = lock(c, "n", 1);
    CHECK(c && l, "client and lock");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    char before[128], after[128];
    value_of(&s, "n", before, sizeof before);
    CHECK_RC(rlc_lock_acquire(l, 1000, 10000), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "not reentrant"), "errmsg: %s", rlc_errmsg());
    CHECK(strcmp(value_of(&s, "n", after, sizeof after), before) == 0, "value kept");
    CHECK(is_held(l) == 1, "still held");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS n") == 0, "one release frees it");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(what_the_classic_format_cannot_do_is_refused_by_name)
{
    START(s);
    rlc_client *c = NULL;
    CHECK_RC(rlc_client_new(&c, s.uri, "format=classic;fencing=1"), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "fencing=1 needs format=redisson"), "errmsg: %s", rlc_errmsg());
    CHECK_RC(rlc_client_new(&c, s.uri, "format=string"), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "redisson or classic"), "errmsg: %s", rlc_errmsg());
    c = client(s.uri, "format=classic");
    CHECK(c, "client");
    rlc_rwlock *rw = NULL;
    CHECK_RC(rlc_rwlock_new(c, "rw", 1, &rw), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "format=classic"), "errmsg: %s", rlc_errmsg());
    rlc_semaphore *sem = NULL;
    CHECK_RC(rlc_semaphore_new(c, "sem", &sem), RLC_E_INVAL);
    rlc_lock *l = lock(c, "f", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, 5000), RLC_OK);
    uint64_t token = 0;
    CHECK_RC(rlc_lock_fencing_token(l, &token), RLC_E_INVAL);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    rlc_lock_free(l);
done:
    rlc_client_free(c);
    rs_stop(&s);
}

struct waiter {
    rlc_lock *l;
    int64_t wait_ms;
    atomic_int rc;
    atomic_int done;
};

static void *wait_for_lock(void *arg)
{
    struct waiter *w = arg;
    atomic_store(&w->rc, rlc_lock_acquire(w->l, w->wait_ms, 10000));
    atomic_store(&w->done, 1);
    return NULL;
}

/* A peer releases without a message: our waiter still gets the lock, well
 * within the peer's 60 s lease (it looks again while it waits). */
TEST(a_peers_release_lets_our_waiter_in)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    rlc_lock *l = lock(c, "job", 1);
    CHECK(c && l, "client and lock");
    CHECK(rs_int(&s, "EXISTS job") == 0, "free");
    redisReply *set = rs_cmd(&s, "SET job peer-token NX PX 60000");
    CHECK(set && set->type == REDIS_REPLY_STATUS, "the peer holds it");
    if (set)
        freeReplyObject(set);
    struct waiter w = {l, 20000, 0, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_for_lock, &w) == 0, "thread");
    /* it keeps looking while it waits (every CLASSIC_POLL_MS, 100 ms): eight
     * tries come well within 4 s; a waiter that only woke on a message or
     * the safety poll (1 s) would still be at its fourth */
    CHECK(WAIT_UNTIL(command_calls(&s, "evalsha") >= 8, 4000), "our waiter looks again: %lld",
          command_calls(&s, "evalsha"));
    CHECK(!atomic_load(&w.done), "still waiting while the peer holds it");
    CHECK(rs_int(&s, PEER_RELEASE, "job", "peer-token") == 1, "the peer's release");
    CHECK(WAIT_UNTIL(atomic_load(&w.done), 15000), "our waiter got the lock");
    pthread_join(th, NULL);
    CHECK_RC(atomic_load(&w.rc), RLC_OK);
    char v[128];
    CHECK(starts_with(value_of(&s, "job", v, sizeof v), rlc_client_uuid(c)), "ours: '%s'", v);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Our hold is renewed by compare-and-PEXPIRE: a watchdog hold outlives its
 * lease many times, and a fixed extend sets the lease asked for. */
TEST(the_watchdog_and_extend_keep_a_classic_lock)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic;watchdog_timeout_ms=300");
    rlc_lock *l = lock(c, "wd", 1);
    CHECK(c && l, "client and lock");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t until = check_now_ms() + 1200;
    while (check_now_ms() < until) /* four leases: renewed, or gone */
        CHECK(rs_int(&s, "EXISTS wd") == 1, "renewed past its 300 ms lease");
    CHECK(is_held(l) == 1, "held");
    CHECK_RC(rlc_lock_extend(l, 20000), RLC_OK);
    CHECK(rs_int(&s, "PTTL wd") > 15000, "extended to 20 s: PTTL %lld", rs_int(&s, "PTTL wd"));
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS wd") == 0, "released");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* A peer that overwrote the value took the lock: ours is lost, and our
 * release does not delete the peer's key. */
TEST(a_value_replaced_by_another_is_a_lost_lock)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    rlc_lock *l = lock(c, "x", 1);
    CHECK(c && l, "client and lock");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    redisReply *r = rs_cmd(&s, "SET x thief PX 10000");
    if (r)
        freeReplyObject(r);
    CHECK(is_held(l) == 0, "not held once the value is another's");
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    char v[64];
    CHECK(strcmp(value_of(&s, "x", v, sizeof v), "thief") == 0, "the peer's key stays: '%s'", v);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Redlock over 3 masters, as node-redlock and redsync do it: the same value
 * on a quorum; a peer holding 2 of 3 keeps us out, and our try's one grant
 * is taken back; a peer holding 1 of 3 does not. */
TEST(redlock_over_three_masters_in_the_classic_format)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "format=classic");
    rlc_lock *l = lock(c, "r", 1);
    CHECK(c && l, "client and lock");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    char v0[128], v[128];
    value_of(&cl.node[0], "r", v0, sizeof v0);
    CHECK(starts_with(v0, rlc_client_uuid(c)), "node 0: '%s'", v0);
    for (int i = 1; i < 3; i++)
        CHECK(strcmp(value_of(&cl.node[i], "r", v, sizeof v), v0) == 0, "node %d: '%s'", i, v);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    for (int i = 0; i < 3; i++)
        CHECK(rs_int(&cl.node[i], "EXISTS r") == 0, "node %d freed", i);

    for (int i = 1; i < 3; i++) {
        redisReply *p = rs_cmd(&cl.node[i], "SET r peer NX PX 60000");
        if (p)
            freeReplyObject(p);
    }
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_NOT_ACQUIRED);
    CHECK(WAIT_UNTIL(rs_int(&cl.node[0], "EXISTS r") == 0, 3000), "the one grant was undone");
    CHECK(rs_int(&cl.node[1], PEER_RELEASE, "r", "peer") == 1, "the peer lets go of node 1");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK(starts_with(value_of(&cl.node[1], "r", v, sizeof v), rlc_client_uuid(c)),
          "a quorum (nodes 0, 1): '%s'", v);
    CHECK(strcmp(value_of(&cl.node[2], "r", v, sizeof v), "peer") == 0, "node 2 is the peer's");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(strcmp(value_of(&cl.node[2], "r", v, sizeof v), "peer") == 0,
          "our release leaves the peer's key");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

/* A multi-lock takes every name with one value, or none. */
TEST(a_multilock_takes_every_name_or_none)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    const char *names[2] = {"m:a", "m:b"};
    rlc_multilock *m = NULL;
    CHECK(c, "client");
    CHECK_RC(rlc_multilock_new(c, names, 2, 1, &m), RLC_OK);
    CHECK_RC(rlc_multilock_acquire(m, 0, 10000), RLC_OK);
    char a[128], b[128];
    value_of(&s, "m:a", a, sizeof a);
    CHECK(starts_with(a, rlc_client_uuid(c)) && strcmp(value_of(&s, "m:b", b, sizeof b), a) == 0,
          "one value on both: '%s' '%s'", a, b);
    CHECK_RC(rlc_multilock_release(m), RLC_OK);
    CHECK(rs_int(&s, "DBSIZE") == 0, "both freed");
    redisReply *p = rs_cmd(&s, "SET m:b peer NX PX 60000");
    if (p)
        freeReplyObject(p);
    CHECK_RC(rlc_multilock_acquire(m, 0, 10000), RLC_NOT_ACQUIRED);
    CHECK(rs_int(&s, "EXISTS m:a") == 0, "nothing taken when one name is busy");
done:
    rlc_multilock_free(m);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Distinct names acquired and released leave nothing, as SET NX PX's users
 * expect. */
TEST(distinct_names_leave_no_key)
{
    START(s);
    rlc_client *c = client(s.uri, "format=classic");
    CHECK(c, "client");
    int64_t end = check_now_ms() + 10000;
    int n = 0;
    for (; n < 1000 && check_now_ms() < end; n++) {
        char name[32];
        snprintf(name, sizeof name, "d:%d", n);
        rlc_lock *l = lock(c, name, 1);
        int rc = l ? rlc_lock_acquire(l, 0, n % 2 ? 30000 : -1) : RLC_E_NOMEM;
        int rel = rc == RLC_OK ? rlc_lock_release(l) : rc;
        rlc_lock_free(l);
        CHECK_RC(rel, RLC_OK);
    }
    CHECK(rs_int(&s, "DBSIZE") == 0, "%lld keys left after %d names", rs_int(&s, "DBSIZE"), n);
done:
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(a_classic_lock_is_a_string_holding_its_attempt_id),
          CASE(a_nested_acquire_is_refused_and_the_hold_stays),
          CASE(what_the_classic_format_cannot_do_is_refused_by_name),
          CASE(a_peers_release_lets_our_waiter_in),
          CASE(the_watchdog_and_extend_keep_a_classic_lock),
          CASE(a_value_replaced_by_another_is_a_lost_lock),
          CASE(redlock_over_three_masters_in_the_classic_format),
          CASE(a_multilock_takes_every_name_or_none),
          CASE(distinct_names_leave_no_key))
