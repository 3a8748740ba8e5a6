/*
 * lock.c - the lock API: acquire, release, extend, and the queries.
 *
 * One code path serves one node and N nodes: every operation sends its
 * command to all nodes at once (fanout), then counts the answers against the
 * quorum N/2+1, which is 1 for a single node. What is sent and how a reply
 * is read stays here; how bytes move is fanout's and mux's business.
 *
 * A lock that was not certainly taken is undone: after a failed Redlock
 * round, and after a single node timed out, the release script goes to every
 * node that may have said yes. It travels on the same connection behind the
 * acquire, so it runs if and only if the acquire ran.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cancel.h"
#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "fanout.h"
#include "fence.h"
#include "hold.h"
#include "metrics.h"
#include "pubsub.h"
#include "quorum.h"
#include "restart_guard.h"
#include "scripts.h"

#define MAX_NAME_LEN 65536
#define MAX_LEASE_MS (366LL * 24 * 3600 * 1000)
/* No waiter tries again sooner than this unless a message woke it: it bounds
 * the retry rate of one waiter to 200/s whatever the options. */
#define MIN_RETRY_MS 5

static void mark_lost(rlc_client *c, struct hold *h);

/* Enters a call on l. On an on_lost callback's thread an owner-0 handle
 * other than the callback's own is refused: it would act for the library's
 * callback thread, a hold no application thread could release. */
static int enter(rlc_lock *l)
{
    uint64_t owner;
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    if (l->owner == 0 && client_callback_owner(l, &owner) < 0)
        return rlc_fail(RLC_E_INVAL,
                        "a handle with owner 0 acts for the calling thread, and this is the "
                        "client's on_lost callback thread: use a handle with an explicit "
                        "owner here (or the handle the callback was given)");
    return client_enter(l->client);
}

/* The owner a call acts for: the handle's, else the calling thread; in an
 * on_lost callback, its own owner-0 handle acts for the lost hold's owner. */
static uint64_t owner_of(const rlc_lock *l)
{
    uint64_t owner;
    if (l->owner)
        return l->owner;
    if (client_callback_owner(l, &owner) > 0)
        return owner;
    return owner_thread_number();
}

static const char *shown(const rlc_lock *l, char *buf, size_t size)
{
    return rlc_clip(l->key, buf, size);
}

static int check_lease(const rlc_client *c, int64_t lease_ms, const char *what)
{
    if (lease_ms <= 0)
        return RLC_OK;
    if (lease_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "%s of %lld ms is longer than 366 days", what,
                        (long long)lease_ms);
    /* validity = lease - elapsed (at least 1 ms) - drift must be able to
     * be positive, or no acquire could ever succeed. */
    if (lease_ms <= quorum_drift_ms(lease_ms, c->opts.drift_factor) + 1)
        return rlc_fail(RLC_E_INVAL,
                        "%s of %lld ms is shorter than the clock drift allowance (%lld ms) "
                        "plus a round trip (1 ms)",
                        what, (long long)lease_ms,
                        (long long)quorum_drift_ms(lease_ms, c->opts.drift_factor));
    return RLC_OK;
}

/* ---- reading replies ----------------------------------------------------- */

/* An integer reply, a number in a bulk string (HGET), or nil (as 0). */
static int reply_int(const redisReply *r, int64_t *out)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return 1;
    }
    if (r->type == REDIS_REPLY_NIL) {
        *out = 0;
        return 1;
    }
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        long long v = strtoll(r->str, &end, 10);
        if (end != r->str && *end == '\0') {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* The acquire script's reply (scripts.h). */
struct acquire_reply {
    int64_t count;       /* >= 1 held; 0 busy; -1 undone before it ran */
    int64_t x;           /* token when held, else the holder's pttl */
    bool inner;          /* held: the outer level named is in this life */
    const char *holder;  /* busy: the holder's field ("" unknown) */
    size_t holder_len;
};

static int parse_acquire(const redisReply *r, struct acquire_reply *a)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->elements > 4)
        return 0;
    for (size_t i = 0; i < 2; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return 0;
    a->count = r->element[0]->integer;
    a->x = r->element[1]->integer;
    a->holder = "";
    a->holder_len = 0;
    a->inner = r->elements == 4 && r->element[3]->type == REDIS_REPLY_INTEGER &&
               r->element[3]->integer == 1;
    if (r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
        a->holder = r->element[2]->str;
        a->holder_len = r->element[2]->len;
    }
    return 1;
}

