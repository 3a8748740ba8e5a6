/*
 * scripts_family.h - the scripts of the lock family (read-write lock, fair lock,
 * semaphores, multi-name lock). Our own code; only the data they leave
 * behind matches Redisson's layout (docs/FAMILY.md).
 *
 * Every acquire names an attempt id and follows the attempt protocol of
 * docs/design/attempts.md: it does nothing if its id already has a record (an undo
 * ran first), it records "<pttl before>|<epoch>|<field>" when it grants a
 * level, and the undo, release and renewal of a level act only in the life
 * (epoch) the level was taken in.
 *
 * Acquire replies: {n >= 1, 0, before} granted (n = the owner's count),
 * {0, sleep hint ms, holder} busy, {-1, 0} undone before it arrived, and
 * for a nested try {-2, 0}: the level it nests in ("outer", an attempt id)
 * is not in the current life, so the hold is lost and nothing was taken
 * (A7 of docs/design/attempts.md). No script sets a hash's TTL below what a holder
 * was promised: acquires, renewals and inner releases only raise it, undos
 * set none, and a read release's recompute keeps every level's time.
 * Release replies: -1 not the owner (in this life), else {n left, freed}.
 */
#ifndef RLC_SCRIPTS_FAMILY_H
#define RLC_SCRIPTS_FAMILY_H

#include "scripts.h"

/* KEYS: hash, timeout prefix "{name}:<field>:rwlock_timeout", attempts,
 * writers zset. ARGV: lease, field, write field, attempt id, outer. */
extern struct script fscript_read_acquire;
/* KEYS: hash, attempts, writers zset. ARGV: lease, write field, attempt id,
 * intent ms (0: do not register as a waiting writer), outer. */
extern struct script fscript_write_acquire;
/* KEYS: hash, channel, timeout prefix, attempts, "{name}". ARGV: lease,
 * field, attempt id, then the attempt ids of a lost hold's other levels.
 * Publishes 0 when it frees the hash (Redisson's read unlock message). */
extern struct script fscript_read_release;
/* KEYS: hash, channel, attempts. ARGV: lease, write field, attempt id, then
 * the attempt ids of a lost hold's other levels, given up with it.
 * Publishes 1 (Redisson's READ_UNLOCK_MESSAGE) when the write hold ends. */
extern struct script fscript_write_release;
/* KEYS: hash, attempts, and for a read level its timeout prefix (a write
 * level names no third key: on a cluster every key named must be in the
 * lock's slot). ARGV: attempt id, field, tombstone ms. -> 1 taken back, 0
 * nothing. */
extern struct script fscript_rw_undo;
/* KEYS: hash, attempts, and for a read level its timeout prefix (none for
 * a write level). ARGV: lease, field, attempt id of one level. -> 1
 * renewed, 0 gone. */
extern struct script fscript_rw_renew;
/* KEYS: writers zset. ARGV: write field. Withdraws a waiting writer. */
extern struct script fscript_write_withdraw;

/* KEYS: hash, queue, timeouts zset, attempts. ARGV: lease, field, attempt
 * id, thread wait ms, "1" to join (or stay in) the queue, outer. */
extern struct script fscript_fair_acquire;
/* KEYS: hash, queue, timeouts zset, attempts, channel prefix. ARGV: lease,
 * field, attempt id, then the attempt ids of a lost hold's other levels (as
 * the write release: a level whose attempt has not run gets a tombstone).
 * Publishes 0 to the next waiter's own channel. */
extern struct script fscript_fair_release;
/* KEYS: hash, queue, timeouts zset, channel prefix. ARGV: field. A waiter
 * that gives up leaves the queue (and wakes the next one if it is free). */
extern struct script fscript_fair_withdraw;
/* KEYS: hash, attempts. ARGV: attempt id, field, tombstone ms. */
extern struct script fscript_fair_undo;
/* KEYS: hash, attempts. ARGV: lease, field, attempt id of one level. */
extern struct script fscript_fair_renew;

/* Permit-expirable semaphore. KEYS: permits, timeouts zset, channel,
 * tombstone key. ARGV: n, lease ms, base id (14 bytes). -> {1, 0} taken,
 * {0, sleep hint} busy, {-1, 0} undone before it arrived. */
extern struct script fscript_psem_acquire;
/* KEYS: permits, timeouts zset, channel, tombstone key. ARGV: n, base id,
 * tombstone ms, "1" for an undo (writes a tombstone when nothing is there).
 * -> number of permits given back. */
extern struct script fscript_psem_release;
/* KEYS: timeouts zset. ARGV: n, base id, lease ms. -> 1 renewed, 0 gone. */
extern struct script fscript_psem_renew;
/* KEYS: permits, timeouts zset, channel. -> permits available now. */
extern struct script fscript_psem_available;

/* Plain semaphore. KEYS: permits, record key. ARGV: n, tombstone ms
 * (unused: the record "r<n>" of a grant has no expiry, and the client
 * deletes it once it has heard the grant). -> {1, 0} taken, {0, -1} busy,
 * {-1, 0} undone before it arrived. */
extern struct script fscript_sem_acquire;
/* KEYS: permits, channel, record key. ARGV: n, tombstone ms, mode:
 * "r" release (once per record), "u" undo of an acquire (gives back the n
 * its record names, or writes the tombstone). -> permits given. */
extern struct script fscript_sem_release;

/* Every script above: *list points at static storage; returns how many.
 * Their SHA-1 names and SPUBLISH twins are made by scripts_init(). */
size_t scripts_family(struct script *const **list);

#endif
