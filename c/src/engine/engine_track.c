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
 * detection at renewal and asked again a minute later; the first refusal
 * of each pair is a warning for the driver to log (engine_log.c).
 *
 * On a redis-cluster:// node a key lives on its slot's master, so there is
 * a pair per master of the node's map (a "unit"; a standalone or sentinel
 * node is one unit). A hold is verified on the unit that owns its slot now,
 * in chunks of one slot (a cluster refuses a call across slots), which
 * also registers it there. A key that moves (a resharding's MIGRATE, a
 * failover) is deleted where it was or that master's pair closes: either
 * way the hold is verified again, on its new master once the map says so. A
 * verify answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN (a master restarted
 * answers CLUSTERDOWN until it has rejoined) did not run: it is no answer,
 * the map is asked for, and the hold is verified again a moment later.
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
#define MOVED_RECHECK_MS 100 /* a redirected verify: again once the map had time, */
#define MOVED_RECHECK_MAX 3    /* doubling while it is redirected in a row (to 400 ms) */
#define CHANNEL "__redis__:invalidate"

/* A pair: node's, or on a cluster node one master's of its map. */
struct track_unit {
    int node;
    int master;             /* a cluster node's master index; -1: the node itself */
    long long id;           /* sub's CLIENT ID; -1 not known yet */
    bool subscribed;        /* sub confirmed the channel */
    bool on;                /* rd answered CLIENT TRACKING: its reads register */
    int64_t refused_until;  /* a refusal: not asked again before this */
    bool warned;            /* a refusal was passed on (once per unit) */
    /* the round in flight: the rows (holds) asked here, cut in chunks of
     * at most CHUNK holds of one slot; chunk k is rows[cut[k] .. cut[k+1]) */
    bool in_round;          /* owes answers to the round in flight */
    int answered;           /* its chunks answered */
    int *rows, n_rows, *cut, n_chunks;
};

struct tracker {
    int first;              /* unit u's sub is conns[first + 2u], its rd the next */
    struct track_unit *units;
    int n_units;
    int *node_unit;         /* node i's first unit */
    bool wanted;            /* a watchdog hold joined: the pairs are wanted */
    struct hold **dirty;    /* holds to verify in the next round */
    size_t n_dirty, cap_dirty;
    /* the round in flight: its holds, the level each was verified for, and
     * per hold and node 1 ours, 0 gone, -1 no answer */
    bool active;
    struct hold **rh;
    uint64_t *rlevel;
    int rn;
    signed char *v;
    int64_t deadline;
    bool kick;              /* dirty holds wait for the next round */
    int64_t not_before;     /* no round before this (after a redirected verify) */
    int redirected;         /* rounds in a row with a redirected verify */
    bool round_redirected;  /* the round in flight had one */
    struct timer timer;
};

/* A cluster node has a unit per master its map may name. */
static int units_of(const rlc_engine *e, int node)
{
    return e->addrs[node].topology == RLC_TOPO_CLUSTER ? CMAP_MAX_MASTERS : 1;
}

int track_conns(const rlc_engine *e)
{
    if (!e->opts.loss_push)
        return 0;
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += units_of(e, i);
    return 2 * n;
}

int track_make(rlc_engine *e, int first_conn)
{
    int n = track_conns(e) / 2;
    if (n == 0)
        return 0;
    struct tracker *t = calloc(1, sizeof *t);
    if (!t || !(t->units = calloc((size_t)n, sizeof *t->units)) ||
        !(t->node_unit = calloc((size_t)e->n, sizeof *t->node_unit))) {
        if (t)
            free(t->units);
        free(t);
        return -1;
    }
    t->first = first_conn;
    t->n_units = n;
    t->timer.at = -1;
    int u = 0;
    for (int i = 0; i < e->n; i++) {
        t->node_unit[i] = u;
        bool cluster = units_of(e, i) > 1;
        for (int j = 0; j < units_of(e, i); j++, u++) {
            struct track_unit *tu = &t->units[u];
            tu->node = i;
            tu->master = cluster ? j : -1;
            tu->id = -1;
            for (int k = 0; k < 2; k++) {
                struct conn *c = &e->conns[first_conn + 2 * u + k];
                c->node = i;
                c->sub = false;
                c->track = k == 0 ? TRK_SUB : TRK_RD;
            }
        }
    }
    e->track = t;
    return 0;
}

