/*
 * engine.c - the engine's public entry points (redlockc.h, "Engine"), the
 * life of an operation, and the events the driver reads.
 *
 * Every entry point takes the driver's time first (time never goes back:
 * an older now_ms is taken as the latest one seen), then does its work,
 * which may queue bytes, set timers and queue events. Nothing blocks.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"
#include "error.h"
#include "keys.h"
#include "quorum.h"
#include "scripts.h"

#define MAX_NAME_LEN 65536
#define MAX_LEASE_MS (366LL * 24 * 3600 * 1000)
#define TICK_LIMIT 1000000 /* timers handled in one tick: a bound, never reached */


void eng_advance(rlc_engine *e, int64_t now)
{
    if (now > e->now)
        e->now = now;
}

/* A lock kind the engine runs (redlockc.h, RLC_KIND_*). */
static int check_kind(int kind)
{
    if (kind >= RLC_KIND_LOCK && kind <= RLC_KIND_PSEMAPHORE)
        return RLC_OK;
    return rlc_fail(RLC_E_INVAL, "lock kind %d is not one the engine runs (RLC_KIND_LOCK, "
                    "RLC_KIND_READ, RLC_KIND_WRITE, RLC_KIND_FAIR, RLC_KIND_SEMAPHORE, "
                    "RLC_KIND_PSEMAPHORE)", kind);
}

/* A kind that holds (every kind but the semaphores, whose calls are
 * their own: rlc_engine_*_permits). */
static int check_hold_kind(int kind)
{
    if (check_kind(kind) != RLC_OK)
        return RLC_E_INVAL;
    if (kind_permits(kind))
        return rlc_fail(RLC_E_INVAL, "a semaphore holds no lock: its permits are taken and "
                                     "given back with rlc_engine_acquire_permits and "
                                     "rlc_engine_release_permits");
    return RLC_OK;
}

int eng_new_op(rlc_engine *e, int kind, int lock_kind, const char *name, size_t len,
               uint64_t owner, uint64_t *id)
{
    if (!e)
        return rlc_fail(RLC_E_INVAL, "engine is NULL");
    if (!id)
        return rlc_fail(RLC_E_INVAL, "op pointer is NULL");
    if (!name || len == 0)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    if (len > MAX_NAME_LEN)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", MAX_NAME_LEN);
    if (owner == 0)
        return rlc_fail(RLC_E_INVAL, "owner id 0 is not an owner: use 1 to 2^64-1");
    if (check_kind(lock_kind) != RLC_OK)
        return RLC_E_INVAL;
    if (lock_kind != RLC_KIND_LOCK && e->opts.format == RLC_FORMAT_CLASSIC)
        return rlc_fail(RLC_E_INVAL, "the lock family keeps Redisson's layouts only; this "
                                     "engine has format=classic");
    if (kind_permits(lock_kind) && e->n > 1)
        return rlc_fail(RLC_E_INVAL,
                        "a semaphore over %d masters is refused: a count of permits cannot be "
                        "voted on by a quorum, so more than N permits could be out at once "
                        "(use one node)", e->n);
    if (lock_kind == RLC_KIND_FAIR && e->n > 1)
        return rlc_fail(RLC_E_INVAL,
                        "a fair lock over %d nodes is refused: each node keeps its own queue, "
                        "so no order is shared by a quorum and the FIFO promise cannot hold "
                        "(use one node, or rlc_lock for Redlock)", e->n);
    struct eng_lock *l = lock_get(e, name, len, lock_kind, owner);
    struct hold *h = l ? hold_get(e, l, owner, true) : NULL;
    struct eng_op *op = h ? op_alloc(e) : NULL;
    if (!op) {
        if (h)
            hold_maybe_free(e, h);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    op->id = ++e->next_op;
    op->kind = kind;
    op->cls = kind == OP_ACQUIRE   ? &op_acquire_class
              : kind == OP_RELEASE ? &op_release_class
              : kind == OP_QUERY   ? &op_query_class
                                   : &op_extend_class;
    op->hold = h;
    op->timer.at = -1;
    op->idnext = e->ops_by_id[op_id_slot(op->id)];
    e->ops_by_id[op_id_slot(op->id)] = op;
    e->n_ops++;
    round_clear(op);
    *id = op->id;
    return RLC_OK;
}

/* Queues the op behind its hold's others; starts it if it is first. */
static void eng_enqueue(rlc_engine *e, struct eng_op *op)
{
    struct hold *h = op->hold;
    if (h->ops_tail)
        h->ops_tail->next = op;
    else
        h->ops_head = op;
    h->ops_tail = op;
    if (h->ops_head == op)
        op_start(e, op, e->now);
}

struct eng_op *eng_find_op(const rlc_engine *e, uint64_t id)
{
    for (struct eng_op *op = e->ops_by_id[op_id_slot(id)]; op; op = op->idnext)
        if (op->id == id)
            return op;
    return NULL;
}

static int eng_check_lease(const rlc_engine *e, int64_t lease_ms)
{
    if (lease_ms <= 0)
        return RLC_OK;
    if (lease_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "lease of %lld ms is longer than 366 days",
                        (long long)lease_ms);
    if (lease_ms <= quorum_drift_ms(lease_ms, e->opts.drift_factor) + 1)
        return rlc_fail(RLC_E_INVAL,
                        "lease of %lld ms is shorter than the clock drift allowance (%lld ms) "
                        "plus a round trip (1 ms)",
                        (long long)lease_ms,
                        (long long)quorum_drift_ms(lease_ms, e->opts.drift_factor));
    return RLC_OK;
}

int rlc_engine_acquire(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                       int64_t wait_ms, int64_t lease_ms, int64_t now_ms, uint64_t *op_id)
{
    return rlc_engine_acquire_kind(e, RLC_KIND_LOCK, name, name_len, owner, wait_ms, lease_ms,
                                   now_ms, op_id);
}


int rlc_engine_acquire_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                            uint64_t owner, int64_t wait_ms, int64_t lease_ms, int64_t now_ms,
                            uint64_t *op_id)
{
    if (kind == RLC_KIND_FAIR)
        return rlc_fail(RLC_E_INVAL, "a fair lock is acquired with rlc_engine_acquire_fair");
    if (check_hold_kind(kind) != RLC_OK)
        return RLC_E_INVAL;
    return eng_acquire(e, kind, name, name_len, owner, wait_ms, lease_ms, 0, 0, now_ms, op_id);
}

