/*
 * engine_conn.c - the engine's side of its connections.
 *
 * A command connection pipelines: requests are written in order and their
 * replies come back in that order, so a FIFO of requests in flight pairs each
 * reply with its request. What happens when a connection ends decides safety:
 *
 *   - a request in flight may or may not have run. An operation still
 *     waiting for it hears "no answer" (its round undoes or re-sends); a
 *     request marked redo (undo, release: idempotent by attempt id) is queued
 *     again, first, for the next connection;
 *   - a request never written goes out on the next connection;
 *   - an acquire that was abandoned (its round ended) is never written again:
 *     its undo, already queued, makes it harmless wherever it lands.
 *
 * A connection whose oldest request waits longer than the call deadline plus
 * connect_timeout_ms is dropped (want_open -1): a stalled server must not
 * hold every later request of its node behind it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "scripts.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000

static struct conn *conn_at(rlc_engine *e, int k)
{
    return &e->conns[k];
}

static int64_t stall_ms(const rlc_engine *e)
{
    int64_t t = e->opts.io_timeout_ms > e->call_timeout_ms ? e->opts.io_timeout_ms
                                                           : e->call_timeout_ms;
    return t + e->opts.connect_timeout_ms;
}

int conn_make_all(rlc_engine *e, int n_track)
{
    size_t n_disc = 0, n_cluster = 0;
    for (int i = 0; i < e->n; i++) {
        n_disc += e->addrs[i].topology == RLC_TOPO_SENTINEL;
        n_cluster += e->addrs[i].topology == RLC_TOPO_CLUSTER;
    }
    /* n <= RLC_MAX_NODES */
    size_t n_conns = 2 * (size_t)e->n + n_disc + n_cluster * ENG_CLUSTER_CONNS + (size_t)n_track;
    e->n_conns = (int)n_conns;
    e->conns = calloc(n_conns, sizeof *e->conns);
    if (!e->conns)
        return -1;
    for (int k = 0; k < (int)n_conns; k++) {
        e->conns[k].node = k / 2;
        e->conns[k].sub = k % 2 == 1;
        e->conns[k].timer.at = -1;
        e->conns[k].master = -1;
    }
    return 0;
}

/* A subscriber (of unlock messages, or loss push's of invalidations) reads
 * no request FIFO: replies there are told apart by their shape. */
static bool fifo_less(const struct conn *c)
{
    return c->sub || c->track == TRK_SUB;
}

static void req_free(rlc_engine *e, struct req *r)
{
    if (r->kind >= R_MAP)
        e->topo->own_reply(e, NULL, r, NULL); /* no answer will come */
    req_gone(e, r, true);
    cmd_unref(r->cmd);
    free(r);
    e->in_flight--;
}

void conn_append(rlc_engine *e, struct conn *c, const char *data, size_t len)
{
    (void)e;
    if (c->out_sent > 0 && c->out_sent == c->out_len)
        c->out_sent = c->out_len = 0;
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + len)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p)
            abort(); /* bytes that cannot be queued would silently lose a release */
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    c->appended += len;
}

void conn_append_cmd(rlc_engine *e, struct conn *c, int argc, const char *const *argv,
                     const size_t *lens)
{
    struct rlc_cmd *cmd = lens ? cmd_format(argc, argv, lens) : cmd_words(argc, argv);
    if (!cmd)
        abort();
    conn_append(e, c, cmd->data, cmd->len);
    cmd_unref(cmd);
}

/* A request someone waits for is not held to the backoff of a connection
 * whose last connect failed (a node that is down): within ON_DEMAND_MS of
 * that failure it hears the failure at once when the backoff outlasts a
 * call (fail_waiting, from the connection's timer), and after that it
 * makes the connection be tried again at once. So a node that stays down costs a waiting round nothing,
 * as the blocking API's calls, which each tried to connect, were refused at
 * once; a node that comes back (restarted) is found by the next call; and
 * a busy client does not spin on a dead node (at most one connect per
 * ON_DEMAND_MS, 200 a second, where the blocking API made one a call).
 * What nobody waits for (a release to send again) keeps the backoff. */
#define ON_DEMAND_MS 5

static bool awaited(const struct conn *c)
{
    for (const struct req *r = c->qhead; r; r = r->next)
        if (r->op)
            return true;
    return false;
}

static int64_t open_at(const struct conn *c)
{
    /* a cluster's masters and seeds keep their backoff: the seeds are
     * tried in turn (engine_cluster.c), and a map question is their way
     * to a master that is up */
    if (c->fails == 0 || c->master >= 0 || !awaited(c))
        return c->retry_at;
    int64_t soon = c->retry_at - c->backoff_ms + ON_DEMAND_MS; /* its last failure + */
    return soon < c->retry_at ? soon : c->retry_at;
}

