/*
 * semaphore.c - Redisson's RSemaphore (a count of free permits) and
 * RPermitExpirableSemaphore (the count plus one zset member per permit
 * taken, scored with the end of its lease), on one node only: the engine's
 * semaphore kinds (engine/engine_permits.c), run to their end on the
 * calling thread by the blocking driver as every lock kind is.
 *
 * Over several masters a semaphore is refused: the count is not a set of
 * holders that a quorum can vote on, and two quorums that share one node
 * can still each take that node's last permit from different states of
 * the others, so more than N permits could be out at once.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_driver.h"
#include "error.h"
#include "owner.h"
#include "state.h"

#define MAX_NAME 65536
#define MAX_PERMITS 65535

struct sem {
    rlc_client *client;
    char *name;          /* as given: the engine adds the key prefix */
    size_t name_len;
    int kind;            /* RLC_KIND_SEMAPHORE, RLC_KIND_PSEMAPHORE */
    atomic_uint_fast64_t cancels; /* rlc_semaphore_cancel / rlc_psemaphore_cancel calls */
};

struct rlc_semaphore {
    struct sem s;
};

struct rlc_psemaphore {
    struct sem s;
};

static const char *noun(const struct sem *s)
{
    return s->kind == RLC_KIND_PSEMAPHORE ? "permit-expirable semaphore" : "semaphore";
}

static int sem_new(rlc_client *c, const char *name, int kind, struct sem **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (!name || !*name)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    size_t n = strnlen(name, MAX_NAME + 1);
    if (n > MAX_NAME)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", MAX_NAME);
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    struct sem *s = NULL;
    if (c->opts.format == RLC_FORMAT_CLASSIC) {
        rc = rlc_fail(RLC_E_INVAL, "the lock family keeps Redisson's layouts only; this "
                                   "client has format=classic (use a client without it)");
    } else if (c->n_nodes > 1) {
        rc = rlc_fail(RLC_E_INVAL,
                      "a semaphore over %d masters is refused: a count of permits cannot be "
                      "voted on by a quorum, so more than N permits could be out at once "
                      "(use one node)", c->n_nodes);
    } else if (!(s = calloc(1, kind == RLC_KIND_PSEMAPHORE ? sizeof(struct rlc_psemaphore)
                                                            : sizeof(struct rlc_semaphore))) ||
               !(s->name = strndup(name, n))) {
        free(s);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    } else {
        s->name_len = n;
        s->kind = kind;
        atomic_init(&s->cancels, 0);
        s->client = c;
        client_ref(c);
        *out = s;
    }
    client_leave(c);
    return rc;
}

static void sem_free(struct sem *s)
{
    if (!s)
        return;
    rlc_client *c = s->client;
    free(s->name);
    free(s);
    client_unref(c);
}

/* One of the engine's one-shot calls; *v its answer. */
static int call(struct sem *s, int what, int64_t permits, const char *id, int64_t *v)
{
    int rc = client_enter(s->client);
    if (rc != RLC_OK)
        return rc;
    struct edrv_outcome o;
    rc = edrv_permits_call(s->client->drv, what, s->kind, s->name, s->name_len, permits, id, &o);
    if (rc == RLC_OK && v)
        *v = o.count;
    client_leave(s->client);
    return rc;
}

static int set_permits(struct sem *s, int64_t permits, int *set)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    int64_t got = 0;
    int rc = call(s, EDRV_SET, permits, NULL, &got);
    if (rc == RLC_OK && set)
        *set = got == 1;
    return rc;
}

static int available(struct sem *s, int64_t *out)
{
    if (!s || !out)
        return rlc_fail(RLC_E_INVAL, "semaphore handle or out pointer is NULL");
    return call(s, EDRV_AVAILABLE, 0, NULL, out);
}

