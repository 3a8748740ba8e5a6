/*
 * fanout.c - sending one command to all nodes in one round trip.
 *
 * Every node's request is queued before any reply is awaited, so a Redlock
 * call costs about the round trip of the slowest node that answers, not the
 * sum over nodes; a dead or paused node costs at most its deadline.
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "error.h"
#include "fanout.h"
#include "clock.h"

void fanout_run(rlc_client *c, uint64_t owner, struct rlc_cmd *cmd, const struct script *s,
                struct fanout *f)
{
    struct mux_req *reqs[RLC_MAX_NODES];
    f->n = c->n_nodes;
    f->started_ns = rlc_now_ns();
    if (!cmd) {
        for (int i = 0; i < f->n; i++) {
            f->res[i].status = RLC_E_NOMEM;
            f->res[i].reply = NULL;
            snprintf(f->res[i].err, sizeof f->res[i].err, "out of memory");
        }
        return;
    }
    for (int i = 0; i < f->n; i++)
        reqs[i] = mux_send(client_mux(c, i, owner), cmd, s, c->call_timeout_ms);
    mux_wait(reqs, f->n, f->res);
}

void fanout_clear(struct fanout *f)
{
    for (int i = 0; i < f->n; i++) {
        if (f->res[i].reply)
            freeReplyObject(f->res[i].reply);
        f->res[i].reply = NULL;
    }
}

void fanout_detached(rlc_client *c, uint64_t owner, struct rlc_cmd *cmd,
                     const struct script *s, const bool *which, bool redo)
{
    if (!cmd)
        return;
    for (int i = 0; i < c->n_nodes; i++)
        if (which[i])
            mux_send_detached(client_mux(c, i, owner), cmd, s, redo);
}

const redisReply *fanout_reply(const struct fanout *f, int i)
{
    const struct mux_result *r = &f->res[i];
    if (r->status != RLC_OK || !r->reply || r->reply->type == REDIS_REPLY_ERROR)
        return NULL;
    return r->reply;
}

static int error_reply_status(const redisReply *reply)
{
    if (strncmp(reply->str, "NOAUTH", 6) == 0 || strncmp(reply->str, "WRONGPASS", 9) == 0 ||
        strncmp(reply->str, "NOPERM", 6) == 0)
        return RLC_E_AUTH;
    return RLC_E_SERVER;
}

/* One node's failure as a status and a phrase. */
static int node_failure(const rlc_client *c, const struct fanout *f, int i, char *buf,
                        size_t size)
{
    const struct mux_result *r = &f->res[i];
    if (r->status == RLC_OK && r->reply && r->reply->type == REDIS_REPLY_ERROR) {
        snprintf(buf, size, "%s at %s", r->reply->str, c->nodes[i].label);
        return error_reply_status(r->reply);
    }
    if (r->status == RLC_OK) {
        snprintf(buf, size, "unexpected reply from %s", c->nodes[i].label);
        return RLC_E_PROTOCOL;
    }
    snprintf(buf, size, "%s", r->err[0] ? r->err : c->nodes[i].label);
    return r->status;
}

int fanout_fail(const rlc_client *c, const struct fanout *f, const char *key)
{
    char keybuf[80], one[RLC_ERRLEN + 64];
    rlc_clip(key, keybuf, sizeof keybuf);
    if (f->n == 1) {
        int status = node_failure(c, f, 0, one, sizeof one);
        return rlc_fail(status, "%s for key '%s'", one, keybuf);
    }

    int usable = 0, refused = 0;
    for (int i = 0; i < f->n; i++) {
        if (fanout_reply(f, i))
            usable++;
        else if (f->res[i].status == RLC_OK && f->res[i].reply)
            refused++;
    }
    int quorum = c->quorum;
    /* A server error only if nodes replied errors and it is they that kept
     * a quorum from agreeing; otherwise nodes were missing: no quorum. */
    int status = refused > 0 && usable + refused >= quorum ? RLC_E_SERVER : RLC_E_NO_QUORUM;
    char msg[1024];
    int len = snprintf(msg, sizeof msg,
                       "%s for key '%s': %d of %d nodes answered, %d needed to agree",
                       status == RLC_E_SERVER ? "nodes refused" : "no quorum", keybuf, usable,
                       f->n, quorum);
    for (int i = 0; i < f->n && len < (int)sizeof msg; i++) {
        if (fanout_reply(f, i))
            continue;
        int s = node_failure(c, f, i, one, sizeof one);
        if (status == RLC_E_SERVER && s != RLC_E_SERVER && s != RLC_E_AUTH)
            continue;
        len += snprintf(msg + len, sizeof msg - (size_t)len, "; %s", one);
    }
    return rlc_fail_msg(status, msg);
}
