/*
 * test_family_rw.c - the read-write lock's and the fair lock's promises
 * that the main lock keeps too (docs/design/attempts.md, docs/FAMILY.md), on real
 * servers:
 *   - a nested acquire counts only if it nested (A7): after the hold it
 *     nests in is gone, it is refused with RLC_E_LOST and takes nothing;
 *   - no script sets the hash's TTL below what a holder was promised;
 *   - a fair waiter that gives up, whatever ended its wait, leaves the
 *     queue, so the next live waiter is not held up by a ghost;
 *   - over N nodes a write lock follows the restart guard, as the lock does.
 * Leases are short (300-1500 ms) and every wait is bounded.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fixture.h"

/* Waits (bounded) until the server has let `key` expire. */
static int gone_from_server(const struct redis_server *s, const char *key, int64_t ms)
{
    return WAIT_UNTIL(rs_int(s, "EXISTS %s", key) == 0, ms);
}

/* ---- A7: a nested acquire counts only if it nested ------------------------- */

/* Two writers, no fault needed: the first writer's lease runs out, then it
 * takes a nested write level. That try used to make a new hold, counted as
 * nested; its release freed the key while the owner still claimed its
 * outer level, and another writer was granted beside it. */
TEST(nested_write_after_the_lease_ran_out_is_lost_not_a_second_hold)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *c2 = client(s.uri, NULL);
    rlc_rwlock *a = NULL, *b = NULL;
    int64_t n = -1;
    CHECK(c && c2, "clients");
    CHECK_RC(rlc_rwlock_new(c, "a7w", 1, &a), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c2, "a7w", 2, &b), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 300), RLC_OK);
    CHECK(gone_from_server(&s, "a7w", 2000), "the write hold did not expire (PTTL %lld)",
          rs_int(&s, "PTTL a7w"));
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 300), RLC_E_LOST);
    CHECK(rs_int(&s, "EXISTS a7w") == 0, "the refused nested try left a hash (PTTL %lld)",
          rs_int(&s, "PTTL a7w"));
    CHECK_RC(rlc_rwlock_hold_count(a, 1, &n), RLC_OK);
    CHECK(n == 0, "the lost hold still counts %lld", (long long)n);
    /* the owner's code still counts its outer level: its release says lost */
    CHECK_RC(rlc_rwlock_write_release(a), RLC_E_LOST);
    CHECK_RC(rlc_rwlock_write_acquire(b, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 300), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_rwlock_write_release(b), RLC_OK);
    /* once the lost levels are given up, a new hold begins */
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(a), RLC_OK);
done:
    rlc_rwlock_free(a);
    rlc_rwlock_free(b);
    rlc_client_free(c);
    rlc_client_free(c2);
    rs_stop(&s);
}

TEST(nested_read_after_the_hash_is_gone_is_lost)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *c2 = client(s.uri, NULL);
    rlc_rwlock *a = NULL, *b = NULL;
    int64_t n = -1;
    CHECK(c && c2, "clients");
    CHECK_RC(rlc_rwlock_new(c, "a7r", 1, &a), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c2, "a7r", 2, &b), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 300), RLC_OK);
    CHECK(gone_from_server(&s, "a7r", 2000), "the read hold did not expire");
    /* a writer takes the lock in between: a nested read would be a reader
     * beside it */
    CHECK_RC(rlc_rwlock_write_acquire(b, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 300), RLC_E_LOST);
    CHECK_RC(rlc_rwlock_write_release(b), RLC_OK);
    /* and with the lock free, it still makes no new hold in place of the old */
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 300), RLC_E_LOST);
    CHECK(rs_int(&s, "EXISTS a7r") == 0, "a refused nested read left a hash");
    CHECK_RC(rlc_rwlock_hold_count(a, 0, &n), RLC_OK);
    CHECK(n == 0, "the lost read hold counts %lld", (long long)n);
    CHECK_RC(rlc_rwlock_read_release(a), RLC_E_LOST);
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(a), RLC_OK);
done:
    rlc_rwlock_free(a);
    rlc_rwlock_free(b);
    rlc_client_free(c);
    rlc_client_free(c2);
    rs_stop(&s);
}

