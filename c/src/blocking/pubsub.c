/*
 * pubsub.c - subscriber connections and the channels waiters sleep on.
 *
 * The background thread owns one subscriber connection per node and keeps
 * the server's subscriptions in line with what waiters want: a channel is
 * wanted while a waiter uses it, and for LINGER after the last one left, so
 * that a busy lock is not subscribed and unsubscribed on every hand-off.
 *
 * Per channel and node we track whether SUBSCRIBE was the last command sent
 * and how many (UN)SUBSCRIBEs await their confirmation. A subscription
 * counts only when confirmed with nothing in flight, so a waiter never
 * mistakes the confirmation of an older SUBSCRIBE, about to be undone by an
 * UNSUBSCRIBE, for its own.
 *
 * Every message, and every (re)confirmed subscription, bumps the channel's
 * sequence number and wakes its waiters: after a reconnect, messages may
 * have been missed, so everyone looks again.
 *
 * Besides messages, a channel has one timer for all its waiters: the end
 * of the holder's lease as the last try saw it, or else a safety poll every
 * SAFETY_POLL (a holder with no expiry, a message that never came because
 * the holder's PUBLISH was refused). The first waiter to find it due claims
 * it and tries; the others sleep on. So a lock's waiters in one client make
 * one timed try per due time, not one each: 1,000 waiters cost what one does.
 *
 * A SUBSCRIBE the server refuses (an ACL user without channel rights) is
 * remembered per channel and node, with the server's words, so that the
 * waiter can say why it cannot wait instead of polling in silence. Each
 * (UN)SUBSCRIBE gets exactly one reply, a confirmation or an error, in the
 * order sent; a per-node FIFO tells which command an error answers.
 *
 * A cluster node (cluster.h) has one endpoint per entry of its node table,
 * each with its own subscriber connection, made when a channel needs it. A
 * channel is wanted on one of them: with sharded pub/sub (Redis 7, as
 * Redisson decides it), the master of the channel's slot, by SSUBSCRIBE,
 * since SPUBLISH reaches only that shard; without it, the first seed, by
 * SUBSCRIBE, since PUBLISH reaches every node. When the map moves the slot,
 * the channel is unsubscribed from the old master (or the server already
 * did it: Redis 7 sends "sunsubscribe" to the subscribers of a slot that
 * moved away, and "-MOVED" to a SSUBSCRIBE sent to the wrong node) and
 * subscribed on the new one; its confirmation wakes every waiter to try
 * again, as after any reconnection.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "clock.h"
#include "cluster.h"
#include "cmd.h"
#include "conn.h"
#include "pubsub.h"
#include "quorum.h"
#include "slot.h"
#include "state.h"

#define LINGER_NS (2000 * RLC_NS_PER_MS)
#define MAX_BACKOFF_MS 1000
#define SAFETY_POLL_NS (QUORUM_SAFETY_POLL_MS * RLC_NS_PER_MS)

struct node_sub {
    bool want;    /* this endpoint should carry it now (prepare) */
    bool sent;    /* SUBSCRIBE is the last command sent for this channel */
    bool refused; /* the server answered that SUBSCRIBE with an error */
    int inflight; /* (UN)SUBSCRIBEs not yet confirmed */
};

struct channel {
    struct channel *next;
    char *name;
    size_t len;
    int refs;
    uint64_t seq;        /* bumped when a subscription is (re)confirmed */
    int permits;         /* unlock messages no waiter has taken yet */
    int64_t idle_since_ns;
    int64_t poll_at_ns;  /* the next safety poll, claimed by one waiter */
    int64_t expires_ns;  /* when the holder's lease ends, as last seen */
    int hslot;           /* the channel's hash slot (a cluster's shard) */
    pthread_cond_t cond; /* readiness and seq changes: wakes everyone */
    pthread_cond_t msg;  /* an unlock message: wakes one waiter */
    struct node_sub node[];
};

