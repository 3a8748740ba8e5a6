/*
 * acquire_outcome.c - what an acquire round's verdict means for its caller
 * (acquire_outcome.h).
 */
#include <stdio.h>

#include "acquire_outcome.h"
#include "redlockc.h"

void acquire_outcome(const struct quorum_verdict *vd, const struct acquire_round *r, char *msg,
                     size_t size, struct acquire_outcome *out)
{
    *out = (struct acquire_outcome){0, false, 0};
    msg[0] = '\0';
    switch (vd->outcome) {
    case Q_HELD:
        out->status = RLC_OK;
        return;
    case Q_OUTER_LOST:
        /* the hold this nests in is gone from a quorum: this acquire made a
         * new hold there; counting it as a level would let the owner's next
         * release free it while the owner still believes it holds (A7) */
        out->status = RLC_E_LOST;
        snprintf(msg, size,
                 "lock '%s' was lost before this nested acquire: it expired or was taken; "
                 "nothing was kept", r->shown);
        return;
    case Q_LEASE_USED:
        out->status = RLC_NOT_ACQUIRED;
        out->sleep_ms = QUORUM_MIN_RETRY_MS;
        snprintf(msg, size,
                 "lock '%s' was granted, but its %lld ms lease was used up by the %lld ms the "
                 "nodes took to answer (and the drift allowance); use a longer lease",
                 r->shown, (long long)r->lease_ms, (long long)r->elapsed_ms);
        return;
    case Q_GUARDED:
        out->status = RLC_NOT_ACQUIRED;
        out->sleep_ms = vd->sleep_ms;
        snprintf(msg, size,
                 "lock '%s': %d of %d nodes granted it, but only %d count toward the quorum "
                 "of %d: %s", r->shown, vd->yes + vd->guarded, r->n, vd->yes, quorum_of(r->n),
                 r->guard_why ? r->guard_why : "");
        return;
    case Q_BUSY:
        out->status = RLC_NOT_ACQUIRED;
        out->split = vd->split;
        out->sleep_ms = vd->sleep_ms;
        snprintf(msg, size, "lock '%s' is held by another owner", r->shown);
        return;
    default:
        if (r->unsynced > 0) {
            out->status = RLC_E_TIMEOUT;
            snprintf(msg, size,
                     "not synced: lock '%s' was granted on %d of %d nodes but not confirmed "
                     "by %lld replica(s) within %lld ms (WAIT); it was undone",
                     r->shown, r->unsynced, r->n, (long long)r->sync_replicas,
                     (long long)r->sync_timeout_ms);
        }
        return;
    }
}
