/* shim.c - see shim.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static struct rlcgo_result result(int rc, int64_t value)
{
    struct rlcgo_result r = {.value = value, .rc = rc};
    if (rc < 0)
        snprintf(r.msg, sizeof r.msg, "%s", rlc_errmsg());
    return r;
}

struct rlcgo_result rlcgo_client_new(const char *nodes, const char *options, rlc_client **out)
{
    int rc = rlc_client_new(out, nodes, options);
    return result(rc, 0);
}

struct rlcgo_result rlcgo_force_release(rlc_client *c, const char *name, size_t len)
{
    char *copy = strndup(name, len);
    rlc_lock *l = NULL;
    if (!copy)
        return result(RLC_E_NOMEM, 0);
    int rc = rlc_lock_new(c, copy, 0, &l);
    free(copy);
    if (rc == RLC_OK)
        rc = rlc_lock_force_release(l);
    struct rlcgo_result r = result(rc, 0);
    rlc_lock_free(l);
    return r;
}

/* rlc_fenced_set (REDLOCKC_1.1); value: len bytes (Go memory, only for the
 * length of this call). */
struct rlcgo_result rlcgo_fenced_set(rlc_client *c, const char *key, const void *value,
                                     size_t len, uint64_t token)
{
    int applied = 0;
    int rc = rlc_fenced_set(c, key, value, len, token, &applied);
    return result(rc, applied);
}

struct rlcgo_result rlcgo_engine_new(const char *nodes, const char *uuid, const char *options,
                                     rlc_engine **out)
{
    int rc = rlc_engine_new(out, nodes, uuid, options);
    return result(rc, 0);
}

struct rlcgo_result rlcgo_engine_start(rlc_engine *e, int kind, const char *name, size_t len,
                                       uint64_t owner, int64_t a, int64_t b, int64_t now_ms)
{
    uint64_t op = 0;
    int rc;
    switch (kind) {
    case RLCGO_OP_ACQUIRE: rc = rlc_engine_acquire(e, name, len, owner, a, b, now_ms, &op); break;
    case RLCGO_OP_RELEASE: rc = rlc_engine_release(e, name, len, owner, now_ms, &op); break;
    case RLCGO_OP_EXTEND: rc = rlc_engine_extend(e, name, len, owner, a, now_ms, &op); break;
    case RLCGO_OP_QUERY: rc = rlc_engine_query(e, name, len, owner, (int)a, now_ms, &op); break;
    default: {
        struct rlcgo_result r = {.rc = RLC_E_INVAL};
        snprintf(r.msg, sizeof r.msg, "unknown operation %d", kind);
        return r;
    }
    }
    return result(rc, (int64_t)op);
}

void rlcgo_engine_scan(rlc_engine *e, int n, int *want, size_t *pending)
{
    for (int k = 0; k < n; k++) {
        const char *data;
        want[k] = rlc_engine_want_open(e, k);
        pending[k] = rlc_engine_pending(e, k, &data);
    }
}

size_t rlcgo_engine_take(rlc_engine *e, int conn, char *buf, size_t cap)
{
    const char *data;
    size_t n = rlc_engine_pending(e, conn, &data);
    if (n > cap)
        n = cap;
    if (n > 0) {
        memcpy(buf, data, n);
        rlc_engine_sent(e, conn, n);
    }
    return n;
}

int rlcgo_engine_conn_address(const rlc_engine *e, int conn, char *host, size_t cap, int *port,
                              int *tls)
{
    const char *h = NULL;
    int rc = rlc_engine_conn_address(e, conn, &h, port, tls);
    snprintf(host, cap, "%s", rc == RLC_OK && h ? h : "");
    return rc;
}
