/*
 * test_engine_driver.c - the blocking driver of the engine
 * (c/src/blocking/engine_driver.c) on real servers: threads that run their
 * own operations, one of them polling for all (leader/followers), and a
 * background thread that renews and wakes between calls. Linked with the
 * library's internal archive (rlc_internal): the driver is not public.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dns_env.h"
#include "engine_driver.h"
#include "fixture.h"
#include "redis_cluster.h"
#include "tls_env.h"

#define UUID_A "5e1f0d2c-0000-4000-8000-00000000000a"
#define UUID_B "5e1f0d2c-0000-4000-8000-00000000000b"

#define NAME(s) s, strlen(s)

TEST(one_thread_acquires_extends_and_releases_in_redisson_format)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "fencing=1", NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("orders"), 7, NULL, 0, -1, &o), RLC_OK);
    CHECK(o.token >= 1 && o.count == 1, "token %llu count %lld", (unsigned long long)o.token,
          (long long)o.count);
    CHECK(field_count(&s, "orders", UUID_A, 7) == 1, "hold count on the server");
    CHECK(rs_int(&s, "PTTL orders") > 25000, "watchdog lease 30 s");
    CHECK_RC(edrv_acquire(d, NAME("orders"), 7, NULL, 0, -1, &o), RLC_OK);
    CHECK(o.count == 2 && field_count(&s, "orders", UUID_A, 7) == 2, "reentrant: %lld",
          (long long)o.count);
    CHECK_RC(edrv_acquire(d, NAME("orders"), 8, NULL, 0, -1, &o), RLC_NOT_ACQUIRED);
    CHECK_RC(edrv_extend(d, NAME("orders"), 7, 60000, &o), RLC_OK);
    CHECK(rs_int(&s, "PTTL orders") > 55000, "extended to 60 s");
    CHECK(edrv_hold_count(d, NAME("orders"), 7) == 2, "count 2");
    CHECK(edrv_validity_ms(d, NAME("orders"), 7) > 50000, "validity");
    CHECK_RC(edrv_release(d, NAME("orders"), 8, &o), RLC_E_NOT_OWNER);
    CHECK(strstr(rlc_errmsg(), "orders") || rlc_errmsg()[0], "a message: %s", rlc_errmsg());
    CHECK_RC(edrv_release(d, NAME("orders"), 7, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("orders"), 7, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS orders") == 0, "key gone");
    CHECK_RC(edrv_acquire(d, "", 0, 7, NULL, 0, -1, &o), RLC_E_INVAL);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* Threads of two drivers cycle one name; the critical section counts who
 * is inside. */
struct crowd {
    struct edrv *d;
    uint64_t owner;
    int cycles;
    atomic_int *inside, *max_inside, *done, *errors;
};

static void *crowd_thread(void *arg)
{
    struct crowd *c = arg;
    struct edrv_outcome o;
    for (int i = 0; i < c->cycles; i++) {
        if (edrv_acquire(c->d, NAME("crowded"), c->owner, NULL, 10000, -1, &o) != RLC_OK) {
            atomic_fetch_add(c->errors, 1);
            continue;
        }
        int in = atomic_fetch_add(c->inside, 1) + 1;
        int m = atomic_load(c->max_inside);
        while (in > m && !atomic_compare_exchange_weak(c->max_inside, &m, in))
            ;
        atomic_fetch_sub(c->inside, 1);
        if (edrv_release(c->d, NAME("crowded"), c->owner, &o) != RLC_OK)
            atomic_fetch_add(c->errors, 1);
        atomic_fetch_add(c->done, 1);
    }
    return NULL;
}

TEST(sixteen_threads_of_two_drivers_exclude_each_other)
{
    START(s);
    struct edrv *a = NULL, *b = NULL;
    enum { T = 16, CYCLES = 40 };
    pthread_t th[T];
    struct crowd cr[T];
    atomic_int inside = 0, max_inside = 0, done = 0, errors = 0;
    int started = 0;
    CHECK_RC(edrv_new(&a, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&b, s.uri, UUID_B, NULL, NULL, NULL), RLC_OK);
    for (int i = 0; i < T; i++) {
        cr[i] = (struct crowd){i % 2 ? b : a, (uint64_t)i + 1, CYCLES, &inside, &max_inside,
                               &done, &errors};
        if (pthread_create(&th[i], NULL, crowd_thread, &cr[i]) == 0)
            started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    CHECK(started == T, "threads %d", started);
    CHECK(atomic_load(&errors) == 0, "errors %d", atomic_load(&errors));
    CHECK(atomic_load(&done) == T * CYCLES, "cycles %d", atomic_load(&done));
    CHECK(atomic_load(&max_inside) == 1, "at most one inside: %d", atomic_load(&max_inside));
    CHECK(rs_int(&s, "EXISTS crowded") == 0, "nothing left behind");
done:
    edrv_free(a, 1000);
    edrv_free(b, 1000);
    rs_stop(&s);
}

/* Many threads on distinct names share one connection: every one ends. */
struct solo {
    struct edrv *d;
    uint64_t owner;
    atomic_int *ok;
};

static void *solo_thread(void *arg)
{
    struct solo *c = arg;
    char name[32];
    snprintf(name, sizeof name, "solo-%llu", (unsigned long long)c->owner);
    struct edrv_outcome o;
    for (int i = 0; i < 200; i++)
        if (edrv_acquire(c->d, NAME(name), c->owner, NULL, 1000, 10000, &o) == RLC_OK &&
            edrv_release(c->d, NAME(name), c->owner, &o) == RLC_OK)
            atomic_fetch_add(c->ok, 1);
    return NULL;
}

TEST(threads_on_distinct_names_pipeline_on_one_connection)
{
    START(s);
    struct edrv *d = NULL;
    enum { T = 8 };
    pthread_t th[T];
    struct solo so[T];
    atomic_int ok = 0;
    int started = 0;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "loss_push=0", NULL, NULL), RLC_OK);
    long long before = rs_info_int(&s, "stats", "total_connections_received");
    for (int i = 0; i < T; i++) {
        so[i] = (struct solo){d, (uint64_t)i + 1, &ok};
        if (pthread_create(&th[i], NULL, solo_thread, &so[i]) == 0)
            started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&ok) == T * 200, "cycles %d", atomic_load(&ok));
    /* Less the one INFO itself opens. */
    long long conns = rs_info_int(&s, "stats", "total_connections_received") - before - 1;
    CHECK(conns == 1, "one command connection for every thread: %lld", conns);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

