/*
 * family.h - what the lock family's modules share: derived key names, the
 * per-owner holds of a family handle, the registry the client's background
 * thread renews them from, and the common wait loop.
 *
 * A family handle keeps its own holds (owner, levels with their attempt
 * ids, lease, validity), guarded by one family-wide mutex that is never held
 * across network I/O. Watchdog holds are renewed by family_watchdog_run,
 * which the client's background thread calls after its own round (through
 * c->family_renew, set by fam_register).
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

struct fam_hold {
    struct fam_hold *next;
    uint64_t owner;
    uint64_t id;              /* unique in the process: a renewal finds its hold */
    int64_t count;
    uint64_t *attempts;       /* the attempt of each level, oldest first */
    int64_t n_attempts, cap;
    int64_t lease_ms;
    bool watchdog;
    int lost;                 /* 0, or RLC_E_LOST once found gone */
    int pending;              /* acquires in flight */
    int64_t valid_until_ns;
    int64_t next_renew_ns;
};

struct fam_obj;

/* How the registry renews one hold of an object: sends the renewal and
 * returns 1 renewed on a quorum, 0 gone on enough nodes that no quorum can
 * have it, -1 no verdict. Runs without the family mutex. */
typedef int (*fam_renew_fn)(struct fam_obj *o, int side, uint64_t owner, uint64_t level);

#define FAM_SIDES 2

struct fam_obj {
    struct fam_obj *reg_next, *reg_prev;
    rlc_client *client;
    uint64_t owner;               /* 0: the calling thread */
    fam_renew_fn renew;
    struct fam_hold *holds[FAM_SIDES];
    int renewing;                 /* renewals in flight (free waits for 0) */
    atomic_uint_fast64_t cancels; /* rlc_rwlock_cancel / rlc_fairlock_cancel calls (cancel.h) */
};

extern pthread_mutex_t fam_mu;

/* Thread owner or the handle's explicit one. */
uint64_t fam_owner(const struct fam_obj *o);


/* Checks a name, then key_prefix + name into a new string. */
int fam_key(rlc_client *c, const char *name, char **key, size_t *len);

/* Registers / unregisters an object with the renewal registry (unregister
 * waits for a renewal in flight). Unregister frees every hold. */
void fam_register(struct fam_obj *o, rlc_client *c, uint64_t owner, fam_renew_fn renew);
void fam_unregister(struct fam_obj *o);

/* Under fam_mu. */
struct fam_hold *fam_hold_find(struct fam_obj *o, int side, uint64_t owner);
struct fam_hold *fam_hold_get(struct fam_obj *o, int side, uint64_t owner);
void fam_hold_drop_if_idle(struct fam_obj *o, int side, struct fam_hold *h);
bool fam_hold_push(struct fam_hold *h, uint64_t attempt);
/* Records a granted level; returns whether the background thread must wake. */
bool fam_grant(rlc_client *c, struct fam_hold *h, bool watchdog, int64_t lease,
               int64_t started_ns);

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

/* Reads an acquire reply of the family's shape (scripts_family.h) from every
 * node of f into t; lease for the validity check. */
void fam_read_acquire(rlc_client *c, const struct fanout *f, int64_t lease, const char *key,
                      struct fam_try *t);

/* Waits on `channel` and calls try_fn until it is not busy, the deadline,
 * or a cancel counted at cp (then RLC_E_CANCELED, its message naming what
 * (e.g. "write lock 'x'") and how (the cancel call)). */
typedef int (*fam_try_fn)(void *arg, struct fam_try *t);
int fam_wait(rlc_client *c, const char *channel, size_t channel_len, int64_t deadline_ns,
             const struct cancel_point *cp, fam_try_fn fn, void *arg, struct fam_try *t);

/* A family handle's cancel (rlc_rwlock_cancel ...): counts one at *cancels
 * and wakes the client's family waiters to look. Any thread. */
int fam_cancel(rlc_client *c, atomic_uint_fast64_t *cancels);

/* Release reply: -1, or {n, freed}. Returns 1 parsed (fills), 0 not. */
int fam_release_reply(const redisReply *r, int64_t *n, int *freed);

/* The family's scripts (scripts_family.h) are loaded by every command
 * connection of the older stack made from now on. */
void fscripts_init(void);

#endif
