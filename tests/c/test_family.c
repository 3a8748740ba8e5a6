/*
 * test_family.c - the lock family on real servers: read-write lock, fair
 * lock, semaphores, multi-name lock; their keys and messages against
 * Redisson's layout (docs/FAMILY.md), and their promises under load and
 * faults. Every wait is bounded.
 */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

/* An integer reply or a number in a string reply (HGET, GET); LLONG_MIN else. */
static long long rs_num(const struct redis_server *s, const char *cmd, const char *arg)
{
    redisReply *r = arg ? rs_cmd(s, cmd, arg) : rs_cmd(s, cmd);
    long long v = LLONG_MIN;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    return v;
}

static void field_of(rlc_client *c, uint64_t owner, char *buf, size_t n)
{
    snprintf(buf, n, "%s:%llu", rlc_client_uuid(c),
             (unsigned long long)(owner ? owner : rlc_thread_owner()));
}

/* A raw subscriber; next_message waits (bounded) for one payload. */
static redisContext *subscribe(const struct redis_server *s, const char *channel)
{
    redisContext *sub = rs_connect(s);
    if (!sub)
        return NULL;
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
    if (r)
        freeReplyObject(r);
    struct timeval tv = {2, 0};
    redisSetTimeout(sub, tv);
    return sub;
}

static int next_message(redisContext *sub, char *payload, size_t n)
{
    void *v = NULL;
    if (redisGetReply(sub, &v) != REDIS_OK || !v)
        return 0;
    redisReply *r = v;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
             r->element[2]->type == REDIS_REPLY_STRING;
    if (ok)
        snprintf(payload, n, "%s", r->element[2]->str);
    freeReplyObject(r);
    return ok;
}

/* ---- read-write lock ------------------------------------------------------- */

