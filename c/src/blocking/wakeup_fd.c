/*
 * wakeup_fd.c - per-thread eventfds, made on first use and closed at thread exit.
 *
 * A child process after fork() inherits its parent's eventfd, whose counter
 * is shared with the parent: a wake-up meant for the child could be eaten by
 * the parent. So a wakeup fd remembers the fork generation it was made in and a
 * child gets a fresh one.
 *
 * A wakeup fd is never freed while the process runs: at thread exit it goes to
 * a free list for the next new thread. mux.c wakes threads after unlocking,
 * by which time the woken thread may have finished and exited; its waiter
 * must still be a valid eventfd then (a closed one could have been reused
 * for a socket). Waking a recycled one is only a spurious wake-up. The
 * list holds at most as many as threads ever ran at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "owner.h"
#include "wakeup_fd.h"

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread struct wakeup_fd *mine;

static pthread_mutex_t free_mu = PTHREAD_MUTEX_INITIALIZER;
static struct wakeup_fd *free_list;

/* Thread exit: keep the wakeup fd for the next thread (see the top). */
static void recycle(void *p)
{
    struct wakeup_fd *w = p;
    pthread_mutex_lock(&free_mu);
    w->next = free_list;
    free_list = w;
    pthread_mutex_unlock(&free_mu);
}

static void discard(struct wakeup_fd *w)
{
    close(w->efd);
    free(w);
}

/* A wakeup fd of this process from the free list, or NULL. Ones inherited
 * across fork() share their counter with the parent: those are discarded. */
static struct wakeup_fd *reuse(unsigned gen)
{
    pthread_mutex_lock(&free_mu);
    struct wakeup_fd *w;
    while ((w = free_list) && w->fork_generation != gen) {
        free_list = w->next;
        discard(w);
    }
    if (w)
        free_list = w->next;
    pthread_mutex_unlock(&free_mu);
    return w;
}

/* free_mu is held across fork(), so that a child never inherits it locked
 * by a thread that does not exist there. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&free_mu);
}

static void fork_done(void)
{
    pthread_mutex_unlock(&free_mu);
}

static void make_key(void)
{
    pthread_key_create(&key, recycle);
    pthread_atfork(fork_prepare, fork_done, fork_done);
}

struct wakeup_fd *wakeup_fd_self(void)
{
    unsigned gen = owner_fork_generation();
    if (mine && mine->fork_generation == gen)
        return mine;
    pthread_once(&key_once, make_key);
    if (mine) { /* inherited across fork(): drop the shared eventfd */
        discard(mine);
        mine = NULL;
        pthread_setspecific(key, NULL);
    }
    struct wakeup_fd *w = reuse(gen);
    if (w) {
        wakeup_fd_drain(w); /* wake-ups meant for the thread that had it */
    } else {
        w = malloc(sizeof *w);
        if (!w)
            return NULL;
        w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w->efd < 0) {
            free(w);
            return NULL;
        }
        w->fork_generation = gen;
    }
    pthread_setspecific(key, w);
    mine = w;
    return w;
}

void wakeup_fd_wake(struct wakeup_fd *w)
{
    uint64_t one = 1;
    while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

void wakeup_fd_drain(struct wakeup_fd *w)
{
    uint64_t v;
    while (read(w->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}
