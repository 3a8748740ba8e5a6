/*
 * scripts.h - the Lua scripts that do every lock change atomically on a node.
 */
#ifndef RLC_SCRIPTS_H
#define RLC_SCRIPTS_H

#include <stdbool.h>
#include <stddef.h>

struct script {
    const char *name;
    const char *source;
    char sha[41]; /* filled once by scripts_init() */
    const struct script *sharded; /* its SPUBLISH twin (script_make_sharded), or NULL */
};

/* KEYS: lock, attempts, and with fencing the token counter (without it no
 * token is taken: token 0). ARGV: lease ms, owner field, attempt id, the id
 * of one level of the hold it nests in ("" for a new hold), and "1" to have
 * a busy answer name the holder (else {0, pttl}).
 * -> {count, token, pttl before, inner} when held (count >= 1; pttl before
 *    is -2 for a new hold; inner 1 if the named level is in this life),
 *    {0, pttl, holder field} when busy (without ARGV[5]: pttl alone, an
 *    integer), {-1, 0} when the attempt was undone
 *    before it arrived (it did nothing). */
extern struct script script_acquire;
/* KEYS: lock, channel, attempts. ARGV: lease ms, owner field, attempt id of
 * the level, "1" if it is the client's last level (all levels go).
 * -> -1 not the owner (in this life of the lock), 0 freed (deleted and
 *    published), -2 freed but PUBLISH was refused, n > 0 still held. */
extern struct script script_release;
/* KEYS: lock, attempts. ARGV: attempt id, owner field, tombstone ms.
 * Takes back the attempt's level if it ran, else makes it a no-op for when it
 * arrives. -> 1 taken back, 0 nothing to take back. Publishes nothing. */
extern struct script script_undo;
/* KEYS: lock 1..m, attempts 1..m. ARGV: lease ms, field 1..m, attempt id
 * 1..m. -> {1 renewed | 0 gone, ...} */
extern struct script script_renew;
/* KEYS: lock 1..m, attempts 1..m. ARGV: field 1..m, attempt id 1..m. The
 * renew script's test alone, writing nothing. -> {1 ours | 0 gone, ...} */
extern struct script script_verify;
/* KEYS: lock, channel. -> 1 deleted (and published), 0 nothing there. */
extern struct script script_force_release;

/* A fenced write (rlc_fenced_set). KEYS: the key, its fence. ARGV: value,
 * token (decimal, no leading zeros). -> {1, fence before} written, {0,
 * fence} refused: a larger token is stored. Tokens are compared as decimal
 * strings (length, then bytes), so every uint64 compares exactly; Lua's
 * numbers are doubles. A fence that is not a number fails the script
 * before it writes anything. */
extern struct script script_fenced_set;

/* A multi-lock's try. KEYS: m locks, m attempts, with fencing m token
 * counters. ARGV: lease ms, owner field, attempt id, "1" with fencing (the
 * counters are raised; else not named), then per name the id of a level of the
 * hold it nests in ("" or absent: a new hold). -> {1, 0, gone} every name
 * granted (gone: 0, or the first name whose nested-in level is not in this
 * life), {0, pttl, i} name i (1-based) busy, {-1, 0} the attempt was undone
 * before it arrived; nothing written unless every name was granted. */
extern struct script script_multi_acquire;

/* KEYS: token counter. ARGV: floor. Raises the counter to the floor. */
extern struct script script_token_floor;

/* The classic format's (scripts_classic.c: the layout is there), each
 * answering as its twin above. */
extern struct script script_classic_acquire, script_classic_release, script_classic_undo,
    script_classic_renew, script_classic_verify, script_classic_multi_acquire;

/* On a cluster with sharded pub/sub (cluster.h): the scripts that publish,
 * with SPUBLISH in place of PUBLISH (Redisson passes its publish command to
 * its scripts for the same reason). The standalone scripts stay as they
 * are, byte for byte. NULL for a script that publishes nothing. */
const struct script *script_sharded_twin(const struct script *s);

/* Makes twin s's SPUBLISH twin, its source written into buf (static
 * storage of size bytes), and links it from s, if s publishes; once, before
 * any thread can ask for it (the lock family's scripts make theirs at
 * their own init). Returns buf's bytes used (0: none, or they did not fit). */
size_t script_make_sharded(struct script *s, struct script *twin, char *buf, size_t size);

/* The scripts the engine may call for locks of one format (classic: the
 * classic format's) (with twins: their SPUBLISH twins too, for a cluster's
 * masters), written to out (room for SCRIPTS_ENGINE_MAX); returns how
 * many. What a command connection loads with SCRIPT LOAD before its first
 * call (engine_conn.c). */
#define SCRIPTS_ENGINE_MAX 48
size_t scripts_engine(const struct script **out, bool twins, bool classic);

/* Computes the SHA-1 names, the lock family's too (scripts_family.h).
 * Idempotent and thread-safe. */
void scripts_init(void);

#endif
