/*
 * watchdog.h - keeping watchdog locks alive, and noticing when they are not.
 */
#ifndef RLC_WATCHDOG_H
#define RLC_WATCHDOG_H

#include <stdint.h>

#include "state.h"

/* Renews every watchdog hold that is due, in one pipelined batch per node,
 * marks holds lost and runs their on_lost callbacks. Runs on the client's
 * background thread. Returns when it next has work (RLC_FOREVER_NS: none). */
int64_t watchdog_run(rlc_client *c);

#endif
