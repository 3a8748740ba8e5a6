/*
 * engine_int.h - the engine's state, shared by its files.
 *
 * The engine (redlockc.h, "Engine") is the lock protocol as a state machine:
 * operations turn into requests (RESP bytes queued per connection), replies
 * come back as bytes, and time only moves when the driver passes it in.
 *
 *   engine.c        the public entry points, events
 *   engine_conn.c   connections: out buffers, in-flight requests, replies,
 *                   handshake, reconnect backoff, stalls, re-sends
 *   engine_sub.c    the subscriber connections and the waiters they wake
 *   engine_timer.c  one min-heap of timers with lazy cancellation
 *   engine_lock.c   names -> locks -> holds (one per owner), levels
 *   engine_acquire.c, engine_release.c, engine_renew.c: the operations
 *   engine_multi.c  a multi-lock's acquire (every name or none)
 *   engine_track.c  loss push: invalidations, verify rounds
 *
 * Nothing here reads a clock, touches a socket or starts a thread.
 */
#ifndef RLC_ENGINE_INT_H
#define RLC_ENGINE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redlockc.h"
#include "cmd.h"
#include "cluster_map.h"
#include "lock_calls.h"
#include "metric_defs.h"
#include "options.h"
#include "restart_rule.h"
#include "uri.h"

struct redisReply;
struct redisReader;
struct script;
struct eng_op;

/* ---- timers (engine_timer.c) ---- */

enum timer_kind { T_OP = 1, T_CHAN, T_HOLD, T_CONN, T_TRACK };

struct tslot;

struct timer {
    int64_t at;          /* -1 (or slot NULL): not scheduled */
    struct tslot *slot;  /* its entry in the heap */
};

/* ---- connections (engine_conn.c) ---- */

enum req_kind { R_HELLO = 1, R_ACQUIRE, R_UNDO, R_RELEASE, R_RENEW, R_EXTEND, R_FLOOR, R_SYNC,
                R_QUERY, /* a query's read (engine_query.c) */
                R_INFO, /* the restart guard's INFO server, in the handshake (engine_guard.c) */
                R_LOAD, /* SCRIPT LOAD, after the handshake and after a NOSCRIPT */
                /* loss push's, on a node's tracking reader (engine_track.c) */
                R_TRACK_ON, R_EXISTS, R_VERIFY,
                /* a cluster node's own (engine_cluster.c): no operation waits */
                R_MAP, R_PROBE, R_ASKING };

struct req {
    struct req *next;
    int kind;
    int node;
    struct eng_op *op;  /* the operation waiting for this reply; NULL once abandoned */
    struct ttl_mark *ttl; /* it may set its holds' TTLs: tracked until answered
                             (a multi-lock's try: a mark per name, by rnext) */
    const struct script *script;
    struct rlc_cmd *cmd;
    bool redo;          /* must be answered: sent again on the next connection */
    bool eval;          /* sent as EVAL (an undo; or after NOSCRIPT, as a last resort) */
    int noscripts;      /* NOSCRIPT answers it had */
    bool asked;         /* its last copy went right behind ASKING (a cluster's ASK) */
    int64_t sent_at;    /* when it was written (its connection was up) */
    uint64_t end_at;    /* its connection's `appended` after its bytes */
    uint64_t instance;  /* the connection instance it was last written on */
    bool resent;        /* written on a connection that dropped, and sent again:
                           that copy may still run (a paused server reads it) */
    unsigned slot;      /* its lock's hash slot: where a cluster node routes it */
    int hops;           /* MOVED / ASK followed so far */
    int retries;        /* TRYAGAIN / CLUSTERDOWN answers so far (parked, then sent again) */
    int64_t due;        /* parked: when it goes out again */
    /* sync_replicas: a WAIT goes right behind every copy of it that is
     * written (first send, EVAL after NOSCRIPT, after MOVED / ASK /
     * TRYAGAIN, on a new connection); `wait` is the one behind its last
     * copy, the only one that counts (engine_conn.c, pair_wait) */
    bool sync;
    struct req *wait;
};

enum conn_state { C_DOWN, C_CONNECTING, C_UP, C_DROPPED };

#define CONN_SCRIPTS 48 /* the scripts and their SPUBLISH twins */

struct conn {
    int state;
    bool sub;              /* the subscriber of its node */
    int node;
    char *out;             /* bytes not yet taken by the driver */
    size_t out_len, out_cap, out_sent;
    uint64_t appended, taken; /* bytes queued in out / taken by the driver, ever */
    struct req *head, *tail; /* written, waiting for their replies, in order */
    struct req *qhead, *qtail; /* to write once the connection is up */
    struct req *parked;    /* a cluster said "not now" (TRYAGAIN): out again at their due */
    struct redisReader *reader;
    int64_t oldest_sent;   /* when the oldest request in flight was written */
    int64_t retry_at;      /* no reconnect before this (after a failure) */
    int64_t backoff_ms;
    struct timer timer;    /* reconnect backoff, stall check */
    int fails;             /* connects in a row that failed */
    char why[160];         /* why the last connect failed (what waiting requests hear) */
    bool ever_up;          /* since the last failure */
    bool answered;         /* this connection gave a reply since it was made */
    bool disc;             /* a sentinel node's discovery connection (engine_sentinel.c) */
    int master;            /* a cluster node's: the master's index in its map; else -1 */
    int track;             /* loss push's (engine_track.c): TRK_SUB, TRK_RD; else 0 */
    uint64_t instance;     /* which connection this is since it was last made
                              (e->instances): one runs its commands in order */
    uint64_t attempts;     /* connects tried and ended (up or failed): the
                              metrics' reconnects are a command connection's
                              attempts after its first */
    const struct script *ran[CONN_SCRIPTS]; /* scripts its server has run: a
                              NOSCRIPT for one of them is a reload (metrics);
                              for another, the script's first call there
                              (counted so only where SCRIPT LOAD is refused) */
    uint64_t loads_end;    /* `appended` after the last SCRIPT LOADs written */
    bool load_refused;     /* a SCRIPT LOAD of this connection was refused (an
                              ACL): NOSCRIPT sends the call as EVAL */
    bool load_said;        /* that refusal was logged (once per connection) */
};