/* ---- commands --------------------------------------------------------------- */

/* The release of the level taken by `attempt`. upto: 0, or for the
 * client's last level the newest attempt made so far (see script_release). */
static struct rlc_cmd *release_cmd(const rlc_lock *l, int64_t lease_ms, const char *field,
                                   uint64_t attempt, uint64_t upto)
{
    char lease[24], id[RLC_ATTEMPT_LEN], up[20] = "";
    const char *argv[7] = {l->key, l->channel, l->attempts_key, lease, field, id, up};
    size_t lens[7] = {l->key_len, l->channel_len, l->attempts_key_len,
                      (size_t)snprintf(lease, sizeof lease, "%lld", (long long)lease_ms),
                      strlen(field), 0, 0};
    lens[5] = attempt ? (size_t)client_attempt_name(l->client, attempt, id, sizeof id) : 0;
    lens[6] = upto ? (size_t)snprintf(up, sizeof up, "%llx", (unsigned long long)upto) : 0;
    return cmd_evalsha(&script_release, 3, 4, argv, lens);
}

/* ---- acquire ----------------------------------------------------------------- */

struct attempt {
    int64_t sleep_ms; /* busy: when enough holders' leases end for a quorum; -1 unknown */
    bool split;       /* we got votes but not a quorum, and no other owner can have one */
};

/* When should a loser look again? It needs q free nodes; the nodes that did
 * not refuse are free (or ours, undone), so it waits until enough of the
 * refusing nodes' leases have run out. */
static int64_t sleep_for(const int64_t *busy_pttl, int busy, int n, int q)
{
    int need = q - (n - busy);
    if (need <= 0)
        return 0;
    int64_t v[RLC_MAX_NODES];
    for (int i = 0; i < busy; i++)
        v[i] = busy_pttl[i] < 0 ? INT64_MAX : busy_pttl[i];
    /* the need-th smallest = the (busy - need + 1)-th largest */
    int64_t t = quorum_kth_largest(v, busy, busy - need + 1, -1);
    return t == INT64_MAX ? -1 : t;
}

/* Records a granted acquisition in h (under mu). Returns whether the
 * watchdog thread must wake up to renew it in time. */
static bool record_grant(rlc_client *c, struct hold *h, bool watchdog, int64_t lease,
                         uint64_t token, int64_t started_ns)
{
    if (h->count == 0) {
        h->token = token;
        h->lease_ms = lease;
        hold_set_watchdog(c, h, watchdog);
    }
    h->count++;
    int64_t valid_ms = lease - quorum_drift_ms(lease, c->opts.drift_factor);
    h->valid_until_ns = started_ns + valid_ms * RLC_NS_PER_MS;
    if (!h->watchdog)
        return false;
    h->next_renew_ns = started_ns + lease * RLC_NS_PER_MS / 3;
    return h->next_renew_ns < c->watchdog_wake_ns;
}

/* Forgets h if nothing is held or in flight through it any more. */
static void drop_if_idle(rlc_client *c, struct hold *h)
{
    if (h->count <= 0 && h->pending == 0 && h->releasing == 0)
        hold_drop(c, h);
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
    char id[RLC_ATTEMPT_LEN], ttl[24];
    /* A tombstone outlives any acquire that can still be on its way: one
     * whose connection is still open is answered or torn down within a
     * call's deadline plus a connect; a minute covers a stalled server. */
    int64_t tomb = lease + 2 * (c->call_timeout_ms + c->opts.connect_timeout_ms) + 60000;
    const char *argv[5] = {l->key, l->attempts_key, id, field, ttl};
    size_t lens[5] = {l->key_len, l->attempts_key_len,
                      (size_t)client_attempt_name(c, attempt, id, sizeof id), strlen(field),
                      (size_t)snprintf(ttl, sizeof ttl, "%lld", (long long)tomb)};
    struct rlc_cmd *cmd = cmd_evalsha(&script_undo, 2, 3, argv, lens);
    fanout_detached(c, owner, cmd, &script_undo, which, true);
    cmd_unref(cmd);
}

