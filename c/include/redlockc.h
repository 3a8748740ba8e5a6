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
 *   - Out of memory: a call that makes something (a client, a handle, an
 *     option string, a new operation) returns RLC_E_NOMEM when an allocation
 *     fails, having changed nothing. Once an operation is under way (a round
 *     in flight, an undo, a renewal, a release queued for a node) an
 *     allocation that fails aborts the process: that step cannot be taken
 *     back half done without counting a hold the servers lack or leaving a
 *     level behind, and a lock library that no longer knows what it holds
 *     must not go on.
 *
 * Plain C99; no macros are needed to call it, so any runtime can dlopen
 * "libredlockc.so.1" and resolve these names.
 */
#ifndef REDLOCKC_H
#define REDLOCKC_H

#include <stddef.h>
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
    RLC_E_AUTH = -11,       /* AUTH was refused, or the server wants a password */
    RLC_E_CANCELED = -12    /* the wait was cancelled (rlc_lock_cancel, rlc_engine_cancel); since 1.1 */
};

/* "1.1.0": the library's version, which names the newest ABI it carries
 * (symbol versions REDLOCKC_1.0, and REDLOCKC_1.1 for what 1.1 added). */
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
 *   A host name is looked up on a thread of its own, never on the caller's
 *   or the renewal thread: a DNS server that does not answer costs a call at
 *   most connect_timeout_ms more, and reconnects use the node's last good
 *   address (looked up again in the background each time).
 * options: NULL, "" or "name=value;name=value", names:
 *     watchdog_timeout_ms  lease of watchdog locks, renewed every third (30000)
 *     io_timeout_ms        per-call deadline, one node (1000)
 *     node_timeout_ms      per-node deadline of a Redlock call (50)
 *     connect_timeout_ms   added to a call that must (re)connect, name lookup
 *                          included (1000)
 *     retry_jitter_ms      random delay before a Redlock retry after a split vote (50)
 *     drift_factor         clock drift allowance as a fraction of the lease (0.01)
 *     pool_size            accepted (1 .. 64) and unused since 1.2: every lock kind
 *                          pipelines on the engine's one connection per node
 *     key_prefix           prepended to every lock name ("")
 *     restart_guard        1: a node whose run_id changed does not count toward a
 *                          quorum until the longest lease has passed since its
 *                          restart; 0: off (default: 1 for N >= 3, else 0)
 *     loss_push            1: Redis' invalidation messages (CLIENT TRACKING) make
 *                          a watchdog hold's on_lost fire within a round trip of
 *                          its key being deleted, overwritten or expired; 0: at
 *                          the next renewal only (default 1; a node that refuses
 *                          CLIENT TRACKING falls back, with one warning through
 *                          rlc_client_set_log)
 *     sync_replicas        an acquire counts on a node only once WAIT says this many
 *                          replicas have it (0, off); otherwise it is undone and the
 *                          acquire fails with RLC_E_TIMEOUT, message "not synced: ..."
 *     sync_timeout_ms      how long that WAIT may take (1000)
 *     fencing              1: each new hold takes a fencing token from a counter
 *                          key that outlives the lock (0, off: no key is left)
 *     format               redisson (default): Redisson's RLock hash, reentrant;
 *                          classic: the string key of redis-py's Lock,
 *                          node-redlock and redsync (SET NX PX of a random value),
 *                          not reentrant (a nested acquire is RLC_E_INVAL), no
 *                          fencing, no lock family (their _new is RLC_E_INVAL)
 *   Unknown, duplicate or out-of-range names are RLC_E_INVAL.
 *
 * Returns RLC_OK and *out, or RLC_E_INVAL / RLC_E_NOMEM. */
RLC_API int rlc_client_new(rlc_client **out, const char *nodes, const char *options);

/* Closes the client: stops its watchdog thread and closes its connections.
 * Undos of failed acquires and re-sent releases still queued are sent (and
 * answered) first, for at most connect_timeout_ms + io_timeout_ms (Redlock:
 * node_timeout_ms). Locks still held are NOT released on the server; they
 * expire with their lease. Lock handles of this client stay valid to free, and every other call
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
 *   lease_ms: <= 0 the watchdog renews the lease (watchdog_timeout_ms) until
 *             release; > 0 a fixed lease, no watchdog. A nested acquire keeps
 *             the mode and lease of the first and refreshes that lease.
 * How a waiter wakes. It subscribes to "redisson_lock__channel:{name}" on
 * every node and tries again only when
 *   - an unlock message arrives: each message wakes one waiter of the client;
 *   - the subscriber connection was re-established: every waiter tries at
 *     once, as a message may have been missed meanwhile;
 *   - the holder's lease, as the last try saw it, ends;
 *   - a safety poll falls due, once a second, for a holder with no expiry or
 *     an unlock message that never came (the holder's PUBLISH was refused).
 * The last two are one timer per client and lock: one waiter takes each
 * turn, so a lock's waiters in one client make at most one timed try a
 * second between messages, however many they are.
 * A wait needs the channel: if a node refuses the SUBSCRIBE (a Redis 6+ ACL
 * user without the permission "&redisson_lock__channel:*"; Redis 7 users
 * get no channels by default), an acquire that would wait returns
 * RLC_E_SERVER at once, with the server's refusal and the missing permission
 * in rlc_errmsg(), as Redisson's lock() throws. wait_ms 0 needs no channel.
 * Returns RLC_OK (held), RLC_NOT_ACQUIRED (busy until the wait ran out),
 * RLC_E_LOST (a nested acquire found that the hold it nests in had expired
 * or was taken on a quorum: nothing was kept, and the owner's remaining
 * levels report RLC_E_LOST too; or the owner's hold was lost and some of
 * its levels are not yet released: nothing was sent, release them first,
 * each answers RLC_E_LOST), RLC_E_INVAL, RLC_E_CONNECT, RLC_E_TIMEOUT,
 * RLC_E_NO_QUORUM, RLC_E_SERVER, RLC_E_AUTH, RLC_E_CLOSED.
 * An acquire that fails for any reason is undone on every node that may
 * have run it, whenever and on whatever connection each piece arrives
 * (docs/design/attempts.md). */
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

