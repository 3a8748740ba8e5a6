/*
 * driver_io.c - the blocking driver's connections, as the leader runs them
 * (engine_driver.c says who leads): open what the engine wants, write what
 * it has, read what arrives, and poke the leader when its poll cannot see
 * a change. Only the leader opens, reads and closes (D1, docs/design/blocking.md);
 * other threads may write under the mutex, and a write that fails there
 * only marks the connection broken.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver_int.h"
#include "resolve.h"

#define READ_CHUNK 16384

int64_t dio_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dio_poke(struct edrv *d)
{
    if (atomic_exchange(&d->poked, true))
        return; /* the leader has not read the last one yet: it will look */
    uint64_t one = 1;
    ssize_t w = write(d->wake_fd, &one, sizeof one);
    (void)w; /* a full counter already wakes the leader */
}

static void close_conn(struct edrv *d, int k, int64_t now)
{
    dconn_close(&d->c[k]);
    d->broken[k] = false;
    rlc_engine_closed(d->e, k, now);
}

/* An address as the engine's messages name it (engine_conn.c): host:port,
 * [v6]:port, or a unix socket's path. */
static void address_text(char *out, size_t size, const char *host, int port)
{
    if (port == 0)
        snprintf(out, size, "%.150s", host);
    else if (strchr(host, ':'))
        snprintf(out, size, "[%.150s]:%d", host, port);
    else
        snprintf(out, size, "%.150s:%d", host, port);
}

static bool is_discovery(const struct edrv *d, int k)
{
    return k >= d->first_sentinel && k < d->first_sentinel + d->n_sentinels;
}

/* Connection k failed, err says why: kept for the messages of what waited
 * on it (dio_explain) until it is up again. */
static void note_why(struct edrv *d, int k, const char *err)
{
    const char *host;
    int port;
    if (!err[0] || rlc_engine_conn_address(d->e, k, &host, &port, NULL) != RLC_OK)
        return;
    char at[200];
    address_text(at, sizeof at, host, port);
    if (is_discovery(d, k)) { /* the engine's messages name its master, not it */
        char addr[sizeof at];
        snprintf(addr, sizeof addr, "%s", at);
        snprintf(at, sizeof at, "sentinel %.180s", addr);
    }
    if (strstr(err, at))
        snprintf(d->why, sizeof d->why, "%s", err);
    else
        snprintf(d->why, sizeof d->why, "%s: %s", at, err);
    d->why_k = k;
    if (!d->why_of[k] && !(d->why_of[k] = malloc(sizeof *d->why_of[k])))
        return; /* the message only lacks the reason */
    snprintf(d->why_of[k]->at, sizeof d->why_of[k]->at, "%s", at);
    snprintf(d->why_of[k]->what, sizeof d->why_of[k]->what, "%s", err);
}

/* Connection k is up: the engine hears of it, and its last failure no
 * longer says anything about it. */
static void conn_up(struct edrv *d, int k, int64_t now)
{
    free(d->why_of[k]);
    d->why_of[k] = NULL;
    if (d->why_k == k)
        d->why[0] = '\0';
    if (!is_discovery(d, k))
        d->ever_up = true; /* a sentinel's answers hold nothing of ours */
    rlc_engine_connected(d->e, k, now);
}

/* host:port's resolver, made the first time (NULL without memory). */
static struct resolver *resolver_for(struct edrv *d, const char *host, int port)
{
    for (int i = 0; i < d->n_res; i++)
        if (d->res[i].port == port && strcmp(d->res[i].host, host) == 0)
            return d->res[i].r;
    struct host_res *grown = realloc(d->res, sizeof *grown * (size_t)(d->n_res + 1));
    if (!grown)
        return NULL;
    d->res = grown;
    struct host_res *h = &d->res[d->n_res];
    h->host = strdup(host);
    h->port = port;
    h->r = h->host ? resolver_new(host, port) : NULL;
    if (!h->r) {
        free(h->host);
        return NULL;
    }
    d->n_res++;
    return h->r;
}

static void start_conn(struct edrv *d, int k, int64_t now)
{
    const char *host;
    int port, tls = 0;
    if (rlc_engine_conn_address(d->e, k, &host, &port, &tls) != RLC_OK)
        return; /* a sentinel node's master is not known yet: want_open is 0 then */
    char err[DRV_MSGLEN];
    if (tls && !d->tls) {
        rlc_engine_closed(d->e, k, now);
        return;
    }
    struct resolver *res = port ? resolver_for(d, host, port) : NULL;
    if (port && !res) {
        rlc_engine_closed(d->e, k, now);
        return;
    }
    if (dconn_start(&d->c[k], host, port, res, tls ? d->tls : NULL, err, sizeof err) != RLC_OK) {
        note_why(d, k, err);
        rlc_engine_closed(d->e, k, now);
        return;
    }
    if (is_discovery(d, k))
        snprintf(d->c[k].label, sizeof d->c[k].label, "sentinel %s:%d", host, port);
    if (d->c[k].state == DC_UP)
        conn_up(d, k, now);
}

