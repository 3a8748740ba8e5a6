/*
 * uri.c - parsing node URIs.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://[[user]:password@]host[:port][/db]   the same over TLS
 *   unix://[[user]:password@]/path/to.sock[?db=N]
 *   redis-cluster://[[user]:password@]host:port[,host:port...]
 *   redis-sentinel://[[user]:password@]host:port[,host:port...]/mastername[/db]
 *   rediss-cluster://, rediss-sentinel://           the same over TLS
 *
 * A node list is "uri[,uri...]" (Redlock: one lock on each). The list's ','
 * also separates a cluster's seeds and the sentinels: a fragment with no
 * scheme after a cluster/sentinel URI is one more of its seeds; a fragment
 * with a scheme starts the next node.
 *
 * The grammar is deliberately narrow: anything we do not understand is an
 * error that names the problem, because a typo in a node list silently
 * turning into "localhost:6379" would lock against the wrong server.
 * Messages never contain the password: they quote the URI redacted.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "redlockc.h"
#include "error.h"
#include "uri.h"

/* A copy of the URI for messages, its password (if any) as "***". */
static void redact(const char *uri, size_t len, char *buf, size_t bufsize)
{
    const char *scheme_end = NULL;
    for (size_t i = 0; i + 2 < len; i++)
        if (uri[i] == ':' && uri[i + 1] == '/' && uri[i + 2] == '/') {
            scheme_end = uri + i + 3;
            break;
        }
    /* Without a scheme this may be the second half of a password that held
     * the list's ',' ("redis://:pa,ss@h" -> "ss@h"): hide up to the '@' too. */
    const char *from = scheme_end ? scheme_end : uri;
    const char *at = NULL;
    for (const char *p = uri + len; p > from; p--)
        if (p[-1] == '@') {
            at = p - 1;
            break;
        }
    const char *colon = NULL;
    if (at)
        colon = memchr(from, ':', (size_t)(at - from));

    size_t n = 0;
    #define PUT(ptr, k)                                         \
        do {                                                    \
            size_t k_ = (k);                                    \
            if (k_ > bufsize - 1 - n) k_ = bufsize - 1 - n;     \
            memcpy(buf + n, (ptr), k_);                         \
            n += k_;                                            \
        } while (0)
    if (colon) {
        PUT(uri, (size_t)(colon - uri) + 1);
        PUT("***", 3);
        PUT(at, len - (size_t)(at - uri));
    } else if (at) {
        /* "user@host": whatever sits before '@' may be a password. */
        PUT(uri, (size_t)(from - uri));
        PUT("***", 3);
        PUT(at, len - (size_t)(at - uri));
    } else {
        PUT(uri, len);
    }
    #undef PUT
    buf[n] = '\0';
    if (n == bufsize - 1 && bufsize > 4)
        memcpy(buf + bufsize - 4, "...", 4);
}

static int bad(const char *uri, size_t len, const char *why)
{
    char shown[200];
    redact(uri, len, shown, sizeof shown);
    return rlc_fail(RLC_E_INVAL, "invalid node URI '%s': %s", shown, why);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..len) into a new string; NULL on a bad escape, a NUL
 * byte, or no memory (*nomem tells which). */
static char *decode(const char *s, size_t len, int *nomem)
{
    char *out = malloc(len + 1);
    if (!out) {
        *nomem = 1;
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[n++] = s[i];
            continue;
        }
        if (i + 2 >= len) {
            free(out);
            return NULL;
        }
        int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
        if (h < 0 || l < 0 || (h == 0 && l == 0)) {
            free(out);
            return NULL;
        }
        out[n++] = (char)(h * 16 + l);
        i += 2;
    }
    out[n] = '\0';
    return out;
}

