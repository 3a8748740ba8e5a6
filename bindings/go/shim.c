/* shim.c - see shim.h. */
#include <stdio.h>

#include "shim.h"
#include "_cgo_export.h"

static struct rlcgo_result result(int rc, int64_t value)
{
    struct rlcgo_result r = {.value = value, .rc = rc};
    if (rc < 0)
        snprintf(r.msg, sizeof r.msg, "%s", rlc_errmsg());
    return r;
}

struct rlcgo_result rlcgo_client_new(const char *nodes, const char *options, rlc_client **out)
{
    int rc = rlc_client_new(out, nodes, options);
    return result(rc, 0);
}

/* Runs on the library's callback thread; rlcgoLost never blocks. */
static void lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    rlcgoLost((uintptr_t)user, reason);
}

struct rlcgo_result rlcgo_lock_new(rlc_client *c, const char *name, uint64_t owner,
                                   uintptr_t id, rlc_lock **out)
{
    int rc = rlc_lock_new(c, name, owner, out);
    if (rc == RLC_OK && (rc = rlc_lock_on_lost(*out, lost, (void *)id)) != RLC_OK) {
        struct rlcgo_result r = result(rc, 0);
        rlc_lock_free(*out);
        *out = NULL;
        return r;
    }
    return result(rc, 0);
}

struct rlcgo_result rlcgo_call(int op, rlc_lock *l, int64_t a, int64_t b)
{
    int64_t v = 0;
    uint64_t token = 0;
    int flag = 0, rc;
    switch (op) {
    case RLCGO_ACQUIRE: rc = rlc_lock_acquire(l, a, b); break;
    case RLCGO_RELEASE: rc = rlc_lock_release(l); break;
    case RLCGO_EXTEND: rc = rlc_lock_extend(l, a); break;
    case RLCGO_FORCE_RELEASE: rc = rlc_lock_force_release(l); break;
    case RLCGO_IS_LOCKED: rc = rlc_lock_is_locked(l, &flag); v = flag; break;
    case RLCGO_IS_HELD: rc = rlc_lock_is_held(l, &flag); v = flag; break;
    case RLCGO_HOLD_COUNT: rc = rlc_lock_hold_count(l, &v); break;
    case RLCGO_VALIDITY: rc = rlc_lock_validity_ms(l, &v); break;
    case RLCGO_FENCING_TOKEN: rc = rlc_lock_fencing_token(l, &token); v = (int64_t)token; break;
    case RLCGO_CANCEL: rc = rlc_lock_cancel(l); break;
    default: {
        struct rlcgo_result r = {.rc = RLC_E_INVAL};
        snprintf(r.msg, sizeof r.msg, "unknown operation %d", op);
        return r;
    }
    }
    return result(rc, v);
}

/* rlc_fenced_set (REDLOCKC_1.1); value: len bytes (Go memory, only for the
 * length of this call). */
struct rlcgo_result rlcgo_fenced_set(rlc_client *c, const char *key, const void *value,
                                     size_t len, uint64_t token)
{
    int applied = 0;
    int rc = rlc_fenced_set(c, key, value, len, token, &applied);
    return result(rc, applied);
}
