/*
 * repro.c - deterministic reproducers of library bugs that the fault
 * scenarios ran into, one ctest each (label "fault").
 *
 * The scenarios find these by chance under load; each case here builds the
 * exact state with real servers (a paused server, a killed connection, a
 * node killed by pid, or a holder written with raw commands in Redisson's
 * layout, as test_core's interop case does) and checks what redlockc.h
 * promises. They fail until the library is fixed; tests/fault/README.md
 * says what each one shows and how it could be fixed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "check.h"
#include "redis_server.h"

#define MAXN 5

struct nodes {
    int n;
    struct redis_server s[MAXN];
    char uris[MAXN * 64];
};

static int nodes_start(struct nodes *ns, int n)
{
    size_t len = 0;
    ns->n = 0;
    ns->uris[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (rs_start(&ns->s[i], NULL) != 0)
            return -1;
        ns->n++;
        len += (size_t)snprintf(ns->uris + len, sizeof ns->uris - len, "%s%s", i ? "," : "",
                                ns->s[i].uri);
    }
    return 0;
}

static void nodes_stop(struct nodes *ns)
{
    for (int i = 0; i < ns->n; i++)
        rs_stop(&ns->s[i]);
}

#define START_NODES(ns, n)                                                    \
    struct nodes ns;                                                          \
    if (nodes_start(&ns, n) != 0) {                                           \
        fprintf(stderr, "could not start %d redis-servers\n", n);             \
        nodes_stop(&ns);                                                      \
        check_failed = 1;                                                     \
        return;                                                               \
    }

static rlc_client *client(const char *uris, const char *opts)
{
    rlc_client *c = NULL;
    if (rlc_client_new(&c, uris, opts) != RLC_OK)
        fprintf(stderr, "rlc_client_new: %s\n", rlc_errmsg());
    return c;
}

/* Handles of one explicit owner: the release runs on another thread than
 * the acquire (it must block while the test looks on), for the same owner. */
#define OWNER 7

static rlc_lock *lock(rlc_client *c, const char *name)
{
    rlc_lock *l = NULL;
    if (c && rlc_lock_new(c, name, OWNER, &l) != RLC_OK)
        fprintf(stderr, "rlc_lock_new: %s\n", rlc_errmsg());
    return l;
}

/* Another owner's hold in Redisson's layout, written with raw commands. */
static int foreign_hold(struct redis_server *s, const char *key)
{
    redisReply *r = rs_cmd(s, "HSET %s 00000000-0000-4000-8000-000000000000:1 1", key);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok && rs_int(s, "PEXPIRE %s 60000", key) == 1 ? 0 : -1;
}

/* INFO's blocked_clients: clients whose command waits (here: for
 * CLIENT PAUSE to end). */
static long long blocked_clients(struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "INFO clients");
    long long n = -1;
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "blocked_clients:") : NULL;
    if (p)
        n = atoll(p + strlen("blocked_clients:"));
    if (r)
        freeReplyObject(r);
    return n;
}

struct release_call {
    rlc_lock *l;
    int rc;
    char msg[256];
};

static void *release_thread(void *p)
{
    struct release_call *c = p;
    c->rc = rlc_lock_release(c->l);
    snprintf(c->msg, sizeof c->msg, "%s", rlc_errmsg());
    return NULL;
}

/* A release whose connection the server closes before running it fails
 * with RLC_E_CONNECT, and the library forgets the level ("one level is gone
 * from our side"), yet the field is still on the server. The owner's next
 * acquire nests into it (count 2), its release brings it back to 1 and
 * refreshes the lease: as long as the owner keeps cycling, the lock is
 * never free for anyone else, though the owner released every level it
 * was told it holds. */
TEST(release_cut_by_a_killed_connection_leaves_no_level_behind)
{
    START_NODES(ns, 1);
    struct redis_server *s = &ns.s[0];
    rlc_client *c = client(s->uri, "watchdog_timeout_ms=3000");
    rlc_lock *l = lock(c, "cut");
    pthread_t t;
    bool started = false;
    struct release_call call = {l, 99, ""};
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);

    /* Hold the release in the server's input (scripts are writes), then
     * close its connection from the server side: it never runs. */
    redisReply *r = rs_cmd(s, "CLIENT PAUSE 5000 WRITE");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE WRITE");
    freeReplyObject(r);
    CHECK(pthread_create(&t, NULL, release_thread, &call) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(blocked_clients(s) >= 1, 3000), "the release did not reach the server");
    CHECK(rs_int(s, "CLIENT KILL TYPE normal") >= 1, "the release's connection was not killed");
    pthread_join(t, NULL);
    started = false;
    r = rs_cmd(s, "CLIENT UNPAUSE");
    freeReplyObject(r);
    CHECK(call.rc == RLC_E_CONNECT, "release returned %d (%s), expected RLC_E_CONNECT", call.rc,
          call.msg);
    /* The release did not run on the killed connection. Since the attempt
     * protocol it goes out again on a new one (it names its level, so
     * running it twice is safe) and the key may already be gone; either
     * way nothing may persist once the owner goes on. */

    /* The owner goes on: acquire, release, as an application would. */
    for (int i = 0; i < 3; i++) {
        CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
        CHECK_RC(rlc_lock_release(l), RLC_OK);
    }
    long long left = rs_int(s, "EXISTS cut");
    CHECK(left == 0,
          "after 3 acquire/release cycles the owner believes it holds nothing, yet the lock "
          "exists (EXISTS %lld, PTTL %lld): the unreleased level persists while the owner "
          "cycles",
          left, rs_int(s, "PTTL cut"));