static int canceled(const rlc_lock *l)
{
    char name[80];
    return rlc_fail(RLC_E_CANCELED, "acquire of lock '%s' was cancelled (rlc_lock_cancel); "
                    "nothing was kept", shown(l, name, sizeof name));
}

static int try_acquire(rlc_lock *l, uint64_t owner, const char *field, int64_t lease_req,
                       const struct cancel_point *cp, struct attempt *a)
{
    rlc_client *c = l->client;
    int n = c->n_nodes, q = c->quorum;

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

    char lease_s[24], id[RLC_ATTEMPT_LEN], in[RLC_ATTEMPT_LEN];
    const char *argv[7] = {l->key, l->token_key, l->attempts_key, lease_s, field, id, in};
    size_t lens[7] = {l->key_len, l->token_key_len, l->attempts_key_len,
                      (size_t)snprintf(lease_s, sizeof lease_s, "%lld", (long long)lease),
                      strlen(field), (size_t)client_attempt_name(c, attempt, id, sizeof id), 0};
    if (outer_level)
        lens[6] = (size_t)client_attempt_name(c, outer_level, in, sizeof in);
    struct rlc_cmd *cmd = cmd_evalsha(&script_acquire, 3, 4, argv, lens);
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
    int not_counted = 0;

    int yes = 0, inner = 0, busy = 0, unanswered = 0, holders = 0;
    uint64_t token = 0, tokens[RLC_MAX_NODES];
    bool granted[RLC_MAX_NODES], undo[RLC_MAX_NODES];
    int64_t busy_pttl[RLC_MAX_NODES];
    const struct acquire_reply *holder_of[RLC_MAX_NODES];
    struct acquire_reply replies[RLC_MAX_NODES];
    int holder_nodes[RLC_MAX_NODES];
    for (int i = 0; i < n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        struct acquire_reply *ar = &replies[i];
        granted[i] = false;
        /* Every node that may have run it is undone if the round fails: one
         * that said yes, and one whose answer we do not have. */
        undo[i] = true;
        if (!r || !parse_acquire(r, ar)) {
            unanswered++;
            continue;
        }
        if (ar->count >= 1 && guarded[i]) {
            not_counted++; /* it may hold the key, but its vote does not count */
        } else if (ar->count >= 1) {
            yes++;
            inner += ar->inner;
            granted[i] = true;
            tokens[i] = (uint64_t)ar->x;
            if ((uint64_t)ar->x > token)
                token = (uint64_t)ar->x;
        } else if (ar->count == 0) {
            undo[i] = false;
            busy_pttl[busy++] = ar->x;
            int k = 0;
            while (k < holders && !(holder_of[k]->holder_len == ar->holder_len &&
                                    memcmp(holder_of[k]->holder, ar->holder, ar->holder_len) == 0))
                k++;
            if (k == holders) {
                holder_of[holders] = ar;
                holder_nodes[holders++] = 0;
            }
            holder_nodes[k]++;
        } else {
            unanswered++; /* cannot happen: the id is new */
        }
    }

    int rc;
    bool wake = false;
    int64_t validity = quorum_validity_ms(lease, elapsed_ns, c->opts.drift_factor);
    char name[80];
    bool outer_lost = false;
    if (yes >= q && nested && inner < q) {
        /* The hold this nests in is gone from a quorum (it expired): this
         * acquire made a new hold there. Counting it as one more level
         * would let the owner's next release free those nodes while it
         * still believes it holds the lock. */
        outer_lost = true;
        rc = rlc_fail(RLC_E_LOST,
                      "lock '%s' was lost before this nested acquire: it expired or was "
                      "taken; nothing was kept", shown(l, name, sizeof name));
    } else if (yes >= q && validity > 0) {
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
                          shown(l, name, sizeof name), (long long)lease);
        if (rc != RLC_OK) {
            a->split = false;
            a->sleep_ms = 0;
        }
    } else if (yes >= q) {
        rc = rlc_fail(RLC_NOT_ACQUIRED,
                      "lock '%s' was granted, but its %lld ms lease was used up by the %lld ms "
                      "the nodes took to answer (and the drift allowance); use a longer lease",
                      shown(l, name, sizeof name), (long long)lease,
                      (long long)(elapsed_ns / RLC_NS_PER_MS));
        a->split = false;
        a->sleep_ms = 0;
    } else if (yes + not_counted >= q) {
        rc = rlc_fail(RLC_NOT_ACQUIRED,
                      "lock '%s': %d of %d nodes granted it, but only %d count toward the "
                      "quorum of %d: %s", shown(l, name, sizeof name), yes + not_counted, n,
                      yes, q, guard_why);
        a->split = false;
        a->sleep_ms = guard_wait_ms;
    } else if (yes + busy >= q) {
        rc = rlc_fail(RLC_NOT_ACQUIRED, "lock '%s' is held by another owner",
                      shown(l, name, sizeof name));
        a->split = quorum_split_vote(n, q, yes, holder_nodes, holders, unanswered);
        a->sleep_ms = sleep_for(busy_pttl, busy, n, q);
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
        drop_if_idle(c, h);
    if (outer_lost) {
        struct hold *o = hold_by_id(c, l, owner, outer_id);
        if (o)
            mark_lost(c, o);
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
    int64_t ms = MIN_RETRY_MS +
                 (int64_t)owner_random_below((uint64_t)c->opts.retry_jitter_ms + 1);
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
                      shown(l, name, sizeof name), why, refused, c->n_nodes);
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
                                                    now, a->sleep_ms < MIN_RETRY_MS ? MIN_RETRY_MS : a->sleep_ms));
        pubsub_wait(c->pubsub, ch, seq, deadline_ns, cp);
    }
