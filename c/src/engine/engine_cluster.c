/*
 * engine_cluster.c - a redis-cluster:// node of the engine.
 *
 * A cluster is one node of the engine (for Redlock, one vote). Every name a
 * lock uses is in one hash slot (keys.c's brace rule), so each lock's
 * requests go to the one master that owns its slot. The node keeps a slot
 * map (cluster_map.c) and a block of connections: per master, a command
 * and a subscriber connection, numbered base + 2j and base + 2j + 1.
 *
 *   - The map is asked for (CLUSTER SLOTS, and once PUBSUB SHARDNUMSUB,
 *     Redisson's probe for sharded pub/sub) when the first request comes,
 *     after a MOVED, and when a master's connection closes. One question is
 *     in flight at a time; a second wish is kept and asked after it.
 *   - Until the map is known, requests go to the first seed (master 0); a
 *     seed that cannot be reached is replaced by the next one.
 *   - MOVED: the request did not run; the slot's owner is updated and the
 *     request goes to the new owner, as it was (same attempt id: it is the
 *     same attempt). ASK: it goes to the named master once, behind ASKING,
 *     and the map is not changed. At most CMAP_MAX_HOPS of them per request,
 *     then the error reaches the operation.
 *   - TRYAGAIN, CLUSTERDOWN: the request did not run; it is parked and goes
 *     out again after a pause, while someone needs its answer (retry_later).
 *   - When the map changes, requests still queued for a master that no
 *     longer owns their slot move to the one that does, and subscriptions
 *     move with their slots.
 *   - On a sharded cluster (Redis 7), waiters SSUBSCRIBE on their slot's
 *     master and releases SPUBLISH (the scripts' twins, scripts.c), as
 *     Redisson does there; otherwise SUBSCRIBE and PUBLISH, which a cluster
 *     spreads to every node.
 *
 * Safety is the standalone argument: a redirection only ever re-sends a
 * request that did not run (MOVED, ASK), and a moved connection settles
 * what was in flight as unanswered (engine_conn.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "scripts.h"

#define CLUSTER_RETRY_MS 20 /* the first pause after TRYAGAIN / CLUSTERDOWN */

struct eng_cluster {
    struct cmap map;
    int node;
    int base;                /* its first connection */
    int seed;                /* the seed master 0 stands for, until the map is known */
    int unreached;           /* seeds tried in a row without a connection */
    bool owns[CMAP_MAX_MASTERS]; /* master j owns slots now (its subscriber is wanted) */
    bool sharded;            /* PUBSUB SHARDNUMSUB answered */
    bool probed;
    struct req *map_req;     /* the question in flight, or NULL */
    struct req *probe_req;
    bool again;              /* asked again while one was in flight */
};

bool is_cluster(const rlc_engine *e, int node)
{
    return e->clusters && e->clusters[node];
}

static struct conn *cmd_conn(rlc_engine *e, const struct eng_cluster *cl, int master)
{
    return &e->conns[cl->base + 2 * master];
}

static struct rlc_cmd *words(int argc, const char *const *argv)
{
    struct rlc_cmd *cmd = cmd_words(argc, argv);
    if (!cmd)
        abort(); /* a map question that cannot be asked would strand requests */
    return cmd;
}

/* Whom to ask for the map: a master whose command connection is up (one
 * that owns slots first); else one not known down (not `avoid`, whose
 * connection just closed, nor one whose last connect failed), one that
 * owns slots first; else master 0 (a seed, until the map is known). A
 * killed master must not be the only one asked: the others know who
 * took its slots. */
static int ask_whom(rlc_engine *e, const struct eng_cluster *cl, int avoid)
{
    bool owns[CMAP_MAX_MASTERS] = {false};
    for (int s = 0; s < RLC_SLOTS; s++)
        if (cl->map.owner[s])
            owns[cl->map.owner[s] - 1] = true;
    for (int pass = 0; pass < 4; pass++)
        for (int j = 0; j < cl->map.n; j++) {
            const struct conn *c = cmd_conn(e, cl, j);
            bool up = c->state == C_UP, maybe = j != avoid && c->fails == 0;
            if ((pass == 0 && up && owns[j]) || (pass == 1 && up) ||
                (pass == 2 && maybe && owns[j]) || (pass == 3 && maybe))
                return j;
        }
    return 0;
}

