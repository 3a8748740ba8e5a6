/*
 * tls.c - OpenSSL under driver_conn.c: contexts, sessions, non-blocking steps.
 *
 * Verification is on unless tls_verify=0: the chain against tls_ca_file /
 * tls_ca_dir (those alone) or the system's store, and the name: a host name
 * with X509_VERIFY_PARAM_set1_host (and sent as SNI), an IP address against
 * the certificate's IP SANs with set1_ip_asc (no SNI: RFC 6066 forbids it).
 *
 * The socket goes through a BIO of our own rather than OpenSSL's socket BIO,
 * which writes with write(2): a server that closed the connection would
 * then raise SIGPIPE and kill a host process that never asked for signals.
 * Ours sends with MSG_NOSIGNAL, as driver_conn.c does for plain sockets.
 *
 * OpenSSL's error queue is per thread and the driver's leader changes threads:
 * every step clears it first (a stale entry would be misread as this step's
 * reason) and after (nothing is left for another library on this thread).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "redlockc.h"
#include "error.h"
#include "options.h"
#include "owner.h"
#include "tls.h"

struct tls_ctx {
    unsigned fork_gen; /* owner_fork_generation() when made */
    SSL_CTX *ctx;
    char *server_name; /* tls_server_name, or NULL: each node's own host */
    bool verify;
};

/* ---- the socket BIO -------------------------------------------------------- */

static BIO_METHOD *sock_method;
static pthread_once_t sock_once = PTHREAD_ONCE_INIT;

static int sock_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int sock_write(BIO *b, const char *buf, int len)
{
    ssize_t n;
    BIO_clear_retry_flags(b);
    do
        n = send(sock_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int sock_read(BIO *b, char *buf, int len)
{
    ssize_t n;
    BIO_clear_retry_flags(b);
    do
        n = recv(sock_fd(b), buf, (size_t)len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)n;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* writes are never buffered here */
}

static int sock_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void make_sock_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "redlockc socket");
    if (m && BIO_meth_set_write(m, sock_write) && BIO_meth_set_read(m, sock_read) &&
        BIO_meth_set_ctrl(m, sock_ctrl) && BIO_meth_set_create(m, sock_create)) {
        sock_method = m;
        return;
    }
    BIO_meth_free(m);
}

/* ---- contexts -------------------------------------------------------------- */

/* OpenSSL's reason for the last failure, for a message (the queue is
 * emptied): a system call's error first, as OpenSSL 3 words a missing file
 * "system lib". */
static const char *last_reason(char *buf, size_t len)
{
    unsigned long e, last = 0;
    int sys = 0;
    for (int i = 0; i < 64 && (e = ERR_get_error()) != 0; i++) {
        if (ERR_SYSTEM_ERROR(e) && !sys)
            sys = ERR_GET_REASON(e);
        last = e;
    }
    if (sys)
        return strerror(sys);
    const char *r = last ? ERR_reason_error_string(last) : NULL;
    if (r)
        return r;
    if (!last)
        return "unknown error";
    ERR_error_string_n(last, buf, len);
    return buf;
}

static int fail_file(const char *option, const char *path, const char *what)
{
    char buf[256];
    int rc = rlc_fail(RLC_E_INVAL, "option %s: cannot %s %s: %s", option, what, path,
                      errno && !ERR_peek_last_error() ? strerror(errno)
                                                     : last_reason(buf, sizeof buf));
    ERR_clear_error();
    return rc;
}

/* OpenSSL caches what a certificate's extensions say (its key ids...) the
 * first time a handshake looks, under the certificate's lock, and later
 * handshakes read that cache without the lock. The first handshakes of two
 * threads (the background thread's sentinel watch and a resolver, say)
 * raced there on the CA certificates every connection shares: TSan saw
 * one write while the other read (CI, tls.rediss_sentinel_reaches_the_
 * master_over_tls). Filling the cache here, before any thread can use the
 * context, leaves only reads for later. (Certificates a tls_ca_dir lookup
 * loads during a handshake are that handshake's own.) */
static void cache_extensions(SSL_CTX *ctx)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
    for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
        X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));
        if (x)
            X509_check_purpose(x, -1, 0);
    }
    X509 *own = SSL_CTX_get0_certificate(ctx);
    if (own)
        X509_check_purpose(own, -1, 0);
}

