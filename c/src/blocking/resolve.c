/*
 * resolve.c - name lookups on their own threads, and the last good answer.
 *
 * Each node of a client has a resolver. A connection that needs an address
 * takes the cached one if there is one (and a lookup refreshes the cache in
 * the background for next time); otherwise it registers a pipe and polls its
 * read end while the lookup runs. The lookup thread stores the answer and
 * closes every registered write end: the readers see POLLHUP, which is what
 * a connect in progress reports too, so mux.c and pubsub.c need nothing new.
 *
 * At most one lookup per node runs at a time, so a DNS server that never
 * answers costs one blocked thread per node, not one per call. A lookup that
 * outlives its client keeps the resolver alive by its own reference.
 *
 * A sentinel node's lookup asks the sentinels instead (ask_sentinels): one
 * after another, each within the connect and I/O timeouts, so a sentinel
 * that is down or hung costs that much and the next one is asked. It runs
 * on the lookup thread, so its blocking hiredis calls never stall a caller.
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

#include <hiredis/hiredis.h>

#include "redlockc.h"
#include "clock.h"
#include "resolve.h"
#include "tls.h"
#include "uri.h"

/* What a sentinel node's lookups need; set at creation, then read-only. */
struct sentinels {
    int n;
    char **host;
    int *port;
    char *master;
    char *user, *password;    /* AUTH to the sentinels, or NULL */
    int64_t connect_ms, io_ms;
    struct tls_ctx *tls;      /* rediss-sentinel://: TLS to the sentinels (a reference) */
    sentinel_tls_fn ask_tls;  /* how (the client's, sentinel_tls.c) */
};

struct resolver {
    atomic_int refs;          /* the client's, and a running lookup's */
    char *host;
    char port[8];
    bool numeric;             /* resolved once at creation, never looked up */
    struct sentinels *sent;   /* a sentinel node's, or NULL */
    /* Guarded by mu. */
    struct resolved addr[RLC_RESOLVED_MAX];
    int naddr;                /* the last good answer */
    bool busy;                /* a lookup runs */
    unsigned gen;             /* lookups finished */
    char why[200];            /* the last lookup's failure, or "" */
    unsigned addr_gen;        /* bumped when the (first) address changes */
    struct resolved last;     /* the address addr_gen stands for */
    bool have_last;
    bool stale_lookup;        /* the running lookup began before a +switch-master */
    int64_t failed_ns;        /* when the last lookup failed (sentinel nodes) */
    int (*wait)[2];           /* {rfd, wfd} of each waiting connection */
    int nwait, capwait;
};

/* A sentinel node whose lookup failed is not asked again sooner. */
#define SENTINEL_RETRY_MS 100

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

/* Under mu (or before anyone sees r): n fresh addresses are in; a master
 * that moved gets a new generation, which old connections notice. */
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

static void free_secret(char *s)
{
    if (!s)
        return;
    for (volatile char *p = s; *p; p++)
        *p = 0;
    free(s);
}

static void sentinels_free(struct sentinels *s)
{
    if (!s)
        return;
    for (int i = 0; s->host && i < s->n; i++)
        free(s->host[i]);
    free(s->host);
    free(s->port);
    free(s->master);
    free(s->user);
    free_secret(s->password);
    tls_ctx_free(s->tls);
    free(s);
}

struct resolver *resolver_new_sentinel(const struct node_addr *n, const char *user,
                                       const char *password, int64_t connect_ms, int64_t io_ms,
                                       sentinel_tls_fn ask_tls)
{
    pthread_once(&atfork_once, register_atfork);
    struct resolver *r = calloc(1, sizeof *r);
    struct sentinels *s = calloc(1, sizeof *s);
    if (!r || !s)
        goto fail;
    r->sent = s;
    atomic_init(&r->refs, 1);
    if (!(r->host = strdup(n->master_name)) || !(s->master = strdup(n->master_name)) ||
        (user && !(s->user = strdup(user))) || (password && !(s->password = strdup(password))))
        goto fail;
    s->host = calloc((size_t)n->n_seeds, sizeof *s->host);
    s->port = calloc((size_t)n->n_seeds, sizeof *s->port);
    if (!s->host || !s->port)
        goto fail;
    for (s->n = 0; s->n < n->n_seeds; s->n++) {
        if (!(s->host[s->n] = strdup(n->seeds[s->n].host)))
            goto fail;
        s->port[s->n] = n->seeds[s->n].port;
    }
    s->connect_ms = connect_ms;
    s->io_ms = io_ms;
    s->tls = tls_ctx_ref(n->tls_ctx);
    s->ask_tls = ask_tls;
    return r;
fail:
    if (r) {
        free(r->host);
        free(r);
    }
    sentinels_free(s);
    return NULL;
}

