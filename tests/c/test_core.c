/*
 * test_core.c - single-node locks against a real redis-server.
 *
 * Each case starts its own server on a free port and names the behaviour it
 * checks. Raw hiredis commands (rs_cmd) look at the server directly, so the
 * assertions are about what any other client of the same Redis would see.
 */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

/* The field this thread writes: "<uuid>:<thread owner>". */
static void my_field(rlc_client *c, uint64_t owner, char *buf, size_t n)
{
    snprintf(buf, n, "%s:%llu", rlc_client_uuid(c),
             (unsigned long long)(owner ? owner : rlc_thread_owner()));
}

TEST(acquire_and_release_change_the_hash)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "orders", 0);
    char field[96];
    my_field(c, 0, field, sizeof field);

    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    redisReply *r = rs_cmd(&s, "HGETALL orders");
    CHECK(r && r->elements == 2 && strcmp(r->element[0]->str, field) == 0 &&
              strcmp(r->element[1]->str, "1") == 0,
          "HGETALL should be {%s: 1}", field);
    freeReplyObject(r);
    long long pttl = rs_int(&s, "PTTL orders");
    CHECK(pttl > 29000 && pttl <= 30000, "watchdog lease PTTL=%lld, expected ~30000", pttl);
    CHECK(is_locked(l) == 1 && is_held(l) == 1, "locked and held");

    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS orders") == 0, "the key is deleted at count 0");
    CHECK(is_locked(l) == 0 && is_held(l) == 0, "neither locked nor held after release");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(mutual_exclusion_between_two_clients)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *la = lock(a, "m", 0), *lb = lock(b, "m", 0);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_acquire(lb, 100, -1), RLC_NOT_ACQUIRED);
    CHECK(is_locked(lb) == 1 && is_held(lb) == 0, "b sees it locked, not held by b");
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(reentrant_count_three_needs_three_releases)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *other = client(s.uri, NULL);
    rlc_lock *l = lock(c, "re", 0), *lo = lock(other, "re", 0);
    int64_t n = -1;
    for (int i = 0; i < 3; i++)
        CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_hold_count(l, &n), RLC_OK);
    CHECK(n == 3, "hold count %lld, expected 3", (long long)n);
    for (int i = 0; i < 2; i++) {
        CHECK_RC(rlc_lock_release(l), RLC_OK);
        CHECK(is_locked(l) == 1, "still locked after release %d of 3", i + 1);
        CHECK_RC(rlc_lock_acquire(lo, 0, -1), RLC_NOT_ACQUIRED);
    }
    CHECK_RC(rlc_lock_hold_count(l, &n), RLC_OK);
    CHECK(n == 1, "hold count %lld, expected 1", (long long)n);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(is_locked(l) == 0, "free after the third release");
    CHECK_RC(rlc_lock_hold_count(l, &n), RLC_OK);
    CHECK(n == 0, "hold count %lld, expected 0", (long long)n);
done:
    rlc_lock_free(l);
    rlc_lock_free(lo);
    rlc_client_free(c);
    rlc_client_free(other);
    rs_stop(&s);
}

TEST(non_owner_release_is_refused_and_touches_nothing)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *la = lock(a, "guarded", 0), *lb = lock(b, "guarded", 0);
    CHECK_RC(rlc_lock_acquire(la, 0, 60000), RLC_OK);
    redisReply *before = rs_cmd(&s, "HGETALL guarded");
    CHECK_RC(rlc_lock_release(lb), RLC_E_NOT_OWNER);
    CHECK(strstr(rlc_errmsg(), "not held") != NULL, "errmsg: %s", rlc_errmsg());
    CHECK_RC(rlc_lock_extend(lb, 1000), RLC_E_NOT_OWNER);
    redisReply *after = rs_cmd(&s, "HGETALL guarded");
    CHECK(before && after && before->elements == 2 && after->elements == 2 &&
              strcmp(before->element[0]->str, after->element[0]->str) == 0 &&
              strcmp(after->element[1]->str, "1") == 0,
          "the holder's field is unchanged");
    freeReplyObject(before);
    freeReplyObject(after);
    CHECK(rs_int(&s, "PTTL guarded") > 50000, "lease untouched");
    /* Another thread of the same client is another owner, too. */
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    CHECK_RC(rlc_lock_release(la), RLC_E_NOT_OWNER);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(fixed_lease_expires_and_release_reports_lost)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *la = lock(a, "lease", 0), *lb = lock(b, "lease", 0);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(la, 0, 300), RLC_OK);
    long long pttl = rs_int(&s, "PTTL lease");
    CHECK(pttl > 0 && pttl <= 300, "PTTL %lld, expected <= 300", pttl);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS lease") == 0, 3000), "the key expired");
    CHECK(check_now_ms() - t0 >= 250, "it did not expire early");
    CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(la), RLC_E_LOST);
    CHECK(is_held(lb) == 1, "b's lock survived a's late release");
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(watchdog_keeps_a_one_second_lease_alive_for_five_seconds)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=1000");
    rlc_lock *l = lock(c, "wd", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t end = check_now_ms() + 5000;
    long long min_pttl = 1000;
    while (check_now_ms() < end) {
        long long p = rs_int(&s, "PTTL wd");
        CHECK(p > 0, "PTTL %lld: the lock expired under the watchdog", p);
        if (p < min_pttl)
            min_pttl = p;
        check_sleep_ms(50);
    }
    /* Renewed every third of the lease: never below about a third left. */
    CHECK(min_pttl > 200, "lowest PTTL seen %lld ms", min_pttl);
    CHECK(is_held(l) == 1, "still held after 5 s");
    int64_t v = 0;
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v > 0 && v <= 1000, "validity %lld", (long long)v);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

static atomic_int lost_calls;
static atomic_int lost_reason;

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    (void)user;
    atomic_store(&lost_reason, reason);
    atomic_fetch_add(&lost_calls, 1);
}

