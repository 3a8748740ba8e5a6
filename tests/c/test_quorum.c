/*
 * test_quorum.c - the quorum decisions (c/src/engine/quorum.c) alone: pure
 * functions, no Redis. Every acquire round of the engine ends in
 * quorum_decide; these cases pin what each mix of votes means.
 */
#include "acquire_outcome.h"
#include "check.h"
#include "quorum.h"

#define LEASE 30000
#define DRIFT 0.01

static struct quorum_vote yes(int64_t token) { return (struct quorum_vote){QV_YES, token, true, NULL, 0}; }
static struct quorum_vote busy(const char *holder, int64_t pttl)
{
    return (struct quorum_vote){QV_BUSY, pttl, false, holder, strlen(holder)};
}
static struct quorum_vote none(void) { return (struct quorum_vote){QV_NONE, 0, false, NULL, 0}; }

TEST(one_node_yes_is_held_with_its_token)
{
    struct quorum_vote v[1] = {yes(7)};
    struct quorum_verdict d;
    quorum_decide(v, 1, false, LEASE, 2000000, DRIFT, &d);
    CHECK(d.outcome == Q_HELD, "outcome %d", d.outcome);
    CHECK(d.token == 7, "token %llu", (unsigned long long)d.token);
    CHECK(d.validity_ms == LEASE - 2 - quorum_drift_ms(LEASE, DRIFT), "validity %lld",
          (long long)d.validity_ms);
done:;
}

TEST(one_node_busy_sleeps_until_the_holders_lease_ends_and_undoes_nothing)
{
    struct quorum_vote v[1] = {busy("u:1", 1234)};
    struct quorum_verdict d;
    quorum_decide(v, 1, false, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_BUSY && !d.split, "outcome %d split %d", d.outcome, d.split);
    CHECK(d.sleep_ms == 1234, "sleep %lld", (long long)d.sleep_ms);
    CHECK(!d.undo[0], "a busy node ran nothing of ours");
done:;
}

TEST(no_answer_is_an_outage_and_is_undone)
{
    struct quorum_vote v[1] = {none()};
    struct quorum_verdict d;
    quorum_decide(v, 1, false, LEASE, 0, DRIFT, &d);
    CHECK(d.outcome == Q_OUTAGE, "outcome %d", d.outcome);
    CHECK(d.undo[0], "a node that did not answer may hold our level");
done:;
}

TEST(two_of_three_is_a_quorum_and_the_token_is_the_largest)
{
    struct quorum_vote v[3] = {yes(4), none(), yes(9)};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 3000000, DRIFT, &d);
    CHECK(d.outcome == Q_HELD && d.yes == 2 && d.unanswered == 1, "outcome %d", d.outcome);
    CHECK(d.token == 9, "token %llu", (unsigned long long)d.token);
done:;
}

TEST(one_of_three_with_two_other_holders_is_a_split_vote)
{
    struct quorum_vote v[3] = {yes(1), busy("a:1", 500), busy("b:1", 800)};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_BUSY && d.split, "outcome %d split %d", d.outcome, d.split);
    CHECK(d.undo[0] && !d.undo[1] && !d.undo[2], "only our yes is undone");
done:;
}

TEST(one_of_three_with_one_holder_on_two_is_not_a_split)
{
    struct quorum_vote v[3] = {yes(1), busy("a:1", 500), busy("a:1", 800)};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_BUSY && !d.split, "one owner may hold it: sleep, do not spin");
    /* it needs 2 free nodes: node 0 is free; one more lease must end: 500 */
    CHECK(d.sleep_ms == 500, "sleep %lld", (long long)d.sleep_ms);
done:;
}

TEST(an_unanswered_node_may_give_a_holder_its_quorum)
{
    struct quorum_vote v[3] = {yes(1), busy("a:1", 500), none()};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_OUTAGE || (d.outcome == Q_BUSY && !d.split),
          "a:1 plus the silent node could be a quorum: no split; outcome %d", d.outcome);
    CHECK(d.undo[0] && d.undo[2] && !d.undo[1], "undo the yes and the silent node");
