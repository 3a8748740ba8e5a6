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

/* Write holds under the watchdog, on names of every master: renewed (and a
 * waiter's try undone) by calls that name only keys of the name's slot.
 * Run by the lock family's own loop, a write level's renewal named a key
 * "" (slot 0): every master but slot 0's refused it with CROSSSLOT, and the
 * hold was lost one lease later. */
TEST(write_holds_are_renewed_on_every_master)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, "watchdog_timeout_ms=1500");
    enum { N = 12 };
    rlc_rwlock *l[N] = {0};
    int per_master[RC_NODES] = {0};
    CHECK(c, "client");
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "wwd:%d", i);
        CHECK_RC(rlc_rwlock_new(c, name, 1, &l[i]), RLC_OK);
        CHECK_RC(rlc_rwlock_write_acquire(l[i], 0, -1), RLC_OK);
        per_master[rc_master_of(&rc, (int)slot_of(name, strlen(name)))]++;
    }
    int masters = 0;
    for (int i = 0; i < RC_NODES; i++)
        masters += per_master[i] > 0;
    CHECK(masters == 3, "names reached %d masters", masters);
    /* Three leases later every write hold is still held, on its master too. */
    check_sleep_ms(4500);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "wwd:%d", i);
        int64_t v = 0, n = 0;
        CHECK_RC(rlc_rwlock_validity_ms(l[i], 1, &v), RLC_OK);
        CHECK_RC(rlc_rwlock_hold_count(l[i], 1, &n), RLC_OK);
        long long pttl = on_master(&rc, name, "PTTL %s");
        CHECK(v > 0 && n == 1 && pttl > 0 && pttl <= 1500,
              "%s: validity %lld, count %lld, PTTL %lld after 3 leases", name, (long long)v,
              (long long)n, pttl);
        CHECK_RC(rlc_rwlock_write_release(l[i]), RLC_OK);
        CHECK(on_master(&rc, name, "EXISTS %s") == 0, "%s: key left after the release", name);
    }
done:
    for (int i = 0; i < N; i++)
        rlc_rwlock_free(l[i]);
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
    char ch[96]; /* Redisson's rule (keys.c): braces unless the name has some */
    snprintf(ch, sizeof ch, strchr(name, '{') ? "redisson_lock__channel:%s"
                                              : "redisson_lock__channel:{%s}", name);
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

/* Redlock over three nodes, one of them a whole cluster. */
TEST(a_cluster_is_one_redlock_node_beside_standalone_masters)
{
    START_RC(rc)
    struct redis_server solo[2];
    memset(solo, 0, sizeof solo);
    int solos = 0;
    while (solos < 2 && rs_start(&solo[solos], NULL) == 0)
        solos++;
    char uris[512];
    snprintf(uris, sizeof uris, "%s,%s,%s", rc.uri, solo[0].uri, solo[1].uri);
    rlc_client *c = client(uris, NULL), *d = client(uris, NULL);
    rlc_lock *l = NULL, *w = NULL;
    pthread_t t;
    bool started = false;
    struct waiter wt = {0};
    CHECK(solos == 2 && c && d, "servers, clients on %s", uris);
    l = lock(c, "rl:1", 0);
    w = lock(d, "rl:1", 7);
    CHECK(l && w, "locks");
    CHECK_RC(rlc_lock_acquire(l, 0, 20000), RLC_OK);
    CHECK(on_master(&rc, "rl:1", "EXISTS %s") == 1, "not on the cluster");
    for (int i = 0; i < 2; i++)
        CHECK(rs_int(&solo[i], "EXISTS %s", "rl:1") == 1, "not on standalone %d", i);
    wt = (struct waiter){w, 20000, 20000, 0, 0, 0};
    CHECK(pthread_create(&t, NULL, waiter_main, &wt) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(shard_subscribers(&rc, "rl:1") == 1, 5000), "waiter subscribed");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&wt.done), 15000), "the waiter never got the lock");
    CHECK_RC(atomic_load(&wt.rc), RLC_OK);
    CHECK_RC(rlc_lock_release(w), RLC_OK);