TEST(rwlock_keys_and_messages_are_redissons)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_rwlock *l = NULL;
    redisContext *sub = NULL;
    char field[96], key[256], payload[16] = "";
    field_of(c, 7, field, sizeof field);
    CHECK_RC(rlc_rwlock_new(c, "rw", 7, &l), RLC_OK);
    sub = subscribe(&s, "redisson_rwlock:{rw}");
    CHECK(sub, "a raw subscriber");

    CHECK_RC(rlc_rwlock_read_acquire(l, 0, 5000), RLC_OK);
    redisReply *r = rs_cmd(&s, "HGET rw mode");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "read") == 0, "mode is read");
    freeReplyObject(r);
    CHECK(rs_num(&s, "HGET rw %s", field) == 1, "the reader's field counts 1");
    snprintf(key, sizeof key, "{rw}:%s:rwlock_timeout:1", field);
    long long t = rs_int(&s, "PTTL %s", key);
    CHECK(t > 4000 && t <= 5000, "the level's timeout key %s has the lease, saw %lld", key, t);
    CHECK_RC(rlc_rwlock_read_acquire(l, 0, 5000), RLC_OK);
    snprintf(key, sizeof key, "{rw}:%s:rwlock_timeout:2", field);
    CHECK(rs_int(&s, "EXISTS %s", key) == 1, "a nested read level has timeout key :2");
    CHECK_RC(rlc_rwlock_read_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS %s", key) == 0, "its release deletes timeout key :2");
    CHECK_RC(rlc_rwlock_read_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS rw") == 0, "the last read release deletes the hash");
    CHECK(next_message(sub, payload, sizeof payload) && strcmp(payload, "0") == 0,
          "a read unlock publishes 0 (Redisson's UNLOCK_MESSAGE), saw '%s'", payload);

    CHECK_RC(rlc_rwlock_write_acquire(l, 0, 5000), RLC_OK);
    r = rs_cmd(&s, "HGET rw mode");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "write") == 0, "mode is write");
    freeReplyObject(r);
    CHECK(rs_num(&s, "HGET rw %s:write", field) == 1, "the writer's field is <uuid>:<id>:write");
    /* Redisson's rule: the writer may read too */
    CHECK_RC(rlc_rwlock_read_acquire(l, 0, 5000), RLC_OK);
    CHECK(rs_num(&s, "HGET rw %s", field) == 1, "the writer's read level");
    CHECK_RC(rlc_rwlock_write_release(l), RLC_OK);
    r = rs_cmd(&s, "HGET rw mode");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "read") == 0,
          "the write release leaves mode read while the writer still reads");
    freeReplyObject(r);
    CHECK(next_message(sub, payload, sizeof payload) && strcmp(payload, "1") == 0,
          "a write unlock publishes 1 (READ_UNLOCK_MESSAGE), saw '%s'", payload);
    CHECK_RC(rlc_rwlock_read_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS rw") == 0, "and the last read level frees it");
    CHECK_RC(rlc_rwlock_read_release(l), RLC_E_NOT_OWNER);
done:
    if (sub)
        redisFree(sub);
    rlc_rwlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Intervals [start, end] in ms of every hold, read (0) or write (1). */
#define MAX_IV 20000
struct iv {
    int64_t a, b;
    int write;
};
static struct iv ivs[MAX_IV];
static atomic_int n_iv;
static atomic_int rw_failures;
static const char *rw_uri;
static atomic_int rw_stop;

static void *rw_worker(void *arg)
{
    int write = (int)(intptr_t)arg;
    rlc_client *c = client(rw_uri, NULL);
    rlc_rwlock *l = NULL;
    if (!c || rlc_rwlock_new(c, "shared", 0, &l) != RLC_OK) {
        atomic_fetch_add(&rw_failures, 1);
        goto out;
    }
    for (int i = 0; i < 10000 && !atomic_load(&rw_stop); i++) {
        int rc = write ? rlc_rwlock_write_acquire(l, 3000, -1) : rlc_rwlock_read_acquire(l, 3000, -1);
        if (rc != RLC_OK) {
            fprintf(stderr, "%s acquire: %s\n", write ? "write" : "read", rlc_errmsg());
            atomic_fetch_add(&rw_failures, 1);
            break;
        }
        int64_t a = check_now_ms();
        check_sleep_ms(write ? 3 : 6);
        int64_t b = check_now_ms();
        int k = atomic_fetch_add(&n_iv, 1);
        if (k < MAX_IV)
            ivs[k] = (struct iv){a, b, write};
        rc = write ? rlc_rwlock_write_release(l) : rlc_rwlock_read_release(l);
        if (rc != RLC_OK)
            atomic_fetch_add(&rw_failures, 1);
        check_sleep_ms(1);
    }
out:
    rlc_rwlock_free(l);
    rlc_client_free(c);
    return NULL;
}

TEST(rwlock_readers_overlap_writers_exclude_everyone)
{
    START(s);
    rw_uri = s.uri;
    atomic_store(&n_iv, 0);
    atomic_store(&rw_stop, 0);
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, rw_worker, (void *)(intptr_t)(i < 2));
    check_sleep_ms(2000);
    atomic_store(&rw_stop, 1);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    int n = atomic_load(&n_iv) < MAX_IV ? atomic_load(&n_iv) : MAX_IV;
    int writes = 0, overlapping_reads = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        writes += ivs[i].write;
        for (int j = i + 1; j < n; j++) {
            bool overlap = ivs[i].a < ivs[j].b && ivs[j].a < ivs[i].b;
            if (!overlap)
                continue;
            if (ivs[i].write || ivs[j].write)
                bad++;
            else
                overlapping_reads++;
        }
    }
    CHECK(atomic_load(&rw_failures) == 0, "no acquire failed or timed out (%d did)",
          atomic_load(&rw_failures));
    CHECK(bad == 0, "a write hold overlapped another hold %d times in %d intervals", bad, n);
    CHECK(writes >= 5, "writers were not starved: %d write holds", writes);
    CHECK(overlapping_reads > 0, "readers held at the same time (%d overlaps)", overlapping_reads);
done:
    rs_stop(&s);
}

struct waiting_writer {
    rlc_rwlock *l;
    int rc;
    atomic_int done;
};

static void *write_waiter(void *arg)
{
    struct waiting_writer *w = arg;
    w->rc = rlc_rwlock_write_acquire(w->l, 10000, 5000);
    atomic_store(&w->done, 1);
    return NULL;
}

