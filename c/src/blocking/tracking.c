/*
 * tracking.c - loss pushed at once.
 *
 * Without this, a holder learns that its lock key was deleted, overwritten
 * or expired at its next renewal, up to a third of the lease later. Redis
 * can tell us sooner: a connection with CLIENT TRACKING on remembers the keys
 * it read and, when one of them changes (written, deleted, expired, evicted,
 * flushed), sends an invalidation message. In RESP2 (hiredis 0.14) the
 * messages go to another connection, named by REDIRECT <client id>, that
 * subscribes to __redis__:invalidate.
 *
 * So per node this file keeps two connections of its own, both on the
 * client's background thread:
 *   sub  CLIENT ID, then SUBSCRIBE __redis__:invalidate: receives messages;
 *   rd   CLIENT TRACKING ON REDIRECT <sub's id>, then only reads: it reads
 *        every watchdog-held key (EXISTS), which registers the key.
 *
 * An invalidation never decides anything. It marks the holds of that key
 * dirty, and the next verify round reads, on every node at once, whether
 * each dirty hold's oldest level is still in the lock's current life: the
 * renewal script's own test, without its writes (so a verify causes no
 * invalidation and no loop). A round that finds the hold gone on more than
 * n - quorum nodes marks it lost and queues on_lost, exactly as a renewal
 * round with those replies would. Our own renewals, nested acquires and
 * releases invalidate the key too; their verify simply finds the hold.
 *
 * Registration is one-shot in Redis (a key is forgotten once invalidated),
 * and a verify re-reads the key, so every change after a verify is pushed,
 * and any change before it is seen by it. A flush (nil payload) or a new
 * connection (messages may have been missed) makes every hold dirty.
 *
 * If a node refuses CLIENT TRACKING, CLIENT ID or the SUBSCRIBE (ACL, Redis
 * before 6), the client says so once on stderr and falls back to detection
 * at renewal for that node; it asks again a minute later.
 *
 * A redis-cluster:// node keeps a pair per master of its table (a "unit";
 * any other node is one unit), opened while that master owns slots. A hold
 * is verified on its slot's master, in chunks of one slot (a cluster
 * refuses a script across slots), which registers it there. A slot that
 * moves is deleted on its old master by MIGRATE (an invalidation: verified
 * again), and a verify that still reaches the old master is answered MOVED:
 * no answer; the map learns the move and every hold is verified again
 * RECHECK_MS later, on the new owner. As the engine does (engine_track.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks.h"
#include "clock.h"
#include "cluster.h"
#include "cmd.h"
#include "conn.h"
#include "hold.h"
#include "lock_calls.h"
#include "metrics.h"
#include "quorum.h"
#include "slot.h"
#include "state.h"
#include "tracking.h"

#define CHUNK 256
#define FIELD_LEN (RLC_UUID_LEN + 24)
#define MAX_BACKOFF_MS 1000
#define REFUSED_RETRY_NS (60000 * RLC_NS_PER_MS)
#define CHANNEL "__redis__:invalidate"
#define RECHECK_MS 100 /* a MOVED verify: every hold again once the map had time */

enum tstate { T_DOWN, T_HELLO, T_TRACK, T_READY };
enum pkind { P_TRACK, P_EXISTS, P_VERIFY };

/* A command sent on rd and not yet answered, oldest first. */
struct pend {
    struct pend *next;
    enum pkind kind;
    int chunk;
};

struct tnode {
    struct conn sub, rd;
    int node;                /* the client's node it answers for */
    int master;              /* a cluster node's table entry; -1: the node itself */
    bool inited;             /* sub and rd know their address */
    enum tstate state;
    long long id;            /* sub's client id */
    bool have_id, subscribed;
    bool logged;             /* a refusal was reported on stderr */
    int64_t step_since_ns;   /* when the handshake step began */
    int64_t retry_at_ns, backoff_ms;
    struct pend *head, *tail;
    int left;                /* verify chunks of the round this unit owes */
    /* the round's rows asked here, in chunks: chunk k is rows[cut[k] ..
     * cut[k+1]) (one slot each on a cluster) */
    int *rows, n_rows, *cut, n_chunks;
};

struct vhold {
    uint64_t id, level;
    size_t row;              /* its place in the chunks, hence in v */
};

