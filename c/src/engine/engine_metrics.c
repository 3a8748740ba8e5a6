/*
 * engine_metrics.c - the engine's counters (rlc_engine_metrics): the same
 * counters, by the same rules, as the blocking API's rlc_client_metrics
 * (metric_defs.h), so every driver reports them without guessing.
 *
 * Plain integers: an engine is used by one thread at a time (its driver's),
 * and a driver that reads them from another thread does so under the lock it
 * already takes for every other call.
 */
#include "engine_int.h"
#include "error.h"

void eng_count(rlc_engine *e, int which)
{
    e->metrics[which]++;
}

void eng_count_acquire(rlc_engine *e, const struct eng_op *op, int status)
{
    if (status == RLC_OK)
        e->metrics[RLC_M_ACQUIRES]++;
    else if (status == RLC_NOT_ACQUIRED)
        e->metrics[RLC_M_BUSY]++;
    if (!op->waited)
        return;
    /* e->now: the latest time passed in, the one this end happens at */
    int64_t ms = e->now - op->queued_at;
    if (ms < 0)
        ms = 0;
    e->metrics[RLC_M_WAIT_MS_SUM] += (uint64_t)ms; /* RLC_M_WAITS: as it began (acquire_sleep) */
    e->metrics[metric_wait_bucket(ms)]++;
}

void eng_hold_lost(rlc_engine *e, struct hold *h, int why)
{
    if (!h->lost)
        e->metrics[RLC_M_LOST]++;
    h->lost = why;
}

int rlc_engine_metrics(const rlc_engine *e, uint64_t *out, int n)
{
    if (!e || !out || n < 0)
        return rlc_fail(RLC_E_INVAL, "rlc_engine_metrics: %s",
                        !e ? "engine is NULL" : !out ? "out is NULL" : "n is negative");
    for (int i = 0; i < n && i < RLC_M_COUNT; i++)
        out[i] = e->metrics[i];
    return RLC_M_COUNT;
}
