/*
 * storage.c - the resource the lock protects: a counter in a redis-server
 * of its own, which no scenario ever faults.
 *
 * The read-modify-write is deliberately not atomic (GET, then SET): two
 * holders inside the critical section at once lose an update, which the
 * checker counts. The fenced write is what docs/FENCING.md tells users to do for
 * storage that must never see a stale writer: the storage remembers the
 * newest fencing token it has seen and refuses older ones.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <hiredis/hiredis.h>

#include "fault.h"

struct storage {
    redisContext *c;
    int port;
};

/* KEYS[1] counter, KEYS[2] newest token; ARGV[1] value, ARGV[2] token. */
static const char fenced_set[] =
    "local newest = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "if tonumber(ARGV[2]) < newest then return 0 end "
    "redis.call('SET', KEYS[2], ARGV[2]) "
    "redis.call('SET', KEYS[1], ARGV[1]) "
    "return 1";

static redisContext *connect_to(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

struct storage *storage_open(int port)
{
    struct storage *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->port = port;
    st->c = connect_to(port);
    return st;
}

void storage_close(struct storage *st)
{
    if (!st)
        return;
    if (st->c)
        redisFree(st->c);
    free(st);
}

/* A command on a live connection; a broken one is replaced once. */
static redisReply *command(struct storage *st, int argc, const char **argv)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!st->c && !(st->c = connect_to(st->port)))
            return NULL;
        redisReply *r = redisCommandArgv(st->c, argc, argv, NULL);
        if (r)
            return r;
        redisFree(st->c);
        st->c = NULL;
        /* Only a read is retried: a SET that may have run is not repeated. */
        if (argc != 2)
            return NULL;
    }
    return NULL;
}

int storage_get(struct storage *st, long long *v)
{
    const char *argv[2] = {"GET", FAULT_COUNTER};
    redisReply *r = command(st, 2, argv);
    int rc = -1;
    if (r && r->type == REDIS_REPLY_NIL) {
        *v = 0;
        rc = 0;
    } else if (r && r->type == REDIS_REPLY_STRING) {
        *v = strtoll(r->str, NULL, 10);
        rc = 0;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

int storage_put(struct storage *st, long long v, uint64_t token)
{
    char val[24], tok[24];
    snprintf(val, sizeof val, "%lld", v);
    snprintf(tok, sizeof tok, "%" PRIu64, token);
    redisReply *r;
    if (token == 0) {
        const char *argv[3] = {"SET", FAULT_COUNTER, val};
        r = command(st, 3, argv);
    } else {
        const char *argv[7] = {"EVAL", fenced_set, "2", FAULT_COUNTER, FAULT_FENCE, val, tok};
        r = command(st, 7, argv);
    }
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STATUS)
        rc = 1;
    else if (r && r->type == REDIS_REPLY_INTEGER)
        rc = r->integer == 1;
    if (r)
        freeReplyObject(r);
    return rc;
}
