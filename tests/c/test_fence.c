/*
 * test_fence.c - fencing that holds end to end: tokens over N nodes that
 * every later holder exceeds, whatever the schedule, and a resource that
 * refuses the late write of a holder whose lock expired while it paused.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

/* A node's token counter, or -1. */
static long long counter(const struct redis_server *s, const char *name)
{
    redisReply *r = rs_cmd(s, "GET redisson_lock_token:{%s}", name);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

static int nodes_storing(struct cluster *cl, const char *name, uint64_t token)
{
    int k = 0;
    for (int i = 0; i < cl->n; i++)
        k += cl->node[i].pid > 0 && counter(&cl->node[i], name) >= (long long)token;
    return k;
}

static void set_counters(struct cluster *cl, const char *name, const long long *v)
{
    for (int i = 0; i < cl->n; i++)
        freeReplyObject(rs_cmd(&cl->node[i], "SET redisson_lock_token:{%s} %lld", name, v[i]));
}

/* A string value at key, "" when missing. */
static void get_string(const struct redis_server *s, const char *key, char *out, size_t size)
{
    redisReply *r = rs_cmd(s, "GET %s", key);
    snprintf(out, size, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
    if (r)
        freeReplyObject(r);
}

/* Counters A=10, B=1, C=1, and C busy (another owner holds it): the grant
 * comes from A and B, with token 11, and B must be raised to 11 before a
 * quorum stores it. B refuses the raise (an ACL without SET). The old
 * acquire returned 11 anyway, with only A storing it; now it fails and is
 * undone, because a later quorum {B, C} would count from 1. */
TEST(acquire_fails_when_its_token_cannot_be_stored_on_a_quorum)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    long long start[3] = {10, 1, 1};
    set_counters(&cl, "fq", start);
    freeReplyObject(rs_cmd(&cl.node[2], "HSET fq other:1 1"));
    freeReplyObject(rs_cmd(&cl.node[2], "PEXPIRE fq 60000"));
    freeReplyObject(rs_cmd(&cl.node[1], "ACL SETUSER default -set"));
    c = client(cl.uris, "node_timeout_ms=2000;fencing=1");
    l = lock(c, "fq", 0);
    int rc = rlc_lock_acquire(l, 0, 30000);
    uint64_t t = 0;
    if (rc == RLC_OK)
        rlc_lock_fencing_token(l, &t);
    CHECK(rc == RLC_E_SERVER,
          "acquire returned %d (%s), token %llu stored on %d of 3 nodes; expected a refusal "
          "since B cannot store it; errmsg: %s",
          rc, rlc_strerror(rc), (unsigned long long)t, nodes_storing(&cl, "fq", t),
          rlc_errmsg());
    /* B's own refusal, as Redis ("can't run this command") or Valkey ("has no
     * permissions to run the 'set' command") words it */
    CHECK(strstr(rlc_errmsg(), "fencing token 11") &&
              (strstr(rlc_errmsg(), "can't run this command") ||
               strstr(rlc_errmsg(), "no permissions to run the 'set' command")),
          "message names the token and B's refusal: %s", rlc_errmsg());
    /* Undone as any failed round: A and B let it go (C is the other's). */
    CHECK(WAIT_UNTIL(rs_int(&cl.node[0], "EXISTS fq") == 0 &&
                         rs_int(&cl.node[1], "EXISTS fq") == 0, 10000),
          "the grant on A and B was undone");
    CHECK(rs_int(&cl.node[2], "HEXISTS fq other:1") == 1, "the other owner's hold on C stays");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

/* The schedule. Counters A=10, B=1, C=1. Holder 1 (a child process)
 * acquires, gets 11, and stops (SIGSTOP) right after acquire returns: by then
 * a quorum stores 11. A dies; holder 1's lease runs out; holder 2 takes B
 * and C and must get a larger token. Holder 1 wakes and writes to the
 * resource with its old token: refused, holder 2's value stays. */
TEST(paused_holder_is_fenced_off_by_the_next_holders_larger_token)
{
    START_CLUSTER(cl, 3);
    struct redis_server res;
    rlc_client *c = NULL, *store = NULL;
    rlc_lock *l = NULL;
    pid_t child = -1;
    int fds[2] = {-1, -1};
    if (rs_start(&res, NULL) != 0) {
        cluster_stop(&cl);
        check_failed = 1;
        return;
    }
    long long start[3] = {10, 1, 1};
    set_counters(&cl, "fp", start);
    CHECK(pipe(fds) == 0, "pipe");
    fflush(NULL);
    child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        /* Holder 1. Exit codes: 10 refused (expected), 11 applied, else a failure. */
        rlc_client *hc = client(cl.uris, "node_timeout_ms=2000;fencing=1");
        rlc_client *hs = client(res.uri, NULL);
        rlc_lock *hl = hc ? lock(hc, "fp", 0) : NULL;
        uint64_t t = 0;
        if (!hl || !hs || rlc_lock_acquire(hl, 0, 1500) != RLC_OK ||
            rlc_lock_fencing_token(hl, &t) != RLC_OK)
            _exit(2);
        raise(SIGSTOP);
        if (write(fds[1], &t, sizeof t) != sizeof t)
            _exit(3);
        int applied = -1;
        if (rlc_fenced_set(hs, "resource", "from holder 1", 13, t, &applied) != RLC_OK)
            _exit(4);
        _exit(applied ? 11 : 10);
    }
    close(fds[1]);
    fds[1] = -1;
    int status = 0;
    CHECK(waitpid(child, &status, WUNTRACED) == child && WIFSTOPPED(status),
          "holder 1 acquired and stopped (status %#x)", status);
    CHECK(nodes_storing(&cl, "fp", 11) >= 2,
          "when acquire returned, a quorum stored holder 1's token 11: A=%lld B=%lld C=%lld",
          counter(&cl.node[0], "fp"), counter(&cl.node[1], "fp"), counter(&cl.node[2], "fp"));

    rs_kill(&cl.node[0]);
    CHECK(WAIT_UNTIL(rs_int(&cl.node[1], "EXISTS fp") == 0 &&
                         rs_int(&cl.node[2], "EXISTS fp") == 0, 10000),
          "holder 1's lease ran out on B and C");
    c = client(cl.uris, "node_timeout_ms=200;fencing=1");
    store = client(res.uri, NULL);
    l = lock(c, "fp", 0);
    uint64_t t2 = 0;
    CHECK_RC(rlc_lock_acquire(l, 0, 30000), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t2), RLC_OK);
    CHECK(t2 > 11, "holder 2's token %llu is larger than holder 1's 11", (unsigned long long)t2);
    int applied = -1;
    CHECK_RC(rlc_fenced_set(store, "resource", "from holder 2", 13, t2, &applied), RLC_OK);
    CHECK(applied == 1, "holder 2's write applied");

    kill(child, SIGCONT);
    uint64_t t1 = 0;
    CHECK(read(fds[0], &t1, sizeof t1) == sizeof t1 && t1 == 11, "holder 1's token %llu",
          (unsigned long long)t1);
    CHECK(waitpid(child, &status, 0) == child, "holder 1 ended");
    child = -1;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 10,
          "holder 1's late write was refused (exit %d; 11 = applied)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    char v[64];
    get_string(&res, "resource", v, sizeof v);
    CHECK(strcmp(v, "from holder 2") == 0, "the resource keeps holder 2's value, saw '%s'", v);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    rlc_lock_free(l);
    rlc_client_free(c);
    rlc_client_free(store);
    rs_stop(&res);
    cluster_stop(&cl);
}

