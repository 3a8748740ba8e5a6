/*
 * redlockc.h - distributed locks on Redis, the whole public API of libredlockc.
 *
 * Two kinds of lock share one API:
 *   - one node:  a Redisson-compatible reentrant lock, kept alive by a watchdog;
 *   - N >= 2 independent masters: the Redlock algorithm (quorum N/2+1) with the
 *     same scripts on every node.
 *
 * Rules that hold for every function below:
 *   - Handles are opaque; callers hold pointers only.
 *   - Fallible functions return an int status: RLC_OK (0) on success,
 *     RLC_NOT_ACQUIRED (1) when a lock was busy, a negative RLC_E_* on failure.
 *     rlc_errmsg() then tells the calling thread what went wrong.
 *   - Results are written through out-parameters, only on RLC_OK.
 *   - Times are int64_t milliseconds. A negative wait means "wait forever".
 *   - Strings returned by the library are owned by it; never free them.
 *   - Thread-safe: a client and a lock handle may be used from many threads.
 *   - After fork() a client created in the parent returns RLC_E_CLOSED in the
 *     child (it never touches the parent's sockets); create a new one there.
 *
 * Plain C99; no macros are needed to call it, so any runtime can dlopen
 * "libredlockc.so.1" and resolve these names.
 */
#ifndef REDLOCKC_H
#define REDLOCKC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(RLC_API)
#define RLC_API __attribute__((visibility("default")))
#elif !defined(RLC_API)
#define RLC_API
#endif

/* ---- Status codes (stable numeric values) ------------------------------ */

enum {
    RLC_OK = 0,
    RLC_NOT_ACQUIRED = 1,   /* another owner holds it and the wait ran out */
    RLC_E_INVAL = -1,       /* bad argument: NULL, empty, malformed, out of range */
    RLC_E_NOMEM = -2,
    RLC_E_CONNECT = -3,     /* could not connect, or the connection broke */
    RLC_E_TIMEOUT = -4,     /* the server did not answer within io_timeout_ms */
    RLC_E_NOT_OWNER = -5,   /* release/extend by an owner that does not hold it */
    RLC_E_LOST = -6,        /* it was held, and expired or was taken */
    RLC_E_NO_QUORUM = -7,   /* fewer than N/2+1 nodes answered: an outage */
    RLC_E_SERVER = -8,      /* Redis replied an error (WRONGTYPE, READONLY, OOM...) */
    RLC_E_PROTOCOL = -9,    /* the server's reply made no sense */
    RLC_E_CLOSED = -10,     /* the client was freed, or used in a forked child */
    RLC_E_AUTH = -11        /* AUTH was refused, or the server wants a password */
};

/* "1.0.0": the library's version (not the ABI's, which is REDLOCKC_1.0). */
RLC_API const char *rlc_version(void);

/* A static English phrase for a status ("lock lost"); never NULL. */
RLC_API const char *rlc_strerror(int status);

/* The calling thread's detail for its last failing call, e.g.
 * "WRONGTYPE at 127.0.0.1:6380 for key 'orders'". Never NULL, never holds a
 * password; valid until this thread's next failing call. */
RLC_API const char *rlc_errmsg(void);

/* ---- Client ------------------------------------------------------------- */

typedef struct rlc_client rlc_client;

/* Creates a client. Connections are made lazily, on first use.
 *
 * nodes: comma-separated URIs, each
 *     redis://[[user]:password@]host[:port][/db]   (port 6379, db 0 by default)
 *     unix://[[user]:password@]/path/to.sock[?db=N]
 *   One node gives single-instance locks; N >= 2 independent masters give
 *   Redlock (quorum N/2+1). At most 64 nodes, each at most once.
 * options: NULL, "" or "name=value;name=value", names:
 *     watchdog_timeout_ms  lease of watchdog locks, renewed every third (30000)
 *     io_timeout_ms        per-call deadline, one node (1000)
 *     node_timeout_ms      per-node deadline of a Redlock call (50)
 *     connect_timeout_ms   added to a call that must (re)connect (1000)
 *     retry_jitter_ms      random delay before a Redlock retry after a split vote (50)
 *     drift_factor         clock drift allowance as a fraction of the lease (0.01)
 *     pool_size            pipelined connections per node shared by all threads (1)
 *     key_prefix           prepended to every lock name ("")
 *   Unknown, duplicate or out-of-range names are RLC_E_INVAL.
 *
 * Returns RLC_OK and *out, or RLC_E_INVAL / RLC_E_NOMEM. */
