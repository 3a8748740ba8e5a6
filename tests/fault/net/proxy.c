/*
 * proxy.c - a per-connection stall/cut TCP proxy in front of one redis-server.
 *
 * One listening port on 127.0.0.1; each accepted client connection gets its
 * own connection to the target port, numbered in accept order from 0. One
 * poll() loop, no threads. A control channel (one command per line, one
 * reply line per command) singles out a connection:
 *
 *   stall N|all      hold N's client->server bytes (all: every connection,
 *                    and new ones, until "release all"); the proxy keeps
 *                    reading them, so the client sees its writes succeed
 *   release N|all    deliver what was held, in order, and forward again
 *   cut N|all        RST to the client (SO_LINGER 0), close the server side;
 *                    held bytes are dropped
 *   cutonreply N     forward N's requests, but on the server's next reply
 *                    drop it and cut N: the command ran, its reply is lost
 *   list             "ok <id>:<client port>:<open|closed>:<held bytes> ..."
 *   count            "ok <accepted> <open>"
 *   quit             "ok", then the proxy exits
 *
 * A client that closes while stalled is a late packet in flight: its held
 * bytes are still delivered on release, then the server side is half-closed,
 * so the server runs them and closes (as TCP retransmission would do).
 * The proxy exits when the control channel closes or after its lifetime
 * bound, whichever is first; it never runs unbounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netfault.h"

#define MAXC 256
#define BUFCAP (4 << 20)

struct buf {
    char *p;
    size_t len, cap;
};

struct pconn {
    int cfd, sfd;
    int peer_port;
    bool open;
    bool stalled, cut_on_reply;
    bool c_eof, s_eof, s_shut;
    struct buf c2s, s2c;
};

static struct pconn conns[MAXC];
static int nconns;
static bool stall_all;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int buf_add(struct buf *b, const char *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static void buf_flush(struct buf *b, int fd)
{
    while (b->len) {
        ssize_t w = send(fd, b->p, b->len, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            b->len = 0; /* the peer is gone: nobody will read these */
        if (w <= 0)
            return;
        memmove(b->p, b->p + w, b->len - (size_t)w);
        b->len -= (size_t)w;
    }
}

static void nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void conn_close(struct pconn *c, bool rst)
{
    if (!c->open)
        return;
    if (rst) {
        struct linger lg = {1, 0};
        setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(c->cfd);
    close(c->sfd);
    free(c->c2s.p);
    free(c->s2c.p);
    memset(&c->c2s, 0, sizeof c->c2s);
    memset(&c->s2c, 0, sizeof c->s2c);
    c->open = false;
}

static void accept_one(int lfd, int target_port)
{
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    int cfd = accept(lfd, (struct sockaddr *)&peer, &plen);
    if (cfd < 0)
        return;
    if (nconns >= MAXC) {
        close(cfd);
        return;
    }
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)target_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        struct linger lg = {1, 0};
        setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nonblock(cfd);
    nonblock(sfd);
    struct pconn *c = &conns[nconns++];
    memset(c, 0, sizeof *c);
    c->cfd = cfd;
    c->sfd = sfd;
    c->peer_port = ntohs(peer.sin_port);
    c->open = true;
    c->stalled = stall_all;
}

/* Moves what may go now; half-closes and closes as the ends finish. */
static void pump(struct pconn *c)
{
    if (!c->open)
        return;
    if (!c->stalled)
        buf_flush(&c->c2s, c->sfd);
    buf_flush(&c->s2c, c->cfd);
    if (c->c_eof && !c->stalled && c->c2s.len == 0 && !c->s_shut) {
        shutdown(c->sfd, SHUT_WR);
        c->s_shut = true;
    }
    if (c->s_eof && c->s2c.len == 0) {
        /* The server closed: pass the close on (held bytes die with it). */
        conn_close(c, false);
        return;
    }
}

static int select_ids(const char *arg, int *lo, int *hi)
{
    if (strcmp(arg, "all") == 0) {
        *lo = 0;
        *hi = nconns - 1;
        return 1;
    }
    char *end;
    long id = strtol(arg, &end, 10);
    if (end == arg || id < 0 || id >= nconns)
        return -1;
    *lo = *hi = (int)id;
    return 0;
}