done:
    if (started)
        pthread_join(t, NULL);
    rlc_lock_free(l);
    rlc_lock_free(w);
    rlc_client_free(c);
    rlc_client_free(d);
    for (int i = 0; i < solos; i++)
        rs_stop(&solo[i]);
    rc_stop(&rc);
}

/* ---- a slot migration under held and awaited locks ---------------------- */

static bool reply_ok(redisReply *r)
{
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "reply: %s\n", r && r->str ? r->str : "(none)");
    if (r)
        freeReplyObject(r);
    return ok;
}

#define MIG_LOCKS 3

struct mig_pair {
    rlc_lock *waiter_lock;
    atomic_int *holding;   /* the holder's flag: 1 while it believes it holds */
    atomic_int overlaps;
    atomic_int rc;
    atomic_int done;
};

static void *mig_waiter(void *arg)
{
    struct mig_pair *p = arg;
    int rc = rlc_lock_acquire(p->waiter_lock, 40000, -1);
    if (rc == RLC_OK && atomic_load(p->holding))
        atomic_fetch_add(&p->overlaps, 1);
    atomic_store(&p->rc, rc);
    atomic_store(&p->done, 1);
    return NULL;
}

TEST(a_slot_migration_under_held_and_awaited_locks)
{
    START_RC(rc)
    rlc_client *a = client(rc.uri, "watchdog_timeout_ms=1500");
    rlc_client *b = client(rc.uri, "watchdog_timeout_ms=1500");
    rlc_lock *hl[MIG_LOCKS] = {0}, *wl[MIG_LOCKS] = {0};
    atomic_int holding[MIG_LOCKS];
    struct mig_pair pair[MIG_LOCKS];
    pthread_t t[MIG_LOCKS];
    int threads = 0;
    const char *names[MIG_LOCKS] = {"a{mig}", "b{mig}", "c{mig}"};
    int slot = (int)slot_of("mig", 3);
    int src = rc_master_of(&rc, slot), dst = -1;
    char src_id[64], dst_id[64];
    CHECK(a && b && src >= 0, "clients, source master");
    for (int i = 0; i < RC_NODES && dst < 0; i++) { /* another master */
        int m = rc_master_of(&rc, (slot + 5461 * (i + 1)) % 16384);
        if (m >= 0 && m != src)
            dst = m;
    }
    CHECK(dst >= 0, "a destination master");
    rc_node_id(&rc.node[src], src_id, sizeof src_id);
    rc_node_id(&rc.node[dst], dst_id, sizeof dst_id);

    for (int i = 0; i < MIG_LOCKS; i++) {
        hl[i] = lock(a, names[i], 0);
        wl[i] = lock(b, names[i], 100 + (uint64_t)i);
        CHECK(hl[i] && wl[i], "locks");
        CHECK_RC(rlc_lock_acquire(hl[i], 0, -1), RLC_OK);
        atomic_init(&holding[i], 1);
        pair[i] = (struct mig_pair){wl[i], &holding[i], 0, 0, 0};
        CHECK(pthread_create(&t[i], NULL, mig_waiter, &pair[i]) == 0, "thread");
        threads++;
    }
    CHECK(WAIT_UNTIL(shard_subscribers(&rc, "a{mig}") >= 1, 5000), "waiters subscribed");

    /* The move, with pauses in each state so that renewals (every 500 ms)
     * meet the slot MIGRATING with its keys on the source, then with its
     * keys on the destination (ASK), then moved (MOVED). */
    CHECK(reply_ok(rs_cmd(&rc.node[dst], "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id)),
          "importing");
    CHECK(reply_ok(rs_cmd(&rc.node[src], "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id)),
          "migrating");
    check_sleep_ms(800);
    int moved = rc_migrate_keys(&rc.node[src], &rc.node[dst], slot);
    CHECK(moved >= MIG_LOCKS, "moved %d keys", moved);
    check_sleep_ms(800);
    for (int i = 0; i < RC_NODES; i++)
        if (rc_master_of(&rc, 0) >= 0 && rc.node[i].pid > 0) {
            redisReply *r = rs_cmd(&rc.node[i], "CLUSTER SETSLOT %d NODE %s", slot, dst_id);
            if (r)
                freeReplyObject(r); /* replicas refuse it: they follow their master */
        }
    CHECK(WAIT_UNTIL(rc_master_of(&rc, slot) == dst, 10000), "slot %d did not move", slot);
    /* Held through it all, renewed on the new master. */
    check_sleep_ms(1600);
    for (int i = 0; i < MIG_LOCKS; i++) {
        long long pttl = rs_int(&rc.node[dst], "PTTL %s", names[i]);
        CHECK(pttl > 0 && pttl <= 1500, "%s: PTTL %lld on the new master", names[i], pttl);
        CHECK(is_held(hl[i]) == 1, "%s: the holder lost it in the move", names[i]);
        CHECK(!atomic_load(&pair[i].done), "%s: the waiter got it while held (rc %d)", names[i],
              atomic_load(&pair[i].rc));
    }
    /* The waiters, now subscribed on the new master, get the locks. */
    CHECK(WAIT_UNTIL(shard_subscribers(&rc, "a{mig}") >= 1, 5000), "waiters resubscribed");
    for (int i = 0; i < MIG_LOCKS; i++) {
        atomic_store(&holding[i], 0);
        CHECK_RC(rlc_lock_release(hl[i]), RLC_OK);
    }
    for (int i = 0; i < MIG_LOCKS; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&pair[i].done), 20000), "%s: waiter never got it", names[i]);
        CHECK_RC(atomic_load(&pair[i].rc), RLC_OK);
        CHECK(atomic_load(&pair[i].overlaps) == 0, "%s: overlap", names[i]);
        CHECK(rs_int(&rc.node[dst], "EXISTS %s", names[i]) == 1, "%s: not on the new master",
              names[i]);
    }
done:
    for (int i = 0; i < MIG_LOCKS; i++)
        if (hl[i] && atomic_load(&holding[i]))
            rlc_lock_release(hl[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < MIG_LOCKS; i++) {
        if (wl[i] && is_held(wl[i]) == 1)
            rlc_lock_release(wl[i]);
        rlc_lock_free(hl[i]);
        rlc_lock_free(wl[i]);
    }
    rlc_client_free(a);
    rlc_client_free(b);
    rc_stop(&rc);
}

/* ---- a master killed, its replica promoted ------------------------------- */

#define FO_NAMES 6
#define FO_WORKERS 4

struct fo_shared {
    rlc_client *clients[2];
    char names[FO_NAMES][32];
    atomic_int occupied[FO_NAMES]; /* holders that believe they hold it now */
    atomic_int stop;
    atomic_long ok, overlaps, errors, not_acquired;
};

struct fo_worker {
    struct fo_shared *sh;
    int id;
};

static void *fo_main(void *arg)
{
    struct fo_worker *w = arg;
    struct fo_shared *sh = w->sh;
    rlc_lock *l[FO_NAMES] = {0};
    for (int i = 0; i < FO_NAMES; i++)
        l[i] = lock(sh->clients[w->id % 2], sh->names[i], 0);
    unsigned seed = (unsigned)w->id * 7919u + 1;
    while (!atomic_load(&sh->stop)) {
        int i = (int)(rand_r(&seed) % FO_NAMES);
        if (!l[i])
            continue;
        int rc = rlc_lock_acquire(l[i], 200, 3000);
        if (rc == RLC_NOT_ACQUIRED) {
            atomic_fetch_add(&sh->not_acquired, 1);
            continue;
        }
        if (rc != RLC_OK) {
            atomic_fetch_add(&sh->errors, 1);
            check_sleep_ms(20);
            continue;
        }
        atomic_fetch_add(&sh->ok, 1);
        if (atomic_fetch_add(&sh->occupied[i], 1) > 0)
            atomic_fetch_add(&sh->overlaps, 1);
        check_sleep_ms(5);
        atomic_fetch_sub(&sh->occupied[i], 1);
        rlc_lock_release(l[i]);
    }
    for (int i = 0; i < FO_NAMES; i++)
        rlc_lock_free(l[i]);
    return NULL;
}

static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* Locks on names of one master's slots, by 4 threads of 2 clients, while
 * that master is SIGKILLed and its replica promoted. Prints the figures. */
static void failover_run(const char *options, bool restart_killed)
{
    START_RC(rc)
    struct fo_shared sh;
    struct fo_worker w[FO_WORKERS];
    pthread_t t[FO_WORKERS];
    int threads = 0;
    memset(&sh, 0, sizeof sh);
    int victim = rc_master_of(&rc, 0);
    CHECK(victim >= 0, "a master");
    for (int i = 0, found = 0; found < FO_NAMES && i < 10000; i++) {
        char name[32];
        snprintf(name, sizeof name, "fo:%d", i);
        if (rc_master_of(&rc, (int)slot_of(name, strlen(name))) == victim)
            memcpy(sh.names[found++], name, sizeof name);
    }
    sh.clients[0] = client(rc.uri, options);
    sh.clients[1] = client(rc.uri, options);
    CHECK(sh.clients[0] && sh.clients[1], "clients");
    for (int i = 0; i < FO_WORKERS; i++) {
        w[i] = (struct fo_worker){&sh, i};
        CHECK(pthread_create(&t[i], NULL, fo_main, &w[i]) == 0, "thread");
        threads++;
    }
    check_sleep_ms(1000);
    long before = atomic_load(&sh.ok);
    CHECK(before > 0, "no lock taken before the kill (errors %ld)", atomic_load(&sh.errors));
    int64_t killed_ms = check_now_ms();
    rs_kill(&rc.node[victim]);
    int promoted = WAIT_UNTIL(rc_master_of(&rc, 0) >= 0 && rc_master_of(&rc, 0) != victim &&
                                  rc_await_stable(&rc, 1) == 0, 30000);
    int64_t promoted_ms = check_now_ms() - killed_ms;
    CHECK(promoted, "the replica was not promoted");
    if (restart_killed) { /* back as a replica of the new master, for WAIT */
        CHECK(rs_restart(&rc.node[victim]) == 0, "restart");
        CHECK(rc_await_stable(&rc, 30000) == 0, "cluster after the restart");
    }
    long at_promotion = atomic_load(&sh.ok);
    /* Some work after the promotion: 20 acquires or 15 s, then 1.5 s more. */
    WAIT_UNTIL(atomic_load(&sh.ok) > at_promotion + 20, 15000);
    check_sleep_ms(1500);
    long after = atomic_load(&sh.ok) - at_promotion;
    fprintf(stderr,
            "figure: failover with options '%s': %ld acquires before the kill, %ld after the "
            "promotion (%lld ms after the kill), %ld overall; overlaps %ld; failed calls %ld; "
            "not acquired %ld\n",
            options ? options : "", before, after, (long long)promoted_ms, atomic_load(&sh.ok),
            atomic_load(&sh.overlaps), atomic_load(&sh.errors), atomic_load(&sh.not_acquired));
    CHECK(after > 0, "no lock taken after the promotion (errors %ld)", atomic_load(&sh.errors));
done:
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    rlc_client_free(sh.clients[0]);
    rlc_client_free(sh.clients[1]);
    rc_stop(&rc);
}

/* The overlap count is reported, not asserted: replication is
 * asynchronous, and a grant the master acknowledged but never passed on is
 * lost with it (docs/design/cluster.md). valgrind: skipped, the failover's timing
 * (node timeout 2 s) is the cluster's, and the case proves nothing more
 * slowly; ASan and TSan run it. */
TEST(a_master_killed_and_its_replica_promoted)
{
    if (under_valgrind()) {
        fprintf(stderr, "skipped under valgrind\n");
        return;
    }
    failover_run(NULL, false);
}

TEST(a_master_killed_and_its_replica_promoted_with_sync_replicas)
{
    if (under_valgrind()) {
        fprintf(stderr, "skipped under valgrind\n");
        return;
    }
    failover_run("sync_replicas=1;sync_timeout_ms=500", true);
}

static atomic_int pushed_calls;
static char pushed_name[64];

/* user: the lock's name */
static void on_pushed(rlc_lock *l, int reason, void *user)
{
    (void)l;
    if (reason == RLC_E_LOST && atomic_load(&pushed_calls) == 0)
        snprintf(pushed_name, sizeof pushed_name, "%s", (const char *)user);
    atomic_fetch_add(&pushed_calls, 1);
}

/* Keys Redis tracks for CLIENT TRACKING readers on s. */
static long long tracked_keys(const struct redis_server *s)
{
    return rs_info_int(s, "stats", "tracking_total_keys");
}

#define PUSH_MS 1000 /* "at once": a few round trips, with sanitizers and valgrind */

/* Loss push on a cluster (tracking.c): a pair per master. A DEL on each
 * master fires on_lost at once (the next renewal is 10 s away with 30 s
 * leases), for its own lock only; after a slot moves the hold is registered
 * on its new master (MIGRATE's delete makes it verified again, MOVED sends
 * the verify there), the move is no loss, and a DEL there is pushed too. */
TEST(loss_is_pushed_from_every_master_and_follows_a_moved_slot)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, "watchdog_timeout_ms=30000");
    rlc_lock *l[3] = {NULL, NULL, NULL};
    char names[3][32];
    int master[3] = {-1, -1, -1}, found = 0;
    for (int i = 0; i < 200 && found < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "blp:%d", i);
        int m = rc_master_of(&rc, (int)slot_of(name, strlen(name)));
        bool seen = false;
        for (int k = 0; k < found; k++)
            seen |= master[k] == m;
        if (m >= 0 && !seen) {
            snprintf(names[found], sizeof names[found], "%s", name);
            master[found++] = m;
        }
    }
    CHECK(c && found == 3, "a client and a name on each of the 3 masters: %d", found);
    atomic_store(&pushed_calls, 0);
    long long before[3];
    for (int k = 0; k < 3; k++) {
        before[k] = tracked_keys(&rc.node[master[k]]);
        CHECK((l[k] = lock(c, names[k], 0)) != NULL, "lock %s", names[k]);
        CHECK_RC(rlc_lock_on_lost(l[k], on_pushed, names[k]), RLC_OK);
        CHECK_RC(rlc_lock_acquire(l[k], 5000, -1), RLC_OK);
    }
    for (int k = 0; k < 3; k++)
        CHECK(WAIT_UNTIL(tracked_keys(&rc.node[master[k]]) > before[k], 5000),
              "%s is registered on its master", names[k]);

    CHECK(rs_int(&rc.node[master[0]], "DEL %s", names[0]) == 1, "DEL");
    CHECK(WAIT_UNTIL(atomic_load(&pushed_calls) > 0, PUSH_MS),
          "no on_lost within %d ms of DEL on a cluster master", PUSH_MS);
    CHECK(atomic_load(&pushed_calls) == 1 && strcmp(pushed_name, names[0]) == 0, "lost %d: %s",
          atomic_load(&pushed_calls), pushed_name);

    /* names[1]'s slot moves to names[2]'s master */
    int slot = (int)slot_of(names[1], strlen(names[1]));
    const struct redis_server *dst = &rc.node[master[2]];
    long long dst_before = tracked_keys(dst);
    CHECK(rc_move_slot(&rc, master[1], master[2], slot) >= 1, "keys moved");
    CHECK(rs_int(dst, "EXISTS %s", names[1]) == 1, "the lock moved");
    CHECK(WAIT_UNTIL(tracked_keys(dst) > dst_before, 5000),
          "%s is registered on its new master", names[1]);
    CHECK(atomic_load(&pushed_calls) == 1, "the move was reported as a loss");
    CHECK(is_held(l[1]) == 1, "still held");
    CHECK(rs_int(dst, "DEL %s", names[1]) == 1, "DEL on the new master");
    CHECK(WAIT_UNTIL(atomic_load(&pushed_calls) > 1, PUSH_MS),
          "no on_lost within %d ms of DEL after the move", PUSH_MS);
    CHECK(is_held(l[1]) == 0 && is_held(l[2]) == 1, "the moved lock lost, the other held");
    CHECK_RC(rlc_lock_release(l[2]), RLC_OK);
