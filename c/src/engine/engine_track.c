/*
 * engine_track.c - loss pushed at once, in the engine.
 *
 * Without this a holder learns that its key was deleted, overwritten or
 * expired at its next renewal, up to lease/3 later. Redis can say so within
 * a round trip: a connection with CLIENT TRACKING remembers the keys it read
 * and, when one changes, sends an invalidation. In RESP2 the message goes to
 * another connection that subscribes to __redis__:invalidate, named by
 * REDIRECT <its client id>. So per node the engine keeps a pair of its own:
 *   sub (TRK_SUB)  CLIENT ID, SUBSCRIBE __redis__:invalidate; only receives;
 *   rd  (TRK_RD)   CLIENT TRACKING ON REDIRECT <sub's id>, then only reads:
 *                  EXISTS of held keys (registers them) and verify scripts.
 * Not the command connection: our own writes there would, with NOLOOP,
 * take the key out of Redis' tracking table after the first renewal; and
 * without NOLOOP every renewal would still cost a verify, as here.
 *
 * An invalidation decides nothing: it marks the holds of that key dirty.
 * A verify round then asks, on every node whose reader is tracking, the
 * renewal script's own test without its writes (script_verify), and a hold
 * found gone on more than n - quorum nodes is lost: exactly what a renewal
 * round with those answers would decide (quorum_renew_end). The verdict is
 * handed to the watchdog (engine_renew.c) through the hold's timer, so this
 * file never calls up into the kinds of operation.
 *
 * Registration is one-shot in Redis (a key is forgotten once invalidated),
 * and each verify re-reads the key right before its script on the same
 * connection: a change after the verify is pushed, a change before it is
 * seen by it. A flush (nil payload) or a new reader (messages may have been
 * missed) makes every joined hold dirty. A node that refuses any step (an
 * ACL user without +client or the channel, Redis before 6) is left to
 * detection at renewal and asked again a minute later.
 *
 * Nodes of redis-cluster:// make the whole engine's loss push off (as in the
 * blocking driver): a key's master changes, a pair per master is left for
 * later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "lock_calls.h"
#include "quorum.h"

#define CHUNK 256
#define REFUSED_RETRY_MS 60000
#define CHANNEL "__redis__:invalidate"

struct track_node {
    long long id;           /* sub's CLIENT ID; -1 not known yet */
    bool subscribed;        /* sub confirmed the channel */
    bool on;                /* rd answered CLIENT TRACKING: its reads register */
    int64_t refused_until;  /* a refusal: not asked again before this */
    bool in_round;          /* owes answers to the round in flight */
    int answered;           /* verify chunks of that round answered */
};

struct tracker {
    int first;              /* node i's sub is conns[first + 2i], its rd the next */
    struct track_node *nodes;
    bool wanted;            /* a watchdog hold joined: the pairs are wanted */
    struct hold **dirty;    /* holds to verify in the next round */
    size_t n_dirty, cap_dirty;
    /* the round in flight: its holds, the level each was verified for, and
     * per hold and node 1 ours, 0 gone, -1 no answer */
    bool active;
    struct hold **rh;
    uint64_t *rlevel;
    int rn, chunks;
    signed char *v;
    int64_t deadline;
    bool kick;              /* dirty holds wait for the next round */
    struct timer timer;
};

int track_conns(const rlc_engine *e)
{
    if (!e->opts.loss_push)
        return 0;
    for (int i = 0; i < e->n; i++)
        if (e->addrs[i].topology == RLC_TOPO_CLUSTER)
            return 0;
    return 2 * e->n;
}