/* Parses decimal digits s[0..len) into [min, max]; -1 if not. */
static long parse_number(const char *s, size_t len, long min, long max)
{
    if (len == 0 || len > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v < min || v > max ? -1 : v;
}

/* "[user]:password" -> user/password. */
static int parse_userinfo(const char *uri, size_t urilen, const char *s, size_t len,
                          struct node_addr *a)
{
    const char *colon = memchr(s, ':', len);
    if (!colon)
        return bad(uri, urilen,
                   "credentials need a ':' (redis://:password@host or "
                   "redis://user:password@host)");
    size_t ulen = (size_t)(colon - s), plen = len - ulen - 1;
    if (plen == 0)
        return bad(uri, urilen, "empty password");
    int nomem = 0;
    if (ulen > 0 && !(a->user = decode(s, ulen, &nomem)))
        return nomem ? rlc_fail(RLC_E_NOMEM, "out of memory")
                     : bad(uri, urilen, "bad %-escape in the user name");
    if (!(a->password = decode(colon + 1, plen, &nomem)))
        return nomem ? rlc_fail(RLC_E_NOMEM, "out of memory")
                     : bad(uri, urilen, "bad %-escape in the password");
    return RLC_OK;
}

static int valid_host_char(int c)
{
    return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* "host[:port]" or "[v6][:port]" in s[0..n) -> a new *host, *port and a
 * label. uri/len are the whole URI, for messages. */
static int parse_hostport(const char *uri, size_t len, const char *s, size_t n, int default_port,
                          char **host_out, int *port_out, char *label, size_t label_size)
{
    const char *p = s, *end = s + n;
    const char *host = p, *host_end;
    if (p < end && *p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            return bad(uri, len, "unclosed '[' in an IPv6 address");
        for (const char *q = host; q < host_end; q++)
            if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
                return bad(uri, len, "bad character in an IPv6 address");
        p = host_end + 1;
        if (p < end && *p != ':')
            return bad(uri, len, "expected ':port' after ']'");
    } else {
        host_end = p;
        while (host_end < end && *host_end != ':')
            host_end++;
        for (const char *q = host; q < host_end; q++)
            if (!valid_host_char((unsigned char)*q))
                return bad(uri, len, "bad character in the host name");
        p = host_end;
    }
    if (host_end == host)
        return bad(uri, len, "missing host");
    if ((size_t)(host_end - host) > 253)
        return bad(uri, len, "host name longer than 253 characters");
    int port = default_port;
    if (p < end) { /* *p == ':' */
        long v = parse_number(p + 1, (size_t)(end - p - 1), 1, 65535);
        if (v < 0)
            return bad(uri, len, "port must be a number from 1 to 65535");
        port = (int)v;
    }
    char *h = strndup(host, (size_t)(host_end - host));
    if (!h)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    *host_out = h;
    *port_out = port;
    if (strchr(h, ':'))
        snprintf(label, label_size, "[%s]:%d", h, port);
    else
        snprintf(label, label_size, "%s:%d", h, port);
    return RLC_OK;
}

/* Splits scheme-stripped p..end at the first '/', '?' or '#' and takes off
 * "userinfo@" (up to the last '@' before it). Sets *auth (where host:port
 * starts) and *auth_end (the '/' or end). */
static int split_authority(const char *uri, size_t len, const char *p, const char *end,
                           struct node_addr *a, const char **auth, const char **auth_end)
{
    const char *e = p;
    while (e < end && *e != '/' && *e != '?' && *e != '#')
        e++;
    if (e < end && *e != '/')
        return bad(uri, len, "query strings and fragments are not supported");
    const char *at = NULL;
    for (const char *q = e; q > p; q--)
        if (q[-1] == '@') {
            at = q - 1;
            break;
        }
    if (at) {
        int rc = parse_userinfo(uri, len, p, (size_t)(at - p), a);
        if (rc != RLC_OK)
            return rc;
        p = at + 1;
    }
    *auth = p;
    *auth_end = e;
    return RLC_OK;
}

static int parse_tcp(const char *uri, size_t len, size_t scheme_len, struct node_addr *a)
{
    /* p and auth_end are set by split_authority when it answers RLC_OK */
    const char *end = uri + len, *p = NULL, *auth_end = NULL;
    int rc = split_authority(uri, len, uri + scheme_len, end, a, &p, &auth_end);
    if (rc != RLC_OK)
        return rc;
    rc = parse_hostport(uri, len, p, (size_t)(auth_end - p), 6379, &a->host, &a->port, a->label,
                        sizeof a->label);
    if (rc != RLC_OK)
        return rc;
    if (auth_end < end) { /* "/db" */
        const char *db = auth_end + 1;
        if (db < end) {
            long v = parse_number(db, (size_t)(end - db), 0, INT_MAX);
            if (v < 0)
                return bad(uri, len, "the database after '/' must be a number");
            a->db = (int)v;
        }
    }
    return RLC_OK;
}

/* The seeds "host:port,host:port" in s..e of a cluster or sentinel URI. */
static int parse_seeds(const char *uri, size_t len, const char *s, const char *e,
                       int default_port, struct node_addr *a)
{
    const char *what = a->topology == RLC_TOPO_SENTINEL ? "sentinel" : "seed";
    if (s == e)
        return bad(uri, len, a->topology == RLC_TOPO_SENTINEL
                                 ? "no sentinel given (redis-sentinel://host:port[,host:port...]"
                                   "/mastername)"
                                 : "no seed node given (redis-cluster://host:port[,host:port...])");
    if (!(a->seeds = calloc(RLC_MAX_SEEDS, sizeof *a->seeds)))
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    for (const char *p = s;;) {
        const char *comma = memchr(p, ',', (size_t)(e - p));
        const char *q = comma ? comma : e;
        char why[96];
        if (q == p) {
            snprintf(why, sizeof why, "empty %s at position %d", what, a->n_seeds + 1);
            return bad(uri, len, why);
        }
        if (a->n_seeds == RLC_MAX_SEEDS) {
            snprintf(why, sizeof why, "more than %d %ss", RLC_MAX_SEEDS, what);
            return bad(uri, len, why);
        }
        struct seed_addr *sd = &a->seeds[a->n_seeds];
        int rc = parse_hostport(uri, len, p, (size_t)(q - p), default_port, &sd->host, &sd->port,
                                sd->label, sizeof sd->label);
        if (rc != RLC_OK)
            return rc;
        a->n_seeds++;
        for (int i = 0; i < a->n_seeds - 1; i++)
            if (a->seeds[i].port == sd->port && strcasecmp(a->seeds[i].host, sd->host) == 0) {
                snprintf(why, sizeof why, "%s %.60s is listed twice", what, sd->label);
                return bad(uri, len, why);
            }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (!(a->host = strdup(a->seeds[0].host)))
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    a->port = a->seeds[0].port;
    memcpy(a->label, a->seeds[0].label, sizeof a->label);
    return RLC_OK;
}

/* "/mastername[/db]" of a sentinel URI in s..e (s at the '/'). */
static int parse_master(const char *uri, size_t len, const char *s, const char *e,
                        struct node_addr *a)
{
    static const char usage[] =
        "missing the master name (redis-sentinel://host:port[,host:port...]/mastername[/db])";
    if (s == e)
        return bad(uri, len, usage);
    if (memchr(s, '?', (size_t)(e - s)) || memchr(s, '#', (size_t)(e - s)))
        return bad(uri, len, "query strings and fragments are not supported");
    const char *name = s + 1;
    const char *name_end = memchr(name, '/', (size_t)(e - name));
    if (!name_end)
        name_end = e;
    if (name_end == name)
        return bad(uri, len, usage);
    for (const char *q = name; q < name_end; q++)
        if (*q == '@' || *q == ',')
            return bad(uri, len, "the master name holds a '@' or ','; write them as %40 and %2C");
    int nomem = 0;
    if (!(a->master_name = decode(name, (size_t)(name_end - name), &nomem)))
        return nomem ? rlc_fail(RLC_E_NOMEM, "out of memory")
                     : bad(uri, len, "bad %-escape in the master name");
    if (name_end < e && name_end + 1 < e) {
        long v = parse_number(name_end + 1, (size_t)(e - name_end - 1), 0, INT_MAX);
        if (v < 0)
            return bad(uri, len, "the database after the master name must be a number");
        a->db = (int)v;
    }
    return RLC_OK;
}

/* redis-cluster://[[user]:password@]host:port[,host:port...]
 * redis-sentinel://[[user]:password@]host:port[,host:port...]/mastername[/db]
 * The list splitter hands over the seeds already joined back with ','. */
static int parse_multi(const char *uri, size_t len, size_t scheme_len, struct node_addr *a)
{
    /* p and auth_end are set by split_authority when it answers RLC_OK */
    const char *end = uri + len, *p = NULL, *auth_end = NULL;
    int rc = split_authority(uri, len, uri + scheme_len, end, a, &p, &auth_end);
    if (rc != RLC_OK)
        return rc;
    /* A ',' before the '@' means a seed came before the credentials, or a
     * password holds a raw ',' (ambiguous with the seed separator). */
    if (p > uri + scheme_len && memchr(uri + scheme_len, ',', (size_t)(p - uri - scheme_len)))
        return bad(uri, len, "a ',' before the '@': the credentials go before the first seed, "
                             "and a ',' in a password is written %2C");
    int sentinel = a->topology == RLC_TOPO_SENTINEL;
    rc = parse_seeds(uri, len, p, auth_end, sentinel ? 26379 : 6379, a);
    if (rc != RLC_OK)
        return rc;
    if (sentinel)
        return parse_master(uri, len, auth_end, end, a);
    if (auth_end < end)
        return bad(uri, len, "redis-cluster:// takes no path or database (a cluster has only "
                             "database 0)");
    return RLC_OK;
}

static int parse_unix(const char *uri, size_t len, struct node_addr *a)
{
    const char *p = uri + strlen("unix://"), *end = uri + len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash)
        return bad(uri, len, "expected an absolute socket path (unix:///path.sock)");
    if (slash > p) {
        if (slash[-1] != '@')
            return bad(uri, len, "expected an absolute socket path (unix:///path.sock)");
        int rc = parse_userinfo(uri, len, p, (size_t)(slash - 1 - p), a);
        if (rc != RLC_OK)
            return rc;
    }
    const char *query = memchr(slash, '?', (size_t)(end - slash));
    const char *path_end = query ? query : end;
    if (query) {
        const char *q = query + 1;
        if ((size_t)(end - q) < 4 || memcmp(q, "db=", 3) != 0)
            return bad(uri, len, "the only query parameter is db=N");
        long v = parse_number(q + 3, (size_t)(end - q - 3), 0, INT_MAX);
        if (v < 0)
            return bad(uri, len, "db must be a number");
        a->db = (int)v;
    }
    size_t plen = (size_t)(path_end - slash);
    if (plen < 2)
        return bad(uri, len, "missing socket path");
    if (plen >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return bad(uri, len, "socket path longer than 107 bytes");
    if (!(a->path = strndup(slash, plen)))
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    a->is_unix = 1;
    snprintf(a->label, sizeof a->label, "%s", a->path);
    return RLC_OK;
}

/* The length of a cluster/sentinel scheme at the start of s (0: none);
 * sets *topology and *tls. */
static size_t multi_scheme(const char *s, size_t len, int *topology, int *tls)
{
    static const struct {
        const char *name;
        int topology, tls;
    } schemes[] = {
        {"redis-cluster://", RLC_TOPO_CLUSTER, 0},
        {"rediss-cluster://", RLC_TOPO_CLUSTER, 1},
        {"redis-sentinel://", RLC_TOPO_SENTINEL, 0},
        {"rediss-sentinel://", RLC_TOPO_SENTINEL, 1},
    };
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t n = strlen(schemes[i].name);
        if (len >= n && strncasecmp(s, schemes[i].name, n) == 0) {
            if (topology)
                *topology = schemes[i].topology;
            if (tls)
                *tls = schemes[i].tls;
            return n;
        }
    }
    return 0;
}

static int parse_one(const char *uri, size_t len, struct node_addr *a)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)uri[i] <= ' ' || uri[i] == 0x7f)
            return bad(uri, len, "spaces and control characters are not allowed");
    if (len >= 8 && strncasecmp(uri, "redis://", 8) == 0)
        return parse_tcp(uri, len, 8, a);
    if (len >= 9 && strncasecmp(uri, "rediss://", 9) == 0) {
        /* TLS is the driver's: the engine writes and reads the same RESP. */
        a->tls = 1;
        return parse_tcp(uri, len, 9, a);
    }
    if (len >= 7 && strncasecmp(uri, "unix://", 7) == 0)
        return parse_unix(uri, len, a);
    size_t sl = multi_scheme(uri, len, &a->topology, &a->tls);
    if (sl)
        return parse_multi(uri, len, sl, a);
    return bad(uri, len, "the scheme must be redis://, rediss:// or unix:// (or "
                         "redis-cluster://, redis-sentinel:// and their rediss-* forms)");
}

