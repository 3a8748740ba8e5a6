/*
 * permit_calls.h - a semaphore's script calls and answers (scripts_family.c
 * has their layout), as lock_calls.h is a lock's. Pure: no I/O, no clock.
 *
 * A semaphore's names (struct lock_names, made by the engine): key is the
 * count, channel redisson_sc:{name}, attempts_key the prefix of a try's
 * record "redlockc_attempt:{name}:" (the attempt id follows), aux the
 * expirable kind's zset "{name}:timeout".
 *
 * Each call_* returns a new command (cmd_unref it), or NULL when memory
 * runs out.
 */
#ifndef RLC_PERMIT_CALLS_H
#define RLC_PERMIT_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "lock_calls.h"

/* Permits per call: an expirable permit id keeps the count in two bytes. */
#define PERMITS_MAX 65535

/* Length of a permit id in hex (16 bytes: 14 name the grant, 2 its count). */
#define PERMIT_ID_HEX 32

/* One try for permits under attempt; lease_ms: an expirable permit's. */
struct rlc_cmd *call_permits_acquire(const struct lock_names *n, const char *uuid,
                                     uint64_t attempt, int64_t permits, int64_t lease_ms,
                                     int64_t tomb_ms);

/* Gives back what attempt's try took, wherever it ran; where it has not
 * arrived yet its tombstone (tomb_ms) stops it. */
struct rlc_cmd *call_permits_undo(const struct lock_names *n, const char *uuid,
                                  uint64_t attempt, int64_t permits, int64_t tomb_ms);

/* A plain grant the client heard: no undo will name its record, so it goes. */
struct rlc_cmd *call_permits_forget(const struct lock_names *n, const char *uuid,
                                    uint64_t attempt);

/* A plain release of permits, named by its own attempt's record: sent any
 * number of times, it acts once. */
struct rlc_cmd *call_permits_release(const struct lock_names *n, const char *uuid,
                                     uint64_t attempt, int64_t permits, int64_t tomb_ms);

/* An expirable release of the permits id names (permit_id_parse). */
struct rlc_cmd *call_permits_give_back(const struct lock_names *n, const uint8_t id[16]);

/* SETNX of the count; the free permits (the expirable kind's ended leases
 * given back first). */
struct rlc_cmd *call_permits_set(const struct lock_names *n, int64_t permits);
struct rlc_cmd *call_permits_available(const struct lock_names *n);

/* The acquire's answer as a lock's (lock_calls.h): count 1 granted, 0 too
 * few free (x: ms until the first expirable lease ends, -1 none), -1 undone
 * before it arrived. */
bool answer_permits(const redisReply *r, struct acquire_answer *a);

/* The id of attempt's permits: 14 bytes of SHA-1("<uuid>:<attempt>") (one
 * per grant, and no two clients share a uuid), then the count. Writes 32
 * hex digits and a NUL; returns false when size is under 33. */
bool permit_id(const char *uuid, uint64_t attempt, int64_t permits, char *buf, size_t size);

/* Reads a permit id back into its 16 bytes; false when it is not 32
 * lowercase hex digits naming 1 .. PERMITS_MAX permits. */
bool permit_id_parse(const char *id, uint8_t raw[16]);

#endif
