/*
 * redis_server.h - real redis-server processes for tests and benchmarks.
 *
 * Each server listens on 127.0.0.1 at a free port (and a unix socket), keeps
 * nothing on disk, and dies with the test process (PR_SET_PDEATHSIG) even if
 * the test crashes. Servers are stopped by pid; waits are bounded.
 */
#ifndef RLC_TEST_REDIS_SERVER_H
#define RLC_TEST_REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

struct redis_server {
    pid_t pid;
    int port;
    char dir[128];     /* its working directory (socket, log) */
    char socket[160];  /* its unix socket */
    char uri[64];      /* redis://127.0.0.1:<port> */
    const char *extra[16];
    char conf[192];    /* a sentinel's config file ("" for a plain server) */
};

/* Starts a server on a free port; extra: NULL-terminated redis-server args
 * (e.g. "--requirepass", "pw", NULL) or NULL. 0 on success. */
/* A loopback port nothing listens on right now (bound, read, closed), or -1. */
int rs_free_port(void);

int rs_start(struct redis_server *s, const char *const *extra);

/* Starts a sentinel (redis-server <conf> --sentinel) on a free port, its
 * config file written from conf_text into its own directory (sentinels
 * rewrite it). 0 on success. */
int rs_start_sentinel(struct redis_server *s, const char *conf_text);

/* Starts it again on the same port (after rs_kill). 0 on success. */
int rs_restart(struct redis_server *s);

/* SIGTERM, bounded wait, then SIGKILL. */
void rs_stop(struct redis_server *s);

/* SIGKILL and reap: the node is gone at once. */
void rs_kill(struct redis_server *s);

/* SIGSTOP / SIGCONT: the node is there but silent. */
void rs_pause(struct redis_server *s);
void rs_resume(struct redis_server *s);

/* A plain hiredis connection to the server, for raw commands. */
redisContext *rs_connect(const struct redis_server *s);

/* Runs a raw command and returns its reply (the caller frees it), or NULL. */
redisReply *rs_cmd(const struct redis_server *s, const char *fmt, ...);

/* Integer result of a raw command, or LLONG_MIN. */
long long rs_int(const struct redis_server *s, const char *fmt, ...);

/* The integer field of INFO section ("stats", "tracking_total_keys"), or -1;
 * a field inside a line is named with its line ("commandstats",
 * "cmdstat_eval:calls"). */
long long rs_info_int(const struct redis_server *s, const char *section, const char *field);

#endif
