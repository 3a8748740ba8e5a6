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
#include <pthread.h>
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
    struct cmap map;               /* slots -> masters (cluster_map.c); entry i is map.m[i] */
    struct entry e[RLC_CLUSTER_MAX_NODES];
    int n;                         /* entries made (map.n once each has its address) */
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

/* Makes the entries of masters the map named since (each with the URI's
 * user and password). False without memory: those stay unusable. */
static bool make_entries(struct cluster *cl)
{
    while (cl->n < cl->map.n) {
        const struct cmap_master *m = &cl->map.m[cl->n];
        struct node_addr *a = &cl->e[cl->n].addr;
        memset(a, 0, sizeof *a);
        a->host = strdup(m->host);
        a->port = m->port;
        /* rediss-cluster://: every master over TLS, with the client's
         * settings (borrowed: the client outlives its clusters) */
        a->tls = cl->seed->tls;
        a->tls_ctx = cl->seed->tls_ctx;
        a->user = cl->seed->user ? strdup(cl->seed->user) : NULL;
        a->password = cl->seed->password ? strdup(cl->seed->password) : NULL;
        a->resolver = a->host ? resolver_new(m->host, m->port) : NULL;
        if (!a->host || !a->resolver || (cl->seed->user && !a->user) ||
            (cl->seed->password && !a->password)) {
            free(a->host);
            free(a->user);
            free(a->password);
            if (a->resolver)
                resolver_unref(a->resolver);
            memset(a, 0, sizeof *a);
            return false;
        }
        size_t ll = strlen(m->label) < sizeof a->label ? strlen(m->label) : sizeof a->label - 1;
        memcpy(a->label, m->label, ll);
        a->label[ll] = '\0';
        cl->n++;
    }
    return true;
}

/* Under mu: the entry for master index i of the map (made if new), or -1. */
static int entry_of(struct cluster *cl, int i)
{
    if (i < 0 || cl->stop || !make_entries(cl))
        return i < cl->n ? i : -1;
    return i;
}

/* The entry for host:port, added if new; -1 when the table is full or
 * there is no memory. */
static int add_entry(struct cluster *cl, const char *host, int port)
{
    return entry_of(cl, cmap_master(&cl->map, host, strlen(host), port));
}

/* The entry owning slot, or -1 unknown. */
static int owner_of(const struct cluster *cl, int slot)
{
    int i = slot >= 0 && slot < RLC_SLOTS ? cl->map.owner[slot] - 1 : -1;
    return i < cl->n ? i : -1;
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
    if (owner_of(cl, *slot) >= 0)
        i = owner_of(cl, *slot);
    else if (*slot < 0 && last_cl == cl && last_entry < cl->n) /* < n: an address reused */
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

/* Under mu: applies a redirection (cluster_map.c): the entry it names, or
 * -1. `from`: the entry the command went to. */
static int apply_redirect(struct cluster *cl, const redisReply *r, int from, bool *moved)
{
    int slot, master;
    uint8_t before[RLC_SLOTS];
    memcpy(before, cl->map.owner, sizeof before);
    enum cmap_redirect kind = cmap_redirect(&cl->map, r, from, &slot, &master);
    *moved = kind == CMAP_MOVED;
    if (kind == CMAP_MOVED && slot >= 0 && before[slot] != cl->map.owner[slot])
        cl->epoch++;
    return kind == CMAP_MOVED || kind == CMAP_ASK ? entry_of(cl, master) : -1;
}

struct mux *cluster_redirect(struct cluster *cl, int pool, int slot, const redisReply *r,
                             bool *asking, int64_t *pause_ms, char *err, size_t err_size)
{
    *asking = false;
    *pause_ms = 0;
    struct mux *m = NULL;
    pthread_mutex_lock(&cl->mu);
    int i = -1;
    if (starts(r->str, r->len, "MOVED ") || starts(r->str, r->len, "ASK ")) {
        bool moved;
        int from = owner_of(cl, slot);
        i = apply_redirect(cl, r, from >= 0 ? from : 0, &moved);
        if (moved)
            cl->want_refresh = true; /* one slot moved: others likely did too */
        else
            *asking = true;
    } else { /* TRYAGAIN (keys of a slot in the middle of a move), CLUSTERDOWN */
        *pause_ms = 20;
        i = owner_of(cl, slot) >= 0 ? owner_of(cl, slot) : 0;
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

/* CLUSTER SLOTS from entry `asked` -> the map (cluster_map.c) and entries
 * for its new masters. Returns slots mapped. */
static int apply_slots(struct cluster *cl, const redisReply *r, int asked)
{
    pthread_mutex_lock(&cl->mu);
    bool changed = false;
    int mapped = cmap_apply_slots(&cl->map, r, asked, &changed);
    make_entries(cl);
    if (changed)
        cl->epoch++;
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
    struct mux_req *reqs[2] = {mux_send(m, c1, NULL, tmo),
                               probe ? mux_send(m, c2, NULL, tmo) : NULL};
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
        if (owner_of(cl, s) >= 0)
            is_master[owner_of(cl, s)] = true;
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
    int i = owner_of(cl, d->slot) >= 0 ? owner_of(cl, d->slot) : 0;
    struct mux *m = entry_mux(cl, i, d->pool);
    pthread_mutex_unlock(&cl->mu);
    if (m)
        mux_route_detached(m, d->cmd, d->redo, (struct route_to){cl, &cluster_router}, d->pool,
                           d->slot, d->hops);
    cmd_unref(d->cmd);
    free(d);
}

static void *thread_main(void *arg)
{
    struct cluster *cl = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-cluster-map");
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
    int i = owner_of(cl, slot);
    pthread_mutex_unlock(&cl->mu);
    return i;
}

const struct node_addr *cluster_node_addr(struct cluster *cl, int i)
{
    return &cl->e[i].addr;
}

void cluster_note_moved(struct cluster *cl, const char *words, size_t len)
{
    char text[300];
    redisReply r = {.type = REDIS_REPLY_ERROR, .str = text};
    r.len = (size_t)snprintf(text, sizeof text, "MOVED %.*s", (int)(len < 280 ? len : 280), words);
    bool moved;
    pthread_mutex_lock(&cl->mu);
    apply_redirect(cl, &r, 0, &moved);
    cl->want_refresh = true;
    pthread_cond_signal(&cl->cond);
    pthread_mutex_unlock(&cl->mu);
}

uint64_t cluster_owners(struct cluster *cl, bool owns[RLC_CLUSTER_MAX_NODES])
{
    memset(owns, 0, sizeof(bool) * RLC_CLUSTER_MAX_NODES);
    pthread_mutex_lock(&cl->mu);
    for (int s = 0; s < RLC_SLOTS; s++) {
        int i = owner_of(cl, s);
        if (i >= 0)
            owns[i] = true;
    }
    uint64_t e = cl->epoch;
    pthread_mutex_unlock(&cl->mu);
    return e;
}

uint64_t cluster_epoch(struct cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    uint64_t e = cl->epoch;
    pthread_mutex_unlock(&cl->mu);
    return e;
}

const struct mux_router cluster_router = {
    .pick = cluster_pick,
    .redirect = cluster_redirect,
    .defer = cluster_defer,
    .want_refresh = cluster_want_refresh,
    .push_detached = cluster_push_detached,
    .shutdown = cluster_shutdown,
};
