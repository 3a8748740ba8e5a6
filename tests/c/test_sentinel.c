/*
 * test_sentinel.c - redis-sentinel:// nodes against real processes: a master,
 * one replica and three sentinels (redis-server --sentinel), all on free
 * loopback ports, stopped by pid.
 *
 * What a user can observe: locks go to the master the sentinels name (also
 * with the first sentinel of the list down); the sentinels' password and
 * the data nodes' are separate; a master name no sentinel knows is an error
 * that says so, not a hang; and after SENTINEL FAILOVER a client follows the
 * new master, its watchdog either keeps the hold alive there or reports it
 * lost, and a waiter gets the lock once it is released.
 */
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fixture.h"

#define MASTER "mym"

struct sset {
    struct redis_server data[2]; /* [0] the first master, [1] its replica */
    struct redis_server sent[3];
    int n_data, n_sent;
    const char *data_pw, *sent_pw;
    char sentinels[128];         /* "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" */
};

/* A raw command to a server, with AUTH first when pw is set. */
static redisReply *cmd_pw(const struct redis_server *s, const char *pw, const char *fmt, ...)
{
    redisContext *c = rs_connect(s);
    if (!c)
        return NULL;
    redisReply *r = NULL;
    if (pw) {
        r = redisCommand(c, "AUTH %s", pw);
        if (r)
            freeReplyObject(r);
    }
    va_list ap;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* Whether the reply to fmt is a string containing want. */
static int reply_has(const struct redis_server *s, const char *pw, const char *want,
                     const char *cmd)
{
    redisReply *r = cmd_pw(s, pw, cmd);
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
    if (r)
        freeReplyObject(r);
    return ok;
}

static int role_is(const struct redis_server *s, const char *pw, const char *role)
{
    redisReply *r = cmd_pw(s, pw, "ROLE");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, role) == 0;
    if (r)
        freeReplyObject(r);
    return ok;
}

static long long int_pw(const struct redis_server *s, const char *pw, const char *fmt,
                        const char *arg)
{
    redisReply *r = cmd_pw(s, pw, fmt, arg);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
    if (r)
        freeReplyObject(r);
    return v;
}

/* The sentinel knows the replica (so a failover has somewhere to go). */
static int sentinel_sees_replica(const struct sset *s, int i)
{
    redisReply *r = cmd_pw(&s->sent[i], s->sent_pw, "SENTINEL REPLICAS " MASTER);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1;
    if (r)
        freeReplyObject(r);
    return ok;
}

static void sset_stop(struct sset *s)
{
    for (int i = 0; i < s->n_sent; i++)
        rs_stop(&s->sent[i]);
    for (int i = 0; i < s->n_data; i++)
        rs_stop(&s->data[i]);
}

static int sset_start(struct sset *s, const char *data_pw, const char *sent_pw)
{
    memset(s, 0, sizeof *s);
    s->data_pw = data_pw;
    s->sent_pw = sent_pw;
    /* No 5 s pause before a full sync (the default for diskless sync). */
    const char *auth[] = {"--repl-diskless-sync-delay", "0", "--requirepass", data_pw,
                          "--masterauth", data_pw, NULL};
    if (!data_pw)
        auth[2] = NULL;
    if (rs_start(&s->data[0], auth) != 0)
        return -1;
    s->n_data = 1;
    char port[16];
    snprintf(port, sizeof port, "%d", s->data[0].port);
    const char *rep[] = {"--replicaof", "127.0.0.1", port, "--repl-diskless-sync-delay", "0",
                         "--requirepass", data_pw, "--masterauth", data_pw, NULL};
    if (!data_pw)
        rep[5] = NULL;
    if (rs_start(&s->data[1], rep) != 0)
        return -1;
    s->n_data = 2;
    if (!WAIT_UNTIL(reply_has(&s->data[1], data_pw, "master_link_status:up",
                              "INFO replication"), 10000)) {
        fprintf(stderr, "the replica did not sync\n");
        return -1;
    }
    char conf[1024];
    int n = snprintf(conf, sizeof conf,
                     "sentinel monitor " MASTER " 127.0.0.1 %d 2\n"
                     "sentinel down-after-milliseconds " MASTER " 1000\n"
                     "sentinel failover-timeout " MASTER " 5000\n",
                     s->data[0].port);
    if (data_pw)
        n += snprintf(conf + n, sizeof conf - (size_t)n, "sentinel auth-pass " MASTER " %s\n",
                      data_pw);
    if (sent_pw)
        snprintf(conf + n, sizeof conf - (size_t)n, "requirepass %s\nsentinel sentinel-pass %s\n",
                 sent_pw, sent_pw);
    for (int i = 0; i < 3; i++) {
        if (rs_start_sentinel(&s->sent[i], conf) != 0)
            return -1;
        s->n_sent++;
        snprintf(s->sentinels + strlen(s->sentinels), sizeof s->sentinels - strlen(s->sentinels),
                 "%s%s", i ? "," : "", s->sent[i].uri);
    }
    int64_t t0 = check_now_ms();
    for (int i = 0; i < 3; i++)
        if (!WAIT_UNTIL(sentinel_sees_replica(s, i), 15000)) {
            fprintf(stderr, "sentinel %d did not find the replica\n", i);
            return -1;
        }
    fprintf(stderr, "sentinels saw the replica after %lld ms\n",
            (long long)(check_now_ms() - t0));
    return 0;
}

