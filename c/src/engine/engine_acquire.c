/*
 * engine_acquire.c - an acquire: tries (rounds), waiting, undo, cancel.
 *
 *   QUEUED -> ROUND -> [FLOOR] -> DONE (held)
 *               |  \-> WAIT (busy: sleep until woken, a retry time, or the
 *               |        wait's end) -> ROUND ...
 *               \-> DONE (an error, or busy with no wait left)
 *
 * Every try has a new attempt id. A try that did not end in a hold is
 * undone on every node that may have run it (said yes, or did not answer):
 * the undo names the attempt, so it is right whenever and on whatever
 * connection it arrives (docs/design/attempts.md). A cancel is a try that
 * ends early: the same undo.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "acquire_outcome.h"
#include "engine_int.h"
#include "error.h"
#include "permit_calls.h"
#include "quorum.h"
#include "scripts.h"


static void try_round(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    struct eng_lock *l = h->lock;
    op->phase = P_ROUND;
    op->attempt = eng_new_attempt(e);
    guard_lease(e, op->lease);
    round_begin(e, op, now);
    struct lock_names names = eng_names(l);
    if (kind_permits(l->kind)) {
        struct rlc_cmd *cmd = call_permits_acquire(
            &names, e->uuid, op->attempt, op->permits, op->lease,
            lock_undo_tomb_ms(op->lease, e->call_timeout_ms, e->opts.connect_timeout_ms));
        if (!cmd)
            abort();
        round_send(e, op, R_ACQUIRE, cmd->script, cmd);
        cmd_unref(cmd);
        return;
    }
    /* A waiting writer registers from its first try; a fair waiter joins
     * the queue once it has slept, so that it listens on its own channel
     * before the hand-off to it can be published. */
    bool waiting = op->wait_ms != 0 && (l->kind == RLC_KIND_WRITE ||
                                         (l->kind == RLC_KIND_FAIR && op->waited));
    op->queued = op->queued || waiting;
    struct rlc_cmd *cmd = call_acquire(&names, e->uuid, op->lease, h->field, h->field_len,
                                       op->attempt, op->outer_level, e->opts.fencing, e->n > 1,
                                       waiting);
    if (!cmd)
        abort();
    round_send(e, op, R_ACQUIRE, cmd->script, cmd);
    cmd_unref(cmd);
}

/* A writer that may have registered as waiting (try_round) leaves that
 * place when its acquire ends, or new readers would wait for a writer that
 * is gone (for LOCK_WRITER_INTENT_MS): on every node when it ends without
 * the lock, on those that did not grant when it holds it (a granting node
 * took it out already). Sent like an undo: again on a new connection until
 * answered. */
static void withdraw(rlc_engine *e, struct eng_op *op, bool held)
{
    if (!op->queued)
        return;
    op->queued = false;
    struct hold *h = op->hold;
    struct lock_names names = eng_names(h->lock);
    struct rlc_cmd *cmd = call_withdraw(&names, h->field, h->field_len);
    if (!cmd)
        abort(); /* a kind that queues has a withdraw */
    for (int i = 0; i < e->n; i++)
        if (!held || !op->granted[i])
            conn_send(e, i, h->lock, R_UNDO, NULL, cmd->script, cmd, true);
    cmd_unref(cmd);
}

/* The acquire ends with status (not RLC_OK): its DONE event, and the op is
 * done. */
static void acquire_end(rlc_engine *e, struct eng_op *op, int status, const char *msg,
                        int64_t now)
{
    withdraw(e, op, false);
    eng_event_done(e, op, status, "%s", msg);
    op_finish(e, op, now);
}

void acquire_forget_lost(rlc_engine *e, struct hold *h)
{
    /* every lost level was given up (hold_take_lost refuses an acquire
     * before): the next hold is a new one */
    (void)e;
    if (h->count == 0)
        h->lost = 0;
}