TEST(nested_fair_acquire_after_the_lease_ran_out_is_lost)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *c2 = client(s.uri, NULL);
    rlc_fairlock *a = NULL, *b = NULL;
    int64_t n = -1;
    CHECK(c && c2, "clients");
    CHECK_RC(rlc_fairlock_new(c, "a7f", 1, 0, &a), RLC_OK);
    CHECK_RC(rlc_fairlock_new(c2, "a7f", 2, 0, &b), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(a, 0, 300), RLC_OK);
    CHECK(gone_from_server(&s, "a7f", 2000), "the fair hold did not expire");
    CHECK_RC(rlc_fairlock_acquire(a, 0, 300), RLC_E_LOST);
    CHECK(rs_int(&s, "EXISTS a7f") == 0, "the refused nested try left a hash");
    CHECK_RC(rlc_fairlock_hold_count(a, &n), RLC_OK);
    CHECK(n == 0, "the lost hold still counts %lld", (long long)n);
    CHECK_RC(rlc_fairlock_acquire(b, 0, 5000), RLC_OK);
    CHECK_RC(rlc_fairlock_release(a), RLC_E_LOST);
    CHECK_RC(rlc_fairlock_release(b), RLC_OK);
done:
    rlc_fairlock_free(a);
    rlc_fairlock_free(b);
    rlc_client_free(c);
    rlc_client_free(c2);
    rs_stop(&s);
}

/* ---- a level's TTL never drops below what a holder was promised ------------- */

/* Releasing a nested read level recomputes the hash's PTTL from the levels'
 * timeout keys (Redisson's rule). The outer level's key was set at the
 * first acquire, the nested level renewed the whole hold's validity; the
 * recompute used to cut the hash to the outer key's time while the holder
 * still reported the nested level's validity. */
TEST(nested_read_release_keeps_the_ttl_the_holder_was_promised)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_rwlock *a = NULL;
    int64_t v = -1;
    CHECK(c, "client");
    CHECK_RC(rlc_rwlock_new(c, "ttlr", 1, &a), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 1500), RLC_OK);
    check_sleep_ms(700); /* time passes between the two levels */
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 1500), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(a), RLC_OK);
    long long pttl = rs_int(&s, "PTTL ttlr");
    CHECK_RC(rlc_rwlock_validity_ms(a, 0, &v), RLC_OK);
    CHECK(v > 0 && pttl >= v, "server PTTL %lld ms below the %lld ms the holder reports",
          pttl, (long long)v);
    CHECK_RC(rlc_rwlock_read_release(a), RLC_OK);
done:
    rlc_rwlock_free(a);
    rlc_client_free(c);
    rs_stop(&s);
}

/* The writer holds read levels with a longer lease than its write hold's:
 * a nested write level used to set the hash's PTTL to the write lease. */
TEST(nested_write_keeps_the_ttl_of_the_writers_read_levels)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_rwlock *a = NULL;
    int64_t v = -1;
    CHECK(c, "client");
    CHECK_RC(rlc_rwlock_new(c, "ttlw", 1, &a), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 400), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(a, 0, 2500), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(a, 0, 400), RLC_OK);
    long long pttl = rs_int(&s, "PTTL ttlw");
    CHECK_RC(rlc_rwlock_validity_ms(a, 0, &v), RLC_OK);
    CHECK(v > 0 && pttl >= v, "nested write: server PTTL %lld ms, read validity %lld ms",
          pttl, (long long)v);
    CHECK_RC(rlc_rwlock_write_release(a), RLC_OK);
    pttl = rs_int(&s, "PTTL ttlw");
    CHECK_RC(rlc_rwlock_validity_ms(a, 0, &v), RLC_OK);
    CHECK(v > 0 && pttl >= v, "nested write release: server PTTL %lld ms, read validity "
          "%lld ms", pttl, (long long)v);
    CHECK_RC(rlc_rwlock_write_release(a), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(a), RLC_OK);
    CHECK(rs_int(&s, "EXISTS ttlw") == 0, "the last release frees the hash");
done:
    rlc_rwlock_free(a);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- a fair waiter that gives up leaves the queue ---------------------------- */

struct try_later {
    rlc_fairlock *l;
    int64_t wait_ms;
    int rc;
};

static void *fair_try(void *arg)
{
    struct try_later *t = arg;
    t->rc = rlc_fairlock_acquire(t->l, t->wait_ms, 30000);
    return NULL;
}

/* The waiter's first try times out (the server is stopped; it runs the try
 * when it resumes, and queues the waiter). Its wait ends with that failure:
 * it used to stay queued, a ghost scored 2 x thread wait ahead, so the
 * next live waiter waited that long after the lock was free. The thread
 * wait here is 30 s: a ghost would hold the next waiter up for a minute. */