TEST(lost_after_del_fires_callback_once)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=600");
    rlc_lock *l = lock(c, "gone", 0);
    atomic_store(&lost_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, on_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(rs_int(&s, "DEL gone") == 1, "raw DEL");
    CHECK(WAIT_UNTIL(atomic_load(&lost_calls) > 0, 3000), "on_lost did not fire");
    CHECK(atomic_load(&lost_reason) == RLC_E_LOST, "reason %d", atomic_load(&lost_reason));
    CHECK(is_held(l) == 0, "is_held is false once lost");
    /* Someone else takes it; our release must not touch theirs. */
    rlc_client *o = client(s.uri, NULL);
    rlc_lock *lo = lock(o, "gone", 0);
    CHECK_RC(rlc_lock_acquire(lo, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK(is_held(lo) == 1, "the new holder keeps it");
    check_sleep_ms(600); /* two more renewal periods: still exactly one call */
    CHECK(atomic_load(&lost_calls) == 1, "on_lost ran %d times", atomic_load(&lost_calls));
    rlc_lock_free(lo);
    rlc_client_free(o);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* A child process holds the lock and is frozen past its lease. */
static void frozen_child(const char *uri, int report_fd)
{
    rlc_client *c = client(uri, "watchdog_timeout_ms=600");
    rlc_lock *l = lock(c, "frozen", 0);
    atomic_store(&lost_calls, 0);
    rlc_lock_on_lost(l, on_lost, NULL);
    char msg = rlc_lock_acquire(l, 0, -1) == RLC_OK ? 'H' : 'E';
    if (write(report_fd, &msg, 1) != 1)
        _exit(3);
    int64_t end = check_now_ms() + 20000;
    while (atomic_load(&lost_calls) == 0 && check_now_ms() < end)
        check_sleep_ms(1);
    msg = atomic_load(&lost_calls) ? 'L' : 'T';
    if (write(report_fd, &msg, 1) != 1)
        _exit(3);
    msg = rlc_lock_release(l) == RLC_E_LOST ? 'R' : 'X';
    if (write(report_fd, &msg, 1) != 1)
        _exit(3);
    rlc_lock_free(l);
    rlc_client_free(c);
    _exit(0);
}

/* Once an owner was told its hold is lost, every level it still thinks it
 * has reports the loss, whichever call found it first: cleanup code that
 * extends, then releases each level, must not read "not the owner" and
 * must never touch the new holder's lock. */
TEST(lost_hold_is_reported_by_extend_and_every_release)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *other = client(s.uri, NULL);
    rlc_lock *l = lock(c, "relost", 0), *o = lock(other, "relost", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    freeReplyObject(rs_cmd(&s, "DEL relost"));
    CHECK_RC(rlc_lock_acquire(o, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_extend(l, 5000), RLC_E_LOST);
    CHECK_RC(rlc_lock_extend(l, 5000), RLC_E_LOST);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_release(l), RLC_E_NOT_OWNER);
    CHECK(is_held(o) == 1, "the new holder still holds it");
    CHECK(rs_int(&s, "PTTL relost") > 50000, "and its lease was not changed");
    /* The same, found by the first release rather than by extend. */
    CHECK_RC(rlc_lock_release(o), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    freeReplyObject(rs_cmd(&s, "DEL relost"));
    CHECK_RC(rlc_lock_acquire(o, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_release(l), RLC_E_NOT_OWNER);
    CHECK(is_held(o) == 1, "the new holder still holds it");
    /* A lost hold does not stand in the way of a new one. */
    CHECK_RC(rlc_lock_release(o), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    CHECK(rs_int(&s, "HLEN relost") == 1, "one field");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS relost") == 0, "freed by one release");
done:
    rlc_lock_free(l);
    rlc_lock_free(o);
    rlc_client_free(c);
    rlc_client_free(other);
    rs_stop(&s);
}

/* A node that hangs (not closed, just silent) while io_timeout_ms is long:
 * the renewal must not outlast the hold's validity, or the owner would go
 * on believing in a lock nobody renews for a whole timeout more. */
TEST(hung_server_makes_the_hold_lost_when_its_validity_ends)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=600;io_timeout_ms=3000;"
                                  "connect_timeout_ms=3000");
    rlc_lock *l = lock(c, "hung", 0);
    atomic_store(&lost_calls, 0);
    CHECK_RC(rlc_lock_on_lost(l, on_lost, NULL), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t valid = -1;
    CHECK_RC(rlc_lock_validity_ms(l, &valid), RLC_OK);
    int64_t t0 = check_now_ms();
    rs_pause(&s);
    CHECK(WAIT_UNTIL(atomic_load(&lost_calls) > 0, 5000), "on_lost did not fire");
    int64_t took = check_now_ms() - t0;
    /* Validity was under 600 ms; a renewal waiting out io_timeout_ms would
     * take 3 s more. */
    CHECK(took <= valid + 400, "lost %lld ms after the pause, validity was %lld ms",
          (long long)took, (long long)valid);
    CHECK(atomic_load(&lost_reason) == RLC_E_TIMEOUT, "reason %d",
          atomic_load(&lost_reason));
    CHECK(is_held(l) == 0, "is_held is false once lost");
done:
    rs_resume(&s);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(lost_after_holder_frozen_past_its_lease)
{
    START(s);
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    int fds[2] = {-1, -1};
    pid_t pid = 0;
    CHECK(pipe(fds) == 0, "pipe");
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        frozen_child(s.uri, fds[1]);
    }
    close(fds[1]);
    char msg = 0;
    CHECK(read(fds[0], &msg, 1) == 1 && msg == 'H', "child did not take the lock (%c)", msg);
    kill(pid, SIGSTOP);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS frozen") == 0, 3000), "the frozen holder's lease ended");
    c = client(s.uri, NULL);
    l = lock(c, "frozen", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    int64_t resumed = check_now_ms();
    kill(pid, SIGCONT);
    CHECK(read(fds[0], &msg, 1) == 1 && msg == 'L', "child saw no on_lost (%c)", msg);
    int64_t took = check_now_ms() - resumed;
    CHECK(took < 1000, "on_lost came %lld ms after resume (renewal period 200 ms)",
          (long long)took);
    CHECK(read(fds[0], &msg, 1) == 1 && msg == 'R', "child's release was not RLC_E_LOST");
    CHECK(is_held(l) == 1, "the new holder's lock is intact");
    int status = 0;
    waitpid(pid, &status, 0);
    pid = 0;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit status %d", status);
done:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

struct waiter_arg {
    rlc_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t returned_ms;
};

static void *waiter(void *p)
{
    struct waiter_arg *a = p;
    a->rc = rlc_lock_acquire(a->l, a->wait_ms, -1);
    a->returned_ms = check_now_ms();
    if (a->rc == RLC_OK)
        rlc_lock_release(a->l);
    return NULL;
}

TEST(waiter_wakes_on_the_unlock_message_not_the_lease)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *la = lock(a, "handoff", 0), *lb = lock(b, "handoff", 0);
    pthread_t t;
    struct waiter_arg w = {lb, 10000, -99, 0};
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK); /* lease 30 s: only a message can help */
    CHECK(pthread_create(&t, NULL, waiter, &w) == 0, "thread");
    /* The waiter subscribes to the channel: await its subscription. */
    {
        int subscribed = 0;
        int64_t end = check_now_ms() + 3000;
        while (!subscribed && check_now_ms() < end) {
            redisReply *r = rs_cmd(&s, "PUBSUB NUMSUB redisson_lock__channel:{handoff}");
            subscribed = r && r->elements == 2 && r->element[1]->integer == 1;
            freeReplyObject(r);
            check_sleep_ms(2);
        }
        CHECK(subscribed, "the waiter never subscribed");
    }
    check_sleep_ms(50); /* let the waiter's retry fail and go to sleep */
    int64_t released = check_now_ms();
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    pthread_join(t, NULL);
    CHECK(w.rc == RLC_OK, "waiter got %d", w.rc);
    int64_t latency = w.returned_ms - released;
    fprintf(stderr, "hand-off latency: %lld ms\n", (long long)latency);
    /* the lease had 30 s left: a wake within a second is the message's
     * (the bound leaves room for a loaded machine, it is no speed claim) */
    CHECK(latency < 1000, "waiter woke %lld ms after the release", (long long)latency);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(waiter_retries_when_a_crashed_holders_lease_ends)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "crashed", 0);
    /* A holder that will never unlock: a raw Redisson-layout hash, 400 ms. */
    freeReplyObject(rs_cmd(&s, "HINCRBY crashed 9f1c2d4e-0000-4000-8000-000000000000:7 1"));
    freeReplyObject(rs_cmd(&s, "PEXPIRE crashed 400"));
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 5000, -1), RLC_OK);
    int64_t took = check_now_ms() - t0;
    CHECK(took >= 300 && took < 2000, "acquired after %lld ms (lease 400)", (long long)took);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(bounded_wait_gives_up_on_time)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *la = lock(a, "bw", 0), *lb = lock(b, "bw", 0);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(lb, 300, -1), RLC_NOT_ACQUIRED);
    int64_t took = check_now_ms() - t0;
    CHECK(took >= 290 && took < 1500, "gave up after %lld ms, wait was 300", (long long)took);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(redisson_layout_lock_blocks_us_and_ours_is_redisson_layout)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "shared", 0);
    const char *java = "8d0e4c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6:1";
    freeReplyObject(rs_cmd(&s, "HINCRBY shared %s 1", java));
    freeReplyObject(rs_cmd(&s, "PEXPIRE shared 30000"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_release(l), RLC_E_NOT_OWNER);
    CHECK(rs_int(&s, "HEXISTS shared %s", java) == 1, "Redisson's hold intact");

    /* The Java side unlocks as Redisson does: DEL + PUBLISH 0. */
    pthread_t t;
    struct waiter_arg w = {l, 5000, -99, 0};
    CHECK(pthread_create(&t, NULL, waiter, &w) == 0, "thread");
    {
        int subscribed = 0;
        int64_t end = check_now_ms() + 3000;
        while (!subscribed && check_now_ms() < end) {
            redisReply *r = rs_cmd(&s, "PUBSUB NUMSUB redisson_lock__channel:{shared}");
            subscribed = r && r->elements == 2 && r->element[1]->integer == 1;
            freeReplyObject(r);
            check_sleep_ms(2);
        }
        CHECK(subscribed, "never subscribed to Redisson's channel name");
    }
    check_sleep_ms(30);
    int64_t t0 = check_now_ms();
    freeReplyObject(rs_cmd(&s, "DEL shared"));
    freeReplyObject(rs_cmd(&s, "PUBLISH redisson_lock__channel:{shared} 0"));
    pthread_join(t, NULL);
    CHECK(w.rc == RLC_OK, "waiter got %d", w.rc);
    CHECK(w.returned_ms - t0 < 200, "woke %lld ms after Redisson's unlock",
          (long long)(w.returned_ms - t0));

    /* Ours, seen raw: {<uuid>:<thread>: 1}, PTTL = lease; unlock publishes "0". */
    char field[96];
    my_field(c, 0, field, sizeof field);
    CHECK_RC(rlc_lock_acquire(l, 0, 20000), RLC_OK);
    CHECK(rs_int(&s, "HLEN shared") == 1, "one field");
    redisReply *v = rs_cmd(&s, "HGET shared %s", field);
    CHECK(v && v->type == REDIS_REPLY_STRING && strcmp(v->str, "1") == 0, "count 1 under %s",
          field);
    freeReplyObject(v);
    long long pttl = rs_int(&s, "PTTL shared");
    CHECK(pttl > 19000 && pttl <= 20000, "PTTL %lld", pttl);
    redisContext *sub = rs_connect(&s);
    redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{shared}");
    freeReplyObject(r);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    r = NULL;
    CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->elements == 3 &&
              strcmp(r->element[0]->str, "message") == 0 && strcmp(r->element[2]->str, "0") == 0,
          "unlock message \"0\" on redisson_lock__channel:{shared}");
    freeReplyObject(r);
    redisFree(sub);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(channel_name_keeps_existing_braces)
{
    START(s);
    rlc_client *c = client(s.uri, "fencing=1");
    rlc_lock *l = lock(c, "{tenant}:job", 0);
    redisContext *sub = rs_connect(&s);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{tenant}:job"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(rs_int(&s, "EXISTS {tenant}:job") == 1, "key is the name as given");
    CHECK(rs_int(&s, "EXISTS redisson_lock_token:{tenant}:job") == 1, "token key, same rule");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    redisReply *r = NULL;
    CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->elements == 3 &&
              strcmp(r->element[1]->str, "redisson_lock__channel:{tenant}:job") == 0,
          "published without added braces");
    freeReplyObject(r);
    redisFree(sub);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(scripts_reload_after_script_flush_and_restart)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "flush", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    freeReplyObject(rs_cmd(&s, "SCRIPT FLUSH"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS flush") == 0, "released after reload");
    CHECK(rs_restart(&s) == 0, "restart");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(rs_int(&s, "EXISTS flush") == 1, "acquired on the restarted server");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(killed_connections_reconnect_on_next_call)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "ck", 0);
    for (int i = 0; i < 5; i++) {
        CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
        CHECK_RC(rlc_lock_release(l), RLC_OK);
        /* The very next call, with no pause: it must not fail. */
        CHECK(rs_int(&s, "CLIENT KILL TYPE normal") >= 1, "killed the client's connections");
    }
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(unreachable_server_fails_promptly_with_connect)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=200;connect_timeout_ms=200");
    rlc_lock *l = lock(c, "down", 0);
    rs_kill(&s);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_E_CONNECT);
    CHECK(strstr(rlc_errmsg(), "127.0.0.1") != NULL, "errmsg names the node: %s", rlc_errmsg());
    CHECK_RC(rlc_lock_acquire(l, 1000, -1), RLC_E_CONNECT);
    CHECK(check_now_ms() - t0 < 400, "took %lld ms", (long long)(check_now_ms() - t0));
    CHECK(rs_restart(&s) == 0, "restart");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(paused_server_times_out_within_io_plus_connect_timeout)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=200;connect_timeout_ms=100");
    rlc_lock *l = lock(c, "paused", 0), *l2 = NULL;
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK); /* connected */
    rs_pause(&s);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_release(l), RLC_E_TIMEOUT);
    int64_t took = check_now_ms() - t0;
    CHECK(took >= 190 && took < 300 + 100, "timed out after %lld ms", (long long)took);
    l2 = lock(c, "paused2", 0);
    t0 = check_now_ms();
    int rc = rlc_lock_acquire(l2, 0, -1);
    CHECK(rc == RLC_E_TIMEOUT || rc == RLC_E_CONNECT, "acquire on a paused node: %d", rc);
    took = check_now_ms() - t0;
    CHECK(took < 300 + 100 + 100, "took %lld ms", (long long)took);
    rs_resume(&s);
    /* The release that timed out still ran once the server woke up. */
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS paused") == 0, 2000), "late release ran");
    CHECK_RC(rlc_lock_acquire(l2, 1000, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l2), RLC_OK);