static void unit_forget_round(struct track_unit *tu)
{
    free(tu->rows);
    free(tu->cut);
    tu->rows = tu->cut = NULL;
    tu->n_rows = tu->n_chunks = tu->answered = 0;
    tu->in_round = false;
}

static void round_forget(struct tracker *t)
{
    free(t->rh);
    free(t->rlevel);
    free(t->v);
    t->rh = NULL;
    t->rlevel = NULL;
    t->v = NULL;
    t->rn = 0;
    t->active = false;
    for (int u = 0; u < t->n_units; u++)
        unit_forget_round(&t->units[u]);
}

void track_free(rlc_engine *e)
{
    struct tracker *t = e->track;
    if (!t)
        return;
    timer_clear(e, &t->timer);
    round_forget(t);
    free(t->dirty);
    free(t->units);
    free(t->node_unit);
    free(t);
    e->track = NULL;
}

static struct conn *unit_conn(rlc_engine *e, int u, int which)
{
    return &e->conns[e->track->first + 2 * u + (which == TRK_RD)];
}

static int unit_of_conn(const rlc_engine *e, const struct conn *c)
{
    return (int)(c - e->conns - e->track->first) / 2;
}

struct conn *track_conn(rlc_engine *e, int node, int which)
{
    return e->track ? unit_conn(e, e->track->node_unit[node], which) : NULL;
}

int track_master(const rlc_engine *e, const struct conn *c)
{
    return e->track->units[unit_of_conn(e, c)].master;
}

/* Whether unit u is wanted at all: a cluster's master only while it owns
 * slots (a seed, or a master failed over, holds none of our keys). */
static bool unit_in_use(const rlc_engine *e, const struct track_unit *tu)
{
    return tu->master < 0 || cluster_master_owns(e, tu->node, tu->master);
}

/* ---- when to look again ------------------------------------------------------ */

static void schedule(rlc_engine *e)
{
    struct tracker *t = e->track;
    int64_t at = t->active ? t->deadline : -1;
    if (t->kick) {
        int64_t k = t->not_before > e->now ? t->not_before : e->now;
        if (at < 0 || k < at)
            at = k;
    }
    /* a pair to reopen (after a refusal or a failed connect): the driver
     * looks at want_open again after every call, so a timer brings it back */
    for (int u = 0; t->wanted && u < t->n_units; u++) {
        const struct conn *c = unit_conn(e, u, TRK_SUB);
        if (c->state != C_DOWN || !unit_in_use(e, &t->units[u]))
            continue;
        int64_t due = t->units[u].refused_until > c->retry_at ? t->units[u].refused_until
                                                                : c->retry_at;
        if (due > e->now && (at < 0 || due < at))
            at = due;
    }
    timer_set(e, &t->timer, T_TRACK, t, at);
}

/* ---- holds ------------------------------------------------------------------- */

static bool any_on(const struct tracker *t)
{
    for (int u = 0; u < t->n_units; u++)
        if (t->units[u].on)
            return true;
    return false;
}

