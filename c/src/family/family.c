/*
 * family.c - what the lock family's handles share: names, holds, the wait
 * loop, and the renewal of watchdog holds from the client's thread.
 *
 * The registry is a list of every family handle of the process. The client's
 * background thread walks it for its own client's holds that fall due, and
 * renews them one at a time with the family mutex released around the
 * network call; a handle being freed waits until no renewal of it is in
 * flight, so the thread never touches freed memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "family.h"
#include "clock.h"
#include "conn.h"
#include "error.h"
#include "lock_calls.h"
#include "owner.h"
#include "pubsub.h"
#include "quorum.h"
#include "scripts_family.h"

#define MAX_LEASE_MS (366LL * 24 * 3600 * 1000)

pthread_mutex_t fam_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fam_renewed = PTHREAD_COND_INITIALIZER;
static struct fam_obj *registry;
static uint64_t next_hold_id;

uint64_t fam_owner(const struct fam_obj *o)
{
    return o->owner ? o->owner : owner_thread_number();
}

int fam_key(rlc_client *c, const char *name, char **key, size_t *len)
{
    if (!name || !*name)
        return rlc_fail(RLC_E_INVAL, "lock name is NULL or empty");
    size_t n = strnlen(name, FAM_MAX_NAME + 1);
    if (n > FAM_MAX_NAME)
        return rlc_fail(RLC_E_INVAL, "lock name is longer than %d bytes", FAM_MAX_NAME);
    if (c->opts.format == RLC_FORMAT_CLASSIC)
        return rlc_fail(RLC_E_INVAL, "the lock family keeps Redisson's layouts only; this "
                                     "client has format=classic (use a client without it)");
    size_t plen = strlen(c->opts.key_prefix);
    *key = malloc(plen + n + 1);
    if (!*key)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    memcpy(*key, c->opts.key_prefix, plen);
    memcpy(*key + plen, name, n + 1);
    *len = plen + n;
    return RLC_OK;
}

static int64_t family_watchdog_run(rlc_client *c);

void fam_register(struct fam_obj *o, rlc_client *c, uint64_t owner, fam_renew_fn renew)
{
    atomic_store(&c->family_renew, family_watchdog_run);
    o->client = c;
    o->owner = owner;
    o->renew = renew;
    pthread_mutex_lock(&fam_mu);
    o->reg_prev = NULL;
    o->reg_next = registry;
    if (registry)
        registry->reg_prev = o;
    registry = o;
    pthread_mutex_unlock(&fam_mu);
}

static void free_hold(struct fam_hold *h)
{
    free(h->attempts);
    free(h);
}

void fam_unregister(struct fam_obj *o)
{
    pthread_mutex_lock(&fam_mu);
    while (o->renewing > 0)
        pthread_cond_wait(&fam_renewed, &fam_mu);
    if (o->reg_prev)
        o->reg_prev->reg_next = o->reg_next;
    else
        registry = o->reg_next;
    if (o->reg_next)
        o->reg_next->reg_prev = o->reg_prev;
    for (int s = 0; s < FAM_SIDES; s++)
        while (o->holds[s]) {
            struct fam_hold *h = o->holds[s];
            o->holds[s] = h->next;
            free_hold(h);
        }
    pthread_mutex_unlock(&fam_mu);
}

struct fam_hold *fam_hold_find(struct fam_obj *o, int side, uint64_t owner)
{
    for (struct fam_hold *h = o->holds[side]; h; h = h->next)
        if (h->owner == owner)
            return h;
    return NULL;
}

struct fam_hold *fam_hold_get(struct fam_obj *o, int side, uint64_t owner)
{
    struct fam_hold *h = fam_hold_find(o, side, owner);
    if (h)
        return h;
    if (!(h = calloc(1, sizeof *h)))
        return NULL;
    h->owner = owner;
    h->id = ++next_hold_id;
    h->next = o->holds[side];
    o->holds[side] = h;
    return h;
}

void fam_hold_drop_if_idle(struct fam_obj *o, int side, struct fam_hold *h)
{
    if (h->count > 0 || h->pending > 0)
        return;
    for (struct fam_hold **p = &o->holds[side]; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            free_hold(h);
            return;
        }
}

bool fam_hold_push(struct fam_hold *h, uint64_t attempt)
{
    if (h->n_attempts == h->cap) {
        int64_t cap = h->cap ? h->cap * 2 : 4;
        uint64_t *a = realloc(h->attempts, sizeof *a * (size_t)cap);
        if (!a)
            return false;
        h->attempts = a;
        h->cap = cap;
    }
    h->attempts[h->n_attempts++] = attempt;
    return true;
}

bool fam_grant(rlc_client *c, struct fam_hold *h, bool watchdog, int64_t lease,
               int64_t started_ns)
{
    if (h->count == 0) {
        h->lease_ms = lease;
        h->watchdog = watchdog;
        h->lost = 0;
    }
    h->count++;
    h->valid_until_ns = started_ns +
                        (lease - quorum_drift_ms(lease, c->opts.drift_factor)) * RLC_NS_PER_MS;
    if (!h->watchdog)
        return false;
    h->next_renew_ns = started_ns + h->lease_ms * RLC_NS_PER_MS / 3;
    return true;
}

int fam_check_lease(const rlc_client *c, int64_t lease_ms)
{
    if (lease_ms <= 0)
        return RLC_OK;
    if (lease_ms > MAX_LEASE_MS)
        return rlc_fail(RLC_E_INVAL, "lease of %lld ms is longer than 366 days",
                        (long long)lease_ms);
    if (lease_ms <= quorum_drift_ms(lease_ms, c->opts.drift_factor) + 1)
        return rlc_fail(RLC_E_INVAL,
                        "lease of %lld ms is shorter than the clock drift allowance plus a "
                        "round trip (1 ms)", (long long)lease_ms);
    return RLC_OK;
}

int64_t fam_tomb_ms(const rlc_client *c, int64_t lease)
{
    return lock_undo_tomb_ms(lease, c->call_timeout_ms, c->opts.connect_timeout_ms);
}

/* ---- one try, and the wait loop -------------------------------------------- */

