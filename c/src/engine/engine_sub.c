/*
 * engine_sub.c - waiting: the subscriber connections and whom they wake.
 *
 * Each node has one subscriber connection, shared by every waiter of the
 * engine. A lock with waiters is subscribed on every node; its waiters queue
 * in arrival order. What wakes a sleeping waiter:
 *
 *   - an unlock message ("0" on redisson_lock__channel:{name}): the first
 *     sleeping waiter, one per message, so a release starts one try, not a
 *     stampede; the winner's own release wakes the next;
 *   - a release by this engine that freed the lock: the same, at once,
 *     without waiting for the message's round trip;
 *   - a subscription confirmed (first, or again after a reconnect): every
 *     waiter, since a message may have been missed while unsubscribed;
 *   - the lock's one timer: the holder's lease end as the last busy reply
 *     reported it, else a safety poll each second: one waiter;
 *   - a semaphore's message (permits came back, redisson_sc:{name}, with
 *     the count free now): its waiters in turn while what they ask fits.
 *
 * A wake that finds no sleeper (every waiter is trying) is not lost: it is
 * kept (missed_wake), and the next try that comes back busy tries again at
 * once instead of sleeping. One kept wake buys one retry, so tries never
 * outnumber wakes however many are in flight.
 *
 * Our own release wakes one local waiter at once; the unlock message of that
 * same release then arrives too. Those messages are counted (own_msgs) and
 * wake nobody: a second waiter would only find the lock taken by the first.
 * A resubscription forgets the count (it wakes everyone anyway).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "quorum.h"


static void send_sub(rlc_engine *e, struct conn *c, const char *verb, const struct eng_lock *l)
{
    const char *argv[2] = {verb, l->channel};
    size_t lens[2] = {strlen(verb), l->channel_len};
    conn_append_cmd(e, c, 2, argv, lens);
}

/* On every node's subscriber (a cluster's: the one of the lock's slot's
 * master, with the sharded verbs there). */
static void each_node_sub(rlc_engine *e, bool subscribe, struct eng_lock *l)
{
    for (int i = 0; i < e->n; i++) {
        bool cl = is_cluster(e, i);
        struct conn *c = cl ? cluster_sub_conn(e, i, l->slot) : &e->conns[2 * i + 1];
        const char *verb = cl ? cluster_sub_verb(e, i, subscribe)
                              : subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE";
        if (c->state == C_UP)
            send_sub(e, c, verb, l);
    }
}

bool sub_wanted(const rlc_engine *e, int node)
{
    /* a cluster node waits on its masters' subscribers (engine_cluster.c),
     * never on this one: a seed's plain SUBSCRIBE would confirm for the
     * node a subscription the slot's master does not have */
    return e->n_subscribed > 0 && !is_cluster(e, node);
}

void sub_join(rlc_engine *e, struct eng_op *op)
{
    struct eng_lock *l = op->hold->lock;
    if (op->waiting)
        return;
    op->waiting = true;
    op->woken = false;
    op->wnext = NULL;
    op->wprev = l->wait_tail;
    if (l->wait_tail)
        l->wait_tail->wnext = op;
    else
        l->wait_head = op;
    l->wait_tail = op;
    l->waiters++;
    if (!l->subscribed) {
        /* a lock of the same channel subscribed already: this one shares
         * its subscription and what the nodes confirmed of it */
        const struct eng_lock *peer = lock_channel_peer(e, l);
        l->subscribed = true;
        l->confirms = peer ? peer->confirms : 0;
        l->resub = 0;
        e->n_subscribed++;
        if (!peer)
            each_node_sub(e, true, l);
    }
}

