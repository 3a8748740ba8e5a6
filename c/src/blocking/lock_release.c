/*
 * lock_release.c - giving a hold back or keeping it longer: rlc_lock_release,
 * rlc_lock_extend, and rlc_lock_force_release (any owner's hold).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "fanout.h"
#include "hold.h"
#include "lock_common.h"
#include "pubsub.h"
#include "quorum.h"
#include "scripts.h"

/* The release of the level taken by `attempt`. upto: 0, or for the
 * client's last level the newest attempt made so far (see script_release). */
static struct rlc_cmd *release_cmd(const rlc_lock *l, int64_t lease_ms, const char *field,
                                   uint64_t attempt, uint64_t upto)
{
    struct lock_names names = lock_names_of(l);
    return call_release(&names, l->client->uuid, lease_ms, field, strlen(field), attempt, upto,
                        NULL, 0);
}

/* After the last level of a lost hold is given up: what may be left of it
 * on some nodes (a minority that still has it, an acquire of it still on
 * its way) is released, naming every level, so nothing of it outlives its
 * owner's last release. Epoch-checked like any release, so it cannot touch
 * a later life of the lock; sent detached, the caller is not kept. */
static void release_lost_remains(rlc_lock *l, uint64_t owner, const uint64_t *ids, int64_t n,
                                 int64_t lease, uint64_t upto)
{
    rlc_client *c = l->client;
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    struct lock_names names = lock_names_of(l);
    struct rlc_cmd *cmd = call_release(&names, c->uuid, lease, field, strlen(field),
                                       n > 0 ? ids[0] : 0, upto, ids + (n > 0), n > 0 ? n - 1 : 0);
    if (!cmd)
        return;
    bool all[RLC_MAX_NODES];
    for (int i = 0; i < c->n_nodes; i++)
        all[i] = true;
    fanout_detached(c, owner, cmd, &script_release, all, true);
    cmd_unref(cmd);
}

/* If the handle's hold for owner was lost, says so, and changes nothing on
 * the server. A release gives up one of the lost levels (the last one
 * forgets the hold); an extend gives up nothing, so the release that
 * follows it still reports the loss. */
