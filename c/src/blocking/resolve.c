/*
 * resolve.c - name lookups on their own threads, and the last good answer.
 *
 * Each node of a client has a resolver. A connection that needs an address
 * takes the cached one if there is one (and a lookup refreshes the cache in
 * the background for next time); otherwise it registers a pipe and polls its
 * read end while the lookup runs. The lookup thread stores the answer and
 * closes every registered write end: the readers see POLLHUP, which is what
 * a connect in progress reports too, so a connection needs nothing new.
 *
 * At most one lookup per node runs at a time, so a DNS server that never
 * answers costs one blocked thread per node, not one per call. A lookup that
 * outlives its client keeps the resolver alive by its own reference.
 *
 * A sentinel node's master is found by the engine (engine_sentinel.c), and
 * its address looked up here like any other.
 *
 * One mutex guards every resolver: it is held for a few instructions, never
 * across getaddrinfo(), and held across fork() so that a child never
 * inherits it locked.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redlockc.h"
#include "resolve.h"

struct resolver {
    atomic_int refs;          /* the client's, and a running lookup's */
    char *host;
    char port[8];
    bool numeric;             /* resolved once at creation, never looked up */
    /* Guarded by mu. */
    struct resolved addr[RLC_RESOLVED_MAX];
    int naddr;                /* the last good answer */
    bool busy;                /* a lookup runs */
    unsigned gen;             /* lookups finished */
    char why[200];            /* the last lookup's failure, or "" */
    unsigned addr_gen;        /* bumped when the (first) address changes */
    struct resolved last;     /* the address addr_gen stands for */
    bool have_last;
    int (*wait)[2];           /* {rfd, wfd} of each waiting connection */
    int nwait, capwait;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_lock(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_unlock(void)
{
    pthread_mutex_unlock(&mu);
}

static void register_atfork(void)
{
    pthread_atfork(fork_lock, fork_unlock, fork_unlock);
}

static int store(struct resolver *r, const struct addrinfo *res)
{
    int n = 0;
    for (const struct addrinfo *ai = res; ai && n < RLC_RESOLVED_MAX; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof r->addr[n].sa)
            continue;
        memcpy(&r->addr[n].sa, ai->ai_addr, ai->ai_addrlen);
        r->addr[n].len = ai->ai_addrlen;
        r->addr[n].family = ai->ai_family;
        n++;
    }
    return n;
}

/* Under mu (or before anyone sees r): n fresh addresses are in; a host
 * whose address changed gets a new generation, which old connections notice. */
static void took(struct resolver *r, int n)
{
    if (n <= 0)
        return;
    r->naddr = n;
    bool same = r->have_last && r->last.len == r->addr[0].len &&
                memcmp(&r->last.sa, &r->addr[0].sa, r->addr[0].len) == 0;
    if (!same && r->have_last)
        r->addr_gen++;
    r->last = r->addr[0];
    r->have_last = true;
}

struct resolver *resolver_new(const char *host, int port)
{
    pthread_once(&atfork_once, register_atfork);
    struct resolver *r = calloc(1, sizeof *r);
    if (!r || !(r->host = strdup(host))) {
        free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    snprintf(r->port, sizeof r->port, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV; /* no DNS: cannot block */
    if (getaddrinfo(host, r->port, &hints, &res) == 0) {
        took(r, store(r, res));
        r->numeric = r->naddr > 0;
        freeaddrinfo(res);
    }
    return r;
}

void resolver_unref(struct resolver *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free(r->wait);
    free(r->host);
    free(r);
}

/* Under mu: the lookup's end, told to every waiting connection. */
static void finish(struct resolver *r, const struct addrinfo *res, const char *why)
{
    if (!why)
        took(r, store(r, res));
    snprintf(r->why, sizeof r->why, "%s", why ? why : "");
    r->gen++;
    r->busy = false;
    for (int i = 0; i < r->nwait; i++)
        close(r->wait[i][1]);
    r->nwait = 0;
}

static void *lookup_main(void *arg)
{
    struct resolver *r = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-resolve");
    struct addrinfo hints, *res = NULL;
    const char *failed = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(r->host, r->port, &hints, &res);
    if (g != 0) {
        res = NULL;
        failed = gai_strerror(g);
    }
    pthread_mutex_lock(&mu);
    finish(r, res, failed);
    pthread_mutex_unlock(&mu);
    if (res)
        freeaddrinfo(res);
    resolver_unref(r);
    return NULL;
}

/* Under mu: starts a lookup unless one runs. false if it cannot. */
static bool start(struct resolver *r)
{
    if (r->busy)
        return true;
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&r->refs, 1);
    int e = pthread_create(&t, &attr, lookup_main, r);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        atomic_fetch_sub(&r->refs, 1); /* the caller's reference remains */
        return false;
    }
    r->busy = true;
    return true;
}

int resolver_cached(struct resolver *r, struct resolved *out, unsigned *addr_gen)
{
    pthread_mutex_lock(&mu);
    int n = r->naddr;
    *addr_gen = r->addr_gen;
    memcpy(out, r->addr, sizeof r->addr[0] * (size_t)n);
    if (n > 0 && !r->numeric)
        start(r); /* a failure here only means no refresh this time */
    pthread_mutex_unlock(&mu);
    return n;
}

int resolver_wait(struct resolver *r, int *rfd, unsigned *gen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return RLC_E_NOMEM;
    pthread_mutex_lock(&mu);
    int rc = RLC_E_NOMEM;
    if (r->nwait == r->capwait) {
        int cap = r->capwait ? r->capwait * 2 : 4;
        int (*w)[2] = realloc(r->wait, sizeof *w * (size_t)cap);
        if (!w)
            goto out;
        r->wait = w;
        r->capwait = cap;
    }
    if (!start(r))
        goto out;
    r->wait[r->nwait][0] = p[0];
    r->wait[r->nwait][1] = p[1];
    r->nwait++;
    *rfd = p[0];
    *gen = r->gen;
    rc = RLC_OK;
out:
    pthread_mutex_unlock(&mu);
    if (rc != RLC_OK) {
        close(p[0]);
        close(p[1]);
    }
    return rc;
}

bool resolver_done(struct resolver *r, unsigned gen, struct resolved *out, int *n,
                   unsigned *addr_gen, char *why, size_t why_len)
{
    pthread_mutex_lock(&mu);
    bool done = r->gen != gen;
    if (done) {
        *n = r->naddr;
        memcpy(out, r->addr, sizeof r->addr[0] * (size_t)r->naddr);
        *addr_gen = r->addr_gen;
        snprintf(why, why_len, "%s", r->why[0] ? r->why : "no address");
    }
    pthread_mutex_unlock(&mu);
    return done;
}

void resolver_forget(struct resolver *r, int rfd)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < r->nwait; i++)
        if (r->wait[i][0] == rfd) {
            close(r->wait[i][1]);
            r->wait[i][0] = r->wait[r->nwait - 1][0];
            r->wait[i][1] = r->wait[r->nwait - 1][1];
            r->nwait--;
            break;
        }
    pthread_mutex_unlock(&mu);
    close(rfd);
}
