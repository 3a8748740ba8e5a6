/*
 * callbacks.c - the on_lost callbacks (see callbacks.h).
 *
 * They run on the driver's loss thread (engine_driver.c, "rlc-lost-cb"),
 * the one that hears the engine's lost holds: a client has no thread of its
 * own for them. On that thread an owner-0 handle cannot act for "the
 * calling thread" (it is ours, not the application's): the handle whose
 * callback runs acts for the lost hold's owner, and every other owner-0
 * handle is refused (see redlockc.h).
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

/* Set on the loss thread while it runs callbacks. */
static __thread bool on_callback_thread;
static __thread const rlc_lock *callback_lock;
static __thread uint64_t callback_owner;

void client_run_lost(rlc_client *c)
{
    on_callback_thread = true;
    while (c->lost_head && !atomic_load(&c->stopping)) {
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
}

void client_set_on_lost(rlc_lock *l, rlc_lost_fn fn, rlc_lost_owner_fn fn2, void *user)
{
    l->on_lost = fn;
    l->on_lost_owner = fn2;
    l->on_lost_user = user;
}

void client_queue_lost(rlc_client *c, rlc_lock *l, uint64_t owner, int reason)
{
    metrics_lost(c, l, reason); /* counted and logged whether or not a callback waits */
    if (!l->on_lost && !l->on_lost_owner)
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
    while (c->in_callback == l && !on_callback_thread)
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