done:
    rs_resume(&s);
    rlc_lock_free(l);
    rlc_lock_free(l2);
    rlc_client_free(c);
    rs_stop(&s);
}

static long long eval_calls(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "INFO commandstats");
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_eval:calls=") : NULL;
    long long n = p ? atoll(p + strlen("cmdstat_eval:calls=")) : 0;
    freeReplyObject(r);
    return n;
}

/* The acquire was written before the server froze, so it runs when the
 * server wakes: the undo must follow it on the same connection, or the lock
 * stays held for a whole lease by a caller who was told it failed. */
TEST(acquire_that_timed_out_is_undone_when_the_server_wakes)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=300");
    rlc_lock *l = lock(c, "orphan", 0);
    CHECK(is_locked(l) == 0, "connected, and free");
    freeReplyObject(rs_cmd(&s, "CONFIG RESETSTAT"));
    rs_pause(&s);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_E_TIMEOUT);
    int64_t v = -1; /* no network I/O here: nothing else may flush the undo */
    CHECK(rlc_lock_validity_ms(l, &v) == RLC_OK && v == 0, "a failed acquire is not held");
    rs_resume(&s);
    CHECK(WAIT_UNTIL(eval_calls(&s) >= 1, 3000), "the undo (EVAL of the release) ran");
    CHECK(rs_int(&s, "EXISTS orphan") == 0, "the acquire that timed out was undone");
    CHECK_RC(rlc_lock_acquire(l, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rs_resume(&s);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(wrong_type_key_is_a_server_error_and_untouched)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "orders", 0);
    freeReplyObject(rs_cmd(&s, "SET orders not-a-lock"));
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_E_SERVER);
    CHECK(strstr(rlc_errmsg(), "WRONGTYPE") && strstr(rlc_errmsg(), "orders"),
          "errmsg: %s", rlc_errmsg());
    CHECK_RC(rlc_lock_acquire(l, 500, -1), RLC_E_SERVER);
    CHECK_RC(rlc_lock_release(l), RLC_E_SERVER);
    redisReply *r = rs_cmd(&s, "GET orders");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "not-a-lock") == 0,
          "the string is untouched");
    freeReplyObject(r);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(password_acl_user_and_database_from_the_uri)
{
    START(s, "--requirepass", "s3cret-pw",);
    char uri[256];
    rlc_client *c = NULL, *acl = NULL, *bad = NULL;
    rlc_lock *l = NULL, *la = NULL, *lb = NULL;
    snprintf(uri, sizeof uri, "redis://:s3cret-pw@127.0.0.1:%d/3", s.port);
    c = client(uri, NULL);
    l = lock(c, "db3", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);

    redisContext *raw = rs_connect(&s);
    freeReplyObject(redisCommand(raw, "AUTH s3cret-pw"));
    freeReplyObject(redisCommand(raw, "ACL SETUSER alice on >alice-pw ~* &* +@all"));
    freeReplyObject(redisCommand(raw, "SELECT 3"));
    redisReply *r = redisCommand(raw, "EXISTS db3");
    CHECK(r && r->integer == 1, "the lock is in database 3");
    freeReplyObject(r);

    snprintf(uri, sizeof uri, "redis://alice:alice-pw@127.0.0.1:%d", s.port);
    acl = client(uri, NULL);
    la = lock(acl, "acl", 0);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(la), RLC_OK);

    snprintf(uri, sizeof uri, "redis://:wrong-pw@127.0.0.1:%d", s.port);
    bad = client(uri, NULL);
    lb = lock(bad, "x", 0);
    CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_E_AUTH);
    CHECK(!strstr(rlc_errmsg(), "wrong-pw"), "errmsg leaks the password: %s", rlc_errmsg());
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    redisFree(raw);
done:
    rlc_lock_free(l);
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(c);
    rlc_client_free(acl);
    rlc_client_free(bad);
    rs_stop(&s);
}