static void acquire_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    if (kind_permits(h->lock->kind)) {
        /* permits nest in nothing and are not renewed: an expirable one
         * lasts its lease, a plain one until it is given back */
        h->permits = op->permits;
        op->lease = op->lease_req > 0 ? op->lease_req : 0;
        op->wait_deadline = wait_deadline(now, op->wait_ms);
        try_round(e, op, now);
        return;
    }
    if (hold_take_lost(e, op, "acquire", false, now))
        return;
    acquire_forget_lost(e, h);
    if (h->lock->classic && h->count > 0) {
        eng_event_done(e, op, RLC_E_INVAL,
                       "lock '%s' is in the classic format, which is not reentrant: this "
                       "owner holds it already (format=redisson locks nest)",
                       RLC_SHOWN(h->lock->name));
        op_finish(e, op, now);
        return;
    }
    op->nested = h->count > 0;
    op->watchdog = op->nested ? h->watchdog : op->lease_req <= 0;
    op->lease = op->nested ? h->lease_ms
                : op->lease_req > 0 ? op->lease_req
                                    : e->opts.watchdog_timeout_ms;
    op->outer_level = op->nested && h->n_levels > 0 ? h->levels[0] : 0;
    op->wait_deadline = wait_deadline(now, op->wait_ms);
    try_round(e, op, now);
}

/* The acquire script's answer, kept past its reply (lock_calls.h). */
static void parse(struct node_reply *nr, const redisReply *r, int kind)
{
    struct acquire_answer a;
    if (kind_permits(kind) ? !answer_permits(r, &a) : !answer_acquire(r, kind, &a)) {
        nr->status = RLC_E_PROTOCOL;
        nr->err = strdup("unexpected reply to the acquire script");
        return;
    }
    nr->a = a.count;
    nr->b = a.x;
    nr->inner = a.inner;
    if (a.holder_len) {
        nr->holder = strndup(a.holder, a.holder_len);
        nr->holder_len = a.holder_len;
    }
}

/* The token counts only once a quorum stores it (fencing): the granting
 * nodes whose counter is below it get token_floor first. */
static void start_floor(rlc_engine *e, struct eng_op *op, int stored, int k, int64_t now)
{
    struct hold *h = op->hold;
    op->phase = P_FLOOR;
    op->stored = stored;
    free(op->floor_err);
    op->floor_err = NULL;
    op->floor_pending = k;
    struct lock_names names = eng_names(h->lock);
    struct rlc_cmd *cmd = call_token_floor(&names, op->token);
    if (!cmd)
        abort();
    op->round_deadline = now + e->call_timeout_ms;
    for (int i = 0; i < e->n; i++)
        if (op->granted[i] && (uint64_t)op->rep[i].b < op->token)
            op->reqs[i] = conn_send(e, i, h->lock, R_FLOOR, op, &script_token_floor, cmd, false);
    cmd_unref(cmd);
    timer_set(e, &op->timer, T_OP, op, op->round_deadline);
}

static void not_now(rlc_engine *e, struct eng_op *op, int rc, bool split, int64_t sleep_ms,
                    const char *msg, int64_t now);

/* Permits were taken (engine_permits.c has what a grant reports). An
 * expirable permit is the caller's for what is left of its lease, by the
 * lock's rule; a plain one's record goes, since no undo will name it (sent
 * like an undo: again on a new connection until answered). */
static void grant_permits(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    struct lock_names names = eng_names(h->lock);
    if (h->lock->kind == RLC_KIND_PSEMAPHORE) {
        /* > 0: the round's verdict (decide) was taken at this same now */
        op->validity_out = quorum_validity_ms(op->lease, (now - op->started) * 1000000,
                                              e->opts.drift_factor);
    } else {
        struct rlc_cmd *del = call_permits_forget(&names, e->uuid, op->attempt);
        if (!del)
            abort();
        conn_send(e, 0, h->lock, R_UNDO, NULL, NULL, del, true);
        cmd_unref(del);
        op->validity_out = -1;
    }
    op->token = op->attempt;
    op->woken = false;
    sub_leave(e, op);
    eng_event_done(e, op, RLC_OK, "%s", "");
    op_finish(e, op, now);
}