static void ask_map_avoiding(rlc_engine *e, struct eng_cluster *cl, int avoid)
{
    if (cl->map_req) {
        cl->again = true;
        return;
    }
    cl->again = false;
    struct conn *c = cmd_conn(e, cl, ask_whom(e, cl, avoid));
    const char *slots[2] = {"CLUSTER", "SLOTS"};
    /* first: the map comes before the requests queued behind it */
    cl->map_req = conn_own_req(e, cl->node, R_MAP, words(2, slots));
    conn_put(e, c, cl->map_req, c->state != C_UP);
    if (!cl->probed && !cl->probe_req) {
        const char *probe[2] = {"PUBSUB", "SHARDNUMSUB"};
        cl->probe_req = conn_own_req(e, cl->node, R_PROBE, words(2, probe));
        if (c->state == C_UP) {
            conn_put(e, c, cl->probe_req, false);
        } else {
            /* behind the map's question, ahead of the rest */
            cl->probe_req->next = cl->map_req->next;
            cl->map_req->next = cl->probe_req;
            if (c->qtail == cl->map_req)
                c->qtail = cl->probe_req;
        }
    }
}

static void ask_map(rlc_engine *e, struct eng_cluster *cl)
{
    ask_map_avoiding(e, cl, -1);
}

/* After the owners changed: which masters own slots now. */
static void note_owners(struct eng_cluster *cl)
{
    memset(cl->owns, 0, sizeof cl->owns);
    for (int s = 0; s < RLC_SLOTS; s++)
        if (cl->map.owner[s])
            cl->owns[cl->map.owner[s] - 1] = true;
}

struct conn *cluster_route(rlc_engine *e, int node, unsigned slot)
{
    struct eng_cluster *cl = e->clusters[node];
    if (!cl->map.loaded && !cl->map_req)
        ask_map(e, cl);
    int j = cl->map.owner[slot % RLC_SLOTS] ? cl->map.owner[slot % RLC_SLOTS] - 1 : 0;
    return cmd_conn(e, cl, j);
}

const struct script *cluster_script(const rlc_engine *e, int node, const struct script *s)
{
    const struct script *t = s && e->clusters[node]->sharded ? script_sharded_twin(s) : NULL;
    return t ? t : s;
}

/* ---- subscriptions ----------------------------------------------------------- */

struct conn *cluster_sub_conn(rlc_engine *e, int node, unsigned slot)
{
    struct eng_cluster *cl = e->clusters[node];
    int j = cl->map.owner[slot % RLC_SLOTS] ? cl->map.owner[slot % RLC_SLOTS] - 1 : 0;
    return cmd_conn(e, cl, j) + 1;
}

const char *cluster_sub_verb(const rlc_engine *e, int node, bool subscribe)
{
    if (e->clusters[node]->sharded)
        return subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE";
    return subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE";
}

/* After the map changed: each subscribed lock whose slot moved leaves its
 * old master's subscriber and joins the new one's. */
static void move_subs(rlc_engine *e, struct eng_cluster *cl, const uint8_t *old)
{
    for (int b = 0; b < ENG_BUCKETS; b++)
        for (struct eng_lock *l = e->buckets[b]; l; l = l->next) {
            if (!l->subscribed || old[l->slot] == cl->map.owner[l->slot])
                continue;
            const char *argv[2] = {NULL, l->channel};
            size_t lens[2] = {0, l->channel_len};
            struct conn *from = old[l->slot] ? cmd_conn(e, cl, old[l->slot] - 1) + 1 : NULL;
            struct conn *to = cluster_sub_conn(e, cl->node, l->slot);
            l->confirms &= ~(UINT64_C(1) << cl->node);
            for (int k = 0; k < 2; k++) {
                struct conn *c = k == 0 ? from : to;
                if (!c || c->state != C_UP)
                    continue; /* `to` subscribes it when it connects */
                argv[0] = cluster_sub_verb(e, cl->node, k == 1);
                lens[0] = strlen(argv[0]);
                conn_append_cmd(e, c, 2, argv, lens);
            }
        }
}

void cluster_sub_moved(rlc_engine *e, struct conn *c, const redisReply *r)
{
    struct eng_cluster *cl = e->clusters[c->node];
    int slot, master;
    uint8_t old[RLC_SLOTS];
    memcpy(old, cl->map.owner, sizeof old);
    if (cmap_redirect(&cl->map, r, c->master, &slot, &master) == CMAP_MOVED && master >= 0) {
        note_owners(cl);
        move_subs(e, cl, old);
    }
    ask_map(e, cl);
}

