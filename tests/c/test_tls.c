/*
 * test_tls.c - the blocking API over rediss:// against a real redis-server
 * with --tls-port (Debian's, built with TLS), certificates made for each run
 * by tests/tls/make_certs.sh (OpenSSL) in a temporary directory. The server
 * keeps its plain port too, where the test looks at the lock as anyone would.
 *
 * What a user can observe: a lock over TLS is the same Redisson hash; a
 * waiter is woken by the unlock message on a TLS subscriber connection; the
 * watchdog renews over TLS; and every way verification can fail (another
 * CA, a name the certificate lacks, a client certificate the server wants
 * and does not get) is an RLC_E_CONNECT that says why, never a hang, while
 * tls_verify=0 and a given client certificate connect; rediss-sentinel://
 * reaches the master the sentinel names over TLS.
 */
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

#include "tls_env.h"

/* A plain-port command with the server's password. */
static long long raw_int(struct tls_env *e, const char *cmd, const char *arg)
{
    redisContext *c = rs_connect(&e->s);
    long long v = LLONG_MIN;
    if (!c)
        return v;
    redisReply *r = redisCommand(c, "AUTH %s", PASSWORD);
    if (r)
        freeReplyObject(r);
    r = redisCommand(c, cmd, arg);
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->type == REDIS_REPLY_INTEGER)
        v = r->element[1]->integer; /* PUBSUB NUMSUB */
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

/* One acquire over TLS that must fail: its status and message (errmsg). */
static int try_acquire(const char *uri, const char *opts, char *msg, size_t len)
{
    rlc_client *c = NULL;
    int rc = rlc_client_new(&c, uri, opts);
    if (rc == RLC_OK) {
        rlc_lock *l = NULL;
        rc = rlc_lock_new(c, "tls:nope", 0, &l);
        if (rc == RLC_OK)
            rc = rlc_lock_acquire(l, 0, -1);
        snprintf(msg, len, "%s", rlc_errmsg());
        if (rc == RLC_OK)
            rlc_lock_release(l);
        rlc_lock_free(l);
        rlc_client_free(c);
    } else {
        snprintf(msg, len, "%s", rlc_errmsg());
    }
    return rc;
}

/* Acquire, a second client kept out, release: the lock works over TLS. */
static int round_trip(const char *uri, const char *given)
{
    /* The wide time bounds of env_start's options, where the case gave
     * options of its own. */
    char opts[700];
    snprintf(opts, sizeof opts, "%s%s", given,
             strstr(given, "io_timeout_ms") ? "" : ";io_timeout_ms=20000;connect_timeout_ms=20000");
    rlc_client *a = client(uri, opts), *b = client(uri, opts);
    rlc_lock *la = a ? lock(a, "tls:rt", 0) : NULL, *lb = b ? lock(b, "tls:rt", 0) : NULL;
    int ok = la && lb && rlc_lock_acquire(la, 0, -1) == RLC_OK &&
             rlc_lock_acquire(lb, 0, -1) == RLC_NOT_ACQUIRED && rlc_lock_release(la) == RLC_OK &&
             rlc_lock_acquire(lb, 0, -1) == RLC_OK && rlc_lock_release(lb) == RLC_OK;
    if (!ok)
        fprintf(stderr, "round trip over %s (%s) failed: %s\n", uri, given, rlc_errmsg());
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    return ok;
}

