/*
 * engine_driver.c - the blocking driver: the engine run by the threads that
 * wait on it (leader/followers), see engine_driver.h for the idea. This
 * file is the threads; driver_io.c the connections the leader runs.
 *
 * One mutex guards the engine and the connections. At most one thread
 * polls the sockets at a time: the leader. It polls without the mutex, so
 * other threads may queue operations and take their outcomes meanwhile; it
 * alone opens and closes sockets and reads, so the descriptors it polls
 * stay valid. A thread that finds something the leader's poll cannot see
 * (a connection to open, bytes the socket would not take yet, an earlier
 * deadline, a caller that wants to lead instead of the background thread)
 * pokes it with an eventfd.
 *
 * A caller does not wait for the mutex to queue its operation: it pushes
 * it on an inbox (a lock-free stack) and takes the mutex only if it is
 * free; whoever holds the mutex moves the inbox into the engine (drain),
 * and every release of the mutex looks at the inbox again (unlock), so a
 * push is never left behind. Without it, the threads a leader wakes at
 * once all queued on the mutex for their next call: at 16 threads, 1.7
 * futex calls a cycle, most of the thread switches the machine could do.
 *
 * Whoever holds the mutex after a call into the engine takes its events:
 * an operation's end goes to the thread waiting for it (its own wake-up),
 * a lost hold to the callback thread's queue. When the lead is free and
 * operations wait, it is offered to one of their threads before the mutex
 * is let go (settle_lead).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "driver_int.h"
#include "engine_driver.h"
#include "uri.h"
#include "error.h"
#include "owner.h"
#include "thread_sem.h"
#include "tls.h"

_Static_assert(EDRV_MSGLEN == DRV_MSGLEN, "a driver message fits an outcome's");

/* Wakes a sleeping caller once the mutex is let go (unlock()): woken under
 * it, 16 threads would queue on it while the leader still reads. */
static void post_later(struct edrv *d, struct thread_sem *t)
{
    if (d->n_to_post < DEFER_POSTS)
        d->to_post[d->n_to_post++] = t;
    else
        thread_sem_post(t);
}

static void pass_lead(struct edrv *d);
static void drain(struct edrv *d);

/* Before the mutex is let go: a free lead with operations waiting is
 * offered to one of their threads (D3). */
static void settle_lead(struct edrv *d)
{
    if (!d->leading && d->waiters && !d->offer)
        pass_lead(d);
}

/* Lets the mutex go, gives the wake-ups kept meanwhile, and looks at the
 * inbox once more: a push that came while the mutex was held found it
 * taken and left its operation to the holder. */
static void unlock(struct edrv *d)
{
    for (;;) {
        settle_lead(d);
        struct thread_sem *post[DEFER_POSTS];
        int n = d->n_to_post;
        for (int i = 0; i < n; i++)
            post[i] = d->to_post[i];
        d->n_to_post = 0;
        pthread_mutex_unlock(&d->mu);
        for (int i = 0; i < n; i++)
            thread_sem_post(post[i]);
        /* A pusher writes the inbox, then reads the mutex (trylock); this
         * thread writes the mutex, then reads the inbox: with a full fence
         * on both sides (here, and the push's seq_cst exchange) at least
         * one of the two sees the other's write, so no push is missed by
         * both. */
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load(&d->inbox) || pthread_mutex_trylock(&d->mu) != 0)
            return; /* empty, or the new holder will look */
        drain(d);
        dio_poke_if_needed(d);
    }
}

/* ---- events ----------------------------------------------------------- */

static void queue_lost(struct edrv *d, const rlc_engine_event *ev)
{
    if (!d->lost_fn)
        return;
    struct lost *l = malloc(sizeof *l + ev->name_len + 1);
    if (!l)
        return; /* the hold's state still says lost: hold_count, validity_ms */
    l->next = NULL;
    l->kind = (int)ev->kind;
    l->owner = ev->owner;
    l->status = ev->status;
    snprintf(l->message, sizeof l->message, "%s", ev->message ? ev->message : "");
    l->name_len = ev->name_len;
    memcpy(l->name, ev->name, ev->name_len);
    l->name[ev->name_len] = '\0';
    pthread_mutex_lock(&d->lost_mu);
    if (d->lost_tail)
        d->lost_tail->next = l;
    else
        d->lost_head = l;
    d->lost_tail = l;
    pthread_cond_signal(&d->lost_cv);
    pthread_mutex_unlock(&d->lost_mu);
}