/* ---- the map's answers ------------------------------------------------------- */

/* Requests queued for masters that no longer own their slot go to the one
 * that does (in order). */
static void reroute(rlc_engine *e, struct eng_cluster *cl)
{
    for (int j = 0; j < cl->map.n; j++) {
        struct conn *c = cmd_conn(e, cl, j);
        struct req *keep = NULL, *keep_tail = NULL, *r = c->qhead;
        c->qhead = c->qtail = NULL;
        while (r) {
            struct req *next = r->next;
            r->next = NULL;
            int owner = r->kind < R_MAP ? cl->map.owner[r->slot % RLC_SLOTS] - 1 : j;
            if (owner >= 0 && owner != j && r->kind != R_HELLO) {
                conn_put(e, cmd_conn(e, cl, owner), r, false);
            } else {
                if (keep_tail)
                    keep_tail->next = r;
                else
                    keep = r;
                keep_tail = r;
            }
            r = next;
        }
        c->qhead = keep;
        c->qtail = keep_tail;
    }
}

void cluster_own_reply(rlc_engine *e, struct conn *c, struct req *r, const redisReply *reply)
{
    struct eng_cluster *cl = e->clusters ? e->clusters[r->node] : NULL;
    if (!cl)
        return;
    if (r == cl->probe_req) {
        cl->probe_req = NULL;
        if (reply) {
            cl->probed = true;
            cl->sharded = reply->type == REDIS_REPLY_ARRAY;
        }
        return;
    }
    if (r != cl->map_req)
        return; /* ASKING's +OK */
    cl->map_req = NULL;
    if (reply) {
        uint8_t old[RLC_SLOTS];
        memcpy(old, cl->map.owner, sizeof old);
        bool changed = false;
        if (cmap_apply_slots(&cl->map, reply, c ? c->master : -1, &changed) > 0 && changed) {
            note_owners(cl);
            reroute(e, cl);
            move_subs(e, cl, old);
        }
    }
    if (reply && cl->again)
        ask_map(e, cl); /* without an answer, the closed connection asks (below) */
}

/* TRYAGAIN (a multi-key call on a slot whose keys are half moved) or
 * CLUSTERDOWN (a failover under way): the call did not run. It is parked
 * and goes out again after a pause that doubles (20 ms to 640 ms), to the
 * slot's owner of then, as long as someone needs its answer: its round (an
 * abandoned acquire is dropped, E3) or its redo (a release or an undo goes
 * on until it is answered, E2, E4). */
static bool retry_later(rlc_engine *e, struct eng_cluster *cl, struct conn *c, struct req *r,
                        const redisReply *reply)
{
    if (!r->op && !r->redo)
        return false; /* nobody waits for it: the error reply ends it */
    if (strncmp(reply->str, "CLUSTERDOWN", 11) == 0)
        ask_map(e, cl); /* a failover: the slot may have a new owner */
    int shift = r->retries < 5 ? r->retries : 5;
    r->retries++;
    r->hops = 0; /* the hops bound redirections without a pause between them */
    conn_park(e, c, r, e->now + (CLUSTER_RETRY_MS << shift));
    return true;
}

bool cluster_redirected(rlc_engine *e, struct conn *c, struct req *r, const redisReply *reply)
{
    struct eng_cluster *cl = e->clusters[c->node];
    if (reply->type != REDIS_REPLY_ERROR)
        return false;
    int slot, master;
    enum cmap_redirect kind = cmap_redirect(&cl->map, reply, c->master, &slot, &master);
    if (kind == CMAP_RETRY)
        return retry_later(e, cl, c, r, reply);
    if ((kind == CMAP_MOVED || kind == CMAP_ASK) && r->hops >= CMAP_MAX_HOPS)
        /* redirected back and forth (mid-migration: ASK to the importing
         * master, a NOSCRIPT's EVAL there without ASKING is MOVED back):
         * a pause, then again from the map, while it is needed; no
         * redirection reaches the operation as an error */
        return retry_later(e, cl, c, r, reply);
    if (kind == CMAP_MOVED) {
        note_owners(cl);
        ask_map(e, cl); /* one slot moved: others likely did too */
    }
    if ((kind != CMAP_MOVED && kind != CMAP_ASK) || master < 0)
        return false;
    r->hops++;
    struct conn *to = cmd_conn(e, cl, master);
    if (kind == CMAP_ASK) {
        const char *asking[1] = {"ASKING"};
        conn_put(e, to, conn_own_req(e, cl->node, R_ASKING, words(1, asking)), false);
    }
    conn_put(e, to, r, false);
    return true;
}

