/*
 * family.h - what the semaphores share on the older blocking stack: key
 * names, lease checks, the wait loop and its cancel (family.c). The
 * read-write and fair locks are lock handles of the engine's kinds
 * (rwlock.c, fairlock.c, lock_common.h's lock_new_kind).
 */
#ifndef RLC_FAMILY_H
#define RLC_FAMILY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"
#include "fanout.h"
#include "keys.h"
#include "state.h"

#define FAM_MAX_NAME 65536

/* Checks a name, then key_prefix + name into a new string. */
int fam_key(rlc_client *c, const char *name, char **key, size_t *len);

/* Lease checks as rlc_lock_acquire's. */
int fam_check_lease(const rlc_client *c, int64_t lease_ms);

/* The tombstone time of an undo (see undo_attempt in lock_acquire.c). */
int64_t fam_tomb_ms(const rlc_client *c, int64_t lease);

/* The outcome of one try over all nodes. */
struct fam_try {
    int rc;                 /* RLC_OK, RLC_NOT_ACQUIRED, or a failure */
    int64_t sleep_ms;       /* busy: when to look again (-1 unknown) */
    bool split;             /* votes but no quorum: retry after jitter */
    int64_t count;          /* granted: the owner's count on the first granting node */
    int64_t started_ns;
    bool undo[RLC_MAX_NODES];
    bool any_undo;
};

/* Waits on `channel` and calls try_fn until it is not busy, the deadline,
 * or a cancel counted at cp (then RLC_E_CANCELED). */
typedef int (*fam_try_fn)(void *arg, struct fam_try *t);
int fam_wait(rlc_client *c, const char *channel, size_t channel_len, int64_t deadline_ns,
             const struct cancel_point *cp, fam_try_fn fn, void *arg, struct fam_try *t);

/* A semaphore's cancel (rlc_semaphore_cancel ...): counts one at *cancels
 * and wakes the client's family waiters to look. Any thread. */
int fam_cancel(rlc_client *c, atomic_uint_fast64_t *cancels);

/* The family's scripts (scripts_family.h) are loaded by every command
 * connection of the older stack made from now on. */
void fscripts_init(void);

#endif
