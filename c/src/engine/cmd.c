/*
 * cmd.c - formatting commands in RESP (the Redis wire protocol).
 */
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "scripts.h"

static size_t digits(size_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static struct rlc_cmd *cmd_alloc(size_t len)
{
    struct rlc_cmd *c = malloc(sizeof *c + len + 1);
    if (!c)
        return NULL;
    atomic_init(&c->refs, 1);
    c->script = NULL;
    c->len = len;
    return c;
}

size_t cmd_u64(char *buf, uint64_t v, unsigned base)
{
    char tmp[CMD_U64_MAX];
    size_t n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return n;
}

size_t cmd_i64(char *buf, int64_t v)
{
    if (v >= 0)
        return cmd_u64(buf, (uint64_t)v, 10);
    buf[0] = '-';
    /* -(v + 1) + 1: no overflow at INT64_MIN */
    return 1 + cmd_u64(buf + 1, (uint64_t)-(v + 1) + 1, 10);
}

int cmd_tagged_u64(const char *prefix, uint64_t v, unsigned base, char *buf, size_t size)
{
    size_t plen = strlen(prefix);
    char num[CMD_U64_MAX];
    size_t nlen = cmd_u64(num, v, base), full = plen + 1 + nlen;
    if (size == 0)
        return (int)full;
    size_t room = size - 1, k = plen < room ? plen : room;
    memcpy(buf, prefix, k);
    if (k < room)
        buf[k++] = ':';
    size_t d = nlen < room - k ? nlen : room - k;
    memcpy(buf + k, num, d);
    buf[k + d] = '\0';
    return (int)full;
}

/* "<mark><n>\r\n" at p; returns the end. */
static char *put_head(char *p, char mark, size_t n)
{
    *p++ = mark;
    p += cmd_u64(p, n, 10);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* "$<len>\r\n<bytes>\r\n" at p; returns the end. */
static char *put_bulk(char *p, const char *s, size_t len)
{
    p = put_head(p, '$', len);
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

struct rlc_cmd *cmd_with_script(const struct rlc_cmd *cmd, const struct script *from,
                                const struct script *to)
{
    /* EVALSHA's first argument: "*n\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>" */
    const char *at = NULL;
    for (size_t i = 0; !at && i + 40 <= cmd->len && i < 64; i++)
        if (memcmp(cmd->data + i, from->sha, 40) == 0)
            at = cmd->data + i;
    struct rlc_cmd *c = at ? cmd_alloc(cmd->len) : NULL;
    if (!c)
        return NULL;
    memcpy(c->data, cmd->data, cmd->len);
    memcpy(c->data + (at - cmd->data), to->sha, 40);
    c->script = to;
    return c;
}

struct rlc_cmd *cmd_words(int argc, const char *const *argv)
{
    size_t lens[8];
    if (argc < 0 || argc > 8)
        return NULL;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return cmd_format(argc, argv, lens);
}

struct rlc_cmd *cmd_format(int argc, const char *const *argv, const size_t *lens)
{
    size_t len = 1 + digits((size_t)argc) + 2;
    for (int i = 0; i < argc; i++)
        len += 1 + digits(lens[i]) + 2 + lens[i] + 2;
    struct rlc_cmd *c = cmd_alloc(len);
    if (!c)
        return NULL;
    char *p = put_head(c->data, '*', (size_t)argc);
    for (int i = 0; i < argc; i++)
        p = put_bulk(p, argv[i], lens[i]);
    return c;
}

struct rlc_cmd *cmd_evalsha(const struct script *s, int nkeys, int nargs,
                            const char *const *argv, const size_t *lens)
{
    enum { MAXARGV = 3 + 2 * 1024 + 1 };
    int argc = 3 + nkeys + nargs;
    if (argc > MAXARGV)
        return NULL;
    const char *av[MAXARGV];
    size_t al[MAXARGV];
    char nk[CMD_U64_MAX + 1];
    av[0] = "EVALSHA";
    al[0] = 7;
    av[1] = s->sha;
    al[1] = 40;
    al[2] = cmd_i64(nk, nkeys);
    av[2] = nk;
    for (int i = 0; i < nkeys + nargs; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = lens[i];
    }
    struct rlc_cmd *c = cmd_format(argc, av, al);
    if (c)
        c->script = s;
    return c;
}

struct rlc_cmd *cmd_script_load(const struct script *s)
{
    const char *argv[3] = {"SCRIPT", "LOAD", s->source};
    size_t lens[3] = {6, 4, strlen(s->source)};
    return cmd_format(3, argv, lens);
}

struct rlc_cmd *cmd_evalsha_to_eval(const struct rlc_cmd *evalsha, const struct script *s)
{
    /* "*<argc>\r\n" "$7\r\nEVALSHA\r\n" "$40\r\n<sha>\r\n" <the rest> */
    const char *head_end = memchr(evalsha->data, '\n', evalsha->len);
    if (!head_end)
        return NULL;
    size_t head = (size_t)(head_end - evalsha->data) + 1;
    size_t skip = head + strlen("$7\r\nEVALSHA\r\n") + strlen("$40\r\n") + 40 + 2;
    if (skip > evalsha->len)
        return NULL;
    size_t srclen = strlen(s->source);
    size_t len = head + strlen("$4\r\nEVAL\r\n") + 1 + digits(srclen) + 2 + srclen + 2 +
                 (evalsha->len - skip);
    struct rlc_cmd *c = cmd_alloc(len);
    if (!c)
        return NULL;
    char *p = c->data;
    memcpy(p, evalsha->data, head);
    p += head;
    p = put_bulk(p, "EVAL", 4);
    p = put_bulk(p, s->source, srclen);
    memcpy(p, evalsha->data + skip, evalsha->len - skip);
    c->script = s;
    return c;
}

struct rlc_cmd *cmd_ref(struct rlc_cmd *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void cmd_unref(struct rlc_cmd *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1)
        free(c);
}
