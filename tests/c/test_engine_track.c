/*
 * test_engine_track.c - loss push in the engine (engine_track.c): a watchdog
 * hold whose key is deleted, overwritten, expired or flushed is reported
 * lost within a round trip, not at its next renewal (10 s away with these
 * 30 s leases); and never falsely, under its own renewals and nested levels.
 * The engine is driven by the poll loop of engine_loop.h on real servers.
 */
#include <unistd.h>

#include "engine_loop.h"
#include "fixture.h"
#include "netfault.h"

#define UUID_A "6d7a1c3e-0000-4000-8000-0000000000a1"
#define PUSH_MS 500 /* "at once": a few round trips, with sanitizers */

/* Turns the loop until it saw a lost event or ms passed: the ms it took, or -1. */
static int64_t lost_within(struct eloop *L, int64_t ms)
{
    int64_t t0 = el_now(), end = t0 + ms;
    while (L->lost == 0 && el_now() < end)
        el_turn(L, 10);
    return L->lost ? el_now() - t0 : -1;
}

/* Clients whose key tracking redirects to another connection. */
static long long tracking_clients(const struct redis_server *s)
{
    return rs_info_int(s, "clients", "tracking_clients");
}

/* Turns the loop until every node tracks at least `keys` keys (the
 * first verify round's EXISTS landed): 0, or -1 after 2 s. */
static int registered(struct eloop *L, struct cluster *cl, long long keys)
{
    int64_t end = el_now() + 2000;
    for (;;) {
        int ok = 0;
        for (int i = 0; i < cl->n; i++)
            ok += rs_info_int(&cl->node[i], "stats", "tracking_total_keys") >= keys;
        if (ok == cl->n)
            return 0;
        if (el_now() >= end)
            return -1;
        el_turn(L, 10);
    }
}

/* A 30 s watchdog hold of name by owner 1, registered for loss push. */
static int hold(struct eloop *L, struct cluster *cl, const char *name)
{
    if (el_acquire(L, name, 1, 0, -1, NULL) != RLC_OK)
        return -1;
    return registered(L, cl, 1);
}

TEST(del_of_the_lock_key_is_pushed_at_once)
{
    START_CLUSTER(cl, 1);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000"), RLC_OK);
    CHECK(hold(&L, &cl, "pushed-del") == 0, "held and registered");
    CHECK(tracking_clients(&cl.node[0]) == 1, "one tracking reader");
    CHECK(rs_int(&cl.node[0], "DEL pushed-del") == 1, "DEL");
    int64_t took = lost_within(&L, PUSH_MS);
    CHECK(took >= 0, "no lost event within %d ms of DEL (next renewal in 10 s)", PUSH_MS);
    CHECK(L.lost_status == RLC_E_LOST && strcmp(L.lost_name, "pushed-del") == 0,
          "lost %d %s", L.lost_status, L.lost_name);
    CHECK(rlc_engine_validity_ms(L.e, "pushed-del", 10, 1, el_now()) <= 0, "still claimed valid");
    CHECK_RC(el_release(&L, "pushed-del", 1), RLC_E_LOST);
    CHECK(L.lost == 1, "lost %d times", L.lost);
done:
    el_free(&L);
    cluster_stop(&cl);
}

TEST(overwrite_expiry_and_flushall_are_pushed_at_once)
{
    START_CLUSTER(cl, 1);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000"), RLC_OK);
    /* another owner's hash in one atomic step: the key never goes away */
    CHECK(hold(&L, &cl, "ow") == 0, "held");
    redisReply *r = rs_cmd(&cl.node[0], "EVAL %s 1 ow", "redis.call('del', KEYS[1]) "
                                                        "redis.call('hset', KEYS[1], 'x:1', 1) "
                                                        "return 1");
    CHECK(r && r->type == REDIS_REPLY_INTEGER, "overwrite");
    freeReplyObject(r);
    CHECK(lost_within(&L, PUSH_MS) >= 0, "overwrite not pushed");
    /* expiry: the TTL shortened behind the holder; pushed when Redis
     * deletes the key (its expiry cycle runs every 100 ms) */
    L.lost = 0;
    CHECK(hold(&L, &cl, "ex") == 0, "held");
    CHECK(rs_int(&cl.node[0], "PEXPIRE ex 50") == 1, "PEXPIRE");
    CHECK(lost_within(&L, 50 + 300 + PUSH_MS) >= 0, "expiry not pushed");
    CHECK(strcmp(L.lost_name, "ex") == 0, "lost %s", L.lost_name);
    L.lost = 0;
    CHECK(hold(&L, &cl, "fl") == 0, "held");
    r = rs_cmd(&cl.node[0], "FLUSHALL");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "FLUSHALL");
    freeReplyObject(r);
    CHECK(lost_within(&L, PUSH_MS) >= 0, "FLUSHALL not pushed");
    CHECK(strcmp(L.lost_name, "fl") == 0, "lost %s", L.lost_name);
