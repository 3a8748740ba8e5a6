/*
 * fairlock.c - the fair lock: a reentrant, owner-bound lock whose holds,
 * undo and renewals work as rlc_lock's (attempt ids,
 * docs/design/attempts.md), on Redisson's RFairLock layout
 * (docs/FAMILY.md), run on the older blocking stack: trying, waiting in
 * the queue, undoing a try that was not certainly granted, withdrawing from
 * the queue, releasing and renewing. build() makes each script's call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "scripts_family.h"
#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "pubsub.h"
#include "quorum.h"

enum { OP_ACQUIRE, OP_RELEASE, OP_UNDO, OP_RENEW, OP_WITHDRAW };
enum { SIDE_FAIR = 0 }; /* the registry's holds have sides; a fair lock has one */

#define FIELD_MAX (RLC_UUID_LEN + 32)

struct flock {
    struct fam_obj o;          /* first: the registry's view */
    char *key;                 /* key_prefix + name */
    size_t key_len;
    char *attempts;            /* redlockc_attempts:{key} */
    size_t attempts_len;
    char *channel;             /* redisson_lock__channel:{key} */
    size_t channel_len;
    char *aux1;                /* redisson_lock_queue:{key} */
    size_t aux1_len;
    char *aux2;                /* redisson_lock_timeout:{key} */
    size_t aux2_len;
    int64_t thread_wait_ms;
};

struct rlc_fairlock {
    struct flock f;
};

/* The owner's hash field: "<uuid>:<owner>". */
static size_t field_of(const struct flock *l, uint64_t owner, char *buf)
{
    return (size_t)client_field(l->o.client, owner, buf, FIELD_MAX);
}

/* The command of `op`. An acquire names `outer`, the first level of the
 * hold it nests in (0: a new hold). */
static struct rlc_cmd *build(const struct flock *l, int op, uint64_t owner, int64_t lease,
                             uint64_t attempt, int64_t extra, uint64_t outer,
                             const struct script **sp)
{
    rlc_client *c = l->o.client;
    char field[FIELD_MAX], id[RLC_ATTEMPT_LEN] = "", n1[24], n2[24];
    char oid[RLC_ATTEMPT_LEN] = "";
    const char *argv[12];
    size_t lens[12];
    int nk = 0, na = 0;
    size_t flen = field_of(l, owner, field);
    size_t idlen = attempt ? (size_t)client_attempt_name(c, attempt, id, sizeof id) : 0;
    size_t oidlen = outer ? (size_t)client_attempt_name(c, outer, oid, sizeof oid) : 0;
    size_t n1len = (size_t)snprintf(n1, sizeof n1, "%lld", (long long)lease);
    size_t n2len = (size_t)snprintf(n2, sizeof n2, "%lld", (long long)extra);
    const char *f = field;
    size_t fl = flen;
#define K(s, n) (argv[nk] = (s), lens[nk] = (n), nk++)
#define A(s, n) (argv[nk + na] = (s), lens[nk + na] = (n), na++)
    const struct script *s = NULL;
    switch (op) {
    case OP_ACQUIRE:
        s = &fscript_fair_acquire;
        K(l->key, l->key_len);
        K(l->aux1, l->aux1_len);
        K(l->aux2, l->aux2_len);
        K(l->attempts, l->attempts_len);
        A(n1, n1len);
        A(f, fl);
        A(id, idlen);
        A(n2, n2len); /* thread wait */
        A(extra > 0 ? "1" : "0", 1);
        A(oid, oidlen);
        lens[nk + 3] = (size_t)snprintf(n2, sizeof n2, "%lld", (long long)l->thread_wait_ms);
        break;
    case OP_RELEASE:
        s = &fscript_fair_release;
        K(l->key, l->key_len);
        K(l->aux1, l->aux1_len);
        K(l->aux2, l->aux2_len);
        K(l->attempts, l->attempts_len);
        K(l->channel, l->channel_len);
        A(n1, n1len);
        A(f, fl);
        A(id, idlen);
        break;
    case OP_UNDO:
    case OP_RENEW:
        s = op == OP_UNDO ? &fscript_fair_undo : &fscript_fair_renew;
        K(l->key, l->key_len);
        K(l->attempts, l->attempts_len);
        if (op == OP_UNDO) {
            A(id, idlen);
            A(f, fl);
            A(n2, n2len);
        } else {
            A(n1, n1len);
            A(f, fl);
            A(id, idlen);
        }
        break;
    default:
        s = &fscript_fair_withdraw;
        K(l->key, l->key_len);
        K(l->aux1, l->aux1_len);
        K(l->aux2, l->aux2_len);
        K(l->channel, l->channel_len);
        A(f, fl);
    }
#undef K
#undef A
    struct rlc_cmd *cmd = cmd_evalsha(s, nk, na, argv, lens);
    *sp = s;
    return cmd;
}

