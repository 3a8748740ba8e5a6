/*
 * engine_multi.c - a multi-lock's acquire: every name or none.
 *
 *   QUEUED -> GATHER (until it heads every name's queue) -> ROUND -> DONE (held)
 *                                                            |  \-> WAIT -> ROUND ...
 *                                                            \-> DONE (error, busy)
 *
 * Places. An op acts on one hold at a time (E6); a multi-lock acts on one
 * hold per name. Its op sits in its first name's queue and a member op
 * (OP_MEMBER, which sends nothing) keeps its place in each other name's
 * queue; the first round starts once the op and every member op head their
 * queues. All the places are taken in one engine call, names in key
 * order, so two ops that share names stand in the same order in every
 * queue they share: no two wait for each other (M1, docs/design/multilock.md).
 *
 * A round is one script per node over every name (script_multi_acquire:
 * all granted or none written, on that node), one attempt id, and a TTL
 * mark on every name's hold (E8: the script sets every key's TTL to the
 * round's lease). Its verdict is quorum_decide's as for one name, with no
 * token. A try that does not hold is undone name by name, by attempt (the
 * acquire's undo), on every node that may have run it. A grant gives every
 * name's hold one level; from then on each name is held, renewed, released,
 * verified and lost on its own, as any hold.
 *
 * It sleeps among its first name's waiters (that name's unlock message
 * wakes it, in its turn), and each member op watches its own name's
 * channel: an unlock message there wakes the multi-lock too, without
 * taking that name's waiter's turn (sub_wake_one). A later name found busy
 * is also looked at again when its holder's lease ends, at the latest
 * after the safety poll (a message lost with a connection).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "acquire_outcome.h"
#include "engine_int.h"
#include "error.h"
#include "quorum.h"
#include "scripts.h"

static bool all_placed(const struct eng_op *op)
{
    if (!op->at_head)
        return false;
    for (int i = 1; i < op->n_members; i++)
        if (!op->places[i]->at_head)
            return false;
    return true;
}

static void try_round(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    op->phase = P_ROUND;
    op->busy_later = op->later_msg = false;
    op->attempt = eng_new_attempt(e);
    guard_lease(e, op->lease);
    round_begin(e, op, now);
    op->outer_gone = 0;
    struct lock_names *names = malloc(sizeof *names * (size_t)op->n_members);
    uint64_t *outer = malloc(sizeof *outer * (size_t)op->n_members);
    if (!names || !outer)
        abort();
    op->nested = false;
    for (int i = 0; i < op->n_members; i++) {
        const struct hold *m = op->members[i];
        names[i] = eng_names(m->lock);
        /* a name the owner holds: the script says if that level is still
         * in this life of its lock (the acquire's "inner", per name) */
        outer[i] = m->count > 0 && m->n_levels > 0 ? m->levels[0] : 0;
        op->nested = op->nested || outer[i];
    }
    struct rlc_cmd *cmd = call_multi_acquire(op->n_members, names, e->uuid, op->lease, h->field,
                                             h->field_len, op->attempt, outer,
                                             e->opts.fencing);
    free(names);
    free(outer);
    if (!cmd)
        abort();
    round_send(e, op, R_ACQUIRE, cmd->script, cmd); /* marks the first name */
    cmd_unref(cmd);
    for (int i = 1; i < op->n_members; i++)
        for (int k = 0; k < e->n; k++)
            hold_mark_ttl(op->members[i], op->reqs[k], op->lease);
}

static void end(rlc_engine *e, struct eng_op *op, int status, const char *msg, int64_t now);

/* Every place is taken: what the names' holds say, then the first try. A
 * name whose hold is lost with levels not yet released refuses it, as a
 * plain acquire is refused (A7): it would nest in a hold that is gone. */
static void begin(rlc_engine *e, struct eng_op *op, int64_t now)
{
    for (int i = 0; i < op->n_members; i++) {
        struct hold *h = op->members[i];
        if (h->lost && h->count > 0) {
            char msg[300];
            snprintf(msg, sizeof msg,
                     "lock '%s' was lost before this multi-lock acquire: it expired or was "
                     "taken; nothing was changed", RLC_SHOWN(h->lock->name));
            end(e, op, RLC_E_LOST, msg, now);
            return;
        }
    }
    for (int i = 0; i < op->n_members; i++) {
        struct hold *h = op->members[i];
        if (h->lock->classic && h->count > 0 && !h->lost) {
            char msg[300];
            snprintf(msg, sizeof msg,
                     "lock '%s' is in the classic format, which is not reentrant: this owner "
                     "holds it already", RLC_SHOWN(h->lock->name));
            end(e, op, RLC_E_INVAL, msg, now);
            return;
        }
    }
    for (int i = 0; i < op->n_members; i++)
        acquire_forget_lost(e, op->members[i]);
    op->watchdog = op->lease_req <= 0;
    op->lease = op->lease_req > 0 ? op->lease_req : e->opts.watchdog_timeout_ms;
    op->wait_deadline = wait_deadline(now, op->wait_ms);
    try_round(e, op, now);
}

