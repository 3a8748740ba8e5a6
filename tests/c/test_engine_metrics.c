/*
 * test_engine_metrics.c - rlc_engine_metrics: the engine counts what
 * happened, by the blocking API's rules (rlc_client_metrics), on a real
 * server driven by engine_loop.h. Each count is checked against what the
 * case made happen, so a counter that is never bumped, or bumped twice,
 * fails here.
 */
#include <unistd.h>

#include "engine_loop.h"
#include "fixture.h"

#define UUID_A "6d7a1c3e-0000-4000-8000-0000000000a1"
#define UUID_B "6d7a1c3e-0000-4000-8000-0000000000b1"

#define N_COUNTERS (RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS)

static uint64_t metric(struct eloop *L, int which)
{
    uint64_t m[N_COUNTERS];
    memset(m, 0xff, sizeof m);
    if (rlc_engine_metrics(L->e, m, N_COUNTERS) != N_COUNTERS)
        return UINT64_MAX;
    return m[which];
}

static uint64_t bucket_total(struct eloop *L)
{
    uint64_t m[N_COUNTERS], sum = 0;
    rlc_engine_metrics(L->e, m, N_COUNTERS);
    for (int i = 0; i < RLC_M_WAIT_BUCKETS; i++)
        sum += m[RLC_M_WAIT_BUCKET + i];
    return sum;
}

TEST(counters_start_at_zero_and_read_like_the_clients)
{
    struct eloop L;
    CHECK_RC(el_init(&L, "redis://127.0.0.1:1", UUID_A, NULL), RLC_OK);
    uint64_t m[N_COUNTERS + 2];
    memset(m, 0xab, sizeof m);
    CHECK(rlc_engine_metrics(L.e, m, N_COUNTERS + 2) == N_COUNTERS, "the count of counters");
    for (int i = 0; i < N_COUNTERS; i++)
        CHECK(m[i] == 0, "counter %d (%s) starts at 0: %llu", i, rlc_metric_name(i),
              (unsigned long long)m[i]);
    CHECK(m[N_COUNTERS] == 0xababababababababULL, "past the end is left untouched");
    /* a prefix, as an older caller reads it */
    CHECK(rlc_engine_metrics(L.e, m, 2) == N_COUNTERS, "a prefix says how many there are");
    CHECK_RC(rlc_engine_metrics(NULL, m, 1), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "engine is NULL") != NULL, "message: %s", rlc_errmsg());
    CHECK_RC(rlc_engine_metrics(L.e, NULL, 1), RLC_E_INVAL);
    CHECK_RC(rlc_engine_metrics(L.e, m, -1), RLC_E_INVAL);
done:
    el_free(&L);
}

