/*
 * test_engine_cluster.c - the engine on a real Redis Cluster (3 masters, 3
 * replicas): each lock on its slot's master (MOVED followed while the map
 * is still unknown), reentrancy, a waiter in another engine woken through
 * sharded pub/sub, exclusion against the blocking API's cluster client, and
 * Redlock with the cluster as one node beside two standalone masters.
 * One cluster for the whole case: starting one takes seconds.
 */
#include <string.h>
#include <unistd.h>

#include "engine_loop.h"
#include "fixture.h"
#include "redis_cluster.h"
#include "slot.h"

#define UUID_A "6d7a1c3e-0000-4000-8000-0000000000c1"
#define UUID_B "6d7a1c3e-0000-4000-8000-0000000000c2"

static int replica_of(const struct redis_cluster *rc, int m);

/* Turns both loops until op in a is done (or ms): its outcome, or NULL. */
static const struct el_done *wait_two_loops(struct eloop *a, struct eloop *b, uint64_t op,
                                            int64_t ms)
{
    for (int64_t end = el_now() + ms;;) {
        const struct el_done *d = el_wait(a, op, 0);
        if (d || el_now() >= end)
            return d;
        el_turn(a, 5);
        el_turn(b, 5);
    }
}

/* Whether owner's field is in the lock hash on s. */
static bool field_on(const struct redis_server *s, const char *name, const char *uuid,
                     uint64_t owner)
{
    return rs_int(s, "HEXISTS %s %s:%llu", name, uuid, (unsigned long long)owner) == 1;
}

static const struct redis_server *master_for(const struct redis_cluster *rc, const char *key)
{
    int i = rc_master_of(rc, (int)slot_of(key, strlen(key)));
    return i >= 0 ? &rc->node[i] : NULL;
}