out:
    pubsub_leave(c->pubsub, ch);
    return rc;
}

int rlc_lock_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms)
{
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&l->cancels, atomic_load(&l->cancels)};
    if ((rc = check_lease(c, lease_ms, "lease")) != RLC_OK)
        goto out;

    uint64_t owner = owner_of(l);
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
                 shown(l, name, sizeof name), (long long)((rlc_now_ns() - start) / RLC_NS_PER_MS));
    }
    metrics_acquire(c, rc, start);
out:
    client_leave(c);
    return rc;
}

/* Not through enter(): a cancel acts for no owner, so it is fine on any
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

/* ---- release, extend, force ------------------------------------------------ */

/* The server said a hold this handle had is gone, and the caller is being
 * told so now. The hold stays, marked lost, for the owner's other levels:
 * each of their releases reports RLC_E_LOST too, as after the watchdog's
 * finding, and no on_lost follows for what the caller already knows. */
static void mark_lost(rlc_client *c, struct hold *h)
{
    h->lost = RLC_E_LOST;
    h->notified = true;
    metrics_lost(c, h->lock, RLC_E_LOST);
    hold_set_watchdog(c, h, false);
}

/* If the handle's hold for owner was lost, says so, and changes nothing on
 * the server. A release gives up one of the lost levels (the last one
 * forgets the hold); an extend gives up nothing, so the release that
 * follows it still reports the loss. */
/* After the last level of a lost hold is given up: what may be left of it
 * on some nodes (a minority that still has it, an acquire of it still on
 * its way) is released, naming every level, so nothing of it outlives its
 * owner's last release. Epoch-checked like any release, so it cannot touch
 * a later life of the lock; sent detached, the caller is not kept. */
