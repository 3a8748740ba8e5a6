/*
 * thread_sem.h - a wake-up per thread, for waking a thread that sleeps on
 * an operation another thread ends (engine_driver.c).
 *
 * It lives as long as its thread (and is then kept for the next thread,
 * never freed), not as long as one operation: so a waker may post it
 * after letting go of its mutex, when the operation's own memory may be
 * gone already. A post that arrives late is a spurious wake-up, which a
 * sleeper tolerates by looking at its operation again; posts not yet taken
 * count as one (so a thread is not made to take them before each wait:
 * one system call less a call).
 *
 * It is an eventfd: posts coalesce,
 * and a post given to a thread that is not asleep costs it nothing more
 * than one read at its next wait.
 */
#ifndef RLC_THREAD_SEM_H
#define RLC_THREAD_SEM_H

#include <stdint.h>

struct thread_sem {
    int efd;
    struct thread_sem *next; /* on the free list, after its thread ended */
    struct thread_sem *all_next; /* every one ever made: they live as long as
                                    the process, reachable from here (a forked
                                    child keeps the parent's apart, unused: their
                                    eventfds are the parent's too) */
};

/* The calling thread's wake-up; NULL without memory or descriptors. */
struct thread_sem *thread_sem_self(void);

/* Wakes its thread (or makes its next wait return at once). */
void thread_sem_post(struct thread_sem *t);

/* Sleeps until posted, and takes the posts. */
void thread_sem_wait(struct thread_sem *t);

/* The same, for at most ms. */
void thread_sem_wait_ms(struct thread_sem *t, int64_t ms);

#endif