TEST(fair_waiter_whose_try_timed_out_leaves_the_queue)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *slow = client(s.uri, "io_timeout_ms=200");
    rlc_fairlock *holder = NULL, *ghost = NULL, *next = NULL;
    bool paused = false;
    CHECK(c && slow, "clients");
    CHECK_RC(rlc_fairlock_new(c, "fq", 1, 30000, &holder), RLC_OK);
    CHECK_RC(rlc_fairlock_new(slow, "fq", 2, 30000, &ghost), RLC_OK);
    CHECK_RC(rlc_fairlock_new(c, "fq", 3, 30000, &next), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(holder, 0, 30000), RLC_OK);
    /* the waiter's connection is up and its scripts loaded before the stop */
    CHECK_RC(rlc_fairlock_acquire(ghost, 0, 30000), RLC_NOT_ACQUIRED);
    rs_pause(&s);
    paused = true;
    int rc = rlc_fairlock_acquire(ghost, 300, 30000);
    rs_resume(&s);
    paused = false;
    CHECK(rc != RLC_OK && rc != RLC_NOT_ACQUIRED,
          "the try over a stopped server returned %d (%s), expected a failure", rc,
          rlc_strerror(rc));
    /* whatever the stopped server had queued has run once it answers */
    CHECK(rs_int(&s, "EXISTS fq") == 1, "the holder's hash");
    struct try_later t = {next, 2500, -1};
    pthread_t th;
    pthread_create(&th, NULL, fair_try, &t);
    CHECK(WAIT_UNTIL(rs_int(&s, "LLEN redisson_lock_queue:{fq}") >= 1, 3000),
          "the next waiter queued");
    CHECK_RC(rlc_fairlock_release(holder), RLC_OK);
    pthread_join(th, NULL);
    CHECK(t.rc == RLC_OK, "the next live waiter was not granted within 2.5 s of waiting "
          "(rc %d, %s): queue length %lld", t.rc, rlc_strerror(t.rc),
          rs_int(&s, "LLEN redisson_lock_queue:{fq}"));
    CHECK_RC(rlc_fairlock_release(next), RLC_OK);
done:
    if (paused)
        rs_resume(&s);
    rlc_fairlock_free(holder);
    rlc_fairlock_free(ghost);
    rlc_fairlock_free(next);
    rlc_client_free(c);
    rlc_client_free(slow);
    rs_stop(&s);
}

/* ---- on_lost ------------------------------------------------------------------ */

struct lost_seen {
    atomic_int n, write;
    atomic_uint_fast64_t owner;
    atomic_int reason;
};

static void on_rw_lost(rlc_rwlock *l, int write, uint64_t owner, int reason, void *user)
{
    struct lost_seen *ls = user;
    (void)l;
    atomic_store(&ls->write, write);
    atomic_store(&ls->owner, owner);
    atomic_store(&ls->reason, reason);
    atomic_fetch_add(&ls->n, 1);
}

/* A read-write lock's holds are watched as a lock's: a hold whose key is
 * gone is lost at its next renewal, and the handle's on_lost hears which
 * side it was. The family's own loop had no on_lost at all. */
TEST(a_lost_read_or_write_hold_calls_on_lost_with_its_side)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=600;loss_push=0");
    rlc_rwlock *l = NULL;
    struct lost_seen seen = {0};
    CHECK(c, "client");
    CHECK_RC(rlc_rwlock_new(c, "rwlost", 9, &l), RLC_OK);
    CHECK_RC(rlc_rwlock_on_lost(l, on_rw_lost, &seen), RLC_OK);
    for (int write = 1; write >= 0; write--) {
        atomic_store(&seen.n, 0);
        CHECK_RC(write ? rlc_rwlock_write_acquire(l, 0, -1) : rlc_rwlock_read_acquire(l, 0, -1),
                 RLC_OK);
        freeReplyObject(rs_cmd(&s, "DEL rwlost"));
        CHECK(WAIT_UNTIL(atomic_load(&seen.n) == 1, 3000), "%s hold: on_lost not called",
              write ? "write" : "read");
        CHECK(atomic_load(&seen.write) == write && atomic_load(&seen.owner) == 9 &&
                  atomic_load(&seen.reason) == RLC_E_LOST,
              "on_lost(write %d, owner %llu, reason %d)", atomic_load(&seen.write),
              (unsigned long long)atomic_load(&seen.owner), atomic_load(&seen.reason));
        int64_t v = 1;
        CHECK_RC(rlc_rwlock_validity_ms(l, write, &v), RLC_OK);
        CHECK(v == 0, "validity %lld after the loss", (long long)v);
        int rc = write ? rlc_rwlock_write_release(l) : rlc_rwlock_read_release(l);
        CHECK(rc == RLC_E_LOST, "release after the loss: %d", rc);
    }