TEST(rwlock_waiting_writer_holds_back_new_readers)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_rwlock *r1 = NULL, *r2 = NULL, *w = NULL;
    bool joined = true;
    pthread_t th;
    struct waiting_writer ww = {0};
    CHECK_RC(rlc_rwlock_new(c, "wp", 1, &r1), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c, "wp", 2, &r2), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c, "wp", 3, &w), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(r1, 0, 10000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(r2, 0, 10000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(r2), RLC_OK);
    ww.l = w;
    pthread_create(&th, NULL, write_waiter, &ww);
    joined = false;
    CHECK(WAIT_UNTIL(rs_int(&s, "ZCARD redlockc_rwlock_writers:{wp}") == 1, 3000),
          "the waiting writer registered");
    CHECK_RC(rlc_rwlock_read_acquire(r2, 0, 10000), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_rwlock_read_acquire(r1, 0, 10000), RLC_OK); /* a reader may nest */
    CHECK_RC(rlc_rwlock_read_release(r1), RLC_OK);
    CHECK(atomic_load(&ww.done) == 0, "the writer waits while a reader holds");
    CHECK_RC(rlc_rwlock_read_release(r1), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&ww.done), 3000), "the writer got it when the reader left");
    pthread_join(th, NULL);
    joined = true;
    CHECK_RC(ww.rc, RLC_OK);
    CHECK(rs_int(&s, "ZCARD redlockc_rwlock_writers:{wp}") == 0, "its registration is gone");
    CHECK_RC(rlc_rwlock_write_release(w), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(r2, 0, 10000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(r2), RLC_OK);
done:
    if (!joined)
        pthread_join(th, NULL);
    rlc_rwlock_free(r1);
    rlc_rwlock_free(r2);
    rlc_rwlock_free(w);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(rwlock_watchdog_renews_read_levels)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=600");
    rlc_rwlock *l = NULL;
    char field[96];
    field_of(c, 5, field, sizeof field);
    CHECK_RC(rlc_rwlock_new(c, "wd", 5, &l), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(l, 0, -1), RLC_OK);
    check_sleep_ms(1500);
    CHECK(rs_int(&s, "EXISTS wd") == 1, "the hash outlived 2.5 leases");
    CHECK(rs_int(&s, "PTTL {wd}:%s:rwlock_timeout:2", field) > 0, "level 2's key is renewed");
    CHECK(rs_int(&s, "PTTL {wd}:%s:rwlock_timeout:1", field) > 0, "level 1's key is renewed");
    CHECK_RC(rlc_rwlock_read_release(l), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS wd") == 0, "released");
done:
    rlc_rwlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- fair lock ----------------------------------------------------------------- */

/* Contender k joins the queue only when k others are in it, so the queue
 * order is 0..15, spread over 4 processes (k = thread * 4 + process). */
struct contender {
    const struct redis_server *s;
    int k;
    int ok;
};

static void *fair_contender(void *arg)
{
    struct contender *ct = arg;
    rlc_client *c = client(ct->s->uri, NULL);
    rlc_fairlock *l = NULL;
    if (!c || rlc_fairlock_new(c, "fifo", 0, 60000, &l) != RLC_OK)
        goto out;
    int64_t until = check_now_ms() + 20000;
    while (rs_int(ct->s, "LLEN redisson_lock_queue:{fifo}") != ct->k && check_now_ms() < until)
        check_sleep_ms(3);
    if (rlc_fairlock_acquire(l, 30000, -1) != RLC_OK) {
        fprintf(stderr, "contender %d: %s\n", ct->k, rlc_errmsg());
        goto out;
    }
    rs_int(ct->s, "RPUSH order %d", ct->k);
    check_sleep_ms(2);
    ct->ok = rlc_fairlock_release(l) == RLC_OK;
out:
    rlc_fairlock_free(l);
    rlc_client_free(c);
    return NULL;
}

/* The children are forked before this process has a client (so before it
 * has any thread: under TSan, threads made in the child of a multi-threaded
 * parent collide with the parent's in its registry, "dup thread with used
 * id", and never run), and start their contenders once the lock is held. */
TEST(fair_lock_hands_off_in_fifo_order_across_processes)
{
    START(s);
    rlc_client *c = NULL;
    rlc_fairlock *l = NULL;
    pid_t kids[4] = {0};
    for (int p = 0; p < 4; p++) {
        kids[p] = fork();
        if (kids[p] == 0) {
            int64_t until = check_now_ms() + 20000;
            while (rs_int(&s, "EXISTS fifo") != 1 && check_now_ms() < until)
                check_sleep_ms(3);
            pthread_t th[4];
            struct contender ct[4];
            for (int j = 0; j < 4; j++) {
                ct[j] = (struct contender){&s, j * 4 + p, 0};
                pthread_create(&th[j], NULL, fair_contender, &ct[j]);
            }
            int ok = 1;
            for (int j = 0; j < 4; j++) {
                pthread_join(th[j], NULL);
                ok &= ct[j].ok;
            }
            _exit(ok ? 0 : 1);
        }
    }
    c = client(s.uri, NULL);
    CHECK_RC(rlc_fairlock_new(c, "fifo", 1, 60000, &l), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(l, 0, 30000), RLC_OK);
    CHECK(WAIT_UNTIL(rs_int(&s, "LLEN redisson_lock_queue:{fifo}") == 16, 20000),
          "16 waiters queued, saw %lld", rs_int(&s, "LLEN redisson_lock_queue:{fifo}"));
    CHECK(rs_int(&s, "ZCARD redisson_lock_timeout:{fifo}") == 16, "each has a timeout");
    CHECK_RC(rlc_fairlock_release(l), RLC_OK);
    for (int p = 0; p < 4; p++) {
        int st = -1;
        waitpid(kids[p], &st, 0);
        kids[p] = 0;
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d's contenders all got it", p);
    }
    redisReply *r = rs_cmd(&s, "LRANGE order 0 -1");
    CHECK(r && r->elements == 16, "16 hand-offs recorded");
    for (int k = 0; k < 16; k++)
        CHECK(atoi(r->element[k]->str) == k, "hand-off %d went to contender %s (FIFO broken)", k,
              r->element[k]->str);
    freeReplyObject(r);
    CHECK(rs_int(&s, "EXISTS redisson_lock_queue:{fifo}") == 0, "the queue is empty");
done:
    for (int p = 0; p < 4; p++)
        if (kids[p] > 0) {
            kill(kids[p], SIGKILL);
            waitpid(kids[p], NULL, 0);
        }
    rlc_fairlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(fair_waiter_that_gives_up_or_dies_leaves_the_queue)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_fairlock *a = NULL, *b = NULL;
    pid_t kid = 0;
    CHECK_RC(rlc_fairlock_new(c, "gq", 1, 300, &a), RLC_OK);
    CHECK_RC(rlc_fairlock_new(c, "gq", 2, 300, &b), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(a, 0, 30000), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(b, 200, 30000), RLC_NOT_ACQUIRED);
    CHECK(WAIT_UNTIL(rs_int(&s, "LLEN redisson_lock_queue:{gq}") == 0, 5000),
          "a waiter that gave up left the queue");
    kid = fork();
    if (kid == 0) {
        rlc_client *k = client(s.uri, NULL);
        rlc_fairlock *kl = NULL;
        rlc_fairlock_new(k, "gq", 9, 300, &kl);
        rlc_fairlock_acquire(kl, -1, -1);
        _exit(0);
    }
    CHECK(WAIT_UNTIL(rs_int(&s, "LLEN redisson_lock_queue:{gq}") == 1, 5000), "the child queued");
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    kid = 0;
    CHECK_RC(rlc_fairlock_release(a), RLC_OK);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_fairlock_acquire(b, 5000, 30000), RLC_OK);
    int64_t took = check_now_ms() - t0;
    /* a retry comes once a second; the rest is slack for a loaded machine:
     * the default thread wait (5 s) would take 10 s */
    CHECK(took <= 2 * 300 + 2500, "the dead waiter held up the queue %lld ms (documented: at "
          "most 2 x thread wait after its last try, plus a retry)", (long long)took);
    CHECK_RC(rlc_fairlock_release(b), RLC_OK);
done:
    if (kid > 0) {
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
    }
    rlc_fairlock_free(a);
    rlc_fairlock_free(b);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(fair_lock_is_reentrant_and_releases_to_redisson_layout)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_fairlock *l = NULL;
    char field[96];
    field_of(c, 4, field, sizeof field);
    CHECK_RC(rlc_fairlock_new(c, "fr", 4, 0, &l), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(l, 0, 5000), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(l, 0, 5000), RLC_OK);
    CHECK(rs_num(&s, "HGET fr %s", field) == 2, "an RLock hash with count 2");
    CHECK_RC(rlc_fairlock_release(l), RLC_OK);
    CHECK_RC(rlc_fairlock_release(l), RLC_OK);
    CHECK(rs_int(&s, "EXISTS fr") == 0, "freed");
    CHECK_RC(rlc_fairlock_release(l), RLC_E_NOT_OWNER);
done:
    rlc_fairlock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(several_masters_refuse_fair_lock_and_semaphores)
{
    START(s1);
    START(s2);
    START(s3);
    char uri[256];
    snprintf(uri, sizeof uri, "%s,%s,%s", s1.uri, s2.uri, s3.uri);
    rlc_client *c = client(uri, NULL);
    rlc_fairlock *f = NULL;
    rlc_semaphore *sm = NULL;
    rlc_psemaphore *ps = NULL;
    rlc_rwlock *rw = NULL;
    CHECK_RC(rlc_fairlock_new(c, "x", 0, 0, &f), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "FIFO"), "the reason is given: %s", rlc_errmsg());
    CHECK_RC(rlc_semaphore_new(c, "x", &sm), RLC_E_INVAL);
    CHECK_RC(rlc_psemaphore_new(c, "x", &ps), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "more than N"), "the reason is given: %s", rlc_errmsg());
    /* the read-write lock runs as Redlock */
    CHECK_RC(rlc_rwlock_new(c, "x", 3, &rw), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(rw, 0, 5000), RLC_OK);
    CHECK(rs_int(&s1, "EXISTS x") + rs_int(&s2, "EXISTS x") + rs_int(&s3, "EXISTS x") == 3,
          "written on every node");
    CHECK_RC(rlc_rwlock_write_release(rw), RLC_OK);
done:
    rlc_rwlock_free(rw);
    rlc_client_free(c);
    rs_stop(&s1);
    rs_stop(&s2);
    rs_stop(&s3);
}