#define START_SENTINELS(s, data_pw, sent_pw)                                  \
    struct sset s;                                                            \
    if (sset_start(&s, data_pw, sent_pw) != 0) {                              \
        fprintf(stderr, "could not start a master, a replica and 3 sentinels\n"); \
        sset_stop(&s);                                                        \
        check_failed = 1;                                                     \
        return;                                                               \
    }

TEST(lock_and_unlock_through_sentinels_with_the_first_one_down)
{
    START_SENTINELS(s, NULL, NULL);
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    char uri[256];
    snprintf(uri, sizeof uri, "redis-sentinel://127.0.0.1:%d,%s/" MASTER, rs_free_port(),
             s.sentinels);
    c = client(uri, NULL);
    CHECK(c != NULL, "client");
    l = lock(c, "sent-a", 1);
    CHECK(l != NULL, "lock");
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK(rs_int(&s.data[0], "EXISTS sent-a") == 1, "the hold is on the master");
    CHECK(rs_int(&s.data[0], "PTTL sent-a") > 0, "with its lease");
    CHECK(is_held(l) == 1, "held");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s.data[0], "EXISTS sent-a") == 0, "released on the master");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    sset_stop(&s);
}

TEST(sentinel_auth_and_data_auth_are_separate)
{
    START_SENTINELS(s, "data-pw-1", "sent-pw-2");
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    char uri[256];
    snprintf(uri, sizeof uri, "redis-sentinel://:data-pw-1@%s/" MASTER, s.sentinels);

    /* Both right. */
    c = client(uri, "sentinel_password=sent-pw-2");
    CHECK(c != NULL, "client");
    l = lock(c, "sent-auth", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK(int_pw(&s.data[0], "data-pw-1", "EXISTS %s", "sent-auth") == 1, "held on the master");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    rlc_lock_free(l);
    rlc_client_free(c);
    l = NULL;
    c = NULL;

    /* No sentinel password: the sentinels refuse, and the message says so. */
    c = client(uri, NULL);
    l = lock(c, "sent-auth", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_E_CONNECT);
    CHECK(strstr(rlc_errmsg(), "NOAUTH") && !strstr(rlc_errmsg(), "data-pw-1"), "message: %s",
          rlc_errmsg());
    fprintf(stderr, "no sentinel password: %s\n", rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);
    l = NULL;
    c = NULL;

    /* A wrong sentinel password: refused AUTH, never shown. */
    c = client(uri, "sentinel_password=Wr0ngSentPw");
    l = lock(c, "sent-auth", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_E_CONNECT);
    CHECK(strstr(rlc_errmsg(), "refused AUTH") && !strstr(rlc_errmsg(), "Wr0ngSentPw"),
          "message: %s", rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);
    l = NULL;
    c = NULL;

    /* The right sentinel password and a wrong data password: the master
     * refuses (the sentinel password is not used for the data node). */
    snprintf(uri, sizeof uri, "redis-sentinel://:Wr0ngDataPw@%s/" MASTER, s.sentinels);
    c = client(uri, "sentinel_password=sent-pw-2");
    l = lock(c, "sent-auth", 1);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_E_AUTH);
    CHECK(!strstr(rlc_errmsg(), "Wr0ngDataPw"), "message: %s", rlc_errmsg());
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    sset_stop(&s);
}