void dio_open_wanted(struct edrv *d, int64_t now)
{
    for (int k = 0; k < d->n; k++) {
        int want = rlc_engine_want_open(d->e, k);
        bool open = d->c[k].state != DC_CLOSED;
        if (d->broken[k] || (want == -1 && open)) {
            close_conn(d, k, now);
            /* a broken one is wanted again at once (its bytes wait for it) */
            want = rlc_engine_want_open(d->e, k);
            open = false;
        } else if (want == -1) {
            rlc_engine_closed(d->e, k, now);
        }
        if (want == 1 && !open)
            start_conn(d, k, now);
    }
}

/* Writes conn k's pending bytes while the socket takes them. A failure
 * outside the leader only marks the connection: the leader may be polling
 * its descriptor, so it alone closes it. */
static void flush_conn(struct edrv *d, int k, bool leader, int64_t now)
{
    const char *data;
    size_t len;
    char err[DRV_MSGLEN];
    /* New bytes on a connection the server closed meanwhile: found before
     * they are written, the engine puts them on the next connection (bytes
     * it has not handed out never reached a server) */
    if (!d->broken[k] && d->c[k].state == DC_UP && rlc_engine_pending(d->e, k, &data) &&
        dconn_peer_closed(&d->c[k], err, sizeof err)) {
        note_why(d, k, err); /* a TLS alert says why (a client certificate required) */
        if (leader)
            close_conn(d, k, now);
        else
            d->broken[k] = true;
        return;
    }
    while (!d->broken[k] && d->c[k].state == DC_UP && (len = rlc_engine_pending(d->e, k, &data))) {
        ssize_t w = dconn_write(&d->c[k], data, len, err, sizeof err);
        if (w > 0) {
            rlc_engine_sent(d->e, k, (size_t)w);
            continue;
        }
        if (w < 0) {
            note_why(d, k, err);
            if (leader)
                close_conn(d, k, now);
            else
                d->broken[k] = true;
        }
        return;
    }
}

void dio_flush_all(struct edrv *d, bool leader, int64_t now)
{
    for (int k = 0; k < d->n; k++)
        flush_conn(d, k, leader, now);
}

static void read_conn(struct edrv *d, int k)
{
    char buf[READ_CHUNK], err[DRV_MSGLEN];
    /* Plain sockets: bounded, other connections get their turn (poll says
     * again what is left). TLS: until OpenSSL wants the socket, since the
     * bytes it decrypted already are invisible to poll(). */
    for (int i = 0; i < 8 || d->c[k].ssl; i++) {
        ssize_t r = dconn_read(&d->c[k], buf, sizeof buf, err, sizeof err);
        if (r < 0) {
            note_why(d, k, err); /* a TLS alert says why (a client certificate required) */
            close_conn(d, k, dio_now_ms());
            return;
        }
        if (r == 0)
            return;
        if (rlc_engine_received(d->e, k, buf, (size_t)r, dio_now_ms()) != RLC_OK) {
            close_conn(d, k, dio_now_ms());
            return;
        }
        if ((size_t)r < sizeof buf && !d->c[k].ssl)
            return; /* the socket is drained */
    }
}

/* After a call outside the leader: does the leader's poll need to know?
 * (See driver_int.h.) */
void dio_poke_if_needed(struct edrv *d)
{
    if (!d->leading)
        return;
    int64_t dl = rlc_engine_deadline(d->e);
    bool polling = atomic_load(&d->polling);
    bool need = d->waiters && d->bg_leading; /* a caller would lead instead */
    need = need || (dl >= 0 && dl < d->poll_until);
    for (int k = 0; !need && k < d->n; k++) {
        const char *data;
        int want = rlc_engine_want_open(d->e, k);
        bool open = d->c[k].state != DC_CLOSED;
        /* Bytes left on a connection that is up: the socket would not
         * take them, and a leader in poll() does not wait for POLLOUT
         * there. (A leader that is not polling writes them itself.) */
        need = d->broken[k] || (want == 1 && !open) || (want == -1 && open) ||
               (polling && d->c[k].state == DC_UP && rlc_engine_pending(d->e, k, &data) > 0);
    }
    if (need)
        dio_poke(d);
}

