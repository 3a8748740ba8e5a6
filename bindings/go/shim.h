/*
 * shim.h - C helpers of the Go package (not part of libredlockc).
 *
 * A goroutine may move to another OS thread between two cgo calls, and
 * rlc_errmsg() belongs to the OS thread. So each helper makes the library
 * call and copies rlc_errmsg() in the same cgo call, on the same thread.
 */
#ifndef RLCGO_SHIM_H
#define RLCGO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <redlockc.h>

struct rlcgo_result {
    int64_t value; /* a query's answer */
    int rc;
    char msg[244]; /* rlc_errmsg() when rc < 0, else "" */
};

enum {
    RLCGO_ACQUIRE = 1, RLCGO_RELEASE, RLCGO_EXTEND, RLCGO_FORCE_RELEASE,
    RLCGO_IS_LOCKED, RLCGO_IS_HELD, RLCGO_HOLD_COUNT, RLCGO_VALIDITY, RLCGO_FENCING_TOKEN,
    RLCGO_CANCEL
};

struct rlcgo_result rlcgo_client_new(const char *nodes, const char *options, rlc_client **out);

/* rlc_lock_new, then on_lost -> the Go function rlcgoLost(id, reason). id is
 * a number, not a Go pointer (cgo forbids C keeping Go pointers). */
struct rlcgo_result rlcgo_lock_new(rlc_client *c, const char *name, uint64_t owner,
                                   uintptr_t id, rlc_lock **out);

struct rlcgo_result rlcgo_call(int op, rlc_lock *l, int64_t a, int64_t b);

/* value: rlc_fenced_set's answer, 1 written, 0 refused. */
struct rlcgo_result rlcgo_fenced_set(rlc_client *c, const char *key, const void *value,
                                     size_t len, uint64_t token);

#endif
