/*
 * sentinel_watch.c - one +switch-master subscriber per sentinel node.
 *
 * The subscriber is an ordinary non-blocking connection (conn.c) to one
 * sentinel at a time; its "node" is the sentinel itself, with the sentinel
 * credentials, so conn.c's AUTH handshake and name lookup apply unchanged.
 * If it cannot connect within connect_timeout_ms, or the sentinel drops it,
 * the next sentinel of the list is tried, after a short pause (longer once
 * every sentinel failed in a row), so a dead sentinel costs no busy loop.
 *
 * A switch missed while no sentinel was connected is caught by asking the
 * sentinels again (resolver_refresh) whenever a subscription resumes; and
 * even without this watch, a connection to a demoted or dead master is
 * noticed by conn.c/mux.c (ROLE, READONLY, a failed connect), which make
 * the next connect ask the sentinels. The watch only makes it sooner.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "clock.h"
#include "cmd.h"
#include "conn.h"
#include "resolve.h"
#include "sentinel_watch.h"

#define RETRY_NEXT_MS 100  /* before trying the next sentinel */
#define RETRY_ROUND_MS 1000 /* after every sentinel failed in a row */

struct watch {
    struct node_addr *node;  /* the client's sentinel node: seeds, master, resolver */
    struct node_addr cur;    /* the sentinel being watched, as a node conn.c can use */
    struct conn conn;
    int idx;                 /* which seed cur is */
    int failed_in_row;
    bool subscribed, ever_subscribed;
    int64_t retry_at_ns;
};

struct sentinel_watch {
    int n;
    struct watch *w;
    struct watch *polled[RLC_MAX_NODES];
    const char *user, *password;
    int64_t connect_timeout_ns;
};