TEST(no_password_against_a_protected_server_is_auth)
{
    START(s, "--requirepass", "pw",);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "x", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_E_AUTH);
    CHECK(strstr(rlc_errmsg(), "NOAUTH") != NULL, "errmsg: %s", rlc_errmsg());
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(unix_socket_node)
{
    START(s);
    char uri[256];
    snprintf(uri, sizeof uri, "unix://%s", s.socket);
    rlc_client *c = client(uri, NULL);
    rlc_lock *l = lock(c, "viaunix", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(rs_int(&s, "EXISTS viaunix") == 1, "lock visible over TCP");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(fencing_token_grows_with_each_new_holder)
{
    START(s);
    rlc_client *a = client(s.uri, "fencing=1"), *b = client(s.uri, "fencing=1");
    rlc_lock *la = lock(a, "fence", 0), *lb = lock(b, "fence", 0);
    uint64_t t1 = 0, t1b = 0, t2 = 0;
    CHECK_RC(rlc_lock_fencing_token(la, &t1), RLC_E_NOT_OWNER);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(la, &t1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(la, &t1b), RLC_OK);
    CHECK(t1 == t1b, "a nested acquire keeps the token (%llu vs %llu)",
          (unsigned long long)t1, (unsigned long long)t1b);
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lb, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_fencing_token(lb, &t2), RLC_OK);
    CHECK(t2 > t1, "next holder's token %llu > %llu", (unsigned long long)t2,
          (unsigned long long)t1);
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(extend_sets_a_new_fixed_lease)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "ext", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, 500), RLC_OK);
    CHECK_RC(rlc_lock_extend(l, 5000), RLC_OK);
    long long pttl = rs_int(&s, "PTTL ext");
    CHECK(pttl > 4000 && pttl <= 5000, "PTTL after extend %lld", pttl);
    int64_t v = 0;
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v > 4000 && v <= 5000, "validity %lld", (long long)v);
    CHECK_RC(rlc_lock_extend(l, 0), RLC_OK); /* back to the watchdog */
    pttl = rs_int(&s, "PTTL ext");
    CHECK(pttl > 29000, "watchdog lease after extend(0): %lld", pttl);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_extend(l, 1000), RLC_E_NOT_OWNER);
    CHECK_RC(rlc_lock_acquire(l, 0, 200), RLC_OK);
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS ext") == 0, 2000), "expired");
    CHECK_RC(rlc_lock_extend(l, 1000), RLC_E_LOST);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* An extend whose answer comes after the lease it sets has run out (less
 * the drift allowance) is not certainly held meanwhile: RLC_E_LOST, not an
 * OK that claims a validity already over (quorum_renew_end, as the engine
 * decides). CLIENT PAUSE WRITE holds the extend's script 400 ms on the
 * server, which then runs it: the lock is still there (its lease is 10 s). */