int rlc_engine_acquire_fair(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                            int64_t wait_ms, int64_t lease_ms, int64_t thread_wait_ms,
                            int64_t now_ms, uint64_t *op_id)
{
    if (thread_wait_ms <= 0 || thread_wait_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "thread wait of %lld ms is not 1 ms to 366 days",
                        (long long)thread_wait_ms);
    return eng_acquire(e, RLC_KIND_FAIR, name, name_len, owner, wait_ms, lease_ms,
                       thread_wait_ms, 0, now_ms, op_id);
}

int eng_acquire(rlc_engine *e, int kind, const char *name, size_t name_len, uint64_t owner,
                int64_t wait_ms, int64_t lease_ms, int64_t thread_wait, int64_t permits,
                int64_t now_ms, uint64_t *op_id)
{
    int rc;
    if (e && (rc = eng_check_lease(e, lease_ms)) != RLC_OK)
        return rc;
    if ((rc = eng_new_op(e, OP_ACQUIRE, kind, name, name_len, owner, op_id)) != RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    op->queued_at = e->now;
    op->wait_ms = wait_ms;
    op->lease_req = lease_ms;
    op->permits = permits;
    if (kind == RLC_KIND_FAIR)
        op->hold->lock->thread_wait = thread_wait;
    eng_enqueue(e, op);
    return RLC_OK;
}

#define MAX_MULTI_NAMES 1024

struct named {
    const char *name;
    size_t len;
};

static int by_name(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    int d = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return d ? d : (x->len > y->len) - (x->len < y->len);
}

/* The names in one global order (key order: one prefix for all), each
 * once; NULL with the thread's message set when one is not a name. */
static struct named *sorted_names(const char *const *names, const size_t *lens, int n, int *m,
                                  int *rc)
{
    struct named *v = malloc(sizeof *v * (size_t)n);
    if (!v) {
        *rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        v[i] = (struct named){names[i], lens[i]};
        if (!names[i] || lens[i] == 0 || lens[i] > MAX_NAME_LEN) {
            free(v);
            *rc = rlc_fail(RLC_E_INVAL, "name %d of the multi-lock is NULL, empty or longer "
                           "than %d bytes", i, MAX_NAME_LEN);
            return NULL;
        }
    }
    qsort(v, (size_t)n, sizeof *v, by_name);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || by_name(&v[k - 1], &v[i]) != 0)
            v[k++] = v[i];
    *m = k;
    return v;
}

