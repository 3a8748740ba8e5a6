/*
 * test_redlock.c - one lock over N independent redis-server masters.
 *
 * Each case starts its own 3 or 5 servers. Nodes are killed (SIGKILL),
 * paused (SIGSTOP) and restarted by pid to check what Redlock promises:
 * a quorum N/2+1 decides, an outage is told apart from contention, a dead or
 * silent node costs at most node_timeout_ms, and a lock that only a minority
 * still has is reported lost.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "fixture.h"

/* How many nodes have the key. */
static int nodes_with(struct cluster *cl, const char *key)
{
    int k = 0;
    for (int i = 0; i < cl->n; i++)
        k += cl->node[i].pid > 0 && rs_int(&cl->node[i], "EXISTS %s", key) == 1;
    return k;
}

static int held(rlc_lock *l)
{
    int v = -1;
    return rlc_lock_is_held(l, &v) == RLC_OK ? v : -1;
}

TEST(acquire_writes_every_node_and_release_clears_them)
{
    START_CLUSTER(cl, 5);
    rlc_client *c = client(cl.uris, NULL);
    rlc_lock *l = lock(c, "rl", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK(nodes_with(&cl, "rl") == 5, "on %d of 5 nodes", nodes_with(&cl, "rl"));
    int64_t v = 0;
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v > 9000 && v <= 10000 - 100 - 2, "validity %lld: lease - elapsed - drift", (long long)v);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(nodes_with(&cl, "rl") == 0, "released everywhere");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

TEST(mutual_exclusion_between_clients_on_three_and_five_nodes)
{
    for (int n = 3; n <= 5; n += 2) {
        START_CLUSTER(cl, n);
        rlc_client *a = client(cl.uris, NULL), *b = client(cl.uris, NULL);
        rlc_lock *la = lock(a, "mx", 0), *lb = lock(b, "mx", 0);
        CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
        CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_NOT_ACQUIRED);
        CHECK_RC(rlc_lock_acquire(lb, 200, -1), RLC_NOT_ACQUIRED);
        CHECK(nodes_with(&cl, "mx") == n, "a's lock survived b's tries on all %d nodes", n);
        CHECK_RC(rlc_lock_release(la), RLC_OK);
        CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_OK);
        CHECK_RC(rlc_lock_release(lb), RLC_OK);
    done:
        rlc_lock_free(la);
        rlc_lock_free(lb);
        rlc_client_free(a);
        rlc_client_free(b);
        cluster_stop(&cl);
        if (check_failed)
            return;
    }
}

/* Threads of two clients increment a counter under the lock. */
struct contender {
    rlc_client *c;
    int iterations;
    volatile long *counter;
    atomic_int *inside, *overlaps, *errors;
};

static void *contend(void *p)
{
    struct contender *k = p;
    rlc_lock *l = NULL;
    if (rlc_lock_new(k->c, "shared", 0, &l) != RLC_OK) {
        atomic_fetch_add(k->errors, 1);
        return NULL;
    }
    for (int i = 0; i < k->iterations; i++) {
        int rc = rlc_lock_acquire(l, 10000, -1);
        if (rc != RLC_OK) {
            fprintf(stderr, "acquire: %d %s\n", rc, rlc_errmsg());
            atomic_fetch_add(k->errors, 1);
            continue;
        }
        if (atomic_fetch_add(k->inside, 1) != 0)
            atomic_fetch_add(k->overlaps, 1);
        long v = *k->counter;
        sched_yield();
        *k->counter = v + 1;
        atomic_fetch_sub(k->inside, 1);
        if (rlc_lock_release(l) != RLC_OK)
            atomic_fetch_add(k->errors, 1);
    }
    rlc_lock_free(l);
    return NULL;
}