void cluster_conn_closed(rlc_engine *e, struct conn *c, bool was_up)
{
    struct eng_cluster *cl = e->clusters[c->node];
    const struct node_addr *a = &e->addrs[c->node];
    if (!cl->map.loaded && c->master == 0 && !c->sub && !was_up && a->n_seeds > 1) {
        /* master 0 stands for a seed until the map is known: try the next.
         * Its command connection tells: the subscriber's failed connect must
         * not move master 0 under a command connection up (or being opened)
         * to this seed, which would stay there while the map names the seed
         * another master: a MOVED to master 0 would come back to it. */
        cl->seed = (cl->seed + 1) % a->n_seeds;
        struct cmap_master *m = &cl->map.m[0];
        snprintf(m->host, sizeof m->host, "%s", a->seeds[cl->seed].host);
        m->port = a->seeds[cl->seed].port;
        snprintf(m->label, sizeof m->label, "%s", a->seeds[cl->seed].label);
        /* the next seed at once, until all were tried: then the backoff */
        if (++cl->unreached < a->n_seeds)
            c->retry_at = e->now;
        else
            cl->unreached = 0;
    }
    if (!cl->map_req)
        ask_map_avoiding(e, cl, c->master); /* a master gone: the map may have changed */
}

int cluster_want_open(const rlc_engine *e, const struct conn *c)
{
    const struct eng_cluster *cl = e->clusters[c->node];
    if (c->master >= cl->map.n)
        return 0;
    if (c->sub && c->state != C_DROPPED)
        /* a master that owns no slot (a seed, one failed over) has no waiter */
        return e->n_subscribed > 0 && (cl->owns[c->master] || (!cl->map.loaded && c->master == 0))
                   ? 1 : 0;
    return conn_want_open(e, (int)(c - e->conns));
}

int cluster_address(const rlc_engine *e, const struct conn *c, const char **host, int *port)
{
    return cluster_master_address(e, c->node, c->master, host, port);
}

int cluster_master_address(const rlc_engine *e, int node, int master, const char **host,
                           int *port)
{
    const struct eng_cluster *cl = e->clusters[node];
    if (master < 0 || master >= cl->map.n)
        return -1;
    *host = cl->map.m[master].host;
    *port = cl->map.m[master].port;
    return RLC_OK;
}

bool cluster_master_owns(const rlc_engine *e, int node, int master)
{
    const struct eng_cluster *cl = e->clusters[node];
    return cl->map.loaded && master < cl->map.n && cl->owns[master];
}

int cluster_slot_master(const rlc_engine *e, int node, unsigned slot)
{
    const struct eng_cluster *cl = e->clusters[node];
    return cl->map.loaded ? cl->map.owner[slot % RLC_SLOTS] - 1 : -1;
}

void cluster_refresh(rlc_engine *e, int node)
{
    ask_map(e, e->clusters[node]);
}

int cluster_make(rlc_engine *e, int first_conn)
{
    int k = first_conn;
    for (int i = 0; i < e->n; i++) {
        const struct node_addr *a = &e->addrs[i];
        if (a->topology != RLC_TOPO_CLUSTER)
            continue;
        if (!e->clusters && !(e->clusters = calloc((size_t)e->n, sizeof *e->clusters)))
            return -1;
        struct eng_cluster *cl = calloc(1, sizeof *cl);
        if (!cl)
            return -1;
        e->clusters[i] = cl;
        cl->node = i;
        cl->base = k;
        cmap_master(&cl->map, a->seeds[0].host, strlen(a->seeds[0].host), a->seeds[0].port);
        for (int j = 0; j < ENG_CLUSTER_CONNS; j++, k++) {
            e->conns[k].node = i;
            e->conns[k].sub = j % 2 == 1;
            e->conns[k].master = j / 2;
            e->conns[k].timer.at = -1;
        }
    }
    return 0;
}

void cluster_free_all(rlc_engine *e)
{
    if (!e->clusters)
        return;
    for (int i = 0; i < e->n; i++)
        free(e->clusters[i]);
    free(e->clusters);
    e->clusters = NULL;
}
