/*
 * semaphore.c - Redisson's RSemaphore (a count of free permits) and
 * RPermitExpirableSemaphore (the count plus one zset member per permit
 * taken, scored with the end of its lease), on one node only.
 *
 * Over several masters a semaphore is refused: the count is not a set of
 * holders that a quorum can vote on, and two quorums that share one node
 * can still each take that node's last permit from different states of
 * the others, so more than N permits could be out at once.
 *
 * Nothing here is owner-bound: a permit is named by its id (expirable) or
 * is just a number (plain). A try that was not certainly answered is undone
 * by id; the undo leaves a tombstone, so an acquire that arrives after its
 * undo does nothing, and a release or undo sent twice acts once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "scripts_family.h"
#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "owner.h"
#include "quorum.h"

#define MAX_PERMITS 65535
#define ID_HEX 32

struct sem {
    rlc_client *client;
    char *key;          /* the count */
    size_t key_len;
    char *zset;         /* expirable: {key}:timeout */
    size_t zset_len;
    char *channel;      /* redisson_sc:{key} */
    size_t channel_len;
    char *rec;          /* redlockc_attempt:{key}: record key prefix */
    size_t rec_len;
    bool expirable;
    atomic_uint_fast64_t cancels; /* rlc_semaphore_cancel / rlc_psemaphore_cancel calls */
};

struct rlc_semaphore {
    struct sem s;
};

struct rlc_psemaphore {
    struct sem s;
};

static void sem_free_names(struct sem *s)
{
    free(s->key);
    free(s->zset);
    free(s->channel);
    free(s->rec);
}

static int sem_new(rlc_client *c, const char *name, bool expirable, struct sem **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    fscripts_init();
    struct sem *s = NULL;
    if (c->n_nodes > 1) {
        rc = rlc_fail(RLC_E_INVAL,
                      "a semaphore over %d masters is refused: a count of permits cannot be "
                      "voted on by a quorum, so more than N permits could be out at once "
                      "(use one node)", c->n_nodes);
        goto out;
    }
    if ((rc = client_start_family_stack(c)) != RLC_OK)
        goto out;
    s = calloc(1, expirable ? sizeof(struct rlc_psemaphore) : sizeof(struct rlc_semaphore));
    if (!s) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = fam_key(c, name, &s->key, &s->key_len)) != RLC_OK) {
        free(s);
        goto out;
    }
    s->expirable = expirable;
    s->channel = key_derived("redisson_sc:", s->key, s->key_len, "", &s->channel_len);
    s->zset = key_derived("", s->key, s->key_len, ":timeout", &s->zset_len);
    s->rec = key_own("redlockc_attempt:", s->key, s->key_len, ":", &s->rec_len);
    if (!s->channel || !s->zset || !s->rec) {
        sem_free_names(s);
        free(s);
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    s->client = c;
    client_ref(c);
    *out = s;
out:
    client_leave(c);
    return rc;
}

static void sem_free(struct sem *s)
{
    if (!s)
        return;
    rlc_client *c = s->client;
    sem_free_names(s);
    free(s);
    client_unref(c);
}

/* Runs one command on the node; *v = its integer reply. */
static int run_int(struct sem *s, struct rlc_cmd *cmd, const struct script *sc, int64_t *v)
{
    struct fanout f;
    fanout_run(s->client, 0, cmd, sc, &f);
    const redisReply *r = fanout_reply(&f, 0);
    int rc;
    if (r && r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
        rc = RLC_OK;
    } else if (r && r->type == REDIS_REPLY_NIL) {
        *v = 0;
        rc = RLC_OK;
    } else if (r && r->type == REDIS_REPLY_STRING) {
        *v = strtoll(r->str, NULL, 10);
        rc = RLC_OK;
    } else if (r) {
        rc = rlc_fail(RLC_E_PROTOCOL, "unexpected reply for '%s'", s->key);
    } else {
        rc = fanout_fail(s->client, &f, s->key);
    }
    fanout_clear(&f);
    cmd_unref(cmd);
    return rc;
}

static int set_permits(struct sem *s, int64_t permits, int *set)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    if (permits < 0 || permits > INT64_MAX / 2)
        return rlc_fail(RLC_E_INVAL, "permits must be 0 .. 2^62");
    int rc = client_enter(s->client);
    if (rc != RLC_OK)
        return rc;
    char v[24];
    const char *argv[4] = {"SETNX", s->key, v};
    size_t lens[4] = {5, s->key_len, (size_t)snprintf(v, sizeof v, "%lld", (long long)permits)};
    int64_t got = 0;
    rc = run_int(s, cmd_format(3, argv, lens), NULL, &got);
    if (rc == RLC_OK && set)
        *set = got == 1;
    client_leave(s->client);
    return rc;
}

