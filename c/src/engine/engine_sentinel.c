/*
 * engine_sentinel.c - where a redis-sentinel:// node's master is.
 *
 * A sentinel node has, beyond its command and subscriber connections, a
 * discovery connection (numbered after every node's two). It talks to one
 * sentinel at a time: AUTH with the sentinel_* options, then
 *
 *     SENTINEL get-master-addr-by-name <name>    -> the master's host, port
 *     SUBSCRIBE +switch-master                    -> the next failovers
 *
 * and stays subscribed. The node's data connections are wanted only while a
 * master is known, and connect to that address (rlc_engine_conn_address).
 *
 * The master changes (a +switch-master naming ours, or a new answer after a
 * re-ask): the data connections are dropped, so what was in flight on them
 * is settled as unanswered (engine_conn.c: redo requests go out again, an
 * acquire's round undoes), and they reopen at the new address.
 *
 * The master is suspected (its data connection closed, failed to connect,
 * or answered READONLY: a demoted master): it is forgotten, the data
 * connections are dropped, and the discovery connection is dropped so that
 * it reconnects and asks again. A sentinel that is down, does not answer in
 * time, refuses AUTH or does not know the name is passed over for the next
 * one; after every sentinel was tried without an answer, the next round
 * waits a backoff.
 *
 * Safety does not rest on any of this: a write that reaches a replica is
 * refused (READONLY), and a lock written to a master that is then replaced
 * may be missing on its successor (asynchronous replication: README,
 * "Sentinel"). Discovery only decides where requests go.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"

#define ASK_BACKOFF_MIN_MS 100
#define ASK_BACKOFF_MAX_MS 2000

enum { S_AUTH = 1, S_ASK, S_WATCH };

static struct sentinel *sent_of(const rlc_engine *e, int node)
{
    return e->addrs[node].topology == RLC_TOPO_SENTINEL ? &e->sentinels[node] : NULL;
}

bool sentinel_master_known(const rlc_engine *e, int node)
{
    const struct sentinel *s = sent_of(e, node);
    return !s || s->host;
}

static int64_t ask_limit_ms(const rlc_engine *e)
{
    return e->opts.connect_timeout_ms + e->opts.io_timeout_ms;
}

void sentinel_schedule(rlc_engine *e, struct conn *c)
{
    struct sentinel *s = &e->sentinels[c->node];
    int64_t at = -1;
    if (c->state == C_UP && s->step != S_WATCH)
        at = s->asked_at + ask_limit_ms(e);
    else if (c->state == C_DOWN && c->retry_at > e->now)
        at = c->retry_at;
    timer_set(e, &c->timer, T_CONN, c, at);
}

/* The data connections of node go, to reopen wherever the master is now. */
static void drop_data(rlc_engine *e, int node, const char *why)
{
    struct conn *all[4] = {&e->conns[2 * node], &e->conns[2 * node + 1],
                           track_conn(e, node, TRK_SUB), track_conn(e, node, TRK_RD)};
    for (int k = 0; k < 4; k++)
        if (all[k] && all[k]->state == C_UP)
            conn_drop(e, all[k], RLC_E_CONNECT, why);
}

static void set_master(rlc_engine *e, int node, const char *host, size_t host_len, int port)
{
    struct sentinel *s = &e->sentinels[node];
    if (s->host && s->port == port && strlen(s->host) == host_len &&
        memcmp(s->host, host, host_len) == 0)
        return;
    char *h = malloc(host_len + 1);
    if (!h)
        abort();
    memcpy(h, host, host_len);
    h[host_len] = 0;
    bool moved = s->host != NULL;
    free(s->host);
    s->host = h;
    s->port = port;
    if (moved) {
        char why[200];
        snprintf(why, sizeof why, "the master of '%.60s' moved to %.80s:%d",
                 e->addrs[node].master_name, h, port);
        drop_data(e, node, why);
    }
}

static void forget_master(rlc_engine *e, int node)
{
    struct sentinel *s = &e->sentinels[node];
    free(s->host);
    s->host = NULL;
}

/* The sentinel talked to now gave no usable answer: the next one is asked. */
static void pass_over(rlc_engine *e, struct conn *c, const char *fmt, const char *detail)
{
    struct sentinel *s = &e->sentinels[c->node];
    snprintf(s->why, sizeof s->why, fmt, e->addrs[c->node].seeds[s->seed].label, detail,
             e->addrs[c->node].master_name);
    conn_drop(e, c, RLC_E_CONNECT, s->why);
}

