/*
 * quorum.h - Redlock's arithmetic. Pure functions: no I/O, no clock reads.
 */
#ifndef RLC_QUORUM_H
#define RLC_QUORUM_H

#include <stdbool.h>
#include <stdint.h>

/* N/2 + 1: the smallest majority of n nodes. */
int quorum_of(int n);

/* lease * drift_factor + 2 ms, rounded up: what clock drift between the
 * client and the servers may eat of a lease. */
int64_t quorum_drift_ms(int64_t lease_ms, double drift_factor);

/* lease - elapsed - drift: how long a lock taken at elapsed_ns after the
 * first send is still certainly ours. <= 0 means it never was. */
int64_t quorum_validity_ms(int64_t lease_ms, int64_t elapsed_ns, double drift_factor);

/* The k-th largest of v[0..n) (k >= 1), or fallback when n < k; sorts v.
 * "The value at least k nodes reached": how a quorum reports a number. */
int64_t quorum_kth_largest(int64_t *v, int n, int k, int64_t fallback);

/* After a round that got no quorum: did contenders split the vote (retry
 * after a jitter), or may one other owner hold the lock (sleep until its
 * unlock message or its TTL)? holder_nodes[i]: how many nodes owner i holds;
 * unanswered: nodes that gave no verdict, which may be anyone's. A split
 * needs votes of our own, more than one node, and no single owner that can
 * reach a quorum even with every unanswered node. */
bool quorum_split_vote(int n, int q, int yes, const int *holder_nodes, int holders,
                       int unanswered);

#endif
