/*
 * mux.c - sharing one pipelined connection between threads.
 *
 * The idea (leader/followers): every caller writes its own command into the
 * connection under the mutex, then waits. Whichever waiting caller finds the
 * connection without a reader becomes its reader: it polls the socket, reads
 * every reply that has arrived, and hands each one to the request at the head
 * of the queue (Redis answers in order), waking that request's thread through
 * its eventfd. When the reader's own replies are in, it passes the role to
 * the next waiting request's thread. A lone caller is always its own reader,
 * so it pays one write, one poll and one read: no thread hop.
 *
 * Rules that keep this safe:
 *   - every socket operation (connect, send, recv, close) happens under mu;
 *     only poll() runs unlocked, and its result is acted on only after
 *     re-checking under mu that the caller is still the reader;
 *   - a request whose caller gave up (deadline) stays queued, because its
 *     reply will still arrive in its place; it is freed when it does, or when
 *     the connection is torn down;
 *   - a torn-down connection fails every queued request and drops the reader,
 *     and the next send reconnects.
 */
#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redlockc.h"
#include "clock.h"
#include "cluster_map.h"
#include "cmd.h"
#include "metrics.h"
#include "mux.h"
#include "scripts.h"
#include "wakeup_fd.h"

struct mux_req {
    struct mux_req *next;
    struct mux *mux;
    struct rlc_cmd *cmd;
    const struct script *script;
    struct wakeup_fd *waiter; /* NULL: nobody waits (detached or abandoned) */
    int64_t deadline_ns;
    int64_t sent_ns;
    int status;
    redisReply *reply;
    char err[RLC_ERRLEN];
    bool done;
    unsigned char noscripts; /* NOSCRIPT answers to it on this connection:
                                1 reloaded, 2 sent as EVAL (see reload) */
    bool redo;     /* detached and idempotent: survives a broken connection */
    bool detached; /* sent with nobody to wait for it (not merely abandoned) */
    struct route_to to; /* routed on a cluster: where redirections are asked */
    int slot, pool, hops;
};

/* The reconnect backoff of the client's thread (mux.h): as engine_conn.c. */
#define RECONNECT_MIN_NS (50 * RLC_NS_PER_MS)
#define RECONNECT_MAX_NS (1000 * RLC_NS_PER_MS)

/* Where a routed request goes and how many redirections it took so far. */
struct route {
    struct route_to to;
    int slot, pool, hops;
};


void mux_init(struct mux *m, const struct node_addr *node, int64_t connect_timeout_ms,
              int64_t stale_ms, bool connect_adds_budget, int wake_fd)
{
    memset(m, 0, sizeof *m);
    m->wake_fd = wake_fd;
    /* Many threads take mu for a few microseconds each: spinning a little
     * before sleeping saves a futex sleep and wake-up per contended send. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&m->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    conn_init(&m->conn, node, true);
    m->connect_timeout_ns = connect_timeout_ms * RLC_NS_PER_MS;
    m->stale_ns = stale_ms * RLC_NS_PER_MS;
    m->connect_adds_budget = connect_adds_budget;
}

void mux_init_routing(struct mux *m, const struct node_addr *node, struct route_to to,
                      int pool_index)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    conn_init(&m->conn, node, false); /* never started: for labels only */
    m->wake_fd = -1;
    m->to = to;
    m->pool_index = pool_index;
}

static void req_free(struct mux_req *r)
{
    if (r->reply)
        freeReplyObject(r->reply);
    cmd_unref(r->cmd);
    free(r);
}

static void free_list(struct mux_req *r)
{
    while (r) {
        struct mux_req *next = r->next;
        req_free(r);
        r = next;
    }
}

/* Wake-ups wait until mu is unlocked: a woken thread's first act is to take
 * mu, and waking it while we hold mu only puts it back to sleep on the mutex
 * (with 16 threads on one connection, that was most of the client's CPU).
 * Waiters are never freed (wakeup_fd.c recycles them), so a deferred wake-up
 * that reaches a thread which has moved on is merely spurious, and every
 * wait re-checks its requests under mu after waking. */
static void wake_later(struct mux *m, struct wakeup_fd *w)
{
    if (m->n_to_wake == RLC_MUX_WAKES)
        wakeup_fd_wake(w);
    else
        m->to_wake[m->n_to_wake++] = w;
}

static void unlock_and_wake(struct mux *m)
{
    struct wakeup_fd *w[RLC_MUX_WAKES];
    int n = m->n_to_wake;
    memcpy(w, m->to_wake, sizeof w[0] * (size_t)n);
    m->n_to_wake = 0;
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < n; i++)
        wakeup_fd_wake(w[i]);
}