/* Requests someone waits for on a connection that failed to connect less
 * than ON_DEMAND_MS ago and whose backoff outlasts a call's timeout (a node
 * known down): they are told of that failure now. A shorter backoff is
 * waited out (a node restarted meanwhile answers the next connect). */
static bool fails_now(const rlc_engine *e, const struct conn *c)
{
    return c->state == C_DOWN && c->fails > 0 && e->now < open_at(c) &&
           c->retry_at > e->now + e->call_timeout_ms && awaited(c);
}

static void no_reply(rlc_engine *e, struct req *r, int why, const char *msg);

/* Those requests hear the connect's failure now, as they would have at
 * the failed connect itself, and go; none was written, none can run. A
 * redo request (a release) is told too, and stays queued for the next
 * connection: it is delivered at least once (E4). Called from the
 * connection's timer, never inside a call that queues a request (an
 * operation told here may end). */
static void fail_waiting(rlc_engine *e, struct conn *c)
{
    /* Taken out first: a reply heard here may queue more on c (an undo). */
    struct req *list = c->qhead, *keep = NULL, *keep_tail = NULL;
    c->qhead = c->qtail = NULL;
    while (list) {
        struct req *r = list;
        list = r->next;
        r->next = NULL;
        if (r->op) {
            char why[200];
            snprintf(why, sizeof why, "%s", c->why);
            no_reply(e, r, RLC_E_CONNECT, why); /* r->op is NULL from here on */
            if (!r->redo) {
                req_gone(e, r, false);
                req_free(e, r);
                continue;
            }
        }
        if (keep_tail)
            keep_tail->next = r;
        else
            keep = r;
        keep_tail = r;
    }
    if (keep) { /* ahead of what was queued meanwhile, in their order */
        keep_tail->next = c->qhead;
        if (!c->qhead)
            c->qtail = keep_tail;
        c->qhead = keep;
    }
}

void conn_fail_queued(rlc_engine *e, struct conn *c, const char *why)
{
    if (!awaited(c))
        return;
    snprintf(c->why, sizeof c->why, "%s", why);
    fail_waiting(e, c);
}

static void schedule(rlc_engine *e, struct conn *c)
{
    if (c->disc) {
        e->topo->disc_schedule(e, c);
        return;
    }
    int64_t at = -1;
    if (c->state == C_UP && c->qhead)
        at = e->now; /* held back behind a request given up on (conn_put) */
    else if (c->state == C_UP && c->head)
        at = c->head->sent_at + stall_ms(e);
    else if (c->state == C_DOWN && c->qhead && c->retry_at > e->now)
        /* open_at, or the backoff's end: a round that gives up its request
         * (open_at moves back to the backoff's end) reschedules no
         * connection, and one due at open_at may not be opened by then */
        at = fails_now(e, c) ? e->now : open_at(c) > e->now ? open_at(c) : c->retry_at;
    for (const struct req *r = c->parked; r; r = r->next)
        if (at < 0 || r->due < at)
            at = r->due;
    timer_set(e, &c->timer, T_CONN, c, at);
}

static void write_req(rlc_engine *e, struct conn *c, struct req *r);

/* r's WAIT no longer counts: the copy it followed was answered without
 * running (NOSCRIPT, a redirection, "not now") or went nowhere. */
static void unpair(struct req *r)
{
    if (r->wait)
        r->wait->op = NULL;
    r->wait = NULL;
}

void req_disown(struct req *r)
{
    r->op = NULL;
    unpair(r);
}

/* sync_replicas: WAIT right behind the copy of r just written. The master
 * answers WAIT for the connection's last write, so only a WAIT that
 * follows the copy that ran says anything about it: one behind an EVALSHA
 * answered NOSCRIPT, or behind a copy redirected elsewhere, is answered
 * at once for an older point (a replica frozen, the acquire was confirmed
 * in 1 ms). So each copy gets its own WAIT and the one before is
 * disowned: the round counts only the WAIT of the copy that answered. */
static void pair_wait(rlc_engine *e, struct conn *c, struct req *r)
{
    unpair(r);
    if (!r->op)
        return; /* a late re-send nobody waits for (E8 bounds it) */
    char n[24], t[24];
    const char *argv[3] = {"WAIT", n, t};
    size_t lens[3] = {4, cmd_i64(n, e->opts.sync_replicas), cmd_i64(t, e->opts.sync_timeout_ms)};
    struct rlc_cmd *cmd = cmd_format(3, argv, lens);
    if (!cmd)
        abort();
    struct req *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->kind = R_SYNC;
    w->node = r->node;
    w->op = r->op;
    w->slot = r->slot;
    w->cmd = cmd;
    e->in_flight++;
    r->wait = w;
    write_req(e, c, w);
}

