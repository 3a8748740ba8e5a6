/*
 * driver_conn.h - one connection of the engine as the blocking driver runs
 * it: a non-blocking socket, TLS over it when the node is rediss://, and
 * nothing of the protocol (the engine has that; engine_driver.c moves the
 * bytes). Every call here returns at once; "not now" is a poll event.
 */
#ifndef RLC_DRIVER_CONN_H
#define RLC_DRIVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "redlockc.h"

struct ssl_st;
struct tls_ctx;
struct resolver;

enum dconn_state { DC_CLOSED, DC_RESOLVING, DC_CONNECTING, DC_HANDSHAKE, DC_UP };

struct dconn {
    int fd;               /* the socket; while DC_RESOLVING, the lookup's descriptor */
    enum dconn_state state;
    struct resolver *res; /* the host's (borrowed from the driver), while resolving */
    unsigned gen;         /* the lookup waited for */
    struct tls_ctx *tls;  /* to speak TLS once connected, or NULL */
    char host[256];       /* the name the certificate must carry */
    char label[280];      /* host:port, as messages name it */
    struct ssl_st *ssl;   /* NULL on a plain connection */
    short tls_want;       /* the poll event the handshake or TLS I/O waits for */
};

void dconn_init(struct dconn *c);

/* Starts a connection to host:port (port 0: host is a unix socket's path)
 * through res, host's resolver (resolve.h: a name is looked up on a thread
 * of its own, never here), with TLS when tls is not NULL (the certificate
 * must carry host, or tls_server_name). RLC_OK: DC_RESOLVING,
 * DC_CONNECTING, or DC_UP when a plain socket connected at once;
 * otherwise a status, err says why, and c stays DC_CLOSED. An err of a
 * socket names no address ("Connection refused"): the engine's message
 * does, and the driver puts the reason behind it (dio_explain); TLS's
 * errors name c's label. */
int dconn_start(struct dconn *c, const char *host, int port, struct resolver *res,
                struct tls_ctx *tls, char *err, size_t err_len);

/* What to poll for: 0 when closed. wants_write: the engine has bytes. */
short dconn_events(const struct dconn *c, bool wants_write);

/* After poll said revents: the lookup, the connect or the handshake moves
 * on. 1 it is DC_UP now (tell the engine), 0 not yet (or already up), -1
 * it failed (err says why; close it). */
int dconn_progress(struct dconn *c, short revents, char *err, size_t err_len);

/* Reads what has arrived: > 0 bytes, 0 nothing now, -1 closed or failed. */
ssize_t dconn_read(struct dconn *c, char *buf, size_t len, char *err, size_t err_len);

/* Writes: > 0 bytes taken, 0 not now, -1 failed. */
ssize_t dconn_write(struct dconn *c, const char *data, size_t len, char *err, size_t err_len);

/* Whether the server has closed c (EOF or an error, and nothing left to
 * read): one recv(MSG_PEEK), no wait. A server that closed an idle
 * connection (a restart, CLIENT KILL, its timeout) is found before a new
 * request is written on it, so the request goes on a new connection
 * instead of failing. */
bool dconn_peer_closed(const struct dconn *c, char *err, size_t err_len);

void dconn_close(struct dconn *c);

/* In a forked child: closes the child's copy of the descriptor (the
 * parent's connection goes on), leaves the TLS session behind (tls.h) and
 * takes no lock a vanished thread may hold (a lookup's: resolver_forget). */
void dconn_abandon(struct dconn *c);

#endif