void sentinel_connected(rlc_engine *e, struct conn *c)
{
    struct sentinel *s = &e->sentinels[c->node];
    c->state = C_UP;
    c->reader = redisReaderCreate();
    if (!c->reader)
        abort();
    c->out_len = c->out_sent = 0;
    c->taken = c->appended;
    s->asked_at = e->now;
    s->step = S_ASK;
    if (e->opts.sentinel_password) {
        const char *user = e->opts.sentinel_user;
        const char *argv[3] = {"AUTH", user ? user : e->opts.sentinel_password,
                               e->opts.sentinel_password};
        conn_append_cmd(e, c, user ? 3 : 2, argv, NULL);
        s->step = S_AUTH;
    }
    const char *ask[3] = {"SENTINEL", "get-master-addr-by-name", e->addrs[c->node].master_name};
    conn_append_cmd(e, c, 3, ask, NULL);
    sentinel_schedule(e, c);
}

/* After the driver closed it (a drop of ours, a failed connect, a sentinel
 * gone): the next sentinel in the list is the one to try. */
void sentinel_closed(rlc_engine *e, struct conn *c)
{
    struct sentinel *s = &e->sentinels[c->node];
    const struct node_addr *a = &e->addrs[c->node];
    bool answered = s->step == S_WATCH;
    if (!answered && c->why[0])
        snprintf(s->why, sizeof s->why, "%s", c->why); /* a failed connect's why */
    s->step = 0;
    s->seed = (s->seed + 1) % a->n_seeds;
    if (answered) {
        s->unanswered = 0;
        s->backoff_ms = 0;
        c->retry_at = e->now;
    } else if (++s->unanswered < a->n_seeds) {
        c->retry_at = e->now; /* another sentinel may answer: at once */
    } else {
        s->unanswered = 0;
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : ASK_BACKOFF_MIN_MS;
        if (s->backoff_ms > ASK_BACKOFF_MAX_MS)
            s->backoff_ms = ASK_BACKOFF_MAX_MS;
        c->retry_at = e->now + s->backoff_ms;
        /* Every sentinel was tried and none named the master: what waits
         * for the node hears it now, as it would a node that refused the
         * connect, rather than at its deadline (a wrong TLS name, a
         * sentinel port that does not speak TLS, no sentinel up). */
        if (!s->host)
            conn_fail_queued(e, &e->conns[2 * c->node],
                             s->why[0] ? s->why : "no sentinel named the master");
    }
    sentinel_schedule(e, c);
}

int sentinel_want_open(const rlc_engine *e, const struct conn *c)
{
    if (c->state == C_DROPPED)
        return -1;
    if (c->state == C_UP)
        return 1;
    return e->now >= c->retry_at ? 1 : 0;
}

void sentinel_timer(rlc_engine *e, struct conn *c, int64_t now)
{
    struct sentinel *s = &e->sentinels[c->node];
    if (c->state == C_UP && s->step != S_WATCH && now >= s->asked_at + ask_limit_ms(e)) {
        pass_over(e, c, "sentinel %s did not answer%s about master '%s' in time", "");
        return;
    }
    sentinel_schedule(e, c);
}

void sentinel_suspect(rlc_engine *e, int node, const char *why)
{
    struct sentinel *s = sent_of(e, node);
    if (!s)
        return;
    forget_master(e, node);
    drop_data(e, node, why);
    struct conn *d = &e->conns[s->conn];
    if (d->state == C_UP)
        conn_drop(e, d, RLC_E_CONNECT, why); /* to ask again */
}

static bool is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static int parse_port(const char *p, size_t len)
{
    int port = 0;
    if (len == 0 || len > 5)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        port = port * 10 + (p[i] - '0');
    }
    return port >= 1 && port <= 65535 ? port : -1;
}