static int take_lost(rlc_lock *l, uint64_t owner, const char *verb, bool release)
{
    rlc_client *c = l->client;
    int why = 0;
    uint64_t *remains = NULL, upto = 0;
    int64_t n_remains = 0, lease = 0;
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find(l, owner);
    if (h && h->lost) {
        why = h->lost;
        if (release) {
            h->count--;
            if (h->count <= 0 && h->n_attempts > 0) {
                remains = h->attempts;
                n_remains = h->n_attempts;
                h->attempts = NULL;
                h->n_attempts = h->attempts_cap = 0;
                lease = h->lease_ms;
                upto = c->next_attempt;
            }
            lock_drop_if_idle(c, h);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (remains) {
        release_lost_remains(l, owner, remains, n_remains, lease, upto);
        free(remains);
    }
    if (!why)
        return RLC_OK;
    char name[80];
    if (why == RLC_E_LOST)
        return rlc_fail(RLC_E_LOST,
                        "lock '%s' was lost before this %s: it expired or was taken; nothing "
                        "was changed", lock_shown(l, name, sizeof name), verb);
    return rlc_fail(RLC_E_LOST,
                    "lock '%s' was lost before this %s: renewals failed (%s) until its lease "
                    "ran out; nothing was changed", lock_shown(l, name, sizeof name), verb,
                    rlc_strerror(why));
}

static int not_held(rlc_lock *l, bool had_hold, const char *field)
{
    char name[80];
    if (had_hold)
        return rlc_fail(RLC_E_LOST, "lock '%s' was lost: it expired or was taken",
                        lock_shown(l, name, sizeof name));
    return rlc_fail(RLC_E_NOT_OWNER, "lock '%s' is not held by %s", lock_shown(l, name, sizeof name),
                    field);
}

int rlc_lock_release(rlc_lock *l)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    if ((rc = take_lost(l, owner, "release", true)) != RLC_OK)
        goto out;

    /* Marked as being released, so that the watchdog does not call a hold
     * "lost" because some nodes already let it go. The level given up is the
     * newest one of the owner's hold in the client, through whichever handle
     * it was taken. */
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find_levels(c, l, owner);
    bool had_hold = h && h->count > 0;
    int64_t lease = had_hold ? h->lease_ms : c->opts.watchdog_timeout_ms;
    struct levels known = hold_levels(c, l, owner);
    /* The client's last level takes every level the server may still count
     * for the owner from attempts made so far (an acquire whose undo is
     * late), so none is orphaned; never one taken by a later attempt. */
    bool last_level = known.count <= 1 && known.pending == 0;
    uint64_t upto = last_level ? c->next_attempt : 0;
    uint64_t attempt = had_hold ? hold_pop_attempt(h) : 0;
    uint64_t hold_id = h ? h->id : 0;
    if (h)
        h->releasing++;
    pthread_mutex_unlock(&c->mu);

    struct rlc_cmd *cmd = release_cmd(l, lease, field, attempt, upto);
    struct fanout f;
    fanout_run(c, owner, cmd, &script_release, &f);
    int done = 0, refused = 0, freed = 0;
    bool resend[RLC_MAX_NODES], any_resend = false;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        int64_t v;
        /* A release that got no answer may or may not have run. It names its
         * level's attempt, so running it twice does nothing more: send it
         * again, on whatever connection, until one is answered. */
        resend[i] = had_hold && !r && (f.res[i].status == RLC_E_CONNECT ||
                                       f.res[i].status == RLC_E_TIMEOUT);
        any_resend = any_resend || resend[i];
        if (r && lock_reply_int(r, &v)) {
            v == -1 ? refused++ : done++;
            freed += v == 0 || v == -2;
        }
    }
    if (quorum_has(f.n, freed))
        pubsub_notify_local(c->pubsub, l->channel, l->channel_len);
    int end = quorum_release_end(f.n, done, refused);
    if (end == QE_DONE)
        rc = RLC_OK;
    else if (end == QE_NOT_HELD)
        rc = not_held(l, had_hold, field);
    else
        rc = fanout_fail(c, &f, l->key);
    if (any_resend)
        fanout_detached(c, owner, cmd, &script_release, resend, true);
    fanout_clear(&f);
    cmd_unref(cmd);

    /* Whatever the outcome, one level is gone from our side: after an I/O
     * failure the release may or may not have run (and goes out again), and
     * a hold that is no longer renewed expires with its lease, which is the
     * safe direction. */
    pthread_mutex_lock(&c->mu);
    h = hold_id ? hold_by_id(c, l, owner, hold_id) : NULL;
    if (h) {
        h->releasing--;
        if (had_hold) {
            h->count--;
            if (rc == RLC_E_LOST)
                lock_mark_lost(c, h);
        }
        lock_drop_if_idle(c, h);
    }
    pthread_mutex_unlock(&c->mu);
out:
    client_leave(c);
    return rc;
}

