/*
 * hold.h - the client's own record of a lock an owner holds through a handle.
 *
 * The server is the truth about who holds a lock; a hold records what this
 * process needs besides: the lease to renew, the fencing token, until when
 * the hold is certainly valid, and whether the watchdog found it lost.
 * Holds are also indexed by (key, owner) over the whole client, so that an
 * acquire can tell whether the client already holds levels of that lock
 * through any handle (see hold_levels and the acquire script).
 * All functions here run under the client's mutex.
 */
#ifndef RLC_HOLD_H
#define RLC_HOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

struct hold {
    struct hold *next;               /* in lock->holds */
    struct hold *wd_prev, *wd_next;  /* in client->renewing, when watchdog */
    struct hold *grave_next;
    rlc_lock *lock;
    uint64_t owner;
    uint64_t id;                     /* unique per client: a round's results find their hold */
    int64_t count;                   /* levels taken through this handle */
    uint64_t *attempts;              /* the attempt that took each level, oldest first */
    int64_t n_attempts;              /* <= count while a release is in flight */
    int64_t attempts_cap;
    uint64_t token;
    int64_t lease_ms;
    bool watchdog;
    bool dead;                       /* dropped; memory kept until the round ends */
    int64_t valid_until_ns;
    int64_t next_renew_ns;
    int lost;                        /* 0, or why the watchdog gave it up */
    bool notified;                   /* on_lost has run for it */
    int pending;                     /* acquires of this owner in flight through this handle */
    int releasing;                   /* releases in flight: the watchdog leaves it alone */
    struct hold *index_next;         /* in client->hold_index, by (key, owner) */
    bool track_dirty;                /* its key changed: verify it (tracking.c) */
    uint64_t track_level;            /* attempts[0] when last verified (tracking.c) */
    int64_t track_after_ns;          /* its first verify waits until then (HOLD_TRACK_GRACE_MS) */
    int64_t late_lease_ms;           /* the shortest lease of its requests that went
                                        unanswered (they may still run), 0 none */
};

/* A new watchdog hold is registered for loss push (tracking.c) this long
 * after it is taken, not at once: most holds are let go sooner, and then
 * cost no tracking at all (no verify, no invalidation, no thread woken:
 * with it at once, one lock cycle cost 25 us more CPU). The verify that
 * registers it reads the hold's state, so a loss in those first ms is
 * pushed when they end: well within the promise of 500 ms. */
#define HOLD_TRACK_GRACE_MS 50

/* What the whole client knows of one owner's hold on one key, over all its
 * handles: the levels it took and the acquires still in flight. */
struct levels {
    int64_t count;
    int pending;
};

struct levels hold_levels(const rlc_client *c, const rlc_lock *l, uint64_t owner);

struct hold *hold_find(rlc_lock *l, uint64_t owner);

/* The hold through which a release by `owner` via l gives up a level: l's own
 * if it has levels, else one of another handle on the same key (a hold
 * belongs to its owner in the client, not to a handle); NULL if none. */
struct hold *hold_find_levels(rlc_client *c, rlc_lock *l, uint64_t owner);

/* The live hold with this id among owner's holds of l's key, or NULL. */
struct hold *hold_by_id(rlc_client *c, const rlc_lock *l, uint64_t owner, uint64_t id);

/* Records the attempt that took a new level; false without memory. */
bool hold_push_attempt(struct hold *h, uint64_t attempt);

/* Takes the newest level's attempt off (0 if none). */
uint64_t hold_pop_attempt(struct hold *h);

/* A new hold with count 0, or NULL without memory. */
struct hold *hold_create(rlc_lock *l, uint64_t owner);

/* A request of h that sets its TTL to lease got no answer from some node:
 * it may still run there (a stalled server reads it when it resumes). */
void hold_note_late(struct hold *h, int64_t lease);
/* The lease a claim of h's validity may count from its round's start: at
 * most the lease of a request of h that may still run, so that no validity
 * is claimed past what that request, run late, would leave (docs/DESIGN.md,
 * E8; kept for the hold's life: the blocking driver does not follow each
 * request as the engine does). */
int64_t hold_claim_lease(const struct hold *h, int64_t lease);
/* Puts h on / takes it off the watchdog's list. */
void hold_set_watchdog(rlc_client *c, struct hold *h, bool on);

/* Forgets h. While a watchdog round is between its phases the memory is kept
 * (the round holds pointers to it) and freed by hold_free_graveyard. */
void hold_drop(rlc_client *c, struct hold *h);

void hold_drop_all(rlc_client *c, rlc_lock *l);

void hold_free_graveyard(rlc_client *c);

#endif
