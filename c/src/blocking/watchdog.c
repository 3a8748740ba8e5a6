/*
 * watchdog.c - renewal rounds.
 *
 * A watchdog hold's lease (watchdog_timeout_ms) is renewed every third of
 * the lease. Holds that fall due at about the same time are renewed together:
 * a round takes every hold due within the next sixth of a lease, splits them
 * into chunks of CHUNK keys, and sends every chunk to every node before
 * waiting for any reply. 10,000 locks cost 40 script calls per node per round,
 * in one pipeline.
 *
 * A hold is lost when enough nodes say its field is gone that no quorum can
 * still have it, or when no quorum could be reached before its validity ran
 * out. Its owner learns it from on_lost, is_held and the next release.
 * on_lost is only queued here: the client's callback thread runs it, so a
 * slow callback never delays the next round (client.c).
 *
 * A round has two locked phases with network I/O between them. Holds dropped
 * in between (released, their handle freed) are kept in a graveyard until
 * the round ends, so the round's pointers stay valid; their results are
 * ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks.h"
#include "clock.h"
#include "cmd.h"
#include "hold.h"
#include "metrics.h"
#include "quorum.h"
#include "scripts.h"
#include "slot.h"
#include "watchdog.h"

#define CHUNK 256
#define FIELD_LEN (RLC_UUID_LEN + 24)

struct due {
    struct hold *h;
    uint64_t id;
    uint64_t level;  /* the level the renewal names (see script_renew) */
    int slot;        /* the owner's connection (client_mux) */
    int hslot;       /* the key's hash slot when a node is a cluster, else 0 */
    int chunk, pos;  /* where its verdict is in the replies */
};

struct round {
    struct due *due;
    int ndue;
    int nchunks;
    struct rlc_cmd **cmds;
    uint64_t *chunk_owner;  /* an owner of each chunk: they share its connection */
    struct mux_result *res; /* [chunk * n_nodes + node] */
    int64_t started_ns;
    int64_t valid_until_ns; /* the soonest end of validity among the due holds */
};

static int64_t next_wake(const rlc_client *c)
{
    int64_t now = rlc_now_ns();
    int64_t next = c->track_wake_ns > now ? c->track_wake_ns : RLC_FOREVER_NS;
    for (const struct hold *h = c->renewing; h; h = h->wd_next) {
        if (h->lost)
            continue;
        if (h->next_renew_ns < next)
            next = h->next_renew_ns;
        /* loss push's first verify of it (hold.h); one already due is
         * tracking.c's to start, and must not make this thread spin */
        if (c->opts.loss_push && h->n_attempts > 0 && h->track_level != h->attempts[0] &&
            h->track_after_ns > now && h->track_after_ns < next)
            next = h->track_after_ns;
    }
    return next;
}