static int sem_acquire(struct sem *s, int64_t n, int64_t wait_ms, int64_t lease_ms, char *id_out)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    if (n < 1 || n > MAX_PERMITS)
        return rlc_fail(RLC_E_INVAL, "permits per call must be 1 .. %d", MAX_PERMITS);
    bool expirable = s->kind == RLC_KIND_PSEMAPHORE;
    if (expirable && !id_out)
        return rlc_fail(RLC_E_INVAL, "id buffer is NULL");
    if (expirable && lease_ms <= 0)
        return rlc_fail(RLC_E_INVAL, "an expirable permit needs a lease > 0 ms");
    if (!expirable && lease_ms < 0)
        return rlc_fail(RLC_E_INVAL, "lease must be >= 0 ms");
    rlc_client *c = s->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&s->cancels, atomic_load(&s->cancels)};
    struct edrv_outcome o;
    rc = edrv_acquire_permits(c->drv, s->kind, s->name, s->name_len, owner_thread_number(), &cp,
                              n, wait_ms, expirable ? lease_ms : 0, &o);
    if (rc == RLC_E_CANCELED) {
        char name[80];
        rlc_fail(RLC_E_CANCELED, "acquire of %s '%s' was cancelled (%s); nothing was kept",
                 noun(s), rlc_clip(s->name, name, sizeof name),
                 expirable ? "rlc_psemaphore_cancel" : "rlc_semaphore_cancel");
    }
    if (rc == RLC_OK && expirable) /* a grant's token is its attempt: never 0 */
        (void)edrv_permit_id(c->drv, o.token, n, id_out, RLC_PERMIT_ID_LEN + 1);
    client_leave(c);
    return rc;
}

static int sem_cancel(struct sem *s)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    atomic_fetch_add(&s->cancels, 1);
    rlc_client *c = s->client;
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were ended */
        edrv_cancel(c->drv, &s->cancels);
        client_leave(c);
    }
    return RLC_OK;
}

/* ---- public: plain semaphore ---------------------------------------------------------- */

int rlc_semaphore_cancel(rlc_semaphore *s)
{
    return sem_cancel(s ? &s->s : NULL);
}

int rlc_psemaphore_cancel(rlc_psemaphore *s)
{
    return sem_cancel(s ? &s->s : NULL);
}

int rlc_semaphore_new(rlc_client *c, const char *name, rlc_semaphore **out)
{
    return sem_new(c, name, RLC_KIND_SEMAPHORE, (struct sem **)out);
}

void rlc_semaphore_free(rlc_semaphore *s)
{
    sem_free(s ? &s->s : NULL);
}

int rlc_semaphore_try_set_permits(rlc_semaphore *s, int64_t permits, int *set)
{
    return set_permits(s ? &s->s : NULL, permits, set);
}

int rlc_semaphore_available(rlc_semaphore *s, int64_t *out)
{
    return available(s ? &s->s : NULL, out);
}

int rlc_semaphore_acquire(rlc_semaphore *s, int64_t n, int64_t wait_ms)
{
    return sem_acquire(s ? &s->s : NULL, n, wait_ms, 0, NULL);
}

int rlc_semaphore_release(rlc_semaphore *s, int64_t n)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    if (n < 1 || n > MAX_PERMITS)
        return rlc_fail(RLC_E_INVAL, "permits per call must be 1 .. %d", MAX_PERMITS);
    return call(&s->s, EDRV_GIVE_BACK, n, NULL, NULL);
}

/* ---- public: permit-expirable semaphore ------------------------------------------------- */

int rlc_psemaphore_new(rlc_client *c, const char *name, rlc_psemaphore **out)
{
    return sem_new(c, name, RLC_KIND_PSEMAPHORE, (struct sem **)out);
}

void rlc_psemaphore_free(rlc_psemaphore *s)
{
    sem_free(s ? &s->s : NULL);
}

int rlc_psemaphore_try_set_permits(rlc_psemaphore *s, int64_t permits, int *set)
{
    return set_permits(s ? &s->s : NULL, permits, set);
}

int rlc_psemaphore_available(rlc_psemaphore *s, int64_t *out)
{
    return available(s ? &s->s : NULL, out);
}

int rlc_psemaphore_acquire(rlc_psemaphore *s, int64_t n, int64_t wait_ms, int64_t lease_ms,
                           char *id_out)
{
    return sem_acquire(s ? &s->s : NULL, n, wait_ms, lease_ms, id_out);
}

int rlc_psemaphore_release(rlc_psemaphore *s, const char *id)
{
    if (!s || !id)
        return rlc_fail(RLC_E_INVAL, "handle is NULL or the permit id is not 32 lowercase hex digits");
    return call(&s->s, EDRV_GIVE_BACK, 0, id, NULL);
}
