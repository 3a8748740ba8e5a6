/*
 * tracking.h - loss pushed at once: Redis' own invalidation messages
 * (CLIENT TRACKING, RESP2 redirect) tell a holder that its lock key changed,
 * and a read-only verify round decides, by the renewal's own rule, whether
 * the hold is lost. docs/DESIGN.md, "Loss pushed at once".
 *
 * Everything here runs on the client's background thread; holds are read and
 * marked under the client's mutex.
 */
#ifndef RLC_TRACKING_H
#define RLC_TRACKING_H

#include <poll.h>
#include <stdint.h>

struct rlc_client;
struct tracking;

/* NULL without memory. A client with loss_push=0 gets one that never
 * connects. */
struct tracking *tracking_new(struct rlc_client *c);
void tracking_free(struct tracking *t);

/* Fills pfd with the sockets to watch (at most max), starts a verify round
 * for holds whose key changed (or that were never verified), and lowers
 * *next_ns to its next timer. Returns the count. */
int tracking_prepare(struct tracking *t, struct pollfd *pfd, int max, int64_t *next_ns);

/* Handles what poll() reported on those sockets. */
void tracking_service(struct tracking *t, const struct pollfd *pfd, int n);

#endif
