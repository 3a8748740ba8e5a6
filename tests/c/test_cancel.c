/*
 * test_cancel.c - rlc_lock_cancel: it ends an acquire that waits on the
 * handle, at once and with RLC_E_CANCELED, keeps nothing of it, and touches
 * neither the holder nor an acquire that starts after it.
 *
 * A case knows that its waiter sleeps (and is not still on its first try)
 * when the server counts one subscriber on the lock's channel: the waiter
 * subscribes only after its first try was refused.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fixture.h"

#define HOLDER 1
#define WAITER 2
/* A cancelled waiter must be back within this; its wait is unbounded. */
#define PROMPT_MS 500

struct waiter {
    rlc_lock *l;
    int64_t wait_ms;
    atomic_int done;
    int rc;
    char errmsg[256];
    pthread_t thread;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->rc = rlc_lock_acquire(w->l, w->wait_ms, -1);
    snprintf(w->errmsg, sizeof w->errmsg, "%s", rlc_errmsg());
    atomic_store(&w->done, 1);
    return NULL;
}

static int waiter_start(struct waiter *w, rlc_lock *l, int64_t wait_ms)
{
    *w = (struct waiter){.l = l, .wait_ms = wait_ms};
    return pthread_create(&w->thread, NULL, waiter_main, w);
}

/* Subscribers of the lock's channel on s, as the server counts them. */
static long long subscribers(const struct redis_server *s, const char *name)
{
    redisReply *r = rs_cmd(s, "PUBSUB NUMSUB redisson_lock__channel:{%s}", name);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    return n;
}

/* Whether the owner's field is in the lock's hash on s. */
static int has_field(const struct redis_server *s, const rlc_client *c, const char *name,
                     uint64_t owner)
{
    return rs_int(s, "HEXISTS %s %s:%llu", name, rlc_client_uuid(c),
                  (unsigned long long)owner) == 1;
}

static uint64_t waits(rlc_client *c)
{
    uint64_t v[RLC_M_WAITS + 1] = {0};
    rlc_client_metrics(c, v, RLC_M_WAITS + 1);
    return v[RLC_M_WAITS];
}

TEST(cancel_from_another_thread_ends_a_waiting_acquire_at_once)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *holder = lock(a, "cx", HOLDER), *l = lock(b, "cx", WAITER);
    struct waiter w;
    int started = 0;
    CHECK_RC(rlc_lock_acquire(holder, 0, -1), RLC_OK);
    CHECK(waiter_start(&w, l, -1) == 0, "pthread_create");
    started = 1;
    CHECK(WAIT_UNTIL(subscribers(&s, "cx") == 1, 5000), "the waiter never subscribed");
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_cancel(l), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w.done), 5000), "the waiter is still waiting 5 s after cancel");
    int64_t took = check_now_ms() - t0;
    CHECK(took < PROMPT_MS, "the waiter took %lld ms to end, expected < %d", (long long)took,
          PROMPT_MS);
    CHECK(w.rc == RLC_E_CANCELED, "the waiter returned %d (%s), expected RLC_E_CANCELED; %s",
          w.rc, rlc_strerror(w.rc), w.errmsg);
    CHECK(strstr(w.errmsg, "cancel") != NULL, "message: %s", w.errmsg);
    CHECK(is_held(holder) == 1, "the holder still holds it");
    CHECK(!has_field(&s, b, "cx", WAITER), "the cancelled owner's field is on the server");
    CHECK(rs_int(&s, "HLEN cx") == 1, "only the holder's field is left");
    CHECK_RC(rlc_lock_release(holder), RLC_OK);
done:
    if (started)
        pthread_join(w.thread, NULL);
    rlc_lock_free(holder);
    rlc_lock_free(l);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(cancel_ends_only_the_waits_on_its_own_handle)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *holder = lock(a, "cy", HOLDER);
    rlc_lock *l1 = lock(b, "cy", WAITER), *l2 = lock(b, "cy", WAITER + 1);
    struct waiter w1, w2;
    int started = 0;
    CHECK_RC(rlc_lock_acquire(holder, 0, -1), RLC_OK);
    CHECK(waiter_start(&w1, l1, -1) == 0, "pthread_create");
    started++;
    CHECK(waiter_start(&w2, l2, -1) == 0, "pthread_create");
    started++;
    /* One client, one subscription; RLC_M_WAITS counts both waiters. */
    CHECK(WAIT_UNTIL(subscribers(&s, "cy") == 1, 5000), "no subscription");
    CHECK(WAIT_UNTIL(waits(b) == 2, 5000), "waits: %llu", (unsigned long long)waits(b));
    CHECK_RC(rlc_lock_cancel(l1), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w1.done), PROMPT_MS), "the cancelled waiter is still waiting");
    CHECK(w1.rc == RLC_E_CANCELED, "w1 returned %d: %s", w1.rc, w1.errmsg);
    CHECK(!atomic_load(&w2.done), "the other handle's waiter ended too: %d", w2.rc);
    CHECK_RC(rlc_lock_release(holder), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w2.done), 5000), "the other waiter did not get the lock");
    CHECK(w2.rc == RLC_OK, "w2 returned %d: %s", w2.rc, w2.errmsg);
    CHECK(has_field(&s, b, "cy", WAITER + 1), "w2 holds it");
    CHECK_RC(rlc_lock_release(l2), RLC_OK);