/* A (UN)SUBSCRIBE sent and not yet answered, oldest first. */
struct sent_cmd {
    struct sent_cmd *next;
    struct channel *ch; /* kept alive: its node's inflight is > 0 */
    bool subscribe;
};

struct subconn {
    struct conn conn;
    int node;           /* the client's node this endpoint belongs to */
    struct cluster *cl; /* a cluster's endpoint: entry is its table index */
    int entry;
    bool inited;        /* conn_init done (a cluster's once its entry exists) */
    bool failed;        /* the last connect failed: do not wait for this node */
    int64_t retry_at_ns;
    int64_t backoff_ms;
    struct sent_cmd *head, *tail;
    char refusal[RLC_ERRLEN]; /* the last refused SUBSCRIBE, with the node's words */
};

struct pubsub {
    rlc_client *client;
    pthread_mutex_t mu;
    bool stopped;
    struct channel *channels;
    int n;
    struct subconn *subs;   /* endpoints: one per standalone node, a block per cluster */
    int *base;              /* each node's first endpoint */
    int polled[RLC_MAX_NODES]; /* endpoint of each pollfd from the last prepare */
};

struct pubsub *pubsub_new(rlc_client *c)
{
    struct pubsub *ps = calloc(1, sizeof *ps);
    if (!ps)
        return NULL;
    int n = 0;
    for (int i = 0; i < c->n_nodes; i++)
        n += c->clusters[i] ? RLC_CLUSTER_MAX_NODES : 1;
    ps->subs = calloc((size_t)n, sizeof *ps->subs);
    ps->base = calloc((size_t)c->n_nodes, sizeof *ps->base);
    if (!ps->subs || !ps->base) {
        free(ps->subs);
        free(ps->base);
        free(ps);
        return NULL;
    }
    ps->client = c;
    ps->n = n;
    pthread_mutex_init(&ps->mu, NULL);
    for (int i = 0, e = 0; i < c->n_nodes; i++) {
        ps->base[i] = e;
        int k = c->clusters[i] ? RLC_CLUSTER_MAX_NODES : 1;
        for (int j = 0; j < k; j++, e++) {
            struct subconn *s = &ps->subs[e];
            s->node = i;
            s->cl = c->clusters[i];
            s->entry = j;
            s->conn.fd = -1; /* closed until inited (conn_close is a no-op) */
            if (!s->cl) {
                conn_init(&s->conn, &c->nodes[i], false);
                s->inited = true;
            }
        }
    }
    return ps;
}

static void channel_free(struct channel *ch)
{
    pthread_cond_destroy(&ch->cond);
    pthread_cond_destroy(&ch->msg);
    free(ch->name);
    free(ch);
}

static void forget_sent(struct subconn *s)
{
    while (s->head) {
        struct sent_cmd *sc = s->head;
        s->head = sc->next;
        free(sc);
    }
    s->tail = NULL;
}

void pubsub_free(struct pubsub *ps)
{
    if (!ps)
        return;
    for (int i = 0; i < ps->n; i++) {
        conn_close(&ps->subs[i].conn);
        forget_sent(&ps->subs[i]);
    }
    while (ps->channels) {
        struct channel *ch = ps->channels;
        ps->channels = ch->next;
        channel_free(ch);
    }
    pthread_mutex_destroy(&ps->mu);
    free(ps->subs);
    free(ps->base);
    free(ps);
}