/* *out = 1 if the owner's hold is still valid now (rlc_lock_validity_ms > 0)
 * and a quorum of nodes still has the owner's level; 0 once its validity has
 * run out (a fixed lease that ended, a watchdog hold not renewed in time),
 * without asking the servers. */
RLC_API int rlc_lock_is_held(rlc_lock *l, int *out);

/* *out = the owner's reentrancy count on the server (0 if not held, and 0
 * once the owner's hold has run out its validity). */
RLC_API int rlc_lock_hold_count(rlc_lock *l, int64_t *out);

/* *out = the key's PTTL in ms as Redis says it: -2 no such lock, -1 no expiry.
 * Over N nodes: the value a quorum of nodes has at least. */
RLC_API int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out);

/* *out = how long the owner's hold is still certainly valid, from the client's
 * monotonic clock at this call (lease - elapsed - drift, counted from the
 * start of the last acquire, renewal or extend that a quorum confirmed); 0
 * when this handle does not hold it, or its validity has run out. A healthy
 * watchdog hold stays above about two thirds of the watchdog timeout (it is
 * renewed every third). No network I/O. */
RLC_API int rlc_lock_validity_ms(rlc_lock *l, int64_t *out);

/* *out = the fencing token of the owner's current hold, with the client's
 * option fencing=1 (RLC_E_INVAL without it: by default no hold takes a
 * token, and a released lock leaves no key on the server). The token is the
 * value of the counter "redisson_lock_token:{name}" set when the hold began,
 * a key kept after the lock is released (so that it keeps growing), so it grows
 * with each new holder. A counter that did not exist (a new name, or a node
 * restarted without persistence) starts at the node's clock in microseconds
 * (whole ms), so tokens keep growing when counters are lost: large numbers
 * (about 2^51), below 2^53. Over N nodes, the largest of the granting
 * nodes' counters, which the acquire stored on a quorum of them before it
 * returned: every later holder gets a larger one (docs/design/fencing.md).
 * RLC_E_NOT_OWNER if this handle does not hold it, RLC_E_LOST once its
 * validity has run out (the token may no longer be the newest). No network
 * I/O. */
RLC_API int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out);

/* ---- Lost holds ----------------------------------------------------------
 *
 * A handle's lost callback is called once per lost hold: when a watchdog-
 * renewed hold can no longer be renewed, reason is RLC_E_LOST (the key or
 * field was gone) or the I/O status that kept renewals from a quorum until
 * the hold's validity ran out; when a fixed lease (rlc_lock_acquire's
 * lease_ms > 0, rlc_lock_extend) runs out before its last level is
 * released, reason is RLC_E_LOST, at the moment it ends.
 *
 * Where it runs: on the client's callback thread (the one that hears the
 * engine's lost holds, "rlc-lost-cb"), never on the thread that renews
 * leases and reads unlock messages, so a slow callback delays no renewal. A client's callbacks run
 * one at a time, in the order the holds were found lost: a slow one delays
 * only the callbacks after it.
 *
 * What a callback may call:
 *   - anything on a handle with an explicit owner, a waiting acquire
 *     included (rlc_client_free ends such a wait with RLC_E_CLOSED);
 *   - anything on the handle it was given, whose owner-0 calls act for the
 *     lost hold's owner (the thread that held it), not for the callback
 *     thread: rlc_lock_release returns RLC_E_LOST and gives up one lost
 *     level, touching nothing on the server; once every lost level is
 *     given up, an acquire takes the lock again for that owner, who must
 *     then release it;
 *   - rlc_lock_free of any handle, its own included, and rlc_client_free;
 *   - rlc_version, rlc_strerror, rlc_errmsg, rlc_client_uuid.
 * Any call on another handle with owner 0 returns RLC_E_INVAL with a message:
 * it would act for the library's callback thread, and no application thread
 * could release what it took.
 *
 * rlc_lock_free never returns while the handle's callback runs (unless called
 * from it), and drops its callbacks not yet run. rlc_client_free waits for a
 * running callback to return and drops the rest.
 *
 * Each handle has at most one callback: setting either kind replaces the
 * other; fn NULL removes it. Returns RLC_OK, RLC_E_INVAL or RLC_E_CLOSED. */
typedef void (*rlc_lost_fn)(rlc_lock *l, int reason, void *user);
RLC_API int rlc_lock_on_lost(rlc_lock *l, rlc_lost_fn fn, void *user);

/* The same, and the callback is told the owner id of the lost hold: the
 * handle's explicit owner, or the thread's (rlc_thread_owner() of the thread
 * that acquired it) for an owner-0 handle. Since 1.1 (symbol version
 * REDLOCKC_1.1). */
typedef void (*rlc_lost_owner_fn)(rlc_lock *l, uint64_t owner, int reason, void *user);
RLC_API int rlc_lock_on_lost_owner(rlc_lock *l, rlc_lost_owner_fn fn, void *user);

/* ---- Fenced writes (since REDLOCKC_1.1) -------------------------------- */

