/*
 * engine_query.c - asking the servers about a lock, changing nothing
 * (rlc_engine_query: rlc_lock_is_locked, is_held, hold_count, ttl_ms), and
 * the one-shot rounds that write: a force release (rlc_engine_force_release)
 * and a fenced write (rlc_engine_fenced_set).
 *
 * A query is one round of a read-only command on every node's command
 * connection, the one the locks' scripts use, so it sees whatever this
 * engine wrote before it (one connection runs its commands in order) and
 * opens no connection of its own. It does not wait in its hold's queue: a
 * query made while the same owner's acquire waits is answered at once. It
 * sets no TTL (no mark) and never goes out again; the hold keeps a list of
 * its running queries only so the hold outlives them (hold_maybe_free), and
 * op_finish ends a query as any operation.
 *
 * A force release is such a round too, of the force-release script (it
 * deletes the key and publishes, so waiters wake). It sets no TTL either,
 * and no hold of this engine is ended by it: their next renewal finds the
 * key gone and reports them lost, as a force release from another client
 * would; a driver that wants its own holds dropped quietly forgets them
 * (rlc_engine_forget).
 *
 * A fenced write (rlc_engine_fenced_set) is one more: the fenced-set script
 * on the one node, its command made when it was asked; so is a semaphore's
 * call that takes no permits (engine_permits.c: set, available, release). Its eng_lock is
 * named by the resource key only to carry it (a hold to hang on, a hash
 * slot: with a key_prefix, a cluster's MOVED takes it to the key's own).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "quorum.h"
#include "scripts.h"

static struct rlc_cmd *query_cmd(const struct eng_op *op)
{
    const struct eng_lock *l = op->hold->lock;
    const struct hold *h = op->hold;
    int what = op->what;
    const char *argv[3];
    size_t lens[3];
    int argc = 2;
    if (what == Q_FENCE || what == Q_CALL)
        return cmd_ref(op->call);
    if (what == Q_FORCE) {
        const char *keys[2] = {l->key, l->channel};
        size_t key_lens[2] = {l->key_len, l->channel_len};
        return cmd_evalsha(&script_force_release, 2, 0, keys, key_lens);
    }
    switch (what) {
    case RLC_Q_LOCKED:
        argv[0] = "EXISTS";
        break;
    case RLC_Q_HELD:
    case RLC_Q_COUNT:
        /* classic: the value, which is the hold's attempt id while it holds */
        argv[0] = l->classic ? "GET" : what == RLC_Q_HELD ? "HEXISTS" : "HGET";
        argc = l->classic ? 2 : 3;
        break;
    case RLC_Q_MODE: /* a read-write lock's hash: its field "mode" */
        argv[0] = "HGET";
        argc = 3;
        break;
    default:
        argv[0] = "PTTL";
        break;
    }
    lens[0] = strlen(argv[0]);
    argv[1] = l->key;
    lens[1] = l->key_len;
    argv[2] = what == RLC_Q_MODE ? "mode" : h->field;
    lens[2] = what == RLC_Q_MODE ? 4 : h->field_len;
    return cmd_format(argc, argv, lens);
}

/* The number a quorum of nodes agrees on, as the blocking API always
 * answered: a majority with the key (field) for LOCKED (HELD); the count
 * (time left) that at least a quorum of nodes still have for COUNT (TTL),
 * where no expiry (-1) outlasts any expiry. */
static int64_t query_answer(const rlc_engine *e, int what, int64_t *v, int nv)
{
    int ones = 0;
    switch (what) {
    case Q_FENCE:
    case Q_CALL:
        return v[0];
    case Q_FORCE:
        for (int i = 0; i < nv; i++)
            ones += v[i] == 1;
        return ones;
    case RLC_Q_LOCKED:
    case RLC_Q_HELD:
        for (int i = 0; i < nv; i++)
            ones += v[i] == 1;
        return quorum_has(e->n, ones);
    case RLC_Q_COUNT:
        return quorum_kth_largest(v, nv, e->q, 0);
    case RLC_Q_MODE: /* the mode a quorum shares, else 0 */
        for (int m = 1; m <= 2; m++) {
            ones = 0;
            for (int i = 0; i < nv; i++)
                ones += v[i] == m;
            if (quorum_has(e->n, ones))
                return m;
        }
        return 0;
    default:
        for (int i = 0; i < nv; i++)
            if (v[i] == -1)
                v[i] = INT64_MAX;
        int64_t t = quorum_kth_largest(v, nv, e->q, -2);
        return t == INT64_MAX ? -1 : t;
    }
}