TEST(extend_answered_after_its_lease_ran_out_is_lost)
{
    START(s);
    rlc_client *c = client(s.uri, "io_timeout_ms=3000");
    rlc_lock *l = lock(c, "late", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    redisReply *r = rs_cmd(&s, "CLIENT PAUSE 400 WRITE");
    int paused = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (r)
        freeReplyObject(r);
    CHECK(paused, "CLIENT PAUSE refused");
    CHECK_RC(rlc_lock_extend(l, 200), RLC_E_LOST);
    CHECK(strstr(rlc_errmsg(), "came after") != NULL, "message: %s", rlc_errmsg());
    long long pttl = rs_int(&s, "PTTL late");
    CHECK(pttl <= 200, "the server ran the extend all the same: PTTL %lld", pttl);
    CHECK_RC(rlc_lock_release(l), RLC_E_LOST);
    CHECK_RC(rlc_lock_acquire(l, 0, 5000), RLC_OK); /* a new hold, extended in time */
    CHECK_RC(rlc_lock_extend(l, 5000), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(force_release_frees_any_holder_and_wakes_waiters)
{
    START(s);
    /* no loss push: its pair of connections opens on its own schedule */
    rlc_client *a = client(s.uri, "loss_push=0"), *b = client(s.uri, "loss_push=0");
    rlc_lock *la = lock(a, "force", 0), *lb = lock(b, "force", 0);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    pthread_t t;
    struct waiter_arg w = {lb, 5000, -99, 0};
    CHECK(pthread_create(&t, NULL, waiter, &w) == 0, "thread");
    check_sleep_ms(100);
    rlc_client *admin = client(s.uri, NULL);
    rlc_lock *lx = lock(admin, "force", 0);
    int locked = 0;
    CHECK_RC(rlc_lock_is_locked(lx, &locked), RLC_OK); /* admin's connection is up */
    /* and b's waiter has its subscriber */
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{force}") == 1, 5000),
          "the waiter did not subscribe");
    long long conns = server_connections(&s);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_force_release(lx), RLC_OK);
    /* on the connection the locks use: none of its own */
    /* awaited: the server may still list a connection of ours it is closing */
    CHECK(WAIT_UNTIL(server_connections(&s) == conns, 2000),
          "the force release opened %lld connections", server_connections(&s) - conns);
    pthread_join(t, NULL);
    CHECK(w.rc == RLC_OK && w.returned_ms - t0 < 500, "waiter: rc %d after %lld ms", w.rc,
          (long long)(w.returned_ms - t0));
    CHECK_RC(rlc_lock_release(la), RLC_E_LOST);
    CHECK_RC(rlc_lock_force_release(lx), RLC_OK); /* nothing held: still fine */
    rlc_lock_free(lx);
    rlc_client_free(admin);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(validity_and_ttl_queries)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "v", 0);
    int64_t v = -1, ttl = 0;
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    CHECK(v == 0, "not held: validity 0, got %lld", (long long)v);
    CHECK_RC(rlc_lock_ttl_ms(l, &ttl), RLC_OK);
    CHECK(ttl == -2, "no key: ttl -2, got %lld", (long long)ttl);
    CHECK_RC(rlc_lock_acquire(l, 0, 10000), RLC_OK);
    CHECK_RC(rlc_lock_validity_ms(l, &v), RLC_OK);
    /* lease - elapsed - (1% of lease + 2 ms) */
    CHECK(v > 9700 && v <= 9898, "validity %lld", (long long)v);
    CHECK_RC(rlc_lock_ttl_ms(l, &ttl), RLC_OK);
    CHECK(ttl > 9000 && ttl <= 10000, "ttl %lld", (long long)ttl);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

struct owner_arg {
    rlc_lock *l;
    int rc;
};

static void *acquire_in_thread(void *p)
{
    struct owner_arg *a = p;
    a->rc = rlc_lock_acquire(a->l, 0, -1);
    return NULL;
}

static void *release_in_thread(void *p)
{
    struct owner_arg *a = p;
    a->rc = rlc_lock_release(a->l);
    return NULL;
}

TEST(owner_is_the_thread_unless_given)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *thread_lock = lock(c, "own", 0), *req1 = lock(c, "own", 1001),
             *req2 = lock(c, "own", 1002), *req1b = lock(c, "own", 1001);
    pthread_t t;
    struct owner_arg a = {thread_lock, -99};
    CHECK_RC(rlc_lock_acquire(thread_lock, 0, -1), RLC_OK);
    CHECK(pthread_create(&t, NULL, acquire_in_thread, &a) == 0, "thread");
    pthread_join(t, NULL);
    CHECK(a.rc == RLC_NOT_ACQUIRED, "another thread is another owner: %d", a.rc);
    CHECK_RC(rlc_lock_release(thread_lock), RLC_OK);

    CHECK_RC(rlc_lock_acquire(req1, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(req2, 0, -1), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_lock_acquire(req1b, 0, -1), RLC_OK); /* same explicit owner: reentrant */
    char field[96];
    my_field(c, 1001, field, sizeof field);
    redisReply *r = rs_cmd(&s, "HGET own %s", field);
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "2") == 0, "field %s = 2", field);
    freeReplyObject(r);
    /* An explicit owner is the same from any thread. */
    a = (struct owner_arg){req1, -99};
    CHECK(pthread_create(&t, NULL, release_in_thread, &a) == 0, "thread");
    pthread_join(t, NULL);
    CHECK(a.rc == RLC_OK, "release from another thread: %d", a.rc);
    CHECK_RC(rlc_lock_release(req1b), RLC_OK);
    CHECK(rs_int(&s, "EXISTS own") == 0, "free");
    /* A thread's id can never be passed as an explicit owner: no shared holds. */
    rlc_lock *as_thread = NULL;
    CHECK_RC(rlc_lock_new(c, "own", rlc_thread_owner(), &as_thread), RLC_E_INVAL);
    CHECK(as_thread == NULL, "no handle on failure");
    CHECK_RC(rlc_lock_new(c, "own", (UINT64_C(1) << 62) - 1, &as_thread), RLC_OK);
    rlc_lock_free(as_thread);
