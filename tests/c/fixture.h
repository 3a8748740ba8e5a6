/*
 * fixture.h - what every C test file needs around a case: real servers
 * (one, or a cluster of independent masters), a client and a lock handle
 * that report why they could not be made, and the server-side counts the
 * assertions look at.
 */
#ifndef RLC_TEST_FIXTURE_H
#define RLC_TEST_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "redis_server.h"

/* A server for this case (extra redis-server arguments after s); without
 * one the case fails at once. */
#define START(s, ...)                                                         \
    struct redis_server s;                                                    \
    if (rs_start(&s, (const char *const[]){__VA_ARGS__ NULL}) != 0) {         \
        fprintf(stderr, "redis-server did not start\n");                     \
        check_failed = 1;                                                     \
        return;                                                               \
    }

/* How many subscribers channel has on s (-1: no answer). */
static inline long long channel_subscribers(const struct redis_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB NUMSUB %s", channel);
    long long n = r && r->elements == 2 ? r->element[1]->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* The hold count of "<uuid>:<owner>" in the Redisson hash key on s (0: none). */
static inline long long field_count(const struct redis_server *s, const char *key,
                                    const char *uuid, uint64_t owner)
{
    char field[80];
    snprintf(field, sizeof field, "%s:%llu", uuid, (unsigned long long)owner);
    redisReply *r = rs_cmd(s, "HGET %s %s", key, field);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r)
        freeReplyObject(r);
    return v;
}

/* n independent masters and their URIs, comma-separated. */
#define MAXN 5
struct cluster {
    int n;
    struct redis_server node[MAXN];
    char uris[MAXN * 64];
};

static inline int cluster_start(struct cluster *cl, int n)
{
    cl->n = 0;
    cl->uris[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (rs_start(&cl->node[i], NULL) != 0)
            return -1;
        cl->n++;
        size_t at = strlen(cl->uris);
        snprintf(cl->uris + at, sizeof cl->uris - at, "%s%s", i ? "," : "", cl->node[i].uri);
    }
    return 0;
}

static inline void cluster_stop(struct cluster *cl)
{
    for (int i = 0; i < cl->n; i++)
        rs_stop(&cl->node[i]);
}

/* A 3+3 Redis Cluster (redis_cluster.h, which the case's file includes). */
#define START_RC(rc)                                                          \
    struct redis_cluster rc;                                                  \
    if (rc_start(&rc) != 0) {                                                 \
        fprintf(stderr, "could not start a 3+3 redis cluster\n");             \
        check_failed = 1;                                                     \
        return;                                                               \
    }

#define START_CLUSTER(cl, n)                                                  \
    struct cluster cl;                                                        \
    if (cluster_start(&cl, n) != 0) {                                         \
        fprintf(stderr, "could not start %d redis-servers\n", n);             \
        cluster_stop(&cl);                                                    \
        check_failed = 1;                                                     \
        return;                                                               \
    }

static inline rlc_client *client(const char *uris, const char *opts)
{
    rlc_client *c = NULL;
    if (rlc_client_new(&c, uris, opts) != RLC_OK)
        fprintf(stderr, "rlc_client_new(%s): %s\n", uris, rlc_errmsg());
    return c;
}

static inline rlc_lock *lock(rlc_client *c, const char *name, uint64_t owner)
{
    rlc_lock *l = NULL;
    if (rlc_lock_new(c, name, owner, &l) != RLC_OK)
        fprintf(stderr, "rlc_lock_new(%s): %s\n", name, rlc_errmsg());
    return l;
}

static inline int is_held(rlc_lock *l)
{
    int v = -1;
    return rlc_lock_is_held(l, &v) == RLC_OK ? v : -1;
}

static inline int is_locked(rlc_lock *l)
{
    int v = -1;
    return rlc_lock_is_locked(l, &v) == RLC_OK ? v : -1;
}

/* The server's client connections of every type (CLIENT LIST: a subscriber
 * is of type pubsub while it is subscribed), the test's own too. */
static inline long long server_connections(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "CLIENT LIST");
    long long n = 0;
    if (r && r->type == REDIS_REPLY_STRING)
        for (const char *p = r->str; (p = strchr(p, '\n')); p++)
            n++;
    if (r)
        freeReplyObject(r);
    return n;
}

/* "calls=N" of one command in INFO commandstats (0 if never called). */
static inline long long command_calls(const struct redis_server *s, const char *cmd)
{
    redisReply *r = rs_cmd(s, "INFO commandstats");
    long long n = 0;
    char tag[64];
    snprintf(tag, sizeof tag, "cmdstat_%s:calls=", cmd);
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, tag);
        if (p)
            n = atoll(p + strlen(tag));
    }
    if (r)
        freeReplyObject(r);
    return n;
}

#endif
