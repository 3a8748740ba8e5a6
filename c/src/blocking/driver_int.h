/*
 * driver_int.h - what the blocking driver's two files share: the driver
 * itself (struct edrv) and its operations' waiters. engine_driver.c is the
 * threads (who leads, who sleeps, who is woken, the inbox); driver_io.c the
 * connections under the leader (open, write, read, poke), which knows
 * nothing of threads but the flags it must look at. Never above
 * engine_driver.h.
 */
#ifndef RLC_DRIVER_INT_H
#define RLC_DRIVER_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "driver_conn.h"
#include "options.h"

struct thread_sem;
struct edrv_outcome;
struct edrv;

/* Messages kept here (a connection's failure, a lost hold's reason): the
 * size of engine_driver.h's EDRV_MSGLEN, which this header does not
 * include (it sits below engine_driver.c's face). */
#define DRV_MSGLEN 512

#define MAX_POLL_MS 1000 /* the leader looks again at least this often */
/* The background thread leads only after callers left it this long: a
 * thread that calls again at once finds the lead free instead of having to
 * take it back (two thread switches a call). What the background thread
 * reads late by this much: a loss push, between calls. */
#define LINGER_MS 2
/* While callers lead, the background thread looks this often (or sooner,
 * when a caller that stops leading leaves a timer due before then): woken
 * each LINGER_MS instead, it cost a thread switch every 2 ms of a busy
 * thread's calls. What it reads late by this much while callers come and
 * go: a loss push. */
#define BG_LOOK_MS 50
#define DEFER_POSTS 64   /* wake-ups kept until the mutex is let go; more go at once */

struct waiter;
/* Puts w's operation into the engine: RLC_OK and its id, or a status. */
typedef int (*queue_fn)(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op);

/* An operation and the thread that waits for it (on that thread's stack). */
struct waiter {
    queue_fn q;         /* how it goes into the engine, with: */
    const char *name;
    size_t name_len;
    const char *const *names; /* a multi-lock's: n_names of them */
    const size_t *name_lens;
    int n_names;
    int kind;           /* the lock kind (RLC_KIND_*) of an acquire or release */
    int64_t thread_wait; /* a fair acquire's */
    uint64_t owner;
    int64_t a, b;
    int64_t permits;    /* a semaphore's call */
    const char *value;  /* a fenced write's, an expirable permit's id */
    size_t value_len;
    const struct cancel_point *cp; /* an acquire's handle's cancels (edrv_cancel), or NULL */
    bool acquire;       /* an acquire (edrv_close ends it) */
    bool closed;        /* ended by edrv_close: its cancel reads RLC_E_CLOSED */
    uint64_t op;        /* the engine's id, once drained (0 before) */
    struct edrv_outcome *out;
    atomic_bool done;   /* set under the mutex, read after a wake-up without it */
    struct thread_sem *ts; /* its thread's: posted when done or offered the lead */
    struct waiter *next;   /* d->waiters: in the engine, not done */
    struct waiter *in_next; /* d->inbox */
};

struct lost {
    struct lost *next;
    int kind;
    uint64_t owner;
    int status;
    char message[DRV_MSGLEN];
    size_t name_len;
    char name[];
};