/* Writes value at key (a plain string, SET) only if token is at least the
 * fence stored with it, and raises the fence to token: a holder whose lock
 * expired while it paused cannot overwrite what a later holder (larger
 * token) wrote. The fence is the key "redlockc_fence:{key}" (the key's hash
 * slot); key is used as given, without key_prefix. The client must have one
 * node: the Redis that holds the resource, which may be another than the
 * lock's (docs/FENCING.md; there also the recipe for SQL databases).
 * token: from rlc_lock_fencing_token, >= 1.
 * Returns RLC_OK with *applied = 1 (written) or 0 (refused: a larger token
 * is stored; nothing was written), RLC_E_INVAL, RLC_E_SERVER (the fence key
 * holds no token), or an I/O status. */
RLC_API int rlc_fenced_set(rlc_client *c, const char *key, const char *value, size_t value_len,
                           uint64_t token, int *applied);

/* ---- The lock family (REDLOCKC_1.1; docs/FAMILY.md) ----------------------
 * Same rules as rlc_lock: statuses, owner ids (0 = the calling thread),
 * wait_ms (0 try, > 0 bounded, < 0 forever), lease_ms (<= 0 watchdog), and
 * Redisson's data layout on the server. */

/* Read-write lock (Redisson RReadWriteLock). Many readers or one writer;
 * the writer may also take read levels; both sides are reentrant. A writer
 * that waits holds back new readers (readers already reading may nest), so
 * readers cannot starve it. Over N nodes: Redlock (a read quorum and a write
 * quorum share a node). */
typedef struct rlc_rwlock rlc_rwlock;
RLC_API int rlc_rwlock_new(rlc_client *c, const char *name, uint64_t owner, rlc_rwlock **out);
RLC_API void rlc_rwlock_free(rlc_rwlock *l);
RLC_API int rlc_rwlock_read_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms);
RLC_API int rlc_rwlock_read_release(rlc_rwlock *l);
RLC_API int rlc_rwlock_write_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms);
RLC_API int rlc_rwlock_write_release(rlc_rwlock *l);
/* *out = 0 free, 1 read, 2 write (the server's "mode" field, on a quorum). */
RLC_API int rlc_rwlock_mode(rlc_rwlock *l, int *out);
/* *out = levels the owner holds through this handle on the read (write=0)
 * or write side; 0 once lost. No network I/O. */
RLC_API int rlc_rwlock_hold_count(rlc_rwlock *l, int write, int64_t *out);
/* *out = how long that side's hold is certainly valid (ms); 0 if none. */
RLC_API int rlc_rwlock_validity_ms(rlc_rwlock *l, int write, int64_t *out);

/* Fair lock (Redisson RFairLock): first come, first served across clients.
 * thread_wait_ms (<= 0: 5000): a waiter that dies or stops trying leaves
 * the queue at most 2 x thread_wait_ms after its last try. One node only:
 * over N nodes rlc_fairlock_new returns RLC_E_INVAL. */
typedef struct rlc_fairlock rlc_fairlock;
RLC_API int rlc_fairlock_new(rlc_client *c, const char *name, uint64_t owner,
                             int64_t thread_wait_ms, rlc_fairlock **out);
RLC_API void rlc_fairlock_free(rlc_fairlock *l);
RLC_API int rlc_fairlock_acquire(rlc_fairlock *l, int64_t wait_ms, int64_t lease_ms);
RLC_API int rlc_fairlock_release(rlc_fairlock *l);
RLC_API int rlc_fairlock_hold_count(rlc_fairlock *l, int64_t *out);
RLC_API int rlc_fairlock_validity_ms(rlc_fairlock *l, int64_t *out);

/* Semaphore (Redisson RSemaphore): a count of free permits, not bound to an
 * owner. try_set_permits sets the count only if the semaphore has none
 * (*set = 1 if it did). acquire waits for n free permits; release gives n
 * back. One node only (RLC_E_INVAL over N). */
typedef struct rlc_semaphore rlc_semaphore;
RLC_API int rlc_semaphore_new(rlc_client *c, const char *name, rlc_semaphore **out);
RLC_API void rlc_semaphore_free(rlc_semaphore *s);
RLC_API int rlc_semaphore_try_set_permits(rlc_semaphore *s, int64_t permits, int *set);
RLC_API int rlc_semaphore_available(rlc_semaphore *s, int64_t *out);
RLC_API int rlc_semaphore_acquire(rlc_semaphore *s, int64_t n, int64_t wait_ms);
RLC_API int rlc_semaphore_release(rlc_semaphore *s, int64_t n);

/* Permit-expirable semaphore (Redisson RPermitExpirableSemaphore): n
 * permits taken together get one id (32 hex digits, written to id_out, which
 * holds RLC_PERMIT_ID_LEN + 1 bytes) and a lease > 0; permits whose lease
 * ran out go back to the pool. release returns RLC_E_LOST if they had.
 * One node only. */
#define RLC_PERMIT_ID_LEN 32
typedef struct rlc_psemaphore rlc_psemaphore;
RLC_API int rlc_psemaphore_new(rlc_client *c, const char *name, rlc_psemaphore **out);
RLC_API void rlc_psemaphore_free(rlc_psemaphore *s);
RLC_API int rlc_psemaphore_try_set_permits(rlc_psemaphore *s, int64_t permits, int *set);
RLC_API int rlc_psemaphore_available(rlc_psemaphore *s, int64_t *out);
RLC_API int rlc_psemaphore_acquire(rlc_psemaphore *s, int64_t n, int64_t wait_ms,
                                   int64_t lease_ms, char *id_out);
RLC_API int rlc_psemaphore_release(rlc_psemaphore *s, const char *id);