/* Writes r at the end of c's pipeline (and its WAIT behind it). */
static void write_req(rlc_engine *e, struct conn *c, struct req *r)
{
    r->next = NULL;
    r->sent_at = e->now;
    /* a server applies ASKING to the next command, whatever it is */
    r->asked = c->tail && c->tail->kind == R_ASKING;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    conn_append(e, c, r->cmd->data, r->cmd->len);
    r->end_at = c->appended;
    r->instance = c->instance;
    if (r->sync)
        pair_wait(e, c, r);
}

static void queue_req(struct conn *c, struct req *r, bool front)
{
    if (front) {
        r->next = c->qhead;
        c->qhead = r;
        if (!c->qtail)
            c->qtail = r;
        return;
    }
    r->next = NULL;
    if (c->qtail)
        c->qtail->next = r;
    else
        c->qhead = r;
    c->qtail = r;
}

/* A connection whose oldest request is unanswered for a call's timeout
 * (its round gave up on it: a stalled server, a dropped packet), and on
 * which nobody waits for an answer any more, carries nothing new: what is
 * written behind it would wait as long. It is dropped and made again, as
 * the blocking API closed a connection whose call timed out; its requests
 * go as E4 says (redo ones first on the next connection, abandoned ones
 * never again). One that a round still waits for keeps it: that round may
 * yet be answered, as a caller reading its reply kept the blocking API's. */
static bool given_up(const rlc_engine *e, const struct conn *c)
{
    if (c->state != C_UP || !c->head || e->now - c->head->sent_at < e->call_timeout_ms)
        return false;
    for (const struct req *r = c->head; r; r = r->next)
        if (r->op)
            return false;
    return true;
}

/* A request for a connection that is up goes on the wire at once, unless
 * the connection was given up on: then it waits in the queue, and the
 * connection's timer, due at once, drops the connection (conn_timer). Not
 * here: the caller may be in the middle of a round, and a drop tells other
 * operations of their failure, which may end them under its feet. */
void conn_put(rlc_engine *e, struct conn *c, struct req *r, bool front)
{
    if (c->state == C_UP && !c->qhead && !given_up(e, c))
        write_req(e, c, r);
    else
        queue_req(c, r, front);
    schedule(e, c);
}

/* What waited in the queue goes on the wire, in order. */
static void write_queue(rlc_engine *e, struct conn *c, int64_t now)
{
    while (c->qhead) {
        struct req *r = c->qhead;
        c->qhead = r->next;
        if (!c->qhead)
            c->qtail = NULL;
        write_req(e, c, r);
        if (r->op)
            e->went_out(e, r, now);
    }
}

struct req *conn_own_req(rlc_engine *e, int node, int kind, struct rlc_cmd *cmd)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->kind = kind;
    r->node = node;
    r->cmd = cmd;
    e->in_flight++;
    return r;
}

struct req *conn_send(rlc_engine *e, int node, const struct eng_lock *l, int kind,
                      struct eng_op *op, const struct script *s, struct rlc_cmd *cmd, bool redo)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->kind = kind;
    r->node = node;
    r->op = op;
    r->redo = redo;
    r->slot = l->slot;
    /* the writes a hold's claim stands on wait for their replicas */
    r->sync = op && e->opts.sync_replicas > 0 &&
              (kind == R_ACQUIRE || kind == R_RENEW || kind == R_EXTEND);
    bool cluster = e->clusters && e->clusters[node];
    const struct script *twin = cluster ? e->topo->script(e, node, s) : s;
    struct rlc_cmd *own = twin != s ? cmd_with_script(cmd, s, twin) : NULL;
    if (own) {
        s = twin; /* a sharded cluster's release: the same call, SPUBLISHing */
        cmd = own;
    }
    r->script = s;
    /* A NOSCRIPT answer sends a request again behind what was pipelined
     * after it, so a release or an undo may run after the owner's next
     * acquire or extend and cut that hold's TTL (the simulation found it,
     * seeds 5480 and 20227). That is safe because every request that may set
     * a hold's TTL stays marked until its answer (hold_valid_until), so no
     * validity is counted past what it could leave. */
    r->cmd = own ? own : cmd_ref(cmd);
    if (kind == R_UNDO && s) {
        /* An undo goes as EVAL (a plain command, a DEL, is one already): a NOSCRIPT answer's re-send would go out
         * behind what was sent after it (the owner's next try) and run
         * after it, where the PTTL it may put back cuts that try's lease
         * (its mark then froze the try: it was refused, the lock free).
         * The loads make NOSCRIPT rare (a flush mid-connection), not
         * impossible, and an EVAL is never answered NOSCRIPT; an undo only
         * follows a try that failed, so its bytes are paid rarely. Its
         * script is loaded all the same (write_loads): an EVAL of a loaded
         * script leaves it loaded, never in EVAL's evictable cache alone. */
        struct rlc_cmd *ev = cmd_evalsha_to_eval(r->cmd, s);
        if (!ev)
            abort();
        cmd_unref(r->cmd);
        r->cmd = ev;
        r->eval = true;
    }
    e->in_flight++;
    struct conn *c = cluster ? e->topo->route(e, node, r->slot) : conn_at(e, 2 * node);
    conn_put(e, c, r, false);
    return r;
}

