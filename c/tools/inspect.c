/*
 * inspect.c - "status NAME" and "watch NAME": what an operator wants to see.
 *
 * The public API answers "is it locked, what is its PTTL", not "who holds
 * it": the holders are the fields of the lock's hash, which only the server
 * knows. So these two read the lock's keys themselves, read-only, with
 * hiredis, on every node of --nodes (which the library has already checked
 * by then: main() made a client of them, so the small parser here sees
 * only well-formed URIs):
 *   HGETALL <key>                                  holders: field -> count
 *   PTTL <key>                                     the lease left
 *   GET redisson_lock_token:{<name>}               the fencing counter
 *   PUBSUB NUMSUB redisson_lock__channel:{<name>}  waiters (subscribers)
 * Nothing is ever written. Over N nodes each node is shown on its own.
 * hiredis 0.14 has no TLS (the library does its own, under its API): on a
 * rediss:// node status shows only what the API tells (locked or not), and
 * watch refuses.
 *
 * watch polls that state every WATCH_POLL_MS and also listens on the unlock
 * channel, printing a line for each change (a new holder, a hand-off, a
 * release, an unlock message) until SIGINT or SIGTERM.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define WATCH_POLL_MS 100
#define MAX_HOLDERS 16

struct holder {
    char field[192];
    long long count;
};

struct node_state {
    int ok;          /* 0: the node could not be asked (err says why) */
    char err[160];
    int nholders;    /* fields of the hash (more than MAX_HOLDERS: the first ones) */
    struct holder holders[MAX_HOLDERS];
    long long pttl;  /* -2 no key, -1 no expiry */
    long long token; /* the fencing counter; 0 if never set */
    long long waiters;
};

struct node_addr {
    int is_unix;
    int tls;        /* rediss://: not readable with hiredis */
    char host[256]; /* TCP: name or address (IPv6 without brackets) */
    int port;
    char path[256]; /* unix socket path */
    char user[128];
    char password[256]; /* "" with has_password 0: no AUTH */
    int has_password;
    int db;
    char label[300]; /* "127.0.0.1:6379" or the socket path: no secrets */
};

/* %XX escapes, as the library decodes them in user and password. */
static void unescape(char *dst, size_t cap, const char *src, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++) {
        unsigned v;
        if (src[i] == '%' && i + 2 < len && sscanf(src + i + 1, "%2x", &v) == 1) {
            dst[o++] = (char)v;
            i += 2;
        } else {
            dst[o++] = src[i];
        }
    }
    dst[o] = 0;
}

/* One URI the library accepted: redis://[[user]:password@]host[:port][/db]
 * or unix://[[user]:password@]/path[?db=N]. */
static void parse_node(const char *uri, size_t len, struct node_addr *n)
{
    memset(n, 0, sizeof *n);
    n->port = 6379;
    const char *end = uri + len, *p = strstr(uri, "://");
    n->is_unix = strncmp(uri, "unix://", 7) == 0;
    n->tls = strncmp(uri, "rediss://", 9) == 0;
    p = p && p < end ? p + 3 : uri;
    /* userinfo ends at the last '@' before the first '/' (the db, or a
     * unix socket's path). */
    const char *at = NULL;
    for (const char *q = p; q < end && *q != '/'; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            unescape(n->user, sizeof n->user, p, (size_t)(colon - p));
            unescape(n->password, sizeof n->password, colon + 1, (size_t)(at - colon - 1));
            n->has_password = 1;
        } else {
            unescape(n->user, sizeof n->user, p, (size_t)(at - p));
        }
        p = at + 1;
    }
    if (n->is_unix) {
        const char *qm = memchr(p, '?', (size_t)(end - p));
        size_t plen = (size_t)((qm ? qm : end) - p);
        snprintf(n->path, sizeof n->path, "%.*s", (int)plen, p);
        if (qm && strncmp(qm, "?db=", 4) == 0)
            n->db = atoi(qm + 4);
        snprintf(n->label, sizeof n->label, "%s", n->path);
        return;
    }
    const char *hend;
    if (*p == '[') { /* [::1]:6379 */
        const char *rb = memchr(p, ']', (size_t)(end - p));
        hend = rb ? rb : end;
        snprintf(n->host, sizeof n->host, "%.*s", (int)(hend - p - 1), p + 1);
        p = rb ? rb + 1 : end;
    } else {
        hend = p;
        while (hend < end && *hend != ':' && *hend != '/')
            hend++;
        snprintf(n->host, sizeof n->host, "%.*s", (int)(hend - p), p);
        p = hend;
    }
    if (p < end && *p == ':')
        n->port = atoi(p + 1);
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash && slash + 1 < end)
        n->db = atoi(slash + 1);
    snprintf(n->label, sizeof n->label, strchr(n->host, ':') ? "[%s]:%d" : "%s:%d", n->host,
             n->port);
}