void sub_leave(rlc_engine *e, struct eng_op *op)
{
    struct eng_lock *l = op->hold->lock;
    if (!op->waiting)
        return;
    op->waiting = false;
    if (op->wprev)
        op->wprev->wnext = op->wnext;
    else
        l->wait_head = op->wnext;
    if (op->wnext)
        op->wnext->wprev = op->wprev;
    else
        l->wait_tail = op->wprev;
    op->wnext = op->wprev = NULL;
    if (--l->waiters == 0) {
        l->subscribed = false;
        l->confirms = l->resub = 0;
        l->missed_wake = false;
        l->own_msgs = 0;
        e->n_subscribed--;
        if (!lock_channel_peer(e, l)) /* the last of its channel */
            each_node_sub(e, false, l);
        timer_clear(e, &l->timer);
        l->timer_want = -1;
    } else if (op->woken) {
        /* it was woken and leaves without having used the wake */
        sub_wake_one(e, l, e->now);
    }
}

/* One unlock message wakes one waiter, in turn, and every multi-lock that
 * watches this name as a later one of its names (a member op): those only
 * look, so the message still reaches the waiter whose turn it is. */
void sub_wake_one(rlc_engine *e, struct eng_lock *l, int64_t now)
{
    bool woke = false;
    struct eng_op *op = l->wait_head;
    while (op) {
        struct eng_op *next = op->wnext; /* a wake may end an op of another queue */
        if (!op->woken && (op->kind == OP_MEMBER || !woke)) {
            woke = woke || op->kind != OP_MEMBER;
            op->woken = true;
            op->cls->wake(e, op, now);
        }
        op = next;
    }
    if (!woke && l->waiters)
        l->missed_wake = true;
}

static void wake_all(rlc_engine *e, struct eng_lock *l, int64_t now)
{
    l->own_msgs = 0;
    /* acquire_wake may end an op (and unlink it): walk a snapshot of ids */
    struct eng_op *op = l->wait_head;
    while (op) {
        struct eng_op *next = op->wnext;
        if (op->phase != P_WAIT)
            op->rewake = true; /* its try may have run before what woke everyone */
        if (!op->woken) {
            op->woken = true;
            op->cls->wake(e, op, now);
        }
        op = next;
    }
}

/* A semaphore's message says how many permits are free now: its waiters
 * are woken in arrival order while what each asks for fits in that (as
 * Redisson wakes as many as were freed), so a one-permit hand-off costs
 * one try more, not one per waiter. A waiter whose try is out counts as
 * woken: its busy answer may be from before the message (rewake). None
 * fits: the wake is kept for the next busy try (missed_wake). A message
 * without a count wakes every waiter. */
static void wake_permits(rlc_engine *e, struct eng_lock *l, const redisReply *m, int64_t now)
{
    char *end = NULL;
    long long free_now = m && m->type == REDIS_REPLY_STRING ? strtoll(m->str, &end, 10) : -1;
    if (!end || end == m->str || *end || free_now < 0) {
        wake_all(e, l, now);
        return;
    }
    bool woke = false;
    for (struct eng_op *op = l->wait_head, *next; op && free_now > 0; op = next) {
        next = op->wnext; /* a wake may end an op */
        if (op->permits > free_now)
            continue;
        free_now -= op->permits;
        woke = true;
        if (op->phase != P_WAIT)
            op->rewake = true;
        if (!op->woken) {
            op->woken = true;
            op->cls->wake(e, op, now);
        }
    }
    if (!woke && l->waiters)
        l->missed_wake = true;
}

void sub_wake_readers(rlc_engine *e, struct eng_lock *l, int64_t now)
{
    for (struct eng_lock *o = lock_by_channel(e, l->channel, l->channel_len), *next; o; o = next) {
        next = lock_next_of_channel(o); /* a wake may end an op, and free no lock */
        if (o->kind == RLC_KIND_READ)
            wake_all(e, o, now);
    }
}

void sub_holder_expires(rlc_engine *e, struct eng_lock *l, int64_t at, int64_t now)
{
    at = now + quorum_retry_ms(at < 0 ? -1 : at - now);
    if (l->timer.at < 0 || !l->timer.slot || at < l->timer.at)
        timer_set(e, &l->timer, T_CHAN, l, at);
}

