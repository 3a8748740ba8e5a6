/*
 * cluster.c - the slot map of one Redis Cluster, and where each command goes.
 *
 * The map says, for each of the 16384 slots, which entry of a small node
 * table owns it. The table only grows: an entry's address and connections
 * stay valid for the client's life (a request may still point at them), and
 * an entry that lost its slots (a failed master, now a replica) simply owns
 * none. The seeds are its first entries, so a command whose slot is not
 * known yet goes to a seed, whose MOVED then teaches the map.
 *
 * Who does what:
 *   - callers (mux.c) pick a connection under the cluster's mutex (a table
 *     look-up, never I/O) and follow redirections on their own thread;
 *   - the cluster's thread reads the full map (CLUSTER SLOTS) for the first
 *     command, when asked (a MOVED, a broken connection, a slot moved under
 *     a subscription; spaced REFRESH_GAP apart), and every REFRESH_EVERY; it
 *     also re-sends detached commands (an undo, a release) that came back
 *     redirected. It never takes the client's mutex.
 *
 * The first read also probes sharded pub/sub the way Redisson does
 * (ClusterConnectionManager -> PublishSubscribeService.checkShardingSupport):
 * if the node answers PUBSUB SHARDNUMSUB, unlock messages go by SPUBLISH
 * and waiters use SSUBSCRIBE on the slot's master.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "cluster.h"
#include "cmd.h"
#include "mux.h"
#include "resolve.h"
#include "scripts.h"
#include "slot.h"
#include "state.h"

#define REFRESH_GAP_NS (100 * RLC_NS_PER_MS)
#define REFRESH_EVERY_NS (5000 * RLC_NS_PER_MS)

struct entry {
    struct node_addr addr;
    struct mux *muxes; /* pool_size of them, made on first use */
};

struct deferred {
    struct deferred *next;
    struct rlc_cmd *cmd;
    const struct script *script;
    int pool, slot, hops;
    bool redo;
};

struct cluster {
    rlc_client *c;
    const struct node_addr *seed;  /* the URI's node: auth, label */
    int pool;
    int64_t connect_timeout_ms, stale_ms;
    int wake_fd;

    pthread_mutex_t mu;
    pthread_cond_t cond;           /* work for the thread, or the first map */
    uint8_t owner[RLC_SLOTS];      /* 1 + entry index; 0 unknown */
    struct entry e[RLC_CLUSTER_MAX_NODES];
    int n;
    int n_seeds;
    bool loaded;                   /* the first map read ended (well or not) */
    bool sharded;
    uint64_t epoch;
    bool want_refresh, stop;
    struct deferred *def_head, *def_tail;
    pthread_t thread;
    bool started;
};

/* The entry a thread last sent a keyed command to: where its keyless
 * follow-up (WAIT after a write) must go. */
static __thread struct cluster *last_cl;
static __thread int last_entry;

/* ---- the node table (under mu) ------------------------------------------- */

static int find_entry(const struct cluster *cl, const char *host, int port)
{
    for (int i = 0; i < cl->n; i++)
        if (cl->e[i].addr.port == port && strcmp(cl->e[i].addr.host, host) == 0)
            return i;
    return -1;
}

/* The entry for host:port, added if new; -1 when the table is full or
 * there is no memory. Data nodes take the URI's user and password. */
