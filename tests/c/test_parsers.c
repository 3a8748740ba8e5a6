/*
 * test_parsers.c - the node-URI and option grammars, table by table, through
 * the public API.
 *
 * rlc_client_new parses both strings and does no network I/O, so no server
 * is needed: every row is one call and one expected outcome (status and a
 * fragment of rlc_errmsg). Rows that fail are all reported, not just the
 * first. The option rows are generated from one table of ranges, the same
 * ranges the README documents; a row that disagrees with c/src/options.c
 * means one of them is wrong.
 *
 * A last case replays the fuzz seed corpus (tests/fuzz/corpus) through the
 * library, so the sanitizer and valgrind runs of this suite see every seed.
 */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>

#include "check.h"

/* A row's verdict, printed with both sides when it disagrees. */
static void expect(const char *what, int rc, int want_rc, const char *want_msg)
{
    const char *msg = rlc_errmsg();
    bool msg_ok = want_rc == RLC_OK || !want_msg || strstr(msg, want_msg) != NULL;
    if (rc == want_rc && msg_ok)
        return;
    fprintf(stderr, "row %s: expected %d (%s)%s%s%s, saw %d (%s); errmsg: %s\n",
            what ? what : "(unnamed)",
            want_rc, rlc_strerror(want_rc), want_msg ? " with message containing '" : "",
            want_msg ? want_msg : "", want_msg ? "'" : "", rc, rlc_strerror(rc),
            rc == RLC_OK ? "-" : msg);
    check_failed = 1;
}

/* Creates and frees a client; returns the status and leaves errmsg as set. */
static int try_client(const char *nodes, const char *options)
{
    rlc_client *c = (rlc_client *)&c; /* must be reset to NULL on failure */
    int rc = rlc_client_new(&c, nodes, options);
    if (rc != RLC_OK && c != NULL) {
        fprintf(stderr, "rlc_client_new failed (%d) but left *out = %p\n", rc, (void *)c);
        check_failed = 1;
    }
    if (rc == RLC_OK)
        rlc_client_free(c);
    return rc;
}

#define SECRET "Sup3rS3cret"
#define UUID "0f0e0d0c-0b0a-4908-8706-050403020100"

/* Creates and frees an engine; returns the status, errmsg as set. When
 * tls_of is not NULL it gets rlc_engine_node_tls of the first 4 nodes. */
static int try_engine(const char *nodes, const char *options, int *tls_of)
{
    rlc_engine *e = NULL;
    int rc = rlc_engine_new(&e, nodes, UUID, options);
    if (rc == RLC_OK && tls_of)
        for (int i = 0; i < 4; i++)
            tls_of[i] = rlc_engine_node_tls(e, i);
    rlc_engine_free(e);
    return rc;
}

/* ---- node URIs ------------------------------------------------------------ */

struct uri_row {
    const char *uri;
    int rc;
    const char *msg; /* a fragment of rlc_errmsg() on failure */
};