/* Ends w's operation: out is filled and w leaves the list before its
 * thread is woken, so that the thread returns without taking the mutex
 * again. done is the last touch of w: its thread may return at once. */
static void finish(struct edrv *d, struct waiter *w, const rlc_engine_event *ev)
{
    struct edrv_outcome *o = w->out;
    o->status = w->closed && ev->status == RLC_E_CANCELED ? RLC_E_CLOSED : ev->status;
    o->token = ev->token;
    o->validity_ms = ev->validity_ms;
    o->count = ev->count;
    if (o->status == RLC_E_CLOSED)
        snprintf(o->message, sizeof o->message, "client closed while waiting");
    else
        dio_explain(d, ev->message, ev->status == RLC_E_CONNECT, o->message, sizeof o->message);
    for (struct waiter **p = &d->waiters; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    if (d->offer == w)
        d->offer = NULL; /* settle_lead offers it to another */
    if (w->ts != thread_sem_self())
        post_later(d, w->ts); /* its thread sleeps, or is about to (not us) */
    atomic_store_explicit(&w->done, true, memory_order_release);
}

/* An operation the engine refused (bad arguments, or the driver closing):
 * it never was in the engine. */
static void refuse(struct edrv *d, struct waiter *w, int status, const char *why)
{
    memset(w->out, 0, sizeof *w->out);
    w->out->status = status;
    snprintf(w->out->message, sizeof w->out->message, "%s", why);
    post_later(d, w->ts);
    atomic_store_explicit(&w->done, true, memory_order_release);
}

/* Hands every event out: under the mutex, after any call into the engine. */
static void pump(struct edrv *d)
{
    rlc_engine_event ev;
    while (rlc_engine_next_event(d->e, &ev)) {
        if (ev.type == RLC_EV_LOST) {
            queue_lost(d, &ev);
            continue;
        }
        for (struct waiter *w = d->waiters; w; w = w->next)
            if (w->op == ev.op) {
                finish(d, w, &ev);
                break;
            }
    }
    char line[512];
    int level;
    while (d->log_fn && rlc_engine_next_log(d->e, &level, line, sizeof line) > 0)
        d->log_fn(d->log_user, level, line);
}

/* ---- leading ---------------------------------------------------------- */

/* One poll of every open connection, until I/O, a poke or the deadline. */
static void turn(struct edrv *d)
{
    drain(d);
    int64_t now = dio_now_ms(), wait;
    dio_open_wanted(d, now);
    dio_flush_all(d, true, now);
    int np = dio_poll_set(d, now, &wait);
    d->poll_until = now + wait;
    atomic_store(&d->polling, true);
    unlock(d);
    int ready = poll(d->pfd, (nfds_t)np, (int)wait);
    atomic_store(&d->polling, false);
    pthread_mutex_lock(&d->mu);
    now = dio_now_ms();
    dio_serve(d, np, ready, now);
    int64_t dl = rlc_engine_deadline(d->e);
    if (dl >= 0 && dl <= now)
        rlc_engine_tick(d->e, now);
    dio_flush_all(d, true, now);
    pump(d);
    pthread_cond_broadcast(&d->turned);
}

/* Leadership is free: to the thread of the oldest operation. Its reply is
 * the next to come (a node answers in order), so the wake-up that makes it
 * the leader is the one it needed anyway: it polls, reads its own reply
 * first and returns. Offering the newest instead costs a thread switch a
 * turn. The background thread is not offered it: it looks on its own
 * within LINGER_MS (background()). */
static void pass_lead(struct edrv *d)
{
    struct waiter *oldest = NULL;
    for (struct waiter *w = d->waiters; w; w = w->next)
        if (!oldest || w->op < oldest->op)
            oldest = w;
    d->offer = oldest;
    if (oldest)
        post_later(d, oldest->ts);
}

static bool is_done(struct waiter *w)
{
    return atomic_load_explicit(&w->done, memory_order_acquire);
}

/* Moves what was pushed into the engine, oldest first. Under the mutex. */
static void drain(struct edrv *d)
{
    struct waiter *w = atomic_exchange(&d->inbox, NULL), *fifo = NULL;
    if (!w)
        return;
    while (w) {
        struct waiter *n = w->in_next;
        w->in_next = fifo;
        fifo = w;
        w = n;
    }
    int64_t now = dio_now_ms();
    for (w = fifo; w; w = fifo) {
        fifo = w->in_next;
        /* a cancel made after the call began and before it got here ends
         * it too (edrv_cancel only sees what is in the engine) */
        int rc = d->stopping || d->closing ? rlc_fail(RLC_E_CLOSED, "the client is closing")
                 : cancel_requested(w->cp)
                     ? rlc_fail(RLC_E_CANCELED, "the acquire of lock '%s' was cancelled",
                                RLC_SHOWN(w->name ? w->name : w->names[0]))
                     : w->q(d, w, now, &w->op);
        if (rc != RLC_OK) {
            refuse(d, w, rc, rlc_errmsg());
            continue;
        }
        w->next = d->waiters;
        d->waiters = w;
    }
    /* With no leader, or only the background thread (an idle client: the
     * first call after a pause must not wait for that thread to wake), the
     * bytes go now. With a caller leading, in its next send: a poke (an
     * eventfd write, poke_if_needed) costs a fraction of a loopback TCP
     * send, which runs the server's side of the socket and wakes it, and
     * the leader's one send then carries every request that came. */
    if (!d->leading || d->bg_leading)
        dio_flush_all(d, false, now);
    pump(d);
}

static void take_lead(struct edrv *d, bool bg)
{
    d->leading = true;
    d->bg_leading = bg;
    d->offer = NULL; /* a thread offered it finds it taken and sleeps again */
}

/* Runs w's operation to its end on the calling thread. */
static void run(struct edrv *d, struct waiter *w)
{
    struct waiter *top = atomic_load(&d->inbox);
    do
        w->in_next = top;
    while (!atomic_compare_exchange_weak(&d->inbox, &top, w));
    atomic_thread_fence(memory_order_seq_cst); /* see unlock() */
    bool have = pthread_mutex_trylock(&d->mu) == 0;
    if (!have)
        dio_poke(d); /* a leader in poll() drains it at once; any other holder at unlock() */
    for (;;) {
        if (have) {
            drain(d);
            if (is_done(w))
                break;
            if (!d->leading) {
                take_lead(d, false);
                while (!is_done(w))
                    turn(d);
                d->leading = false;
                d->caller_left = dio_now_ms();
                int64_t dl = rlc_engine_deadline(d->e);
                if (!d->waiters && d->bg_ts && dl >= 0 && dl < d->bg_wake_at)
                    post_later(d, d->bg_ts); /* a timer due before it looks */
                break;
            }
            dio_poke_if_needed(d);
            unlock(d);
        }
        thread_sem_wait(w->ts);
        if (is_done(w))
            return;
        pthread_mutex_lock(&d->mu); /* offered the lead (or a stale wake-up) */
        have = true;
    }
    unlock(d);
}

static void *background(void *arg)
{
    struct edrv *d = arg;
    /* Named for top -H, gdb and /proc/<pid>/task/<tid>/comm (15 chars at most). */
    (void)pthread_setname_np(pthread_self(), "rlc-engine");
    struct thread_sem *me = thread_sem_self();
    pthread_mutex_lock(&d->mu);
    d->bg_ts = me;
    while (!d->stopping) {
        drain(d);
        /* While callers wait or lead, look every BG_LOOK_MS: they lead, and
         * waking this thread at each call's end would cost a switch each. */
        int64_t now = dio_now_ms(), dl = rlc_engine_deadline(d->e), sleep_ms = BG_LOOK_MS;
        bool callers = d->leading || d->waiters;
        if (!callers && now < d->caller_left + LINGER_MS && (dl < 0 || dl > now))
            sleep_ms = (dl >= 0 && dl < d->caller_left + LINGER_MS ? dl : d->caller_left + LINGER_MS) - now;
        else if (!callers) {
            take_lead(d, true);
            turn(d);
            d->leading = d->bg_leading = false;
            continue;
        }
        d->bg_wake_at = now + sleep_ms;
        unlock(d);
        if (me)
            thread_sem_wait_ms(me, sleep_ms);
        else
            poll(NULL, 0, (int)sleep_ms);
        pthread_mutex_lock(&d->mu);
    }
    unlock(d);
    return NULL;
}

static void free_all(struct edrv *d, bool child);

static void *callbacks(void *arg)
{
    struct edrv *d = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-lost-cb");
    pthread_mutex_lock(&d->lost_mu);
    for (;;) {
        struct lost *l = d->lost_head;
        if (d->free_on_exit)
            break; /* its client is gone: what is left is dropped (free_all) */
        if (!l) {
            if (d->cb_stop)
                break;
            pthread_cond_wait(&d->lost_cv, &d->lost_mu);
            continue;
        }
        d->lost_head = l->next;
        if (!d->lost_head)
            d->lost_tail = NULL;
        d->cb_running = true;
        pthread_mutex_unlock(&d->lost_mu);
        d->lost_fn(d->lost_user, l->kind, l->name, l->name_len, l->owner, l->status, l->message);
        free(l);
        pthread_mutex_lock(&d->lost_mu);
        d->cb_running = false;
        pthread_cond_broadcast(&d->cb_done);
    }
    bool free_here = d->free_on_exit;
    pthread_mutex_unlock(&d->lost_mu);
    if (free_here)
        free_all(d, false); /* edrv_free ran in a callback: this thread ends it */
    return NULL;
}

/* ---- operations ------------------------------------------------------- */

static int q_acquire(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    if (w->kind == RLC_KIND_FAIR)
        return rlc_engine_acquire_fair(d->e, w->name, w->name_len, w->owner, w->a, w->b,
                                       w->thread_wait, now, op);
    return rlc_engine_acquire_kind(d->e, w->kind, w->name, w->name_len, w->owner, w->a, w->b,
                                   now, op);
}

static int q_acquire_multi(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_acquire_multi(d->e, w->names, w->name_lens, w->n_names, w->owner, w->a,
                                    w->b, now, op);
}

static int q_release(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_release_kind(d->e, w->kind, w->name, w->name_len, w->owner, now, op);
}

static int q_extend(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_extend(d->e, w->name, w->name_len, w->owner, w->a, now, op);
}

static int q_query(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_query(d->e, w->name, w->name_len, w->owner, (int)w->a, now, op);
}

static int q_force(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_force_release(d->e, w->name, w->name_len, w->owner, now, op);
}

static int q_fence(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_fenced_set(d->e, w->name, w->name_len, w->value, w->value_len,
                                 (uint64_t)w->a, now, op);
}

static int q_permits(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_acquire_permits(d->e, w->kind, w->name, w->name_len, w->owner, w->permits,
                                      w->a, w->b, now, op);
}

static int q_give_back(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_release_permits(d->e, w->kind, w->name, w->name_len, w->permits,
                                      w->value, now, op);
}

static int q_set_permits(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_set_permits(d->e, w->kind, w->name, w->name_len, w->permits, now, op);
}

static int q_available(struct edrv *d, const struct waiter *w, int64_t now, uint64_t *op)
{
    return rlc_engine_available_permits(d->e, w->kind, w->name, w->name_len, now, op);
}

/* In a forked child: its threads are gone and the mutex may stay held by
 * one of them, so nothing may wait on it; the child makes its own driver. */
static bool forked(const struct edrv *d)
{
    return d->fork_generation != owner_fork_generation();
}

static int refuse_forked(struct edrv_outcome *out)
{
    int rc = rlc_fail(RLC_E_CLOSED, "this client was made before fork(): "
                                    "a child process makes its own");
    if (out) {
        memset(out, 0, sizeof *out);
        out->status = rc;
        snprintf(out->message, sizeof out->message, "%s", rlc_errmsg());
    }
    return rc;
}

/* Runs w (its queue_fn and arguments set) to its end on this thread. */
static int run_op(struct edrv *d, struct waiter w, struct edrv_outcome *out)
{
    if (forked(d))
        return refuse_forked(out);
    w.out = out;
    w.ts = thread_sem_self();
    atomic_init(&w.done, false);
    if (!w.ts)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    run(d, &w);
    if (out->status != RLC_OK)
        rlc_fail_msg(out->status, out->message);
    return out->status;
}

int edrv_acquire_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                      int64_t lease_ms, int64_t thread_wait_ms, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_acquire, .kind = kind, .name = name,
                                     .thread_wait = thread_wait_ms, .name_len = name_len,
                                     .owner = owner, .a = wait_ms, .b = lease_ms, .cp = cp,
                                     .acquire = true},
                  out);
}