/* Finishes a request someone waits for; wakes them unless it is `me`. */
static void complete(struct mux *m, struct mux_req *r, int status, const char *err,
                     struct wakeup_fd *me)
{
    r->status = status;
    if (err)
        snprintf(r->err, sizeof r->err, "%s", err);
    r->done = true;
    m->waiting--;
    if (r->waiter != me)
        wake_later(m, r->waiter);
}

/* Wakes the client's thread, which pushes out detached work (mux_push_detached). */
static void wake_pusher(struct mux *m)
{
    uint64_t one = 1;
    if (m->wake_fd >= 0)
        while (write(m->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
            ;
}

/* A connection ends. One that never carried a reply (refused, timed out,
 * cut during its handshake: the node is down or out of reach) pushes the
 * client's thread's next connect back, doubling up to the cap; without
 * that, a redo waiting for a down node had the thread connect again at
 * once after every failure (each teardown wakes it), a busy loop of
 * connect() calls. One that carried a reply ends the backoff. */
static void note_end(struct mux *m)
{
    if (m->answered) {
        m->backoff_ns = 0;
        m->retry_at_ns = 0;
    } else {
        m->backoff_ns = m->backoff_ns ? 2 * m->backoff_ns : RECONNECT_MIN_NS;
        if (m->backoff_ns > RECONNECT_MAX_NS)
            m->backoff_ns = RECONNECT_MAX_NS;
        m->retry_at_ns = rlc_now_ns() + m->backoff_ns;
    }
    m->answered = false;
}

/* Closes the connection and fails everything queued on it. Detached
 * requests that may run twice wait, in order, for the next connection;
 * everything else on it is gone: an abandoned request is never sent again. */
static void teardown(struct mux *m, int status, const char *err, struct wakeup_fd *me)
{
    note_end(m);
    conn_close(&m->conn);
    struct mux_req *r = m->head, **redo_tail = &m->redo;
    while (*redo_tail)
        redo_tail = &(*redo_tail)->next;
    m->head = m->tail = NULL;
    while (r) {
        struct mux_req *next = r->next;
        if (r->waiter) {
            complete(m, r, status, err, me);
        } else if (r->redo && !m->closed) {
            r->next = NULL;
            *redo_tail = r;
            redo_tail = &r->next;
            wake_pusher(m);
        } else {
            req_free(r);
        }
        r = next;
    }
    m->reader = NULL;
}

void mux_shutdown(struct mux *m)
{
    if (m->to.cl) { /* the cluster's own connections: one call for all */
        if (m->pool_index == 0)
            m->to.ops->shutdown(m->to.cl);
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->closed = true;
    teardown(m, RLC_E_CLOSED, "client closed", NULL);
    free_list(m->redo);
    m->redo = NULL;
    unlock_and_wake(m);
}

void mux_destroy(struct mux *m)
{
    if (m->to.cl) { /* its connections are the cluster's (cluster_free) */
        conn_close(&m->conn);
        pthread_mutex_destroy(&m->mu);
        return;
    }
    free_list(m->redo);
    m->redo = NULL;
    struct mux_req *r = m->head;
    while (r) {
        struct mux_req *next = r->next;
        req_free(r);
        r = next;
    }
    conn_close(&m->conn);
    pthread_mutex_destroy(&m->mu);
}

static void append(struct mux *m, struct mux_req *r)
{
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
}

/* Gives up the reader role and wakes a waiting request's thread to take it. */
static void release_reader(struct mux *m)
{
    m->reader = NULL;
    for (struct mux_req *r = m->head; r; r = r->next)
        if (r->waiter) {
            wake_later(m, r->waiter);
            return;
        }
}

static bool is_noscript(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* A sentinel node's master that was demoted by a failover refuses writes
 * with READONLY: the command did not run. The connection is given up like a
 * broken one (the request fails with RLC_E_CONNECT, or a redo waits for the
 * next connection), and the next connect asks the sentinels. */
static bool is_demoted(const struct mux *m, const redisReply *reply)
{
    return m->conn.node->topology == RLC_TOPO_SENTINEL && reply->type == REDIS_REPLY_ERROR &&
           strncmp(reply->str, "READONLY", 8) == 0;
}

/* A detached request that asks nothing back: SCRIPT LOAD of s. */
static struct mux_req *script_load_req(struct mux *m, const struct script *s)
{
    struct rlc_cmd *cmd = cmd_script_load(s);
    struct mux_req *r = cmd ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        cmd_unref(cmd);
        return NULL;
    }
    r->mux = m;
    r->cmd = cmd;
    r->detached = true;
    r->sent_ns = r->deadline_ns = rlc_now_ns();
    return r;
}

/* r was answered NOSCRIPT: the node lost the script (a restart, SCRIPT
 * FLUSH, or Redis 7.4+/Valkey 8 evicting it from EVAL's cache), so it did
 * not run and sending it again is safe. First SCRIPT LOAD, then the same
 * EVALSHA, queued together on this connection, so the EVALSHA finds the
 * script (the load's reply is read and dropped, like a detached one's). A
 * second NOSCRIPT means the load did not take (refused by an ACL, or
 * another flush came between the two): then EVAL, which runs whatever the
 * cache holds, as the last resort. r goes last in the queue, like any
 * command sent now. Returns false, r not queued, when out of memory. */
static bool reload(struct mux *m, struct mux_req *r)
{
    struct mux_req *load = r->noscripts == 0 ? script_load_req(m, r->script) : NULL;
    struct rlc_cmd *again = load ? cmd_ref(r->cmd) : cmd_evalsha_to_eval(r->cmd, r->script);
    size_t mark = m->conn.out_len;
    bool queued = again &&
                  (!load || conn_queue(&m->conn, load->cmd->data, load->cmd->len) == RLC_OK) &&
                  conn_queue(&m->conn, again->data, again->len) == RLC_OK;
    if (!queued) {
        m->conn.out_len = mark; /* nothing half queued: nothing was written since */
        if (load)
            req_free(load);
        cmd_unref(again);
        return false;
    }
    if (r->noscripts == 0)
        metrics_mux_event(m, RLC_M_SCRIPT_RELOADS);
    r->noscripts = load ? 1 : 2;
    if (load)
        append(m, load);
    cmd_unref(r->cmd);
    r->cmd = again;
    append(m, r);
    return true;
}

/* cluster.c sends a redirected detached command on without its script
 * (mux_route_detached): as EVAL, so that a node which lacks the script
 * still runs it, with nobody there to reload it. Rare: a slot that moved. */
static void defer_detached(struct mux_req *r)
{
    struct rlc_cmd *fwd = r->script ? cmd_evalsha_to_eval(r->cmd, r->script) : cmd_ref(r->cmd);
    if (fwd)
        r->to.ops->defer(r->to.cl, r->pool, fwd, NULL, r->slot, r->hops + 1, r->redo);
    cmd_unref(fwd);
}

/* Hands one reply to the request at the head of the queue. */
static int dispatch(struct mux *m, redisReply *reply, struct wakeup_fd *me, char err[RLC_ERRLEN])
{
    struct mux_req *r = m->head;
    if (!r) {
        freeReplyObject(reply);
        snprintf(err, RLC_ERRLEN, "%s sent a reply nobody asked for", m->conn.node->label);
        return RLC_E_PROTOCOL;
    }
    if (is_demoted(m, reply)) {
        freeReplyObject(reply);
        snprintf(err, RLC_ERRLEN, "%s: the master became a replica (READONLY, a failover); "
                 "asking the sentinels again", m->conn.node->label);
        conn_master_lost(&m->conn);
        return RLC_E_CONNECT; /* r is still queued: teardown fails or redoes it */
    }
    if (conn_moved(&m->conn)) {
        /* The sentinels moved the master away from this connection's node.
         * It may be a replica already, flushed by its resync: a script's
         * "0, no such hold" from it is not the master's word, and must not
         * count as a verdict (the watchdog would call a live hold lost). */
        freeReplyObject(reply);
        snprintf(err, RLC_ERRLEN, "%s: the master moved (a failover)", m->conn.node->label);
        return RLC_E_CONNECT;
    }
    m->head = r->next;
    if (!m->head)
        m->tail = NULL;
    m->answered = true;

    /* An abandoned request is not sent again: its caller was told it
     * failed and may have undone it already (the undo's tombstone would
     * stop it anyway, see scripts.c). One somebody waits for, or a detached
     * one (nobody waits, but it was meant to run), is. */
    if (r->script && r->noscripts < 2 && (r->waiter || r->detached) && is_noscript(reply) &&
        reload(m, r)) {
        freeReplyObject(reply);
        return RLC_OK;
    }
    if (!r->waiter) {
        /* A detached command a cluster redirected did not run: the
         * cluster's thread sends it on (an abandoned one is never sent
         * again, see above). Lock order: a mux's mu, then the cluster's. */
        if (r->detached && r->to.cl && cmap_is_redirect(reply))
            defer_detached(r);
        freeReplyObject(reply);
        req_free(r);
        return RLC_OK;
    }
    r->reply = reply;
    complete(m, r, RLC_OK, NULL, me);
    return RLC_OK;
}

/* The reader's turn: connect, write, read and dispatch what poll() reported. */
static void service(struct mux *m, struct wakeup_fd *me, short revents)
{
    char err[RLC_ERRLEN] = "";
    pthread_mutex_lock(&m->mu);
    if (m->reader != me || m->conn.state == CONN_CLOSED) {
        unlock_and_wake(m);
        return;
    }
    int rc = RLC_OK;
    if (m->conn.state == CONN_CONNECTING) {
        rc = conn_finish_connect(&m->conn, err); /* polled for conn_events() */
    } else if (revents & (POLLIN | POLLERR | POLLHUP)) {
        rc = conn_read(&m->conn, err);
        redisReply *reply;
        int k;
        while (rc == RLC_OK && (k = conn_next_reply(&m->conn, &reply, err)) != 0)
            rc = k < 0 ? k : dispatch(m, reply, me, err);
        m->last_io_ns = rlc_now_ns();
    }
    if (rc == RLC_OK && m->conn.state == CONN_READY && m->conn.out_len > 0)
        rc = conn_flush(&m->conn, err);
    if (rc != RLC_OK)
        teardown(m, rc, err, me);
    unlock_and_wake(m);
}

/* Puts the detached requests left over from a broken connection first on
 * the new one, in their original order. */
static void requeue_redo(struct mux *m, int64_t now)
{
    while (m->redo) {
        struct mux_req *r = m->redo;
        if (conn_queue(&m->conn, r->cmd->data, r->cmd->len) != RLC_OK)
            return; /* no memory: they wait for the connection after this one */
        m->redo = r->next;
        r->sent_ns = now;
        r->deadline_ns = now;
        r->noscripts = 0; /* a new connection: a NOSCRIPT is reloaded again */
        append(m, r);
    }
}

/* Queues r. Returns false if r was not queued (done, with its error, and
 * still the caller's); true if it was: from then on the connection owns a
 * detached request and may free it at any time. */
static bool send_locked(struct mux *m, struct mux_req *r, int64_t timeout_ms)
{
    int64_t now = rlc_now_ns();
    char err[RLC_ERRLEN] = "";
    if (m->closed) {
        snprintf(err, sizeof err, "client closed");
        goto fail_closed;
    }
    struct conn *c = &m->conn;
    /* An idle connection may have been closed by the server (restart, CLIENT
     * KILL, timeout) since its last reply: check before sending, so that the
     * call goes out on a fresh connection instead of failing. Nothing is in
     * flight, so nothing can be lost by reconnecting. One recv(MSG_PEEK). */
    if (c->state == CONN_READY && !m->head && conn_peer_closed(c)) {
        conn_master_lost(c);
        teardown(m, RLC_E_CONNECT, "connection closed by the server", NULL);
    }
    /* A sentinel node's master moved (+switch-master, or another connection
     * found out): an idle connection to the old one goes. Busy ones finish
     * what they carry, and fail or see READONLY on the old master. */
    if (!m->head && conn_moved(c))
        teardown(m, RLC_E_CONNECT, "the master moved", NULL);
    if (r->waiter && m->head && m->waiting == 0 && now - m->head->sent_ns > m->stale_ns)
        /* Only abandoned requests, and the oldest unanswered for too long:
         * the server is hung or gone without a FIN. Start over. Never for a
         * detached send: that is the undo of the abandoned request at the
         * head (an acquire that timed out), and it must ride behind it on
         * this connection, or a paused server that wakes up would run the
         * acquire and never the undo. */
        teardown(m, RLC_E_TIMEOUT, "no reply", NULL);
    if (c->state == CONN_CONNECTING && m->waiting == 0) {
        /* A connect nobody watches (started for a fire-and-forget send) may
         * have failed or timed out meanwhile: never join a dead attempt. */
        struct pollfd p = {c->fd, conn_events(c), 0};
        if (now - c->connect_started_ns > m->connect_timeout_ns) {
            conn_master_lost(c);
            teardown(m, RLC_E_CONNECT, "connect timed out", NULL);
        } else if (poll(&p, 1, 0) > 0 && conn_finish_connect(c, err) != RLC_OK)
            teardown(m, RLC_E_CONNECT, err, NULL);
    }

    /* One node: a call that has to connect first gets connect_timeout_ms
     * more. Redlock keeps each node to its own deadline: a node slow to
     * connect must not slow the whole call; its connect goes on for the
     * next call. */
    int64_t budget_ms = timeout_ms;
    if (c->state != CONN_READY && m->connect_adds_budget)
        budget_ms += m->connect_timeout_ns / RLC_NS_PER_MS;
    if (c->state == CONN_CLOSED) {
        int rc = conn_start(c, err);
        if (rc != RLC_OK) {
            r->status = rc;
            goto fail;
        }
        m->last_io_ns = now;
        requeue_redo(m, now);
        metrics_mux_event(m, RLC_M_RECONNECTS);
    }
    bool was_empty = c->out_len == 0;
    if (conn_queue(c, r->cmd->data, r->cmd->len) != RLC_OK) {
        snprintf(err, sizeof err, "out of memory");
        r->status = RLC_E_NOMEM;
        goto fail;
    }
    r->deadline_ns = rlc_deadline_after_ms(now, budget_ms);
    r->sent_ns = now;
    append(m, r);
    if (r->waiter)
        m->waiting++;
    /* With another thread reading, leave the bytes to it: it sends everything
     * queued in one send(), and this thread does no TCP work under mu. Only a
     * request someone waits for may be left so: if the reader leaves, the role
     * goes to a waiting request's thread, which sends them. A detached one
     * (an undo) could otherwise sit unsent with nobody waiting on this mux. */
    bool reader_sends = r->waiter && m->reader && m->reader != r->waiter;
    /* A detached send with nobody reading flushes whatever is queued: no
     * waiter will come to send it. */
    bool must_flush = was_empty || (!r->waiter && !m->reader);
    if (c->state == CONN_READY && must_flush && !reader_sends) {
        int rc = conn_flush(c, err);
        if (rc != RLC_OK) {
            teardown(m, rc, err, r->waiter);
            return true;
        }
    }
    /* A reader polling for replies only must learn that bytes wait to go out. */
    if (reader_sends && was_empty)
        wake_later(m, m->reader);
    return true;

fail_closed:
    r->status = RLC_E_CLOSED;
fail:
    snprintf(r->err, sizeof r->err, "%s", err);
    r->done = true;
    return false;
}

static struct mux_req *req_new(struct mux *m, struct rlc_cmd *cmd, const struct script *script)
{
    struct mux_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->mux = m;
    r->cmd = cmd_ref(cmd);
    r->script = script;
    return r;
}

/* A request that failed before it could be queued (no memory for it). */
static struct mux_req nomem_req = {.status = RLC_E_NOMEM, .done = true, .err = "out of memory"};

/* Queues a request someone waits for on m; with asking, an ASKING goes
 * just before it, in the same locked section so that nothing slips
 * between the two on the connection. */
static struct mux_req *send_waited(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                                   int64_t timeout_ms, const struct route *rt, bool asking)
{
    struct mux_req *r = req_new(m, cmd, script);
    if (!r)
        return &nomem_req;
    if (rt) {
        r->to = rt->to;
        r->slot = rt->slot;
        r->pool = rt->pool;
        r->hops = rt->hops;
    }
    r->waiter = wakeup_fd_self();
    if (!r->waiter) {
        r->status = RLC_E_NOMEM;
        r->done = true;
        snprintf(r->err, sizeof r->err, "cannot create an eventfd for this thread");
        return r;
    }
    struct mux_req *ask = NULL;
    if (asking) {
        const char *argv[1] = {"ASKING"};
        size_t lens[1] = {6};
        struct rlc_cmd *a = cmd_format(1, argv, lens);
        ask = a ? req_new(m, a, NULL) : NULL;
        cmd_unref(a);
        if (ask)
            ask->detached = true;
    }
    pthread_mutex_lock(&m->mu);
    if (ask && !send_locked(m, ask, timeout_ms))
        req_free(ask);
    send_locked(m, r, timeout_ms);
    unlock_and_wake(m);
    return r;
}

/* A request that failed before it was sent anywhere, with err. */
static struct mux_req *failed_req(struct rlc_cmd *cmd, int status, const char *err)
{
    struct mux_req *r = calloc(1, sizeof *r);
    if (!r)
        return &nomem_req;
    r->cmd = cmd_ref(cmd);
    r->status = status;
    r->done = true;
    snprintf(r->err, sizeof r->err, "%s", err);
    return r;
}

static struct mux_req *routed_send(struct mux *v, struct rlc_cmd *cmd, const struct script *script,
                                   int64_t timeout_ms)
{
    int64_t now = rlc_now_ns(), deadline = rlc_deadline_after_ms(now, timeout_ms);
    struct route rt = {v->to, -1, v->pool_index, 0};
    struct rlc_cmd *c = cmd;
    struct mux *m = rt.to.ops->pick(rt.to.cl, rt.pool, &c, &script, &rt.slot, deadline);
    struct mux_req *r;
    if (!m) {
        r = failed_req(c, RLC_E_NOMEM, "out of memory");
    } else {
        /* The wait for a first map (right after the client was made)
         * comes out of this call's time. */
        int64_t left_ms = (deadline - rlc_now_ns()) / RLC_NS_PER_MS;
        r = send_waited(m, c, script, left_ms > 0 ? left_ms : 1, &rt, false);
    }
    cmd_unref(c);
    return r;
}

struct mux_req *mux_send(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                         int64_t timeout_ms)
{
    if (m->to.cl)
        return routed_send(m, cmd, script, timeout_ms);
    return send_waited(m, cmd, script, timeout_ms, NULL, false);
}

void mux_cap_deadline(struct mux_req *r, int64_t deadline_ns)
{
    if (r == &nomem_req)
        return;
    pthread_mutex_lock(&r->mux->mu);
    if (!r->done && deadline_ns < r->deadline_ns)
        r->deadline_ns = deadline_ns;
    pthread_mutex_unlock(&r->mux->mu);
}

static void send_detached(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                          bool redo, const struct route *rt)
{
    struct mux_req *r = req_new(m, cmd, script);
    if (!r)
        return;
    r->redo = redo;
    r->detached = true;
    if (rt) {
        r->to = rt->to;
        r->slot = rt->slot;
        r->pool = rt->pool;
        r->hops = rt->hops;
    }
    pthread_mutex_lock(&m->mu);
    bool queued = send_locked(m, r, 0);
    if (!queued && redo && !m->closed) {
        /* No connection now (the node is down): it goes first on the next. */
        struct mux_req **tail = &m->redo;
        while (*tail)
            tail = &(*tail)->next;
        r->done = false;
        r->next = NULL;
        *tail = r;
        queued = true;
    }
    /* Nobody may come to write or read this connection: the client's
     * thread sees to it. */
    if (queued && !m->reader)
        wake_pusher(m);
    unlock_and_wake(m);
    if (!queued)
        req_free(r);
}

void mux_send_detached(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                       bool redo)
{
    struct route rt = {m->to, -1, m->pool_index, 0};
    struct rlc_cmd *picked = NULL;
    if (m->to.cl) {
        /* Waits for nothing: a first map not read yet sends it to a seed. */
        m = rt.to.ops->pick(rt.to.cl, rt.pool, &cmd, &script, &rt.slot, 0);
        picked = cmd;
        if (!m) {
            cmd_unref(picked);
            return;
        }
    }
    /* As EVALSHA, like a call somebody waits for, not EVAL: an EVAL puts
     * its script in the cache that Redis 7.4+ and Valkey 8 evict, and
     * would send the whole source with every undo. The connection loaded
     * the script in its handshake (conn_load_also), and if the node lost
     * it since, the NOSCRIPT is answered by whoever reads this reply (a
     * waiting caller or the client's thread, see reload): no caller needs
     * to be there for it. */
    send_detached(m, cmd, script, redo, rt.to.cl ? &rt : NULL);
    cmd_unref(picked);
}

void mux_route_detached(struct mux *target, struct rlc_cmd *cmd, bool redo, struct route_to to,
                        int pool, int slot, int hops)
{
    struct route rt = {to, slot, pool, hops};
    send_detached(target, cmd, NULL, redo, &rt);
}

/* Moves a finished request's outcome into res and frees it. */
static void collect(struct mux_req *r, struct mux_result *res)
{
    res->status = r->status;
    res->reply = r->reply;
    r->reply = NULL;
    /* Both RLC_ERRLEN and NUL-terminated; usually empty (no snprintf). */
    size_t n = strlen(r->err);
    memcpy(res->err, r->err, n + 1);
    if (r != &nomem_req)
        req_free(r);
}

static bool others_pending_on(struct mux_req **reqs, const bool *fin, int n, int skip,
                              const struct mux *m)
{
    for (int i = 0; i < n; i++)
        if (i != skip && !fin[i] && reqs[i]->mux == m)
            return true;
    return false;
}

/* Scratch space for one wait: on the stack for a fan-out, on the heap for
 * a watchdog round's many chunks. */
struct wait_space {
    bool *fin;
    struct pollfd *pfd;
    struct mux **polled;
};

#define STACK_REQS RLC_MAX_NODES

static void wait_loop(struct mux_req **reqs, int n, struct mux_result *res,
                      struct wait_space *ws);

void mux_wait(struct mux_req **reqs, int n, struct mux_result *res)
{
    bool fin[STACK_REQS];
    struct pollfd pfd[STACK_REQS + 1];
    struct mux *polled[STACK_REQS];
    struct wait_space ws = {fin, pfd, polled};
    if (n > STACK_REQS) {
        ws.fin = malloc(sizeof *ws.fin * (size_t)n);
        ws.pfd = malloc(sizeof *ws.pfd * (size_t)(n + 1));
        ws.polled = malloc(sizeof *ws.polled * (size_t)n);
        if (!ws.fin || !ws.pfd || !ws.polled) {
            /* No memory for one big wait: wait for each request in turn.
             * Slower, but every request still keeps its own deadline. */
            free(ws.fin);
            free(ws.pfd);
            free(ws.polled);
            struct wait_space one = {fin, pfd, polled};
            for (int i = 0; i < n; i++)
                wait_loop(&reqs[i], 1, &res[i], &one);
            return;
        }
    }
    wait_loop(reqs, n, res, &ws);
    if (n > STACK_REQS) {
        free(ws.fin);
        free(ws.pfd);
        free(ws.polled);
    }
}

/* r (done, owned by this waiter) got a redirection from its cluster: sends
 * its command on where it points, with r's deadline, and frees r. Returns
 * the new request, or NULL with *res filled when it cannot go on (too many
 * hops, its time is up, an address it cannot use). Safe: a node that
 * answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN did not run the command. */
static struct mux_req *redirect(struct mux_req *r, struct mux_result *res)
{
    struct route rt = {r->to, r->slot, r->pool, r->hops + 1};
    bool asking = false;
    int64_t pause_ms = 0;
    char err[RLC_ERRLEN] = "";
    struct mux *m = NULL;
    if (rt.hops <= CMAP_MAX_HOPS)
        m = rt.to.ops->redirect(rt.to.cl, rt.pool, rt.slot, r->reply, &asking, &pause_ms, err,
                             sizeof err);
    else
        snprintf(err, sizeof err, "cluster: slot %d was still redirected after %d hops (last: "
                 "%.100s)", rt.slot, CMAP_MAX_HOPS, r->reply->str);
    int64_t now = rlc_now_ns();
    if (m && pause_ms > 0 && now + pause_ms * RLC_NS_PER_MS < r->deadline_ns) {
        struct timespec ts = {0, (long)(pause_ms * RLC_NS_PER_MS)};
        nanosleep(&ts, NULL);
        now = rlc_now_ns();
    }
    int64_t left_ms = (r->deadline_ns - now) / RLC_NS_PER_MS;
    if (m && left_ms <= 0)
        snprintf(err, sizeof err, "cluster: no time left to follow '%.100s'", r->reply->str);
    if (!m || left_ms <= 0) {
        *res = (struct mux_result){left_ms <= 0 && m ? RLC_E_TIMEOUT : RLC_E_SERVER, NULL, ""};
        snprintf(res->err, sizeof res->err, "%s", err);
        req_free(r);
        return NULL;
    }
    struct mux_req *nr = send_waited(m, r->cmd, r->script, left_ms, &rt, asking);
    req_free(r);
    return nr;
}

static void wait_loop(struct mux_req **reqs, int n, struct mux_result *res,
                      struct wait_space *ws)
{
    struct wakeup_fd *me = wakeup_fd_self();
    bool *fin = ws->fin;
    struct pollfd *pfd = ws->pfd;
    struct mux **polled = ws->polled;
    memset(fin, 0, sizeof *fin * (size_t)n);

    for (;;) {
        int64_t now = rlc_now_ns(), next = RLC_FOREVER_NS;
        int np = 0, pending = 0;
        for (int i = 0; i < n; i++) {
            if (fin[i])
                continue;
            struct mux_req *r = reqs[i];
            if (r == &nomem_req || !r->mux) {
                collect(r, &res[i]);
                fin[i] = true;
                continue;
            }
            struct mux *m = r->mux;
            bool redirected = false;
            pthread_mutex_lock(&m->mu);
            if (r->done && r->to.cl && r->status == RLC_OK && cmap_is_redirect(r->reply)) {
                redirected = true; /* followed below, once m is unlocked */
            } else if (r->done) {
                if (r->to.cl && (r->status == RLC_E_CONNECT || r->status == RLC_E_TIMEOUT))
                    r->to.ops->want_refresh(r->to.cl); /* a master may have failed over */
                collect(r, &res[i]);
                fin[i] = true;
            } else if (now >= r->deadline_ns) {
                /* Give up waiting, not the request: its reply will still come
                 * in its turn, and is then dropped. */
                r->waiter = NULL;
                m->waiting--;
                res[i].status = RLC_E_TIMEOUT;
                res[i].reply = NULL;
                snprintf(res[i].err, sizeof res[i].err, "%s did not answer in %lld ms",
                         m->conn.node->label, (long long)((now - r->sent_ns) / RLC_NS_PER_MS));
                fin[i] = true;
            } else {
                pending++;
                if (!m->reader)
                    m->reader = me;
                bool seen = false;
                for (int j = 0; j < np; j++)
                    seen = seen || polled[j] == m;
                if (m->reader == me && !seen && m->conn.fd >= 0) {
                    struct conn *c = &m->conn;
                    int64_t connect_deadline = c->connect_started_ns + m->connect_timeout_ns;
                    if (c->state == CONN_CONNECTING && now >= connect_deadline) {
                        char err[RLC_ERRLEN];
                        snprintf(err, sizeof err, "connect to %s timed out after %lld ms",
                                 c->node->label,
                                 (long long)(m->connect_timeout_ns / RLC_NS_PER_MS));
                        conn_master_lost(c);
                        teardown(m, RLC_E_CONNECT, err, me);
                        next = now;
                    } else {
                        short ev = conn_events(c);
                        if (c->state == CONN_CONNECTING && connect_deadline < next)
                            next = connect_deadline;
                        pfd[np].fd = c->fd;
                        pfd[np].events = ev;
                        pfd[np].revents = 0;
                        polled[np++] = m;
                    }
                }
                if (r->deadline_ns < next)
                    next = r->deadline_ns;
            }
            if ((fin[i] || redirected) && m->reader == me && !others_pending_on(reqs, fin, n, i, m))
                release_reader(m);
            unlock_and_wake(m);
            if (redirected) {
                reqs[i] = redirect(r, &res[i]);
                fin[i] = reqs[i] == NULL;
                next = now; /* look at it again at once */
                pending += !fin[i];
            }
        }
        if (pending == 0)
            break;
        /* me is not NULL here: mux_send fails a request at once when the
         * thread has no eventfd, so such a thread never has one pending. */
        pfd[np].fd = me->efd;
        pfd[np].events = POLLIN;
        pfd[np].revents = 0;
        poll(pfd, (nfds_t)np + 1, rlc_poll_ms_until(next, now));
        if (pfd[np].revents)
            wakeup_fd_drain(me);
        for (int j = 0; j < np; j++)
            if (pfd[j].revents)
                service(polled[j], me, pfd[j].revents);
    }
}

bool mux_push_detached(struct mux *m)
{
    if (m->to.cl) /* one routing mux speaks for all the cluster's connections */
        return m->pool_index == 0 && m->to.ops->push_detached(m->to.cl);
    char err[RLC_ERRLEN] = "";
    pthread_mutex_lock(&m->mu);
    struct conn *c = &m->conn;
    bool left = false;
    if (m->closed || m->reader) {
        /* closed: nothing to do; a reader: it does the work */
    } else {
        int64_t now = rlc_now_ns();
        int rc = RLC_OK;
        if (c->state == CONN_CLOSED && m->redo && now >= m->retry_at_ns) {
            rc = conn_start(c, err);
            if (rc == RLC_OK) {
                m->last_io_ns = now;
                requeue_redo(m, now);
            }
        }
        if (rc == RLC_OK && c->state == CONN_CONNECTING) {
            struct pollfd p = {c->fd, conn_events(c), 0};
            if (now - c->connect_started_ns > m->connect_timeout_ns) {
                conn_master_lost(c);
                rc = RLC_E_CONNECT, snprintf(err, sizeof err, "connect timed out");
            }
            else if (c->fd >= 0 && poll(&p, 1, 0) > 0)
                rc = conn_finish_connect(c, err);
        }
        if (rc == RLC_OK && c->state == CONN_READY) {
            struct pollfd p = {c->fd, POLLIN, 0};
            if (poll(&p, 1, 0) > 0) {
                rc = conn_read(c, err);
                redisReply *reply;
                int k;
                while (rc == RLC_OK && (k = conn_next_reply(c, &reply, err)) != 0)
                    rc = k < 0 ? k : dispatch(m, reply, NULL, err);
                m->last_io_ns = now;
            }
            if (rc == RLC_OK && c->out_len > 0)
                rc = conn_flush(c, err);
        }
        if (rc != RLC_OK)
            teardown(m, rc, err, NULL);
        /* Still something for this thread: a redo waiting for a connection,
         * a connect in progress, bytes to write, or detached replies to read
         * with nobody else waiting on this connection. */
        left = m->redo || (c->state == CONN_CONNECTING && m->head) ||
               (c->state == CONN_READY && (c->out_len > 0 || (m->head && m->waiting == 0)));
    }
    unlock_and_wake(m);
    return left;
}

int64_t mux_push_next_ns(struct mux *m, int64_t now)
{
    int64_t soon = rlc_deadline_after_ms(now, 10);
    if (m->to.cl)
        return soon;
    pthread_mutex_lock(&m->mu);
    int64_t at = m->conn.state == CONN_CLOSED && m->redo && m->retry_at_ns > soon
                     ? m->retry_at_ns : soon;
    pthread_mutex_unlock(&m->mu);
    return at;
}