static void release_lost_remains(rlc_lock *l, uint64_t owner, const uint64_t *ids, int64_t n,
                                 int64_t lease, uint64_t upto)
{
    rlc_client *c = l->client;
    char field[RLC_UUID_LEN + 24], lease_s[24], up[20];
    client_field(c, owner, field, sizeof field);
    int64_t argc = 6 + n;
    const char **argv = malloc(sizeof *argv * (size_t)argc);
    size_t *lens = malloc(sizeof *lens * (size_t)argc);
    char (*names)[RLC_ATTEMPT_LEN] = malloc(RLC_ATTEMPT_LEN * (size_t)n);
    if (argv && lens && names) {
        argv[0] = l->key, lens[0] = l->key_len;
        argv[1] = l->channel, lens[1] = l->channel_len;
        argv[2] = l->attempts_key, lens[2] = l->attempts_key_len;
        argv[3] = lease_s, lens[3] = (size_t)snprintf(lease_s, sizeof lease_s, "%lld",
                                                     (long long)lease);
        argv[4] = field, lens[4] = strlen(field);
        /* ARGV: lease, field, the oldest level, upto, the other levels */
        argv[6] = up, lens[6] = (size_t)snprintf(up, sizeof up, "%llx", (unsigned long long)upto);
        for (int64_t k = 0; k < n; k++) {
            size_t len = (size_t)client_attempt_name(c, ids[k], names[k], RLC_ATTEMPT_LEN);
            int64_t at = k == 0 ? 5 : 6 + k;
            argv[at] = names[k], lens[at] = len;
        }
        struct rlc_cmd *cmd = cmd_evalsha(&script_release, 3, (int)(argc - 3), argv, lens);
        bool all[RLC_MAX_NODES];
        for (int i = 0; i < c->n_nodes; i++)
            all[i] = true;
        fanout_detached(c, owner, cmd, &script_release, all, true);
        cmd_unref(cmd);
    }
    free(argv);
    free(lens);
    free(names);
}

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
            drop_if_idle(c, h);
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
                        "was changed", shown(l, name, sizeof name), verb);
    return rlc_fail(RLC_E_LOST,
                    "lock '%s' was lost before this %s: renewals failed (%s) until its lease "
                    "ran out; nothing was changed", shown(l, name, sizeof name), verb,
                    rlc_strerror(why));
}

static int not_held(rlc_lock *l, bool had_hold, const char *field)
{
    char name[80];
    if (had_hold)
        return rlc_fail(RLC_E_LOST, "lock '%s' was lost: it expired or was taken",
                        shown(l, name, sizeof name));
    return rlc_fail(RLC_E_NOT_OWNER, "lock '%s' is not held by %s", shown(l, name, sizeof name),
                    field);
}

int rlc_lock_release(rlc_lock *l)
{
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = owner_of(l);
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
        if (r && reply_int(r, &v)) {
            v == -1 ? refused++ : done++;
            freed += v == 0 || v == -2;
        }
    }
    if (freed >= c->quorum)
        pubsub_notify_local(c->pubsub, l->channel, l->channel_len);
    if (done >= c->quorum)
        rc = RLC_OK;
    else if (refused > f.n - c->quorum)
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
                mark_lost(c, h);
        }
        drop_if_idle(c, h);
    }
    pthread_mutex_unlock(&c->mu);
out:
    client_leave(c);
    return rc;
}

int rlc_lock_extend(rlc_lock *l, int64_t lease_ms)
{
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = owner_of(l);
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    if ((rc = check_lease(c, lease_ms, "lease")) != RLC_OK ||
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
    char lease_s[24], id[RLC_ATTEMPT_LEN];
    const char *argv[5] = {l->key, l->attempts_key, lease_s, field, id};
    size_t lens[5] = {l->key_len, l->attempts_key_len,
                      (size_t)snprintf(lease_s, sizeof lease_s, "%lld", (long long)lease),
                      strlen(field),
                      level ? (size_t)client_attempt_name(c, level, id, sizeof id) : 0};
    struct rlc_cmd *cmd = cmd_evalsha(&script_renew, 2, 3, argv, lens);
    struct fanout f;
    fanout_run(c, owner, cmd, &script_renew, &f);
    int yes = 0, gone = 0;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
            r->element[0]->type == REDIS_REPLY_INTEGER)
            r->element[0]->integer == 1 ? yes++ : gone++;
    }

    pthread_mutex_lock(&c->mu);
    h = hold_id ? hold_by_id(c, l, owner, hold_id) : NULL;
    bool had_hold = h && h->count > 0, wake = false;
    if (yes >= c->quorum) {
        rc = RLC_OK;
        if (had_hold) {
            h->lease_ms = lease;
            hold_set_watchdog(c, h, watchdog);
            h->valid_until_ns = f.started_ns + (lease - quorum_drift_ms(lease, c->opts.drift_factor)) *
                                                   RLC_NS_PER_MS;
            h->next_renew_ns = f.started_ns + lease * RLC_NS_PER_MS / 3;
            wake = watchdog && h->next_renew_ns < c->watchdog_wake_ns;
        }
    } else if (gone > f.n - c->quorum) {
        rc = RLC_E_NOT_OWNER; /* message below, outside the mutex */
        if (had_hold)
            mark_lost(c, h);
    } else {
        rc = fanout_fail(c, &f, l->key);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == RLC_E_NOT_OWNER)
        rc = not_held(l, had_hold, field);
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
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    const char *argv[2] = {l->key, l->channel};
    size_t lens[2] = {l->key_len, l->channel_len};
    struct rlc_cmd *cmd = cmd_evalsha(&script_force_release, 2, 0, argv, lens);
    struct fanout f;
    fanout_run(c, owner_of(l), cmd, &script_force_release, &f);
    int answered = 0;
    for (int i = 0; i < f.n; i++)
        answered += fanout_reply(&f, i) != NULL;
    if (answered >= c->quorum) {
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

/* ---- queries ------------------------------------------------------------------ */

/* Runs a read-only command on every node; v[] gets the integer answers. */
static int query(rlc_lock *l, int argc, const char *const *argv, const size_t *lens,
                 int64_t *v, int *nv)
{
    rlc_client *c = l->client;
    struct rlc_cmd *cmd = cmd_format(argc, argv, lens);
    struct fanout f;
    fanout_run(c, owner_of(l), cmd, NULL, &f);
    *nv = 0;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        if (r && reply_int(r, &v[*nv]))
            (*nv)++;
    }
    int rc = *nv >= c->quorum ? RLC_OK : fanout_fail(c, &f, l->key);
    fanout_clear(&f);
    cmd_unref(cmd);
    return rc;
}

