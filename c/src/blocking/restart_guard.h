/*
 * restart_guard.h - antirez's "delayed restart", done by the client: a node
 * that restarted (lost its keys) within the last max lease does not count
 * toward a quorum until that time has passed.
 */
#ifndef RLC_RESTART_GUARD_H
#define RLC_RESTART_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rlc_client;
struct mux_req;

/* Whether the guard is on: option restart_guard, or by default N >= 3. */
bool restart_guard_on(const struct rlc_client *c);

/* Sends INFO server to every node on owner's connections, pipelined with
 * the acquire that follows, so it adds no round trip. */
void restart_guard_send(struct rlc_client *c, uint64_t owner, struct mux_req **reqs);

/* Waits for those answers, records run ids and restarts, raises the
 * client's max lease to lease, and sets guarded[i] for each node that
 * restarted within the last max lease. Returns how many; why gets a phrase
 * for the error message, *wait_ms how long until the first guard ends. */
int restart_guard_collect(struct rlc_client *c, struct mux_req **reqs, int64_t lease,
                          bool *guarded, char *why, size_t why_size, int64_t *wait_ms);

#endif
