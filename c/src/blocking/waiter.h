/*
 * waiter.h - how one thread wakes another that waits in mux_wait: an eventfd
 * per thread, so that a waiter can sleep in the same poll() as the sockets
 * it reads for others.
 */
#ifndef RLC_WAITER_H
#define RLC_WAITER_H

struct waiter {
    int efd;
    unsigned fork_generation;
    struct waiter *next; /* on the free list, after its thread exited */
};

/* The calling thread's waiter; NULL if no eventfd could be made. */
struct waiter *waiter_self(void);

void waiter_wake(struct waiter *w);

/* Clears pending wake-ups (after poll() said the eventfd is readable). */
void waiter_drain(struct waiter *w);

#endif
