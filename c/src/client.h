/*
 * client.h - what a client and a lock handle hold, shared by the library's
 * modules (never by callers: they see opaque pointers).
 */
#ifndef RLC_CLIENT_H
#define RLC_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "redlockc.h"
#include "mux.h"
#include "options.h"
#include "owner.h"
#include "uri.h"

struct hold;
struct pubsub;

#define RLC_HOLD_BUCKETS 1024

struct rlc_client {
    atomic_int refs;            /* the caller's, each lock's, each call in flight */
    unsigned fork_generation;   /* owner_fork_generation() at creation */
    char uuid[RLC_UUID_LEN + 1];
    struct rlc_options opts;
    struct node_addr *nodes;
    int n_nodes;
    int quorum;                 /* n/2 + 1 */
    int64_t call_timeout_ms;    /* io_timeout_ms for one node, node_timeout_ms for N */
    struct mux *muxes;          /* n_nodes x pool_size, node-major */

    /* Everything below is guarded by mu. */
    pthread_mutex_t mu;
    atomic_bool closed;
    struct hold *renewing;      /* watchdog holds (doubly linked) */
    struct hold *graveyard;     /* freed holds a watchdog round may still see */
    bool round_busy;            /* a watchdog round is between its two locked phases */
    uint64_t next_hold_id;
    struct hold *hold_index[RLC_HOLD_BUCKETS]; /* holds by (key, owner), see hold.h */
    rlc_lock *in_callback;      /* the lock whose on_lost runs now, or NULL */
    pthread_cond_t callback_done;
    int64_t watchdog_wake_ns;   /* when the watchdog thread plans to wake */

    struct pubsub *pubsub;
    pthread_t thread;           /* watchdog + pub/sub */
    bool thread_started;
    int wake_fd;                /* eventfd that wakes the thread */
    atomic_bool stopping;
    struct rlc_metrics *metrics; /* metrics.c: counters and the log callback, or NULL */
};

struct rlc_lock {
    rlc_client *client;
    char *key;                  /* key_prefix + name */
    size_t key_len;
    char *channel;              /* redisson_lock__channel:{key} */
    size_t channel_len;
    char *token_key;            /* redisson_lock_token:{key} */
    size_t token_key_len;
    uint64_t owner;             /* 0: the calling thread */

    /* Guarded by client->mu. */
    rlc_lost_fn on_lost;
    void *on_lost_user;
    struct hold *holds;         /* one per owner holding it through this handle */
};

/* Enters a call on c: RLC_OK, or RLC_E_CLOSED (freed, or a forked child)
 * with the thread's message set. Every RLC_OK is paired with client_leave. */
int client_enter(rlc_client *c);
void client_leave(rlc_client *c);

/* Takes / drops a reference held by a lock handle. */
void client_ref(rlc_client *c);
void client_unref(rlc_client *c);

/* The calling thread's connection to node i. */
struct mux *client_mux(rlc_client *c, int node);

/* Wakes the watchdog thread to recompute its schedule. */
void client_wake_thread(rlc_client *c);

/* The hash field "<uuid>:<owner>" for owner (0: the calling thread). */
int client_field(const rlc_client *c, uint64_t owner, char *buf, size_t size);

#endif
