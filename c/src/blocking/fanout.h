/*
 * fanout.h - one command to every node at once, and what came back.
 */
#ifndef RLC_FANOUT_H
#define RLC_FANOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

struct fanout {
    int n;
    struct mux_result res[RLC_MAX_NODES];
    int64_t started_ns;  /* before the first send: Redlock's elapsed time starts here */
};

/* Sends cmd to every node (owner's connection to each, see client_mux), then
 * waits for all replies, each node within the client's per-node deadline.
 * A NULL cmd (formatting ran out of memory) fails every node. */
void fanout_run(rlc_client *c, uint64_t owner, struct rlc_cmd *cmd, const struct script *s,
                struct fanout *f);

/* Frees the replies. */
void fanout_clear(struct fanout *f);

/* Sends cmd, reply unread, to each node i with which[i], on owner's
 * connection. redo: cmd may run twice (an undo, a last release), so if its
 * connection breaks before it is answered it goes out again on the next. */
void fanout_detached(rlc_client *c, uint64_t owner, struct rlc_cmd *cmd,
                     const struct script *s, const bool *which, bool redo);

/* Node i's reply if it is a usable answer (not an error reply), else NULL. */
const redisReply *fanout_reply(const struct fanout *f, int i);

/* Reports a fan-out that got fewer than a quorum of usable answers: sets the
 * thread's message (naming each failing node, and the key) and returns the
 * status: the node's own one for a single node; RLC_E_SERVER when enough
 * nodes answered but with errors; else RLC_E_NO_QUORUM. */
int fanout_fail(const rlc_client *c, const struct fanout *f, const char *key);

#endif