static const struct uri_row uri_rows[] = {
    {"redis://127.0.0.1:6379", RLC_OK, NULL},
    {"redis://localhost", RLC_OK, NULL},
    {"redis://h:1", RLC_OK, NULL},
    {"redis://h:65535", RLC_OK, NULL},
    {"redis://h/0", RLC_OK, NULL},
    {"redis://h/", RLC_OK, NULL},
    {"redis://h:6379/2147483647", RLC_OK, NULL},
    {"REDIS://Host-1.example_x:6379", RLC_OK, NULL},
    {"redis://[::1]:6379", RLC_OK, NULL},
    {"redis://[::1]", RLC_OK, NULL},
    {"redis://[::ffff:127.0.0.1]:7000/1", RLC_OK, NULL},
    {"redis://:pw@h", RLC_OK, NULL},
    {"redis://user:pw@h:1/3", RLC_OK, NULL},
    {"redis://u:p%40ss%3a@h", RLC_OK, NULL},
    {"redis://u:a@b@h", RLC_OK, NULL}, /* the last '@' ends the credentials */
    {"unix:///tmp/x.sock", RLC_OK, NULL},
    {"unix:///tmp/x.sock?db=3", RLC_OK, NULL},
    {"unix://:pw@/tmp/x.sock", RLC_OK, NULL},
    {"unix://u:pw@/tmp/x.sock?db=0", RLC_OK, NULL},
    {" redis://a:1 ,  redis://a:2 ", RLC_OK, NULL},
    {"redis://a:1,redis://b:1,unix:///tmp/s", RLC_OK, NULL},

    {NULL, RLC_E_INVAL, "no node URI given"},
    {"", RLC_E_INVAL, "no node URI given"},
    {"redis://h:0", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:65536", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:99999999999", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:abc", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:-1", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h:63 79", RLC_E_INVAL, "spaces and control characters are not allowed"},
    {"redis://:6379", RLC_E_INVAL, "missing host"},
    {"redis://", RLC_E_INVAL, "missing host"},
    {"redis:///0", RLC_E_INVAL, "missing host"},
    {"redis://u:pw@:6379", RLC_E_INVAL, "missing host"},
    {"redis://[]:6379", RLC_E_INVAL, "missing host"},
    {"http://h:6379", RLC_E_INVAL, "the scheme must be redis://, rediss:// or unix://"},
    {"h:6379", RLC_E_INVAL, "the scheme must be redis://, rediss:// or unix://"},
    {"redis:/h", RLC_E_INVAL, "the scheme must be redis://, rediss:// or unix://"},
    {"rediss:/h", RLC_E_INVAL, "the scheme must be redis://, rediss:// or unix://"},
    {"rediss://h:0", RLC_E_INVAL, "port must be a number from 1 to 65535"},
    {"redis://h?db=1", RLC_E_INVAL, "query strings and fragments are not supported"},
    {"redis://h#x", RLC_E_INVAL, "query strings and fragments are not supported"},
    {"redis://h/abc", RLC_E_INVAL, "the database after '/' must be a number"},
    {"redis://h/-1", RLC_E_INVAL, "the database after '/' must be a number"},
    {"redis://h/2147483648", RLC_E_INVAL, "the database after '/' must be a number"},
    {"redis://h/1/2", RLC_E_INVAL, "the database after '/' must be a number"},
    {"redis://h:1,redis://h:1", RLC_E_INVAL, "node h:1 is listed twice"},
    {"redis://h,redis://H:6379", RLC_E_INVAL, "is listed twice"},
    {"unix:///s,unix:///s", RLC_E_INVAL, "node /s is listed twice"},
    {"redis://h:1,", RLC_E_INVAL, "empty node URI at position 2"},
    {",redis://h:1", RLC_E_INVAL, "empty node URI at position 1"},
    {"redis://a:1, ,redis://b:1", RLC_E_INVAL, "empty node URI at position 2"},
    {"redis://h h", RLC_E_INVAL, "spaces and control characters are not allowed"},
    {"redis://h\t", RLC_E_INVAL, "spaces and control characters are not allowed"},
    {"redis://h\x7f", RLC_E_INVAL, "spaces and control characters are not allowed"},
    {"redis://u@h", RLC_E_INVAL, "credentials need a ':'"},
    {"redis://u:@h", RLC_E_INVAL, "empty password"},
    {"redis://:p%zz@h", RLC_E_INVAL, "bad %-escape in the password"},
    {"redis://:p%00@h", RLC_E_INVAL, "bad %-escape in the password"},
    {"redis://:p%4@h", RLC_E_INVAL, "bad %-escape in the password"},
    {"redis://u%g1:p@h", RLC_E_INVAL, "bad %-escape in the user name"},
    {"redis://[::1", RLC_E_INVAL, "unclosed '['"},
    {"redis://[zz::1]", RLC_E_INVAL, "bad character in an IPv6 address"},
    {"redis://[::1]x", RLC_E_INVAL, "expected ':port' after ']'"},
    {"redis://ho$t", RLC_E_INVAL, "bad character in the host name"},
    {"redis://h\xc3\xa9", RLC_E_INVAL, "bad character in the host name"},
    {"unix://relative.sock", RLC_E_INVAL, "expected an absolute socket path"},
    {"unix://", RLC_E_INVAL, "expected an absolute socket path"},
    {"unix:///", RLC_E_INVAL, "missing socket path"},
    {"unix:///x?db=a", RLC_E_INVAL, "db must be a number"},
    {"unix:///x?db=", RLC_E_INVAL, "the only query parameter is db=N"},
    {"unix:///x?foo=1", RLC_E_INVAL, "the only query parameter is db=N"},
    {"unix://u@/x", RLC_E_INVAL, "credentials need a ':'"},
};

/* ---- redis-cluster:// and redis-sentinel:// -------------------------------- */

#define SENT "redis-sentinel://"
#define CLUS "redis-cluster://"

/* Parsed by rlc_engine_new's parser: the engine refuses these nodes after
 * parsing them, with a message of its own, so a parse error is told apart
 * from that refusal by its text. */
struct topo_row {
    const char *uri;
    const char *msg; /* NULL: parses (and is then refused as unsupported) */
};

static const struct topo_row topo_rows[] = {
    {SENT "127.0.0.1:26379/mymaster", NULL},
    {SENT "a:1,b:2,c:3/mymaster", NULL},
    {SENT "a:1, b:2 ,c:3/mymaster/2", NULL},
    {SENT ":pw@a:1,b:2/m", NULL},
    {SENT "u:pw@a/m", NULL},
    {SENT "[::1]:26379,[::1]:26380/m%2Fx", NULL},
    {"REDISS-SENTINEL://a:1/m", NULL},
    {CLUS "a:1", NULL},
    {CLUS "u:p@a:1,b:2,c", NULL},
    {"rediss-cluster://a:1,b:1", NULL},
    {SENT "a:1/m,redis://x:1,redis://y:1", NULL},
    {SENT "a:1,b:1/m1," SENT "a:1,b:1/m2", NULL},
    {CLUS "a:1,b:1," CLUS "c:1,d:1", NULL},
    {SENT "a:1", "missing the master name"},
    {SENT "a:1/", "missing the master name"},
    {SENT "a:1//0", "missing the master name"},
    {SENT "/m", "no sentinel given"},
    {SENT ":pw@/m", "no sentinel given"},
    {CLUS "", "no seed node given"},
    {SENT "a:0/m", "port must be a number from 1 to 65535"},
    {SENT "a:1,b:x/m", "port must be a number from 1 to 65535"},
    {CLUS "a:1,b:65536", "port must be a number from 1 to 65535"},
    {SENT "a:1,,b:2/m", "empty sentinel at position 2"},
    {CLUS "a:1,", "empty seed at position 2"},
    {CLUS "a:1,b:1,a:1", "seed a:1 is listed twice"},
    {SENT "a:1,A:1/m", "sentinel A:1 is listed twice"},
    {SENT "a:1/m/x", "the database after the master name must be a number"},
    {SENT "a:1/m/0/1", "the database after the master name must be a number"},
    {SENT "a:1/m@x", "the master name holds a '@' or ','"},
    {SENT "a:1/m%zz", "bad %-escape in the master name"},
    {SENT "a:1/m,b:2", "the master name holds a '@' or ','"},
    {SENT "a:1/m?x=1", "query strings and fragments are not supported"},
    {CLUS "a:1/0", "redis-cluster:// takes no path or database"},
    {CLUS "a:1,u:p@b:1", "the credentials go before the first seed"},
    {CLUS "h$:1", "bad character in the host name"},
    {SENT "a:1/m," SENT "a:1/m", "is listed twice"},
    {CLUS "a:1,b:1," CLUS "c:1,b:1", "is listed twice"},
    {"redis://b:1," CLUS "a:1,b:1", "is listed twice"},
    {"redis-sentinels://a:1/m", "the scheme must be"},
};

TEST(cluster_and_sentinel_uris_parse_or_say_why_not)
{
    for (size_t i = 0; i < sizeof topo_rows / sizeof topo_rows[0]; i++) {
        const struct topo_row *r = &topo_rows[i];
        if (!r->msg) {
            expect(r->uri, try_engine(r->uri, NULL, NULL), RLC_OK, NULL);
            continue;
        }
        expect(r->uri, try_engine(r->uri, NULL, NULL), RLC_E_INVAL,
               r->msg ? r->msg : "not supported by the event-loop engine yet");
    }
    /* The event-loop engine takes both (engine_sentinel.c, engine_cluster.c). */
    CHECK_RC(try_engine(CLUS "a:1,b:1", NULL, NULL), RLC_OK);
    CHECK_RC(try_engine(SENT "a:1,b:2/m", NULL, NULL), RLC_OK);
    /* Passwords stay hidden, also one with a raw ',' in it. */
    static const char *const secret[] = {
        SENT ":" SECRET "@a:1",
        SENT "u:" SECRET "@a:0/m",
        SENT ":Sup3r,S3cret@a:1/m",
        CLUS ":Sup3r,S3cret@a:1,b:1",
        CLUS "u:" SECRET "@a:1,b:1,a:1",
        "redis://h:1," SENT ":Sup3r,S3cret@a:1",
    };
    static const char *const parts[] = {SECRET, "Sup3r", "S3cret"};
    for (size_t i = 0; i < sizeof secret / sizeof secret[0]; i++) {
        int rc = try_engine(secret[i], NULL, NULL);
        for (size_t j = 0; j < 3; j++)
            CHECK(rc == RLC_E_INVAL && !strstr(rlc_errmsg(), parts[j]),
                  "row %s: status %d, message %s", secret[i], rc, rlc_errmsg());
        CHECK(!strstr(rlc_errmsg(), "not supported"), "row %s parsed: %s", secret[i],
              rlc_errmsg());
    }
    /* rediss-sentinel: TLS to the master (tls.c); making the client does no I/O. */
    expect("blocking rediss-sentinel", try_client("rediss-sentinel://a:1/m", NULL), RLC_OK,
           NULL);
    /* Sentinel credentials are options, and only for sentinel nodes. */
    expect("sentinel options, no sentinel node",
           try_client("redis://h:1", "sentinel_password=" SECRET), RLC_E_INVAL,
           "sentinel_* options are given but no node is redis-sentinel://");
    CHECK(!strstr(rlc_errmsg(), SECRET), "message: %s", rlc_errmsg());
    expect("empty sentinel_password", try_client("redis://h:1", "sentinel_password="),
           RLC_E_INVAL, "option sentinel_password must not be empty");
done:;
}

TEST(uri_grammar_table)
{
    for (size_t i = 0; i < sizeof uri_rows / sizeof uri_rows[0]; i++) {
        const struct uri_row *r = &uri_rows[i];
        expect(r->uri ? r->uri : "(NULL)", try_client(r->uri, NULL), r->rc, r->msg);
    }
}

/* ---- rediss:// through the engine (the drivers' parser) ------------------- */

struct tls_row {
    const char *nodes;
    const char *options;
    int rc;
    const char *msg;   /* on failure */
    int tls[4];        /* on success: rlc_engine_node_tls of nodes 0..3 */
};

static const struct tls_row tls_rows[] = {
    {"rediss://127.0.0.1:6380", NULL, RLC_OK, NULL, {1, 0, 0, 0}},
    {"REDISS://h", NULL, RLC_OK, NULL, {1, 0, 0, 0}},
    {"rediss://u:p%40w@h:1/3", NULL, RLC_OK, NULL, {1, 0, 0, 0}},
    {"rediss://[::1]:7000", NULL, RLC_OK, NULL, {1, 0, 0, 0}},
    {"redis://a:1,rediss://b:1,unix:///tmp/s", NULL, RLC_OK, NULL, {0, 1, 0, 0}},
    {"rediss://h", "tls_ca_file=/etc/ssl/certs/ca-certificates.crt;tls_verify=1", RLC_OK, NULL,
     {1, 0, 0, 0}},
    {"rediss://h", "tls_ca_dir=/etc/ssl/certs;tls_cert_file=/c.pem;tls_key_file=/k.pem;"
                   "tls_server_name=redis.example;tls_verify=0",
     RLC_OK, NULL, {1, 0, 0, 0}},
    {"rediss://h", "tls_cert_file=/both.pem", RLC_OK, NULL, {1, 0, 0, 0}},
    {"rediss://h:1,redis://h:1", NULL, RLC_E_INVAL, "node h:1 is listed twice", {0}},
    {"rediss://h:65536", NULL, RLC_E_INVAL, "port must be a number from 1 to 65535", {0}},
    {"rediss://", NULL, RLC_E_INVAL, "missing host", {0}},
    {"rediss://h?sni=x", NULL, RLC_E_INVAL, "query strings and fragments are not supported", {0}},
    {"rediss://h", "tls_verify=2", RLC_E_INVAL, "option tls_verify must be an integer from 0 to 1",
     {0}},
    {"rediss://h", "tls_verify=yes", RLC_E_INVAL, "option tls_verify must be an integer", {0}},
    {"rediss://h", "tls_ca_file=", RLC_E_INVAL, "option tls_ca_file must not be empty", {0}},
    {"rediss://h", "tls_server_name=", RLC_E_INVAL, "option tls_server_name must not be empty",
     {0}},
    {"rediss://h", "tls_key_file=/k.pem", RLC_E_INVAL, "option tls_key_file needs tls_cert_file",
     {0}},
    {"rediss://h", "tls_ca_file=/a;tls_ca_file=/b", RLC_E_INVAL, "option tls_ca_file given twice",
     {0}},
    {"rediss://h", "tls_sni=x", RLC_E_INVAL, "unknown option 'tls_sni'", {0}},
    /* TLS options with no TLS node: the password would go in the clear. */
    {"redis://h", "tls_ca_file=/a", RLC_E_INVAL, "tls_* options are given but no node is rediss://",
     {0}},
    {"redis://h", "tls_verify=0", RLC_E_INVAL, "no node is rediss://", {0}},
};

TEST(rediss_uris_and_tls_options_through_the_engine)
{
    for (size_t i = 0; i < sizeof tls_rows / sizeof tls_rows[0]; i++) {
        const struct tls_row *r = &tls_rows[i];
        int tls[4] = {-1, -1, -1, -1};
        char what[512];
        snprintf(what, sizeof what, "engine '%s' '%s'", r->nodes, r->options ? r->options : "");
        expect(what, try_engine(r->nodes, r->options, tls), r->rc, r->msg);
        if (r->rc == RLC_OK && memcmp(tls, r->tls, sizeof tls) != 0) {
            fprintf(stderr, "row %s: rlc_engine_node_tls %d %d %d %d, expected %d %d %d %d\n",
                    what, tls[0], tls[1], tls[2], tls[3], r->tls[0], r->tls[1], r->tls[2],
                    r->tls[3]);
            check_failed = 1;
        }
    }
}

TEST(rlc_engine_option_gives_each_value_as_written)
{
    rlc_engine *e = NULL;
    int rc = rlc_engine_new(&e, "rediss://h", UUID,
                            " tls_ca_file=/ca dir/ca.pem ; tls_verify = 0 ;io_timeout_ms=5");
    CHECK(rc == RLC_OK, "rlc_engine_new: %s", rlc_errmsg());
    const char *v = rlc_engine_option(e, "tls_ca_file");
    CHECK(v && strcmp(v, "/ca dir/ca.pem ") == 0, "tls_ca_file '%s'", v ? v : "(NULL)");
    v = rlc_engine_option(e, "tls_verify");
    CHECK(v && strcmp(v, "0") == 0, "tls_verify '%s'", v ? v : "(NULL)");
    v = rlc_engine_option(e, "io_timeout_ms");
    CHECK(v && strcmp(v, "5") == 0, "io_timeout_ms '%s'", v ? v : "(NULL)");
    CHECK(rlc_engine_option(e, "tls_cert_file") == NULL, "an unset option is NULL");
    CHECK(rlc_engine_option(e, "no_such_option") == NULL, "an unknown option is NULL");
    CHECK(rlc_engine_option(e, NULL) == NULL, "a NULL name is NULL");
    CHECK(rlc_engine_option(NULL, "tls_verify") == NULL, "a NULL engine is NULL");
    CHECK(rlc_engine_node_tls(e, 1) == 0 && rlc_engine_node_tls(e, -1) == 0 &&
              rlc_engine_node_tls(NULL, 0) == 0,
          "rlc_engine_node_tls outside the nodes is 0");
done:
    rlc_engine_free(e);
}

/* The blocking client makes its TLS context when it is made (no I/O): a file
 * it cannot use is RLC_E_INVAL naming the option and the path; tls_* with no
 * rediss:// node stays an error. */
TEST(the_blocking_client_takes_tls_and_checks_its_files_up_front)
{
    expect("blocking rediss", try_client("rediss://:" SECRET "@127.0.0.1:6380", NULL), RLC_OK,
           NULL);
    expect("blocking mixed", try_client("redis://a:1,rediss://b:2", "tls_verify=0"), RLC_OK,
           NULL);
    expect("blocking tls option", try_client("redis://127.0.0.1:1", "tls_verify=0"), RLC_E_INVAL,
           "tls_* options are given but no node is rediss://");
    expect("missing CA file", try_client("rediss://:" SECRET "@h:1", "tls_ca_file=/nonexistent/ca.pem"),
           RLC_E_INVAL, "option tls_ca_file: cannot load CA certificates from "
                        "/nonexistent/ca.pem: No such file or directory");
    CHECK(!strstr(rlc_errmsg(), SECRET), "message: %s", rlc_errmsg());
    expect("CA dir not a directory", try_client("rediss://h:1", "tls_ca_dir=/etc/hostname"),
           RLC_E_INVAL, "option tls_ca_dir: cannot use the CA directory /etc/hostname");
    expect("CA file without certificates", try_client("rediss://h:1", "tls_ca_file=/etc/hostname"),
           RLC_E_INVAL, "option tls_ca_file: cannot load CA certificates from /etc/hostname");
    expect("missing client certificate", try_client("rediss://h:1", "tls_cert_file=/nonexistent/c.pem"),
           RLC_E_INVAL, "option tls_cert_file: cannot load a certificate from /nonexistent/c.pem");
done:;
}

/* Builds "redis://127.0.0.1:<base+i>,..." with n nodes into buf. */
static void node_list(char *buf, size_t size, int n, int base)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%sredis://127.0.0.1:%d", i ? "," : "",
                               base + i);
}