done:
    rlc_lock_free(thread_lock);
    rlc_lock_free(req1);
    rlc_lock_free(req2);
    rlc_lock_free(req1b);
    rlc_client_free(c);
    rs_stop(&s);
}

/* 16 threads, one client: half share one handle, half have their own; a
 * counter in this process is incremented non-atomically under the lock. */
struct hammer {
    rlc_client *c;
    rlc_lock *shared;
    int iterations;
    volatile long counter;
    atomic_int inside;
    atomic_int overlaps;
    atomic_int errors;
};

static void *hammer_thread(void *p)
{
    struct hammer *h = p;
    rlc_lock *own = NULL;
    if (rlc_lock_new(h->c, "hammer", 0, &own) != RLC_OK)
        atomic_fetch_add(&h->errors, 1);
    uint64_t me = rlc_thread_owner();
    rlc_lock *l = (me % 2) ? h->shared : own;
    for (int i = 0; i < h->iterations && own; i++) {
        if (rlc_lock_acquire(l, 10000, -1) != RLC_OK) {
            atomic_fetch_add(&h->errors, 1);
            continue;
        }
        if (atomic_fetch_add(&h->inside, 1) != 0)
            atomic_fetch_add(&h->overlaps, 1);
        long v = h->counter;
        if (i % 8 == 0)
            sched_yield();
        h->counter = v + 1;
        atomic_fetch_sub(&h->inside, 1);
        if (rlc_lock_release(l) != RLC_OK)
            atomic_fetch_add(&h->errors, 1);
    }
    rlc_lock_free(own);
    return NULL;
}

TEST(sixteen_threads_share_one_client)
{
    START(s);
    struct hammer h = {.iterations = 100};
    h.c = client(s.uri, NULL);
    h.shared = lock(h.c, "hammer", 0);
    pthread_t t[16];
    for (int i = 0; i < 16; i++)
        CHECK(pthread_create(&t[i], NULL, hammer_thread, &h) == 0, "thread");
    for (int i = 0; i < 16; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&h.errors) == 0, "%d errors", atomic_load(&h.errors));
    CHECK(atomic_load(&h.overlaps) == 0, "%d overlaps", atomic_load(&h.overlaps));
    CHECK(h.counter == 16 * 100, "counter %ld, expected 1600", h.counter);
    CHECK(rs_int(&s, "EXISTS hammer") == 0, "released at the end");
