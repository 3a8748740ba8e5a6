/*
 * sentinel_watch.h - following a sentinel node's master as it moves.
 *
 * For every redis-sentinel:// node a client keeps one subscriber connection
 * to one of its sentinels, on channel +switch-master. When a sentinel
 * announces that our master moved, the node's resolver takes the new
 * address at once (resolver_switch), and connections to the old master are
 * closed before their next use (conn_moved). A sentinel that is down or
 * drops the connection is replaced by the next one in the list.
 *
 * Runs on the client's background thread, like pubsub.c: prepare() gives
 * the sockets to poll, service() handles what poll() reported.
 */
#ifndef RLC_SENTINEL_WATCH_H
#define RLC_SENTINEL_WATCH_H

#include <poll.h>
#include <stdint.h>

#include "uri.h"

struct sentinel_watch;

/* Watches every sentinel node of nodes[0..n), AUTHing to the sentinels as
 * user/password (either may be NULL; they must outlive the watch). NULL
 * without memory; a watch with nothing to watch when no node is a sentinel
 * node. */
struct sentinel_watch *sentinel_watch_new(struct node_addr *nodes, int n, const char *user,
                                          const char *password, int64_t connect_timeout_ms);

void sentinel_watch_free(struct sentinel_watch *w);

/* Fills pfd (at most max) and lowers *next_ns to the next timer. */
int sentinel_watch_prepare(struct sentinel_watch *w, struct pollfd *pfd, int max,
                           int64_t *next_ns);

/* Handles what poll() reported on those sockets. */
void sentinel_watch_service(struct sentinel_watch *w, const struct pollfd *pfd, int n);

#endif
