/*
 * driver_conn.c - a socket (and TLS over it) for one of the engine's
 * connections. The engine decides when a connection is wanted, gives up on
 * a connect that takes too long (want_open -1) and frames every byte; this
 * file only opens, moves bytes and closes, never waiting: each step says
 * which poll event it needs next.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "driver_conn.h"
#include "resolve.h"
#include "tls.h"

void dconn_init(struct dconn *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

void dconn_close(struct dconn *c)
{
    tls_session_free(c->ssl);
    if (c->state == DC_RESOLVING)
        resolver_forget(c->res, c->fd); /* the lookup goes on for the next connect */
    else if (c->fd >= 0)
        close(c->fd);
    dconn_init(c);
}

void dconn_abandon(struct dconn *c)
{
    if (c->ssl)
        tls_abandon(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    dconn_init(c);
}

/* A non-blocking connect to one address: 0 connected, -EINPROGRESS, or
 * another -errno (the socket closed again). */
static int connect_one(struct dconn *c, const struct sockaddr *sa, socklen_t len, int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    int rc = connect(fd, sa, len) == 0 ? 0 : -errno;
    if (rc != 0 && rc != -EINPROGRESS) {
        close(fd);
        return rc;
    }
    c->fd = fd;
    return rc;
}

/* The socket is being made: TLS over it, and the state it is in. */
static int connected(struct dconn *c, int rc, char *err, size_t err_len)
{
    if (c->tls) {
        c->ssl = tls_session_new(c->tls, c->fd, c->host, c->host, err, err_len);
        if (!c->ssl) {
            dconn_close(c);
            return RLC_E_CONNECT;
        }
    }
    c->state = rc == -EINPROGRESS ? DC_CONNECTING : c->ssl ? DC_HANDSHAKE : DC_UP;
    c->tls_want = POLLOUT;
    return RLC_OK;
}

/* Connects to the first of the resolved addresses that takes a connect. */
static int connect_resolved(struct dconn *c, const struct resolved *a, int n, char *err,
                            size_t err_len)
{
    int rc = -EADDRNOTAVAIL;
    for (int i = 0; i < n && rc != 0 && rc != -EINPROGRESS; i++)
        rc = connect_one(c, (const struct sockaddr *)&a[i].sa, a[i].len, a[i].family);
    if (rc != 0 && rc != -EINPROGRESS) {
        snprintf(err, err_len, "%s", strerror(-rc)); /* the engine names the address */
        dconn_close(c);
        return RLC_E_CONNECT;
    }
    return connected(c, rc, err, err_len);
}

int dconn_start(struct dconn *c, const char *host, int port, struct resolver *res,
                struct tls_ctx *tls, char *err, size_t err_len)
{
    dconn_init(c);
    err[0] = '\0';
    c->tls = tls;
    snprintf(c->host, sizeof c->host, "%s", host);
    if (port && strchr(host, ':'))
        snprintf(c->label, sizeof c->label, "[%s]:%d", host, port);
    else if (port)
        snprintf(c->label, sizeof c->label, "%s:%d", host, port);
    else
        snprintf(c->label, sizeof c->label, "%s", host);
    if (port == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(host) >= sizeof sa.sun_path) {
            snprintf(err, err_len, "unix socket path too long: %s", host);
            return RLC_E_CONNECT;
        }
        memcpy(sa.sun_path, host, strlen(host) + 1);
        int rc = connect_one(c, (struct sockaddr *)&sa, sizeof sa, AF_UNIX);
        if (rc != 0 && rc != -EINPROGRESS) {
            snprintf(err, err_len, "%s", strerror(-rc));
            return RLC_E_CONNECT;
        }
        return connected(c, rc, err, err_len);
    }
    struct resolved a[RLC_RESOLVED_MAX];
    unsigned addr_gen;
    int n = resolver_cached(res, a, &addr_gen);
    if (n > 0)
        return connect_resolved(c, a, n, err, err_len);
    if (resolver_wait(res, &c->fd, &c->gen) != RLC_OK) {
        snprintf(err, err_len, "cannot start a name lookup for %s", host);
        c->fd = -1;
        return RLC_E_NOMEM;
    }
    c->res = res;
    c->state = DC_RESOLVING;
    return RLC_OK;
}