done:
    el_free(&L);
    cluster_stop(&cl);
}

TEST(redlock_del_on_one_node_is_no_loss_on_two_it_is)
{
    START_CLUSTER(cl, 3);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000"), RLC_OK);
    CHECK(hold(&L, &cl, "rl") == 0, "held on 3");
    CHECK(rs_int(&cl.node[0], "DEL rl") == 1, "DEL on node 0");
    /* its verify round is answered by all three: still held on two */
    CHECK(registered(&L, &cl, 1) == 0, "re-registered after the verify");
    CHECK(lost_within(&L, 300) < 0, "one node of three is no loss");
    CHECK(rlc_engine_validity_ms(L.e, "rl", 2, 1, el_now()) > 20000, "still valid");
    CHECK(rs_int(&cl.node[1], "DEL rl") == 1, "DEL on node 1");
    CHECK(lost_within(&L, PUSH_MS) >= 0, "two nodes of three: lost, pushed");
done:
    el_free(&L);
    cluster_stop(&cl);
}

/* A node that does not answer a verify round counts as neither "ours" nor
 * "gone": with node 0 stopped, a DEL on node 1 leaves the hold one "gone"
 * of three, which is no loss; node 0's reader is given up at the round's
 * deadline (its late answer is never read as another round's), and after
 * it resumes a DEL on node 2 as well is a loss. */
TEST(a_silent_node_in_a_verify_round_is_no_answer_not_gone)
{
    START_CLUSTER(cl, 3);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000;node_timeout_ms=300"),
             RLC_OK);
    CHECK(hold(&L, &cl, "silent") == 0, "held on 3");
    rs_pause(&cl.node[0]);
    CHECK(rs_int(&cl.node[1], "DEL silent") == 1, "DEL on node 1");
    int64_t end = el_now() + 1500;
    while (el_now() < end && L.lost == 0)
        el_turn(&L, 10);
    CHECK(L.lost == 0, "a silent node was counted gone: %s", L.lost_name);
    rs_resume(&cl.node[0]);
    CHECK(rlc_engine_hold_count(L.e, "silent", 6, 1) == 1, "still held");
    CHECK(rs_int(&cl.node[2], "DEL silent") == 1, "DEL on node 2");
    CHECK(lost_within(&L, 1500) >= 0, "two gone of three: not pushed");
done:
    el_free(&L);
    cluster_stop(&cl);
}

/* The reader alone stalls (a proxy holds its bytes; the subscriber and the
 * command connection pass): the verify round that a DEL starts is not
 * answered, the reader is given up at the round's deadline (io_timeout_ms,
 * 300 ms, well before the connection layer's own stall limit of 2.3 s), and
 * the new reader's verify finds the loss. */
TEST(a_stalled_tracking_reader_is_remade_and_the_loss_still_pushed)
{
    START(s);
    struct nf_proxy p = {0};
    struct eloop L;
    memset(&L, 0, sizeof L);
    for (int k = 0; k < EL_MAX_CONNS; k++)
        L.fd[k] = -1;
    CHECK(proxy_start(&p, s.port, 60000) == 0, "proxy did not start");
    char uri[64];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", p.port);
    CHECK_RC(el_init(&L, uri, UUID_A,
                     "watchdog_timeout_ms=30000;io_timeout_ms=300;connect_timeout_ms=2000"),
             RLC_OK);
    CHECK_RC(el_acquire(&L, "stalled", 1, 0, -1, NULL), RLC_OK);
    int64_t end = el_now() + 2000;
    while (el_now() < end && rs_info_int(&s, "stats", "tracking_total_keys") < 1)
        el_turn(&L, 10);
    /* accepted in order: command connection, subscriber, then the reader
     * (it opens once the subscriber has its id and the channel) */
    CHECK(proxy_accepted(&p) == 3, "%d connections", proxy_accepted(&p));
    CHECK(proxy_stall(&p, 2) == 0, "stall the reader");
    CHECK(rs_int(&s, "DEL stalled") == 1, "DEL");
    CHECK(lost_within(&L, 1500) >= 0, "the loss was not pushed past a stalled reader");
    CHECK(proxy_accepted(&p) >= 4, "no new reader");
done:
    el_free(&L);
    proxy_stop(&p);
    rs_stop(&s);
}