/* A node's loss-push pair: TRK_SUB subscribes to the invalidations, TRK_RD
 * reads the held keys with tracking redirected to it. */
enum { TRK_SUB = 1, TRK_RD = 2 };

/* ---- where a redis-sentinel:// node's master is (engine_sentinel.c) ---- */

struct sentinel {
    char *host;            /* the master as the sentinels last said; NULL: not known */
    int port;
    int conn;              /* the discovery connection's number */
    int seed;              /* the sentinel it talks to, or tries next */
    int step;              /* on that connection: AUTH, ask, watch (+switch-master) */
    int unanswered;        /* sentinels tried in a row without an answer */
    int64_t backoff_ms;    /* before the next round of them */
    int64_t asked_at;
    char why[200];         /* the last discovery failure, for messages */
};

/* ---- locks and holds (engine_lock.c) ---- */

/* A request that may still set a hold's TTL on some node: an acquire, a
 * renewal or extend (their lease), or an undo (it may put back an earlier,
 * shorter PTTL, and the last level's undo ends the lock: ttl -1). A release
 * sets no TTL. It stays
 * in its hold's list until its reply arrives; a request whose connection
 * dropped may still run (a paused server reads it later), so its mark stays
 * for the hold's life. Validity is never counted past what such a late
 * request could leave (hold_valid_until). */
struct ttl_mark {
    struct ttl_mark *next, *prev;
    struct ttl_mark *rnext; /* the next mark of the same request */
    struct hold *hold;
    struct req *req;    /* NULL once the request is gone */
    int64_t ttl;
    int64_t answered_at; /* -1 pending; else it ran before this time, and still
                            counts for a round that started before it */
    /* its node (where it may run); where it was answered: it ran before
       whatever was written after it on that connection instance (instance
       0: a copy may run elsewhere) */
    int node;
    uint64_t instance, end_at;
};

/* Where a round's request to a node was answered (its connection instance
 * and position there), for hold_valid_until. */
struct wire_pos {
    uint64_t instance, end_at;
};

struct hold {
    struct hold *next, *prev; /* in its lock's list */
    struct hold *hnext;    /* in the engine's table by (lock, owner) */
    struct eng_lock *lock;
    uint64_t owner;
    char *field;           /* "<uuid>:<owner>" */
    size_t field_len;
    int64_t count;         /* levels held */
    uint64_t *levels;      /* attempt seq of each level, oldest first */
    int64_t n_levels, cap_levels;
    uint64_t token;
    int64_t lease_ms;
    bool watchdog;
    int lost;              /* 0, or why it was lost */
    int64_t valid_until;   /* ms, the hold's own clock */
    int64_t next_renew;
    struct timer timer;    /* the next renewal or the end of validity */
    struct eng_op *renewing; /* a renewal round in flight */
    int renew_fail;        /* why the last renewal failed (0: it did not) */
    int64_t permits;       /* a semaphore's: the permits its running acquire asks
                              for (its undo gives back as many) */
    struct eng_op *ops_head, *ops_tail; /* its operations, the head runs */
    struct eng_op *queries; /* its queries running (by next): outside the queue */
    struct ttl_mark *marks; /* requests that may still set its TTL */
    /* loss push (engine_track.c) */
    int64_t track_at;      /* when it joins loss push (TRACK_GRACE_MS after it
                              became a watchdog hold); -1: not due */
    bool track_joined;     /* registered: its key's changes are pushed */
    bool track_dirty;      /* in the tracker's list: to verify */
    bool verify_gone;      /* a verify round found it gone: lost at its timer */
    int verifying;         /* verify rounds it is in (it stays until they end) */
};

