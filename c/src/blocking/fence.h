/*
 * fence.h - fencing tokens: the token as a quorum register, and fenced writes
 * at a resource that check it (docs/DESIGN.md, "Fencing tokens").
 */
#ifndef RLC_FENCE_H
#define RLC_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

/* Over N nodes, stores the new hold's token on the granting nodes whose
 * counter is lower (granted[i], tokens[i]: what node i's acquire returned),
 * and waits for their answers. Returns RLC_OK when a quorum of granting nodes
 * now stores at least `token` (no round trip when enough of them already
 * counted to it), else a failure with the thread's message set: the caller
 * undoes the acquire as after any failed round. *done_ns: when the last
 * answer came (the caller's validity counts until then). */
int fence_store_token(rlc_lock *l, uint64_t owner, const uint64_t *tokens, const bool *granted,
                      uint64_t token, int64_t *done_ns);

#endif