done:
    for (int k = 0; k < 3; k++)
        rlc_lock_free(l[k]);
    rlc_client_free(c);
    rc_stop(&rc);
}

/* One cluster, through the blocking API: a master restarted without
 * persistence before its replica took over has forgotten the lock, and
 * on_lost fires once that master serves again (it answers CLUSTERDOWN for
 * its first 2 s), not at the next renewal (10 s away with a 30 s lease).
 * Before, the verify answered CLUSTERDOWN was never asked again: no on_lost
 * within 1 s of the master serving. */
TEST(a_master_restarted_empty_fires_on_lost_once_it_serves)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, "watchdog_timeout_ms=30000");
    rlc_lock *l = c ? lock(c, "brs{h}", 0) : NULL;
    int m = rc_master_of(&rc, (int)slot_of("h", 1));
    CHECK(c && l && m >= 0, "a client, a lock, the slot's master");
    atomic_store(&pushed_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, on_pushed, "brs{h}"), RLC_OK);
    long long before = tracked_keys(&rc.node[m]);
    CHECK_RC(rlc_lock_acquire(l, 5000, -1), RLC_OK);
    CHECK(WAIT_UNTIL(tracked_keys(&rc.node[m]) > before, 5000), "registered on its master");
    CHECK(rs_restart(&rc.node[m]) == 0, "restarted");
    CHECK(WAIT_UNTIL(atomic_load(&pushed_calls) > 0 || rs_int(&rc.node[m], "EXISTS brs{h}") == 0,
                     10000),
          "the restarted master serves again");
    CHECK(WAIT_UNTIL(atomic_load(&pushed_calls) > 0, PUSH_MS),
          "no on_lost within %d ms of the restarted master serving", PUSH_MS);
    CHECK(atomic_load(&pushed_calls) == 1 && strcmp(pushed_name, "brs{h}") == 0, "lost %d: %s",
          atomic_load(&pushed_calls), pushed_name);
    CHECK(is_held(l) == 0, "not held");
    CHECK(rc_master_of(&rc, (int)slot_of("h", 1)) == m, "no failover");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rc_stop(&rc);
}