void fam_read_acquire(rlc_client *c, const struct fanout *f, int64_t lease, const char *key,
                      struct fam_try *t)
{
    int n = c->n_nodes;
    struct quorum_vote votes[RLC_MAX_NODES];
    t->count = 0;
    t->split = false;
    t->sleep_ms = -1;
    t->any_undo = false;
    t->started_ns = f->started_ns;
    /* Each node's answer as a vote, and quorum_decide's verdict, as for an
     * RLock: the family's replies name no holder and carry no token. */
    for (int i = 0; i < n; i++) {
        const redisReply *r = fanout_reply(f, i);
        votes[i] = (struct quorum_vote){QV_NONE, 0, false, NULL, 0};
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        int64_t v = r->element[0]->integer;
        if (v >= 1 && !t->count)
            t->count = v;
        if (v >= 1)
            votes[i].kind = QV_YES;
        else if (v == 0)
            votes[i] = (struct quorum_vote){QV_BUSY, r->element[1]->integer, false, NULL, 0};
    }
    struct quorum_verdict vd;
    quorum_decide(votes, n, false, lease, rlc_now_ns() - f->started_ns, c->opts.drift_factor,
                  &vd);
    if (vd.outcome == Q_HELD) {
        t->rc = RLC_OK;
    } else if (vd.outcome == Q_LEASE_USED || vd.outcome == Q_BUSY) {
        t->rc = rlc_fail(RLC_NOT_ACQUIRED, "'%s' is held by another owner", key);
        /* granted too slowly: try again at once, after a jitter */
        t->split = vd.outcome == Q_LEASE_USED || vd.split;
        t->sleep_ms = vd.outcome == Q_BUSY ? vd.sleep_ms : -1;
    } else {
        t->rc = fanout_fail(c, f, key);
    }
    for (int i = 0; i < n; i++) {
        t->undo[i] = vd.undo[i];
        t->any_undo = t->any_undo || (t->rc != RLC_OK && vd.undo[i]);
    }
}

static void jitter(const rlc_client *c, int64_t deadline_ns)
{
    int64_t ms = quorum_jitter_ms(owner_random_below(UINT64_MAX), c->opts.retry_jitter_ms);
    int64_t until = rlc_deadline_after_ms(rlc_now_ns(), ms);
    if (until > deadline_ns)
        until = deadline_ns;
    int64_t left = until - rlc_now_ns();
    if (left > 0) {
        struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
        nanosleep(&ts, NULL);
    }
}