/* Sends a command whose reply nobody reads, safe to run twice. */
static void send_detached(struct flock *l, int op, uint64_t owner, int64_t lease,
                          uint64_t attempt, int64_t extra, const bool *which)
{
    const struct script *s;
    struct rlc_cmd *cmd = build(l, op, owner, lease, attempt, extra, 0, &s);
    fanout_detached(l->o.client, owner, cmd, s, which, true);
    cmd_unref(cmd);
}

/* ---- acquire ------------------------------------------------------------------ */

struct try_arg {
    struct flock *l;
    int side;
    uint64_t owner;
    int64_t lease_req;
    int64_t enqueue;   /* 1: join (or stay in) the queue */
    bool queued;       /* a try may have registered us as waiting: withdraw on giving up */
};

/* The first integer of an acquire reply (scripts_family.h), or 0 for none. */
static int64_t reply_head(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return 0;
    return r->element[0]->integer;
}

/* A7: did a quorum answer that the level this nested try names is not in
 * the lock's current life ({-2, 0}: nothing taken there)? Then the hold is
 * lost, and the nodes that granted or did not answer are marked for the
 * undo. */
static bool outer_gone(const struct fanout *f, const char *key, struct fam_try *t)
{
    int gone = 0;
    for (int i = 0; i < f->n; i++)
        gone += reply_head(fanout_reply(f, i)) == -2;
    if (!quorum_has(f->n, gone))
        return false;
    t->count = 0;
    t->split = false;
    t->sleep_ms = -1;
    t->started_ns = f->started_ns;
    t->any_undo = false;
    for (int i = 0; i < f->n; i++) {
        const redisReply *r = fanout_reply(f, i);
        t->undo[i] = !r || reply_head(r) >= 1;
        t->any_undo = t->any_undo || t->undo[i];
    }
    char name[80];
    t->rc = rlc_fail(RLC_E_LOST, "'%s' was lost before this nested acquire: the hold it "
                     "nests in expired or was taken; nothing was taken",
                     rlc_clip(key, name, sizeof name));
    return true;
}

