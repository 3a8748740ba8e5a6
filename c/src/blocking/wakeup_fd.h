/*
 * wakeup_fd.h - how one thread wakes another that waits in mux_wait: an eventfd
 * per thread, so that a waiter can sleep in the same poll() as the sockets
 * it reads for others.
 */
#ifndef RLC_WAKEUP_FD_H
#define RLC_WAKEUP_FD_H

struct wakeup_fd {
    int efd;
    unsigned fork_generation;
    struct wakeup_fd *next; /* on the free list, after its thread exited */
};

/* The calling thread's wakeup fd; NULL if no eventfd could be made. */
struct wakeup_fd *wakeup_fd_self(void);

void wakeup_fd_wake(struct wakeup_fd *w);

/* Clears pending wake-ups (after poll() said the eventfd is readable). */
void wakeup_fd_drain(struct wakeup_fd *w);

#endif
