/*
 * multilock.c - several RLock names held together: all of them or none.
 *
 * The names are sorted and de-duplicated once. An acquire is ONE script
 * per node over every name (script_multi_acquire, shared with the engine): it checks them all and
 * then takes them all, or takes none, atomically on that node. So on one
 * node no multi-lock ever holds part of its set while it waits for the
 * rest, and two overlapping multi-locks cannot deadlock: hold-and-wait never
 * happens. Over N nodes (Redlock) each node is all-or-none in the same way;
 * a round without a quorum is undone on every node that may have granted
 * it, and retried after jitter, as for rlc_lock.
 *
 * Each name gets exactly what rlc_lock's acquire script gives it, with one
 * attempt id for the whole set, and the hold is registered with an rlc_lock
 * handle per name. So the undo (per name, by attempt id: safe in whatever
 * order things arrive, docs/DESIGN.md), the release, the watchdog renewal
 * and the lost-hold reports are rlc_lock's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "hold.h"
#include "scripts.h"
#include "quorum.h"

#define MAX_NAMES 1024

struct rlc_multilock {
    rlc_client *client;
    uint64_t owner;
    int n;
    rlc_lock **locks;          /* sorted by key */
};

static int by_key(const void *a, const void *b)
{
    const rlc_lock *x = *(rlc_lock *const *)a, *y = *(rlc_lock *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int d = memcmp(x->key, y->key, n);
    return d ? d : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

int rlc_multilock_new(rlc_client *c, const char *const *names, int n, uint64_t owner,
                      rlc_multilock **out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    if (!c || !names || n < 1 || n > MAX_NAMES)
        return rlc_fail(RLC_E_INVAL, "client or names is NULL, or not 1 .. %d names", MAX_NAMES);
    rlc_multilock *m = calloc(1, sizeof *m);
    if (!m || !(m->locks = calloc((size_t)n, sizeof *m->locks))) {
        free(m);
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    m->client = c;
    m->owner = owner;
    int rc = RLC_OK;
    for (int i = 0; i < n && rc == RLC_OK; i++) {
        rlc_lock *l;
        rc = rlc_lock_new(c, names[i], owner, &l);
        if (rc == RLC_OK)
            m->locks[m->n++] = l;
    }
    if (rc != RLC_OK) {
        rlc_multilock_free(m);
        return rc;
    }
    scripts_init();
    /* one global order: the same names always go in the same order */
    qsort(m->locks, (size_t)m->n, sizeof *m->locks, by_key);
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        if (k > 0 && by_key(&m->locks[k - 1], &m->locks[i]) == 0)
            rlc_lock_free(m->locks[i]);
        else
            m->locks[k++] = m->locks[i];
    }
    m->n = k;
    *out = m;
    return RLC_OK;
}

void rlc_multilock_free(rlc_multilock *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        rlc_lock_free(m->locks[i]);
    free(m->locks);
    free(m);
}

/* rlc_lock's record of a granted level (lock_acquire.c, record_grant), under c->mu. */
static bool grant(rlc_client *c, rlc_lock *l, uint64_t owner, uint64_t attempt, bool watchdog,
                  int64_t lease, uint64_t token, int64_t started_ns)
{
    struct hold *h = hold_find(l, owner);
    if (h && h->lost) {
        hold_drop(c, h);
        h = NULL;
    }
    if (!h && !(h = hold_create(l, owner)))
        return false;
    if (!hold_push_attempt(h, attempt))
        return false;
    if (h->count == 0) {
        h->token = token;
        h->lease_ms = lease;
        hold_set_watchdog(c, h, watchdog);
    }
    h->count++;
    h->valid_until_ns = started_ns +
                        (h->lease_ms - quorum_drift_ms(h->lease_ms, c->opts.drift_factor)) *
                            RLC_NS_PER_MS;
    if (h->watchdog)
        h->next_renew_ns = started_ns + h->lease_ms * RLC_NS_PER_MS / 3;
    return true;
}

/* The per-name undo of attempt on the nodes in which[] (rlc_lock's script). */
static void undo_all(rlc_multilock *m, uint64_t owner, const char *field, uint64_t attempt,
                     int64_t lease, const bool *which)
{
    rlc_client *c = m->client;
    for (int i = 0; i < m->n; i++) {
        struct lock_names names = lock_names_of(m->locks[i]);
        struct rlc_cmd *cmd = call_undo(&names, c->uuid, attempt, field, strlen(field),
                                        fam_tomb_ms(c, lease));
        fanout_detached(c, owner, cmd, &script_undo, which, true);
        cmd_unref(cmd);
    }
}

struct multi_try {
    rlc_multilock *m;
    uint64_t owner;
    const char *field;
    int64_t lease_req;
};

static int multi_try_once(void *arg, struct fam_try *t)
{
    struct multi_try *a = arg;
    rlc_multilock *m = a->m;
    rlc_client *c = m->client;
    bool watchdog = a->lease_req <= 0;
    int64_t lease = watchdog ? c->opts.watchdog_timeout_ms : a->lease_req;
    pthread_mutex_lock(&c->mu);
    uint64_t attempt = client_new_attempt(c);
    pthread_mutex_unlock(&c->mu);

    int k = m->n;
    struct lock_names *names = malloc(sizeof *names * (size_t)k);
    struct rlc_cmd *cmd = NULL;
    if (names) {
        for (int i = 0; i < k; i++)
            names[i] = lock_names_of(m->locks[i]);
        cmd = call_multi_acquire(k, names, c->uuid, lease, a->field, strlen(a->field), attempt,
                                 NULL);
    }
    free(names);
    if (!cmd)
        return t->rc = rlc_fail(RLC_E_NOMEM, "out of memory");
    struct fanout f;
    fanout_run(c, a->owner, cmd, &script_multi_acquire, &f);
    fam_read_acquire(c, &f, lease, m->locks[0]->key, t);
    if (t->rc == RLC_OK) {
        pthread_mutex_lock(&c->mu);
        bool ok = true;
        for (int i = 0; i < k && ok; i++)
            ok = grant(c, m->locks[i], a->owner, attempt, watchdog, lease, 0, t->started_ns);
        pthread_mutex_unlock(&c->mu);
        if (!ok)
            t->rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        client_wake_thread(c);
    } else if (t->any_undo) {
        undo_all(m, a->owner, a->field, attempt, lease, t->undo);
    }
    fanout_clear(&f);
    cmd_unref(cmd);
    return t->rc;
}

int rlc_multilock_acquire(rlc_multilock *m, int64_t wait_ms, int64_t lease_ms)
{
    if (!m)
        return rlc_fail(RLC_E_INVAL, "multilock handle is NULL");
    rlc_client *c = m->client;
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    if ((rc = fam_check_lease(c, lease_ms)) != RLC_OK)
        goto out;
    uint64_t owner = m->owner ? m->owner : rlc_thread_owner();
    char field[RLC_UUID_LEN + 24];
    client_field(c, owner, field, sizeof field);
    struct multi_try a = {m, owner, field, lease_ms};
    struct fam_try t;
    int64_t deadline = wait_ms < 0 ? RLC_FOREVER_NS : rlc_deadline_after_ms(rlc_now_ns(), wait_ms);
    rc = multi_try_once(&a, &t);
    /* Waits on the first name's channel; a busy later name is looked at
     * again when its lease would end, at the latest every second. */
    if (rc == RLC_NOT_ACQUIRED && wait_ms != 0)
        rc = fam_wait(c, m->locks[0]->channel, m->locks[0]->channel_len, deadline,
                      multi_try_once, &a, &t);
out:
    client_leave(c);
    return rc;
}

int rlc_multilock_release(rlc_multilock *m)
{
    if (!m)
        return rlc_fail(RLC_E_INVAL, "multilock handle is NULL");
    /* Every name is released even if one fails; the first failure is
     * reported. Reverse order: the last taken goes first. */
    int rc = RLC_OK;
    char msg[256] = "";
    for (int i = m->n - 1; i >= 0; i--) {
        int r = rlc_lock_release(m->locks[i]);
        if (r != RLC_OK && rc == RLC_OK) {
            rc = r;
            snprintf(msg, sizeof msg, "%s", rlc_errmsg());
        }
    }
    if (rc != RLC_OK)
        rlc_fail_msg(rc, msg);
    return rc;
}

int rlc_multilock_size(rlc_multilock *m, int *out)
{
    if (!m || !out)
        return rlc_fail(RLC_E_INVAL, "multilock handle or out pointer is NULL");
    *out = m->n;
    return RLC_OK;
}

int rlc_multilock_lock_at(rlc_multilock *m, int i, rlc_lock **out)
{
    if (!m || !out || i < 0 || i >= m->n)
        return rlc_fail(RLC_E_INVAL, "multilock handle or out pointer is NULL, or index out of range");
    *out = m->locks[i];
    return RLC_OK;
}