done:
    if (started > 0)
        pthread_join(w1.thread, NULL);
    if (started > 1) {
        rlc_lock_cancel(l2);
        pthread_join(w2.thread, NULL);
    }
    rlc_lock_free(holder);
    rlc_lock_free(l1);
    rlc_lock_free(l2);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(a_cancel_before_the_acquire_starts_does_not_affect_it)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *holder = lock(a, "cz", HOLDER), *l = lock(b, "cz", WAITER);
    CHECK_RC(rlc_lock_cancel(NULL), RLC_E_INVAL);
    CHECK_RC(rlc_lock_cancel(l), RLC_OK); /* nobody waits: nothing to do */
    CHECK_RC(rlc_lock_cancel(l), RLC_OK);
    /* A try (wait 0) and a wait: neither sees the earlier cancels. */
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK_RC(rlc_lock_acquire(holder, 0, -1), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_NOT_ACQUIRED);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_acquire(l, 300, -1), RLC_NOT_ACQUIRED);
    CHECK(check_now_ms() - t0 >= 290, "waited only %lld ms of 300",
          (long long)(check_now_ms() - t0));
    CHECK_RC(rlc_lock_release(holder), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 1000, -1), RLC_OK);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(holder);
    rlc_lock_free(l);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

/* The holder lets go while the waiter is cancelled: whichever comes first,
 * RLC_E_CANCELED must mean nothing was kept, and RLC_OK a real hold. */
TEST(a_grant_that_races_a_cancel_is_undone_or_kept_whole)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_lock *holder = NULL, *l = NULL;
    struct waiter w;
    int started = 0, canceled = 0, got = 0;
    for (int round = 0; round < 20; round++) {
        /* A name per round: a channel lingers after its last waiter, and
         * the subscriber count must mean this round's waiter. */
        char name[16];
        snprintf(name, sizeof name, "cr%d", round);
        rlc_lock_free(holder);
        rlc_lock_free(l);
        holder = lock(a, name, HOLDER);
        l = lock(b, name, WAITER);
        CHECK_RC(rlc_lock_acquire(holder, 0, -1), RLC_OK);
        CHECK(waiter_start(&w, l, -1) == 0, "pthread_create");
        started = 1;
        CHECK(WAIT_UNTIL(subscribers(&s, name) == 1, 5000), "the waiter never subscribed");
        CHECK_RC(rlc_lock_release(holder), RLC_OK);
        CHECK_RC(rlc_lock_cancel(l), RLC_OK);
        pthread_join(w.thread, NULL);
        started = 0;
        if (w.rc == RLC_OK) {
            got++;
            CHECK(has_field(&s, b, name, WAITER), "RLC_OK, but the field is not there");
            CHECK_RC(rlc_lock_release(l), RLC_OK);
        } else {
            canceled++;
            CHECK(w.rc == RLC_E_CANCELED, "round %d: %d (%s)", round, w.rc, w.errmsg);
            /* The undo of a grant goes out detached: give it a moment. */
            CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS %s", name) == 0, 2000),
                  "round %d: cancelled, yet the key is still there", round);
        }
    }
    fprintf(stderr, "%d cancelled, %d granted\n", canceled, got);
done:
    if (started)
        pthread_join(w.thread, NULL);
    rlc_lock_free(holder);
    rlc_lock_free(l);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