void resolver_unref(struct resolver *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free(r->wait);
    free(r->host);
    sentinels_free(r->sent);
    free(r);
}

/* Under mu: the lookup's end, told to every waiting connection. */
static void finish(struct resolver *r, const struct addrinfo *res, const char *why)
{
    if (!why && !r->stale_lookup)
        took(r, store(r, res));
    r->stale_lookup = false;
    snprintf(r->why, sizeof r->why, "%s", why ? why : "");
    r->failed_ns = why ? rlc_now_ns() : 0;
    r->gen++;
    r->busy = false;
    for (int i = 0; i < r->nwait; i++)
        close(r->wait[i][1]);
    r->nwait = 0;
}

static struct timeval tv_of(int64_t ms)
{
    return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000)};
}

/* A sentinel's reply to SENTINEL get-master-addr-by-name: 0 and ip/port,
 * or -1 and why (a master it does not know: 1 in *unknown). */
static int read_answer(const struct sentinels *s, int i, const redisReply *rep, char *ip,
                       size_t ip_len, char *port, size_t port_len, char *why, size_t why_len,
                       int *unknown)
{
    if (rep->type == REDIS_REPLY_NIL) {
        snprintf(why, why_len, "sentinel %s:%d knows no master named '%s'", s->host[i],
                 s->port[i], s->master);
        *unknown = 1;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(why, why_len, "sentinel %s:%d: %s", s->host[i], s->port[i], rep->str);
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
               rep->element[0]->type != REDIS_REPLY_STRING ||
               rep->element[1]->type != REDIS_REPLY_STRING) {
        snprintf(why, why_len, "sentinel %s:%d gave a malformed master address", s->host[i],
                 s->port[i]);
    } else {
        snprintf(ip, ip_len, "%s", rep->element[0]->str);
        snprintf(port, port_len, "%s", rep->element[1]->str);
        return 0;
    }
    return -1;
}

/* ask_one over TLS (rediss-sentinel://), through the client's function. */
static int ask_one_tls(const struct sentinels *s, int i, char *ip, size_t ip_len, char *port,
                       size_t port_len, char *why, size_t why_len, int *unknown)
{
    struct sentinel_tls_query q = {s->host[i], s->port[i], s->user, s->password, s->tls,
                                   s->master,
                                   rlc_deadline_after_ms(rlc_now_ns(), s->connect_ms + s->io_ms)};
    redisReply *rep = NULL;
    if (s->ask_tls(&q, &rep, why, why_len) != RLC_OK)
        return -1;
    int rc = read_answer(s, i, rep, ip, ip_len, port, port_len, why, why_len, unknown);
    freeReplyObject(rep);
    return rc;
}

/* One sentinel's answer for the master: 0 and ip/port, or -1 and why
 * (a down sentinel, refused AUTH, a master it does not know: 1 in *unknown). */
static int ask_one(const struct sentinels *s, int i, char *ip, size_t ip_len, char *port,
                   size_t port_len, char *why, size_t why_len, int *unknown)
{
    if (s->tls)
        return ask_one_tls(s, i, ip, ip_len, port, port_len, why, why_len, unknown);
    redisContext *c = redisConnectWithTimeout(s->host[i], s->port[i], tv_of(s->connect_ms));
    redisReply *rep = NULL;
    int rc = -1;
    if (!c || c->err) {
        snprintf(why, why_len, "sentinel %s:%d: %s", s->host[i], s->port[i],
                 c ? c->errstr : "out of memory");
        goto out;
    }
    redisSetTimeout(c, tv_of(s->io_ms));
    if (s->password) {
        rep = s->user ? redisCommand(c, "AUTH %s %s", s->user, s->password)
                      : redisCommand(c, "AUTH %s", s->password);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            snprintf(why, why_len, "sentinel %s:%d refused AUTH (sentinel_user/"
                     "sentinel_password): %s", s->host[i], s->port[i],
                     rep ? rep->str : c->errstr);
            goto out;
        }
        freeReplyObject(rep);
    }
    rep = redisCommand(c, "SENTINEL get-master-addr-by-name %s", s->master);
    if (!rep)
        snprintf(why, why_len, "sentinel %s:%d: %s", s->host[i], s->port[i], c->errstr);
    else
        rc = read_answer(s, i, rep, ip, ip_len, port, port_len, why, why_len, unknown);
