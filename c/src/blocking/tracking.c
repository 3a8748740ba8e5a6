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
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks.h"
#include "clock.h"
#include "cmd.h"
#include "conn.h"
#include "hold.h"
#include "lock_calls.h"
#include "metrics.h"
#include "quorum.h"
#include "state.h"
#include "tracking.h"

#define CHUNK 256
#define FIELD_LEN (RLC_UUID_LEN + 24)
#define MAX_BACKOFF_MS 1000
#define REFUSED_RETRY_NS (60000 * RLC_NS_PER_MS)
#define CHANNEL "__redis__:invalidate"

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
    enum tstate state;
    long long id;            /* sub's client id */
    bool have_id, subscribed;
    bool logged;             /* a refusal was reported on stderr */
    int64_t step_since_ns;   /* when the handshake step began */
    int64_t retry_at_ns, backoff_ms;
    struct pend *head, *tail;
    int left;                /* verify chunks of the round this node owes */
};

struct vhold {
    uint64_t id, level;
    size_t row;              /* its place in the chunks, hence in v */
};

struct round {
    bool active;
    int nholds, nchunks;
    struct vhold *h;         /* sorted by id */
    signed char *v;          /* [hold * n + node]: 1 held, 0 gone, -1 no answer */
    int64_t deadline_ns;
};

struct tracking {
    rlc_client *c;
    int n;
    bool on;
    struct tnode *nodes;
    struct round r;
    char **keys;             /* invalidated keys not yet applied to holds */
    size_t *klen;
    int nkeys, capkeys;
    bool all;                /* a flush or a new connection: every hold */
    int polled[2 * RLC_MAX_NODES]; /* node * 2 + (rd) of each pollfd */
};