static int load_files(SSL_CTX *ctx, const struct rlc_options *o)
{
    errno = 0;
    if (o->tls_ca_file && SSL_CTX_load_verify_locations(ctx, o->tls_ca_file, NULL) != 1)
        return fail_file("tls_ca_file", o->tls_ca_file, "load CA certificates from");
    if (o->tls_ca_dir) {
        /* OpenSSL reads a CA directory lazily, at the first handshake: a
         * wrong path would only show up as "unable to get local issuer". */
        struct stat st;
        errno = 0;
        if (stat(o->tls_ca_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            if (!errno)
                errno = ENOTDIR;
            return fail_file("tls_ca_dir", o->tls_ca_dir, "use the CA directory");
        }
        if (SSL_CTX_load_verify_locations(ctx, NULL, o->tls_ca_dir) != 1)
            return fail_file("tls_ca_dir", o->tls_ca_dir, "use the CA directory");
    }
    if (!o->tls_ca_file && !o->tls_ca_dir && SSL_CTX_set_default_verify_paths(ctx) != 1)
        return fail_file("tls_ca_file", "(the system's CAs)", "load");
    errno = 0;
    if (o->tls_cert_file && SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert_file) != 1)
        return fail_file("tls_cert_file", o->tls_cert_file, "load a certificate from");
    if (o->tls_cert_file) {
        const char *key = o->tls_key_file ? o->tls_key_file : o->tls_cert_file;
        errno = 0;
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
            return fail_file(o->tls_key_file ? "tls_key_file" : "tls_cert_file", key,
                             "load a PEM private key from");
        if (SSL_CTX_check_private_key(ctx) != 1)
            return fail_file(o->tls_key_file ? "tls_key_file" : "tls_cert_file", key,
                             "match the certificate with the key in");
    }
    return RLC_OK;
}

