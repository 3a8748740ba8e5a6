/*
 * engine_guard.c - the node-restart guard in the engine
 * (docs/design/redlock.md; the rule is restart_rule.c's, shared with the
 * blocking driver).
 *
 * A restart closes every connection to the server, so the engine looks
 * once per connection: INFO server is the last step of each command
 * connection's handshake (engine_conn.c). Replies on one connection come in
 * order, so when a script's answer from a server is counted, its record
 * already holds the run_id of the server that answered it; the acquire pays
 * nothing per try.
 *
 * A record per server: one per standalone or sentinel node, and one per
 * master of a redis-cluster:// node's map (a master is its address there,
 * and an index of the map never changes meaning), read on that master's
 * command connection. The vote does not say which master of a cluster
 * answered it, so a cluster node's yes waits while any of its masters
 * restarted within the longest lease: the cluster is one vote, as a
 * standalone master is, and is kept out as one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "restart_rule.h"

/* A cluster master's record, with the address it was read from (master 0
 * stands for the seeds until the map is known: another seed is another
 * server, not a restart). */
struct master_life {
    char addr[280];
    struct node_life life;
};

struct eng_guard {
    struct node_life *life;       /* per node (unused for a cluster node) */
    struct master_life **masters; /* per node: CMAP_MAX_MASTERS for a cluster, else NULL */
};

int guard_make(rlc_engine *e)
{
    if (!restart_rule_on(e->opts.restart_guard, e->n))
        return 0;
    struct eng_guard *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    e->guard = g;
    g->life = calloc((size_t)e->n, sizeof *g->life);
    g->masters = calloc((size_t)e->n, sizeof *g->masters);
    if (!g->life || !g->masters)
        return -1;
    for (int i = 0; i < e->n; i++)
        if (e->addrs[i].topology == RLC_TOPO_CLUSTER &&
            !(g->masters[i] = calloc(CMAP_MAX_MASTERS, sizeof *g->masters[i])))
            return -1;
    e->guard_info = restart_rule_info();
    e->max_lease_ms = e->opts.watchdog_timeout_ms;
    return e->guard_info ? 0 : -1;
}

void guard_free(rlc_engine *e)
{
    struct eng_guard *g = e->guard;
    if (g) {
        for (int i = 0; g->masters && i < e->n; i++)
            free(g->masters[i]);
        free(g->masters);
        free(g->life);
        free(g);
        e->guard = NULL;
    }
    if (e->guard_info)
        cmd_unref(e->guard_info);
}

struct rlc_cmd *guard_handshake(const rlc_engine *e, const struct conn *c)
{
    /* command connections only: a cluster node's are one per master */
    return e->guard && !c->sub && !c->track && !c->disc ? e->guard_info : NULL;
}

void guard_lease(rlc_engine *e, int64_t lease)
{
    if (lease > e->max_lease_ms)
        e->max_lease_ms = lease;
}

/* Where cluster master j of node is now ("" when the map does not name it). */
static void master_addr(const rlc_engine *e, int node, int j, char *addr, size_t size)
{
    const char *host;
    int port;
    addr[0] = '\0';
    if (e->topo->master_address(e, node, j, &host, &port) == RLC_OK)
        snprintf(addr, size, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

void guard_reply(rlc_engine *e, const struct conn *c, const redisReply *r, int64_t now)
{
    struct eng_guard *g = e->guard;
    if (!g)
        return;
    const char *info = r && r->type == REDIS_REPLY_STRING ? r->str : NULL;
    if (!g->masters[c->node]) {
        restart_rule_observe(&g->life[c->node], info, now);
        return;
    }
    if (c->master < 0 || c->master >= CMAP_MAX_MASTERS)
        return;
    struct master_life *m = &g->masters[c->node][c->master];
    char addr[sizeof m->addr];
    master_addr(e, c->node, c->master, addr, sizeof addr);
    if (strcmp(addr, m->addr) != 0) {
        /* another server under this index: a first look, not a restart */
        memset(m, 0, sizeof *m);
        snprintf(m->addr, sizeof m->addr, "%s", addr);
    }
    restart_rule_observe(&m->life, info, now);
}

/* The cluster master of node whose restart keeps its votes out longest:
 * its index, and how long in *left (0: none). */
static int cluster_left(rlc_engine *e, int node, int64_t now, int64_t *left)
{
    int worst = -1;
    *left = 0;
    for (int j = 0; j < CMAP_MAX_MASTERS; j++) {
        int64_t l = restart_rule_left_ms(&e->guard->masters[node][j].life, e->max_lease_ms, now);
        if (l > *left) {
            *left = l;
            worst = j;
        }
    }
    return worst;
}

int64_t guard_left_ms(rlc_engine *e, int node, int64_t now)
{
    struct eng_guard *g = e->guard;
    if (!g)
        return 0;
    if (!g->masters[node])
        return restart_rule_left_ms(&g->life[node], e->max_lease_ms, now);
    int64_t left;
    cluster_left(e, node, now, &left);
    return left;
}

size_t guard_why(rlc_engine *e, int node, int64_t left_ms, int64_t now, char *why, size_t size,
                 size_t len)
{
    struct eng_guard *g = e->guard;
    if (!g->masters[node])
        return restart_rule_why(why, size, len, e->addrs[node].label, &g->life[node], left_ms,
                                now);
    int64_t left;
    int j = cluster_left(e, node, now, &left);
    if (j < 0)
        return len;
    char label[400];
    snprintf(label, sizeof label, "%s (master %s)", e->addrs[node].label,
             g->masters[node][j].addr);
    return restart_rule_why(why, size, len, label, &g->masters[node][j].life, left_ms, now);
}
