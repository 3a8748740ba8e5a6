/*
 * conn.c - connecting, writing and reading one Redis connection.
 *
 * Sockets are non-blocking from the first syscall: a Redlock call opens or
 * uses N of them at once and waits for all with one poll(), so nothing here
 * may block. hiredis parses the replies (redisReader); the connection's own
 * queue holds what is not yet written.
 *
 * The handshake (AUTH, SELECT) is not a separate round trip: its commands go
 * first in the queue, pipelined with whatever the first caller wants, and
 * their replies are checked here before any caller sees a reply.
 *
 * A rediss:// node's connection puts TLS (tls.c) between the socket and
 * those bytes: after the TCP connect it stays CONNECTING until the TLS
 * handshake is done, telling its poller which event each step waits for
 * (conn_events), and it reads until OpenSSL holds nothing more, since
 * poll() only sees the socket.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "redlockc.h"
#include "clock.h"
#include "cmd.h"
#include "conn.h"
#include "resolve.h"
#include "owner.h"
#include "scripts.h"
#include "tls.h"

void conn_init(struct conn *c, const struct node_addr *node, bool load_scripts)
{
    memset(c, 0, sizeof *c);
    c->node = node;
    c->load_scripts = load_scripts;
    c->fd = -1;
    c->state = CONN_CLOSED;
}

int conn_queue(struct conn *c, const char *data, size_t len)
{
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 1024;
        while (cap < c->out_len + len)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p)
            return RLC_E_NOMEM;
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    return RLC_OK;
}

enum handshake_kind { HS_AUTH, HS_SELECT, HS_SCRIPT, HS_ROLE };

static struct script *const all_scripts[] = {&script_acquire, &script_release, &script_undo,
                                             &script_renew,
                                             &script_force_release, &script_token_floor};
#define NSCRIPTS (sizeof all_scripts / sizeof all_scripts[0])

/* The layer above's scripts (conn_load_also): written once, under state 1,
 * and read only once state is 2, so a connect on another thread sees the
 * whole list or none of it. */
static struct {
    const struct script *const *list;
    size_t n;
} extra;
static atomic_int extra_state; /* 0 none, 1 being set, 2 set */

_Static_assert(3 + NSCRIPTS + CONN_EXTRA_SCRIPTS_MAX <= CONN_HANDSHAKE_MAX,
               "the handshake's kinds must fit in conn.handshake");

void conn_load_also(const struct script *const *list, size_t n)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&extra_state, &none, 1))
        return;
    extra.list = list;
    extra.n = n < CONN_EXTRA_SCRIPTS_MAX ? n : CONN_EXTRA_SCRIPTS_MAX;
    atomic_store_explicit(&extra_state, 2, memory_order_release);
}

/* Queues a SCRIPT LOAD of s into cmds[*ncmds] and its kind. */
static void add_script_load(struct conn *c, struct rlc_cmd **cmds, int *ncmds,
                            const struct script *s)
{
    c->handshake[*ncmds] = HS_SCRIPT;
    cmds[(*ncmds)++] = cmd_script_load(s);
}

/* Puts the handshake in front of whatever is queued already. Loading the
 * scripts here means EVALSHA works on this connection from its first call,
 * even on a fresh or restarted server: no NOSCRIPT round trip, and nothing
 * that depends on somebody being there to retry it. */
