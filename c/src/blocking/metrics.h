/*
 * metrics.h - per-client counters and the log callback (REDLOCKC_1.1).
 *
 * The core calls these from its code paths, one line each, so that they sit
 * apart from the locking logic: every function accepts a client whose
 * metrics could not be allocated (then it does nothing), and none of them
 * ever calls the user's log callback: log lines are queued and handed over
 * by metrics_flush_log() at points where the caller holds no lock of the
 * library (the watchdog thread's loop, the end of an acquire), because a
 * callback that enters a VM (Python's GIL) while client->mu is held could
 * deadlock against a thread of that VM waiting for client->mu.
 */
#ifndef RLC_METRICS_H
#define RLC_METRICS_H

#include <stdint.h>

#include "redlockc.h"

struct rlc_metrics;

/* At rlc_client_new; NULL (no metrics) on ENOMEM. */
struct rlc_metrics *metrics_new(rlc_client *c);
void metrics_free(struct rlc_metrics *m);

/* A hold of l was found lost (reason: RLC_E_LOST or an I/O status): the
 * log line (the engine counts it). */
void metrics_lost(rlc_client *c, const rlc_lock *l, int reason);
/* Queues a line of the engine's (engine_driver.h's log callback). */
void metrics_log(rlc_client *c, int level, const char *line);
/* Before the engine is freed: its counters are kept for rlc_client_metrics. */
void metrics_keep_engine(rlc_client *c);
/* Hands queued log lines to the callback; call with no library lock held. */
void metrics_flush_log(rlc_client *c);
/* rlc_client_free: hands over the lines still queued, then silences the
 * log; once it returns, the callback neither runs (unless this is its own
 * thread) nor will run. */
void metrics_close(rlc_client *c);

#endif