static int try_once(void *arg, struct fam_try *t)
{
    struct try_arg *a = arg;
    struct flock *l = a->l;
    rlc_client *c = l->o.client;
    char name[80];

    pthread_mutex_lock(&fam_mu);
    struct fam_hold *h = fam_hold_get(&l->o, a->side, a->owner);
    if (!h) {
        pthread_mutex_unlock(&fam_mu);
        return t->rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    if (h->lost && h->count > 0) {
        /* The owner's code still counts levels of the lost hold: a new
         * hold made under them would be counted as one more level, and its
         * release would free the lock while the owner believes it still
         * holds the outer level. So nothing until those are given up
         * (E5b, docs/design/engine.md). */
        pthread_mutex_unlock(&fam_mu);
        return t->rc = rlc_fail(RLC_E_LOST, "fair lock '%s' was lost: release its levels "
                                "before taking it again", rlc_clip(l->key, name, sizeof name));
    }
    bool nested = h->count > 0;
    uint64_t outer = nested && h->n_attempts > 0 ? h->attempts[0] : 0;
    bool watchdog = nested ? h->watchdog : a->lease_req <= 0;
    int64_t lease = nested ? h->lease_ms
                    : a->lease_req > 0 ? a->lease_req : c->opts.watchdog_timeout_ms;
    uint64_t hold_id = h->id;
    h->pending++;
    pthread_mutex_unlock(&fam_mu);
    uint64_t attempt = client_new_attempt(c);

    const struct script *s;
    struct rlc_cmd *cmd = build(l, OP_ACQUIRE, a->owner, lease, attempt, a->enqueue, outer, &s);
    struct fanout f;
    fanout_run(c, a->owner, cmd, s, &f);
    if (!outer || !outer_gone(&f, l->key, t))
        fam_read_acquire(c, &f, lease, l->key, t);
    /* Any try that was not granted may have queued us (a refusal, or one
     * that timed out after the server ran it): if the wait ends here, the
     * place must be given back, or a ghost holds up the next waiter. */
    if (t->rc != RLC_OK && a->enqueue > 0)
        a->queued = true;

    bool wake = false;
    pthread_mutex_lock(&fam_mu);
    h = fam_hold_find(&l->o, a->side, a->owner);
    if (h && h->id == hold_id) {
        h->pending--;
        if (t->rc == RLC_E_LOST)
            h->lost = RLC_E_LOST;
        if (t->rc == RLC_OK) {
            if (!fam_hold_push(h, attempt))
                t->rc = rlc_fail(RLC_E_NOMEM, "out of memory");
            else
                wake = fam_grant(c, h, watchdog, lease, t->started_ns);
        }
        if (t->rc != RLC_OK)
            fam_hold_drop_if_idle(&l->o, a->side, h);
    }
    pthread_mutex_unlock(&fam_mu);
    if (t->rc != RLC_OK && t->any_undo)
        send_detached(l, OP_UNDO, a->owner, lease, attempt, fam_tomb_ms(c, lease), t->undo);
    if (wake)
        client_wake_thread(c);
    fanout_clear(&f);
    cmd_unref(cmd);
    return t->rc;
}

static int acquire(struct flock *l, int64_t wait_ms, int64_t lease_ms)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_client *c = l->o.client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    if ((rc = fam_check_lease(c, lease_ms)) != RLC_OK ||
        (rc = client_start_family_stack(c)) != RLC_OK)
        goto out;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&l->o.cancels, atomic_load(&l->o.cancels)};
    int64_t start = rlc_now_ns();
    int64_t deadline = wait_ms < 0 ? RLC_FOREVER_NS : rlc_deadline_after_ms(start, wait_ms);
    struct try_arg a = {l, SIDE_FAIR, fam_owner(&l->o), lease_ms, 0, false};
    struct fam_try t;
    /* A fair waiter must be subscribed to its own channel before it joins
     * the queue, or the hand-off message could come before it listens. */
    if (wait_ms == 0)
        rc = try_once(&a, &t);
    else
        rc = RLC_NOT_ACQUIRED;
    if (rc == RLC_NOT_ACQUIRED && wait_ms != 0) {
        /* Redisson's fair waiter listens on channel:<its field> */
        char field[FIELD_MAX];
        size_t fl = field_of(l, a.owner, field);
        size_t wlen = l->channel_len + 1 + fl;
        char *wname = malloc(wlen + 1);
        if (!wname) {
            rc = rlc_fail(RLC_E_NOMEM, "out of memory");
            goto out;
        }
        memcpy(wname, l->channel, l->channel_len);
        wname[l->channel_len] = ':';
        memcpy(wname + l->channel_len + 1, field, fl + 1);
        a.enqueue = 1;
        rc = fam_wait(c, wname, wlen, deadline, &cp, try_once, &a, &t);
        free(wname);
        if (rc != RLC_OK && a.queued) {
            bool all[RLC_MAX_NODES];
            for (int i = 0; i < c->n_nodes; i++)
                all[i] = true;
            send_detached(l, OP_WITHDRAW, a.owner, 0, 0, 0, all);
        }
    }
    char name[80];
    if (rc == RLC_NOT_ACQUIRED)
        rlc_fail(RLC_NOT_ACQUIRED, "fair lock '%s' is held by another owner; waited %lld ms",
                 rlc_clip(l->key, name, sizeof name),
                 (long long)((rlc_now_ns() - start) / RLC_NS_PER_MS));
    else if (rc == RLC_E_CANCELED)
        rlc_fail(RLC_E_CANCELED, "acquire of fair lock '%s' was cancelled "
                 "(rlc_fairlock_cancel); nothing was kept", rlc_clip(l->key, name, sizeof name));
out:
    client_leave(c);
    return rc;
}

/* ---- release ------------------------------------------------------------------- */