TEST(uri_lengths_and_node_counts_at_their_limits)
{
    char list[66 * 32], what[64];
    for (int n = 1; n <= 65; n += n < 4 ? 1 : n < 63 ? 59 : 1) {
        node_list(list, sizeof list, n, 7000);
        snprintf(what, sizeof what, "%d nodes", n);
        expect(what, try_client(list, NULL), n <= 64 ? RLC_OK : RLC_E_INVAL,
               n <= 64 ? NULL : "more than 64 nodes");
    }

    /* Host names up to 253 characters; unix paths up to 107 bytes. */
    char uri[600];
    for (int len = 252; len <= 254; len++) {
        snprintf(uri, sizeof uri, "redis://%0*d:1", len, 0);
        snprintf(what, sizeof what, "host of %d characters", len);
        expect(what, try_client(uri, NULL), len <= 253 ? RLC_OK : RLC_E_INVAL,
               "host name longer than 253 characters");
    }
    for (int len = 106; len <= 108; len++) {
        memset(uri, 'p', sizeof uri);
        memcpy(uri, "unix:///", 8);
        uri[7 + len] = '\0'; /* the path is '/' and len - 1 more bytes */
        snprintf(what, sizeof what, "socket path of %d bytes", len);
        expect(what, try_client(uri, NULL), len <= 107 ? RLC_OK : RLC_E_INVAL,
               "socket path longer than 107 bytes");
    }

    /* A megabyte of garbage is rejected, and its message stays short. */
    size_t big = 1 << 20;
    char *huge = malloc(big + 1);
    CHECK(huge != NULL, "malloc");
    memcpy(huge, "redis://", 8);
    memset(huge + 8, 'h', big - 8);
    huge[big] = '\0';
    expect("1 MiB host", try_client(huge, NULL), RLC_E_INVAL, "longer than 253");
    CHECK(strlen(rlc_errmsg()) < 1024, "message of %zu bytes for a 1 MiB URI",
          strlen(rlc_errmsg()));
    memset(huge, ',', big);
    expect("1 MiB of commas", try_client(huge, NULL), RLC_E_INVAL, "empty node URI at position 1");
    free(huge);
done:;
}