static int count_ones(const int64_t *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += v[i] == 1;
    return k;
}

int rlc_lock_is_locked(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    const char *argv[2] = {"EXISTS", l->key};
    size_t lens[2] = {6, l->key_len};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 2, argv, lens, v, &nv)) == RLC_OK)
        *out = count_ones(v, nv) >= l->client->quorum;
    client_leave(l->client);
    return rc;
}

int rlc_lock_is_held(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = owner_of(l);
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find(l, owner);
    bool lost = h && h->lost;
    pthread_mutex_unlock(&c->mu);
    if (lost) {
        *out = 0;
    } else {
        char field[RLC_UUID_LEN + 24];
        client_field(c, owner, field, sizeof field);
        const char *argv[3] = {"HEXISTS", l->key, field};
        size_t lens[3] = {7, l->key_len, strlen(field)};
        int64_t v[RLC_MAX_NODES];
        int nv;
        if ((rc = query(l, 3, argv, lens, v, &nv)) == RLC_OK)
            *out = count_ones(v, nv) >= c->quorum;
    }
    client_leave(c);
    return rc;
}

int rlc_lock_hold_count(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner_of(l), field, sizeof field);
    const char *argv[3] = {"HGET", l->key, field};
    size_t lens[3] = {4, l->key_len, strlen(field)};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 3, argv, lens, v, &nv)) == RLC_OK)
        *out = quorum_kth_largest(v, nv, c->quorum, 0);
    client_leave(c);
    return rc;
}

int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    const char *argv[2] = {"PTTL", l->key};
    size_t lens[2] = {4, l->key_len};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 2, argv, lens, v, &nv)) == RLC_OK) {
        for (int i = 0; i < nv; i++) /* no expiry outlasts any expiry */
            if (v[i] == -1)
                v[i] = INT64_MAX;
        int64_t t = quorum_kth_largest(v, nv, l->client->quorum, -2);
        *out = t == INT64_MAX ? -1 : t;
    }
    client_leave(l->client);
    return rc;
}

int rlc_lock_validity_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    int64_t now = rlc_now_ns();
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find(l, owner_of(l));
    int64_t left = h && !h->lost && h->count > 0 ? h->valid_until_ns - now : 0;
    pthread_mutex_unlock(&c->mu);
    *out = left > 0 ? left / RLC_NS_PER_MS : 0;
    client_leave(c);
    return RLC_OK;
}

int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    struct hold *h = hold_find(l, owner_of(l));
    int lost = h ? h->lost : 0;
    uint64_t token = h ? h->token : 0;
    pthread_mutex_unlock(&c->mu);
    char name[80];
    if (!h || (!lost && h->count == 0))
        rc = rlc_fail(RLC_E_NOT_OWNER, "lock '%s' is not held through this handle",
                      shown(l, name, sizeof name));
    else if (lost)
        rc = rlc_fail(RLC_E_LOST, "lock '%s' was lost", shown(l, name, sizeof name));
    else
        *out = token;
    client_leave(c);
    return rc;
}