static int queue_handshake(struct conn *c)
{
    const struct node_addr *n = c->node;
    struct rlc_cmd *cmds[CONN_HANDSHAKE_MAX];
    int ncmds = 0, rc = RLC_OK;
    c->handshake_left = c->handshake_next = 0;
    if (n->password) {
        const char *argv[3] = {"AUTH", n->user ? n->user : n->password, n->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(n->password)};
        c->handshake[ncmds] = HS_AUTH;
        cmds[ncmds++] = cmd_format(n->user ? 3 : 2, argv, lens);
    }
    if (n->db != 0) {
        char db[16];
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)snprintf(db, sizeof db, "%d", n->db)};
        c->handshake[ncmds] = HS_SELECT;
        cmds[ncmds++] = cmd_format(2, argv, lens);
    }
    if (n->topology == RLC_TOPO_SENTINEL) {
        /* The sentinels' answer may be stale (a failover under way, a
         * sentinel that missed it): the node itself says whether it is the
         * master, in the same round trip. */
        const char *argv[1] = {"ROLE"};
        size_t lens[1] = {4};
        c->handshake[ncmds] = HS_ROLE;
        cmds[ncmds++] = cmd_format(1, argv, lens);
    }
    for (size_t i = 0; c->load_scripts && i < NSCRIPTS; i++)
        add_script_load(c, cmds, &ncmds, all_scripts[i]);
    bool more = atomic_load_explicit(&extra_state, memory_order_acquire) == 2;
    for (size_t i = 0; c->load_scripts && more && i < extra.n; i++)
        add_script_load(c, cmds, &ncmds, extra.list[i]);
    size_t pre = 0;
    for (int i = 0; i < ncmds; i++)
        pre = cmds[i] ? pre + cmds[i]->len : pre;
    char *buf = malloc(pre + c->out_len + 1);
    for (int i = 0; i < ncmds; i++)
        if (!cmds[i])
            rc = RLC_E_NOMEM;
    if (!buf)
        rc = RLC_E_NOMEM;
    if (rc == RLC_OK) {
        size_t at = 0;
        for (int i = 0; i < ncmds; i++) {
            memcpy(buf + at, cmds[i]->data, cmds[i]->len);
            at += cmds[i]->len;
        }
        if (c->out_len)
            memcpy(buf + at, c->out, c->out_len);
        free(c->out);
        c->out = buf;
        c->out_len = c->out_cap = pre + c->out_len;
        c->handshake_left = ncmds;
    } else {
        free(buf);
    }
    for (int i = 0; i < ncmds; i++)
        cmd_unref(cmds[i]);
    return rc;
}

/* Starts a non-blocking connect to one address; 0, or -errno. */
static int connect_addr(struct conn *c, const struct sockaddr *sa, socklen_t len, int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (family != AF_UNIX) {
        int one = 1;
        /* Lock calls are tiny and latency-bound: never wait for Nagle. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    if (connect(fd, sa, len) == 0) {
        /* A TLS node is not ready before its handshake, which starts when
         * the socket takes its first bytes. */
        c->tcp_up = true;
        c->tls_want = POLLOUT;
        c->state = c->node->tls_ctx ? CONN_CONNECTING : CONN_READY;
    } else if (errno == EINPROGRESS || errno == EAGAIN) {
        c->state = CONN_CONNECTING;
    } else {
        int e = errno;
        close(fd);
        return -e;
    }
    c->fd = fd;
    return 0;
}

/* Starts a connect to the first address that takes one. */
static int connect_any(struct conn *c, const struct resolved *a, int n, char err[RLC_ERRLEN])
{
    int e = -EADDRNOTAVAIL;
    for (int i = 0; i < n && e != 0; i++)
        e = connect_addr(c, (const struct sockaddr *)&a[i].sa, a[i].len, a[i].family);
    if (e != 0) {
        snprintf(err, RLC_ERRLEN, "cannot connect to %s: %s", c->node->label, strerror(-e));
        conn_master_lost(c);
        conn_close(c);
        return RLC_E_CONNECT;
    }
    return RLC_OK;
}