TEST(redlock_cancel_ends_the_wait_and_leaves_no_vote)
{
    START_CLUSTER(cl, 3);
    rlc_client *a = client(cl.uris, NULL), *b = client(cl.uris, NULL);
    rlc_lock *holder = lock(a, "rc", HOLDER), *l = lock(b, "rc", WAITER);
    struct waiter w;
    int started = 0;
    CHECK_RC(rlc_lock_acquire(holder, 0, -1), RLC_OK);
    CHECK(waiter_start(&w, l, -1) == 0, "pthread_create");
    started = 1;
    for (int i = 0; i < 3; i++)
        CHECK(WAIT_UNTIL(subscribers(&cl.node[i], "rc") == 1, 5000), "node %d: no subscriber",
              i);
    int64_t t0 = check_now_ms();
    CHECK_RC(rlc_lock_cancel(l), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w.done), PROMPT_MS), "still waiting %d ms after cancel",
          PROMPT_MS);
    CHECK(w.rc == RLC_E_CANCELED, "returned %d: %s", w.rc, w.errmsg);
    CHECK(check_now_ms() - t0 < PROMPT_MS, "took %lld ms", (long long)(check_now_ms() - t0));
    CHECK(is_held(holder) == 1, "the holder lost it");
    for (int i = 0; i < 3; i++) {
        CHECK(has_field(&cl.node[i], a, "rc", HOLDER), "node %d: holder's field gone", i);
        CHECK(!has_field(&cl.node[i], b, "rc", WAITER), "node %d: the waiter's field", i);
    }
    CHECK_RC(rlc_lock_release(holder), RLC_OK);
    CHECK_RC(rlc_lock_acquire(l, 1000, -1), RLC_OK); /* the handle still works */
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    if (started)
        pthread_join(w.thread, NULL);
    rlc_lock_free(holder);
    rlc_lock_free(l);
    rlc_client_free(a);
    rlc_client_free(b);
    cluster_stop(&cl);
}

/* ---- the lock family's handles ------------------------------------------ */

enum fam_kind { F_WRITE, F_READ, F_FAIR, F_SEM, F_PSEM, F_MULTI };

struct fam_waiter {
    enum fam_kind kind;
    void *h;
    atomic_int done;
    int rc;
    char errmsg[256];
    pthread_t thread;
};

static void *fam_waiter_main(void *arg)
{
    struct fam_waiter *w = arg;
    char id[RLC_PERMIT_ID_LEN + 1];
    switch (w->kind) {
    case F_WRITE: w->rc = rlc_rwlock_write_acquire(w->h, -1, -1); break;
    case F_READ: w->rc = rlc_rwlock_read_acquire(w->h, -1, -1); break;
    case F_FAIR: w->rc = rlc_fairlock_acquire(w->h, -1, -1); break;
    case F_SEM: w->rc = rlc_semaphore_acquire(w->h, 1, -1); break;
    case F_PSEM: w->rc = rlc_psemaphore_acquire(w->h, 1, -1, 30000, id); break;
    case F_MULTI: w->rc = rlc_multilock_acquire(w->h, -1, -1); break;
    }
    snprintf(w->errmsg, sizeof w->errmsg, "%s", rlc_errmsg());
    atomic_store(&w->done, 1);
    return NULL;
}

static int fam_cancel_of(enum fam_kind k, void *h)
{
    switch (k) {
    case F_WRITE:
    case F_READ: return rlc_rwlock_cancel(h);
    case F_FAIR: return rlc_fairlock_cancel(h);
    case F_SEM: return rlc_semaphore_cancel(h);
    case F_PSEM: return rlc_psemaphore_cancel(h);
    default: return rlc_multilock_cancel(h);
    }
}

/* Its waiter sleeps: subscribed (or, a fair waiter, queued) after its
 * first try was refused. */
static bool fam_asleep(const struct redis_server *s, enum fam_kind k)
{
    switch (k) {
    case F_WRITE: return channel_subscribers(s, "redisson_rwlock:{fw}") == 1;
    case F_READ: return channel_subscribers(s, "redisson_rwlock:{fr}") == 1;
    case F_FAIR: return rs_int(s, "LLEN redisson_lock_queue:{ff}") == 1;
    case F_SEM: return channel_subscribers(s, "redisson_sc:{fs}") == 1;
    case F_PSEM: return channel_subscribers(s, "redisson_sc:{fp}") == 1;
    default: return channel_subscribers(s, "redisson_lock__channel:{fm1}") == 1;
    }
}

/* Every family handle's wait ends with RLC_E_CANCELED when its handle is
 * cancelled, from another thread, however long it would have waited; a
 * fair waiter leaves the queue; the holder keeps what it holds. */