static int release(struct flock *l)
{
    const int side = SIDE_FAIR;
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_client *c = l->o.client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    uint64_t owner = fam_owner(&l->o);
    char name[80];
    rlc_clip(l->key, name, sizeof name);

    /* One level is gone from our side whatever the outcome: after an I/O
     * failure the release goes out again until a node answers, and a level
     * nobody renews expires with its lease, the safe direction. */
    pthread_mutex_lock(&fam_mu);
    struct fam_hold *h = fam_hold_find(&l->o, side, owner);
    if (!h || h->count <= 0) {
        pthread_mutex_unlock(&fam_mu);
        rc = rlc_fail(RLC_E_NOT_OWNER, "fair lock '%s' is not held by this owner through this "
                      "handle", name);
        goto out;
    }
    if (h->lost) {
        h->count--;
        h->n_attempts = h->n_attempts > h->count ? h->count : h->n_attempts;
        fam_hold_drop_if_idle(&l->o, side, h);
        pthread_mutex_unlock(&fam_mu);
        rc = rlc_fail(RLC_E_LOST, "fair lock '%s' was lost before this release: it expired or "
                      "was taken; nothing was changed", name);
        goto out;
    }
    uint64_t attempt = h->n_attempts > 0 ? h->attempts[--h->n_attempts] : 0;
    int64_t lease = h->lease_ms;
    h->count--;
    fam_hold_drop_if_idle(&l->o, side, h);
    pthread_mutex_unlock(&fam_mu);

    const struct script *s;
    struct rlc_cmd *cmd = build(l, OP_RELEASE, owner, lease, attempt, 0, 0, &s);
    struct fanout f;
    fanout_run(c, owner, cmd, s, &f);
    int done = 0, refused = 0, freed = 0;
    bool resend[RLC_MAX_NODES], any_resend = false;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        int64_t n;
        int fr;
        resend[i] = !r && (f.res[i].status == RLC_E_CONNECT || f.res[i].status == RLC_E_TIMEOUT);
        any_resend = any_resend || resend[i];
        if (r && fam_release_reply(r, &n, &fr)) {
            n < 0 ? refused++ : done++;
            freed += fr;
        }
    }
    int end = quorum_release_end(f.n, done, refused);
    if (end == QE_DONE)
        rc = RLC_OK;
    else if (end == QE_NOT_HELD)
        rc = rlc_fail(RLC_E_LOST, "fair lock '%s' was lost: it expired or was taken", name);
    else
        rc = fanout_fail(c, &f, l->key);
    if (any_resend)
        fanout_detached(c, owner, cmd, s, resend, true);
    fanout_clear(&f);
    cmd_unref(cmd);
out:
    client_leave(c);
    return rc;
}

/* The registry's renewal of one hold (family.h). */
static int renew(struct fam_obj *o, int side, uint64_t owner, uint64_t level)
{
    struct flock *l = (struct flock *)o;
    rlc_client *c = o->client;
    if (atomic_load(&c->closed))
        return -1;
    const struct script *s;
    (void)side; /* a fair lock's one side */
    struct rlc_cmd *cmd = build(l, OP_RENEW, owner, c->opts.watchdog_timeout_ms, level, 0, 0, &s);
    struct fanout f;
    fanout_run(c, owner, cmd, s, &f);
    int yes = 0, gone = 0;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        if (r && r->type == REDIS_REPLY_INTEGER)
            r->integer == 1 ? yes++ : gone++;
    }
    fanout_clear(&f);
    cmd_unref(cmd);
    /* a late yes renews, as in the RLock's watchdog (watchdog.c) */
    int end = quorum_renew_end(f.n, yes, gone, 1);
    return end == QE_DONE ? 1 : end == QE_NOT_HELD ? 0 : -1;
}

/* ---- handles and queries ---------------------------------------------------------- */

static void flock_free_names(struct flock *l)
{
    free(l->key);
    free(l->attempts);
    free(l->channel);
    free(l->aux1);
    free(l->aux2);
}

