/*
 * redis_cluster.h - a real Redis Cluster for tests and benchmarks: 3 masters
 * and 3 replicas (redis-server --cluster-enabled yes, each in its own temp
 * dir on a free loopback port), joined by `redis-cli --cluster create
 * --cluster-replicas 1`, awaited until every node says cluster_state:ok and
 * agrees on the slots. Stopped by pid.
 */
#ifndef RLC_TEST_REDIS_CLUSTER_H
#define RLC_TEST_REDIS_CLUSTER_H

#include "redis_server.h"

#define RC_NODES 6

struct redis_cluster {
    int n;
    struct redis_server node[RC_NODES];
    char uri[256]; /* redis-cluster://127.0.0.1:<p1>,127.0.0.1:<p2> */
    char bus[RC_NODES][16]; /* each node's cluster bus port (kept: a restart reuses it) */
};

/* 0 on success; on failure everything started is stopped again. */
int rc_start(struct redis_cluster *rc);
void rc_stop(struct redis_cluster *rc);

/* The node (index) that serves slot as a master, or -1. */
int rc_master_of(const struct redis_cluster *rc, int slot);

/* Waits until every running node agrees on who serves every slot and says
 * cluster_state:ok; 0 when it does within timeout_ms. */
int rc_await_stable(const struct redis_cluster *rc, int timeout_ms);

/* s's node id (CLUSTER MYID), "?" when it does not say. */
void rc_node_id(const struct redis_server *s, char *id, size_t size);

/* Moves every key of slot from src to dst (MIGRATE in batches), as a
 * resharding does between SETSLOT MIGRATING/IMPORTING and SETSLOT NODE;
 * returns how many moved, -1 on an error. */
int rc_migrate_keys(const struct redis_server *src, const struct redis_server *dst, int slot);

/* A whole resharding of slot from rc's node src to node dst: SETSLOT
 * IMPORTING/MIGRATING, every key moved, SETSLOT NODE on every node.
 * Returns the keys moved, or -1 on an error. */
int rc_move_slot(const struct redis_cluster *rc, int src, int dst, int slot);

/* The two halves of rc_move_slot, for a test that acts mid-migration:
 * SETSLOT IMPORTING on dst and MIGRATING on src (0, or -1 on an error);
 * then SETSLOT NODE dst on every node (replicas refuse it: they follow
 * their master). */
int rc_begin_move(const struct redis_cluster *rc, int src, int dst, int slot);
void rc_end_move(const struct redis_cluster *rc, int dst, int slot);

/* Removes a node's nodes.conf so that rs_stop can remove its directory. */
void rc_forget_conf(const struct redis_server *s);

#endif