int track_make(rlc_engine *e, int first_conn)
{
    if (track_conns(e) == 0)
        return 0;
    struct tracker *t = calloc(1, sizeof *t);
    if (!t || !(t->nodes = calloc((size_t)e->n, sizeof *t->nodes))) {
        free(t);
        return -1;
    }
    t->first = first_conn;
    t->timer.at = -1;
    for (int i = 0; i < e->n; i++) {
        t->nodes[i].id = -1;
        for (int k = 0; k < 2; k++) {
            struct conn *c = &e->conns[first_conn + 2 * i + k];
            c->node = i;
            c->sub = false;
            c->track = k == 0 ? TRK_SUB : TRK_RD;
        }
    }
    e->track = t;
    return 0;
}

static void round_forget(struct tracker *t)
{
    free(t->rh);
    free(t->rlevel);
    free(t->v);
    t->rh = NULL;
    t->rlevel = NULL;
    t->v = NULL;
    t->rn = t->chunks = 0;
    t->active = false;
}

void track_free(rlc_engine *e)
{
    struct tracker *t = e->track;
    if (!t)
        return;
    timer_clear(&t->timer);
    round_forget(t);
    free(t->dirty);
    free(t->nodes);
    free(t);
    e->track = NULL;
}

struct conn *track_conn(rlc_engine *e, int node, int which)
{
    return e->track ? &e->conns[e->track->first + 2 * node + (which == TRK_RD)] : NULL;
}

/* ---- when to look again ------------------------------------------------------ */

static void schedule(rlc_engine *e)
{
    struct tracker *t = e->track;
    int64_t at = t->kick ? e->now : t->active ? t->deadline : -1;
    /* a pair to reopen (after a refusal or a failed connect): the driver
     * looks at want_open again after every call, so a timer brings it back */
    for (int i = 0; t->wanted && i < e->n; i++) {
        const struct conn *c = track_conn(e, i, TRK_SUB);
        if (c->state != C_DOWN)
            continue;
        int64_t due = t->nodes[i].refused_until > c->retry_at ? t->nodes[i].refused_until
                                                                : c->retry_at;
        if (due > e->now && (at < 0 || due < at))
            at = due;
    }
    timer_set(e, &t->timer, T_TRACK, t, at);
}

/* ---- holds ------------------------------------------------------------------- */

static bool any_on(const struct tracker *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t->nodes[i].on)
            return true;
    return false;
}

static void mark_dirty(rlc_engine *e, struct hold *h)
{
    struct tracker *t = e->track;
    /* with no reader tracking, nothing can be verified; the first one that
     * comes marks every joined hold (a list of holds nobody can verify
     * would only keep dead ones alive) */
    if (h->track_dirty || !h->track_joined || !any_on(t, e->n))
        return;
    if (t->n_dirty == t->cap_dirty) {
        size_t cap = t->cap_dirty ? 2 * t->cap_dirty : 64;
        struct hold **d = realloc(t->dirty, cap * sizeof *d);
        if (!d)
            abort();
        t->dirty = d;
        t->cap_dirty = cap;
    }
    t->dirty[t->n_dirty++] = h;
    h->track_dirty = true;
    if (!t->kick) {
        t->kick = true;
        schedule(e);
    }
}

static void dirty_lock(rlc_engine *e, struct eng_lock *l)
{
    for (struct hold *h = l->holds; h; h = h->next)
        mark_dirty(e, h);
}

static void dirty_all(rlc_engine *e)
{
    for (int b = 0; b < ENG_BUCKETS; b++)
        for (struct eng_lock *l = e->buckets[b]; l; l = l->next)
            dirty_lock(e, l);
}

void track_join(rlc_engine *e, struct hold *h)
{
    if (!e->track)
        return;
    e->track->wanted = true;
    h->track_joined = true;
    mark_dirty(e, h);
}

/* A key named by an invalidation: the lock it is, if we hold it. */
static void invalidated(rlc_engine *e, const char *key, size_t len)
{
    size_t plen = strlen(e->opts.key_prefix);
    if (len < plen || memcmp(key, e->opts.key_prefix, plen) != 0)
        return;
    struct eng_lock *l = lock_find(e, key + plen, len - plen);
    if (l)
        dirty_lock(e, l);
}