/* The list is cut at every ',', also at one inside a password, so a bad
 * fragment followed by an '@' may be a password's first half ("redis://:pa"
 * of "redis://:pa,ss@h"): keep the message's reason, drop its quote. */
static int unquote(int position)
{
    const char *msg = rlc_errmsg(), *why = NULL;
    for (const char *p = strstr(msg, "': "); p; p = strstr(p + 1, "': "))
        why = p + 3; /* after the quoted URI; reasons hold no "': " */
    char reason[256];
    snprintf(reason, sizeof reason, "%s", why ? why : "malformed");
    return rlc_fail(RLC_E_INVAL,
                    "invalid node URI at position %d of the node list (not shown: it may "
                    "hold part of a password; write ',' in a password as %%2C): %s",
                    position, reason);
}

static int shares_seed(const struct node_addr *a, const struct node_addr *b)
{
    for (int i = 0; i < a->n_seeds; i++)
        for (int j = 0; j < b->n_seeds; j++)
            if (a->seeds[i].port == b->seeds[j].port &&
                strcasecmp(a->seeds[i].host, b->seeds[j].host) == 0)
                return 1;
    return 0;
}

/* Two entries that would put two votes on one server (or one master). */
static int same_node(const struct node_addr *a, const struct node_addr *b)
{
    if (a->is_unix != b->is_unix)
        return 0;
    if (a->is_unix)
        return strcmp(a->path, b->path) == 0;
    if (a->topology == RLC_TOPO_SENTINEL || b->topology == RLC_TOPO_SENTINEL)
        /* The sentinels are not data nodes: only the same master counts. */
        return a->topology == b->topology && strcmp(a->master_name, b->master_name) == 0 &&
               shares_seed(a, b);
    if (a->topology == RLC_TOPO_CLUSTER && b->topology == RLC_TOPO_CLUSTER)
        return shares_seed(a, b);
    /* A standalone node that is also a cluster's seed is that cluster's. */
    const struct node_addr *c = a->topology == RLC_TOPO_CLUSTER ? a : b->topology ==
                                RLC_TOPO_CLUSTER ? b : NULL;
    if (c) {
        const struct node_addr *o = c == a ? b : a;
        for (int i = 0; i < c->n_seeds; i++)
            if (c->seeds[i].port == o->port && strcasecmp(c->seeds[i].host, o->host) == 0)
                return 1;
        return 0;
    }
    return a->port == b->port && strcasecmp(a->host, b->host) == 0;
}

