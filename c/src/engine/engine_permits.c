/*
 * engine_permits.c - semaphores (redlockc.h, RLC_KIND_SEMAPHORE and
 * RLC_KIND_PSEMAPHORE): the entry points.
 *
 * A semaphore's acquire is an acquire (engine_acquire.c) whose try takes
 * permits instead of a level: the same round, undo, tombstone, wait on the
 * semaphore's channel, restart guard, sync_replicas, cluster routing and
 * Sentinel following; only the scripts (permit_calls.h) and what a grant
 * keeps differ. A grant keeps nothing in the engine: nothing is renewed,
 * nothing can be lost but an expirable permit's lease, which its caller
 * counts from the validity the grant reports. Every try has its own record
 * on the server, named by its attempt id, so its undo gives back exactly
 * what it took whenever it arrives, and stops it if it arrives first
 * (docs/design/family.md, S1 and S2).
 *
 * Setting the count, reading it and giving permits back are one-shot
 * calls (engine_query.c's Q_CALL), on the one node's command connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "error.h"
#include "permit_calls.h"

/* Calls that take no permits hang on a hold of this owner (they queue
 * behind nothing, as queries do). */
#define PERMITS_CALL_OWNER UINT64_MAX

static int check_permits_kind(int kind)
{
    if (kind_permits(kind))
        return RLC_OK;
    return rlc_fail(RLC_E_INVAL, "kind %d is not a semaphore's (RLC_KIND_SEMAPHORE, "
                    "RLC_KIND_PSEMAPHORE)", kind);
}

static int check_count(int64_t permits)
{
    if (permits < 1 || permits > PERMITS_MAX)
        return rlc_fail(RLC_E_INVAL, "permits per call must be 1 .. %d", PERMITS_MAX);
    return RLC_OK;
}

int rlc_engine_acquire_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
                               uint64_t owner, int64_t permits, int64_t wait_ms, int64_t lease_ms,
                               int64_t now_ms, uint64_t *op_id)
{
    int rc;
    if ((rc = check_permits_kind(kind)) != RLC_OK || (rc = check_count(permits)) != RLC_OK)
        return rc;
    if (kind == RLC_KIND_PSEMAPHORE && lease_ms <= 0)
        return rlc_fail(RLC_E_INVAL, "an expirable permit needs a lease > 0 ms");
    if (kind == RLC_KIND_SEMAPHORE && lease_ms != 0)
        return rlc_fail(RLC_E_INVAL, "a plain semaphore's permits have no lease (give 0; "
                                     "RLC_KIND_PSEMAPHORE's expire)");
    return eng_acquire(e, kind, name, name_len, owner, wait_ms, lease_ms, 0, permits, now_ms,
                       op_id);
}

int rlc_engine_permit_id(const rlc_engine *e, uint64_t token, int64_t permits, char *buf,
                         size_t size)
{
    if (!e || !buf)
        return rlc_fail(RLC_E_INVAL, "engine or buffer is NULL");
    if (token == 0)
        return rlc_fail(RLC_E_INVAL, "token 0 names no grant");
    if (check_count(permits) != RLC_OK)
        return RLC_E_INVAL;
    if (!permit_id(e->uuid, token, permits, buf, size))
        return rlc_fail(RLC_E_INVAL, "a permit id needs %d bytes", PERMIT_ID_HEX + 1);
    return RLC_OK;
}

/* A one-shot call made of the semaphore's names (the lock's of kind). */
static int one_shot(rlc_engine *e, int kind, const char *name, size_t name_len, int64_t now_ms,
                    uint64_t *op_id, struct rlc_cmd *(*make)(rlc_engine *, const struct lock_names *,
                                                              const void *),
                    const void *arg, bool redo, bool held)
{
    int rc;
    if ((rc = check_permits_kind(kind)) != RLC_OK)
        return rc;
    if ((rc = eng_new_op(e, OP_QUERY, kind, name, name_len, PERMITS_CALL_OWNER, op_id)) !=
        RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    struct lock_names names = eng_names(op->hold->lock);
    op->what = Q_CALL;
    op->call = make(e, &names, arg);
    op->call_redo = redo;
    op->call_held = held;
    if (!op->call) {
        op_finish(e, op, e->now); /* it never started: no event */
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    query_begin(e, op);
    return RLC_OK;
}

static struct rlc_cmd *make_release(rlc_engine *e, const struct lock_names *n, const void *arg)
{
    return call_permits_release(
        n, e->uuid, eng_new_attempt(e), *(const int64_t *)arg,
        lock_undo_tomb_ms(0, e->call_timeout_ms, e->opts.connect_timeout_ms));
}

static struct rlc_cmd *make_give_back(rlc_engine *e, const struct lock_names *n, const void *arg)
{
    (void)e;
    return call_permits_give_back(n, arg);
}

static struct rlc_cmd *make_set(rlc_engine *e, const struct lock_names *n, const void *arg)
{
    (void)e;
    return call_permits_set(n, *(const int64_t *)arg);
}

static struct rlc_cmd *make_available(rlc_engine *e, const struct lock_names *n, const void *arg)
{
    (void)e;
    (void)arg;
    return call_permits_available(n);
}

int rlc_engine_release_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
                               int64_t permits, const char *id, int64_t now_ms, uint64_t *op_id)
{
    if (kind == RLC_KIND_PSEMAPHORE) {
        uint8_t raw[16];
        if (!permit_id_parse(id, raw))
            return rlc_fail(RLC_E_INVAL, "the permit id is NULL or not 32 lowercase hex digits");
        return one_shot(e, kind, name, name_len, now_ms, op_id, make_give_back, raw, false, true);
    }
    int rc = check_count(permits);
    if (rc != RLC_OK)
        return rc;
    /* named by its own record: sent again on a new connection until
     * answered, it gives back its permits once */
    return one_shot(e, kind, name, name_len, now_ms, op_id, make_release, &permits, true, false);
}

int rlc_engine_set_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
                           int64_t permits, int64_t now_ms, uint64_t *op_id)
{
    if (permits < 0 || permits > INT64_MAX / 2)
        return rlc_fail(RLC_E_INVAL, "permits must be 0 .. 2^62");
    return one_shot(e, kind, name, name_len, now_ms, op_id, make_set, &permits, false, false);
}

int rlc_engine_available_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
                                 int64_t now_ms, uint64_t *op_id)
{
    return one_shot(e, kind, name, name_len, now_ms, op_id, make_available, NULL, false, false);
}