#define NLOCKS 25

/* Nested levels and their releases, and renewals every 200 ms, all write
 * the keys and so make invalidations: each leads to a verify that must
 * find the hold, for 4 s. */
TEST(own_renewals_and_nested_levels_never_make_a_false_loss)
{
    START_CLUSTER(cl, 3);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=600;node_timeout_ms=1000"),
             RLC_OK);
    char name[NLOCKS][16];
    for (int i = 0; i < NLOCKS; i++) {
        snprintf(name[i], sizeof name[i], "own-%d", i);
        CHECK_RC(el_acquire(&L, name[i], 7, 0, -1, NULL), RLC_OK);
    }
    CHECK(registered(&L, &cl, NLOCKS) == 0, "all keys registered");
    long long verifies_before = rs_info_int(&cl.node[0], "commandstats", "cmdstat_eval:calls");
    int64_t end = el_now() + 4000;
    int nests = 0;
    while (el_now() < end) {
        const char *n = name[nests % NLOCKS];
        CHECK_RC(el_acquire(&L, n, 7, 0, -1, NULL), RLC_OK);
        CHECK_RC(el_release(&L, n, 7), RLC_OK);
        nests++;
        el_turn(&L, 2);
    }
    long long verifies = rs_info_int(&cl.node[0], "commandstats", "cmdstat_eval:calls");
    CHECK(L.lost == 0, "%d false losses (%s)", L.lost, L.lost_name);
    CHECK(nests > 20, "only %d nests", nests);
    /* the pushes were real: invalidations led to verify rounds (EVAL) */
    CHECK(verifies > verifies_before + 10, "verify rounds %lld -> %lld", verifies_before,
          verifies);
    for (int i = 0; i < NLOCKS; i++)
        CHECK(rlc_engine_hold_count(L.e, name[i], strlen(name[i]), 7) == 1, "%s held", name[i]);
done:
    el_free(&L);
    cluster_stop(&cl);
}

/* The grace: a hold let go within TRACK_GRACE_MS never opens the pair. */
TEST(a_hold_let_go_at_once_opens_no_tracking)
{
    START_CLUSTER(cl, 1);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, NULL), RLC_OK);
    for (int i = 0; i < 50; i++) {
        CHECK_RC(el_acquire(&L, "quick", 1, 0, -1, NULL), RLC_OK);
        CHECK_RC(el_release(&L, "quick", 1), RLC_OK);
    }
    CHECK(L.opens == 1, "%d connections opened (the command connection only)", L.opens);
    CHECK(tracking_clients(&cl.node[0]) == 0, "a tracking client exists");
done:
    el_free(&L);
    cluster_stop(&cl);
}

/* The pair dropped by the server: a new one is made, and since messages
 * may have been missed every hold is verified again; a DEL is then pushed. */
TEST(a_killed_tracking_pair_is_remade_and_pushes_again)
{
    START_CLUSTER(cl, 1);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000"), RLC_OK);
    CHECK(hold(&L, &cl, "kp") == 0, "held");
    CHECK(rs_int(&cl.node[0], "CLIENT KILL TYPE pubsub") >= 1, "killed the subscriber");
    int64_t end = el_now() + 3000;
    while (el_now() < end && tracking_clients(&cl.node[0]) != 0)
        el_turn(&L, 10); /* the reader goes with its subscriber */
    while (el_now() < end && tracking_clients(&cl.node[0]) != 1)
        el_turn(&L, 10);
    CHECK(tracking_clients(&cl.node[0]) == 1, "a new tracking reader");
    CHECK(registered(&L, &cl, 1) == 0, "registered again");
    CHECK(L.lost == 0, "lost on a reconnect");
    CHECK(rs_int(&cl.node[0], "DEL kp") == 1, "DEL");
    CHECK(lost_within(&L, PUSH_MS) >= 0, "DEL after the reconnect not pushed");
done:
    el_free(&L);
    cluster_stop(&cl);
}

