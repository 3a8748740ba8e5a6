/*
 * test_engine_multi.c - the engine's multi-lock (rlc_engine_acquire_multi,
 * c/src/engine/engine_multi.c) on real servers, run by the blocking driver:
 * every name or none, waiting on a later name, reentrancy with plain
 * holds, renewals per name, cancel, Redlock with a node stopped, crossing
 * sets that must not deadlock, and a cluster's one-slot rule. Linked with
 * the library's internal archive (the driver is not public).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine_driver.h"
#include "fixture.h"
#include "redis_cluster.h"

#define UUID_A "6a1f0d2c-0000-4000-8000-00000000000a"
#define UUID_B "6a1f0d2c-0000-4000-8000-00000000000b"

#define NAME(s) s, strlen(s)

static int multi(struct edrv *d, uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                 int64_t lease_ms, struct edrv_outcome *o, int n, const char *const *names)
{
    size_t lens[8];
    for (int i = 0; i < n; i++)
        lens[i] = strlen(names[i]);
    return edrv_acquire_multi(d, names, lens, n, owner, cp, wait_ms, lease_ms, o);
}

#define MULTI(d, owner, cp, wait, lease, o, ...)                                     \
    multi(d, owner, cp, wait, lease, o,                                             \
          (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),       \
          (const char *const[]){__VA_ARGS__})

TEST(every_name_or_none_and_each_released_on_its_own)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("mb"), 1, NULL, 0, 30000, &o), RLC_OK);
    /* one name busy: nothing of the set is written */
    CHECK_RC(MULTI(d, 2, NULL, 0, 10000, &o, "mc", "ma", "mb"), RLC_NOT_ACQUIRED);
    CHECK(rs_int(&s, "EXISTS ma") == 0 && rs_int(&s, "EXISTS mc") == 0,
          "the free names were not taken");
    CHECK(field_count(&s, "mb", UUID_A, 2) == 0, "nor the busy one");
    CHECK_RC(edrv_release(d, NAME("mb"), 1, &o), RLC_OK);
    CHECK_RC(MULTI(d, 2, NULL, 0, 10000, &o, "mc", "ma", "mb", "ma"), RLC_OK);
    CHECK(o.token == 0 && o.count == 1, "no fencing token, one level: token %llu count %lld",
          (unsigned long long)o.token, (long long)o.count);
    CHECK(o.validity_ms > 8000 && o.validity_ms <= 10000, "validity %lld",
          (long long)o.validity_ms);
    const char *all[] = {"ma", "mb", "mc"};
    for (int i = 0; i < 3; i++) {
        CHECK(field_count(&s, all[i], UUID_A, 2) == 1, "%s held once (a duplicate counts once)",
              all[i]);
        CHECK(rs_int(&s, "PTTL %s", all[i]) > 8000, "%s has the lease", all[i]);
        CHECK(edrv_hold_count(d, NAME(all[i]), 2) == 1, "%s: the engine's count", all[i]);
    }
    CHECK_RC(edrv_acquire(d, NAME("ma"), 3, NULL, 0, 10000, &o), RLC_NOT_ACQUIRED);
    /* each name goes on its own */
    CHECK_RC(edrv_release(d, NAME("mb"), 2, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS mb") == 0 && rs_int(&s, "EXISTS ma") == 1, "mb alone released");
    CHECK_RC(edrv_release(d, NAME("ma"), 2, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("mc"), 2, &o), RLC_OK);
    for (int i = 0; i < 3; i++)
        CHECK(rs_int(&s, "EXISTS %s", all[i]) == 0, "%s gone", all[i]);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(bad_input_gets_a_status_and_a_message)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    const char *names[] = {"x", ""};
    size_t lens[] = {1, 0};
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire_multi(d, names, lens, 0, 1, NULL, 0, 1000, &o), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "1 to 1024"), "message: %s", rlc_errmsg());
    CHECK_RC(edrv_acquire_multi(d, names, lens, 2, 1, NULL, 0, 1000, &o), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "empty"), "message: %s", rlc_errmsg());
    CHECK_RC(edrv_acquire_multi(d, NULL, lens, 1, 1, NULL, 0, 1000, &o), RLC_E_INVAL);
    CHECK_RC(edrv_acquire_multi(d, names, lens, 1, 0, NULL, 0, 1000, &o), RLC_E_INVAL);
    CHECK_RC(edrv_acquire_multi(d, names, lens, 1, 1, NULL, 0, 1, &o), RLC_E_INVAL);
    CHECK(rs_int(&s, "DBSIZE") == 0, "nothing written");
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(a_name_held_plain_is_one_level_more_and_released_in_order)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("rx"), 4, NULL, 0, 20000, &o), RLC_OK);
    CHECK_RC(MULTI(d, 4, NULL, 0, 20000, &o, "rx", "ry"), RLC_OK);
    CHECK(field_count(&s, "rx", UUID_A, 4) == 2 && field_count(&s, "ry", UUID_A, 4) == 1,
          "rx twice, ry once");
    CHECK(edrv_hold_count(d, NAME("rx"), 4) == 2, "the engine counts rx twice");
    CHECK_RC(edrv_release(d, NAME("rx"), 4, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("ry"), 4, &o), RLC_OK);
    CHECK(field_count(&s, "rx", UUID_A, 4) == 1 && rs_int(&s, "EXISTS ry") == 0,
          "one level of rx left");
    CHECK_RC(edrv_release(d, NAME("rx"), 4, &o), RLC_OK);
    CHECK(rs_int(&s, "DBSIZE") <= 2, "only the token counters and attempts may remain: %lld",
          rs_int(&s, "DBSIZE"));
    CHECK(rs_int(&s, "EXISTS rx") == 0, "rx gone");
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* A name the owner held whose lease ran out: the set is not taken (its
 * script started a new life of that name), and nothing is left. Found by
 * the simulation (seed 91969): the engine added a level to the old hold and
 * a later release freed the key while it still claimed the other level. */
