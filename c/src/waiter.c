/*
 * waiter.c - per-thread eventfds, made on first use and closed at thread exit.
 *
 * A child process after fork() inherits its parent's eventfd, whose counter
 * is shared with the parent: a wake-up meant for the child could be eaten by
 * the parent. So a waiter remembers the fork generation it was made in and a
 * child gets a fresh one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "owner.h"
#include "waiter.h"

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread struct waiter *mine;

static void destroy(void *p)
{
    struct waiter *w = p;
    close(w->efd);
    free(w);
}

static void make_key(void)
{
    pthread_key_create(&key, destroy);
}

struct waiter *waiter_self(void)
{
    unsigned gen = owner_fork_generation();
    if (mine && mine->fork_generation == gen)
        return mine;
    pthread_once(&key_once, make_key);
    if (mine) { /* inherited across fork(): drop the shared eventfd */
        destroy(mine);
        mine = NULL;
        pthread_setspecific(key, NULL);
    }
    struct waiter *w = malloc(sizeof *w);
    if (!w)
        return NULL;
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        free(w);
        return NULL;
    }
    w->fork_generation = gen;
    pthread_setspecific(key, w);
    mine = w;
    return w;
}

void waiter_wake(struct waiter *w)
{
    uint64_t one = 1;
    while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

void waiter_drain(struct waiter *w)
{
    uint64_t v;
    while (read(w->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}
