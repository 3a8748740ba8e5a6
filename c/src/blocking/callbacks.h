/*
 * callbacks.h - the on_lost callbacks and their queue.
 *
 * on_lost callbacks run on the driver's loss thread (engine_driver.h), fed
 * from the engine's lost holds: a callback may block (wait for a lock, write
 * to a slow pipe) without ever delaying a renewal or a message. They run one
 * at a time, in the order the holds were found lost.
 */
#ifndef RLC_CALLBACKS_H
#define RLC_CALLBACKS_H

#include <stdint.h>

#include "state.h"

/* Under mu: sets l's callback (both NULL: none). */
void client_set_on_lost(rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2, void *user);

/* Under mu: queues l's callback for a lost hold of owner (client_run_lost
 * runs it). */
void client_queue_lost(rlc_client *c, rlc_lock *l, uint64_t owner, int reason);

/* Under mu, on the loss thread: runs the queued callbacks, each with mu
 * released, until none is left or the client stops. */
void client_run_lost(rlc_client *c);

/* Under mu: drops l's queued callbacks and waits until its running one
 * returns, unless the caller is that callback (rlc_lock_free). */
void client_forget_lost(rlc_client *c, rlc_lock *l);

/* For an owner-0 handle on the loss thread: 1 and *owner when l is the
 * handle whose callback runs (it acts for the lost hold's owner); -1 for any
 * other owner-0 handle (refused); 0 on any other thread. */
int client_callback_owner(const rlc_lock *l, uint64_t *owner);

/* At the client's end (no thread of it runs): frees the queued callbacks. */
void client_drop_lost_queue(rlc_client *c);

#endif