static int add_entry(struct cluster *cl, const char *host, int port)
{
    int i = find_entry(cl, host, port);
    if (i >= 0 || cl->n == RLC_CLUSTER_MAX_NODES || cl->stop)
        return i;
    struct node_addr *a = &cl->e[cl->n].addr;
    memset(a, 0, sizeof *a);
    a->host = strdup(host);
    a->port = port;
    a->user = cl->seed->user ? strdup(cl->seed->user) : NULL;
    a->password = cl->seed->password ? strdup(cl->seed->password) : NULL;
    a->resolver = a->host ? resolver_new(host, port) : NULL;
    if (!a->host || !a->resolver || (cl->seed->user && !a->user) ||
        (cl->seed->password && !a->password)) {
        free(a->host);
        free(a->user);
        free(a->password);
        if (a->resolver)
            resolver_unref(a->resolver);
        return -1;
    }
    snprintf(a->label, sizeof a->label, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    return cl->n++;
}

static struct mux *entry_mux(struct cluster *cl, int i, int pool)
{
    struct entry *en = &cl->e[i];
    if (!en->muxes) {
        en->muxes = calloc((size_t)cl->pool, sizeof *en->muxes);
        if (!en->muxes)
            return NULL;
        for (int k = 0; k < cl->pool; k++)
            mux_init(&en->muxes[k], &en->addr, cl->connect_timeout_ms, cl->stale_ms, true,
                     cl->wake_fd);
    }
    return &en->muxes[pool];
}

/* ---- which key a command names --------------------------------------------- */

/* Argument i of a RESP command: its bytes and length, or NULL. */
static const char *arg(const struct rlc_cmd *cmd, int i, size_t *len)
{
    const char *p = cmd->data, *end = cmd->data + cmd->len;
    if (p >= end || *p != '*')
        return NULL;
    long argc = strtol(p + 1, NULL, 10);
    p = memchr(p, '\n', (size_t)(end - p));
    for (long k = 0; p && k < argc; k++) {
        p++;
        if (p >= end || *p != '$')
            return NULL;
        long n = strtol(p + 1, NULL, 10);
        const char *data = memchr(p, '\n', (size_t)(end - p));
        if (!data || n < 0 || data + 1 + n > end)
            return NULL;
        data++;
        if (k == i) {
            *len = (size_t)n;
            return data;
        }
        p = data + n + 1; /* the '\n' after the bulk's "\r" */
    }
    return NULL;
}

static bool word_is(const char *s, size_t len, const char *w)
{
    return len == strlen(w) && strncasecmp(s, w, len) == 0;
}

/* The slot of the command's key, or -1 for a keyless command. */
static int cmd_slot(const struct rlc_cmd *cmd)
{
    size_t len = 0, klen = 0;
    const char *name = arg(cmd, 0, &len), *key = NULL;
    if (!name)
        return -1;
    if (word_is(name, len, "EVALSHA") || word_is(name, len, "EVAL")) {
        size_t nl = 0;
        const char *nk = arg(cmd, 2, &nl);
        if (nk && atoi(nk) > 0)
            key = arg(cmd, 3, &klen);
    } else if (!word_is(name, len, "INFO") && !word_is(name, len, "WAIT") &&
               !word_is(name, len, "PING") && !word_is(name, len, "CLUSTER") &&
               !word_is(name, len, "PUBSUB") && !word_is(name, len, "ASKING")) {
        key = arg(cmd, 1, &klen);
    }
    return key ? (int)slot_of(key, klen) : -1;
}

/* ---- routing ---------------------------------------------------------------- */

struct mux *cluster_pick(struct cluster *cl, int pool, struct rlc_cmd **cmd,
                         const struct script **script, int *slot, int64_t deadline_ns)
{
    *slot = cmd_slot(*cmd);
    pthread_mutex_lock(&cl->mu);
    if (!cl->loaded && !cl->want_refresh) { /* the first command: read the map now */
        cl->want_refresh = true;
        pthread_cond_signal(&cl->cond);
    }
    while (!cl->loaded && !cl->stop && rlc_now_ns() < deadline_ns) {
        struct timespec ts = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
        pthread_cond_timedwait(&cl->cond, &cl->mu, &ts);
    }
    int i = 0; /* the first seed: a MOVED from it teaches the map */
    if (*slot >= 0 && cl->owner[*slot])
        i = cl->owner[*slot] - 1;
    else if (*slot < 0 && last_cl == cl)
        i = last_entry;
    else if (*slot >= 0)
        cl->want_refresh = true;
    if (*slot >= 0) {
        last_cl = cl;
        last_entry = i;
    }
    const struct script *twin = cl->sharded && *script ? script_sharded_twin(*script) : NULL;
    struct mux *m = entry_mux(cl, i, pool);
    if (cl->want_refresh)
        pthread_cond_signal(&cl->cond);
    pthread_mutex_unlock(&cl->mu);

    struct rlc_cmd *swapped = twin ? cmd_with_script(*cmd, *script, twin) : NULL;
    if (swapped) {
        *cmd = swapped;
        *script = twin;
    } else {
        cmd_ref(*cmd);
    }
    return m;
}

static bool starts(const char *s, size_t len, const char *w)
{
    size_t n = strlen(w);
    return len >= n && memcmp(s, w, n) == 0;
}

bool cluster_is_redirect(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           (starts(r->str, r->len, "MOVED ") || starts(r->str, r->len, "ASK ") ||
            starts(r->str, r->len, "TRYAGAIN") || starts(r->str, r->len, "CLUSTERDOWN"));
}

/* "<slot> <host>:<port>" (host may be an IPv6 address: the last ':' splits)
 * -> slot, host, port. The host is "" when the node does not know its own
 * address (cluster-announce-hostname unset and no IP seen yet). */
static bool parse_target(const char *s, size_t len, int *slot, char *host, size_t hsize, int *port)
{
    char buf[300];
    if (len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *sp = strchr(buf, ' ');
    char *colon = strrchr(buf, ':');
    if (!sp || !colon || colon < sp)
        return false;
    *slot = atoi(buf);
    *port = atoi(colon + 1);
    *colon = '\0';
    snprintf(host, hsize, "%s", sp + 1);
    return *slot >= 0 && *slot < RLC_SLOTS && *port > 0 && *port < 65536;
}

/* Under mu: applies a MOVED, returns the entry of the new owner or -1. */
static int apply_moved(struct cluster *cl, const char *words, size_t len, int from)
{
    int slot, port;
    char host[256];
    if (!parse_target(words, len, &slot, host, sizeof host, &port))
        return -1;
    if (!host[0]) /* the address we sent to, as in a CLUSTER SLOTS "" */
        snprintf(host, sizeof host, "%s", cl->e[from >= 0 ? from : 0].addr.host);
    int i = add_entry(cl, host, port);
    if (i >= 0 && cl->owner[slot] != i + 1) {
        cl->owner[slot] = (uint8_t)(i + 1);
        cl->epoch++;
    }
    return i;
}

struct mux *cluster_redirect(struct cluster *cl, int pool, int slot, const redisReply *r,
                             bool *asking, int64_t *pause_ms, char *err, size_t err_size)
{
    *asking = false;
    *pause_ms = 0;
    struct mux *m = NULL;
    pthread_mutex_lock(&cl->mu);
    int i = -1;
    if (starts(r->str, r->len, "MOVED ")) {
        i = apply_moved(cl, r->str + 6, r->len - 6, slot >= 0 ? cl->owner[slot] - 1 : -1);
        cl->want_refresh = true; /* one slot moved: others likely did too */
    } else if (starts(r->str, r->len, "ASK ")) {
        int s, port;
        char host[256];
        if (parse_target(r->str + 4, r->len - 4, &s, host, sizeof host, &port))
            i = add_entry(cl, host[0] ? host : cl->e[0].addr.host, port);
        *asking = true;
    } else { /* TRYAGAIN (keys of a slot in the middle of a move), CLUSTERDOWN */
        *pause_ms = 20;
        i = slot >= 0 && cl->owner[slot] ? cl->owner[slot] - 1 : 0;
        if (starts(r->str, r->len, "CLUSTERDOWN"))
            cl->want_refresh = true;
    }
    if (i >= 0)
        m = entry_mux(cl, i, pool);
    else
        snprintf(err, err_size, "cluster %s: cannot follow '%.*s' (bad address, or more than "
                 "%d nodes seen)", cl->seed->label, (int)(r->len > 100 ? 100 : r->len), r->str,
                 RLC_CLUSTER_MAX_NODES);
    if (cl->want_refresh)
        pthread_cond_signal(&cl->cond);
    pthread_mutex_unlock(&cl->mu);
    return m;
}

void cluster_defer(struct cluster *cl, int pool, struct rlc_cmd *cmd, const struct script *script,
                   int slot, int hops, bool redo)
{
    if (hops > RLC_CLUSTER_MAX_HOPS)
        return;
    struct deferred *d = malloc(sizeof *d);
    if (!d)
        return;
    *d = (struct deferred){NULL, cmd_ref(cmd), script, pool, slot, hops, redo};
    pthread_mutex_lock(&cl->mu);
    if (cl->stop) {
        pthread_mutex_unlock(&cl->mu);
        cmd_unref(d->cmd);
        free(d);
        return;
    }
    if (cl->def_tail)
        cl->def_tail->next = d;
    else
        cl->def_head = d;
    cl->def_tail = d;
    pthread_cond_signal(&cl->cond);
    pthread_mutex_unlock(&cl->mu);
}

void cluster_want_refresh(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    if (!cl->want_refresh) {
        cl->want_refresh = true;
        pthread_cond_signal(&cl->cond);
    }
    pthread_mutex_unlock(&cl->mu);
}

/* ---- the map's refresh (the cluster's thread) ------------------------------ */

/* CLUSTER SLOTS -> owners[] and new entries. Each element is
 * [start, end, [host, port, id, ...], replicas...]. Returns slots mapped. */
static int apply_slots(struct cluster *cl, const redisReply *r, int asked)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return 0;
    uint8_t owner[RLC_SLOTS];
    memset(owner, 0, sizeof owner);
    int mapped = 0;
    pthread_mutex_lock(&cl->mu);
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *m = e->element[2];
        if (m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        /* "" or "?": the node does not know its address; it is the one asked */
        const char *host = m->element[0]->str;
        if (!host[0] || strcmp(host, "?") == 0)
            host = cl->e[asked].addr.host;
        int i = add_entry(cl, host, (int)m->element[1]->integer);
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        for (long long s = lo; i >= 0 && s <= hi && s >= 0 && s < RLC_SLOTS; s++, mapped++)
            owner[s] = (uint8_t)(i + 1);
    }
    if (mapped > 0 && memcmp(owner, cl->owner, sizeof owner) != 0) {
        memcpy(cl->owner, owner, sizeof owner);
        cl->epoch++;
    }
    pthread_mutex_unlock(&cl->mu);
    return mapped;
}

/* Asks entry i for the map (and, the first time, whether it has sharded
 * pub/sub). Returns whether it answered with one. */
static bool refresh_from(struct cluster *cl, int i, bool probe)
{
    pthread_mutex_lock(&cl->mu);
    struct mux *m = entry_mux(cl, i, 0);
    pthread_mutex_unlock(&cl->mu);
    if (!m)
        return false;
    const char *slots[2] = {"CLUSTER", "SLOTS"}, *shard[2] = {"PUBSUB", "SHARDNUMSUB"};
    size_t slots_len[2] = {7, 5}, shard_len[2] = {6, 11};
    struct rlc_cmd *c1 = cmd_format(2, slots, slots_len);
    struct rlc_cmd *c2 = probe ? cmd_format(2, shard, shard_len) : NULL;
    if (!c1 || (probe && !c2)) {
        cmd_unref(c1);
        cmd_unref(c2);
        return false;
    }
    int64_t tmo = cl->c->opts.io_timeout_ms;
    struct mux_req *reqs[2] = {mux_send(m, c1, NULL, tmo), probe ? mux_send(m, c2, NULL, tmo) : NULL};
    struct mux_result res[2];
    memset(res, 0, sizeof res);
    mux_wait(reqs, probe ? 2 : 1, res);
    cmd_unref(c1);
    cmd_unref(c2);
    bool ok = res[0].status == RLC_OK && apply_slots(cl, res[0].reply, i) > 0;
    if (ok && probe) {
        pthread_mutex_lock(&cl->mu);
        cl->sharded = res[1].status == RLC_OK && res[1].reply &&
                      res[1].reply->type == REDIS_REPLY_ARRAY;
        pthread_mutex_unlock(&cl->mu);
    }
    for (int k = 0; k < 2; k++)
        if (res[k].reply)
            freeReplyObject(res[k].reply);
    return ok;
}

/* Known masters first (they are up, most likely), then every other entry
 * (seeds, old masters now replicas). */
static void refresh(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    bool probe = !cl->loaded;
    int n = cl->n;
    bool is_master[RLC_CLUSTER_MAX_NODES] = {false};
    for (int s = 0; s < RLC_SLOTS; s++)
        if (cl->owner[s])
            is_master[cl->owner[s] - 1] = true;
    pthread_mutex_unlock(&cl->mu);
    bool ok = false;
    for (int pass = 0; pass < 2 && !ok; pass++)
        for (int i = 0; i < n && !ok; i++)
            if (is_master[i] == (pass == 0))
                ok = refresh_from(cl, i, probe);
    pthread_mutex_lock(&cl->mu);
    if (!cl->loaded) {
        cl->loaded = true; /* well or not: callers stop waiting for it */
        pthread_cond_broadcast(&cl->cond);
    }
    pthread_mutex_unlock(&cl->mu);
    /* Subscriptions follow the map (pubsub.c, on the client's thread). */
    client_wake_thread(cl->c);
}

static void resend(struct cluster *cl, struct deferred *d)
{
    pthread_mutex_lock(&cl->mu);
    int i = d->slot >= 0 && cl->owner[d->slot] ? cl->owner[d->slot] - 1 : 0;
    struct mux *m = entry_mux(cl, i, d->pool);
    pthread_mutex_unlock(&cl->mu);
    if (m)
        mux_route_detached(m, d->cmd, d->redo, cl, d->pool, d->slot, d->hops);
    cmd_unref(d->cmd);
    free(d);
}

static void *thread_main(void *arg)
{
    struct cluster *cl = arg;
    /* Like every connection of a client, the map is first read when the
     * first command needs it (cluster_pick), then kept fresh. */
    int64_t next_full = RLC_FOREVER_NS, not_before = 0;
    pthread_mutex_lock(&cl->mu);
    while (!cl->stop) {
        int64_t now = rlc_now_ns();
        if (cl->def_head) {
            /* First the map a MOVED asked for: the re-sends use it. */
            struct deferred *d = cl->def_head;
            cl->def_head = cl->def_tail = NULL;
            pthread_mutex_unlock(&cl->mu);
            while (d) {
                struct deferred *next = d->next;
                resend(cl, d);
                d = next;
            }
            pthread_mutex_lock(&cl->mu);
            continue;
        }
        if ((cl->want_refresh && now >= not_before) || now >= next_full) {
            cl->want_refresh = false;
            pthread_mutex_unlock(&cl->mu);
            refresh(cl);
            now = rlc_now_ns();
            not_before = now + REFRESH_GAP_NS;
            next_full = now + REFRESH_EVERY_NS;
            pthread_mutex_lock(&cl->mu);
            continue;
        }
        int64_t until = cl->want_refresh && not_before < next_full ? not_before : next_full;
        struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
        pthread_cond_timedwait(&cl->cond, &cl->mu, &ts);
    }
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* ---- life ------------------------------------------------------------------ */

struct cluster *cluster_new(rlc_client *c, int node, int64_t connect_timeout_ms, int64_t stale_ms,
                            int wake_fd)
{
    const struct node_addr *a = &c->nodes[node];
    struct cluster *cl = calloc(1, sizeof *cl);
    if (!cl)
        return NULL;
    cl->c = c;
    cl->seed = a;
    cl->pool = (int)c->opts.pool_size;
    cl->connect_timeout_ms = connect_timeout_ms;
    cl->stale_ms = stale_ms;
    cl->wake_fd = wake_fd;
    pthread_mutex_init(&cl->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cl->cond, &attr);
    pthread_condattr_destroy(&attr);
    for (int k = 0; k < a->n_seeds; k++)
        add_entry(cl, a->seeds[k].host, a->seeds[k].port);
    cl->n_seeds = cl->n;
    if (cl->n == 0 || pthread_create(&cl->thread, NULL, thread_main, cl) != 0) {
        cluster_free(cl, false);
        return NULL;
    }
    cl->started = true;
    return cl;
}

/* Under mu: the connection arrays made so far. */
static int entry_muxes(struct cluster *cl, struct mux **mx)
{
    int n = 0;
    for (int i = 0; i < cl->n; i++)
        if (cl->e[i].muxes)
            mx[n++] = cl->e[i].muxes;
    return n;
}

void cluster_shutdown(struct cluster *cl)
{
    if (!cl)
        return;
    pthread_mutex_lock(&cl->mu);
    cl->stop = true;
    pthread_cond_broadcast(&cl->cond);
    struct mux *mx[RLC_CLUSTER_MAX_NODES];
    int n = entry_muxes(cl, mx);
    pthread_mutex_unlock(&cl->mu);
    /* Fail what the thread may wait for, so that it sees stop at once. */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < cl->pool; k++)
            mux_shutdown(&mx[i][k]);
    if (cl->started) {
        pthread_join(cl->thread, NULL);
        cl->started = false;
    }
}

bool cluster_push_detached(struct cluster *cl)
{
    struct mux *mx[RLC_CLUSTER_MAX_NODES];
    pthread_mutex_lock(&cl->mu);
    int n = entry_muxes(cl, mx);
    pthread_mutex_unlock(&cl->mu);
    bool left = false;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < cl->pool; k++)
            left = mux_push_detached(&mx[i][k]) || left;
    return left;
}