out:
    if (rep)
        freeReplyObject(rep);
    if (c)
        redisFree(c);
    return rc;
}

/* The sentinels in turn, first answer wins; getaddrinfo of that answer. */
static int ask_sentinels(const struct sentinels *s, struct addrinfo **res, char *why,
                         size_t why_len)
{
    char ip[256], port[16], last[200] = "", unknown_why[200] = "";
    int unknown = 0;
    for (int i = 0; i < s->n; i++) {
        int u = 0;
        if (ask_one(s, i, ip, sizeof ip, port, sizeof port, last, sizeof last, &u) != 0) {
            if (u && !unknown)
                memcpy(unknown_why, last, sizeof last);
            unknown |= u;
            continue;
        }
        struct addrinfo hints;
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(ip, port, &hints, res);
        if (g == 0)
            return 0;
        snprintf(last, sizeof last, "the master's address %s:%s from sentinel %s:%d: %s", ip,
                 port, s->host[i], s->port[i], gai_strerror(g));
    }
    /* A master no sentinel knows is a configuration error: say so first. */
    snprintf(why, why_len, "no sentinel gave the master's address (%d asked; %s)", s->n,
             unknown ? unknown_why : last);
    return -1;
}

static void *lookup_main(void *arg)
{
    struct resolver *r = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-resolve");
    struct addrinfo hints, *res = NULL;
    char why[200];
    const char *failed = NULL;
    if (r->sent) {
        if (ask_sentinels(r->sent, &res, why, sizeof why) != 0)
            failed = why;
    } else {
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(r->host, r->port, &hints, &res);
        if (g != 0) {
            res = NULL;
            failed = gai_strerror(g);
        }
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
    if (r->sent && !r->busy && r->failed_ns &&
        rlc_now_ns() - r->failed_ns < SENTINEL_RETRY_MS * RLC_NS_PER_MS) {
        /* The sentinels said no a moment ago: that answer stands, at once,
         * instead of a new round of questions per reconnect (a client
         * retrying in a loop would otherwise hammer them). */
        close(p[1]);
        *rfd = p[0];
        *gen = r->gen - 1;
        pthread_mutex_unlock(&mu);
        return RLC_OK;
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

unsigned resolver_addr_gen(struct resolver *r)
{
    pthread_mutex_lock(&mu);
    unsigned g = r->addr_gen;
    pthread_mutex_unlock(&mu);
    return g;
}

void resolver_invalidate(struct resolver *r)
{
    if (!r || !r->sent)
        return;
    /* No lookup starts here: the next connect's resolver_wait starts one.
     * (Connections close on a client's way out too; asking then would
     * leave a thread talking to the sentinels behind the client.) */
    pthread_mutex_lock(&mu);
    r->naddr = 0;
    pthread_mutex_unlock(&mu);
}

void resolver_refresh(struct resolver *r)
{
    if (!r || !r->sent)
        return;
    pthread_mutex_lock(&mu);
    start(r);
    pthread_mutex_unlock(&mu);
}

void resolver_switch(struct resolver *r, const char *ip, const char *port)
{
    if (!r || !r->sent)
        return;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV; /* no DNS on the caller's thread */
    int g = getaddrinfo(ip, port, &hints, &res);
    pthread_mutex_lock(&mu);
    if (g == 0) {
        /* A lookup running now may bring the old master back: it asked
         * before the switch. Its answer is dropped (finish). */
        took(r, store(r, res));
        r->stale_lookup = r->busy;
    } else {
        r->naddr = 0;
        start(r);
    }
    pthread_mutex_unlock(&mu);
    if (res)
        freeaddrinfo(res);
}
