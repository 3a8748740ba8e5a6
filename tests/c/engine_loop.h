/*
 * engine_loop.h - the smallest driver of the engine: poll(2) over its
 * sockets on the calling thread. Tests and benchmarks use it to run the
 * engine on real servers; it shows a driver's whole job (redlockc.h,
 * "Engine"): open what the engine wants, write what it has, feed what
 * arrives, tick at its deadline, read its events.
 */
#ifndef RLC_ENGINE_LOOP_H
#define RLC_ENGINE_LOOP_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "redlockc.h"

#define EL_MAX_CONNS 512 /* a cluster node has 4 per master of its map (32) */
#define EL_MAX_DONE 1024 /* two loops fit in a stack frame valgrind accepts (< 2 MB) */

struct el_done {
    uint64_t op;
    int status;
    uint64_t token;
    int64_t validity_ms, count;
    char message[128];
};

struct eloop {
    rlc_engine *e;
    int fd[EL_MAX_CONNS];
    bool connecting[EL_MAX_CONNS];
    struct el_done done[EL_MAX_DONE];
    int n_done;
    int lost;                 /* RLC_EV_LOST events seen */
    int opens;                /* connects started */
    char lost_name[128];
    int lost_status;
    uint64_t lost_owner;
};

static inline int64_t el_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t el_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int el_init(struct eloop *L, const char *nodes, const char *uuid,
                          const char *opts)
{
    memset(L, 0, sizeof *L);
    for (int k = 0; k < EL_MAX_CONNS; k++)
        L->fd[k] = -1;
    int rc = rlc_engine_new(&L->e, nodes, uuid, opts);
    if (rc == RLC_OK && rlc_engine_conns(L->e) > EL_MAX_CONNS) {
        fprintf(stderr, "engine_loop: %d connections, room for %d\n", rlc_engine_conns(L->e),
                EL_MAX_CONNS);
        abort();
    }
    return rc;
}

static inline void el_close(struct eloop *L, int k)
{
    if (L->fd[k] >= 0)
        close(L->fd[k]);
    L->fd[k] = -1;
    L->connecting[k] = false;
    rlc_engine_closed(L->e, k, el_now());
}

static inline void el_free(struct eloop *L)
{
    for (int k = 0; k < EL_MAX_CONNS; k++)
        if (L->fd[k] >= 0)
            close(L->fd[k]);
    rlc_engine_free(L->e);
    L->e = NULL;
}

static inline void el_open(struct eloop *L, int k)
{
    const char *host;
    int port;
    if (rlc_engine_conn_address(L->e, k, &host, &port, NULL) != RLC_OK)
        return; /* its sentinel node's master is not known (want_open says 0 then) */
    L->opens++;
    int fd = -1, rc = -1;
    if (port == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", host);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    } else {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
        char ps[16];
        snprintf(ps, sizeof ps, "%d", port);
        if (getaddrinfo(host, ps, &hints, &ai) == 0 && ai) {
            fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        }
        if (ai)
            freeaddrinfo(ai);
    }
    if (fd < 0 || (rc < 0 && errno != EINPROGRESS)) {
        if (fd >= 0)
            close(fd);
        rlc_engine_closed(L->e, k, el_now());
        return;
    }
    L->fd[k] = fd;
    L->connecting[k] = rc < 0;
    if (rc == 0)
        rlc_engine_connected(L->e, k, el_now());
}

static inline void el_events(struct eloop *L)
{
    rlc_engine_event ev;
    while (rlc_engine_next_event(L->e, &ev)) {
        if (ev.type == RLC_EV_LOST) {
            L->lost++;
            L->lost_status = ev.status;
            L->lost_owner = ev.owner;
            snprintf(L->lost_name, sizeof L->lost_name, "%.*s", (int)ev.name_len, ev.name);
            continue;
        }
        struct el_done *d = &L->done[L->n_done++ % EL_MAX_DONE];
        d->op = ev.op;
        d->status = ev.status;
        d->token = ev.token;
        d->validity_ms = ev.validity_ms;
        d->count = ev.count;
        snprintf(d->message, sizeof d->message, "%s", ev.message);
    }
}