done:
    rlc_rwlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

static void on_fair_lost(rlc_fairlock *l, uint64_t owner, int reason, void *user)
{
    struct lost_seen *ls = user;
    (void)l;
    atomic_store(&ls->owner, owner);
    atomic_store(&ls->reason, reason);
    atomic_fetch_add(&ls->n, 1);
}

/* The same for a fair lock: its holds are the engine's, renewed and
 * found lost as a lock's. */
TEST(a_lost_fair_hold_calls_on_lost)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=600;loss_push=0");
    rlc_fairlock *l = NULL;
    struct lost_seen seen = {0};
    CHECK(c, "client");
    CHECK_RC(rlc_fairlock_new(c, "fairlost", 5, 0, &l), RLC_OK);
    CHECK_RC(rlc_fairlock_on_lost(l, on_fair_lost, &seen), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(l, 0, -1), RLC_OK);
    freeReplyObject(rs_cmd(&s, "DEL fairlost"));
    CHECK(WAIT_UNTIL(atomic_load(&seen.n) == 1, 3000), "on_lost not called");
    CHECK(atomic_load(&seen.owner) == 5 && atomic_load(&seen.reason) == RLC_E_LOST,
          "on_lost(owner %llu, reason %d)", (unsigned long long)atomic_load(&seen.owner),
          atomic_load(&seen.reason));
    int64_t n = 1;
    CHECK_RC(rlc_fairlock_hold_count(l, &n), RLC_OK);
    CHECK(n == 0, "hold count %lld after the loss", (long long)n);
    CHECK_RC(rlc_fairlock_release(l), RLC_E_LOST);
done:
    rlc_fairlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- Redlock: the node-restart guard ----------------------------------------- */

/* Writer 1 holds a bare quorum {A, C} of three nodes (B had another
 * writer's hash for a moment). C restarts without persistence and forgets
 * it; B is free again. Writer 2 could take B and the empty C: two writers.
 * The write lock is an engine kind, so C does not vote until the longest
 * lease has passed since its restart, as for rlc_lock (test_fence.c). The
 * family's own loop had no guard: the second writer got a quorum. */
TEST(a_node_restarted_empty_gives_no_second_writer)
{
    START_CLUSTER(cl, 3);
    const char *opts = "node_timeout_ms=2000;restart_guard=1";
    rlc_client *c1 = client(cl.uris, opts), *c2 = client(cl.uris, opts);
    rlc_rwlock *w1 = NULL, *w2 = NULL, *l1 = NULL, *l2 = NULL;
    CHECK(c1 && c2, "clients");
    CHECK_RC(rlc_rwlock_new(c1, "rgw-warm", 1, &w1), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c2, "rgw-warm", 2, &w2), RLC_OK);
    /* each client's first calls see every node's run id */
    CHECK_RC(rlc_rwlock_write_acquire(w1, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(w1), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(w2, 0, 5000), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(w2), RLC_OK);
    freeReplyObject(rs_cmd(&cl.node[1], "HSET rgw mode write other:1:write 1"));
    freeReplyObject(rs_cmd(&cl.node[1], "PEXPIRE rgw 300"));
    CHECK_RC(rlc_rwlock_new(c1, "rgw", 1, &l1), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(l1, 0, 30000), RLC_OK);
    CHECK(gone_from_server(&cl.node[1], "rgw", 5000), "B's other writer did not expire");
    CHECK(rs_restart(&cl.node[2]) == 0 && rs_int(&cl.node[2], "EXISTS rgw") == 0,
          "C restarted empty");
    CHECK_RC(rlc_rwlock_new(c2, "rgw", 2, &l2), RLC_OK);
    int rc = rlc_rwlock_write_acquire(l2, 0, 30000);
    CHECK(rc == RLC_NOT_ACQUIRED && strstr(rlc_errmsg(), "restarted"),
          "a second writer: %d (%s)", rc, rlc_errmsg());
    /* the first writer's hold is on A alone now: its release says lost,
     * and takes it from A */
    rc = rlc_rwlock_write_release(l1);
    CHECK(rc == RLC_E_LOST, "the first writer's release: %d (%s)", rc, rlc_errmsg());
    CHECK(rs_int(&cl.node[0], "EXISTS rgw") == 0, "A keeps the first writer's level");
done:
    rlc_rwlock_free(w1);
    rlc_rwlock_free(w2);
    rlc_rwlock_free(l1);
    rlc_rwlock_free(l2);
    rlc_client_free(c1);
    rlc_client_free(c2);
    cluster_stop(&cl);
}