/* ---- semaphores ------------------------------------------------------------------ */

struct sem_waiter {
    rlc_semaphore *s;
    int rc;
};

static void *sem_wait_two(void *arg)
{
    struct sem_waiter *w = arg;
    w->rc = rlc_semaphore_acquire(w->s, 2, 5000);
    return NULL;
}

TEST(semaphore_counts_permits_and_wakes_waiters)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_semaphore *m = NULL;
    int set = 0;
    int64_t v = -1;
    CHECK_RC(rlc_semaphore_new(c, "sem", &m), RLC_OK);
    CHECK_RC(rlc_semaphore_try_set_permits(m, 3, &set), RLC_OK);
    CHECK(set == 1, "set the first time");
    CHECK_RC(rlc_semaphore_try_set_permits(m, 9, &set), RLC_OK);
    CHECK(set == 0 && rs_num(&s, "GET sem", NULL) == 3, "not again: the key holds Redisson's count");
    CHECK_RC(rlc_semaphore_acquire(m, 2, 0), RLC_OK);
    CHECK_RC(rlc_semaphore_acquire(m, 2, 0), RLC_NOT_ACQUIRED);
    CHECK_RC(rlc_semaphore_available(m, &v), RLC_OK);
    CHECK(v == 1, "one left, saw %lld", (long long)v);
    struct sem_waiter w = {m, -99};
    pthread_t th;
    pthread_create(&th, NULL, sem_wait_two, &w);
    check_sleep_ms(100);
    CHECK_RC(rlc_semaphore_release(m, 2), RLC_OK);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, RLC_OK);
    CHECK(rs_num(&s, "GET sem", NULL) == 1, "3 - 2 + 2 - 2 = 1");