static void multi_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    op->at_head = true;
    op->phase = P_GATHER;
    if (all_placed(op))
        begin(e, op, now);
}

static void member_start(rlc_engine *e, struct eng_op *m, int64_t now)
{
    m->at_head = true;
    m->phase = P_GATHER;
    struct eng_op *op = m->multi;
    if (op->phase == P_GATHER && all_placed(op))
        begin(e, op, now);
}

/* Ends op and gives up its places (the next op of each queue starts). */
static void finish(rlc_engine *e, struct eng_op *op, int64_t now)
{
    int n = op->n_members;
    struct eng_op **places = op->places;
    op->places = NULL;
    op_finish(e, op, now);
    for (int i = 1; i < n; i++)
        op_finish(e, places[i], now);
    free(places);
}

static void undo_names(rlc_engine *e, struct eng_op *op, const bool *which)
{
    for (int i = 0; i < op->n_members; i++)
        send_undo(e, op->members[i], op->attempt, op->lease, which);
}

static void end(rlc_engine *e, struct eng_op *op, int status, const char *msg, int64_t now)
{
    sub_leave(e, op);
    eng_event_done(e, op, status, "%s", msg);
    finish(e, op, now);
}

/* Ends the op, or puts it to sleep when it may wait on. */
static void not_now(rlc_engine *e, struct eng_op *op, int rc, bool split, int64_t sleep_ms,
                    const char *msg, int64_t now)
{
    struct eng_lock *l = op->hold->lock;
    bool time_left = op->wait_deadline < 0 || now < op->wait_deadline;
    if (rc != RLC_NOT_ACQUIRED || op->wait_ms == 0 || !time_left) {
        char why[400];
        if (rc == RLC_NOT_ACQUIRED && op->wait_ms != 0)
            snprintf(why, sizeof why,
                     "multi-lock of %d names from '%s' is held by another owner; waited "
                     "%lld ms", op->n_members, RLC_SHOWN(l->name), (long long)op->wait_ms);
        else
            snprintf(why, sizeof why, "%s", msg);
        end(e, op, rc, why, now);
        return;
    }
    /* a later name's holder sends no message here: look again when its
     * lease would end */
    int64_t retry_ms = split ? quorum_jitter_ms(eng_random(e), e->opts.retry_jitter_ms)
                       : op->busy_later ? quorum_retry_ms(sleep_ms)
                                        : -1;
    if (op->later_msg)
        retry_ms = 0; /* a later name was freed while this round ran */
    for (int i = 1; i < op->n_members; i++) { /* watch every later name too */
        struct eng_op *m = op->places[i];
        if (m->waiting)
            m->woken = false;
        else
            sub_join(e, m);
    }
    if (acquire_sleep(e, op, retry_ms, sleep_ms, now))
        try_round(e, op, now);
}

/* Every name's hold gets the round's level, or none does. */
static void grant(rlc_engine *e, struct eng_op *op, int64_t now)
{
    int64_t least = INT64_MAX;
    int lost = -1;
    for (int i = 0; i < op->n_members; i++) {
        const struct hold *h = op->members[i];
        int64_t v = hold_valid_until(h, op->started, op->pos, op->granted, op->lease,
                                     e->opts.drift_factor);
        if (v < least)
            least = v;
        if (h->lost && lost < 0)
            lost = i; /* a level it already had was lost while this ran */
    }
    if (least <= now || lost >= 0) {
        bool all[RLC_MAX_NODES];
        for (int k = 0; k < e->n; k++)
            all[k] = true;
        undo_names(e, op, all);
        char msg[300];
        if (lost >= 0) {
            snprintf(msg, sizeof msg,
                     "lock '%s' was lost while this multi-lock acquire ran; nothing was "
                     "kept", RLC_SHOWN(op->members[lost]->lock->name));
            end(e, op, RLC_E_LOST, msg, now);
            return;
        }
        snprintf(msg, sizeof msg,
                 "multi-lock from '%s' was granted, but no validity was left of its %lld ms "
                 "lease; use a longer lease", RLC_SHOWN(op->hold->lock->name), (long long)op->lease);
        not_now(e, op, RLC_NOT_ACQUIRED, false, QUORUM_MIN_RETRY_MS, msg, now);
        return;
    }
    for (int i = 0; i < op->n_members; i++) {
        struct hold *h = op->members[i];
        if (!hold_push_level(h, op->attempt))
            abort();
        if (h->count == 0) {
            h->token = 0; /* a multi-lock takes no fencing token */
            h->lease_ms = op->lease;
            h->watchdog = op->watchdog;
        }
        h->count++;
        h->renew_fail = 0;
        /* the script set this key's TTL to the round's lease, whatever the
         * hold's own: its validity and next renewal follow that */
        h->valid_until = hold_valid_until(h, op->started, op->pos, op->granted, op->lease,
                                          e->opts.drift_factor);
        if (h->watchdog)
            h->next_renew = op->started + (op->lease < h->lease_ms ? op->lease : h->lease_ms) / 3;
        renew_schedule(e, h);
    }
    op->validity_out = least - now;
    op->woken = false;
    end(e, op, RLC_OK, "", now);
}

