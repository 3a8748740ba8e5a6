/*
 * thread_sem.h - a semaphore per thread, for waking a thread that sleeps
 * on an operation another thread ends (engine_driver.c).
 *
 * It lives as long as its thread (and is then kept for the next thread,
 * never freed), not as long as one operation: so a waker may post it
 * after letting go of its mutex, when the operation's own memory may be
 * gone already. A post that arrives late is a spurious wake-up, which a
 * sleeper tolerates by looking at its operation again.
 */
#ifndef RLC_THREAD_SEM_H
#define RLC_THREAD_SEM_H

#include <semaphore.h>

struct thread_sem {
    sem_t sem;
    struct thread_sem *next; /* on the free list, after its thread ended */
};

/* The calling thread's semaphore; NULL without memory. */
struct thread_sem *thread_sem_self(void);

/* Takes the posts that are left over from earlier operations. */
void thread_sem_drain(struct thread_sem *t);

/* Sleeps until posted (EINTR is slept through). */
void thread_sem_wait(struct thread_sem *t);

#endif