static int flock_new(rlc_client *c, const char *name, uint64_t owner, int64_t thread_wait_ms,
                     struct flock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (owner >= RLC_THREAD_OWNER_BASE)
        return rlc_fail(RLC_E_INVAL, "explicit owner id %llu is too large: use 1 to 2^62-1",
                        (unsigned long long)owner);
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    fscripts_init();
    struct flock *l = NULL;
    if (c->n_nodes > 1) {
        rc = rlc_fail(RLC_E_INVAL,
                      "a fair lock over %d nodes is refused: each node keeps its own queue, "
                      "so no order is shared by a quorum and the FIFO promise cannot hold "
                      "(use one node, or rlc_lock for Redlock)", c->n_nodes);
        goto out;
    }
    if (thread_wait_ms > 366LL * 24 * 3600 * 1000) {
        rc = rlc_fail(RLC_E_INVAL, "thread wait of %lld ms is longer than 366 days",
                      (long long)thread_wait_ms);
        goto out;
    }
    if ((rc = client_start_family_stack(c)) != RLC_OK)
        goto out;
    l = calloc(1, sizeof(struct rlc_fairlock));
    if (!l) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = fam_key(c, name, &l->key, &l->key_len)) != RLC_OK) {
        free(l);
        l = NULL;
        goto out;
    }
    l->thread_wait_ms = thread_wait_ms > 0 ? thread_wait_ms : 5000;
    l->attempts = key_own("redlockc_attempts:", l->key, l->key_len, "", &l->attempts_len);
    l->channel = key_derived("redisson_lock__channel:", l->key, l->key_len, "", &l->channel_len);
    l->aux1 = key_derived("redisson_lock_queue:", l->key, l->key_len, "", &l->aux1_len);
    l->aux2 = key_derived("redisson_lock_timeout:", l->key, l->key_len, "", &l->aux2_len);
    if (!l->attempts || !l->channel || !l->aux1 || !l->aux2) {
        flock_free_names(l);
        free(l);
        l = NULL;
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    client_ref(c);
    fam_register(&l->o, c, owner, renew);
    *out = l;
out:
    client_leave(c);
    return rc;
}

static void flock_free(struct flock *l)
{
    if (!l)
        return;
    rlc_client *c = l->o.client;
    fam_unregister(&l->o);
    flock_free_names(l);
    free(l);
    client_unref(c);
}

static int local_query(struct flock *l, int side, int64_t *count, int64_t *validity_ms)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    rlc_client *c = l->o.client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    int64_t now = rlc_now_ns();
    pthread_mutex_lock(&fam_mu);
    struct fam_hold *h = fam_hold_find(&l->o, side, fam_owner(&l->o));
    /* held means valid now: a hold whose lease ran out counts 0 at once,
     * before anything reported its loss (another owner may hold it) */
    bool live = h && !h->lost && h->count > 0 && h->valid_until_ns > now;
    if (count)
        *count = live ? h->count : 0;
    if (validity_ms) {
        int64_t left = live ? h->valid_until_ns - now : 0;
        *validity_ms = left > 0 ? left / RLC_NS_PER_MS : 0;
    }
    pthread_mutex_unlock(&fam_mu);
    client_leave(c);
    return RLC_OK;
}

/* ---- public: fair lock ------------------------------------------------------------------ */

int rlc_fairlock_cancel(rlc_fairlock *l)
{
    if (!l)
        return rlc_fail(RLC_E_INVAL, "lock handle is NULL");
    return fam_cancel(l->f.o.client, &l->f.o.cancels);
}

int rlc_fairlock_new(rlc_client *c, const char *name, uint64_t owner, int64_t thread_wait_ms,
                     rlc_fairlock **out)
{
    return flock_new(c, name, owner, thread_wait_ms, (struct flock **)out);
}

void rlc_fairlock_free(rlc_fairlock *l)
{
    flock_free(l ? &l->f : NULL);
}

int rlc_fairlock_acquire(rlc_fairlock *l, int64_t wait_ms, int64_t lease_ms)
{
    return acquire(l ? &l->f : NULL, wait_ms, lease_ms);
}

int rlc_fairlock_release(rlc_fairlock *l)
{
    return release(l ? &l->f : NULL);
}

int rlc_fairlock_hold_count(rlc_fairlock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return local_query(l ? &l->f : NULL, SIDE_FAIR, out, NULL);
}

int rlc_fairlock_validity_ms(rlc_fairlock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    return local_query(l ? &l->f : NULL, SIDE_FAIR, NULL, out);
}
