/*
 * multilock.c - several RLock names held together: all of them or none.
 *
 * The names are sorted and de-duplicated once. An acquire is ONE script
 * per node over every name (script_multi_acquire): it checks them all and
 * then takes them all, or takes none, atomically on that node. So on one
 * node no multi-lock ever holds part of its set while it waits for the
 * rest, and two overlapping multi-locks cannot deadlock: hold-and-wait never
 * happens. Over N nodes (Redlock) each node is all-or-none in the same way;
 * a round without a quorum is undone on every node that may have granted
 * it, and retried after jitter, as for rlc_lock.
 *
 * The acquire is the engine's (engine_multi.c, docs/design/multilock.md):
 * each name gets exactly what rlc_lock's acquire script gives it, with one
 * attempt id for the whole set, and each
 * level is recorded on that name's rlc_lock handle. So the undo (per name,
 * by attempt id), the release, the renewals and the lost-hold reports are
 * rlc_lock's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "engine_driver.h"
#include "handle_levels.h"
#include "lock_common.h"

#define MAX_NAMES 1024

struct rlc_multilock {
    rlc_client *client;
    uint64_t owner;
    int n;
    rlc_lock **locks;          /* sorted by key */
    atomic_uint_fast64_t cancels; /* rlc_multilock_cancel calls (cancel.h) */
};

static int by_key(const void *a, const void *b)
{
    const rlc_lock *x = *(rlc_lock *const *)a, *y = *(rlc_lock *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int d = memcmp(x->key, y->key, n);
    return d ? d : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

int rlc_multilock_new(rlc_client *c, const char *const *names, int n, uint64_t owner,
                      rlc_multilock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c || !names || n < 1 || n > MAX_NAMES)
        return rlc_fail(RLC_E_INVAL, "client or names is NULL, or not 1 .. %d names", MAX_NAMES);
    rlc_multilock *m = calloc(1, sizeof *m);
    if (!m || !(m->locks = calloc((size_t)n, sizeof *m->locks))) {
        free(m);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    m->client = c;
    m->owner = owner;
    int rc = RLC_OK;
    for (int i = 0; i < n && rc == RLC_OK; i++) {
        rlc_lock *l;
        rc = rlc_lock_new(c, names[i], owner, &l);
        if (rc == RLC_OK)
            m->locks[m->n++] = l;
    }
    if (rc != RLC_OK) {
        rlc_multilock_free(m);
        return rc;
    }
    /* one global order: the same names always go in the same order */
    qsort(m->locks, (size_t)m->n, sizeof *m->locks, by_key);
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        if (k > 0 && by_key(&m->locks[k - 1], &m->locks[i]) == 0)
            rlc_lock_free(m->locks[i]);
        else
            m->locks[k++] = m->locks[i];
    }
    m->n = k;
    *out = m;
    return RLC_OK;
}

void rlc_multilock_free(rlc_multilock *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        rlc_lock_free(m->locks[i]);
    free(m->locks);
    free(m);
}

int rlc_multilock_acquire(rlc_multilock *m, int64_t wait_ms, int64_t lease_ms)
{
    if (!m)
        return rlc_fail(RLC_E_INVAL, "multilock handle is NULL");
    rlc_client *c = m->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&m->cancels, atomic_load(&m->cancels)};
    if ((rc = lock_check_lease(c, lease_ms, "lease")) != RLC_OK)
        goto out;
    uint64_t owner = m->owner ? m->owner : rlc_thread_owner();
    const char **names = malloc(sizeof *names * (size_t)m->n);
    size_t *lens = malloc(sizeof *lens * (size_t)m->n);
    if (!names || !lens) {
        free(names);
        free(lens);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < m->n; i++) {
        names[i] = m->locks[i]->name;
        lens[i] = m->locks[i]->name_len;
    }
    /* The engine's multi-lock (engine_multi.c): one script per node over
     * every name, undone name by name, each name then held, renewed and
     * lost on its own; waits on the first name's channel. */
    struct edrv_outcome o;
    rc = edrv_acquire_multi(c->drv, names, lens, m->n, owner, &cp, wait_ms, lease_ms, &o);
    free(names);
    free(lens);
    if (rc == RLC_OK) {
        bool ok = true;
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < m->n && ok; i++) {
            struct handle_hold *h = hh_get(m->locks[i], owner);
            if (h)
                hh_grant(h, 0); /* a multi-lock takes no fencing token */
            ok = h != NULL;
        }
        pthread_mutex_unlock(&c->mu);
        if (!ok)
            rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    }
out:
    client_leave(c);
    return rc;
}

/* As rlc_lock_cancel: not through an owner, so any thread may call it. */
int rlc_multilock_cancel(rlc_multilock *m)
{
    if (!m)
        return rlc_fail(RLC_E_INVAL, "multilock handle is NULL");
    atomic_fetch_add(&m->cancels, 1);
    rlc_client *c = m->client;
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were ended */
        edrv_cancel(c->drv, &m->cancels);
        client_leave(c);
    }
    return RLC_OK;
}

int rlc_multilock_release(rlc_multilock *m)
{
    if (!m)
        return rlc_fail(RLC_E_INVAL, "multilock handle is NULL");
    /* Every name is released even if one fails; the first failure is
     * reported. Reverse order: the last taken goes first. */
    int rc = RLC_OK;
    char msg[256] = "";
    for (int i = m->n - 1; i >= 0; i--) {
        int r = rlc_lock_release(m->locks[i]);
        if (r != RLC_OK && rc == RLC_OK) {
            rc = r;
            snprintf(msg, sizeof msg, "%s", rlc_errmsg());
        }
    }
    if (rc != RLC_OK)
        rlc_fail_msg(rc, msg);
    return rc;
}

int rlc_multilock_size(rlc_multilock *m, int *out)
{
    if (!m || !out)
        return rlc_fail(RLC_E_INVAL, "multilock handle or out pointer is NULL");
    *out = m->n;
    return RLC_OK;
}

int rlc_multilock_lock_at(rlc_multilock *m, int i, rlc_lock **out)
{
    if (!m || !out || i < 0 || i >= m->n)
        return rlc_fail(RLC_E_INVAL, "multilock handle or out pointer is NULL, or index out of range");
    *out = m->locks[i];
    return RLC_OK;
}