int conn_want_open(const rlc_engine *e, int k)
{
    const struct conn *c = &e->conns[k];
    if (c->state == C_DROPPED)
        return -1;
    if (c->state == C_UP)
        return 1;
    return c->qhead && e->now >= open_at(c) ? 1 : 0;
}

/* A connect ended (up, or failed). The metrics' reconnects are a command
 * connection's connects after its first, as the blocking API counts its
 * pooled connections: reconnects, and retries of a node that stays down. */
static void count_attempt(rlc_engine *e, struct conn *c)
{
    if (c->attempts++ > 0 && !c->sub && !c->track && !c->disc) {
        eng_count(e, RLC_M_RECONNECTS);
        eng_log(e, RLC_LOG_INFO, "reconnecting to %s", e->addrs[c->node].label);
    }
}

/* SCRIPT LOAD of every script the engine may call, pipelined on c: a
 * loaded script stays on the server (Redis 7.4+ and Valkey 8 evict what
 * came by EVAL, beyond 500 scripts), so the EVALSHAs behind find theirs
 * from the first call, whatever other clients EVAL. A cluster master's
 * connection loads the SPUBLISH twins too. Their answers are checked as
 * they come (load_answered). */
static void write_loads(rlc_engine *e, struct conn *c)
{
    const struct script *all[SCRIPTS_ENGINE_MAX];
    size_t n = scripts_engine(all, c->master >= 0, e->opts.format == RLC_FORMAT_CLASSIC);
    for (size_t i = 0; i < n; i++) {
        struct rlc_cmd *cmd = cmd_script_load(all[i]);
        if (!cmd)
            abort();
        write_req(e, c, conn_own_req(e, c->node, R_LOAD, cmd));
    }
    c->loads_end = c->appended;
}

/* A refused SCRIPT LOAD (an ACL without it, a proxy) costs nothing but
 * bytes: on this connection NOSCRIPT sends the call as EVAL. Said once. */
static void load_answered(rlc_engine *e, struct conn *c, const redisReply *reply)
{
    if (reply->type != REDIS_REPLY_ERROR)
        return;
    c->load_refused = true;
    if (!c->load_said)
        eng_log(e, RLC_LOG_WARN, "%s refused SCRIPT LOAD (%.200s): scripts it lost go as EVAL",
                e->addrs[c->node].label, reply->str);
    c->load_said = true;
}

void conn_connected(rlc_engine *e, int k, int64_t now)
{
    struct conn *c = conn_at(e, k);
    if (c->state == C_UP || c->state == C_DROPPED)
        return;
    count_attempt(e, c);
    c->state = C_UP;
    c->answered = false;
    c->instance = ++e->instances;
    c->reader = redisReaderCreate();
    if (!c->reader)
        abort();
    c->out_len = c->out_sent = 0;
    c->taken = c->appended;
    /* the handshake goes first, then what waited, in order; its last step
     * is the restart guard's look at the server (engine_guard.c) */
    for (int i = 0; i < 3; i++) {
        struct rlc_cmd *h = i < 2 ? e->hello[c->node][i] : guard_handshake(e, c);
        if (!h)
            continue;
        struct req *r = calloc(1, sizeof *r);
        if (!r)
            abort();
        r->kind = i < 2 ? R_HELLO : R_INFO;
        r->node = c->node;
        r->cmd = cmd_ref(h);
        e->in_flight++;
        if (fifo_less(c)) {
            /* its handshake replies are told apart by shape (engine_sub.c,
             * engine_track.c) */
            conn_append(e, c, h->data, h->len);
            req_free(e, r);
        } else {
            write_req(e, c, r);
        }
    }
    if (fifo_less(c))
        return; /* its subscriptions are engine_sub.c's, engine_track.c's (called next) */
    if (!c->track) {
        c->load_refused = false;
        write_loads(e, c);
    }
    write_queue(e, c, now);
    schedule(e, c);
}

