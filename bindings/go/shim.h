/*
 * shim.h - C helpers of the Go package (not part of libredlockc).
 *
 * A goroutine may move to another OS thread between two cgo calls, and
 * rlc_errmsg() belongs to the OS thread. So each helper makes the library
 * call and copies rlc_errmsg() in the same cgo call, on the same thread.
 *
 * The engine helpers (rlcgo_engine_*) fold a few engine calls into one cgo
 * call where the driver makes them together (a scan of every connection, a
 * take of pending bytes); each returns at once: none does I/O or waits.
 */
#ifndef RLCGO_SHIM_H
#define RLCGO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <redlockc.h>

struct rlcgo_result {
    int64_t value; /* a query's answer, an operation's id */
    int rc;
    char msg[244]; /* rlc_errmsg() when rc < 0, else "" */
};

/* The blocking client: the lock family, ForceRelease and FencedSet. */
struct rlcgo_result rlcgo_client_new(const char *nodes, const char *options, rlc_client **out);

/* rlc_lock_force_release through a handle made for the call. */
struct rlcgo_result rlcgo_force_release(rlc_client *c, const char *name, size_t len);

/* value: rlc_fenced_set's answer, 1 written, 0 refused. */
struct rlcgo_result rlcgo_fenced_set(rlc_client *c, const char *key, const void *value,
                                     size_t len, uint64_t token);

/* ---- the engine ---------------------------------------------------------- */

enum { RLCGO_OP_ACQUIRE = 1, RLCGO_OP_RELEASE, RLCGO_OP_EXTEND, RLCGO_OP_QUERY };

struct rlcgo_result rlcgo_engine_new(const char *nodes, const char *uuid, const char *options,
                                     rlc_engine **out);

/* Starts an operation; value is its id. ACQUIRE: a wait_ms, b lease_ms;
 * EXTEND: a lease_ms; QUERY: a what (RLC_Q_*). */
struct rlcgo_result rlcgo_engine_start(rlc_engine *e, int kind, const char *name, size_t len,
                                       uint64_t owner, int64_t a, int64_t b, int64_t now_ms);

/* want[k] = rlc_engine_want_open(e, k), pending[k] = the bytes waiting on
 * k, for k < n. */
void rlcgo_engine_scan(rlc_engine *e, int n, int *want, size_t *pending);

/* Copies up to cap pending bytes of conn into buf and marks them sent. */
size_t rlcgo_engine_take(rlc_engine *e, int conn, char *buf, size_t cap);

/* rlc_engine_conn_address with the host copied into host (NUL-terminated,
 * cut to fit cap). */
int rlcgo_engine_conn_address(const rlc_engine *e, int conn, char *host, size_t cap, int *port,
                              int *tls);

#endif