done:
    rlc_lock_free(h.shared);
    rlc_client_free(h.c);
    rs_stop(&s);
}

TEST(forked_child_gets_closed_and_never_touches_parent_sockets)
{
#if defined(__SANITIZE_THREAD__)
    /* TSan cannot run threads in a child forked from a threaded process
     * ("dup thread with used id"); this case runs in the other builds. */
    fprintf(stderr, "skipped under ThreadSanitizer\n");
    return;
#endif
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "fork", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK); /* the parent's connection is open */
    pid_t pid = fork();
    if (pid == 0) {
        int ok = rlc_lock_release(l) == RLC_E_CLOSED && rlc_lock_acquire(l, 0, -1) == RLC_E_CLOSED;
        rlc_lock *l2 = NULL;
        ok = ok && rlc_lock_new(c, "x", 0, &l2) == RLC_E_CLOSED;
        rlc_client *fresh = NULL;
        rlc_lock *lf = NULL;
        ok = ok && rlc_client_new(&fresh, s.uri, NULL) == RLC_OK &&
             rlc_lock_new(fresh, "fork", 0, &lf) == RLC_OK &&
             rlc_lock_acquire(lf, 0, -1) == RLC_NOT_ACQUIRED;
        rlc_lock_free(lf);
        rlc_client_free(fresh);
        rlc_lock_free(l);
        rlc_client_free(c);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    /* The parent's client still works on its own sockets. */
    CHECK(is_held(l) == 1, "parent still holds");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Children forked after the parent's main thread waited on its client each
 * make their own client and contend for one lock. The wake-up of a waiting
 * caller is an eventfd per thread: a child's main thread had the parent's,
 * one kernel object shared by every child, so a wake-up meant for one child
 * was read by another and the first slept forever (a child hung in a call
 * that waited to be handed the lead). Each child must finish its rounds;
 * the wait is bounded. */
TEST(children_forked_after_the_parent_locked_wake_their_own_waiters)
{
#if defined(__SANITIZE_THREAD__)
    fprintf(stderr, "skipped under ThreadSanitizer\n"); /* see the case above */
    return;
#endif
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "forked-wakeups", 0);
    pid_t kids[4] = {0};
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK); /* this thread's wake-up exists now */
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    for (int k = 0; k < 4; k++) {
        if ((kids[k] = fork()) != 0)
            continue;
        rlc_client *mine = NULL;
        rlc_lock *ml = NULL;
        int done = 0;
        if (rlc_client_new(&mine, s.uri, NULL) == RLC_OK &&
            rlc_lock_new(mine, "forked-wakeups", 0, &ml) == RLC_OK)
            for (; done < 30 && rlc_lock_acquire(ml, 10000, -1) == RLC_OK; done++) {
                check_sleep_ms(1 + done % 5);
                rlc_lock_release(ml);
                /* idle past the driver's linger: its background thread
                 * leads, and the next call waits to be handed the lead */
                check_sleep_ms(3 + (done + k) % 7);
            }
        rlc_lock_free(ml);
        rlc_client_free(mine);
        rlc_lock_free(l); /* the parent's, closed here: freed without I/O */
        rlc_client_free(c);
        _exit(done == 30 ? 0 : 1);
    }
    for (int k = 0; k < 4; k++) {
        int status = -1;
        int ended = WAIT_UNTIL(waitpid(kids[k], &status, WNOHANG) == kids[k], 30000);
        CHECK(ended, "child %d did not finish its 30 rounds in 30 s (a lost wake-up)", k);
        kids[k] = 0;
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %d", k, status);
    }
done:
    for (int k = 0; k < 4; k++)
        if (kids[k] > 0) {
            kill(kids[k], SIGKILL);
            waitpid(kids[k], NULL, 0);
        }
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(closing_the_client_leaves_lock_handles_safe)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "close", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, 2000), RLC_OK);
    rlc_client_free(c);
    CHECK_RC(rlc_lock_release(l), RLC_E_CLOSED);
    int v;
    CHECK_RC(rlc_lock_is_locked(l, &v), RLC_E_CLOSED);
    CHECK(rs_int(&s, "EXISTS close") == 1, "closing does not release on the server");
done:
    rlc_lock_free(l);
    rs_stop(&s);
}

TEST(key_prefix_is_prepended)
{
    START(s);
    rlc_client *c = client(s.uri, "key_prefix=app1:");
    rlc_lock *l = lock(c, "jobs", 0);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK(rs_int(&s, "EXISTS app1:jobs") == 1, "prefixed key");
    CHECK(rs_int(&s, "EXISTS jobs") == 0, "no unprefixed key");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    {
        /* A text option is taken as written: spaces at both ends stay. */
        rlc_client *sp = client(s.uri, "pool_size = 1 ;key_prefix= a b ;");
        rlc_lock *ls = lock(sp, "jobs", 0);
        int ok = ls && rlc_lock_acquire(ls, 0, -1) == RLC_OK;
        long long exists = rs_int(&s, "EXISTS %s", " a b jobs");
        rlc_lock_free(ls);
        rlc_client_free(sp);
        CHECK(ok && exists == 1, "key ' a b jobs' (acquired %d, EXISTS %lld)", ok, exists);
    }
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* This process's threads whose name starts with "rlc-" (the library's). */
static int library_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *t; (t = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = t->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f && fgets(comm, sizeof comm, f))
            n += strncmp(comm, "rlc-", 4) == 0;
        if (f)
            fclose(f);
    }
    closedir(d);
    return n;
}

/* A client that locks (acquire, queries, extend, force release, fenced
 * writes, release) and uses every kind of the family runs the engine's two
 * threads and opens one command connection (and a subscriber while someone
 * waits). A read-write or fair lock, and later a semaphore, made the older
 * stack with its handle (3 threads) and waited on it. */
