/*
 * cluster_map.h - a Redis Cluster's slot map, and reading the replies that
 * change it (CLUSTER SLOTS, MOVED, ASK). Pure: no I/O, no locks; the
 * engine's cluster nodes keep one each.
 */
#ifndef RLC_CLUSTER_MAP_H
#define RLC_CLUSTER_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot.h"

struct redisReply;

/* Redirections (MOVED, ASK) followed for one command before it fails. */
#define CMAP_MAX_HOPS 5

/* Masters (and seeds) one map can name over its life (old ones stay). */
#define CMAP_MAX_MASTERS 32

struct cmap_master {
    char host[256];
    int port;
    char label[280];
};

struct cmap {
    uint8_t owner[RLC_SLOTS];   /* 1 + master index; 0 unknown */
    struct cmap_master m[CMAP_MAX_MASTERS];
    int n;
    bool loaded;                /* a CLUSTER SLOTS answer was applied */
};

/* The master at host:port, added if new: its index, or -1 (table full). */
int cmap_master(struct cmap *m, const char *host, size_t host_len, int port);

/* Applies a CLUSTER SLOTS answer. asked: the index of the master that
 * answered (a node that does not know its own address names itself "").
 * Returns the slots mapped, 0 for an answer that is not a map (nothing
 * changes then). *changed: whether any slot's owner changed. */
int cmap_apply_slots(struct cmap *m, const struct redisReply *r, int asked, bool *changed);

enum cmap_redirect { CMAP_NONE = 0, CMAP_MOVED, CMAP_ASK, CMAP_RETRY };

/* Whether reply is a redirection (MOVED, ASK) or a cluster's "try again"
 * (TRYAGAIN, CLUSTERDOWN). */
bool cmap_is_redirect(const struct redisReply *r);

/* What an error reply asks for: MOVED and ASK name a slot and a master
 * (*slot, *master: added to the table if new; -1 if it is full or the
 * address cannot be read); TRYAGAIN and CLUSTERDOWN are CMAP_RETRY. asked:
 * the master the command went to ("" as the address means that one). A
 * MOVED updates the slot's owner. */
enum cmap_redirect cmap_redirect(struct cmap *m, const struct redisReply *r, int asked,
                                 int *slot, int *master);

#endif