/* ---- a verify round --------------------------------------------------------- */

/* Still to be verified for the level it was sent with: a watchdog hold, not
 * lost, not being let go (a release that ran makes it "gone" by right). */
static bool verifiable(const struct hold *h)
{
    if (h->count <= 0 || h->lost || !h->watchdog || h->n_levels == 0 || !h->track_joined)
        return false;
    for (const struct eng_op *op = h->ops_head; op; op = op->next)
        if (op->kind == OP_RELEASE)
            return false;
    return true;
}

static void send_chunks(rlc_engine *e, int node)
{
    struct tracker *t = e->track;
    struct conn *rd = track_conn(e, node, TRK_RD);
    struct lock_names names[CHUNK];
    const char *fields[CHUNK];
    size_t lens[CHUNK];
    for (int k = 0; k < t->chunks; k++) {
        int first = k * CHUNK, m = t->rn - first < CHUNK ? t->rn - first : CHUNK;
        for (int j = 0; j < m; j++) {
            const struct hold *h = t->rh[first + j];
            names[j] = eng_names(h->lock);
            fields[j] = h->field;
            lens[j] = h->field_len;
        }
        struct rlc_cmd *ex = call_exists_many(m, names);
        struct rlc_cmd *ve = call_verify_many(m, names, e->uuid, fields, lens, t->rlevel + first);
        if (!ex || !ve)
            abort();
        /* the requests own the commands */
        conn_put(e, rd, conn_own_req(e, node, R_EXISTS, ex), false);
        conn_put(e, rd, conn_own_req(e, node, R_VERIFY, ve), false);
    }
}

static void decide(rlc_engine *e)
{
    struct tracker *t = e->track;
    for (int j = 0; j < t->rn; j++) {
        struct hold *h = t->rh[j];
        h->verifying--;
        int gone = 0;
        for (int i = 0; i < e->n; i++)
            gone += t->v[(size_t)j * (size_t)e->n + (size_t)i] == 0;
        /* the renewal round's rule with these answers (no yes counted) */
        if (verifiable(h) && h->levels[0] == t->rlevel[j] &&
            quorum_renew_end(e->n, 0, gone, 1) == QE_NOT_HELD) {
            h->verify_gone = true;
            timer_set(e, &h->timer, T_HOLD, h, e->now); /* the watchdog loses it */
        }
        hold_maybe_free(e, h);
    }
    round_forget(t);
    for (int i = 0; i < e->n; i++)
        t->nodes[i].in_round = false;
    if (t->n_dirty)
        t->kick = true;
    schedule(e);
}

static void node_done(rlc_engine *e, int node)
{
    struct tracker *t = e->track;
    if (!t->active || !t->nodes[node].in_round)
        return;
    t->nodes[node].in_round = false;
    for (int i = 0; i < e->n; i++)
        if (t->nodes[i].in_round)
            return;
    decide(e);
}

static void start_round(rlc_engine *e)
{
    struct tracker *t = e->track;
    t->kick = false;
    if (t->active)
        return;
    size_t n = t->n_dirty;
    t->rh = malloc(sizeof *t->rh * (n ? n : 1));
    t->rlevel = malloc(sizeof *t->rlevel * (n ? n : 1));
    t->v = malloc((n ? n : 1) * (size_t)e->n);
    if (!t->rh || !t->rlevel || !t->v)
        abort();
    for (size_t k = 0; k < n; k++) {
        struct hold *h = t->dirty[k];
        h->track_dirty = false;
        if (verifiable(h)) {
            h->verifying++;
            t->rlevel[t->rn] = h->levels[0];
            t->rh[t->rn++] = h;
        } else {
            hold_maybe_free(e, h);
        }
    }
    t->n_dirty = 0;
    if (t->rn == 0) {
        round_forget(t);
        schedule(e);
        return;
    }
    memset(t->v, -1, (size_t)t->rn * (size_t)e->n);
    t->chunks = (t->rn + CHUNK - 1) / CHUNK;
    t->active = true;
    t->deadline = e->now + e->call_timeout_ms;
    bool sent = false;
    for (int i = 0; i < e->n; i++) {
        struct track_node *tn = &t->nodes[i];
        tn->in_round = tn->on && track_conn(e, i, TRK_RD)->state == C_UP;
        tn->answered = 0;
        if (tn->in_round) {
            send_chunks(e, i);
            sent = true;
        }
    }
    if (!sent)
        decide(e); /* nobody to ask: nothing is decided, the holds go back */
    else
        schedule(e);
}