/* Equal counters on the granting nodes: the token is stored already, so no
 * extra round trip is sent (the token_floor script is never called). */
TEST(agreeing_counters_cost_no_extra_round_trip)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "fencing=1");
    rlc_lock *l = lock(c, "fe", 0);
    uint64_t t = 0;
    for (int i = 0; i < 3; i++) {
        freeReplyObject(rs_cmd(&cl.node[i], "SET redisson_lock_token:{fe} 41"));
        freeReplyObject(rs_cmd(&cl.node[i], "CONFIG RESETSTAT"));
    }
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t), RLC_OK);
    CHECK(t == 42, "token %llu", (unsigned long long)t);
    for (int i = 0; i < 3; i++) {
        redisReply *r = rs_cmd(&cl.node[i], "INFO commandstats");
        int evals = 0;
        const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_evalsha:calls=") : NULL;
        if (p)
            evals = atoi(p + strlen("cmdstat_evalsha:calls="));
        if (r)
            freeReplyObject(r);
        CHECK(evals <= 1, "node %d ran %d EVALSHA calls for one acquire", i, evals);
    }
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

TEST(fenced_set_applies_equal_or_larger_tokens_and_refuses_smaller)
{
    struct redis_server s;
    if (rs_start(&s, NULL) != 0) {
        check_failed = 1;
        return;
    }
    rlc_client *c = client(s.uri, NULL), *pc = client(s.uri, "key_prefix=app:");
    int applied = -1;
    char v[64];
    rlc_lock *l = lock(c, "acct", 0);
    int locked = 0;
    CHECK_RC(rlc_lock_is_locked(l, &locked), RLC_OK); /* the client's connection is up */
    long long conns = server_connections(&s);
    CHECK_RC(rlc_fenced_set(c, "acct", "one", 3, 5, &applied), RLC_OK);
    CHECK(applied == 1, "first write applied");
    /* on the connection the locks use: none of its own */
    /* awaited: the server may still list a connection of ours it is closing */
    CHECK(WAIT_UNTIL(server_connections(&s) == conns, 2000),
          "the fenced write opened %lld connections", server_connections(&s) - conns);
    /* the resource's key as given: a key_prefix names locks, not it */
    CHECK_RC(rlc_fenced_set(pc, "raw", "r", 1, 1, &applied), RLC_OK);
    CHECK(applied == 1 && rs_int(&s, "EXISTS raw") == 1, "written at the key as given");
    CHECK_RC(rlc_fenced_set(c, "acct", "two", 3, 5, &applied), RLC_OK);
    CHECK(applied == 1, "same token writes again");
    CHECK_RC(rlc_fenced_set(c, "acct", "old", 3, 4, &applied), RLC_OK);
    CHECK(applied == 0, "smaller token refused");
    get_string(&s, "acct", v, sizeof v);
    CHECK(strcmp(v, "two") == 0, "value after refusal: '%s'", v);
    get_string(&s, "redlockc_fence:{acct}", v, sizeof v);
    CHECK(strcmp(v, "5") == 0, "fence '%s'", v);
    /* Exact beyond 2^53: compared as decimal strings, not doubles. */
    CHECK_RC(rlc_fenced_set(c, "acct", "big", 3, UINT64_MAX, &applied), RLC_OK);
    CHECK(applied == 1, "2^64-1 applied");
    CHECK_RC(rlc_fenced_set(c, "acct", "big-1", 5, UINT64_MAX - 1, &applied), RLC_OK);
    CHECK(applied == 0, "2^64-2 refused after 2^64-1");
    /* Binary values; a key that names its slot keeps it. */
    CHECK_RC(rlc_fenced_set(c, "a{b}c", "x\0y", 3, 1, &applied), RLC_OK);
    CHECK(applied == 1 && rs_int(&s, "STRLEN a{b}c") == 3, "binary value");
    get_string(&s, "redlockc_fence:a{b}c", v, sizeof v);
    CHECK(strcmp(v, "1") == 0, "fence of a braced key: '%s'", v);
    /* Refusals that write nothing. */
    freeReplyObject(rs_cmd(&s, "SET redlockc_fence:{bad} notanumber"));
    CHECK_RC(rlc_fenced_set(c, "bad", "v", 1, 1, &applied), RLC_E_SERVER);
    CHECK(rs_int(&s, "EXISTS bad") == 0, "nothing written under a broken fence");
    CHECK_RC(rlc_fenced_set(c, "acct", "v", 1, 0, &applied), RLC_E_INVAL);
    CHECK_RC(rlc_fenced_set(c, "", "v", 1, 1, &applied), RLC_E_INVAL);
    CHECK_RC(rlc_fenced_set(c, "acct", "v", 1, 1, NULL), RLC_E_INVAL);
    CHECK_RC(rlc_fenced_set(NULL, "acct", "v", 1, 1, &applied), RLC_E_INVAL);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rlc_client_free(pc);
    rs_stop(&s);
}

