/*
 * lock_acquire.c - rlc_lock_acquire and rlc_lock_cancel: the engine's
 * acquire (c/src/engine/engine_acquire.c: tries, waiting, undo), run to its
 * end on the calling thread by the blocking driver (engine_driver.c).
 */
#include <string.h>

#include "clock.h"
#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "lock_common.h"
#include "metrics.h"

int rlc_lock_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&l->cancels, atomic_load(&l->cancels)};
    if ((rc = lock_check_lease(c, lease_ms, "lease")) != RLC_OK)
        goto out;
    uint64_t owner = lock_owner(l);
    int64_t start = rlc_now_ns();
    struct edrv_outcome o;
    rc = edrv_acquire_kind(c->drv, l->kind, l->name, l->name_len, owner, &cp, wait_ms,
                           lease_ms, l->thread_wait_ms, &o);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = rc == RLC_OK || rc == RLC_E_LOST ? hh_get(l, owner) : NULL;
    if (h && rc == RLC_OK)
        hh_grant(h, o.token);
    else if (h && h->count > 0)
        h->lost = RLC_E_LOST; /* the hold it nested in is gone; the caller is told */
    pthread_mutex_unlock(&c->mu);
    if (rc == RLC_OK && !h) {
        /* held, but not recorded: let it go rather than keep it unseen */
        struct edrv_outcome r;
        edrv_release_kind(c->drv, l->kind, l->name, l->name_len, owner, &r);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    } else if (rc == RLC_NOT_ACQUIRED && wait_ms != 0) {
        char name[80];
        rlc_fail(RLC_NOT_ACQUIRED, "%s '%s' is held by another owner; waited %lld ms",
                 lock_noun(l), lock_shown(l, name, sizeof name),
                 (long long)((rlc_now_ns() - start) / RLC_NS_PER_MS));
    } else if (rc == RLC_E_CANCELED) {
        char name[80];
        rlc_fail(RLC_E_CANCELED, "acquire of %s '%s' was cancelled (%s); nothing was kept",
                 lock_noun(l), lock_shown(l, name, sizeof name),
                 l->kind == RLC_KIND_LOCK   ? "rlc_lock_cancel"
                 : l->kind == RLC_KIND_FAIR ? "rlc_fairlock_cancel"
                                            : "rlc_rwlock_cancel");
    }
    metrics_flush_log(c);
out:
    client_leave(c);
    return rc;
}

/* Not through lock_enter(): a cancel acts for no owner, so it is fine on any
 * thread, an on_lost callback's included. */
int rlc_lock_cancel(rlc_lock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    atomic_fetch_add(&l->cancels, 1);
    rlc_client *c = l->client;
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were ended */
        edrv_cancel(c->drv, &l->cancels);
        client_leave(c);
    }
    return RLC_OK;
}