/* A name it nests in is no longer the owner's (its lease ran out, the key
 * went): that hold is lost, and this try, which started a new life of the
 * lock there, is undone everywhere it may have run. */
static void outer_lost(rlc_engine *e, struct eng_op *op, const bool *undo, int64_t now)
{
    undo_names(e, op, undo);
    int at = op->outer_gone > 0 && op->outer_gone <= op->n_members ? op->outer_gone - 1 : -1;
    char msg[300];
    snprintf(msg, sizeof msg,
             "lock '%s' was lost before this multi-lock acquire: its lease ran out; nothing "
             "was kept", RLC_SHOWN(op->members[at < 0 ? 0 : at]->lock->name));
    for (int i = 0; i < op->n_members; i++) {
        struct hold *h = op->members[i];
        if (h->count > 0 && !h->lost && (at < 0 || i == at)) {
            eng_hold_lost(e, h, RLC_E_LOST);
            h->watchdog = false;
            renew_schedule(e, h); /* told by the DONE, as a nested acquire's loss is */
        }
    }
    end(e, op, RLC_E_LOST, msg, now);
}

static void decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    int n = e->n;
    struct quorum_vote votes[RLC_MAX_NODES];
    char guard_msg[300] = "";
    round_timeout(op, n);
    int unsynced = acquire_votes(e, op, now, votes, guard_msg, sizeof guard_msg);
    struct quorum_verdict vd;
    quorum_decide(votes, n, op->nested, op->lease, (now - op->started) * 1000000,
                  e->opts.drift_factor, &vd);
    for (int i = 0; i < n; i++)
        op->granted[i] = votes[i].kind == QV_YES;
    if (vd.outcome == Q_OUTER_LOST) {
        outer_lost(e, op, vd.undo, now);
        return;
    }
    if (vd.outcome == Q_HELD) {
        grant(e, op, now);
        return;
    }
    char shown[80], msg[512];
    rlc_clip(op->hold->lock->name, shown, sizeof shown);
    struct acquire_round ar = {shown, n, op->lease, now - op->started, unsynced,
                               e->opts.sync_replicas, e->opts.sync_timeout_ms, guard_msg};
    struct acquire_outcome out;
    acquire_outcome(&vd, &ar, msg, sizeof msg, &out);
    int rc = out.status ? out.status : round_fail(e, op, msg, sizeof msg);
    bool any = false;
    for (int i = 0; i < n; i++)
        any = any || vd.undo[i];
    if (any)
        undo_names(e, op, vd.undo);
    if (rc != RLC_NOT_ACQUIRED && acquire_ride_out(e, op, now))
        return;
    not_now(e, op, rc, out.split, out.sleep_ms, msg, now);
}

static void multi_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r,
                        int status, const char *msg, int64_t now)
{
    const redisReply *ok = round_note(op, node, r, status, msg);
    struct acquire_answer a;
    if (ok && answer_acquire(ok, RLC_KIND_LOCK, &a)) {
        int named = answer_multi_name(ok);
        op->rep[node].a = a.count;
        op->rep[node].b = a.count >= 1 ? 0 : a.x;
        op->rep[node].inner = a.count >= 1 && named == 0;
        op->busy_later = op->busy_later || (a.count == 0 && named > 1);
        if (a.count >= 1 && named > 0 && !op->outer_gone)
            op->outer_gone = named;
    } else if (ok) {
        op->rep[node].status = RLC_E_PROTOCOL;
        op->rep[node].err = strdup("unexpected reply to the multi-lock script");
    }
    if (op->answered == e->n)
        decide(e, op, now);
}