TEST(fenced_set_wants_a_single_node_client)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "fencing=1");
    int applied = -1;
    CHECK_RC(rlc_fenced_set(c, "k", "v", 1, 1, &applied), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "one Redis"), "message: %s", rlc_errmsg());
done:
    rlc_client_free(c);
    cluster_stop(&cl);
}

/* Holder 1 holds a bare quorum {A, C} (B was busy with another owner for a
 * moment). C restarts without persistence and forgets it; B is free again.
 * Both clients saw every node before. Plain Redlock (guard off) lets holder
 * 2 take B and the empty C: two holders. With the guard, C does not vote
 * until the longest lease has passed since its restart. */
static int second_holder_after_restart(int guard_on, char *msg, size_t size)
{
    struct cluster cl;
    int rc = -100;
    rlc_client *c1 = NULL, *c2 = NULL;
    rlc_lock *l1 = NULL, *l2 = NULL, *w1 = NULL, *w2 = NULL;
    if (cluster_start(&cl, 3) != 0)
        goto out;
    char opts[128];
    snprintf(opts, sizeof opts, "node_timeout_ms=2000;restart_guard=%d;fencing=1", guard_on);
    c1 = client(cl.uris, opts);
    c2 = client(cl.uris, opts);
    w1 = lock(c1, "warm", 0);
    w2 = lock(c2, "warm", 0);
    /* Each client's first acquire records the nodes' run ids. */
    if (rlc_lock_acquire(w1, 0, 5000) != RLC_OK || rlc_lock_release(w1) != RLC_OK ||
        rlc_lock_acquire(w2, 0, 5000) != RLC_OK || rlc_lock_release(w2) != RLC_OK)
        goto out;
    freeReplyObject(rs_cmd(&cl.node[1], "HSET rg other:1 1"));
    freeReplyObject(rs_cmd(&cl.node[1], "PEXPIRE rg 300"));
    l1 = lock(c1, "rg", 0);
    if (rlc_lock_acquire(l1, 0, 30000) != RLC_OK)
        goto out;
    int64_t until = check_now_ms() + 10000;
    while (rs_int(&cl.node[1], "EXISTS rg") != 0 && check_now_ms() < until)
        check_sleep_ms(5);
    if (rs_restart(&cl.node[2]) != 0 || rs_int(&cl.node[2], "EXISTS rg") != 0)
        goto out;
    l2 = lock(c2, "rg", 0);
    rc = rlc_lock_acquire(l2, 0, 30000);
    snprintf(msg, size, "%s", rlc_errmsg());
out:
    rlc_lock_free(w1);
    rlc_lock_free(w2);
    rlc_lock_free(l1);
    rlc_lock_free(l2);
    rlc_client_free(c1);
    rlc_client_free(c2);
    cluster_stop(&cl);
    return rc;
}