/* ---- passwords never reach a message ------------------------------------- */

static const char *const secret_uris[] = {
    "redis://:" SECRET "@h:0",
    "redis://u:" SECRET "@:6379",
    "redis://u:" SECRET "@h/x",
    "redis://u:" SECRET "@h?db=1",
    "redis://u:" SECRET "@h h",
    "redis://u:" SECRET "@ho$t",
    "redis://u:" SECRET "@[zz]",
    "redis://" SECRET "@h",
    "redis://u:" SECRET "%zz@h",
    "rediss://u:" SECRET "@h:0",
    "http://u:" SECRET "@h",
    "unix://u:" SECRET "@relative",
    "unix://u:" SECRET "@/x?db=z",
    "redis://u:" SECRET "@h:1,redis://u:" SECRET "@h:1",
    "redis://:" SECRET "@h:1,redis://other:port",
    "redis://other:port,redis://:" SECRET "@h:1",
    "redis://a:1,,redis://:" SECRET "@h:1",
};

/* A password that holds a ',' is cut in two by the list's separator; neither
 * half may show up (write it as %2C to use it). */
static const char *const comma_uris[] = {
    "redis://:Sup3r,S3cret@h:1",
    "redis://user:Sup3r,S3cret@h:1",
    "redis://user:12345,S3cret@h:1",
    "redis://:Sup3r,S3cret,M0re@h:1",
    "unix://:Sup3r,S3cret@/tmp/x.sock",
    "redis://h:1,redis://:Sup3r,S3cret@h:2",
};

