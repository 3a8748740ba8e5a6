/*
 * lock_common.h - what the lock API's files share: entering a call on a
 * handle, the owner it acts for, lease checks.
 *
 * The lock API is split by concern: lock_acquire.c (acquire, wait, cancel),
 * lock_release.c (release, extend, force release), lock_query.c (what the
 * servers and the client know of a lock), lock_handle.c (making, freeing and
 * configuring a handle). Every call runs in the engine (engine_driver.c):
 * acquire, release, extend, and the queries, which a quorum of the nodes
 * answers.
 */
#ifndef RLC_LOCK_COMMON_H
#define RLC_LOCK_COMMON_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"

/* Enters a call on l: RLC_OK (pair it with client_leave(l->client)), or a
 * status with the thread's message set. */
int lock_enter(rlc_lock *l);

/* The owner a call on l acts for. */
uint64_t lock_owner(const rlc_lock *l);

/* l's key, clipped for a message. */
const char *lock_shown(const rlc_lock *l, char *buf, size_t size);

/* What l is called in a message: "lock", or "write lock". */
const char *lock_noun(const rlc_lock *l);

/* rlc_lock_new's, for a handle of a lock kind (RLC_KIND_*): an rlc_rwlock's
 * write side is a handle of RLC_KIND_WRITE, acquired, released, cancelled
 * and counted through the rlc_lock_* calls. */
int lock_new_kind(rlc_client *c, const char *name, uint64_t owner, int kind, rlc_lock **out);

/* RLC_OK for lease_ms <= 0 (the watchdog's) or a usable fixed lease, else
 * RLC_E_INVAL with a message naming `what`. */
int lock_check_lease(const rlc_client *c, int64_t lease_ms, const char *what);

#endif