TEST(lock_and_unlock_over_tls_is_the_redisson_hash)
{
    struct tls_env e;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    char opts[1200];
    snprintf(opts, sizeof opts, "%s;fencing=1", e.opts);
    c = client(e.uri, opts);
    CHECK(c, "client");
    l = lock(c, "tls:orders", 7);
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    char field[128];
    snprintf(field, sizeof field, "%s:7", rlc_client_uuid(c));
    redisContext *rc = rs_connect(&e.s);
    CHECK(rc, "plain connection");
    freeReplyObject(redisCommand(rc, "AUTH %s", PASSWORD));
    redisReply *r = redisCommand(rc, "HGET tls:orders %s", field);
    bool seen = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0;
    freeReplyObject(r);
    redisFree(rc);
    CHECK(seen, "the hash field %s = 1 was not seen on the plain port", field);
    uint64_t token = 0;
    CHECK_RC(rlc_lock_fencing_token(l, &token), RLC_OK);
    CHECK(token >= 1, "fencing token %llu", (unsigned long long)token);
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    CHECK(raw_int(&e, "EXISTS %s", "tls:orders") == 0, "the hash is still there");
    /* By name: the certificate's DNS SAN, sent as SNI. */
    char by_name[160];
    snprintf(by_name, sizeof by_name, "rediss://:" PASSWORD "@localhost:%d", e.tls_port);
    CHECK(round_trip(by_name, e.opts), "by name");
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    env_stop(&e);
}

struct waiter_arg {
    rlc_lock *l;
    int rc;
};

static void *waiter(void *p)
{
    struct waiter_arg *a = p;
    a->rc = rlc_lock_acquire(a->l, 20000, -1);
    if (a->rc == RLC_OK)
        rlc_lock_release(a->l);
    return NULL;
}

TEST(waiter_is_woken_by_the_unlock_message_over_tls)
{
    struct tls_env e;
    rlc_client *a = NULL, *b = NULL;
    rlc_lock *la = NULL, *lb = NULL;
    pthread_t t;
    bool started = false;
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    a = client(e.uri, e.opts);
    b = client(e.uri, e.opts);
    CHECK(a && b, "clients");
    la = lock(a, "tls:handoff", 0);
    lb = lock(b, "tls:handoff", 0);
    /* Lease 30 s, wait 20 s: only the unlock message can hand it over. */
    CHECK_RC(rlc_lock_acquire(la, 0, 30000), RLC_OK);
    struct waiter_arg w = {lb, -99};
    CHECK(pthread_create(&t, NULL, waiter, &w) == 0, "thread");
    started = true;
    CHECK(WAIT_UNTIL(raw_int(&e, "PUBSUB NUMSUB %s", "redisson_lock__channel:{tls:handoff}") == 1,
                     10000),
          "the waiter never subscribed over TLS");
    CHECK_RC(rlc_lock_release(la), RLC_OK);
    pthread_join(t, NULL);
    started = false;
    CHECK(w.rc == RLC_OK, "the waiter got %d (%s)", w.rc, rlc_strerror(w.rc));
done:
    if (started)
        pthread_join(t, NULL);
    rlc_lock_free(la);
    rlc_lock_free(lb);
    rlc_client_free(a);
    rlc_client_free(b);
    env_stop(&e);
}

TEST(watchdog_renews_over_tls)
{
    struct tls_env e;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    char opts[600];
    snprintf(opts, sizeof opts, "%s;watchdog_timeout_ms=1000", e.opts);
    c = client(e.uri, opts);
    CHECK(c, "client");
    l = lock(c, "tls:wd", 0);
    /* Connected and handshaken first: under valgrind the first connect alone
     * may take most of a short lease. */
    CHECK(is_locked(l) == 0, "not locked before");
    CHECK_RC(rlc_lock_acquire(l, 0, -1), RLC_OK);
    /* Three leases long: alive only if renewals went through. */
    int64_t end = check_now_ms() + 3000;
    while (check_now_ms() < end) {
        long long p = raw_int(&e, "PTTL %s", "tls:wd");
        CHECK(p > 0, "PTTL %lld: the lock expired under the watchdog", p);
        check_sleep_ms(50);
    }
    CHECK(is_held(l) == 1, "still held");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    env_stop(&e);
}

