/*
 * capture.c - reading a lock cycle's commands off the wire.
 *
 * The limit must run exactly what the library runs. Rather than copy the
 * scripts (and go stale when they change), the driver watches one real
 * acquire + release with MONITOR and keeps the two EVALSHA commands it sees:
 * their script SHAs (the library loaded the scripts on connect, so the server
 * has them cached), key counts and every argument after them. In the kept
 * arguments the captured lock name becomes a placeholder wherever it appears
 * (the token key, channel and attempts key carry it inside braces), the
 * attempt id becomes a placeholder, and the release's `upto` becomes "" (a
 * plain release of one level). cmd_build() fills them in for a given lock
 * name and attempt id.
 *
 * The shapes expected (c/src/engine/lock_calls.c: call_acquire, call_release;
 * one node, fencing off, so the acquire names no token counter and does not
 * ask for the holder's name):
 *   acquire: EVALSHA sha 2 <lock> redlockc_attempts:{<lock>}
 *            <lease> <field> <attempt id> <outer level or "">
 *   release: EVALSHA sha 3 <lock> redisson_lock__channel:{<lock>}
 *            redlockc_attempts:{<lock>} <lease> <field> <attempt id> <upto>
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "redlockc.h"

#define MON_ARGS (CMD_MAX_ARGS + 3)
#define CAPTURE_NAME "bench:capture"

/* Splits a MONITOR line's quoted arguments (sdscatrepr escapes) into argv.
 * Returns the count, or -1 when an argument is too long or there are too many. */
static int split_monitor(const char *line, char argv[MON_ARGS][CMD_ARG_LEN])
{
    const char *p = strstr(line, "] ");
    if (!p)
        return 0;
    p += 2;
    int n = 0;
    while (*p == '"') {
        if (n == MON_ARGS)
            return -1;
        p++;
        size_t len = 0;
        while (*p && *p != '"') {
            char ch = *p++;
            if (ch == '\\' && *p) {
                ch = *p++;
                switch (ch) {
                case 'n': ch = '\n'; break;
                case 'r': ch = '\r'; break;
                case 't': ch = '\t'; break;
                case 'a': ch = '\a'; break;
                case 'b': ch = '\b'; break;
                case 'x':
                    if (p[0] && p[1]) {
                        char hex[3] = {p[0], p[1], 0};
                        ch = (char)strtol(hex, NULL, 16);
                        p += 2;
                    }
                    break;
                default: break; /* \\ and \" */
                }
            }
            if (len + 1 >= CMD_ARG_LEN)
                return -1;
            argv[n][len++] = ch;
        }
        argv[n][len] = '\0';
        if (*p == '"')
            p++;
        if (*p == ' ')
            p++;
        n++;
    }
    return n;
}

/* One acquire + release by a fresh client, so that MONITOR sees it. */
static int one_cycle(const char *uri)
{
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    int rc = rlc_client_new(&c, uri, NULL);
    if (rc == RLC_OK)
        rc = rlc_lock_new(c, CAPTURE_NAME, 0, &l);
    if (rc == RLC_OK)
        rc = rlc_lock_acquire(l, 1000, 0);
    if (rc == RLC_OK)
        rc = rlc_lock_release(l);
    if (rc != RLC_OK)
        note("capture: %s: %s", rlc_strerror(rc), rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);
    return rc;
}

/* Copies src into dst with every occurrence of name replaced by CMD_NAME. */
static int templ(char *dst, const char *src, const char *name)
{
    size_t nl = strlen(name), o = 0;
    for (const char *p = src; *p;) {
        if (o + 2 >= CMD_ARG_LEN)
            return -1;
        if (nl && strncmp(p, name, nl) == 0) {
            dst[o++] = CMD_NAME;
            p += nl;
        } else {
            if (*p == CMD_NAME || *p == CMD_ATTEMPT)
                return -1; /* would be read as a placeholder */
            dst[o++] = *p++;
        }
    }
    dst[o] = '\0';
    return 0;
}

/* Keeps EVALSHA argv[1..n) as a template of `keys` keys (every one after
 * the lock's carrying its name) and nargv ARGV; returns 0 or a reason. */
static const char *keep(struct script_cmd *sc, char argv[MON_ARGS][CMD_ARG_LEN], int n,
                        int keys, int nargv, const char *name)
{
    if (strlen(argv[1]) != 40)
        return "not a SHA";
    snprintf(sc->sha, sizeof sc->sha, "%s", argv[1]);
    sc->numkeys = atoi(argv[2]);
    sc->nargs = sc->numkeys + nargv;
    if (sc->numkeys != keys || n < 3 + sc->nargs)
        return keys == 2 ? "an acquire not of 2 keys and 4 ARGV" : "a release not of 3 keys and 4 ARGV";
    for (int i = 0; i < sc->nargs; i++)
        if (templ(sc->args[i], argv[3 + i], name) != 0)
            return "an argument too long";
    /* the keys after the lock's derive from the name ("prefix:{name}") */
    for (int k = 1; k < keys; k++)
        if (!strchr(sc->args[k], CMD_NAME))
            return "the lock name is not inside the other keys";
    /* ARGV[3]: the attempt id. */
    snprintf(sc->args[sc->numkeys + 2], CMD_ARG_LEN, "%c", CMD_ATTEMPT);
    return NULL;
}