/* Multi-name lock: RLock names held together, all or none, taken by one
 * script per node. Names are sorted and de-duplicated. Each name is an
 * ordinary rlc_lock hold (lock_at gives its handle, owned by the multilock).
 * release gives back one level of every name and reports the first failure. */
typedef struct rlc_multilock rlc_multilock;
RLC_API int rlc_multilock_new(rlc_client *c, const char *const *names, int n, uint64_t owner,
                              rlc_multilock **out);
RLC_API void rlc_multilock_free(rlc_multilock *m);
RLC_API int rlc_multilock_acquire(rlc_multilock *m, int64_t wait_ms, int64_t lease_ms);
RLC_API int rlc_multilock_release(rlc_multilock *m);
RLC_API int rlc_multilock_size(rlc_multilock *m, int *out);
RLC_API int rlc_multilock_lock_at(rlc_multilock *m, int i, rlc_lock **out);

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
    RLC_M_SCRIPT_RELOADS = 6, /* a node lost the scripts (NOSCRIPT): loaded again */
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

/* The client option i (from 0) as one line "name kind range default", NULL
 * past the last: kind "int" (range "min..max"), "fraction" ("min..max"),
 * "text" (length "min..max" in bytes) or "choice" (the words, "a|b");
 * default "-" when the library chooses (a text option not given), "auto"
 * when it depends on the nodes (restart_guard). The one table the options
 * are parsed by: bindings build their own option names from it. Static
 * strings. Since 1.2. */
RLC_API const char *rlc_option_describe(int i);

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

/* Since 1.1 (REDLOCKC_1.1). The client's log lines, taken by polling on the
 * caller's own thread, for callers that may not be called on a library
 * thread (a VM whose callbacks must run on its threads: Ruby's Fiddle).
 * Nothing is kept until rlc_client_keep_log(c, max_level) asks for the
 * lines at or below max_level (RLC_LOG_ERROR..RLC_LOG_DEBUG); max_level 0
 * stops keeping them and empties the queue. Independent of
 * rlc_client_set_log: both may be on, each gets every line of its level.
 * RLC_OK, or RLC_E_INVAL (c NULL, max_level outside 0..RLC_LOG_DEBUG). */
RLC_API int rlc_client_keep_log(rlc_client *c, int max_level);

/* Since 1.1 (REDLOCKC_1.1). The contract of rlc_engine_next_log, for the
 * lines rlc_client_keep_log keeps: takes the oldest line not yet taken, its
 * level into *level (if not NULL), its text into buf (NUL-terminated, cut
 * to fit size), and returns the text's full length, or 0 when there is
 * none (or c is NULL); with buf NULL or size 0 it only says the level and
 * length and the line stays. At most 64 wait; past that the newest are
 * dropped, and the line taken just before them ends with "(and N more log
 * lines, dropped)". Lines are cut at 255 bytes when kept. Safe from any
 * thread, and from inside a log callback. */
RLC_API size_t rlc_client_next_log(rlc_client *c, int *level, char *buf, size_t size);


/* ---- Engine (1.1): the lock protocol without I/O ------------------------
 *
 * The engine is the lock logic alone: it writes commands as RESP bytes per
 * connection, reads replies from the bytes handed to it, counts quorums,
 * runs Redlock rounds, undoes failed attempts, waits for unlock messages,
 * schedules renewals and finds lost holds. It does no I/O, starts no thread
 * and reads no clock: a driver (an event loop, the blocking API, a
 * simulation) moves the bytes and passes the time in, the way nghttp2's
 * session_mem_send / mem_recv work. Same scripts, same wire format, same
 * safety rules as rlc_lock_*: the two exclude each other on one name.
 *
 * Connections: node i (0 .. rlc_engine_nodes()-1) has two, numbered
 *     2*i     its command connection (pipelined, replies in order)
 *     2*i + 1 its subscriber (unlock messages), wanted only while someone waits
 * and after them (2*n .. rlc_engine_conns()-1) one per redis-sentinel://
 * node: its discovery connection to one of its sentinels; then those of
 * redis-cluster:// nodes (a pair per master) and of loss push (a pair per
 * node, per master on a cluster), each opened only when wanted. A
 * connection goes where rlc_engine_conn_address() says when it is opened
 * (a cluster's follow its map, a sentinel node's
 * data connections follow its master; the engine gives them up, want_open
 * -1, when the master moves).
 * The driver loop, after every call into the engine:
 *   - opens connection k while rlc_engine_want_open(e, k) is 1 and it is not
 *     open, and says rlc_engine_connected() once the socket is up (or
 *     rlc_engine_closed() if it could not connect); the engine then writes
 *     the handshake (AUTH, SELECT from the node's URI) itself;
 *   - writes what rlc_engine_pending() holds and says how much went out with
 *     rlc_engine_sent();
 *   - hands every byte it reads to rlc_engine_received(), and a connection
 *     that ends (EOF, error, the driver's own timeout) to rlc_engine_closed();
 *     the engine then wants it again if it still has work for it;
 *   - calls rlc_engine_tick() at rlc_engine_deadline() (or later: never
 *     earlier is needed, a later call only makes a timeout late);
 *   - reads the events with rlc_engine_next_event() until it returns 0.
 *   A connection the engine no longer wants (want_open 0) may be closed or
 *   kept; a driver closes it by calling rlc_engine_closed(). want_open -1:
 *   the engine has given the connection up (its server stalled past the
 *   call deadline plus connect_timeout_ms, or sent bytes that are not
 *   RESP): close the socket and say rlc_engine_closed(); bytes that still
 *   arrive on it are ignored.
 *
 * Time: now_ms comes from one monotonic millisecond clock, never going back.
 *
 * Operations (acquire, release, extend) return an id at once and end with
 * one RLC_EV_DONE event carrying it. Operations of one owner on one lock run
 * one after another in the order they were started; others run at once.
 * An owner is any id the driver picks (1 .. 2^64-1; the blocking API's
 * threads are 2^62 and up, rlc_thread_owner()): one per task, per request,
 * per lock object; holds are reentrant per (name, owner).
 *
 * Not thread-safe: one engine is used by one thread at a time. */
