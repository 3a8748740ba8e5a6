/*
 * restart_rule.h - the node-restart guard's rule, shared by both drivers
 * (docs/design/redlock.md, "Node-restart guard"): what INFO server says of a
 * node's life, and how long a node that restarted does not vote.
 *
 * Pure: the caller keeps one record per node, passes the time in, and
 * sends INFO server ahead of each acquire on the acquire's own connection,
 * so the answer is read before the acquire's and costs no round trip.
 */
#ifndef RLC_RESTART_RULE_H
#define RLC_RESTART_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a client knows of one node's life. */
struct node_life {
    char run_id[41];       /* INFO server's run_id, "" before the first look */
    int64_t restarted_ms;  /* when a restart was seen to happen (the caller's
                              clock), 0: none that still matters */
};

/* Whether the guard is on: option restart_guard (1 on, 0 off, -1 default:
 * on for three nodes or more). Never for one node: nothing to outvote. */
bool restart_rule_on(int64_t option, int n_nodes);

/* The command to send: INFO server. */
struct rlc_cmd *restart_rule_info(void);

/* Reads one INFO server reply (its text, NUL-terminated; NULL when the node
 * did not answer it): a run_id other than the one recorded means the node
 * restarted uptime_in_seconds before now_ms. */
void restart_rule_observe(struct node_life *life, const char *info, int64_t now_ms);

/* How long the node's grants do not count yet: the longest lease the
 * client uses must pass after a restart. 0: they count (the record of a
 * restart that no longer matters is cleared). */
int64_t restart_rule_left_ms(struct node_life *life, int64_t max_lease_ms, int64_t now_ms);

/* Appends to why (len bytes used of size) the phrase for the error message:
 * "<label> restarted N ms ago (new run_id), not counted for M ms more".
 * Returns the new length. */
size_t restart_rule_why(char *why, size_t size, size_t len, const char *label,
                        const struct node_life *life, int64_t left_ms, int64_t now_ms);

#endif