/* One turn: open, write, wait up to max_ms for I/O or the deadline, read, tick. */
static inline void el_turn(struct eloop *L, int max_ms)
{
    int n = rlc_engine_conns(L->e);
    for (int k = 0; k < n; k++) {
        int want = rlc_engine_want_open(L->e, k);
        if (want == 1 && L->fd[k] < 0)
            el_open(L, k);
        else if (want == -1 && L->fd[k] >= 0)
            el_close(L, k);
        else if (want == -1)
            rlc_engine_closed(L->e, k, el_now());
    }
    struct pollfd p[EL_MAX_CONNS];
    int idx[EL_MAX_CONNS], np = 0;
    for (int k = 0; k < n; k++) {
        if (L->fd[k] < 0)
            continue;
        const char *data;
        size_t len;
        while (!L->connecting[k] && (len = rlc_engine_pending(L->e, k, &data)) > 0) {
            ssize_t w = send(L->fd[k], data, len, MSG_NOSIGNAL);
            if (getenv("EL_TRACE"))
                fprintf(stderr, "%lld %p conn %d sent %zd\n", (long long)el_now_us() % 100000000,
                        (void *)L, k, w);
            if (w <= 0)
                break;
            rlc_engine_sent(L->e, k, (size_t)w);
        }
        p[np] = (struct pollfd){L->fd[k], POLLIN, 0};
        if (L->connecting[k] || rlc_engine_pending(L->e, k, &data) > 0)
            p[np].events |= POLLOUT;
        idx[np++] = k;
    }
    int64_t now = el_now(), dl = rlc_engine_deadline(L->e);
    int wait = max_ms;
    if (dl >= 0 && dl - now < wait)
        wait = dl - now < 0 ? 0 : (int)(dl - now);
    poll(p, (nfds_t)np, wait);
    for (int i = 0; i < np; i++) {
        int k = idx[i];
        if (L->fd[k] < 0)
            continue;
        if (L->connecting[k] && (p[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
            int err = 0;
            socklen_t sl = sizeof err;
            getsockopt(L->fd[k], SOL_SOCKET, SO_ERROR, &err, &sl);
            if (err) {
                el_close(L, k);
                continue;
            }
            L->connecting[k] = false;
            rlc_engine_connected(L->e, k, el_now());
            continue;
        }
        if (p[i].revents & (POLLIN | POLLERR | POLLHUP)) {
            char buf[16384];
            ssize_t r = recv(L->fd[k], buf, sizeof buf, 0);
            if (r > 0) {
                if (getenv("EL_TRACE"))
                    fprintf(stderr, "%lld %p conn %d got %.*s\n", (long long)el_now_us() % 100000000,
                            (void *)L, k, (int)(r > 60 ? 60 : r), buf);
                if (rlc_engine_received(L->e, k, buf, (size_t)r, el_now()) != RLC_OK)
                    el_close(L, k);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                el_close(L, k);
            }
        }
    }
    rlc_engine_tick(L->e, el_now());
    el_events(L);
}

/* Turns until op's DONE event (or limit_ms): its record, or NULL. */
static inline const struct el_done *el_wait(struct eloop *L, uint64_t op, int64_t limit_ms)
{
    int64_t end = el_now() + limit_ms;
    for (;;) {
        for (int i = L->n_done - 1; i >= 0 && i >= L->n_done - EL_MAX_DONE; i--)
            if (L->done[i % EL_MAX_DONE].op == op)
                return &L->done[i % EL_MAX_DONE];
        if (el_now() >= end)
            return NULL;
        el_turn(L, 50);
    }
}

/* Acquire/release/extend and wait for the outcome: the status (or -100 when
 * no DONE came within limit_ms). */
static inline int el_acquire(struct eloop *L, const char *name, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, const struct el_done **out)
{
    uint64_t op;
    int rc = rlc_engine_acquire(L->e, name, strlen(name), owner, wait_ms, lease_ms, el_now(),
                                &op);
    if (rc != RLC_OK)
        return rc;
    const struct el_done *d = el_wait(L, op, (wait_ms < 0 ? 30000 : wait_ms) + 10000);
    if (out)
        *out = d;
    return d ? d->status : -100;
}

static inline int el_release(struct eloop *L, const char *name, uint64_t owner)
{
    uint64_t op;
    int rc = rlc_engine_release(L->e, name, strlen(name), owner, el_now(), &op);
    if (rc != RLC_OK)
        return rc;
    const struct el_done *d = el_wait(L, op, 10000);
    return d ? d->status : -100;
}

static inline int el_extend(struct eloop *L, const char *name, uint64_t owner, int64_t lease)
{
    uint64_t op;
    int rc = rlc_engine_extend(L->e, name, strlen(name), owner, lease, el_now(), &op);
    if (rc != RLC_OK)
        return rc;
    const struct el_done *d = el_wait(L, op, 10000);
    return d ? d->status : -100;
}

#endif
