/*
 * uri.c - parsing node URIs.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://[[user]:password@]host[:port][/db]   the same over TLS
 *   unix://[[user]:password@]/path/to.sock[?db=N]
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

static int parse_tcp(const char *uri, size_t len, size_t scheme_len, struct node_addr *a)
{
    const char *p = uri + scheme_len, *end = uri + len;
    const char *auth_end = p;
    while (auth_end < end && *auth_end != '/' && *auth_end != '?' && *auth_end != '#')
        auth_end++;
    if (auth_end < end && *auth_end != '/')
        return bad(uri, len, "query strings and fragments are not supported");

    const char *at = NULL;
    for (const char *q = auth_end; q > p; q--)
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

    const char *host = p, *host_end, *port_start = NULL;
    if (p < auth_end && *p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end)
            return bad(uri, len, "unclosed '[' in an IPv6 address");
        for (const char *q = host; q < host_end; q++)
            if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
                return bad(uri, len, "bad character in an IPv6 address");
        p = host_end + 1;
        if (p < auth_end && *p != ':')
            return bad(uri, len, "expected ':port' after ']'");
    } else {
        host_end = p;
        while (host_end < auth_end && *host_end != ':')
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
    if (p < auth_end) { /* *p == ':' */
        port_start = p + 1;
        long port = parse_number(port_start, (size_t)(auth_end - port_start), 1, 65535);
        if (port < 0)
            return bad(uri, len, "port must be a number from 1 to 65535");
        a->port = (int)port;
    } else {
        a->port = 6379;
    }

    if (auth_end < end) { /* "/db" */
        const char *db = auth_end + 1;
        if (db < end) {
            long v = parse_number(db, (size_t)(end - db), 0, INT_MAX);
            if (v < 0)
                return bad(uri, len, "the database after '/' must be a number");
            a->db = (int)v;
        }
    }

    if (!(a->host = strndup(host, (size_t)(host_end - host))))
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    if (memchr(host, ':', (size_t)(host_end - host)))
        snprintf(a->label, sizeof a->label, "[%s]:%d", a->host, a->port);
    else
        snprintf(a->label, sizeof a->label, "%s:%d", a->host, a->port);
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
    return bad(uri, len, "the scheme must be redis://, rediss:// or unix://");
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

static int same_node(const struct node_addr *a, const struct node_addr *b)
{
    if (a->is_unix != b->is_unix)
        return 0;
    if (a->is_unix)
        return strcmp(a->path, b->path) == 0;
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
        const char *s = p;
        while (s < end && *s == ' ')
            s++;
        const char *e = end;
        while (e > s && e[-1] == ' ')
            e--;
        if (s == e) {
            rc = rlc_fail(RLC_E_INVAL, "empty node URI at position %d of the node list", n + 1);
            break;
        }
        if (n == RLC_MAX_NODES) {
            rc = rlc_fail(RLC_E_INVAL, "more than %d nodes", RLC_MAX_NODES);
            break;
        }
        rc = parse_one(s, (size_t)(e - s), &list[n]);
        n++;
        if (rc == RLC_E_INVAL && strchr(e, '@'))
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
