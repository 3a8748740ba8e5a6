/*
 * engine_round.c - a round: one command to every node, answers counted.
 *
 * A round ends when every node answered or at its deadline (the call
 * deadline: io_timeout_ms for one node, node_timeout_ms for N; plus
 * connect_timeout_ms when a connection must be made first). Requests still
 * unanswered then are abandoned: their replies, if they ever come, reach
 * nobody. What each kind of operation does with the answers is its own file's.
 *
 * Also here: the commands more than one operation sends (release, undo).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "permit_calls.h"
#include "scripts.h"

void round_clear(struct eng_op *op)
{
    for (int i = 0; i < op->nn; i++) {
        free(op->rep[i].holder);
        free(op->rep[i].err);
        op->rep[i] = (struct node_reply){0};
        op->pos[i] = (struct wire_pos){0, 0};
        op->rep[i].status = 1; /* no answer yet */
        op->rep[i].synced = -1;
    }
    op->answered = 0;
}

static bool all_up(rlc_engine *e, const struct eng_op *op)
{
    for (int i = 0; i < e->n; i++) {
        const struct conn *c = is_cluster(e, i) ? cluster_route(e, i, op->hold->lock->slot)
                                                : &e->conns[2 * i];
        if (c->state != C_UP)
            return false;
    }
    return true;
}

void round_begin(rlc_engine *e, struct eng_op *op, int64_t now)
{
    round_abandon(op);
    round_clear(op);
    op->started = now;
    op->round_deadline =
        now + e->call_timeout_ms + (all_up(e, op) ? 0 : e->opts.connect_timeout_ms);
}

/* The connect allowance is for connecting: once every node's connection
 * is up, the round has a call's timeout from then, as a call of the
 * blocking API had from its write (a server that accepts the connection
 * but does not answer, paused, is given up on as soon as when it was up
 * already). */
void round_went_out(rlc_engine *e, struct req *r, int64_t now)
{
    struct eng_op *op = r->op;
    if (op->phase != P_ROUND || op->reqs[r->node] != r || !all_up(e, op))
        return;
    (void)now; /* e->now: a driver may pass an older time, never taken back */
    int64_t by = e->now + e->call_timeout_ms + (r->sync ? e->opts.sync_timeout_ms : 0);
    if (by < op->round_deadline) {
        op->round_deadline = by;
        timer_set(e, &op->timer, T_OP, op, by);
    }
}

void round_send(rlc_engine *e, struct eng_op *op, int kind, const struct script *s,
                struct rlc_cmd *cmd)
{
    bool redo = kind == R_RELEASE;
    for (int i = 0; i < e->n; i++) {
        op->reqs[i] = conn_send(e, i, op->hold->lock, kind, op, s, cmd, redo);
        /* each of these may set the hold's TTL to op->lease on its node; a
         * release sets none (scripts.c) */
        if (kind != R_RELEASE)
            hold_mark_ttl(op->hold, op->reqs[i], op->lease);
    }
    if (e->n > 0 && op->reqs[0]->sync) {
        /* the WAIT behind each write (engine_conn.c) has its time too; a
         * renewal still ends with the hold's validity (E5) */
        op->round_deadline += e->opts.sync_timeout_ms;
        if (op->kind == OP_RENEW && op->round_deadline > op->hold->valid_until)
            op->round_deadline = op->hold->valid_until;
    }
    timer_set(e, &op->timer, T_OP, op, op->round_deadline);
}

void round_abandon(struct eng_op *op)
{
    for (int i = 0; i < op->nn; i++) {
        if (op->reqs[i])
            req_disown(op->reqs[i]);
        op->reqs[i] = NULL;
        if (op->syncs[i])
            op->syncs[i]->op = NULL;
        op->syncs[i] = NULL;
    }
}

/* A renewal or an extend that renewed on a node whose WAIT did not
 * confirm it (sync_replicas) counts there as no answer: its success would
 * claim a lease a failover may take back. (An acquire's unconfirmed grant
 * is undone and said in its own words, acquire_votes.) */
