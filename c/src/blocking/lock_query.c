/*
 * lock_query.c - what the servers say of a lock (is it locked, held, how
 * many levels, how long) and what the client knows of its own hold
 * (validity, fencing token), without changing anything.
 */
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "fanout.h"
#include "engine_driver.h"
#include "handle_levels.h"
#include "lock_common.h"
#include "quorum.h"

/* Runs a read-only command on every node; v[] gets the integer answers. */
static int query(rlc_lock *l, int argc, const char *const *argv, const size_t *lens,
                 int64_t *v, int *nv)
{
    rlc_client *c = l->client;
    struct rlc_cmd *cmd = cmd_format(argc, argv, lens);
    struct fanout f;
    fanout_run(c, lock_owner(l), cmd, NULL, &f);
    *nv = 0;
    for (int i = 0; i < f.n; i++) {
        const redisReply *r = fanout_reply(&f, i);
        if (r && lock_reply_int(r, &v[*nv]))
            (*nv)++;
    }
    int rc = quorum_has(f.n, *nv) ? RLC_OK : fanout_fail(c, &f, l->key);
    fanout_clear(&f);
    cmd_unref(cmd);
    return rc;
}

static int count_ones(const int64_t *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += v[i] == 1;
    return k;
}

int rlc_lock_is_locked(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    const char *argv[2] = {"EXISTS", l->key};
    size_t lens[2] = {6, l->key_len};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 2, argv, lens, v, &nv)) == RLC_OK)
        *out = quorum_has(l->client->n_nodes, count_ones(v, nv));
    client_leave(l->client);
    return rc;
}

int rlc_lock_is_held(rlc_lock *l, int *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, owner);
    bool lost = h && h->lost;
    pthread_mutex_unlock(&c->mu);
    if (lost) {
        *out = 0;
    } else {
        char field[RLC_UUID_LEN + 24];
        client_field(c, owner, field, sizeof field);
        const char *argv[3] = {"HEXISTS", l->key, field};
        size_t lens[3] = {7, l->key_len, strlen(field)};
        int64_t v[RLC_MAX_NODES];
        int nv;
        if ((rc = query(l, 3, argv, lens, v, &nv)) == RLC_OK)
            *out = quorum_has(c->n_nodes, count_ones(v, nv));
    }
    client_leave(c);
    return rc;
}

int rlc_lock_hold_count(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    char field[RLC_UUID_LEN + 24];
    client_field(c, lock_owner(l), field, sizeof field);
    const char *argv[3] = {"HGET", l->key, field};
    size_t lens[3] = {4, l->key_len, strlen(field)};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 3, argv, lens, v, &nv)) == RLC_OK)
        *out = quorum_kth_largest(v, nv, c->quorum, 0);
    client_leave(c);
    return rc;
}

int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    const char *argv[2] = {"PTTL", l->key};
    size_t lens[2] = {4, l->key_len};
    int64_t v[RLC_MAX_NODES];
    int nv;
    if ((rc = query(l, 2, argv, lens, v, &nv)) == RLC_OK) {
        for (int i = 0; i < nv; i++) /* no expiry outlasts any expiry */
            if (v[i] == -1)
                v[i] = INT64_MAX;
        int64_t t = quorum_kth_largest(v, nv, l->client->quorum, -2);
        *out = t == INT64_MAX ? -1 : t;
    }
    client_leave(l->client);
    return rc;
}

int rlc_lock_validity_ms(rlc_lock *l, int64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    uint64_t owner = lock_owner(l);
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, owner);
    bool held = h && !h->lost && h->count > 0;
    pthread_mutex_unlock(&c->mu);
    int64_t left = held ? edrv_validity_ms(c->drv, l->name, l->name_len, owner) : 0;
    *out = left > 0 ? left : 0;
    client_leave(c);
    return RLC_OK;
}

int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    int rc = lock_enter(l);
    if (rc != RLC_OK)
        return rc;
    rlc_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    struct handle_hold *h = hh_find(l, lock_owner(l));
    int lost = h ? h->lost : 0;
    uint64_t token = h ? h->token : 0;
    pthread_mutex_unlock(&c->mu);
    char name[80];
    if (!h || (!lost && h->count == 0))
        rc = rlc_fail(RLC_E_NOT_OWNER, "lock '%s' is not held through this handle",
                      lock_shown(l, name, sizeof name));
    else if (lost)
        rc = rlc_fail(RLC_E_LOST, "lock '%s' was lost", lock_shown(l, name, sizeof name));
    else
        *out = token;
    client_leave(c);
    return rc;
}