/* A cluster runs one script only over keys of one hash slot. */
static int check_one_slot(const rlc_engine *e, struct eng_lock *const *locks, int n)
{
    bool cluster = false;
    for (int i = 0; i < e->n; i++)
        cluster = cluster || is_cluster(e, i);
    for (int i = 1; cluster && i < n; i++)
        if (locks[i]->slot != locks[0]->slot)
            return rlc_fail(RLC_E_INVAL,
                            "names '%s' and '%s' of the multi-lock hash to different "
                            "slots of a cluster: give them one {hash tag}",
                            RLC_SHOWN(locks[0]->name), RLC_SHOWN(locks[i]->name));
    return RLC_OK;
}

int rlc_engine_acquire_multi(rlc_engine *e, const char *const *names, const size_t *name_lens,
                             int n, uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                             int64_t now_ms, uint64_t *op_id)
{
    if (!e || !op_id || !names || !name_lens)
        return rlc_fail(RLC_E_INVAL, "engine, names, name_lens or op pointer is NULL");
    if (n < 1 || n > MAX_MULTI_NAMES)
        return rlc_fail(RLC_E_INVAL, "a multi-lock has 1 to %d names, not %d", MAX_MULTI_NAMES,
                        n);
    if (owner == 0)
        return rlc_fail(RLC_E_INVAL, "owner id 0 is not an owner: use 1 to 2^64-1");
    int rc = eng_check_lease(e, lease_ms);
    if (rc != RLC_OK)
        return rc;
    int m = 0;
    struct named *v = sorted_names(names, name_lens, n, &m, &rc);
    if (!v)
        return rc;
    struct eng_lock **locks = calloc((size_t)m, sizeof *locks);
    if (!locks) {
        free(v);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    rc = RLC_OK;
    for (int i = 0; i < m && rc == RLC_OK; i++)
        if (!(locks[i] = lock_get(e, v[i].name, v[i].len, RLC_KIND_LOCK, 0)))
            rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    free(v);
    if (rc == RLC_OK)
        rc = check_one_slot(e, locks, m);
    struct eng_op *op = NULL;
    if (rc == RLC_OK)
        rc = multi_new(e, locks, m, owner, op_id, &op);
    if (rc != RLC_OK) {
        for (int i = 0; i < m; i++)
            if (locks[i])
                lock_forget_if_idle(e, locks[i]);
        free(locks);
        return rc;
    }
    free(locks);
    eng_advance(e, now_ms);
    op->queued_at = e->now;
    op->wait_ms = wait_ms;
    op->lease_req = lease_ms;
    /* every place in one call: the op heads its queues in the order it
     * took them (M1). The op may end inside the enqueue that places it last
     * (a name whose hold is lost refuses it at once, E5b): nothing of it is
     * read after that call. */
    int members = op->n_members;
    eng_enqueue(e, op);
    for (int i = 1; i < members; i++)
        eng_enqueue(e, op->places[i]);
    return RLC_OK;
}

int rlc_engine_release(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                       int64_t now_ms, uint64_t *op_id)
{
    return rlc_engine_release_kind(e, RLC_KIND_LOCK, name, name_len, owner, now_ms, op_id);
}

int rlc_engine_release_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                            uint64_t owner, int64_t now_ms, uint64_t *op_id)
{
    if (check_hold_kind(kind) != RLC_OK)
        return RLC_E_INVAL;
    int rc = eng_new_op(e, OP_RELEASE, kind, name, name_len, owner, op_id);
    if (rc != RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    eng_enqueue(e, eng_find_op(e, *op_id));
    return RLC_OK;
}

int rlc_engine_extend(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                      int64_t lease_ms, int64_t now_ms, uint64_t *op_id)
{
    int rc;
    if (e && (rc = eng_check_lease(e, lease_ms)) != RLC_OK)
        return rc;
    if ((rc = eng_new_op(e, OP_EXTEND, RLC_KIND_LOCK, name, name_len, owner, op_id)) != RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    op->lease_req = lease_ms;
    eng_enqueue(e, op);
    return RLC_OK;
}

int rlc_engine_query(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                     int what, int64_t now_ms, uint64_t *op_id)
{
    if (what < RLC_Q_LOCKED || what > RLC_Q_MODE)
        return rlc_fail(RLC_E_INVAL, "query %d is not one of RLC_Q_LOCKED..RLC_Q_MODE", what);
    int rc = eng_new_op(e, OP_QUERY, RLC_KIND_LOCK, name, name_len, owner, op_id);
    if (rc != RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    op->what = what;
    query_begin(e, op);
    return RLC_OK;
}

int rlc_engine_force_release(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                             int64_t now_ms, uint64_t *op_id)
{
    int rc = eng_new_op(e, OP_QUERY, RLC_KIND_LOCK, name, name_len, owner, op_id);
    if (rc != RLC_OK)
        return rc;
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    op->what = Q_FORCE;
    query_begin(e, op);
    return RLC_OK;
}

/* The fenced-set call: the key, its fence "redlockc_fence:{key}" (the key
 * alone when it names its hash slot itself), the value and the token. */
static struct rlc_cmd *fenced_call(const char *key, size_t key_len, const char *value,
                                   size_t value_len, uint64_t token)
{
    size_t fence_len;
    char *fence = key_derived("redlockc_fence:", key, key_len, "", &fence_len);
    if (!fence)
        return NULL;
    char tok[24];
    const char *argv[4] = {key, fence, value ? value : "", tok};
    size_t lens[4] = {key_len, fence_len, value_len,
                      (size_t)snprintf(tok, sizeof tok, "%llu", (unsigned long long)token)};
    struct rlc_cmd *cmd = cmd_evalsha(&script_fenced_set, 2, 2, argv, lens);
    free(fence);
    return cmd;
}

/* A fenced write hangs on a hold of this owner (queries wait in no queue,
 * so it never waits behind a driver's owner of the same number). */
#define FENCE_OWNER UINT64_MAX

int rlc_engine_fenced_set(rlc_engine *e, const char *key, size_t key_len, const char *value,
                          size_t value_len, uint64_t token, int64_t now_ms, uint64_t *op_id)
{
    if (!e)
        return rlc_fail(RLC_E_INVAL, "engine is NULL");
    if (!key || key_len == 0)
        return rlc_fail(RLC_E_INVAL, "key is NULL or empty");
    if (key_len > MAX_NAME_LEN)
        return rlc_fail(RLC_E_INVAL, "key is longer than %d bytes", MAX_NAME_LEN);
    if (!value && value_len > 0)
        return rlc_fail(RLC_E_INVAL, "value is NULL");
    if (token == 0)
        return rlc_fail(RLC_E_INVAL, "fencing token 0: tokens of held locks start at 1");
    if (e->n != 1)
        return rlc_fail(RLC_E_INVAL,
                        "fenced writes go to one Redis, the resource; this client has %d nodes "
                        "(make a client with the resource's node alone)", e->n);
    struct rlc_cmd *cmd = fenced_call(key, key_len, value, value_len, token);
    if (!cmd)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int rc = eng_new_op(e, OP_QUERY, RLC_KIND_LOCK, key, key_len, FENCE_OWNER, op_id);
    if (rc != RLC_OK) {
        cmd_unref(cmd);
        return rc;
    }
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, *op_id);
    op->what = Q_FENCE;
    op->call = cmd;
    query_begin(e, op);
    return RLC_OK;
}

int rlc_engine_cancel(rlc_engine *e, uint64_t id, int64_t now_ms)
{
    if (!e)
        return rlc_fail(RLC_E_INVAL, "engine is NULL");
    eng_advance(e, now_ms);
    struct eng_op *op = eng_find_op(e, id);
    if (!op || (op->kind != OP_ACQUIRE && op->kind != OP_MULTI))
        return rlc_fail(RLC_NOT_ACQUIRED, "operation %llu is not a running acquire",
                        (unsigned long long)id);
    if (op->kind == OP_MULTI) {
        multi_cancel(e, op, e->now);
        return RLC_OK;
    }
    if (op->phase == P_QUEUED) {
        /* not started: nothing was sent */
        eng_event_done(e, op, RLC_E_CANCELED, "the acquire of lock '%s' was cancelled",
                       RLC_SHOWN(op->hold->lock->name));
        op_finish(e, op, e->now);
        return RLC_OK;
    }
    acquire_cancel(e, op, e->now);
    return RLC_OK;
}

int rlc_engine_forget(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                      int64_t now_ms)
{
    return rlc_engine_forget_kind(e, RLC_KIND_LOCK, name, name_len, owner, now_ms);
}

int rlc_engine_forget_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
                           uint64_t owner, int64_t now_ms)
{
    if (!e || !name)
        return rlc_fail(RLC_E_INVAL, "engine or name is NULL");
    if (check_hold_kind(kind) != RLC_OK)
        return RLC_E_INVAL;
    eng_advance(e, now_ms);
    /* a fair lock is one lock per owner: every one of them for owner 0 */
    for (struct eng_lock *l = lock_next_named(e, NULL, name, name_len, kind), *nl; l; l = nl) {
        nl = lock_next_named(e, l, name, name_len, kind);
        for (struct hold *h = l->holds, *next; h; h = next) {
            next = h->next; /* h, and l with its last hold, may go here */
            if (owner != 0 && h->owner != owner)
                continue;
            h->count = 0;
            h->n_levels = 0;
            h->lost = 0;
            renew_schedule(e, h); /* no renewal, no loss push, no LOST event */
            hold_maybe_free(e, h);
        }
    }
    return RLC_OK;
}

int rlc_engine_next_event(rlc_engine *e, rlc_engine_event *ev)
{
    return e && ev ? eng_event_pop(e, ev) : 0;
}

int64_t rlc_engine_hold_count(const rlc_engine *e, const char *name, size_t name_len,
                              uint64_t owner)
{
    return rlc_engine_hold_count_kind(e, RLC_KIND_LOCK, name, name_len, owner);
}

int64_t rlc_engine_hold_count_kind(const rlc_engine *e, int kind, const char *name,
                                   size_t name_len, uint64_t owner)
{
    if (!e || !name)
        return 0;
    struct eng_lock *l = lock_find(e, name, name_len, kind, owner);
    struct hold *h = l ? hold_get((rlc_engine *)e, l, owner, false) : NULL;
    /* lost, or its validity ended by the latest time passed in (its LOST
     * event is due at the next tick): held no more, whatever levels its
     * owner still has to release */
    if (!h || h->lost || (h->n_levels > 0 && h->valid_until <= e->now))
        return 0;
    return h->count;
}

int64_t rlc_engine_validity_ms(const rlc_engine *e, const char *name, size_t name_len,
                               uint64_t owner, int64_t now_ms)
{
    return rlc_engine_validity_ms_kind(e, RLC_KIND_LOCK, name, name_len, owner, now_ms);
}

int64_t rlc_engine_validity_ms_kind(const rlc_engine *e, int kind, const char *name,
                                    size_t name_len, uint64_t owner, int64_t now_ms)
{
    if (!e || !name)
        return 0;
    struct eng_lock *l = lock_find(e, name, name_len, kind, owner);
    struct hold *h = l ? hold_get((rlc_engine *)e, l, owner, false) : NULL;
    if (!h || h->count <= 0 || h->lost)
        return 0;
    int64_t now = now_ms > e->now ? now_ms : e->now;
    return h->valid_until > now ? h->valid_until - now : 0;
}

/* ---- connections and time ------------------------------------------------------ */

static bool conn_ok(const rlc_engine *e, int k)
{
    return e && k >= 0 && k < e->n_conns;
}

int rlc_engine_conns(const rlc_engine *e)
{
    return e ? e->n_conns : 0;
}

/* Where connection c goes now: its cluster master, its loss-push unit's,
 * or its node's (a sentinel node's master as last discovered). */
static int address_of(const rlc_engine *e, const struct conn *c, const char **host, int *port)
{
    if (c->master >= 0)
        return cluster_address(e, c, host, port);
    if (c->track && track_master(e, c) >= 0)
        return cluster_master_address(e, c->node, track_master(e, c), host, port);
    return sentinel_address(e, c, host, port);
}

int rlc_engine_conn_address(const rlc_engine *e, int conn, const char **host, int *port,
                            int *tls)
{
    if (!conn_ok(e, conn) || !host || !port)
        return rlc_fail(RLC_E_INVAL, "no connection %d", conn);
    const struct conn *c = &e->conns[conn];
    if (tls)
        *tls = e->addrs[c->node].tls;
    if (c->master >= 0 || (c->track && is_cluster(e, c->node))) {
        if (address_of(e, c, host, port) != RLC_OK)
            return rlc_fail(RLC_E_INVAL, "connection %d of cluster %s is not in use", conn,
                            e->addrs[c->node].label);
        return RLC_OK;
    }
    if (address_of(e, c, host, port) != RLC_OK) {
        const char *why = sentinel_why(e, c->node);
        return rlc_fail(RLC_E_CONNECT, "the master of %s is not known yet%s%s",
                        e->addrs[c->node].label, why ? ": " : "", why ? why : "");
    }
    return RLC_OK;
}

int rlc_engine_want_open(const rlc_engine *e, int conn)
{
    if (!conn_ok(e, conn))
        return 0;
    const struct conn *c = &e->conns[conn];
    if (c->disc)
        return sentinel_want_open(e, c);
    if (c->master >= 0)
        return cluster_want_open(e, c);
    if (c->state == C_DOWN && !sentinel_master_known(e, c->node))
        return 0;
    if (c->sub && c->state != C_DROPPED)
        return sub_wanted(e, c->node) ? 1 : 0;
    if (c->track)
        return track_want_open(e, c);
    return conn_want_open(e, conn);
}

void rlc_engine_connected(rlc_engine *e, int conn, int64_t now_ms)
{
    if (!conn_ok(e, conn))
        return;
    eng_advance(e, now_ms);
    struct conn *c = &e->conns[conn];
    if (c->disc) {
        if (c->state != C_UP && c->state != C_DROPPED)
            sentinel_connected(e, c);
        return;
    }
    conn_connected(e, conn, e->now);
    if (c->sub && c->state == C_UP)
        sub_on_connected(e, c);
    if (c->track)
        track_connected(e, c);
}

void rlc_engine_closed(rlc_engine *e, int conn, int64_t now_ms)
{
    if (!conn_ok(e, conn))
        return;
    eng_advance(e, now_ms);
    struct conn *c = &e->conns[conn];
    char msg[200];
    const char *host;
    int port;
    if (c->disc) {
        conn_closed(e, conn, e->now, RLC_E_CONNECT, "");
        sentinel_closed(e, c);
        return;
    }
    bool ours = c->state == C_DROPPED; /* the engine let it go: it knows why */
    if (address_of(e, c, &host, &port) == RLC_OK)
        snprintf(msg, sizeof msg, "connection to %.100s:%d (%s) lost", host, port,
                 e->addrs[c->node].label);
    else
        snprintf(msg, sizeof msg, "connection to %s lost", e->addrs[c->node].label);
    conn_closed(e, conn, e->now, RLC_E_CONNECT, msg);
    if (c->sub)
        sub_on_closed(e, c);
    if (c->track)
        track_closed(e, c);
    if (!ours)
        sentinel_suspect(e, c->node, msg); /* gone or never reached: ask again */
}

size_t rlc_engine_pending(rlc_engine *e, int conn, const char **data)
{
    if (!conn_ok(e, conn) || !data)
        return 0;
    struct conn *c = &e->conns[conn];
    if (c->state != C_UP || c->out_sent >= c->out_len) {
        *data = NULL;
        return 0;
    }
    *data = c->out + c->out_sent;
    return c->out_len - c->out_sent;
}

void rlc_engine_sent(rlc_engine *e, int conn, size_t n)
{
    if (!conn_ok(e, conn))
        return;
    struct conn *c = &e->conns[conn];
    if (c->state != C_UP)
        return;
    size_t took = n < c->out_len - c->out_sent ? n : c->out_len - c->out_sent;
    c->out_sent += took;
    c->taken += took;
    if (c->out_sent == c->out_len)
        c->out_sent = c->out_len = 0;
}

int rlc_engine_received(rlc_engine *e, int conn, const char *data, size_t len, int64_t now_ms)
{
    if (!conn_ok(e, conn) || (!data && len))
        return rlc_fail(RLC_E_INVAL, "bad connection number or data");
    eng_advance(e, now_ms);
    struct conn *c = &e->conns[conn];
    if (c->disc)
        return sentinel_received(e, c, data, len);
    if (c->sub)
        return sub_received(e, c, data, len, e->now);
    if (c->track == TRK_SUB)
        return track_sub_received(e, c, data, len);
    return conn_received(e, conn, data, len, e->now);
}

int64_t rlc_engine_deadline(const rlc_engine *e)
{
    return e ? timer_next(e) : -1;
}

void rlc_engine_tick(rlc_engine *e, int64_t now_ms)
{
    if (!e)
        return;
    eng_advance(e, now_ms);
    int kind;
    void *obj;
    for (int i = 0; i < TICK_LIMIT && timer_pop(e, e->now, &kind, &obj); i++) {
        switch (kind) {
        case T_OP: op_timer(e, obj, e->now); break;
        case T_CHAN: sub_timer(e, obj, e->now); break;
        case T_HOLD: renew_hold_timer(e, obj, e->now); break;
        case T_CONN: conn_timer(e, obj, e->now); break;
        case T_TRACK: track_timer(e, e->now); break;
        }
    }
}

/* A request parked after TRYAGAIN or CLUSTERDOWN that still goes out again:
 * its op waits for it, or it is a redo (a release, an undo). */
static bool parked_needed(const struct conn *c)
{
    for (const struct req *r = c->parked; r; r = r->next)
        if (r->op || r->redo)
            return true;
    return false;
}

int rlc_engine_idle(const rlc_engine *e)
{
    if (!e)
        return 1;
    for (int k = 0; k < e->n_conns; k++)
        if (!e->conns[k].sub && !e->conns[k].disc && !e->conns[k].track &&
            (e->conns[k].head || e->conns[k].qhead || parked_needed(&e->conns[k])))
            return 0;
    return e->n_ops == 0;
}

/* ---- creation -------------------------------------------------------------------- */

static bool uuid_ok(const char *u)
{
    if (!u || strlen(u) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        char ch = u[i];
        if (dash ? ch != '-'
                 : !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
                     (ch >= 'A' && ch <= 'F')))
            return false;
    }
    return true;
}

