/*
 * fairlock.c - the fair lock (rlc_fairlock_*): a lock handle of the engine's
 * kind RLC_KIND_FAIR, acquired, released, cancelled and counted as rlc_lock
 * is (lock_acquire.c, lock_release.c), with its thread wait. First come,
 * first served is on the server, in Redisson's RFairLock layout: the queue,
 * the waiters' timeouts and each waiter's own channel (engine/
 * scripts_family.c; docs/design/family.md, "Lock kinds").
 */
#include <stdbool.h>
#include <stdlib.h>

#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "lock_common.h"

#define DEFAULT_THREAD_WAIT_MS 5000 /* Redisson's threadWaitTime */
#define MAX_THREAD_WAIT_MS (366LL * 24 * 3600 * 1000)

struct rlc_fairlock {
    rlc_lock *l;
    rlc_fairlock_lost_fn on_lost; /* guarded by the client's mu */
    void *on_lost_user;
};

int rlc_fairlock_new(rlc_client *c, const char *name, uint64_t owner, int64_t thread_wait_ms,
                     rlc_fairlock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (c->n_nodes > 1)
        return rlc_fail(RLC_E_INVAL,
                        "a fair lock over %d nodes is refused: each node keeps its own queue, "
                        "so no order is shared by a quorum and the FIFO promise cannot hold "
                        "(use one node, or rlc_lock for Redlock)", c->n_nodes);
    if (thread_wait_ms > MAX_THREAD_WAIT_MS)
        return rlc_fail(RLC_E_INVAL, "thread wait of %lld ms is longer than 366 days",
                        (long long)thread_wait_ms);
    rlc_fairlock *f = calloc(1, sizeof *f);
    if (!f)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int rc = lock_new_kind(c, name, owner, RLC_KIND_FAIR, &f->l);
    if (rc != RLC_OK) {
        free(f);
        return rc;
    }
    f->l->thread_wait_ms = thread_wait_ms > 0 ? thread_wait_ms : DEFAULT_THREAD_WAIT_MS;
    *out = f;
    return RLC_OK;
}

void rlc_fairlock_free(rlc_fairlock *f)
{
    if (!f)
        return;
    rlc_lock_free(f->l);
    free(f);
}

int rlc_fairlock_acquire(rlc_fairlock *f, int64_t wait_ms, int64_t lease_ms)
{
    if (!f)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_acquire(f->l, wait_ms, lease_ms);
}

int rlc_fairlock_release(rlc_fairlock *f)
{
    if (!f)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_release(f->l);
}

int rlc_fairlock_cancel(rlc_fairlock *f)
{
    if (!f)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return rlc_lock_cancel(f->l);
}

/* The levels held through this handle, and how long they are certainly
 * held: 0 and 0 once its validity ran out, before any report of the loss. */
static int query(rlc_fairlock *f, int64_t *count, int64_t *validity_ms)
{
    if (!f)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_lock *l = f->l;
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, owner);
    int64_t n = h && !h->lost ? h->count : 0;
    pthread_mutex_unlock(&c->mu);
    int64_t left = n > 0 ? edrv_validity_ms_kind(c->drv, l->kind, l->name, l->name_len, owner) : 0;
    if (count)
        *count = left > 0 ? n : 0;
    if (validity_ms)
        *validity_ms = left > 0 ? left : 0;
    client_leave(c);
    return RLC_OK;
}

int rlc_fairlock_hold_count(rlc_fairlock *f, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return query(f, out, NULL);
}

int rlc_fairlock_validity_ms(rlc_fairlock *f, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return query(f, NULL, out);
}

static void lost(rlc_lock *l, uint64_t owner, int reason, void *user)
{
    rlc_fairlock *f = user;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    rlc_fairlock_lost_fn fn = f->on_lost;
    void *u = f->on_lost_user;
    pthread_mutex_unlock(&c->mu);
    if (fn)
        fn(f, owner, reason, u);
}

int rlc_fairlock_on_lost(rlc_fairlock *f, rlc_fairlock_lost_fn fn, void *user)
{
    if (!f)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_client *c = f->l->client;
    pthread_mutex_lock(&c->mu);
    f->on_lost = fn;
    f->on_lost_user = user;
    pthread_mutex_unlock(&c->mu);
    return rlc_lock_on_lost_owner(f->l, fn ? lost : NULL, f);
}