struct waiting {
    struct edrv *d;
    const char *name;
    uint64_t owner;
    const struct cancel_point *cp; /* its handle's cancels (NULL: none) */
    int64_t wait_ms;
    atomic_int status;
    atomic_llong ended_ms;
};

static void *waiting_thread(void *arg)
{
    struct waiting *w = arg;
    struct edrv_outcome o;
    int rc = edrv_acquire(w->d, w->name, strlen(w->name), w->owner, w->cp, w->wait_ms, 30000,
                          &o);
    atomic_store(&w->ended_ms, check_now_ms());
    atomic_store(&w->status, rc);
    return NULL;
}

TEST(a_waiter_is_woken_by_another_clients_release)
{
    START(s);
    struct edrv *a = NULL, *b = NULL;
    struct edrv_outcome o;
    pthread_t th;
    bool joined = true;
    struct waiting w = {.name = "handoff", .owner = 2, .wait_ms = 20000};
    atomic_init(&w.status, 1000);
    CHECK_RC(edrv_new(&a, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&b, s.uri, UUID_B, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(a, NAME("handoff"), 1, NULL, 0, 30000, &o), RLC_OK);
    w.d = b;
    CHECK(pthread_create(&th, NULL, waiting_thread, &w) == 0, "thread");
    joined = false;
    /* The waiter has tried once and subscribed. */
    CHECK(WAIT_UNTIL(channel_subscribers(&s, "redisson_lock__channel:{handoff}") == 1, 5000),
          "the waiter subscribed");
    int64_t released = check_now_ms();
    CHECK_RC(edrv_release(a, NAME("handoff"), 1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w.status) != 1000, 10000), "the waiter ended");
    pthread_join(th, NULL);
    joined = true;
    CHECK_RC(atomic_load(&w.status), RLC_OK);
    CHECK(atomic_load(&w.ended_ms) - released < 1000,
          "woken by the unlock message, not a poll: %lld ms",
          (long long)(atomic_load(&w.ended_ms) - released));
    CHECK(field_count(&s, "handoff", UUID_B, 2) == 1, "the waiter holds it");
    /* the engine's counters, as rlc_client_metrics is to read them */
    uint64_t ma[RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS], mb[RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS];
    CHECK(edrv_metrics(a, ma, RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS) ==
              RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS, "every counter");
    CHECK(edrv_metrics(b, mb, RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS) ==
              RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS, "every counter");
    CHECK(ma[RLC_M_ACQUIRES] == 1 && ma[RLC_M_WAITS] == 0, "the holder: 1 acquire, no wait");
    CHECK(mb[RLC_M_ACQUIRES] == 1 && mb[RLC_M_WAITS] == 1 && mb[RLC_M_BUSY] == 0,
          "the waiter: 1 acquire that waited: %llu %llu %llu",
          (unsigned long long)mb[RLC_M_ACQUIRES], (unsigned long long)mb[RLC_M_WAITS],
          (unsigned long long)mb[RLC_M_BUSY]);
done:
    if (!joined)
        pthread_join(th, NULL);
    edrv_free(a, 1000);
    edrv_free(b, 1000);
    rs_stop(&s);
}

/* Two waiters of one name, for two handles (tags): a cancel of one ends
 * only that one's wait (rlc_lock_cancel(l) is for l's waits); the other
 * goes on waiting and is granted the lock when it is let go. */
