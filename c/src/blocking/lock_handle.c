/*
 * lock_handle.c - a lock handle's life: its key names (Redisson's, so that a
 * Redisson client shares the lock), its on_lost callback, and its end.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks.h"
#include "error.h"
#include "handle_levels.h"
#include "lock_common.h"

#define MAX_NAME_LEN 65536

int rlc_lock_new(rlc_client *c, const char *name, uint64_t owner, rlc_lock **out)
{
    return lock_new_kind(c, name, owner, RLC_KIND_LOCK, out);
}

int lock_new_kind(rlc_client *c, const char *name, uint64_t owner, int kind, rlc_lock **out)
{
    if (c && kind != RLC_KIND_LOCK && c->opts.format == RLC_FORMAT_CLASSIC) {
        if (out)
            *out = NULL;
        return rlc_fail(RLC_E_INVAL, "the lock family keeps Redisson's layouts only; this "
                                     "client has format=classic (use a client without it)");
    }
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (!name || !*name)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    if (owner >= RLC_THREAD_OWNER_BASE)
        return rlc_fail(RLC_E_INVAL,
                        "explicit owner id %llu is too large: use 1 to 2^62-1 (larger ids "
                        "belong to threads)",
                        (unsigned long long)owner);
    size_t name_len = strnlen(name, MAX_NAME_LEN + 1);
    if (name_len > MAX_NAME_LEN)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", MAX_NAME_LEN);
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;

    rlc_lock *l = calloc(1, sizeof *l);
    if (!l) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    size_t plen = strlen(c->opts.key_prefix);
    l->key_len = plen + name_len;
    l->key = malloc(l->key_len + 1);
    if (!l->key) {
        free(l);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    memcpy(l->key, c->opts.key_prefix, plen);
    memcpy(l->key + plen, name, name_len + 1);
    l->name = l->key + plen;
    l->name_len = name_len;
    l->client = c;
    l->owner = owner;
    l->kind = kind;
    client_ref(c);
    pthread_mutex_lock(&c->mu);
    l->hnext = c->handles;
    if (c->handles)
        c->handles->hprev = l;
    c->handles = l;
    pthread_mutex_unlock(&c->mu);
    *out = l;
out:
    client_leave(c);
    return rc;
}

void rlc_lock_free(rlc_lock *l)
{
    if (!l)
        return;
    rlc_client *c = l->client;
    if (c->fork_generation != owner_fork_generation()) {
        /* A forked child: the mutex may be held by a thread that did not come
         * along, and no other thread of ours uses this client here. */
        hh_free_all(l);
    } else {
        pthread_mutex_lock(&c->mu);
        /* Off the list first: a loss reported from now on finds it no more. */
        if (l->hprev)
            l->hprev->hnext = l->hnext;
        else
            c->handles = l->hnext;
        if (l->hnext)
            l->hnext->hprev = l->hprev;
        struct handle_hold *gone = hh_detach_all(c, l);
        /* No callback of this lock runs after this returns: queued ones are
         * dropped, a running one is waited for (unless this is that
         * callback, freeing its own lock). */
        client_forget_lost(c, l);
        pthread_mutex_unlock(&c->mu);
        /* Its holds stop being renewed and expire with their lease (the
         * header's promise): the engine forgets them, unless the client is
         * closing (its engine ends them all, and may be freed meanwhile). */
        client_ref(c);
        atomic_fetch_add(&c->calls, 1); /* rlc_client_free waits for it */
        if (gone && !atomic_load(&c->closed))
            hh_forget_detached(c, l, gone);
        else
            hh_forget_detached(NULL, l, gone);
        atomic_fetch_sub(&c->calls, 1);
        client_unref(c);
    }
    free(l->key);
    free(l);
    client_unref(c);
}

static int set_on_lost(rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2, void *user)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    int rc = client_enter(l->client);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    client_set_on_lost(l, fn, fn2, user);
    pthread_mutex_unlock(&c->mu);
    client_leave(c);
    return RLC_OK;
}

int rlc_lock_on_lost(rlc_lock *l, rlc_lost_fn fn, void *user)
{
    return set_on_lost(l, fn, NULL, user);
}

int rlc_lock_on_lost_owner(rlc_lock *l, rlc_lost_owner_fn fn, void *user)
{
    return set_on_lost(l, NULL, fn, user);
}