TEST(a_master_name_no_sentinel_knows_is_a_clear_error)
{
    START_SENTINELS(s, NULL, NULL);
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    char uri[256];
    snprintf(uri, sizeof uri, "redis-sentinel://%s/nosuchmaster", s.sentinels);
    c = client(uri, NULL);
    l = lock(c, "sent-x", 1);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_E_CONNECT);
    CHECK(strstr(rlc_errmsg(), "knows no master named 'nosuchmaster'"), "message: %s",
          rlc_errmsg());
    fprintf(stderr, "failed in %lld ms: %s\n", (long long)(check_now_ms() - t0), rlc_errmsg());
    /* Waiting for it does not hang either: the wait ends with the error. */
    CHECK_RC(rlc_lock_acquire(l, 300, 10000), RLC_E_CONNECT);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    sset_stop(&s);
}

/* Every sentinel refuses the connect: a try hears it once each was tried,
 * as a try on a node that is down does, not at its call deadline (30 s
 * here: ending before half of it shows the failure ended it). */
TEST(every_sentinel_down_fails_a_try_before_its_deadline)
{
    char uri[256];
    snprintf(uri, sizeof uri, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/mym",
             rs_free_port(), rs_free_port());
    rlc_client *c = client(uri, "io_timeout_ms=30000;connect_timeout_ms=2000");
    rlc_lock *l = lock(c, "sent-down", 1);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_E_CONNECT);
    int64_t took = check_now_ms() - t0;
    CHECK(took < 15000, "the try ended after %lld ms: %s", (long long)took, rlc_errmsg());
    CHECK(strstr(rlc_errmsg(), "master") && strstr(rlc_errmsg(), "127.0.0.1"), "message: %s",
          rlc_errmsg());
done:
    rlc_lock_free(l);
    rlc_client_free(c);
}

/* ---- failover ------------------------------------------------------------- */

static atomic_int lost_reason;

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)user;
    atomic_store(&lost_reason, reason ? reason : -100);
}

struct waiter {
    rlc_lock *l;
    atomic_int rc;
    atomic_int done;
};

static void *wait_for_lock(void *p)
{
    struct waiter *w = p;
    atomic_store(&w->rc, rlc_lock_acquire(w->l, 60000, 30000));
    atomic_store(&w->done, 1);
    return NULL;
}