void track_timer(rlc_engine *e, int64_t now)
{
    struct tracker *t = e->track;
    if (!t)
        return;
    if (t->active && now >= t->deadline) {
        /* A reader that did not answer in time is given up: its late
         * answers must not be read as the next round's. */
        for (int i = 0; i < e->n; i++)
            if (t->nodes[i].in_round)
                conn_drop(e, track_conn(e, i, TRK_RD), RLC_E_TIMEOUT,
                          "loss push: a verify was not answered in time");
        for (int i = 0; i < e->n; i++)
            t->nodes[i].in_round = false;
        decide(e);
    }
    if (t->kick)
        start_round(e);
    schedule(e);
}

/* ---- the connections ------------------------------------------------------- */

int track_want_open(const rlc_engine *e, const struct conn *c)
{
    const struct tracker *t = e->track;
    if (!t)
        return 0;
    if (c->state == C_DROPPED)
        return -1;
    if (c->state == C_UP || c->state == C_CONNECTING)
        return 1;
    if (c->track == TRK_RD)
        return c->qhead && e->now >= c->retry_at ? 1 : 0;
    return t->wanted && e->n_holds > 0 && e->now >= t->nodes[c->node].refused_until &&
                   e->now >= c->retry_at
               ? 1
               : 0;
}

/* The pair of node is over (one end closed, or a refusal): both go, and
 * the round has nothing more from the node. */
static void pair_down(rlc_engine *e, int node, int why, const char *msg)
{
    struct track_node *tn = &e->track->nodes[node];
    tn->id = -1;
    tn->subscribed = tn->on = false;
    for (int k = TRK_SUB; k <= TRK_RD; k++) {
        struct conn *c = track_conn(e, node, k);
        if (c->state != C_DROPPED && (c->state != C_DOWN || c->qhead))
            conn_drop(e, c, why, msg);
    }
    node_done(e, node);
    schedule(e);
}

static void refused(rlc_engine *e, int node, const char *what)
{
    char msg[300];
    snprintf(msg, sizeof msg,
             "loss_push: %s refused %.200s; a lost lock is found at its next renewal there",
             e->addrs[node].label, what);
    e->track->nodes[node].refused_until = e->now + REFUSED_RETRY_MS;
    pair_down(e, node, RLC_E_SERVER, msg);
}

void track_connected(rlc_engine *e, struct conn *c)
{
    if (!e->track || c->track != TRK_SUB || c->state != C_UP)
        return;
    static const char *const id[2] = {"CLIENT", "ID"};
    static const char *const sub[2] = {"SUBSCRIBE", CHANNEL};
    conn_append_cmd(e, c, 2, id, NULL);
    conn_append_cmd(e, c, 2, sub, NULL);
}

/* The reader of node asks for tracking redirected to the subscriber (its
 * first request on every new connection). */
static void queue_track_on(rlc_engine *e, int node)
{
    char idbuf[24];
    const char *argv[5] = {"CLIENT", "TRACKING", "ON", "REDIRECT", idbuf};
    size_t lens[5] = {6, 8, 2, 8, cmd_i64(idbuf, e->track->nodes[node].id)};
    struct rlc_cmd *cmd = cmd_format(5, argv, lens);
    if (!cmd)
        abort();
    conn_put(e, track_conn(e, node, TRK_RD), conn_own_req(e, node, R_TRACK_ON, cmd),
             false); /* the request owns cmd */
}