TEST(acquires_busy_and_a_wait_are_counted_with_its_time)
{
    START(s);
    struct eloop A, B;
    CHECK_RC(el_init(&A, s.uri, UUID_A, NULL), RLC_OK);
    CHECK_RC(el_init(&B, s.uri, UUID_B, NULL), RLC_OK);
    CHECK_RC(el_acquire(&A, "m", 1, 0, -1, NULL), RLC_OK);
    CHECK_RC(el_acquire(&A, "m", 1, 0, -1, NULL), RLC_OK); /* nested: counted too */
    CHECK(metric(&A, RLC_M_ACQUIRES) == 2, "A: 2 acquires, %llu",
          (unsigned long long)metric(&A, RLC_M_ACQUIRES));
    CHECK_RC(el_acquire(&B, "m", 1, 0, -1, NULL), RLC_NOT_ACQUIRED);
    CHECK(metric(&B, RLC_M_BUSY) == 1 && metric(&B, RLC_M_WAITS) == 0,
          "B: busy without a wait is no wait: busy %llu waits %llu",
          (unsigned long long)metric(&B, RLC_M_BUSY), (unsigned long long)metric(&B, RLC_M_WAITS));

    /* B waits; A lets go once B has waited at least 150 ms */
    int64_t t0 = el_now();
    uint64_t op;
    CHECK_RC(rlc_engine_acquire(B.e, "m", 1, 1, 20000, -1, el_now(), &op), RLC_OK);
    for (int i = 0; i < 400 && rs_int(&s, "PUBSUB NUMSUB redisson_lock__channel:{m}") == 0; i++) {
        el_turn(&A, 5);
        el_turn(&B, 5);
    }
    while (el_now() < t0 + 150) {
        el_turn(&A, 5);
        el_turn(&B, 5);
    }
    CHECK_RC(el_release(&A, "m", 1), RLC_OK);
    CHECK_RC(el_release(&A, "m", 1), RLC_OK);
    const struct el_done *d = NULL;
    for (int64_t end = el_now() + 10000; !d && el_now() < end;) {
        d = el_wait(&B, op, 0);
        el_turn(&B, 5);
        el_turn(&A, 5);
    }
    int64_t took = el_now() - t0;
    CHECK(d && d->status == RLC_OK, "B got it after waiting");
    CHECK(metric(&B, RLC_M_ACQUIRES) == 1 && metric(&B, RLC_M_BUSY) == 1,
          "B: 1 acquire, 1 busy: %llu %llu", (unsigned long long)metric(&B, RLC_M_ACQUIRES),
          (unsigned long long)metric(&B, RLC_M_BUSY));
    CHECK(metric(&B, RLC_M_WAITS) == 1, "B: one wait, %llu",
          (unsigned long long)metric(&B, RLC_M_WAITS));
    uint64_t sum = metric(&B, RLC_M_WAIT_MS_SUM);
    CHECK(sum >= 150 && (int64_t)sum <= took, "the wait's time %llu ms: at least the 150 ms "
          "it was kept waiting, at most the %lld ms it took", (unsigned long long)sum,
          (long long)took);
    CHECK(bucket_total(&B) == 1, "one wait in the buckets");
    /* a wait of 150+ ms is above the 100 ms bound, at most the 250 ms one
     * unless the machine was slow: in a bucket whose bound it does not exceed */
    uint64_t m[N_COUNTERS];
    rlc_engine_metrics(B.e, m, N_COUNTERS);
    for (int i = 0; i < RLC_M_WAIT_BUCKETS; i++)
        if (m[RLC_M_WAIT_BUCKET + i]) {
            CHECK((int64_t)sum <= rlc_metric_bucket_ms(i) &&
                      (i == 0 || (int64_t)sum > rlc_metric_bucket_ms(i - 1)),
                  "a %llu ms wait in bucket %d (<= %lld ms)", (unsigned long long)sum, i,
                  (long long)rlc_metric_bucket_ms(i));
        }
    CHECK(metric(&A, RLC_M_WAITS) == 0, "A never waited");
    /* a wait that ends busy is a wait and a busy */
    uint64_t op2;
    CHECK_RC(rlc_engine_acquire(A.e, "m", 1, 2, 200, -1, el_now(), &op2), RLC_OK);
    d = el_wait(&A, op2, 5000);
    CHECK(d && d->status == RLC_NOT_ACQUIRED, "A's wait ran out: %d %s", d ? d->status : -100,
          d ? d->message : "");
    CHECK(metric(&A, RLC_M_WAITS) == 1 && metric(&A, RLC_M_BUSY) == 1,
          "A: 1 wait, 1 busy: %llu %llu", (unsigned long long)metric(&A, RLC_M_WAITS),
          (unsigned long long)metric(&A, RLC_M_BUSY));
done:
    el_free(&A);
    el_free(&B);
    rs_stop(&s);
}