/* key_prefix from the --options text (the library checked the rest). */
static char *key_prefix(const char *options)
{
    const char *s = options ? options : "";
    while (*s) {
        const char *seg_end = strchr(s, ';');
        size_t len = seg_end ? (size_t)(seg_end - s) : strlen(s);
        const char *b = s;
        while (b < s + len && (*b == ' ' || *b == '\t'))
            b++;
        if (strncmp(b, "key_prefix", 10) == 0) {
            const char *eq = memchr(b, '=', (size_t)(s + len - b));
            if (eq) {
                const char *v = eq + 1, *ve = s + len;
                while (v < ve && (*v == ' ' || *v == '\t'))
                    v++;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                    ve--;
                return strndup(v, (size_t)(ve - v));
            }
        }
        s += len + (seg_end ? 1 : 0);
    }
    return strdup("");
}

struct target {
    struct node_addr *nodes;
    int nnodes;
    redisContext **ctx; /* one per node, NULL until connected */
    char *key;          /* key_prefix + name */
    char *token_key;
    char *channel;
};

/* Redisson's names: braces around the name unless it has a '{' already. */
static char *braced(const char *prefix, const char *key)
{
    char *s = NULL;
    int rc = strchr(key, '{') ? asprintf(&s, "%s:%s", prefix, key)
                              : asprintf(&s, "%s:{%s}", prefix, key);
    return rc < 0 ? NULL : s;
}

static int target_open(struct target *t, const struct cli_args *a)
{
    memset(t, 0, sizeof *t);
    char *prefix = key_prefix(a->options);
    int rc = prefix ? asprintf(&t->key, "%s%s", prefix, a->name) : -1;
    free(prefix);
    if (rc < 0)
        return CLI_INTERNAL;
    int n = 1;
    for (const char *p = a->nodes; *p; p++)
        n += *p == ',';
    t->nodes = calloc((size_t)n, sizeof *t->nodes);
    if (!t->nodes)
        return CLI_INTERNAL;
    for (const char *p = a->nodes;; p++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        parse_node(p, len, &t->nodes[t->nnodes++]);
        if (!comma)
            break;
        p = comma;
    }
    t->token_key = braced("redisson_lock_token", t->key);
    t->channel = braced("redisson_lock__channel", t->key);
    t->ctx = calloc((size_t)t->nnodes, sizeof *t->ctx);
    return t->token_key && t->channel && t->ctx ? 0 : CLI_INTERNAL;
}

static void target_close(struct target *t)
{
    for (int i = 0; t->ctx && i < t->nnodes; i++)
        if (t->ctx[i])
            redisFree(t->ctx[i]);
    free(t->ctx);
    free(t->nodes);
    free(t->key);
    free(t->token_key);
    free(t->channel);
}