TEST(refused_tracking_falls_back_to_renewal_time_detection)
{
    START_CLUSTER(cl, 1);
    struct eloop L = {0};
    redisReply *r = rs_cmd(&cl.node[0], "ACL SETUSER u on >pw ~* &* +@all -client");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER");
    freeReplyObject(r);
    char uri[128];
    snprintf(uri, sizeof uri, "redis://u:pw@127.0.0.1:%d", cl.node[0].port);
    CHECK_RC(el_init(&L, uri, UUID_A, "watchdog_timeout_ms=900"), RLC_OK);
    CHECK_RC(el_acquire(&L, "refused", 1, 0, -1, NULL), RLC_OK);
    int64_t end = el_now() + 1000;
    while (el_now() < end)
        el_turn(&L, 10); /* renewals went on despite the refusal */
    CHECK(rlc_engine_hold_count(L.e, "refused", 7, 1) == 1 && L.lost == 0, "held a full lease");
    CHECK(tracking_clients(&cl.node[0]) == 0, "a tracking client exists");
    /* the refusal is passed on for the driver to log, once */
    char w[512] = "";
    int level = 0, taken_level = 0;
    size_t len = rlc_engine_next_log(L.e, &level, NULL, 0); /* a peek */
    CHECK(len > 0 && len < sizeof w &&
              rlc_engine_next_log(L.e, &taken_level, w, sizeof w) == len && strlen(w) == len,
          "peeked %zu bytes, took %zu: %s", len, strlen(w), w);
    CHECK(level == RLC_LOG_WARN && taken_level == RLC_LOG_WARN, "a warning: %d %d", level,
          taken_level);
    CHECK(strstr(w, "loss_push") && strstr(w, "refused") && strstr(w, "client"), "warning: %s",
          w);
    CHECK(rlc_engine_next_log(L.e, NULL, w, sizeof w) == 0, "a second line: %s", w);
    CHECK(rs_int(&cl.node[0], "DEL refused") == 1, "DEL");
    CHECK(lost_within(&L, 2000) >= 0, "no lost event at the next renewal");
done:
    if (L.e)
        el_free(&L);
    cluster_stop(&cl);
}

TEST(loss_push_off_opens_no_tracking)
{
    START_CLUSTER(cl, 1);
    struct eloop L;
    CHECK_RC(el_init(&L, cl.uris, UUID_A, "watchdog_timeout_ms=30000;loss_push=0"), RLC_OK);
    CHECK(rlc_engine_conns(L.e) == 2, "%d connections", rlc_engine_conns(L.e));
    CHECK_RC(el_acquire(&L, "off", 1, 0, -1, NULL), RLC_OK);
    CHECK(rs_int(&cl.node[0], "DEL off") == 1, "DEL");
    CHECK(lost_within(&L, 300) < 0, "lost before the renewal with loss_push=0");
    CHECK(L.opens == 1 && tracking_clients(&cl.node[0]) == 0, "%d opens", L.opens);
done:
    el_free(&L);
    cluster_stop(&cl);
}

RUN_TESTS(CASE(del_of_the_lock_key_is_pushed_at_once),
          CASE(overwrite_expiry_and_flushall_are_pushed_at_once),
          CASE(redlock_del_on_one_node_is_no_loss_on_two_it_is),
          CASE(own_renewals_and_nested_levels_never_make_a_false_loss),
          CASE(a_silent_node_in_a_verify_round_is_no_answer_not_gone),
          CASE(a_stalled_tracking_reader_is_remade_and_the_loss_still_pushed),
          CASE(a_hold_let_go_at_once_opens_no_tracking),
          CASE(a_killed_tracking_pair_is_remade_and_pushes_again),
          CASE(refused_tracking_falls_back_to_renewal_time_detection),
          CASE(loss_push_off_opens_no_tracking))
