/*
 * lock_acquire.c - rlc_lock_acquire: one try on every node, and the wait on
 * the lock's channel between tries; rlc_lock_cancel, which ends that wait.
 *
 * A lock that was not certainly taken is undone: after a failed Redlock
 * round, and after a single node timed out, the undo script goes to every
 * node that may have said yes. It travels on the same connection behind the
 * acquire, so it usually lands right after it.
 */
#include <stdlib.h>
#include <string.h>

#include "acquire_outcome.h"
#include "cancel.h"
#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "fanout.h"
#include "fence.h"
#include "hold.h"
#include "lock_common.h"
#include "metrics.h"
#include "pubsub.h"
#include "quorum.h"
#include "restart_guard.h"
#include "scripts.h"

struct attempt {
    int64_t sleep_ms; /* busy: when enough holders' leases end for a quorum; -1 unknown */
    bool split;       /* we got votes but not a quorum, and no other owner can have one */
};

/* Records a granted acquisition in h (under mu). Returns whether the
 * watchdog thread must wake up to renew it in time. */
static bool record_grant(rlc_client *c, struct hold *h, bool watchdog, int64_t lease,
                         uint64_t token, int64_t started_ns)
{
    if (h->count == 0) {
        h->token = token;
        h->lease_ms = lease;
        h->late_lease_ms = 0; /* a new level: late requests of an old one name theirs */
        hold_set_watchdog(c, h, watchdog);
    }
    h->count++;
    int64_t claim = hold_claim_lease(h, lease);
    int64_t valid_ms = claim - quorum_drift_ms(claim, c->opts.drift_factor);
    h->valid_until_ns = started_ns + valid_ms * RLC_NS_PER_MS;
    if (!h->watchdog)
        return false;
    h->next_renew_ns = started_ns + claim * RLC_NS_PER_MS / 3;
    return h->next_renew_ns < c->watchdog_wake_ns;
}

/* Undoes attempt on each node that may have run it. The undo names the
 * attempt, so it is right whenever and on whatever connection it arrives:
 * it takes back the level if the acquire ran, and stops the acquire if it
 * has not run yet (scripts.c). It still rides behind the acquire on the
 * owner's connection, so it usually lands right after it. */
static void undo_attempt(rlc_lock *l, uint64_t owner, const char *field, uint64_t attempt,
                         int64_t lease, const bool *which)
{
    rlc_client *c = l->client;
    struct lock_names names = lock_names_of(l);
    struct rlc_cmd *cmd = call_undo(
        &names, c->uuid, attempt, field, strlen(field),
        lock_undo_tomb_ms(lease, c->call_timeout_ms, c->opts.connect_timeout_ms));
    fanout_detached(c, owner, cmd, &script_undo, which, true);
    cmd_unref(cmd);
}

static int canceled(const rlc_lock *l)
{
    char name[80];
    return rlc_fail(RLC_E_CANCELED, "acquire of lock '%s' was cancelled (rlc_lock_cancel); "
                    "nothing was kept", lock_shown(l, name, sizeof name));
}

/* Sends WAIT sync_replicas sync_timeout_ms to the nodes that granted (on
 * the owner's connection, so it counts that acquire's write); a node whose
 * answer is short, or missing, is taken off granted[]. Returns how many. */
static int sync_replicas_check(rlc_client *c, uint64_t owner, bool *granted, int n)
{
    char nrep[24], tmo[24];
    const char *argv[3] = {"WAIT", nrep, tmo};
    size_t lens[3] = {4, cmd_i64(nrep, c->opts.sync_replicas),
                      cmd_i64(tmo, c->opts.sync_timeout_ms)};
    struct rlc_cmd *cmd = cmd_format(3, argv, lens);
    struct fanout w;
    fanout_run(c, owner, cmd, NULL, &w);
    int unsynced = 0;
    for (int i = 0; i < n; i++) {
        const redisReply *r = fanout_reply(&w, i);
        if (granted[i] && !(r && r->type == REDIS_REPLY_INTEGER &&
                            r->integer >= c->opts.sync_replicas)) {
            granted[i] = false;
            unsynced++;
        }
    }
    fanout_clear(&w);
    if (cmd)
        cmd_unref(cmd);
    return unsynced;
}