struct eng_lock {
    struct eng_lock *next; /* in the engine's bucket */
    char *name;            /* as the driver gave it */
    size_t name_len;
    int kind;              /* RLC_KIND_*: one lock per (name, kind, who) */
    uint64_t who;          /* a fair lock's owner (each waiter has its own channel);
                              0 for the other kinds */
    char *key, *channel, *token_key, *attempts_key;
    size_t key_len, channel_len, token_key_len, attempts_key_len;
    char *queue;           /* a read-write lock's waiting writers; else NULL */
    size_t queue_len;
    char *aux;             /* a read lock's timeout keys' prefix ("{name}"), a fair
                              lock's timeouts zset; else NULL */
    size_t aux_len;
    char *pub;             /* a fair lock's channel prefix (its scripts publish to the
                              next waiter's channel under it); else NULL */
    size_t pub_len;
    int64_t thread_wait;   /* a fair lock's thread wait (ms): its last acquire's */
    struct hold *holds;
    /* waiting acquires of this lock, in arrival order (engine_sub.c) */
    struct eng_op *wait_head, *wait_tail;
    int waiters;
    bool subscribed;       /* SUBSCRIBE sent on the nodes' subscribers */
    uint64_t confirms;     /* bit i: node i confirmed the subscription */
    uint64_t resub;        /* bit i: cluster node i turned it away (CLUSTERDOWN...):
                              sent again at the lock's timer (engine_sub.c) */
    struct timer timer;    /* the holder's lease end or the safety poll */
    int64_t timer_want;
    bool missed_wake;      /* a wake found no sleeper: the next busy try retries */
    unsigned slot;         /* the hash slot of its key (and of its other names) */
    bool classic;          /* kept in the classic format (the client's option) */
    int own_msgs;          /* unlock messages of our own releases still to come */
    struct eng_lock *cnext; /* in the engine's channel buckets */
};

/* How often a waiter of a classic-format lock looks again: the clients that
 * share that format (redis-py's Lock, node-redlock, redsync) release without
 * a message, so a message wakes it only when one of ours released. redis-py
 * polls every 100 ms by default, node-redlock every 200 ms. */
#define CLASSIC_POLL_MS 100

/* When a wait of wait_ms from now ends: -1 (never) for a negative wait, and
 * for one too long to be added to now (INT64_MAX: as good as forever). */
static inline int64_t wait_deadline(int64_t now, int64_t wait_ms)
{
    return wait_ms < 0 || wait_ms > INT64_MAX - now ? -1 : now + wait_ms;
}

/* What l is called in a message: "lock", "read lock", "write lock", "fair lock"... */
static inline const char *lock_noun(const struct eng_lock *l)
{
    static const char *const nouns[] = {"lock", "read lock", "write lock", "fair lock",
                                        "semaphore", "permit-expirable semaphore"};
    return l->kind >= 0 && l->kind <= RLC_KIND_PSEMAPHORE ? nouns[l->kind] : "lock";
}

/* A semaphore of either kind: its acquire takes permits, it holds nothing
 * (engine_permits.c). */
static inline bool kind_permits(int kind)
{
    return kind == RLC_KIND_SEMAPHORE || kind == RLC_KIND_PSEMAPHORE;
}

/* Its names as the script calls take them (lock_calls.h). */
static inline struct lock_names eng_names(const struct eng_lock *l)
{
    bool fair = l->kind == RLC_KIND_FAIR;
    return (struct lock_names){l->key, l->token_key, l->attempts_key,
                               fair ? l->pub : l->channel, l->key_len, l->token_key_len,
                               l->attempts_key_len, fair ? l->pub_len : l->channel_len,
                               l->classic, l->kind, l->queue, l->queue_len, l->aux, l->aux_len,
                               l->thread_wait};
}

/* ---- operations (engine_op.c; the kinds in engine_acquire.c,
 * engine_release.c, engine_renew.c) ---- */

/* What a kind of operation does; engine_op.c and engine_sub.c call a kind
 * only through its class, so the kinds sit above them. */
struct op_class {
    void (*start)(rlc_engine *e, struct eng_op *op, int64_t now);
    void (*reply)(rlc_engine *e, struct eng_op *op, int node, const struct redisReply *r,
                  int status, const char *msg, int64_t now);
    void (*timer)(rlc_engine *e, struct eng_op *op, int64_t now);
    /* waiting kinds: a wake, and an end forced from below (status, why) */
    void (*wake)(rlc_engine *e, struct eng_op *op, int64_t now);
    void (*abort)(rlc_engine *e, struct eng_op *op, int status, const char *why, int64_t now);
};
extern const struct op_class op_acquire_class, op_release_class, op_extend_class,
    op_renew_class, op_multi_class, op_member_class, op_query_class;

/* OP_MULTI: a multi-lock's acquire (engine_multi.c); OP_MEMBER: its place
 * in the queue of each of its names but the first. */
enum op_kind { OP_ACQUIRE = 1, OP_RELEASE, OP_EXTEND, OP_RENEW, OP_MULTI, OP_MEMBER,
               OP_QUERY /* engine_query.c */ };
/* P_GATHER: a multi-lock's op (or a member op) at the head of its queue,
 * waiting for the rest of its places */
enum op_phase { P_QUEUED = 0, P_ROUND, P_FLOOR, P_WAIT, P_DONE, P_GATHER };

struct node_reply {
    int status;            /* RLC_OK replied, else why there is none */
    int64_t a, b;          /* parsed integers (op-specific) */
    bool inner;
    char *holder;          /* acquire busy: the holder's field */
    size_t holder_len;
    char *err;             /* an error reply's text */
    int64_t synced;        /* WAIT's answer: replicas that have the write (-1: none) */
    int64_t moving;        /* no answer because its cluster slot was moving or its master
                              down (MOVED / ASK / TRYAGAIN / CLUSTERDOWN): the pause before
                              the redirected request would go out again; else 0 */
};