int dio_poll_set(struct edrv *d, int64_t now, int64_t *wait_ms)
{
    int np = 1;
    d->pfd[0] = (struct pollfd){d->wake_fd, POLLIN, 0};
    for (int k = 0; k < d->n; k++) {
        const char *data;
        short ev = dconn_events(&d->c[k], rlc_engine_pending(d->e, k, &data) > 0);
        if (!ev)
            continue;
        d->pfd[np] = (struct pollfd){d->c[k].fd, ev, 0};
        d->pidx[np++] = k;
    }
    int64_t dl = rlc_engine_deadline(d->e), wait = MAX_POLL_MS;
    if (dl >= 0 && dl - now < wait)
        wait = dl > now ? dl - now : 0;
    *wait_ms = wait;
    return np;
}

void dio_serve(struct edrv *d, int np, int ready, int64_t now)
{
    if (ready > 0 && (d->pfd[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(d->wake_fd, &v, sizeof v);
        (void)r;
        atomic_store(&d->poked, false);
    }
    for (int i = 1; ready > 0 && i < np; i++) {
        int k = d->pidx[i];
        short re = d->pfd[i].revents;
        if (!re || d->c[k].fd != d->pfd[i].fd)
            continue;
        char err[DRV_MSGLEN];
        enum dconn_state before = d->c[k].state;
        if (before == DC_RESOLVING || before == DC_CONNECTING || before == DC_HANDSHAKE) {
            int p = dconn_progress(&d->c[k], re, err, sizeof err);
            if (p < 0) {
                note_why(d, k, err);
                close_conn(d, k, now);
            } else if (p > 0) {
                conn_up(d, k, now);
            }
            continue;
        }
        if (re & (POLLIN | POLLERR | POLLHUP) || (d->c[k].ssl && (re & d->c[k].tls_want)))
            read_conn(d, k);
    }
}

void dio_close_all(struct edrv *d, bool child)
{
    for (int k = 0; k < d->n; k++) {
        if (child)
            dconn_abandon(&d->c[k]);
        else
            dconn_close(&d->c[k]);
    }
    for (int k = 0; d->why_of && k < d->n; k++) {
        free(d->why_of[k]);
        d->why_of[k] = NULL;
    }
    for (int i = 0; i < d->n_res; i++) {
        resolver_unref(d->res[i].r);
        free(d->res[i].host);
    }
    free(d->res);
    d->res = NULL;
    d->n_res = 0;
}

/* Where the phrase lead + at + tail is in text, not followed by more of an
 * address (127.0.0.1:1 is not 127.0.0.1:10); NULL if nowhere. */
static char *find_phrase(char *text, const char *lead, const char *at, const char *tail)
{
    size_t ll = strlen(lead), al = strlen(at), tl = strlen(tail);
    for (char *p = strstr(text, lead); p; p = strstr(p + 1, lead)) {
        const char *end = p + ll + al;
        if (strncmp(p + ll, at, al) != 0 || strncmp(end, tail, tl) != 0)
            continue;
        end += tl;
        if (!tl && (isalnum((unsigned char)*end) || *end == '.' || *end == ']'))
            continue;
        return p;
    }
    return NULL;
}

/* One connection's reason put in text (of size): true if its phrase is
 * there (told before, or now). */
static bool splice(char *text, size_t size, const char *lead, const char *tail,
                   const struct conn_why *w)
{
    char *p = find_phrase(text, lead, w->at, tail);
    if (!p)
        return false;
    size_t len = strlen(lead) + strlen(w->at) + strlen(tail);
    if (p[len] == ':')
        return true; /* a reason follows already (a connection's pair) */
    char phrase[sizeof w->at + 64], out[2 * DRV_MSGLEN];
    snprintf(phrase, sizeof phrase, "%.*s", (int)len, p);
    if (strstr(w->what, w->at)) /* it names the address: it says it all */
        snprintf(out, sizeof out, "%.*s%s%s", (int)(p - text), text, w->what, p + len);
    else
        snprintf(out, sizeof out, "%.*s%s: %s%s", (int)(p - text), text, phrase, w->what,
                 p + len);
    snprintf(text, size, "%s", out);
    return true;
}

void dio_explain(const struct edrv *d, const char *msg, bool connect, char *out, size_t size)
{
    snprintf(out, size, "%s", msg ? msg : "");
    bool told = false;
    for (int k = 0; k < d->n; k++) {
        const struct conn_why *w = d->why_of[k];
        if (!w)
            continue;
        told = splice(out, size, "cannot connect to ", "", w) || told;
        told = splice(out, size, "connection to ", " lost", w) || told;
    }
    /* A failure the message cannot point at (a sentinel's, a lookup's):
     * the last one, as the likeliest cause. */
    if (connect && !told && d->why[0] && !strstr(out, d->why)) {
        size_t n = strlen(out);
        snprintf(out + n, size - n, " (%s)", d->why);
    }
}