static void query_decide(rlc_engine *e, struct eng_op *op, int64_t now)
{
    round_timeout(op, e->n);
    int64_t v[RLC_MAX_NODES];
    int nv = 0;
    for (int i = 0; i < e->n; i++)
        if (op->rep[i].status == RLC_OK)
            v[nv++] = op->rep[i].a;
    char msg[512] = "";
    int rc = RLC_OK;
    if (quorum_has(e->n, nv))
        op->query_out = query_answer(e, op->what, v, nv);
    else
        rc = round_fail(e, op, msg, sizeof msg);
    if (rc == RLC_OK && op->what == Q_CALL && op->call_held && op->query_out == 0) {
        const struct eng_lock *l = op->hold->lock;
        rc = RLC_E_LOST;
        snprintf(msg, sizeof msg, "the permits this id names are not held in %s '%s': their "
                 "lease ran out (or they were given back already)", lock_noun(l),
                 RLC_SHOWN(l->name));
    }
    eng_event_done(e, op, rc, "%s", msg);
    op_finish(e, op, now);
}

static bool number(const char *s, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end)
        return false;
    *out = v;
    return true;
}

/* A classic lock's value read for HELD or COUNT: 1 when it is the hold's
 * attempt id (one level, one value), else 0. */
static int64_t classic_mine(const rlc_engine *e, const struct hold *h, const redisReply *r)
{
    char id[LOCK_ATTEMPT_ID_MAX];
    if (r->type != REDIS_REPLY_STRING || h->n_levels == 0)
        return 0;
    int len = lock_attempt_id(e->uuid, h->levels[0], id, sizeof id);
    return (size_t)len == r->len && memcmp(id, r->str, r->len) == 0;
}

/* The fenced-set script's answer: {1, fence} written, {0, fence} refused;
 * an ACL's refusal is the caller's to fix (RLC_E_AUTH), as a password's. */
static void fence_reply(struct eng_op *op, int node, const redisReply *ok)
{
    struct node_reply *nr = &op->rep[node];
    if (!ok) {
        if (nr->status == RLC_E_SERVER && nr->err && strncmp(nr->err, "NOPERM", 6) == 0)
            nr->status = RLC_E_AUTH;
    } else if (ok->type == REDIS_REPLY_ARRAY && ok->elements == 2 &&
               ok->element[0]->type == REDIS_REPLY_INTEGER) {
        nr->a = ok->element[0]->integer == 1;
    } else {
        nr->status = RLC_E_PROTOCOL;
        nr->err = strdup("unexpected reply to the fenced-set script");
    }
}

static void query_reply(rlc_engine *e, struct eng_op *op, int node, const redisReply *r,
                        int status, const char *msg, int64_t now)
{
    const redisReply *ok = round_note(op, node, r, status, msg);
    if (op->what == Q_FENCE) {
        fence_reply(op, node, ok);
    } else if (ok && op->hold->lock->classic &&
               (op->what == RLC_Q_HELD || op->what == RLC_Q_COUNT) &&
               ok->type != REDIS_REPLY_ERROR) {
        op->rep[node].a = classic_mine(e, op->hold, ok);
    } else if (ok && op->what == RLC_Q_MODE &&
               (ok->type == REDIS_REPLY_STRING || ok->type == REDIS_REPLY_NIL)) {
        bool str = ok->type == REDIS_REPLY_STRING;
        op->rep[node].a = str && strcmp(ok->str, "read") == 0    ? 1
                          : str && strcmp(ok->str, "write") == 0 ? 2
                                                                 : 0;
    } else if (ok && ok->type == REDIS_REPLY_INTEGER) {
        op->rep[node].a = ok->integer;
    } else if (ok && ok->type == REDIS_REPLY_STRING && number(ok->str, &op->rep[node].a)) {
        /* HGET's count */
    } else if (ok && ok->type == REDIS_REPLY_NIL) {
        op->rep[node].a = 0;
    } else if (ok) {
        op->rep[node].status = RLC_E_PROTOCOL;
        op->rep[node].err = strdup("unexpected reply to a query");
    }
    if (op->answered == e->n)
        query_decide(e, op, now);
}

static void query_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    op->phase = P_ROUND;
    round_begin(e, op, now);
    struct rlc_cmd *cmd = query_cmd(op);
    if (!cmd)
        abort();
    const struct script *s = op->what == Q_FORCE   ? &script_force_release
                             : op->what == Q_FENCE ? &script_fenced_set
                                                   : cmd->script;
    for (int i = 0; i < e->n; i++)
        op->reqs[i] = conn_send(e, i, h->lock, R_QUERY, op, s, cmd, op->call_redo);
    cmd_unref(cmd);
    timer_set(e, &op->timer, T_OP, op, op->round_deadline);
}

const struct op_class op_query_class = {query_start, query_reply, query_decide, NULL, NULL};

void query_begin(rlc_engine *e, struct eng_op *op)
{
    struct hold *h = op->hold;
    op->next = h->queries;
    h->queries = op;
    op_start(e, op, e->now);
}

void query_free_all(rlc_engine *e, struct hold *h)
{
    while (h->queries) {
        struct eng_op *op = h->queries;
        h->queries = op->next;
        op_free(e, op);
    }
}