static void grant(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    if (kind_permits(h->lock->kind)) {
        grant_permits(e, op, now);
        return;
    }
    /* What a late request of this hold could still leave (a shorter lease,
     * an undo's earlier PTTL) bounds the validity; none left: not held. */
    int64_t valid_until = hold_valid_until(h, op->started, op->pos, op->granted, op->lease,
                                           e->opts.drift_factor);
    if (valid_until <= now) {
        bool all[RLC_MAX_NODES];
        for (int i = 0; i < e->n; i++)
            all[i] = true;
        send_undo(e, h, op->attempt, op->lease, all);
        char msg[300];
        if (op->nested) {
            eng_hold_lost(e, h, RLC_E_LOST);
            h->watchdog = false;
            renew_schedule(e, h);
            sub_leave(e, op);
            snprintf(msg, sizeof msg,
                     "lock '%s' was lost before this nested acquire: its lease ran out; "
                     "nothing was kept", RLC_SHOWN(h->lock->name));
            acquire_end(e, op, RLC_E_LOST, msg, now);
            return;
        }
        snprintf(msg, sizeof msg,
                 "lock '%s' was granted, but no validity was left of its %lld ms lease; "
                 "use a longer lease", RLC_SHOWN(h->lock->name), (long long)op->lease);
        not_now(e, op, RLC_NOT_ACQUIRED, false, QUORUM_MIN_RETRY_MS, msg, now);
        return;
    }
    if (!hold_push_level(h, op->attempt))
        abort();
    if (h->count == 0) {
        h->token = op->token;
        h->lease_ms = op->lease;
        h->watchdog = op->watchdog;
    }
    h->count++;
    h->renew_fail = 0;
    h->valid_until = valid_until;
    if (h->watchdog)
        h->next_renew = op->started + op->lease / 3;
    renew_schedule(e, h);
    op->validity_out = h->valid_until - now;
    op->woken = false; /* the wake that led here was used */
    sub_leave(e, op);
    withdraw(e, op, true);
    eng_event_done(e, op, RLC_OK, "%s", "");
    op_finish(e, op, now);
}

bool acquire_sleep(rlc_engine *e, struct eng_op *op, int64_t retry_ms, int64_t sleep_ms,
                   int64_t now)
{
    struct eng_lock *l = op->hold->lock;
    op->phase = P_WAIT;
    if (!op->waited)
        eng_count(e, RLC_M_WAITS); /* as it begins, as the blocking API counted it */
    op->waited = true;
    sub_join(e, op);
    op->woken = false;
    if (op->rewake) {
        /* everyone was woken while this try was out: look again now */
        op->rewake = false;
        op->woken = true;
        return true;
    }
    int64_t until = op->wait_deadline;
    op->retry_at = -1;
    /* a waiting writer's place, a fair waiter's in the queue, lapses
     * unless its tries renew it */
    int64_t keep = l->kind == RLC_KIND_FAIR ? l->thread_wait / 2 : LOCK_WRITER_INTENT_MS / 3;
    if (op->queued && (retry_ms < 0 || retry_ms > keep)) {
        retry_ms = keep > 0 ? keep : 1;
        if (sleep_ms >= 0 && sleep_ms < retry_ms)
            retry_ms = sleep_ms > 0 ? sleep_ms : 1;
    }
    if (l->classic && retry_ms != 0) {
        /* other clients free a classic lock without a message: look again
         * within the poll, or when the holder's lease ends if sooner */
        int64_t poll = CLASSIC_POLL_MS;
        if (sleep_ms >= 0 && sleep_ms < poll)
            poll = sleep_ms > 0 ? sleep_ms : 1;
        if (retry_ms < 0 || retry_ms > poll)
            retry_ms = poll;
    }
    if (retry_ms >= 0) {
        /* contenders split the vote (a random part of retry_jitter_ms, so
         * that they do not collide again in lockstep), or a multi-lock's
         * later name is busy: look again then, whatever wakes */
        int64_t at = now + retry_ms;
        op->retry_at = at;
        if (until < 0 || at < until)
            until = at;
    } else if (l->missed_wake) {
        /* a wake came while every waiter was trying: it is this one's */
        l->missed_wake = false;
        op->woken = true;
        return true;
    } else {
        sub_holder_expires(e, l, sleep_ms < 0 ? -1 : now + sleep_ms, now);
    }
    timer_set(e, &op->timer, T_OP, op, until);
    return false;
}

