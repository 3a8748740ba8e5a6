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

/* ---- the verdict of one acquire round ------------------------------------ */

#define QUORUM_MAX_NODES 64

enum quorum_kind {
    QV_NONE = 0, /* no usable answer: cut, timed out, an error reply */
    QV_YES,      /* granted: value = the node's token */
    QV_BUSY,     /* held by holder: value = its pttl (-1: no expiry) */
    QV_UNDONE,   /* the attempt was undone before it arrived: it did nothing */
    QV_GUARDED   /* granted by a node that restarted within the longest lease
                    (restart_rule.h): it may hold our level, so it is undone,
                    but it does not count; value = ms until it counts again */
};

struct quorum_vote {
    int kind;
    int64_t value;
    bool inner;          /* QV_YES of a nested acquire: the outer level is in this life */
    const char *holder;  /* QV_BUSY: the holder's field ("" or NULL unknown) */
    size_t holder_len;
};

enum quorum_outcome {
    Q_HELD = 1,      /* a quorum granted it in time */
    Q_OUTER_LOST,    /* nested, but the hold it nests in is gone on a quorum */
    Q_LEASE_USED,    /* granted, but the lease was used up by the answers' time */
    Q_GUARDED,       /* a quorum granted it only with restarted nodes' grants,
                        which do not count yet: sleep_ms until the first counts */
    Q_BUSY,          /* another owner holds it (or the vote split) */
    Q_OUTAGE         /* too few answers to say */
};

struct quorum_verdict {
    int outcome;
    int yes, busy, unanswered, guarded;
    uint64_t token;   /* Q_HELD: the largest token of the granting nodes */
    int64_t validity_ms;
    bool split;       /* Q_BUSY: contenders split the vote: retry after a jitter */
    int64_t sleep_ms; /* Q_BUSY: when enough holders' leases end (-1 unknown);
                         Q_GUARDED: when the first guarded node counts again */
    bool undo[QUORUM_MAX_NODES]; /* nodes that may hold our level if it is not kept */
};

/* Decides an acquire round over n nodes from their votes. Pure: the engine
 * and the tests call it the same way (tests/c/test_quorum.c). */
void quorum_decide(const struct quorum_vote *v, int n, bool nested, int64_t lease_ms,
                   int64_t elapsed_ns, double drift_factor, struct quorum_verdict *out);

/* ---- when a loser looks again --------------------------------------------- */

/* No waiter tries again sooner than this unless a message woke it: it bounds
 * one waiter's tries to 200/s whatever the options. */
#define QUORUM_MIN_RETRY_MS 5

/* Waiters look at least this often without a message (a holder without
 * expiry, an unlock whose PUBLISH was refused); a lock's waiters in one
 * client share one such look. */
#define QUORUM_SAFETY_POLL_MS 1000

/* The pause after a split vote: the minimum and a part of retry_jitter_ms
 * picked by draw (a random number), so that contenders do not collide
 * again in lockstep. */
int64_t quorum_jitter_ms(uint64_t draw, int64_t retry_jitter_ms);

/* In how many ms a busy try looks again: when the holders' leases let a
 * quorum go (sleep_ms, -1 unknown), at least the minimum, at most the
 * safety poll. */
int64_t quorum_retry_ms(int64_t sleep_ms);

/* ---- what a quorum says of a release, an extend or a renewal -------------- */

/* Do k of n nodes make a quorum? */
bool quorum_has(int n, int k);

/* Did more than n - q nodes say no? Then no quorum can say yes. */
bool quorum_denied(int n, int no);

enum quorum_end {
    QE_DONE = 1, /* a quorum did it */
    QE_LATE,     /* a quorum renewed it, but the answers came after the validity
                    that renewal gives had ended: not certainly held */
    QE_NOT_HELD, /* no quorum can count it ours: lost, or never ours */
    QE_OUTAGE    /* too few answers to say */
};

/* A release round: done nodes took our level off (or found the lock gone
 * with it), refused nodes said the level was not ours. */
int quorum_release_end(int n, int done, int refused);

/* An extend or renewal round: yes nodes renewed the hold, gone nodes said it
 * is not ours; validity_ms is what the new lease, counted from the round's
 * start, still leaves when the answers are in (<= 0: it has ended). */
int quorum_renew_end(int n, int yes, int gone, int64_t validity_ms);

#endif