static void check_hidden(const char *uri, const char *const *parts, int nparts)
{
    int rc = try_client(uri, NULL);
    const char *msg = rlc_errmsg();
    if (rc != RLC_E_INVAL) {
        fprintf(stderr, "row %s: expected RLC_E_INVAL, saw %d (%s)\n", uri, rc, rlc_strerror(rc));
        check_failed = 1;
        return;
    }
    for (int i = 0; i < nparts; i++)
        if (strstr(msg, parts[i])) {
            fprintf(stderr, "row %s: the message shows the password part '%s': %s\n", uri,
                    parts[i], msg);
            check_failed = 1;
        }
}

TEST(rejected_uris_never_show_their_password)
{
    static const char *const whole[] = {SECRET};
    for (size_t i = 0; i < sizeof secret_uris / sizeof secret_uris[0]; i++)
        check_hidden(secret_uris[i], whole, 1);
    /* What the redaction leaves: the scheme, "***", the host. */
    try_client("redis://u:" SECRET "@h:0", NULL);
    CHECK(strstr(rlc_errmsg(), "'redis://u:***@h:0'") != NULL, "redacted form: %s",
          rlc_errmsg());
    static const char *const halves[] = {"Sup3r", "S3cret", "12345", "M0re"};
    for (size_t i = 0; i < sizeof comma_uris / sizeof comma_uris[0]; i++)
        check_hidden(comma_uris[i], halves, 4);
    /* Escaped, the comma is part of the password and the URI is fine. */
    expect("%2C in a password", try_client("redis://:Sup3r%2CS3cret@h:1", NULL), RLC_OK, NULL);
done:;
}