struct tracking *tracking_new(rlc_client *c)
{
    struct tracking *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->nodes = calloc((size_t)c->n_nodes, sizeof *t->nodes);
    if (!t->nodes) {
        free(t);
        return NULL;
    }
    t->c = c;
    t->n = c->n_nodes;
    t->on = c->opts.loss_push != 0;
    /* A cluster's keys live on several masters that change: loss there is
     * found at renewal (a per-master tracking pair is left for later). */
    for (int i = 0; i < c->n_nodes; i++)
        if (c->clusters && c->clusters[i])
            t->on = false;
    for (int i = 0; i < t->n; i++) {
        conn_init(&t->nodes[i].sub, &c->nodes[i], false);
        conn_init(&t->nodes[i].rd, &c->nodes[i], false);
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

void tracking_free(struct tracking *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        conn_close(&t->nodes[i].sub);
        conn_close(&t->nodes[i].rd);
        forget_pend(&t->nodes[i]);
    }
    round_clear(&t->r);
    forget_keys(t);
    free(t->keys);
    free(t->klen);
    free(t->nodes);
    free(t);
}

/* ---- connections ------------------------------------------------------------ */

static void node_down(struct tracking *t, int i, int64_t now, const char *refusal)
{
    struct tnode *tn = &t->nodes[i];
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
                     "loss_push: %s refused %s; a lost lock is found at its next renewal "
                     "on this node", tn->sub.node->label, refusal);
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
    struct tnode *tn = &t->nodes[i];
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
    struct tnode *tn = &t->nodes[i];
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

/* Under mu: formats the round's chunks for every dirty hold (lock_calls.c:
 * the engine's loss push sends the same two commands). */
static struct rlc_cmd **collect(struct tracking *t, int64_t now, int *nchunks)
{
    rlc_client *c = t->c;
    int m = 0;
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        m += wants_verify(h, now);
    *nchunks = 0;
    if (m == 0)
        return NULL;
    int chunks = (m + CHUNK - 1) / CHUNK;
    struct round *r = &t->r;
    struct hold **picked = malloc(sizeof *picked * (size_t)m);
    r->h = malloc(sizeof *r->h * (size_t)m);
    r->v = malloc((size_t)m * (size_t)t->n);
    struct rlc_cmd **cmds = calloc((size_t)chunks * 2, sizeof *cmds);
    char (*fields)[FIELD_LEN] = malloc(FIELD_LEN * (size_t)CHUNK);
    const char **fp = malloc(sizeof *fp * CHUNK);
    size_t *fl = malloc(sizeof *fl * CHUNK);
    uint64_t *levels = malloc(sizeof *levels * CHUNK);
    struct lock_names *names = malloc(sizeof *names * CHUNK);
    if (!picked || !r->h || !r->v || !cmds || !fields || !fp || !fl || !levels || !names) {
        free(cmds);
        cmds = NULL;
        round_clear(r);
        goto out;
    }
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        if (wants_verify(h, now)) {
            h->track_dirty = false;
            h->track_level = h->attempts[0];
            r->h[r->nholds] = (struct vhold){h->id, h->attempts[0], (size_t)r->nholds};
            picked[r->nholds++] = h;
        }
    memset(r->v, -1, (size_t)m * (size_t)t->n);
    for (int k = 0; k < chunks; k++) {
        int first = k * CHUNK, cm = m - first < CHUNK ? m - first : CHUNK;
        for (int j = 0; j < cm; j++) {
            struct hold *h = picked[first + j];
            names[j] = lock_names_of(h->lock);
            fl[j] = (size_t)client_field(c, h->owner, fields[j], FIELD_LEN);
            fp[j] = fields[j];
            levels[j] = h->attempts[0];
        }
        /* EXISTS registers the keys for tracking whatever the server does
         * with reads inside scripts. */
        cmds[2 * k] = call_exists_many(cm, names);
        cmds[2 * k + 1] = call_verify_many(cm, names, c->uuid, fp, fl, levels);
    }
    *nchunks = chunks;
    r->nchunks = chunks;
out:
    free(picked);
    free(fields);
    free(fp);
    free(fl);
    free(levels);
    free(names);
    return cmds;
}

/* Starts a round on every ready node, if holds are dirty. */
static void start_round(struct tracking *t, int64_t now)
{
    int ready = 0;
    for (int i = 0; i < t->n; i++)
        ready += t->nodes[i].state == T_READY;
    if (ready == 0 || t->r.active)
        return;
    int nchunks;
    struct rlc_cmd **cmds = collect(t, now, &nchunks);
    if (!cmds)
        return;
    for (int i = 0; i < t->n; i++) {
        struct tnode *tn = &t->nodes[i];
        if (tn->state != T_READY)
            continue;
        int rc = RLC_OK;
        for (int k = 0; k < nchunks && rc == RLC_OK; k++) {
            rc = cmds[2 * k] && cmds[2 * k + 1] ? RLC_OK : RLC_E_NOMEM;
            if (rc == RLC_OK)
                rc = conn_queue(&tn->rd, cmds[2 * k]->data, cmds[2 * k]->len);
            if (rc == RLC_OK)
                rc = push_pend(tn, P_EXISTS, k);
            if (rc == RLC_OK)
                rc = conn_queue(&tn->rd, cmds[2 * k + 1]->data, cmds[2 * k + 1]->len);
            if (rc == RLC_OK)
                rc = push_pend(tn, P_VERIFY, k);
            if (rc == RLC_OK)
                tn->left++;
        }
        if (rc != RLC_OK)
            node_down(t, i, now, NULL);
    }
    for (int k = 0; k < 2 * nchunks; k++)
        cmd_unref(cmds[k]);
    free(cmds);
    t->r.active = true;
    t->r.deadline_ns = now + t->c->opts.io_timeout_ms * RLC_NS_PER_MS;
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
    for (int i = 0; i < t->n; i++)
        if (t->nodes[i].left > 0)
            return;
    pthread_mutex_lock(&t->c->mu);
    apply(t);
    pthread_mutex_unlock(&t->c->mu);
    round_clear(&t->r);
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
    struct tnode *tn = &t->nodes[i];
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

/* A reply on rd answers its oldest command. */
static int on_rd(struct tracking *t, int i, const redisReply *r, char *why, size_t size)
{
    struct tnode *tn = &t->nodes[i];
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
    if (kind == P_EXISTS || !t->r.active || tn->left == 0)
        return RLC_OK;
    tn->left--;
    /* An error reply (OOM on a full server, a script refused) leaves this
     * node's verdicts unknown: no answer is never a loss. */
    if (r->type != REDIS_REPLY_ARRAY)
        return RLC_OK;
    int first = k * CHUNK;
    for (size_t j = 0; j < r->elements && first + (int)j < t->r.nholds; j++)
        if (r->element[j]->type == REDIS_REPLY_INTEGER)
            t->r.v[(size_t)(first + (int)j) * (size_t)t->n + (size_t)i] =
                r->element[j]->integer == 1 ? 1 : 0;
    return RLC_OK;
}

/* ---- the background thread's side --------------------------------------- */

static bool stuck(const struct conn *cn, int64_t now, int64_t limit_ns)
{
    return cn->state == CONN_CONNECTING && now - cn->connect_started_ns > limit_ns;
}

static int add_pfd(struct tracking *t, struct pollfd *pfd, int np, int max, int i, bool rd)
{
    struct conn *cn = rd ? &t->nodes[i].rd : &t->nodes[i].sub;
    if (cn->state == CONN_CLOSED || np >= max)
        return np;
    pfd[np] = (struct pollfd){cn->fd, conn_events(cn), 0};
    t->polled[np] = 2 * i + rd;
    return np + 1;
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

    /* A node that owes the round an answer too long is given up (a hung
     * server keeps its socket open): its verdicts stay unknown. */
    if (t->r.active && now >= t->r.deadline_ns)
        for (int i = 0; i < t->n; i++)
            if (t->nodes[i].left > 0)
                node_down(t, i, now, NULL);
    round_done_check(t);

    pthread_mutex_lock(&c->mu);
    bool want = c->renewing != NULL;
    apply_invalidations(t);
    if (want)
        start_round(t, now);
    pthread_mutex_unlock(&c->mu);
    if (t->r.active && t->r.deadline_ns < *next_ns)
        *next_ns = t->r.deadline_ns;

    int np = 0;
    for (int i = 0; i < t->n; i++) {
        struct tnode *tn = &t->nodes[i];
        if (tn->state == T_DOWN) {
            if (!want)
                continue;
            if (now < tn->retry_at_ns) {
                if (tn->retry_at_ns < *next_ns)
                    *next_ns = tn->retry_at_ns;
                continue;
            }
            if (start_sub(t, i, now) != RLC_OK) {
                node_down(t, i, now, NULL);
                continue;
            }
        }
        /* A sentinel node's master moved: the old one may be a flushed
         * replica soon, whose "gone" must not count. Start over there. */
        if (conn_moved(&tn->sub) || conn_moved(&tn->rd) ||
            stuck(&tn->sub, now, connect_ns) || stuck(&tn->rd, now, connect_ns) ||
            ((tn->state == T_HELLO || tn->state == T_TRACK) && now - tn->step_since_ns > step_ns)) {
            node_down(t, i, now, NULL);
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
            node_down(t, i, now, NULL);
            continue;
        }
        np = add_pfd(t, pfd, np, max, i, false);
        np = add_pfd(t, pfd, np, max, i, true);
    }
    return np;
}

static int service_conn(struct tracking *t, int i, bool rd, short revents, int64_t now,
                        char *why, size_t size)
{
    struct tnode *tn = &t->nodes[i];
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
        rc = rd ? on_rd(t, i, reply, why, size) : on_sub(t, i, reply, now, why, size);
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
        int i = t->polled[j] / 2;
        bool rd = t->polled[j] % 2;
        struct conn *cn = rd ? &t->nodes[i].rd : &t->nodes[i].sub;
        if (!pfd[j].revents || cn->fd != pfd[j].fd)
            continue;
        char why[RLC_ERRLEN] = "";
        int rc = service_conn(t, i, rd, pfd[j].revents, now, why, sizeof why);
        if (rc != RLC_OK)
            node_down(t, i, now, rc == RLC_E_SERVER ? why : NULL);
    }
    round_done_check(t);
}