/* Subscriptions a cluster turned away (resub): sent again to the slot's
 * master of now, while they are not confirmed. */
static void resend_subs(rlc_engine *e, struct eng_lock *l)
{
    for (int i = 0; i < e->n && l->resub; i++) {
        uint64_t bit = UINT64_C(1) << i;
        if (!(l->resub & bit))
            continue;
        l->resub &= ~bit;
        struct conn *c = cluster_sub_conn(e, i, l->slot);
        if (!(l->confirms & bit) && c->state == C_UP)
            send_sub(e, c, cluster_sub_verb(e, i, true), l); /* else sent when it connects */
    }
}

void sub_timer(rlc_engine *e, struct eng_lock *l, int64_t now)
{
    if (!l->waiters)
        return;
    if (l->subscribed)
        resend_subs(e, l);
    sub_wake_one(e, l, now);
    if (l->waiters)
        timer_set(e, &l->timer, T_CHAN, l, now + QUORUM_SAFETY_POLL_MS);
}

static void for_each_lock(rlc_engine *e, void (*fn)(rlc_engine *, struct eng_lock *, void *),
                          void *arg)
{
    for (int b = 0; b < ENG_BUCKETS; b++)
        for (struct eng_lock *l = e->buckets[b], *n; l; l = n) {
            n = l->next;
            fn(e, l, arg);
        }
}

static void resubscribe(rlc_engine *e, struct eng_lock *l, void *arg)
{
    struct conn *c = arg;
    if (!l->subscribed)
        return;
    if (c->master < 0)
        send_sub(e, c, "SUBSCRIBE", l);
    else if (cluster_sub_conn(e, c->node, l->slot) == c)
        send_sub(e, c, cluster_sub_verb(e, c->node, true), l); /* its slot's master */
}

void sub_on_connected(rlc_engine *e, struct conn *c)
{
    for_each_lock(e, resubscribe, c);
}

static void unconfirm(rlc_engine *e, struct eng_lock *l, void *arg)
{
    (void)e;
    l->confirms &= ~(UINT64_C(1) << *(int *)arg);
}

void sub_on_closed(rlc_engine *e, struct conn *c)
{
    for_each_lock(e, unconfirm, &c->node);
}

/* A lock whose subscription on cluster subscriber c was answered MOVED,
 * ASK, TRYAGAIN or CLUSTERDOWN, or dropped by the server (its slot moved
 * or is served no more): it did not subscribe there, and is sent again at
 * the lock's next timer (if the map moves it first, move_subs sends it). */
static void redirected_sub(rlc_engine *e, struct eng_lock *l, void *arg)
{
    const struct conn *c = arg;
    uint64_t bit = UINT64_C(1) << c->node;
    if (!l->subscribed || (l->confirms & bit) || cluster_sub_conn(e, c->node, l->slot) != c)
        return;
    l->resub |= bit;
    sub_holder_expires(e, l, -1, e->now); /* its timer runs by the safety poll */
}

struct refusal {
    int node;
    const char *why;
};

static void refuse(rlc_engine *e, struct eng_lock *l, void *arg)
{
    const struct refusal *r = arg;
    if (!l->subscribed || (l->confirms & (UINT64_C(1) << r->node)))
        return;
    char why[400];
    snprintf(why, sizeof why,
             "cannot wait for lock '%s': %s refused SUBSCRIBE (%.150s); the ACL user needs "
             "the channel permission '&redisson_lock__channel:*' to wait for unlock messages "
             "(a try without waiting needs none)",
             RLC_SHOWN(l->name), e->addrs[r->node].label, r->why);
    struct eng_op *op = l->wait_head;
    while (op) {
        struct eng_op *next = op->wnext;
        sub_leave(e, op);
        op->cls->abort(e, op, RLC_E_SERVER, why, e->now);
        op = next;
    }
}

static void on_channel_reply(rlc_engine *e, struct conn *c, const redisReply *r,
                             struct eng_lock *l, int64_t now);