/* ---- options ------------------------------------------------------------- */

/* The documented ranges (README "Options"); integers unless noted. */
struct option_range {
    const char *name;
    long long min, max;
};

static const struct option_range int_options[] = {
    {"watchdog_timeout_ms", 10, 86400000},
    {"io_timeout_ms", 1, 3600000},
    {"node_timeout_ms", 1, 3600000},
    {"connect_timeout_ms", 1, 3600000},
    {"retry_jitter_ms", 0, 60000},
    {"pool_size", 1, 64},
};

static void option_row(const char *options, int want_rc, const char *want_msg)
{
    expect(options, try_client("redis://127.0.0.1:1", options), want_rc, want_msg);
}

TEST(integer_options_accept_their_range_and_nothing_else)
{
    char opt[256], msg[160];
    for (size_t i = 0; i < sizeof int_options / sizeof int_options[0]; i++) {
        const struct option_range *o = &int_options[i];
        snprintf(msg, sizeof msg, "option %s must be an integer from %lld to %lld", o->name,
                 o->min, o->max);
        const long long good[] = {o->min, o->max, (o->min + o->max) / 2};
        for (int k = 0; k < 3; k++) {
            snprintf(opt, sizeof opt, "%s=%lld", o->name, good[k]);
            option_row(opt, RLC_OK, NULL);
        }
        snprintf(opt, sizeof opt, " %s = %lld ;", o->name, o->max);
        option_row(opt, RLC_OK, NULL);
        const long long bad[] = {o->min - 1, o->max + 1, LLONG_MAX, LLONG_MIN};
        for (int k = 0; k < 4; k++) {
            snprintf(opt, sizeof opt, "%s=%lld", o->name, bad[k]);
            option_row(opt, RLC_E_INVAL, msg);
        }
        static const char *const junk[] = {"", "abc", "1.5", "+1", "0x10", "1e3", "1 2",
                                           "99999999999999999999999", "-0"};
        for (size_t k = 0; k < sizeof junk / sizeof junk[0]; k++) {
            snprintf(opt, sizeof opt, "%s=%s", o->name, junk[k]);
            option_row(opt, RLC_E_INVAL, msg);
        }
    }
}