void cluster_free(struct cluster *cl, bool child)
{
    if (!cl)
        return;
    for (int i = 0; i < cl->n; i++) {
        struct entry *en = &cl->e[i];
        for (int k = 0; en->muxes && k < cl->pool; k++) {
            if (child)
                conn_close(&en->muxes[k].conn);
            else
                mux_destroy(&en->muxes[k]);
        }
        free(en->muxes);
        free(en->addr.host);
        free(en->addr.user);
        free(en->addr.password);
        resolver_unref(en->addr.resolver);
    }
    while (cl->def_head) {
        struct deferred *d = cl->def_head;
        cl->def_head = d->next;
        cmd_unref(d->cmd);
        free(d);
    }
    if (!child) {
        pthread_mutex_destroy(&cl->mu);
        pthread_cond_destroy(&cl->cond);
    }
    free(cl);
}

/* ---- for pub/sub --------------------------------------------------------------- */

bool cluster_sharded(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    bool s = cl->sharded;
    pthread_mutex_unlock(&cl->mu);
    return s;
}

bool cluster_loaded(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    bool l = cl->loaded;
    pthread_mutex_unlock(&cl->mu);
    return l;
}

int cluster_master_of(struct cluster *cl, int slot)
{
    pthread_mutex_lock(&cl->mu);
    int i = slot >= 0 && slot < RLC_SLOTS ? cl->owner[slot] - 1 : -1;
    pthread_mutex_unlock(&cl->mu);
    return i;
}

const struct node_addr *cluster_node_addr(struct cluster *cl, int i)
{
    return &cl->e[i].addr;
}

void cluster_note_moved(struct cluster *cl, const char *words, size_t len)
{
    pthread_mutex_lock(&cl->mu);
    apply_moved(cl, words, len, -1);
    cl->want_refresh = true;
    pthread_cond_signal(&cl->cond);
    pthread_mutex_unlock(&cl->mu);
}

uint64_t cluster_epoch(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    uint64_t e = cl->epoch;
    pthread_mutex_unlock(&cl->mu);
    return e;
}