TEST(a_name_whose_lease_ran_out_ends_the_set_lost_and_leaves_nothing)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("nx"), 6, NULL, 0, 300, &o), RLC_OK);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS nx") == 0, 5000), "its lease ran out");
    CHECK_RC(MULTI(d, 6, NULL, 0, 10000, &o, "nx", "ny"), RLC_E_LOST);
    CHECK(strstr(rlc_errmsg(), "'nx' was lost"), "message: %s", rlc_errmsg());
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS nx") == 0 && rs_int(&s, "EXISTS ny") == 0, 5000),
          "the try was undone on both names");
    CHECK(edrv_validity_ms(d, NAME("nx"), 6) == 0, "nx claims no validity");
    CHECK_RC(edrv_release(d, NAME("nx"), 6, &o), RLC_E_LOST);
    CHECK_RC(MULTI(d, 6, NULL, 0, 10000, &o, "nx", "ny"), RLC_OK);
    CHECK(field_count(&s, "nx", UUID_A, 6) == 1 && field_count(&s, "ny", UUID_A, 6) == 1,
          "a fresh set");
    CHECK_RC(edrv_release(d, NAME("nx"), 6, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("ny"), 6, &o), RLC_OK);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* A waiting multi-lock acquire on its own thread. */
struct waiting {
    struct edrv *d;
    uint64_t owner;
    const struct cancel_point *cp;
    const char *a, *b;
    atomic_int status;
};

static void *waiting_thread(void *arg)
{
    struct waiting *w = arg;
    struct edrv_outcome o;
    atomic_store(&w->status, MULTI(w->d, w->owner, w->cp, 20000, 10000, &o, w->a, w->b));
    return NULL;
}

