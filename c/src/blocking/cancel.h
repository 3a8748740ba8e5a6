/*
 * cancel.h - how a sleeping acquire learns that rlc_lock_cancel ended it.
 *
 * Each lock handle counts the cancels made on it. An acquire reads the count
 * when it starts and is cancelled once the count differs: so a cancel ends
 * every acquire running on the handle at that moment, whatever its thread or
 * owner, and never one that starts later: the driver checks the count
 * before the acquire goes into the engine, and the cancel call ends it in
 * the engine (edrv_cancel) after.
 */
#ifndef RLC_CANCEL_H
#define RLC_CANCEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct cancel_point {
    const atomic_uint_fast64_t *count; /* the handle's cancels so far */
    uint64_t seen;                     /* that count when the acquire started */
};

/* NULL: a wait nobody can cancel (the lock family's). */
static inline bool cancel_requested(const struct cancel_point *cp)
{
    return cp && atomic_load(cp->count) != cp->seen;
}

#endif