static int set_on_lost(rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2, void *user)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    int rc = client_enter(l->client);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    rc = client_set_on_lost(c, l, fn, fn2, user);
    pthread_mutex_unlock(&c->mu);
    if (rc != RLC_OK)
        rlc_fail(rc, "cannot start the client's callback thread");
    client_leave(c);
    return rc;
}

int rlc_lock_on_lost(rlc_lock *l, rlc_lost_fn fn, void *user)
{
    return set_on_lost(l, fn, NULL, user);
}

int rlc_lock_on_lost_owner(rlc_lock *l, rlc_lost_owner_fn fn, void *user)
{
    return set_on_lost(l, NULL, fn, user);
}

/* ---- handles ------------------------------------------------------------------- */

/* prefix + key, with braces around the key unless it has a '{' already:
 * Redisson's rule, which keeps the channel in the key's cluster slot. */
static char *derived_name(const char *prefix, const char *key, size_t key_len, size_t *len)
{
    bool braced = memchr(key, '{', key_len) != NULL;
    size_t plen = strlen(prefix);
    *len = plen + key_len + (braced ? 0 : 2);
    char *s = malloc(*len + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, prefix, plen);
    p += plen;
    if (!braced)
        *p++ = '{';
    memcpy(p, key, key_len);
    p += key_len;
    if (!braced)
        *p++ = '}';
    *p = '\0';
    return s;
}

static void lock_free_names(rlc_lock *l)
{
    free(l->key);
    free(l->channel);
    free(l->token_key);
    free(l->attempts_key);
}

int rlc_lock_new(rlc_client *c, const char *name, uint64_t owner, rlc_lock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (!name || !*name)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    if (owner >= RLC_THREAD_OWNER_BASE)
        return rlc_fail(RLC_E_INVAL,
                        "explicit owner id %llu is too large: use 1 to 2^62-1 (larger ids "
                        "belong to threads)",
                        (unsigned long long)owner);
    size_t name_len = strnlen(name, MAX_NAME_LEN + 1);
    if (name_len > MAX_NAME_LEN)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", MAX_NAME_LEN);
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;

    rlc_lock *l = calloc(1, sizeof *l);
    if (!l) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    size_t plen = strlen(c->opts.key_prefix);
    l->key_len = plen + name_len;
    l->key = malloc(l->key_len + 1);
    if (l->key) {
        memcpy(l->key, c->opts.key_prefix, plen);
        memcpy(l->key + plen, name, name_len + 1);
        l->channel = derived_name("redisson_lock__channel:", l->key, l->key_len,
                                  &l->channel_len);
        l->token_key = derived_name("redisson_lock_token:", l->key, l->key_len,
                                    &l->token_key_len);
        l->attempts_key = derived_name("redlockc_attempts:", l->key, l->key_len,
                                       &l->attempts_key_len);
    }
    if (!l->key || !l->channel || !l->token_key || !l->attempts_key) {
        lock_free_names(l);
        free(l);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    l->client = c;
    l->owner = owner;
    client_ref(c);
    *out = l;
out:
    client_leave(c);
    return rc;
}

void rlc_lock_free(rlc_lock *l)
{
    if (!l)
        return;
    rlc_client *c = l->client;
    if (c->fork_generation != owner_fork_generation()) {
        /* A forked child: the mutex may be held by a thread that did not come
         * along, and no other thread of ours uses this client here. */
        while (l->holds) {
            struct hold *h = l->holds;
            l->holds = h->next;
            free(h->attempts);
            free(h);
        }
    } else {
        pthread_mutex_lock(&c->mu);
        hold_drop_all(c, l);
        /* No callback of this lock runs after this returns: queued ones are
         * dropped, a running one is waited for (unless this is that
         * callback, freeing its own lock). */
        client_forget_lost(c, l);
        pthread_mutex_unlock(&c->mu);
    }
    lock_free_names(l);
    free(l);
    client_unref(c);
}