/* A wait rides out a cluster's migration (ASK, TRYAGAIN) and failover
 * (CLUSTERDOWN): a round that ended while its request was being
 * redirected or parked is not the caller's error while the wait has time
 * left. The try was undone as any failed try; the next one, with a new
 * attempt id, goes after a pause. When the time is up, the caller hears
 * the last round's failure, naming the slot that was moving. */
bool acquire_ride_out(rlc_engine *e, struct eng_op *op, int64_t now)
{
    int64_t pause = round_moving(op, e->n);
    if (pause < 0 || op->wait_ms == 0 ||
        (op->wait_deadline >= 0 && now + pause >= op->wait_deadline))
        return false;
    /* It sleeps without joining the lock's waiters: nothing but its retry
     * time wakes it, and a SUBSCRIBE sent now would meet the same
     * CLUSTERDOWN and be taken for a refusal. */
    op->phase = P_WAIT;
    op->woken = false;
    op->retry_at = now + pause;
    timer_set(e, &op->timer, T_OP, op, op->retry_at);
    return true;
}

/* Ends the op, or puts it to sleep when it may wait on. */
static void not_now(rlc_engine *e, struct eng_op *op, int rc, bool split, int64_t sleep_ms,
                    const char *msg, int64_t now)
{
    struct eng_lock *l = op->hold->lock;
    bool time_left = op->wait_deadline < 0 || now < op->wait_deadline;
    if (rc != RLC_NOT_ACQUIRED || op->wait_ms == 0 || !time_left) {
        sub_leave(e, op);
        char waited[300];
        if (rc == RLC_NOT_ACQUIRED && op->wait_ms != 0 && kind_permits(l->kind)) {
            snprintf(waited, sizeof waited, "%s '%s' has fewer than %lld permits free; "
                     "waited %lld ms", lock_noun(l), RLC_SHOWN(l->name),
                     (long long)op->permits, (long long)op->wait_ms);
            msg = waited;
        } else if (rc == RLC_NOT_ACQUIRED && op->wait_ms != 0) {
            snprintf(waited, sizeof waited, "lock '%s' is held by another owner; waited %lld ms",
                     RLC_SHOWN(l->name), (long long)op->wait_ms);
            msg = waited;
        }
        acquire_end(e, op, rc, msg, now);
        return;
    }
    int64_t retry_ms = split ? quorum_jitter_ms(eng_random(e), e->opts.retry_jitter_ms) : -1;
    if (acquire_sleep(e, op, retry_ms, sleep_ms, now))
        try_round(e, op, now);
}

/* The round's answers as quorum votes; returns the grants that do not
 * count for want of replicas (sync_replicas). A node restarted within the
 * longest lease votes QV_GUARDED, its phrase added to guard_msg. */
int acquire_votes(rlc_engine *e, const struct eng_op *op, int64_t now,
                  struct quorum_vote *votes, char *guard_msg, size_t size)
{
    int unsynced = 0;
    size_t guard_len = 0;
    for (int i = 0; i < e->n; i++) {
        const struct node_reply *r = &op->rep[i];
        votes[i] = (struct quorum_vote){QV_NONE, 0, false, NULL, 0};
        if (r->status != RLC_OK)
            continue;
        if (r->a >= 1 && e->opts.sync_replicas > 0 && r->synced < e->opts.sync_replicas) {
            /* granted, but not on enough replicas in time: it does not
             * count, and it is undone like a node that did not answer */
            unsynced++;
            continue;
        }
        int64_t left = r->a >= 1 ? guard_left_ms(e, i, now) : 0;
        if (left > 0) {
            /* a node that restarted within the longest lease: its yes may
             * hold the key, so it is undone, but it does not count */
            votes[i] = (struct quorum_vote){QV_GUARDED, left, false, NULL, 0};
            guard_len = guard_why(e, i, left, now, guard_msg, size, guard_len);
            continue;
        }
        votes[i].kind = r->a >= 1 ? QV_YES : r->a == 0 ? QV_BUSY : QV_UNDONE;
        votes[i].value = r->b;
        votes[i].inner = r->inner;
        votes[i].holder = r->holder;
        votes[i].holder_len = r->holder_len;
    }
    return unsynced;
}