static struct channel *find(struct pubsub *ps, const char *name, size_t len)
{
    for (struct channel *ch = ps->channels; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

static bool confirmed(const struct channel *ch, int i)
{
    return ch->node[i].sent && ch->node[i].inflight == 0 && !ch->node[i].refused;
}

static bool wanted(const struct channel *ch, int64_t now)
{
    return ch->refs > 0 || now - ch->idle_since_ns < LINGER_NS;
}

/* The endpoint that carries ch for node i: a standalone node's own; for a
 * cluster (see the top of this file) the master of the channel's slot, or
 * the first seed without sharded pub/sub; -1 before the cluster's map is
 * known. Takes the cluster's mutex (after ps->mu: never the other way). */
static int target(const struct pubsub *ps, const struct channel *ch, int node)
{
    int b = ps->base[node];
    struct cluster *cl = ps->subs[b].cl;
    if (!cl)
        return b;
    if (!cluster_loaded(cl))
        return -1;
    if (!cluster_sharded(cl))
        return b;
    int m = cluster_master_of(cl, ch->hslot);
    return m < 0 ? -1 : b + m;
}

/* Confirmed on every node that is not known to be down or to refuse it. */
static bool ready(const struct pubsub *ps, const struct channel *ch)
{
    for (int node = 0; node < ps->client->n_nodes; node++) {
        int i = target(ps, ch, node);
        if (i < 0 || (!confirmed(ch, i) && !ps->subs[i].failed && !ch->node[i].refused))
            return false;
    }
    return true;
}

/* ---- waiters --------------------------------------------------------------- */

struct channel *pubsub_join(struct pubsub *ps, const char *name, size_t len)
{
    pthread_mutex_lock(&ps->mu);
    struct channel *ch = find(ps, name, len);
    if (!ch) {
        ch = calloc(1, sizeof *ch + sizeof ch->node[0] * (size_t)ps->n);
        if (ch && !(ch->name = malloc(len))) {
            free(ch);
            ch = NULL;
        }
        if (ch) {
            memcpy(ch->name, name, len);
            ch->len = len;
            ch->hslot = (int)slot_of(name, len);
            pthread_condattr_t attr;
            pthread_condattr_init(&attr);
            pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
            pthread_cond_init(&ch->cond, &attr);
            pthread_cond_init(&ch->msg, &attr);
            pthread_condattr_destroy(&attr);
            ch->next = ps->channels;
            ps->channels = ch;
        }
    }
    bool need_thread = false;
    if (ch) {
        if (ch->refs++ == 0) {
            ch->poll_at_ns = rlc_now_ns() + SAFETY_POLL_NS;
            ch->expires_ns = RLC_FOREVER_NS;
        }
        for (int i = 0; i < ps->n; i++) {
            /* A refusal is asked again by each new waiter: the ACL may have
             * been fixed since. */
            if (ch->node[i].refused && ch->node[i].inflight == 0)
                ch->node[i] = (struct node_sub){false, false, false, 0};
            need_thread = need_thread || !ch->node[i].sent;
        }
    }
    pthread_mutex_unlock(&ps->mu);
    if (need_thread)
        client_wake_thread(ps->client);
    return ch;
}

static void timed_wait(struct channel *ch, pthread_mutex_t *mu, int64_t deadline_ns)
{
    struct timespec ts = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
    pthread_cond_timedwait(&ch->cond, mu, &ts);
}

void pubsub_wait_ready(struct pubsub *ps, struct channel *ch, int64_t deadline_ns,
                       const struct cancel_point *cp)
{
    pthread_mutex_lock(&ps->mu);
    while (!ps->stopped && !ready(ps, ch) && !cancel_requested(cp) &&
           rlc_now_ns() < deadline_ns)
        timed_wait(ch, &ps->mu, deadline_ns);
    pthread_mutex_unlock(&ps->mu);
}

uint64_t pubsub_seq(struct pubsub *ps, struct channel *ch)
{
    pthread_mutex_lock(&ps->mu);
    uint64_t seq = ch->seq;
    pthread_mutex_unlock(&ps->mu);
    return seq;
}

int pubsub_refused(struct pubsub *ps, struct channel *ch, char *why, size_t size)
{
    int n = 0;
    pthread_mutex_lock(&ps->mu);
    for (int i = 0; i < ps->n; i++)
        if (ch->node[i].refused && n++ == 0)
            snprintf(why, size, "%s", ps->subs[i].refusal);
    pthread_mutex_unlock(&ps->mu);
    return n;
}

void pubsub_holder_expires(struct pubsub *ps, struct channel *ch, int64_t at_ns)
{
    pthread_mutex_lock(&ps->mu);
    ch->expires_ns = at_ns;
    pthread_mutex_unlock(&ps->mu);
}

/* One unlock message wakes one waiter, as Redisson's unlock latch does: only
 * one can win the lock, and waking them all makes every waiter send a try and
 * every loser wake up for its reply, which on a few cores delays the winner
 * by several context switches. A resubscription wakes everyone (seq). The
 * channel's timer (the holder's lease end, else the safety poll) wakes the
 * one waiter that claims it first. */
void pubsub_wait(struct pubsub *ps, struct channel *ch, uint64_t seq, int64_t deadline_ns,
                 const struct cancel_point *cp)
{
    pthread_mutex_lock(&ps->mu);
    for (;;) {
        int64_t now = rlc_now_ns();
        if (ps->stopped || ch->seq != seq || now >= deadline_ns || cancel_requested(cp))
            break;
        if (ch->permits > 0) {
            ch->permits--;
            break;
        }
        int64_t due = ch->expires_ns < ch->poll_at_ns ? ch->expires_ns : ch->poll_at_ns;
        if (now >= due) { /* this waiter's turn to look */
            ch->poll_at_ns = now + SAFETY_POLL_NS;
            ch->expires_ns = RLC_FOREVER_NS;
            break;
        }
        int64_t until = due < deadline_ns ? due : deadline_ns;
        struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
        pthread_cond_timedwait(&ch->msg, &ps->mu, &ts);
    }
    /* Leaving without the permit it was woken for (deadline, resubscription):
     * pass it on, or another waiter would sleep until its fallback timer. */
    if (ch->permits > 0)
        pthread_cond_signal(&ch->msg);
    pthread_mutex_unlock(&ps->mu);
}

void pubsub_pause(struct pubsub *ps, struct channel *ch, int64_t until_ns,
                  const struct cancel_point *cp)
{
    pthread_mutex_lock(&ps->mu);
    /* ch->cond, not ch->msg: a pause must not take an unlock message's
     * permit from a waiter that sleeps for one. */
    while (!ps->stopped && !cancel_requested(cp) && rlc_now_ns() < until_ns)
        timed_wait(ch, &ps->mu, until_ns);
    pthread_mutex_unlock(&ps->mu);
}

static void wake_everyone(struct channel *ch);

/* The cancel count was raised before this takes mu, and a sleeper looks at
 * it under mu before it sleeps: so it either sees the cancel or is asleep
 * when the broadcast comes, never in between. */
void pubsub_wake_channel(struct pubsub *ps, const char *name, size_t len)
{
    pthread_mutex_lock(&ps->mu);
    struct channel *ch = find(ps, name, len);
    if (ch && ch->refs > 0)
        wake_everyone(ch);
    pthread_mutex_unlock(&ps->mu);
}

void pubsub_notify_local(struct pubsub *ps, const char *name, size_t len)
{
    pthread_mutex_lock(&ps->mu);
    struct channel *ch = find(ps, name, len);
    if (ch && ch->refs > 0) {
        if (ch->permits < ch->refs)
            ch->permits++;
        pthread_cond_signal(&ch->msg);
    }
    pthread_mutex_unlock(&ps->mu);
}

void pubsub_leave(struct pubsub *ps, struct channel *ch)
{
    pthread_mutex_lock(&ps->mu);
    if (--ch->refs == 0)
        ch->idle_since_ns = rlc_now_ns();
    else if (ch->permits > 0) /* see pubsub_wait: never strand a permit */
        pthread_cond_signal(&ch->msg);
    pthread_mutex_unlock(&ps->mu);
}

static void wake_everyone(struct channel *ch)
{
    pthread_cond_broadcast(&ch->cond);
    pthread_cond_broadcast(&ch->msg);
}

static void wake_all(struct pubsub *ps)
{
    for (struct channel *ch = ps->channels; ch; ch = ch->next)
        wake_everyone(ch);
}

void pubsub_wake_all(struct pubsub *ps)
{
    if (!ps)
        return;
    pthread_mutex_lock(&ps->mu);
    wake_all(ps);
    pthread_mutex_unlock(&ps->mu);
}

void pubsub_stop(struct pubsub *ps)
{
    pthread_mutex_lock(&ps->mu);
    ps->stopped = true;
    wake_all(ps);
    pthread_mutex_unlock(&ps->mu);
}

/* ---- the background thread's side --------------------------------------- */

static void node_down(struct pubsub *ps, int i, int64_t now)
{
    struct subconn *s = &ps->subs[i];
    conn_close(&s->conn);
    forget_sent(s);
    for (struct channel *ch = ps->channels; ch; ch = ch->next)
        ch->node[i] = (struct node_sub){false, false, false, 0};
    s->failed = true;
    if (s->cl) /* its master may have failed over */
        cluster_want_refresh(s->cl);
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : 10;
    if (s->backoff_ms > MAX_BACKOFF_MS)
        s->backoff_ms = MAX_BACKOFF_MS;
    s->retry_at_ns = now + s->backoff_ms * RLC_NS_PER_MS;
    wake_all(ps); /* waiters stop waiting for this node's confirmation */
}

/* A cluster with sharded pub/sub: the S-verbs. Fixed once its map is read. */
static bool sharded(const struct subconn *s)
{
    return s->cl && cluster_sharded(s->cl);
}

static int queue_cmd(struct subconn *s, bool subscribe, struct channel *ch)
{
    const char *verb = sharded(s) ? (subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                                  : (subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
    const char *argv[2] = {verb, ch->name};
    size_t lens[2] = {strlen(verb), ch->len};
    struct sent_cmd *sc = malloc(sizeof *sc);
    struct rlc_cmd *cmd = cmd_format(2, argv, lens);
    int rc = cmd && sc ? conn_queue(&s->conn, cmd->data, cmd->len) : RLC_E_NOMEM;
    cmd_unref(cmd);
    if (rc != RLC_OK) {
        free(sc);
        return rc;
    }
    *sc = (struct sent_cmd){NULL, ch, subscribe};
    if (s->tail)
        s->tail->next = sc;
    else
        s->head = sc;
    s->tail = sc;
    return RLC_OK;
}

/* Sends the (UN)SUBSCRIBEs that bring node i in line with what is wanted. */
static void sync_node(struct pubsub *ps, int i, int64_t now)
{
    (void)now;
    for (struct channel *ch = ps->channels; ch; ch = ch->next) {
        struct node_sub *ns = &ch->node[i];
        bool want = ns->want;
        if (want != ns->sent && queue_cmd(&ps->subs[i], want, ch) == RLC_OK) {
            ns->sent = want;
            ns->inflight++;
        }
    }
}

/* The oldest unanswered (UN)SUBSCRIBE of node i, taken off its FIFO. */
static struct sent_cmd *take_sent(struct subconn *s)
{
    struct sent_cmd *sc = s->head;
    if (sc && !(s->head = sc->next))
        s->tail = NULL;
    return sc;
}

/* An error reply answers the oldest command: a refused SUBSCRIBE (NOPERM
 * for an ACL user without the channel) is kept, not retried in a loop;
 * the next waiter to join asks again. */
static void on_error(struct pubsub *ps, int i, const redisReply *r)
{
    struct subconn *s = &ps->subs[i];
    struct sent_cmd *sc = take_sent(s);
    if (!sc)
        return;
    struct channel *ch = sc->ch;
    if (ch->node[i].inflight > 0)
        ch->node[i].inflight--;
    if (s->cl && r->len > 6 && strncmp(r->str, "MOVED ", 6) == 0) {
        /* A SSUBSCRIBE that reached a node no longer serving the slot:
         * not a refusal. The map learns the move and the channel goes
         * where it says at the next prepare. */
        cluster_note_moved(s->cl, r->str + 6, r->len - 6);
        if (sc->subscribe && ch->node[i].sent)
            ch->node[i].sent = false;
        client_wake_thread(ps->client);
    } else if (sc->subscribe && ch->node[i].sent) {
        ch->node[i].refused = true;
        snprintf(s->refusal, sizeof s->refusal, "SUBSCRIBE %.*s refused by %s: %.*s",
                 (int)(ch->len > 80 ? 80 : ch->len), ch->name, s->conn.node->label,
                 (int)(r->len > 120 ? 120 : r->len), r->str);
        wake_everyone(ch);
    }
    free(sc);
}

/* Frees channels nobody wants that no node is subscribed to any more. */
static void sweep(struct pubsub *ps, int64_t now, int64_t *next_ns)
{
    for (struct channel **p = &ps->channels; *p;) {
        struct channel *ch = *p;
        bool busy = wanted(ch, now);
        for (int i = 0; i < ps->n && !busy; i++)
            busy = ch->node[i].sent || ch->node[i].inflight > 0;
        if (!busy) {
            *p = ch->next;
            channel_free(ch);
            continue;
        }
        if (ch->refs == 0 && ch->idle_since_ns + LINGER_NS < *next_ns &&
            now < ch->idle_since_ns + LINGER_NS)
            *next_ns = ch->idle_since_ns + LINGER_NS;
        p = &ch->next;
    }
}

/* Where each channel should be subscribed now (node_sub.want). */
static void mark_wanted(struct pubsub *ps, int64_t now)
{
    rlc_client *c = ps->client;
    for (struct channel *ch = ps->channels; ch; ch = ch->next) {
        bool want = wanted(ch, now);
        for (int node = 0; node < c->n_nodes; node++) {
            int t = want ? target(ps, ch, node) : -1;
            int b = ps->base[node], k = c->clusters[node] ? RLC_CLUSTER_MAX_NODES : 1;
            for (int e = b; e < b + k; e++)
                ch->node[e].want = e == t;
        }
    }
}

/* A cluster's endpoint is connected only while a channel is, or should
 * be, subscribed on it. */
static bool endpoint_needed(const struct pubsub *ps, int i)
{
    for (const struct channel *ch = ps->channels; ch; ch = ch->next)
        if (ch->node[i].want || ch->node[i].sent || ch->node[i].inflight > 0)
            return true;
    return false;
}

int pubsub_prepare(struct pubsub *ps, struct pollfd *pfd, int max, int64_t *next_ns)
{
    int np = 0;
    char err[RLC_ERRLEN];
    pthread_mutex_lock(&ps->mu);
    int64_t now = rlc_now_ns();
    int64_t connect_ns = ps->client->opts.connect_timeout_ms * RLC_NS_PER_MS;
    sweep(ps, now, next_ns);
    mark_wanted(ps, now);
    for (int i = 0; i < ps->n && np < max; i++) {
        struct subconn *s = &ps->subs[i];
        if (s->conn.state == CONN_CLOSED) {
            if (!ps->channels || (s->cl && !endpoint_needed(ps, i)))
                continue;
            if (!s->inited) {
                conn_init(&s->conn, cluster_node_addr(s->cl, s->entry), false);
                s->inited = true;
            }
            if (now < s->retry_at_ns) {
                if (s->retry_at_ns < *next_ns)
                    *next_ns = s->retry_at_ns;
                continue;
            }
            if (conn_start(&s->conn, err) != RLC_OK) {
                node_down(ps, i, now);
                if (s->retry_at_ns < *next_ns)
                    *next_ns = s->retry_at_ns;
                continue;
            }
        }
        /* A sentinel node's master moved: subscribe on the new one (the
         * old one, as a replica, would still relay its publishes, but
         * it may also be gone). Waiters are woken to look again. */
        if (conn_moved(&s->conn) || (s->conn.state == CONN_CONNECTING &&
                                     now - s->conn.connect_started_ns > connect_ns)) {
            node_down(ps, i, now);
            continue;
        }
        if (s->conn.state == CONN_CONNECTING) {
            int64_t give_up = s->conn.connect_started_ns + connect_ns;
            if (give_up < *next_ns)
                *next_ns = give_up;
        }
        sync_node(ps, i, now);
        if (s->conn.state == CONN_READY && s->conn.out_len > 0 &&
            conn_flush(&s->conn, err) != RLC_OK) {
            node_down(ps, i, now);
            continue;
        }
        pfd[np] = (struct pollfd){s->conn.fd, conn_events(&s->conn), 0};
        ps->polled[np++] = i;
    }
    pthread_mutex_unlock(&ps->mu);
    return np;
}

static bool is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* ["subscribe"|"unsubscribe"|"message", channel, x], or an error reply */
static void on_push(struct pubsub *ps, int i, const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        on_error(ps, i, r);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const redisReply *kind = r->element[0], *name = r->element[1];
    struct channel *ch = find(ps, name->str, name->len);
    struct subconn *s = &ps->subs[i];
    if (!ch)
        return;
    if (is(kind, "sunsubscribe") && (!s->head || s->head->ch != ch || s->head->subscribe)) {
        /* Not ours: the server dropped the subscription because the slot
         * moved away (Redis 7). Subscribe where the map will say, and let
         * every waiter look again meanwhile. */
        ch->node[i].sent = false;
        if (s->cl)
            cluster_want_refresh(s->cl);
        ch->seq++;
        wake_everyone(ch);
        client_wake_thread(ps->client);
        return;
    }
    if (is(kind, "message") || is(kind, "smessage")) {
        /* A permit for one waiter; more than one per waiter is never used.
         * The lock family (docs/FAMILY.md): payload 1, Redisson's
         * READ_UNLOCK_MESSAGE, wakes every waiter; a semaphore's count n > 1
         * wakes n. */
        long wake = 1;
        if (r->element[2]->type == REDIS_REPLY_STRING) {
            long v = strtol(r->element[2]->str, NULL, 10);
            wake = v == 1 ? ch->refs : v > 1 ? v : 1;
        }
        ch->permits = ch->permits + wake < ch->refs ? ch->permits + (int)wake : ch->refs;
        if (wake > 1)
            pthread_cond_broadcast(&ch->msg);
        else
            pthread_cond_signal(&ch->msg);
    } else if (is(kind, "subscribe") || is(kind, "unsubscribe") || is(kind, "ssubscribe") ||
               is(kind, "sunsubscribe")) {
        free(take_sent(&ps->subs[i]));
        if (ch->node[i].inflight > 0)
            ch->node[i].inflight--;
        if (confirmed(ch, i)) {
            ps->subs[i].backoff_ms = 0;
            ch->seq++;
            wake_everyone(ch);
        }
    }
}

void pubsub_service(struct pubsub *ps, const struct pollfd *pfd, int n)
{
    char err[RLC_ERRLEN];
    pthread_mutex_lock(&ps->mu);
    int64_t now = rlc_now_ns();
    for (int j = 0; j < n; j++) {
        int i = ps->polled[j];
        struct subconn *s = &ps->subs[i];
        if (!pfd[j].revents || s->conn.fd != pfd[j].fd)
            continue;
        int rc = RLC_OK;
        if (s->conn.state == CONN_CONNECTING)
            rc = conn_finish_connect(&s->conn, err);
        if (rc == RLC_OK && s->conn.state == CONN_READY) {
            s->failed = false;
            if (pfd[j].revents & (POLLIN | POLLERR | POLLHUP))
                rc = conn_read(&s->conn, err);
            redisReply *reply;
            int k;
            while (rc == RLC_OK && (k = conn_next_reply(&s->conn, &reply, err)) != 0) {
                if (k < 0) {
                    rc = k;
                    break;
                }
                on_push(ps, i, reply);
                freeReplyObject(reply);
            }
            if (rc == RLC_OK && s->conn.out_len > 0)
                rc = conn_flush(&s->conn, err);
        }
        if (rc != RLC_OK)
            node_down(ps, i, now);
    }
    pthread_mutex_unlock(&ps->mu);
}
