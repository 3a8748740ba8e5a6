/*
 * engine_renew.c - the watchdog: renewing watchdog holds, finding lost ones.
 *
 * A watchdog hold is renewed every lease/3 from when its last renewal (or
 * its acquire) was sent. A renewal round waits at most until the hold's
 * validity ends: a hung node must not keep a hold "valid" past the time it
 * may have expired. A hold is lost when a quorum says it is gone, or when
 * its validity ends before a renewal got a quorum; the driver hears it as an
 * RLC_EV_LOST event, once.
 *
 * A hold with a fixed lease is never renewed, but its validity ends all the
 * same: at that moment it is lost too (RLC_E_LOST), whether or not its owner
 * ever calls release. Past that point another owner may hold the lock, so
 * "held" must stop being said then, not at the owner's next call.
 */
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "quorum.h"
#include "scripts.h"

/* The renew script for one hold (KEYS lock, attempts; ARGV lease, field,
 * the id of its oldest level: it renews only the life that level is in). */
struct rlc_cmd *cmd_renew(const rlc_engine *e, const struct hold *h, int64_t lease)
{
    struct lock_names names = eng_names(h->lock);
    struct rlc_cmd *cmd = call_renew(&names, e->uuid, lease, h->field, h->field_len,
                                     h->n_levels ? h->levels[0] : 0);
    if (!cmd)
        abort();
    return cmd;
}

/* An extend of h is on its way: it renews the hold itself. A watchdog
 * renewal sent behind it would land after it and put back the watchdog's
 * lease, cutting a longer lease the extend reports (the simulation found two
 * holders that way, seed 103639). */
static bool extending(const struct hold *h)
{
    return h->ops_head && h->ops_head->kind == OP_EXTEND && h->ops_head->phase == P_ROUND;
}

void renew_schedule(rlc_engine *e, struct hold *h)
{
    int64_t at = -1;
    /* n_levels 0 with levels counted: the last level's release is on its
     * way, and the hold ends with it whatever it answers (engine_release.c);
     * it is not renewed (a renewal would name no level and find none) nor
     * reported lost (the release says what happened) */
    if (h->count > 0 && !h->lost && !h->watchdog && h->n_levels > 0) {
        at = h->valid_until; /* a fixed lease: lost when it ends */
        h->track_at = -1;
        h->track_joined = h->verify_gone = false;
    } else if (h->count > 0 && !h->lost && h->watchdog && h->n_levels > 0) {
        at = h->valid_until;
        if (!h->renewing && !extending(h) && h->next_renew < at)
            at = h->next_renew;
        /* loss push (engine_track.c): a new watchdog lock hold joins after
         * a grace (a write hold's loss is found by its renewal); a verify's
         * verdict is taken at once */
        if (!h->track_joined && h->track_at < 0 && e->track && h->lock->kind == RLC_KIND_LOCK)
            h->track_at = e->now + TRACK_GRACE_MS;
        if (h->track_at >= 0 && h->track_at < at)
            at = h->track_at;
        if (h->verify_gone)
            at = e->now;
    } else if (h->count <= 0 || h->lost) {
        /* let go: a later hold of this owner joins anew */
        h->track_at = -1;
        h->track_joined = h->verify_gone = false;
    }
    timer_set(e, &h->timer, T_HOLD, h, at);
}

static void end_renewal(rlc_engine *e, struct hold *h)
{
    struct eng_op *op = h->renewing;
    if (!op)
        return;
    h->renewing = NULL;
    round_abandon(op);
    timer_clear(e, &op->timer);
    op_free(e, op);
    (void)e;
}

static void lose(rlc_engine *e, struct hold *h, int why)
{
    bool fixed = !h->watchdog;
    end_renewal(e, h);
    eng_hold_lost(e, h, why);
    h->watchdog = false;
    renew_schedule(e, h);
    char msg[300];
    if (fixed)
        snprintf(msg, sizeof msg, "%s '%s' was lost: its lease of %lld ms ran out",
                 lock_noun(h->lock), RLC_SHOWN(h->lock->name), (long long)h->lease_ms);
    else if (why == RLC_E_LOST)
        snprintf(msg, sizeof msg, "%s '%s' was lost: it expired or was taken",
                 lock_noun(h->lock), RLC_SHOWN(h->lock->name));
    else
        snprintf(msg, sizeof msg, "%s '%s' was lost: renewals failed (%s) until its lease ran out",
                 lock_noun(h->lock), RLC_SHOWN(h->lock->name), rlc_strerror(why));
    eng_event_lost(e, h, why, msg);
}