TEST(drift_factor_and_key_prefix_limits)
{
    static const char *const good[] = {"0", "0.5", "0.01", ".25", "0.500000", "00.1"};
    static const char *const bad[] = {"0.51", "1", "-0.1", "1e-3", "nan", "inf", "0.5.1", "",
                                       ".", "0,1", "1" "000000000000000000000000000000000000"
                                                       "000000000000000000000000000000"};
    char opt[256];
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        snprintf(opt, sizeof opt, "drift_factor=%s", good[k]);
        option_row(opt, RLC_OK, NULL);
    }
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(opt, sizeof opt, "drift_factor=%s", bad[k]);
        option_row(opt, RLC_E_INVAL, "option drift_factor must be a number from 0 to 0.5");
    }

    char *prefix = malloc(1100);
    CHECK(prefix != NULL, "malloc");
    for (int len = 0; len <= 1025; len += len == 0 ? 1023 : 1) {
        memcpy(prefix, "key_prefix=", 11);
        memset(prefix + 11, 'p', (size_t)len);
        prefix[11 + len] = '\0';
        char what[48];
        snprintf(what, sizeof what, "key_prefix of %d bytes", len);
        expect(what, try_client("redis://127.0.0.1:1", prefix), len <= 1024 ? RLC_OK : RLC_E_INVAL,
               "option key_prefix is longer than 1024 bytes");
    }
    free(prefix);
    /* Any bytes but ';' and NUL: braces, spaces inside, non-UTF-8. */
    option_row("key_prefix={app} \xff\xfe:", RLC_OK, NULL);
done:;
}

TEST(unknown_duplicate_and_malformed_option_strings)
{
    option_row(NULL, RLC_OK, NULL);
    option_row("", RLC_OK, NULL);
    option_row(";;; ;", RLC_OK, NULL);
    option_row(" io_timeout_ms = 5 ; node_timeout_ms=6;", RLC_OK, NULL);
    option_row("nope=1", RLC_E_INVAL, "unknown option 'nope'");
    option_row("IO_TIMEOUT_MS=5", RLC_E_INVAL, "unknown option 'IO_TIMEOUT_MS'");
    option_row("=5", RLC_E_INVAL, "unknown option ''");
    option_row("io_timeout_ms", RLC_E_INVAL, "option 'io_timeout_ms' has no '=value'");
    option_row("io_timeout_ms=5;io_timeout_ms=5", RLC_E_INVAL, "option io_timeout_ms given twice");
    option_row("key_prefix=a;key_prefix=a", RLC_E_INVAL, "option key_prefix given twice");
    option_row("io_timeout_ms=5,node_timeout_ms=6", RLC_E_INVAL,
               "option io_timeout_ms must be an integer");
    option_row("password=secret", RLC_E_INVAL, "unknown option 'password'");

    /* A long unknown name is quoted clipped, not whole. */
    char *name = malloc(100003);
    CHECK(name != NULL, "malloc");
    memset(name, 'x', 100000);
    memcpy(name + 100000, "=1", 3);
    option_row(name, RLC_E_INVAL, "unknown option 'xxxxxxxx");
    CHECK(strlen(rlc_errmsg()) < 200, "message of %zu bytes for a 100 kB option name",
          strlen(rlc_errmsg()));
    free(name);
    /* Every option at once, each at its maximum. */
    option_row("watchdog_timeout_ms=86400000;io_timeout_ms=3600000;node_timeout_ms=3600000;"
               "connect_timeout_ms=3600000;retry_jitter_ms=60000;drift_factor=0.5;"
               "pool_size=64;key_prefix=x",
               RLC_OK, NULL);
done:;
}

/* ---- the fuzz seeds, replayed --------------------------------------------- */