/* The request's operation hears that no reply will come. */
static void no_reply(rlc_engine *e, struct req *r, int why, const char *msg)
{
    if (r->op)
        e->deliver(e, r, NULL, why, msg, e->now);
}

/* Everything in flight on c is settled: redo requests go back to the front
 * of the queue (in order), the others hear `why`. A request whose bytes the
 * driver had not all taken never reached the server (an incomplete command
 * does not run): it goes on the next connection like one never written,
 * unless nobody needs it any more (an abandoned acquire, a handshake). */
static void settle(rlc_engine *e, struct conn *c, int why, const char *msg, bool connected)
{
    struct req *redo_head = NULL, *redo_tail = NULL;
    struct req *r = c->head;
    c->head = c->tail = NULL;
    while (r) {
        struct req *next = r->next;
        bool unsent = connected && r->end_at > c->taken;
        bool hello = r->kind == R_HELLO || r->kind == R_INFO || r->kind == R_LOAD;
        if (r->kind == R_SYNC) {
            /* a WAIT says something only behind its write, on its
             * connection: on another one it would count nothing */
            no_reply(e, r, why, msg);
            req_gone(e, r, false);
            req_free(e, r);
            r = next;
            continue;
        }
        /* A connection that ends before its first reply failed as a connect
         * fails (a TLS server that refuses the client's certificate says so
         * in an alert after the handshake): what waited for it hears why,
         * instead of going on the next connection, which would end the same
         * way until its round's deadline. It never ran. */
        bool refused = unsent && !c->answered && r->op && !r->redo && !hello;
        if (refused) {
            no_reply(e, r, why, msg);
            req_gone(e, r, false);
            req_free(e, r);
        } else if (unsent && (hello || (!r->op && !r->redo))) {
            req_gone(e, r, false);
            req_free(e, r);
        } else if (unsent || (r->redo && !hello)) {
            r->resent = r->resent || !unsent; /* its bytes reached the server */
            unpair(r); /* its next copy gets its own WAIT */
            /* a release cut off: its caller hears of the cut now, and it
             * goes out again on the next connection (E4) */
            if (!unsent && r->op)
                no_reply(e, r, why, msg);
            r->next = NULL;
            if (redo_tail)
                redo_tail->next = r;
            else
                redo_head = r;
            redo_tail = r;
        } else {
            no_reply(e, r, why, msg);
            req_free(e, r);
        }
        r = next;
    }
    c->taken = c->appended; /* what was not taken is discarded with out */
    if (redo_head) {
        redo_tail->next = c->qhead;
        c->qhead = redo_head;
        if (!c->qtail)
            c->qtail = redo_tail;
    }
    /* A failed connect fails what waited for it (the server is not there);
     * after a drop, what was never written simply goes on the next one. */
    if (!connected) {
        /* Take the queue out first: no_reply() may queue more on c (an undo
         * of the op that hears it), which must not hang off a request being
         * freed (that undo was lost, and leaked). */
        struct req *list = c->qhead, *keep_head = NULL, *keep_tail = NULL;
        c->qhead = c->qtail = NULL;
        while ((r = list)) {
            list = r->next;
            r->next = NULL;
            if (!r->redo) {
                no_reply(e, r, why, msg);
                req_gone(e, r, false); /* never written: it cannot run */
                req_free(e, r);
            } else {
                /* a release: its caller hears of the failure now, and
                 * it goes out on the next connection (E4) */
                no_reply(e, r, why, msg);
                if (keep_tail)
                    keep_tail->next = r;
                else
                    keep_head = r;
                keep_tail = r;
            }
        }
        if (keep_head) {
            keep_tail->next = c->qhead;
            if (!c->qhead)
                c->qtail = keep_tail;
            c->qhead = keep_head;
        }
    }
}