typedef struct rlc_engine rlc_engine;

/* nodes and options: as rlc_client_new (the engine uses watchdog_timeout_ms,
 * io_timeout_ms, node_timeout_ms, connect_timeout_ms, retry_jitter_ms,
 * drift_factor and key_prefix; the other names are accepted and are the
 * driver's business). client_uuid: the 36-character UUID that starts every
 * hash field this engine writes, made by the driver from a good random
 * source (it also seeds the retry jitter); never shared by two engines. */
RLC_API int rlc_engine_new(rlc_engine **out, const char *nodes, const char *client_uuid,
                           const char *options);
/* Frees everything. Whatever is still held is not released (it expires);
 * ops in flight end without events. Accepts NULL. */
RLC_API void rlc_engine_free(rlc_engine *e);
RLC_API int rlc_engine_nodes(const rlc_engine *e);
/* Where node i is: *host a host name or address (or a unix socket's path,
 * with *port 0), valid while e lives. RLC_OK or RLC_E_INVAL. */
RLC_API int rlc_engine_node_address(const rlc_engine *e, int node, const char **host, int *port);
/* 1 when node i is rediss://: the driver speaks TLS on both its connections
 * (the engine's bytes are the same RESP), verifying the server's certificate
 * and name as the tls_* options say; 0 otherwise (or no such node). */
RLC_API int rlc_engine_node_tls(const rlc_engine *e, int node);
/* How many connections the driver may be asked to open (see "Connections");
 * fixed for e's life. */
RLC_API int rlc_engine_conns(const rlc_engine *e);
/* Where connection conn goes if opened now: *host and *port as in
 * rlc_engine_node_address (valid until the next call into e), *tls (may be
 * NULL) 1 when it speaks TLS. RLC_OK; RLC_E_CONNECT while a sentinel node's
 * master is not known (want_open is 0 then); RLC_E_INVAL for no such conn. */
RLC_API int rlc_engine_conn_address(const rlc_engine *e, int conn, const char **host, int *port,
                                    int *tls);
/* The value of the option name as written in rlc_engine_new's options
 * (numbers without their spaces), valid while e lives; NULL when it was not
 * given (the default applies) or there is no such option. Drivers read their
 * own options through it: tls_ca_file, tls_ca_dir, tls_cert_file,
 * tls_key_file, tls_server_name, tls_verify. */
RLC_API const char *rlc_engine_option(const rlc_engine *e, const char *name);
RLC_API const char *rlc_engine_uuid(const rlc_engine *e);

/* 1: open it (or keep it open); 0: not needed; -1: close it (above). */
RLC_API int rlc_engine_want_open(const rlc_engine *e, int conn);
RLC_API void rlc_engine_connected(rlc_engine *e, int conn, int64_t now_ms);
RLC_API void rlc_engine_closed(rlc_engine *e, int conn, int64_t now_ms);
/* The bytes waiting to be written on conn: *data (valid until the next call
 * on e) and their length; 0 when there are none or conn is not connected. */
RLC_API size_t rlc_engine_pending(rlc_engine *e, int conn, const char **data);
RLC_API void rlc_engine_sent(rlc_engine *e, int conn, size_t n);
/* RLC_OK, or RLC_E_PROTOCOL when the bytes are not RESP (the engine then
 * treats conn as closed: the driver closes the socket). */
RLC_API int rlc_engine_received(rlc_engine *e, int conn, const char *data, size_t len,
                                int64_t now_ms);
/* When rlc_engine_tick is due, or -1 when nothing is timed. */
RLC_API int64_t rlc_engine_deadline(const rlc_engine *e);
RLC_API void rlc_engine_tick(rlc_engine *e, int64_t now_ms);
/* 1 when no operation, renewal, undo or re-sent release is in flight or
 * queued: a driver that shuts down waits for this (bounded by its own
 * timeout) before it closes the sockets. */
RLC_API int rlc_engine_idle(const rlc_engine *e);

/* wait_ms: 0 one try, < 0 no limit; lease_ms <= 0 a watchdog hold renewed by
 * the engine every watchdog_timeout_ms/3 (through tick), > 0 a fixed lease.
 * RLC_OK and *op, or RLC_E_INVAL (bad name, owner, lease) with rlc_errmsg(). */
RLC_API int rlc_engine_acquire(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                               int64_t wait_ms, int64_t lease_ms, int64_t now_ms, uint64_t *op);
RLC_API int rlc_engine_release(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                               int64_t now_ms, uint64_t *op);
/* A multi-lock (rlc_multilock_acquire): every name or none. The names are
 * taken in byte order, each once; on each node one script checks them all
 * and takes them all, or writes nothing. Each name is then one more level
 * of the owner's hold of it, released, extended, renewed and lost on its
 * own (rlc_engine_release, ...). Its DONE event names the first name in
 * that order, with token 0 (a multi-lock takes no fencing token) and the
 * least validity of its names; rlc_engine_cancel ends it as an acquire.
 * 1 to 1024 names; on a cluster node they must hash to one slot. */
