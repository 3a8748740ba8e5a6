/*
 * restart_guard.c - a node that restarted without its data must not vote:
 * the blocking driver's half of the guard. The rule (what INFO server says,
 * how long a node is kept out) is restart_rule.c's, which the engine uses
 * too; here is only how its INFO rides on the mux and where its records
 * live (the client's, under mu).
 */
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "mux.h"
#include "restart_guard.h"
#include "restart_rule.h"
#include "state.h"

bool restart_guard_on(const rlc_client *c)
{
    return restart_rule_on(c->opts.restart_guard, c->n_nodes);
}

void restart_guard_send(rlc_client *c, uint64_t owner, struct mux_req **reqs)
{
    struct rlc_cmd *cmd = restart_rule_info();
    for (int i = 0; i < c->n_nodes; i++)
        reqs[i] = cmd ? mux_send(client_mux(c, i, owner), cmd, NULL, c->call_timeout_ms) : NULL;
    if (cmd)
        cmd_unref(cmd);
}

int restart_guard_collect(rlc_client *c, struct mux_req **reqs, int64_t lease, bool *guarded,
                          char *why, size_t why_size, int64_t *wait_ms)
{
    int n = c->n_nodes, count = 0;
    struct mux_result res[RLC_MAX_NODES];
    bool sent = reqs[0] != NULL;
    if (sent)
        mux_wait(reqs, n, res);
    int64_t now = rlc_now_ns() / RLC_NS_PER_MS;
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
        restart_rule_observe(life, r && r->type == REDIS_REPLY_STRING ? r->str : NULL, now);
        /* A cluster node is several masters, which INFO cannot tell apart
         * (it reaches whichever the thread spoke to last): no guard. */
        if (c->clusters[i])
            life->restarted_ms = 0;
        int64_t left_ms = restart_rule_left_ms(life, c->max_lease_ms, now);
        guarded[i] = left_ms > 0;
        if (!guarded[i])
            continue;
        count++;
        if (*wait_ms == 0 || left_ms < *wait_ms)
            *wait_ms = left_ms;
        len = restart_rule_why(why, why_size, len, c->nodes[i].label, life, left_ms, now);
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; sent && i < n; i++)
        if (res[i].reply)
            freeReplyObject(res[i].reply);
    return count;
}
