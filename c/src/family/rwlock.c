/*
 * rwlock.c - the read-write lock (rlc_rwlock_*): two lock handles of the
 * engine's read-write kinds, its read side (RLC_KIND_READ) and its write
 * side (RLC_KIND_WRITE), each acquired, released, cancelled and counted as
 * rlc_lock is (lock_acquire.c, lock_release.c). What makes them one lock
 * is on the servers, in Redisson's RReadWriteLock layout: both sides' scripts
 * work on one hash (engine/scripts_family.c; docs/design/family.md, "Lock
 * kinds").
 */
#include <stdbool.h>
#include <stdlib.h>

#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "lock_common.h"

struct rlc_rwlock {
    rlc_lock *read, *write;
    rlc_rwlock_lost_fn on_lost; /* guarded by the client's mu */
    void *on_lost_user;
};

int rlc_rwlock_new(rlc_client *c, const char *name, uint64_t owner, rlc_rwlock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    rlc_rwlock *l = calloc(1, sizeof *l);
    if (!l)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int rc = lock_new_kind(c, name, owner, RLC_KIND_READ, &l->read);
    if (rc == RLC_OK)
        rc = lock_new_kind(c, name, owner, RLC_KIND_WRITE, &l->write);
    if (rc != RLC_OK) {
        rlc_rwlock_free(l);
        return rc;
    }
    *out = l;
    return RLC_OK;
}

void rlc_rwlock_free(rlc_rwlock *l)
{
    if (!l)
        return;
    rlc_lock_free(l->read);
    rlc_lock_free(l->write);
    free(l);
}

static rlc_lock *side(rlc_rwlock *l, int write)
{
    return write ? l->write : l->read;
}

int rlc_rwlock_read_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_acquire(l->read, wait_ms, lease_ms);
}

int rlc_rwlock_read_release(rlc_rwlock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_release(l->read);
}

int rlc_rwlock_write_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_acquire(l->write, wait_ms, lease_ms);
}

int rlc_rwlock_write_release(rlc_rwlock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_release(l->write);
}

/* Both sides' waits of this handle end (rlc_lock_cancel's rule). */
int rlc_rwlock_cancel(rlc_rwlock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_lock_cancel(l->read);
    return rlc_lock_cancel(l->write);
}

/* A side's lost hold, on the client's callback thread: the handle's
 * callback hears which side. */
static void side_lost(rlc_lock *s, uint64_t owner, int reason, void *user)
{
    rlc_rwlock *l = user;
    rlc_client *c = s->client;
    pthread_mutex_lock(&c->mu);
    rlc_rwlock_lost_fn fn = l->on_lost;
    void *u = l->on_lost_user;
    pthread_mutex_unlock(&c->mu);
    if (fn)
        fn(l, s == l->write, owner, reason, u);
}

int rlc_rwlock_on_lost(rlc_rwlock *l, rlc_rwlock_lost_fn fn, void *user)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_client *c = l->read->client;
    pthread_mutex_lock(&c->mu);
    l->on_lost = fn;
    l->on_lost_user = user;
    pthread_mutex_unlock(&c->mu);
    int rc = rlc_lock_on_lost_owner(l->read, fn ? side_lost : NULL, l);
    if (rc == RLC_OK)
        rc = rlc_lock_on_lost_owner(l->write, fn ? side_lost : NULL, l);
    return rc;
}

int rlc_rwlock_mode(rlc_rwlock *l, int *out)
{
    if (!l || !out)
        return rlc_fail(RLC_E_INVAL, "lock handle or out pointer is NULL");
    rlc_lock *r = l->read;
    int rc = lock_enter(r);
    if (rc != RLC_OK)
        return rc;
    int64_t mode = 0;
    struct edrv_outcome o;
    rc = edrv_query(r->client->drv, r->name, r->name_len, lock_owner(r), RLC_Q_MODE, &mode, &o);
    if (rc == RLC_OK)
        *out = (int)mode;
    client_leave(r->client);
    return rc;
}

/* A side's levels held through this handle, and how long they are certainly
 * held: 0 and 0 once its validity ran out, before any report of the loss. */
static int side_query(rlc_rwlock *l, int write, int64_t *count, int64_t *validity_ms)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_lock *s = side(l, write);
    int rc = lock_enter(s);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = s->client;
    uint64_t owner = lock_owner(s);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(s, owner);
    int64_t n = h && !h->lost ? h->count : 0;
    pthread_mutex_unlock(&c->mu);
    int64_t left = n > 0 ? edrv_validity_ms_kind(c->drv, s->kind, s->name, s->name_len, owner) : 0;
    if (count)
        *count = left > 0 ? n : 0;
    if (validity_ms)
        *validity_ms = left > 0 ? left : 0;
    client_leave(c);
    return RLC_OK;
}

int rlc_rwlock_hold_count(rlc_rwlock *l, int write, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return side_query(l, write, out, NULL);
}

int rlc_rwlock_validity_ms(rlc_rwlock *l, int write, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return side_query(l, write, NULL, out);
}