RLC_API int rlc_client_new(rlc_client **out, const char *nodes, const char *options);

/* Closes the client: stops its watchdog thread and closes its connections.
 * Locks still held are NOT released on the server; they expire with their
 * lease. Lock handles of this client stay valid to free, and every other call
 * on them returns RLC_E_CLOSED. Accepts NULL. */
RLC_API void rlc_client_free(rlc_client *c);

/* The client's random v4 UUID, the first half of every hash field it writes
 * ("<uuid>:<owner>"). NULL for NULL. */
RLC_API const char *rlc_client_uuid(const rlc_client *c);

/* The owner id of the calling thread: 2^62 + a process-wide counter given to
 * each thread on its first call, never reused. Explicit owner ids are below
 * 2^62, so a thread never shares a hold with an explicit owner. */
RLC_API uint64_t rlc_thread_owner(void);

/* ---- Lock --------------------------------------------------------------- */

typedef struct rlc_lock rlc_lock;

/* Makes a handle for the lock `name` (1 to 65536 bytes; key_prefix is added).
 * owner 0: every call acts for the calling thread (Redisson semantics);
 * owner 1 .. 2^62-1: every call acts for that explicit owner id (a request,
 * a task); larger ids are RLC_E_INVAL (they are the threads' own).
 * No network I/O. Returns RLC_OK and *out, RLC_E_INVAL, RLC_E_NOMEM or
 * RLC_E_CLOSED. */
RLC_API int rlc_lock_new(rlc_client *c, const char *name, uint64_t owner, rlc_lock **out);

/* Frees the handle. Holds it still has stop being renewed and expire with their
 * lease; an on_lost callback never runs after this returns. Accepts NULL. */
RLC_API void rlc_lock_free(rlc_lock *l);

/* Acquires the lock for the owner (reentrant: an owner that holds it gets one
 * more level).
 *   wait_ms:  0 try once; > 0 wait at most that long; < 0 wait forever.
 *             A waiter sleeps until the holder's unlock message (pub/sub) or
 *             the holder's lease ends, never on a fixed poll.
 *   lease_ms: <= 0 the watchdog renews the lease (watchdog_timeout_ms) until
 *             release; > 0 a fixed lease, no watchdog. A nested acquire keeps
 *             the mode and lease of the first and refreshes that lease.
 * Returns RLC_OK (held), RLC_NOT_ACQUIRED (busy until the wait ran out),
 * RLC_E_INVAL, RLC_E_CONNECT, RLC_E_TIMEOUT, RLC_E_NO_QUORUM, RLC_E_SERVER,
 * RLC_E_AUTH, RLC_E_CLOSED. */
RLC_API int rlc_lock_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms);

/* Releases one level. At count 0 deletes the key and publishes the unlock
 * message that wakes waiters. Returns RLC_OK, RLC_E_NOT_OWNER (the owner does
 * not hold it; nothing is touched), RLC_E_LOST (this handle held it but it
 * expired or was taken; nothing is touched), or an I/O status. */
RLC_API int rlc_lock_release(rlc_lock *l);

/* Sets the owner's lease to lease_ms from now (fixed; the watchdog stops), or
 * with lease_ms <= 0 hands it to the watchdog. Returns RLC_OK,
 * RLC_E_NOT_OWNER, RLC_E_LOST or an I/O status. */
RLC_API int rlc_lock_extend(rlc_lock *l, int64_t lease_ms);

/* Deletes the lock whoever holds it and wakes waiters. RLC_OK whether or not
 * it was held. */
RLC_API int rlc_lock_force_release(rlc_lock *l);

/* *out = 1 if anyone holds the lock (on a quorum of nodes), else 0. */
RLC_API int rlc_lock_is_locked(rlc_lock *l, int *out);

/* *out = 1 if the owner holds it on a quorum and it was not reported lost. */
RLC_API int rlc_lock_is_held(rlc_lock *l, int *out);

/* *out = the owner's reentrancy count on the server (0 if not held). */
RLC_API int rlc_lock_hold_count(rlc_lock *l, int64_t *out);

/* *out = the key's PTTL in ms as Redis says it: -2 no such lock, -1 no expiry.
 * Over N nodes: the value a quorum of nodes has at least. */
RLC_API int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out);