struct round {
    bool active;
    int nholds;
    struct vhold *h;         /* sorted by id */
    signed char *v;          /* [hold * n + node]: 1 held, 0 gone, -1 no answer */
    int64_t deadline_ns;
};

struct tracking {
    rlc_client *c;
    int n;                   /* the client's nodes (votes) */
    bool on;
    struct tnode *units;
    int n_units;
    int *node_unit;          /* node i's first unit */
    uint64_t *epoch_seen;    /* per cluster node: the map epoch owns[] is of */
    bool (*owns)[RLC_CLUSTER_MAX_NODES]; /* per cluster node: entries owning slots */
    struct round r;
    char **keys;             /* invalidated keys not yet applied to holds */
    size_t *klen;
    int nkeys, capkeys;
    bool all;                /* a flush or a new connection: every hold */
    int64_t recheck_at_ns;   /* a MOVED verify: every hold again then (0: none) */
    int *polled;             /* unit * 2 + (rd) of each pollfd */
};

static bool is_cluster_node(const rlc_client *c, int i)
{
    return c->clusters && c->clusters[i];
}

struct tracking *tracking_new(rlc_client *c)
{
    struct tracking *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->c = c;
    t->n = c->n_nodes;
    t->on = c->opts.loss_push != 0;
    for (int i = 0; i < c->n_nodes; i++)
        t->n_units += is_cluster_node(c, i) ? RLC_CLUSTER_MAX_NODES : 1;
    size_t nu = t->n_units > 0 ? (size_t)t->n_units : 1, nn = t->n > 0 ? (size_t)t->n : 1;
    t->units = calloc(nu, sizeof *t->units);
    t->node_unit = calloc(nn, sizeof *t->node_unit);
    t->epoch_seen = calloc(nn, sizeof *t->epoch_seen);
    t->owns = calloc(nn, sizeof *t->owns);
    t->polled = calloc(nu * 2, sizeof *t->polled);
    if (!t->units || !t->node_unit || !t->epoch_seen || !t->owns || !t->polled) {
        tracking_free(t);
        return NULL;
    }
    int u = 0;
    for (int i = 0; i < t->n; i++) {
        t->node_unit[i] = u;
        t->epoch_seen[i] = UINT64_MAX; /* owns[] not read yet */
        bool cluster = is_cluster_node(c, i);
        for (int j = 0; j < (cluster ? RLC_CLUSTER_MAX_NODES : 1); j++, u++) {
            struct tnode *tn = &t->units[u];
            tn->node = i;
            tn->master = cluster ? j : -1;
            /* a cluster entry's address is known once the map names it */
            if (!cluster) {
                conn_init(&tn->sub, &c->nodes[i], false);
                conn_init(&tn->rd, &c->nodes[i], false);
                tn->inited = true;
            }
        }
    }
    return t;
}

static void forget_pend(struct tnode *tn)
{
    while (tn->head) {
        struct pend *p = tn->head;
        tn->head = p->next;
        free(p);
    }
    tn->tail = NULL;
}

static void round_clear(struct round *r)
{
    free(r->h);
    free(r->v);
    memset(r, 0, sizeof *r);
}

static void forget_keys(struct tracking *t)
{
    for (int k = 0; k < t->nkeys; k++)
        free(t->keys[k]);
    t->nkeys = 0;
}

static void unit_round_clear(struct tnode *tn)
{
    free(tn->rows);
    free(tn->cut);
    tn->rows = tn->cut = NULL;
    tn->n_rows = tn->n_chunks = tn->left = 0;
}

static void round_end(struct tracking *t)
{
    round_clear(&t->r);
    for (int u = 0; u < t->n_units; u++)
        unit_round_clear(&t->units[u]);
}

void tracking_free(struct tracking *t)
{
    if (!t)
        return;
    for (int u = 0; t->units && u < t->n_units; u++) {
        if (t->units[u].inited) {
            conn_close(&t->units[u].sub);
            conn_close(&t->units[u].rd);
        }
        forget_pend(&t->units[u]);
    }
    if (t->units)
        round_end(t);
    forget_keys(t);
    free(t->keys);
    free(t->klen);
    free(t->units);
    free(t->node_unit);
    free(t->epoch_seen);
    free(t->owns);
    free(t->polled);
    free(t);
}

