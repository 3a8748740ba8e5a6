/*
 * metric_defs.h - what the counters of rlc_client_metrics and
 * rlc_engine_metrics are: their number, names and wait buckets. One table
 * for both drivers, so a counter means the same in each.
 */
#ifndef RLC_METRIC_DEFS_H
#define RLC_METRIC_DEFS_H

#include <stdint.h>

#include "redlockc.h"

#define RLC_M_COUNT (RLC_M_WAIT_BUCKET + RLC_M_WAIT_BUCKETS)

/* The index (RLC_M_WAIT_BUCKET + i) of the bucket a wait of ms falls in. */
int metric_wait_bucket(int64_t ms);

#endif