int rlc_lock_extend(rlc_lock *l, int64_t lease_ms)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    if ((rc = lock_check_lease(c, lease_ms, "lease")) != RLC_OK ||
        (rc = take_lost(l, owner, "extend", false)) != RLC_OK)
        goto out;

    bool watchdog = lease_ms <= 0;
    int64_t lease = watchdog ? c->opts.watchdog_timeout_ms : lease_ms;
    /* The renewal names one level of the hold, so that it can only extend
     * the life of the lock that level was taken in. */
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find_levels(c, l, owner);
    uint64_t hold_id = h ? h->id : 0;
    uint64_t level = h && h->n_attempts > 0 ? h->attempts[0] : 0;
    pthread_mutex_unlock(&c->mu);
    struct lock_names names = lock_names_of(l);
    struct rlc_cmd *cmd = call_renew(&names, c->uuid, lease, field, strlen(field), level);
    struct fanout f;
    fanout_run(c, owner, cmd, &script_renew, &f);
    int yes = 0, gone = 0, unanswered = 0;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        int v = r ? answer_renew(r, 0) : -1;
        yes += v == 1;
        gone += v == 0;
        unanswered += !r;
    }

    pthread_mutex_lock(&c->mu);
    h = hold_id ? hold_by_id(c, l, owner, hold_id) : NULL;
    bool had_hold = h && h->count > 0, wake = false;
    /* What this extend may claim: its lease, or less if an earlier request
     * of the hold with a shorter one may still run; and from now on, if it
     * went unanswered somewhere, at most its own lease (it may run late) */
    int64_t claim = had_hold ? hold_claim_lease(h, lease) : lease;
    if (had_hold && unanswered > 0)
        hold_note_late(h, lease);
    int64_t validity_ms =
        quorum_validity_ms(claim, rlc_now_ns() - f.started_ns, c->opts.drift_factor);
    int end = quorum_renew_end(f.n, yes, gone, validity_ms);
    int64_t claim_until_ns =
        f.started_ns + (claim - quorum_drift_ms(claim, c->opts.drift_factor)) * RLC_NS_PER_MS;
    if (end == QE_DONE) {
        rc = RLC_OK;
        if (had_hold) {
            h->lease_ms = lease;
            hold_set_watchdog(c, h, watchdog);
            h->valid_until_ns = claim_until_ns;
            h->next_renew_ns = f.started_ns + claim * RLC_NS_PER_MS / 3;
            wake = watchdog && h->next_renew_ns < c->watchdog_wake_ns;
        }
    } else if (end == QE_LATE || end == QE_NOT_HELD) {
        /* Late: renewed, but after the lease it set (less the drift
         * allowance) had run out, so not certainly ours meanwhile; an OK
         * would claim a validity that has ended (the engine's rule too). */
        rc = end == QE_LATE ? RLC_E_LOST : RLC_E_NOT_OWNER; /* message below, outside mu */
        if (had_hold)
            lock_mark_lost(c, h);
    } else {
        rc = fanout_fail(c, &f, l->key);
        /* No verdict, but it may still run where it got no answer and set
         * its lease there: the validity claimed is no longer than that
         * (tests/c/test_safety.c, a_failed_extend_caps_the_validity_at_what_it_could_leave). */
        if (had_hold && unanswered > 0 && claim_until_ns < h->valid_until_ns)
            h->valid_until_ns = claim_until_ns;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == RLC_E_NOT_OWNER)
        rc = not_held(l, had_hold, field);
    else if (rc == RLC_E_LOST) {
        char name[80];
        rc = rlc_fail(RLC_E_LOST,
                      "lock '%s' was lost: the extend's answers came after its %lld ms lease "
                      "(less the drift allowance) ran out", lock_shown(l, name, sizeof name),
                      (long long)lease);
    }
    if (wake)
        client_wake_thread(c);
    fanout_clear(&f);
    cmd_unref(cmd);
out:
    client_leave(c);
    return rc;
}

int rlc_lock_force_release(rlc_lock *l)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    const char *argv[2] = {l->key, l->channel};
    size_t lens[2] = {l->key_len, l->channel_len};
    struct rlc_cmd *cmd = cmd_evalsha(&script_force_release, 2, 0, argv, lens);
    struct fanout f;
    fanout_run(c, lock_owner(l), cmd, &script_force_release, &f);
    int answered = 0;
    for (int i = 0; i < f.n; i++)
        answered += fanout_reply(&f, i) != NULL;
    if (quorum_has(f.n, answered)) {
        pthread_mutex_lock(&c->mu);
        hold_drop_all(c, l);
        pthread_mutex_unlock(&c->mu);
        rc = RLC_OK;
    } else {
        rc = fanout_fail(c, &f, l->key);
    }
    fanout_clear(&f);
    cmd_unref(cmd);
    client_leave(c);
    return rc;
}
