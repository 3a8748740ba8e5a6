/*
 * test_core2.c - how waiters wake, what a lost-lock callback may do, and
 * time bounds that hold while name resolution stalls (issue 14, points 6,
 * 7, 8 and 10), against real redis-servers.
 *
 * Counts of script calls are read from the server (INFO commandstats), so
 * they are what any operator of the Redis would see.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "check.h"
#include "redis_server.h"

#define START(s, ...)                                                         \
    struct redis_server s;                                                    \
    if (rs_start(&s, (const char *const[]){__VA_ARGS__ NULL}) != 0) {         \
        fprintf(stderr, "redis-server did not start\n");                     \
        check_failed = 1;                                                     \
        return;                                                               \
    }

static rlc_client *client(const char *uri, const char *opts)
{
    rlc_client *c = NULL;
    if (rlc_client_new(&c, uri, opts) != RLC_OK)
        fprintf(stderr, "rlc_client_new(%s): %s\n", uri, rlc_errmsg());
    return c;
}

static rlc_lock *lock(rlc_client *c, const char *name, uint64_t owner)
{
    rlc_lock *l = NULL;
    if (rlc_lock_new(c, name, owner, &l) != RLC_OK)
        fprintf(stderr, "rlc_lock_new(%s): %s\n", name, rlc_errmsg());
    return l;
}

static __attribute__((unused)) int is_held(rlc_lock *l)
{
    int v = -1;
    return rlc_lock_is_held(l, &v) == RLC_OK ? v : -1;
}

/* calls=N of one command in INFO commandstats (0 if never called). */
static long long calls_of(const char *info, const char *cmd)
{
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(info, key);
    return p ? atoll(p + strlen(key)) : 0;
}

/* EVAL + EVALSHA calls the server counted since its last RESETSTAT. */
static long long script_calls(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "INFO commandstats");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING)
        n = calls_of(r->str, "eval") + calls_of(r->str, "evalsha");
    if (r)
        freeReplyObject(r);
    return n;
}

/* Subscribers of a channel, as the server counts them. */
static long long numsub(const struct redis_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB NUMSUB %s", channel);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    return n;
}

/* ---- point 10: waiters wake on messages and the holder's lease, not a poll -- */

#define CROWD 50

struct crowd {
    rlc_lock *l;
    atomic_int ok;
    atomic_llong first_ms; /* when the first waiter got the lock */
};

static void *crowd_waiter(void *arg)
{
    struct crowd *cw = arg;
    if (rlc_lock_acquire(cw->l, 30000, 5000) == RLC_OK) {
        long long none = 0, now = check_now_ms();
        atomic_compare_exchange_strong(&cw->first_ms, &none, now);
        atomic_fetch_add(&cw->ok, 1);
        rlc_lock_release(cw->l);
    } else {
        fprintf(stderr, "waiter: %s\n", rlc_errmsg());
    }
    return NULL;
}

/* 50 threads wait for a lock held with a 60 s fixed lease. Before, each
 * waiter looked again every second (50 script calls a second); now they
 * sleep on the unlock message and the holder's lease end, with one safety
 * poll a second for the whole lock. */
TEST(fifty_waiters_make_no_more_script_calls_than_one)
{
    START(s);
    rlc_client *h = client(s.uri, NULL), *w = client(s.uri, NULL);
    rlc_lock *lh = lock(h, "crowd", 0);
    struct crowd cw = {lock(w, "crowd", 0), 0, 0};
    pthread_t t[CROWD];
    int started = 0;
    CHECK_RC(rlc_lock_acquire(lh, 0, 60000), RLC_OK);
    for (; started < CROWD; started++)
        CHECK(pthread_create(&t[started], NULL, crowd_waiter, &cw) == 0, "pthread_create");
    /* Each waiter tries once, subscribes, and tries again before it sleeps. */
    CHECK(WAIT_UNTIL(script_calls(&s) >= 1 + 2 * CROWD, 20000), "waiters did not start: %lld",
          script_calls(&s));
    CHECK(WAIT_UNTIL(numsub(&s, "redisson_lock__channel:{crowd}") == 1, 5000), "subscribed");
    check_sleep_ms(200); /* the last waiters' second tries land */
    freeReplyObject(rs_cmd(&s, "CONFIG RESETSTAT"));
    check_sleep_ms(3000); /* measuring: nothing should happen */
    long long n = script_calls(&s);
    CHECK(n >= 0 && n < 10, "%d waiters made %lld script calls in 3 s (expected < 10: one "
          "safety poll a second for the lock, not one per waiter)", CROWD, n);

    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_release(lh), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&cw.first_ms) != 0, 2000), "no waiter woke on release");
    CHECK(atomic_load(&cw.first_ms) - t0 < 300, "first waiter got it %lld ms after release",
          (long long)(atomic_load(&cw.first_ms) - t0));
    CHECK(WAIT_UNTIL(atomic_load(&cw.ok) == CROWD, 30000), "%d of %d waiters got the lock",
          atomic_load(&cw.ok), CROWD);