static int make_hello(rlc_engine *e, int i)
{
    const struct node_addr *a = &e->addrs[i];
    if (a->password) {
        const char *argv[3] = {"AUTH", a->user ? a->user : a->password, a->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(a->password)};
        e->hello[i][0] = cmd_format(a->user ? 3 : 2, argv, lens);
        if (!e->hello[i][0])
            return -1;
    }
    if (a->db) {
        char db[16];
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)snprintf(db, sizeof db, "%d", a->db)};
        e->hello[i][1] = cmd_format(2, argv, lens);
        if (!e->hello[i][1])
            return -1;
    }
    return 0;
}

/* tls_* options with no rediss:// node are a mistake that would send the
 * password in the clear to a server meant to be reached over TLS. */
static int check_tls(const rlc_engine *e)
{
    bool any_sentinel = false;
    for (int i = 0; i < e->n; i++)
        any_sentinel = any_sentinel || e->addrs[i].topology == RLC_TOPO_SENTINEL;
    if (!any_sentinel && (e->opts.sentinel_user || e->opts.sentinel_password))
        return rlc_fail(RLC_E_INVAL, "sentinel_* options are given but no node is "
                                     "redis-sentinel://");
    for (int i = 0; i < e->n; i++)
        if (e->addrs[i].tls)
            return RLC_OK;
    if (options_any_tls(&e->opts))
        return rlc_fail(RLC_E_INVAL, "tls_* options are given but no node is rediss:// "
                                     "(write rediss://host:port for a TLS node)");
    return RLC_OK;
}