TEST(cancel_ends_one_handles_waiting_acquire_and_leaves_nothing_held)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    pthread_t th[2];
    int started = 0;
    /* the two handles' cancel counts (never raised here: edrv_cancel alone) */
    atomic_uint_fast64_t mine_n = 0, other_n = 0;
    struct cancel_point mine = {&mine_n, 0}, other = {&other_n, 0};
    struct waiting w[2] = {{.name = "cancelled", .owner = 2, .cp = &mine, .wait_ms = -1},
                           {.name = "cancelled", .owner = 3, .cp = &other, .wait_ms = -1}};
    for (int i = 0; i < 2; i++)
        atomic_init(&w[i].status, 1000);
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("cancelled"), 1, NULL, 0, 30000, &o), RLC_OK);
    for (int i = 0; i < 2; i++) {
        w[i].d = d;
        CHECK(pthread_create(&th[i], NULL, waiting_thread, &w[i]) == 0, "thread");
        started++;
    }
    CHECK(edrv_cancel(d, NULL) == 0, "no tag, nothing cancelled");
    CHECK(WAIT_UNTIL(edrv_cancel(d, &mine_n) == 1, 5000), "one acquire cancelled");
    CHECK(WAIT_UNTIL(atomic_load(&w[0].status) != 1000, 5000), "the waiter ended");
    CHECK_RC(atomic_load(&w[0].status), RLC_E_CANCELED);
    CHECK(field_count(&s, "cancelled", UUID_A, 2) == 0, "the cancelled owner holds nothing");
    CHECK(field_count(&s, "cancelled", UUID_A, 1) == 1, "the holder still holds it");
    CHECK(edrv_cancel(d, &mine_n) == 0, "nothing of that handle waits any more");
    CHECK(atomic_load(&w[1].status) == 1000, "the other handle's waiter still waits");
    CHECK_RC(edrv_release(d, NAME("cancelled"), 1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w[1].status) != 1000, 5000), "the other waiter ended");
    CHECK_RC(atomic_load(&w[1].status), RLC_OK);
    CHECK(field_count(&s, "cancelled", UUID_A, 3) == 1, "the other waiter holds it");
    CHECK_RC(edrv_release(d, NAME("cancelled"), 3, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS cancelled") == 0, "nothing left behind");
done:
    for (int i = 0; i < started; i++) {
        if (atomic_load(&w[i].status) == 1000)
            edrv_cancel(d, w[i].cp->count); /* a failed check: end its wait */
        pthread_join(th[i], NULL);
    }
    edrv_free(d, 1000);
    rs_stop(&s);
}

struct lost_seen {
    atomic_int n;
    atomic_ullong owner;
    char name[64];
};

static void on_lost(void *user, int kind, const char *name, size_t len, uint64_t owner,
                    int status, const char *message)
{
    struct lost_seen *ls = user;
    (void)kind, (void)status, (void)message;
    snprintf(ls->name, sizeof ls->name, "%.*s", (int)len, name);
    atomic_store(&ls->owner, owner);
    atomic_fetch_add(&ls->n, 1);
}

TEST(the_background_renews_between_calls_and_reports_a_loss)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    struct lost_seen ls = {0};
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "watchdog_timeout_ms=1200", on_lost, &ls), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("kept"), 3, NULL, 0, -1, &o), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("dropped"), 4, NULL, 0, -1, &o), RLC_OK);
    /* No call for three leases: only the background thread can keep it. */
    int64_t end = check_now_ms() + 3600;
    while (check_now_ms() < end) {
        CHECK(rs_int(&s, "EXISTS kept") == 1, "renewed by the background thread");
        check_sleep_ms(100);
    }
    CHECK(edrv_validity_ms(d, NAME("kept"), 3) > 0, "still valid");
    CHECK(rs_int(&s, "DEL dropped") == 1, "deleted behind the holder's back");
    CHECK(WAIT_UNTIL(atomic_load(&ls.n) == 1, 3000), "the loss reported");
    CHECK(strcmp(ls.name, "dropped") == 0 && atomic_load(&ls.owner) == 4, "lost %s owner %llu",
          ls.name, (unsigned long long)atomic_load(&ls.owner));
    CHECK(edrv_validity_ms(d, NAME("dropped"), 4) == 0, "no validity after the loss");
    CHECK_RC(edrv_release(d, NAME("kept"), 3, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS kept") == 0, "released");
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

struct slow_lost {
    _Atomic(struct edrv *) d;
    atomic_int entered, left;
    atomic_llong quiet_inside_ms; /* how long edrv_callbacks_quiet took in it */
};

static void on_lost_slowly(void *user, int kind, const char *name, size_t len, uint64_t owner,
                           int status, const char *message)
{
    struct slow_lost *sl = user;
    (void)kind, (void)name, (void)len, (void)owner, (void)status, (void)message;
    atomic_store(&sl->entered, 1);
    int64_t t0 = check_now_ms();
    edrv_callbacks_quiet(atomic_load(&sl->d)); /* from inside: must not wait for itself */
    atomic_store(&sl->quiet_inside_ms, check_now_ms() - t0);
    check_sleep_ms(300);
    atomic_store(&sl->left, 1);
}

/* Whoever stops listening for losses and calls edrv_callbacks_quiet hears
 * of none after it returns (rlc_lock_free's promise): it waits for a
 * callback that is running, and returns at once inside one. */
TEST(callbacks_quiet_waits_for_a_running_lost_callback)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    struct slow_lost sl;
    atomic_init(&sl.d, NULL);
    atomic_init(&sl.entered, 0);
    atomic_init(&sl.left, 0);
    atomic_init(&sl.quiet_inside_ms, -1);
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "watchdog_timeout_ms=1200", on_lost_slowly, &sl),
             RLC_OK);
    atomic_store(&sl.d, d);
    edrv_callbacks_quiet(d); /* none runs: at once */
    CHECK_RC(edrv_acquire(d, NAME("slow"), 1, NULL, 0, -1, &o), RLC_OK);
    CHECK(rs_int(&s, "DEL slow") == 1, "deleted behind the holder's back");
    CHECK(WAIT_UNTIL(atomic_load(&sl.entered) == 1, 5000), "the callback runs");
    edrv_callbacks_quiet(d);
    CHECK(atomic_load(&sl.left) == 1, "returned only after the running callback did");
    CHECK(atomic_load(&sl.quiet_inside_ms) >= 0 && atomic_load(&sl.quiet_inside_ms) < 200,
          "inside the callback it returned at once: %lld ms",
          (long long)atomic_load(&sl.quiet_inside_ms));
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* The child of a fork(): the parent's driver refuses it (its threads are not
 * here, its mutex may stay held) and is freed without them; a driver of its
 * own works. 0, or the step that failed. */
