/*
 * lock_calls.h - how a lock's scripts (scripts.h) are called and what they
 * answer: KEYS and ARGV in each script's order, and each reply read. The
 * one place the engine, the blocking API and the lock family take them from,
 * so the two drivers cannot drift apart on the wire. Pure: no I/O, no clock.
 *
 * Each call_* returns a new EVALSHA command (cmd_unref it), or NULL when
 * memory runs out.
 */
#ifndef RLC_LOCK_CALLS_H
#define RLC_LOCK_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

struct rlc_cmd;

/* A lock's derived names (keys.h), as the caller keeps them. */
struct lock_names {
    const char *key, *token_key, *attempts_key, *channel;
    size_t key_len, token_key_len, attempts_key_len, channel_len;
    bool classic; /* the classic format's scripts (scripts_classic.c): only the
                     key (and the channel) are named, never the other two */
    int kind;     /* RLC_KIND_LOCK, or the lock family's kind whose scripts
                     (scripts_family.h) are called: RLC_KIND_READ, RLC_KIND_WRITE */
    const char *queue; /* a read-write lock's waiting writers (a zset), else NULL */
    size_t queue_len;
    const char *aux;   /* a read lock's timeout keys' prefix "{name}", a fair lock's
                          timeouts zset, else NULL */
    size_t aux_len;
    int64_t thread_wait; /* a fair lock's thread wait, ms */
};

/* A waiting writer's place (the write lock's writers zset) lasts this long
 * past its last try: it tries again at least every third of it, so a live
 * writer keeps it, and one that died stops holding readers back within it. */
#define LOCK_WRITER_INTENT_MS 3000

/* Room for an attempt id: "<client uuid>:<attempt in hex>". */
#define LOCK_ATTEMPT_ID_MAX 96

/* Writes attempt's id into buf; returns its length. */
int lock_attempt_id(const char *uuid, uint64_t attempt, char *buf, size_t size);

/* One try at the lock for field, under attempt; outer_level: a level of the
 * hold it nests in, or 0 for a new hold; fencing: take a fencing token (the
 * counter key; without it the answer's token is 0 and no key outlives the
 * lock); name_holder: a busy answer names the holder (Redlock's split vote
 * needs it; one node does not); waiting: a try of an acquire that waits (a
 * busy write try then registers the writer as waiting for
 * LOCK_WRITER_INTENT_MS, so that new readers let it in first; a fair try
 * joins the queue, or keeps its place there, for twice the thread wait). */
struct rlc_cmd *call_acquire(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                             const char *field, size_t field_len, uint64_t attempt,
                             uint64_t outer_level, bool fencing, bool name_holder, bool waiting);

/* A waiter that gives up leaves its place (a write lock's writers zset, a
 * fair lock's queue), or NULL: the kind keeps none. */
struct rlc_cmd *call_withdraw(const struct lock_names *n, const char *field, size_t field_len);

/* Takes back attempt's level wherever it ran, and stops it where it has not
 * arrived yet, for tomb_ms (lock_undo_tomb_ms). */
struct rlc_cmd *call_undo(const struct lock_names *n, const char *uuid, uint64_t attempt,
                          const char *field, size_t field_len, int64_t tomb_ms);

/* How long an undo's tombstone must outlive any acquire still on its way: a
 * connection is answered or dropped within a call's deadline plus a connect,
 * and a minute more covers a server stalled longer. */
int64_t lock_undo_tomb_ms(int64_t lease_ms, int64_t call_timeout_ms, int64_t connect_timeout_ms);

/* Renews the life of the lock that level (the hold's oldest, 0: none known)
 * was taken in, to lease_ms. */
struct rlc_cmd *call_renew(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                           const char *field, size_t field_len, uint64_t level);

/* The same for m holds in one call (the blocking watchdog's batches, all in
 * one hash slot on a cluster): hold j is names[j], fields[j], levels[j]. */
struct rlc_cmd *call_renew_many(int m, const struct lock_names *names, const char *uuid,
                                int64_t lease_ms, const char *const *fields,
                                const size_t *field_lens, const uint64_t *levels);

/* Loss push: is each of m holds still ours, in the life its level was
 * taken in (the renew script's test, writing nothing)? An EVAL, not an
 * EVALSHA: it is never re-sent, so its answer is never out of order. Its
 * answer reads as the renew script's (answer_renew). */
struct rlc_cmd *call_verify_many(int m, const struct lock_names *names, const char *uuid,
                                 const char *const *fields, const size_t *field_lens,
                                 const uint64_t *levels);

/* EXISTS of m lock keys: on a tracking connection it registers them, so
 * their next change is pushed. */
struct rlc_cmd *call_exists_many(int m, const struct lock_names *names);

/* Gives up level (0: none named); upto: 0, or for the client's last level
 * the newest attempt made so far, so no level of an earlier attempt is left
 * behind; extra: more levels to give up at once (a lost hold's remains). */
struct rlc_cmd *call_release(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                             const char *field, size_t field_len, uint64_t level, uint64_t upto,
                             const uint64_t *extra, int64_t n_extra);

/* A multi-lock's try (script_multi_acquire): every one of m names, with
 * one attempt id, or none; outer[j]: a level of the hold name j nests in
 * (0: a new hold), or outer NULL (no name nests). Its answer reads as the
 * acquire script's (answer_acquire: count 1 granted, 0 busy with x the
 * pttl, -1 undone), with answer_multi_name's 1-based index: the busy name,
 * or on a grant the first whose nested-in level is gone (0: none). */
struct rlc_cmd *call_multi_acquire(int m, const struct lock_names *names, const char *uuid,
                                   int64_t lease_ms, const char *field, size_t field_len,
                                   uint64_t attempt, const uint64_t *outer, bool fencing);

/* Raises the token counter to at least token (fencing, over N nodes). */
struct rlc_cmd *call_token_floor(const struct lock_names *n, uint64_t token);

/* ---- the answers ------------------------------------------------------------ */

/* The acquire script's answer. count >= 1 held (x: the token; inner: the
 * nested-in level is in this life), 0 busy (x: the holder's pttl, -1 no
 * expiry; holder: its field, "" unknown, pointing into the reply; a busy
 * answer without the holder is the pttl alone, an integer), -1 the
 * attempt was undone before it arrived. */
struct acquire_answer {
    int64_t count, x;
    bool inner;
    const char *holder;
    size_t holder_len;
};

/* Reads r, the answer of a lock of this kind, into a; false when it is not
 * an acquire script's answer. The family's answers read as the lock's: a
 * grant is in the life of any level it nests in (inner), and a nested try
 * whose outer level is gone (A7) reads as a grant that is not (count 1,
 * inner false: the quorum's verdict is then "outer lost"), though it took
 * nothing. */
bool answer_acquire(const redisReply *r, int kind, struct acquire_answer *a);

/* The release script's answer as the lock's (scripts.h): *n -1 not the
 * owner, 0 the owner's last level went, n > 0 levels left; *freed: the lock
 * was freed and its message published (a read level's last release frees
 * the lock only when no other reader is left); false when it is none. */
bool answer_release(const redisReply *r, int64_t *n, bool *freed);

/* The name (1-based) a multi-lock try's answer names, or 0. */
int answer_multi_name(const redisReply *r);

/* The renew script's answer for the j-th hold it renewed (0 for a single
 * one; the family's renewals answer one integer): 1 renewed, 0 not ours,
 * -1 not a renew answer. */
int answer_renew(const redisReply *r, size_t j);

#endif
