/*
 * callbacks.c - the on_lost callback thread (see callbacks.h).
 *
 * On that thread an owner-0 handle cannot act for "the calling thread" (it
 * is ours, not the application's): the handle whose callback runs acts for
 * the lost hold's owner, and every other owner-0 handle is refused (see
 * redlockc.h).
 */
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>

#include "callbacks.h"
#include "metrics.h"

struct lost_event {
    struct lost_event *next;
    rlc_lock *lock;
    uint64_t owner;
    int reason;
};

/* Set on a callback thread while its callback runs. */
static __thread bool on_callback_thread;
static __thread const rlc_lock *callback_lock;
static __thread uint64_t callback_owner;

static void *callback_main(void *arg)
{
    rlc_client *c = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-callbacks");
    on_callback_thread = true;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->lost_head && !atomic_load(&c->stopping))
            pthread_cond_wait(&c->lost_ready, &c->mu);
        if (atomic_load(&c->stopping))
            break;
        struct lost_event *e = c->lost_head;
        if (!(c->lost_head = e->next))
            c->lost_tail = NULL;
        rlc_lock *l = e->lock;
        rlc_lost_fn fn = l->on_lost;
        rlc_lost_owner_fn fn2 = l->on_lost_owner;
        void *user = l->on_lost_user;
        if (fn || fn2) {
            c->in_callback = l;
            callback_lock = l;
            callback_owner = e->owner;
            pthread_mutex_unlock(&c->mu);
            if (fn2)
                fn2(l, e->owner, e->reason, user);
            else
                fn(l, e->reason, user);
            pthread_mutex_lock(&c->mu);
            callback_lock = NULL; /* l may be freed by now: never touched again */
            c->in_callback = NULL;
            pthread_cond_broadcast(&c->callback_done);
        }
        free(e);
    }
    pthread_mutex_unlock(&c->mu);
    client_unref(c);
    return NULL;
}

int client_set_on_lost(rlc_client *c, rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2,
                       void *user)
{
    if ((fn || fn2) && !c->cb_started && !atomic_load(&c->stopping)) {
        client_ref(c); /* the callback thread's */
        if (pthread_create(&c->cb_thread, NULL, callback_main, c) != 0) {
            client_unref(c); /* never the last: the caller's call holds one */
            return RLC_E_NOMEM;
        }
        c->cb_started = true;
    }
    l->on_lost = fn;
    l->on_lost_owner = fn2;
    l->on_lost_user = user;
    return RLC_OK;
}

void client_queue_lost(rlc_client *c, rlc_lock *l, uint64_t owner, int reason)
{
    metrics_lost(c, l, reason); /* counted and logged whether or not a callback waits */
    if ((!l->on_lost && !l->on_lost_owner) || !c->cb_started)
        return;
    struct lost_event *e = malloc(sizeof *e);
    if (!e) /* no memory: the loss still shows in is_held and every release */
        return;
    *e = (struct lost_event){NULL, l, owner, reason};
    if (c->lost_tail)
        c->lost_tail->next = e;
    else
        c->lost_head = e;
    c->lost_tail = e;
    pthread_cond_signal(&c->lost_ready);
}

void client_forget_lost(rlc_client *c, rlc_lock *l)
{
    c->lost_tail = NULL;
    for (struct lost_event **p = &c->lost_head; *p;) {
        struct lost_event *e = *p;
        if (e->lock == l) {
            *p = e->next;
            free(e);
        } else {
            c->lost_tail = e;
            p = &e->next;
        }
    }
    bool on_thread = c->cb_started && pthread_equal(pthread_self(), c->cb_thread);
    while (c->in_callback == l && !on_thread)
        pthread_cond_wait(&c->callback_done, &c->mu);
}

int client_callback_owner(const rlc_lock *l, uint64_t *owner)
{
    if (!on_callback_thread)
        return 0;
    if (l != callback_lock)
        return -1;
    *owner = callback_owner;
    return 1;
}

void client_drop_lost_queue(rlc_client *c)
{
    while (c->lost_head) {
        struct lost_event *e = c->lost_head;
        c->lost_head = e->next;
        free(e);
    }
}