done:;
}

TEST(granted_too_late_is_not_held)
{
    struct quorum_vote v[1] = {yes(3)};
    struct quorum_verdict d;
    quorum_decide(v, 1, false, 100, 99000000, DRIFT, &d);
    CHECK(d.outcome == Q_LEASE_USED, "outcome %d", d.outcome);
    CHECK(d.undo[0], "the level must be undone");
done:;
}

TEST(nested_acquire_whose_outer_hold_is_gone_is_lost)
{
    struct quorum_vote v[3] = {yes(2), yes(2), yes(2)};
    v[0].inner = v[1].inner = false;
    struct quorum_verdict d;
    quorum_decide(v, 3, true, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_OUTER_LOST, "outcome %d", d.outcome);
    v[0].inner = true;
    quorum_decide(v, 3, true, LEASE, 1000000, DRIFT, &d);
    CHECK(d.outcome == Q_HELD, "two inner of three is a quorum: outcome %d", d.outcome);
done:;
}

TEST(holder_without_expiry_gives_an_unknown_sleep)
{
    struct quorum_vote v[1] = {busy("a:1", -1)};
    struct quorum_verdict d;
    quorum_decide(v, 1, false, LEASE, 0, DRIFT, &d);
    CHECK(d.outcome == Q_BUSY && d.sleep_ms == -1, "sleep %lld", (long long)d.sleep_ms);
done:;
}

TEST(undone_before_arrival_counts_as_no_vote_and_needs_no_undo)
{
    struct quorum_vote v[3] = {yes(1), yes(1), {QV_UNDONE, 0, false, NULL, 0}};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 0, DRIFT, &d);
    CHECK(d.outcome == Q_HELD && !d.undo[2], "outcome %d", d.outcome);
done:;
}

TEST(arithmetic)
{
    CHECK(quorum_of(1) == 1 && quorum_of(2) == 2 && quorum_of(3) == 2 && quorum_of(5) == 3,
          "quorum_of");
    CHECK(quorum_drift_ms(30000, 0.01) == 302, "drift %lld", (long long)quorum_drift_ms(30000, 0.01));
    CHECK(quorum_validity_ms(1000, 1, 0.01) == 1000 - 1 - 12, "elapsed rounds up");
    int64_t v[4] = {5, 1, 9, 3};
    CHECK(quorum_kth_largest(v, 4, 2, -1) == 5, "2nd largest");
    CHECK(quorum_kth_largest(v, 4, 5, -7) == -7, "fallback");
done:;
}

TEST(release_needs_a_quorum_and_is_not_held_once_no_quorum_can_say_yes)
{
    CHECK(quorum_release_end(1, 1, 0) == QE_DONE, "one node ran it");
    CHECK(quorum_release_end(1, 0, 1) == QE_NOT_HELD, "one node refused");
    CHECK(quorum_release_end(1, 0, 0) == QE_OUTAGE, "no answer");
    CHECK(quorum_release_end(3, 2, 1) == QE_DONE, "2 of 3 ran it");
    CHECK(quorum_release_end(3, 1, 1) == QE_OUTAGE, "1 ran, 1 refused, 1 silent: unknown");
    CHECK(quorum_release_end(3, 1, 2) == QE_NOT_HELD, "2 of 3 refused: no quorum held it");
    CHECK(quorum_release_end(5, 2, 2) == QE_OUTAGE, "2/2/1 of 5: unknown");
    CHECK(quorum_release_end(5, 2, 3) == QE_NOT_HELD, "3 of 5 refused");
done:;
}

