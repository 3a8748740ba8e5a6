/*
 * cluster.h - one Redis Cluster as one logical node of a client.
 *
 * A client's node may be a cluster (redis-cluster://seed[,seed...]). Every
 * command to it carries a key (or follows one, as WAIT follows the write it
 * waits for), and all the names a lock uses share one hash slot (keys.h), so
 * each lock's commands go to the one master that owns its slot. The client
 * keeps, per cluster, a slot map and a pool of connections per master, made
 * when first needed.
 *
 * The callers above see nothing of this: client_mux() hands them a routing
 * mux (mux.h), whose sends are passed here to pick the master, and whose
 * redirections (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) are followed by the
 * waiting caller on its own thread. A full map refresh runs on the
 * cluster's own thread, so it never holds up traffic to other nodes, and
 * never takes the client's mutex.
 */
#ifndef RLC_CLUSTER_H
#define RLC_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster_map.h"
#include "uri.h"

struct cluster;
struct mux;
struct rlc_cmd;
struct script;
struct rlc_client;

/* The calls a routing mux makes (mux.h): the ones below. */
extern const struct mux_router cluster_router;

/* Masters (and seeds) a cluster's table can hold over its life. */
#define RLC_CLUSTER_MAX_NODES CMAP_MAX_MASTERS

/* Redirections followed for one command before it fails. */
#define RLC_CLUSTER_MAX_HOPS CMAP_MAX_HOPS

/* For the client's node `node` (a cluster URI). Starts its thread, which
 * reads the slot map when the first command needs it. NULL without memory
 * or threads. */
struct cluster *cluster_new(struct rlc_client *c, int node, int64_t connect_timeout_ms,
                            int64_t stale_ms, int wake_fd);

/* Stops the refresh thread (its pending work is dropped) and fails what is
 * queued on every connection. */
void cluster_shutdown(struct cluster *cl);

/* Frees everything (after cluster_shutdown; or in a forked child, closing
 * the sockets only). */
void cluster_free(struct cluster *cl, bool child);

/* Moves detached work on this cluster's connections (mux_push_detached).
 * Returns whether work is left. */
bool cluster_push_detached(struct cluster *cl);

/* Picks the connection of pool column `pool` for *cmd: the master that owns
 * the slot of its key, or, for a keyless command, the master this thread
 * last sent a keyed command to on this cluster. *slot: the key's slot, -1
 * keyless. On a cluster that uses sharded pub/sub, a script that publishes
 * is swapped for its SPUBLISH twin: *cmd and *script are then replaced (the
 * caller owns a reference to *cmd on return in every case). Waits for the
 * first map, until deadline_ns at most. */
struct mux *cluster_pick(struct cluster *cl, int pool, struct rlc_cmd **cmd,
                         const struct script **script, int *slot, int64_t deadline_ns);


/* Follows a redirection reply for a command of slot `slot`: the connection
 * to send it on next (MOVED updates the map first and asks for a full
 * refresh; ASK does not: *asking is set), or NULL if the reply names no
 * usable address (err says why). *pause_ms: how long to wait first
 * (TRYAGAIN, CLUSTERDOWN), 0 for a move. */
struct mux *cluster_redirect(struct cluster *cl, int pool, int slot, const redisReply *reply,
                             bool *asking, int64_t *pause_ms, char *err, size_t err_size);

/* A detached command that was redirected: the cluster's thread sends it
 * again on the right master (nobody waits for it to do so). */
void cluster_defer(struct cluster *cl, int pool, struct rlc_cmd *cmd, const struct script *script,
                   int slot, int hops, bool redo);

/* Asks the cluster's thread for a full map refresh (soon, not at once:
 * refreshes are spaced out so that a storm of MOVED costs one). */
void cluster_want_refresh(struct cluster *cl);

/* --- for pub/sub --- */

/* Whether the cluster uses sharded pub/sub (SSUBSCRIBE / SPUBLISH), as
 * decided by Redisson's probe (PUBSUB SHARDNUMSUB answered). False until
 * the first map is read. */
bool cluster_sharded(struct cluster *cl);

/* Whether the first map read has ended (well or not). */
bool cluster_loaded(struct cluster *cl);

/* The table index of the master owning slot, or -1 unknown. */
int cluster_master_of(struct cluster *cl, int slot);

/* The address of table entry i (stable for the cluster's life). */
const struct node_addr *cluster_node_addr(struct cluster *cl, int i);

/* Applies "MOVED <slot> <addr>" words (from a SSUBSCRIBE refused, say). */
void cluster_note_moved(struct cluster *cl, const char *words, size_t len);

/* Bumped each time the map changes. */
uint64_t cluster_epoch(struct cluster *cl);

/* Which table entries own slots now (owns[i], entries made: their
 * cluster_node_addr is valid); returns the map's epoch they are of. */
uint64_t cluster_owners(struct cluster *cl, bool owns[RLC_CLUSTER_MAX_NODES]);

#endif