static int by_slot(const void *a, const void *b)
{
    const struct due *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    if (x->hslot != y->hslot)
        return x->hslot < y->hslot ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Under mu: picks the due holds and formats their chunks. A chunk holds
 * holds of one connection slot only, so each owner's renewals ride on the
 * connection that carries its other commands. When a node is a cluster, a
 * chunk also keeps to one hash slot: a script's keys must all be in one
 * slot there (chunks of one master still go out in one pipeline). */
static int collect(rlc_client *c, struct round *r, int64_t now)
{
    int64_t slack = c->opts.watchdog_timeout_ms * RLC_NS_PER_MS / 6;
    uint64_t pool = (uint64_t)c->opts.pool_size;
    bool by_hash_slot = false;
    for (int i = 0; i < c->n_nodes; i++)
        by_hash_slot = by_hash_slot || c->clusters[i] != NULL;
    int n = 0;
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        n += !h->lost && h->n_attempts > 0 && h->next_renew_ns <= now + slack;
    if (n == 0)
        return 0;
    r->due = malloc(sizeof *r->due * (size_t)n);
    /* at most one partial chunk per slot beyond the full ones (by hash
     * slot: at most one chunk per hold) */
    int max_chunks = by_hash_slot ? n + (n + CHUNK - 1) / CHUNK
                                  : (n + CHUNK - 1) / CHUNK + (int)pool;
    r->cmds = calloc((size_t)max_chunks, sizeof *r->cmds);
    r->chunk_owner = calloc((size_t)max_chunks, sizeof *r->chunk_owner);
    char (*fields)[FIELD_LEN] = malloc(FIELD_LEN * (size_t)CHUNK);
    const char **fieldv = malloc(sizeof *fieldv * CHUNK);
    size_t *field_lens = malloc(sizeof *field_lens * CHUNK);
    struct lock_names *names = malloc(sizeof *names * CHUNK);
    uint64_t *levels = malloc(sizeof *levels * CHUNK);
    bool ok = r->due && r->cmds && r->chunk_owner && fields && fieldv && field_lens && names &&
              levels;
    if (!ok) {
        free(fields);
        free(fieldv);
        free(field_lens);
        free(names);
        free(levels);
        return -1;
    }
    /* A renewal that answers after a hold's validity ended comes too late
     * for it: the round waits no longer than the soonest validity, so that
     * a hung node makes the hold lost when its validity ends, not a timeout
     * later. A hold whose validity had ended before the round (its process
     * was stopped) does not shorten it: it waits for the node's verdict. */
    r->valid_until_ns = RLC_FOREVER_NS;
    for (struct hold *h = c->renewing; h; h = h->wd_next)
        if (!h->lost && h->n_attempts > 0 && h->next_renew_ns <= now + slack) {
            r->due[r->ndue++] = (struct due){
                h, h->id, h->attempts[0], (int)(h->owner % pool),
                by_hash_slot ? (int)slot_of(h->lock->key, h->lock->key_len) : 0, 0, 0};
            if (h->valid_until_ns > now && h->valid_until_ns < r->valid_until_ns)
                r->valid_until_ns = h->valid_until_ns;
        }
    qsort(r->due, (size_t)r->ndue, sizeof *r->due, by_slot);

    for (int first = 0; first < r->ndue;) {
        int m = 0;
        while (first + m < r->ndue && m < CHUNK && r->due[first + m].slot == r->due[first].slot &&
               r->due[first + m].hslot == r->due[first].hslot)
            m++;
        int k = r->nchunks++;
        r->chunk_owner[k] = r->due[first].h->owner;
        for (int j = 0; j < m; j++) {
            struct due *d = &r->due[first + j];
            struct hold *h = d->h;
            d->chunk = k;
            d->pos = j;
            names[j] = lock_names_of(h->lock);
            field_lens[j] = (size_t)client_field(c, h->owner, fields[j], FIELD_LEN);
            fieldv[j] = fields[j];
            levels[j] = d->level;
        }
        r->cmds[k] = call_renew_many(m, names, c->uuid, c->opts.watchdog_timeout_ms, fieldv,
                                     field_lens, levels);
        first += m;
    }
    free(fields);
    free(fieldv);
    free(field_lens);
    free(names);
    free(levels);
    return r->ndue;
}

/* Without mu: every chunk to every node, then all the replies. */
static void exchange(rlc_client *c, struct round *r)
{
    int n = c->n_nodes, total = r->nchunks * n;
    struct mux_req **reqs = malloc(sizeof *reqs * (size_t)total);
    r->res = calloc((size_t)total, sizeof *r->res);
    if (!reqs || !r->res) {
        free(reqs);
        free(r->res);
        r->res = NULL;
        return;
    }
    r->started_ns = rlc_now_ns();
    int k_sent = 0;
    for (int k = 0; k < r->nchunks; k++)
        for (int i = 0; i < n; i++) {
            if (!r->cmds[k]) { /* formatting failed: count it as no answer */
                r->res[k * n + i].status = RLC_E_NOMEM;
                continue;
            }
            reqs[k_sent] = mux_send(client_mux(c, i, r->chunk_owner[k]), r->cmds[k], &script_renew,
                                    c->call_timeout_ms);
            mux_cap_deadline(reqs[k_sent], r->valid_until_ns);
            k_sent++;
        }
    struct mux_result *got = calloc((size_t)(k_sent ? k_sent : 1), sizeof *got);
    if (!got) {
        free(reqs);
        free(r->res);
        r->res = NULL;
        return;
    }
    mux_wait(reqs, k_sent, got);
    int at = 0;
    for (int k = 0; k < r->nchunks; k++)
        for (int i = 0; i < n; i++)
            if (r->cmds[k])
                r->res[k * n + i] = got[at++];
    free(got);
    free(reqs);
}

/* Node i's verdict on the j-th key of chunk k: 1 renewed, 0 gone, -1 no answer. */
static int verdict(const struct round *r, int n, int k, int i, int j, int *status)
{
    const struct mux_result *res = &r->res[k * n + i];
    const redisReply *rep = res->reply;
    if (res->status != RLC_OK) {
        *status = res->status;
        return -1;
    }
    int v = rep ? answer_renew(rep, (size_t)j) : -1;
    if (v < 0)
        *status = rep && rep->type == REDIS_REPLY_ERROR ? RLC_E_SERVER : RLC_E_PROTOCOL;
    return v;
}

/* Under mu: applies the replies to the holds still alive. */
static void apply(rlc_client *c, struct round *r, int64_t now)
{
    int n = c->n_nodes;
    int64_t lease = c->opts.watchdog_timeout_ms;
    int64_t retry_ns = (lease / 10 > 5 ? lease / 10 : 5) * RLC_NS_PER_MS;
    for (int d = 0; d < r->ndue; d++) {
        struct hold *h = r->due[d].h;
        /* A hold being released is about to go; some nodes may already have
         * let it go, which is not a loss. */
        if (h->dead || h->id != r->due[d].id || h->lost || !h->watchdog || h->releasing ||
            h->n_attempts == 0 || h->attempts[0] != r->due[d].level)
            continue;
        int k = r->due[d].chunk, j = r->due[d].pos, yes = 0, gone = 0, status = RLC_E_TIMEOUT;
        bool late = !r->res;
        for (int i = 0; r->res && i < n; i++) {
            int v = verdict(r, n, k, i, j, &status);
            yes += v == 1;
            gone += v == 0;
            late = late || r->res[k * n + i].status != RLC_OK;
        }
        /* its claim counts at most the lease of a request that may still
         * run (E8); this one, unanswered somewhere, may run late too */
        int64_t claim = hold_claim_lease(h, lease);
        if (late)
            hold_note_late(h, lease);
        /* A yes renews even if it came late (the round is bounded by the
         * soonest validity, so only just): a node that says yes still had
         * the hold when the script ran, as an expired one answers no, so a
         * quorum of yeses kept it ours throughout. */
        int end = quorum_renew_end(n, yes, gone, 1);
        if (end == QE_DONE) {
            metrics_count(c, RLC_M_RENEWALS);
            int64_t valid_ms = claim - quorum_drift_ms(claim, c->opts.drift_factor);
            h->valid_until_ns = r->started_ns + valid_ms * RLC_NS_PER_MS;
            h->next_renew_ns = r->started_ns + claim * RLC_NS_PER_MS / 3;
        } else if (end == QE_NOT_HELD) {
            h->lost = RLC_E_LOST;
        } else if (now >= h->valid_until_ns) {
            h->lost = n == 1 ? status : RLC_E_NO_QUORUM;
        } else {
            /* Nodes are unreachable: try again soon, but not past validity. */
            h->next_renew_ns = now + retry_ns < h->valid_until_ns ? now + retry_ns
                                                                  : h->valid_until_ns;
        }
    }
}

/* Under mu: queues on_lost once per newly lost hold. */
static void notify(rlc_client *c, struct round *r)
{
    for (int d = 0; d < r->ndue; d++) {
        struct hold *h = r->due[d].h;
        if (h->dead || h->id != r->due[d].id || !h->lost || h->notified)
            continue;
        h->notified = true;
        client_queue_lost(c, h->lock, h->owner, h->lost);
    }
}

static void round_free(struct round *r, int n)
{
    for (int k = 0; r->cmds && k < r->nchunks; k++)
        cmd_unref(r->cmds[k]);
    for (int i = 0; r->res && i < r->nchunks * n; i++)
        if (r->res[i].reply)
            freeReplyObject(r->res[i].reply);
    free(r->res);
    free(r->cmds);
    free(r->chunk_owner);
    free(r->due);
}

int64_t watchdog_run(rlc_client *c)
{
    struct round r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&c->mu);
    int64_t now = rlc_now_ns();
    int got = collect(c, &r, now);
    if (got > 0) {
        c->round_busy = true;
        pthread_mutex_unlock(&c->mu);
        exchange(c, &r);
        pthread_mutex_lock(&c->mu);
        apply(c, &r, rlc_now_ns());
        notify(c, &r);
        c->round_busy = false;
        hold_free_graveyard(c);
    }
    int64_t next = next_wake(c);
    if (got < 0) /* out of memory: try again a little later */
        next = now + 100 * RLC_NS_PER_MS;
    c->watchdog_wake_ns = next;
    pthread_mutex_unlock(&c->mu);
    round_free(&r, c->n_nodes);
    return next;
}