TEST(a_busy_later_name_is_looked_at_again_and_taken_when_let_go)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    pthread_t th;
    bool started = false;
    struct waiting w = {.owner = 2, .a = "wa", .b = "wb"};
    atomic_init(&w.status, 1000);
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("wb"), 1, NULL, 0, 30000, &o), RLC_OK);
    w.d = d;
    CHECK(pthread_create(&th, NULL, waiting_thread, &w) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{wa}") == 1, 5000),
          "it waits on its first name's channel");
    CHECK(atomic_load(&w.status) == 1000 && rs_int(&s, "EXISTS wa") == 0,
          "it holds nothing while it waits");
    CHECK_RC(edrv_release(d, NAME("wb"), 1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w.status) != 1000, 5000), "it ended");
    CHECK_RC(atomic_load(&w.status), RLC_OK);
    CHECK(field_count(&s, "wa", UUID_A, 2) == 1 && field_count(&s, "wb", UUID_A, 2) == 1,
          "both held");
    CHECK_RC(edrv_release(d, NAME("wa"), 2, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("wb"), 2, &o), RLC_OK);
done:
    if (started)
        pthread_join(th, NULL);
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* A later name's holder (a watchdog hold: its lease ends 30 s on) lets go:
 * its unlock message wakes the multi-lock, which watches that name's
 * channel as well as its first name's. Before, it looked again only at the
 * safety poll (1 s): the Redisson judge saw 990 ms hand-offs from
 * RedissonMultiLock. */
TEST(a_later_names_unlock_message_wakes_the_multi_lock)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    pthread_t th;
    bool started = false;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    int64_t worst = 0;
    for (int round = 0; round < 3; round++) {
        struct waiting w = {.d = d, .owner = 2, .a = "la", .b = "lb"};
        atomic_init(&w.status, 1000);
        CHECK_RC(edrv_acquire(d, NAME("lb"), 1, NULL, 0, -1, &o), RLC_OK);
        CHECK(pthread_create(&th, NULL, waiting_thread, &w) == 0, "thread");
        started = true;
        CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{lb}") == 1, 5000),
              "it watches the later name's channel (%lld subscribers)",
              channel_subscribers(&s, "redisson_lock__channel:{lb}"));
        CHECK(atomic_load(&w.status) == 1000, "it waits");
        int64_t t0 = check_now_ms();
        CHECK_RC(edrv_release(d, NAME("lb"), 1, &o), RLC_OK);
        CHECK(WAIT_UNTIL(atomic_load(&w.status) != 1000, 5000), "it ended");
        int64_t took = check_now_ms() - t0;
        worst = took > worst ? took : worst;
        CHECK_RC(atomic_load(&w.status), RLC_OK);
        pthread_join(th, NULL);
        started = false;
        CHECK_RC(edrv_release(d, NAME("la"), 2, &o), RLC_OK);
        CHECK_RC(edrv_release(d, NAME("lb"), 2, &o), RLC_OK);
    }
    printf("slowest of 3 hand-offs: %lld ms\n", (long long)worst);
    CHECK(worst < 700, "a hand-off took %lld ms: the safety poll's, not the message's",
          (long long)worst);
done:
    if (started)
        pthread_join(th, NULL);
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(cancel_ends_a_waiting_multi_lock_and_leaves_nothing_held)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    pthread_t th;
    bool started = false;
    atomic_uint_fast64_t cancels = 0;
    struct cancel_point handle = {&cancels, 0};
    struct waiting w = {.owner = 2, .cp = &handle, .a = "ca", .b = "cb"};
    atomic_init(&w.status, 1000);
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("ca"), 1, NULL, 0, 30000, &o), RLC_OK);
    w.d = d;
    CHECK(pthread_create(&th, NULL, waiting_thread, &w) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{ca}") == 1, 5000), "it waits");
    CHECK(edrv_cancel(d, &cancels) == 1, "one acquire cancelled");
    CHECK(WAIT_UNTIL(atomic_load(&w.status) != 1000, 5000), "it ended");
    CHECK_RC(atomic_load(&w.status), RLC_E_CANCELED);
    CHECK(field_count(&s, "ca", UUID_A, 2) == 0 && rs_int(&s, "EXISTS cb") == 0,
          "the cancelled owner holds nothing");
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{ca}") == 0, 5000), "unsubscribed");
    /* its places are free: the same owner takes the set at once */
    CHECK_RC(edrv_release(d, NAME("ca"), 1, &o), RLC_OK);
    CHECK_RC(MULTI(d, 2, NULL, 0, 10000, &o, "ca", "cb"), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("ca"), 2, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("cb"), 2, &o), RLC_OK);
