/*
 * lock_query.c - what the servers say of a lock (is it locked, held, how
 * many levels, how long) and what the client knows of its own hold
 * (validity, fencing token), without changing anything.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "engine_driver.h"
#include "handle_levels.h"
#include "lock_common.h"

/* What a quorum of the servers says of the lock (RLC_Q_*), asked on the
 * engine's connections, behind whatever this client sent before. */
static int query(rlc_lock *l, int what, int64_t *answer)
{
    struct edrv_outcome o;
    return edrv_query(l->client->drv, l->name, l->name_len, lock_owner(l), what, answer, &o);
}

/* The owner's hold is valid now: the engine's validity at this moment, so a
 * hold whose lease ran out says so before its loss was handed on. */
static bool valid_now(rlc_lock *l)
{
    return edrv_validity_ms_kind(l->client->drv, l->kind, l->name, l->name_len, lock_owner(l)) >
           0;
}

/* A query whose answer is 0 or 1, as the caller's int. */
static int query_flag(rlc_lock *l, int what, int *out)
{
    int64_t v = 0;
    int rc = query(l, what, &v);
    if (rc == RLC_OK)
        *out = v != 0;
    return rc;
}

int rlc_lock_is_locked(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rc = query_flag(l, RLC_Q_LOCKED, out);
    client_leave(l->client);
    return rc;
}

int rlc_lock_is_held(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, lock_owner(l));
    bool lost = h && h->lost;
    pthread_mutex_unlock(&c->mu);
    if (lost || !valid_now(l))
        *out = 0;
    else
        rc = query_flag(l, RLC_Q_HELD, out);
    client_leave(c);
    return rc;
}

int rlc_lock_hold_count(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    if (!valid_now(l))
        *out = 0;
    else
        rc = query(l, RLC_Q_COUNT, out);
    client_leave(l->client);
    return rc;
}

int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rc = query(l, RLC_Q_TTL, out);
    client_leave(l->client);
    return rc;
}

int rlc_lock_validity_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, owner);
    bool held = h && !h->lost && h->count > 0;
    pthread_mutex_unlock(&c->mu);
    int64_t left =
        held ? edrv_validity_ms_kind(c->drv, l->kind, l->name, l->name_len, owner) : 0;
    *out = left > 0 ? left : 0;
    client_leave(c);
    return RLC_OK;
}

int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    char name[80];
    if (!c->opts.fencing) {
        rc = rlc_fail(RLC_E_INVAL, "lock '%s' has no fencing token: fencing is off (open the "
                                   "client with the option fencing=1)",
                      lock_shown(l, name, sizeof name));
        client_leave(c);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, lock_owner(l));
    int lost = h ? h->lost : 0;
    uint64_t token = h ? h->token : 0;
    int64_t count = h ? h->count : 0;
    pthread_mutex_unlock(&c->mu);
    if (!lost && count > 0 && !valid_now(l))
        lost = RLC_E_LOST; /* its validity ran out: the token may be stale */
    if (!h || (!lost && count == 0))
        rc = rlc_fail(RLC_E_NOT_OWNER, "lock '%s' is not held through this handle",
                      lock_shown(l, name, sizeof name));
    else if (lost)
        rc = rlc_fail(RLC_E_LOST, "lock '%s' was lost", lock_shown(l, name, sizeof name));
    else
        *out = token;
    client_leave(c);
    return rc;
}