static int available(struct sem *s, int64_t *out)
{
    if (!s || !out)
        return rlc_fail(RLC_E_INVAL, "semaphore handle or out pointer is NULL");
    int rc = client_enter(s->client);
    if (rc != RLC_OK)
        return rc;
    int64_t v = 0;
    if (s->expirable) {
        const char *argv[3] = {s->key, s->zset, s->channel};
        size_t lens[3] = {s->key_len, s->zset_len, s->channel_len};
        rc = run_int(s, cmd_evalsha(&fscript_psem_available, 3, 0, argv, lens),
                     &fscript_psem_available, &v);
    } else {
        const char *argv[2] = {"GET", s->key};
        size_t lens[2] = {3, s->key_len};
        rc = run_int(s, cmd_format(2, argv, lens), NULL, &v);
    }
    if (rc == RLC_OK)
        *out = v;
    client_leave(s->client);
    return rc;
}

/* ---- acquire ------------------------------------------------------------------- */

struct sem_try {
    struct sem *s;
    int64_t n, lease;
    uint8_t base[14];      /* expirable: the permit id's random part */
    char rec[RLC_ATTEMPT_LEN + ID_HEX + 4];
};

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The record / tombstone key of this try. */
static size_t rec_key(struct sem_try *a, char *buf, size_t size, char **heap)
{
    size_t need = a->s->rec_len + strlen(a->rec) + 1;
    char *p = need <= size ? buf : (*heap = malloc(need));
    if (!p)
        return 0;
    memcpy(p, a->s->rec, a->s->rec_len);
    memcpy(p + a->s->rec_len, a->rec, strlen(a->rec) + 1);
    return need - 1;
}

/* A plain try was granted and the client heard it: no undo will name its
 * record, which has no expiry (scripts_family.c), so it goes. Detached and sent
 * again after a broken connection: a DEL acts once however often. */
static void forget_record(rlc_client *c, const char *key, size_t klen)
{
    bool one[1] = {true};
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, klen};
    struct rlc_cmd *del = cmd_format(2, argv, lens);
    fanout_detached(c, 0, del, NULL, one, true);
    cmd_unref(del);
}

static int sem_try_once(void *arg, struct fam_try *t)
{
    struct sem_try *a = arg;
    struct sem *s = a->s;
    rlc_client *c = s->client;
    t->split = false;
    t->sleep_ms = -1;
    t->started_ns = rlc_now_ns();
    /* every try has its own name, so its undo names only it */
    if (s->expirable) {
        if (owner_random(a->base, sizeof a->base) != 0)
            return t->rc = rlc_fail(RLC_E_NOMEM, "no randomness for a permit id");
        uint8_t id[16];
        memcpy(id, a->base, 14);
        id[14] = (uint8_t)(a->n >> 8);
        id[15] = (uint8_t)a->n;
        hex(id, 16, a->rec);
    } else {
        uint64_t att = client_new_attempt(c);
        client_attempt_name(c, att, a->rec, sizeof a->rec);
    }
    int64_t tomb = fam_tomb_ms(c, a->lease > 0 ? a->lease : 0);
    char kbuf[512], *heap = NULL, n_s[24], l_s[24], t_s[24];
    size_t klen = rec_key(a, kbuf, sizeof kbuf, &heap);
    if (!klen)
        return t->rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    const char *key = heap ? heap : kbuf;
    size_t nl = (size_t)snprintf(n_s, sizeof n_s, "%lld", (long long)a->n);
    size_t ll = (size_t)snprintf(l_s, sizeof l_s, "%lld", (long long)a->lease);
    size_t tl = (size_t)snprintf(t_s, sizeof t_s, "%lld", (long long)tomb);
    const struct script *sc;
    struct rlc_cmd *cmd;
    if (s->expirable) {
        sc = &fscript_psem_acquire;
        const char *argv[7] = {s->key, s->zset, s->channel, key, n_s, l_s, (const char *)a->base};
        size_t lens[7] = {s->key_len, s->zset_len, s->channel_len, klen, nl, ll, 14};
        cmd = cmd_evalsha(sc, 4, 3, argv, lens);
    } else {
        sc = &fscript_sem_acquire;
        const char *argv[4] = {s->key, key, n_s, t_s};
        size_t lens[4] = {s->key_len, klen, nl, tl};
        cmd = cmd_evalsha(sc, 2, 2, argv, lens);
    }
    struct fanout f;
    fanout_run(c, 0, cmd, sc, &f);
    const redisReply *r = fanout_reply(&f, 0);
    bool undo = true;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        int64_t v = r->element[0]->integer;
        if (v == 1) {
            t->rc = RLC_OK;
            undo = false;
            if (!s->expirable)
                forget_record(c, key, klen);
            if (s->expirable && quorum_validity_ms(a->lease, rlc_now_ns() - f.started_ns,
                                                   c->opts.drift_factor) <= 0) {
                t->rc = rlc_fail(RLC_NOT_ACQUIRED, "the %lld ms lease was used up by the "
                                 "round trip", (long long)a->lease);
                undo = true;
            }
        } else {
            t->rc = rlc_fail(RLC_NOT_ACQUIRED, "semaphore '%s' has fewer than %lld permits free",
                             s->key, (long long)a->n);
            t->sleep_ms = r->element[1]->integer;
            undo = v != 0;
        }
    } else {
        t->rc = fanout_fail(c, &f, s->key);
    }
    if (undo) {
        /* Gives back what this try took, if it ran; else a tombstone stops it. */
        bool one[1] = {true};
        struct rlc_cmd *u;
        const struct script *us = s->expirable ? &fscript_psem_release : &fscript_sem_release;
        if (s->expirable) {
            const char *argv[8] = {s->key, s->zset, s->channel, key, n_s, (const char *)a->base,
                                   t_s, "1"};
            size_t lens[8] = {s->key_len, s->zset_len, s->channel_len, klen, nl, 14, tl, 1};
            u = cmd_evalsha(us, 4, 4, argv, lens);
        } else {
            const char *argv[6] = {s->key, s->channel, key, n_s, t_s, "u"};
            size_t lens[6] = {s->key_len, s->channel_len, klen, nl, tl, 1};
            u = cmd_evalsha(us, 3, 3, argv, lens);
        }
        fanout_detached(c, 0, u, us, one, true);
        cmd_unref(u);
    }
    free(heap);
    fanout_clear(&f);
    cmd_unref(cmd);
    return t->rc;
}

