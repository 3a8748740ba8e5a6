/*
 * rlcnode_engine.c - included by rlcnode.c: thin wrappers that let
 * lib/engine_driver.js drive an rlc_engine (redlockc.h, "Engine (1.1)") from
 * the JS thread. No thread, no lock, no I/O here: every function is called
 * on the JS thread, one engine per Client.
 *
 * They exist only where koffi would otherwise need out-pointers or C
 * structs: bytes go out through a JS Buffer (rlcn_engine_take copies what
 * the engine wants written and marks it sent, because the socket keeps its
 * own copy), events come back packed in a Buffer (layout below), and the
 * failure detail of a call is copied into a record on the calling thread.
 */

/* An event in the Buffer given to rlcn_engine_event (little-endian, as
 * lib/engine_driver.js reads it):
 *   0 int32 type      4 int32 status    8 uint64 op       16 uint64 owner
 *  24 uint64 token   32 int64 validity  40 int64 count    48 uint32 name_len
 *  52 uint32 msg_len 56 int32 kind (the lock kind, RLC_KIND_*)  60 int32 0
 *  64 the message bytes (truncated to fit), no NUL
 * The name is not copied: the driver knows an owner's lock by its owner id
 * and kind. */
enum { EV_HEAD = 64 };

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

API rlc_engine *rlcn_engine_new(const char *nodes, const char *uuid, const char *options,
                                struct rlcn_record *res)
{
    rlc_engine *e = NULL;
    res->rc = rlc_engine_new(&e, nodes, uuid, options);
    set_msg(res, res->rc);
    return res->rc == RLC_OK ? e : NULL;
}

/* Node i's host (into res->msg) and port (res->value); the status. */
API int rlcn_engine_node_address(rlc_engine *e, int node, struct rlcn_record *res)
{
    const char *host = NULL;
    int port = 0;
    res->rc = rlc_engine_node_address(e, node, &host, &port);
    res->value = port;
    if (res->rc == RLC_OK)
        snprintf(res->msg, sizeof res->msg, "%s", host);
    else
        set_msg(res, res->rc);
    return res->rc;
}

/* Where connection conn goes now: host into res->msg, port into res->value;
 * returns 1 for TLS, 0 for plain, -1 when it has no address yet (a sentinel
 * node's master is not known) or there is no such conn (res->rc says). */
API int rlcn_engine_conn_address(rlc_engine *e, int conn, struct rlcn_record *res)
{
    const char *host = NULL;
    int port = 0, tls = 0;
    res->rc = rlc_engine_conn_address(e, conn, &host, &port, &tls);
    res->value = port;
    if (res->rc != RLC_OK) {
        set_msg(res, res->rc);
        return -1;
    }
    snprintf(res->msg, sizeof res->msg, "%s", host);
    return tls;
}

/* Copies up to cap of the bytes waiting for conn into buf and tells the
 * engine they went out; returns how many. */
API size_t rlcn_engine_take(rlc_engine *e, int conn, unsigned char *buf, size_t cap)
{
    const char *data = NULL;
    size_t n = rlc_engine_pending(e, conn, &data);
    if (n > cap)
        n = cap;
    if (n == 0)
        return 0;
    memcpy(buf, data, n);
    rlc_engine_sent(e, conn, n);
    return n;
}

/* The kinds of rlcn_engine_start (KIND in lib/engine_driver.js). A query's
 * kind is KIND_QUERY + its RLC_Q_* (its DONE event's count is the answer). */
enum { KIND_ACQUIRE, KIND_RELEASE, KIND_EXTEND, KIND_FORCE_RELEASE, KIND_QUERY };

/* The operation's id, or 0 with the status and rlc_errmsg() in res (the
 * engine refused it at once). lock_kind (RLC_KIND_*) is the kind of lock an
 * acquire or release is of (a fair lock's acquire is rlcn_engine_start_fair:
 * it has a thread wait); the other operations are RLC_KIND_LOCK's only. */