RLC_API int rlc_engine_acquire_multi(rlc_engine *e, const char *const *names,
                                     const size_t *name_lens, int n, uint64_t owner,
                                     int64_t wait_ms, int64_t lease_ms, int64_t now_ms,
                                     uint64_t *op);
/* As rlc_lock_extend: lease_ms <= 0 hands the hold to the watchdog. */
RLC_API int rlc_engine_extend(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                              int64_t lease_ms, int64_t now_ms, uint64_t *op);
/* Forgets owner's hold of name, or every owner's with owner 0: no
 * renewal, no loss report, no level left for a later acquire to nest in;
 * what the servers still keep of it expires with its lease. Sends nothing;
 * operations still running end as they would. */
RLC_API int rlc_engine_forget(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                              int64_t now_ms);
/* What rlc_engine_query asks (rlc_lock_is_locked, is_held, hold_count,
 * ttl_ms): whether a majority of nodes has the lock's key (LOCKED: 1 or 0),
 * has owner's level there (HELD: 1 or 0); the hold count of owner (COUNT)
 * or the time to live in ms (TTL: -1 no expiry, -2 no key) that at least a
 * quorum of nodes still has. */
enum { RLC_Q_LOCKED = 1, RLC_Q_HELD = 2, RLC_Q_COUNT = 3, RLC_Q_TTL = 4 };
/* Since 1.2: a read-write lock's mode that a quorum of nodes agrees on
 * (rlc_rwlock_mode): 1 read, 2 write, 0 free or no agreement. */
enum { RLC_Q_MODE = 5 };
/* Asks the servers, changing nothing, on the connections the locks use (it
 * sees every command this engine wrote before it). It does not wait behind
 * the owner's other operations. Its DONE event carries the answer in
 * count; without a quorum of answers it fails as a release would. owner:
 * any non-zero id for LOCKED and TTL. */
RLC_API int rlc_engine_query(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                             int what, int64_t now_ms, uint64_t *op);
/* Since 1.2 (REDLOCKC_1.2). rlc_lock_force_release's round: deletes the
 * lock whoever holds it, on every node, and publishes its unlock message so
 * its waiters wake. RLC_OK once a quorum of nodes answered (its DONE event's
 * count: how many nodes had the key); without a quorum of answers it fails
 * as a release would. It runs at once, on the locks' connections, beside
 * owner's other operations (owner: any non-zero id, as a query's). No hold
 * of this engine ends with it: a hold of the name is found gone by its next
 * renewal (RLC_EV_LOST), unless the driver forgets it (rlc_engine_forget). */
RLC_API int rlc_engine_force_release(rlc_engine *e, const char *name, size_t name_len,
                                     uint64_t owner, int64_t now_ms, uint64_t *op);
/* Since 1.2 (REDLOCKC_1.2). rlc_fenced_set's write, on an engine of one
 * node (the resource's Redis; RLC_E_INVAL otherwise): key is set to value
 * only if token is at least the one stored with it. Its DONE event's count
 * is 1 written, 0 refused (a larger token is stored). The key is the
 * driver's as given (no key_prefix), at most 65536 bytes. */
RLC_API int rlc_engine_fenced_set(rlc_engine *e, const char *key, size_t key_len,
                                  const char *value, size_t value_len, uint64_t token,
                                  int64_t now_ms, uint64_t *op);
/* Since 1.2 (REDLOCKC_1.2). Lock kinds an engine runs: RLC_KIND_LOCK is
 * rlc_lock's (every rlc_engine_* call by name alone is of that kind);
 * RLC_KIND_READ and RLC_KIND_WRITE are the two sides of a read-write lock
 * (rlc_rwlock_*, Redisson's RReadWriteLock layout: mode "read" / "write",
 * a reader's field "<uuid>:<owner>" with its timeout keys
 * "{name}:<uuid>:<owner>:rwlock_timeout:<n>", the writer's
 * "<uuid>:<owner>:write", channel redisson_rwlock:{name}): many readers or
 * one writer; the writer may take read levels; a reader that asks for the
 * write side waits like anyone else. A name's holds of each kind are apart:
 * an owner holding "x" as a lock and waiting for it as a write lock waits
 * like any other owner. A write acquire that waits registers the writer, so
 * that new readers let it in first; it leaves that place when it ends,
 * granted or not. Nested acquires, undo, renewal, the restart guard,
 * sync_replicas, Redlock over N nodes, clusters and Sentinel work as for a
 * lock; a read or write hold takes no fencing token (its DONE token is 0)
 * and is not watched by loss push (its loss is found by its next renewal). */
enum { RLC_KIND_LOCK = 0, RLC_KIND_READ = 1, RLC_KIND_WRITE = 2 };
/* RLC_KIND_FAIR is the fair lock (rlc_fairlock_*, Redisson's RFairLock
 * layout: the lock's hash and field, the queue redisson_lock_queue:{name},
 * the timeouts redisson_lock_timeout:{name}, each waiter's own channel
 * redisson_lock__channel:{name}:<uuid>:<owner>). Acquired with
 * rlc_engine_acquire_fair; released, forgotten and counted with the *_kind
 * calls. An engine of one node only (RLC_E_INVAL otherwise): a queue per node
 * keeps no order a quorum shares. A waiting acquire joins the queue (after
 * its first try, once it listens on its channel), keeps its place by trying
 * at least every half thread wait, and leaves the queue when it ends. */
enum { RLC_KIND_FAIR = 3 };
/* A fair lock's acquire: thread_wait_ms (> 0; Redisson's threadWaitTime,
 * 5000 by default) is how long a queued waiter that stopped trying keeps its
 * place (twice it, as Redisson counts); the rest as rlc_engine_acquire. */