TEST(a_family_wait_of_each_kind_is_cancelled_and_keeps_nothing)
{
    START(s);
    rlc_client *a = client(s.uri, NULL), *b = client(s.uri, NULL);
    rlc_rwlock *rw_a = NULL, *rw_b = NULL, *rw_ra = NULL, *rw_c = NULL;
    rlc_fairlock *fa = NULL, *fb = NULL;
    rlc_semaphore *sa = NULL, *sb = NULL;
    rlc_psemaphore *pa = NULL, *pb = NULL;
    rlc_multilock *mb = NULL;
    rlc_lock *la = lock(a, "fm1", HOLDER);
    const char *names[2] = {"fm1", "fm2"};
    char id[RLC_PERMIT_ID_LEN + 1];
    int set = 0;
    CHECK_RC(rlc_rwlock_new(a, "fw", HOLDER, &rw_a), RLC_OK);
    CHECK_RC(rlc_rwlock_new(b, "fw", WAITER, &rw_b), RLC_OK);
    CHECK_RC(rlc_rwlock_new(a, "fr", HOLDER, &rw_ra), RLC_OK);
    CHECK_RC(rlc_rwlock_new(b, "fr", WAITER, &rw_c), RLC_OK);
    CHECK_RC(rlc_fairlock_new(a, "ff", HOLDER, 0, &fa), RLC_OK);
    CHECK_RC(rlc_fairlock_new(b, "ff", WAITER, 0, &fb), RLC_OK);
    CHECK_RC(rlc_semaphore_new(a, "fs", &sa), RLC_OK);
    CHECK_RC(rlc_semaphore_new(b, "fs", &sb), RLC_OK);
    CHECK_RC(rlc_psemaphore_new(a, "fp", &pa), RLC_OK);
    CHECK_RC(rlc_psemaphore_new(b, "fp", &pb), RLC_OK);
    CHECK_RC(rlc_multilock_new(b, names, 2, WAITER, &mb), RLC_OK);
    /* every one held by the other client */
    CHECK_RC(rlc_rwlock_write_acquire(rw_a, 0, -1), RLC_OK);
    CHECK_RC(rlc_rwlock_write_acquire(rw_ra, 0, -1), RLC_OK);
    CHECK_RC(rlc_fairlock_acquire(fa, 0, -1), RLC_OK);
    CHECK_RC(rlc_semaphore_try_set_permits(sa, 1, &set), RLC_OK);
    CHECK_RC(rlc_semaphore_acquire(sa, 1, 0), RLC_OK);
    CHECK_RC(rlc_psemaphore_try_set_permits(pa, 1, &set), RLC_OK);
    CHECK_RC(rlc_psemaphore_acquire(pa, 1, 0, 30000, id), RLC_OK);
    CHECK_RC(rlc_lock_acquire(la, 0, -1), RLC_OK);
    const struct { enum fam_kind k; void *h; } cases[] = {
        {F_WRITE, rw_b}, {F_READ, rw_c}, {F_FAIR, fb}, {F_SEM, sb}, {F_PSEM, pb}, {F_MULTI, mb}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fam_waiter w = {.kind = cases[i].k, .h = cases[i].h};
        CHECK(pthread_create(&w.thread, NULL, fam_waiter_main, &w) == 0, "pthread_create");
        bool asleep = WAIT_UNTIL(fam_asleep(&s, w.kind), 10000);
        CHECK_RC(fam_cancel_of(w.kind, w.h), RLC_OK);
        bool ended = WAIT_UNTIL(atomic_load(&w.done), 10000);
        if (!ended)
            fam_cancel_of(w.kind, w.h); /* not reached when it works */
        pthread_join(w.thread, NULL);
        CHECK(asleep, "kind %d: the waiter never slept", (int)w.kind);
        CHECK(ended && w.rc == RLC_E_CANCELED && strstr(w.errmsg, "cancel"),
              "kind %d: %d %s", (int)w.kind, w.rc, w.errmsg);
    }
    /* the fair waiter left the queue; the holders hold on */
    CHECK(WAIT_UNTIL(rs_int(&s, "LLEN redisson_lock_queue:{ff}") == 0, 5000), "fair queue");
    CHECK(rs_int(&s, "HLEN fw") == 2, "the writer's hash (mode and field)");
    CHECK(rs_int(&s, "EXISTS fm2") == 0, "the multi-lock took no name");
    CHECK_RC(rlc_rwlock_cancel(NULL), RLC_E_INVAL);
    CHECK_RC(rlc_fairlock_cancel(NULL), RLC_E_INVAL);
    CHECK_RC(rlc_semaphore_cancel(NULL), RLC_E_INVAL);
    CHECK_RC(rlc_psemaphore_cancel(NULL), RLC_E_INVAL);
    CHECK_RC(rlc_multilock_cancel(NULL), RLC_E_INVAL);
done:
    rlc_multilock_free(mb);
    rlc_lock_free(la);
    rlc_rwlock_free(rw_a);
    rlc_rwlock_free(rw_b);
    rlc_rwlock_free(rw_ra);
    rlc_rwlock_free(rw_c);
    rlc_fairlock_free(fa);
    rlc_fairlock_free(fb);
    rlc_semaphore_free(sa);
    rlc_semaphore_free(sb);
    rlc_psemaphore_free(pa);
    rlc_psemaphore_free(pb);
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

RUN_TESTS(CASE(cancel_from_another_thread_ends_a_waiting_acquire_at_once),
          CASE(a_family_wait_of_each_kind_is_cancelled_and_keeps_nothing),
          CASE(cancel_ends_only_the_waits_on_its_own_handle),
          CASE(a_cancel_before_the_acquire_starts_does_not_affect_it),
          CASE(a_grant_that_races_a_cancel_is_undone_or_kept_whole),
          CASE(redlock_cancel_ends_the_wait_and_leaves_no_vote))