void uri_free_list(struct node_addr *nodes, int count)
{
    if (!nodes)
        return;
    for (int i = 0; i < count; i++) {
        free(nodes[i].host);
        free(nodes[i].path);
        free(nodes[i].user);
        free(nodes[i].master_name);
        if (nodes[i].seeds)
            for (int j = 0; j < nodes[i].n_seeds; j++)
                free(nodes[i].seeds[j].host);
        free(nodes[i].seeds);
        if (nodes[i].password) {
            /* Do not leave the secret lying in freed heap memory. */
            volatile char *p = nodes[i].password;
            while (*p)
                *p++ = 0;
            free(nodes[i].password);
        }
    }
    free(nodes);
}

static void trim_spaces(const char **s, const char **e)
{
    while (*s < *e && **s == ' ')
        (*s)++;
    while (*e > *s && (*e)[-1] == ' ')
        (*e)--;
}

static int has_scheme(const char *s, const char *e)
{
    for (const char *q = s; q + 2 < e; q++)
        if (q[0] == ':' && q[1] == '/' && q[2] == '/')
            return 1;
    return 0;
}

/* A cluster/sentinel URI starting at s, with its scheme-less fragments
 * after it, trimmed and joined with ','. *comma is the ',' after the first
 * fragment (or NULL); it is moved to the ',' after the last one taken. */