int edrv_acquire_multi(struct edrv *d, const char *const *names, const size_t *name_lens,
                       int n, uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                       int64_t lease_ms, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_acquire_multi, .names = names,
                                     .name_lens = name_lens, .n_names = n, .owner = owner,
                                     .a = wait_ms, .b = lease_ms, .cp = cp, .acquire = true},
                  out);
}

int edrv_release_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_release, .kind = kind, .name = name,
                                     .name_len = name_len,
                                     .owner = owner},
                  out);
}

int edrv_force_release(struct edrv *d, const char *name, size_t name_len, uint64_t owner,
                       struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_force, .name = name, .name_len = name_len,
                                     .owner = owner},
                  out);
}

int edrv_fenced_set(struct edrv *d, const char *key, size_t key_len, const char *value,
                    size_t value_len, uint64_t token, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_fence, .name = key, .name_len = key_len,
                                     .value = value, .value_len = value_len,
                                     .a = (int64_t)token},
                  out);
}

int edrv_extend(struct edrv *d, const char *name, size_t name_len, uint64_t owner,
                int64_t lease_ms, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_extend, .name = name, .name_len = name_len,
                                     .owner = owner, .a = lease_ms},
                  out);
}

int edrv_query(struct edrv *d, const char *name, size_t name_len, uint64_t owner, int what,
               int64_t *answer, struct edrv_outcome *out)
{
    int rc = run_op(d, (struct waiter){.q = q_query, .name = name, .name_len = name_len,
                                       .owner = owner, .a = what},
                    out);
    if (rc == RLC_OK)
        *answer = out->count;
    return rc;
}