TEST(another_ca_or_a_wrong_name_fail_the_handshake_clearly)
{
    struct tls_env e;
    char msg[512], opts[600];
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    int64_t t0 = check_now_ms();
    snprintf(opts, sizeof opts, "tls_ca_file=%s", e.other_ca);
    int rc = try_acquire(e.uri, opts, msg, sizeof msg);
    CHECK(rc == RLC_E_CONNECT, "another CA: status %d (%s)", rc, msg);
    char want[128];
    snprintf(want, sizeof want, "TLS handshake with 127.0.0.1:%d failed: certificate verify "
             "failed (", e.tls_port);
    CHECK(strstr(msg, want), "another CA: message %s", msg);
    CHECK(!strstr(msg, PASSWORD), "the password is shown: %s", msg);
    /* A hang guard, not a speed claim: the default connect timeout is 1 s. */
    CHECK(check_now_ms() - t0 < 15000, "the failure took %lld ms",
          (long long)(check_now_ms() - t0));

    snprintf(opts, sizeof opts, "%s;tls_server_name=wrong.example", e.opts);
    rc = try_acquire(e.uri, opts, msg, sizeof msg);
    CHECK(rc == RLC_E_CONNECT && strstr(msg, "hostname mismatch"),
          "wrong name: status %d, message %s", rc, msg);
    /* The right name given by the option, the host being an IP. */
    snprintf(opts, sizeof opts, "%s;tls_server_name=localhost", e.opts);
    CHECK(round_trip(e.uri, opts), "tls_server_name=localhost");
done:
    env_stop(&e);
}

TEST(tls_verify_0_connects_whatever_the_certificate)
{
    struct tls_env e;
    char opts[600];
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    snprintf(opts, sizeof opts, "tls_ca_file=%s;tls_verify=0;tls_server_name=wrong.example",
             e.other_ca);
    CHECK(round_trip(e.uri, opts), "tls_verify=0");
    CHECK(round_trip(e.uri, "tls_verify=0"), "tls_verify=0, system CAs");
done:
    env_stop(&e);
}

TEST(a_required_client_certificate_given_or_not)
{
    struct tls_env e;
    char opts[600], msg[512];
    CHECK(env_start(&e, true, false) == 0, "no TLS server");
    snprintf(opts, sizeof opts, "%s;tls_cert_file=%s", e.opts, e.client_pem);
    CHECK(round_trip(e.uri, opts), "with client.pem");
    snprintf(opts, sizeof opts, "%s;tls_cert_file=%s/client.crt;tls_key_file=%s/client.key",
             e.opts, e.dir, e.dir);
    CHECK(round_trip(e.uri, opts), "with client.crt and client.key");
    /* TLS 1.3: the client's handshake ends before the server checks; its
     * refusal is an alert on the first read, and that is the message. */
    int rc = try_acquire(e.uri, e.opts, msg, sizeof msg);
    CHECK(rc == RLC_E_CONNECT && strstr(msg, "certificate required"),
          "no client certificate: status %d, message %s", rc, msg);
done:
    env_stop(&e);
}

/* A child of a process whose client has TLS connections frees that client
 * (without touching the parent's sessions) and makes its own. */
TEST(a_forked_child_frees_the_parents_client_and_makes_its_own)
{
#if defined(__SANITIZE_THREAD__)
    /* TSan cannot run threads in a child forked from a threaded process
     * ("dup thread with used id"); this case runs in the other builds. */
    fprintf(stderr, "skipped under ThreadSanitizer\n");
    return;
#endif
    struct tls_env e;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    CHECK(env_start(&e, false, true) == 0, "no TLS server");
    c = client(e.uri, e.opts);
    CHECK(c, "client");
    l = lock(c, "tls:fork", 0);
    /* A fixed lease: a watchdog hold would set the client's background
     * thread to work (renewals, loss push's TLS connections) just as we fork,
     * and a child forked while another thread is inside ASan's allocator
     * inherits its lock held and hangs (6 of 25 runs under ASan; glibc's
     * malloc is fork-safe, ASan's here is not). What this case checks, the
     * child freeing the parent's TLS client and making its own, is the same. */
    CHECK_RC(rlc_lock_acquire(l, 0, 30000), RLC_OK);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int ok = rlc_lock_release(l) == RLC_E_CLOSED;
        rlc_lock_free(l);
        rlc_client_free(c);
        ok = ok && round_trip(e.uri, e.opts);
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK(is_held(l) == 1, "the parent's hold survived the child");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    env_stop(&e);
}