static char *join_seeds(const char *s, const char **comma)
{
    const char *last = *comma;
    while (last) {
        const char *next = strchr(last + 1, ',');
        const char *fe = next ? next : last + 1 + strlen(last + 1);
        if (has_scheme(last + 1, fe))
            break;
        last = next;
    }
    /* The text runs from s to last (or to the end), spaces around ','
     * dropped so "h:1, h:2" reads like "h:1,h:2". */
    size_t total = last ? (size_t)(last - s) : strlen(s);
    char *out = malloc(total + 1), *w = out;
    if (!out)
        return NULL;
    const char *p = s, *stop = s + total;
    for (;;) {
        const char *c = memchr(p, ',', (size_t)(stop - p));
        const char *fs = p, *fe = c ? c : stop;
        trim_spaces(&fs, &fe);
        memcpy(w, fs, (size_t)(fe - fs));
        w += fe - fs;
        if (!c)
            break;
        *w++ = ',';
        p = c + 1;
    }
    *w = '\0';
    *comma = last;
    return out;
}

int uri_parse_list(const char *nodes, struct node_addr **out, int *count)
{
    if (!nodes || !*nodes)
        return rlc_fail(RLC_E_INVAL, "no node URI given (expected e.g. redis://127.0.0.1:6379)");
    struct node_addr *list = calloc(RLC_MAX_NODES, sizeof *list);
    if (!list)
        return rlc_fail(RLC_E_NOMEM, "out of memory");

    int n = 0, rc = RLC_OK;
    const char *p = nodes;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *s = p, *e = end;
        trim_spaces(&s, &e);
        if (s == e) {
            rc = rlc_fail(RLC_E_INVAL, "empty node URI at position %d of the node list", n + 1);
            break;
        }
        if (n == RLC_MAX_NODES) {
            rc = rlc_fail(RLC_E_INVAL, "more than %d nodes", RLC_MAX_NODES);
            break;
        }
        char *joined = NULL;
        if (multi_scheme(s, (size_t)(e - s), NULL, NULL)) {
            /* Its seeds run up to the next fragment with a scheme. */
            if (!(joined = join_seeds(s, &comma))) {
                rc = rlc_fail(RLC_E_NOMEM, "out of memory");
                break;
            }
            s = joined;
            e = joined + strlen(joined);
        }
        rc = parse_one(s, (size_t)(e - s), &list[n]);
        free(joined);
        n++;
        if (rc == RLC_E_INVAL && comma && strchr(comma, '@'))
            rc = unquote(n);
        if (rc != RLC_OK)
            break;
        for (int i = 0; i < n - 1; i++)
            if (same_node(&list[i], &list[n - 1])) {
                rc = rlc_fail(RLC_E_INVAL,
                              "node %s is listed twice (it would count twice toward the quorum)",
                              list[n - 1].label);
                break;
            }
        if (rc != RLC_OK || !comma)
            break;
        p = comma + 1;
    }
    if (rc != RLC_OK) {
        uri_free_list(list, n);
        return rc;
    }
    *out = list;
    *count = n;
    return RLC_OK;
}