static int has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int capture_cycle(struct bench *b, struct cycle_cmds *cc)
{
    memset(cc, 0, sizeof *cc);
    redisContext *mon = rs_connect(&b->srv[0]);
    if (!mon)
        return -1;
    redisReply *r = redisCommand(mon, "MONITOR");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    if (!ok || one_cycle(b->srv[0].uri) != RLC_OK) {
        redisFree(mon);
        return -1;
    }
    /* Bounded: a cycle shows a few dozen lines (the scripts' own calls too);
     * the connection has a 2 s read timeout. */
    int got_acq = 0, got_rel = 0;
    const char *why = NULL;
    char acq_id[CMD_ARG_LEN] = "", rel_id[CMD_ARG_LEN] = "";
    for (int i = 0; i < 512 && !(got_acq && got_rel) && !why; i++) {
        void *v = NULL;
        if (redisGetReply(mon, &v) != REDIS_OK || !v)
            break;
        redisReply *line = v;
        static char argv[MON_ARGS][CMD_ARG_LEN];
        int n = line->type == REDIS_REPLY_STATUS ? split_monitor(line->str, argv) : 0;
        if (n >= 6 && strcasecmp(argv[0], "EVALSHA") == 0 && strcmp(argv[3], CAPTURE_NAME) == 0) {
            if (!got_acq && strcmp(argv[2], "2") == 0 &&
                has_prefix(argv[4], "redlockc_attempts:")) {
                /* lease, field, attempt id, outer level */
                why = keep(&cc->acquire, argv, n, 2, 4, CAPTURE_NAME);
                if (!why)
                    snprintf(acq_id, sizeof acq_id, "%s", argv[3 + 2 + 2]);
                got_acq = 1;
            } else if (!got_rel && has_prefix(argv[4], "redisson_lock__channel:")) {
                /* lease, field, attempt id, upto: further ARGV (other levels
                 * of a lost hold) are not part of a plain cycle */
                why = keep(&cc->release, argv, n, 3, 4, CAPTURE_NAME);
                if (!why) {
                    snprintf(rel_id, sizeof rel_id, "%s", argv[3 + 3 + 2]);
                    cc->release.args[3 + 3][0] = '\0'; /* upto: "" */
                }
                got_rel = 1;
            }
        }
        freeReplyObject(line);
    }
    redisFree(mon);
    if (!why && !(got_acq && got_rel))
        why = "did not see both EVALSHA calls (acquire, release)";
    if (!why && strcmp(acq_id, rel_id) != 0)
        why = "the release does not name the acquire's attempt id";
    char *colon = why ? NULL : strrchr(acq_id, ':');
    if (!why && !colon)
        why = "the attempt id is not <uuid>:<hex>";
    if (why) {
        note("capture: %s", why);
        return -1;
    }
    snprintf(cc->uuid, sizeof cc->uuid, "%.*s", (int)(colon - acq_id), acq_id);
    /* A cycle over all nodes loads the scripts on each (the library loads
     * them on connect), so that the raw fan-out can EVALSHA them anywhere. */
    if (one_cycle(b->uris) != RLC_OK)
        return -1;
    return 0;
}

int cmd_arg(const struct script_cmd *sc, int i, const char *name, const char *attempt, char *buf,
            size_t size)
{
    size_t o = 0, nl = strlen(name), al = strlen(attempt);
    for (const char *p = sc->args[i]; *p; p++) {
        const char *s = p;
        size_t l = 1;
        if (*p == CMD_NAME)
            s = name, l = nl;
        else if (*p == CMD_ATTEMPT)
            s = attempt, l = al;
        if (o + l >= size)
            return -1;
        memcpy(buf + o, s, l);
        o += l;
    }
    buf[o] = '\0';
    return (int)o;
}

int cmd_build(const struct script_cmd *sc, const char *name, const char *attempt,
              struct cmd_vec *cv)
{
    snprintf(cv->buf[0], sizeof cv->buf[0], "EVALSHA");
    snprintf(cv->buf[1], sizeof cv->buf[1], "%s", sc->sha);
    snprintf(cv->buf[2], sizeof cv->buf[2], "%d", sc->numkeys);
    cv->argc = 3 + sc->nargs;
    for (int i = 0; i < cv->argc; i++) {
        if (i >= 3 && cmd_arg(sc, i - 3, name, attempt, cv->buf[i], sizeof cv->buf[i]) < 0)
            return -1;
        cv->argv[i] = cv->buf[i];
        cv->lens[i] = strlen(cv->buf[i]);
    }
    return 0;
}