int fam_wait(rlc_client *c, const char *channel, size_t channel_len, int64_t deadline_ns,
             const struct cancel_point *cp, fam_try_fn fn, void *arg, struct fam_try *t)
{
    struct channel *ch = pubsub_join(c->pubsub, channel, channel_len);
    if (!ch)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    int64_t ready_by = rlc_deadline_after_ms(rlc_now_ns(),
                                             c->call_timeout_ms + c->opts.connect_timeout_ms);
    pubsub_wait_ready(c->pubsub, ch, ready_by < deadline_ns ? ready_by : deadline_ns, cp);
    int rc;
    for (;;) {
        uint64_t seq = pubsub_seq(c->pubsub, ch);
        rc = fn(arg, t);
        if (rc != RLC_NOT_ACQUIRED)
            break;
        if (cancel_requested(cp)) {
            /* between tries: the last one took nothing or was undone */
            rc = RLC_E_CANCELED;
            break;
        }
        int64_t now = rlc_now_ns();
        if (now >= deadline_ns)
            break;
        if (atomic_load(&c->closed)) {
            rc = rlc_fail(RLC_E_CLOSED, "client closed while waiting");
            break;
        }
        if (t->split) {
            jitter(c, deadline_ns);
            continue;
        }
        int64_t ms = quorum_retry_ms(t->sleep_ms);
        int64_t until = rlc_deadline_after_ms(now, ms);
        pubsub_wait(c->pubsub, ch, seq, until < deadline_ns ? until : deadline_ns, cp);
    }
    pubsub_leave(c->pubsub, ch);
    return rc;
}

int fam_cancel(rlc_client *c, atomic_uint_fast64_t *cancels)
{
    atomic_fetch_add(cancels, 1);
    if (client_enter(c) == RLC_OK) { /* else: closed, its waiters were ended */
        pubsub_wake_all(c->pubsub);
        client_leave(c);
    }
    return RLC_OK;
}

int fam_release_reply(const redisReply *r, int64_t *n, int *freed)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer == -1) {
        *n = -1;
        *freed = 0;
        return 1;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        *n = r->element[0]->integer;
        *freed = (int)r->element[1]->integer;
        return 1;
    }
    return 0;
}

/* ---- renewals -------------------------------------------------------------------- */

/* For the background thread (c->family_renew): renews due family holds of
 * c; returns when it wants to run again. */
static int64_t family_watchdog_run(rlc_client *c)
{
    int64_t next = RLC_FOREVER_NS;
    /* Each pass renews one due hold; bounded by the holds there are. */
    for (int pass = 0; pass < 100000; pass++) {
        int64_t now = rlc_now_ns();
        int64_t slack = c->opts.watchdog_timeout_ms * RLC_NS_PER_MS / 6;
        struct fam_obj *due = NULL;
        struct fam_hold *dh = NULL;
        int side = 0;
        next = RLC_FOREVER_NS;
        pthread_mutex_lock(&fam_mu);
        for (struct fam_obj *o = registry; o; o = o->reg_next) {
            if (o->client != c)
                continue;
            for (int s = 0; s < FAM_SIDES; s++)
                for (struct fam_hold *h = o->holds[s]; h; h = h->next) {
                    if (!h->watchdog || h->lost || h->n_attempts == 0)
                        continue;
                    if (!due && h->next_renew_ns <= now + slack) {
                        due = o;
                        dh = h;
                        side = s;
                    } else if (h->next_renew_ns < next) {
                        next = h->next_renew_ns;
                    }
                }
        }
        if (!due) {
            pthread_mutex_unlock(&fam_mu);
            return next;
        }
        uint64_t id = dh->id, owner = dh->owner, level = dh->attempts[0];
        int64_t lease = dh->lease_ms;
        /* Not due again until this renewal says otherwise. */
        dh->next_renew_ns = now + lease * RLC_NS_PER_MS / 10;
        due->renewing++;
        pthread_mutex_unlock(&fam_mu);

        int64_t started = rlc_now_ns();
        int v = due->renew(due, side, owner, level);

        pthread_mutex_lock(&fam_mu);
        for (struct fam_hold *h = due->holds[side]; h; h = h->next)
            if (h->id == id && h->count > 0) {
                int64_t valid = lease - quorum_drift_ms(lease, c->opts.drift_factor);
                if (v == 1) {
                    h->valid_until_ns = started + valid * RLC_NS_PER_MS;
                    h->next_renew_ns = started + lease * RLC_NS_PER_MS / 3;
                } else if (v == 0 || rlc_now_ns() >= h->valid_until_ns) {
                    h->lost = RLC_E_LOST;
                }
            }
        due->renewing--;
        pthread_cond_broadcast(&fam_renewed);
        pthread_mutex_unlock(&fam_mu);
    }
    return next;
}

void fscripts_init(void)
{
    const struct script *const *list;
    size_t n = scripts_family(&list);
    /* SCRIPT LOAD in each command connection's handshake, as the RLock's:
     * none is left to EVAL's cache, which Redis 7.4+ and Valkey 8 evict.
     * The SPUBLISH twins (a sharded cluster's) are loaded at their first
     * NOSCRIPT (mux.c). */
    conn_load_also(list, n);
}