struct edrv {
    pthread_mutex_t mu;
    rlc_engine *e;
    int n;                   /* the engine's connections */
    struct dconn *c;         /* n of them */
    bool *broken;            /* a write failed outside the leader: it closes it */
    int first_sentinel, n_sentinels; /* the sentinels' discovery connections */
    struct pollfd *pfd;      /* the leader's poll set: the eventfd, then up to n */
    int *pidx;
    struct host_res {        /* a resolver per host and port (resolve.h): a name is */
        char *host;          /* looked up on a thread of its own, never under mu */
        int port;
        struct resolver *r;
    } *res;
    int n_res;
    struct rlc_options opts; /* the tls_* settings, when have_opts */
    bool have_opts;
    struct tls_ctx *tls;     /* when a node is rediss:// */
    int wake_fd;
    bool leading, bg_leading;
    atomic_bool polling;     /* the leader is in poll(): bytes queued now wait for a send */
    atomic_bool poked;       /* the eventfd was written since the leader last looked */
    int64_t poll_until;      /* the leader's poll ends by then (ms) */
    _Atomic(struct waiter *) inbox; /* pushed, not yet in the engine (newest first) */
    struct waiter *waiters;  /* operations in the engine, each with its thread */
    struct waiter *offer;    /* the waiter offered the free lead, or NULL */
    struct thread_sem *to_post[DEFER_POSTS]; /* posted once the mutex is let go */
    char why[DRV_MSGLEN];   /* the last connection that failed, and why: the
                                engine's message on RLC_E_CONNECT says which node,
                                this says what went wrong (a certificate...) */
    struct conn_why {        /* per connection: why it last failed (NULL once */
        char at[200];        /* it is up again), where it went (A, as the */
        char what[DRV_MSGLEN]; /* engine names it) and what went wrong */
    } **why_of;
    int why_k;               /* the connection d->why is about (-1: none) */
    bool ever_up;            /* a data connection was up once: bytes of ours may
                                be on a server (edrv_free waits for them) */
    int n_to_post;
    struct thread_sem *bg_ts; /* the background thread sleeps on it */
    int64_t caller_left;     /* when a caller last stopped leading (ms) */
    int64_t bg_wake_at;      /* when the sleeping background thread looks next (ms) */
    pthread_cond_t turned;   /* broadcast after each turn (edrv_free waits on it) */
    bool stopping;
    bool closing;            /* edrv_close: no new operation, waits ended */
    pthread_t bg;
    bool bg_started;
    unsigned fork_generation; /* owner_fork_generation() when made: another
                                 is a forked child, where no thread of ours
                                 runs and the mutex may stay held */

    void (*lost_fn)(void *user, int kind, const char *name, size_t name_len, uint64_t owner,
                    int status, const char *message); /* edrv_lost_fn */
    void *lost_user;
    void (*log_fn)(void *user, int level, const char *line); /* edrv_log_fn; under mu */
    void *log_user;
    pthread_mutex_t lost_mu; /* the callback thread's queue: never d->mu there */
    struct lost *lost_head, *lost_tail;
    pthread_cond_t lost_cv;
    bool cb_running;         /* a callback runs now (under lost_mu) */
    pthread_cond_t cb_done;  /* broadcast as each callback returns */
    bool cb_stop;            /* under lost_mu */
    bool free_on_exit;       /* under lost_mu: edrv_free ran in a callback, the
                                loss thread frees the driver as it ends */
    pthread_t cb;
    bool cb_started;
};

int64_t dio_now_ms(void);

/* Pokes the leader out of poll() (once until it looks). */
void dio_poke(struct edrv *d);

/* After a call outside the leader: pokes it if its poll cannot see what
 * changed (a connection to open or close, bytes the socket would not take,
 * an earlier deadline, a caller that would lead instead of the background). */
void dio_poke_if_needed(struct edrv *d);

/* Opens what the engine wants open and closes what it gave up on. Leader. */
void dio_open_wanted(struct edrv *d, int64_t now);

/* Writes every connection's pending bytes while the sockets take them; a
 * failure outside the leader only marks the connection (D1). */
void dio_flush_all(struct edrv *d, bool leader, int64_t now);

/* The leader's poll set (d->pfd, d->pidx): the eventfd, then every open
 * connection with what it waits for. Returns how many; *wait_ms until the
 * engine's deadline (at most MAX_POLL_MS). */
int dio_poll_set(struct edrv *d, int64_t now, int64_t *wait_ms);

/* After poll() said ready: connects, handshakes and reads. Leader. */
void dio_serve(struct edrv *d, int np, int ready, int64_t now);

/* Closes every socket and forgets the name lookups (at the end); in a
 * forked child, with dconn_abandon (child). */
void dio_close_all(struct edrv *d, bool child);

/* The engine's message msg, with what the driver read of each connection
 * it names ("cannot connect to A", "connection to A lost") put behind it,
 * into out: "cannot connect to 127.0.0.1:1: Connection refused". A reason
 * that names A itself (a TLS handshake's) stands in for the phrase. On
 * RLC_E_CONNECT (connect) a message that names no such connection gets the
 * last failure, if any, in parentheses. */
void dio_explain(const struct edrv *d, const char *msg, bool connect, char *out, size_t size);

#endif