/* c is over, from the engine's side. */
static void end_conn(rlc_engine *e, struct conn *c, int why, const char *msg, int next_state)
{
    bool was_up = c->state == C_UP;
    if (c->reader)
        redisReaderFree(c->reader);
    c->reader = NULL;
    c->out_len = c->out_sent = 0;
    c->state = next_state;
    /* A connection that ended before any answer (a node that accepts and
     * closes: a proxy in front of a dead server, a full listener) failed
     * as a connect fails: it backs off, or what waits to go out again (an
     * undo) would reconnect in a loop, thousands of times a second. */
    if (was_up && c->answered) {
        c->fails = 0;
        c->backoff_ms = 0;
        c->retry_at = e->now;
    } else {
        c->fails++;
        snprintf(c->why, sizeof c->why, "%s", msg ? msg : "cannot connect");
        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (c->backoff_ms > BACKOFF_MAX_MS)
            c->backoff_ms = BACKOFF_MAX_MS;
        c->retry_at = e->now + c->backoff_ms;
    }
    if (!fifo_less(c))
        settle(e, c, why, msg, was_up);
    c->taken = c->appended;
    schedule(e, c);
}

/* What the driver's close means, naming the address once: "cannot
 * connect to A" for a connect that failed, "connection to A lost" for one
 * that was up (A is host:port, or a socket's path). The node's label is
 * the round's to add (round_fail), and why it ended the driver's, which
 * read it (the errno, a TLS alert): it puts that behind A. */
static const char *closed_phrase(rlc_engine *e, int k, bool was_up, const char *msg, char *buf,
                                 size_t size)
{
    const char *host;
    int port;
    if (conn_at(e, k)->disc || e->topo->conn_address(e, k, &host, &port, NULL) != RLC_OK)
        return msg;
    char at[200];
    if (port == 0)
        snprintf(at, sizeof at, "%.150s", host);
    else if (strchr(host, ':'))
        snprintf(at, sizeof at, "[%.150s]:%d", host, port);
    else
        snprintf(at, sizeof at, "%.150s:%d", host, port);
    snprintf(buf, size, was_up ? "connection to %s lost" : "cannot connect to %s", at);
    return buf;
}

void conn_closed(rlc_engine *e, int k, int64_t now, int why, const char *msg)
{
    (void)now;
    struct conn *c = conn_at(e, k);
    if (c->state == C_DROPPED) {
        c->state = C_DOWN; /* the engine had let it go already */
        schedule(e, c);
        return;
    }
    bool was_up = c->state == C_UP;
    if (!was_up)
        count_attempt(e, c); /* a connect that failed */
    char said[240];
    end_conn(e, c, why, closed_phrase(e, k, was_up, msg, said, sizeof said), C_DOWN);
    if (c->master >= 0)
        e->topo->closed(e, c, was_up);
}

void conn_drop(rlc_engine *e, struct conn *c, int why, const char *msg)
{
    end_conn(e, c, why, msg, C_DROPPED);
}

void conn_park(rlc_engine *e, struct conn *c, struct req *r, int64_t due)
{
    r->due = due;
    r->next = NULL;
    struct req **pp = &c->parked;
    while (*pp)
        pp = &(*pp)->next;
    *pp = r; /* in the order they were answered */
    schedule(e, c);
}

/* Parked requests that are due go out again, in the order they were parked
 * (E3: one nobody waits for any more is dropped; "not now" said it never
 * ran). */
static void unpark(rlc_engine *e, struct conn *c, int64_t now)
{
    struct req **pp = &c->parked, *due = NULL, **tail = &due;
    while (*pp) {
        struct req *r = *pp;
        if (r->due > now) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        r->next = NULL;
        *tail = r;
        tail = &r->next;
    }
    while (due) {
        struct req *r = due;
        due = r->next;
        if (!r->op && !r->redo) {
            req_gone(e, r, false);
            req_free(e, r);
            continue;
        }
        conn_put(e, e->topo->route(e, r->node, r->slot), r, false);
    }
}

void conn_timer(rlc_engine *e, struct conn *c, int64_t now)
{
    if (c->disc) {
        e->topo->disc_timer(e, c, now);
        return;
    }
    if (c->parked)
        unpark(e, c, now);
    if (fails_now(e, c))
        fail_waiting(e, c);
    if (c->state == C_UP && c->qhead && !given_up(e, c))
        write_queue(e, c, now); /* its head was answered meanwhile */
    /* a queue still held back waits behind a request given up on (conn_put) */
    if (c->state == C_UP && c->head && (c->qhead || now >= c->head->sent_at + stall_ms(e))) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s did not answer for %lld ms; connection dropped",
                 e->addrs[c->node].label, (long long)(now - c->head->sent_at));
        conn_drop(e, c, RLC_E_TIMEOUT, msg);
        return;
    }
    schedule(e, c);
}