static int run_contenders(const char *uris, int iterations, long *counter, int *overlaps,
                          int *errors)
{
    atomic_int inside = 0, ov = 0, err = 0;
    volatile long count = 0;
    /* Dead nodes refuse at once; the live ones get a node timeout that a run
     * under valgrind (tens of times slower) can meet: this is about
     * exclusion, not about timing. */
    const char *opts = "node_timeout_ms=1000";
    rlc_client *a = client(uris, opts), *b = client(uris, opts);
    if (!a || !b) {
        rlc_client_free(a);
        rlc_client_free(b);
        return -1;
    }
    struct contender k[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        k[i] = (struct contender){i % 2 ? a : b, iterations, &count, &inside, &ov, &err};
        pthread_create(&t[i], NULL, contend, &k[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    rlc_client_free(a);
    rlc_client_free(b);
    *counter = count;
    *overlaps = atomic_load(&ov);
    *errors = atomic_load(&err);
    return 0;
}

TEST(one_then_two_dead_nodes_of_five_keep_locks_exclusive)
{
    START_CLUSTER(cl, 5);
    for (int dead = 1; dead <= 2; dead++) {
        rs_kill(&cl.node[dead - 1]);
        long counter = 0;
        int overlaps = 0, errors = 0;
        CHECK(run_contenders(cl.uris, 40, &counter, &overlaps, &errors) == 0, "clients");
        fprintf(stderr, "%d dead: counter %ld, overlaps %d, errors %d\n", dead, counter,
                overlaps, errors);
        CHECK(errors == 0, "%d acquire/release errors with %d nodes dead", errors, dead);
        CHECK(overlaps == 0, "%d overlapping critical sections", overlaps);
        CHECK(counter == 4 * 40, "counter %ld, expected %d", counter, 4 * 40);
    }
done:
    cluster_stop(&cl);
}

TEST(three_dead_of_five_is_no_quorum_promptly_then_recovers)
{
    START_CLUSTER(cl, 5);
    /* Recovery at once after restarts: the restart guard (test_fence.c) would
     * rightly keep the restarted nodes out for a lease. */
    rlc_client *c = client(cl.uris, "restart_guard=0");
    rlc_lock *l = lock(c, "nq", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    for (int i = 0; i < 3; i++)
        rs_kill(&cl.node[i]);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 5000, -1), RLC_E_NO_QUORUM);
    int64_t took = check_now_ms() - t0;
    CHECK(took < 4 * 50 + 100, "NO_QUORUM after %lld ms (node timeout 50)", (long long)took);
    const char *msg = rlc_errmsg();
    CHECK(strstr(msg, cl.node[0].uri + 8) && strstr(msg, cl.node[2].uri + 8),
          "errmsg names the failing nodes: %s", msg);
    CHECK(!strstr(msg, cl.node[4].uri + 8), "errmsg blames a live node: %s", msg);
    int v;
    CHECK_RC(rlc_lock_is_locked(l, &v), RLC_E_NO_QUORUM);
    CHECK(nodes_with(&cl, "nq") == 0, "a failed acquire leaves nothing on the live nodes");
    for (int i = 0; i < 3; i++)
        CHECK(rs_restart(&cl.node[i]) == 0, "restart node %d", i);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(nodes_with(&cl, "nq") == 5, "acquired on all five again");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

TEST(paused_nodes_cost_at_most_one_node_timeout_per_call)
{
    START_CLUSTER(cl, 5);
    rlc_client *c = client(cl.uris, "node_timeout_ms=100");
    rlc_lock *l = lock(c, "slow", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK); /* connect everywhere */
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    rs_pause(&cl.node[1]);
    rs_pause(&cl.node[3]);
    /* Both silent nodes are waited for at the same time, not one after the
     * other: each call costs one node timeout, not two. */
    const char *ops[] = {"acquire", "extend", "release"};
    for (int i = 0; i < 3; i++) {
        int64_t t0 = check_now_ms();
        int rc = i == 0 ? rlc_lock_acquire(l, 0, 10000)
                 : i == 1 ? rlc_lock_extend(l, 10000)
                          : rlc_lock_release(l);
        int64_t took = check_now_ms() - t0;
        CHECK(rc == RLC_OK, "%s with 2 of 5 paused: %d (%s)", ops[i], rc, rlc_errmsg());
        CHECK(took >= 90 && took < 190, "%s took %lld ms; node timeout 100", ops[i],
              (long long)took);
    }
done:
    rs_resume(&cl.node[1]);
    rs_resume(&cl.node[3]);
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

static atomic_int lost_calls, lost_reason;

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)user;
    atomic_store(&lost_reason, reason);
    atomic_fetch_add(&lost_calls, 1);
}

TEST(watchdog_reports_lost_when_only_a_minority_keeps_the_keys)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "watchdog_timeout_ms=600");
    rlc_lock *l = lock(c, "minority", 0);
    atomic_store(&lost_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, on_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    /* One node losing it is tolerated: the quorum still renews. */
    CHECK(rs_int(&cl.node[0], "DEL minority") == 1, "DEL on node 0");
    check_sleep_ms(700); /* more than a full lease: renewals happened */
    CHECK(atomic_load(&lost_calls) == 0, "lost with the key on 2 of 3 nodes");
    CHECK(held(l) == 1, "still held on a quorum");
    CHECK(rs_int(&cl.node[1], "DEL minority") == 1, "DEL on node 1");
    CHECK(WAIT_UNTIL(atomic_load(&lost_calls) == 1, 2000), "on_lost did not fire");
    CHECK(atomic_load(&lost_reason) == RLC_E_LOST, "reason %d", atomic_load(&lost_reason));
    CHECK(held(l) == 0, "not held once lost");
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

TEST(watchdog_reports_lost_when_no_quorum_answers_before_validity_ends)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "watchdog_timeout_ms=600");
    rlc_lock *l = lock(c, "outage", 0);
    atomic_store(&lost_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, on_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t t0 = check_now_ms();
    rs_kill(&cl.node[0]);
    rs_kill(&cl.node[1]);
    CHECK(WAIT_UNTIL(atomic_load(&lost_calls) == 1, 3000), "on_lost did not fire");
    int64_t took = check_now_ms() - t0;
    CHECK(took < 600 + 300, "lost %lld ms after the outage; lease 600", (long long)took);
    CHECK(atomic_load(&lost_reason) == RLC_E_NO_QUORUM, "reason %d",
          atomic_load(&lost_reason));
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

TEST(reentrancy_extend_and_force_release_over_five_nodes)
{
    START_CLUSTER(cl, 5);
    rlc_client *c = client(cl.uris, NULL), *o = client(cl.uris, NULL);
    rlc_lock *l = lock(c, "re5", 0), *lo = lock(o, "re5", 0);
    int64_t n = 0;
    CHECK_RC(rlc_lock_acquire(l, 0, 2000), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 2000), RLC_OK);
    CHECK_RC(rlc_lock_hold_count(l, &n), RLC_OK);
    CHECK(n == 2, "hold count %lld", (long long)n);
    rs_kill(&cl.node[4]);
    CHECK_RC(rlc_lock_extend(l, 20000), RLC_OK);
    int64_t ttl = 0;
    CHECK_RC(rlc_lock_ttl_ms(l, &ttl), RLC_OK);
    CHECK(ttl > 19000 && ttl <= 20000, "ttl after extend %lld", (long long)ttl);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lo, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_release(lo), RLC_E_NOT_OWNER);
    CHECK_RC(rlc_lock_force_release(lo), RLC_OK);
    CHECK(nodes_with(&cl, "re5") == 0, "force release cleared the live nodes");
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_acquire(lo, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(lo), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_lock_free(lo);
    rlc_client_free(c);
    rlc_client_free(o);
    cluster_stop(&cl);
}

TEST(fencing_token_is_the_largest_counter_of_the_quorum)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "fencing=1");
    rlc_lock *l = lock(c, "ft", 0);
    uint64_t t1 = 0, t2 = 0, t3 = 0;
    freeReplyObject(rs_cmd(&cl.node[0], "SET redisson_lock_token:{ft} 100"));
    freeReplyObject(rs_cmd(&cl.node[1], "SET redisson_lock_token:{ft} 5"));
    freeReplyObject(rs_cmd(&cl.node[2], "SET redisson_lock_token:{ft} 1"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t1), RLC_OK);
    CHECK(t1 == 101, "token %llu; per-node counters became 101, 6, 2", (unsigned long long)t1);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t2), RLC_OK);
    CHECK(t2 == 102, "next holder's token %llu", (unsigned long long)t2);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    /* Each grant raised the other nodes' counters to its token, so even
     * without the node that had the largest counter the next token is
     * larger: every quorum shares a node with the previous one. */
    {
        redisReply *r = rs_cmd(&cl.node[1], "GET redisson_lock_token:{ft}");
        int raised = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "102") == 0;
        freeReplyObject(r);
        CHECK(raised, "node 1's counter was raised to the grant's token 102");
    }
    rs_kill(&cl.node[0]);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t3), RLC_OK);
    CHECK(t3 == 103, "token %llu; nodes 1 and 2 were raised to 102", (unsigned long long)t3);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