TEST(restart_guard_keeps_a_restarted_node_from_voting)
{
    char msg[1024] = "";
    int rc = second_holder_after_restart(1, msg, sizeof msg);
    CHECK(rc == RLC_NOT_ACQUIRED, "with the guard, a second holder got %d (%s); errmsg: %s", rc,
          rlc_strerror(rc), msg);
    CHECK(strstr(msg, "restarted") && strstr(msg, "only 1 count"),
          "the message names the restarted node: %s", msg);
done:;
}

TEST(without_restart_guard_plain_redlock_allows_a_second_holder)
{
    char msg[1024] = "";
    int rc = second_holder_after_restart(0, msg, sizeof msg);
    CHECK(rc == RLC_OK, "plain Redlock: the second holder got %d (%s); errmsg: %s", rc,
          rlc_strerror(rc), msg);
done:;
}

/* Issue 31, point 3: three masters restarted without persistence lose
 * every token counter. Before, a new counter started at 1, so the holder
 * after the restarts (the guard waited out) got token 1 after the earlier
 * holder's 2, and a fenced resource refused the current holder and took the
 * stale one's write. A counter that does not exist now starts at the node's
 * clock (whole seconds, in microseconds), above every token given before. */
TEST(tokens_keep_growing_across_masters_restarted_without_persistence)
{
    START_CLUSTER(cl, 3);
    rlc_client *c = client(cl.uris, "watchdog_timeout_ms=1200;fencing=1");
    rlc_lock *l = lock(c, "fr", 0);
    uint64_t t1 = 0, t2 = 0;
    for (int i = 0; i < 3; i++) /* a lock with a history: its tokens are past 100 */
        freeReplyObject(rs_cmd(&cl.node[i], "SET redisson_lock_token:{fr} 100"));
    for (int i = 0; i < 2; i++) {
        CHECK_RC(rlc_lock_acquire(l, 0, 1000), RLC_OK);
        CHECK_RC(rlc_lock_fencing_token(l, &t1), RLC_OK);
        CHECK_RC(rlc_lock_release(l), RLC_OK);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(rs_restart(&cl.node[i]) == 0, "node %d restarted", i);
        CHECK(rs_int(&cl.node[i], "EXISTS redisson_lock_token:{fr}") == 0,
              "node %d lost its counter", i);
    }
    /* the guard keeps the restarted nodes out for the longest lease (1.2 s) */
    int rc = RLC_NOT_ACQUIRED;
    for (int64_t end = check_now_ms() + 15000; rc != RLC_OK && check_now_ms() < end;) {
        rc = rlc_lock_acquire(l, 3000, 1000);
        CHECK(rc == RLC_OK || rc == RLC_NOT_ACQUIRED || rc == RLC_E_CONNECT ||
                  rc == RLC_E_NO_QUORUM, "acquire after the restarts: %d (%s)", rc, rlc_errmsg());
    }
    CHECK_RC(rc, RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(l, &t2), RLC_OK);
    CHECK(t2 > t1, "the holder after the restarts got token %llu, the one before %llu",
          (unsigned long long)t2, (unsigned long long)t1);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    cluster_stop(&cl);
}

RUN_TESTS(CASE(acquire_fails_when_its_token_cannot_be_stored_on_a_quorum),
          CASE(paused_holder_is_fenced_off_by_the_next_holders_larger_token),
          CASE(agreeing_counters_cost_no_extra_round_trip),
          CASE(fenced_set_applies_equal_or_larger_tokens_and_refuses_smaller),
          CASE(fenced_set_wants_a_single_node_client),
          CASE(restart_guard_keeps_a_restarted_node_from_voting),
          CASE(without_restart_guard_plain_redlock_allows_a_second_holder),
          CASE(tokens_keep_growing_across_masters_restarted_without_persistence))