static void decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    int n = e->n;
    struct quorum_vote votes[RLC_MAX_NODES];
    char guard_msg[300] = "";
    round_timeout(op, n);
    int unsynced = acquire_votes(e, op, now, votes, guard_msg, sizeof guard_msg);
    struct quorum_verdict vd;
    quorum_decide(votes, n, op->nested, op->lease, (now - op->started) * 1000000,
                  e->opts.drift_factor, &vd);
    /* a plain permit has no lease for the round to use up */
    if (vd.outcome == Q_LEASE_USED && h->lock->kind == RLC_KIND_SEMAPHORE)
        vd.outcome = Q_HELD;
    for (int i = 0; i < n; i++)
        op->granted[i] = votes[i].kind == QV_YES;
    /* A nested acquire of a hold declared lost while it ran is lost too:
     * the hold is no longer renewed and its LOST event has gone out (the
     * simulation found an RLC_OK here that another owner overlapped). */
    if (vd.outcome == Q_HELD && op->nested && h->lost)
        vd.outcome = Q_OUTER_LOST;
    char shown[80] = "", msg[512];
    if (vd.outcome != Q_HELD) /* a held lock needs no message */
        rlc_clip(h->lock->name, shown, sizeof shown);
    struct acquire_round ar = {shown, n, op->lease, now - op->started, unsynced,
                               e->opts.sync_replicas, e->opts.sync_timeout_ms, guard_msg};
    struct acquire_outcome out;
    acquire_outcome(&vd, &ar, msg, sizeof msg, &out);
    if (vd.outcome == Q_BUSY && kind_permits(h->lock->kind))
        snprintf(msg, sizeof msg, "%s '%s' has fewer than %lld permits free",
                 lock_noun(h->lock), shown, (long long)op->permits);
    if (vd.outcome == Q_OUTER_LOST) {
        send_undo(e, h, op->attempt, op->lease, vd.undo);
        eng_hold_lost(e, h, RLC_E_LOST);
        h->watchdog = false;
        renew_schedule(e, h);
        sub_leave(e, op);
        acquire_end(e, op, out.status, msg, now);
        return;
    }
    if (vd.outcome == Q_HELD) {
        op->token = vd.token;
        int k = 0;
        for (int i = 0; i < n; i++)
            k += op->granted[i] && (uint64_t)op->rep[i].b < vd.token;
        if (n > 1 && !op->nested && k > 0) {
            start_floor(e, op, vd.yes - k, k, now);
            return;
        }
        grant(e, op, now);
        return;
    }
    int rc = out.status ? out.status : round_fail(e, op, msg, sizeof msg);
    bool any = false;
    for (int i = 0; i < n; i++)
        any = any || vd.undo[i];
    if (any)
        send_undo(e, h, op->attempt, op->lease, vd.undo);
    if (rc != RLC_NOT_ACQUIRED && acquire_ride_out(e, op, now))
        return;
    not_now(e, op, rc, out.split, out.sleep_ms, msg, now);
}

/* Whether node i may hold this try's level: it granted, or it has not said
 * busy / undone (no answer: the acquire may still run there, late). An undo
 * after the token-floor phase must reach those nodes too, not only the
 * granting ones (the simulation found the level a late node kept). */
bool acquire_may_hold(const struct eng_op *op, int i)
{
    return op->granted[i] || !(op->rep[i].status == RLC_OK && op->rep[i].a <= 0);
}