static void on_reply(rlc_engine *e, struct conn *c, const redisReply *r, int64_t now)
{
    if (r->type == REDIS_REPLY_ERROR) {
        if (c->master >= 0 && cmap_is_redirect(r)) {
            /* not a refusal: its master lost the slot (MOVED, ASK), or the
             * slot is not served for now (TRYAGAIN, CLUSTERDOWN); the map
             * is asked again and the subscription sent again */
            for_each_lock(e, redirected_sub, c);
            cluster_sub_moved(e, c, r);
            return;
        }
        if (strstr(r->str, "NOAUTH") || strstr(r->str, "WRONGPASS")) {
            /* the handshake's refusal: the waiters time out or are served by
             * the other nodes; the connection is retried with backoff */
            conn_drop(e, c, RLC_E_AUTH, r->str);
            sub_on_closed(e, c);
            return;
        }
        struct refusal rf = {c->node, r->str};
        for_each_lock(e, refuse, &rf);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return; /* +OK of the handshake, or a shape we do not use */
    /* every lock of the channel hears it (names x and {x} share one); a
     * wake starts tries, it frees no other lock of the channel */
    struct eng_lock *l = lock_by_channel(e, r->element[1]->str, r->element[1]->len);
    while (l) {
        struct eng_lock *next = lock_next_of_channel(l);
        if (l->subscribed)
            on_channel_reply(e, c, r, l, now);
        l = next;
    }
}

/* What a subscriber's reply on l's channel means for l. */
static void on_channel_reply(rlc_engine *e, struct conn *c, const redisReply *r,
                             struct eng_lock *l, int64_t now)
{
    const char *kind = r->element[0]->str;
    /* (s)message, (s)subscribe: a sharded cluster's are the same with an 's' */
    if (kind[0] == 's' && c->master >= 0)
        kind++;
    if (strcmp(kind, "message") == 0) {
        const redisReply *m = r->elements > 2 ? r->element[2] : NULL;
        if (kind_permits(l->kind))
            wake_permits(e, l, m, now);
        else if (m && m->type == REDIS_REPLY_STRING && m->len == 1 && m->str[0] == '1' &&
                 l->kind == RLC_KIND_READ)
            wake_all(e, l, now); /* a write unlock: readers come in together */
        else if (l->own_msgs > 0)
            l->own_msgs--;
        else
            sub_wake_one(e, l, now);
    } else if (strcmp(kind, "subscribe") == 0) {
        l->confirms |= UINT64_C(1) << c->node;
        wake_all(e, l, now);
    } else if (strcmp(kind, "unsubscribe") == 0 && c->master >= 0 &&
               r->element[0]->str[0] == 's' && cluster_sub_conn(e, c->node, l->slot) == c) {
        /* The server dropped a sharded subscription: its slot moved away. The
         * waiters poll until the map moves the subscription (they retry on
         * their holder's lease or the safety poll, never miss the lock). */
        l->confirms &= ~(UINT64_C(1) << c->node);
        redirected_sub(e, l, c);
        cluster_sub_moved(e, c, r);
    }
}

/* A subscriber's bytes: confirmations and messages (never replies to
 * requests: it sends only SUBSCRIBE and UNSUBSCRIBE, and its handshake). */
int sub_received(rlc_engine *e, struct conn *c, const char *data, size_t len, int64_t now)
{
    if (conn_feed(e, c, data, len) != RLC_OK) {
        sub_on_closed(e, c);
        return RLC_E_PROTOCOL;
    }
    redisReply *r;
    int got;
    while ((got = conn_next(e, c, &r)) > 0) {
        c->answered = true; /* a reconnect after it ends need not back off */
        on_reply(e, c, r, now);
        freeReplyObject(r);
        if (c->state != C_UP)
            break;
    }
    if (got < 0) {
        sub_on_closed(e, c);
        return RLC_E_PROTOCOL;
    }
    return RLC_OK;
}