static bool is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Where SCRIPT LOAD is refused, the metrics' script reloads: a NOSCRIPT
 * for a script this server had run (SCRIPT FLUSH, eviction); the first
 * call of a script there is answered NOSCRIPT too, and its EVAL caches it,
 * but nothing was lost. (Where the loads are taken, resend_noscript counts
 * each loss once.) */
static void note_script(rlc_engine *e, struct conn *c, const struct script *s, bool noscript)
{
    int at = -1, free_at = -1;
    for (int i = 0; i < CONN_SCRIPTS && at < 0; i++) {
        if (c->ran[i] == s)
            at = i;
        else if (!c->ran[i] && free_at < 0)
            free_at = i;
    }
    if (noscript && at >= 0) {
        eng_count(e, RLC_M_SCRIPT_RELOADS);
        eng_log(e, RLC_LOG_INFO, "%s had lost the scripts (NOSCRIPT): sent as EVAL",
                e->addrs[c->node].label);
        c->ran[at] = NULL; /* known again once its EVAL has run */
    } else if (!noscript && at < 0 && free_at >= 0) {
        c->ran[free_at] = s;
    }
}

/* r was answered NOSCRIPT: the server lost the scripts since they were
 * loaded (SCRIPT FLUSH). They are loaded again, once per loss: only a
 * request written after the last loads on c says the server lost them
 * since; one written before was answered before those loads ran. Then the
 * same call goes again, behind them (and behind ASKING again if its copy
 * went behind one: ASKING holds for one command), and gets its own WAIT
 * (E9). It goes as EVAL, which needs no cache, on its second NOSCRIPT (the
 * scripts lost again in between) or where SCRIPT LOAD is refused: a call
 * is answered within three copies. Like the EVAL it was before, the re-sent
 * copy runs behind what was pipelined after the first (E8 bounds that). */
static void resend_noscript(rlc_engine *e, struct conn *c, struct req *r)
{
    bool asked = r->asked;
    r->noscripts++;
    if (!c->load_refused && r->end_at > c->loads_end) {
        eng_count(e, RLC_M_SCRIPT_RELOADS);
        eng_log(e, RLC_LOG_INFO, "%s had lost the scripts (NOSCRIPT): loaded them again",
                e->addrs[c->node].label);
        write_loads(e, c);
    }
    if (c->load_refused || r->noscripts > 1) {
        struct rlc_cmd *ev = cmd_evalsha_to_eval(r->cmd, r->script);
        if (!ev)
            abort();
        cmd_unref(r->cmd);
        r->cmd = ev;
        r->eval = true;
    }
    if (asked) {
        struct rlc_cmd *ask = cmd_words(1, (const char *const[]){"ASKING"});
        if (!ask)
            abort();
        write_req(e, c, conn_own_req(e, r->node, R_ASKING, ask));
    }
    write_req(e, c, r);
}

static void on_reply(rlc_engine *e, struct conn *c, redisReply *reply)
{
    struct req *r = c->head;
    c->answered = true;
    if (!r)
        return; /* a reply nobody asked for: ignore (cannot happen in RESP2) */
    c->head = r->next;
    if (!c->head)
        c->tail = NULL;
    if (r->kind >= R_MAP) {
        e->topo->own_reply(e, c, r, reply);
        req_free(e, r);
        return;
    }
    if (r->kind == R_INFO) {
        guard_reply(e, c, reply, e->now);
        req_free(e, r);
        return;
    }
    if (r->kind == R_LOAD) {
        load_answered(e, c, reply);
        req_free(e, r);
        return;
    }
    /* This copy's WAIT counts only if this answer is r's last: a copy
     * sent again below (redirected, parked, EVAL after NOSCRIPT) gets a
     * WAIT of its own. */
    struct req *wait = r->wait;
    r->wait = NULL;
    if (c->master >= 0 && r->kind != R_HELLO && e->topo->redirected(e, c, r, reply)) {
        if (wait)
            wait->op = NULL;
        return; /* MOVED / ASK: r went to another master; TRYAGAIN: parked */
    }
    if (r->kind == R_HELLO) {
        if (reply->type == REDIS_REPLY_ERROR) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s refused by %s: %.200s",
                     r->cmd == e->hello[c->node][0] ? "AUTH" : "SELECT",
                     e->addrs[c->node].label, reply->str);
            bool auth = strstr(reply->str, "NOAUTH") || strstr(reply->str, "WRONGPASS") ||
                        strstr(reply->str, "invalid password") || strstr(reply->str, "AUTH");
            req_free(e, r);
            conn_drop(e, c, auth ? RLC_E_AUTH : RLC_E_SERVER, msg);
            return;
        }
        req_free(e, r);
        return;
    }
    if (c->track) {
        e->topo->track_reply(e, c, r, reply); /* a tracking reader's (loss push) */
        req_free(e, r);
        return;
    }
    /* After SCRIPT FLUSH mid-connection: the scripts loaded again and the
     * same call, if anyone still needs its answer. An abandoned acquire is
     * never sent again (E3). An abandoned extend or renewal is: it runs as
     * late as a server that read it late would run it, which its TTL mark
     * already bounds (E8), whether or not that server had the script. */
    if (r->script && c->load_refused)
        note_script(e, c, r->script, is_noscript(reply));
    bool late_ttl = r->kind == R_EXTEND || r->kind == R_RENEW;
    if (is_noscript(reply) && r->script && !r->eval && (r->op || r->redo || late_ttl)) {
        if (wait)
            wait->op = NULL;
        resend_noscript(e, c, r);
        return;
    }
    r->wait = wait; /* the round takes it with the answer (round_note) */
    req_answered(e, r); /* it ran (or, NOSCRIPT, never will): its TTL is known */
    if (r->op)
        e->deliver(e, r, reply, RLC_OK, NULL, e->now);
    unpair(r); /* not taken: its answer reaches nobody */
    req_free(e, r);
}