done:
    rlc_semaphore_free(m);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(psemaphore_layout_and_lease_expiry)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_psemaphore *m = NULL;
    char id[RLC_PERMIT_ID_LEN + 1], id2[RLC_PERMIT_ID_LEN + 1];
    int64_t v = -1;
    CHECK_RC(rlc_psemaphore_new(c, "ps", &m), RLC_OK);
    CHECK_RC(rlc_psemaphore_try_set_permits(m, 2, NULL), RLC_OK);
    CHECK_RC(rlc_psemaphore_acquire(m, 1, 0, 300, id), RLC_OK);
    CHECK(strlen(id) == 32, "a 32-hex-digit id: %s", id);
    CHECK(rs_int(&s, "ZCARD {ps}:timeout") == 1 && rs_num(&s, "GET ps", NULL) == 1,
          "one member in Redisson's {name}:timeout zset, the count went down");
    CHECK_RC(rlc_psemaphore_acquire(m, 2, 0, 5000, id2), RLC_NOT_ACQUIRED);
    /* the first permit's lease ends, so two are free again */
    CHECK_RC(rlc_psemaphore_acquire(m, 2, 2000, 5000, id2), RLC_OK);
    CHECK_RC(rlc_psemaphore_release(m, id), RLC_E_LOST);
    CHECK_RC(rlc_psemaphore_available(m, &v), RLC_OK);
    CHECK(v == 0, "an expired permit's release gives nothing back, saw %lld", (long long)v);
    CHECK_RC(rlc_psemaphore_release(m, id2), RLC_OK);
    CHECK_RC(rlc_psemaphore_available(m, &v), RLC_OK);
    CHECK(v == 2, "both back, saw %lld", (long long)v);
    CHECK_RC(rlc_psemaphore_release(m, id2), RLC_E_LOST);
done:
    rlc_psemaphore_free(m);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Workers in other processes record [start, end] of each permit they
 * believe they hold, end capped at start + lease - drift; one is stopped
 * with SIGSTOP for longer than its lease, and connections are killed. */
#define PS_N 3
#define PS_LEASE 300
struct shared_iv {
    atomic_int n;
    int64_t a[4096], b[4096];
};