/* tests/fuzz/corpus/<kind>, found from this file's own path (CMake compiles
 * it by its absolute path). */
static int corpus_dir(const char *kind, char *buf, size_t size)
{
    const char *slash = strrchr(__FILE__, '/');
    if (__FILE__[0] != '/' || !slash)
        return -1;
    snprintf(buf, size, "%.*s/../fuzz/corpus/%s", (int)(slash - __FILE__), __FILE__, kind);
    return 0;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(65537);
    size_t n = buf ? fread(buf, 1, 65536, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* Every seed parses to OK or RLC_E_INVAL; returns how many ran, -1 if none. */
static int replay(const char *kind)
{
    char dir[4096];
    if (corpus_dir(kind, dir, sizeof dir) != 0)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int ran = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && ran < 10000) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *text = read_file(path);
        if (!text)
            continue;
        int rc = strcmp(kind, "uri") == 0 ? try_client(text, NULL)
                                          : try_client("redis://127.0.0.1:1", text);
        if (rc != RLC_OK && rc != RLC_E_INVAL) {
            fprintf(stderr, "seed %s: status %d (%s): %s\n", path, rc, rlc_strerror(rc),
                    rlc_errmsg());
            check_failed = 1;
        }
        free(text);
        ran++;
    }
    closedir(d);
    return ran;
}

/* rlc_option_describe is the table the parser reads: every line names an
 * option it takes at the ends of the range told and refuses past them, and
 * every choice it lists (bindings build their option names from it). */
TEST(every_described_option_is_parsed_as_described)
{
    char opt[512];
    int n = 0;
    for (const char *line; (line = rlc_option_describe(n)) != NULL; n++) {
        char name[64], kind[16], range[128], def[64];
        CHECK(sscanf(line, "%63s %15s %127s %63s", name, kind, range, def) == 4, "line '%s'", line);
        if (strncmp(name, "tls_", 4) == 0)
            continue; /* they need a rediss:// node: the_blocking_client_takes_tls_... */
        if (strcmp(kind, "int") == 0) {
            long long lo, hi;
            CHECK(sscanf(range, "%lld..%lld", &lo, &hi) == 2, "range '%s'", range);
            snprintf(opt, sizeof opt, "%s=%lld", name, lo);
            option_row(opt, RLC_OK, NULL);
            snprintf(opt, sizeof opt, "%s=%lld", name, hi);
            option_row(opt, RLC_OK, NULL);
            snprintf(opt, sizeof opt, "%s=%lld", name, hi + 1);
            option_row(opt, RLC_E_INVAL, name);
        } else if (strcmp(kind, "fraction") == 0) {
            snprintf(opt, sizeof opt, "%s=%.*s", name, (int)strcspn(range, "."), range);
            option_row(opt, RLC_OK, NULL);
        } else if (strcmp(kind, "choice") == 0) {
            char words[128];
            snprintf(words, sizeof words, "%s", range);
            for (char *w = strtok(words, "|"); w; w = strtok(NULL, "|")) {
                snprintf(opt, sizeof opt, "%s=%s", name, w);
                option_row(opt, RLC_OK, NULL);
            }
            snprintf(opt, sizeof opt, "%s=none-of-them", name);
            option_row(opt, RLC_E_INVAL, name);
            CHECK(strstr(range, def) != NULL, "default '%s' is one of '%s'", def, range);
        } else {
            CHECK(strcmp(kind, "text") == 0, "kind '%s' of %s", kind, name);
        }
    }
    CHECK(n >= 20, "%d options described", n);
    CHECK(rlc_option_describe(-1) == NULL && rlc_option_describe(n) == NULL, "out of range");
    option_row("format=classic;fencing=1", RLC_E_INVAL, "fencing=1 needs format=redisson");
done:;
}

TEST(fuzz_seed_corpus_replays_cleanly)
{
    int uris = replay("uri"), options = replay("options");
    CHECK(uris > 0 && options > 0, "seed corpus not found next to %s (uri: %d, options: %d)",
          __FILE__, uris, options);
    fprintf(stderr, "replayed %d URI seeds and %d option seeds\n", uris, options);
done:;
}

RUN_TESTS(CASE(uri_grammar_table),
          CASE(cluster_and_sentinel_uris_parse_or_say_why_not),
          CASE(uri_lengths_and_node_counts_at_their_limits),
          CASE(rejected_uris_never_show_their_password),
          CASE(rediss_uris_and_tls_options_through_the_engine),
          CASE(rlc_engine_option_gives_each_value_as_written),
          CASE(the_blocking_client_takes_tls_and_checks_its_files_up_front),
          CASE(integer_options_accept_their_range_and_nothing_else),
          CASE(drift_factor_and_key_prefix_limits),
          CASE(unknown_duplicate_and_malformed_option_strings),
          CASE(every_described_option_is_parsed_as_described),
          CASE(fuzz_seed_corpus_replays_cleanly))
