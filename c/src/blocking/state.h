/*
 * state.h - what a client and a lock handle hold, shared by the library's
 * modules (never by callers: they see opaque pointers), and the small calls
 * every module makes on them.
 *
 * It sits below every module that a client is made of (the handles, the
 * callbacks, the family): they include this, never client.c's
 * side, so that the includes form no circle. client.c, which puts a client
 * together and takes it apart, is the only file above them all; the last
 * reference frees a client through its destroy pointer, set by client.c.
 */
#ifndef RLC_STATE_H
#define RLC_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "redlockc.h"
#include "lock_calls.h"
#include "options.h"
#include "owner.h"
#include "uri.h"

struct edrv;
struct handle_hold;
struct lost_event;

struct rlc_client {
    atomic_int refs;            /* the caller's, each lock's, each call in flight */
    atomic_int calls;           /* calls in flight (client_enter .. client_leave) */
    void (*destroy)(struct rlc_client *c); /* client.c: frees it at the last reference */
    unsigned fork_generation;   /* owner_fork_generation() at creation */
    char uuid[RLC_UUID_LEN + 1];
    struct rlc_options opts;
    struct node_addr *nodes;
    int n_nodes;
    int quorum;                 /* n/2 + 1 */
    int64_t call_timeout_ms;    /* io_timeout_ms for one node, node_timeout_ms for N */
    struct edrv *drv;           /* the engine that runs every lock (engine_driver.h) */

    /* Everything below is guarded by mu. */
    pthread_mutex_t mu;
    atomic_bool closed;
    rlc_lock *handles;          /* every live lock handle (hnext, hprev) */
    rlc_lock *in_callback;      /* the lock whose on_lost runs now, or NULL */
    pthread_cond_t callback_done;
    struct lost_event *lost_head, *lost_tail; /* lost holds whose callback is due */
    atomic_bool stopping;       /* rlc_client_free began: no queued callback runs */
    struct rlc_metrics *metrics; /* metrics.c: counters and the log callback, or NULL */
};

struct rlc_lock {
    rlc_client *client;
    char *key;                  /* key_prefix + name */
    size_t key_len;
    const char *name;           /* in key, after the prefix: what the engine is told */
    size_t name_len;
    uint64_t owner;             /* 0: the calling thread */
    int kind;                   /* RLC_KIND_LOCK; a read-write lock's side; a fair lock */
    int64_t thread_wait_ms;     /* a fair lock's (rlc_engine_acquire_fair) */
    atomic_uint_fast64_t cancels; /* rlc_lock_cancel calls so far (cancel.h) */

    /* Guarded by client->mu. At most one of on_lost, on_lost_owner is set. */
    rlc_lost_fn on_lost;
    rlc_lost_owner_fn on_lost_owner;
    void *on_lost_user;
    struct handle_hold *holds;  /* one per owner holding it through this handle */
    rlc_lock *hnext, *hprev;    /* in client->handles */
};

/* Whether c was made before a fork() (this is the child). */
bool client_forked(const rlc_client *c);

/* Enters a call on c: RLC_OK, or RLC_E_CLOSED (freed, or a forked child)
 * with the thread's message set. Every RLC_OK is paired with client_leave. */
int client_enter(rlc_client *c);
void client_leave(rlc_client *c);

/* Takes / drops a reference held by a lock handle. */
void client_ref(rlc_client *c);
void client_unref(rlc_client *c);

#endif