/* The topologies, as the connections below reach them. */
static const struct topo_hooks topo_hooks = {
    .disc_schedule = sentinel_schedule,
    .disc_timer = sentinel_timer,
    .suspect = sentinel_suspect,
    .route = cluster_route,
    .script = cluster_script,
    .redirected = cluster_redirected,
    .own_reply = cluster_own_reply,
    .closed = cluster_conn_closed,
    .track_reply = track_reader_reply,
    .conn_address = rlc_engine_conn_address,
    .master_address = cluster_master_address,
};

static int n_sentinels(const rlc_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += e->addrs[i].topology == RLC_TOPO_SENTINEL;
    return n;
}

int rlc_engine_new(rlc_engine **out, const char *nodes, const char *client_uuid,
                   const char *options)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!nodes)
        return rlc_fail(RLC_E_INVAL, "nodes is NULL");
    if (!uuid_ok(client_uuid))
        return rlc_fail(RLC_E_INVAL,
                        "client_uuid must be a 36-character UUID "
                        "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) made from a good random source");
    rlc_engine *e = calloc(1, sizeof *e);
    if (!e)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int rc = options_parse(options, &e->opts);
    if (rc != RLC_OK) {
        free(e);
        return rc;
    }
    if ((rc = uri_parse_list(nodes, &e->addrs, &e->n)) != RLC_OK) {
        options_free(&e->opts);
        free(e);
        return rc;
    }
    if ((rc = check_tls(e)) != RLC_OK) {
        uri_free_list(e->addrs, e->n);
        options_free(&e->opts);
        free(e);
        return rc;
    }
    scripts_init();
    e->deliver = op_deliver;
    e->went_out = round_went_out;
    memcpy(e->uuid, client_uuid, 37);
    e->q = quorum_of(e->n);
    e->call_timeout_ms = e->n == 1 ? e->opts.io_timeout_ms : e->opts.node_timeout_ms;
    for (int i = 0; i < 36; i++)
        e->rng = (e->rng ^ (unsigned char)client_uuid[i]) * 1099511628211ULL;
    if (!e->rng)
        e->rng = 1;
    e->topo = &topo_hooks;
    /* connections: command and subscriber per node, then the sentinel nodes'
     * discovery ones, the cluster nodes' blocks, loss push's pairs */
    int n_track = track_conns(e);
    bool ok = conn_make_all(e, n_track) == 0 && sentinel_make(e, 2 * e->n) == 0 &&
              cluster_make(e, 2 * e->n + n_sentinels(e)) == 0 &&
              track_make(e, e->n_conns - n_track) == 0 && guard_make(e) == 0;
    for (int i = 0; ok && i < e->n; i++)
        ok = make_hello(e, i) == 0;
    if (!ok) {
        rlc_engine_free(e);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    *out = e;
    return RLC_OK;
}