/* A connection to node i, authenticated and on its db; NULL + err. */
static redisContext *node_connect(const struct node_addr *n, char *err, size_t errlen)
{
    struct timeval tv = {1, 0};
    redisContext *c = n->is_unix ? redisConnectUnixWithTimeout(n->path, tv)
                                 : redisConnectWithTimeout(n->host, n->port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to %s: %s", n->label, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (n->has_password)
        r = n->user[0] ? redisCommand(c, "AUTH %s %s", n->user, n->password)
                       : redisCommand(c, "AUTH %s", n->password);
    if (r && r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "AUTH refused at %s", n->label); /* never the password */
        freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    if (n->db) {
        r = redisCommand(c, "SELECT %d", n->db);
        int bad = !r || r->type == REDIS_REPLY_ERROR;
        freeReplyObject(r);
        if (bad) {
            snprintf(err, errlen, "SELECT %d failed at %s", n->db, n->label);
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static long long reply_int(redisReply *r, long long dflt)
{
    if (!r)
        return dflt;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return dflt;
}

/* One node's state, in one pipeline of four commands. */
static void node_read(struct target *t, int i, struct node_state *s)
{
    memset(s, 0, sizeof *s);
    s->pttl = -2;
    if (t->nodes[i].tls) {
        snprintf(s->err, sizeof s->err, "holders, PTTL, token and waiters are not shown for "
                 "rediss:// (this tool reads them with hiredis 0.14, which has no TLS)");
        return;
    }
    if (!t->ctx[i] && !(t->ctx[i] = node_connect(&t->nodes[i], s->err, sizeof s->err)))
        return;
    redisContext *c = t->ctx[i];
    redisAppendCommand(c, "HGETALL %b", t->key, strlen(t->key));
    redisAppendCommand(c, "PTTL %b", t->key, strlen(t->key));
    redisAppendCommand(c, "GET %b", t->token_key, strlen(t->token_key));
    redisAppendCommand(c, "PUBSUB NUMSUB %b", t->channel, strlen(t->channel));
    redisReply *r[4] = {0};
    int got = 0;
    for (; got < 4; got++)
        if (redisGetReply(c, (void **)&r[got]) != REDIS_OK)
            break;
    if (got == 4 && r[0]->type == REDIS_REPLY_ARRAY) {
        s->ok = 1;
        for (size_t k = 0; k + 1 < r[0]->elements && s->nholders < MAX_HOLDERS; k += 2) {
            struct holder *h = &s->holders[s->nholders++];
            snprintf(h->field, sizeof h->field, "%s", r[0]->element[k]->str);
            h->count = reply_int(r[0]->element[k + 1], 0);
        }
        s->pttl = reply_int(r[1], -2);
        s->token = reply_int(r[2], 0);
        if (r[3]->type == REDIS_REPLY_ARRAY && r[3]->elements == 2)
            s->waiters = reply_int(r[3]->element[1], 0);
    } else if (got == 4 && r[0]->type == REDIS_REPLY_ERROR) {
        snprintf(s->err, sizeof s->err, "%s at %s", r[0]->str, t->nodes[i].label);
    } else {
        snprintf(s->err, sizeof s->err, "lost the connection to %s: %s", t->nodes[i].label,
                 c->err ? c->errstr : "bad reply");
        redisFree(c);
        t->ctx[i] = NULL; /* reconnect next time */
    }
    for (int k = 0; k < got; k++)
        freeReplyObject(r[k]);
}

/* JSON string: the bytes as they are, with the escapes JSON requires. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void print_json(const struct target *t, const struct node_state *s, int locked)
{
    printf("{\"name\":");
    json_str(stdout, t->key);
    printf(",\"locked\":%s,\"nodes\":[", locked ? "true" : "false");
    for (int i = 0; i < t->nnodes; i++) {
        printf("%s{\"node\":", i ? "," : "");
        json_str(stdout, t->nodes[i].label);
        if (!s[i].ok) {
            printf(",\"error\":");
            json_str(stdout, s[i].err);
            printf("}");
            continue;
        }
        printf(",\"holders\":[");
        for (int k = 0; k < s[i].nholders; k++) {
            printf("%s{\"field\":", k ? "," : "");
            json_str(stdout, s[i].holders[k].field);
            printf(",\"count\":%lld}", s[i].holders[k].count);
        }
        printf("],\"pttl_ms\":%lld,\"fencing_token\":%lld,\"waiters\":%lld}", s[i].pttl,
               s[i].token, s[i].waiters);
    }
    printf("]}\n");
}

static void print_text(const struct target *t, const struct node_state *s, int locked)
{
    printf("name: %s\n", t->key);
    printf("locked: %s\n", locked ? "yes" : "no");
    for (int i = 0; i < t->nnodes; i++) {
        const char *pre = t->nnodes > 1 ? "  " : "";
        if (t->nnodes > 1)
            printf("node: %s\n", t->nodes[i].label);
        if (!s[i].ok) {
            printf("%serror: %s\n", pre, s[i].err);
            continue;
        }
        for (int k = 0; k < s[i].nholders; k++)
            printf("%sholder: %s count=%lld\n", pre, s[i].holders[k].field, s[i].holders[k].count);
        if (s[i].pttl != -2)
            printf("%spttl_ms: %lld\n", pre, s[i].pttl);
        printf("%sfencing_token: %lld\n", pre, s[i].token);
        printf("%swaiters: %lld\n", pre, s[i].waiters);
    }
}

int cli_status(rlc_lock *l, const struct cli_args *a)
{
    /* "Locked" as the library decides it (a quorum over N nodes). */
    int locked = 0;
    int rc = rlc_lock_is_locked(l, &locked);
    if (rc != RLC_OK) {
        cli_err("cannot query lock '%s': %s", a->name, rlc_errmsg());
        return cli_status_exit(rc);
    }
    struct target t;
    if ((rc = target_open(&t, a)) != 0) {
        target_close(&t);
        return rc;
    }
    struct node_state *s = calloc((size_t)t.nnodes, sizeof *s);
    if (!s) {
        target_close(&t);
        return CLI_INTERNAL;
    }
    for (int i = 0; i < t.nnodes; i++)
        node_read(&t, i, &s[i]);
    if (a->json)
        print_json(&t, s, locked);
    else
        print_text(&t, s, locked);
    free(s);
    target_close(&t);
    return locked ? 0 : 1;
}

/* ---- watch ------------------------------------------------------------- */

static void stamp(char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, len, "%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ld", ts.tv_nsec / 1000000);
}

/* "field(count) field(count)", or "-" for nobody: one node's holders. */
static void describe(const struct node_state *s, long long waiters, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if (!s->ok) {
        snprintf(buf, len, "unreachable (%s)", s->err);
        return;
    }
    if (s->nholders == 0) {
        snprintf(buf, len, "free, %lld waiter%s", waiters, waiters == 1 ? "" : "s");
        return;
    }
    for (int k = 0; k < s->nholders && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s(%lld)", k ? " " : "held by ",
                              s->holders[k].field, s->holders[k].count);
    if (n < len)
        snprintf(buf + n, len - n, ", token %lld, %lld waiter%s", s->token, waiters,
                 waiters == 1 ? "" : "s");
}

/* A subscriber connection per node, for the unlock messages (best effort). */
static redisContext *subscribe(const struct target *t, int i)
{
    char err[160];
    redisContext *c = node_connect(&t->nodes[i], err, sizeof err);
    if (!c)
        return NULL;
    redisReply *r = redisCommand(c, "SUBSCRIBE %b", t->channel, strlen(t->channel));
    if (!r || r->type == REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

int cli_watch(const struct cli_args *a)
{
    struct target t;
    int rc = target_open(&t, a);
    for (int i = 0; rc == 0 && i < t.nnodes; i++)
        if (t.nodes[i].tls) {
            cli_err("watch reads the lock's keys with hiredis 0.14, which has no TLS: "
                    "not for rediss:// nodes (%s)", t.nodes[i].label);
            rc = CLI_USAGE;
        }
    if (rc != 0) {
        target_close(&t);
        return rc;
    }
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    int sigfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    int n = t.nnodes;
    struct node_state *cur = calloc((size_t)n, sizeof *cur);
    char (*last)[512] = calloc((size_t)n, sizeof *last);
    redisContext **sub = calloc((size_t)n, sizeof *sub);
    struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
    if (sigfd < 0 || !cur || !last || !sub || !pf) {
        cli_err("watch: %s", sigfd < 0 ? strerror(errno) : "out of memory");
        rc = CLI_INTERNAL;
        goto done;
    }
    char when[32], now_desc[512];
    stamp(when, sizeof when);
    printf("%s watching lock '%s' on %d node%s (Ctrl-C ends)\n", when, t.key, n, n > 1 ? "s" : "");
    fflush(stdout);
    /* Bounded by the signals that end it; the count is a backstop only. */
    for (long turn = 0; turn < 1L << 40; turn++) {
        for (int i = 0; i < n; i++) {
            if (!sub[i])
                sub[i] = subscribe(&t, i);
            node_read(&t, i, &cur[i]);
            /* Our own subscriber is no waiter. */
            long long waiters = cur[i].waiters - (sub[i] && cur[i].waiters > 0);
            describe(&cur[i], waiters, now_desc, sizeof now_desc);
            if (strcmp(now_desc, last[i]) != 0) {
                stamp(when, sizeof when);
                printf("%s %s%s%s\n", when, n > 1 ? t.nodes[i].label : "", n > 1 ? ": " : "",
                       now_desc);
                snprintf(last[i], sizeof last[i], "%s", now_desc);
                fflush(stdout);
            }
        }
        pf[0] = (struct pollfd){sigfd, POLLIN, 0};
        for (int i = 0; i < n; i++)
            pf[i + 1] = (struct pollfd){sub[i] ? sub[i]->fd : -1, POLLIN, 0};
        if (poll(pf, (nfds_t)n + 1, WATCH_POLL_MS) < 0 && errno != EINTR)
            break;
        struct signalfd_siginfo si;
        if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            stamp(when, sizeof when);
            printf("%s stopped by signal %u\n", when, si.ssi_signo);
            break;
        }
        for (int i = 0; i < n; i++) {
            if (!sub[i] || !(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            redisReply *r = NULL;
            if (redisGetReply(sub[i], (void **)&r) != REDIS_OK) {
                redisFree(sub[i]);
                sub[i] = NULL;
                continue;
            }
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
                stamp(when, sizeof when);
                printf("%s %s%sunlock message published\n", when, n > 1 ? t.nodes[i].label : "",
                       n > 1 ? ": " : "");
                fflush(stdout);
            }
            freeReplyObject(r);
        }
    }
done:
    for (int i = 0; sub && i < n; i++)
        if (sub[i])
            redisFree(sub[i]);
    free(sub);
    free(pf);
    free(cur);
    free(last);
    if (sigfd >= 0)
        close(sigfd);
    target_close(&t);
    return rc;
}