static int child_of_fork(struct edrv *parent, const char *uri)
{
    struct edrv_outcome o;
    if (edrv_acquire(parent, NAME("forked"), 2, NULL, 0, 5000, &o) != RLC_E_CLOSED)
        return 1;
    if (edrv_release(parent, NAME("forked"), 1, &o) != RLC_E_CLOSED ||
        edrv_hold_count(parent, NAME("forked"), 1) != 0)
        return 2;
    edrv_free(parent, 1000); /* returns at once, joining nothing */
    struct edrv *mine = NULL;
    if (edrv_new(&mine, uri, UUID_B, "loss_push=0", NULL, NULL) != RLC_OK)
        return 3;
    int rc = edrv_acquire(mine, NAME("child"), 1, NULL, 0, 5000, &o) == RLC_OK &&
                     edrv_release(mine, NAME("child"), 1, &o) == RLC_OK
                 ? 0
                 : 4;
    edrv_free(mine, 1000);
    return rc;
}

TEST(a_forked_child_frees_the_parents_driver_and_makes_its_own)
{
#if defined(__SANITIZE_THREAD__)
    /* TSan cannot run threads in a child forked from a threaded process;
     * this case runs in the other builds. */
    fprintf(stderr, "skipped under ThreadSanitizer\n");
    return;
#endif
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    /* A fixed lease and no loss push: the driver's threads sleep in poll
     * when the fork comes (a child forked while another thread is inside
     * ASan's allocator inherits its lock held). */
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, "loss_push=0", NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("forked"), 1, NULL, 0, 30000, &o), RLC_OK);
    check_sleep_ms(50);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0)
        _exit(child_of_fork(d, s.uri));
    int status = -1;
    for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
        check_sleep_ms(10);
    if (!WIFEXITED(status) && !WIFSIGNALED(status)) {
        kill(pid, SIGKILL); /* hung: bounded, then failed */
        waitpid(pid, &status, 0);
        CHECK(0, "the child hung");
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d (step %d)", status,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(edrv_hold_count(d, NAME("forked"), 1) == 1, "the parent's hold survived the child");
    CHECK(field_count(&s, "forked", UUID_A, 1) == 1, "and on the server");
    CHECK(rs_int(&s, "EXISTS child") == 0, "the child released its own");
    CHECK_RC(edrv_release(d, NAME("forked"), 1, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS forked") == 0, "released by the parent after the child went");
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

struct log_seen {
    atomic_int warnings, reconnects; /* stored after first: a reader that sees 1 sees it */
    char first[512];               /* the first warning */
};

static void on_log(void *user, int level, const char *line)
{
    struct log_seen *ls = user; /* under the driver's lock: only kept */
    if (level == RLC_LOG_WARN) {
        if (atomic_load(&ls->warnings) == 0)
            snprintf(ls->first, sizeof ls->first, "%s", line);
        atomic_fetch_add(&ls->warnings, 1);
    } else if (level == RLC_LOG_INFO && strstr(line, "reconnecting to 127.0.0.1")) {
        atomic_fetch_add(&ls->reconnects, 1);
    }
}

/* A node that refuses loss push (an ACL without +client): the engine's
 * warning reaches the driver's log callback once, as the blocking API's
 * log callback gets it, and the hold is kept by renewals meanwhile; a
 * killed connection, made again, is an INFO line as there. */
TEST(the_engines_log_lines_reach_the_log_callback)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    struct log_seen ls = {.first = ""};
    atomic_init(&ls.warnings, 0);
    atomic_init(&ls.reconnects, 0);
    redisReply *r = rs_cmd(&s, "ACL SETUSER u on >pw ~* &* +@all -client");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER");
    freeReplyObject(r);
    char uri[128];
    snprintf(uri, sizeof uri, "redis://u:pw@127.0.0.1:%d", s.port);
    CHECK_RC(edrv_new(&d, uri, UUID_A, "watchdog_timeout_ms=600", NULL, NULL), RLC_OK);
    edrv_set_log(d, on_log, &ls);
    CHECK_RC(edrv_acquire(d, NAME("refused"), 1, NULL, 0, -1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&ls.warnings) >= 1, 5000), "a warning came");
    CHECK(strstr(ls.first, "loss_push") && strstr(ls.first, "refused"), "warning: %s", ls.first);
    int64_t end = check_now_ms() + 800; /* renewals go on; the refusal is not said again */
    while (check_now_ms() < end)
        usleep(20000);
    CHECK(atomic_load(&ls.warnings) == 1, "warnings: %d", atomic_load(&ls.warnings));
    CHECK(edrv_hold_count(d, NAME("refused"), 1) == 1, "still held by renewals");
    CHECK(atomic_load(&ls.reconnects) == 0, "no reconnect yet");
    freeReplyObject(rs_cmd(&s, "CLIENT KILL TYPE normal SKIPME yes"));
    CHECK(WAIT_UNTIL(atomic_load(&ls.reconnects) >= 1, 5000), "reconnecting is logged");
    int rc = RLC_E_CONNECT; /* a renewal or this release may meet the dead connection */
    for (int i = 0; i < 10 && rc != RLC_OK && rc != RLC_E_NOT_OWNER && rc != RLC_E_LOST; i++)
        rc = edrv_release(d, NAME("refused"), 1, &o);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

TEST(a_killed_connection_is_made_again_for_the_next_call)
{
    START(s);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, s.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("k1"), 1, NULL, 0, 10000, &o), RLC_OK);
    CHECK(rs_int(&s, "CLIENT KILL TYPE normal SKIPME yes") >= 1, "killed");
    CHECK_RC(edrv_release(d, NAME("k1"), 1, &o), RLC_OK);
    CHECK(rs_int(&s, "EXISTS k1") == 0, "released over a new connection");
    CHECK_RC(edrv_acquire(d, NAME("k1"), 1, NULL, 0, 10000, &o), RLC_OK);
    CHECK_RC(edrv_release(d, NAME("k1"), 1, &o), RLC_OK);
done:
    edrv_free(d, 1000);
    rs_stop(&s);
}