short dconn_events(const struct dconn *c, bool wants_write)
{
    switch (c->state) {
    case DC_CLOSED:
        return 0;
    case DC_RESOLVING:
        return POLLIN; /* the lookup's end comes as POLLHUP */
    case DC_CONNECTING:
        return POLLOUT;
    case DC_HANDSHAKE:
        return c->tls_want;
    case DC_UP:
        break;
    }
    short ev = POLLIN;
    if (wants_write || (c->ssl && c->tls_want == POLLOUT))
        ev |= POLLOUT;
    return ev;
}

int dconn_progress(struct dconn *c, short revents, char *err, size_t err_len)
{
    if (c->state == DC_RESOLVING) {
        struct resolved a[RLC_RESOLVED_MAX];
        int n = 0;
        unsigned addr_gen;
        char why[200];
        if (!revents || !resolver_done(c->res, c->gen, a, &n, &addr_gen, why, sizeof why))
            return 0;
        resolver_forget(c->res, c->fd);
        c->fd = -1;
        c->state = DC_CLOSED;
        if (n == 0) {
            snprintf(err, err_len, "cannot resolve %s: %s", c->host, why);
            return -1;
        }
        if (connect_resolved(c, a, n, err, err_len) != RLC_OK)
            return -1;
        if (c->state == DC_UP)
            return 1;
        if (c->state == DC_CONNECTING)
            return 0;
        revents = c->tls_want; /* connected at once: the handshake's first step */
    }
    if (c->state == DC_CONNECTING) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
            return 0;
        int e = 0;
        socklen_t sl = sizeof e;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0)
            e = errno;
        if (e) {
            snprintf(err, err_len, "%s", strerror(e));
            return -1;
        }
        c->state = c->ssl ? DC_HANDSHAKE : DC_UP;
        if (c->state == DC_UP)
            return 1;
        revents = c->tls_want; /* start the handshake now: its first step writes */
    }
    if (c->state == DC_HANDSHAKE) {
        if (!(revents & (c->tls_want | POLLERR | POLLHUP)))
            return 0;
        int h = tls_handshake(c->ssl, &c->tls_want, c->label, err, err_len);
        if (h < 0)
            return -1;
        if (h == 0)
            return 0;
        c->state = DC_UP;
        c->tls_want = 0;
        return 1;
    }
    return 0;
}

ssize_t dconn_read(struct dconn *c, char *buf, size_t len, char *err, size_t err_len)
{
    if (c->state != DC_UP)
        return 0;
    if (c->ssl) {
        short want = 0;
        ssize_t r = tls_read(c->ssl, buf, len, &want, c->label, err, err_len);
        if (r == 0)
            c->tls_want = want;
        return r;
    }
    ssize_t r = recv(c->fd, buf, len, 0);
    if (r > 0)
        return r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    snprintf(err, err_len, "%s", r == 0 ? "closed by the server" : strerror(errno));
    return -1;
}

bool dconn_peer_closed(const struct dconn *c, char *err, size_t err_len)
{
    err[0] = '\0';
    if (c->state != DC_UP)
        return false;
    /* A TLS peer that closes sends a close_notify first: the socket then
     * holds bytes, which MSG_PEEK would take for a live connection. */
    if (c->ssl)
        return tls_peer_closed(c->ssl, c->label, err, err_len);
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

ssize_t dconn_write(struct dconn *c, const char *data, size_t len, char *err, size_t err_len)
{
    if (c->state != DC_UP)
        return 0;
    if (c->ssl) {
        short want = 0;
        ssize_t w = tls_write(c->ssl, data, len, &want, c->label, err, err_len);
        if (w == 0)
            c->tls_want = want;
        return w;
    }
    ssize_t w = send(c->fd, data, len, MSG_NOSIGNAL);
    if (w >= 0)
        return w;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    snprintf(err, err_len, "%s", strerror(errno));
    return -1;
}