/* Bytes read on c go to its reader; RLC_E_PROTOCOL (and c dropped) when
 * they are not RESP. */
int conn_feed(rlc_engine *e, struct conn *c, const char *data, size_t len)
{
    if (c->state != C_UP || !c->reader)
        return RLC_OK; /* late bytes of a connection the engine let go */
    if (redisReaderFeed(c->reader, data, len) != REDIS_OK) {
        conn_drop(e, c, RLC_E_PROTOCOL, "unreadable reply");
        return RLC_E_PROTOCOL;
    }
    return RLC_OK;
}

/* The next whole reply read on c (the caller frees it): 1, or 0 when none
 * is complete, or -1 when the bytes are not RESP (c is dropped). */
int conn_next(rlc_engine *e, struct conn *c, redisReply **out)
{
    *out = NULL;
    if (c->state != C_UP || !c->reader)
        return 0;
    void *reply = NULL;
    if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s sent an unreadable reply", e->addrs[c->node].label);
        conn_drop(e, c, RLC_E_PROTOCOL, msg);
        return -1;
    }
    *out = reply;
    return reply != NULL;
}

static bool is_readonly(const rlc_engine *e, const struct conn *c, const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && e->addrs[c->node].topology == RLC_TOPO_SENTINEL &&
           strncmp(r->str, "READONLY", 8) == 0;
}

/* A command connection's bytes: each reply goes to its request (in order). */
int conn_received(rlc_engine *e, int k, const char *data, size_t len, int64_t now)
{
    (void)now;
    struct conn *c = conn_at(e, k);
    if (conn_feed(e, c, data, len) != RLC_OK)
        return RLC_E_PROTOCOL;
    redisReply *reply;
    int got;
    while ((got = conn_next(e, c, &reply)) > 0) {
        if (is_readonly(e, c, reply)) {
            /* A sentinel node's master was demoted: what is in flight here
             * ran nowhere that counts; it is settled as unanswered (an
             * acquire's round undoes, redo requests go out again) and
             * the master is asked for again. */
            char why[200];
            snprintf(why, sizeof why, "%s answered READONLY (no longer the master)",
                     e->addrs[c->node].label);
            freeReplyObject(reply);
            conn_drop(e, c, RLC_E_CONNECT, why);
            e->topo->suspect(e, c->node, why);
            return RLC_OK;
        }
        on_reply(e, c, reply);
        freeReplyObject(reply);
        if (c->state != C_UP)
            break;
    }
    if (got < 0)
        return RLC_E_PROTOCOL;
    schedule(e, c);
    return RLC_OK;
}

void conn_free_all(rlc_engine *e)
{
    if (!e->conns)
        return;
    for (int k = 0; k < e->n_conns; k++) {
        struct conn *c = &e->conns[k];
        timer_clear(e, &c->timer);
        for (struct req *r = c->head, *n; r; r = n) {
            n = r->next;
            req_free(e, r);
        }
        for (struct req *r = c->qhead, *n; r; r = n) {
            n = r->next;
            req_free(e, r);
        }
        for (struct req *r = c->parked, *n; r; r = n) {
            n = r->next;
            req_gone(e, r, false); /* a "not now" said it did not run */
            req_free(e, r);
        }
        if (c->reader)
            redisReaderFree(c->reader);
        free(c->out);
    }
    free(e->conns);
    e->conns = NULL;

}
