/*
 * mux.h - one Redis connection shared, pipelined, by every thread of a client.
 *
 * Callers queue a command (mux_send) and wait for its reply (mux_wait),
 * possibly for commands on several nodes at once (a Redlock fan-out). There
 * is no I/O thread: one of the waiting callers is the connection's reader and
 * hands each reply to its owner, so an uncontended call is one write, one
 * poll and one read on the caller's own thread, and contended calls share
 * the socket the way one pipelined connection does.
 */
#ifndef RLC_MUX_H
#define RLC_MUX_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "conn.h"

struct rlc_cmd;
struct script;
struct cluster;
struct mux_router;
struct script;

/* The cluster a routing mux or request belongs to, and its calls. */
struct route_to {
    struct cluster *cl;                /* NULL: not routed */
    const struct mux_router *ops;
};
struct wakeup_fd;
struct mux_req;

/* Wake-ups one locked section may defer; more are done at once. */
#define RLC_MUX_WAKES 32

struct mux {
    pthread_mutex_t mu;
    struct conn conn;
    struct mux_req *head, *tail; /* sent or queued, in wire order */
    struct mux_req *redo;        /* detached, unanswered when the connection broke:
                                    sent again first on the next one (FIFO) */
    int waiting;                 /* queued requests somebody waits for */
    struct wakeup_fd *reader;       /* the caller reading replies now, or NULL */
    struct wakeup_fd *to_wake[RLC_MUX_WAKES]; /* woken once mu is unlocked */
    int n_to_wake;
    int64_t last_io_ns;
    /* Reconnects for detached work back off while the node answers nothing:
     * 50 ms doubling to 1 s, as the engine's connections; back to 0 once a
     * connection carried a reply. */
    int64_t backoff_ns;
    int64_t retry_at_ns;         /* the client's thread connects no sooner */
    bool answered;               /* the current connection carried a reply */
    int64_t connect_timeout_ns;
    int64_t stale_ns;            /* an unanswered request this old: reconnect */
    bool connect_adds_budget;    /* one node: a call that must connect gets more time */
    int wake_fd;                 /* the client's thread: wakes it to push a redo out */
    bool closed;
    struct route_to to;          /* a routing mux (cluster.h): no connection of its own */
    int pool_index;              /* its column in the cluster's per-master pools */
};

/* What a routing mux asks of the cluster it routes for. cluster.c fills
 * it in (cluster_router): mux.c names nothing of cluster.c, which sits above
 * the muxes it owns. See cluster.h for each call. */
struct mux_router {
    struct mux *(*pick)(struct cluster *cl, int pool, struct rlc_cmd **cmd,
                        const struct script **script, int *slot, int64_t deadline_ns);
    struct mux *(*redirect)(struct cluster *cl, int pool, int slot, const redisReply *reply,
                            bool *asking, int64_t *pause_ms, char *err, size_t err_size);
    void (*defer)(struct cluster *cl, int pool, struct rlc_cmd *cmd,
                  const struct script *script, int slot, int hops, bool redo);
    void (*want_refresh)(struct cluster *cl);
    bool (*push_detached)(struct cluster *cl);
    void (*shutdown)(struct cluster *cl);
};

/* What a caller gets back for one request. */
struct mux_result {
    int status;         /* RLC_OK: reply is set (it may be an error reply) */
    redisReply *reply;  /* the caller frees it */
    char err[RLC_ERRLEN];
};

void mux_init(struct mux *m, const struct node_addr *node, int64_t connect_timeout_ms,
              int64_t stale_ms, bool connect_adds_budget, int wake_fd);

/* A routing mux for a cluster node: each send goes to the connection, in
 * column pool_index, of the master that owns the command's slot, and its
 * redirections are followed (cluster.h). */
void mux_init_routing(struct mux *m, const struct node_addr *node, struct route_to to,
                      int pool_index);

/* For cluster.c: sends a detached command on target, remembering its route
 * so that a redirection sends it on again (cluster_defer). */
void mux_route_detached(struct mux *target, struct rlc_cmd *cmd, bool redo, struct route_to to,
                        int pool, int slot, int hops);

/* Called by the client's own thread: moves detached work that nobody else
 * will (a redo after a broken connection, bytes queued with no reader): a
 * connect is started or finished, queued bytes are written, replies that
 * arrived are read and handed out. Never blocks. Returns whether work is
 * left (call again soon). */
bool mux_push_detached(struct mux *m);

/* When the client's thread should call mux_push_detached again, given that
 * it said work is left: the end of the reconnect backoff, or now + 10 ms
 * (a connect or bytes in progress). */
int64_t mux_push_next_ns(struct mux *m, int64_t now);
void mux_destroy(struct mux *m);

/* Fails everything queued with RLC_E_CLOSED and refuses new work. */
void mux_shutdown(struct mux *m);

/* Queues cmd. The reply is awaited with mux_wait, within timeout_ms (plus the
 * connect timeout if the connection must be made first). script: the one
 * cmd calls by EVALSHA, or NULL; on NOSCRIPT it is loaded again (SCRIPT
 * LOAD, then the same EVALSHA on this connection), and sent as EVAL only if
 * that is answered NOSCRIPT too. Never NULL. */
struct mux_req *mux_send(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                         int64_t timeout_ms);

/* Brings r's deadline forward to deadline_ns if that is sooner. */
void mux_cap_deadline(struct mux_req *r, int64_t deadline_ns);

/* Queues cmd and forgets it: its reply is read and dropped (a NOSCRIPT is
 * handled as mux_send's, by whoever reads it). redo: the
 * command is safe to run twice (an undo, a release by attempt id), so if the
 * connection breaks before its reply it is sent again, first thing, on the
 * next connection to this node. */
void mux_send_detached(struct mux *m, struct rlc_cmd *cmd, const struct script *script,
                       bool redo);

/* Waits until every request has its reply or its deadline passed, and
 * fills res[i] for reqs[i]. Consumes the requests. */
void mux_wait(struct mux_req **reqs, int n, struct mux_result *res);

#endif