static void psem_worker(const char *uri, struct shared_iv *sh, int64_t stop_at)
{
    rlc_client *c = client(uri, NULL);
    rlc_psemaphore *m = NULL;
    if (!c || rlc_psemaphore_new(c, "pool", &m) != RLC_OK)
        _exit(2);
    char id[RLC_PERMIT_ID_LEN + 1];
    while (check_now_ms() < stop_at) {
        /* The lease began after the call did, so it is certainly valid until
         * call + lease - drift; the hold is counted from the return on. */
        int64_t call = check_now_ms();
        if (rlc_psemaphore_acquire(m, 1, 500, PS_LEASE, id) != RLC_OK)
            continue;
        int64_t a = check_now_ms();
        check_sleep_ms(5 + a % 20);
        int64_t b = check_now_ms();
        int64_t cap = call + PS_LEASE - PS_LEASE / 100 - 1;
        int k = cap > a ? atomic_fetch_add(&sh->n, 1) : 4096;
        if (k < 4096) {
            sh->a[k] = a;
            sh->b[k] = b < cap ? b : cap;
        }
        rlc_psemaphore_release(m, id);
    }
    rlc_psemaphore_free(m);
    rlc_client_free(c);
    _exit(0);
}

TEST(psemaphore_never_exceeds_n_under_sigstop_and_killed_connections)
{
    START(s);
    struct shared_iv *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t kids[6] = {0};
    rlc_client *c = client(s.uri, NULL);
    rlc_psemaphore *m = NULL;
    CHECK(sh != MAP_FAILED, "shared memory");
    atomic_store(&sh->n, 0);
    CHECK_RC(rlc_psemaphore_new(c, "pool", &m), RLC_OK);
    CHECK_RC(rlc_psemaphore_try_set_permits(m, PS_N, NULL), RLC_OK);
    int64_t stop_at = check_now_ms() + 3000;
    for (int i = 0; i < 6; i++)
        if ((kids[i] = fork()) == 0)
            psem_worker(s.uri, sh, stop_at);
    check_sleep_ms(500);
    kill(kids[0], SIGSTOP);
    for (int i = 0; i < 4; i++) {
        check_sleep_ms(200);
        rs_int(&s, "CLIENT KILL TYPE normal");
    }
    kill(kids[0], SIGCONT);
    for (int i = 0; i < 6; i++) {
        waitpid(kids[i], NULL, 0);
        kids[i] = 0;
    }
    int n = atomic_load(&sh->n) < 4096 ? atomic_load(&sh->n) : 4096;
    int worst = 0;
    for (int i = 0; i < n; i++) {
        int at = 1; /* holds at the moment interval i began */
        for (int j = 0; j < n; j++)
            at += j != i && sh->a[j] <= sh->a[i] && sh->a[i] < sh->b[j];
        worst = at > worst ? at : worst;
    }
    CHECK(n > 50, "workers got permits (%d)", n);
    CHECK(worst <= PS_N, "%d permits were held at once (N = %d)", worst, PS_N);
    int64_t v = -1;
    CHECK(WAIT_UNTIL(rlc_psemaphore_available(m, &v) == RLC_OK && v == PS_N, 3000),
          "every permit came back, saw %lld", (long long)v);
    CHECK(rs_int(&s, "ZCARD {pool}:timeout") == 0, "no member left");
done:
    for (int i = 0; i < 6; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
    if (sh != MAP_FAILED)
        munmap(sh, sizeof *sh);
    rlc_psemaphore_free(m);
    rlc_client_free(c);
    rs_stop(&s);
}

/* ---- multi-name lock ------------------------------------------------------------- */

static atomic_int holders[6];
static atomic_int ml_bad, ml_fail, ml_done;
static const char *ml_uri;

static void *ml_worker(void *arg)
{
    int seed = (int)(intptr_t)arg;
    static const char *all[6] = {"ma", "mb", "mc", "md", "me", "mf"};
    rlc_client *c = client(ml_uri, NULL);
    for (int i = 0; i < 40 && c; i++) {
        int pick[3] = {(seed + i) % 6, (seed * 3 + i * 5 + 1) % 6, (seed + i * 7 + 2) % 6};
        const char *names[3] = {all[pick[0]], all[pick[1]], all[pick[2]]};
        rlc_multilock *m = NULL;
        if (rlc_multilock_new(c, names, 3, 0, &m) != RLC_OK) {
            atomic_fetch_add(&ml_fail, 1);
            break;
        }
        if (rlc_multilock_acquire(m, 10000, 5000) != RLC_OK) {
            fprintf(stderr, "multilock: %s\n", rlc_errmsg());
            atomic_fetch_add(&ml_fail, 1);
            rlc_multilock_free(m);
            break;
        }
        int n = 0;
        rlc_multilock_size(m, &n);
        bool seen[6] = {false};
        for (int k = 0; k < 3; k++)
            if (!seen[pick[k]]) {
                seen[pick[k]] = true;
                if (atomic_fetch_add(&holders[pick[k]], 1) != 0)
                    atomic_fetch_add(&ml_bad, 1);
            }
        check_sleep_ms(1);
        for (int k = 0; k < 6; k++)
            if (seen[k])
                atomic_fetch_sub(&holders[k], 1);
        if (rlc_multilock_release(m) != RLC_OK)
            atomic_fetch_add(&ml_fail, 1);
        rlc_multilock_free(m);
    }
    rlc_client_free(c);
    atomic_fetch_add(&ml_done, 1);
    return NULL;
}

TEST(multilock_overlapping_sets_no_deadlock_no_overlap)
{
    START(s);
    ml_uri = s.uri;
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, ml_worker, (void *)(intptr_t)i);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&ml_done) == 8, "every thread finished");
    CHECK(atomic_load(&ml_fail) == 0, "no acquire timed out (a deadlock would): %d",
          atomic_load(&ml_fail));
    CHECK(atomic_load(&ml_bad) == 0, "a name was held twice %d times", atomic_load(&ml_bad));
    CHECK(rs_int(&s, "EXISTS ma mb mc md me mf") == 0, "nothing is left held");