static void mark_dirty(rlc_engine *e, struct hold *h)
{
    struct tracker *t = e->track;
    /* with no reader tracking, nothing can be verified; the first one that
     * comes marks every joined hold (a list of holds nobody can verify
     * would only keep dead ones alive) */
    if (h->track_dirty || !h->track_joined || !any_on(t))
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
    struct eng_lock *l = lock_find(e, key + plen, len - plen, RLC_KIND_LOCK, 0);
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

/* The unit that answers for h on node i now, or -1: a cluster's master
 * that owns h's slot (none while the map does not know it). */
static int unit_for(rlc_engine *e, int node, const struct hold *h)
{
    int u = e->track->node_unit[node];
    if (!is_cluster(e, node))
        return u;
    int j = cluster_slot_master(e, node, h->lock->slot);
    return j < 0 ? -1 : u + j;
}

/* Rows on a cluster go by slot, so that a chunk never spans two. */
struct slot_row {
    unsigned slot;
    int row;
};

static int by_slot(const void *a, const void *b)
{
    const struct slot_row *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

static void sort_by_slot(const struct tracker *t, struct track_unit *tu)
{
    struct slot_row *sr = malloc(sizeof *sr * (size_t)tu->n_rows);
    if (!sr)
        abort();
    for (int k = 0; k < tu->n_rows; k++)
        sr[k] = (struct slot_row){t->rh[tu->rows[k]]->lock->slot, tu->rows[k]};
    qsort(sr, (size_t)tu->n_rows, sizeof *sr, by_slot);
    for (int k = 0; k < tu->n_rows; k++)
        tu->rows[k] = sr[k].row;
    free(sr);
}

static void cut_chunks(rlc_engine *e, struct track_unit *tu)
{
    struct tracker *t = e->track;
    if (tu->master >= 0)
        sort_by_slot(t, tu);
    tu->cut = malloc(sizeof *tu->cut * (size_t)(tu->n_rows + 1));
    if (!tu->cut)
        abort();
    tu->n_chunks = 0;
    for (int k = 0; k < tu->n_rows; k++) {
        int start = tu->n_chunks ? tu->cut[tu->n_chunks - 1] : 0;
        bool new_slot = tu->master >= 0 && k > 0 &&
                        t->rh[tu->rows[k]]->lock->slot != t->rh[tu->rows[k - 1]]->lock->slot;
        if (k == 0 || k - start == CHUNK || new_slot)
            tu->cut[tu->n_chunks++] = k;
    }
    tu->cut[tu->n_chunks] = tu->n_rows;
}

static void send_chunks(rlc_engine *e, int u)
{
    struct tracker *t = e->track;
    struct track_unit *tu = &t->units[u];
    struct conn *rd = unit_conn(e, u, TRK_RD);
    struct lock_names names[CHUNK];
    const char *fields[CHUNK];
    size_t lens[CHUNK];
    uint64_t levels[CHUNK];
    for (int k = 0; k < tu->n_chunks; k++) {
        int m = tu->cut[k + 1] - tu->cut[k];
        for (int j = 0; j < m; j++) {
            int row = tu->rows[tu->cut[k] + j];
            const struct hold *h = t->rh[row];
            names[j] = eng_names(h->lock);
            fields[j] = h->field;
            lens[j] = h->field_len;
            levels[j] = t->rlevel[row];
        }
        struct rlc_cmd *ex = call_exists_many(m, names);
        struct rlc_cmd *ve = call_verify_many(m, names, e->uuid, fields, lens, levels);
        if (!ex || !ve)
            abort();
        /* the requests own the commands */
        conn_put(e, rd, conn_own_req(e, tu->node, R_EXISTS, ex), false);
        conn_put(e, rd, conn_own_req(e, tu->node, R_VERIFY, ve), false);
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
    if (!t->round_redirected)
        t->redirected = 0;
    t->round_redirected = false;
    if (t->n_dirty)
        t->kick = true;
    schedule(e);
}

static void unit_done(rlc_engine *e, int u)
{
    struct tracker *t = e->track;
    if (!t->active || !t->units[u].in_round)
        return;
    t->units[u].in_round = false;
    for (int k = 0; k < t->n_units; k++)
        if (t->units[k].in_round)
            return;
    decide(e);
}

static void add_row(struct track_unit *tu, int row, int cap)
{
    if (!tu->rows && !(tu->rows = malloc(sizeof *tu->rows * (size_t)cap)))
        abort();
    tu->rows[tu->n_rows++] = row;
}

static void pair_down(rlc_engine *e, int u, int why, const char *msg);

/* A cluster master that owns no slots now (a failover made it a replica,
 * its slots moved away) holds none of our keys: its pair goes, as the
 * blocking API's does, instead of staying open until the server closes
 * it. Looked at whenever the tracker's timer runs: a new map is followed
 * by a round (the new owner's pair says every hold is dirty). */
static void close_unused(rlc_engine *e)
{
    struct tracker *t = e->track;
    for (int u = 0; u < t->n_units; u++) {
        const struct track_unit *tu = &t->units[u];
        if (tu->master < 0 || tu->in_round || unit_in_use(e, tu))
            continue;
        const struct conn *sub = unit_conn(e, u, TRK_SUB), *rd = unit_conn(e, u, TRK_RD);
        bool open = sub->state == C_UP || sub->state == C_CONNECTING || rd->state == C_UP ||
                    rd->state == C_CONNECTING;
        if (open)
            pair_down(e, u, RLC_E_CONNECT, "loss push: this master owns no slots now");
    }
}

static void start_round(rlc_engine *e)
{
    struct tracker *t = e->track;
    t->kick = false;
    close_unused(e);
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
    /* each hold to the unit of each node that can answer for it now; a
     * node with none stays "no answer" for it */
    for (int j = 0; j < t->rn; j++)
        for (int i = 0; i < e->n; i++) {
            int u = unit_for(e, i, t->rh[j]);
            if (u >= 0 && t->units[u].on && unit_conn(e, u, TRK_RD)->state == C_UP)
                add_row(&t->units[u], j, t->rn);
        }
    t->active = true;
    t->deadline = e->now + e->call_timeout_ms;
    bool sent = false;
    for (int u = 0; u < t->n_units; u++) {
        struct track_unit *tu = &t->units[u];
        tu->answered = 0;
        tu->in_round = tu->n_rows > 0;
        if (tu->in_round) {
            cut_chunks(e, tu);
            send_chunks(e, u);
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
    close_unused(e);
    if (t->active && now >= t->deadline) {
        /* A reader that did not answer in time is given up: its late
         * answers must not be read as the next round's. */
        for (int u = 0; u < t->n_units; u++)
            if (t->units[u].in_round)
                conn_drop(e, unit_conn(e, u, TRK_RD), RLC_E_TIMEOUT,
                          "loss push: a verify was not answered in time");
        decide(e);
    }
    if (t->kick && now >= t->not_before)
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
    const struct track_unit *tu = &t->units[unit_of_conn(e, c)];
    return t->wanted && e->n_holds > 0 && unit_in_use(e, tu) &&
                   e->now >= tu->refused_until && e->now >= c->retry_at
               ? 1
               : 0;
}

/* The pair of unit u is over (one end closed, or a refusal): both go, and
 * the round has nothing more from it. */
static void pair_down(rlc_engine *e, int u, int why, const char *msg)
{
    struct track_unit *tu = &e->track->units[u];
    tu->id = -1;
    tu->subscribed = tu->on = false;
    for (int k = TRK_SUB; k <= TRK_RD; k++) {
        struct conn *c = unit_conn(e, u, k);
        if (c->state != C_DROPPED && (c->state != C_DOWN || c->qhead))
            conn_drop(e, c, why, msg);
    }
    unit_done(e, u);
    schedule(e);
}

static void refused(rlc_engine *e, int u, const char *what)
{
    struct track_unit *tu = &e->track->units[u];
    const char *host = NULL;
    int port = 0;
    char msg[400], where[300] = "";
    if (tu->master >= 0 && cluster_master_address(e, tu->node, tu->master, &host, &port) == RLC_OK)
        snprintf(where, sizeof where, " (master %.200s:%d)", host, port);
    snprintf(msg, sizeof msg,
             "loss_push: %s%s refused %.150s; a lost lock is found at its next renewal there",
             e->addrs[tu->node].label, where, what);
    tu->refused_until = e->now + REFUSED_RETRY_MS;
    if (!tu->warned)
        eng_log(e, RLC_LOG_WARN, "%s", msg); /* the blocking API logs it once too */
    tu->warned = true;
    pair_down(e, u, RLC_E_SERVER, msg);
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

/* The reader of unit u asks for tracking redirected to the subscriber (its
 * first request on every new connection). */
static void queue_track_on(rlc_engine *e, int u)
{
    struct track_unit *tu = &e->track->units[u];
    char idbuf[24];
    const char *argv[5] = {"CLIENT", "TRACKING", "ON", "REDIRECT", idbuf};
    size_t lens[5] = {6, 8, 2, 8, cmd_i64(idbuf, tu->id)};
    struct rlc_cmd *cmd = cmd_format(5, argv, lens);
    if (!cmd)
        abort();
    conn_put(e, unit_conn(e, u, TRK_RD), conn_own_req(e, tu->node, R_TRACK_ON, cmd),
             false); /* the request owns cmd */
}

void track_closed(rlc_engine *e, struct conn *c)
{
    if (!e->track)
        return;
    int u = unit_of_conn(e, c);
    struct track_unit *tu = &e->track->units[u];
    if (c->track == TRK_SUB) {
        pair_down(e, u, RLC_E_CONNECT, "loss push: the invalidation subscriber closed");
        return;
    }
    tu->on = false;
    unit_done(e, u);
    /* the subscriber is still there: track again on a new reader */
    if (unit_conn(e, u, TRK_SUB)->state == C_UP && tu->subscribed)
        queue_track_on(e, u);
    schedule(e);
}

static bool is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && strlen(s) == r->len && memcmp(r->str, s, r->len) == 0;
}

static void on_sub_reply(rlc_engine *e, struct conn *c, const redisReply *r)
{
    int u = unit_of_conn(e, c);
    struct track_unit *tu = &e->track->units[u];
    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "NOAUTH") || strstr(r->str, "WRONGPASS"))
            pair_down(e, u, RLC_E_AUTH, r->str); /* retried with backoff */
        else
            refused(e, u, r->str);
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && tu->id < 0) {
        tu->id = r->integer;
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || !is(r->element[1], CHANNEL))
        return; /* +OK of the handshake */
    if (is(r->element[0], "subscribe")) {
        tu->subscribed = true;
        /* a reader still being let go asks when it has closed (track_closed) */
        if (tu->id >= 0 && unit_conn(e, u, TRK_RD)->state != C_DROPPED)
            queue_track_on(e, u);
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
    int u = unit_of_conn(e, c);
    if (conn_feed(e, c, data, len) != RLC_OK) {
        pair_down(e, u, RLC_E_PROTOCOL, "loss push: unreadable bytes");
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
        pair_down(e, u, RLC_E_PROTOCOL, "loss push: unreadable bytes");
        return RLC_E_PROTOCOL;
    }
    return RLC_OK;
}

/* A cluster verify that did not run (MOVED, ASK: the slot is elsewhere;
 * TRYAGAIN; CLUSTERDOWN: a master that restarted says so until it has
 * rejoined): no answer; the map is asked for and the chunk's holds are
 * verified again soon, and again while they are redirected (else a key
 * lost in that restart would be found only at the next renewal). */
static void verify_moved(rlc_engine *e, struct track_unit *tu, int k)
{
    struct tracker *t = e->track;
    cluster_refresh(e, tu->node);
    if (!t->round_redirected && t->redirected < MOVED_RECHECK_MAX)
        t->redirected++;
    t->round_redirected = true;
    t->not_before = e->now + ((int64_t)MOVED_RECHECK_MS << (t->redirected - 1));
    for (int j = tu->cut[k]; j < tu->cut[k + 1]; j++)
        mark_dirty(e, t->rh[tu->rows[j]]);
}

void track_reader_reply(rlc_engine *e, struct conn *c, struct req *r, const redisReply *reply)
{
    struct tracker *t = e->track;
    int u = unit_of_conn(e, c);
    struct track_unit *tu = &t->units[u];
    if (r->kind == R_TRACK_ON) {
        if (reply->type == REDIS_REPLY_ERROR) {
            refused(e, u, reply->str);
            return;
        }
        tu->on = true;
        dirty_all(e); /* changes before this reader were never pushed */
        return;
    }
    if (r->kind != R_VERIFY || !t->active || !tu->in_round)
        return; /* EXISTS: it registered the keys, its count says nothing */
    int k = tu->answered++;
    if (tu->master >= 0 && cmap_is_redirect(reply)) {
        verify_moved(e, tu, k);
    } else {
        for (int j = tu->cut[k]; j < tu->cut[k + 1]; j++) {
            /* an error (OOM, a script refused) is no answer, never "gone" */
            int a = answer_renew(reply, (size_t)(j - tu->cut[k]));
            if (a >= 0)
                t->v[(size_t)tu->rows[j] * (size_t)e->n + (size_t)tu->node] = (signed char)a;
        }
    }
    if (tu->answered == tu->n_chunks)
        unit_done(e, u);
}