struct eng_op {
    uint64_t id;
    int kind, phase;
    const struct op_class *cls;
    struct hold *hold;     /* every op acts on one (lock, owner) */
    struct eng_op *next;   /* in the hold's queue */
    struct eng_op *idnext; /* in the engine's table by id */
    struct eng_op *wnext, *wprev; /* in the lock's waiters */
    bool waiting;          /* in the lock's waiters */
    bool woken;            /* a wake is on its way to it */
    bool rewake;           /* a wake came while its try was out: a busy answer to
                              that try is from before, so it tries again at once
                              instead of sleeping (acquire_sleep) */
    bool canceled;
    int64_t wait_ms, lease_req, wait_deadline;
    int64_t queued_at;     /* when the caller asked (an acquire's wait time) */
    bool waited;           /* an acquire that found the lock busy and slept */
    bool queued;           /* a write acquire's try may have registered the writer as
                              waiting (lock_calls.h): it withdraws when it ends */
    struct timer timer;    /* round deadline, retry time or wait deadline */
    /* the current round */
    uint64_t attempt;
    uint64_t outer_level;
    bool nested;
    int64_t lease;
    bool watchdog;
    int64_t started;       /* when its first byte was queued */
    int64_t round_deadline;
    int64_t retry_at;
    int answered;
    /* per node, sized by the engine's node count (op_alloc): ten thousand
     * waiting ops must not each carry room for 64 nodes */
    int nn;
    struct req **reqs;
    struct req **syncs;    /* the WAIT behind each acquire (sync_replicas) */
    struct node_reply *rep;
    struct wire_pos *pos;  /* where each node answered this round's request */
    uint64_t token;
    bool *granted;
    int floor_pending, stored;
    char *floor_err;       /* a node's error reply to token_floor (an ACL), or NULL */
    int64_t permits;       /* a semaphore's acquire: how many it takes */
    /* release */
    uint64_t level;
    bool had_hold;
    /* what its DONE event reports */
    int64_t validity_out;
    int fail_status;       /* renewals: the last failure */
    /* a multi-lock's (engine_multi.c): its names' holds in key order, the
     * first being op->hold, and its place in each other one's queue */
    struct hold **members;
    struct eng_op **places;  /* places[i] in members[i]'s queue (i >= 1) */
    int n_members;
    bool busy_later;       /* this round: a name after the first was busy */
    bool later_msg;        /* this round: a later name's unlock message came */
    int outer_gone;        /* this round: a name (1-based) whose nested-in level is gone */
    /* a member op: the multi-lock op it keeps a place for */
    struct eng_op *multi;
    bool at_head;          /* OP_MULTI, OP_MEMBER: it heads its hold's queue */
    /* a query's (engine_query.c): what it asks (RLC_Q_*, or Q_FORCE), its
     * answer */
    int what;
    int64_t query_out;
    struct rlc_cmd *call;  /* Q_FENCE's, Q_CALL's command, made when it was asked */
    bool call_redo;        /* Q_CALL: sent again on a new connection until answered
                              (a plain semaphore's release: it acts once) */
    bool call_held;        /* Q_CALL: an answer of 0 is RLC_E_LOST (an expirable
                              permit that was not held) */
};

/* A one-shot round beside the queries (rlc_engine_force_release): the
 * force-release script on every node; its answer is how many deleted the
 * key. */
#define Q_FORCE 0x100
/* A fenced write (rlc_engine_fenced_set): op->call on the one node; its
 * answer is 1 written, 0 refused. */
#define Q_FENCE 0x101
/* A semaphore's one-shot call (engine_permits.c): op->call on the one
 * node; its answer is the integer it returns (a nil or a number's text
 * read as one). */
#define Q_CALL 0x102

/* ---- the engine ---- */

#define ENG_BUCKETS 1024

#define ENG_LOG_LINES 32 /* kept until the driver takes them */

struct log_line {
    int level;             /* RLC_LOG_WARN, RLC_LOG_INFO */
    char *text;
};

struct rlc_engine {
    char uuid[40];
    struct rlc_options opts;
    struct node_addr *addrs;
    int n, q;
    int64_t call_timeout_ms;  /* io_timeout_ms for one node, node_timeout_ms for N */
    struct conn *conns;       /* 2n: command, subscriber of node 0, 1, ...; then the
                                 sentinel nodes' discovery connections */
    int n_conns;
    struct sentinel *sentinels; /* per node; used by redis-sentinel:// nodes only */
    struct eng_cluster **clusters; /* per node; non-NULL for redis-cluster:// nodes */
    /* how the connections reach the topologies above them (engine.c sets
     * it): engine_conn.c never names engine_sentinel.c or engine_cluster.c */
    const struct topo_hooks *topo;
    struct rlc_cmd *hello[RLC_MAX_NODES][2]; /* AUTH, SELECT (each may be NULL) */
    struct eng_lock *buckets[ENG_BUCKETS];
    struct eng_lock *cbuckets[ENG_BUCKETS]; /* the same locks by channel */
    struct hold **hbuckets;   /* holds by (lock, owner); hcap of them */
    size_t hcap, n_holds;
    int n_subscribed;         /* locks with waiters */
    uint64_t next_op;
    uint64_t next_attempt;    /* eng_new_attempt: every kind draws from it */
    uint64_t rng;
    int64_t now;              /* the latest time passed in */
    uint64_t instances;       /* connections made so far (conn->instance) */
    struct tslot **heap;
    size_t heap_len, heap_cap;
    size_t heap_dead;           /* disowned slots still in it (engine_timer.c) */
    /* events: a ring of owned copies */
    struct pending_event *ev_head, *ev_tail;
    struct pending_event *ev_current;
    int in_flight;            /* requests written or queued, over all connections */
    /* how a connection hands a reply (or its absence) up: op_deliver */
    void (*deliver)(rlc_engine *e, struct req *r, const struct redisReply *reply, int status,
                    const char *msg, int64_t now);
    /* and that a request waiting for its connection went out on it */
    void (*went_out)(rlc_engine *e, struct req *r, int64_t now);
    int64_t n_ops;            /* operations not yet ended */
    /* the restart guard (engine_guard.c): a record per node, per master of
     * a cluster node; NULL while it is off */
    struct eng_guard *guard;
    int64_t max_lease_ms;     /* the longest lease this engine used */
    struct rlc_cmd *guard_info; /* INFO server */
    struct eng_op *ops_by_id[ENG_BUCKETS];
    struct tracker *track;    /* loss push (engine_track.c); NULL while it is off */
    /* lines for the driver to log (engine_log.c) */
    struct log_line log[ENG_LOG_LINES];
    int log_head, n_log;
    uint64_t log_dropped;
    uint64_t metrics[RLC_M_COUNT]; /* rlc_engine_metrics (engine_metrics.c) */
};

