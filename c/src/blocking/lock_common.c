/*
 * lock_common.c - the helpers every file of the lock API uses (lock_common.h).
 */
#include <stdlib.h>

#include "callbacks.h"
#include "error.h"
#include "lock_common.h"
#include "quorum.h"

#define MAX_LEASE_MS (366LL * 24 * 3600 * 1000)

/* Enters a call on l. On an on_lost callback's thread an owner-0 handle
 * other than the callback's own is refused: it would act for the library's
 * callback thread, a hold no application thread could release. */
int lock_enter(rlc_lock *l)
{
    uint64_t owner;
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    if (l->owner == 0 && client_callback_owner(l, &owner) < 0)
        return rlc_fail(RLC_E_INVAL,
                        "a handle with owner 0 acts for the calling thread, and this is the "
                        "client's on_lost callback thread: use a handle with an explicit "
                        "owner here (or the handle the callback was given)");
    return client_enter(l->client);
}

/* The owner a call acts for: the handle's, else the calling thread; in an
 * on_lost callback, its own owner-0 handle acts for the lost hold's owner. */
uint64_t lock_owner(const rlc_lock *l)
{
    uint64_t owner;
    if (l->owner)
        return l->owner;
    if (client_callback_owner(l, &owner) > 0)
        return owner;
    return owner_thread_number();
}

const char *lock_shown(const rlc_lock *l, char *buf, size_t size)
{
    return rlc_clip(l->key, buf, size);
}

const char *lock_noun(const rlc_lock *l)
{
    switch (l->kind) {
    case RLC_KIND_READ:
        return "read lock";
    case RLC_KIND_WRITE:
        return "write lock";
    case RLC_KIND_FAIR:
        return "fair lock";
    default:
        return "lock";
    }
}

int lock_check_lease(const rlc_client *c, int64_t lease_ms, const char *what)
{
    if (lease_ms <= 0)
        return RLC_OK;
    if (lease_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "%s of %lld ms is longer than 366 days", what,
                        (long long)lease_ms);
    /* validity = lease - elapsed (at least 1 ms) - drift must be able to
     * be positive, or no acquire could ever succeed. */
    if (lease_ms <= quorum_drift_ms(lease_ms, c->opts.drift_factor) + 1)
        return rlc_fail(RLC_E_INVAL,
                        "%s of %lld ms is shorter than the clock drift allowance (%lld ms) "
                        "plus a round trip (1 ms)",
                        what, (long long)lease_ms,
                        (long long)quorum_drift_ms(lease_ms, c->opts.drift_factor));
    return RLC_OK;
}