done:
    if (started)
        pthread_join(t, NULL);
    rlc_lock_free(l);
    rlc_client_free(c);
    nodes_stop(&ns);
}

/* Redlock over 5: the hold is on nodes 1-3 (4 and 5 belong to another
 * owner), then node 3 dies. The release deletes the key on 1 and 2; 4 and 5
 * answer "not ours"; 3 cannot answer. No node replied an error, yet the
 * status is RLC_E_SERVER ("Redis replied an error"). */
TEST(redlock_release_after_a_holding_node_died_is_not_a_server_error)
{
    START_NODES(ns, 5);
    rlc_client *c = client(ns.uris, NULL);
    rlc_lock *l = lock(c, "part");
    CHECK(foreign_hold(&ns.s[3], "part") == 0 && foreign_hold(&ns.s[4], "part") == 0,
          "another owner's hold on nodes 4 and 5");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    rs_kill(&ns.s[2]);
    int rc = rlc_lock_release(l);
    CHECK(rc != RLC_E_SERVER,
          "release returned RLC_E_SERVER (%s) though no node replied an error; expected "
          "RLC_E_NO_QUORUM (no quorum confirmed the release) or RLC_E_LOST",
          rlc_errmsg());
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    nodes_stop(&ns);
}

/* Redlock over 3: a node that grants attempts which then fail for lack of
 * a quorum keeps the INCRs of its token counter, so the nodes' counters
 * drift apart (under contention this happens all the time: a release
 * reaches one node first, a contender's attempt gets that node only). The
 * token is the largest counter among the nodes that said yes, so a holder
 * whose quorum excludes the node that ran ahead gets a smaller token than
 * the holder before it. redlockc.h: the token "grows with each new holder". */
TEST(redlock_fencing_tokens_grow_with_each_new_holder)
{
    START_NODES(ns, 3);
    rlc_client *c = client(ns.uris, "retry_jitter_ms=0;fencing=1");
    rlc_lock *l = lock(c, "fence");
    uint64_t first = 0, second = 0;
    bool paused = false;
    /* Another owner holds nodes 2 and 3, a quorum: our attempts get node 1
     * only, and are undone. */
    CHECK(foreign_hold(&ns.s[1], "fence") == 0 && foreign_hold(&ns.s[2], "fence") == 0,
          "another owner's hold on nodes 2 and 3");
    for (int i = 0; i < 4; i++)
        CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_NOT_ACQUIRED);
    CHECK(rs_int(&ns.s[1], "DEL fence") == 1 && rs_int(&ns.s[2], "DEL fence") == 1,
          "the other owner releases");

    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK); /* all three say yes */
    CHECK_RC(rlc_lock_fencing_token(l, &first), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    rs_pause(&ns.s[0]); /* node 1 is slow: the next quorum is nodes 2 and 3 */
    paused = true;
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &second), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(second > first, "the next holder's token is %llu, the previous holder's %llu",
          (unsigned long long)second, (unsigned long long)first);
done:
    if (paused)
        rs_resume(&ns.s[0]);
    rlc_lock_free(l);
    rlc_client_free(c);
    nodes_stop(&ns);
}

static void count_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)reason;
    atomic_fetch_add((atomic_int *)user, 1);
}

/* Redlock over 3, node 3 paused: a release that reconnects to node 3 waits
 * node_timeout + connect_timeout for it (mux.c adds the connect budget when
 * the request is queued on a closed connection). Nodes 1 and 2 deleted the
 * key at once; a watchdog round in between asks them to renew, hears "gone"
 * from a quorum and calls on_lost for a hold that is being released and
 * whose release then returns RLC_OK. */
TEST(redlock_on_lost_never_fires_for_a_hold_being_released)
{
    START_NODES(ns, 3);
    /* Renewals every second; a connection with an unanswered request older
     * than io_timeout_ms (100) is replaced on the next send. */
    rlc_client *c = client(ns.uris, "watchdog_timeout_ms=3000;node_timeout_ms=50;"
                                    "io_timeout_ms=100;connect_timeout_ms=3000");
    rlc_lock *l = lock(c, "releasing");
    atomic_int lost = 0;
    bool paused = false, started = false;
    pthread_t t;
    struct release_call call = {l, 99, ""};
    int locked = -1;
    CHECK_RC(rlc_lock_on_lost(l, count_lost, &lost), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    rs_pause(&ns.s[2]);
    paused = true;
    /* A query leaves an unanswered request on node 3's connection... */
    CHECK_RC(rlc_lock_is_locked(l, &locked), RLC_OK);
    /* ...which is stale after io_timeout_ms; nothing observable marks that,
     * so this one wait is a sleep (well before the first renewal at 1 s). */
    check_sleep_ms(150);
    CHECK(pthread_create(&t, NULL, release_thread, &call) == 0, "thread");
    started = true;
    pthread_join(t, NULL);
    started = false;
    CHECK(call.rc == RLC_OK, "release returned %d (%s), expected RLC_OK", call.rc, call.msg);
    CHECK(atomic_load(&lost) == 0,
          "on_lost ran %d time(s) while the hold was being released, and the release then "
          "returned RLC_OK",
          atomic_load(&lost));
done:
    if (started)
        pthread_join(t, NULL);
    if (paused)
        rs_resume(&ns.s[2]);
    rlc_lock_free(l);
    rlc_client_free(c);
    nodes_stop(&ns);
}

RUN_TESTS(CASE(release_cut_by_a_killed_connection_leaves_no_level_behind),
          CASE(redlock_release_after_a_holding_node_died_is_not_a_server_error),
          CASE(redlock_fencing_tokens_grow_with_each_new_holder),
          CASE(redlock_on_lost_never_fires_for_a_hold_being_released))