/* *out = how long the owner's hold is still certainly valid, from the client's
 * monotonic clock (lease - elapsed - drift at the last acquire or renewal);
 * 0 when this handle does not hold it. No network I/O. */
RLC_API int rlc_lock_validity_ms(rlc_lock *l, int64_t *out);

/* *out = the fencing token of the owner's current hold: the value of the
 * counter "redisson_lock_token:{name}" set when the hold began (0 -> 1), so it
 * grows with each new holder. Over N nodes, the largest of the quorum's
 * counters. RLC_E_NOT_OWNER if this handle does not hold it. No network I/O. */
RLC_API int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out);

/* Called once per lost hold, from the client's watchdog thread, when a
 * watchdog-renewed hold can no longer be renewed: reason is RLC_E_LOST (the
 * key or field was gone) or the I/O status that kept renewals from a quorum
 * until the hold's validity ran out. Keep it short; it may call any function
 * of this API. fn NULL removes the callback. */
typedef void (*rlc_lost_fn)(rlc_lock *l, int reason, void *user);
RLC_API int rlc_lock_on_lost(rlc_lock *l, rlc_lost_fn fn, void *user);

/* ---- Metrics and logs (version node REDLOCKC_1.1) --------------------------
 * Per-client counters, read at any time from any thread (no network I/O),
 * and a log callback. Counters only grow; each is read atomically (a set of
 * them is not one snapshot). The indices are stable: new counters are added
 * at the end, so an older caller reads a prefix. */
enum {
    RLC_M_ACQUIRES = 0,       /* acquires that got the lock (nested ones included) */
    RLC_M_BUSY = 1,           /* acquires that ended RLC_NOT_ACQUIRED */
    RLC_M_WAITS = 2,          /* acquires that found it busy and waited */
    RLC_M_RENEWALS = 3,       /* holds renewed by the watchdog (one per hold per round) */
    RLC_M_LOST = 4,           /* holds found lost (by the watchdog, or by a release) */
    RLC_M_RECONNECTS = 5,     /* connects after a connection's first: reconnects, and
                                 retries of a node that stays down */
    RLC_M_SCRIPT_RELOADS = 6, /* NOSCRIPT answers (a node lost the scripts: sent as EVAL) */
    RLC_M_WAIT_MS_SUM = 7,    /* total ms spent by the waits of RLC_M_WAITS */
    RLC_M_WAIT_BUCKET = 8     /* 8 + i: waits that took <= rlc_metric_bucket_ms(i) */
};
#define RLC_M_WAIT_BUCKETS 12 /* the last bucket has no bound (+Inf) */

/* Writes up to n counters of c, by index, into out[0..n-1]; returns how many
 * this library has (n larger than that leaves the rest untouched), or
 * RLC_E_INVAL for a NULL client or out. */
RLC_API int rlc_client_metrics(rlc_client *c, uint64_t *out, int n);

/* The name of counter i ("acquires", "busy", "waits", "renewals", "lost",
 * "reconnects", "script_reloads", "wait_ms_sum", "wait_bucket"), NULL past
 * the end. Static strings. */
RLC_API const char *rlc_metric_name(int i);

/* The upper bound in ms of wait bucket i (a wait is counted in the first
 * bucket whose bound it does not exceed), INT64_MAX for the last (+Inf),
 * RLC_E_INVAL outside 0..RLC_M_WAIT_BUCKETS-1. */
RLC_API int64_t rlc_metric_bucket_ms(int i);

/* Log levels: a callback gets the lines at or below its max_level. */
enum {
    RLC_LOG_ERROR = 1,
    RLC_LOG_WARN = 2,
    RLC_LOG_INFO = 3,
    RLC_LOG_DEBUG = 4
};

/* fn(level, message, user) receives the client's log lines: lost holds
 * (WARN), reconnects and script reloads (INFO). Silent by default; fn NULL
 * silences it again. Lines are queued where they happen and handed over soon
 * after, at the end of an acquire, by the watchdog thread, and by
 * rlc_client_free (before it returns), never while the library holds a lock
 * of its own: fn may call this API. `message` lives until fn
 * returns and never holds a password. Once this call with fn NULL, or
 * rlc_client_free(c), has returned, fn is not running and is never called
 * again (when made from inside fn itself: once fn returns). */
typedef void (*rlc_log_fn)(int level, const char *message, void *user);
RLC_API int rlc_client_set_log(rlc_client *c, int max_level, rlc_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* REDLOCKC_H */
