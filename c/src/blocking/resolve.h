/*
 * resolve.h - host names to addresses without ever blocking the caller.
 *
 * getaddrinfo() can block for as long as the system's resolver retries (5 s
 * and more when a DNS server does not answer), and it cannot be interrupted.
 * So it never runs on a caller's thread, under a connection's mutex, or on
 * the renewal thread: a node's lookup runs on a short-lived thread of its
 * own, and connections wait for it like for a connect, on a file descriptor
 * in their poll(), within connect_timeout_ms.
 *
 * A redis-sentinel:// node's "lookup" asks its sentinels, in turn, for the
 * master's address (SENTINEL get-master-addr-by-name), on the same kind of
 * thread: for a connection it is a name lookup like any other. Its answer is
 * dropped (resolver_invalidate) when a connection to the master breaks or
 * finds a replica, so the next connect asks again, and it is replaced at
 * once when a sentinel announces +switch-master (sentinel_watch.c). Every
 * change of address bumps the resolver's address generation: a connection
 * made to an older one is closed before its next use.
 */
#ifndef RLC_RESOLVE_H
#define RLC_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RLC_RESOLVED_MAX 4

struct resolver;
struct node_addr;

struct resolved {
    struct sockaddr_storage sa;
    socklen_t len;
    int family;
};

/* One node's resolver, made when the client is; NULL without memory. A
 * numeric address is resolved here, once, and never looked up again. */
struct resolver *resolver_new(const char *host, int port);

/* One question to a sentinel over TLS (rediss-sentinel://). hiredis 0.14
 * has no TLS, so it goes through the client's own connections (conn.c),
 * which sit above this file: the client hands the function in
 * (sentinel_tls.c), so that name lookups never reach up to connections. */
struct sentinel_tls_query {
    const char *host;
    int port;
    const char *user, *password; /* AUTH in the handshake, or NULL */
    struct tls_ctx *tls;
    const char *master;          /* SENTINEL get-master-addr-by-name <master> */
    int64_t deadline_ns;
};
struct redisReply;
/* RLC_OK and the reply (the caller frees it), or a status and why. */
typedef int (*sentinel_tls_fn)(const struct sentinel_tls_query *q, struct redisReply **reply,
                               char *why, size_t why_len);

/* A sentinel node's resolver: its lookups ask n's sentinels (n->seeds) for
 * the master named n->master_name, with AUTH user/password (either may be
 * NULL) to the sentinels, each within connect_ms and io_ms; over TLS
 * through ask_tls when n is rediss-sentinel://. NULL without memory. */
struct resolver *resolver_new_sentinel(const struct node_addr *n, const char *user,
                                       const char *password, int64_t connect_ms, int64_t io_ms,
                                       sentinel_tls_fn ask_tls);

/* Drops the client's reference; a lookup still running keeps its own. */
void resolver_unref(struct resolver *r);

/* The last good addresses (count, 0 if none yet). Using them starts a
 * lookup in the background, if none runs, so that a changed address is
 * known by the next connect. */
int resolver_cached(struct resolver *r, struct resolved *out, unsigned *addr_gen);

/* No address yet: starts a lookup if none runs, and gives a descriptor that
 * reports POLLHUP when it ends (*rfd) and the lookup's number (*gen).
 * RLC_OK, or RLC_E_NOMEM. */
int resolver_wait(struct resolver *r, int *rfd, unsigned *gen);

/* For a descriptor from resolver_wait: false while its lookup runs; then
 * true, with the addresses (*n, 0 if the name did not resolve: why says
 * why) and their generation. */
bool resolver_done(struct resolver *r, unsigned gen, struct resolved *out, int *n,
                   unsigned *addr_gen, char *why, size_t why_len);

/* The generation of the current address: it changes whenever a sentinel
 * node's master moves. */
unsigned resolver_addr_gen(struct resolver *r);

/* Sentinel nodes only (a no-op for others): forgets the master's address,
 * so the next connect waits for the sentinels' answer. */
void resolver_invalidate(struct resolver *r);

/* Sentinel nodes only: asks the sentinels again, keeping the address until
 * they answer (a +switch-master may have been missed). */
void resolver_refresh(struct resolver *r);

/* Sentinel nodes only: a sentinel announced that the master is now at
 * ip:port. A numeric address is taken at once; a name is looked up. */
void resolver_switch(struct resolver *r, const char *ip, const char *port);

/* Gives up waiting on rfd (closes it). */
void resolver_forget(struct resolver *r, int rfd);

#endif