done:
    rs_stop(&s);
}

TEST(multilock_takes_all_or_none)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *other = NULL;
    rlc_multilock *m = NULL;
    const char *names[4] = {"n3", "n1", "n2", "n1"};
    char field[96];
    field_of(c, 8, field, sizeof field);
    CHECK_RC(rlc_lock_new(c, "n2", 99, &other), RLC_OK);
    CHECK_RC(rlc_multilock_new(c, names, 4, 8, &m), RLC_OK);
    int n = 0;
    rlc_multilock_size(m, &n);
    CHECK(n == 3, "duplicates go: 3 names, saw %d", n);
    CHECK_RC(rlc_lock_acquire(other, 0, 10000), RLC_OK);
    CHECK_RC(rlc_multilock_acquire(m, 0, 5000), RLC_NOT_ACQUIRED);
    CHECK(rs_int(&s, "EXISTS n1 n3") == 0, "no partial hold after a refusal");
    CHECK_RC(rlc_multilock_acquire(m, 300, 5000), RLC_NOT_ACQUIRED);
    CHECK(rs_int(&s, "EXISTS n1 n3") == 0, "nor after a wait that ran out");
    CHECK_RC(rlc_lock_release(other), RLC_OK);
    CHECK_RC(rlc_multilock_acquire(m, 0, 5000), RLC_OK);
    CHECK(rs_num(&s, "HGET n1 %s", field) == 1 && rs_num(&s, "HGET n2 %s", field) == 1 &&
              rs_num(&s, "HGET n3 %s", field) == 1,
          "each name is an RLock hash with the owner's field");
    CHECK(rs_int(&s, "PTTL n2") > 4000, "with the lease");
    CHECK_RC(rlc_multilock_release(m), RLC_OK);
    CHECK(rs_int(&s, "EXISTS n1 n2 n3") == 0, "all released");
done:
    rlc_multilock_free(m);
    rlc_lock_free(other);
    rlc_client_free(c);
    rs_stop(&s);
}

/* A write hold whose fixed lease ran out counts 0 and has no validity at
 * once, while another client holds the lock: the family's hold count
 * answered from its own bookkeeping (count 1) until something reported the
 * loss, which for a fixed lease nothing did (issue 36). */
TEST(rwlock_write_hold_whose_lease_ran_out_counts_nothing)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *c2 = client(s.uri, NULL);
    rlc_rwlock *l = NULL, *o = NULL;
    CHECK_RC(rlc_rwlock_new(c, "rwl", 1, &l), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c2, "rwl", 2, &o), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(l, 0, 400), RLC_OK);
    int64_t n = -1, v = -1;
    CHECK_RC(rlc_rwlock_hold_count(l, 1, &n), RLC_OK);
    CHECK(n == 1, "count %lld at first", (long long)n);
    CHECK_RC(rlc_rwlock_write_acquire(o, 5000, 5000), RLC_OK); /* after the lease ran out */
    CHECK_RC(rlc_rwlock_hold_count(l, 1, &n), RLC_OK);
    CHECK(n == 0, "the first writer still counts %lld beside the new one", (long long)n);
    CHECK_RC(rlc_rwlock_validity_ms(l, 1, &v), RLC_OK);
    CHECK(v == 0, "validity %lld", (long long)v);
    CHECK_RC(rlc_rwlock_hold_count(o, 1, &n), RLC_OK);
    CHECK(n == 1, "the new writer counts %lld", (long long)n);
    CHECK_RC(rlc_rwlock_write_release(o), RLC_OK);