/* Every op still queued or running, and every renewal, goes unreported. */
static void free_ops(rlc_engine *e)
{
    for (int b = 0; b < ENG_BUCKETS; b++)
        for (struct eng_lock *l = e->buckets[b]; l; l = l->next)
            for (struct hold *h = l->holds; h; h = h->next) {
                struct eng_op *op = h->ops_head;
                while (op) {
                    struct eng_op *next = op->next;
                    op_free(e, op);
                    op = next;
                }
                h->ops_head = h->ops_tail = NULL;
                query_free_all(e, h);
                if (h->renewing)
                    op_free(e, h->renewing);
                h->renewing = NULL;
            }
}

void rlc_engine_free(rlc_engine *e)
{
    if (!e)
        return;
    conn_free_all(e);
    sentinel_free(e);
    cluster_free_all(e);
    guard_free(e);
    track_free(e);
    eng_log_free(e);
    free_ops(e);
    lock_free_all(e);
    timer_free_all(e);
    eng_events_free(e);
    for (int i = 0; i < RLC_MAX_NODES; i++)
        for (int k = 0; k < 2; k++)
            if (e->hello[i][k])
                cmd_unref(e->hello[i][k]);
    uri_free_list(e->addrs, e->n);
    options_free(&e->opts);
    free(e);
}

int rlc_engine_nodes(const rlc_engine *e)
{
    return e ? e->n : 0;
}

int rlc_engine_node_address(const rlc_engine *e, int node, const char **host, int *port)
{
    if (!e || node < 0 || node >= e->n || !host || !port)
        return rlc_fail(RLC_E_INVAL, "no node %d", node);
    const struct node_addr *a = &e->addrs[node];
    *host = a->is_unix ? a->path : a->host;
    *port = a->is_unix ? 0 : a->port;
    return RLC_OK;
}

int rlc_engine_node_tls(const rlc_engine *e, int node)
{
    return e && node >= 0 && node < e->n && e->addrs[node].tls;
}

const char *rlc_engine_option(const rlc_engine *e, const char *name)
{
    return e ? options_given(&e->opts, name) : NULL;
}

const char *rlc_engine_uuid(const rlc_engine *e)
{
    return e ? e->uuid : NULL;
}