int conn_start(struct conn *c, char err[RLC_ERRLEN])
{
    const struct node_addr *n = c->node;
    c->reader = redisReaderCreate();
    if (!c->reader || queue_handshake(c) != RLC_OK) {
        snprintf(err, RLC_ERRLEN, "out of memory connecting to %s", n->label);
        conn_close(c);
        return RLC_E_NOMEM;
    }
    c->connect_started_ns = rlc_now_ns();

    if (n->is_unix) {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof sun);
        sun.sun_family = AF_UNIX;
        memcpy(sun.sun_path, n->path, strlen(n->path) + 1);
        int e = connect_addr(c, (struct sockaddr *)&sun, sizeof sun, AF_UNIX);
        if (e != 0) {
            snprintf(err, RLC_ERRLEN, "cannot connect to %s: %s", n->label, strerror(-e));
            conn_close(c);
            return RLC_E_CONNECT;
        }
        return RLC_OK;
    }
    struct resolved a[RLC_RESOLVED_MAX];
    int na = resolver_cached(n->resolver, a, &c->addr_gen);
    if (na > 0)
        return connect_any(c, a, na, err);
    if (resolver_wait(n->resolver, &c->fd, &c->resolve_gen) != RLC_OK) {
        snprintf(err, RLC_ERRLEN, "cannot start a name lookup for %s", n->label);
        conn_close(c);
        return RLC_E_NOMEM;
    }
    c->resolving = true;
    c->state = CONN_CONNECTING;
    return RLC_OK;
}

/* The lookup a CONNECTING connection waits for: still running (RLC_OK, no
 * change), or over: the connect to its answer begins. */
static int finish_lookup(struct conn *c, char err[RLC_ERRLEN])
{
    struct resolved a[RLC_RESOLVED_MAX];
    int na = 0;
    char why[200];
    if (!resolver_done(c->node->resolver, c->resolve_gen, a, &na, &c->addr_gen, why, sizeof why))
        return RLC_OK;
    resolver_forget(c->node->resolver, c->fd);
    c->fd = -1;
    c->resolving = false;
    if (na == 0) {
        snprintf(err, RLC_ERRLEN, "cannot %s %s: %s",
                 c->node->topology == RLC_TOPO_SENTINEL ? "find" : "resolve", c->node->label,
                 why);
        conn_close(c);
        return RLC_E_CONNECT;
    }
    return connect_any(c, a, na, err);
}

short conn_events(const struct conn *c)
{
    if (c->state == CONN_CONNECTING)
        return c->tcp_up && c->node->tls_ctx ? c->tls_want : POLLOUT;
    if (c->state != CONN_READY)
        return 0;
    return POLLIN | (c->out_len > 0 && c->tls_want != POLLIN ? POLLOUT : 0);
}

/* The TLS handshake's next step, on a connected socket. */
static int tls_step(struct conn *c, char err[RLC_ERRLEN])
{
    const struct node_addr *n = c->node;
    if (!c->ssl) {
        /* A sentinel node's master is known by the address the sentinels
         * gave, which is where the socket went: check that (NULL). */
        c->ssl = tls_session_new(n->tls_ctx, c->fd,
                                 n->topology == RLC_TOPO_SENTINEL ? NULL : n->host, n->label,
                                 err, RLC_ERRLEN);
        if (!c->ssl) {
            conn_close(c);
            return RLC_E_CONNECT;
        }
        c->ssl_fork_gen = owner_fork_generation();
    }
    int r = tls_handshake(c->ssl, &c->tls_want, n->label, err, RLC_ERRLEN);
    if (r < 0) {
        conn_close(c);
        return RLC_E_CONNECT;
    }
    if (r > 0)
        c->state = CONN_READY;
    return RLC_OK;
}

int conn_finish_connect(struct conn *c, char err[RLC_ERRLEN])
{
    if (c->resolving)
        return finish_lookup(c, err);
    if (c->tcp_up)
        return tls_step(c, err);
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr == EINPROGRESS)
        return RLC_OK;
    if (soerr != 0) {
        snprintf(err, RLC_ERRLEN, "cannot connect to %s: %s", c->node->label, strerror(soerr));
        conn_master_lost(c);
        conn_close(c);
        return RLC_E_CONNECT;
    }
    c->tcp_up = true;
    if (c->node->tls_ctx)
        return tls_step(c, err);
    c->state = CONN_READY;
    return RLC_OK;
}

/* conn_flush over TLS: SSL_write takes what it can (partial writes are on);
 * "not now" keeps the rest queued, the event it waits for in tls_want. */