static long long subscribers(const struct redis_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB NUMSUB %s", channel);
    long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                          r->element[1]->type == REDIS_REPLY_INTEGER
                      ? r->element[1]->integer
                      : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* Asks for a failover; true once accepted (*at: when). */
static int failover_accepted(const struct redis_server *s, int64_t *at)
{
    *at = check_now_ms();
    redisReply *r = rs_cmd(s, "SENTINEL FAILOVER " MASTER);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        check_sleep_ms(50);
    if (r)
        freeReplyObject(r);
    return ok;
}

/* One probe acquire through c that lands on the new master. */
static int lands_on(rlc_lock *probe, const struct redis_server *s)
{
    if (rlc_lock_acquire(probe, 0, 5000) != RLC_OK)
        return 0;
    int there = rs_int(s, "EXISTS sent-probe") == 1;
    rlc_lock_release(probe);
    return there;
}

/* Whether the key's PTTL went up since the last look (*pttl). */
static int renewed(const struct redis_server *s, long long *pttl)
{
    long long now = rs_int(s, "PTTL sent-fo");
    int up = now > *pttl;
    *pttl = now;
    return up;
}

/* lag: the replica loses the hold before the failover, as when replication
 * lagged behind the acquire (its copy is deleted: replica-read-only off). */
static void failover_case(bool lag)
{
    START_SENTINELS(s, NULL, NULL);
    rlc_client *a = NULL, *b = NULL;
    rlc_lock *la = NULL, *lb = NULL, *probe = NULL;
    pthread_t t;
    bool started = false;
    struct waiter w = {0};
    char uri[256];
    snprintf(uri, sizeof uri, "redis-sentinel://%s/" MASTER, s.sentinels);
    /* A short watchdog lease: renewals every second, so a renewal on the
     * new master (or the loss) shows within seconds. */
    a = client(uri, "watchdog_timeout_ms=3000");
    b = client(uri, "watchdog_timeout_ms=3000");
    CHECK(a && b, "clients");
    la = lock(a, "sent-fo", 1);
    lb = lock(b, "sent-fo", 2);
    probe = lock(a, "sent-probe", 3);
    CHECK(la && lb && probe, "locks");
    atomic_store(&lost_reason, 0);
    CHECK_RC(rlc_lock_on_lost(la, on_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    w.l = lb;
    CHECK(pthread_create(&t, NULL, wait_for_lock, &w) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(subscribers(&s.data[0], "redisson_lock__channel:{sent-fo}") >= 1, 10000),
          "the waiter subscribed");
    /* The hold is on the replica too before the failover (replication is
     * asynchronous: without this wait it may not be, and then the hold is
     * lost, which the watchdog must report). */
    CHECK(WAIT_UNTIL(rs_int(&s.data[1], "EXISTS sent-fo") == 1, 10000), "replicated");
    if (lag) {
        redisReply *x = rs_cmd(&s.data[1], "CONFIG SET replica-read-only no");
        if (x)
            freeReplyObject(x);
        CHECK(rs_int(&s.data[1], "DEL sent-fo") == 1, "the replica's copy deleted");
    }

    /* A sentinel takes a replica as a candidate only once it has talked to
     * it for a while (NOGOODSLAVE before): ask until it accepts. */
    int64_t t0 = check_now_ms();
    CHECK(WAIT_UNTIL(failover_accepted(&s.sent[0], &t0), 30000), "SENTINEL FAILOVER refused");
    CHECK(WAIT_UNTIL(role_is(&s.data[1], NULL, "master"), 30000), "the replica was promoted");
    int64_t promoted = check_now_ms() - t0;
    CHECK(WAIT_UNTIL(lands_on(probe, &s.data[1]), 30000), "client a follows the new master");
    int64_t follow = check_now_ms() - t0;
    fprintf(stderr, "SENTINEL FAILOVER: replica promoted after %lld ms; the client's next "
            "lock landed on it after %lld ms\n", (long long)promoted, (long long)follow);

    if (lag) {
        /* The new master never had it: the watchdog must say so at its next
         * renewal there. (Meanwhile the waiter may have taken the lock on
         * the new master: asynchronous replication, see docs/design/sentinel.md.) */
        CHECK(WAIT_UNTIL(atomic_load(&lost_reason) != 0, 15000), "the loss was not reported");
        CHECK(atomic_load(&lost_reason) == RLC_E_LOST, "reason %d", atomic_load(&lost_reason));
        CHECK(is_held(la) == 0, "is_held after the loss");
        int rc = rlc_lock_release(la);
        CHECK(rc == RLC_E_LOST || rc == RLC_E_NOT_OWNER, "release after the loss: %d", rc);
        fprintf(stderr, "the holder's watchdog reported the hold lost after %lld ms\n",
                (long long)(check_now_ms() - t0));
    } else {
        /* Renewed on the new master (its PTTL goes up between two looks),
         * or reported lost. Never held-but-gone. */
        long long pttl = rs_int(&s.data[1], "PTTL sent-fo");
        CHECK(WAIT_UNTIL(atomic_load(&lost_reason) != 0 || renewed(&s.data[1], &pttl), 15000),
              "neither renewed on the new master nor reported lost (pttl %lld)", pttl);
        int lost = atomic_load(&lost_reason);
        fprintf(stderr, "the holder's watchdog %s%s\n",
                lost ? "reported the hold lost: " : "renews it on the new master",
                lost ? rlc_strerror(lost) : "");
        if (!lost) {
            CHECK(is_held(la) == 1, "still held");
            CHECK_RC(rlc_lock_release(la), RLC_OK);
        }
    }
    /* The waiter gets it, on the new master. */
    CHECK(WAIT_UNTIL(atomic_load(&w.done), 40000), "the waiter did not get the lock");
    CHECK(atomic_load(&w.rc) == RLC_OK, "waiter: %d (%s)", atomic_load(&w.rc),
          rlc_strerror(atomic_load(&w.rc)));
    CHECK(rs_int(&s.data[1], "EXISTS sent-fo") == 1, "the waiter's hold is on the new master");
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
done:
    if (started) {
        if (!atomic_load(&w.done))
            rlc_lock_cancel(lb);
        pthread_join(t, NULL);
    }
    rlc_lock_free(probe);
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    sset_stop(&s);
}

TEST(failover_the_clients_follow_the_new_master)
{
    failover_case(false);
}

TEST(failover_to_a_replica_without_the_hold_reports_it_lost)
{
    failover_case(true);
}

RUN_TESTS(CASE(lock_and_unlock_through_sentinels_with_the_first_one_down),
          CASE(every_sentinel_down_fails_a_try_before_its_deadline),
          CASE(sentinel_auth_and_data_auth_are_separate),
          CASE(a_master_name_no_sentinel_knows_is_a_clear_error),
          CASE(failover_the_clients_follow_the_new_master),
          CASE(failover_to_a_replica_without_the_hold_reports_it_lost))