TEST(renewal_counts_only_in_time_and_is_lost_once_no_quorum_can_say_yes)
{
    CHECK(quorum_renew_end(3, 2, 0, 100) == QE_DONE, "2 of 3 renewed in time");
    CHECK(quorum_renew_end(3, 3, 0, 0) == QE_LATE, "renewed, but the validity has ended");
    CHECK(quorum_renew_end(3, 3, 0, -5) == QE_LATE, "renewed after it ended");
    CHECK(quorum_renew_end(3, 1, 2, 100) == QE_NOT_HELD, "2 of 3 say it is gone");
    CHECK(quorum_renew_end(3, 1, 1, 100) == QE_OUTAGE, "1/1/1: unknown");
    CHECK(quorum_renew_end(1, 0, 0, 100) == QE_OUTAGE, "no answer");
    CHECK(quorum_has(5, 3) && !quorum_has(5, 2) && quorum_has(2, 2) && !quorum_has(2, 1),
          "quorum_has");
    CHECK(quorum_denied(5, 3) && !quorum_denied(5, 2) && quorum_denied(2, 1),
          "quorum_denied: of 2 nodes one no is enough (the quorum is 2)");
done:;
}

TEST(a_loser_looks_again_between_the_minimum_and_the_safety_poll)
{
    CHECK(quorum_retry_ms(-1) == QUORUM_SAFETY_POLL_MS, "no expiry known: the safety poll");
    CHECK(quorum_retry_ms(0) == QUORUM_MIN_RETRY_MS && quorum_retry_ms(3) == QUORUM_MIN_RETRY_MS,
          "never sooner than the minimum");
    CHECK(quorum_retry_ms(250) == 250, "when the holder's lease ends");
    CHECK(quorum_retry_ms(30000) == QUORUM_SAFETY_POLL_MS, "at most the safety poll");
    CHECK(quorum_jitter_ms(0, 50) == QUORUM_MIN_RETRY_MS, "jitter floor");
    CHECK(quorum_jitter_ms(50, 50) == QUORUM_MIN_RETRY_MS + 50, "jitter top");
    CHECK(quorum_jitter_ms(51, 50) == QUORUM_MIN_RETRY_MS, "draws wrap");
    CHECK(quorum_jitter_ms(12345, 0) == QUORUM_MIN_RETRY_MS, "no jitter configured");
done:;
}

static struct quorum_vote guarded(int64_t left_ms)
{
    return (struct quorum_vote){QV_GUARDED, left_ms, false, NULL, 0};
}

/* The restart guard: a restarted node's yes is undone but not counted. */
TEST(grants_of_restarted_nodes_are_undone_and_do_not_count)
{
    struct quorum_vote v[3] = {busy("a:1", 20000), yes(4), guarded(9000)};
    struct quorum_verdict d;
    quorum_decide(v, 3, false, LEASE, 2000000, DRIFT, &d);
    CHECK(d.outcome == Q_GUARDED, "outcome %d", d.outcome);
    CHECK(d.yes == 1 && d.guarded == 1, "yes %d guarded %d", d.yes, d.guarded);
    CHECK(d.sleep_ms == 9000, "tries again when the node counts: %lld", (long long)d.sleep_ms);
    CHECK(!d.undo[0] && d.undo[1] && d.undo[2], "undo the yes and the guarded yes");
    struct quorum_vote w[5] = {guarded(7000), guarded(3000), yes(2), none(), busy("a:1", 100)};
    quorum_decide(w, 5, false, LEASE, 2000000, DRIFT, &d);
    CHECK(d.outcome == Q_GUARDED && d.sleep_ms == 3000, "outcome %d, sleep %lld (the least)",
          d.outcome, (long long)d.sleep_ms);
    /* too few even with them: the usual verdicts */
    struct quorum_vote x[3] = {busy("a:1", 20000), busy("a:1", 20000), guarded(9000)};
    quorum_decide(x, 3, false, LEASE, 2000000, DRIFT, &d);
    CHECK(d.outcome == Q_BUSY && d.undo[2], "outcome %d", d.outcome);
    /* a quorum of counted yeses holds, guarded or not */
    struct quorum_vote y[3] = {yes(3), yes(5), guarded(9000)};
    quorum_decide(y, 3, false, LEASE, 2000000, DRIFT, &d);
    CHECK(d.outcome == Q_HELD && d.token == 5, "outcome %d token %llu", d.outcome,
          (unsigned long long)d.token);
done:;
}

