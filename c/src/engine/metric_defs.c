/*
 * metric_defs.c - the counters' names and wait buckets (metric_defs.h), and
 * the two public calls that read them.
 */
#include "metric_defs.h"

#include "error.h"

static const int64_t bucket_ms[RLC_M_WAIT_BUCKETS] = {1,   5,   10,   25,   50,    100,
                                                       250, 500, 1000, 5000, 30000, INT64_MAX};

static const char *const names[] = {"acquires",   "busy",           "waits",
                                    "renewals",   "lost",           "reconnects",
                                    "script_reloads", "wait_ms_sum", "wait_bucket"};

int metric_wait_bucket(int64_t ms)
{
    int i = 0;
    while (i < RLC_M_WAIT_BUCKETS - 1 && ms > bucket_ms[i])
        i++;
    return RLC_M_WAIT_BUCKET + i;
}

const char *rlc_metric_name(int i)
{
    if (i < 0 || i >= RLC_M_COUNT)
        return NULL;
    return i >= RLC_M_WAIT_BUCKET ? names[RLC_M_WAIT_BUCKET] : names[i];
}

int64_t rlc_metric_bucket_ms(int i)
{
    if (i < 0 || i >= RLC_M_WAIT_BUCKETS)
        return rlc_fail(RLC_E_INVAL, "wait bucket %d is outside 0..%d", i, RLC_M_WAIT_BUCKETS - 1);
    return bucket_ms[i];
}