TEST(engine_routes_by_slot_wakes_through_sharded_pubsub_and_excludes_the_blocking_api)
{
    START_RC(rc)
    struct eloop A, B, R;
    struct redis_server s1, s2;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    memset(&R, 0, sizeof R);
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    rlc_client *c = NULL;
    rlc_lock *bl = NULL;
    CHECK_RC(el_init(&A, rc.uri, UUID_A, NULL), RLC_OK);
    CHECK_RC(el_init(&B, rc.uri, UUID_B, NULL), RLC_OK);

    int per_master[RC_NODES] = {0};
    for (int i = 0; i < 24; i++) {
        char name[32];
        snprintf(name, sizeof name, "ecl:%d", i);
        const struct el_done *d = NULL;
        CHECK_RC(el_acquire(&A, name, 1, 0, 5000, NULL), RLC_OK);
        CHECK_RC(el_acquire(&A, name, 1, 0, 5000, &d), RLC_OK);
        CHECK(d->count == 2, "%s: count %lld", name, (long long)d->count);
        const struct redis_server *m = master_for(&rc, name);
        CHECK(m && rs_int(m, "EXISTS %s", name) == 1, "%s is on its slot's master", name);
        per_master[rc_master_of(&rc, (int)slot_of(name, strlen(name)))]++;
        CHECK_RC(el_release(&A, name, 1), RLC_OK);
        CHECK_RC(el_release(&A, name, 1), RLC_OK);
        CHECK(rs_int(m, "EXISTS %s", name) == 0, "%s released", name);
    }
    int used = 0;
    for (int i = 0; i < RC_NODES; i++)
        used += per_master[i] > 0;
    CHECK(used == 3, "24 names over %d masters", used);

    /* A waiter in B, woken by A's release (SSUBSCRIBE / SPUBLISH). */
    const struct redis_server *m = master_for(&rc, "ecl:w");
    CHECK_RC(el_acquire(&A, "ecl:w", 1, 0, -1, NULL), RLC_OK);
    uint64_t op, rel;
    CHECK_RC(rlc_engine_acquire(B.e, "ecl:w", 5, 1, 20000, -1, el_now(), &op), RLC_OK);
    for (int i = 0; i < 400; i++) {
        el_turn(&A, 5);
        el_turn(&B, 5);
        redisReply *r = rs_cmd(m, "PUBSUB SHARDNUMSUB redisson_lock__channel:{ecl:w}");
        long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2
                          ? r->element[1]->integer : 0;
        if (r)
            freeReplyObject(r);
        if (n == 1)
            break;
    }
    CHECK(el_wait(&B, op, 0) == NULL, "B still waits");
    CHECK_RC(rlc_engine_release(A.e, "ecl:w", 5, 1, el_now(), &rel), RLC_OK);
    const struct el_done *d = NULL;
    for (int64_t end = el_now() + 10000; el_now() < end && !(d = el_wait(&B, op, 0));) {
        el_turn(&A, 5);
        el_turn(&B, 5);
    }
    CHECK(d && d->status == RLC_OK, "B got it: %d %s", d ? d->status : -100, d ? d->message : "");
    CHECK_RC(el_release(&B, "ecl:w", 1), RLC_OK);

    /* The blocking API's cluster client and the engine exclude each other. */
    c = client(rc.uri, NULL);
    bl = c ? lock(c, "ecl:x", 3) : NULL;
    CHECK(c && bl, "blocking client");
    CHECK_RC(rlc_lock_acquire(bl, 0, -1), RLC_OK);
    CHECK_RC(el_acquire(&A, "ecl:x", 1, 0, -1, NULL), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_release(bl), RLC_OK);
    CHECK_RC(el_acquire(&A, "ecl:x", 1, 0, -1, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(bl, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(el_release(&A, "ecl:x", 1), RLC_OK);

    /* Redlock over topologies: the cluster is one node beside two masters. */
    if (rs_start(&s1, NULL) != 0 || rs_start(&s2, NULL) != 0) {
        CHECK(0, "standalone servers");
    }
    char nodes[600];
    snprintf(nodes, sizeof nodes, "%s,%s,%s", rc.uri, s1.uri, s2.uri);
    CHECK_RC(el_init(&R, nodes, UUID_A, "node_timeout_ms=300"), RLC_OK);
    CHECK_RC(el_acquire(&R, "ecl:red", 1, 0, 5000, NULL), RLC_OK);
    const struct redis_server *rm = master_for(&rc, "ecl:red");
    CHECK(rm && rs_int(rm, "EXISTS ecl:red") == 1 && rs_int(&s1, "EXISTS ecl:red") == 1 &&
          rs_int(&s2, "EXISTS ecl:red") == 1, "on the cluster's master and both standalones");
    CHECK_RC(el_release(&R, "ecl:red", 1), RLC_OK);
    rs_stop(&s2);
    CHECK_RC(el_acquire(&R, "ecl:red2", 1, 0, 5000, NULL), RLC_OK); /* 2 of 3 */
    CHECK_RC(el_release(&R, "ecl:red2", 1), RLC_OK);
done:
    rlc_lock_free(bl);
    rlc_client_free(c);
    if (A.e)
        el_free(&A);
    if (B.e)
        el_free(&B);
    if (R.e)
        el_free(&R);
    rs_stop(&s1);
    rs_stop(&s2);
    rc_stop(&rc);
}

static long long keys_in_slot(const struct redis_server *s, int slot)
{
    return s ? rs_int(s, "CLUSTER COUNTKEYSINSLOT %d", slot) : -1;
}

/* A slot in the middle of a move, with some of a lock's keys on each side:
 * the source answers the acquire script TRYAGAIN (it did not run). The
 * acquire is tried again after a pause, and is granted by the new owner
 * once the move ends; it does not fail (as the blocking API's cluster
 * client does, c/src/blocking/cluster.c). */
TEST(a_half_moved_slot_is_tried_again_not_failed)
{
    START_RC(rc)
    struct eloop A;
    int rc_init = el_init(&A, rc.uri, UUID_A, "io_timeout_ms=5000;fencing=1");
    const char *name = "t{half}";
    int slot = (int)slot_of("half", 4);
    int src = rc_master_of(&rc, slot), dst = -1;
    for (int i = 1; i <= 2 && dst < 0; i++) { /* another master's slot */
        int m = rc_master_of(&rc, (slot + 5461 * i) % 16384);
        if (m >= 0 && m != src)
            dst = m;
    }
    CHECK(src >= 0 && dst >= 0, "source %d, destination %d", src, dst);
    char src_id[64], dst_id[64];
    rc_node_id(&rc.node[src], src_id, sizeof src_id);
    rc_node_id(&rc.node[dst], dst_id, sizeof dst_id);
    CHECK_RC(rc_init, RLC_OK);
    /* a cycle leaves the lock's fencing counter on the source, not the lock */
    CHECK_RC(el_acquire(&A, name, 1, 0, 5000, NULL), RLC_OK);
    CHECK_RC(el_release(&A, name, 1), RLC_OK);
    CHECK(rs_int(&rc.node[src], "EXISTS %s", name) == 0 && keys_in_slot(&rc.node[src], slot) >= 1,
          "the slot keeps %lld keys of the lock, not the lock", keys_in_slot(&rc.node[src], slot));

    redisReply *r = rs_cmd(&rc.node[dst], "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "importing");
    freeReplyObject(r);
    r = rs_cmd(&rc.node[src], "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "migrating");
    freeReplyObject(r);
    uint64_t op = 0;
    CHECK_RC(rlc_engine_acquire(A.e, name, strlen(name), 2, 5000, 5000, el_now(), &op), RLC_OK);
    const struct el_done *d = el_wait(&A, op, 300);
    CHECK(!d, "the acquire ended while the slot was half moved: %d (%s)", d ? d->status : 0,
          d ? d->message : "");
    CHECK(rlc_engine_hold_count(A.e, name, strlen(name), 2) == 0, "not held yet");

    CHECK(rc_migrate_keys(&rc.node[src], &rc.node[dst], slot) >= 1, "keys moved");
    for (int i = 0; i < RC_NODES; i++) {
        r = rs_cmd(&rc.node[i], "CLUSTER SETSLOT %d NODE %s", slot, dst_id);
        if (r)
            freeReplyObject(r); /* replicas refuse it: they follow their master */
    }
    d = el_wait(&A, op, 10000);
    CHECK(d && d->status == RLC_OK, "the acquire after the move: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK(rs_int(&rc.node[dst], "EXISTS %s", name) == 1, "held on the new owner");
    CHECK_RC(el_release(&A, name, 2), RLC_OK);
    CHECK(rs_int(&rc.node[dst], "EXISTS %s", name) == 0, "released there");
done:
    el_free(&A);
    rc_stop(&rc);
}

/* A master of rc other than src, or -1. */
static int other_master(const struct redis_cluster *rc, int src, int slot)
{
    for (int i = 1; i <= 2; i++) {
        int m = rc_master_of(rc, (slot + 5461 * i) % 16384);
        if (m >= 0 && m != src)
            return m;
    }
    return -1;
}

/* Turns L for ms (or until op ends): op's outcome, or NULL while it waits. */
static const struct el_done *turn_for(struct eloop *L, uint64_t op, int64_t ms)
{
    return el_wait(L, op, ms);
}

/* A wait rides out a slot migration (what redis-cli --cluster reshard
 * does: SETSLOT IMPORTING / MIGRATING, MIGRATE per key, SETSLOT NODE).
 * An acquire begun mid-migration of a name with no keys yet meets ASK on
 * the source, then TRYAGAIN on the importing node (a script's keys are
 * missing there), again and again until the move ends; and a waiter
 * whose lock's keys are moved while it waits meets the same once the
 * holder lets go. With the default timeouts (io_timeout_ms 1000) and a
 * 10 s wait, both are granted once the move ends, on the new master.
 * Before, the first ended RLC_E_SERVER "ASK ..." (its five hops were spent
 * within a second) or RLC_E_TIMEOUT (its round's deadline came while the
 * request was parked), though its wait had 9 s left. */
TEST(a_wait_rides_out_a_slot_migration)
{
    START_RC(rc)
    struct eloop A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    const char *name = "mig{fresh}", *held = "mig{held}";
    int slot = (int)slot_of("fresh", 5), hslot = (int)slot_of("held", 4);
    int src = rc_master_of(&rc, slot), dst = other_master(&rc, src, slot);
    int hsrc = rc_master_of(&rc, hslot), hdst = other_master(&rc, hsrc, hslot);
    CHECK(src >= 0 && dst >= 0 && hsrc >= 0 && hdst >= 0, "masters");
    CHECK_RC(el_init(&A, rc.uri, UUID_A, NULL), RLC_OK);
    CHECK_RC(el_init(&B, rc.uri, UUID_B, NULL), RLC_OK);

    /* begun mid-migration */
    CHECK(rc_begin_move(&rc, src, dst, slot) == 0, "migration begun");
    uint64_t op = 0;
    CHECK_RC(rlc_engine_acquire(A.e, name, strlen(name), 1, 10000, 10000, el_now(), &op), RLC_OK);
    const struct el_done *d = turn_for(&A, op, 1500);
    CHECK(!d, "the acquire ended mid-migration with 8 s of its wait left: %d (%s)",
          d ? d->status : 0, d ? d->message : "");
    rc_end_move(&rc, dst, slot);
    d = el_wait(&A, op, 9000);
    CHECK(d && d->status == RLC_OK, "after the move: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK(rs_int(&rc.node[dst], "EXISTS %s", name) == 1, "held on the new master");
    CHECK_RC(el_release(&A, name, 1), RLC_OK);

    /* the lock's keys move while a waiter waits */
    CHECK_RC(el_acquire(&B, held, 1, 0, 10000, NULL), RLC_OK);
    CHECK_RC(rlc_engine_acquire(A.e, held, strlen(held), 2, 10000, 10000, el_now(), &op), RLC_OK);
    d = wait_two_loops(&A, &B, op, 300);
    CHECK(!d, "the waiter ended: %d (%s)", d ? d->status : 0, d ? d->message : "");
    CHECK(rc_begin_move(&rc, hsrc, hdst, hslot) == 0, "migration begun");
    CHECK(rc_migrate_keys(&rc.node[hsrc], &rc.node[hdst], hslot) >= 1, "keys moved");
    CHECK(keys_in_slot(&rc.node[hsrc], hslot) == 0 && keys_in_slot(&rc.node[hdst], hslot) >= 1,
          "the lock's keys moved");
    uint64_t rel = 0;
    CHECK_RC(rlc_engine_release(B.e, held, strlen(held), 1, el_now(), &rel), RLC_OK);
    d = wait_two_loops(&A, &B, op, 1500);
    CHECK(!d, "the waiter ended mid-migration: %d (%s)", d ? d->status : 0, d ? d->message : "");
    rc_end_move(&rc, hdst, hslot);
    d = wait_two_loops(&A, &B, op, 9000);
    CHECK(d && d->status == RLC_OK, "the waiter after the move: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK(field_on(&rc.node[hdst], held, UUID_A, 2), "held by the waiter on the new master");
    CHECK_RC(el_release(&A, held, 2), RLC_OK);
done:
    if (A.e)
        el_free(&A);
    if (B.e)
        el_free(&B);
    rc_stop(&rc);
}

/* A multi-lock's script names every key of its names: while a migration
 * has moved some of them, the source answers TRYAGAIN (keys split). Its
 * wait rides that out and it is granted on the new master once the move
 * ends. Before, its round's deadline came while the request was parked,
 * and it ended RLC_E_TIMEOUT with its wait's time left. */
TEST(a_multi_lock_rides_out_tryagain_while_its_keys_are_split)
{
    START_RC(rc)
    struct eloop A;
    memset(&A, 0, sizeof A);
    const char *names[2] = {"a{mm}", "b{mm}"};
    size_t lens[2] = {5, 5};
    int slot = (int)slot_of("mm", 2);
    int src = rc_master_of(&rc, slot), dst = other_master(&rc, src, slot);
    CHECK(src >= 0 && dst >= 0, "masters");
    CHECK_RC(el_init(&A, rc.uri, UUID_A, "fencing=1"), RLC_OK);
    /* a cycle of each name leaves their fencing counters */
    for (int i = 0; i < 2; i++) {
        CHECK_RC(el_acquire(&A, names[i], 1, 0, 5000, NULL), RLC_OK);
        CHECK_RC(el_release(&A, names[i], 1), RLC_OK);
    }
    CHECK(rc_begin_move(&rc, src, dst, slot) == 0, "migration begun");
    /* one key of the slot moves, the others stay */
    redisReply *k = rs_cmd(&rc.node[src], "CLUSTER GETKEYSINSLOT %d 1", slot);
    CHECK(k && k->type == REDIS_REPLY_ARRAY && k->elements == 1, "a key of the slot");
    redisReply *r = rs_cmd(&rc.node[src], "MIGRATE 127.0.0.1 %d %s 0 5000", rc.node[dst].port,
                           k->element[0]->str);
    freeReplyObject(k);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "MIGRATE: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    long long left = rs_int(&rc.node[src], "CLUSTER COUNTKEYSINSLOT %d", slot);
    long long there = rs_int(&rc.node[dst], "CLUSTER COUNTKEYSINSLOT %d", slot);
    CHECK(left >= 1 && there >= 1, "keys split: %lld on the source, %lld moved", left, there);
    uint64_t op = 0;
    CHECK_RC(rlc_engine_acquire_multi(A.e, names, lens, 2, 2, 10000, 10000, el_now(), &op),
             RLC_OK);
    const struct el_done *d = turn_for(&A, op, 1500);
    CHECK(!d, "the multi-lock ended while its keys were split: %d (%s)", d ? d->status : 0,
          d ? d->message : "");
    CHECK(rc_migrate_keys(&rc.node[src], &rc.node[dst], slot) >= 1, "the rest moved");
    rc_end_move(&rc, dst, slot);
    d = el_wait(&A, op, 9000);
    CHECK(d && d->status == RLC_OK, "after the move: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK(rs_int(&rc.node[dst], "EXISTS a{mm} b{mm}") == 2, "both held on the new master");
done:
    if (A.e)
        el_free(&A);
    rc_stop(&rc);
}

/* A master that serves the lock's slot no more (CLUSTER DELSLOTS: it
 * answers CLUSTERDOWN) serves it again a second later (ADDSLOTS): a wait
 * rides that out. Before, the round's deadline came while the request was
 * parked, and the acquire ended RLC_E_TIMEOUT with 9 s of its wait left. */
TEST(a_wait_rides_out_clusterdown)
{
    START_RC(rc)
    struct eloop A;
    memset(&A, 0, sizeof A);
    const char *name = "down{d}";
    int slot = (int)slot_of("d", 1);
    int m = rc_master_of(&rc, slot);
    CHECK(m >= 0, "master");
    CHECK_RC(el_init(&A, rc.uri, UUID_A, NULL), RLC_OK);
    CHECK_RC(el_acquire(&A, "down{e}", 1, 0, 5000, NULL), RLC_OK); /* the map is known */
    CHECK_RC(el_release(&A, "down{e}", 1), RLC_OK);
    redisReply *r = rs_cmd(&rc.node[m], "CLUSTER DELSLOTS %d", slot);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "DELSLOTS");
    freeReplyObject(r);
    r = rs_cmd(&rc.node[m], "SET %s x", name);
    bool down = r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "CLUSTERDOWN", 11) == 0;
    if (r)
        freeReplyObject(r);
    CHECK(down, "the master answers CLUSTERDOWN");
    uint64_t op = 0;
    CHECK_RC(rlc_engine_acquire(A.e, name, strlen(name), 1, 10000, 10000, el_now(), &op), RLC_OK);
    const struct el_done *d = turn_for(&A, op, 1500);
    CHECK(!d, "the acquire ended on CLUSTERDOWN with 8 s of its wait left: %d (%s)",
          d ? d->status : 0, d ? d->message : "");
    r = rs_cmd(&rc.node[m], "CLUSTER ADDSLOTS %d", slot);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ADDSLOTS");
    freeReplyObject(r);
    d = el_wait(&A, op, 9000);
    CHECK(d && d->status == RLC_OK, "after ADDSLOTS: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK(rs_int(&rc.node[m], "EXISTS %s", name) == 1, "held on its master");
    CHECK_RC(el_release(&A, name, 1), RLC_OK);
done:
    if (A.e)
        el_free(&A);
    rc_stop(&rc);
}

/* sync_replicas=1 on a cluster whose lock's master has its replica frozen:
 * a write redirected there (MOVED from the seed before the map is known;
 * ASK mid-migration) is confirmed only by a WAIT on the master that ran
 * it. Before, the WAIT stayed on the first master's connection, behind the
 * copy that was redirected, and that master's own replica confirmed it:
 * RLC_OK with the lock on no replica. */
TEST(a_redirected_write_waits_for_the_replica_of_the_master_that_ran_it)
{
    START_RC(rc)
    struct eloop A;
    memset(&A, 0, sizeof A);
    /* a name whose slot is not on the first seed (node 0) */
    char name[32] = "", moved[32] = "";
    for (int i = 0; i < 100 && !name[0]; i++) {
        char n[32];
        snprintf(n, sizeof n, "sy{%d}", i);
        int m = rc_master_of(&rc, (int)slot_of(n + 3, strlen(n) - 4));
        if (m > 0)
            snprintf(name, sizeof name, "%s", n);
    }
    CHECK(name[0], "a name off the first seed");
    int slot = (int)slot_of(name + 3, strlen(name) - 4);
    int m = rc_master_of(&rc, slot), rep = replica_of(&rc, m);
    CHECK(m > 0 && rep >= 0, "master %d, replica %d", m, rep);
    CHECK_RC(el_init(&A, rc.uri, UUID_A, "sync_replicas=1;sync_timeout_ms=300"), RLC_OK);
    rs_pause(&rc.node[rep]);
    const struct el_done *d = NULL;
    CHECK_RC(el_acquire(&A, name, 1, 0, 5000, &d), RLC_E_TIMEOUT);
    CHECK(strstr(d->message, "not synced"), "after MOVED: %s", d->message);
    rs_resume(&rc.node[rep]);

    /* ASK: the hold's keys moved to a master whose replica is frozen */
    snprintf(moved, sizeof moved, "%s", name);
    int got = -100; /* a replica just resumed may take longer than a WAIT to catch up */
    for (int i = 0; i < 20 && got != RLC_OK; i++)
        got = el_acquire(&A, moved, 1, 0, 10000, &d);
    CHECK_RC(got, RLC_OK);
    int dst = other_master(&rc, m, slot), drep = dst >= 0 ? replica_of(&rc, dst) : -1;
    CHECK(dst >= 0 && drep >= 0, "destination %d, its replica %d", dst, drep);
    CHECK(rc_begin_move(&rc, m, dst, slot) == 0, "migration begun");
    CHECK(rc_migrate_keys(&rc.node[m], &rc.node[dst], slot) >= 1, "keys moved");
    rs_pause(&rc.node[drep]);
    CHECK_RC(el_acquire(&A, moved, 1, 0, 5000, &d), RLC_E_TIMEOUT); /* nested: runs after ASK */
    CHECK(strstr(d->message, "not synced"), "after ASK: %s", d->message);
    rs_resume(&rc.node[drep]);
    rc_end_move(&rc, dst, slot);
done:
    for (int i = 0; i < RC_NODES; i++)
        rs_resume(&rc.node[i]);
    if (A.e)
        el_free(&A);
    rc_stop(&rc);
}

/* Keys Redis tracks for CLIENT TRACKING readers on s. */
static long long tracked_keys(const struct redis_server *s)
{
    return rs_info_int(s, "stats", "tracking_total_keys");
}

/* Turns the loop until master s tracks more than `than` keys: 0, or -1
 * after ms. */
static int tracks_more(struct eloop *L, const struct redis_server *s, long long than, int ms)
{
    for (int64_t end = el_now() + ms; tracked_keys(s) <= than;) {
        if (el_now() >= end)
            return -1;
        el_turn(L, 10);
    }
    return 0;
}

/* Turns the loop until a lost event came or ms passed: the ms it took, or -1. */
static int64_t lost_within(struct eloop *L, int64_t ms)
{
    int64_t t0 = el_now(), end = t0 + ms;
    while (L->lost == 0 && el_now() < end)
        el_turn(L, 10);
    return L->lost ? el_now() - t0 : -1;
}

#define PUSH_MS 1000 /* "at once": a few round trips, with sanitizers and valgrind */

/* Loss push on a cluster (engine_track.c): a pair per master. A DEL on
 * each master is pushed at once (the next renewal is 10 s away with 30 s
 * leases) and only for its own lock; after a slot moves to another master
 * the hold is registered there (the MIGRATE's delete on the source makes it
 * verified again, MOVED sends the verify to the new owner), no loss is
 * reported for the move, and a DEL on the new owner is pushed too. */
TEST(loss_is_pushed_from_every_master_and_follows_a_moved_slot)
{
    START_RC(rc)
    struct eloop A;
    int rc_init = el_init(&A, rc.uri, UUID_A, "watchdog_timeout_ms=30000");
    char names[3][32];
    int master[3] = {-1, -1, -1}, found = 0;
    for (int i = 0; i < 200 && found < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "lp:%d", i);
        int m = rc_master_of(&rc, (int)slot_of(name, strlen(name)));
        bool seen = false;
        for (int k = 0; k < found; k++)
            seen |= master[k] == m;
        if (m >= 0 && !seen) {
            snprintf(names[found], sizeof names[found], "%s", name);
            master[found++] = m;
        }
    }
    CHECK(found == 3, "a name on each of the 3 masters: %d", found);
    CHECK_RC(rc_init, RLC_OK);
    long long before[3];
    for (int k = 0; k < 3; k++)
        before[k] = tracked_keys(&rc.node[master[k]]);
    for (int k = 0; k < 3; k++)
        CHECK_RC(el_acquire(&A, names[k], 1, 0, -1, NULL), RLC_OK); /* watchdog */
    for (int k = 0; k < 3; k++)
        CHECK(tracks_more(&A, &rc.node[master[k]], before[k], 3000) == 0,
              "%s is registered on its master", names[k]);

    CHECK(rs_int(&rc.node[master[0]], "DEL %s", names[0]) == 1, "DEL");
    int64_t took = lost_within(&A, PUSH_MS);
    CHECK(took >= 0, "no lost event within %d ms of DEL on a cluster master", PUSH_MS);
    CHECK(A.lost == 1 && strcmp(A.lost_name, names[0]) == 0, "lost %d: %s", A.lost, A.lost_name);
    A.lost = 0;

    /* names[1]'s slot moves to names[2]'s master */
    int slot = (int)slot_of(names[1], strlen(names[1]));
    const struct redis_server *dst = &rc.node[master[2]];
    long long dst_before = tracked_keys(dst);
    CHECK(rc_move_slot(&rc, master[1], master[2], slot) >= 1, "keys moved");
    CHECK(rs_int(dst, "EXISTS %s", names[1]) == 1, "the lock moved");
    CHECK(tracks_more(&A, dst, dst_before, 5000) == 0, "%s is registered on its new master",
          names[1]);
    CHECK(A.lost == 0, "the move was reported as a loss of %s", A.lost_name);
    CHECK(rlc_engine_hold_count(A.e, names[1], strlen(names[1]), 1) == 1, "still held");
    CHECK(rs_int(dst, "DEL %s", names[1]) == 1, "DEL on the new master");
    took = lost_within(&A, PUSH_MS);
    CHECK(took >= 0, "no lost event within %d ms of DEL after the move", PUSH_MS);
    CHECK(A.lost == 1 && strcmp(A.lost_name, names[1]) == 0, "lost %d: %s", A.lost, A.lost_name);
    CHECK(rlc_engine_hold_count(A.e, names[2], strlen(names[2]), 1) == 1, "%s still held",
          names[2]);
    CHECK_RC(el_release(&A, names[2], 1), RLC_OK);
done:
    el_free(&A);
    rc_stop(&rc);
}

/* Connections on s that a loss-push pair holds: a reader with tracking on
 * (flags t) or a subscriber (sub=1). */
static int tracking_clients(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "CLIENT LIST");
    int n = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (char *line = r->str; line && *line;) {
            char *end = strchr(line, '\n');
            char *flags = strstr(line, " flags="), *sub = strstr(line, " sub=1 ");
            bool t = false;
            for (char *f = flags ? flags + 7 : NULL; f && *f && *f != ' ' && (!end || f < end); f++)
                t |= *f == 't';
            if (t || (sub && (!end || sub < end)))
                n++;
            line = end ? end + 1 : NULL;
        }
    }
    if (r)
        freeReplyObject(r);
    return n;
}

/* The index of master m's replica in rc, or -1. */
static int replica_of(const struct redis_cluster *rc, int m)
{
    for (int i = 0; i < RC_NODES; i++) {
        redisReply *r = rs_cmd(&rc->node[i], "INFO replication");
        char want[32];
        snprintf(want, sizeof want, "master_port:%d\r", rc->node[m].port);
        bool is = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "role:slave") &&
                  strstr(r->str, want);
        if (r)
            freeReplyObject(r);
        if (is)
            return i;
    }
    return -1;
}

/* A master that a failover turned into a replica owns no slots: its
 * loss-push pair is closed (the blocking API closes it too), while the
 * hold goes on, registered on the new master. Before, the engine kept the
 * pair to the old master open until the server closed it. */
TEST(a_master_turned_replica_loses_its_tracking_pair)
{
    START_RC(rc)
    struct eloop A;
    int rc_init = el_init(&A, rc.uri, UUID_A, "watchdog_timeout_ms=3000");
    const char *name = "fo:1";
    int m = rc_master_of(&rc, (int)slot_of(name, strlen(name)));
    int r = m >= 0 ? replica_of(&rc, m) : -1;
    CHECK(m >= 0 && r >= 0, "master %d, its replica %d", m, r);
    CHECK_RC(rc_init, RLC_OK);
    long long before = tracked_keys(&rc.node[m]);
    CHECK_RC(el_acquire(&A, name, 1, 0, -1, NULL), RLC_OK); /* watchdog: renewed every 1 s */
    CHECK(tracks_more(&A, &rc.node[m], before, 3000) == 0, "registered on its master");
    CHECK(tracking_clients(&rc.node[m]) == 2, "a pair on the master: %d",
          tracking_clients(&rc.node[m]));
    redisReply *fo = rs_cmd(&rc.node[r], "CLUSTER FAILOVER");
    CHECK(fo && fo->type == REDIS_REPLY_STATUS, "CLUSTER FAILOVER: %s", fo ? fo->str : "no reply");
    freeReplyObject(fo);
    long long r_before = tracked_keys(&rc.node[r]);
    int64_t end = el_now() + 15000;
    while (el_now() < end && (tracking_clients(&rc.node[m]) > 0 ||
                              tracked_keys(&rc.node[r]) <= r_before))
        el_turn(&A, 20);
    CHECK(tracked_keys(&rc.node[r]) > r_before, "the hold registered on the new master");
    CHECK(tracking_clients(&rc.node[m]) == 0, "the old master's pair closed: %d left",
          tracking_clients(&rc.node[m]));
    CHECK(A.lost == 0, "the failover reported as a loss of %s", A.lost_name);
    CHECK(rlc_engine_hold_count(A.e, name, strlen(name), 1) == 1, "still held");
    CHECK_RC(el_release(&A, name, 1), RLC_OK);
done:
    el_free(&A);
    rc_stop(&rc);
}


/* L's connections open to port (a master's, whichever their kind). */
static int open_to(struct eloop *L, int port)
{
    int n = 0;
    for (int k = 0; k < rlc_engine_conns(L->e); k++) {
        const char *host;
        int p;
        if (L->fd[k] >= 0 && rlc_engine_conn_address(L->e, k, &host, &p, NULL) == RLC_OK &&
            p == port)
            n++;
    }
    return n;
}

/* Restarts cluster node m without persistence (SIGKILL, then the same
 * port and nodes.conf): it comes back as the master of its slots, empty,
 * before its replica could take over (node timeout 2 s). 0, or -1. */
static int restart_empty(struct redis_cluster *rc, int m)
{
    if (rs_restart(&rc->node[m]) != 0 || rc_await_stable(rc, 20000) != 0)
        return -1;
    return rs_int(&rc->node[m], "DBSIZE") == 0 ? 0 : -1;
}

/* The restart guard on a cluster (engine_guard.c): Redlock over a cluster
 * and two standalone masters (N = 3, the guard's default). L1 holds rg{g}
 * on the cluster and S2 (S1 had another owner's key, which expires); the
 * cluster's master of the slot restarts empty. L2, which saw that master
 * before, then gets yes from it and from S1: two of three, a second holder
 * while L1's lease runs. With a record per master, read in the handshake
 * of each master's command connection, the restarted master's yes does
 * not count until the longest lease has passed, and the message names it.
 * Before, a cluster node had no record: L2 got RLC_OK. */
TEST(a_restarted_cluster_master_is_kept_from_voting)
{
    START_RC(rc)
    struct eloop L1, L2;
    struct redis_server s1, s2;
    memset(&L1, 0, sizeof L1);
    memset(&L2, 0, sizeof L2);
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    CHECK(rs_start(&s1, NULL) == 0 && rs_start(&s2, NULL) == 0, "standalone servers");
    char nodes[600];
    snprintf(nodes, sizeof nodes, "%s,%s,%s", rc.uri, s1.uri, s2.uri);
    CHECK_RC(el_init(&L1, nodes, UUID_A, "node_timeout_ms=2000"), RLC_OK);
    CHECK_RC(el_init(&L2, nodes, UUID_B, "node_timeout_ms=2000"), RLC_OK);
    const char *name = "rg{g}";
    int m = rc_master_of(&rc, (int)slot_of("g", 1));
    CHECK(m >= 0, "the slot's master");
    /* each engine's connection to that master records its run id */
    CHECK_RC(el_acquire(&L1, "warm{g}", 1, 0, 5000, NULL), RLC_OK);
    CHECK_RC(el_release(&L1, "warm{g}", 1), RLC_OK);
    CHECK_RC(el_acquire(&L2, "warm{g}", 1, 0, 5000, NULL), RLC_OK);
    CHECK_RC(el_release(&L2, "warm{g}", 1), RLC_OK);
    freeReplyObject(rs_cmd(&s1, "HSET %s other:1 1", name));
    freeReplyObject(rs_cmd(&s1, "PEXPIRE %s 300", name));
    CHECK_RC(el_acquire(&L1, name, 1, 0, 30000, NULL), RLC_OK); /* the cluster and S2 */
    for (int64_t until = el_now() + 5000; rs_int(&s1, "EXISTS %s", name) != 0 && el_now() < until;)
        el_turn(&L1, 5);
    CHECK(rs_int(&s1, "EXISTS %s", name) == 0, "S1's foreign key expired");
    CHECK(restart_empty(&rc, m) == 0, "the master restarted empty");
    CHECK(rc_master_of(&rc, (int)slot_of("g", 1)) == m, "and serves the slot again");
    /* L2 reads the end of its connections to the restarted master; its
     * acquire opens a new one, whose handshake looks at the server */
    for (int64_t until = el_now() + 5000; open_to(&L2, rc.node[m].port) > 0 && el_now() < until;)
        el_turn(&L2, 5);
    const struct el_done *d = NULL;
    int got = el_acquire(&L2, name, 1, 0, 30000, &d);
    CHECK(got == RLC_NOT_ACQUIRED, "a second holder while the first is valid: %d (%s)", got,
          d ? d->message : "no outcome");
    char master[64];
    snprintf(master, sizeof master, "(master 127.0.0.1:%d) restar", rc.node[m].port);
    CHECK(strstr(d->message, master), "the message names the restarted master: %s", d->message);
done:
    if (L1.e)
        el_free(&L1);
    if (L2.e)
        el_free(&L2);
    rs_stop(&s1);
    rs_stop(&s2);
    rc_stop(&rc);
}

/* One cluster (no guard: nothing to outvote, as for one standalone
 * master): a master restarted without persistence before its replica took
 * over has forgotten the lock, and the holder hears so by loss push once
 * the master serves again (it answers CLUSTERDOWN for its first 2 s), not
 * at its next renewal (10 s away with a 30 s lease); another owner then
 * takes the lock. Before, the verify answered CLUSTERDOWN counted as no
 * answer and was never asked again: no lost event within 8 s. */
TEST(a_master_restarted_empty_reports_the_hold_lost)
{
    START_RC(rc)
    struct eloop A;
    int rc_init = el_init(&A, rc.uri, UUID_A, "watchdog_timeout_ms=30000");
    const char *name = "rs{h}";
    int m = rc_master_of(&rc, (int)slot_of("h", 1));
    CHECK(m >= 0, "the slot's master");
    CHECK_RC(rc_init, RLC_OK);
    long long before = tracked_keys(&rc.node[m]);
    CHECK_RC(el_acquire(&A, name, 1, 0, -1, NULL), RLC_OK); /* watchdog */
    CHECK(tracks_more(&A, &rc.node[m], before, 3000) == 0, "registered on its master");
    CHECK(rs_restart(&rc.node[m]) == 0, "restarted");
    /* until the master serves reads again (or the loss came) */
    for (int64_t end = el_now() + 10000; A.lost == 0 && el_now() < end;) {
        redisReply *r = rs_cmd(&rc.node[m], "EXISTS %s", name);
        bool serving = r && r->type == REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
        if (serving)
            break;
        el_turn(&A, 10);
    }
    CHECK(A.lost || rs_int(&rc.node[m], "EXISTS %s", name) == 0, "the master serves, empty");
    CHECK(A.lost || lost_within(&A, PUSH_MS) >= 0,
          "no lost event within %d ms of the restarted master serving again", PUSH_MS);
    CHECK(A.lost == 1 && strcmp(A.lost_name, name) == 0, "lost %d: %s", A.lost, A.lost_name);
    CHECK(rc_master_of(&rc, (int)slot_of("h", 1)) == m, "no failover");
    const struct el_done *d = NULL;
    int got = el_acquire(&A, name, 2, 0, 5000, &d);
    CHECK(got == RLC_OK, "another owner: %d (%s)", got, d ? d->message : "no outcome");
    CHECK_RC(el_release(&A, name, 2), RLC_OK);
done:
    el_free(&A);
    rc_stop(&rc);
}

/* Shard subscribers of channel on s (PUBSUB SHARDNUMSUB). */
static long long shard_subs(const struct redis_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB SHARDNUMSUB %s", channel);
    long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer
                                                                         : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* The id of the first client of s with a shard channel, or -1. */
static long long shard_subscriber(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "CLIENT LIST");
    long long id = -1;
    for (char *line = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; line && *line;) {
        char *end = strchr(line, '\n');
        char *ssub = strstr(line, " ssub=");
        if (ssub && (!end || ssub < end) && ssub[6] != '0' && strncmp(line, "id=", 3) == 0) {
            id = atoll(line + 3);
            break;
        }
        line = end ? end + 1 : NULL;
    }
    if (r)
        freeReplyObject(r);
    return id;
}

/* A waiter whose subscription meets CLUSTERDOWN (its master serves the
 * slot no more: CLUSTER DELSLOTS, and the subscriber connection is made
 * again meanwhile) keeps waiting: the map is asked again and the
 * subscription sent again, and once the slot is served (ADDSLOTS) the
 * waiter is subscribed and gets the lock when its holder lets go. Before,
 * the answer was taken for an ACL refusal: every waiter of the lock ended
 * RLC_E_SERVER "refused SUBSCRIBE (CLUSTERDOWN Hash slot not served)". */
TEST(a_waiter_rides_out_clusterdown_on_its_subscription)
{
    START_RC(rc)
    struct eloop A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    const char *name = "sd{w}", *channel = "redisson_lock__channel:sd{w}";
    int slot = (int)slot_of("w", 1);
    int m = rc_master_of(&rc, slot);
    CHECK(m >= 0, "master");
    CHECK_RC(el_init(&A, rc.uri, UUID_A, NULL), RLC_OK);
    CHECK_RC(el_init(&B, rc.uri, UUID_B, NULL), RLC_OK);
    CHECK_RC(el_acquire(&A, name, 1, 0, 20000, NULL), RLC_OK);
    uint64_t op = 0;
    CHECK_RC(rlc_engine_acquire(B.e, name, strlen(name), 1, 20000, 5000, el_now(), &op), RLC_OK);
    for (int64_t end = el_now() + 5000; shard_subs(&rc.node[m], channel) != 1 && el_now() < end;)
        el_turn(&B, 5);
    CHECK(shard_subs(&rc.node[m], channel) == 1, "B waits, subscribed");
    long long sub_id = shard_subscriber(&rc.node[m]);
    CHECK(sub_id > 0, "B's subscriber on the master");
    redisReply *r = rs_cmd(&rc.node[m], "CLUSTER DELSLOTS %d", slot);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "DELSLOTS");
    freeReplyObject(r);
    /* B's subscriber is made again and subscribes while the slot is not
     * served */
    CHECK(rs_int(&rc.node[m], "CLIENT KILL ID %lld", sub_id) == 1, "B's subscriber closed");
    const struct el_done *d = wait_two_loops(&B, &A, op, 1000);
    CHECK(!d, "the wait ended on CLUSTERDOWN: %d (%s)", d ? d->status : 0, d ? d->message : "");
    r = rs_cmd(&rc.node[m], "CLUSTER ADDSLOTS %d", slot);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ADDSLOTS");
    freeReplyObject(r);
    for (int64_t end = el_now() + 5000; shard_subs(&rc.node[m], channel) != 1 && el_now() < end;)
        el_turn(&B, 5);
    CHECK(shard_subs(&rc.node[m], channel) == 1, "B subscribed again after ADDSLOTS");
    CHECK(!el_wait(&B, op, 0), "B still waits");
    CHECK_RC(el_release(&A, name, 1), RLC_OK);
    d = wait_two_loops(&B, &A, op, 10000);
    CHECK(d && d->status == RLC_OK, "B got it: %d (%s)", d ? d->status : -100,
          d ? d->message : "no outcome");
    CHECK_RC(el_release(&B, name, 1), RLC_OK);
done:
    if (A.e)
        el_free(&A);
    if (B.e)
        el_free(&B);
    rc_stop(&rc);
}

RUN_TESTS(CASE(engine_routes_by_slot_wakes_through_sharded_pubsub_and_excludes_the_blocking_api),
          CASE(a_half_moved_slot_is_tried_again_not_failed),
          CASE(a_wait_rides_out_a_slot_migration),
          CASE(a_multi_lock_rides_out_tryagain_while_its_keys_are_split),
          CASE(a_wait_rides_out_clusterdown),
          CASE(a_redirected_write_waits_for_the_replica_of_the_master_that_ran_it),
          CASE(loss_is_pushed_from_every_master_and_follows_a_moved_slot),
          CASE(a_master_turned_replica_loses_its_tracking_pair),
          CASE(a_restarted_cluster_master_is_kept_from_voting),
          CASE(a_master_restarted_empty_reports_the_hold_lost),
          CASE(a_waiter_rides_out_clusterdown_on_its_subscription))