static void floor_done(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    int64_t validity = quorum_validity_ms(op->lease, (now - op->started) * 1000000,
                                          e->opts.drift_factor);
    if (quorum_has(e->n, op->stored) && validity > 0) {
        grant(e, op, now);
        return;
    }
    bool undo[RLC_MAX_NODES];
    for (int i = 0; i < e->n; i++)
        undo[i] = acquire_may_hold(op, i);
    send_undo(e, h, op->attempt, op->lease, undo);
    char msg[400];
    if (op->floor_err) {
        /* a node refused to store it (an ACL): no later try does better */
        snprintf(msg, sizeof msg,
                 "lock '%s' was granted, but its fencing token %llu is stored on %d node(s) "
                 "only, %d needed; the acquire was undone: %s", RLC_SHOWN(h->lock->name),
                 (unsigned long long)op->token, op->stored, e->q, op->floor_err);
        free(op->floor_err);
        op->floor_err = NULL;
        not_now(e, op, RLC_E_SERVER, false, 0, msg, now);
        return;
    }
    snprintf(msg, sizeof msg,
             "lock '%s' was granted, but its fencing token could not be stored on a quorum "
             "in time (%d of %d)", RLC_SHOWN(h->lock->name), op->stored, e->q);
    not_now(e, op, RLC_NOT_ACQUIRED, false, QUORUM_MIN_RETRY_MS, msg, now);
}

static void acquire_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r, int status,
                   const char *msg, int64_t now)
{
    if (op->phase == P_FLOOR) {
        op->reqs[node] = NULL;
        if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            op->stored++;
        else if (r && r->type == REDIS_REPLY_ERROR && !op->floor_err)
            op->floor_err = strndup(r->str, 200);
        (void)status;
        (void)msg;
        if (--op->floor_pending == 0)
            floor_done(e, op, now);
        return;
    }
    const redisReply *ok = round_note(op, node, r, status, msg);
    if (ok)
        parse(&op->rep[node], ok, op->hold->lock->kind);
    if (op->answered == e->n)
        decide(e, op, now);
}

static void acquire_timer(rlc_engine *e, struct eng_op *op, int64_t now)
{
    switch (op->phase) {
    case P_ROUND:
        decide(e, op, now);
        break;
    case P_FLOOR:
        round_abandon(op);
        floor_done(e, op, now);
        break;
    case P_WAIT:
        if (op->retry_at >= 0 && now >= op->retry_at &&
            (op->wait_deadline < 0 || now < op->wait_deadline)) {
            op->woken = true;
            try_round(e, op, now);
        } else {
            not_now(e, op, RLC_NOT_ACQUIRED, false, 0, "", now);
        }
        break;
    }
}

static void acquire_wake(rlc_engine *e, struct eng_op *op, int64_t now)
{
    if (op->phase != P_WAIT) {
        /* it is trying already: if that try ran before what woke it, its
         * busy answer sends it to try again at once */
        op->woken = false;
        op->rewake = true;
        return;
    }
    timer_clear(e, &op->timer);
    try_round(e, op, now);
}

void acquire_cancel(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    if (op->phase == P_ROUND || op->phase == P_FLOOR) {
        bool undo[RLC_MAX_NODES];
        for (int i = 0; i < e->n; i++)
            undo[i] = acquire_may_hold(op, i);
        round_abandon(op);
        send_undo(e, h, op->attempt, op->lease, undo);
    }
    sub_leave(e, op);
    char msg[200];
    snprintf(msg, sizeof msg, "the acquire of lock '%s' was cancelled", RLC_SHOWN(h->lock->name));
    acquire_end(e, op, RLC_E_CANCELED, msg, now);
}

/* Ended from below (a refused SUBSCRIBE): nothing was taken while it slept. */
static void acquire_abort(rlc_engine *e, struct eng_op *op, int status, const char *why,
                          int64_t now)
{
    sub_leave(e, op);
    acquire_end(e, op, status, why, now);
}

const struct op_class op_acquire_class = {acquire_start, acquire_reply, acquire_timer,
                                          acquire_wake, acquire_abort};