done:
    rlc_lock_free(lh);
    lh = NULL;
    if (h && started == CROWD && atomic_load(&cw.ok) < CROWD)
        freeReplyObject(rs_cmd(&s, "DEL crowd")); /* let the waiters finish */
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    rlc_lock_free(cw.l);
    rlc_client_free(h);
    rlc_client_free(w);
    rs_stop(&s);
}

struct one_waiter {
    rlc_lock *l;
    atomic_int rc;
    atomic_llong at_ms;
};

static void *one_waiter_main(void *arg)
{
    struct one_waiter *ow = arg;
    int rc = rlc_lock_acquire(ow->l, 10000, 5000);
    atomic_store(&ow->at_ms, check_now_ms());
    atomic_store(&ow->rc, rc);
    if (rc == RLC_OK)
        rlc_lock_release(ow->l);
    return NULL;
}

/* The unlock message can be missed while the subscriber reconnects: after
 * the resubscription every waiter tries again at once. */
TEST(waiters_try_again_at_once_after_the_subscriber_reconnects)
{
    START(s);
    rlc_client *h = client(s.uri, NULL), *w = client(s.uri, NULL);
    rlc_lock *lh = lock(h, "missed", 0);
    struct one_waiter ow = {lock(w, "missed", 0), 99, 0};
    pthread_t t;
    bool running = false;
    CHECK_RC(rlc_lock_acquire(lh, 0, 60000), RLC_OK);
    CHECK(pthread_create(&t, NULL, one_waiter_main, &ow) == 0, "pthread_create");
    running = true;
    CHECK(WAIT_UNTIL(numsub(&s, "redisson_lock__channel:{missed}") == 1, 5000), "subscribed");
    CHECK(WAIT_UNTIL(script_calls(&s) >= 3, 5000), "the waiter tried twice");
    int64_t t0 = check_now_ms();
    freeReplyObject(rs_cmd(&s, "CLIENT KILL TYPE pubsub"));
    freeReplyObject(rs_cmd(&s, "DEL missed")); /* freed with no message */
    CHECK(WAIT_UNTIL(atomic_load(&ow.rc) != 99, 3000), "the waiter did not wake");
    CHECK_RC(atomic_load(&ow.rc), RLC_OK);
    CHECK(atomic_load(&ow.at_ms) - t0 < 500, "took %lld ms after the reconnect",
          (long long)(atomic_load(&ow.at_ms) - t0));
done:
    if (running)
        pthread_join(t, NULL);
    rlc_lock_free(lh);
    rlc_lock_free(ow.l);
    rlc_client_free(h);
    rlc_client_free(w);
    rs_stop(&s);
}

/* ---- point 8: a refused SUBSCRIBE is an error, not a silent poll ------------ */

/* Redis 7's ACL users get no channels by default (resetchannels): SUBSCRIBE
 * answers NOPERM. A wait needs the unlock messages, so it fails at once with
 * RLC_E_SERVER naming the missing permission, as Redisson's lock() throws;
 * a try without waiting still works. */
TEST(refused_subscribe_fails_the_wait_with_the_missing_permission)
{
    START(s);
    rlc_client *h = client(s.uri, NULL), *w = NULL;
    rlc_lock *lh = lock(h, "acl", 0), *lw = NULL;
    redisReply *r = rs_cmd(&s, "ACL SETUSER u on >pw ~* resetchannels +@all");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", r ? r->str : "no reply");
    freeReplyObject(r);
    char uri[96];
    snprintf(uri, sizeof uri, "redis://u:pw@127.0.0.1:%d", s.port);
    w = client(uri, "io_timeout_ms=300;connect_timeout_ms=300");
    lw = lock(w, "acl", 0);
    CHECK_RC(rlc_lock_acquire(lh, 0, 60000), RLC_OK);

    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(lw, 3000, 5000), RLC_E_SERVER);
    int64_t took = check_now_ms() - t0;
    const char *msg = rlc_errmsg();
    CHECK(strstr(msg, "&redisson_lock__channel:*") && strstr(msg, "NOPERM"),
          "message should name the permission and the refusal: %s", msg);
    CHECK(took < 1000, "refused after %lld ms, expected at once", (long long)took);
    CHECK_RC(rlc_lock_acquire(lw, 0, 5000), RLC_NOT_ACQUIRED);

    /* Once the channel is granted, the next wait subscribes and waits. */
    freeReplyObject(rs_cmd(&s, "ACL SETUSER u &redisson_lock__channel:*"));
    CHECK_RC(rlc_lock_acquire(lw, 300, 5000), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_release(lh), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lw, 1000, 5000), RLC_OK);
    CHECK_RC(rlc_lock_release(lw), RLC_OK);
done:
    rlc_lock_free(lh);
    rlc_lock_free(lw);
    rlc_client_free(h);
    rlc_client_free(w);
    rs_stop(&s);
}

RUN_TESTS(CASE(fifty_waiters_make_no_more_script_calls_than_one),
          CASE(waiters_try_again_at_once_after_the_subscriber_reconnects),
          CASE(refused_subscribe_fails_the_wait_with_the_missing_permission))