/* Observation 4 for every kind: with sync_replicas every family acquire
 * waits for the replicas as rlc_lock's does (the engine's round for every
 * kind), and one they did not confirm is undone. A node without replicas
 * confirms none: each acquire is refused "not synced" and keeps nothing.
 * The semaphores ran on the older stack before, which ignored the option
 * and granted. */
TEST(every_family_kind_follows_sync_replicas)
{
    START(s);
    rlc_client *c = client(s.uri, "sync_replicas=1;sync_timeout_ms=100");
    rlc_rwlock *rw = NULL;
    rlc_fairlock *fair = NULL;
    rlc_semaphore *sem = NULL;
    rlc_psemaphore *psem = NULL;
    rlc_multilock *ml = NULL;
    const char *names[2] = {"sy:m1", "sy:m2"};
    char id[RLC_PERMIT_ID_LEN + 1];
    CHECK(c, "client");
    CHECK_RC(rlc_rwlock_new(c, "sy:rw", 1, &rw), RLC_OK);
    CHECK_RC(rlc_fairlock_new(c, "sy:fair", 1, 0, &fair), RLC_OK);
    CHECK_RC(rlc_semaphore_new(c, "sy:sem", &sem), RLC_OK);
    CHECK_RC(rlc_psemaphore_new(c, "sy:psem", &psem), RLC_OK);
    CHECK_RC(rlc_multilock_new(c, names, 2, 1, &ml), RLC_OK);
    freeReplyObject(rs_cmd(&s, "SET sy:sem 2"));
    freeReplyObject(rs_cmd(&s, "SET sy:psem 2"));
    int rcs[6] = {rlc_rwlock_write_acquire(rw, 0, -1), rlc_rwlock_read_acquire(rw, 0, -1),
                  rlc_fairlock_acquire(fair, 0, -1), rlc_semaphore_acquire(sem, 1, 0),
                  rlc_psemaphore_acquire(psem, 1, 0, 30000, id),
                  rlc_multilock_acquire(ml, 0, -1)};
    static const char *const kinds[6] = {"write", "read", "fair", "semaphore", "permit semaphore",
                                         "multi-lock"};
    for (int i = 0; i < 6; i++)
        CHECK(rcs[i] == RLC_E_TIMEOUT, "%s acquire: %d (%s), expected RLC_E_TIMEOUT (not synced)",
              kinds[i], rcs[i], rlc_strerror(rcs[i]));
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS sy:rw sy:fair sy:m1 sy:m2") == 0, 3000),
          "a hash was kept");
    CHECK(WAIT_UNTIL(rs_int(&s, "INCRBY sy:sem 0") == 2 && rs_int(&s, "INCRBY sy:psem 0") == 2 &&
                         rs_int(&s, "ZCARD {sy:psem}:timeout") == 0, 3000),
          "a permit was kept: %lld, %lld", rs_int(&s, "INCRBY sy:sem 0"),
          rs_int(&s, "INCRBY sy:psem 0"));
done:
    rlc_multilock_free(ml);
    rlc_psemaphore_free(psem);
    rlc_semaphore_free(sem);
    rlc_fairlock_free(fair);
    rlc_rwlock_free(rw);
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(nested_write_after_the_lease_ran_out_is_lost_not_a_second_hold),
          CASE(nested_read_after_the_hash_is_gone_is_lost),
          CASE(nested_fair_acquire_after_the_lease_ran_out_is_lost),
          CASE(nested_read_release_keeps_the_ttl_the_holder_was_promised),
          CASE(nested_write_keeps_the_ttl_of_the_writers_read_levels),
          CASE(fair_waiter_whose_try_timed_out_leaves_the_queue),
          CASE(a_node_restarted_empty_gives_no_second_writer),
          CASE(a_lost_read_or_write_hold_calls_on_lost_with_its_side),
          CASE(a_lost_fair_hold_calls_on_lost),
          CASE(every_family_kind_follows_sync_replicas))