int tls_ctx_new(const struct rlc_options *o, struct tls_ctx **out)
{
    *out = NULL;
    pthread_once(&sock_once, make_sock_method);
    struct tls_ctx *t = calloc(1, sizeof *t);
    if (t) {
        t->fork_gen = owner_fork_generation();
    }
    if (!t || !sock_method || !(t->ctx = SSL_CTX_new(TLS_client_method())) ||
        (o->tls_server_name && !(t->server_name = strdup(o->tls_server_name)))) {
        tls_ctx_free(t);
        ERR_clear_error();
        return rlc_fail(RLC_E_NOMEM, "out of memory (making the TLS context)");
    }
    t->verify = o->tls_verify != 0;
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    /* Partial writes: conn.c keeps the rest queued. Moving buffer: that
     * queue may be reallocated between a write that wanted POLLOUT and its
     * retry. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    int rc = load_files(t->ctx, o);
    if (rc != RLC_OK) {
        tls_ctx_free(t);
        return rc;
    }
    cache_extensions(t->ctx);
    *out = t;
    return RLC_OK;
}

/* What forked children left behind (tls_abandon): reachable, never read
 * (volatile: or the compiler drops stores nobody reads). */
static void *volatile abandoned[256];
static atomic_uint n_abandoned;

void tls_abandon(void *p)
{
    unsigned i = p ? atomic_fetch_add(&n_abandoned, 1) : UINT32_MAX;
    if (i < sizeof abandoned / sizeof abandoned[0])
        abandoned[i] = p;
}

void tls_ctx_free(struct tls_ctx *t)
{
    if (!t)
        return;
    if (t->fork_gen != owner_fork_generation()) {
        tls_abandon(t);
        return;
    }
    SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

/* ---- sessions -------------------------------------------------------------- */

static bool is_ip(const char *s)
{
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

/* The numeric address of fd's peer. */
static int peer_address(int fd, char *out, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    return getnameinfo((struct sockaddr *)&sa, sl, out, (socklen_t)len, NULL, 0,
                       NI_NUMERICHOST) == 0 ? 0 : -1;
}

struct ssl_st *tls_session_new(const struct tls_ctx *t, int fd, const char *host,
                               const char *label, char *err, size_t err_len)
{
    char addr[NI_MAXHOST];
    const char *name = t->server_name ? t->server_name : host;
    if (!name) {
        if (peer_address(fd, addr, sizeof addr) != 0) {
            snprintf(err, err_len, "TLS to %s: cannot tell the peer's address: %s", label,
                     strerror(errno));
            return NULL;
        }
        name = addr;
    }
    ERR_clear_error();
    SSL *s = SSL_new(t->ctx);
    BIO *b = s ? BIO_new(sock_method) : NULL;
    bool ok = b != NULL;
    if (ok) {
        BIO_set_data(b, (void *)(intptr_t)fd);
        SSL_set_bio(s, b, b);
        if (!is_ip(name))
            ok = SSL_set_tlsext_host_name(s, name) == 1;
        if (ok && t->verify) {
            X509_VERIFY_PARAM *p = SSL_get0_param(s);
            /* A name must match a DNS SAN exactly or by one leftmost
             * wildcard label; never a partial wildcard like "f*.example". */
            X509_VERIFY_PARAM_set_hostflags(p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(p, name) == 1
                             : X509_VERIFY_PARAM_set1_host(p, name, 0) == 1;
        }
    }
    if (!ok) {
        char buf[256];
        snprintf(err, err_len, "TLS to %s: cannot start a session for '%s': %s", label, name,
                 last_reason(buf, sizeof buf));
        if (s)
            SSL_free(s); /* frees b with it once set; a b never set is NULL here */
        ERR_clear_error();
        return NULL;
    }
    SSL_set_connect_state(s);
    return s;
}

void tls_session_free(struct ssl_st *s)
{
    SSL_free(s);
}

/* Why an SSL call that returned r failed, in words. */
static void describe(SSL *s, int r, int e, char *out, size_t len)
{
    char buf[256];
    long vr = SSL_get_verify_mode(s) == SSL_VERIFY_NONE ? X509_V_OK : SSL_get_verify_result(s);
    if (e == SSL_ERROR_SSL && vr != X509_V_OK)
        snprintf(out, len, "certificate verify failed (%s)", X509_verify_cert_error_string(vr));
    else if (e == SSL_ERROR_SSL)
        snprintf(out, len, "%s", last_reason(buf, sizeof buf));
    else if (e == SSL_ERROR_ZERO_RETURN)
        snprintf(out, len, "the server closed the TLS session");
    else if (e == SSL_ERROR_SYSCALL && r < 0 && errno)
        snprintf(out, len, "%s", strerror(errno));
    else if (e == SSL_ERROR_SYSCALL)
        snprintf(out, len, "the server closed the connection");
    else
        snprintf(out, len, "OpenSSL error %d", e);
}

/* After an SSL call that did not succeed: 0 and *want for "not now", or -1
 * (err written with prefix). */
static int not_now_or_fail(SSL *s, int r, short *want, const char *what, const char *label,
                           char *err, size_t err_len)
{
    int saved = errno;
    int e = SSL_get_error(s, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        ERR_clear_error();
        return 0;
    }
    char why[300];
    errno = saved;
    describe(s, r, e, why, sizeof why);
    snprintf(err, err_len, "%s %s failed: %s", what, label, why);
    ERR_clear_error();
    return -1;
}

int tls_handshake(struct ssl_st *s, short *want, const char *label, char *err, size_t err_len)
{
    ERR_clear_error();
    int r = SSL_connect(s);
    if (r == 1) {
        *want = 0;
        return 1;
    }
    return not_now_or_fail(s, r, want, "TLS handshake with", label, err, err_len);
}

ssize_t tls_read(struct ssl_st *s, void *buf, size_t len, short *want, const char *label,
                 char *err, size_t err_len)
{
    ERR_clear_error();
    int r = SSL_read(s, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (r > 0)
        return r;
    return not_now_or_fail(s, r, want, "TLS connection to", label, err, err_len);
}

ssize_t tls_write(struct ssl_st *s, const void *buf, size_t len, short *want,
                  const char *label, char *err, size_t err_len)
{
    ERR_clear_error();
    int r = SSL_write(s, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (r > 0)
        return r;
    int e = SSL_get_error(s, r);
    if (e == SSL_ERROR_SYSCALL) {
        /* A server that refused us (TLS 1.3: a client certificate it
         * wanted, checked after our handshake ended) sent an alert and
         * closed; our write then met its RST. The alert, still in the
         * socket, is the reason worth telling. */
        char b[256];
        short ignored;
        if (tls_read(s, b, sizeof b, &ignored, label, err, err_len) < 0 &&
            !strstr(err, strerror(ECONNRESET)) && !strstr(err, strerror(EPIPE)))
            return -1;
    }
    return not_now_or_fail(s, r, want, "TLS connection to", label, err, err_len);
}

bool tls_peer_closed(struct ssl_st *s, const char *label, char *err, size_t err_len)
{
    char b;
    ERR_clear_error();
    /* SSL_peek reads what the socket holds and handles records that carry
     * no data (a session ticket, a close_notify, an alert), but keeps any
     * application byte for the next SSL_read. An alert is the reason worth
     * telling (a client certificate the server wanted): err says it. */
    int r = SSL_peek(s, &b, 1);
    if (r > 0)
        return false;
    short want = 0;
    return not_now_or_fail(s, r, &want, "TLS connection to", label, err, err_len) < 0;
}
