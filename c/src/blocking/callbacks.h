/*
 * callbacks.h - the client's on_lost callback thread and its queue.
 *
 * on_lost callbacks run on a second thread, started with the first callback
 * set, from a queue the watchdog (and loss tracking) fills: a callback may
 * block (wait for a lock, write to a slow pipe) without ever delaying a
 * renewal or a message. They run one at a time, in the order the holds were
 * found lost.
 */
#ifndef RLC_CALLBACKS_H
#define RLC_CALLBACKS_H

#include <stdint.h>

#include "state.h"

/* Under mu: sets l's callback (both NULL: none), starting the client's
 * callback thread with the first one. RLC_OK or RLC_E_NOMEM. */
int client_set_on_lost(rlc_client *c, rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2,
                       void *user);

/* Under mu: queues l's callback for a lost hold of owner; the callback
 * thread runs it (never the watchdog thread, which must go on renewing). */
void client_queue_lost(rlc_client *c, rlc_lock *l, uint64_t owner, int reason);

/* Under mu: drops l's queued callbacks and waits until its running one
 * returns, unless the caller is that callback (rlc_lock_free). */
void client_forget_lost(rlc_client *c, rlc_lock *l);

/* For an owner-0 handle on a callback thread: 1 and *owner when l is the
 * handle whose callback runs (it acts for the lost hold's owner); -1 for any
 * other owner-0 handle (refused); 0 on any other thread. */
int client_callback_owner(const rlc_lock *l, uint64_t *owner);

/* At the client's end (no thread of it runs): frees the queued callbacks. */
void client_drop_lost_queue(rlc_client *c);

#endif