API uint64_t rlcn_engine_start(rlc_engine *e, int kind, int lock_kind, const char *name,
                               size_t name_len, uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                               int64_t now_ms, struct rlcn_record *res)
{
    uint64_t op = 0;
    if (lock_kind != RLC_KIND_LOCK && kind != KIND_ACQUIRE && kind != KIND_RELEASE) {
        res->rc = RLC_E_INVAL;
        snprintf(res->msg, sizeof res->msg, "engine operation %d is for locks only (kind %d)",
                 kind, lock_kind);
        return 0;
    }
    switch (kind) {
    case KIND_ACQUIRE:
        res->rc = rlc_engine_acquire_kind(e, lock_kind, name, name_len, owner, wait_ms, lease_ms,
                                          now_ms, &op);
        break;
    case KIND_RELEASE:
        res->rc = rlc_engine_release_kind(e, lock_kind, name, name_len, owner, now_ms, &op);
        break;
    case KIND_EXTEND: res->rc = rlc_engine_extend(e, name, name_len, owner, lease_ms, now_ms, &op); break;
    case KIND_FORCE_RELEASE: res->rc = rlc_engine_force_release(e, name, name_len, owner, now_ms, &op); break;
    case KIND_QUERY + RLC_Q_LOCKED:
    case KIND_QUERY + RLC_Q_HELD:
    case KIND_QUERY + RLC_Q_COUNT:
    case KIND_QUERY + RLC_Q_TTL:
    case KIND_QUERY + RLC_Q_MODE:
        res->rc = rlc_engine_query(e, name, name_len, owner, kind - KIND_QUERY, now_ms, &op);
        break;
    default:
        res->rc = RLC_E_INVAL;
        snprintf(res->msg, sizeof res->msg, "unknown engine operation %d", kind);
        return 0;
    }
    set_msg(res, res->rc);
    return res->rc == RLC_OK ? op : 0;
}

/* A fair lock's acquire (rlc_engine_acquire_fair): thread_wait_ms is how
 * long a queued waiter that stopped trying keeps its place (> 0). Released,
 * counted and forgotten through the kind calls with RLC_KIND_FAIR. The
 * operation's id, or 0 with the status and rlc_errmsg() in res. */
API uint64_t rlcn_engine_start_fair(rlc_engine *e, const char *name, size_t name_len,
                                    uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                                    int64_t thread_wait_ms, int64_t now_ms,
                                    struct rlcn_record *res)
{
    uint64_t op = 0;
    res->rc = rlc_engine_acquire_fair(e, name, name_len, owner, wait_ms, lease_ms, thread_wait_ms,
                                      now_ms, &op);
    set_msg(res, res->rc);
    return res->rc == RLC_OK ? op : 0;
}

/* A fenced write (rlc_engine_fenced_set): value is value_len bytes, any
 * bytes (the engine copies both into its command at once). The operation's
 * id, or 0 with the status and rlc_errmsg() in res. */
API uint64_t rlcn_engine_start_fenced(rlc_engine *e, const char *key, size_t key_len,
                                      const char *value, size_t value_len, uint64_t token,
                                      int64_t now_ms, struct rlcn_record *res)
{
    uint64_t op = 0;
    res->rc = rlc_engine_fenced_set(e, key, key_len, value, value_len, token, now_ms, &op);
    set_msg(res, res->rc);
    return res->rc == RLC_OK ? op : 0;
}

/* A multi-lock (rlc_engine_acquire_multi): names is n names, each ended by
 * a NUL (a lock name holds none). The operation's id, or 0 with the status
 * and rlc_errmsg() in res. */
API uint64_t rlcn_engine_start_multi(rlc_engine *e, const char *names, int n, uint64_t owner,
                                     int64_t wait_ms, int64_t lease_ms, int64_t now_ms,
                                     struct rlcn_record *res)
{
    uint64_t op = 0;
    const char **v = n > 0 ? calloc((size_t)n, sizeof *v) : NULL;
    size_t *lens = n > 0 ? calloc((size_t)n, sizeof *lens) : NULL;
    if (n > 0 && (!v || !lens)) {
        res->rc = RLC_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        v[i] = names;
        lens[i] = strlen(names);
        names += lens[i] + 1;
    }
    res->rc = rlc_engine_acquire_multi(e, v, lens, n, owner, wait_ms, lease_ms, now_ms, &op);
    set_msg(res, res->rc);
done:
    free(v);
    free(lens);
    return res->rc == RLC_OK ? op : 0;
}