/* A client of the sentinel sits in SUBSCRIBE (CLIENT LIST, plain port). */
static int sentinel_has_subscriber(const struct redis_server *s)
{
    redisReply *r = rs_cmd(s, "CLIENT LIST");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cmd=subscribe");
    if (r)
        freeReplyObject(r);
    return ok;
}

/* rediss-sentinel://: TLS to the sentinel (its tls-port; it keeps a plain
 * port for the harness) and to the master it names by its TLS port, that
 * one checked against the address the sentinel gave (127.0.0.1, an IP SAN). */
TEST(rediss_sentinel_reaches_the_master_over_tls)
{
    struct tls_env e;
    struct redis_server sent = {0};
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    char msg[512], uri[160], opts[600], conf[1024];
    CHECK(env_start(&e, false, false) == 0, "no TLS server");
    int sent_tls_port = rs_free_port();
    /* tls-replication: the sentinel's own links to the master are TLS. */
    snprintf(conf, sizeof conf,
             "tls-port %d\ntls-auth-clients no\ntls-replication yes\n"
             "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
             "sentinel monitor mym 127.0.0.1 %d 1\n",
             sent_tls_port, e.cert, e.key, e.ca, e.tls_port);
    CHECK(rs_start_sentinel(&sent, conf) == 0, "the sentinel did not start");
    snprintf(uri, sizeof uri, "rediss-sentinel://127.0.0.1:%d/mym", sent_tls_port);
    c = client(uri, e.opts);
    CHECK(c, "client");
    l = lock(c, "tls:sent", 0);
    CHECK_RC(rlc_lock_acquire(l, 5000, -1), RLC_OK);
    CHECK(rs_int(&e.s, "EXISTS tls:sent") == 1, "the hold is not on the master");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
    /* The +switch-master watch subscribes over TLS too. */
    CHECK(WAIT_UNTIL(sentinel_has_subscriber(&sent), 10000),
          "no SUBSCRIBE +switch-master on the sentinel");
    snprintf(opts, sizeof opts, "%s;tls_server_name=wrong.example", e.opts);
    int rc = try_acquire(uri, opts, msg, sizeof msg);
    /* The sentinel's name is checked first: no master address comes back. */
    CHECK(rc == RLC_E_CONNECT && strstr(msg, "TLS handshake with sentinel 127.0.0.1:") &&
              strstr(msg, "hostname mismatch"),
          "wrong name: status %d, message %s", rc, msg);
    /* The sentinel's plain port is not TLS: the handshake fails there (it
     * waits for a ServerHello that never comes, up to io_timeout_ms). */
    snprintf(uri, sizeof uri, "rediss-sentinel://%s/mym", sent.uri);
    snprintf(opts, sizeof opts, "tls_ca_file=%s;io_timeout_ms=3000;connect_timeout_ms=3000",
             e.ca);
    rc = try_acquire(uri, opts, msg, sizeof msg);
    CHECK(rc == RLC_E_CONNECT && strstr(msg, "sentinel"), "plain sentinel port: status %d, "
          "message %s", rc, msg);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    if (sent.pid > 0)
        rs_stop(&sent);
    env_stop(&e);
}

RUN_TESTS(CASE(lock_and_unlock_over_tls_is_the_redisson_hash),
          CASE(waiter_is_woken_by_the_unlock_message_over_tls),
          CASE(watchdog_renews_over_tls),
          CASE(another_ca_or_a_wrong_name_fail_the_handshake_clearly),
          CASE(tls_verify_0_connects_whatever_the_certificate),
          CASE(a_required_client_certificate_given_or_not),
          CASE(a_forked_child_frees_the_parents_client_and_makes_its_own),
          CASE(rediss_sentinel_reaches_the_master_over_tls))
