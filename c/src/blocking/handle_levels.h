/*
 * handle_levels.h - the levels each owner took through one lock handle.
 *
 * The engine keeps the hold itself (by name and owner, over the whole
 * client: c/src/engine, run by engine_driver.c). A handle keeps which owners
 * took levels through it, so that its on_lost hears of their losses, its
 * fencing token and validity answer for its own holds, and a release
 * through another handle of the same name and owner gives up one of them.
 * Everything here runs under the client's mutex.
 */
#ifndef RLC_HANDLE_LEVELS_H
#define RLC_HANDLE_LEVELS_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

struct handle_hold {
    struct handle_hold *next;
    rlc_lock *lock;  /* the handle it belongs to */
    uint64_t owner;
    int64_t count;   /* levels taken through this handle and not given back */
    uint64_t token;  /* the fencing token of its first level */
    int lost;        /* 0, or why it was lost (its on_lost was told, or the caller) */
    bool forget;     /* hh_detach_all: the engine's hold is this record's alone */
};

struct handle_hold *hh_find(const rlc_lock *l, uint64_t owner);

/* l's record of owner, made if missing; NULL without memory. */
struct handle_hold *hh_get(rlc_lock *l, uint64_t owner);

/* The record a release by owner through l gives a level of: l's own if it
 * has levels, else one of another handle of the same name (a hold belongs
 * to its owner in the client, not to a handle); NULL if none. */
struct handle_hold *hh_for_release(rlc_client *c, rlc_lock *l, uint64_t owner);

/* A granted acquire through l: one more level (a lost record starts anew). */
void hh_grant(struct handle_hold *h, uint64_t token);

/* Forgets h once it holds nothing. */
void hh_drop_if_idle(struct handle_hold *h);

void hh_free_all(rlc_lock *l);

/* Takes every record of l away from it (rlc_lock_free, and
 * rlc_lock_force_release of its own holds: as the blocking API dropped a
 * handle's holds) and returns them, each marked `forget` when no other
 * handle of the name has levels of its owner: that hold in the engine is
 * this handle's alone, for hh_forget_detached to stop renewing. */
struct handle_hold *hh_detach_all(rlc_client *c, rlc_lock *l);

/* Outside the client's mutex, with the driver alive (a call entered, or the
 * client's reference with the driver not freed): forgets in the engine the
 * holds hh_detach_all marked, so that they are no longer renewed nor
 * reported lost and expire with their lease; frees the records. */
void hh_forget_detached(rlc_client *c, rlc_lock *l, struct handle_hold *list);

#endif
