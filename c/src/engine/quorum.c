/*
 * quorum.c - counting votes and validity for Redlock (and for one node,
 * which is the quorum of one: the same rules, so one code path).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quorum.h"

#define NS_PER_MS 1000000LL

int quorum_of(int n)
{
    return n / 2 + 1;
}

int64_t quorum_drift_ms(int64_t lease_ms, double drift_factor)
{
    return (int64_t)ceil((double)lease_ms * drift_factor) + 2;
}

int64_t quorum_validity_ms(int64_t lease_ms, int64_t elapsed_ns, double drift_factor)
{
    int64_t elapsed_ms = (elapsed_ns + NS_PER_MS - 1) / NS_PER_MS;
    return lease_ms - elapsed_ms - quorum_drift_ms(lease_ms, drift_factor);
}

static int descending(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int64_t quorum_kth_largest(int64_t *v, int n, int k, int64_t fallback)
{
    if (k < 1 || n < k)
        return fallback;
    qsort(v, (size_t)n, sizeof v[0], descending);
    return v[k - 1];
}

bool quorum_split_vote(int n, int q, int yes, const int *holder_nodes, int holders,
                       int unanswered)
{
    if (n < 2 || yes == 0)
        return false;
    for (int i = 0; i < holders; i++)
        if (holder_nodes[i] + unanswered >= q)
            return false;
    return true;
}

/* When a loser should look again: it needs q free nodes; the nodes that did
 * not refuse are free (or ours, undone), so it waits until enough of the
 * refusing nodes' leases have run out. -1: unknown (a holder without expiry). */
static int64_t sleep_for(const int64_t *busy_pttl, int busy, int n, int q)
{
    int need = q - (n - busy);
    if (need <= 0)
        return 0;
    int64_t v[QUORUM_MAX_NODES];
    for (int i = 0; i < busy; i++)
        v[i] = busy_pttl[i] < 0 ? INT64_MAX : busy_pttl[i];
    int64_t t = quorum_kth_largest(v, busy, busy - need + 1, -1);
    return t == INT64_MAX ? -1 : t;
}

static bool same_holder(const struct quorum_vote *a, const struct quorum_vote *b)
{
    size_t la = a->holder ? a->holder_len : 0, lb = b->holder ? b->holder_len : 0;
    return la == lb && (la == 0 || memcmp(a->holder, b->holder, la) == 0);
}

void quorum_decide(const struct quorum_vote *v, int n, bool nested, int64_t lease_ms,
                   int64_t elapsed_ns, double drift_factor, struct quorum_verdict *out)
{
    memset(out, 0, sizeof *out);
    int q = quorum_of(n), inner = 0, holders = 0;
    int64_t guard_ms = 0;
    int64_t busy_pttl[QUORUM_MAX_NODES];
    const struct quorum_vote *holder_of[QUORUM_MAX_NODES];
    int holder_nodes[QUORUM_MAX_NODES];
    for (int i = 0; i < n; i++) {
        /* a yes (counted or not), or no answer: the node may hold our level */
        out->undo[i] = v[i].kind == QV_YES || v[i].kind == QV_NONE || v[i].kind == QV_GUARDED;
        switch (v[i].kind) {
        case QV_YES:
            out->yes++;
            inner += v[i].inner;
            if ((uint64_t)v[i].value > out->token)
                out->token = (uint64_t)v[i].value;
            break;
        case QV_BUSY: {
            busy_pttl[out->busy++] = v[i].value;
            int k = 0;
            while (k < holders && !same_holder(holder_of[k], &v[i]))
                k++;
            if (k == holders) {
                holder_of[holders] = &v[i];
                holder_nodes[holders++] = 0;
            }
            holder_nodes[k]++;
            break;
        }
        case QV_GUARDED:
            /* not counted: for a split vote it is a node that said nothing */
            if (out->guarded++ == 0 || v[i].value < guard_ms)
                guard_ms = v[i].value;
            out->unanswered++;
            break;
        default:
            out->unanswered++;
            break;
        }
    }
    out->validity_ms = quorum_validity_ms(lease_ms, elapsed_ns, drift_factor);
    if (out->yes >= q && nested && inner < q) {
        out->outcome = Q_OUTER_LOST;
    } else if (out->yes >= q && out->validity_ms > 0) {
        out->outcome = Q_HELD;
    } else if (out->yes >= q) {
        out->outcome = Q_LEASE_USED;
    } else if (out->guarded > 0 && out->yes + out->guarded >= q) {
        out->outcome = Q_GUARDED;
        out->sleep_ms = guard_ms;
    } else if (out->yes + out->busy >= q) {
        out->outcome = Q_BUSY;
        out->split = quorum_split_vote(n, q, out->yes, holder_nodes, holders, out->unanswered);
        out->sleep_ms = sleep_for(busy_pttl, out->busy, n, q);
    } else {
        out->outcome = Q_OUTAGE;
    }
}

bool quorum_has(int n, int k)
{
    return k >= quorum_of(n);
}

bool quorum_denied(int n, int no)
{
    return no > n - quorum_of(n);
}

int quorum_release_end(int n, int done, int refused)
{
    return quorum_has(n, done)          ? QE_DONE
           : quorum_denied(n, refused) ? QE_NOT_HELD
                                       : QE_OUTAGE;
}

int quorum_renew_end(int n, int yes, int gone, int64_t validity_ms)
{
    if (quorum_has(n, yes))
        return validity_ms > 0 ? QE_DONE : QE_LATE;
    return quorum_denied(n, gone) ? QE_NOT_HELD : QE_OUTAGE;
}

int64_t quorum_jitter_ms(uint64_t draw, int64_t retry_jitter_ms)
{
    return QUORUM_MIN_RETRY_MS + (int64_t)(draw % (uint64_t)(retry_jitter_ms + 1));
}

int64_t quorum_retry_ms(int64_t sleep_ms)
{
    if (sleep_ms < 0 || sleep_ms > QUORUM_SAFETY_POLL_MS)
        return QUORUM_SAFETY_POLL_MS;
    return sleep_ms < QUORUM_MIN_RETRY_MS ? QUORUM_MIN_RETRY_MS : sleep_ms;
}