static int try_acquire(rlc_lock *l, uint64_t owner, const char *field, int64_t lease_req,
                       const struct cancel_point *cp, struct attempt *a)
{
    rlc_client *c = l->client;
    int n = c->n_nodes;

    /* The hold is registered before sending, as an acquire in flight. A
     * nested acquire keeps the mode and lease of the hold it nests in. */
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find(l, owner);
    if (h && h->lost) {
        hold_drop(c, h);
        h = NULL;
    }
    if (!h && !(h = hold_create(l, owner))) {
        pthread_mutex_unlock(&c->mu);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    struct hold *outer = hold_find_levels(c, l, owner);
    bool nested = outer && !outer->lost && outer->count > 0;
    bool watchdog = nested ? outer->watchdog : lease_req <= 0;
    int64_t lease = nested ? outer->lease_ms
                    : lease_req > 0 ? lease_req
                                    : c->opts.watchdog_timeout_ms;
    uint64_t hold_id = h->id;
    uint64_t outer_id = nested ? outer->id : 0;
    uint64_t outer_level = nested && outer->n_attempts > 0 ? outer->attempts[0] : 0;
    uint64_t attempt = client_new_attempt(c);
    h->pending++;
    pthread_mutex_unlock(&c->mu);

    struct lock_names names = lock_names_of(l);
    struct rlc_cmd *cmd =
        call_acquire(&names, c->uuid, lease, field, strlen(field), attempt, outer_level);
    struct fanout f;
    /* Restart guard: INFO server rides ahead of the acquire (restart_guard.c). */
    struct mux_req *info[RLC_MAX_NODES] = {NULL};
    bool guarded[RLC_MAX_NODES] = {false};
    char guard_why[512] = "";
    int64_t guard_wait_ms = 0;
    bool guard = n > 1 && restart_guard_on(c);
    if (guard)
        restart_guard_send(c, owner, info);
    fanout_run(c, owner, cmd, &script_acquire, &f);
    if (guard)
        restart_guard_collect(c, info, lease, guarded, guard_why, sizeof guard_why,
                              &guard_wait_ms);
    int64_t elapsed_ns = rlc_now_ns() - f.started_ns;
    /* Each node's answer as a vote; quorum_decide (quorum.c, shared with the
     * engine) gives the verdict. A guarded node's yes (restart guard) may
     * hold the key, so it is undone, but it does not count (QV_GUARDED). */
    struct quorum_vote votes[RLC_MAX_NODES];
    struct acquire_answer replies[RLC_MAX_NODES];
    uint64_t tokens[RLC_MAX_NODES];
    bool granted[RLC_MAX_NODES];
    int granting = 0;
    for (int i = 0; i < n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        struct acquire_answer *ar = &replies[i];
        votes[i] = (struct quorum_vote){QV_NONE, 0, false, NULL, 0};
        granted[i] = false;
        if (!r || !answer_acquire(r, ar))
            continue;
        if (ar->count >= 1 && guarded[i]) {
            votes[i] = (struct quorum_vote){QV_GUARDED, guard_wait_ms, false, NULL, 0};
            continue;
        }
        votes[i].kind = ar->count >= 1 ? QV_YES : ar->count == 0 ? QV_BUSY : QV_UNDONE;
        votes[i].value = ar->x;
        votes[i].inner = ar->inner;
        votes[i].holder = ar->holder;
        votes[i].holder_len = ar->holder_len;
        granted[i] = votes[i].kind == QV_YES;
        tokens[i] = (uint64_t)ar->x;
        granting += granted[i];
    }

    /* sync_replicas: a grant counts only once WAIT says enough replicas have
     * it; WAIT goes on the owner's connection, right behind the acquire */
    int unsynced = 0;
    if (c->opts.sync_replicas > 0 && granting > 0) {
        unsynced = sync_replicas_check(c, owner, granted, n);
        for (int i = 0; i < n; i++)
            if (votes[i].kind == QV_YES && !granted[i])
                votes[i].kind = QV_NONE; /* not counted, undone */
        elapsed_ns = rlc_now_ns() - f.started_ns;
    }

    struct quorum_verdict vd;
    quorum_decide(votes, n, nested, lease, elapsed_ns, c->opts.drift_factor, &vd);
    uint64_t token = vd.token;
    const bool *undo = vd.undo;

    int rc;
    bool wake = false;
    char name[80], msg[RLC_ERRLEN];
    /* a held lock needs no message: its name is not copied on that path */
    const char *shown = vd.outcome == Q_HELD ? "" : lock_shown(l, name, sizeof name);
    struct acquire_round ar = {shown, n, lease, elapsed_ns / RLC_NS_PER_MS, unsynced,
                               c->opts.sync_replicas, c->opts.sync_timeout_ms, guard_why};
    struct acquire_outcome out;
    acquire_outcome(&vd, &ar, msg, sizeof msg, &out);
    /* outer lost: the hold this nests in is gone from a quorum (it expired);
     * this acquire made a new hold there, undone below (acquire_outcome.c) */
    bool outer_lost = vd.outcome == Q_OUTER_LOST;
    if (vd.outcome == Q_HELD) {
        rc = RLC_OK;
        /* A new hold's token counts only once a quorum stores it (fence.c);
         * the round that stores it is part of the acquire's elapsed time. */
        int64_t done_ns;
        if (n > 1 && !nested &&
            (rc = fence_store_token(l, owner, tokens, granted, token, &done_ns)) == RLC_OK &&
            quorum_validity_ms(lease, done_ns - f.started_ns, c->opts.drift_factor) <= 0)
            rc = rlc_fail(RLC_NOT_ACQUIRED,
                          "lock '%s' was granted, but its %lld ms lease was used up while its "
                          "fencing token was stored; use a longer lease",
                          lock_shown(l, name, sizeof name), (long long)lease);
        if (rc != RLC_OK) {
            a->split = false;
            a->sleep_ms = 0;
        }
    } else if (out.status != 0) {
        rc = rlc_fail(out.status, "%s", msg);
        a->split = out.split;
        a->sleep_ms = out.sleep_ms;
    } else {
        rc = fanout_fail(c, &f, l->key);
    }
    /* Cancelled while this try was on the wire: a grant is not kept, but
     * undone below like a failed round (undo[] names the nodes that said
     * yes), because the canceller was told the acquire ends without it. */
    if ((rc == RLC_OK || rc == RLC_NOT_ACQUIRED) && cancel_requested(cp))
        rc = canceled(l);

    pthread_mutex_lock(&c->mu);
    h = hold_find(l, owner);
    if (h && h->id == hold_id)
        h->pending--;
    if (rc == RLC_OK && !h && !(h = hold_create(l, owner)))
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    if (rc == RLC_OK && !hold_push_attempt(h, attempt))
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    if (rc == RLC_OK)
        wake = record_grant(c, h, watchdog, lease, token, f.started_ns);
    else if (h)
        lock_drop_if_idle(c, h);
    if (outer_lost) {
        struct hold *o = hold_by_id(c, l, owner, outer_id);
        if (o)
            lock_mark_lost(c, o);
    }
    pthread_mutex_unlock(&c->mu);

    bool any_undo = false;
    for (int i = 0; i < n; i++)
        any_undo = any_undo || undo[i];
    if (rc != RLC_OK && any_undo)
        undo_attempt(l, owner, field, attempt, lease, undo);
    if (wake)
        client_wake_thread(c);
    fanout_clear(&f);
    cmd_unref(cmd);
    return rc;
}

/* Sleeps a random part of retry_jitter_ms (bounded by the deadline), so that
 * Redlock contenders that split the vote do not collide again in lockstep.
 * On the channel, so that a cancel ends the pause too. */
static void jitter(rlc_client *c, struct channel *ch, int64_t deadline_ns,
                   const struct cancel_point *cp)
{
    int64_t ms = quorum_jitter_ms(owner_random_below(UINT64_MAX), c->opts.retry_jitter_ms);
    int64_t until = rlc_deadline_after_ms(rlc_now_ns(), ms);
    pubsub_pause(c->pubsub, ch, until < deadline_ns ? until : deadline_ns, cp);
}

/* Waits on the lock's channel and tries again when woken: by an unlock
 * message (one waiter per message), by a resubscription (everyone: a message
 * may have been missed), or by the channel's timer, which wakes one waiter of
 * this client when the holder's lease ends or, failing that, once a second
 * (pubsub.c). Never by a timer of its own: the tries of a client's waiters on
 * one lock do not grow with their number. A refused SUBSCRIBE is an error:
 * waiting without messages would be polling in silence. */
static int wait_and_acquire(rlc_lock *l, uint64_t owner, const char *field, int64_t lease,
                            int64_t deadline_ns, const struct cancel_point *cp,
                            struct attempt *a)
{
    rlc_client *c = l->client;
    metrics_wait_begin(c);
    struct channel *ch = pubsub_join(c->pubsub, l->channel, l->channel_len);
    if (!ch)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int64_t ready_by = rlc_deadline_after_ms(
        rlc_now_ns(), c->call_timeout_ms + c->opts.connect_timeout_ms);
    pubsub_wait_ready(c->pubsub, ch, ready_by < deadline_ns ? ready_by : deadline_ns, cp);

    int rc;
    char why[RLC_ERRLEN], name[80];
    int refused = pubsub_refused(c->pubsub, ch, why, sizeof why);
    if (refused > 0) {
        rc = rlc_fail(RLC_E_SERVER,
                      "cannot wait for lock '%s': %s (%d of %d nodes); the ACL user needs "
                      "the channel permission '&redisson_lock__channel:*' to wait for unlock "
                      "messages (a try without waiting needs none)",
                      lock_shown(l, name, sizeof name), why, refused, c->n_nodes);
        goto out;
    }
    for (;;) {
        if (cancel_requested(cp)) {
            rc = canceled(l);
            break;
        }
        /* Read the count before trying: a message that arrives during the
         * try then ends the sleep below at once. */
        uint64_t seq = pubsub_seq(c->pubsub, ch);
        *a = (struct attempt){-1, false};
        rc = try_acquire(l, owner, field, lease, cp, a);
        if (rc != RLC_NOT_ACQUIRED)
            break;
        int64_t now = rlc_now_ns();
        if (now >= deadline_ns)
            break;
        if (atomic_load(&c->closed)) {
            rc = rlc_fail(RLC_E_CLOSED, "client closed while waiting");
            break;
        }
        if (a->split) {
            jitter(c, ch, deadline_ns, cp);
            continue;
        }
        /* sleep_ms: when the holder's lease ends, -1 no expiry. */
        pubsub_holder_expires(c->pubsub, ch,
                              a->sleep_ms < 0 ? RLC_FOREVER_NS
                                              : rlc_deadline_after_ms(
                                                    now, a->sleep_ms < QUORUM_MIN_RETRY_MS ? QUORUM_MIN_RETRY_MS : a->sleep_ms));
        pubsub_wait(c->pubsub, ch, seq, deadline_ns, cp);
    }
out:
    pubsub_leave(c->pubsub, ch);
    return rc;
}

int rlc_lock_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&l->cancels, atomic_load(&l->cancels)};
    if ((rc = lock_check_lease(c, lease_ms, "lease")) != RLC_OK)
        goto out;

    uint64_t owner = lock_owner(l);
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    int64_t start = rlc_now_ns();
    int64_t deadline = wait_ms < 0 ? RLC_FOREVER_NS : rlc_deadline_after_ms(start, wait_ms);

    struct attempt a = {-1, false};
    rc = try_acquire(l, owner, field, lease_ms, &cp, &a);
    if (rc == RLC_NOT_ACQUIRED && wait_ms != 0)
        rc = wait_and_acquire(l, owner, field, lease_ms, deadline, &cp, &a);
    if (rc == RLC_NOT_ACQUIRED && wait_ms != 0) {
        char name[80];
        rlc_fail(RLC_NOT_ACQUIRED, "lock '%s' is held by another owner; waited %lld ms",
                 lock_shown(l, name, sizeof name), (long long)((rlc_now_ns() - start) / RLC_NS_PER_MS));
    }
    metrics_acquire(c, rc, start);
out:
    client_leave(c);
    return rc;
}

/* Not through lock_enter(): a cancel acts for no owner, so it is fine on any
 * thread, an on_lost callback's included, and it does no I/O. */
int rlc_lock_cancel(rlc_lock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    atomic_fetch_add(&l->cancels, 1);
    rlc_client *c = l->client;
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were woken */
        pubsub_wake_channel(c->pubsub, l->channel, l->channel_len);
        client_leave(c);
    }
    return RLC_OK;
}
