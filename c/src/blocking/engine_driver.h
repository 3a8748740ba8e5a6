/*
 * engine_driver.h - the engine (c/src/engine) run by the threads that wait
 * on it: the blocking driver.
 *
 * No I/O thread sits between a caller and its reply. A caller queues its
 * operation in the engine, writes the bytes itself and then, if no other
 * thread is polling the engine's sockets, becomes the one that does (the
 * leader) until its operation ends; the replies it reads for other threads
 * end their operations and wake them (followers). A background thread leads
 * only while no caller does: it runs the renewals, the waiters' wake-ups
 * and loss push between calls, and steps aside as soon as a caller asks.
 * So one thread's cycle is one write, one poll and one read on its own
 * thread, as with a bare client, and a woken waiter reads the unlock
 * message itself when it leads.
 *
 * Lost holds are reported on a thread of their own, never under the
 * driver's lock, so a slow callback delays no renewal.
 */
#ifndef RLC_ENGINE_DRIVER_H
#define RLC_ENGINE_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "redlockc.h"
#include "cancel.h"

struct edrv;

#define EDRV_MSGLEN 512

/* How an operation ended (rlc_engine_event's DONE fields). */
struct edrv_outcome {
    int status;
    uint64_t token;
    int64_t validity_ms;
    int64_t count;
    char message[EDRV_MSGLEN];
};

/* A hold of a lock kind (RLC_KIND_*) was lost (RLC_EV_LOST). Runs on the
 * driver's callback thread. */
typedef void (*edrv_lost_fn)(void *user, int kind, const char *name, size_t name_len,
                             uint64_t owner, int status, const char *message);

/* A line the engine would log and its level (rlc_engine_next_log). Called
 * under the driver's lock, in the order they came: it must only keep the
 * line (the blocking API queues it for the client's log callback,
 * metrics.c), never call the driver or anything that waits. */
typedef void (*edrv_log_fn)(void *user, int level, const char *line);

/* A driver over a new engine (rlc_engine_new's nodes, uuid and options)
 * and its background thread. RLC_OK and *out, or the engine's status with
 * the thread's message set. lost may be NULL. */
int edrv_new(struct edrv **out, const char *nodes, const char *uuid, const char *options,
             edrv_lost_fn lost, void *user);

/* Stops the threads and frees everything; waits up to drain_ms for
 * releases and undos on the wire (rlc_engine_idle). Calls still running in
 * other threads are the caller's to end first. Accepts NULL. */
void edrv_free(struct edrv *d, int64_t drain_ms);

/* As rlc_engine_acquire(_kind) / release(_kind) / extend, run to their end on the
 * calling thread: the outcome's status (also returned). A status before
 * the operation was queued (bad arguments) comes with rlc_errmsg(). An
 * acquire carries its handle's cancel point (or NULL): a cancel counted
 * there after cp->seen ends it, before it reaches the engine too, and
 * edrv_cancel(d, cp->count) ends it in the engine. */
/* thread_wait_ms: a fair lock's (rlc_engine_acquire_fair); else unused. */
int edrv_acquire_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                      int64_t lease_ms, int64_t thread_wait_ms, struct edrv_outcome *out);
static inline int edrv_acquire(struct edrv *d, const char *name, size_t name_len,
                               uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                               int64_t lease_ms, struct edrv_outcome *out)
{
    return edrv_acquire_kind(d, RLC_KIND_LOCK, name, name_len, owner, cp, wait_ms, lease_ms, 0,
                             out);
}
/* rlc_engine_acquire_multi's, as edrv_acquire. */
int edrv_acquire_multi(struct edrv *d, const char *const *names, const size_t *name_lens,
                       int n, uint64_t owner, const struct cancel_point *cp, int64_t wait_ms,
                       int64_t lease_ms, struct edrv_outcome *out);
int edrv_release_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner, struct edrv_outcome *out);
static inline int edrv_release(struct edrv *d, const char *name, size_t name_len,
                               uint64_t owner, struct edrv_outcome *out)
{
    return edrv_release_kind(d, RLC_KIND_LOCK, name, name_len, owner, out);
}
int edrv_extend(struct edrv *d, const char *name, size_t name_len, uint64_t owner,
                int64_t lease_ms, struct edrv_outcome *out);
