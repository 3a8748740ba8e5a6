/*
 * acquire_outcome.h - what an acquire round's verdict means for its caller:
 * the status, the message, and when a waiter looks again. Both drivers (the
 * engine, c/src/blocking) end every try here, so a verdict reads the same
 * whichever API met it. Pure: no I/O, no clock.
 */
#ifndef RLC_ACQUIRE_OUTCOME_H
#define RLC_ACQUIRE_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quorum.h"

/* What the round was, besides its verdict. */
struct acquire_round {
    const char *shown;       /* the lock as messages name it */
    int n;                   /* nodes */
    int64_t lease_ms;
    int64_t elapsed_ms;      /* from the first send to the verdict */
    int unsynced;            /* grants not confirmed by WAIT (sync_replicas) */
    int64_t sync_replicas, sync_timeout_ms;
    const char *guard_why;   /* Q_GUARDED: the restarted nodes (restart_rule_why) */
};

struct acquire_outcome {
    int status;              /* RLC_OK: held (the driver records it); RLC_NOT_ACQUIRED,
                                RLC_E_LOST, RLC_E_TIMEOUT: msg says why; 0: no verdict
                                (too few answers): the driver names its nodes' failures */
    bool split;              /* busy because contenders split the vote: retry after a jitter */
    int64_t sleep_ms;        /* not acquired: look again after this long (-1 unknown:
                                the holder has no expiry) */
};

/* Reads vd for the caller; msg gets the message (empty when held). */
void acquire_outcome(const struct quorum_verdict *vd, const struct acquire_round *r, char *msg,
                     size_t size, struct acquire_outcome *out);

#endif