/* ---- connections ------------------------------------------------------------ */

static void node_down(struct tracking *t, int i, int64_t now, const char *refusal)
{
    struct tnode *tn = &t->units[i];
    conn_close(&tn->sub);
    conn_close(&tn->rd);
    forget_pend(tn);
    tn->state = T_DOWN;
    tn->have_id = tn->subscribed = false;
    tn->left = 0;
    if (refusal) {
        if (!tn->logged) {
            char line[RLC_ERRLEN];
            snprintf(line, sizeof line,
                     "loss_push: %s%s%s refused %s; a lost lock is found at its next "
                     "renewal there", t->c->nodes[tn->node].label,
                     tn->master >= 0 ? ", master " : "", tn->master >= 0 ? tn->sub.node->label : "",
                     refusal);
            metrics_warn(t->c, line);
        }
        tn->logged = true;
        tn->retry_at_ns = now + REFUSED_RETRY_NS;
        return;
    }
    tn->backoff_ms = tn->backoff_ms ? tn->backoff_ms * 2 : 10;
    if (tn->backoff_ms > MAX_BACKOFF_MS)
        tn->backoff_ms = MAX_BACKOFF_MS;
    tn->retry_at_ns = now + tn->backoff_ms * RLC_NS_PER_MS;
}

static int queue_argv(struct conn *cn, int argc, const char **argv, const size_t *lens)
{
    struct rlc_cmd *cmd = cmd_format(argc, argv, lens);
    int rc = cmd ? conn_queue(cn, cmd->data, cmd->len) : RLC_E_NOMEM;
    cmd_unref(cmd);
    return rc;
}

static int push_pend(struct tnode *tn, enum pkind kind, int chunk)
{
    struct pend *p = malloc(sizeof *p);
    if (!p)
        return RLC_E_NOMEM;
    *p = (struct pend){NULL, kind, chunk};
    if (tn->tail)
        tn->tail->next = p;
    else
        tn->head = p;
    tn->tail = p;
    return RLC_OK;
}

static int start_sub(struct tracking *t, int i, int64_t now)
{
    struct tnode *tn = &t->units[i];
    char err[RLC_ERRLEN];
    const char *id[2] = {"CLIENT", "ID"};
    const char *sub[2] = {"SUBSCRIBE", CHANNEL};
    size_t id_len[2] = {6, 2}, sub_len[2] = {9, sizeof CHANNEL - 1};
    if (conn_start(&tn->sub, err) != RLC_OK || queue_argv(&tn->sub, 2, id, id_len) != RLC_OK ||
        queue_argv(&tn->sub, 2, sub, sub_len) != RLC_OK)
        return RLC_E_CONNECT;
    tn->state = T_HELLO;
    tn->step_since_ns = now;
    return RLC_OK;
}

/* sub knows its id and is subscribed: rd asks for tracking to it. */
static int start_rd(struct tracking *t, int i, int64_t now)
{
    struct tnode *tn = &t->units[i];
    char err[RLC_ERRLEN], id[24];
    const char *argv[5] = {"CLIENT", "TRACKING", "ON", "REDIRECT", id};
    size_t lens[5] = {6, 8, 2, 8, (size_t)snprintf(id, sizeof id, "%lld", tn->id)};
    if (conn_start(&tn->rd, err) != RLC_OK || queue_argv(&tn->rd, 5, argv, lens) != RLC_OK ||
        push_pend(tn, P_TRACK, 0) != RLC_OK)
        return RLC_E_CONNECT;
    tn->state = T_TRACK;
    tn->step_since_ns = now;
    return RLC_OK;
}

/* ---- holds ------------------------------------------------------------------ */

static int cmp_key(const void *a, const void *b, size_t alen, size_t blen)
{
    if (alen != blen)
        return alen < blen ? -1 : 1;
    return memcmp(a, b, alen);
}

static int by_key(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    size_t lx = strlen(*x), ly = strlen(*y);
    return cmp_key(*x, *y, lx, ly);
}

static bool key_invalidated(const struct tracking *t, const char *key, size_t len)
{
    int lo = 0, hi = t->nkeys - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = cmp_key(t->keys[mid], key, strlen(t->keys[mid]), len);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return false;
}