struct waiter_arg {
    rlc_lock *l;
    int64_t wait_ms, lease_ms, hold_ms;
    int rc;
    int64_t got_ms;
    atomic_int *inside, *overlaps;
};

static void *waiter(void *p)
{
    struct waiter_arg *a = p;
    a->rc = rlc_lock_acquire(a->l, a->wait_ms, a->lease_ms);
    a->got_ms = check_now_ms();
    if (a->rc == RLC_OK) {
        if (a->inside && atomic_fetch_add(a->inside, 1) != 0)
            atomic_fetch_add(a->overlaps, 1);
        check_sleep_ms(a->hold_ms);
        if (a->inside)
            atomic_fetch_sub(a->inside, 1);
        rlc_lock_release(a->l);
    }
    return NULL;
}

TEST(waiter_is_woken_by_the_unlock_message)
{
    START_CLUSTER(cl, 3);
    rlc_client *a = client(cl.uris, NULL), *b = client(cl.uris, NULL);
    rlc_lock *la = lock(a, "wake", 0), *lb = lock(b, "wake", 0);
    pthread_t t;
    struct waiter_arg w = {lb, 10000, -1, 0, -99, 0, NULL, NULL};
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    CHECK(pthread_create(&t, NULL, waiter, &w) == 0, "thread");
    {
        int subscribed = 0;
        int64_t end = check_now_ms() + 3000;
        while (subscribed < 3 && check_now_ms() < end) {
            subscribed = 0;
            for (int i = 0; i < 3; i++) {
                redisReply *r = rs_cmd(&cl.node[i], "PUBSUB NUMSUB redisson_lock__channel:{wake}");
                subscribed += r && r->elements == 2 && r->element[1]->integer == 1;
                freeReplyObject(r);
            }
            check_sleep_ms(2);
        }
        CHECK(subscribed == 3, "subscribed on %d of 3 nodes", subscribed);
    }
    check_sleep_ms(50);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    pthread_join(t, NULL);
    CHECK(w.rc == RLC_OK, "waiter: %d", w.rc);
    CHECK(w.got_ms - t0 < 200, "woke %lld ms after release", (long long)(w.got_ms - t0));
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    cluster_stop(&cl);
}