static void on_answer(rlc_engine *e, struct conn *c, const redisReply *r)
{
    struct sentinel *s = &e->sentinels[c->node];
    if (r->type == REDIS_REPLY_ERROR) {
        pass_over(e, c, "sentinel %s refused: %.100s (master '%s')", r->str);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_str(r->element[0]) ||
        !is_str(r->element[1])) {
        pass_over(e, c, "sentinel %s knows no master%s named '%s'", "");
        return;
    }
    int port = parse_port(r->element[1]->str, r->element[1]->len);
    if (port < 0 || r->element[0]->len == 0 || r->element[0]->len > 255) {
        pass_over(e, c, "sentinel %s gave an unusable address%s for master '%s'", "");
        return;
    }
    set_master(e, c->node, r->element[0]->str, r->element[0]->len, port);
    s->why[0] = 0;
    s->step = S_WATCH;
    const char *watch[2] = {"SUBSCRIBE", "+switch-master"};
    conn_append_cmd(e, c, 2, watch, NULL);
}

/* "+switch-master": "<name> <old-ip> <old-port> <new-ip> <new-port>". */
static void on_switch(rlc_engine *e, struct conn *c, const char *msg, size_t len)
{
    const char *name = e->addrs[c->node].master_name;
    size_t nl = strlen(name);
    if (len <= nl || memcmp(msg, name, nl) != 0 || msg[nl] != ' ')
        return; /* another master's failover */
    const char *f[5];
    size_t fl[5];
    int n = 0;
    for (size_t i = 0; i < len && n < 5;) {
        while (i < len && msg[i] == ' ')
            i++;
        size_t start = i;
        while (i < len && msg[i] != ' ')
            i++;
        if (i > start) {
            f[n] = msg + start;
            fl[n++] = i - start;
        }
    }
    int port = n == 5 ? parse_port(f[4], fl[4]) : -1;
    if (port < 0 || fl[3] > 255)
        return;
    set_master(e, c->node, f[3], fl[3], port);
}

static void on_reply(rlc_engine *e, struct conn *c, const redisReply *r)
{
    struct sentinel *s = &e->sentinels[c->node];
    if (s->step == S_AUTH) {
        if (r->type == REDIS_REPLY_ERROR)
            pass_over(e, c, "sentinel %s refused AUTH: %.100s (master '%s')", r->str);
        else
            s->step = S_ASK;
        return;
    }
    if (s->step == S_ASK) {
        on_answer(e, c, r);
        return;
    }
    /* S_WATCH: the subscription's confirmation, then messages */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && is_str(r->element[0]) &&
        strcmp(r->element[0]->str, "message") == 0 && is_str(r->element[2]))
        on_switch(e, c, r->element[2]->str, r->element[2]->len);
}

int sentinel_received(rlc_engine *e, struct conn *c, const char *data, size_t len)
{
    if (conn_feed(e, c, data, len) != RLC_OK)
        return RLC_E_PROTOCOL;
    redisReply *r;
    int got;
    while ((got = conn_next(e, c, &r)) > 0) {
        on_reply(e, c, r);
        freeReplyObject(r);
        if (c->state != C_UP)
            break;
    }
    sentinel_schedule(e, c);
    return got < 0 ? RLC_E_PROTOCOL : RLC_OK;
}

int sentinel_address(const rlc_engine *e, const struct conn *c, const char **host, int *port)
{
    const struct node_addr *a = &e->addrs[c->node];
    const struct sentinel *s = sent_of(e, c->node);
    if (c->disc) {
        *host = a->seeds[s->seed].host;
        *port = a->seeds[s->seed].port;
        return RLC_OK;
    }
    if (!s) {
        *host = a->is_unix ? a->path : a->host;
        *port = a->is_unix ? 0 : a->port;
        return RLC_OK;
    }
    if (!s->host)
        return -1;
    *host = s->host;
    *port = s->port;
    return RLC_OK;
}

const char *sentinel_why(const rlc_engine *e, int node)
{
    const struct sentinel *s = sent_of(e, node);
    return s && s->why[0] ? s->why : NULL;
}

int sentinel_make(rlc_engine *e, int first_conn)
{
    e->sentinels = calloc((size_t)e->n, sizeof *e->sentinels);
    if (!e->sentinels)
        return -1;
    int k = first_conn;
    for (int i = 0; i < e->n; i++) {
        if (e->addrs[i].topology != RLC_TOPO_SENTINEL)
            continue;
        e->sentinels[i].conn = k;
        e->conns[k].node = i;
        e->conns[k].disc = true;
        e->conns[k].timer.at = -1;
        k++;
    }
    return 0;
}

void sentinel_free(rlc_engine *e)
{
    if (!e->sentinels)
        return;
    for (int i = 0; i < e->n; i++)
        free(e->sentinels[i].host);
    free(e->sentinels);
    e->sentinels = NULL;
}