done:
    if (started) {
        if (atomic_load(&w.status) == 1000)
            edrv_cancel(d, &cancels);
        pthread_join(th, NULL);
    }
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* Each name of a watchdog multi-lock is renewed: both outlive several
 * leases, then each goes with its own release. */
TEST(the_watchdog_renews_every_name)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "watchdog_timeout_ms=900", NULL, NULL), RLC_OK);
    CHECK_RC(MULTI(d, 5, NULL, 0, -1, &o, "dog1", "dog2"), RLC_OK);
    int64_t until = check_now_ms() + 3000; /* more than three leases */
    bool both = true;
    while (both && check_now_ms() < until)
        both = WAIT_UNTIL(check_now_ms() >= until, 100) ||
               (rs_int(&s, "EXISTS dog1") == 1 && rs_int(&s, "EXISTS dog2") == 1);
    CHECK(rs_int(&s, "EXISTS dog1") == 1 && rs_int(&s, "EXISTS dog2") == 1,
          "both names outlived three leases");
    CHECK(edrv_validity_ms(d, NAME("dog2"), 5) > 0, "still valid");
    CHECK_RC(edrv_release(d, NAME("dog1"), 5, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("dog2"), 5, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS dog1") == 0 && rs_int(&s, "EXISTS dog2") == 0, "both gone");
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(redlock_over_three_masters_takes_the_set_with_one_stopped)
{
    START_CLUSTER(cl, 3);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    bool paused = false;
    CHECK_RC(edrv_new(&d, cl.uris, UUID_A, "node_timeout_ms=300", NULL, NULL), RLC_OK);
    rs_pause(&cl.node[2]);
    paused = true;
    CHECK_RC(MULTI(d, 1, NULL, 0, 10000, &o, "r1", "r2"), RLC_OK);
    for (int i = 0; i < 2; i++)
        CHECK(field_count(&cl.node[i], "r1", UUID_A, 1) == 1 &&
                  field_count(&cl.node[i], "r2", UUID_A, 1) == 1,
              "held on running node %d", i);
    /* another client is refused the set while a quorum holds it */
    struct edrv *other = NULL;
    CHECK_RC(edrv_new(&other, cl.uris, UUID_B, "node_timeout_ms=300", NULL, NULL), RLC_OK);
    CHECK_RC(MULTI(other, 1, NULL, 0, 10000, &o, "r2", "r3"), RLC_NOT_ACQUIRED);
    edrv_free(other, 1000);
    rs_resume(&cl.node[2]);
    paused = false;
    CHECK_RC(edrv_release(d, NAME("r1"), 1, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("r2"), 1, &o), RLC_OK);
    for (int i = 0; i < 3; i++)
        CHECK(WAIT_UNTIL(rs_int(&cl.node[i], "EXISTS r1") == 0 &&
                             rs_int(&cl.node[i], "EXISTS r2") == 0 &&
                             rs_int(&cl.node[i], "EXISTS r3") == 0,
                         5000),
              "nothing left on node %d, the resumed one too (its late try undone)", i);
done:
    if (paused)
        rs_resume(&cl.node[2]);
    edrv_free(d, 1000);
    cluster_stop(&cl);
}

/* A try that a minority granted is taken back on that node, name by name:
 * node 0 grants the set (u2 is free there), nodes 1 and 2 say u2 is
 * busy; node 0 must keep nothing of it. */
TEST(a_try_without_a_quorum_is_undone_on_every_name)
{
    START_CLUSTER(cl, 3);
    struct edrv *d = NULL, *other = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, cl.uris, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&other, cl.uris, UUID_B, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(other, NAME("u2"), 1, NULL, 0, 30000, &o), RLC_OK);
    CHECK(rs_int(&cl.node[0], "DEL u2") == 1, "u2 let go on node 0 only");
    CHECK_RC(MULTI(d, 1, NULL, 0, 10000, &o, "u1", "u2"), RLC_NOT_ACQUIRED);
    CHECK(WAIT_UNTIL(rs_int(&cl.node[0], "EXISTS u1") == 0 &&
                         rs_int(&cl.node[0], "EXISTS u2") == 0,
                     5000),
          "node 0 keeps neither name: u1 %lld, u2 %lld", rs_int(&cl.node[0], "EXISTS u1"),
          rs_int(&cl.node[0], "EXISTS u2"));
    for (int i = 1; i < 3; i++)
        CHECK(field_count(&cl.node[i], "u2", UUID_B, 1) == 1 &&
                  rs_int(&cl.node[i], "EXISTS u1") == 0,
              "node %d: u2 still the other's, u1 untouched", i);
    CHECK_RC(edrv_release(other, NAME("u2"), 1, &o), RLC_OK);
done:
    edrv_free(d, 1000);
    edrv_free(other, 1000);
    cluster_stop(&cl);
}

/* Owners take {p, q} and {q, p} and q alone in a loop: sets that cross
 * must neither deadlock (in the engine's queues or on the server) nor let
 * two owners in at once. */
struct crosser {
    struct edrv *d;
    uint64_t owner;
    int kind; /* 0 {p,q}, 1 {q,p}, 2 q alone */
    atomic_int *in_p, *in_q, *overlaps, *errors, *done;
};

static void *crosser_thread(void *arg)
{
    struct crosser *c = arg;
    struct edrv_outcome o;
    for (int i = 0; i < 30; i++) {
        int rc = c->kind == 0   ? MULTI(c->d, c->owner, NULL, 10000, 10000, &o, "p", "q")
                 : c->kind == 1 ? MULTI(c->d, c->owner, NULL, 10000, 10000, &o, "q", "p")
                                : edrv_acquire(c->d, NAME("q"), c->owner, NULL, 10000, 10000, &o);
        if (rc != RLC_OK) {
            atomic_fetch_add(c->errors, 1);
            continue;
        }
        bool has_p = c->kind != 2;
        if ((has_p && atomic_fetch_add(c->in_p, 1) != 0) || atomic_fetch_add(c->in_q, 1) != 0)
            atomic_fetch_add(c->overlaps, 1);
        if (has_p)
            atomic_fetch_sub(c->in_p, 1);
        atomic_fetch_sub(c->in_q, 1);
        if (edrv_release(c->d, NAME("q"), c->owner, &o) != RLC_OK ||
            (has_p && edrv_release(c->d, NAME("p"), c->owner, &o) != RLC_OK))
            atomic_fetch_add(c->errors, 1);
        atomic_fetch_add(c->done, 1);
    }
    return NULL;
}

TEST(crossing_sets_neither_deadlock_nor_overlap)
{
    START(s);
    struct edrv *a = NULL, *b = NULL;
    enum { T = 6 };
    pthread_t th[T];
    struct crosser cr[T];
    atomic_int in_p = 0, in_q = 0, overlaps = 0, errors = 0, done = 0;
    int started = 0;
    CHECK_RC(edrv_new(&a, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&b, s.uri, UUID_B, NULL, NULL, NULL), RLC_OK);
    for (int i = 0; i < T; i++) {
        cr[i] = (struct crosser){i % 2 ? b : a, (uint64_t)i + 1, i % 3, &in_p, &in_q,
                                 &overlaps, &errors, &done};
        if (pthread_create(&th[i], NULL, crosser_thread, &cr[i]) == 0)
            started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    CHECK(started == T, "threads %d", started);
    CHECK(atomic_load(&errors) == 0, "errors %d", atomic_load(&errors));
    CHECK(atomic_load(&overlaps) == 0, "overlaps %d", atomic_load(&overlaps));
    CHECK(atomic_load(&done) == T * 30, "cycles %d", atomic_load(&done));
    CHECK(rs_int(&s, "EXISTS p") == 0 && rs_int(&s, "EXISTS q") == 0, "nothing left behind");
done:
    edrv_free(a, 1000);
    edrv_free(b, 1000);
    rs_stop(&s);
}

/* One owner's own threads: a plain acquire of tb waits (another owner has
 * it) and a multi-lock of {ta, tb} comes after it, so it queues behind
 * that wait in tb's queue (or, if it comes late, finds tb the owner's):
 * either way both end held and tb nests twice. */
struct plain_waiting {
    struct edrv *d;
    uint64_t owner;
    const char *name;
    atomic_int status;
};

static void *plain_thread(void *arg)
{
    struct plain_waiting *w = arg;
    struct edrv_outcome o;
    atomic_store(&w->status, edrv_acquire(w->d, NAME(w->name), w->owner, NULL, 20000, 10000, &o));
    return NULL;
}

TEST(the_same_owners_calls_on_a_shared_name_run_in_turn)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    pthread_t th[2];
    int started = 0;
    struct plain_waiting p = {.owner = 9, .name = "tb"};
    struct waiting w = {.owner = 9, .a = "ta", .b = "tb"};
    atomic_init(&p.status, 1000);
    atomic_init(&w.status, 1000);
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("tb"), 1, NULL, 0, 30000, &o), RLC_OK);
    p.d = w.d = d;
    CHECK(pthread_create(&th[0], NULL, plain_thread, &p) == 0, "thread");
    started++;
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{tb}") == 1, 5000), "tb waits");
    CHECK(pthread_create(&th[1], NULL, waiting_thread, &w) == 0, "thread");
    started++;
    CHECK(atomic_load(&w.status) == 1000, "the multi-lock did not get past the wait");
    CHECK_RC(edrv_release(d, NAME("tb"), 1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&p.status) != 1000 && atomic_load(&w.status) != 1000, 5000),
          "both ended");
    CHECK_RC(atomic_load(&p.status), RLC_OK);
    CHECK_RC(atomic_load(&w.status), RLC_OK);
    CHECK(edrv_hold_count(d, NAME("tb"), 9) == 2 && field_count(&s, "tb", UUID_A, 9) == 2,
          "tb nested twice: %lld", field_count(&s, "tb", UUID_A, 9));
    CHECK(field_count(&s, "ta", UUID_A, 9) == 1, "ta once");
    for (int i = 0; i < 2; i++)
        CHECK_RC(edrv_release(d, NAME("tb"), 9, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("ta"), 9, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS ta") == 0 && rs_int(&s, "EXISTS tb") == 0, "nothing left");
done:
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(a_cluster_takes_a_set_of_one_slot_and_refuses_a_set_across_slots)
{
    START_RC(rc)
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, rc.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(MULTI(d, 1, NULL, 0, 10000, &o, "alpha", "bravo"), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "hash tag"), "message: %s", rlc_errmsg());
    CHECK_RC(MULTI(d, 1, NULL, 1000, 10000, &o, "{t}alpha", "{t}bravo"), RLC_OK);
    long long held = 0;
    for (int m = 0; m < 3; m++)
        held += field_count(&rc.node[m], "{t}alpha", UUID_A, 1) +
                field_count(&rc.node[m], "{t}bravo", UUID_A, 1);
    CHECK(held == 2, "both on the slot's master: %lld", held);
    CHECK_RC(edrv_release(d, NAME("{t}alpha"), 1, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("{t}bravo"), 1, &o), RLC_OK);
done:
    edrv_free(d, 1000);
    rc_stop(&rc);
}

RUN_TESTS(CASE(every_name_or_none_and_each_released_on_its_own),
          CASE(bad_input_gets_a_status_and_a_message),
          CASE(a_name_held_plain_is_one_level_more_and_released_in_order),
          CASE(a_name_whose_lease_ran_out_ends_the_set_lost_and_leaves_nothing),
          CASE(a_busy_later_name_is_looked_at_again_and_taken_when_let_go),
          CASE(a_later_names_unlock_message_wakes_the_multi_lock),
          CASE(cancel_ends_a_waiting_multi_lock_and_leaves_nothing_held),
          CASE(the_watchdog_renews_every_name),
          CASE(redlock_over_three_masters_takes_the_set_with_one_stopped),
          CASE(a_try_without_a_quorum_is_undone_on_every_name),
          CASE(crossing_sets_neither_deadlock_nor_overlap),
          CASE(the_same_owners_calls_on_a_shared_name_run_in_turn),
          CASE(a_cluster_takes_a_set_of_one_slot_and_refuses_a_set_across_slots))