/* rediss://: the driver speaks TLS on every connection (the engine's bytes
 * are plain RESP); a waiter is woken over a TLS subscriber connection, and
 * a server whose certificate another CA signed is never used. */
TEST(tls_connections_carry_the_lock_and_a_wrong_ca_is_refused)
{
    struct tls_env e;
    struct edrv *a = NULL, *b = NULL, *wrong = NULL;
    struct edrv_outcome o;
    pthread_t th;
    bool joined = true;
    struct waiting w = {.name = "tls-lock", .owner = 2, .wait_ms = 20000};
    atomic_init(&w.status, 1000);
    CHECK(env_start(&e, false, false) == 0, "a TLS server");
    CHECK_RC(edrv_new(&a, e.uri, UUID_A, e.opts, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&b, e.uri, UUID_B, e.opts, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(a, NAME("tls-lock"), 1, NULL, 0, 30000, &o), RLC_OK);
    CHECK(field_count(&e.s, "tls-lock", UUID_A, 1) == 1, "the Redisson hash, seen on the plain port");
    w.d = b;
    CHECK(pthread_create(&th, NULL, waiting_thread, &w) == 0, "thread");
    joined = false;
    CHECK(WAIT_UNTIL(channel_subscribers(&e.s, "redisson_lock__channel:{tls-lock}") == 1, 5000),
          "the waiter subscribed over TLS");
    int64_t released = check_now_ms();
    CHECK_RC(edrv_release(a, NAME("tls-lock"), 1, &o), RLC_OK);
    CHECK(WAIT_UNTIL(atomic_load(&w.status) != 1000, 10000), "the waiter ended");
    pthread_join(th, NULL);
    joined = true;
    CHECK_RC(atomic_load(&w.status), RLC_OK);
    CHECK(atomic_load(&w.ended_ms) - released < 1000, "woken by the message: %lld ms",
          (long long)(atomic_load(&w.ended_ms) - released));
    char opts[300];
    snprintf(opts, sizeof opts, "tls_ca_file=%s;connect_timeout_ms=500", e.other_ca);
    CHECK_RC(edrv_new(&wrong, e.uri, UUID_A, opts, NULL, NULL), RLC_OK);
    int64_t t0 = check_now_ms();
    int rc = edrv_acquire(wrong, NAME("tls-other"), 1, NULL, 0, 30000, &o);
    CHECK(rc == RLC_E_CONNECT && strstr(o.message, "certificate"), "refused: %d %s", rc,
          o.message);
    CHECK(check_now_ms() - t0 < 5000, "no hang: %lld ms", (long long)(check_now_ms() - t0));
    CHECK(rs_int(&e.s, "EXISTS tls-other") == 0, "nothing taken through the wrong server");
done:
    if (!joined)
        pthread_join(th, NULL);
    edrv_free(a, 1000);
    edrv_free(b, 1000);
    edrv_free(wrong, 1000);
    env_stop(&e);
}

/* Redlock over three masters: a quorum of two is enough while one is
 * stopped, and the stopped one costs at most the node timeout. */
TEST(redlock_over_three_masters_holds_with_one_stopped)
{
    START_CLUSTER(cl, 3);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    bool paused = false;
    CHECK_RC(edrv_new(&d, cl.uris, UUID_A, "node_timeout_ms=300", NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("r3"), 1, NULL, 0, 10000, &o), RLC_OK);
    for (int i = 0; i < 3; i++)
        CHECK(field_count(&cl.node[i], "r3", UUID_A, 1) == 1, "held on node %d", i);
    CHECK_RC(edrv_release(d, NAME("r3"), 1, &o), RLC_OK);
    rs_pause(&cl.node[2]);
    paused = true;
    int64_t t0 = check_now_ms();
    CHECK_RC(edrv_acquire(d, NAME("r3b"), 1, NULL, 0, 10000, &o), RLC_OK);
    CHECK(check_now_ms() - t0 < 2000, "bounded by the node timeout: %lld ms",
          (long long)(check_now_ms() - t0));
    CHECK(field_count(&cl.node[0], "r3b", UUID_A, 1) == 1 &&
              field_count(&cl.node[1], "r3b", UUID_A, 1) == 1,
          "held on the two running nodes");
    rs_resume(&cl.node[2]);
    paused = false;
    CHECK_RC(edrv_release(d, NAME("r3b"), 1, &o), RLC_OK);
    for (int i = 0; i < 3; i++)
        CHECK(WAIT_UNTIL(rs_int(&cl.node[i], "EXISTS r3b") == 0, 5000),
              "released everywhere, the resumed node too (its late try undone): node %d", i);
done:
    if (paused)
        rs_resume(&cl.node[2]);
    edrv_free(d, 1000);
    cluster_stop(&cl);
}

/* A try that lost while one of three masters is down leaves an undo
 * queued for that master, unanswered while it is down. That undo cannot
 * shorten anything on the two masters that answer, so it must not stop the
 * same owner's next try there: before, every later grant of that owner
 * was refused ("no validity was left of its lease") until the dead master
 * came back. */
TEST(an_undo_waiting_for_a_dead_master_does_not_block_the_owners_next_try)
{
    START_CLUSTER(cl, 3);
    struct edrv *d = NULL, *other = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, cl.uris, UUID_A, "node_timeout_ms=200;connect_timeout_ms=100;watchdog_timeout_ms=900",
                      NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&other, cl.uris, UUID_B, "node_timeout_ms=200", NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(other, NAME("dm"), 1, NULL, 0, 20000, &o), RLC_OK);
    rs_kill(&cl.node[2]);
    /* busy on two masters, no answer from the third: undone there later */
    CHECK_RC(edrv_acquire(d, NAME("dm"), 1, NULL, 0, 20000, &o), RLC_NOT_ACQUIRED);
    CHECK_RC(edrv_release(other, NAME("dm"), 1, &o), RLC_OK);
    CHECK_RC(edrv_acquire(d, NAME("dm"), 1, NULL, 0, 20000, &o), RLC_OK);
    CHECK(o.validity_ms > 15000, "validity %lld", (long long)o.validity_ms);
    CHECK_RC(edrv_release(d, NAME("dm"), 1, &o), RLC_OK);
    /* and its renewals go on (a watchdog hold, 900 ms leases, for 3 s):
     * the undo still waits for the dead master */
    CHECK_RC(edrv_acquire(d, NAME("dm"), 1, NULL, 0, -1, &o), RLC_OK);
    int64_t until = check_now_ms() + 3000;
    bool valid = true;
    while (valid && check_now_ms() < until)
        valid = WAIT_UNTIL(check_now_ms() >= until, 100) || edrv_validity_ms(d, NAME("dm"), 1) > 0;
    CHECK(edrv_validity_ms(d, NAME("dm"), 1) > 0, "the hold was renewed for three leases");
    CHECK_RC(edrv_release(d, NAME("dm"), 1, &o), RLC_OK);
done:
    edrv_free(d, 200);
    edrv_free(other, 200);
    cluster_stop(&cl);
}