void track_closed(rlc_engine *e, struct conn *c)
{
    if (!e->track)
        return;
    int node = c->node;
    if (c->track == TRK_SUB) {
        pair_down(e, node, RLC_E_CONNECT, "loss push: the invalidation subscriber closed");
        return;
    }
    e->track->nodes[node].on = false;
    node_done(e, node);
    /* the subscriber is still there: track again on a new reader */
    if (track_conn(e, node, TRK_SUB)->state == C_UP && e->track->nodes[node].subscribed)
        queue_track_on(e, node);
    schedule(e);
}

static bool is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && strlen(s) == r->len && memcmp(r->str, s, r->len) == 0;
}

static void on_sub_reply(rlc_engine *e, struct conn *c, const redisReply *r)
{
    struct track_node *tn = &e->track->nodes[c->node];
    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "NOAUTH") || strstr(r->str, "WRONGPASS"))
            pair_down(e, c->node, RLC_E_AUTH, r->str); /* retried with backoff */
        else
            refused(e, c->node, r->str);
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && tn->id < 0) {
        tn->id = r->integer;
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || !is(r->element[1], CHANNEL))
        return; /* +OK of the handshake */
    if (is(r->element[0], "subscribe")) {
        tn->subscribed = true;
        /* a reader still being let go asks when it has closed (track_closed) */
        if (tn->id >= 0 && track_conn(e, c->node, TRK_RD)->state != C_DROPPED)
            queue_track_on(e, c->node);
        return;
    }
    if (!is(r->element[0], "message"))
        return;
    const redisReply *keys = r->element[2];
    if (keys->type == REDIS_REPLY_ARRAY) {
        for (size_t k = 0; k < keys->elements; k++)
            if (keys->element[k]->type == REDIS_REPLY_STRING)
                invalidated(e, keys->element[k]->str, keys->element[k]->len);
    } else {
        dirty_all(e); /* FLUSHALL, FLUSHDB: every key */
    }
}

int track_sub_received(rlc_engine *e, struct conn *c, const char *data, size_t len)
{
    if (conn_feed(e, c, data, len) != RLC_OK) {
        pair_down(e, c->node, RLC_E_PROTOCOL, "loss push: unreadable bytes");
        return RLC_E_PROTOCOL;
    }
    redisReply *r;
    int got;
    while ((got = conn_next(e, c, &r)) > 0) {
        on_sub_reply(e, c, r);
        freeReplyObject(r);
        if (c->state != C_UP)
            break;
    }
    if (got < 0) {
        pair_down(e, c->node, RLC_E_PROTOCOL, "loss push: unreadable bytes");
        return RLC_E_PROTOCOL;
    }
    return RLC_OK;
}

void track_reader_reply(rlc_engine *e, struct conn *c, struct req *r, const redisReply *reply)
{
    struct tracker *t = e->track;
    struct track_node *tn = &t->nodes[c->node];
    if (r->kind == R_TRACK_ON) {
        if (reply->type == REDIS_REPLY_ERROR) {
            refused(e, c->node, reply->str);
            return;
        }
        tn->on = true;
        dirty_all(e); /* changes before this reader were never pushed */
        return;
    }
    if (r->kind != R_VERIFY || !t->active || !tn->in_round)
        return; /* EXISTS: it registered the keys, its count says nothing */
    int k = tn->answered++;
    int first = k * CHUNK, m = t->rn - first < CHUNK ? t->rn - first : CHUNK;
    for (int j = 0; j < m; j++) {
        /* an error (OOM, a script refused) is no answer, never "gone" */
        int a = answer_renew(reply, (size_t)j);
        if (a >= 0)
            t->v[(size_t)(first + j) * (size_t)e->n + (size_t)c->node] = (signed char)a;
    }
    if (tn->answered == t->chunks)
        node_done(e, c->node);
}
