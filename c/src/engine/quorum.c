/*
 * quorum.c - counting votes and validity for Redlock (and for one node,
 * which is the quorum of one: the same rules, so one code path).
 */
#include <math.h>
#include <stdlib.h>

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