/* What each verdict tells the caller: one reading for both drivers. */
TEST(each_verdict_reads_the_same_in_both_drivers)
{
    struct acquire_round r = {"orders", 3, LEASE, 12, 0, 0, 0, "n3 restarted"};
    struct acquire_outcome out;
    char msg[400];
    struct quorum_verdict vd;
    struct quorum_vote held[3] = {yes(1), yes(2), none()};
    quorum_decide(held, 3, false, LEASE, 2000000, DRIFT, &vd);
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_OK && msg[0] == '\0', "held: %d '%s'", out.status, msg);

    struct quorum_vote busy3[3] = {busy("a:1", 700), busy("a:1", 900), none()};
    quorum_decide(busy3, 3, false, LEASE, 2000000, DRIFT, &vd);
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_NOT_ACQUIRED && !out.split && out.sleep_ms == vd.sleep_ms &&
              strcmp(msg, "lock 'orders' is held by another owner") == 0,
          "busy: %d %lld '%s'", out.status, (long long)out.sleep_ms, msg);

    struct quorum_vote guard[3] = {yes(1), guarded(4000), busy("a:1", 10)};
    quorum_decide(guard, 3, false, LEASE, 2000000, DRIFT, &vd);
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_NOT_ACQUIRED && out.sleep_ms == 4000 &&
              strstr(msg, "2 of 3 nodes granted it, but only 1 count toward the quorum of 2: "
                          "n3 restarted"),
          "guarded: %d %lld '%s'", out.status, (long long)out.sleep_ms, msg);

    quorum_decide(held, 3, false, LEASE, (int64_t)LEASE * 1000000, DRIFT, &vd);
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_NOT_ACQUIRED && out.sleep_ms == QUORUM_MIN_RETRY_MS &&
              strstr(msg, "lease was used up"), "lease used: %d '%s'", out.status, msg);

    quorum_decide(held, 3, true, LEASE, 2000000, DRIFT, &vd);
    vd.outcome = Q_OUTER_LOST; /* as when the votes say the outer level is gone */
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_E_LOST && strstr(msg, "lost before this nested acquire"),
          "outer lost: %d '%s'", out.status, msg);

    struct quorum_vote out3[3] = {none(), none(), yes(1)};
    quorum_decide(out3, 3, false, LEASE, 2000000, DRIFT, &vd);
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == 0 && msg[0] == '\0', "outage: the driver names the nodes' failures");
    r.unsynced = 1;
    r.sync_replicas = 1;
    r.sync_timeout_ms = 50;
    acquire_outcome(&vd, &r, msg, sizeof msg, &out);
    CHECK(out.status == RLC_E_TIMEOUT && strstr(msg, "not synced: lock 'orders' was granted on 1 "
                                                     "of 3 nodes"), "unsynced: '%s'", msg);
done:;
}

RUN_TESTS(CASE(each_verdict_reads_the_same_in_both_drivers),
          CASE(grants_of_restarted_nodes_are_undone_and_do_not_count),
          CASE(one_node_yes_is_held_with_its_token),
          CASE(one_node_busy_sleeps_until_the_holders_lease_ends_and_undoes_nothing),
          CASE(no_answer_is_an_outage_and_is_undone),
          CASE(two_of_three_is_a_quorum_and_the_token_is_the_largest),
          CASE(one_of_three_with_two_other_holders_is_a_split_vote),
          CASE(one_of_three_with_one_holder_on_two_is_not_a_split),
          CASE(an_unanswered_node_may_give_a_holder_its_quorum), CASE(granted_too_late_is_not_held),
          CASE(nested_acquire_whose_outer_hold_is_gone_is_lost),
          CASE(holder_without_expiry_gives_an_unknown_sleep),
          CASE(undone_before_arrival_counts_as_no_vote_and_needs_no_undo), CASE(arithmetic),
          CASE(release_needs_a_quorum_and_is_not_held_once_no_quorum_can_say_yes),
          CASE(renewal_counts_only_in_time_and_is_lost_once_no_quorum_can_say_yes),
          CASE(a_loser_looks_again_between_the_minimum_and_the_safety_poll))
