/*
 * engine_release.c - giving a level back (release) and changing the lease
 * (extend), each one round.
 *
 * A release names the level's attempt, so running it twice does nothing
 * more: it is sent as a redo request (again on the next connection if its
 * connection drops before the answer). The owner's last level carries
 * `upto`, the newest attempt id made so far: it also takes any level of this
 * owner from an earlier attempt whose undo is late, so no level is orphaned.
 *
 * Whatever the outcome, the level is gone from the engine's side: a release
 * that got no answer may or may not have run (and goes out again), and a
 * hold no longer renewed expires with its lease, the safe direction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "quorum.h"
#include "scripts.h"

static void finish(rlc_engine *e, struct eng_op *op, int rc, const char *msg, int64_t now)
{
    eng_event_done(e, op, rc, "%s", msg);
    op_finish(e, op, now);
}

static int not_held(const struct hold *h, bool had_hold, char *msg, size_t size)
{
    if (had_hold) {
        snprintf(msg, size, "%s '%s' was lost: it expired or was taken", lock_noun(h->lock),
                 RLC_SHOWN(h->lock->name));
        return RLC_E_LOST;
    }
    snprintf(msg, size, "%s '%s' is not held by %s", lock_noun(h->lock), RLC_SHOWN(h->lock->name),
             h->field);
    return RLC_E_NOT_OWNER;
}

/* A lost hold: say so, change nothing. An acquire is refused while the
 * owner still has lost levels (A7: it would nest in a hold that is gone, and
 * the owner's releases would then free a lock it believes it holds); a
 * release gives up one lost level;
 * the last one sends what may remain of the hold a release naming every
 * level (epoch-checked: it cannot touch a later life of the lock). */
bool hold_take_lost(rlc_engine *e, struct eng_op *op, const char *verb, bool release,
                    int64_t now)
{
    struct hold *h = op->hold;
    if (!h->lost || h->count <= 0)
        return false;
    int why = h->lost;
    if (release && --h->count == 0 && h->n_levels > 0) {
        struct rlc_cmd *cmd = cmd_release(e, h, h->levels[0], eng_last_attempt(e), h->levels + 1,
                                          h->n_levels - 1);
        for (int i = 0; i < e->n; i++)
            conn_send(e, i, h->lock, R_RELEASE, NULL, cmd->script, cmd, true);
        cmd_unref(cmd);
        h->n_levels = 0;
    }
    char msg[300];
    if (why == RLC_E_LOST)
        snprintf(msg, sizeof msg,
                 "%s '%s' was lost before this %s: it expired or was taken; nothing was "
                 "changed", lock_noun(h->lock), RLC_SHOWN(h->lock->name), verb);
    else
        snprintf(msg, sizeof msg,
                 "%s '%s' was lost before this %s: renewals failed (%s) until its lease "
                 "ran out; nothing was changed", lock_noun(h->lock), RLC_SHOWN(h->lock->name),
                 verb, rlc_strerror(why));
    finish(e, op, RLC_E_LOST, msg, now);
    return true;
}

static void release_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    if (hold_take_lost(e, op, "release", true, now))
        return;
    /* Not held here: the servers still say (a wrong type, a level of an
     * acquire whose undo is late: the release takes it, upto), as the
     * blocking API always did. */
    op->had_hold = h->count > 0;
    op->level = op->had_hold ? hold_pop_level(h) : 0;
    uint64_t upto = h->count <= 1 ? eng_last_attempt(e) : 0;
    /* a tombstone the release writes lives this lease and a minute more */
    op->lease = op->had_hold ? h->lease_ms : e->opts.watchdog_timeout_ms;
    op->phase = P_ROUND;
    round_begin(e, op, now);
    struct rlc_cmd *cmd = cmd_release(e, h, op->level, upto, NULL, 0);
    round_send(e, op, R_RELEASE, cmd->script, cmd);
    cmd_unref(cmd);
}

static void release_decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    int done = 0, refused = 0, freed = 0;
    round_timeout(op, e->n);
    for (int i = 0; i < e->n; i++) {
        if (op->rep[i].status != RLC_OK)
            continue;
        op->rep[i].a == -1 ? refused++ : done++;
        freed += op->rep[i].b == 1;
    }
    /* unanswered releases stay queued as redo requests; nobody waits for them */
    round_abandon(op);
    char msg[512] = "";
    int rc, end = quorum_release_end(e->n, done, refused);
    if (end == QE_DONE)
        rc = RLC_OK;
    else if (end == QE_NOT_HELD)
        rc = not_held(h, op->had_hold, msg, sizeof msg);
    else
        rc = round_fail(e, op, msg, sizeof msg);
    h->count--;
    if (rc == RLC_E_LOST)
        eng_hold_lost(e, h, RLC_E_LOST);
    if (h->count <= 0) {
        h->count = 0;
        h->watchdog = false;
        h->n_levels = 0;
        renew_schedule(e, h);
    }
    /* our own waiters hear of it now, not a message's round trip later;
     * the messages of this release then wake nobody more (engine_sub.c). A
     * write release's message (1) wakes every reader of the channel, so
     * those are woken at once (and again by it). */
    if (quorum_has(e->n, freed) && h->lock->kind == RLC_KIND_WRITE)
        sub_wake_readers(e, h->lock, now);
    if (quorum_has(e->n, freed) && h->lock->waiters) {
        h->lock->own_msgs += freed;
        sub_wake_one(e, h->lock, now);
    }
    finish(e, op, rc, msg, now);
}

