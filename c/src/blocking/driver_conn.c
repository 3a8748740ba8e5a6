/*
 * driver_conn.c - a socket (and TLS over it) for one of the engine's
 * connections. The engine decides when a connection is wanted, gives up on
 * a connect that takes too long (want_open -1) and frames every byte; this
 * file only opens, moves bytes and closes, never waiting: each step says
 * which poll event it needs next.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "driver_conn.h"
#include "tls.h"

void dconn_init(struct dconn *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

void dconn_close(struct dconn *c)
{
    tls_session_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    dconn_init(c);
}

static int open_socket(const char *host, int port, int *fd, char *err, size_t err_len)
{
    int rc;
    if (port == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(host) >= sizeof sa.sun_path) {
            snprintf(err, err_len, "unix socket path too long: %s", host);
            return -EINVAL;
        }
        memcpy(sa.sun_path, host, strlen(host) + 1);
        *fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (*fd < 0)
            return -errno;
        rc = connect(*fd, (struct sockaddr *)&sa, sizeof sa);
        return rc == 0 ? 0 : -errno;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0 || !ai) {
        snprintf(err, err_len, "cannot resolve %s: %s", host, gai_strerror(g));
        return -EHOSTUNREACH;
    }
    *fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0) {
        rc = -errno;
        freeaddrinfo(ai);
        return rc;
    }
    int one = 1;
    setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rc = connect(*fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
    freeaddrinfo(ai);
    return rc;
}

int dconn_start(struct dconn *c, const char *host, int port, struct tls_ctx *tls,
                const char *server_host, char *err, size_t err_len)
{
    dconn_init(c);
    err[0] = '\0';
    int fd = -1, rc = open_socket(host, port, &fd, err, err_len);
    if (rc != 0 && rc != -EINPROGRESS) {
        if (!err[0])
            snprintf(err, err_len, "cannot connect to %s:%d: %s", host, port, strerror(-rc));
        if (fd >= 0)
            close(fd);
        return RLC_E_CONNECT;
    }
    c->fd = fd;
    if (tls) {
        c->ssl = tls_session_new(tls, fd, server_host, host, err, err_len);
        if (!c->ssl) {
            dconn_close(c);
            return RLC_E_CONNECT;
        }
    }
    if (rc == 0)
        c->state = c->ssl ? DC_HANDSHAKE : DC_UP;
    else
        c->state = DC_CONNECTING;
    c->tls_want = POLLOUT;
    return RLC_OK;
}

short dconn_events(const struct dconn *c, bool wants_write)
{
    switch (c->state) {
    case DC_CLOSED:
        return 0;
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
    if (c->state == DC_CONNECTING) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
            return 0;
        int e = 0;
        socklen_t sl = sizeof e;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0)
            e = errno;
        if (e) {
            snprintf(err, err_len, "cannot connect: %s", strerror(e));
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
        int h = tls_handshake(c->ssl, &c->tls_want, "", err, err_len);
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
        ssize_t r = tls_read(c->ssl, buf, len, &want, "", err, err_len);
        if (r == 0)
            c->tls_want = want;
        return r;
    }
    ssize_t r = recv(c->fd, buf, len, 0);
    if (r > 0)
        return r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    snprintf(err, err_len, "%s", r == 0 ? "connection closed by the server" : strerror(errno));
    return -1;
}

ssize_t dconn_write(struct dconn *c, const char *data, size_t len, char *err, size_t err_len)
{
    if (c->state != DC_UP)
        return 0;
    if (c->ssl) {
        short want = 0;
        ssize_t w = tls_write(c->ssl, data, len, &want, "", err, err_len);
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
