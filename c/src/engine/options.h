/*
 * options.h - the client's option string -> a config struct. No I/O.
 */
#ifndef RLC_OPTIONS_H
#define RLC_OPTIONS_H

#include <stdint.h>

enum { RLC_FORMAT_REDISSON = 0, RLC_FORMAT_CLASSIC = 1 };

struct rlc_options {
    int64_t watchdog_timeout_ms;
    int64_t io_timeout_ms;
    int64_t node_timeout_ms;
    int64_t connect_timeout_ms;
    int64_t retry_jitter_ms;
    double drift_factor;
    int64_t pool_size;
    char *key_prefix; /* never NULL after options_parse */
    int64_t restart_guard; /* 1 on, 0 off, -1 (default) on for N >= 3 */
    int64_t loss_push;     /* 1 (default): CLIENT TRACKING pushes loss (tracking.c) */
    /* 1: each new hold takes a fencing token from the counter
     * redisson_lock_token:{name}, a key that outlives the lock (it must, for
     * tokens to keep growing); 0 (default): no token, no key left behind. */
    int64_t fencing;
    /* How a lock is kept on the server: RLC_FORMAT_REDISSON (default),
     * Redisson's RLock hash; RLC_FORMAT_CLASSIC, the string other clients
     * use (redis-py's Lock, node-redlock, redsync): SET NX PX of a random
     * value, compare-and-delete, compare-and-PEXPIRE (scripts_classic.c). */
    int64_t format;
    /* Replica-synced writes: an acquire counts on a node only once WAIT says
     * sync_replicas replicas have it, within sync_timeout_ms (0: off). */
    int64_t sync_replicas;
    int64_t sync_timeout_ms;
    /* TLS to rediss:// nodes: done by the driver (the engine sees plain
     * RESP), which reads these through rlc_engine_option(). NULL: not given. */
    char *tls_ca_file;
    char *tls_ca_dir;
    char *tls_cert_file;
    char *tls_key_file;    /* default: the key is in tls_cert_file */
    char *tls_server_name; /* default: the URI's host */
    int64_t tls_verify;    /* 1 (default): verify the server's certificate and name */
    /* redis-sentinel:// nodes: AUTH to the sentinels themselves (the URI's
     * credentials are the data nodes'). NULL: not given. */
    char *sentinel_user;
    char *sentinel_password;
    char *given[32];       /* per option (table order): its value as written, or NULL */
};

/* Fills *o with the defaults, then applies "name=value;..." (NULL or "" for
 * none). On failure returns RLC_E_INVAL or RLC_E_NOMEM with the thread's
 * message naming the option; *o then needs no options_free. */
int options_parse(const char *s, struct rlc_options *o);

void options_free(struct rlc_options *o);

/* The value of option name as it was written (numbers trimmed), or NULL
 * when it was not given or there is no such option. */
const char *options_given(const struct rlc_options *o, const char *name);

/* 1 when a tls_* option was given. */
int options_any_tls(const struct rlc_options *o);

#endif