int edrv_acquire_permits(struct edrv *d, int kind, const char *name, size_t name_len,
                         uint64_t owner, const struct cancel_point *cp, int64_t permits,
                         int64_t wait_ms, int64_t lease_ms, struct edrv_outcome *out)
{
    return run_op(d, (struct waiter){.q = q_permits, .kind = kind, .name = name,
                                     .name_len = name_len, .owner = owner, .permits = permits,
                                     .a = wait_ms, .b = lease_ms, .cp = cp, .acquire = true},
                  out);
}

int edrv_permits_call(struct edrv *d, int call, int kind, const char *name, size_t name_len,
                      int64_t permits, const char *id, struct edrv_outcome *out)
{
    queue_fn q = call == EDRV_GIVE_BACK ? q_give_back
                 : call == EDRV_SET     ? q_set_permits
                                        : q_available;
    return run_op(d, (struct waiter){.q = q, .kind = kind, .name = name, .name_len = name_len,
                                     .permits = permits, .value = id},
                  out);
}

int edrv_permit_id(struct edrv *d, uint64_t token, int64_t permits, char *buf, size_t size)
{
    /* pure: the engine's uuid and the grant, no lock needed */
    return rlc_engine_permit_id(d->e, token, permits, buf, size);
}

int edrv_cancel(struct edrv *d, const void *tag)
{
    int n = 0;
    if (!tag || forked(d))
        return 0;
    pthread_mutex_lock(&d->mu);
    drain(d); /* an acquire pushed before this call is in the engine now */
    int64_t now = dio_now_ms();
    for (struct waiter *w = d->waiters; w; w = w->next)
        if (w->cp && (const void *)w->cp->count == tag && rlc_engine_cancel(d->e, w->op, now) == RLC_OK)
            n++;
    if (!d->leading)
        dio_flush_all(d, false, now);
    pump(d);
    /* a cancelled waiter may be the one polling: it hears of its end only
     * when its poll returns */
    if (n > 0 && d->leading)
        dio_poke(d);
    else
        dio_poke_if_needed(d);
    unlock(d);
    return n;
}