/* Under mu: the messages received so far make their holds dirty. Keys are
 * kept NUL-terminated; a lock key with a NUL in it is matched by prefix
 * length too (cmp_key compares lengths first), so it is at worst verified
 * more often, never less. */
static void apply_invalidations(struct tracking *t)
{
    if (!t->all && t->nkeys == 0)
        return;
    if (t->nkeys > 1)
        qsort(t->keys, (size_t)t->nkeys, sizeof *t->keys, by_key);
    for (struct hold *h = t->c->renewing; h; h = h->wd_next)
        if (t->all || key_invalidated(t, h->lock->key, strnlen(h->lock->key, h->lock->key_len)))
            h->track_dirty = true;
    t->all = false;
    forget_keys(t);
}

static bool wants_verify(const struct hold *h, int64_t now)
{
    return !h->lost && h->n_attempts > 0 && !h->releasing &&
           (h->track_dirty || (h->track_level != h->attempts[0] && now >= h->track_after_ns));
}

static int by_id(const void *a, const void *b)
{
    const struct vhold *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The unit that answers for a hold of `slot` on node i now, or -1 (a
 * cluster whose map does not name the slot's owner yet). */
static int unit_for(struct tracking *t, int i, int slot)
{
    if (!is_cluster_node(t->c, i))
        return t->node_unit[i];
    int j = cluster_master_of(t->c->clusters[i], slot);
    return j < 0 || j >= RLC_CLUSTER_MAX_NODES ? -1 : t->node_unit[i] + j;
}

/* Rows on a cluster go by slot, so that a chunk never spans two. */
struct slot_row {
    int slot, row;
};

static int by_slot(const void *a, const void *b)
{
    const struct slot_row *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Cuts unit tn's rows into chunks (sorted by slot first on a cluster). */
static int cut_chunks(struct tnode *tn, const int *slots)
{
    if (tn->master >= 0) {
        struct slot_row *sr = malloc(sizeof *sr * (size_t)tn->n_rows);
        if (!sr)
            return RLC_E_NOMEM;
        for (int k = 0; k < tn->n_rows; k++)
            sr[k] = (struct slot_row){slots[tn->rows[k]], tn->rows[k]};
        qsort(sr, (size_t)tn->n_rows, sizeof *sr, by_slot);
        for (int k = 0; k < tn->n_rows; k++)
            tn->rows[k] = sr[k].row;
        free(sr);
    }
    if (!(tn->cut = malloc(sizeof *tn->cut * (size_t)(tn->n_rows + 1))))
        return RLC_E_NOMEM;
    tn->n_chunks = 0;
    for (int k = 0; k < tn->n_rows; k++) {
        int start = tn->n_chunks ? tn->cut[tn->n_chunks - 1] : 0;
        bool new_slot = tn->master >= 0 && k > 0 && slots[tn->rows[k]] != slots[tn->rows[k - 1]];
        if (k == 0 || k - start == CHUNK || new_slot)
            tn->cut[tn->n_chunks++] = k;
    }
    tn->cut[tn->n_chunks] = tn->n_rows;
    return RLC_OK;
}

/* Queues unit u's chunks on its reader (lock_calls.c: the engine's loss
 * push sends the same two commands). */
static int send_chunks(struct tracking *t, int u, struct hold *const *picked)
{
    rlc_client *c = t->c;
    struct tnode *tn = &t->units[u];
    char (*fields)[FIELD_LEN] = malloc(FIELD_LEN * (size_t)CHUNK);
    const char **fp = malloc(sizeof *fp * CHUNK);
    size_t *fl = malloc(sizeof *fl * CHUNK);
    uint64_t *levels = malloc(sizeof *levels * CHUNK);
    struct lock_names *names = malloc(sizeof *names * CHUNK);
    int rc = fields && fp && fl && levels && names ? RLC_OK : RLC_E_NOMEM;
    for (int k = 0; k < tn->n_chunks && rc == RLC_OK; k++) {
        int cm = tn->cut[k + 1] - tn->cut[k];
        for (int j = 0; j < cm; j++) {
            const struct hold *h = picked[tn->rows[tn->cut[k] + j]];
            names[j] = lock_names_of(h->lock);
            fl[j] = (size_t)client_field(c, h->owner, fields[j], FIELD_LEN);
            fp[j] = fields[j];
            levels[j] = h->attempts[0];
        }
        /* EXISTS registers the keys for tracking whatever the server does
         * with reads inside scripts. */
        struct rlc_cmd *ex = call_exists_many(cm, names);
        struct rlc_cmd *ve = call_verify_many(cm, names, c->uuid, fp, fl, levels);
        rc = ex && ve ? RLC_OK : RLC_E_NOMEM;
        if (rc == RLC_OK)
            rc = conn_queue(&tn->rd, ex->data, ex->len);
        if (rc == RLC_OK)
            rc = push_pend(tn, P_EXISTS, k);
        if (rc == RLC_OK)
            rc = conn_queue(&tn->rd, ve->data, ve->len);
        if (rc == RLC_OK)
            rc = push_pend(tn, P_VERIFY, k);
        if (rc == RLC_OK)
            tn->left++;
        cmd_unref(ex);
        cmd_unref(ve);
    }
    free(fields);
    free(fp);
    free(fl);
    free(levels);
    free(names);
    return rc;
}

/* Under mu: starts a round over the ready units, if holds want a verify:
 * each hold goes to the unit of each node that answers for it now. */
static void start_round(struct tracking *t, int64_t now)
{
    rlc_client *c = t->c;
    int ready = 0;
    for (int u = 0; u < t->n_units; u++)
        ready += t->units[u].state == T_READY;
    if (ready == 0 || t->r.active)
        return;
    int m = 0;
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        m += wants_verify(h, now);
    if (m == 0)
        return;
    struct round *r = &t->r;
    struct hold **picked = malloc(sizeof *picked * (size_t)m);
    int *slots = malloc(sizeof *slots * (size_t)m);
    r->h = malloc(sizeof *r->h * (size_t)m);
    r->v = malloc((size_t)m * (size_t)t->n);
    if (!picked || !slots || !r->h || !r->v) {
        free(picked);
        free(slots);
        round_clear(r);
        return;
    }
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        if (wants_verify(h, now)) {
            h->track_dirty = false;
            h->track_level = h->attempts[0];
            slots[r->nholds] = (int)slot_of(h->lock->key, h->lock->key_len);
            r->h[r->nholds] = (struct vhold){h->id, h->attempts[0], (size_t)r->nholds};
            picked[r->nholds++] = h;
        }
    memset(r->v, -1, (size_t)m * (size_t)t->n);
    for (int j = 0; j < m; j++)
        for (int i = 0; i < t->n; i++) {
            int u = unit_for(t, i, slots[j]);
            struct tnode *tn = u >= 0 ? &t->units[u] : NULL;
            if (!tn || tn->state != T_READY)
                continue; /* no answer from node i for this hold */
            if (!tn->rows && !(tn->rows = malloc(sizeof *tn->rows * (size_t)m)))
                continue;
            tn->rows[tn->n_rows++] = j;
        }
    for (int u = 0; u < t->n_units; u++) {
        struct tnode *tn = &t->units[u];
        if (tn->n_rows > 0 &&
            (cut_chunks(tn, slots) != RLC_OK || send_chunks(t, u, picked) != RLC_OK))
            node_down(t, u, now, NULL);
    }
    free(picked);
    free(slots);
    r->active = true;
    r->deadline_ns = now + t->c->opts.io_timeout_ms * RLC_NS_PER_MS;
}

/* Under mu: the verdicts of a finished round. */
static void apply(struct tracking *t)
{
    rlc_client *c = t->c;
    struct round *r = &t->r;
    int n = t->n;
    /* The holds are found again by id: some may be gone by now (released,
     * their handle freed), and a pointer kept across the round could dangle. */
    qsort(r->h, (size_t)r->nholds, sizeof *r->h, by_id);
    for (struct hold *h = c->renewing; h; h = h->wd_next) {
        struct vhold key = {h->id, 0, 0};
        struct vhold *f = bsearch(&key, r->h, (size_t)r->nholds, sizeof *r->h, by_id);
        if (!f || h->lost || h->releasing || h->n_attempts == 0 || h->attempts[0] != f->level)
            continue;
        size_t row = f->row;
        int gone = 0;
        for (int i = 0; i < n; i++)
            gone += r->v[row * (size_t)n + (size_t)i] == 0;
        if (quorum_denied(n, gone)) {
            h->lost = RLC_E_LOST;
            if (!h->notified) {
                h->notified = true;
                client_queue_lost(c, h->lock, h->owner, RLC_E_LOST);
            }
        }
    }
}

static void round_done_check(struct tracking *t)
{
    if (!t->r.active)
        return;
    for (int u = 0; u < t->n_units; u++)
        if (t->units[u].left > 0)
            return;
    pthread_mutex_lock(&t->c->mu);
    apply(t);
    pthread_mutex_unlock(&t->c->mu);
    round_end(t);
}

/* ---- replies ------------------------------------------------------------------ */

static bool is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

static void add_key(struct tracking *t, const char *s, size_t len)
{
    if (t->nkeys == t->capkeys) {
        int cap = t->capkeys ? 2 * t->capkeys : 64;
        char **k = realloc(t->keys, sizeof *k * (size_t)cap);
        if (!k) {
            t->all = true; /* no memory: look at every hold instead */
            return;
        }
        t->keys = k;
        t->capkeys = cap;
    }
    char *copy = strndup(s, len);
    if (!copy) {
        t->all = true;
        return;
    }
    t->keys[t->nkeys++] = copy;
}

static void refusal(char *buf, size_t size, const char *what, const redisReply *r)
{
    snprintf(buf, size, "%s: %.*s", what, (int)(r->len > 160 ? 160 : r->len), r->str);
}

/* A reply on sub: the client id, the subscription, or a message. Returns
 * RLC_OK, or RLC_E_SERVER with why[] set (the node refused). */
static int on_sub(struct tracking *t, int i, const redisReply *r, int64_t now, char *why,
                  size_t size)
{
    struct tnode *tn = &t->units[i];
    if (r->type == REDIS_REPLY_ERROR) {
        refusal(why, size, tn->have_id ? "SUBSCRIBE " CHANNEL : "CLIENT ID", r);
        return RLC_E_SERVER;
    }
    if (r->type == REDIS_REPLY_INTEGER && !tn->have_id) {
        tn->id = r->integer;
        tn->have_id = true;
        return RLC_OK;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return RLC_OK;
    if (is(r->element[0], "subscribe") && tn->state == T_HELLO) {
        tn->subscribed = true;
        if (!tn->have_id)
            return RLC_E_PROTOCOL;
        return start_rd(t, i, now);
    }
    if (!is(r->element[0], "message"))
        return RLC_OK;
    const redisReply *keys = r->element[2];
    if (keys->type == REDIS_REPLY_ARRAY) {
        for (size_t k = 0; k < keys->elements; k++)
            if (keys->element[k]->type == REDIS_REPLY_STRING)
                add_key(t, keys->element[k]->str, keys->element[k]->len);
    } else {
        t->all = true; /* FLUSHALL / FLUSHDB: every key changed */
    }
    return RLC_OK;
}

static bool redirected(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0);
}

/* A reply on rd answers its oldest command. */
static int on_rd(struct tracking *t, int i, const redisReply *r, char *why, size_t size)
{
    struct tnode *tn = &t->units[i];
    struct pend *p = tn->head;
    if (!p)
        return RLC_E_PROTOCOL;
    if (!(tn->head = p->next))
        tn->tail = NULL;
    enum pkind kind = p->kind;
    int k = p->chunk;
    free(p);
    if (kind == P_TRACK) {
        if (r->type == REDIS_REPLY_ERROR) {
            refusal(why, size, "CLIENT TRACKING", r);
            return RLC_E_SERVER;
        }
        tn->state = T_READY;
        tn->backoff_ms = 0;
        /* Changes made before tracking began were never pushed: verify
         * every hold on every node (a round spans all nodes). */
        t->all = true;
        return RLC_OK;
    }
    if (kind == P_EXISTS || !t->r.active || tn->left == 0 || k >= tn->n_chunks)
        return RLC_OK;
    tn->left--;
    if (tn->master >= 0 && redirected(r)) {
        /* the slot is elsewhere now: no answer; the map learns the move
         * and every hold is verified again soon, on its new owner */
        struct cluster *cl = t->c->clusters[tn->node];
        if (r->str[0] == 'M')
            cluster_note_moved(cl, r->str + 6, r->len - 6);
        else
            cluster_want_refresh(cl);
        if (!t->recheck_at_ns)
            t->recheck_at_ns = rlc_now_ns() + RECHECK_MS * RLC_NS_PER_MS;
        return RLC_OK;
    }
    /* An error reply (OOM on a full server, a script refused) leaves this
     * node's verdicts unknown: no answer is never a loss. */
    if (r->type != REDIS_REPLY_ARRAY)
        return RLC_OK;
    int first = tn->cut[k], cm = tn->cut[k + 1] - first;
    for (size_t j = 0; j < r->elements && (int)j < cm; j++)
        if (r->element[j]->type == REDIS_REPLY_INTEGER)
            t->r.v[(size_t)tn->rows[first + (int)j] * (size_t)t->n + (size_t)tn->node] =
                r->element[j]->integer == 1 ? 1 : 0;
    return RLC_OK;
}

/* ---- the background thread's side --------------------------------------- */

static bool stuck(const struct conn *cn, int64_t now, int64_t limit_ns)
{
    return cn->state == CONN_CONNECTING && now - cn->connect_started_ns > limit_ns;
}

static int add_pfd(struct tracking *t, struct pollfd *pfd, int np, int max, int u, bool rd)
{
    struct conn *cn = rd ? &t->units[u].rd : &t->units[u].sub;
    if (cn->state == CONN_CLOSED || np >= max)
        return np;
    pfd[np] = (struct pollfd){cn->fd, conn_events(cn), 0};
    t->polled[np] = 2 * u + rd;
    return np + 1;
}

/* Reads each cluster's owners again when its map changed (once per turn). */
static void read_owners(struct tracking *t)
{
    for (int i = 0; i < t->n; i++) {
        struct cluster *cl = is_cluster_node(t->c, i) ? t->c->clusters[i] : NULL;
        if (cl && cluster_epoch(cl) != t->epoch_seen[i])
            t->epoch_seen[i] = cluster_owners(cl, t->owns[i]);
    }
}

/* Whether unit u is wanted: a cluster's table entry only while it owns
 * slots (a seed, or a master failed over, holds none of our keys). */
static bool unit_wanted(struct tracking *t, int u)
{
    struct tnode *tn = &t->units[u];
    if (tn->master < 0)
        return true;
    struct cluster *cl = t->c->clusters[tn->node];
    if (!t->owns[tn->node][tn->master])
        return false;
    if (!tn->inited) {
        /* owning slots, its entry is made: the address is stable */
        conn_init(&tn->sub, cluster_node_addr(cl, tn->master), false);
        conn_init(&tn->rd, cluster_node_addr(cl, tn->master), false);
        tn->inited = true;
    }
    return true;
}

int tracking_prepare(struct tracking *t, struct pollfd *pfd, int max, int64_t *next_ns)
{
    if (!t || !t->on)
        return 0;
    rlc_client *c = t->c;
    int64_t now = rlc_now_ns();
    int64_t connect_ns = c->opts.connect_timeout_ms * RLC_NS_PER_MS;
    int64_t step_ns = connect_ns + c->opts.io_timeout_ms * RLC_NS_PER_MS;
    char err[RLC_ERRLEN];

    /* A unit that owes the round an answer too long is given up (a hung
     * server keeps its socket open): its verdicts stay unknown. */
    if (t->r.active && now >= t->r.deadline_ns)
        for (int u = 0; u < t->n_units; u++)
            if (t->units[u].left > 0)
                node_down(t, u, now, NULL);
    round_done_check(t);

    pthread_mutex_lock(&c->mu);
    bool want = c->renewing != NULL;
    if (t->recheck_at_ns && now >= t->recheck_at_ns && !t->r.active) {
        t->recheck_at_ns = 0;
        t->all = true;
    }
    apply_invalidations(t);
    if (want && !t->recheck_at_ns)
        start_round(t, now);
    pthread_mutex_unlock(&c->mu);
    if (t->r.active && t->r.deadline_ns < *next_ns)
        *next_ns = t->r.deadline_ns;
    if (t->recheck_at_ns && t->recheck_at_ns < *next_ns)
        *next_ns = t->recheck_at_ns;

    read_owners(t);
    int np = 0;
    for (int u = 0; u < t->n_units; u++) {
        struct tnode *tn = &t->units[u];
        bool wanted = unit_wanted(t, u);
        if (!wanted && tn->state != T_DOWN) {
            node_down(t, u, now, NULL); /* its master owns no slot now */
            continue;
        }
        if (tn->state == T_DOWN) {
            /* room in pfd for both of its sockets, or it waits */
            if (!want || !wanted || np + 2 > max)
                continue;
            if (now < tn->retry_at_ns) {
                if (tn->retry_at_ns < *next_ns)
                    *next_ns = tn->retry_at_ns;
                continue;
            }
            if (start_sub(t, u, now) != RLC_OK) {
                node_down(t, u, now, NULL);
                continue;
            }
        }
        /* A sentinel node's master moved: the old one may be a flushed
         * replica soon, whose "gone" must not count. Start over there. */
        if (conn_moved(&tn->sub) || conn_moved(&tn->rd) ||
            stuck(&tn->sub, now, connect_ns) || stuck(&tn->rd, now, connect_ns) ||
            ((tn->state == T_HELLO || tn->state == T_TRACK) && now - tn->step_since_ns > step_ns)) {
            node_down(t, u, now, NULL);
            continue;
        }
        if (tn->state == T_HELLO || tn->state == T_TRACK) {
            int64_t give_up = tn->step_since_ns + step_ns;
            if (give_up < *next_ns)
                *next_ns = give_up;
        }
        int rc = RLC_OK;
        if (tn->sub.state == CONN_READY && tn->sub.out_len > 0)
            rc = conn_flush(&tn->sub, err);
        if (rc == RLC_OK && tn->rd.state == CONN_READY && tn->rd.out_len > 0)
            rc = conn_flush(&tn->rd, err);
        if (rc != RLC_OK) {
            node_down(t, u, now, NULL);
            continue;
        }
        np = add_pfd(t, pfd, np, max, u, false);
        np = add_pfd(t, pfd, np, max, u, true);
    }
    return np;
}

static int service_conn(struct tracking *t, int u, bool rd, short revents, int64_t now,
                        char *why, size_t size)
{
    struct tnode *tn = &t->units[u];
    struct conn *cn = rd ? &tn->rd : &tn->sub;
    char err[RLC_ERRLEN];
    int rc = RLC_OK;
    if (conn_moved(cn))
        return RLC_E_CONNECT; /* its answers are no longer the master's */
    if (cn->state == CONN_CONNECTING)
        rc = conn_finish_connect(cn, err);
    if (rc != RLC_OK || cn->state != CONN_READY)
        return rc;
    if (revents & (POLLIN | POLLERR | POLLHUP))
        rc = conn_read(cn, err);
    redisReply *reply;
    int k;
    while (rc == RLC_OK && cn->state == CONN_READY && (k = conn_next_reply(cn, &reply, err)) != 0) {
        if (k < 0)
            return k;
        rc = rd ? on_rd(t, u, reply, why, size) : on_sub(t, u, reply, now, why, size);
        freeReplyObject(reply);
    }
    if (rc == RLC_OK && cn->state == CONN_READY && cn->out_len > 0)
        rc = conn_flush(cn, err);
    return rc;
}

void tracking_service(struct tracking *t, const struct pollfd *pfd, int n)
{
    if (!t || !t->on)
        return;
    int64_t now = rlc_now_ns();
    for (int j = 0; j < n; j++) {
        int u = t->polled[j] / 2;
        bool rd = t->polled[j] % 2;
        struct conn *cn = rd ? &t->units[u].rd : &t->units[u].sub;
        if (!pfd[j].revents || cn->fd != pfd[j].fd)
            continue;
        char why[RLC_ERRLEN] = "";
        int rc = service_conn(t, u, rd, pfd[j].revents, now, why, sizeof why);
        if (rc != RLC_OK)
            node_down(t, u, now, rc == RLC_E_SERVER ? why : NULL);
    }
    round_done_check(t);
}