static int tls_flush(struct conn *c, char err[RLC_ERRLEN])
{
    size_t done = 0;
    c->tls_want = 0;
    while (done < c->out_len) {
        ssize_t n = tls_write(c->ssl, c->out + done, c->out_len - done, &c->tls_want,
                              c->node->label, err, RLC_ERRLEN);
        if (n < 0) {
            conn_master_lost(c);
            conn_close(c);
            return RLC_E_CONNECT;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    memmove(c->out, c->out + done, c->out_len - done);
    c->out_len -= done;
    return RLC_OK;
}

int conn_flush(struct conn *c, char err[RLC_ERRLEN])
{
    if (c->ssl)
        return tls_flush(c, err);
    size_t done = 0;
    while (done < c->out_len) {
        ssize_t n = send(c->fd, c->out + done, c->out_len - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            snprintf(err, RLC_ERRLEN, "connection to %s broke: %s", c->node->label,
                     strerror(errno));
            conn_master_lost(c);
            conn_close(c);
            return RLC_E_CONNECT;
        }
    }
    memmove(c->out, c->out + done, c->out_len - done);
    c->out_len -= done;
    return RLC_OK;
}

/* conn_read over TLS: until SSL_read says it needs the socket again, or
 * bytes OpenSSL already decrypted would sit where poll() cannot see them. */
static int tls_read_all(struct conn *c, char err[RLC_ERRLEN])
{
    char buf[16384];
    short want = 0;
    for (;;) {
        ssize_t n = tls_read(c->ssl, buf, sizeof buf, &want, c->node->label, err, RLC_ERRLEN);
        if (n < 0) {
            conn_master_lost(c);
            conn_close(c);
            return RLC_E_CONNECT;
        }
        if (n == 0) {
            /* A write that waited for the peer's bytes may go on now. */
            if (c->tls_want == POLLIN)
                c->tls_want = 0;
            return RLC_OK;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            snprintf(err, RLC_ERRLEN, "out of memory reading from %s", c->node->label);
            conn_close(c);
            return RLC_E_NOMEM;
        }
    }
}

int conn_read(struct conn *c, char err[RLC_ERRLEN])
{
    if (c->ssl)
        return tls_read_all(c, err);
    char buf[16384];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
                snprintf(err, RLC_ERRLEN, "out of memory reading from %s", c->node->label);
                conn_close(c);
                return RLC_E_NOMEM;
            }
            if ((size_t)n < sizeof buf)
                return RLC_OK;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return RLC_OK;
        } else {
            snprintf(err, RLC_ERRLEN, "connection to %s %s", c->node->label,
                     n == 0 ? "closed by the server" : strerror(errno));
            conn_master_lost(c);
            conn_close(c);
            return RLC_E_CONNECT;
        }
    }
}

static bool role_is_master(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
}

int conn_next_reply(struct conn *c, redisReply **reply, char err[RLC_ERRLEN])
{
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            snprintf(err, RLC_ERRLEN, "protocol error from %s: %s", c->node->label,
                     c->reader->errstr);
            conn_close(c);
            return RLC_E_PROTOCOL;
        }
        if (!r)
            return 0;
        if (c->handshake_left == 0) {
            *reply = r;
            return 1;
        }
        redisReply *hr = r;
        int kind = c->handshake[c->handshake_next++];
        c->handshake_left--;
        if (kind == HS_ROLE && !role_is_master(hr)) {
            snprintf(err, RLC_ERRLEN, "%s: the node the sentinels named is not the master "
                     "(ROLE: %s); asking them again", c->node->label,
                     hr->type == REDIS_REPLY_ARRAY && hr->elements > 0 &&
                             hr->element[0]->type == REDIS_REPLY_STRING
                         ? hr->element[0]->str
                         : hr->type == REDIS_REPLY_ERROR ? hr->str : "?");
            freeReplyObject(hr);
            conn_master_lost(c);
            conn_close(c);
            return RLC_E_CONNECT;
        }
        /* A refused SCRIPT LOAD is not fatal: EVALSHA will report the real
         * error (or NOSCRIPT: the mux loads the script again, and sends the
         * call as EVAL only if that does not take, see mux.c). */
        if (hr->type == REDIS_REPLY_ERROR && kind != HS_SCRIPT) {
            snprintf(err, RLC_ERRLEN, "%s refused by %s: %s",
                     kind == HS_AUTH ? "AUTH" : "SELECT", c->node->label, hr->str);
            freeReplyObject(hr);
            conn_close(c);
            return kind == HS_AUTH ? RLC_E_AUTH : RLC_E_SERVER;
        }
        freeReplyObject(hr);
    }
}

