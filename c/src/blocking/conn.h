/*
 * conn.h - one non-blocking connection to one Redis node.
 *
 * No threads here: the owner (a mux, or the pub/sub thread) serialises calls.
 * Errors are written into a caller's buffer rather than the thread-local
 * message, because the thread that sees an error is often not the one whose
 * call it fails.
 */
#ifndef RLC_CONN_H
#define RLC_CONN_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uri.h"

#define RLC_ERRLEN 256

enum conn_state { CONN_CLOSED, CONN_CONNECTING, CONN_READY };

/* AUTH, SELECT, ROLE and the SCRIPT LOADs of one connect, at most. */
#define CONN_HANDSHAKE_MAX 48
/* Scripts a layer above may add to every command connection's handshake. */
#define CONN_EXTRA_SCRIPTS_MAX 32

struct script;

struct conn {
    const struct node_addr *node;
    int fd;
    enum conn_state state;
    redisReader *reader;
    char *out;          /* bytes queued but not yet written */
    size_t out_len, out_cap;
    bool load_scripts;  /* command connections cache every script on connect */
    unsigned char handshake[CONN_HANDSHAKE_MAX]; /* what each pending handshake reply answers */
    int handshake_left, handshake_next;
    int64_t connect_started_ns; /* the name lookup, if any, counts as connecting */
    bool resolving;     /* CONNECTING: fd is a resolver pipe, not yet a socket */
    unsigned resolve_gen;
    unsigned addr_gen;  /* the resolver's address generation this one went to */
    /* TLS nodes (node->tls_ctx): the session from the TCP connect on. The
     * handshake runs while CONNECTING (tcp_up), so it counts against
     * connect_timeout_ms like the connect itself. */
    struct ssl_st *ssl;
    unsigned ssl_fork_gen; /* a child's copy of the session is not freed */
    bool tcp_up;        /* CONNECTING: the TCP connect is done */
    short tls_want;     /* the event the last TLS step waits for, 0 none */
};

void conn_init(struct conn *c, const struct node_addr *node, bool load_scripts);

/* Adds scripts to what every command connection loads on connect, for the
 * layer above that calls them (the lock family registers its own with its
 * first handle: this layer may name nothing of it). Process-wide, for
 * connections started from then on; a connection already open loads a
 * script at its first NOSCRIPT instead (mux.c). list: static storage, n at
 * most CONN_EXTRA_SCRIPTS_MAX (more are left to that reload). Any thread;
 * the first registration stays, later ones are ignored. */
void conn_load_also(const struct script *const *list, size_t n);

/* CLOSED -> CONNECTING (or READY at once). Queues the handshake (AUTH,
 * SELECT, and SCRIPT LOAD of every script for a command connection) ahead of
 * anything already queued. Never blocks: a host name without a cached
 * address is looked up on another thread (resolve.h) while the connection
 * is CONNECTING, and its fd reports POLLHUP when the answer is in. Returns
 * RLC_OK or RLC_E_CONNECT/NOMEM + err. */
int conn_start(struct conn *c, char err[RLC_ERRLEN]);

/* The poll events to wait for on fd now: CONNECTING waits for the connect
 * (POLLOUT) or for what the TLS handshake wants (POLLIN or POLLOUT); READY
 * for replies (POLLIN) and, with bytes queued, room to write (POLLOUT;
 * not while a TLS write waits for the peer's bytes). Every poller asks
 * this rather than assume, so a handshake never spins on a writable
 * socket. */
short conn_events(const struct conn *c);

/* For CONNECTING after poll() reported any event on fd: READY, still
 * CONNECTING (the lookup ended and the connect began, the connect is done
 * and the TLS handshake goes on, or nothing is done yet), or
 * RLC_E_CONNECT (a refused connect, a failed handshake: err says why). */
int conn_finish_connect(struct conn *c, char err[RLC_ERRLEN]);

/* Appends bytes to the queue. */
int conn_queue(struct conn *c, const char *data, size_t len);

/* Writes what the socket takes now (READY only). RLC_OK or RLC_E_CONNECT. */
int conn_flush(struct conn *c, char err[RLC_ERRLEN]);

/* Reads what has arrived (over TLS: until OpenSSL holds nothing more, as
 * poll() cannot see bytes it buffered). RLC_OK (maybe nothing), or
 * RLC_E_CONNECT on EOF or a socket error. */
int conn_read(struct conn *c, char err[RLC_ERRLEN]);

/* The next complete reply to one of the owner's commands: 1 and *reply,
 * 0 when none is complete yet, or a negative status (a refused AUTH or
 * SELECT, a protocol error). Handshake replies are checked and swallowed. */
int conn_next_reply(struct conn *c, redisReply **reply, char err[RLC_ERRLEN]);

/* An idle READY connection whose peer closed it (server restart, CLIENT
 * KILL, idle timeout): found without sending anything. */
int conn_peer_closed(struct conn *c);

void conn_close(struct conn *c);

/* Blocking, for a thread of its own (a sentinel lookup): after conn_start
 * and conn_queue, connects, writes and reads until n replies (after the
 * handshake's) are in out[], or deadline_ns (rlc_now_ns() time). RLC_OK, or
 * a status and err (no reply is left in out[] then). The caller closes c. */
int conn_exchange(struct conn *c, int n, redisReply **out, int64_t deadline_ns,
                  char err[RLC_ERRLEN]);

/* A sentinel node's connection found the master gone or demoted: its
 * address is forgotten, so the next connect asks the sentinels. A no-op for
 * other nodes. */
void conn_master_lost(struct conn *c);

/* A sentinel node's open connection to an address the sentinels have since
 * replaced (a failover): it must be closed before its next use. */
bool conn_moved(const struct conn *c);

#endif