/* What rlcn_engine_start_permits starts (PERMITS in lib/engine_driver.js). */
enum { PERMITS_ACQUIRE, PERMITS_RELEASE, PERMITS_SET, PERMITS_AVAILABLE };

/* A semaphore's operation (kind RLC_KIND_SEMAPHORE or RLC_KIND_PSEMAPHORE):
 * PERMITS_ACQUIRE takes permits for owner, waiting wait_ms, an expirable
 * one with a lease of lease_ms (rlc_engine_acquire_permits);
 * PERMITS_RELEASE gives permits back, an expirable semaphore's those named
 * by id (rlc_engine_release_permits); PERMITS_SET sets the count to permits
 * if it has none; PERMITS_AVAILABLE counts the free ones. Arguments an
 * operation does not take are ignored. The operation's id, or 0 with the
 * status and rlc_errmsg() in res. */
API uint64_t rlcn_engine_start_permits(rlc_engine *e, int what, int kind, const char *name,
                                       size_t name_len, uint64_t owner, int64_t permits,
                                       const char *id, int64_t wait_ms, int64_t lease_ms,
                                       int64_t now_ms, struct rlcn_record *res)
{
    uint64_t op = 0;
    switch (what) {
    case PERMITS_ACQUIRE:
        res->rc = rlc_engine_acquire_permits(e, kind, name, name_len, owner, permits, wait_ms,
                                             lease_ms, now_ms, &op);
        break;
    case PERMITS_RELEASE:
        res->rc = rlc_engine_release_permits(e, kind, name, name_len, permits, id, now_ms, &op);
        break;
    case PERMITS_SET:
        res->rc = rlc_engine_set_permits(e, kind, name, name_len, permits, now_ms, &op);
        break;
    case PERMITS_AVAILABLE:
        res->rc = rlc_engine_available_permits(e, kind, name, name_len, now_ms, &op);
        break;
    default:
        res->rc = RLC_E_INVAL;
        snprintf(res->msg, sizeof res->msg, "unknown semaphore operation %d", what);
        return 0;
    }
    set_msg(res, res->rc);
    return res->rc == RLC_OK ? op : 0;
}

/* An expirable grant's permit id (rlc_engine_permit_id: from its DONE
 * event's token and count) into res->msg; the status. */
API int rlcn_engine_permit_id(rlc_engine *e, uint64_t token, int64_t permits,
                              struct rlcn_record *res)
{
    char id[RLC_PERMIT_ID_LEN + 1] = "";
    res->rc = rlc_engine_permit_id(e, token, permits, id, sizeof id);
    if (res->rc == RLC_OK)
        snprintf(res->msg, sizeof res->msg, "%s", id);
    else
        set_msg(res, res->rc);
    return res->rc;
}

/* 1 and the next event packed into buf (cap >= EV_HEAD), or 0. */
API int rlcn_engine_event(rlc_engine *e, unsigned char *buf, size_t cap)
{
    rlc_engine_event ev;
    if (cap < EV_HEAD || !rlc_engine_next_event(e, &ev))
        return 0;
    size_t msg_len = ev.message ? strlen(ev.message) : 0;
    if (msg_len > cap - EV_HEAD)
        msg_len = cap - EV_HEAD;
    put_u32(buf, (uint32_t)ev.type);
    put_u32(buf + 4, (uint32_t)ev.status);
    put_u64(buf + 8, ev.op);
    put_u64(buf + 16, ev.owner);
    put_u64(buf + 24, ev.token);
    put_u64(buf + 32, (uint64_t)ev.validity_ms);
    put_u64(buf + 40, (uint64_t)ev.count);
    put_u32(buf + 48, (uint32_t)ev.name_len);
    put_u32(buf + 52, (uint32_t)msg_len);
    put_u32(buf + 56, (uint32_t)ev.kind);
    put_u32(buf + 60, 0);
    if (msg_len)
        memcpy(buf + EV_HEAD, ev.message, msg_len);
    return 1;
}
