/*
 * family.c - what the semaphores share with each other, on the older
 * blocking stack: names, lease checks, the wait loop and its cancel, and
 * the loading of the family's scripts on that stack's connections. The
 * read-write and fair locks run on the engine (rwlock.c, fairlock.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "family.h"
#include "clock.h"
#include "conn.h"
#include "error.h"
#include "lock_calls.h"
#include "owner.h"
#include "pubsub.h"
#include "quorum.h"
#include "scripts_family.h"

#define MAX_LEASE_MS (366LL * 24 * 3600 * 1000)

int fam_key(rlc_client *c, const char *name, char **key, size_t *len)
{
    if (!name || !*name)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    size_t n = strnlen(name, FAM_MAX_NAME + 1);
    if (n > FAM_MAX_NAME)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", FAM_MAX_NAME);
    if (c->opts.format == RLC_FORMAT_CLASSIC)
        return rlc_fail(RLC_E_INVAL, "the lock family keeps Redisson's layouts only; this "
                                     "client has format=classic (use a client without it)");
    size_t plen = strlen(c->opts.key_prefix);
    *key = malloc(plen + n + 1);
    if (!*key)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    memcpy(*key, c->opts.key_prefix, plen);
    memcpy(*key + plen, name, n + 1);
    *len = plen + n;
    return RLC_OK;
}

int fam_check_lease(const rlc_client *c, int64_t lease_ms)
{
    if (lease_ms <= 0)
        return RLC_OK;
    if (lease_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "lease of %lld ms is longer than 366 days",
                        (long long)lease_ms);
    if (lease_ms <= quorum_drift_ms(lease_ms, c->opts.drift_factor) + 1)
        return rlc_fail(RLC_E_INVAL,
                        "lease of %lld ms is shorter than the clock drift allowance plus a "
                        "round trip (1 ms)", (long long)lease_ms);
    return RLC_OK;
}

int64_t fam_tomb_ms(const rlc_client *c, int64_t lease)
{
    return lock_undo_tomb_ms(lease, c->call_timeout_ms, c->opts.connect_timeout_ms);
}

/* ---- the wait loop ------------------------------------------------------------ */

static void jitter(const rlc_client *c, int64_t deadline_ns)
{
    int64_t ms = quorum_jitter_ms(owner_random_below(UINT64_MAX), c->opts.retry_jitter_ms);
    int64_t until = rlc_deadline_after_ms(rlc_now_ns(), ms);
    if (until > deadline_ns)
        until = deadline_ns;
    int64_t left = until - rlc_now_ns();
    if (left > 0) {
        struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
        nanosleep(&ts, NULL);
    }
}

int fam_wait(rlc_client *c, const char *channel, size_t channel_len, int64_t deadline_ns,
             const struct cancel_point *cp, fam_try_fn fn, void *arg, struct fam_try *t)
{
    struct channel *ch = pubsub_join(c->pubsub, channel, channel_len);
    if (!ch)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int64_t ready_by = rlc_deadline_after_ms(rlc_now_ns(),
                                             c->call_timeout_ms + c->opts.connect_timeout_ms);
    pubsub_wait_ready(c->pubsub, ch, ready_by < deadline_ns ? ready_by : deadline_ns, cp);
    int rc;
    for (;;) {
        uint64_t seq = pubsub_seq(c->pubsub, ch);
        rc = fn(arg, t);
        if (rc != RLC_NOT_ACQUIRED)
            break;
        if (cancel_requested(cp)) {
            /* between tries: the last one took nothing or was undone */
            rc = RLC_E_CANCELED;
            break;
        }
        int64_t now = rlc_now_ns();
        if (now >= deadline_ns)
            break;
        if (atomic_load(&c->closed)) {
            rc = rlc_fail(RLC_E_CLOSED, "client closed while waiting");
            break;
        }
        if (t->split) {
            jitter(c, deadline_ns);
            continue;
        }
        int64_t ms = quorum_retry_ms(t->sleep_ms);
        int64_t until = rlc_deadline_after_ms(now, ms);
        pubsub_wait(c->pubsub, ch, seq, until < deadline_ns ? until : deadline_ns, cp);
    }
    pubsub_leave(c->pubsub, ch);
    return rc;
}

int fam_cancel(rlc_client *c, atomic_uint_fast64_t *cancels)
{
    atomic_fetch_add(cancels, 1);
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were ended */
        pubsub_wake_all(c->pubsub);
        client_leave(c);
    }
    return RLC_OK;
}

void fscripts_init(void)
{
    struct script *const *list;
    scripts_init(); /* their SHA-1 names */
    size_t n = scripts_family(&list);
    /* SCRIPT LOAD in each command connection's handshake, as the RLock's:
     * none is left to EVAL's cache, which Redis 7.4+ and Valkey 8 evict.
     * The SPUBLISH twins (a sharded cluster's) are loaded at their first
     * NOSCRIPT (mux.c). */
    conn_load_also((const struct script *const *)list, n);
}