void edrv_callbacks_quiet(struct edrv *d)
{
    if (!d->cb_started || forked(d) || pthread_equal(pthread_self(), d->cb))
        return; /* no callback thread, or a callback asks: it runs now, here */
    pthread_mutex_lock(&d->lost_mu);
    while (d->cb_running)
        pthread_cond_wait(&d->cb_done, &d->lost_mu);
    pthread_mutex_unlock(&d->lost_mu);
}

void edrv_set_log(struct edrv *d, edrv_log_fn fn, void *user)
{
    if (forked(d))
        return;
    pthread_mutex_lock(&d->mu);
    d->log_fn = fn;
    d->log_user = user;
    pump(d); /* what came before */
    unlock(d);
}

void edrv_close(struct edrv *d)
{
    if (!d || forked(d))
        return;
    pthread_mutex_lock(&d->mu);
    d->closing = true;
    drain(d); /* what was asked before this call is in the engine now */
    int64_t now = dio_now_ms();
    for (struct waiter *w = d->waiters; w; w = w->next)
        if (w->acquire && rlc_engine_cancel(d->e, w->op, now) == RLC_OK)
            w->closed = true;
    if (!d->leading)
        dio_flush_all(d, false, now);
    pump(d);
    if (d->leading)
        dio_poke(d); /* an ended waiter may be the one polling */
    unlock(d);
}