/* Runs one control line; writes the reply line to out. Returns 1 on quit. */
static int control(char *line, int ctl)
{
    char out[8192];
    char verb[32] = "", arg[32] = "";
    int lo, hi, all, quit = 0;
    sscanf(line, "%31s %31s", verb, arg);
    if (strcmp(verb, "list") == 0) {
        size_t n = (size_t)snprintf(out, sizeof out, "ok");
        for (int i = 0; i < nconns && n < sizeof out - 64; i++)
            n += (size_t)snprintf(out + n, sizeof out - n, " %d:%d:%s:%zu", i,
                                  conns[i].peer_port, conns[i].open ? "open" : "closed",
                                  conns[i].c2s.len);
    } else if (strcmp(verb, "count") == 0) {
        int open = 0;
        for (int i = 0; i < nconns; i++)
            open += conns[i].open;
        snprintf(out, sizeof out, "ok %d %d", nconns, open);
    } else if (strcmp(verb, "quit") == 0) {
        snprintf(out, sizeof out, "ok");
        quit = 1;
    } else if ((all = select_ids(arg, &lo, &hi)) < 0 && strcmp(arg, "all") != 0) {
        snprintf(out, sizeof out, "err no connection '%s'", arg);
    } else {
        if (all < 0) { /* "all" with no connection yet */
            lo = 0;
            hi = -1;
            all = 1;
        }
        snprintf(out, sizeof out, "ok");
        if (strcmp(verb, "stall") == 0) {
            if (all)
                stall_all = true;
            for (int i = lo; i <= hi; i++)
                conns[i].stalled = true;
        } else if (strcmp(verb, "release") == 0) {
            if (all)
                stall_all = false;
            for (int i = lo; i <= hi; i++) {
                conns[i].stalled = false;
                pump(&conns[i]);
            }
        } else if (strcmp(verb, "cut") == 0) {
            for (int i = lo; i <= hi; i++)
                conn_close(&conns[i], true);
        } else if (strcmp(verb, "cutonreply") == 0 && !all) {
            conns[lo].cut_on_reply = true;
        } else {
            snprintf(out, sizeof out, "err unknown command '%s'", line);
        }
    }
    size_t n = strlen(out);
    out[n++] = '\n';
    if (write(ctl, out, n) < 0)
        return 1;
    return quit;
}

int proxy_serve(int lfd, int target_port, int ctl_in, int ctl_out, int64_t lifetime_ms)
{
    int64_t end = mono_ms() + lifetime_ms;
    char line[512];
    size_t llen = 0;
    nonblock(lfd);
    for (;;) {
        int64_t left = end - mono_ms();
        if (left <= 0)
            return 1;
        struct pollfd pfd[2 + 2 * MAXC];
        int map[2 + 2 * MAXC];
        int n = 0;
        pfd[n] = (struct pollfd){lfd, POLLIN, 0};
        map[n++] = -1;
        pfd[n] = (struct pollfd){ctl_in, POLLIN, 0};
        map[n++] = -2;
        for (int i = 0; i < nconns; i++) {
            struct pconn *c = &conns[i];
            if (!c->open)
                continue;
            short cev = 0, sev = 0;
            if (!c->c_eof && c->c2s.len < BUFCAP)
                cev |= POLLIN;
            if (c->s2c.len)
                cev |= POLLOUT;
            if (!c->s_eof && c->s2c.len < BUFCAP)
                sev |= POLLIN;
            if (!c->stalled && c->c2s.len)
                sev |= POLLOUT;
            /* fd -1 when nothing is wanted: a closed peer's POLLHUP would spin. */
            pfd[n] = (struct pollfd){cev ? c->cfd : -1, cev, 0};
            map[n++] = 2 * i;
            pfd[n] = (struct pollfd){sev ? c->sfd : -1, sev, 0};
            map[n++] = 2 * i + 1;
        }
        int rc = poll(pfd, (nfds_t)n, left > 200 ? 200 : (int)left);
        if (rc < 0 && errno != EINTR)
            return 1;
        for (int k = 0; rc > 0 && k < n; k++) {
            if (!pfd[k].revents)
                continue;
            if (map[k] == -1) {
                accept_one(lfd, target_port);
                continue;
            }
            if (map[k] == -2) {
                ssize_t r = read(ctl_in, line + llen, sizeof line - 1 - llen);
                if (r <= 0)
                    return 0; /* the controller went away */
                llen += (size_t)r;
                char *nl;
                while ((nl = memchr(line, '\n', llen))) {
                    *nl = '\0';
                    if (control(line, ctl_out))
                        return 0;
                    size_t used = (size_t)(nl - line) + 1;
                    memmove(line, line + used, llen - used);
                    llen -= used;
                }
                if (llen == sizeof line - 1)
                    llen = 0;
                continue;
            }
            struct pconn *c = &conns[map[k] / 2];
            if (!c->open)
                continue;
            char tmp[65536];
            if (map[k] % 2 == 0 && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t r = recv(c->cfd, tmp, sizeof tmp, 0);
                if (r > 0)
                    buf_add(&c->c2s, tmp, (size_t)r);
                else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    if (r < 0 && c->s2c.len == 0 && !c->stalled) {
                        conn_close(c, false); /* reset by the client */
                        continue;
                    }
                    c->c_eof = true;
                }
            } else if (map[k] % 2 == 1 && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t r = recv(c->sfd, tmp, sizeof tmp, 0);
                if (r > 0) {
                    if (c->cut_on_reply) {
                        conn_close(c, true);
                        continue;
                    }
                    buf_add(&c->s2c, tmp, (size_t)r);
                } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    c->s_eof = true;
                }
            }
            pump(c);
        }
    }
}