struct sentinel_watch *sentinel_watch_new(struct node_addr *nodes, int n, const char *user,
                                          const char *password, int64_t connect_timeout_ms)
{
    struct sentinel_watch *sw = calloc(1, sizeof *sw);
    if (!sw)
        return NULL;
    sw->user = user;
    sw->password = password;
    sw->connect_timeout_ns = connect_timeout_ms * RLC_NS_PER_MS;
    int k = 0;
    for (int i = 0; i < n; i++)
        k += nodes[i].topology == RLC_TOPO_SENTINEL;
    if (k == 0)
        return sw;
    if (!(sw->w = calloc((size_t)k, sizeof *sw->w))) {
        free(sw);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (nodes[i].topology == RLC_TOPO_SENTINEL) {
            struct watch *w = &sw->w[sw->n++];
            w->node = &nodes[i];
            conn_init(&w->conn, &w->cur, false);
        }
    return sw;
}

/* Closes the connection and forgets the sentinel's resolver. */
static void drop(struct watch *w)
{
    conn_close(&w->conn);
    resolver_unref(w->cur.resolver);
    w->cur.resolver = NULL;
    w->subscribed = false;
}

void sentinel_watch_free(struct sentinel_watch *sw)
{
    if (!sw)
        return;
    for (int i = 0; i < sw->n; i++)
        drop(&sw->w[i]);
    free(sw->w);
    free(sw);
}

/* This sentinel failed: the next one, after a pause. */
static void next_sentinel(struct watch *w, int64_t now)
{
    drop(w);
    w->idx = (w->idx + 1) % w->node->n_seeds;
    w->failed_in_row++;
    int64_t pause = w->failed_in_row >= w->node->n_seeds ? RETRY_ROUND_MS : RETRY_NEXT_MS;
    if (w->failed_in_row >= w->node->n_seeds)
        w->failed_in_row = 0;
    w->retry_at_ns = rlc_deadline_after_ms(now, pause);
}

static int start(struct sentinel_watch *sw, struct watch *w)
{
    const struct seed_addr *s = &w->node->seeds[w->idx];
    memset(&w->cur, 0, sizeof w->cur);
    w->cur.host = s->host;
    w->cur.port = s->port;
    w->cur.user = (char *)sw->user;
    w->cur.password = (char *)sw->password;
    /* rediss-sentinel://: the sentinels speak TLS too (named by their host). */
    w->cur.tls = w->node->tls;
    w->cur.tls_ctx = w->node->tls_ctx;
    snprintf(w->cur.label, sizeof w->cur.label, "sentinel %s", s->label);
    if (!(w->cur.resolver = resolver_new(s->host, s->port)))
        return RLC_E_NOMEM;
    conn_init(&w->conn, &w->cur, false);
    char err[RLC_ERRLEN];
    int rc = conn_start(&w->conn, err);
    if (rc != RLC_OK)
        return rc;
    const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
    size_t lens[2] = {9, 14};
    struct rlc_cmd *cmd = cmd_format(2, argv, lens);
    rc = cmd ? conn_queue(&w->conn, cmd->data, cmd->len) : RLC_E_NOMEM;
    cmd_unref(cmd);
    return rc;
}

int sentinel_watch_prepare(struct sentinel_watch *sw, struct pollfd *pfd, int max,
                           int64_t *next_ns)
{
    int np = 0;
    int64_t now = rlc_now_ns();
    for (int i = 0; i < sw->n && np < max; i++) {
        struct watch *w = &sw->w[i];
        struct conn *c = &w->conn;
        if (c->state == CONN_CLOSED) {
            if (now < w->retry_at_ns) {
                if (w->retry_at_ns < *next_ns)
                    *next_ns = w->retry_at_ns;
                continue;
            }
            if (start(sw, w) != RLC_OK) {
                next_sentinel(w, now);
                if (w->retry_at_ns < *next_ns)
                    *next_ns = w->retry_at_ns;
                continue;
            }
        }
        if (c->state == CONN_CONNECTING) {
            int64_t deadline = c->connect_started_ns + sw->connect_timeout_ns;
            if (now >= deadline) {
                next_sentinel(w, now);
                if (w->retry_at_ns < *next_ns)
                    *next_ns = w->retry_at_ns;
                continue;
            }
            if (deadline < *next_ns)
                *next_ns = deadline;
        }
        pfd[np] = (struct pollfd){c->fd, conn_events(c), 0};
        sw->polled[np++] = w;
    }
    return np;
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>": our master moved? */
static void on_switch(struct watch *w, const char *text)
{
    char name[256], old_ip[64], old_port[8], ip[64], port[8];
    if (sscanf(text, "%255s %63s %7s %63s %7s", name, old_ip, old_port, ip, port) != 5)
        return;
    if (strcmp(name, w->node->master_name) == 0)
        resolver_switch(w->node->resolver, ip, port);
}

static void on_reply(struct watch *w, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "subscribe") == 0) {
        w->subscribed = true;
        w->failed_in_row = 0;
        /* Were we away, a switch may have gone by unheard. */
        if (w->ever_subscribed)
            resolver_refresh(w->node->resolver);
        w->ever_subscribed = true;
    } else if (strcmp(kind, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
        on_switch(w, r->element[2]->str);
    }
}

static int service_one(struct watch *w, short revents, char err[RLC_ERRLEN])
{
    struct conn *c = &w->conn;
    int rc = RLC_OK;
    if (c->state == CONN_CONNECTING) {
        rc = conn_finish_connect(c, err); /* polled for conn_events() */
    } else if (revents & (POLLIN | POLLERR | POLLHUP)) {
        rc = conn_read(c, err);
        redisReply *reply;
        int k;
        while (rc == RLC_OK && (k = conn_next_reply(c, &reply, err)) != 0) {
            if (k < 0) {
                rc = k;
                break;
            }
            if (reply->type == REDIS_REPLY_ERROR)
                rc = RLC_E_SERVER; /* SUBSCRIBE refused (ACL): try another */
            else
                on_reply(w, reply);
            freeReplyObject(reply);
        }
    }
    if (rc == RLC_OK && c->state == CONN_READY && c->out_len > 0)
        rc = conn_flush(c, err);
    return rc;
}

void sentinel_watch_service(struct sentinel_watch *sw, const struct pollfd *pfd, int n)
{
    int64_t now = rlc_now_ns();
    for (int i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        struct watch *w = sw->polled[i];
        char err[RLC_ERRLEN];
        if (service_one(w, pfd[i].revents, err) != RLC_OK || w->conn.state == CONN_CLOSED)
            next_sentinel(w, now);
    }
}
