/*
 * attempt_ids.h - one attempt-id space per client.
 *
 * Every script that takes a level names its attempt "<client-uuid>:<n>"
 * (scripts.c, "Attempts"); a record, a tombstone and a release's "up to"
 * scan all trust that no two attempts of one client share n. So every lock
 * kind draws n from this one counter of the client's engine, whichever
 * layer runs it: the engine's own rounds, and the lock family's calls made
 * on the caller's thread (hence atomic, the one engine field another thread
 * touches).
 */
#ifndef RLC_ATTEMPT_IDS_H
#define RLC_ATTEMPT_IDS_H

#include <stdint.h>

#include "redlockc.h"

/* A new attempt number of e's client, never given before (from 1). */
uint64_t eng_new_attempt(rlc_engine *e);

/* The newest attempt number given so far (0: none). */
uint64_t eng_last_attempt(const rlc_engine *e);

#endif
