/*
 * tls.h - TLS for the blocking driver's connections (OpenSSL), without ever
 * blocking.
 *
 * hiredis 0.14 has no TLS, but the driver (driver_conn.c) owns its sockets
 * and only hands bytes to the engine, so TLS sits between the socket and
 * those bytes: one SSL_CTX per client (its tls_* options), one SSL per
 * connection, driven by the same poll() loop as a plain socket. Every call here is non-blocking:
 * "not now" comes back with the poll event it waits for.
 */
#ifndef RLC_TLS_H
#define RLC_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct rlc_options;
struct ssl_st;
struct tls_ctx;

/* A client's TLS settings: the CAs, the client certificate, the name to
 * check. RLC_OK and *out, or RLC_E_INVAL (a file that cannot be read or
 * used) / RLC_E_NOMEM with the thread's message set. */
int tls_ctx_new(const struct rlc_options *o, struct tls_ctx **out);

/* Frees it. Accepts NULL. Never frees in a
 * forked child (OpenSSL's locks may be held there by a thread the child
 * does not have): the child leaves it behind with tls_abandon. */
void tls_ctx_free(struct tls_ctx *t);

/* A forked child's copy of a context or session: never freed (freeing takes
 * OpenSSL's locks, which a thread the child does not have may hold), but
 * kept where a leak checker sees it still referenced, up to a bound. */
void tls_abandon(void *p);

/* A session over the connected socket fd. host is the name or address the
 * certificate must carry (and the SNI, for a name) unless tls_server_name
 * says otherwise; NULL: the socket's peer address (a sentinel's master,
 * known only by the address the sentinels gave). NULL and err on failure. */
struct ssl_st *tls_session_new(const struct tls_ctx *t, int fd, const char *host,
                               const char *label, char *err, size_t err_len);

/* Accepts NULL; never writes to the socket (no close_notify: the socket is
 * closed right after, and the server does not care). */
void tls_session_free(struct ssl_st *s);

/* One step of the handshake: 1 done; 0 not yet, *want is the poll event
 * (POLLIN or POLLOUT) it waits for; -1 failed, err says why (the
 * certificate check's reason when that was it). */
int tls_handshake(struct ssl_st *s, short *want, const char *label, char *err, size_t err_len);

/* SSL_read / SSL_write: > 0 bytes moved; 0 nothing now (*want: the event
 * to wait for); -1 the connection is over (a close_notify, EOF, an alert
 * such as "certificate required"), err says why. */
ssize_t tls_read(struct ssl_st *s, void *buf, size_t len, short *want, const char *label,
                 char *err, size_t err_len);
ssize_t tls_write(struct ssl_st *s, const void *buf, size_t len, short *want,
                  const char *label, char *err, size_t err_len);

/* An idle session's peer closed it (close_notify, EOF, a socket error),
 * seen without sending anything and without taking application bytes. */
bool tls_peer_closed(struct ssl_st *s, const char *label, char *err, size_t err_len);

#endif