int conn_peer_closed(struct conn *c)
{
    /* A TLS peer that closes sends a close_notify first: the socket then
     * holds bytes, which MSG_PEEK would take for a live connection. */
    if (c->ssl) {
        char why[300];
        return tls_peer_closed(c->ssl, "", why, sizeof why);
    }
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void conn_close(struct conn *c)
{
    if (c->resolving)
        resolver_forget(c->node->resolver, c->fd);
    else if (c->fd >= 0)
        close(c->fd);
    /* A forked child's copy of the session is left alone: OpenSSL's locks
     * may have been held by a thread the child does not have. */
    if (c->ssl && c->ssl_fork_gen == owner_fork_generation())
        tls_session_free(c->ssl);
    else
        tls_abandon(c->ssl);
    c->ssl = NULL;
    c->tcp_up = false;
    c->tls_want = 0;
    c->resolving = false;
    c->fd = -1;
    c->state = CONN_CLOSED;
    if (c->reader)
        redisReaderFree(c->reader);
    c->reader = NULL;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_cap = 0;
    c->handshake_left = c->handshake_next = 0;
}

int conn_exchange(struct conn *c, int n, redisReply **out, int64_t deadline_ns,
                  char err[RLC_ERRLEN])
{
    int got = 0, rc = RLC_OK;
    while (rc == RLC_OK && got < n) {
        if (c->state == CONN_READY && c->out_len > 0 && (rc = conn_flush(c, err)) != RLC_OK)
            break;
        redisReply *r;
        int k = 0;
        while (got < n && c->state == CONN_READY && (k = conn_next_reply(c, &r, err)) > 0)
            out[got++] = r;
        if (k < 0) {
            rc = k;
            break;
        }
        if (got == n)
            break;
        if (c->state == CONN_CLOSED) {
            snprintf(err, RLC_ERRLEN, "connection to %s closed", c->node->label);
            rc = RLC_E_CONNECT;
            break;
        }
        int64_t now = rlc_now_ns();
        if (now >= deadline_ns) {
            snprintf(err, RLC_ERRLEN, "%s did not %s in time", c->node->label,
                     c->state == CONN_CONNECTING ? "take a connection" : "answer");
            rc = c->state == CONN_CONNECTING ? RLC_E_CONNECT : RLC_E_TIMEOUT;
            break;
        }
        struct pollfd p = {c->fd, conn_events(c), 0};
        if (poll(&p, 1, rlc_poll_ms_until(deadline_ns, now)) <= 0)
            continue;
        if (c->state == CONN_CONNECTING)
            rc = conn_finish_connect(c, err);
        else if (p.revents & (POLLIN | POLLERR | POLLHUP))
            rc = conn_read(c, err);
    }
    if (rc != RLC_OK)
        while (got > 0)
            freeReplyObject(out[--got]);
    return rc;
}

void conn_master_lost(struct conn *c)
{
    if (c->node->topology == RLC_TOPO_SENTINEL)
        resolver_invalidate(c->node->resolver);
}

bool conn_moved(const struct conn *c)
{
    return c->node->topology == RLC_TOPO_SENTINEL && c->state != CONN_CLOSED && !c->resolving &&
           resolver_addr_gen(c->node->resolver) != c->addr_gen;
}
