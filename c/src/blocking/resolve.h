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
 * Every change of address bumps the resolver's address generation: a
 * connection made to an older one is closed before its next use.
 */
#ifndef RLC_RESOLVE_H
#define RLC_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RLC_RESOLVED_MAX 4

struct resolver;

struct resolved {
    struct sockaddr_storage sa;
    socklen_t len;
    int family;
};

/* One host's resolver; NULL without memory. A
 * numeric address is resolved here, once, and never looked up again. */
struct resolver *resolver_new(const char *host, int port);

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

/* Gives up waiting on rfd (closes it). */
void resolver_forget(struct resolver *r, int rfd);

#endif