void edrv_forget_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner)
{
    if (forked(d))
        return;
    pthread_mutex_lock(&d->mu);
    drain(d); /* what was asked before this call first */
    rlc_engine_forget_kind(d->e, kind, name, name_len, owner, dio_now_ms());
    unlock(d);
}

int edrv_metrics(struct edrv *d, uint64_t *out, int n)
{
    if (forked(d))
        return refuse_forked(NULL);
    pthread_mutex_lock(&d->mu);
    int rc = rlc_engine_metrics(d->e, out, n);
    unlock(d);
    return rc;
}

int64_t edrv_hold_count_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                             uint64_t owner)
{
    if (forked(d))
        return 0;
    pthread_mutex_lock(&d->mu);
    int64_t n = rlc_engine_hold_count_kind(d->e, kind, name, name_len, owner);
    unlock(d);
    return n;
}

int64_t edrv_validity_ms_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                              uint64_t owner)
{
    if (forked(d))
        return 0;
    pthread_mutex_lock(&d->mu);
    int64_t v = rlc_engine_validity_ms_kind(d->e, kind, name, name_len, owner, dio_now_ms());
    unlock(d);
    return v;
}

/* ---- life ------------------------------------------------------------- */

static int make_tls(struct edrv *d, const char *options)
{
    bool any = false;
    for (int i = 0; i < rlc_engine_nodes(d->e); i++)
        any = any || rlc_engine_node_tls(d->e, i) == 1;
    if (!any)
        return RLC_OK;
    int rc = options_parse(options, &d->opts);
    if (rc != RLC_OK)
        return rc;
    d->have_opts = true;
    return tls_ctx_new(&d->opts, &d->tls);
}

static void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* The redis-sentinel:// nodes: their discovery connections come right
 * after every node's two (rlc_engine_conns), and messages name them so. */
static int count_sentinels(const char *nodes)
{
    struct node_addr *addrs = NULL;
    int n = 0, k = 0;
    if (uri_parse_list(nodes, &addrs, &n) != RLC_OK)
        return 0;
    for (int i = 0; i < n; i++)
        k += addrs[i].topology == RLC_TOPO_SENTINEL;
    uri_free_list(addrs, n);
    return k;
}