/* One of three masters is down for good: its connection waits out a
 * backoff between connects. A request queued there meanwhile must not wait
 * out the round's connect allowance (a second) for nothing: with a 400 ms
 * lease every round would end with its lease used up, and no try would
 * ever be granted. Each cycle is granted on the two live masters. */
TEST(a_master_that_is_down_costs_a_round_no_more_than_the_node_timeout)
{
    START_CLUSTER(cl, 3);
    struct edrv *d = NULL;
    struct edrv_outcome o;
    CHECK_RC(edrv_new(&d, cl.uris, UUID_A, "node_timeout_ms=50", NULL, NULL), RLC_OK);
    rs_kill(&cl.node[2]);
    for (int i = 0; i < 10; i++) {
        CHECK_RC(edrv_acquire(d, NAME("down3"), 1, NULL, 0, 400, &o), RLC_OK);
        CHECK(o.validity_ms > 0, "cycle %d: validity %lld", i, (long long)o.validity_ms);
        CHECK_RC(edrv_release(d, NAME("down3"), 1, &o), RLC_OK);
    }
done:
    edrv_free(d, 200);
    cluster_stop(&cl);
}

/* A Redis Cluster: each name's hash lives on its slot's master. */
TEST(a_redis_cluster_routes_each_name_to_its_master)
{
    START_RC(rc)
    struct edrv *d = NULL;
    struct edrv_outcome o;
    const char *names[] = {"alpha", "bravo", "charlie", "delta", "echo"};
    CHECK_RC(edrv_new(&d, rc.uri, UUID_A, NULL, NULL, NULL), RLC_OK);
    for (int i = 0; i < 5; i++) {
        CHECK_RC(edrv_acquire(d, NAME(names[i]), 1, NULL, 1000, 10000, &o), RLC_OK);
        long long held = 0;
        for (int m = 0; m < 3; m++)
            held += field_count(&rc.node[m], names[i], UUID_A, 1);
        CHECK(held == 1, "%s held on exactly one master: %lld", names[i], held);
    }
    for (int i = 0; i < 5; i++)
        CHECK_RC(edrv_release(d, NAME(names[i]), 1, &o), RLC_OK);
    for (int i = 0; i < 5; i++)
        for (int m = 0; m < 3; m++)
            CHECK(rs_int(&rc.node[m], "EXISTS %s", names[i]) != 1, /* 0, or MOVED elsewhere */
                  "%s released", names[i]);
done:
    edrv_free(d, 1000);
    rc_stop(&rc);
}