struct writer {
    rlc_rwlock *l;
    int rc;
    int64_t got_ms;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    w->rc = rlc_rwlock_write_acquire(w->l, 10000, 5000);
    w->got_ms = check_now_ms();
    return NULL;
}

/* The lock family on a sharded cluster: its scripts publish with SPUBLISH
 * there (their twins, scripts_family.c), so a waiting writer (SSUBSCRIBEd on the
 * slot's master) is woken by the read unlock itself. Before, the message
 * went out by PUBLISH, which no shard subscriber hears, and the writer only
 * found the lock free at its next poll, up to a second later. Five
 * hand-offs each within 500 ms: by polls alone, about 1 run in 32. */
TEST(a_waiting_writer_is_woken_by_a_sharded_read_unlock)
{
    START_RC(rc)
    /* two clients: a release wakes its own client's waiters without Redis */
    rlc_client *c = client(rc.uri, NULL), *c2 = client(rc.uri, NULL);
    rlc_rwlock *r = NULL, *wl = NULL;
    const char *name = "fam-sharded";
    const struct redis_server *m = master_for(&rc, name);
    CHECK(c && c2 && m, "clients, master");
    CHECK_RC(rlc_rwlock_new(c, name, 1, &r), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c2, name, 2, &wl), RLC_OK);
    for (int round = 0; round < 5; round++) {
        CHECK_RC(rlc_rwlock_read_acquire(r, 0, 5000), RLC_OK);
        struct writer w = {wl, -100, 0};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, writer_main, &w) == 0, "writer thread");
        bool waiting = WAIT_UNTIL(({
            redisReply *n = rs_cmd(m, "PUBSUB SHARDNUMSUB redisson_rwlock:{%s}", name);
            long long k = n && n->type == REDIS_REPLY_ARRAY && n->elements == 2
                              ? n->element[1]->integer : 0;
            if (n)
                freeReplyObject(n);
            k == 1;
        }), 5000);
        check_sleep_ms(20); /* past its first try, into its wait */
        int64_t t0 = check_now_ms();
        int rel = rlc_rwlock_read_release(r);
        pthread_join(th, NULL);
        CHECK(waiting, "round %d: the writer never subscribed on the slot's master", round);
        CHECK_RC(rel, RLC_OK);
        CHECK_RC(w.rc, RLC_OK);
        CHECK(w.got_ms - t0 < 500, "round %d: the writer got it %lld ms after the read unlock",
              round, (long long)(w.got_ms - t0));
        if (getenv("HANDOFF_TRACE"))
            fprintf(stderr, "round %d: %lld ms\n", round, (long long)(w.got_ms - t0));
        CHECK_RC(rlc_rwlock_write_release(wl), RLC_OK);
    }