static void renewal_unconfirmed(struct eng_op *op, int node, int64_t need)
{
    struct node_reply *nr = &op->rep[node];
    if ((op->kind != OP_RENEW && op->kind != OP_EXTEND) || nr->status != RLC_OK || nr->a != 1 ||
        nr->synced >= need)
        return;
    char msg[160];
    snprintf(msg, sizeof msg, "renewed, but not confirmed by %lld replica(s) in time (WAIT)",
             (long long)need);
    nr->status = RLC_E_TIMEOUT;
    free(nr->err);
    nr->err = strdup(msg);
}

/* Replica-synced writes (sync_replicas=N): the WAIT N T behind the copy of
 * the write that answered (engine_conn.c pairs one with every copy) says
 * how many replicas have it. A node's answer is complete when both replies
 * are in. */
void round_sync_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r)
{
    op->syncs[node] = NULL;
    op->rep[node].synced = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    renewal_unconfirmed(op, node, e->opts.sync_replicas);
    if (!op->reqs[node] && op->rep[node].status != 1)
        op->answered++; /* the write's own reply came first and waited for this */
}

/* The status of a round that got neither its quorum nor a clear refusal. */
int round_fail(const rlc_engine *e, const struct eng_op *op, char *msg, size_t size)
{
    int first = RLC_E_TIMEOUT;
    const char *why = NULL;
    int node = 0, failed = 0;
    for (int i = 0; i < e->n; i++) {
        const struct node_reply *r = &op->rep[i];
        if (r->status == RLC_OK && !r->err)
            continue;
        failed++;
        if (!why) {
            node = i;
            first = r->status == 1 ? RLC_E_TIMEOUT : r->status == RLC_OK ? RLC_E_SERVER
                                                                          : r->status;
            why = r->err ? r->err : r->status == 1 ? "no answer in time" : rlc_strerror(first);
        }
    }
    if (!why)
        why = "no answer in time";
    char unknown[300];
    if (failed && !sentinel_master_known(e, node)) {
        /* No connection was made: say what the sentinels said instead. */
        const char *s = sentinel_why(e, node);
        snprintf(unknown, sizeof unknown, "its master is not known (%s)",
                 s ? s : "no sentinel answered yet");
        why = unknown;
        first = RLC_E_CONNECT;
    }
    /* A connection's end names its address already ("cannot connect to
     * 127.0.0.1:1"): the node is not named again. */
    bool named = strstr(why, e->addrs[node].label) != NULL;
    if (e->n > 1) {
        int len = snprintf(msg, size, "only %d of %d nodes answered for lock '%s' (quorum %d); "
                           "%s%s%s", e->n - failed, e->n, RLC_SHOWN(op->hold->lock->name), e->q,
                           named ? "" : e->addrs[node].label, named ? "" : ": ", why);
        /* every other node that failed, by name, while there is room */
        for (int i = node + 1; i < e->n && len > 0 && (size_t)len < size; i++) {
            const struct node_reply *r = &op->rep[i];
            if (r->status == RLC_OK && !r->err)
                continue;
            const char *w = r->err ? r->err
                            : r->status == 1 ? "no answer in time"
                                             : rlc_strerror(r->status == RLC_OK ? RLC_E_SERVER
                                                                                : r->status);
            bool own = strstr(w, e->addrs[i].label) != NULL;
            len += snprintf(msg + len, size - (size_t)len, "; %s%s%s", own ? "" : e->addrs[i].label,
                            own ? "" : ": ", w);
        }
        return RLC_E_NO_QUORUM;
    }
    if (named)
        snprintf(msg, size, "%s (lock '%s')", why, RLC_SHOWN(op->hold->lock->name));
    else
        snprintf(msg, size, "%s for key '%s' at %s", why, RLC_SHOWN(op->hold->lock->key),
                 e->addrs[node].label);
    return first;
}

struct rlc_cmd *cmd_release(const rlc_engine *e, const struct hold *h, uint64_t level,
                            uint64_t upto, const uint64_t *extra, int64_t n_extra)
{
    struct lock_names names = eng_names(h->lock);
    struct rlc_cmd *cmd = call_release(&names, e->uuid, h->lease_ms, h->field, h->field_len,
                                       level, upto, extra, n_extra);
    if (!cmd)
        abort();
    return cmd;
}

