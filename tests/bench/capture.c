/*
 * capture.c - reading a lock cycle's commands off the wire.
 *
 * The limit must run exactly what the library runs. Rather than copy the
 * scripts (and go stale when they change), the driver watches one real
 * acquire + release with MONITOR and keeps the two EVALSHA commands it sees:
 * their script SHAs (the library loaded the scripts on connect, so the server
 * has them cached), their second key (token counter, channel) and their
 * arguments (lease, owner field). Only the lock name is replaced later, by a
 * random name per call.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "redlockc.h"

#define MAX_ARGS 8

/* Splits a MONITOR line's quoted arguments (sdscatrepr escapes) into argv. */
static int split_monitor(const char *line, char argv[MAX_ARGS][256])
{
    const char *p = strstr(line, "] ");
    if (!p)
        return 0;
    p += 2;
    int n = 0;
    while (*p == '"' && n < MAX_ARGS) {
        p++;
        size_t len = 0;
        while (*p && *p != '"') {
            char ch = *p++;
            if (ch == '\\' && *p) {
                ch = *p++;
                if (ch == 'n')
                    ch = '\n';
                else if (ch == 'x' && p[0] && p[1]) {
                    char hex[3] = {p[0], p[1], 0};
                    ch = (char)strtol(hex, NULL, 16);
                    p += 2;
                }
            }
            if (len < 255)
                argv[n][len++] = ch;
        }
        argv[n][len] = '\0';
        if (*p == '"')
            p++;
        if (*p == ' ')
            p++;
        n++;
    }
    return n;
}

/* One acquire + release by a fresh client, so that MONITOR sees it. */
static int one_cycle(const char *uri)
{
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    int rc = rlc_client_new(&c, uri, NULL);
    if (rc == RLC_OK)
        rc = rlc_lock_new(c, "bench:capture", 0, &l);
    if (rc == RLC_OK)
        rc = rlc_lock_acquire(l, 1000, 0);
    if (rc == RLC_OK)
        rc = rlc_lock_release(l);
    if (rc != RLC_OK)
        note("capture: %s: %s", rlc_strerror(rc), rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);
    return rc;
}

int capture_cycle(struct bench *b, struct cycle_cmds *cc)
{
    memset(cc, 0, sizeof *cc);
    redisContext *mon = rs_connect(&b->srv[0]);
    if (!mon)
        return -1;
    redisReply *r = redisCommand(mon, "MONITOR");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    if (!ok || one_cycle(b->srv[0].uri) != RLC_OK) {
        redisFree(mon);
        return -1;
    }
    /* Bounded: MONITOR shows at most a handful of lines for one cycle. */
    int seen = 0;
    for (int i = 0; i < 64 && seen < 2; i++) {
        void *v = NULL;
        if (redisGetReply(mon, &v) != REDIS_OK || !v)
            break;
        redisReply *line = v;
        char argv[MAX_ARGS][256];
        int n = line->type == REDIS_REPLY_STATUS ? split_monitor(line->str, argv) : 0;
        /* EVALSHA sha 2 key key2 lease field [more ARGV, acquire only] */
        if (n >= 7 && strcasecmp(argv[0], "EVALSHA") == 0 && strcmp(argv[2], "2") == 0) {
            char *sha = seen == 0 ? cc->acquire_sha : cc->release_sha;
            char *key2 = seen == 0 ? cc->token_key : cc->channel;
            snprintf(sha, 41, "%s", argv[1]);
            snprintf(key2, sizeof cc->token_key, "%s", argv[4]);
            snprintf(cc->lease, sizeof cc->lease, "%s", argv[5]);
            snprintf(cc->field, sizeof cc->field, "%s", argv[6]);
            if (seen == 0)
                snprintf(cc->acquire_extra, sizeof cc->acquire_extra, "%s", n > 7 ? argv[7] : "");
            seen++;
        }
        freeReplyObject(line);
    }
    redisFree(mon);
    /* A cycle over all nodes loads the scripts on each (the library loads
     * them on connect), so that the raw fan-out can EVALSHA them anywhere. */
    if (one_cycle(b->uris) != RLC_OK)
        return -1;
    if (seen < 2) {
        note("capture: expected two EVALSHA calls (acquire, release), saw %d", seen);
        return -1;
    }
    return 0;
}
