/*
 * cluster_map.c - a cluster's slot map (cluster_map.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_map.h"

int cmap_master(struct cmap *m, const char *host, size_t host_len, int port)
{
    if (host_len == 0 || host_len >= sizeof m->m[0].host || port <= 0 || port > 65535)
        return -1;
    for (int i = 0; i < m->n; i++)
        if (m->m[i].port == port && strlen(m->m[i].host) == host_len &&
            memcmp(m->m[i].host, host, host_len) == 0)
            return i;
    if (m->n == CMAP_MAX_MASTERS)
        return -1;
    struct cmap_master *c = &m->m[m->n];
    memcpy(c->host, host, host_len);
    c->host[host_len] = '\0';
    c->port = port;
    snprintf(c->label, sizeof c->label, memchr(host, ':', host_len) ? "[%s]:%d" : "%s:%d",
             c->host, port);
    return m->n++;
}

static bool is_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/* Each element: [start, end, [host, port, id, ...], replicas...]. */
int cmap_apply_slots(struct cmap *m, const redisReply *r, int asked, bool *changed)
{
    *changed = false;
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return 0;
    uint8_t owner[RLC_SLOTS];
    memset(owner, 0, sizeof owner);
    int mapped = 0;
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *a = e->element[2];
        if (!is_str(a->element[0]) || a->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        const char *host = a->element[0]->str;
        size_t hl = a->element[0]->len;
        if ((hl == 0 || (hl == 1 && host[0] == '?')) && asked >= 0 && asked < m->n) {
            host = m->m[asked].host; /* it does not know its address: the one asked */
            hl = strlen(host);
        }
        int i = cmap_master(m, host, hl, (int)a->element[1]->integer);
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        for (long long s = lo; i >= 0 && s <= hi && s >= 0 && s < RLC_SLOTS; s++, mapped++)
            owner[s] = (uint8_t)(i + 1);
    }
    if (mapped == 0)
        return 0;
    *changed = memcmp(owner, m->owner, sizeof owner) != 0;
    memcpy(m->owner, owner, sizeof owner);
    m->loaded = true;
    return mapped;
}

static bool starts(const redisReply *r, const char *w)
{
    size_t n = strlen(w);
    return r->len >= n && memcmp(r->str, w, n) == 0;
}

/* "<slot> <host>:<port>" (an IPv6 host: the last ':' splits). */
static bool parse_target(const char *s, size_t len, int *slot, const char **host,
                         size_t *host_len, int *port)
{
    const char *sp = memchr(s, ' ', len);
    const char *colon = NULL;
    for (const char *p = s + len; p > s; p--)
        if (p[-1] == ':') {
            colon = p - 1;
            break;
        }
    if (!sp || !colon || colon < sp)
        return false;
    char num[16];
    size_t sl = (size_t)(sp - s), pl = (size_t)(s + len - colon - 1);
    if (sl == 0 || sl >= sizeof num || pl == 0 || pl >= sizeof num)
        return false;
    memcpy(num, s, sl);
    num[sl] = '\0';
    *slot = atoi(num);
    memcpy(num, colon + 1, pl);
    num[pl] = '\0';
    *port = atoi(num);
    *host = sp + 1;
    *host_len = (size_t)(colon - sp - 1);
    return *slot >= 0 && *slot < RLC_SLOTS && *port > 0 && *port < 65536;
}

bool cmap_is_redirect(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           (starts(r, "MOVED ") || starts(r, "ASK ") || starts(r, "TRYAGAIN") ||
            starts(r, "CLUSTERDOWN"));
}

enum cmap_redirect cmap_redirect(struct cmap *m, const redisReply *r, int asked, int *slot,
                                 int *master)
{
    *slot = -1;
    *master = -1;
    if (!r || r->type != REDIS_REPLY_ERROR)
        return CMAP_NONE;
    if (starts(r, "TRYAGAIN") || starts(r, "CLUSTERDOWN"))
        return CMAP_RETRY;
    bool moved = starts(r, "MOVED ");
    if (!moved && !starts(r, "ASK "))
        return CMAP_NONE;
    size_t skip = moved ? 6 : 4;
    const char *host;
    size_t hl;
    int port;
    if (parse_target(r->str + skip, r->len - skip, slot, &host, &hl, &port)) {
        if (hl == 0 && asked >= 0 && asked < m->n) {
            host = m->m[asked].host;
            hl = strlen(host);
        }
        *master = cmap_master(m, host, hl, port);
        if (moved && *master >= 0)
            m->owner[*slot] = (uint8_t)(*master + 1);
    }
    return moved ? CMAP_MOVED : CMAP_ASK;
}
