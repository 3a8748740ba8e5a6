/*
 * scripts.h - the Lua scripts that do every lock change atomically on a node.
 */
#ifndef RLC_SCRIPTS_H
#define RLC_SCRIPTS_H

#include <stddef.h>

struct script {
    const char *name;
    const char *source;
    char sha[41]; /* filled once by scripts_init() */
};

/* KEYS: lock, token counter. ARGV: lease ms, owner field, "1" if fresh.
 * -> {count, token, pttl before} when held (count >= 1; pttl before is -2
 *    for a new hold), {0, pttl} when busy. */
extern struct script script_acquire;
/* KEYS: lock, channel. ARGV: lease ms, owner field.
 * -> -1 not the owner, 0 freed (deleted + published), n > 0 still held. */
extern struct script script_release;
/* KEYS: lock 1..n. ARGV: lease ms, field 1..n. -> {1 renewed | 0 gone, ...} */
extern struct script script_renew;
/* KEYS: lock, channel. -> 1 deleted (and published), 0 nothing there. */
extern struct script script_force_release;

/* KEYS: token counter. ARGV: floor. Raises the counter to the floor. */
extern struct script script_token_floor;

/* Computes the SHA-1 names. Idempotent and thread-safe. */
void scripts_init(void);

#endif