TEST(a_client_that_only_locks_runs_two_threads_and_one_connection)
{
    START(s);
    long long before = server_connections(&s);
    rlc_client *c = client(s.uri, "loss_push=0");
    rlc_lock *l = lock(c, "only", 0);
    rlc_rwlock *rw = NULL;
    rlc_fairlock *fair = NULL;
    rlc_semaphore *sem = NULL;
    rlc_psemaphore *psem = NULL;
    int applied = 0, v = 0;
    int64_t ttl = 0;
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_is_locked(l, &v), RLC_OK);
    CHECK_RC(rlc_lock_ttl_ms(l, &ttl), RLC_OK);
    CHECK_RC(rlc_lock_extend(l, 20000), RLC_OK);
    CHECK_RC(rlc_fenced_set(c, "only:res", "v", 1, 1, &applied), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_force_release(l), RLC_OK);
    CHECK(WAIT_UNTIL(library_threads() == 2, 5000), "%d library threads", library_threads());
    CHECK(WAIT_UNTIL(server_connections(&s) == before + 1, 2000), "%lld connections",
          server_connections(&s) - before);
    CHECK_RC(rlc_rwlock_new(c, "only-rw", 0, &rw), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(rw, 0, -1), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(rw, 0, -1), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(rw), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(rw), RLC_OK);
    CHECK(library_threads() == 2, "with write locks: %d library threads", library_threads());
    CHECK(server_connections(&s) == before + 1, "with write locks: %lld connections",
          server_connections(&s) - before);
    CHECK_RC(rlc_rwlock_read_acquire(rw, 0, -1), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(rw, 0, -1), RLC_OK);
    int mode = -1;
    CHECK_RC(rlc_rwlock_mode(rw, &mode), RLC_OK);
    CHECK(mode == 1, "mode %d while read", mode);
    CHECK_RC(rlc_rwlock_read_release(rw), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(rw), RLC_OK);
    CHECK(library_threads() == 2, "with read locks: %d library threads", library_threads());
    CHECK(server_connections(&s) == before + 1, "with read locks: %lld connections",
          server_connections(&s) - before);
    CHECK_RC(rlc_fairlock_new(c, "only-fair", 0, 0, &fair), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(fair, 0, -1), RLC_OK);
    CHECK_RC(rlc_fairlock_release(fair), RLC_OK);
    CHECK(library_threads() == 2, "with fair locks: %d library threads", library_threads());
    CHECK(server_connections(&s) == before + 1, "with fair locks: %lld connections",
          server_connections(&s) - before);
    /* semaphores are engine operations too: the same threads and connection */
    CHECK_RC(rlc_semaphore_new(c, "only-sem", &sem), RLC_OK);
    CHECK_RC(rlc_semaphore_try_set_permits(sem, 2, NULL), RLC_OK);
    CHECK_RC(rlc_semaphore_acquire(sem, 2, 0), RLC_OK);
    CHECK_RC(rlc_semaphore_release(sem, 2), RLC_OK);
    int64_t free_now = -1;
    CHECK_RC(rlc_semaphore_available(sem, &free_now), RLC_OK);
    CHECK(free_now == 2, "%lld permits free", (long long)free_now);
    CHECK_RC(rlc_psemaphore_new(c, "only-psem", &psem), RLC_OK);
    CHECK_RC(rlc_psemaphore_try_set_permits(psem, 1, NULL), RLC_OK);
    char id[RLC_PERMIT_ID_LEN + 1];
    CHECK_RC(rlc_psemaphore_acquire(psem, 1, 0, 30000, id), RLC_OK);
    CHECK_RC(rlc_psemaphore_release(psem, id), RLC_OK);
    CHECK(library_threads() == 2, "with semaphores: %d library threads", library_threads());
    CHECK(server_connections(&s) == before + 1, "with semaphores: %lld connections",
          server_connections(&s) - before);
done:
    rlc_psemaphore_free(psem);
    rlc_semaphore_free(sem);
    rlc_fairlock_free(fair);
    rlc_rwlock_free(rw);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(acquire_and_release_change_the_hash),
          CASE(mutual_exclusion_between_two_clients),
          CASE(reentrant_count_three_needs_three_releases),
          CASE(non_owner_release_is_refused_and_touches_nothing),
          CASE(fixed_lease_expires_and_release_reports_lost),
          CASE(watchdog_keeps_a_one_second_lease_alive_for_five_seconds),
          CASE(lost_after_del_fires_callback_once),
          CASE(lost_after_holder_frozen_past_its_lease),
          CASE(hung_server_makes_the_hold_lost_when_its_validity_ends),
          CASE(lost_hold_is_reported_by_extend_and_every_release),
          CASE(extend_answered_after_its_lease_ran_out_is_lost),
          CASE(waiter_wakes_on_the_unlock_message_not_the_lease),
          CASE(waiter_retries_when_a_crashed_holders_lease_ends),
          CASE(bounded_wait_gives_up_on_time),
          CASE(redisson_layout_lock_blocks_us_and_ours_is_redisson_layout),
          CASE(channel_name_keeps_existing_braces),
          CASE(scripts_reload_after_script_flush_and_restart),
          CASE(killed_connections_reconnect_on_next_call),
          CASE(unreachable_server_fails_promptly_with_connect),
          CASE(paused_server_times_out_within_io_plus_connect_timeout),
          CASE(acquire_that_timed_out_is_undone_when_the_server_wakes),
          CASE(wrong_type_key_is_a_server_error_and_untouched),
          CASE(password_acl_user_and_database_from_the_uri),
          CASE(no_password_against_a_protected_server_is_auth),
          CASE(unix_socket_node),
          CASE(fencing_token_grows_with_each_new_holder),
          CASE(extend_sets_a_new_fixed_lease),
          CASE(force_release_frees_any_holder_and_wakes_waiters),
          CASE(a_client_that_only_locks_runs_two_threads_and_one_connection),
          CASE(validity_and_ttl_queries),
          CASE(owner_is_the_thread_unless_given),
          CASE(sixteen_threads_share_one_client),
          CASE(forked_child_gets_closed_and_never_touches_parent_sockets),
          CASE(children_forked_after_the_parent_locked_wake_their_own_waiters),
          CASE(closing_the_client_leaves_lock_handles_safe),
          CASE(key_prefix_is_prepended))