/* Seeded chaos: threads of two drivers cycle one name over three masters
 * (fixed 800 ms leases) while a chaos thread stops a random master for
 * 30-300 ms at a time. Every section that still held the lock when it
 * ended (validity > 0) must be alone, and the fencing tokens must rise in
 * the order the sections began; after the last release nothing is left on
 * any node. */
struct chaos {
    struct cluster *cl;
    unsigned seed;
    atomic_bool stop;
};

static void *chaos_thread(void *arg)
{
    struct chaos *c = arg;
    unsigned r = c->seed;
    while (!atomic_load(&c->stop)) {
        int node = (int)(rand_r(&r) % 3);
        rs_pause(&c->cl->node[node]);
        check_sleep_ms(30 + rand_r(&r) % 270);
        rs_resume(&c->cl->node[node]);
        check_sleep_ms(20 + rand_r(&r) % 200);
    }
    return NULL;
}

struct section {
    int64_t began, ended; /* us */
    uint64_t token;
};

#define MAX_SECTIONS 20000

struct section_log {
    pthread_mutex_t mu;
    struct section *v; /* sections that held the lock throughout */
    int n, errors;
};

struct stressor {
    struct edrv *d;
    uint64_t owner;
    int64_t end_ms;
    struct section_log *log;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *stress_thread(void *arg)
{
    struct stressor *st = arg;
    struct section_log *lg = st->log;
    struct edrv_outcome o;
    while (check_now_ms() < st->end_ms) {
        int rc = edrv_acquire(st->d, NAME("chaos"), st->owner, NULL, 2000, 800, &o);
        if (rc != RLC_OK) {
            if (rc != RLC_NOT_ACQUIRED && rc != RLC_E_NO_QUORUM && rc != RLC_E_TIMEOUT) {
                pthread_mutex_lock(&lg->mu);
                lg->errors++;
                pthread_mutex_unlock(&lg->mu);
            }
            continue;
        }
        struct section sec = {now_us(), 0, o.token};
        check_sleep_ms(2);
        int64_t left = edrv_validity_ms(st->d, NAME("chaos"), st->owner);
        sec.ended = now_us();
        pthread_mutex_lock(&lg->mu);
        if (left > 0 && lg->n < MAX_SECTIONS) /* it held the lock throughout */
            lg->v[lg->n++] = sec;
        pthread_mutex_unlock(&lg->mu);
        edrv_release(st->d, NAME("chaos"), st->owner, &o);
    }
    return NULL;
}

static int by_start(const void *x, const void *y)
{
    const struct section *a = x, *b = y;
    return a->began < b->began ? -1 : a->began > b->began;
}

TEST(threads_under_server_pauses_stay_exclusive_and_leave_nothing)
{
    START_CLUSTER(cl, 3);
    enum { T = 6 };
    struct edrv *a = NULL, *b = NULL;
    pthread_t th[T], ch;
    struct stressor st[T];
    struct section_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER,
                             .v = calloc(MAX_SECTIONS, sizeof(struct section))};
    /* RLC_CHAOS_SEED replays or widens the schedule (the default is CI's). */
    const char *seed = getenv("RLC_CHAOS_SEED");
    struct chaos c = {.cl = &cl, .seed = seed ? (unsigned)atoi(seed) : 20261125u};
    atomic_init(&c.stop, false);
    int started = 0;
    bool chaos_on = false;
    const char *opts = "node_timeout_ms=200;connect_timeout_ms=300;io_timeout_ms=300;fencing=1";
    CHECK_RC(edrv_new(&a, cl.uris, UUID_A, opts, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&b, cl.uris, UUID_B, opts, NULL, NULL), RLC_OK);
    CHECK(pthread_create(&ch, NULL, chaos_thread, &c) == 0, "chaos thread");
    chaos_on = true;
    int64_t end = check_now_ms() + 4000;
    for (int i = 0; i < T; i++) {
        st[i] = (struct stressor){i % 2 ? b : a, (uint64_t)i + 1, end, &lg};
        if (pthread_create(&th[i], NULL, stress_thread, &st[i]) == 0)
            started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    atomic_store(&c.stop, true);
    pthread_join(ch, NULL);
    chaos_on = false;
    for (int i = 0; i < 3; i++)
        rs_resume(&cl.node[i]);
    CHECK(started == T, "threads %d", started);
    CHECK(lg.n >= 20, "sections that held throughout: %d", lg.n);
    qsort(lg.v, (size_t)lg.n, sizeof *lg.v, by_start);
    int overlaps = 0, regressions = 0;
    int64_t busy_until = 0;
    for (int i = 0; i < lg.n; i++) {
        overlaps += lg.v[i].began < busy_until;
        regressions += i > 0 && lg.v[i].token <= lg.v[i - 1].token;
        if (lg.v[i].ended > busy_until)
            busy_until = lg.v[i].ended;
    }
    CHECK(overlaps == 0, "overlapping valid sections: %d of %d", overlaps, lg.n);
    CHECK(regressions == 0, "fencing tokens that did not rise: %d of %d", regressions, lg.n);
    CHECK(lg.errors == 0, "unexpected statuses: %d", lg.errors);
    for (int i = 0; i < 3; i++)
        CHECK(WAIT_UNTIL(rs_int(&cl.node[i], "EXISTS chaos") == 0, 3000),
              "nothing left on node %d", i);
done:
    if (chaos_on) {
        atomic_store(&c.stop, true);
        pthread_join(ch, NULL);
        for (int i = 0; i < 3; i++)
            rs_resume(&cl.node[i]);
    }
    edrv_free(a, 2000);
    edrv_free(b, 2000);
    free(lg.v);
    cluster_stop(&cl);
}

/* In the namespace (dns_env.h): a node named by a host name whose DNS
 * server stops answering. The holder's connections are cut: it reconnects
 * with the address it had, and its renewals keep the lock. A driver that
 * never resolved the name fails a call within its connect and I/O bounds,
 * not the resolver's 4 s: the lookup runs on a thread of its own
 * (resolve.c), never on a caller's thread under the driver's mutex. */
static int driver_dns_scenario(void)
{
    int rc = enter_dns_namespace();
    if (rc != 0)
        return rc;
    struct dns dns;
    pthread_t t;
    struct redis_server s;
    if (dns_serve(&dns, &t) != 0 || rs_start(&s, NULL) != 0)
        return 1;
    struct edrv *holder = NULL, *other = NULL, *fresh = NULL;
    struct edrv_outcome o;
    char uri[96];
    snprintf(uri, sizeof uri, "redis://redis-node.rlc-test:%d", s.port);
    const char *opts = "watchdog_timeout_ms=600;io_timeout_ms=300;connect_timeout_ms=300";
    CHECK_RC(edrv_new(&holder, uri, UUID_A, opts, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_new(&other, s.uri, UUID_B, NULL, NULL, NULL), RLC_OK);
    CHECK_RC(edrv_acquire(holder, NAME("dns"), 1, NULL, 1000, -1, &o), RLC_OK);
    CHECK(atomic_load(&dns.queries) > 0, "the name was looked up in our DNS server");
    atomic_store(&dns.answering, 0);
    freeReplyObject(rs_cmd(&s, "CLIENT KILL TYPE normal"));
    for (int64_t until = check_now_ms() + 1500; check_now_ms() < until;) {
        CHECK_RC(edrv_acquire(other, NAME("dns"), 2, NULL, 0, 5000, &o), RLC_NOT_ACQUIRED);
        check_sleep_ms(50);
    }
    CHECK_RC(edrv_new(&fresh, uri, UUID_B, opts, NULL, NULL), RLC_OK);
    int64_t t0 = check_now_ms();
    int got = edrv_acquire(fresh, NAME("dns-fresh"), 1, NULL, 0, 5000, &o);
    int64_t took = check_now_ms() - t0;
    CHECK(got != RLC_OK, "no address, no lock: %d", got);
    CHECK(took < 2000, "bounded by connect + I/O, not by the lookup: %lld ms", (long long)took);
    CHECK_RC(edrv_acquire(other, NAME("dns"), 2, NULL, 0, 5000, &o), RLC_NOT_ACQUIRED);
    CHECK_RC(edrv_release(holder, NAME("dns"), 1, &o), RLC_OK);
done:
    edrv_free(fresh, 0);
    edrv_free(holder, 1000);
    edrv_free(other, 1000);
    atomic_store(&dns.stop, 1);
    pthread_join(t, NULL);
    rs_stop(&s);
    return check_failed;
}

TEST(a_silent_dns_server_bounds_calls_and_never_stalls_renewals)
{
    int rc = dns_scenario_in_child(driver_dns_scenario);
    if (rc == 77)
        exit(77); /* ctest: skipped */
    CHECK(rc == 0, "the namespace scenario failed (see above)");
done:;
}

RUN_TESTS(CASE(one_thread_acquires_extends_and_releases_in_redisson_format),
          CASE(sixteen_threads_of_two_drivers_exclude_each_other),
          CASE(threads_on_distinct_names_pipeline_on_one_connection),
          CASE(a_waiter_is_woken_by_another_clients_release),
          CASE(cancel_ends_one_handles_waiting_acquire_and_leaves_nothing_held),
          CASE(the_background_renews_between_calls_and_reports_a_loss),
          CASE(the_engines_log_lines_reach_the_log_callback),
          CASE(callbacks_quiet_waits_for_a_running_lost_callback),
          CASE(a_forked_child_frees_the_parents_driver_and_makes_its_own),
          CASE(a_killed_connection_is_made_again_for_the_next_call),
          CASE(tls_connections_carry_the_lock_and_a_wrong_ca_is_refused),
          CASE(redlock_over_three_masters_holds_with_one_stopped),
          CASE(an_undo_waiting_for_a_dead_master_does_not_block_the_owners_next_try),
          CASE(a_master_that_is_down_costs_a_round_no_more_than_the_node_timeout),
          CASE(a_redis_cluster_routes_each_name_to_its_master),
          CASE(threads_under_server_pauses_stay_exclusive_and_leave_nothing),
          CASE(a_silent_dns_server_bounds_calls_and_never_stalls_renewals))
