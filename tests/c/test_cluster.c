/*
 * test_cluster.c - locks on a real Redis Cluster (3 masters, 3 replicas,
 * made by redis-cli --cluster create): routing by hash slot, reentrancy,
 * watchdog renewals, sharded unlock messages, a slot migration under held
 * and awaited locks, a master killed and its replica promoted.
 *
 * Each case starts its own cluster (about 2 s); assertions look at the
 * servers themselves: which master has the key, its PTTL, who subscribed.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "fixture.h"
#include "redis_cluster.h"
#include "slot.h"

#define START_RC(rc)                                                          \
    struct redis_cluster rc;                                                  \
    if (rc_start(&rc) != 0) {                                                 \
        fprintf(stderr, "could not start a 3+3 redis cluster\n");             \
        check_failed = 1;                                                     \
        return;                                                               \
    }

/* The master node serving key's slot. */
static const struct redis_server *master_for(const struct redis_cluster *rc, const char *key)
{
    int i = rc_master_of(rc, (int)slot_of(key, strlen(key)));
    return i >= 0 ? &rc->node[i] : NULL;
}

static long long on_master(const struct redis_cluster *rc, const char *key, const char *cmd)
{
    const struct redis_server *m = master_for(rc, key);
    return m ? rs_int(m, cmd, key) : LLONG_MIN;
}

TEST(locks_on_many_names_go_to_the_master_of_their_slot)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, NULL);
    rlc_lock *l = NULL;
    int per_master[RC_NODES] = {0};
    CHECK(c, "client");
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "many:%d", i);
        l = lock(c, name, 0);
        CHECK(l, "lock %s", name);
        CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
        CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK); /* reentrant */
        int64_t count = 0;
        CHECK_RC(rlc_lock_hold_count(l, &count), RLC_OK);
        CHECK(count == 2, "%s: hold count %lld", name, (long long)count);
        CHECK(on_master(&rc, name, "EXISTS %s") == 1, "%s is not on its slot's master", name);
        per_master[rc_master_of(&rc, (int)slot_of(name, strlen(name)))]++;
        CHECK_RC(rlc_lock_release(l), RLC_OK);
        CHECK(is_held(l) == 1, "%s: still held once", name);
        CHECK_RC(rlc_lock_release(l), RLC_OK);
        CHECK(on_master(&rc, name, "EXISTS %s") == 0, "%s: key left after the release", name);
        rlc_lock_free(l);
        l = NULL;
    }
    int masters = 0;
    for (int i = 0; i < RC_NODES; i++)
        masters += per_master[i] > 0;
    CHECK(masters == 3, "names reached %d masters", masters);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rc_stop(&rc);
}

TEST(watchdog_renews_holds_on_every_master)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, "watchdog_timeout_ms=1500");
    enum { N = 30 };
    rlc_lock *l[N] = {0};
    CHECK(c, "client");
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "wd:%d", i);
        l[i] = lock(c, name, 0);
        CHECK(l[i], "lock");
        CHECK_RC(rlc_lock_acquire(l[i], 0, -1), RLC_OK);
    }
    /* Three leases later every key is still there, its PTTL renewed. */
    check_sleep_ms(4500);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "wd:%d", i);
        long long pttl = on_master(&rc, name, "PTTL %s");
        CHECK(pttl > 0 && pttl <= 1500, "%s: PTTL %lld after 3 leases", name, pttl);
        CHECK(is_held(l[i]) == 1, "%s: not held", name);
    }
    /* And visibly refreshed: it climbs back after falling. */
    {
        long long a = 0, b = 0;
        int fell = WAIT_UNTIL((a = on_master(&rc, "wd:0", "PTTL %s")) < 1200, 2000);
        int climbed = WAIT_UNTIL((b = on_master(&rc, "wd:0", "PTTL %s")) > 1300, 2000);
        CHECK(fell && climbed, "PTTL went from %lld to %lld, never renewed", a, b);
    }
    for (int i = 0; i < N; i++)
        CHECK_RC(rlc_lock_release(l[i]), RLC_OK);