done:
    rlc_rwlock_free(r);
    rlc_rwlock_free(wl);
    rlc_client_free(c);
    rlc_client_free(c2);
    rc_stop(&rc);
}

/* An expirable permit is released on any master: its release names only
 * keys of the name's slot (a key "" in the call, slot 0, made every master
 * but slot 0's refuse it with CROSSSLOT, and the permit stayed out). */
TEST(expirable_permits_are_released_on_every_master)
{
    START_RC(rc)
    rlc_client *c = client(rc.uri, NULL);
    CHECK(c, "client");
    for (int i = 0; i < 12; i++) {
        char name[32], id[64] = "";
        snprintf(name, sizeof name, "psem-%d", i);
        rlc_psemaphore *p = NULL;
        int set = 0;
        CHECK_RC(rlc_psemaphore_new(c, name, &p), RLC_OK);
        CHECK_RC(rlc_psemaphore_try_set_permits(p, 1, &set), RLC_OK);
        CHECK_RC(rlc_psemaphore_acquire(p, 1, 0, 30000, id), RLC_OK);
        int rel = rlc_psemaphore_release(p, id);
        int64_t left = -1;
        int av = rlc_psemaphore_available(p, &left);
        rlc_psemaphore_free(p);
        CHECK(rel == RLC_OK, "'%s' (slot %d): release gave %d: %s", name,
              (int)slot_of(name, strlen(name)), rel, rlc_errmsg());
        CHECK(av == RLC_OK && left == 1, "'%s': %lld permits available after the release",
              name, (long long)left);
    }
done:
    rlc_client_free(c);
    rc_stop(&rc);
}

RUN_TESTS(CASE(locks_on_many_names_go_to_the_master_of_their_slot),
          CASE(watchdog_renews_holds_on_every_master),
          CASE(write_holds_are_renewed_on_every_master),
          CASE(a_waiter_is_woken_by_a_sharded_unlock_message),
          CASE(a_cluster_is_one_redlock_node_beside_standalone_masters),
          CASE(a_slot_migration_under_held_and_awaited_locks),
          CASE(a_master_killed_and_its_replica_promoted),
          CASE(a_master_killed_and_its_replica_promoted_with_sync_replicas),
          CASE(loss_is_pushed_from_every_master_and_follows_a_moved_slot),
          CASE(a_waiting_writer_is_woken_by_a_sharded_read_unlock),
          CASE(a_master_restarted_empty_fires_on_lost_once_it_serves),
          CASE(expirable_permits_are_released_on_every_master))