TEST(renewals_script_reloads_reconnects_and_a_loss_are_counted)
{
    START(s);
    struct eloop L;
    CHECK_RC(el_init(&L, s.uri, UUID_A, "watchdog_timeout_ms=300;loss_push=0"), RLC_OK);
    CHECK_RC(el_acquire(&L, "r", 1, 0, -1, NULL), RLC_OK);
    /* renewed every 100 ms: at least 4 in 900 ms, however the turns fall */
    int64_t end = el_now() + 900;
    while (el_now() < end)
        el_turn(&L, 20);
    uint64_t renewals = metric(&L, RLC_M_RENEWALS);
    CHECK(renewals >= 4 && renewals <= 12, "renewals in 900 ms of a 300 ms lease: %llu",
          (unsigned long long)renewals);
    CHECK(rs_int(&s, "EXISTS r") == 1, "still held");
    CHECK(metric(&L, RLC_M_RECONNECTS) == 0, "no reconnect yet");

    /* The connection loaded the scripts as it was made: no script's first
     * call is a reload. Then the server forgets them: the release's
     * NOSCRIPT is one (they are loaded again, once; a renewal on the wire
     * then adds none). */
    CHECK_RC(el_acquire(&L, "warm", 1, 0, 5000, NULL), RLC_OK);
    CHECK_RC(el_release(&L, "warm", 1), RLC_OK);
    CHECK(metric(&L, RLC_M_SCRIPT_RELOADS) == 0, "a script's first call is no reload: %llu",
          (unsigned long long)metric(&L, RLC_M_SCRIPT_RELOADS));
    freeReplyObject(rs_cmd(&s, "SCRIPT FLUSH"));
    CHECK_RC(el_release(&L, "r", 1), RLC_OK);
    uint64_t reloads = metric(&L, RLC_M_SCRIPT_RELOADS);
    CHECK(reloads >= 1 && reloads <= 2, "the release's NOSCRIPT counted: %llu",
          (unsigned long long)reloads);

    /* the command connection is killed: the next call reconnects */
    freeReplyObject(rs_cmd(&s, "CLIENT KILL TYPE normal SKIPME yes"));
    /* the first try may meet the dead connection: an error, and its undo */
    int rc = -100;
    for (int i = 0; i < 10 && rc != RLC_OK; i++) {
        rc = el_acquire(&L, "r", 1, 0, -1, NULL);
        el_turn(&L, 20);
    }
    CHECK_RC(rc, RLC_OK);
    CHECK(metric(&L, RLC_M_RECONNECTS) >= 1, "reconnects: %llu",
          (unsigned long long)metric(&L, RLC_M_RECONNECTS));

    /* the key is deleted behind the holder: one loss, counted once even
     * though the release then says lost too */
    CHECK(metric(&L, RLC_M_LOST) == 0, "nothing lost yet");
    rs_int(&s, "DEL r");
    end = el_now() + 3000;
    while (L.lost == 0 && el_now() < end)
        el_turn(&L, 20);
    CHECK(L.lost == 1, "the loss was reported");
    CHECK(metric(&L, RLC_M_LOST) == 1, "lost: %llu", (unsigned long long)metric(&L, RLC_M_LOST));
    CHECK_RC(el_release(&L, "r", 1), RLC_E_LOST);
    CHECK(metric(&L, RLC_M_LOST) == 1, "the release of a lost hold counts no second loss");

    /* a release that finds the hold gone (no renewal saw it first) is a loss */
    CHECK_RC(el_acquire(&L, "f", 1, 0, 5000, NULL), RLC_OK);
    rs_int(&s, "DEL f");
    CHECK_RC(el_release(&L, "f", 1), RLC_E_LOST);
    CHECK(metric(&L, RLC_M_LOST) == 2, "a release that found it gone: lost %llu",
          (unsigned long long)metric(&L, RLC_M_LOST));
done:
    el_free(&L);
    rs_stop(&s);
}

RUN_TESTS(CASE(counters_start_at_zero_and_read_like_the_clients),
          CASE(acquires_busy_and_a_wait_are_counted_with_its_time),
          CASE(renewals_script_reloads_reconnects_and_a_loss_are_counted))
