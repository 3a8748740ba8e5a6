/*
 * restart_guard.c - a node that restarted without its data must not vote.
 *
 * Redlock's safety over N nodes rests on every node keeping its keys. A
 * node restarted without persistence forgets the locks it granted, and its
 * vote can make a second quorum while the first holder is still valid. The
 * cure antirez gives is a delayed restart: keep a restarted node out for the
 * longest lease. The client does it itself: each acquire pipelines INFO
 * server with its script on every node, so it costs no round trip. When a
 * node's run_id differs from the one this client saw before, the node
 * restarted uptime_in_seconds ago; its grants do not count toward a quorum
 * until the longest lease this client uses (watchdog_timeout_ms, or the
 * longest fixed lease it was asked for) has passed since then.
 *
 * Limit: a client that never saw the node before its restart cannot tell a
 * restart from a first start, and does not guard it (see docs/DESIGN.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "mux.h"
#include "restart_guard.h"
#include "state.h"

bool restart_guard_on(const rlc_client *c)
{
    return c->opts.restart_guard == 1 || (c->opts.restart_guard < 0 && c->n_nodes >= 3);
}

void restart_guard_send(rlc_client *c, uint64_t owner, struct mux_req **reqs)
{
    const char *argv[2] = {"INFO", "server"};
    size_t lens[2] = {4, 6};
    struct rlc_cmd *cmd = cmd_format(2, argv, lens);
    for (int i = 0; i < c->n_nodes; i++)
        reqs[i] = cmd ? mux_send(client_mux(c, i, owner), cmd, NULL, c->call_timeout_ms) : NULL;
    if (cmd)
        cmd_unref(cmd);
}

/* "name:value\r\n" of an INFO reply: the value's start, or NULL. */
static const char *field(const char *info, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            *len = strcspn(v, "\r\n");
            return v;
        }
    }
    return NULL;
}

int restart_guard_collect(rlc_client *c, struct mux_req **reqs, int64_t lease, bool *guarded,
                          char *why, size_t why_size, int64_t *wait_ms)
{
    int n = c->n_nodes, count = 0;
    struct mux_result res[RLC_MAX_NODES];
    bool sent = reqs[0] != NULL;
    if (sent)
        mux_wait(reqs, n, res);
    int64_t now = rlc_now_ns();
    size_t len = 0;
    why[0] = '\0';
    *wait_ms = 0;
    pthread_mutex_lock(&c->mu);
    if (lease > c->max_lease_ms)
        c->max_lease_ms = lease;
    if (c->opts.watchdog_timeout_ms > c->max_lease_ms)
        c->max_lease_ms = c->opts.watchdog_timeout_ms;
    for (int i = 0; i < n; i++) {
        struct node_life *life = &c->life[i];
        const redisReply *r = sent && res[i].status == RLC_OK ? res[i].reply : NULL;
        size_t idlen = 0, uplen = 0;
        const char *id = r && r->type == REDIS_REPLY_STRING ? field(r->str, "run_id", &idlen) : NULL;
        const char *up = id ? field(r->str, "uptime_in_seconds", &uplen) : NULL;
        if (id && up && idlen < sizeof life->run_id) {
            if (life->run_id[0] && (strlen(life->run_id) != idlen ||
                                    memcmp(life->run_id, id, idlen) != 0))
                life->restarted_ns = now - strtoll(up, NULL, 10) * 1000000000LL;
            memcpy(life->run_id, id, idlen);
            life->run_id[idlen] = '\0';
        }
        int64_t left_ms = life->restarted_ns
                              ? (life->restarted_ns + c->max_lease_ms * RLC_NS_PER_MS - now) /
                                    RLC_NS_PER_MS
                              : 0;
        /* A cluster node is several masters, which INFO cannot tell apart
         * (it reaches whichever the thread spoke to last): no guard. */
        if (c->clusters[i])
            left_ms = 0;
        guarded[i] = left_ms > 0;
        if (!guarded[i]) {
            life->restarted_ns = 0;
            continue;
        }
        count++;
        if (*wait_ms == 0 || left_ms < *wait_ms)
            *wait_ms = left_ms;
        if (len < why_size)
            len += (size_t)snprintf(why + len, why_size - len,
                                    "%s%s restarted %lld ms ago (new run_id), not counted for "
                                    "%lld ms more",
                                    len ? "; " : "", c->nodes[i].label,
                                    (long long)((now - life->restarted_ns) / RLC_NS_PER_MS),
                                    (long long)left_ms);
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; sent && i < n; i++)
        if (res[i].reply)
            freeReplyObject(res[i].reply);
    return count;
}