done:
    for (int i = 0; i < N; i++)
        rlc_lock_free(l[i]);
    rlc_client_free(c);
    rc_stop(&rc);
}

struct waiter {
    rlc_lock *l;
    int64_t wait_ms, lease_ms;
    atomic_int rc;
    atomic_int done;
    int64_t got_ms; /* check_now_ms() when it got the lock */
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    int rc = rlc_lock_acquire(w->l, w->wait_ms, w->lease_ms);
    w->got_ms = check_now_ms();
    atomic_store(&w->rc, rc);
    atomic_store(&w->done, 1);
    return NULL;
}

/* "PUBSUB SHARDNUMSUB ch" on the channel's master: its subscriber count. */
static long long shard_subscribers(const struct redis_cluster *rc, const char *name)
{
    char ch[96];
    snprintf(ch, sizeof ch, "redisson_lock__channel:{%s}", name);
    const struct redis_server *m = master_for(rc, name);
    redisReply *r = m ? rs_cmd(m, "PUBSUB SHARDNUMSUB %s", ch) : NULL;
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    return n;
}

TEST(a_waiter_is_woken_by_a_sharded_unlock_message)
{
    START_RC(rc)
    rlc_client *a = client(rc.uri, NULL), *b = client(rc.uri, NULL);
    rlc_lock *la = NULL, *lb = NULL;
    redisContext *raw = NULL;
    redisReply *r = NULL;
    pthread_t t;
    bool started = false;
    struct waiter w = {0};
    const char *name = "handoff";
    CHECK(a && b, "clients");
    la = lock(a, name, 0);
    lb = lock(b, name, 42); /* an owner id: the waiter thread takes it, this one checks */
    CHECK(la && lb, "locks");
    /* A plain client subscribed the sharded way sees the message. */
    raw = rs_connect(master_for(&rc, name));
    CHECK(raw, "raw connection");
    r = redisCommand(raw, "SSUBSCRIBE redisson_lock__channel:{%s}", name);
    CHECK(r && r->type == REDIS_REPLY_ARRAY, "SSUBSCRIBE: %s", r && r->str ? r->str : "?");
    freeReplyObject(r);
    r = NULL;

    CHECK_RC(rlc_lock_acquire(la, 0, 60000), RLC_OK);
    w = (struct waiter){lb, 20000, 60000, 0, 0, 0};
    CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0, "thread");
    started = true;
    /* The waiter's client subscribed on the slot's master with SSUBSCRIBE
     * (the raw client is the other one). */
    CHECK(WAIT_UNTIL(shard_subscribers(&rc, name) == 2, 5000), "shard subscribers: %lld",
          shard_subscribers(&rc, name));
    CHECK(!atomic_load(&w.done), "the waiter did not wait");
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    /* The release SPUBLISHed Redisson's unlock message ("0"). */
    CHECK(redisGetReply(raw, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY &&
              r->elements == 3 && strcmp(r->element[0]->str, "smessage") == 0 &&
              strcmp(r->element[2]->str, "0") == 0,
          "no smessage on the lock's channel");
    CHECK(WAIT_UNTIL(atomic_load(&w.done), 15000), "the waiter never got the lock");
    CHECK_RC(atomic_load(&w.rc), RLC_OK);
    CHECK(is_held(lb) == 1, "waiter holds it");
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
done:
    if (r)
        freeReplyObject(r);
    if (started)
        pthread_join(t, NULL);
    if (raw)
        redisFree(raw);
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rc_stop(&rc);
}

RUN_TESTS(CASE(locks_on_many_names_go_to_the_master_of_their_slot),
          CASE(watchdog_renews_holds_on_every_master),
          CASE(a_waiter_is_woken_by_a_sharded_unlock_message))
