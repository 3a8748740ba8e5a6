/*
 * engine_guard.c - the node-restart guard in the engine (docs/DESIGN.md,
 * "Node-restart guard"; the rule is restart_rule.c's, shared with the
 * blocking driver).
 *
 * A restart closes every connection to the node, so the engine looks once
 * per connection: INFO server is the last step of each command
 * connection's handshake (engine_conn.c). Replies on one connection come in
 * order, so when a script's answer from a node is counted, the node's
 * record already holds the run_id of the server that answered it; the
 * acquire pays nothing per try.
 */
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "restart_rule.h"

int guard_make(rlc_engine *e)
{
    if (!restart_rule_on(e->opts.restart_guard, e->n))
        return 0;
    e->life = calloc((size_t)e->n, sizeof *e->life);
    e->guard_info = restart_rule_info();
    e->max_lease_ms = e->opts.watchdog_timeout_ms;
    return e->life && e->guard_info ? 0 : -1;
}

void guard_free(rlc_engine *e)
{
    free(e->life);
    if (e->guard_info)
        cmd_unref(e->guard_info);
}

struct rlc_cmd *guard_handshake(const rlc_engine *e, const struct conn *c)
{
    /* a cluster node is several masters, which one record cannot tell
     * apart: no guard there (as in the blocking driver) */
    return e->life && !c->sub && !c->track && c->master < 0 ? e->guard_info : NULL;
}

void guard_lease(rlc_engine *e, int64_t lease)
{
    if (lease > e->max_lease_ms)
        e->max_lease_ms = lease;
}

void guard_reply(rlc_engine *e, int node, const redisReply *r, int64_t now)
{
    if (e->life)
        restart_rule_observe(&e->life[node],
                             r && r->type == REDIS_REPLY_STRING ? r->str : NULL, now);
}

int64_t guard_left_ms(rlc_engine *e, int node, int64_t now)
{
    return e->life ? restart_rule_left_ms(&e->life[node], e->max_lease_ms, now) : 0;
}

size_t guard_why(const rlc_engine *e, int node, int64_t left_ms, int64_t now, char *why,
                 size_t size, size_t len)
{
    return restart_rule_why(why, size, len, e->addrs[node].label, &e->life[node], left_ms, now);
}
