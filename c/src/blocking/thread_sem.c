/*
 * thread_sem.c - a wake-up (an eventfd) per thread, recycled when the
 * thread ends (see thread_sem.h). A thread's destructor puts it on a free
 * list instead of closing it: a waker that read its address under a mutex
 * may still post it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "thread_sem.h"

static pthread_mutex_t free_mu = PTHREAD_MUTEX_INITIALIZER;
static struct thread_sem *free_list;
static struct thread_sem *all; /* under free_mu */
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread struct thread_sem *self;

/* In a forked child every eventfd made so far is the parent's too (one
 * kernel object behind both descriptors): a post here would wake a thread
 * there, a wait here steal a wake-up meant for it, and a child whose
 * parent had waited on the engine hung in its first call. The child makes
 * its own; the parent's stay (reachable, never posted) in case a waker of
 * the parent's client, refused in the child, still names one. */
static void before_fork(void)
{
    pthread_mutex_lock(&free_mu); /* no other thread holds it in the copy */
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&free_mu);
}

static void forked_child(void)
{
    free_list = NULL; /* `all` keeps them reachable; nothing hands them out */
    self = NULL;
    pthread_setspecific(key, NULL);
    pthread_mutex_unlock(&free_mu);
}

static void give_back(void *p)
{
    struct thread_sem *t = p;
    pthread_mutex_lock(&free_mu);
    t->next = free_list;
    free_list = t;
    pthread_mutex_unlock(&free_mu);
}

static void make_key(void)
{
    pthread_key_create(&key, give_back);
    pthread_atfork(before_fork, after_fork_parent, forked_child);
}

struct thread_sem *thread_sem_self(void)
{
    if (self)
        return self;
    pthread_once(&key_once, make_key);
    pthread_mutex_lock(&free_mu);
    struct thread_sem *t = free_list;
    if (t)
        free_list = t->next;
    pthread_mutex_unlock(&free_mu);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return NULL;
        t->efd = eventfd(0, EFD_CLOEXEC); /* blocking: a wait is one read */
        if (t->efd < 0) {
            free(t);
            return NULL;
        }
        pthread_mutex_lock(&free_mu);
        t->all_next = all;
        all = t;
        pthread_mutex_unlock(&free_mu);
    }
    if (pthread_setspecific(key, t) != 0) {
        give_back(t);
        return NULL;
    }
    self = t;
    return t;
}

void thread_sem_post(struct thread_sem *t)
{
    uint64_t one = 1;
    ssize_t w = write(t->efd, &one, sizeof one);
    (void)w; /* a full counter wakes the thread as well */
}

void thread_sem_wait(struct thread_sem *t)
{
    uint64_t v;
    while (read(t->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

void thread_sem_wait_ms(struct thread_sem *t, int64_t ms)
{
    struct pollfd p = {t->efd, POLLIN, 0};
    uint64_t v;
    if (poll(&p, 1, ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms) > 0 &&
        read(t->efd, &v, sizeof v) < 0)
        return; /* EINTR: a wake-up early */
}