/* Two contenders start from a split: on 4 live nodes of 5, each already
 * holds two (raw holds in its own field, short leases). Neither can reach 3;
 * both must back off with jitter and one must win, then the other. */
TEST(split_vote_between_two_contenders_resolves)
{
    START_CLUSTER(cl, 5);
    rlc_client *a = client(cl.uris, "retry_jitter_ms=50"), *b = client(cl.uris, "retry_jitter_ms=50");
    rlc_lock *la = lock(a, "split", 11), *lb = lock(b, "split", 22);
    rs_kill(&cl.node[4]);
    for (int i = 0; i < 4; i++) {
        const char *uuid = rlc_client_uuid(i < 2 ? a : b);
        int owner = i < 2 ? 11 : 22;
        freeReplyObject(rs_cmd(&cl.node[i], "HINCRBY split %s:%d 1", uuid, owner));
        freeReplyObject(rs_cmd(&cl.node[i], "PEXPIRE split 300"));
    }
    atomic_int inside = 0, overlaps = 0;
    struct waiter_arg wa = {la, 5000, 300, 20, -99, 0, &inside, &overlaps};
    struct waiter_arg wb = {lb, 5000, 300, 20, -99, 0, &inside, &overlaps};
    pthread_t ta, tb;
    int64_t t0 = check_now_ms();
    pthread_create(&ta, NULL, waiter, &wa);
    pthread_create(&tb, NULL, waiter, &wb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    fprintf(stderr, "split resolved: a after %lld ms, b after %lld ms\n",
            (long long)(wa.got_ms - t0), (long long)(wb.got_ms - t0));
    CHECK(wa.rc == RLC_OK && wb.rc == RLC_OK, "a: %d, b: %d", wa.rc, wb.rc);
    CHECK(atomic_load(&overlaps) == 0, "both held it at once");
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    cluster_stop(&cl);
}

TEST(lease_shorter_than_the_round_trip_is_never_granted)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "node_timeout_ms=200");
    rlc_lock *l = lock(c, "tiny", 0);
    rs_pause(&cl.node[2]);
    /* The quorum answers at once, but the call waits ~200 ms for the paused
     * node, longer than the 50 ms lease: validity < 0, so not granted, and
     * whatever was taken is released. */
    CHECK_RC(rlc_lock_acquire(l, 0, 50), RLC_NOT_ACQUIRED);
    CHECK(nodes_with(&cl, "tiny") == 0, "nothing left behind on the live nodes");
done:
    rs_resume(&cl.node[2]);
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

RUN_TESTS(CASE(acquire_writes_every_node_and_release_clears_them),
          CASE(mutual_exclusion_between_clients_on_three_and_five_nodes),
          CASE(one_then_two_dead_nodes_of_five_keep_locks_exclusive),
          CASE(three_dead_of_five_is_no_quorum_promptly_then_recovers),
          CASE(paused_nodes_cost_at_most_one_node_timeout_per_call),
          CASE(watchdog_reports_lost_when_only_a_minority_keeps_the_keys),
          CASE(watchdog_reports_lost_when_no_quorum_answers_before_validity_ends),
          CASE(reentrancy_extend_and_force_release_over_five_nodes),
          CASE(fencing_token_is_the_largest_counter_of_the_quorum),
          CASE(waiter_is_woken_by_the_unlock_message),
          CASE(split_vote_between_two_contenders_resolves),
          CASE(lease_shorter_than_the_round_trip_is_never_granted))
