/*
 * fence.c - fencing tokens that hold end to end.
 *
 * A token is only worth something if every later holder gets a larger one
 * and the resource refuses a write with a smaller one. Two halves:
 *
 *   - The token is a quorum register: the engine stores a new hold's token
 *     on a quorum of the granting nodes before the acquire returns
 *     (engine_acquire.c, token_floor). docs/design/fencing.md
 *     has the argument.
 *
 *   - rlc_fenced_set writes a key only if the caller's token is at least the
 *     one stored with it, in one script (the engine's fenced write,
 *     rlc_engine_fenced_set, on the locks' connection): the value stays a
 *     plain string at the key, its fence is the companion key
 *     "redlockc_fence:{key}" in the same hash slot. docs/FENCING.md has the
 *     recipe for PostgreSQL.
 */
#include <string.h>

#include "engine_driver.h"
#include "error.h"
#include "state.h"

int rlc_fenced_set(rlc_client *c, const char *key, const char *value, size_t value_len,
                   uint64_t token, int *applied)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (!applied)
        return rlc_fail(RLC_E_INVAL, "applied pointer is NULL");
    if (!key || !*key)
        return rlc_fail(RLC_E_INVAL, "key is NULL or empty");
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    struct edrv_outcome o;
    rc = edrv_fenced_set(c->drv, key, strlen(key), value, value_len, token, &o);
    if (rc == RLC_OK)
        *applied = o.count == 1;
    client_leave(c);
    return rc;
}