RLC_API int rlc_engine_acquire_fair(rlc_engine *e, const char *name, size_t name_len,
                                    uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                                    int64_t thread_wait_ms, int64_t now_ms, uint64_t *op);
/* rlc_engine_acquire / release / forget / hold_count / validity_ms for a
 * lock kind: RLC_E_INVAL (or 0) for a kind that is none of the above. */
RLC_API int rlc_engine_acquire_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                                    uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                                    int64_t now_ms, uint64_t *op);
RLC_API int rlc_engine_release_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                                    uint64_t owner, int64_t now_ms, uint64_t *op);
RLC_API int rlc_engine_forget_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                                   uint64_t owner, int64_t now_ms);
RLC_API int64_t rlc_engine_hold_count_kind(const rlc_engine *e, int kind, const char *name,
                                           size_t name_len, uint64_t owner);
RLC_API int64_t rlc_engine_validity_ms_kind(const rlc_engine *e, int kind, const char *name,
                                            size_t name_len, uint64_t owner, int64_t now_ms);
/* Since 1.2 (REDLOCKC_1.2). Semaphores: RLC_KIND_SEMAPHORE is Redisson's
 * RSemaphore (rlc_semaphore_*: the count of free permits at the name's key,
 * its channel redisson_sc:{name}); RLC_KIND_PSEMAPHORE its
 * RPermitExpirableSemaphore (rlc_psemaphore_*: the count and the zset
 * {name}:timeout, one member per permit taken, scored with its lease's end;
 * a permit whose lease ran out goes back to the count). An engine of one node
 * only (RLC_E_INVAL otherwise): a count is not a set of holders a quorum
 * can vote on. Nothing is owner-bound and nothing is renewed: a permit is
 * a number (plain) or named by its id (expirable). */
enum { RLC_KIND_SEMAPHORE = 4, RLC_KIND_PSEMAPHORE = 5 };
/* Takes permits (1 .. 65535) of a semaphore of either kind, waiting up to
 * wait_ms as rlc_engine_acquire waits (woken by the semaphore's messages);
 * lease_ms: an expirable permit's lease (> 0; 0 for the plain kind). A try
 * that was not certainly answered is undone by its record, whenever it
 * arrives. Its DONE event: RLC_OK with count the permits taken, token the
 * attempt (rlc_engine_permit_id names an expirable grant's permits with it)
 * and validity_ms the lease left (-1 for plain permits, which do not end);
 * RLC_NOT_ACQUIRED when too few were free for the whole wait. Cancelled
 * with rlc_engine_cancel. */
RLC_API int rlc_engine_acquire_permits(rlc_engine *e, int kind, const char *name,
                                       size_t name_len, uint64_t owner, int64_t permits,
                                       int64_t wait_ms, int64_t lease_ms, int64_t now_ms,
                                       uint64_t *op);
/* An expirable grant's permit id (32 lowercase hex digits and a NUL, so
 * size >= 33) from its DONE event's token and count: what
 * rlc_engine_release_permits and rlc_psemaphore_release take. */
RLC_API int rlc_engine_permit_id(const rlc_engine *e, uint64_t token, int64_t permits,
                                 char *buf, size_t size);
/* Gives permits back: plain, permits (1 .. 65535) of them (id NULL); expirable,
 * those named by id (permits unused). A plain release acts once however
 * often it is sent (it is sent again on a new connection until answered).
 * Its DONE event's count is the permits given back; an expirable id whose
 * lease ran out (or that went back already) ends RLC_E_LOST. */
RLC_API int rlc_engine_release_permits(rlc_engine *e, int kind, const char *name,
                                       size_t name_len, int64_t permits, const char *id,
                                       int64_t now_ms, uint64_t *op);
/* Sets the semaphore's count to permits (0 .. 2^62) if it has none yet: the
 * DONE event's count is 1 set, 0 it had one. */
RLC_API int rlc_engine_set_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
                                   int64_t permits, int64_t now_ms, uint64_t *op);
/* The permits free now (an expirable semaphore's ended leases given back
 * first): the DONE event's count. */
RLC_API int rlc_engine_available_permits(rlc_engine *e, int kind, const char *name,
                                         size_t name_len, int64_t now_ms, uint64_t *op);
/* Ends an acquire that is still running with RLC_E_CANCELED; whatever it
 * may have taken is undone. An op that already ended, or a release or
 * extend, is left alone: RLC_NOT_ACQUIRED says so (nothing to cancel). */
RLC_API int rlc_engine_cancel(rlc_engine *e, uint64_t op, int64_t now_ms);
/* The owner's hold count of name: 0 when not held, when lost, and when its
 * validity has run out by the latest time given to the engine (a fixed lease
 * that ended, a watchdog hold not renewed in time: its RLC_EV_LOST event
 * comes at the tick due then). A lost hold's levels are still the owner's
 * to release (each release answers RLC_E_LOST). "Held now" is
 * rlc_engine_validity_ms(..., now) > 0. */
RLC_API int64_t rlc_engine_hold_count(const rlc_engine *e, const char *name, size_t name_len,
                                      uint64_t owner);
/* How long the owner's hold of name is certainly still held, from now_ms
 * (renewals move it on): > 0, or 0 when it is not held, lost, or its
 * validity ended at or before now_ms. A hold whose validity ends is lost at
 * that moment, fixed lease or watchdog: the engine's deadline is due then,
 * and the tick gives one RLC_EV_LOST event (status RLC_E_LOST for a fixed
 * lease, whether or not its owner ever releases). */