static void release_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r, int status,
                   const char *msg, int64_t now)
{
    const redisReply *ok = round_note(op, node, r, status, msg);
    bool freed = false;
    if (ok && answer_release(ok, &op->rep[node].a, &freed)) {
        op->rep[node].b = freed;
    } else if (ok) {
        op->rep[node].status = RLC_E_PROTOCOL;
        op->rep[node].err = strdup("unexpected reply to the release script");
    }
    if (op->answered == e->n)
        release_decide(e, op, now);
}



/* ---- extend ---------------------------------------------------------------- */

static void extend_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    if (hold_take_lost(e, op, "extend", false, now))
        return;
    if (h->count <= 0) {
        char msg[200];
        int rc = not_held(h, false, msg, sizeof msg);
        finish(e, op, rc, msg, now);
        return;
    }
    op->had_hold = true;
    op->watchdog = op->lease_req <= 0;
    op->lease = op->watchdog ? e->opts.watchdog_timeout_ms : op->lease_req;
    op->phase = P_ROUND;
    round_begin(e, op, now);
    struct rlc_cmd *cmd = cmd_renew(e, h, op->lease);
    round_send(e, op, R_EXTEND, cmd->script, cmd);
    cmd_unref(cmd);
}

static void extend_decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    int yes = 0, gone = 0;
    round_timeout(op, e->n);
    round_abandon(op);
    op->phase = P_DONE; /* renew_schedule: no longer extending */
    for (int i = 0; i < e->n; i++) {
        if (op->rep[i].status == RLC_OK)
            op->rep[i].a == 1 ? yes++ : gone++;
        op->granted[i] = op->rep[i].status == RLC_OK && op->rep[i].a == 1; /* counted */
    }
    char msg[512] = "";
    int rc;
    int64_t valid_until = hold_valid_until(h, op->started, op->pos, op->granted, op->lease,
                                           e->opts.drift_factor);
    int end = quorum_renew_end(e->n, yes, gone, valid_until - now);
    if (h->lost) {
        /* its validity ran out while the extend was on its way (the LOST
         * event was given then): another owner may have held it since, so
         * a renewal that came later cannot make it held again */
        snprintf(msg, sizeof msg,
                 "lock '%s' was lost before the extend's answers came: its validity ran out",
                 RLC_SHOWN(h->lock->name));
        rc = RLC_E_LOST;
    } else if (end == QE_LATE) {
        /* a quorum renewed it, but the answers came after that lease ran out
         * (a slow round, a paused process): it is not certainly held, and
         * RLC_OK would hand out a negative validity (found by the simulation) */
        snprintf(msg, sizeof msg,
                 "lock '%s' was lost: the extend's answers came after its %lld ms lease "
                 "(less the drift allowance) ran out (%lld ms late)", RLC_SHOWN(h->lock->name),
                 (long long)op->lease, (long long)(now - valid_until));
        rc = RLC_E_LOST;
        eng_hold_lost(e, h, RLC_E_LOST);
        h->watchdog = false;
        renew_schedule(e, h);
    } else if (end == QE_DONE) {
        rc = RLC_OK;
        h->lease_ms = op->lease;
        h->watchdog = op->watchdog;
        h->renew_fail = 0;
        h->valid_until = valid_until;
        if (h->watchdog)
            h->next_renew = op->started + op->lease / 3;
        renew_schedule(e, h);
        op->validity_out = h->valid_until - now;
    } else if (end == QE_NOT_HELD) {
        rc = not_held(h, true, msg, sizeof msg);
        eng_hold_lost(e, h, RLC_E_LOST);
        h->watchdog = false;
        renew_schedule(e, h);
    } else {
        rc = round_fail(e, op, msg, sizeof msg);
    }
    if (rc != RLC_OK && h->count > 0 && !h->lost && valid_until < h->valid_until) {
        /* a shorter lease may have been set on some nodes, now or later
         * (a request that did not answer may still run): the hold is
         * certain only as long as that lease from the extend's start */
        h->valid_until = valid_until;
        renew_schedule(e, h);
    }
    renew_schedule(e, h); /* renewals waited while the extend ran */
    finish(e, op, rc, msg, now);
}

static void extend_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r, int status,
                  const char *msg, int64_t now)
{
    round_note_renew(op, node, r, status, msg);
    if (op->answered == e->n)
        extend_decide(e, op, now);
}

const struct op_class op_release_class = {release_start, release_reply, release_decide, NULL,
                                          NULL};
const struct op_class op_extend_class = {extend_start, extend_reply, extend_decide, NULL, NULL};