/* rlc_engine_force_release's: out->count is how many nodes had the key. */
int edrv_force_release(struct edrv *d, const char *name, size_t name_len, uint64_t owner,
                       struct edrv_outcome *out);
/* rlc_engine_fenced_set's: out->count is 1 written, 0 refused. */
int edrv_fenced_set(struct edrv *d, const char *key, size_t key_len, const char *value,
                    size_t value_len, uint64_t token, struct edrv_outcome *out);
/* rlc_engine_query's: what (RLC_Q_*) a quorum of the servers says of
 * name, in *answer. */
int edrv_query(struct edrv *d, const char *name, size_t name_len, uint64_t owner, int what,
               int64_t *answer, struct edrv_outcome *out);

/* rlc_engine_acquire_permits's, as edrv_acquire: out->token names the
 * grant (edrv_permit_id), out->validity_ms an expirable permit's lease left. */
int edrv_acquire_permits(struct edrv *d, int kind, const char *name, size_t name_len,
                         uint64_t owner, const struct cancel_point *cp, int64_t permits,
                         int64_t wait_ms, int64_t lease_ms, struct edrv_outcome *out);
/* A semaphore's one-shot calls: rlc_engine_release_permits (permits or id),
 * rlc_engine_set_permits (permits), rlc_engine_available_permits; their
 * answer in out->count. */
enum { EDRV_GIVE_BACK = 1, EDRV_SET, EDRV_AVAILABLE };
int edrv_permits_call(struct edrv *d, int call, int kind, const char *name, size_t name_len,
                      int64_t permits, const char *id, struct edrv_outcome *out);
/* rlc_engine_permit_id's. */
int edrv_permit_id(struct edrv *d, uint64_t token, int64_t permits, char *buf, size_t size);

/* The client closes: every acquire running ends RLC_E_CLOSED (what it
 * may have taken is undone) and every later call is refused so; releases
 * and undos on the wire go on until edrv_free. */
void edrv_close(struct edrv *d);

/* rlc_engine_forget's: owner's hold of name is forgotten (every owner's
 * with 0): not renewed, never reported lost. */
void edrv_forget_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                      uint64_t owner);
static inline void edrv_forget(struct edrv *d, const char *name, size_t name_len,
                               uint64_t owner)
{
    edrv_forget_kind(d, RLC_KIND_LOCK, name, name_len, owner);
}

/* Ends every acquire running now whose cancel point counts at tag (its
 * handle's cancels: cp->count; not NULL), in any thread,
 * with RLC_E_CANCELED (rlc_engine_cancel): rlc_lock_cancel's, for the
 * waits of one handle, whatever other handles of the name wait. An acquire
 * that starts later is not affected. Returns how many it ended. */
int edrv_cancel(struct edrv *d, const void *tag);

/* Returns once no lost callback runs: one that started before this call
 * has returned (at once on the callback thread itself, from inside a
 * callback). So whoever stops listening for a lock's losses (rlc_lock_free)
 * and then calls this hears of none after it returns. */
void edrv_callbacks_quiet(struct edrv *d);

/* Hands the engine's log lines to fn from now on (NULL: they wait in the
 * engine, the newest dropped past 32). */
void edrv_set_log(struct edrv *d, edrv_log_fn fn, void *user);

/* The engine's counters (rlc_engine_metrics): what rlc_client_metrics is
 * to read once the public calls run here. */
int edrv_metrics(struct edrv *d, uint64_t *out, int n);

/* rlc_engine_hold_count_kind's and rlc_engine_validity_ms_kind's (now). */
int64_t edrv_hold_count_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                             uint64_t owner);
int64_t edrv_validity_ms_kind(struct edrv *d, int kind, const char *name, size_t name_len,
                              uint64_t owner);
static inline int64_t edrv_hold_count(struct edrv *d, const char *name, size_t name_len,
                                      uint64_t owner)
{
    return edrv_hold_count_kind(d, RLC_KIND_LOCK, name, name_len, owner);
}
static inline int64_t edrv_validity_ms(struct edrv *d, const char *name, size_t name_len,
                                       uint64_t owner)
{
    return edrv_validity_ms_kind(d, RLC_KIND_LOCK, name, name_len, owner);
}

#endif
