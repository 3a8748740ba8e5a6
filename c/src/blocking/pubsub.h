/*
 * pubsub.h - waking waiters with Redis pub/sub instead of polling.
 *
 * One subscriber connection per node per client, owned by the client's
 * background thread, carries every channel that any waiter of the client
 * needs. A waiter joins a channel, waits until the subscription is confirmed
 * (so that no unlock message can slip between its last try and its sleep),
 * then sleeps until an unlock message lets it try again: one message wakes one
 * waiter (a permit, kept if nobody sleeps yet), a resubscription wakes all,
 * and the end of the holder's lease (or a safety poll) wakes one per channel.
 */
#ifndef RLC_PUBSUB_H
#define RLC_PUBSUB_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

struct cancel_point;
struct rlc_client;
struct channel;
struct pubsub;

struct pubsub *pubsub_new(struct rlc_client *c);
void pubsub_free(struct pubsub *ps);

/* --- for waiters --- */

/* Takes a reference on the channel, subscribing to it on every node if this
 * client was not subscribed yet. NULL without memory. */
struct channel *pubsub_join(struct pubsub *ps, const char *name, size_t len);

/* Waits until every reachable node confirmed the subscription, deadline, or
 * cancel (cp may be NULL, here and below). */
void pubsub_wait_ready(struct pubsub *ps, struct channel *ch, int64_t deadline_ns,
                       const struct cancel_point *cp);

/* The channel's subscription count; read it BEFORE trying the lock. */
uint64_t pubsub_seq(struct pubsub *ps, struct channel *ch);

/* How many nodes refused the SUBSCRIBE (an ACL user without the channel);
 * if any, why[] gets the first one's words. */
int pubsub_refused(struct pubsub *ps, struct channel *ch, char *why, size_t size);

/* A try saw the holder's lease end at at_ns (RLC_FOREVER_NS: no expiry):
 * the channel's timer wakes one waiter then. */
void pubsub_holder_expires(struct pubsub *ps, struct channel *ch, int64_t at_ns);

/* Sleeps until an unlock message's permit (taken here), a resubscription
 * (seq differs), the channel's timer (the holder's lease end, else the
 * safety poll; claimed by one waiter), the deadline, stop, or cancel. */
void pubsub_wait(struct pubsub *ps, struct channel *ch, uint64_t seq, int64_t deadline_ns,
                 const struct cancel_point *cp);

/* Sleeps until until_ns, stop or cancel, and takes no message: the pause
 * between the tries of a split Redlock vote. */
void pubsub_pause(struct pubsub *ps, struct channel *ch, int64_t until_ns,
                  const struct cancel_point *cp);

/* Wakes every sleeper of the channel, if it has any, to look at its cancel
 * point (rlc_lock_cancel). The others go back to sleep. */
void pubsub_wake_channel(struct pubsub *ps, const char *name, size_t len);
/* The same for every channel (a family handle's cancel: its waiters may sit
 * on channels of their own, a fair waiter's). */
void pubsub_wake_all(struct pubsub *ps);

void pubsub_leave(struct pubsub *ps, struct channel *ch);

/* This client just freed the lock: wake one of its own waiters now, without
 * waiting for the unlock message to come back through the subscriber. */
void pubsub_notify_local(struct pubsub *ps, const char *name, size_t len);

/* Wakes every waiter for good (the client is closing). */
void pubsub_stop(struct pubsub *ps);

/* --- for the background thread --- */

/* Fills pfd with the subscriber sockets to watch (at most max) and lowers
 * *next_ns to the next timer (reconnect, unsubscribe). Returns the count. */
int pubsub_prepare(struct pubsub *ps, struct pollfd *pfd, int max, int64_t *next_ns);

/* Handles what poll() reported on those sockets, and due timers. */
void pubsub_service(struct pubsub *ps, const struct pollfd *pfd, int n);

#endif