RLC_API int64_t rlc_engine_validity_ms(const rlc_engine *e, const char *name, size_t name_len,
                                       uint64_t owner, int64_t now_ms);

enum { RLC_EV_DONE = 1, RLC_EV_LOST = 2 };

typedef struct rlc_engine_event {
    int type;            /* RLC_EV_DONE: an operation ended; RLC_EV_LOST: a hold was lost */
    int status;          /* DONE: as rlc_lock_acquire/release/extend; LOST: RLC_E_LOST or
                            the status that made renewals fail until the validity ended */
    uint64_t op;         /* DONE: the operation's id; LOST: 0 */
    uint64_t owner;
    const char *name;    /* the lock's name as given (no key_prefix) */
    size_t name_len;
    uint64_t token;      /* acquire RLC_OK: the hold's fencing token (fencing=1; else 0) */
    int64_t validity_ms; /* acquire/extend RLC_OK: how long the hold is certainly held,
                            counted from the now_ms of the call that ended it */
    int64_t count;       /* the owner's hold count after this */
    const char *message; /* why, for a failing status; "" otherwise */
    int64_t kind;        /* the lock kind of the operation or hold (RLC_KIND_*; since
                            1.2, 0 before: every event was RLC_KIND_LOCK's) */
    int64_t reserved[3];
} rlc_engine_event;

/* 1 and *ev, or 0 when there is none. ev's strings are valid until the next
 * call on e. */
RLC_API int rlc_engine_next_event(rlc_engine *e, rlc_engine_event *ev);

/* What the engine would log, for the driver's logger, with its level (the
 * blocking API's rlc_client_set_log gives the same lines): RLC_LOG_WARN a
 * node that refuses loss push (an ACL without +client or the invalidation
 * channel, Redis before 6; loss is then found at renewal there), once per
 * connection pair; RLC_LOG_INFO "reconnecting to <node>" (a command
 * connection made again, or tried again while its node is down) and
 * "<node> had lost the scripts (NOSCRIPT): loaded them again" (or, where
 * the node refuses SCRIPT LOAD, "...: sent as EVAL"). Lost holds are
 * events (RLC_EV_LOST), not lines. Takes the oldest line not yet taken:
 * its level into *level (if not NULL), its text into buf (NUL-terminated,
 * cut to fit size), and returns the text's full length, or 0 when there is
 * none; with buf NULL or size 0 it only says the level and length and the
 * line stays. At most 32 wait; past that the newest are dropped and the
 * last one taken says how many. A driver calls it after its other calls,
 * as it reads the events. */
RLC_API size_t rlc_engine_next_log(rlc_engine *e, int *level, char *buf, size_t size);

/* The engine's counters, as rlc_client_metrics gives a client's (the same
 * indices RLC_M_*, names and wait buckets, counted by the same rules):
 * acquires, busy, waits (an acquire that found the lock busy and slept,
 * with its time from the call to its end in the wait sum and buckets),
 * renewals, lost holds, reconnects of command connections, NOSCRIPT
 * answers. Writes up to n of them into out[0..n-1] and returns how many
 * there are, or RLC_E_INVAL for a NULL engine or out. No I/O. */
RLC_API int rlc_engine_metrics(const rlc_engine *e, uint64_t *out, int n);

/* Ends a blocking rlc_lock_acquire waiting on l in another thread (any owner)
 * with RLC_E_CANCELED, undoing whatever it may have taken. An acquire that
 * starts after this call is not affected. A sleeping waiter wakes at once; a
 * try on the wire ends first (bounded by the I/O timeout). No I/O, callable
 * from any thread (not from a signal handler: use a thread that waits for
 * the signal). For rlc_lock handles; the lock family's handles have their
 * own (below). RLC_OK (with or without a waiter to cancel), RLC_E_INVAL. */
RLC_API int rlc_lock_cancel(rlc_lock *l);

/* Since 1.2 (REDLOCKC_1.2). The same for the lock family's handles: each
 * ends the acquires waiting on its handle in other threads (read and write
 * acquires of a read-write lock alike) with RLC_E_CANCELED; a fair waiter
 * leaves the queue, nothing is kept. Any thread, no I/O; RLC_OK (with or
 * without a waiter to cancel), RLC_E_INVAL for NULL. An acquire that starts
 * after the call is not affected. */
RLC_API int rlc_rwlock_cancel(rlc_rwlock *l);
/* Since 1.2 (REDLOCKC_1.2). A read-write lock's lost holds, as
 * rlc_lock_on_lost_owner's (same thread, same rules): write is 1 for a
 * write hold, 0 for a read hold. fn NULL removes it. */
typedef void (*rlc_rwlock_lost_fn)(rlc_rwlock *l, int write, uint64_t owner, int reason,
                                   void *user);
RLC_API int rlc_rwlock_on_lost(rlc_rwlock *l, rlc_rwlock_lost_fn fn, void *user);
/* Since 1.2 (REDLOCKC_1.2). A fair lock's lost holds, as
 * rlc_lock_on_lost_owner's. fn NULL removes it. */
typedef void (*rlc_fairlock_lost_fn)(rlc_fairlock *l, uint64_t owner, int reason, void *user);
RLC_API int rlc_fairlock_on_lost(rlc_fairlock *l, rlc_fairlock_lost_fn fn, void *user);
RLC_API int rlc_fairlock_cancel(rlc_fairlock *l);
RLC_API int rlc_semaphore_cancel(rlc_semaphore *s);
RLC_API int rlc_psemaphore_cancel(rlc_psemaphore *s);
RLC_API int rlc_multilock_cancel(rlc_multilock *m);

#ifdef __cplusplus
}
#endif

#endif /* REDLOCKC_H */
