/*
 * fuzz_uri.c - libFuzzer target for node-URI lists (c/src/uri.c).
 *
 * Each input is checked twice:
 *   1. as a node list: any outcome but a crash, a leak, a status other than
 *      OK/INVAL/NOMEM, or a parsed node that breaks the grammar's promises
 *      (ports 1..65535, db >= 0, a label made of the address alone, a unix
 *      path that fits sockaddr_un) is a finding;
 *   2. with a known password spliced around it, as a user would write one
 *      ("redis://u:<pw>@" + input, input + ",redis://:<pw>@h", and a
 *      password that holds the list's ',' separator): if the list is
 *      rejected, the message must not show the password or either half.
 * The fuzzer can learn the password from the comparisons it watches, so a
 * check is skipped when the input itself already holds the text it looks
 * for: that text may then be a host name, legitimately quoted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "uri.h"

#define PW "Kx7vQ2wZp9"
#define PW_HEAD "Kx7vQ2"
#define PW_TAIL "wZp9Lm4R"

static void finding(const char *what, const char *input, const char *detail)
{
    fprintf(stderr, "FINDING: %s\ninput: '%s'\ndetail: %s\n", what, input, detail);
    abort();
}

static void check_node(const struct node_addr *a, const char *input)
{
    char why[300];
    if (a->is_unix) {
        if (!a->path || a->path[0] != '/' || strlen(a->path) < 2 || strlen(a->path) > 107)
            finding("bad unix path", input, a->path ? a->path : "(null)");
    } else {
        if (!a->host || !a->host[0] || a->port < 1 || a->port > 65535) {
            snprintf(why, sizeof why, "host '%s' port %d", a->host ? a->host : "(null)", a->port);
            finding("bad host or port", input, why);
        }
    }
    if (a->db < 0)
        finding("negative db", input, a->label);
    if (a->password && !a->password[0])
        finding("empty password accepted", input, a->label);
    if (memchr(a->label, '\0', sizeof a->label) == NULL)
        finding("label not terminated", input, "");
    /* Messages name nodes by their label: it must be built from the address
     * alone (then it cannot hold credentials, whatever they look like). */
    char want[sizeof a->label];
    if (a->is_unix)
        snprintf(want, sizeof want, "%s", a->path ? a->path : "");
    else
        snprintf(want, sizeof want, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d", a->host, a->port);
    if (strcmp(want, a->label) != 0) {
        snprintf(why, sizeof why, "label '%s', address '%s'", a->label, want);
        finding("label is not the address alone", input, why);
    }
}

static void parse_as_is(const char *s)
{
    struct node_addr *nodes = NULL;
    int n = -1;
    int rc = uri_parse_list(s, &nodes, &n);
    if (rc == RLC_OK) {
        if (n < 1 || n > RLC_MAX_NODES)
            finding("node count out of range", s, "");
        for (int i = 0; i < n; i++)
            check_node(&nodes[i], s);
        uri_free_list(nodes, n);
        return;
    }
    if (rc != RLC_E_INVAL && rc != RLC_E_NOMEM)
        finding("unexpected status", s, rlc_strerror(rc));
    const char *msg = rlc_errmsg();
    if (!msg[0] || strlen(msg) >= 1024)
        finding("empty or unbounded message", s, msg);
}

/* Parses text; if rejected, no part of the password may be in the message. */
static void check_hidden(const char *text, const char *input, const char *const *parts, int n)
{
    struct node_addr *nodes = NULL;
    int count = 0;
    if (uri_parse_list(text, &nodes, &count) == RLC_OK) {
        uri_free_list(nodes, count);
        return;
    }
    const char *msg = rlc_errmsg();
    for (int i = 0; i < n; i++)
        if (!strstr(input, parts[i]) && strstr(msg, parts[i]))
            finding("message shows (part of) a password", text, msg);
}

static void with_password(const char *input, size_t len)
{
    char *text = malloc(len + 64);
    if (!text)
        return;
    static const char *const whole[] = {PW};
    static const char *const halves[] = {PW_HEAD, PW_TAIL};

    snprintf(text, len + 64, "redis://u:%s@%s", PW, input);
    check_hidden(text, input, whole, 1);
    snprintf(text, len + 64, "%s,redis://:%s@h", input, PW);
    check_hidden(text, input, whole, 1);
    snprintf(text, len + 64, "redis://:%s,%s@%s", PW_HEAD, PW_TAIL, input);
    check_hidden(text, input, halves, 2);
    snprintf(text, len + 64, "%s%s,%s@h", input, PW_HEAD, PW_TAIL);
    check_hidden(text, input, halves, 2);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0'; /* the API takes C strings: a NUL ends the input */
    parse_as_is(s);
    with_password(s, strlen(s));
    free(s);
    return 0;
}