static int sem_acquire(struct sem *s, int64_t n, int64_t wait_ms, int64_t lease_ms, char *id_out)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    if (n < 1 || n > MAX_PERMITS)
        return rlc_fail(RLC_E_INVAL, "permits per call must be 1 .. %d", MAX_PERMITS);
    if (s->expirable && !id_out)
        return rlc_fail(RLC_E_INVAL, "id buffer is NULL");
    rlc_client *c = s->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    if (s->expirable && lease_ms <= 0)
        rc = rlc_fail(RLC_E_INVAL, "an expirable permit needs a lease > 0 ms");
    else
        rc = fam_check_lease(c, lease_ms);
    if (rc != RLC_OK)
        goto out;
    /* Cancels made from here on end this acquire; earlier ones do not. */
    struct cancel_point cp = {&s->cancels, atomic_load(&s->cancels)};
    struct sem_try a;
    memset(&a, 0, sizeof a);
    a.s = s;
    a.n = n;
    a.lease = s->expirable ? lease_ms : 0;
    struct fam_try t;
    int64_t deadline = wait_ms < 0 ? RLC_FOREVER_NS : rlc_deadline_after_ms(rlc_now_ns(), wait_ms);
    rc = sem_try_once(&a, &t);
    if (rc == RLC_NOT_ACQUIRED && wait_ms != 0)
        rc = fam_wait(c, s->channel, s->channel_len, deadline, &cp, sem_try_once, &a, &t);
    if (rc == RLC_E_CANCELED) {
        char name[80];
        rlc_fail(RLC_E_CANCELED, "acquire of %s '%s' was cancelled (%s); nothing was kept",
                 s->expirable ? "permit-expirable semaphore" : "semaphore",
                 rlc_clip(s->key, name, sizeof name),
                 s->expirable ? "rlc_psemaphore_cancel" : "rlc_semaphore_cancel");
    }
    if (rc == RLC_OK && s->expirable && id_out) /* checked above; for gcc -O2 */
        memcpy(id_out, a.rec, ID_HEX + 1);
out:
    client_leave(c);
    return rc;
}

/* ---- public: plain semaphore ---------------------------------------------------------- */

static int sem_cancel(struct sem *s)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    return fam_cancel(s->client, &s->cancels);
}

int rlc_semaphore_cancel(rlc_semaphore *s)
{
    return sem_cancel(s ? &s->s : NULL);
}

int rlc_psemaphore_cancel(rlc_psemaphore *s)
{
    return sem_cancel(s ? &s->s : NULL);
}

int rlc_semaphore_new(rlc_client *c, const char *name, rlc_semaphore **out)
{
    return sem_new(c, name, false, (struct sem **)out);
}

void rlc_semaphore_free(rlc_semaphore *s)
{
    sem_free(s ? &s->s : NULL);
}

int rlc_semaphore_try_set_permits(rlc_semaphore *s, int64_t permits, int *set)
{
    return set_permits(s ? &s->s : NULL, permits, set);
}

int rlc_semaphore_available(rlc_semaphore *s, int64_t *out)
{
    return available(s ? &s->s : NULL, out);
}