static void multi_timer(rlc_engine *e, struct eng_op *op, int64_t now)
{
    if (op->phase == P_ROUND) {
        decide(e, op, now);
    } else if (op->phase == P_WAIT) {
        if (op->retry_at >= 0 && now >= op->retry_at &&
            (op->wait_deadline < 0 || now < op->wait_deadline)) {
            op->woken = true;
            try_round(e, op, now);
        } else {
            not_now(e, op, RLC_NOT_ACQUIRED, false, 0, "", now);
        }
    }
}

static void multi_wake(rlc_engine *e, struct eng_op *op, int64_t now)
{
    if (op->phase != P_WAIT) {
        op->woken = false;
        return;
    }
    timer_clear(e, &op->timer);
    try_round(e, op, now);
}

void multi_cancel(rlc_engine *e, struct eng_op *op, int64_t now)
{
    if (op->phase == P_ROUND) {
        bool undo[RLC_MAX_NODES];
        for (int k = 0; k < e->n; k++)
            undo[k] = acquire_may_hold(op, k);
        round_abandon(op);
        undo_names(e, op, undo);
    }
    char msg[200];
    snprintf(msg, sizeof msg, "the acquire of multi-lock from '%s' was cancelled",
             RLC_SHOWN(op->hold->lock->name));
    end(e, op, RLC_E_CANCELED, msg, now);
}

static void multi_abort(rlc_engine *e, struct eng_op *op, int status, const char *why,
                        int64_t now)
{
    end(e, op, status, why, now);
}

/* An unlock message of a later name: the multi-lock tries again if it
 * sleeps (and is then not woken again by its first name's messages until
 * it sleeps again: acquire_sleep). The member keeps watching. */
static void member_wake(rlc_engine *e, struct eng_op *m, int64_t now)
{
    struct eng_op *op = m->multi;
    m->woken = false;
    if (op->phase == P_WAIT && !op->woken) {
        op->woken = true;
        multi_wake(e, op, now);
    } else if (op->phase == P_ROUND) {
        op->later_msg = true;
    }
}

/* A member op sends nothing: only its start and its name's unlock messages
 * count. */
static void member_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r,
                         int status, const char *msg, int64_t now)
{
    (void)e, (void)op, (void)node, (void)r, (void)status, (void)msg, (void)now;
}

static void member_timer(rlc_engine *e, struct eng_op *op, int64_t now)
{
    (void)e, (void)op, (void)now;
}

static void member_abort(rlc_engine *e, struct eng_op *op, int status, const char *why,
                         int64_t now)
{
    (void)e, (void)op, (void)status, (void)why, (void)now;
}

const struct op_class op_multi_class = {multi_start, multi_reply, multi_timer, multi_wake,
                                        multi_abort};
const struct op_class op_member_class = {member_start, member_reply, member_timer, member_wake,
                                         member_abort};

int multi_new(rlc_engine *e, struct eng_lock *const *locks, int n, uint64_t owner,
              uint64_t *id, struct eng_op **out)
{
    struct eng_op *op = op_alloc(e);
    if (op) {
        op->members = calloc((size_t)n, sizeof *op->members);
        op->places = calloc((size_t)n, sizeof *op->places);
    }
    bool ok = op && op->members && op->places;
    for (int i = 0; ok && i < n; i++) {
        ok = (op->members[i] = hold_get(e, locks[i], owner, true)) != NULL;
        if (ok && i > 0)
            ok = (op->places[i] = op_alloc(e)) != NULL;
    }
    if (!ok) {
        for (int i = 0; op && op->members && i < n; i++) {
            if (op->places && op->places[i])
                free(op->places[i]);
            if (op->members[i])
                hold_maybe_free(e, op->members[i]);
        }
        if (op)
            op_free(e, op);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    op->id = ++e->next_op;
    op->kind = OP_MULTI;
    op->cls = &op_multi_class;
    op->hold = op->members[0];
    op->n_members = n;
    op->idnext = e->ops_by_id[op_id_slot(op->id)];
    e->ops_by_id[op_id_slot(op->id)] = op;
    round_clear(op);
    for (int i = 1; i < n; i++) {
        struct eng_op *m = op->places[i];
        m->kind = OP_MEMBER;
        m->cls = &op_member_class;
        m->hold = op->members[i];
        m->multi = op;
        round_clear(m);
    }
    e->n_ops += n;
    *id = op->id;
    *out = op;
    return RLC_OK;
}
