/*
 * lock_release.c - giving a hold back or keeping it longer: rlc_lock_release,
 * rlc_lock_extend (the engine's, c/src/engine/engine_release.c, run by the
 * blocking driver), and rlc_lock_force_release (any owner's hold: the
 * engine's force-release round, then this handle's holds are forgotten).
 */
#include <stdio.h>
#include <string.h>

#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "lock_common.h"
#include "metrics.h"

int rlc_lock_release(rlc_lock *l)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    struct edrv_outcome o;
    rc = edrv_release_kind(c->drv, l->kind, l->name, l->name_len, owner, &o);
    /* Whatever the outcome, one level is gone from our side (the engine's
     * rule: a release that got no answer goes out again until one comes). */
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_for_release(c, l, owner);
    if (h && h->count > 0) {
        h->count--;
        if (rc == RLC_E_LOST && !h->lost)
            h->lost = RLC_E_LOST;
        if (h->count == 0)
            hh_drop_if_idle(h);
    }
    pthread_mutex_unlock(&c->mu);
    metrics_flush_log(c);
    client_leave(c);
    return rc;
}

int rlc_lock_extend(rlc_lock *l, int64_t lease_ms)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    if ((rc = lock_check_lease(c, lease_ms, "lease")) != RLC_OK)
        goto out;
    uint64_t owner = lock_owner(l);
    struct edrv_outcome o;
    rc = edrv_extend(c->drv, l->name, l->name_len, owner, lease_ms, &o);
    if (rc == RLC_E_LOST) {
        pthread_mutex_lock(&c->mu);
        struct handle_hold *h = hh_for_release(c, l, owner);
        if (h && h->count > 0)
            h->lost = RLC_E_LOST; /* the caller is told: no on_lost follows */
        pthread_mutex_unlock(&c->mu);
    }
    metrics_flush_log(c);
out:
    client_leave(c);
    return rc;
}

int rlc_lock_force_release(rlc_lock *l)
{
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    struct edrv_outcome o;
    rc = edrv_force_release(c->drv, l->name, l->name_len, lock_owner(l), &o);
    if (rc == RLC_OK) {
        /* The key is gone. This handle's holds are dropped quietly: not
         * renewed, reported or nested in. Another handle's holds of the name
         * (another owner's, of this client too) are not: their renewal finds
         * them gone, their on_lost hears of it and their release says
         * RLC_E_LOST, as a force release from another client would make. */
        pthread_mutex_lock(&c->mu);
        struct handle_hold *gone = hh_detach_all(c, l);
        pthread_mutex_unlock(&c->mu);
        hh_forget_detached(c, l, gone);
    }
    client_leave(c);
    return rc;
}
