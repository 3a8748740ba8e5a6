/*
 * netfault.h - real network faults for the fault suite, on real TCP.
 *
 * Two tools, both bounded in time and removed by whoever made them:
 *
 * 1. A network namespace made by the test, with nftables rules inside it
 *    (/work/shared/FAULTS.md has the recipe this follows). A table "inet rlc"
 *    with an input chain and two sets of client ports:
 *        tcp sport @drop  drop                     (held: TCP retransmits later)
 *        tcp sport @reset reject with tcp reset    (cut)
 *    so one connection is singled out by its client port. Dropping a port
 *    and accepting it again makes TCP deliver the held bytes late, exactly
 *    as a real network does. The test runs its servers and clients inside
 *    the namespace (netns_enter: setns() for the calling thread; processes
 *    and threads it starts afterwards inherit it). Every namespace made is
 *    also deleted at exit and on SIGINT/SIGTERM/SIGHUP (the creating process
 *    only); run.sh deletes any left by a SIGKILLed run (prefix
 *    $RLC_NETNS_PREFIX).
 *
 * 2. A per-connection stall/cut proxy (proxy.c): a forked process with a
 *    listening port in front of one redis-server, controlled over a pipe.
 *    Connections are numbered in accept order from 0.
 *
 * All functions return 0 on success and -1 on failure (with a message on
 * stderr), unless said otherwise.
 */
#ifndef RLC_NETFAULT_H
#define RLC_NETFAULT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- network namespaces + nftables ----------------------------------------- */

/* Creates a namespace "<prefix><n>" (prefix: $RLC_NETNS_PREFIX, else
 * "rlcf<pid>_"), brings its loopback up and installs the table, chain and
 * sets above. name receives the name (at least 32 bytes). */
int netns_create(char *name, size_t size);
/* Deletes it (its rules go with it). Accepts a name already deleted. */
void netns_destroy(const char *name);
/* Moves the calling thread into the namespace; *old (if not NULL) receives
 * an fd of the previous one for netns_leave. */
int netns_enter(const char *name, int *old);
int netns_leave(int old);
/* Gives the calling process a private mount namespace in which
 * /etc/resolv.conf reads `content` (what `ip netns exec` does with
 * /etc/netns/<name>/resolv.conf). Only for a child process of the test. */
int netns_private_resolv(const char *content);

/* Runs `nft <args>` inside the namespace (args: one string, split on spaces
 * by the shell-free runner). */
int nft_run(const char *ns, const char *args);
/* Holds every packet from client port `sport` (to any server). */
int nft_drop_port(const char *ns, int sport);
/* Cuts client port `sport`: its next packet gets a TCP reset. */
int nft_reset_port(const char *ns, int sport);
/* Lets `sport` through again (drop and reset). */
int nft_accept_port(const char *ns, int sport);
/* Holds every packet to server port `dport` (a whole node silent). */
int nft_drop_dport(const char *ns, int dport);
/* Removes every drop and reset. */
int nft_accept(const char *ns);
/* Packets the drop / reset rules matched so far, or -1. */
long long nft_count(const char *ns, const char *which);

/* ---- the stall/cut proxy -------------------------------------------------- */

struct nf_proxy {
    pid_t pid;
    int port;        /* where clients connect: 127.0.0.1:port */
    int target_port;
    int ctl_w, ctl_r;
};

/* Forks a proxy listening on a free port of 127.0.0.1 (of the calling
 * thread's namespace), forwarding to 127.0.0.1:target_port; it exits after
 * lifetime_ms at the latest, or when this process dies. */
int proxy_start(struct nf_proxy *p, int target_port, int64_t lifetime_ms);
/* Tells it to quit, waits (bounded), then SIGKILL. Accepts a stopped one. */
void proxy_stop(struct nf_proxy *p);
/* Sends one control line, reads the reply line into reply; 0 if it began
 * with "ok". */
int proxy_cmd(struct nf_proxy *p, char *reply, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* conn: a connection number, or -1 for all (stall -1 also holds new ones). */
int proxy_stall(struct nf_proxy *p, int conn);
int proxy_release(struct nf_proxy *p, int conn);
int proxy_cut(struct nf_proxy *p, int conn);
/* Forwards conn's next request, then drops the reply and cuts conn. */
int proxy_cut_on_reply(struct nf_proxy *p, int conn);
/* Connections accepted so far and still open, or -1. */
int proxy_accepted(struct nf_proxy *p);
int proxy_open(struct nf_proxy *p);
/* Connection conn: its client port (or -1), whether it is open, held bytes. */
int proxy_conn_info(struct nf_proxy *p, int conn, int *port, int *open, long *held);

/* The proxy's loop (proxy.c): serves until the control channel closes, a
 * "quit", or lifetime_ms; used by proxy_start and the fault_proxy program. */
int proxy_serve(int lfd, int target_port, int ctl_in, int ctl_out, int64_t lifetime_ms);
/* A listening socket on 127.0.0.1:port (0: a free one); *bound gets it. */
int nf_listen(int port, int *bound);

#endif