done:
    rlc_rwlock_free(o);
    rlc_rwlock_free(l);
    rlc_client_free(c2);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Attempt ids of every hash on the server that start with the client's
 * uuid and hold a record ("<pttl>|<epoch>|<field>"); -1 on a failure. */
static int attempt_ids(const struct redis_server *s, const char *uuid, char ids[][96], int max)
{
    redisContext *rc = rs_connect(s);
    if (!rc)
        return -1;
    int n = 0;
    redisReply *keys = redisCommand(rc, "KEYS *");
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
        redisReply *t = redisCommand(rc, "TYPE %s", keys->element[i]->str);
        bool hash = t && t->type == REDIS_REPLY_STATUS && strcmp(t->str, "hash") == 0;
        if (t)
            freeReplyObject(t);
        redisReply *all = hash ? redisCommand(rc, "HGETALL %s", keys->element[i]->str) : NULL;
        for (size_t j = 0; all && all->type == REDIS_REPLY_ARRAY && j + 1 < all->elements; j += 2) {
            const char *f = all->element[j]->str, *v = all->element[j + 1]->str;
            if (strncmp(f, uuid, strlen(uuid)) == 0 && strchr(v, '|') && n < max)
                snprintf(ids[n++], 96, "%s", f);
        }
        if (all)
            freeReplyObject(all);
    }
    if (keys)
        freeReplyObject(keys);
    redisFree(rc);
    return n;
}

/* One attempt-id space per client: the engine's locks and the family's
 * kinds draw from one counter, so no two of a client's attempt records
 * share an id (two counters under one uuid let a fair try's undo delete
 * a plain lock's record, and a release's "up to" scan take a level that
 * was not its own). */
TEST(one_attempt_id_space_for_every_kind)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *la = NULL, *lb = NULL;
    rlc_fairlock *f = NULL;
    rlc_rwlock *rw = NULL, *rr = NULL;
    CHECK(c, "client");
    CHECK_RC(rlc_lock_new(c, "ida", 1, &la), RLC_OK);
    CHECK_RC(rlc_lock_new(c, "idb", 1, &lb), RLC_OK);
    CHECK_RC(rlc_fairlock_new(c, "idc", 1, 0, &f), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c, "idd", 1, &rw), RLC_OK);
    CHECK_RC(rlc_rwlock_new(c, "ide", 1, &rr), RLC_OK);
    CHECK_RC(rlc_lock_acquire(la, 0, 60000), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(f, 0, 60000), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(rw, 0, 60000), RLC_OK);
    CHECK_RC(rlc_rwlock_read_acquire(rr, 0, 60000), RLC_OK);
    CHECK_RC(rlc_lock_acquire(lb, 0, 60000), RLC_OK);
    char ids[16][96];
    int n = attempt_ids(&s, rlc_client_uuid(c), ids, 16);
    CHECK(n >= 5, "%d attempt records of 5 holds", n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            CHECK(strcmp(ids[i], ids[j]) != 0, "attempt id %s recorded twice", ids[i]);
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    CHECK_RC(rlc_lock_release(lb), RLC_OK);
    CHECK_RC(rlc_fairlock_release(f), RLC_OK);
    CHECK_RC(rlc_rwlock_write_release(rw), RLC_OK);
    CHECK_RC(rlc_rwlock_read_release(rr), RLC_OK);
done:
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_fairlock_free(f);
    rlc_rwlock_free(rw);
    rlc_rwlock_free(rr);
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(rwlock_keys_and_messages_are_redissons),
          CASE(rwlock_write_hold_whose_lease_ran_out_counts_nothing),
          CASE(rwlock_readers_overlap_writers_exclude_everyone),
          CASE(rwlock_waiting_writer_holds_back_new_readers),
          CASE(rwlock_watchdog_renews_read_levels),
          CASE(fair_lock_hands_off_in_fifo_order_across_processes),
          CASE(fair_waiter_that_gives_up_or_dies_leaves_the_queue),
          CASE(fair_lock_is_reentrant_and_releases_to_redisson_layout),
          CASE(several_masters_refuse_fair_lock_and_semaphores),
          CASE(semaphore_counts_permits_and_wakes_waiters),
          CASE(psemaphore_layout_and_lease_expiry),
          CASE(psemaphore_never_exceeds_n_under_sigstop_and_killed_connections),
          CASE(multilock_overlapping_sets_no_deadlock_no_overlap),
          CASE(multilock_takes_all_or_none),
          CASE(one_attempt_id_space_for_every_kind))