int rlc_semaphore_acquire(rlc_semaphore *s, int64_t n, int64_t wait_ms)
{
    return sem_acquire(s ? &s->s : NULL, n, wait_ms, 0, NULL);
}

int rlc_semaphore_release(rlc_semaphore *s, int64_t n)
{
    if (!s)
        return rlc_fail(RLC_E_INVAL, "semaphore handle is NULL");
    if (n < 1 || n > MAX_PERMITS)
        return rlc_fail(RLC_E_INVAL, "permits per call must be 1 .. %d", MAX_PERMITS);
    struct sem *m = &s->s;
    rlc_client *c = m->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    uint64_t att = client_new_attempt(c);
    struct sem_try a;
    memset(&a, 0, sizeof a);
    a.s = m;
    client_attempt_name(c, att, a.rec, sizeof a.rec);
    char kbuf[512], *heap = NULL, n_s[24], t_s[24];
    size_t klen = rec_key(&a, kbuf, sizeof kbuf, &heap);
    if (!klen) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    const char *argv[6] = {m->key, m->channel, heap ? heap : kbuf, n_s, t_s, "r"};
    size_t lens[6] = {m->key_len, m->channel_len, klen,
                      (size_t)snprintf(n_s, sizeof n_s, "%lld", (long long)n),
                      (size_t)snprintf(t_s, sizeof t_s, "%lld", (long long)fam_tomb_ms(c, 0)), 1};
    struct rlc_cmd *cmd = cmd_evalsha(&fscript_sem_release, 3, 3, argv, lens);
    struct fanout f;
    fanout_run(c, 0, cmd, &fscript_sem_release, &f);
    const redisReply *r = fanout_reply(&f, 0);
    if (r && r->type == REDIS_REPLY_INTEGER) {
        rc = RLC_OK;
    } else {
        rc = fanout_fail(c, &f, m->key);
        /* named by its record, it acts once however often it is sent */
        bool one[1] = {!r};
        if (!r)
            fanout_detached(c, 0, cmd, &fscript_sem_release, one, true);
    }
    fanout_clear(&f);
    cmd_unref(cmd);
    free(heap);
out:
    client_leave(c);
    return rc;
}

/* ---- public: permit-expirable semaphore ------------------------------------------------- */

int rlc_psemaphore_new(rlc_client *c, const char *name, rlc_psemaphore **out)
{
    return sem_new(c, name, true, (struct sem **)out);
}

void rlc_psemaphore_free(rlc_psemaphore *s)
{
    sem_free(s ? &s->s : NULL);
}

int rlc_psemaphore_try_set_permits(rlc_psemaphore *s, int64_t permits, int *set)
{
    return set_permits(s ? &s->s : NULL, permits, set);
}

int rlc_psemaphore_available(rlc_psemaphore *s, int64_t *out)
{
    return available(s ? &s->s : NULL, out);
}

int rlc_psemaphore_acquire(rlc_psemaphore *s, int64_t n, int64_t wait_ms, int64_t lease_ms,
                           char *id_out)
{
    return sem_acquire(s ? &s->s : NULL, n, wait_ms, lease_ms, id_out);
}

static int unhex(const char *h, uint8_t *out)
{
    for (int i = 0; i < 16; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = h[2 * i + k];
            int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (d < 0)
                return 0;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return h[32] == '\0';
}

int rlc_psemaphore_release(rlc_psemaphore *s, const char *id)
{
    uint8_t raw[16];
    if (!s || !id || strnlen(id, 40) != ID_HEX || !unhex(id, raw))
        return rlc_fail(RLC_E_INVAL, "handle is NULL or the permit id is not 32 lowercase hex digits");
    struct sem *m = &s->s;
    rlc_client *c = m->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    int64_t n = (int64_t)raw[14] << 8 | raw[15];
    char n_s[24];
    /* KEYS[4], the undo's record, is not touched by a release; it is named
     * by the permits' own key all the same, since every key of a call must
     * be in the name's hash slot on a cluster (an empty one is slot 0's). */
    const char *argv[8] = {m->key, m->zset, m->channel, m->key, n_s, (const char *)raw, "0", "0"};
    size_t lens[8] = {m->key_len, m->zset_len, m->channel_len, m->key_len,
                      (size_t)snprintf(n_s, sizeof n_s, "%lld", (long long)n), 14, 1, 1};
    int64_t back = 0;
    rc = run_int(m, cmd_evalsha(&fscript_psem_release, 4, 4, argv, lens), &fscript_psem_release,
                 &back);
    if (rc == RLC_OK && back == 0)
        rc = rlc_fail(RLC_E_LOST, "permit %s of '%s' is not held: its lease ran out (or it was "
                      "released already)", id, m->key);
    client_leave(c);
    return rc;
}