void renew_hold_timer(rlc_engine *e, struct hold *h, int64_t now)
{
    if (h->count <= 0 || h->lost || h->n_levels == 0) {
        renew_schedule(e, h);
        return;
    }
    if (!h->watchdog) {
        /* a fixed lease: nothing renews it; it is lost when it ends */
        if (now >= h->valid_until)
            lose(e, h, RLC_E_LOST);
        else
            renew_schedule(e, h);
        return;
    }
    if (now >= h->valid_until) {
        /* Renewals failed, or one went out and its answer is late: that
         * status. None went out though one was due (the process was paused
         * past the lease, as SIGSTOP does): the lease expired on the
         * servers, it may be taken already: RLC_E_LOST, as the blocking
         * API's watchdog found it gone on waking. */
        int why = h->renew_fail ? h->renew_fail
                  : !h->renewing && !extending(h) && h->next_renew < h->valid_until ? RLC_E_LOST
                                                                   : RLC_E_TIMEOUT;
        lose(e, h, why);
        return;
    }
    if (h->verify_gone) {
        lose(e, h, RLC_E_LOST); /* a verify round found it gone (engine_track.c) */
        return;
    }
    if (h->track_at >= 0 && now >= h->track_at) {
        h->track_at = -1;
        track_join(e, h);
    }
    if (!h->renewing && !extending(h) && now >= h->next_renew) {
        struct eng_op *op = op_alloc(e);
        if (!op)
            abort();
        op->id = 0;
        op->kind = OP_RENEW;
        op->cls = &op_renew_class;
        op->hold = h;
        op->lease = h->lease_ms;
        op->timer.at = -1;
        h->renewing = op;
        op->phase = P_ROUND;
        round_begin(e, op, now);
        if (op->round_deadline > h->valid_until)
            op->round_deadline = h->valid_until;
        struct rlc_cmd *cmd = cmd_renew(e, h, op->lease);
        round_send(e, op, R_RENEW, cmd->script, cmd);
        cmd_unref(cmd);
    }
    renew_schedule(e, h);
}

static void renew_decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    int yes = 0, gone = 0;
    round_timeout(op, e->n);
    for (int i = 0; i < e->n; i++) {
        if (op->rep[i].status == RLC_OK)
            op->rep[i].a == 1 ? yes++ : gone++;
        op->granted[i] = op->rep[i].status == RLC_OK && op->rep[i].a == 1; /* counted */
    }
    char msg[300];
    int fail = quorum_has(e->n, yes) ? 0 : round_fail(e, op, msg, sizeof msg);
    int64_t started = op->started, lease = op->lease;
    /* read before the round (and where its nodes answered) is freed */
    int64_t valid_until = hold_valid_until(h, op->started, op->pos, op->granted, lease,
                                           e->opts.drift_factor);
    end_renewal(e, h);
    /* n_levels 0: the release of the last level was started while this
     * round ran, and the hold ends with it; a renewal that ran after it (a
     * NOSCRIPT re-send goes behind it) finds nothing, which is no loss */
    if (h->count <= 0 || h->lost || !h->watchdog || h->n_levels == 0) {
        renew_schedule(e, h);
        hold_maybe_free(e, h);
        return;
    }
    int end = quorum_renew_end(e->n, yes, gone, valid_until - now);
    if (end == QE_DONE || end == QE_LATE) {
        /* late (the round's deadline is the old validity, so only just):
         * the new validity has ended too, and the hold's timer, due at
         * once, loses it as an extend that came late is lost */
        h->renew_fail = 0;
        h->valid_until = valid_until;
        h->next_renew = started + lease / 3;
        if (end == QE_DONE)
            eng_count(e, RLC_M_RENEWALS);
    } else if (end == QE_NOT_HELD) {
        lose(e, h, RLC_E_LOST);
        return;
    } else {
        /* try again soon; the hold is lost if its validity ends first */
        h->renew_fail = fail;
        int64_t again = lease / 6 < 1000 ? lease / 6 : 1000;
        h->next_renew = now + (again > 10 ? again : 10);
    }
    renew_schedule(e, h);
}

static void renew_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r,
                        int status, const char *msg, int64_t now)
{
    round_note_renew(op, node, r, status, msg);
    if (op->answered == e->n)
        renew_decide(e, op, now);
}

const struct op_class op_renew_class = {NULL, renew_reply, renew_decide, NULL, NULL};