void send_undo(rlc_engine *e, struct hold *h, uint64_t attempt, int64_t lease,
               const bool *which)
{
    const struct eng_lock *l = h->lock;
    struct lock_names names = eng_names(l);
    int64_t tomb = lock_undo_tomb_ms(lease, e->call_timeout_ms, e->opts.connect_timeout_ms);
    struct rlc_cmd *cmd =
        kind_permits(l->kind)
            ? call_permits_undo(&names, e->uuid, attempt, h->permits, tomb)
            : call_undo(&names, e->uuid, attempt, h->field, h->field_len, tomb);
    if (!cmd)
        abort();
    for (int i = 0; i < e->n; i++)
        if (which[i])
        {
            struct req *r = conn_send(e, i, l, R_UNDO, NULL, cmd->script, cmd, true);
            /* even a try the engine did not nest may have nested on the
             * server (a level whose release has not run yet): its undo may
             * put back an earlier PTTL */
            hold_mark_ttl(h, r, -1);
        }
    cmd_unref(cmd);
}

const redisReply *round_note(struct eng_op *op, int node, const redisReply *r, int status,
                             const char *msg)
{
    struct node_reply *nr = &op->rep[node];
    struct req *q = op->reqs[node];
    if (r && q)
        op->pos[node] = (struct wire_pos){q->instance, q->end_at};
    op->reqs[node] = NULL;
    if (q && r && r->type != REDIS_REPLY_ERROR) {
        /* the WAIT behind the copy that ran: the only one that counts */
        op->syncs[node] = q->wait;
        q->wait = NULL;
    } else if (q) {
        req_disown(q); /* no write, nothing to wait for */
    }
    if (!op->syncs[node])
        op->answered++;
    if (!r) {
        nr->status = status == RLC_OK ? RLC_E_PROTOCOL : status;
        nr->err = msg ? strdup(msg) : NULL;
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* a server that wants a password the client did not give (or not
         * this one): the caller's to fix, not the server's */
        bool auth = strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "WRONGPASS", 9) == 0;
        nr->status = auth ? RLC_E_AUTH : RLC_E_SERVER;
        nr->err = strndup(r->str, 300);
        return NULL;
    }
    nr->status = RLC_OK;
    return r;
}

/* The nodes whose answer did not come in time: "no answer". */
void round_timeout(struct eng_op *op, int n)
{
    for (int i = 0; i < n; i++) {
        if (op->rep[i].status == 1 && op->reqs[i]) {
            const struct req *r = op->reqs[i];
            if (r->retries > 0 || r->hops > 0) {
                /* its cluster redirected it or said "not now": its slot is
                 * moving (or its master failing over), not the node down */
                int shift = r->retries < 5 ? r->retries : 5;
                op->rep[i].moving = (int64_t)20 << shift;
                char why[160];
                snprintf(why, sizeof why,
                         "slot %u was moving (MOVED/ASK %d, TRYAGAIN/CLUSTERDOWN %d times); "
                         "no master ran the request in time", r->slot, r->hops, r->retries);
                op->rep[i].err = strdup(why);
            }
            req_disown(op->reqs[i]);
            op->reqs[i] = NULL;
            op->rep[i].status = RLC_E_TIMEOUT;
        }
        if (op->syncs[i]) {
            /* the write answered, its WAIT did not in time: not synced */
            op->syncs[i]->op = NULL;
            op->syncs[i] = NULL;
            op->rep[i].synced = 0;
            renewal_unconfirmed(op, i, 1);
        }
    }
}

int64_t round_moving(const struct eng_op *op, int n)
{
    int64_t pause = -1;
    for (int i = 0; i < n; i++)
        if (op->rep[i].moving > 0 && (pause < 0 || op->rep[i].moving < pause))
            pause = op->rep[i].moving;
    return pause;
}

/* The renew script's reply for one hold: {1} renewed, {0} gone. */
void round_note_renew(struct eng_op *op, int node, const redisReply *r, int status,
                      const char *msg)
{
    const redisReply *ok = round_note(op, node, r, status, msg);
    int renewed = ok ? answer_renew(ok, 0) : -1;
    if (renewed >= 0) {
        op->rep[node].a = renewed;
    } else if (ok) {
        op->rep[node].status = RLC_E_PROTOCOL;
        op->rep[node].err = strdup("unexpected reply to the renew script");
    }
}