int edrv_new(struct edrv **out, const char *nodes, const char *uuid, const char *options,
             edrv_lost_fn lost, void *user)
{
    *out = NULL;
    struct edrv *d = calloc(1, sizeof *d);
    if (!d)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    d->wake_fd = -1;
    d->fork_generation = owner_fork_generation();
    int rc = rlc_engine_new(&d->e, nodes, uuid, options);
    if (rc != RLC_OK)
        goto fail;
    d->n = rlc_engine_conns(d->e);
    d->first_sentinel = 2 * rlc_engine_nodes(d->e);
    d->n_sentinels = count_sentinels(nodes);
    d->c = calloc((size_t)d->n, sizeof *d->c);
    d->broken = calloc((size_t)d->n, sizeof *d->broken);
    d->why_of = calloc((size_t)d->n, sizeof *d->why_of);
    d->why_k = -1;
    d->pfd = calloc((size_t)d->n + 1, sizeof *d->pfd);
    d->pidx = calloc((size_t)d->n + 1, sizeof *d->pidx);
    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!d->c || !d->broken || !d->why_of || !d->pfd || !d->pidx || d->wake_fd < 0) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory (or descriptors) for the driver");
        goto fail;
    }
    for (int k = 0; k < d->n; k++)
        dconn_init(&d->c[k]);
    if ((rc = make_tls(d, options)) != RLC_OK)
        goto fail;
    d->lost_fn = lost;
    d->lost_user = user;
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->lost_mu, NULL);
    cond_init_monotonic(&d->turned);
    pthread_cond_init(&d->lost_cv, NULL);
    pthread_cond_init(&d->cb_done, NULL);
    if (pthread_create(&d->bg, NULL, background, d) != 0) {
        rc = rlc_fail(RLC_E_NOMEM, "cannot start the driver's thread");
        goto fail_sync;
    }
    d->bg_started = true;
    if (lost && pthread_create(&d->cb, NULL, callbacks, d) != 0) {
        rc = rlc_fail(RLC_E_NOMEM, "cannot start the driver's callback thread");
        goto fail_sync;
    }
    d->cb_started = lost != NULL;
    *out = d;
    return RLC_OK;
fail_sync:
    edrv_free(d, 0);
    return rc;
fail:
    rlc_engine_free(d->e);
    if (d->wake_fd >= 0)
        close(d->wake_fd);
    free(d->c);
    free(d->broken);
    free(d->why_of);
    free(d->pfd);
    free(d->pidx);
    if (d->have_opts)
        options_free(&d->opts);
    free(d);
    return rc;
}

/* Everything, once no thread of the driver runs. In a forked child, the
 * memory and the child's copies of the descriptors only: no mutex to
 * destroy (a vanished thread may hold it), the TLS state left behind
 * (tls.h); the parent's connections and holds go on. */
static void free_all(struct edrv *d, bool child)
{
    dio_close_all(d, child);
    while (d->lost_head) {
        struct lost *l = d->lost_head;
        d->lost_head = l->next;
        free(l);
    }
    rlc_engine_free(d->e);
    tls_ctx_free(d->tls);
    if (d->have_opts)
        options_free(&d->opts);
    close(d->wake_fd);
    if (!child) {
        pthread_cond_destroy(&d->turned);
        pthread_cond_destroy(&d->lost_cv);
        pthread_cond_destroy(&d->cb_done);
        pthread_mutex_destroy(&d->lost_mu);
        pthread_mutex_destroy(&d->mu);
    }
    free(d->c);
    free(d->broken);
    free(d->why_of);
    free(d->pfd);
    free(d->pidx);
    free(d);
}

void edrv_free(struct edrv *d, int64_t drain_ms)
{
    if (!d)
        return;
    if (forked(d)) {
        free_all(d, true); /* no thread of ours is here to join */
        return;
    }
    pthread_mutex_lock(&d->mu);
    int64_t end = dio_now_ms() + (drain_ms > 0 ? drain_ms : 0);
    /* Only bytes that reached a server can land late or hold a level
     * there: with no connection ever up, what the engine still queues (the
     * undo of an acquire refused at its connect) was never needed, and a
     * process whose Redis is down exits at once. */
    while (d->bg_started && d->ever_up && !rlc_engine_idle(d->e) && dio_now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 50 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        dio_poke(d);
        pthread_cond_timedwait(&d->turned, &d->mu, &ts);
    }
    d->stopping = true;
    drain(d); /* calls that came anyway end RLC_E_CLOSED */
    dio_poke(d);
    if (d->bg_ts)
        thread_sem_post(d->bg_ts);
    unlock(d);
    pthread_mutex_lock(&d->lost_mu);
    d->cb_stop = true;
    pthread_cond_broadcast(&d->lost_cv);
    pthread_mutex_unlock(&d->lost_mu);
    if (d->bg_started)
        pthread_join(d->bg, NULL);
    if (d->cb_started && pthread_equal(pthread_self(), d->cb)) {
        /* called from a lost callback: the loss thread frees everything
         * once that callback returns (it cannot join itself) */
        pthread_mutex_lock(&d->lost_mu);
        d->free_on_exit = true;
        pthread_mutex_unlock(&d->lost_mu);
        pthread_detach(d->cb);
        return;
    }
    if (d->cb_started)
        pthread_join(d->cb, NULL);
    free_all(d, false);
}