/* engine_log.c: a line for the driver's logger (rlc_engine_next_log). */
void eng_log(rlc_engine *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void eng_log_free(rlc_engine *e);

/* engine_metrics.c: the counters rlc_engine_metrics reads. */
void eng_count(rlc_engine *e, int which);
/* An acquire ends with status (its DONE event): acquires, busy, its wait. */
void eng_count_acquire(rlc_engine *e, const struct eng_op *op, int status);
/* h is lost (why: RLC_E_LOST or the renewals' failure); counted once a life. */
void eng_hold_lost(rlc_engine *e, struct hold *h, int why);

/* engine_op.c (events), engine_lock.c (random numbers) */
void eng_event_done(rlc_engine *e, struct eng_op *op, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void eng_event_lost(rlc_engine *e, struct hold *h, int status, const char *why);
uint64_t eng_random(rlc_engine *e);

/* engine_timer.c */
void timer_set(rlc_engine *e, struct timer *t, int kind, void *obj, int64_t at);
void timer_clear(rlc_engine *e, struct timer *t);
int64_t timer_next(const rlc_engine *e);
/* Pops the next due timer at or before now: 1 and its kind/obj, or 0. */
int timer_pop(rlc_engine *e, int64_t now, int *kind, void **obj);
void timer_free_all(rlc_engine *e);

/* engine_conn.c */
/* The connections (their count: 2 per node, the sentinels' and clusters'). */
int conn_make_all(rlc_engine *e, int n_track);
void conn_free_all(rlc_engine *e);
/* Queues cmd for node's command connection (a cluster's: the one of l's
 * slot); op (may be NULL) gets the reply. */
struct req *conn_send(rlc_engine *e, int node, const struct eng_lock *l, int kind,
                      struct eng_op *op, const struct script *s, struct rlc_cmd *cmd, bool redo);
/* r goes (again) on c: written now if c is up, else queued (first or last). */
void conn_put(rlc_engine *e, struct conn *c, struct req *r, bool front);
/* r did not run and is to go out again at `due` (a cluster's TRYAGAIN or
 * CLUSTERDOWN), on whatever connection its slot's owner has then; it is
 * dropped instead if nobody needs its answer by then. */
void conn_park(rlc_engine *e, struct conn *c, struct req *r, int64_t due);
/* A request of no operation (a cluster node's own), for conn_put. */
struct req *conn_own_req(rlc_engine *e, int node, int kind, struct rlc_cmd *cmd);
void conn_connected(rlc_engine *e, int k, int64_t now);
void conn_closed(rlc_engine *e, int k, int64_t now, int why, const char *msg);
int conn_received(rlc_engine *e, int k, const char *data, size_t len, int64_t now);
void conn_timer(rlc_engine *e, struct conn *c, int64_t now);
int conn_want_open(const rlc_engine *e, int k);
void conn_append(rlc_engine *e, struct conn *c, const char *data, size_t len);
/* Appends one command (lens NULL: NUL-terminated words) to c's bytes. */
void conn_append_cmd(rlc_engine *e, struct conn *c, int argc, const char *const *argv,
                     const size_t *lens);
void conn_drop(rlc_engine *e, struct conn *c, int why, const char *msg);
/* What waits in c's queue hears why now, as after a failed connect (a
 * sentinel node whose every sentinel failed: its master cannot be known
 * before another round of them). Not from inside a call that queues. */
void conn_fail_queued(rlc_engine *e, struct conn *c, const char *why);
/* Nobody waits for r's answer any more, nor for its WAIT's (sync). */
void req_disown(struct req *r);
int conn_feed(rlc_engine *e, struct conn *c, const char *data, size_t len);
int conn_next(rlc_engine *e, struct conn *c, struct redisReply **out);

/* What engine_conn.c asks of the topologies above it (a sentinel node's
 * discovery connection, a cluster node's routing), through e->topo. */
/* One attempt-id space per client. Every script that takes a level or
 * permits names its attempt "<client-uuid>:<n>" (scripts.c, "Attempts");
 * a record, a tombstone and a release's "up to" scan all trust that no two
 * attempts of one client share n, so every lock kind draws n here: a new
 * one (from 1), and the newest given so far (0: none). */
static inline uint64_t eng_new_attempt(rlc_engine *e)
{
    return ++e->next_attempt;
}

static inline uint64_t eng_last_attempt(const rlc_engine *e)
{
    return e->next_attempt;
}

struct topo_hooks {
    void (*disc_schedule)(rlc_engine *e, struct conn *c);
    void (*disc_timer)(rlc_engine *e, struct conn *c, int64_t now);
    void (*suspect)(rlc_engine *e, int node, const char *why);
    struct conn *(*route)(rlc_engine *e, int node, unsigned slot);
    const struct script *(*script)(const rlc_engine *e, int node, const struct script *s);
    bool (*redirected)(rlc_engine *e, struct conn *c, struct req *r,
                       const struct redisReply *reply);
    void (*own_reply)(rlc_engine *e, struct conn *c, struct req *r,
                      const struct redisReply *reply);
    void (*closed)(rlc_engine *e, struct conn *c, bool was_up);
    /* a reply to a request of loss push on a tracking reader (engine_track.c) */
    void (*track_reply)(rlc_engine *e, struct conn *c, struct req *r,
                        const struct redisReply *reply);
    /* where connection k goes now (rlc_engine_conn_address), and where
     * cluster master j of node is: for messages and the restart guard,
     * which sit below the topologies */
    int (*conn_address)(const rlc_engine *e, int k, const char **host, int *port, int *tls);
    int (*master_address)(const rlc_engine *e, int node, int master, const char **host,
                          int *port);
};

/* engine_cluster.c: a redis-cluster:// node is a slot map and, per master,
 * a command and a subscriber connection (a block of them per node). */
#define ENG_CLUSTER_CONNS (2 * CMAP_MAX_MASTERS)
int cluster_make(rlc_engine *e, int first_conn);
void cluster_free_all(rlc_engine *e);
bool is_cluster(const rlc_engine *e, int node);
/* The command connection for a request of `slot` on cluster node `node`
 * (it asks for the map the first time). */
struct conn *cluster_route(rlc_engine *e, int node, unsigned slot);
/* The script to send on node for s (SPUBLISH twins on sharded clusters). */
const struct script *cluster_script(const rlc_engine *e, int node, const struct script *s);
/* A reply on a cluster command connection: true when it was a redirection
 * that took r elsewhere (r is then not the caller's to free). */
bool cluster_redirected(rlc_engine *e, struct conn *c, struct req *r,
                        const struct redisReply *reply);
/* r is a cluster node's own request (R_MAP, R_PROBE, R_ASKING): its reply
 * (NULL: none will come). */
void cluster_own_reply(rlc_engine *e, struct conn *c, struct req *r,
                       const struct redisReply *reply);
void cluster_conn_closed(rlc_engine *e, struct conn *c, bool was_up);
int cluster_want_open(const rlc_engine *e, const struct conn *c);
int cluster_address(const rlc_engine *e, const struct conn *c, const char **host, int *port);
/* Master j of cluster node `node` (loss push keeps a pair per master). */
int cluster_master_address(const rlc_engine *e, int node, int master, const char **host,
                           int *port);
/* Whether master j owns slots in the map (it is not a seed or failed over). */
bool cluster_master_owns(const rlc_engine *e, int node, int master);
/* The master that owns slot in the map, or -1 (no map yet, or no owner). */
int cluster_slot_master(const rlc_engine *e, int node, unsigned slot);
/* Asks for the map again (a MOVED seen off the command connections). */
void cluster_refresh(rlc_engine *e, int node);
/* Subscriptions on a cluster: the subscriber connection for a lock, and the
 * verbs (SSUBSCRIBE / SUNSUBSCRIBE on a sharded cluster). */
struct conn *cluster_sub_conn(rlc_engine *e, int node, unsigned slot);
const char *cluster_sub_verb(const rlc_engine *e, int node, bool subscribe);
void cluster_sub_moved(rlc_engine *e, struct conn *c, const struct redisReply *r);

/* engine_guard.c: the node-restart guard (restart_rule.c has the rule) */
int guard_make(rlc_engine *e);
void guard_free(rlc_engine *e);
/* The guard's step of c's handshake (INFO server), or NULL. */
struct rlc_cmd *guard_handshake(const rlc_engine *e, const struct conn *c);
/* A try with this lease: the longest one is how long a restarted node waits. */
void guard_lease(rlc_engine *e, int64_t lease);
/* c's INFO server answer (NULL: none): the record of c's server (its
 * node's, or on a cluster node its master's). */
void guard_reply(rlc_engine *e, const struct conn *c, const struct redisReply *r, int64_t now);
/* How long node's grants do not count yet (0: they count); a cluster
 * node's, while any of its masters restarted within the longest lease. */
int64_t guard_left_ms(rlc_engine *e, int node, int64_t now);
/* Appends the node's phrase for the error message; returns the length. */
size_t guard_why(rlc_engine *e, int node, int64_t left_ms, int64_t now, char *why,
                 size_t size, size_t len);

/* engine_track.c: loss push. A watchdog hold joins TRACK_GRACE_MS after it
 * is taken (most are let go sooner and cost nothing). */
#define TRACK_GRACE_MS 50
/* The connections loss push adds (a pair per node, per master of a cluster
 * node's map; or 0: off). */
int track_conns(const rlc_engine *e);
int track_make(rlc_engine *e, int first_conn);
void track_free(rlc_engine *e);
int track_want_open(const rlc_engine *e, const struct conn *c);
void track_connected(rlc_engine *e, struct conn *c);
void track_closed(rlc_engine *e, struct conn *c);
int track_sub_received(rlc_engine *e, struct conn *c, const char *data, size_t len);
void track_reader_reply(rlc_engine *e, struct conn *c, struct req *r,
                        const struct redisReply *reply);
void track_timer(rlc_engine *e, int64_t now);
/* h's grace is over: its key is read on the tracking readers from now on. */
void track_join(rlc_engine *e, struct hold *h);
/* The tracking pair of node (to move with a sentinel node's master), or NULL. */
struct conn *track_conn(rlc_engine *e, int node, int which);
/* The cluster master a tracking connection goes to, or -1: its node's. */
int track_master(const rlc_engine *e, const struct conn *c);

/* engine_sentinel.c */
int sentinel_make(rlc_engine *e, int first_conn);
void sentinel_free(rlc_engine *e);
bool sentinel_master_known(const rlc_engine *e, int node);
int sentinel_want_open(const rlc_engine *e, const struct conn *c);
void sentinel_connected(rlc_engine *e, struct conn *c);
void sentinel_closed(rlc_engine *e, struct conn *c);
int sentinel_received(rlc_engine *e, struct conn *c, const char *data, size_t len);
void sentinel_schedule(rlc_engine *e, struct conn *c);
void sentinel_timer(rlc_engine *e, struct conn *c, int64_t now);
/* node's master is wrong (READONLY, its connection gone): ask again. */
void sentinel_suspect(rlc_engine *e, int node, const char *why);
/* Where connection c goes now: RLC_OK, or -1 while its master is unknown. */
int sentinel_address(const rlc_engine *e, const struct conn *c, const char **host, int *port);
const char *sentinel_why(const rlc_engine *e, int node);

/* engine_sub.c */
void sub_join(rlc_engine *e, struct eng_op *op);
void sub_leave(rlc_engine *e, struct eng_op *op);
void sub_wake_one(rlc_engine *e, struct eng_lock *l, int64_t now);
/* Wakes every read waiter of l's channel: a write release's message, 1
 * (Redisson's READ_UNLOCK_MESSAGE), lets readers in together, while
 * writers, who exclude each other, are woken one per message as a lock's. */
void sub_wake_readers(rlc_engine *e, struct eng_lock *l, int64_t now);
void sub_on_connected(rlc_engine *e, struct conn *c);
void sub_on_closed(rlc_engine *e, struct conn *c);
int sub_received(rlc_engine *e, struct conn *c, const char *data, size_t len, int64_t now);
void sub_holder_expires(rlc_engine *e, struct eng_lock *l, int64_t at, int64_t now);
void sub_timer(rlc_engine *e, struct eng_lock *l, int64_t now);
bool sub_wanted(const rlc_engine *e, int node);

/* engine_lock.c */
/* A lock by (name, kind, owner): owner counts only for a fair lock, one per
 * waiter (its own channel). */
struct eng_lock *lock_get(rlc_engine *e, const char *name, size_t len, int kind, uint64_t owner);
struct eng_lock *lock_find(const rlc_engine *e, const char *name, size_t len, int kind,
                           uint64_t owner);
/* The next lock after `after` (NULL: the first) of name and kind, any owner. */
struct eng_lock *lock_next_named(const rlc_engine *e, const struct eng_lock *after,
                                 const char *name, size_t len, int kind);
/* The first lock of channel ch; lock_next_of_channel, the next one: names
 * such as x and {x} share a channel. */
struct eng_lock *lock_by_channel(const rlc_engine *e, const char *ch, size_t len);
struct eng_lock *lock_next_of_channel(const struct eng_lock *l);
/* Another lock of l's channel that is subscribed, or NULL: the channel's
 * subscription is theirs together (engine_sub.c). */
struct eng_lock *lock_channel_peer(const rlc_engine *e, const struct eng_lock *l);
/* Frees l if nothing keeps it (no hold, no waiter). */
void lock_forget_if_idle(rlc_engine *e, struct eng_lock *l);
struct hold *hold_get(rlc_engine *e, struct eng_lock *l, uint64_t owner, bool create);
void hold_maybe_free(rlc_engine *e, struct hold *h);
bool hold_push_level(struct hold *h, uint64_t attempt);
void hold_mark_ttl(struct hold *h, struct req *r, int64_t ttl);
void req_answered(rlc_engine *e, struct req *r);
void hold_prune_marks(rlc_engine *e, struct hold *h);
void req_gone(rlc_engine *e, struct req *r, bool reached);
/* counted: the nodes whose answers the claim counts (a request on any
 * other node cannot shorten what it claims), or NULL: every node. */
int64_t hold_valid_until(const struct hold *h, int64_t started, const struct wire_pos *pos,
                         const bool *counted, int64_t lease, double drift);
uint64_t hold_pop_level(struct hold *h);
void lock_free_all(rlc_engine *e);

/* engine_op.c */
struct eng_op *op_alloc(const rlc_engine *e);
void op_free(rlc_engine *e, struct eng_op *op);
void op_start(rlc_engine *e, struct eng_op *op, int64_t now);
void op_finish(rlc_engine *e, struct eng_op *op, int64_t now);
void op_deliver(rlc_engine *e, struct req *r, const struct redisReply *reply, int status,
                const char *msg, int64_t now);
void op_timer(rlc_engine *e, struct eng_op *op, int64_t now);
size_t op_id_slot(uint64_t id);
void op_id_unlink(rlc_engine *e, struct eng_op *op);
int eng_event_pop(rlc_engine *e, rlc_engine_event *ev);
void eng_events_free(rlc_engine *e);

/* the kinds' own entry points used across files */
void renew_hold_timer(rlc_engine *e, struct hold *h, int64_t now);
void renew_schedule(rlc_engine *e, struct hold *h);
struct rlc_cmd *cmd_renew(const rlc_engine *e, const struct hold *h, int64_t lease);
void acquire_cancel(rlc_engine *e, struct eng_op *op, int64_t now);
/* engine_acquire.c, shared with the multi-lock's (engine_multi.c) */
struct quorum_vote;
void acquire_forget_lost(rlc_engine *e, struct hold *h);
/* An op of a lost hold that still has levels ends RLC_E_LOST, changing
 * nothing (a release gives up one level): true when it did. */
bool hold_take_lost(rlc_engine *e, struct eng_op *op, const char *verb, bool release,
                    int64_t now);
int acquire_votes(rlc_engine *e, const struct eng_op *op, int64_t now,
                  struct quorum_vote *votes, char *guard_msg, size_t size);
bool acquire_may_hold(const struct eng_op *op, int i);
/* Puts op to sleep among its lock's waiters until a wake, its retry time or
 * the wait's end. retry_ms >= 0: look again after that long whatever wakes
 * it; -1: when the holder's lease ends (sleep_ms, -1 unknown) or a message
 * comes. true: a wake came while every waiter was trying (missed_wake), and
 * the caller tries again now instead. */
bool acquire_sleep(rlc_engine *e, struct eng_op *op, int64_t retry_ms, int64_t sleep_ms,
                   int64_t now);
/* A round that failed while a cluster node's slot was moving: an acquire
 * with wait time left sleeps briefly and tries again (true), as if busy. */
bool acquire_ride_out(rlc_engine *e, struct eng_op *op, int64_t now);
/* engine_multi.c: a multi-lock's op over n names (sorted, distinct) for
 * owner, queued in each name's hold; RLC_OK and its id, or RLC_E_NOMEM. */
int multi_new(rlc_engine *e, struct eng_lock *const *locks, int n, uint64_t owner,
              uint64_t *id, struct eng_op **out);
void multi_cancel(rlc_engine *e, struct eng_op *op, int64_t now);
/* engine_query.c: a query op (kind, hold, what set) starts at once, outside
 * its hold's queue; query_free_all drops a hold's running queries unreported
 * (the engine is freed). */
void query_begin(rlc_engine *e, struct eng_op *op);

/* engine.c's, for the entry points of other files (engine_permits.c): a
 * new op of a kind on (name, lock kind, owner) after the checks every call
 * makes; the op of an id; time moved on to now; an acquire of any lock
 * kind queued behind its hold's others (thread_wait: a fair lock's;
 * permits: a semaphore's), after its lease is checked. */
int eng_new_op(rlc_engine *e, int kind, int lock_kind, const char *name, size_t len,
               uint64_t owner, uint64_t *id);
struct eng_op *eng_find_op(const rlc_engine *e, uint64_t id);
void eng_advance(rlc_engine *e, int64_t now);
int eng_acquire(rlc_engine *e, int kind, const char *name, size_t name_len, uint64_t owner,
                int64_t wait_ms, int64_t lease_ms, int64_t thread_wait, int64_t permits,
                int64_t now_ms, uint64_t *op_id);
void query_free_all(rlc_engine *e, struct hold *h);

/* Shared by the operations (engine_round.c): a round sends one command to
 * every node and ends when all answered or at its deadline. */
void round_begin(rlc_engine *e, struct eng_op *op, int64_t now);
/* A request of a round went out on a connection just made (e->went_out). */
void round_went_out(rlc_engine *e, struct req *r, int64_t now);
void round_send(rlc_engine *e, struct eng_op *op, int kind, const struct script *s,
                struct rlc_cmd *cmd);
void round_abandon(struct eng_op *op);
const struct redisReply *round_note(struct eng_op *op, int node, const struct redisReply *r,
                                    int status, const char *msg);
void round_timeout(struct eng_op *op, int n);
/* When the round got no answer from some node because its cluster slot was
 * moving: how long to pause before a new try (>= 0); else -1. */
int64_t round_moving(const struct eng_op *op, int n);
void round_note_renew(struct eng_op *op, int node, const struct redisReply *r, int status,
                      const char *msg);
void round_sync_reply(rlc_engine *e, struct eng_op *op, int node, const struct redisReply *r);
void round_clear(struct eng_op *op);
int round_fail(const rlc_engine *e, const struct eng_op *op, char *msg, size_t size);
struct rlc_cmd *cmd_release(const rlc_engine *e, const struct hold *h, uint64_t level,
                            uint64_t upto, const uint64_t *extra, int64_t n_extra);
void send_undo(rlc_engine *e, struct hold *h, uint64_t attempt, int64_t lease,
               const bool *which);

#endif
